//! Branch-free f32 approximations of the transcendental functions the lane bytecode needs,
//! written so that LLVM vectorizes loops over them (no libm calls, selects instead of
//! branches). Accuracy is a few ulp; the interpreter keeps the exact f64 definitions.
//!
//! Each function takes `FMA`: true only inside code compiled with the `fma` target feature,
//! where `mul_add` is one instruction (elsewhere it would be a slow libm call).

/// `a * b + c`, fused when `FMA`.
#[inline(always)]
pub(crate) fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// e^xc as `(y, n)` with e^xc = y * 2^n: the Cephes reduction (x*log2(e) rounded to
/// nearest with the 1.5*2^23 trick — no libm, no SSE4.1 needed) and polynomial, for `xc`
/// already inside the f32 exp range.
#[inline(always)]
fn exp_parts<const FMA: bool>(xc: f32) -> (f32, i32) {
    let t = xc * std::f32::consts::LOG2_E + 12_582_912.0;
    let n_f = t - 12_582_912.0;
    let n = (t.to_bits() as i32).wrapping_sub(0x4B40_0000);
    let r = xc - n_f * 0.693_359_4 - n_f * -2.121_944_4e-4;
    let mut p = 1.987_569_1e-4f32;
    p = madd::<FMA>(p, r, 1.398_199_9e-3);
    p = madd::<FMA>(p, r, 8.333_452e-3);
    p = madd::<FMA>(p, r, 4.166_579_6e-2);
    p = madd::<FMA>(p, r, 1.666_666_5e-1);
    p = madd::<FMA>(p, r, 5e-1);
    (madd::<FMA>(p, r * r, r) + 1.0, n)
}

/// 2^n as an f32, for n in the normal exponent range.
#[inline(always)]
fn pow2(n: i32) -> f32 {
    f32::from_bits((n.wrapping_add(127) as u32).wrapping_shl(23))
}

/// e^x, Cephes polynomial with a two-step power-of-two scale so that results in the
/// subnormal range stay accurate. NaN in, NaN out.
#[inline(always)]
pub fn exp<const FMA: bool>(x: f32) -> f32 {
    let over = x > 88.722_84;
    let (y, n) = exp_parts::<FMA>(x.clamp(-104.0, 88.722_84));
    let n1 = n >> 1;
    let v = y * pow2(n1) * pow2(n.wrapping_sub(n1));
    if over {
        f32::INFINITY
    } else if x.is_nan() {
        x
    } else {
        v
    }
}

/// e^x for softmax arguments (x <= 0 after the row max is subtracted): the polynomial of
/// [`exp`] with one power-of-two scale and no overflow branch; below -87 (where e^x is
/// under the smallest normal f32) the result is 0, as for a masked -inf. NaN in, NaN out.
#[inline(always)]
pub fn exp_nonpositive<const FMA: bool>(x: f32) -> f32 {
    // `<` keeps a NaN as it is (f32::max would replace it)
    let (y, n) = exp_parts::<FMA>(if x < -87.0 { -87.0 } else { x });
    if x < -87.0 {
        0.0
    } else {
        y * pow2(n)
    }
}

/// tanh: odd polynomial near 0 (where 1 - 2/(e^2x + 1) would cancel), exp elsewhere.
#[inline(always)]
pub fn tanh<const FMA: bool>(x: f32) -> f32 {
    let a = x.abs();
    let z = x * x;
    let small =
        ((((-5.704_988_7e-3 * z + 2.063_909e-2) * z - 5.373_971_6e-2) * z + 1.333_144_2e-1) * z
            - 3.333_328e-1)
            * z
            * x
            + x;
    let e = exp::<FMA>(2.0 * a);
    let large = (1.0 - 2.0 / (e + 1.0)).copysign(x);
    if a < 0.625 {
        small
    } else {
        large
    }
}

/// Logistic sigmoid.
#[inline(always)]
pub fn sigmoid<const FMA: bool>(x: f32) -> f32 {
    1.0 / (1.0 + exp::<FMA>(-x))
}

/// [`erf`]'s numerator coefficients (in `x^2`, highest first; times `x` after).
const ERF_P: [f32; 7] = [
    -2.726_142_3e-10,
    2.770_681_4e-8,
    -2.101_024e-6,
    -5.692_506_4e-5,
    -7.349_906_3e-4,
    -2.954_600_1e-3,
    -1.609_603_3e-2,
];
/// [`erf`]'s denominator coefficients (in `x^2`, highest first).
const ERF_Q: [f32; 5] = [
    -1.456_607_2e-5,
    -2.133_740_6e-4,
    -1.682_827e-3,
    -7.373_329e-3,
    -1.426_473_9e-2,
];

