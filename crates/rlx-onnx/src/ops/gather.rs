//! Index-driven gathers and scatters over one-hot comparisons with the position index:
//! `GatherElements`, `GatherND`, `ScatterElements` (and the old `Scatter`), `ScatterND`.
//! Memory is the output size times the indexed axis, fine for the shapes these ops see.

use crate::ctx::{invalid, unsupported, Ctx, Val, R};
use crate::node::NodeIn;
use crate::ops::reduce::axis_last;
use rlx_ir::{BinaryOp, DType, ReduceOp, Shape};

/// Indices with negatives wrapped by `size`, as i64.
fn wrap(ctx: &mut Ctx, idx: &Val, size: usize) -> R<Val> {
    let i = ctx.cast(idx, DType::I64)?;
    let zero = ctx.scalar(DType::I64, 0.0);
    let neg = ctx.binary(BinaryOp::Lt, &i, &zero)?;
    let s = ctx.scalar(DType::I64, size as f64);
    let w = ctx.add(&i, &s)?;
    ctx.where_(&neg, &w, &i)
}

/// `GatherElements`: out[.., i, ..] = data[.., idx[.., i, ..], ..] along `axis`.
pub fn gather_elements(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let (data, idx) = (n.input(0)?, n.input(1)?);
    let r = ctx.rank(&data);
    if ctx.rank(&idx) != r {
        invalid!("data and indices ranks differ");
    }
    let axis = ctx.axis(n.int("axis", 0)?, r)?;
    let ds = ctx.shape(&data)?;
    let is = ctx.shape(&idx)?;
    // Other dims of data are cut to those of the indices.
    let mut d = data;
    for a in 0..r {
        if a != axis && is[a] != ds[a] {
            if is[a] > ds[a] {
                invalid!("indices dim {a} ({}) exceeds data ({})", is[a], ds[a]);
            }
            d = ctx.slice(&d, a, 0, is[a] as i64, 1)?;
        }
    }
    let size = ds[axis];
    let idx = wrap(ctx, &idx, size)?;
    let (dl, inv) = axis_last(ctx, &d, axis)?; // [.., n]
    let (il, _) = axis_last(ctx, &idx, axis)?; // [.., m]
    let ri = ctx.rank(&il);
    let ie = ctx.unsqueeze(&il, &[ri])?; // [.., m, 1]
    let pos = ctx.iota(size, DType::I64);
    let hot = ctx.binary(BinaryOp::Eq, &ie, &pos)?; // [.., m, n]
    let de = ctx.unsqueeze(&dl, &[ri - 1])?; // [.., 1, n]
    let zero = ctx.scalar_like(&de, 0.0);
    let sel = ctx.where_(&hot, &de, &zero)?;
    let y = ctx.reduce(ReduceOp::Sum, &sel, &[ri], false)?;
    Ok(vec![ctx.transpose(&y, &inv)?])
}

/// `ScatterElements` / `Scatter`: data with `updates` written at `indices` along `axis`,
/// combined per `reduction` (none, add, mul, max, min).
pub fn scatter_elements(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let (data, idx, upd) = (n.input(0)?, n.input(1)?, n.input(2)?);
    let r = ctx.rank(&data);
    let axis = ctx.axis(n.int("axis", 0)?, r)?;
    let red = if n.op_type() == "Scatter" {
        "none".to_string()
    } else {
        n.string("reduction", "none")?
    };
    let ds = ctx.shape(&data)?;
    let is = ctx.shape(&idx)?;
    if is.len() != r || (0..r).any(|a| a != axis && is[a] != ds[a]) {
        unsupported!("indices {is:?} that do not cover data {ds:?} off the scatter axis");
    }
    let size = ds[axis];
    let idx = wrap(ctx, &idx, size)?;
    let (dl, inv) = axis_last(ctx, &data, axis)?; // [.., n]
    let (il, _) = axis_last(ctx, &idx, axis)?; // [.., m]
    let (ul, _) = axis_last(ctx, &upd, axis)?; // [.., m]
    let ri = ctx.rank(&il);
    let ie = ctx.unsqueeze(&il, &[ri])?; // [.., m, 1]
    let pos = ctx.iota(size, DType::I64);
    let hot = ctx.binary(BinaryOp::Eq, &ie, &pos)?; // [.., m, n]
    let ue = ctx.unsqueeze(&ul, &[ri])?; // [.., m, 1]
    let y = combine(ctx, &dl, &hot, &ue, ri - 1, &red)?;
    Ok(vec![ctx.transpose(&y, &inv)?])
}

