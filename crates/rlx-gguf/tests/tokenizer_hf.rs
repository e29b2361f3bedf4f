//! GGUF tokenizers against Hugging Face `tokenizers` on a multilingual text set (English,
//! German, French, Chinese, Japanese, Korean, Arabic, Hindi, Russian, emoji, code, numbers,
//! edge spaces, special tokens in the text): ids and decoded text must be identical.
//!
//! Fixtures in `tests/fixtures/tokenizers/`, written by `make_tokenizers.py` there: small
//! tokenizers trained with HF `tokenizers`, each as `tokenizer.json` and as a GGUF file
//! with the same tokenizer in `tokenizer.ggml.*`, and HF's ids in `expected.json`
//! (SentencePiece-style `llama` with and without the space prefix; byte-level `gpt2` with
//! `pre` = `llama-bpe`, `qwen2`, `gpt-2`, `smollm`). The real SmolLM2 GGUF is checked
//! against its `tokenizer.json` when `scripts/fetch-models.sh` has fetched both.

use rlx_gguf::{ChatTokenizer, GgufFile, GgufWriter, MetaValue};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizers")
}

fn expected() -> Value {
    let text = std::fs::read_to_string(fixtures().join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn load(path: &Path) -> ChatTokenizer {
    let f = GgufFile::open(path).unwrap();
    ChatTokenizer::from_gguf(&f).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn ids_of(v: &Value) -> Vec<u32> {
    let ids = v.as_array().unwrap();
    ids.iter().map(|i| i.as_u64().unwrap() as u32).collect()
}

/// Every text through `tok` against the reference ids (without BOS/EOS) and decoded text;
/// returns one line per mismatch, so a failure lists them all.
fn check(
    name: &str,
    tok: &ChatTokenizer,
    texts: &[&str],
    ids: &[Vec<u32>],
    decoded: &[String],
) -> Vec<String> {
    let mut bad = Vec::new();
    for ((text, want), want_text) in texts.iter().zip(ids).zip(decoded) {
        let mut got = tok.encode(text).unwrap();
        if tok.add_bos {
            assert_eq!(got.first().copied(), tok.bos, "{name}: BOS first");
            got.remove(0);
        }
        if tok.add_eos {
            assert_eq!(got.pop(), tok.eos, "{name}: EOS last");
        }
        if &got != want {
            bad.push(format!("{name}: {text:?}\n  got  {got:?}\n  want {want:?}"));
            continue;
        }
        let back = tok.decode(&got, false).unwrap();
        if &back != want_text {
            bad.push(format!(
                "{name}: decode of {text:?}: got {back:?}, want {want_text:?}"
            ));
        }
    }
    bad
}

#[test]
fn gguf_tokenizers_match_hugging_face_on_multilingual_text() {
    let exp = expected();
    let texts: Vec<&str> = exp["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    let mut bad = Vec::new();
    for case in exp["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let tok = load(&fixtures().join(case["gguf"].as_str().unwrap()));
        assert_eq!(tok.add_bos, case["add_bos"].as_bool().unwrap(), "{name}");
        assert_eq!(tok.bos, case["bos"].as_u64().map(|b| b as u32), "{name}");
        let ids: Vec<Vec<u32>> = case["ids"].as_array().unwrap().iter().map(ids_of).collect();
        let decoded: Vec<String> = case["decoded"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_str().unwrap().to_string())
            .collect();
        bad.extend(check(name, &tok, &texts, &ids, &decoded));
        println!("{name}: {} texts match", texts.len());
    }
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn sentencepiece_decode_round_trips_text_and_bytes() {
    let tok = load(&fixtures().join("spm.gguf"));
    // Characters outside the vocabulary go through `<0xNN>` pieces and come back whole.
    for text in [
        "héllo wörld 🎉",
        "  two leading",
        "tab\there\nnewline",
        "日本語 ok",
    ] {
        let ids = tok.encode(text).unwrap();
        assert_eq!(tok.decode(&ids, true).unwrap(), text);
    }
    let byte = tok.token_id("<0xF0>").unwrap();
    assert!(tok.encode("🎉").unwrap().contains(&byte));
    assert_eq!(tok.unk, Some(0));
    assert_eq!(tok.eos, Some(2));
}

#[test]
fn smollm2_gguf_tokenizer_matches_its_tokenizer_json() {
    let gguf = root().join("models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    let json = root().join("models/smollm2-hf/tokenizer.json");
    if !gguf.exists() || !json.exists() {
        rlx_driver::testing::skip(
            "smollm2_gguf_tokenizer_matches_its_tokenizer_json",
            "models/smollm2 or models/smollm2-hf not fetched (scripts/fetch-models.sh)",
        );
        return;
    }
    let hf = tokenizers::Tokenizer::from_file(&json).unwrap();
    let tok = load(&gguf);
    let exp = expected();
    let texts: Vec<&str> = exp["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    let ids: Vec<Vec<u32>> = texts
        .iter()
        .map(|t| hf.encode(*t, false).unwrap().get_ids().to_vec())
        .collect();
    let decoded: Vec<String> = ids.iter().map(|i| hf.decode(i, false).unwrap()).collect();
    let bad = check("smollm2", &tok, &texts, &ids, &decoded);
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// A tokenizer-only GGUF file in the temp dir.
fn write_gguf(name: &str, meta: Vec<(&str, MetaValue)>) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rlx-gguf-tok-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let meta: Vec<(String, MetaValue)> =
        meta.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    GgufWriter::create(&path, &meta, Vec::new())
        .unwrap()
        .finish()
        .unwrap();
    path
}

fn strings(items: &[&str]) -> MetaValue {
    MetaValue::Array(
        items
            .iter()
            .map(|s| MetaValue::String(s.to_string()))
            .collect(),
    )
}

#[test]
fn unsupported_tokenizers_are_one_clear_error() {
    let cases = [
        (
            "pre.gguf",
            vec![
                ("tokenizer.ggml.model", MetaValue::String("gpt2".into())),
                ("tokenizer.ggml.pre", MetaValue::String("tekken".into())),
                ("tokenizer.ggml.tokens", strings(&["a", "b", "ab"])),
                ("tokenizer.ggml.merges", strings(&["a b"])),
            ],
            "pre-tokenizer `tekken`",
        ),
        (
            "model.gguf",
            vec![
                ("tokenizer.ggml.model", MetaValue::String("bert".into())),
                ("tokenizer.ggml.tokens", strings(&["a"])),
            ],
            "tokenizer model `bert`",
        ),
        (
            "scores.gguf",
            vec![
                ("tokenizer.ggml.model", MetaValue::String("llama".into())),
                ("tokenizer.ggml.tokens", strings(&["<unk>", "a"])),
                (
                    "tokenizer.ggml.scores",
                    MetaValue::Array(vec![MetaValue::F32(0.0)]),
                ),
            ],
            "`tokenizer.ggml.scores` has 1 entries for 2 tokens",
        ),
    ];
    for (name, meta, want) in cases {
        let f = GgufFile::open(write_gguf(name, meta)).unwrap();
        let err = ChatTokenizer::from_gguf(&f).unwrap_err().to_string();
        assert!(err.contains(want), "{name}: {err}");
    }
}

#[test]
fn generated_text_keeps_its_first_space() {
    let tok = load(&fixtures().join("spm.gguf"));
    let prompt = tok.encode("The capital of France is").unwrap();
    let both = tok.encode("The capital of France is Paris").unwrap();
    let generated = &both[prompt.len()..];
    assert_eq!(tok.decode(generated, true).unwrap(), "Paris");
    assert_eq!(tok.decode_continuation(generated, true).unwrap(), " Paris");
    let gpt2 = load(&fixtures().join("bpe-llama-bpe.gguf"));
    let ids = gpt2.encode(" Paris").unwrap();
    assert_eq!(gpt2.decode_continuation(&ids, true).unwrap(), " Paris");
}