/// erf: a rational approximation (Eigen's) with about 1e-7 absolute error, saturating to
/// +-1 beyond |x| = 4. The vector forms below evaluate the same coefficients.
#[inline(always)]
pub fn erf<const FMA: bool>(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = ERF_P[0];
    for &c in &ERF_P[1..] {
        p = madd::<FMA>(p, x2, c);
    }
    p *= x;
    let mut q = ERF_Q[0];
    for &c in &ERF_Q[1..] {
        q = madd::<FMA>(q, x2, c);
    }
    p / q
}

/// Exact-form GELU: x * Phi(x).
#[inline(always)]
pub fn gelu<const FMA: bool>(x: f32) -> f32 {
    0.5 * x * (1.0 + erf::<FMA>(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// GELU with the tanh approximation.
#[inline(always)]
pub fn gelu_tanh<const FMA: bool>(x: f32) -> f32 {
    const C: f32 = 0.797_884_6; // sqrt(2/pi)
    0.5 * x * (1.0 + tanh::<FMA>(C * (x + 0.044_715 * x * x * x)))
}

/// Hand-vectorized AVX2+FMA kernels (8 lanes).
/// True when the CPU has AVX-512F and AVX-512 BF16 (checked once).
#[cfg(target_arch = "x86_64")]
pub(crate) fn avx512_bf16() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512bf16")
    })
}

/// `dst = src` rounded to bf16 (nearest even, as `bf16::from_f32`; VCVTNEPS2BF16 flushes
/// f32 denormals to zero), 16 lanes at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
pub(crate) fn round_to_bf16_avx512(dst: &mut [half::bf16], src: &[f32]) {
    use std::arch::x86_64::*;
    let n = dst.len().min(src.len());
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: i + 16 <= n for both slices.
        unsafe {
            let v = _mm512_cvtneps_pbh(_mm512_loadu_ps(src.as_ptr().add(i)));
            _mm256_storeu_si256(
                dst.as_mut_ptr().add(i).cast(),
                std::mem::transmute::<__m256bh, __m256i>(v),
            );
        }
        i += 16;
    }
    for (d, &v) in dst[i..n].iter_mut().zip(&src[i..n]) {
        *d = half::bf16::from_f32(v);
    }
}

#[cfg(target_arch = "x86_64")]
pub mod avx2 {
    use super::{ERF_P, ERF_Q};
    use std::arch::x86_64::*;

