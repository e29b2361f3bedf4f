//! Bad input gives a clear error naming what is wrong, never a panic: truncated and corrupt
//! files, other formats, missing or escaping external data, unknown domains and ops,
//! unimplemented attributes, inconsistent shapes, dangling names.

mod support;

use proptest::prelude::*;
use rlx_onnx::proto::{tensor_proto::DataLocation, StringStringEntryProto};
use rlx_onnx::{load, load_bytes, ImportOptions, OnnxError};
use std::collections::HashMap;
use std::sync::Arc;
use support::*;

fn import(m: &rlx_onnx::proto::ModelProto) -> Result<rlx_onnx::OnnxModel, OnnxError> {
    load_bytes(bytes(m), None, "test.onnx", &ImportOptions::default())
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("rlx-onnx-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_valid_model_imports_and_computes() {
    let m = import(&add_relu()).unwrap();
    let x = rlx_ir::Tensor::from_f32(&[2, 3], vec![0.0, 1.0, -1.0, -3.0, 4.0, 0.0]).unwrap();
    let params: HashMap<String, Arc<rlx_ir::Tensor>> = m
        .params
        .into_iter()
        .map(|(n, t)| (n, Arc::new(t)))
        .collect();
    let out = rlx_interp::run_graph(&m.graph, &HashMap::from([("x".into(), x)]), &params).unwrap();
    assert_eq!(out[0].1.as_f32().unwrap(), &[1.0, 0.0, 0.0, 0.0, 2.0, 0.5]);
}

#[test]
fn every_truncation_is_a_clean_error_or_a_model() {
    let b = bytes(&add_relu());
    for len in 0..b.len() {
        let r = load_bytes(b.slice(..len), None, "cut.onnx", &ImportOptions::default());
        if let Err(e) = r {
            assert!(e.to_string().contains("cut.onnx"), "{e}");
        }
    }
}

#[test]
fn other_formats_are_named() {
    let cases: [(&[u8], &str); 4] = [
        (b"GGUF\x03\x00\x00\x00rest", "GGUF"),
        (b"PK\x03\x04zip", "zip"),
        (b"\x93NUMPY\x01\x00", "NumPy"),
        (b"", "empty"),
    ];
    for (data, word) in cases {
        let e = load_bytes(
            data.to_vec().into(),
            None,
            "m.onnx",
            &ImportOptions::default(),
        )
        .unwrap_err();
        assert!(matches!(e, OnnxError::Decode { .. }), "{e}");
        assert!(e.to_string().contains(word), "{e}");
    }
    let e = load_bytes(
        b"hello world, not a model".to_vec().into(),
        None,
        "t",
        &ImportOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(e, OnnxError::Decode { .. }), "{e}");
}

#[test]
fn a_missing_file_names_the_path() {
    let e = load("/nonexistent/model.onnx", &ImportOptions::default()).unwrap_err();
    assert!(e.to_string().contains("/nonexistent/model.onnx"), "{e}");
}

fn external(location: &str) -> rlx_onnx::proto::ModelProto {
    let mut m = add_relu();
    let w = &mut m.graph.as_mut().unwrap().initializer[0];
    w.raw_data = None;
    w.data_location = Some(DataLocation::External as i32);
    w.external_data = vec![StringStringEntryProto {
        key: Some("location".into()),
        value: Some(location.into()),
    }];
    m
}

#[test]
fn external_data_loads_from_the_model_directory() {
    let dir = temp_dir("ext");
    let w: Vec<u8> = [1.0f32, -2.0, 0.5]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    std::fs::write(dir.join("weights.bin"), w).unwrap();
    std::fs::write(dir.join("model.onnx"), bytes(&external("weights.bin"))).unwrap();
    let m = load(dir.join("model.onnx"), &ImportOptions::default()).unwrap();
    assert_eq!(m.params[0].1.as_f32().unwrap(), &[1.0, -2.0, 0.5]);
    // too short: the length check names the file
    std::fs::write(dir.join("weights.bin"), [0u8; 5]).unwrap();
    let e = load(dir.join("model.onnx"), &ImportOptions::default()).unwrap_err();
    assert!(e.to_string().contains("raw data has 5 bytes"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn missing_or_escaping_external_data_is_an_error() {
    let dir = temp_dir("ext-missing");
    std::fs::write(dir.join("model.onnx"), bytes(&external("nothere.bin"))).unwrap();
    let e = load(dir.join("model.onnx"), &ImportOptions::default()).unwrap_err();
    assert!(matches!(e, OnnxError::Tensor { .. }), "{e}");
    assert!(
        e.to_string().contains("nothere.bin") && e.to_string().contains("`w`"),
        "{e}"
    );
    std::fs::write(dir.join("model.onnx"), bytes(&external("../../etc/passwd"))).unwrap();
    let e = load(dir.join("model.onnx"), &ImportOptions::default()).unwrap_err();
    assert!(e.to_string().contains("relative path inside"), "{e}");
    // from bytes there is no directory to resolve against
    let e = import(&external("weights.bin")).unwrap_err();
    assert!(e.to_string().contains("model's directory"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn every_unsupported_node_is_listed_once() {
    let mut custom = node("Frobnicate", "f1", &["x"], &["a"]);
    custom.domain = Some("com.example".into());
    let m = model(
        vec![
            custom,
            node("ImageDecoder", "s1", &["x"], &["b"]),
            node("Relu", "r", &["a"], &["y"]),
        ],
        vec![value("x", 1, &[2])],
        vec![value("y", 1, &[2])],
        vec![],
    );
    let e = import(&m).unwrap_err();
    let OnnxError::Unsupported { nodes, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!(nodes.len(), 2, "{e}");
    let text = e.to_string();
    assert!(
        text.contains("`f1` (com.example:Frobnicate opset 0)"),
        "{text}"
    );
    assert!(text.contains("not imported by the model"), "{text}");
    assert!(
        text.contains("`s1` (ai.onnx:ImageDecoder opset 21)"),
        "{text}"
    );
}

#[test]
fn an_unimplemented_attribute_is_reported() {
    let mut relu = node("Relu", "r", &["x"], &["y"]);
    relu.attribute.push(int_attr("mystery", 3));
    let m = model(
        vec![relu],
        vec![value("x", 1, &[2])],
        vec![value("y", 1, &[2])],
        vec![],
    );
    let e = import(&m).unwrap_err();
    assert!(
        e.to_string()
            .contains("attribute(s) mystery not implemented"),
        "{e}"
    );
}

#[test]
fn inconsistent_shapes_name_the_node() {
    let m = model(
        vec![node("Add", "bad_add", &["x", "z"], &["y"])],
        vec![value("x", 1, &[2, 3]), value("z", 1, &[4])],
        vec![value("y", 1, &[2, 3])],
        vec![],
    );
    let e = import(&m).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("bad_add") && text.contains("do not broadcast"),
        "{text}"
    );
}

#[test]
fn dangling_names_and_missing_outputs_are_errors() {
    let m = model(
        vec![node("Relu", "r", &["nowhere"], &["y"])],
        vec![value("x", 1, &[2])],
        vec![value("y", 1, &[2])],
        vec![],
    );
    assert!(import(&m)
        .unwrap_err()
        .to_string()
        .contains("`nowhere` is not defined"));
    let m = model(
        vec![],
        vec![value("x", 1, &[2])],
        vec![value("y", 1, &[2])],
        vec![],
    );
    assert!(import(&m)
        .unwrap_err()
        .to_string()
        .contains("never computed"));
}

#[test]
fn unsupported_input_types_are_unsupported() {
    let m = model(
        vec![node("Identity", "i", &["x"], &["y"])],
        vec![value("x", 8, &[2])],
        vec![value("y", 8, &[2])],
        vec![],
    );
    let e = import(&m).unwrap_err();
    assert!(
        e.is_unsupported() && e.to_string().contains("string"),
        "{e}"
    );
}

#[test]
fn symbolic_dims_become_symbols() {
    let m = model(
        vec![node("Relu", "r", &["x"], &["y"])],
        vec![value("x", 1, &[-1, 3])],
        vec![value("y", 1, &[-1, 3])],
        vec![],
    );
    let g = import(&m).unwrap().graph;
    assert_eq!(g.symbols(), vec!["s1".to_string()]);
}

#[test]
fn inputs_the_fuzzer_found_are_clean_errors() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/found");
    for entry in std::fs::read_dir(dir).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        let r = load_bytes(bytes.into(), None, "found.onnx", &ImportOptions::default());
        assert!(r.is_err());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    /// Flipped, inserted and deleted bytes never panic.
    #[test]
    fn mutated_models_never_panic(edits in proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..8)) {
        let mut b = bytes(&add_relu()).to_vec();
        for (pos, byte, kind) in edits {
            let p = pos % (b.len() + 1);
            match kind {
                0 if p < b.len() => b[p] = byte,
                1 => b.insert(p, byte),
                _ if p < b.len() => { b.remove(p); }
                _ => {}
            }
        }
        let _ = load_bytes(b.into(), None, "mut.onnx", &ImportOptions::default());
    }
}
