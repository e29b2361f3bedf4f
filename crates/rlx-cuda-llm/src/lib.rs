//! rlx-cuda-llm: Llama-family text generation on CUDA.
//!
//! [`CudaLlm`] takes a [`rlx_models::llama::Llama`] (a GGUF file or a Hugging Face folder),
//! uploads its weights once in their stored format ([`weights`]), keeps a paged KV cache
//! shared by many sequences ([`kv`]), and runs prefill and batched decode through
//! hand-written kernels compiled by NVRTC, decode steps replayed as CUDA graphs and tokens
//! sampled on the device. Sequences join ([`CudaLlm::add`]) and leave
//! ([`CudaLlm::remove`]) between steps ([`CudaLlm::step`]), as continuous batching needs;
//! [`CudaLlm::generate`] runs one sequence to the end.

mod engine;
pub mod kv;
pub mod weights;

pub use engine::{
    format_suffix, int_dot, kernel_names, kernel_source, CudaLlm, KernelTime, LlmOptions, SeqId,
    KERNELS,
};

use rlx_cuda::CudaError;

/// Errors of loading and running a model on CUDA.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// The device, the driver, NVRTC or device memory failed.
    #[error(transparent)]
    Cuda(#[from] CudaError),
    /// The model has something the CUDA kernels do not run.
    #[error("model: {0}")]
    Model(String),
    /// No room: sequence slots, context or KV-cache blocks.
    #[error("{0}")]
    Capacity(String),
    /// A request that cannot be run (an empty prompt, a bad token or setting).
    #[error("{0}")]
    Invalid(String),
    /// A run that failed for several requests at once (the device error's message).
    #[error("{0}")]
    Run(String),
}
