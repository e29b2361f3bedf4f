//! A tensor-core GEMM with the library kernel's elementwise epilogue fused into its store:
//! `out = epilogue(A · B)` for row-major f16/bf16 `A [m x k]` and `B [k x n]` (a matmul
//! folded into one tall GEMM), f32 accumulation, sm_80 and newer. cuBLASLt fuses only bias,
//! residual, relu and tanh-GELU; anything else (exact GELU, SiLU, a cast, a scale) costs it a
//! second pass over the result, which this kernel saves. Whether it beats cuBLASLt plus that
//! pass is measured at compile time (`CudaProgram`'s autotuning), so it is emitted as a
//! candidate in several tilings ([`MMA_TILES`]), never imposed.
//!
//! The kernel: a block computes a `bm x bn` tile with `warps_m x warps_n` warps; `k` advances
//! in steps of 32 through a `stages`-deep ring of shared-memory tiles filled by `cp.async`
//! (16-byte chunks, zero-filled past `m`, `n` and `k`); rows are padded by 8 elements so the
//! eight 16-byte rows of an `ldmatrix` phase fall in distinct banks. A fragments come from
//! `ldmatrix.x4` of A rows, B fragments from `ldmatrix.x4.trans` of B rows, products from
//! `mma.sync.m16n8k16` (fragment layouts as documented in [`super::attention::flash_mma`]).
//! The finished tile is staged through shared memory as f32, then every element goes
//! through [`LibCtx::store`] in a loop over 8-column row segments (`tile_store`: 16-byte
//! stores, and the epilogue appears once in the code), so the epilogue is the same kernel-IR
//! expression every other library kernel applies.

use super::dtype::storage;
use super::store::LibCtx;
use super::{finish, ArgRef, EmittedKernel, Launch};
use rlx_ir::DType;

/// One tiling of the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MmaTile {
    /// rows of C per block
    pub bm: usize,
    /// columns of C per block
    pub bn: usize,
    /// warps along rows
    pub warps_m: usize,
    /// warps along columns
    pub warps_n: usize,
    /// shared-memory pipeline depth (k tiles in flight)
    pub stages: usize,
}

/// k per shared-memory tile.
const BK: usize = 32;
/// Row padding in elements (16 bytes).
const PAD: usize = 8;

impl MmaTile {
    /// Threads per block.
    pub fn threads(&self) -> usize {
        32 * self.warps_m * self.warps_n
    }

    /// Blocks per SM the registers must allow (`__launch_bounds__`' second argument): 512
    /// threads' worth, so a thread keeps at most 128 registers and an SM runs 16 warps or
    /// more (one 8-warp block per SM cannot hide the `mma.sync` and load latencies).
    fn min_blocks(&self) -> usize {
        (512 / self.threads()).max(1)
    }

    /// Dynamic shared memory in bytes: the pipeline's stages, or the f32 result tile the
    /// epilogue reads (the same memory, reused), whichever is larger.
    pub fn shared_bytes(&self) -> usize {
        let pipeline = self.stages * (self.bm * (BK + PAD) + BK * (self.bn + PAD)) * 2;
        pipeline.max(self.bm * (self.bn + PAD) * 4)
    }

    /// Rows and columns of C per warp.
    fn warp_tile(&self) -> (usize, usize) {
        (self.bm / self.warps_m, self.bn / self.warps_n)
    }
}

/// Largest result (`m * n` elements) the kernel (and [`super::gemm_wgmma`]) is offered for.
/// Measured on an H200 (2026-11-30): for the encoder's FFN GEMM with exact GELU, m 32768
/// n 1536 k 384, it takes 0.29 ms against 0.065 + 0.058 for cuBLASLt and the epilogue kernel
/// (about 135 TFLOP/s, `mma.sync` without Hopper's `wgmma`), and at m 128 it takes 13 µs
/// against about 6; it wins on small problems, where one launch less counts.
pub const MAX_OUTPUT: usize = 1 << 16;

