//! wgpu execution: every library op case and random graphs, run on the `vulkan` and
//! `opengl` adapters (and a smoke run on `webgpu`) and compared with the validation
//! interpreter at DESIGN.md's per-dtype tolerances. Each test prints `SKIPPED: <reason>` and
//! returns when its adapter is absent.
//!
//! `RLX_DIFF_GRAPHS` sets how many random graphs (default 30 here: lavapipe and llvmpipe
//! run on the CPU); `RLX_DIFF_SEED` the first.

#[path = "../../rlx-cuda/tests/support/cases.rs"]
mod cases;

use rlx_cpu::random_graph::random_graph;
use rlx_ir::kernel::KernelProgram;
use rlx_ir::{DType, Graph, Tensor};
use rlx_wgpu::weights::WeightCache;
use rlx_wgpu::{Flavor, WgpuOptions, WgpuProgram};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

fn ready(flavor: Flavor, test: &str) -> bool {
    let a = rlx_wgpu::probe::availability(flavor);
    if !a.available {
        rlx_driver::testing::skip(test, &a.reason.unwrap_or_default());
    } else {
        println!("{test}: {}", a.reason.unwrap_or_default());
    }
    a.available
}

/// Optimize, legalize for the wgpu capability list, lower. `Err(None)` when legalization
/// reports unsupported nodes (f64), `Err(Some(e))` for any other failure.
fn lower(flavor: Flavor, graph: &Graph) -> Result<KernelProgram, Option<String>> {
    let fold = |op: &rlx_ir::Op, ins: &[&Tensor]| rlx_cpu::eval_op(op, ins).ok();
    let optimized = rlx_opt::optimize(graph, &fold).map_err(|e| Some(e.to_string()))?;
    let caps =
        |op: &rlx_ir::Op, ins: &[&rlx_ir::TensorType]| rlx_wgpu::caps::supports_on(flavor, op, ins);
    let (legal, _) = rlx_opt::legalize(&optimized, "wgpu", &caps).map_err(|_| None)?;
    rlx_opt::lower(&legal).map_err(|e| Some(e.to_string()))
}

fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F16 | DType::BF16 => 1e-2,
        _ => 1e-5,
    }
}

enum Outcome {
    Pass,
    Unsupported,
    Fail(String),
}

/// Compiles and runs twice, comparing both runs with the interpreter.
fn check(
    flavor: Flavor,
    name: &str,
    graph: &Graph,
    inputs: &HashMap<String, Tensor>,
    params: &HashMap<String, Arc<Tensor>>,
    dtype: DType,
) -> Outcome {
    let want = match rlx_cpu::run_graph(graph, inputs, params) {
        Ok(w) => w,
        Err(e) => return Outcome::Fail(format!("{name}: interpreter: {e}")),
    };
    let program = match lower(flavor, graph) {
        Ok(p) => p,
        Err(None) => return Outcome::Unsupported,
        Err(Some(e)) => return Outcome::Fail(format!("{name}: lower: {e}")),
    };
    let text = program.to_string();
    let verbose = std::env::var("RLX_WGPU_VERBOSE").is_ok();
    if verbose {
        eprintln!("  compiling {name}");
    }
    let compiled = match WgpuProgram::compile(
        flavor,
        program,
        &WeightCache::new(),
        &WgpuOptions::default(),
    ) {
        Ok(c) => c,
        Err(e) => return Outcome::Fail(format!("{name}: compile: {e}\n{text}")),
    };
    for run in 0..2 {
        if verbose {
            eprintln!("  run {run}");
        }
        let got = match compiled.run(inputs, params) {
            Ok(g) => g,
            Err(e) => return Outcome::Fail(format!("{name}: run {run}: {e}")),
        };
        for ((wn, w), (gn, g)) in want.iter().zip(&got) {
            if wn != gn || w.shape() != g.shape() || w.dtype() != g.dtype() {
                return Outcome::Fail(format!(
                    "{name} output {wn}: got {}{:?}, want {}{:?}",
                    g.dtype(),
                    g.shape(),
                    w.dtype(),
                    w.shape()
                ));
            }
            let err = rlx_cpu::testing::rel_l2(g, w);
            let tol = tolerance(dtype);
            if err.is_nan() || err > tol {
                return Outcome::Fail(format!(
                    "{name} output {wn} run {run}: relative L2 error {err:e} > {tol:e}\n{text}\n{}",
                    compiled.source()
                ));
            }
        }
    }
    Outcome::Pass
}

