//! The CUDA backend's knobs: each `RLX_CUDA_*` variable declared once here and parsed here
//! into [`crate::CudaOptions`] or the [`Tuning`] of a [`crate::codegen::Target`]; planning
//! and code generation read those, never the environment. [`KNOBS`] is what
//! `rlx devices --settings` lists for `cuda`.

mod memory;

pub use memory::*;

use crate::program::{FusedGemm, WalkBack};
use rlx_driver::Knob;

const fn knob(name: &'static str, default: &'static str, help: &'static str) -> Knob {
    Knob {
        name,
        default,
        help,
    }
}

/// Runs captured as CUDA graphs and replayed.
pub const GRAPHS: Knob = knob(
    "RLX_CUDA_GRAPHS",
    "1",
    "capture each run as a CUDA graph and replay it",
);
/// Batched GEMMs through pointer arrays.
pub const PTR_ARRAY: Knob = knob(
    "RLX_CUDA_PTR_ARRAY",
    "1",
    "batched GEMMs with irregular strides in one call through pointer arrays",
);
/// TF32 tensor cores for f32 GEMMs.
pub const TF32: Knob = knob(
    "RLX_CUDA_TF32",
    "0",
    "f32 GEMMs on TF32 tensor cores (less exact)",
);
/// Tensor-core flash attention.
pub const FLASH: Knob = knob(
    "RLX_CUDA_FLASH",
    "1",
    "f16/bf16 attention as the tensor-core flash kernel (sm_80+)",
);
/// Warps per flash block.
pub const FLASH_WARPS: Knob = knob(
    "RLX_CUDA_FLASH_WARPS",
    "4",
    "most warps per flash-attention block: 1, 2, 4 or 8",
);
/// Keys per flash tile.
pub const FLASH_KEYS: Knob = knob(
    "RLX_CUDA_FLASH_KEYS",
    "0",
    "most keys per flash-attention tile: 16, 32 or 64 (0: the kernel chooses)",
);
/// Flash blocks keeping a matrix's keys resident.
pub const FLASH_RESIDENT: Knob = knob(
    "RLX_CUDA_FLASH_RESIDENT",
    "1",
    "a flash block loads keys and values once for all its query tiles when they fit",
);
/// The attention scale folded into the exponent.
pub const FLASH_FOLD: Knob = knob(
    "RLX_CUDA_FLASH_FOLD",
    "1",
    "fold a positive attention scale into the softmax exponent (unmasked attention)",
);
/// Attention as two GEMMs around a softmax.
pub const ATTN_GEMM: Knob = knob(
    "RLX_CUDA_ATTN_GEMM",
    "",
    "attention as cuBLASLt GEMMs around a softmax: 1 always, 0 never, unset by size",
);
/// Copies elided into attention's strided reads.
pub const ELIDE: Knob = knob(
    "RLX_CUDA_ELIDE",
    "1",
    "attention reads and writes strided views in place of the copies around it",
);
/// Sibling GEMMs merged.
pub const MERGE_GEMM: Knob = knob(
    "RLX_CUDA_MERGE_GEMM",
    "1",
    "merge GEMMs that share their input (q/k/v, gate/up) into one",
);
/// GEMM + norm fused kernels offered.
pub const GEMM_NORM: Knob = knob(
    "RLX_CUDA_GEMM_NORM",
    "1",
    "offer a GEMM with the LayerNorm/RMSNorm after it fused (sm_90a, timed)",
);
/// GEMM algorithms timed at compile.
pub const AUTOTUNE: Knob = knob(
    "RLX_CUDA_AUTOTUNE",
    "1",
    "time GEMM algorithms and fused candidates at compile and keep the fastest",
);
/// Log of the autotuner's timings.
pub const TUNE_LOG: Knob = knob(
    "RLX_CUDA_TUNE_LOG",
    "0",
    "print each fused-GEMM candidate's time at compile",
);
/// Fused GEMM + epilogue kernels.
pub const FUSED_GEMM: Knob = knob(
    "RLX_CUDA_FUSED_GEMM",
    "timed",
    "GEMM with its epilogue in one kernel: timed, 0 (never), force or force:N (tiling N)",
);
/// Largest output a fused GEMM is offered for.
pub const FUSED_GEMM_MAX: Knob = knob(
    "RLX_CUDA_FUSED_GEMM_MAX",
    "65536",
    "largest GEMM result (elements) a fused GEMM kernel is offered for",
);
/// Hopper `wgmma` GEMM kernels.
pub const WGMMA: Knob = knob(
    "RLX_CUDA_WGMMA",
    "1",
    "offer the Hopper wgmma GEMM kernels (sm_90a)",
);
/// A-operand prologues.
pub const A_PROLOGUE: Knob = knob(
    "RLX_CUDA_A_PROLOGUE",
    "0",
    "a GEMM may apply its A operand's producer epilogue as tiles land (timed)",
);
/// Streaming kernels walking back to front.
pub const WALK_BACK: Knob = knob(
    "RLX_CUDA_WALK_BACK",
    "half-l2",
    "streaming kernels walk back to front after a larger-than-L2 write: half-l2, 0, always",
);
/// Bound inputs read in place.
pub const BIND_DIRECT: Knob = knob(
    "RLX_CUDA_BIND_DIRECT",
    "1",
    "bound device buffers are read and written in place (0: copied into the arena)",
);
/// Programmatic dependent launch.
pub const PDL: Knob = knob(
    "RLX_CUDA_PDL",
    "1",
    "programmatic dependent launch on sm_90+ (a kernel starts before its predecessor ends)",
);
/// The kernel cache's folder.
pub const CACHE: Knob = knob(
    "RLX_CUDA_CACHE",
    "$XDG_CACHE_HOME/rlx/cuda",
    "folder of compiled kernels (also ~/.cache/rlx/cuda)",
);

