//! A model argument (`DIR` or `hf:<name>`) to a local folder, and which builder its
//! `config.json` asks for.

use crate::config::read_arch;
use crate::error::{ModelError, Result};
use std::path::{Path, PathBuf};

/// Model families with a graph builder here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// BERT encoders ([`crate::bert`])
    Bert,
    /// Llama decoders ([`crate::llama`]; `rlx generate`)
    Llama,
}

impl Family {
    /// The family's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Family::Bert => "bert",
            Family::Llama => "llama",
        }
    }
}

/// `hf:<owner>/<name>` is fetched from the hub into the cache ([`crate::hub`]); anything
/// else is a local folder that must exist.
///
/// # Errors
/// A local path that is not a folder, or a failing hub fetch.
pub fn resolve(spec: &str) -> Result<PathBuf> {
    if spec.starts_with(crate::hub::PREFIX) {
        return crate::hub::fetch(spec);
    }
    let p = PathBuf::from(spec);
    if !p.is_dir() {
        return Err(ModelError::Io {
            path: spec.into(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "not a model folder (expected a directory with config.json; \
                 scripts/fetch-models.sh puts MiniLM in models/minilm)",
            ),
        });
    }
    Ok(p)
}

/// Which builder a folder's `config.json` asks for.
///
/// # Errors
/// No or malformed `config.json`, or a `model_type` without a builder.
pub fn family(dir: &Path) -> Result<Family> {
    let path = dir.join("config.json");
    if !path.is_file() {
        return Err(ModelError::MissingFile {
            dir: dir.display().to_string(),
            file: "config.json".into(),
            what: "the model's Hugging Face config".into(),
        });
    }
    let arch = read_arch(&path)?;
    let is_bert = arch.model_type == "bert"
        || (arch.model_type.is_empty() && arch.architectures.iter().any(|a| a.starts_with("Bert")));
    if is_bert {
        return Ok(Family::Bert);
    }
    if arch.model_type == "llama" {
        return Ok(Family::Llama);
    }
    Err(ModelError::Config {
        file: path.display().to_string(),
        message: format!(
            "model_type `{}` (architectures {:?}) has no builder; supported: bert, llama",
            arch.model_type, arch.architectures
        ),
    })
}
