//! Index arithmetic shared by the interpreter and the fast path: row-major strides,
//! multi-index walks, broadcasting maps and exact element gathers.

use rlx_ir::TensorData;

/// Row-major strides of `shape`, in elements.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    rlx_ir::contiguous_strides(shape)
}

/// Calls `f(flat, index)` for every multi-index of `shape` in row-major order.
pub fn for_each_index(shape: &[usize], mut f: impl FnMut(usize, &[usize])) {
    let n: usize = shape.iter().product();
    let mut idx = vec![0usize; shape.len()];
    for flat in 0..n {
        f(flat, &idx);
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// The multi-index of row-major position `flat` in `shape`.
pub(crate) fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        if shape[d] > 0 {
            idx[d] = flat % shape[d];
            flat /= shape[d];
        }
    }
    idx
}

/// Strides that read an `in_shape` tensor broadcast (numpy rules) to `out_shape`: one per
/// output dim, 0 where the input dim is missing or 1.
pub fn broadcast_strides(in_shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
    let s = strides(in_shape);
    let lead = out_shape.len() - in_shape.len();
    (0..out_shape.len())
        .map(|d| {
            if d < lead || in_shape[d - lead] == 1 {
                0
            } else {
                s[d - lead]
            }
        })
        .collect()
}

/// For every output position (row-major), the input position it reads under broadcasting.
pub fn broadcast_map(in_shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
    let s = broadcast_strides(in_shape, out_shape);
    let mut map = Vec::with_capacity(out_shape.iter().product());
    for_each_index(out_shape, |_, idx| {
        map.push(idx.iter().zip(&s).map(|(i, s)| i * s).sum());
    });
    map
}

/// Exact gather: element `j` of the result is `srcs[idx[j].0][idx[j].1]`. All sources share
/// one dtype, so no value passes through f64 (i64 stays exact).
pub(crate) fn take(srcs: &[&TensorData], idx: &[(usize, usize)]) -> TensorData {
    macro_rules! gather {
        ($variant:ident) => {{
            let vs: Vec<_> = srcs
                .iter()
                .map(|s| match s {
                    TensorData::$variant(v) => v,
                    _ => unreachable!("take sources share one dtype"),
                })
                .collect();
            TensorData::$variant(idx.iter().map(|&(s, i)| vs[s][i]).collect())
        }};
    }
    match srcs[0] {
        TensorData::F32(_) => gather!(F32),
        TensorData::F16(_) => gather!(F16),
        TensorData::BF16(_) => gather!(BF16),
        TensorData::F64(_) => gather!(F64),
        TensorData::I8(_) => gather!(I8),
        TensorData::U8(_) => gather!(U8),
        TensorData::I32(_) => gather!(I32),
        TensorData::I64(_) => gather!(I64),
        TensorData::Bool(_) => gather!(Bool),
        TensorData::I16(_) => gather!(I16),
        TensorData::U16(_) => gather!(U16),
        TensorData::U32(_) => gather!(U32),
        TensorData::U64(_) => gather!(U64),
        TensorData::F8E4M3FN(_) => gather!(F8E4M3FN),
        TensorData::F8E4M3FNUZ(_) => gather!(F8E4M3FNUZ),
        TensorData::F8E5M2(_) => gather!(F8E5M2),
        TensorData::F8E5M2FNUZ(_) => gather!(F8E5M2FNUZ),
        TensorData::F8E8M0(_) => gather!(F8E8M0),
        TensorData::F4E2M1(_) => gather!(F4E2M1),
        TensorData::I4(_) => gather!(I4),
        TensorData::U4(_) => gather!(U4),
        TensorData::I2(_) => gather!(I2),
        TensorData::U2(_) => gather!(U2),
    }
}

/// Splits `shape` around `axis` into (outer, axis size, inner) element counts.
pub fn split_axis(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    let outer = shape[..axis].iter().product();
    let inner = shape[axis + 1..].iter().product();
    (outer, shape[axis], inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_map_matches_numpy() {
        assert_eq!(
            broadcast_map(&[3, 1], &[2, 3, 2]),
            [0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2]
        );
        assert_eq!(broadcast_map(&[], &[2]), [0, 0]);
        assert_eq!(unravel(5, &[2, 3]), [1, 2]);
    }
}
