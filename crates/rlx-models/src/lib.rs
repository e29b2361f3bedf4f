//! RLX model importers for checkpoints other than ONNX: safetensors weights with a Hugging
//! Face `config.json`, and their tokenizers.
//!
//! - [`weights`]: safetensors files (single or sharded), memory-mapped; a tensor is copied
//!   out once, by name, checked against the shape the model expects;
//! - [`config`]: `config.json` ([`BertConfig`]);
//! - [`bert`]: the BERT family (all-MiniLM-L6-v2, BERT-base) as an IR graph with symbolic
//!   `batch`/`seq`, its params, and inputs for a tokenized batch;
//! - [`tokenizer`]: `tokenizer.json` through the `tokenizers` crate, padded per batch;
//! - [`folder`] and [`hub`]: a `--model` argument (a folder, or `hf:<name>` downloaded and
//!   cached) and the family its config names.
//!
//! Importers build a graph and weights and never touch a device: running them is the
//! runtime's job.

#![warn(missing_docs)]

pub mod bert;
pub mod config;
pub mod error;
pub mod folder;
pub mod hub;
pub mod llama;
pub mod tokenizer;
pub mod weights;

pub use bert::BertModel;
pub use config::BertConfig;
pub use error::ModelError;
pub use folder::{family, resolve, Family};
pub use tokenizer::{Encoded, TextTokenizer};
pub use weights::{SafetensorsFile, Weights};
