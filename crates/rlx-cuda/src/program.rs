//! A compiled CUDA program: planned steps, NVRTC modules, prepared GEMMs, one planned
//! arena for every intermediate, fixed device buffers for inputs, constants and weights (in
//! device or managed memory), copies through the staging pool. The first run captures every kernel and GEMM as one CUDA graph; later
//! runs copy inputs in, replay it, and copy outputs out.

use crate::blas::{Blas, PreparedGemm};
use crate::codegen::{program_sources, ArgRef, Target};
use crate::device::{CudaDevice, Function, Graph};
use crate::memory::{DeviceBuffer, DeviceMemory, ALIGN};
use crate::plan::{root, Plan, Step};
use crate::route::{self, Route};
use crate::settings::{self, MemoryKind, MemorySettings};
use crate::staging::StagingPool;
use crate::weights::{tensor_bytes, WeightCache, WeightSlot};
use crate::CudaError;
use rlx_ir::kernel::{BufferKind, KernelProgram};
use rlx_ir::{DType, Tensor, TensorData};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

mod modules;
mod residency;
mod run;

use modules::Modules;

pub use run::BoundInput;

/// Options that change what the CUDA backend compiles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaOptions {
    /// f32 GEMMs on TF32 tensor cores (about 1e-3 relative error)
    pub tf32: bool,
    /// capture each run as a CUDA graph (`RLX_CUDA_GRAPHS=0` turns it off)
    pub graphs: bool,
    /// run two-level batched GEMMs as pointer-array GEMMs when cuBLASLt can
    /// (`RLX_CUDA_PTR_ARRAY=0` turns it off: one call per outer batch)
    pub pointer_arrays: bool,
    /// f16/bf16 attention as the tensor-core flash kernel on sm_80 and newer
    /// (`RLX_CUDA_FLASH=0` turns it off: the GEMM form or the older fused kernel)
    pub flash_attention: bool,
    /// sibling GEMMs reading the same input run as one GEMM over concatenated weights
    /// (`RLX_CUDA_MERGE_GEMM=0` turns it off)
    pub merge_gemms: bool,
    /// time up to eight of cuBLASLt's heuristic algorithms per GEMM at compile and keep the
    /// fastest (cached per process by problem; `RLX_CUDA_AUTOTUNE=0` turns it off: the
    /// heuristic's first choice)
    pub autotune: bool,
    /// GEMMs whose epilogue cuBLASLt cannot fuse may run as RLX's tensor-core GEMM with the
    /// epilogue in its store ([`crate::plan::Choice`]); `RLX_CUDA_FUSED_GEMM=0` turns it off,
    /// `RLX_CUDA_TUNE_LOG=1` prints each candidate's time
    pub fused_gemm: FusedGemm,
    /// a GEMM may apply the elementwise epilogue of the GEMM that produced its A operand as
    /// it loads A, in place of that epilogue's own pass ([`Target::a_prologue`], offered as a
    /// timed choice); off unless `RLX_CUDA_A_PROLOGUE=1`
    pub a_prologue: bool,
    /// which streams walk back to front ([`Target::walk_back_above`])
    pub walk_back: WalkBack,
    /// bound runs read and write bound device memory in place (a graph captured per set of
    /// addresses) where it is 256-byte aligned; off (`RLX_CUDA_BIND_DIRECT=0`), they copy
    /// it into the program's own slots and out of its arena
    pub bind_direct: bool,
    /// print each fused-GEMM candidate's time at compile (`RLX_CUDA_TUNE_LOG=1`)
    pub tune_log: bool,
    /// where the program's memory comes from (`RLX_CUDA_MEMORY`, [`crate::settings`])
    pub memory: MemoryKind,
}

/// Which streaming kernels walk their input back to front: those reading what the step just
/// before them wrote front to back, when that is too large to stay in L2 whole (the forward
/// walk would evict its still-cached end before reaching it). On the H200 at the encoder's
/// batch 256 (the GELU pass over 100 MB, attention over 75 MB) this made a run 0.7–2.1%
/// faster over 100 runs and 1.2% over 1000 (BENCHMARKS.md, session 21).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalkBack {
    /// never (`RLX_CUDA_WALK_BACK=0`)
    Off,
    /// when the stream is larger than half the device's L2 (the default)
    HalfL2,
    /// whatever its size: for tests, so small problems take the same code path
    Always,
}

