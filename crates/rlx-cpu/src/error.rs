//! The crate's error type. Every variant names what was wrong and where: the input, param,
//! buffer, node or kernel, with op, dtypes and shapes. The variants mirror
//! [`InterpError`]'s one for one, so an interpreter failure reads the same through the fast
//! path.

use rlx_interp::InterpError;

/// What went wrong while evaluating or compiling on the CPU.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CpuError {
    /// A run-time input or param was not bound.
    #[error("missing {kind} `{name}`")]
    Missing {
        /// "input" or "param"
        kind: &'static str,
        /// its name
        name: String,
    },
    /// A bound tensor does not have the declared dtype or shape.
    #[error("{kind} `{name}`: expected {expected}, got {got}")]
    Mismatch {
        /// "input", "param" or "constant"
        kind: &'static str,
        /// its name
        name: String,
        /// the declared type, e.g. `f32[2,3]`
        expected: String,
        /// the bound type
        got: String,
    },
    /// An op rejected its operands (arity, dtype, shape).
    #[error("{op}: {message}; inputs: {inputs}")]
    Op {
        /// op name
        op: &'static str,
        /// the operand types, formatted
        inputs: String,
        /// what rule was broken
        message: String,
    },
    /// A gather index outside its axis.
    #[error("{op}: index {index} out of range for axis {axis} of size {size}")]
    IndexOutOfRange {
        /// op name
        op: &'static str,
        /// the offending index
        index: i64,
        /// the indexed axis
        axis: usize,
        /// its size
        size: usize,
    },
    /// A graph node failed.
    #[error("node `{node}`: {source}")]
    Node {
        /// node name
        node: String,
        /// the failure
        source: Box<CpuError>,
    },
    /// A kernel failed or is malformed.
    #[error("kernel `{kernel}`: {source}")]
    Kernel {
        /// kernel name
        kernel: String,
        /// the failure
        source: Box<CpuError>,
    },
    /// A program, graph or kernel breaks a structural rule (the message says which).
    #[error("{0}")]
    Invalid(String),
}

impl CpuError {
    /// Wraps an error with the kernel it happened in.
    pub(crate) fn in_kernel(self, kernel: &str) -> CpuError {
        CpuError::Kernel {
            kernel: kernel.to_string(),
            source: Box::new(self),
        }
    }
}

impl From<InterpError> for CpuError {
    fn from(e: InterpError) -> CpuError {
        match e {
            InterpError::Missing { kind, name } => CpuError::Missing { kind, name },
            InterpError::Mismatch {
                kind,
                name,
                expected,
                got,
            } => CpuError::Mismatch {
                kind,
                name,
                expected,
                got,
            },
            InterpError::Op {
                op,
                inputs,
                message,
            } => CpuError::Op {
                op,
                inputs,
                message,
            },
            InterpError::IndexOutOfRange {
                op,
                index,
                axis,
                size,
            } => CpuError::IndexOutOfRange {
                op,
                index,
                axis,
                size,
            },
            InterpError::Node { node, source } => CpuError::Node {
                node,
                source: Box::new((*source).into()),
            },
            InterpError::Kernel { kernel, source } => CpuError::Kernel {
                kernel,
                source: Box::new((*source).into()),
            },
            InterpError::Invalid(m) => CpuError::Invalid(m),
        }
    }
}
