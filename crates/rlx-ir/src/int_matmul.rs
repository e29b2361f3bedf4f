//! The integer matrix product ([`crate::Op::MatMulInteger`]): `(a - a_zero) · (b - b_zero)`
//! with every product and sum in i32, as ONNX `MatMulInteger` defines it, optionally fed by
//! an f32 activation quantized on the way in and optionally scaled to f32 on the way out.
//! One op covers what quantized exports write around their products: `MatMulInteger`,
//! `DynamicQuantizeLinear → MatMulInteger → Cast → Mul(scale)`, ONNX Runtime's
//! `MatMulIntegerToFloat` and `DynamicQuantizeMatMul`.
//!
//! Inputs, in order ([`AInput`] says which the activation takes):
//! - `a`: `[.., k]`, u8 or i8 ([`AInput::Integer`]); f32 otherwise;
//! - `b`: `[k, n]`, u8 or i8 (usually a weight, which backends may pack once);
//! - `a_zero` (not for [`AInput::Dynamic`]): one value, u8 or i8 (the dtype `a` is quantized
//!   to for [`AInput::Quantize`]);
//! - `b_zero`: one value or one per column (`[n]`), in `b`'s dtype;
//! - `a_scale` (only for [`AInput::Quantize`]): one f32; `a` becomes
//!   `saturate(round_half_even(a / a_scale) + a_zero)`, the division in f32, as ONNX
//!   `QuantizeLinear` computes it;
//! - `scale` (only when `scaled`): one f32 or one per column; the result is
//!   `f32(sum) * scale`, rounded once, as ONNX Runtime's `MatMulIntegerToFloat` does.
//!
//! The result is `[.., n]`: i32, or f32 when scaled or dynamically quantized. Sums wrap in
//! i32 as the ONNX reference's int32 arithmetic does (8-bit products need `k` past 2^16).

use crate::{DType, Dim, Shape, Tensor, TensorData, TensorType};

/// How the activation `a` arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum AInput {
    /// u8 or i8 values with an `a_zero` input
    #[default]
    Integer,
    /// f32 values quantized with the `a_zero` and `a_scale` inputs (ONNX `QuantizeLinear`)
    Quantize,
    /// f32 values quantized to u8 with the scale and zero point of their own range, as ONNX
    /// `DynamicQuantizeLinear` finds them ([`dynamic_params`]); that scale also multiplies
    /// the result (times `scale` when given), as in ONNX Runtime's `DynamicQuantizeMatMul`
    Dynamic,
}

/// The attributes of [`crate::Op::MatMulInteger`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct IntMatMul {
    /// how `a` arrives
    pub a: AInput,
    /// the i32 sums times the `scale` input, as f32
    pub scaled: bool,
}

impl IntMatMul {
    /// How many inputs the op takes (see the module's list).
    pub fn arity(self) -> usize {
        let base = match self.a {
            AInput::Integer => 4,
            AInput::Quantize => 5,
            AInput::Dynamic => 3,
        };
        base + usize::from(self.scaled)
    }

    /// The position of the `a_zero` input (none for [`AInput::Dynamic`]).
    pub fn a_zero_input(self) -> Option<usize> {
        (self.a != AInput::Dynamic).then_some(2)
    }

    /// The position of the `b_zero` input.
    pub fn b_zero_input(self) -> usize {
        if self.a == AInput::Dynamic {
            2
        } else {
            3
        }
    }

    /// The position of the `a_scale` input (only for [`AInput::Quantize`]).
    pub fn a_scale_input(self) -> Option<usize> {
        (self.a == AInput::Quantize).then_some(4)
    }

    /// The position of the `scale` input, when the result is scaled.
    pub fn scale_input(self) -> Option<usize> {
        self.scaled.then(|| self.arity() - 1)
    }

    /// The result dtype.
    pub fn out_dtype(self) -> DType {
        if self.scaled || self.a == AInput::Dynamic {
            DType::F32
        } else {
            DType::I32
        }
    }