impl WalkBack {
    /// What `RLX_CUDA_WALK_BACK` says ([`crate::settings::walk_back`]).
    pub fn from_env() -> WalkBack {
        crate::settings::walk_back()
    }

    /// The stream size above which kernels walk back, on a device with `l2_bytes` of L2.
    pub fn threshold(self, l2_bytes: usize) -> Option<usize> {
        match self {
            WalkBack::Off => None,
            WalkBack::HalfL2 => Some(l2_bytes / 2),
            WalkBack::Always => Some(0),
        }
    }
}

/// When a [`crate::plan::Choice`] runs its fused kernel instead of cuBLASLt plus the
/// epilogue kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FusedGemm {
    /// never (`RLX_CUDA_FUSED_GEMM=0`)
    Off,
    /// when timing both at compile says it is faster (needs autotuning; the default)
    Timed,
    /// always, in tiling `i` of those that apply (the last one when fewer apply); for tests
    /// and A/B runs (`RLX_CUDA_FUSED_GEMM=force` is `Force(0)`, `force:N` is `Force(N)`)
    Force(usize),
}

impl FusedGemm {
    /// What `RLX_CUDA_FUSED_GEMM` says ([`crate::settings::fused_gemm`]).
    pub fn from_env() -> FusedGemm {
        crate::settings::fused_gemm()
    }
}

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            tf32: settings::TF32.switch(),
            graphs: settings::GRAPHS.switch(),
            pointer_arrays: settings::PTR_ARRAY.switch(),
            flash_attention: settings::FLASH.switch(),
            merge_gemms: settings::MERGE_GEMM.switch(),
            autotune: settings::AUTOTUNE.switch(),
            tune_log: settings::TUNE_LOG.raw().is_some_and(|v| v.trim() != "0"),
            fused_gemm: settings::fused_gemm(),
            a_prologue: settings::A_PROLOGUE.switch(),
            walk_back: settings::walk_back(),
            bind_direct: settings::BIND_DIRECT.switch(),
            memory: MemorySettings::or_default().memory,
        }
    }
}

/// Facts about one compile.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompileStats {
    /// launches per run (kernels + GEMMs; copies excluded)
    pub launches: usize,
    /// distinct generated functions
    pub functions: usize,
    /// NVRTC time in milliseconds (0 when cached)
    pub nvrtc_ms: f64,
    /// the modules came from the disk cache
    pub cached: bool,
    /// modules the program's kernels were compiled into (in parallel, see
    /// [`crate::codegen::program_sources`])
    pub modules: usize,
    /// bytes of the planned arena
    pub arena_bytes: usize,
    /// milliseconds spent timing GEMM algorithms (0 with autotuning off, or when every GEMM
    /// was tuned before in this process)
    pub tune_ms: f64,
    /// GEMM problems timed by this compile (cache misses)
    pub tuned_gemms: usize,
    /// GEMM + epilogue pairs running as one fused tensor-core kernel
    pub fused_gemms: usize,
}

/// Where a program buffer lives on the device.
enum Home {
    Arena(usize),
    Input(usize),
    Weight(Arc<WeightSlot>),
    Constant(usize),
}

/// Where a derived buffer's source comes from.
enum Source {
    /// a session weight, by name (and its program buffer, for binding checks)
    Param(String, usize),
    /// a graph constant's bytes
    Constant(Vec<u8>),
}

/// A buffer built from params or constants (`ArgRef::Derived`), rebuilt on the host and
/// uploaded again whenever one of its params is bound to a different tensor.
struct DerivedHome {
    spec: crate::plan_merge::Derived,
    buffer: DeviceBuffer,
    sources: Vec<Source>,
    /// the param tensors last uploaded, per source (None for constants)
    uploaded: Mutex<Option<Vec<Option<Arc<Tensor>>>>>,
}

/// Buffers (by root) read and written at other addresses than their homes: a bound run's
/// device memory.
type Rebind<'a> = &'a [(usize, u64)];

