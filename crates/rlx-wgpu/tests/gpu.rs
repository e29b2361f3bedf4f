//! wgpu execution: every library op case and random graphs, run on the `vulkan` and
//! `opengl` adapters (and a smoke run on `webgpu`) and compared with the validation
//! interpreter at DESIGN.md's per-dtype tolerances. Each test prints `SKIPPED: <reason>` and
//! returns when its adapter is absent. The suites run with the adapter's optional features
//! (f16, subgroups, as the probe printed) and the vec4 paths; the `*_fallback` tests run
//! `vulkan` again with all of them off and bounds checks on; `new_paths_*` runs shapes
//! chosen to take every vec4, f16 and subgroup variant.
//!
//! `RLX_DIFF_GRAPHS` sets how many random graphs (default 30 here: lavapipe and llvmpipe
//! run on the CPU); `RLX_DIFF_SEED` the first.

// shared with rlx-cuda's suites; each suite runs the subset its backend serves
#[allow(dead_code)]
#[path = "../../rlx-cuda/tests/support/cases.rs"]
mod cases;

use rlx_cpu::random_graph::random_graph;
use rlx_ir::kernel::KernelProgram;
use rlx_ir::{DType, Graph, ReduceOp, Tensor, UnaryOp};
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

/// Every optional path off, bounds checks on, and a staging pool of 64 KiB (8 KiB chunks),
/// so larger inputs and outputs split across chunks and wait for them.
fn fallback() -> WgpuOptions {
    WgpuOptions {
        checked: true,
        shader_f16: false,
        subgroups: false,
        vec4: false,
        staging_bytes: 64 << 10,
    }
}