    /// The shape and dtype rule.
    ///
    /// # Errors
    /// A sentence naming the input whose dtype or shape breaks the rule.
    pub fn infer(self, inputs: &[&TensorType]) -> Result<TensorType, String> {
        if inputs.len() != self.arity() {
            return Err(format!(
                "expects {} inputs (a, b, {}b_zero{}{}), got {}",
                self.arity(),
                if self.a == AInput::Dynamic {
                    ""
                } else {
                    "a_zero, "
                },
                if self.a == AInput::Quantize {
                    ", a_scale"
                } else {
                    ""
                },
                if self.scaled { ", scale" } else { "" },
                inputs.len()
            ));
        }
        let (a, b, b_zero) = (inputs[0], inputs[1], inputs[self.b_zero_input()]);
        let byte = |d: DType| matches!(d, DType::U8 | DType::I8);
        match (self.a, self.a_zero_input().map(|i| inputs[i])) {
            (AInput::Integer, Some(a_zero)) => {
                if !byte(a.dtype) {
                    return Err(format!("a must be u8 or i8, got {}", a.dtype));
                }
                if a_zero.dtype != a.dtype {
                    return Err(format!(
                        "a_zero must be {} as a is, got {}",
                        a.dtype, a_zero.dtype
                    ));
                }
            }
            (_, a_zero) => {
                if a.dtype != DType::F32 {
                    return Err(format!("a must be f32 to be quantized, got {}", a.dtype));
                }
                if let Some(z) = a_zero.filter(|z| !byte(z.dtype)) {
                    return Err(format!("a_zero must be u8 or i8, got {}", z.dtype));
                }
            }
        }
        let r = a.shape.rank();
        if r < 1 {
            return Err("a needs rank >= 1".into());
        }
        if b.shape.rank() != 2 {
            return Err(format!("b must be [k, n], got {}", b.shape));
        }
        let (k, n) = (&b.shape.0[0], &b.shape.0[1]);
        if &a.shape.0[r - 1] != k {
            return Err(format!(
                "a's last dim {} differs from b's rows {k}",
                a.shape.0[r - 1]
            ));
        }
        let one = |t: &TensorType| t.shape.numel() == Some(1);
        let per_column = |t: &TensorType| one(t) || (t.shape.rank() == 1 && &t.shape.0[0] == n);
        if let Some(z) = self.a_zero_input().map(|i| inputs[i]).filter(|z| !one(z)) {
            return Err(format!("a_zero must hold one value, got {}", z.shape));
        }
        if !per_column(b_zero) {
            return Err(format!(
                "b_zero must hold one value or one per column ({n}), got {}",
                b_zero.shape
            ));
        }
        if let Some(i) = self.a_scale_input() {
            let s = inputs[i];
            if s.dtype != DType::F32 || !one(s) {
                return Err(format!("a_scale must be one f32, got {s}"));
            }
        }
        if let Some(i) = self.scale_input() {
            let s = inputs[i];
            if s.dtype != DType::F32 || !per_column(s) {
                return Err(format!(
                    "scale must be f32, one value or one per column ({n}), got {s}"
                ));
            }
        }
        let mut dims: Vec<Dim> = a.shape.0.clone();
        dims[r - 1] = n.clone();
        Ok(TensorType::new(self.out_dtype(), Shape(dims)))
    }

    /// The reference semantics on host tensors (whose types [`IntMatMul::infer`] accepted):
    /// integers summed in i64 and wrapped to i32, the scale applied in f32.
    pub fn reference(self, inputs: &[&Tensor]) -> TensorData {
        let b = inputs[1];
        let (k, n) = (b.shape()[0], b.shape()[1]);
        let ints = |t: &Tensor| -> Vec<i64> { t.to_f64_vec().iter().map(|&v| v as i64).collect() };
        let as_f32 =
            |t: &Tensor| -> Vec<f32> { t.to_f64_vec().iter().map(|&v| v as f32).collect() };
        let (a, a_zero, a_scale): (Vec<i64>, i64, f32) = match self.a {
            AInput::Integer => (ints(inputs[0]), ints(inputs[2])[0], 1.0),
            AInput::Quantize => {
                let (s, z) = (as_f32(inputs[4])[0], ints(inputs[2])[0] as i32);
                let (lo, hi) = range(inputs[2].dtype());
                let q = as_f32(inputs[0])
                    .iter()
                    .map(|&v| i64::from(quantize(v, s, z, lo, hi)))
                    .collect();
                (q, i64::from(z), 1.0)
            }
            AInput::Dynamic => {
                let x = as_f32(inputs[0]);
                let (s, z) = dynamic_params(&x);
                let q = x
                    .iter()
                    .map(|&v| i64::from(quantize(v, s, z, 0, 255)))
                    .collect();
                (q, i64::from(z), s)
            }
        };
        let bv = ints(b);
        let b_zero = ints(inputs[self.b_zero_input()]);
        let scale = self.scale_input().map(|i| inputs[i].to_f64_vec());
        let rows = a.len().checked_div(k).unwrap_or(0);
        let mut sums = Vec::with_capacity(rows * n);
        for i in 0..rows {
            for j in 0..n {
                let zb = b_zero[if b_zero.len() == 1 { 0 } else { j }];
                let s: i64 = (0..k)
                    .map(|l| (a[i * k + l] - a_zero) * (bv[l * n + j] - zb))
                    .sum();
                sums.push(s as i32);
            }
        }
        if self.out_dtype() == DType::I32 {
            return TensorData::I32(sums.into());
        }
        let dynamic = self.a == AInput::Dynamic;
        let multiplier = |j: usize| -> f32 {
            let s = scale
                .as_ref()
                .map_or(1.0, |s| s[if s.len() == 1 { 0 } else { j }] as f32);
            if dynamic {
                a_scale * s
            } else {
                s
            }
        };
        let y: Vec<f32> = sums
            .iter()
            .enumerate()
            .map(|(idx, &v)| v as f32 * multiplier(idx % n.max(1)))
            .collect();
        TensorData::F32(y.into())
    }
}