/// The tilings emitted as candidates: large tiles for tall GEMMs, small ones so a GEMM of a
/// few hundred rows still fills the device.
pub const MMA_TILES: [MmaTile; 4] = [
    MmaTile {
        bm: 128,
        bn: 128,
        warps_m: 2,
        warps_n: 4,
        stages: 3,
    },
    MmaTile {
        bm: 128,
        bn: 64,
        warps_m: 2,
        warps_n: 2,
        stages: 4,
    },
    MmaTile {
        bm: 64,
        bn: 128,
        warps_m: 2,
        warps_n: 2,
        stages: 4,
    },
    MmaTile {
        bm: 64,
        bn: 64,
        warps_m: 2,
        warps_n: 2,
        stages: 4,
    },
];

/// The GEMM problem: operands as (argument, element offset, row stride).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MmaGemm {
    /// rows of A and C
    pub m: usize,
    /// columns of B and C
    pub n: usize,
    /// inner dim
    pub k: usize,
    /// A: argument, element offset, row stride
    pub a: (ArgRef, usize, usize),
    /// B: argument, element offset, row stride
    pub b: (ArgRef, usize, usize),
}

impl MmaGemm {
    /// `template` with the holes every fused GEMM kernel shares filled: `@PARAMS@`,
    /// `@STORE@` (with `store`), the sizes `@M@ @N@ @K@` and the operands' offsets and row
    /// strides `@AOFF@ @LDA@ @BOFF@ @LDB@`.
    pub(super) fn fill(&self, template: &str, ctx: &LibCtx, store: &str) -> String {
        template
            .replace("@PARAMS@", &(ctx.in_params() + &ctx.out_params()))
            .replace("@STORE@", store)
            .replace("@M@", &self.m.to_string())
            .replace("@N@", &self.n.to_string())
            .replace("@K@", &self.k.to_string())
            .replace("@AOFF@", &self.a.1.to_string())
            .replace("@LDA@", &self.a.2.to_string())
            .replace("@BOFF@", &self.b.1.to_string())
            .replace("@LDB@", &self.b.2.to_string())
    }
}

/// True when the kernel can run this problem in this tiling: sm_80+, f16/bf16 operands and
/// result, 16-byte aligned rows and offsets (`k`, `n`, strides and offsets multiples of 8
/// elements), a grid within limits and shared memory within the device's.
pub fn applies(ctx: &LibCtx, g: &MmaGemm, tile: &MmaTile) -> bool {
    let dtype = ctx.inputs[0].0;
    let eight = |x: usize| x.is_multiple_of(8);
    ctx.target.compute_capability().is_some_and(|cc| cc >= 80)
        && matches!(dtype, DType::F16 | DType::BF16)
        && ctx.inputs.iter().all(|(d, _)| *d == dtype)
        && ctx.result.0 == dtype
        && g.m > 0
        && [g.n, g.k, g.a.1, g.a.2, g.b.1, g.b.2]
            .into_iter()
            .all(eight)
        && g.n > 0
        && g.k > 0
        && g.m.div_ceil(tile.bm) <= 65_535
        && tile.shared_bytes() <= ctx.target.max_shared
}

/// Emits the fused GEMM for `g` in `tile`; `ctx` supplies operand types and the epilogue.
///
/// # Errors
/// The problem is outside [`applies`], or an epilogue node no rule accepts.
pub fn emit(ctx: &LibCtx, g: &MmaGemm, tile: &MmaTile) -> Result<EmittedKernel, String> {
    if !applies(ctx, g, tile) {
        return Err(format!(
            "no tensor-core GEMM for m{} n{} k{} in {}x{} tiles",
            g.m, g.n, g.k, tile.bm, tile.bn
        ));
    }
    let ty = if ctx.inputs[0].0 == DType::BF16 {
        "bf16"
    } else {
        "f16"
    };
    let (wtm, wtn) = tile.warp_tile();
    let threads = tile.threads();
    let a_chunks = tile.bm * BK / 8;
    let b_chunks = BK * tile.bn / 8;
    let store = tile_store(ctx, (g.m, g.n), (tile.bm, tile.bn, tile.bn + PAD), threads)?;
    let text = g
        .fill(TEMPLATE, ctx, &store)
        .replace("@T@", &threads.to_string())
        .replace("@MINB@", &tile.min_blocks().to_string())
        .replace("@BM@", &tile.bm.to_string())
        .replace("@BN@", &tile.bn.to_string())
        .replace("@WN@", &tile.warps_n.to_string())
        .replace("@WTM@", &wtm.to_string())
        .replace("@WTN@", &wtn.to_string())
        .replace("@MT@", &(wtm / 16).to_string())
        .replace("@NT@", &(wtn / 8).to_string())
        .replace("@S@", &tile.stages.to_string())
        .replace("@ALD@", &(BK + PAD).to_string())
        .replace("@BLD@", &(tile.bn + PAD).to_string())
        .replace("@CLD@", &(tile.bn + PAD).to_string())
        .replace("@ACH@", &a_chunks.div_ceil(threads).to_string())
        .replace("@ACHN@", &a_chunks.to_string())
        .replace("@BCH@", &b_chunks.div_ceil(threads).to_string())
        .replace("@BCHN@", &b_chunks.to_string())
        .replace("@BROW@", &(tile.bn / 8).to_string())
        .replace("@TY@", ty);
    let mut args = ctx.args();
    args[0] = g.a.0;
    args[1] = g.b.0;
    let launch = Launch {
        grid: [g.n.div_ceil(tile.bn) as u32, g.m.div_ceil(tile.bm) as u32],
        block: threads as u32,
        shared_bytes: tile.shared_bytes() as u32,
    };
    let mut k = finish(&ctx.kernel.name, "gemm_mma", text, launch, args);
    k.label += &format!(
        " [tensor-core GEMM {ty} m{} n{} k{}: {}x{} tiles, {} warps, {} stages, fused epilogue]",
        g.m,
        g.n,
        g.k,
        tile.bm,
        tile.bn,
        tile.warps_m * tile.warps_n,
        tile.stages
    );
    Ok(k)
}

