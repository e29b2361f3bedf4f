//! rlx-wgpu: the wgpu backend of RLX, serving the `gpu`, `vulkan`, `opengl` and `webgpu`
//! devices (and `metal` on Apple hosts).
//!
//! - [`probe`]: adapter selection per device flavour, never panicking; availability with
//!   reasons a person can act on;
//! - [`codegen`]: WGSL emitted from kernel IR, one shader per kernel, specialized to static
//!   shapes; tiled GEMM with workgroup memory; reductions with workgroup trees;
//! - [`memory`]: a block provider of large wgpu storage buffers under rlx-mem's
//!   sub-allocator; tensors bind as aligned sub-ranges;
//! - `program` ([`WgpuProgram`]): pipelines and bind groups built at compile time, one
//!   command encoder per run;
//! - `interop` (Linux): exportable Vulkan buffers and timeline semaphores, the Vulkan half
//!   of CUDA↔Vulkan zero-copy (`crates/rlx-interop` joins the CUDA half);
//! - [`staging`]: the staging pool every upload and download goes through (a ring of
//!   host-visible chunks on rlx-mem's staging ring, sized by [`WgpuOptions`]).
//!
//! Shader bounds checks: on native adapters (`gpu`, `vulkan`, `opengl`, `metal`) shader
//! modules are built without wgpu's run-time bounds checks, since every generated access is
//! guarded or clamped and the differential tests check the indexing against the
//! interpreter; `RLX_WGPU_CHECKED=1` turns the checks back on for debugging. `webgpu` is
//! always checked, as browsers are.
//!
//! Adapter features: where the adapter offers them (never on `webgpu`, which keeps the
//! WebGPU defaults), the device is created with SHADER_F16 (f16 tensors bind as
//! `array<f16>`, GEMM reads `vec4<f16>` and accumulates in f32) and SUBGROUP (reductions,
//! softmax and norms combine with `subgroupAdd`/`subgroupMax`/...); without them the packed
//! f16 words and workgroup-memory trees remain. Contiguous f32/f16 elementwise kernels read
//! and write `vec4`s. `RLX_WGPU_NO_F16=1`, `RLX_WGPU_NO_SUBGROUPS=1` and `RLX_WGPU_NO_VEC4=1`
//! turn each path off (see [`WgpuOptions`]).

#![warn(missing_docs)]

pub mod arena;
pub mod caps;
pub mod codegen;
mod error;
#[cfg(all(unix, not(target_vendor = "apple")))]
pub mod interop;
pub mod memory;
mod options;
pub mod plan;
pub mod probe;
mod program;
pub mod settings;
pub mod staging;
pub mod transfer;
pub mod weights;

pub use error::WgpuError;
pub use options::{WgpuOptions, DEFAULT_STAGING_BYTES};
pub use probe::Flavor;
pub use program::{target, target_with, BoundInput, CompileStats, WgpuProgram};
/// The wgpu crate RLX is built on, for interop with a device buffer's `wgpu::Buffer`.
pub use wgpu;
