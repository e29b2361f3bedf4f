//! The integer matrix product ([`crate::Op::MatMulInteger`]): `(a - a_zero) · (b - b_zero)`
//! with every product and sum in i32, as ONNX `MatMulInteger` defines it, optionally fed by
//! an f32 activation quantized on the way in and optionally scaled to f32 on the way out.
//! One op covers what quantized exports write around their products: `MatMulInteger`,
//! `DynamicQuantizeLinear → MatMulInteger → Cast → Mul(scale)`, ONNX Runtime's
//! `MatMulIntegerToFloat` and `DynamicQuantizeMatMul`.
//!
//! Inputs, in order:
//! - `a`: `[.., k]`, u8 or i8; f32 when `quantize_a`;
//! - `b`: `[k, n]`, u8 or i8 (usually a weight, which backends may pack once);
//! - `a_zero`: one value; u8 or i8 (the dtype `a` is quantized to when `quantize_a`);
//! - `b_zero`: one value or one per column (`[n]`), in `b`'s dtype;
//! - `a_scale` (only when `quantize_a`): one f32; `a` becomes
//!   `saturate(round_half_even(a / a_scale) + a_zero)`, the division in f32, as ONNX
//!   `QuantizeLinear` and `DynamicQuantizeLinear` compute it;
//! - `scale` (only when `scaled`): one f32 or one per column; the result is
//!   `f32(sum) * scale`, rounded once, as ONNX Runtime's `MatMulIntegerToFloat` does.
//!
//! The result is `[.., n]`: i32, or f32 when `scaled`. Sums wrap in i32 as the ONNX reference's
//! int32 arithmetic does (8-bit products need `k` past 2^16 to get there).

use crate::{DType, Dim, Shape, Tensor, TensorData, TensorType};

/// The attributes of [`crate::Op::MatMulInteger`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct IntMatMul {
    /// `a` is f32, quantized with the `a_scale` input and `a_zero` first
    pub quantize_a: bool,
    /// the i32 sums times the `scale` input, as f32
    pub scaled: bool,
}

impl IntMatMul {
    /// How many inputs the op takes: a, b, a_zero, b_zero, then a_scale and scale when used.
    pub fn arity(self) -> usize {
        4 + usize::from(self.quantize_a) + usize::from(self.scaled)
    }

    /// The position of the `a_scale` input, when `a` is quantized by the op.
    pub fn a_scale_input(self) -> Option<usize> {
        self.quantize_a.then_some(4)
    }

    /// The position of the `scale` input, when the result is scaled.
    pub fn scale_input(self) -> Option<usize> {
        self.scaled.then_some(4 + usize::from(self.quantize_a))
    }

    /// The result dtype.
    pub fn out_dtype(self) -> DType {
        if self.scaled {
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
                "expects {} inputs (a, b, a_zero, b_zero{}{}), got {}",
                self.arity(),
                if self.quantize_a { ", a_scale" } else { "" },
                if self.scaled { ", scale" } else { "" },
                inputs.len()
            ));
        }
        let (a, b, a_zero, b_zero) = (inputs[0], inputs[1], inputs[2], inputs[3]);
        let byte = |d: DType| matches!(d, DType::U8 | DType::I8);
        if self.quantize_a {
            if a.dtype != DType::F32 {
                return Err(format!("a must be f32 to be quantized, got {}", a.dtype));
            }
            if !byte(a_zero.dtype) {
                return Err(format!("a_zero must be u8 or i8, got {}", a_zero.dtype));
            }
        } else {
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
        if !byte(b.dtype) {
            return Err(format!("b must be u8 or i8, got {}", b.dtype));
        }
        if b_zero.dtype != b.dtype {
            return Err(format!(
                "b_zero must be {} as b is, got {}",
                b.dtype, b_zero.dtype
            ));
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
        if !one(a_zero) {
            return Err(format!("a_zero must hold one value, got {}", a_zero.shape));
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
        let a_zero = ints(inputs[2])[0];
        let a: Vec<i64> = match self.a_scale_input() {
            Some(i) => {
                let s = inputs[i].to_f64_vec()[0] as f32;
                let (lo, hi) = range(inputs[2].dtype());
                let x = inputs[0].to_f64_vec();
                x.iter()
                    .map(|&v| quantize(v as f32, s, a_zero as i32, lo, hi) as i64)
                    .collect()
            }
            None => ints(inputs[0]),
        };
        let bv = ints(b);
        let b_zero = ints(inputs[3]);
        let scale = self.scale_input().map(|i| inputs[i].to_f64_vec());
        let rows = if k == 0 { 0 } else { a.len() / k };
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
        match scale {
            Some(s) => TensorData::F32(
                sums.iter()
                    .enumerate()
                    .map(|(idx, &v)| v as f32 * s[if s.len() == 1 { 0 } else { idx % n }] as f32)
                    .collect::<Vec<f32>>()
                    .into(),
            ),
            None => TensorData::I32(sums.into()),
        }
    }
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
            quantize_a: true,
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
    }
}
