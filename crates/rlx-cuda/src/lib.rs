//! rlx-cuda: the CUDA backend of RLX.
//!
//! - [`probe`]: availability and device facts, never touching cudarc's panicking safe API
//!   before the driver library is known to load;
//! - [`codegen`]: CUDA C emitted from kernel IR, one rule per op in a file per op family;
//! - [`nvrtc`]: compilation for the device's own architecture with an on-disk cache;
//! - [`plan`]: kernels become steps; [`plan::views`] lets attention read and write
//!   head-split tensors in place of transposed copies, [`plan::merge`] runs sibling GEMMs as
//!   one, `plan::gemm` plans GEMMs, convolutions and GEMM-form attention, and `plan::norm`
//!   offers a GEMM and the norm of its rows as one kernel;
//! - [`memory`]: device pools on rlx-mem, of device or [`managed`] memory as [`settings`]
//!   say; [`staging`]: the pinned pool every upload and download goes through;
//! - `interop` (unix): Vulkan memory and timeline semaphores imported from opaque fds, the
//!   CUDA half of CUDA↔Vulkan zero-copy (`crates/rlx-interop` joins the Vulkan half).

pub mod blas;
pub mod caps;
pub mod codegen;
pub mod device;
mod error;
pub mod gemm;
#[cfg(unix)]
pub mod interop;
pub mod managed;
pub mod mem_calls;
pub mod memory;
pub mod nvrtc;
pub mod plan;
pub mod probe;
mod program;
mod route;
pub mod settings;
pub mod staging;
pub mod tune;
pub mod weights;

pub use error::CudaError;
/// [`plan::merge`] and [`plan::views`] under the names they had before they moved into
/// `plan/`.
pub use plan::{merge as plan_merge, views as plan_views};
pub use program::{BoundInput, CompileStats, CudaOptions, CudaProgram, FusedGemm, WalkBack};
