//! A random Llama folder written as GGUF (`rlx quantize`'s library half): the file re-reads
//! with the tensors, types and metadata llama.cpp expects; f16 and q8_0 files generate the
//! folder's greedy tokens with logits within tolerance, q4_k's logits stay close; a Qwen2
//! folder's Q/K rows round-trip exactly through the NEOX permutation; the `gguf` Python
//! package (when installed) reads the file too.

#[allow(dead_code)] // `ids` is for the other tests
mod support;

use rlx_gguf::{GgufFile, QuantFormat};
use rlx_ir::Tensor;
use rlx_llm::SessionRunner;
use rlx_models::llama::export::export_gguf;
use rlx_models::llama::sample::RandomLlama;
use rlx_models::llama::{Generator, Llama, Runner, Sampling};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use support::cpu_runner;

fn temp(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rlx-export-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A CPU runner that keeps the logits of every run.
struct Recording {
    inner: SessionRunner,
    logits: Arc<Mutex<Vec<Vec<f32>>>>,
}

impl Runner for Recording {
    fn set_param(&mut self, name: &str, value: Arc<Tensor>) {
        self.inner.set_param(name, value)
    }
    fn compile(&mut self, graph: &rlx_ir::Graph) -> Result<usize, String> {
        self.inner.compile(graph)
    }
    fn run(
        &mut self,
        handle: usize,
        inputs: &HashMap<String, Tensor>,
    ) -> Result<Vec<(String, Tensor)>, String> {
        let out = self.inner.run(handle, inputs)?;
        for (n, t) in &out {
            if n == "logits" {
                self.logits
                    .lock()
                    .unwrap()
                    .push(t.as_f32().unwrap().to_vec());
            }
        }
        Ok(out)
    }
}

/// Greedy tokens of 6 steps after `w5 w6 w7`, and the logits of every step.
fn greedy(model: &Llama) -> (Vec<u32>, Vec<Vec<f32>>) {
    continue_from(model, &[5, 6, 7], 6)
}

/// Greedy tokens of `steps` steps after `prompt`, and the logits of every step.
fn continue_from(model: &Llama, prompt: &[u32], steps: usize) -> (Vec<u32>, Vec<Vec<f32>>) {
    let logits = Arc::new(Mutex::new(Vec::new()));
    let mut gen = Generator::new(
        model,
        Recording {
            inner: cpu_runner(),
            logits: logits.clone(),
        },
    );
    gen.stop_ids.clear();
    let stats = gen
        .generate(prompt, steps, &Sampling::default(), |_| {})
        .unwrap();
    let logits = std::mem::take(&mut *logits.lock().unwrap());
    (stats.tokens, logits)
}

/// Largest |a - b| over the largest |a|.
fn rel_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len());
    let (mut d, mut m) = (0f32, 0f32);
    for (x, y) in a.iter().zip(b) {
        for (p, q) in x.iter().zip(y) {
            d = d.max((p - q).abs());
            m = m.max(p.abs());
        }
    }
    d / m
}

fn export(src: &Path, out: &Path, f: QuantFormat) -> Vec<String> {
    let model = Llama::open(src).unwrap();
    let mut notes = Vec::new();
    let r = export_gguf(&model, src, out, f, 2, &mut |l| notes.push(l.to_string())).unwrap();
    assert_eq!(r.fallbacks, notes);
    assert_eq!(r.bytes as u64, std::fs::metadata(out).unwrap().len());
    notes
}

