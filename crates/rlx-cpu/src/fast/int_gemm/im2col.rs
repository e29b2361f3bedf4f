//! The patches of an integer convolution as the GEMM's right operand: one image's
//! channels of one group unrolled into `[k = c·kh·kw, oh·ow]` (im2col), written straight
//! into [`PackedB`]'s panels, so a convolution is one product of the (packed once) weight
//! rows by these columns and its result lands in NCHW order.

use super::pack::{PackedB, NR};
use crate::fast::memory::OutPtr;
use crate::fast::pool;

/// The window of one group's patches.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Patches {
    /// input channels of the group
    pub channels: usize,
    /// input height and width
    pub h: usize,
    pub w: usize,
    /// kernel height and width
    pub kh: usize,
    pub kw: usize,
    pub stride: [usize; 2],
    /// padding before the rows and the columns
    pub pad: [usize; 2],
    pub dilation: [usize; 2],
    /// output height and width
    pub oh: usize,
    pub ow: usize,
}

impl Patches {
    /// Values per patch (the product's `k`).
    pub fn k(&self) -> usize {
        self.channels * self.kh * self.kw
    }
}

/// Panels per parallel task.
const PANELS_PER_TASK: usize = 4;

impl PackedB {
    /// The patches of `x` (`[channels, h, w]` bytes holding i8 values when `signed`, else
    /// u8) as a packed `[k, oh·ow]` operand; positions in the padding read `zero` (the
    /// zero point's byte), so they add nothing once it is subtracted.
    pub fn im2col(x: &[u8], signed: bool, zero: u8, g: &Patches, threads: usize) -> PackedB {
        let (k, n) = (g.k(), g.oh * g.ow);
        let k4 = k.div_ceil(4);
        let panels = n.div_ceil(NR);
        let ps = k4 * NR * 4;
        let mut data = vec![0i8; panels * ps];
        let mut col_sums = vec![0i32; n];
        let flip = if signed { 0 } else { 0x80 };
        let sums = OutPtr(col_sums.as_mut_ptr());
        let fill = |p0: usize, chunk: &mut [i8]| {
            for (dp, panel) in chunk.chunks_exact_mut(ps).enumerate() {
                let p = p0 + dp;
                let cols = NR.min(n - p * NR);
                // each column's window corner (negative inside the padding)
                let (mut y0, mut x0) = ([0isize; NR], [0isize; NR]);
                for c in 0..cols {
                    let j = p * NR + c;
                    y0[c] = (j / g.ow * g.stride[0]) as isize - g.pad[0] as isize;
                    x0[c] = (j % g.ow * g.stride[1]) as isize - g.pad[1] as isize;
                }
                let mut col_sums = [0i32; NR];
                let mut l = 0;
                for ci in 0..g.channels {
                    let plane = &x[ci * g.h * g.w..(ci + 1) * g.h * g.w];
                    for i in 0..g.kh {
                        let dy = (i * g.dilation[0]) as isize;
                        for jj in 0..g.kw {
                            let dx = (jj * g.dilation[1]) as isize;
                            // column c of value l lies at (l / 4) * 4 * NR + c * 4 + l % 4
                            let dst = &mut panel[(l / 4) * 4 * NR + l % 4..];
                            for c in 0..cols {
                                // a negative index wraps past the bounds and reads `zero`
                                let (iy, ix) = ((y0[c] + dy) as usize, (x0[c] + dx) as usize);
                                let v = if iy < g.h && ix < g.w {
                                    plane[iy * g.w + ix]
                                } else {
                                    zero
                                };
                                let v = (v ^ flip) as i8;
                                dst[c * 4] = v;
                                col_sums[c] += i32::from(v);
                            }
                            l += 1;
                        }
                    }
                }
                for (c, &sum) in col_sums[..cols].iter().enumerate() {
                    // SAFETY: column p * NR + c's sum is written by the one task holding
                    // its panel.
                    unsafe { *sums.ptr().add(p * NR + c) = sum };
                }
            }
        };
        if threads > 1 && panels > PANELS_PER_TASK {
            pool::for_each_chunk_mut(&mut data, PANELS_PER_TASK * ps, |t, chunk| {
                fill(t * PANELS_PER_TASK, chunk)
            });
        } else {
            fill(0, &mut data);
        }
        PackedB {
            k,
            n,
            k4,
            data,
            col_sums,
            flipped: !signed,
        }
    }

    /// Per column, the sum of its values as given (before the sign flip of u8 values).
    pub fn given_col_sums(&self) -> impl Iterator<Item = i32> + '_ {
        let shift = if self.flipped { 128 * self.k as i32 } else { 0 };
        self.col_sums.iter().map(move |&s| s + shift)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The packed patches equal the plain im2col matrix packed by [`PackedB::pack`].
    #[test]
    fn patches_pack_as_the_plain_matrix() {
        let g = Patches {
            channels: 3,
            h: 5,
            w: 7,
            kh: 3,
            kw: 2,
            stride: [2, 1],
            pad: [1, 2],
            dilation: [1, 2],
            oh: 3,
            ow: 8,
        };
        let x: Vec<u8> = (0..3 * 5 * 7).map(|i| (i * 53 % 251) as u8).collect();
        let (k, n) = (g.k(), g.oh * g.ow);
        for (signed, zero) in [(false, 7u8), (true, 250u8)] {
            let mut plain = vec![zero; k * n];
            for ci in 0..3 {
                for i in 0..3 {
                    for jj in 0..2 {
                        let l = (ci * 3 + i) * 2 + jj;
                        for oy in 0..g.oh {
                            for ox in 0..g.ow {
                                let iy = (oy * 2 + i) as i64 - 1;
                                let ix = (ox + jj * 2) as i64 - 2;
                                if (0..5).contains(&iy) && (0..7).contains(&ix) {
                                    plain[l * n + oy * g.ow + ox] =
                                        x[(ci * 5 + iy as usize) * 7 + ix as usize];
                                }
                            }
                        }
                    }
                }
            }
            let want = PackedB::pack(&plain, k, n, signed);
            for threads in [1, 3] {
                let got = PackedB::im2col(&x, signed, zero, &g, threads);
                assert_eq!(got.data, want.data);
                assert_eq!(got.col_sums, want.col_sums);
                assert_eq!(got.flipped, want.flipped);
            }
        }
    }
}
