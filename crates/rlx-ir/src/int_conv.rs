//! The integer convolution ([`crate::Op::ConvInteger`]): `(x - x_zero) ⊛ (w - w_zero)` with
//! every product and sum in i32, as ONNX `ConvInteger` defines it, optionally requantized
//! to 8 bits on the way out, as ONNX `QLinearConv` does. Layouts and window attributes are
//! [`crate::Op::Conv2d`]'s (NCHW input, OIHW weight, groups, strides, pads, dilations), and
//! so is the shape rule.
//!
//! Inputs, in order:
//! - `x`: `[n, c, h, w]`, u8 or i8;
//! - `w`: `[m, c / groups, kh, kw]`, u8 or i8 (usually a weight, which backends may pack);
//! - `x_zero`: one value in `x`'s dtype; padding reads as this value, so it adds nothing;
//! - `w_zero`: one value or one per output channel (`[m]`), in `w`'s dtype;
//! - with `requantize`: `multiplier`, f32, one value or `[m]` (ONNX's
//!   `x_scale * w_scale / y_scale`), and `y_zero`, one u8 or i8 value, the result's dtype;
//!   then optionally `bias`, i32 `[m]`, added to the sums before they are scaled.
//!
//! The result is `[n, m, oh, ow]`: i32, or `y_zero`'s dtype when requantized, each value
//! `saturate(round_half_even(f32(sum + bias) * multiplier) + y_zero)` with the product in
//! f32, as ONNX Runtime's `QLinearConv` computes it. Sums wrap in i32 as the ONNX
//! reference's int32 arithmetic does.

use crate::int_matmul::range;
use crate::{Conv2dParams, DType, Op, Tensor, TensorData, TensorType};

/// The attributes of [`crate::Op::ConvInteger`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct IntConv {
    /// the window: strides, pads, dilations, groups
    pub conv: Conv2dParams,
    /// the sums requantized to `y_zero`'s dtype (ONNX `QLinearConv`) instead of kept as i32
    pub requantize: bool,
}

/// Input positions of the requantized form.
pub const MULTIPLIER: usize = 4;
/// The position of `y_zero`.
pub const Y_ZERO: usize = 5;
/// The position of the optional `bias`.
pub const BIAS: usize = 6;

impl IntConv {
    /// The result dtype, given `y_zero`'s when requantized.
    fn out_dtype(self, inputs: &[&TensorType]) -> DType {
        if self.requantize {
            inputs[Y_ZERO].dtype
        } else {
            DType::I32
        }
    }

    /// The shape and dtype rule.
    ///
    /// # Errors
    /// A sentence naming the input whose dtype or shape breaks the rule.
    pub fn infer(self, inputs: &[&TensorType]) -> Result<TensorType, String> {
        let arity_ok = if self.requantize {
            matches!(inputs.len(), 6 | 7)
        } else {
            inputs.len() == 4
        };
        if !arity_ok {
            return Err(if self.requantize {
                format!(
                    "expects 6 or 7 inputs (x, w, x_zero, w_zero, multiplier, y_zero, bias?), got {}",
                    inputs.len()
                )
            } else {
                format!(
                    "expects 4 inputs (x, w, x_zero, w_zero), got {}",
                    inputs.len()
                )
            });
        }
        let (x, w, x_zero, w_zero) = (inputs[0], inputs[1], inputs[2], inputs[3]);
        let byte = |d: DType| matches!(d, DType::U8 | DType::I8);
        if !byte(x.dtype) || !byte(w.dtype) {
            return Err(format!(
                "x and w must be u8 or i8, got {} and {}",
                x.dtype, w.dtype
            ));
        }
        if x_zero.dtype != x.dtype {
            return Err(format!(
                "x_zero must be {} as x is, got {}",
                x.dtype, x_zero.dtype
            ));
        }
        if w_zero.dtype != w.dtype {
            return Err(format!(
                "w_zero must be {} as w is, got {}",
                w.dtype, w_zero.dtype
            ));
        }
        // the window's shape rule is the float convolution's
        let float = |t: &TensorType| TensorType::new(DType::F32, t.shape.clone());
        let shaped = crate::infer(&Op::Conv2d(self.conv), &[&float(x), &float(w)])?;
        let m = &shaped.shape.0[1];
        let one = |t: &TensorType| t.shape.numel() == Some(1);
        let per_channel = |t: &TensorType| one(t) || (t.shape.rank() == 1 && &t.shape.0[0] == m);
        if !one(x_zero) {
            return Err(format!("x_zero must hold one value, got {}", x_zero.shape));
        }
        if !per_channel(w_zero) {
            return Err(format!(
                "w_zero must hold one value or one per output channel ({m}), got {}",
                w_zero.shape
            ));
        }
        if self.requantize {
            let (mul, y_zero) = (inputs[MULTIPLIER], inputs[Y_ZERO]);
            if mul.dtype != DType::F32 || !per_channel(mul) {
                return Err(format!(
                    "multiplier must be f32, one value or one per output channel ({m}), got {mul}"
                ));
            }
            if !byte(y_zero.dtype) || !one(y_zero) {
                return Err(format!("y_zero must be one u8 or i8 value, got {y_zero}"));
            }
            if let Some(b) = inputs.get(BIAS) {
                if b.dtype != DType::I32 || b.shape.rank() != 1 || &b.shape.0[0] != m {
                    return Err(format!("bias must be i32[{m}], got {b}"));
                }
            }
        }
        Ok(TensorType::new(self.out_dtype(inputs), shaped.shape))
    }

