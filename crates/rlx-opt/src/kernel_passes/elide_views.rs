//! Attention reading and writing `[batch, seq, heads, dim]` tensors in place instead of
//! through transposed copies: the `elide_views` kernel-IR pass.
//!
//! Models split heads with `reshape → transpose [0, 2, 1, 3] → attention → transpose →
//! reshape`; lowering turns each transpose into a loop kernel that only copies. When such a
//! copy feeds attention alone, attention can read the copy's source through strides; when
//! attention's result feeds such a copy alone, attention can write the copy's destination
//! through strides. Either way the copy need not run. Every rule below keeps the program's
//! meaning: a copy is elided only when nothing else could observe that it is missing or
//! that a read or write moved to attention's place in the order. A backend that takes the
//! views skips the elided copies and must count a view's buffer as read (or written) by the
//! attention kernel when it plans lifetimes.

use rlx_ir::kernel::{BufferKind, Kernel, KernelProgram, LoopKernel};
use rlx_ir::kernel_views::{is_output, pure_copy, root, static_shape, Uses};
use rlx_ir::{kernel::BufferId, Op};
use std::collections::HashMap;

/// An operand read (or result written) through strides instead of a packed buffer. `T` is
/// what a backend relocates a view to (CUDA: the output of a merged GEMM); the analysis
/// leaves it None.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StridedView<T = ()> {
    /// the buffer actually read or written
    pub buffer: BufferId,
    /// element offset of index 0
    pub offset: usize,
    /// element stride per dim of the operand as attention sees it
    pub strides: Vec<isize>,
    /// where the view is actually read when a backend moved `buffer`'s contents
    pub target: Option<T>,
}

/// What one attention kernel reads and writes in place, and the copies that replaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttentionViews<T = ()> {
    /// q, k, v: read through a view of the copy's source
    pub inputs: [Option<StridedView<T>>; 3],
    /// the result, written through a view of the copy's destination
    pub output: Option<StridedView<T>>,
    /// names of the copies not run, for labels
    pub replaces: Vec<String>,
}

impl<T> Default for AttentionViews<T> {
    fn default() -> Self {
        AttentionViews {
            inputs: [None, None, None],
            output: None,
            replaces: Vec::new(),
        }
    }
}

/// The peephole's decisions for a program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Views<T = ()> {
    /// per kernel index: a copy that is not run
    pub elided: Vec<bool>,
    /// per attention kernel index: its views
    pub attention: HashMap<usize, AttentionViews<T>>,
}

/// Finds the copies attention can replace. `takes(i)` says whether the backend runs
/// attention kernel `i` through views (false for all: the peephole is off).
pub fn attention_views<T: Clone>(
    program: &KernelProgram,
    takes: impl Fn(usize) -> bool,
) -> Views<T> {
    let mut views = Views {
        elided: vec![false; program.kernels.len()],
        attention: HashMap::new(),
    };
    let takes = |i: usize| {
        takes(i)
            && matches!(&program.kernels[i], Kernel::Library(a) if matches!(a.op, Op::Attention { .. }))
    };
    let uses = Uses::of(program);
    for (li, kernel) in program.kernels.iter().enumerate() {
        if let Kernel::Loop(copy) = kernel {
            elide_input_copy(program, &uses, li, copy, &takes, &mut views);
        }
    }
    for (ai, kernel) in program.kernels.iter().enumerate() {
        if let Kernel::Library(a) = kernel {
            if takes(ai) && a.epilogue.is_none() {
                elide_output_copy(program, &uses, ai, a.output, &mut views);
            }
        }
    }
    views
}

