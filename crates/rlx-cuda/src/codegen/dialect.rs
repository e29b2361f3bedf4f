//! CUDA C as a [`Dialect`] of the shared kernel-IR walker ([`rlx_ir::render`]): the type
//! names, literals and conversions of [`super::dtype`], the op rules of [`super::unary`] and
//! [`super::binary`], C's ternary and declarations.

use super::{binary, dtype, unary};
use rlx_ir::render::Dialect;
use rlx_ir::{BinaryOp, DType, UnaryOp};

/// CUDA C, as NVRTC compiles it.
#[derive(Debug, Clone, Copy)]
pub struct CudaC;

impl Dialect for CudaC {
    fn name(&self) -> &'static str {
        "CUDA kernels"
    }

    fn compute_type(&self, dtype: DType) -> &'static str {
        dtype::compute(dtype)
    }

    fn literal(&self, dtype: DType, v: f64) -> String {
        dtype::literal(dtype, v)
    }

    fn load(&self, dtype: DType, stored: &str) -> String {
        dtype::load(dtype, stored)
    }

    fn cast(&self, from: DType, to: DType, a: &str) -> String {
        dtype::cast(from, to, a)
    }

    fn unary(&self, op: UnaryOp, dtype: DType, a: &str) -> Option<String> {
        unary::unary(op, dtype, a)
    }

    fn binary(&self, op: BinaryOp, dtype: DType, a: &str, b: &str) -> Option<String> {
        binary::binary(op, dtype, a, b)
    }

    fn select(&self, cond: &str, a: &str, b: &str) -> String {
        format!("({cond} ? {a} : {b})")
    }

    fn constant(&self, ty: &str, name: &str, value: &str) -> String {
        format!("const {ty} {name} = {value};")
    }

    fn variable(&self, ty: &str, name: &str, value: &str) -> String {
        format!("{ty} {name} = {value};")
    }

    fn divide_in_place(&self, var: &str, divisor: usize) -> String {
        format!("{var} /= {divisor};")
    }
}
