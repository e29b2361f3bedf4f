//! Llama from a Hugging Face folder (`config.json` + safetensors + `tokenizer.json`).
//!
//! Real weights: `models/smollm2-hf` is SmolLM2-135M-Instruct written as a Hugging Face
//! folder by `scripts/ref/gguf_to_hf.py` (outside RLX: the `gguf` package dequantizes the
//! GGUF, Q/K rows go back to Hugging Face's RoPE order, the vocab becomes a `tokenizer.json`).
//! The values equal the GGUF's, so RLX's greedy continuations from this folder must equal the
//! numpy reference of the GGUF (`crates/rlx-gguf/tests/fixtures/smollm2_greedy.json`), and
//! the prompt ids from `tokenizer.json` (through the `tokenizers` crate) must equal the
//! reference's from-scratch BPE. `scripts/fetch-models.sh` makes the folder; without it the
//! test says SKIPPED. Error paths use a tiny folder written here.

mod support;

use rlx_models::llama::{Generator, Llama, Sampling};
use std::path::{Path, PathBuf};
use support::{cpu_runner, ids};

const FIXTURE: &str = include_str!("../../rlx-gguf/tests/fixtures/smollm2_greedy.json");

fn hf_folder() -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/smollm2-hf");
    p.join("config.json").is_file().then_some(p)
}

#[test]
fn smollm2_hf_folder_greedy_matches_reference() {
    let Some(dir) = hf_folder() else {
        rlx_driver::testing::skip(
            "smollm2_hf_folder_greedy_matches_reference",
            "models/smollm2-hf not made (run scripts/fetch-models.sh)",
        );
        return;
    };
    let fixture: serde_json::Value = serde_json::from_str(FIXTURE).unwrap();
    let model = Llama::open(&dir).unwrap();
    assert_eq!(model.config.kv_heads * 3, model.config.heads, "GQA config");
    assert_eq!(model.tokenizer.eos, Some(2));
    assert!(model.tokenizer.chat_template.is_some());
    let runner = cpu_runner();
    let mut gen = Generator::new(&model, runner);
    gen.stop_ids.clear();
    let n = fixture["new_tokens"].as_u64().unwrap() as usize;
    for case in fixture["cases"].as_array().unwrap() {
        let prompt = case["prompt"].as_str().unwrap();
        let got_prompt = model.tokenizer.encode(prompt).unwrap();
        assert_eq!(
            got_prompt,
            ids(&case["prompt_ids"]),
            "prompt ids of {prompt:?}"
        );
        let stats = gen
            .generate(&got_prompt, n, &Sampling::default(), |_| {})
            .unwrap();
        let text = model.tokenizer.decode(&stats.tokens, false).unwrap();
        println!("{prompt:?} -> {text:?}");
        assert_eq!(
            stats.tokens,
            ids(&case["greedy_ids"]),
            "greedy continuation of {prompt:?}: {text:?}"
        );
        if prompt == "The capital of France is" {
            assert!(text.contains("Paris"), "{text:?}");
        }
    }
}

/// A tiny Llama folder: 1 layer, hidden 8, 2 heads, 1 KV head, vocab 6, tied embeddings.
fn tiny_folder(dir: &Path, skip: Option<&str>, with_tokenizer: bool) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("config.json"),
        r#"{"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 1,
            "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 12,
            "vocab_size": 6, "tie_word_embeddings": true, "eos_token_id": 1}"#,
    )
    .unwrap();
    let shapes: Vec<(String, Vec<usize>)> = vec![
        ("model.embed_tokens.weight".into(), vec![6, 8]),
        ("model.norm.weight".into(), vec![8]),
        ("model.layers.0.input_layernorm.weight".into(), vec![8]),
        (
            "model.layers.0.post_attention_layernorm.weight".into(),
            vec![8],
        ),
        ("model.layers.0.self_attn.q_proj.weight".into(), vec![8, 8]),
        ("model.layers.0.self_attn.k_proj.weight".into(), vec![4, 8]),
        ("model.layers.0.self_attn.v_proj.weight".into(), vec![4, 8]),
        ("model.layers.0.self_attn.o_proj.weight".into(), vec![8, 8]),
        ("model.layers.0.mlp.gate_proj.weight".into(), vec![12, 8]),
        ("model.layers.0.mlp.up_proj.weight".into(), vec![12, 8]),
        ("model.layers.0.mlp.down_proj.weight".into(), vec![8, 12]),
    ];
    let data: Vec<(String, Vec<usize>, Vec<u8>)> = shapes
        .into_iter()
        .filter(|(n, _)| Some(n.as_str()) != skip)
        .map(|(n, s)| {
            let count: usize = s.iter().product();
            let bytes = (0..count)
                .flat_map(|i| half::bf16::from_f32((i % 7) as f32 * 0.05 - 0.1).to_le_bytes())
                .collect();
            (n, s, bytes)
        })
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = data
        .iter()
        .map(|(n, s, b)| {
            let v = safetensors::tensor::TensorView::new(safetensors::Dtype::BF16, s.clone(), b)
                .unwrap();
            (n.clone(), v)
        })
        .collect();
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
    if with_tokenizer {
        std::fs::write(
            dir.join("tokenizer.json"),
            r#"{"version": "1.0", "model": {"type": "WordLevel", "unk_token": "<unk>",
                "vocab": {"<unk>": 0, "</s>": 1, "a": 2, "b": 3, "c": 4, "d": 5}},
                "pre_tokenizer": {"type": "Whitespace"}}"#,
        )
        .unwrap();
    }
}

