//! Lowering: a graph with static shapes becomes a [`KernelProgram`] of fused loop kernels
//! and library kernels.
//!
//! `plan` decides which nodes get a kernel; `builder` writes each loop kernel's body
//! through `index_map` views. In the program:
//! - leaves are buffers (inputs and params in declaration order, constants when first
//!   read); scalar constants inside loop bodies become `Expr::Const`;
//! - each root is one kernel writing one new buffer, in graph order;
//! - a root reshape of a buffer is an alias of it (`alias_of`), with no kernel;
//! - a library op fused with its elementwise readers is a [`LibraryKernel`] whose
//!   `epilogue` loop kernel reads the library result as input 0 (a contiguous view over the
//!   result shape, with the op's dtype) and writes the kernel's `output` buffer; the
//!   library kernel's `output` is that same buffer.

mod builder;
mod fused_bias;
mod index_map;
mod plan;
mod stats;

pub use fused_bias::{fused_biases, FusedBias};
pub use stats::{lower_stats, LowerStats};

use crate::OptError;
use builder::{Absorbed, BodyBuilder};
use index_map::IndexMap;
use plan::{kind, Kind, Plan, Role};
use rlx_ir::kernel::{
    Buffer, BufferId, BufferKind, Kernel, KernelInput, KernelProgram, KernelReduce, LibraryKernel,
    LoopKernel,
};
use rlx_ir::{Dim, Graph, NodeId, Op, TensorType};

/// Lowers `graph` (static shapes) to kernel IR with fusion.
///
/// # Errors
/// [`OptError::Symbolic`] naming the first node with a symbolic dim;
/// [`OptError::Kernel`] if a built kernel fails its verifier (a lowering bug).
pub fn lower(graph: &Graph) -> Result<KernelProgram, OptError> {
    check_static(graph)?;
    let mut low = Lowering {
        graph,
        plan: plan::plan(graph),
        program: KernelProgram::default(),
        buffer_of: vec![None; graph.nodes().len()],
    };
    for (idx, node) in graph.nodes().iter().enumerate() {
        if matches!(node.op, Op::Input { .. } | Op::Param { .. }) {
            low.buffer_for(NodeId(idx));
        }
    }
    for idx in 0..graph.nodes().len() {
        if low.plan.roles[idx] == Role::Root {
            low.emit_root(NodeId(idx))?;
        }
    }
    for (name, id) in graph.outputs() {
        let b = low.buffer_for(*id);
        low.program.outputs.push((name.clone(), b));
    }
    Ok(low.program)
}

/// The text of the kernel program for `graph` (`rlx dump --stage kernels`).
///
/// # Errors
/// As [`lower`].
pub fn dump_kernels(graph: &Graph) -> Result<String, OptError> {
    Ok(lower(graph)?.to_string())
}

fn check_static(graph: &Graph) -> Result<(), OptError> {
    for node in graph.nodes() {
        if let Some(Dim::Sym(s)) = node
            .ty
            .shape
            .dims()
            .iter()
            .find(|d| d.as_static().is_none())
        {
            return Err(OptError::Symbolic {
                node: node.name.clone(),
                op: node.op.name(),
                ty: node.ty.to_string(),
                symbol: s.to_string(),
            });
        }
    }
    Ok(())
}

/// The state of one lowering: the plan, the program so far, and each node's buffer.
pub(crate) struct Lowering<'g> {
    graph: &'g Graph,
    plan: Plan,
    program: KernelProgram,
    buffer_of: Vec<Option<BufferId>>,
}

impl<'g> Lowering<'g> {
    /// Static dims of a node.
    fn dims(&self, id: NodeId) -> Vec<usize> {
        self.graph
            .ty(id)
            .shape
            .as_static()
            .expect("shapes are checked static")
    }

    /// The buffer of a leaf (created on first use) or of an already emitted root.
    fn existing_buffer(&mut self, id: NodeId) -> Option<BufferId> {
        if let Some(b) = self.buffer_of[id.0] {
            return Some(b);
        }
        let node = self.graph.node(id);
        let kind = match &node.op {
            Op::Input { name } => BufferKind::Input(name.clone()),
            Op::Param { name } => BufferKind::Param(name.clone()),
            Op::Constant(t) => BufferKind::Constant(t.clone()),
            _ => return None,
        };
        let b = self.new_buffer(node.ty.clone(), kind, None);
        self.buffer_of[id.0] = Some(b);
        Some(b)
    }

    /// Like [`Lowering::existing_buffer`], for nodes the plan guarantees a buffer.
    fn buffer_for(&mut self, id: NodeId) -> BufferId {
        self.existing_buffer(id).unwrap_or_else(|| {
            panic!(
                "node `{}` ({:?}) is read as a buffer before one exists",
                self.graph.node(id).name,
                self.plan.roles[id.0]
            )
        })
    }

    /// Follows `alias_of` to the buffer that owns the memory.
    fn base_buffer(&self, mut b: BufferId) -> BufferId {
        while let Some(a) = self.program.buffers[b].alias_of {
            b = a;
        }
        b
    }

    fn new_buffer(
        &mut self,
        ty: TensorType,
        kind: BufferKind,
        alias: Option<BufferId>,
    ) -> BufferId {
        self.program.buffers.push(Buffer {
            ty,
            kind,
            alias_of: alias,
        });
        self.program.buffers.len() - 1
    }

    fn temp_for(&mut self, id: NodeId) -> BufferId {
        let b = self.new_buffer(self.graph.ty(id).clone(), BufferKind::Temp, None);
        self.buffer_of[id.0] = Some(b);
        b
    }

