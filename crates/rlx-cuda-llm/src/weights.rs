//! A model's weights on the device, uploaded once in their stored format: every projection
//! is the file's own rows (f32, f16, bf16 or GGML blocks), q/k/v and gate/up concatenated
//! into one matrix when their formats agree (one launch each), norms as f32.

use crate::LlmError;
use rlx_cuda::device::CudaDevice;
use rlx_cuda::memory::{DeviceBuffer, DeviceMemory};
use rlx_gguf::QuantFormat;
use rlx_ir::TensorData;
use rlx_models::llama::Llama;
use std::sync::Arc;

/// Rows of one stored-format matrix on the device.
pub struct Matrix {
    /// the bytes
    pub buf: DeviceBuffer,
    /// the stored format
    pub format: QuantFormat,
    /// output rows
    pub n: usize,
    /// values per row
    pub k: usize,
}

impl Matrix {
    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.format.bytes_for(self.k).unwrap_or(0)
    }
}

/// A matrix that computes rows `row0..row0 + n` of a launch's output space.
pub struct Part {
    /// the rows
    pub matrix: Matrix,
    /// first output row
    pub row0: usize,
}

/// One transformer block's weights.
pub struct Layer {
    /// RMSNorm weight before attention
    pub attn_norm: DeviceBuffer,
    /// RMSNorm weight before the feed-forward
    pub ffn_norm: DeviceBuffer,
    /// q, k and v rows (one part when their formats agree)
    pub qkv: Vec<Part>,
    /// q/k/v biases (Qwen2), f32 `[qd + 2 kvd]` (q and k in the rows' RoPE order)
    pub qkv_bias: Option<DeviceBuffer>,
    /// the attention output projection
    pub o: Matrix,
    /// gate and up rows (one part when their formats agree)
    pub gate_up: Vec<Part>,
    /// the down projection
    pub down: Matrix,
}

/// Every weight of a model on the device.
pub struct Weights {
    /// token embedding (rows looked up on the device)
    pub embed: Matrix,
    /// LM head; None when tied to the embedding
    pub head: Option<Matrix>,
    /// the final RMSNorm weight
    pub out_norm: DeviceBuffer,
    /// the blocks
    pub layers: Vec<Layer>,
    /// RoPE frequencies `[head_dim / 2]` (Llama 3 scaling applied)
    pub inv_freq: DeviceBuffer,
    /// bytes uploaded
    pub bytes: usize,
}

impl Weights {
    /// The LM head (the embedding when tied).
    pub fn head(&self) -> &Matrix {
        self.head.as_ref().unwrap_or(&self.embed)
    }

    /// Every matrix a product reads: each layer's q/k/v, output, gate/up and down
    /// projections, and the LM head.
    pub fn matrices(&self) -> impl Iterator<Item = &Matrix> {
        self.layers
            .iter()
            .flat_map(|l| {
                l.qkv
                    .iter()
                    .chain(&l.gate_up)
                    .map(|p| &p.matrix)
                    .chain([&l.o, &l.down])
            })
            .chain([self.head()])
    }
}

struct Uploader<'a> {
    dev: &'a CudaDevice,
    mem: &'a Arc<DeviceMemory>,
    model: &'a Llama,
    bytes: usize,
}

/// A projection's packed bytes, format, rows and values per row.
fn packed<'m>(
    model: &'m Llama,
    name: &str,
) -> Result<(&'m [u8], QuantFormat, usize, usize), LlmError> {
    {
        let (format, n, k) = model
            .linear(name)
            .ok_or_else(|| LlmError::Model(format!("no projection weight `{name}`")))?;
        let t = model
            .param(name)
            .ok_or_else(|| LlmError::Model(format!("no weight `{name}`")))?;
        let TensorData::U8(b) = t.data() else {
            return Err(LlmError::Model(format!("`{name}` is not packed bytes")));
        };
        if !k.is_multiple_of(8) {
            return Err(LlmError::Model(format!(
                "`{name}` has rows of {k} values; the CUDA kernels need a multiple of 8"
            )));
        }
        Ok((&b[..], format, n, k))
    }
}

