//! The tokenizer of a generative model ([`ChatTokenizer`]): a `tokenizers`-crate tokenizer
//! plus what generation needs (BOS/EOS, stop ids, chat template). Built here from the one
//! embedded in a GGUF file (`tokenizer.ggml.*`); `rlx-models` builds it from a Hugging Face
//! `tokenizer.json`. Each GGUF tokenizer model has its file, built to give the ids Hugging
//! Face `tokenizers` gives with the same model's `tokenizer.json`:
//! - [`bpe`]: `gpt2`, byte-level BPE from vocab and merges, pre-tokenized per
//!   `tokenizer.ggml.pre` (GPT-2, Llama 3, Qwen2, SmolLM/StarCoder);
//! - [`spm`]: `llama`, SentencePiece-style BPE from pieces and scores with byte fallback
//!   (Llama 2, Mistral, Gemma, Phi-3).
//!
//! [`chat_prompt`] is the one-turn chat prompt used by `--chat`.

mod bpe;
mod chat;
mod spm;

pub use chat::chat_prompt;

use crate::{GgufError, GgufFile};
use tokenizers::{AddedToken, Tokenizer};

/// GGUF token types (`tokenizer.ggml.token_type`), as llama.cpp writes them.
mod token_type {
    pub const NORMAL: i64 = 1;
    pub const UNKNOWN: i64 = 2;
    pub const CONTROL: i64 = 3;
    pub const USER_DEFINED: i64 = 4;
}

/// Tokens that end a chat turn, stop ids besides EOS: ChatML, Llama 3, Gemma, Phi-3.
pub const TURN_ENDS: [&str; 5] = [
    "<|im_end|>",
    "<|eot_id|>",
    "<|end_of_text|>",
    "<end_of_turn>",
    "<|end|>",
];

/// A tokenizer with the special ids and chat template generation needs.
pub struct ChatTokenizer {
    inner: Tokenizer,
    /// beginning-of-sequence id
    pub bos: Option<u32>,
    /// end-of-sequence id
    pub eos: Option<u32>,
    /// the id standing for text the vocabulary cannot spell, when there is one
    pub unk: Option<u32>,
    /// padding id, when the file names one
    pub pad: Option<u32>,
    /// whether the file asks for a BOS token before the prompt
    pub add_bos: bool,
    /// whether the file asks for an EOS token after the prompt
    pub add_eos: bool,
    /// the chat template text, when the file has one
    pub chat_template: Option<String>,
    /// ids that end a generation (eos and the [`TURN_ENDS`] the vocabulary has)
    pub stop_ids: Vec<u32>,
    /// whether decoding drops the space SentencePiece put before the text
    strips_space_prefix: bool,
}

impl std::fmt::Debug for ChatTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTokenizer")
            .field("vocab", &self.inner.get_vocab_size(true))
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .finish()
    }
}

/// The vocabulary part of `tokenizer.ggml.*` every tokenizer model has: tokens by id and
/// their types (normal when the file has none).
struct GgufVocab {
    tokens: Vec<String>,
    types: Vec<i64>,
}

impl GgufVocab {
    fn read(f: &GgufFile) -> Result<GgufVocab, GgufError> {
        let tokens = string_array(f, "tokenizer.ggml.tokens")?;
        let types = match f.get("tokenizer.ggml.token_type") {
            None => vec![token_type::NORMAL; tokens.len()],
            Some(v) => {
                let arr = v
                    .as_array()
                    .ok_or_else(|| tok_err("`tokenizer.ggml.token_type` is not an array"))?;
                if arr.len() != tokens.len() {
                    return Err(tok_err(format!(
                        "`tokenizer.ggml.token_type` has {} entries for {} tokens",
                        arr.len(),
                        tokens.len()
                    )));
                }
                arr.iter()
                    .map(|v| v.as_i64().unwrap_or(token_type::NORMAL))
                    .collect()
            }
        };
        Ok(GgufVocab { tokens, types })
    }

