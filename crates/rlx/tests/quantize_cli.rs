//! `rlx quantize` on a random Llama folder, then `rlx generate --device cpu` on the file it
//! wrote; bad inputs are one-line errors with a non-zero exit and no panic.

use rlx_llm::{Engine, EngineSettings};
use rlx_models::llama::sample::RandomLlama;
use rlx_models::llama::{Llama, Sampling};
use std::path::PathBuf;
use std::process::{Command, Output};

fn rlx(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rlx"))
        .args(args)
        .output()
        .expect("the rlx binary runs")
}

fn temp(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rlx-quantize-cli-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Greedy tokens of `rlx generate` on the CPU.
fn tokens(model: &str) -> serde_json::Value {
    tokens_with(model, &[])
}

/// Greedy tokens of `rlx generate` on the CPU with more flags.
fn tokens_with(model: &str, more: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "generate",
        "w5 w6 w7",
        "--model",
        model,
        "--device",
        "cpu",
        "--max-tokens",
        "8",
        "--ignore-eos",
        "--json",
    ];
    args.extend_from_slice(more);
    let o = rlx(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(v["prompt_tokens"], serde_json::json!([5, 6, 7]), "{v}");
    v["tokens"].clone()
}

#[test]
fn quantize_then_generate_on_the_cpu() {
    let dir = temp("ok");
    let src = dir.join("hf");
    RandomLlama::default().write(&src).unwrap();
    let s = src.to_str().unwrap();
    let want = tokens(s);
    let f16 = dir.join("m-f16.gguf");
    let o = rlx(&["quantize", s, f16.to_str().unwrap(), "--type", "f16"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("wrote"), "{}", stderr(&o));
    assert_eq!(
        tokens(f16.to_str().unwrap()),
        want,
        "f16 generates the folder's tokens"
    );
    // q4_k: rows of 128 fall back to q8_0, said on stderr; the file generates
    let q4 = dir.join("m-q4_k.gguf");
    let o = rlx(&["quantize", s, q4.to_str().unwrap(), "--type", "q4_k"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("stored as q8_0"), "{}", stderr(&o));
    assert_eq!(tokens(q4.to_str().unwrap()).as_array().unwrap().len(), 8);
    // `--exact-quant` reaches the engine: the CLI's tokens with and without it are the
    // library engine's with `exact_quant` on and off (one thread each)
    let model = Llama::open(&q4).unwrap();
    for exact in [false, true] {
        let settings = EngineSettings {
            threads: Some(1),
            exact_quant: exact,
            ..Default::default()
        };
        let mut e = Engine::new(&model, rlx_driver::Device::Cpu, settings).unwrap();
        let st = e
            .generate(&[5, 6, 7], 8, &Sampling::default(), &[], &mut |_| {})
            .unwrap();
        let flags: &[&str] = if exact {
            &["--threads", "1", "--exact-quant"]
        } else {
            &["--threads", "1"]
        };
        assert_eq!(
            tokens_with(q4.to_str().unwrap(), flags),
            serde_json::json!(st.tokens),
            "exact_quant {exact}"
        );
    }
    // a GGUF source works too
    let q8 = dir.join("m-q8_0.gguf");
    let o = rlx(&[
        "quantize",
        q4.to_str().unwrap(),
        q8.to_str().unwrap(),
        "--type",
        "Q8_0",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(tokens(q8.to_str().unwrap()).as_array().unwrap().len(), 8);
    std::fs::remove_dir_all(&dir).ok();
}

/// `--type q4_k_m`: llama.cpp's mixture, the head and the last layer's value and down
/// projections in q6_k (2 layers: layer 1 is in the last eighth), the rest q4_k; the file
/// generates.
#[test]
fn quantize_a_q4_k_m_mixture() {
    let dir = temp("mix");
    let src = dir.join("hf");
    let spec = RandomLlama {
        hidden: 256,
        ffn: 512,
        ..RandomLlama::default()
    };
    spec.write(&src).unwrap();
    let out = dir.join("m-q4_k_m.gguf");
    let o = rlx(&[
        "quantize",
        src.to_str().unwrap(),
        out.to_str().unwrap(),
        "--type",
        "Q4_K_M",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("q4_k_m"), "{}", stderr(&o));
    let file = rlx_gguf::GgufFile::open(&out).unwrap();
    let ty = |name: &str| {
        let t = file.tensors.iter().find(|t| t.name == name).unwrap();
        t.ggml_type.format().unwrap()
    };
    use rlx_gguf::QuantFormat::{Q4K, Q6K};
    assert_eq!(ty("blk.0.attn_v.weight"), Q4K);
    assert_eq!(ty("blk.1.attn_v.weight"), Q6K);
    assert_eq!(ty("blk.1.ffn_down.weight"), Q6K);
    assert_eq!(ty("blk.1.attn_q.weight"), Q4K);
    assert_eq!(file.get_u64("general.file_type").unwrap(), 15);
    assert_eq!(tokens(out.to_str().unwrap()).as_array().unwrap().len(), 8);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_inputs_are_clear_errors() {
    let dir = temp("bad");
    let src = dir.join("hf");
    RandomLlama::default().write(&src).unwrap();
    let s = src.to_str().unwrap();
    let out = dir.join("m.gguf");
    let o_str = out.to_str().unwrap();
    let check = |o: &Output, want: &str| {
        let e = stderr(o);
        assert!(!o.status.success(), "{e}");
        assert!(e.contains(want), "expected `{want}` in: {e}");
        assert!(
            !e.contains("internal error") && !e.contains("panicked"),
            "{e}"
        );
    };
    let missing = dir.join("missing");
    check(
        &rlx(&["quantize", missing.to_str().unwrap(), o_str]),
        "no such file or folder",
    );
    let o = rlx(&["quantize", s, o_str, "--type", "q9_9"]);
    check(&o, "unknown type `q9_9`");
    assert_eq!(o.status.code(), Some(2), "bad usage");
    let unwritable = dir.join("no-dir").join("m.gguf");
    check(
        &rlx(&["quantize", s, unwritable.to_str().unwrap()]),
        "no-dir",
    );
    // a file that is not GGUF
    let junk = dir.join("junk.gguf");
    std::fs::write(&junk, b"not a gguf file").unwrap();
    check(&rlx(&["quantize", junk.to_str().unwrap(), o_str]), "GGUF");
    assert!(!out.exists(), "nothing written on failure");
    std::fs::remove_dir_all(&dir).ok();
}