/// The loop storing a finished `bm x bn` f32 tile held in shared memory (`cs`, rows of
/// `cld` floats) through the epilogue, shared by this kernel and [`super::gemm_wgmma`]:
/// each thread takes 8 consecutive columns at a time (`n` is a multiple of 8), runs the
/// epilogue on each and writes them with 16-byte stores when 8 results fill whole 16-byte
/// words. Indices are 32-bit when the result has fewer than 2^31 elements (64-bit division
/// by the result's dims costs more than the epilogue itself).
pub(super) fn tile_store(
    ctx: &LibCtx,
    (m, n): (usize, usize),
    (bm, bn, cld): (usize, usize, usize),
    threads: usize,
) -> Result<String, String> {
    let ity = if m * n < (1 << 31) {
        "int"
    } else {
        "long long"
    };
    let out = ctx.out_dtype();
    let bytes = 8 * out.size_bytes();
    let value = ctx.store_at("ov[e]", ("row", "col + e", n), "val", ity)?;
    let write = if bytes.is_multiple_of(16) {
        format!(
            "#pragma unroll\nfor (int q = 0; q < {}; ++q) reinterpret_cast<uint4*>(out + lin0)[q] = reinterpret_cast<const uint4*>(ov)[q];\n",
            bytes / 16
        )
    } else {
        "#pragma unroll\nfor (int e = 0; e < 8; ++e) out[lin0 + e] = ov[e];\n".to_string()
    };
    Ok(format!(
        "#pragma unroll 2
for (int idx = threadIdx.x; idx < {bm} * {bn} / 8; idx += {threads}) {{
const int r = idx / ({bn} / 8), c = (idx % ({bn} / 8)) * 8;
const int row = bm0 + r, col = bn0 + c;
if (row < {m} && col < {n}) {{
const float4 v0 = *reinterpret_cast<const float4*>(cs + r * {cld} + c);
const float4 v1 = *reinterpret_cast<const float4*>(cs + r * {cld} + c + 4);
const float vs[8] = {{v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w}};
__align__(16) {ty} ov[8];
const {ity} lin0 = ({ity})row * {n} + col;
#pragma unroll
for (int e = 0; e < 8; ++e) {{
const float val = vs[e];
{value}}}
{write}}}
}}
",
        ty = storage(out),
    ))
}

