//! `RoiAlign` over IR gathers and elementwise rows. The sample points of every ROI, output
//! bin and sampling-grid position are computed elementwise from the ROIs (laid out as
//! `[rois, C, out_h, grid_h, out_w, grid_w]`), each of the four bilinear taps is one flat
//! gather at computed coordinates (`Ctx::gather_at`), and the weighted taps are averaged
//! (or max-combined) over the grid. With `sampling_ratio = 0` the grid of each ROI depends
//! on its size (`ceil(roi_size / out_size)`), so the ROIs must be known at import: the grid
//! is then the largest one and each ROI's unused grid positions are masked out.

use crate::ctx::{checked_numel, invalid, unsupported, Ctx, Val, R};
use crate::node::NodeIn;
use crate::ops::conv::pos;
use rlx_ir::{BinaryOp, DType, ReduceOp, UnaryOp};

/// Rank of the sample layout `[rois, C, out_h, grid_h, out_w, grid_w]`.
const RANK: usize = 6;

/// Most samples (ROIs × channels × bins × grid points) the decomposition materializes.
const MAX_SAMPLES: usize = 1 << 31;

/// Largest adaptive grid side per bin.
const MAX_GRID: usize = 1 << 12;

/// One axis (height or width) of the sampling: where the output bins and grid points lie.
struct Axis {
    /// output bins along this axis
    out: usize,
    /// layout axis of the bins
    out_axis: usize,
    /// layout axis of the grid points
    grid_axis: usize,
    /// grid points laid out (the largest grid of any ROI)
    grid: usize,
    /// each ROI's own grid, when it varies (adaptive sampling)
    per_roi: Option<Vec<usize>>,
}

