//! Llama-family models from a Hugging Face folder: `config.json` (`model_type` llama,
//! mistral, qwen2, gemma or phi3; transformers 5's `rope_parameters` or the older
//! top-level `rope_theta` / `rope_scaling`),
//! safetensors weights (one file or sharded), `tokenizer.json`, and when present
//! `tokenizer_config.json` / `generation_config.json` (BOS, stop ids, chat template).
//!
//! Projection weights keep their file dtype: f32, f16 or bf16 rows become the packed operand
//! of an [`rlx_ir::Op::QuantMatMul`] in that format, widened per tile by the GEMM with f32
//! accumulation, so a bf16 checkpoint runs with bf16 weights in memory. Hugging Face orders
//! the Q and K projection rows for "rotate half" RoPE (pair `i` with `i + head_dim/2`); the
//! graph rotates adjacent pairs like GGUF does, so those rows are permuted at load (per
//! head, `[2, head_dim/2]` becomes `[head_dim/2, 2]`), the permutation llama.cpp's converter
//! applies. Attention scores are unchanged by permuting Q and K alike.

use super::{model_err, Linear, Llama, LlamaConfig, LlamaError, LongRope};
use crate::error::ModelError;
use crate::weights::Weights;
use rlx_gguf::{ChatTokenizer, QuantFormat};
use rlx_ir::{Buffer, DType, Tensor, TensorData};
use safetensors::Dtype;
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// The fields of a Llama `config.json` RLX reads.
#[derive(Debug, Clone, Deserialize)]
struct HfLlamaConfig {
    #[serde(default)]
    model_type: String,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    #[serde(default)]
    num_key_value_heads: Option<usize>,
    intermediate_size: usize,
    vocab_size: usize,
    #[serde(default = "default_eps")]
    rms_norm_eps: f64,
    #[serde(default)]
    rope_theta: Option<f64>,
    #[serde(default = "default_context")]
    max_position_embeddings: usize,
    #[serde(default)]
    head_dim: Option<usize>,
    #[serde(default)]
    hidden_act: Option<String>,
    /// Gemma's older name for `hidden_act`, read first when present
    #[serde(default)]
    hidden_activation: Option<String>,
    #[serde(default)]
    partial_rotary_factor: Option<f64>,
    /// transformers 5: `rope_theta`, `rope_type` and scaling settings in one object
    #[serde(default)]
    rope_parameters: Option<Value>,
    #[serde(default)]
    use_bidirectional_attention: Option<bool>,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default)]
    mlp_bias: bool,
    #[serde(default)]
    rope_scaling: Option<Value>,
    #[serde(default)]
    sliding_window: Option<usize>,
    /// Phi-3 longrope: the context the short factors serve
    #[serde(default)]
    original_max_position_embeddings: Option<usize>,
}

/// `model_type`s RLX builds from Hugging Face folders: Llama's graph (Mistral is the same
/// network; Qwen2 adds q/k/v biases; Gemma and Phi-3 as [`super::arch`] says).
pub const HF_TYPES: [&str; 5] = ["llama", "mistral", "qwen2", "gemma", "phi3"];

fn default_eps() -> f64 {
    1e-6
}
fn default_context() -> usize {
    2048
}