/// Combines `data` [.., n] with updates [.., m, 1] selected by `hot` [.., m, n], reducing
/// over the m axis (`m_axis`).
fn combine(ctx: &mut Ctx, data: &Val, hot: &Val, upd: &Val, m_axis: usize, red: &str) -> R<Val> {
    let hit = ctx.cast(hot, DType::I64)?;
    let hit = ctx.reduce(ReduceOp::Max, &hit, &[m_axis], false)?;
    let hit = ctx.cast(&hit, DType::Bool)?;
    let (op, fill) = match red {
        "none" | "add" => (ReduceOp::Sum, 0.0),
        "mul" => (ReduceOp::Prod, 1.0),
        "max" => (ReduceOp::Max, f64::NEG_INFINITY),
        "min" => (ReduceOp::Min, f64::INFINITY),
        other => invalid!("reduction `{other}`"),
    };
    let d = ctx.dtype(data);
    let fill = if d.is_int() {
        match red {
            "max" => int_min(d),
            "min" => int_max(d),
            _ => fill,
        }
    } else {
        fill
    };
    let f = ctx.scalar(d, fill);
    let sel = ctx.where_(hot, upd, &f)?;
    let v = ctx.reduce(op, &sel, &[m_axis], false)?;
    let merged = match red {
        "none" => v,
        "add" => ctx.add(data, &v)?,
        "mul" => ctx.mul(data, &v)?,
        "max" => ctx.binary(BinaryOp::Max, data, &v)?,
        _ => ctx.binary(BinaryOp::Min, data, &v)?,
    };
    ctx.where_(&hit, &merged, data)
}

fn int_min(d: DType) -> f64 {
    match d {
        DType::I8 => -128.0,
        DType::U8 => 0.0,
        DType::I32 => i32::MIN as f64,
        _ => i64::MIN as f64,
    }
}

fn int_max(d: DType) -> f64 {
    match d {
        DType::I8 => 127.0,
        DType::U8 => 255.0,
        DType::I32 => i32::MAX as f64,
        _ => i64::MAX as f64,
    }
}

