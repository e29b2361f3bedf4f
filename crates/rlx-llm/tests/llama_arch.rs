//! Gemma and Phi-3 (and Llama, to check the checker) from random-weight folders written in
//! transformers' layout, against an independent f64 forward pass written here from
//! transformers' modeling code: Hugging Face's tensor names and "rotate half" RoPE, Gemma's
//! `sqrt(hidden)` embedding factor (cast to the weights' dtype), `(1 + w)` RMSNorm and tanh
//! GELU, Phi-3's fused `qkv_proj` / `gate_up_proj` (gate first). The CPU graph path's
//! prefill logits must match its logits, and greedy generation (prefill + decode with the
//! KV cache) must pick its argmax at every step.

mod support;

use rlx_gguf::QuantFormat;
use rlx_models::llama::export::export_gguf;
use rlx_models::llama::sample::{Family, RandomLlama};
use rlx_models::llama::{FfnAct, Generator, Llama, Runner, Sampling, Stage};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use support::cpu_runner;

fn folder(tag: &str, spec: &RandomLlama) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rlx-llama-arch-{tag}-{}", std::process::id()));
    spec.write(&dir).unwrap();
    dir
}

/// Every tensor of `model.safetensors` as f64, with its shape.
fn read_tensors(dir: &Path) -> HashMap<String, (Vec<usize>, Vec<f64>)> {
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut out = HashMap::new();
    for (name, view) in st.tensors() {
        let d = view.data();
        let v: Vec<f64> = match view.dtype() {
            safetensors::Dtype::F32 => d
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
                .collect(),
            safetensors::Dtype::F16 => d
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64())
                .collect(),
            safetensors::Dtype::BF16 => d
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f64())
                .collect(),
            other => panic!("{name}: {other:?}"),
        };
        out.insert(name, (view.shape().to_vec(), v));
    }
    out
}

/// `W x` for a `[n, k]` row-major weight.
fn matvec(w: &[f64], x: &[f64]) -> Vec<f64> {
    let k = x.len();
    w.chunks_exact(k)
        .map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum())
        .collect()
}

fn rms_norm(x: &[f64], w: &[f64], eps: f64, plus_one: bool) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let inv = 1.0 / (ms + eps).sqrt();
    x.iter()
        .zip(w)
        .map(|(v, w)| v * inv * if plus_one { 1.0 + w } else { *w })
        .collect()
}

fn gelu_tanh(g: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * g * (1.0 + (c * (g + 0.044715 * g * g * g)).tanh())
}

/// "Rotate half" RoPE of one head at position `pos`, as transformers applies it.
/// RoPE as transformers applies it: frequencies divided by `factors` (Phi-3 longrope's
/// short factors; empty: none), cos and sin scaled by `attn`.
fn rope(x: &mut [f64], pos: usize, base: f64, factors: &[f64], attn: f64) {
    let hd = x.len();
    let half = hd / 2;
    for i in 0..half {
        let f = factors.get(i).copied().unwrap_or(1.0);
        let th = pos as f64 * base.powf(-2.0 * i as f64 / hd as f64) / f;
        let (s, c) = th.sin_cos();
        let (s, c) = (s * attn, c * attn);
        let (a, b) = (x[i], x[i + half]);
        x[i] = a * c - b * s;
        x[i + half] = b * c + a * s;
    }
}

/// The logits at every position of `tokens`, in f64, from the folder's files alone.
fn reference(dir: &Path, tokens: &[u32]) -> Vec<Vec<f64>> {
    reference_with(dir, tokens, false)
}

