//! A plan-time rewrite: sibling GEMMs that read the same A run as one.
//!
//! Encoders project one hidden state three times (q, k, v): three matmuls with the same A,
//! M and K, each with its own `[K, N]` weight and bias, each result read only by attention
//! through a strided view (`plan::views` drops the head-split copies). Those run as ONE
//! cuBLASLt GEMM: B is the weights concatenated along N (`[K, ΣN]`, a [`Derived`] buffer the
//! program builds from the bound weights and rebuilds when one of them changes), the bias is
//! concatenated the same way and stays fused in the epilogue, the result is one `[M, ΣN]`
//! scratch, and each attention view points into it (offset = the member's column start,
//! rows ΣN apart). Everything else is left exactly as it was: a matmul joins a group only
//! when its weight and bias are graph params or constants, its epilogue is a fused
//! `act(x + bias)` (no residual), and every reader of its result is a copy the attention
//! peephole elided. `RLX_CUDA_MERGE_GEMM=0` turns the rewrite off.

use crate::codegen::store::numel;
use crate::codegen::ArgRef;
use crate::gemm::{match_gemm_epilogue, Activation, GemmSpec};
use crate::plan::views::{is_output, pure_copy, static_shape, Uses, Views};
use crate::plan::{operand, root, scratch, Plan, Step};
use rlx_ir::kernel::{BufferId, BufferKind, Kernel, KernelProgram, LibraryKernel};
use rlx_ir::{DType, Op};
use std::collections::HashMap;

/// A device buffer built from graph params or constants: `rows` rows, each the
/// concatenation of the same row of every source (`[rows, n_i]` row-major each).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Derived {
    /// element type of every source
    pub dtype: DType,
    /// rows of every source (K for weights, 1 for biases)
    pub rows: usize,
    /// (source buffer, its columns), in column order
    pub sources: Vec<(BufferId, usize)>,
}

impl Derived {
    /// Columns of the concatenation.
    pub fn cols(&self) -> usize {
        self.sources.iter().map(|s| s.1).sum()
    }

    /// Bytes of the concatenation.
    pub fn bytes(&self) -> usize {
        self.rows * self.cols() * self.dtype.size_bytes()
    }

    /// The concatenation of `parts` (the raw bytes of each source, in order).
    pub fn concat(&self, parts: &[&[u8]]) -> Vec<u8> {
        let size = self.dtype.size_bytes();
        let mut out = Vec::with_capacity(self.bytes());
        for r in 0..self.rows {
            for (part, &(_, n)) in parts.iter().zip(&self.sources) {
                out.extend_from_slice(&part[r * n * size..(r + 1) * n * size]);
            }
        }
        out
    }
}

/// One matmul that may join a group.
#[derive(Debug, Clone)]
struct Member {
    kernel: usize,
    name: String,
    weight: BufferId,
    bias: Option<BufferId>,
    n: usize,
    /// (attention kernel, input slot) of every view of its result
    views: Vec<(usize, usize)>,
}

/// Matmuls run as one GEMM.
#[derive(Debug, Clone)]
pub struct Group {
    members: Vec<Member>,
    a: BufferId,
    dtype: DType,
    m: usize,
    k: usize,
    activation: Activation,
}

/// The groups of a program and, per kernel index, (group, position in it).
#[derive(Debug, Clone, Default)]
pub struct Merges {
    groups: Vec<Group>,
    member_of: HashMap<usize, (usize, usize)>,
}

impl Merges {
    /// Kernel indices of each group's members (for tests and reports).
    pub fn groups(&self) -> Vec<Vec<usize>> {
        self.groups
            .iter()
            .map(|g| g.members.iter().map(|m| m.kernel).collect())
            .collect()
    }

