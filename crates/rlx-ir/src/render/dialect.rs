//! The spellings a target language gives the shared walker.

use crate::{BinaryOp, DType, UnaryOp};

/// What differs between the languages kernels are generated in. Every method returns text
/// of that language; the walker ([`super::emit_nodes`], [`super::coords`]) puts it
/// together. Statements are returned without their line break.
///
/// A new GPU backend implements this (one rule per op in `unary` and `binary`, whose
/// matches stay exhaustive so a new op asks for its rule) and gets the expression walker
/// and the index arithmetic for free.
pub trait Dialect {
    /// What the generated code is, for error messages (`WGSL kernels`).
    fn name(&self) -> &'static str;

    /// True when kernels may compute on `dtype`; the walker refuses nodes of other dtypes,
    /// naming them. Every dtype by default (a backend whose capability list already keeps
    /// the others away need not check again).
    fn supports(&self, dtype: DType) -> bool {
        let _ = dtype;
        true
    }

    /// The type arithmetic on `dtype` runs in (`float`, `f32`).
    fn compute_type(&self, dtype: DType) -> &'static str;

    /// The constant `v` (after `dtype`'s rounding rule) as a literal of its compute type.
    fn literal(&self, dtype: DType, v: f64) -> String;

    /// An element as stored in memory (`in0[b0]`) turned into its compute value; the
    /// text unchanged by default (storage and compute types agree).
    fn load(&self, dtype: DType, stored: &str) -> String {
        let _ = dtype;
        stored.to_string()
    }

    /// A compute value of `from` converted to the compute value of `to` with the reference
    /// rounding rule.
    fn cast(&self, from: DType, to: DType, a: &str) -> String;

    /// The expression for `op(a)` on an operand of `dtype`, or None when the op does not
    /// accept `dtype` here.
    fn unary(&self, op: UnaryOp, dtype: DType, a: &str) -> Option<String>;

    /// The expression for `a op b` on operands of `dtype` (bool for comparisons), or None
    /// when the op does not accept `dtype` here.
    fn binary(&self, op: BinaryOp, dtype: DType, a: &str, b: &str) -> Option<String>;

    /// `cond ? a : b`.
    fn select(&self, cond: &str, a: &str, b: &str) -> String;

    /// Declares the immutable `name` of type `ty` holding `value` (`const int x = v;`).
    fn constant(&self, ty: &str, name: &str, value: &str) -> String;

    /// Declares the mutable `name` of type `ty` holding `value` (`int x = v;`).
    fn variable(&self, ty: &str, name: &str, value: &str) -> String;

    /// Divides the mutable integer `var` by `divisor` in place (`x /= 3;`).
    fn divide_in_place(&self, var: &str, divisor: usize) -> String;
}
