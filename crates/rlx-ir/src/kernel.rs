//! The kernel IR: the contract between the optimizer and the code generators.
//!
//! A compiled graph is a [`KernelProgram`]: buffers (inputs, params, constants,
//! temporaries) and an ordered list of kernels. A kernel is either a fused [`LoopKernel`]
//! (a loop nest over static dims whose inputs are read through strided [`View`]s, an
//! expression DAG of scalar ops, an optional reduction with elementwise prologue and
//! epilogue) or a [`LibraryKernel`] (matmul, convolution, attention, ... run by a library or
//! template kernel, optionally followed by a fused elementwise epilogue).

use crate::op::{BinaryOp, Op, ReduceOp, UnaryOp};
use crate::{DType, TensorType};
use std::fmt;

/// Index of an expression in a kernel's body.
pub type ExprId = usize;

/// Index of a buffer in a [`KernelProgram`].
pub type BufferId = usize;

/// How a kernel input is read: element offset plus one stride per loop dim (output dims
/// first, then reduction dims). Stride 0 broadcasts; negative strides walk backwards.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct View {
    /// element offset of index (0, 0, ...)
    pub offset: usize,
    /// element stride per loop dim
    pub strides: Vec<isize>,
}

/// One scalar expression in a kernel body.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// Read input `n` at the current loop index through its view.
    Load(usize),
    /// A constant of the expression's dtype.
    Const(f64),
    /// Unary op.
    Unary(UnaryOp, ExprId),
    /// Binary op; the dtype of the operands is that of the left expression.
    Binary(BinaryOp, ExprId, ExprId),
    /// `cond ? a : b`.
    Where(ExprId, ExprId, ExprId),
    /// Convert the operand to this expression's dtype.
    Cast(ExprId),
    /// The finished reduction value (only in the epilogue).
    Reduced,
}

impl Expr {
    /// The expressions this one reads, in operand order.
    pub fn operands(&self) -> Vec<ExprId> {
        match self {
            Expr::Load(_) | Expr::Const(_) | Expr::Reduced => Vec::new(),
            Expr::Unary(_, a) | Expr::Cast(a) => vec![*a],
            Expr::Binary(_, a, b) => vec![*a, *b],
            Expr::Where(c, a, b) => vec![*c, *a, *b],
        }
    }
}

/// An expression and the dtype it produces.
#[derive(Debug, Clone, PartialEq)]
pub struct ExprNode {
    /// the expression
    pub expr: Expr,
    /// its result dtype
    pub dtype: DType,
}

/// An input of a loop kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelInput {
    /// which program buffer
    pub buffer: BufferId,
    /// element type of that buffer
    pub dtype: DType,
    /// how it is indexed
    pub view: View,
}

/// The reduction of a loop kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelReduce {
    /// how values combine
    pub op: ReduceOp,
    /// the per-point value (the prologue's result)
    pub value: ExprId,
    /// dtype of the accumulator and result
    pub dtype: DType,
}

/// A fused loop nest: `for idx in shape (x reduce_shape): out[idx] = body`.
#[derive(Debug, Clone, PartialEq)]
pub struct LoopKernel {
    /// name for dumps and profiles
    pub name: String,
    /// output dims (the output is contiguous row-major over them)
    pub shape: Vec<usize>,
    /// reduction dims, iterated inside each output point; empty when elementwise
    pub reduce_shape: Vec<usize>,
    /// inputs with their views over `shape ++ reduce_shape`
    pub inputs: Vec<KernelInput>,
    /// the expression DAG; each node refers only to earlier ones
    pub body: Vec<ExprNode>,
    /// the reduction, if any
    pub reduce: Option<KernelReduce>,
    /// the expression stored to the output
    pub result: ExprId,
    /// the output buffer
    pub output: BufferId,
}

impl LoopKernel {
    /// Number of output elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Number of reduction points per output element.
    pub fn reduce_numel(&self) -> usize {
        self.reduce_shape.iter().product()
    }

