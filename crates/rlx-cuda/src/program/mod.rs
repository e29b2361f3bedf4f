//! A compiled CUDA program: planned steps, NVRTC modules, prepared GEMMs, one planned
//! arena for every intermediate, fixed device buffers for inputs, constants and weights (in
//! device or managed memory), copies through the staging pool. The first run captures every
//! kernel and GEMM as one CUDA graph; later runs copy inputs in, replay it, and copy outputs
//! out.
//!
//! This file holds the program's state and accessors; `options` the compile options,
//! `compile` the compile, `autotune` the timing done at compile, `enqueue` the launch of
//! each step, `capture` the CUDA graphs, `run` the host and bound runs, `profile` the step
//! timings, `modules` the loaded NVRTC modules and `residency` the managed-memory prefetch.

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
use rlx_opt::buffers::{buffer_bytes, Home as BufferHome};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

mod autotune;
mod capture;
mod compile;
mod enqueue;
mod modules;
mod options;
mod profile;
mod residency;
mod run;

use modules::Modules;

pub use options::{CudaOptions, FusedGemm, WalkBack};
pub use run::BoundInput;

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
    spec: crate::plan::merge::Derived,
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

impl CudaProgram {
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
}
