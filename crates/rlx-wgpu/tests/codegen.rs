//! Shader checks without a device: every kernel of every library case and of the random
//! graphs is planned for three targets (the WebGPU defaults; an adapter with SHADER_F16 and
//! subgroups; no vec4 paths) and its WGSL validated with naga (the compiler wgpu itself
//! uses), so broken code generation fails on any machine. The variant tests check that the
//! f16, subgroup and vec4 forms appear exactly when the target allows them.

#[allow(dead_code)]
#[path = "../../rlx-cuda/tests/support/cases.rs"]
mod cases;

use rlx_ir::kernel::KernelProgram;
use rlx_ir::{BinaryOp, DType, Graph, ReduceOp, Shape, Tensor, UnaryOp};
use rlx_wgpu::codegen::Target;

fn lower(graph: &Graph) -> Option<KernelProgram> {
    let fold = |op: &rlx_ir::Op, ins: &[&Tensor]| rlx_cpu::eval_op(op, ins).ok();
    let optimized = rlx_opt::optimize(graph, &fold).ok()?;
    let caps = |op: &rlx_ir::Op, ins: &[&rlx_ir::TensorType]| rlx_wgpu::caps::supports(op, ins);
    let (legal, _) = rlx_opt::legalize(&optimized, "wgpu", &caps).ok()?;
    rlx_opt::lower(&legal).ok()
}

/// The targets every shader is validated for.
fn targets() -> Vec<(&'static str, Target)> {
    let webgpu = Target::webgpu_defaults();
    let native = Target {
        shader_f16: true,
        subgroups: true,
        max_workgroup_storage: 32768,
        max_invocations: 1024,
        ..webgpu.clone()
    };
    let scalar = Target {
        vec4: false,
        ..webgpu.clone()
    };
    vec![
        ("webgpu", webgpu),
        ("f16+subgroups", native),
        ("no vec4", scalar),
    ]
}

fn shaders(program: &KernelProgram, target: &Target) -> Result<Vec<(String, String)>, String> {
    let plan = rlx_wgpu::plan::plan(program, target).map_err(|e| e.to_string())?;
    Ok(plan.steps.into_iter().map(|s| (s.label, s.wgsl)).collect())
}

fn validate(name: &str, program: &KernelProgram) -> Vec<String> {
    let mut problems = Vec::new();
    for (tname, target) in targets() {
        let steps = match shaders(program, &target) {
            Ok(s) => s,
            Err(e) => {
                problems.push(format!("{name} ({tname}): plan: {e}"));
                continue;
            }
        };
        for (label, wgsl) in &steps {
            let module = match naga::front::wgsl::parse_str(wgsl) {
                Ok(m) => m,
                Err(e) => {
                    problems.push(format!(
                        "{name} ({tname}) kernel {label}: {}\n{wgsl}",
                        e.emit_to_string(wgsl)
                    ));
                    continue;
                }
            };
            let mut caps = naga::valid::Capabilities::SHADER_FLOAT16_IN_FLOAT32;
            if target.shader_f16 {
                caps |= naga::valid::Capabilities::SHADER_FLOAT16;
            }
            if target.subgroups {
                caps |= naga::valid::Capabilities::SUBGROUP;
            }
            let mut v = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps);
            v.subgroup_stages(naga::valid::ShaderStages::COMPUTE);
            v.subgroup_operations(naga::valid::SubgroupOperationSet::all());
            if let Err(e) = v.validate(&module) {
                problems.push(format!(
                    "{name} ({tname}) kernel {label}: {}\n{wgsl}",
                    e.emit_to_string(wgsl)
                ));
            }
        }
    }
    problems
}

#[test]
fn every_library_case_emits_valid_wgsl() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for c in cases::library_cases() {
        if let Some(p) = lower(&c.graph) {
            checked += 1;
            problems.extend(validate(&c.name, &p));
        }
    }
    println!("{checked} library cases validated");
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

