//! Differential testing: random graphs (random ops, shapes with broadcasting and size-1
//! dims, random non-zero inputs) compiled for the CPU fast path and compared with the
//! validation interpreter on the unoptimized graph. The seed is printed on failure.
//!
//! `RLX_DIFF_GRAPHS` sets how many graphs (default 200); `RLX_DIFF_SEED` the first seed.

use rlx_cpu::random_graph::{random_graph, RandomGraph};
use rlx_cpu::testing::rel_l2;
use rlx_driver::Device;
use rlx_runtime::{CompileOptions, Session};

fn check(seed: u64) -> Result<(), String> {
    let RandomGraph {
        graph,
        inputs,
        params,
        ops,
    } = random_graph(seed);
    let want =
        rlx_cpu::run_graph(&graph, &inputs, &params).map_err(|e| format!("interpreter: {e}"))?;
    let session = Session::new(Device::Cpu).map_err(|e| e.to_string())?;
    for (n, t) in &params {
        session.set_param(n, (**t).clone());
    }
    let compiled = session
        .compile(&graph, CompileOptions::default())
        .map_err(|e| format!("compile: {e}\n{graph}"))?;
    let got = compiled
        .run(&inputs)
        .map_err(|e| format!("run: {e}\n{graph}"))?;
    for ((name, w), (gname, g)) in want.iter().zip(&got) {
        if name != gname || w.shape() != g.shape() {
            return Err(format!(
                "output {name}: shape {:?} vs {:?}",
                g.shape(),
                w.shape()
            ));
        }
        let err = rel_l2(g, w);
        if err.is_nan() || err > 1e-5 {
            return Err(format!(
                "output {name}: relative L2 error {err:e} (ops {ops:?})\n{graph}"
            ));
        }
    }
    Ok(())
}

#[test]
fn random_graphs_fast_path_matches_interpreter() {
    let seeds = rlx_cpu::random_graph::seeds_from_env();
    let n = seeds.end - seeds.start;
    let mut failures = Vec::new();
    for seed in seeds {
        if let Err(e) = check(seed) {
            failures.push(format!("seed {seed}: {e}"));
        }
    }
    println!("{n} random graphs, {} failures", failures.len());
    assert!(
        failures.is_empty(),
        "{} of {n} random graphs differ (rerun one with RLX_DIFF_SEED=<seed> RLX_DIFF_GRAPHS=1):\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn generator_builds_varied_graphs() {
    let mut ops = std::collections::BTreeSet::new();
    let mut nodes = 0;
    for seed in 0..200 {
        let r = random_graph(seed);
        nodes += r.graph.nodes().len();
        ops.extend(r.ops.iter().copied());
    }
    println!(
        "{} distinct ops, {nodes} nodes over 200 graphs: {ops:?}",
        ops.len()
    );
    assert!(ops.len() >= 30, "{ops:?}");
    assert!(nodes >= 200 * 6);
}

/// Found by the ONNX `Tile` mapping: a reshape that inserts size-1 dims, then an expand of
/// those dims, read through a broadcast view in one fused kernel.
#[test]
fn reshape_then_expand_of_inserted_unit_dims() {
    use rlx_ir::{DType, Graph, Shape, Tensor};
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [1, 2, 3, 4]);
    let r = g.reshape(x, Shape::of(&[1, 1, 1, 2, 1, 3, 1, 4])).unwrap();
    let e = g
        .push(
            rlx_ir::Op::Expand(Shape::of(&[1, 1, 2, 2, 3, 3, 4, 4])),
            &[r],
            None,
        )
        .unwrap();
    let t = g.reshape(e, Shape::of(&[1, 4, 9, 16])).unwrap();
    g.output("y", e);
    g.output("tiled", t);
    let inputs = std::collections::HashMap::from([(
        "x".to_string(),
        Tensor::random(DType::F32, &[1, 2, 3, 4], 5),
    )]);
    let want = rlx_cpu::run_graph(&g, &inputs, &Default::default()).unwrap();
    let session = Session::new(Device::Cpu).unwrap();
    let got = session
        .compile(&g, CompileOptions::default())
        .unwrap()
        .run(&inputs)
        .unwrap();
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(rel_l2(&g.1, &w.1), 0.0, "{}", g.0);
    }
}