impl LlamaConfig {
    /// Reads a Hugging Face Llama `config.json` (its text; `file` names it in errors).
    ///
    /// # Errors
    /// Not JSON, another `model_type`, missing fields, inconsistent sizes, or features RLX
    /// does not build (projection biases, an activation other than SiLU, an unknown RoPE
    /// scaling type).
    pub fn from_hf_json(text: &str, file: &str) -> Result<LlamaConfig, LlamaError> {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| model_err(format!("{file}: not a Llama config: {e}")))?;
        LlamaConfig::from_hf_value(&v, file)
    }

    /// [`LlamaConfig::from_hf_json`] over an already parsed `config.json`.
    ///
    /// # Errors
    /// As [`LlamaConfig::from_hf_json`].
    pub fn from_hf_value(v: &Value, file: &str) -> Result<LlamaConfig, LlamaError> {
        let bad = |m: String| model_err(format!("{file}: {m}"));
        let h =
            HfLlamaConfig::deserialize(v).map_err(|e| bad(format!("not a Llama config: {e}")))?;
        if !HF_TYPES.contains(&h.model_type.as_str()) {
            return Err(bad(format!(
                "model_type `{}` is not supported here (RLX builds {})",
                h.model_type,
                HF_TYPES.join(", ")
            )));
        }
        let ty = h.model_type.as_str();
        // Qwen2 always has q/k/v biases (its config has no `attention_bias`)
        let qkv_bias = ty == "qwen2" || h.attention_bias;
        if h.attention_bias && matches!(ty, "llama" | "gemma" | "phi3") || h.mlp_bias {
            return Err(bad(
                "projection biases (attention_bias / mlp_bias) are not supported".into(),
            ));
        }
        let ffn_act = ffn_act(&h).map_err(bad)?;
        if h.use_bidirectional_attention == Some(true) {
            return Err(bad(
                "use_bidirectional_attention is not supported (RLX builds causal models)".into(),
            ));
        }
        let rope = h.rope_parameters.as_ref().filter(|v| v.is_object());
        let partial = h.partial_rotary_factor.or_else(|| {
            rope.and_then(|r| r.get("partial_rotary_factor"))
                .and_then(Value::as_f64)
        });
        if let Some(f) = partial.filter(|&f| f != 1.0) {
            return Err(bad(format!(
                "partial_rotary_factor {f} is not supported (RLX rotates whole heads)"
            )));
        }
        let rope_theta = h
            .rope_theta
            .or_else(|| {
                rope.and_then(|r| r.get("rope_theta"))
                    .and_then(Value::as_f64)
            })
            .unwrap_or(10000.0);
        let heads = h.num_attention_heads;
        let kv_heads = h.num_key_value_heads.unwrap_or(heads);
        if heads == 0 || kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(bad(format!(
                "{heads} attention heads are not a multiple of {kv_heads} KV heads"
            )));
        }
        let head_dim = match h.head_dim {
            Some(d) => d,
            None if h.hidden_size.is_multiple_of(heads) => h.hidden_size / heads,
            None => {
                return Err(bad(format!(
                    "hidden size {} is not divisible into {heads} heads",
                    h.hidden_size
                )))
            }
        };
        if head_dim == 0 || head_dim % 2 != 0 {
            return Err(bad(format!(
                "head size {head_dim} is odd; RoPE needs pairs"
            )));
        }
        if h.num_hidden_layers == 0 || h.intermediate_size == 0 || h.vocab_size == 0 {
            return Err(bad("empty dimensions".into()));
        }
        let mut cfg = LlamaConfig {
            layers: h.num_hidden_layers,
            hidden: h.hidden_size,
            heads,
            kv_heads,
            head_dim,
            ffn: h.intermediate_size,
            vocab: h.vocab_size,
            eps: h.rms_norm_eps,
            rope_base: rope_theta,
            context: h.max_position_embeddings,
            rope_freq_factors: None,
            qkv_bias,
            ffn_act,
            // Gemma's sqrt(hidden), rounded to the embedding's dtype when the weights load
            embed_scale: if ty == "gemma" {
                (h.hidden_size as f64).sqrt() as f32
            } else {
                1.0
            },
            rope_attn_scale: 1.0,
            rope_long: None,
        };
        // Mistral's and Phi-3's sliding window: attention beyond it would differ, so the
        // context stops there
        if let Some(w) = h
            .sliding_window
            .filter(|_| matches!(ty, "mistral" | "phi3"))
        {
            cfg.context = cfg.context.min(w.max(1));
        }
        if let Some(s) = h.rope_scaling.as_ref().filter(|v| !v.is_null()).or(rope) {
            if is_longrope(s) {
                longrope(s, h.original_max_position_embeddings, &mut cfg).map_err(bad)?;
            } else {
                cfg.rope_freq_factors = rope_scaling_factors(s, &cfg).map_err(bad)?;
            }
        }
        Ok(cfg)
    }
}