    /// GELU of 8 lanes: the same rational erf as [`super::erf`], with the division replaced
    /// by a reciprocal estimate and two Newton steps (full f32 precision).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub fn gelu(x: __m256) -> __m256 {
        let s = _mm256_set1_ps;
        let u = _mm256_mul_ps(x, s(std::f32::consts::FRAC_1_SQRT_2));
        let u = _mm256_max_ps(_mm256_min_ps(u, s(4.0)), s(-4.0));
        let u2 = _mm256_mul_ps(u, u);
        let mut p = s(ERF_P[0]);
        for &c in &ERF_P[1..] {
            p = _mm256_fmadd_ps(p, u2, s(c));
        }
        p = _mm256_mul_ps(p, u);
        let mut q = s(ERF_Q[0]);
        for &c in &ERF_Q[1..] {
            q = _mm256_fmadd_ps(q, u2, s(c));
        }
        let r = _mm256_rcp_ps(q);
        let r = _mm256_fmadd_ps(r, _mm256_fnmadd_ps(q, r, s(1.0)), r);
        let r = _mm256_fmadd_ps(r, _mm256_fnmadd_ps(q, r, s(1.0)), r);
        let erf = _mm256_mul_ps(p, r);
        let hx = _mm256_mul_ps(x, s(0.5));
        _mm256_mul_ps(hx, _mm256_add_ps(erf, s(1.0)))
    }

    /// [`gelu`] of four vectors, interleaved.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn gelu4(x: [__m256; 4]) -> [__m256; 4] {
        let s = _mm256_set1_ps;
        let map =
            |f: &dyn Fn(__m256) -> __m256, v: [__m256; 4]| [f(v[0]), f(v[1]), f(v[2]), f(v[3])];
        let u = map(&|x| _mm256_mul_ps(x, s(std::f32::consts::FRAC_1_SQRT_2)), x);
        let u = map(&|u| _mm256_max_ps(_mm256_min_ps(u, s(4.0)), s(-4.0)), u);
        let u2 = map(&|u| _mm256_mul_ps(u, u), u);
        let mut p = [s(ERF_P[0]); 4];
        let mut q = [s(ERF_Q[0]); 4];
        for &c in &ERF_P[1..] {
            for k in 0..4 {
                p[k] = _mm256_fmadd_ps(p[k], u2[k], s(c));
            }
        }
        for &c in &ERF_Q[1..] {
            for k in 0..4 {
                q[k] = _mm256_fmadd_ps(q[k], u2[k], s(c));
            }
        }
        std::array::from_fn(|k| {
            let r = _mm256_rcp_ps(q[k]);
            let r = _mm256_fmadd_ps(r, _mm256_fnmadd_ps(q[k], r, s(1.0)), r);
            let r = _mm256_fmadd_ps(r, _mm256_fnmadd_ps(q[k], r, s(1.0)), r);
            let erf = _mm256_mul_ps(_mm256_mul_ps(p[k], u[k]), r);
            let hx = _mm256_mul_ps(x[k], s(0.5));
            _mm256_mul_ps(hx, _mm256_add_ps(erf, s(1.0)))
        })
    }

    /// Elements ahead of the current position that [`mul_add_gelu`] prefetches.
    const PREFETCH: usize = 1024;

    /// `d = gelu(x * y + z)` over equal-length slices.
    #[target_feature(enable = "avx2,fma")]
    pub fn mul_add_gelu(x: &[f32], y: &[f32], z: &[f32], d: &mut [f32]) {
        let n = d.len();
        assert!(x.len() >= n && y.len() >= n && z.len() >= n);
        // SAFETY: `gelu_stream` reads lanes below n only, and every slice holds n.
        let at = |i: usize| unsafe {
            _mm256_fmadd_ps(
                _mm256_loadu_ps(x.as_ptr().add(i)),
                _mm256_loadu_ps(y.as_ptr().add(i)),
                _mm256_loadu_ps(z.as_ptr().add(i)),
            )
        };
        let tail = |i: usize| {
            let mut buf = [[0f32; 8]; 3];
            buf[0][..n - i].copy_from_slice(&x[i..n]);
            buf[1][..n - i].copy_from_slice(&y[i..n]);
            buf[2][..n - i].copy_from_slice(&z[i..n]);
            // SAFETY: the buffers hold 8 lanes each.
            unsafe {
                _mm256_fmadd_ps(
                    _mm256_loadu_ps(buf[0].as_ptr()),
                    _mm256_loadu_ps(buf[1].as_ptr()),
                    _mm256_loadu_ps(buf[2].as_ptr()),
                )
            }
        };
        gelu_stream(x, d, at, tail)
    }

    /// `d = gelu(x)` over equal-length slices.
    #[target_feature(enable = "avx2,fma")]
    pub fn gelu_slice(x: &[f32], d: &mut [f32]) {
        let n = d.len();
        assert!(x.len() >= n);
        // SAFETY: `gelu_stream` reads lanes below n only, and `x` holds n.
        let at = |i: usize| unsafe { _mm256_loadu_ps(x.as_ptr().add(i)) };
        let tail = |i: usize| {
            let mut buf = [0f32; 8];
            buf[..n - i].copy_from_slice(&x[i..n]);
            // SAFETY: the buffer holds 8 lanes.
            unsafe { _mm256_loadu_ps(buf.as_ptr()) }
        };
        gelu_stream(x, d, at, tail)
    }

    /// `d[i..i + 8] = gelu(at(i))` over `d`, four vectors per step; `tail(i)` gives the
    /// arguments of the last partial vector (lanes past `d.len()` unused). `x` is the
    /// streamed input, prefetched ahead.
    #[inline(always)]
    fn gelu_stream(
        x: &[f32],
        d: &mut [f32],
        at: impl Fn(usize) -> __m256,
        tail: impl Fn(usize) -> __m256,
    ) {
        let n = d.len();
        let mut i = 0;
        // Four independent vectors per step: the erf chain is long and latency-bound.
        while i + 32 <= n {
            // streamed from memory: keep loads in flight while the erf chain computes
            // (a prefetch never faults, so the address may run past the end)
            // SAFETY (all intrinsics below): the callers enable AVX2 and FMA; i + 32 <= n.
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(x.as_ptr().wrapping_add(i + PREFETCH) as *const i8);
                _mm_prefetch::<_MM_HINT_T0>(x.as_ptr().wrapping_add(i + PREFETCH + 16) as *const i8);
                let g = gelu4(std::array::from_fn(|k| at(i + 8 * k)));
                for (k, g) in g.into_iter().enumerate() {
                    _mm256_storeu_ps(d.as_mut_ptr().add(i + 8 * k), g);
                }
            }
            i += 32;
        }
        while i + 8 <= n {
            // SAFETY: i + 8 <= n.
            unsafe { _mm256_storeu_ps(d.as_mut_ptr().add(i), gelu(at(i))) };
            i += 8;
        }
        if i < n {
            let mut buf = [0f32; 8];
            // SAFETY: the buffer holds 8 lanes.
            unsafe { _mm256_storeu_ps(buf.as_mut_ptr(), gelu(tail(i))) };
            d[i..].copy_from_slice(&buf[..n - i]);
        }
    }
}

