//! The optimizers of the `ai.onnx.preview.training` domain (`Adagrad`, `Adam`, `Momentum`):
//! one update step of every (X, G, ...) group, each an elementwise formula over IR rows.
//! The step count `T` is a run-time scalar; where a formula branches on `T > 0` it is a
//! `where`.

use crate::ctx::{invalid, unsupported, Ctx, Val, R};
use crate::node::NodeIn;
use rlx_ir::{BinaryOp, UnaryOp};

/// `R`, `T` and the groups of per-tensor inputs: `per` inputs each (X, G, then the state
/// tensors), laid out as all X's, then all G's, ...
fn groups(ctx: &mut Ctx, n: &NodeIn, per: usize) -> R<(Val, Val, Vec<Vec<Val>>)> {
    let (r, t) = (n.input(0)?, n.input(1)?);
    let rest = n.n_inputs().saturating_sub(2);
    if rest == 0 || !rest.is_multiple_of(per) {
        invalid!(
            "expected R, T and a multiple of {per} tensors, got {} inputs",
            n.n_inputs()
        );
    }
    let k = rest / per;
    let mut gs = Vec::with_capacity(k);
    for i in 0..k {
        let mut g = Vec::with_capacity(per);
        for j in 0..per {
            g.push(n.input(2 + j * k + i)?);
        }
        gs.push(g);
    }
    let d = ctx.dtype(&gs[0][0]);
    if !d.is_float() || d.is_narrow() {
        unsupported!("dtype {d} is not supported (float only)");
    }
    let r = ctx.cast(&r, d)?;
    let t = ctx.cast(&t, d)?;
    Ok((r, t, gs))
}

/// `norm * x + g`, the gradient with the L2 regularization term.
fn regularized(ctx: &mut Ctx, x: &Val, g: &Val, norm: f64) -> R<Val> {
    let nx = ctx.binary_scalar(BinaryOp::Mul, x, norm)?;
    ctx.add(&nx, g)
}

/// Outputs in ONNX order: every group's first result, then every group's second, ...
fn interleave(outs: Vec<Vec<Val>>) -> Vec<Val> {
    let per = outs.first().map_or(0, Vec::len);
    (0..per)
        .flat_map(|j| outs.iter().map(move |o| o[j].clone()))
        .collect()
}

/// `Adagrad`: `r = R / (1 + T * decay)`, `H' = H + g^2`, `X' = X - r g / (sqrt(H') + eps)`.
pub fn adagrad(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let decay = n.float("decay_factor", 0.0)? as f64;
    let eps = n.float("epsilon", 0.0)? as f64;
    let norm = n.float("norm_coefficient", 0.0)? as f64;
    let (r, t, gs) = groups(ctx, n, 3)?;
    let td = ctx.binary_scalar(BinaryOp::Mul, &t, decay)?;
    let den = ctx.binary_scalar(BinaryOp::Add, &td, 1.0)?;
    let rate = ctx.div(&r, &den)?;
    let mut outs = Vec::with_capacity(gs.len());
    for g in &gs {
        let (x, grad, h) = (&g[0], &g[1], &g[2]);
        let gr = regularized(ctx, x, grad, norm)?;
        let g2 = ctx.mul(&gr, &gr)?;
        let h_new = ctx.add(h, &g2)?;
        let root = ctx.unary(UnaryOp::Sqrt, &h_new)?;
        let root = ctx.binary_scalar(BinaryOp::Add, &root, eps)?;
        let step = ctx.mul(&rate, &gr)?;
        let step = ctx.div(&step, &root)?;
        let x_new = ctx.sub(x, &step)?;
        outs.push(vec![x_new, h_new]);
    }
    Ok(interleave(outs))
}

