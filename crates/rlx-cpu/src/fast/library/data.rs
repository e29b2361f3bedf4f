//! Data movement on raw bytes, so one implementation serves every dtype: gather (embedding
//! lookup), concat and pad.

use crate::fast::memory::Data;
use crate::fast::pool;
use crate::CpuError;
use rlx_interp::index::{split_axis, strides};
use rlx_interp::pad_source;
use rlx_ir::{DType, PadMode, TensorData};

/// Below this many bytes, copies stay on one thread.
const PAR_BYTES: usize = 1 << 16;

/// A compiled gather: `[outer, n, inner]` data, `n_idx` indices.
#[derive(Debug, Clone)]
pub(crate) struct GatherPlan {
    pub axis: usize,
    pub n: usize,
    /// bytes per gathered row
    pub row: usize,
}

impl GatherPlan {
    /// Plans `data.take(indices, axis)` for data of `shape` and elements of `elem` bytes.
    pub fn new(axis: usize, shape: &[usize], elem: usize) -> GatherPlan {
        let (_, n, inner) = split_axis(shape, axis);
        GatherPlan {
            axis,
            n,
            row: inner * elem,
        }
    }

    /// Runs it; fails on an index outside the axis.
    pub fn run(&self, data: &[u8], indices: Data<'_>, out: &mut [u8]) -> Result<(), CpuError> {
        let raw: Vec<i64> = match indices {
            Data::I64(v) => v.to_vec(),
            Data::I32(v) => v.iter().map(|&i| i as i64).collect(),
            _ => unreachable!("inference admits only i32/i64 indices"),
        };
        let mut rows = Vec::with_capacity(raw.len());
        for &i in &raw {
            let fixed = if i < 0 { i + self.n as i64 } else { i };
            if fixed < 0 || fixed >= self.n as i64 {
                return Err(CpuError::IndexOutOfRange {
                    op: "gather",
                    index: i,
                    axis: self.axis,
                    size: self.n,
                });
            }
            rows.push(fixed as usize);
        }
        if self.row == 0 {
            return Ok(());
        }
        let n_idx = rows.len();
        let copy = |t: usize, dst: &mut [u8]| {
            let (o, i) = (t / n_idx, t % n_idx);
            let src = (o * self.n + rows[i]) * self.row;
            dst.copy_from_slice(&data[src..src + self.row]);
        };
        if out.len() >= PAR_BYTES {
            pool::for_each_chunk_mut(out, self.row, copy);
        } else {
            out.chunks_mut(self.row)
                .enumerate()
                .for_each(|(t, d)| copy(t, d));
        }
        Ok(())
    }
}

/// A compiled concat: per outer index, each input contributes one block of bytes.
#[derive(Debug, Clone)]
pub(crate) struct ConcatPlan {
    /// bytes per outer index for each input
    pub blocks: Vec<usize>,
}

impl ConcatPlan {
    /// Plans a concat along `axis` of inputs of the given shapes.
    pub fn new(axis: usize, shapes: &[&[usize]], elem: usize) -> ConcatPlan {
        ConcatPlan {
            blocks: shapes
                .iter()
                .map(|s| s[axis..].iter().product::<usize>() * elem)
                .collect(),
        }
    }

    /// Runs it.
    pub fn run(&self, ins: &[&[u8]], out: &mut [u8]) {
        let total: usize = self.blocks.iter().sum();
        if total == 0 {
            return;
        }
        let copy = |o: usize, dst: &mut [u8]| {
            let mut at = 0;
            for (src, &b) in ins.iter().zip(&self.blocks) {
                dst[at..at + b].copy_from_slice(&src[o * b..(o + 1) * b]);
                at += b;
            }
        };
        if out.len() >= PAR_BYTES {
            pool::for_each_chunk_mut(out, total, copy);
        } else {
            out.chunks_mut(total)
                .enumerate()
                .for_each(|(o, d)| copy(o, d));
        }
    }
}

/// A compiled pad over rows of the last dim.
#[derive(Debug, Clone)]
pub(crate) struct PadPlan {
    pub in_shape: Vec<usize>,
    pub out_shape: Vec<usize>,
    pub pads: Vec<(usize, usize)>,
    pub mode: PadMode,
    pub elem: usize,
    /// the constant's bytes
    pub fill: Vec<u8>,
}

impl PadPlan {
    /// Plans a pad of a `dtype` tensor.
    pub fn new(
        pads: &[(usize, usize)],
        mode: PadMode,
        dtype: DType,
        x: &[usize],
        out: &[usize],
    ) -> PadPlan {
        let v = match mode {
            PadMode::Constant(v) => v,
            _ => 0.0,
        };
        PadPlan {
            in_shape: x.to_vec(),
            out_shape: out.to_vec(),
            pads: pads.to_vec(),
            mode,
            elem: dtype.size_bytes(),
            fill: TensorData::from_f64(dtype, [v]).to_le_bytes(),
        }
    }

    /// Runs it.
    pub fn run(&self, x: &[u8], out: &mut [u8]) {
        let e = self.elem;
        if self.out_shape.is_empty() {
            out.copy_from_slice(x);
            return;
        }
        let r = self.out_shape.len();
        let (n_in, n_out) = (self.in_shape[r - 1], self.out_shape[r - 1]);
        let (before, _) = self.pads[r - 1];
        if n_out == 0 {
            return;
        }
        let cols: Vec<Option<usize>> = (0..n_out)
            .map(|o| pad_source(o, before, n_in, self.mode))
            .collect();
        let in_strides = strides(&self.in_shape);
        let lead = &self.out_shape[..r - 1];
        let fill_row = |row_idx: usize, dst: &mut [u8]| {
            let mut rest = row_idx;
            let mut src = Some(0usize);
            for d in (0..r - 1).rev() {
                let o = rest % lead[d];
                rest /= lead[d];
                src = match (
                    src,
                    pad_source(o, self.pads[d].0, self.in_shape[d], self.mode),
                ) {
                    (Some(s), Some(p)) => Some(s + p * in_strides[d]),
                    _ => None,
                };
            }
            let Some(base) = src else {
                dst.chunks_mut(e)
                    .for_each(|c| c.copy_from_slice(&self.fill));
                return;
            };
            let srow = &x[base * e..(base + n_in) * e];
            let mid = before.min(n_out)..(before + n_in).min(n_out);
            for (o, c) in cols.iter().enumerate() {
                if mid.contains(&o) {
                    continue;
                }
                let d = &mut dst[o * e..(o + 1) * e];
                match c {
                    Some(s) => d.copy_from_slice(&srow[s * e..(s + 1) * e]),
                    None => d.copy_from_slice(&self.fill),
                }
            }
            let (a, b) = (mid.start, mid.end);
            dst[a * e..b * e].copy_from_slice(&srow[(a - before) * e..(b - before) * e]);
        };
        if out.len() >= PAR_BYTES {
            pool::for_each_chunk_mut(out, n_out * e, fill_row);
        } else {
            out.chunks_mut(n_out * e)
                .enumerate()
                .for_each(|(i, d)| fill_row(i, d));
        }
    }
}
