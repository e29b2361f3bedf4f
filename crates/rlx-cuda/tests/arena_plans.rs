//! The arena layout of every graph of `rlx_cpu::random_graph::plan_corpus`, planned for an
//! H200 without a GPU, against `tests/snapshots/arena_plans.txt`: a change to buffer
//! planning shows up here as a diff of offsets and arena sizes (`RLX_BLESS=1` rewrites it).

mod support;

use rlx_cuda::codegen::Target;
use rlx_cuda::plan::arena::buffer_plan;
use rlx_cuda::plan::plan_with;
use rlx_opt::buffers::Home;
use std::fmt::Write;
use support::lower_for_cuda;

#[test]
fn arena_layouts_match_the_snapshot() {
    let target = Target::h200();
    let mut text = String::new();
    for (name, graph) in rlx_cpu::random_graph::plan_corpus() {
        let program = match lower_for_cuda(&graph) {
            Ok(p) => p,
            Err(e) => {
                writeln!(text, "== {name}: not lowered: {e}").unwrap();
                continue;
            }
        };
        for merge in [true, false] {
            let plan = match plan_with(&program, &target, merge) {
                Ok(p) => p,
                Err(e) => {
                    writeln!(text, "== {name} (merge {merge}): not planned: {e}").unwrap();
                    continue;
                }
            };
            let buffers = buffer_plan(&program, &plan).unwrap();
            writeln!(
                text,
                "== {name} (merge {merge}): arena {}",
                buffers.arena_bytes
            )
            .unwrap();
            for (b, home) in buffers.homes.iter().enumerate() {
                if let (Home::Arena(off), true) = (home, buffers.roots[b] == b) {
                    writeln!(text, "b{b} @{off}").unwrap();
                }
            }
            for (i, off) in buffers.scratch.iter().enumerate() {
                writeln!(text, "s{i} @{off}").unwrap();
            }
        }
    }
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/arena_plans.txt");
    rlx_cpu::testing::check_snapshot(&path, &text);
}
