//! The ONNX model zoo (issue 24): 27 architectures exported by PyTorch (`torch.onnx.export`
//! of transformers and torchvision models with random weights and dynamic axes; made by
//! `scripts/zoo/zoo.py export`, committed under `tests/zoo/`) and 5 of them also as ONNX
//! Runtime's transformer optimizer and `quantize_dynamic` write them (37 models), each run by
//! `rlx run` at two shapes and compared with ONNX Runtime's outputs saved at export (rel L2
//! ≤ 1e-3; the int8 ones as `zoo.py check` says).
//! On the CPU always; on every other available device with real hardware (a software
//! adapter such as llvmpipe takes minutes: set `RLX_ZOO_SOFTWARE=1` to include it).
//! Needs python3 with numpy (the comparison); says SKIPPED otherwise.

use rlx_driver::testing::skip;
use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn check(device: &str) -> (bool, String) {
    let o = Command::new("python3")
        .arg(root().join("../../scripts/zoo/zoo.py"))
        .args(["check"])
        .arg(root().join("tests/zoo"))
        .arg(env!("CARGO_BIN_EXE_rlx"))
        .arg(device)
        .output()
        .expect("python3 runs");
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    (o.status.success(), text)
}

#[test]
fn zoo_matches_onnx_runtime_on_every_device() {
    let numpy = Command::new("python3")
        .args(["-c", "import numpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !numpy {
        skip(
            "rlx::zoo_matches_onnx_runtime_on_every_device",
            "python3 with numpy not available",
        );
        return;
    }
    let software = std::env::var("RLX_ZOO_SOFTWARE").is_ok_and(|v| v == "1");
    let mut devices = vec!["cpu".to_string()];
    for s in rlx_runtime::device_statuses() {
        let name = s.device.name();
        if name == "cpu" || !s.available || !matches!(name, "cuda" | "vulkan") {
            continue;
        }
        let detail = s
            .info
            .as_ref()
            .map(|i| format!("{i:?}"))
            .unwrap_or_default();
        if detail.contains("llvmpipe") && !software {
            skip(
                &format!("rlx::zoo_matches_onnx_runtime_on_every_device[{name}]"),
                "software adapter (llvmpipe): set RLX_ZOO_SOFTWARE=1 to run the zoo on it",
            );
            continue;
        }
        devices.push(name.to_string());
    }
    let mut failures = Vec::new();
    for d in &devices {
        let (ok, out) = check(d);
        let cases = out.lines().filter(|l| l.contains("\"model\"")).count();
        assert!(
            cases >= 74,
            "{d}: {cases} cases, expected 37 models x 2 shapes\n{out}"
        );
        if !ok {
            failures.extend(
                out.lines()
                    .filter(|l| l.contains("\"ok\": false"))
                    .map(|l| format!("{d}: {l}")),
            );
        }
        eprintln!("{}", out.lines().last().unwrap_or_default());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
