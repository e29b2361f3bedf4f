//! Loop kernels compiled to lane bytecode.
//!
//! At compile time a [`LoopKernel`] becomes a [`LoopExec`]: the expression DAG split into a
//! prologue (per reduction point) and an epilogue (per output point) instruction list, and
//! the loop dims merged where every input allows it, with each input's layout classified
//! (contiguous, broadcast, strided). At run time [`exec`] evaluates chunks of points in
//! parallel.

pub(crate) mod exec;
pub(crate) mod lanes;

use lanes::{Access, Inst, InstKind, Layout};
use rlx_ir::kernel::{Expr, LoopKernel};
use rlx_ir::{BinaryOp, DType, ReduceOp, UnaryOp};

/// Outputs of at least this many points (64 MiB of f32, well past the L3 caches of the CPUs
/// we target) are written with non-temporal stores.
const STREAM_MIN_POINTS: usize = 16 << 20;

/// A set of loop dims and every input's strides over them.
#[derive(Debug, Clone)]
pub(crate) struct Space {
    pub dims: Vec<usize>,
    /// per input
    pub strides: Vec<Vec<isize>>,
    /// per input
    pub layouts: Vec<Layout>,
}

impl Space {
    /// Builds the space, dropping size-1 dims and merging adjacent dims that every input
    /// walks contiguously. An empty space becomes one dim of size 1.
    fn new(dims: &[usize], strides: Vec<Vec<isize>>) -> Space {
        let keep: Vec<usize> = (0..dims.len()).filter(|&d| dims[d] != 1).collect();
        let mut md: Vec<usize> = Vec::new();
        let mut ms: Vec<Vec<isize>> = vec![Vec::new(); strides.len()];
        for &d in &keep {
            let mergeable = !md.is_empty()
                && strides
                    .iter()
                    .zip(&ms)
                    .all(|(s, m)| *m.last().unwrap() == s[d] * dims[d] as isize);
            if mergeable {
                *md.last_mut().unwrap() *= dims[d];
                for (s, m) in strides.iter().zip(ms.iter_mut()) {
                    *m.last_mut().unwrap() = s[d];
                }
            } else {
                md.push(dims[d]);
                for (s, m) in strides.iter().zip(ms.iter_mut()) {
                    m.push(s[d]);
                }
            }
        }
        if md.is_empty() {
            md.push(1);
            ms.iter_mut().for_each(|m| m.push(0));
        }
        let contiguous: Vec<isize> = rlx_ir::contiguous_strides(&md)
            .into_iter()
            .map(|s| s as isize)
            .collect();
        let layouts = ms
            .iter()
            .map(|s| {
                if s.iter().all(|&x| x == 0) {
                    Layout::Broadcast
                } else if *s == contiguous {
                    Layout::Contiguous
                } else {
                    Layout::Strided
                }
            })
            .collect();
        Space {
            dims: md,
            strides: ms,
            layouts,
        }
    }

    /// How input `k` is read over this space.
    pub fn access(&self, k: usize) -> Access<'_> {
        Access {
            dims: &self.dims,
            strides: &self.strides[k],
            layout: self.layouts[k],
        }
    }

    /// Element offset of point `flat` for input `k`.
    pub fn offset(&self, k: usize, mut flat: usize) -> isize {
        let mut off = 0;
        for d in (0..self.dims.len()).rev() {
            off += (flat % self.dims[d]) as isize * self.strides[k][d];
            flat /= self.dims[d];
        }
        off
    }
}

/// How a reduction maps onto lanes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Strategy {
    /// lanes walk the reduction of one output point (long reductions)
    Inner,
    /// lanes walk output points, looping over reduction points (short reductions)
    Outer,
}

/// The reduction of a compiled kernel.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reduction {
    pub op: ReduceOp,
    /// register holding the per-point value
    pub value: usize,
    pub dtype: DType,
}

