//! The Llama family (SmolLM2, TinyLlama, Llama 3 shapes; Mistral, Qwen2, Gemma and Phi-3,
//! whose differences [`arch`] lists) from GGUF files or from Hugging Face folders (`config.json` + safetensors + `tokenizer.json`, see [`hf`]): config from the
//! `llama.*` metadata, weights kept packed (every projection is an [`Op::QuantMatMul`] on
//! the file's own blocks: quantized, f16, bf16 or f32), graph builders for prefill and
//! decode, and a [`Generator`] that runs them with a KV cache allocated once per generation.
//!
//! The graph: RMSNorm, Q/K/V projections, RoPE on adjacent pairs (GGUF stores Q and K rows
//! permuted for llama.cpp's "normal" rope), grouped-query attention, output projection,
//! RMSNorm, SwiGLU feed-forward; a final RMSNorm and the LM head (the token embedding when
//! the file has no `output.weight`). Only the last position's logits are computed.
//!
//! GQA runs on the plain attention op: the `g = heads / kv_heads` query heads that share a
//! KV head are stacked along the query axis (`[kv_heads, g * T, head_dim]`), so every KV head
//! is one attention batch and the additive mask (`[g * T, S]`) carries causality and the
//! cache's valid length.
//!
//! KV cache: one f32 tensor `[layers, 2, kv_heads, capacity, head_dim]`, allocated when a
//! generation starts and never again: one block of the generator's `rlx-mem` host
//! sub-allocator ([`Generator::cache_memory`]), held by the tensor as exclusive
//! [`rlx_ir::Buffer`] storage (written in place) and freed when the generation ends. The decode graph takes it as an input (bound by
//! reference, not copied, by the CPU backend), attends over all `capacity` rows with the
//! unfilled ones masked out, and returns only the new K/V rows, which the generator writes
//! into the cache in place. Shapes are static per generation, so the decode graph compiles
//! once and every token reuses it.

pub mod arch;
pub mod export;
pub mod hf;
pub mod sample;

pub use arch::FfnAct;

use rlx_gguf::{ChatTokenizer, GgufError, GgufFile, QuantFormat};
use rlx_ir::{
    BinaryOp, Buffer, DType, Graph, IrError, NodeId, Op, SplitMix64, Tensor, TensorData, UnaryOp,
};
use rlx_mem::{Allocation, AllocatorConfig, HostProvider, SubAllocator};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// GGUF architectures RLX builds: Llama's graph, with q/k/v biases for Qwen2, GeGLU and
/// scaled embeddings for Gemma, fused q/k/v and gate/up rows for Phi-3.
pub const GGUF_ARCHS: [&str; 4] = ["llama", "qwen2", "gemma", "phi3"];

/// Hyper-parameters of a Llama-family model.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    /// transformer blocks
    pub layers: usize,
    /// hidden size
    pub hidden: usize,
    /// query heads
    pub heads: usize,
    /// key/value heads (GQA when fewer than `heads`)
    pub kv_heads: usize,
    /// size of one head
    pub head_dim: usize,
    /// feed-forward size
    pub ffn: usize,
    /// vocabulary size
    pub vocab: usize,
    /// RMSNorm epsilon
    pub eps: f64,
    /// RoPE base frequency
    pub rope_base: f64,
    /// trained context length
    pub context: usize,
    /// per-pair RoPE frequency divisors (Llama 3.1 scaling: GGUF `rope_freqs.weight`, or
    /// computed from `rope_scaling` in `config.json`); None divides by 1
    pub rope_freq_factors: Option<Vec<f64>>,
    /// the q, k and v projections add a bias (Qwen2): params `blk.L.attn_{q,k,v}.bias`
    pub qkv_bias: bool,
    /// the feed-forward's gate activation (SiLU; GELU's tanh form for Gemma)
    pub ffn_act: FfnAct,
    /// factor on the token embeddings (Gemma: `sqrt(hidden)`); 1 for the others
    pub embed_scale: f32,
    /// RoPE's attention factor (Phi-3 `longrope`): cos and sin are scaled by it, so q·k by
    /// its square; 1 for the others
    pub rope_attn_scale: f64,
}

