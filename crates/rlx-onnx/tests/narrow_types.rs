//! The narrow element types through the importer: packed 4- and 2-bit data unpacks, casts
//! to float8 saturate or overflow as the `saturate` attribute says, and the bitwise ops and
//! `BitCast` map onto IR ops; also the decompositions added with them (`ReverseSequence`,
//! blocked quantization). Values are hand-computed (from the formats' definitions).

mod support;

use rlx_ir::{DType, Tensor};
use rlx_onnx::proto::TensorProto;
use rlx_onnx::{load_bytes, ImportOptions};
use std::collections::HashMap;
use std::sync::Arc;
use support::*;

/// Imports `m` and runs it on the interpreter with input `x`.
fn run(m: &rlx_onnx::proto::ModelProto, x: Option<Tensor>) -> Tensor {
    let m = load_bytes(bytes(m), None, "t.onnx", &ImportOptions::default()).unwrap();
    let params: HashMap<String, Arc<Tensor>> = m
        .params
        .into_iter()
        .map(|(n, t)| (n, Arc::new(t)))
        .collect();
    let inputs: HashMap<String, Tensor> = x.into_iter().map(|t| ("x".to_string(), t)).collect();
    let out = rlx_interp::run_graph(&m.graph, &inputs, &params).unwrap();
    out.into_iter().next().unwrap().1
}

fn cast_model(to: i32, saturate: Option<i64>) -> rlx_onnx::proto::ModelProto {
    let mut n = node("Cast", "c", &["x"], &["y"]);
    n.attribute.push(int_attr("to", to as i64));
    if let Some(s) = saturate {
        n.attribute.push(int_attr("saturate", s));
    }
    model(
        vec![n],
        vec![value("x", 1, &[5])],
        vec![value("y", to, &[5])],
        vec![],
    )
}

#[test]
fn float8_casts_saturate_by_default() {
    let x = Tensor::from_f32(
        &[5],
        vec![0.478_925_47, 1e6, -f32::INFINITY, f32::NAN, 464.0],
    )
    .unwrap();
    let y = run(&cast_model(17, None), Some(x.clone()));
    assert_eq!(y.dtype(), DType::F8E4M3FN);
    let v = y.to_f64_vec();
    assert_eq!(&v[..3], &[0.46875, 448.0, -448.0]);
    assert!(v[3].is_nan());
    assert_eq!(v[4], 448.0);
    let y = run(&cast_model(17, Some(0)), Some(x.clone()));
    let v = y.to_f64_vec();
    assert!(v[1].is_nan() && v[2].is_nan());
    let y = run(&cast_model(19, Some(0)), Some(x));
    assert_eq!(y.dtype(), DType::F8E5M2);
    assert_eq!(
        &y.to_f64_vec()[..3],
        &[0.5, f64::INFINITY, f64::NEG_INFINITY]
    );
}

#[test]
fn packed_int4_and_uint2_initializers_unpack_low_bits_first() {
    let packed = |name: &str, dtype: i32, n: i64, raw: Vec<u8>| TensorProto {
        name: Some(name.into()),
        dims: vec![n],
        data_type: Some(dtype),
        raw_data: Some(raw.into()),
        ..Default::default()
    };
    let mut c = node("Cast", "c", &["w"], &["y"]);
    c.attribute.push(int_attr("to", 1));
    // int4: 0x8F holds 15 (-1) low and 8 (-8) high; 0x07 holds 7 (and padding).
    let m = model(
        vec![c.clone()],
        vec![],
        vec![value("y", 1, &[3])],
        vec![packed("w", 22, 3, vec![0x8f, 0x07])],
    );
    assert_eq!(run(&m, None).to_f64_vec(), [-1.0, -8.0, 7.0]);
    // uint2: 0b11_10_01_00 holds 0, 1, 2, 3.
    let m = model(
        vec![c],
        vec![],
        vec![value("y", 1, &[5])],
        vec![packed("w", 25, 5, vec![0b1110_0100, 0b0000_0011])],
    );
    assert_eq!(run(&m, None).to_f64_vec(), [0.0, 1.0, 2.0, 3.0, 3.0]);
    // Too few bytes for the dims is an error, not a panic.
    let mut c = node("Cast", "c", &["w"], &["y"]);
    c.attribute.push(int_attr("to", 1));
    let m = model(
        vec![c],
        vec![],
        vec![value("y", 1, &[5])],
        vec![packed("w", 22, 5, vec![0x12])],
    );
    let e = load_bytes(bytes(&m), None, "t.onnx", &ImportOptions::default()).unwrap_err();
    assert!(e.to_string().contains("need 3"), "{e}");
}