fn library_suite(flavor: Flavor, test: &str) {
    if !ready(flavor, test) {
        return;
    }
    let start = Instant::now();
    let cases = cases::library_cases();
    let (mut pass, mut unsupported, mut failures) = (0, Vec::new(), Vec::new());
    let verbose = std::env::var("RLX_WGPU_VERBOSE").is_ok();
    let only = std::env::var("RLX_WGPU_CASE").unwrap_or_default();
    for c in cases.iter().filter(|c| c.name.contains(&only)) {
        if verbose {
            eprintln!("case {} at {:.1}s", c.name, start.elapsed().as_secs_f64());
        }
        match check(flavor, &c.name, &c.graph, &c.inputs, &c.params, c.dtype) {
            Outcome::Pass => pass += 1,
            Outcome::Unsupported => unsupported.push(c.name.clone()),
            Outcome::Fail(e) => failures.push(e),
        }
    }
    println!(
        "{test}: {} library cases on {}: {pass} passed, {} unsupported ({}), {} failed, {:.1}s",
        cases.len(),
        flavor.name(),
        unsupported.len(),
        unsupported.join(", "),
        failures.len(),
        start.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

fn seeds() -> std::ops::Range<u64> {
    if std::env::var("RLX_DIFF_GRAPHS").is_ok() {
        rlx_cpu::random_graph::seeds_from_env()
    } else {
        let first = std::env::var("RLX_DIFF_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        first..first + 30
    }
}

fn random_suite(flavor: Flavor, test: &str, seeds: std::ops::Range<u64>) {
    if !ready(flavor, test) {
        return;
    }
    let start = Instant::now();
    let n = seeds.end - seeds.start;
    let (mut pass, mut unsupported, mut failures) = (0, 0, Vec::new());
    for seed in seeds {
        let r = random_graph(seed);
        match check(
            flavor,
            &format!("seed {seed} {:?}", r.ops),
            &r.graph,
            &r.inputs,
            &r.params,
            DType::F32,
        ) {
            Outcome::Pass => pass += 1,
            Outcome::Unsupported => unsupported += 1,
            Outcome::Fail(e) => failures.push(e),
        }
    }
    println!(
        "{test}: {n} random graphs on {}: {pass} passed, {unsupported} unsupported, {} failed, {:.1}s",
        flavor.name(),
        failures.len(),
        start.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} of {n} differ:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn vulkan_library_ops_match_the_interpreter() {
    library_suite(Flavor::Vulkan, "vulkan_library_ops_match_the_interpreter");
}

#[test]
fn vulkan_random_graphs_match_the_interpreter() {
    random_suite(
        Flavor::Vulkan,
        "vulkan_random_graphs_match_the_interpreter",
        seeds(),
    );
}

#[test]
fn opengl_library_ops_match_the_interpreter() {
    library_suite(Flavor::OpenGl, "opengl_library_ops_match_the_interpreter");
}

#[test]
fn opengl_random_graphs_match_the_interpreter() {
    random_suite(
        Flavor::OpenGl,
        "opengl_random_graphs_match_the_interpreter",
        seeds(),
    );
}

#[test]
fn webgpu_defaults_run_random_graphs() {
    let s = seeds();
    random_suite(
        Flavor::WebGpu,
        "webgpu_defaults_run_random_graphs",
        s.start..s.start + 10,
    );
}

#[test]
fn probing_every_flavor_never_panics() {
    for f in Flavor::ALL {
        let a = rlx_wgpu::probe::availability(f);
        println!("{}: {} {:?}", f.name(), a.available, a.reason);
        if !a.available {
            assert!(a.reason.is_some_and(|r| !r.is_empty()));
        }
    }
}

#[test]
fn too_many_batches_is_a_clear_error() {
    if !ready(Flavor::Vulkan, "too_many_batches_is_a_clear_error") {
        return;
    }
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, rlx_ir::Shape::of(&[70000, 1, 2]));
    let b = g.input("b", DType::F32, rlx_ir::Shape::of(&[70000, 2, 1]));
    let y = g.matmul(a, b).unwrap();
    g.output("y", y);
    let program = lower(Flavor::Vulkan, &g).unwrap();
    let err = match WgpuProgram::compile(
        Flavor::Vulkan,
        program,
        &WeightCache::new(),
        &WgpuOptions::default(),
    ) {
        Ok(_) => panic!("compiled a grid over the limit"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("70000") && err.contains("per dimension"),
        "{err}"
    );
}

#[test]
fn weights_upload_once_and_again_when_replaced() {
    if !ready(
        Flavor::Vulkan,
        "weights_upload_once_and_again_when_replaced",
    ) {
        return;
    }
    let case = cases::library_cases()
        .into_iter()
        .find(|c| c.name == "matmul_bias_relu_f32")
        .unwrap();
    let cache = WeightCache::new();
    let program = WgpuProgram::compile(
        Flavor::Vulkan,
        lower(Flavor::Vulkan, &case.graph).unwrap(),
        &cache,
        &WgpuOptions::default(),
    )
    .unwrap();
    let first = program.run(&case.inputs, &case.params).unwrap();
    let mut params = case.params.clone();
    let w = params["w0"].clone();
    let doubled = Tensor::from_f64(
        DType::F32,
        w.shape(),
        &w.to_f64_vec().iter().map(|v| v * 2.0).collect::<Vec<_>>(),
    )
    .unwrap();
    params.insert("w0".into(), Arc::new(doubled));
    let second = program.run(&case.inputs, &params).unwrap();
    let want = rlx_cpu::run_graph(&case.graph, &case.inputs, &params).unwrap();
    assert!(rlx_cpu::testing::rel_l2(&second[0].1, &want[0].1) < 1e-5);
    assert!(rlx_cpu::testing::rel_l2(&first[0].1, &second[0].1) > 1e-3);
}
