//! Text to token ids through Hugging Face's `tokenizers` crate reading `tokenizer.json`.
//!
//! The file's own padding is switched off (MiniLM's pads every text to 128 tokens): a batch
//! is padded here to its longest text, and the mask says which tokens are real.

use crate::error::{ModelError, Result};
use std::path::Path;
use tokenizers::{Tokenizer, TruncationParams};

/// A loaded tokenizer with padding off and truncation at a known length.
pub struct TextTokenizer {
    inner: Tokenizer,
    file: String,
    pad_id: u32,
    pad_type_id: u32,
    max_len: usize,
}

/// Token ids of a batch of texts, unpadded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    /// token ids per text, special tokens included
    pub ids: Vec<Vec<u32>>,
    /// token type (segment) ids per text
    pub type_ids: Vec<Vec<u32>>,
    /// id used for padding
    pub pad_id: u32,
    /// token type id used for padding
    pub pad_type_id: u32,
}

impl Encoded {
    /// Tokens per text.
    pub fn lengths(&self) -> Vec<usize> {
        self.ids.iter().map(Vec::len).collect()
    }

    /// The padded length: the longest text.
    pub fn max_len(&self) -> usize {
        self.ids.iter().map(Vec::len).max().unwrap_or(0)
    }
}

impl TextTokenizer {
    /// Loads `tokenizer.json`, turns its padding off and truncates at `max_len` tokens
    /// (special tokens included).
    ///
    /// # Errors
    /// The file is unreadable or not a tokenizer the crate understands.
    pub fn from_file(path: &Path, max_len: usize) -> Result<TextTokenizer> {
        let file = path.display().to_string();
        let err = |message: String| ModelError::Tokenizer {
            file: file.clone(),
            message,
        };
        if !path.is_file() {
            return Err(ModelError::Io {
                path: file.clone(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
            });
        }
        let mut inner = Tokenizer::from_file(path).map_err(|e| err(e.to_string()))?;
        let (pad_id, pad_type_id) = inner
            .get_padding()
            .map(|p| (p.pad_id, p.pad_type_id))
            .or_else(|| inner.token_to_id("[PAD]").map(|id| (id, 0)))
            .unwrap_or((0, 0));
        inner.with_padding(None);
        let trunc = TruncationParams {
            max_length: max_len,
            ..inner.get_truncation().cloned().unwrap_or_default()
        };
        inner
            .with_truncation(Some(trunc))
            .map_err(|e| err(e.to_string()))?;
        Ok(TextTokenizer {
            inner,
            file,
            pad_id,
            pad_type_id,
            max_len,
        })
    }

    /// The longest sequence produced (longer texts are truncated).
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Tokenizes texts with the model's special tokens (`[CLS] ... [SEP]` for BERT).
    ///
    /// # Errors
    /// The tokenizer fails on a text.
    pub fn encode(&self, texts: &[&str]) -> Result<Encoded> {
        let encs =
            self.inner
                .encode_batch(texts.to_vec(), true)
                .map_err(|e| ModelError::Tokenizer {
                    file: self.file.clone(),
                    message: e.to_string(),
                })?;
        Ok(Encoded {
            ids: encs.iter().map(|e| e.get_ids().to_vec()).collect(),
            type_ids: encs.iter().map(|e| e.get_type_ids().to_vec()).collect(),
            pad_id: self.pad_id,
            pad_type_id: self.pad_type_id,
        })
    }
}
