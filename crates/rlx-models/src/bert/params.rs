//! Which params the BERT graph declares, and how each is made from the checkpoint's tensors.
//!
//! The graph takes linear weights as `[in, out]` (so a projection is `x @ w`, one GEMM with
//! no transposed operand) and the query, key and value projections of a layer as one
//! `[hidden, 3 * hidden]` matrix (one GEMM instead of three). Both are re-laid out once at
//! load, while copying out of the memory map; every other tensor keeps its checkpoint name
//! and layout.

use crate::config::BertConfig;
use crate::error::Result;
use crate::weights::Weights;
use rlx_ir::{Buffer, DType, Tensor, TensorData};

/// How one graph param is made from checkpoint tensors (names without the prefix).
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// the tensor as stored
    Copy(String),
    /// a `[out, in]` linear weight, transposed to `[in, out]`
    Transpose(String),
    /// `[out_i, in]` weights transposed and concatenated along the output: `[in, sum out_i]`
    ConcatTransposed(Vec<String>),
    /// `[n_i]` biases concatenated: `[sum n_i]`
    Concat(Vec<String>),
}

/// One param of the graph: its name, shape (f32) and where it comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamSpec {
    /// the graph's param name
    pub name: String,
    /// its shape
    pub shape: Vec<usize>,
    /// how it is made
    pub source: Source,
}

fn copy(name: &str, shape: &[usize]) -> ParamSpec {
    ParamSpec {
        name: name.into(),
        shape: shape.to_vec(),
        source: Source::Copy(name.into()),
    }
}

fn linear_t(name: &str, inp: usize, out: usize) -> ParamSpec {
    ParamSpec {
        name: format!("{name}.weight_t"),
        shape: vec![inp, out],
        source: Source::Transpose(format!("{name}.weight")),
    }
}

/// Param names of layer `l` (graph names), in the order the builder uses them.
pub struct LayerNames {
    /// fused q|k|v weight `[h, 3h]` and bias `[3h]`
    pub qkv_w: String,
    /// fused bias
    pub qkv_b: String,
    /// attention output projection `[h, h]` and bias
    pub out_w: String,
    /// bias
    pub out_b: String,
    /// LayerNorm after attention: scale, bias
    pub ln1_g: String,
    /// bias
    pub ln1_b: String,
    /// feed-forward in `[h, ff]`, bias
    pub ff1_w: String,
    /// bias
    pub ff1_b: String,
    /// feed-forward out `[ff, h]`, bias
    pub ff2_w: String,
    /// bias
    pub ff2_b: String,
    /// LayerNorm after the feed-forward: scale, bias
    pub ln2_g: String,
    /// bias
    pub ln2_b: String,
}

impl LayerNames {
    /// The names for layer `l`.
    pub fn new(l: usize) -> LayerNames {
        let p = format!("encoder.layer.{l}.");
        LayerNames {
            qkv_w: format!("{p}attention.self.qkv.weight_t"),
            qkv_b: format!("{p}attention.self.qkv.bias"),
            out_w: format!("{p}attention.output.dense.weight_t"),
            out_b: format!("{p}attention.output.dense.bias"),
            ln1_g: format!("{p}attention.output.LayerNorm.weight"),
            ln1_b: format!("{p}attention.output.LayerNorm.bias"),
            ff1_w: format!("{p}intermediate.dense.weight_t"),
            ff1_b: format!("{p}intermediate.dense.bias"),
            ff2_w: format!("{p}output.dense.weight_t"),
            ff2_b: format!("{p}output.dense.bias"),
            ln2_g: format!("{p}output.LayerNorm.weight"),
            ln2_b: format!("{p}output.LayerNorm.bias"),
        }
    }
}

/// Embedding tables and their LayerNorm.
pub const WORD: &str = "embeddings.word_embeddings.weight";
/// position table `[max_position_embeddings, hidden]`
pub const POSITION: &str = "embeddings.position_embeddings.weight";
/// token-type table `[type_vocab_size, hidden]`
pub const TOKEN_TYPE: &str = "embeddings.token_type_embeddings.weight";
/// embedding LayerNorm scale
pub const EMB_LN_G: &str = "embeddings.LayerNorm.weight";
/// embedding LayerNorm bias
pub const EMB_LN_B: &str = "embeddings.LayerNorm.bias";

