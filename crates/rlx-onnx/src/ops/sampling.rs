//! Sampling and folding ops over IR gathers and elementwise rows: `AffineGrid` (a constant
//! base grid times theta), `GridSample` (coordinates computed elementwise, every
//! interpolation tap one flat gather, weighted and summed; 1-D to 3-D, nearest, linear and
//! cubic, zeros/border/reflection padding) and `Col2Im` (a constant table of which column
//! entry lands on each image position, one gather, a masked sum over the kernel taps).

use crate::ctx::{checked_numel, invalid, unsupported, Ctx, Val, R};
use crate::node::NodeIn;
use rlx_ir::{BinaryOp, DType, ReduceOp, UnaryOp};

/// `AffineGrid`: `grid[n, ..., :] = theta[n] @ [x, y, (z,) 1]` over the normalized base grid
/// of the output size (`size` known at import).
pub fn affine_grid(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let theta = n.input(0)?;
    let size = ctx.const_ints(&n.input(1)?, "size")?;
    let align = n.int("align_corners", 0)? != 0;
    let d = ctx.dtype(&theta);
    if !d.is_float() || d.is_narrow() {
        unsupported!("dtype {d} is not supported (float only)");
    }
    if size.len() != 4 && size.len() != 5 || size.iter().any(|&s| s <= 0) {
        invalid!("size {size:?} must be 4 or 5 positive values (N, C, spatial...)");
    }
    let sp: Vec<usize> = size[2..].iter().map(|&s| s as usize).collect();
    let nd = sp.len();
    let ts = ctx.shape(&theta)?;
    if ts != [size[0] as usize, nd, nd + 1] {
        invalid!("theta {ts:?} must be [{}, {nd}, {}]", size[0], nd + 1);
    }
    let pts = ctx.host_alloc(
        checked_numel(&sp).and_then(|p| p.checked_mul(nd + 1)),
        "AffineGrid's base grid",
    )? / (nd + 1);
    let coord = |i: usize, len: usize| -> f64 {
        if align {
            if len == 1 {
                -1.0
            } else {
                -1.0 + 2.0 * i as f64 / (len - 1) as f64
            }
        } else {
            (2 * i + 1) as f64 / len as f64 - 1.0
        }
    };
    // base[p] = [x (last dim), ..., first dim, 1]
    let mut base = Vec::with_capacity(pts * (nd + 1));
    let strides = rlx_ir::contiguous_strides(&sp);
    for p in 0..pts {
        for j in (0..nd).rev() {
            let i = p / strides[j] % sp[j];
            base.push(coord(i, sp[j]));
        }
        base.push(1.0);
    }
    let base = ctx.tensor(d, &[pts, nd + 1], &base)?;
    let tt = ctx.transpose(&theta, &[0, 2, 1])?; // (N, nd+1, nd)
    let g = ctx.matmul(&base, &tt)?; // (N, pts, nd)
    let mut dims = vec![size[0] as usize];
    dims.extend(&sp);
    dims.push(nd);
    Ok(vec![ctx.reshape(&g, &dims)?])
}

/// Elementwise reflection of `v` into `[lo, hi]` by the nearer border, repeatedly
/// (ONNX's `GridSample` reflection): values inside are unchanged.
fn reflect(ctx: &mut Ctx, v: &Val, lo: f64, hi: f64) -> R<Val> {
    let rng = hi - lo;
    if rng <= 0.0 {
        let d = ctx.dtype(v);
        let c = ctx.scalar(d, lo);
        let z = ctx.binary_scalar(BinaryOp::Mul, v, 0.0)?;
        return ctx.add(&z, &c);
    }
    let lo_v = ctx.scalar_like(v, lo);
    let hi_v = ctx.scalar_like(v, hi);
    // below: dx = lo - v; n = floor(dx / rng); r = dx - n rng; even n: lo + r, odd: hi - r
    let side = |ctx: &mut Ctx, dx: &Val, even_base: &Val, even_sign: f64| -> R<Val> {
        let q = ctx.binary_scalar(BinaryOp::Div, dx, rng)?;
        let k = ctx.unary(UnaryOp::Floor, &q)?;
        let kr = ctx.binary_scalar(BinaryOp::Mul, &k, rng)?;
        let r = ctx.sub(dx, &kr)?;
        let half = ctx.binary_scalar(BinaryOp::Mul, &k, 0.5)?;
        let fl = ctx.unary(UnaryOp::Floor, &half)?;
        let even = ctx.binary(BinaryOp::Eq, &half, &fl)?;
        let sr = ctx.binary_scalar(BinaryOp::Mul, &r, even_sign)?;
        let e = ctx.add(even_base, &sr)?;
        let (lo_c, hi_c) = (ctx.scalar_like(dx, lo), ctx.scalar_like(dx, hi));
        let o = if even_sign > 0.0 {
            ctx.sub(&hi_c, &r)?
        } else {
            ctx.add(&lo_c, &r)?
        };
        ctx.where_(&even, &e, &o)
    };
    let dx_lo = ctx.sub(&lo_v, v)?;
    let below = side(ctx, &dx_lo, &lo_v, 1.0)?;
    let dx_hi = ctx.sub(v, &hi_v)?;
    let above = side(ctx, &dx_hi, &hi_v, -1.0)?;
    let is_lo = ctx.binary(BinaryOp::Lt, v, &lo_v)?;
    let is_hi = ctx.binary(BinaryOp::Gt, v, &hi_v)?;
    let mid = ctx.where_(&is_hi, &above, v)?;
    ctx.where_(&is_lo, &below, &mid)
}