/// `RoiAlign` (opset 10 and 16).
pub fn roi_align(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let (x, rois, bidx) = (n.input(0)?, n.input(1)?, n.input(2)?);
    let max = match n.string("mode", "avg")?.as_str() {
        "avg" => false,
        "max" => true,
        other => invalid!("mode `{other}` (avg or max)"),
    };
    let oh = pos(n.int("output_height", 1)?, "output_height")?;
    let ow = pos(n.int("output_width", 1)?, "output_width")?;
    let sr = n.int("sampling_ratio", 0)?;
    if !(0..=MAX_GRID as i64).contains(&sr) {
        invalid!("sampling_ratio must be in [0, {MAX_GRID}], got {sr}");
    }
    let scale = n.float("spatial_scale", 1.0)? as f64;
    if !scale.is_finite() {
        invalid!("spatial_scale must be finite, got {scale}");
    }
    let ctm_default = if n.opset >= 16 {
        "half_pixel"
    } else {
        "output_half_pixel"
    };
    let half_pixel = match n
        .string("coordinate_transformation_mode", ctm_default)?
        .as_str()
    {
        "half_pixel" => true,
        "output_half_pixel" => false,
        other => invalid!("coordinate_transformation_mode `{other}`"),
    };
    let xd = ctx.dtype(&x);
    if !xd.is_float() || xd.is_narrow() {
        unsupported!("dtype {xd} is not supported (float only)");
    }
    let xs = ctx.shape(&x)?;
    let rs = ctx.shape(&rois)?;
    let bs = ctx.shape(&bidx)?;
    if xs.len() != 4 || xs.contains(&0) {
        invalid!("X {xs:?} must be a non-empty [N, C, H, W]");
    }
    if rs.len() != 2 || rs[1] != 4 || bs != [rs[0]] {
        invalid!("rois {rs:?} must be [num_rois, 4] and batch_indices {bs:?} [num_rois]");
    }
    if !ctx.dtype(&bidx).is_int() || !ctx.dtype(&rois).is_float() {
        invalid!("rois must be float and batch_indices integer");
    }
    let (nb, c, h, w) = (xs[0], xs[1], xs[2], xs[3]);
    let nr = rs[0];
    if nr == 0 {
        return Ok(vec![ctx.tensor(xd, &[0, c, oh, ow], &[])?]);
    }
    // the arithmetic dtype of coordinates, weights and sums
    let cd = if xd == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    let offset = if half_pixel { 0.5 } else { 0.0 };
    let (gy, gx) = if sr > 0 {
        (None, None)
    } else {
        let Some(t) = ctx.try_const(&rois) else {
            unsupported!(
                "RoiAlign with sampling_ratio 0 (adaptive) needs the rois known at import \
                 (each ROI's sampling grid sets the shape); give sampling_ratio > 0"
            );
        };
        let (gy, gx) = adaptive_grids(&t.to_f64_vec(), cd, scale, offset, half_pixel, oh, ow)?;
        (Some(gy), Some(gx))
    };
    let side = |g: &Option<Vec<usize>>| match g {
        Some(v) => v.iter().copied().max().unwrap_or(0).max(1),
        None => sr as usize,
    };
    let ay = Axis {
        out: oh,
        out_axis: 2,
        grid_axis: 3,
        grid: side(&gy),
        per_roi: gy,
    };
    let ax = Axis {
        out: ow,
        out_axis: 4,
        grid_axis: 5,
        grid: side(&gx),
        per_roi: gx,
    };
    match checked_numel(&[nr, c, oh, ay.grid, ow, ax.grid]) {
        Some(s) if s <= MAX_SAMPLES => {}
        _ => unsupported!("RoiAlign would sample more than 2^31 points"),
    }
    // ROI corners, scaled and shifted: [nr, 1, 1, 1, 1, 1] each
    let rc = ctx.cast(&rois, cd)?;
    let corner = |ctx: &mut Ctx, j: i64| -> R<Val> {
        let v = ctx.slice(&rc, 1, j, j + 1, 1)?;
        let v = ctx.reshape(&v, &[nr, 1, 1, 1, 1, 1])?;
        let v = ctx.binary_scalar(BinaryOp::Mul, &v, scale)?;
        ctx.binary_scalar(BinaryOp::Sub, &v, offset)
    };
    let (x1, y1, x2, y2) = (
        corner(ctx, 0)?,
        corner(ctx, 1)?,
        corner(ctx, 2)?,
        corner(ctx, 3)?,
    );
    let (yy, my) = samples(ctx, &ay, &y1, &y2, half_pixel, nr, cd)?;
    let (xx, mx) = samples(ctx, &ax, &x1, &x2, half_pixel, nr, cd)?;
    let ty = bilinear_taps(ctx, &yy, h)?;
    let tx = bilinear_taps(ctx, &xx, w)?;
    // batch and channel coordinates
    let b = ctx.cast(&bidx, DType::I64)?;
    let b = ctx.reshape(&b, &[nr, 1, 1, 1, 1, 1])?;
    let b = ctx.binary_scalar(BinaryOp::Max, &b, 0.0)?;
    let b = ctx.binary_scalar(BinaryOp::Min, &b, (nb - 1) as f64)?;
    let ci = ctx.iota_along(c, 1, RANK)?;
    let xv = ctx.cast(&x, cd)?;
    let mut acc: Option<Val> = None;
    for (yi, wy) in &ty {
        for (xi, wx) in &tx {
            let v = ctx.gather_at(&xv, &[b.clone(), ci.clone(), yi.clone(), xi.clone()])?;
            let wt = ctx.mul(wy, wx)?;
            let t = ctx.mul(&v, &wt)?;
            acc = Some(match acc {
                None => t,
                Some(a) if max => ctx.binary(BinaryOp::Max, &a, &t)?,
                Some(a) => ctx.add(&a, &t)?,
            });
        }
    }
    let Some(mut acc) = acc else {
        invalid!("no interpolation taps");
    };
    // grid positions past a ROI's own grid count nowhere
    let mask = match (my, mx) {
        (Some(a), Some(b)) => Some(ctx.binary(BinaryOp::And, &a, &b)?),
        (only_y, only_x) => only_y.or(only_x),
    };
    if let Some(m) = &mask {
        let fill = ctx.scalar(cd, if max { f64::NEG_INFINITY } else { 0.0 });
        acc = ctx.where_(m, &acc, &fill)?;
    }
    let red = if max { ReduceOp::Max } else { ReduceOp::Sum };
    let mut y = ctx.reduce(red, &acc, &[3, 5], false)?; // [nr, C, oh, ow]
    match (&ay.per_roi, &ax.per_roi) {
        (Some(gy), Some(gx)) => {
            let counts: Vec<f64> = gy
                .iter()
                .zip(gx)
                .map(|(&a, &b)| a * b)
                .map(|n| n as f64)
                .collect();
            if max {
                // an ROI without samples gives 0
                if counts.contains(&0.0) {
                    let empty: Vec<f64> = counts.iter().map(|&n| f64::from(n == 0.0)).collect();
                    let e = ctx.tensor(DType::Bool, &[nr, 1, 1, 1], &empty)?;
                    let zero = ctx.scalar(cd, 0.0);
                    y = ctx.where_(&e, &zero, &y)?;
                }
            } else {
                let counts: Vec<f64> = counts.iter().map(|&n| n.max(1.0)).collect();
                let k = ctx.tensor(cd, &[nr, 1, 1, 1], &counts)?;
                y = ctx.div(&y, &k)?;
            }
        }
        _ if !max => y = ctx.binary_scalar(BinaryOp::Div, &y, (sr * sr) as f64)?,
        _ => {}
    }
    Ok(vec![ctx.cast(&y, xd)?])
}

