//! The tokenizer of a generative model ([`ChatTokenizer`]): a `tokenizers`-crate tokenizer
//! plus what generation needs (BOS, stop ids, chat template). Built here from the one
//! embedded in a GGUF file (`tokenizer.ggml.*`: GPT-2 byte-level BPE from the vocab, merges
//! and token types); `rlx-models` builds it from a Hugging Face `tokenizer.json`. Also the
//! one-turn chat prompt used by `--chat` (ChatML, Llama 3, Zephyr styles).

use crate::{GgufError, GgufFile};
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{AddedToken, Tokenizer};

/// GGUF token types that mark special (control) and user-defined tokens.
const CONTROL: i64 = 3;
const USER_DEFINED: i64 = 4;

/// A tokenizer with the special ids and chat template generation needs.
pub struct ChatTokenizer {
    inner: Tokenizer,
    /// beginning-of-sequence id
    pub bos: Option<u32>,
    /// end-of-sequence id
    pub eos: Option<u32>,
    /// whether the file asks for a BOS token before the prompt
    pub add_bos: bool,
    /// the chat template text, when the file has one
    pub chat_template: Option<String>,
    /// ids that end a generation (eos and, for ChatML, `<|im_end|>`)
    pub stop_ids: Vec<u32>,
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

impl ChatTokenizer {
    /// Wraps a loaded `tokenizers` tokenizer: no BOS/EOS, no template, no stop ids until
    /// the caller sets the public fields.
    pub fn from_tokenizer(inner: Tokenizer) -> ChatTokenizer {
        ChatTokenizer {
            inner,
            bos: None,
            eos: None,
            add_bos: false,
            chat_template: None,
            stop_ids: Vec::new(),
        }
    }

    /// Builds the tokenizer from the file's `tokenizer.ggml.*` metadata.
    ///
    /// # Errors
    /// A tokenizer model other than `gpt2`, missing or mistyped tokens/merges, or merges
    /// naming unknown tokens.
    pub fn from_gguf(f: &GgufFile) -> Result<ChatTokenizer, GgufError> {
        let err = |m: String| GgufError::Tokenizer(m);
        let model = f.get_str("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(err(format!(
                "tokenizer model `{model}` is not supported (RLX reads gpt2 byte-level BPE)"
            )));
        }
        let strings = |key: &str| -> Result<Vec<String>, GgufError> {
            let arr = f
                .get(key)
                .and_then(|v| v.as_array())
                .ok_or_else(|| err(format!("`{key}` is missing or not an array")))?;
            arr.iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| err(format!("`{key}` holds a non-string")))
                })
                .collect()
        };
        let tokens = strings("tokenizer.ggml.tokens")?;
        let merges_raw = strings("tokenizer.ggml.merges")?;
        let types: Vec<i64> = match f
            .get("tokenizer.ggml.token_type")
            .and_then(|v| v.as_array())
        {
            Some(a) => a.iter().map(|v| v.as_i64().unwrap_or(1)).collect(),
            None => vec![1; tokens.len()],
        };
        let vocab: Vocab = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        let mut merges = Vec::with_capacity(merges_raw.len());
        for (i, m) in merges_raw.iter().enumerate() {
            let (a, b) = m
                .split_once(' ')
                .ok_or_else(|| err(format!("merge {i} `{m}` is not two tokens")))?;
            merges.push((a.to_string(), b.to_string()));
        }
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(|e| err(format!("building BPE: {e}")))?;
        let mut inner = Tokenizer::new(bpe);
        // SmolLM / StarCoder pre-tokenization: every digit alone, then GPT-2's regex split.
        let pre = f
            .get("tokenizer.ggml.pre")
            .and_then(|v| v.as_str())
            .unwrap_or("default");
        let byte_level = ByteLevel::new(false, true, true);
        let pieces: Vec<PreTokenizerWrapper> = match pre {
            "smollm" | "starcoder" | "refact" | "codeshell" => {
                vec![Digits::new(true).into(), byte_level.into()]
            }
            _ => vec![byte_level.into()],
        };
        inner.with_pre_tokenizer(Some(Sequence::new(pieces)));
        inner.with_decoder(Some(ByteLevel::default()));
        let specials: Vec<AddedToken> = tokens
            .iter()
            .zip(&types)
            .filter(|(_, &t)| t == CONTROL || t == USER_DEFINED)
            .map(|(s, _)| AddedToken::from(s.clone(), true))
            .collect();
        inner
            .add_special_tokens(specials)
            .map_err(|e| err(format!("adding special tokens: {e}")))?;
        let id = |key: &str| {
            f.get(key)
                .and_then(|v| v.as_u64())
                .filter(|&v| (v as usize) < tokens.len())
                .map(|v| v as u32)
        };
        let (bos, eos) = (
            id("tokenizer.ggml.bos_token_id"),
            id("tokenizer.ggml.eos_token_id"),
        );
        let mut stop_ids: Vec<u32> = eos.into_iter().collect();
        if let Some(end) = tokens.iter().position(|t| t == "<|im_end|>") {
            if !stop_ids.contains(&(end as u32)) {
                stop_ids.push(end as u32);
            }
        }
        Ok(ChatTokenizer {
            inner,
            bos,
            eos,
            add_bos: f
                .get("tokenizer.ggml.add_bos_token")
                .and_then(|v| v.as_bool())
                .unwrap_or(false),
            chat_template: f
                .get("tokenizer.chat_template")
                .and_then(|v| v.as_str())
                .map(str::to_string),
            stop_ids,
        })
    }

    /// Token ids of `text` (special tokens written in the text are recognised), with BOS
    /// first when the file asks for it.
    ///
    /// # Errors
    /// The tokenizer failed (reported by the `tokenizers` crate).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, GgufError> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| GgufError::Tokenizer(format!("encoding: {e}")))?;
        let mut ids = Vec::with_capacity(enc.len() + 1);
        if self.add_bos {
            ids.extend(self.bos);
        }
        ids.extend_from_slice(enc.get_ids());
        Ok(ids)
    }

    /// Text of `ids`; special tokens are kept unless `skip_special`.
    ///
    /// # Errors
    /// The tokenizer failed (reported by the `tokenizers` crate).
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, GgufError> {
        self.inner
            .decode(ids, skip_special)
            .map_err(|e| GgufError::Tokenizer(format!("decoding: {e}")))
    }

    /// Vocabulary size (special tokens included).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The id of a token string.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }
}

