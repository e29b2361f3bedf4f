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
        let sums_out = OutPtr(col_sums.as_mut_ptr());
        let rows = Padded::new(x, zero, g);
        let x = &rows;
        let fill = |p0: usize, chunk: &mut [i8]| {
            for (dp, panel) in chunk.chunks_exact_mut(ps).enumerate() {
                let p = p0 + dp;
                let sums = fill_panel(x, flip, zero, g, p, panel);
                let cols = NR.min(n - p * NR);
                for (c, &sum) in sums[..cols].iter().enumerate() {
                    // SAFETY: column p * NR + c's sum is written by the one task holding
                    // its panel.
                    unsafe { *sums_out.ptr().add(p * NR + c) = sum };
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

/// Writes panel `p` (columns `p * NR..`, the last one cut to the output) of `x`'s patches
/// and returns its column sums (of the flipped values). Four rows of the patch matrix are
/// gathered at a time into 16-byte rows (one contiguous load where the panel lies in one
/// output row at unit stride inside the image), then interleaved into the panel's groups of
/// 4 bytes per column.
fn fill_panel(
    x: &Padded,
    flip: u8,
    zero: u8,
    g: &Patches,
    p: usize,
    panel: &mut [i8],
) -> [i32; NR] {
    let n = g.oh * g.ow;
    let cols = NR.min(n - p * NR);
    let k = g.k();
    // each column's window corner (negative inside the padding)
    let (mut y0, mut x0) = ([0isize; NR], [0isize; NR]);
    for c in 0..cols {
        let j = p * NR + c;
        y0[c] = (j / g.ow * g.stride[0]) as isize - g.pad[0] as isize;
        x0[c] = (j % g.ow * g.stride[1]) as isize - g.pad[1] as isize;
    }
    // the whole panel in one output row: every column shares y0, and x0 steps by the stride
    let one_row = cols == NR && y0[NR - 1] == y0[0];
    let (hw, kk) = (g.kh * g.kw, g.kw);
    let mut sums = [0i32; NR];
    let mut rows = [[zero ^ flip; NR]; 4];
    let mut l = 0;
    while l < k {
        for (t, row) in rows.iter_mut().enumerate() {
            let l = l + t;
            if l >= k {
                // padding along k is zero (after the flip) and adds nothing
                *row = [0; NR];
                continue;
            }
            let (ci, r) = (l / hw, l % hw);
            let (dy, dx) = (
                (r / kk * g.dilation[0]) as isize,
                (r % kk * g.dilation[1]) as isize,
            );
            gather_row(x, ci, g, &y0, &x0, dy, dx, cols, one_row, zero, row);
            for (v, s) in row.iter_mut().zip(sums.iter_mut()) {
                *v ^= flip;
                *s += i32::from(*v as i8);
            }
            // columns past the output stay zero, as the packing leaves them
            row[cols..].fill(0);
        }
        let dst = &mut panel[(l / 4) * 4 * NR..(l / 4 + 1) * 4 * NR];
        interleave4(&rows, dst);
        l += 4;
    }
    sums
}

/// The input with every row widened by `zero` on both sides, so a row of a panel that
/// lies in one output row is read with plain loads, padding included.
pub(crate) struct Padded {
    data: Vec<u8>,
    /// bytes per widened row, and `zero`s before each row's first value
    width: usize,
    left: usize,
}

impl Padded {
    fn new(x: &[u8], zero: u8, g: &Patches) -> Padded {
        let left = g.pad[1];
        // room for the widest read: NR columns at the stride, then a 16-byte load
        let width = left + g.w + g.pad[1] + NR * g.stride[1] + 16;
        let mut data = vec![zero; g.channels * g.h * width];
        for (src, dst) in x.chunks_exact(g.w.max(1)).zip(data.chunks_exact_mut(width)) {
            dst[left..left + g.w].copy_from_slice(src);
        }
        Padded { data, width, left }
    }

    /// Row `iy` of channel `ci`, from its first padding value on.
    #[inline(always)]
    fn line(&self, g: &Patches, ci: usize, iy: usize) -> &[u8] {
        let at = (ci * g.h + iy) * self.width;
        &self.data[at..at + self.width]
    }
}

/// One row of the patch matrix (offsets `dy`, `dx` in the window) over the panel's
/// columns of channel `ci` into `row`, `zero` outside the image; columns past `cols` hold
/// `zero`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn gather_row(
    x: &Padded,
    ci: usize,
    g: &Patches,
    y0: &[isize; NR],
    x0: &[isize; NR],
    dy: isize,
    dx: isize,
    cols: usize,
    one_row: bool,
    zero: u8,
    row: &mut [u8; NR],
) {
    if one_row {
        let iy = (y0[0] + dy) as usize;
        if iy >= g.h {
            *row = [zero; NR];
            return;
        }
        let line = x.line(g, ci, iy);
        // the first column's value, counted from the row's padding (never negative)
        let first = (x0[0] + dx + x.left as isize) as usize;
        match g.stride[1] {
            1 => row.copy_from_slice(&line[first..first + NR]),
            #[cfg(target_arch = "x86_64")]
            2 => {
                use std::arch::x86_64::*;
                let src = &line[first..first + 2 * NR];
                // SAFETY: SSE2 is part of x86-64; both loads read within `src` (32 bytes),
                // the store writes `row`'s 16.
                unsafe {
                    let even = _mm_set1_epi16(0xff);
                    let a = _mm_and_si128(_mm_loadu_si128(src.as_ptr().cast()), even);
                    let b = _mm_and_si128(_mm_loadu_si128(src.as_ptr().add(16).cast()), even);
                    _mm_storeu_si128(row.as_mut_ptr().cast(), _mm_packus_epi16(a, b));
                }
            }
            s => {
                for (c, v) in row.iter_mut().enumerate() {
                    *v = line[first + c * s];
                }
            }
        }
        return;
    }
    for (c, v) in row.iter_mut().enumerate() {
        // a negative index wraps past the bounds and reads `zero`
        let (iy, ix) = ((y0[c] + dy) as usize, (x0[c] + dx) as usize);
        *v = if c < cols && iy < g.h && ix < g.w {
            x.line(g, ci, iy)[x.left + ix]
        } else {
            zero
        };
    }
}

/// `dst[c * 4 + t] = rows[t][c]`: four rows of [`NR`] bytes as the panel's groups of 4.
#[inline(always)]
fn interleave4(rows: &[[u8; NR]; 4], dst: &mut [i8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        assert!(dst.len() >= 4 * NR);
        // SAFETY: SSE2 is part of x86-64; every load reads 16 bytes of a row, every store
        // writes 16 of dst's 64 (checked above).
        unsafe {
            let r = |t: usize| _mm_loadu_si128(rows[t].as_ptr().cast());
            let (a0, a1, a2, a3) = (r(0), r(1), r(2), r(3));
            let (lo01, hi01) = (_mm_unpacklo_epi8(a0, a1), _mm_unpackhi_epi8(a0, a1));
            let (lo23, hi23) = (_mm_unpacklo_epi8(a2, a3), _mm_unpackhi_epi8(a2, a3));
            let d = dst.as_mut_ptr().cast::<__m128i>();
            _mm_storeu_si128(d, _mm_unpacklo_epi16(lo01, lo23));
            _mm_storeu_si128(d.add(1), _mm_unpackhi_epi16(lo01, lo23));
            _mm_storeu_si128(d.add(2), _mm_unpacklo_epi16(hi01, hi23));
            _mm_storeu_si128(d.add(3), _mm_unpackhi_epi16(hi01, hi23));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    for c in 0..NR {
        for t in 0..4 {
            dst[c * 4 + t] = rows[t][c] as i8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain `[k, oh·ow]` patch matrix of `x`, `zero` in the padding.
    fn plain(x: &[u8], g: &Patches, zero: u8) -> Vec<u8> {
        let (k, n) = (g.k(), g.oh * g.ow);
        let mut m = vec![zero; k * n];
        for ci in 0..g.channels {
            for i in 0..g.kh {
                for jj in 0..g.kw {
                    let l = (ci * g.kh + i) * g.kw + jj;
                    for oy in 0..g.oh {
                        for ox in 0..g.ow {
                            let iy =
                                (oy * g.stride[0] + i * g.dilation[0]) as i64 - g.pad[0] as i64;
                            let ix =
                                (ox * g.stride[1] + jj * g.dilation[1]) as i64 - g.pad[1] as i64;
                            if (0..g.h as i64).contains(&iy) && (0..g.w as i64).contains(&ix) {
                                m[l * n + oy * g.ow + ox] =
                                    x[(ci * g.h + iy as usize) * g.w + ix as usize];
                            }
                        }
                    }
                }
            }
        }
        m
    }

    fn window(
        c: usize,
        (h, w): (usize, usize),
        (kh, kw): (usize, usize),
        s: [usize; 2],
        pad: [usize; 2],
        d: [usize; 2],
    ) -> Patches {
        let out =
            |len: usize, k: usize, i: usize| (len + 2 * pad[i] - d[i] * (k - 1) - 1) / s[i] + 1;
        Patches {
            channels: c,
            h,
            w,
            kh,
            kw,
            stride: s,
            pad,
            dilation: d,
            oh: out(h, kh, 0),
            ow: out(w, kw, 1),
        }
    }

    /// The packed patches equal the plain im2col matrix packed by [`PackedB::pack`], over
    /// windows whose panels lie in one output row or span several, inside the image or
    /// across its padding, at unit and larger strides, with `k` not a multiple of 4.
    #[test]
    fn patches_pack_as_the_plain_matrix() {
        let windows = [
            window(3, (5, 7), (3, 2), [2, 1], [1, 2], [1, 2]),
            window(3, (20, 64), (3, 3), [1, 1], [1, 1], [1, 1]),
            window(5, (9, 33), (3, 3), [2, 2], [1, 1], [1, 1]),
            window(4, (16, 16), (3, 3), [1, 1], [2, 2], [2, 2]),
            window(2, (6, 40), (1, 5), [1, 2], [0, 3], [1, 1]),
            window(7, (3, 35), (1, 1), [1, 1], [0, 0], [1, 1]),
        ];
        for g in windows {
            let x: Vec<u8> = (0..g.channels * g.h * g.w)
                .map(|i| (i * 53 % 251) as u8)
                .collect();
            let (k, n) = (g.k(), g.oh * g.ow);
            for (signed, zero) in [(false, 7u8), (true, 250u8)] {
                let want = PackedB::pack(&plain(&x, &g, zero), k, n, signed);
                for threads in [1, 3] {
                    let got = PackedB::im2col(&x, signed, zero, &g, threads);
                    assert_eq!(got.data, want.data, "{g:?}");
                    assert_eq!(got.col_sums, want.col_sums, "{g:?}");
                    assert_eq!(got.flipped, want.flipped);
                }
            }
        }
    }
}
