//! Composite unary ops: activations defined once, as expansions into primitive ops.
//!
//! A composite is a [`UnaryOp::Composite`] node like any other, so importers, models and
//! passes name it as one op. Its meaning is its expansion here: legalization in `rlx-opt`
//! writes it into the graph for every backend without a native form, and the reference
//! interpreter evaluates the same expansion in f64 (GELU keeps its closed forms, which are
//! more accurate). A backend may claim a native form (CUDA's erf GELU, the CPU's vectorized
//! GELU) by giving the composite a rule in its unary table; every other composite reaches
//! its emitters already expanded, so adding one is a row in this file and its test.

use crate::op::{BinaryOp, UnaryOp};
use crate::scalar;
use std::f64::consts::{FRAC_1_SQRT_2, PI};

/// Unary ops defined by an expansion into primitives; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Composite {
    /// exact GELU: `x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))`
    Gelu,
    /// GELU, tanh approximation
    GeluTanh,
    /// `x * sigmoid(x)`
    Silu,
    /// `x / (1 + |x|)`
    Softsign,
    /// `log(1 + e^x)`
    Softplus,
    /// `x * tanh(softplus(x))`
    Mish,
    /// `x * hard_sigmoid(x)`
    HardSwish,
    /// `clamp(x / 6 + 1 / 2, 0, 1)`, PyTorch's `hardsigmoid` (ONNX `HardSigmoid` with alpha 1/6)
    HardSigmoid,
}

/// What an expansion is written against: a graph builder in legalization, plain f64
/// arithmetic for the reference.
pub trait Expand {
    /// A value: a node id, or a number.
    type Value: Copy;
    /// Why a piece could not be built.
    type Error;
    /// `op(x)`.
    fn unary(&mut self, op: UnaryOp, x: Self::Value) -> Result<Self::Value, Self::Error>;
    /// `op(x, y)`.
    fn binary(
        &mut self,
        op: BinaryOp,
        x: Self::Value,
        y: Self::Value,
    ) -> Result<Self::Value, Self::Error>;
    /// `op(x, v)` with `v` a scalar constant of `x`'s dtype.
    fn binary_scalar(
        &mut self,
        op: BinaryOp,
        x: Self::Value,
        v: f64,
    ) -> Result<Self::Value, Self::Error>;
}

impl Composite {
    /// Every composite, in enum order.
    pub const ALL: [Composite; 8] = [
        Composite::Gelu,
        Composite::GeluTanh,
        Composite::Silu,
        Composite::Softsign,
        Composite::Softplus,
        Composite::Mish,
        Composite::HardSwish,
        Composite::HardSigmoid,
    ];

    /// The op's name in dumps, reports and errors.
    pub fn name(self) -> &'static str {
        match self {
            Composite::Gelu => "gelu",
            Composite::GeluTanh => "gelu_tanh",
            Composite::Silu => "silu",
            Composite::Softsign => "softsign",
            Composite::Softplus => "softplus",
            Composite::Mish => "mish",
            Composite::HardSwish => "hard_swish",
            Composite::HardSigmoid => "hard_sigmoid",
        }
    }

    /// The expansion of `self(x)` into primitive unary and binary ops.
    ///
    /// # Errors
    /// Whatever `b` returns for a piece it cannot build.
    pub fn expand<B: Expand>(self, b: &mut B, x: B::Value) -> Result<B::Value, B::Error> {
        use BinaryOp::{Add, Div, Max, Min, Mul};
        match self {
            Composite::Gelu => {
                let t = b.binary_scalar(Mul, x, FRAC_1_SQRT_2)?;
                let t = b.unary(UnaryOp::Erf, t)?;
                let t = b.binary_scalar(Add, t, 1.0)?;
                let t = b.binary(Mul, x, t)?;
                b.binary_scalar(Mul, t, 0.5)
            }
            // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
            Composite::GeluTanh => {
                let x2 = b.binary(Mul, x, x)?;
                let x3 = b.binary(Mul, x2, x)?;
                let t = b.binary_scalar(Mul, x3, 0.044715)?;
                let t = b.binary(Add, x, t)?;
                let t = b.binary_scalar(Mul, t, (2.0 / PI).sqrt())?;
                let t = b.unary(UnaryOp::Tanh, t)?;
                let t = b.binary_scalar(Add, t, 1.0)?;
                let t = b.binary(Mul, x, t)?;
                b.binary_scalar(Mul, t, 0.5)
            }
            Composite::Silu => {
                let s = b.unary(UnaryOp::Sigmoid, x)?;
                b.binary(Mul, x, s)
            }
            Composite::Softsign => {
                let a = b.unary(UnaryOp::Abs, x)?;
                let a1 = b.binary_scalar(Add, a, 1.0)?;
                b.binary(Div, x, a1)
            }
            Composite::Softplus => softplus(b, x),
            Composite::Mish => {
                let sp = softplus(b, x)?;
                let t = b.unary(UnaryOp::Tanh, sp)?;
                b.binary(Mul, x, t)
            }
            Composite::HardSwish => {
                let h = Composite::HardSigmoid.expand(b, x)?;
                b.binary(Mul, x, h)
            }
            Composite::HardSigmoid => {
                let t = b.binary_scalar(Mul, x, 1.0 / 6.0)?;
                let t = b.binary_scalar(Add, t, 0.5)?;
                let t = b.binary_scalar(Max, t, 0.0)?;
                b.binary_scalar(Min, t, 1.0)
            }
        }
    }

    /// Reference semantics in f64: the expansion evaluated exactly as written, except the
    /// GELUs, whose closed forms in [`scalar`] are the reference.
    pub fn eval(self, x: f64) -> f64 {
        match self {
            Composite::Gelu => scalar::gelu(x),
            Composite::GeluTanh => scalar::gelu_tanh(x),
            _ => match self.expand(&mut Reference, x) {
                Ok(v) => v,
                Err(never) => match never {},
            },
        }
    }
}