impl Uploader<'_> {
    fn upload(&mut self, bytes: &[u8]) -> Result<DeviceBuffer, LlmError> {
        let buf = self.mem.alloc(bytes.len())?;
        self.dev.upload(buf.ptr(), bytes)?;
        self.bytes += bytes.len();
        Ok(buf)
    }

    fn matrix(&mut self, name: &str) -> Result<Matrix, LlmError> {
        let (b, format, n, k) = packed(self.model, name)?;
        let buf = self.upload(b)?;
        Ok(Matrix { buf, format, n, k })
    }

    /// Projections whose outputs are consecutive: one matrix when the formats agree,
    /// else one part each.
    fn parts(&mut self, names: &[String]) -> Result<Vec<Part>, LlmError> {
        let mut found = Vec::new();
        for name in names {
            found.push(packed(self.model, name)?);
        }
        let same = found
            .windows(2)
            .all(|w| w[0].1 == w[1].1 && w[0].3 == w[1].3);
        if same {
            let total: usize = found.iter().map(|f| f.0.len()).sum();
            let buf = self.mem.alloc(total)?;
            let mut at = 0u64;
            for f in &found {
                self.dev.upload(buf.ptr() + at, f.0)?;
                at += f.0.len() as u64;
            }
            self.bytes += total;
            let (format, k) = (found[0].1, found[0].3);
            let n = found.iter().map(|f| f.2).sum();
            return Ok(vec![Part {
                matrix: Matrix { buf, format, n, k },
                row0: 0,
            }]);
        }
        let mut parts = Vec::new();
        let mut row0 = 0;
        for name in names {
            let matrix = self.matrix(name)?;
            let n = matrix.n;
            parts.push(Part { matrix, row0 });
            row0 += n;
        }
        Ok(parts)
    }

    fn f32s(&mut self, name: &str, len: usize) -> Result<DeviceBuffer, LlmError> {
        let t = self
            .model
            .param(name)
            .ok_or_else(|| LlmError::Model(format!("no weight `{name}`")))?;
        let v = t
            .as_f32()
            .ok_or_else(|| LlmError::Model(format!("`{name}` is not f32")))?;
        if v.len() != len {
            return Err(LlmError::Model(format!(
                "`{name}` has {} values, expected {len}",
                v.len()
            )));
        }
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.upload(&bytes)
    }
}

/// Uploads a model's weights (synchronously: the stream is drained before returning, so the
/// host copies may be dropped).
///
/// # Errors
/// A missing or malformed weight, or out of device memory.
pub fn upload(
    dev: &CudaDevice,
    mem: &Arc<DeviceMemory>,
    model: &Llama,
) -> Result<Weights, LlmError> {
    let c = &model.config;
    let mut u = Uploader {
        dev,
        mem,
        model,
        bytes: 0,
    };
    let embed = u.matrix("token_embd.weight")?;
    let head = if model.head_name() == "token_embd.weight" {
        None
    } else {
        Some(u.matrix(model.head_name())?)
    };
    let out_norm = u.f32s("output_norm.weight", c.hidden)?;
    let (qd, kvd) = (c.heads * c.head_dim, c.kv_heads * c.head_dim);
    let mut layers = Vec::with_capacity(c.layers);
    for l in 0..c.layers {
        let p = |s: &str| format!("blk.{l}.{s}.weight");
        let qkv = u.parts(&[p("attn_q"), p("attn_k"), p("attn_v")])?;
        let qkv_bias = if c.qkv_bias {
            let mut all = Vec::with_capacity(qd + 2 * kvd);
            for (s, len) in [("attn_q", qd), ("attn_k", kvd), ("attn_v", kvd)] {
                let name = format!("blk.{l}.{s}.bias");
                let v = model
                    .param(&name)
                    .and_then(|t| t.as_f32())
                    .filter(|v| v.len() == len)
                    .ok_or_else(|| LlmError::Model(format!("no f32 bias `{name}` of {len}")))?;
                all.extend(v.iter().flat_map(|x| x.to_le_bytes()));
            }
            Some(u.upload(&all)?)
        } else {
            None
        };
        layers.push(Layer {
            attn_norm: u.f32s(&p("attn_norm"), c.hidden)?,
            ffn_norm: u.f32s(&p("ffn_norm"), c.hidden)?,
            qkv,
            qkv_bias,
            o: u.matrix(&p("attn_output"))?,
            gate_up: u.parts(&[p("ffn_gate"), p("ffn_up")])?,
            down: u.matrix(&p("ffn_down"))?,
        });
    }
    let inv: Vec<u8> = (0..c.head_dim / 2)
        .flat_map(|i| (c.inv_freq(i) as f32).to_le_bytes())
        .collect();
    let inv_freq = u.upload(&inv)?;
    dev.sync()?;
    Ok(Weights {
        embed,
        head,
        out_norm,
        layers,
        inv_freq,
        bytes: u.bytes,
    })
}
