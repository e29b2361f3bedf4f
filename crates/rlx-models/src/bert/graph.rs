//! The BERT encoder as an IR graph, with symbolic `batch` and `seq`.
//!
//! Inputs (all i64 `[batch, seq]`): `input_ids`, `attention_mask` (1 = token, 0 = padding),
//! `token_type_ids`, `position_ids`. Per layer, as Hugging Face's `BertLayer` computes it:
//! fused q|k|v projection, scaled dot-product attention with the additive mask
//! `(1 - mask) * f32::MIN` over keys, output projection, residual + LayerNorm, feed-forward
//! with the configured activation (exact-erf GELU for `gelu`), residual + LayerNorm; eps
//! from the config. Outputs: `sentence_embedding` (mean over real tokens, then L2
//! normalised, as sentence-transformers' Pooling + Normalize) and, on request,
//! `last_hidden_state`.

use super::params::{self, LayerNames};
use crate::config::BertConfig;
use rlx_ir::{BinaryOp, DType, Dim, Graph, IrError, NodeId, ReduceOp, Shape};

/// Input: token ids.
pub const INPUT_IDS: &str = "input_ids";
/// Input: 1 for real tokens, 0 for padding.
pub const ATTENTION_MASK: &str = "attention_mask";
/// Input: segment ids (0 for single sentences).
pub const TOKEN_TYPE_IDS: &str = "token_type_ids";
/// Input: positions, `0..seq` per row.
pub const POSITION_IDS: &str = "position_ids";
/// Output: pooled, normalised embeddings `[batch, hidden]`.
pub const SENTENCE_EMBEDDING: &str = "sentence_embedding";
/// Output: the encoder's last hidden state `[batch, seq, hidden]`.
pub const LAST_HIDDEN_STATE: &str = "last_hidden_state";

/// Which outputs the graph has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BertOutputs {
    /// `sentence_embedding`: masked mean pooling + L2 normalisation
    pub sentence_embedding: bool,
    /// `last_hidden_state`
    pub last_hidden_state: bool,
}

impl Default for BertOutputs {
    fn default() -> Self {
        BertOutputs {
            sentence_embedding: true,
            last_hidden_state: false,
        }
    }
}

/// Builds the encoder graph for `cfg`. Params are declared with the names and shapes of
/// [`params::specs`].
///
/// # Errors
/// An invalid config (see [`BertConfig::check`]) or an inference failure (a builder bug).
pub fn build(cfg: &BertConfig, outputs: BertOutputs) -> Result<Graph, IrError> {
    cfg.check().map_err(|message| IrError::Infer {
        node: "config".into(),
        op: "bert",
        inputs: String::new(),
        message,
    })?;
    let mut b = Builder {
        g: Graph::new(),
        cfg,
    };
    let act = cfg.activation().expect("checked above");
    let h = cfg.hidden_size;
    let (batch, seq) = (Dim::sym("batch"), Dim::sym("seq"));
    let bs = Shape(vec![batch.clone(), seq.clone()]);
    let ids = b.g.input(INPUT_IDS, DType::I64, bs.clone());
    let mask = b.g.input(ATTENTION_MASK, DType::I64, bs.clone());
    let types = b.g.input(TOKEN_TYPE_IDS, DType::I64, bs.clone());
    let pos = b.g.input(POSITION_IDS, DType::I64, bs);
    for spec in params::specs(cfg) {
        b.g.param(&spec.name, DType::F32, Shape::of(&spec.shape));
    }

    // Embeddings: word + position + token type, LayerNorm.
    let word = b.gather(params::WORD, ids, "embeddings.word")?;
    let posv = b.gather(params::POSITION, pos, "embeddings.position")?;
    let typev = b.gather(params::TOKEN_TYPE, types, "embeddings.token_type")?;
    let x = b.g.add(word, posv)?;
    let x = b.g.add(x, typev)?;
    let mut x = b.layer_norm(x, params::EMB_LN_G, params::EMB_LN_B, "embeddings.ln")?;

    // Additive mask over keys, [batch, 1, 1, seq]: 0 where attended, f32::MIN where not.
    let maskf = b.g.cast(mask, DType::F32)?;
    let m4 = b.g.reshape(
        maskf,
        Shape(vec![batch.clone(), 1.into(), 1.into(), seq.clone()]),
    )?;
    let one = b.g.scalar(DType::F32, 1.0);
    let minv = b.g.scalar(DType::F32, f32::MIN as f64);
    let inv = b.g.sub(one, m4)?;
    let bias = b.g.mul(inv, minv)?;
    b.g.set_name(bias, "attention_mask.additive");

    let (nh, dh) = (cfg.num_attention_heads, cfg.head_dim());
    for l in 0..cfg.num_hidden_layers {
        let n = LayerNames::new(l);
        let tag = |s: &str| format!("layer{l}.{s}");
        let qkv = b.linear(x, &n.qkv_w, &n.qkv_b, &tag("qkv"))?;
        let heads = |b: &mut Builder<'_>, i: usize, name: &str| -> Result<NodeId, IrError> {
            let part = b.g.slice(qkv, 2, (i * h) as i64, ((i + 1) * h) as i64, 1)?;
            let split = b.g.reshape(
                part,
                Shape(vec![batch.clone(), seq.clone(), nh.into(), dh.into()]),
            )?;
            let t = b.g.transpose(split, &[0, 2, 1, 3])?;
            b.g.set_name(t, tag(name));
            Ok(t)
        };
        let q = heads(&mut b, 0, "q")?;
        let k = heads(&mut b, 1, "k")?;
        let v = heads(&mut b, 2, "v")?;
        let a = b.g.attention(q, k, v, Some(bias), false, None)?;
        b.g.set_name(a, tag("attention"));
        let a = b.g.transpose(a, &[0, 2, 1, 3])?;
        let a =
            b.g.reshape(a, Shape(vec![batch.clone(), seq.clone(), h.into()]))?;
        let o = b.linear(a, &n.out_w, &n.out_b, &tag("attention.out"))?;
        let r = b.g.add(o, x)?;
        x = b.layer_norm(r, &n.ln1_g, &n.ln1_b, &tag("ln1"))?;
        let f = b.linear(x, &n.ff1_w, &n.ff1_b, &tag("ffn.in"))?;
        let f = b.g.unary(act, f)?;
        let f = b.linear(f, &n.ff2_w, &n.ff2_b, &tag("ffn.out"))?;
        let r = b.g.add(f, x)?;
        x = b.layer_norm(r, &n.ln2_g, &n.ln2_b, &tag("ln2"))?;
    }

    if outputs.last_hidden_state {
        b.g.output(LAST_HIDDEN_STATE, x);
    }
    if outputs.sentence_embedding || !outputs.last_hidden_state {
        let m3 = b.g.reshape(maskf, Shape(vec![batch, seq, 1.into()]))?;
        let masked = b.g.mul(x, m3)?;
        let summed = b.g.reduce(ReduceOp::Sum, masked, &[1], false)?;
        b.g.set_name(summed, "pool.sum");
        let count = b.g.reduce(ReduceOp::Sum, m3, &[1], false)?;
        let tiny = b.g.scalar(DType::F32, 1e-9);
        let count = b.g.binary(BinaryOp::Max, count, tiny)?;
        let mean = b.g.div(summed, count)?;
        let sq = b.g.mul(mean, mean)?;
        let ss = b.g.reduce(ReduceOp::Sum, sq, &[1], true)?;
        let norm = b.g.unary(rlx_ir::UnaryOp::Sqrt, ss)?;
        let eps = b.g.scalar(DType::F32, 1e-12);
        let norm = b.g.binary(BinaryOp::Max, norm, eps)?;
        let emb = b.g.div(mean, norm)?;
        b.g.set_name(emb, "pool.normalize");
        b.g.output(SENTENCE_EMBEDDING, emb);
    }
    b.g.verify()?;
    Ok(b.g)
}

