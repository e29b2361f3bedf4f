//! A GEMM whose block holds whole rows of its result, so the layer norm (or RMS norm) that
//! follows it runs in the GEMM's store: `out = norm(epilogue(A · B))` over rows of `n <= 384`
//! columns. A post-norm transformer computes `LayerNorm(x · W + bias + residual)` after its
//! attention output projection and its second FFN GEMM; as two steps the sum goes to memory
//! and the norm kernel reads it back (at the encoder's batch 256, 2 x 25 MB per norm). Here
//! it never leaves the SM.
//!
//! The kernel is [`super::gemm_wgmma`]'s (two warpgroups, 128 rows per block, `wgmma` from
//! swizzled shared memory fed by `cp.async`) with the block as wide as the rows
//! (`bn = n` rounded up to 64, one block column), and a store that gives each warp 16 of
//! the block's rows: a lane takes 4-column groups `lane, lane + 32, ...` of the row from the
//! f32 tile in shared memory, applies the GEMM's own epilogue (bias, residual, ...) and
//! rounds to its dtype exactly as the unfused GEMM would store it, then takes the row's mean
//! and the variance around it with warp shuffles (two passes over registers, as the norm
//! kernel does), and writes the normalised, scaled and shifted row through the norm's own
//! epilogue with 8- or 16-byte stores. Each lane's scale and shift values are loaded once per
//! block. Offered as a [`crate::plan::Choice`] against the GEMM step plus the norm step and
//! chosen by timing at compile.

use super::dtype::{load, storage};
use super::gemm_mma::MmaGemm;
use super::gemm_wgmma::{self, WgmmaTile, BM, CPAD, MAX_BN, THREADS};
use super::store::{numel, LibCtx};
use super::{finish, EmittedKernel, Launch};
use rlx_ir::DType;

/// The norm that follows the GEMM: its frame (inputs x, scale and, for layer norm, shift;
/// its result and own epilogue), its epsilon, and which norm.
pub struct RowNorm<'a> {
    /// the norm library kernel's context
    pub ctx: LibCtx<'a>,
    /// added to the variance (or mean square) before the reciprocal square root
    pub eps: f64,
    /// layer norm (centred, scale and shift) when true, RMS norm (scale only) when false
    pub layer: bool,
}

impl RowNorm<'_> {
    /// The parameters the norm reads besides x: scale, and shift for layer norm.
    fn params(&self) -> usize {
        if self.layer {
            2
        } else {
            1
        }
    }
}

/// The tilings offered for an `n`-column result: 128 x `bn` blocks with 3 pipeline stages,
/// and 4 where shared memory holds them (rows of up to 256 columns), each with the MMAs of
/// a k tile waited for before the next is issued or left running while it is.
pub fn tiles(n: usize) -> Vec<WgmmaTile> {
    let bn = n.next_multiple_of(64);
    [(3, 0), (3, 1), (4, 0), (4, 1)]
        .into_iter()
        .map(|(stages, inflight)| WgmmaTile {
            bn,
            stages,
            inflight,
        })
        .filter(|t| t.shared_bytes() <= 227 * 1024)
        .collect()
}

/// True when the kernel runs this GEMM and norm in this tiling: the GEMM kernel applies,
/// the block covers the whole row (`n <= 384`, one block column), the norm reads the GEMM's
/// stored dtype over rows of exactly `n` elements, and its parameters are f32/f16/bf16 rows
/// of `n` elements or single values.
pub fn applies(gemm: &LibCtx, norm: &RowNorm, g: &MmaGemm, tile: &WgmmaTile) -> bool {
    let (x_dtype, x_shape) = &norm.ctx.inputs[0];
    let half_or_single = |d: DType| matches!(d, DType::F32 | DType::F16 | DType::BF16);
    gemm_wgmma::applies(gemm, g, tile)
        && g.n <= MAX_BN
        && tile.bn == g.n.next_multiple_of(64)
        && *x_dtype == gemm.out_dtype()
        && numel(x_shape) == g.m * g.n
        && x_shape.last() == Some(&g.n)
        && norm.ctx.inputs.len() == 1 + norm.params()
        && norm.ctx.inputs[1..]
            .iter()
            .all(|(d, s)| half_or_single(*d) && (numel(s) == g.n || numel(s) == 1))
        && half_or_single(norm.ctx.out_dtype())
}

