//! The scalar reference of one row of [`super::dot_rows`], and its path off x86: the same
//! integer sums per block (or sub-block) as the vector kernels, and the same float terms.

use super::{Q8Row, QK};
use rlx_ir::quant::{q3k_scale, scale_min_k4};
use rlx_ir::QuantFormat;

/// The f16 at byte `i` of `b`.
fn h(b: &[u8], i: usize) -> f32 {
    half::f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// `sum(q * a)` over one block of 32 values.
fn isum(q: &[u8; QK], a: &[i8]) -> i32 {
    q.iter().zip(a).map(|(&q, &a)| q as i32 * a as i32).sum()
}

/// The dot of one packed row `w` (a format [`super::supports`] accepts) with `a`.
pub(super) fn dot(format: QuantFormat, w: &[u8], a: Q8Row<'_>) -> f32 {
    let per = format.block() / QK;
    let blocks = w.chunks_exact(format.block_bytes());
    let acts = a.qs.chunks_exact(QK * per).zip(a.ds.chunks_exact(per));
    blocks
        .zip(acts)
        .map(|(blk, (qa, ds))| match format {
            QuantFormat::Q8_0 => {
                let sum: i32 = blk[2..34]
                    .iter()
                    .zip(qa)
                    .map(|(&q, &x)| (q as i8) as i32 * x as i32)
                    .sum();
                h(blk, 0) * ds[0][0] * sum as f32
            }
            QuantFormat::Q4_0 | QuantFormat::Q4_1 | QuantFormat::Q5_0 | QuantFormat::Q5_1 => {
                q45(format, blk, qa, ds[0])
            }
            QuantFormat::Q4K | QuantFormat::Q5K => q45k(format == QuantFormat::Q5K, blk, qa, ds),
            QuantFormat::Q2K | QuantFormat::Q3K | QuantFormat::Q6K => k16(format, blk, qa, ds),
            _ => unreachable!("dot_i8 does not cover {format}"),
        })
        .sum()
}

/// One Q4_0, Q4_1, Q5_0 or Q5_1 block.
fn q45(format: QuantFormat, blk: &[u8], qa: &[i8], [dx, sx]: [f32; 2]) -> f32 {
    let min = matches!(format, QuantFormat::Q4_1 | QuantFormat::Q5_1);
    let five = matches!(format, QuantFormat::Q5_0 | QuantFormat::Q5_1);
    let at = if min { 4 } else { 2 };
    let (qh, qs) = if five {
        let b = &blk[at..at + 4];
        (u32::from_le_bytes([b[0], b[1], b[2], b[3]]), at + 4)
    } else {
        (0, at)
    };
    let mut q = [0u8; QK];
    for (j, &b) in blk[qs..qs + 16].iter().enumerate() {
        q[j] = (b & 15) | (((qh >> j) & 1) << 4) as u8;
        q[j + 16] = (b >> 4) | (((qh >> (j + 16)) & 1) << 4) as u8;
    }
    let dw = h(blk, 0);
    let mw = match (min, five) {
        (true, _) => h(blk, 2),
        (false, false) => -8.0 * dw,
        (false, true) => -16.0 * dw,
    };
    dw * dx * isum(&q, qa) as f32 + mw * sx
}

/// One Q4_K or Q5_K block of 256: eight sub-blocks of 32 with 6-bit scales and mins.
fn q45k(five: bool, blk: &[u8], qa: &[i8], ds: &[[f32; 2]]) -> f32 {
    let (d, dmin) = (h(blk, 0), h(blk, 2));
    let scales = &blk[4..16];
    let (qh, qs) = if five {
        (&blk[16..48], &blk[48..176])
    } else {
        (&[0u8; 32][..], &blk[16..144])
    };
    let mut acc = 0f32;
    for (s, &[dx, sx]) in ds.iter().enumerate() {
        let (sc, m) = scale_min_k4(s, scales);
        let bytes = &qs[32 * (s / 2)..32 * (s / 2) + 32];
        let mut q = [0u8; QK];
        for (l, q) in q.iter_mut().enumerate() {
            let nib = if s % 2 == 0 {
                bytes[l] & 15
            } else {
                bytes[l] >> 4
            };
            *q = nib | ((qh[l] >> s) & 1) << 4;
        }
        let sum = isum(&q, &qa[s * QK..(s + 1) * QK]);
        acc += d * sc as f32 * dx * sum as f32 - dmin * m as f32 * sx;
    }
    acc
}

/// One Q2_K, Q3_K or Q6_K block of 256: unsigned values `q` less an offset, a scale per 16
/// values. Q2_K: 2-bit `q`, 4-bit scale `sc` and min `m`, `w = d * sc * q - dmin * m`;
/// Q3_K: 3-bit `q` (2 low bits, the high bit from `hmask`) less 4, signed 6-bit scales;
/// Q6_K: 6-bit `q` (a nibble and 2 high bits) less 32, signed 8-bit scales. Block `b` of 32
/// is values `32 p..32 p + 32` of half `n` (`b = 4 n + p`), with scales `2 b` and `2 b + 1`.
fn k16(format: QuantFormat, blk: &[u8], qa: &[i8], ds: &[[f32; 2]]) -> f32 {
    let (d, dmin, off) = match format {
        QuantFormat::Q2K => (h(blk, 80), h(blk, 82), 0),
        QuantFormat::Q3K => (h(blk, 108), 0.0, 4),
        _ => (h(blk, 208), 0.0, 32),
    };
    // the scale and min of the 16 values `16 s..16 s + 16`
    let scale_min = |s: usize| match format {
        QuantFormat::Q2K => ((blk[s] & 15) as i32, (blk[s] >> 4) as i32),
        QuantFormat::Q3K => (q3k_scale(&blk[96..108], s), 0),
        _ => ((blk[192 + s] as i8) as i32, 0),
    };
    let mut acc = 0f32;
    for (b, &[dx, _]) in ds.iter().enumerate() {
        let (n, p) = (b / 4, b % 4);
        let q: [u8; QK] = std::array::from_fn(|l| match format {
            QuantFormat::Q2K => (blk[16 + 32 * n + l] >> (2 * p)) & 3,
            QuantFormat::Q3K => (blk[32 + 32 * n + l] >> (2 * p)) & 3 | ((blk[l] >> b) & 1) << 2,
            _ => {
                let ql = blk[64 * n + 32 * (p % 2) + l];
                let low = if p < 2 { ql & 15 } else { ql >> 4 };
                low | ((blk[128 + 32 * n + l] >> (2 * p)) & 3) << 4
            }
        });
        let a = &qa[b * QK..(b + 1) * QK];
        let (mut sum, mut mins) = (0i32, 0i32);
        for g in 0..2 {
            let r = 16 * g..16 * g + 16;
            let (sc, m) = scale_min(2 * b + g);
            let s: i32 = q[r.clone()]
                .iter()
                .zip(&a[r.clone()])
                .map(|(&q, &a)| (q as i32 - off) * a as i32)
                .sum();
            sum += sc * s;
            mins += m * a[r].iter().map(|&a| a as i32).sum::<i32>();
        }
        acc += d * dx * sum as f32 - dmin * dx * mins as f32;
    }
    acc
}
