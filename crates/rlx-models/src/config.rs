//! Hugging Face `config.json`: the architecture tag every folder has, and the BERT family's
//! hyper-parameters.

use crate::error::{ModelError, Result};
use serde::Deserialize;
use std::path::Path;

/// The fields every `config.json` carries that say which builder applies.
#[derive(Debug, Clone, Deserialize)]
pub struct ArchConfig {
    /// `bert`, `llama`, ...
    #[serde(default)]
    pub model_type: String,
    /// e.g. `["BertModel"]`
    #[serde(default)]
    pub architectures: Vec<String>,
}

/// A BERT-family encoder (`model_type: "bert"`): all-MiniLM-L6-v2, BERT-base, ...
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BertConfig {
    /// token vocabulary size
    pub vocab_size: usize,
    /// model width
    pub hidden_size: usize,
    /// encoder layers
    pub num_hidden_layers: usize,
    /// attention heads per layer
    pub num_attention_heads: usize,
    /// feed-forward width
    pub intermediate_size: usize,
    /// feed-forward activation: `gelu` (exact erf), `gelu_new`/`gelu_pytorch_tanh`
    /// (tanh approximation), `relu`, `silu`/`swish`
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// rows of the position table: the longest sequence
    pub max_position_embeddings: usize,
    /// rows of the token-type table
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    /// LayerNorm epsilon
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    /// only `absolute` is supported
    #[serde(default = "default_pos")]
    pub position_embedding_type: String,
    /// `bert`
    #[serde(default)]
    pub model_type: String,
}

fn default_act() -> String {
    "gelu".into()
}
fn default_type_vocab() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}
fn default_pos() -> String {
    "absolute".into()
}

impl BertConfig {
    /// Reads and checks `config.json`.
    ///
    /// # Errors
    /// Unreadable or malformed JSON, missing fields, or values the builder cannot honour
    /// (heads not dividing the width, relative positions, an unknown activation).
    pub fn from_file(path: &Path) -> Result<BertConfig> {
        let label = path.display().to_string();
        let text = read(path)?;
        let cfg: BertConfig = serde_json::from_str(&text).map_err(|e| ModelError::Config {
            file: label.clone(),
            message: format!("not a BERT config: {e}"),
        })?;
        cfg.check().map_err(|message| ModelError::Config {
            file: label,
            message,
        })?;
        Ok(cfg)
    }

    /// Checks the values the graph builder relies on.
    ///
    /// # Errors
    /// A message naming the offending field.
    pub fn check(&self) -> Result<(), String> {
        let positive = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("intermediate_size", self.intermediate_size),
            ("max_position_embeddings", self.max_position_embeddings),
            ("type_vocab_size", self.type_vocab_size),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(format!("`{name}` must be positive"));
        }
        if !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        if self.position_embedding_type != "absolute" {
            return Err(format!(
                "position_embedding_type `{}` is not supported (only `absolute`)",
                self.position_embedding_type
            ));
        }
        if !(self.layer_norm_eps.is_finite() && self.layer_norm_eps >= 0.0) {
            return Err(format!(
                "layer_norm_eps {} is not valid",
                self.layer_norm_eps
            ));
        }
        self.activation()?;
        Ok(())
    }

    /// The feed-forward activation as an IR op.
    ///
    /// # Errors
    /// An activation name the builder does not know.
    pub fn activation(&self) -> Result<rlx_ir::UnaryOp, String> {
        use rlx_ir::UnaryOp;
        Ok(match self.hidden_act.as_str() {
            "gelu" => UnaryOp::GELU,
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => UnaryOp::GELU_TANH,
            "relu" => UnaryOp::Relu,
            "silu" | "swish" => UnaryOp::SILU,
            other => {
                return Err(format!(
                    "hidden_act `{other}` is not supported (gelu, gelu_new, gelu_pytorch_tanh, relu, silu)"
                ))
            }
        })
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }
}

/// Reads the architecture tag of a `config.json`.
///
/// # Errors
/// Unreadable or malformed JSON.
pub fn read_arch(path: &Path) -> Result<ArchConfig> {
    let text = read(path)?;
    serde_json::from_str(&text).map_err(|e| ModelError::Config {
        file: path.display().to_string(),
        message: format!("not a JSON object: {e}"),
    })
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| ModelError::Io {
        path: path.display().to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> BertConfig {
        serde_json::from_str(
            r#"{"vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1,
                "num_attention_heads": 2, "intermediate_size": 16,
                "max_position_embeddings": 4}"#,
        )
        .expect("parses")
    }

    #[test]
    fn defaults_and_checks() {
        let c = base();
        assert_eq!(c.check(), Ok(()));
        assert_eq!(c.layer_norm_eps, 1e-12);
        assert_eq!(c.head_dim(), 4);
        assert_eq!(c.activation(), Ok(rlx_ir::UnaryOp::GELU));
        let mut c = base();
        c.num_attention_heads = 3;
        assert!(c.check().unwrap_err().contains("not a multiple"));
        let mut c = base();
        c.hidden_act = "mish".into();
        assert!(c.check().unwrap_err().contains("hidden_act `mish`"));
        let mut c = base();
        c.position_embedding_type = "relative_key".into();
        assert!(c.check().unwrap_err().contains("relative_key"));
        let mut c = base();
        c.vocab_size = 0;
        assert!(c.check().unwrap_err().contains("vocab_size"));
    }
}
