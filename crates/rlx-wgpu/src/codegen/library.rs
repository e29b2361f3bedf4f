//! Library kernels other than GEMM: softmax, norms, gather, concat, pad, pooling, arg
//! reductions, convolution (direct) and attention (online softmax). Each stores its result
//! through the fused elementwise epilogue when there is one.

use super::dialect::Wgsl;
use super::loops::Epilogue;
use super::rows::{lanes_for, Frame};
use super::scalar::{compute, literal};
use super::{
    broadcast_strides, check_i32, contiguous, grid_loop, groups_for, main_sig, offset, ArgRef,
    Emitted, IndexSpace, Kb, Target, WG,
};
use rlx_ir::kernel::LibraryKernel;
use rlx_ir::render::coords;
use rlx_ir::{ArgOp, AttnMask, Conv2dParams, DType, PadMode, Pool2dParams, PoolKind, ReduceOp};

/// Everything a library-kernel emitter needs.
pub struct LibCtx<'a> {
    /// the kernel
    pub kernel: &'a LibraryKernel,
    /// static shapes and dtypes of the operands, in the op's input order
    pub inputs: Vec<(DType, Vec<usize>)>,
    /// dtype and shape of the op's result (before any epilogue)
    pub result: (DType, Vec<usize>),
    /// the fused epilogue, when it runs inside this kernel
    pub epilogue: Option<Epilogue<'a>>,
    /// where the kernel writes (the output, or a scratch an unfused epilogue reads)
    pub out: ArgRef,
    /// the device
    pub target: &'a Target,
}

pub use rlx_ir::render::numel;

impl LibCtx<'_> {
    /// The dtype stored to `out`.
    pub fn out_dtype(&self) -> DType {
        self.epilogue
            .as_ref()
            .map_or(self.result.0, |e| e.out_dtype())
    }

    /// Binds the output; returns its binding name.
    pub fn bind_out(&self, kb: &mut Kb) -> String {
        kb.write(self.out, self.out_dtype())
    }

    /// Binds operand `i`; returns its binding name.
    pub fn bind_in(&self, kb: &mut Kb, i: usize) -> String {
        kb.read(ArgRef::Buffer(self.kernel.inputs[i]), self.inputs[i].0)
    }

    /// Binds operand `i` as `vec4`s when `vec4` (see [`Kb::vec4`]), else as elements.
    pub fn bind_in_as(&self, kb: &mut Kb, i: usize, vec4: bool) -> String {
        let arg = ArgRef::Buffer(self.kernel.inputs[i]);
        if vec4 {
            kb.vec4(arg, self.inputs[i].0)
        } else {
            kb.read(arg, self.inputs[i].0)
        }
    }

    /// Statements storing result element `linear` whose compute value is `value`.
    ///
    /// # Errors
    /// An epilogue node no rule accepts.
    pub fn store(
        &self,
        kb: &mut Kb,
        out: &str,
        linear: &str,
        value: &str,
    ) -> Result<String, String> {
        match &self.epilogue {
            None => Ok(kb.store(self.result.0, out, linear, value)),
            Some(e) => e.apply(kb, out, linear, value),
        }
    }
}

fn ew_frame(n: usize, target: &Target) -> (u32, String) {
    let groups = groups_for(n, WG, target);
    (
        groups,
        format!("{}{}", main_sig(WG), grid_loop("idx", n, groups, WG, "lid")),
    )
}

