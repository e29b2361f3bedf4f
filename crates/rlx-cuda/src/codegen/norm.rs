//! Layer norm and RMS norm over the trailing dims `axis..`, a warp or block per row: the
//! mean (and for layer norm the variance around it, in a second pass over the row), then
//! the normalized, scaled (and shifted) write. Scale and bias broadcast to the normalized
//! shape through their own strides.
//!
//! Rows of f32/f16/bf16 up to 4096 elements whose scale and bias are whole rows (or single
//! values) take the register path ([`RegisterRows`]): a group of lanes per row (a warp, or
//! fewer lanes for short rows, several rows to a warp), the row read once with vector loads
//! of up to 16 bytes and held in registers, both passes of the statistics over the
//! registers in f32, group reductions with warp shuffles, and vector stores.

use super::dialect::CudaC;
use super::dtype::{compute, literal, load, storage, store as store_value};
use super::group::RowGroup;
use super::index::{contiguous, IndexSpace};
use super::store::{numel, LibCtx};
use super::vector::{elem_bytes, widest, Wide};
use super::{finish, grid_for, EmittedKernel, Launch, Target};
use rlx_ir::render::{coords, offset};
use rlx_ir::DType;

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
    let param_dtypes: Vec<DType> = (1..=n_params).map(|p| ctx.inputs[p].0).collect();
    if let Some(r) = RegisterRows::pick(*dtype, &param_dtypes, &sp, rows, len, ctx.target) {
        return register_rows(ctx, &r, &sp, rows, len, eps, layer);
    }
    let param_off: Vec<String> = (1..=n_params)
        .map(|p| offset("0", "c", &sp.strides[p]))
        .collect();
    let coord_text = coords(&CudaC, "j", "c", &sp.dims, ity);
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
                eps = eps_literal(*dtype, eps),
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
                eps = eps_literal(*dtype, eps),
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

/// The register path's geometry: `group` lanes per row, each holding `per_lane` vectors of
/// `width` elements (vector `lane + v * group` of the row for its `v`-th).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegisterRows {
    /// elements per vector move (up to 16 bytes of the input dtype)
    pub width: usize,
    /// lanes per row: a power of two up to 32
    pub group: usize,
    /// vectors per lane
    pub per_lane: usize,
    /// the row's vector count is not a multiple of `group`: the last vector is guarded
    pub guarded: bool,
}

/// Most elements one lane holds in registers.
const MAX_HELD: usize = 64;
/// Longest row the register path takes.
const MAX_LEN: usize = 4096;

impl RegisterRows {
    /// The register path for rows of `len` elements of `dtype` with parameters of
    /// `params` dtypes read through the merged space `sp` (input 0, then the parameters);
    /// None keeps the general path: other dtypes, parameters that are not whole rows or
    /// single values, rows longer than 4096, or long rows too few for a warp each.
    pub fn pick(
        dtype: DType,
        params: &[DType],
        sp: &IndexSpace,
        rows: usize,
        len: usize,
        target: &Target,
    ) -> Option<RegisterRows> {
        elem_bytes(dtype)?;
        if params.iter().any(|&d| elem_bytes(d).is_none())
            || len > MAX_LEN
            || sp.dims.len() != 1
            || RowGroup::pick(rows, len, target).size != 32
            || !sp.strides[1..].iter().all(|s| s == &[1] || s == &[0])
        {
            return None;
        }
        let width = widest(dtype, len);
        let vectors = len / width;
        // The largest group the vectors split over evenly, unless that leaves a lane too
        // many elements: then a warp, the last vector guarded.
        let mut group = 32;
        while !vectors.is_multiple_of(group) {
            group /= 2;
        }
        if (vectors / group) * width <= MAX_HELD {
            return Some(RegisterRows {
                width,
                group,
                per_lane: vectors / group,
                guarded: false,
            });
        }
        Some(RegisterRows {
            width,
            group: 32,
            per_lane: vectors.div_ceil(32),
            guarded: !vectors.is_multiple_of(32),
        })
    }

    /// Rows one block of 256 threads handles per pass.
    pub fn rows_per_block(&self) -> usize {
        256 / self.group
    }
}

