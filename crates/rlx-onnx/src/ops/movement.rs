//! Data movement: transpose, concat, split, slice, gather, expand, tile, pad, the block
//! rearrangements (`DepthToSpace`, `SpaceToDepth`) and `ReverseSequence`.

use crate::ctx::{invalid, unsupported, Ctx, Fail, Val, R};
use crate::node::NodeIn;
use crate::ops::shape::to_dims;
use rlx_ir::{broadcast_shapes, Dim, Op, PadMode, Shape};

fn one(v: Val) -> R<Vec<Val>> {
    Ok(vec![v])
}

/// `Transpose` (`perm` defaults to reversing the dims).
pub fn transpose(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let r = ctx.rank(&x);
    let perm = match n.ints_opt("perm")? {
        Some(p) => p
            .iter()
            .map(|&a| ctx.axis(a, r))
            .collect::<R<Vec<usize>>>()?,
        None => (0..r).rev().collect(),
    };
    one(ctx.transpose(&x, &perm)?)
}

/// `Concat` along `axis`; empty inputs (a zero-size axis) are dropped.
pub fn concat(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let mut xs = Vec::new();
    for i in 0..n.n_inputs() {
        xs.push(n.input(i)?);
    }
    if xs.is_empty() {
        invalid!("Concat needs at least one input");
    }
    let axis = match n.int_opt("axis")? {
        Some(a) => a,
        None if n.opset < 4 => 1,
        None => invalid!("required attribute `axis` is missing"),
    };
    let a = ctx.axis(axis, ctx.rank(&xs[0]))?;
    let kept: Vec<Val> = xs
        .iter()
        .filter(|v| ctx.dims(v).get(a) != Some(&Dim::Static(0)))
        .cloned()
        .collect();
    if kept.is_empty() {
        return one(xs[0].clone());
    }
    one(ctx.concat(&kept, a)?)
}

/// `Split` into `split` sizes (attribute before opset 13, input after), `num_outputs`
/// (opset 18+), or equal parts.
pub fn split(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let dims = ctx.shape(&x)?;
    let a = ctx.axis(n.int("axis", 0)?, dims.len())?;
    let total = dims[a];
    let sizes = if n.opset >= 13 {
        match n.opt(1) {
            Some(s) => Some(ctx.const_ints(&s, "split")?),
            None => None,
        }
    } else {
        n.ints_opt("split")?
    };
    let sizes: Vec<usize> = match sizes {
        Some(s) => to_dims(&s)?,
        None => {
            let parts = if n.opset >= 18 {
                n.int_opt("num_outputs")?.map(|k| k as usize)
            } else {
                None
            }
            .unwrap_or(n.n_outputs());
            if parts == 0 {
                invalid!("split into zero parts");
            }
            let chunk = total.div_ceil(parts);
            (0..parts)
                .map(|i| chunk.min(total.saturating_sub(i * chunk)))
                .collect()
        }
    };
    if sizes.iter().sum::<usize>() != total {
        invalid!("split sizes {sizes:?} do not add up to {total}");
    }
    let mut start = 0i64;
    let mut out = Vec::new();
    for s in sizes {
        out.push(ctx.slice(&x, a, start, start + s as i64, 1)?);
        start += s as i64;
    }
    Ok(out)
}

/// `Slice`: attributes before opset 10, inputs after.
pub fn slice(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let r = ctx.rank(&x);
    let (starts, ends, axes, steps) = if n.opset < 10 {
        let starts = n.ints_opt("starts")?.unwrap_or_default();
        let ends = n.ints_opt("ends")?.unwrap_or_default();
        (starts, ends, n.ints_opt("axes")?, None)
    } else {
        let starts = ctx.const_ints(&n.input(1)?, "starts")?;
        let ends = ctx.const_ints(&n.input(2)?, "ends")?;
        let axes = match n.opt(3) {
            Some(v) => Some(ctx.const_ints(&v, "axes")?),
            None => None,
        };
        let steps = match n.opt(4) {
            Some(v) => Some(ctx.const_ints(&v, "steps")?),
            None => None,
        };
        (starts, ends, axes, steps)
    };
    let axes: Vec<i64> = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        invalid!("starts, ends, axes and steps have different lengths");
    }
    let mut ax = Vec::new();
    for &a in &axes {
        ax.push(ctx.axis(a, r)?);
    }
    if steps.contains(&0) {
        invalid!("a step is zero");
    }
    one(ctx.op(
        Op::Slice {
            axes: ax,
            starts,
            ends,
            steps,
        },
        &[&x],
    )?)
}

/// `Gather` along `axis`.
pub fn gather(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let (x, idx) = (n.input(0)?, n.input(1)?);
    let a = ctx.axis(n.int("axis", 0)?, ctx.rank(&x))?;
    one(ctx.gather(&x, &idx, a)?)
}