/// `log(e^x + 1)`, ONNX's `Softplus` as written.
fn softplus<B: Expand>(b: &mut B, x: B::Value) -> Result<B::Value, B::Error> {
    let e = b.unary(UnaryOp::Exp, x)?;
    let e1 = b.binary_scalar(BinaryOp::Add, e, 1.0)?;
    b.unary(UnaryOp::Log, e1)
}

/// Evaluates an expansion on f64 numbers with the ops' reference semantics.
pub struct Reference;

impl Expand for Reference {
    type Value = f64;
    type Error = std::convert::Infallible;

    fn unary(&mut self, op: UnaryOp, x: f64) -> Result<f64, Self::Error> {
        Ok(op.eval(x))
    }

    fn binary(&mut self, op: BinaryOp, x: f64, y: f64) -> Result<f64, Self::Error> {
        Ok(op.eval(x, y, crate::DType::F64))
    }

    fn binary_scalar(&mut self, op: BinaryOp, x: f64, v: f64) -> Result<f64, Self::Error> {
        self.binary(op, x, v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SplitMix64;

    /// Random inputs over the range activations see, plus the edges.
    fn inputs() -> Vec<f64> {
        let mut rng = SplitMix64(29);
        let mut xs: Vec<f64> = (0..2000).map(|_| rng.next_f64() * 24.0 - 12.0).collect();
        xs.extend([0.0, -0.0, 1.0, -1.0, 3.0, -3.0, 6.0, 40.0, -40.0]);
        xs
    }

    #[test]
    fn every_expansion_matches_its_reference() {
        for c in Composite::ALL {
            for x in inputs() {
                let (want, got) = (c.eval(x), c.expand(&mut Reference, x).unwrap());
                // absolute: `1 + erf(x)` cancels for negative x
                let tol = 1e-12 * (1.0 + x.abs());
                assert!(
                    (want - got).abs() <= tol,
                    "{} at {x}: {got} vs {want}",
                    c.name()
                );
            }
        }
    }

    #[test]
    fn closed_forms() {
        let sp = |x: f64| (1.0 + x.exp()).ln();
        for x in inputs() {
            let near = |c: Composite, want: f64| {
                let got = c.eval(x);
                assert!(
                    (got - want).abs() <= 1e-12 * (1.0 + want.abs()),
                    "{c:?}({x})"
                );
            };
            near(Composite::Silu, x / (1.0 + (-x).exp()));
            near(Composite::Softsign, x / (1.0 + x.abs()));
            near(Composite::Softplus, sp(x));
            near(Composite::Mish, x * sp(x).tanh());
            near(Composite::HardSigmoid, (x / 6.0 + 0.5).clamp(0.0, 1.0));
            near(Composite::HardSwish, x * (x + 3.0).clamp(0.0, 6.0) / 6.0);
        }
    }

    #[test]
    fn every_composite_is_listed_once_among_the_unary_ops() {
        for c in Composite::ALL {
            let n = UnaryOp::ALL
                .iter()
                .filter(|&&u| u == UnaryOp::Composite(c))
                .count();
            assert_eq!(n, 1, "{c:?}");
        }
        let n_composites = UnaryOp::ALL
            .iter()
            .filter(|u| matches!(u, UnaryOp::Composite(_)));
        assert_eq!(n_composites.count(), Composite::ALL.len());
    }

    #[test]
    fn names_are_unique() {
        let mut names: Vec<_> = Composite::ALL.iter().map(|c| c.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Composite::ALL.len());
    }
}