/// Elides copy `li` when its result is read only by attention kernels as q, k or v, each of
/// which then reads the copy's source through the copy's view.
fn elide_input_copy<T: Clone>(
    program: &KernelProgram,
    uses: &Uses,
    li: usize,
    copy: &LoopKernel,
    takes: &impl Fn(usize) -> bool,
    views: &mut Views<T>,
) {
    let Some(src) = pure_copy(copy) else { return };
    let t = copy.output;
    let buf = &program.buffers[t];
    let source = root(program, src.buffer);
    let valid = buf.alias_of.is_none()
        && buf.kind == BufferKind::Temp
        && !is_output(program, t)
        && source != t
        && uses.writes(t) == [li]
        && static_shape(program, t).as_deref() == Some(copy.shape.as_slice())
        && copy.numel() > 0
        && src.view.strides.iter().all(|&s| s >= 0)
        && src.view.strides.last() == Some(&1);
    if !valid {
        return;
    }
    let readers = uses.reads(t);
    let attention_only = !readers.is_empty()
        && readers.iter().all(|&(ai, b, slot)| {
            b == t && slot < 3 && ai > li && !uses.written_between(source, li, ai) && takes(ai)
        });
    if !attention_only {
        return;
    }
    views.elided[li] = true;
    let view = StridedView {
        buffer: src.buffer,
        offset: src.view.offset,
        strides: src.view.strides.clone(),
        target: None,
    };
    for &(ai, _, slot) in readers {
        let entry = views.attention.entry(ai).or_default();
        entry.inputs[slot] = Some(view.clone());
        if !entry.replaces.contains(&copy.name) {
            entry.replaces.push(copy.name.clone());
        }
    }
}

/// Elides the copy that is the only reader of attention `ai`'s result `o` when it is a
/// permutation: attention then writes the copy's destination with permuted strides.
fn elide_output_copy<T>(
    program: &KernelProgram,
    uses: &Uses,
    ai: usize,
    o: BufferId,
    views: &mut Views<T>,
) {
    let buf = &program.buffers[o];
    if buf.alias_of.is_some()
        || buf.kind != BufferKind::Temp
        || is_output(program, o)
        || uses.writes(o) != [ai]
    {
        return;
    }
    let &[(pi, b, 0)] = uses.reads(o) else { return };
    let Kernel::Loop(copy) = &program.kernels[pi] else {
        return;
    };
    let Some(src) = pure_copy(copy) else { return };
    let w = root(program, copy.output);
    let Some(o_shape) = static_shape(program, o) else {
        return;
    };
    let valid = b == o
        && pi > ai
        && !views.elided[pi]
        && program.buffers[w].kind == BufferKind::Temp
        && w != o
        && uses.writes(w) == [pi]
        && uses.reads(w).iter().all(|&(r, _, _)| r > pi)
        && src.view.offset == 0
        && copy.numel() == o_shape.iter().product::<usize>();
    if !valid {
        return;
    }
    let Some(strides) = inverse_permutation(&o_shape, &copy.shape, &src.view.strides) else {
        return;
    };
    views.elided[pi] = true;
    let entry = views.attention.entry(ai).or_default();
    entry.output = Some(StridedView {
        buffer: copy.output,
        offset: 0,
        strides,
        target: None,
    });
    entry.replaces.push(copy.name.clone());
}

/// For a copy over `shape` that reads a packed `source` (dims `source`) with `view` strides:
/// where each source element lands in the copy's packed output, as one stride per source
/// dim. None unless the view is a permutation of the source's dims (size-1 dims aside).
fn inverse_permutation(source: &[usize], shape: &[usize], view: &[isize]) -> Option<Vec<isize>> {
    let packed_src = rlx_ir::kernel::row_major(source);
    let packed_out = rlx_ir::kernel::row_major(shape);
    let mut out = vec![0isize; source.len()];
    let mut used = vec![false; shape.len()];
    for (i, &m) in source.iter().enumerate() {
        if m == 1 {
            continue;
        }
        let j =
            (0..shape.len()).find(|&j| !used[j] && shape[j] == m && view[j] == packed_src[i])?;
        used[j] = true;
        out[i] = packed_out[j];
    }
    // Every moving dim of the copy must have been matched.
    (0..shape.len())
        .all(|j| used[j] || shape[j] == 1)
        .then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposes_invert_and_other_views_do_not() {
        // [B=2, H=3, S=4, D=5] read as [B, S, H, D].
        let src = [2, 3, 4, 5];
        let shape = [2, 4, 3, 5];
        let view = [60, 5, 20, 1];
        let s = inverse_permutation(&src, &shape, &view).unwrap();
        // Element (b, h, s, d) lands at b*60 + s*15 + h*5 + d.
        assert_eq!(s, vec![60, 5, 15, 1]);
        // A broadcast (stride 0) or a sliced view is not a permutation.
        assert!(inverse_permutation(&src, &shape, &[60, 5, 0, 1]).is_none());
        assert!(inverse_permutation(&src, &[2, 4, 3, 4], &[60, 5, 20, 1]).is_none());
    }
}