/// Softmax or log-softmax along `axis`: rows spread over invocations as [`Frame`] says, max
/// and sum combined across each row's invocations.
///
/// # Errors
/// An epilogue node no rule accepts.
pub fn softmax(ctx: &LibCtx, axis: usize, log: bool) -> Result<Emitted, String> {
    let (dtype, shape) = &ctx.inputs[0];
    let len = shape[axis];
    let inner = numel(&shape[axis + 1..]);
    let rows = numel(shape) / len.max(1);
    check_i32(&ctx.kernel.name, numel(shape))?;
    let mut kb = Kb::new(ctx.target);
    let out = ctx.bind_out(&mut kb);
    let x = ctx.bind_in(&mut kb, 0);
    let frame = Frame::new(rows, lanes_for(len, DType::F32), DType::F32, ctx.target);
    let at = |j: &str| format!("(rbase + ({j}) * {inner})");
    let xj = kb.load(*dtype, &x, &at("j"));
    let value = if log {
        "(xv - mx - log(sm))"
    } else {
        "(exp(xv - mx) / sm)"
    };
    let st = ctx.store(&mut kb, &out, &at("j"), "v")?;
    let text = format!(
        "{head}let rbase = (row / {inner}) * {span} + row % {inner};\n\
         var acc: f32 = -rlx_inf();\n\
         if (live) {{ for (var j: i32 = lane; j < {len}; j += lanes) {{ acc = rlx_max(acc, {xj}); }} }}\n\
         {max}acc = 0.0;\n\
         if (live) {{ for (var j: i32 = lane; j < {len}; j += lanes) {{ acc = acc + exp({xj} - mx); }} }}\n\
         {sum}\
         if (live) {{ for (var j: i32 = lane; j < {len}; j += lanes) {{\nlet xv = {xj};\nlet v = {value};\n{st}}} }}\n{tail}",
        head = frame.head(),
        span = len * inner,
        max = frame.combine("mx", ReduceOp::Max, DType::F32),
        sum = frame.combine("sm", ReduceOp::Sum, DType::F32),
        tail = frame.tail(),
    );
    Ok(kb.finish(&ctx.kernel.name, text, [frame.groups, 1, 1]))
}

/// Layer norm (`layer`: inputs x, scale, bias) or RMS norm (x, scale) over dims `axis..`.
///
/// # Errors
/// An epilogue node no rule accepts.
pub fn norm(ctx: &LibCtx, axis: usize, eps: f64, layer: bool) -> Result<Emitted, String> {
    let (dtype, shape) = &ctx.inputs[0];
    let rows = numel(&shape[..axis]);
    let normd = &shape[axis..];
    let len = numel(normd);
    check_i32(&ctx.kernel.name, numel(shape))?;
    let n_params = if layer { 2 } else { 1 };
    let mut views = vec![contiguous(normd)];
    for p in 1..=n_params {
        views.push(broadcast_strides(&ctx.inputs[p].1, normd));
    }
    let sp = IndexSpace::merge(normd, &views);
    let mut kb = Kb::new(ctx.target);
    let out = ctx.bind_out(&mut kb);
    let x = ctx.bind_in(&mut kb, 0);
    let ps: Vec<String> = (1..=n_params).map(|p| ctx.bind_in(&mut kb, p)).collect();
    let frame = Frame::new(rows, lanes_for(len, DType::F32), DType::F32, ctx.target);
    let xj = kb.load(*dtype, &x, &format!("(row * {len} + j)"));
    let scale = kb.load(ctx.inputs[1].0, &ps[0], &offset("0", "c", &sp.strides[1]));
    let value = if layer {
        let bias = kb.load(ctx.inputs[2].0, &ps[1], &offset("0", "c", &sp.strides[2]));
        format!("(xv - mean) * inv * {scale} + {bias}")
    } else {
        format!("xv * inv * {scale}")
    };
    let st = ctx.store(&mut kb, &out, &format!("(row * {len} + j)"), "v")?;
    let eps = literal(DType::F32, eps);
    let lenf = literal(DType::F32, len as f64);
    let (mean_pass, var_term) = if layer {
        (
            format!(
                "acc = 0.0;\n\
                 if (live) {{ for (var j: i32 = lane; j < {len}; j += lanes) {{ acc = acc + {xj}; }} }}\n\
                 {}let mean = tm / {lenf};\n",
                frame.combine("tm", ReduceOp::Sum, DType::F32),
            ),
            "(xv - mean) * (xv - mean)",
        )
    } else {
        ("let mean = 0.0;\n".to_string(), "xv * xv")
    };
    let text = format!(
        "{head}var acc: f32 = 0.0;\n{mean_pass}\
         acc = 0.0;\n\
         if (live) {{ for (var j: i32 = lane; j < {len}; j += lanes) {{ let xv = {xj}; acc = acc + {var_term}; }} }}\n\
         {sum}let inv = 1.0 / sqrt(tv / {lenf} + {eps});\n\
         if (live) {{ for (var j: i32 = lane; j < {len}; j += lanes) {{\n{cj}let xv = {xj};\nlet v = {value};\n{st}}} }}\n{tail}",
        head = frame.head(),
        sum = frame.combine("tv", ReduceOp::Sum, DType::F32),
        cj = coords(&Wgsl, "j", "c", &sp.dims, "i32"),
        tail = frame.tail(),
    );
    Ok(kb.finish(&ctx.kernel.name, text, [frame.groups, 1, 1]))
}

