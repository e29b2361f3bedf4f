//! CUDA C code generation from kernel IR.
//!
//! Every kernel of a [`rlx_ir::kernel::KernelProgram`] becomes one [`EmittedKernel`]: a
//! `__global__` function specialized to its static shapes (dims and strides are literals, so
//! index math compiles to multiplications by constants), its launch geometry, and the
//! buffers its pointer arguments refer to. Functions are named by a hash of their text, so
//! identical kernels (the same layer repeated) compile once. A program's source is the
//! prelude plus each distinct function.
//!
//! Files follow the op families they lower: scalar rules in `unary`, `binary`, `reduce`,
//! `dtype`; fused loop nests in `loops` (with `expr` and `index`); library kernels in
//! `softmax`, `norm`, `gather`, `movement`, `pool`, `argreduce`, `attention`, `conv`; wide
//! (up to 16-byte) vector moves of f32/f16/bf16 in `vector`.

pub mod argreduce;
pub mod attention;
pub mod binary;
pub mod conv;
pub mod dtype;
mod expr;
pub mod gather;
pub mod gemm_mma;
pub mod gemm_norm;
pub mod gemm_wgmma;
mod group;
pub mod index;
pub mod loops;
pub mod movement;
pub mod norm;
pub mod pool;
pub mod reduce;
pub mod softmax;
pub mod store;
pub mod unary;
pub mod vector;

pub use expr::EpilogueCtx;
pub use index::IndexSpace;

use rlx_ir::kernel::BufferId;

/// Helpers every generated program starts with (half conversions, NaN-propagating max/min,
/// floored modulo, warp shuffles for every compute type).
pub const PRELUDE: &str = include_str!("prelude.cu");

/// The device facts code generation depends on.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// NVRTC architecture, e.g. `sm_90`
    pub arch: String,
    /// streaming multiprocessors (sizes grids)
    pub sm_count: u32,
    /// shared memory per block with opt-in, in bytes
    pub max_shared: usize,
    /// f16/bf16 attention runs as the tensor-core flash kernel on sm_80 and newer
    /// ([`attention::flash_mma`]); false keeps the older paths (`RLX_CUDA_FLASH=0`)
    pub flash_attention: bool,
    /// most warps (16 query rows each) per flash-attention block: 4 (on an H200, 8 made the
    /// encoder's attention 15% slower), or what `RLX_CUDA_FLASH_WARPS` says (1, 2, 4 or 8)
    pub flash_warps: usize,
    /// most keys per flash-attention key/value tile: 0 chooses (64), or what
    /// `RLX_CUDA_FLASH_KEYS` says (16, 32 or 64)
    pub flash_keys: usize,
    /// a flash block loads a matrix's keys and values once and runs every query tile of it
    /// over them when they all fit in shared memory (and blocks stay plentiful); false
    /// (`RLX_CUDA_FLASH_RESIDENT=0`) gives each query tile its own block
    pub flash_resident: bool,
    /// a GEMM may apply the elementwise epilogue of the GEMM that produced its A operand as
    /// A's tiles land in shared memory, so that epilogue's pass over memory goes (offered as
    /// a timed choice; off unless `RLX_CUDA_A_PROLOGUE=1` until it has been measured and
    /// checked on a GPU, see `plan_norm`)
    pub a_prologue: bool,
}

impl Target {
    /// An H200 (`sm_90a`, 132 SMs, 227 KiB shared memory per block): the target compile
    /// checks use on machines without a GPU.
    pub fn h200() -> Target {
        Target {
            arch: "sm_90a".into(),
            sm_count: 132,
            max_shared: 227 * 1024,
            flash_attention: true,
            flash_warps: Target::flash_warps_from_env(),
            flash_keys: Target::flash_keys_from_env(),
            flash_resident: Target::switch_from_env("RLX_CUDA_FLASH_RESIDENT"),
            a_prologue: Target::a_prologue_from_env(),
        }
    }

    /// Whether the environment asks for A prologues ([`Target::a_prologue`]):
    /// `RLX_CUDA_A_PROLOGUE=1`.
    pub fn a_prologue_from_env() -> bool {
        std::env::var("RLX_CUDA_A_PROLOGUE").is_ok_and(|v| v == "1")
    }

    /// The compute capability as `10 * major + minor` (`sm_90` → 90), None when `arch` is
    /// not of that form.
    pub fn compute_capability(&self) -> Option<u32> {
        let digits: String = self
            .arch
            .strip_prefix("sm_")?
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    }

