//! `SkipLayerNormalization` / `SkipSimplifiedLayerNormalization` (layer or RMS norm of
//! `input + skip + bias`, with the optional mean, 1/std and sum outputs) and
//! `EmbedLayerNormalization` (word + position + segment embeddings, layer norm, and the
//! mask's per-row token count as `mask_index`).

use super::activation::float_input;
use crate::ctx::{invalid, unsupported, Ctx, Val, R};
use crate::node::NodeIn;
use rlx_ir::{BinaryOp, DType, Op, ReduceOp, UnaryOp};

/// ONNX Runtime's default epsilon for its fused layer norms.
const DEFAULT_EPS: f32 = 1e-12;

/// Layer norm (or RMS norm when `simplified`) of `sum` over its last dim, scaled by
/// `gamma` and shifted by `beta`; also the mean and 1/std (`[.., 1]`) when `stats`.
fn norm_last(
    ctx: &mut Ctx,
    sum: &Val,
    gamma: &Val,
    beta: Option<Val>,
    eps: f64,
    simplified: bool,
    stats: bool,
) -> R<(Val, Option<(Val, Val)>)> {
    let axis = ctx.rank(sum) - 1;
    let d = ctx.dtype(sum);
    if !stats && ctx.dtype(gamma) == d {
        if simplified {
            let y = ctx.op(Op::RmsNorm { axis, eps }, &[sum, gamma])?;
            return Ok((
                match beta {
                    Some(b) => ctx.add(&y, &b)?,
                    None => y,
                },
                None,
            ));
        }
        let b = match beta {
            Some(b) => b,
            None => {
                let h = ctx.dims(gamma);
                let zero = ctx.scalar(d, 0.0);
                ctx.expand(&zero, h)?
            }
        };
        return Ok((
            ctx.op(Op::LayerNorm { axis, eps }, &[sum, gamma, &b])?,
            None,
        ));
    }
    let (centered, mean) = if simplified {
        (sum.clone(), None)
    } else {
        let mean = ctx.reduce(ReduceOp::Mean, sum, &[axis], true)?;
        (ctx.sub(sum, &mean)?, Some(mean))
    };
    let sq = ctx.mul(&centered, &centered)?;
    let var = ctx.reduce(ReduceOp::Mean, &sq, &[axis], true)?;
    let ve = ctx.binary_scalar(BinaryOp::Add, &var, eps)?;
    let inv = ctx.unary(UnaryOp::Rsqrt, &ve)?;
    let y = ctx.mul(&centered, &inv)?;
    let y = ctx.mul(&y, gamma)?;
    let y = match beta {
        Some(b) => ctx.add(&y, &b)?,
        None => y,
    };
    let mean = match mean {
        Some(m) => m,
        None => ctx.scalar(d, 0.0),
    };
    Ok((y, Some((mean, inv))))
}

/// `SkipLayerNormalization` (inputs x, skip, gamma, beta?, bias?) and
/// `SkipSimplifiedLayerNormalization` (x, skip, gamma, bias?); outputs y, mean?, 1/std?,
/// `x + skip + bias`?.
pub fn skip_layer_norm(ctx: &mut Ctx, n: &NodeIn, simplified: bool) -> R<Vec<Val>> {
    let x = float_input(ctx, n, 0)?;
    let skip = n.input(1)?;
    let gamma = n.input(2)?;
    let (beta, bias) = if simplified {
        (None, n.opt(3))
    } else {
        (n.opt(3), n.opt(4))
    };
    let eps = n.float("epsilon", DEFAULT_EPS)? as f64;
    if ctx.rank(&x) < 2 {
        invalid!("input must have rank >= 2, got {}", ctx.rank(&x));
    }
    let mut sum = ctx.add(&x, &skip)?;
    if let Some(b) = bias {
        sum = ctx.add(&sum, &b)?;
    }
    if simplified && n.wants(1) {
        unsupported!("output 1 (mean) of the simplified (RMS) form");
    }
    let stats = n.wants(1) || n.wants(2);
    let (y, st) = norm_last(ctx, &sum, &gamma, beta, eps, simplified, stats)?;
    let mut outs = vec![y];
    if let Some((mean, inv)) = st {
        outs.push(mean);
        outs.push(inv);
    } else {
        // placeholders for outputs nobody reads; never bound
        outs.push(sum.clone());
        outs.push(sum.clone());
    }
    outs.push(sum);
    Ok(outs)
}

/// `EmbedLayerNormalization`: inputs ids, segment ids?, word, position and segment?
/// embeddings, gamma, beta, mask?, position ids?; outputs the normalized sum, `mask_index`
/// (the mask's row sums as i32, zeros without a mask) and the sum itself.
pub fn embed_layer_norm(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let ids = n.input(0)?;
    if !ctx.dtype(&ids).is_int() || ctx.rank(&ids) != 2 {
        invalid!("input_ids must be a 2-D integer tensor");
    }
    let eps = n.float("epsilon", DEFAULT_EPS)? as f64;
    if n.int("mask_index_type", 1)? != 1 {
        unsupported!("mask_index_type other than 1");
    }
    let word = n.input(2)?;
    let pos_table = n.input(3)?;
    let (gamma, beta) = (n.input(5)?, n.input(6)?);
    let s = ctx.shape(&ids)?;
    let mut sum = ctx.gather(&word, &ids, 0)?;
    let pos = match n.opt(8) {
        Some(p) => ctx.gather(&pos_table, &p, 0)?,
        None => {
            let iota = ctx.iota(s[1], DType::I64);
            ctx.gather(&pos_table, &iota, 0)?
        }
    };
    sum = ctx.add(&sum, &pos)?;
    match (n.opt(1), n.opt(4)) {
        (Some(seg), Some(table)) => {
            let e = ctx.gather(&table, &seg, 0)?;
            sum = ctx.add(&sum, &e)?;
        }
        (None, None) => {}
        _ => invalid!("segment_ids and segment_embedding must be given together"),
    }
    let (y, _) = norm_last(ctx, &sum, &gamma, Some(beta), eps, false, false)?;
    let mask_index = match n.opt(7) {
        Some(m) => {
            let m = ctx.cast(&m, DType::I32)?;
            ctx.reduce(ReduceOp::Sum, &m, &[1], false)?
        }
        None => {
            let zero = ctx.scalar(DType::I32, 0.0);
            ctx.expand(&zero, rlx_ir::Shape::of(&[s[0]]).0)?
        }
    };
    Ok(vec![y, mask_index, sum])
}
