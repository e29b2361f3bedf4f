//! `Resize` (and the old `Upsample`): interpolation is separable, so each resized axis is
//! one matrix product with an `[out, in]` weight matrix computed at import, ported from
//! the ONNX reference (`_interpolate_1d_along_axis`): nearest, linear and cubic modes, every
//! coordinate transformation, antialiasing, `exclude_outside`, and `tf_crop_and_resize`
//! extrapolation as a mask.

use crate::ctx::{invalid, unsupported, Ctx, Val, R};
use crate::node::NodeIn;
use crate::ops::reduce::axis_last;
use rlx_ir::{BinaryOp, DType};

/// How one axis is resized.
struct AxisPlan {
    /// weights, row-major `[out, in]`
    weights: Vec<f64>,
    /// output positions whose source lies outside the input (tf_crop_and_resize)
    extrapolated: Vec<bool>,
    out: usize,
}

struct Params {
    mode: String,
    coord: String,
    nearest: String,
    cubic_a: f64,
    exclude_outside: bool,
    antialias: bool,
}

fn coeffs(p: &Params, ratio: f64, scale: f64) -> R<Vec<f64>> {
    let a = p.cubic_a;
    Ok(match (p.mode.as_str(), p.antialias) {
        ("nearest", _) => {
            if ratio.fract() == 0.0 {
                return Ok(vec![0.0, 1.0]);
            }
            let (lo, hi) = match p.nearest.as_str() {
                "round_prefer_floor" => (ratio <= 0.5, ratio > 0.5),
                "round_prefer_ceil" => (ratio < 0.5, ratio >= 0.5),
                "floor" => (true, false),
                "ceil" => (false, true),
                other => invalid!("nearest_mode `{other}`"),
            };
            vec![lo as u8 as f64, hi as u8 as f64]
        }
        ("linear", false) => vec![1.0 - ratio, ratio],
        ("linear", true) => {
            let s = scale.min(1.0);
            let start = (-1.0 / s).floor() as i64 + 1;
            let footprint = 2 - 2 * start;
            let c: Vec<f64> = (start..start + footprint)
                .map(|i| (1.0 - ((i as f64 - ratio) * s).abs()).clamp(0.0, 1.0))
                .collect();
            let sum: f64 = c.iter().sum();
            c.into_iter().map(|x| x / sum).collect()
        }
        ("cubic", false) => {
            let r = ratio;
            vec![
                ((a * (r + 1.0) - 5.0 * a) * (r + 1.0) + 8.0 * a) * (r + 1.0) - 4.0 * a,
                ((a + 2.0) * r - (a + 3.0)) * r * r + 1.0,
                ((a + 2.0) * (1.0 - r) - (a + 3.0)) * (1.0 - r) * (1.0 - r) + 1.0,
                ((a * ((1.0 - r) + 1.0) - 5.0 * a) * ((1.0 - r) + 1.0) + 8.0 * a)
                    * ((1.0 - r) + 1.0)
                    - 4.0 * a,
            ]
        }
        ("cubic", true) => {
            let s = scale.min(1.0);
            let f = |x: f64| {
                let x = x.abs();
                if x <= 1.0 {
                    (a + 2.0) * x * x * x - (a + 3.0) * x * x + 1.0
                } else if x < 2.0 {
                    a * x * x * x - 5.0 * a * x * x + 8.0 * a * x - 4.0 * a
                } else {
                    0.0
                }
            };
            let start = (-2.0 / s).floor() as i64 + 1;
            let end = 2 - start;
            let c: Vec<f64> = (start..end).map(|i| f(s * (i as f64 - ratio))).collect();
            let sum: f64 = c.iter().sum();
            c.into_iter().map(|x| x / sum).collect()
        }
        (other, _) => invalid!("mode `{other}`"),
    })
}

