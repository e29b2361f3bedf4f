//! Control flow, resolved at import: `If` takes the branch its (known) condition selects,
//! or both branches joined by `where` when the condition is only known at run time; `Loop`
//! and `Scan` are unrolled over trip counts and sequence lengths known at import. Their
//! values may be sequences and optionals (a loop-carried sequence grown by
//! `SequenceInsert` is the common pattern of exported loops).

use crate::ctx::{invalid, unsupported, Ctx, Val, R};
use crate::import::subgraph;
use crate::node::NodeIn;
use crate::value::{expect_tensor, Value};
use rlx_ir::{DType, Tensor};

/// Most iterations a loop may unroll into.
const MAX_TRIPS: usize = 4096;

fn body<'a>(n: &NodeIn<'a>, name: &str) -> R<&'a crate::proto::GraphProto> {
    match n.graph_opt(name)? {
        Some(g) => Ok(g),
        None => invalid!("attribute `{name}` (a graph) is required"),
    }
}

/// `If`.
pub fn if_(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Value>> {
    let cond = n.input(0)?;
    let then_g = body(n, "then_branch")?;
    let else_g = body(n, "else_branch")?;
    if let Some(c) = ctx.try_const(&cond) {
        if c.numel() != 1 {
            invalid!("the condition must have one element");
        }
        let g = if c.get_f64(0) != 0.0 { then_g } else { else_g };
        return subgraph(ctx, &n.env, g, &[]);
    }
    let t = subgraph(ctx, &n.env, then_g, &[])?;
    let e = subgraph(ctx, &n.env, else_g, &[])?;
    if t.len() != e.len() {
        invalid!("branches have {} and {} outputs", t.len(), e.len());
    }
    let c = ctx.reshape(&cond, &[])?;
    let mut out = Vec::new();
    for (a, b) in t.iter().zip(&e) {
        out.push(join(ctx, &c, a, b)?);
    }
    Ok(out)
}

/// `where(c, a, b)` over values of one structure (tensors of one type, sequences of one
/// length, optionals both present or both empty).
fn join(ctx: &mut Ctx, c: &Val, a: &Value, b: &Value) -> R<Value> {
    Ok(match (a, b) {
        (Value::Tensor(x), Value::Tensor(y)) => {
            if ctx.ty(x) != ctx.ty(y) {
                unsupported!(
                    "a run-time condition choosing between {} and {}",
                    ctx.ty(x),
                    ctx.ty(y)
                );
            }
            Value::Tensor(ctx.where_(c, x, y)?)
        }
        (Value::Seq(xs), Value::Seq(ys)) if xs.len() == ys.len() => Value::Seq(
            xs.iter()
                .zip(ys)
                .map(|(x, y)| join(ctx, c, x, y))
                .collect::<R<_>>()?,
        ),
        (Value::Opt(None), Value::Opt(None)) => Value::Opt(None),
        (Value::Opt(Some(x)), Value::Opt(Some(y))) => {
            Value::Opt(Some(Box::new(join(ctx, c, x, y)?)))
        }
        _ => unsupported!(
            "a run-time condition choosing between a {} and a {} of another layout (the \
             result's structure would depend on run-time data)",
            a.kind(),
            b.kind()
        ),
    })
}

/// Stacks per-iteration values along a new `axis` (reversed when `reverse`).
fn stack(ctx: &mut Ctx, vals: &[Val], axis: usize, reverse: bool) -> R<Val> {
    let mut parts = Vec::with_capacity(vals.len());
    for v in vals {
        parts.push(ctx.unsqueeze(v, &[axis])?);
    }
    if reverse {
        parts.reverse();
    }
    ctx.concat(&parts, axis)
}

/// `Loop` with a trip count and/or conditions known at import.
pub fn loop_(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Value>> {
    let g = body(n, "body")?;
    let trips = match n.opt(0) {
        Some(m) => {
            let t = ctx.const_of(&m, "the trip count of Loop")?;
            Some(t.get_f64(0).max(0.0) as usize)
        }
        None => None,
    };
    let mut cond = match n.opt(1) {
        Some(c) => c,
        None => Val::konst(Tensor::scalar(DType::Bool, 1.0)),
    };
    let mut carried: Vec<Value> = (2..n.n_inputs()).map(|i| n.value(i)).collect::<R<_>>()?;
    let k = carried.len();
    let mut scans: Vec<Vec<Val>> = Vec::new();
    let mut i = 0usize;
    loop {
        if trips.is_some_and(|m| i >= m) {
            break;
        }
        let Some(c) = ctx.try_const(&cond) else {
            unsupported!("a Loop whose condition is only known at run time");
        };
        if c.numel() == 0 || c.get_f64(0) == 0.0 {
            break;
        }
        if i >= MAX_TRIPS {
            unsupported!("a Loop of more than {MAX_TRIPS} iterations");
        }
        let mut ins: Vec<Value> = vec![
            Val::konst(Tensor::scalar(DType::I64, i as f64)).into(),
            cond.clone().into(),
        ];
        ins.extend(carried.iter().cloned());
        let outs = subgraph(ctx, &n.env, g, &ins)?;
        if outs.len() < 1 + k {
            invalid!(
                "the Loop body returns {} values for {k} carried",
                outs.len()
            );
        }
        cond = expect_tensor(&outs[0], "the Loop condition")?;
        carried = outs[1..1 + k].to_vec();
        let s = outs[1 + k..]
            .iter()
            .map(|v| expect_tensor(v, "a Loop scan output"))
            .collect::<R<Vec<Val>>>()?;
        if scans.is_empty() {
            scans = vec![Vec::new(); s.len()];
        }
        for (j, v) in s.into_iter().enumerate() {
            scans[j].push(v);
        }
        i += 1;
    }
    let n_scan = g.output.len().saturating_sub(1 + k);
    if n_scan > 0 && scans.is_empty() {
        unsupported!("a Loop with scan outputs that runs zero times");
    }
    let mut out = carried;
    for s in &scans {
        out.push(stack(ctx, s, 0, false)?.into());
    }
    Ok(out)
}

/// `Scan`, unrolled over the scan axis (opset 8's batched form row by row).
pub fn scan(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    if n.opset < 9 {
        return scan8(ctx, n);
    }
    let g = body(n, "body")?;
    let Some(m) = n.int_opt("num_scan_inputs")? else {
        invalid!("num_scan_inputs is required");
    };
    let m = m as usize;
    let total = n.n_inputs();
    if m > total {
        invalid!("num_scan_inputs {m} exceeds the {total} inputs");
    }
    let n_state = total - m;
    let in_axes = n.ints_opt("scan_input_axes")?.unwrap_or_else(|| vec![0; m]);
    let in_dirs = n
        .ints_opt("scan_input_directions")?
        .unwrap_or_else(|| vec![0; m]);
    let n_out = g.output.len().saturating_sub(n_state);
    let out_axes = n
        .ints_opt("scan_output_axes")?
        .unwrap_or_else(|| vec![0; n_out]);
    let out_dirs = n
        .ints_opt("scan_output_directions")?
        .unwrap_or_else(|| vec![0; n_out]);
    if in_axes.len() != m
        || in_dirs.len() != m
        || out_axes.len() != n_out
        || out_dirs.len() != n_out
    {
        invalid!("scan axes and directions must match the scan inputs and outputs");
    }
    let states: Vec<Val> = (0..n_state).map(|i| n.input(i)).collect::<R<_>>()?;
    let xs: Vec<Val> = (n_state..total).map(|i| n.input(i)).collect::<R<_>>()?;
    let mut axes = Vec::new();
    let mut len = None;
    for (j, x) in xs.iter().enumerate() {
        let a = ctx.axis(in_axes[j], ctx.rank(x))?;
        let l = ctx.shape(x)?[a];
        if len.is_some_and(|p| p != l) {
            invalid!("scan inputs have different lengths");
        }
        len = Some(l);
        axes.push(a);
    }
    let len = len.unwrap_or(0);
    if len > MAX_TRIPS {
        unsupported!("a Scan of more than {MAX_TRIPS} steps");
    }
    let (states, outs) = unroll(ctx, n, g, states, &xs, &axes, &in_dirs, len, n_out)?;
    if n_out > 0 && len == 0 {
        unsupported!("a Scan over zero steps with scan outputs");
    }
    let mut result = states;
    for (j, o) in outs.iter().enumerate() {
        let r = ctx.rank(&o[0]) + 1;
        let a = ctx.axis(out_axes[j], r)?;
        result.push(stack(ctx, o, a, out_dirs[j] != 0)?);
    }
    Ok(result)
}

/// Runs a Scan body `len` times: the states threaded through, slice `t` of every scan input
/// (along its axis, reversed where its direction is non-zero) fed in; returns the final
/// states and each scan output's values per step.
#[allow(clippy::too_many_arguments)]
fn unroll(
    ctx: &mut Ctx,
    n: &NodeIn,
    g: &crate::proto::GraphProto,
    mut states: Vec<Val>,
    xs: &[Val],
    axes: &[usize],
    in_dirs: &[i64],
    len: usize,
    n_out: usize,
) -> R<(Vec<Val>, Vec<Vec<Val>>)> {
    let n_state = states.len();
    let mut outs: Vec<Vec<Val>> = vec![Vec::new(); n_out];
    for t in 0..len {
        let mut ins: Vec<Value> = states.iter().cloned().map(Value::from).collect();
        for (j, x) in xs.iter().enumerate() {
            let i = if in_dirs[j] != 0 { len - 1 - t } else { t } as i64;
            let s = ctx.slice(x, axes[j], i, i + 1, 1)?;
            let mut dims = ctx.dims(&s);
            dims.remove(axes[j]);
            ins.push(ctx.reshape_dims(&s, dims)?.into());
        }
        let res = subgraph(ctx, &n.env, g, &ins)?;
        if res.len() != n_state + n_out {
            invalid!("the Scan body returns {} values", res.len());
        }
        let res = res
            .iter()
            .map(|v| expect_tensor(v, "a Scan state or output"))
            .collect::<R<Vec<Val>>>()?;
        states = res[..n_state].to_vec();
        for (j, v) in res[n_state..].iter().enumerate() {
            outs[j].push(v.clone());
        }
    }
    Ok((states, outs))
}

/// Row `b` of `x` without its batch dim.
fn batch_row(ctx: &mut Ctx, x: &Val, b: usize) -> R<Val> {
    let s = ctx.slice(x, 0, b as i64, b as i64 + 1, 1)?;
    let mut dims = ctx.dims(&s);
    dims.remove(0);
    ctx.reshape_dims(&s, dims)
}

/// `Scan` of opset 8: batched (dim 0 of every state and scan input, time along dim 1),
/// unrolled per batch row; `sequence_lens` must be known and cover the whole length.
fn scan8(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let g = body(n, "body")?;
    let Some(m) = n.int_opt("num_scan_inputs")? else {
        invalid!("num_scan_inputs is required");
    };
    let m = m as usize;
    let total = n.n_inputs();
    if m == 0 || m + 1 > total {
        invalid!("num_scan_inputs {m} does not fit the {total} inputs");
    }
    let n_state = total - 1 - m;
    let dirs = n.ints_opt("directions")?.unwrap_or_else(|| vec![0; m]);
    if dirs.len() != m {
        invalid!("directions must have {m} values");
    }
    let states: Vec<Val> = (1..=n_state).map(|i| n.input(i)).collect::<R<_>>()?;
    let xs: Vec<Val> = (1 + n_state..total).map(|i| n.input(i)).collect::<R<_>>()?;
    let s0 = ctx.shape(&xs[0])?;
    if s0.len() < 2 {
        invalid!("scan inputs must be (batch, length, ...)");
    }
    let (batch, len) = (s0[0], s0[1]);
    for x in xs.iter().chain(&states) {
        let s = ctx.shape(x)?;
        if s.first() != Some(&batch) {
            invalid!("every state and scan input must have batch size {batch}");
        }
    }
    for x in &xs {
        if ctx.shape(x)?.get(1) != Some(&len) {
            invalid!("scan inputs have different lengths");
        }
    }
    if let Some(sl) = n.opt(0) {
        let sl = ctx.const_ints(&sl, "sequence_lens")?;
        if sl.iter().any(|&l| l != len as i64) {
            unsupported!("sequence_lens {sl:?} shorter than the scan length {len}");
        }
    }
    if len > MAX_TRIPS || batch.saturating_mul(len) > MAX_TRIPS {
        unsupported!("a Scan of more than {MAX_TRIPS} steps");
    }
    let n_out = g.output.len().saturating_sub(n_state);
    let mut st_rows: Vec<Vec<Val>> = vec![Vec::new(); n_state];
    let mut out_rows: Vec<Vec<Val>> = vec![Vec::new(); n_out];
    for b in 0..batch {
        let sb = states
            .iter()
            .map(|s| batch_row(ctx, s, b))
            .collect::<R<Vec<_>>>()?;
        let xb = xs
            .iter()
            .map(|x| batch_row(ctx, x, b))
            .collect::<R<Vec<_>>>()?;
        let axes = vec![0; m];
        let (sf, outs) = unroll(ctx, n, g, sb, &xb, &axes, &dirs, len, n_out)?;
        for (j, v) in sf.into_iter().enumerate() {
            st_rows[j].push(v);
        }
        for (j, o) in outs.iter().enumerate() {
            if o.is_empty() {
                unsupported!("a Scan over zero steps with scan outputs");
            }
            out_rows[j].push(stack(ctx, o, 0, false)?);
        }
    }
    let mut result = Vec::with_capacity(n_state + n_out);
    for rows in st_rows.iter().chain(&out_rows) {
        result.push(stack(ctx, rows, 0, false)?);
    }
    Ok(result)
}
