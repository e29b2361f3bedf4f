//! WGSL as a [`Dialect`] of the shared kernel-IR walker ([`rlx_ir::render`]): the compute
//! types, literals, casts and op rules of [`super::scalar`] (which wrap 8-bit integers after
//! every node), `select` for C's ternary, `let`/`var` declarations. Loads and stores depend
//! on how a binding holds its dtype ([`super::Kb`]), so callers hand the walker compute
//! values.

use super::scalar;
use rlx_ir::render::Dialect;
use rlx_ir::{BinaryOp, DType, UnaryOp};

/// WGSL, as naga and the adapters' compilers read it.
#[derive(Debug, Clone, Copy)]
pub struct Wgsl;

impl Dialect for Wgsl {
    fn name(&self) -> &'static str {
        "WGSL kernels"
    }

    fn supports(&self, dtype: DType) -> bool {
        scalar::storable(dtype)
    }

    fn compute_type(&self, dtype: DType) -> &'static str {
        scalar::compute(dtype)
    }

    fn literal(&self, dtype: DType, v: f64) -> String {
        scalar::literal(dtype, v)
    }

    fn cast(&self, from: DType, to: DType, a: &str) -> String {
        scalar::cast(from, to, a)
    }

    fn unary(&self, op: UnaryOp, dtype: DType, a: &str) -> Option<String> {
        scalar::unary(op, dtype, a)
    }

    fn binary(&self, op: BinaryOp, dtype: DType, a: &str, b: &str) -> Option<String> {
        scalar::binary(op, dtype, a, b)
    }

    fn select(&self, cond: &str, a: &str, b: &str) -> String {
        format!("select({b}, {a}, {cond})")
    }

    fn constant(&self, ty: &str, name: &str, value: &str) -> String {
        format!("let {name}: {ty} = {value};")
    }

    fn variable(&self, ty: &str, name: &str, value: &str) -> String {
        format!("var {name}: {ty} = {value};")
    }

    fn divide_in_place(&self, var: &str, divisor: usize) -> String {
        format!("{var} = {var} / {divisor};")
    }
}