/// The 16-lane GELU: [`avx2::gelu_slice`]'s rational erf on 512-bit registers.
#[cfg(target_arch = "x86_64")]
pub mod avx512 {
    use std::arch::x86_64::*;

    use super::{ERF_P as P, ERF_Q as Q};

    /// GELU of `K` vectors of 16 lanes, interleaved (the erf chain is latency-bound); the
    /// division by a reciprocal estimate and two Newton steps (full f32 precision).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn gelu<const K: usize>(x: [__m512; K]) -> [__m512; K] {
        let s = _mm512_set1_ps;
        let u = x.map(|x| {
            let u = _mm512_mul_ps(x, s(std::f32::consts::FRAC_1_SQRT_2));
            _mm512_max_ps(_mm512_min_ps(u, s(4.0)), s(-4.0))
        });
        let u2 = u.map(|u| _mm512_mul_ps(u, u));
        let mut p = [s(P[0]); K];
        for c in &P[1..] {
            for k in 0..K {
                p[k] = _mm512_fmadd_ps(p[k], u2[k], s(*c));
            }
        }
        let mut q = [s(Q[0]); K];
        for c in &Q[1..] {
            for k in 0..K {
                q[k] = _mm512_fmadd_ps(q[k], u2[k], s(*c));
            }
        }
        std::array::from_fn(|k| {
            let r = _mm512_rcp14_ps(q[k]);
            let r = _mm512_fmadd_ps(r, _mm512_fnmadd_ps(q[k], r, s(1.0)), r);
            let r = _mm512_fmadd_ps(r, _mm512_fnmadd_ps(q[k], r, s(1.0)), r);
            let erf = _mm512_mul_ps(_mm512_mul_ps(p[k], u[k]), r);
            let hx = _mm512_mul_ps(x[k], s(0.5));
            _mm512_mul_ps(hx, _mm512_add_ps(erf, s(1.0)))
        })
    }

    /// `d = gelu(x)` over equal-length slices.
    #[target_feature(enable = "avx512f")]
    pub fn gelu_slice(x: &[f32], d: &mut [f32]) {
        let n = d.len();
        assert!(x.len() >= n);
        let mut i = 0;
        while i + 64 <= n {
            // SAFETY: i + 64 <= n, and both slices hold n values.
            unsafe {
                let v = gelu::<4>(std::array::from_fn(|k| {
                    _mm512_loadu_ps(x.as_ptr().add(i + 16 * k))
                }));
                for (k, v) in v.into_iter().enumerate() {
                    _mm512_storeu_ps(d.as_mut_ptr().add(i + 16 * k), v);
                }
            }
            i += 64;
        }
        while i < n {
            let m: __mmask16 = if n - i >= 16 { !0 } else { (1 << (n - i)) - 1 };
            // SAFETY: the mask covers lanes below n only.
            unsafe {
                let [v] = gelu::<1>([_mm512_maskz_loadu_ps(m, x.as_ptr().add(i))]);
                _mm512_mask_storeu_ps(d.as_mut_ptr().add(i), m, v);
            }
            i += 16;
        }
    }
}

#[cfg(test)]
mod tests {
    use rlx_ir::scalar;

    fn worst(f: impl Fn(f32) -> f32, g: impl Fn(f64) -> f64, lo: f64, hi: f64) -> f64 {
        (0..=20_000)
            .map(|i| {
                let x = (lo + (hi - lo) * i as f64 / 20_000.0) as f32;
                let want = g(x as f64);
                let got = f(x) as f64;
                (got - want).abs() / want.abs().max(1e-30)
            })
            .fold(0.0, f64::max)
    }

