//! Reductions: the `Reduce*` family, arg-reductions, softmax and its relatives.

use crate::ctx::{invalid, unsupported, Ctx, Fail, Val, R};
use crate::node::NodeIn;
use rlx_ir::{ArgOp, BinaryOp, DType, Op, ReduceOp, UnaryOp};

fn one(v: Val) -> R<Vec<Val>> {
    Ok(vec![v])
}

/// The opset from which each reduction takes its axes as an input.
fn axes_input_since(op: &str) -> i64 {
    if op == "ReduceSum" {
        13
    } else {
        18
    }
}

/// `ReduceSum`, `ReduceMean`, `ReduceMax`, `ReduceMin`, `ReduceProd`, `ReduceL1`,
/// `ReduceL2`, `ReduceLogSum`, `ReduceLogSumExp`, `ReduceSumSquare`.
pub fn reduce(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let r = ctx.rank(&x);
    let keep = n.int("keepdims", 1)? != 0;
    let axes = if n.opset >= axes_input_since(n.op_type()) {
        let noop = n.int("noop_with_empty_axes", 0)? != 0;
        let axes = match n.opt(1) {
            Some(a) => ctx.const_ints(&a, "axes")?,
            None => vec![],
        };
        if axes.is_empty() && noop {
            return one(match n.op_type() {
                "ReduceSumSquare" => ctx.mul(&x, &x)?,
                "ReduceL1" => ctx.unary(UnaryOp::Abs, &x)?,
                "ReduceL2" => {
                    let sq = ctx.mul(&x, &x)?;
                    ctx.unary(UnaryOp::Sqrt, &sq)?
                }
                "ReduceLogSum" => ctx.unary(UnaryOp::Log, &x)?,
                "ReduceLogSumExp" => {
                    let e = ctx.unary(UnaryOp::Exp, &x)?;
                    ctx.unary(UnaryOp::Log, &e)?
                }
                _ => x,
            });
        }
        axes
    } else {
        n.ints_opt("axes")?.unwrap_or_default()
    };
    let axes = if axes.is_empty() {
        (0..r).collect()
    } else {
        ctx.axes(&axes, r)?
    };
    let (op, pre) = match n.op_type() {
        "ReduceSum" => (ReduceOp::Sum, None),
        "ReduceMean" => (ReduceOp::Mean, None),
        "ReduceMax" => (ReduceOp::Max, None),
        "ReduceMin" => (ReduceOp::Min, None),
        "ReduceProd" => (ReduceOp::Prod, None),
        "ReduceL1" => (ReduceOp::Sum, Some("abs")),
        "ReduceL2" | "ReduceSumSquare" => (ReduceOp::Sum, Some("square")),
        "ReduceLogSum" => (ReduceOp::Sum, None),
        "ReduceLogSumExp" => (ReduceOp::Sum, Some("exp")),
        other => unsupported!("{other}"),
    };
    let d = ctx.dtype(&x);
    if d == DType::Bool {
        if !matches!(op, ReduceOp::Max | ReduceOp::Min) || pre.is_some() {
            unsupported!("{} on bool", n.op_type());
        }
        // max is "any", min is "all": exact through u8.
        let xu = ctx.cast(&x, DType::U8)?;
        let y = ctx.reduce(op, &xu, &axes, keep)?;
        return one(ctx.cast(&y, DType::Bool)?);
    }
    if n.op_type() == "ReduceLogSumExp" {
        // subtract the max for stability: log(sum(exp(x - m))) + m
        if !d.is_float() {
            unsupported!("ReduceLogSumExp on {d}");
        }
        let m = ctx.reduce(ReduceOp::Max, &x, &axes, true)?;
        let finite = ctx.binary(BinaryOp::Eq, &m, &m)?;
        let inf = ctx.unary(UnaryOp::Abs, &m)?;
        let is_inf = ctx.binary_scalar(BinaryOp::Eq, &inf, f64::INFINITY)?;
        let zero = ctx.scalar_like(&m, 0.0);
        let not_inf = ctx.unary(UnaryOp::Not, &is_inf)?;
        let ok = ctx.binary(BinaryOp::And, &finite, &not_inf)?;
        let m = ctx.where_(&ok, &m, &zero)?;
        let s = ctx.sub(&x, &m)?;
        let e = ctx.unary(UnaryOp::Exp, &s)?;
        let sum = ctx.reduce(ReduceOp::Sum, &e, &axes, keep)?;
        let l = ctx.unary(UnaryOp::Log, &sum)?;
        let m = if keep {
            m
        } else {
            squeeze_axes(ctx, &m, &axes)?
        };
        return one(ctx.add(&l, &m)?);
    }
    let y = match pre {
        Some("abs") => ctx.unary(UnaryOp::Abs, &x)?,
        Some("square") => ctx.mul(&x, &x)?,
        _ => x,
    };
    let y = ctx.reduce(op, &y, &axes, keep)?;
    one(match n.op_type() {
        "ReduceL2" => ctx.unary(UnaryOp::Sqrt, &y)?,
        "ReduceLogSum" => ctx.unary(UnaryOp::Log, &y)?,
        _ => y,
    })
}

