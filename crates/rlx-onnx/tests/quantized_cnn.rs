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

/// A 3-D `QLinearConv` (u8 input, i8 weights with per-channel scales, i32 bias, pads of 1)
/// against the integer convolution done here: exact sums, the scale `x_scale * w_scale /
/// y_scale` applied in f32, rounded half to even, plus y's zero point, saturated to u8.
#[test]
fn qlinear_conv_3d_matches_the_integer_reference() {
    let (c, m, d, h, w, k) = (2usize, 3usize, 4usize, 5usize, 5usize, 3usize);
    let mut rng = rlx_ir::SplitMix64(7);
    let mut byte = || (rng.next_u64() % 256) as u8;
    let x: Vec<u8> = (0..c * d * h * w).map(|_| byte()).collect();
    let wq: Vec<u8> = (0..m * c * k * k * k).map(|_| byte()).collect();
    let bias: Vec<i32> = vec![1200, -3400, 77];
    let (xs, xz, ys, yz) = (0.02f32, 128u8, 0.9f32, 100u8);
    let ws = [0.011f32, 0.017, 0.023];
    let bias_bytes: Vec<u8> = bias.iter().flat_map(|v| v.to_le_bytes()).collect();
    let inits = vec![
        byte_init(
            "w",
            3,
            &[m as i64, c as i64, k as i64, k as i64, k as i64],
            &wq,
        ),
        f32_init("xs", &[], &[xs]),
        byte_init("xz", 2, &[], &[xz]),
        f32_init("ws", &[m as i64], &ws),
        byte_init("wz", 3, &[], &[0]),
        f32_init("ys", &[], &[ys]),
        byte_init("yz", 2, &[], &[yz]),
        byte_init("b", 6, &[m as i64], &bias_bytes),
    ];
    let mut qc = node(
        "QLinearConv",
        "qc3",
        &["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
        &["y"],
    );
    qc.attribute.push(ints_attr("pads", &[1; 6]));
    let dims = [1, m as i64, d as i64, h as i64, w as i64];
    let g = model(
        vec![qc],
        vec![value("x", 2, &[1, c as i64, d as i64, h as i64, w as i64])],
        vec![value("y", 2, &dims)],
        inits,
    );
    let imported = rlx_onnx::load_bytes(bytes(&g), None, "qconv3d.onnx", &Default::default())
        .unwrap_or_else(|e| panic!("import: {e}"));
    let session = Session::new(rlx_driver::Device::Cpu).unwrap();
    for (n, t) in imported.params {
        session.set_param(&n, t);
    }
    let compiled = session
        .compile(&imported.graph, CompileOptions::default())
        .unwrap();
    let data = rlx_ir::TensorData::from_le_bytes(rlx_ir::DType::U8, &x).unwrap();
    let input = Tensor::new(vec![1, c, d, h, w], data).unwrap();
    let out = compiled.run(&[("x".to_string(), input)].into()).unwrap();
    let got = out.into_iter().next().unwrap().1;
    assert_eq!(got.dtype(), rlx_ir::DType::U8);
    let got: Vec<u8> = got.to_f64_vec().iter().map(|&v| v as u8).collect();
    let mut want = Vec::new();
    for o in 0..m {
        let scale = xs * ws[o] / ys;
        for (z, yy, xx) in
            (0..d).flat_map(|z| (0..h).flat_map(move |y| (0..w).map(move |x| (z, y, x))))
        {
            let mut acc = bias[o] as i64;
            for ci in 0..c {
                for (a, b, e) in
                    (0..k).flat_map(|a| (0..k).flat_map(move |b| (0..k).map(move |e| (a, b, e))))
                {
                    let (pz, py, px) = (z + a, yy + b, xx + e);
                    if pz < 1 || py < 1 || px < 1 || pz > d || py > h || px > w {
                        continue;
                    }
                    let xv = x[((ci * d + pz - 1) * h + py - 1) * w + px - 1] as i64 - xz as i64;
                    let wv = wq[(((o * c + ci) * k + a) * k + b) * k + e] as i8 as i64;
                    acc += xv * wv;
                }
            }
            let q = (acc as f32 * scale).round_ties_even() + yz as f32;
            want.push(q.clamp(0.0, 255.0) as u8);
        }
    }
    assert_eq!(got.len(), want.len());
    let off = got.iter().zip(&want).filter(|(a, b)| a != b).count();
    assert_eq!(off, 0, "{off} of {} values differ", want.len());
}