/// Errors of loading, building or generating.
#[derive(Debug, thiserror::Error)]
pub enum LlamaError {
    /// The GGUF file is malformed or lacks what a Llama model needs.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// The file's shapes or settings are not a Llama model RLX can build.
    #[error("llama model: {0}")]
    Model(String),
    /// Building the graph failed (an internal inconsistency, named).
    #[error(transparent)]
    Graph(#[from] IrError),
    /// The runner (compile or run) failed.
    #[error("running the model: {0}")]
    Run(String),
    /// A Hugging Face folder's files (weights, tokenizer) are missing or malformed.
    #[error(transparent)]
    Files(#[from] crate::error::ModelError),
}

fn model_err(m: impl Into<String>) -> LlamaError {
    LlamaError::Model(m.into())
}

impl LlamaConfig {
    /// Reads the `llama.*` metadata.
    ///
    /// # Errors
    /// Another architecture, missing keys, or inconsistent sizes.
    pub fn from_gguf(f: &GgufFile) -> Result<LlamaConfig, LlamaError> {
        let arch = f.get_str("general.architecture")?;
        if !GGUF_ARCHS.contains(&arch) {
            return Err(model_err(format!(
                "architecture `{arch}` is not supported (RLX builds {})",
                GGUF_ARCHS.join(", ")
            )));
        }
        let key = |k: &str| format!("{arch}.{k}");
        let u = |k: &str| -> Result<usize, LlamaError> { Ok(f.get_u64(k)? as usize) };
        let hidden = u(&key("embedding_length"))?;
        let heads = u(&key("attention.head_count"))?;
        let kv_heads = match f.get(&key("attention.head_count_kv")) {
            Some(_) => u(&key("attention.head_count_kv"))?,
            None => heads,
        };
        if heads == 0 || kv_heads == 0 || !hidden.is_multiple_of(heads) {
            return Err(model_err(format!(
                "hidden size {hidden} is not divisible into {heads} heads"
            )));
        }
        if !heads.is_multiple_of(kv_heads) {
            return Err(model_err(format!(
                "{heads} query heads are not a multiple of {kv_heads} KV heads"
            )));
        }
        let head_dim = match f.get(&key("attention.key_length")) {
            Some(_) => u(&key("attention.key_length"))?,
            None => hidden / heads,
        };
        // partial rotary (Phi-3's `partial_rotary_factor` below 1) is not built
        if f.get(&key("rope.dimension_count")).is_some() {
            let rot = u(&key("rope.dimension_count"))?;
            if rot != head_dim {
                return Err(model_err(format!(
                    "{arch}.rope.dimension_count {rot} differs from the head size {head_dim}: \
                     partial rotary embeddings are not supported"
                )));
            }
        }
        if head_dim % 2 != 0 {
            return Err(model_err(format!(
                "head size {head_dim} is odd; RoPE needs pairs"
            )));
        }
        let vocab = match f.get(&key("vocab_size")) {
            Some(_) => u(&key("vocab_size"))?,
            None => f
                .tensor("token_embd.weight")
                .and_then(|t| t.dims.get(1).copied())
                .ok_or_else(|| model_err("no vocab size and no token_embd.weight"))?
                as usize,
        };
        let mut cfg = LlamaConfig {
            layers: u(&key("block_count"))?,
            hidden,
            heads,
            kv_heads,
            head_dim,
            ffn: u(&key("feed_forward_length"))?,
            vocab,
            eps: f.get_f64(&key("attention.layer_norm_rms_epsilon"))?,
            rope_base: match f.get(&key("rope.freq_base")) {
                Some(_) => f.get_f64(&key("rope.freq_base"))?,
                None => 10000.0,
            },
            context: match f.get(&key("context_length")) {
                Some(_) => u(&key("context_length"))?,
                None => 2048,
            },
            rope_freq_factors: None,
            qkv_bias: arch == "qwen2",
            ffn_act: if arch == "gemma" {
                FfnAct::GeluTanh
            } else {
                FfnAct::Silu
            },
            embed_scale: 1.0,
            rope_attn_scale: 1.0,
        };
        // Phi-3's sliding window, as the Mistral path: the context stops there
        if f.get(&key("attention.sliding_window")).is_some() {
            let w = u(&key("attention.sliding_window"))?;
            if w > 0 {
                cfg.context = cfg.context.min(w);
            }
        }
        if cfg.layers == 0 || cfg.ffn == 0 || cfg.vocab == 0 {
            return Err(model_err(format!("empty dimensions in {cfg:?}")));
        }
        Ok(cfg)
    }

    /// Query heads per KV head.
    pub fn group(&self) -> usize {
        self.heads / self.kv_heads
    }

    /// Phi-3 longrope's attention factor for a model trained to `context` positions from an
    /// `original` context: sqrt(1 + ln(context / original) / ln(original)), 1 when not longer.
    pub fn longrope_factor(context: usize, original: usize) -> f64 {
        longrope_attention_factor(context, original)
    }

    /// The rotation angle per position of RoPE pair `i`: `base^(-2i/head_dim)`, divided by
    /// the pair's frequency factor when the model scales RoPE.
    pub fn inv_freq(&self, i: usize) -> f64 {
        let f = self.rope_base.powf(-2.0 * i as f64 / self.head_dim as f64);
        match &self.rope_freq_factors {
            Some(d) => f / d.get(i).copied().unwrap_or(1.0),
            None => f,
        }
    }
}

/// A q/k bias in "rotate half" order moved to adjacent RoPE pairs, as the rows are.
pub(crate) fn permute_rope_values(v: &[f32], heads: usize, head_dim: usize) -> Vec<f32> {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    hf::permute_rope_rows(&bytes, heads, head_dim)
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A packed projection weight: n rows of k values in `format`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Linear {
    format: QuantFormat,
    n: usize,
    k: usize,
}

/// A Llama model loaded from GGUF: config, tokenizer, and weights (packed, by param name).
pub struct Llama {
    /// hyper-parameters
    pub config: LlamaConfig,
    /// the tokenizer embedded in the file
    pub tokenizer: ChatTokenizer,
    /// every weight by param name; projections as packed `u8` vectors
    pub params: Vec<(String, Arc<Tensor>)>,
    linears: HashMap<String, Linear>,
    /// the name of the LM head weight (`output.weight`, or the embedding when tied)
    head: String,
    /// the token embedding, packed, for host-side row lookups
    embd: (Arc<Tensor>, QuantFormat),
    /// bytes of all weights (what one decode step reads, roughly)
    pub weight_bytes: usize,
}

impl std::fmt::Debug for Llama {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Llama")
            .field("config", &self.config)
            .field("params", &self.params.len())
            .field("weight_bytes", &self.weight_bytes)
            .finish()
    }
}

/// Registers a loaded projection: param name, packed rows, format, `n`, `k`, and the heads
/// whose RoPE rows to permute.
type AddFn<'a> =
    dyn FnMut(&str, Buffer<u8>, QuantFormat, usize, usize, Option<usize>) -> Arc<Tensor> + 'a;

/// Declares (once) and returns a param node: graph, name, shape, dtype.
type ParamFn<'a> = dyn FnMut(&mut Graph, &str, &[usize], DType) -> NodeId + 'a;

/// Which graph to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// the whole prompt at once: `tokens` positions, no cache input
    Prefill {
        /// prompt length
        tokens: usize,
    },
    /// one new token against a cache of `capacity` rows
    Decode {
        /// cache rows
        capacity: usize,
    },
}

impl Llama {
    /// Loads config, tokenizer and weights. Projection weights are copied out of the
    /// mapping still packed (no f32 copy); norms become f32.
    ///
    /// # Errors
    /// Missing tensors, unsupported types, or shapes that disagree with the config.
    pub fn from_gguf(f: &GgufFile) -> Result<Llama, LlamaError> {
        let mut config = LlamaConfig::from_gguf(f)?;
        if f.tensor("rope_freqs.weight").is_some() {
            // Llama 3.1 scaling: one frequency divisor per RoPE pair
            let (shape, v) = f.dequantize("rope_freqs.weight")?;
            if shape != [config.head_dim / 2] {
                return Err(model_err(format!(
                    "rope_freqs.weight has shape {shape:?}, expected [{}]",
                    config.head_dim / 2
                )));
            }
            config.rope_freq_factors = Some(v.iter().map(|&x| x as f64).collect());
        }
        if f.tensor("rope_factors_short.weight").is_some() {
            // Phi-3 longrope: the short factors (what transformers uses up to the original
            // context), the context capped there, and the attention factor
            let (shape, v) = f.dequantize("rope_factors_short.weight")?;
            if shape != [config.head_dim / 2] {
                return Err(model_err(format!(
                    "rope_factors_short.weight has shape {shape:?}, expected [{}]",
                    config.head_dim / 2
                )));
            }
            config.rope_freq_factors = Some(v.iter().map(|&x| x as f64).collect());
            let arch = f.get_str("general.architecture")?;
            let original = f
                .get_u64(&format!("{arch}.rope.scaling.original_context_length"))
                .ok()
                .map(|n| n as usize)
                .unwrap_or(config.context);
            config.rope_attn_scale = f
                .get_f64(&format!("{arch}.rope.scaling.attn_factor"))
                .unwrap_or_else(|_| longrope_attention_factor(config.context, original));
            config.context = config.context.min(original.max(1));
        }
        let arch = f.get_str("general.architecture")?;
        if arch == "gemma" {
            // llama.cpp scales by sqrt(n_embd) in f32 whatever the table's format
            config.embed_scale = arch::gemma_embed_scale(config.hidden, QuantFormat::F32);
        }
        let tokenizer = ChatTokenizer::from_gguf(f)?;
        let c = &config;
        let mut params = Vec::new();
        let mut linears = HashMap::new();
        let mut weight_bytes = 0;
        // Qwen2, Gemma and Phi-3 files keep Hugging Face's "rotate half" order of the Q/K
        // rows (llama.cpp ropes them as NEOX); the graph rotates adjacent pairs, so those
        // rows are permuted.
        let neox = matches!(arch, "qwen2" | "gemma" | "phi3");
        // A tensor's packed rows, checked against `[k, n]` (GGUF order).
        let fetch =
            |name: &str, n: usize, k: usize| -> Result<(Buffer<u8>, QuantFormat), LlamaError> {
                let (t, bytes) = f.tensor_buffer(name)?;
                if t.dims != [k as u64, n as u64] {
                    return Err(LlamaError::Gguf(GgufError::Tensor {
                        name: name.into(),
                        message: format!("dims {:?}, expected [{k}, {n}]", t.dims),
                    }));
                }
                let format = t.ggml_type.format().expect("checked by tensor_bytes");
                Ok((bytes, format))
            };
        let mut add = |name: &str,
                       bytes: Buffer<u8>,
                       format: QuantFormat,
                       n: usize,
                       k: usize,
                       rope: Option<usize>|
         -> Arc<Tensor> {
            let bytes: Buffer<u8> = match rope {
                Some(h) if neox => hf::permute_rope_rows(&bytes, h, c.head_dim).into(),
                _ => bytes,
            };
            // Borrowed from the file's memory map unless permuted or split: the packed
            // weights are used in place.
            let len = bytes.len();
            let tensor =
                Arc::new(Tensor::new(vec![len], TensorData::U8(bytes)).expect("length matches"));
            weight_bytes += len;
            linears.insert(name.to_string(), Linear { format, n, k });
            params.push((name.to_string(), tensor.clone()));
            tensor
        };
        let packed = |add: &mut AddFn<'_>,
                      name: &str,
                      n: usize,
                      k: usize,
                      rope: Option<usize>|
         -> Result<Arc<Tensor>, LlamaError> {
            let (bytes, format) = fetch(name, n, k)?;
            Ok(add(name, bytes, format, n, k, rope))
        };
        let embd = packed(&mut add, "token_embd.weight", c.vocab, c.hidden, None)?;
        let embd_format = f
            .tensor("token_embd.weight")
            .and_then(|t| t.ggml_type.format())
            .expect("loaded above");
        let head = if f.tensor("output.weight").is_some() {
            packed(&mut add, "output.weight", c.vocab, c.hidden, None)?;
            "output.weight".to_string()
        } else {
            "token_embd.weight".to_string()
        };
        let (qd, kvd) = (c.heads * c.head_dim, c.kv_heads * c.head_dim);
        for l in 0..c.layers {
            let p = |s: &str| format!("blk.{l}.{s}.weight");
            if f.tensor(&p("attn_qkv")).is_some() {
                // Phi-3: q, k and v rows in one tensor
                let (bytes, format) = fetch(&p("attn_qkv"), qd + 2 * kvd, c.hidden)?;
                let parts = arch::split_rows(&bytes, qd + 2 * kvd, &[qd, kvd, kvd]);
                for ((s, n, rope), b) in [
                    ("attn_q", qd, Some(c.heads)),
                    ("attn_k", kvd, Some(c.kv_heads)),
                    ("attn_v", kvd, None),
                ]
                .into_iter()
                .zip(parts)
                {
                    add(&p(s), b.into(), format, n, c.hidden, rope);
                }
            } else {
                packed(&mut add, &p("attn_q"), qd, c.hidden, Some(c.heads))?;
                packed(&mut add, &p("attn_k"), kvd, c.hidden, Some(c.kv_heads))?;
                packed(&mut add, &p("attn_v"), kvd, c.hidden, None)?;
            }
            packed(&mut add, &p("attn_output"), c.hidden, qd, None)?;
            if f.tensor(&p("ffn_gate")).is_none() && arch == "phi3" {
                // Phi-3: gate and up rows in one `ffn_up` of 2 * ffn rows, gate first
                let (bytes, format) = fetch(&p("ffn_up"), 2 * c.ffn, c.hidden)?;
                let parts = arch::split_rows(&bytes, 2 * c.ffn, &[c.ffn, c.ffn]);
                for (s, b) in ["ffn_gate", "ffn_up"].into_iter().zip(parts) {
                    add(&p(s), b.into(), format, c.ffn, c.hidden, None);
                }
            } else {
                packed(&mut add, &p("ffn_gate"), c.ffn, c.hidden, None)?;
                packed(&mut add, &p("ffn_up"), c.ffn, c.hidden, None)?;
            }
            packed(&mut add, &p("ffn_down"), c.hidden, c.ffn, None)?;
        }
        if c.qkv_bias {
            for l in 0..c.layers {
                for (s, len, heads) in [
                    ("attn_q", qd, Some(c.heads)),
                    ("attn_k", kvd, Some(c.kv_heads)),
                    ("attn_v", kvd, None),
                ] {
                    let name = format!("blk.{l}.{s}.bias");
                    let (shape, mut v) = f.dequantize(&name)?;
                    if shape != [len] {
                        return Err(LlamaError::Gguf(GgufError::Tensor {
                            name,
                            message: format!("shape {shape:?}, expected [{len}]"),
                        }));
                    }
                    if let (Some(h), true) = (heads, neox) {
                        v = permute_rope_values(&v, h, c.head_dim);
                    }
                    weight_bytes += len * 4;
                    params.push((name, Arc::new(Tensor::from_f32(&[len], v).expect("sizes"))));
                }
            }
        }
        // Gemma's norms are used as stored: llama.cpp's converter already added the 1 of
        // Gemma's `(1 + w)` to them.
        let mut norms = vec!["output_norm.weight".to_string()];
        for l in 0..c.layers {
            norms.push(format!("blk.{l}.attn_norm.weight"));
            norms.push(format!("blk.{l}.ffn_norm.weight"));
        }
        for name in norms {
            let (shape, v) = f.dequantize(&name)?;
            if shape != [c.hidden] {
                return Err(LlamaError::Gguf(GgufError::Tensor {
                    name,
                    message: format!("shape {shape:?}, expected [{}]", c.hidden),
                }));
            }
            weight_bytes += v.len() * 4;
            params.push((name, Arc::new(Tensor::from_f32(&shape, v).expect("sizes"))));
        }
        Ok(Llama {
            config,
            tokenizer,
            params,
            linears,
            head,
            embd: (embd, embd_format),
            weight_bytes,
        })
    }

