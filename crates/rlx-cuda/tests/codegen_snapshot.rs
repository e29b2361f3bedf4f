//! The code-generation snapshot: every kernel the planner generates for the corpus
//! (`support/corpus.rs`) on several targets, and every loop kernel emitted directly in its
//! other forms (without `__restrict__`, walking back to front). With `RLX_SNAPSHOT_DIR=DIR`
//! the sources are written to `DIR/cuda/<graph>__<target>.cu`, one file per graph and
//! target, so a refactor of the code generators can be checked byte for byte against the
//! snapshot taken before it (`diff -r`). Without it the test only checks that the
//! generation is deterministic. No GPU needed.

mod support;

use rlx_cuda::codegen::{loops, Target};
use rlx_cuda::plan::{plan, Step};
use rlx_cuda::settings::Tuning;
use rlx_ir::kernel::{Kernel, KernelProgram};
use support::corpus::corpus;
use support::lower_for_cuda;

/// The targets every graph is planned for: an H200 with every switch at its default, and
/// variants that turn on the other code paths.
fn targets() -> Vec<(&'static str, Target)> {
    let h200 = Target {
        walk_back_above: Some(50 * 1024 * 1024),
        flash_warps: 4,
        flash_keys: 0,
        flash_resident: true,
        a_prologue: false,
        tuning: Tuning::default(),
        ..Target::h200()
    };
    let with = |f: &dyn Fn(&mut Target)| {
        let mut t = h200.clone();
        f(&mut t);
        t
    };
    vec![
        ("h200", h200.clone()),
        ("no_flash", with(&|t| t.flash_attention = false)),
        ("a_prologue", with(&|t| t.a_prologue = true)),
        ("attn_gemm", with(&|t| t.tuning.attn_gemm = Some(true))),
        ("sm80", with(&|t| t.arch = "sm_80".into())),
    ]
}

/// Every kernel source of `program` planned for `target`, and its loop kernels emitted in
/// their other forms, as one text.
fn sources(program: &KernelProgram, target: &Target) -> String {
    let mut s = String::new();
    match plan(program, target) {
        Ok(p) => {
            for step in &p.steps {
                match step {
                    Step::Kernel(k) => {
                        s += &format!("// step {} {:?}\n{}\n", k.label, k.launch, k.source)
                    }
                    Step::Gemm(g) => s += &format!("// step {} gemm\n", g.label),
                }
            }
            for c in &p.choices {
                for k in &c.fused {
                    s += &format!(
                        "// choice {}..={} {} {:?}\n{}\n",
                        c.first, c.last, k.label, k.launch, k.source
                    );
                }
            }
        }
        Err(e) => s += &format!("// plan error: {e}\n"),
    }
    for k in &program.kernels {
        if let Kernel::Loop(l) = k {
            for (restrict, back) in [(false, false), (true, true)] {
                match loops::emit(l, target, restrict, back) {
                    Ok(e) => {
                        s += &format!(
                            "// loop {} restrict={restrict} back={back} {:?}\n{}\n",
                            e.label, e.launch, e.source
                        )
                    }
                    Err(e) => s += &format!("// loop {} error: {e}\n", l.name),
                }
            }
        }
    }
    s
}

#[test]
fn generated_cuda_c_is_deterministic_and_written_on_request() {
    let dir = std::env::var("RLX_SNAPSHOT_DIR")
        .ok()
        .map(|d| std::path::PathBuf::from(d).join("cuda"));
    if let Some(d) = &dir {
        std::fs::create_dir_all(d).expect("create the snapshot directory");
    }
    let targets = targets();
    let mut files = 0;
    for (name, graph) in corpus() {
        let program = match lower_for_cuda(&graph) {
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
                Some(d) => std::fs::write(d.join(format!("{name}__{tname}.cu")), &text)
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
    println!("{files} CUDA snapshot files");
    assert!(files > 0);
}
