//! Fused loop nests ([`LoopKernel`]) to CUDA C.
//!
//! Elementwise kernels run one thread per output element in a grid-stride loop; contiguous
//! (or row-broadcast) f16/bf16 chains move 16-byte vectors of 8 elements, two per thread
//! (`elementwise_wide`), other f32/f16/bf16 chains 4-wide vectors. Reductions
//! pick a shape by size: a thread per output row when rows are short, a warp per row for
//! medium rows, a block per row for long ones; partial results combine with warp shuffles
//! (and shared memory across warps). The prologue runs per reduction point, the epilogue
//! once per output element on the lane that stores it. Dims that every view walks
//! contiguously are merged first, which is the contiguous fast path.

use super::dialect::CudaC;
use super::dtype::{compute, storage, store};
use super::index::{index_type, IndexSpace};
use super::reduce::{combine, finish as finish_reduce, identity};
use super::vector::{elem_bytes, Wide};
use super::{finish, grid_for, params, ArgRef, EmittedKernel, Launch, Target};
use rlx_ir::kernel::LoopKernel;
use rlx_ir::render::{coords, emit_nodes, loop_spaces, offset, Operand};
use rlx_ir::DType;

const BLOCK: u32 = 256;

/// How a reduction is spread over threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceShape {
    /// one thread folds a whole row
    Thread,
    /// one warp per row
    Warp,
    /// one block per row
    Block,
}

/// Picks the reduction shape for `rows` rows of `len` points.
pub fn reduce_shape(rows: usize, len: usize, target: &Target) -> ReduceShape {
    if len <= 32 {
        ReduceShape::Thread
    } else if len <= 4096 || rows >= target.sm_count as usize * 16 {
        ReduceShape::Warp
    } else {
        ReduceShape::Block
    }
}

/// Emits a loop kernel. `restrict` is false when the output buffer is also read; `back`
/// asks an elementwise kernel to walk its elements back to front
/// ([`Target::walk_back_above`]; reductions ignore it, and [`EmittedKernel::walks_back`] says
/// which happened).
///
/// # Errors
/// The kernel breaks the IR contract, or uses an op on a dtype no rule accepts.
pub fn emit(
    k: &LoopKernel,
    target: &Target,
    restrict: bool,
    back: bool,
) -> Result<EmittedKernel, String> {
    k.verify()?;
    let n = k.numel();
    let r = k.reduce_numel();
    let (outer, inner) = loop_spaces(k);
    let mut dims = k.shape.clone();
    dims.extend(&k.reduce_shape);
    let views: Vec<(usize, &[usize], &[isize])> = k
        .inputs
        .iter()
        .map(|i| (i.view.offset, dims.as_slice(), i.view.strides.as_slice()))
        .collect();
    let ity = index_type(n.saturating_mul(r.max(1)), &views);
    let in_params: Vec<(&str, String)> = k
        .inputs
        .iter()
        .enumerate()
        .map(|(i, inp)| (storage(inp.dtype), format!("in{i}")))
        .collect();
    let ps = params(&in_params, (storage(k.out_dtype()), "out".into()), restrict);
    let mut args: Vec<ArgRef> = k.inputs.iter().map(|i| ArgRef::Buffer(i.buffer)).collect();
    args.push(ArgRef::Buffer(k.output));
    match &k.reduce {
        None if let Some(reads) = wide_reads(k, &outer) => {
            let text = elementwise_wide(k, &outer, &reads, ity, &ps, back)?;
            let per_block = BLOCK as usize * WIDE_PER_THREAD;
            let launch = Launch::linear(grid_for(n / WIDE, per_block), BLOCK);
            Ok(walking(finish(&k.name, "ew", text, launch, args), back))
        }
        None if let Some(reads) = vec4_reads(k, &outer) => {
            let text = elementwise_vec4(k, &outer, &reads, ity, &ps, back)?;
            let launch = Launch::linear(grid_for(n / 4, BLOCK as usize), BLOCK);
            Ok(walking(finish(&k.name, "ew", text, launch, args), back))
        }
        None => {
            let text = elementwise(k, &outer, ity, &ps, back)?;
            let launch = Launch::linear(grid_for(n, BLOCK as usize), BLOCK);
            Ok(walking(finish(&k.name, "ew", text, launch, args), back))
        }
        Some(_) => {
            let shape = reduce_shape(n, r, target);
            let text = reduction(k, &outer, &inner, ity, &ps, shape)?;
            let rows_per_block = match shape {
                ReduceShape::Thread => BLOCK as usize,
                ReduceShape::Warp => (BLOCK / 32) as usize,
                ReduceShape::Block => 1,
            };
            let launch = Launch::linear(grid_for(n, rows_per_block).min(1 << 20), BLOCK);
            Ok(finish(&k.name, "red", text, launch, args))
        }
    }
}