    /// Loads a model from a path: a GGUF file, a folder holding a `.gguf` file, or a Hugging
    /// Face folder (`config.json` + safetensors + `tokenizer.json`).
    ///
    /// # Errors
    /// No such path, nothing loadable in the folder, or the loader's own errors.
    pub fn open(path: &std::path::Path) -> Result<Llama, LlamaError> {
        if path.is_dir() {
            if path.join("config.json").is_file() {
                return Llama::from_hf_dir(path);
            }
            let mut found: Vec<std::path::PathBuf> = std::fs::read_dir(path)
                .map_err(|e| model_err(format!("{}: {e}", path.display())))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
                .collect();
            found.sort();
            let Some(file) = found.first() else {
                return Err(model_err(format!(
                    "{}: neither a config.json (Hugging Face folder) nor a .gguf file",
                    path.display()
                )));
            };
            return Llama::from_gguf(&GgufFile::open(file)?);
        }
        if !path.exists() {
            return Err(model_err(format!(
                "{}: no such file or folder",
                path.display()
            )));
        }
        Llama::from_gguf(&GgufFile::open(path)?)
    }

    /// The stored format and `(n, k)` (output rows, inputs per row) of projection `name`
    /// (`blk.L.attn_q.weight`, `output.weight`, ...), or None when there is no such weight.
    pub fn linear(&self, name: &str) -> Option<(QuantFormat, usize, usize)> {
        self.linears.get(name).map(|l| (l.format, l.n, l.k))
    }