    /// The reference semantics on host tensors (whose types [`IntConv::infer`] accepted) with
    /// the result shape `out` (`[n, m, oh, ow]`): integers summed in i64 and wrapped to i32, then requantized.
    pub fn reference(self, inputs: &[&Tensor], out: &[usize]) -> TensorData {
        let ints = |t: &Tensor| -> Vec<i64> { t.to_f64_vec().iter().map(|&v| v as i64).collect() };
        let (x, w) = (ints(inputs[0]), ints(inputs[1]));
        let (xs, ws) = (inputs[0].shape(), inputs[1].shape());
        let (n, c, h, wd) = (xs[0], xs[1], xs[2], xs[3]);
        let (m, cg, kh, kw) = (ws[0], ws[1], ws[2], ws[3]);
        let (oh, ow) = (out[2], out[3]);
        let p = self.conv;
        let xz = ints(inputs[2])[0];
        let wz = ints(inputs[3]);
        let mg = m / p.groups;
        let mut sums = Vec::with_capacity(n * m * oh * ow);
        for b in 0..n {
            for o in 0..m {
                let g = o / mg;
                let zw = wz[if wz.len() == 1 { 0 } else { o }];
                for y in 0..oh {
                    for xo in 0..ow {
                        let mut s = 0i64;
                        for ci in 0..cg {
                            let ch = g * cg + ci;
                            for i in 0..kh {
                                let iy =
                                    (y * p.stride[0] + i * p.dilation[0]) as i64 - p.pads[0] as i64;
                                if iy < 0 || iy >= h as i64 {
                                    continue;
                                }
                                for j in 0..kw {
                                    let ix = (xo * p.stride[1] + j * p.dilation[1]) as i64
                                        - p.pads[1] as i64;
                                    if ix < 0 || ix >= wd as i64 {
                                        continue;
                                    }
                                    let xv = x[((b * c + ch) * h + iy as usize) * wd + ix as usize];
                                    let wv = w[((o * cg + ci) * kh + i) * kw + j];
                                    s += (xv - xz) * (wv - zw);
                                }
                            }
                        }
                        sums.push(s as i32);
                    }
                }
            }
        }
        if !self.requantize {
            return TensorData::I32(sums.into());
        }
        let mul: Vec<f32> = inputs[MULTIPLIER]
            .to_f64_vec()
            .iter()
            .map(|&v| v as f32)
            .collect();
        let to = inputs[Y_ZERO].dtype();
        let yz = ints(inputs[Y_ZERO])[0] as i32;
        let bias = inputs.get(BIAS).map(|t| ints(t));
        let (lo, hi) = range(to);
        let plane = oh * ow;
        let q: Vec<i32> = sums
            .iter()
            .enumerate()
            .map(|(idx, &s)| {
                let o = (idx / plane.max(1)) % m;
                let s = s.wrapping_add(bias.as_ref().map_or(0, |b| b[o] as i32));
                requantize(s, mul[if mul.len() == 1 { 0 } else { o }], yz, lo, hi)
            })
            .collect();
        match to {
            DType::I8 => TensorData::I8(q.iter().map(|&v| v as i8).collect::<Vec<_>>().into()),
            _ => TensorData::U8(q.iter().map(|&v| v as u8).collect::<Vec<_>>().into()),
        }
    }
}

