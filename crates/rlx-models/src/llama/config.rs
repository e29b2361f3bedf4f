//! A Llama-family model's hyper-parameters, read from GGUF metadata (Hugging Face folders: [`super::hf`]).

use super::{model_err, FfnAct, LlamaError};
use rlx_gguf::GgufFile;

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
    /// Phi-3 `longrope`'s long factors, which [`crate::llama::Llama::extend_context`] puts in
    /// place of the short ones for a context past the original (`context` above)
    pub rope_long: Option<LongRope>,
}

/// The long RoPE factors of a `longrope` model and the context they serve.
#[derive(Debug, Clone, PartialEq)]
pub struct LongRope {
    /// per-pair frequency divisors for contexts past the original one
    pub factors: Vec<f64>,
    /// the longest context they serve (`max_position_embeddings`)
    pub context: usize,
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
            rope_long: None,
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

/// Phi-3 longrope's attention factor (see [`LlamaConfig::longrope_factor`]).
pub(crate) fn longrope_attention_factor(context: usize, original: usize) -> f64 {
    let scale = context as f64 / original.max(1) as f64;
    if scale <= 1.0 || original < 2 {
        1.0
    } else {
        (1.0 + scale.ln() / (original as f64).ln()).sqrt()
    }
}