/// Graphs kept per program for bound runs, one per set of bound addresses (a loop over one
/// binding, or two buffers used in turn, replays without capturing again).
pub const BOUND_GRAPHS: usize = 4;

struct RunState {
    graph: Option<Graph>,
    /// graphs captured for rebound addresses, least recently used first
    bound: Vec<(Vec<(usize, u64)>, Graph)>,
    graphs_ok: bool,
}

/// A kernel program compiled for the CUDA device.
pub struct CudaProgram {
    device: Arc<CudaDevice>,
    program: KernelProgram,
    plan: Plan,
    source: String,
    _modules: Modules,
    functions: Vec<Option<Function>>,
    /// per plan choice, the function of each fused tiling
    choice_functions: Vec<Vec<Function>>,
    /// per step, how it runs
    route: Vec<Route>,
    gemms: Vec<Option<PreparedGemm>>,
    /// per step, the device table of a pointer-array GEMM
    pointer_tables: Vec<Option<DeviceBuffer>>,
    blas: Option<Blas>,
    arena: DeviceBuffer,
    scratch_offsets: Vec<usize>,
    homes: Vec<Option<Home>>,
    inputs: Vec<(String, usize, DeviceBuffer, usize)>,
    constants: Vec<DeviceBuffer>,
    params: Vec<(String, usize, Arc<WeightSlot>)>,
    derived: Vec<DerivedHome>,
    outputs: Vec<(String, usize, usize)>,
    state: Mutex<RunState>,
    /// buffers (roots) a pointer-array GEMM's device table names, which bound runs copy
    /// instead of rebinding (the table holds their addresses)
    table_roots: Vec<usize>,
    /// see [`CudaOptions::bind_direct`]
    bind_direct: bool,
    /// the pinned pool every upload and download goes through
    staging: Arc<StagingPool>,
    /// the managed memory prefetched before runs
    prefetch: residency::PrefetchPlan,
    /// compile facts
    pub stats: CompileStats,
}

fn bytes_of(program: &KernelProgram, b: usize) -> usize {
    let t = &program.buffers[b].ty;
    t.shape
        .as_static()
        .map_or(0, |s| s.iter().product::<usize>())
        * t.dtype.size_bytes()
}

impl CudaProgram {
    /// The device target programs are generated for.
    ///
    /// # Errors
    /// CUDA is unavailable.
    pub fn target() -> Result<Target, CudaError> {
        let f = crate::probe::device_facts().map_err(CudaError::Unavailable)?;
        Ok(Target {
            arch: f.arch(),
            sm_count: f.sm_count,
            max_shared: f.max_shared_per_block,
            walk_back_above: settings::walk_back().threshold(f.l2_bytes),
            flash_attention: settings::FLASH.switch(),
            flash_warps: settings::flash_warps(),
            flash_keys: settings::flash_keys(),
            flash_resident: settings::FLASH_RESIDENT.switch(),
            a_prologue: settings::A_PROLOGUE.switch(),
            tuning: settings::Tuning::from_env(),
        })
    }

