//! Data movement: transpose, slice, concat, gather, expand and pad. Elements are copied
//! exactly (no trip through f64).

use super::index::{broadcast_map, for_each_index, split_axis, strides, take};
use crate::InterpError;
use rlx_ir::{slice_range, PadMode, Tensor, TensorData};

fn gather_flat(x: &Tensor, out_shape: &[usize], f: impl Fn(&[usize]) -> usize) -> TensorData {
    let mut idx = Vec::with_capacity(out_shape.iter().product());
    for_each_index(out_shape, |_, o| idx.push((0, f(o))));
    take(&[x.data()], &idx)
}

pub(super) fn transpose(perm: &[usize], x: &Tensor, shape: &[usize]) -> TensorData {
    let s = strides(x.shape());
    gather_flat(x, shape, |o| {
        o.iter().zip(perm).map(|(i, &p)| i * s[p]).sum()
    })
}

pub(super) fn slice(
    axes: &[usize],
    starts: &[i64],
    ends: &[i64],
    steps: &[i64],
    x: &Tensor,
    shape: &[usize],
) -> TensorData {
    let rank = x.shape().len();
    let mut start = vec![0i64; rank];
    let mut step = vec![1i64; rank];
    for (i, &a) in axes.iter().enumerate() {
        start[a] = slice_range(x.shape()[a], starts[i], ends[i], steps[i]).0;
        step[a] = steps[i];
    }
    let s = strides(x.shape());
    gather_flat(x, shape, |o| {
        (0..rank)
            .map(|d| (start[d] + o[d] as i64 * step[d]) as usize * s[d])
            .sum()
    })
}

pub(super) fn concat(axis: usize, inputs: &[&Tensor], shape: &[usize]) -> TensorData {
    let (outer, _, inner) = split_axis(shape, axis);
    let mut idx = Vec::with_capacity(shape.iter().product());
    for o in 0..outer {
        for (src, t) in inputs.iter().enumerate() {
            let block = t.shape()[axis] * inner;
            idx.extend((0..block).map(|i| (src, o * block + i)));
        }
    }
    let datas: Vec<&TensorData> = inputs.iter().map(|t| t.data()).collect();
    take(&datas, &idx)
}

pub(super) fn gather(
    axis: usize,
    data: &Tensor,
    indices: &Tensor,
    shape: &[usize],
) -> Result<TensorData, InterpError> {
    let (outer, n, inner) = split_axis(data.shape(), axis);
    let mut rows = Vec::with_capacity(indices.numel());
    for i in 0..indices.numel() {
        let raw = match indices.data() {
            TensorData::I64(v) => v[i],
            TensorData::I32(v) => v[i] as i64,
            _ => unreachable!("inference admits only i32/i64 indices"),
        };
        let fixed = if raw < 0 { raw + n as i64 } else { raw };
        if fixed < 0 || fixed >= n as i64 {
            return Err(InterpError::IndexOutOfRange {
                op: "gather",
                index: raw,
                axis,
                size: n,
            });
        }
        rows.push(fixed as usize);
    }
    let mut idx = Vec::with_capacity(shape.iter().product());
    for o in 0..outer {
        for &r in &rows {
            idx.extend((0..inner).map(|i| (0, (o * n + r) * inner + i)));
        }
    }
    Ok(take(&[data.data()], &idx))
}

pub(super) fn expand(x: &Tensor, shape: &[usize]) -> TensorData {
    let m = broadcast_map(x.shape(), shape);
    let idx: Vec<(usize, usize)> = m.into_iter().map(|i| (0, i)).collect();
    take(&[x.data()], &idx)
}

/// Source position along a padded dim of size `n` for output position `o`, or None for
/// the constant fill.
pub fn pad_source(o: usize, before: usize, n: usize, mode: PadMode) -> Option<usize> {
    let p = o as isize - before as isize;
    let n = n as isize;
    if (0..n).contains(&p) {
        return Some(p as usize);
    }
    match mode {
        PadMode::Constant(_) => None,
        PadMode::Edge => Some(p.clamp(0, n - 1) as usize),
        PadMode::Reflect => Some(if p < 0 { -p } else { 2 * (n - 1) - p } as usize),
    }
}

pub(super) fn pad(
    pads: &[(usize, usize)],
    mode: PadMode,
    x: &Tensor,
    shape: &[usize],
) -> TensorData {
    let fill_value = match mode {
        PadMode::Constant(v) => v,
        _ => 0.0,
    };
    let fill = TensorData::from_f64(x.dtype(), [fill_value]);
    let s = strides(x.shape());
    let mut idx = Vec::with_capacity(shape.iter().product());
    for_each_index(shape, |_, o| {
        let mut flat = 0;
        for d in 0..o.len() {
            match pad_source(o[d], pads[d].0, x.shape()[d], mode) {
                Some(p) => flat += p * s[d],
                None => {
                    idx.push((1, 0));
                    return;
                }
            }
        }
        idx.push((0, flat));
    });
    take(&[x.data(), &fill], &idx)
}
