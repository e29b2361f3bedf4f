//! rlx-llm: text generation with a Llama-family model on any device, for the CLI, the
//! server and Python alike.
//!
//! - [`Engine`]: one API over the CUDA engine (`rlx-cuda-llm`: batched decode on a paged
//!   KV cache) and the graph path (a [`rlx_runtime::Session`] on the CPU, one KV cache per
//!   sequence; sequences of one cache size decode together, each product reading its
//!   weights once for all of them). Sequences join ([`Engine::add`]) and leave ([`Engine::remove`]) between
//!   steps ([`Engine::step`]), which is what continuous batching needs;
//!   [`Engine::generate`] runs one prompt to the end.
//! - [`chat`]: the model's own chat template (Jinja, through minijinja) applied to a list of
//!   messages.
//! - [`TextStream`]: token ids to text as they come (never splitting a UTF-8 character),
//!   with stop strings.
//! - [`SessionRunner`]: the generator's graphs compiled and run in one session.
//! - [`Embedder`]: sentence embeddings with a BERT-family folder (the CLI's `embed`, the
//!   server's `/v1/embeddings` and Python's `rlx.embed`).

pub mod chat;
mod embed;
mod engine;
mod runner;
mod text;

pub use embed::{Embedder, Embeddings, PAD_MULTIPLE};
pub use engine::{llm_device, BatchResult, Engine, EngineSettings, SeqId};
pub use rlx_models::llama::{GenerationStats, Llama, Sampling};
pub use runner::SessionRunner;
pub use text::TextStream;

/// Errors of generating text.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// The request cannot be run as given: an empty prompt, a token or setting out of range.
    #[error("{0}")]
    Invalid(String),
    /// No room for the request: context, sequence slots or KV cache.
    #[error("{0}")]
    Capacity(String),
    /// The model cannot be loaded or has something the device does not run.
    #[error("{0}")]
    Model(String),
    /// The device or a run failed.
    #[error("{0}")]
    Run(String),
    /// The device has no backend or is not available (the reason is in the error).
    #[error(transparent)]
    Device(#[from] rlx_driver::DeviceError),
}

impl From<rlx_runtime::RuntimeError> for LlmError {
    fn from(e: rlx_runtime::RuntimeError) -> Self {
        use rlx_runtime::RuntimeError as E;
        match e {
            E::Device(d) => LlmError::Device(d),
            E::Input { .. } | E::Output { .. } | E::Buffer(_) | E::Host { .. } => {
                LlmError::Invalid(e.to_string())
            }
            E::Unsupported { .. } => LlmError::Run(e.to_string()),
            E::Ir(_) | E::Opt(_) | E::Legalize(_) | E::Param { .. } | E::Specialise { .. } => {
                LlmError::Model(e.to_string())
            }
            E::Backend { .. } | E::Diverged { .. } => LlmError::Run(e.to_string()),
        }
    }
}

impl From<rlx_models::llama::LlamaError> for LlmError {
    fn from(e: rlx_models::llama::LlamaError) -> Self {
        use rlx_models::llama::LlamaError as E;
        match e {
            E::Run(m) => LlmError::Run(m),
            e => LlmError::Model(e.to_string()),
        }
    }
}

#[cfg(feature = "cuda")]
impl From<rlx_cuda_llm::LlmError> for LlmError {
    fn from(e: rlx_cuda_llm::LlmError) -> Self {
        use rlx_cuda_llm::LlmError as E;
        match e {
            E::Invalid(m) => LlmError::Invalid(m),
            E::Capacity(m) => LlmError::Capacity(m),
            E::Model(m) => LlmError::Model(m),
            E::Cuda(e) => LlmError::Run(e.to_string()),
            E::Run(m) => LlmError::Run(m),
        }
    }
}
