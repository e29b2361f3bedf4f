//! Activation rows quantized to 8 bits for the integer dot path ([`super::dot_i8`]).
//!
//! Each block of 32 values `x` becomes `d * q` with `d = max|x| / 127` and
//! `q = round(x / d)` in `-127..=127`, so a value moves by at most `d / 2`. The block also
//! keeps `s = d * sum(q)`: the Q4_0/Q4_1 offset terms and the Q8_0 bias trick of the
//! integer kernels multiply it by a per-block weight constant instead of summing again.

/// Values per activation block (that of Q4_0, Q4_1 and Q8_0 weights).
pub(crate) const QK: usize = 32;

/// `m` activation rows of `k` values (`k` a multiple of [`QK`]), quantized.
#[derive(Debug, Default)]
pub(crate) struct Q8Rows {
    k: usize,
    /// the quantized values, row-major
    qs: Vec<i8>,
    /// per block: the scale `d` and `d * sum(q)`, side by side so a kernel loads both at once
    ds: Vec<[f32; 2]>,
}

/// One quantized activation row: per block of [`QK`] values, its scale `d`, `d * sum(q)`
/// and the values.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Q8Row<'a> {
    /// the quantized values
    pub qs: &'a [i8],
    /// per block: the scale `d` and `d * sum(q)`
    pub ds: &'a [[f32; 2]],
}

impl Q8Rows {
    /// Quantizes `x` (rows of `k` values; `k` a multiple of [`QK`]).
    pub fn quantize(x: &[f32], k: usize) -> Q8Rows {
        assert!(
            k > 0 && k.is_multiple_of(QK) && x.len().is_multiple_of(k),
            "q8 rows"
        );
        let nb = x.len() / QK;
        let mut r = Q8Rows {
            k,
            qs: vec![0; x.len()],
            ds: vec![[0.0; 2]; nb],
        };
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked just above).
            unsafe { quantize_avx2(x, &mut r) };
            return r;
        }
        quantize_blocks(x, &mut r);
        r
    }

    /// Row `i`.
    pub fn row(&self, i: usize) -> Q8Row<'_> {
        let nb = self.k / QK;
        Q8Row {
            qs: &self.qs[i * self.k..(i + 1) * self.k],
            ds: &self.ds[i * nb..(i + 1) * nb],
        }
    }
}

/// [`quantize_blocks`] with AVX2: the same scale, rounding (to nearest, ties to even) and
/// clamp, eight values a register.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn quantize_avx2(x: &[f32], r: &mut Q8Rows) {
    use std::arch::x86_64::*;
    let nb = x.len() / QK;
    assert!(r.qs.len() >= nb * QK && r.ds.len() >= nb, "q8 rows");
    let sign = _mm256_set1_ps(-0.0);
    // undoes the lane interleaving of the two packs below
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for b in 0..nb {
        let p = x.as_ptr().add(b * QK);
        let v = [0, 8, 16, 24].map(|o| _mm256_loadu_ps(p.add(o)));
        let abs = v.map(|v| _mm256_andnot_ps(sign, v));
        let m = _mm256_max_ps(_mm256_max_ps(abs[0], abs[1]), _mm256_max_ps(abs[2], abs[3]));
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
        let scale = amax / 127.0;
        let inv = _mm256_set1_ps(if scale > 0.0 { 1.0 / scale } else { 0.0 });
        let lim = _mm256_set1_ps(127.0);
        let q = v.map(|v| {
            let t = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                _mm256_mul_ps(v, inv),
            );
            _mm256_cvtps_epi32(_mm256_max_ps(
                _mm256_min_ps(t, lim),
                _mm256_sub_ps(sign, lim),
            ))
        });
        let s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
        let sum = _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 1)));
        let lo = _mm256_packs_epi32(q[0], q[1]);
        let hi = _mm256_packs_epi32(q[2], q[3]);
        let bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(lo, hi), order);
        _mm256_storeu_si256(r.qs.as_mut_ptr().add(b * QK) as *mut __m256i, bytes);
        *r.ds.get_unchecked_mut(b) = [scale, scale * sum as f32];
    }
}

#[inline(always)]
fn quantize_blocks(x: &[f32], r: &mut Q8Rows) {
    let blocks = x.chunks_exact(QK).zip(r.qs.chunks_exact_mut(QK));
    for ((xb, qb), ds) in blocks.zip(r.ds.iter_mut()) {
        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        let scale = amax / 127.0;
        let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
        let mut sum = 0i32;
        for (q, &v) in qb.iter_mut().zip(xb) {
            // |v * inv| <= 127 up to rounding; the clamp keeps the cast exact
            let t = (v * inv).round_ties_even().clamp(-127.0, 127.0) as i32;
            *q = t as i8;
            sum += t;
        }
        *ds = [scale, scale * sum as f32];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::SplitMix64;

    #[test]
    fn values_move_by_at_most_half_a_step() {
        let mut rng = SplitMix64(5);
        for k in [32, 64, 576, 1536] {
            let x: Vec<f32> = (0..2 * k)
                .map(|i| match i % 97 {
                    0 => 0.0,
                    _ => ((rng.next_u64() % 20001) as f32 / 10000.0 - 1.0) * (1 + i % 7) as f32,
                })
                .collect();
            let r = Q8Rows::quantize(&x, k);
            for i in 0..2 {
                let row = r.row(i);
                for (b, xb) in x[i * k..(i + 1) * k].chunks_exact(QK).enumerate() {
                    let [d, s] = row.ds[b];
                    let qb = &row.qs[b * QK..(b + 1) * QK];
                    let sum: i32 = qb.iter().map(|&q| q as i32).sum();
                    assert!((s - d * sum as f32).abs() <= 1e-6 * s.abs().max(1.0));
                    for (&v, &q) in xb.iter().zip(qb) {
                        assert!(q >= -127);
                        let err = (v - d * q as f32).abs();
                        assert!(err <= d * 0.5 * (1.0 + 1e-5), "k={k} {v} vs {d}*{q}");
                    }
                }
            }
        }
        // the vector and scalar quantizers agree exactly
        let x: Vec<f32> = (0..1536)
            .map(|i| ((rng.next_u64() % 20001) as f32 / 10000.0 - 1.0) * (1 + i % 5) as f32)
            .collect();
        let mut scalar = Q8Rows {
            k: 1536,
            qs: vec![0; 1536],
            ds: vec![[0.0; 2]; 48],
        };
        quantize_blocks(&x, &mut scalar);
        let fast = Q8Rows::quantize(&x, 1536);
        assert_eq!((&fast.qs, &fast.ds), (&scalar.qs, &scalar.ds));
        // an all-zero block quantizes to zeros with scale 0
        let r = Q8Rows::quantize(&[0.0; 32], 32);
        assert_eq!(r.row(0).ds[0], [0.0, 0.0]);
        assert!(r.row(0).qs.iter().all(|&q| q == 0));
    }
}
