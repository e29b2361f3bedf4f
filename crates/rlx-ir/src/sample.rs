//! Sample models with random weights, built once here for every backend's tests and
//! benchmarks: a BERT-shaped encoder (post-norm, exact GELU, no mask) whose weights come from
//! a fixed seed, so the CUDA and wgpu benchmarks and the PyTorch peer script all run the
//! same numbers.

use crate::{DType, Graph, IrError, NodeId, Shape, SplitMix64, Tensor, UnaryOp};
use std::collections::HashMap;
use std::sync::Arc;

/// The sizes of a BERT-shaped encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncoderShape {
    /// model width
    pub hidden: usize,
    /// encoder layers
    pub layers: usize,
    /// attention heads (dividing `hidden`)
    pub heads: usize,
    /// width of the feed-forward block
    pub ffn: usize,
    /// tokens per sequence
    pub seq: usize,
}

impl EncoderShape {
    /// all-MiniLM-L6-v2's shapes at 128 tokens: hidden 384, 6 layers, 12 heads, FFN 1536.
    pub const MINILM: EncoderShape = EncoderShape {
        hidden: 384,
        layers: 6,
        heads: 12,
        ffn: 1536,
        seq: 128,
    };
}

/// A graph with its params: input `hidden` `[batch, seq, hidden]`, output `out`.
pub struct SampleModel {
    /// the graph
    pub graph: Graph,
    /// every param by name
    pub params: HashMap<String, Arc<Tensor>>,
    /// param names in creation order (for dumping them in a stable order)
    pub order: Vec<String>,
}

impl SampleModel {
    /// A param of `dtype` drawn uniformly from `offset ± scale` (seeded by `seed`).
    fn weight(
        &mut self,
        name: String,
        shape: &[usize],
        (scale, offset): (f64, f64),
        dtype: DType,
        seed: &mut SplitMix64,
    ) -> NodeId {
        let r = Tensor::random(DType::F32, shape, seed.next_u64()).to_f64_vec();
        let v: Vec<f64> = r.into_iter().map(|v| v * scale + offset).collect();
        let t = Tensor::from_f64(dtype, shape, &v).expect("sizes match the shape");
        self.params.insert(name.clone(), Arc::new(t));
        self.order.push(name.clone());
        self.graph.param(&name, dtype, Shape::of(shape))
    }
}

/// Attention over heads split from one `[batch, seq, 3 * heads * dim]` projection, as
/// `rlx-models` builds BERT: q, k and v sliced from it, reshaped to heads and transposed to
/// `[batch, heads, seq, dim]`, attention (`mask` additive, else `causal` or none), and the
/// result merged back to `[batch, seq, heads * dim]` — the pattern whose transposed copies
/// `rlx-opt`'s `elide_views` kernel pass lets backends skip.
///
/// # Errors
/// Shapes that do not fit that pattern.
#[allow(clippy::too_many_arguments)]
pub fn head_split_attention(
    g: &mut Graph,
    qkv: NodeId,
    batch: usize,
    seq: usize,
    heads: usize,
    dim: usize,
    mask: Option<NodeId>,
    causal: bool,
) -> Result<NodeId, IrError> {
    let hidden = heads * dim;
    let mut split = |i: usize| {
        let part = g.slice(qkv, 2, (i * hidden) as i64, ((i + 1) * hidden) as i64, 1)?;
        let t = g.reshape(part, Shape::of(&[batch, seq, heads, dim]))?;
        g.transpose(t, &[0, 2, 1, 3])
    };
    let (q, k, v) = (split(0)?, split(1)?, split(2)?);
    let y = g.attention(q, k, v, mask, causal, None)?;
    let y = g.transpose(y, &[0, 2, 1, 3])?;
    g.reshape(y, Shape::of(&[batch, seq, hidden]))
}

