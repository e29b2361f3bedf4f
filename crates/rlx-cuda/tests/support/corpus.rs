//! The graphs whose generated kernels the code-generation snapshot tests write out (CUDA C
//! in `crates/rlx-cuda/tests/codegen_snapshot.rs`, WGSL in
//! `crates/rlx-wgpu/tests/codegen_snapshot.rs`): every library case and its variants, the
//! random graphs of the differential suites, the MiniLM-shaped sample encoder in three
//! dtypes, and the bundled demo's CNN. A refactor of the code generators regenerates the
//! snapshot and compares it byte for byte with the one taken before.

use super::cases;
use rlx_ir::sample::{encoder, EncoderShape};
use rlx_ir::{Conv2dParams, DType, Graph, Pool2dParams, PoolKind, Shape};

/// Random graphs in the corpus (seeds `0..RANDOM_GRAPHS`).
pub const RANDOM_GRAPHS: u64 = 200;

/// Every graph of the corpus with a file-friendly name.
pub fn corpus() -> Vec<(String, Graph)> {
    let mut out = Vec::new();
    let families = [
        ("library", cases::library_cases()),
        ("wide", cases::wide_path_cases()),
        ("heads", cases::head_split_cases()),
        ("flash", cases::flash_cases()),
        ("merge", cases::merge_cases()),
        ("merge_refused", cases::merge_refused_cases()),
        ("fused_gemm", cases::fused_gemm_cases()),
        ("gemm_norm", cases::gemm_norm_cases()),
        ("ffn_norm", cases::ffn_norm_cases()),
    ];
    for (family, cases) in families {
        for (i, c) in cases.into_iter().enumerate() {
            out.push((format!("{family}_{i:03}_{}", file_name(&c.name)), c.graph));
        }
    }
    for seed in 0..RANDOM_GRAPHS {
        let r = rlx_cpu::random_graph::random_graph(seed);
        out.push((format!("random_{seed:03}"), r.graph));
    }
    let small = EncoderShape {
        layers: 1,
        seq: 32,
        ..EncoderShape::MINILM
    };
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        out.push((format!("encoder_{dtype}"), encoder(small, 2, dtype).graph));
    }
    out.push(("demo_cnn".into(), demo_cnn(4)));
    out
}

/// `name` with every character outside `[A-Za-z0-9_-]` replaced by `_`.
pub fn file_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The bundled demo's CNN (`crates/rlx/src/demo.rs`, `build_graph`) for a static batch.
fn demo_cnn(batch: usize) -> Graph {
    let mut g = Graph::new();
    let x = g.input("images", DType::F32, Shape::of(&[batch, 1, 8, 8]));
    let params: [(&str, &[usize]); 8] = [
        ("conv1.weight", &[8, 1, 3, 3]),
        ("conv1.bias", &[8]),
        ("conv2.weight", &[16, 8, 3, 3]),
        ("conv2.bias", &[16]),
        ("fc1.weight", &[64, 256]),
        ("fc1.bias", &[64]),
        ("fc2.weight", &[10, 64]),
        ("fc2.bias", &[10]),
    ];
    let p: Vec<_> = params
        .iter()
        .map(|(n, s)| g.param(n, DType::F32, Shape::of(s)))
        .collect();
    let same = Conv2dParams {
        pads: [1; 4],
        ..Conv2dParams::default()
    };
    let pool = Pool2dParams {
        kind: PoolKind::Max,
        kernel: [2, 2],
        stride: [2, 2],
        pads: [0; 4],
        dilation: [1, 1],
        count_include_pad: false,
        ceil_mode: false,
    };
    let build = |g: &mut Graph| -> Result<_, rlx_ir::IrError> {
        let c1 = g.conv2d(x, p[0], Some(p[1]), same)?;
        let r1 = g.relu(c1)?;
        let m1 = g.pool2d(r1, pool)?;
        let c2 = g.conv2d(m1, p[2], Some(p[3]), same)?;
        let r2 = g.relu(c2)?;
        let flat = g.reshape(r2, Shape::of(&[batch, 256]))?;
        let w1t = g.transpose(p[4], &[1, 0])?;
        let h1 = g.matmul(flat, w1t)?;
        let h1 = g.add(h1, p[5])?;
        let h1 = g.relu(h1)?;
        let w2t = g.transpose(p[6], &[1, 0])?;
        let logits = g.matmul(h1, w2t)?;
        g.add(logits, p[7])
    };
    let logits = build(&mut g).expect("demo shapes");
    g.output("logits", logits);
    g
}
