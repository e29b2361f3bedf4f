//! The crate's error type. Every variant names what was wrong and where: the input, param,
//! buffer, node or kernel, with op, dtypes and shapes.

use rlx_ir::Tensor;

/// What went wrong while evaluating a graph, op, loop kernel or kernel program, or checking
/// a program.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InterpError {
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
        source: Box<InterpError>,
    },
    /// A kernel failed or is malformed.
    #[error("kernel `{kernel}`: {source}")]
    Kernel {
        /// kernel name
        kernel: String,
        /// the failure
        source: Box<InterpError>,
    },
    /// A program, graph or kernel breaks a structural rule (the message says which).
    #[error("{0}")]
    Invalid(String),
}

impl InterpError {
    /// Wraps an error with the kernel it happened in.
    pub fn in_kernel(self, kernel: &str) -> InterpError {
        InterpError::Kernel {
            kernel: kernel.to_string(),
            source: Box::new(self),
        }
    }
}

/// Formats operand types as `f32[2,3], i64[4]` for error messages.
pub(crate) fn fmt_types(inputs: &[&Tensor]) -> String {
    if inputs.is_empty() {
        return "none".into();
    }
    inputs
        .iter()
        .map(|t| format!("{}{:?}", t.dtype(), t.shape()).replace(' ', ""))
        .collect::<Vec<_>>()
        .join(", ")
}
