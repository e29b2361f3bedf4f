//! The RLX intermediate representation.
//!
//! - [`DType`], [`Shape`] with static and symbolic [`Dim`]s, host [`Tensor`]s;
//! - the op set ([`Op`], [`UnaryOp`], [`BinaryOp`], [`ReduceOp`]) with reference scalar
//!   semantics shared by the validation interpreter and constant folding;
//! - the [`Graph`] builder with shape/dtype inference at every step, a verifier and a text
//!   dump;
//! - the kernel IR ([`kernel`]) that the optimizer produces and every backend consumes.
//!
//! This crate knows no device: it describes computations, never where they run.

mod buffer;
pub mod composite;
mod dtype;
mod error;
mod graph;
mod infer;
pub mod int_conv;
pub mod int_matmul;
pub mod kernel;
pub mod kernel_views;
pub mod narrow;
mod op;
pub mod quant;
pub mod render;
pub mod sample;
pub mod scalar;
mod shape;
mod tensor;

pub use buffer::{Buffer, BufferOwner, Pod};
pub use composite::Composite;
pub use dtype::DType;
pub use error::IrError;
pub use graph::{Graph, Node, NodeId, TensorType};
pub use infer::infer;
pub use int_conv::IntConv;
pub use int_matmul::{AInput, IntMatMul};
pub use narrow::{F4E2M1, F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, F8E8M0};
pub use op::{
    slice_range, ArgOp, AttnMask, BinaryOp, Conv2dParams, Op, PadMode, Pool2dParams, PoolKind,
    ReduceOp, UnaryOp,
};
pub use quant::QuantFormat;
pub use shape::{broadcast_shapes, contiguous_strides, normalize_axis, Dim, Shape};
pub use tensor::{SplitMix64, Tensor, TensorData, TensorSizeError};
