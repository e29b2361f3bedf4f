//! `Attention` (input projection fused in), `MultiHeadAttention` and
//! `GroupQueryAttention`: projections, head splits, KV-cache concatenation, masks folded
//! into one additive bias, then the IR's `attention` op (so every backend's attention
//! kernel runs it) and the head merge.

use super::activation::float_input;
use crate::ctx::{invalid, unsupported, Ctx, Val, R};
use crate::node::NodeIn;
use crate::ops::rotary::rotate;
use rlx_ir::{AttnMask, BinaryOp, DType, Op, Shape};

/// `[B, L, N * D]` -> `[B, N, L, D]`.
fn split_heads(ctx: &mut Ctx, x: &Val, heads: usize) -> R<Val> {
    let s = ctx.shape(x)?;
    if s.len() != 3 || heads == 0 || s[2] % heads != 0 {
        invalid!("a [batch, seq, hidden] input with hidden divisible by {heads} heads, got {s:?}");
    }
    let y = ctx.reshape(x, &[s[0], s[1], heads, s[2] / heads])?;
    ctx.transpose(&y, &[0, 2, 1, 3])
}

/// `[B, N, S, D]` -> `[B, S, N * D]`.
fn merge_heads(ctx: &mut Ctx, y: &Val) -> R<Val> {
    let s = ctx.shape(y)?;
    let y = ctx.transpose(y, &[0, 2, 1, 3])?;
    ctx.reshape(&y, &[s[0], s[2], s[1] * s[3]])
}

/// Repeats each of the `[B, Nkv, T, D]` heads `rep` times: `[B, Nkv * rep, T, D]`.
fn repeat_heads(ctx: &mut Ctx, x: &Val, rep: usize) -> R<Val> {
    if rep == 1 {
        return Ok(x.clone());
    }
    let s = ctx.shape(x)?;
    let y = ctx.reshape(x, &[s[0], s[1], 1, s[2], s[3]])?;
    let y = ctx.expand(&y, Shape::of(&[s[0], s[1], rep, s[2], s[3]]).0)?;
    ctx.reshape(&y, &[s[0], s[1] * rep, s[2], s[3]])
}

/// `where(allowed, 0, filter)` in f32.
fn to_bias(ctx: &mut Ctx, allowed: &Val, filter: f64) -> R<Val> {
    let zero = ctx.scalar(DType::F32, 0.0);
    let f = ctx.scalar(DType::F32, filter);
    ctx.where_(allowed, &zero, &f)
}

/// `a + b` of optional biases.
fn add_bias(ctx: &mut Ctx, a: Option<Val>, b: Val) -> R<Val> {
    match a {
        Some(a) => ctx.add(&a, &b),
        None => Ok(b),
    }
}

/// The causal rule of attention over a cache: query `i` sees key `j <= i + (t - s)`, as a
/// `[s, t]` bool constant.
fn causal_allowed(ctx: &mut Ctx, s: usize, t: usize) -> R<Val> {
    ctx.host_alloc(s.checked_mul(t), "the causal mask")?;
    let v: Vec<f64> = (0..s * t)
        .map(|x| f64::from(u8::from(x % t + s <= x / t + t)))
        .collect();
    ctx.tensor(DType::Bool, &[s, t], &v)
}