/// Marks an elementwise kernel emitted walking back to front (`back`) as such.
fn walking(mut e: EmittedKernel, back: bool) -> EmittedKernel {
    e.walks_back = back;
    if back {
        e.label += " [walks back to front]";
    }
    e
}

/// The head of a grid-stride loop binding `idx` to each of `0..n` in turn, one per thread and
/// pass; with `back` the first pass of block 0 takes the last index (`idx = n - 1 - w`).
fn index_loop(ity: &str, n: usize, back: bool) -> String {
    if back {
        format!(
            "for ({ity} w = blockIdx.x * {BLOCK} + threadIdx.x; w < {n}; w += gridDim.x * {BLOCK}) {{\n\
             const {ity} idx = {n} - 1 - w;\n"
        )
    } else {
        format!(
            "for ({ity} idx = blockIdx.x * {BLOCK} + threadIdx.x; idx < {n}; idx += gridDim.x * {BLOCK}) {{\n"
        )
    }
}

/// Base offsets of every input over the output coordinates `o*`.
fn base_offsets(k: &LoopKernel, outer: &IndexSpace, ity: &str) -> String {
    k.inputs
        .iter()
        .enumerate()
        .map(|(i, inp)| {
            format!(
                "const {ity} b{i} = {};\n",
                offset(&inp.view.offset.to_string(), "o", &outer.strides[i])
            )
        })
        .collect()
}

fn elementwise(
    k: &LoopKernel,
    outer: &IndexSpace,
    ity: &str,
    ps: &str,
    back: bool,
) -> Result<String, String> {
    let n = k.numel();
    let mut elem = |i: usize| Operand::Stored(format!("in{i}[b{i}]"));
    let body = emit_nodes(&CudaC, k, &k.needed(&[k.result]), "e", &mut elem, None)?;
    Ok(format!(
        "extern \"C\" __global__ void __launch_bounds__({BLOCK}) RLX_FN({ps}) {{\n\
         {}{}{}{}out[idx] = {};\n}}\n}}\n",
        index_loop(ity, n, back),
        coords(&CudaC, "idx", "o", &outer.dims, ity),
        base_offsets(k, outer, ity),
        body,
        store(k.out_dtype(), &format!("e{}", k.result)),
    ))
}

/// The 4-wide vector type of a storage dtype and its constructor: `float4` for f32 (16
/// bytes), `ushort4` for f16/bf16 (8 bytes); None for the others.
fn vec4_type(dtype: DType) -> Option<(&'static str, &'static str)> {
    match dtype {
        DType::F32 => Some(("float4", "make_float4")),
        DType::F16 | DType::BF16 => Some(("ushort4", "make_ushort4")),
        _ => None,
    }
}

/// How a vectorized elementwise kernel reads one input.
#[derive(Clone, Copy, PartialEq)]
enum VecRead {
    /// one scalar for every point
    Scalar,
    /// contiguous like the output: vector `idx`
    Full,
    /// a row repeated over the outer dim (e.g. a bias): vector `idx % (inner / 4)`
    Row,
}

/// How each input is read when the kernel can run [`elementwise_vec4`]: f32/f16/bf16
/// elementwise kernels over one merged dim, or two whose inner dim is a multiple of 4, whose
/// inputs are contiguous or rows repeated over the outer dim (at offsets that are multiples
/// of 4 elements, so vector-aligned) or broadcast scalars, with a multiple of 4 points.
fn vec4_reads(k: &LoopKernel, outer: &IndexSpace) -> Option<Vec<VecRead>> {
    vec4_type(k.out_dtype())?;
    vector_reads(k, outer, 4, |d| vec4_type(d).is_some())
}

