//! Models whose output shapes depend on values computed at run time (NonZero,
//! NonMaxSuppression, Unique, TopK with a computed k, Compress with a computed condition),
//! run through `rlx_onnx::runtime` on the CPU: compiled in stages with the data-dependent
//! ops evaluated on the host between them.
//!
//! - hand-built models against hand-computed results (always run);
//! - `scripts/ref/datadep_ops.py`'s models against onnxruntime on random inputs at several
//!   sizes (needs python3 with numpy, onnx and onnxruntime);
//! - the official ONNX node tests of these ops, with every input a run-time value (needs
//!   python3 with onnx; `scripts/onnx-node-tests.py` writes the tests).

mod support;

use rlx_ir::{DType, Tensor};
use rlx_onnx::proto::{NodeProto, TensorProto, ValueInfoProto};
use rlx_onnx::ParsedModel;
use rlx_runtime::{CompileOptions, DynamicGraph, RuntimeError, Session};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use support::*;

/// An output declared by name only (its shape depends on values).
fn out(name: &str) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        ..Default::default()
    }
}

fn with(mut n: NodeProto, attrs: Vec<rlx_onnx::proto::AttributeProto>) -> NodeProto {
    n.attribute = attrs;
    n
}

fn i64_init(name: &str, dims: &[i64], v: &[i64]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(7),
        int64_data: v.to_vec(),
        ..Default::default()
    }
}

/// A staged session over a model on the CPU.
fn session(m: &rlx_onnx::proto::ModelProto) -> DynamicGraph {
    let parsed = ParsedModel::from_bytes(bytes(m), None, "test.onnx").unwrap();
    let session = Session::new(rlx_driver::Device::Cpu).unwrap();
    rlx_onnx::runtime::dynamic(&session, Arc::new(parsed), CompileOptions::default())
}

fn t(dtype: DType, shape: &[usize], v: &[f64]) -> Tensor {
    Tensor::from_f64(dtype, shape, v).unwrap()
}

fn feed(items: Vec<(&str, Tensor)>) -> HashMap<String, Tensor> {
    items.into_iter().map(|(n, t)| (n.to_string(), t)).collect()
}

/// The output `name` as its shape and values.
fn get(outs: &[(String, Tensor)], name: &str) -> (Vec<usize>, Vec<f64>) {
    let t = &outs
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no output `{name}`"))
        .1;
    (t.shape().to_vec(), t.to_f64_vec())
}

/// `x[x > 0]` as torch.onnx.export writes it: Greater → NonZero → Transpose → GatherND.
fn boolean_indexing() -> rlx_onnx::proto::ModelProto {
    model(
        vec![
            node("Greater", "gt", &["x", "zero"], &["mask"]),
            node("NonZero", "nz", &["mask"], &["idx_t"]),
            with(
                node("Transpose", "tr", &["idx_t"], &["idx"]),
                vec![ints_attr("perm", &[1, 0])],
            ),
            node("GatherND", "gnd", &["x", "idx"], &["y"]),
        ],
        vec![value("x", 1, &[-1, 3])],
        vec![out("y"), out("idx")],
        vec![f32_init("zero", &[], &[0.0])],
    )
}

