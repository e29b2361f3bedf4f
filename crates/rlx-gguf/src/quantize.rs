//! Quantization: f32 values into each GGML block format ([`quantize`]), the inverse of
//! [`QuantFormat::dequantize`].
//!
//! Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 round to nearest exactly as GGML's reference
//! `quantize_row_*_ref`; the k-quants follow the reference search (`make_qkx2_quants` for
//! Q2_K/Q4_K/Q5_K, `make_q3_quants` for Q3_K, `make_qx_quants` for Q6_K) without the
//! importance matrix. Bytes of one block are written in the layout [`rlx_ir::quant`] reads.

// The loops follow GGML's reference code, indexing several arrays in lockstep.
#![allow(clippy::needless_range_loop)]

use half::{bf16, f16};
use rlx_ir::QuantFormat;

/// Smallest group maximum that is not treated as all zeros (GGML's `GROUP_MAX_EPS`).
const GROUP_MAX_EPS: f32 = 1e-15;

/// Quantizes `src` (a whole number of blocks of `format`) into packed blocks.
///
/// # Errors
/// `src.len()` is not a multiple of the format's block size; the message names both.
pub fn quantize(format: QuantFormat, src: &[f32]) -> Result<Vec<u8>, String> {
    let (b, bb) = (format.block(), format.block_bytes());
    if !src.len().is_multiple_of(b) {
        return Err(format!(
            "{} values are not a whole number of {format} blocks of {b}",
            src.len()
        ));
    }
    let mut out = vec![0u8; src.len() / b * bb];
    for (x, y) in src.chunks_exact(b).zip(out.chunks_exact_mut(bb)) {
        quantize_block(format, x, y);
    }
    Ok(out)
}

