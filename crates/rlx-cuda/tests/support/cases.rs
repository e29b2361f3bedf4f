//! One small graph per library op family (and its variants): the cases both the NVRTC
//! compile checks and the GPU differential tests run. Values are random, never zeros.

use rlx_ir::{
    ArgOp, BinaryOp, Conv2dParams, DType, Graph, NodeId, Op, PadMode, Pool2dParams, PoolKind,
    Shape, Tensor, UnaryOp,
};
use std::collections::HashMap;
use std::sync::Arc;

/// A graph with its run inputs and weights.
pub struct Case {
    /// name for messages
    pub name: String,
    /// the graph
    pub graph: Graph,
    /// run inputs
    pub inputs: HashMap<String, Tensor>,
    /// weights
    pub params: HashMap<String, Arc<Tensor>>,
    /// the dtype whose tolerance applies
    pub dtype: DType,
}

/// Builds a case.
pub struct Builder {
    case: Case,
    seed: u64,
}

impl Builder {
    /// A new case.
    pub fn new(name: &str, dtype: DType) -> Builder {
        Builder {
            case: Case {
                name: name.into(),
                graph: Graph::new(),
                inputs: HashMap::new(),
                params: HashMap::new(),
                dtype,
            },
            seed: name
                .bytes()
                .fold(7u64, |a, b| a.wrapping_mul(31).wrapping_add(b as u64)),
        }
    }

    /// The graph.
    pub fn g(&mut self) -> &mut Graph {
        &mut self.case.graph
    }

    /// A random input.
    pub fn input(&mut self, dtype: DType, shape: &[usize]) -> NodeId {
        self.seed += 1;
        let name = format!("x{}", self.case.inputs.len());
        self.case
            .inputs
            .insert(name.clone(), Tensor::random(dtype, shape, self.seed));
        self.case.graph.input(&name, dtype, Shape::of(shape))
    }

    /// An input with the given values.
    pub fn input_values(&mut self, dtype: DType, shape: &[usize], vals: &[f64]) -> NodeId {
        let name = format!("x{}", self.case.inputs.len());
        self.case.inputs.insert(
            name.clone(),
            Tensor::from_f64(dtype, shape, vals).expect("sizes match"),
        );
        self.case.graph.input(&name, dtype, Shape::of(shape))
    }

    /// A random weight.
    pub fn param(&mut self, dtype: DType, shape: &[usize]) -> NodeId {
        self.seed += 1;
        let name = format!("w{}", self.case.params.len());
        self.case.params.insert(
            name.clone(),
            Arc::new(Tensor::random(dtype, shape, self.seed)),
        );
        self.case.graph.param(&name, dtype, Shape::of(shape))
    }

    /// An index input with values in `[-n, n)`.
    pub fn indices(&mut self, dtype: DType, shape: &[usize], n: usize) -> NodeId {
        self.seed += 1;
        let count: usize = shape.iter().product();
        let mut rng = rlx_ir::SplitMix64(self.seed);
        let vals: Vec<f64> = (0..count)
            .map(|_| rng.below(2 * n) as f64 - n as f64)
            .collect();
        let name = format!("x{}", self.case.inputs.len());
        self.case.inputs.insert(
            name.clone(),
            Tensor::from_f64(dtype, shape, &vals).expect("sizes match"),
        );
        self.case.graph.input(&name, dtype, Shape::of(shape))
    }

    /// Finishes with `out` as the output.
    pub fn done(mut self, out: NodeId) -> Case {
        self.case.graph.output("out", out);
        self.case
    }
}

fn op(b: &mut Builder, op: Op, ins: &[NodeId]) -> NodeId {
    b.g().push(op, ins, None).expect("valid case")
}

