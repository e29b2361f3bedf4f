//! Data movement that loop kernels cannot express: concat (a piecewise choice of input per
//! element) and pad (constant, reflect or edge fill). One thread per output element.

use super::dialect::CudaC;
use super::dtype::{literal, load};
use super::index::contiguous;
use super::store::{numel, LibCtx};
use super::{finish, grid_for, EmittedKernel, Launch};
use rlx_ir::render::coords;
use rlx_ir::PadMode;

/// Emits concat along `axis`.
///
/// # Errors
/// An epilogue node no rule accepts.
pub fn concat(ctx: &LibCtx, axis: usize) -> Result<EmittedKernel, String> {
    let out = &ctx.result.1;
    let n = numel(out);
    let post = numel(&out[axis + 1..]);
    let total = out[axis];
    let ity = if n < (1 << 30) { "int" } else { "long long" };
    let mut choose = String::new();
    let mut start = 0usize;
    for (i, (dtype, shape)) in ctx.inputs.iter().enumerate() {
        let a = shape[axis];
        if a == 0 {
            continue;
        }
        let read = load(
            *dtype,
            &format!("in{i}[(p * {a} + (j - {start})) * {post} + q]"),
        );
        choose += &format!("if (j < {}) v = {read}; else\n", start + a);
        start += a;
    }
    choose += "{}\n";
    let t = super::dtype::compute(ctx.result.0);
    let store = ctx.store("idx", "v", ity)?;
    let text = format!(
        "extern \"C\" __global__ void __launch_bounds__(256) RLX_FN({ins}{outs}) {{\n\
         for ({ity} idx = blockIdx.x * 256 + threadIdx.x; idx < {n}; idx += gridDim.x * 256) {{\n\
         const {ity} q = idx % {post};\n\
         const {ity} t = idx / {post};\n\
         const {ity} j = t % {total};\n\
         const {ity} p = t / {total};\n\
         {t} v = 0;\n{choose}{store}}}\n}}\n",
        ins = ctx.in_params(),
        outs = ctx.out_params(),
    );
    Ok(finish(
        &ctx.kernel.name,
        "concat",
        text,
        Launch::linear(grid_for(n, 256), 256),
        ctx.args(),
    ))
}

/// Emits pad with `pads[d] = (before, after)`.
///
/// # Errors
/// An epilogue node no rule accepts.
pub fn pad(ctx: &LibCtx, pads: &[(usize, usize)], mode: PadMode) -> Result<EmittedKernel, String> {
    let (dtype, shape) = &ctx.inputs[0];
    let out = &ctx.result.1;
    let n = numel(out);
    let ity = if n.max(numel(shape)) < (1 << 30) {
        "int"
    } else {
        "long long"
    };
    let in_strides = contiguous(shape);
    let mut body = coords(&CudaC, "idx", "c", out, ity);
    body += &format!("{ity} src = 0;\nbool inside = true;\n");
    for (d, &(before, _)) in pads.iter().enumerate() {
        let len = shape[d] as isize;
        body += &format!("{{ {ity} i = c{d} - {before};\n");
        body += &match mode {
            PadMode::Constant(_) => format!("if (i < 0 || i >= {len}) inside = false;\n"),
            PadMode::Reflect => format!(
                "if (i < 0) i = -i;\nif (i >= {len}) i = {} - i;\n",
                2 * (len - 1)
            ),
            PadMode::Edge => format!("i = i < 0 ? 0 : (i >= {len} ? {} : i);\n", (len - 1).max(0)),
        };
        body += &format!("src += i * {}; }}\n", in_strides[d]);
    }
    let t = super::dtype::compute(*dtype);
    let fill = match mode {
        PadMode::Constant(c) => literal(*dtype, c),
        PadMode::Reflect | PadMode::Edge => literal(*dtype, 0.0),
    };
    body += &format!(
        "const {t} v = inside ? {} : {fill};\n",
        load(*dtype, "in0[inside ? src : 0]")
    );
    let store = ctx.store("idx", "v", ity)?;
    let text = format!(
        "extern \"C\" __global__ void __launch_bounds__(256) RLX_FN({ins}{outs}) {{\n\
         for ({ity} idx = blockIdx.x * 256 + threadIdx.x; idx < {n}; idx += gridDim.x * 256) {{\n\
         {body}{store}}}\n}}\n",
        ins = ctx.in_params(),
        outs = ctx.out_params(),
    );
    Ok(finish(
        &ctx.kernel.name,
        "pad",
        text,
        Launch::linear(grid_for(n, 256), 256),
        ctx.args(),
    ))
}
