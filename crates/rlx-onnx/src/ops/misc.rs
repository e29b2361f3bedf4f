//! Ops whose result is a mask or a selection: `Dropout` (inference), `Trilu`, `OneHot`,
//! and the data-dependent ops (`NonZero`, `Compress`, `Unique`, `NonMaxSuppression`),
//! folded with `crate::host` when their inputs are known at import; a staged run
//! (`crate::stage`) calls these same mappers on the values it computed. `MaxUnpool`, a
//! scatter to the pooled positions, is a one-hot selection too.

use crate::ctx::{invalid, unsupported, Ctx, Fail, Val, MAX_ELEMENTS, R};
use crate::node::NodeIn;
use rlx_ir::{BinaryOp, DType, Op};

/// `Dropout` at inference: the identity and an all-true mask. Training mode with a
/// non-zero ratio is random, so it is unsupported.
pub fn dropout(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    if n.opset >= 12 {
        n.int_opt("seed")?;
        let training = match n.opt(2) {
            Some(t) => ctx.const_of(&t, "training_mode")?.get_f64(0) != 0.0,
            None => false,
        };
        let ratio = match n.opt(1) {
            Some(r) => ctx.const_of(&r, "ratio")?.get_f64(0),
            None => 0.5,
        };
        if training && ratio != 0.0 {
            unsupported!("training-mode dropout is random");
        }
    } else {
        n.float("ratio", 0.5)?;
        if n.opset < 7 && n.int("is_test", 0)? == 0 {
            unsupported!("training-mode dropout is random");
        }
    }
    let mut out = vec![x.clone()];
    if n.wants(1) {
        let dims = ctx.dims(&x);
        let t = ctx.scalar(DType::Bool, 1.0);
        let t = ctx.reshape(&t, &vec![1; dims.len()])?;
        out.push(ctx.expand(&t, dims)?);
    }
    Ok(out)
}

/// `Trilu`: keep the upper (or lower) triangle from diagonal `k`.
pub fn trilu(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let s = ctx.shape(&x)?;
    let r = s.len();
    if r < 2 {
        invalid!("input must be at least 2-D");
    }
    let k = match n.opt(1) {
        Some(v) => ctx.const_ints(&v, "k")?.first().copied().unwrap_or(0),
        None => 0,
    };
    let upper = n.int("upper", 1)? != 0;
    let (h, w) = (s[r - 2], s[r - 1]);
    ctx.host_alloc(h.checked_mul(w), "the Trilu mask")?;
    let v: Vec<f64> = (0..h * w)
        .map(|i| {
            let (row, col) = ((i / w) as i64, (i % w) as i64);
            (if upper {
                col - row >= k
            } else {
                col - row <= k
            }) as u8 as f64
        })
        .collect();
    let mask = ctx.tensor(DType::Bool, &[h, w], &v)?;
    let zero = ctx.scalar_like(&x, 0.0);
    Ok(vec![ctx.where_(&mask, &x, &zero)?])
}

/// `OneHot(indices, depth, values)` along `axis`; negative indices count from `depth`.
pub fn one_hot(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let idx = n.input(0)?;
    let depth = ctx.const_of(&n.input(1)?, "depth")?;
    if depth.numel() != 1 {
        invalid!("depth must have one element");
    }
    let depth = depth.get_f64(0);
    if depth < 1.0 {
        invalid!("depth must be positive");
    }
    let depth = ctx.host_alloc(Some(depth as usize), "OneHot depth")?;
    let values = n.input(2)?;
    let r = ctx.rank(&idx);
    let axis = ctx.axis(n.int("axis", -1)?, r + 1)?;
    let idx = ctx.cast(&idx, DType::I64)?;
    let d = ctx.scalar(DType::I64, depth as f64);
    let zero = ctx.scalar(DType::I64, 0.0);
    let neg = ctx.binary(BinaryOp::Lt, &idx, &zero)?;
    let wrapped = ctx.add(&idx, &d)?;
    let idx = ctx.where_(&neg, &wrapped, &idx)?;
    let idx = ctx.unsqueeze(&idx, &[axis])?;
    let io = ctx.iota(depth, DType::I64);
    let mut dims = vec![1; r + 1];
    dims[axis] = depth;
    let io = ctx.reshape(&io, &dims)?;
    let hot = ctx.binary(BinaryOp::Eq, &idx, &io)?;
    let off = ctx.slice(&values, 0, 0, 1, 1)?;
    let on = ctx.slice(&values, 0, 1, 2, 1)?;
    let off = ctx.reshape(&off, &[])?;
    let on = ctx.reshape(&on, &[])?;
    Ok(vec![ctx.where_(&hot, &on, &off)?])
}