/// Every library op family, in f32 and (where it matters) f16/bf16.
/// Shapes that take the register-resident norms (rows in registers, 16-byte vectors) and the
/// 16-byte elementwise path: 300 rows leave a partial block and a partly filled warp; rows of
/// 100 and 1032 columns leave odd vector counts; an f32 cast epilogue changes the store type.
pub fn wide_path_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for dt in [DType::F32, DType::F16, DType::BF16] {
        for cols in [384, 1536, 100] {
            let mut b = Builder::new(&format!("wide_layer_norm_{cols}_{dt}"), dt);
            let x = b.input(dt, &[300, cols]);
            let s = b.param(dt, &[cols]);
            let sh = b.param(dt, &[cols]);
            let y = b.g().layer_norm(x, s, sh, 1e-5).unwrap();
            let y = if cols == 384 {
                b.g().unary(UnaryOp::Tanh, y).unwrap()
            } else {
                y
            };
            cases.push(b.done(y));
            let mut b = Builder::new(&format!("wide_rms_norm_{cols}_{dt}"), dt);
            let x = b.input(dt, &[300, cols]);
            let s = b.param(dt, &[cols]);
            let y = b.g().rms_norm(x, s, 1e-6).unwrap();
            cases.push(b.done(y));
        }
        // Constant rows with BERT's eps 1e-12: zero variance, so the output is beta; an eps
        // rounded to the half dtype (0) would divide by zero.
        let mut b = Builder::new(&format!("wide_layer_norm_constant_rows_{dt}"), dt);
        let x = b.input_values(dt, &[32, 384], &[0.5; 32 * 384]);
        let s = b.param(dt, &[384]);
        let sh = b.param(dt, &[384]);
        let y = b.g().layer_norm(x, s, sh, 1e-12).unwrap();
        cases.push(b.done(y));
        if dt != DType::F32 {
            let mut b = Builder::new(&format!("wide_layer_norm_cast_f32_{dt}"), dt);
            let x = b.input(dt, &[300, 384]);
            let s = b.param(dt, &[384]);
            let sh = b.param(dt, &[384]);
            let y = b.g().layer_norm(x, s, sh, 1e-5).unwrap();
            let y = b.g().cast(y, DType::F32).unwrap();
            cases.push(b.done(y));
        }
        for n in [1536, 1032] {
            let mut b = Builder::new(&format!("wide_gelu_bias_{n}_{dt}"), dt);
            let x = b.input(dt, &[64, 256]);
            let w = b.param(dt, &[256, n]);
            let bias = b.param(dt, &[n]);
            let y = b.g().matmul(x, w).unwrap();
            let y = b.g().add(y, bias).unwrap();
            let y = b.g().unary(UnaryOp::GELU, y).unwrap();
            cases.push(b.done(y));
        }
    }
    cases
}