    /// The tokens matched in raw text before the model runs: control and unknown tokens
    /// as special tokens (dropped by `decode(.., skip_special)`), user-defined ones as
    /// plain added tokens. None is normalized, so `<s>` matches only as written.
    fn added_tokens(&self) -> (Vec<AddedToken>, Vec<AddedToken>) {
        let (mut special, mut plain) = (Vec::new(), Vec::new());
        for (t, &ty) in self.tokens.iter().zip(&self.types) {
            match ty {
                token_type::CONTROL | token_type::UNKNOWN => {
                    special.push(AddedToken::from(t.clone(), true).normalized(false))
                }
                token_type::USER_DEFINED => {
                    plain.push(AddedToken::from(t.clone(), false).normalized(false))
                }
                _ => {}
            }
        }
        (special, plain)
    }

    /// Registers the added tokens on `inner`.
    fn add_to(&self, inner: &mut Tokenizer) -> Result<(), GgufError> {
        let (special, plain) = self.added_tokens();
        inner
            .add_special_tokens(special)
            .map_err(|e| tok_err(format!("adding special tokens: {e}")))?;
        inner
            .add_tokens(plain)
            .map_err(|e| tok_err(format!("adding user-defined tokens: {e}")))?;
        Ok(())
    }
}

fn tok_err(m: impl Into<String>) -> GgufError {
    GgufError::Tokenizer(m.into())
}

/// A metadata array of strings.
fn string_array(f: &GgufFile, key: &str) -> Result<Vec<String>, GgufError> {
    let arr = f
        .get(key)
        .and_then(|v| v.as_array())
        .ok_or_else(|| tok_err(format!("`{key}` is missing or not an array")))?;
    arr.iter()
        .map(|v| {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| tok_err(format!("`{key}` holds a non-string")))
        })
        .collect()
}

/// A boolean flag, `default` when absent.
fn flag(f: &GgufFile, key: &str, default: bool) -> bool {
    f.get(key).and_then(|v| v.as_bool()).unwrap_or(default)
}

impl ChatTokenizer {
    /// Wraps a loaded `tokenizers` tokenizer: no BOS/EOS, no template, no stop ids until
    /// the caller sets the public fields.
    pub fn from_tokenizer(inner: Tokenizer) -> ChatTokenizer {
        ChatTokenizer {
            inner,
            bos: None,
            eos: None,
            unk: None,
            pad: None,
            add_bos: false,
            add_eos: false,
            chat_template: None,
            stop_ids: Vec::new(),
            strips_space_prefix: false,
        }
    }

