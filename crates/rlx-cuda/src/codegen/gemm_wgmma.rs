//! A Hopper (`sm_90a`) tensor-core GEMM with the library kernel's elementwise epilogue fused
//! into its store: `out = epilogue(A · B)` for row-major f16/bf16 `A [m x k]` and
//! `B [k x n]`, f32 accumulation. It is the [`super::gemm_mma`] kernel's job done with
//! Hopper's warpgroup MMA (`wgmma.mma_async`, operands read by the tensor cores straight from
//! shared memory), so an epilogue cuBLASLt cannot fuse (exact GELU, SiLU, a cast) need not
//! cost a second pass over the result. Offered as a [`crate::plan::Choice`] candidate next to
//! the `mma.sync` kernel's tilings (results up to [`super::gemm_mma::MAX_OUTPUT`] elements)
//! and chosen by timing at compile, never imposed.
//!
//! Measured on an H200 (2026-11-30, `RLX_CUDA_TUNE_LOG=1`, the encoder's FFN GEMM + bias +
//! exact GELU, m 32768 n 1536 k 384): 0.145 ms against 0.107 for cuBLASLt plus the epilogue
//! kernel (the `mma.sync` kernel: 0.29). Taking parts out of the kernel located the time:
//! without the epilogue 0.112, without the MMAs 0.124, without the copies 0.108, with only
//! the copies and a plain store 0.0925 — a 128 x 128 tile reads A and B from L2 once per
//! tile (604 MB for this GEMM), which alone takes longer than cuBLASLt's whole GEMM (0.068).
//! Beating it needs larger tiles whose copies are shared across a cluster (TMA multicast)
//! and a persistent kernel whose warpgroups take turns, so one's epilogue overlaps the
//! other's MMAs; until then large problems keep cuBLASLt.
//!
//! The kernel: a block of one or two warpgroups (128 threads per 64 rows) computes a
//! `bm x bn` tile, each warpgroup 64 rows with `wgmma.m64n{n}k16` instructions of up to 256
//! columns each per 16 of k (a 384-column tile issues a 256- and a 128-column one). `k`
//! advances in steps of 64 through a `stages`-deep ring of shared-memory tiles filled by
//! `cp.async` (16-byte chunks, zero-filled past `m`, `n` and `k`; a thread's chunks of B lie
//! at constant offsets from each other, so their addresses cost no registers), copies
//! running `stages - 1 - inflight` tiles ahead of the tile being multiplied while
//! `inflight` earlier tiles' MMAs may still run (`wgmma.wait_group`). Both operands sit in
//! the 128-byte swizzled layouts `wgmma` reads: A K-major (a 128-byte row per 64 k, 16-byte
//! chunk `c` of row `r` at chunk `c ^ (r % 8)`), B N-major (blocks of 64 columns, a 128-byte
//! row per k, the same swizzle over k), read transposed (`imm-trans-b`). The finished tile
//! is staged through shared memory as f32 and stored through the epilogue by
//! `gemm_mma::tile_store`, as in [`super::gemm_mma`]; [`super::gemm_norm`] stores it
//! through a row norm instead.

use super::dtype::load;
use super::epilogue::WIDE;
use super::gemm_mma::{tile_store, MmaGemm};
use super::store::LibCtx;
use super::vector::Wide;
use super::EpilogueCtx;
use super::{finish, EmittedKernel, Launch};
use rlx_ir::DType;

/// One tiling of the kernel: a warpgroup per 64 rows of the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WgmmaTile {
    /// rows of C per block: 128 (two warpgroups) or 64 (one)
    pub bm: usize,
    /// columns of C per block: a multiple of 64 up to 384, issued as `wgmma` instructions
    /// of n up to 256 each ([`super::gemm_norm`] takes whole rows of up to 384)
    pub bn: usize,
    /// shared-memory pipeline depth (k tiles of 64)
    pub stages: usize,
    /// k tiles whose MMAs may still run when the next one is issued (0 or 1); the copies
    /// run `stages - 1 - inflight` tiles ahead
    pub inflight: usize,
}