pub fn library_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for dt in [DType::F32, DType::F16] {
        // Softmax along the last axis and along an inner axis; log-softmax on long rows.
        let mut b = Builder::new(&format!("softmax_last_{dt}"), dt);
        let x = b.input(dt, &[4, 37]);
        let y = b.g().softmax(x, -1).unwrap();
        cases.push(b.done(y));
        let mut b = Builder::new(&format!("softmax_inner_{dt}"), dt);
        let x = b.input(dt, &[3, 5, 4]);
        let y = b.g().softmax(x, 1).unwrap();
        cases.push(b.done(y));
        let mut b = Builder::new(&format!("log_softmax_long_{dt}"), dt);
        let x = b.input(dt, &[2, 5000]);
        let y = op(&mut b, Op::LogSoftmax { axis: 1 }, &[x]);
        cases.push(b.done(y));
        // Norms, with an elementwise epilogue (x2 then tanh) fused in.
        let mut b = Builder::new(&format!("layer_norm_{dt}"), dt);
        let x = b.input(dt, &[2, 3, 64]);
        let s = b.param(dt, &[64]);
        let sh = b.param(dt, &[64]);
        let y = b.g().layer_norm(x, s, sh, 1e-5).unwrap();
        let y = b.g().unary(UnaryOp::Tanh, y).unwrap();
        cases.push(b.done(y));
        let mut b = Builder::new(&format!("layer_norm_two_axes_{dt}"), dt);
        let x = b.input(dt, &[2, 3, 8]);
        let s = b.param(dt, &[8]);
        let sh = b.param(dt, &[3, 8]);
        let y = op(&mut b, Op::LayerNorm { axis: 1, eps: 1e-5 }, &[x, s, sh]);
        cases.push(b.done(y));
        let mut b = Builder::new(&format!("rms_norm_{dt}"), dt);
        let x = b.input(dt, &[5, 96]);
        let s = b.param(dt, &[96]);
        let y = b.g().rms_norm(x, s, 1e-6).unwrap();
        cases.push(b.done(y));
        // Attention: none, causal, additive mask; head sizes 32, 48, 256.
        for (mask, d, sq, sk) in [
            ("none", 32, 10, 12),
            ("causal", 48, 9, 9),
            ("additive", 32, 10, 40),
            ("none", 256, 5, 40),
        ] {
            let mut b = Builder::new(&format!("attention_{mask}_d{d}_{dt}"), dt);
            let q = b.input(dt, &[2, 3, sq, d]);
            let k = b.input(dt, &[2, 3, sk, d]);
            let v = b.input(dt, &[2, 3, sk, d]);
            let m = (mask == "additive").then(|| b.input(dt, &[2, 1, sq, sk]));
            let y = b
                .g()
                .attention(
                    q,
                    k,
                    v,
                    m,
                    mask == "causal",
                    if d == 48 { Some(0.3) } else { None },
                )
                .unwrap();
            cases.push(b.done(y));
        }
        // Attention large enough (batch x sq x sk >= 2^20) that f16/bf16 take the GEMM form.
        for mask in ["none", "causal", "additive"] {
            let mut b = Builder::new(&format!("attention_gemm_{mask}_{dt}"), dt);
            let q = b.input(dt, &[8, 8, 128, 16]);
            let k = b.input(dt, &[8, 8, 128, 16]);
            let v = b.input(dt, &[8, 8, 128, 24]);
            let m = (mask == "additive").then(|| b.input(dt, &[8, 1, 128, 128]));
            let y = b
                .g()
                .attention(q, k, v, m, mask == "causal", Some(0.2))
                .unwrap();
            cases.push(b.done(y));
        }
        // A residual add after bias fuses into cuBLASLt as C (beta = 1).
        let mut b = Builder::new(&format!("matmul_bias_residual_{dt}"), dt);
        let x = b.input(dt, &[2, 5, 7]);
        let w = b.param(dt, &[7, 3]);
        let bias = b.param(dt, &[3]);
        let r = b.input(dt, &[2, 5, 3]);
        let y = b.g().matmul(x, w).unwrap();
        let y = b.g().add(y, bias).unwrap();
        let y = b.g().add(r, y).unwrap();
        cases.push(b.done(y));
        // Matmuls: folded rows, batched, broadcast batches; fused bias+relu; unfused gelu.
        let mut b = Builder::new(&format!("matmul_bias_relu_{dt}"), dt);
        let x = b.input(dt, &[2, 5, 7]);
        let w = b.param(dt, &[7, 3]);
        let bias = b.param(dt, &[3]);
        let y = b.g().matmul(x, w).unwrap();
        let y = b.g().add(y, bias).unwrap();
        let y = b.g().relu(y).unwrap();
        cases.push(b.done(y));
        let mut b = Builder::new(&format!("matmul_batched_gelu_{dt}"), dt);
        let x = b.input(dt, &[2, 4, 5]);
        let w = b.input(dt, &[2, 5, 6]);
        let y = b.g().matmul(x, w).unwrap();
        let y = b.g().unary(UnaryOp::GELU, y).unwrap();
        cases.push(b.done(y));
        let mut b = Builder::new(&format!("matmul_broadcast_cast_{dt}"), dt);
        let x = b.input(dt, &[2, 1, 4, 5]);
        let w = b.input(dt, &[1, 3, 5, 6]);
        let y = b.g().matmul(x, w).unwrap();
        let y = b.g().cast(y, DType::F64).unwrap();
        cases.push(b.done(y));
        // Convolutions: 3x3 padded with bias and relu; grouped strided; 1x1 direct.
        for (name, c, o, k, groups, stride, pad) in [
            ("3x3", 3, 4, 3, 1, 1, 1),
            ("grouped", 4, 6, 3, 2, 2, 0),
            ("1x1", 8, 5, 1, 1, 1, 0),
        ] {
            let mut b = Builder::new(&format!("conv_{name}_{dt}"), dt);
            let x = b.input(dt, &[2, c, 7, 6]);
            let w = b.param(dt, &[o, c / groups, k, k]);
            let bias = b.param(dt, &[o]);
            let p = Conv2dParams {
                stride: [stride, stride],
                pads: [pad; 4],
                dilation: [1, 1],
                groups,
            };
            let y = b.g().conv2d(x, w, Some(bias), p).unwrap();
            let y = b.g().relu(y).unwrap();
            cases.push(b.done(y));
        }
    }
    // Data movement and the rest, f32 plus one integer case.
    let dt = DType::F32;
    let mut b = Builder::new("gather_embedding", dt);
    let table = b.param(dt, &[50, 16]);
    let idx = b.indices(DType::I64, &[2, 7], 50);
    let y = b.g().gather(table, idx, 0).unwrap();
    cases.push(b.done(y));
    let mut b = Builder::new("gather_axis1_i32", DType::I32);
    let data = b.input(DType::I32, &[3, 9, 2]);
    let idx = b.indices(DType::I32, &[4], 9);
    let y = b.g().gather(data, idx, 1).unwrap();
    cases.push(b.done(y));
    let mut b = Builder::new("concat_three", dt);
    let xs = [
        b.input(dt, &[2, 3, 4]),
        b.input(dt, &[2, 1, 4]),
        b.input(dt, &[2, 5, 4]),
    ];
    let y = b.g().concat(&xs, 1).unwrap();
    cases.push(b.done(y));
    for (name, mode) in [
        ("constant", PadMode::Constant(0.5)),
        ("reflect", PadMode::Reflect),
        ("edge", PadMode::Edge),
    ] {
        let mut b = Builder::new(&format!("pad_{name}"), dt);
        let x = b.input(dt, &[2, 4, 5]);
        let y = op(
            &mut b,
            Op::Pad {
                pads: vec![(0, 1), (2, 1), (1, 3)],
                mode,
            },
            &[x],
        );
        cases.push(b.done(y));
    }
    for (kind, cip, ceil) in [
        (PoolKind::Max, false, false),
        (PoolKind::Avg, true, false),
        (PoolKind::Avg, false, true),
    ] {
        let mut b = Builder::new(&format!("pool_{kind:?}_{cip}_{ceil}"), dt);
        let x = b.input(dt, &[2, 3, 7, 6]);
        let p = Pool2dParams {
            kind,
            kernel: [3, 2],
            stride: [2, 2],
            pads: [1, 0, 1, 1],
            dilation: [1, 1],
            count_include_pad: cip,
            ceil_mode: ceil,
        };
        let y = b.g().pool2d(x, p).unwrap();
        cases.push(b.done(y));
    }
    for kind in [PoolKind::Max, PoolKind::Avg] {
        let mut b = Builder::new(&format!("global_pool_{kind:?}"), dt);
        let x = b.input(dt, &[2, 3, 9, 11]);
        let y = op(&mut b, Op::GlobalPool(kind), &[x]);
        cases.push(b.done(y));
    }
    for arg in [ArgOp::ArgMax, ArgOp::ArgMin] {
        let mut b = Builder::new(&format!("{arg:?}"), dt);
        let x = b.input(dt, &[3, 7, 4]);
        let y = op(
            &mut b,
            Op::ArgReduce {
                op: arg,
                axis: 1,
                keepdims: false,
            },
            &[x],
        );
        cases.push(b.done(y));
    }
    let mut b = Builder::new("bf16_matmul_bias", DType::BF16);
    let x = b.input(DType::BF16, &[3, 64]);
    let w = b.param(DType::BF16, &[64, 32]);
    let bias = b.param(DType::BF16, &[32]);
    let y = b.g().matmul(x, w).unwrap();
    let y = b.g().binary(BinaryOp::Add, y, bias).unwrap();
    cases.push(b.done(y));
    cases
}