/// Compiles and runs twice, comparing both runs with the interpreter.
#[allow(clippy::too_many_arguments)]
fn check(
    flavor: Flavor,
    options: &WgpuOptions,
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
    let compiled = match WgpuProgram::compile(flavor, program, &WeightCache::new(), options) {
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

fn library_suite(flavor: Flavor, options: &WgpuOptions, test: &str) {
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
        match check(
            flavor, options, &c.name, &c.graph, &c.inputs, &c.params, c.dtype,
        ) {
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

fn random_suite(flavor: Flavor, options: &WgpuOptions, test: &str, seeds: std::ops::Range<u64>) {
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
            options,
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
    library_suite(
        Flavor::Vulkan,
        &WgpuOptions::default(),
        "vulkan_library_ops_match_the_interpreter",
    );
}

#[test]
fn vulkan_random_graphs_match_the_interpreter() {
    random_suite(
        Flavor::Vulkan,
        &WgpuOptions::default(),
        "vulkan_random_graphs_match_the_interpreter",
        seeds(),
    );
}

#[test]
fn opengl_library_ops_match_the_interpreter() {
    library_suite(
        Flavor::OpenGl,
        &WgpuOptions::default(),
        "opengl_library_ops_match_the_interpreter",
    );
}

#[test]
fn opengl_random_graphs_match_the_interpreter() {
    random_suite(
        Flavor::OpenGl,
        &WgpuOptions::default(),
        "opengl_random_graphs_match_the_interpreter",
        seeds(),
    );
}

#[test]
fn webgpu_defaults_run_random_graphs() {
    let s = seeds();
    random_suite(
        Flavor::WebGpu,
        &WgpuOptions::default(),
        "webgpu_defaults_run_random_graphs",
        s.start..s.start + 10,
    );
}

#[test]
fn vulkan_library_ops_fallback() {
    library_suite(Flavor::Vulkan, &fallback(), "vulkan_library_ops_fallback");
}

#[test]
fn vulkan_random_graphs_fallback() {
    random_suite(
        Flavor::Vulkan,
        &fallback(),
        "vulkan_random_graphs_fallback",
        seeds(),
    );
}

#[test]
fn probing_every_flavor_never_panics() {
    for f in Flavor::ALL {
        let a = rlx_wgpu::probe::availability(f);
        println!("{}: {} {:?}", f.name(), a.available, a.reason);
        match rlx_wgpu::probe::context(f) {
            Ok(c) => {
                println!(
                    "  shader_f16={} subgroups={} adapter features: {}",
                    c.facts.shader_f16, c.facts.subgroups, c.facts.adapter_features
                );
                if f == Flavor::WebGpu {
                    assert!(!c.facts.shader_f16 && !c.facts.subgroups);
                }
            }
            Err(_) => assert!(a.reason.is_some_and(|r| !r.is_empty())),
        }
    }
}

/// Shapes chosen to take the vec4, f16 and subgroup variants: vec4 elementwise chains
/// with broadcast operands, reductions of each row mapping (short, one subgroup per row,
/// whole workgroup per row, integer), softmax and norms on long rows, GEMMs with and
/// without vec4 tiles and with partial tiles of both sizes, attention over several tiles.
fn new_path_cases() -> Vec<(String, Graph, HashMap<String, Tensor>, DType)> {
    let mut out = Vec::new();
    for dt in [DType::F32, DType::F16] {
        let mut seed = 100;
        let mut inputs = HashMap::new();
        let mut g = Graph::new();
        let mut input = |g: &mut Graph, name: &str, dtype: DType, shape: &[usize]| {
            seed += 1;
            inputs.insert(name.to_string(), Tensor::random(dtype, shape, seed));
            g.input(name, dtype, rlx_ir::Shape::of(shape))
        };
        let x = input(&mut g, "x", dt, &[64, 96]);
        let row = input(&mut g, "row", dt, &[96]);
        let col = input(&mut g, "col", dt, &[64, 1]);
        let y = g.add(x, row).unwrap();
        let y = g.mul(y, col).unwrap();
        let y = g.unary(UnaryOp::Tanh, y).unwrap();
        g.output("ew", y);
        let s = g.reduce(ReduceOp::Sum, x, &[-1], false).unwrap();
        g.output("sum_rows", s);
        let long = input(&mut g, "long", dt, &[3, 3000]);
        let m = g.reduce(ReduceOp::Max, long, &[-1], false).unwrap();
        g.output("max_long", m);
        let mean = g.reduce(ReduceOp::Mean, long, &[-1], true).unwrap();
        g.output("mean_long", mean);
        let sm = g.softmax(long, -1).unwrap();
        g.output("softmax_long", sm);
        let sm2 = g.softmax(x, -1).unwrap();
        g.output("softmax_rows", sm2);
        let scale = input(&mut g, "scale", dt, &[3000]);
        let bias = input(&mut g, "bias", dt, &[3000]);
        let ln = g.layer_norm(long, scale, bias, 1e-5).unwrap();
        g.output("layer_norm_long", ln);
        let rms = g.rms_norm(x, row, 1e-5).unwrap();
        g.output("rms_rows", rms);
        let a = input(&mut g, "a", dt, &[2, 130, 68]);
        let b = input(&mut g, "b", dt, &[68, 132]);
        let c = g.matmul(a, b).unwrap();
        g.output("gemm_vec4", c);
        let a2 = input(&mut g, "a2", dt, &[33, 37]);
        let b2 = input(&mut g, "b2", dt, &[37, 41]);
        let c2 = g.matmul(a2, b2).unwrap();
        g.output("gemm_odd", c2);
        let a3 = input(&mut g, "a3", dt, &[260, 64]);
        let b3 = input(&mut g, "b3", dt, &[64, 256]);
        let c3 = g.matmul(a3, b3).unwrap();
        g.output("gemm_big_tile", c3);
        // Enough batches for the 128x128 tile: vec4 operands, then odd K and N.
        let a4 = input(&mut g, "a4", dt, &[128, 128, 20]);
        let b4 = input(&mut g, "b4", dt, &[128, 20, 132]);
        let c4 = g.matmul(a4, b4).unwrap();
        g.output("gemm_128_tile", c4);
        let a5 = input(&mut g, "a5", dt, &[128, 129, 21]);
        let b5 = input(&mut g, "b5", dt, &[128, 21, 130]);
        let c5 = g.matmul(a5, b5).unwrap();
        g.output("gemm_128_tile_odd", c5);
        // Attention over several key and query tiles, head unrolled into registers.
        let q = input(&mut g, "q", dt, &[1, 2, 130, 32]);
        let k = input(&mut g, "k", dt, &[1, 2, 130, 32]);
        let v = input(&mut g, "v", dt, &[1, 2, 130, 32]);
        let att = g.attention(q, k, v, None, true, None).unwrap();
        g.output("attention", att);
        out.push((format!("new_paths_{dt}"), g, inputs, dt));
    }
    let mut g = Graph::new();
    let xi = g.input("xi", DType::I32, rlx_ir::Shape::of(&[5, 700]));
    let si = g.reduce(ReduceOp::Sum, xi, &[-1], false).unwrap();
    g.output("isum", si);
    let mi = g.reduce(ReduceOp::Min, xi, &[-1], false).unwrap();
    g.output("imin", mi);
    let inputs = HashMap::from([("xi".to_string(), Tensor::random(DType::I32, &[5, 700], 9))]);
    out.push(("new_paths_i32".into(), g, inputs, DType::I32));
    out
}

fn new_paths(flavor: Flavor, options: &WgpuOptions, test: &str) {
    if !ready(flavor, test) {
        return;
    }
    let mut failures = Vec::new();
    for (name, g, inputs, dt) in new_path_cases() {
        match check(flavor, options, &name, &g, &inputs, &HashMap::new(), dt) {
            Outcome::Pass => println!("{test}: {name} passed"),
            Outcome::Unsupported => failures.push(format!("{name}: unsupported")),
            Outcome::Fail(e) => failures.push(e),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn new_paths_match_the_interpreter_on_vulkan() {
    new_paths(
        Flavor::Vulkan,
        &WgpuOptions::default(),
        "new_paths_match_the_interpreter_on_vulkan",
    );
}

#[test]
fn new_paths_match_the_interpreter_on_vulkan_fallback() {
    new_paths(
        Flavor::Vulkan,
        &fallback(),
        "new_paths_match_the_interpreter_on_vulkan_fallback",
    );
}

#[test]
fn new_paths_match_the_interpreter_on_opengl() {
    new_paths(
        Flavor::OpenGl,
        &WgpuOptions::default(),
        "new_paths_match_the_interpreter_on_opengl",
    );
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