/// The kernel with `@NAME@` holes [`emit`] fills. Shared memory per stage: `As[BM][ALD]`
/// then `Bs[32][BLD]` (16-bit elements).
const TEMPLATE: &str = r#"extern "C" __global__ void __launch_bounds__(@T@, @MINB@) RLX_FN(@PARAMS@) {
extern __shared__ __align__(16) unsigned short rlx_gsmem[];
const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
const int g = lane >> 2, tq = lane & 3;
const int wm = warp / @WN@, wn = warp % @WN@;
const int bm0 = blockIdx.y * @BM@, bn0 = blockIdx.x * @BN@;
const unsigned short* A = (const unsigned short*)in0 + @AOFF@;
const unsigned short* B = (const unsigned short*)in1 + @BOFF@;
const int stage = @BM@ * @ALD@ + 32 * @BLD@;
auto load = [&](int kt, int s) {
unsigned short* as = rlx_gsmem + s * stage;
unsigned short* bs = as + @BM@ * @ALD@;
const int k0 = kt * 32;
#pragma unroll
for (int i = 0; i < @ACH@; ++i) {
const int t = tid + i * @T@;
if (@ACHN@ % @T@ == 0 || t < @ACHN@) {
const int r = t >> 2, c = (t & 3) * 8;
const int gr = bm0 + r, gk = k0 + c;
const bool ok = gr < @M@ && gk < @K@;
rlx_cp_async16(as + r * @ALD@ + c, A + (ok ? (long long)gr * @LDA@ + gk : 0), ok ? 16 : 0);
}
}
#pragma unroll
for (int i = 0; i < @BCH@; ++i) {
const int t = tid + i * @T@;
if (@BCHN@ % @T@ == 0 || t < @BCHN@) {
const int r = t / @BROW@, c = (t % @BROW@) * 8;
const int gk = k0 + r, gn = bn0 + c;
const bool ok = gk < @K@ && gn < @N@;
rlx_cp_async16(bs + r * @BLD@ + c, B + (ok ? (long long)gk * @LDB@ + gn : 0), ok ? 16 : 0);
}
}
};
const int KT = (@K@ + 31) / 32;
#pragma unroll
for (int s = 0; s < @S@ - 1; ++s) {
if (s < KT) load(s, s);
rlx_cp_async_commit();
}
float acc[@MT@][@NT@][4];
#pragma unroll
for (int i = 0; i < @MT@; ++i)
#pragma unroll
for (int j = 0; j < @NT@; ++j) { acc[i][j][0] = 0.0f; acc[i][j][1] = 0.0f; acc[i][j][2] = 0.0f; acc[i][j][3] = 0.0f; }
for (int kt = 0; kt < KT; ++kt) {
rlx_cp_async_wait<@S@ - 2>();
__syncthreads();
{
const int nk = kt + @S@ - 1;
if (nk < KT) load(nk, nk % @S@);
rlx_cp_async_commit();
}
const unsigned short* as = rlx_gsmem + (kt % @S@) * stage;
const unsigned short* bs = as + @BM@ * @ALD@;
#pragma unroll
for (int kk = 0; kk < 2; ++kk) {
unsigned a[@MT@][4];
unsigned b[@NT@][2];
#pragma unroll
for (int i = 0; i < @MT@; ++i)
rlx_ldmatrix_x4(a[i], as + (wm * @WTM@ + i * 16 + (lane & 15)) * @ALD@ + kk * 16 + ((lane >> 4) << 3));
#pragma unroll
for (int j = 0; j < @NT@ / 2; ++j) {
unsigned r[4];
rlx_ldmatrix_x4_trans(r, bs + (kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3)) * @BLD@ + wn * @WTN@ + j * 16 + ((lane >> 4) << 3));
b[2 * j][0] = r[0]; b[2 * j][1] = r[1]; b[2 * j + 1][0] = r[2]; b[2 * j + 1][1] = r[3];
}
#pragma unroll
for (int i = 0; i < @MT@; ++i)
#pragma unroll
for (int j = 0; j < @NT@; ++j) rlx_mma_@TY@(acc[i][j], a[i], b[j][0], b[j][1]);
}
}
// The tile goes through shared memory (f32, rows of CLD) so the epilogue is written once
// and each warp stores whole row segments.
rlx_cp_async_wait<0>();
__syncthreads();
float* cs = reinterpret_cast<float*>(rlx_gsmem);
#pragma unroll
for (int i = 0; i < @MT@; ++i)
#pragma unroll
for (int j = 0; j < @NT@; ++j)
#pragma unroll
for (int h = 0; h < 2; ++h)
*reinterpret_cast<float2*>(cs + (wm * @WTM@ + i * 16 + g + h * 8) * @CLD@ + wn * @WTN@ + j * 8 + 2 * tq) = make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
__syncthreads();
@STORE@}
"#;
