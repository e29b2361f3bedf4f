//! The arena layout of every graph of `rlx_cpu::random_graph::plan_corpus`, planned for the
//! WebGPU defaults (256-byte offsets) without a device, against
//! `tests/snapshots/arena_plans.txt`: a change to buffer planning shows up here as a diff of
//! offsets and arena sizes (`RLX_BLESS=1` rewrites it).

use rlx_ir::kernel::KernelProgram;
use rlx_ir::{Graph, Tensor};
use rlx_opt::buffers::Home;
use rlx_wgpu::arena::buffer_plan;
use rlx_wgpu::codegen::Target;
use rlx_wgpu::plan::plan;
use std::fmt::Write;

fn lower(graph: &Graph) -> Result<KernelProgram, String> {
    let fold = |op: &rlx_ir::Op, ins: &[&Tensor]| rlx_cpu::eval_op(op, ins).ok();
    let optimized = rlx_opt::optimize(graph, &fold).map_err(|e| e.to_string())?;
    let caps = |op: &rlx_ir::Op, ins: &[&rlx_ir::TensorType]| rlx_wgpu::caps::supports(op, ins);
    let (legal, _) = rlx_opt::legalize(&optimized, "wgpu", &caps).map_err(|e| e.to_string())?;
    rlx_opt::lower(&legal).map_err(|e| e.to_string())
}

#[test]
fn arena_layouts_match_the_snapshot() {
    let target = Target::webgpu_defaults();
    let mut text = String::new();
    for (name, graph) in rlx_cpu::random_graph::plan_corpus() {
        let planned = lower(&graph).and_then(|p| {
            let steps = plan(&p, &target).map_err(|e| e.to_string())?;
            Ok((p, steps))
        });
        let (program, steps) = match planned {
            Ok(p) => p,
            Err(e) => {
                writeln!(text, "== {name}: not planned: {e}").unwrap();
                continue;
            }
        };
        let buffers = buffer_plan(&program, &steps, 256).unwrap();
        writeln!(text, "== {name}: arena {}", buffers.arena_bytes).unwrap();
        for (b, home) in buffers.homes.iter().enumerate() {
            if let (Home::Arena(off), true) = (home, buffers.roots[b] == b) {
                writeln!(text, "b{b} @{off}").unwrap();
            }
        }
        for (i, off) in buffers.scratch.iter().enumerate() {
            writeln!(text, "s{i} @{off}").unwrap();
        }
    }
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/arena_plans.txt");
    rlx_cpu::testing::check_snapshot(&path, &text);
}