    /// A weight by name (projections as packed `u8` bytes, norms as f32).
    pub fn param(&self, name: &str) -> Option<&Arc<Tensor>> {
        self.params.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    /// The name of the LM head weight (`output.weight`, or the embedding when tied).
    pub fn head_name(&self) -> &str {
        &self.head
    }

    /// Bytes of weights one decode step reads: every projection and norm, plus one
    /// embedding row (the embedding table itself only when it is also the LM head).
    pub fn bytes_per_token(&self) -> usize {
        let embd_bytes = self.embd.0.numel();
        let tied = self.head == "token_embd.weight";
        let row = embd_bytes / self.config.vocab.max(1);
        if tied {
            self.weight_bytes
        } else {
            self.weight_bytes - embd_bytes + row
        }
    }

    /// Writes the embedding of `token` into `out` (`hidden` values), dequantizing one row and
    /// scaling it by the config's `embed_scale` (Gemma).
    ///
    /// # Errors
    /// The token is outside the vocabulary.
    pub fn embed(&self, token: u32, out: &mut [f32]) -> Result<(), LlamaError> {
        let (t, format) = &self.embd;
        let (k, n) = (self.config.hidden, self.config.vocab);
        if token as usize >= n {
            return Err(model_err(format!(
                "token {token} outside the vocabulary of {n}"
            )));
        }
        let TensorData::U8(bytes) = t.data() else {
            unreachable!("packed as u8")
        };
        let rb = bytes.len() / n;
        let row = &bytes[token as usize * rb..(token as usize + 1) * rb];
        format.dequantize(row, &mut out[..k]);
        let scale = self.config.embed_scale;
        if scale != 1.0 {
            for v in &mut out[..k] {
                *v *= scale;
            }
        }
        Ok(())
    }

    /// Builds the prefill or decode graph.
    ///
    /// Inputs: `x` f32 `[T, hidden]` (embeddings), `cos`/`sin` f32 `[T, 1, head_dim/2, 1]`,
    /// `mask` f32 `[g*T, S]` (additive; `S = T` for prefill, `capacity + 1` for decode) and,
    /// for decode, `kv_cache` f32 `[layers, 2, kv_heads, capacity, head_dim]`. Outputs:
    /// `logits` `[1, vocab]` of the last position, and per layer `k.L`, `v.L`
    /// `[kv_heads, T, head_dim]`, the rows to append to the cache.
    ///
    /// # Errors
    /// An inconsistency in the weights' shapes (named by the IR).
    pub fn build_graph(&self, stage: Stage) -> Result<Graph, LlamaError> {
        let c = &self.config;
        let (t, past) = match stage {
            Stage::Prefill { tokens } => (tokens, None),
            Stage::Decode { capacity } => (1, Some(capacity)),
        };
        if t == 0 {
            return Err(model_err("an empty prompt"));
        }
        let (hd, kvh, h, g) = (c.head_dim, c.kv_heads, c.heads, c.group());
        let s = past.map_or(t, |p| p + t);
        let mut gr = Graph::new();
        let f32t = DType::F32;
        let mut x = gr.input("x", f32t, [t, c.hidden].as_slice());
        let cos = gr.input("cos", f32t, [t, 1, hd / 2, 1].as_slice());
        let sin = gr.input("sin", f32t, [t, 1, hd / 2, 1].as_slice());
        let mask = gr.input("mask", f32t, [g * t, s].as_slice());
        let cache = past.map(|p| gr.input("kv_cache", f32t, [c.layers, 2, kvh, p, hd].as_slice()));
        let mut params: HashMap<String, NodeId> = HashMap::new();
        let mut param = |gr: &mut Graph, name: &str, shape: &[usize], dtype: DType| -> NodeId {
            *params
                .entry(name.to_string())
                .or_insert_with(|| gr.param(name, dtype, shape))
        };
        let linear = |gr: &mut Graph,
                      param: &mut ParamFn<'_>,
                      x: NodeId,
                      name: &str|
         -> Result<NodeId, LlamaError> {
            let lin = self
                .linears
                .get(name)
                .ok_or_else(|| model_err(format!("no weight {name}")))?;
            let bytes = lin
                .format
                .bytes_for(lin.n * lin.k)
                .expect("checked at load");
            let w = param(gr, name, &[bytes], DType::U8);
            Ok(gr.push(
                Op::QuantMatMul {
                    format: lin.format,
                    n: lin.n,
                    k: lin.k,
                    int8_activations: true,
                },
                &[x, w],
                None,
            )?)
        };
        // RoPE on adjacent pairs: x [T, heads, hd] -> same.
        let rope = |gr: &mut Graph, x: NodeId, heads: usize| -> Result<NodeId, LlamaError> {
            let x = gr.reshape(x, [t, heads, hd / 2, 2].as_slice())?;
            let x0 = gr.slice(x, 3, 0, 1, 1)?;
            let x1 = gr.slice(x, 3, 1, 2, 1)?;
            let a = gr.mul(x0, cos)?;
            let b = gr.mul(x1, sin)?;
            let o0 = gr.sub(a, b)?;
            let a = gr.mul(x0, sin)?;
            let b = gr.mul(x1, cos)?;
            let o1 = gr.add(a, b)?;
            let o = gr.concat(&[o0, o1], 3)?;
            Ok(gr.reshape(o, [t, heads, hd].as_slice())?)
        };
        for l in 0..c.layers {
            let p = |s: &str| format!("blk.{l}.{s}.weight");
            let norm_w = param(&mut gr, &p("attn_norm"), &[c.hidden], f32t);
            let hn = gr.rms_norm(x, norm_w, c.eps)?;
            let mut q = linear(&mut gr, &mut param, hn, &p("attn_q"))?;
            let mut k = linear(&mut gr, &mut param, hn, &p("attn_k"))?;
            let mut v = linear(&mut gr, &mut param, hn, &p("attn_v"))?;
            if c.qkv_bias {
                let (qd, kvd) = (h * hd, kvh * hd);
                let bq = param(&mut gr, &format!("blk.{l}.attn_q.bias"), &[qd], f32t);
                let bk = param(&mut gr, &format!("blk.{l}.attn_k.bias"), &[kvd], f32t);
                let bv = param(&mut gr, &format!("blk.{l}.attn_v.bias"), &[kvd], f32t);
                q = gr.add(q, bq)?;
                k = gr.add(k, bk)?;
                v = gr.add(v, bv)?;
            }
            let q = gr.reshape(q, [t, h, hd].as_slice())?;
            let q = rope(&mut gr, q, h)?;
            let q = gr.transpose(q, &[1, 0, 2])?;
            let q = gr.reshape(q, [kvh, g * t, hd].as_slice())?;
            let k = gr.reshape(k, [t, kvh, hd].as_slice())?;
            let k = rope(&mut gr, k, kvh)?;
            let k_new = gr.transpose(k, &[1, 0, 2])?;
            let v = gr.reshape(v, [t, kvh, hd].as_slice())?;
            let v_new = gr.transpose(v, &[1, 0, 2])?;
            gr.output(&format!("k.{l}"), k_new);
            gr.output(&format!("v.{l}"), v_new);
            let (k_all, v_all) = match (cache, past) {
                (Some(cache), Some(p)) => {
                    let layer = gr.slice(cache, 0, l as i64, l as i64 + 1, 1)?;
                    let kc = gr.slice(layer, 1, 0, 1, 1)?;
                    let kc = gr.reshape(kc, [kvh, p, hd].as_slice())?;
                    let vc = gr.slice(layer, 1, 1, 2, 1)?;
                    let vc = gr.reshape(vc, [kvh, p, hd].as_slice())?;
                    (gr.concat(&[kc, k_new], 1)?, gr.concat(&[vc, v_new], 1)?)
                }
                _ => (k_new, v_new),
            };
            let att = gr.attention(q, k_all, v_all, Some(mask), false, None)?;
            let att = gr.reshape(att, [h, t, hd].as_slice())?;
            let att = gr.transpose(att, &[1, 0, 2])?;
            let att = gr.reshape(att, [t, h * hd].as_slice())?;
            let o = linear(&mut gr, &mut param, att, &p("attn_output"))?;
            x = gr.add(x, o)?;
            let norm_w = param(&mut gr, &p("ffn_norm"), &[c.hidden], f32t);
            let hn = gr.rms_norm(x, norm_w, c.eps)?;
            let gate = linear(&mut gr, &mut param, hn, &p("ffn_gate"))?;
            let up = linear(&mut gr, &mut param, hn, &p("ffn_up"))?;
            let act = match c.ffn_act {
                FfnAct::Silu => UnaryOp::Silu,
                FfnAct::GeluTanh => UnaryOp::GeluTanh,
            };
            let gate = gr.unary(act, gate)?;
            let m = gr.binary(BinaryOp::Mul, gate, up)?;
            let d = linear(&mut gr, &mut param, m, &p("ffn_down"))?;
            x = gr.add(x, d)?;
        }
        let last = if t > 1 {
            gr.slice(x, 0, t as i64 - 1, t as i64, 1)?
        } else {
            x
        };
        let norm_w = param(&mut gr, "output_norm.weight", &[c.hidden], f32t);
        let hn = gr.rms_norm(last, norm_w, c.eps)?;
        let head = self.head.clone();
        let logits = linear(&mut gr, &mut param, hn, &head)?;
        gr.output("logits", logits);
        Ok(gr)
    }
}

/// Compiles and runs graphs for the [`Generator`] (the CLI and tests adapt an
/// `rlx_runtime::Session`; this crate stays below the runtime).
pub trait Runner {
    /// Sets a weight shared by every graph compiled afterwards.
    fn set_param(&mut self, name: &str, value: Arc<Tensor>);
    /// Compiles a graph; returns a handle for [`Runner::run`].
    ///
    /// # Errors
    /// Any compile failure, as text.
    fn compile(&mut self, graph: &Graph) -> Result<usize, String>;
    /// Lets go of a compiled graph (its handle is not used again); by default kept.
    fn release(&mut self, _handle: usize) {}
    /// Runs a compiled graph with inputs by name.
    ///
    /// # Errors
    /// Any run failure, as text.
    fn run(
        &mut self,
        handle: usize,
        inputs: &HashMap<String, Tensor>,
    ) -> Result<Vec<(String, Tensor)>, String>;
}

/// How to pick the next token.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// 0 means greedy (argmax)
    pub temperature: f64,
    /// nucleus sampling mass (1 keeps every token)
    pub top_p: f64,
    /// keep only the `top_k` most likely tokens (0 keeps every token)
    pub top_k: usize,
    /// drop tokens less likely than `min_p` times the most likely one (0 keeps every token)
    pub min_p: f64,
    /// divide positive logits (multiply negative ones) of tokens already in the sequence by
    /// this (1 is off)
    pub repetition_penalty: f64,
    /// RNG seed
    pub seed: u64,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling {
            temperature: 0.0,
            top_p: 1.0,
            top_k: 0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            seed: 0,
        }
    }
}

