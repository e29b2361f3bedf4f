//! Fused scaled dot-product attention, flash style: a block takes a tile of query rows of
//! one batch entry and streams key/value tiles through shared memory, keeping a running
//! max, sum and output per row (online softmax), so the sq x sk score matrix never exists in
//! device memory. Each lane scores one key of the tile; each lane owns `dv / 32` output
//! columns. Head sizes up to 256; causal or additive masks; explicit or default scale.
//! Q, K, V and the result are addressed through [`Layouts`], so the planner can point them at
//! a `[batch, seq, heads, dim]` buffer in place of a transposed copy.

use super::dtype::{load, storage, store};
use super::index::{contiguous, coords};
use super::store::{numel, LibCtx};
use super::{finish, ArgRef, EmittedKernel, Launch};
use rlx_ir::AttnMask;

/// Keys per tile: one per lane.
const KT: usize = 32;
/// Warps per block.
const WARPS: usize = 4;

/// Largest head size the kernel takes.
pub const MAX_HEAD: usize = 256;

/// Strides of operand `shape` (same rank as `out_batch` + 2, or lower for masks: aligned
/// right) over the output batch dims, 0 where it broadcasts.
fn batch_strides(shape: &[usize], out_batch: &[usize]) -> Vec<isize> {
    let own = contiguous(shape);
    let lead = (out_batch.len() + 2).saturating_sub(shape.len());
    (0..out_batch.len())
        .map(|d| {
            if d < lead || shape[d - lead] == 1 {
                0
            } else {
                own[d - lead]
            }
        })
        .collect()
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

    /// `const long long {name} = offset + Σ bc_d * batch_d;` over the batch coordinates.
    fn batch_offset(&self, name: &str) -> String {
        let mut s = format!("const long long {name} = {}", self.offset);
        for (i, x) in self.batch.iter().enumerate() {
            if *x != 0 {
                s += &format!(" + bc{i} * {x}");
            }
        }
        s + ";
"
    }

    /// The element address of (`row`, `col`) after `base`.
    fn at(&self, base: &str, row: &str, col: &str) -> String {
        let term = |v: &str, s: isize| match s {
            0 => String::new(),
            1 => format!(" + (long long)({v})"),
            _ => format!(" + (long long)({v}) * {s}"),
        };
        format!("{base}{}{}", term(row, self.row), term(col, self.col))
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
    let mut batch_offsets = coords("bi", "bc", out_batch, ity)
        + &layouts.q.batch_offset("qo")
        + &layouts.k.batch_offset("ko")
        + &layouts.v.batch_offset("vo")
        + &layouts.out.batch_offset("oo");
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
            layouts.out.at("oo", "i", "c"),
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
        qload = load(*dtype, &format!("in0[{}]", layouts.q.at("qo", "row", &format!("t % {d}")))),
        kload = load(*dtype, &format!("in1[{}]", layouts.k.at("ko", "j", &format!("t % {d}")))),
        vload = load(*dtype, &format!("in2[{}]", layouts.v.at("vo", "j", &format!("t % {dv}")))),
        scale = scale as f32,
    );
    let launch = Launch {
        grid: [(batch * q_tiles).clamp(1, i32::MAX as usize) as u32, 1],
        block: (WARPS * 32) as u32,
        shared_bytes: (shared_floats * 4) as u32,
    };
    Ok(finish(&ctx.kernel.name, "attention", text, launch, args))
}

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
            let mut setup = coords("bi", "bc", out_batch, ity);
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