    /// Plans, generates, compiles and loads `program`; allocates its memory and uploads its
    /// constants. Weights get slots in `weights` (uploaded at run time).
    ///
    /// # Errors
    /// Unsupported kernels (all listed), an NVRTC failure (with its log and the source's
    /// path), a cuBLASLt refusal, or out of memory.
    pub fn compile(
        program: KernelProgram,
        weights: &WeightCache,
        options: &CudaOptions,
    ) -> Result<CudaProgram, CudaError> {
        let device = CudaDevice::get()?;
        let queue_owner = device.clone();
        MemorySettings::get()?;
        let (mem, staging) = (DeviceMemory::of(options.memory)?, StagingPool::get()?);
        device.bind()?;
        let l2 = crate::probe::device_facts()
            .map_err(CudaError::Unavailable)?
            .l2_bytes;
        let target = Target {
            flash_attention: options.flash_attention,
            a_prologue: options.a_prologue,
            walk_back_above: options.walk_back.threshold(l2),
            ..Self::target()?
        };
        let plan = crate::plan::plan_with(&program, &target, options.merge_gemms)?;
        let mut stats = CompileStats {
            launches: plan.steps.len(),
            ..CompileStats::default()
        };
        let parts = program_sources(plan.all_kernels());
        let source = crate::codegen::program_source(plan.all_kernels());
        let modules = if parts.is_empty() {
            Modules::default()
        } else {
            let start = Instant::now();
            let sources: Vec<String> = parts.iter().map(|(s, _)| s.clone()).collect();
            let cubins = crate::nvrtc::compile_all_cached("rlx_program", &sources, &target.arch)?;
            stats.cached = cubins.iter().all(|c| c.cached);
            stats.nvrtc_ms = if stats.cached {
                0.0
            } else {
                start.elapsed().as_secs_f64() * 1e3
            };
            stats.modules = cubins.len();
            let mut modules = Modules::default();
            for ((_, names), cubin) in parts.iter().zip(&cubins) {
                modules.add(device.load_module(&cubin.image)?, names);
            }
            modules
        };
        let mut names = std::collections::HashSet::new();
        let mut functions = Vec::new();
        let needs_blas = plan.steps.iter().any(|s| matches!(s, Step::Gemm(_)));
        let blas = if needs_blas {
            Some(Blas::new(&mem)?)
        } else {
            None
        };
        let mut gemms = Vec::new();
        for step in &plan.steps {
            match step {
                Step::Kernel(k) => {
                    names.insert(k.function.clone());
                    functions.push(Some(modules.function(&k.function, k.launch.shared_bytes)?));
                    gemms.push(None);
                }
                Step::Gemm(g) => {
                    functions.push(None);
                    let b = blas
                        .as_ref()
                        .ok_or_else(|| CudaError::Invalid("GEMM without cuBLASLt".into()))?;
                    gemms.push(Some(b.prepare(g, options.tf32, options.pointer_arrays)?));
                }
            }
        }
        let mut choice_functions = Vec::with_capacity(plan.choices.len());
        for c in &plan.choices {
            let fs = c
                .fused
                .iter()
                .map(|k| modules.function(&k.function, k.launch.shared_bytes))
                .collect::<Result<Vec<_>, _>>()?;
            choice_functions.push(fs);
        }
        stats.functions = names.len();
        // A GEMM that loops over its outer batches launches once per outer batch.
        stats.launches = gemms
            .iter()
            .map(|g| match g {
                Some(g) if g.batching == crate::blas::Batching::Loop => g.spec.outer,
                _ => 1,
            })
            .sum();
        // Memory: one arena for temporaries and scratch, planned by lifetime.
        let n_steps = plan.steps.len();
        let touches = plan.touches();
        let n_buf = program.buffers.len();
        let mut life: Vec<Option<(usize, usize)>> = vec![None; n_buf + plan.scratch.len()];
        for (s, refs) in touches.iter().enumerate() {
            for r in refs {
                let slot = match *r {
                    ArgRef::Buffer(b) => root(&program, b),
                    ArgRef::Scratch(i) => n_buf + i,
                    ArgRef::Derived(_) => continue,
                };
                let l = life[slot].get_or_insert((s, s));
                l.1 = s;
            }
        }
        for (_, b) in &program.outputs {
            if let Some(l) = life[root(&program, *b)].as_mut() {
                l.1 = n_steps;
            }
        }
        let mut requests = Vec::new();
        let mut owners = Vec::new();
        for (slot, l) in life.iter().enumerate() {
            let temp = slot >= n_buf || matches!(program.buffers[slot].kind, BufferKind::Temp);
            if let (Some((first, last)), true) = (l, temp) {
                let size = if slot >= n_buf {
                    plan.scratch[slot - n_buf]
                } else {
                    bytes_of(&program, slot)
                };
                requests.push(rlx_mem::PlanRequest {
                    size: size.max(1),
                    align: ALIGN,
                    first: *first,
                    last: *last,
                    inplace_of: None,
                });
                owners.push(slot);
            }
        }
        let mem_plan = rlx_mem::plan(&requests)
            .map_err(|e| CudaError::Invalid(format!("memory plan: {e}")))?;
        stats.arena_bytes = mem_plan.arena_bytes;
        let arena = mem.alloc(mem_plan.arena_bytes)?;
        let mut homes: Vec<Option<Home>> = (0..n_buf).map(|_| None).collect();
        let mut scratch_offsets = vec![0; plan.scratch.len()];
        for (slot, off) in owners.iter().zip(&mem_plan.offsets) {
            if *slot >= n_buf {
                scratch_offsets[slot - n_buf] = *off;
            } else {
                homes[*slot] = Some(Home::Arena(*off));
            }
        }
        // Params read only through derived buffers (merged GEMM weights) need no slot.
        let mut read: Vec<bool> = vec![false; n_buf];
        for r in touches.iter().flatten() {
            if let ArgRef::Buffer(b) = *r {
                read[root(&program, b)] = true;
            }
        }
        for (_, b) in &program.outputs {
            read[root(&program, *b)] = true;
        }
        let derived_only: std::collections::HashSet<usize> = plan
            .derived
            .iter()
            .flat_map(|d| d.sources.iter().map(|s| root(&program, s.0)))
            .filter(|&b| !read[b])
            .collect();
        // the stream is this compile's from its first upload through tuning
        let _queue = queue_owner.queue();
        let (mut inputs, mut constants, mut params) = (Vec::new(), Vec::new(), Vec::new());
        for (b, buf) in program.buffers.iter().enumerate() {
            if buf.alias_of.is_some() || derived_only.contains(&b) {
                continue;
            }
            let bytes = bytes_of(&program, b);
            match &buf.kind {
                BufferKind::Input(name) => {
                    homes[b] = Some(Home::Input(inputs.len()));
                    inputs.push((name.clone(), b, mem.alloc(bytes)?, bytes));
                }
                BufferKind::Param(name) => {
                    let slot = weights.slot(name, bytes, |n| mem.alloc(n))?;
                    homes[b] = Some(Home::Weight(slot.clone()));
                    params.push((name.clone(), b, slot));
                }
                BufferKind::Constant(t) => {
                    let d = mem.alloc(bytes)?;
                    staging.upload(&[(d.ptr(), tensor_bytes(t))])?;
                    homes[b] = Some(Home::Constant(constants.len()));
                    constants.push(d);
                }
                BufferKind::Temp => {
                    if homes[b].is_none() {
                        homes[b] = Some(Home::Arena(0));
                    }
                }
            }
        }
        let mut derived = Vec::with_capacity(plan.derived.len());
        for spec in &plan.derived {
            let mut sources = Vec::with_capacity(spec.sources.len());
            for &(b, _) in &spec.sources {
                let r = root(&program, b);
                sources.push(match &program.buffers[r].kind {
                    BufferKind::Param(name) => Source::Param(name.clone(), r),
                    BufferKind::Constant(t) => Source::Constant(tensor_bytes(t).to_vec()),
                    _ => {
                        return Err(CudaError::Invalid(format!(
                            "derived buffer from buffer {b}, not a param or constant"
                        )))
                    }
                });
            }
            let home = DerivedHome {
                spec: spec.clone(),
                buffer: mem.alloc(spec.bytes().max(1))?,
                sources,
                uploaded: Mutex::new(None),
            };
            if home
                .sources
                .iter()
                .all(|s| matches!(s, Source::Constant(_)))
            {
                home.upload(&staging, &[])?;
            }
            derived.push(home);
        }
        device.sync()?;
        let outputs: Vec<(String, usize, usize)> = program
            .outputs
            .iter()
            .map(|(n, b)| (n.clone(), *b, bytes_of(&program, *b)))
            .collect();
        let state = RunState {
            graph: None,
            bound: Vec::new(),
            graphs_ok: options.graphs,
        };
        let mut compiled = CudaProgram {
            device,
            program,
            plan,
            source,
            _modules: modules,
            functions,
            choice_functions,
            route: vec![Route::Step; n_steps],
            gemms,
            pointer_tables: Vec::new(),
            blas,
            arena,
            scratch_offsets,
            homes,
            inputs,
            constants,
            params,
            derived,
            outputs,
            state: Mutex::new(state),
            table_roots: Vec::new(),
            bind_direct: options.bind_direct,
            staging,
            prefetch: residency::PrefetchPlan::default(),
            stats,
        };
        compiled.upload_pointer_tables(&mem)?;
        compiled.prefetch = residency::PrefetchPlan::new(&compiled, mem, options.memory);
        let touches = compiled.plan.touches();
        for (i, t) in compiled.pointer_tables.iter().enumerate() {
            if t.is_some() {
                for r in touches.get(i).into_iter().flatten() {
                    if let ArgRef::Buffer(b) = *r {
                        compiled.table_roots.push(root(&compiled.program, b));
                    }
                }
            }
        }
        if options.autotune {
            compiled.autotune(options.tf32)?;
        }
        compiled.choose_fused(options)?;
        Ok(compiled)
    }

