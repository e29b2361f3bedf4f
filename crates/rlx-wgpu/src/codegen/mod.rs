//! WGSL code generation from kernel IR.
//!
//! Every kernel of a [`rlx_ir::kernel::KernelProgram`] becomes one [`Emitted`] compute
//! shader specialized to its static shapes (dims, strides and offsets are literals), with
//! the storage bindings it reads and writes and its dispatch size. Identical shaders (the
//! same layer repeated) share one pipeline. Kernel bodies go through the shared walker of
//! [`rlx_ir::render`] with WGSL as its [`Dialect`](rlx_ir::render::Dialect) (`dialect`).
//! Files follow the op families: scalar rules in `scalar`, fused loop nests in `loops`, how row-parallel kernels combine a row's partial
//! results (workgroup trees or subgroup operations) in `rows`, GEMM in `gemm`, the other
//! library kernels in `library`. The [`Target`] says which optional forms (native f16,
//! subgroups, vec4) a shader may use.

pub mod dialect;
pub mod gemm;
pub mod library;
pub mod loops;
pub mod rows;
pub mod scalar;

use rlx_ir::kernel::BufferId;
use rlx_ir::DType;
use std::collections::HashMap;

/// Helpers every shader starts with (NaN-propagating max/min, erf, pow, half and byte
/// packing).
pub const PRELUDE: &str = include_str!("prelude.wgsl");

/// Threads per workgroup of the one-dimensional kernels.
pub const WG: usize = 256;

/// The device facts code generation depends on.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// workgroups per dispatch dimension (65535 on most adapters)
    pub max_workgroups: u32,
    /// bytes of workgroup memory
    pub max_workgroup_storage: u32,
    /// invocations per workgroup
    pub max_invocations: u32,
    /// use the simple GEMM (one invocation per output element) instead of the tiled one:
    /// Mesa's GL driver takes about a minute to compile the tiled shader
    pub simple_gemm: bool,
    /// f16 is a WGSL type (wgpu's SHADER_F16 granted): f16 tensors bind as `array<f16>`
    /// and GEMM reads them as `vec4<f16>`; without it they live packed in u32 words
    pub shader_f16: bool,
    /// subgroup operations (wgpu's SUBGROUP granted): reductions combine with
    /// `subgroupAdd`/`subgroupMax`/... before (or instead of) a workgroup-memory tree
    pub subgroups: bool,
    /// contiguous f32 (and native f16) elementwise kernels and GEMM tiles read and write
    /// `vec4`s where counts and offsets allow
    pub vec4: bool,
}

impl Target {
    /// The WebGPU defaults: what every adapter offers.
    pub fn webgpu_defaults() -> Target {
        Target {
            max_workgroups: 65535,
            max_workgroup_storage: 16384,
            max_invocations: 256,
            simple_gemm: false,
            shader_f16: false,
            subgroups: false,
            vec4: true,
        }
    }
}

/// What a binding points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArgRef {
    /// a program buffer
    Buffer(BufferId),
    /// a scratch region planned with the arena
    Scratch(usize),
}

/// One storage binding of a shader.
#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    /// what it points at
    pub arg: ArgRef,
    /// the element dtype it is read or written as
    pub dtype: DType,
    /// written through atomics (sub-word stores)
    pub atomic: bool,
    /// elements per array entry: 1, or 4 for `array<vec4<..>>`
    pub width: usize,
}

/// One generated compute shader with how to dispatch it.
#[derive(Debug, Clone, PartialEq)]
pub struct Emitted {
    /// the kernel IR name it came from
    pub label: String,
    /// the complete WGSL module
    pub wgsl: String,
    /// workgroups along x, y, z
    pub workgroups: [u32; 3],
    /// storage bindings in binding order
    pub bindings: Vec<Binding>,
}

/// Collects a shader's bindings while its body is generated, and spells loads and stores
/// for the target's storage rules.
#[derive(Debug)]
pub struct Kb {
    bindings: Vec<Binding>,
    index: HashMap<(ArgRef, DType, bool, usize), usize>,
    native_f16: bool,
}

impl Kb {
    /// A builder with no bindings for `target`.
    pub fn new(target: &Target) -> Kb {
        Kb {
            bindings: Vec::new(),
            index: HashMap::new(),
            native_f16: target.shader_f16,
        }
    }

    fn bind(&mut self, arg: ArgRef, dtype: DType, atomic: bool, width: usize) -> String {
        let n = self.bindings.len();
        let i = *self.index.entry((arg, dtype, atomic, width)).or_insert(n);
        if i == n {
            self.bindings.push(Binding {
                arg,
                dtype,
                atomic,
                width,
            });
        }
        format!("b{i}")
    }

    /// True when `dtype` elements are their own WGSL type in storage (f32, i32, and f16
    /// with SHADER_F16); the others live in u32 words.
    pub fn native(&self, dtype: DType) -> bool {
        matches!(dtype, DType::F32 | DType::I32) || (dtype == DType::F16 && self.native_f16)
    }

    /// The binding name for reading `arg` as `dtype`.
    pub fn read(&mut self, arg: ArgRef, dtype: DType) -> String {
        self.bind(arg, dtype, false, 1)
    }

    /// The binding name for reading or writing `arg` as `vec4`s of `dtype` (f32, or f16
    /// with SHADER_F16); index it with element offsets divided by 4.
    pub fn vec4(&mut self, arg: ArgRef, dtype: DType) -> String {
        self.bind(arg, dtype, false, 4)
    }

