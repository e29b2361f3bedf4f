//! Sequence ops, resolved at import: a sequence is a list of the importer's tensors
//! (`Value::Seq`) whose length is known as the model is read, so `SequenceAt` with a
//! known position just picks a tensor and the graph stays a plain tensor graph. A position
//! known only at run time is supported where the result's shape does not depend on it
//! (`SequenceAt` over elements of one type: a gather from the stacked elements).

use crate::ctx::{invalid, unsupported, Ctx, Val, R};
use crate::import::subgraph;
use crate::node::NodeIn;
use crate::value::{expect_tensor, Value};
use rlx_ir::{DType, Dim};

/// The sequence in input `i`.
fn seq_input(n: &NodeIn, i: usize) -> R<Vec<Value>> {
    match n.value(i)? {
        Value::Seq(items) => Ok(items),
        other => invalid!("input {i} must be a sequence, got a {}", other.kind()),
    }
}

/// A position in a sequence of `len` (negative counts from the back); `end_ok` admits
/// `len` itself (an insertion at the end).
fn position(ctx: &mut Ctx, p: &Val, len: usize, end_ok: bool) -> R<usize> {
    let Some(t) = ctx.try_const(p) else {
        unsupported!(
            "a sequence position computed at run time (the sequence's layout must be known at \
             import)"
        );
    };
    if t.numel() != 1 || !t.dtype().is_int() {
        invalid!(
            "the position must be one integer, got {}{:?}",
            t.dtype(),
            t.shape()
        );
    }
    let raw = t.get_f64(0) as i64;
    let idx = if raw < 0 { raw + len as i64 } else { raw };
    let top = if end_ok { len as i64 } else { len as i64 - 1 };
    if idx < 0 || idx > top {
        invalid!("position {raw} is out of range for a sequence of {len}");
    }
    Ok(idx as usize)
}

