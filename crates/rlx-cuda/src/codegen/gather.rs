//! Gather (`data.take(indices, axis)`): one thread per output element; negative indices
//! count from the end and out-of-range ones clamp to the valid range instead of faulting.

use super::dtype::load;
use super::store::{numel, LibCtx};
use super::{finish, grid_for, EmittedKernel, Launch};

/// Emits gather along `axis`.
///
/// # Errors
/// An epilogue node no rule accepts.
pub fn emit(ctx: &LibCtx, axis: usize) -> Result<EmittedKernel, String> {
    let (dtype, shape) = &ctx.inputs[0];
    let (_, idx_shape) = &ctx.inputs[1];
    let n_idx = numel(idx_shape);
    let dim = shape[axis];
    let post = numel(&shape[axis + 1..]);
    let n = numel(&ctx.result.1);
    let ity = if numel(shape).max(n) < (1 << 30) {
        "int"
    } else {
        "long long"
    };
    let store = ctx.store("idx", "v", ity)?;
    let text = format!(
        "extern \"C\" __global__ void __launch_bounds__(256) RLX_FN({ins}{outs}) {{\n\
         for ({ity} idx = blockIdx.x * 256 + threadIdx.x; idx < {n}; idx += gridDim.x * 256) {{\n\
         const {ity} q = idx % {post};\n\
         const {ity} t = idx / {post};\n\
         const {ity} i = t % {n_idx};\n\
         const {ity} p = t / {n_idx};\n\
         long long a = (long long)in1[i];\n\
         if (a < 0) a += {dim};\n\
         a = a < 0 ? 0 : (a >= {dim} ? {last} : a);\n\
         const auto v = {value};\n{store}}}\n}}\n",
        ins = ctx.in_params(),
        outs = ctx.out_params(),
        last = dim.saturating_sub(1),
        value = load(*dtype, &format!("in0[(p * {dim} + ({ity})a) * {post} + q]")),
    );
    Ok(finish(
        &ctx.kernel.name,
        "gather",
        text,
        Launch::linear(grid_for(n, 256), 256),
        ctx.args(),
    ))
}