#[test]
fn random_graphs_emit_valid_wgsl() {
    let mut problems = Vec::new();
    for seed in 0..60 {
        let r = rlx_cpu::random_graph::random_graph(seed);
        if let Some(p) = lower(&r.graph) {
            problems.extend(validate(&format!("seed {seed}"), &p));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// All shaders of `graph` for `target`, joined.
fn wgsl(graph: &Graph, target: &Target) -> String {
    let p = lower(graph).expect("lowers");
    let problems = validate("variant", &p);
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
    shaders(&p, target)
        .expect("plans")
        .into_iter()
        .map(|(_, w)| w)
        .collect::<Vec<_>>()
        .join("\n")
}

fn with(f: impl FnOnce(&mut Target)) -> Target {
    let mut t = Target::webgpu_defaults();
    f(&mut t);
    t
}

#[test]
fn f16_is_a_wgsl_type_only_when_the_target_has_it() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F16, Shape::of(&[64, 32]));
    let b = g.input("b", DType::F16, Shape::of(&[32, 48]));
    let c = g.matmul(a, b).unwrap();
    let y = g.unary(UnaryOp::Tanh, c).unwrap();
    let z = g.add(y, y).unwrap();
    g.output("z", z);
    let native = wgsl(&g, &with(|t| t.shader_f16 = true));
    assert!(native.starts_with("enable f16;"), "{native}");
    assert!(native.contains("array<vec4<f16>>"), "{native}");
    assert!(native.contains("array<f16>") || native.contains("vec4<f16>"));
    assert!(!native.contains("atomicOr"), "{native}");
    let packed = wgsl(&g, &Target::webgpu_defaults());
    assert!(
        !packed.contains("f16>") && !packed.contains("enable f16"),
        "{packed}"
    );
    assert!(packed.contains("atomicOr"), "{packed}");
}

#[test]
fn reductions_use_subgroups_only_when_the_target_has_them() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, Shape::of(&[6, 300]));
    let s = g.reduce(ReduceOp::Sum, x, &[-1], false).unwrap();
    g.output("s", s);
    let long = g.input("long", DType::F32, Shape::of(&[2, 5000]));
    let m = g.reduce(ReduceOp::Max, long, &[-1], false).unwrap();
    g.output("m", m);
    let sm = g.softmax(x, -1).unwrap();
    g.output("sm", sm);
    let sub = wgsl(&g, &with(|t| t.subgroups = true));
    for want in [
        "subgroupAdd",
        "subgroupMax",
        "subgroup_size",
        "num_subgroups",
    ] {
        assert!(sub.contains(want), "{want}:\n{sub}");
    }
    let plain = wgsl(&g, &Target::webgpu_defaults());
    assert!(!plain.contains("subgroup"), "{plain}");
    assert!(plain.contains("workgroupBarrier"), "{plain}");
}

#[test]
fn contiguous_elementwise_uses_vec4_only_when_it_can() {
    let chain = |n: usize, dtype: DType| {
        let mut g = Graph::new();
        let x = g.input("x", dtype, Shape::of(&[n]));
        let s = g.scalar(dtype, 1.5);
        let y = g.mul(x, s).unwrap();
        let y = g.unary(UnaryOp::Tanh, y).unwrap();
        g.output("y", y);
        g
    };
    let on = wgsl(&chain(4096, DType::F32), &Target::webgpu_defaults());
    assert!(on.contains("array<vec4<f32>>"), "{on}");
    let off = wgsl(&chain(4096, DType::F32), &with(|t| t.vec4 = false));
    assert!(!off.contains("vec4"), "{off}");
    let odd = wgsl(&chain(4095, DType::F32), &Target::webgpu_defaults());
    assert!(!odd.contains("vec4"), "{odd}");
    let half = wgsl(&chain(4096, DType::F16), &with(|t| t.shader_f16 = true));
    assert!(half.contains("array<vec4<f16>>"), "{half}");
    let packed = wgsl(&chain(4096, DType::F16), &Target::webgpu_defaults());
    assert!(!packed.contains("vec4"), "{packed}");
}

/// A vec4 elementwise kernel of five or more inputs (an unfolded batch norm and ReLU, as
/// DenseNet's) names its loads apart from its loop counter: it validates and stores by the
/// counter.
#[test]
fn vec4_kernels_with_many_inputs_validate() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, Shape::of(&[1, 4, 8, 8]));
    let mut y = x;
    for (i, op) in [
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Add,
        BinaryOp::Mul,
        BinaryOp::Add,
    ]
    .into_iter()
    .enumerate()
    {
        let p = g.input(&format!("p{i}"), DType::F32, Shape::of(&[1, 4, 1, 1]));
        y = g.binary(op, y, p).unwrap();
    }
    let y = g.unary(UnaryOp::Relu, y).unwrap();
    g.output("y", y);
    let text = wgsl(&g, &Target::webgpu_defaults());
    assert!(
        text.contains("let v5 = ") && text.contains("array<vec4<f32>>"),
        "{text}"
    );
}