#[test]
fn bitwise_ops_and_bitcast() {
    let bin = |op: &str| {
        model(
            vec![node(op, "b", &["x", "w"], &["y"])],
            vec![value("x", 4, &[3])],
            vec![value("y", 4, &[3])],
            vec![TensorProto {
                name: Some("w".into()),
                dims: vec![3],
                data_type: Some(4),
                int32_data: vec![0x0ff0, 3, 1],
                ..Default::default()
            }],
        )
    };
    let x = Tensor::from_f64(DType::U16, &[3], &[4660.0, 12.0, 65535.0]).unwrap();
    let and = run(&bin("BitwiseAnd"), Some(x.clone()));
    assert_eq!(and.to_f64_vec(), [560.0, 0.0, 1.0]);
    let xor = run(&bin("BitwiseXor"), Some(x.clone()));
    assert_eq!(xor.to_f64_vec(), [7620.0, 15.0, 65534.0]);
    let mut shift = bin("BitShift");
    let attr = rlx_onnx::proto::AttributeProto {
        name: Some("direction".into()),
        r#type: Some(rlx_onnx::proto::attribute_proto::AttributeType::String as i32),
        s: Some(b"LEFT".to_vec().into()),
        ..Default::default()
    };
    shift.graph.as_mut().unwrap().node[0].attribute.push(attr);
    let shl = run(&shift, Some(x));
    assert_eq!(shl.to_f64_vec(), [0.0, 96.0, 65534.0]);

    let mut bc = node("BitCast", "bc", &["x"], &["y"]);
    bc.attribute.push(int_attr("to", 6));
    let m = model(
        vec![bc],
        vec![value("x", 1, &[2])],
        vec![value("y", 6, &[2])],
        vec![],
    );
    let y = run(&m, Some(Tensor::from_f32(&[2], vec![1.0, -2.0]).unwrap()));
    assert_eq!(y.to_f64_vec(), [1_065_353_216.0, -1_073_741_824.0]);
}

#[test]
fn reverse_sequence_and_blocked_dequantization() {
    let mut rs = node("ReverseSequence", "r", &["x", "lens"], &["y"]);
    rs.attribute.push(int_attr("batch_axis", 0));
    rs.attribute.push(int_attr("time_axis", 1));
    let lens = TensorProto {
        name: Some("lens".into()),
        dims: vec![2],
        data_type: Some(7),
        int64_data: vec![3, 1],
        ..Default::default()
    };
    let m = model(
        vec![rs],
        vec![value("x", 1, &[2, 4])],
        vec![value("y", 1, &[2, 4])],
        vec![lens],
    );
    let x = Tensor::from_f32(&[2, 4], (0..8).map(|v| v as f32).collect()).unwrap();
    // Batch 0 reverses its first 3 steps, batch 1 only its first (a no-op).
    assert_eq!(
        run(&m, Some(x)).to_f64_vec(),
        [2.0, 1.0, 0.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    );

    // Blocks of 2 along axis 1 of x [1, 5]: scales 1, 10, 100 (the last block cut to 1).
    let mut dq = node("DequantizeLinear", "d", &["x", "s"], &["y"]);
    dq.attribute.push(int_attr("axis", 1));
    dq.attribute.push(int_attr("block_size", 2));
    let m = model(
        vec![dq],
        vec![value("x", 3, &[1, 5])],
        vec![value("y", 1, &[1, 5])],
        vec![f32_init("s", &[1, 3], &[1.0, 10.0, 100.0])],
    );
    let x = Tensor::from_f64(DType::I8, &[1, 5], &[1.0, -2.0, 3.0, 4.0, -1.0]).unwrap();
    assert_eq!(
        run(&m, Some(x)).to_f64_vec(),
        [1.0, -2.0, 30.0, 40.0, -100.0]
    );
}