/// k per shared-memory tile (one 128-byte swizzle row of 16-bit elements).
const BK: usize = 64;
/// Padding of the f32 result tile's rows in shared memory (elements).
pub(super) const CPAD: usize = 4;
/// Most columns per block: 384 keep 192 f32 accumulators per thread, and the f32 result
/// tile (128 x 388 x 4 bytes) fits in shared memory.
pub const MAX_BN: usize = 384;
/// Most columns one `wgmma` instruction computes.
const MAX_N: usize = 256;

impl WgmmaTile {
    /// Bytes of one pipeline stage: the A tile then the B tile.
    fn stage_bytes(&self) -> usize {
        (self.bm * BK + BK * self.bn) * 2
    }

    /// The tiling in words, for kernel labels: `128x384 tiles, 2 warpgroups, 3 stages, 0 in
    /// flight`.
    pub fn describe(&self) -> String {
        format!(
            "{}x{} tiles, {} warpgroups, {} stages, {} in flight",
            self.bm,
            self.bn,
            self.bm / 64,
            self.stages,
            self.inflight
        )
    }

    /// Threads per block: a warpgroup (128) per 64 rows.
    pub fn threads(&self) -> usize {
        2 * self.bm
    }

    /// Dynamic shared memory in bytes: the pipeline or the f32 result tile (the same memory,
    /// reused), whichever is larger, plus 1 KiB to align the swizzled tiles to 1024 bytes.
    pub fn shared_bytes(&self) -> usize {
        let pipeline = self.stages * self.stage_bytes();
        pipeline.max(self.bm * (self.bn + CPAD) * 4) + 1024
    }

    /// Blocks per SM the registers must allow: as many as shared memory lets in (228 KiB
    /// per SM on Hopper), at most two — one block's epilogue then overlaps the other's MMAs.
    fn min_blocks(&self) -> usize {
        (228 * 1024 / self.shared_bytes()).clamp(1, 2)
    }
}

/// The tilings emitted as candidates: 128-column tiles, two blocks per SM (the best of
/// eight tried on an H200 for tall GEMMs), and 64-column tiles for short ones.
pub const WGMMA_TILES: [WgmmaTile; 2] = [
    WgmmaTile {
        bm: 128,
        bn: 128,
        stages: 3,
        inflight: 0,
    },
    WgmmaTile {
        bm: 128,
        bn: 64,
        stages: 4,
        inflight: 0,
    },
];

/// The architecture the kernel needs: `wgmma` exists only in `sm_90a` code.
pub const ARCH: &str = "sm_90a";

/// True when the kernel can run this problem in this tiling: an `sm_90a` target, f16/bf16
/// operands and result, 16-byte aligned rows and offsets (`k`, `n`, strides and offsets
/// multiples of 8 elements), a grid within limits and shared memory within the device's.
pub fn applies(ctx: &LibCtx, g: &MmaGemm, tile: &WgmmaTile) -> bool {
    let dtype = ctx.inputs[0].0;
    let eight = |x: usize| x.is_multiple_of(8);
    ctx.target.arch == ARCH
        && tile.bn.is_multiple_of(64)
        && (64..=MAX_BN).contains(&tile.bn)
        && tile.inflight <= 1
        && tile.stages >= 2 + tile.inflight
        && matches!(dtype, DType::F16 | DType::BF16)
        && ctx.inputs.iter().all(|(d, _)| *d == dtype)
        && ctx.result.0 == dtype
        && g.m > 0
        && g.n > 0
        && g.k > 0
        && [g.n, g.k, g.a.1, g.a.2, g.b.1, g.b.2]
            .into_iter()
            .all(eight)
        && matches!(tile.bm, 64 | 128)
        && g.m.div_ceil(tile.bm) <= 65_535
        && tile.shared_bytes() <= ctx.target.max_shared
}

/// The PTX type of the operands: `f16` or `bf16`.
pub(super) fn operand_type(ctx: &LibCtx) -> &'static str {
    if ctx.inputs[0].0 == DType::BF16 {
        "bf16"
    } else {
        "f16"
    }
}