/// `max(lo, min(hi, v))`
fn clamp(ctx: &mut Ctx, v: &Val, lo: f64, hi: f64) -> R<Val> {
    let a = ctx.binary_scalar(BinaryOp::Max, v, lo)?;
    ctx.binary_scalar(BinaryOp::Min, &a, hi)
}

#[derive(Clone, Copy, PartialEq)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

/// Keys' cubic convolution weights (alpha = -0.75) of the 4 taps around `t` in [0, 1).
fn cubic_weights(ctx: &mut Ctx, t: &Val) -> R<[Val; 4]> {
    let a = -0.75;
    // w(s) for |s| <= 1: (a+2)s^3 - (a+3)s^2 + 1; for 1 < |s| < 2: a s^3 - 5a s^2 + 8a s - 4a
    let near = |ctx: &mut Ctx, s: &Val| -> R<Val> {
        let p = ctx.binary_scalar(BinaryOp::Mul, s, a + 2.0)?;
        let p = ctx.binary_scalar(BinaryOp::Sub, &p, a + 3.0)?;
        let p = ctx.mul(&p, s)?;
        let p = ctx.mul(&p, s)?;
        ctx.binary_scalar(BinaryOp::Add, &p, 1.0)
    };
    let far = |ctx: &mut Ctx, s: &Val| -> R<Val> {
        let p = ctx.binary_scalar(BinaryOp::Mul, s, a)?;
        let p = ctx.binary_scalar(BinaryOp::Sub, &p, 5.0 * a)?;
        let p = ctx.mul(&p, s)?;
        let p = ctx.binary_scalar(BinaryOp::Add, &p, 8.0 * a)?;
        let p = ctx.mul(&p, s)?;
        ctx.binary_scalar(BinaryOp::Sub, &p, 4.0 * a)
    };
    let one = ctx.scalar_like(t, 1.0);
    let two = ctx.scalar_like(t, 2.0);
    let tp1 = ctx.binary_scalar(BinaryOp::Add, t, 1.0)?;
    let omt = ctx.sub(&one, t)?;
    let tmt = ctx.sub(&two, t)?;
    Ok([
        far(ctx, &tp1)?,
        near(ctx, t)?,
        near(ctx, &omt)?,
        far(ctx, &tmt)?,
    ])
}

/// One spatial dim's taps: (integer index as f-values, weight) pairs.
type Taps = Vec<(Val, Val)>;

