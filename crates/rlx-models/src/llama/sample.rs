//! Random-weight Llama-family folders (Llama, Qwen2, Gemma, Phi-3) for tests and benchmarks,
//! in transformers' layout (its tensor names and config keys): `config.json`, one
//! `model.safetensors` in f32, f16 or bf16, and a word-level `tokenizer.json` whose words are
//! `w2`, `w3`, ... (ids 0 and 1 are `<unk>` and `</s>`, the end of sequence).

use rlx_ir::SplitMix64;
use std::path::Path;

/// Which transformers model a random folder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Family {
    /// `LlamaForCausalLM` (`Qwen2ForCausalLM` with [`RandomLlama::qkv_bias`])
    #[default]
    Llama,
    /// `GemmaForCausalLM`: GeGLU, scaled embeddings, norms stored as `w` of `1 + w`
    Gemma,
    /// `Phi3ForCausalLM`: fused `qkv_proj` and `gate_up_proj`
    Phi3,
}

/// The shape and storage of a random Llama-family folder.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomLlama {
    /// transformer blocks
    pub layers: usize,
    /// hidden size
    pub hidden: usize,
    /// query heads
    pub heads: usize,
    /// key/value heads
    pub kv_heads: usize,
    /// feed-forward size
    pub ffn: usize,
    /// vocabulary size (at least 2)
    pub vocab: usize,
    /// the LM head is the embedding
    pub tied: bool,
    /// `F32`, `F16` or `BF16`
    pub dtype: safetensors::Dtype,
    /// q/k/v biases: written as a Qwen2 folder (`model_type: qwen2`; Llama family only)
    pub qkv_bias: bool,
    /// the transformers model written
    pub family: Family,
    /// head size (None: `hidden / heads`; written to `config.json` when set, and always
    /// for Gemma)
    pub head_dim: Option<usize>,
    /// weight seed
    pub seed: u64,
}

impl Default for RandomLlama {
    fn default() -> Self {
        RandomLlama {
            layers: 2,
            hidden: 128,
            heads: 4,
            kv_heads: 2,
            ffn: 256,
            vocab: 256,
            tied: false,
            dtype: safetensors::Dtype::F32,
            qkv_bias: false,
            family: Family::Llama,
            head_dim: None,
            seed: 1,
        }
    }
}

