//! The RLX runtime: the [`Backend`] trait, the backend registry, [`Session`] and
//! [`CompiledGraph`], and [`DynamicGraph`] for models compiled per shape of their inputs.
//!
//! The runtime never names a backend except in `builtin/`, where each builtin registers
//! itself behind its Cargo feature. Everything else goes through [`backend_for`].

mod backend;
mod binding;
mod buffer;
mod builtin;
mod dynamic;
mod error;
mod kernels_after;
mod params;
mod registry;
mod session;
pub mod settings;
mod validate;

pub use backend::{
    check_same, median_kernels, Backend, CompileOptions, Executable, KernelTime, RunProfile,
};
pub use binding::Binding;
pub use buffer::{BoundValue, BufferStorage, DeviceBuffer, RawHandle};
pub use dynamic::{
    signature, BoxError, DynamicGraph, HostStep, Specialised, Specialiser, DEFAULT_CACHE_SIZE,
};
pub use error::RuntimeError;
pub use kernels_after::{kernels_after, KernelsAfter};
pub use params::{ParamMap, ParamStore};
pub use registry::{
    auto_device, backend_for, device_statuses, is_available, register_backend, registered_devices,
    BackendFactory, DeviceStatus,
};
pub use session::{
    bind_inputs, bind_values, dispatch_report, Bindings, CompiledGraph, Session, Variant,
};
pub use validate::{tolerance, NodeCheck, Validation};
