//! A GEMM whose block holds whole rows of its result, so the layer norm (or RMS norm) that
//! follows it runs in the GEMM's store: `out = norm(epilogue(A · B))` over rows of `n <= 384`
//! columns. A post-norm transformer computes `LayerNorm(x · W + bias + residual)` after its
//! attention output projection and its second FFN GEMM; as two steps the sum goes to memory
//! and the norm kernel reads it back (at the encoder's batch 256, 2 x 25 MB per norm). Here
//! it never leaves the SM.
//!
//! The kernel is [`super::gemm_wgmma`]'s (a warpgroup per 64 rows of the block, `wgmma`
//! from swizzled shared memory fed by `cp.async`) with the block as wide as the rows (`bn =
//! n` rounded up to 64, one block column) and its f32 tile staged in shared memory. The
//! store gives each warp every 8th (or 4th) row of the block, 8 rows at a time: a lane takes
//! the 4-column groups `lane, lane + 32, ...` of a row, applies the GEMM's own epilogue
//! (bias, residual, ...) and rounds to its dtype exactly as the unfused GEMM would store
//! it, then takes the row's mean and the variance around it with warp shuffles (two passes
//! over registers, as the norm kernel does), and writes the normalised, scaled and shifted
//! row through the norm's own epilogue with 8- or 16-byte stores. Loads are not branched
//! around, so a batch's residual loads are all in flight at once, and the block's rows of a
//! residual are asked of L2 before the main loop. Offered as a [`crate::plan::Choice`]
//! against the GEMM step plus the norm step and chosen by timing at compile.
//!
//! Measured on an H200 (2026-12-01, `RLX_CUDA_TUNE_LOG=1 bench_encoder --batches 256`, f16,
//! m 32768): the attention output projection + bias + residual + layer norm (n 384, k 384)
//! takes 0.041 ms against 0.044 for cuBLASLt and the norm kernel, so it is chosen; the FFN's
//! second GEMM + layer norm (k 1536) takes 0.085 against 0.076 and is not. With the store
//! removed the GEMM alone takes 0.021 / 0.068 ms: the store costs ~0.02 ms, because every
//! block of a wave reaches it at once and then only writes and reads device memory (the
//! residual, the result). Tried and slower: rows one at a time with branches around their
//! loads (0.064 ms, every load waited for alone), the norm straight from the accumulators
//! with a lane quad per row (0.055 ms: 4-byte accesses spread over 8 rows per instruction).
//! At batch 32 (m 4096, 32 blocks of 128 rows) cuBLASLt and the norm kernel win (0.009 vs
//! 0.015 ms).

use super::dtype::{load, storage};
use super::gemm_mma::MmaGemm;
use super::gemm_wgmma::{self, WgmmaTile, CPAD, MAX_BN};
use super::store::{numel, LibCtx};
use super::{finish, EmittedKernel, EpilogueCtx, Launch};
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

/// Shared memory of one SM on Hopper (bytes), of which each resident block takes 1 KiB more
/// than it asks for.
const SM_SHARED: usize = 228 * 1024;