/// `data.take(indices, axis)`; negative indices count from the end; out-of-range indices are
/// clamped to the axis (the interpreter rejects them).
///
/// # Errors
/// An epilogue node no rule accepts.
pub fn gather(ctx: &LibCtx, axis: usize) -> Result<Emitted, String> {
    let (dtype, data) = &ctx.inputs[0];
    let (idt, idx) = &ctx.inputs[1];
    let n = numel(&ctx.result.1);
    check_i32(&ctx.kernel.name, n.max(numel(data)))?;
    let dim = data[axis];
    let inner = numel(&data[axis + 1..]);
    let nidx = numel(idx);
    let mut kb = Kb::new(ctx.target);
    let out = ctx.bind_out(&mut kb);
    let d = ctx.bind_in(&mut kb, 0);
    let ib = ctx.bind_in(&mut kb, 1);
    let (groups, head) = ew_frame(n, ctx.target);
    let iv = kb.load(*idt, &ib, "q");
    let st = ctx.store(&mut kb, &out, "idx", "v")?;
    let text = format!(
        "{head}let o = idx / {qi};\nlet q = (idx / {inner}) % {nidx};\nlet i = idx % {inner};\n\
         var ix: i32 = {iv};\nif (ix < 0) {{ ix = ix + {dim}; }}\nix = clamp(ix, 0, {dmax});\n\
         let v = {val};\n{st}}}\n}}\n",
        qi = nidx * inner,
        dmax = dim.saturating_sub(1),
        val = kb.load(*dtype, &d, &format!("((o * {dim} + ix) * {inner} + i)")),
    );
    Ok(kb.finish(&ctx.kernel.name, text, [groups, 1, 1]))
}

/// Concatenation along `axis`.
///
/// # Errors
/// An epilogue node no rule accepts.
pub fn concat(ctx: &LibCtx, axis: usize) -> Result<Emitted, String> {
    let out_shape = &ctx.result.1;
    let n = numel(out_shape);
    check_i32(&ctx.kernel.name, n)?;
    let total = out_shape[axis];
    let inner = numel(&out_shape[axis + 1..]);
    let mut kb = Kb::new(ctx.target);
    let out = ctx.bind_out(&mut kb);
    let (groups, head) = ew_frame(n, ctx.target);
    let t = compute(ctx.result.0);
    let mut sel = String::new();
    let mut start = 0;
    for i in 0..ctx.inputs.len() {
        let (dt, s) = &ctx.inputs[i];
        let len = s[axis];
        let b = ctx.bind_in(&mut kb, i);
        let at = format!("((o * {len} + (j - {start})) * {inner} + q)");
        sel += &format!(
            "{}if (j < {}) {{ v = {}; }}\n",
            if i == 0 { "" } else { "else " },
            start + len,
            kb.load(*dt, &b, &at)
        );
        start += len;
    }
    let st = ctx.store(&mut kb, &out, "idx", "v")?;
    let text = format!(
        "{head}let o = idx / {span};\nlet j = (idx / {inner}) % {total};\nlet q = idx % {inner};\n\
         var v: {t};\n{sel}{st}}}\n}}\n",
        span = total * inner,
    );
    Ok(kb.finish(&ctx.kernel.name, text, [groups, 1, 1]))
}