    /// The dtype stored to the output.
    pub fn out_dtype(&self) -> DType {
        self.body[self.result].dtype
    }

    /// True when this kernel can run as a library kernel's fused epilogue, applied to each
    /// result element inside the library kernel: it is elementwise, and input 0 reads the
    /// library result itself (contiguous, from offset 0), so each element needs only its own
    /// library value.
    pub fn fusable_epilogue(&self) -> bool {
        let Some(first) = self.inputs.first() else {
            return false;
        };
        let identity = first.view.offset == 0 && first.view.strides == row_major(&self.shape);
        identity && self.reduce.is_none() && self.reduce_numel() == 1
    }

    /// Marks the body nodes that `roots` depend on (the roots included), so an emitter
    /// writes only what an output needs.
    pub fn needed(&self, roots: &[ExprId]) -> Vec<bool> {
        let mut need = vec![false; self.body.len()];
        for &r in roots {
            need[r] = true;
        }
        for i in (0..self.body.len()).rev() {
            if need[i] {
                for a in self.body[i].expr.operands() {
                    need[a] = true;
                }
            }
        }
        need
    }

    /// Which body nodes run once per output point (after the reduction) rather than per
    /// reduction point: those that depend on [`Expr::Reduced`].
    pub fn epilogue_mask(&self) -> Vec<bool> {
        let mut mask = vec![false; self.body.len()];
        for (i, n) in self.body.iter().enumerate() {
            mask[i] = match &n.expr {
                Expr::Reduced => true,
                Expr::Load(_) | Expr::Const(_) => false,
                Expr::Unary(_, a) | Expr::Cast(a) => mask[*a],
                Expr::Binary(_, a, b) => mask[*a] || mask[*b],
                Expr::Where(c, a, b) => mask[*c] || mask[*a] || mask[*b],
            };
        }
        mask
    }