/// A compiled loop kernel.
#[derive(Debug, Clone)]
pub(crate) struct LoopExec {
    pub name: String,
    /// true: f32 lanes; false: f64 lanes with per-instruction rounding
    pub fast: bool,
    pub n_out: usize,
    pub n_red: usize,
    pub out: Space,
    pub red: Space,
    /// view offset per input
    pub offsets: Vec<isize>,
    pub prologue: Vec<Inst>,
    pub epilogue: Vec<Inst>,
    pub n_regs: usize,
    pub reduce: Option<Reduction>,
    pub result: usize,
    pub strategy: Strategy,
    /// worker threads, for the split-reduction decision
    pub threads: usize,
    /// `(register, input)`: epilogue loads of f32 inputs walked contiguously over the
    /// output space, read in place instead of copied into their register, or broadcast,
    /// filled once per worker (f32 lanes)
    pub direct_loads: Vec<(usize, usize)>,
    /// the epilogue's last instruction writes the result, which can then go straight to an
    /// f32 output
    pub direct_out: bool,
    /// the output is far larger than the caches: f32 results are written with
    /// non-temporal stores
    pub stream_out: bool,
}

fn insts(k: &LoopKernel, need: &[bool]) -> Vec<Inst> {
    k.body
        .iter()
        .enumerate()
        .filter(|(i, _)| need[*i])
        .map(|(i, n)| {
            let kind = match &n.expr {
                Expr::Load(k) => InstKind::Load(*k),
                Expr::Const(c) => InstKind::Const(n.dtype.round(*c)),
                Expr::Unary(u, a) => InstKind::Unary(*u, *a),
                Expr::Binary(b, x, y) => InstKind::Binary(*b, *x, *y, k.body[*x].dtype),
                Expr::Where(c, a, b) => InstKind::Where(*c, *a, *b),
                Expr::Cast(a) => InstKind::Cast(*a),
                Expr::Reduced => InstKind::Reduced,
            };
            Inst {
                dst: i,
                kind,
                dtype: n.dtype,
            }
        })
        .collect()
}

/// In f32 lanes every value is already an f32, so a cast to f32 changes nothing: its
/// readers read the source register instead and the copy is dropped. `result` and the
/// reduction's `value` register follow the rewrite.
fn elide_f32_casts(
    lists: [&mut Vec<Inst>; 2],
    n_regs: usize,
    result: &mut usize,
    value: Option<&mut usize>,
) {
    let mut to: Vec<usize> = (0..n_regs).collect();
    for list in lists {
        let mut kept = Vec::with_capacity(list.len());
        for inst in list.drain(..) {
            let kind = match inst.kind {
                InstKind::Cast(a) if inst.dtype == DType::F32 => {
                    to[inst.dst] = to[a];
                    continue;
                }
                InstKind::Cast(a) => InstKind::Cast(to[a]),
                InstKind::Unary(op, a) => InstKind::Unary(op, to[a]),
                InstKind::Binary(op, a, b, dt) => InstKind::Binary(op, to[a], to[b], dt),
                InstKind::Where(c, a, b) => InstKind::Where(to[c], to[a], to[b]),
                InstKind::MulAdd(x, y, z, op) => InstKind::MulAdd(to[x], to[y], to[z], op),
                k @ (InstKind::Load(_) | InstKind::Const(_) | InstKind::Reduced) => k,
            };
            kept.push(Inst { kind, ..inst });
        }
        *list = kept;
    }
    *result = to[*result];
    if let Some(v) = value {
        *v = to[*v];
    }
}