/// A host result as a constant, or the operands' problem as an invalid node.
fn host<T>(r: crate::host::HostResult<T>) -> R<T> {
    r.map_err(Fail::Invalid)
}

/// `NonZero` of a value known at import (a staged run evaluates it on the host with the
/// same function when it is computed at run time).
pub fn non_zero(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = ctx.const_of(
        &n.input(0)?,
        "the input of NonZero (its result shape depends on it)",
    )?;
    Ok(vec![Val::konst(host(crate::host::non_zero(&x))?)])
}

/// `Compress`: with the condition known at import, a gather of the selected positions (or
/// the selection itself when the input is known too).
pub fn compress(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let cond = ctx.const_of(&n.input(1)?, "the condition of Compress")?;
    let axis = match n.int_opt("axis")? {
        Some(a) => Some(ctx.axis(a, ctx.rank(&x))?),
        None => None,
    };
    if let Val::Const { t, .. } = &x {
        return Ok(vec![Val::konst(host(crate::host::compress(
            t, &cond, axis,
        ))?)]);
    }
    let (x, axis) = match axis {
        Some(a) => (x, a),
        None => {
            let numel: usize = ctx.shape(&x)?.iter().product();
            (ctx.reshape(&x, &[numel])?, 0)
        }
    };
    let len = ctx.shape(&x)?[axis];
    let sel: Vec<i64> = (0..cond.numel().min(len))
        .filter(|&i| cond.get_f64(i) != 0.0)
        .map(|i| i as i64)
        .collect();
    let idx = ctx.ints(&sel);
    Ok(vec![ctx.gather(&x, &idx, axis)?])
}

/// `Unique` of a value known at import: values, first indices, inverse indices, counts.
pub fn unique(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = ctx.const_of(
        &n.input(0)?,
        "the input of Unique (its result shape depends on it)",
    )?;
    let sorted = n.int("sorted", 1)? != 0;
    let axis = match n.int_opt("axis")? {
        Some(a) => Some(host(crate::host::axis(a, x.shape().len(), "axis"))?),
        None => None,
    };
    let u = host(crate::host::unique(&x, sorted, axis))?;
    Ok(vec![
        Val::konst(u.values),
        Val::konst(u.first),
        Val::konst(u.inverse),
        Val::konst(u.counts),
    ])
}

/// `NonMaxSuppression` of boxes and scores known at import (or on the host in a staged
/// run): `[selected, 3]` rows of (batch, class, box).
pub fn non_max_suppression(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let boxes = ctx.const_of(&n.input(0)?, "the boxes of NonMaxSuppression")?;
    let scores = ctx.const_of(&n.input(1)?, "the scores of NonMaxSuppression")?;
    let mut scalar = |i: usize, what: &str| -> R<Option<f64>> {
        let Some(v) = n.opt(i) else {
            return Ok(None);
        };
        let t = ctx.const_of(&v, what)?;
        match t.numel() {
            0 => Ok(None),
            1 => Ok(Some(t.get_f64(0))),
            _ => invalid!("{what} must have one element, got shape {:?}", t.shape()),
        }
    };
    let max_per_class = scalar(2, "max_output_boxes_per_class")?.unwrap_or(0.0) as i64;
    let iou_threshold = scalar(3, "iou_threshold")?.unwrap_or(0.0) as f32;
    let score_threshold = scalar(4, "score_threshold")?.map(|s| s as f32);
    let center_point_box = match n.int("center_point_box", 0)? {
        0 => false,
        1 => true,
        c => invalid!("center_point_box must be 0 or 1, got {c}"),
    };
    let p = crate::host::NmsParams {
        max_per_class,
        iou_threshold,
        score_threshold,
        center_point_box,
    };
    Ok(vec![Val::konst(host(crate::host::non_max_suppression(
        &boxes, &scores, p,
    ))?)])
}

