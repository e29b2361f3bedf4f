//! The x86 kernels of the k-quants (Q4_K, Q5_K, Q6_K): blocks of 256 values, dotted 32 at a
//! time against the activation's blocks of 32. Per block of 256 and row, the sub-block
//! scales are decoded once into a vector and multiplied by the eight activation scales;
//! per 32 values a row then costs one byte product, one conversion and one multiply-add.

use super::x86::{hsum, Dot};
use super::Q8Row;
use std::arch::x86_64::*;

/// Values per k-quant block.
const QK_K: usize = 256;

/// The scales `[dx; 8]` and `[sx; 8]` of the eight activation blocks at `ds`.
#[inline(always)]
unsafe fn act8(ds: *const [f32; 2]) -> (__m256, __m256) {
    let p = ds as *const f32;
    let split = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    // [dx0..dx4, sx0..sx4] and [dx4..dx8, sx4..sx8]
    let v0 = _mm256_permutevar8x32_ps(_mm256_loadu_ps(p), split);
    let v1 = _mm256_permutevar8x32_ps(_mm256_loadu_ps(p.add(8)), split);
    (
        _mm256_permute2f128_ps::<0x20>(v0, v1),
        _mm256_permute2f128_ps::<0x31>(v0, v1),
    )
}

/// The eight 6-bit scales and mins of a Q4_K/Q5_K block (its 12 bytes at `p`) as f32,
/// unpacked as llama.cpp does (`scale_min_k4` of every sub-block at once).
#[inline(always)]
unsafe fn scales_mins(p: *const u8) -> (__m256, __m256) {
    const K1: u32 = 0x3f3f_3f3f;
    const K2: u32 = 0x0f0f_0f0f;
    const K3: u32 = 0x0303_0303;
    let u = |i: usize| (p.add(4 * i) as *const u32).read_unaligned();
    let (u0, u1, u2) = (u(0), u(1), u(2));
    // sub-blocks 0..4 keep the low 6 bits; 4..8 are a nibble plus the top bits of 0..4
    let sc = (u0 & K1) as u64 | (((u2 & K2) | ((u0 >> 6) & K3) << 4) as u64) << 32;
    let mn = (u1 & K1) as u64 | ((((u2 >> 4) & K2) | ((u1 >> 6) & K3) << 4) as u64) << 32;
    let f = |v: u64| _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(v as i64)));
    (f(sc), f(mn))
}

/// Prefetches the `bytes` at `p` (the same block of the next group of rows).
#[inline(always)]
unsafe fn prefetch(p: *const u8, bytes: usize) {
    for o in (0..bytes).step_by(64) {
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(o) as *const i8);
    }
}

/// Q4_K or Q5_K (`FIVE`) rows dot `a`, `R` rows at a time; lengths checked by the caller.
/// A block: f16 `d` and `dmin`, 12 bytes of scales and mins, (Q5_K: 32 bytes of fifth
/// bits), 128 bytes of nibbles (sub-block `2j` the low nibbles of bytes `32j..32j+32`,
/// `2j + 1` their high nibbles).
#[inline(always)]
pub(super) unsafe fn dot_q45k<D: Dot, const FIVE: bool, const R: usize>(
    w: *const u8,
    row_bytes: usize,
    a: Q8Row<'_>,
    out: *mut f32,
) {
    let (bb, qo) = if FIVE { (176, 48) } else { (144, 16) };
    let (ap, dsp) = (a.qs.as_ptr(), a.ds.as_ptr());
    let low = _mm256_set1_epi8(0x0F);
    let bit4 = _mm256_set1_epi8(0x10);
    let mut acc = [_mm256_setzero_ps(); R];
    // per row: d * sc * dx of each sub-block of the current block
    let mut scale = [[0f32; 8]; R];
    for sb in 0..a.ds.len() / 8 {
        let (dx8, sx8) = act8(dsp.add(8 * sb));
        for (r, acc) in acc.iter_mut().enumerate() {
            let blk = w.add(r * row_bytes + sb * bb);
            prefetch(blk.wrapping_add(R * row_bytes), bb);
            let dm = _mm_cvtph_ps(_mm_cvtsi32_si128((blk as *const i32).read_unaligned()));
            let d = _mm256_broadcastss_ps(dm);
            let dmin = _mm256_broadcastss_ps(_mm_movehdup_ps(dm));
            let (sc, mn) = scales_mins(blk.add(4));
            _mm256_storeu_ps(
                scale[r].as_mut_ptr(),
                _mm256_mul_ps(_mm256_mul_ps(d, sc), dx8),
            );
            // the minimum terms of all eight sub-blocks: - dmin * m * sx
            *acc = _mm256_fnmadd_ps(_mm256_mul_ps(dmin, mn), sx8, *acc);
        }
        let xp = ap.add(sb * QK_K);
        for j in 0..4 {
            let x0 = _mm256_loadu_si256(xp.add(64 * j) as *const __m256i);
            let x1 = _mm256_loadu_si256(xp.add(64 * j + 32) as *const __m256i);
            let shift = _mm_cvtsi32_si128(2 * j as i32);
            for (r, acc) in acc.iter_mut().enumerate() {
                let blk = w.add(r * row_bytes + sb * bb);
                let q = _mm256_loadu_si256(blk.add(qo + 32 * j) as *const __m256i);
                let mut lo = _mm256_and_si256(q, low);
                let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), low);
                if FIVE {
                    // bits 2j and 2j + 1 of every byte, to bit 4
                    let h = _mm256_loadu_si256(blk.add(16) as *const __m256i);
                    let h = _mm256_srl_epi16(h, shift);
                    lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16::<4>(h), bit4));
                    hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16::<3>(h), bit4));
                }
                let p0 = D::dot(_mm256_setzero_si256(), lo, x0);
                let p1 = D::dot(_mm256_setzero_si256(), hi, x1);
                let s = scale[r].as_ptr().add(2 * j);
                *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_broadcast_ss(&*s), *acc);
                let s1 = &*s.add(1);
                *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_broadcast_ss(s1), *acc);
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        *out.add(r) = hsum(*acc);
    }
}

