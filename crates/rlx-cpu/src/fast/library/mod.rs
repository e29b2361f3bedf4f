//! Library kernels: matmul, convolution, pooling, normalizations, attention and data
//! movement, each with a specialised implementation where one pays (f32, or any dtype for
//! byte-level data movement) and the interpreter's `eval_op` otherwise. A fused epilogue
//! runs after the op, in place on the result when it reads the result point for point.

pub(crate) mod amx_gemm;
mod attention;
mod conv;
mod data;
mod int_conv;
mod int_matmul;
pub(crate) mod matmul;
mod norm;
pub(crate) mod packed_gemm;
mod packed_weight;

use super::loops::exec::{self, Src};
use super::loops::LoopExec;
use super::lower::lower;
use super::memory::{Data, DataMut, RunMemory};
use crate::CpuError;
use attention::{AttnPlan, Operand};
use conv::{ConvPlan, PoolPlan};
use data::{ConcatPlan, GatherPlan, PadPlan};
use matmul::MatMulPlan;
use packed_gemm::PackedRhs;
use rlx_interp::eval_op;
use rlx_interp::index::broadcast_map;
use rlx_ir::kernel::{BufferId, LibraryKernel};
use rlx_ir::{ArgOp, DType, Op, PoolKind, Tensor};
use rlx_opt::kernel_passes::elide_views::{AttentionViews, StridedView};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// How a library op runs.
#[derive(Debug)]
enum Impl {
    MatMulF32(MatMulPlan),
    MatMulF64(MatMulPlan),
    /// f16/bf16 operands converted to f32 scratch (regions 0, 1, 2: a, b, c)
    MatMulViaF32(MatMulPlan),
    /// `[.., k] x weight[k, n]` with the weight packed once (`packed_gemm`); f16/bf16
    /// activations go through f32 scratch (regions 0 and 1: a, c)
    MatMulPacked(PackedMatMul),
    Conv(ConvPlan),
    Pool(PoolPlan),
    GlobalPool(PoolKind, usize),
    Softmax {
        n: usize,
        inner: usize,
        log: bool,
    },
    /// layer norm (with bias) or RMS norm; broadcast maps expand scale/bias to the row
    Norm {
        eps: f32,
        len: usize,
        layer: bool,
        maps: Vec<Option<Vec<usize>>>,
    },
    Attention(AttnPlan),
    /// f16/bf16 attention computed in f32: operands widened into scratch (regions 1..:
    /// q, k, v, the mask if any, then the result), the result rounded back
    AttentionViaF32(AttnPlan),
    /// the integer GEMM (`fast/int_gemm/`), its weight packed once
    IntMatMul(int_matmul::IntMatMulPlan),
    /// im2col patches times the weight packed once, on the integer GEMM (scratch region 0:
    /// one image and group's i32 sums, for a requantized op)
    IntConv(int_conv::IntConvPlan),
    /// packed weights: dotted in registers or dequantized per tile (`fast/quant/`)
    Quant(crate::fast::quant::QuantPlan),
    Gather(GatherPlan),
    Concat(ConcatPlan),
    Pad(PadPlan),
    ArgReduce {
        op: ArgOp,
        n: usize,
        inner: usize,
    },
    Loop(LoopExec),
    Constant(Arc<Tensor>),
    /// the interpreter, on host copies of the operands
    Interpreted,
}

/// Where a matmul's right operand comes from, when it is a weight.
#[derive(Debug, Clone)]
pub(crate) enum WeightSource {
    /// a param bound per run by name
    Param(String),
    /// a constant of the program
    Constant(Arc<Tensor>),
}

/// A matmul whose right operand is a packed weight.
#[derive(Debug)]
struct PackedMatMul {
    /// the unpacked product, for a weight seen for the first time
    plan: MatMulPlan,
    rows: usize,
    k: usize,
    n: usize,
    threads: usize,
    /// the packing is in f32 but the operands are not (scratch regions 0, 1, 2: a, c, and
    /// b for an unpacked run)
    via_f32: bool,
    /// bf16 operands and result on AMX tiles (`amx_gemm`), packed for them
    amx: bool,
    source: WeightSource,
    /// the weight tensor last bound (kept alive, so pointer identity is sound) and its
    /// packing once it has been bound for a second run
    cache: Mutex<Option<Bound>>,
}

