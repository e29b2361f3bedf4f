//! Affine index maps: how a fused kernel's loop indices select an element of a graph node.
//!
//! `idx[d] = offset[d] + sum_i coef[d][i] * loop[i]` for every dim `d` of the node. Layout
//! ops (transpose, slice with any step, expand, broadcasting, reshapes that only split dims)
//! turn into maps on their source without copying; at a buffer the map collapses into a
//! kernel [`View`] (one element offset and one stride per loop dim).

use rlx_ir::{contiguous_strides, kernel::View, slice_range};

/// An affine map from loop indices to a node's multi-index.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct IndexMap {
    /// per node dim: the index at loop index zero
    pub offset: Vec<isize>,
    /// per node dim, per loop dim: how far one loop step moves the index
    pub coef: Vec<Vec<isize>>,
    /// number of loop dims (kept apart so rank-0 nodes still know it)
    pub n_loop: usize,
}

impl IndexMap {
    /// A node of rank `rank` iterated by the first `rank` of `n_loop` loop dims.
    pub fn identity(rank: usize, n_loop: usize) -> IndexMap {
        let coef = (0..rank)
            .map(|d| (0..n_loop).map(|i| (i == d) as isize).collect())
            .collect();
        IndexMap {
            offset: vec![0; rank],
            coef,
            n_loop,
        }
    }

    fn zero_row(&self) -> Vec<isize> {
        vec![0; self.n_loop]
    }

    /// The map of an operand of shape `in_shape` broadcast (numpy rules) to this node's
    /// shape `out_shape`: size-1 dims stay at index 0, missing leading dims drop.
    pub fn broadcast_to(&self, out_shape: &[usize], in_shape: &[usize]) -> IndexMap {
        let skip = out_shape.len() - in_shape.len();
        let mut m = IndexMap {
            offset: Vec::with_capacity(in_shape.len()),
            coef: Vec::with_capacity(in_shape.len()),
            n_loop: self.n_loop,
        };
        for (e, &size) in in_shape.iter().enumerate() {
            if size == 1 && out_shape[skip + e] != 1 {
                m.offset.push(0);
                m.coef.push(self.zero_row());
            } else {
                m.offset.push(self.offset[skip + e]);
                m.coef.push(self.coef[skip + e].clone());
            }
        }
        m
    }

    /// The map of `x` when this is the map of `transpose(x, perm)`.
    pub fn through_transpose(&self, perm: &[usize]) -> IndexMap {
        let mut m = IndexMap {
            offset: vec![0; perm.len()],
            coef: vec![Vec::new(); perm.len()],
            n_loop: self.n_loop,
        };
        for (d, &p) in perm.iter().enumerate() {
            m.offset[p] = self.offset[d];
            m.coef[p] = self.coef[d].clone();
        }
        m
    }

    /// The map of `x` (shape `in_shape`) when this is the map of a strided slice of it.
    pub fn through_slice(
        &self,
        in_shape: &[usize],
        axes: &[usize],
        starts: &[i64],
        ends: &[i64],
        steps: &[i64],
    ) -> IndexMap {
        let mut m = self.clone();
        for (k, &a) in axes.iter().enumerate() {
            let (start, _) = slice_range(in_shape[a], starts[k], ends[k], steps[k]);
            let step = steps[k] as isize;
            m.offset[a] = start as isize + step * self.offset[a];
            for c in &mut m.coef[a] {
                *c *= step;
            }
        }
        m
    }

    /// The map of `x` (shape `in_shape`) when this is the map of `reshape(x)` of shape
    /// `out_shape`, provided the reshape only splits dims of `x` and adds or drops size-1
    /// dims (see [`split_groups`]); `None` otherwise.
    pub fn through_reshape(&self, out_shape: &[usize], in_shape: &[usize]) -> Option<IndexMap> {
        let groups = split_groups(in_shape, out_shape)?;
        let mut m = IndexMap {
            offset: vec![0; in_shape.len()],
            coef: vec![self.zero_row(); in_shape.len()],
            n_loop: self.n_loop,
        };
        for (e, group) in groups.iter().enumerate() {
            for &(d, mult) in group {
                m.offset[e] += mult * self.offset[d];
                for (c, &src) in m.coef[e].iter_mut().zip(&self.coef[d]) {
                    *c += mult * src;
                }
            }
        }
        Some(m)
    }