/// `SequenceEmpty`: an empty sequence (its `dtype` only types the elements to come).
pub fn sequence_empty(_ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Value>> {
    n.int_opt("dtype")?;
    Ok(vec![Value::Seq(Vec::new())])
}

/// `SequenceConstruct`: the inputs as a sequence.
pub fn sequence_construct(_ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Value>> {
    let items = (0..n.n_inputs()).map(|i| n.value(i)).collect::<R<_>>()?;
    Ok(vec![Value::Seq(items)])
}

/// `SequenceInsert`: a tensor inserted at `position` (default: the end).
pub fn sequence_insert(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Value>> {
    let mut items = seq_input(n, 0)?;
    let x = n.value(1)?;
    let at = match n.opt(2) {
        Some(p) => position(ctx, &p, items.len(), true)?,
        None => items.len(),
    };
    items.insert(at, x);
    Ok(vec![Value::Seq(items)])
}

/// `SequenceErase`: the element at `position` (default: the last) removed.
pub fn sequence_erase(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Value>> {
    let mut items = seq_input(n, 0)?;
    if items.is_empty() {
        invalid!("erasing from an empty sequence");
    }
    let at = match n.opt(1) {
        Some(p) => position(ctx, &p, items.len(), false)?,
        None => items.len() - 1,
    };
    items.remove(at);
    Ok(vec![Value::Seq(items)])
}

/// `SequenceLength`: the number of elements, an i64 scalar known at import.
pub fn sequence_length(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Value>> {
    let items = seq_input(n, 0)?;
    Ok(vec![ctx.scalar(DType::I64, items.len() as f64).into()])
}

/// `SequenceAt`: the element at `position`; a run-time position over elements of one
/// type gathers from the stacked elements.
pub fn sequence_at(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Value>> {
    let items = seq_input(n, 0)?;
    let p = n.input(1)?;
    if items.is_empty() {
        invalid!("SequenceAt on an empty sequence");
    }
    if ctx.try_const(&p).is_some() {
        let at = position(ctx, &p, items.len(), false)?;
        return Ok(vec![items[at].clone()]);
    }
    let tensors = items
        .iter()
        .map(|v| expect_tensor(v, "a sequence element read at a run-time position"))
        .collect::<R<Vec<Val>>>()?;
    let ty = ctx.ty(&tensors[0]);
    if tensors.iter().any(|t| ctx.ty(t) != ty) {
        unsupported!(
            "SequenceAt at a run-time position over elements of different types (the result's \
             shape would depend on run-time data)"
        );
    }
    let stacked = stack(ctx, &tensors, 0)?;
    // a negative position counts from the back: p + len where p < 0
    let p = ctx.cast(&p, DType::I64)?;
    let p = ctx.reshape(&p, &[])?;
    let zero = ctx.scalar(DType::I64, 0.0);
    let neg = ctx.binary(rlx_ir::BinaryOp::Lt, &p, &zero)?;
    let wrapped = ctx.binary_scalar(rlx_ir::BinaryOp::Add, &p, tensors.len() as f64)?;
    let idx = ctx.where_(&neg, &wrapped, &p)?;
    Ok(vec![ctx.gather(&stacked, &idx, 0)?.into()])
}

/// Stacks tensors along a new `axis`.
fn stack(ctx: &mut Ctx, xs: &[Val], axis: usize) -> R<Val> {
    let mut parts = Vec::with_capacity(xs.len());
    for x in xs {
        parts.push(ctx.unsqueeze(x, &[axis])?);
    }
    ctx.concat(&parts, axis)
}

/// `SplitToSequence`: pieces of `split` sizes (a scalar: pieces of that size, the last
/// one shorter), or pieces of 1 along `axis`, squeezed unless `keepdims`.
pub fn split_to_sequence(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Value>> {
    let x = n.input(0)?;
    let dims = ctx.dims(&x);
    let a = ctx.axis(n.int("axis", 0)?, dims.len())?;
    let keepdims = n.int("keepdims", 1)? != 0;
    let Dim::Static(total) = dims[a] else {
        unsupported!("SplitToSequence along a symbolic dim ({})", dims[a]);
    };
    let split = match n.opt(1) {
        Some(s) => {
            let t = ctx.const_of(&s, "the split of SplitToSequence")?;
            let v: Vec<i64> = t.to_f64_vec().into_iter().map(|x| x as i64).collect();
            Some((t.shape().is_empty(), v))
        }
        None => None,
    };
    let sizes: Vec<usize> = match &split {
        None => vec![1; total],
        Some((true, v)) => {
            let k = v[0];
            if k <= 0 {
                invalid!("split size {k} must be positive");
            }
            let k = k as usize;
            (0..total.div_ceil(k))
                .map(|i| k.min(total - i * k))
                .collect()
        }
        Some((false, v)) => {
            if v.iter().any(|&s| s < 0) || v.iter().sum::<i64>() != total as i64 {
                invalid!("split sizes {v:?} do not add up to {total}");
            }
            v.iter().map(|&s| s as usize).collect()
        }
    };
    let mut items = Vec::with_capacity(sizes.len());
    let mut start = 0i64;
    for s in sizes {
        let mut piece = ctx.slice(&x, a, start, start + s as i64, 1)?;
        start += s as i64;
        if split.is_none() && !keepdims {
            let mut d = ctx.dims(&piece);
            d.remove(a);
            piece = ctx.reshape_dims(&piece, d)?;
        }
        items.push(Value::Tensor(piece));
    }
    Ok(vec![Value::Seq(items)])
}

/// `ConcatFromSequence`: the elements joined along `axis`, or stacked along a new one
/// (`new_axis`).
pub fn concat_from_sequence(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Value>> {
    let items = seq_input(n, 0)?;
    let Some(axis) = n.int_opt("axis")? else {
        invalid!("required attribute `axis` is missing");
    };
    let new_axis = n.int("new_axis", 0)? != 0;
    let xs = items
        .iter()
        .map(|v| expect_tensor(v, "an element of ConcatFromSequence"))
        .collect::<R<Vec<Val>>>()?;
    if xs.is_empty() {
        invalid!("ConcatFromSequence of an empty sequence");
    }
    let r = ctx.rank(&xs[0]);
    let out = if new_axis {
        let a = ctx.axis(axis, r + 1)?;
        stack(ctx, &xs, a)?
    } else {
        let a = ctx.axis(axis, r)?;
        ctx.concat(&xs, a)?
    };
    Ok(vec![out.into()])
}

/// `SequenceMap`: the body applied to each position of the sequence inputs (other inputs
/// passed whole); every output is a sequence.
pub fn sequence_map(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Value>> {
    let Some(g) = n.graph_opt("body")? else {
        invalid!("attribute `body` (a graph) is required");
    };
    let first = seq_input(n, 0)?;
    let len = first.len();
    let mut ins: Vec<Value> = Vec::with_capacity(n.n_inputs());
    for i in 0..n.n_inputs() {
        let v = n.value(i)?;
        if let Value::Seq(items) = &v {
            if items.len() != len {
                invalid!("sequence inputs of lengths {len} and {}", items.len());
            }
        }
        ins.push(v);
    }
    let mut outs: Vec<Vec<Value>> = vec![Vec::with_capacity(len); g.output.len()];
    for pos in 0..len {
        let args: Vec<Value> = ins
            .iter()
            .map(|v| match v {
                Value::Seq(items) => items[pos].clone(),
                other => other.clone(),
            })
            .collect();
        let res = subgraph(ctx, &n.env, g, &args)?;
        for (o, v) in outs.iter_mut().zip(res) {
            o.push(v);
        }
    }
    Ok(outs.into_iter().map(Value::Seq).collect())
}