impl Sampling {
    /// True when only a temperature (or greedy) is asked for: what a device can sample
    /// without sorting (argmax of logits / T plus Gumbel noise).
    pub fn is_plain(&self) -> bool {
        self.top_p >= 1.0 && self.top_k == 0 && self.min_p <= 0.0 && self.repetition_penalty == 1.0
    }

    /// Checks the ranges: temperature >= 0, top_p and min_p in [0, 1], penalty > 0.
    ///
    /// # Errors
    /// The first setting out of range, named.
    pub fn validate(&self) -> Result<(), String> {
        if self.temperature.is_nan() || self.temperature < 0.0 {
            return Err(format!("temperature {} must be >= 0", self.temperature));
        }
        if !(0.0..=1.0).contains(&self.top_p) {
            return Err(format!("top_p {} must be in [0, 1]", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(format!("min_p {} must be in [0, 1]", self.min_p));
        }
        if self.repetition_penalty.is_nan() || self.repetition_penalty <= 0.0 {
            return Err(format!(
                "repetition_penalty {} must be > 0",
                self.repetition_penalty
            ));
        }
        Ok(())
    }
}

/// Picks a token from logits: argmax at temperature 0 (first on ties), else softmax at the
/// temperature restricted to the smallest set of tokens whose mass reaches `top_p`.
pub fn sample(logits: &[f32], s: &Sampling, rng: &mut SplitMix64) -> u32 {
    sample_with_history(logits, s, rng, &[])
}

/// [`sample`] with the tokens of the sequence so far (for the repetition penalty); applies,
/// in order, the penalty, greedy at temperature 0, then temperature, top-k, min-p and
/// top-p ([`kept_tokens`]), and draws one of the tokens kept.
pub fn sample_with_history(
    logits: &[f32],
    s: &Sampling,
    rng: &mut SplitMix64,
    history: &[u32],
) -> u32 {
    let kept = kept_tokens(logits, s, history);
    if s.temperature <= 0.0 || logits.is_empty() {
        return kept[0].1;
    }
    let mass: f64 = kept.iter().map(|p| p.0).sum();
    let mut r = rng.next_f64() * mass;
    for p in &kept {
        r -= p.0;
        if r <= 0.0 {
            return p.1;
        }
    }
    kept[kept.len() - 1].1
}

/// The tokens [`sample_with_history`] draws from, most likely first, with their
/// unnormalised weights: the one most likely token at temperature 0 (or for no logits,
/// token 0), else what temperature, top-k, min-p and top-p keep after the repetition
/// penalty over `history`. Never empty.
pub fn kept_tokens(logits: &[f32], s: &Sampling, history: &[u32]) -> Vec<(f64, u32)> {
    let penalized: Vec<f32>;
    let logits = if s.repetition_penalty != 1.0 && !history.is_empty() {
        let mut v = logits.to_vec();
        let p = s.repetition_penalty as f32;
        let mut seen = history.to_vec();
        seen.sort_unstable();
        seen.dedup();
        for &t in &seen {
            if let Some(x) = v.get_mut(t as usize) {
                *x = if *x > 0.0 { *x / p } else { *x * p };
            }
        }
        penalized = v;
        &penalized[..]
    } else {
        logits
    };
    if s.temperature <= 0.0 || logits.is_empty() {
        let mut best = 0;
        for (i, &v) in logits.iter().enumerate() {
            if v > logits[best] {
                best = i;
            }
        }
        return vec![(1.0, best as u32)];
    }
    let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
    let mut probs: Vec<(f64, u32)> = logits
        .iter()
        .enumerate()
        .map(|(i, &v)| (((v as f64 - max) / s.temperature).exp(), i as u32))
        .collect();
    probs.sort_by(|a, b| b.0.total_cmp(&a.0));
    if s.top_k > 0 {
        probs.truncate(s.top_k);
    }
    if s.min_p > 0.0 {
        let floor = probs[0].0 * s.min_p;
        let keep = probs.iter().take_while(|p| p.0 >= floor).count().max(1);
        probs.truncate(keep);
    }
    let total: f64 = probs.iter().map(|p| p.0).sum();
    let top_p = s.top_p.clamp(0.0, 1.0);
    let mut kept = 0.0;
    let mut n = 0;
    for p in &probs {
        kept += p.0 / total;
        n += 1;
        if kept >= top_p {
            break;
        }
    }
    probs.truncate(n);
    probs
}

/// Timings and tokens of one generation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenerationStats {
    /// prompt token ids
    pub prompt_tokens: Vec<u32>,
    /// generated token ids
    pub tokens: Vec<u32>,
    /// seconds compiling the prefill and decode graphs
    pub compile_s: f64,
    /// seconds of the prefill run (the first token's logits)
    pub prefill_s: f64,
    /// seconds of all decode steps
    pub decode_s: f64,
    /// decode steps run
    pub decode_steps: usize,
    /// bytes of the KV cache, allocated once
    pub kv_cache_bytes: usize,
    /// seconds of each decode step (sampling included)
    pub step_s: Vec<f64>,
}

impl GenerationStats {
    /// Prompt tokens per second.
    pub fn prefill_tok_s(&self) -> f64 {
        self.prompt_tokens.len() as f64 / self.prefill_s.max(1e-12)
    }

