//! Reference scalar math shared by the validation interpreter and constant folding.
//! Values are computed in f64; callers round to the result dtype with `DType::round`.

/// The error function, accurate to about 1e-15 over the whole real line.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    let a = x.abs();
    let r = if a < 3.0 {
        // Maclaurin series; at |x| < 3 the largest term is ~170, so cancellation stays ~1e-14.
        let x2 = a * a;
        let mut term = a;
        let mut sum = a;
        let mut n = 0.0;
        while term.abs() > 1e-17 * sum.abs() {
            n += 1.0;
            term *= -x2 / n;
            sum += term / (2.0 * n + 1.0);
        }
        sum * std::f64::consts::FRAC_2_SQRT_PI
    } else {
        1.0 - erfc_large(a)
    };
    if x < 0.0 {
        -r
    } else {
        r
    }
}

/// erfc for x >= 3 by its continued fraction, evaluated backwards.
fn erfc_large(x: f64) -> f64 {
    let mut f = x;
    for k in (1..=60).rev() {
        f = x + (k as f64 / 2.0) / f;
    }
    (-x * x).exp() / (f * std::f64::consts::PI.sqrt())
}

/// Exact GELU: `x * Phi(x)`.
pub fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2))
}

/// GELU with the tanh approximation.
pub fn gelu_tanh(x: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
}

/// Logistic sigmoid, stable for large |x|.
pub fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_known_values() {
        let cases = [
            (0.0, 0.0),
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (3.0, 0.999_977_909_503_001_4),
            (4.0, 0.999_999_984_582_742_1),
            (-1.5, -0.966_105_146_475_310_7),
        ];
        for (x, want) in cases {
            assert!(
                (erf(x) - want).abs() < 1e-14,
                "erf({x}) = {} want {want}",
                erf(x)
            );
        }
        assert_eq!(erf(40.0), 1.0);
    }

    #[test]
    fn gelu_and_sigmoid() {
        assert!((gelu(1.0) - 0.841_344_746_068_542_9).abs() < 1e-14);
        assert!((gelu_tanh(1.0) - 0.841_191_990_607_477_7).abs() < 1e-12);
        assert!((sigmoid(-800.0)).abs() < 1e-300);
        assert!((sigmoid(0.0) - 0.5).abs() < 1e-16);
    }
}
