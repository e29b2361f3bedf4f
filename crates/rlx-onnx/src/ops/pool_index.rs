//! `MaxPool`'s second output (Indices) over IR slices and `where`: every kernel tap is a
//! strided slice of the input padded with -inf, compared with the pooled maximum; the first
//! tap in scan order that equals it (and lies inside the input) gives the flat input
//! position, `(n * C + c) * spatial + offset`, the offset row-major or, for
//! `storage_order = 1`, column-major over the spatial dims.

use crate::ctx::{checked_numel, invalid, unsupported, Ctx, Val, R};
use crate::ops::conv::Spatial;
use rlx_ir::{BinaryOp, DType, Op, PadMode};

/// Most kernel taps the indices are unrolled over.
const MAX_TAPS: usize = 4096;

/// The Indices of a max pooling of `x` (float, NC + spatial) whose result is `y`.
pub fn max_pool_indices(
    ctx: &mut Ctx,
    x: &Val,
    y: &Val,
    kernel: &[usize],
    sp: &Spatial,
    column_major: bool,
) -> R<Val> {
    let xs = ctx.shape(x)?;
    let ys = ctx.shape(y)?;
    let nsp = xs.len() - 2;
    if ys.len() != xs.len() || kernel.len() != nsp {
        invalid!("pooled shape {ys:?} does not fit input {xs:?}");
    }
    let taps = match checked_numel(kernel) {
        Some(t) if t <= MAX_TAPS => t,
        _ => unsupported!("MaxPool Indices over more than {MAX_TAPS} kernel taps"),
    };
    let outs = &ys[2..];
    let spatial = &xs[2..];
    // pad with -inf so every tap's slice has `outs` positions
    let mut pads = vec![(0usize, 0usize); xs.len()];
    for i in 0..nsp {
        let need = (outs[i].max(1) - 1) * sp.stride[i] + (kernel[i] - 1) * sp.dilation[i] + 1;
        let end = need.saturating_sub(spatial[i] + sp.begin[i]);
        pads[2 + i] = (sp.begin[i], end);
    }
    let xp = if pads.iter().any(|&(b, e)| b > 0 || e > 0) {
        ctx.op(
            Op::Pad {
                pads,
                mode: PadMode::Constant(f64::NEG_INFINITY),
            },
            &[x],
        )?
    } else {
        x.clone()
    };
    // flat-offset multiplier of each spatial dim
    let mult: Vec<usize> = (0..nsp)
        .map(|i| {
            if column_major {
                spatial[..i].iter().product()
            } else {
                spatial[i + 1..].iter().product()
            }
        })
        .collect();
    let rank = xs.len();
    let mut matches = Vec::with_capacity(taps);
    for tap in 0..taps {
        // the tap's position in the kernel, row-major
        let mut rem = tap;
        let mut t = vec![0usize; nsp];
        for i in (0..nsp).rev() {
            t[i] = rem % kernel[i];
            rem /= kernel[i];
        }
        let starts: Vec<i64> = (0..nsp).map(|i| (t[i] * sp.dilation[i]) as i64).collect();
        let ends: Vec<i64> = (0..nsp)
            .map(|i| starts[i] + ((outs[i].max(1) - 1) * sp.stride[i]) as i64 + 1)
            .collect();
        let v = ctx.op(
            Op::Slice {
                axes: (2..rank).collect(),
                starts,
                ends,
                steps: sp.stride.iter().map(|&s| s as i64).collect(),
            },
            &[&xp],
        )?;
        let mut hit = ctx.binary(BinaryOp::Eq, &v, y)?;
        // per dim: the input coordinate of each output position (clamped), whether inside
        let mut idx: Option<Val> = None;
        for i in 0..nsp {
            let mut coord = Vec::with_capacity(outs[i]);
            let mut inside = Vec::with_capacity(outs[i]);
            for o in 0..outs[i] {
                let p = (o * sp.stride[i] + t[i] * sp.dilation[i]) as i64 - sp.begin[i] as i64;
                let ok = p >= 0 && p < spatial[i] as i64;
                inside.push(if ok { 1.0 } else { 0.0 });
                coord.push((p.clamp(0, spatial[i] as i64 - 1) as usize * mult[i]) as f64);
            }
            let mut dims = vec![1usize; rank];
            dims[2 + i] = outs[i];
            let c = ctx.tensor(DType::I64, &dims, &coord)?;
            idx = Some(match idx {
                Some(a) => ctx.add(&a, &c)?,
                None => c,
            });
            if inside.contains(&0.0) {
                let m = ctx.tensor(DType::Bool, &dims, &inside)?;
                hit = ctx.binary(BinaryOp::And, &hit, &m)?;
            }
        }
        let idx = match idx {
            Some(i) => i,
            None => invalid!("MaxPool without spatial dims"),
        };
        matches.push((hit, idx));
    }
    // the first matching tap wins: fold from the last
    let mut acc = ctx.scalar(DType::I64, -1.0);
    for (hit, idx) in matches.into_iter().rev() {
        acc = ctx.where_(&hit, &idx, &acc)?;
    }
    // the (n, c) plane's offset
    let planes = xs[0] * xs[1];
    let plane = spatial.iter().product::<usize>();
    ctx.host_alloc(Some(planes), "MaxPool Indices' plane offsets")?;
    let base: Vec<f64> = (0..planes).map(|p| (p * plane) as f64).collect();
    let mut dims = vec![1usize; rank];
    dims[0] = xs[0];
    dims[1] = xs[1];
    let base = ctx.tensor(DType::I64, &dims, &base)?;
    let ydims = ctx.dims(y);
    let acc = ctx.expand(&acc, ydims)?;
    ctx.add(&acc, &base)
}