    /// Decides each [`crate::plan::Choice`], in order: forced, timed against its steps as
    /// decided so far (when autotuning; decisions cached per process by the fused kernel's
    /// content hash, which names the problem and epilogue), or left to the planned steps.
    fn choose_fused(&mut self, options: &CudaOptions) -> Result<(), CudaError> {
        static DECIDED: std::sync::OnceLock<Mutex<HashMap<String, Option<usize>>>> =
            std::sync::OnceLock::new();
        let start = Instant::now();
        let mut timed = 0;
        for ci in 0..self.plan.choices.len() {
            let c = &self.plan.choices[ci];
            let last = c.fused.len() - 1;
            if !route::nests(&self.route, &self.plan.choices, ci) {
                continue;
            }
            let pick = match options.fused_gemm {
                FusedGemm::Off => None,
                FusedGemm::Force(t) => Some(t.min(last)),
                FusedGemm::Timed if !options.autotune => None,
                FusedGemm::Timed => {
                    let key = c.fused[0].function.clone();
                    let cache = DECIDED.get_or_init(|| Mutex::new(HashMap::new()));
                    let known = cache
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .get(&key)
                        .copied();
                    match known {
                        Some(p) => p,
                        None if !self.writes_arena_only(ci) => None,
                        None => {
                            timed += 1;
                            let p = self.time_choice(ci, options.tune_log)?;
                            cache
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .insert(key, p);
                            p
                        }
                    }
                }
            };
            if let Some(t) = pick {
                let (launches, fused) = route::take(&mut self.route, &self.plan.choices, ci, t);
                self.stats.launches = self.stats.launches.saturating_add_signed(launches);
                self.stats.fused_gemms = self.stats.fused_gemms.saturating_add_signed(fused);
            }
        }
        if timed > 0 {
            self.stats.tune_ms += start.elapsed().as_secs_f64() * 1e3;
        }
        Ok(())
    }

