//! `RNN`, `GRU` and `LSTM`, unrolled over the (static) sequence: the input projection of
//! every step is one matrix product, each step adds the recurrent product and applies the
//! gates. Directions forward, reverse and bidirectional; `sequence_lens` masks the forward
//! direction; `clip`, `layout`, LSTM peepholes and GRU `linear_before_reset` follow the spec.

use crate::ctx::{invalid, unsupported, Ctx, Val, R};
use crate::node::NodeIn;
use rlx_ir::{BinaryOp, DType, UnaryOp};

/// Gate activation by ONNX name.
fn act(ctx: &mut Ctx, name: &str, x: &Val) -> R<Val> {
    match name.to_ascii_lowercase().as_str() {
        "sigmoid" => ctx.unary(UnaryOp::Sigmoid, x),
        "tanh" => ctx.unary(UnaryOp::Tanh, x),
        "relu" => ctx.unary(UnaryOp::Relu, x),
        other => unsupported!("activation `{other}` in a recurrent op"),
    }
}

/// Rows `[g*h, (g+1)*h)` of the last dim of `x`.
fn gate(ctx: &mut Ctx, x: &Val, g: usize, h: usize) -> R<Val> {
    let r = ctx.rank(x);
    ctx.slice(x, r - 1, (g * h) as i64, ((g + 1) * h) as i64, 1)
}