/// A weight tensor as last bound, and its packing once it has one.
type Bound = (Arc<Tensor>, Option<Arc<Packing>>);

/// A packed weight: f32 panels for the AVX2 tiles, or bf16 pair panels for AMX.
#[derive(Debug)]
enum Packing {
    F32(PackedRhs),
    Amx(amx_gemm::AmxRhs),
}

impl PackedMatMul {
    /// The packing of the weight bound now (`b` is its data), or None for a param seen for
    /// the first time: a param is packed when the same tensor is bound for a second run
    /// (so a param re-bound every run never pays a packing), a constant at once.
    fn packed(
        &self,
        params: &HashMap<String, Arc<Tensor>>,
        b: Data<'_>,
    ) -> Result<Option<Arc<Packing>>, CpuError> {
        let bound = match &self.source {
            WeightSource::Constant(t) => t,
            WeightSource::Param(name) => params.get(name).ok_or_else(|| CpuError::Missing {
                kind: "param",
                name: name.clone(),
            })?,
        };
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let seen = matches!(&*cache, Some((t, _)) if Arc::ptr_eq(t, bound));
        if seen || matches!(self.source, WeightSource::Constant(_)) {
            if let Some((_, Some(p))) = &*cache {
                return Ok(Some(p.clone()));
            }
            let p = Arc::new(if self.amx {
                Packing::Amx(amx_gemm::AmxRhs::pack(b, self.k, self.n))
            } else {
                Packing::F32(PackedRhs::pack(b, self.k, self.n))
            });
            *cache = Some((bound.clone(), Some(p.clone())));
            return Ok(Some(p));
        }
        *cache = Some((bound.clone(), None));
        Ok(None)
    }
}

#[derive(Debug)]
struct Epilogue {
    exec: LoopExec,
    /// scratch region holding the op result when the epilogue cannot run in place
    result_region: Option<usize>,
    /// reads the (widened) result at the output position only, without a reduction: a
    /// packed product may run it block by block
    blocks: bool,
}

/// `e` reading its op result (input 0, f16/bf16) as f32, when every read of it is a cast to
/// f32 (so the epilogue computes the same values from an unrounded f32 result, only closer
/// to the exact product); None otherwise.
fn widened_epilogue(e: &rlx_ir::kernel::LoopKernel) -> Option<rlx_ir::kernel::LoopKernel> {
    use rlx_ir::kernel::Expr;
    if !matches!(e.inputs.first()?.dtype, DType::F16 | DType::BF16) {
        return None;
    }
    let loads: Vec<usize> = (0..e.body.len())
        .filter(|&i| e.body[i].expr == Expr::Load(0))
        .collect();
    let widened = loads.iter().all(|&l| {
        e.body
            .iter()
            .filter(|n| n.expr.operands().contains(&l))
            .all(|n| matches!(n.expr, Expr::Cast(_)) && n.dtype == DType::F32)
    });
    if loads.is_empty() || !widened || loads.contains(&e.result) {
        return None;
    }
    let mut wide = e.clone();
    wide.inputs[0].dtype = DType::F32;
    for l in loads {
        wide.body[l].dtype = DType::F32;
    }
    Some(wide)
}

/// A compiled library kernel.
#[derive(Debug)]
pub(crate) struct LibExec {
    pub name: String,
    op: Op,
    inputs: Vec<BufferId>,
    in_types: Vec<(DType, Vec<usize>)>,
    result: (DType, Vec<usize>),
    imp: Impl,
    epilogue: Option<Epilogue>,
    /// extra epilogue inputs (epilogue inputs 1..)
    epi_inputs: Vec<BufferId>,
    /// the buffer written (attention's result view, when it has one)
    pub output: BufferId,
    /// scratch regions: byte offset within the kernel's scratch block, elements, dtype
    regions: Vec<(usize, usize, DType)>,
    /// bytes of scratch this kernel needs
    pub scratch_bytes: usize,
}

