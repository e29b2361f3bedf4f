//! `NegativeLogLikelihoodLoss` and `SoftmaxCrossEntropyLoss`: the target class is picked
//! with a one-hot comparison against the class index, weighted, and reduced.

use crate::ctx::{invalid, unsupported, Ctx, Val, R};
use crate::node::NodeIn;
use rlx_ir::{BinaryOp, DType, Op, ReduceOp};

/// Negative log likelihood of `logp` [N, C, d...] at `target` [N, d...].
fn nll(
    ctx: &mut Ctx,
    logp: &Val,
    target: &Val,
    weight: Option<Val>,
    ignore: Option<i64>,
    reduction: &str,
) -> R<Val> {
    let ls = ctx.shape(logp)?;
    let r = ls.len();
    if r < 2 {
        invalid!("input must be at least 2-D (N, C)");
    }
    let c = ls[1];
    let t = ctx.cast(target, DType::I64)?;
    let t1 = ctx.unsqueeze(&t, &[1])?; // [N, 1, d...]
    let classes = ctx.iota(c, DType::I64);
    let mut cdims = vec![1; r];
    cdims[1] = c;
    let classes = ctx.reshape(&classes, &cdims)?;
    let hot = ctx.binary(BinaryOp::Eq, &t1, &classes)?; // [N, C, d...]
    let zero = ctx.scalar_like(logp, 0.0);
    let picked = ctx.where_(&hot, logp, &zero)?;
    let picked = ctx.reduce(ReduceOp::Sum, &picked, &[1], false)?; // [N, d...]
    let mut w = match weight {
        Some(w) => {
            let w = ctx.reshape(&w, &cdims)?;
            let sel = ctx.where_(&hot, &w, &zero)?;
            ctx.reduce(ReduceOp::Sum, &sel, &[1], false)?
        }
        None => {
            let one = ctx.scalar_like(logp, 1.0);
            let shape = ctx.dims(&picked);
            let one = ctx.reshape(&one, &vec![1; shape.len()])?;
            ctx.expand(&one, shape)?
        }
    };
    if let Some(ig) = ignore {
        let igv = ctx.scalar(DType::I64, ig as f64);
        let keep = ctx.binary(BinaryOp::Ne, &t, &igv)?;
        w = ctx.where_(&keep, &w, &zero)?;
    }
    let wl = ctx.mul(&picked, &w)?;
    let loss = ctx.op(Op::Unary(rlx_ir::UnaryOp::Neg), &[&wl])?;
    let all: Vec<usize> = (0..r - 1).collect();
    Ok(match reduction {
        "none" => loss,
        "sum" => ctx.reduce(ReduceOp::Sum, &loss, &all, false)?,
        "mean" => {
            let s = ctx.reduce(ReduceOp::Sum, &loss, &all, false)?;
            let ws = ctx.reduce(ReduceOp::Sum, &w, &all, false)?;
            ctx.div(&s, &ws)?
        }
        other => invalid!("reduction `{other}`"),
    })
}

/// `NegativeLogLikelihoodLoss`.
pub fn nll_loss(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let (x, t) = (n.input(0)?, n.input(1)?);
    if !ctx.dtype(&x).is_float() {
        unsupported!("dtype {}", ctx.dtype(&x));
    }
    let red = n.string("reduction", "mean")?;
    let ignore = n.int_opt("ignore_index")?;
    Ok(vec![nll(ctx, &x, &t, n.opt(2), ignore, &red)?])
}

/// `SoftmaxCrossEntropyLoss`: log-softmax over classes, then the NLL; the log
/// probabilities are the optional second output.
pub fn softmax_ce(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let (x, t) = (n.input(0)?, n.input(1)?);
    if !ctx.dtype(&x).is_float() {
        unsupported!("dtype {}", ctx.dtype(&x));
    }
    let red = n.string("reduction", "mean")?;
    let ignore = n.int_opt("ignore_index")?;
    let logp = ctx.op(Op::LogSoftmax { axis: 1 }, &[&x])?;
    let loss = nll(ctx, &logp, &t, n.opt(2), ignore, &red)?;
    Ok(vec![loss, logp])
}