/// The feed-forward activation of a config: SiLU, or for Gemma GELU's tanh form (`gelu`
/// is the legacy spelling transformers reads as the tanh form too).
fn ffn_act(h: &HfLlamaConfig) -> Result<super::FfnAct, String> {
    let gemma = h.model_type == "gemma";
    let (key, act) = match (&h.hidden_activation, &h.hidden_act) {
        (Some(a), _) if gemma => ("hidden_activation", a.as_str()),
        (_, Some(a)) => ("hidden_act", a.as_str()),
        _ if gemma => ("hidden_act", "gelu_pytorch_tanh"),
        _ => ("hidden_act", "silu"),
    };
    match act {
        "silu" if !gemma => Ok(super::FfnAct::Silu),
        "gelu_pytorch_tanh" | "gelu_tanh" | "gelu_new" | "gelu" if gemma => {
            Ok(super::FfnAct::GeluTanh)
        }
        _ => Err(format!(
            "{key} `{act}` is not supported ({} uses {})",
            h.model_type,
            if gemma { "gelu_pytorch_tanh" } else { "silu" }
        )),
    }
}

/// The rope settings are Phi-3's `longrope` (`su` in older configs).
fn is_longrope(s: &Value) -> bool {
    let kind = s
        .get("rope_type")
        .or_else(|| s.get("type"))
        .and_then(Value::as_str);
    matches!(kind, Some("longrope" | "su"))
}

/// Phi-3 `longrope`: the `short_factor` list divides the frequencies (what transformers uses
/// while a sequence is within `original_max_position_embeddings`), the context stops there
/// (longer sequences would switch to `long_factor` midway), and cos/sin are scaled by the
/// attention factor (`attention_factor`, else from the two context lengths).
fn longrope(s: &Value, top_original: Option<usize>, c: &mut LlamaConfig) -> Result<(), String> {
    let half = c.head_dim / 2;
    let list = |k: &str| -> Result<Vec<f64>, String> {
        let v: Vec<f64> = s
            .get(k)
            .and_then(Value::as_array)
            .ok_or_else(|| format!("rope_scaling `longrope` needs a list `{k}`"))?
            .iter()
            .map(|x| {
                x.as_f64()
                    .ok_or_else(|| format!("`{k}` holds a non-number"))
            })
            .collect::<Result<_, _>>()?;
        if v.len() != half || v.iter().any(|x| !x.is_finite() || *x <= 0.0) {
            return Err(format!(
                "rope_scaling `longrope`: `{k}` needs {half} positive numbers (head size {} / 2), got {}",
                c.head_dim,
                v.len()
            ));
        }
        Ok(v)
    };
    let short = list("short_factor")?;
    let long = list("long_factor")?;
    let original = s
        .get("original_max_position_embeddings")
        .and_then(Value::as_u64)
        .map(|n| n as usize)
        .or(top_original)
        .unwrap_or(c.context);
    let factor = s
        .get("factor")
        .and_then(Value::as_f64)
        .unwrap_or(c.context as f64 / original.max(1) as f64);
    c.rope_attn_scale = match s.get("attention_factor").and_then(Value::as_f64) {
        Some(a) => a,
        None if factor <= 1.0 || original < 2 => 1.0,
        None => (1.0 + factor.ln() / (original as f64).ln()).sqrt(),
    };
    c.rope_freq_factors = Some(short);
    c.rope_long = Some(LongRope {
        factors: long,
        context: c.context,
    });
    c.context = c.context.min(original.max(1));
    Ok(())
}