    /// The flash kernel's most warps per block: `RLX_CUDA_FLASH_WARPS` when it is 1, 2, 4 or
    /// 8, else 4.
    pub fn flash_warps_from_env() -> usize {
        std::env::var("RLX_CUDA_FLASH_WARPS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|w: &usize| [1, 2, 4, 8].contains(w))
            .unwrap_or(4)
    }

    /// The flash kernel's most keys per tile: `RLX_CUDA_FLASH_KEYS` when it is 16, 32 or 64,
    /// else 0 (the kernel chooses).
    pub fn flash_keys_from_env() -> usize {
        std::env::var("RLX_CUDA_FLASH_KEYS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|k: &usize| [16, 32, 64].contains(k))
            .unwrap_or(0)
    }

    /// Whether the environment leaves tensor-core flash attention on: true unless
    /// `RLX_CUDA_FLASH=0`.
    pub fn flash_from_env() -> bool {
        Target::switch_from_env("RLX_CUDA_FLASH")
    }

    /// An on/off switch from the environment: on unless the variable is `0`.
    pub fn switch_from_env(var: &str) -> bool {
        std::env::var(var).map_or(true, |v| v != "0")
    }
}

/// What a kernel's pointer argument points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArgRef {
    /// a program buffer
    Buffer(BufferId),
    /// a scratch region planned with the arena (index into the step's scratch list)
    Scratch(usize),
    /// a buffer built from params or constants (index into `Plan::derived`), such as the
    /// concatenated weights of a merged GEMM
    Derived(usize),
}

/// Launch geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launch {
    /// blocks along x and y
    pub grid: [u32; 2],
    /// threads per block
    pub block: u32,
    /// dynamic shared memory in bytes
    pub shared_bytes: u32,
}

impl Launch {
    /// A one-dimensional launch with `n_blocks` blocks of `block` threads.
    pub fn linear(n_blocks: usize, block: u32) -> Launch {
        Launch {
            grid: [n_blocks.clamp(1, i32::MAX as usize) as u32, 1],
            block,
            shared_bytes: 0,
        }
    }
}

/// One generated `__global__` function with how to launch it.
#[derive(Debug, Clone, PartialEq)]
pub struct EmittedKernel {
    /// the kernel IR name it came from (for dumps and errors)
    pub label: String,
    /// the C function name (content hashed)
    pub function: String,
    /// the function's source text (without the prelude)
    pub source: String,
    /// launch geometry
    pub launch: Launch,
    /// pointer arguments in order
    pub args: Vec<ArgRef>,
}

/// Finishes a kernel: `text` uses `RLX_FN` where the function name goes; the name becomes
/// `<family>_<hash of text>`, and the body starts with `RLX_GRID_WAIT()` (see
/// [`crate::device::CudaDevice::launch`]).
pub fn finish(
    label: &str,
    family: &str,
    text: String,
    launch: Launch,
    args: Vec<ArgRef>,
) -> EmittedKernel {
    // Every kernel waits for its predecessor first (programmatic dependent launch).
    let text = match text
        .find("RLX_FN(")
        .and_then(|i| text[i..].find('{').map(|j| i + j + 1))
    {
        Some(at) => format!("{}\nRLX_GRID_WAIT();{}", &text[..at], &text[at..]),
        None => text,
    };
    let hash = crate::nvrtc::stable_hash(&[text.as_bytes()]);
    let function = format!("rlx_{family}_{}", &hash[..12]);
    EmittedKernel {
        label: label.to_string(),
        source: text.replace("RLX_FN", &function),
        function,
        launch,
        args,
    }
}

/// The source of a program: the prelude, then every distinct function once.
pub fn program_source<'a>(kernels: impl IntoIterator<Item = &'a EmittedKernel>) -> String {
    let mut seen = std::collections::HashSet::new();
    let mut out = String::from(PRELUDE);
    for k in kernels {
        if seen.insert(k.function.clone()) {
            out.push('\n');
            out.push_str(&k.source);
        }
    }
    out
}

/// Parameter list text: `const T* __restrict__ in0, ...` for inputs, then the output.
pub fn params(inputs: &[(&str, String)], output: (&str, String), restrict: bool) -> String {
    let r = if restrict { " __restrict__" } else { "" };
    let mut ps: Vec<String> = inputs
        .iter()
        .map(|(ty, name)| format!("const {ty}*{r} {name}"))
        .collect();
    ps.push(format!("{}*{r} {}", output.0, output.1));
    ps.join(", ")
}

/// Blocks for a grid-stride loop over `n` items, `per_block` items per block per pass.
pub fn grid_for(n: usize, per_block: usize) -> usize {
    n.div_ceil(per_block.max(1)).clamp(1, 1 << 30)
}