/// The encoder for `batch` sequences in `dtype` (params and activations); the weights
/// depend only on the seed 42, not on the batch.
pub fn encoder(s: EncoderShape, batch: usize, dtype: DType) -> SampleModel {
    let mut m = SampleModel {
        graph: Graph::new(),
        params: HashMap::new(),
        order: Vec::new(),
    };
    let mut seed = SplitMix64(42);
    let (h, hd) = (s.hidden, s.hidden / s.heads);
    let mut x = m
        .graph
        .input("hidden", dtype, Shape::of(&[batch, s.seq, h]));
    let w_scale = (1.0 / (h as f64).sqrt(), 0.0);
    let (bias, gain) = ((0.02, 0.0), (0.1, 1.0));
    for l in 0..s.layers {
        let proj = |m: &mut SampleModel, seed: &mut SplitMix64, name: &str, x, k, n| {
            let w = m.weight(format!("l{l}.{name}.w"), &[k, n], w_scale, dtype, seed);
            let b = m.weight(format!("l{l}.{name}.b"), &[n], bias, dtype, seed);
            let y = m.graph.matmul(x, w).expect("encoder shapes");
            m.graph.add(y, b).expect("encoder shapes")
        };
        let heads = |m: &mut SampleModel, y: NodeId| {
            let y = m
                .graph
                .reshape(y, Shape::of(&[batch, s.seq, s.heads, hd]))
                .expect("encoder shapes");
            m.graph.transpose(y, &[0, 2, 1, 3]).expect("encoder shapes")
        };
        let q = proj(&mut m, &mut seed, "q", x, h, h);
        let q = heads(&mut m, q);
        let k = proj(&mut m, &mut seed, "k", x, h, h);
        let k = heads(&mut m, k);
        let v = proj(&mut m, &mut seed, "v", x, h, h);
        let v = heads(&mut m, v);
        let a = m
            .graph
            .attention(q, k, v, None, false, None)
            .expect("shapes");
        let a = m.graph.transpose(a, &[0, 2, 1, 3]).expect("shapes");
        let a = m
            .graph
            .reshape(a, Shape::of(&[batch, s.seq, h]))
            .expect("encoder shapes");
        let o = proj(&mut m, &mut seed, "o", a, h, h);
        let r = m.graph.add(o, x).expect("encoder shapes");
        let g1 = m.weight(format!("l{l}.ln1.g"), &[h], gain, dtype, &mut seed);
        let b1 = m.weight(format!("l{l}.ln1.b"), &[h], bias, dtype, &mut seed);
        let hid = m.graph.layer_norm(r, g1, b1, 1e-12).expect("shapes");
        let f = proj(&mut m, &mut seed, "ffn1", hid, h, s.ffn);
        let f = m.graph.unary(UnaryOp::GELU, f).expect("encoder shapes");
        let f = proj(&mut m, &mut seed, "ffn2", f, s.ffn, h);
        let r = m.graph.add(f, hid).expect("encoder shapes");
        let g2 = m.weight(format!("l{l}.ln2.g"), &[h], gain, dtype, &mut seed);
        let b2 = m.weight(format!("l{l}.ln2.b"), &[h], bias, dtype, &mut seed);
        x = m
            .graph
            .layer_norm(r, g2, b2, 1e-12)
            .expect("encoder shapes");
    }
    m.graph.output("out", x);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoder_weights_do_not_depend_on_the_batch() {
        let tiny = EncoderShape {
            hidden: 8,
            layers: 2,
            heads: 2,
            ffn: 16,
            seq: 3,
        };
        let a = encoder(tiny, 1, DType::F32);
        let b = encoder(tiny, 4, DType::F16);
        assert_eq!(a.order, b.order);
        assert_eq!(a.order.len(), 2 * 16);
        let (wa, wb) = (&a.params["l1.ffn1.w"], &b.params["l1.ffn1.w"]);
        assert_eq!(wa.shape(), &[8, 16]);
        let diff = wa
            .to_f64_vec()
            .iter()
            .zip(wb.to_f64_vec())
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max);
        assert!(diff < 1e-3, "f16 rounding only: {diff}");
        b.graph.verify().expect("the graph checks");
    }
}
