//! Fused scaled dot-product attention, flash style: a block takes a tile of query rows of
//! one batch entry and streams key/value tiles through shared memory, keeping a running
//! max, sum and output per row (online softmax), so the sq x sk score matrix never exists in
//! device memory. Each lane scores one key of the tile; each lane owns `dv / 32` output
//! columns. Head sizes up to 256; causal or additive masks; explicit or default scale.
//! Q, K, V and the result are addressed through [`Layouts`], so the planner can point them at
//! a `[batch, seq, heads, dim]` buffer in place of a transposed copy.
//!
//! [`flash_mma`] is the same algorithm on tensor cores (`mma.sync` m16n8k16, f16/bf16 on
//! sm_80+, head sizes multiples of 16 up to 128), which planning prefers where it applies;
//! [`emit`] remains for f32, other head sizes and older GPUs, and [`gemm_softmax`] is the
//! softmax of the GEMM form (`plan::gemm::attention`).

use super::dialect::CudaC;
use super::dtype::{load, storage, store};
use super::index::contiguous;
use super::store::{numel, LibCtx};
use super::{finish, ArgRef, EmittedKernel, Launch};
use rlx_ir::render::{broadcast_strides, coords};
use rlx_ir::{AttnMask, DType};

/// Keys per tile: one per lane.
const KT: usize = 32;
/// Warps per block.
const WARPS: usize = 4;

/// Largest head size the kernel takes.
pub const MAX_HEAD: usize = 256;

/// Strides of operand `shape` (same rank as `out_batch` + 2, or lower for masks: aligned
/// right) over the output batch dims, 0 where it broadcasts.
fn batch_strides(shape: &[usize], out_batch: &[usize]) -> Vec<isize> {
    let mut out = out_batch.to_vec();
    out.extend([1, 1]);
    let mut strides = broadcast_strides(shape, &out);
    strides.truncate(out_batch.len());
    strides
}

/// Where attention reads an operand or writes its result: a buffer, the element offset of
/// matrix 0, one stride per output batch dim (0 broadcasts), and the row and column strides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// the buffer
    pub arg: ArgRef,
    /// element offset of batch 0, row 0, column 0
    pub offset: usize,
    /// element stride per output batch dim
    pub batch: Vec<isize>,
    /// element stride between rows
    pub row: isize,
    /// element stride between columns
    pub col: isize,
}

impl Layout {
    /// Operand `shape` (batch dims aligned right to `out_batch`) read at `offset` with one
    /// stride per dim of `shape`; size-1 dims broadcast.
    pub fn strided(
        arg: ArgRef,
        offset: usize,
        shape: &[usize],
        strides: &[isize],
        out_batch: &[usize],
    ) -> Layout {
        let r = shape.len();
        let lead = (out_batch.len() + 2).saturating_sub(r);
        let stride = |d: usize| if shape[d] == 1 { 0 } else { strides[d] };
        Layout {
            arg,
            offset,
            batch: (0..out_batch.len())
                .map(|d| if d < lead { 0 } else { stride(d - lead) })
                .collect(),
            row: stride(r - 2),
            col: stride(r - 1),
        }
    }

    /// Operand `shape` stored packed row-major in `arg`.
    pub fn packed(arg: ArgRef, shape: &[usize], out_batch: &[usize]) -> Layout {
        Layout::strided(arg, 0, shape, &contiguous(shape), out_batch)
    }

    /// `const {ity} {name} = offset + Σ bc_d * batch_d;` over the batch coordinates.
    fn batch_offset(&self, name: &str, ity: &str) -> String {
        let mut s = format!("const {ity} {name} = {}", self.offset);
        for (i, x) in self.batch.iter().enumerate() {
            if *x != 0 {
                s += &format!(" + bc{i} * {x}");
            }
        }
        s + ";
"
    }

    /// The element address of (`row`, `col`) after `base`, in `ity` arithmetic.
    fn at(&self, base: &str, row: &str, col: &str, ity: &str) -> String {
        let term = |v: &str, s: isize| match s {
            0 => String::new(),
            1 => format!(" + ({ity})({v})"),
            _ => format!(" + ({ity})({v}) * {s}"),
        };
        format!("{base}{}{}", term(row, self.row), term(col, self.col))
    }

    /// One past the largest element offset read or written for `rows x cols` matrices over
    /// the batch dims `out_batch` (negative strides count by their size).
    fn extent(&self, out_batch: &[usize], rows: usize, cols: usize) -> usize {
        let span = |n: usize, s: isize| n.saturating_sub(1) * s.unsigned_abs();
        self.offset
            + out_batch
                .iter()
                .zip(&self.batch)
                .map(|(&n, &s)| span(n, s))
                .sum::<usize>()
            + span(rows, self.row)
            + span(cols, self.col)
            + 1
    }
}

/// The layouts of one attention kernel's Q, K, V and result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layouts {
    /// queries
    pub q: Layout,
    /// keys
    pub k: Layout,
    /// values
    pub v: Layout,
    /// the result (before any epilogue)
    pub out: Layout,
}

impl Layouts {
    /// Every operand packed in its own buffer, as lowering writes them.
    pub fn packed(ctx: &LibCtx) -> Layouts {
        let out = &ctx.result.1;
        let ob = &out[..out.len() - 2];
        let inp =
            |i: usize| Layout::packed(ArgRef::Buffer(ctx.kernel.inputs[i]), &ctx.inputs[i].1, ob);
        Layouts {
            q: inp(0),
            k: inp(1),
            v: inp(2),
            out: Layout::packed(ArgRef::Buffer(ctx.kernel.output), out, ob),
        }
    }
}

