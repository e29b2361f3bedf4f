//! all-MiniLM-L6-v2 on the CPU against an independent float64 numpy forward pass
//! (`scripts/ref/minilm_ref.py`) over the same safetensors: cosine ≥ 0.99999 and max abs
//! error ≤ 1e-4, for single texts and for one padded batch of texts of different lengths.
//!
//! Needs the real model (`scripts/fetch-models.sh` puts it in `models/minilm`, or set
//! `RLX_MINILM_DIR`) and python3 with numpy; says SKIPPED otherwise.

use rlx_models::bert::{self, SENTENCE_EMBEDDING};
use rlx_models::BertModel;
use rlx_runtime::{CompileOptions, CompiledGraph, Session};
use std::path::PathBuf;
use std::process::Command;

const TEXTS: &[&str] = &[
    "The quick brown fox jumps over the lazy dog.",
    "RLX compiles a model once and runs it fast on any device.",
    "Hi",
    "Sentence embeddings map text to vectors; similar meanings land close together, \
     which makes them useful for search, clustering and deduplication of documents.",
    "Ünïcödé, punctuation!? and numbers 3.14159 -- all tokenized.",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn model_dir() -> Option<PathBuf> {
    let d = std::env::var_os("RLX_MINILM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("models/minilm"));
    d.join("model.safetensors").is_file().then_some(d)
}

fn python_ok() -> bool {
    Command::new("python3")
        .args(["-c", "import numpy"])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn run(compiled: &CompiledGraph, enc: &rlx_models::Encoded) -> Vec<Vec<f32>> {
    let inputs = bert::inputs(enc);
    let out = compiled.run(&inputs).expect("runs");
    let (name, t) = &out[0];
    assert_eq!(name, SENTENCE_EMBEDDING);
    let dim = t.shape()[1];
    t.as_f32()
        .expect("f32 output")
        .chunks(dim)
        .map(<[f32]>::to_vec)
        .collect()
}

fn reference(dir: &PathBuf, texts: &[&str], ids: &[Vec<u32>], max_len: usize) -> Vec<Vec<f64>> {
    let req = serde_json::json!({
        "model_dir": dir,
        "texts": texts,
        "input_ids": ids,
        "max_len": max_len,
    });
    let path = std::env::temp_dir().join(format!("rlx-minilm-ref-{}.json", std::process::id()));
    std::fs::write(&path, req.to_string()).expect("writes request");
    let out = Command::new("python3")
        .arg(root().join("scripts/ref/minilm_ref.py"))
        .arg(&path)
        .output()
        .expect("python3 runs");
    std::fs::remove_file(&path).ok();
    assert!(
        out.status.success(),
        "reference failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("reference JSON");
    match v["ids_match"].as_bool() {
        Some(true) => println!("token ids: identical to Python tokenizers"),
        Some(false) => panic!(
            "token ids differ from Python tokenizers: rust {ids:?}, python {}",
            v["python_ids"]
        ),
        None => println!("token ids: Python tokenizers not installed, not cross-checked"),
    }
    serde_json::from_value(v["embeddings"].clone()).expect("embeddings")
}

/// (cosine, max abs error) of `a` against `r`.
fn compare(a: &[f32], r: &[f64]) -> (f64, f64) {
    let (mut dot, mut na, mut nr, mut max) = (0.0, 0.0, 0.0, 0.0f64);
    for (&x, &y) in a.iter().zip(r) {
        let x = x as f64;
        dot += x * y;
        na += x * x;
        nr += y * y;
        max = max.max((x - y).abs());
    }
    (dot / (na.sqrt() * nr.sqrt()), max)
}

#[test]
fn minilm_matches_numpy_reference() {
    let test = "rlx-models::minilm_matches_numpy_reference";
    let Some(dir) = model_dir() else {
        rlx_driver::testing::skip(test, "models/minilm not fetched (scripts/fetch-models.sh)");
        return;
    };
    if !python_ok() {
        rlx_driver::testing::skip(test, "python3 with numpy not available for the reference");
        return;
    }
    let model = BertModel::load(&dir).expect("loads");
    let tok = model.tokenizer().expect("tokenizer");
    let session = Session::new(rlx_driver::Device::Cpu).expect("cpu session");
    for (name, t) in &model.params {
        session.set_param(name, t.clone());
    }
    let compiled = session
        .compile(&model.graph, CompileOptions::default())
        .expect("compiles");

    let enc = tok.encode(TEXTS).expect("tokenizes");
    let lens = enc.lengths();
    assert!(
        lens.iter().min() != lens.iter().max(),
        "the batch must need padding: {lens:?}"
    );
    let reference = reference(&dir, TEXTS, &enc.ids, tok.max_len());

    let mut worst = (1.0f64, 0.0f64);
    let mut check = |what: &str, got: &[f32], want: &[f64]| {
        assert_eq!(got.len(), want.len(), "{what}: dim");
        let (cos, max) = compare(got, want);
        println!(
            "{what}: cosine {cos:.9} (1 - cos = {:.1e}), max abs error {max:.2e}",
            1.0 - cos
        );
        assert!(cos >= 0.99999, "{what}: cosine {cos} < 0.99999");
        assert!(max <= 1e-4, "{what}: max abs error {max:e} > 1e-4");
        worst = (worst.0.min(cos), worst.1.max(max));
    };
    // One text at a time (no padding).
    for (i, text) in TEXTS.iter().enumerate() {
        let one = tok.encode(&[text]).expect("tokenizes");
        let got = run(&compiled, &one);
        check(
            &format!("single #{i} ({} tokens)", lens[i]),
            &got[0],
            &reference[i],
        );
    }
    // All at once, padded to the longest and masked.
    let got = run(&compiled, &enc);
    for (i, g) in got.iter().enumerate() {
        check(
            &format!("batch #{i} ({} of {} tokens)", lens[i], enc.max_len()),
            g,
            &reference[i],
        );
    }
    println!(
        "worst over {} comparisons: cosine {:.9} (1 - cos = {:.1e}), max abs error {:.2e}",
        2 * TEXTS.len(),
        worst.0,
        1.0 - worst.0,
        worst.1
    );
}