/// Per-pair frequency divisors of a `rope_scaling` object: Llama 3.1's `llama3` type
/// (long wavelengths slowed by `factor`, short ones kept, a smooth blend between), or None
/// for `default`.
fn rope_scaling_factors(s: &Value, c: &LlamaConfig) -> Result<Option<Vec<f64>>, String> {
    let kind = s
        .get("rope_type")
        .or_else(|| s.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    match kind {
        "default" => Ok(None),
        "llama3" => {
            let num = |k: &str| {
                s.get(k)
                    .and_then(Value::as_f64)
                    .ok_or_else(|| format!("rope_scaling `llama3` needs a number `{k}`"))
            };
            let factor = num("factor")?;
            let (low, high) = (num("low_freq_factor")?, num("high_freq_factor")?);
            let old = num("original_max_position_embeddings")?;
            if factor <= 0.0 || high <= low {
                return Err(format!(
                    "rope_scaling: factor {factor}, low/high {low}/{high} are not usable"
                ));
            }
            let (low_wavelen, high_wavelen) = (old / low, old / high);
            let factors = (0..c.head_dim / 2)
                .map(|i| {
                    let f = c.rope_base.powf(-2.0 * i as f64 / c.head_dim as f64);
                    let wavelen = 2.0 * std::f64::consts::PI / f;
                    let scaled = if wavelen < high_wavelen {
                        f
                    } else if wavelen > low_wavelen {
                        f / factor
                    } else {
                        let smooth = (old / wavelen - low) / (high - low);
                        (1.0 - smooth) * f / factor + smooth * f
                    };
                    f / scaled
                })
                .collect();
            Ok(Some(factors))
        }
        other => Err(format!(
            "rope_scaling type `{other}` is not supported (RLX reads `llama3` and `default`)"
        )),
    }
}

/// The packed-weight format of a safetensors dtype, for projections.
fn format_of(d: Dtype) -> Option<QuantFormat> {
    match d {
        Dtype::F32 => Some(QuantFormat::F32),
        Dtype::F16 => Some(QuantFormat::F16),
        Dtype::BF16 => Some(QuantFormat::BF16),
        _ => None,
    }
}

/// Reorders the rows of a `[heads * head_dim, k]` projection from "rotate half" pairing to
/// adjacent pairs: within each head, row `s * half + j` moves to `2 * j + s`.
pub(crate) fn permute_rope_rows(bytes: &[u8], heads: usize, head_dim: usize) -> Vec<u8> {
    let row = bytes.len() / (heads * head_dim);
    let half = head_dim / 2;
    let mut out = vec![0u8; bytes.len()];
    for h in 0..heads {
        for s in 0..2 {
            for j in 0..half {
                let src = (h * head_dim + s * half + j) * row;
                let dst = (h * head_dim + 2 * j + s) * row;
                out[dst..dst + row].copy_from_slice(&bytes[src..src + row]);
            }
        }
    }
    out
}

fn read_json(path: &Path) -> Result<Option<Value>, LlamaError> {
    if !path.is_file() {
        return Ok(None);
    }
    let label = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ModelError::Io {
        path: label.clone(),
        source,
    })?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| model_err(format!("{label}: not JSON: {e}")))
}

/// Token ids in a config field that holds one id or a list of them.
fn ids_of(v: Option<&Value>) -> Vec<u32> {
    match v {
        Some(Value::Number(n)) => n.as_u64().map(|x| x as u32).into_iter().collect(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|x| x.as_u64().map(|x| x as u32))
            .collect(),
        _ => Vec::new(),
    }
}

/// A special token named in `tokenizer_config.json`: a string or `{"content": ...}`.
fn token_text(v: Option<&Value>) -> Option<&str> {
    match v? {
        Value::String(s) => Some(s),
        Value::Object(o) => o.get("content").and_then(Value::as_str),
        _ => None,
    }
}

