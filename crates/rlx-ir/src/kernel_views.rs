//! Queries over a kernel program's buffers that the kernel-IR passes (`rlx-opt`'s
//! `kernel_passes`) and every backend's planner share: the root a buffer aliases, who reads
//! and writes each root, whether a loop kernel only copies, whether a root is an output.

use crate::kernel::{BufferId, Expr, Kernel, KernelProgram, LoopKernel};
use std::collections::HashMap;

/// The buffer `b` aliases (through reshapes), or `b` itself. A malformed chain that loops
/// stops after as many hops as there are buffers (the CPU's program check reports it).
pub fn root(program: &KernelProgram, mut b: BufferId) -> BufferId {
    for _ in 0..program.buffers.len() {
        match program.buffers.get(b).and_then(|x| x.alias_of) {
            Some(a) => b = a,
            None => break,
        }
    }
    b
}

/// Who reads and writes each root buffer: (kernel index, buffer as named, operand slot;
/// `usize::MAX` for an epilogue input).
pub struct Uses {
    reads: HashMap<BufferId, Vec<(usize, BufferId, usize)>>,
    writes: HashMap<BufferId, Vec<usize>>,
}

impl Uses {
    /// Every read and write of `program`'s kernels, by root buffer.
    pub fn of(program: &KernelProgram) -> Uses {
        let mut uses = Uses {
            reads: HashMap::new(),
            writes: HashMap::new(),
        };
        for (i, kernel) in program.kernels.iter().enumerate() {
            let mut read = |b: BufferId, slot: usize| {
                uses.reads
                    .entry(root(program, b))
                    .or_default()
                    .push((i, b, slot));
            };
            match kernel {
                Kernel::Loop(l) => l
                    .inputs
                    .iter()
                    .enumerate()
                    .for_each(|(s, x)| read(x.buffer, s)),
                Kernel::Library(l) => {
                    l.inputs.iter().enumerate().for_each(|(s, &b)| read(b, s));
                    for x in l.epilogue.iter().flat_map(|e| e.inputs.iter().skip(1)) {
                        read(x.buffer, usize::MAX);
                    }
                }
            }
            uses.writes
                .entry(root(program, kernel.output()))
                .or_default()
                .push(i);
        }
        uses
    }

    /// The reads of `root`: (kernel index, buffer as named, operand slot).
    pub fn reads(&self, root: BufferId) -> &[(usize, BufferId, usize)] {
        self.reads.get(&root).map_or(&[], Vec::as_slice)
    }

    /// The kernels that write `root`, in order.
    pub fn writes(&self, root: BufferId) -> &[usize] {
        self.writes.get(&root).map_or(&[], Vec::as_slice)
    }

    /// True when a kernel strictly between `from` and `to` writes `root`.
    pub fn written_between(&self, root: BufferId, from: usize, to: usize) -> bool {
        self.writes(root).iter().any(|&w| w > from && w < to)
    }
}

/// The source view of a loop kernel that only copies one input (no arithmetic, no cast, no
/// reduction), or None.
pub fn pure_copy(copy: &LoopKernel) -> Option<&crate::kernel::KernelInput> {
    let single = copy.inputs.len() == 1
        && copy.reduce.is_none()
        && copy.reduce_shape.is_empty()
        && matches!(copy.body[copy.result].expr, Expr::Load(0));
    single.then(|| &copy.inputs[0])
}

/// Whether root buffer `r` is (the root of) a program output.
pub fn is_output(program: &KernelProgram, r: BufferId) -> bool {
    program.outputs.iter().any(|(_, b)| root(program, *b) == r)
}

/// The static dims of buffer `b`, or None for a symbolic shape.
pub fn static_shape(program: &KernelProgram, b: BufferId) -> Option<Vec<usize>> {
    program.buffers[b].ty.shape.as_static()
}
