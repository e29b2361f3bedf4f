//! SmolLM2-135M-Instruct (GGUF Q4_1) against an independent reference: greedy continuations
//! of three prompts, computed by `scripts/ref/smollm2_ref.py` (the `gguf` Python package's
//! dequantization, a numpy forward pass and a from-scratch BPE) and checked in as
//! `crates/rlx-gguf/tests/fixtures/smollm2_greedy.json`. Regenerate with:
//!
//! ```text
//! python3 scripts/ref/smollm2_ref.py models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
//!     crates/rlx-gguf/tests/fixtures/smollm2_greedy.json
//! ```
//!
//! The reference comparison runs the CPU's exact quantized matmuls
//! (`CompileOptions::exact_quant`); the default integer path (activations quantized to 8
//! bits, as llama.cpp does) is checked to still answer "Paris".
//!
//! Needs the model file (`scripts/fetch-models.sh`); says SKIPPED without it.

mod support;

use rlx_gguf::GgufFile;
use rlx_models::llama::{Generator, Llama, Sampling};
use rlx_runtime::CompileOptions;
use std::path::PathBuf;
use support::{cpu_runner, cpu_runner_with, ids};

const FIXTURE: &str = include_str!("../../rlx-gguf/tests/fixtures/smollm2_greedy.json");

fn model_path() -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let p = root.join("models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    p.exists().then_some(p)
}

#[test]
fn smollm2_greedy_matches_reference() {
    let Some(path) = model_path() else {
        rlx_driver::testing::skip(
            "smollm2_greedy_matches_reference",
            "SmolLM2 GGUF not fetched (run scripts/fetch-models.sh)",
        );
        return;
    };
    let fixture: serde_json::Value = serde_json::from_str(FIXTURE).unwrap();
    let file = GgufFile::open(&path).unwrap();

    // Dequantization of real tensors against the gguf package.
    for (name, want) in fixture["tensors"].as_object().unwrap() {
        let (_, v) = file.dequantize(name).unwrap();
        let sum: f64 = v.iter().map(|&x| x as f64).sum();
        let abs: f64 = v.iter().map(|&x| (x as f64).abs()).sum();
        let (ws, wa) = (
            want["sum"].as_f64().unwrap(),
            want["abs_sum"].as_f64().unwrap(),
        );
        assert!(
            (abs - wa).abs() <= 1e-6 * wa,
            "{name}: abs sum {abs} vs {wa}"
        );
        assert!((sum - ws).abs() <= 1e-6 * wa, "{name}: sum {sum} vs {ws}");
        for (g, w) in v.iter().zip(want["first"].as_array().unwrap()) {
            assert_eq!(*g, w.as_f64().unwrap() as f32, "{name}");
        }
    }

    let model = Llama::from_gguf(&file).unwrap();
    drop(file);
    let runner = cpu_runner_with(CompileOptions {
        exact_quant: true,
        ..CompileOptions::default()
    });
    let mut gen = Generator::new(&model, runner);
    gen.stop_ids.clear();
    let n = fixture["new_tokens"].as_u64().unwrap() as usize;
    for case in fixture["cases"].as_array().unwrap() {
        let prompt = case["prompt"].as_str().unwrap();
        let want_prompt = ids(&case["prompt_ids"]);
        let got_prompt = model.tokenizer.encode(prompt).unwrap();
        assert_eq!(got_prompt, want_prompt, "prompt ids of {prompt:?}");
        let want = ids(&case["greedy_ids"]);
        let stats = gen
            .generate(&got_prompt, n, &Sampling::default(), |_| {})
            .unwrap();
        let text = model.tokenizer.decode(&stats.tokens, false).unwrap();
        println!("{prompt:?} -> {text:?}");
        assert_eq!(
            stats.tokens, want,
            "greedy continuation of {prompt:?}: {text:?}"
        );
        if prompt == "The capital of France is" {
            assert!(text.contains("Paris"), "{text:?}");
        }
    }
}

#[test]
fn smollm2_integer_dot_still_answers_paris() {
    let Some(path) = model_path() else {
        rlx_driver::testing::skip(
            "smollm2_integer_dot_still_answers_paris",
            "SmolLM2 GGUF not fetched (run scripts/fetch-models.sh)",
        );
        return;
    };
    let fixture: serde_json::Value = serde_json::from_str(FIXTURE).unwrap();
    let model = Llama::open(&path).unwrap();
    let mut gen = Generator::new(&model, cpu_runner());
    gen.stop_ids.clear();
    let case = &fixture["cases"][0];
    let prompt = case["prompt"].as_str().unwrap();
    assert_eq!(prompt, "The capital of France is");
    let want = ids(&case["greedy_ids"]);
    let prompt_ids = model.tokenizer.encode(prompt).unwrap();
    let stats = gen
        .generate(&prompt_ids, want.len(), &Sampling::default(), |_| {})
        .unwrap();
    let text = model.tokenizer.decode(&stats.tokens, false).unwrap();
    let same = stats
        .tokens
        .iter()
        .zip(&want)
        .take_while(|(a, b)| a == b)
        .count();
    println!(
        "{prompt:?} -> {text:?} ({same} of {} tokens as the f32 reference)",
        want.len()
    );
    assert!(text.contains("Paris"), "{text:?}");
}
