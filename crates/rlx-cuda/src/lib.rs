//! rlx-cuda: the CUDA backend of RLX.
//!
//! - [`probe`]: availability and device facts, never touching cudarc's panicking safe API
//!   before the driver library is known to load;
//! - [`codegen`]: CUDA C emitted from kernel IR, one rule per op in a file per op family;
//! - [`nvrtc`]: compilation for the device's own architecture with an on-disk cache.

pub mod codegen;
mod error;
pub mod nvrtc;
pub mod probe;

pub use error::CudaError;