/// `saturate(round_half_even(f32(sum) * multiplier) + zero)` into `lo..=hi`, the product in
/// f32 as ONNX Runtime requantizes; NaN becomes `lo`. Written without branches so kernels
/// that share it vectorize.
#[inline(always)]
pub fn requantize(sum: i32, multiplier: f32, zero: i32, lo: i32, hi: i32) -> i32 {
    let q = (sum as f32 * multiplier).round_ties_even();
    q.max((lo - zero) as f32).min((hi - zero) as f32) as i32 + zero
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Shape;

    fn t(d: DType, s: &[usize]) -> TensorType {
        TensorType::new(d, Shape::of(s))
    }

    #[test]
    fn requantize_rounds_half_to_even_and_saturates() {
        assert_eq!(requantize(5, 0.5, 0, 0, 255), 2);
        assert_eq!(requantize(7, 0.5, 0, 0, 255), 4);
        assert_eq!(requantize(-7, 0.5, 10, 0, 255), 6);
        assert_eq!(requantize(1 << 20, 1.0, 3, -128, 127), 127);
        assert_eq!(requantize(-1000, 1.0, 3, 0, 255), 0);
        assert_eq!(requantize(3, f32::NAN, 3, 0, 255), 0);
    }

    #[test]
    fn types_follow_the_float_convolution() {
        let p = IntConv {
            conv: Conv2dParams {
                stride: [2, 1],
                pads: [1, 1, 1, 1],
                groups: 2,
                ..Conv2dParams::default()
            },
            requantize: false,
        };
        let (x, w) = (t(DType::U8, &[1, 4, 5, 5]), t(DType::I8, &[6, 2, 3, 3]));
        let (xz, wz) = (t(DType::U8, &[]), t(DType::I8, &[6]));
        assert_eq!(
            p.infer(&[&x, &w, &xz, &wz]).unwrap(),
            t(DType::I32, &[1, 6, 3, 5])
        );
        let q = IntConv {
            requantize: true,
            ..p
        };
        let (mul, yz, b) = (t(DType::F32, &[6]), t(DType::I8, &[1]), t(DType::I32, &[6]));
        assert_eq!(
            q.infer(&[&x, &w, &xz, &wz, &mul, &yz, &b]).unwrap(),
            t(DType::I8, &[1, 6, 3, 5])
        );
        assert_eq!(
            q.infer(&[&x, &w, &xz, &wz, &mul, &yz]).unwrap(),
            t(DType::I8, &[1, 6, 3, 5])
        );
    }

    #[test]
    fn bad_inputs_are_sentences() {
        let p = IntConv::default();
        let (x, w) = (t(DType::U8, &[1, 2, 4, 4]), t(DType::U8, &[3, 2, 2, 2]));
        let (xz, wz) = (t(DType::U8, &[]), t(DType::U8, &[]));
        let f = t(DType::F32, &[1, 2, 4, 4]);
        let err = |ins: &[&TensorType]| p.infer(ins).unwrap_err();
        assert!(err(&[&f, &w, &xz, &wz]).contains("must be u8 or i8"));
        assert!(err(&[&x, &w, &t(DType::I8, &[]), &wz]).contains("x_zero must be u8"));
        assert!(err(&[&x, &w, &xz, &t(DType::U8, &[2])]).contains("w_zero must hold"));
        assert!(err(&[&x, &w, &xz]).contains("expects 4 inputs"));
        assert!(err(&[&x, &t(DType::U8, &[3, 3, 2, 2]), &xz, &wz]).contains("channels"));
        let q = IntConv {
            requantize: true,
            ..p
        };
        let mul = t(DType::F32, &[]);
        let bad = q
            .infer(&[&x, &w, &xz, &wz, &mul, &t(DType::I32, &[])])
            .unwrap_err();
        assert!(bad.contains("y_zero must be one u8 or i8"), "{bad}");
        let bad = q
            .infer(&[&x, &w, &xz, &wz, &mul, &xz, &t(DType::I32, &[2])])
            .unwrap_err();
        assert!(bad.contains("bias must be i32[3]"), "{bad}");
    }
}