/// Drops the (size-1) `axes` of a keepdims result.
fn squeeze_axes(ctx: &mut Ctx, x: &Val, axes: &[usize]) -> R<Val> {
    let dims: Vec<_> = ctx
        .dims(x)
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !axes.contains(i))
        .map(|(_, d)| d)
        .collect();
    ctx.reshape_dims(x, dims)
}

/// `ArgMax` / `ArgMin` with `select_last_index` (reverse, reduce, flip the index back).
pub fn arg(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let r = ctx.rank(&x);
    let axis = ctx.axis(n.int("axis", 0)?, r)?;
    let keepdims = n.int("keepdims", 1)? != 0;
    let last = n.int("select_last_index", 0)? != 0;
    let op = if n.op_type() == "ArgMax" {
        ArgOp::ArgMax
    } else {
        ArgOp::ArgMin
    };
    if !last {
        return one(ctx.op(Op::ArgReduce { op, axis, keepdims }, &[&x])?);
    }
    let size = ctx.shape(&x)?[axis] as f64;
    let rev = ctx.slice(&x, axis, -1, i64::MIN, -1)?;
    let i = ctx.op(Op::ArgReduce { op, axis, keepdims }, &[&rev])?;
    let last = ctx.scalar(DType::I64, size - 1.0);
    one(ctx.sub(&last, &i)?)
}

/// `Softmax`, `LogSoftmax`, `Hardmax`: per axis from opset 13, over the flattened trailing
/// dims (coerced to 2-D at `axis`) before.
pub fn softmax(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let r = ctx.rank(&x);
    let new = n.opset >= 13;
    let axis = ctx.axis(n.int("axis", if new { -1 } else { 1 })?, r.max(1))?;
    if !ctx.dtype(&x).is_float() {
        unsupported!("dtype {} (float only)", ctx.dtype(&x));
    }
    let (y, shape) = if new {
        (x, None)
    } else {
        let dims = ctx.shape(&x)?;
        let outer: usize = dims[..axis].iter().product();
        let inner: usize = dims[axis..].iter().product();
        (ctx.reshape(&x, &[outer, inner])?, Some(dims))
    };
    let a = if new { axis } else { 1 };
    let out = match n.op_type() {
        "Softmax" => ctx.op(Op::Softmax { axis: a }, &[&y])?,
        "LogSoftmax" => ctx.op(Op::LogSoftmax { axis: a }, &[&y])?,
        _ => {
            let am = ctx.op(
                Op::ArgReduce {
                    op: ArgOp::ArgMax,
                    axis: a,
                    keepdims: true,
                },
                &[&y],
            )?;
            let len = ctx.shape(&y)?[a];
            let rank = ctx.rank(&y);
            let io = ctx.iota(len, DType::I64);
            let mut dims = vec![1; rank];
            dims[a] = len;
            let io = ctx.reshape(&io, &dims)?;
            let eq = ctx.binary(BinaryOp::Eq, &io, &am)?;
            ctx.cast(&eq, ctx.dtype(&y))?
        }
    };
    one(match shape {
        Some(s) => ctx.reshape(&out, &s)?,
        None => out,
    })
}

/// Moves `axis` to the end: (the moved value, the permutation that undoes it).
pub fn axis_last(ctx: &mut Ctx, x: &Val, axis: usize) -> R<(Val, Vec<usize>)> {
    let r = ctx.rank(x);
    let mut perm: Vec<usize> = (0..r).filter(|&i| i != axis).collect();
    perm.push(axis);
    let mut inv = vec![0; r];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i;
    }
    Ok((ctx.transpose(x, &perm)?, inv))
}

/// A constant `[n, n]` bool mask `m[i][j] = f(i, j)`.
pub fn pair_mask(ctx: &mut Ctx, n: usize, f: impl Fn(usize, usize) -> bool) -> R<Val> {
    ctx.host_alloc(n.checked_mul(n), "a pairwise mask")?;
    let v: Vec<f64> = (0..n * n).map(|k| f(k / n, k % n) as u8 as f64).collect();
    ctx.tensor(DType::Bool, &[n, n], &v)
}

