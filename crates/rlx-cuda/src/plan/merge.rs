//! CUDA's side of the `merge_siblings` kernel-IR pass (`rlx_opt::kernel_passes::merge_siblings`,
//! which decides the groups): each group of sibling GEMMs that read the same A runs as ONE
//! cuBLASLt GEMM. B is the weights concatenated along N (`[K, ΣN]`, a [`Derived`] buffer the
//! program builds from the bound weights and rebuilds when one of them changes), the bias is
//! concatenated the same way and stays fused in the epilogue, the result is one `[M, ΣN]`
//! scratch, and each attention view points into it. `RLX_CUDA_MERGE_GEMM=0` leaves the pass
//! out.

use crate::codegen::ArgRef;
use crate::gemm::{match_gemm_epilogue, Activation, GemmSpec};
use crate::plan::views::Views;
use crate::plan::{operand, scratch, Plan, Step};
use rlx_ir::kernel::{BufferId, KernelProgram, LoopKernel};
use rlx_ir::DType;
use rlx_opt::kernel_passes::merge_siblings::{
    attention_operand, remap, GemmEpilogues, SiblingGroup,
};
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

/// CUDA's GEMM as `merge_siblings` sees it: cuBLASLt runs the [`crate::caps::gemm_dtype`]s
/// and fuses `act(x + bias)` ([`match_gemm_epilogue`]) without a residual.
pub struct CudaGemm;

impl GemmEpilogues for CudaGemm {
    type Activation = Activation;

    fn gemm_dtype(&self, dtype: DType) -> bool {
        crate::caps::gemm_dtype(dtype)
    }

    fn fused(
        &self,
        e: &LoopKernel,
        dtype: DType,
        n: usize,
    ) -> Option<(Option<BufferId>, Activation)> {
        let f = match_gemm_epilogue(e, dtype, n)?;
        f.residual.is_none().then_some((f.bias, f.activation))
    }
}

/// The groups `merge_siblings` decided and, per kernel index, (group, position in it).
#[derive(Debug, Clone, Default)]
pub struct Merges {
    groups: Vec<SiblingGroup<Activation>>,
    member_of: HashMap<usize, (usize, usize)>,
}

impl Merges {
    /// Indexes the groups `merge_siblings` decided.
    pub fn new(groups: Vec<SiblingGroup<Activation>>) -> Merges {
        let mut member_of = HashMap::new();
        for (g, group) in groups.iter().enumerate() {
            for (pos, x) in group.members.iter().enumerate() {
                member_of.insert(x.kernel, (g, pos));
            }
        }
        Merges { groups, member_of }
    }

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
        let total = g.n();
        let out = scratch(plan, g.m * total * g.dtype.size_bytes());
        let mut col = 0;
        for x in &g.members {
            for &(ai, s) in &x.views {
                let shape = attention_operand(program, ai, s);
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
