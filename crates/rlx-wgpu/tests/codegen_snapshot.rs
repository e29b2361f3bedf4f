//! The code-generation snapshot: every shader the planner generates for the corpus
//! (`crates/rlx-cuda/tests/support/corpus.rs`) on the three targets of `codegen.rs` (the
//! WebGPU defaults; SHADER_F16 and subgroups; no vec4). With `RLX_SNAPSHOT_DIR=DIR` the
//! shaders are written to `DIR/wgsl/<graph>__<target>.wgsl`, one file per graph and
//! target, so a refactor of the code generators can be checked byte for byte against the
//! snapshot taken before it (`diff -r`). Without it the test only checks that the
//! generation is deterministic. No GPU needed.

#[allow(dead_code)]
#[path = "../../rlx-cuda/tests/support/cases.rs"]
mod cases;
#[allow(dead_code)]
#[path = "../../rlx-cuda/tests/support/corpus.rs"]
mod corpus;

use rlx_ir::kernel::KernelProgram;
use rlx_ir::{Graph, Tensor};
use rlx_wgpu::codegen::Target;

fn lower(graph: &Graph) -> Result<KernelProgram, String> {
    let fold = |op: &rlx_ir::Op, ins: &[&Tensor]| rlx_cpu::eval_op(op, ins).ok();
    let optimized = rlx_opt::optimize(graph, &fold).map_err(|e| e.to_string())?;
    let caps = |op: &rlx_ir::Op, ins: &[&rlx_ir::TensorType]| rlx_wgpu::caps::supports(op, ins);
    let (legal, _) = rlx_opt::legalize(&optimized, "wgpu", &caps).map_err(|e| e.to_string())?;
    rlx_opt::lower(&legal).map_err(|e| e.to_string())
}

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
    let simple_gemm = Target {
        simple_gemm: true,
        ..webgpu.clone()
    };
    vec![
        ("webgpu", webgpu),
        ("native", native),
        ("no_vec4", scalar),
        ("simple_gemm", simple_gemm),
    ]
}

/// Every shader of `program` planned for `target`, as one text.
fn sources(program: &KernelProgram, target: &Target) -> String {
    match rlx_wgpu::plan::plan(program, target) {
        Ok(p) => p
            .steps
            .iter()
            .map(|e| {
                format!(
                    "// step {} {:?} {:?}\n{}\n",
                    e.label, e.workgroups, e.bindings, e.wgsl
                )
            })
            .collect(),
        Err(e) => format!("// plan error: {e}\n"),
    }
}

#[test]
fn generated_wgsl_is_deterministic_and_written_on_request() {
    let dir = std::env::var("RLX_SNAPSHOT_DIR")
        .ok()
        .map(|d| std::path::PathBuf::from(d).join("wgsl"));
    if let Some(d) = &dir {
        std::fs::create_dir_all(d).expect("create the snapshot directory");
    }
    let targets = targets();
    let mut files = 0;
    for (name, graph) in corpus::corpus() {
        let program = match lower(&graph) {
            Ok(p) => p,
            Err(e) => {
                if let Some(d) = &dir {
                    std::fs::write(d.join(format!("{name}.err")), e).expect("write");
                }
                continue;
            }
        };
        for (tname, target) in &targets {
            let text = sources(&program, target);
            match &dir {
                Some(d) => std::fs::write(d.join(format!("{name}__{tname}.wgsl")), &text)
                    .expect("write the snapshot"),
                // generation is a pure function of (program, target): one graph per
                // target is enough to check that without the snapshot
                None if files < targets.len() => {
                    assert_eq!(text, sources(&program, target), "{name} on {tname}")
                }
                None => {}
            }
            files += 1;
        }
    }
    println!("{files} WGSL snapshot files");
    assert!(files > 0);
}