/// The tokenizer of a Hugging Face folder, with BOS, stop ids and chat template gathered
/// from its JSON files.
///
/// # Errors
/// No `tokenizer.json`, or one the `tokenizers` crate cannot read.
pub fn hf_tokenizer(dir: &Path, config: &Value) -> Result<ChatTokenizer, LlamaError> {
    let path = dir.join("tokenizer.json");
    if !path.is_file() {
        return Err(ModelError::MissingFile {
            dir: dir.display().to_string(),
            file: "tokenizer.json".into(),
            what: "the tokenizer".into(),
        }
        .into());
    }
    let inner = tokenizers::Tokenizer::from_file(&path).map_err(|e| ModelError::Tokenizer {
        file: path.display().to_string(),
        message: e.to_string(),
    })?;
    let tc = read_json(&dir.join("tokenizer_config.json"))?.unwrap_or(Value::Null);
    let gc = read_json(&dir.join("generation_config.json"))?.unwrap_or(Value::Null);
    let by_text = |v: Option<&Value>| token_text(v).and_then(|t| inner.token_to_id(t));
    let bos = ids_of(gc.get("bos_token_id"))
        .first()
        .or(ids_of(config.get("bos_token_id")).first())
        .copied()
        .or_else(|| by_text(tc.get("bos_token")));
    let mut eos = ids_of(gc.get("eos_token_id"));
    for id in ids_of(config.get("eos_token_id"))
        .into_iter()
        .chain(by_text(tc.get("eos_token")))
    {
        if !eos.contains(&id) {
            eos.push(id);
        }
    }
    // BOS as the file's post-processor would add it, unless tokenizer_config.json says.
    let add_bos = match tc.get("add_bos_token").and_then(Value::as_bool) {
        Some(b) => b,
        None => match (bos, inner.encode("a", true), inner.encode("a", false)) {
            (Some(b), Ok(with), Ok(without)) => {
                with.get_ids().first() == Some(&b) && without.get_ids().first() != Some(&b)
            }
            _ => false,
        },
    };
    let chat_template = match tc.get("chat_template") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(list)) => list
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
            .or(list.first())
            .and_then(|t| t.get("template"))
            .and_then(Value::as_str)
            .map(str::to_string),
        _ => None,
    };
    let mut stop_ids = eos.clone();
    for t in rlx_gguf::TURN_ENDS {
        if let Some(id) = inner.token_to_id(t) {
            if !stop_ids.contains(&id) {
                stop_ids.push(id);
            }
        }
    }
    let mut tok = ChatTokenizer::from_tokenizer(inner);
    tok.bos = bos;
    tok.eos = eos.first().copied();
    tok.add_bos = add_bos;
    tok.chat_template = chat_template;
    tok.stop_ids = stop_ids;
    Ok(tok)
}