    #[test]
    fn accuracy() {
        accuracy_of::<false>();
        accuracy_of::<true>();
    }

    fn accuracy_of<const F: bool>() {
        assert!(worst(super::exp::<F>, f64::exp, -87.0, 88.0) < 4e-7);
        assert!(worst(super::exp::<F>, f64::exp, -103.0, -88.0) < 1e-2);
        assert!(worst(super::tanh::<F>, f64::tanh, -9.0, 9.0) < 4e-7);
        assert!(worst(super::sigmoid::<F>, scalar::sigmoid, -20.0, 20.0) < 5e-7);
        assert!(worst(super::erf::<F>, scalar::erf, -3.0, 3.0) < 3e-7);
        // In the negative tail GELU is 1 + erf(x) cancelling: the error is absolute there.
        assert!(worst(super::gelu::<F>, scalar::gelu, -1.0, 6.0) < 1e-6);
        assert!(worst(super::gelu_tanh::<F>, scalar::gelu_tanh, -1.0, 6.0) < 1e-6);
        for i in 0..=1000 {
            let x = -8.0 + 7.0 * i as f32 / 1000.0;
            assert!((super::gelu::<F>(x) as f64 - scalar::gelu(x as f64)).abs() < 1e-6);
            assert!((super::gelu_tanh::<F>(x) as f64 - scalar::gelu_tanh(x as f64)).abs() < 1e-6);
        }
        assert_eq!(super::exp::<F>(100.0), f32::INFINITY);
        assert_eq!(super::exp::<F>(-200.0), 0.0);
        assert!(super::exp::<F>(f32::NAN).is_nan());
        assert!((super::erf::<F>(9.0) - 1.0).abs() < 1e-6);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_gelu() {
        if !(std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")) {
            return;
        }
        let n = 20_003;
        let x: Vec<f32> = (0..n).map(|i| -8.0 + 14.0 * i as f32 / n as f32).collect();
        let (y, z) = (vec![1.0f32; n], vec![0.0f32; n]);
        let mut d = vec![0.0f32; n];
        // SAFETY: the features were detected above.
        unsafe { super::avx2::mul_add_gelu(&x, &y, &z, &mut d) };
        for (&x, &g) in x.iter().zip(&d) {
            let want = scalar::gelu(x as f64);
            let err = (g as f64 - want).abs();
            assert!(
                err < 1e-6 && (x < -1.0 || err / want.abs().max(1e-30) < 1e-6),
                "{x}"
            );
        }
        let nan = [f32::NAN; 3];
        let mut out = [0.0f32; 3];
        // SAFETY: as above.
        unsafe { super::avx2::mul_add_gelu(&nan, &nan, &nan, &mut out) };
        assert!(out.iter().all(|v| v.is_nan()));
    }

    /// The AVX2 `gelu_slice` against the f64 GELU on random arguments, over lengths that
    /// end in each of its paths (four vectors, one vector, a partial one), and a NaN; the
    /// AVX-512 one against the AVX2 one.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_gelu_slice() {
        if !(std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")) {
            return;
        }
        let mut rng = rlx_ir::SplitMix64(11);
        for n in [1, 5, 8, 13, 32, 45, 1000] {
            let mut x: Vec<f32> = (0..n).map(|_| rng.next_f64() as f32 * 14.0 - 8.0).collect();
            x[n / 2] = f32::NAN;
            let mut d = vec![0.0f32; n];
            // SAFETY: the features were detected above.
            unsafe { super::avx2::gelu_slice(&x, &mut d) };
            let mut d512 = vec![0.0f32; n];
            if std::is_x86_feature_detected!("avx512f") {
                // SAFETY: as above.
                unsafe { super::avx512::gelu_slice(&x, &mut d512) };
                for (&a, &b) in d.iter().zip(&d512) {
                    assert!((a - b).abs() <= 1e-6 * a.abs().max(1e-3) || a.is_nan() && b.is_nan());
                }
            }
            for (&x, &g) in x.iter().zip(&d) {
                if x.is_nan() {
                    assert!(g.is_nan());
                    continue;
                }
                let want = scalar::gelu(x as f64);
                let err = (g as f64 - want).abs();
                assert!(
                    err < 1e-6 && (x < -1.0 || err / want.abs().max(1e-30) < 1e-6),
                    "{x}"
                );
            }
        }
    }
}