    /// The binding name for writing `arg` as `dtype`.
    pub fn write(&mut self, arg: ArgRef, dtype: DType) -> String {
        let atomic = !self.native(dtype) && scalar::sub_word(dtype);
        self.bind(arg, dtype, atomic, 1)
    }

    /// Element `idx` of binding `b` (holding `dtype`) as its compute value.
    pub fn load(&self, dtype: DType, b: &str, idx: &str) -> String {
        if dtype == DType::F16 && self.native_f16 {
            format!("f32({b}[{idx}])")
        } else {
            scalar::load(dtype, b, idx)
        }
    }

    /// A statement storing compute value `v` as element `idx` of binding `b`.
    pub fn store(&self, dtype: DType, b: &str, idx: &str, v: &str) -> String {
        if dtype == DType::F16 && self.native_f16 {
            format!("{b}[{idx}] = rlx_to_f16({v});\n")
        } else {
            scalar::store(dtype, b, idx, v)
        }
    }

    fn element_type(&self, b: &Binding) -> String {
        let scalar = if b.atomic {
            "atomic<u32>"
        } else if self.native(b.dtype) {
            scalar::native_type(b.dtype)
        } else {
            scalar::binding_type(b.dtype)
        };
        match b.width {
            4 => format!("vec4<{scalar}>"),
            _ => scalar.to_string(),
        }
    }

    /// Finishes a shader: `enable f16;` when it uses f16, prelude, bindings, `body` (which
    /// defines `main`).
    pub fn finish(self, label: &str, body: String, workgroups: [u32; 3]) -> Emitted {
        let mut s = String::new();
        for (i, b) in self.bindings.iter().enumerate() {
            s += &format!(
                "@group(0) @binding({i}) var<storage, read_write> b{i}: array<{}>;\n",
                self.element_type(b)
            );
        }
        s += &body;
        let mut wgsl = prelude_for(&s) + &s;
        if uses_word(&wgsl, "f16") {
            wgsl = format!("enable f16;\n{wgsl}");
        }
        Emitted {
            label: label.to_string(),
            wgsl,
            workgroups,
            bindings: self.bindings,
        }
    }
}

/// The prelude items `text` uses, directly or through other items, in prelude order (so a
/// shader carries only the helpers it calls).
pub fn prelude_for(text: &str) -> String {
    // Items: a comment line, then `var<private> NAME ...;` or `fn NAME(...` blocks.
    let mut items: Vec<(String, String)> = Vec::new();
    for line in PRELUDE.lines() {
        let name = line
            .strip_prefix("fn ")
            .or_else(|| line.strip_prefix("var<private> "))
            .and_then(|r| r.split(['(', ':', ' ']).next());
        match name {
            Some(n) => items.push((n.to_string(), format!("{line}\n"))),
            None => {
                if let Some(last) = items.last_mut() {
                    last.1 += line;
                    last.1.push('\n');
                }
            }
        }
    }
    let uses = uses_word;
    let mut keep = vec![false; items.len()];
    let mut changed = true;
    while changed {
        changed = false;
        for i in 0..items.len() {
            if keep[i] {
                continue;
            }
            let name = &items[i].0;
            let used = uses(text, name)
                || items
                    .iter()
                    .enumerate()
                    .any(|(j, (_, body))| keep[j] && j != i && uses(body, name));
            if used {
                keep[i] = true;
                changed = true;
            }
        }
    }
    items
        .into_iter()
        .zip(keep)
        .filter(|(_, k)| *k)
        .map(|((_, body), _)| body)
        .collect()
}

/// True when `text` holds `word` as a whole identifier (not inside a longer one).
pub fn uses_word(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(i, _)| {
        let after = text[i + word.len()..].chars().next();
        let before = text[..i].chars().last();
        !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// Workgroups for `n` items at `per_group` items per workgroup, capped at the dispatch
/// limit (kernels loop over the rest).
pub fn groups_for(n: usize, per_group: usize, target: &Target) -> u32 {
    n.div_ceil(per_group.max(1))
        .clamp(1, target.max_workgroups as usize) as u32
}

/// A grid-stride loop header over `n` items with `per_group` items per workgroup:
/// `for (var {var} = ...; {var} < n; {var} += ...) {`.
pub fn grid_loop(var: &str, n: usize, groups: u32, per_group: usize, lane: &str) -> String {
    format!(
        "for (var {var}: i32 = i32(wg.x) * {per_group} + {lane}; {var} < {n}; {var} += {}) {{\n",
        groups as usize * per_group
    )
}

/// The `main` signature with the builtins every kernel uses.
pub fn main_sig(threads: usize) -> String {
    format!(
        "@compute @workgroup_size({threads})\nfn main(@builtin(workgroup_id) wg: vec3<u32>, \
         @builtin(local_invocation_index) lid_u: u32) {{\nlet lid = i32(lid_u);\n"
    )
}

/// Checks that every index fits 32-bit shader arithmetic.
///
/// # Errors
/// A sentence naming the count.
pub fn check_i32(what: &str, n: usize) -> Result<(), String> {
    if n >= (1usize << 31) {
        Err(format!(
            "{what} has {n} elements; WGSL kernels index with 32-bit integers (limit 2^31)"
        ))
    } else {
        Ok(())
    }
}

pub use rlx_ir::kernel::{row_major as contiguous, IndexSpace};

/// [`rlx_ir::render::offset`] in parentheses: `(base + Σ {prefix}{d} * strides[d])`.
pub fn offset(base: &str, prefix: &str, strides: &[isize]) -> String {
    format!("({})", rlx_ir::render::offset(base, prefix, strides))
}

pub use rlx_ir::render::broadcast_strides;
