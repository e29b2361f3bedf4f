//! The fast path: a [`KernelProgram`] compiled once into a [`CpuProgram`] and run many
//! times, from any number of threads at once.
//!
//! Compilation checks the program, compiles every kernel (loop kernels to lane bytecode,
//! library kernels to specialised implementations) and plans memory: every temporary and
//! every kernel's scratch lives in one arena per run context, at offsets fixed at compile
//! time (`rlx_opt::buffers`, the planner every backend shares). Temporaries that are
//! program outputs get their own allocation per run instead, which becomes the returned
//! tensor without a copy.

#[cfg(test)]
mod arena_tests;
pub(crate) mod int_gemm;
pub(crate) mod library;
pub(crate) mod loops;
mod lower;
pub(crate) mod math;
pub(crate) mod memory;
pub(crate) mod pool;
pub(crate) mod quant;

use crate::CpuError;
use library::LibExec;
use loops::exec::Src;
use loops::LoopExec;
use memory::{finish_owned, zeroed, Arena, Loc, RunMemory};
use rlx_interp::check::{bind_leaves, check_program, ProgramInfo};
use rlx_ir::kernel::{BufferId, BufferKind, Kernel, KernelProgram};
use rlx_ir::{DType, Tensor, TensorData};
use rlx_opt::buffers::{plan_buffers, ArenaTarget, Home, OutputHome, Region};
use rlx_opt::kernel_passes::elide_views::Views;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Compile options of the fast path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuOptions {
    /// Threads; None uses the global pool (`pool::global`: `RLX_CPU_THREADS`, else
    /// `RAYON_NUM_THREADS`, else all cores).
    pub threads: Option<usize>,
    /// Quantized matmuls dot their f32 activations with the dequantized weights, as the
    /// interpreter does, instead of quantizing the activations to 8 bits for integer dot
    /// products (the default for every block format, Q4_0 to Q8_0 and the k-quants Q2_K to
    /// Q6_K, on a few activation rows, as llama.cpp does; each value of an activation block
    /// then moves by up to 1/254 of the block's largest magnitude). For parity tests.
    pub exact_quant: bool,
}

/// The outputs of a profiled run and the time each kernel took.
#[derive(Debug, Clone)]
pub struct ProfiledRun {
    /// named outputs, in order
    pub outputs: Vec<(String, Tensor)>,
    /// one entry per kernel, in execution order
    pub timings: Vec<KernelTiming>,
}

/// Time spent in one kernel during a profiled run.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelTiming {
    /// the kernel's name
    pub name: String,
    /// "loop", or the library op's name
    pub kind: &'static str,
    /// wall time in seconds
    pub seconds: f64,
}

enum Exec {
    /// a copy attention reads or writes through instead (the `elide_views` kernel pass)
    Elided,
    Loop {
        exec: Box<LoopExec>,
        inputs: Vec<BufferId>,
        output: BufferId,
    },
    Library(Box<LibExec>),
}

struct Step {
    exec: Exec,
    kind: &'static str,
    /// byte offset of the kernel's scratch block in the arena
    scratch: usize,
}

/// A compiled program, ready to run on the CPU. `Send + Sync`: runs may overlap, each
/// taking its own arena from a pool.
pub struct CpuProgram {
    program: KernelProgram,
    info: ProgramInfo,
    steps: Vec<Step>,
    locs: Vec<Loc>,
    /// per owned output root: dtype and element count
    owned: Vec<(DType, usize)>,
    dtypes: Vec<DType>,
    numels: Vec<usize>,
    arena_bytes: usize,
    arenas: Mutex<Vec<Arena>>,
    pool: Option<pool::Pool>,
    threads: usize,
}

