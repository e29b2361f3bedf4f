//! `rlx embed` and `rlx bench` end to end: bad input is one error line with exit code 1, and
//! with the real MiniLM fetched (scripts/fetch-models.sh) the JSON outputs have their keys.

use std::path::PathBuf;
use std::process::{Command, Output};

fn rlx(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rlx"))
        .args(args)
        .env(
            "RLX_CACHE_DIR",
            std::env::temp_dir().join("rlx-models-cli-cache"),
        )
        .output()
        .expect("the rlx binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

fn minilm() -> Option<String> {
    let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/minilm");
    d.join("model.safetensors")
        .is_file()
        .then(|| d.display().to_string())
}

#[test]
fn bad_models_are_one_line_errors() {
    let o = rlx(&["embed", "hi", "--model", "/nonexistent/model"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not a model folder"), "{}", stderr(&o));

    let o = rlx(&["bench", "/nonexistent/model"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).starts_with("error: "), "{}", stderr(&o));

    let o = rlx(&["embed", "hi", "--model", "hf:not a name"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("not a hub model name"),
        "{}",
        stderr(&o)
    );

    let o = rlx(&["embed", "--model", "x"]);
    assert_eq!(o.status.code(), Some(2), "no TEXT is bad usage");
}

#[test]
fn embed_and_bench_minilm_json() {
    let Some(dir) = minilm() else {
        rlx_driver::testing::skip(
            "rlx::embed_and_bench_minilm_json",
            "models/minilm not fetched (scripts/fetch-models.sh)",
        );
        return;
    };
    let o = rlx(&[
        "embed",
        "A cat sat on the mat.",
        "A kitten rests on a rug.",
        "Stock markets fell sharply today after the announcement.",
        "--model",
        &dir,
        "--device",
        "cpu",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(v["dim"], 384);
    assert_eq!(v["device"], "cpu");
    let e: Vec<Vec<f64>> = serde_json::from_value(v["embeddings"].clone()).expect("rows");
    let tokens: Vec<usize> = serde_json::from_value(v["tokens"].clone()).expect("tokens");
    assert_eq!(e.len(), 3);
    assert_eq!(tokens.len(), 3);
    assert_ne!(tokens[0], tokens[2], "texts of different lengths");
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    for r in &e {
        assert!((dot(r, r) - 1.0).abs() < 1e-5, "rows are L2-normalised");
    }
    assert!(
        dot(&e[0], &e[1]) > dot(&e[0], &e[2]) + 0.2,
        "the two sentences about cats are closer than the one about markets"
    );

    // `rlx bench` on the folder with `extra` flags, as parsed JSON.
    let bench = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec![
            "bench",
            &dir,
            "--device",
            "cpu",
            "--dim",
            "batch=2,seq=16",
            "--warmup",
            "1",
            "--json",
        ];
        args.extend_from_slice(extra);
        let o = rlx(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_slice(&o.stdout).expect("JSON")
    };
    let v = bench(&["--iters", "3"]);
    for key in [
        "model",
        "device",
        "compile_ms",
        "median_ms",
        "p90_ms",
        "iters",
    ] {
        assert!(v.get(key).is_some(), "bench JSON lacks {key}: {v}");
    }
    assert_eq!(v["iters"], 3);
    assert_eq!(v["inputs"]["input_ids"], serde_json::json!([2, 16]));
    assert_eq!(v["approximate_gelu"], false);

    // The opt-in approximation is accepted and reported.
    let v = bench(&["--iters", "2", "--approximate-gelu"]);
    assert_eq!(v["approximate_gelu"], true);
}

#[test]
fn embed_file_in_batches_matches_one_batch() {
    let Some(dir) = minilm() else {
        rlx_driver::testing::skip(
            "rlx::embed_file_in_batches_matches_one_batch",
            "models/minilm not fetched (scripts/fetch-models.sh)",
        );
        return;
    };
    let texts = [
        "A cat sat on the mat.",
        "Stock markets fell sharply today after the announcement of new tariffs on steel.",
        "Hi",
        "The quick brown fox jumps over the lazy dog, twice, and then rests by the river.",
        "Rust compiles to fast code.",
    ];
    let file = std::env::temp_dir().join(format!("rlx-embed-texts-{}.txt", std::process::id()));
    std::fs::write(&file, texts.join("\n\n") + "\n").expect("write texts");
    let file_arg = file.display().to_string();
    let rows = |o: &Output| -> Vec<Vec<f64>> {
        assert!(o.status.success(), "{}", stderr(o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
        serde_json::from_value(v["embeddings"].clone()).expect("rows")
    };
    let mut one = vec!["embed", "--model", &dir, "--device", "cpu", "--json"];
    one.extend(texts);
    let whole = rows(&rlx(&one));
    let batched = rows(&rlx(&[
        "embed",
        "--model",
        &dir,
        "--device",
        "cpu",
        "--json",
        "--file",
        &file_arg,
        "--batch-size",
        "2",
    ]));
    assert_eq!(batched.len(), texts.len(), "blank lines are skipped");
    for (i, (a, b)) in whole.iter().zip(&batched).enumerate() {
        let diff = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max);
        assert!(diff < 1e-4, "text {i}: batched rows differ by {diff}");
    }

    // --runs times the set and reports it
    let o = rlx(&[
        "embed", "--model", &dir, "--device", "cpu", "--json", "--file", &file_arg, "--runs", "2",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(v["texts"], 5);
    assert_eq!(v["runs"], 2);
    assert!(v["median_ms"].as_f64().is_some_and(|m| m > 0.0), "{v}");

    // a missing or empty file is one error line
    let o = rlx(&["embed", "--model", &dir, "--file", "/nonexistent/texts.txt"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("/nonexistent/texts.txt"),
        "{}",
        stderr(&o)
    );
    std::fs::write(&file, "\n  \n").expect("write");
    let o = rlx(&["embed", "--model", &dir, "--file", &file_arg]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no texts"), "{}", stderr(&o));
    let _ = std::fs::remove_file(&file);
}