/// The weights of one axis of `input` elements resized to `out` with `scale`.
fn plan_axis(
    p: &Params,
    input: usize,
    out: usize,
    scale: f64,
    roi: Option<(f64, f64)>,
) -> R<AxisPlan> {
    let out_w = scale * input as f64;
    let mut weights = vec![0.0; out * input];
    let mut extrapolated = vec![false; out];
    for (o, ext) in extrapolated.iter_mut().enumerate() {
        let y = o as f64;
        let x = match p.coord.as_str() {
            "align_corners" => {
                if out_w == 1.0 {
                    0.0
                } else {
                    y * (input as f64 - 1.0) / (out_w - 1.0)
                }
            }
            "asymmetric" => y / scale,
            "tf_crop_and_resize" => {
                let Some((r0, r1)) = roi else {
                    invalid!("tf_crop_and_resize needs roi");
                };
                let x = if out_w == 1.0 {
                    (r1 - r0) * (input as f64 - 1.0) / 2.0
                } else {
                    y * (r1 - r0) * (input as f64 - 1.0) / (out_w - 1.0)
                };
                let x = x + r0 * (input as f64 - 1.0);
                *ext = x < 0.0 || x > input as f64 - 1.0;
                x
            }
            "pytorch_half_pixel" => {
                if out_w == 1.0 {
                    -0.5
                } else {
                    (y + 0.5) / scale - 0.5
                }
            }
            "half_pixel" => (y + 0.5) / scale - 0.5,
            "half_pixel_symmetric" => {
                let adjustment = out as f64 / out_w;
                let center = input as f64 / 2.0;
                center * (1.0 - adjustment) + (y + 0.5) / scale - 0.5
            }
            "tf_half_pixel_for_nn" => (y + 0.5) / scale,
            other => invalid!("coordinate_transformation_mode `{other}`"),
        };
        let xi = x.floor();
        let ratio = if x == xi { 1.0 } else { x - xi };
        let mut c = coeffs(p, ratio, scale)?;
        let n = c.len() as i64;
        let pad = (n + 1) / 2;
        let xp = x + pad as f64;
        let pp = xp.floor();
        let frac = xp - pp;
        let off = if n % 2 == 0 {
            if frac == 0.0 {
                -(n / 2)
            } else {
                -(n / 2) + 1
            }
        } else {
            let base = -((n - 1) / 2);
            if frac <= 0.5 {
                base
            } else {
                base + 1
            }
        };
        let start = pp as i64 + off - pad;
        let idx: Vec<i64> = (0..n).map(|k| start + k).collect();
        if p.exclude_outside {
            for (k, &i) in idx.iter().enumerate() {
                if i < 0 || i >= input as i64 {
                    c[k] = 0.0;
                }
            }
            let s: f64 = c.iter().sum();
            let s = if s == 0.0 { 1.0 } else { s };
            c.iter_mut().for_each(|v| *v /= s);
        }
        for (k, &i) in idx.iter().enumerate() {
            let i = i.clamp(0, input as i64 - 1) as usize;
            weights[o * input + i] += c[k];
        }
    }
    Ok(AxisPlan {
        weights,
        extrapolated,
        out,
    })
}