    /// The merged GEMM step to run in place of kernel `i`: `Some(Some(g))` for a group's
    /// first member, `Some(None)` for a later member (nothing to run), None otherwise.
    pub fn at(&self, i: usize) -> Option<Option<usize>> {
        self.member_of
            .get(&i)
            .map(|&(g, pos)| (pos == 0).then_some(g))
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

/// What members of one group share: root A, A's shape, dtype, activation, bias or not.
type Key = (BufferId, Vec<usize>, DType, Activation, bool);

/// The matmul kernel `i` as a member, when it qualifies: returns it and its group key.
fn member(
    program: &KernelProgram,
    uses: &Uses,
    views: &Views,
    i: usize,
    k: &LibraryKernel,
) -> Option<(Member, Key)> {
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
        || !crate::caps::gemm_dtype(dtype)
    {
        return None;
    }
    let (kk, n) = (bsh[0], bsh[1]);
    let m = numel(&ash) / kk.max(1);
    if ash[ash.len() - 1] != kk || m == 0 || n == 0 || kk == 0 {
        return None;
    }
    if !weight_source(program, b, dtype, kk * n) {
        return None;
    }
    let (bias, activation) = match &k.epilogue {
        None => (None, Activation::None),
        Some(e) => {
            let f = match_gemm_epilogue(e, dtype, n)?;
            if f.residual.is_some()
                || e.numel() != m * n
                || e.inputs.first().map(|x| x.dtype) != Some(dtype)
            {
                return None;
            }
            if let Some(bb) = f.bias {
                if !weight_source(program, bb, dtype, n) {
                    return None;
                }
            }
            (f.bias, f.activation)
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
    Some((
        Member {
            kernel: i,
            name: k.name.clone(),
            weight: b,
            bias,
            n,
            views: attention,
        },
        key,
    ))
}

/// Finds the groups.
pub fn find(program: &KernelProgram, views: &Views) -> Merges {
    let mut merges = Merges::default();
    let uses = Uses::of(program);
    let mut by_key: Vec<(Key, Vec<Member>)> = Vec::new();
    for (i, kernel) in program.kernels.iter().enumerate() {
        let Kernel::Library(k) = kernel else { continue };
        if views.elided.get(i) == Some(&true) {
            continue;
        }
        let Some((m, key)) = member(program, &uses, views, i, k) else {
            continue;
        };
        match by_key.iter_mut().find(|(k, _)| *k == key) {
            Some((_, list)) => list.push(m),
            None => by_key.push((key, vec![m])),
        }
    }
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
        let m = numel(&ash) / kk;
        let total: usize = members.iter().map(|x| x.n).sum();
        // Every view must be expressible over the merged result.
        let mut col = 0;
        let mut ok = true;
        for x in &members {
            for &(ai, s) in &x.views {
                let v = views.attention[&ai].inputs[s].as_ref();
                let shape = match &program.kernels[ai] {
                    Kernel::Library(at) => static_shape(program, at.inputs[s]),
                    Kernel::Loop(_) => None,
                };
                ok &= matches!((v, shape), (Some(v), Some(shape))
                    if remap(v.offset, &v.strides, &shape, x.n, total, col).is_some());
            }
            col += x.n;
        }
        if !ok {
            continue;
        }
        let g = merges.groups.len();
        for (pos, x) in members.iter().enumerate() {
            merges.member_of.insert(x.kernel, (g, pos));
        }
        merges.groups.push(Group {
            members,
            a,
            dtype,
            m,
            k: kk,
            activation,
        });
    }
    merges
}

/// Allocates each group's result scratch and derived weights in `plan` and points the
/// attention views into the merged result. Returns each group's GEMM step.
pub fn prepare(
    program: &KernelProgram,
    merges: &Merges,
    views: &mut Views,
    plan: &mut Plan,
) -> Vec<Step> {
    let mut steps = Vec::with_capacity(merges.groups.len());
    for g in &merges.groups {
        let total: usize = g.members.iter().map(|x| x.n).sum();
        let out = scratch(plan, g.m * total * g.dtype.size_bytes());
        let mut col = 0;
        for x in &g.members {
            for &(ai, s) in &x.views {
                let shape = match &program.kernels[ai] {
                    Kernel::Library(at) => static_shape(program, at.inputs[s]),
                    Kernel::Loop(_) => None,
                };
                let entry = views
                    .attention
                    .get_mut(&ai)
                    .and_then(|e| e.inputs[s].as_mut());
                if let (Some(v), Some(shape)) = (entry, shape) {
                    if let Some((offset, strides)) =
                        remap(v.offset, &v.strides, &shape, x.n, total, col)
                    {
                        v.offset = offset;
                        v.strides = strides;
                        v.target = Some(out);
                    }
                }
            }
            col += x.n;
        }
        let mut derive = |rows: usize, sources: Vec<(BufferId, usize)>| {
            plan.derived.push(Derived {
                dtype: g.dtype,
                rows,
                sources,
            });
            ArgRef::Derived(plan.derived.len() - 1)
        };
        let b = derive(g.k, g.members.iter().map(|x| (x.weight, x.n)).collect());
        let bias = g.members[0].bias.is_some().then(|| {
            derive(
                1,
                g.members
                    .iter()
                    .filter_map(|x| x.bias.map(|bb| (bb, x.n)))
                    .collect(),
            )
        });
        let label: Vec<&str> = g.members.iter().map(|x| x.name.as_str()).collect();
        steps.push(Step::Gemm(GemmSpec {
            label: label.join("+"),
            dtype: g.dtype,
            m: g.m,
            n: total,
            k: g.k,
            batch: 1,
            outer: 1,
            a: operand(ArgRef::Buffer(g.a), 0, 0),
            b: operand(b, 0, 0),
            c: operand(out, 0, 0),
            bias,
            activation: g.activation,
            residual: None,
            trans_b: false,
            alpha: 1.0,
        }));
    }
    steps
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

    #[test]
    fn derived_buffers_interleave_rows() {
        let d = Derived {
            dtype: DType::U8,
            rows: 2,
            sources: vec![(0, 1), (1, 2)],
        };
        assert_eq!(d.cols(), 3);
        assert_eq!(d.bytes(), 6);
        assert_eq!(d.concat(&[&[1, 2], &[3, 4, 5, 6]]), vec![1, 3, 4, 2, 5, 6]);
    }
}
