//! Shader checks without a device: every kernel of every library case and of the random
//! graphs is planned for the WebGPU default limits and its WGSL validated with naga (the
//! compiler wgpu itself uses), so broken code generation fails on any machine.

#[allow(dead_code)]
#[path = "../../rlx-cuda/tests/support/cases.rs"]
mod cases;

use rlx_ir::kernel::KernelProgram;
use rlx_ir::{Graph, Tensor};
use rlx_wgpu::codegen::Target;

fn lower(graph: &Graph) -> Option<KernelProgram> {
    let fold = |op: &rlx_ir::Op, ins: &[&Tensor]| rlx_cpu::eval_op(op, ins).ok();
    let optimized = rlx_opt::optimize(graph, &fold).ok()?;
    let caps = |op: &rlx_ir::Op, ins: &[&rlx_ir::TensorType]| rlx_wgpu::caps::supports(op, ins);
    let (legal, _) = rlx_opt::legalize(&optimized, "wgpu", &caps).ok()?;
    rlx_opt::lower(&legal).ok()
}

fn validate(name: &str, program: &KernelProgram) -> Vec<String> {
    let plan = match rlx_wgpu::plan::plan(program, &Target::webgpu_defaults()) {
        Ok(p) => p,
        Err(e) => return vec![format!("{name}: plan: {e}")],
    };
    let mut problems = Vec::new();
    for step in &plan.steps {
        let module = match naga::front::wgsl::parse_str(&step.wgsl) {
            Ok(m) => m,
            Err(e) => {
                problems.push(format!(
                    "{name} kernel {}: {}\n{}",
                    step.label,
                    e.emit_to_string(&step.wgsl),
                    step.wgsl
                ));
                continue;
            }
        };
        let mut v = naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::SHADER_FLOAT16_IN_FLOAT32,
        );
        if let Err(e) = v.validate(&module) {
            problems.push(format!(
                "{name} kernel {}: {}\n{}",
                step.label,
                e.emit_to_string(&step.wgsl),
                step.wgsl
            ));
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
