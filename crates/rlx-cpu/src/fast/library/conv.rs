//! f32 convolution (im2col + gemm, groups, bias) and pooling (windowed and global).

use super::matmul::{gemm, Mat};
use crate::fast::pool;
use rlx_interp::{pool_windows, PoolWindow};
use rlx_ir::{Conv2dParams, Pool2dParams, PoolKind};
use std::sync::Mutex;

/// Output channels a depthwise convolution computes together, one per vector lane.
const LANES: usize = 16;

/// A compiled NCHW/OIHW convolution.
#[derive(Debug, Clone)]
pub(crate) struct ConvPlan {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub o: usize,
    pub cg: usize,
    pub kh: usize,
    pub kw: usize,
    pub oh: usize,
    pub ow: usize,
    pub p: Conv2dParams,
    /// 1x1, stride 1, no padding: the input already is the column matrix
    pub pointwise: bool,
    /// grouped with little work per group: summed tap by tap straight from the input, no
    /// column matrix (depthwise: 16 output channels in vector lanes; else plane by plane)
    pub direct: bool,
    /// images processed in parallel (each with its own column buffer)
    pub workers: usize,
    pub threads: usize,
}

impl ConvPlan {
    /// Plans a convolution of `x` by `w` giving `out`.
    pub fn new(
        p: Conv2dParams,
        x: &[usize],
        w: &[usize],
        out: &[usize],
        threads: usize,
    ) -> ConvPlan {
        let pointwise =
            (w[2] == 1 && w[3] == 1 && p.stride == [1, 1] && p.pads == [0; 4]) || w[1] == 0;
        let workers = if x[0] >= 2 * threads { threads } else { 1 };
        // one GEMM per group pays a column matrix and a parallel dispatch per group: with a
        // few input channels a group (depthwise: one), summing taps directly is far cheaper
        let direct = p.groups > 1 && w[1] <= 4 && !pointwise;
        ConvPlan {
            n: x[0],
            c: x[1],
            h: x[2],
            w: x[3],
            o: w[0],
            cg: w[1],
            kh: w[2],
            kw: w[3],
            oh: out[2],
            ow: out[3],
            p,
            pointwise,
            direct,
            workers,
            threads,
        }
    }

    /// f32 elements of column scratch needed.
    pub fn scratch_len(&self) -> usize {
        if self.pointwise || self.direct {
            0
        } else {
            self.workers * self.cg * self.kh * self.kw * self.oh * self.ow
        }
    }