    /// Checks internal consistency: references point backwards, views have one stride per
    /// loop dim, a reduction exists iff there are reduction dims, epilogue loads do not
    /// move along reduction dims, and operand dtypes agree.
    ///
    /// # Errors
    /// A sentence naming the kernel and the broken rule.
    pub fn verify(&self) -> Result<(), String> {
        let dims = self.shape.len() + self.reduce_shape.len();
        let err = |m: String| Err(format!("kernel `{}`: {m}", self.name));
        for (i, inp) in self.inputs.iter().enumerate() {
            if inp.view.strides.len() != dims {
                return err(format!(
                    "input {i} view has {} strides for {dims} loop dims",
                    inp.view.strides.len()
                ));
            }
        }
        if self.reduce.is_none() && self.reduce_numel() != 1 {
            return err("reduction dims without a reduction".into());
        }
        for (i, n) in self.body.iter().enumerate() {
            let refs: Vec<ExprId> = match &n.expr {
                Expr::Load(k) => {
                    let Some(inp) = self.inputs.get(*k) else {
                        return err(format!("expr {i} loads missing input {k}"));
                    };
                    if inp.dtype != n.dtype {
                        return err(format!("expr {i} loads {} as {}", inp.dtype, n.dtype));
                    }
                    vec![]
                }
                Expr::Const(_) => vec![],
                Expr::Reduced => {
                    let Some(r) = &self.reduce else {
                        return err(format!(
                            "expr {i} reads a reduction the kernel does not have"
                        ));
                    };
                    if r.dtype != n.dtype {
                        return err(format!(
                            "expr {i} reads the {} reduction as {}",
                            r.dtype, n.dtype
                        ));
                    }
                    vec![]
                }
                Expr::Unary(_, a) | Expr::Cast(a) => vec![*a],
                Expr::Binary(_, a, b) => vec![*a, *b],
                Expr::Where(c, a, b) => vec![*c, *a, *b],
            };
            if let Some(bad) = refs.iter().find(|&&r| r >= i) {
                return err(format!("expr {i} refers forward to expr {bad}"));
            }
        }
        if self.result >= self.body.len() {
            return err("result refers past the body".into());
        }
        if let Some(r) = &self.reduce {
            if r.value >= self.body.len() || self.epilogue_mask()[r.value] {
                return err("the reduced value must be a prologue expression".into());
            }
            let mask = self.epilogue_mask();
            let n_out = self.shape.len();
            for (i, n) in self.body.iter().enumerate() {
                if let Expr::Load(k) = n.expr {
                    let used_in_epilogue = self
                        .body
                        .iter()
                        .enumerate()
                        .any(|(j, m)| mask[j] && uses(&m.expr, i));
                    if used_in_epilogue
                        && self.inputs[k].view.strides[n_out..].iter().any(|&s| s != 0)
                    {
                        return err(format!(
                            "epilogue load of input {k} moves along reduction dims"
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

fn uses(e: &Expr, id: ExprId) -> bool {
    match e {
        Expr::Unary(_, a) | Expr::Cast(a) => *a == id,
        Expr::Binary(_, a, b) => *a == id || *b == id,
        Expr::Where(c, a, b) => *c == id || *a == id || *b == id,
        _ => false,
    }
}

/// A kernel run by a library or template implementation: the graph op with its operand
/// buffers, plus an optional elementwise epilogue applied to each result element.
#[derive(Debug, Clone, PartialEq)]
pub struct LibraryKernel {
    /// name for dumps and profiles
    pub name: String,
    /// the op (matmul, conv2d, attention, softmax, gather, ...)
    pub op: Op,
    /// operand buffers in the op's input order
    pub inputs: Vec<BufferId>,
    /// the result buffer
    pub output: BufferId,
    /// fused epilogue: a loop kernel over the result shape whose input 0 is the library
    /// result (its `buffer` field is ignored), or None
    pub epilogue: Option<LoopKernel>,
}

/// Either kind of kernel.
#[derive(Debug, Clone, PartialEq)]
pub enum Kernel {
    /// fused loop nest
    Loop(LoopKernel),
    /// library/template kernel
    Library(LibraryKernel),
}

impl Kernel {
    /// The kernel's name.
    pub fn name(&self) -> &str {
        match self {
            Kernel::Loop(k) => &k.name,
            Kernel::Library(k) => &k.name,
        }
    }

    /// The buffer it writes.
    pub fn output(&self) -> BufferId {
        match self {
            Kernel::Loop(k) => k.output,
            Kernel::Library(k) => k.output,
        }
    }

    /// The buffers it reads.
    pub fn reads(&self) -> Vec<BufferId> {
        match self {
            Kernel::Loop(k) => k.inputs.iter().map(|i| i.buffer).collect(),
            Kernel::Library(k) => {
                let mut r = k.inputs.clone();
                if let Some(e) = &k.epilogue {
                    r.extend(e.inputs.iter().skip(1).map(|i| i.buffer));
                }
                r
            }
        }
    }
}

/// Where a buffer's contents come from.
#[derive(Debug, Clone, PartialEq)]
pub enum BufferKind {
    /// bound at each run by input name
    Input(String),
    /// bound once by param name
    Param(String),
    /// a constant baked in at compile time
    Constant(std::sync::Arc<crate::Tensor>),
    /// written by a kernel; lives in the planned arena
    Temp,
}

/// One buffer of a program. Shapes are static: programs are compiled for bound shapes.
#[derive(Debug, Clone, PartialEq)]
pub struct Buffer {
    /// dtype and static shape
    pub ty: TensorType,
    /// where the contents come from
    pub kind: BufferKind,
    /// when set, this buffer is a row-major reinterpretation of another (reshape)
    pub alias_of: Option<BufferId>,
}

/// A whole compiled graph in kernel IR.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct KernelProgram {
    /// all buffers
    pub buffers: Vec<Buffer>,
    /// kernels in execution order
    pub kernels: Vec<Kernel>,
    /// named outputs
    pub outputs: Vec<(String, BufferId)>,
}

impl KernelProgram {
    /// Whether a value of `dtype` and `shape` fits buffer `b` as compiled: None when it does,
    /// else `"compiled for f32[2,3], got f16[2, 3]"` (for a binding's error).
    pub fn buffer_mismatch(&self, b: BufferId, dtype: DType, shape: &[usize]) -> Option<String> {
        let ty = &self.buffers[b].ty;
        let want = ty.shape.as_static().unwrap_or_default();
        (dtype != ty.dtype || shape != want.as_slice())
            .then(|| format!("compiled for {ty}, got {dtype}{shape:?}"))
    }
}

impl fmt::Display for LoopKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "loop {} shape={:?} reduce={:?} -> b{}",
            self.name, self.shape, self.reduce_shape, self.output
        )?;
        for (i, inp) in self.inputs.iter().enumerate() {
            writeln!(
                f,
                "  in{i} = b{} {} offset={} strides={:?}",
                inp.buffer, inp.dtype, inp.view.offset, inp.view.strides
            )?;
        }
        for (i, n) in self.body.iter().enumerate() {
            let e = match &n.expr {
                Expr::Load(k) => format!("load in{k}"),
                Expr::Const(c) => format!("const {c}"),
                Expr::Unary(u, a) => format!("{}(e{a})", u.name()),
                Expr::Binary(b, x, y) => format!("{}(e{x}, e{y})", b.name()),
                Expr::Where(c, a, b) => format!("where(e{c}, e{a}, e{b})"),
                Expr::Cast(a) => format!("cast(e{a})"),
                Expr::Reduced => "reduced".to_string(),
            };
            writeln!(f, "  e{i}: {} = {e}", n.dtype)?;
        }
        if let Some(r) = &self.reduce {
            writeln!(f, "  reduce {} of e{} : {}", r.op.name(), r.value, r.dtype)?;
        }
        writeln!(f, "  store e{}", self.result)
    }
}

impl fmt::Display for KernelProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.buffers.iter().enumerate() {
            let kind = match &b.kind {
                BufferKind::Input(n) => format!("input \"{n}\""),
                BufferKind::Param(n) => format!("param \"{n}\""),
                BufferKind::Constant(_) => "constant".to_string(),
                BufferKind::Temp => "temp".to_string(),
            };
            let alias = b
                .alias_of
                .map(|a| format!(" alias of b{a}"))
                .unwrap_or_default();
            writeln!(f, "b{i}: {} {kind}{alias}", b.ty)?;
        }
        for k in &self.kernels {
            match k {
                Kernel::Loop(l) => write!(f, "{l}")?,
                Kernel::Library(l) => {
                    let ins: Vec<String> = l.inputs.iter().map(|b| format!("b{b}")).collect();
                    writeln!(
                        f,
                        "library {} {}({}) {} -> b{}",
                        l.name,
                        l.op.name(),
                        ins.join(", "),
                        l.op.attrs(),
                        l.output
                    )?;
                    if let Some(e) = &l.epilogue {
                        write!(f, "  epilogue ")?;
                        write!(f, "{e}")?;
                    }
                }
            }
        }
        for (n, b) in &self.outputs {
            writeln!(f, "output \"{n}\" = b{b}")?;
        }
        Ok(())
    }
}

/// A loop space after merging: its dims and the strides each view uses over them.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexSpace {
    /// merged dims (row-major, no size-1 dims)
    pub dims: Vec<usize>,
    /// per view, one stride per merged dim
    pub strides: Vec<Vec<isize>>,
}

impl IndexSpace {
    /// Drops size-1 dims and merges neighbours `i, i+1` wherever every view has
    /// `stride[i] == stride[i+1] * dims[i+1]`. The row-major order of the space is unchanged,
    /// so a linear index over the merged dims addresses the same elements with fewer
    /// divisions.
    pub fn merge(dims: &[usize], strides: &[Vec<isize>]) -> IndexSpace {
        let mut out_dims: Vec<usize> = Vec::new();
        let mut out_strides: Vec<Vec<isize>> = vec![Vec::new(); strides.len()];
        for d in (0..dims.len()).filter(|&d| dims[d] != 1) {
            let mergeable = !out_dims.is_empty()
                && strides
                    .iter()
                    .zip(&out_strides)
                    .all(|(s, o)| o.last() == Some(&(s[d] * dims[d] as isize)));
            if let (true, Some(last)) = (mergeable, out_dims.last_mut()) {
                *last *= dims[d];
                for (s, o) in strides.iter().zip(out_strides.iter_mut()) {
                    if let Some(l) = o.last_mut() {
                        *l = s[d];
                    }
                }
            } else {
                out_dims.push(dims[d]);
                for (s, o) in strides.iter().zip(out_strides.iter_mut()) {
                    o.push(s[d]);
                }
            }
        }
        IndexSpace {
            dims: out_dims,
            strides: out_strides,
        }
    }
}

/// Contiguous row-major element strides of `dims`, signed as views use them.
pub fn row_major(dims: &[usize]) -> Vec<isize> {
    crate::contiguous_strides(dims)
        .into_iter()
        .map(|s| s as isize)
        .collect()
}

#[cfg(test)]
mod index_tests {
    use super::*;

