//! `rlx generate` and `rlx bench` on a Llama folder written here (random weights, word-level
//! tokenizer): greedy generation is deterministic, several prompts run as one batch, the
//! bench reports prefill and decode apart, and bad settings are one-line errors. `--device
//! auto` picks CUDA where it is available, so these run on the GPU machine too.

use rlx_models::llama::sample::RandomLlama;
use std::path::PathBuf;
use std::process::{Command, Output};

fn rlx(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rlx"))
        .args(args)
        .output()
        .expect("the rlx binary runs")
}

fn folder(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rlx-llm-cli-{tag}-{}", std::process::id()));
    RandomLlama::default().write(&dir).unwrap();
    dir
}

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("JSON")
}

#[test]
fn generate_and_bench_a_llama_folder() {
    let dir = folder("gen");
    let d = dir.to_str().unwrap();
    let gen = |extra: &[&str]| {
        let mut a = vec!["generate", "w5 w6 w7", "--model", d, "--max-tokens", "8"];
        a.extend_from_slice(extra);
        a.push("--json");
        json(&rlx(&a))
    };
    let a = gen(&["--ignore-eos"]);
    assert_eq!(a["prompt_tokens"], serde_json::json!([5, 6, 7]));
    let tokens = a["tokens"].as_array().unwrap().clone();
    assert_eq!(tokens.len(), 8, "{a}");
    assert_eq!(
        gen(&["--ignore-eos"])["tokens"].as_array().unwrap(),
        &tokens
    );
    assert!(a["timings"]["decode_tok_s"].as_f64().unwrap() > 0.0);
    // sampling settings are accepted and seeded
    let s = [
        "--ignore-eos",
        "--temperature",
        "0.9",
        "--top-k",
        "20",
        "--seed",
        "4",
    ];
    assert_eq!(gen(&s)["tokens"], gen(&s)["tokens"]);
    // several prompts: one result each, the first equal to its single run
    let o = rlx(&[
        "generate",
        "w5 w6 w7",
        "w9",
        "--model",
        d,
        "--max-tokens",
        "8",
        "--ignore-eos",
        "--json",
    ]);
    let b = json(&o);
    let results = b["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["tokens"].as_array().unwrap(), &tokens);
    // llama-bench-like figures
    let o = rlx(&[
        "bench",
        d,
        "--prompt-tokens",
        "20",
        "--gen-tokens",
        "6",
        "--warmup",
        "1",
        "--json",
    ]);
    let v = json(&o);
    for key in [
        "prefill_tok_s",
        "decode_tok_s",
        "median_ms",
        "prompt_tokens",
        "batch",
    ] {
        assert!(v.get(key).is_some(), "bench JSON lacks {key}: {v}");
    }
    assert_eq!(v["prompt_tokens"], 20);
    // bad settings: one line, exit 1
    let o = rlx(&["generate", "w5", "--model", d, "--top-p", "1.5"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("top_p"));
    let o = rlx(&["generate", "w5", "--model", d, "--repeat-penalty", "0"]);
    assert_eq!(o.status.code(), Some(1));
    std::fs::remove_dir_all(&dir).ok();
}
