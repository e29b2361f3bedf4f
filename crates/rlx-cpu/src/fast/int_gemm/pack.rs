//! Operands of the integer GEMM in the one form its tiles read: activations as u8 rows
//! padded to a multiple of 4 values, weights as i8 panels of [`NR`] columns interleaved by
//! groups of 4 values along k (the operand order of `vpdpbusd`).
//!
//! Both are moved into that signedness by flipping the top bit: an i8 activation `x`
//! becomes the u8 `x + 128`, a u8 weight `w` the i8 `w - 128`, and their zero points move
//! with them, so `(a - a_zero) * (b - b_zero)` is unchanged. Padding is zero and adds
//! nothing; the zero-point terms use sums over the real `k` values only.

use crate::fast::memory::OutPtr;
use crate::fast::pool;
use rlx_ir::int_matmul::quantize;

/// Columns per weight panel (16 i32 lanes of a 512-bit register).
pub(crate) const NR: usize = 16;

/// A weight `[k, n]` packed for the tiles.
#[derive(Debug)]
pub(crate) struct PackedB {
    pub k: usize,
    pub n: usize,
    /// groups of 4 along k
    pub k4: usize,
    /// panels of [`NR`] columns: `[panel][k4][NR][4]` i8 values
    pub data: Vec<i8>,
    /// per column: the sum of its (i8) values
    pub col_sums: Vec<i32>,
    /// the weight was u8 (its zero points move by -128)
    pub flipped: bool,
}

impl PackedB {
    /// Packs `b`, row-major `[k, n]` bytes holding i8 values (`signed`) or u8 ones.
    pub fn pack(b: &[u8], k: usize, n: usize, signed: bool) -> PackedB {
        let k4 = k.div_ceil(4);
        let panels = n.div_ceil(NR);
        let mut data = vec![0i8; panels * k4 * NR * 4];
        let mut col_sums = vec![0i32; n];
        let flip = if signed { 0 } else { 0x80 };
        for l in 0..k {
            let row = &b[l * n..(l + 1) * n];
            let (g, t) = (l / 4, l % 4);
            for (j, &v) in row.iter().enumerate() {
                let v = (v ^ flip) as i8;
                let (p, c) = (j / NR, j % NR);
                data[((p * k4 + g) * NR + c) * 4 + t] = v;
                col_sums[j] += i32::from(v);
            }
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

    /// Bytes between two panels.
    pub fn panel_stride(&self) -> usize {
        self.k4 * NR * 4
    }

    /// A zero point of the packed values, given one of the original weight.
    pub fn zero(&self, z: i32) -> i32 {
        if self.flipped {
            z - 128
        } else {
            z
        }
    }
}

/// Activation rows as u8, each padded to `stride` (a multiple of 4) with zeros, with their
/// sums and the zero point in the same representation.
#[derive(Debug, Default)]
pub(crate) struct PackedA {
    pub stride: usize,
    pub data: Vec<u8>,
    pub row_sums: Vec<i32>,
    pub zero: i32,
}

/// How activation rows arrive.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ASource<'a> {
    /// u8 values and their zero point
    U8(&'a [u8], i32),
    /// i8 values and their zero point
    I8(&'a [i8], i32),
    /// f32 values quantized with a scale and a zero point into `0..=255` (false) or
    /// `-128..=127` (true)
    F32 {
        x: &'a [f32],
        scale: f32,
        zero: i32,
        signed: bool,
    },
}

impl PackedA {
    /// Packs `m` rows of `k` values from `src` into `self` (reusing its storage), rows
    /// split over the pool when `threads > 1`.
    pub fn fill(&mut self, src: ASource<'_>, m: usize, k: usize, threads: usize) {
        let stride = k.div_ceil(4) * 4;
        self.stride = stride;
        self.data.clear();
        self.data.resize(m * stride, 0);
        self.row_sums.clear();
        self.row_sums.resize(m, 0);
        self.zero = match src {
            ASource::U8(_, z) => z,
            ASource::I8(_, z) => z + 128,
            ASource::F32 { zero, signed, .. } => zero + if signed { 128 } else { 0 },
        };
        if m == 0 || stride == 0 {
            return;
        }
        let sums = OutPtr(self.row_sums.as_mut_ptr());
        let fill = |i0: usize, rows: &mut [u8]| {
            for (r, dst) in rows.chunks_exact_mut(stride).enumerate() {
                let i = i0 + r;
                let dst = &mut dst[..k];
                match src {
                    ASource::U8(a, _) => dst.copy_from_slice(&a[i * k..(i + 1) * k]),
                    ASource::I8(a, _) => {
                        for (d, &v) in dst.iter_mut().zip(&a[i * k..(i + 1) * k]) {
                            *d = (v as u8) ^ 0x80;
                        }
                    }
                    ASource::F32 {
                        x,
                        scale,
                        zero,
                        signed,
                    } => quantize_row(&x[i * k..(i + 1) * k], scale, zero, signed, dst),
                }
                // SAFETY: row i's sum is written by the one task holding row i.
                unsafe { *sums.ptr().add(i) = row_sum(dst) };
            }
        };
        let rows_per_task = ROWS_PER_TASK.max(1);
        if threads > 1 && m > rows_per_task {
            pool::for_each_chunk_mut(&mut self.data, rows_per_task * stride, |c, rows| {
                fill(c * rows_per_task, rows)
            });
        } else {
            fill(0, &mut self.data);
        }
    }
}

/// Activation rows per parallel packing task.
const ROWS_PER_TASK: usize = 16;

/// `saturate(round(x / scale) + zero)` of one row, stored as u8 (i8 targets shifted by 128).
fn quantize_row(x: &[f32], scale: f32, zero: i32, signed: bool, out: &mut [u8]) {
    let (lo, hi) = if signed { (-128, 127) } else { (0, 255) };
    let shift = if signed { 128 } else { 0 };
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if crate::fast::library::packed_gemm::fma() {
        // SAFETY: the CPU has AVX2 and FMA (checked just above).
        done = unsafe { quantize_avx2(x, scale, zero, lo, hi, shift, out) };
    }
    for (o, &v) in out[done..].iter_mut().zip(&x[done..]) {
        *o = (quantize(v, scale, zero, lo, hi) + shift) as u8;
    }
}

/// [`quantize_row`] 32 values at a time (the same quotient, rounding to nearest even and
/// clamp as [`quantize`], NaN to `lo` as there); returns how many values it wrote.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn quantize_avx2(
    x: &[f32],
    scale: f32,
    zero: i32,
    lo: i32,
    hi: i32,
    shift: i32,
    out: &mut [u8],
) -> usize {
    use std::arch::x86_64::*;
    let n = x.len().min(out.len()) / 32 * 32;
    let s = _mm256_set1_ps(scale);
    // x / scale as x * (1 / scale) and one exact-residual correction (Markstein): the
    // correctly rounded quotient, as the division gives, at a fraction of its cost, for a
    // scale whose reciprocal is a normal number
    let recip = 1.0 / scale;
    let fast = scale.is_normal() && recip.is_normal();
    let r = _mm256_set1_ps(recip);
    let low = _mm256_set1_ps((lo - zero) as f32);
    let high = _mm256_set1_ps((hi - zero) as f32);
    let add = _mm256_set1_epi32(zero + shift);
    // undoes the lane interleaving of the two packs below
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for i in (0..n).step_by(32) {
        let q = [0, 8, 16, 24].map(|o| {
            let x = _mm256_loadu_ps(x.as_ptr().add(i + o));
            let v = if fast {
                quotient(x, s, r)
            } else {
                _mm256_div_ps(x, s)
            };
            let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v);
            // max(NaN, low) is low, as f32::max gives
            let r = _mm256_min_ps(_mm256_max_ps(r, low), high);
            _mm256_add_epi32(_mm256_cvtps_epi32(r), add)
        });
        let ab = _mm256_packs_epi32(q[0], q[1]);
        let cd = _mm256_packs_epi32(q[2], q[3]);
        let bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), order);
        _mm256_storeu_si256(out.as_mut_ptr().add(i).cast(), bytes);
    }
    n
}