/// Emits attention reading and writing through `layouts`.
///
/// # Errors
/// Head size over [`MAX_HEAD`], a result moved away from its buffer while an epilogue is
/// fused, or an epilogue node no rule accepts.
pub fn emit(
    ctx: &LibCtx,
    mask: AttnMask,
    scale: Option<f64>,
    layouts: &Layouts,
) -> Result<EmittedKernel, String> {
    let (dtype, q) = &ctx.inputs[0];
    let (_, k) = &ctx.inputs[1];
    let (_, v) = &ctx.inputs[2];
    let r = q.len();
    let (sq, d) = (q[r - 2], q[r - 1]);
    let (sk, dv) = (k[r - 2], v[r - 1]);
    if d > MAX_HEAD || dv > MAX_HEAD {
        return Err(format!("attention head size {d}/{dv} exceeds {MAX_HEAD}"));
    }
    let out = &ctx.result.1;
    let out_batch = &out[..out.len() - 2];
    let batch = numel(out_batch);
    let rows_per_warp = if d.max(dv) > 128 { 2 } else { 4 };
    let qt = rows_per_warp * WARPS;
    let q_tiles = sq.div_ceil(qt);
    let cols = dv.div_ceil(32);
    let scale = scale.unwrap_or(1.0 / (d as f64).sqrt());
    let ity = "long long";
    let offs = |name: &str, shape: &[usize]| {
        let st = batch_strides(shape, out_batch);
        let mut s = format!("const {ity} {name} = 0");
        for (i, x) in st.iter().enumerate() {
            if *x != 0 {
                s += &format!(" + bc{i} * {x}");
            }
        }
        s + ";\n"
    };
    let mut batch_offsets = coords(&CudaC, "bi", "bc", out_batch, ity)
        + &layouts.q.batch_offset("qo", ity)
        + &layouts.k.batch_offset("ko", ity)
        + &layouts.v.batch_offset("vo", ity)
        + &layouts.out.batch_offset("oo", ity);
    let mask_term = match mask {
        AttnMask::None => String::new(),
        AttnMask::Causal => format!("if (j > i + {}) s = ninf;\n", sk as isize - sq as isize),
        AttnMask::Additive => {
            let (mdt, ms) = &ctx.inputs[3];
            batch_offsets += &offs("mo", ms);
            let mr = ms.len();
            let si = if mr >= 2 && ms[mr - 2] != 1 {
                ms[mr - 1]
            } else {
                0
            };
            let sj = if mr >= 1 && ms[mr - 1] != 1 { 1 } else { 0 };
            format!(
                "if (j < {sk}) s += {};\n",
                load(*mdt, &format!("in3[mo + (long long)i * {si} + j * {sj}]"))
            )
        }
    };
    let shared_floats = qt * d + KT * (d + 1) + KT * dv;
    let packed = Layouts::packed(ctx);
    let store = if layouts.out == packed.out {
        ctx.store("((long long)bi * {sq} + i) * {dv} + c", "val", ity)?
            .replace("{sq}", &sq.to_string())
            .replace("{dv}", &dv.to_string())
    } else if ctx.kernel.epilogue.is_some() {
        return Err("a fused epilogue needs the result in its own buffer".into());
    } else {
        format!(
            "out[{}] = {};\n",
            layouts.out.at("oo", "i", "c", ity),
            store(ctx.result.0, "val")
        )
    };
    let mut args = ctx.args();
    for (i, l) in [&layouts.q, &layouts.k, &layouts.v].into_iter().enumerate() {
        args[i] = l.arg;
    }
    args[ctx.kernel.inputs.len()] = layouts.out.arg;
    let text = format!(
        "extern \"C\" __global__ void __launch_bounds__({threads}) RLX_FN({ins}{outs}) {{\n\
         extern __shared__ float rlx_smem[];\n\
         float* Qs = rlx_smem;\n\
         float* Ks = Qs + {qt} * {d};\n\
         float* Vs = Ks + {KT} * {kpad};\n\
         const int lane = threadIdx.x & 31;\n\
         const int warp = threadIdx.x >> 5;\n\
         const float ninf = __int_as_float(0xff800000);\n\
         const {ity} bi = blockIdx.x / {q_tiles};\n\
         const int q0 = (int)(blockIdx.x % {q_tiles}) * {qt};\n\
         {batch_offsets}\
         for (int t = threadIdx.x; t < {qt} * {d}; t += {threads}) {{\n\
         const int row = q0 + t / {d};\n\
         Qs[t] = row < {sq} ? {qload} * {scale:?}f : 0.0f;\n}}\n\
         float m[{rpw}], l[{rpw}], o[{rpw}][{cols}];\n\
         for (int rr = 0; rr < {rpw}; ++rr) {{ m[rr] = ninf; l[rr] = 0.0f; for (int c = 0; c < {cols}; ++c) o[rr][c] = 0.0f; }}\n\
         for (int k0 = 0; k0 < {sk}; k0 += {KT}) {{\n\
         __syncthreads();\n\
         for (int t = threadIdx.x; t < {KT} * {d}; t += {threads}) {{\n\
         const int j = k0 + t / {d};\n\
         Ks[(t / {d}) * {kpad} + t % {d}] = j < {sk} ? {kload} : 0.0f;\n}}\n\
         for (int t = threadIdx.x; t < {KT} * {dv}; t += {threads}) {{\n\
         const int j = k0 + t / {dv};\n\
         Vs[t] = j < {sk} ? {vload} : 0.0f;\n}}\n\
         __syncthreads();\n\
         for (int rr = 0; rr < {rpw}; ++rr) {{\n\
         const int qi = warp * {rpw} + rr;\n\
         const int i = q0 + qi;\n\
         const int j = k0 + lane;\n\
         float s = 0.0f;\n\
         for (int c = 0; c < {d}; ++c) s += Qs[qi * {d} + c] * Ks[lane * {kpad} + c];\n\
         if (j >= {sk}) s = ninf;\n\
         {mask_term}\
         const float mt = rlx_warp_max(s);\n\
         const float nm = fmaxf(m[rr], mt);\n\
         const float p = (nm == ninf) ? 0.0f : expf(s - nm);\n\
         const float alpha = (nm == ninf) ? 1.0f : expf(m[rr] - nm);\n\
         l[rr] = l[rr] * alpha + rlx_warp_sum(p);\n\
         m[rr] = nm;\n\
         for (int c = 0; c < {cols}; ++c) o[rr][c] *= alpha;\n\
         for (int jj = 0; jj < {KT}; ++jj) {{\n\
         const float pj = __shfl_sync(0xffffffffu, p, jj);\n\
         for (int c = 0; c < {cols}; ++c) {{ const int col = lane + 32 * c; if (col < {dv}) o[rr][c] += pj * Vs[jj * {dv} + col]; }}\n\
         }}\n}}\n}}\n\
         for (int rr = 0; rr < {rpw}; ++rr) {{\n\
         const int i = q0 + warp * {rpw} + rr;\n\
         if (i >= {sq}) continue;\n\
         const float inv = 1.0f / l[rr];\n\
         for (int cc = 0; cc < {cols}; ++cc) {{\n\
         const int c = lane + 32 * cc;\n\
         if (c >= {dv}) continue;\n\
         const float val = o[rr][cc] * inv;\n{store}}}\n}}\n}}\n",
        threads = WARPS * 32,
        ins = ctx.in_params(),
        outs = ctx.out_params(),
        kpad = d + 1,
        rpw = rows_per_warp,
        qload = load(*dtype, &format!("in0[{}]", layouts.q.at("qo", "row", &format!("t % {d}"), ity))),
        kload = load(*dtype, &format!("in1[{}]", layouts.k.at("ko", "j", &format!("t % {d}"), ity))),
        vload = load(*dtype, &format!("in2[{}]", layouts.v.at("vo", "j", &format!("t % {dv}"), ity))),
        scale = scale as f32,
    );
    let launch = Launch {
        grid: [(batch * q_tiles).clamp(1, i32::MAX as usize) as u32, 1],
        block: (WARPS * 32) as u32,
        shared_bytes: (shared_floats * 4) as u32,
    };
    Ok(finish(&ctx.kernel.name, "attention", text, launch, args))
}

