//! Layer norm and RMS norm over the trailing dims `axis..`, a warp or block per row: the
//! mean (and for layer norm the variance around it, in a second pass over the row), then
//! the normalized, scaled (and shifted) write. Scale and bias broadcast to the normalized
//! shape through their own strides.

use super::dtype::{compute, literal, load};
use super::group::RowGroup;
use super::index::{contiguous, coords, offset, IndexSpace};
use super::store::{numel, LibCtx};
use super::{finish, EmittedKernel};

/// Strides of a parameter of shape `p` broadcast to the normalized shape `norm`.
fn broadcast_strides(p: &[usize], norm: &[usize]) -> Vec<isize> {
    let own = contiguous(p);
    let lead = norm.len() - p.len();
    (0..norm.len())
        .map(|d| {
            if d < lead || p[d - lead] == 1 {
                0
            } else {
                own[d - lead]
            }
        })
        .collect()
}

/// Emits layer norm (`layer == true`, inputs x, scale, bias) or RMS norm (x, scale).
///
/// # Errors
/// An epilogue node no rule accepts.
pub fn emit(ctx: &LibCtx, axis: usize, eps: f64, layer: bool) -> Result<EmittedKernel, String> {
    let (dtype, shape) = &ctx.inputs[0];
    let rows = numel(&shape[..axis]);
    let norm = &shape[axis..];
    let len = numel(norm);
    let t = compute(*dtype);
    let ity = if numel(shape) < (1 << 30) {
        "int"
    } else {
        "long long"
    };
    let n_params = if layer { 2 } else { 1 };
    let mut views = vec![contiguous(norm)];
    for p in 1..=n_params {
        views.push(broadcast_strides(&ctx.inputs[p].1, norm));
    }
    let sp = IndexSpace::merge(norm, &views);
    let param_off: Vec<String> = (1..=n_params)
        .map(|p| offset("0", "c", &sp.strides[p]))
        .collect();
    let coord_text = coords("j", "c", &sp.dims, ity);
    let g = RowGroup::pick(rows, len, ctx.target);
    let (start, step) = g.rows();
    let x = load(*dtype, "in0[base + j]");
    let zero = literal(*dtype, 0.0);
    let sqrt = if t == "float" { "rsqrtf" } else { "1.0 / sqrt" };
    let (stats, normalized) = if layer {
        (
            format!(
                "{t} sum = {zero};\n\
                 for ({ity} j = {lane}; j < {len}; j += {gs}) sum += {x};\n\
                 const {t} mean = {rsum}(sum) / ({t}){len};\n\
                 {t} sq = {zero};\n\
                 for ({ity} j = {lane}; j < {len}; j += {gs}) {{ const {t} d = {x} - mean; sq += d * d; }}\n\
                 const {t} rstd = {sqrt}({rsum}(sq) / ({t}){len} + ({t}){eps});\n",
                lane = g.lane(),
                gs = g.size,
                rsum = g.reduce("sum"),
                eps = literal(*dtype, eps),
            ),
            format!(
                "({x} - mean) * rstd * {} + {}",
                load(*dtype, &format!("in1[{}]", param_off[0])),
                load(*dtype, &format!("in2[{}]", param_off[1]))
            ),
        )
    } else {
        (
            format!(
                "{t} sq = {zero};\n\
                 for ({ity} j = {lane}; j < {len}; j += {gs}) {{ const {t} d = {x}; sq += d * d; }}\n\
                 const {t} rstd = {sqrt}({rsum}(sq) / ({t}){len} + ({t}){eps});\n",
                lane = g.lane(),
                gs = g.size,
                rsum = g.reduce("sum"),
                eps = literal(*dtype, eps),
            ),
            format!("{x} * rstd * {}", load(*dtype, &format!("in1[{}]", param_off[0]))),
        )
    };
    let store = ctx.store("base + j", "v", ity)?;
    let text = format!(
        "extern \"C\" __global__ void __launch_bounds__(256) RLX_FN({ins}{outs}) {{\n\
         for ({ity} row = {start}; row < {rows}; row += {step}) {{\n\
         const {ity} base = row * {len};\n{stats}\
         for ({ity} j = {lane}; j < {len}; j += {gs}) {{\n{coord_text}const {t} v = {normalized};\n{store}}}\n}}\n}}\n",
        ins = ctx.in_params(),
        outs = ctx.out_params(),
        lane = g.lane(),
        gs = g.size,
    );
    let family = if layer { "layer_norm" } else { "rms_norm" };
    Ok(finish(
        &ctx.kernel.name,
        family,
        text,
        g.launch(rows),
        ctx.args(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_broadcast_from_the_right() {
        assert_eq!(broadcast_strides(&[4], &[3, 4]), vec![0, 1]);
        assert_eq!(broadcast_strides(&[3, 1], &[3, 4]), vec![1, 0]);
        assert_eq!(broadcast_strides(&[3, 4], &[3, 4]), vec![4, 1]);
    }
}