/// The tilings offered for an `n`-column result: 128 x `bn` blocks (two warpgroups, one
/// block per SM) with 3 or 4 pipeline stages where they fit, the MMAs of a k tile waited for
/// before the next is issued or left running while it is; and 64 x `bn` blocks (one
/// warpgroup) with as many stages as leave room for two blocks per SM, so one block's
/// store runs while the other multiplies.
pub fn tiles(n: usize) -> Vec<WgmmaTile> {
    let bn = n.next_multiple_of(64);
    let tile = |bm, stages, inflight| WgmmaTile {
        bm,
        bn,
        stages,
        inflight,
    };
    let mut out: Vec<WgmmaTile> = [(3, 0), (3, 1), (4, 0), (4, 1)]
        .into_iter()
        .map(|(s, f)| tile(128, s, f))
        .filter(|t| t.shared_bytes() <= 227 * 1024)
        .collect();
    // the deepest pipeline that leaves room for two blocks per SM
    if let Some(s) = (2..=4)
        .rev()
        .find(|&s| 2 * (tile(64, s, 0).shared_bytes() + 1024) <= SM_SHARED)
    {
        out.push(tile(64, s, 0));
    }
    out
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
/// its epilogue), `norm` the norm's, `a_map` the elementwise epilogue of the kernel that
/// produced A when the GEMM applies it to A as it loads it (`gemm_wgmma::a_map`; its
/// extra inputs become the kernel's last arguments).
///
/// # Errors
/// The problem is outside [`applies`] (or the map does not read and write A's dtype), or
/// an epilogue node no rule accepts.
pub fn emit(
    gemm: &LibCtx,
    norm: RowNorm,
    g: &MmaGemm,
    tile: &WgmmaTile,
    a_map: Option<&EpilogueCtx>,
) -> Result<EmittedKernel, String> {
    let a_dtype = gemm.inputs[0].0;
    if !applies(gemm, &norm, g, tile)
        || a_map.is_some_and(|m| m.input_dtype() != a_dtype || m.out_dtype() != a_dtype)
    {
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
    let a_map = a_map.map(|m| m.clone().named("aep"));
    let map_params = a_map.as_ref().map(|m| m.params()).unwrap_or_default();
    let params = format!(
        "{}, {}* __restrict__ out{gemm_epi}{norm_params}{norm_epi}{map_params}",
        gemm.in_params(),
        storage(out_dtype)
    );
    let store = row_store(gemm, &norm, g, tile)?;
    let pre = prefetch(gemm, g, tile);
    let map = match &a_map {
        Some(m) => gemm_wgmma::a_map(m, g, tile)?,
        None => String::new(),
    };
    let text = gemm_wgmma::kernel_text(gemm, g, tile, (&params, &pre, &map, &store));
    // operands, the norm's output, the GEMM epilogue's inputs, the norm's parameters, the
    // norm epilogue's inputs
    let mut args = gemm.args();
    args[0] = g.a.0;
    args[1] = g.b.0;
    args[2] = super::ArgRef::Buffer(norm.ctx.kernel.output);
    let norm_args = norm.ctx.args();
    args.extend(&norm_args[1..=norm.params()]);
    args.extend(&norm_args[2 + norm.params()..]);
    if let Some(m) = &a_map {
        args.extend(m.args());
    }
    let launch = Launch {
        grid: [1, g.m.div_ceil(tile.bm) as u32],
        block: tile.threads() as u32,
        shared_bytes: tile.shared_bytes() as u32,
    };
    let family = if norm.layer {
        "gemm_layer_norm"
    } else {
        "gemm_rms_norm"
    };
    let mut k = finish(&gemm.kernel.name, family, text, launch, args);
    let mapped = a_map
        .as_ref()
        .map(|m| format!(" on A mapped by {}", m.kernel.name))
        .unwrap_or_default();
    k.label += &format!(
        " [Hopper tensor-core GEMM {} m{} n{} k{}{mapped} + {} ({}) in its store: {}]",
        gemm_wgmma::operand_type(gemm),
        g.m,
        g.n,
        g.k,
        family.trim_start_matches("gemm_"),
        norm.ctx.kernel.name,
        tile.describe()
    );
    Ok(k)
}

/// Statements that ask L2 for the block's rows of each epilogue input read element for
/// element (a residual) before the main loop, so the store, which waits on those loads
/// row by row, finds them there rather than in device memory.
fn prefetch(gemm: &LibCtx, g: &MmaGemm, tile: &WgmmaTile) -> String {
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
                BM = tile.bm,
                THREADS = tile.threads(),
            )
        })
        .collect()
}

/// Columns per lane group: four f32 values from the tile, four results per store.
const GROUP: usize = 4;
/// Rows a warp normalises at once: their epilogue loads are in flight together and their
/// reductions interleave (one row at a time waits out a memory latency per row).
const ROWS_AT_ONCE: usize = 8;