/// Padding with a constant, reflection or edge values.
///
/// # Errors
/// An epilogue node no rule accepts.
pub fn pad(ctx: &LibCtx, pads: &[(usize, usize)], mode: PadMode) -> Result<Emitted, String> {
    let (dtype, shape) = &ctx.inputs[0];
    let out_shape = &ctx.result.1;
    let n = numel(out_shape);
    check_i32(&ctx.kernel.name, n.max(numel(shape)))?;
    let mut kb = Kb::new(ctx.target);
    let out = ctx.bind_out(&mut kb);
    let x = ctx.bind_in(&mut kb, 0);
    let (groups, head) = ew_frame(n, ctx.target);
    let strides = contiguous(shape);
    let mut body = coords(&Wgsl, "idx", "c", out_shape, "i32");
    body += "var inside = true;\nvar src: i32 = 0;\n";
    for (d, &(before, _)) in pads.iter().enumerate().take(shape.len()) {
        let len = shape[d] as i64;
        body += &format!("var s{d}: i32 = c{d} - {before};\n");
        match mode {
            PadMode::Constant(_) => {
                body += &format!("if (s{d} < 0 || s{d} >= {len}) {{ inside = false; }}\n");
            }
            PadMode::Reflect => {
                let period = (2 * (len - 1)).max(1);
                body += &format!(
                    "if ({len} == 1) {{ s{d} = 0; }} else {{ s{d} = abs(s{d}) % {period}; \
                     if (s{d} >= {len}) {{ s{d} = {period} - s{d}; }} }}\n"
                );
            }
            PadMode::Edge => {
                body += &format!("s{d} = clamp(s{d}, 0, {});\n", len - 1);
            }
        }
        body += &format!("src = src + s{d} * {};\n", strides[d]);
    }
    let fill = match mode {
        PadMode::Constant(c) => literal(*dtype, c),
        _ => literal(*dtype, 0.0),
    };
    let t = compute(*dtype);
    body += &format!(
        "var v: {t} = {fill};\nif (inside) {{ v = {}; }}\n",
        kb.load(*dtype, &x, "src")
    );
    let st = ctx.store(&mut kb, &out, "idx", "v")?;
    let text = format!("{head}{body}{st}}}\n}}\n");
    Ok(kb.finish(&ctx.kernel.name, text, [groups, 1, 1]))
}

/// 2-D max/average pooling, one invocation per output element.
///
/// # Errors
/// An epilogue node no rule accepts.
pub fn pool2d(ctx: &LibCtx, p: &Pool2dParams) -> Result<Emitted, String> {
    let (dtype, shape) = &ctx.inputs[0];
    let (h, w) = (shape[2], shape[3]);
    let out_shape = &ctx.result.1;
    let (oh, ow) = (out_shape[2], out_shape[3]);
    let n = numel(out_shape);
    check_i32(&ctx.kernel.name, n.max(numel(shape)))?;
    let mut kb = Kb::new(ctx.target);
    let out = ctx.bind_out(&mut kb);
    let x = ctx.bind_in(&mut kb, 0);
    let (groups, head) = ew_frame(n, ctx.target);
    let [sh, sw] = p.stride;
    let [dh, dw] = p.dilation;
    let [kh, kw] = p.kernel;
    let (pt, pl, pb, pr) = (p.pads[0], p.pads[1], p.pads[2], p.pads[3]);
    let xv = kb.load(*dtype, &x, &format!("(plane + ih * {w} + iw)"));
    let (init, fold, result) = match p.kind {
        PoolKind::Max => (
            "var acc: f32 = -rlx_inf();\n".to_string(),
            format!("acc = rlx_max(acc, {xv});\n"),
            "acc".to_string(),
        ),
        PoolKind::Avg => {
            let count = if p.count_include_pad {
                "cnt_pad"
            } else {
                "cnt"
            };
            (
                "var acc: f32 = 0.0;\nvar cnt: i32 = 0;\nvar cnt_pad: i32 = 0;\n".to_string(),
                format!("acc = acc + {xv};\ncnt = cnt + 1;\n"),
                format!("select(acc / f32({count}), 0.0, {count} == 0)"),
            )
        }
    };
    let count_pad = if p.kind == PoolKind::Avg {
        format!(
            "if (ih >= -{pt} && ih < {} && iw >= -{pl} && iw < {}) {{ cnt_pad = cnt_pad + 1; }}\n",
            h + pb,
            w + pr
        )
    } else {
        String::new()
    };
    let st = ctx.store(&mut kb, &out, "idx", "v")?;
    let text = format!(
        "{head}let ox = idx % {ow};\nlet oy = (idx / {ow}) % {oh};\nlet plane = (idx / {ohw}) * {hw};\n\
         let h0 = oy * {sh} - {pt};\nlet w0 = ox * {sw} - {pl};\n{init}\
         for (var a: i32 = 0; a < {kh}; a += 1) {{\nlet ih = h0 + a * {dh};\n\
         for (var b: i32 = 0; b < {kw}; b += 1) {{\nlet iw = w0 + b * {dw};\n{count_pad}\
         if (ih >= 0 && ih < {h} && iw >= 0 && iw < {w}) {{\n{fold}}}\n}}\n}}\n\
         let v = {result};\n{st}}}\n}}\n",
        ohw = oh * ow,
        hw = h * w,
    );
    Ok(kb.finish(&ctx.kernel.name, text, [groups, 1, 1]))
}

