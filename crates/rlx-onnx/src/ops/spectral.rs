//! Spectral ops: the window functions (folded at import) and `DFT` as matrix products with
//! cosine and sine tables along the signal axis.

use crate::ctx::{invalid, unsupported, Ctx, Fail, Val, R};
use crate::dtype::to_dtype;
use crate::node::NodeIn;
use crate::ops::reduce::axis_last;
use rlx_ir::{Op, PadMode};
use std::f64::consts::PI;

/// `HannWindow`, `HammingWindow`, `BlackmanWindow` of a size known at import.
pub fn window(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let size = ctx.const_ints(&n.input(0)?, "the window size")?;
    let [size] = size[..] else {
        invalid!("size must be a scalar");
    };
    let size = ctx.host_alloc(usize::try_from(size).ok(), "the window")?;
    let periodic = n.int("periodic", 1)? != 0;
    let dtype = to_dtype(n.int("output_datatype", 1)? as i32).map_err(Fail::Unsupported)?;
    let denom = if periodic {
        size as f64
    } else {
        size as f64 - 1.0
    };
    let v: Vec<f64> = (0..size)
        .map(|i| {
            let x = 2.0 * PI * i as f64 / denom;
            match n.op_type() {
                "HannWindow" => 0.5 - 0.5 * x.cos(),
                "HammingWindow" => 25.0 / 46.0 - 21.0 / 46.0 * x.cos(),
                _ => 0.42 - 0.5 * x.cos() + 0.08 * (2.0 * x).cos(),
            }
        })
        .collect();
    Ok(vec![ctx.tensor(dtype, &[size], &v)?])
}

/// `DFT` (opset 17 and 20+): real ([.., 1]) or complex ([.., 2]) input, forward or inverse,
/// optionally one-sided, zero-padded or truncated to `dft_length`.
pub fn dft(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let s = ctx.shape(&x)?;
    let r = s.len();
    let d = ctx.dtype(&x);
    if r < 2 || !(1..=2).contains(&s[r - 1]) || !d.is_float() {
        invalid!("input must be float [.., 1] (real) or [.., 2] (complex), got {d}{s:?}");
    }
    let inverse = n.int("inverse", 0)? != 0;
    let onesided = n.int("onesided", 0)? != 0;
    let axis = if n.opset >= 20 {
        match n.opt(2) {
            Some(a) => ctx.const_ints(&a, "axis")?.first().copied().unwrap_or(-2),
            None => -2,
        }
    } else {
        n.int("axis", 1)?
    };
    let a = ctx.axis(axis, r)?;
    if a == r - 1 {
        invalid!("the DFT axis cannot be the last (real/imaginary) dim");
    }
    let len = match n.opt(1) {
        Some(l) => {
            let l = ctx.const_ints(&l, "dft_length")?;
            usize::try_from(l.first().copied().unwrap_or(0))
                .map_err(|_| Fail::Invalid("negative dft_length".into()))?
        }
        None => s[a],
    };
    if len == 0 {
        invalid!("dft_length must be positive");
    }
    if onesided && inverse {
        unsupported!("one-sided inverse DFT");
    }
    let parts: Vec<Val> = (0..s[r - 1])
        .map(|c| {
            let p = ctx.slice(&x, r - 1, c as i64, c as i64 + 1, 1)?;
            ctx.reshape(&p, &s[..r - 1])
        })
        .collect::<R<_>>()?;
    let fit = |ctx: &mut Ctx, v: &Val| -> R<Val> {
        if len < s[a] {
            ctx.slice(v, a, 0, len as i64, 1)
        } else if len > s[a] {
            let mut pads = vec![(0, 0); r - 1];
            pads[a] = (0, len - s[a]);
            ctx.op(
                Op::Pad {
                    pads,
                    mode: PadMode::Constant(0.0),
                },
                &[v],
            )
        } else {
            Ok(v.clone())
        }
    };
    let k = if onesided { len / 2 + 1 } else { len };
    ctx.host_alloc(len.checked_mul(k), "the DFT tables")?;
    let sign = if inverse { 1.0 } else { -1.0 };
    let scale = if inverse { 1.0 / len as f64 } else { 1.0 };
    let (mut cv, mut sv) = (vec![0.0; len * k], vec![0.0; len * k]);
    for i in 0..len {
        for j in 0..k {
            let t = 2.0 * PI * ((i * j) % len) as f64 / len as f64;
            cv[i * k + j] = t.cos() * scale;
            sv[i * k + j] = sign * t.sin() * scale;
        }
    }
    let c = ctx.tensor(d, &[len, k], &cv)?;
    let sn = ctx.tensor(d, &[len, k], &sv)?;
    // (re + i im)(cos + i sin) = (re cos - im sin) + i (re sin + im cos)
    let re = fit(ctx, &parts[0])?;
    let (re, inv) = axis_last(ctx, &re, a)?;
    let mut yr = ctx.matmul(&re, &c)?;
    let mut yi = ctx.matmul(&re, &sn)?;
    if let Some(im) = parts.get(1) {
        let im = fit(ctx, im)?;
        let (im, _) = axis_last(ctx, &im, a)?;
        let is = ctx.matmul(&im, &sn)?;
        let ic = ctx.matmul(&im, &c)?;
        yr = ctx.sub(&yr, &is)?;
        yi = ctx.add(&yi, &ic)?;
    }
    let yr = ctx.transpose(&yr, &inv)?;
    let yi = ctx.transpose(&yi, &inv)?;
    let yr = ctx.unsqueeze(&yr, &[r - 1])?;
    let yi = ctx.unsqueeze(&yi, &[r - 1])?;
    Ok(vec![ctx.concat(&[yr, yi], r - 1)?])
}