    /// True when both ways of running choice `ci` write only arena memory (so they can be
    /// run for timing without changing inputs, weights or constants).
    fn writes_arena_only(&self, ci: usize) -> bool {
        let c = &self.plan.choices[ci];
        let in_arena = |a: ArgRef| match a {
            ArgRef::Scratch(_) => true,
            ArgRef::Buffer(b) => matches!(self.homes[root(&self.program, b)], Some(Home::Arena(_))),
            ArgRef::Derived(_) => false,
        };
        // a GEMM writes its c; a kernel its last argument, or its first when it runs in place
        let steps_out = c.steps().all(|i| match &self.plan.steps[i] {
            Step::Gemm(g) => in_arena(g.c.arg),
            Step::Kernel(k) => k.args.last().is_some_and(|&a| in_arena(a)) && in_arena(k.args[0]),
        });
        // fused kernels take operands a, b, then the output, then epilogue inputs
        let fused_out = c.fused.iter().all(|k| in_arena(k.args[2]));
        steps_out && fused_out
    }

    /// Times choice `ci`: its steps, run as decided so far (an inner choice's kernel runs in
    /// place of its steps), against each fused tiling, round-robin
    /// ([`crate::tune::fastest`]); Some(tiling) when a fused one is faster.
    fn time_choice(&self, ci: usize, log: bool) -> Result<Option<usize>, CudaError> {
        let c = &self.plan.choices[ci];
        let mut failure = None;
        let mut mins = vec![f64::INFINITY; c.fused.len() + 1];
        let best = crate::tune::fastest(c.fused.len() + 1, crate::tune::ROUNDS, |i| {
            let r = self
                .device
                .time_enqueued(crate::tune::WARMUP, crate::tune::TIMED, || {
                    if i == 0 {
                        c.steps().try_for_each(|s| self.enqueue_step(s, &[]))
                    } else {
                        self.launch_fused(ci, i - 1, &[])
                    }
                });
            match r {
                Ok(t) => {
                    mins[i] = mins[i].min(t);
                    Some(t)
                }
                Err(e) => {
                    if i == 0 {
                        failure = Some(e);
                    }
                    None
                }
            }
        });
        self.device.sync()?;
        if let Some(e) = failure {
            return Err(e);
        }
        if log {
            eprintln!("rlx-cuda: fused-GEMM choice {}", c.fused[0].label);
            eprintln!("  cuBLASLt + epilogue kernel: {:.4} ms", mins[0]);
            for (k, t) in c.fused.iter().zip(&mins[1..]) {
                eprintln!("  {}: {t:.4} ms", k.label);
            }
        }
        Ok(best.and_then(|(i, _)| i.checked_sub(1)))
    }