/// `Resize` (opset 10+) and `Upsample` (nearest/linear with asymmetric coordinates).
pub fn resize(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let shape = ctx.shape(&x)?;
    let r = shape.len();
    let upsample = n.op_type() == "Upsample";
    let mode = n.string("mode", "nearest")?;
    let mut p = Params {
        mode,
        coord: "asymmetric".into(),
        nearest: "floor".into(),
        cubic_a: -0.75,
        exclude_outside: false,
        antialias: false,
    };
    let (mut roi, mut sizes) = (None, None);
    let scales: Option<Vec<f64>>;
    let mut extrapolation = 0.0;
    let mut policy = "stretch".to_string();
    let mut axes: Vec<usize> = (0..r).collect();
    if upsample {
        scales = Some(if n.opset < 9 {
            n.floats_opt("scales")?
                .unwrap_or_default()
                .into_iter()
                .map(f64::from)
                .collect()
        } else {
            ctx.const_of(&n.input(1)?, "scales")?.to_f64_vec()
        });
    } else if n.opset < 11 {
        // opset 10: asymmetric coordinates, nearest rounds down (as Upsample did)
        scales = Some(ctx.const_of(&n.input(1)?, "scales")?.to_f64_vec());
    } else {
        p.coord = n.string("coordinate_transformation_mode", "half_pixel")?;
        p.nearest = n.string("nearest_mode", "round_prefer_floor")?;
        p.cubic_a = n.float("cubic_coeff_a", -0.75)? as f64;
        p.exclude_outside = n.int("exclude_outside", 0)? != 0;
        extrapolation = n.float("extrapolation_value", 0.0)? as f64;
        if n.opset >= 18 {
            p.antialias = n.int("antialias", 0)? != 0;
            policy = n.string("keep_aspect_ratio_policy", "stretch")?;
            if let Some(a) = n.ints_opt("axes")? {
                axes = a.iter().map(|&v| ctx.axis(v, r)).collect::<R<_>>()?;
            }
        }
        let vals = |ctx: &mut Ctx, i: usize, what: &str| -> R<Option<Vec<f64>>> {
            match n.opt(i) {
                Some(v) => {
                    let t = ctx.const_of(&v, what)?;
                    Ok((t.numel() > 0).then(|| t.to_f64_vec()))
                }
                None => Ok(None),
            }
        };
        roi = vals(ctx, 1, "roi")?;
        scales = vals(ctx, 2, "scales")?;
        sizes = vals(ctx, 3, "sizes")?;
    }
    if p.mode == "nearest" && p.antialias {
        invalid!("antialias is not defined for nearest mode");
    }
    let k = axes.len();
    // Per-dim scale and output size over all r dims.
    let mut scale_full = vec![1.0; r];
    let mut out_full = shape.clone();
    let mut roi_full: Option<Vec<(f64, f64)>> = None;
    if let Some(roi) = &roi {
        if roi.len() != 2 * k {
            invalid!("roi has {} values for {k} axes", roi.len());
        }
        let mut rf = vec![(0.0, 1.0); r];
        for (i, &a) in axes.iter().enumerate() {
            rf[a] = (roi[i], roi[k + i]);
        }
        roi_full = Some(rf);
    }
    match (&scales, &sizes) {
        (_, Some(sz)) => {
            if sz.len() != k {
                invalid!("sizes has {} values for {k} axes", sz.len());
            }
            for (i, &a) in axes.iter().enumerate() {
                out_full[a] = sz[i] as usize;
                scale_full[a] = sz[i] / shape[a] as f64;
            }
            if policy != "stretch" {
                let sel = axes.iter().map(|&a| scale_full[a]);
                let s = match policy.as_str() {
                    "not_larger" => sel.fold(f64::INFINITY, f64::min),
                    "not_smaller" => sel.fold(f64::NEG_INFINITY, f64::max),
                    other => invalid!("keep_aspect_ratio_policy `{other}`"),
                };
                for &a in &axes {
                    scale_full[a] = s;
                    out_full[a] = (s * shape[a] as f64 + 0.5) as usize;
                }
            }
        }
        (Some(sc), None) => {
            if sc.len() != k {
                invalid!("scales has {} values for {k} axes", sc.len());
            }
            for (i, &a) in axes.iter().enumerate() {
                if sc[i] <= 0.0 {
                    invalid!("scale {} must be positive", sc[i]);
                }
                scale_full[a] = sc[i];
                out_full[a] = (sc[i] * shape[a] as f64) as usize;
            }
        }
        (None, None) => invalid!("one of scales and sizes is required"),
    }
    let d = ctx.dtype(&x);
    if !d.is_float() {
        unsupported!("Resize of {d}");
    }
    let mut y = x;
    let mut ext_mask: Option<Val> = None;
    for a in 0..r {
        let roi_a = roi_full.as_ref().map(|rf| rf[a]);
        let identity = (scale_full[a] - 1.0).abs() < 1e-9
            && out_full[a] == shape[a]
            && roi_a.is_none_or(|(s, e)| s.abs() < 1e-9 && (e - 1.0).abs() < 1e-9);
        if identity {
            continue;
        }
        if out_full[a] == 0 {
            unsupported!("resize to an empty axis");
        }
        if shape[a] == 0 {
            invalid!("cannot resize an empty axis");
        }
        ctx.host_alloc(shape[a].checked_mul(out_full[a]), "the resize weights")?;
        let plan = plan_axis(&p, shape[a], out_full[a], scale_full[a], roi_a)?;
        // [out, in] -> [in, out] so that rows of the moved tensor multiply it.
        let (inn, out) = (shape[a], plan.out);
        let mut wt = vec![0.0; inn * out];
        for o in 0..out {
            for i in 0..inn {
                wt[i * out + o] = plan.weights[o * inn + i];
            }
        }
        let w = ctx.tensor(d, &[inn, out], &wt)?;
        let (moved, inv) = axis_last(ctx, &y, a)?;
        let prod = ctx.matmul(&moved, &w)?;
        y = ctx.transpose(&prod, &inv)?;
        if plan.extrapolated.iter().any(|&e| e) {
            let v: Vec<f64> = plan.extrapolated.iter().map(|&e| e as u8 as f64).collect();
            let mut dims = vec![1; r];
            dims[a] = out;
            let m = ctx.tensor(DType::Bool, &dims, &v)?;
            ext_mask = Some(match ext_mask {
                Some(e) => ctx.binary(BinaryOp::Or, &e, &m)?,
                None => m,
            });
        }
    }
    if let Some(m) = ext_mask {
        let e = ctx.scalar(d, extrapolation);
        y = ctx.where_(&m, &e, &y)?;
    }
    Ok(vec![y])
}