#[test]
fn boolean_indexing_runs_in_two_stages_cached_per_count() {
    let m = session(&boolean_indexing());
    let x = t(DType::F32, &[2, 3], &[1.0, -2.0, 3.0, -1.0, 0.0, 5.0]);
    let outs = m.run(&feed(vec![("x", x)])).unwrap();
    assert_eq!(get(&outs, "y"), (vec![3], vec![1.0, 3.0, 5.0]));
    assert_eq!(
        get(&outs, "idx"),
        (vec![3, 2], vec![0.0, 0.0, 0.0, 2.0, 1.0, 2.0])
    );
    assert_eq!(
        m.compiles(),
        2,
        "the graph before NonZero and the one after"
    );
    // same count of positives: nothing compiles
    let x = t(DType::F32, &[2, 3], &[-1.0, 2.0, 3.0, 4.0, 0.0, -5.0]);
    let outs = m.run(&feed(vec![("x", x)])).unwrap();
    assert_eq!(get(&outs, "y"), (vec![3], vec![2.0, 3.0, 4.0]));
    assert_eq!(m.compiles(), 2);
    // another count: only the second stage compiles again; another size: both
    let x = t(DType::F32, &[2, 3], &[-1.0; 6]);
    let outs = m.run(&feed(vec![("x", x)])).unwrap();
    assert_eq!(get(&outs, "y"), (vec![0], vec![]));
    assert_eq!(m.compiles(), 3);
    let x = t(DType::F32, &[1, 3], &[7.0, -1.0, 8.0]);
    let outs = m.run(&feed(vec![("x", x)])).unwrap();
    assert_eq!(get(&outs, "y"), (vec![2], vec![7.0, 8.0]));
    assert_eq!(m.compiles(), 5);
}

/// A detection postprocess: boxes and scores computed from inputs → NonMaxSuppression →
/// the kept boxes gathered by the selected box indices.
fn detection(center_point_box: i64) -> rlx_onnx::proto::ModelProto {
    model(
        vec![
            node("Identity", "boxes", &["boxes_in"], &["boxes"]),
            node("Sigmoid", "sig", &["logits"], &["scores"]),
            with(
                node(
                    "NonMaxSuppression",
                    "nms",
                    &["boxes", "scores", "max_out", "iou", "score_th"],
                    &["sel"],
                ),
                vec![int_attr("center_point_box", center_point_box)],
            ),
            with(
                node("Gather", "col", &["sel", "two"], &["box_idx"]),
                vec![int_attr("axis", 1)],
            ),
            node("Squeeze", "sq", &["boxes", "axis0"], &["boxes0"]),
            node("Gather", "kept", &["boxes0", "box_idx"], &["kept_boxes"]),
        ],
        vec![
            value("boxes_in", 1, &[1, -1, 4]),
            value("logits", 1, &[1, 1, -1]),
        ],
        vec![out("sel"), out("kept_boxes"), out("scores")],
        vec![
            i64_init("max_out", &[1], &[3]),
            f32_init("iou", &[1], &[0.5]),
            f32_init("score_th", &[1], &[0.0]),
            i64_init("two", &[], &[2]),
            i64_init("axis0", &[1], &[0]),
        ],
    )
}

/// The ONNX spec's `suppress_by_IOU` boxes (y1, x1, y2, x2).
const SPEC_BOXES: [f64; 24] = [
    0.0, 0.0, 1.0, 1.0, 0.0, 0.1, 1.0, 1.1, 0.0, -0.1, 1.0, 0.9, 0.0, 10.0, 1.0, 11.0, 0.0, 10.1,
    1.0, 11.1, 0.0, 100.0, 1.0, 101.0,
];

/// Logits whose sigmoids order the boxes as the spec's scores 0.9 0.75 0.6 0.95 0.5 0.3.
fn spec_logits() -> Tensor {
    let p = [0.9f64, 0.75, 0.6, 0.95, 0.5, 0.3];
    let v: Vec<f64> = p.iter().map(|p| (p / (1.0 - p)).ln()).collect();
    t(DType::F32, &[1, 1, 6], &v)
}

#[test]
fn detection_postprocess_keeps_the_spec_boxes() {
    let m = session(&detection(0));
    let boxes = t(DType::F32, &[1, 6, 4], &SPEC_BOXES);
    let outs = m
        .run(&feed(vec![("boxes_in", boxes), ("logits", spec_logits())]))
        .unwrap();
    assert_eq!(
        get(&outs, "sel"),
        (
            vec![3, 3],
            vec![0.0, 0.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0, 5.0]
        )
    );
    let (shape, kept) = get(&outs, "kept_boxes");
    assert_eq!(shape, vec![3, 4]);
    let want: Vec<f64> = [3, 0, 5]
        .iter()
        .flat_map(|&b| SPEC_BOXES[b * 4..b * 4 + 4].to_vec())
        .collect();
    let close = kept.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-6);
    assert!(close, "{kept:?} vs {want:?}");
    assert_eq!(get(&outs, "scores").0, vec![1, 1, 6]);
}