    /// The input map of `reduce(x, axes, keepdims)`: output dims come first in the loop,
    /// then one loop dim per reduced axis, in axis order.
    pub fn reduce_input(in_rank: usize, axes: &[usize], keepdims: bool, n_loop: usize) -> IndexMap {
        let n_out = n_loop - axes.len();
        let mut m = IndexMap {
            offset: vec![0; in_rank],
            coef: vec![vec![0; n_loop]; in_rank],
            n_loop,
        };
        let mut out_pos = 0;
        for d in 0..in_rank {
            if let Some(k) = axes.iter().position(|&a| a == d) {
                m.coef[d][n_out + k] = 1;
                if keepdims {
                    out_pos += 1;
                }
            } else {
                m.coef[d][out_pos] = 1;
                out_pos += 1;
            }
        }
        m
    }

    /// The kernel view of a row-major buffer of `shape` read through this map.
    pub fn view(&self, shape: &[usize]) -> View {
        let cs = contiguous_strides(shape);
        let mut offset = 0isize;
        let mut strides = self.zero_row();
        for (d, &s) in cs.iter().enumerate() {
            let s = s as isize;
            offset += s * self.offset[d];
            for (acc, &c) in strides.iter_mut().zip(&self.coef[d]) {
                *acc += s * c;
            }
        }
        View {
            // Only an empty slice can start before the buffer, and then nothing is read.
            offset: offset.max(0) as usize,
            strides,
        }
    }
}

/// For a reshape of `x` (shape `from`) into shape `to`: for each dim of `x`, the dims of
/// the result that make it up with their multipliers, when every non-unit dim of `x` is a
/// run of consecutive result dims (a split). `None` when the reshape merges dims of `x`,
/// which no affine map can express.
pub(crate) fn split_groups(from: &[usize], to: &[usize]) -> Option<Vec<Vec<(usize, isize)>>> {
    let mut groups = vec![Vec::new(); from.len()];
    if from.contains(&0) || to.contains(&0) {
        return Some(groups);
    }
    let mut j = 0;
    for (e, &size) in from.iter().enumerate() {
        if size == 1 {
            continue;
        }
        let mut members = Vec::new();
        let mut prod = 1;
        while prod < size {
            let &t = to.get(j)?;
            if t != 1 {
                members.push(j);
                prod *= t;
            }
            j += 1;
        }
        if prod != size {
            return None;
        }
        let mut mult = 1isize;
        for &d in members.iter().rev() {
            groups[e].push((d, mult));
            mult *= to[d] as isize;
        }
    }
    Some(groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpose_then_view_gives_permuted_strides() {
        // x: [2, 3]; t = transpose(x, [1, 0]) : [3, 2]; loop over t.
        let m = IndexMap::identity(2, 2).through_transpose(&[1, 0]);
        assert_eq!(
            m.view(&[2, 3]),
            View {
                offset: 0,
                strides: vec![1, 3]
            }
        );
    }

    #[test]
    fn negative_step_slice() {
        // x: [5]; s = x[4::-2] : [3]
        let m = IndexMap::identity(1, 1).through_slice(&[5], &[0], &[-1], &[i64::MIN], &[-2]);
        assert_eq!(
            m.view(&[5]),
            View {
                offset: 4,
                strides: vec![-2]
            }
        );
    }

    #[test]
    fn broadcast_and_reduce_maps() {
        // bias [3] broadcast into [2, 3]
        let m = IndexMap::identity(2, 2).broadcast_to(&[2, 3], &[3]);
        assert_eq!(m.view(&[3]).strides, vec![0, 1]);
        // sum over axis 1 of [2, 3, 4] without keepdims: loop = [2, 4] ++ [3]
        let r = IndexMap::reduce_input(3, &[1], false, 3);
        assert_eq!(r.view(&[2, 3, 4]).strides, vec![12, 1, 4]);
        let r = IndexMap::reduce_input(3, &[1], true, 4);
        assert_eq!(r.view(&[2, 3, 4]).strides, vec![12, 0, 1, 4]);
    }

    #[test]
    fn reshape_splits_are_affine_merges_are_not() {
        assert!(split_groups(&[6, 4], &[2, 3, 1, 4]).is_some());
        assert!(split_groups(&[2, 3], &[6]).is_none());
        assert!(split_groups(&[1, 6], &[6, 1]).is_some());
        // t = reshape(x [6], [2, 3]) read transposed: loop over [3, 2] (t^T).
        let m = IndexMap::identity(2, 2)
            .through_transpose(&[1, 0])
            .through_reshape(&[2, 3], &[6])
            .unwrap();
        assert_eq!(m.view(&[6]).strides, vec![1, 3]);
    }
}