/// Largest head size (of q/k and of v) the tensor-core kernel [`flash_mma`] takes; head
/// sizes must also be multiples of 16.
pub const FLASH_MAX_HEAD: usize = 128;

/// True when [`flash_mma`] runs this attention: enabled in the target, sm_80 or newer, f16 or
/// bf16 operands, q/k and v head sizes multiples of 16 up to [`FLASH_MAX_HEAD`], and a
/// result either in its own buffer or without a fused epilogue.
pub fn flash_applies(ctx: &LibCtx, layouts: &Layouts) -> bool {
    let (dtype, q) = &ctx.inputs[0];
    let (_, v) = &ctx.inputs[2];
    let head_ok = |h: usize| h.is_multiple_of(16) && (16..=FLASH_MAX_HEAD).contains(&h);
    ctx.target.flash_attention
        && ctx.target.compute_capability().is_some_and(|cc| cc >= 80)
        && matches!(dtype, DType::F16 | DType::BF16)
        && q.len() >= 2
        && head_ok(q[q.len() - 1])
        && head_ok(v[v.len() - 1])
        && (ctx.kernel.epilogue.is_none() || layouts.out == Layouts::packed(ctx).out)
        && flash_tiles(ctx).shared_bytes <= ctx.target.max_shared
}

/// The tiling of [`flash_mma`] for one problem.
struct FlashTiles {
    /// warps per block, 16 query rows each
    warps: usize,
    /// keys per shared-memory tile (a multiple of 16)
    bk: usize,
    /// key/value tiles in flight (shared-memory buffers of each), at least 2
    stages: usize,
    /// dynamic shared memory: `stages` K tiles and `stages` V tiles
    shared_bytes: usize,
}

fn flash_tiles(ctx: &LibCtx) -> FlashTiles {
    let q = &ctx.inputs[0].1;
    let r = q.len();
    let (sq, d) = (q[r - 2], q[r - 1]);
    let sk = ctx.inputs[1].1[r - 2];
    let dv = ctx.inputs[2].1[r - 1];
    let out = &ctx.result.1;
    let batch = numel(&out[..out.len() - 2]);
    // Up to `flash_warps` x 16 queries per block (64 by default), fewer when that leaves SMs
    // idle (small batches) or rows empty.
    let mut warps = sq.div_ceil(16).clamp(1, ctx.target.flash_warps.max(1));
    while warps > 1 && batch * sq.div_ceil(16 * warps) < ctx.target.sm_count as usize {
        warps /= 2;
    }
    // Keys per tile: what `flash_keys` says, else up to 64.
    let most = match ctx.target.flash_keys {
        0 => 64,
        k => k,
    };
    let bk = sk.div_ceil(16).clamp(1, most / 16) * 16;
    // Every key/value tile in flight at once when they fit in a little shared memory (short
    // sequences: nothing waits behind a buffer's reuse), else double buffering.
    let tile_bytes = bk * ((d + 8) + (dv + 8)) * 2;
    let n_kt = sk.div_ceil(bk);
    let stages = if n_kt <= MAX_STAGES && n_kt * tile_bytes <= ALL_IN_FLIGHT_BYTES {
        n_kt.max(2)
    } else {
        2
    };
    FlashTiles {
        warps,
        bk,
        stages,
        shared_bytes: stages * tile_bytes,
    }
}

/// Registers per thread [`flash_mma`] asks the compiler to stay within for head sizes up to
/// 32 with 64-key tiles: the encoder's kernel used 101 (4 blocks of 128 threads per SM); at
/// 96 it runs 5 without spilling and took 0.057 ms per layer instead of 0.059 on an H200
/// (2026-11-30); at 80 (6 blocks) it spills and was slower.
const SMALL_HEAD_REGISTERS: usize = 96;

