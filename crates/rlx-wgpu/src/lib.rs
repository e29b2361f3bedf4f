//! rlx-wgpu: the wgpu backend of RLX, serving the `gpu`, `vulkan`, `opengl` and `webgpu`
//! devices (and `metal` on Apple hosts).
//!
//! - [`probe`]: adapter selection per device flavour, never panicking; availability with
//!   reasons a person can act on;
//! - [`codegen`]: WGSL emitted from kernel IR, one shader per kernel, specialized to static
//!   shapes; tiled GEMM with workgroup memory; reductions with workgroup trees;
//! - [`memory`]: a block provider of large wgpu storage buffers under rlx-mem's
//!   sub-allocator; tensors bind as aligned sub-ranges;
//! - [`program`]: pipelines and bind groups built at compile time, one command encoder per
//!   run, readback through a staging ring.

#![warn(missing_docs)]

pub mod caps;
pub mod codegen;
mod error;
pub mod memory;
pub mod plan;
pub mod probe;
mod program;
pub mod weights;

pub use error::WgpuError;
pub use probe::Flavor;
pub use program::{target, CompileStats, WgpuOptions, WgpuProgram};
