//! ONNX Runtime's contrib ops (`com.microsoft`): `scripts/ref/contrib_ops.py` writes one
//! small model per op and variant with random inputs and onnxruntime's outputs; each is
//! imported (no input values known at import), compiled and run on the CPU, and compared:
//! float outputs by relative L2 error (<= 1e-4), integer outputs within one quantization
//! step. Needs python3 with numpy, onnx and onnxruntime; says SKIPPED otherwise.

use rlx_ir::Tensor;
use rlx_runtime::{CompileOptions, Session};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn python_ok() -> bool {
    Command::new("python3")
        .args(["-c", "import numpy, onnx, onnxruntime"])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/ref/contrib_ops.py")
}

/// `name_N.pb` files of a data set in N order.
fn numbered(dir: &Path, prefix: &str) -> Vec<(String, Tensor)> {
    let mut out = Vec::new();
    for i in 0.. {
        let p = dir.join(format!("{prefix}_{i}.pb"));
        if !p.exists() {
            break;
        }
        out.push(rlx_onnx::load_tensor_pb(&p).unwrap());
    }
    out
}

/// Relative L2 error of `got` against `want`.
fn rel_l2(want: &Tensor, got: &Tensor) -> f64 {
    let (mut num, mut den) = (0.0, 0.0);
    for i in 0..want.numel() {
        let (w, g) = (want.get_f64(i), got.get_f64(i));
        num += (w - g) * (w - g);
        den += w * w;
    }
    (num / den.max(1e-30)).sqrt()
}

/// Runs one case; `Err` says what differs.
fn run_case(dir: &Path) -> Result<String, String> {
    let kind = std::fs::read_to_string(dir.join("kind.txt")).unwrap_or_default();
    let model = rlx_onnx::load(dir.join("model.onnx"), &Default::default())
        .map_err(|e| format!("import: {e}"))?;
    let session = Session::new(rlx_driver::Device::Cpu).unwrap();
    for (name, t) in model.params {
        session.set_param(&name, t);
    }
    // ONNX Runtime runs MatMulNBits on f32 activations below accuracy_level 4, and so do
    // the imported nodes (`int8_activations` false): no global exact mode needed
    let compiled = session
        .compile(&model.graph, CompileOptions::default())
        .map_err(|e| format!("compile: {e}"))?;
    let set = dir.join("test_data_set_0");
    let inputs: HashMap<String, Tensor> = numbered(&set, "input").into_iter().collect();
    let outputs = compiled.run(&inputs).map_err(|e| format!("run: {e}"))?;
    let mut report = Vec::new();
    for (name, want) in numbered(&set, "output") {
        let got = &outputs
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or(format!("output `{name}` missing"))?
            .1;
        if got.shape() != want.shape() || got.dtype() != want.dtype() {
            return Err(format!(
                "output `{name}`: expected {}{:?}, got {}{:?}",
                want.dtype(),
                want.shape(),
                got.dtype(),
                got.shape()
            ));
        }
        if kind == "int" || !want.dtype().is_float() {
            let worst = (0..want.numel())
                .map(|i| (want.get_f64(i) - got.get_f64(i)).abs())
                .fold(0.0, f64::max);
            let limit = if kind == "int" { 1.0 } else { 0.0 };
            if worst > limit {
                return Err(format!("output `{name}`: off by {worst} (limit {limit})"));
            }
            report.push(format!("{name}: max step {worst}"));
        } else {
            let e = rel_l2(&want, got);
            if e.is_nan() || e > 1e-4 {
                return Err(format!("output `{name}`: rel L2 {e:.3e} > 1e-4"));
            }
            report.push(format!("{name}: rel L2 {e:.1e}"));
        }
    }
    Ok(report.join(", "))
}