/// Every CUDA knob, in the order `rlx devices --settings` lists them.
pub const KNOBS: &[Knob] = &[
    MEMORY_KNOBS[0],
    MEMORY_KNOBS[1],
    MEMORY_KNOBS[2],
    MEMORY_KNOBS[3],
    MEMORY_KNOBS[4],
    MEMORY_KNOBS[5],
    GRAPHS,
    PTR_ARRAY,
    TF32,
    FLASH,
    FLASH_WARPS,
    FLASH_KEYS,
    FLASH_RESIDENT,
    FLASH_FOLD,
    ATTN_GEMM,
    ELIDE,
    MERGE_GEMM,
    GEMM_NORM,
    AUTOTUNE,
    TUNE_LOG,
    FUSED_GEMM,
    FUSED_GEMM_MAX,
    WGMMA,
    A_PROLOGUE,
    WALK_BACK,
    BIND_DIRECT,
    PDL,
    CACHE,
];

/// The planner's switches for A/B runs and tests, carried by the target so that planning
/// is a function of (program, target).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tuning {
    /// attention as GEMMs around a softmax: Some(true) always, Some(false) never, None by
    /// size
    pub attn_gemm: Option<bool>,
    /// a positive attention scale folds into the softmax exponent
    pub flash_fold: bool,
    /// attention's surrounding copies become strided views
    pub elide: bool,
    /// the Hopper `wgmma` GEMM kernels are offered
    pub wgmma: bool,
    /// GEMM + norm kernels are offered
    pub gemm_norm: bool,
    /// largest result (elements) a fused GEMM kernel is offered for
    pub fused_gemm_max: usize,
}

impl Default for Tuning {
    /// Every switch at its default, whatever the environment says.
    fn default() -> Self {
        Tuning {
            attn_gemm: None,
            flash_fold: true,
            elide: true,
            wgmma: true,
            gemm_norm: true,
            fused_gemm_max: crate::codegen::gemm_mma::MAX_OUTPUT,
        }
    }
}

impl Tuning {
    /// What the environment says.
    pub fn from_env() -> Tuning {
        Tuning {
            attn_gemm: match ATTN_GEMM.raw().as_deref().map(str::trim) {
                Some("1") => Some(true),
                Some("0") => Some(false),
                _ => None,
            },
            flash_fold: FLASH_FOLD.switch(),
            elide: ELIDE.switch(),
            wgmma: WGMMA.switch(),
            gemm_norm: GEMM_NORM.switch(),
            fused_gemm_max: FUSED_GEMM_MAX
                .parse()
                .unwrap_or(crate::codegen::gemm_mma::MAX_OUTPUT),
        }
    }
}

/// The flash kernel's most warps per block: [`FLASH_WARPS`] when 1, 2, 4 or 8, else 4.
pub fn flash_warps() -> usize {
    FLASH_WARPS
        .parse()
        .filter(|w: &usize| [1, 2, 4, 8].contains(w))
        .unwrap_or(4)
}

/// The flash kernel's most keys per tile: [`FLASH_KEYS`] when 16, 32 or 64, else 0 (the
/// kernel chooses).
pub fn flash_keys() -> usize {
    FLASH_KEYS
        .parse()
        .filter(|k: &usize| [16, 32, 64].contains(k))
        .unwrap_or(0)
}

/// What [`WALK_BACK`] says: `0` off, `always` always, else [`WalkBack::HalfL2`].
pub fn walk_back() -> WalkBack {
    match WALK_BACK.raw().as_deref().map(str::trim) {
        Some("0") => WalkBack::Off,
        Some("always") => WalkBack::Always,
        _ => WalkBack::HalfL2,
    }
}

/// What [`FUSED_GEMM`] says (unset or unrecognised: [`FusedGemm::Timed`]).
pub fn fused_gemm() -> FusedGemm {
    match FUSED_GEMM.raw().as_deref().map(str::trim) {
        Some("0") => FusedGemm::Off,
        Some("force") => FusedGemm::Force(0),
        Some(v) => v
            .strip_prefix("force:")
            .and_then(|n| n.parse().ok())
            .map_or(FusedGemm::Timed, FusedGemm::Force),
        None => FusedGemm::Timed,
    }
}