/// Heads split from `[batch, seq, heads * dim]` projections, as encoders do: `reshape →
/// transpose [0, 2, 1, 3] → attention → transpose → reshape`, so attention reads q, k, v and
/// writes its result in place (the CUDA planner drops the transposes). Masks none, causal and
/// additive; f32 and f16; a small size (fused kernel) and one where f16 takes the GEMM form.
pub fn head_split_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for dt in [DType::F32, DType::F16, DType::BF16] {
        for (size, batch, seq, heads, dim) in [("small", 2, 10, 3, 16), ("gemm", 8, 128, 8, 32)] {
            for mask in ["none", "causal", "additive"] {
                let name = format!("head_split_{size}_{mask}_{dt}");
                let mut b = Builder::new(&name, dt);
                let hidden = heads * dim;
                // q from a projection (a temporary source), k and v straight from inputs.
                let x = b.input(dt, &[batch, seq, hidden]);
                let w = b.param(dt, &[hidden, hidden]);
                let bias = b.param(dt, &[hidden]);
                let q = b.g().matmul(x, w).unwrap();
                let q = b.g().add(q, bias).unwrap();
                let k = b.input(dt, &[batch, seq, hidden]);
                let v = b.input(dt, &[batch, seq, hidden]);
                let m = (mask == "additive").then(|| b.input(dt, &[batch, 1, seq, seq]));
                let split = |b: &mut Builder, t: NodeId| {
                    let t = b
                        .g()
                        .reshape(t, Shape::of(&[batch, seq, heads, dim]))
                        .unwrap();
                    b.g().transpose(t, &[0, 2, 1, 3]).unwrap()
                };
                let (q, k, v) = (split(&mut b, q), split(&mut b, k), split(&mut b, v));
                let scale = (dt == DType::F32).then_some(0.25);
                let y = b
                    .g()
                    .attention(q, k, v, m, mask == "causal", scale)
                    .unwrap();
                let y = b.g().transpose(y, &[0, 2, 1, 3]).unwrap();
                let y = b.g().reshape(y, Shape::of(&[batch, seq, hidden])).unwrap();
                cases.push(b.done(y));
            }
        }
    }
    // The transposed q also feeds a softmax, and the attention result also a second output:
    // neither copy may be dropped.
    let dt = DType::F16;
    let mut b = Builder::new("head_split_second_readers_f16", dt);
    let (batch, seq, heads, dim) = (2, 10, 3, 16);
    let heads_of = |b: &mut Builder| {
        let t = b.input(dt, &[batch, seq, heads * dim]);
        let t = b
            .g()
            .reshape(t, Shape::of(&[batch, seq, heads, dim]))
            .unwrap();
        b.g().transpose(t, &[0, 2, 1, 3]).unwrap()
    };
    let (q, k, v) = (heads_of(&mut b), heads_of(&mut b), heads_of(&mut b));
    let y = b.g().attention(q, k, v, None, false, None).unwrap();
    let sq = b.g().softmax(q, -1).unwrap();
    b.g().output("softmax_q", sq);
    b.g().output("attention", y);
    let y = b.g().transpose(y, &[0, 2, 1, 3]).unwrap();
    cases.push(b.done(y));
    cases
}