/// The prompt for one user message, in the style the model's chat template uses:
/// Llama 3 headers (`<|start_header_id|>`), Zephyr/TinyLlama turns (`<|user|>`), else ChatML
/// (SmolLM2, Qwen, ...; the template's default system message when it has one). Ends with
/// the opening of the assistant turn. BOS is not written here: the tokenizer adds it.
pub fn chat_prompt(template: Option<&str>, user: &str) -> String {
    let t = template.unwrap_or("");
    if t.contains("<|start_header_id|>") {
        return format!(
            "<|start_header_id|>user<|end_header_id|>\n\n{user}<|eot_id|>\
             <|start_header_id|>assistant<|end_header_id|>\n\n"
        );
    }
    if t.contains("<|user|>") {
        let eos = if t.contains("eos_token") { "</s>" } else { "" };
        return format!("<|user|>\n{user}{eos}\n<|assistant|>\n");
    }
    let mut s = String::new();
    let start = "<|im_start|>system\n";
    if let Some(i) = t.find(start) {
        let rest = &t[i + start.len()..];
        if let Some(end) = rest.find("<|im_end|>") {
            s.push_str(start);
            s.push_str(&rest[..end]);
            s.push_str("<|im_end|>\n");
        }
    }
    s.push_str("<|im_start|>user\n");
    s.push_str(user);
    s.push_str("<|im_end|>\n<|im_start|>assistant\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatml_prompt_with_default_system() {
        let t = "{{ '<|im_start|>system\nYou are nice<|im_end|>\n' }}";
        assert_eq!(
            chat_prompt(Some(t), "hi"),
            "<|im_start|>system\nYou are nice<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n\
             <|im_start|>assistant\n"
        );
        assert!(chat_prompt(None, "x").starts_with("<|im_start|>user\nx"));
    }

    #[test]
    fn llama3_and_zephyr_prompts() {
        let l3 = "{% set content = '<|start_header_id|>' + message['role'] %}";
        assert_eq!(
            chat_prompt(Some(l3), "Hi"),
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>\
             <|start_header_id|>assistant<|end_header_id|>\n\n"
        );
        let zephyr =
            "{% if message['role'] == 'user' %}{{ '<|user|>\n' + message['content'] + eos_token }}";
        assert_eq!(
            chat_prompt(Some(zephyr), "Hi"),
            "<|user|>\nHi</s>\n<|assistant|>\n"
        );
        assert!(chat_prompt(None, "Hi").starts_with("<|im_start|>user\nHi"));
    }
}