/// `GridSample` for 1 to 3 spatial dims.
pub fn grid_sample(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let (x, grid) = (n.input(0)?, n.input(1)?);
    let mode = n.string("mode", if n.opset >= 20 { "linear" } else { "bilinear" })?;
    let pad = match n.string("padding_mode", "zeros")?.as_str() {
        "zeros" => Padding::Zeros,
        "border" => Padding::Border,
        "reflection" => Padding::Reflection,
        other => invalid!("padding_mode `{other}`"),
    };
    let align = n.int("align_corners", 0)? != 0;
    let xd = ctx.dtype(&x);
    if !xd.is_float() || xd.is_narrow() {
        unsupported!("dtype {xd} is not supported (float only)");
    }
    let xs = ctx.shape(&x)?;
    let gs = ctx.shape(&grid)?;
    let nd = xs.len().saturating_sub(2);
    if !(1..=3).contains(&nd) || gs.len() != xs.len() || gs[0] != xs[0] || gs[nd + 1] != nd {
        invalid!("input {xs:?} and grid {gs:?} do not agree (grid must be [N, out..., {nd}])");
    }
    let (nb, c) = (xs[0], xs[1]);
    let sp = &xs[2..];
    // the arithmetic dtype of the coordinates and weights
    let cd = if xd == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    let grid = ctx.cast(&grid, cd)?;
    let rank = xs.len(); // output rank: N, C, out...
    let mut taps_per_dim: Vec<Taps> = Vec::with_capacity(nd);
    for (i, &len) in sp.iter().enumerate() {
        // component nd-1-i of the grid's last axis is spatial dim i (x is the last dim)
        let comp = nd - 1 - i;
        let g = ctx.slice(&grid, nd + 1, comp as i64, comp as i64 + 1, 1)?;
        let mut gdims = gs[..nd + 1].to_vec();
        gdims.insert(1, 1); // (N, 1, out...)
        let g = ctx.reshape(&g, &gdims)?;
        let lenf = len as f64;
        let g1 = ctx.binary_scalar(BinaryOp::Add, &g, 1.0)?;
        let mut v = if align {
            ctx.binary_scalar(BinaryOp::Mul, &g1, (lenf - 1.0) / 2.0)?
        } else {
            let s = ctx.binary_scalar(BinaryOp::Mul, &g1, lenf)?;
            let s = ctx.binary_scalar(BinaryOp::Sub, &s, 1.0)?;
            ctx.binary_scalar(BinaryOp::Mul, &s, 0.5)?
        };
        let (lo, hi) = if align {
            (0.0, lenf - 1.0)
        } else {
            (-0.5, lenf - 0.5)
        };
        if mode == "nearest" {
            v = ctx.unary(UnaryOp::Round, &v)?;
        }
        v = match pad {
            Padding::Zeros => v,
            Padding::Border => clamp(ctx, &v, 0.0, lenf - 1.0)?,
            Padding::Reflection => reflect(ctx, &v, lo, hi)?,
        };
        let one = ctx.scalar(cd, 1.0);
        let taps: Taps = match mode.as_str() {
            "nearest" => {
                // truncation toward zero, as the reference's int cast
                let t = ctx.op(rlx_ir::Op::Cast(DType::I64), &[&v])?;
                let t = ctx.cast(&t, cd)?;
                vec![(t, one)]
            }
            "linear" | "bilinear" => {
                let x0 = ctx.unary(UnaryOp::Floor, &v)?;
                let f = ctx.sub(&v, &x0)?;
                let x1 = ctx.binary_scalar(BinaryOp::Add, &x0, 1.0)?;
                let w0 = ctx.sub(&one, &f)?;
                vec![(x0, w0), (x1, f)]
            }
            "cubic" | "bicubic" => {
                let x0 = ctx.unary(UnaryOp::Floor, &v)?;
                let f = ctx.sub(&v, &x0)?;
                let w = cubic_weights(ctx, &f)?;
                let mut taps = Vec::with_capacity(4);
                for (k, wk) in w.into_iter().enumerate() {
                    let xi = ctx.binary_scalar(BinaryOp::Add, &x0, k as f64 - 1.0)?;
                    taps.push((xi, wk));
                }
                taps
            }
            other => invalid!("mode `{other}`"),
        };
        // each tap's index brought in range (weight zeroed outside for zeros padding)
        let mut fixed = Vec::with_capacity(taps.len());
        for (xi, w) in taps {
            let (xi, w) = match pad {
                Padding::Zeros => {
                    let ge = ctx.binary_scalar(BinaryOp::Ge, &xi, 0.0)?;
                    let lt = ctx.binary_scalar(BinaryOp::Lt, &xi, lenf)?;
                    let ok = ctx.binary(BinaryOp::And, &ge, &lt)?;
                    let zero = ctx.scalar(cd, 0.0);
                    let w = ctx.where_(&ok, &w, &zero)?;
                    (clamp(ctx, &xi, 0.0, lenf - 1.0)?, w)
                }
                Padding::Border => (clamp(ctx, &xi, 0.0, lenf - 1.0)?, w),
                Padding::Reflection => {
                    let r = reflect(ctx, &xi, lo, hi)?;
                    let r = ctx.op(rlx_ir::Op::Cast(DType::I64), &[&r])?;
                    let r = ctx.cast(&r, cd)?;
                    (clamp(ctx, &r, 0.0, lenf - 1.0)?, w)
                }
            };
            fixed.push((xi, w));
        }
        taps_per_dim.push(fixed);
    }
    // every combination of taps: one gather, weighted by the product of its weights
    let ni = ctx.iota_along(nb, 0, rank)?;
    let ci = ctx.iota_along(c, 1, rank)?;
    let combos: usize = taps_per_dim.iter().map(Vec::len).product();
    let mut acc: Option<Val> = None;
    for combo in 0..combos {
        let mut rem = combo;
        let mut coords = vec![ni.clone(), ci.clone()];
        let mut weight: Option<Val> = None;
        for taps in &taps_per_dim {
            let (xi, w) = &taps[rem % taps.len()];
            rem /= taps.len();
            coords.push(xi.clone());
            weight = Some(match weight {
                None => w.clone(),
                Some(p) => ctx.mul(&p, w)?,
            });
        }
        let v = ctx.gather_at(&x, &coords)?;
        let v = ctx.cast(&v, cd)?;
        let term = match weight {
            Some(w) if combos > 1 || pad == Padding::Zeros => ctx.mul(&v, &w)?,
            _ => v,
        };
        acc = Some(match acc {
            None => term,
            Some(a) => ctx.add(&a, &term)?,
        });
    }
    let Some(y) = acc else {
        invalid!("no interpolation taps");
    };
    Ok(vec![ctx.cast(&y, xd)?])
}