/// Global max/average pooling over H, W: planes spread over invocations as [`Frame`] says.
///
/// # Errors
/// An epilogue node no rule accepts.
pub fn global_pool(ctx: &LibCtx, kind: PoolKind) -> Result<Emitted, String> {
    let (dtype, shape) = &ctx.inputs[0];
    let planes = shape[0] * shape[1];
    let hw = shape[2] * shape[3];
    check_i32(&ctx.kernel.name, numel(shape))?;
    let mut kb = Kb::new(ctx.target);
    let out = ctx.bind_out(&mut kb);
    let x = ctx.bind_in(&mut kb, 0);
    let frame = Frame::new(planes, lanes_for(hw, DType::F32), DType::F32, ctx.target);
    let xv = kb.load(*dtype, &x, &format!("(row * {hw} + j)"));
    let (init, fold, op, result) = match kind {
        PoolKind::Max => (
            "-rlx_inf()",
            format!("rlx_max(acc, {xv})"),
            ReduceOp::Max,
            "tot".to_string(),
        ),
        PoolKind::Avg => (
            "0.0",
            format!("(acc + {xv})"),
            ReduceOp::Sum,
            format!("tot / {}", literal(DType::F32, hw as f64)),
        ),
    };
    let st = ctx.store(&mut kb, &out, "row", "v")?;
    let text = format!(
        "{head}var acc: f32 = {init};\n\
         if (live) {{ for (var j: i32 = lane; j < {hw}; j += lanes) {{ acc = {fold}; }} }}\n\
         {combine}\
         if (live && lane == 0) {{ let v = {result};\n{st}}}\n{tail}",
        head = frame.head(),
        combine = frame.combine("tot", op, DType::F32),
        tail = frame.tail(),
    );
    Ok(kb.finish(&ctx.kernel.name, text, [frame.groups, 1, 1]))
}

/// Index of the max/min along `axis` (first on ties, NaN wins), one invocation per row.
///
/// # Errors
/// An epilogue node no rule accepts.
pub fn argreduce(ctx: &LibCtx, op: ArgOp, axis: usize) -> Result<Emitted, String> {
    let (dtype, shape) = &ctx.inputs[0];
    let len = shape[axis];
    let inner = numel(&shape[axis + 1..]);
    let rows = numel(&shape[..axis]) * inner;
    check_i32(&ctx.kernel.name, numel(shape))?;
    let mut kb = Kb::new(ctx.target);
    let out = ctx.bind_out(&mut kb);
    let x = ctx.bind_in(&mut kb, 0);
    let (groups, head) = ew_frame(rows, ctx.target);
    let cmp = match op {
        ArgOp::ArgMax => ">",
        ArgOp::ArgMin => "<",
    };
    let t = compute(*dtype);
    let better = if t == "f32" {
        format!("!rlx_isnan(best) && (rlx_isnan(xv) || xv {cmp} best)")
    } else if t == "bool" {
        format!("i32(xv) {cmp} i32(best)")
    } else {
        format!("xv {cmp} best")
    };
    let st = ctx.store(&mut kb, &out, "idx", "v")?;
    let text = format!(
        "{head}let rb = (idx / {inner}) * {span} + idx % {inner};\n\
         var best: {t} = {first};\nvar v: i32 = 0;\n\
         for (var j: i32 = 1; j < {len}; j += 1) {{\nlet xv = {xj};\n\
         if ({better}) {{ best = xv; v = j; }}\n}}\n{st}}}\n}}\n",
        span = len * inner,
        first = kb.load(*dtype, &x, "rb"),
        xj = kb.load(*dtype, &x, &format!("(rb + j * {inner})")),
    );
    Ok(kb.finish(&ctx.kernel.name, text, [groups, 1, 1]))
}

