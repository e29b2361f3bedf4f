//! The x86 kernels of the k-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K): blocks of 256 values,
//! dotted 32 at a time against the activation's blocks of 32. Per block of 256 (or half of
//! it) and row, the sub-block scales are decoded once into a vector and multiplied by the
//! activation scales; per 32 values a row then costs one byte product, one conversion and
//! one multiply-add. [`dot_q45k`] covers the formats with a scale per 32 values, [`dot_k16`]
//! those with one per 16 (through [`K16`], one implementation a format). As in
//! [`super::x86`], a kernel unpacks each weight block once for its `M` activation rows,
//! with the float operations of one pair in the order of one row alone.

use super::x86::{hsum, Acts, Dot};
use std::arch::x86_64::*;

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

/// Q4_K or Q5_K (`FIVE`) rows, `R` at a time, dot the `M` rows of `a`; result `(r, i)` to
/// `out[i] + r`. Lengths checked by the caller.
/// A block: f16 `d` and `dmin`, 12 bytes of scales and mins, (Q5_K: 32 bytes of fifth
/// bits), 128 bytes of nibbles (sub-block `2j` the low nibbles of bytes `32j..32j+32`,
/// `2j + 1` their high nibbles).
#[inline(always)]
pub(super) unsafe fn dot_q45k<D: Dot, const FIVE: bool, const R: usize, const M: usize>(
    w: *const u8,
    row_bytes: usize,
    a: &Acts<M>,
    out: [*mut f32; M],
) {
    let (bb, qo) = if FIVE { (176, 48) } else { (144, 16) };
    let low = _mm256_set1_epi8(0x0F);
    let bit4 = _mm256_set1_epi8(0x10);
    let mut acc = [[_mm256_setzero_ps(); M]; R];
    // per pair: d * sc * dx of each sub-block of the current block
    let mut scale = [[[0f32; 8]; M]; R];
    for sb in 0..a.nb / 8 {
        let mut act = [(_mm256_setzero_ps(), _mm256_setzero_ps()); M];
        for (i, act) in act.iter_mut().enumerate() {
            *act = act8(a.ds[i].add(8 * sb));
        }
        for r in 0..R {
            let blk = w.add(r * row_bytes + sb * bb);
            prefetch(blk.wrapping_add(R * row_bytes), bb);
            let dm = _mm_cvtph_ps(_mm_cvtsi32_si128((blk as *const i32).read_unaligned()));
            let d = _mm256_broadcastss_ps(dm);
            let dmin = _mm256_broadcastss_ps(_mm_movehdup_ps(dm));
            let (sc, mn) = scales_mins(blk.add(4));
            let (d_sc, dmin_mn) = (_mm256_mul_ps(d, sc), _mm256_mul_ps(dmin, mn));
            for (i, &(dx8, sx8)) in act.iter().enumerate() {
                _mm256_storeu_ps(scale[r][i].as_mut_ptr(), _mm256_mul_ps(d_sc, dx8));
                // the minimum terms of all eight sub-blocks: - dmin * m * sx
                acc[r][i] = _mm256_fnmadd_ps(dmin_mn, sx8, acc[r][i]);
            }
        }
        for j in 0..4 {
            let shift = _mm_cvtsi32_si128(2 * j as i32);
            for r in 0..R {
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
                for (i, acc) in acc[r].iter_mut().enumerate() {
                    let p0 = D::dot(_mm256_setzero_si256(), lo, a.x(i, 8 * sb + 2 * j));
                    let p1 = D::dot(_mm256_setzero_si256(), hi, a.x(i, 8 * sb + 2 * j + 1));
                    let s = scale[r][i].as_ptr().add(2 * j);
                    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_broadcast_ss(&*s), *acc);
                    let s1 = &*s.add(1);
                    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_broadcast_ss(s1), *acc);
                }
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        for (i, acc) in acc.iter().enumerate() {
            *out[i].add(r) = hsum(*acc);
        }
    }
}

/// A k-quant with a scale per 16 values (Q2_K, Q3_K, Q6_K), as [`dot_k16`] reads a block:
/// half `n` (128 values) has four blocks of 32, block `p` with scales `8n + 2p` and
/// `8n + 2p + 1`; a value is `d * sc * (q - OFF)` (Q2_K: `- dmin * m` besides).
pub(super) trait K16 {
    /// Bytes per block.
    const BB: usize;
    /// The byte of the f16 `d` (Q2_K: followed by `dmin`).
    const D: usize;
    /// What every unsigned value `q` is less.
    const OFF: i8;
    /// Whether a min per 16 values comes with each scale (Q2_K).
    const MIN: bool;
    /// The eight scales of half `n` (and, with `MIN`, their mins) as f32.
    unsafe fn scales(blk: *const u8, n: usize) -> (__m256, __m256);
    /// The 32 unsigned values `q` of block `p` of half `n`, a byte each.
    unsafe fn values(blk: *const u8, n: usize, p: usize) -> __m256i;
}

