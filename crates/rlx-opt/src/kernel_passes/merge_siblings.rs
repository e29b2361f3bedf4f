//! The `merge_siblings` kernel-IR pass: sibling GEMMs that read the same A run as one.
//!
//! Encoders project one hidden state three times (q, k, v): three matmuls with the same A,
//! M and K, each with its own `[K, N]` weight and bias, each result read only by attention
//! through a strided view (the `elide_views` pass drops the head-split copies). Those can run
//! as ONE GEMM: B is the weights concatenated along N (`[K, ΣN]`), the bias is concatenated
//! the same way and stays fused in the epilogue, the result is one `[M, ΣN]` buffer, and each
//! attention view points into it ([`remap`]: offset = the member's column start, rows ΣN
//! apart). Everything else is left exactly as it was: a matmul joins a group only when its
//! weight and bias are graph params or constants, its epilogue is one the backend fuses into
//! its GEMM as `act(x + bias)` (no residual, [`GemmEpilogues`]), and every reader of its
//! result is a copy `elide_views` elided. The pass decides the groups; the backend builds the
//! concatenated weights and the one GEMM (CUDA: `rlx_cuda::plan::merge`).

use crate::kernel_passes::elide_views::Views;
use rlx_ir::kernel::{BufferId, BufferKind, Kernel, KernelProgram, LibraryKernel, LoopKernel};
use rlx_ir::kernel_views::{is_output, pure_copy, root, static_shape, Uses};
use rlx_ir::{DType, Op};

/// What a backend's GEMM fuses: the capability `merge_siblings` needs.
pub trait GemmEpilogues {
    /// The activation a fused epilogue applies (its default: none); members of a group
    /// share it.
    type Activation: Clone + PartialEq + Default + std::fmt::Debug;

    /// Whether the backend runs GEMMs of `dtype`.
    fn gemm_dtype(&self, dtype: DType) -> bool;

    /// The epilogue `e` of a `dtype` GEMM with `n` columns as the GEMM fuses it: its bias
    /// buffer (if any) and activation, or None when the GEMM cannot fuse it as
    /// `act(x + bias)` without a residual.
    fn fused(
        &self,
        e: &LoopKernel,
        dtype: DType,
        n: usize,
    ) -> Option<(Option<BufferId>, Self::Activation)>;
}

/// One matmul of a group.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// its kernel index
    pub kernel: usize,
    /// its kernel name
    pub name: String,
    /// its `[K, N]` weight (a param or constant)
    pub weight: BufferId,
    /// its `[N]` bias (a param or constant), fused in its epilogue
    pub bias: Option<BufferId>,
    /// its columns
    pub n: usize,
    /// (attention kernel, input slot) of every view of its result
    pub views: Vec<(usize, usize)>,
}

/// Matmuls that run as one GEMM, in kernel order.
#[derive(Debug, Clone, PartialEq)]
pub struct SiblingGroup<A> {
    /// the members; the merged GEMM runs where the first one did
    pub members: Vec<Member>,
    /// root buffer of the shared A
    pub a: BufferId,
    /// element type of A, the weights and the result
    pub dtype: DType,
    /// rows of A
    pub m: usize,
    /// columns of A, rows of every weight
    pub k: usize,
    /// the activation every member's epilogue applies
    pub activation: A,
}

impl<A> SiblingGroup<A> {
    /// Columns of the merged result.
    pub fn n(&self) -> usize {
        self.members.iter().map(|x| x.n).sum()
    }
}

/// A weight or bias source: a param or constant root buffer of `numel` elements of `dtype`.
fn weight_source(program: &KernelProgram, b: BufferId, dtype: DType, numel: usize) -> bool {
    let r = root(program, b);
    let buf = &program.buffers[r];
    matches!(buf.kind, BufferKind::Param(_) | BufferKind::Constant(_))
        && buf.ty.dtype == dtype
        && static_shape(program, r).is_some_and(|s| s.iter().product::<usize>() == numel)
}

/// Where an element of a packed `[rows, n]` matrix lands when the matrix becomes columns
/// `col..col + n` of a packed `[rows, total]` one, for a view with `offset` and `strides`
/// over `shape`: the new offset and strides, or None when the view's columns are not
/// walked within one row (so no strides describe it).
pub fn remap(
    offset: usize,
    strides: &[isize],
    shape: &[usize],
    n: usize,
    total: usize,
    col: usize,
) -> Option<(usize, Vec<isize>)> {
    let (r0, c0) = (offset / n, offset % n);
    let mut reach = c0;
    let mut out = Vec::with_capacity(strides.len());
    for (&s, &d) in strides.iter().zip(shape) {
        let s = usize::try_from(s).ok()?;
        if d <= 1 {
            out.push(s as isize);
        } else if s % n == 0 {
            out.push((s / n * total) as isize);
        } else {
            reach += (d - 1) * s;
            out.push(s as isize);
        }
    }
    (reach < n).then(|| (r0 * total + col + c0, out))
}

/// The static shape of attention kernel `ai`'s input `slot`, as attention reads it.
pub fn attention_operand(program: &KernelProgram, ai: usize, slot: usize) -> Option<Vec<usize>> {
    match &program.kernels[ai] {
        Kernel::Library(at) => static_shape(program, at.inputs[slot]),
        Kernel::Loop(_) => None,
    }
}

/// What members of one group share: root A, A's shape, dtype, activation, bias or not.
type Key<A> = (BufferId, Vec<usize>, DType, A, bool);

