//! CUDA C code generation from kernel IR.
//!
//! Every kernel of a [`rlx_ir::kernel::KernelProgram`] becomes one [`EmittedKernel`]: a
//! `__global__` function specialized to its static shapes (dims and strides are literals, so
//! index math compiles to multiplications by constants), its launch geometry, and the
//! buffers its pointer arguments refer to. Functions are named by a hash of their text, so
//! identical kernels (the same layer repeated) compile once. A program's source is the
//! prelude plus each distinct function.
//!
//! Kernel bodies go through the shared walker of [`rlx_ir::render`] with CUDA C as its
//! [`Dialect`](rlx_ir::render::Dialect) (`dialect`). Files follow the op families they
//! lower: scalar rules in `unary`, `binary`, `reduce`, `dtype`; fused loop nests in `loops`
//! (with `index`) and fused epilogues of library kernels in `epilogue`; library kernels in
//! `softmax`, `norm`, `gather`, `movement`, `pool`, `argreduce`, `attention`, `conv`; wide
//! (up to 16-byte) vector moves of f32/f16/bf16 in `vector`.

pub mod argreduce;
pub mod attention;
pub mod binary;
pub mod conv;
pub mod dialect;
pub mod dtype;
mod epilogue;
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

pub use dialect::CudaC;
pub use epilogue::EpilogueCtx;
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
    /// a streaming kernel (elementwise, flash attention) whose input the step just
    /// before it wrote front to back, more than this many bytes, walks it back to front, so
    /// it starts on the part still in L2 and leaves its own output's start there for the next
    /// step; None never (see [`crate::WalkBack`], which sets it to half the L2 by default)
    pub walk_back_above: Option<usize>,
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
    /// a timed choice; off unless `RLX_CUDA_A_PROLOGUE=1`: on an H200 the exact GELU beside
    /// the tensor cores made it slower than the steps it replaces, see `plan::norm`)
    pub a_prologue: bool,
    /// the planner's switches for A/B runs ([`crate::settings::Tuning`])
    pub tuning: crate::settings::Tuning,
}

impl Target {
    /// An H200 (`sm_90a`, 132 SMs, 227 KiB shared memory per block): the target compile
    /// checks use on machines without a GPU.
    pub fn h200() -> Target {
        Target {
            arch: "sm_90a".into(),
            sm_count: 132,
            max_shared: 227 * 1024,
            walk_back_above: crate::settings::walk_back().threshold(50 * 1024 * 1024),
            flash_attention: true,
            flash_warps: crate::settings::flash_warps(),
            flash_keys: crate::settings::flash_keys(),
            flash_resident: crate::settings::FLASH_RESIDENT.switch(),
            a_prologue: crate::settings::A_PROLOGUE.switch(),
            tuning: crate::settings::Tuning::from_env(),
        }
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
    /// the kernel walks its index space back to front (see [`Target::walk_back_above`])
    pub walks_back: bool,
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
        walks_back: false,
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

/// Most modules [`program_sources`] splits a program into.
pub const MAX_PARTS: usize = 8;

/// Source bytes (kernels, prelude aside) below which a program stays one module: NVRTC's
/// fixed cost per program would outweigh compiling in parallel.
pub const PART_BYTES: usize = 8 * 1024;

/// The program's sources split into parts NVRTC compiles in parallel, one module each: every
/// distinct function once, in up to [`MAX_PARTS`] parts of about [`PART_BYTES`] or more,
/// balanced by source length (largest first, each to the lightest part; within a part the
/// functions keep their order), each part with the prelude. Deterministic, so each part's
/// cache key stays the same from run to run and a changed kernel recompiles only its part.
/// Returns each part's source and its functions' names.
pub fn program_sources<'a>(
    kernels: impl IntoIterator<Item = &'a EmittedKernel>,
) -> Vec<(String, Vec<String>)> {
    let mut seen = std::collections::HashSet::new();
    let distinct: Vec<&EmittedKernel> = kernels
        .into_iter()
        .filter(|k| seen.insert(k.function.clone()))
        .collect();
    let total: usize = distinct.iter().map(|k| k.source.len()).sum();
    let parts = (total / PART_BYTES)
        .clamp(1, MAX_PARTS)
        .min(distinct.len().max(1));
    let mut by_size: Vec<usize> = (0..distinct.len()).collect();
    by_size.sort_by_key(|&i| (std::cmp::Reverse(distinct[i].source.len()), i));
    let mut load = vec![0usize; parts];
    let mut part_of = vec![0usize; distinct.len()];
    for i in by_size {
        let lightest = (0..parts).min_by_key(|&p| (load[p], p)).unwrap_or(0);
        load[lightest] += distinct[i].source.len();
        part_of[i] = lightest;
    }
    (0..parts)
        .map(|p| {
            let mut source = String::from(PRELUDE);
            let mut names = Vec::new();
            for (k, _) in distinct.iter().zip(&part_of).filter(|(_, &q)| q == p) {
                source.push('\n');
                source.push_str(&k.source);
                names.push(k.function.clone());
            }
            (source, names)
        })
        .filter(|(_, names)| !names.is_empty())
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(name: &str, bytes: usize) -> EmittedKernel {
        let body = format!("// {name} {}\n", "x".repeat(bytes));
        finish(
            name,
            "t",
            format!("extern \"C\" __global__ void RLX_FN() {{\n{body}}}\n"),
            Launch::linear(1, 32),
            Vec::new(),
        )
    }

    #[test]
    fn large_programs_split_into_balanced_parts_with_every_function_once() {
        // a small program stays one module
        let small = [kernel("a", 100), kernel("b", 200)];
        let parts = program_sources(&small);
        assert_eq!(parts.len(), 1);
        assert_eq!(
            parts[0].1,
            [small[0].function.clone(), small[1].function.clone()]
        );
        assert!(parts[0].0.starts_with(PRELUDE));
        // four large kernels and many small ones (one repeated): balanced parts, each
        // function in exactly one, each part led by the prelude, the same split every time
        let mut ks: Vec<EmittedKernel> =
            (0..4).map(|i| kernel(&format!("big{i}"), 30_000)).collect();
        ks.extend((0..12).map(|i| kernel(&format!("small{i}"), 2_000 + i)));
        ks.push(ks[5].clone());
        let parts = program_sources(&ks);
        assert_eq!(parts, program_sources(&ks));
        assert!(
            parts.len() > 1 && parts.len() <= MAX_PARTS,
            "{}",
            parts.len()
        );
        let mut names: Vec<&String> = parts.iter().flat_map(|(_, n)| n).collect();
        names.sort();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len());
        assert_eq!(names.len(), 16);
        let sizes: Vec<usize> = parts.iter().map(|(s, _)| s.len() - PRELUDE.len()).collect();
        let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
        assert!(hi - lo <= 30_100, "{sizes:?}");
        for (s, n) in &parts {
            assert!(s.starts_with(PRELUDE));
            assert!(n.iter().all(|f| s.contains(f.as_str())));
        }
    }
}