/// Q2_K: 16 bytes of scales (low nibble) and mins (high nibble), 64 bytes of 2-bit values
/// (block `p` of half `n`: bits `2p, 2p + 1` of bytes `16 + 32n..`), f16 `d` and `dmin`.
pub(super) struct Q2K;
/// Q3_K: 32 bytes of high bits (block `b`'s: bit `b` of every byte), 64 bytes of 2-bit low
/// parts (as Q2_K's), 12 bytes of 6-bit scales ([`rlx_ir::quant::q3k_scale`]), f16 `d`.
pub(super) struct Q3K;
/// Q6_K: 128 bytes of low nibbles, 64 bytes of 2-bit high parts, 16 signed scales, f16
/// `d`. Block `p` of half `n`: `p = 0, 1` the low nibbles of bytes `64n..64n+32`,
/// `64n+32..64n+64`, `p = 2, 3` their high nibbles, the high parts bits `2p, 2p + 1` of bytes
/// `128 + 32n..`.
pub(super) struct Q6K;

/// The eight bytes of `v` as f32 lanes (unsigned).
#[inline(always)]
unsafe fn u8x8(v: u64) -> __m256 {
    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(v as i64)))
}

/// Bits `2p, 2p + 1` of the 32 bytes at `p`.
#[inline(always)]
unsafe fn crumbs(ptr: *const u8, p: usize) -> __m256i {
    let q = _mm256_loadu_si256(ptr as *const __m256i);
    let q = _mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * p as i32));
    _mm256_and_si256(q, _mm256_set1_epi8(3))
}

impl K16 for Q2K {
    const BB: usize = 84;
    const D: usize = 80;
    const OFF: i8 = 0;
    const MIN: bool = true;
    #[inline(always)]
    unsafe fn scales(blk: *const u8, n: usize) -> (__m256, __m256) {
        const LOW: u64 = 0x0f0f_0f0f_0f0f_0f0f;
        let v = (blk.add(8 * n) as *const u64).read_unaligned();
        (u8x8(v & LOW), u8x8((v >> 4) & LOW))
    }
    #[inline(always)]
    unsafe fn values(blk: *const u8, n: usize, p: usize) -> __m256i {
        crumbs(blk.add(16 + 32 * n), p)
    }
}

impl K16 for Q3K {
    const BB: usize = 110;
    const D: usize = 108;
    const OFF: i8 = 4;
    const MIN: bool = false;
    #[inline(always)]
    unsafe fn scales(blk: *const u8, n: usize) -> (__m256, __m256) {
        const K1: u32 = 0x0303_0303;
        const K2: u32 = 0x0f0f_0f0f;
        let u = |i: usize| (blk.add(96 + 4 * i) as *const u32).read_unaligned();
        let (u0, u1, u2, s) = (u(0), u(1), u(2), 4 * n as u32);
        // scale i < 8: the low nibble of byte i, else the high nibble of byte i - 8; the top
        // two bits are bits 2 (i / 4), 2 (i / 4) + 1 of byte 8 + i % 4 (llama.cpp's unpacking)
        let a = ((u0 >> s) & K2) | ((u2 >> s) & K1) << 4;
        let b = ((u1 >> s) & K2) | ((u2 >> (s + 2)) & K1) << 4;
        let sc = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((a as u64 | (b as u64) << 32) as i64));
        let sc = _mm256_sub_epi32(sc, _mm256_set1_epi32(32));
        (_mm256_cvtepi32_ps(sc), _mm256_setzero_ps())
    }
    #[inline(always)]
    unsafe fn values(blk: *const u8, n: usize, p: usize) -> __m256i {
        let low = crumbs(blk.add(32 + 32 * n), p);
        // bit 4n + p of the high bits, to bit 2
        let h = _mm256_loadu_si256(blk as *const __m256i);
        let h = _mm256_srl_epi16(h, _mm_cvtsi32_si128((4 * n + p) as i32));
        let h = _mm256_slli_epi16::<2>(_mm256_and_si256(h, _mm256_set1_epi8(1)));
        _mm256_or_si256(low, h)
    }
}

impl K16 for Q6K {
    const BB: usize = 210;
    const D: usize = 208;
    const OFF: i8 = 32;
    const MIN: bool = false;
    #[inline(always)]
    unsafe fn scales(blk: *const u8, n: usize) -> (__m256, __m256) {
        let sc = _mm_loadl_epi64(blk.add(192 + 8 * n) as *const __m128i);
        (
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)),
            _mm256_setzero_ps(),
        )
    }
    #[inline(always)]
    unsafe fn values(blk: *const u8, n: usize, p: usize) -> __m256i {
        let low = _mm256_set1_epi8(0x0F);
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
        _mm256_or_si256(lo, _mm256_and_si256(hi, _mm256_set1_epi8(0x30)))
    }
}