/// `Adam`: first and second moments, bias correction of the rate when `T > 0`, and the
/// optional post-update decay `norm_coefficient_post`.
pub fn adam(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let alpha = n.float("alpha", 0.9)? as f64;
    let beta = n.float("beta", 0.999)? as f64;
    let eps = n.float("epsilon", 0.0)? as f64;
    let norm = n.float("norm_coefficient", 0.0)? as f64;
    let post = n.float("norm_coefficient_post", 0.0)? as f64;
    let (r, t, gs) = groups(ctx, n, 4)?;
    // r * sqrt(1 - beta^T) / (1 - alpha^T) when T > 0, else r
    let d = ctx.dtype(&t);
    let one = ctx.scalar(d, 1.0);
    let a = ctx.scalar(d, alpha);
    let b = ctx.scalar(d, beta);
    let at = ctx.binary(BinaryOp::Pow, &a, &t)?;
    let bt = ctx.binary(BinaryOp::Pow, &b, &t)?;
    let num = ctx.sub(&one, &bt)?;
    let num = ctx.unary(UnaryOp::Sqrt, &num)?;
    let den = ctx.sub(&one, &at)?;
    let corr = ctx.div(&num, &den)?;
    let corrected = ctx.mul(&r, &corr)?;
    let zero = ctx.scalar(d, 0.0);
    let started = ctx.binary(BinaryOp::Gt, &t, &zero)?;
    let rate = ctx.where_(&started, &corrected, &r)?;
    let mut outs = Vec::with_capacity(gs.len());
    for g in &gs {
        let (x, grad, v, h) = (&g[0], &g[1], &g[2], &g[3]);
        let gr = regularized(ctx, x, grad, norm)?;
        let av = ctx.binary_scalar(BinaryOp::Mul, v, alpha)?;
        let ag = ctx.binary_scalar(BinaryOp::Mul, &gr, 1.0 - alpha)?;
        let v_new = ctx.add(&av, &ag)?;
        let bh = ctx.binary_scalar(BinaryOp::Mul, h, beta)?;
        let g2 = ctx.mul(&gr, &gr)?;
        let bg = ctx.binary_scalar(BinaryOp::Mul, &g2, 1.0 - beta)?;
        let h_new = ctx.add(&bh, &bg)?;
        let root = ctx.unary(UnaryOp::Sqrt, &h_new)?;
        let root = ctx.binary_scalar(BinaryOp::Add, &root, eps)?;
        let ratio = ctx.div(&v_new, &root)?;
        let step = ctx.mul(&rate, &ratio)?;
        let x_new = ctx.sub(x, &step)?;
        let x_new = if post != 0.0 {
            ctx.binary_scalar(BinaryOp::Mul, &x_new, 1.0 - post)?
        } else {
            x_new
        };
        outs.push(vec![x_new, v_new, h_new]);
    }
    Ok(interleave(outs))
}

/// `Momentum` (`standard` or `nesterov`): `V' = alpha V + beta' g` with `beta' = 1` at
/// `T = 0`, then `X' = X - R V'` (standard) or `X - R (g + alpha V')` (Nesterov).
pub fn momentum(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let alpha = n.float("alpha", 0.0)? as f64;
    let beta = n.float("beta", 0.0)? as f64;
    let norm = n.float("norm_coefficient", 0.0)? as f64;
    let mode = n.string("mode", "standard")?;
    let nesterov = match mode.as_str() {
        "standard" => false,
        "nesterov" => true,
        other => invalid!("mode `{other}` (expected standard or nesterov)"),
    };
    let (r, t, gs) = groups(ctx, n, 3)?;
    let d = ctx.dtype(&t);
    let zero = ctx.scalar(d, 0.0);
    let started = ctx.binary(BinaryOp::Gt, &t, &zero)?;
    let b = ctx.scalar(d, beta);
    let one = ctx.scalar(d, 1.0);
    let beta_t = ctx.where_(&started, &b, &one)?;
    let mut outs = Vec::with_capacity(gs.len());
    for g in &gs {
        let (x, grad, v) = (&g[0], &g[1], &g[2]);
        let gr = regularized(ctx, x, grad, norm)?;
        let av = ctx.binary_scalar(BinaryOp::Mul, v, alpha)?;
        let bg = ctx.mul(&beta_t, &gr)?;
        let v_new = ctx.add(&av, &bg)?;
        let dir = if nesterov {
            let av_new = ctx.binary_scalar(BinaryOp::Mul, &v_new, alpha)?;
            ctx.add(&gr, &av_new)?
        } else {
            v_new.clone()
        };
        let step = ctx.mul(&r, &dir)?;
        let x_new = ctx.sub(x, &step)?;
        outs.push(vec![x_new, v_new]);
    }
    Ok(interleave(outs))
}

/// The mapper for an op of the `ai.onnx.preview.training` domain.
pub fn lookup(op_type: &str) -> Option<crate::ops::Mapper> {
    Some(match op_type {
        "Adagrad" => adagrad,
        "Adam" => adam,
        "Momentum" => momentum,
        _ => return None,
    })
}
