//! The fast path.
pub mod plan;
/// Options.
#[derive(Debug, Clone, Default)]
pub struct CpuOptions { /// threads
 pub threads: Option<usize> }
/// Program.
pub struct CpuProgram;
/// Timing.
pub struct KernelTiming;
