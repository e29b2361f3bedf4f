//! The expression walker: a loop kernel's body nodes as declarations, one per node.

use super::Dialect;
use crate::kernel::{Expr, LoopKernel};

/// How the caller hands the walker the value of a loaded input.
#[derive(Debug, Clone, PartialEq)]
pub enum Operand {
    /// the element as it lies in memory (`in0[b0]`), converted by [`Dialect::load`]
    Stored(String),
    /// an expression that already is the compute value (a register, a library result)
    Value(String),
}

/// Declarations `{prefix}{i} = ...` of every body node marked in `which`, in body order
/// (operands always come first), each of its dtype's compute type. `elem(k)` gives input
/// `k` at the current point; `reduced` names the finished reduction, for an epilogue.
///
/// # Errors
/// A node whose dtype the dialect does not support, whose op does not accept its operands'
/// dtype, or that reads a reduction outside an epilogue, naming the node (`e3: ...`).
pub fn emit_nodes(
    d: &dyn Dialect,
    k: &LoopKernel,
    which: &[bool],
    prefix: &str,
    elem: &mut dyn FnMut(usize) -> Operand,
    reduced: Option<&str>,
) -> Result<String, String> {
    let mut s = String::new();
    let name = |i: usize| format!("{prefix}{i}");
    for (i, n) in k.body.iter().enumerate() {
        if !which[i] {
            continue;
        }
        if !d.supports(n.dtype) {
            return Err(format!(
                "e{i}: {} is not supported by {}",
                n.dtype,
                d.name()
            ));
        }
        let dt = |a: usize| k.body[a].dtype;
        let refused = |op: &str, a: usize| format!("e{i}: {op} does not accept {}", dt(a));
        let rhs = match &n.expr {
            Expr::Load(inp) => match elem(*inp) {
                Operand::Stored(text) => d.load(n.dtype, &text),
                Operand::Value(text) => text,
            },
            Expr::Const(c) => d.literal(n.dtype, *c),
            Expr::Unary(op, a) => d
                .unary(*op, dt(*a), &name(*a))
                .ok_or_else(|| refused(op.name(), *a))?,
            Expr::Binary(op, a, b) => d
                .binary(*op, dt(*a), &name(*a), &name(*b))
                .ok_or_else(|| refused(op.name(), *a))?,
            Expr::Where(c, a, b) => d.select(&name(*c), &name(*a), &name(*b)),
            Expr::Cast(a) => d.cast(dt(*a), n.dtype, &name(*a)),
            Expr::Reduced => reduced
                .ok_or_else(|| format!("e{i}: reads a reduction outside an epilogue"))?
                .to_string(),
        };
        s += &d.constant(d.compute_type(n.dtype), &name(i), &rhs);
        s.push('\n');
    }
    Ok(s)
}
