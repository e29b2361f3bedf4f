//! Ops whose result is a mask or a selection: `Dropout` (inference), `Trilu`, `OneHot`,
//! and the data-dependent ops folded at import (`NonZero`, `Compress`, `Unique`).

use crate::ctx::{invalid, unsupported, Ctx, Val, R};
use crate::node::NodeIn;
use rlx_ir::{BinaryOp, DType};

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

/// Row-major multi-index of flat position `i`.
fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut out = vec![0; shape.len()];
    for a in (0..shape.len()).rev() {
        if shape[a] > 0 {
            out[a] = i % shape[a];
            i /= shape[a];
        }
    }
    out
}

/// `NonZero` of a value known at import (its result shape depends on the values).
pub fn non_zero(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = ctx.const_of(
        &n.input(0)?,
        "the input of NonZero (its result shape depends on it)",
    )?;
    let shape = x.shape().to_vec();
    let hits: Vec<usize> = (0..x.numel()).filter(|&i| x.get_f64(i) != 0.0).collect();
    let mut v = vec![0.0; shape.len() * hits.len()];
    for (k, &i) in hits.iter().enumerate() {
        for (a, c) in unravel(i, &shape).into_iter().enumerate() {
            v[a * hits.len() + k] = c as f64;
        }
    }
    Ok(vec![ctx.tensor(
        DType::I64,
        &[shape.len(), hits.len()],
        &v,
    )?])
}

/// `Compress` with a condition known at import: a gather of the selected positions.
pub fn compress(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let cond = ctx.const_of(&n.input(1)?, "the condition of Compress")?;
    let (x, axis) = match n.int_opt("axis")? {
        Some(a) => {
            let r = ctx.rank(&x);
            (x, ctx.axis(a, r)?)
        }
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
    if n.int_opt("axis")?.is_some() {
        unsupported!("Unique along an axis");
    }
    let v = x.to_f64_vec();
    let mut firsts: Vec<usize> = Vec::new();
    for (i, a) in v.iter().enumerate() {
        if !firsts.iter().any(|&f| v[f] == *a) {
            firsts.push(i);
        }
    }
    if sorted {
        firsts.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    }
    let vals: Vec<f64> = firsts.iter().map(|&i| v[i]).collect();
    let inverse: Vec<f64> = v
        .iter()
        .map(|a| firsts.iter().position(|&f| v[f] == *a).unwrap_or(0) as f64)
        .collect();
    let counts: Vec<f64> = firsts
        .iter()
        .map(|&f| v.iter().filter(|&&a| a == v[f]).count() as f64)
        .collect();
    let k = firsts.len();
    let idx: Vec<f64> = firsts.iter().map(|&i| i as f64).collect();
    Ok(vec![
        ctx.tensor(x.dtype(), &[k], &vals)?,
        ctx.tensor(DType::I64, &[k], &idx)?,
        ctx.tensor(DType::I64, &[v.len()], &inverse)?,
        ctx.tensor(DType::I64, &[k], &counts)?,
    ])
}