/// A key mask as Attention and MultiHeadAttention take it, as an additive bias that
/// broadcasts to `[B, N, S, T]`: `[B]` end positions, `[2B]` end then start positions,
/// `[B, T]` or `[B, S, T]` raw masks (0 masks).
fn key_mask(ctx: &mut Ctx, m: &Val, batch: usize, s: usize, t: usize, filter: f64) -> R<Val> {
    let ms = ctx.shape(m)?;
    let j = ctx.iota(t, DType::I64);
    let allowed = match ms.as_slice() {
        [b] if *b == batch => {
            let end = ctx.cast(m, DType::I64)?;
            let end = ctx.reshape(&end, &[batch, 1, 1, 1])?;
            ctx.binary(BinaryOp::Lt, &j, &end)?
        }
        [b2] if *b2 == 2 * batch => {
            let all = ctx.cast(m, DType::I64)?;
            let end = ctx.slice(&all, 0, 0, batch as i64, 1)?;
            let start = ctx.slice(&all, 0, batch as i64, 2 * batch as i64, 1)?;
            let end = ctx.reshape(&end, &[batch, 1, 1, 1])?;
            let start = ctx.reshape(&start, &[batch, 1, 1, 1])?;
            let before = ctx.binary(BinaryOp::Lt, &j, &end)?;
            let after = ctx.binary(BinaryOp::Ge, &j, &start)?;
            ctx.binary(BinaryOp::And, &before, &after)?
        }
        [b, tt] if *b == batch && *tt == t => {
            let m = ctx.reshape(m, &[batch, 1, 1, t])?;
            let zero = ctx.scalar_like(&m, 0.0);
            ctx.binary(BinaryOp::Ne, &m, &zero)?
        }
        [b, ss, tt] if *b == batch && *ss == s && *tt == t => {
            let m = ctx.reshape(m, &[batch, 1, s, t])?;
            let zero = ctx.scalar_like(&m, 0.0);
            ctx.binary(BinaryOp::Ne, &m, &zero)?
        }
        other => unsupported!(
            "mask_index of shape {other:?} (batch {batch}, {s} queries, {t} keys): 1-D [B] or [2B], 2-D [B, T] and 3-D [B, S, T] are supported"
        ),
    };
    to_bias(ctx, &allowed, filter)
}

/// What hides scores from a query: an additive bias broadcastable to `[B, N, S, T]`,
/// the causal rule, and the value masked scores get.
struct Mask {
    bias: Option<Val>,
    causal: bool,
    filter: f64,
}

/// Attention of `[B, N, S, D]` queries over `[B, N, T, D]` keys and values: the IR op with
/// an additive mask when there is a bias (the causal rule folded into it), else a causal
/// or no mask. The result is `[B, N, S, Dv]`.
fn sdpa(ctx: &mut Ctx, q: &Val, k: &Val, v: &Val, mask: Mask, scale: f64) -> R<Val> {
    let Mask {
        bias,
        causal,
        filter,
    } = mask;
    let dt = ctx.dtype(q);
    let (s, t) = (ctx.shape(q)?[2], ctx.shape(k)?[2]);
    let scale = Some(scale);
    match bias {
        None if causal => ctx.op(
            Op::Attention {
                mask: AttnMask::Causal,
                scale,
            },
            &[q, k, v],
        ),
        None => ctx.op(
            Op::Attention {
                mask: AttnMask::None,
                scale,
            },
            &[q, k, v],
        ),
        Some(mut b) => {
            if causal {
                let allowed = causal_allowed(ctx, s, t)?;
                let cb = to_bias(ctx, &allowed, filter)?;
                b = ctx.add(&b, &cb)?;
            }
            let b = ctx.cast(&b, dt)?;
            ctx.op(
                Op::Attention {
                    mask: AttnMask::Additive,
                    scale,
                },
                &[q, k, v, &b],
            )
        }
    }
}

/// The `scale` attribute, `1/sqrt(head)` when absent or 0.
fn scale_attr(n: &NodeIn, head: usize) -> R<f64> {
    let s = n.float("scale", 0.0)? as f64;
    Ok(if s == 0.0 {
        1.0 / (head as f64).sqrt()
    } else {
        s
    })
}

/// `num_heads`, required and positive.
fn heads_attr(n: &NodeIn, name: &str) -> R<usize> {
    match n.int_opt(name)? {
        Some(h) if h > 0 => Ok(h as usize),
        other => invalid!("{name} must be given and positive, got {other:?}"),
    }
}