/// `x / s` correctly rounded from `r = 1 / s` (correctly rounded, normal, as `s`): the
/// product `q = x * r` and the correction `q + (x - q * s) * r`, the residual exact by FMA.
/// An infinite or NaN product stays as it is (the residual would turn it into NaN).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn quotient(
    x: std::arch::x86_64::__m256,
    s: std::arch::x86_64::__m256,
    r: std::arch::x86_64::__m256,
) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let q = _mm256_mul_ps(x, r);
    let corrected = _mm256_fmadd_ps(_mm256_fnmadd_ps(q, s, x), r, q);
    // q - q is 0 for a finite q, NaN otherwise
    let finite = _mm256_cmp_ps::<_CMP_ORD_Q>(_mm256_sub_ps(q, q), _mm256_setzero_ps());
    _mm256_blendv_ps(q, corrected, finite)
}

/// `DynamicQuantizeLinear`'s scale and zero point of `x`
/// (`rlx_ir::int_matmul::dynamic_params`), its range found 32 values at a time.
pub(crate) fn dynamic_params(x: &[f32]) -> (f32, i32) {
    let mut done = 0;
    let (mut mn, mut mx) = (0f32, 0f32);
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        (mn, mx, done) = unsafe { range_avx2(x) };
    }
    for &v in &x[done..] {
        mn = mn.min(v);
        mx = mx.max(v);
    }
    rlx_ir::int_matmul::dynamic_params_of(mn, mx)
}