/// Emits the GEMM + norm kernel for `g` in `tile`; `gemm` is the GEMM's context (operands,
/// its epilogue), `norm` the norm's.
///
/// # Errors
/// The problem is outside [`applies`], or an epilogue node no rule accepts.
pub fn emit(
    gemm: &LibCtx,
    norm: RowNorm,
    g: &MmaGemm,
    tile: &WgmmaTile,
) -> Result<EmittedKernel, String> {
    if !applies(gemm, &norm, g, tile) {
        return Err(format!(
            "no GEMM + norm kernel for m{} n{} k{} in {tile:?}",
            g.m, g.n, g.k
        ));
    }
    let norm = RowNorm {
        ctx: LibCtx {
            epilogue: norm.ctx.epilogue.map(|e| e.named("nep")),
            ..norm.ctx
        },
        ..norm
    };
    let out_dtype = norm.ctx.out_dtype();
    let gemm_epi = gemm
        .epilogue
        .as_ref()
        .map(|e| e.params())
        .unwrap_or_default();
    let norm_params: String = (1..=norm.params())
        .map(|p| {
            format!(
                ", const {}* __restrict__ nrm{p}",
                storage(norm.ctx.inputs[p].0)
            )
        })
        .collect();
    let norm_epi = norm
        .ctx
        .epilogue
        .as_ref()
        .map(|e| e.params())
        .unwrap_or_default();
    let params = format!(
        "{}, {}* __restrict__ out{gemm_epi}{norm_params}{norm_epi}",
        gemm.in_params(),
        storage(out_dtype)
    );
    let store = row_store(gemm, &norm, g, tile)?;
    let text = gemm_wgmma::kernel_text(gemm, g, tile, (&params, &prefetch(gemm, g), &store));
    // operands, the norm's output, the GEMM epilogue's inputs, the norm's parameters, the
    // norm epilogue's inputs
    let mut args = gemm.args();
    args[0] = g.a.0;
    args[1] = g.b.0;
    args[2] = super::ArgRef::Buffer(norm.ctx.kernel.output);
    let norm_args = norm.ctx.args();
    args.extend(&norm_args[1..=norm.params()]);
    args.extend(&norm_args[2 + norm.params()..]);
    let launch = Launch {
        grid: [1, g.m.div_ceil(BM) as u32],
        block: THREADS as u32,
        shared_bytes: tile.shared_bytes() as u32,
    };
    let family = if norm.layer {
        "gemm_layer_norm"
    } else {
        "gemm_rms_norm"
    };
    let mut k = finish(&gemm.kernel.name, family, text, launch, args);
    k.label += &format!(
        " [Hopper tensor-core GEMM {} m{} n{} k{} + {} ({}) in its store: 128x{} tiles, \
         2 warpgroups, {} stages, {} in flight]",
        gemm_wgmma::operand_type(gemm),
        g.m,
        g.n,
        g.k,
        family.trim_start_matches("gemm_"),
        norm.ctx.kernel.name,
        tile.bn,
        tile.stages,
        tile.inflight
    );
    Ok(k)
}

/// Statements that ask L2 for the block's rows of each epilogue input read element for
/// element (a residual) before the main loop, so the store, which waits on those loads
/// row by row, finds them there rather than in device memory.
fn prefetch(gemm: &LibCtx, g: &MmaGemm) -> String {
    let Some(e) = &gemm.epilogue else {
        return String::new();
    };
    e.full_inputs()
        .iter()
        .map(|(name, offset, dtype)| {
            format!(
                "{{\n\
                 const char* pf = reinterpret_cast<const char*>({name} + {offset} + (long long)bm0 * {n});\n\
                 const int pf_bytes = min({BM}, {m} - bm0) * {row_bytes};\n\
                 for (int o = tid * 128; o < pf_bytes; o += {THREADS} * 128) \
                 asm volatile(\"prefetch.global.L2 [%0];\" :: \"l\"(pf + o));\n\
                 }}\n",
                n = g.n,
                m = g.m,
                row_bytes = g.n * dtype.size_bytes(),
            )
        })
        .collect()
}

