//! Quantized matmul (`Op::QuantMatMul`): `y[m, n] = x[m, :] · dequantize(w[n, :])`.
//!
//! Weights stay packed; nothing dequantizes the whole matrix. Few activation rows (decode)
//! take the *dot* path: each output row of `w` is dequantized block by block in registers
//! (AVX2 + FMA kernels for Q4_0, Q4_1 and Q8_0, a block-to-stack-buffer path for the other
//! formats) and dotted with every activation row. Many rows (prefill) take the *tile* path:
//! a tile of `w`'s rows is dequantized into a small f32 buffer (one per task) and multiplied
//! with gemm. Both split the output features over the pool ([`super::pool`]).

use super::memory::OutPtr;
use crate::fast::pool;
use rlx_ir::QuantFormat;

/// Activation rows up to which the dot path is used.
const DOT_MAX_ROWS: usize = 4;
/// Rows of `w` per parallel task on the dot path.
const DOT_CHUNK: usize = 32;
/// Rows of `w` dequantized per tile on the tile path.
const TILE: usize = 64;

/// A compiled quantized matmul.
#[derive(Debug, Clone)]
pub(crate) struct QuantPlan {
    format: QuantFormat,
    /// activation rows
    m: usize,
    n: usize,
    k: usize,
    threads: usize,
}

impl QuantPlan {
    /// A plan for `x` of `x_numel` f32 values (rows of `k`) against `n` packed rows.
    pub fn new(format: QuantFormat, n: usize, k: usize, x_numel: usize, threads: usize) -> Self {
        QuantPlan {
            format,
            m: x_numel / k.max(1),
            n,
            k,
            threads,
        }
    }

    /// Runs the product; `w` is the packed weight, `y` the `[m, n]` output.
    pub fn run(&self, x: &[f32], w: &[u8], y: &mut [f32]) {
        let row_bytes = self.k / self.format.block() * self.format.block_bytes();
        debug_assert_eq!(w.len(), row_bytes * self.n);
        debug_assert_eq!(x.len(), self.m * self.k);
        debug_assert_eq!(y.len(), self.m * self.n);
        if self.m == 0 || self.n == 0 {
            return;
        }
        if self.m <= DOT_MAX_ROWS {
            self.run_dot(x, w, y, row_bytes);
        } else {
            self.run_tiles(x, w, y, row_bytes);
        }
    }

    fn run_dot(&self, x: &[f32], w: &[u8], y: &mut [f32], row_bytes: usize) {
        let (m, n, k, format) = (self.m, self.n, self.k, self.format);
        let out = OutPtr(y.as_mut_ptr());
        // Sum of x over each 32-value block: the Q4 formats' offset term is `off * sum`.
        let nb = k / 32;
        let sums: Vec<f32> = match format {
            QuantFormat::Q4_0 | QuantFormat::Q4_1 => {
                x.chunks_exact(32).map(|c| c.iter().sum::<f32>()).collect()
            }
            _ => Vec::new(),
        };
        let task = |c: usize| {
            let mut scratch = [0f32; 256];
            let rows = c * DOT_CHUNK..((c + 1) * DOT_CHUNK).min(n);
            for j in rows {
                let wr = &w[j * row_bytes..(j + 1) * row_bytes];
                for i in 0..m {
                    let xs = sums.get(i * nb..(i + 1) * nb).unwrap_or(&[]);
                    let v = dot_row(format, wr, &x[i * k..(i + 1) * k], xs, &mut scratch);
                    // SAFETY: element (i, j) is written by the one task owning row j.
                    unsafe { *out.ptr().add(i * n + j) = v };
                }
            }
        };
        let chunks = n.div_ceil(DOT_CHUNK);
        if self.threads > 1 {
            pool::for_each(chunks, task);
        } else {
            (0..chunks).for_each(task);
        }
    }

    fn run_tiles(&self, x: &[f32], w: &[u8], y: &mut [f32], row_bytes: usize) {
        let (m, n, k, format) = (self.m, self.n, self.k, self.format);
        let out = OutPtr(y.as_mut_ptr());
        let task = |t: usize| {
            let j0 = t * TILE;
            let tn = TILE.min(n - j0);
            let mut buf = vec![0f32; tn * k];
            format.dequantize(&w[j0 * row_bytes..(j0 + tn) * row_bytes], &mut buf);
            // c[m x tn] at out + j0 (row stride n) = x[m x k] . buf^T[k x tn]
            // SAFETY: `x` and `buf` hold m*k and tn*k values read with the strides given;
            // the task owns output columns j0..j0+tn of every row, disjoint from the others.
            unsafe {
                gemm::gemm(
                    m,
                    tn,
                    k,
                    out.ptr().add(j0),
                    1,
                    n as isize,
                    false,
                    x.as_ptr(),
                    1,
                    k as isize,
                    buf.as_ptr(),
                    k as isize,
                    1,
                    0.0f32,
                    1.0f32,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                )
            }
        };
        let tiles = n.div_ceil(TILE);
        if self.threads > 1 {
            pool::for_each(tiles, task);
        } else {
            (0..tiles).for_each(task);
        }
    }
}