/// The inline-PTX statements issuing one k16 step of a `bn`-column tile: `wgmma`
/// instructions of n up to 256 each, the `c`-th (from column `c * 256`) into accumulators
/// from `acc[c * 128]`, with A from descriptor `da` and B from `db` advanced by its first
/// 64-column block (8 KiB each; B read transposed: N-major).
fn wgmma_issue(bn: usize, ty: &str) -> String {
    let mut s = String::new();
    for first in (0..bn).step_by(MAX_N) {
        let n = MAX_N.min(bn - first);
        let (a0, regs) = (first / 2, n / 2);
        let list: Vec<String> = (0..regs).map(|i| format!("%{i}")).collect();
        let outs: Vec<String> = (0..regs)
            .map(|i| format!("\"+f\"(acc[{}])", a0 + i))
            .collect();
        s += &format!(
            "asm volatile(\"{{\\n.reg .pred p;\\nsetp.ne.b32 p, {one}, 0;\\n\
             wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ty}.{ty} {{{list}}}, %{da}, %{db}, p, 1, 1, 0, 1;\\n}}\\n\"\n\
             : {outs}\n: \"l\"(da), \"l\"(db + {adv}ull), \"r\"(1));\n",
            one = format_args!("%{}", regs + 2),
            list = list.join(", "),
            da = regs,
            db = regs + 1,
            outs = outs.join(", "),
            adv = (first / 64) * (8192 >> 4),
        );
    }
    s
}

/// Emits the fused GEMM for `g` in `tile`; `ctx` supplies operand types and the epilogue.
///
/// # Errors
/// The problem is outside [`applies`], or an epilogue node no rule accepts.
pub fn emit(ctx: &LibCtx, g: &MmaGemm, tile: &WgmmaTile) -> Result<EmittedKernel, String> {
    if !applies(ctx, g, tile) {
        return Err(format!(
            "no Hopper tensor-core GEMM for m{} n{} k{} in {tile:?}",
            g.m, g.n, g.k
        ));
    }
    let ty = operand_type(ctx);
    let store = tile_store(
        ctx,
        (g.m, g.n),
        (tile.bm, tile.bn, tile.bn + CPAD),
        tile.threads(),
    )?;
    let params = ctx.in_params() + &ctx.out_params();
    let text = kernel_text(ctx, g, tile, (&params, "", "", &store));
    let mut args = ctx.args();
    args[0] = g.a.0;
    args[1] = g.b.0;
    let launch = Launch {
        grid: [g.n.div_ceil(tile.bn) as u32, g.m.div_ceil(tile.bm) as u32],
        block: tile.threads() as u32,
        shared_bytes: tile.shared_bytes() as u32,
    };
    let mut k = finish(&ctx.kernel.name, "gemm_wgmma", text, launch, args);
    k.label += &format!(
        " [Hopper tensor-core GEMM {ty} m{} n{} k{}: {}, fused epilogue]",
        g.m,
        g.n,
        g.k,
        tile.describe()
    );
    Ok(k)
}

/// The kernel's text for `g` in `tile` with parameter list `params`, `pre` (statements run
/// before the main loop), `a_map` (statements run on each k tile of A once it has landed in
/// shared memory, see [`a_map`]) and `store`, the code that writes the finished f32 tile
/// (`cs`, `tile.bm` rows of `tile.bn + CPAD`, block origin `bm0`, `bn0`) to memory; shared
/// with [`super::gemm_norm`].
pub(super) fn kernel_text(
    ctx: &LibCtx,
    g: &MmaGemm,
    tile: &WgmmaTile,
    (params, pre, a_map, store): (&str, &str, &str, &str),
) -> String {
    let ty = operand_type(ctx);
    let a_chunks = tile.bm * BK / 8;
    let threads = tile.threads();
    g.fill(
        &TEMPLATE.replace("@PARAMS@", params).replace("@PRE@", pre),
        ctx,
        store,
    )
    .replace("@AMAP@", a_map)
    .replace("@WGMMA@", &wgmma_issue(tile.bn, ty))
    .replace("@MINB@", &tile.min_blocks().to_string())
    .replace("@BN@", &tile.bn.to_string())
    .replace("@ACC@", &(tile.bn / 2).to_string())
    .replace("@S@", &tile.stages.to_string())
    .replace("@PD@", &(tile.stages - 1 - tile.inflight).to_string())
    .replace("@INF@", &tile.inflight.to_string())
    .replace("@STAGE@", &tile.stage_bytes().to_string())
    .replace("@ABYTES@", &(tile.bm * BK * 2).to_string())
    .replace("@BM@", &tile.bm.to_string())
    .replace("@T@", &threads.to_string())
    .replace("@CLD@", &(tile.bn + CPAD).to_string())
    .replace("@ACH@", &(a_chunks / threads).to_string())
}

