//! The Llama family (SmolLM2, TinyLlama, Llama 3 shapes; Mistral, Qwen2, Gemma and Phi-3,
//! whose differences [`arch`] lists) from GGUF files or from Hugging Face folders (`config.json` + safetensors + `tokenizer.json`, see [`hf`]): config from the
//! `llama.*` metadata, weights kept packed (every projection is an [`rlx_ir::Op::QuantMatMul`] on
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
mod config;
pub mod export;
mod generate;
mod graph;
pub mod hf;
pub mod sample;
mod sampler;

pub use arch::FfnAct;
use config::longrope_attention_factor;
pub use config::{LlamaConfig, LongRope, GGUF_ARCHS};
pub use generate::{rope_tables, GenerationStats, Generator, Runner, Sequence, MAX_DECODE_BATCH};
pub use sampler::{kept_tokens, sample, sample_with_history, Sampling};

use rlx_gguf::{ChatTokenizer, GgufError, GgufFile, QuantFormat};
use rlx_ir::{Buffer, DType, Graph, IrError, NodeId, Tensor, TensorData};
use std::collections::HashMap;
use std::sync::Arc;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// the whole prompt at once: `tokens` positions, no cache input
    Prefill {
        /// prompt length
        tokens: usize,
    },
    /// one new token of each of `batch` sequences, each against its own cache of
    /// `capacity` rows: the products read every weight once for all of them
    Decode {
        /// cache rows of every sequence
        capacity: usize,
        /// sequences stepped together (at least 1)
        batch: usize,
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
            if f.tensor("rope_factors_long.weight").is_some() {
                let (shape, v) = f.dequantize("rope_factors_long.weight")?;
                if shape != [config.head_dim / 2] {
                    return Err(model_err(format!(
                        "rope_factors_long.weight has shape {shape:?}, expected [{}]",
                        config.head_dim / 2
                    )));
                }
                config.rope_long = Some(LongRope {
                    factors: v.iter().map(|&x| x as f64).collect(),
                    context: config.context,
                });
            }
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

    /// Lets the model run up to `context` rows per sequence where it was trained for more
    /// than its default context: a Phi-3 `longrope` model then takes its long RoPE factors
    /// in place of the short ones (as llama.cpp does for a context set past the original;
    /// transformers switches when a sequence grows past it). Capped at the trained context;
    /// a context within the default, or a model without long factors, changes nothing.
    pub fn extend_context(&mut self, context: usize) {
        let c = &mut self.config;
        if context <= c.context {
            return;
        }
        if let Some(long) = &c.rope_long {
            c.rope_freq_factors = Some(long.factors.clone());
            c.context = context.min(long.context).max(c.context);
        }
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
}