/// Attention the tensor-core flash kernel takes (f16 and bf16, sm_80+): head sizes 32, 64
/// and 128; sequences of 1, 17, 128 and 300 (ragged key and query tiles); 1 and 24
/// (batch x heads) matrices, and 768 of head size 32 (one block per matrix, its keys and
/// values resident); no mask, causal and additive masks; default and explicit scales. Then the corners: causal with fewer queries than keys, a decode-like step (one
/// query against 300 keys with a key-padding mask of zeros and -inf), a fully masked query
/// row (zeros, as the interpreter defines), a key-padding mask broadcast over rows, k/v
/// broadcast over heads, a value head size other than the query's, and a fused epilogue.
pub fn flash_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for dt in [DType::F16, DType::BF16] {
        for mask in ["none", "causal", "additive"] {
            for (d, seq, batch, heads, scale) in [
                (32, 1, 2, 12, None),
                (32, 17, 2, 12, None),
                (64, 128, 1, 1, Some(0.5)),
                (128, 300, 1, 1, None),
                (64, 300, 2, 12, Some(0.2)),
                (128, 17, 2, 12, Some(1.0)),
                // matrices enough for a block per matrix: keys and values stay resident
                // while the block runs both query tiles
                (32, 128, 64, 12, None),
            ] {
                let name = format!("flash_{mask}_d{d}_s{seq}_bh{}_{dt}", batch * heads);
                let mut b = Builder::new(&name, dt);
                let shape = [batch, heads, seq, d];
                let q = b.input(dt, &shape);
                let k = b.input(dt, &shape);
                let v = b.input(dt, &shape);
                let m = (mask == "additive").then(|| b.input(dt, &[batch, 1, seq, seq]));
                let y = b
                    .g()
                    .attention(q, k, v, m, mask == "causal", scale)
                    .unwrap();
                cases.push(b.done(y));
            }
        }
        // Causal with sq < sk: query i sees keys j <= i + 23.
        let mut b = Builder::new(&format!("flash_causal_sq17_sk40_{dt}"), dt);
        let q = b.input(dt, &[2, 3, 17, 32]);
        let k = b.input(dt, &[2, 3, 40, 32]);
        let v = b.input(dt, &[2, 3, 40, 32]);
        let y = b.g().attention(q, k, v, None, true, None).unwrap();
        cases.push(b.done(y));
        // Decode: one new query per head against a 300-row cache of which 213 are filled.
        let mut b = Builder::new(&format!("flash_decode_sk300_{dt}"), dt);
        let q = b.input(dt, &[1, 8, 1, 64]);
        let k = b.input(dt, &[1, 8, 300, 64]);
        let v = b.input(dt, &[1, 8, 300, 64]);
        let vals: Vec<f64> = (0..300)
            .map(|j| if j < 213 { 0.0 } else { f64::NEG_INFINITY })
            .collect();
        let m = b.input_values(dt, &[1, 1, 1, 300], &vals);
        let y = b.g().attention(q, k, v, Some(m), false, None).unwrap();
        cases.push(b.done(y));
        // Query row 3 of every matrix sees no key at all; rows 0..2 see some.
        let mut b = Builder::new(&format!("flash_masked_row_{dt}"), dt);
        let q = b.input(dt, &[2, 2, 9, 16]);
        let k = b.input(dt, &[2, 2, 20, 16]);
        let v = b.input(dt, &[2, 2, 20, 16]);
        let vals: Vec<f64> = (0..9 * 20)
            .map(|e| match (e / 20, e % 20) {
                (3, _) => f64::NEG_INFINITY,
                (i, j) if j > 2 * i + 1 => -1e4,
                (i, j) => 0.1 * (i as f64) - 0.05 * (j as f64),
            })
            .collect();
        let m = b.input_values(dt, &[9, 20], &vals);
        let y = b.g().attention(q, k, v, Some(m), false, None).unwrap();
        cases.push(b.done(y));
        // A BERT key-padding mask [batch, 1, 1, sk] broadcast over heads and rows.
        let mut b = Builder::new(&format!("flash_padding_mask_{dt}"), dt);
        let q = b.input(dt, &[2, 4, 17, 32]);
        let k = b.input(dt, &[2, 4, 17, 32]);
        let v = b.input(dt, &[2, 4, 17, 32]);
        let vals: Vec<f64> = (0..2 * 17)
            .map(|e| {
                if e % 17 < 11 + 6 * (e / 17) {
                    0.0
                } else {
                    -1e4
                }
            })
            .collect();
        let m = b.input_values(dt, &[2, 1, 1, 17], &vals);
        let y = b.g().attention(q, k, v, Some(m), false, None).unwrap();
        cases.push(b.done(y));
        // K and V shared by every head (stride-0 batch dim); v's head size 32, q/k's 64.
        let mut b = Builder::new(&format!("flash_shared_kv_dv32_{dt}"), dt);
        let q = b.input(dt, &[2, 3, 20, 64]);
        let k = b.input(dt, &[2, 1, 33, 64]);
        let v = b.input(dt, &[2, 1, 33, 32]);
        let y = b.g().attention(q, k, v, None, false, Some(0.3)).unwrap();
        cases.push(b.done(y));
        // An elementwise epilogue (x2 then tanh) fused into the kernel's store.
        let mut b = Builder::new(&format!("flash_epilogue_{dt}"), dt);
        let q = b.input(dt, &[2, 3, 21, 32]);
        let k = b.input(dt, &[2, 3, 21, 32]);
        let v = b.input(dt, &[2, 3, 21, 32]);
        let y = b.g().attention(q, k, v, None, true, None).unwrap();
        let y = b.g().add(y, y).unwrap();
        let y = b.g().unary(UnaryOp::Tanh, y).unwrap();
        cases.push(b.done(y));
    }
    cases
}

