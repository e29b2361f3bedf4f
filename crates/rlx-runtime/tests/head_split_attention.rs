//! Attention over heads split from one projection, as BERT builds it: the CPU fast path
//! reads q, k and v and writes its result through the head-split views (the transposed
//! copies do not run) and matches the validation interpreter, with and without masks, on
//! both of its GEMM paths (fewer than 32 queries: the `gemm` crate; more: packed).

use rlx_driver::Device;
use rlx_ir::{AttnMask, DType, Graph, Shape, Tensor};
use rlx_runtime::{CompileOptions, Session};
use std::collections::HashMap;
use std::sync::Arc;

/// `attention(split(x @ w + b))` merged back to `[batch, seq, hidden]`, as `rlx-models`
/// builds BERT, then `+ x` so the result is not the attention kernel's own buffer.
fn bert_attention(batch: usize, seq: usize, heads: usize, dim: usize, mask: AttnMask) -> Graph {
    let hidden = heads * dim;
    let f = DType::F32;
    let mut g = Graph::new();
    let x = g.input("x", f, Shape::of(&[batch, seq, hidden]));
    let w = g.param("w", f, [hidden, 3 * hidden]);
    let b = g.param("b", f, [3 * hidden]);
    let qkv = g.matmul(x, w).unwrap();
    let qkv = g.add(qkv, b).unwrap();
    let m =
        (mask == AttnMask::Additive).then(|| g.input("mask", f, Shape::of(&[batch, 1, 1, seq])));
    let y = rlx_ir::sample::head_split_attention(
        &mut g,
        qkv,
        batch,
        seq,
        heads,
        dim,
        m,
        mask == AttnMask::Causal,
    )
    .unwrap();
    let y = g.add(y, x).unwrap();
    g.output("y", y);
    g
}

fn rel_l2(got: &Tensor, want: &Tensor) -> f64 {
    let (a, b) = (got.to_f64_vec(), want.to_f64_vec());
    let num: f64 = a.iter().zip(&b).map(|(x, y)| (x - y) * (x - y)).sum();
    let den: f64 = b.iter().map(|y| y * y).sum();
    (num / den.max(1e-300)).sqrt()
}

#[test]
fn head_split_attention_matches_the_interpreter_without_its_copies() {
    for (batch, seq, heads, dim) in [(2, 10, 3, 8), (2, 40, 2, 16), (1, 64, 4, 32)] {
        for mask in [AttnMask::None, AttnMask::Causal, AttnMask::Additive] {
            let graph = bert_attention(batch, seq, heads, dim, mask);
            let hidden = heads * dim;
            let params: HashMap<String, Arc<Tensor>> = HashMap::from([
                (
                    "w".to_string(),
                    Arc::new(Tensor::random(DType::F32, &[hidden, 3 * hidden], 1)),
                ),
                (
                    "b".to_string(),
                    Arc::new(Tensor::random(DType::F32, &[3 * hidden], 2)),
                ),
            ]);
            let mut inputs = HashMap::from([(
                "x".to_string(),
                Tensor::random(DType::F32, &[batch, seq, hidden], 3),
            )]);
            if mask == AttnMask::Additive {
                inputs.insert(
                    "mask".to_string(),
                    Tensor::random(DType::F32, &[batch, 1, 1, seq], 4),
                );
            }
            let want = rlx_cpu::run_graph(&graph, &inputs, &params).unwrap();
            let case = format!("b{batch} s{seq} h{heads} d{dim} {mask:?}");

            // The copies are elided: fewer kernels run than the program holds.
            let program = rlx_opt::lower(&graph).unwrap();
            let kernels = program.kernels.len();
            let cpu =
                rlx_cpu::CpuProgram::compile(program, &rlx_cpu::CpuOptions::default()).unwrap();
            let ran = cpu.run_profiled(&inputs, &params).unwrap();
            assert!(
                ran.timings.len() + 4 <= kernels,
                "{case}: {} of {kernels} kernels ran: {:?}",
                ran.timings.len(),
                ran.timings.iter().map(|t| &t.name).collect::<Vec<_>>()
            );
            let err = rel_l2(&ran.outputs[0].1, &want[0].1);
            assert!(err <= 1e-5, "{case}: fast path rel L2 {err}");

            // And through the session (optimized, legalized, compiled), twice.
            let s = Session::new(Device::Cpu).unwrap();
            for (n, t) in &params {
                s.set_param(n, (**t).clone());
            }
            let c = s.compile(&graph, CompileOptions::default()).unwrap();
            for _ in 0..2 {
                let got = c.run(&inputs).unwrap();
                let err = rel_l2(&got[0].1, &want[0].1);
                assert!(err <= 1e-5, "{case}: session rel L2 {err}");
            }
        }
    }
}

#[test]
fn attention_over_no_keys_matches_the_interpreter() {
    let f = DType::F32;
    let mut g = Graph::new();
    let q = g.input("q", f, Shape::of(&[2, 3, 4, 8]));
    let k = g.input("k", f, Shape::of(&[2, 3, 0, 8]));
    let v = g.input("v", f, Shape::of(&[2, 3, 0, 8]));
    let y = g.attention(q, k, v, None, false, None).unwrap();
    g.output("y", y);
    let inputs = HashMap::from([
        ("q".to_string(), Tensor::random(f, &[2, 3, 4, 8], 1)),
        ("k".to_string(), Tensor::random(f, &[2, 3, 0, 8], 2)),
        ("v".to_string(), Tensor::random(f, &[2, 3, 0, 8], 3)),
    ]);
    let want = rlx_cpu::run_graph(&g, &inputs, &HashMap::new()).unwrap();
    let s = Session::new(Device::Cpu).unwrap();
    let got = s
        .compile(&g, CompileOptions::default())
        .unwrap()
        .run(&inputs)
        .unwrap();
    assert_eq!(got[0].1.to_f64_vec(), want[0].1.to_f64_vec());
}