    /// Runs the convolution; `col` has [`ConvPlan::scratch_len`] elements.
    pub fn run(
        &self,
        x: &[f32],
        w: &[f32],
        bias: Option<&[f32]>,
        out: &mut [f32],
        col: &mut [f32],
    ) {
        let img_out = self.o * self.oh * self.ow;
        if img_out == 0 {
            return;
        }
        if self.direct && self.cg == 1 {
            // depthwise: output channels in vector lanes, LANES at a time
            let plane = self.oh * self.ow;
            for (b, img) in out.chunks_mut(img_out).enumerate() {
                pool::for_each_chunk_mut_init(img, LANES * plane, Vec::new, |scratch, blk, o| {
                    self.depthwise_block(b, blk * LANES, x, w, bias, o, scratch);
                });
            }
            return;
        }
        if self.direct {
            let plane = self.oh * self.ow;
            let og = self.o / self.p.groups;
            pool::for_each_chunk_mut_init(out, plane, Vec::new, |scratch, r, o| {
                let (b, oc) = (r / self.o, r % self.o);
                let bias = bias.map_or(0.0, |bias| bias[oc]);
                self.direct_plane(b, oc, og, x, w, bias, o, scratch);
            });
            return;
        }
        let col_len = self.cg * self.kh * self.kw * self.oh * self.ow;
        if self.workers > 1 {
            let per = self.n.div_ceil(self.workers);
            let cols: Vec<Mutex<&mut [f32]>> = if self.pointwise {
                (0..self.workers).map(|_| Mutex::default()).collect()
            } else {
                col.chunks_mut(col_len).map(Mutex::new).collect()
            };
            pool::for_each_chunk_mut(out, per * img_out, |wi, outs| {
                let mut col = cols[wi].lock().unwrap_or_else(|e| e.into_inner());
                for (j, o) in outs.chunks_mut(img_out).enumerate() {
                    self.image(wi * per + j, x, w, bias, o, &mut col, 1);
                }
            });
        } else {
            for (b, o) in out.chunks_mut(img_out).enumerate() {
                self.image(b, x, w, bias, o, col, self.threads);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn image(
        &self,
        b: usize,
        x: &[f32],
        w: &[f32],
        bias: Option<&[f32]>,
        out: &mut [f32],
        col: &mut [f32],
        threads: usize,
    ) {
        let groups = self.p.groups;
        let og = self.o / groups;
        let plane = self.oh * self.ow;
        let kdim = self.cg * self.kh * self.kw;
        for g in 0..groups {
            let xg =
                &x[(b * self.c + g * self.cg) * self.h * self.w..][..self.cg * self.h * self.w];
            let og_out = &mut out[g * og * plane..(g + 1) * og * plane];
            if let Some(bias) = bias {
                for (oc, row) in og_out.chunks_mut(plane).enumerate() {
                    row.fill(bias[g * og + oc]);
                }
            }
            let cols: &[f32] = if self.pointwise {
                xg
            } else {
                self.im2col(xg, &mut col[..kdim * plane], threads);
                &col[..kdim * plane]
            };
            let wg = Mat {
                data: &w[g * og * kdim..(g + 1) * og * kdim],
                rs: kdim,
                cs: 1,
            };
            let cm = Mat {
                data: cols,
                rs: plane,
                cs: 1,
            };
            gemm(
                og,
                plane,
                kdim,
                wg,
                cm,
                og_out,
                plane,
                bias.is_some(),
                1.0,
                1.0,
                threads,
            );
        }
    }

    /// Output channels `oc0..` (as many as `out` holds planes, at most [`LANES`]) of image `b`
    /// of a depthwise convolution (one input channel a group), the channels in vector lanes:
    /// their input channels are copied zero-padded into `scratch` as `[row][column][lane]`,
    /// every output pixel sums its taps as whole lane vectors, and the pixels are written back
    /// to the channels' planes.
    #[allow(clippy::too_many_arguments)]
    fn depthwise_block(
        &self,
        b: usize,
        oc0: usize,
        x: &[f32],
        w: &[f32],
        bias: Option<&[f32]>,
        out: &mut [f32],
        scratch: &mut Vec<f32>,
    ) {
        let p = &self.p;
        let plane = self.oh * self.ow;
        let lanes = out.len() / plane;
        let og = self.o / p.groups;
        let ph = (self.oh - 1) * p.stride[0] + (self.kh - 1) * p.dilation[0] + 1;
        let pw = (self.ow - 1) * p.stride[1] + (self.kw - 1) * p.dilation[1] + 1;
        let taps = self.kh * self.kw;
        scratch.clear();
        scratch.resize((ph * pw + taps) * LANES, 0.0);
        let (padded, wt) = scratch.split_at_mut(ph * pw * LANES);
        // the taps as [tap][lane]; lanes past `lanes` stay zero
        for l in 0..lanes {
            let oc = oc0 + l;
            for t in 0..taps {
                wt[t * LANES + l] = w[oc * taps + t];
            }
        }
        // where each lane's input plane starts in `x`
        let mut starts = [0usize; LANES];
        for (l, at) in starts.iter_mut().enumerate().take(lanes) {
            *at = (b * self.c + (oc0 + l) / og) * self.h * self.w;
        }
        // the input rows and columns the taps reach, written a pixel (all lanes) at a time
        let rows = self.h.min(ph.saturating_sub(p.pads[0]));
        let cols = self.w.min(pw.saturating_sub(p.pads[1]));
        for iy in 0..rows {
            let r = iy + p.pads[0];
            let dst = &mut padded[(r * pw + p.pads[1]) * LANES..][..cols * LANES];
            for (ix, px) in dst.chunks_exact_mut(LANES).enumerate() {
                for (d, at) in px.iter_mut().zip(&starts[..lanes]) {
                    *d = x[at + iy * self.w + ix];
                }
            }
        }
        let mut init = [0.0f32; LANES];
        if let Some(bias) = bias {
            init[..lanes].copy_from_slice(&bias[oc0..oc0 + lanes]);
        }
        for oy in 0..self.oh {
            for ox in 0..self.ow {
                let mut acc = init;
                for i in 0..self.kh {
                    let r = oy * p.stride[0] + i * p.dilation[0];
                    for j in 0..self.kw {
                        let k = ox * p.stride[1] + j * p.dilation[1];
                        let v: &[f32; LANES] = padded[(r * pw + k) * LANES..][..LANES]
                            .try_into()
                            .expect("a lane vector");
                        let t: &[f32; LANES] = wt[(i * self.kw + j) * LANES..][..LANES]
                            .try_into()
                            .expect("a lane vector");
                        for l in 0..LANES {
                            acc[l] += t[l] * v[l];
                        }
                    }
                }
                let at = oy * self.ow + ox;
                for (l, a) in acc.iter().take(lanes).enumerate() {
                    out[l * plane + at] = *a;
                }
            }
        }
    }

    /// Output plane `oc` of image `b` of a grouped convolution, summed tap by tap. Each input
    /// channel of its group is first copied into `scratch` zero-padded and split by column
    /// phase (`sx` planes, phase `q` holding padded columns `q, q + sx, ...`), so that every tap
    /// adds its weight times a contiguous run of one phase's row to each output row, with no
    /// bounds to test and no stride.
    #[allow(clippy::too_many_arguments)]
    fn direct_plane(
        &self,
        b: usize,
        oc: usize,
        og: usize,
        x: &[f32],
        w: &[f32],
        bias: f32,
        out: &mut [f32],
        scratch: &mut Vec<f32>,
    ) {
        let p = &self.p;
        let (sy, sx) = (p.stride[0], p.stride[1]);
        let (dy, dx) = (p.dilation[0], p.dilation[1]);
        // padded sizes: rows that the taps reach, columns per phase
        let ph = (self.oh - 1) * sy + (self.kh - 1) * dy + 1;
        let pw = (self.ow - 1) + ((self.kw - 1) * dx) / sx + 1;
        scratch.clear();
        scratch.resize(sx * ph * pw, 0.0);
        out.fill(bias);
        let g = oc / og;
        for ci in 0..self.cg {
            let c = g * self.cg + ci;
            let src = &x[(b * self.c + c) * self.h * self.w..][..self.h * self.w];
            // scratch[q][r][k] = input[r - pad_top][k * sx + q - pad_left] (0 outside)
            let left = p.pads[1];
            for q in 0..sx {
                // the columns k of this phase whose input column k * sx + q - left is inside
                let k0 = left.saturating_sub(q).div_ceil(sx).min(pw);
                let k1 = if self.w + left > q {
                    ((self.w + left - q - 1) / sx + 1).clamp(k0, pw)
                } else {
                    k0
                };
                for r in 0..ph {
                    let row = &mut scratch[(q * ph + r) * pw..][..pw];
                    let iy = r.wrapping_sub(p.pads[0]);
                    if iy >= self.h {
                        row.fill(0.0);
                        continue;
                    }
                    row[..k0].fill(0.0);
                    row[k1..].fill(0.0);
                    if k1 > k0 {
                        let first = k0 * sx + q - left;
                        let srow = &src[iy * self.w + first..(iy + 1) * self.w];
                        if sx == 1 {
                            row[k0..k1].copy_from_slice(&srow[..k1 - k0]);
                        } else {
                            for (d, s) in row[k0..k1].iter_mut().zip(srow.iter().step_by(sx)) {
                                *d = *s;
                            }
                        }
                    }
                }
            }
            let taps = &w[(oc * self.cg + ci) * self.kh * self.kw..][..self.kh * self.kw];
            for oy in 0..self.oh {
                let drow = &mut out[oy * self.ow..][..self.ow];
                for i in 0..self.kh {
                    let r = oy * sy + i * dy;
                    for j in 0..self.kw {
                        let (q, k0) = ((j * dx) % sx, (j * dx) / sx);
                        let srow = &scratch[(q * ph + r) * pw + k0..][..self.ow];
                        let wv = taps[i * self.kw + j];
                        for (d, s) in drow.iter_mut().zip(srow) {
                            *d += wv * s;
                        }
                    }
                }
            }
        }
    }

    /// Column matrix `[cg * kh * kw, oh * ow]` of one image group.
    fn im2col(&self, xg: &[f32], col: &mut [f32], threads: usize) {
        let (h, w, oh, ow) = (self.h as isize, self.w as isize, self.oh, self.ow);
        let p = &self.p;
        let fill_row = |r: usize, row: &mut [f32]| {
            let j = r % self.kw;
            let i = (r / self.kw) % self.kh;
            let ci = r / (self.kw * self.kh);
            let src = &xg[ci * self.h * self.w..(ci + 1) * self.h * self.w];
            for oy in 0..oh {
                let iy = (oy * p.stride[0] + i * p.dilation[0]) as isize - p.pads[0] as isize;
                let dst = &mut row[oy * ow..(oy + 1) * ow];
                if iy < 0 || iy >= h {
                    dst.fill(0.0);
                    continue;
                }
                let srow = &src[iy as usize * self.w..(iy as usize + 1) * self.w];
                for (ox, d) in dst.iter_mut().enumerate() {
                    let ix = (ox * p.stride[1] + j * p.dilation[1]) as isize - p.pads[1] as isize;
                    *d = if ix >= 0 && ix < w {
                        srow[ix as usize]
                    } else {
                        0.0
                    };
                }
            }
        };
        let plane = oh * ow;
        if threads > 1 {
            pool::for_each_chunk_mut(col, plane, fill_row);
        } else {
            col.chunks_mut(plane)
                .enumerate()
                .for_each(|(r, row)| fill_row(r, row));
        }
    }
}

/// A compiled 2-D pooling.
#[derive(Debug, Clone)]
pub(crate) struct PoolPlan {
    pub p: Pool2dParams,
    pub h: usize,
    pub w: usize,
    pub wy: Vec<PoolWindow>,
    pub wx: Vec<PoolWindow>,
}

impl PoolPlan {
    /// Plans pooling of an NCHW input into `out`.
    pub fn new(p: Pool2dParams, x: &[usize], out: &[usize]) -> PoolPlan {
        PoolPlan {
            p,
            h: x[2],
            w: x[3],
            wy: pool_windows(&p, 0, x[2], out[2]),
            wx: pool_windows(&p, 1, x[3], out[3]),
        }
    }

    /// Runs it, planes in parallel.
    pub fn run(&self, x: &[f32], out: &mut [f32]) {
        let (h, w) = (self.h, self.w);
        let plane_out = self.wy.len() * self.wx.len();
        if plane_out == 0 {
            return;
        }
        let p = &self.p;
        pool::for_each_chunk_mut(out, plane_out, |pi, o| {
            let xp = &x[pi * h * w..(pi + 1) * h * w];
            let mut k = 0;
            for a in &self.wy {
                for b in &self.wx {
                    let mut acc = match p.kind {
                        PoolKind::Max => f32::NEG_INFINITY,
                        PoolKind::Avg => 0.0,
                    };
                    for i in a.lo..a.hi {
                        let row = &xp[(a.start + (i * p.dilation[0]) as isize) as usize * w..];
                        for j in b.lo..b.hi {
                            let v = row[(b.start + (j * p.dilation[1]) as isize) as usize];
                            acc = match p.kind {
                                PoolKind::Max => acc.max(v),
                                PoolKind::Avg => acc + v,
                            };
                        }
                    }
                    if p.kind == PoolKind::Avg {
                        let count = if p.count_include_pad {
                            a.padded * b.padded
                        } else {
                            (a.hi - a.lo) * (b.hi - b.lo)
                        };
                        acc = if count == 0 { 0.0 } else { acc / count as f32 };
                    }
                    o[k] = acc;
                    k += 1;
                }
            }
        });
    }
}

/// Global max/avg pooling: one output per row of `len` elements.
pub(crate) fn global_pool(kind: PoolKind, len: usize, x: &[f32], out: &mut [f32]) {
    if len == 0 {
        out.fill(match kind {
            PoolKind::Max => f32::NEG_INFINITY,
            PoolKind::Avg => f32::NAN,
        });
        return;
    }
    pool::for_each_chunk_mut(out, 1, |i, o| {
        let row = &x[i * len..(i + 1) * len];
        o[0] = match kind {
            PoolKind::Max => row.iter().copied().fold(f32::NEG_INFINITY, f32::max),
            PoolKind::Avg => super::norm::sum(row) / len as f32,
        };
    });
}