/// Sibling projections of one hidden state into head-split q, k and v, as encoders do:
/// three matmuls sharing A (with or without bias), each read by attention only through the
/// head-split transposes, so the CUDA planner runs them as one GEMM over concatenated
/// weights. f32, f16 and bf16; a small size (fused or flash kernel) and one large enough for
/// f16 to take the GEMM form when the flash kernel is off. Weights are `w0..`: q, k, v
/// weight (then bias) in that order.
pub fn merge_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for dt in [DType::F32, DType::F16, DType::BF16] {
        for (size, batch, seq, heads, dim) in [("small", 2, 10, 3, 16), ("gemm", 8, 128, 8, 32)] {
            for bias in [true, false] {
                let name = format!("merge_qkv_{size}_bias{bias}_{dt}");
                let mut b = Builder::new(&name, dt);
                let hidden = heads * dim;
                let x = b.input(dt, &[batch, seq, hidden]);
                let split = |b: &mut Builder, t: NodeId| {
                    let t = b
                        .g()
                        .reshape(t, Shape::of(&[batch, seq, heads, dim]))
                        .unwrap();
                    b.g().transpose(t, &[0, 2, 1, 3]).unwrap()
                };
                let proj = |b: &mut Builder| {
                    let w = b.param(dt, &[hidden, hidden]);
                    let mut y = b.g().matmul(x, w).unwrap();
                    if bias {
                        let c = b.param(dt, &[hidden]);
                        y = b.g().add(y, c).unwrap();
                    }
                    split(b, y)
                };
                let (q, k, v) = (proj(&mut b), proj(&mut b), proj(&mut b));
                let scale = (dt == DType::F32).then_some(0.25);
                let y = b.g().attention(q, k, v, None, false, scale).unwrap();
                let y = b.g().transpose(y, &[0, 2, 1, 3]).unwrap();
                let y = b.g().reshape(y, Shape::of(&[batch, seq, hidden])).unwrap();
                cases.push(b.done(y));
            }
        }
    }
    cases
}

