//! The state-carrying ops of recent opsets, as compositions of IR ops:
//! `CausalConvWithState` (the past state prepended, a depthwise convolution, the last
//! `k - 1` positions kept), `LinearAttention` (its recurrence unrolled over the sequence:
//! decay, delta correction, outer-product write and read, per step) and `TensorScatter`
//! (a KV-cache write at per-batch positions, as a gather from the update and a `where`).

use crate::ctx::{invalid, unsupported, Ctx, Val, R};
use crate::node::NodeIn;
use rlx_ir::{BinaryOp, Conv2dParams, DType, Dim, Op, UnaryOp};

fn float_dtype(ctx: &Ctx, v: &Val) -> R<DType> {
    let d = ctx.dtype(v);
    if !d.is_float() || d.is_narrow() {
        unsupported!("dtype {d} is not supported (float only)");
    }
    Ok(d)
}

/// Zeros of a static shape (a scalar broadcast).
fn zeros(ctx: &mut Ctx, d: DType, dims: &[usize]) -> R<Val> {
    let z = ctx.scalar(d, 0.0);
    ctx.expand(&z, dims.iter().map(|&x| Dim::Static(x)).collect())
}

/// `CausalConvWithState`: `padded = concat(past_state or zeros, input)` along the length,
/// a depthwise convolution of `padded` (valid padding) plus bias, SiLU when `activation` is
/// `silu`/`swish`; `present_state` is the last `k - 1` positions of `padded`.
pub fn causal_conv_with_state(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let (x, w) = (n.input(0)?, n.input(1)?);
    let d = float_dtype(ctx, &x)?;
    let act = n.string("activation", "none")?;
    let silu = match act.as_str() {
        "none" => false,
        "silu" | "swish" => true,
        other => invalid!("activation `{other}` (expected none, silu or swish)"),
    };
    let xs = ctx.shape(&x)?;
    let ws = ctx.shape(&w)?;
    if xs.len() != 3 || ws.len() != 3 {
        invalid!("input {xs:?} and weight {ws:?} must be rank 3");
    }
    let (b, c, l) = (xs[0], xs[1], xs[2]);
    let k = ws[2];
    if ws[0] != c || ws[1] != 1 || k == 0 {
        invalid!("weight {ws:?} must be [{c}, 1, k] with k >= 1");
    }
    let past = match n.opt(3) {
        Some(p) => {
            if ctx.shape(&p)? != [b, c, k - 1] {
                invalid!(
                    "past_state {:?} must be [{b}, {c}, {}]",
                    ctx.shape(&p)?,
                    k - 1
                );
            }
            Some(ctx.cast(&p, d)?)
        }
        None if k > 1 => Some(zeros(ctx, d, &[b, c, k - 1])?),
        None => None,
    };
    let padded = match &past {
        Some(p) => ctx.concat(&[p.clone(), x.clone()], 2)?,
        None => x.clone(),
    };
    let w = ctx.cast(&w, d)?;
    let bias = match n.opt(2) {
        Some(bv) => Some(ctx.cast(&bv, d)?),
        None => None,
    };
    let p = Conv2dParams {
        stride: [1, 1],
        pads: [0; 4],
        dilation: [1, 1],
        groups: c,
    };
    let y = crate::ops::conv::as_2d(ctx, &padded, &w, |ctx, x2, w2| {
        let mut ins = vec![&x2, &w2];
        ins.extend(bias.as_ref());
        ctx.op(Op::Conv2d(p), &ins)
    })?;
    let y = if silu {
        ctx.unary(UnaryOp::SILU, &y)?
    } else {
        y
    };
    let total = (l + k - 1) as i64;
    let state = ctx.slice(&padded, 2, total - (k as i64 - 1), total, 1)?;
    Ok(vec![y, state])
}

/// Reshapes `(B, T, H*D)` to `(B, H, T, D)`.
fn heads(ctx: &mut Ctx, x: &Val, h: usize, what: &str) -> R<Val> {
    let s = ctx.shape(x)?;
    if s.len() != 3 || s[2] % h != 0 {
        invalid!("{what} {s:?} must be (B, T, H*D) with H = {h}");
    }
    let r = ctx.reshape(x, &[s[0], s[1], h, s[2] / h])?;
    ctx.transpose(&r, &[0, 2, 1, 3])
}

/// Sequences longer than this are refused: the recurrence is unrolled per step.
const MAX_UNROLL: usize = 4096;