/// Direct 2-D convolution (NCHW, OIHW, groups, optional bias), one invocation per output.
///
/// # Errors
/// An epilogue node no rule accepts.
pub fn conv2d(ctx: &LibCtx, p: &Conv2dParams) -> Result<Emitted, String> {
    let (dtype, xs) = &ctx.inputs[0];
    let (wdt, ws) = &ctx.inputs[1];
    let out_shape = &ctx.result.1;
    let n = numel(out_shape);
    check_i32(&ctx.kernel.name, n.max(numel(xs)).max(numel(ws)))?;
    let (c, h, w) = (xs[1], xs[2], xs[3]);
    let (o, cg, kh, kw) = (ws[0], ws[1], ws[2], ws[3]);
    let (oh, ow) = (out_shape[2], out_shape[3]);
    let og = o / p.groups.max(1);
    let mut kb = Kb::new(ctx.target);
    let out = ctx.bind_out(&mut kb);
    let x = ctx.bind_in(&mut kb, 0);
    let wb = ctx.bind_in(&mut kb, 1);
    let bias = if ctx.inputs.len() == 3 {
        let b = ctx.bind_in(&mut kb, 2);
        format!("acc = acc + {};\n", kb.load(ctx.inputs[2].0, &b, "oc"))
    } else {
        String::new()
    };
    let (groups, head) = ew_frame(n, ctx.target);
    let [sh, sw] = p.stride;
    let [dh, dw] = p.dilation;
    let st = ctx.store(&mut kb, &out, "idx", "acc")?;
    let text = format!(
        "{head}let ox = idx % {ow};\nlet oy = (idx / {ow}) % {oh};\nlet oc = (idx / {ohw}) % {o};\n\
         let nb = idx / {ohw} / {o};\nlet g = oc / {og};\n\
         var acc: f32 = 0.0;\n\
         for (var ci: i32 = 0; ci < {cg}; ci += 1) {{\n\
         let plane = (nb * {c} + g * {cg} + ci) * {hw};\nlet wrow = (oc * {cg} + ci) * {khw};\n\
         for (var a: i32 = 0; a < {kh}; a += 1) {{\nlet ih = oy * {sh} - {pt} + a * {dh};\n\
         if (ih >= 0 && ih < {h}) {{\n\
         for (var b: i32 = 0; b < {kw}; b += 1) {{\nlet iw = ox * {sw} - {pl} + b * {dw};\n\
         if (iw >= 0 && iw < {w}) {{ acc = acc + {xv} * {wv}; }}\n}}\n}}\n}}\n}}\n{bias}{st}}}\n}}\n",
        ohw = oh * ow,
        hw = h * w,
        khw = kh * kw,
        pt = p.pads[0],
        pl = p.pads[1],
        xv = kb.load(*dtype, &x, "(plane + ih * W + iw)").replace('W', &w.to_string()),
        wv = kb.load(*wdt, &wb, "(wrow + a * KW + b)").replace("KW", &kw.to_string()),
    );
    Ok(kb.finish(&ctx.kernel.name, text, [groups, 1, 1]))
}

/// Largest head size attention takes (private accumulators per invocation).
pub const MAX_HEAD: usize = 256;

/// Largest head size whose query and output rows are unrolled into scalar registers.
const UNROLL_HEAD: usize = 64;