/// Sibling projections that must NOT be merged, each by name: `second_reader` (q's
/// projection is also a graph output), `different_a` (k projects another input),
/// `computed_weight` (v's weight is computed in the graph, not a param), `residual` (k's
/// epilogue adds a residual besides the bias). f16, small.
pub fn merge_refused_cases() -> Vec<Case> {
    let dt = DType::F16;
    let (batch, seq, heads, dim) = (2, 10, 3, 16);
    let hidden = heads * dim;
    let mut cases = Vec::new();
    for what in [
        "second_reader",
        "different_a",
        "computed_weight",
        "residual",
    ] {
        let mut b = Builder::new(&format!("merge_refused_{what}"), dt);
        let x = b.input(dt, &[batch, seq, hidden]);
        let x2 = b.input(dt, &[batch, seq, hidden]);
        let split = |b: &mut Builder, t: NodeId| {
            let t = b
                .g()
                .reshape(t, Shape::of(&[batch, seq, heads, dim]))
                .unwrap();
            b.g().transpose(t, &[0, 2, 1, 3]).unwrap()
        };
        let mut projs = Vec::new();
        for i in 0..3 {
            let a = if what == "different_a" && i == 1 {
                x2
            } else {
                x
            };
            let mut w = b.param(dt, &[hidden, hidden]);
            if what == "computed_weight" && i == 2 {
                w = b.g().unary(UnaryOp::Neg, w).unwrap();
            }
            let c = b.param(dt, &[hidden]);
            let y = b.g().matmul(a, w).unwrap();
            let mut y = b.g().add(y, c).unwrap();
            if what == "residual" && i == 1 {
                y = b.g().add(y, x2).unwrap();
            }
            if what == "second_reader" && i == 0 {
                b.g().output("q_projection", y);
            }
            projs.push(split(&mut b, y));
        }
        let y = b
            .g()
            .attention(projs[0], projs[1], projs[2], None, false, None)
            .unwrap();
        cases.push(b.done(y));
    }
    cases
}

/// Matmuls whose epilogue cuBLASLt cannot fuse, so the plan offers the tensor-core GEMM with
/// the epilogue in its store (`plan::Choice`): f16 and bf16; rows from 1 to 300 (partial
/// tiles), `k` of 24 (a partial 32-deep k tile) to 384, `n` of 40 (a partial column tile) to
/// 256 (results up to `gemm_mma::MAX_OUTPUT` elements); epilogues bias + exact GELU (an
/// FFN's), SiLU, exact GELU cast to f32, and a scaled result plus a residual.
pub fn fused_gemm_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for dt in [DType::F16, DType::BF16] {
        for (batch, m, k, n) in [
            (1, 1, 32, 64),
            (2, 50, 24, 40),
            (1, 300, 96, 136),
            (2, 128, 384, 256),
        ] {
            for epi in ["bias_gelu", "silu", "gelu_f32", "scale_residual"] {
                let name = format!("fused_gemm_{epi}_{batch}x{m}x{k}x{n}_{dt}");
                let mut b = Builder::new(&name, dt);
                let x = b.input(dt, &[batch, m, k]);
                let w = b.param(dt, &[k, n]);
                let y = b.g().matmul(x, w).unwrap();
                let y = match epi {
                    "bias_gelu" => {
                        let bias = b.param(dt, &[n]);
                        let y = b.g().add(y, bias).unwrap();
                        b.g().unary(UnaryOp::GELU, y).unwrap()
                    }
                    "silu" => b.g().unary(UnaryOp::SILU, y).unwrap(),
                    "gelu_f32" => {
                        let y = b.g().unary(UnaryOp::GELU, y).unwrap();
                        b.g().cast(y, DType::F32).unwrap()
                    }
                    _ => {
                        let half = b.input_values(dt, &[1], &[0.5]);
                        let r = b.input(dt, &[batch, m, n]);
                        let y = b.g().mul(y, half).unwrap();
                        b.g().add(y, r).unwrap()
                    }
                };
                cases.push(b.done(y));
            }
        }
    }
    cases
}