/// Linear positions of `indices` [.., k] into the first k dims of `shape`, with batch
/// dims folded in front: returns positions of shape idx[..-1] (i64).
fn linear_index(ctx: &mut Ctx, idx: &Val, shape: &[usize], batch_dims: usize) -> R<Val> {
    let is = ctx.shape(idx)?;
    let k = *is
        .last()
        .ok_or_else(|| crate::ctx::Fail::Invalid("indices must not be a scalar".into()))?;
    if batch_dims >= is.len() || is[..batch_dims] != shape[..batch_dims.min(shape.len())] {
        invalid!("batch_dims {batch_dims} must be below the indices rank and match the data's leading dims");
    }
    if batch_dims + k > shape.len() {
        invalid!(
            "indices index {k} dims past batch dims {batch_dims} of rank {}",
            shape.len()
        );
    }
    let idx = ctx.cast(idx, DType::I64)?;
    let dims = &shape[batch_dims..batch_dims + k];
    let mut strides = vec![1i64; k];
    for a in (0..k.saturating_sub(1)).rev() {
        strides[a] = strides[a + 1] * dims[a + 1] as i64;
    }
    let dimv: Vec<f64> = dims.iter().map(|&d| d as f64).collect();
    let dimt = ctx.tensor(DType::I64, &[k], &dimv)?;
    let zero = ctx.scalar(DType::I64, 0.0);
    let neg = ctx.binary(BinaryOp::Lt, &idx, &zero)?;
    let wrapped = ctx.add(&idx, &dimt)?;
    let idx = ctx.where_(&neg, &wrapped, &idx)?;
    let sv: Vec<f64> = strides.iter().map(|&s| s as f64).collect();
    let st = ctx.tensor(DType::I64, &[k], &sv)?;
    let prod = ctx.mul(&idx, &st)?;
    let r = ctx.rank(&prod);
    let mut lin = ctx.reduce(ReduceOp::Sum, &prod, &[r - 1], false)?;
    if batch_dims > 0 {
        // offset each batch element by its index times the indexed block size
        let block: usize = dims.iter().product();
        let bsz: usize = shape[..batch_dims].iter().product();
        let b = ctx.iota(bsz, DType::I64);
        let b = ctx.binary_scalar(BinaryOp::Mul, &b, block as f64)?;
        let mut bd: Vec<usize> = shape[..batch_dims].to_vec();
        bd.extend(std::iter::repeat_n(1, is.len() - 1 - batch_dims));
        let b = ctx.reshape(&b, &bd)?;
        lin = ctx.add(&lin, &b)?;
    }
    Ok(lin)
}

/// `GatherND` with `batch_dims`.
pub fn gather_nd(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let (data, idx) = (n.input(0)?, n.input(1)?);
    let b = n.int("batch_dims", 0)? as usize;
    let ds = ctx.shape(&data)?;
    let is = ctx.shape(&idx)?;
    let k = *is.last().unwrap_or(&0);
    let lin = linear_index(ctx, &idx, &ds, b)?;
    let rows: usize = ds[..b + k].iter().product();
    let rest: Vec<usize> = ds[b + k..].to_vec();
    let mut flat = vec![rows];
    flat.extend(&rest);
    let d2 = ctx.reshape(&data, &flat)?;
    let y = ctx.gather(&d2, &lin, 0)?;
    let mut out: Vec<usize> = is[..is.len() - 1].to_vec();
    out.extend(&rest);
    Ok(vec![ctx.reshape(&y, &out)?])
}

/// `ScatterND` with `reduction`.
pub fn scatter_nd(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let (data, idx, upd) = (n.input(0)?, n.input(1)?, n.input(2)?);
    let red = n.string("reduction", "none")?;
    let ds = ctx.shape(&data)?;
    let is = ctx.shape(&idx)?;
    let k = *is.last().unwrap_or(&0);
    let lin = linear_index(ctx, &idx, &ds, 0)?;
    let rows: usize = ds[..k].iter().product();
    let rest: usize = ds[k..].iter().product();
    let q: usize = is[..is.len() - 1].iter().product();
    let d2 = ctx.reshape(&data, &[rows, rest])?; // [P, S]
    let d2t = ctx.transpose(&d2, &[1, 0])?; // [S, P]
    let lin = ctx.reshape(&lin, &[q, 1])?;
    let pos = ctx.iota(rows, DType::I64);
    let hot = ctx.binary(BinaryOp::Eq, &lin, &pos)?; // [Q, P]
    let hot = ctx.reshape(&hot, &[1, q, rows])?;
    let u = ctx.reshape(&upd, &[q, rest])?;
    let u = ctx.transpose(&u, &[1, 0])?; // [S, Q]
    let u = ctx.unsqueeze(&u, &[2])?; // [S, Q, 1]
    let hot = ctx.expand(&hot, Shape::of(&[rest, q, rows]).0)?;
    let y = combine(ctx, &d2t, &hot, &u, 1, &red)?; // [S, P]
    let y = ctx.transpose(&y, &[1, 0])?;
    Ok(vec![ctx.reshape(&y, &ds)?])
}