/// `DynamicQuantizeLinear`'s scale and zero point for `x`: the range widened to hold 0,
/// `scale = range / 255` (`1 / 255` for an empty range), `zero = round_half_even(clamp(-min /
/// scale, 0, 255))`, all in f32 as ONNX Runtime computes them. NaNs are ignored.
pub fn dynamic_params(x: &[f32]) -> (f32, i32) {
    let (mn, mx) = x
        .iter()
        .fold((0f32, 0f32), |(mn, mx), &v| (mn.min(v), mx.max(v)));
    dynamic_params_of(mn, mx)
}

/// [`dynamic_params`] from the range already found (`mn <= 0 <= mx`).
pub fn dynamic_params_of(mn: f32, mx: f32) -> (f32, i32) {
    let span = if mx == mn { 1.0 } else { mx - mn };
    let scale = span / 255.0;
    let zero = (0.0 - mn / scale).clamp(0.0, 255.0).round_ties_even();
    (scale, zero as i32)
}

/// The range of a quantized dtype (u8 or i8).
pub fn range(d: DType) -> (i32, i32) {
    match d {
        DType::I8 => (-128, 127),
        _ => (0, 255),
    }
}

/// `saturate(round_half_even(x / scale) + zero)` into `lo..=hi`, the division in f32 (ONNX
/// `QuantizeLinear`); NaN becomes `lo`. Written without branches so kernels that share it
/// vectorize.
#[inline(always)]
pub fn quantize(x: f32, scale: f32, zero: i32, lo: i32, hi: i32) -> i32 {
    let q = (x / scale).round_ties_even();
    q.max((lo - zero) as f32).min((hi - zero) as f32) as i32 + zero
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantize_rounds_half_to_even_and_saturates() {
        assert_eq!(quantize(2.5, 1.0, 0, 0, 255), 2);
        assert_eq!(quantize(3.5, 1.0, 0, 0, 255), 4);
        assert_eq!(quantize(-3.5, 1.0, 10, 0, 255), 6);
        assert_eq!(quantize(1e9, 1.0, 3, -128, 127), 127);
        assert_eq!(quantize(-1e9, 0.5, 3, 0, 255), 0);
        assert_eq!(quantize(f32::NAN, 0.5, 3, 0, 255), 0);
    }

    #[test]
    fn bad_inputs_are_sentences() {
        let t = |d: DType, s: &[usize]| TensorType::new(d, Shape::of(s));
        let p = IntMatMul::default();
        let (a, b, z) = (
            t(DType::U8, &[3, 4]),
            t(DType::I8, &[4, 5]),
            t(DType::U8, &[]),
        );
        let zb = t(DType::I8, &[5]);
        let ok = p.infer(&[&a, &b, &z, &zb]).unwrap();
        assert_eq!(ok, t(DType::I32, &[3, 5]));
        let f = t(DType::F32, &[3, 4]);
        assert!(p
            .infer(&[&f, &b, &z, &zb])
            .unwrap_err()
            .contains("a must be u8 or i8"));
        let wrong_k = t(DType::I8, &[3, 5]);
        assert!(p.infer(&[&a, &wrong_k, &z, &zb]).is_err());
        assert!(p
            .infer(&[&a, &b, &z])
            .unwrap_err()
            .contains("expects 4 inputs"));
        let q = IntMatMul {
            a: AInput::Quantize,
            scaled: true,
        };
        let s = t(DType::F32, &[]);
        let got = q
            .infer(&[&f, &b, &z, &zb, &s, &t(DType::F32, &[5])])
            .unwrap();
        assert_eq!(got, t(DType::F32, &[3, 5]));
        assert!(q
            .infer(&[&f, &b, &z, &zb, &s, &t(DType::F32, &[4])])
            .is_err());
        let d = IntMatMul {
            a: AInput::Dynamic,
            scaled: false,
        };
        assert_eq!(d.infer(&[&f, &b, &zb]).unwrap(), t(DType::F32, &[3, 5]));
        assert!(d.infer(&[&a, &b, &zb]).unwrap_err().contains("must be f32"));
    }

    #[test]
    fn dynamic_params_follow_onnx_runtime() {
        assert_eq!(dynamic_params(&[0.0, 0.0]), (1.0 / 255.0, 0));
        let (s, z) = dynamic_params(&[-1.0, 3.0]);
        assert_eq!(s, 4.0 / 255.0);
        assert_eq!(z, 64); // 63.75 rounds to 64
        assert_eq!(dynamic_params(&[2.0, f32::NAN, 5.0]), (5.0 / 255.0, 0));
    }
}