/// Every param of the graph for `cfg`, in declaration order.
pub fn specs(cfg: &BertConfig) -> Vec<ParamSpec> {
    let (h, ff) = (cfg.hidden_size, cfg.intermediate_size);
    let mut v = vec![
        copy(WORD, &[cfg.vocab_size, h]),
        copy(POSITION, &[cfg.max_position_embeddings, h]),
        copy(TOKEN_TYPE, &[cfg.type_vocab_size, h]),
        copy(EMB_LN_G, &[h]),
        copy(EMB_LN_B, &[h]),
    ];
    for l in 0..cfg.num_hidden_layers {
        let p = format!("encoder.layer.{l}.");
        let n = LayerNames::new(l);
        let qkv = ["query", "key", "value"];
        v.push(ParamSpec {
            name: n.qkv_w,
            shape: vec![h, 3 * h],
            source: Source::ConcatTransposed(
                qkv.iter()
                    .map(|s| format!("{p}attention.self.{s}.weight"))
                    .collect(),
            ),
        });
        v.push(ParamSpec {
            name: n.qkv_b,
            shape: vec![3 * h],
            source: Source::Concat(
                qkv.iter()
                    .map(|s| format!("{p}attention.self.{s}.bias"))
                    .collect(),
            ),
        });
        v.push(linear_t(&format!("{p}attention.output.dense"), h, h));
        v.push(copy(&n.out_b, &[h]));
        v.push(copy(&n.ln1_g, &[h]));
        v.push(copy(&n.ln1_b, &[h]));
        v.push(linear_t(&format!("{p}intermediate.dense"), h, ff));
        v.push(copy(&n.ff1_b, &[ff]));
        v.push(linear_t(&format!("{p}output.dense"), ff, h));
        v.push(copy(&n.ff2_b, &[h]));
        v.push(copy(&n.ln2_g, &[h]));
        v.push(copy(&n.ln2_b, &[h]));
    }
    v
}

/// The prefix the checkpoint puts before BERT's own names: none (a bare `BertModel`, as
/// sentence-transformers saves it) or `bert.` (a model with a task head).
pub fn detect_prefix(w: &Weights) -> &'static str {
    if !w.contains(WORD) && w.contains(&format!("bert.{WORD}")) {
        "bert."
    } else {
        ""
    }
}

/// Makes every param from the checkpoint.
///
/// # Errors
/// A missing tensor (named, with the shape expected) or one of the wrong shape or dtype.
pub fn load(w: &Weights, cfg: &BertConfig) -> Result<Vec<(String, Tensor)>> {
    let prefix = detect_prefix(w);
    // kept as the loaded buffer: borrowed from the file map when the checkpoint is f32
    let get = |name: &str, shape: &[usize]| -> Result<Buffer<f32>> {
        let t = w.tensor(&format!("{prefix}{name}"), DType::F32, shape)?;
        match t.into_data() {
            TensorData::F32(v) => Ok(v),
            _ => unreachable!("asked for f32"),
        }
    };
    let mut out = Vec::new();
    for spec in specs(cfg) {
        let data = match &spec.source {
            Source::Copy(n) => get(n, &spec.shape)?,
            Source::Transpose(n) => {
                let (inp, outd) = (spec.shape[0], spec.shape[1]);
                transpose(&get(n, &[outd, inp])?, outd, inp).into()
            }
            Source::ConcatTransposed(names) => {
                let inp = spec.shape[0];
                let part = spec.shape[1] / names.len();
                let mut parts = Vec::with_capacity(names.len());
                for n in names {
                    parts.push(transpose(&get(n, &[part, inp])?, part, inp));
                }
                interleave_cols(&parts, inp, part).into()
            }
            Source::Concat(names) => {
                let part = spec.shape[0] / names.len();
                let mut v = Vec::with_capacity(spec.shape[0]);
                for n in names {
                    v.extend_from_slice(&get(n, &[part])?);
                }
                v.into()
            }
        };
        let t = Tensor::new(spec.shape.clone(), TensorData::F32(data))
            .expect("sizes follow from the spec");
        out.push((spec.name, t));
    }
    Ok(out)
}

/// `[rows, cols]` → `[cols, rows]`.
fn transpose(a: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0.0f32; a.len()];
    // Blocked, so both sides stay in cache for the 1536-wide matrices.
    const B: usize = 32;
    for i0 in (0..rows).step_by(B) {
        for j0 in (0..cols).step_by(B) {
            for i in i0..(i0 + B).min(rows) {
                for j in j0..(j0 + B).min(cols) {
                    t[j * rows + i] = a[i * cols + j];
                }
            }
        }
    }
    t
}

/// Several `[rows, part]` matrices side by side: `[rows, parts * part]`.
fn interleave_cols(parts: &[Vec<f32>], rows: usize, part: usize) -> Vec<f32> {
    let width = part * parts.len();
    let mut out = vec![0.0f32; rows * width];
    for (p, m) in parts.iter().enumerate() {
        for r in 0..rows {
            out[r * width + p * part..r * width + (p + 1) * part]
                .copy_from_slice(&m[r * part..(r + 1) * part]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpose_and_interleave() {
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        assert_eq!(transpose(&a, 2, 3), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        let p = vec![vec![1.0, 2.0], vec![3.0, 4.0]];
        assert_eq!(interleave_cols(&p, 2, 1), vec![1.0, 3.0, 2.0, 4.0]);
    }
}