/// Each ROI's sampling grid (rows, columns) when `sampling_ratio` is 0: `ceil(roi_size /
/// out_size)`, 0 for an empty ROI; computed in the arithmetic dtype as the reference does.
fn adaptive_grids(
    rois: &[f64],
    cd: DType,
    scale: f64,
    offset: f64,
    half_pixel: bool,
    oh: usize,
    ow: usize,
) -> R<(Vec<usize>, Vec<usize>)> {
    let f = |v: f64| if cd == DType::F32 { v as f32 as f64 } else { v };
    let grid = |a: f64, b: f64, out: usize| -> R<usize> {
        let (a, b) = (f(f(a * scale) - offset), f(f(b * scale) - offset));
        let mut len = f(b - a);
        if !half_pixel {
            len = len.max(1.0);
        }
        let g = f(len / out as f64).ceil();
        if g.is_nan() || g <= 0.0 {
            return Ok(0);
        }
        if g > MAX_GRID as f64 {
            unsupported!(
                "an ROI of size {len} would sample a grid of {g} per bin (at most {MAX_GRID})"
            );
        }
        Ok(g as usize)
    };
    let mut gy = Vec::with_capacity(rois.len() / 4);
    let mut gx = Vec::with_capacity(rois.len() / 4);
    for r in rois.chunks_exact(4) {
        gx.push(grid(r[0], r[2], ow)?);
        gy.push(grid(r[1], r[3], oh)?);
    }
    Ok((gy, gx))
}

/// The sample coordinates along one axis, `start + bin * (o + (g + 0.5) / grid)`, laid out
/// over the ROIs, bins and grid points; and, for per-ROI grids, which grid points a ROI uses.
fn samples(
    ctx: &mut Ctx,
    a: &Axis,
    start: &Val,
    end: &Val,
    half_pixel: bool,
    nr: usize,
    cd: DType,
) -> R<(Val, Option<Val>)> {
    let mut len = ctx.sub(end, start)?;
    if !half_pixel {
        len = ctx.binary_scalar(BinaryOp::Max, &len, 1.0)?;
    }
    let bin = ctx.binary_scalar(BinaryOp::Div, &len, a.out as f64)?;
    let o = ctx.iota_along(a.out, a.out_axis, RANK)?;
    let o = ctx.cast(&o, cd)?;
    let g = ctx.iota_along(a.grid, a.grid_axis, RANK)?;
    let g = ctx.cast(&g, cd)?;
    let g = ctx.binary_scalar(BinaryOp::Add, &g, 0.5)?;
    let (g, mask) = match &a.per_roi {
        None => (ctx.binary_scalar(BinaryOp::Div, &g, a.grid as f64)?, None),
        Some(per) => {
            let counts: Vec<f64> = per.iter().map(|&n| n.max(1) as f64).collect();
            let k = ctx.tensor(cd, &[nr, 1, 1, 1, 1, 1], &counts)?;
            let g = ctx.div(&g, &k)?;
            let mask = if per.iter().all(|&n| n == a.grid) {
                None
            } else {
                let mut dims = vec![1usize; RANK];
                dims[0] = nr;
                dims[a.grid_axis] = a.grid;
                let m: Vec<f64> = per
                    .iter()
                    .flat_map(|&n| (0..a.grid).map(move |i| f64::from(i < n)))
                    .collect();
                Some(ctx.tensor(DType::Bool, &dims, &m)?)
            };
            (g, mask)
        }
    };
    let pos = ctx.add(&o, &g)?;
    let off = ctx.mul(&pos, &bin)?;
    Ok((ctx.add(start, &off)?, mask))
}

/// The two bilinear taps (i64 index, weight) of coordinates `v` along an axis of `len`
/// pixels, as the reference computes them: outside `[-1, len]` both weights are 0, below 0
/// the coordinate is 0, from the last pixel on both taps are the last pixel.
fn bilinear_taps(ctx: &mut Ctx, v: &Val, len: usize) -> R<[(Val, Val); 2]> {
    let last = (len - 1) as f64;
    let lt = ctx.binary_scalar(BinaryOp::Lt, v, -1.0)?;
    let gt = ctx.binary_scalar(BinaryOp::Gt, v, len as f64)?;
    let outside = ctx.binary(BinaryOp::Or, &lt, &gt)?;
    let vc = ctx.binary_scalar(BinaryOp::Max, v, 0.0)?;
    let lo = ctx.unary(UnaryOp::Floor, &vc)?;
    let big = ctx.binary_scalar(BinaryOp::Ge, &lo, last)?;
    let last_v = ctx.scalar_like(v, last);
    let lo1 = ctx.binary_scalar(BinaryOp::Add, &lo, 1.0)?;
    let lo = ctx.where_(&big, &last_v, &lo)?;
    let hi = ctx.where_(&big, &last_v, &lo1)?;
    let vc = ctx.where_(&big, &lo, &vc)?;
    let l = ctx.sub(&vc, &lo)?;
    let one = ctx.scalar_like(v, 1.0);
    let hgt = ctx.sub(&one, &l)?;
    let zero = ctx.scalar_like(v, 0.0);
    let wl = ctx.where_(&outside, &zero, &hgt)?;
    let wh = ctx.where_(&outside, &zero, &l)?;
    let index = |ctx: &mut Ctx, i: &Val| -> R<Val> {
        let i = ctx.cast(i, DType::I64)?;
        let i = ctx.binary_scalar(BinaryOp::Max, &i, 0.0)?;
        ctx.binary_scalar(BinaryOp::Min, &i, last)
    };
    Ok([(index(ctx, &lo)?, wl), (index(ctx, &hi)?, wh)])
}
