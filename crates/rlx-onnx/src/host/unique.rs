//! `Unique`: the distinct elements (or slices along an axis) of a tensor, with where each
//! first occurs, which distinct value each element is, and how often each occurs.

use super::{cmp_nan_last, indices, take, HostResult};
use rlx_ir::Tensor;
use std::cmp::Ordering;

/// The four outputs of `Unique`.
#[derive(Debug)]
pub struct UniqueResult {
    /// the distinct elements or slices, sorted or in order of first occurrence
    pub values: Tensor,
    /// i64 `[k]`: where each distinct value first occurs
    pub first: Tensor,
    /// i64 `[n]`: for every element or slice, the position of its value in `values`
    pub inverse: Tensor,
    /// i64 `[k]`: how often each distinct value occurs
    pub counts: Tensor,
}

/// `Unique(x, sorted, axis)`: distinct elements of the flattened `x` (`axis` `None`) or
/// distinct slices along `axis`; sorted ascending (slices lexicographically, NaN last and
/// equal to NaN, `-0 == 0`) or in order of first occurrence.
pub fn unique(x: &Tensor, sorted: bool, axis: Option<usize>) -> HostResult<UniqueResult> {
    let flat;
    let (x, axis) = match axis {
        Some(a) => (x, a),
        None => {
            flat = x
                .clone()
                .reshaped(&[x.numel()])
                .map_err(|e| e.to_string())?;
            (&flat, 0)
        }
    };
    let shape = x.shape();
    let Some(&len) = shape.get(axis) else {
        return Err(format!(
            "axis {axis} out of range for input shape {shape:?}"
        ));
    };
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let v = x.to_f64_vec();
    // slice i as its elements in row-major order
    let slice =
        |i: usize| (0..outer).flat_map(move |o| (0..inner).map(move |j| (o * len + i) * inner + j));
    let cmp = |a: usize, b: usize| -> Ordering {
        for (p, q) in slice(a).zip(slice(b)) {
            match cmp_nan_last(v[p], v[q]) {
                Ordering::Equal => continue,
                o => return o,
            }
        }
        Ordering::Equal
    };
    // stable: equal slices keep index order, so each group starts at its first occurrence
    let mut order: Vec<usize> = (0..len).collect();
    order.sort_by(|&a, &b| cmp(a, b));
    let mut groups: Vec<(usize, usize)> = Vec::new(); // (first index, count)
    let mut group_of = vec![0usize; len];
    for (pos, &i) in order.iter().enumerate() {
        let new = pos == 0 || cmp(order[pos - 1], i) != Ordering::Equal;
        if new {
            groups.push((i, 0));
        }
        let g = groups.len() - 1;
        groups[g].1 += 1;
        group_of[i] = g;
    }
    // position of each group in the output
    let mut rank: Vec<usize> = (0..groups.len()).collect();
    if !sorted {
        rank.sort_by_key(|&g| groups[g].0);
    }
    let mut out_pos = vec![0usize; groups.len()];
    for (p, &g) in rank.iter().enumerate() {
        out_pos[g] = p;
    }
    let firsts: Vec<usize> = rank.iter().map(|&g| groups[g].0).collect();
    let counts: Vec<usize> = rank.iter().map(|&g| groups[g].1).collect();
    let inverse: Vec<usize> = (0..len).map(|i| out_pos[group_of[i]]).collect();
    let k = firsts.len();
    Ok(UniqueResult {
        values: take(x, axis, &firsts)?,
        first: indices(&[k], &firsts)?,
        inverse: indices(&[len], &inverse)?,
        counts: indices(&[k], &counts)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::DType;

    fn t(shape: &[usize], v: &[f64]) -> Tensor {
        Tensor::from_f64(DType::F32, shape, v).unwrap()
    }

    #[test]
    fn unique_sorted_and_unsorted() {
        let x = t(&[5], &[2.0, 1.0, 1.0, 3.0, 2.0]);
        let u = unique(&x, true, None).unwrap();
        assert_eq!(u.values.to_f64_vec(), vec![1.0, 2.0, 3.0]);
        assert_eq!(u.first.to_f64_vec(), vec![1.0, 0.0, 3.0]);
        assert_eq!(u.inverse.to_f64_vec(), vec![1.0, 0.0, 0.0, 2.0, 1.0]);
        assert_eq!(u.counts.to_f64_vec(), vec![2.0, 2.0, 1.0]);
        let u = unique(&x, false, None).unwrap();
        assert_eq!(u.values.to_f64_vec(), vec![2.0, 1.0, 3.0]);
        assert_eq!(u.first.to_f64_vec(), vec![0.0, 1.0, 3.0]);
        assert_eq!(u.inverse.to_f64_vec(), vec![0.0, 1.0, 1.0, 2.0, 0.0]);
        assert_eq!(u.counts.to_f64_vec(), vec![2.0, 2.0, 1.0]);
    }

    #[test]
    fn unique_along_an_axis() {
        // columns [2,1] [1,3] [2,1] [0,5] of a 2x4 matrix
        let x = t(&[2, 4], &[2.0, 1.0, 2.0, 0.0, 1.0, 3.0, 1.0, 5.0]);
        let u = unique(&x, true, Some(1)).unwrap();
        assert_eq!(u.values.shape(), &[2, 3]);
        assert_eq!(u.values.to_f64_vec(), vec![0.0, 1.0, 2.0, 5.0, 3.0, 1.0]);
        assert_eq!(u.first.to_f64_vec(), vec![3.0, 1.0, 0.0]);
        assert_eq!(u.inverse.to_f64_vec(), vec![2.0, 1.0, 2.0, 0.0]);
        assert_eq!(u.counts.to_f64_vec(), vec![1.0, 1.0, 2.0]);
    }
}