impl LibExec {
    /// Compiles a checked library kernel whose operands have `in_types` and whose op result
    /// is `result`; `weight` says where a matmul's right operand comes from when it is a
    /// param or a constant; `exact_quant` keeps quantized matmuls in f32
    /// ([`crate::CpuOptions::exact_quant`]).
    pub fn compile(
        l: &LibraryKernel,
        in_types: Vec<(DType, Vec<usize>)>,
        result: (DType, Vec<usize>),
        threads: usize,
        exact_quant: bool,
        weight: Option<WeightSource>,
        views: Option<&AttentionViews>,
    ) -> LibExec {
        let mut regions = Vec::new();
        let mut scratch_bytes = 0;
        let mut region = |len: usize, dtype: DType| {
            regions.push((scratch_bytes, len, dtype));
            scratch_bytes += (len * dtype.size_bytes()).div_ceil(64) * 64;
            regions.len() - 1
        };
        let shape = |i: usize| in_types[i].1.as_slice();
        let all_f32 = in_types.iter().all(|t| t.0 == DType::F32) && result.0 == DType::F32;
        let out = result.1.as_slice();
        let imp = match &l.op {
            Op::MatMul => {
                let plan = MatMulPlan::new(shape(0), shape(1), out, threads);
                // a few rows (a decode step, a single vector) reuse a packed panel too little
                // to pay for the copy; the gemm crate reads such weights as they are
                let rows = plan.m * plan.a_off.len();
                let packable = matches!(result.0, DType::F32 | DType::F16 | DType::BF16)
                    && in_types.iter().all(|t| t.0 == result.0)
                    && plan.fold
                    && rows >= packed_gemm::MIN_ROWS
                    && packed_gemm::supported();
                match (result.0, weight.filter(|_| packable)) {
                    (dtype, Some(source)) => {
                        let via_f32 = dtype != DType::F32;
                        if via_f32 {
                            region(rows * plan.k, DType::F32);
                            region(rows * plan.n, DType::F32);
                            region(plan.k * plan.n, DType::F32);
                        }
                        Impl::MatMulPacked(PackedMatMul {
                            rows,
                            k: plan.k,
                            n: plan.n,
                            threads,
                            via_f32,
                            amx: dtype == DType::BF16 && amx_gemm::available(),
                            source,
                            cache: Mutex::new(None),
                            plan,
                        })
                    }
                    (DType::F32, None) => Impl::MatMulF32(plan),
                    (DType::F64, None) => Impl::MatMulF64(plan),
                    (DType::F16 | DType::BF16, None) => {
                        region(shape(0).iter().product(), DType::F32);
                        region(shape(1).iter().product(), DType::F32);
                        region(out.iter().product(), DType::F32);
                        Impl::MatMulViaF32(plan)
                    }
                    _ => Impl::Interpreted,
                }
            }
            Op::Conv2d(p) if all_f32 => {
                let plan = ConvPlan::new(*p, shape(0), shape(1), out, threads);
                region(plan.scratch_len(), DType::F32);
                Impl::Conv(plan)
            }
            Op::Pool2d(p) if all_f32 => Impl::Pool(PoolPlan::new(*p, shape(0), out)),
            Op::GlobalPool(k) if all_f32 => Impl::GlobalPool(*k, shape(0)[2..].iter().product()),
            Op::Softmax { axis } | Op::LogSoftmax { axis } if all_f32 => Impl::Softmax {
                n: shape(0)[*axis],
                inner: shape(0)[axis + 1..].iter().product(),
                log: matches!(l.op, Op::LogSoftmax { .. }),
            },
            Op::LayerNorm { axis, eps } | Op::RmsNorm { axis, eps } if all_f32 => {
                let norm = &shape(0)[*axis..];
                let maps = (1..in_types.len())
                    .map(|i| (shape(i) != norm).then(|| broadcast_map(shape(i), norm)))
                    .collect();
                Impl::Norm {
                    eps: *eps as f32,
                    len: norm.iter().product(),
                    layer: matches!(l.op, Op::LayerNorm { .. }),
                    maps,
                }
            }
            Op::Attention { mask, scale } if all_f32 => {
                let shapes: Vec<&[usize]> = (0..in_types.len()).map(shape).collect();
                let batch = &out[..out.len() - 2];
                // the analysis gives non-negative strides only
                let operand = |v: &Option<StridedView>, shape: &[usize]| {
                    v.as_ref().map(|v| {
                        let strides: Vec<usize> =
                            v.strides.iter().map(|s| s.unsigned_abs()).collect();
                        Operand::strided(shape, v.offset, &strides, batch)
                    })
                };
                let operands = match views {
                    Some(v) => [
                        operand(&v.inputs[0], shapes[0]),
                        operand(&v.inputs[1], shapes[1]),
                        operand(&v.inputs[2], shapes[2]),
                        operand(&v.output, out),
                    ],
                    None => [None, None, None, None],
                };
                let plan = AttnPlan::new(*mask, *scale, &shapes, out, operands, threads);
                region(plan.scratch_len(), DType::F32);
                Impl::Attention(plan)
            }
            Op::Attention { mask, scale }
                if in_types
                    .iter()
                    .chain([&result])
                    .all(|t| matches!(t.0, DType::F16 | DType::BF16)) =>
            {
                let shapes: Vec<&[usize]> = (0..in_types.len()).map(shape).collect();
                let plan = AttnPlan::new(
                    *mask,
                    *scale,
                    &shapes,
                    out,
                    [None, None, None, None],
                    threads,
                );
                region(plan.scratch_len(), DType::F32);
                for s in &shapes {
                    region(s.iter().product(), DType::F32);
                }
                region(out.iter().product(), DType::F32);
                Impl::AttentionViaF32(plan)
            }
            Op::QuantMatMul {
                format,
                n,
                k,
                int8_activations,
            } => Impl::Quant(crate::fast::quant::QuantPlan::new(
                *format,
                *n,
                *k,
                shape(0).iter().product(),
                threads,
                exact_quant || !int8_activations,
            )),
            Op::MatMulInteger(p) => {
                let b = shape(1);
                Impl::IntMatMul(int_matmul::IntMatMulPlan::new(
                    *p,
                    shape(0).iter().product(),
                    b[0],
                    b[1],
                    threads,
                    weight,
                ))
            }
            Op::ConvInteger(p) => {
                let plan = int_conv::IntConvPlan::new(*p, shape(0), shape(1), out, threads, weight);
                if p.requantize {
                    region(plan.scratch_len(), DType::I32);
                }
                Impl::IntConv(plan)
            }
            Op::Gather { axis } => {
                Impl::Gather(GatherPlan::new(*axis, shape(0), result.0.size_bytes()))
            }
            Op::Concat { axis } => {
                let shapes: Vec<&[usize]> = (0..in_types.len()).map(shape).collect();
                Impl::Concat(ConcatPlan::new(*axis, &shapes, result.0.size_bytes()))
            }
            Op::Pad { pads, mode } => Impl::Pad(PadPlan::new(pads, *mode, result.0, shape(0), out)),
            Op::ArgReduce { op, axis, .. } if in_types[0].0 == DType::F32 => Impl::ArgReduce {
                op: *op,
                n: shape(0)[*axis],
                inner: shape(0)[axis + 1..].iter().product(),
            },
            Op::Constant(t) => Impl::Constant(t.clone()),
            op => match lower(&l.name, op, &in_types, &result) {
                Some(k) => Impl::Loop(LoopExec::compile(&k, threads)),
                None => Impl::Interpreted,
            },
        };
        let amx = matches!(&imp, Impl::MatMulPacked(p) if p.amx);
        let epilogue = l.epilogue.as_ref().map(|e| {
            // An AMX product whose epilogue widens it to f32 first hands over its f32
            // accumulators instead of rounding them to bf16 and widening them back.
            if let Some(wide) = amx.then(|| widened_epilogue(e)).flatten() {
                return Epilogue {
                    exec: LoopExec::compile(&wide, threads),
                    result_region: Some(region(result.1.iter().product(), DType::F32)),
                    blocks: LoopExec::input0_is_identity(e) && e.reduce.is_none(),
                };
            }
            let in_place = LoopExec::input0_is_identity(e) && e.out_dtype() == result.0;
            Epilogue {
                exec: LoopExec::compile(e, threads),
                result_region: (!in_place).then(|| region(result.1.iter().product(), result.0)),
                blocks: in_place && e.reduce.is_none(),
            }
        });
        // attention through views reads their buffers and writes the result's
        let mut inputs = l.inputs.clone();
        let mut output = l.output;
        if let Some(v) = views {
            for (slot, view) in v.inputs.iter().enumerate() {
                if let Some(view) = view {
                    inputs[slot] = view.buffer;
                }
            }
            if let Some(view) = &v.output {
                output = view.buffer;
            }
        }
        LibExec {
            name: l.name.clone(),
            op: l.op.clone(),
            inputs,
            in_types,
            result,
            imp,
            epi_inputs: l
                .epilogue
                .as_ref()
                .map(|e| e.inputs[1..].iter().map(|i| i.buffer).collect())
                .unwrap_or_default(),
            epilogue,
            output,
            regions,
            scratch_bytes,
        }
    }

