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
    /// Host work between two stages of a model with data-dependent shapes failed.
    #[error("running on the host for {bindings}: {source}")]
    Host {
        /// the input symbol sizes, `batch=2, sequence=7`
        bindings: String,
        /// what the host step said (the op, node and values involved)
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}
