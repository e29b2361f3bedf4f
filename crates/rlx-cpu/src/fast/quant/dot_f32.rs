//! The exact dot path: one packed weight row dequantized in registers (AVX2 + FMA kernels
//! for Q4_0, Q4_1, Q8_0 and the plain float formats) or block by block into a stack buffer
//! (every other format), then dotted with f32 activations. The reference the integer path
//! ([`super::dot_i8`]) is measured against, and the path for formats it does not cover.

use rlx_ir::QuantFormat;

/// Dot product of one packed row with `x`.
/// `sums` holds the sum of `x` over each 32-value block (Q4_0/Q4_1 only).
pub(super) fn dot_row(
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