/// Q2_K, Q3_K or Q6_K (`F`) rows, `R` at a time, dot the `M` rows of `a`; result `(r, i)`
/// to `out[i] + r`. Lengths checked by the caller. Per block of 32 and pair: one byte
/// product, less `OFF * sum(a)` per four values (one product per activation block for all
/// weight rows), times the lanes' two scales. Q2_K's min terms take one multiply-add per
/// half and pair against the activation's sums per 16 values, also computed once for all
/// weight rows.
#[inline(always)]
pub(super) unsafe fn dot_k16<D: Dot, F: K16, const R: usize, const M: usize>(
    w: *const u8,
    row_bytes: usize,
    a: &Acts<M>,
    out: [*mut f32; M],
) {
    let zero = _mm256_setzero_si256();
    let moff = _mm256_set1_epi8(F::OFF);
    let pairs = _mm256_setr_epi32(0, 0, 2, 2, 4, 4, 6, 6);
    let mut acc = [[_mm256_setzero_ps(); M]; R];
    for sb in 0..a.nb / 8 {
        for r in 0..R {
            prefetch(w.wrapping_add((r + R) * row_bytes + sb * F::BB), F::BB);
        }
        for n in 0..2 {
            // per activation row: dx of block p in lanes 2p and 2p + 1, the lanes of its two
            // scales; Q2_K: dx * sum(a) over each 16 values, in the lanes of their scales
            let mut dx_sx = [(_mm256_setzero_ps(), _mm256_setzero_ps()); M];
            for (i, dx_sx) in dx_sx.iter_mut().enumerate() {
                let ds = a.ds[i].add(8 * sb + 4 * n) as *const f32;
                let dx = _mm256_permutevar8x32_ps(_mm256_loadu_ps(ds), pairs);
                let sx = if F::MIN {
                    let ones = _mm256_set1_epi8(1);
                    let mut s = [zero; 4];
                    for (p, s) in s.iter_mut().enumerate() {
                        *s = D::dot(zero, ones, a.x(i, 8 * sb + 4 * n + p));
                    }
                    let h = _mm256_hadd_epi32(
                        _mm256_hadd_epi32(s[0], s[1]),
                        _mm256_hadd_epi32(s[2], s[3]),
                    );
                    // [p0 g0, p1 g0, p2 g0, p3 g0, p0 g1, ..] to the order 2p + g
                    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
                    let h = _mm256_permutevar8x32_epi32(h, order);
                    _mm256_mul_ps(_mm256_cvtepi32_ps(h), dx)
                } else {
                    _mm256_setzero_ps()
                };
                *dx_sx = (dx, sx);
            }
            let mut sd = [[_mm256_setzero_ps(); M]; R];
            for r in 0..R {
                let blk = w.add(r * row_bytes + sb * F::BB);
                let (sc, mn) = F::scales(blk, n);
                if F::MIN {
                    // `d` and `dmin`
                    let dm = (blk.add(F::D) as *const i32).read_unaligned();
                    let dm = _mm_cvtph_ps(_mm_cvtsi32_si128(dm));
                    let sc_d = _mm256_mul_ps(sc, _mm256_broadcastss_ps(dm));
                    let dmin = _mm256_broadcastss_ps(_mm_movehdup_ps(dm));
                    let mn_dmin = _mm256_mul_ps(mn, dmin);
                    for (i, &(dx, sx)) in dx_sx.iter().enumerate() {
                        sd[r][i] = _mm256_mul_ps(sc_d, dx);
                        acc[r][i] = _mm256_fnmadd_ps(mn_dmin, sx, acc[r][i]);
                    }
                } else {
                    let d = (blk.add(F::D) as *const u16).read_unaligned() as i16;
                    let sc_d = _mm256_mul_ps(sc, _mm256_cvtph_ps(_mm_set1_epi16(d)));
                    for (i, &(dx, _)) in dx_sx.iter().enumerate() {
                        sd[r][i] = _mm256_mul_ps(sc_d, dx);
                    }
                }
            }
            for p in 0..4 {
                let b = 8 * sb + 4 * n + p;
                // OFF * (sum of a over four values): the `- OFF` of every weight
                let mut xoff = [zero; M];
                for (i, xoff) in xoff.iter_mut().enumerate() {
                    *xoff = D::dot(zero, moff, a.x(i, b));
                }
                let (s0, s1) = (2 * p as i32, 2 * p as i32 + 1);
                let lanes = _mm256_setr_epi32(s0, s0, s0, s0, s1, s1, s1, s1);
                for r in 0..R {
                    let blk = w.add(r * row_bytes + sb * F::BB);
                    let q = F::values(blk, n, p);
                    for (i, acc) in acc[r].iter_mut().enumerate() {
                        let mut s = D::dot(zero, q, a.x(i, b));
                        if F::OFF != 0 {
                            s = _mm256_sub_epi32(s, xoff[i]);
                        }
                        let scale = _mm256_permutevar8x32_ps(sd[r][i], lanes);
                        *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), scale, *acc);
                    }
                }
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        for (i, acc) in acc.iter().enumerate() {
            *out[i].add(r) = hsum(*acc);
        }
    }
}