impl CpuProgram {
    /// Checks and compiles a program.
    ///
    /// # Errors
    /// A malformed program (bad buffer references, alias chains, views out of bounds,
    /// dtype or size mismatches, reads before writes), or a thread pool that cannot start.
    pub fn compile(program: KernelProgram, opts: &CpuOptions) -> Result<CpuProgram, CpuError> {
        let info = check_program(&program)?;
        let pool = match opts.threads {
            Some(n) => Some(
                pool::Pool::new(n)
                    .map_err(|e| CpuError::Invalid(format!("cannot start {n} threads: {e}")))?,
            ),
            None => None,
        };
        let threads = opts
            .threads
            .unwrap_or_else(|| pool::global().threads())
            .max(1);
        let ty = |b: BufferId| {
            let t = &program.buffers[b].ty;
            (t.dtype, info.shapes[b].clone())
        };
        let last = rlx_opt::KERNEL_PASSES[rlx_opt::KERNEL_PASSES.len() - 1];
        let views: Views = kernel_passes(&program, &info, last)
            .expect("the last pass is known")
            .views;
        let mut execs = Vec::with_capacity(program.kernels.len());
        for (ki, k) in program.kernels.iter().enumerate() {
            if views.elided[ki] {
                execs.push(("elided", Exec::Elided));
                continue;
            }
            execs.push(match k {
                Kernel::Loop(l) => (
                    "loop",
                    Exec::Loop {
                        exec: Box::new(LoopExec::compile(l, threads)),
                        inputs: l.inputs.iter().map(|i| i.buffer).collect(),
                        output: l.output,
                    },
                ),
                Kernel::Library(l) => {
                    let in_types = l.inputs.iter().map(|&b| ty(b)).collect();
                    let result = info.lib_results[ki].clone().expect("library result type");
                    let weight = l
                        .inputs
                        .get(1)
                        .and_then(|&b| weight_source(&program, &info, b));
                    (
                        l.op.name(),
                        Exec::Library(Box::new(LibExec::compile(
                            l,
                            in_types,
                            result,
                            threads,
                            opts.exact_quant,
                            weight,
                            views.attention.get(&ki),
                        ))),
                    )
                }
            });
        }
        let dtypes: Vec<DType> = program.buffers.iter().map(|b| b.ty.dtype).collect();
        let numels: Vec<usize> = info.shapes.iter().map(|s| s.iter().product()).collect();
        let scratch: Vec<usize> = execs
            .iter()
            .map(|(_, e)| match e {
                Exec::Library(l) => l.scratch_bytes,
                Exec::Loop { .. } | Exec::Elided => 0,
            })
            .collect();
        // what each kernel really reads and writes, views in place and elided copies out
        let touches: Vec<(Vec<BufferId>, Option<BufferId>)> = execs
            .iter()
            .map(|(_, e)| match e {
                Exec::Elided => (Vec::new(), None),
                Exec::Loop { inputs, output, .. } => (inputs.clone(), Some(*output)),
                Exec::Library(l) => (l.reads(), Some(l.output)),
            })
            .collect();
        let Layout {
            locs,
            owned,
            scratch_offsets,
            arena_bytes,
        } = layout(&program, &touches, &dtypes, &numels, &scratch)?;
        let steps = execs
            .into_iter()
            .zip(scratch_offsets)
            .map(|((kind, exec), scratch)| Step {
                exec,
                kind,
                scratch,
            })
            .collect();
        Ok(CpuProgram {
            program,
            info,
            steps,
            locs,
            owned,
            dtypes,
            numels,
            arena_bytes,
            arenas: Mutex::new(Vec::new()),
            pool,
            threads,
        })
    }

    /// Bytes of the arena one run context uses (temporaries and kernel scratch).
    pub fn arena_bytes(&self) -> usize {
        self.arena_bytes
    }

    /// Worker threads the program runs on.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The program this was compiled from.
    pub fn program(&self) -> &KernelProgram {
        &self.program
    }

    /// Names of library kernels that run on the interpreter (no specialised version for
    /// their op and dtype).
    pub fn interpreted_kernels(&self) -> Vec<String> {
        self.steps
            .iter()
            .filter_map(|s| match &s.exec {
                Exec::Library(l) if l.interpreted() => Some(l.name.clone()),
                _ => None,
            })
            .collect()
    }

    /// Runs the program and returns its named outputs in order.
    ///
    /// # Errors
    /// A missing input or param, one whose dtype or shape differs from its buffer, or a
    /// failing kernel (e.g. a gather index out of range), named.
    pub fn run(
        &self,
        inputs: &HashMap<String, Tensor>,
        params: &HashMap<String, Arc<Tensor>>,
    ) -> Result<Vec<(String, Tensor)>, CpuError> {
        self.run_inner(inputs, params, None)
    }