/// Quantizes one block: `x` holds [`QuantFormat::block`] values, `y` receives
/// [`QuantFormat::block_bytes`] bytes.
///
/// # Panics
/// When the slice lengths are not those of one block (a caller bug).
pub fn quantize_block(format: QuantFormat, x: &[f32], y: &mut [u8]) {
    assert_eq!(x.len(), format.block(), "one {format} block");
    assert_eq!(y.len(), format.block_bytes(), "one {format} block");
    match format {
        QuantFormat::F32 => y.copy_from_slice(&x[0].to_le_bytes()),
        QuantFormat::F16 => y.copy_from_slice(&f16::from_f32(x[0]).to_le_bytes()),
        QuantFormat::BF16 => y.copy_from_slice(&bf16::from_f32(x[0]).to_le_bytes()),
        QuantFormat::Q8_0 => {
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            y[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
            for (q, v) in y[2..].iter_mut().zip(x) {
                *q = (v * id).round() as i8 as u8;
            }
        }
        QuantFormat::Q4_0 | QuantFormat::Q5_0 => {
            let five = format == QuantFormat::Q5_0;
            let max = signed_absmax(x);
            let (levels, top) = if five { (16.0, 31) } else { (8.0, 15) };
            let d = max / -levels;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let q: Vec<u8> = x
                .iter()
                // C's (int8_t) cast truncates toward zero, as `as i32` does
                .map(|v| ((v * id + levels + 0.5) as i32).min(top) as u8)
                .collect();
            y[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
            pack_nibbles(&q, five, &mut y[2..]);
        }
        QuantFormat::Q4_1 | QuantFormat::Q5_1 => {
            let five = format == QuantFormat::Q5_1;
            let min = x.iter().fold(f32::MAX, |m, &v| m.min(v));
            let max = x.iter().fold(-f32::MAX, |m, &v| m.max(v));
            let top = if five { 31 } else { 15 };
            let d = (max - min) / top as f32;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let q: Vec<u8> = x
                .iter()
                .map(|v| (((v - min) * id + 0.5) as i32).min(top) as u8)
                .collect();
            y[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
            y[2..4].copy_from_slice(&f16::from_f32(min).to_le_bytes());
            pack_nibbles(&q, five, &mut y[4..]);
        }
        QuantFormat::Q4K | QuantFormat::Q5K => quantize_q45k(format == QuantFormat::Q5K, x, y),
        QuantFormat::Q6K => quantize_q6k(x, y),
        QuantFormat::Q2K => quantize_q2k(x, y),
        QuantFormat::Q3K => quantize_q3k(x, y),
    }
}

/// The value of largest magnitude, with its sign (GGML's `max` next to `amax`).
fn signed_absmax(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// Packs 32 quants of 4 (or 5) bits: `[qh: u32 when five][16 bytes of nibbles]`, value
/// `j` in the low nibble of byte `j`, value `j + 16` in its high nibble.
fn pack_nibbles(q: &[u8], five: bool, y: &mut [u8]) {
    let mut qh = 0u32;
    let qs = if five { &mut y[4..20] } else { &mut y[..16] };
    for j in 0..16 {
        let (a, b) = (q[j], q[j + 16]);
        qs[j] = (a & 0xF) | ((b & 0xF) << 4);
        qh |= (((a & 0x10) >> 4) as u32) << j;
        qh |= (((b & 0x10) >> 4) as u32) << (j + 16);
    }
    if five {
        y[..4].copy_from_slice(&qh.to_le_bytes());
    }
}

/// GGML's `nearest_int`: round half to even.
fn nearest_int(v: f32) -> i32 {
    v.round_ties_even() as i32
}

fn f16_round(v: f32) -> f32 {
    f16::from_f32(v).to_f32()
}

/// `make_qkx2_quants`: scale and min of `x` for quants in `0..=nmax`, searching
/// `nstep + 1` candidate scales around the min/max one under `weights`. Writes the quants
/// to `l` and returns `(scale, -min)`.
#[allow(clippy::too_many_arguments)]
fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let n = x.len();
    let (mut min, mut max) = (x[0], x[0]);
    let (mut sum_w, mut sum_x) = (weights[0], weights[0] * x[0]);
    for i in 1..n {
        min = min.min(x[i]);
        max = max.max(x[i]);
        sum_w += weights[i];
        sum_x += weights[i] * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l.fill(0);
        return (0.0, -min);
    }
    let err = |d: f32| if use_mad { d.abs() } else { d * d };
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best = 0f32;
    for i in 0..n {
        let q = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        l[i] = q as u8;
        best += weights[i] * err(scale * q as f32 + min - x[i]);
    }
    let mut aux = vec![0u8; n];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sl, mut sl2, mut sxl) = (0f32, 0f32, 0f32);
        for i in 0..n {
            let q = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            aux[i] = q as u8;
            let (w, q) = (weights[i], q as f32);
            sl += w * q;
            sl2 += w * q * q;
            sxl += w * q * x[i];
        }
        let det = sum_w * sl2 - sl * sl;
        if det > 0.0 {
            let mut this_scale = (sum_w * sxl - sum_x * sl) / det;
            let mut this_min = (sl2 * sum_x - sl * sxl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sxl / sl2;
            }
            let cur: f32 = (0..n)
                .map(|i| weights[i] * err(this_scale * aux[i] as f32 + this_min - x[i]))
                .sum();
            if cur < best {
                l.copy_from_slice(&aux);
                best = cur;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Q4_K / Q5_K: 8 sub-blocks of 32, each with a 6-bit scale and min (`quantize_row_q4_K_ref`,
/// `quantize_row_q5_K_ref`).
fn quantize_q45k(five: bool, x: &[f32], y: &mut [u8]) {
    let nmax = if five { 31 } else { 15 };
    let mut l = [0u8; 256];
    let (mut scales, mut mins) = ([0f32; 8], [0f32; 8]);
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        let av = (xs.iter().map(|v| v * v).sum::<f32>() / 32.0).sqrt();
        let w: Vec<f32> = xs.iter().map(|v| av + v.abs()).collect();
        let (s, m) = make_qkx2_quants(
            nmax,
            xs,
            &w,
            &mut l[32 * j..32 * j + 32],
            -1.0,
            0.1,
            20,
            false,
        );
        scales[j] = s;
        mins[j] = m;
    }
    let max_scale = scales.iter().fold(0f32, |a, &b| a.max(b));
    let max_min = mins.iter().fold(0f32, |a, &b| a.max(b));
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut sc = [0u8; 12];
    for j in 0..8 {
        let ls = nearest_int(inv_scale * scales[j]).min(63) as u8;
        let lm = nearest_int(inv_min * mins[j]).min(63) as u8;
        if j < 4 {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            sc[j - 4] |= (ls >> 4) << 6;
            sc[j] |= (lm >> 4) << 6;
        }
    }
    let (d, dmin) = (f16_round(max_scale / 63.0), f16_round(max_min / 63.0));
    y[0..2].copy_from_slice(&f16::from_f32(max_scale / 63.0).to_le_bytes());
    y[2..4].copy_from_slice(&f16::from_f32(max_min / 63.0).to_le_bytes());
    y[4..16].copy_from_slice(&sc);
    for j in 0..8 {
        let (s, m) = rlx_ir::quant::scale_min_k4(j, &sc);
        let dj = d * s as f32;
        if dj == 0.0 {
            continue;
        }
        let dm = dmin * m as f32;
        for i in 32 * j..32 * j + 32 {
            l[i] = nearest_int((x[i] + dm) / dj).clamp(0, nmax) as u8;
        }
    }
    if five {
        let (qh, ql) = y[16..].split_at_mut(32);
        qh.fill(0);
        for n in 0..4 {
            let (m1, m2) = (1u8 << (2 * n), 2u8 << (2 * n));
            for j in 0..32 {
                let (mut l1, mut l2) = (l[64 * n + j], l[64 * n + j + 32]);
                if l1 > 15 {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                if l2 > 15 {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                ql[32 * n + j] = l1 | (l2 << 4);
            }
        }
    } else {
        for n in 0..4 {
            for j in 0..32 {
                y[16 + 32 * n + j] = l[64 * n + j] | (l[64 * n + j + 32] << 4);
            }
        }
    }
}

/// Packs 256 2-bit values: byte `32 * half + l` holds values `128 * half + 32 * j + l` at
/// bits `2 * j`.
fn pack_2bit(l: &[u8], qs: &mut [u8]) {
    for half in 0..2 {
        for i in 0..32 {
            let b = 128 * half + i;
            qs[32 * half + i] = l[b] | (l[b + 32] << 2) | (l[b + 64] << 4) | (l[b + 96] << 6);
        }
    }
}

/// Q2_K: 16 sub-blocks of 16, 4-bit scales and mins (`quantize_row_q2_K_ref`).
fn quantize_q2k(x: &[f32], y: &mut [u8]) {
    let mut l = [0u8; 256];
    let (mut scales, mut mins) = ([0f32; 16], [0f32; 16]);
    for j in 0..16 {
        let xs = &x[16 * j..16 * j + 16];
        let w: Vec<f32> = xs.iter().map(|v| v.abs()).collect();
        let (s, m) = make_qkx2_quants(3, xs, &w, &mut l[16 * j..16 * j + 16], -0.5, 0.1, 15, true);
        scales[j] = s;
        mins[j] = m;
    }
    let max_scale = scales.iter().fold(0f32, |a, &b| a.max(b));
    let max_min = mins.iter().fold(0f32, |a, &b| a.max(b));
    let mut sc = [0u8; 16];
    let mut d = 0f32;
    if max_scale > 0.0 {
        let iscale = 15.0 / max_scale;
        for j in 0..16 {
            sc[j] = nearest_int(iscale * scales[j]).clamp(0, 15) as u8;
        }
        d = max_scale / 15.0;
    }
    let mut dmin = 0f32;
    if max_min > 0.0 {
        let iscale = 15.0 / max_min;
        for j in 0..16 {
            sc[j] |= (nearest_int(iscale * mins[j]).clamp(0, 15) as u8) << 4;
        }
        dmin = max_min / 15.0;
    }
    y[80..82].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    y[82..84].copy_from_slice(&f16::from_f32(dmin).to_le_bytes());
    let (d, dmin) = (f16_round(d), f16_round(dmin));
    for j in 0..16 {
        let dj = d * (sc[j] & 0xF) as f32;
        if dj == 0.0 {
            continue;
        }
        let dm = dmin * (sc[j] >> 4) as f32;
        for i in 16 * j..16 * j + 16 {
            l[i] = nearest_int((x[i] + dm) / dj).clamp(0, 3) as u8;
        }
    }
    y[..16].copy_from_slice(&sc);
    pack_2bit(&l, &mut y[16..80]);
}

/// `make_q3_quants` with the weighted refinement (`do_rmse`): signed quants in
/// `-nmax..nmax`, stored in `l` offset by `nmax`; returns the scale.
fn make_q3_quants(nmax: i32, x: &[f32], l: &mut [u8]) -> f32 {
    let max = signed_absmax(x);
    if max.abs() < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let mut q: Vec<i32> = x
        .iter()
        .map(|v| nearest_int(iscale * v).clamp(-nmax, nmax - 1))
        .collect();
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for (v, &qi) in x.iter().zip(&q) {
        let w = v * v;
        sumlx += w * v * qi as f32;
        suml2 += w * (qi * qi) as f32;
    }
    for _ in 0..5 {
        let mut changed = 0;
        for (i, &v) in x.iter().enumerate() {
            let w = v * v;
            let mut slx = sumlx - w * v * q[i] as f32;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * (q[i] * q[i]) as f32;
                let new = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
                if new != q[i] {
                    slx += w * v * new as f32;
                    sl2 += w * (new * new) as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        q[i] = new;
                        sumlx = slx;
                        suml2 = sl2;
                        changed += 1;
                    }
                }
            }
        }
        if changed == 0 {
            break;
        }
    }
    for (li, qi) in l.iter_mut().zip(&q) {
        *li = (qi + nmax) as u8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// Q3_K: 16 sub-blocks of 16 with signed 6-bit scales (`quantize_row_q3_K_ref`).
fn quantize_q3k(x: &[f32], y: &mut [u8]) {
    let mut l = [0u8; 256];
    let mut scales = [0f32; 16];
    for j in 0..16 {
        scales[j] = make_q3_quants(4, &x[16 * j..16 * j + 16], &mut l[16 * j..16 * j + 16]);
    }
    let max_scale = scales
        .iter()
        .fold(0f32, |a, &b| if b.abs() > a.abs() { b } else { a });
    let mut sc = [0u8; 12];
    let mut d = 0f32;
    if max_scale != 0.0 {
        let iscale = -32.0 / max_scale;
        for (j, &s) in scales.iter().enumerate() {
            let v = (nearest_int(iscale * s).clamp(-32, 31) + 32) as u8;
            if j < 8 {
                sc[j] = v & 0xF;
            } else {
                sc[j - 8] |= (v & 0xF) << 4;
            }
            sc[8 + j % 4] |= (v >> 4) << (2 * (j / 4));
        }
        d = 1.0 / iscale;
    }
    y[108..110].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    let d = f16_round(d);
    for j in 0..16 {
        let low = if j < 8 { sc[j] & 0xF } else { sc[j - 8] >> 4 };
        let high = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
        let dj = d * ((low | (high << 4)) as i32 - 32) as f32;
        if dj == 0.0 {
            continue;
        }
        for i in 16 * j..16 * j + 16 {
            l[i] = (nearest_int(x[i] / dj).clamp(-4, 3) + 4) as u8;
        }
    }
    let (hmask, rest) = y.split_at_mut(32);
    hmask.fill(0);
    for (i, li) in l.iter_mut().enumerate() {
        if *li > 3 {
            hmask[i % 32] |= 1 << (i / 32);
            *li -= 4;
        }
    }
    pack_2bit(&l, &mut rest[..64]);
    rest[64..76].copy_from_slice(&sc);
}

/// `make_qx_quants` with `rmse_type` 1 (weights `x^2`): signed quants in `-nmax..nmax`,
/// stored in `l` offset by `nmax`; returns the scale.
fn make_qx_quants(nmax: i32, x: &[f32], l: &mut [u8]) -> f32 {
    let max = signed_absmax(x);
    if max.abs() < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0f32, 0f32);
        for &v in x {
            let q = nearest_int(iscale * v).clamp(-nmax, nmax - 1) as f32;
            let w = v * v;
            sumlx += w * v * q;
            suml2 += w * q * q;
        }
        (sumlx, suml2)
    };
    let fill = |iscale: f32, l: &mut [u8]| {
        for (li, &v) in l.iter_mut().zip(x) {
            *li = (nmax + nearest_int(iscale * v).clamp(-nmax, nmax - 1)) as u8;
        }
    };
    let iscale = -(nmax as f32) / max;
    fill(iscale, l);
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        let iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            fill(iscale, l);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Q6_K: 16 sub-blocks of 16 with i8 scales (`quantize_row_q6_K_ref`).
fn quantize_q6k(x: &[f32], y: &mut [u8]) {
    let mut l = [0u8; 256];
    let mut scales = [0f32; 16];
    for j in 0..16 {
        scales[j] = make_qx_quants(32, &x[16 * j..16 * j + 16], &mut l[16 * j..16 * j + 16]);
    }
    let max_scale = scales
        .iter()
        .fold(0f32, |a, &b| if b.abs() > a.abs() { b } else { a });
    if max_scale.abs() < GROUP_MAX_EPS {
        y.fill(0);
        return;
    }
    let iscale = -128.0 / max_scale;
    y[208..210].copy_from_slice(&f16::from_f32(1.0 / iscale).to_le_bytes());
    let d = f16_round(1.0 / iscale);
    for (j, &s) in scales.iter().enumerate() {
        y[192 + j] = nearest_int(iscale * s).min(127) as i8 as u8;
    }
    for j in 0..16 {
        let dj = d * (y[192 + j] as i8) as f32;
        if dj == 0.0 {
            continue;
        }
        for i in 16 * j..16 * j + 16 {
            l[i] = (nearest_int(x[i] / dj).clamp(-32, 31) + 32) as u8;
        }
    }
    let (ql, qh) = y[..192].split_at_mut(128);
    for n in 0..2 {
        for i in 0..32 {
            let b = 128 * n + i;
            let (q1, q2, q3, q4) = (l[b], l[b + 32], l[b + 64], l[b + 96]);
            ql[64 * n + i] = (q1 & 0xF) | ((q3 & 0xF) << 4);
            ql[64 * n + i + 32] = (q2 & 0xF) | ((q4 & 0xF) << 4);
            qh[32 * n + i] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::SplitMix64;

    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = SplitMix64(seed);
        (0..n)
            .map(|i| {
                let u = rng.next_f64() as f32 * 2.0 - 1.0;
                // a few outliers, and one shifted group (all positive)
                let shift = if (i / 32) % 5 == 3 { 1.5 } else { 0.0 };
                u * if i % 97 == 0 { 4.0 } else { 1.0 } + shift
            })
            .collect()
    }

    /// Relative RMS error of a quantize/dequantize round trip.
    fn round_trip_error(format: QuantFormat, x: &[f32]) -> f64 {
        let q = quantize(format, x).unwrap();
        assert_eq!(q.len(), format.bytes_for(x.len()).unwrap());
        let mut back = vec![0f32; x.len()];
        format.dequantize(&q, &mut back);
        let num: f64 = x
            .iter()
            .zip(&back)
            .map(|(a, b)| ((a - b) as f64).powi(2))
            .sum();
        let den: f64 = x.iter().map(|a| (*a as f64).powi(2)).sum();
        (num / den).sqrt()
    }

    #[test]
    fn every_format_round_trips_within_its_precision() {
        let x = values(4096, 3);
        // bits per weight decide the bound: about 2^-bits relative error, with slack
        for (format, bound) in [
            (QuantFormat::F32, 0.0),
            (QuantFormat::F16, 1e-3),
            (QuantFormat::BF16, 5e-3),
            (QuantFormat::Q8_0, 0.01),
            (QuantFormat::Q6K, 0.02),
            (QuantFormat::Q5_0, 0.05),
            (QuantFormat::Q5_1, 0.05),
            (QuantFormat::Q5K, 0.04),
            (QuantFormat::Q4_0, 0.1),
            (QuantFormat::Q4_1, 0.1),
            (QuantFormat::Q4K, 0.08),
            (QuantFormat::Q3K, 0.2),
            (QuantFormat::Q2K, 0.4),
        ] {
            let e = round_trip_error(format, &x);
            assert!(e <= bound, "{format}: relative error {e} > {bound}");
        }
    }

    #[test]
    fn zeros_and_constants_stay_finite() {
        for format in QuantFormat::ALL {
            for c in [0.0f32, 0.75, -2.0] {
                let x = vec![c; 256];
                let q = quantize(format, &x).unwrap();
                let mut back = vec![f32::NAN; 256];
                format.dequantize(&q, &mut back);
                for v in &back {
                    assert!(
                        v.is_finite() && (v - c).abs() <= 0.1 * c.abs() + 1e-6,
                        "{format} {c}: {v}"
                    );
                }
            }
        }
    }

    #[test]
    fn partial_blocks_are_an_error() {
        let e = quantize(QuantFormat::Q4K, &[1.0; 100]).unwrap_err();
        assert!(e.contains("100 values") && e.contains("q4_k"), "{e}");
    }

    #[test]
    fn q8_0_matches_ggml_rounding() {
        // d = 127 / 127 = 1: quants are the values rounded half away from zero
        let mut x = vec![0f32; 32];
        x[0] = 127.0;
        x[1] = 2.5;
        x[2] = -2.5;
        x[3] = 0.49;
        let q = quantize(QuantFormat::Q8_0, &x).unwrap();
        assert_eq!(&q[2..6], &[127, 3, (-3i8) as u8, 0]);
    }
}