/// The launch-bounds suffix (`, min blocks per SM`) of a flash kernel of `threads` threads.
fn min_blocks(d: usize, dv: usize, bk: usize, threads: usize) -> String {
    if d <= 32 && dv <= 32 && bk == 64 {
        let blocks = 65536 / (SMALL_HEAD_REGISTERS * threads);
        if blocks > 1 {
            return format!(", {}", blocks.min(32));
        }
    }
    String::new()
}

/// Most key/value tiles [`flash_mma`] keeps in flight.
const MAX_STAGES: usize = 4;
/// Shared memory up to which every key/value tile of a problem is in flight at once.
const ALL_IN_FLIGHT_BYTES: usize = 32 * 1024;

/// True when 16-byte chunks of 8 consecutive elements along a row start 16-byte aligned in
/// every batch and row (buffers themselves are 256-byte aligned).
fn vectorizable(l: &Layout, chunk: isize) -> bool {
    l.col == 1
        && l.offset as isize % chunk == 0
        && l.row % chunk == 0
        && l.batch.iter().all(|b| b % chunk == 0)
}

/// Emits scaled dot-product attention on tensor cores (sm_80+, f16/bf16 operands, f32
/// accumulation), FlashAttention-2 style: a block is `warps` warps of 16 query rows each, for
/// one (batch, head) matrix; key/value tiles of `bk` rows are double-buffered in shared memory
/// (`cp.async` when rows are 16-byte aligned, plain loads otherwise; rows past `sk`
/// zero-filled), `S = Q Kᵀ` and `O += P V` run as `mma.sync.m16n8k16`, and the softmax is
/// online (running max and sum per row in registers, base-2 exponentials with the scale
/// folded in), so neither S nor P ever reaches memory. Masks none / causal (key tiles past a
/// block's last visible key are skipped) / additive (broadcast as in [`emit`]); a row whose
/// keys are all masked yields zeros, as the interpreter defines. Q, K, V and the result go
/// through `layouts`. When every key/value tile of a matrix is in flight at once, the mask
/// is not causal and there are at least four matrices per SM, a block is *resident*: it
/// loads its matrix's K and V once and runs every query tile of it over them (each query
/// tile had its own block reloading K and V before; attention 0.0568 → 0.0555 ms per layer
/// for the encoder at batch 256 on an H200), `Target::flash_resident`. With no mask and no
/// partial key tile, the scale (times log2 e) is not applied to each score: the row max is
/// taken over the raw scores and scaled once, and each exponent is one FMA,
/// `ex2(s * scale - max)` (one FP32 operation fewer per score; attention 0.0555–0.0584 →
/// 0.0543–0.0555 ms per layer in three alternating H200 rounds; `RLX_CUDA_FLASH_FOLD=0` off).
///
/// Fragment layouts relied on (PTX ISA, `mma.m16n8k16` with 16-bit A/B, f32 C/D; lane
/// `t`, `g = t / 4`, `tq = t % 4`; a `.b32` register holds two 16-bit values, the lower
/// column/k index in the low half):
/// - A (16x16, row-major; Q or P): `a0` = (row g, cols 2tq, 2tq+1), `a1` = (row g+8, same
///   cols), `a2` = (row g, cols 2tq+8, +9), `a3` = (row g+8, cols 2tq+8, +9).
/// - B (16x8, k x n, "col"; Kᵀ or V): `b0` = (k 2tq, 2tq+1; col g), `b1` = (k 2tq+8, +9;
///   col g). For Kᵀ that is K[key g][dims 2tq, +1], which `ldmatrix` (no `.trans`) yields
///   from K rows; for V it is V[keys 2tq, +1][col g], which `ldmatrix.trans` yields from V
///   rows.
/// - C/D (16x8 f32): `c0, c1` = (row g, cols 2tq, 2tq+1), `c2, c3` = (row g+8, same cols).
///   The S accumulators of key columns 16kc..16kc+15 (two n-tiles) are therefore exactly
///   the A fragment of P for k-chunk kc after packing pairs: no shuffles.
///
/// With `back` the blocks take the (matrix, query tiles) items last to first
/// ([`Target::walk_back_above`](super::Target::walk_back_above)).
///
/// # Errors
/// The problem is outside what [`flash_applies`] accepts, or an epilogue node no rule
/// accepts.
pub fn flash_mma(
    ctx: &LibCtx,
    mask: AttnMask,
    scale: Option<f64>,
    layouts: &Layouts,
    back: bool,
) -> Result<EmittedKernel, String> {
    if !flash_applies(ctx, layouts) {
        return Err(
            "tensor-core attention needs sm_80+, f16/bf16 and head sizes 16..=128 in steps of 16"
                .into(),
        );
    }
    let (dtype, q) = &ctx.inputs[0];
    let r = q.len();
    let (sq, d) = (q[r - 2], q[r - 1]);
    let sk = ctx.inputs[1].1[r - 2];
    let dv = ctx.inputs[2].1[r - 1];
    let out = &ctx.result.1;
    let out_batch = &out[..out.len() - 2];
    let batch = numel(out_batch);
    let ty = if *dtype == DType::BF16 { "bf16" } else { "f16" };
    let tiles = flash_tiles(ctx);
    let (warps, bk, stages) = (tiles.warps, tiles.bk, tiles.stages);
    let bq = 16 * warps;
    let threads = 32 * warps;
    let q_tiles = sq.div_ceil(bq);
    let n_kt = sk.div_ceil(bk);
    let (kld, vld) = (d + 8, dv + 8);
    // Resident: when every key/value tile is in shared memory at once and blocks stay
    // plentiful, a block loads them once and runs all query tiles of its matrix over them
    // (half the K/V traffic at two query tiles); causal blocks keep their own key range.
    let resident = ctx.target.flash_resident
        && stages >= n_kt
        && q_tiles > 1
        && mask != AttnMask::Causal
        && batch >= 4 * ctx.target.sm_count as usize;
    let qpb = if resident { q_tiles } else { 1 };
    let q_blocks = q_tiles.div_ceil(qpb);
    let log2e = std::f64::consts::LOG2_E;
    let scale = scale.unwrap_or(1.0 / (d as f64).sqrt());
    // 32-bit offsets when every operand's and the result's reach fits: fewer registers and
    // integer instructions in a kernel that is bound by latency at low occupancy
    let narrow = [
        (&layouts.q, sq, d),
        (&layouts.k, sk, d),
        (&layouts.v, sk, dv),
        (&layouts.out, sq, dv),
    ]
    .iter()
    .all(|(l, rows, cols)| l.extent(out_batch, *rows, *cols) < (1 << 31));
    let ity = if narrow { "int" } else { "long long" };

    let mut batch_code = coords(&CudaC, "bi", "bc", out_batch, ity)
        + &layouts.q.batch_offset("qo", ity)
        + &layouts.k.batch_offset("ko", ity)
        + &layouts.v.batch_offset("vo", ity)
        + &layouts.out.batch_offset("oo", ity);
    let mask_code = match mask {
        AttnMask::None => String::new(),
        AttnMask::Causal => format!("if (j > i + {}) x = ninf;\n", sk as isize - sq as isize),
        AttnMask::Additive => {
            let (mdt, ms) = &ctx.inputs[3];
            batch_code += "const long long mo = 0";
            for (i, x) in batch_strides(ms, out_batch).iter().enumerate() {
                if *x != 0 {
                    batch_code += &format!(" + bc{i} * {x}");
                }
            }
            batch_code += ";\n";
            let mr = ms.len();
            let si = if mr >= 2 && ms[mr - 2] != 1 {
                ms[mr - 1]
            } else {
                0
            };
            let sj = usize::from(mr >= 1 && ms[mr - 1] != 1);
            format!(
                "if (i < {sq} && j < {sk}) x += {:?}f * {};\n",
                log2e as f32,
                load(*mdt, &format!("in3[mo + (long long)i * {si} + j * {sj}]"))
            )
        }
    };
    let key_guard = if !sk.is_multiple_of(bk) {
        format!("if (j >= {sk}) x = ninf;\n")
    } else {
        String::new()
    };
    let n_kt_code = if mask == AttnMask::Causal {
        // Keys past the last visible key of the block's last row are never loaded.
        format!(
            "const int kvis = min(q0 + {bq}, {sq}) + ({sk} - {sq});\n\
             const int n_kt = kvis <= 0 ? 0 : min({n_kt}, (kvis + {bk} - 1) / {bk});\n",
            sk = sk as isize,
            sq = sq as isize,
        )
    } else {
        format!("const int n_kt = {n_kt};\n")
    };
    // One operand tile (K or V: `bk` rows of `w` elements) into shared memory rows of `ld`.
    let load_tile = |l: &Layout, input: &str, base: &str, dst: &str, w: usize, ld: usize| {
        if vectorizable(l, 8) {
            let at = l.at(base, "j", "c", ity);
            format!(
                "for (int t = tid; t < {bk} * {chunks}; t += {threads}) {{\n\
                 const int rr = t / {chunks}, c = (t % {chunks}) * 8, j = kt * {bk} + rr;\n\
                 rlx_cp_async16({dst} + rr * {ld} + c, {input} + (j < {sk} ? {at} : 0), j < {sk} ? 16 : 0);\n}}\n",
                chunks = w / 8,
            )
        } else {
            let at = l.at(base, "j", "c", ity);
            format!(
                "for (int t = tid; t < {bk} * {w}; t += {threads}) {{\n\
                 const int rr = t / {w}, c = t % {w}, j = kt * {bk} + rr;\n\
                 {dst}[rr * {ld} + c] = j < {sk} ? {input}[{at}] : (unsigned short)0;\n}}\n"
            )
        }
    };
    let load_k = load_tile(&layouts.k, "in1", "ko", "kb", d, kld);
    let load_v = load_tile(&layouts.v, "in2", "vo", "vb", dv, vld);

    let packed = Layouts::packed(ctx);
    let store_pair = if layouts.out == packed.out && ctx.epilogue.is_some() {
        let one = ctx
            .store("((long long)bi * {sq} + i) * {dv} + c", "val", ity)?
            .replace("{sq}", &sq.to_string())
            .replace("{dv}", &dv.to_string());
        format!(
            "{{ const int c = c0; const float val = v0;\n{one}}}\n\
             {{ const int c = c0 + 1; const float val = v1;\n{one}}}\n"
        )
    } else if ctx.epilogue.is_some() {
        return Err("a fused epilogue needs the result in its own buffer".into());
    } else if vectorizable(&layouts.out, 2) {
        format!(
            "*(unsigned*)(out + {}) = rlx_pack_{ty}(v0, v1);\n",
            layouts.out.at("oo", "i", "c0", ity)
        )
    } else {
        let st = |v: &str| store(ctx.result.0, v);
        format!(
            "out[{}] = {};\nout[{}] = {};\n",
            layouts.out.at("oo", "i", "c0", ity),
            st("v0"),
            layouts.out.at("oo", "i", "c0 + 1", ity),
            st("v1"),
        )
    };

    // Q pairs as one 32-bit load when pairs are 4-byte aligned, else two 16-bit loads.
    let q_pair = if vectorizable(&layouts.q, 2) {
        "auto qe2 = [&](int row, int c) -> unsigned { return row < @SQ@ ? *reinterpret_cast<const unsigned*>(in0 + @QAT@) : 0u; };"
    } else {
        "auto qe = [&](int row, int c) -> unsigned { return row < @SQ@ ? (unsigned)in0[@QAT@] : 0u; };\n\
         auto qe2 = [&](int row, int c) -> unsigned { return qe(row, c) | (qe(row, c + 1) << 16); };"
    };
    let mut args = ctx.args();
    for (i, l) in [&layouts.q, &layouts.k, &layouts.v].into_iter().enumerate() {
        args[i] = l.arg;
    }
    args[ctx.kernel.inputs.len()] = layouts.out.arg;

    // With no key guard and no mask, and a positive scale, the scale folds into the
    // exponent's FMA: the row max is taken over the unscaled scores and scaled once.
    let fold =
        key_guard.is_empty() && mask_code.is_empty() && scale > 0.0 && ctx.target.tuning.flash_fold;
    let scale_loop = if fold { "" } else { SCALE_LOOP };
    let mx_scale = if fold {
        "mx0 *= @SCALE@;\nmx1 *= @SCALE@;\n"
    } else {
        ""
    };
    let exarg = |e: usize| {
        let mu = if e < 2 { "mu0" } else { "mu1" };
        if fold {
            format!("fmaf(s[n][{e}], @SCALE@, -{mu})")
        } else {
            format!("s[n][{e}] - {mu}")
        }
    };
    let text = FLASH_TEMPLATE
        .replace("@PARAMS@", &(ctx.in_params() + &ctx.out_params()))
        .replace("@BATCH@", &batch_code)
        .replace("@QPAIR@", q_pair)
        .replace("@QAT@", &layouts.q.at("qo", "row", "c", ity))
        .replace("@NKT@", &n_kt_code)
        .replace("@LOADK@", &load_k)
        .replace("@LOADV@", &load_v)
        .replace("@SCALELOOP@", scale_loop)
        .replace("@MXSCALE@", mx_scale)
        .replace("@EXARG0@", &exarg(0))
        .replace("@EXARG1@", &exarg(1))
        .replace("@EXARG2@", &exarg(2))
        .replace("@EXARG3@", &exarg(3))
        .replace("@GUARD@", &key_guard)
        .replace("@MASK@", &mask_code)
        .replace("@STORE@", &store_pair)
        .replace("@MINB@", &min_blocks(d, dv, bk, threads))
        .replace("@T@", &threads.to_string())
        .replace("@QB@", &q_blocks.to_string())
        .replace(
            "@BX@",
            if back {
                "gridDim.x - 1 - blockIdx.x"
            } else {
                "blockIdx.x"
            },
        )
        .replace("@QPB@", &qpb.to_string())
        .replace("@RESIDENT@", if resident { "1" } else { "0" })
        .replace("@NKTALL@", &n_kt.to_string())
        .replace("@BQ@", &bq.to_string())
        .replace("@BK@", &bk.to_string())
        .replace("@ST@", &stages.to_string())
        .replace(
            "@ENDSYNC@",
            if stages >= n_kt {
                ""
            } else {
                "__syncthreads();\n"
            },
        )
        .replace("@KLD@", &kld.to_string())
        .replace("@VLD@", &vld.to_string())
        .replace("@DC@", &(d / 16).to_string())
        .replace("@KNT@", &(bk / 8).to_string())
        .replace("@DVT@", &(dv / 8).to_string())
        .replace("@SQ@", &sq.to_string())
        .replace("@TY@", ty)
        .replace("@SCALE@", &format!("{:?}f", (scale * log2e) as f32));
    let launch = Launch {
        grid: [(batch * q_blocks).clamp(1, i32::MAX as usize) as u32, 1],
        block: threads as u32,
        shared_bytes: tiles.shared_bytes as u32,
    };
    let mut k = finish(&ctx.kernel.name, "flash_mma", text, launch, args);
    k.walks_back = back;
    let flow = if resident {
        format!("all {n_kt} resident for {qpb} query tiles")
    } else {
        format!("{stages} in flight")
    };
    k.label += &format!(
        " [tensor-core flash {ty} d{d}/{dv}: {bq}q x {bk}k tiles, {flow}, {warps} warps, {}{}]",
        match mask {
            AttnMask::None => "no mask",
            AttnMask::Causal => "causal",
            AttnMask::Additive => "additive mask",
        },
        if back { ", walks back to front" } else { "" }
    );
    Ok(k)
}