/// The register-path kernel (see the module docs).
fn register_rows(
    ctx: &LibCtx,
    r: &RegisterRows,
    sp: &IndexSpace,
    rows: usize,
    len: usize,
    eps: f64,
    layer: bool,
) -> Result<EmittedKernel, String> {
    let dtype = ctx.inputs[0].0;
    let ity = if numel(&ctx.inputs[0].1) < (1 << 30) {
        "int"
    } else {
        "long long"
    };
    let (w, g) = (r.width, r.group);
    let per_warp = 32 / g;
    let per_block = r.rows_per_block();
    let xin = Wide::new(dtype, w).ok_or("no vector moves for the input dtype")?;
    let out_dt = ctx.out_dtype();
    let out_wide = Wide::new(out_dt, w);
    let eps = eps_literal(dtype, eps);
    let held = |v: usize| format!("x{v}");
    // The lanes of a vector: `ok{v}` says whether it lies in the row.
    let valid = |v: usize| {
        if r.guarded && v + 1 == r.per_lane {
            format!("live && j{v} < {len}")
        } else {
            "live".to_string()
        }
    };
    let mut body = String::new();
    for v in 0..r.per_lane {
        body += &format!(
            "const int j{v} = (lane + {}) * {w};\n\
             const bool ok{v} = {};\n",
            v * g,
            valid(v)
        );
        let names: Vec<String> = (0..w).map(|e| format!("{}_{e}", held(v))).collect();
        let zeros: Vec<String> = names.iter().map(|n| format!("{n} = 0.0f")).collect();
        body += &format!("float {};\n", zeros.join(", "));
        body += &format!(
            "if (ok{v}) {{\n\
             {}",
            xin.load("a", "in0", &format!("base + j{v}"))
        );
        for (e, n) in names.iter().enumerate() {
            body += &format!("{n} = {};\n", load(dtype, &xin.elem("a", e)));
        }
        body += "}\n";
    }
    let each = |f: &dyn Fn(&str) -> String| -> String {
        let mut s = String::new();
        for v in 0..r.per_lane {
            let terms: String = (0..w).map(|e| f(&format!("{}_{e}", held(v)))).collect();
            if r.guarded && v + 1 == r.per_lane {
                s += &format!(
                    "if (ok{v}) {{\n\
                     {terms}}}\n"
                );
            } else {
                s += &terms;
            }
        }
        s
    };
    let group_sum = |var: &str| {
        if g > 1 {
            format!(
                "for (int s = {}; s > 0; s >>= 1) {var} += __shfl_xor_sync(0xffffffffu, {var}, s);\n",
                g / 2
            )
        } else {
            String::new()
        }
    };
    let stats = if layer {
        format!(
            "float sum = 0.0f;\n\
             {}{}const float mean = sum / (float){len};\n\
             float sq = 0.0f;\n\
             {}{}const float rstd = rsqrtf(sq / (float){len} + {eps});\n",
            each(&|x| format!("sum += {x};\n")),
            group_sum("sum"),
            each(&|x| format!("{{ const float d = {x} - mean; sq += d * d; }}\n")),
            group_sum("sq"),
        )
    } else {
        format!(
            "float sq = 0.0f;\n\
             {}{}const float rstd = rsqrtf(sq / (float){len} + {eps});\n",
            each(&|x| format!("{{ const float d = {x}; sq += d * d; }}\n")),
            group_sum("sq"),
        )
    };
    body += &stats;
    let n_params = if layer { 2 } else { 1 };
    for v in 0..r.per_lane {
        let at = format!("base + j{v}");
        let mut s = String::new();
        let mut param = Vec::new();
        for p in 1..=n_params {
            let pdt = ctx.inputs[p].0;
            if sp.strides[p] == [0] {
                param.push(vec![load(pdt, &format!("in{p}[0]")); w]);
            } else {
                let pw = Wide::new(pdt, w).ok_or("no vector moves for a parameter dtype")?;
                s += &pw.load(&format!("p{p}"), &format!("in{p}"), &format!("j{v}"));
                param.push(
                    (0..w)
                        .map(|e| load(pdt, &pw.elem(&format!("p{p}"), e)))
                        .collect(),
                );
            }
        }
        let mut outs = Vec::new();
        for (e, scale) in param[0].iter().enumerate() {
            let x = format!("{}_{e}", held(v));
            let y = if layer {
                format!("({x} - mean) * rstd * {scale} + {}", param[1][e])
            } else {
                format!("{x} * rstd * {scale}")
            };
            s += &format!("const float y{e} = {y};\n");
            match &ctx.epilogue {
                None => outs.push(store_value(ctx.result.0, &format!("y{e}"))),
                Some(epi) => {
                    let (stmts, var) = epi.apply(&format!("{at} + {e}"), &format!("y{e}"), ity)?;
                    s += &format!(
                        "{} o{e};\n\
                         {{\n\
                         {stmts}o{e} = {var};\n\
                         }}\n",
                        storage(out_dt)
                    );
                    outs.push(format!("o{e}"));
                }
            }
        }
        match out_wide {
            Some(ow) => s += &ow.store("out", &at, &outs),
            None => {
                for (e, o) in outs.iter().enumerate() {
                    s += &format!("out[{at} + {e}] = {o};\n");
                }
            }
        }
        body += &format!(
            "if (ok{v}) {{\n\
             {s}}}\n"
        );
    }
    let text = format!(
        "// rows in registers: {g} lanes per row, {w}-wide vectors, {pl} per lane\n\
         extern \"C\" __global__ void __launch_bounds__(256) RLX_FN({ins}{outs}) {{\n\
         const int lane = threadIdx.x & {gm};\n\
         for ({ity} row0 = ({ity})blockIdx.x * {per_block} + (threadIdx.x >> 5) * {per_warp}; \
         row0 < {rows}; row0 += ({ity})gridDim.x * {per_block}) {{\n\
         const {ity} row = row0 + ((threadIdx.x & 31) / {g});\n\
         const bool live = row < {rows};\n\
         const {ity} base = row * {len};\n{body}}}\n}}\n",
        pl = r.per_lane,
        gm = g - 1,
        ins = ctx.in_params(),
        outs = ctx.out_params(),
    );
    let family = if layer { "layer_norm" } else { "rms_norm" };
    let launch = Launch::linear(grid_for(rows, per_block).min(1 << 20), 256);
    Ok(finish(&ctx.kernel.name, family, text, launch, ctx.args()))
}