impl RandomLlama {
    /// Writes the folder (created if missing). Projection weights are uniform in
    /// `±2 / sqrt(k)` so that logits spread and greedy choices are clear; norms near 1.
    ///
    /// # Errors
    /// The folder cannot be written, the dtype is not a float type, or q/k/v biases are
    /// asked of a Gemma or Phi-3 folder.
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        if self.qkv_bias && self.family != Family::Llama {
            return Err(std::io::Error::other(
                "q/k/v biases are written as Qwen2, a Llama-family folder only",
            ));
        }
        std::fs::create_dir_all(dir)?;
        let hd = self.head_dim.unwrap_or(self.hidden / self.heads);
        let (model_type, class) = match (self.family, self.qkv_bias) {
            (Family::Llama, false) => ("llama", "LlamaForCausalLM"),
            (Family::Llama, true) => ("qwen2", "Qwen2ForCausalLM"),
            (Family::Gemma, _) => ("gemma", "GemmaForCausalLM"),
            (Family::Phi3, _) => ("phi3", "Phi3ForCausalLM"),
        };
        let mut config = serde_json::json!({
            "model_type": model_type,
            "architectures": [class],
            "hidden_size": self.hidden,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "intermediate_size": self.ffn,
            "vocab_size": self.vocab,
            "tie_word_embeddings": self.tied,
            "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0,
            "max_position_embeddings": 1024,
            "bos_token_id": 0,
            "eos_token_id": 1,
        });
        let extra = match self.family {
            Family::Llama => serde_json::json!({"hidden_act": "silu"}),
            Family::Gemma => {
                serde_json::json!({"hidden_act": "gelu_pytorch_tanh", "pad_token_id": 0})
            }
            Family::Phi3 => serde_json::json!({
                "hidden_act": "silu",
                "pad_token_id": 0,
                "original_max_position_embeddings": 1024,
                "sliding_window": 1024,
                "rope_scaling": null,
            }),
        };
        let obj = config.as_object_mut().expect("an object");
        obj.extend(extra.as_object().expect("an object").clone());
        let dtype_name = match self.dtype {
            safetensors::Dtype::F16 => "float16",
            safetensors::Dtype::BF16 => "bfloat16",
            _ => "float32",
        };
        obj.insert("torch_dtype".into(), dtype_name.into());
        if self.head_dim.is_some() || self.family == Family::Gemma {
            obj.insert("head_dim".into(), hd.into());
        }
        std::fs::write(dir.join("config.json"), config.to_string())?;
        let (h, f, v) = (self.hidden, self.ffn, self.vocab);
        let mut shapes: Vec<(String, Vec<usize>)> = vec![
            ("model.embed_tokens.weight".into(), vec![v, h]),
            ("model.norm.weight".into(), vec![h]),
        ];
        if !self.tied {
            shapes.push(("lm_head.weight".into(), vec![v, h]));
        }
        for l in 0..self.layers {
            let p = |s: &str| format!("model.layers.{l}.{s}");
            shapes.push((p("input_layernorm.weight"), vec![h]));
            shapes.push((p("post_attention_layernorm.weight"), vec![h]));
            let (qd, kvd) = (self.heads * hd, self.kv_heads * hd);
            if self.family == Family::Phi3 {
                shapes.push((p("self_attn.qkv_proj.weight"), vec![qd + 2 * kvd, h]));
            } else {
                shapes.push((p("self_attn.q_proj.weight"), vec![qd, h]));
                shapes.push((p("self_attn.k_proj.weight"), vec![kvd, h]));
                shapes.push((p("self_attn.v_proj.weight"), vec![kvd, h]));
            }
            shapes.push((p("self_attn.o_proj.weight"), vec![h, qd]));
            if self.qkv_bias {
                shapes.push((p("self_attn.q_proj.bias"), vec![self.heads * hd]));
                shapes.push((p("self_attn.k_proj.bias"), vec![self.kv_heads * hd]));
                shapes.push((p("self_attn.v_proj.bias"), vec![self.kv_heads * hd]));
            }
            if self.family == Family::Phi3 {
                shapes.push((p("mlp.gate_up_proj.weight"), vec![2 * f, h]));
            } else {
                shapes.push((p("mlp.gate_proj.weight"), vec![f, h]));
                shapes.push((p("mlp.up_proj.weight"), vec![f, h]));
            }
            shapes.push((p("mlp.down_proj.weight"), vec![h, f]));
        }
        let mut rng = SplitMix64(self.seed);
        let dtype = self.dtype;
        // Gemma stores the w of its (1 + w) norms: near 0, so the factor is near 1 as well
        let norm_center = if self.family == Family::Gemma {
            0.0
        } else {
            1.0
        };
        let data: Vec<(String, Vec<usize>, Vec<u8>)> = shapes
            .into_iter()
            .map(|(name, shape)| {
                let count: usize = shape.iter().product();
                let bias = name.ends_with(".bias");
                let norm = shape.len() == 1 && !bias;
                let a = if norm || bias {
                    0.2
                } else {
                    2.0 / (shape[1] as f64).sqrt()
                };
                let values: Vec<f32> = (0..count)
                    .map(|_| {
                        let u = rng.next_f64() * 2.0 - 1.0;
                        (if norm { norm_center + a * u } else { a * u }) as f32
                    })
                    .collect();
                let bytes = match dtype {
                    safetensors::Dtype::F16 => values
                        .iter()
                        .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
                        .collect(),
                    safetensors::Dtype::BF16 => values
                        .iter()
                        .flat_map(|x| half::bf16::from_f32(*x).to_le_bytes())
                        .collect(),
                    _ => values.iter().flat_map(|x| x.to_le_bytes()).collect(),
                };
                (name, shape, bytes)
            })
            .collect();
        let views = data
            .iter()
            .map(|(n, s, b)| {
                safetensors::tensor::TensorView::new(dtype, s.clone(), b)
                    .map(|view| (n.clone(), view))
                    .map_err(|e| std::io::Error::other(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        safetensors::serialize_to_file(views, None, &dir.join("model.safetensors"))
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let mut vocab = serde_json::Map::new();
        vocab.insert("<unk>".into(), 0.into());
        vocab.insert("</s>".into(), 1.into());
        for i in 2..v {
            vocab.insert(format!("w{i}"), i.into());
        }
        let tokenizer = serde_json::json!({
            "version": "1.0",
            "model": {"type": "WordLevel", "unk_token": "<unk>", "vocab": vocab},
            "pre_tokenizer": {"type": "Whitespace"},
            "decoder": null,
        });
        std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string())
    }
}