/// `LinearAttention` (update rules `linear`, `gated`, `delta`, `gated_delta`), computed in
/// f32 as ONNX's reference does: per step, the state `S` (B, H_kv, d_k, d_v) decays by
/// `exp(g_t)`, the value is delta-corrected `beta_t (v_t - S^T k_t)`, `S += k_t v_t^T`, and
/// the output is `scale * q_t S` with query heads reading their KV head's state.
pub fn linear_attention(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let (q, k, v) = (n.input(0)?, n.input(1)?, n.input(2)?);
    let out_dtype = float_dtype(ctx, &q)?;
    let rule = n.string("update_rule", "gated_delta")?;
    let (gating, delta) = match rule.as_str() {
        "linear" => (false, false),
        "gated" => (true, false),
        "delta" => (false, true),
        "gated_delta" => (true, true),
        other => invalid!("update_rule `{other}`"),
    };
    let _ = n.int_opt("chunk_size")?; // a tuning hint with no effect on values
    let hq = n.int_opt("q_num_heads")?;
    let hkv = n.int_opt("kv_num_heads")?;
    let (Some(hq), Some(hkv)) = (hq, hkv) else {
        invalid!("q_num_heads and kv_num_heads are required");
    };
    if hq <= 0 || hkv <= 0 || hq % hkv != 0 {
        invalid!("q_num_heads ({hq}) must be a positive multiple of kv_num_heads ({hkv})");
    }
    let (hq, hkv) = (hq as usize, hkv as usize);
    let decay = n.opt(4);
    let beta = n.opt(5);
    if gating != decay.is_some() {
        invalid!(
            "update_rule `{rule}` {} the decay input",
            if gating { "requires" } else { "forbids" }
        );
    }
    if delta != beta.is_some() {
        invalid!(
            "update_rule `{rule}` {} the beta input",
            if delta { "requires" } else { "forbids" }
        );
    }
    let qs = ctx.shape(&q)?;
    if qs.len() != 3 {
        invalid!("query {qs:?} must be rank 3");
    }
    let (b, t) = (qs[0], qs[1]);
    if t > MAX_UNROLL {
        unsupported!("sequence length {t} (the recurrence is unrolled up to {MAX_UNROLL} steps)");
    }
    let f = DType::F32;
    let q = ctx.cast(&q, f)?;
    let k = ctx.cast(&k, f)?;
    let v = ctx.cast(&v, f)?;
    let q4 = heads(ctx, &q, hq, "query")?; // (B, Hq, T, dk)
    let k4 = heads(ctx, &k, hkv, "key")?; // (B, Hkv, T, dk)
    let v4 = heads(ctx, &v, hkv, "value")?; // (B, Hkv, T, dv)
    let dk = qs[2] / hq;
    if ctx.shape(&k4)? != [b, hkv, t, dk] {
        invalid!("key {:?} does not match the query's heads", ctx.shape(&k)?);
    }
    let dv = ctx.shape(&v4)?[3];
    if ctx.shape(&v4)?[..3] != [b, hkv, t] {
        invalid!("value {:?} does not match the key", ctx.shape(&v)?);
    }
    // exp(decay) as (B, Hkv, T, 1 or dk)
    let gate = match &decay {
        Some(g) => {
            let g = ctx.cast(g, f)?;
            let gs = ctx.shape(&g)?;
            if gs.len() != 3 || gs[..2] != [b, t] {
                invalid!("decay {gs:?} must be (B, T, H_kv) or (B, T, H_kv*d_k)");
            }
            let g4 = if gs[2] == hkv {
                let r = ctx.reshape(&g, &[b, t, hkv, 1])?;
                ctx.transpose(&r, &[0, 2, 1, 3])?
            } else if gs[2] == hkv * dk {
                heads(ctx, &g, hkv, "decay")?
            } else {
                invalid!("decay last dim {} must be {hkv} or {}", gs[2], hkv * dk);
            };
            Some(ctx.unary(UnaryOp::Exp, &g4)?)
        }
        None => None,
    };
    // beta as (B, Hkv or 1, T, 1)
    let beta4 = match &beta {
        Some(bv) => {
            let bv = ctx.cast(bv, f)?;
            let bs = ctx.shape(&bv)?;
            if bs.len() != 3 || bs[..2] != [b, t] || !(bs[2] == hkv || bs[2] == 1) {
                invalid!("beta {bs:?} must be (B, T, H_kv) or (B, T, 1)");
            }
            let r = ctx.reshape(&bv, &[b, t, bs[2], 1])?;
            Some(ctx.transpose(&r, &[0, 2, 1, 3])?)
        }
        None => None,
    };
    let (mut state, state_dtype) = match n.opt(3) {
        Some(p) => {
            if ctx.shape(&p)? != [b, hkv, dk, dv] {
                invalid!(
                    "past_state {:?} must be [{b}, {hkv}, {dk}, {dv}]",
                    ctx.shape(&p)?
                );
            }
            let pd = ctx.dtype(&p);
            (ctx.cast(&p, f)?, pd)
        }
        None => (zeros(ctx, f, &[b, hkv, dk, dv])?, out_dtype),
    };
    let scale = match n.float_opt("scale")? {
        Some(s) if s != 0.0 => s as f64,
        _ => 1.0 / (dk as f64).sqrt(),
    };
    let group = hq / hkv;
    let step = |ctx: &mut Ctx, x: &Val, i: usize| ctx.slice(x, 2, i as i64, i as i64 + 1, 1);
    let mut outs = Vec::with_capacity(t);
    for i in 0..t {
        let k_t = step(ctx, &k4, i)?; // (B, Hkv, 1, dk)
        let mut v_t = step(ctx, &v4, i)?; // (B, Hkv, 1, dv)
        if let Some(g) = &gate {
            let g_t = step(ctx, g, i)?; // (B, Hkv, 1, 1 or dk)
            let w = ctx.shape(&g_t)?[3];
            let g_t = ctx.reshape(&g_t, &[b, hkv, w, 1])?;
            state = ctx.mul(&state, &g_t)?;
        }
        if let Some(bt) = &beta4 {
            let got = ctx.matmul(&k_t, &state)?; // (B, Hkv, 1, dv)
            let diff = ctx.sub(&v_t, &got)?;
            let b_t = step(ctx, bt, i)?; // (B, Hkv or 1, 1, 1)
            v_t = ctx.mul(&b_t, &diff)?;
        }
        let k_col = ctx.reshape(&k_t, &[b, hkv, dk, 1])?;
        let outer = ctx.mul(&k_col, &v_t)?; // (B, Hkv, dk, dv)
        state = ctx.add(&state, &outer)?;
        let read = if group == 1 {
            state.clone()
        } else {
            let s5 = ctx.reshape(&state, &[b, hkv, 1, dk, dv])?;
            let dims = [b, hkv, group, dk, dv].map(Dim::Static).to_vec();
            let e = ctx.expand(&s5, dims)?;
            ctx.reshape(&e, &[b, hq, dk, dv])?
        };
        let q_t = step(ctx, &q4, i)?; // (B, Hq, 1, dk)
        let o = ctx.matmul(&q_t, &read)?; // (B, Hq, 1, dv)
        outs.push(ctx.binary_scalar(BinaryOp::Mul, &o, scale)?);
    }
    let o = ctx.concat(&outs, 2)?; // (B, Hq, T, dv)
    let o = ctx.transpose(&o, &[0, 2, 1, 3])?;
    let o = ctx.reshape(&o, &[b, t, hq * dv])?;
    let o = ctx.cast(&o, out_dtype)?;
    let s = ctx.cast(&state, state_dtype)?;
    Ok(vec![o, s])
}

