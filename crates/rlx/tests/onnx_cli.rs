//! The ONNX paths of the `rlx` command: `run MODEL.onnx` with `.npy` inputs and outputs
//! (and its clear errors for wrong inputs), and `onnx-test` on a backend-test directory.

use prost::Message;
use rlx_onnx::proto::{
    tensor_shape_proto, type_proto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
    TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use std::path::{Path, PathBuf};
use std::process::Command;

fn value(name: &str, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(1),
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| tensor_shape_proto::Dimension {
                            value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
                            ..Default::default()
                        })
                        .collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `out = x + y` with x f32[2, 3], y f32[3].
fn add_model() -> Vec<u8> {
    ModelProto {
        ir_version: Some(10),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(21),
        }],
        graph: Some(GraphProto {
            name: Some("g".into()),
            node: vec![NodeProto {
                op_type: Some("Add".into()),
                name: Some("add".into()),
                input: vec!["x".into(), "y".into()],
                output: vec!["out:0".into()],
                ..Default::default()
            }],
            input: vec![value("x", &[2, 3]), value("y", &[3])],
            output: vec![value("out:0", &[2, 3])],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

fn tensor_pb(name: &str, dims: &[i64], v: &[f32]) -> Vec<u8> {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(1),
        float_data: v.to_vec(),
        ..Default::default()
    }
    .encode_to_vec()
}

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rlx-onnx-cli-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn npy_f32(path: &Path, shape: &[u64], v: &[f32]) {
    use npyz::WriterBuilder;
    let f = std::fs::File::create(path).unwrap();
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(shape)
        .writer(f)
        .begin_nd()
        .unwrap();
    w.extend(v.iter().copied()).unwrap();
    w.finish().unwrap();
}

fn rlx(args: &[&str]) -> (bool, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_rlx"))
        .args(args)
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn run_reads_npy_inputs_and_writes_npy_outputs() {
    let d = dir("run");
    let model = d.join("add.onnx");
    std::fs::write(&model, add_model()).unwrap();
    npy_f32(&d.join("x.npy"), &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    npy_f32(&d.join("y.npy"), &[3], &[10.0, 20.0, 30.0]);
    let out = d.join("out");
    let (ok, _, err) = rlx(&[
        "run",
        model.to_str().unwrap(),
        "--device",
        "cpu",
        "--input",
        &format!("x={}", d.join("x.npy").display()),
        "--input",
        &format!("y={}", d.join("y.npy").display()),
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let bytes = std::fs::read(out.join("out_0.npy")).unwrap();
    let v: Vec<f32> = npyz::NpyFile::new(&bytes[..]).unwrap().into_vec().unwrap();
    assert_eq!(v, vec![11.0, 22.0, 33.0, 14.0, 25.0, 36.0]);
    let (ok, text, err) = rlx(&[
        "run",
        model.to_str().unwrap(),
        "--input",
        "x=random",
        "--input",
        "y=random",
        "--json",
    ]);
    assert!(ok && text.contains("\"out:0\""), "{text}{err}");
    std::fs::remove_dir_all(&d).ok();
}

/// `y = x[x > 0]` as torch.onnx.export writes it (Greater → NonZero → Transpose →
/// GatherND) with x f32[2, 3]: its output shape depends on the values of x.
fn positives_model() -> Vec<u8> {
    let node = |op: &str, inputs: &[&str], output: &str| NodeProto {
        op_type: Some(op.into()),
        name: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        ..Default::default()
    };
    let mut transpose = node("Transpose", &["nz"], "idx");
    transpose.attribute = vec![rlx_onnx::proto::AttributeProto {
        name: Some("perm".into()),
        r#type: Some(rlx_onnx::proto::attribute_proto::AttributeType::Ints as i32),
        ints: vec![1, 0],
        ..Default::default()
    }];
    ModelProto {
        ir_version: Some(10),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(21),
        }],
        graph: Some(GraphProto {
            name: Some("g".into()),
            node: vec![
                node("Greater", &["x", "zero"], "mask"),
                node("NonZero", &["mask"], "nz"),
                transpose,
                node("GatherND", &["x", "idx"], "y"),
            ],
            input: vec![value("x", &[2, 3])],
            output: vec![ValueInfoProto {
                name: Some("y".into()),
                ..Default::default()
            }],
            initializer: vec![TensorProto {
                name: Some("zero".into()),
                data_type: Some(1),
                float_data: vec![0.0],
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

#[test]
fn run_and_bench_a_model_with_data_dependent_shapes() {
    let d = dir("positives");
    let model = d.join("positives.onnx");
    std::fs::write(&model, positives_model()).unwrap();
    npy_f32(&d.join("x.npy"), &[2, 3], &[1.0, -2.0, 3.0, -4.0, 0.0, 6.0]);
    let out = d.join("out");
    let x = format!("x={}", d.join("x.npy").display());
    let (ok, _, err) = rlx(&[
        "run",
        model.to_str().unwrap(),
        "--device",
        "cpu",
        "--input",
        &x,
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let bytes = std::fs::read(out.join("y.npy")).unwrap();
    let v: Vec<f32> = npyz::NpyFile::new(&bytes[..]).unwrap().into_vec().unwrap();
    assert_eq!(v, vec![1.0, 3.0, 6.0]);
    let m = model.to_str().unwrap();
    let args = ["bench", m, "--device", "cpu", "--input", &x, "--iters", "2"];
    let (ok, text, err) = rlx(&args);
    assert!(ok && text.contains("2 stages"), "{text}{err}");
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn wrong_inputs_are_clear_errors() {
    let d = dir("bad");
    let model = d.join("add.onnx");
    std::fs::write(&model, add_model()).unwrap();
    npy_f32(&d.join("x_wrong.npy"), &[3, 2], &[0.0; 6]);
    npy_f32(&d.join("y.npy"), &[3], &[0.0; 3]);
    let m = model.to_str().unwrap();
    let x_bad = format!("x={}", d.join("x_wrong.npy").display());
    let y = format!("y={}", d.join("y.npy").display());
    let (ok, _, err) = rlx(&["run", m, "--input", &x_bad, "--input", &y]);
    assert!(
        !ok && err.contains("input `x`") && err.contains("f32[2,3]"),
        "{err}"
    );
    let (ok, _, err) = rlx(&["run", m, "--input", &y]);
    assert!(
        !ok && err.contains("`x`") && err.contains("missing"),
        "{err}"
    );
    let (ok, _, err) = rlx(&["run", m, "--input", "z=random"]);
    assert!(!ok && err.contains("no input `z`"), "{err}");
    std::fs::write(d.join("junk.onnx"), b"not a model at all").unwrap();
    let (ok, _, err) = rlx(&["run", d.join("junk.onnx").to_str().unwrap()]);
    assert!(
        !ok && err.contains("junk.onnx") && !err.contains("internal error"),
        "{err}"
    );
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn onnx_test_classifies_a_backend_test() {
    let d = dir("suite");
    let good = d.join("test_add_good");
    let bad = d.join("test_add_wrong_expectation");
    for (t, expect) in [(&good, 11.0f32), (&bad, 99.0)] {
        let set = t.join("test_data_set_0");
        std::fs::create_dir_all(&set).unwrap();
        std::fs::write(t.join("model.onnx"), add_model()).unwrap();
        std::fs::write(set.join("input_0.pb"), tensor_pb("x", &[2, 3], &[1.0; 6])).unwrap();
        std::fs::write(set.join("input_1.pb"), tensor_pb("y", &[3], &[10.0; 3])).unwrap();
        std::fs::write(
            set.join("output_0.pb"),
            tensor_pb("out:0", &[2, 3], &[expect; 6]),
        )
        .unwrap();
    }
    let (_, text, err) = rlx(&["onnx-test", d.to_str().unwrap(), "--json"]);
    let v: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}{err}"));
    assert_eq!(v["total"], 2);
    assert_eq!(v["passed"], 1);
    assert_eq!(v["failed"], 1);
    assert_eq!(v["crashed"], 0);
    let tests = v["tests"].as_array().unwrap();
    assert!(tests
        .iter()
        .any(|t| t["name"] == "test_add_good" && t["status"] == "passed"));
    std::fs::remove_dir_all(&d).ok();
}

/// `y = Attention(x, w, b)` (ONNX Runtime's contrib op, 2 heads) with x and y f32[1, 4, 8]:
/// the import computes `x @ w + b`, slices q, k and v from it and splits their heads with
/// reshape → transpose copies around attention.
fn attention_model() -> Vec<u8> {
    let init = |name: &str, dims: &[i64]| TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(1),
        float_data: (0..dims.iter().product::<i64>())
            .map(|i| (i % 7) as f32 * 0.1)
            .collect(),
        ..Default::default()
    };
    ModelProto {
        ir_version: Some(10),
        opset_import: vec![
            OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(21),
            },
            OperatorSetIdProto {
                domain: Some("com.microsoft".into()),
                version: Some(1),
            },
        ],
        graph: Some(GraphProto {
            name: Some("g".into()),
            node: vec![NodeProto {
                op_type: Some("Attention".into()),
                domain: Some("com.microsoft".into()),
                name: Some("attn".into()),
                input: vec!["x".into(), "w".into(), "b".into()],
                output: vec!["y".into()],
                attribute: vec![rlx_onnx::proto::AttributeProto {
                    name: Some("num_heads".into()),
                    r#type: Some(rlx_onnx::proto::attribute_proto::AttributeType::Int as i32),
                    i: Some(2),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            input: vec![value("x", &[1, 4, 8])],
            output: vec![value("y", &[1, 4, 8])],
            initializer: vec![init("w", &[8, 24]), init("b", &[24])],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

#[test]
fn dump_after_a_kernel_pass_shows_its_decisions() {
    let d = dir("kernel-pass");
    let model = d.join("mha.onnx");
    std::fs::write(&model, attention_model()).unwrap();
    let model = model.to_str().unwrap();
    // the cpu by default; CUDA's planner decides without a GPU too
    for device in [None, Some("cuda")] {
        let mut args = vec!["dump", model, "--after", "elide_views"];
        args.extend(device.map(|d| ["--device", d]).iter().flatten());
        let (ok, text, err) = rlx(&args);
        assert!(ok, "{device:?}: {err}");
        let name = device.unwrap_or("cpu");
        let (program, decisions) = text
            .split_once(&format!("# kernel passes on {name} up to elide_views:\n"))
            .unwrap_or_else(|| panic!("{text}"));
        let (program, lowering) = program
            .split_once("# lowering (every device):\n")
            .unwrap_or_else(|| panic!("{text}"));
        assert!(program.contains("attention"), "{text}");
        // the bias of the merged q/k/v projection is the GEMM's epilogue (`fuse_bias`)
        assert!(lowering.starts_with("bias "), "{text}");
        assert!(decisions.lines().any(|l| l.starts_with("elide ")), "{text}");
    }
    // a later pass keeps the earlier one's decisions
    let (ok, text, err) = rlx(&["dump", model, "--after", "merge_siblings"]);
    assert!(
        ok && text.lines().any(|l| l.starts_with("elide ")),
        "{text}{err}"
    );
    std::fs::remove_dir_all(&d).ok();
}