/// The minimum and maximum of `x`'s first values (and 0), NaNs ignored as `f32::min` does,
/// and how many values that was: four independent pairs of running vectors, so the loop
/// runs at the loads' pace rather than the min/max latency.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn range_avx2(x: &[f32]) -> (f32, f32, usize) {
    use std::arch::x86_64::*;
    let n = x.len() / 32 * 32;
    let (mut lo, mut hi) = ([_mm256_setzero_ps(); 4], [_mm256_setzero_ps(); 4]);
    for i in (0..n).step_by(32) {
        for j in 0..4 {
            let v = _mm256_loadu_ps(x.as_ptr().add(i + 8 * j));
            // a NaN in the first operand gives the second: the running value
            lo[j] = _mm256_min_ps(v, lo[j]);
            hi[j] = _mm256_max_ps(v, hi[j]);
        }
    }
    let (mut l, mut h) = ([0f32; 32], [0f32; 32]);
    for j in 0..4 {
        _mm256_storeu_ps(l.as_mut_ptr().add(8 * j), lo[j]);
        _mm256_storeu_ps(h.as_mut_ptr().add(8 * j), hi[j]);
    }
    let mn = l.iter().fold(0f32, |a, &b| a.min(b));
    let mx = h.iter().fold(0f32, |a, &b| a.max(b));
    (mn, mx, n)
}

fn row_sum(r: &[u8]) -> i32 {
    r.iter().map(|&v| i32::from(v)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_keeps_every_value_and_sum() {
        let (k, n) = (7, 19);
        let b: Vec<u8> = (0..k * n).map(|i| (i * 37 % 256) as u8).collect();
        for signed in [false, true] {
            let p = PackedB::pack(&b, k, n, signed);
            for l in 0..k {
                for j in 0..n {
                    let got = p.data[((j / NR * p.k4 + l / 4) * NR + j % NR) * 4 + l % 4];
                    let want = if signed {
                        b[l * n + j] as i8
                    } else {
                        (i32::from(b[l * n + j]) - 128) as i8
                    };
                    assert_eq!(got, want);
                }
            }
            let sum0: i32 = (0..k).map(|l| i32::from(p.data_at(l, 0))).sum();
            assert_eq!(p.col_sums[0], sum0);
        }
    }

    /// [`dynamic_params`] against the reference's plain fold, on random values of every
    /// length around the vector widths (NaNs among them, which both ignore).
    #[test]
    fn dynamic_params_match_the_reference() {
        let mut rng = rlx_ir::SplitMix64(7);
        for len in [1, 7, 8, 31, 32, 33, 95, 96, 100, 1000] {
            for shift in [-3.0f32, 0.0, 2.5] {
                let mut x: Vec<f32> = (0..len)
                    .map(|_| (rng.below(1 << 20) as f32 / (1 << 19) as f32 - 1.0) * 4.0 + shift)
                    .collect();
                if len > 40 {
                    x[37] = f32::NAN;
                }
                let want = rlx_ir::int_matmul::dynamic_params(&x);
                assert_eq!(dynamic_params(&x), want, "len {len} shift {shift}");
            }
        }
    }

    /// The AVX2 quantization (reciprocal and correction) against the scalar division on
    /// random values, many of them within a few ulp of a rounding tie, and on the
    /// infinities and NaN.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn quantized_rows_match_the_division() {
        if !crate::fast::library::packed_gemm::fma() {
            return;
        }
        let mut rng = rlx_ir::SplitMix64(3);
        let mut unit = || rng.next_f64() as f32;
        for round in 0..400 {
            let scale = (unit() * 0.1 + 1e-4) * if round % 3 == 0 { 1e-3 } else { 1.0 };
            let zero = (unit() * 255.0) as i32;
            let mut x: Vec<f32> = (0..4096)
                .map(|i| {
                    let k = (unit() * 300.0 - 150.0).round();
                    match i % 3 {
                        // a tie, and its neighbours a few ulp away
                        0 => (k + 0.5) * scale,
                        1 => {
                            let t = (k + 0.5) * scale;
                            let ulps = (unit() * 8.0) as i32 - 4;
                            f32::from_bits((t.to_bits() as i32 + ulps) as u32)
                        }
                        _ => (unit() * 2.0 - 1.0) * 200.0 * scale,
                    }
                })
                .collect();
            x[..4].copy_from_slice(&[f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 0.0]);
            for signed in [false, true] {
                let mut got = vec![0u8; x.len()];
                quantize_row(&x, scale, zero, signed, &mut got);
                let (lo, hi, shift) = if signed {
                    (-128, 127, 128)
                } else {
                    (0, 255, 0)
                };
                for (&v, &g) in x.iter().zip(&got) {
                    let want = (quantize(v, scale, zero, lo, hi) + shift) as u8;
                    assert_eq!(g, want, "{v} / {scale} + {zero}");
                }
            }
        }
    }

    impl PackedB {
        fn data_at(&self, l: usize, j: usize) -> i8 {
            self.data[((j / NR * self.k4 + l / 4) * NR + j % NR) * 4 + l % 4]
        }
    }
}
