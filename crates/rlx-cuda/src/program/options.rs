//! Compile options: [`CudaOptions`], with its [`WalkBack`] and [`FusedGemm`] settings.

use super::*;

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