/// `Attention`: `input · weights + bias` split into q, k, v (`qkv_hidden_sizes` or three
/// equal parts), an optional `past` `[2, B, N, P, D]`, `mask_index`, `attention_bias`
/// and `unidirectional`; outputs the result and `present`.
pub fn attention(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = float_input(ctx, n, 0)?;
    let w = n.input(1)?;
    let heads = heads_attr(n, "num_heads")?;
    let causal = n.int("unidirectional", 0)? != 0;
    let filter = n.float("mask_filter_value", -10000.0)? as f64;
    if n.int("do_rotary", 0)? != 0 {
        unsupported!("do_rotary = 1");
    }
    if n.int("past_present_share_buffer", 0)? != 0 {
        unsupported!("past_present_share_buffer = 1");
    }
    if n.opt(6).is_some() {
        unsupported!("input 6 (past_sequence_length)");
    }
    let ws = ctx.shape(&w)?;
    let xs = ctx.shape(&x)?;
    if ws.len() != 2 || xs.len() != 3 || ws[0] != xs[2] {
        invalid!("input {xs:?} and weights {ws:?} must be [B, S, K] and [K, hidden]");
    }
    let sizes = match n.ints_opt("qkv_hidden_sizes")? {
        Some(v) if v.len() == 3 && v.iter().all(|&h| h > 0) => {
            [v[0] as usize, v[1] as usize, v[2] as usize]
        }
        Some(v) => invalid!("qkv_hidden_sizes {v:?} must be three positive sizes"),
        None if ws[1] % 3 == 0 => [ws[1] / 3; 3],
        None => invalid!("weights width {} is not divisible by 3", ws[1]),
    };
    if sizes.iter().sum::<usize>() != ws[1] || sizes[0] != sizes[1] {
        invalid!(
            "qkv_hidden_sizes {sizes:?} must sum to {} with q and k equal",
            ws[1]
        );
    }
    let mut qkv = crate::ops::linalg::matmul_np(ctx, &x, &w)?;
    if let Some(b) = n.opt(2) {
        qkv = ctx.add(&qkv, &b)?;
    }
    let (hq, hk) = (sizes[0] as i64, sizes[1] as i64);
    let q = ctx.slice(&qkv, 2, 0, hq, 1)?;
    let k = ctx.slice(&qkv, 2, hq, hq + hk, 1)?;
    let v = ctx.slice(&qkv, 2, hq + hk, ws[1] as i64, 1)?;
    let q = split_heads(ctx, &q, heads)?;
    let mut k = split_heads(ctx, &k, heads)?;
    let mut v = split_heads(ctx, &v, heads)?;
    if let Some(past) = n.opt(4) {
        let ps = ctx.shape(&past)?;
        if ps.len() != 5 || ps[0] != 2 {
            invalid!("past must be [2, B, N, P, D], got {ps:?}");
        }
        let pk = ctx.slice(&past, 0, 0, 1, 1)?;
        let pv = ctx.slice(&past, 0, 1, 2, 1)?;
        let pk = ctx.reshape(&pk, &ps[1..])?;
        let pv = ctx.reshape(&pv, &ps[1..])?;
        k = ctx.concat(&[pk, k], 2)?;
        v = ctx.concat(&[pv, v], 2)?;
    }
    let (batch, s) = (xs[0], xs[1]);
    let t = ctx.shape(&k)?[2];
    let mut bias = None;
    if let Some(m) = n.opt(3) {
        bias = Some(key_mask(ctx, &m, batch, s, t, filter)?);
    }
    if let Some(ab) = n.opt(5) {
        let ab = ctx.cast(&ab, DType::F32)?;
        bias = Some(add_bias(ctx, bias, ab)?);
    }
    let head = sizes[0] / heads;
    let scale = scale_attr(n, head)?;
    let mask = Mask {
        bias,
        causal,
        filter,
    };
    let y = sdpa(ctx, &q, &k, &v, mask, scale)?;
    let y = merge_heads(ctx, &y)?;
    let present = if n.wants(1) {
        let pk = ctx.unsqueeze(&k, &[0])?;
        let pv = ctx.unsqueeze(&v, &[0])?;
        ctx.concat(&[pk, pv], 0)?
    } else {
        k
    };
    Ok(vec![y, present])
}