#[test]
fn f16_q8_0_and_q4_k_files_generate_like_the_folder() {
    let dir = temp("gen");
    let src = dir.join("hf");
    // rows of 256 and 512: whole q4_k blocks, so no fallback
    let shape = RandomLlama {
        hidden: 256,
        ffn: 512,
        ..RandomLlama::default()
    };
    shape.write(&src).unwrap();
    let (want_tokens, want_logits) = greedy(&Llama::open(&src).unwrap());
    // f16 follows the folder token for token; q8_0 (and q4_k) are judged teacher-forced:
    // after each prefix of the folder's greedy continuation, the next logits stay close (a
    // random model's near-ties may flip a greedy choice at q8_0's precision; prompts of up
    // to 16 tokens, like decode steps, multiply int8-quantized activations)
    for (f, tol, same_tokens) in [
        (QuantFormat::F16, 2e-3, true),
        (QuantFormat::Q8_0, 4e-2, false),
        (QuantFormat::Q4K, 0.3, false),
    ] {
        let out = dir.join(format!("m-{f}.gguf"));
        assert!(export(&src, &out, f).is_empty(), "{f}: no fallback");
        let model = Llama::open(&out).unwrap();
        assert_eq!(model.tokenizer.encode("w5 w6 w7").unwrap(), vec![5, 6, 7]);
        let (tokens, logits) = greedy(&model);
        let d = rel_diff(&want_logits[..1], &logits[..1]);
        println!("{f}: prefill logits differ by {d:.2e} of the largest; tokens {tokens:?}");
        assert!(d < tol, "{f}: logits differ by {d} (tolerance {tol})");
        if same_tokens {
            assert_eq!(tokens, want_tokens, "{f}");
            assert!(rel_diff(&want_logits, &logits) < tol, "{f}: decode logits");
        } else {
            assert_eq!(tokens[0], want_tokens[0], "{f}: the first greedy token");
            let mut prefix = vec![5, 6, 7];
            for (i, &t) in want_tokens.iter().enumerate().take(5) {
                prefix.push(t);
                let (_, got) = continue_from(&model, &prefix, 1);
                let d = rel_diff(&want_logits[i + 1..i + 2], &got[..1]);
                assert!(d < tol, "{f}: step {} logits differ by {d}", i + 1);
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn written_file_has_llama_cpp_names_types_and_metadata() {
    let dir = temp("meta");
    let src = dir.join("hf");
    RandomLlama::default().write(&src).unwrap();
    let out = dir.join("m.gguf");
    // hidden 128: rows of 128 are not q4_k blocks (256) and fall back to q8_0; ffn_down's
    // rows of 256 stay q4_k
    let notes = export(&src, &out, QuantFormat::Q4K);
    assert!(
        notes
            .iter()
            .any(|n| n.contains("blk.0.attn_q.weight") && n.contains("q8_0")),
        "{notes:?}"
    );
    assert!(!notes.iter().any(|n| n.contains("ffn_down")), "{notes:?}");
    let f = GgufFile::open(&out).unwrap();
    assert_eq!(f.get_str("general.architecture").unwrap(), "llama");
    for (k, v) in [
        ("llama.context_length", 1024),
        ("llama.embedding_length", 128),
        ("llama.block_count", 2),
        ("llama.feed_forward_length", 256),
        ("llama.attention.head_count", 4),
        ("llama.attention.head_count_kv", 2),
        ("llama.rope.dimension_count", 32),
        ("general.file_type", 14),
    ] {
        assert_eq!(f.get_u64(k).unwrap(), v, "{k}");
    }
    assert_eq!(f.get_f64("llama.rope.freq_base").unwrap(), 10000.0);
    assert!((f.get_f64("llama.attention.layer_norm_rms_epsilon").unwrap() - 1e-5).abs() < 1e-9);
    assert_eq!(f.get_str("tokenizer.ggml.model").unwrap(), "gpt2");
    assert_eq!(f.get_u64("tokenizer.ggml.eos_token_id").unwrap(), 1);
    let tokens = f.get("tokenizer.ggml.tokens").unwrap().as_array().unwrap();
    assert_eq!((tokens.len(), tokens[7].as_str()), (256, Some("w7")));
    let expect = |name: &str, ty: &str, dims: &[u64]| {
        let t = f.tensor(name).unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(
            (t.ggml_type.name().as_str(), &t.dims[..]),
            (ty, dims),
            "{name}"
        );
    };
    expect("token_embd.weight", "q8_0", &[128, 256]);
    expect("output.weight", "q8_0", &[128, 256]);
    expect("output_norm.weight", "f32", &[128]);
    for l in 0..2 {
        let p = |s: &str| format!("blk.{l}.{s}.weight");
        expect(&p("attn_norm"), "f32", &[128]);
        expect(&p("ffn_norm"), "f32", &[128]);
        expect(&p("attn_q"), "q8_0", &[128, 128]);
        expect(&p("attn_k"), "q8_0", &[128, 64]);
        expect(&p("attn_v"), "q8_0", &[128, 64]);
        expect(&p("attn_output"), "q8_0", &[128, 128]);
        expect(&p("ffn_gate"), "q8_0", &[128, 256]);
        expect(&p("ffn_up"), "q8_0", &[128, 256]);
        expect(&p("ffn_down"), "q4_k", &[256, 128]);
    }
    assert_eq!(f.tensors.len(), 3 + 2 * 9);
    // every --type writes a file RLX loads, with the expected type where rows fit
    for fmt in [
        QuantFormat::Q4_0,
        QuantFormat::Q4_1,
        QuantFormat::Q5_0,
        QuantFormat::Q5_1,
        QuantFormat::Q2K,
        QuantFormat::Q3K,
        QuantFormat::Q5K,
        QuantFormat::Q6K,
    ] {
        let out = dir.join(format!("m-{fmt}.gguf"));
        export(&src, &out, fmt);
        let f = GgufFile::open(&out).unwrap();
        let down = f.tensor("blk.1.ffn_down.weight").unwrap();
        assert_eq!(down.ggml_type.format(), Some(fmt));
        let q = f.tensor("blk.1.attn_q.weight").unwrap().ggml_type.format();
        assert_eq!(
            q,
            Some(if fmt.block() == 32 {
                fmt
            } else {
                QuantFormat::Q8_0
            })
        );
        Llama::open(&out).unwrap();
    }
    python_gguf_reads(&out);
    std::fs::remove_dir_all(&dir).ok();
}

/// Reads the file with the `gguf` Python package, when installed: tensor names and types.
fn python_gguf_reads(path: &Path) {
    let script = "import sys, gguf\n\
        r = gguf.GGUFReader(sys.argv[1])\n\
        a = r.fields['general.architecture']\n\
        print(bytes(a.parts[a.data[0]]).decode())\n\
        for t in r.tensors: print(t.name, t.tensor_type.name, [int(d) for d in t.shape])\n";
    let out = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(path)
        .output();
    let out = match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        Ok(o) => {
            let e = String::from_utf8_lossy(&o.stderr);
            if e.contains("No module named") {
                println!("SKIPPED: the gguf Python package is not installed");
                return;
            }
            panic!("gguf could not read {}: {e}", path.display());
        }
        Err(e) => {
            println!("SKIPPED: no python3 ({e})");
            return;
        }
    };
    assert!(out.starts_with("llama\n"), "{out}");
    assert!(
        out.contains("blk.1.ffn_down.weight Q4_K [256, 128]"),
        "{out}"
    );
    assert!(out.contains("output_norm.weight F32 [128]"), "{out}");
}

#[test]
fn qwen2_rows_round_trip_exactly() {
    let dir = temp("qwen2");
    let src = dir.join("hf");
    RandomLlama {
        qkv_bias: true,
        ..RandomLlama::default()
    }
    .write(&src)
    .unwrap();
    let out = dir.join("m.gguf");
    // f16 rows: the file's Q rows are the folder's rounded to f16, in the same order, and its
    // f32 biases and norms equal the folder's bit for bit
    let a = Llama::open(&src).unwrap();
    let model = Llama::open(&src).unwrap();
    export_gguf(&model, &src, &out, QuantFormat::F16, 1, &mut |_| {}).unwrap();
    let f = GgufFile::open(&out).unwrap();
    assert_eq!(f.get_str("general.architecture").unwrap(), "qwen2");
    assert_eq!(f.get_str("tokenizer.ggml.pre").unwrap(), "qwen2");
    let b = Llama::open(&out).unwrap();
    for name in [
        "blk.0.attn_q.bias",
        "blk.1.attn_k.bias",
        "output_norm.weight",
    ] {
        let (x, y) = (a.param(name).unwrap(), b.param(name).unwrap());
        assert_eq!(x.as_f32().unwrap(), y.as_f32().unwrap(), "{name}");
    }
    // the f32 folder's Q rows, rounded to f16, in the reader's order
    let q = |m: &Llama| {
        let (fmt, n, k) = m.linear("blk.1.attn_q.weight").unwrap();
        let rlx_ir::TensorData::U8(b) = m.param("blk.1.attn_q.weight").unwrap().data() else {
            panic!("packed")
        };
        let mut v = vec![0f32; n * k];
        fmt.dequantize(b, &mut v);
        v
    };
    let want: Vec<f32> = q(&a)
        .iter()
        .map(|x| half::f16::from_f32(*x).to_f32())
        .collect();
    assert_eq!(q(&b), want);
    let (ta, _) = greedy(&a);
    let (tb, _) = greedy(&b);
    assert_eq!(ta, tb);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn gguf_source_round_trips_and_keeps_its_tokenizer() {
    let dir = temp("regguf");
    let src = dir.join("hf");
    RandomLlama::default().write(&src).unwrap();
    let first = dir.join("a.gguf");
    export(&src, &first, QuantFormat::Q8_0);
    // q8_0 to q8_0 copies the blocks: the second file's tensors equal the first's
    let second = dir.join("b.gguf");
    export(&first, &second, QuantFormat::Q8_0);
    let (fa, fb) = (
        GgufFile::open(&first).unwrap(),
        GgufFile::open(&second).unwrap(),
    );
    for t in &fa.tensors {
        assert_eq!(
            fa.tensor_bytes(&t.name).unwrap().1,
            fb.tensor_bytes(&t.name).unwrap().1,
            "{}",
            t.name
        );
    }
    assert_eq!(
        fa.get("tokenizer.ggml.tokens"),
        fb.get("tokenizer.ggml.tokens")
    );
    // a word-level vocabulary has no merges; its words are whole tokens
    let types = fb
        .get("tokenizer.ggml.token_type")
        .unwrap()
        .as_array()
        .unwrap();
    assert_eq!(types[5].as_i64(), Some(4));
    // and an unwritable destination is an error naming it
    let bad = dir.join("no-such-dir").join("x.gguf");
    let model = Llama::open(&first).unwrap();
    let e = export_gguf(&model, &first, &bad, QuantFormat::Q8_0, 1, &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("no-such-dir"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn llama3_rope_scaling_becomes_rope_freqs() {
    let dir = temp("rope");
    let src = dir.join("hf");
    RandomLlama::default().write(&src).unwrap();
    let path = src.join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["rope_scaling"] = serde_json::json!({
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 64
    });
    std::fs::write(&path, config.to_string()).unwrap();
    let out = dir.join("m.gguf");
    export(&src, &out, QuantFormat::F16);
    let f = GgufFile::open(&out).unwrap();
    let t = f.tensor("rope_freqs.weight").unwrap();
    assert_eq!(
        (t.ggml_type.name().as_str(), &t.dims[..]),
        ("f32", &[16u64][..])
    );
    let (a, b) = (Llama::open(&src).unwrap(), Llama::open(&out).unwrap());
    let (fa, fb) = (
        a.config.rope_freq_factors.clone().unwrap(),
        b.config.rope_freq_factors.clone().unwrap(),
    );
    assert!(
        fa.iter().any(|&x| x != 1.0),
        "the scaling changes some pairs"
    );
    for (x, y) in fa.iter().zip(&fb) {
        assert_eq!(*x as f32 as f64, *y);
    }
    assert_eq!(greedy(&a).0, greedy(&b).0);
    std::fs::remove_dir_all(&dir).ok();
}
