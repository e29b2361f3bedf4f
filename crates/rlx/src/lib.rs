//! RLX: compile a model once, run it fast on any device.
//!
//! This crate is the `rlx` command-line tool and a [`prelude`] re-exporting the common
//! surface: devices, the graph builder, sessions. [`demo`] holds the bundled demo model;
//! [`onnx`] runs ONNX models with dynamic axes, compiled per shape of their inputs.

pub mod demo;
pub use rlx_onnx::runtime as onnx;

/// The common surface in one import: `use rlx::prelude::*;`.
pub mod prelude {
    pub use rlx_driver::{Availability, Device, DeviceError};
    pub use rlx_ir::{
        BinaryOp, Conv2dParams, DType, Dim, Graph, NodeId, Op, Pool2dParams, PoolKind, ReduceOp,
        Shape, Tensor, TensorType, UnaryOp,
    };
    pub use rlx_runtime::{
        auto_device, backend_for, register_backend, registered_devices, CompileOptions,
        CompiledGraph, DynamicGraph, RuntimeError, Session,
    };
}