/// The scores scaled into the log2 domain, then the key guard and mask (the unfolded form).
const SCALE_LOOP: &str = r#"#pragma unroll
for (int n = 0; n < @KNT@; ++n) {
#pragma unroll
for (int e = 0; e < 4; ++e) {
const int j = kt * @BK@ + n * 8 + 2 * tq + (e & 1);
const int i = e < 2 ? r0 : r1;
(void)i;
float x = s[n][e] * @SCALE@;
@GUARD@@MASK@s[n][e] = x;
}
}
"#;

/// The tensor-core flash kernel with `@NAME@` holes that [`flash_mma`] fills. Shared memory:
/// `Ks[ST][BK][KLD]`, then `Vs[ST][BK][VLD]` (16-bit elements; rows padded by 8 elements, so
/// the eight 16-byte row reads of an `ldmatrix` phase hit distinct banks). Tile `kt` lives in
/// buffer `kt % ST`; `ST - 1` tiles are requested ahead of the one being used.
const FLASH_TEMPLATE: &str = r#"extern "C" __global__ void __launch_bounds__(@T@@MINB@) RLX_FN(@PARAMS@) {
extern __shared__ __align__(16) unsigned short rlx_fsmem[];
const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
const int g = lane >> 2, tq = lane & 3;
const float ninf = __int_as_float(0xff800000);
// A block takes QPB consecutive query tiles of one (batch, head) matrix; walking back, block
// 0 takes the last item.
const unsigned bx = @BX@;
const long long bi = bx / @QB@;
const int qbase = (int)(bx % @QB@) * (@QPB@ * @BQ@);
@BATCH@auto load_tile = [&](int kt, int buf) {
unsigned short* kb = rlx_fsmem + buf * (@BK@ * @KLD@);
unsigned short* vb = rlx_fsmem + @ST@ * (@BK@ * @KLD@) + buf * (@BK@ * @VLD@);
@LOADK@@LOADV@};
#if @RESIDENT@
// Every key/value tile of the matrix, loaded once for all of the block's query tiles.
for (int t = 0; t < @NKTALL@; ++t) load_tile(t, t);
rlx_cp_async_commit();
rlx_cp_async_wait<0>();
__syncthreads();
#endif
for (int qp = 0; qp < @QPB@; ++qp) {
const int q0 = qbase + qp * @BQ@;
if (q0 >= @SQ@) break;
const int r0 = q0 + warp * 16 + g, r1 = r0 + 8;
@NKT@#if !@RESIDENT@
// The first key/value tiles are on their way while Q is read.
#pragma unroll
for (int t = 0; t < @ST@ - 1; ++t) {
if (t < n_kt) load_tile(t, t);
rlx_cp_async_commit();
}
#endif
// Q as A fragments, loaded once (rows past sq are zeros); qe2(row, c) is the pair of
// elements c, c + 1 of a row, low half first.
unsigned qa[@DC@][4];
{
@QPAIR@
#pragma unroll
for (int kc = 0; kc < @DC@; ++kc) {
const int c = kc * 16 + 2 * tq;
qa[kc][0] = qe2(r0, c);
qa[kc][1] = qe2(r1, c);
qa[kc][2] = qe2(r0, c + 8);
qa[kc][3] = qe2(r1, c + 8);
}
}
float o[@DVT@][4];
#pragma unroll
for (int n = 0; n < @DVT@; ++n) { o[n][0] = 0.0f; o[n][1] = 0.0f; o[n][2] = 0.0f; o[n][3] = 0.0f; }
// Running max (log2 domain) and this lane's share of the running sum, rows r0 and r1.
float m0 = ninf, m1 = ninf, l0 = 0.0f, l1 = 0.0f;
for (int kt = 0; kt < n_kt; ++kt) {
#if !@RESIDENT@
if (kt + @ST@ - 1 < n_kt) load_tile(kt + @ST@ - 1, (kt + @ST@ - 1) % @ST@);
rlx_cp_async_commit();
rlx_cp_async_wait<@ST@ - 1>();
__syncthreads();
#endif
const unsigned short* kb = rlx_fsmem + (kt % @ST@) * (@BK@ * @KLD@);
const unsigned short* vb = rlx_fsmem + @ST@ * (@BK@ * @KLD@) + (kt % @ST@) * (@BK@ * @VLD@);
// S = Q K^T: per 16 keys one ldmatrix.x4 gives B fragments of two n-tiles (keys +0..7 and
// +8..15; matrices: keys lo/dims lo, keys lo/dims hi, keys hi/dims lo, keys hi/dims hi).
float s[@KNT@][4];
#pragma unroll
for (int n = 0; n < @KNT@; ++n) { s[n][0] = 0.0f; s[n][1] = 0.0f; s[n][2] = 0.0f; s[n][3] = 0.0f; }
#pragma unroll
for (int kc = 0; kc < @DC@; ++kc) {
#pragma unroll
for (int np = 0; np < @KNT@ / 2; ++np) {
unsigned b[4];
rlx_ldmatrix_x4(b, kb + (np * 16 + (lane & 7) + ((lane >> 4) << 3)) * @KLD@ + kc * 16 + (((lane >> 3) & 1) << 3));
rlx_mma_@TY@(s[2 * np], qa[kc], b[0], b[1]);
rlx_mma_@TY@(s[2 * np + 1], qa[kc], b[2], b[3]);
}
}
@SCALELOOP@// Online softmax: the four lanes of a quad share rows r0 and r1.
float mx0 = ninf, mx1 = ninf;
#pragma unroll
for (int n = 0; n < @KNT@; ++n) { mx0 = fmaxf(mx0, fmaxf(s[n][0], s[n][1])); mx1 = fmaxf(mx1, fmaxf(s[n][2], s[n][3])); }
mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
@MXSCALE@const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
// A row with no visible key yet keeps p = 0 and alpha = 0 instead of NaN.
const float mu0 = mn0 == ninf ? 0.0f : mn0, mu1 = mn1 == ninf ? 0.0f : mn1;
const float a0 = rlx_ex2(m0 - mu0), a1 = rlx_ex2(m1 - mu1);
m0 = mn0;
m1 = mn1;
float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
for (int n = 0; n < @KNT@; ++n) {
s[n][0] = rlx_ex2(@EXARG0@);
s[n][1] = rlx_ex2(@EXARG1@);
s[n][2] = rlx_ex2(@EXARG2@);
s[n][3] = rlx_ex2(@EXARG3@);
rs0 += s[n][0] + s[n][1];
rs1 += s[n][2] + s[n][3];
}
l0 = l0 * a0 + rs0;
l1 = l1 * a1 + rs1;
#pragma unroll
for (int n = 0; n < @DVT@; ++n) { o[n][0] *= a0; o[n][1] *= a0; o[n][2] *= a1; o[n][3] *= a1; }
// O += P V: P's A fragment of keys 16kc.. is S of n-tiles 2kc and 2kc+1; ldmatrix.trans of
// V rows gives B fragments of two 8-column n-tiles (matrices: keys lo/cols lo, keys hi/cols
// lo, keys lo/cols hi, keys hi/cols hi).
#pragma unroll
for (int kc = 0; kc < @KNT@ / 2; ++kc) {
unsigned pa[4];
pa[0] = rlx_pack_@TY@(s[2 * kc][0], s[2 * kc][1]);
pa[1] = rlx_pack_@TY@(s[2 * kc][2], s[2 * kc][3]);
pa[2] = rlx_pack_@TY@(s[2 * kc + 1][0], s[2 * kc + 1][1]);
pa[3] = rlx_pack_@TY@(s[2 * kc + 1][2], s[2 * kc + 1][3]);
#pragma unroll
for (int vp = 0; vp < @DVT@ / 2; ++vp) {
unsigned b[4];
rlx_ldmatrix_x4_trans(b, vb + (kc * 16 + (lane & 7) + (((lane >> 3) & 1) << 3)) * @VLD@ + vp * 16 + ((lane >> 4) << 3));
rlx_mma_@TY@(o[2 * vp], pa, b[0], b[1]);
rlx_mma_@TY@(o[2 * vp + 1], pa, b[2], b[3]);
}
}
@ENDSYNC@}
l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
#pragma unroll
for (int n = 0; n < @DVT@; ++n) {
const int c0 = n * 8 + 2 * tq;
if (r0 < @SQ@) { const int i = r0; const float v0 = o[n][0] * inv0, v1 = o[n][1] * inv0;
@STORE@}
if (r1 < @SQ@) { const int i = r1; const float v0 = o[n][2] * inv1, v1 = o[n][3] * inv1;
@STORE@}
}
}
}
"#;

