//! The prefill and decode graphs of a [`Llama`].

use super::{model_err, FfnAct, Llama, LlamaError, ParamFn, Stage};
use rlx_ir::{BinaryOp, DType, Graph, NodeId, Op, UnaryOp};
use std::collections::HashMap;

impl Llama {
    /// Builds the prefill or decode graph.
    ///
    /// Inputs: `x` f32 `[T, hidden]` (embeddings; for decode one row per sequence),
    /// `cos`/`sin` f32 `[T, 1, head_dim/2, 1]` (each row's position), `mask` f32 `[g*T, S]`
    /// (additive; `S = T` for prefill, `capacity + 1` for decode, rows `g*b..g*(b+1)` those of
    /// sequence `b`) and, for decode, `kv_cache.B` f32 `[layers, 2, kv_heads, capacity,
    /// head_dim]`, sequence `B`'s cache. Outputs: `logits` `[1, vocab]` of the last prompt
    /// position (prefill) or `[batch, vocab]` (decode), and per layer `k.L`, `v.L`
    /// `[kv_heads, T, head_dim]`, the rows to append to the caches (decode: row `b` to
    /// sequence `b`'s).
    ///
    /// # Errors
    /// An inconsistency in the weights' shapes (named by the IR).
    pub fn build_graph(&self, stage: Stage) -> Result<Graph, LlamaError> {
        let c = &self.config;
        // t rows: the prompt's positions, or one per sequence of a decode step
        let (t, past) = match stage {
            Stage::Prefill { tokens } => (tokens, None),
            Stage::Decode { capacity, batch } => (batch, Some(capacity)),
        };
        if t == 0 {
            return Err(model_err(match stage {
                Stage::Prefill { .. } => "an empty prompt",
                Stage::Decode { .. } => "a decode step of no sequences",
            }));
        }
        let (hd, kvh, h, g) = (c.head_dim, c.kv_heads, c.heads, c.group());
        let s = past.map_or(t, |p| p + 1);
        let mut gr = Graph::new();
        let f32t = DType::F32;
        let mut x = gr.input("x", f32t, [t, c.hidden].as_slice());
        let cos = gr.input("cos", f32t, [t, 1, hd / 2, 1].as_slice());
        let sin = gr.input("sin", f32t, [t, 1, hd / 2, 1].as_slice());
        let mask = gr.input("mask", f32t, [g * t, s].as_slice());
        let caches: Vec<NodeId> = match past {
            Some(p) => (0..t)
                .map(|b| {
                    let shape = [c.layers, 2, kvh, p, hd];
                    gr.input(&format!("kv_cache.{b}"), f32t, shape.as_slice())
                })
                .collect(),
            None => Vec::new(),
        };
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
            let k = gr.reshape(k, [t, kvh, hd].as_slice())?;
            let k = rope(&mut gr, k, kvh)?;
            let k_new = gr.transpose(k, &[1, 0, 2])?;
            let v = gr.reshape(v, [t, kvh, hd].as_slice())?;
            let v_new = gr.transpose(v, &[1, 0, 2])?;
            gr.output(&format!("k.{l}"), k_new);
            gr.output(&format!("v.{l}"), v_new);
            let att = match past {
                None => {
                    let q = gr.transpose(q, &[1, 0, 2])?;
                    let q = gr.reshape(q, [kvh, g * t, hd].as_slice())?;
                    let att = gr.attention(q, k_new, v_new, Some(mask), false, None)?;
                    let att = gr.reshape(att, [h, t, hd].as_slice())?;
                    let att = gr.transpose(att, &[1, 0, 2])?;
                    gr.reshape(att, [t, h * hd].as_slice())?
                }
                // each sequence's query row against its own cache and new row
                Some(p) => {
                    let mut rows = Vec::with_capacity(t);
                    for (b, &cache) in caches.iter().enumerate() {
                        let row = |gr: &mut Graph, x: NodeId, axis: usize| {
                            if t == 1 {
                                Ok(x)
                            } else {
                                gr.slice(x, axis, b as i64, b as i64 + 1, 1)
                            }
                        };
                        let qb = row(&mut gr, q, 0)?;
                        let qb = gr.reshape(qb, [kvh, g, hd].as_slice())?;
                        let layer = gr.slice(cache, 0, l as i64, l as i64 + 1, 1)?;
                        let kc = gr.slice(layer, 1, 0, 1, 1)?;
                        let kc = gr.reshape(kc, [kvh, p, hd].as_slice())?;
                        let vc = gr.slice(layer, 1, 1, 2, 1)?;
                        let vc = gr.reshape(vc, [kvh, p, hd].as_slice())?;
                        let kb = row(&mut gr, k_new, 1)?;
                        let vb = row(&mut gr, v_new, 1)?;
                        let k_all = gr.concat(&[kc, kb], 1)?;
                        let v_all = gr.concat(&[vc, vb], 1)?;
                        let mb = if t == 1 {
                            mask
                        } else {
                            let r = (b * g) as i64;
                            gr.slice(mask, 0, r, r + g as i64, 1)?
                        };
                        let att = gr.attention(qb, k_all, v_all, Some(mb), false, None)?;
                        rows.push(gr.reshape(att, [1, h * hd].as_slice())?);
                    }
                    if t == 1 {
                        rows[0]
                    } else {
                        gr.concat(&rows, 0)?
                    }
                }
            };
            let o = linear(&mut gr, &mut param, att, &p("attn_output"))?;
            x = gr.add(x, o)?;
            let norm_w = param(&mut gr, &p("ffn_norm"), &[c.hidden], f32t);
            let hn = gr.rms_norm(x, norm_w, c.eps)?;
            let gate = linear(&mut gr, &mut param, hn, &p("ffn_gate"))?;
            let up = linear(&mut gr, &mut param, hn, &p("ffn_up"))?;
            let act = match c.ffn_act {
                FfnAct::Silu => UnaryOp::SILU,
                FfnAct::GeluTanh => UnaryOp::GELU_TANH,
            };
            let gate = gr.unary(act, gate)?;
            let m = gr.binary(BinaryOp::Mul, gate, up)?;
            let d = linear(&mut gr, &mut param, m, &p("ffn_down"))?;
            x = gr.add(x, d)?;
        }
        let last = if t > 1 && past.is_none() {
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