/// `MultiHeadAttention`: separate `[B, L, D]` query, key and value (or `[B, N, L, H]` key
/// and value), an optional packed bias, key padding mask, attention bias and
/// `past_key`/`past_value`; outputs the result and `present_key`/`present_value`.
pub fn multi_head_attention(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let q = float_input(ctx, n, 0)?;
    let heads = heads_attr(n, "num_heads")?;
    let causal = n.int("unidirectional", 0)? != 0;
    let filter = n.float("mask_filter_value", -10000.0)? as f64;
    let (Some(key), Some(value)) = (n.opt(1), n.opt(2)) else {
        unsupported!("packed query/key/value (key or value omitted)");
    };
    for (i, what) in [(8, "past_sequence_length"), (9, "cache_indirection")] {
        if n.opt(i).is_some() {
            unsupported!("input {i} ({what})");
        }
    }
    if n.wants(3) {
        unsupported!("output 3 (qk)");
    }
    let qs = ctx.shape(&q)?;
    if qs.len() != 3 {
        unsupported!("query of rank {} (packed layouts)", qs.len());
    }
    let (dq, dk, dv) = (qs[2], ctx.shape(&key)?[2], ctx.shape(&value)?[2]);
    let kv_split = ctx.rank(&key) == 4;
    if kv_split != (ctx.rank(&value) == 4) || !(kv_split || ctx.rank(&key) == 3) {
        unsupported!(
            "key of rank {} with value of rank {}",
            ctx.rank(&key),
            ctx.rank(&value)
        );
    }
    let (mut q, mut key, mut value) = (q, key, value);
    if let Some(b) = n.opt(3) {
        let bq = ctx.slice(&b, 0, 0, dq as i64, 1)?;
        q = ctx.add(&q, &bq)?;
        if !kv_split {
            let (a, c) = (dq as i64, (dq + dk) as i64);
            let bk = ctx.slice(&b, 0, a, c, 1)?;
            let bv = ctx.slice(&b, 0, c, c + dv as i64, 1)?;
            key = ctx.add(&key, &bk)?;
            value = ctx.add(&value, &bv)?;
        }
    }
    let q = split_heads(ctx, &q, heads)?;
    let (mut k, mut v) = if kv_split {
        (key, value)
    } else {
        (
            split_heads(ctx, &key, heads)?,
            split_heads(ctx, &value, heads)?,
        )
    };
    match (n.opt(6), n.opt(7)) {
        (Some(pk), Some(pv)) => {
            k = ctx.concat(&[pk, k], 2)?;
            v = ctx.concat(&[pv, v], 2)?;
        }
        (None, None) => {}
        _ => invalid!("past_key and past_value must be given together"),
    }
    let (batch, s, t) = (qs[0], qs[1], ctx.shape(&k)?[2]);
    let mut bias = None;
    if let Some(m) = n.opt(4) {
        bias = Some(key_mask(ctx, &m, batch, s, t, filter)?);
    }
    if let Some(ab) = n.opt(5) {
        let ab = ctx.cast(&ab, DType::F32)?;
        bias = Some(add_bias(ctx, bias, ab)?);
    }
    let head = ctx.shape(&q)?[3];
    let scale = scale_attr(n, head)?;
    let mask = Mask {
        bias,
        causal,
        filter,
    };
    let y = sdpa(ctx, &q, &k, &v, mask, scale)?;
    Ok(vec![merge_heads(ctx, &y)?, k, v])
}