    /// Decode tokens per second.
    pub fn decode_tok_s(&self) -> f64 {
        self.decode_steps as f64 / self.decode_s.max(1e-12)
    }
}

/// Host memory for KV caches: an `rlx-mem` sub-allocator over host blocks.
type HostMemory = Arc<Mutex<SubAllocator>>;

fn lock(m: &HostMemory) -> MutexGuard<'_, SubAllocator> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One KV cache's memory: a block of the generator's host allocator, freed on drop.
struct CacheBlock {
    memory: HostMemory,
    allocation: Option<Allocation>,
}

impl Drop for CacheBlock {
    fn drop(&mut self) {
        if let Some(a) = self.allocation.take() {
            // freeing a live allocation of its own allocator cannot fail
            let _ = lock(&self.memory).free(a);
        }
    }
}

/// A zeroed f32 KV cache of `shape` in one allocation from `memory`.
fn alloc_cache(memory: &HostMemory, shape: Vec<usize>) -> Result<Tensor, LlamaError> {
    let len: usize = shape.iter().product();
    let bytes = len * std::mem::size_of::<f32>();
    let allocation = lock(memory)
        .alloc(bytes, 64)
        .map_err(|e| LlamaError::Run(format!("KV cache of {bytes} bytes: {e}")))?;
    let ptr = allocation.addr() as *mut f32;
    // SAFETY: the allocation is `bytes` of host memory, 64-byte aligned, ours alone until
    // freed; zeroing makes every element an initialized f32.
    unsafe { std::ptr::write_bytes(ptr, 0, len) };
    let owner = Box::new(CacheBlock {
        memory: memory.clone(),
        allocation: Some(allocation),
    });
    // SAFETY: as above; `owner` frees the allocation only when the buffer is dropped.
    let buf = unsafe { Buffer::exclusive(owner, ptr, len) };
    Ok(Tensor::new(shape, TensorData::F32(buf)).expect("sizes"))
}

/// Compiled graphs a [`Generator`] keeps (prefill by prompt length, decode by capacity);
/// past this many, the oldest are released.
const KEPT_GRAPHS: usize = 16;

/// One sequence of a [`Generator`]: its KV cache, its decode inputs (updated in place each
/// step) and its sampler state. Made by [`Generator::start`], advanced by
/// [`Generator::next`]; dropping it frees its cache.
pub struct Sequence {
    cache: Option<Tensor>,
    inputs: HashMap<String, Tensor>,
    /// the decode graph's capacity (KV rows)
    cap: usize,
    /// rows in the cache (the next position)
    pos: usize,
    last: u32,
    sampling: Sampling,
    rng: SplitMix64,
    history: Vec<u32>,
    /// seconds spent compiling graphs for this sequence
    pub compile_s: f64,
    /// seconds of the prompt's run (compiling excluded)
    pub prefill_s: f64,
    /// bytes of this sequence's KV cache
    pub kv_cache_bytes: usize,
}

impl Sequence {
    /// Rows of KV cache this sequence may still fill (0: [`Generator::next`] fails).
    pub fn rows_left(&self) -> usize {
        self.cap - self.pos
    }

    /// Tokens so far: the prompt and every generated token.
    pub fn history(&self) -> &[u32] {
        &self.history
    }
}

/// Generates text with a [`Llama`] through a [`Runner`]: one sequence at a time with
/// [`Generator::generate`], or several interleaved with [`Generator::start`] and
/// [`Generator::next`] (each with its own KV cache; compiled graphs are shared).
pub struct Generator<'a, R: Runner> {
    model: &'a Llama,
    runner: R,
    /// where KV caches come from: one allocation per sequence
    memory: HostMemory,
    /// compiled graphs by (stage, size), with their last use
    graphs: HashMap<(bool, usize), (usize, u64)>,
    uses: u64,
    /// ids that end the generation (the tokenizer's eos and `<|im_end|>`; empty: never stop)
    pub stop_ids: Vec<u32>,
}