    /// Like [`CpuProgram::run`], also timing every kernel.
    ///
    /// # Errors
    /// As [`CpuProgram::run`].
    pub fn run_profiled(
        &self,
        inputs: &HashMap<String, Tensor>,
        params: &HashMap<String, Arc<Tensor>>,
    ) -> Result<ProfiledRun, CpuError> {
        let mut timings = Vec::with_capacity(self.steps.len());
        let outputs = self.run_inner(inputs, params, Some(&mut timings))?;
        Ok(ProfiledRun { outputs, timings })
    }

    fn run_inner(
        &self,
        inputs: &HashMap<String, Tensor>,
        params: &HashMap<String, Arc<Tensor>>,
        timings: Option<&mut Vec<KernelTiming>>,
    ) -> Result<Vec<(String, Tensor)>, CpuError> {
        let leaves = bind_leaves(&self.program, inputs, params)?;
        let taken = self.arenas.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut arena = taken.unwrap_or_else(|| Arena::new(self.arena_bytes));
        let mut owned: Vec<TensorData> = self.owned.iter().map(|&(d, n)| zeroed(d, n)).collect();
        let status = {
            let mem = RunMemory::new(
                &self.info.roots,
                &self.locs,
                &leaves,
                &self.dtypes,
                &self.numels,
                &mut arena,
                &mut owned,
            );
            let go = || self.execute(&mem, params, timings);
            pool::with(self.pool.as_ref().unwrap_or_else(|| pool::global()), go)
        };
        self.arenas
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(arena);
        status?;
        let mut uses = vec![0usize; owned.len()];
        for (_, b) in &self.program.outputs {
            if let Loc::Owned(i) = self.locs[self.info.roots[*b]] {
                uses[i] += 1;
            }
        }
        let mut owned: Vec<Option<TensorData>> = owned.into_iter().map(Some).collect();
        let mut out = Vec::with_capacity(self.program.outputs.len());
        for (name, b) in &self.program.outputs {
            let r = self.info.roots[*b];
            let data = match self.locs[r] {
                Loc::Leaf => leaves[r].expect("bound leaf").data().clone(),
                Loc::Owned(i) => {
                    uses[i] -= 1;
                    let d = if uses[i] == 0 {
                        owned[i].take().expect("taken on last use")
                    } else {
                        owned[i].clone().expect("still owned")
                    };
                    finish_owned(self.dtypes[*b], d)
                }
                Loc::Arena(_) | Loc::Unused => unreachable!("output temps are owned"),
            };
            let t = Tensor::new(self.info.shapes[*b].clone(), data).expect("checked sizes");
            out.push((name.clone(), t));
        }
        Ok(out)
    }

    fn execute(
        &self,
        mem: &RunMemory<'_>,
        params: &HashMap<String, Arc<Tensor>>,
        mut timings: Option<&mut Vec<KernelTiming>>,
    ) -> Result<(), CpuError> {
        for step in &self.steps {
            let start = timings.is_some().then(Instant::now);
            let name = match &step.exec {
                Exec::Elided => continue,
                Exec::Loop {
                    exec,
                    inputs,
                    output,
                } => {
                    // SAFETY: a kernel's inputs never share storage with its output (see
                    // `memory`), so these views do not alias.
                    let srcs: Vec<Src<'_>> = inputs
                        .iter()
                        .map(|&b| Src::Buf(unsafe { mem.data(b) }))
                        .collect();
                    loops::exec::run(exec, &srcs, unsafe { mem.data_mut(*output) });
                    &exec.name
                }
                Exec::Library(l) => {
                    l.run(mem, step.scratch, params)
                        .map_err(|e| e.in_kernel(&l.name))?;
                    &l.name
                }
            };
            if let (Some(t), Some(s)) = (timings.as_deref_mut(), start) {
                t.push(KernelTiming {
                    name: name.clone(),
                    kind: step.kind,
                    seconds: s.elapsed().as_secs_f64(),
                });
            }
        }
        Ok(())
    }
}

/// Where buffer `b` comes from when it is (a view of) a param or a constant.
fn weight_source(
    program: &KernelProgram,
    info: &ProgramInfo,
    b: BufferId,
) -> Option<library::WeightSource> {
    match &program.buffers[info.roots[b]].kind {
        BufferKind::Param(name) => Some(library::WeightSource::Param(name.clone())),
        BufferKind::Constant(t) => Some(library::WeightSource::Constant(t.clone())),
        _ => None,
    }
}