/// Dot product of one packed row with `x`.
/// `sums` holds the sum of `x` over each 32-value block (Q4_0/Q4_1 only).
fn dot_row(
    format: QuantFormat,
    w: &[u8],
    x: &[f32],
    sums: &[f32],
    scratch: &mut [f32; 256],
) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if avx2() {
            // SAFETY: the CPU has AVX2, FMA and F16C (checked); lengths follow the format.
            match format {
                QuantFormat::Q4_1 => return unsafe { avx2::dot_q4(w, x, sums, true) },
                QuantFormat::Q4_0 => return unsafe { avx2::dot_q4(w, x, sums, false) },
                QuantFormat::Q8_0 => return unsafe { avx2::dot_q8_0(w, x) },
                QuantFormat::F32 => return unsafe { avx2::dot_f32(w, x) },
                QuantFormat::F16 => return unsafe { avx2::dot_f16(w, x) },
                QuantFormat::BF16 => return unsafe { avx2::dot_bf16(w, x) },
                _ => {}
            }
        }
    }
    // Dequantize 256 values (or one block, if larger) at a time, then dot.
    let (b, bb) = (format.block(), format.block_bytes());
    let per = (256 / b).max(1);
    let (b, bb) = (b * per, bb * per);
    let buf = &mut scratch[..b];
    let mut acc = [0f32; 8];
    let whole = x.len() / b * b;
    let (x_head, x_tail) = x.split_at(whole);
    let (w_head, w_tail) = w.split_at(whole / format.block() * format.block_bytes());
    let mut tail_acc = 0f32;
    if !x_tail.is_empty() {
        let t = &mut buf[..x_tail.len()];
        format.dequantize(w_tail, t);
        tail_acc = t.iter().zip(x_tail).map(|(a, b)| a * b).sum();
    }
    for (blk, xs) in w_head.chunks_exact(bb).zip(x_head.chunks_exact(b)) {
        format.dequantize(blk, buf);
        if b >= 8 {
            for (wc, xc) in buf.chunks_exact(8).zip(xs.chunks_exact(8)) {
                for l in 0..8 {
                    acc[l] += wc[l] * xc[l];
                }
            }
        } else {
            for (a, b) in buf.iter().zip(xs) {
                acc[0] += a * b;
            }
        }
    }
    acc.iter().sum::<f32>() + tail_acc
}