/// eps in the type the norm computes in (f32 for f16/bf16/f32, f64 for f64), not rounded to
/// the tensor's dtype: a 1e-12 eps would be 0 in f16 and a constant row would divide by zero.
pub(super) fn eps_literal(dtype: rlx_ir::DType, eps: f64) -> String {
    let compute = if dtype == rlx_ir::DType::F64 {
        rlx_ir::DType::F64
    } else {
        rlx_ir::DType::F32
    };
    literal(compute, eps)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(dtype: DType, rows: usize, len: usize) -> Option<RegisterRows> {
        let sp = IndexSpace::merge(&[len], &[vec![1], vec![1], vec![1]]);
        RegisterRows::pick(dtype, &[dtype, dtype], &sp, rows, len, &Target::h200())
    }

    #[test]
    fn eps_is_not_rounded_to_a_half_dtype() {
        assert_eq!(eps_literal(DType::F16, 1e-12), literal(DType::F32, 1e-12));
        assert_ne!(eps_literal(DType::F16, 1e-12), literal(DType::F16, 1e-12));
        assert_eq!(eps_literal(DType::F64, 1e-12), literal(DType::F64, 1e-12));
    }

    #[test]
    fn register_rows_follow_the_row_length() {
        let r = |width, group, per_lane, guarded| {
            Some(RegisterRows {
                width,
                group,
                per_lane,
                guarded,
            })
        };
        // The encoder's rows: 384 halves are 48 vectors of 16 bytes, 16 lanes with 3 each.
        assert_eq!(pick(DType::F16, 32768, 384), r(8, 16, 3, false));
        assert_eq!(pick(DType::BF16, 32768, 1536), r(8, 32, 6, false));
        assert_eq!(pick(DType::F32, 32768, 384), r(4, 32, 3, false));
        // 100 halves: 8-byte vectors, 25 of them over a warp.
        assert_eq!(pick(DType::F16, 64, 100), r(4, 32, 1, true));
        assert_eq!(pick(DType::F16, 32768, 4096), r(8, 32, 16, false));
        // Short rows share a warp.
        assert_eq!(pick(DType::F32, 64, 8), r(4, 2, 1, false));
        assert_eq!(pick(DType::F16, 64, 4097), None);
        assert_eq!(pick(DType::F64, 64, 384), None);
        // Few long rows keep the block-per-row path.
        assert_eq!(pick(DType::F16, 4, 4096), None);
    }

    #[test]
    fn parameters_broadcast_from_the_right() {
        assert_eq!(broadcast_strides(&[4], &[3, 4]), vec![0, 1]);
        assert_eq!(broadcast_strides(&[3, 1], &[3, 4]), vec![1, 0]);
        assert_eq!(broadcast_strides(&[3, 4], &[3, 4]), vec![4, 1]);
    }
}
