//! The one kernel-IR → source walker every GPU code generator shares, written against a
//! [`Dialect`] that supplies the spellings that differ between languages (CUDA C in
//! `crates/rlx-cuda/src/codegen/dialect.rs`, WGSL in `crates/rlx-wgpu/src/codegen/dialect.rs`).
//!
//! Shared here: the walk over a loop kernel's expression DAG ([`emit_nodes`]: one
//! declaration per needed node, operands named by their index, errors naming the node),
//! the index arithmetic of loop nests ([`loop_spaces`]: a kernel's output and reduction
//! spaces, merged; [`coords`]: a linear index split into coordinates;
//! [`offset`]: a strided offset from coordinates; [`max_offset`]: the largest offset a view
//! reaches; [`broadcast_strides`]; [`numel`]), a fused epilogue's nodes for one result
//! element ([`epilogue_space`], [`epilogue_nodes`]), and, in [`crate::kernel`], which
//! epilogues fuse ([`crate::kernel::LoopKernel::fusable_epilogue`]) and index-space merging. A backend keeps what is really its own: storage layouts, launch geometry,
//! reductions across threads, library kernels.
//!
//! Generated text depends only on the kernel and the dialect, never on a device.

mod dialect;
mod epilogue;
mod index;
mod nodes;

pub use dialect::Dialect;
pub use epilogue::{epilogue_nodes, epilogue_space};
pub use index::{broadcast_strides, coords, loop_spaces, max_offset, numel, offset};
pub use nodes::{emit_nodes, Operand};

#[cfg(test)]
mod tests;