/// Statements that apply `map`, the elementwise epilogue of the kernel that produced A, to
/// the thread's own chunks of A's k tile `kt` once they have landed in shared memory (each
/// thread rewrites the 16-byte chunks it copied, so its own `cp.async` wait covers them; the
/// fence and barrier after the hole publish them to the tensor cores). The map sees element
/// (row, k) of A as element (row, col) of its own result, reads its extra inputs as
/// `aep1, ...` and rounds to A's dtype, exactly as the producer's epilogue kernel would have
/// stored it; chunks past `m` or `k` stay the zeros `cp.async` filled in. A chunk's eight
/// elements are mapped together, the map's inputs read as one vector each where their
/// layout allows ([`EpilogueCtx::apply_wide`]: a bias is one 16-byte load per chunk), else
/// element by element.
///
/// # Errors
/// A node of the map no rule accepts.
pub(super) fn a_map(map: &EpilogueCtx, g: &MmaGemm, tile: &WgmmaTile) -> Result<String, String> {
    let dtype = map.input_dtype();
    let ity = if g.m * g.k < (1 << 31) {
        "int"
    } else {
        "long long"
    };
    let w = Wide::new(dtype, WIDE).ok_or("no vector moves for A's dtype")?;
    let values: Vec<String> = (0..WIDE).map(|l| load(dtype, &w.elem("av", l))).collect();
    // the chunk's eight elements at once (the map's inputs read as vectors), or one by one
    let (body, outs) = match map.apply_wide(("gr", "gk", g.k), &values, ity) {
        Some(r) => r?,
        None => {
            let mut body = String::new();
            let mut outs = Vec::with_capacity(WIDE);
            for (l, value) in values.iter().enumerate() {
                let col = format!("(gk + {l})");
                let (stmts, var) = map.apply_at(("gr", &col, g.k), value, ity)?;
                body += &format!(
                    "{} am{l};\n{{\n{stmts}am{l} = {var};\n}}\n",
                    super::dtype::storage(map.out_dtype())
                );
                outs.push(format!("am{l}"));
            }
            (body, outs)
        }
    };
    Ok(format!(
        "{{\n\
         unsigned char* ast = gbase + (kt % {stages}) * {stage};\n\
         #pragma unroll\nfor (int i = 0; i < {ach}; ++i) {{\n\
         const int t = tid + i * {threads};\n\
         const int r = t >> 3, c = t & 7;\n\
         const int gr = bm0 + r, gk = kt * 64 + c * 8;\n\
         if (gr < {m} && gk < {k}) {{\n\
         unsigned short* ap = reinterpret_cast<unsigned short*>(ast + r * 128 + ((c ^ (r & 7)) << 4));\n\
         {load}{body}{store}}}\n}}\n}}\n",
        load = w.load("av", "ap", "0"),
        store = w.store("ap", "0", &outs),
        stages = tile.stages,
        stage = tile.stage_bytes(),
        ach = tile.bm * BK / 8 / tile.threads(),
        threads = tile.threads(),
        m = g.m,
        k = g.k,
    ))
}