impl<'a, R: Runner> Generator<'a, R> {
    /// Hands the model's weights to the runner.
    pub fn new(model: &'a Llama, mut runner: R) -> Self {
        for (name, t) in &model.params {
            runner.set_param(name, t.clone());
        }
        Generator {
            model,
            runner,
            memory: Arc::new(Mutex::new(SubAllocator::new(
                Box::new(HostProvider::new()),
                AllocatorConfig::default(),
            ))),
            graphs: HashMap::new(),
            uses: 0,
            stop_ids: model.tokenizer.stop_ids.clone(),
        }
    }

    /// The model this generator runs.
    pub fn model(&self) -> &'a Llama {
        self.model
    }

    /// Counters of the host allocator KV caches come from (one allocation per sequence,
    /// freed when it ends).
    pub fn cache_memory(&self) -> rlx_mem::Stats {
        lock(&self.memory).stats()
    }

    /// The compiled graph of `stage` (compiled now unless kept from before); adds the
    /// seconds spent compiling to `compile_s`.
    fn graph(&mut self, stage: Stage, compile_s: &mut f64) -> Result<usize, LlamaError> {
        let key = match stage {
            Stage::Prefill { tokens } => (true, tokens),
            Stage::Decode { capacity } => (false, capacity),
        };
        self.uses += 1;
        if let Some(g) = self.graphs.get_mut(&key) {
            g.1 = self.uses;
            return Ok(g.0);
        }
        if self.graphs.len() >= KEPT_GRAPHS {
            let oldest = self
                .graphs
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| *k);
            if let Some((handle, _)) = oldest.and_then(|k| self.graphs.remove(&k)) {
                self.runner.release(handle);
            }
        }
        let start = Instant::now();
        let handle = self
            .runner
            .compile(&self.model.build_graph(stage)?)
            .map_err(LlamaError::Run)?;
        *compile_s += start.elapsed().as_secs_f64();
        self.graphs.insert(key, (handle, self.uses));
        Ok(handle)
    }

    /// Starts a sequence: runs `prompt` (token ids) with room for `capacity` rows in all
    /// (prompt and generated tokens; at most the model's context) and returns it with its
    /// first generated token.
    ///
    /// # Errors
    /// An empty prompt, a token outside the vocabulary, a capacity beyond the context or
    /// below the prompt, or a compile/run failure.
    pub fn start(
        &mut self,
        prompt: &[u32],
        capacity: usize,
        sampling: &Sampling,
    ) -> Result<(Sequence, u32), LlamaError> {
        let m = self.model;
        let c = &m.config;
        let t = prompt.len();
        if t == 0 {
            return Err(model_err("the prompt has no tokens"));
        }
        let cap = capacity.max(t + 1);
        if cap > c.context {
            return Err(model_err(format!(
                "the prompt ({t} tokens) and the tokens to generate need {cap} rows, past \
                 the context of {}",
                c.context
            )));
        }
        sampling.validate().map_err(model_err)?;
        let run_err = LlamaError::Run;
        let (hd, kvh, g) = (c.head_dim, c.kv_heads, c.group());
        let mut compile_s = 0.0;
        let prefill = self.graph(Stage::Prefill { tokens: t }, &mut compile_s)?;

        // The KV cache: allocated here, once, for the whole sequence.
        let cache_len = c.layers * 2 * kvh * cap * hd;
        let mut cache = alloc_cache(&self.memory, vec![c.layers, 2, kvh, cap, hd])?;

        let start = Instant::now();
        let mut inputs = m.prefill_inputs(prompt)?;
        let out = self.runner.run(prefill, &inputs).map_err(run_err)?;
        let logits = write_rows(c, &mut cache, &out, 0, t)?;
        let mut rng = SplitMix64(sampling.seed);
        let mut history = prompt.to_vec();
        let first = sample_with_history(logits, sampling, &mut rng, &history);
        history.push(first);
        let prefill_s = start.elapsed().as_secs_f64();

        // The decode inputs, allocated once and updated in place by each step.
        inputs.clear();
        inputs.insert(
            "x".into(),
            Tensor::from_f32(&[1, c.hidden], vec![0.0; c.hidden]).expect("sizes"),
        );
        let (cos, sin) = rope_tables(c, t, 1);
        inputs.insert("cos".into(), cos);
        inputs.insert("sin".into(), sin);
        let mut mask = vec![f32::NEG_INFINITY; g * (cap + 1)];
        for r in 0..g {
            mask[r * (cap + 1)..r * (cap + 1) + t].fill(0.0);
            mask[r * (cap + 1) + cap] = 0.0;
        }
        inputs.insert(
            "mask".into(),
            Tensor::from_f32(&[g, cap + 1], mask).expect("sizes"),
        );
        let seq = Sequence {
            cache: Some(cache),
            inputs,
            cap,
            pos: t,
            last: first,
            sampling: *sampling,
            rng,
            history,
            compile_s,
            prefill_s,
            kv_cache_bytes: cache_len * 4,
        };
        Ok((seq, first))
    }

    /// One decode step of `seq`: returns its next token.
    ///
    /// # Errors
    /// The sequence's cache is full ([`Sequence::rows_left`] is 0), or a compile/run
    /// failure (the sequence is then unusable; drop it).
    pub fn next(&mut self, seq: &mut Sequence) -> Result<u32, LlamaError> {
        let m = self.model;
        let c = &m.config;
        let (cap, pos) = (seq.cap, seq.pos);
        if pos >= cap {
            return Err(model_err(format!(
                "the sequence filled its {cap} rows of KV cache"
            )));
        }
        let decode = self.graph(Stage::Decode { capacity: cap }, &mut seq.compile_s)?;
        let inputs = &mut seq.inputs;
        {
            let TensorData::F32(xv) = inputs.get_mut("x").expect("x").data_mut() else {
                unreachable!("f32")
            };
            m.embed(seq.last, xv)?;
        }
        set_rope(c, pos, inputs);
        let cache = seq
            .cache
            .take()
            .ok_or_else(|| LlamaError::Run("an earlier step of this sequence failed".into()))?;
        inputs.insert("kv_cache".into(), cache);
        let result = self.runner.run(decode, inputs);
        seq.cache = inputs.remove("kv_cache");
        let out = result.map_err(LlamaError::Run)?;
        let cache_mut = seq.cache.as_mut().expect("returned");
        let logits = write_rows(c, cache_mut, &out, pos, 1)?;
        let next = sample_with_history(logits, &seq.sampling, &mut seq.rng, &seq.history);
        seq.history.push(next);
        // the row just written becomes visible to the next step
        if let Some(TensorData::F32(mv)) = inputs.get_mut("mask").map(|t| t.data_mut()) {
            for r in 0..c.group() {
                mv[r * (cap + 1) + pos] = 0.0;
            }
        }
        seq.pos += 1;
        seq.last = next;
        Ok(next)
    }

    /// Generates up to `max_tokens` after `prompt` (token ids), calling `on_token` with each
    /// new id as soon as it is picked; stops early at a stop id. The KV cache holds
    /// `prompt.len() + max_tokens` rows and is allocated once.
    ///
    /// # Errors
    /// An empty prompt, a context beyond the model's, or a compile/run failure.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        max_tokens: usize,
        sampling: &Sampling,
        mut on_token: impl FnMut(u32),
    ) -> Result<GenerationStats, LlamaError> {
        let c = &self.model.config;
        let t = prompt.len();
        if t > 0 && t + max_tokens.max(1) > c.context {
            return Err(model_err(format!(
                "prompt ({t}) + max tokens ({max_tokens}) exceed the context of {}",
                c.context
            )));
        }
        let mut stats = GenerationStats {
            prompt_tokens: prompt.to_vec(),
            ..Default::default()
        };
        let (mut seq, first) = self.start(prompt, t + max_tokens.max(1), sampling)?;
        stats.prefill_s = seq.prefill_s;
        stats.kv_cache_bytes = seq.kv_cache_bytes;
        stats.tokens.push(first);
        on_token(first);
        if max_tokens > 1 && !self.stop_ids.contains(&first) {
            let start = Instant::now();
            let before = seq.compile_s;
            stats.step_s.reserve(max_tokens);
            while stats.tokens.len() < max_tokens {
                let step = Instant::now();
                let compiled = seq.compile_s;
                let next = self.next(&mut seq)?;
                stats.decode_steps += 1;
                // the first step compiles the decode graph: not a step's time
                let s = step.elapsed().as_secs_f64() - (seq.compile_s - compiled);
                stats.step_s.push(s);
                stats.tokens.push(next);
                on_token(next);
                if self.stop_ids.contains(&next) {
                    break;
                }
            }
            stats.decode_s = start.elapsed().as_secs_f64() - (seq.compile_s - before);
        }
        stats.compile_s = seq.compile_s;
        Ok(stats)
    }
}