/// [`reference`] with Phi-3 longrope's long factors (`long`) or its short ones.
fn reference_with(dir: &Path, tokens: &[u32], long: bool) -> Vec<Vec<f64>> {
    let cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let ty = cfg["model_type"].as_str().unwrap();
    let u = |k: &str| cfg[k].as_u64().unwrap() as usize;
    let (hidden, heads, kvh, ffn) = (
        u("hidden_size"),
        u("num_attention_heads"),
        u("num_key_value_heads"),
        u("intermediate_size"),
    );
    let hd = cfg["head_dim"]
        .as_u64()
        .map_or(hidden / heads, |d| d as usize);
    let eps = cfg["rms_norm_eps"].as_f64().unwrap();
    let base = cfg["rope_theta"].as_f64().unwrap();
    // Phi-3 longrope (short factors within the original context, long ones past it)
    let (factors, attn): (Vec<f64>, f64) = match cfg.get("rope_scaling") {
        Some(r) if r["type"] == "longrope" => {
            let key = if long { "long_factor" } else { "short_factor" };
            let short = r[key].as_array().unwrap();
            let original = u("original_max_position_embeddings") as f64;
            let scale = u("max_position_embeddings") as f64 / original;
            (
                short.iter().map(|v| v.as_f64().unwrap()).collect(),
                (1.0 + scale.ln() / original.ln()).sqrt(),
            )
        }
        _ => (Vec::new(), 1.0),
    };
    let gemma = ty == "gemma";
    let phi3 = ty == "phi3";
    let tied = cfg["tie_word_embeddings"].as_bool().unwrap_or(gemma);
    let w = read_tensors(dir);
    let get = |n: &str| -> &Vec<f64> { &w.get(n).unwrap_or_else(|| panic!("no {n}")).1 };
    let embed = get("model.embed_tokens.weight");
    // transformers: the normalizer sqrt(hidden) is a tensor cast to the weights' dtype
    let dtype = cfg["torch_dtype"].as_str().unwrap_or("float32");
    let scale = if gemma {
        let s = (hidden as f64).sqrt() as f32;
        match dtype {
            "bfloat16" => half::bf16::from_f32(s).to_f64(),
            "float16" => half::f16::from_f32(s).to_f64(),
            _ => s as f64,
        }
    } else {
        1.0
    };
    let (qd, kvd) = (heads * hd, kvh * hd);
    let t = tokens.len();
    let mut xs: Vec<Vec<f64>> = tokens
        .iter()
        .map(|&tok| {
            let row = &embed[tok as usize * hidden..(tok as usize + 1) * hidden];
            row.iter().map(|v| v * scale).collect()
        })
        .collect();
    let layers = u("num_hidden_layers");
    for l in 0..layers {
        let p = |s: &str| format!("model.layers.{l}.{s}.weight");
        let mut qs = Vec::new();
        let mut ks = Vec::new();
        let mut vs = Vec::new();
        for (pos, x) in xs.iter().enumerate() {
            let h = rms_norm(x, get(&p("input_layernorm")), eps, gemma);
            let (mut q, mut k, v) = if phi3 {
                let qkv = matvec(get(&p("self_attn.qkv_proj")), &h);
                (
                    qkv[..qd].to_vec(),
                    qkv[qd..qd + kvd].to_vec(),
                    qkv[qd + kvd..].to_vec(),
                )
            } else {
                (
                    matvec(get(&p("self_attn.q_proj")), &h),
                    matvec(get(&p("self_attn.k_proj")), &h),
                    matvec(get(&p("self_attn.v_proj")), &h),
                )
            };
            q.chunks_exact_mut(hd)
                .for_each(|c| rope(c, pos, base, &factors, attn));
            k.chunks_exact_mut(hd)
                .for_each(|c| rope(c, pos, base, &factors, attn));
            qs.push(q);
            ks.push(k);
            vs.push(v);
        }
        for (i, x) in xs.iter_mut().enumerate() {
            let mut att = vec![0.0; qd];
            for hh in 0..heads {
                let kh = hh / (heads / kvh);
                let q = &qs[i][hh * hd..(hh + 1) * hd];
                let scores: Vec<f64> = (0..=i)
                    .map(|j| {
                        let k = &ks[j][kh * hd..(kh + 1) * hd];
                        q.iter().zip(k).map(|(a, b)| a * b).sum::<f64>() / (hd as f64).sqrt()
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                let z: f64 = e.iter().sum();
                for (j, ej) in e.iter().enumerate() {
                    let v = &vs[j][kh * hd..(kh + 1) * hd];
                    for d in 0..hd {
                        att[hh * hd + d] += ej / z * v[d];
                    }
                }
            }
            let o = matvec(get(&p("self_attn.o_proj")), &att);
            x.iter_mut().zip(&o).for_each(|(a, b)| *a += b);
            let h = rms_norm(x, get(&p("post_attention_layernorm")), eps, gemma);
            let (gate, up) = if phi3 {
                let gu = matvec(get(&p("mlp.gate_up_proj")), &h);
                (gu[..ffn].to_vec(), gu[ffn..].to_vec())
            } else {
                (
                    matvec(get(&p("mlp.gate_proj")), &h),
                    matvec(get(&p("mlp.up_proj")), &h),
                )
            };
            let m: Vec<f64> = gate
                .iter()
                .zip(&up)
                .map(|(g, u)| {
                    let a = if gemma {
                        gelu_tanh(*g)
                    } else {
                        g / (1.0 + (-g).exp())
                    };
                    a * u
                })
                .collect();
            let d = matvec(get(&p("mlp.down_proj")), &m);
            x.iter_mut().zip(&d).for_each(|(a, b)| *a += b);
        }
    }
    let head = if tied { embed } else { get("lm_head.weight") };
    assert_eq!(xs.len(), t);
    xs.iter()
        .map(|x| matvec(head, &rms_norm(x, get("model.norm.weight"), eps, gemma)))
        .collect()
}

/// The last position's logits of `prompt` on the CPU graph path (prefill).
fn cpu_logits(model: &Llama, prompt: &[u32]) -> Vec<f32> {
    let mut runner = cpu_runner();
    for (name, t) in &model.params {
        runner.set_param(name, t.clone());
    }
    let g = model
        .build_graph(Stage::Prefill {
            tokens: prompt.len(),
        })
        .unwrap();
    let h = runner.compile(&g).unwrap();
    let inputs = model.prefill_inputs(prompt).unwrap();
    let out = runner.run(h, &inputs).unwrap();
    out.into_iter()
        .find(|(n, _)| n == "logits")
        .unwrap()
        .1
        .as_f32()
        .unwrap()
        .to_vec()
}

fn rel_l2(a: &[f32], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let num: f64 = a.iter().zip(b).map(|(x, y)| (*x as f64 - y).powi(2)).sum();
    let den: f64 = b.iter().map(|y| y * y).sum();
    (num / den.max(1e-30)).sqrt()
}

fn argmax(v: &[f64]) -> (usize, f64) {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| v[b].total_cmp(&v[a]));
    (idx[0], v[idx[0]] - v[idx[1]])
}

/// Checks one folder: prefill logits against the reference, then greedy tokens.
fn check(tag: &str, spec: &RandomLlama) {
    check_dir(tag, &folder(tag, spec));
}

/// The CPU graph's logits and greedy tokens for the folder `dir` against the f64 reference.
fn check_dir(tag: &str, dir: &Path) {
    let dir = dir.to_path_buf();
    let model = Llama::open(&dir).unwrap();
    let prompt: Vec<u32> = (0..11).map(|i| 2 + (i * 37) % 250).collect();
    let want = reference(&dir, &prompt);
    let got = cpu_logits(&model, &prompt);
    let err = rel_l2(&got, want.last().unwrap());
    assert!(err < 1e-4, "{tag}: prefill logits rel L2 {err}");
    let mut gen = Generator::new(&model, cpu_runner());
    gen.stop_ids.clear();
    let stats = gen
        .generate(&prompt, 8, &Sampling::default(), |_| {})
        .unwrap();
    let mut all = prompt.clone();
    all.extend(&stats.tokens[..stats.tokens.len() - 1]);
    let want = reference(&dir, &all);
    for (i, &tok) in stats.tokens.iter().enumerate() {
        let (best, margin) = argmax(&want[prompt.len() - 1 + i]);
        // a near tie may go either way in f32
        if margin > 1e-3 {
            assert_eq!(tok as usize, best, "{tag}: greedy token {i}");
        }
    }
    println!("{tag}: rel L2 {err:.2e}, tokens {:?}", stats.tokens);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn llama_folder_matches_the_f64_reference() {
    check("llama", &RandomLlama::default());
}

#[test]
fn gemma_folders_match_the_f64_reference() {
    // tied (Gemma's own setting: the scaled embedding dominates, so greedy repeats the last
    // token) and untied (varied tokens)
    for (dtype, tied) in [
        (safetensors::Dtype::F32, true),
        (safetensors::Dtype::F32, false),
        (safetensors::Dtype::BF16, false),
        (safetensors::Dtype::F16, true),
    ] {
        let spec = RandomLlama {
            family: Family::Gemma,
            // head size 64 with hidden 128 and 4 heads: q is wider than the hidden state
            head_dim: Some(64),
            tied,
            dtype,
            ..RandomLlama::default()
        };
        check(&format!("gemma-{dtype:?}-{tied}"), &spec);
    }
    let dir = folder(
        "gemma-cfg",
        &RandomLlama {
            family: Family::Gemma,
            head_dim: Some(64),
            tied: true,
            ..RandomLlama::default()
        },
    );
    let model = Llama::open(&dir).unwrap();
    assert_eq!(model.config.ffn_act, FfnAct::GeluTanh);
    assert_eq!(model.config.head_dim, 64);
    assert_eq!(model.config.embed_scale, 128f32.sqrt());
    assert_eq!(model.head_name(), "token_embd.weight");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn phi3_folders_match_the_f64_reference() {
    for (dtype, tied) in [
        (safetensors::Dtype::F32, false),
        (safetensors::Dtype::BF16, false),
        (safetensors::Dtype::F32, true),
    ] {
        let spec = RandomLlama {
            family: Family::Phi3,
            dtype,
            tied,
            ..RandomLlama::default()
        };
        check(&format!("phi3-{dtype:?}-{tied}"), &spec);
    }
}

#[test]
fn phi3_longrope_matches_the_f64_reference() {
    let dir = folder(
        "phi3-longrope",
        &RandomLlama {
            family: Family::Phi3,
            ..RandomLlama::default()
        },
    );
    let path = dir.join("config.json");
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let c = cfg.as_object_mut().unwrap();
    let half = {
        let h = c["hidden_size"].as_u64().unwrap() / c["num_attention_heads"].as_u64().unwrap();
        (h / 2) as usize
    };
    let short: Vec<f64> = (0..half).map(|i| 1.0 + 0.15 * i as f64).collect();
    let long: Vec<f64> = (0..half).map(|i| 2.0 + 0.5 * i as f64).collect();
    c.insert("max_position_embeddings".into(), 131072.into());
    c.insert("sliding_window".into(), Value::Null);
    c.insert("original_max_position_embeddings".into(), 4096.into());
    c.insert(
        "rope_scaling".into(),
        serde_json::json!({"type": "longrope", "short_factor": short, "long_factor": long}),
    );
    std::fs::write(&path, cfg.to_string()).unwrap();
    let model = Llama::open(&dir).unwrap();
    assert_eq!(model.config.context, 4096, "capped at the original context");
    let want = (1.0 + 32f64.ln() / 4096f64.ln()).sqrt();
    assert!((model.config.rope_attn_scale - want).abs() < 1e-12);
    // asked for more than the original context: the long factors, as llama.cpp picks them
    let mut long_model = Llama::open(&dir).unwrap();
    long_model.extend_context(8192);
    assert_eq!(long_model.config.context, 8192);
    let prompt: Vec<u32> = (0..11).map(|i| 2 + (i * 37) % 250).collect();
    let got = cpu_logits(&long_model, &prompt);
    let err = rel_l2(&got, reference_with(&dir, &prompt, true).last().unwrap());
    assert!(err < 1e-4, "long factors: logits rel L2 {err}");
    let short = rel_l2(&got, reference(&dir, &prompt).last().unwrap());
    assert!(short > 1e-3, "the long factors change the logits ({short})");
    long_model.extend_context(1 << 20);
    assert_eq!(
        long_model.config.context, 131072,
        "capped at the trained context"
    );
    // a context within the original keeps the short factors
    let mut same = Llama::open(&dir).unwrap();
    same.extend_context(100);
    assert_eq!(same.config, model.config);
    // written as GGUF (both factor sets, the original context and the attention factor in
    // the metadata) and read back: the same settings, the same long-context logits
    let gguf = dir.join("longrope.gguf");
    export_gguf(&model, &dir, &gguf, QuantFormat::F32, 1, &mut |_| {}).unwrap();
    let mut back = Llama::open(&gguf).unwrap();
    assert_eq!(back.config.context, 4096);
    // (stored as f32)
    let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-6 * y);
    let (bl, ml) = (
        back.config.rope_long.as_ref().unwrap(),
        model.config.rope_long.as_ref().unwrap(),
    );
    assert_eq!(bl.context, ml.context);
    assert!(close(&bl.factors, &ml.factors), "long factors");
    let (bs, ms) = (
        back.config.rope_freq_factors.as_ref().unwrap(),
        model.config.rope_freq_factors.as_ref().unwrap(),
    );
    assert!(bs.len() == ms.len() && close(bs, ms), "short factors");
    assert!((back.config.rope_attn_scale - model.config.rope_attn_scale).abs() < 1e-6);
    back.extend_context(8192);
    let err = rel_l2(
        &cpu_logits(&back, &prompt),
        reference_with(&dir, &prompt, true).last().unwrap(),
    );
    assert!(err < 1e-4, "GGUF, long factors: logits rel L2 {err}");
    check_dir("phi3-longrope", &dir);
}

/// A config of `family` with `edit` applied to its JSON: the error names the setting.
fn config_error(family: Family, edit: &dyn Fn(&mut serde_json::Map<String, Value>)) -> String {
    let dir = folder(
        &format!("bad-{family:?}"),
        &RandomLlama {
            family,
            ..RandomLlama::default()
        },
    );
    let path = dir.join("config.json");
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(cfg.as_object_mut().unwrap());
    std::fs::write(&path, cfg.to_string()).unwrap();
    let e = Llama::open(&dir).unwrap_err().to_string();
    std::fs::remove_dir_all(&dir).ok();
    e
}

#[test]
fn unsupported_gemma_and_phi3_settings_are_named() {
    let e = config_error(Family::Phi3, &|c| {
        c.insert("partial_rotary_factor".into(), 0.5.into());
    });
    assert!(e.contains("partial_rotary_factor"), "{e}");
    let e = config_error(Family::Phi3, &|c| {
        c.insert(
            "rope_scaling".into(),
            serde_json::json!({"type": "longrope", "long_factor": [1.0], "short_factor": [1.0]}),
        );
    });
    assert!(e.contains("longrope"), "{e}");
    let e = config_error(Family::Phi3, &|c| {
        c.insert("hidden_act".into(), "gelu".into());
    });
    assert!(e.contains("hidden_act") && e.contains("gelu"), "{e}");
    let e = config_error(Family::Gemma, &|c| {
        c.insert("hidden_act".into(), "relu".into());
    });
    assert!(e.contains("hidden_act") && e.contains("relu"), "{e}");
    let e = config_error(Family::Gemma, &|c| {
        c.insert("attention_bias".into(), true.into());
    });
    assert!(e.contains("attention_bias"), "{e}");
    // transformers 5 writes rope settings as `rope_parameters`
    let e = config_error(Family::Phi3, &|c| {
        c.remove("rope_theta");
        c.insert(
            "rope_parameters".into(),
            serde_json::json!({"rope_type": "longrope", "rope_theta": 10000.0}),
        );
    });
    assert!(e.contains("longrope"), "{e}");
}

#[test]
fn phi3_sliding_window_caps_the_context_and_rope_parameters_are_read() {
    let dir = folder(
        "phi3-window",
        &RandomLlama {
            family: Family::Phi3,
            ..RandomLlama::default()
        },
    );
    let path = dir.join("config.json");
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let c = cfg.as_object_mut().unwrap();
    c.insert("sliding_window".into(), 100.into());
    c.remove("rope_theta");
    c.insert(
        "rope_parameters".into(),
        serde_json::json!({"rope_type": "default", "rope_theta": 500000.0, "partial_rotary_factor": 1.0}),
    );
    std::fs::write(&path, cfg.to_string()).unwrap();
    let model = Llama::open(&dir).unwrap();
    assert_eq!(model.config.context, 100);
    assert_eq!(model.config.rope_base, 500000.0);
    std::fs::remove_dir_all(&dir).ok();
}

/// A metadata value of the minimal GGUF writer below.
enum Meta {
    U32(u32),
    F32(f32),
    Str(String),
    Strs(Vec<String>),
}

/// Writes a GGUF v3 file of f32 tensors (`(name, dims in GGUF order, values)`).
fn write_gguf(path: &Path, meta: &[(&str, Meta)], tensors: &[(String, Vec<usize>, Vec<f32>)]) {
    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    }
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend((meta.len() as u64).to_le_bytes());
    for (key, v) in meta {
        string(&mut out, key);
        match v {
            Meta::U32(x) => {
                out.extend(4u32.to_le_bytes());
                out.extend(x.to_le_bytes());
            }
            Meta::F32(x) => {
                out.extend(6u32.to_le_bytes());
                out.extend(x.to_le_bytes());
            }
            Meta::Str(s) => {
                out.extend(8u32.to_le_bytes());
                string(&mut out, s);
            }
            Meta::Strs(list) => {
                out.extend(9u32.to_le_bytes());
                out.extend(8u32.to_le_bytes());
                out.extend((list.len() as u64).to_le_bytes());
                for s in list {
                    string(&mut out, s);
                }
            }
        }
    }
    let mut offset = 0u64;
    for (name, dims, values) in tensors {
        string(&mut out, name);
        out.extend((dims.len() as u32).to_le_bytes());
        for d in dims {
            out.extend((*d as u64).to_le_bytes());
        }
        out.extend(0u32.to_le_bytes()); // F32
        out.extend(offset.to_le_bytes());
        offset += (values.len() as u64 * 4).div_ceil(32) * 32;
    }
    for (_, _, values) in tensors {
        while !out.len().is_multiple_of(32) {
            out.push(0);
        }
        out.extend(values.iter().flat_map(|x| x.to_le_bytes()));
    }
    std::fs::write(path, out).unwrap();
}

/// An f32 Gemma or Phi-3 folder written as llama.cpp's `convert_hf_to_gguf.py` writes it:
/// Gemma's norms stored with the 1 of `(1 + w)` added, Q/K rows left in Hugging Face's order
/// (llama.cpp ropes both as NEOX), Phi-3's `attn_qkv` and `ffn_up` (gate then up) fused.
fn folder_to_gguf(dir: &Path, path: &Path) {
    let cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let ty = cfg["model_type"].as_str().unwrap().to_string();
    let u = |k: &str| cfg[k].as_u64().unwrap() as u32;
    let heads = u("num_attention_heads");
    let hd = cfg["head_dim"]
        .as_u64()
        .map_or(u("hidden_size") / heads, |d| d as u32);
    let key = |k: &str| format!("{ty}.{k}");
    let vocab = u("vocab_size");
    let keys = [
        "context_length",
        "embedding_length",
        "block_count",
        "feed_forward_length",
        "attention.head_count",
        "attention.head_count_kv",
        "attention.key_length",
        "rope.dimension_count",
    ];
    let values = [
        u("max_position_embeddings"),
        u("hidden_size"),
        u("num_hidden_layers"),
        u("intermediate_size"),
        heads,
        u("num_key_value_heads"),
        hd,
        hd,
    ];
    let names: Vec<String> = keys.iter().map(|k| key(k)).collect();
    let mut meta: Vec<(&str, Meta)> = vec![
        ("general.architecture", Meta::Str(ty.clone())),
        ("tokenizer.ggml.model", Meta::Str("gpt2".into())),
        (
            "tokenizer.ggml.tokens",
            Meta::Strs((0..vocab).map(|i| format!("t{i}")).collect()),
        ),
        ("tokenizer.ggml.merges", Meta::Strs(Vec::new())),
    ];
    for (k, v) in names.iter().zip(values) {
        meta.push((k.as_str(), Meta::U32(v)));
    }
    let eps_key = key("attention.layer_norm_rms_epsilon");
    let base_key = key("rope.freq_base");
    meta.push((
        &eps_key,
        Meta::F32(cfg["rms_norm_eps"].as_f64().unwrap() as f32),
    ));
    meta.push((
        &base_key,
        Meta::F32(cfg["rope_theta"].as_f64().unwrap() as f32),
    ));
    let w = read_tensors(dir);
    let gemma = ty == "gemma";
    let mut tensors = Vec::new();
    let mut put = |gguf: String, hf: &str, plus_one: bool| {
        let (shape, v) = &w[hf];
        let v: Vec<f32> = v
            .iter()
            .map(|x| (if plus_one { x + 1.0 } else { *x }) as f32)
            .collect();
        let dims = shape.iter().rev().copied().collect();
        tensors.push((gguf, dims, v));
    };
    put(
        "token_embd.weight".into(),
        "model.embed_tokens.weight",
        false,
    );
    if w.contains_key("lm_head.weight") {
        put("output.weight".into(), "lm_head.weight", false);
    }
    put("output_norm.weight".into(), "model.norm.weight", gemma);
    for l in 0..u("num_hidden_layers") {
        let hf = |s: &str| format!("model.layers.{l}.{s}.weight");
        let b = |s: &str| format!("blk.{l}.{s}.weight");
        put(b("attn_norm"), &hf("input_layernorm"), gemma);
        put(b("ffn_norm"), &hf("post_attention_layernorm"), gemma);
        put(b("attn_output"), &hf("self_attn.o_proj"), false);
        put(b("ffn_down"), &hf("mlp.down_proj"), false);
        if gemma {
            put(b("attn_q"), &hf("self_attn.q_proj"), false);
            put(b("attn_k"), &hf("self_attn.k_proj"), false);
            put(b("attn_v"), &hf("self_attn.v_proj"), false);
            put(b("ffn_gate"), &hf("mlp.gate_proj"), false);
            put(b("ffn_up"), &hf("mlp.up_proj"), false);
        } else {
            put(b("attn_qkv"), &hf("self_attn.qkv_proj"), false);
            put(b("ffn_up"), &hf("mlp.gate_up_proj"), false);
        }
    }
    write_gguf(path, &meta, &tensors);
}

#[test]
fn gemma_and_phi3_gguf_files_match_their_folders() {
    for (family, head_dim, tied) in [(Family::Gemma, Some(64), true), (Family::Phi3, None, false)] {
        let spec = RandomLlama {
            family,
            head_dim,
            tied,
            ..RandomLlama::default()
        };
        let dir = folder(&format!("gguf-{family:?}"), &spec);
        let path = dir.join("model.gguf");
        folder_to_gguf(&dir, &path);
        let from_gguf = Llama::from_gguf(&rlx_gguf::GgufFile::open(&path).unwrap()).unwrap();
        let from_hf = Llama::open(&dir).unwrap();
        assert_eq!(from_gguf.config.ffn_act, from_hf.config.ffn_act);
        assert_eq!(from_gguf.config.embed_scale, from_hf.config.embed_scale);
        let prompt: Vec<u32> = (0..9).map(|i| 3 + (i * 29) % 250).collect();
        let want = reference(&dir, &prompt);
        let got = cpu_logits(&from_gguf, &prompt);
        let err = rel_l2(&got, want.last().unwrap());
        assert!(err < 1e-4, "{family:?} GGUF: logits rel L2 {err}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