    /// Builds the tokenizer from the file's `tokenizer.ggml.*` metadata: model `gpt2`
    /// (byte-level BPE; `tokenizer.ggml.pre` one of `default`, `gpt-2`, `phi-2`,
    /// `llama-bpe`, `llama3`, `llama-v3`, `qwen2`, `deepseek-r1-qwen`, `smollm`,
    /// `starcoder`, `refact`, `codeshell`, or absent for GPT-2's) or `llama`
    /// (SentencePiece-style BPE with byte fallback). `add_bos_token` defaults to true for `llama`
    /// and false for `gpt2`, as llama.cpp reads them.
    ///
    /// # Errors
    /// Another tokenizer model, an unknown `tokenizer.ggml.pre`, missing or mistyped
    /// tokens/scores/merges, or merges naming unknown tokens.
    pub fn from_gguf(f: &GgufFile) -> Result<ChatTokenizer, GgufError> {
        let model = f.get_str("tokenizer.ggml.model")?;
        let vocab = GgufVocab::read(f)?;
        let space_prefix = flag(f, "tokenizer.ggml.add_space_prefix", true);
        let (mut inner, add_bos_default, strips_space_prefix) = match model {
            "gpt2" => (bpe::build(f, &vocab)?, false, false),
            "llama" => (spm::build(f, &vocab, space_prefix)?, true, space_prefix),
            other => {
                return Err(tok_err(format!(
                    "tokenizer model `{other}` is not supported (RLX reads `gpt2` byte-level \
                     BPE and `llama` SentencePiece-style BPE)"
                )))
            }
        };
        vocab.add_to(&mut inner)?;
        let n_tokens = vocab.tokens.len();
        let id = |key: &str| {
            f.get(key)
                .and_then(|v| v.as_u64())
                .filter(|&v| (v as usize) < n_tokens)
                .map(|v| v as u32)
        };
        let eos = id("tokenizer.ggml.eos_token_id");
        let mut stop_ids: Vec<u32> = eos.into_iter().collect();
        for end in TURN_ENDS {
            if let Some(i) = vocab.tokens.iter().position(|t| t == end) {
                if !stop_ids.contains(&(i as u32)) {
                    stop_ids.push(i as u32);
                }
            }
        }
        let unk = id("tokenizer.ggml.unknown_token_id").or_else(|| {
            let first = vocab.types.iter().position(|&t| t == token_type::UNKNOWN);
            first.map(|i| i as u32)
        });
        Ok(ChatTokenizer {
            inner,
            bos: id("tokenizer.ggml.bos_token_id"),
            eos,
            unk,
            pad: id("tokenizer.ggml.padding_token_id"),
            add_bos: flag(f, "tokenizer.ggml.add_bos_token", add_bos_default),
            add_eos: flag(f, "tokenizer.ggml.add_eos_token", false),
            chat_template: f
                .get("tokenizer.chat_template")
                .and_then(|v| v.as_str())
                .map(str::to_string),
            stop_ids,
            strips_space_prefix,
        })
    }

    /// Token ids of `text` (special tokens written in the text are recognised), with BOS
    /// first and EOS last when the file asks for them.
    ///
    /// # Errors
    /// The tokenizer failed (reported by the `tokenizers` crate).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, GgufError> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| tok_err(format!("encoding: {e}")))?;
        let mut ids = Vec::with_capacity(enc.len() + 2);
        if self.add_bos {
            ids.extend(self.bos);
        }
        ids.extend_from_slice(enc.get_ids());
        if self.add_eos {
            ids.extend(self.eos);
        }
        Ok(ids)
    }

    /// Text of `ids`; special tokens are kept unless `skip_special`.
    ///
    /// # Errors
    /// The tokenizer failed (reported by the `tokenizers` crate).
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, GgufError> {
        self.inner
            .decode(ids, skip_special)
            .map_err(|e| tok_err(format!("decoding: {e}")))
    }

    /// Text of `ids` that continue earlier text (generated after a prompt, or a later piece
    /// of a stream): as [`Self::decode`], except that a SentencePiece tokenizer keeps the
    /// space its first `▁` stands for, which `decode` drops as the text's own space prefix.
    ///
    /// # Errors
    /// The tokenizer failed (reported by the `tokenizers` crate).
    pub fn decode_continuation(
        &self,
        ids: &[u32],
        skip_special: bool,
    ) -> Result<String, GgufError> {
        let text = self.decode(ids, skip_special)?;
        if !self.strips_space_prefix {
            return Ok(text);
        }
        let added = self.inner.get_added_tokens_decoder();
        let first = ids
            .iter()
            .find(|id| !(skip_special && added.get(id).is_some_and(|t| t.special)))
            .and_then(|&id| self.inner.id_to_token(id));
        match first {
            Some(t) if t.starts_with(spm::SPACE) || t == "<0x20>" => Ok(format!(" {text}")),
            _ => Ok(text),
        }
    }

    /// Vocabulary size (special tokens included).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The id of a token string.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The `tokenizers`-crate tokenizer inside, for callers that need offsets or batches.
    pub fn inner(&self) -> &Tokenizer {
        &self.inner
    }
}