impl Llama {
    /// The inputs of the prefill graph (`build_graph(Stage::Prefill { tokens })`) for
    /// `prompt` from position 0: embedded rows `x`, RoPE tables `cos`/`sin` and the causal
    /// `mask` of every query head group.
    ///
    /// # Errors
    /// A token outside the vocabulary.
    pub fn prefill_inputs(&self, prompt: &[u32]) -> Result<HashMap<String, Tensor>, LlamaError> {
        let c = &self.config;
        let (t, g) = (prompt.len(), c.group());
        let mut x = vec![0f32; t * c.hidden];
        for (i, &tok) in prompt.iter().enumerate() {
            self.embed(tok, &mut x[i * c.hidden..(i + 1) * c.hidden])?;
        }
        let (cos, sin) = rope_tables(c, 0, t);
        let mut mask = vec![f32::NEG_INFINITY; g * t * t];
        for r in 0..g * t {
            mask[r * t..r * t + r % t + 1].fill(0.0);
        }
        Ok(HashMap::from([
            (
                "x".to_string(),
                Tensor::from_f32(&[t, c.hidden], x).expect("sizes"),
            ),
            ("cos".to_string(), cos),
            ("sin".to_string(), sin),
            (
                "mask".to_string(),
                Tensor::from_f32(&[g * t, t], mask).expect("sizes"),
            ),
        ]))
    }
}

/// cos/sin tables `[n, 1, hd/2, 1]` for positions `start..start + n` (the `cos` and `sin`
/// inputs of the graphs [`Llama::build_graph`] builds), scaled by the attention factor.
pub fn rope_tables(c: &LlamaConfig, start: usize, n: usize) -> (Tensor, Tensor) {
    let half = c.head_dim / 2;
    let mut cos = Vec::with_capacity(n * half);
    let mut sin = Vec::with_capacity(n * half);
    for p in start..start + n {
        for i in 0..half {
            let theta = p as f64 * c.inv_freq(i);
            cos.push((theta.cos() * c.rope_attn_scale) as f32);
            sin.push((theta.sin() * c.rope_attn_scale) as f32);
        }
    }
    let shape = [n, 1, half, 1];
    (
        Tensor::from_f32(&shape, cos).expect("sizes"),
        Tensor::from_f32(&shape, sin).expect("sizes"),
    )
}

/// Overwrites the one-position cos/sin inputs in place for position `pos`.
fn set_rope(c: &LlamaConfig, pos: usize, inputs: &mut HashMap<String, Tensor>) {
    let half = c.head_dim / 2;
    for (name, f) in [("cos", f64::cos as fn(f64) -> f64), ("sin", f64::sin)] {
        if let Some(TensorData::F32(v)) = inputs.get_mut(name).map(|t| t.data_mut()) {
            for (i, x) in v.iter_mut().enumerate().take(half) {
                let theta = pos as f64 * c.inv_freq(i);
                *x = (f(theta) * c.rope_attn_scale) as f32;
            }
        }
    }
}

/// Writes the `n` new K/V rows of every layer at `pos..pos + n` of the cache; returns the
/// logits.
fn write_rows<'o>(
    c: &LlamaConfig,
    cache: &mut Tensor,
    out: &'o [(String, Tensor)],
    pos: usize,
    n: usize,
) -> Result<&'o [f32], LlamaError> {
    let cap = cache.shape()[3];
    let (hd, kvh) = (c.head_dim, c.kv_heads);
    let TensorData::F32(cv) = cache.data_mut() else {
        unreachable!("f32 cache")
    };
    let mut logits = None;
    for (name, t) in out {
        let v = t
            .as_f32()
            .ok_or_else(|| LlamaError::Run(format!("output {name} is not f32")))?;
        if name == "logits" {
            logits = Some(v);
            continue;
        }
        let (kind, layer) = name
            .split_once('.')
            .and_then(|(k, l)| Some((k, l.parse::<usize>().ok()?)))
            .ok_or_else(|| LlamaError::Run(format!("unexpected output {name}")))?;
        let which = usize::from(kind == "v");
        if v.len() != kvh * n * hd || layer >= c.layers {
            return Err(LlamaError::Run(format!(
                "output {name} has {} values",
                v.len()
            )));
        }
        for hh in 0..kvh {
            let dst = (((layer * 2 + which) * kvh + hh) * cap + pos) * hd;
            cv[dst..dst + n * hd].copy_from_slice(&v[hh * n * hd..(hh + 1) * n * hd]);
        }
    }
    logits.ok_or_else(|| LlamaError::Run("no logits output".into()))
}

/// Phi-3 longrope's attention factor (see [`LlamaConfig::longrope_factor`]).
pub(crate) fn longrope_attention_factor(context: usize, original: usize) -> f64 {
    let scale = context as f64 / original.max(1) as f64;
    if scale <= 1.0 || original < 2 {
        1.0
    } else {
        (1.0 + scale.ln() / (original as f64).ln()).sqrt()
    }
}
