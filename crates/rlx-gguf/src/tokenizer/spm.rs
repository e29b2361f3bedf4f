//! GGUF tokenizer model `llama`: a SentencePiece BPE vocabulary (Llama 2, Mistral, Gemma,
//! Phi-3) given as pieces, scores and token types, with byte-fallback pieces `<0x00>` to
//! `<0xFF>`, and no merges.
//!
//! It becomes the tokenizer Hugging Face makes from the same SentencePiece model (its
//! "legacy" Llama conversion, the `tokenizer.json` these models ship):
//! - a BPE whose merges are every split of a normal piece into two normal pieces, ranked
//!   by the piece's score, with byte fallback and the unknown piece fused;
//! - the normalizer writes `▁` for each space and, with `tokenizer.ggml.add_space_prefix`
//!   (default true; Gemma writes false), puts one before the text. Text is normalized
//!   chunk by chunk between special tokens, so the prefix comes back after each special
//!   token, as llama.cpp does too;
//! - the decoder turns `▁` into spaces, `<0xNN>` pieces into bytes, and drops the prefix.

use super::{tok_err, token_type, GgufVocab};
use crate::{GgufError, GgufFile};
use std::collections::HashMap;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::decoders::DecoderWrapper;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers::{NormalizerWrapper, Tokenizer};

/// SentencePiece's stand-in for a space.
pub(super) const SPACE: &str = "\u{2581}";

/// The SentencePiece-style BPE tokenizer of a `llama`-model GGUF file, with `▁` put before
/// the text when `add_space_prefix` (added tokens are registered by the caller).
pub(super) fn build(
    f: &GgufFile,
    vocab: &GgufVocab,
    add_space_prefix: bool,
) -> Result<Tokenizer, GgufError> {
    let scores = scores(f, vocab.tokens.len())?;
    let merges = merges_from_scores(vocab, &scores);
    let ids: Vocab = vocab
        .tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let unk = f
        .get("tokenizer.ggml.unknown_token_id")
        .and_then(|v| v.as_u64())
        .and_then(|i| vocab.tokens.get(i as usize))
        .or_else(|| {
            let first = vocab.types.iter().position(|&t| t == token_type::UNKNOWN);
            first.map(|i| &vocab.tokens[i])
        });
    let mut builder = BPE::builder()
        .vocab_and_merges(ids, merges)
        .byte_fallback(true)
        .fuse_unk(true);
    if let Some(unk) = unk {
        builder = builder.unk_token(unk.clone());
    }
    let bpe = builder
        .build()
        .map_err(|e| tok_err(format!("building SentencePiece BPE: {e}")))?;
    let mut inner = Tokenizer::new(bpe);

    let replace = |from: &str, to: &str| {
        Replace::new(from, to).map_err(|e| tok_err(format!("replace `{from}`: {e}")))
    };
    let mut normalizers: Vec<NormalizerWrapper> = Vec::new();
    if add_space_prefix {
        normalizers.push(Prepend::new(SPACE.to_string()).into());
    }
    normalizers.push(replace(" ", SPACE)?.into());
    inner
        .with_normalizer(Some(NormalizerSequence::new(normalizers)))
        .map_err(|e| tok_err(format!("setting the normalizer: {e}")))?;

    let mut decoders: Vec<DecoderWrapper> = vec![
        replace(SPACE, " ")?.into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ];
    if add_space_prefix {
        decoders.push(Strip::new(' ', 1, 0).into());
    }
    inner.with_decoder(Some(DecoderSequence::new(decoders)));
    Ok(inner)
}

/// `tokenizer.ggml.scores`, one per token.
fn scores(f: &GgufFile, n_tokens: usize) -> Result<Vec<f64>, GgufError> {
    let key = "tokenizer.ggml.scores";
    let arr = f
        .get(key)
        .and_then(|v| v.as_array())
        .ok_or_else(|| tok_err(format!("`{key}` is missing or not an array")))?;
    if arr.len() != n_tokens {
        return Err(tok_err(format!(
            "`{key}` has {} entries for {n_tokens} tokens",
            arr.len()
        )));
    }
    arr.iter()
        .map(|v| {
            v.as_f64()
                .ok_or_else(|| tok_err(format!("`{key}` holds a non-number")))
        })
        .collect()
}

/// BPE merges from a SentencePiece vocabulary, ranked the way Hugging Face derives them:
/// each split of a normal piece into two normal pieces is a merge; higher piece score
/// first, then the longer left part, then the longer right part, then the lower piece id.
/// Control, byte and user-defined pieces never take part, so `<0x41>` or `<s>` can never
/// be spelled by merging.
fn merges_from_scores(vocab: &GgufVocab, scores: &[f64]) -> Vec<(String, String)> {
    let normal: HashMap<&str, usize> = vocab
        .tokens
        .iter()
        .enumerate()
        .filter(|&(i, _)| vocab.types[i] == token_type::NORMAL)
        .map(|(i, t)| (t.as_str(), i))
        .collect();
    struct Candidate {
        score: f64,
        left_chars: usize,
        right_chars: usize,
        piece: usize,
        split: usize,
    }
    let mut candidates = Vec::new();
    for (piece, t) in vocab.tokens.iter().enumerate() {
        if vocab.types[piece] != token_type::NORMAL || normal.get(t.as_str()) != Some(&piece) {
            continue;
        }
        let n_chars = t.chars().count();
        for (left_chars, (split, _)) in t.char_indices().enumerate().skip(1) {
            if normal.contains_key(&t[..split]) && normal.contains_key(&t[split..]) {
                candidates.push(Candidate {
                    score: scores[piece],
                    left_chars,
                    right_chars: n_chars - left_chars,
                    piece,
                    split,
                });
            }
        }
    }
    candidates.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(b.left_chars.cmp(&a.left_chars))
            .then(b.right_chars.cmp(&a.right_chars))
            .then(a.piece.cmp(&b.piece))
    });
    candidates
        .into_iter()
        .map(|c| {
            let t = &vocab.tokens[c.piece];
            (t[..c.split].to_string(), t[c.split..].to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(tokens: &[(&str, i64)]) -> GgufVocab {
        GgufVocab {
            tokens: tokens.iter().map(|(t, _)| t.to_string()).collect(),
            types: tokens.iter().map(|&(_, ty)| ty).collect(),
        }
    }

    #[test]
    fn merges_follow_scores_and_skip_non_normal_pieces() {
        let n = token_type::NORMAL;
        let v = vocab(&[
            ("<s>", token_type::CONTROL),
            ("a", n),
            ("b", n),
            ("c", n),
            ("bc", n),
            ("ab", n),
            ("abc", n),
            ("<", n),
            ("s>", n),
        ]);
        let scores = [0.0, -10.0, -11.0, -12.0, -1.0, -2.0, -3.0, -13.0, -14.0];
        let merges = merges_from_scores(&v, &scores);
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(
            merges,
            vec![
                pair("b", "c"),
                pair("a", "b"),
                pair("ab", "c"),
                pair("a", "bc")
            ]
        );
    }
}