    #[test]
    fn merge_joins_contiguous_dims_and_drops_ones() {
        let dims = [2, 1, 3, 4];
        let a = row_major(&dims);
        let m = IndexSpace::merge(&dims, &[a]);
        assert_eq!(m.dims, vec![24]);
        assert_eq!(m.strides, vec![vec![1]]);
    }

    #[test]
    fn merge_joins_contiguous_and_broadcast_runs() {
        // [2,3,4] contiguous and a bias broadcast over the first two dims.
        let sp = IndexSpace::merge(&[2, 3, 4], &[vec![12, 4, 1], vec![0, 0, 1]]);
        assert_eq!(sp.dims, vec![6, 4]);
        assert_eq!(sp.strides, vec![vec![4, 1], vec![0, 1]]);
        let sp = IndexSpace::merge(&[2, 1, 4], &[vec![4, 99, 1]]);
        assert_eq!(sp.dims, vec![8]);
        assert_eq!(sp.strides, vec![vec![1]]);
        // A transpose stays two dims.
        let sp = IndexSpace::merge(&[3, 4], &[vec![1, 3]]);
        assert_eq!(sp.dims, vec![3, 4]);
    }

    #[test]
    fn merge_keeps_dims_a_broadcast_view_splits() {
        // out [2,3,4] contiguous; b broadcasts over the middle dim.
        let dims = [2, 3, 4];
        let m = IndexSpace::merge(&dims, &[row_major(&dims), vec![4, 0, 1]]);
        assert_eq!(m.dims, vec![2, 3, 4]);
        assert_eq!(m.strides, vec![vec![12, 4, 1], vec![4, 0, 1]]);
    }

    #[test]
    fn needed_follows_operands_backwards() {
        use crate::UnaryOp;
        let node = |expr| ExprNode {
            expr,
            dtype: DType::F32,
        };
        let k = LoopKernel {
            name: "k".into(),
            shape: vec![4],
            reduce_shape: vec![],
            inputs: vec![],
            body: vec![
                node(Expr::Const(1.0)),
                node(Expr::Const(2.0)),
                node(Expr::Unary(UnaryOp::Neg, 1)),
                node(Expr::Binary(crate::BinaryOp::Add, 0, 0)),
            ],
            reduce: None,
            result: 3,
            output: 0,
        };
        assert_eq!(k.needed(&[2]), vec![false, true, true, false]);
        assert_eq!(k.needed(&[3]), vec![true, false, false, true]);
    }
}
