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

mod support;

use rlx_ir::{Op, Tensor};
use rlx_onnx::proto::TensorProto;
use rlx_runtime::{CompileOptions, Session};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use support::*;

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

/// A scalar initializer of ONNX element type `elem` (2: u8, 3: i8) holding `v`.
fn byte_init(name: &str, elem: i32, dims: &[i64], v: &[u8]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(elem),
        raw_data: Some(v.to_vec().into()),
        ..Default::default()
    }
}

/// Operands the integer convolutions do not take are import errors naming the node and
/// the operand, never panics.
#[test]
fn wrong_operands_are_errors_that_name_them() {
    let import = |nodes, inputs, inits| {
        let m = model(nodes, inputs, vec![value("y", 2, &[1, 4, 3, 3])], inits);
        rlx_onnx::load_bytes(bytes(&m), None, "qconv.onnx", &Default::default())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    let x = || value("x", 2, &[1, 2, 5, 5]);
    let w = || byte_init("w", 3, &[4, 2, 3, 3], &[1; 72]);
    // an i8 zero point for a u8 input
    let err = import(
        vec![node("ConvInteger", "ci", &["x", "w", "xz"], &["y"])],
        vec![x()],
        vec![w(), byte_init("xz", 3, &[], &[0])],
    );
    assert!(err.contains("x_zero_point must be u8"), "{err}");
    assert!(err.contains("ci"), "{err}");
    // weight zero points neither one value nor one per output channel
    let err = import(
        vec![node("ConvInteger", "ci", &["x", "w", "", "wz"], &["y"])],
        vec![x()],
        vec![w(), byte_init("wz", 3, &[3], &[0, 1, 2])],
    );
    assert!(err.contains("one per output channel (4)"), "{err}");
    // a float input
    let err = import(
        vec![node("ConvInteger", "ci", &["x", "w"], &["y"])],
        vec![value("x", 1, &[1, 2, 5, 5])],
        vec![w()],
    );
    assert!(err.contains("must be u8 or i8"), "{err}");
    // QLinearConv with an integer scale and a bias of the wrong length
    let q = |scale: TensorProto, bias: &[u8]| {
        let mut inits = vec![
            w(),
            f32_init("xs", &[], &[0.1]),
            byte_init("xz", 2, &[], &[3]),
            f32_init("ws", &[4], &[0.1, 0.2, 0.3, 0.4]),
            byte_init("wz", 3, &[4], &[0; 4]),
            scale,
            byte_init("yz", 2, &[], &[7]),
        ];
        let mut ins = vec!["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"];
        if !bias.is_empty() {
            inits.push(byte_init("b", 6, &[(bias.len() / 4) as i64], bias));
            ins.push("b");
        }
        import(
            vec![node("QLinearConv", "qc", &ins, &["y"])],
            vec![x()],
            inits,
        )
    };
    let err = q(byte_init("ys", 2, &[], &[1]), &[]);
    assert!(err.contains("y_scale must be a float tensor"), "{err}");
    let err = q(f32_init("ys", &[], &[0.5]), &[0; 12]);
    assert!(err.contains("B must be i32[4]"), "{err}");
    let ok = q(f32_init("ys", &[], &[0.5]), &[0; 16]);
    assert!(ok.is_empty(), "{ok}");
}