    /// Emits the kernel (or alias) computing root `id`.
    fn emit_root(&mut self, id: NodeId) -> Result<(), OptError> {
        let g = self.graph;
        let node = g.node(id);
        if let Op::Reshape(_) = node.op {
            if let Some(src) = self.existing_buffer(node.inputs[0]) {
                let b = self.new_buffer(node.ty.clone(), BufferKind::Temp, Some(src));
                self.buffer_of[id.0] = Some(b);
                return Ok(());
            }
        }
        let absorbed = self.plan.absorbs[id.0];
        match (kind(&node.op), absorbed) {
            (Kind::Library, _) => {
                let inputs = self.library_inputs(id);
                let output = self.temp_for(id);
                self.push_library(id, inputs, output, None);
                Ok(())
            }
            (_, Some(lib)) if kind(&g.node(lib).op) == Kind::Library => {
                self.emit_library_with_epilogue(lib, id)
            }
            (Kind::Reduce, None) => self.emit_reduce(id, id),
            (_, Some(r)) => self.emit_reduce(r, id),
            (_, None) => {
                let rank = node.ty.shape.rank();
                let mut bb = BodyBuilder::new(self, id, None, rank);
                let result = bb.build(id, &IndexMap::identity(rank, rank));
                let (inputs, body) = (bb.inputs, bb.body);
                let output = self.temp_for(id);
                let k = LoopKernel {
                    name: node.name.clone(),
                    shape: self.dims(id),
                    reduce_shape: Vec::new(),
                    inputs,
                    body,
                    reduce: None,
                    result,
                    output,
                };
                self.push_loop(id, k)
            }
        }
    }

    /// A reduction `r` fused with its epilogue up to `root` (`r == root`: no epilogue).
    fn emit_reduce(&mut self, r: NodeId, root: NodeId) -> Result<(), OptError> {
        let g = self.graph;
        let Op::Reduce { op, axes, keepdims } = &g.node(r).op else {
            unreachable!("the plan only fuses reductions and library ops")
        };
        let x = g.node(r).inputs[0];
        let x_dims = self.dims(x);
        let out_dims = self.dims(root);
        let n_loop = out_dims.len() + axes.len();
        let mut bb = BodyBuilder::new(self, root, Some(Absorbed::Reduce(r)), n_loop);
        let in_map = IndexMap::reduce_input(x_dims.len(), axes, *keepdims, n_loop);
        let value = bb.build(x, &in_map);
        let result = bb.build(root, &IndexMap::identity(out_dims.len(), n_loop));
        let (inputs, body) = (bb.inputs, bb.body);
        let output = self.temp_for(root);
        let k = LoopKernel {
            name: g.node(root).name.clone(),
            shape: out_dims,
            reduce_shape: axes.iter().map(|&a| x_dims[a]).collect(),
            inputs,
            body,
            reduce: Some(KernelReduce {
                op: *op,
                value,
                dtype: g.ty(r).dtype,
            }),
            result,
            output,
        };
        self.push_loop(root, k)
    }

    /// Library op `lib` whose elementwise readers up to `root` run as its epilogue.
    fn emit_library_with_epilogue(&mut self, lib: NodeId, root: NodeId) -> Result<(), OptError> {
        let g = self.graph;
        let lib_inputs = self.library_inputs(lib);
        let shape = self.dims(root);
        let rank = shape.len();
        let mut bb = BodyBuilder::new(self, root, Some(Absorbed::Library(lib)), rank);
        bb.add_input(KernelInput {
            buffer: 0,
            dtype: g.ty(lib).dtype,
            view: IndexMap::identity(rank, rank).view(&shape),
        });
        let result = bb.build(root, &IndexMap::identity(rank, rank));
        let (mut inputs, body) = (bb.inputs, bb.body);
        let output = self.temp_for(root);
        inputs[0].buffer = output;
        let epilogue = LoopKernel {
            name: format!("{}_epilogue", g.node(root).name),
            shape,
            reduce_shape: Vec::new(),
            inputs,
            body,
            reduce: None,
            result,
            output,
        };
        verify_loop(g, root, &epilogue)?;
        self.push_library(lib, lib_inputs, output, Some(epilogue));
        Ok(())
    }

    fn library_inputs(&mut self, id: NodeId) -> Vec<BufferId> {
        self.graph
            .node(id)
            .inputs
            .iter()
            .map(|&i| self.buffer_for(i))
            .collect()
    }

    fn push_library(
        &mut self,
        id: NodeId,
        inputs: Vec<BufferId>,
        output: BufferId,
        epilogue: Option<LoopKernel>,
    ) {
        let node = self.graph.node(id);
        self.program.kernels.push(Kernel::Library(LibraryKernel {
            name: node.name.clone(),
            op: node.op.clone(),
            inputs,
            output,
            epilogue,
        }));
    }

    fn push_loop(&mut self, root: NodeId, k: LoopKernel) -> Result<(), OptError> {
        verify_loop(self.graph, root, &k)?;
        self.program.kernels.push(Kernel::Loop(k));
        Ok(())
    }
}

fn verify_loop(g: &Graph, root: NodeId, k: &LoopKernel) -> Result<(), OptError> {
    k.verify().map_err(|message| {
        let node = g.node(root);
        OptError::Kernel {
            node: node.name.clone(),
            op: node.op.name(),
            ty: node.ty.to_string(),
            message,
        }
    })
}

#[cfg(test)]
mod tests;
