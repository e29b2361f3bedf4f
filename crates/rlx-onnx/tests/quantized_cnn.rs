//! A small CNN quantized by onnxruntime (`scripts/ref/qconv_cnn.py`, committed under
//! `tests/fixtures/qconv/`): `qlinear` (quantize_static, QOperator: QLinearConv with
//! per-channel i8 weights, u8 activations) and `convinteger` (quantize_dynamic:
//! DynamicQuantizeLinear + ConvInteger), imported, compiled for the CPU (the convolutions
//! on the integer kernels) and compared with onnxruntime's logits:
//! - against the stored outputs, always;
//! - against onnxruntime run now on fresh random inputs, when python3 has numpy, onnx and
//!   onnxruntime (otherwise SKIPPED).
//!
//! Tolerance: the largest logit difference at most 1e-4 of the largest logit. The integer
//! convolutions requantize as ONNX Runtime does (f32 product, round half to even), so the
//! quantized activations agree exactly; what is left is float rounding in the parts
//! outside them (the dynamic scales, average pooling, dequantization).

use rlx_ir::{Op, Tensor};
use rlx_runtime::{CompileOptions, Session};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const MODELS: [&str; 2] = ["qlinear", "convinteger"];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qconv")
}

/// Runs `name`'s model on the input in `dir` and returns (its logits, the expected ones).
fn run(name: &str, dir: &Path) -> (Tensor, Tensor) {
    let model = rlx_onnx::load(
        fixtures().join(name).join("model.onnx"),
        &Default::default(),
    )
    .unwrap_or_else(|e| panic!("{name}: import: {e}"));
    // the convolutions import as the integer op, not a widened float one
    let ops: Vec<&Op> = model.graph.nodes().iter().map(|n| &n.op).collect();
    assert!(
        ops.iter().any(|op| matches!(op, Op::ConvInteger(_))),
        "{name}: no conv_integer"
    );
    assert!(
        !ops.iter().any(|op| matches!(op, Op::Conv2d(_))),
        "{name}: a float convolution is left"
    );
    let session = Session::new(rlx_driver::Device::Cpu).unwrap();
    for (n, t) in model.params {
        session.set_param(&n, t);
    }
    let compiled = session
        .compile(&model.graph, CompileOptions::default())
        .unwrap_or_else(|e| panic!("{name}: compile: {e}"));
    let (x_name, x) = rlx_onnx::load_tensor_pb(dir.join("input_0.pb")).unwrap();
    let (y_name, want) = rlx_onnx::load_tensor_pb(dir.join("output_0.pb")).unwrap();
    let inputs: HashMap<String, Tensor> = [(x_name, x)].into();
    let outputs = compiled.run(&inputs).unwrap();
    let got = outputs
        .into_iter()
        .find(|(n, _)| *n == y_name)
        .unwrap_or_else(|| panic!("{name}: no output `{y_name}`"))
        .1;
    (got, want)
}

/// The largest difference relative to the largest expected value.
fn check(name: &str, got: &Tensor, want: &Tensor) {
    assert_eq!(got.shape(), want.shape(), "{name}");
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    let top = w.iter().fold(0f64, |m, v| m.max(v.abs()));
    let diff = g
        .iter()
        .zip(&w)
        .fold(0f64, |m, (a, b)| m.max((a - b).abs()));
    assert!(top > 0.0, "{name}: zero logits");
    println!("{name}: max |rlx - ort| = {diff:.3e} (largest logit {top:.3})");
    assert!(diff <= 1e-4 * top, "{name}: {g:?} vs {w:?}");
}

#[test]
fn quantized_cnns_match_stored_onnxruntime_outputs() {
    for name in MODELS {
        let (got, want) = run(name, &fixtures().join(name).join("test_data_set_0"));
        check(name, &got, &want);
    }
}

#[test]
fn quantized_cnns_match_onnxruntime_on_fresh_inputs() {
    let ok = Command::new("python3")
        .args(["-c", "import numpy, onnx, onnxruntime"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        println!("SKIPPED: python3 with numpy, onnx and onnxruntime not found");
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/ref/qconv_cnn.py");
    let dir = std::env::temp_dir().join(format!("rlx-qconv-{}", std::process::id()));
    for seed in [1, 2, 3] {
        let out = Command::new("python3")
            .arg(&script)
            .args(["live", dir.to_str().unwrap(), &seed.to_string()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for name in MODELS {
            let (got, want) = run(name, &dir.join(name));
            check(name, &got, &want);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