/// `Col2Im`: sums the column entries `input[n, c*K + k, l]` into the image positions they
/// were taken from (N-D; `image_shape` and `block_shape` known at import).
pub fn col2im(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let img: Vec<i64> = ctx.const_ints(&n.input(1)?, "image_shape")?;
    let blk: Vec<i64> = ctx.const_ints(&n.input(2)?, "block_shape")?;
    let nd = img.len();
    if nd == 0 || blk.len() != nd || img.iter().chain(&blk).any(|&v| v <= 0) {
        invalid!("image_shape {img:?} and block_shape {blk:?} must be positive and agree");
    }
    let get = |name: &str, def: i64, len: usize| -> R<Vec<i64>> {
        let v = n.ints_opt(name)?.unwrap_or_else(|| vec![def; len]);
        if v.len() != len {
            invalid!("{name} {v:?} must have {len} values");
        }
        Ok(v)
    };
    let dil = get("dilations", 1, nd)?;
    let pads = get("pads", 0, 2 * nd)?;
    let strides = get("strides", 1, nd)?;
    if dil.iter().chain(&strides).any(|&v| v <= 0) || pads.iter().any(|&p| p < 0) {
        invalid!("dilations, strides must be positive and pads non-negative");
    }
    let big = i32::MAX as i64;
    if [&img, &blk, &dil, &pads, &strides]
        .iter()
        .any(|v| v.iter().any(|&x| x > big))
    {
        unsupported!("Col2Im sizes past 2^31");
    }
    let xs = ctx.shape(&x)?;
    if xs.len() != 3 {
        invalid!("input {xs:?} must be (N, C * prod(block_shape), L)");
    }
    let bk: Vec<usize> = blk.iter().map(|&v| v as usize).collect();
    let im: Vec<usize> = img.iter().map(|&v| v as usize).collect();
    let (Some(kk), Some(p)) = (checked_numel(&bk), checked_numel(&im)) else {
        unsupported!("Col2Im block {blk:?} or image {img:?} too large");
    };
    if xs[1] % kk != 0 {
        invalid!(
            "input dim 1 ({}) is not a multiple of the block size {kk}",
            xs[1]
        );
    }
    let c = xs[1] / kk;
    let mut nblocks = Vec::with_capacity(nd);
    for i in 0..nd {
        let span = dil[i] * (blk[i] - 1) + 1;
        let full = img[i] + pads[i] + pads[i + nd] - span;
        if full < 0 {
            invalid!("block {blk:?} does not fit the padded image {img:?}");
        }
        nblocks.push((full / strides[i] + 1) as usize);
    }
    let Some(l) = checked_numel(&nblocks) else {
        unsupported!("Col2Im with too many blocks");
    };
    if xs[2] != l {
        invalid!("input has {} blocks, the shapes give {l}", xs[2]);
    }
    ctx.host_alloc(kk.checked_mul(p), "Col2Im's index table")?;
    let (ks, ps, ls) = (
        rlx_ir::contiguous_strides(&bk),
        rlx_ir::contiguous_strides(&im),
        rlx_ir::contiguous_strides(&nblocks),
    );
    let mut idx = vec![0.0; kk * p];
    let mut mask = vec![0.0; kk * p];
    for k in 0..kk {
        for q in 0..p {
            let mut flat = 0usize;
            let mut ok = true;
            for i in 0..nd {
                let ki = (k / ks[i] % bk[i]) as i64;
                let qi = (q / ps[i] % im[i]) as i64;
                let t = qi + pads[i] - ki * dil[i];
                if t < 0 || t % strides[i] != 0 || (t / strides[i]) as usize >= nblocks[i] {
                    ok = false;
                    break;
                }
                flat += (t / strides[i]) as usize * ls[i];
            }
            if ok {
                idx[k * p + q] = (k * l + flat) as f64;
                mask[k * p + q] = 1.0;
            }
        }
    }
    let d = ctx.dtype(&x);
    let idx = ctx.tensor(DType::I64, &[kk, p], &idx)?;
    let mask = ctx.tensor(d, &[kk, p], &mask)?;
    let xr = ctx.reshape(&x, &[xs[0], c, kk * l])?;
    let g = ctx.gather(&xr, &idx, 2)?; // (N, C, K, P)
    let g = ctx.mul(&g, &mask)?;
    let y = ctx.reduce(ReduceOp::Sum, &g, &[2], false)?;
    let mut dims = vec![xs[0], c];
    dims.extend(&im);
    Ok(vec![ctx.reshape(&y, &dims)?])
}
