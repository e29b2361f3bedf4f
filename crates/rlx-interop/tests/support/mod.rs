//! Helpers shared by the zero-copy tests and the hand-off benchmark.

pub mod shader;