/// The kernel with `@NAME@` holes [`emit`] fills. Shared memory per stage (1024-aligned):
/// A as `bm` rows of 128 bytes, then B as `bn / 64` blocks of 64 rows (k) of 128 bytes (64
/// columns). Descriptors: start address >> 4 in bits 0..13, leading byte
/// offset >> 4 in 16..29, stride byte offset >> 4 in 32..45, 128-byte swizzle (1) in 62..63.
const TEMPLATE: &str = r#"extern "C" __global__ void __launch_bounds__(@T@, @MINB@) RLX_FN(@PARAMS@) {
extern __shared__ __align__(1024) unsigned char rlx_wsmem[];
const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
const int bm0 = blockIdx.y * @BM@, bn0 = blockIdx.x * @BN@;
const unsigned short* A = (const unsigned short*)in0 + @AOFF@;
const unsigned short* B = (const unsigned short*)in1 + @BOFF@;
const unsigned base = (rlx_smem_u32(rlx_wsmem) + 1023u) & ~1023u;
unsigned char* gbase = rlx_wsmem + (base - rlx_smem_u32(rlx_wsmem));
@PRE@auto load = [&](int kt, int s) {
const unsigned as = base + s * @STAGE@;
const unsigned bs = as + @ABYTES@;
const int k0 = kt * 64;
#pragma unroll
for (int i = 0; i < @ACH@; ++i) {
const int t = tid + i * @T@;
const int r = t >> 3, c = t & 7;
const int gr = bm0 + r, gk = k0 + c * 8;
const bool ok = gr < @M@ && gk < @K@;
const unsigned dst = as + r * 128 + ((c ^ (r & 7)) << 4);
asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(A + (ok ? (long long)gr * @LDA@ + gk : 0)), "r"(ok ? 16 : 0) : "memory");
}
// B: 16-byte chunk `tid % 8` of each 64-column block, rows `tid / 8` apart by T / 8, so a
// thread's addresses differ by constants (the swizzle `r % 8` is the same for all of them)
#pragma unroll
for (int nb = 0; nb < @BN@ / 64; ++nb)
#pragma unroll
for (int q = 0; q < 64 / (@T@ / 8); ++q) {
const int c = tid & 7, r = (tid >> 3) + q * (@T@ / 8);
const int gk = k0 + r, gn = bn0 + nb * 64 + c * 8;
const bool ok = gk < @K@ && gn < @N@;
const unsigned dst = bs + nb * 8192 + r * 128 + ((c ^ (r & 7)) << 4);
asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(B + (ok ? (long long)gk * @LDB@ + gn : 0)), "r"(ok ? 16 : 0) : "memory");
}
};
const int KT = (@K@ + 63) / 64;
#pragma unroll
for (int s = 0; s < @PD@; ++s) {
if (s < KT) load(s, s);
rlx_cp_async_commit();
}
float acc[@ACC@];
#pragma unroll
for (int i = 0; i < @ACC@; ++i) acc[i] = 0.0f;
for (int kt = 0; kt < KT; ++kt) {
// this thread's copies of tile kt have landed; the fence makes them visible to the
// tensor cores' (async proxy) reads, the barrier everyone's, and it also means both
// warpgroups are done with tile kt - 1 - INF, whose slot the next copy reuses
rlx_cp_async_wait<@PD@ - 1>();
@AMAP@asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
__syncthreads();
{
const int nk = kt + @PD@;
if (nk < KT) load(nk, nk % @S@);
rlx_cp_async_commit();
}
const unsigned as = base + (kt % @S@) * @STAGE@ + wg * 64 * 128;
const unsigned bs = base + (kt % @S@) * @STAGE@ + @ABYTES@;
#pragma unroll
for (int i = 0; i < @ACC@; ++i) asm volatile("" : "+f"(acc[i]) :: "memory");
asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
for (int kk = 0; kk < 4; ++kk) {
const unsigned long long da = (unsigned long long)(((as + kk * 32) & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
const unsigned long long db = (unsigned long long)(((bs + kk * 2048) & 0x3FFFF) >> 4) | (512ull << 16) | (64ull << 32) | (1ull << 62);
@WGMMA@}
asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
asm volatile("wgmma.wait_group.sync.aligned @INF@;\n" ::: "memory");
#pragma unroll
for (int i = 0; i < @ACC@; ++i) asm volatile("" : "+f"(acc[i]) :: "memory");
}
asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
for (int i = 0; i < @ACC@; ++i) asm volatile("" : "+f"(acc[i]) :: "memory");
// The tile goes through shared memory (f32, rows of CLD) so the epilogue is written once
// and each warp stores whole row segments. Accumulator i of a thread: column block i / 4,
// row +8 for (i / 2) odd, column +1 for i odd (the mma.sync m16n8 layout per 8 columns).
rlx_cp_async_wait<0>();
__syncthreads();
float* cs = reinterpret_cast<float*>(gbase);
{
const int r0 = wg * 64 + (warp & 3) * 16 + (lane >> 2), c0 = (lane & 3) * 2;
#pragma unroll
for (int j = 0; j < @ACC@ / 4; ++j)
#pragma unroll
for (int h = 0; h < 2; ++h)
*reinterpret_cast<float2*>(cs + (r0 + h * 8) * @CLD@ + j * 8 + c0) = make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
}
__syncthreads();
@STORE@}
"#;
