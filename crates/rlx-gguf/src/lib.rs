//! The GGUF reader and writer.
//!
//! - [`GgufFile`]: a GGUF v2/v3 file, memory-mapped; metadata of every value type (arrays
//!   included), tensor infos, alignment, and the bytes of each tensor, still packed;
//! - [`GgmlType`]: the tensor types, mapped onto the IR's [`QuantFormat`] (F32, F16, BF16,
//!   Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K; the block layouts and their
//!   dequantization live in [`rlx_ir::quant`], the one definition every backend and the
//!   interpreter share);
//! - [`ChatTokenizer`]: the tokenizer embedded in the file, built on Hugging Face's
//!   `tokenizers` crate to give the ids HF gives: byte-level BPE (`gpt2`, with the GPT-2,
//!   Llama 3, Qwen2 or SmolLM pre-tokenizer) or SentencePiece-style BPE with byte fallback
//!   (`llama`); special tokens, BOS/EOS, and the chat template.
//! - [`quantize()`]: f32 values into any block format (GGML's reference rounding), and
//!   [`GgufWriter`]: a GGUF v3 file written tensor by tensor (`rlx quantize` uses both).
//!
//! Malformed or truncated files give a [`GgufError`] naming what and where; nothing panics.

mod error;
mod file;
mod quantize;
mod tokenizer;
mod write;

pub use error::GgufError;
pub use file::{GgmlType, GgufFile, MetaValue, TensorInfo};
pub use quantize::{quantize, quantize_block};
pub use rlx_ir::QuantFormat;
pub use tokenizer::{chat_prompt, ChatTokenizer, TURN_ENDS};
pub use write::{ggml_type_of, GgufWriter, TensorDecl};
