//! The `rlx` command end to end: the demo, devices, report, dump, mem replay, exit codes.

use std::process::{Command, Output};

fn rlx(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rlx"))
        .args(args)
        .output()
        .expect("the rlx binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

#[test]
fn demo_runs_with_high_accuracy_and_json() {
    let o = rlx(&["run", "--device", "cpu", "--iters", "3", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["device"], "cpu");
    let acc = v["accuracy"].as_f64().unwrap();
    assert!(acc >= 0.95, "accuracy {acc}");
    assert_eq!(
        v["outputs"]["logits"]["shape"],
        serde_json::json!([360, 10])
    );
    assert!(v["outputs"]["max_abs_err_vs_reference"].as_f64().unwrap() < 1e-4);
    assert!(v["timings_ms"]["median"].as_f64().unwrap() > 0.0);
}

#[test]
fn demo_text_output_names_device_and_accuracy() {
    let o = rlx(&["run", "--iters", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let s = stdout(&o);
    assert!(s.contains("device    cpu") && s.contains("accuracy"), "{s}");
}

#[test]
fn demo_validates_every_node_against_the_interpreter() {
    let o = rlx(&["run", "--device", "cpu", "--iters", "1", "--validate"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("validate  every node of every run agreed with the CPU interpreter"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn devices_settings_list_every_backends_knobs_with_their_values() {
    let o = Command::new(env!("CARGO_BIN_EXE_rlx"))
        .args(["devices", "--settings", "--json"])
        .env("RLX_CPU_SPIN_US", "7")
        .env_remove("RLX_CPU_ELIDE")
        .output()
        .expect("the rlx binary runs");
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let knobs = v.as_array().unwrap();
    let find = |name: &str| knobs.iter().find(|k| k["name"] == name).cloned();
    let spin = find("RLX_CPU_SPIN_US").expect("the CPU's knobs are listed");
    assert_eq!(spin["value"], "7");
    assert_eq!(spin["default"], "1000");
    assert_eq!(spin["for"], "cpu");
    let elide = find("RLX_CPU_ELIDE").unwrap();
    assert!(elide["value"].is_null(), "{elide}");
    assert_eq!(find("RLX_DISPATCH_REPORT").unwrap()["for"], "runtime");
    for k in knobs {
        assert!(k["name"].as_str().unwrap().starts_with("RLX_"), "{k}");
        assert!(k["help"].as_str().unwrap().len() > 10, "{k}");
    }
    // every backend compiled into this binary lists its knobs
    for (device, knob) in [("cuda", "RLX_CUDA_GRAPHS"), ("vulkan", "RLX_WGPU_CHECKED")] {
        let compiled_in = rlx(&["devices", "--json"]);
        let devices: serde_json::Value = serde_json::from_str(&stdout(&compiled_in)).unwrap();
        let registered = devices
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["device"] == device && d["registered"] == true);
        assert_eq!(find(knob).is_some(), registered, "{device}: {knob}");
    }
    let text = rlx(&["devices", "--settings"]);
    assert!(stdout(&text).contains("RLX_CPU_THREADS"));
}

#[test]
fn devices_json_lists_all_fifteen() {
    let o = rlx(&["devices", "--json"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let arr = v.as_array().unwrap();
    assert_eq!(arr.len(), 15);
    for d in arr {
        for key in ["device", "registered", "available", "reason"] {
            assert!(d.get(key).is_some(), "{d} lacks {key}");
        }
        // Real backends may find hardware (or a software GPU such as lavapipe); every other
        // device is a seam that says why it is absent.
        let real = ["cpu", "cuda", "gpu", "vulkan", "opengl", "webgpu"];
        if d["available"] == false {
            assert!(d["reason"].as_str().unwrap().len() > 10, "{d}");
        } else {
            assert!(real.contains(&d["device"].as_str().unwrap()), "{d}");
        }
    }
    assert_eq!(arr[0]["device"], "cpu");
    assert_eq!(arr[0]["available"], true);
}

#[test]
fn report_and_dump_stages() {
    let o = rlx(&["report", "--device", "cpu"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let s = stdout(&o);
    assert!(s.contains("conv2d") && s.contains("native"), "{s}");
    let o = rlx(&["report", "--json", "--bind", "batch=4"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let _: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    for (stage, needle) in [
        ("graph", "conv2d"),
        ("optimized", "matmul"),
        ("kernels", "library"),
    ] {
        let o = rlx(&["dump", "--stage", stage]);
        assert!(o.status.success(), "{stage}: {}", stderr(&o));
        assert!(stdout(&o).contains(needle), "{stage}: {}", stdout(&o));
    }
}

#[test]
fn dump_after_a_named_pass() {
    let o = rlx(&["dump", "--after", "fold"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let s = stdout(&o);
    assert!(s.contains("conv2d") && s.contains("input"), "{s}");
    let o = rlx(&["dump", "--after", "dce", "--device", "cpu"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("conv2d"), "{}", stdout(&o));
    let o = rlx(&["dump", "--after", "nope"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        [
            "nope",
            "fold",
            "cse",
            "simplify",
            "dce",
            "elide_views",
            "merge_siblings",
            "gemm_norm",
        ]
        .iter()
        .all(|name| e.contains(name)),
        "{e}"
    );
    // a kernel-IR pass: the kernel program, then what the device's passes decided (the
    // demo has no attention, so nothing)
    let o = rlx(&["dump", "--after", "merge_siblings", "--device", "cpu"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let s = stdout(&o);
    assert!(
        s.contains("library") && s.ends_with("# kernel passes on cpu up to merge_siblings:\n"),
        "{s}"
    );
    let o = rlx(&["dump", "--after", "fold", "--stage", "kernels"]);
    assert!(!o.status.success(), "--after and --stage conflict");
}

#[test]
fn errors_and_exit_codes() {
    let o = rlx(&["run", "--device", "quantum"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("unknown device `quantum`"),
        "{}",
        stderr(&o)
    );
    // without a GPU (or driver) CUDA is one error line naming it; with one, the demo runs
    let o = rlx(&["run", "--device", "cuda"]);
    if !o.status.success() {
        assert_eq!(o.status.code(), Some(1));
        let e = stderr(&o);
        assert!(
            e.starts_with("error: ") && e.contains("cuda") && e.lines().count() == 1,
            "{e}"
        );
    }
    let o = rlx(&["run", "no/such/model.onnx"]);
    assert_eq!(o.status.code(), Some(1));
    let o = rlx(&["frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
    let o = rlx(&["dump", "--stage", "nope"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn mem_replay_reports_and_rejects_malformed_traces() {
    let dir = std::env::temp_dir().join(format!("rlx-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.jsonl");
    let mut lines = String::new();
    for i in 0..50u64 {
        lines += &format!(
            "{{\"op\":\"alloc\",\"id\":{i},\"bytes\":{}}}\n",
            1000 + i * 4096
        );
        if i % 3 == 0 {
            lines += &format!("{{\"op\":\"free\",\"id\":{i}}}\n");
        }
    }
    std::fs::write(&good, lines).unwrap();
    let o = rlx(&["mem", "replay", good.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    for key in [
        "events",
        "peak_live_bytes",
        "peak_reserved_bytes",
        "fragmentation",
        "provider_allocs",
        "ns_per_event",
    ] {
        assert!(v.get(key).is_some(), "missing {key}: {v}");
    }
    assert_eq!(v["events"], 67);

    let bad = dir.join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"op\":\"alloc\",\"id\":1,\"bytes\":10}\n{\"op\":\"free\",\"id\":7}\n",
    )
    .unwrap();
    let o = rlx(&["mem", "replay", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("bad.jsonl:2:") && stderr(&o).contains("unknown id 7"),
        "{}",
        stderr(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);

    // a generated trace needs no file; an unknown preset names the ones there are
    let o = rlx(&["mem", "replay", "gen:0.5b-long-decode", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(v["events"].as_u64().unwrap() > 10_000, "{v}");
    let o = rlx(&["mem", "replay", "gen:70b"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("gen:70b") && stderr(&o).contains("13b"),
        "{}",
        stderr(&o)
    );
}

/// A seam has no backend to compile with, yet `rlx report` says where every node would run
/// (nowhere: 0 ops supported) and why the device is not available, and exits 0.
#[test]
fn report_on_a_seam_lists_every_node_unsupported() {
    let o = rlx(&["report", "--device", "xdna"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let s = stdout(&o);
    assert!(s.contains("0 native, 0 decomposed"), "{s}");
    assert!(
        s.contains("not available") && s.contains("unsupported"),
        "{s}"
    );
    let o = rlx(&["report", "--device", "xdna", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_str::<serde_json::Value>(&stdout(&o)).expect("JSON report");
}
