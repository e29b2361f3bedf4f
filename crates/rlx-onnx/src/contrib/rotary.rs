//! ONNX Runtime's `RotaryEmbedding` (inputs x, position_ids, cos_cache, sin_cache — a
//! different order from the ONNX op): positions given per token `[B, S]` or as one start
//! offset, rotated by the shared [`crate::ops::rotary::rotate_any`].

use super::activation::float_input;
use crate::ctx::{invalid, unsupported, Ctx, Val, R};
use crate::node::NodeIn;
use rlx_ir::{BinaryOp, DType};

/// `RotaryEmbedding` (`com.microsoft`).
pub fn rotary_embedding(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = float_input(ctx, n, 0)?;
    let pos = n.input(1)?;
    let (cos, sin) = (n.input(2)?, n.input(3)?);
    let interleaved = n.int("interleaved", 0)? != 0;
    let mut heads = n.int("num_heads", 0)?;
    let rot_dim = n.int("rotary_embedding_dim", 0)?;
    if n.int("is_packed_batching", 0)? != 0 {
        unsupported!("is_packed_batching = 1");
    }
    if n.float("scale", 1.0)? != 1.0 {
        unsupported!("scale != 1");
    }
    let xs = ctx.shape(&x)?;
    let half = ctx.shape(&cos)?.last().copied().unwrap_or(0);
    if xs.len() == 3 && heads == 0 {
        // the head size is the rotated size
        let head = if rot_dim > 0 {
            rot_dim as usize
        } else {
            2 * half
        };
        if head == 0 || xs[2] % head != 0 {
            invalid!(
                "hidden size {} is not a multiple of the head size {head}",
                xs[2]
            );
        }
        heads = (xs[2] / head) as i64;
    }
    let seq = if xs.len() == 4 { xs[2] } else { xs[1] };
    let pos = if ctx.shape(&pos)?.iter().product::<usize>() == 1 && ctx.rank(&pos) <= 1 {
        // one start offset: positions offset + 0..seq
        let p = ctx.cast(&pos, DType::I64)?;
        let p = ctx.reshape(&p, &[])?;
        let i = ctx.iota(seq, DType::I64);
        ctx.binary(BinaryOp::Add, &i, &p)?
    } else {
        pos
    };
    let cos = ctx.gather(&cos, &pos, 0)?;
    let sin = ctx.gather(&sin, &pos, 0)?;
    let rd = if rot_dim > 0 {
        rot_dim
    } else {
        2 * half as i64
    };
    Ok(vec![crate::ops::rotary::rotate_any(
        ctx,
        &x,
        &cos,
        &sin,
        heads,
        rd,
        interleaved,
    )?])
}