/// Emits the softmax of the GEMM form of attention: `scores` holds `batch * sq` rows of `sk`
/// scaled scores (dtype of Q) and is overwritten with probabilities, with the mask applied
/// first (causal: keys past the diagonal are dropped; additive: operand 3, broadcast as in
/// [`emit`]). One warp per row, f32 arithmetic; a fully masked row becomes zeros.
pub fn gemm_softmax(ctx: &LibCtx, mask: AttnMask, scores: ArgRef) -> EmittedKernel {
    let (dtype, q) = &ctx.inputs[0];
    let (_, k) = &ctx.inputs[1];
    let r = q.len();
    let (sq, sk) = (q[r - 2], k[r - 2]);
    let out = &ctx.result.1;
    let out_batch = &out[..out.len() - 2];
    let rows = numel(out_batch) * sq;
    let ity = "long long";
    let st = storage(*dtype);
    let (mask_param, mask_setup, mask_term, args) = match mask {
        AttnMask::None => (String::new(), String::new(), String::new(), vec![scores]),
        AttnMask::Causal => (
            String::new(),
            String::new(),
            format!("if (j > i + {}) x = ninf;\n", sk as isize - sq as isize),
            vec![scores],
        ),
        AttnMask::Additive => {
            let (mdt, ms) = &ctx.inputs[3];
            let mstrides = batch_strides(ms, out_batch);
            let mut setup = coords(&CudaC, "bi", "bc", out_batch, ity);
            setup += &format!("const {ity} mo = 0");
            for (d, x) in mstrides.iter().enumerate() {
                if *x != 0 {
                    setup += &format!(" + bc{d} * {x}");
                }
            }
            setup += ";\n";
            let mr = ms.len();
            let si = if mr >= 2 && ms[mr - 2] != 1 {
                ms[mr - 1]
            } else {
                0
            };
            let sj = usize::from(mr >= 1 && ms[mr - 1] != 1);
            (
                format!(", const {}* __restrict__ mask", storage(*mdt)),
                setup,
                format!(
                    "x += {};\n",
                    load(*mdt, &format!("mask[mo + (long long)i * {si} + j * {sj}]"))
                ),
                vec![scores, ArgRef::Buffer(ctx.kernel.inputs[3])],
            )
        }
    };
    let rows_per_block = 8;
    // Each lane keeps its `sk / 32` scores in registers: S is read once and written once.
    let per_lane = sk.div_ceil(32);
    let text = format!(
        "extern \"C\" __global__ void __launch_bounds__({threads}) RLX_FN({st}* __restrict__ s{mask_param}) {{\n\
         const int lane = threadIdx.x & 31;\n\
         const {ity} row = (long long)blockIdx.x * {rows_per_block} + (threadIdx.x >> 5);\n\
         if (row >= {rows}) return;\n\
         const float ninf = __int_as_float(0xff800000);\n\
         const {ity} bi = row / {sq};\n\
         const int i = (int)(row % {sq});\n\
         const {ity} base = row * {sk};\n\
         {mask_setup}\
         float v[{per_lane}];\n\
         float mx = ninf;\n\
         #pragma unroll\n\
         for (int c = 0; c < {per_lane}; ++c) {{\n\
         const int j = lane + 32 * c;\n\
         float x = ninf;\n\
         if (j < {sk}) {{\nx = {sload};\n{mask_term}}}\n\
         v[c] = x;\nmx = fmaxf(mx, x);\n}}\n\
         mx = rlx_warp_max(mx);\n\
         float sum = 0.0f;\n\
         #pragma unroll\n\
         for (int c = 0; c < {per_lane}; ++c) {{ v[c] = (mx == ninf) ? 0.0f : expf(v[c] - mx); sum += v[c]; }}\n\
         sum = rlx_warp_sum(sum);\n\
         const float inv = (mx == ninf) ? 0.0f : 1.0f / sum;\n\
         #pragma unroll\n\
         for (int c = 0; c < {per_lane}; ++c) {{ const int j = lane + 32 * c; if (j < {sk}) s[base + j] = {p}; }}\n\
         }}\n",
        threads = rows_per_block * 32,
        sload = load(*dtype, "s[base + j]"),
        p = store(*dtype, "v[c] * inv"),
    );
    let launch = Launch {
        grid: [
            rows.div_ceil(rows_per_block).clamp(1, i32::MAX as usize) as u32,
            1,
        ],
        block: (rows_per_block * 32) as u32,
        shared_bytes: 0,
    };
    finish(&ctx.kernel.name, "attn_softmax", text, launch, args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_and_operands_broadcast_over_batch_dims() {
        assert_eq!(batch_strides(&[2, 3, 4, 5], &[2, 3]), vec![60, 20]);
        assert_eq!(batch_strides(&[1, 3, 4, 5], &[2, 3]), vec![0, 20]);
        assert_eq!(batch_strides(&[4, 5], &[2, 3]), vec![0, 0]);
        assert_eq!(batch_strides(&[2, 1, 1, 5], &[2, 3]), vec![5, 0]);
    }
}