/// Columns per lane group: four f32 values from the tile, four results per store.
const GROUP: usize = 4;
/// Rows a warp normalises at once: their epilogue loads are in flight together and their
/// reductions interleave (one row at a time waits out a memory latency per row).
const ROWS_AT_ONCE: usize = 8;

/// The store: each warp normalises rows `warp, warp + 8, ...` of the block's 128,
/// [`ROWS_AT_ONCE`] at a time (see the module docs).
fn row_store(
    gemm: &LibCtx,
    norm: &RowNorm,
    g: &MmaGemm,
    tile: &WgmmaTile,
) -> Result<String, String> {
    let n = g.n;
    let groups = n / GROUP;
    let per_lane = groups.div_ceil(32);
    let warps = THREADS / 32;
    let ity = if g.m * n < (1 << 31) {
        "int"
    } else {
        "long long"
    };
    // lane groups past the row's end exist only when the groups do not fill every lane
    let full = groups.is_multiple_of(32);
    let guard = |body: &str, otherwise: &str| {
        if full {
            body.to_string()
        } else {
            format!("if (c0 < {n}) {{\n{body}}} else {{\n{otherwise}}}\n")
        }
    };
    let mut s = String::new();
    // this lane's scale and shift values, once per block
    for p in 1..=norm.params() {
        let (dt, shape) = &norm.ctx.inputs[p];
        let at = if numel(shape) == 1 { "0" } else { "c0 + e" };
        s += &format!("float nv{p}[{per_lane}][{GROUP}];\n");
        s += &format!(
            "#pragma unroll\nfor (int j = 0; j < {per_lane}; ++j) {{\n\
             const int c0 = (lane + 32 * j) * {GROUP};\n\
             #pragma unroll\nfor (int e = 0; e < {GROUP}; ++e) nv{p}[j][e] = c0 < {n} ? {} : 0.0f;\n}}\n",
            load(*dt, &format!("nrm{p}[{at}]"))
        );
    }
    let x_dtype = norm.ctx.inputs[0].0;
    let gemm_value = gemm.store_at("hv", ("row", "col", n), "val", ity)?;
    let zero = format!("#pragma unroll\nfor (int e = 0; e < {GROUP}; ++e) x[i][j][e] = 0.0f;\n");
    let read = guard(
        &format!(
            "const float4 v = *reinterpret_cast<const float4*>(cs + r * {cld} + c0);\n\
             const float vs[4] = {{v.x, v.y, v.z, v.w}};\n\
             #pragma unroll\nfor (int e = 0; e < {GROUP}; ++e) {{\n\
             const int col = c0 + e;\n\
             const float val = vs[e];\n\
             {hty} hv;\n\
             {gemm_value}x[i][j][e] = {x};\n\
             sum[i] += x[i][j][e];\n\
             }}\n",
            cld = tile.bn + CPAD,
            hty = storage(x_dtype),
            x = load(x_dtype, "hv"),
        ),
        &zero,
    );
    // lanes past the row's end hold zeros, which a centred square must not count
    let live = if full {
        String::new()
    } else {
        format!("if ((lane + 32 * j) * {GROUP} < {n}) ")
    };
    let center = if norm.layer {
        format!(
            "float mean[{R}], sq[{R}];\n\
             #pragma unroll\nfor (int i = 0; i < {R}; ++i) mean[i] = rlx_warp_sum(sum[i]) / (float){n};\n\
             #pragma unroll\nfor (int i = 0; i < {R}; ++i) {{\n\
             sq[i] = 0.0f;\n\
             #pragma unroll\nfor (int j = 0; j < {per_lane}; ++j)\n\
             {live}{{\n\
             #pragma unroll\nfor (int e = 0; e < {GROUP}; ++e) {{ const float d = x[i][j][e] - mean[i]; sq[i] += d * d; }}\n\
             }}\n}}\n",
            R = ROWS_AT_ONCE,
        )
    } else {
        format!(
            "float sq[{R}];\n\
             #pragma unroll\nfor (int i = 0; i < {R}; ++i) {{\n\
             sq[i] = 0.0f;\n\
             #pragma unroll\nfor (int j = 0; j < {per_lane}; ++j)\n\
             #pragma unroll\nfor (int e = 0; e < {GROUP}; ++e) sq[i] += x[i][j][e] * x[i][j][e];\n\
             }}\n",
            R = ROWS_AT_ONCE,
        )
    };
    let eps = super::norm::eps_literal(x_dtype, norm.eps);
    let y = if norm.layer {
        "(x[i][j][e] - mean[i]) * rstd[i] * nv1[j][e] + nv2[j][e]"
    } else {
        "x[i][j][e] * rstd[i] * nv1[j][e]"
    };
    let out_dtype = norm.ctx.out_dtype();
    let norm_value = norm.ctx.store_at("ov[e]", ("row", "col", n), "y", ity)?;
    let bytes = GROUP * out_dtype.size_bytes();
    let write = match bytes {
        8 => "*reinterpret_cast<uint2*>(out + lin0) = *reinterpret_cast<const uint2*>(ov);\n"
            .to_string(),
        16 => "*reinterpret_cast<uint4*>(out + lin0) = *reinterpret_cast<const uint4*>(ov);\n"
            .to_string(),
        _ => format!("#pragma unroll\nfor (int e = 0; e < {GROUP}; ++e) out[lin0 + e] = ov[e];\n"),
    };
    let store = guard(
        &format!(
            "__align__(16) {oty} ov[{GROUP}];\n\
             #pragma unroll\nfor (int e = 0; e < {GROUP}; ++e) {{\n\
             const int col = c0 + e;\n\
             const float y = {y};\n\
             {norm_value}}}\n\
             const {ity} lin0 = ({ity})row * {n} + c0;\n\
             {write}",
            oty = storage(out_dtype),
        ),
        "",
    );
    s += &format!(
        "#pragma unroll 1\n\
         for (int b = 0; b < {batches}; ++b) {{\n\
         if (bm0 + warp + {warps} * {R} * b >= {m}) break;\n\
         float x[{R}][{per_lane}][{GROUP}];\n\
         float sum[{R}];\n\
         #pragma unroll\nfor (int i = 0; i < {R}; ++i) {{\n\
         const int r = warp + {warps} * ({R} * b + i);\n\
         const int row = bm0 + r;\n\
         sum[i] = 0.0f;\n\
         #pragma unroll\nfor (int j = 0; j < {per_lane}; ++j) {{\n\
         const int c0 = (lane + 32 * j) * {GROUP};\n\
         if (row < {m}) {{\n{read}}} else {{\n{zero}}}\n\
         }}\n}}\n\
         {center}\
         float rstd[{R}];\n\
         #pragma unroll\nfor (int i = 0; i < {R}; ++i) rstd[i] = rsqrtf(rlx_warp_sum(sq[i]) / (float){n} + {eps});\n\
         #pragma unroll\nfor (int i = 0; i < {R}; ++i) {{\n\
         const int row = bm0 + warp + {warps} * ({R} * b + i);\n\
         if (row < {m}) {{\n\
         #pragma unroll\nfor (int j = 0; j < {per_lane}; ++j) {{\n\
         const int c0 = (lane + 32 * j) * {GROUP};\n\
         {store}}}\n\
         }}\n}}\n\
         }}\n",
        batches = BM / (warps * ROWS_AT_ONCE),
        R = ROWS_AT_ONCE,
        m = g.m,
    );
    Ok(s)
}