/// Matmuls whose result only a layer norm or RMS norm over its rows reads: the
/// post-norm transformer's `LayerNorm(x W + bias + residual)` and variants (no epilogue on
/// the GEMM, an RMS norm, a norm with its own cast epilogue, rows that do not fill a
/// warp's lanes, a partial last block, short and long k) — the cases the GEMM + norm kernel
/// ([`rlx_cuda::codegen::gemm_norm`]) is offered for.
pub fn gemm_norm_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (dt, rows, k, n, kind) in [
        (DType::F16, 256, 384, 384, "bias_residual_ln"),
        (DType::BF16, 300, 96, 136, "bias_residual_ln"),
        (DType::F16, 130, 1536, 384, "bias_residual_ln"),
        (DType::F16, 50, 24, 64, "ln"),
        (DType::BF16, 200, 128, 256, "rms"),
        (DType::F16, 129, 64, 320, "ln_cast_f32"),
    ] {
        let name = format!("gemm_norm_{kind}_{rows}x{k}x{n}_{dt}");
        let mut b = Builder::new(&name, dt);
        let x = b.input(dt, &[rows, k]);
        let w = b.param(dt, &[k, n]);
        let mut y = b.g().matmul(x, w).unwrap();
        if kind.starts_with("bias_residual") {
            let bias = b.param(dt, &[n]);
            let r = b.input(dt, &[rows, n]);
            y = b.g().add(y, bias).unwrap();
            y = b.g().add(y, r).unwrap();
        }
        let scale = b.param(dt, &[n]);
        y = if kind == "rms" {
            b.g().rms_norm(y, scale, 1e-6).unwrap()
        } else {
            let shift = b.param(dt, &[n]);
            b.g().layer_norm(y, scale, shift, 1e-12).unwrap()
        };
        if kind == "ln_cast_f32" {
            y = b.g().cast(y, DType::F32).unwrap();
        }
        cases.push(b.done(y));
    }
    cases
}

/// Feed-forward blocks whose second GEMM and the row norm after it may run as one kernel
/// that also applies the first GEMM's elementwise epilogue to its A operand as it loads it
/// (`CudaOptions::a_prologue`): the post-norm encoder's `LayerNorm(GELU(x W1 + b1) W2 + b2 +
/// x)` with a partial last block, SiLU into an RMS norm in bf16, and a second GEMM whose k
/// (200) ends in a partial k tile. The first GEMM's result is large enough that it gets no
/// fused choice of its own.
pub fn ffn_norm_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (dt, rows, hidden, ffn, kind) in [
        (DType::F16, 130, 384, 1536, "bias_gelu_residual_ln"),
        (DType::BF16, 200, 128, 512, "silu_rms"),
        (DType::F16, 400, 64, 200, "bias_gelu_residual_ln"),
    ] {
        let name = format!("ffn_norm_{kind}_{rows}x{hidden}x{ffn}_{dt}");
        let mut b = Builder::new(&name, dt);
        let x = b.input(dt, &[rows, hidden]);
        let w1 = b.param(dt, &[hidden, ffn]);
        let w2 = b.param(dt, &[ffn, hidden]);
        let mut h = b.g().matmul(x, w1).unwrap();
        h = if kind.starts_with("bias_gelu") {
            let b1 = b.param(dt, &[ffn]);
            let h = b.g().add(h, b1).unwrap();
            b.g().unary(UnaryOp::GELU, h).unwrap()
        } else {
            b.g().unary(UnaryOp::SILU, h).unwrap()
        };
        let mut y = b.g().matmul(h, w2).unwrap();
        let scale = b.param(dt, &[hidden]);
        y = if kind.ends_with("residual_ln") {
            let b2 = b.param(dt, &[hidden]);
            let shift = b.param(dt, &[hidden]);
            y = b.g().add(y, b2).unwrap();
            y = b.g().add(y, x).unwrap();
            b.g().layer_norm(y, scale, shift, 1e-12).unwrap()
        } else {
            b.g().rms_norm(y, scale, 1e-6).unwrap()
        };
        cases.push(b.done(y));
    }
    cases
}
