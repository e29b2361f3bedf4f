//! The reader's error type.

use std::path::PathBuf;

/// Why a GGUF file could not be read or used.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The file could not be opened or mapped.
    #[error("{path}: {source}")]
    Io {
        /// the file
        path: PathBuf,
        /// the OS error
        source: std::io::Error,
    },
    /// The bytes are not a valid GGUF file.
    #[error("malformed GGUF{}: {message} (at byte {offset})", path_suffix(.path))]
    Malformed {
        /// the file, when known
        path: Option<PathBuf>,
        /// what was wrong
        message: String,
        /// byte offset where reading failed
        offset: usize,
    },
    /// A metadata key is missing or has another type.
    #[error("GGUF metadata `{key}`: {message}")]
    Metadata {
        /// the key
        key: String,
        /// what was wrong
        message: String,
    },
    /// A tensor is missing, or of a type or shape that cannot be used.
    #[error("GGUF tensor `{name}`: {message}")]
    Tensor {
        /// the tensor name
        name: String,
        /// what was wrong
        message: String,
    },
    /// The embedded tokenizer is missing pieces or inconsistent.
    #[error("GGUF tokenizer: {0}")]
    Tokenizer(String),
}

fn path_suffix(p: &Option<PathBuf>) -> String {
    p.as_ref()
        .map(|p| format!(" {}", p.display()))
        .unwrap_or_default()
}
