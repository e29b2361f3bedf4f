//! GGUF tokenizer model `gpt2`: byte-level BPE from `tokenizer.ggml.tokens` and
//! `tokenizer.ggml.merges`, pre-tokenized the way `tokenizer.ggml.pre` names.
//!
//! Each `pre` value stands for the pre-tokenizer of a model family's `tokenizer.json`
//! ([`Pre`]). A value not in the table is an error naming it: the same vocabulary split by
//! another regex gives other ids without any sign of trouble, so guessing is worse than
//! refusing. A file without the key (older converters) gets GPT-2's own split, which is
//! also what `default` means.

use super::{string_array, tok_err, GgufVocab};
use crate::{GgufError, GgufFile};
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{SplitDelimiterBehavior, Tokenizer};

/// Llama 3's split: contractions in any case, letters with one leading non-letter, numbers
/// of up to three digits, punctuation runs with their trailing newlines, whitespace.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2's split: Llama 3's with every digit on its own.
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The pre-tokenization of a `gpt2`-model file, one per family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pre {
    /// GPT-2's regex (inside the byte-level pre-tokenizer): GPT-2, Phi-2, RLX's exports of
    /// plain byte-level `tokenizer.json` files.
    Gpt2,
    /// [`LLAMA3_SPLIT`], then byte-level; the BPE takes a word that is already a token
    /// whole (`ignore_merges`, as Llama 3's `tokenizer.json` says).
    Llama3,
    /// NFC, then [`QWEN2_SPLIT`], then byte-level.
    Qwen2,
    /// Every digit alone, then GPT-2's regex (SmolLM, StarCoder).
    DigitsGpt2,
}

impl Pre {
    /// The family a `tokenizer.ggml.pre` value names; None when RLX does not know it.
    fn from_name(name: &str) -> Option<Pre> {
        Some(match name {
            "default" | "gpt-2" | "gpt2" | "phi-2" => Pre::Gpt2,
            "llama-bpe" | "llama3" | "llama-v3" => Pre::Llama3,
            "qwen2" | "deepseek-r1-qwen" => Pre::Qwen2,
            "smollm" | "starcoder" | "refact" | "codeshell" => Pre::DigitsGpt2,
            _ => return None,
        })
    }

    fn pre_tokenizer(self) -> Result<PreTokenizerWrapper, GgufError> {
        let byte_level_regex = ByteLevel::new(false, true, true);
        let byte_level_only = ByteLevel::new(false, true, false);
        let split = |pattern: &str| {
            Split::new(
                SplitPattern::Regex(pattern.to_string()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(|e| tok_err(format!("compiling the {self:?} split regex: {e}")))
        };
        Ok(match self {
            Pre::Gpt2 => byte_level_regex.into(),
            Pre::Llama3 => {
                Sequence::new(vec![split(LLAMA3_SPLIT)?.into(), byte_level_only.into()]).into()
            }
            Pre::Qwen2 => {
                Sequence::new(vec![split(QWEN2_SPLIT)?.into(), byte_level_only.into()]).into()
            }
            Pre::DigitsGpt2 => {
                Sequence::new(vec![Digits::new(true).into(), byte_level_regex.into()]).into()
            }
        })
    }
}

/// The byte-level BPE tokenizer of a `gpt2`-model GGUF file (added tokens are registered
/// by the caller).
pub(super) fn build(f: &GgufFile, vocab: &GgufVocab) -> Result<Tokenizer, GgufError> {
    let pre_name = match f.get("tokenizer.ggml.pre") {
        None => "default",
        Some(v) => v
            .as_str()
            .ok_or_else(|| tok_err("`tokenizer.ggml.pre` is not a string"))?,
    };
    let pre = Pre::from_name(pre_name).ok_or_else(|| {
        tok_err(format!(
            "pre-tokenizer `{pre_name}` (tokenizer.ggml.pre) is not supported; RLX reads \
             default, gpt-2, phi-2, llama-bpe, llama3, llama-v3, qwen2, deepseek-r1-qwen, \
             smollm, starcoder, refact, codeshell"
        ))
    })?;
    let merges_raw = string_array(f, "tokenizer.ggml.merges")?;
    let mut merges = Vec::with_capacity(merges_raw.len());
    for (i, m) in merges_raw.iter().enumerate() {
        let (a, b) = m
            .split_once(' ')
            .ok_or_else(|| tok_err(format!("merge {i} `{m}` is not two tokens")))?;
        merges.push((a.to_string(), b.to_string()));
    }
    let ids: Vocab = vocab
        .tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(ids, merges)
        .ignore_merges(pre == Pre::Llama3)
        .build()
        .map_err(|e| tok_err(format!("building BPE: {e}")))?;
    let mut inner = Tokenizer::new(bpe);
    if pre == Pre::Qwen2 {
        inner
            .with_normalizer(Some(NFC))
            .map_err(|e| tok_err(format!("setting the NFC normalizer: {e}")))?;
    }
    inner.with_pre_tokenizer(Some(pre.pre_tokenizer()?));
    inner.with_decoder(Some(ByteLevel::default()));
    Ok(inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_builds_its_pre_tokenizer() {
        for name in ["default", "gpt-2", "llama-bpe", "qwen2", "smollm"] {
            let pre = Pre::from_name(name).unwrap();
            assert!(pre.pre_tokenizer().is_ok(), "{name}");
        }
        assert_eq!(Pre::from_name("tekken"), None);
    }
}
