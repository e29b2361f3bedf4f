//! Tensor ops of the `ai.onnx.ml` domain over IR ops: `Binarizer` (a comparison) and
//! `ArrayFeatureExtractor` (a gather along the last axis). `LabelEncoder`, which may map
//! strings, is in the value registry ([`crate::ops::values`]).

use crate::ctx::{unsupported, Ctx, Val, R};
use crate::node::NodeIn;
use rlx_ir::{BinaryOp, DType};

/// `Binarizer`: `x > threshold` as 1 or 0 in x's dtype.
pub fn binarizer(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let d = ctx.dtype(&x);
    if d.is_narrow() || d == DType::Bool {
        unsupported!("dtype {d} is not supported");
    }
    let th = n.float("threshold", 0.0)? as f64;
    let t = ctx.scalar(d, th);
    let gt = ctx.binary(BinaryOp::Gt, &x, &t)?;
    Ok(vec![ctx.cast(&gt, d)?])
}

/// `ArrayFeatureExtractor`: the last axis of `x` taken at the (flattened) indices; a 1-D
/// input gives one row, as ONNX Runtime does.
pub fn array_feature_extractor(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let (x, idx) = (n.input(0)?, n.input(1)?);
    if !ctx.dtype(&idx).is_int() {
        unsupported!("indices of dtype {}", ctx.dtype(&idx));
    }
    let k = ctx.shape(&idx)?.iter().product::<usize>();
    let idx = ctx.reshape(&idx, &[k])?;
    let x = if ctx.rank(&x) == 1 {
        ctx.unsqueeze(&x, &[0])?
    } else {
        x
    };
    let r = ctx.rank(&x);
    Ok(vec![ctx.gather(&x, &idx, r - 1)?])
}

/// The mapper for a tensor op of the `ai.onnx.ml` domain.
pub fn lookup(op_type: &str) -> Option<crate::ops::Mapper> {
    Some(match op_type {
        "Binarizer" => binarizer,
        "ArrayFeatureExtractor" => array_feature_extractor,
        _ => return None,
    })
}