#[cfg(target_arch = "x86_64")]
fn avx2() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
    })
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// The f16 at `p` as f32 (F16C).
    #[inline(always)]
    unsafe fn h(p: *const u8) -> f32 {
        let bits = u16::from_le_bytes([*p, *p.add(1)]);
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
    }

    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps(v, 1);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    #[inline(always)]
    unsafe fn cvt8(v: __m128i) -> __m256 {
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v))
    }

    /// Q4_0 (`with_min` false: `d * (q - 8)`) or Q4_1 (`d * q + m`) row dot `x`; `sums`
    /// holds the sum of `x` over each block.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_q4(w: &[u8], x: &[f32], sums: &[f32], with_min: bool) -> f32 {
        let bb = if with_min { 20 } else { 18 };
        let nb = x.len() / 32;
        assert!(w.len() >= nb * bb && sums.len() >= nb, "dot_q4 lengths");
        let qp = if with_min { 4 } else { 2 };
        let mask = _mm_set1_epi8(0x0F);
        let mut acc = _mm256_setzero_ps();
        let mut off_acc = 0f32;
        let (wp, xp) = (w.as_ptr(), x.as_ptr());
        for b in 0..nb {
            let blk = wp.add(b * bb);
            let xb = xp.add(b * 32);
            let d = h(blk);
            let qs = _mm_loadu_si128(blk.add(qp) as *const __m128i);
            let lo = _mm_and_si128(qs, mask);
            let hi = _mm_and_si128(_mm_srli_epi16(qs, 4), mask);
            let mut s = _mm256_mul_ps(cvt8(lo), _mm256_loadu_ps(xb));
            s = _mm256_fmadd_ps(cvt8(_mm_srli_si128(lo, 8)), _mm256_loadu_ps(xb.add(8)), s);
            s = _mm256_fmadd_ps(cvt8(hi), _mm256_loadu_ps(xb.add(16)), s);
            s = _mm256_fmadd_ps(cvt8(_mm_srli_si128(hi, 8)), _mm256_loadu_ps(xb.add(24)), s);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), s, acc);
            // Q4_1 adds m * sum(x); Q4_0 subtracts 8 * d * sum(x)
            let off = if with_min { h(blk.add(2)) } else { -8.0 * d };
            off_acc += off * *sums.get_unchecked(b);
        }
        hsum(acc) + off_acc
    }

    /// Plain f32 row dot `x`, four accumulators.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_f32(w: &[u8], x: &[f32]) -> f32 {
        let k = x.len();
        assert!(w.len() >= k * 4, "dot_f32 lengths");
        let (wp, xp) = (w.as_ptr() as *const f32, x.as_ptr());
        let mut a = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 32 <= k {
            for (u, acc) in a.iter_mut().enumerate() {
                let o = i + 8 * u;
                *acc =
                    _mm256_fmadd_ps(_mm256_loadu_ps(wp.add(o)), _mm256_loadu_ps(xp.add(o)), *acc);
            }
            i += 32;
        }
        let mut s = hsum(_mm256_add_ps(
            _mm256_add_ps(a[0], a[1]),
            _mm256_add_ps(a[2], a[3]),
        ));
        while i < k {
            s += (wp.add(i)).read_unaligned() * *xp.add(i);
            i += 1;
        }
        s
    }

    /// f16 row dot `x` (F16C widening), two accumulators.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_f16(w: &[u8], x: &[f32]) -> f32 {
        let k = x.len();
        assert!(w.len() >= k * 2, "dot_f16 lengths");
        let (wp, xp) = (w.as_ptr(), x.as_ptr());
        let (mut a0, mut a1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut i = 0;
        while i + 16 <= k {
            let v0 = _mm256_cvtph_ps(_mm_loadu_si128(wp.add(2 * i) as *const __m128i));
            let v1 = _mm256_cvtph_ps(_mm_loadu_si128(wp.add(2 * i + 16) as *const __m128i));
            a0 = _mm256_fmadd_ps(v0, _mm256_loadu_ps(xp.add(i)), a0);
            a1 = _mm256_fmadd_ps(v1, _mm256_loadu_ps(xp.add(i + 8)), a1);
            i += 16;
        }
        let mut s = hsum(_mm256_add_ps(a0, a1));
        while i < k {
            s += h(wp.add(2 * i)) * *xp.add(i);
            i += 1;
        }
        s
    }

    /// bf16 row dot `x` (a bf16 is the high half of an f32), two accumulators.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_bf16(w: &[u8], x: &[f32]) -> f32 {
        let k = x.len();
        assert!(w.len() >= k * 2, "dot_bf16 lengths");
        let (wp, xp) = (w.as_ptr(), x.as_ptr());
        let widen = |p: *const u8| {
            let v = _mm_loadu_si128(p as *const __m128i);
            _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16))
        };
        let (mut a0, mut a1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut i = 0;
        while i + 16 <= k {
            a0 = _mm256_fmadd_ps(widen(wp.add(2 * i)), _mm256_loadu_ps(xp.add(i)), a0);
            a1 = _mm256_fmadd_ps(
                widen(wp.add(2 * i + 16)),
                _mm256_loadu_ps(xp.add(i + 8)),
                a1,
            );
            i += 16;
        }
        let mut s = hsum(_mm256_add_ps(a0, a1));
        while i < k {
            let bits = u16::from_le_bytes([*wp.add(2 * i), *wp.add(2 * i + 1)]);
            s += f32::from_bits((bits as u32) << 16) * *xp.add(i);
            i += 1;
        }
        s
    }

    /// Q8_0 row dot `x`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_q8_0(w: &[u8], x: &[f32]) -> f32 {
        let nb = x.len() / 32;
        assert!(w.len() >= nb * 34, "dot_q8_0 lengths");
        let mut acc = _mm256_setzero_ps();
        let (wp, xp) = (w.as_ptr(), x.as_ptr());
        for b in 0..nb {
            let blk = wp.add(b * 34);
            let xb = xp.add(b * 32);
            let q = blk.add(2);
            let mut s = _mm256_setzero_ps();
            for i in 0..4 {
                let v = _mm_loadl_epi64(q.add(8 * i) as *const __m128i);
                let f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
                s = _mm256_fmadd_ps(f, _mm256_loadu_ps(xb.add(8 * i)), s);
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(h(blk)), s, acc);
        }
        hsum(acc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::SplitMix64;

    fn random_blocks(format: QuantFormat, n: usize, k: usize, seed: u64) -> Vec<u8> {
        let mut rng = SplitMix64(seed);
        let bytes = format.bytes_for(n * k).unwrap();
        let mut w: Vec<u8> = (0..bytes).map(|_| (rng.next_u64() >> 13) as u8).collect();
        // keep the f16 scales small and finite
        let bb = format.block_bytes();
        let scale_at: &[usize] = match format {
            QuantFormat::Q8_0 | QuantFormat::Q4_0 | QuantFormat::Q5_0 => &[0],
            QuantFormat::Q4_1 | QuantFormat::Q5_1 | QuantFormat::Q4K | QuantFormat::Q5K => &[0, 2],
            QuantFormat::Q6K => &[208],
            QuantFormat::Q2K => &[80, 82],
            QuantFormat::Q3K => &[108],
            _ => &[],
        };
        for blk in w.chunks_exact_mut(bb) {
            for &s in scale_at {
                let v = (rng.next_u64() % 1000) as f32 / 1000.0 - 0.5;
                blk[s..s + 2].copy_from_slice(&half::f16::from_f32(v * 0.1).to_le_bytes());
            }
            if bb <= 4 {
                let v = (rng.next_u64() % 1000) as f32 / 1000.0 - 0.5;
                let b = match format {
                    QuantFormat::F32 => v.to_le_bytes().to_vec(),
                    QuantFormat::F16 => half::f16::from_f32(v).to_le_bytes().to_vec(),
                    _ => half::bf16::from_f32(v).to_le_bytes().to_vec(),
                };
                blk.copy_from_slice(&b);
            }
        }
        w
    }

    #[test]
    fn interpreter_agrees_with_fast_path() {
        use rlx_ir::{Op, Tensor, TensorData};
        let (format, n, k, m) = (QuantFormat::Q4K, 5, 256, 2);
        let w = random_blocks(format, n, k, 11);
        let x = Tensor::random(rlx_ir::DType::F32, &[m, k], 3);
        let wt = Tensor::new(vec![w.len()], TensorData::U8(w.clone().into())).unwrap();
        let op = Op::QuantMatMul { format, n, k };
        let got = crate::interp::eval_op(&op, &[&x, &wt]).unwrap();
        assert_eq!(got.shape(), &[m, n]);
        let mut y = vec![0f32; m * n];
        QuantPlan::new(format, n, k, m * k, 1).run(x.as_f32().unwrap(), &w, &mut y);
        for (a, b) in got.as_f32().unwrap().iter().zip(&y) {
            assert!((a - b).abs() <= 1e-4 * a.abs().max(1.0), "{a} vs {b}");
        }
        // a wrong byte count is a clear error, not a panic
        let short = Tensor::new(vec![10], TensorData::U8(vec![0; 10].into())).unwrap();
        assert!(crate::interp::eval_op(&op, &[&x, &short]).is_err());
    }

    #[test]
    fn matches_dequantize_then_matmul() {
        // plain float rows also at lengths that leave vector tails
        let plain = [QuantFormat::F32, QuantFormat::F16, QuantFormat::BF16];
        let cases = QuantFormat::ALL
            .iter()
            .map(|&f| (f, 512))
            .chain(plain.iter().flat_map(|&f| [(f, 100), (f, 37)]));
        for (format, k) in cases {
            for m in [1, 3, 7] {
                let n = 70;
                let w = random_blocks(format, n, k, 7 + m as u64);
                let mut rng = SplitMix64(m as u64);
                let x: Vec<f32> = (0..m * k)
                    .map(|_| (rng.next_u64() % 2000) as f32 / 1000.0 - 1.0)
                    .collect();
                let mut wf = vec![0f32; n * k];
                format.dequantize(&w, &mut wf);
                let mut want = vec![0f64; m * n];
                for i in 0..m {
                    for j in 0..n {
                        want[i * n + j] = (0..k)
                            .map(|l| x[i * k + l] as f64 * wf[j * k + l] as f64)
                            .sum();
                    }
                }
                for threads in [1, 2] {
                    let mut y = vec![f32::NAN; m * n];
                    QuantPlan::new(format, n, k, m * k, threads).run(&x, &w, &mut y);
                    let num: f64 = y
                        .iter()
                        .zip(&want)
                        .map(|(a, b)| (*a as f64 - b).powi(2))
                        .sum();
                    let den: f64 = want.iter().map(|b| b * b).sum();
                    let rel = (num / den).sqrt();
                    assert!(rel < 1e-5, "{format} m={m} threads={threads}: rel {rel}");
                }
            }
        }
    }
}
