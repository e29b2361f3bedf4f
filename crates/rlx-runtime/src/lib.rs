//! The RLX runtime: the [`Backend`] trait, the backend registry, [`Session`] and
//! [`CompiledGraph`].
//!
//! The runtime never names a backend except in `builtin/`, where each builtin registers
//! itself behind its Cargo feature. Everything else goes through [`backend_for`].

mod backend;
mod builtin;
mod error;
mod params;
mod registry;
mod session;

pub use backend::{Backend, CompileOptions, Executable};
pub use error::RuntimeError;
pub use params::{ParamMap, ParamStore};
pub use registry::{
    auto_device, backend_for, register_backend, registered_devices, BackendFactory,
};
pub use session::{CompiledGraph, Session, Variant};
