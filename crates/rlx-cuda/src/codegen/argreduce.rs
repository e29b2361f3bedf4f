//! Argmax / argmin along one axis: one thread per output element walks the axis; the first
//! index wins ties, and a NaN wins over numbers (as numpy does).

use super::dtype::{compute, load};
use super::store::{numel, LibCtx};
use super::{finish, grid_for, EmittedKernel, Launch};
use rlx_ir::ArgOp;

/// Emits the index reduction (result i64).
///
/// # Errors
/// An epilogue node no rule accepts.
pub fn emit(ctx: &LibCtx, op: ArgOp, axis: usize) -> Result<EmittedKernel, String> {
    let (dtype, shape) = &ctx.inputs[0];
    let len = shape[axis];
    let inner = numel(&shape[axis + 1..]);
    let rows = numel(&shape[..axis]) * inner;
    let t = compute(*dtype);
    let ity = if numel(shape) < (1 << 30) {
        "int"
    } else {
        "long long"
    };
    let cmp = match op {
        ArgOp::ArgMax => ">",
        ArgOp::ArgMin => "<",
    };
    let nan_check = if dtype.is_float() {
        "(best == best) && (x != x || x CMP best)"
    } else {
        "x CMP best"
    }
    .replace("CMP", cmp);
    let store = ctx.store("row", "v", ity)?;
    let text = format!(
        "extern \"C\" __global__ void __launch_bounds__(256) RLX_FN({ins}{outs}) {{\n\
         for ({ity} row = blockIdx.x * 256 + threadIdx.x; row < {rows}; row += gridDim.x * 256) {{\n\
         const {ity} base = (row / {inner}) * {span} + row % {inner};\n\
         {t} best = {first};\n\
         long long v = 0;\n\
         for ({ity} j = 1; j < {len}; ++j) {{\n\
         const {t} x = {xj};\n\
         if ({nan_check}) {{ best = x; v = j; }}\n}}\n{store}}}\n}}\n",
        ins = ctx.in_params(),
        outs = ctx.out_params(),
        span = len * inner,
        first = load(*dtype, "in0[base]"),
        xj = load(*dtype, &format!("in0[base + j * {inner}]")),
    );
    let family = match op {
        ArgOp::ArgMax => "argmax",
        ArgOp::ArgMin => "argmin",
    };
    Ok(finish(
        &ctx.kernel.name,
        family,
        text,
        Launch::linear(grid_for(rows, 256), 256),
        ctx.args(),
    ))
}