/// `RNN`, `GRU`, `LSTM`.
pub fn recurrent(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let kind = n.op_type().to_string();
    let gates = match kind.as_str() {
        "RNN" => 1,
        "GRU" => 3,
        _ => 4,
    };
    let (x, w, r) = (n.input(0)?, n.input(1)?, n.input(2)?);
    let d = ctx.dtype(&x);
    if !d.is_float() {
        unsupported!("dtype {d}");
    }
    let layout = n.int("layout", 0)?;
    let direction = n.string("direction", "forward")?;
    let clip = n.float_opt("clip")?.map(|c| c as f64);
    let Some(hidden) = n.int_opt("hidden_size")? else {
        invalid!("hidden_size is required");
    };
    let h = hidden as usize;
    if n.floats_opt("activation_alpha")?.is_some() || n.floats_opt("activation_beta")?.is_some() {
        unsupported!("activation_alpha / activation_beta");
    }
    let lbr = kind == "GRU" && n.int("linear_before_reset", 0)? != 0;
    if kind == "LSTM" && n.int("input_forget", 0)? != 0 {
        unsupported!("input_forget = 1");
    }
    let dirs = if direction == "bidirectional" { 2 } else { 1 };
    let defaults: Vec<&str> = match kind.as_str() {
        "RNN" => vec!["Tanh"],
        "GRU" => vec!["Sigmoid", "Tanh"],
        _ => vec!["Sigmoid", "Tanh", "Tanh"],
    };
    let acts: Vec<String> = match n.strings_opt("activations")? {
        Some(a) => a,
        None => (0..dirs)
            .flat_map(|_| defaults.iter().map(|s| s.to_string()))
            .collect(),
    };
    if acts.len() != defaults.len() * dirs {
        invalid!("{} activations for {dirs} direction(s)", acts.len());
    }
    let x = if layout == 1 {
        ctx.transpose(&x, &[1, 0, 2])?
    } else {
        x
    };
    let xs = ctx.shape(&x)?;
    if xs.len() != 3 {
        invalid!("X must be 3-D");
    }
    let (seq, batch) = (xs[0], xs[1]);
    let ws = ctx.shape(&w)?;
    if ws != [dirs, gates * h, xs[2]] || ctx.shape(&r)? != [dirs, gates * h, h] {
        invalid!(
            "W {:?} / R {:?} do not match {dirs} direction(s), hidden {h}",
            ws,
            ctx.shape(&r)?
        );
    }
    let lens = match n.opt(4) {
        Some(l) => {
            let all_full = ctx
                .try_const(&l)
                .is_some_and(|t| t.to_f64_vec().iter().all(|&v| v as usize == seq));
            if all_full {
                None
            } else if direction != "forward" {
                unsupported!("sequence_lens with direction {direction}");
            } else {
                Some(ctx.cast(&l, DType::I64)?)
            }
        }
        None => None,
    };
    let (init_h, init_c, peep) = (n.opt(5), n.opt(6), n.opt(7));
    let mut ys = Vec::new();
    let mut hs = Vec::new();
    let mut cs = Vec::new();
    for dir in 0..dirs {
        let reverse = direction == "reverse" || dir == 1;
        let pick = |ctx: &mut Ctx, v: &Val| -> R<Val> {
            let s = ctx.slice(v, 0, dir as i64, dir as i64 + 1, 1)?;
            let dims: Vec<usize> = ctx.shape(&s)?[1..].to_vec();
            ctx.reshape(&s, &dims)
        };
        let wd = pick(ctx, &w)?; // [G*h, in]
        let rd = pick(ctx, &r)?; // [G*h, h]
        let wt = ctx.transpose(&wd, &[1, 0])?;
        let rt = ctx.transpose(&rd, &[1, 0])?; // [h, G*h]
        let (wb, rb) = match n.opt(3) {
            Some(b) => {
                let bd = pick(ctx, &b)?; // [2*G*h]
                (
                    Some(ctx.slice(&bd, 0, 0, (gates * h) as i64, 1)?),
                    Some(ctx.slice(&bd, 0, (gates * h) as i64, (2 * gates * h) as i64, 1)?),
                )
            }
            None => (None, None),
        };
        let mut xw = ctx.matmul(&x, &wt)?; // [seq, batch, G*h]
        if let Some(b) = &wb {
            xw = ctx.add(&xw, b)?;
        }
        let zeros = ctx.scalar(d, 0.0);
        let zeros = ctx.reshape(&zeros, &[1, 1])?;
        let zeros = ctx.expand(&zeros, rlx_ir::Shape::of(&[batch, h]).0)?;
        let mut hst = match &init_h {
            Some(v) => pick(ctx, v)?,
            None => zeros.clone(),
        };
        let mut cst = match &init_c {
            Some(v) => pick(ctx, v)?,
            None => zeros.clone(),
        };
        let peeps = match &peep {
            Some(p) => {
                let pd = pick(ctx, p)?;
                Some([
                    gate(ctx, &pd, 0, h)?,
                    gate(ctx, &pd, 1, h)?,
                    gate(ctx, &pd, 2, h)?,
                ])
            }
            None => None,
        };
        let a = &acts[dir * defaults.len()..(dir + 1) * defaults.len()];
        let mut outs: Vec<Val> = vec![zeros.clone(); seq];
        for step in 0..seq {
            let t = if reverse { seq - 1 - step } else { step };
            let xt = ctx.slice(&xw, 0, t as i64, t as i64 + 1, 1)?;
            let xt = ctx.reshape(&xt, &[batch, gates * h])?;
            let mut hr = ctx.matmul(&hst, &rt)?; // [batch, G*h]
            if let Some(b) = &rb {
                hr = ctx.add(&hr, b)?;
            }
            let pre = |ctx: &mut Ctx, v: Val| -> R<Val> {
                match clip {
                    Some(c) => {
                        let v = ctx.binary_scalar(BinaryOp::Max, &v, -c)?;
                        ctx.binary_scalar(BinaryOp::Min, &v, c)
                    }
                    None => Ok(v),
                }
            };
            let (hn, cn) = match kind.as_str() {
                "RNN" => {
                    let s = ctx.add(&xt, &hr)?;
                    let s = pre(ctx, s)?;
                    (act(ctx, &a[0], &s)?, cst.clone())
                }
                "GRU" => {
                    let xz = gate(ctx, &xt, 0, h)?;
                    let xr = gate(ctx, &xt, 1, h)?;
                    let xh = gate(ctx, &xt, 2, h)?;
                    let hz = gate(ctx, &hr, 0, h)?;
                    let hrr = gate(ctx, &hr, 1, h)?;
                    let s = ctx.add(&xz, &hz)?;
                    let s = pre(ctx, s)?;
                    let z = act(ctx, &a[0], &s)?;
                    let s = ctx.add(&xr, &hrr)?;
                    let s = pre(ctx, s)?;
                    let rg = act(ctx, &a[0], &s)?;
                    let hh = if lbr {
                        let hrh = gate(ctx, &hr, 2, h)?;
                        let m = ctx.mul(&rg, &hrh)?;
                        ctx.add(&xh, &m)?
                    } else {
                        let rh = ctx.mul(&rg, &hst)?;
                        let rdh = ctx.slice(&rt, 1, (2 * h) as i64, (3 * h) as i64, 1)?;
                        let mut p = ctx.matmul(&rh, &rdh)?;
                        if let Some(b) = &rb {
                            let bh = gate(ctx, b, 2, h)?;
                            p = ctx.add(&p, &bh)?;
                        }
                        ctx.add(&xh, &p)?
                    };
                    let hh = pre(ctx, hh)?;
                    let hh = act(ctx, &a[1], &hh)?;
                    let one = ctx.scalar(d, 1.0);
                    let omz = ctx.sub(&one, &z)?;
                    let l = ctx.mul(&omz, &hh)?;
                    let rr = ctx.mul(&z, &hst)?;
                    (ctx.add(&l, &rr)?, cst.clone())
                }
                _ => {
                    let s = ctx.add(&xt, &hr)?;
                    let mut g: Vec<Val> = (0..4).map(|k| gate(ctx, &s, k, h)).collect::<R<_>>()?;
                    if let Some(p) = &peeps {
                        let pi = ctx.mul(&p[0], &cst)?;
                        g[0] = ctx.add(&g[0], &pi)?;
                        let pf = ctx.mul(&p[2], &cst)?;
                        g[2] = ctx.add(&g[2], &pf)?;
                    }
                    let gi = pre(ctx, g[0].clone())?;
                    let i = act(ctx, &a[0], &gi)?;
                    let gf = pre(ctx, g[2].clone())?;
                    let f = act(ctx, &a[0], &gf)?;
                    let gc = pre(ctx, g[3].clone())?;
                    let c_new = act(ctx, &a[1], &gc)?;
                    let fc = ctx.mul(&f, &cst)?;
                    let ic = ctx.mul(&i, &c_new)?;
                    let c = ctx.add(&fc, &ic)?;
                    let mut go = g[1].clone();
                    if let Some(p) = &peeps {
                        let po = ctx.mul(&p[1], &c)?;
                        go = ctx.add(&go, &po)?;
                    }
                    let go = pre(ctx, go)?;
                    let o = act(ctx, &a[0], &go)?;
                    let hc = act(ctx, &a[2], &c)?;
                    (ctx.mul(&o, &hc)?, c)
                }
            };
            let (hn, cn, y) = match &lens {
                Some(l) => {
                    let tt = ctx.scalar(DType::I64, t as f64);
                    let live = ctx.binary(BinaryOp::Lt, &tt, l)?;
                    let live = ctx.reshape(&live, &[batch, 1])?;
                    let y = ctx.where_(&live, &hn, &zeros)?;
                    (
                        ctx.where_(&live, &hn, &hst)?,
                        ctx.where_(&live, &cn, &cst)?,
                        y,
                    )
                }
                None => (hn.clone(), cn, hn),
            };
            outs[t] = y;
            hst = hn;
            cst = cn;
        }
        let outs: Vec<Val> = outs
            .iter()
            .map(|o| ctx.reshape(o, &[1, 1, batch, h]))
            .collect::<R<_>>()?;
        ys.push(ctx.concat(&outs, 0)?); // [seq, 1, batch, h]
        hs.push(ctx.reshape(&hst, &[1, batch, h])?);
        cs.push(ctx.reshape(&cst, &[1, batch, h])?);
    }
    let mut y = ctx.concat(&ys, 1)?; // [seq, dirs, batch, h]
    let mut yh = ctx.concat(&hs, 0)?; // [dirs, batch, h]
    let mut yc = ctx.concat(&cs, 0)?;
    if layout == 1 {
        y = ctx.transpose(&y, &[2, 0, 1, 3])?;
        yh = ctx.transpose(&yh, &[1, 0, 2])?;
        yc = ctx.transpose(&yc, &[1, 0, 2])?;
    }
    Ok(vec![y, yh, yc])
}