/// `Expand`: bidirectional broadcast with a shape known at import.
pub fn expand(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let shape = to_dims(&ctx.const_ints(&n.input(1)?, "the shape")?)?;
    let target = Shape::of(&shape);
    let Some(out) = broadcast_shapes(&ctx.ty(&x).shape, &target) else {
        invalid!("{} does not broadcast with {target}", ctx.ty(&x).shape);
    };
    let r = out.rank();
    let mut dims = ctx.dims(&x);
    while dims.len() < r {
        dims.insert(0, Dim::Static(1));
    }
    let x = ctx.reshape_dims(&x, dims)?;
    one(ctx.expand(&x, out.0)?)
}

/// `Tile`: each axis concatenated with itself `repeats` times.
pub fn tile(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let dims = ctx.shape(&x)?;
    let reps = to_dims(&ctx.const_ints(&n.input(1)?, "repeats")?)?;
    if reps.len() != dims.len() {
        invalid!("{} repeats for rank {}", reps.len(), dims.len());
    }
    let total: Vec<usize> = dims
        .iter()
        .zip(&reps)
        .map(|(&d, &k)| d.saturating_mul(k))
        .collect();
    if crate::ctx::checked_numel(&total).is_none() {
        unsupported!("Tile to {total:?} has more than 2^48 elements");
    }
    ctx.host_alloc(reps.iter().copied().max(), "Tile repeats")?;
    let mut y = x;
    for (a, &k) in reps.iter().enumerate() {
        if k == 0 {
            y = ctx.slice(&y, a, 0, 0, 1)?;
        } else if k > 1 {
            y = ctx.concat(&vec![y; k], a)?;
        }
    }
    one(y)
}

/// `Pad`: constant, reflect, edge and wrap modes; negative pads crop.
pub fn pad(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let dims = ctx.shape(&x)?;
    let r = dims.len();
    let mode = n.string("mode", "constant")?;
    let (pads, value, axes) = if n.opset < 11 {
        let pads = n.ints_opt("pads")?.unwrap_or_default();
        let v = n.float("value", 0.0)? as f64;
        (pads, v, None)
    } else {
        let pads = ctx.const_ints(&n.input(1)?, "pads")?;
        let v = match n.opt(2) {
            Some(c) => {
                let t = ctx.const_of(&c, "constant_value")?;
                if t.numel() == 0 {
                    0.0
                } else {
                    t.get_f64(0)
                }
            }
            None => 0.0,
        };
        let axes = match n.opt(3) {
            Some(a) => Some(ctx.const_ints(&a, "axes")?),
            None => None,
        };
        (pads, v, axes)
    };
    let axes: Vec<usize> = match axes {
        Some(a) => a.iter().map(|&x| ctx.axis(x, r)).collect::<R<_>>()?,
        None => (0..r).collect(),
    };
    if pads.len() != 2 * axes.len() {
        invalid!("{} pads for {} axes", pads.len(), axes.len());
    }
    let k = axes.len();
    let mut before = vec![0i64; r];
    let mut after = vec![0i64; r];
    for (i, &a) in axes.iter().enumerate() {
        before[a] = pads[i];
        after[a] = pads[i + k];
    }
    // Crop first (negative pads), then pad.
    let mut y = x;
    for a in 0..r {
        if before[a] < 0 || after[a] < 0 {
            let s = (-before[a]).max(0);
            let e = dims[a] as i64 - (-after[a]).max(0);
            y = ctx.slice(&y, a, s, e, 1)?;
        }
    }
    let pp: Vec<(usize, usize)> = (0..r)
        .map(|a| (before[a].max(0) as usize, after[a].max(0) as usize))
        .collect();
    if pp.iter().all(|&(b, a)| b == 0 && a == 0) {
        return one(y);
    }
    let mode = match mode.as_str() {
        "constant" => PadMode::Constant(value),
        "reflect" => PadMode::Reflect,
        "edge" => PadMode::Edge,
        "wrap" => return one(wrap_pad(ctx, &y, &pp)?),
        other => unsupported!("pad mode `{other}`"),
    };
    one(ctx.op(Op::Pad { pads: pp, mode }, &[&y])?)
}

/// Wrap padding: each axis gets its own tail in front and its head behind.
fn wrap_pad(ctx: &mut Ctx, x: &Val, pads: &[(usize, usize)]) -> R<Val> {
    let mut y = x.clone();
    for (a, &(b, e)) in pads.iter().enumerate() {
        if b == 0 && e == 0 {
            continue;
        }
        let d = ctx.shape(&y)?[a] as i64;
        if (b as i64) > d || (e as i64) > d {
            unsupported!("wrap padding larger than the dim");
        }
        let mut parts = Vec::new();
        if b > 0 {
            parts.push(ctx.slice(&y, a, d - b as i64, d, 1)?);
        }
        parts.push(y.clone());
        if e > 0 {
            parts.push(ctx.slice(&y, a, 0, e as i64, 1)?);
        }
        y = ctx.concat(&parts, a)?;
    }
    Ok(y)
}