/// One-hot scatters past this many comparisons (inputs times outputs) are refused.
const UNPOOL_LIMIT: usize = 1 << 26;

/// `MaxUnpool`: the values written at their flat `indices` into zeros of the shape the
/// pooling inverts (a one-hot comparison and sum), then zero-padded at the end of each
/// dim to `output_shape` when given (ONNX's reference semantics).
pub fn max_unpool(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let (x, idx) = (n.input(0)?, n.input(1)?);
    let xs = ctx.shape(&x)?;
    let nsp = xs.len().saturating_sub(2);
    if nsp == 0 || ctx.shape(&idx)? != xs {
        invalid!("X {xs:?} must be (N, C, spatial...) with indices of the same shape");
    }
    let Some(kernel) = n.ints_opt("kernel_shape")? else {
        invalid!("kernel_shape is required");
    };
    let strides = n.ints_opt("strides")?.unwrap_or_else(|| vec![1; nsp]);
    let pads = n.ints_opt("pads")?.unwrap_or_else(|| vec![0; 2 * nsp]);
    if kernel.len() != nsp || strides.len() != nsp || pads.len() != 2 * nsp {
        invalid!(
            "kernel_shape, strides and pads must have {nsp} (pads {}) values",
            2 * nsp
        );
    }
    let big = i32::MAX as i64;
    if kernel
        .iter()
        .chain(&strides)
        .chain(&pads)
        .any(|&v| v > big || v < 0)
    {
        invalid!("kernel_shape {kernel:?}, strides {strides:?}, pads {pads:?} out of range");
    }
    let mut inferred = xs[..2].to_vec();
    for i in 0..nsp {
        let v = (xs[i + 2] as i128 - 1) * strides[i] as i128 - (pads[i] + pads[i + nsp]) as i128
            + kernel[i] as i128;
        if v <= 0 || v > MAX_ELEMENTS as i128 || strides[i] <= 0 {
            invalid!("kernel_shape {kernel:?}, strides {strides:?}, pads {pads:?} give no output");
        }
        inferred.push(v as usize);
    }
    let m: usize = xs.iter().product();
    let Some(p) =
        crate::ctx::checked_numel(&inferred).filter(|&p| m.saturating_mul(p) <= UNPOOL_LIMIT)
    else {
        unsupported!(
            "MaxUnpool of {m} values into {inferred:?} (the one-hot scatter is capped at 2^26 comparisons)"
        );
    };
    let xf = ctx.reshape(&x, &[m, 1])?;
    let i = ctx.cast(&idx, DType::I64)?;
    let i = ctx.reshape(&i, &[m, 1])?;
    let pos = ctx.iota(p, DType::I64);
    let hot = ctx.binary(BinaryOp::Eq, &i, &pos)?; // (m, p)
    let zero = ctx.scalar_like(&x, 0.0);
    let sel = ctx.where_(&hot, &xf, &zero)?;
    let y = ctx.reduce(rlx_ir::ReduceOp::Sum, &sel, &[0], false)?;
    let y = ctx.reshape(&y, &inferred)?;
    let Some(shape) = n.opt(2) else {
        return Ok(vec![y]);
    };
    let shape = ctx.const_ints(&shape, "output_shape")?;
    if shape.len() != inferred.len() || shape.iter().zip(&inferred).any(|(&s, &d)| s < d as i64) {
        invalid!("output_shape {shape:?} must be at least {inferred:?}");
    }
    let pads = shape
        .iter()
        .zip(&inferred)
        .map(|(&s, &d)| (0, s as usize - d))
        .collect();
    Ok(vec![ctx.op(
        Op::Pad {
            pads,
            mode: rlx_ir::PadMode::Constant(0.0),
        },
        &[&y],
    )?])
}