/// The kernel-IR passes the CPU chooses ([`rlx_opt::KERNEL_PASSES`]): `elide_views` for the
/// f32 attention kernel (`AttnPlan`), unless `RLX_CPU_ELIDE=0`; not `merge_siblings` (the
/// CPU runs each GEMM over its own packed weight) nor `gemm_norm` (it has no such kernel).
/// Runs them up to and including `last`; the decisions name the head-split copies f32
/// attention reads or writes through instead.
fn kernel_passes(
    program: &KernelProgram,
    info: &ProgramInfo,
    last: &str,
) -> Result<rlx_opt::KernelDecisions<(), ()>, rlx_opt::OptError> {
    let f32_attention = |i: usize| match &program.kernels[i] {
        Kernel::Library(l) => {
            l.inputs
                .iter()
                .all(|&b| program.buffers[b].ty.dtype == DType::F32)
                && info.lib_results[i]
                    .as_ref()
                    .is_some_and(|r| r.0 == DType::F32)
        }
        Kernel::Loop(_) => false,
    };
    let caps = rlx_opt::KernelCaps::<rlx_opt::NoGemms> {
        attention_views: crate::settings::ELIDE
            .switch()
            .then_some(&f32_attention as &dyn Fn(usize) -> bool),
        sibling_gemms: None,
        gemm_norm: false,
    };
    rlx_opt::run_kernel_passes_until(program, &caps, last)
}

/// What the kernel-IR passes the CPU chooses decide for `program`, up to and including the
/// pass `last`, as [`rlx_opt::KernelDecisions::dump`] prints it (`rlx dump --after`).
///
/// # Errors
/// A malformed program, or `last` is not one of [`rlx_opt::KERNEL_PASSES`].
pub fn kernel_decisions(program: &KernelProgram, last: &str) -> Result<String, CpuError> {
    let info = check_program(program)?;
    let decisions =
        kernel_passes(program, &info, last).map_err(|e| CpuError::Invalid(e.to_string()))?;
    Ok(decisions.dump(program))
}

/// Where storage lives, decided at compile time.
struct Layout {
    /// per buffer (a view's entry is its root's)
    locs: Vec<Loc>,
    /// dtype and element count of each owned output
    owned: Vec<(DType, usize)>,
    /// byte offset of each kernel's scratch block
    scratch_offsets: Vec<usize>,
    arena_bytes: usize,
}

/// The CPU's arena: 64-byte offsets and sizes (a cache line, enough for every SIMD load);
/// outputs outside it, each in its own allocation that becomes the returned tensor.
const ARENA: ArenaTarget = ArenaTarget {
    align: 64,
    min_bytes: 0,
    granule: 64,
    outputs: OutputHome::Owned,
};

/// Decides where every root buffer lives and plans the arena with `rlx_opt::buffers`: temps
/// that are program outputs are owned per run; other temps and each kernel's scratch go in
/// the arena, live from the first to the last kernel touching them.
fn layout(
    p: &KernelProgram,
    touches: &[(Vec<BufferId>, Option<BufferId>)],
    dtypes: &[DType],
    numels: &[usize],
    scratch: &[usize],
) -> Result<Layout, CpuError> {
    let steps: Vec<Vec<Region>> = touches
        .iter()
        .enumerate()
        .map(|(ki, (reads, output))| {
            let buffers = reads.iter().chain(output).map(|&b| Region::Buffer(b));
            buffers.chain([Region::Scratch(ki)]).collect()
        })
        .collect();
    let plan = plan_buffers(p, &steps, scratch, &ARENA)
        .map_err(|e| CpuError::Invalid(format!("memory plan: {e}")))?;
    let locs = plan
        .homes
        .iter()
        .map(|home| match *home {
            Home::Input | Home::Weight | Home::Constant => Loc::Leaf,
            Home::Arena(offset) => Loc::Arena(offset),
            Home::Owned(i) => Loc::Owned(i),
            Home::Unused => Loc::Unused,
        })
        .collect();
    Ok(Layout {
        locs,
        owned: plan.owned.iter().map(|&r| (dtypes[r], numels[r])).collect(),
        scratch_offsets: plan.scratch,
        arena_bytes: plan.arena_bytes,
    })
}
