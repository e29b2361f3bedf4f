//! The importers' error: every failure names the file and, where one is involved, the tensor
//! with the shape and dtype the model expects.

/// Why loading a model (weights, config, tokenizer) failed.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// the file
        path: String,
        /// the OS error
        source: std::io::Error,
    },
    /// A required file of a model folder is absent.
    #[error("{dir}: no `{file}` ({what})")]
    MissingFile {
        /// the model folder
        dir: String,
        /// the file name expected in it
        file: String,
        /// what the file is for
        what: String,
    },
    /// A safetensors file is malformed.
    #[error("{file}: not a valid safetensors file: {message}")]
    Safetensors {
        /// the file
        file: String,
        /// what the parser said
        message: String,
    },
    /// A tensor the model needs is not in its weights.
    #[error("{file}: missing tensor `{name}` (expected {expected}){hint}")]
    MissingTensor {
        /// the weights file (or files)
        file: String,
        /// the tensor name the model looks for
        name: String,
        /// expected dtype and shape, e.g. `f32[384, 384]`
        expected: String,
        /// a "did you mean" suffix, or empty
        hint: String,
    },
    /// A tensor is present but has the wrong shape or an unusable dtype.
    #[error("{file}: tensor `{name}`: expected {expected}, found {found}")]
    TensorMismatch {
        /// the weights file
        file: String,
        /// the tensor name
        name: String,
        /// expected dtype and shape
        expected: String,
        /// what the file holds
        found: String,
    },
    /// `config.json` is malformed, inconsistent, or describes an unsupported model.
    #[error("{file}: {message}")]
    Config {
        /// the config file
        file: String,
        /// what is wrong
        message: String,
    },
    /// `tokenizer.json` could not be loaded or used.
    #[error("{file}: tokenizer: {message}")]
    Tokenizer {
        /// the tokenizer file
        file: String,
        /// what the tokenizer library said
        message: String,
    },
    /// Bad input to a model (empty batch, sequence too long, ...).
    #[error("{0}")]
    Input(String),
    /// Downloading from a model hub failed.
    #[error("hub: {0}")]
    Hub(String),
    /// Building the graph failed (a bug in the builder or an inconsistent config).
    #[error("building the graph: {0}")]
    Graph(#[from] rlx_ir::IrError),
}

/// Shorthand for results of this crate.
pub type Result<T, E = ModelError> = std::result::Result<T, E>;