#[test]
fn tiny_bf16_folder_loads_and_generates() {
    let dir = std::env::temp_dir().join(format!("rlx-llama-hf-ok-{}", std::process::id()));
    tiny_folder(&dir, None, true);
    let model = Llama::open(&dir).unwrap();
    assert_eq!(model.tokenizer.encode("a b c").unwrap(), vec![2, 3, 4]);
    assert_eq!(model.tokenizer.stop_ids, vec![1]);
    let runner = cpu_runner();
    let mut gen = Generator::new(&model, runner);
    gen.stop_ids.clear();
    let stats = gen
        .generate(&[2, 3], 4, &Sampling::default(), |_| {})
        .unwrap();
    assert_eq!(stats.tokens.len(), 4);
    assert!(stats.tokens.iter().all(|&t| t < 6));
    // bf16 weights stay bf16: two bytes per projection value
    let q = model
        .params
        .iter()
        .find(|(n, _)| n == "blk.0.attn_q.weight")
        .unwrap();
    assert_eq!(q.1.size_bytes(), 8 * 8 * 2);
    // projections are read in place from the memory-mapped file, except Q/K (permuted)
    assert!(!q.1.is_shared(), "Q rows are permuted into a copy");
    let up = model
        .params
        .iter()
        .find(|(n, _)| n == "blk.0.ffn_up.weight")
        .unwrap();
    assert!(up.1.is_shared(), "an unpermuted projection borrows the map");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn kv_cache_is_one_allocation_per_generation() {
    let dir = std::env::temp_dir().join(format!("rlx-llama-hf-kv-{}", std::process::id()));
    tiny_folder(&dir, None, true);
    let model = Llama::open(&dir).unwrap();
    let mut gen = Generator::new(&model, cpu_runner());
    gen.stop_ids.clear();
    let first = gen
        .generate(&[2, 3], 6, &Sampling::default(), |_| {})
        .unwrap();
    assert_eq!(first.tokens.len(), 6);
    let m = gen.cache_memory();
    assert_eq!(m.allocs, 1, "one cache allocation for 6 tokens: {m:?}");
    assert_eq!(m.frees, 1, "freed when the generation ends");
    assert_eq!(m.bytes_in_use, 0);
    assert_eq!(m.peak_bytes_in_use, first.kv_cache_bytes);
    // the same tokens again, from a second (single) allocation
    let again = gen
        .generate(&[2, 3], 6, &Sampling::default(), |_| {})
        .unwrap();
    assert_eq!(again.tokens, first.tokens);
    assert_eq!(gen.cache_memory().allocs, 2);
    assert_eq!(gen.cache_memory().bytes_in_use, 0);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn missing_tensor_and_tokenizer_are_named() {
    let dir = std::env::temp_dir().join(format!("rlx-llama-hf-bad-{}", std::process::id()));
    tiny_folder(&dir, Some("model.layers.0.mlp.up_proj.weight"), true);
    let e = Llama::open(&dir).unwrap_err().to_string();
    assert!(
        e.contains("model.layers.0.mlp.up_proj.weight") && e.contains("[12, 8]"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
    tiny_folder(&dir, None, false);
    let e = Llama::open(&dir).unwrap_err().to_string();
    assert!(e.contains("tokenizer.json"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
    let e = Llama::open(&dir.join("nothing")).unwrap_err().to_string();
    assert!(e.contains("no such file or folder"), "{e}");
}

#[test]
fn random_llama_and_qwen2_folders_generate_on_the_cpu() {
    use rlx_models::llama::sample::RandomLlama;
    for qkv_bias in [false, true] {
        let dir = std::env::temp_dir().join(format!(
            "rlx-llama-random-{qkv_bias}-{}",
            std::process::id()
        ));
        RandomLlama {
            qkv_bias,
            ..RandomLlama::default()
        }
        .write(&dir)
        .unwrap();
        let model = Llama::open(&dir).unwrap();
        assert_eq!(model.config.qkv_bias, qkv_bias);
        let biases = model
            .params
            .iter()
            .filter(|(n, _)| n.ends_with(".bias"))
            .count();
        assert_eq!(
            biases,
            if qkv_bias { 6 } else { 0 },
            "q/k/v biases of 2 layers"
        );
        assert_eq!(model.tokenizer.encode("w5 w6").unwrap(), vec![5, 6]);
        let mut gen = Generator::new(&model, cpu_runner());
        gen.stop_ids.clear();
        let a = gen
            .generate(&[5, 6, 7], 6, &Sampling::default(), |_| {})
            .unwrap();
        let b = gen
            .generate(&[5, 6, 7], 6, &Sampling::default(), |_| {})
            .unwrap();
        assert_eq!(a.tokens, b.tokens);
        assert_eq!(a.tokens.len(), 6);
        std::fs::remove_dir_all(&dir).ok();
    }
}
