//! The exceptions `rlx` raises: `RlxError` and one subclass per kind of failure, each
//! carrying the message the CLI prints for the same failure.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::PyErr;
use rlx_llm::LlmError;
use rlx_runtime::RuntimeError;

create_exception!(
    rlx,
    RlxError,
    PyException,
    "Base class of every error rlx raises."
);
create_exception!(
    rlx,
    InvalidArgument,
    RlxError,
    "A bad input or argument: a missing, unknown or mistyped input, a wrong rank or size, a setting out of range."
);
create_exception!(
    rlx,
    ModelError,
    RlxError,
    "The model cannot be read, imported or compiled: a missing file, an unsupported node, a malformed graph."
);
create_exception!(
    rlx,
    DeviceError,
    RlxError,
    "The device has no backend in this build or is not available here (the message says why)."
);
create_exception!(
    rlx,
    RunError,
    RlxError,
    "The device failed while compiling or running the model."
);

/// A message raised as `InvalidArgument`.
pub fn invalid(message: impl Into<String>) -> PyErr {
    InvalidArgument::new_err(message.into())
}

/// A runtime error as the exception of its kind.
pub fn runtime(e: RuntimeError) -> PyErr {
    let message = e.to_string();
    match e {
        RuntimeError::Device(_) => DeviceError::new_err(message),
        // host work between stages fails on values the inputs gave (shapes, thresholds)
        RuntimeError::Input { .. }
        | RuntimeError::Output { .. }
        | RuntimeError::Buffer(_)
        | RuntimeError::Host { .. } => InvalidArgument::new_err(message),
        RuntimeError::Unsupported { .. } => DeviceError::new_err(message),
        RuntimeError::Backend { .. } | RuntimeError::Diverged { .. } => RunError::new_err(message),
        RuntimeError::Ir(_)
        | RuntimeError::Opt(_)
        | RuntimeError::Legalize(_)
        | RuntimeError::Param { .. }
        | RuntimeError::Specialise { .. } => ModelError::new_err(message),
    }
}

/// A generation or embedding error as the exception of its kind.
pub fn llm(e: LlmError) -> PyErr {
    let message = e.to_string();
    match e {
        LlmError::Invalid(_) | LlmError::Capacity(_) => InvalidArgument::new_err(message),
        LlmError::Model(_) => ModelError::new_err(message),
        LlmError::Run(_) => RunError::new_err(message),
        LlmError::Device(_) => DeviceError::new_err(message),
    }
}

/// Any error that means the model file could not be used.
pub fn model(e: impl std::fmt::Display) -> PyErr {
    ModelError::new_err(e.to_string())
}
