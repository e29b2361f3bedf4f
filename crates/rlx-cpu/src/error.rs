//! The crate's error type: the reference interpreter's ([`InterpError`]), so a failure reads
//! the same whether the interpreter or the fast path found it. Every variant names what was
//! wrong and where: the input, param, buffer, node or kernel, with op, dtypes and shapes.

pub use rlx_interp::InterpError;

/// What went wrong while evaluating or compiling on the CPU.
pub type CpuError = InterpError;
