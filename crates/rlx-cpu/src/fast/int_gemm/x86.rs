//! The x86 tiles: raw sums `sum(a * b)` of `MR` activation rows (u8) by one or two weight
//! panels (i8, [`super::pack`]'s layout) into a tile of [`super::TILE_COLS`] i32 columns.
//!
//! AVX-512 VNNI multiplies four u8 by four i8 and adds them to an i32 lane in one
//! `vpdpbusd`, with no intermediate saturation. Plain AVX2 has no such instruction, and
//! `vpmaddubsw` saturates its pair sums to i16 (255 * 127 * 2 does not fit), so the AVX2 tile
//! widens both operands to i16 halves (even and odd bytes) and sums them with `vpmaddwd`:
//! exact, at twice the instructions.

use super::{Dst, TileOut, TILE_COLS};
use std::arch::x86_64::*;

/// `MR` rows by `NP` panels of 16 columns with AVX-512 VNNI, into `dst`.
///
/// # Safety
/// The CPU has AVX-512F/BW/VNNI; `a` holds `MR` rows of `lda >= 4 * k4` bytes; `b` holds
/// `NP` panels `ps` bytes apart, each `64 * k4` bytes; a [`Dst::Out`] has `nc` in
/// `16 * (NP - 1) + 1..=16 * NP` and its pointers cover `MR` rows of `nc` columns.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn tile_vnni512<const MR: usize, const NP: usize>(
    a: *const u8,
    lda: usize,
    b: *const i8,
    ps: usize,
    k4: usize,
    dst: Dst<'_>,
) {
    let mut acc = [[_mm512_setzero_si512(); NP]; MR];
    for g in 0..k4 {
        let mut bv = [_mm512_setzero_si512(); NP];
        for (p, v) in bv.iter_mut().enumerate() {
            *v = _mm512_loadu_si512(b.add(p * ps + g * 64).cast());
        }
        for (r, row) in acc.iter_mut().enumerate() {
            let av = _mm512_set1_epi32(a.add(r * lda + g * 4).cast::<i32>().read_unaligned());
            for (c, v) in row.iter_mut().zip(&bv) {
                *c = _mm512_dpbusd_epi32(*c, av, *v);
            }
        }
    }
    match dst {
        Dst::Tile(out) => {
            for (r, row) in acc.iter().enumerate() {
                for (p, c) in row.iter().enumerate() {
                    _mm512_storeu_si512(out.as_mut_ptr().add(r * TILE_COLS + p * 16).cast(), *c);
                }
            }
        }
        Dst::Out(o) => finish_vnni512(&acc, o),
    }
}

/// Writes the accumulators of a tile with their zero-point terms (and scale) to `o`'s rows,
/// the last panel masked to `o.nc` columns.
#[inline(always)]
unsafe fn finish_vnni512<const MR: usize, const NP: usize>(acc: &[[__m512i; NP]; MR], o: &TileOut) {
    for p in 0..NP {
        let cols = o.nc - p * 16;
        let m: __mmask16 = if cols >= 16 { !0 } else { (1 << cols) - 1 };
        let corr = _mm512_maskz_loadu_epi32(m, o.corr.add(p * 16));
        let zb = _mm512_maskz_loadu_epi32(m, o.zb.add(p * 16));
        let scale = (!o.scale.is_null()).then(|| _mm512_maskz_loadu_ps(m, o.scale.add(p * 16)));
        for (r, row) in acc.iter().enumerate() {
            let rs = _mm512_set1_epi32(o.row_sums.add(r).read());
            let v = _mm512_add_epi32(row[p], corr);
            let v = _mm512_sub_epi32(v, _mm512_mullo_epi32(zb, rs));
            let dst = o.out.add(r * o.ldo + p * 16);
            match scale {
                Some(s) => {
                    let f = _mm512_mul_ps(_mm512_cvtepi32_ps(v), s);
                    _mm512_mask_storeu_ps(dst.cast(), m, f)
                }
                None => _mm512_mask_storeu_epi32(dst.cast(), m, v),
            }
        }
    }
}

/// `MR` rows by one panel of 16 columns with AVX2, exact (no `vpmaddubsw` saturation).
///
/// # Safety
/// The CPU has AVX2; `a` holds `MR` rows of `lda >= 4 * k4` bytes; `b` one panel of
/// `64 * k4` bytes.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn tile_avx2<const MR: usize>(
    a: *const u8,
    lda: usize,
    b: *const i8,
    k4: usize,
    out: &mut [i32],
) {
    let mut acc = [[_mm256_setzero_si256(); 2]; MR];
    let low_bytes = _mm256_set1_epi16(0x00ff);
    for g in 0..k4 {
        let mut even = [_mm256_setzero_si256(); 2];
        let mut odd = [_mm256_setzero_si256(); 2];
        for h in 0..2 {
            let v = _mm256_loadu_si256(b.add(g * 64 + h * 32).cast());
            // bytes 0 and 2 of each group, then bytes 1 and 3, sign-extended to i16
            even[h] = _mm256_srai_epi16(_mm256_slli_epi16(v, 8), 8);
            odd[h] = _mm256_srai_epi16(v, 8);
        }
        for (r, row) in acc.iter_mut().enumerate() {
            let av = _mm256_set1_epi32(a.add(r * lda + g * 4).cast::<i32>().read_unaligned());
            let a_even = _mm256_and_si256(av, low_bytes);
            let a_odd = _mm256_srli_epi16(av, 8);
            for h in 0..2 {
                let s = _mm256_add_epi32(
                    _mm256_madd_epi16(a_even, even[h]),
                    _mm256_madd_epi16(a_odd, odd[h]),
                );
                row[h] = _mm256_add_epi32(row[h], s);
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        for (h, c) in row.iter().enumerate() {
            _mm256_storeu_si256(out.as_mut_ptr().add(r * TILE_COLS + h * 8).cast(), *c);
        }
    }
}