    /// The buffers the kernel reads: its operands (through their views) and the extra
    /// epilogue inputs.
    pub fn reads(&self) -> Vec<BufferId> {
        self.inputs
            .iter()
            .chain(&self.epi_inputs)
            .copied()
            .collect()
    }

    /// True when the op runs on the interpreter (no specialised implementation).
    pub fn interpreted(&self) -> bool {
        matches!(self.imp, Impl::Interpreted)
    }

    /// Runs the kernel; `scratch` is the byte offset of its scratch block in the arena,
    /// `params` the params bound for this run.
    pub fn run(
        &self,
        mem: &RunMemory<'_>,
        scratch: usize,
        params: &HashMap<String, Arc<Tensor>>,
    ) -> Result<(), CpuError> {
        // SAFETY (all views below): the inputs, the output, and the scratch regions are
        // pairwise disjoint storage (see `memory`), and each view is dropped before another
        // view of the same storage is created.
        let region = |i: usize| {
            let (off, len, dtype) = self.regions[i];
            unsafe { mem.scratch(scratch + off, len, dtype) }
        };
        let ins: Vec<Data<'_>> = self
            .inputs
            .iter()
            .map(|&b| unsafe { mem.data(b) })
            .collect();
        // a packed weight's packing, looked up once per run (the first sighting of a param
        // runs unpacked, see `PackedMatMul::packed`)
        let packing = match &self.imp {
            Impl::MatMulPacked(p) => Some(p.packed(params, ins[1])?),
            _ => None,
        };
        if self.run_blocks(mem, &ins, packing.clone().flatten()) {
            return Ok(());
        }
        let result_region = self.epilogue.as_ref().and_then(|e| e.result_region);
        let dst = match result_region {
            Some(r) => region(r),
            None => unsafe { mem.data_mut(self.output) },
        };
        match &self.imp {
            Impl::IntMatMul(p) => p.run(&ins, dst, params)?,
            Impl::IntConv(p) => {
                let sums = matches!(self.op, Op::ConvInteger(c) if c.requantize).then(|| region(0));
                p.run(&ins, dst, sums, params)?
            }
            _ => self.compute(&ins, dst, &region, packing)?,
        }
        if let Some(e) = &self.epilogue {
            let mut srcs = vec![match result_region {
                Some(r) => Src::Buf(region(r).into_data()),
                None => Src::InPlace,
            }];
            srcs.extend(
                self.epi_inputs
                    .iter()
                    .map(|&b| Src::Buf(unsafe { mem.data(b) })),
            );
            exec::run(&e.exec, &srcs, unsafe { mem.data_mut(self.output) });
        }
        Ok(())
    }