/// Fuses, in f32 lane code, `Add(Mul(x, y), z)` into one `MulAdd` and a following `Gelu`
/// into it, when the intermediate results have no other use (within `lists`, nor as one of
/// the `keep` registers). Fewer passes over each chunk, and one vector loop for the chain.
fn fuse(lists: [&mut Vec<Inst>; 2], keep: &[usize], n_regs: usize) {
    let mut uses = vec![0usize; n_regs];
    for i in lists.iter().flat_map(|l| l.iter()) {
        let ops: &[usize] = match &i.kind {
            InstKind::Unary(_, a) | InstKind::Cast(a) => &[*a],
            InstKind::Binary(_, a, b, _) => &[*a, *b],
            InstKind::Where(a, b, c) | InstKind::MulAdd(a, b, c, _) => &[*a, *b, *c],
            InstKind::Load(_) | InstKind::Const(_) | InstKind::Reduced => &[],
        };
        ops.iter().for_each(|&o| uses[o] += 1);
    }
    keep.iter().for_each(|&k| uses[k] += 2);
    let f32_reg = |l: &[Inst], r: usize| l.iter().position(|i| i.dst == r && i.dtype == DType::F32);
    for list in lists {
        let mut j = 0;
        while j < list.len() {
            let inst = list[j];
            let fused = match inst.kind {
                InstKind::Binary(BinaryOp::Add, a, b, DType::F32) if inst.dtype == DType::F32 => {
                    [(a, b), (b, a)].into_iter().find_map(|(m, c)| {
                        let p = f32_reg(&list[..j], m).filter(|_| uses[m] == 1)?;
                        match list[p].kind {
                            InstKind::Binary(BinaryOp::Mul, x, y, DType::F32) => {
                                Some((p, InstKind::MulAdd(x, y, c, None)))
                            }
                            _ => None,
                        }
                    })
                }
                InstKind::Unary(UnaryOp::GELU, a) if inst.dtype == DType::F32 => {
                    f32_reg(&list[..j], a)
                        .filter(|_| uses[a] == 1)
                        .and_then(|p| match list[p].kind {
                            InstKind::MulAdd(x, y, z, None) => {
                                Some((p, InstKind::MulAdd(x, y, z, Some(UnaryOp::GELU))))
                            }
                            _ => None,
                        })
                }
                _ => None,
            };
            match fused {
                Some((p, kind)) => {
                    list[j].kind = kind;
                    list.remove(p);
                }
                None => j += 1,
            }
        }
    }
}

fn lane_friendly(d: DType) -> bool {
    matches!(d, DType::F32 | DType::Bool)
}

/// f16 and bf16 values are exact in f32.
fn half_float(d: DType) -> bool {
    matches!(d, DType::F16 | DType::BF16)
}

/// 8- and 16-bit integers: every value is exact in f32, so a cast to one can run in f32
/// lanes (wrapping as the interpreter's cast does, [`lanes::wrap_to`]).
pub(crate) fn small_int(d: DType) -> bool {
    matches!(d, DType::I8 | DType::U8 | DType::I16 | DType::U16)
}

/// True when f32 lanes compute `k` exactly as the interpreter does: every value is f32 or
/// bool, except f16/bf16 inputs (loads widen them exactly) whose loads only feed casts,
/// integer inputs whose loads only feed casts to f32 (the load rounds once, as the cast
/// would), a result cast to f16/bf16 that nothing else reads (the store rounds it once,
/// as the cast would), and casts of f32 values to 8- or 16-bit integers read only as the
/// result or by casts to f32 (the cast wraps in f32 lanes exactly as the interpreter's
/// does; quantization's `round → clamp → cast to u8` is such a kernel). Mixed precision's
/// casts around matrix products, and masks cast to f32, are such kernels.
fn f32_lanes(k: &LoopKernel) -> bool {
    let used_by = |id: usize| {
        k.body
            .iter()
            .filter(move |n| n.expr.operands().contains(&id))
    };
    let node_ok = |(id, n): (usize, &rlx_ir::kernel::ExprNode)| {
        if lane_friendly(n.dtype) {
            return true;
        }
        match n.expr {
            // f16/bf16 widen exactly; an integer load rounds once, as its cast to f32 does
            Expr::Load(i) if half_float(n.dtype) => {
                k.inputs[i].dtype == n.dtype && used_by(id).all(|u| matches!(u.expr, Expr::Cast(_)))
            }
            Expr::Load(i) if n.dtype.is_int() => {
                k.inputs[i].dtype == n.dtype
                    && used_by(id).all(|u| matches!(u.expr, Expr::Cast(_)) && u.dtype == DType::F32)
            }
            Expr::Cast(a) if small_int(n.dtype) => {
                k.body[a].dtype == DType::F32
                    && if id == k.result {
                        used_by(id).next().is_none()
                    } else {
                        used_by(id)
                            .all(|u| matches!(u.expr, Expr::Cast(_)) && u.dtype == DType::F32)
                    }
            }
            Expr::Cast(_) => half_float(n.dtype) && id == k.result && used_by(id).next().is_none(),
            _ => false,
        }
    };
    k.body.iter().enumerate().all(node_ok)
        && k.inputs
            .iter()
            .all(|i| lane_friendly(i.dtype) || half_float(i.dtype) || i.dtype.is_int())
        && k.reduce.as_ref().is_none_or(|r| r.dtype == DType::F32)
}