    /// Launches tiling `t` of choice `ci`.
    fn launch_fused(&self, ci: usize, t: usize, rebind: Rebind<'_>) -> Result<(), CudaError> {
        let k = &self.plan.choices[ci].fused[t];
        let args: Vec<u64> = k.args.iter().map(|&a| self.addr(a, rebind)).collect();
        self.device.launch(
            &self.choice_functions[ci][t],
            &k.launch,
            &args,
            &format!("{} ({})", k.function, k.label),
        )
    }

    /// Times cuBLASLt's candidate algorithms for every GEMM step on the program's own
    /// buffers and keeps the fastest (see [`Blas::tune`]). Only GEMMs writing the arena are
    /// timed (running one writes its result; inputs, weights and constants must keep their
    /// contents); the others keep the heuristic's first choice. Strided, pointer-array and
    /// per-outer-batch GEMMs are all tuned, each as it runs.
    fn autotune(&mut self, tf32: bool) -> Result<(), CudaError> {
        let Some(blas) = self.blas.take() else {
            return Ok(());
        };
        let start = Instant::now();
        let mut tuned = 0;
        let mut result = Ok(());
        for i in 0..self.plan.steps.len() {
            let Some(ptrs) = self.gemm_pointers(i, &[]) else {
                continue;
            };
            let writes_arena = match &self.plan.steps[i] {
                Step::Gemm(g) => match g.c.arg {
                    ArgRef::Scratch(_) => true,
                    ArgRef::Buffer(b) => {
                        matches!(self.homes[root(&self.program, b)], Some(Home::Arena(_)))
                    }
                    ArgRef::Derived(_) => false,
                },
                Step::Kernel(_) => false,
            };
            let Some(g) = self.gemms[i].as_mut().filter(|_| writes_arena) else {
                continue;
            };
            match blas.tune(g, &ptrs, &self.device, tf32) {
                Ok(timed) => tuned += usize::from(timed),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.blas = Some(blas);
        if tuned > 0 {
            self.stats.tune_ms = start.elapsed().as_secs_f64() * 1e3;
        }
        self.stats.tuned_gemms = tuned;
        result
    }

    /// Uploads the matrix-pointer table of every pointer-array GEMM (addresses are fixed once
    /// memory is planned, as the captured CUDA graph assumes too).
    fn upload_pointer_tables(&mut self, mem: &Arc<DeviceMemory>) -> Result<(), CudaError> {
        let mut tables = Vec::with_capacity(self.gemms.len());
        for g in &self.gemms {
            let table = g
                .as_ref()
                .and_then(|g| g.pointer_table(|op| self.addr(op.arg, &[])));
            tables.push(match table {
                Some(t) => {
                    let bytes: Vec<u8> = t.iter().flat_map(|p| p.to_le_bytes()).collect();
                    let d = mem.alloc(bytes.len())?;
                    self.staging.upload(&[(d.ptr(), &bytes)])?;
                    self.device.sync()?;
                    Some(d)
                }
                None => None,
            });
        }
        self.pointer_tables = tables;
        Ok(())
    }

    /// How each GEMM step walks its batches (None for kernel steps).
    pub fn batchings(&self) -> Vec<Option<crate::blas::Batching>> {
        self.gemms
            .iter()
            .map(|g| g.as_ref().map(|g| g.batching))
            .collect()
    }

    /// The generated CUDA C source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The plan (steps and scratch).
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The kernel program text.
    pub fn dump(&self) -> String {
        self.program.to_string()
    }

    /// True once runs replay a captured CUDA graph.
    pub fn uses_graph(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .graph
            .is_some()
    }

    /// The device address of `r`; a buffer whose root `rebind` names is read and written
    /// at the address given there (bound memory) instead of its home.
    fn addr(&self, r: ArgRef, rebind: Rebind<'_>) -> u64 {
        if let ArgRef::Buffer(b) = r {
            let root = root(&self.program, b);
            if let Some(&(_, ptr)) = rebind.iter().find(|(at, _)| *at == root) {
                return ptr;
            }
        }
        match r {
            ArgRef::Scratch(i) => self.arena.ptr() + self.scratch_offsets[i] as u64,
            ArgRef::Buffer(b) => match &self.homes[root(&self.program, b)] {
                Some(Home::Arena(off)) => self.arena.ptr() + *off as u64,
                Some(Home::Input(i)) => self.inputs[*i].2.ptr(),
                Some(Home::Weight(s)) => s.buffer().ptr(),
                Some(Home::Constant(i)) => self.constants[*i].ptr(),
                None => 0,
            },
            ArgRef::Derived(i) => self.derived[i].buffer.ptr(),
        }
    }

    /// Enqueues every step (the part captured as a CUDA graph).
    fn enqueue_steps(&self, rebind: Rebind<'_>) -> Result<(), CudaError> {
        (0..self.plan.steps.len()).try_for_each(|i| self.enqueue_step(i, rebind))
    }

    /// Enqueues step `i` as its route says.
    fn enqueue_step(&self, i: usize, rebind: Rebind<'_>) -> Result<(), CudaError> {
        match self.route[i] {
            Route::Step => self.enqueue_planned(i, rebind),
            Route::Fused(c, t) => self.launch_fused(c, t, rebind),
            Route::Skip => Ok(()),
        }
    }

    /// Enqueues step `i` as planned.
    fn enqueue_planned(&self, i: usize, rebind: Rebind<'_>) -> Result<(), CudaError> {
        match &self.plan.steps[i] {
            Step::Kernel(k) => {
                let args: Vec<u64> = k.args.iter().map(|&a| self.addr(a, rebind)).collect();
                let f = self.functions[i]
                    .ok_or_else(|| CudaError::Invalid("missing function".into()))?;
                self.device.launch(
                    &f,
                    &k.launch,
                    &args,
                    &format!("{} ({})", k.function, k.label),
                )
            }
            Step::Gemm(_) => {
                let prepared = self.gemms[i]
                    .as_ref()
                    .ok_or_else(|| CudaError::Invalid("missing GEMM".into()))?;
                let blas = self
                    .blas
                    .as_ref()
                    .ok_or_else(|| CudaError::Invalid("missing cuBLASLt".into()))?;
                let ptrs = self
                    .gemm_pointers(i, rebind)
                    .ok_or_else(|| CudaError::Invalid("missing GEMM".into()))?;
                blas.run(prepared, &ptrs, self.device.stream())
            }
        }
    }

    /// The device addresses GEMM step `i` runs on (None for kernel steps).
    fn gemm_pointers(&self, i: usize, rebind: Rebind<'_>) -> Option<crate::blas::GemmPointers> {
        let Step::Gemm(g) = &self.plan.steps[i] else {
            return None;
        };
        let size = g.dtype.size_bytes() as u64;
        let at = |o: &crate::gemm::Operand| self.addr(o.arg, rebind) + o.offset as u64 * size;
        Some(crate::blas::GemmPointers {
            a: at(&g.a),
            b: at(&g.b),
            c: at(&g.c),
            bias: g.bias.map(|b| self.addr(b, rebind)),
            // Read like the output: same offset, same layout.
            residual: g
                .residual
                .map(|r| self.addr(r, rebind) + g.c.offset as u64 * size),
            arrays: self
                .pointer_tables
                .get(i)
                .and_then(|t| t.as_ref().map(|t| t.ptr())),
        })
    }
}