/// Q6_K rows dot `a`, `R` rows at a time; lengths checked by the caller. A block: 128 bytes
/// of low nibbles, 64 bytes of 2-bit high parts, 16 signed scales (one per 16 values), f16
/// `d`. Half `n` (128 values) has four blocks of 32: `p = 0, 1` the low nibbles of bytes
/// `64n..64n+32`, `64n+32..64n+64`, `p = 2, 3` their high nibbles, the high parts bits
/// `2p, 2p + 1` of bytes `128 + 32n..`.
#[inline(always)]
pub(super) unsafe fn dot_q6k<D: Dot, const R: usize>(
    w: *const u8,
    row_bytes: usize,
    a: Q8Row<'_>,
    out: *mut f32,
) {
    const BB: usize = 210;
    let (ap, dsp) = (a.qs.as_ptr(), a.ds.as_ptr());
    let low = _mm256_set1_epi8(0x0F);
    let top = _mm256_set1_epi8(0x30);
    let m32 = _mm256_set1_epi8(32);
    let pairs = _mm256_setr_epi32(0, 0, 2, 2, 4, 4, 6, 6);
    let mut acc = [_mm256_setzero_ps(); R];
    for sb in 0..a.ds.len() / 8 {
        for r in 0..R {
            prefetch(w.wrapping_add((r + R) * row_bytes + sb * BB), BB);
        }
        for n in 0..2 {
            // dx of block p in lanes 2p and 2p + 1, the lanes of its two scales
            let ds = dsp.add(8 * sb + 4 * n) as *const f32;
            let dx = _mm256_permutevar8x32_ps(_mm256_loadu_ps(ds), pairs);
            let mut sd = [_mm256_setzero_ps(); R];
            for (r, sd) in sd.iter_mut().enumerate() {
                let blk = w.add(r * row_bytes + sb * BB);
                let d = (blk.add(208) as *const u16).read_unaligned() as i16;
                let d = _mm256_cvtph_ps(_mm_set1_epi16(d));
                let sc = _mm_loadl_epi64(blk.add(192 + 8 * n) as *const __m128i);
                let sc = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc));
                *sd = _mm256_mul_ps(_mm256_mul_ps(sc, d), dx);
            }
            for p in 0..4 {
                let x = _mm256_loadu_si256(ap.add(sb * QK_K + n * 128 + 32 * p) as *const __m256i);
                // 32 * (sum of a over four values): the `- 32` of every weight
                let x32 = D::dot(_mm256_setzero_si256(), m32, x);
                let (s0, s1) = (2 * p as i32, 2 * p as i32 + 1);
                let lanes = _mm256_setr_epi32(s0, s0, s0, s0, s1, s1, s1, s1);
                for (r, acc) in acc.iter_mut().enumerate() {
                    let blk = w.add(r * row_bytes + sb * BB);
                    let ql = _mm256_loadu_si256(blk.add(64 * n + 32 * (p % 2)) as *const __m256i);
                    let qh = _mm256_loadu_si256(blk.add(128 + 32 * n) as *const __m256i);
                    let lo = if p < 2 {
                        _mm256_and_si256(ql, low)
                    } else {
                        _mm256_and_si256(_mm256_srli_epi16::<4>(ql), low)
                    };
                    // bits 2p, 2p + 1 of the high parts, to bits 4, 5
                    let hi = match p {
                        0 => _mm256_slli_epi16::<4>(qh),
                        1 => _mm256_slli_epi16::<2>(qh),
                        2 => qh,
                        _ => _mm256_srli_epi16::<2>(qh),
                    };
                    let q = _mm256_or_si256(lo, _mm256_and_si256(hi, top));
                    let s = _mm256_sub_epi32(D::dot(_mm256_setzero_si256(), q, x), x32);
                    let scale = _mm256_permutevar8x32_ps(sd[r], lanes);
                    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), scale, *acc);
                }
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        *out.add(r) = hsum(*acc);
    }
}
