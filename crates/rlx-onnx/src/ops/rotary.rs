//! `RotaryEmbedding` (opset 23), as the ONNX reference computes it: halves or interleaved
//! pairs rotated by cos/sin caches (indexed by `position_ids` when given), optionally on a
//! prefix of each head. [`rotate`] is shared with ONNX Runtime's contrib
//! `RotaryEmbedding` and `GroupQueryAttention`.

use crate::ctx::{invalid, Ctx, Val, R};
use crate::node::NodeIn;

/// `RotaryEmbedding`.
pub fn rotary(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let (mut cos, mut sin) = (n.input(1)?, n.input(2)?);
    let interleaved = n.int("interleaved", 0)? != 0;
    let rot_dim = n.int("rotary_embedding_dim", 0)?;
    let heads = n.int("num_heads", 0)?;
    if let Some(pos) = n.opt(3) {
        cos = ctx.gather(&cos, &pos, 0)?;
        sin = ctx.gather(&sin, &pos, 0)?;
    }
    Ok(vec![rotate_any(
        ctx,
        &x,
        &cos,
        &sin,
        heads,
        rot_dim,
        interleaved,
    )?])
}

/// Rotates `x` given as `[batch, heads, seq, head]` or `[batch, seq, heads * head]` (with
/// `heads` > 0), keeping its layout.
pub fn rotate_any(
    ctx: &mut Ctx,
    x: &Val,
    cos: &Val,
    sin: &Val,
    heads: i64,
    rot_dim: i64,
    interleaved: bool,
) -> R<Val> {
    let orig = ctx.shape(x)?;
    // to [batch, seq, heads, head]
    let x4 = match orig.len() {
        4 => ctx.transpose(x, &[0, 2, 1, 3])?,
        3 => {
            if heads <= 0 || orig[2] % heads as usize != 0 {
                invalid!("3-D input needs num_heads dividing the hidden size");
            }
            let h = heads as usize;
            ctx.reshape(x, &[orig[0], orig[1], h, orig[2] / h])?
        }
        r => invalid!("input must be 3-D or 4-D, got rank {r}"),
    };
    let out = rotate(ctx, &x4, cos, sin, rot_dim, interleaved)?;
    if orig.len() == 3 {
        ctx.reshape(&out, &orig)
    } else {
        ctx.transpose(&out, &[0, 2, 1, 3])
    }
}

/// Rotates `x4` `[batch, seq, heads, head]` by `cos`/`sin` rows (already indexed by
/// position: `[seq, rd/2]` or `[batch, seq, rd/2]`) on its first `rot_dim` values of each
/// head (all of them for 0).
pub fn rotate(
    ctx: &mut Ctx,
    x4: &Val,
    cos: &Val,
    sin: &Val,
    rot_dim: i64,
    interleaved: bool,
) -> R<Val> {
    let s = ctx.shape(x4)?;
    let head = s[3];
    let rd = if rot_dim == 0 { head } else { rot_dim as usize };
    if rot_dim < 0 || rd > head || rd % 2 != 0 {
        invalid!("rotary_embedding_dim {rd} must be even and at most the head size {head}");
    }
    let half = rd / 2;
    if ctx.shape(cos)?.last() != Some(&half) || ctx.shape(sin)?.last() != Some(&half) {
        invalid!("cos/sin caches must end in rotary_embedding_dim / 2 = {half}");
    }
    let cr = ctx.rank(cos);
    let cos = ctx.unsqueeze(cos, &[cr - 1])?;
    let sin = ctx.unsqueeze(sin, &[cr - 1])?;
    let xr = ctx.slice(x4, 3, 0, rd as i64, 1)?;
    let (x1, x2) = if interleaved {
        (
            ctx.slice(&xr, 3, 0, rd as i64, 2)?,
            ctx.slice(&xr, 3, 1, rd as i64, 2)?,
        )
    } else {
        (
            ctx.slice(&xr, 3, 0, half as i64, 1)?,
            ctx.slice(&xr, 3, half as i64, rd as i64, 1)?,
        )
    };
    let a = ctx.mul(&cos, &x1)?;
    let b = ctx.mul(&sin, &x2)?;
    let real = ctx.sub(&a, &b)?;
    let c = ctx.mul(&sin, &x1)?;
    let d = ctx.mul(&cos, &x2)?;
    let imag = ctx.add(&c, &d)?;
    let rotated = if interleaved {
        let re = ctx.unsqueeze(&real, &[4])?;
        let im = ctx.unsqueeze(&imag, &[4])?;
        let both = ctx.concat(&[re, im], 4)?;
        ctx.reshape(&both, &[s[0], s[1], s[2], rd])?
    } else {
        ctx.concat(&[real, imag], 3)?
    };
    if rd < head {
        let rest = ctx.slice(x4, 3, rd as i64, head as i64, 1)?;
        ctx.concat(&[rotated, rest], 3)
    } else {
        Ok(rotated)
    }
}