/// How each input is read when `width` consecutive points go together: the shared rule of
/// [`vec4_reads`] and [`wide_reads`]. Elementwise kernels over one merged dim, or two whose
/// inner dim is a multiple of `width`, with a multiple of `width` (and at least 1024)
/// points, whose inputs pass `input_ok` and are contiguous, rows repeated over the outer dim
/// (at offsets that are multiples of `width`) or broadcast scalars.
fn vector_reads(
    k: &LoopKernel,
    outer: &IndexSpace,
    width: usize,
    input_ok: impl Fn(DType) -> bool,
) -> Option<Vec<VecRead>> {
    let n = k.numel();
    let dims = &outer.dims;
    let shape_ok = match dims.len() {
        1 => true,
        2 => dims[1].is_multiple_of(width),
        _ => false,
    };
    if k.reduce.is_some() || !shape_ok || !n.is_multiple_of(width) || n < 1024 {
        return None;
    }
    let inner = *dims.last()? as isize;
    k.inputs
        .iter()
        .zip(&outer.strides)
        .map(|(i, s)| {
            if !input_ok(i.dtype) {
                return None;
            }
            let aligned = i.view.offset.is_multiple_of(width);
            match s.as_slice() {
                [0] | [0, 0] => Some(VecRead::Scalar),
                [1] if aligned => Some(VecRead::Full),
                [o, 1] if *o == inner && aligned => Some(VecRead::Full),
                [0, 1] if aligned => Some(VecRead::Row),
                _ => None,
            }
        })
        .collect()
}

/// Four points per thread, read and written as 4-wide vectors (`float4`, or `ushort4` for
/// 16-bit floats); the expression body is emitted once per lane.
fn elementwise_vec4(
    k: &LoopKernel,
    outer: &IndexSpace,
    reads: &[VecRead],
    ity: &str,
    ps: &str,
    back: bool,
) -> Result<String, String> {
    let n4 = k.numel() / 4;
    let inner4 = outer.dims.last().copied().unwrap_or(4) / 4;
    let mut loads = String::new();
    for (i, inp) in k.inputs.iter().enumerate() {
        let at = match reads[i] {
            VecRead::Scalar => continue,
            VecRead::Full => "idx".to_string(),
            VecRead::Row => format!("idx % {inner4}"),
        };
        let (vt, _) = vec4_type(inp.dtype).ok_or("no 4-wide vector for an input dtype")?;
        loads += &format!(
            "const {vt} v{i} = reinterpret_cast<const {vt}*>(in{i} + {})[{at}];\n",
            inp.view.offset
        );
    }
    let need = k.needed(&[k.result]);
    let mut body = String::new();
    let lanes = ["x", "y", "z", "w"];
    for (l, c) in lanes.iter().enumerate() {
        let mut elem = |i: usize| {
            if reads[i] == VecRead::Scalar {
                Operand::Stored(format!("in{i}[{}]", k.inputs[i].view.offset))
            } else {
                Operand::Stored(format!("v{i}.{c}"))
            }
        };
        body += &emit_nodes(&CudaC, k, &need, &format!("e{l}_"), &mut elem, None)?;
    }
    let r = k.result;
    let out_dt = k.out_dtype();
    let (vt, make) = vec4_type(out_dt).ok_or("no 4-wide vector for the output dtype")?;
    let lane = |l: usize| store(out_dt, &format!("e{l}_{r}"));
    Ok(format!(
        "extern \"C\" __global__ void __launch_bounds__({BLOCK}) RLX_FN({ps}) {{\n\
         {}{loads}{body}reinterpret_cast<{vt}*>(out)[idx] = {make}({}, {}, {}, {});\n}}\n}}\n",
        index_loop(ity, n4, back),
        lane(0),
        lane(1),
        lane(2),
        lane(3)
    ))
}

/// Elements per vector of the wide path: 8 halves, 16 bytes.
const WIDE: usize = 8;
/// Vectors per thread (per grid-stride pass) of the wide path.
const WIDE_PER_THREAD: usize = 2;

/// How each input is read when the kernel can run [`elementwise_wide`]: the conditions of
/// [`vec4_reads`] with 8-element vectors (inner dim, point count and view offsets multiples
/// of 8), for kernels storing f16/bf16 (inputs may be f32, f16 or bf16).
fn wide_reads(k: &LoopKernel, outer: &IndexSpace) -> Option<Vec<VecRead>> {
    if !matches!(k.out_dtype(), DType::F16 | DType::BF16) {
        return None;
    }
    vector_reads(k, outer, WIDE, |d| elem_bytes(d).is_some())
}