#[test]
fn detection_with_center_boxes() {
    // boxes as (x_center, y_center, width, height): the spec's, converted
    let c: Vec<f64> = SPEC_BOXES
        .chunks(4)
        .flat_map(|b| {
            [
                (b[1] + b[3]) / 2.0,
                (b[0] + b[2]) / 2.0,
                b[3] - b[1],
                b[2] - b[0],
            ]
        })
        .collect();
    let m = session(&detection(1));
    let boxes = t(DType::F32, &[1, 6, 4], &c);
    let outs = m
        .run(&feed(vec![("boxes_in", boxes), ("logits", spec_logits())]))
        .unwrap();
    assert_eq!(
        get(&outs, "sel").1,
        vec![0.0, 0.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0, 5.0]
    );
}

#[test]
fn wrong_box_shapes_are_errors_naming_them() {
    let m = session(&detection(0));
    let boxes = t(DType::F32, &[1, 6, 4], &SPEC_BOXES);
    // scores for 5 boxes against 6 boxes: the symbol check names both sizes
    let logits = t(DType::F32, &[1, 1, 5], &[0.0; 5]);
    let e = m
        .run(&feed(vec![("boxes_in", boxes), ("logits", logits)]))
        .unwrap_err();
    assert!(matches!(e, RuntimeError::Input { .. }), "{e}");
    // a model whose NMS reads boxes of the wrong shape: the host step names the shape
    let mut bad = detection(0);
    let g = bad.graph.as_mut().unwrap();
    g.input[0] = value("boxes_in", 1, &[1, -1, 3]);
    let m = session(&bad);
    let boxes = t(DType::F32, &[1, 6, 3], &[0.5; 18]);
    let e = m
        .run(&feed(vec![("boxes_in", boxes), ("logits", spec_logits())]))
        .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, RuntimeError::Host { .. }), "{msg}");
    assert!(msg.contains("nms") && msg.contains("[1, 6, 3]"), "{msg}");
}

/// TopK whose k is a run-time input, largest and smallest.
fn top_k_model() -> rlx_onnx::proto::ModelProto {
    model(
        vec![
            node("Identity", "id", &["k_in"], &["k"]),
            node("TopK", "top", &["x", "k"], &["v", "i"]),
            with(
                node("TopK", "bottom", &["x", "k"], &["sv", "si"]),
                vec![int_attr("largest", 0), int_attr("axis", 1)],
            ),
        ],
        vec![value("x", 1, &[2, -1]), value("k_in", 7, &[1])],
        vec![out("v"), out("i"), out("sv"), out("si")],
        vec![],
    )
}

#[test]
fn top_k_with_a_run_time_k() {
    let m = session(&top_k_model());
    let x = t(
        DType::F32,
        &[2, 4],
        &[1.0, 5.0, 3.0, 4.0, 2.0, 2.0, 9.0, -1.0],
    );
    let k = t(DType::I64, &[1], &[2.0]);
    let outs = m.run(&feed(vec![("x", x.clone()), ("k_in", k)])).unwrap();
    assert_eq!(get(&outs, "v"), (vec![2, 2], vec![5.0, 4.0, 9.0, 2.0]));
    assert_eq!(get(&outs, "i"), (vec![2, 2], vec![1.0, 3.0, 2.0, 0.0]));
    assert_eq!(get(&outs, "sv"), (vec![2, 2], vec![1.0, 3.0, -1.0, 2.0]));
    assert_eq!(get(&outs, "si"), (vec![2, 2], vec![0.0, 2.0, 3.0, 0.0]));
    // K past the axis: an error naming K and the shape, no panic
    let k = t(DType::I64, &[1], &[5.0]);
    let e = m.run(&feed(vec![("x", x), ("k_in", k)])).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("K = 5") && msg.contains("[2, 4]"), "{msg}");
}