/// Scaled dot-product attention with online softmax. A workgroup takes 64 query rows of
/// one batch entry (one row per invocation, its query and output rows in registers for
/// heads up to 64) and streams keys and values through workgroup memory in tiles; masks are
/// causal or additive.
///
/// # Errors
/// A head size over [`MAX_HEAD`], or an epilogue node no rule accepts.
pub fn attention(ctx: &LibCtx, mask: AttnMask, scale: Option<f64>) -> Result<Emitted, String> {
    let (dtype, q) = &ctx.inputs[0];
    let (_, k) = &ctx.inputs[1];
    let (_, v) = &ctx.inputs[2];
    let r = q.len();
    let (sq, d) = (q[r - 2], q[r - 1]);
    let (sk, dv) = (k[r - 2], v[r - 1]);
    if d > MAX_HEAD || dv > MAX_HEAD {
        return Err(format!("attention head size {d}/{dv} exceeds {MAX_HEAD}"));
    }
    let out_shape = &ctx.result.1;
    check_i32(
        &ctx.kernel.name,
        numel(out_shape).max(numel(q)).max(numel(k)).max(numel(v)),
    )?;
    let out_batch = &out_shape[..out_shape.len() - 2];
    let batch = numel(out_batch);
    const QT: usize = 64;
    // Keys per tile: as many as fit in workgroup memory with K and V rows.
    let limit = (ctx.target.max_workgroup_storage as usize / 4).min(4096);
    let kt = (limit / (d + dv)).clamp(1, 64);
    let q_tiles = sq.div_ceil(QT);
    let scale = scale.unwrap_or(1.0 / (d as f64).sqrt());
    let mut kb = Kb::new(ctx.target);
    let out = ctx.bind_out(&mut kb);
    let qb = ctx.bind_in(&mut kb, 0);
    let kbn = ctx.bind_in(&mut kb, 1);
    let vb = ctx.bind_in(&mut kb, 2);
    let offs = |name: &str, shape: &[usize]| {
        let mut full = out_batch.to_vec();
        full.extend(&shape[shape.len().saturating_sub(2)..]);
        let st = broadcast_strides(shape, &full);
        let mut s = format!("let {name}: i32 = 0");
        for (i, x) in st.iter().take(out_batch.len()).enumerate() {
            if *x != 0 {
                s += &format!(" + bc{i} * {x}");
            }
        }
        s + ";\n"
    };
    let mut batch_offsets = coords(&Wgsl, "bi", "bc", out_batch, "i32")
        + &offs("qo", q)
        + &offs("ko", k)
        + &offs("vo", v);
    let mask_term = match mask {
        AttnMask::None => String::new(),
        AttnMask::Causal => format!(
            "if (j > i + {}) {{ s = -rlx_inf(); }}\n",
            sk as isize - sq as isize
        ),
        AttnMask::Additive => {
            let (mdt, ms) = &ctx.inputs[3];
            let mb = ctx.bind_in(&mut kb, 3);
            batch_offsets += &offs("mo", ms);
            let mr = ms.len();
            let si = if mr >= 2 && ms[mr - 2] != 1 {
                ms[mr - 1]
            } else {
                0
            };
            let sj = if mr >= 1 && ms[mr - 1] != 1 { 1 } else { 0 };
            format!(
                "s = s + {};\n",
                kb.load(*mdt, &mb, &format!("(mo + i * {si} + j * {sj})"))
            )
        }
    };
    let qload = kb.load(
        *dtype,
        &qb,
        &format!("(qo + min(i, {}) * {d} + c)", sq.saturating_sub(1)),
    );
    let scale = literal(DType::F32, scale);
    let at = format!("((bi * {sq} + i) * {dv} + c)");
    // Small heads keep q and o in scalar registers (unrolled); larger ones in arrays.
    let (q_init, o_init, dot, update, stores) = if d <= UNROLL_HEAD && dv <= UNROLL_HEAD {
        let mut q = String::new();
        let mut dot = String::new();
        for c in 0..d {
            q += &format!(
                "var qv{c}: f32;\n{{ let c = {c}; qv{c} = select(0.0, {qload}, live) * {scale}; }}\n"
            );
            dot += &format!("s = fma(qv{c}, ks[jj * {d} + {c}], s);\n");
        }
        let (mut o, mut upd, mut st) = (String::new(), String::new(), String::new());
        for c in 0..dv {
            o += &format!("var o{c}: f32 = 0.0;\n");
            upd += &format!("o{c} = o{c} * alpha + pj * vs[jj * {dv} + {c}];\n");
            let one = ctx.store(&mut kb, &out, &at, &format!("(o{c} * inv)"))?;
            st += &format!("{{ let c = {c};\n{one}}}\n");
        }
        (q, o, dot, upd, st)
    } else {
        let one = ctx.store(&mut kb, &out, &at, "(o[c] * inv)")?;
        (
            format!(
                "var qv: array<f32, {d}>;\n\
                 for (var c: i32 = 0; c < {d}; c += 1) {{ qv[c] = select(0.0, {qload}, live) * {scale}; }}\n"
            ),
            format!(
                "var o: array<f32, {dv}>;\nfor (var c: i32 = 0; c < {dv}; c += 1) {{ o[c] = 0.0; }}\n"
            ),
            format!("for (var c: i32 = 0; c < {d}; c += 1) {{ s = s + qv[c] * ks[jj * {d} + c]; }}\n"),
            format!(
                "for (var c: i32 = 0; c < {dv}; c += 1) {{ o[c] = o[c] * alpha + pj * vs[jj * {dv} + c]; }}\n"
            ),
            format!("for (var c: i32 = 0; c < {dv}; c += 1) {{\n{one}}}\n"),
        )
    };
    let groups_total = batch * q_tiles;
    if groups_total > ctx.target.max_workgroups as usize {
        return Err(format!(
            "attention needs {groups_total} workgroups (batch {batch} x {q_tiles} query tiles); the adapter allows {} per dimension",
            ctx.target.max_workgroups
        ));
    }
    let text = format!(
        "var<workgroup> ks: array<f32, {kd}>;\nvar<workgroup> vs: array<f32, {vd}>;\n{sig}\
         let bi = i32(wg.x) / {q_tiles};\nlet i = (i32(wg.x) % {q_tiles}) * {QT} + lid;\n\
         {batch_offsets}\
         let live = i < {sq};\n\
         {q_init}{o_init}\
         var m: f32 = -rlx_inf();\nvar l: f32 = 0.0;\n\
         for (var k0: i32 = 0; k0 < {sk}; k0 += {kt}) {{\n\
         workgroupBarrier();\n\
         for (var t: i32 = lid; t < {kt} * {d}; t += {QT}) {{ let j = k0 + t / {d}; \
         ks[t] = select(0.0, {kload}, j < {sk}); }}\n\
         for (var t: i32 = lid; t < {kt} * {dv}; t += {QT}) {{ let j = k0 + t / {dv}; \
         vs[t] = select(0.0, {vload}, j < {sk}); }}\n\
         workgroupBarrier();\n\
         if (live) {{\n\
         let kend = min({kt}, {sk} - k0);\n\
         for (var jj: i32 = 0; jj < kend; jj += 1) {{\n\
         let j = k0 + jj;\n\
         var s: f32 = 0.0;\n\
         {dot}\
         {mask_term}\
         let nm = max(m, s);\n\
         if (nm != -rlx_inf()) {{\n\
         let alpha = exp(m - nm);\nlet pj = exp(s - nm);\n\
         l = l * alpha + pj;\nm = nm;\n\
         {update}\
         }}\n}}\n}}\n}}\n\
         if (live) {{\nlet inv = 1.0 / l;\n{stores}}}\n}}\n",
        kd = kt * d,
        vd = kt * dv,
        sig = main_sig(QT),
        kload = kb.load(
            *dtype,
            &kbn,
            &format!("(ko + min(j, {}) * {d} + t % {d})", sk.saturating_sub(1))
        ),
        vload = kb.load(
            *dtype,
            &vb,
            &format!("(vo + min(j, {}) * {dv} + t % {dv})", sk.saturating_sub(1))
        ),
    );
    Ok(kb.finish(&ctx.kernel.name, text, [groups_total as u32, 1, 1]))
}