/// `DepthToSpace` (DCR or CRD) and `SpaceToDepth`, as reshape-transpose-reshape.
pub fn depth_space(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let s = ctx.shape(&x)?;
    if s.len() != 4 {
        invalid!("input must be 4-D, got rank {}", s.len());
    }
    let b = n.int_opt("blocksize")?.unwrap_or(0);
    if b <= 0 {
        invalid!("blocksize must be positive");
    }
    let b = b as usize;
    let (nn, c, h, w) = (s[0], s[1], s[2], s[3]);
    if n.op_type() == "SpaceToDepth" {
        if h % b != 0 || w % b != 0 {
            invalid!("spatial dims {h}x{w} not divisible by {b}");
        }
        let perm = match n.string("mode", "DCR")?.as_str() {
            "DCR" => [0, 3, 5, 1, 2, 4],
            "CRD" => [0, 1, 3, 5, 2, 4],
            other => invalid!("mode `{other}` is neither DCR nor CRD"),
        };
        let y = ctx.reshape(&x, &[nn, c, h / b, b, w / b, b])?;
        let y = ctx.transpose(&y, &perm)?;
        return one(ctx.reshape(&y, &[nn, c * b * b, h / b, w / b])?);
    }
    if c % (b * b) != 0 {
        invalid!("channels {c} not divisible by blocksize^2");
    }
    let co = c / (b * b);
    let y = match n.string("mode", "DCR")?.as_str() {
        "DCR" => {
            let y = ctx.reshape(&x, &[nn, b, b, co, h, w])?;
            ctx.transpose(&y, &[0, 3, 4, 1, 5, 2])?
        }
        "CRD" => {
            let y = ctx.reshape(&x, &[nn, co, b, b, h, w])?;
            ctx.transpose(&y, &[0, 1, 4, 2, 5, 3])?
        }
        other => invalid!("mode `{other}` is neither DCR nor CRD"),
    };
    one(ctx.reshape(&y, &[nn, co, h * b, w * b])?)
}

/// `CenterCropPad`: each axis cropped or zero-padded around its center to the given size.
pub fn center_crop_pad(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let dims = ctx.shape(&x)?;
    let r = dims.len();
    let target = to_dims(&ctx.const_ints(&n.input(1)?, "the shape")?)?;
    let axes: Vec<usize> = match n.ints_opt("axes")? {
        Some(a) => a.iter().map(|&v| ctx.axis(v, r)).collect::<R<_>>()?,
        None => (0..r).collect(),
    };
    if axes.len() != target.len() {
        invalid!("{} sizes for {} axes", target.len(), axes.len());
    }
    let mut y = x;
    let mut pads = vec![(0usize, 0usize); r];
    for (&a, &t) in axes.iter().zip(&target) {
        let d = dims[a];
        if t < d {
            let start = (d - t) / 2;
            y = ctx.slice(&y, a, start as i64, (start + t) as i64, 1)?;
        } else if t > d {
            let before = (t - d) / 2;
            pads[a] = (before, t - d - before);
        }
    }
    if pads.iter().any(|&(b, e)| b > 0 || e > 0) {
        y = ctx.op(
            Op::Pad {
                pads,
                mode: PadMode::Constant(0.0),
            },
            &[&y],
        )?;
    }
    one(y)
}

/// `ReverseSequence`: along the time axis, the first `sequence_lens[b]` steps of each batch
/// entry in reverse order, one gather over [batch * time] rows (the lengths must be known
/// at import).
pub fn reverse_sequence(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let lens = ctx.const_ints(&n.input(1)?, "sequence_lens")?;
    let r = ctx.rank(&x);
    if r < 2 {
        invalid!("ReverseSequence needs rank 2 or more, got {r}");
    }
    let ba = ctx.axis(n.int("batch_axis", 1)?, r)?;
    let ta = ctx.axis(n.int("time_axis", 0)?, r)?;
    if !matches!((ba, ta), (0, 1) | (1, 0)) {
        invalid!("batch_axis {ba} and time_axis {ta} must be 0 and 1");
    }
    let xs = ctx.shape(&x)?;
    let (nb, nt) = (xs[ba], xs[ta]);
    if lens.len() != nb {
        invalid!(
            "sequence_lens has {} entries for a batch of {nb}",
            lens.len()
        );
    }
    let mut idx = Vec::with_capacity(nb * nt);
    for (b, &len) in lens.iter().enumerate() {
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l <= nt)
            .ok_or_else(|| {
                Fail::Invalid(format!("sequence_lens[{b}] = {len} is outside 0..={nt}"))
            })?;
        for t in 0..nt {
            let src = if t < len { len - 1 - t } else { t };
            idx.push((b * nt + src) as i64);
        }
    }
    // Batch first, time second (swapping the two is its own inverse).
    let mut perm: Vec<usize> = (0..r).collect();
    perm.swap(0, ba);
    let xt = ctx.transpose(&x, &perm)?;
    let mut rows = vec![nb * nt];
    rows.extend(&xs[2..]);
    let flat = ctx.reshape(&xt, &rows)?;
    let iv = ctx.ints(&idx);
    let g = ctx.gather(&flat, &iv, 0)?;
    let mut back = vec![nb, nt];
    back.extend(&xs[2..]);
    let g = ctx.reshape(&g, &back)?;
    Ok(vec![ctx.transpose(&g, &perm)?])
}