/// `CumSum` / `CumProd` with `exclusive` and `reverse`: a masked reduction over pairs.
pub fn cumulative(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let axis = ctx.const_ints(&n.input(1)?, "axis")?;
    if axis.len() != 1 {
        invalid!("axis must have one element");
    }
    let axis = ctx.axis(axis[0], ctx.rank(&x))?;
    let exclusive = n.int("exclusive", 0)? != 0;
    let reverse = n.int("reverse", 0)? != 0;
    let (xl, inv) = axis_last(ctx, &x, axis)?;
    let len = ctx.shape(&xl)?.last().copied().unwrap_or(1);
    let mask = pair_mask(ctx, len, |i, j| match (reverse, exclusive) {
        (false, false) => j <= i,
        (false, true) => j < i,
        (true, false) => j >= i,
        (true, true) => j > i,
    })?;
    let r = ctx.rank(&xl);
    let xj = ctx.unsqueeze(&xl, &[r - 1])?; // [.., 1, n]: j along the last dim
    let (op, fill) = if n.op_type() == "CumSum" {
        (ReduceOp::Sum, 0.0)
    } else {
        (ReduceOp::Prod, 1.0)
    };
    let fill = ctx.scalar_like(&x, fill);
    let sel = ctx.where_(&mask, &xj, &fill)?;
    let y = ctx.reduce(op, &sel, &[r], false)?;
    one(ctx.transpose(&y, &inv)?)
}

/// `TopK`: ranks from pairwise comparisons (ties keep the lower index first), then the
/// element of each rank.
pub fn top_k(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let k = ctx.const_ints(&n.input(1)?, "K")?;
    let [k] = k[..] else {
        invalid!("K must have one element, got {}", k.len());
    };
    let axis = ctx.axis(n.int("axis", -1)?, ctx.rank(&x))?;
    let largest = n.int("largest", 1)? != 0;
    n.int("sorted", 1)?; // unsorted output may be in any order, so sorted is a valid answer
    if let Val::Const { t, .. } = &x {
        // known input (or a staged run's host step): sort on the host
        let (v, i) = crate::host::top_k(t, k, axis, largest).map_err(Fail::Invalid)?;
        return Ok(vec![Val::konst(v), Val::konst(i)]);
    }
    let (xl, inv) = axis_last(ctx, &x, axis)?;
    let len = ctx.shape(&xl)?.last().copied().unwrap_or(0);
    if k < 0 || k as usize > len {
        invalid!("K = {k} out of range for an axis of {len}");
    }
    let r = ctx.rank(&xl);
    let xi = ctx.unsqueeze(&xl, &[r])?; // [.., n, 1]
    let xj = ctx.unsqueeze(&xl, &[r - 1])?; // [.., 1, n]
    let cmp = if largest { BinaryOp::Gt } else { BinaryOp::Lt };
    let better = ctx.binary(cmp, &xj, &xi)?;
    let eq = ctx.binary(BinaryOp::Eq, &xj, &xi)?;
    let lower = pair_mask(ctx, len, |i, j| j < i)?;
    let tie = ctx.binary(BinaryOp::And, &eq, &lower)?;
    let before = ctx.binary(BinaryOp::Or, &better, &tie)?;
    let before = ctx.cast(&before, DType::I64)?;
    let rank = ctx.reduce(ReduceOp::Sum, &before, &[r], false)?; // [.., n]
    let rank = ctx.unsqueeze(&rank, &[r - 1])?; // [.., 1, n]
    let ks = ctx.iota(k as usize, DType::I64);
    let ks = ctx.reshape(&ks, &[k as usize, 1])?;
    let sel = ctx.binary(BinaryOp::Eq, &rank, &ks)?; // [.., k, n]
    let zero = ctx.scalar_like(&x, 0.0);
    let vals = ctx.where_(&sel, &xj, &zero)?;
    let vals = ctx.reduce(ReduceOp::Sum, &vals, &[r], false)?;
    let idx = ctx.iota(len, DType::I64);
    let zi = ctx.scalar(DType::I64, 0.0);
    let idx = ctx.where_(&sel, &idx, &zi)?;
    let idx = ctx.reduce(ReduceOp::Sum, &idx, &[r], false)?;
    Ok(vec![
        ctx.transpose(&vals, &inv)?,
        ctx.transpose(&idx, &inv)?,
    ])
}