/// Two 8-element vectors per thread per pass (`uint4` for f16/bf16, two `float4` for f32
/// inputs), vector `v` and `v + 256` of the block's span so that each load of a warp is
/// contiguous: every load of both vectors is issued before any arithmetic, and the stores
/// come last (the output may be an input, in place). With `back`, pass `w0` of the loop
/// handles vector `n8 - 1 - w0` (and the second vector 256 before it), so the blocks that run
/// first take the end of the tensor.
fn elementwise_wide(
    k: &LoopKernel,
    outer: &IndexSpace,
    reads: &[VecRead],
    ity: &str,
    ps: &str,
    back: bool,
) -> Result<String, String> {
    let n8 = k.numel() / WIDE;
    let inner8 = outer.dims.last().copied().unwrap_or(WIDE) / WIDE;
    let need = k.needed(&[k.result]);
    let out_dt = k.out_dtype();
    let ow = Wide::new(out_dt, WIDE).ok_or("no 8-wide vector for the output dtype")?;
    let mut loads = String::new();
    let mut body = String::new();
    let mut stores = String::new();
    for u in 0..WIDE_PER_THREAD {
        let guard = if u == 0 {
            String::new()
        } else {
            format!("if (h{u}) ")
        };
        for (i, inp) in k.inputs.iter().enumerate() {
            let at = match reads[i] {
                VecRead::Scalar => continue,
                VecRead::Full => format!("v{u} * {WIDE}"),
                VecRead::Row => format!("(v{u} % {inner8}) * {WIDE}"),
            };
            let w = Wide::new(inp.dtype, WIDE).ok_or("no 8-wide vector for an input dtype")?;
            let var = format!("a{u}_{i}");
            let ct = w.chunk_type();
            let text = w.load(
                &var,
                &format!("in{i}"),
                &format!("{} + {at}", inp.view.offset),
            );
            if u == 0 {
                loads += &text;
            } else {
                // Declared zero, loaded when the vector exists.
                let chunks = text.lines().count();
                for c in 0..chunks {
                    loads += &format!("{ct} {var}_{c} = {{}};\n");
                }
                loads += &format!(
                    "{guard}{{\n\
                     {}}}\n",
                    text.replace(&format!("const {ct} "), "")
                );
            }
        }
        let mut outs = Vec::new();
        for l in 0..WIDE {
            let mut elem = |i: usize| {
                if reads[i] == VecRead::Scalar {
                    Operand::Stored(format!("in{i}[{}]", k.inputs[i].view.offset))
                } else {
                    let w = Wide::new(k.inputs[i].dtype, WIDE).expect("checked above");
                    Operand::Stored(w.elem(&format!("a{u}_{i}"), l))
                }
            };
            body += &emit_nodes(&CudaC, k, &need, &format!("e{u}_{l}_"), &mut elem, None)?;
            outs.push(store(out_dt, &format!("e{u}_{l}_{}", k.result)));
        }
        let st = ow.store("out", &format!("v{u} * {WIDE}"), &outs);
        stores += &if u == 0 {
            st
        } else {
            format!(
                "{guard}{{\n\
                 {st}}}\n"
            )
        };
    }
    let span = BLOCK as usize * WIDE_PER_THREAD;
    let mut heads = String::new();
    if back {
        heads += &format!("const {ity} v0 = {n8} - 1 - w0;\n");
    }
    for u in 1..WIDE_PER_THREAD {
        let step = u * BLOCK as usize;
        heads += &if back {
            format!(
                "const bool h{u} = w0 + {step} < {n8};\n\
                 const {ity} v{u} = v0 - {step};\n"
            )
        } else {
            format!(
                "const {ity} v{u} = v0 + {step};\n\
                 const bool h{u} = v{u} < {n8};\n"
            )
        };
    }
    let w = if back { "w0" } else { "v0" };
    Ok(format!(
        "extern \"C\" __global__ void __launch_bounds__({BLOCK}) RLX_FN({ps}) {{\n\
         for ({ity} {w} = ({ity})blockIdx.x * {span} + threadIdx.x; {w} < {n8}; \
         {w} += ({ity})gridDim.x * {span}) {{\n\
         {heads}{loads}{body}{stores}}}\n}}\n"
    ))
}