/// `GroupQueryAttention`: queries (or packed q|k|v), `kv_num_heads` key/value heads, an
/// optional past cache concatenated in front, causal masking with the per-batch key
/// lengths `seqlens_k + 1`, an optional local window and rotary embedding; outputs the
/// result and the present key/value caches.
pub fn group_query_attention(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let query = float_input(ctx, n, 0)?;
    let heads = heads_attr(n, "num_heads")?;
    let kv_heads = heads_attr(n, "kv_num_heads")?;
    let window = n.int("local_window_size", -1)?;
    let do_rotary = n.int("do_rotary", 0)? != 0;
    let interleaved = n.int("rotary_interleaved", 0)? != 0;
    for attr in ["softcap"] {
        if n.float(attr, 0.0)? != 0.0 {
            unsupported!("{attr} != 0");
        }
    }
    for attr in ["smooth_softmax", "qk_output"] {
        if n.int(attr, 0)? != 0 {
            unsupported!("{attr} != 0");
        }
    }
    if n.opt(11).is_some() {
        unsupported!("input 11 (head_sink)");
    }
    if heads % kv_heads != 0 {
        invalid!("num_heads {heads} is not a multiple of kv_num_heads {kv_heads}");
    }
    let qs = ctx.shape(&query)?;
    if qs.len() != 3 {
        invalid!("query must be [B, S, D], got {qs:?}");
    }
    let (batch, s) = (qs[0], qs[1]);
    let (q, k, v) = match (n.opt(1), n.opt(2)) {
        (Some(k), Some(v)) => (query, k, v),
        (None, None) => {
            let total = heads + 2 * kv_heads;
            if qs[2] % total != 0 {
                invalid!("packed width {} is not divisible by {total} heads", qs[2]);
            }
            let h = (qs[2] / total) as i64;
            let (a, b) = (heads as i64 * h, (heads + kv_heads) as i64 * h);
            (
                ctx.slice(&query, 2, 0, a, 1)?,
                ctx.slice(&query, 2, a, b, 1)?,
                ctx.slice(&query, 2, b, qs[2] as i64, 1)?,
            )
        }
        _ => invalid!("key and value must be given together"),
    };
    let head = ctx.shape(&q)?[2] / heads;
    let seqlens = n.input(5)?;
    let seqlens = ctx.cast(&seqlens, DType::I64)?;
    let seqlens = ctx.reshape(&seqlens, &[batch, 1])?;
    let past = match (n.opt(3), n.opt(4)) {
        (Some(pk), Some(pv)) => Some((pk, pv)),
        (None, None) => None,
        _ => invalid!("past_key and past_value must be given together"),
    };
    let p = match &past {
        Some((pk, _)) => ctx.shape(pk)?[2],
        None => 0,
    };
    // to [B, S, N, H] for the rotary embedding, then [B, N, S, H]
    let mut q4 = ctx.reshape(&q, &[batch, s, heads, head])?;
    let mut k4 = ctx.reshape(&k, &[batch, s, kv_heads, head])?;
    let v4 = ctx.reshape(&v, &[batch, s, kv_heads, head])?;
    if do_rotary {
        let (Some(cos), Some(sin)) = (n.opt(7), n.opt(8)) else {
            invalid!("do_rotary needs cos_cache and sin_cache");
        };
        let pos = match n.opt(9) {
            Some(pos) => pos,
            None if past.is_none() => ctx.iota(s, DType::I64),
            None => {
                // positions continue each sequence: seqlens_k + 1 - S + i
                let i = ctx.iota(s, DType::I64);
                let i = ctx.binary_scalar(BinaryOp::Add, &i, 1.0 - s as f64)?;
                ctx.add(&seqlens, &i)?
            }
        };
        let cos = ctx.gather(&cos, &pos, 0)?;
        let sin = ctx.gather(&sin, &pos, 0)?;
        let rd = 2 * ctx.shape(&cos)?.last().copied().unwrap_or(0) as i64;
        q4 = rotate(ctx, &q4, &cos, &sin, rd, interleaved)?;
        k4 = rotate(ctx, &k4, &cos, &sin, rd, interleaved)?;
    }
    let q = ctx.transpose(&q4, &[0, 2, 1, 3])?;
    let mut k = ctx.transpose(&k4, &[0, 2, 1, 3])?;
    let mut v = ctx.transpose(&v4, &[0, 2, 1, 3])?;
    if let Some((pk, pv)) = past {
        k = ctx.concat(&[pk, k], 2)?;
        v = ctx.concat(&[pv, v], 2)?;
    }
    let t = p + s;
    // allowed[b, i, j]: causal over the cache, and j below the sequence's key count
    let mut allowed = causal_allowed(ctx, s, t)?;
    let j = ctx.iota(t, DType::I64);
    let filled = ctx.binary(BinaryOp::Le, &j, &seqlens)?; // [B, T]
    let filled = ctx.reshape(&filled, &[batch, 1, 1, t])?;
    allowed = ctx.binary(BinaryOp::And, &allowed, &filled)?;
    if window > 0 {
        let near: Vec<f64> = (0..s * t)
            .map(|x| f64::from(u8::from((x / t + p) as i64 - ((x % t) as i64) < window)))
            .collect();
        let near = ctx.tensor(DType::Bool, &[s, t], &near)?;
        allowed = ctx.binary(BinaryOp::And, &allowed, &near)?;
    }
    let mut bias = to_bias(ctx, &allowed, f32::MIN as f64)?;
    if let Some(ab) = n.opt(10) {
        let ab = ctx.cast(&ab, DType::F32)?;
        bias = ctx.add(&bias, &ab)?;
    }
    let scale = scale_attr(n, head)?;
    let kr = repeat_heads(ctx, &k, heads / kv_heads)?;
    let vr = repeat_heads(ctx, &v, heads / kv_heads)?;
    let mask = Mask {
        bias: Some(bias),
        causal: false,
        filter: f32::MIN as f64,
    };
    let y = sdpa(ctx, &q, &kr, &vr, mask, scale)?;
    Ok(vec![merge_heads(ctx, &y)?, k, v])
}