    /// A packed product whose epilogue reads its result at the output position
    /// (`Epilogue::blocks`): each task's rows go through the epilogue as soon as they are
    /// written, still in cache, instead of a second pass over the whole result — in place
    /// for f32, from the unrounded accumulators for an AMX product whose epilogue widens it.
    /// False when this kernel is not one, or the product splits by columns (the caller then
    /// runs it whole).
    fn run_blocks(
        &self,
        mem: &RunMemory<'_>,
        ins: &[Data<'_>],
        packing: Option<Arc<Packing>>,
    ) -> bool {
        let (Impl::MatMulPacked(p), Some(e), Some(w)) = (&self.imp, &self.epilogue, packing) else {
            return false;
        };
        if !e.blocks {
            return false;
        }
        // SAFETY: the extra inputs are other buffers than the output, read only here.
        let extra: Vec<Src<'_>> = self
            .epi_inputs
            .iter()
            .map(|&b| Src::Buf(unsafe { mem.data(b) }))
            .collect();
        let epilogue = |input0: Src<'_>, out: DataMut<'_>, start: usize| {
            let mut srcs = Vec::with_capacity(1 + extra.len());
            srcs.push(input0);
            srcs.extend(extra.iter().copied());
            exec::run_points(&e.exec, &srcs, out, start);
        };
        match (&*w, ins[0]) {
            // the widened epilogue: the f32 result goes to a region, not in place
            (Packing::Amx(w), Data::BF16(a)) if e.result_region.is_some() => {
                let finish = |r0: usize, rows: &mut [f32]| {
                    let start = r0 * p.n;
                    // SAFETY: tasks finish disjoint row blocks, so their output ranges are
                    // disjoint.
                    let out = unsafe { mem.data_mut_range(self.output, start, rows.len()) };
                    epilogue(Src::Buf(Data::F32(rows)), out, start);
                };
                amx_gemm::gemm_blocks(p.rows, a, w, p.threads, &finish)
            }
            (Packing::F32(w), Data::F32(a)) if !p.via_f32 && e.result_region.is_none() => {
                let finish = |r0: usize, rows: &mut [f32]| {
                    epilogue(Src::InPlace, DataMut::F32(rows), r0 * p.n);
                };
                // SAFETY: the output is written by this kernel alone; the view lives for the
                // call.
                let Some(c) = (unsafe { mem.data_mut(self.output) }).f32() else {
                    return false;
                };
                packed_gemm::gemm_packed_rows(p.rows, a, w, c, p.threads, &finish)
            }
            _ => false,
        }
    }

    /// Runs the op into `dst`; `packing` is a packed product's weight packing for this run
    /// (None inside: its weight runs unpacked).
    fn compute<'m>(
        &self,
        ins: &[Data<'_>],
        dst: DataMut<'_>,
        region: &dyn Fn(usize) -> DataMut<'m>,
        packing: Option<Option<Arc<Packing>>>,
    ) -> Result<(), CpuError> {
        let f = |i: usize| ins[i].f32().expect("compiled for f32 operands");
        let scratch_f32 = |i: usize| region(i).f32().expect("f32 scratch");
        match &self.imp {
            Impl::MatMulF32(p) => p.run_f32(f(0), f(1), dst.f32().unwrap()),
            Impl::MatMulF64(p) => match (ins[0], ins[1], dst) {
                (Data::F64(a), Data::F64(b), DataMut::F64(c)) => p.run(a, b, c, 1.0),
                _ => unreachable!("compiled for f64 operands"),
            },
            Impl::MatMulPacked(p) => match (packing.flatten(), p.via_f32) {
                (Some(w), via_f32) if matches!(*w, Packing::Amx(_)) => {
                    let (Packing::Amx(w), Data::BF16(a)) = (&*w, ins[0]) else {
                        unreachable!("AMX packing for bf16 operands only (via f32: {via_f32})")
                    };
                    let out = match dst {
                        DataMut::BF16(c) => amx_gemm::Out::Bf16(c),
                        // the epilogue reads the unrounded result (`widened_epilogue`)
                        DataMut::F32(c) => amx_gemm::Out::F32(c),
                        _ => unreachable!("AMX results are bf16, or f32 for an epilogue"),
                    };
                    amx_gemm::gemm(p.rows, a, w, out, p.threads);
                }
                (Some(w), false) => {
                    let Packing::F32(w) = &*w else {
                        unreachable!("f32 packing")
                    };
                    packed_gemm::gemm_packed(p.rows, f(0), w, dst.f32().unwrap(), p.threads)
                }
                (Some(w), true) => {
                    let Packing::F32(w) = &*w else {
                        unreachable!("f32 packing")
                    };
                    let (a, c) = (scratch_f32(0), scratch_f32(1));
                    ins[0].load_f32(a);
                    packed_gemm::gemm_packed(p.rows, a, w, c, p.threads);
                    dst.store_f32(c);
                }
                (None, false) => p.plan.run(f(0), f(1), dst.f32().unwrap(), 1.0),
                (None, true) => {
                    let (a, c, b) = (scratch_f32(0), scratch_f32(1), scratch_f32(2));
                    ins[0].load_f32(a);
                    ins[1].load_f32(b);
                    p.plan.run(a, b, c, 1.0);
                    dst.store_f32(c);
                }
            },
            Impl::MatMulViaF32(p) => {
                let (a, b, c) = (scratch_f32(0), scratch_f32(1), scratch_f32(2));
                ins[0].load_f32(a);
                ins[1].load_f32(b);
                p.run(a, b, c, 1.0);
                dst.store_f32(c);
            }
            Impl::Conv(p) => {
                let bias = ins.get(2).map(|b| b.f32().unwrap());
                p.run(f(0), f(1), bias, dst.f32().unwrap(), scratch_f32(0));
            }
            Impl::Pool(p) => p.run(f(0), dst.f32().unwrap()),
            Impl::GlobalPool(k, len) => conv::global_pool(*k, *len, f(0), dst.f32().unwrap()),
            Impl::Softmax { n, inner, log } => {
                norm::softmax(f(0), dst.f32().unwrap(), *n, *inner, *log)
            }
            Impl::Norm {
                eps,
                len,
                layer,
                maps,
            } => {
                let expand = |i: usize| -> std::borrow::Cow<'_, [f32]> {
                    match &maps[i - 1] {
                        Some(m) => m.iter().map(|&j| f(i)[j]).collect::<Vec<_>>().into(),
                        None => f(i).into(),
                    }
                };
                let scale = expand(1);
                let bias = layer.then(|| expand(2));
                debug_assert_eq!(scale.len(), *len);
                norm::norm_rows(f(0), dst.f32().unwrap(), &scale, bias.as_deref(), *eps);
            }
            Impl::Attention(p) => {
                let mask = ins.get(3).map(|m| m.f32().unwrap());
                p.run(f(0), f(1), f(2), mask, dst.f32().unwrap(), scratch_f32(0));
            }
            Impl::AttentionViaF32(p) => {
                let wide: Vec<&mut [f32]> = (0..ins.len())
                    .map(|i| {
                        let w = scratch_f32(1 + i);
                        ins[i].load_f32(w);
                        w
                    })
                    .collect();
                let c = scratch_f32(1 + ins.len());
                let mask = wide.get(3).map(|m| &**m);
                p.run(&*wide[0], &*wide[1], &*wide[2], mask, c, scratch_f32(0));
                dst.store_f32(c);
            }
            Impl::Quant(p) => p.run(f(0), ins[1].bytes(), dst.f32().unwrap()),
            Impl::IntMatMul(_) | Impl::IntConv(_) => {
                unreachable!("run by `LibExec::run` (it needs the params)")
            }
            Impl::Gather(p) => p.run(ins[0].bytes(), ins[1], dst.bytes())?,
            Impl::Concat(p) => {
                let srcs: Vec<&[u8]> = ins.iter().map(|d| d.bytes()).collect();
                p.run(&srcs, dst.bytes());
            }
            Impl::Pad(p) => p.run(ins[0].bytes(), dst.bytes()),
            Impl::ArgReduce { op, n, inner } => match dst {
                DataMut::I64(o) => norm::arg_reduce(*op, f(0), o, *n, *inner),
                _ => unreachable!("arg reductions give i64"),
            },
            Impl::Loop(e) => {
                let srcs: Vec<Src<'_>> = ins.iter().map(|&d| Src::Buf(d)).collect();
                exec::run(e, &srcs, dst);
            }
            Impl::Constant(t) => dst.write(t.data()),
            Impl::Interpreted => {
                let tensors: Vec<Tensor> = ins
                    .iter()
                    .zip(&self.in_types)
                    .map(|(d, (dt, s))| d.to_tensor(*dt, s))
                    .collect();
                let refs: Vec<&Tensor> = tensors.iter().collect();
                let r = eval_op(&self.op, &refs)?;
                debug_assert_eq!(r.shape(), self.result.1.as_slice());
                dst.write(r.data());
            }
        }
        Ok(())
    }
}
