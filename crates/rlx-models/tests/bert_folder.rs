//! A BERT folder written here with a tiny config and random weights: loads, compiles and runs
//! on the CPU (padding must not change a text's embedding), and every broken variant of it
//! (missing tensor, wrong shape, bad config, missing files) is an error that names the
//! problem, never a panic.

use rlx_models::bert::{self, params};
use rlx_models::{BertConfig, BertModel, Encoded};
use rlx_runtime::{CompileOptions, Session};
use safetensors::tensor::{Dtype, TensorView};
use std::path::{Path, PathBuf};

const CONFIG: &str = r#"{"model_type": "bert", "architectures": ["BertModel"],
  "vocab_size": 30, "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
  "intermediate_size": 32, "max_position_embeddings": 20, "type_vocab_size": 2,
  "hidden_act": "gelu", "layer_norm_eps": 1e-12}"#;

/// The checkpoint tensors (HF names and `[out, in]` layouts) of `cfg`.
fn hf_tensors(cfg: &BertConfig, prefix: &str) -> Vec<(String, Vec<usize>)> {
    let mut v = Vec::new();
    for spec in params::specs(cfg) {
        match spec.source {
            params::Source::Copy(n) => v.push((n, spec.shape)),
            params::Source::Transpose(n) => v.push((n, vec![spec.shape[1], spec.shape[0]])),
            params::Source::ConcatTransposed(ns) => {
                let part = spec.shape[1] / ns.len();
                for n in ns {
                    v.push((n, vec![part, spec.shape[0]]));
                }
            }
            params::Source::Concat(ns) => {
                let part = spec.shape[0] / ns.len();
                for n in ns {
                    v.push((n, vec![part]));
                }
            }
        }
    }
    v.into_iter()
        .map(|(n, s)| (format!("{prefix}{n}"), s))
        .collect()
}

fn write_folder(tag: &str, tensors: &[(String, Vec<usize>)], config: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rlx-bert-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    std::fs::write(dir.join("config.json"), config).expect("config");
    let mut seed = rlx_ir::SplitMix64(7);
    let bytes: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, s)| {
            let n: usize = s.iter().product();
            (0..n)
                .flat_map(|_| {
                    let u = (seed.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
                    ((u - 0.5) * 0.4).to_le_bytes()
                })
                .collect()
        })
        .collect();
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .zip(&bytes)
        .map(|((n, s), b)| {
            (
                n.clone(),
                TensorView::new(Dtype::F32, s.clone(), b).expect("view"),
            )
        })
        .collect();
    let data = safetensors::serialize(views, None).expect("serializes");
    std::fs::write(dir.join("model.safetensors"), data).expect("weights");
    dir
}

fn config() -> BertConfig {
    serde_json::from_str(CONFIG).expect("config parses")
}

fn err(dir: &Path) -> String {
    match BertModel::load(dir) {
        Ok(_) => panic!("{} loaded, expected an error", dir.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn tiny_bert_runs_and_padding_does_not_change_embeddings() {
    for prefix in ["", "bert."] {
        let dir = write_folder(
            &format!("ok{}", prefix.len()),
            &hf_tensors(&config(), prefix),
            CONFIG,
        );
        let model = BertModel::load(&dir).expect("loads");
        let session = Session::new(rlx_driver::Device::Cpu).expect("cpu");
        for (n, t) in &model.params {
            session.set_param(n, t.clone());
        }
        let compiled = session
            .compile(&model.graph, CompileOptions::default())
            .expect("compiles");
        let enc = |ids: Vec<Vec<u32>>| Encoded {
            type_ids: ids.iter().map(|r| vec![0; r.len()]).collect(),
            ids,
            pad_id: 0,
            pad_type_id: 0,
        };
        let run = |e: &Encoded| -> Vec<f32> {
            let out = compiled.run(&bert::inputs(e)).expect("runs");
            out[0].1.as_f32().expect("f32").to_vec()
        };
        let short = vec![1, 5, 9, 2];
        let long = vec![1, 3, 4, 6, 7, 8, 11, 2];
        let alone = run(&enc(vec![short.clone()]));
        let batch = run(&enc(vec![long, short]));
        assert_eq!(alone.len(), 16);
        let norm: f32 = alone.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "not L2-normalised: {norm}");
        let max = alone
            .iter()
            .zip(&batch[16..])
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(max < 1e-5, "padding changed the embedding by {max}");
        std::fs::remove_dir_all(&dir).ok();
    }
}

#[test]
fn a_missing_tensor_is_named_with_its_expected_shape() {
    let mut t = hf_tensors(&config(), "");
    t.retain(|(n, _)| n != "encoder.layer.1.attention.self.key.weight");
    let dir = write_folder("missing", &t, CONFIG);
    let e = err(&dir);
    assert!(
        e.contains("missing tensor `encoder.layer.1.attention.self.key.weight`")
            && e.contains("f32[16, 16]"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_misnamed_or_misshapen_tensor_is_an_error() {
    let mut t = hf_tensors(&config(), "");
    for (n, _) in t.iter_mut() {
        if n == "encoder.layer.0.output.dense.weight" {
            *n = "encoder.layer.0.output.dense.kernel".into();
        }
    }
    let dir = write_folder("misnamed", &t, CONFIG);
    let e = err(&dir);
    assert!(
        e.contains("`encoder.layer.0.output.dense.weight` (expected f32[16, 32])"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();

    let mut t = hf_tensors(&config(), "");
    for (n, s) in t.iter_mut() {
        if n == "embeddings.LayerNorm.weight" {
            *s = vec![15];
        }
    }
    let dir = write_folder("shape", &t, CONFIG);
    let e = err(&dir);
    assert!(
        e.contains("embeddings.LayerNorm.weight") && e.contains("expected f32[16], found F32[15]"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_configs_and_missing_files_are_errors() {
    let t = hf_tensors(&config(), "");
    let dir = write_folder(
        "cfg",
        &t,
        &CONFIG.replace("\"num_attention_heads\": 4", "\"num_attention_heads\": 5"),
    );
    assert!(err(&dir).contains("not a multiple"), "{}", err(&dir));
    std::fs::write(dir.join("config.json"), "{not json").expect("writes");
    assert!(err(&dir).contains("config.json"), "{}", err(&dir));
    std::fs::remove_file(dir.join("config.json")).expect("removes");
    assert!(err(&dir).contains("no `config.json`"), "{}", err(&dir));
    std::fs::write(dir.join("config.json"), CONFIG).expect("writes");
    let model = BertModel::load(&dir).expect("loads");
    let e = model.tokenizer().err().expect("no tokenizer.json");
    assert!(e.to_string().contains("tokenizer.json"), "{e}");
    std::fs::write(dir.join("tokenizer.json"), "{}").expect("writes");
    let e = model.tokenizer().err().expect("bad tokenizer.json");
    assert!(e.to_string().contains("tokenizer"), "{e}");
    std::fs::remove_file(dir.join("model.safetensors")).expect("removes");
    assert!(err(&dir).contains("model.safetensors"), "{}", err(&dir));
    assert!(rlx_models::resolve("/nonexistent/model/dir").is_err());
    std::fs::remove_dir_all(&dir).ok();
}