/// The store: each of the block's `w` warps normalises rows `warp, warp + w, ...` of its
/// rows, [`ROWS_AT_ONCE`] at a time (see the module docs). Loads are not branched around: a row
/// past `m` reads the last row and a lane group past `n` the first group (their results
/// are dropped), so a batch's loads all issue before the first is waited for; only the
/// stores are guarded.
fn row_store(
    gemm: &LibCtx,
    norm: &RowNorm,
    g: &MmaGemm,
    tile: &WgmmaTile,
) -> Result<String, String> {
    let (m, n) = (g.m, g.n);
    let groups = n / GROUP;
    let per_lane = groups.div_ceil(32);
    let warps = tile.threads() / 32;
    let rows = ROWS_AT_ONCE;
    let ity = if m * n < (1 << 31) {
        "int"
    } else {
        "long long"
    };
    // lane groups past the row's end exist only when the groups do not fill every lane;
    // rows past the end only when the last block is partial
    let full = groups.is_multiple_of(32);
    let whole_blocks = m.is_multiple_of(tile.bm);
    let in_row = |c: &str| {
        if full {
            "true".to_string()
        } else {
            format!("({c} < {n})")
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
    let row_of = |i: &str| format!("bm0 + warp + {warps} * ({rows} * b + {i})");
    let read = format!(
        "{{\n\
         const int r = warp + {warps} * ({rows} * b + i);\n\
         const int row = {row};\n\
         sum[i] = 0.0f;\n\
         #pragma unroll\nfor (int j = 0; j < {per_lane}; ++j) {{\n\
         const bool live = {live};\n\
         const int c0 = live ? (lane + 32 * j) * {GROUP} : 0;\n\
         const float4 v = *reinterpret_cast<const float4*>(cs + r * {cld} + c0);\n\
         const float vs[4] = {{v.x, v.y, v.z, v.w}};\n\
         #pragma unroll\nfor (int e = 0; e < {GROUP}; ++e) {{\n\
         const int col = c0 + e;\n\
         const float val = vs[e];\n\
         {hty} hv;\n\
         {gemm_value}x[i][j][e] = live ? {x} : 0.0f;\n\
         sum[i] += x[i][j][e];\n\
         }}\n}}\n}}\n",
        row = if whole_blocks {
            "bm0 + r".to_string()
        } else {
            format!("min(bm0 + r, {})", m - 1)
        },
        live = in_row(&format!("(lane + 32 * j) * {GROUP}")),
        cld = tile.bn + CPAD,
        hty = storage(x_dtype),
        x = load(x_dtype, "hv"),
    );
    let inv_n = super::dtype::literal(DType::F32, 1.0 / n as f64);
    let center = if norm.layer {
        format!(
            "float mean[{rows}], sq[{rows}];\n\
             #pragma unroll\nfor (int i = 0; i < {rows}; ++i) mean[i] = rlx_warp_sum(sum[i]) * {inv_n};\n\
             #pragma unroll\nfor (int i = 0; i < {rows}; ++i) {{\n\
             sq[i] = 0.0f;\n\
             #pragma unroll\nfor (int j = 0; j < {per_lane}; ++j) {{\n\
             const bool live = {live};\n\
             #pragma unroll\nfor (int e = 0; e < {GROUP}; ++e) {{ const float d = x[i][j][e] - mean[i]; sq[i] += live ? d * d : 0.0f; }}\n\
             }}\n}}\n",
            live = in_row(&format!("(lane + 32 * j) * {GROUP}")),
        )
    } else {
        format!(
            "float sq[{rows}];\n\
             #pragma unroll\nfor (int i = 0; i < {rows}; ++i) {{\n\
             sq[i] = 0.0f;\n\
             #pragma unroll\nfor (int j = 0; j < {per_lane}; ++j)\n\
             #pragma unroll\nfor (int e = 0; e < {GROUP}; ++e) sq[i] += x[i][j][e] * x[i][j][e];\n\
             }}\n"
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
    let mut store = format!(
        "__align__(16) {oty} ov[{GROUP}];\n\
         #pragma unroll\nfor (int e = 0; e < {GROUP}; ++e) {{\n\
         const int col = c0 + e;\n\
         const float y = {y};\n\
         {norm_value}}}\n\
         const {ity} lin0 = ({ity})row * {n} + c0;\n\
         {write}",
        oty = storage(out_dtype),
    );
    if !full {
        store = format!("if (c0 < {n}) {{\n{store}}}\n");
    }
    let row_guard = if whole_blocks {
        String::new()
    } else {
        format!("if (row < {m}) ")
    };
    s += &format!(
        "#pragma unroll 1\n\
         for (int b = 0; b < {batches}; ++b) {{\n\
         if ({first} >= {m}) break;\n\
         float x[{rows}][{per_lane}][{GROUP}];\n\
         float sum[{rows}];\n\
         #pragma unroll\nfor (int i = 0; i < {rows}; ++i) {read}\
         {center}\
         float rstd[{rows}];\n\
         #pragma unroll\nfor (int i = 0; i < {rows}; ++i) rstd[i] = rsqrtf(rlx_warp_sum(sq[i]) * {inv_n} + {eps});\n\
         #pragma unroll\nfor (int i = 0; i < {rows}; ++i) {{\n\
         const int row = {row_i};\n\
         {row_guard}{{\n\
         #pragma unroll\nfor (int j = 0; j < {per_lane}; ++j) {{\n\
         const int c0 = (lane + 32 * j) * {GROUP};\n\
         {store}}}\n\
         }}\n}}\n\
         }}\n",
        batches = tile.bm / (warps * rows),
        first = row_of("0"),
        row_i = row_of("i"),
    );
    Ok(s)
}
