//! The runtime's error: every failure a user can reach, with the facts to act on.

use rlx_driver::{Device, DeviceError};

/// Why compiling or running failed.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The device has no backend or is unavailable.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// The graph is malformed.
    #[error("invalid graph: {0}")]
    Ir(#[from] rlx_ir::IrError),
    /// An optimization pass or lowering failed.
    #[error(transparent)]
    Opt(#[from] rlx_opt::OptError),
    /// Some nodes cannot run on the device (all are listed).
    #[error(transparent)]
    Legalize(#[from] rlx_opt::LegalizeError),
    /// A run input is missing, unknown, or of the wrong dtype or shape.
    #[error("input `{name}`: {message}")]
    Input {
        /// input name
        name: String,
        /// what is wrong, with expected and given types
        message: String,
    },
    /// A param is missing or of the wrong dtype or shape.
    #[error("param `{name}`: {message}")]
    Param {
        /// param name
        name: String,
        /// what is wrong
        message: String,
    },
    /// A run output bound to a buffer of the wrong dtype or shape, or not an output.
    #[error("output `{name}`: {message}")]
    Output {
        /// output name
        name: String,
        /// what is wrong, with expected and given types
        message: String,
    },
    /// A device buffer operation failed: sizes or types that do not fit, another device's
    /// memory.
    #[error("device buffer: {0}")]
    Buffer(String),
    /// The device lacks an operation (a seam, or memory that is not host-visible).
    #[error("{what} is not supported on {device}")]
    Unsupported {
        /// the device
        device: String,
        /// the operation
        what: String,
    },
    /// The backend failed while compiling or running.
    #[error("{device} backend: {message}")]
    Backend {
        /// which device
        device: Device,
        /// what failed
        message: String,
    },
    /// Building the graph for one shape signature failed (an importer's error).
    #[error("specialising for {bindings}: {source}")]
    Specialise {
        /// the symbol sizes, `batch=2, sequence=7`
        bindings: String,
        /// what the graph builder said
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Validation (`CompileOptions::validate`): a node's value on the device is not the CPU
    /// interpreter's for the same operands.
    #[error("validation on {device}: {check}")]
    Diverged {
        /// the device checked
        device: Device,
        /// the first node that diverged, with its operands
        check: Box<crate::NodeCheck>,
    },
    /// Host work between two stages of a model with data-dependent shapes failed.
    #[error("running on the host for {bindings}: {source}")]
    Host {
        /// the input symbol sizes, `batch=2, sequence=7`
        bindings: String,
        /// what the host step said (the op, node and values involved)
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}