struct Builder<'c> {
    g: Graph,
    cfg: &'c BertConfig,
}

impl Builder<'_> {
    /// The param node declared under `name`.
    fn param(&self, name: &str) -> NodeId {
        self.g
            .params()
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, id)| id)
            .expect("every param is declared from the specs first")
    }

    fn gather(&mut self, table: &str, ids: NodeId, name: &str) -> Result<NodeId, IrError> {
        let t = self.param(table);
        let y = self.g.gather(t, ids, 0)?;
        self.g.set_name(y, name);
        Ok(y)
    }

    fn layer_norm(&mut self, x: NodeId, g: &str, b: &str, name: &str) -> Result<NodeId, IrError> {
        let (g, b) = (self.param(g), self.param(b));
        let y = self.g.layer_norm(x, g, b, self.cfg.layer_norm_eps)?;
        self.g.set_name(y, name);
        Ok(y)
    }

    /// `x @ w + b` with `w` stored `[in, out]`.
    fn linear(&mut self, x: NodeId, w: &str, b: &str, name: &str) -> Result<NodeId, IrError> {
        let (w, b) = (self.param(w), self.param(b));
        let y = self.g.matmul(x, w)?;
        self.g.set_name(y, name);
        self.g.add(y, b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn tiny() -> BertConfig {
        serde_json::from_str(
            r#"{"vocab_size": 20, "hidden_size": 8, "num_hidden_layers": 2,
                "num_attention_heads": 2, "intermediate_size": 16,
                "max_position_embeddings": 12, "layer_norm_eps": 1e-5}"#,
        )
        .expect("parses")
    }

    #[test]
    fn builds_a_typed_graph_with_symbolic_batch_and_seq() {
        let g = build(&tiny(), BertOutputs::default()).expect("builds");
        assert_eq!(g.symbols(), vec!["batch".to_string(), "seq".to_string()]);
        let inputs: Vec<String> = g.inputs().into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            inputs,
            [INPUT_IDS, ATTENTION_MASK, TOKEN_TYPE_IDS, POSITION_IDS]
        );
        assert_eq!(g.params().len(), params::specs(&tiny()).len());
        let (name, out) = &g.outputs()[0];
        assert_eq!(name, SENTENCE_EMBEDDING);
        assert_eq!(g.ty(*out).to_string(), "f32[batch,8]");
        let both = BertOutputs {
            sentence_embedding: true,
            last_hidden_state: true,
        };
        let g = build(&tiny(), both).expect("builds");
        assert_eq!(g.outputs().len(), 2);
        assert!(g.to_string().contains("eps=1e-5"));
    }
}