fn reduction(
    k: &LoopKernel,
    outer: &IndexSpace,
    inner: &IndexSpace,
    ity: &str,
    ps: &str,
    shape: ReduceShape,
) -> Result<String, String> {
    let red = k.reduce.as_ref().expect("reduction kernel");
    let (n, r) = (k.numel(), k.reduce_numel());
    let acc_ty = compute(red.dtype);
    let pro = k.needed(&[red.value]);
    let epi_need = k.needed(&[k.result]);
    let mut pro_elem = |i: usize| {
        Operand::Stored(format!(
            "in{i}[b{i} + {}]",
            offset("0", "r", &inner.strides[i])
        ))
    };
    let prologue = emit_nodes(&CudaC, k, &pro, "e", &mut pro_elem, None)?;
    // Epilogue: masked nodes plus the prologue-free values they need (at reduction point 0).
    let mut epi_elem = |i: usize| Operand::Stored(format!("in{i}[b{i}]"));
    let epilogue = emit_nodes(&CudaC, k, &epi_need, "f", &mut epi_elem, Some("rlx_red"))?;
    let ident = identity(red.op, red.dtype);
    let comb = combine(red.op, red.dtype, "acc", "v");
    let comb_shfl = combine(red.op, red.dtype, "acc", "rlx_shfl_xor(acc, s)");
    let value = format!("e{}", red.value);
    let done = finish_reduce(red.op, red.dtype, "acc", r);
    let stored = store(k.out_dtype(), &format!("f{}", k.result));
    let (row_start, row_step, lane_start, lane_step) = match shape {
        ReduceShape::Thread => (
            "blockIdx.x * 256 + threadIdx.x".to_string(),
            "gridDim.x * 256".to_string(),
            "0",
            "1",
        ),
        ReduceShape::Warp => (
            "blockIdx.x * 8 + (threadIdx.x >> 5)".to_string(),
            "gridDim.x * 8".to_string(),
            "(threadIdx.x & 31)",
            "32",
        ),
        ReduceShape::Block => (
            "blockIdx.x".to_string(),
            "gridDim.x".to_string(),
            "threadIdx.x",
            "256",
        ),
    };
    let combine_lanes = match shape {
        ReduceShape::Thread => String::new(),
        ReduceShape::Warp => format!("for (int s = 16; s > 0; s >>= 1) acc = {comb_shfl};\n"),
        ReduceShape::Block => format!(
            "for (int s = 16; s > 0; s >>= 1) acc = {comb_shfl};\n\
             if ((threadIdx.x & 31) == 0) rlx_sh[threadIdx.x >> 5] = acc;\n\
             __syncthreads();\n\
             acc = threadIdx.x < 8 ? rlx_sh[threadIdx.x] : ({acc_ty}){ident};\n\
             if (threadIdx.x < 32) {{ for (int s = 4; s > 0; s >>= 1) acc = {comb_shfl}; }}\n\
             __syncthreads();\n"
        ),
    };
    let shared = if shape == ReduceShape::Block {
        format!("__shared__ {acc_ty} rlx_sh[8];\n")
    } else {
        String::new()
    };
    let writer = match shape {
        ReduceShape::Thread => "true",
        ReduceShape::Warp => "(threadIdx.x & 31) == 0",
        ReduceShape::Block => "threadIdx.x == 0",
    };
    Ok(format!(
        "extern \"C\" __global__ void __launch_bounds__({BLOCK}) RLX_FN({ps}) {{\n{shared}\
         for ({ity} row = {row_start}; row < {n}; row += {row_step}) {{\n\
         {coords_o}{bases}\
         {acc_ty} acc = {ident};\n\
         for ({ity} ri = {lane_start}; ri < {r}; ri += {lane_step}) {{\n\
         {coords_r}{prologue}const {acc_ty} v = {value};\nacc = {comb};\n}}\n\
         {combine_lanes}\
         if ({writer}) {{\nconst {acc_ty} rlx_red = {done};\n{epilogue}out[row] = {stored};\n}}\n}}\n}}\n",
        coords_o = coords(&CudaC, "row", "o", &outer.dims, ity),
        bases = base_offsets(k, outer, ity),
        coords_r = coords(&CudaC, "ri", "r", &inner.dims, ity),
    ))
}