/// `TensorScatter`: `present = past` with `update` written along `axis` from position
/// `write_indices[b]` of each batch row (`circular` wraps modulo the cache length).
pub fn tensor_scatter(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let (past, upd) = (n.input(0)?, n.input(1)?);
    let mode = n.string("mode", "linear")?;
    let circular = match mode.as_str() {
        "linear" => false,
        "circular" => true,
        other => invalid!("mode `{other}` (expected linear or circular)"),
    };
    let ps = ctx.shape(&past)?;
    let us = ctx.shape(&upd)?;
    let r = ps.len();
    if r < 2 || us.len() != r {
        invalid!("past_cache {ps:?} and update {us:?} must have the same rank >= 2");
    }
    let axis = ctx.axis(n.int("axis", -2)?, r)?;
    if axis == 0 {
        invalid!("axis must not be the batch axis");
    }
    if (0..r).any(|a| a != axis && ps[a] != us[a]) || us[axis] > ps[axis] {
        invalid!("update {us:?} does not fit past_cache {ps:?} along axis {axis}");
    }
    let (m, len) = (ps[axis], us[axis]);
    let upd = ctx.cast(&upd, ctx.dtype(&past))?;
    // j = position - write_index[b]: the update row each cache row takes, if any
    let pos = ctx.iota_along(m, axis, r)?;
    let j = match n.opt(2) {
        Some(w) => {
            if ctx.shape(&w)? != [ps[0]] {
                invalid!("write_indices {:?} must be [{}]", ctx.shape(&w)?, ps[0]);
            }
            let w = ctx.cast(&w, DType::I64)?;
            let mut dims = vec![1; r];
            dims[0] = ps[0];
            let w = ctx.reshape(&w, &dims)?;
            ctx.sub(&pos, &w)?
        }
        None => pos,
    };
    let j = if circular {
        ctx.binary_scalar(BinaryOp::Mod, &j, m as f64)?
    } else {
        j
    };
    let zero = ctx.scalar(DType::I64, 0.0);
    let lo = ctx.binary(BinaryOp::Ge, &j, &zero)?;
    let l = ctx.scalar(DType::I64, len as f64);
    let hi = ctx.binary(BinaryOp::Lt, &j, &l)?;
    let hit = ctx.binary(BinaryOp::And, &lo, &hi)?;
    let jc = ctx.binary(BinaryOp::Max, &j, &zero)?;
    let jc = ctx.binary_scalar(BinaryOp::Min, &jc, len.saturating_sub(1) as f64)?;
    let coords: Vec<Val> = (0..r)
        .map(|a| {
            if a == axis {
                Ok(jc.clone())
            } else {
                ctx.iota_along(ps[a], a, r)
            }
        })
        .collect::<R<_>>()?;
    let taken = ctx.gather_at(&upd, &coords)?;
    let dims = ps.iter().map(|&d| Dim::Static(d)).collect();
    let hit = ctx.expand(&hit, dims)?;
    Ok(vec![ctx.where_(&hit, &taken, &past)?])
}
