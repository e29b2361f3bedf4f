//! The arena layout of every graph of `random_graph::plan_corpus`, compiled on one thread,
//! against `tests/snapshots/arena_plans.txt`: a change to buffer planning shows up as a
//! diff of homes, offsets and arena sizes (`RLX_BLESS=1` rewrites it). Kernel scratch sizes
//! depend on the CPU's GEMM path, so the snapshot holds for CPUs with AVX2 and FMA (and
//! the default settings).

use super::memory::Loc;
use super::{CpuOptions, CpuProgram};
use rlx_ir::Tensor;
use std::fmt::Write;

#[test]
fn arena_layouts_match_the_snapshot() {
    let test = "arena_layouts_match_the_snapshot";
    if !super::library::packed_gemm::supported() {
        let reason = "the snapshot's scratch sizes are those of the packed GEMM (AVX2 and FMA)";
        rlx_driver::testing::skip(test, reason);
        return;
    }
    if !crate::settings::ELIDE.switch() {
        let reason = "the snapshot's lifetimes are those with attention's copies elided";
        rlx_driver::testing::skip(test, reason);
        return;
    }
    let options = CpuOptions {
        threads: Some(1),
        ..CpuOptions::default()
    };
    let mut text = String::new();
    for (name, graph) in crate::random_graph::plan_corpus() {
        let fold = |op: &rlx_ir::Op, ins: &[&Tensor]| crate::eval_op(op, ins).ok();
        let program = rlx_opt::optimize(&graph, &fold)
            .map_err(|e| e.to_string())
            .and_then(|g| rlx_opt::lower(&g).map_err(|e| e.to_string()));
        let compiled =
            program.and_then(|p| CpuProgram::compile(p, &options).map_err(|e| e.to_string()));
        let compiled = match compiled {
            Ok(c) => c,
            Err(e) => {
                writeln!(text, "== {name}: not compiled: {e}").unwrap();
                continue;
            }
        };
        writeln!(text, "== {name}: arena {}", compiled.arena_bytes).unwrap();
        let roots = compiled.locs.iter().enumerate();
        for (b, loc) in roots.filter(|&(b, _)| compiled.info.roots[b] == b) {
            match loc {
                Loc::Arena(off) => writeln!(text, "b{b} @{off}").unwrap(),
                Loc::Owned(i) => writeln!(text, "b{b} owned {i}").unwrap(),
                Loc::Leaf | Loc::Unused => {}
            }
        }
        for (i, step) in compiled.steps.iter().enumerate() {
            writeln!(text, "k{i} scratch @{}", step.scratch).unwrap();
        }
    }
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/arena_plans.txt");
    crate::testing::check_snapshot(&path, &text);
}
