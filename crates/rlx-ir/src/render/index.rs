//! Index arithmetic for loop nests: a linear index split into coordinates, strided offsets
//! from coordinates, how far a view reaches, broadcast strides. Dims and strides are
//! literals in the generated code, so divisions are by constants.

use super::Dialect;
use crate::kernel::{row_major, IndexSpace, LoopKernel};

/// Statements splitting `linear` into coordinates `{prefix}0, {prefix}1, ...` of type `ty`
/// over `dims` (row-major; the last coordinate varies fastest).
pub fn coords(d: &dyn Dialect, linear: &str, prefix: &str, dims: &[usize], ty: &str) -> String {
    match dims.len() {
        0 => String::new(),
        1 => d.constant(ty, &format!("{prefix}0"), linear) + "\n",
        n => {
            let rest = format!("{prefix}_r");
            let mut s = d.variable(ty, &rest, linear) + "\n";
            for k in (1..n).rev() {
                s += &format!(
                    "{} {}\n",
                    d.constant(
                        ty,
                        &format!("{prefix}{k}"),
                        &format!("{rest} % {}", dims[k])
                    ),
                    d.divide_in_place(&rest, dims[k])
                );
            }
            s + &d.constant(ty, &format!("{prefix}0"), &rest) + "\n"
        }
    }
}

/// `base + Σ {prefix}{d} * strides[d]`, zero terms dropped and unit strides unmultiplied.
pub fn offset(base: &str, prefix: &str, strides: &[isize]) -> String {
    let mut s = base.to_string();
    for (d, &st) in strides.iter().enumerate() {
        match st {
            0 => {}
            1 => s += &format!(" + {prefix}{d}"),
            _ => s += &format!(" + {prefix}{d} * {st}"),
        }
    }
    s
}

/// A loop kernel's two index spaces, each merged where every view allows: the output
/// dims (over each input's output strides and the contiguous output's own, the output
/// being the last view) and the reduction dims (over each input's reduction strides).
/// Output and reduction dims never merge with each other: they are walked by different
/// loops.
pub fn loop_spaces(k: &LoopKernel) -> (IndexSpace, IndexSpace) {
    let n_out = k.shape.len();
    let out_strides: Vec<Vec<isize>> = k
        .inputs
        .iter()
        .map(|i| i.view.strides[..n_out].to_vec())
        .chain(std::iter::once(row_major(&k.shape)))
        .collect();
    let outer = IndexSpace::merge(&k.shape, &out_strides);
    let inner_strides: Vec<Vec<isize>> = k
        .inputs
        .iter()
        .map(|i| i.view.strides[n_out..].to_vec())
        .collect();
    let inner = IndexSpace::merge(&k.reduce_shape, &inner_strides);
    (outer, inner)
}

/// Elements of a tensor of `dims` (1 for a scalar).
pub fn numel(dims: &[usize]) -> usize {
    dims.iter().product()
}

/// The largest element offset a view at `offset` with `strides` over `dims` reaches, by
/// magnitude (saturating): what decides the integer width its index arithmetic needs.
pub fn max_offset(offset: usize, dims: &[usize], strides: &[isize]) -> usize {
    dims.iter()
        .zip(strides)
        .map(|(&d, &s)| d.saturating_sub(1).saturating_mul(s.unsigned_abs()))
        .fold(offset, usize::saturating_add)
}

/// Strides of an operand of contiguous shape `shape`, aligned right to the dims `out`, 0
/// where it broadcasts (a missing or size-1 dim).
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<isize> {
    let own = row_major(shape);
    let lead = out.len().saturating_sub(shape.len());
    (0..out.len())
        .map(|d| {
            if d < lead || shape[d - lead] == 1 {
                0
            } else {
                own[d - lead]
            }
        })
        .collect()
}