#[test]
fn unique_along_an_axis_and_compress_with_a_computed_condition() {
    let m = model(
        vec![
            node("Identity", "id", &["a"], &["a2"]),
            with(
                node(
                    "Unique",
                    "uniq",
                    &["a2"],
                    &["u", "first", "inverse", "counts"],
                ),
                vec![int_attr("axis", 0)],
            ),
            node("Greater", "gt", &["s", "zero"], &["keep"]),
            with(
                node("Compress", "comp", &["x", "keep"], &["cx"]),
                vec![int_attr("axis", 1)],
            ),
            node("Compress", "flat", &["x", "keep"], &["cf"]),
        ],
        vec![
            value("a", 7, &[-1, 2]),
            value("s", 1, &[3]),
            value("x", 1, &[2, 3]),
        ],
        vec![
            out("u"),
            out("first"),
            out("inverse"),
            out("counts"),
            out("cx"),
            out("cf"),
        ],
        vec![f32_init("zero", &[], &[0.0])],
    );
    let m = session(&m);
    let a = t(
        DType::I64,
        &[4, 2],
        &[3.0, 1.0, 0.0, 2.0, 3.0, 1.0, 0.0, 1.0],
    );
    let s = t(DType::F32, &[3], &[1.0, -1.0, 2.0]);
    let x = t(DType::F32, &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let outs = m.run(&feed(vec![("a", a), ("s", s), ("x", x)])).unwrap();
    assert_eq!(
        get(&outs, "u"),
        (vec![3, 2], vec![0.0, 1.0, 0.0, 2.0, 3.0, 1.0])
    );
    assert_eq!(get(&outs, "first").1, vec![3.0, 1.0, 0.0]);
    assert_eq!(get(&outs, "inverse").1, vec![2.0, 1.0, 2.0, 0.0]);
    assert_eq!(get(&outs, "counts").1, vec![1.0, 1.0, 2.0]);
    assert_eq!(get(&outs, "cx"), (vec![2, 2], vec![1.0, 3.0, 4.0, 6.0]));
    assert_eq!(get(&outs, "cf"), (vec![2], vec![1.0, 3.0]));
}

#[test]
fn one_graph_import_says_the_model_runs_in_stages() {
    let e = rlx_onnx::load_bytes(
        bytes(&boolean_indexing()),
        None,
        "b.onnx",
        &Default::default(),
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(e.is_unsupported(), "{msg}");
    assert!(msg.contains("`nz`") && msg.contains("run time"), "{msg}");
    // with the value known at import it folds as before
    let opts = rlx_onnx::ImportOptions {
        known_inputs: HashMap::from([("x".to_string(), t(DType::F32, &[1, 3], &[1.0, 0.0, 2.0]))]),
        dims: HashMap::from([("s1".to_string(), 1)]),
        ..Default::default()
    };
    let ok = rlx_onnx::load_bytes(bytes(&boolean_indexing()), None, "b.onnx", &opts).unwrap();
    assert_eq!(ok.frozen_inputs, vec!["x".to_string()]);
}

// ---- comparisons with onnxruntime ----

fn python_has(modules: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `prefix_N.pb` of a data set in N order.
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

/// Runs every data set of a backend-test-layout case through one staged session; `Err`
/// says what differs. Integers and booleans must match exactly, floats within `rtol`.
fn run_case(dir: &Path, rtol: f64) -> Result<(), String> {
    let parsed = ParsedModel::open(dir.join("model.onnx")).map_err(|e| e.to_string())?;
    let names: Vec<String> = parsed.inputs().iter().map(|(n, _)| n.clone()).collect();
    let outs: Vec<String> = parsed.outputs().iter().map(|(n, _)| n.clone()).collect();
    let session = Session::new(rlx_driver::Device::Cpu).unwrap();
    let m = rlx_onnx::runtime::dynamic(&session, Arc::new(parsed), CompileOptions::default());
    let mut sets: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    sets.sort();
    for set in sets {
        // by position: the node tests' data files may carry other names
        let inputs: HashMap<String, Tensor> = numbered(&set, "input")
            .into_iter()
            .enumerate()
            .map(|(i, (n, t))| (names.get(i).cloned().unwrap_or(n), t))
            .collect();
        let got = m
            .run(&inputs)
            .map_err(|e| format!("{}: {e}", set.display()))?;
        for (i, (_, want)) in numbered(&set, "output").into_iter().enumerate() {
            let name = &outs[i];
            let g = &got
                .iter()
                .find(|(n, _)| n == name)
                .ok_or(format!("output `{name}` missing"))?
                .1;
            if g.shape() != want.shape() || g.dtype() != want.dtype() {
                return Err(format!(
                    "{}: `{name}`: expected {}{:?}, got {}{:?}",
                    set.display(),
                    want.dtype(),
                    want.shape(),
                    g.dtype(),
                    g.shape()
                ));
            }
            for j in 0..want.numel() {
                let (w, v) = (want.get_f64(j), g.get_f64(j));
                let ok = if want.dtype().is_float() {
                    (w.is_nan() && v.is_nan()) || (w - v).abs() <= rtol * w.abs().max(1e-6)
                } else {
                    w == v
                };
                if !ok {
                    return Err(format!(
                        "{}: `{name}` element {j}: expected {w}, got {v}",
                        set.display()
                    ));
                }
            }
        }
    }
    Ok(())
}

#[test]
fn data_dependent_models_match_onnxruntime() {
    let test = "data_dependent_models_match_onnxruntime";
    if !python_has("numpy, onnx, onnxruntime") {
        rlx_driver::testing::skip(
            test,
            "python3 with numpy, onnx and onnxruntime not available",
        );
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/ref/datadep_ops.py");
    let out = std::env::temp_dir().join(format!("rlx-datadep-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let status = Command::new("python3")
        .arg(script)
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "datadep_ops.py failed: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    cases.sort();
    assert!(
        cases.len() >= 6,
        "expected the script's cases in {}",
        out.display()
    );
    let mut failed = Vec::new();
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        match run_case(case, 1e-5) {
            Ok(()) => println!("ok   {name}"),
            Err(e) => {
                println!("FAIL {name}: {e}");
                failed.push(name);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&out);
    assert!(failed.is_empty(), "cases failed: {failed:?}");
}

/// The official node tests of the data-dependent ops, every input fed at run time (so each
/// runs in stages, unlike `rlx onnx-test`, which may fold them at import).
#[test]
fn official_node_tests_run_in_stages() {
    let test = "official_node_tests_run_in_stages";
    let gen = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/onnx-node-tests.py");
    if !python_has("onnx, numpy") {
        rlx_driver::testing::skip(test, "python3 with onnx and numpy not available");
        return;
    }
    let out = std::env::temp_dir().join(format!("rlx-datadep-node-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let status = Command::new("python3")
        .arg(&gen)
        .arg(&out)
        .output()
        .unwrap();
    assert!(status.status.success(), "onnx-node-tests.py failed");
    let prefixes = [
        "test_nonzero",
        "test_nonmaxsuppression",
        "test_unique",
        "test_top_k",
        "test_compress",
    ];
    let mut cases: Vec<PathBuf> = std::fs::read_dir(out.join("node"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            prefixes.iter().any(|pre| n.starts_with(pre))
        })
        .collect();
    cases.sort();
    let mut failed = Vec::new();
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        match run_case(case, 1e-3) {
            Ok(()) => println!("ok   {name}"),
            Err(e) => {
                println!("FAIL {name}: {e}");
                failed.push(name);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&out);
    assert!(cases.len() >= 30, "found {} node tests", cases.len());
    assert!(failed.is_empty(), "node tests failed: {failed:?}");
}