/// The matmul kernel `i` as a member, when it qualifies: returns it and its group key.
fn member<T, G: GemmEpilogues>(
    program: &KernelProgram,
    uses: &Uses,
    views: &Views<T>,
    gemm: &G,
    i: usize,
    k: &LibraryKernel,
) -> Option<(Member, Key<G::Activation>)> {
    if !matches!(k.op, Op::MatMul) || k.inputs.len() != 2 {
        return None;
    }
    let (a, b) = (k.inputs[0], k.inputs[1]);
    let dtype = program.buffers[a].ty.dtype;
    let ash = static_shape(program, a)?;
    let bsh = static_shape(program, b)?;
    if ash.len() < 2
        || bsh.len() != 2
        || program.buffers[b].ty.dtype != dtype
        || !gemm.gemm_dtype(dtype)
    {
        return None;
    }
    let (kk, n) = (bsh[0], bsh[1]);
    let m = ash.iter().product::<usize>() / kk.max(1);
    if ash[ash.len() - 1] != kk || m == 0 || n == 0 || kk == 0 {
        return None;
    }
    if !weight_source(program, b, dtype, kk * n) {
        return None;
    }
    let (bias, activation) = match &k.epilogue {
        None => (None, G::Activation::default()),
        Some(e) => {
            let (bias, activation) = gemm.fused(e, dtype, n)?;
            if e.numel() != m * n || e.inputs.first().map(|x| x.dtype) != Some(dtype) {
                return None;
            }
            if let Some(bb) = bias {
                if !weight_source(program, bb, dtype, n) {
                    return None;
                }
            }
            (bias, activation)
        }
    };
    // The result: a temporary written here only, read only by copies attention replaced.
    let o = k.output;
    let buf = &program.buffers[o];
    if buf.alias_of.is_some()
        || buf.kind != BufferKind::Temp
        || buf.ty.dtype != dtype
        || is_output(program, o)
        || uses.writes(o) != [i]
        || static_shape(program, o).map(|s| s.iter().product::<usize>()) != Some(m * n)
    {
        return None;
    }
    let readers = uses.reads(o);
    let copies_only = !readers.is_empty()
        && readers.iter().all(|&(li, _, slot)| {
            slot == 0
                && views.elided.get(li) == Some(&true)
                && matches!(&program.kernels[li], Kernel::Loop(c)
                    if pure_copy(c).is_some_and(|s| root(program, s.buffer) == o))
        });
    if !copies_only {
        return None;
    }
    let mut attention: Vec<(usize, usize)> = views
        .attention
        .iter()
        .flat_map(|(&ai, v)| {
            v.inputs
                .iter()
                .enumerate()
                .filter(|(_, x)| x.as_ref().is_some_and(|x| root(program, x.buffer) == o))
                .map(move |(s, _)| (ai, s))
        })
        .collect();
    attention.sort_unstable();
    if attention.is_empty() {
        return None;
    }
    let key = (root(program, a), ash, dtype, activation, bias.is_some());
    let member = Member {
        kernel: i,
        name: k.name.clone(),
        weight: b,
        bias,
        n,
        views: attention,
    };
    Some((member, key))
}

/// Finds the groups of sibling GEMMs in `program`, given the views `elide_views` decided
/// and what the backend's GEMM fuses.
pub fn merge_siblings<T, G: GemmEpilogues>(
    program: &KernelProgram,
    views: &Views<T>,
    gemm: &G,
) -> Vec<SiblingGroup<G::Activation>> {
    let uses = Uses::of(program);
    let mut by_key: Vec<(Key<G::Activation>, Vec<Member>)> = Vec::new();
    for (i, kernel) in program.kernels.iter().enumerate() {
        let Kernel::Library(k) = kernel else { continue };
        if views.elided.get(i) == Some(&true) {
            continue;
        }
        let Some((m, key)) = member(program, &uses, views, gemm, i, k) else {
            continue;
        };
        match by_key.iter_mut().find(|(k, _)| *k == key) {
            Some((_, list)) => list.push(m),
            None => by_key.push((key, vec![m])),
        }
    }
    let mut groups = Vec::new();
    for ((a, ash, dtype, activation, _), members) in by_key {
        if members.len() < 2 {
            continue;
        }
        let (first, last) = (members[0].kernel, members[members.len() - 1].kernel);
        // The merged GEMM reads A where the first member did: nothing may write A before the
        // last member would have read it.
        if uses.written_between(a, first, last + 1) {
            continue;
        }
        let kk = ash[ash.len() - 1];
        let m = ash.iter().product::<usize>() / kk;
        let total: usize = members.iter().map(|x| x.n).sum();
        // Every view must be expressible over the merged result.
        let mut col = 0;
        let mut ok = true;
        for x in &members {
            for &(ai, s) in &x.views {
                let v = views.attention[&ai].inputs[s].as_ref();
                let shape = attention_operand(program, ai, s);
                ok &= matches!((v, shape), (Some(v), Some(shape))
                    if remap(v.offset, &v.strides, &shape, x.n, total, col).is_some());
            }
            col += x.n;
        }
        if !ok {
            continue;
        }
        groups.push(SiblingGroup {
            members,
            a,
            dtype,
            m,
            k: kk,
            activation,
        });
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_remap_into_the_merged_columns() {
        // q of [1, 4, 2, 3] (heads 2 x dim 3 = 6 columns) read as [1, 2, 4, 3].
        let (o, s) = remap(0, &[24, 3, 6, 1], &[1, 2, 4, 3], 6, 18, 6).unwrap();
        assert_eq!(o, 6);
        assert_eq!(s, vec![24, 3, 18, 1]);
        // An offset inside a row keeps its column; one spanning rows moves by whole rows.
        assert_eq!(remap(7, &[1], &[2], 6, 18, 12).unwrap().0, 18 + 12 + 1);
        // Columns walked past the row's end: no strides describe it.
        assert!(remap(0, &[1], &[7], 6, 18, 0).is_none());
        assert!(remap(0, &[-1], &[2], 6, 18, 0).is_none());
    }
}