impl Llama {
    /// Loads a Llama model from a Hugging Face folder. Projections stay in their file dtype
    /// and are read in place from the memory map (no copy), except Q/K, whose rows are
    /// permuted for the graph's RoPE pairing into a copy; norms become f32.
    ///
    /// # Errors
    /// Missing files or tensors (named, with the expected shape), weights in a dtype other
    /// than f32/f16/bf16, or a config RLX does not build.
    pub fn from_hf_dir(dir: &Path) -> Result<Llama, LlamaError> {
        let cfg_path = dir.join("config.json");
        let Some(cfg_json) = read_json(&cfg_path)? else {
            return Err(ModelError::MissingFile {
                dir: dir.display().to_string(),
                file: "config.json".into(),
                what: "the model's hyper-parameters".into(),
            }
            .into());
        };
        let mut config = LlamaConfig::from_hf_value(&cfg_json, &cfg_path.display().to_string())?;
        let model_type = cfg_json
            .get("model_type")
            .and_then(Value::as_str)
            .unwrap_or("llama");
        let (gemma, phi3) = (model_type == "gemma", model_type == "phi3");
        // transformers' default: Gemma ties its LM head to the embedding, the others do not
        let tied = cfg_json
            .get("tie_word_embeddings")
            .and_then(Value::as_bool)
            .unwrap_or(gemma);
        let weights = Weights::open_dir(dir)?;
        let tokenizer = hf_tokenizer(dir, &cfg_json)?;
        let c = &config;
        let mut params = Vec::new();
        let mut linears = HashMap::new();
        let mut weight_bytes = 0;
        // A projection's rows in their file dtype, borrowed from the map.
        let fetch =
            |hf: &str, n: usize, k: usize| -> Result<(Buffer<u8>, QuantFormat), LlamaError> {
                let (dtype, raw) = weights.raw_shared(hf, DType::BF16, &[n, k])?;
                let format = format_of(dtype).ok_or_else(|| {
                    model_err(format!(
                        "{}: tensor `{hf}` is {dtype:?}; projections must be F32, F16 or BF16",
                        weights.label()
                    ))
                })?;
                Ok((raw, format))
            };
        let mut add = |name: &str,
                       raw: Buffer<u8>,
                       format: QuantFormat,
                       n: usize,
                       k: usize,
                       rope_heads: Option<usize>|
         -> Arc<Tensor> {
            // used in place from the file map, unless the rows need permuting (or were split)
            let bytes: Buffer<u8> = match rope_heads {
                Some(h) => permute_rope_rows(&raw, h, c.head_dim).into(),
                None => raw,
            };
            weight_bytes += bytes.len();
            let t = Arc::new(
                Tensor::new(vec![bytes.len()], TensorData::U8(bytes)).expect("length matches"),
            );
            linears.insert(name.to_string(), Linear { format, n, k });
            params.push((name.to_string(), t.clone()));
            t
        };
        let packed = |add: &mut super::AddFn<'_>,
                      hf: &str,
                      name: &str,
                      n: usize,
                      k: usize,
                      rope_heads: Option<usize>|
         -> Result<(Arc<Tensor>, QuantFormat), LlamaError> {
            let (raw, format) = fetch(hf, n, k)?;
            Ok((add(name, raw, format, n, k, rope_heads), format))
        };
        let embd = packed(
            &mut add,
            "model.embed_tokens.weight",
            "token_embd.weight",
            c.vocab,
            c.hidden,
            None,
        )?;
        let head = if !tied && weights.contains("lm_head.weight") {
            packed(
                &mut add,
                "lm_head.weight",
                "output.weight",
                c.vocab,
                c.hidden,
                None,
            )?;
            "output.weight".to_string()
        } else if !tied {
            // untied but absent: the error names the tensor the config promised
            return Err(
                match weights.raw("lm_head.weight", DType::BF16, &[c.vocab, c.hidden]) {
                    Err(e) => e.into(),
                    Ok(_) => model_err("lm_head.weight could not be read"),
                },
            );
        } else {
            "token_embd.weight".to_string()
        };
        let (qd, kvd) = (c.heads * c.head_dim, c.kv_heads * c.head_dim);
        let mut biases: Vec<(String, Arc<Tensor>)> = Vec::new();
        for l in 0..c.layers {
            let hf = |s: &str| format!("model.layers.{l}.{s}.weight");
            let ours = |s: &str| format!("blk.{l}.{s}.weight");
            let a = "self_attn";
            let qkv = [
                ("q_proj", "attn_q", qd, Some(c.heads)),
                ("k_proj", "attn_k", kvd, Some(c.kv_heads)),
                ("v_proj", "attn_v", kvd, None),
            ];
            if phi3 {
                // q, k and v rows in one `qkv_proj`, cut apart (then Q/K permuted)
                let (raw, format) = fetch(&hf(&format!("{a}.qkv_proj")), qd + 2 * kvd, c.hidden)?;
                let parts = super::arch::split_rows(&raw, qd + 2 * kvd, &[qd, kvd, kvd]);
                for ((_, name, n, rope), b) in qkv.into_iter().zip(parts) {
                    add(&ours(name), b.into(), format, n, c.hidden, rope);
                }
            } else {
                for (hf_name, name, n, rope) in qkv {
                    packed(
                        &mut add,
                        &hf(&format!("{a}.{hf_name}")),
                        &ours(name),
                        n,
                        c.hidden,
                        rope,
                    )?;
                }
            }
            packed(
                &mut add,
                &hf(&format!("{a}.o_proj")),
                &ours("attn_output"),
                c.hidden,
                qd,
                None,
            )?;
            if phi3 {
                // gate and up rows in one `gate_up_proj`, gate first
                let (raw, format) = fetch(&hf("mlp.gate_up_proj"), 2 * c.ffn, c.hidden)?;
                let parts = super::arch::split_rows(&raw, 2 * c.ffn, &[c.ffn, c.ffn]);
                for (name, b) in ["ffn_gate", "ffn_up"].into_iter().zip(parts) {
                    add(&ours(name), b.into(), format, c.ffn, c.hidden, None);
                }
            } else {
                packed(
                    &mut add,
                    &hf("mlp.gate_proj"),
                    &ours("ffn_gate"),
                    c.ffn,
                    c.hidden,
                    None,
                )?;
                packed(
                    &mut add,
                    &hf("mlp.up_proj"),
                    &ours("ffn_up"),
                    c.ffn,
                    c.hidden,
                    None,
                )?;
            }
            if c.qkv_bias {
                let b = |s: &str| format!("model.layers.{l}.self_attn.{s}.bias");
                for (hfn, ours, len, heads) in [
                    (b("q_proj"), "attn_q", qd, Some(c.heads)),
                    (b("k_proj"), "attn_k", kvd, Some(c.kv_heads)),
                    (b("v_proj"), "attn_v", kvd, None),
                ] {
                    let t = weights.tensor(&hfn, DType::F32, &[len])?;
                    let v = t.as_f32().expect("f32 asked for").to_vec();
                    let v = match heads {
                        Some(h) => super::permute_rope_values(&v, h, c.head_dim),
                        None => v,
                    };
                    let name = format!("blk.{l}.{ours}.bias");
                    biases.push((name, Arc::new(Tensor::from_f32(&[len], v).expect("sizes"))));
                }
            }
            packed(
                &mut add,
                &hf("mlp.down_proj"),
                &ours("ffn_down"),
                c.hidden,
                c.ffn,
                None,
            )?;
        }
        weight_bytes += biases.iter().map(|b| b.1.size_bytes()).sum::<usize>();
        params.extend(biases);
        let mut norms = vec![(
            "model.norm.weight".to_string(),
            "output_norm.weight".to_string(),
        )];
        for l in 0..c.layers {
            let hf = |s: &str| format!("model.layers.{l}.{s}.weight");
            norms.push((hf("input_layernorm"), format!("blk.{l}.attn_norm.weight")));
            norms.push((
                hf("post_attention_layernorm"),
                format!("blk.{l}.ffn_norm.weight"),
            ));
        }
        for (hf, name) in norms {
            let mut t = weights.tensor(&hf, DType::F32, &[c.hidden])?;
            if gemma {
                // Gemma normalizes by (1 + w), in f32 as transformers does: the 1 goes in once
                if let TensorData::F32(v) = t.data_mut() {
                    for x in v.iter_mut() {
                        *x += 1.0;
                    }
                }
            }
            weight_bytes += c.hidden * 4;
            params.push((name, Arc::new(t)));
        }
        if gemma {
            config.embed_scale = super::arch::gemma_embed_scale(config.hidden, embd.1);
        }
        Ok(Llama {
            config,
            tokenizer,
            params,
            linears,
            head,
            embd,
            weight_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llama::FfnAct;

    fn config(extra: &str) -> String {
        format!(
            r#"{{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
               "vocab_size": 50, "rms_norm_eps": 1e-5, "rope_theta": 500000.0{extra}}}"#
        )
    }

    #[test]
    fn reads_a_llama_config() {
        let c = LlamaConfig::from_hf_json(&config(""), "config.json").unwrap();
        assert_eq!(
            (c.layers, c.hidden, c.heads, c.kv_heads, c.head_dim, c.ffn, c.vocab),
            (2, 64, 4, 2, 16, 96, 50)
        );
        assert_eq!(c.eps, 1e-5);
        assert_eq!(c.rope_base, 500000.0);
        assert_eq!(c.inv_freq(1), 500000f64.powf(-2.0 / 16.0));
    }

    #[test]
    fn llama3_rope_scaling_slows_long_wavelengths_only() {
        let s = r#", "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192}"#;
        let c = LlamaConfig::from_hf_json(&config(s), "config.json").unwrap();
        let f = c.rope_freq_factors.as_ref().unwrap();
        assert_eq!(f.len(), 8);
        // pair 0: wavelength 2*pi < 8192/4: unscaled
        assert_eq!(f[0], 1.0);
        // the last pair: wavelength 2*pi*500000^(14/16) ~ 6.9e5 > 8192: divided by 8
        assert!((f[7] - 8.0).abs() < 1e-12, "{}", f[7]);
        // in between, factors rise monotonically from 1 to 8
        assert!(f.windows(2).all(|w| w[0] <= w[1]));
        // a pair in the blend region, by the formula written out
        let (old, low, high, factor) = (8192.0, 1.0, 4.0, 8.0);
        for (i, &got) in f.iter().enumerate() {
            let fr = 500000f64.powf(-2.0 * i as f64 / 16.0);
            let wl = 2.0 * std::f64::consts::PI / fr;
            if wl >= old / high && wl <= old / low {
                let sm = (old / wl - low) / (high - low);
                let want = fr / ((1.0 - sm) * fr / factor + sm * fr);
                assert!((got - want).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn unsupported_configs_say_why() {
        let e = LlamaConfig::from_hf_json(&config(r#", "attention_bias": true"#), "c.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("attention_bias"), "{e}");
        let e = LlamaConfig::from_hf_json(&config(r#", "hidden_act": "gelu""#), "c.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("gelu"), "{e}");
        let e = LlamaConfig::from_hf_json(
            &config(r#", "rope_scaling": {"type": "yarn", "factor": 4.0}"#),
            "c.json",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("yarn"), "{e}");
        let e = LlamaConfig::from_hf_json(&config("").replace("llama", "gpt2"), "c.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("gpt2"), "{e}");
        let c = LlamaConfig::from_hf_json(&config("").replace("llama", "qwen2"), "c.json");
        assert!(c.unwrap().qkv_bias, "qwen2 has q/k/v biases");
        let m = config(r#", "sliding_window": 64, "max_position_embeddings": 4096"#);
        let c = LlamaConfig::from_hf_json(&m.replace("llama", "mistral"), "c.json").unwrap();
        assert_eq!(c.context, 64, "mistral stops at its window");
        let e = LlamaConfig::from_hf_json("{", "c.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("c.json"), "{e}");
    }

    /// `config.json`s as transformers 5.25 writes them (`GemmaConfig` / `Phi3Config` with
    /// a tiny shape, `to_json_string(use_diff=True)`): rope settings in `rope_parameters`.
    #[test]
    fn reads_transformers_5_gemma_and_phi3_configs() {
        let gemma = r#"{"attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "head_dim": 32, "hidden_act": "gelu_pytorch_tanh", "hidden_size": 128, "initializer_range": 0.02, "intermediate_size": 352, "max_position_embeddings": 4096, "model_type": "gemma", "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "pad_token_id": 0, "rms_norm_eps": 1e-06, "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}, "tie_word_embeddings": true, "transformers_version": "5.25.0", "use_bidirectional_attention": null, "use_cache": true, "vocab_size": 256}"#;
        let c = LlamaConfig::from_hf_json(gemma, "gemma.json").unwrap();
        assert_eq!(
            (c.head_dim, c.rope_base, c.ffn_act),
            (32, 10000.0, FfnAct::GeluTanh)
        );
        assert_eq!(c.embed_scale, 128f32.sqrt());
        let phi3 = r#"{"attention_dropout": 0.0, "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 128, "initializer_range": 0.02, "intermediate_size": 352, "max_position_embeddings": 4096, "model_type": "phi3", "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "original_max_position_embeddings": 4096, "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05, "rope_parameters": {"partial_rotary_factor": 1.0, "rope_theta": 10000.0, "rope_type": "default"}, "sliding_window": null, "tie_word_embeddings": false, "transformers_version": "5.25.0", "use_cache": true, "vocab_size": 256}"#;
        let c = LlamaConfig::from_hf_json(phi3, "phi3.json").unwrap();
        assert_eq!((c.head_dim, c.context, c.ffn_act), (32, 4096, FfnAct::Silu));
        assert_eq!(c.embed_scale, 1.0);
    }

    #[test]
    fn rope_rows_move_to_adjacent_pairs() {
        // 2 heads of head_dim 4, rows of one byte: per head [a0 a1 b0 b1] -> [a0 b0 a1 b1]
        let rows: Vec<u8> = (0..8).collect();
        assert_eq!(permute_rope_rows(&rows, 2, 4), vec![0, 2, 1, 3, 4, 6, 5, 7]);
    }
}