impl LoopExec {
    /// Compiles a kernel that [`rlx_interp::check`] has accepted.
    pub fn compile(k: &LoopKernel, threads: usize) -> LoopExec {
        let n_dims = k.shape.len();
        let fast = f32_lanes(k);
        let out_strides = k
            .inputs
            .iter()
            .map(|i| i.view.strides[..n_dims].to_vec())
            .collect();
        let red_strides = k
            .inputs
            .iter()
            .map(|i| i.view.strides[n_dims..].to_vec())
            .collect();
        let out = Space::new(&k.shape, out_strides);
        let red = Space::new(&k.reduce_shape, red_strides);
        let reduce = k.reduce.as_ref().map(|r| Reduction {
            op: r.op,
            value: r.value,
            dtype: r.dtype,
        });
        let prologue = match &k.reduce {
            Some(r) => insts(k, &k.needed(&[r.value])),
            None => Vec::new(),
        };
        let mut prologue = prologue;
        let mut epilogue = insts(k, &k.needed(&[k.result]));
        let mut result = k.result;
        let mut reduce = reduce;
        if fast {
            let mut keep = vec![k.result];
            keep.extend(reduce.map(|r| r.value));
            fuse([&mut prologue, &mut epilogue], &keep, k.body.len());
            let value = reduce.as_mut().map(|r| &mut r.value);
            elide_f32_casts(
                [&mut prologue, &mut epilogue],
                k.body.len(),
                &mut result,
                value,
            );
        }
        let (n_out, n_red) = (k.numel(), k.reduce_numel());
        let direct_loads = if fast {
            epilogue
                .iter()
                .filter_map(|i| match i.kind {
                    InstKind::Load(inp)
                        if k.inputs[inp].dtype == DType::F32
                            && out.layouts[inp] != Layout::Strided =>
                    {
                        Some((i.dst, inp))
                    }
                    _ => None,
                })
                .collect()
        } else {
            Vec::new()
        };
        let direct_out = fast && epilogue.last().is_some_and(|i| i.dst == result);
        let strategy = if n_red < 64 && n_out >= 256 {
            Strategy::Outer
        } else {
            Strategy::Inner
        };
        LoopExec {
            name: k.name.clone(),
            fast,
            n_out,
            n_red,
            out,
            red,
            offsets: k.inputs.iter().map(|i| i.view.offset as isize).collect(),
            prologue,
            epilogue,
            n_regs: k.body.len(),
            reduce,
            result,
            strategy,
            threads: threads.max(1),
            direct_loads,
            direct_out,
            stream_out: fast && reduce.is_none() && n_out >= STREAM_MIN_POINTS,
        }
    }

    /// True when input 0 is read at exactly the output position (offset 0, row-major
    /// strides): a library epilogue can then run in place on the result.
    pub fn input0_is_identity(k: &LoopKernel) -> bool {
        let c: Vec<isize> = rlx_ir::contiguous_strides(&k.shape)
            .into_iter()
            .map(|s| s as isize)
            .collect();
        k.inputs.first().is_some_and(|i| {
            i.view.offset == 0
                && i.view.strides.len() == k.shape.len()
                && k.shape
                    .iter()
                    .zip(i.view.strides.iter().zip(&c))
                    .all(|(&d, (s, c))| d == 1 || s == c)
        })
    }
}
