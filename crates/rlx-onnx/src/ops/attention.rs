//! `Attention` (opset 23+) decomposed as the ONNX reference computes it: optional 3-D to
//! 4-D head split, KV cache concatenation, grouped-query head repetition, masks (boolean or
//! additive, causal with cache offset, sliding window, per-batch padding), softcap, softmax
//! with fully-masked rows zeroed, and the four outputs.

use crate::ctx::{invalid, unsupported, Ctx, Val, R};
use crate::dtype::to_dtype;
use crate::node::NodeIn;
use rlx_ir::{BinaryOp, DType, Op, ReduceOp, Shape, UnaryOp};

/// [B, S, H*D] -> [B, H, S, D].
fn split_heads(ctx: &mut Ctx, x: &Val, heads: usize) -> R<Val> {
    let s = ctx.shape(x)?;
    if heads == 0 || s[2] % heads != 0 {
        invalid!("hidden size {} not divisible by {heads} heads", s[2]);
    }
    let y = ctx.reshape(x, &[s[0], s[1], heads, s[2] / heads])?;
    ctx.transpose(&y, &[0, 2, 1, 3])
}

/// `Attention`.
pub fn attention(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let (mut q, mut k, mut v) = (n.input(0)?, n.input(1)?, n.input(2)?);
    let dt = ctx.dtype(&q);
    if !dt.is_float() {
        unsupported!("dtype {dt}");
    }
    let rank = ctx.rank(&q);
    if ctx.rank(&k) != rank || ctx.rank(&v) != rank {
        invalid!("Q, K and V must have the same rank");
    }
    for p in [n.opt(4), n.opt(5)].into_iter().flatten() {
        if ctx.rank(&p) != 4 {
            invalid!("past_key and past_value must be 4-D");
        }
    }
    let is_causal = n.int("is_causal", 0)? != 0;
    let qh = n.int_opt("q_num_heads")?;
    let kvh = n.int_opt("kv_num_heads")?;
    let mode = n.int("qk_matmul_output_mode", 0)?;
    let scale = n.float_opt("scale")?;
    let softcap = n.float("softcap", 0.0)? as f64;
    let precision = n.int_opt("softmax_precision")?;
    let left = n.int("left_window_size", -1)?;
    let right = n.int("right_window_size", -1)?;
    if rank == 3 {
        let (Some(qh), Some(kvh)) = (qh, kvh) else {
            invalid!("3-D inputs need q_num_heads and kv_num_heads");
        };
        q = split_heads(ctx, &q, qh as usize)?;
        k = split_heads(ctx, &k, kvh as usize)?;
        v = split_heads(ctx, &v, kvh as usize)?;
    } else if rank != 4 {
        invalid!("Q must be 3-D or 4-D, got rank {rank}");
    }
    let qs = ctx.shape(&q)?;
    let (batch, q_heads, q_len, head) = (qs[0], qs[1], qs[2], qs[3]);
    let scale = scale
        .map(|s| s as f64)
        .unwrap_or(1.0 / (head as f64).sqrt());
    let sqrt_scale = dt.round(scale.sqrt());
    let (past_k, past_v) = (n.opt(4), n.opt(5));
    let nonpad = n.opt(6);
    if past_k.is_some() != past_v.is_some() {
        invalid!("past_key and past_value must be given together");
    }
    let past_len = match &past_k {
        Some(pk) => ctx.shape(pk)?[2],
        None => 0,
    };
    if let (Some(pk), Some(pv)) = (&past_k, &past_v) {
        k = ctx.concat(&[pk.clone(), k], 2)?;
        v = ctx.concat(&[pv.clone(), v], 2)?;
    }
    let (present_k, present_v) = (k.clone(), v.clone());
    let kv_len = ctx.shape(&k)?[2];
    let kv_heads = ctx.shape(&k)?[1];
    let zero = ctx.scalar(dt, 0.0);
    let ninf = ctx.scalar(dt, f64::NEG_INFINITY);
    ctx.host_alloc(q_len.checked_mul(kv_len), "the attention mask")?;

    // The additive bias, None when nothing masks.
    let mut bias: Option<Val> = None;
    let mut mask = n.opt(3);
    if let Some(m) = &mask {
        let ms = ctx.shape(m)?;
        let last = ms.last().copied().unwrap_or(0);
        if last < kv_len {
            let mut pads = vec![(0, 0); ms.len()];
            *pads.last_mut().expect("rank >= 1") = (0, kv_len - last);
            let fill = if ctx.dtype(m) == DType::Bool {
                0.0
            } else {
                f64::NEG_INFINITY
            };
            mask = Some(ctx.op(
                Op::Pad {
                    pads,
                    mode: rlx_ir::PadMode::Constant(fill),
                },
                &[m],
            )?);
        }
    }
    if let Some(m) = &mask {
        bias = Some(if ctx.dtype(m) == DType::Bool {
            ctx.where_(m, &zero, &ninf)?
        } else {
            m.clone()
        });
    }
    // Per-batch frontier of an external cache: nonpad_kv_seqlen[b] - q_len, as [B, 1, 1, 1].
    let frontier = match (&nonpad, past_len) {
        (Some(np), 0) => {
            let np = ctx.cast(np, DType::I64)?;
            let np = ctx.reshape(&np, &[batch, 1, 1, 1])?;
            Some(ctx.binary_scalar(BinaryOp::Sub, &np, q_len as f64)?)
        }
        _ => None,
    };
    // diff[i][j] = i - j as i64 [q, kv], shared by causal and window masks.
    let diff = {
        let vals: Vec<f64> = (0..q_len * kv_len)
            .map(|x| (x / kv_len) as f64 - (x % kv_len) as f64)
            .collect();
        ctx.tensor(DType::I64, &[q_len, kv_len], &vals)?
    };
    let mut allow_terms: Vec<Val> = Vec::new();
    let offset_diff = |ctx: &mut Ctx| -> R<Val> {
        // i + offset - j
        match &frontier {
            Some(f) => ctx.add(&diff, f),
            None => ctx.binary_scalar(BinaryOp::Add, &diff, past_len as f64),
        }
    };
    if is_causal {
        let d = offset_diff(ctx)?;
        allow_terms.push(ctx.binary_scalar(BinaryOp::Ge, &d, 0.0)?);
    }
    if left >= 0 || right >= 0 {
        let d = offset_diff(ctx)?;
        if left >= 0 {
            allow_terms.push(ctx.binary_scalar(BinaryOp::Le, &d, left as f64)?);
        }
        if right >= 0 {
            let nd = ctx.unary(UnaryOp::Neg, &d)?;
            allow_terms.push(ctx.binary_scalar(BinaryOp::Le, &nd, right as f64)?);
        }
    }
    for a in allow_terms {
        let add = ctx.where_(&a, &zero, &ninf)?;
        bias = Some(match bias {
            Some(b) => ctx.add(&b, &add)?,
            None => add,
        });
    }
    if let Some(np) = &nonpad {
        let np = ctx.cast(np, DType::I64)?;
        let np = ctx.reshape(&np, &[batch, 1, 1, 1])?;
        let j = ctx.iota(kv_len, DType::I64);
        let ok = ctx.binary(BinaryOp::Lt, &j, &np)?;
        let add = ctx.where_(&ok, &zero, &ninf)?;
        bias = Some(match bias {
            Some(b) => ctx.add(&b, &add)?,
            None => add,
        });
    }

    // Grouped-query attention: repeat each KV head.
    if q_heads != kv_heads && kv_heads > 0 && q_heads % kv_heads == 0 {
        let rep = q_heads / kv_heads;
        let repeat = |ctx: &mut Ctx, x: &Val| -> R<Val> {
            let s = ctx.shape(x)?;
            let y = ctx.reshape(x, &[s[0], s[1], 1, s[2], s[3]])?;
            let y = ctx.expand(&y, Shape::of(&[s[0], s[1], rep, s[2], s[3]]).0)?;
            ctx.reshape(&y, &[s[0], s[1] * rep, s[2], s[3]])
        };
        k = repeat(ctx, &k)?;
        v = repeat(ctx, &v)?;
    }
    let qsc = ctx.binary_scalar(BinaryOp::Mul, &q, sqrt_scale)?;
    let ksc = ctx.binary_scalar(BinaryOp::Mul, &k, sqrt_scale)?;
    let kt = ctx.transpose(&ksc, &[0, 1, 3, 2])?;
    let mut qk = ctx.matmul(&qsc, &kt)?;
    if softcap > 0.0 {
        let t = ctx.binary_scalar(BinaryOp::Div, &qk, softcap)?;
        let t = ctx.unary(UnaryOp::Tanh, &t)?;
        qk = ctx.binary_scalar(BinaryOp::Mul, &t, softcap)?;
    }
    let with_bias = match &bias {
        Some(b) => ctx.add(&qk, b)?,
        None => qk.clone(),
    };
    let mut qk_out = if mode == 2 { with_bias.clone() } else { qk };
    let sm_dt = match precision {
        Some(p) => to_dtype(p as i32).map_err(crate::ctx::Fail::Unsupported)?,
        None => dt,
    };
    let wb = ctx.cast(&with_bias, sm_dt)?;
    let r = ctx.rank(&wb);
    let mut probs = ctx.op(Op::Softmax { axis: r - 1 }, &[&wb])?;
    if let Some(b) = &bias {
        let br = ctx.rank(b);
        let m = ctx.reduce(ReduceOp::Max, b, &[br - 1], true)?;
        let dead = ctx.binary_scalar(BinaryOp::Eq, &m, f64::NEG_INFINITY)?;
        let z = ctx.scalar(sm_dt, 0.0);
        probs = ctx.where_(&dead, &z, &probs)?;
    }
    if mode == 3 {
        qk_out = probs.clone();
    }
    let qk_out = ctx.cast(&qk_out, dt)?;
    let probs = ctx.cast(&probs, dt)?;
    let mut y = ctx.matmul(&probs, &v)?;
    if rank == 3 {
        let s = ctx.shape(&y)?;
        y = ctx.transpose(&y, &[0, 2, 1, 3])?;
        y = ctx.reshape(&y, &[s[0], s[2], s[1] * s[3]])?;
    }
    Ok(vec![y, present_k, present_v, qk_out])
}