#[test]
fn contrib_ops_match_onnxruntime() {
    let test = "contrib_ops_match_onnxruntime";
    if !python_ok() {
        rlx_driver::testing::skip(
            test,
            "python3 with numpy, onnx and onnxruntime not available",
        );
        return;
    }
    let out = std::env::temp_dir().join(format!("rlx-contrib-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let status = Command::new("python3")
        .arg(script())
        .arg(&out)
        .output()
        .expect("python3 runs");
    assert!(
        status.status.success(),
        "contrib_ops.py failed: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("model.onnx").exists())
        .collect();
    cases.sort();
    assert!(cases.len() >= 40, "only {} cases written", cases.len());
    let mut failed = Vec::new();
    for dir in &cases {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        match run_case(dir) {
            Ok(r) => println!("ok   {name}: {r}"),
            Err(e) => {
                println!("FAIL {name}: {e}");
                failed.push(name);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&out);
    assert!(
        failed.is_empty(),
        "{} of {} cases failed: {failed:?}",
        failed.len(),
        cases.len()
    );
}

/// A MiniLM-shaped BERT (2 layers here) as ONNX Runtime's transformer optimizer and
/// `quantize_dynamic` rewrite it (`scripts/ref/bert_contrib.py`), run with dynamic
/// `batch`/`sequence` axes bound from the inputs: every variant imports, and matches
/// onnxruntime — f32 variants to 1e-4 relative L2, int8 ones to 2e-2 (activations are
/// quantized at run time, so a value on a rounding boundary may land one step apart).
#[test]
fn bert_contrib_exports_match_onnxruntime() {
    let test = "bert_contrib_exports_match_onnxruntime";
    if !python_ok() {
        rlx_driver::testing::skip(
            test,
            "python3 with numpy, onnx and onnxruntime not available",
        );
        return;
    }
    let out = std::env::temp_dir().join(format!("rlx-bert-contrib-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let script = script().with_file_name("bert_contrib.py");
    let status = Command::new("python3")
        .arg(script)
        .arg(&out)
        .args(["--layers", "2", "--batch", "2", "--seq", "16"])
        .output()
        .expect("python3 runs");
    assert!(
        status.status.success(),
        "bert_contrib.py failed: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    let mut failed = Vec::new();
    for variant in [
        "plain",
        "optimized",
        "optimized_fastgelu",
        "optimized_int8",
        "int8_ort",
    ] {
        let dir = out.join(variant);
        let limit = if variant.contains("int8") { 2e-2 } else { 1e-4 };
        match run_dynamic(&dir, limit) {
            Ok(r) => println!("ok   {variant}: {r}"),
            Err(e) => {
                println!("FAIL {variant}: {e}");
                failed.push(variant);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&out);
    assert!(failed.is_empty(), "variants failed: {failed:?}");
}

/// Runs a case through `rlx::onnx::dynamic` (dims bound from the inputs); every float
/// output within `limit` relative L2.
fn run_dynamic(dir: &Path, limit: f64) -> Result<String, String> {
    let parsed = std::sync::Arc::new(
        rlx_onnx::ParsedModel::open(dir.join("model.onnx")).map_err(|e| e.to_string())?,
    );
    let session = Session::new(rlx_driver::Device::Cpu).unwrap();
    let graph = rlx::onnx::dynamic(&session, parsed, CompileOptions::default());
    let set = dir.join("test_data_set_0");
    let inputs: HashMap<String, Tensor> = numbered(&set, "input").into_iter().collect();
    let outputs = graph.run(&inputs).map_err(|e| e.to_string())?;
    let mut report = Vec::new();
    for (name, want) in numbered(&set, "output") {
        let got = &outputs
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or(format!("output `{name}` missing"))?
            .1;
        if got.shape() != want.shape() {
            return Err(format!(
                "`{name}`: shape {:?} vs {:?}",
                got.shape(),
                want.shape()
            ));
        }
        let e = rel_l2(&want, got);
        if e.is_nan() || e > limit {
            return Err(format!("`{name}`: rel L2 {e:.3e} > {limit:.0e}"));
        }
        report.push(format!("{name}: rel L2 {e:.1e}"));
    }
    Ok(report.join(", "))
}
