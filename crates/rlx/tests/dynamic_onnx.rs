//! ONNX models with dynamic axes, as exporters write them, run at several shapes: a CNN
//! with a symbolic batch (Conv, and a Reshape whose target comes from `Shape`) and a
//! BERT-like embedding (position ids from Shape → Gather → Range and from CumSum over the
//! mask, embedding Gathers, MatMul). Each shape signature is imported with its dims bound
//! and compiled once into a bounded cache; results are checked against f64 references, and
//! shapes that contradict the model are errors naming the input, the dim and both sizes.
//! The `rlx run` / `rlx bench` paths take the sizes from the `.npy` files.

use prost::Message;
use rlx::onnx::dynamic;
use rlx_ir::{DType, Tensor};
use rlx_onnx::proto::{
    attribute_proto::AttributeType, tensor_shape_proto, type_proto, AttributeProto, GraphProto,
    ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto,
    ValueInfoProto,
};
use rlx_onnx::ParsedModel;
use rlx_runtime::{CompileOptions, Session};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A value info: dims >= 0 static, `sym` names the negative ones in order.
fn value(name: &str, elem: i32, dims: &[i64], syms: &[&str]) -> ValueInfoProto {
    let mut syms = syms.iter();
    let dim = dims
        .iter()
        .map(|&d| tensor_shape_proto::Dimension {
            value: Some(if d >= 0 {
                tensor_shape_proto::dimension::Value::DimValue(d)
            } else {
                tensor_shape_proto::dimension::Value::DimParam(syms.next().unwrap().to_string())
            }),
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], outputs: &[&str], attrs: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        name: Some(format!("{op}_{}", outputs[0])),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        attribute: attrs,
        ..Default::default()
    }
}

fn ints_attr(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn tensor_attr(name: &str, t: TensorProto) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Tensor as i32),
        t: Some(t),
        ..Default::default()
    }
}

fn f32_init(name: &str, dims: &[i64], v: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(1),
        float_data: v.to_vec(),
        ..Default::default()
    }
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

fn model(
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    inits: Vec<TensorProto>,
) -> Vec<u8> {
    ModelProto {
        ir_version: Some(10),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(GraphProto {
            name: Some("g".into()),
            node: nodes,
            input: inputs,
            output: outputs,
            initializer: inits,
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

/// Deterministic small values.
fn vals(n: usize, seed: u64) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as u64 * 2654435761 + seed * 97) % 1000) as f32 / 500.0 - 1.0)
        .collect()
}

const C_IN: usize = 3;
const C_OUT: usize = 4;
const HW: usize = 6;

/// `x: f32[batch,3,6,6]` → Conv 3x3 pad 1 (+bias) → Relu → Reshape to `[Shape(x)[0], -1]`.
fn cnn() -> Vec<u8> {
    let w = vals(C_OUT * C_IN * 9, 1);
    let b = vals(C_OUT, 2);
    model(
        vec![
            node(
                "Conv",
                &["x", "w", "b"],
                &["c"],
                vec![
                    ints_attr("pads", &[1, 1, 1, 1]),
                    ints_attr("kernel_shape", &[3, 3]),
                ],
            ),
            node("Relu", &["c"], &["r"], vec![]),
            node("Shape", &["x"], &["sx"], vec![]),
            node("Gather", &["sx", "zero"], &["n"], vec![]),
            node("Unsqueeze", &["n", "axes0"], &["n1"], vec![]),
            node(
                "Concat",
                &["n1", "minus1"],
                &["target"],
                vec![ints_attr_i("axis", 0)],
            ),
            node("Reshape", &["r", "target"], &["y"], vec![]),
        ],
        vec![value(
            "x",
            1,
            &[-1, C_IN as i64, HW as i64, HW as i64],
            &["batch"],
        )],
        vec![value("y", 1, &[-1, -1], &["batch", "features"])],
        vec![
            f32_init("w", &[C_OUT as i64, C_IN as i64, 3, 3], &w),
            f32_init("b", &[C_OUT as i64], &b),
            i64_init("zero", &[], &[0]),
            i64_init("axes0", &[1], &[0]),
            i64_init("minus1", &[1], &[-1]),
        ],
    )
}

fn ints_attr_i(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    }
}

/// The CNN in f64.
fn cnn_ref(x: &[f32], n: usize) -> Vec<f64> {
    let w = vals(C_OUT * C_IN * 9, 1);
    let b = vals(C_OUT, 2);
    let mut out = vec![0f64; n * C_OUT * HW * HW];
    for bi in 0..n {
        for o in 0..C_OUT {
            for i in 0..HW {
                for j in 0..HW {
                    let mut acc = b[o] as f64;
                    for c in 0..C_IN {
                        for ki in 0..3 {
                            for kj in 0..3 {
                                let (ii, jj) = (i + ki, j + kj);
                                if ii < 1 || jj < 1 || ii > HW || jj > HW {
                                    continue;
                                }
                                let xv = x[((bi * C_IN + c) * HW + ii - 1) * HW + jj - 1];
                                let wv = w[((o * C_IN + c) * 3 + ki) * 3 + kj];
                                acc += xv as f64 * wv as f64;
                            }
                        }
                    }
                    out[((bi * C_OUT + o) * HW + i) * HW + j] = acc.max(0.0);
                }
            }
        }
    }
    out
}

const VOCAB: usize = 11;
const MAXPOS: usize = 16;
const H: usize = 4;
const H2: usize = 3;

/// `input_ids, attention_mask: i64[batch,sequence]` → word embedding + position embedding
/// at `Range(0, Shape(ids)[1])` + a second table at `CumSum(mask, 1)` (HF's padding-aware
/// position ids) → MatMul `[4,3]`.
fn bert_like() -> Vec<u8> {
    let one = TensorProto {
        dims: vec![1],
        data_type: Some(7),
        int64_data: vec![1],
        ..Default::default()
    };
    model(
        vec![
            node("Shape", &["input_ids"], &["s"], vec![]),
            node("Gather", &["s", "one_s"], &["seq"], vec![]),
            node("Range", &["zero_s", "seq", "one_s"], &["pos"], vec![]),
            node("Unsqueeze", &["pos", "axes0"], &["pos2"], vec![]),
            node("Gather", &["word", "input_ids"], &["we"], vec![]),
            node("Gather", &["posemb", "pos2"], &["pe"], vec![]),
            node(
                "ConstantOfShape",
                &["s"],
                &["ones"],
                vec![tensor_attr("value", one)],
            ),
            node("Mul", &["ones", "attention_mask"], &["m"], vec![]),
            node("CumSum", &["m", "one_s"], &["cs"], vec![]),
            node("Mul", &["cs", "attention_mask"], &["cpos"], vec![]),
            node("Gather", &["tok", "cpos"], &["te"], vec![]),
            node("Add", &["we", "pe"], &["e1"], vec![]),
            node("Add", &["e1", "te"], &["e"], vec![]),
            node("MatMul", &["e", "proj"], &["y"], vec![]),
        ],
        vec![
            value("input_ids", 7, &[-1, -1], &["batch", "sequence"]),
            value("attention_mask", 7, &[-1, -1], &["batch", "sequence"]),
        ],
        vec![value("y", 1, &[-1, -1, H2 as i64], &["batch", "sequence"])],
        vec![
            f32_init("word", &[VOCAB as i64, H as i64], &vals(VOCAB * H, 3)),
            f32_init("posemb", &[MAXPOS as i64, H as i64], &vals(MAXPOS * H, 4)),
            f32_init(
                "tok",
                &[MAXPOS as i64 + 1, H as i64],
                &vals((MAXPOS + 1) * H, 5),
            ),
            f32_init("proj", &[H as i64, H2 as i64], &vals(H * H2, 6)),
            i64_init("zero_s", &[], &[0]),
            i64_init("one_s", &[], &[1]),
            i64_init("axes0", &[1], &[0]),
        ],
    )
}

/// The BERT-like model in f64.
fn bert_ref(ids: &[i64], mask: &[i64], b: usize, s: usize) -> Vec<f64> {
    let (word, pos, tok, proj) = (
        vals(VOCAB * H, 3),
        vals(MAXPOS * H, 4),
        vals((MAXPOS + 1) * H, 5),
        vals(H * H2, 6),
    );
    let mut out = vec![0f64; b * s * H2];
    for bi in 0..b {
        let mut cum = 0i64;
        for si in 0..s {
            let m = mask[bi * s + si];
            cum += m;
            let cpos = (cum * m) as usize;
            let id = ids[bi * s + si] as usize;
            let e: Vec<f64> = (0..H)
                .map(|h| {
                    word[id * H + h] as f64 + pos[si * H + h] as f64 + tok[cpos * H + h] as f64
                })
                .collect();
            for o in 0..H2 {
                out[(bi * s + si) * H2 + o] = (0..H).map(|h| e[h] * proj[h * H2 + o] as f64).sum();
            }
        }
    }
    out
}

fn parsed(bytes: Vec<u8>, label: &str) -> Arc<ParsedModel> {
    Arc::new(ParsedModel::from_bytes(bytes.into(), None, label).unwrap())
}

fn session() -> Session {
    Session::new(rlx_driver::Device::Cpu).unwrap()
}

fn assert_close(got: &Tensor, want: &[f64], what: &str) {
    let got = got.to_f64_vec();
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
            "{what}[{i}]: {g} vs {w}"
        );
    }
}

fn bert_inputs(b: usize, s: usize, seed: u64) -> (HashMap<String, Tensor>, Vec<i64>, Vec<i64>) {
    let ids: Vec<i64> = (0..b * s)
        .map(|i| ((i as u64 * 7 + seed) % VOCAB as u64) as i64)
        .collect();
    // the last row is padded: its last two positions are masked out
    let mask: Vec<i64> = (0..b * s)
        .map(|i| i64::from(!(i / s == b - 1 && i % s + 2 >= s)))
        .collect();
    let f = |v: &[i64]| {
        let v: Vec<f64> = v.iter().map(|&x| x as f64).collect();
        Tensor::from_f64(DType::I64, &[b, s], &v).unwrap()
    };
    let inputs = HashMap::from([
        ("input_ids".to_string(), f(&ids)),
        ("attention_mask".to_string(), f(&mask)),
    ]);
    (inputs, ids, mask)
}

#[test]
fn a_cnn_with_a_dynamic_batch_runs_at_two_batches_and_compiles_each_once() {
    let m = dynamic(
        &session(),
        parsed(cnn(), "cnn.onnx"),
        CompileOptions::default(),
    );
    for (round, n) in [(0, 1), (0, 3), (1, 1), (1, 3)] {
        let x = vals(n * C_IN * HW * HW, 7 + n as u64);
        let input = Tensor::from_f32(&[n, C_IN, HW, HW], x.clone()).unwrap();
        let out = m.run(&HashMap::from([("x".to_string(), input)])).unwrap();
        assert_eq!(out[0].1.shape(), &[n, C_OUT * HW * HW]);
        assert_close(&out[0].1, &cnn_ref(&x, n), &format!("batch {n}"));
        // the second round reuses both compiled graphs
        assert_eq!(m.compiles(), if round == 0 && n == 1 { 1 } else { 2 });
    }
    eprintln!(
        "cnn: compile of a new batch size {:.2} ms",
        m.last_compile_ms().unwrap()
    );
}

#[test]
fn a_bert_like_model_computes_position_ids_from_dynamic_shapes() {
    let m = dynamic(
        &session(),
        parsed(bert_like(), "bert.onnx"),
        CompileOptions::default(),
    );
    for (b, s) in [(2, 5), (1, 7), (2, 5)] {
        let (inputs, ids, mask) = bert_inputs(b, s, b as u64 + s as u64);
        let out = m.run(&inputs).unwrap();
        assert_eq!(out[0].1.shape(), &[b, s, H2]);
        assert_close(
            &out[0].1,
            &bert_ref(&ids, &mask, b, s),
            &format!("[{b},{s}]"),
        );
    }
    assert_eq!(
        m.compiles(),
        2,
        "the third run's shape was compiled already"
    );
    let ms = m.last_compile_ms().unwrap();
    eprintln!("bert-like: import + compile of a new shape {ms:.2} ms");
}

#[test]
fn shapes_that_contradict_the_model_name_the_input_dim_and_sizes() {
    let m = dynamic(
        &session(),
        parsed(bert_like(), "bert.onnx"),
        CompileOptions::default(),
    );
    let (mut inputs, _, _) = bert_inputs(2, 5, 1);
    let (other, _, _) = bert_inputs(2, 6, 1);
    inputs.insert("attention_mask".into(), other["attention_mask"].clone());
    let e = m.run(&inputs).unwrap_err().to_string();
    assert!(
        e.contains("input `attention_mask`")
            && e.contains("dim 1")
            && e.contains("`sequence`")
            && e.contains("is 6")
            && e.contains("input `input_ids` gives `sequence` = 5"),
        "{e}"
    );
    let cnn = dynamic(
        &session(),
        parsed(cnn(), "cnn.onnx"),
        CompileOptions::default(),
    );
    let x = Tensor::from_f32(&[2, 4, HW, HW], vals(2 * 4 * HW * HW, 1)).unwrap();
    let e = cnn
        .run(&HashMap::from([("x".to_string(), x)]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("input `x`") && e.contains("dim 1 is 4, expected 3"),
        "{e}"
    );
    assert_eq!(cnn.compiles(), 0);

    // a graph the importer cannot build for a shape is an error naming the sizes and node
    let odd = model(
        vec![node("NoSuchOp", &["x"], &["y"], vec![])],
        vec![value("x", 1, &[-1], &["n"])],
        vec![value("y", 1, &[-1], &["n"])],
        vec![],
    );
    let m = dynamic(
        &session(),
        parsed(odd, "odd.onnx"),
        CompileOptions::default(),
    );
    let x = Tensor::from_f32(&[2], vec![1.0, 2.0]).unwrap();
    let e = m
        .run(&HashMap::from([("x".to_string(), x)]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("specialising for n=2") && e.contains("NoSuchOp"),
        "{e}"
    );
}

#[test]
fn the_cache_keeps_the_most_recently_used_shapes() {
    let m = dynamic(
        &session(),
        parsed(cnn(), "cnn.onnx"),
        CompileOptions::default(),
    )
    .with_capacity(2);
    let run = |n: usize| {
        let x = Tensor::from_f32(&[n, C_IN, HW, HW], vals(n * C_IN * HW * HW, 3)).unwrap();
        m.run(&HashMap::from([("x".to_string(), x)])).unwrap();
    };
    run(1);
    run(2);
    run(1); // 1 is now the most recent
    run(3); // evicts 2
    assert_eq!(m.compiles(), 3);
    let batches: Vec<usize> = m.cached().iter().map(|b| b["batch"]).collect();
    assert_eq!(batches, vec![1, 3]);
    run(1);
    run(3);
    assert_eq!(m.compiles(), 3, "cached shapes compile nothing");
    run(2);
    assert_eq!(m.compiles(), 4, "an evicted shape compiles again");
    assert_eq!(m.cached().len(), 2);
}

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rlx-dyn-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn npy<T: npyz::Serialize + npyz::AutoSerialize + Copy>(path: &Path, shape: &[u64], v: &[T]) {
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
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_rlx"))
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
fn rlx_run_and_bench_take_the_sizes_from_the_npy_files() {
    let d = dir("cli");
    let model = d.join("bert.onnx");
    std::fs::write(&model, bert_like()).unwrap();
    let m = model.to_str().unwrap();
    let (b, s) = (2, 5);
    let (_, ids, mask) = bert_inputs(b, s, 3);
    npy(&d.join("ids.npy"), &[b as u64, s as u64], &ids);
    npy(&d.join("mask.npy"), &[b as u64, s as u64], &mask);
    let ones6 = vec![1i64; b * 6];
    npy(&d.join("mask6.npy"), &[b as u64, 6], &ones6);
    let ids_arg = format!("input_ids={}", d.join("ids.npy").display());
    let mask_arg = format!("attention_mask={}", d.join("mask.npy").display());
    let out = d.join("out");
    let (ok, _, err) = rlx(&[
        "run",
        m,
        "--device",
        "cpu",
        "--input",
        &ids_arg,
        "--input",
        &mask_arg,
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let bytes = std::fs::read(out.join("y.npy")).unwrap();
    let npy_file = npyz::NpyFile::new(&bytes[..]).unwrap();
    assert_eq!(npy_file.shape(), &[b as u64, s as u64, H2 as u64]);
    let got: Vec<f32> = npy_file.into_vec().unwrap();
    let got = Tensor::from_f32(&[b, s, H2], got).unwrap();
    assert_close(&got, &bert_ref(&ids, &mask, b, s), "rlx run");

    // a random input takes its symbol sizes from the files, or from --dim
    let cnn_path = d.join("cnn.onnx");
    std::fs::write(&cnn_path, cnn()).unwrap();
    let c = cnn_path.to_str().unwrap();
    let (ok, text, err) = rlx(&[
        "run", c, "--device", "cpu", "--input", "x=random", "--dim", "batch=2", "--json",
    ]);
    assert!(ok && text.contains("144"), "{text}{err}");
    let (ok, _, err) = rlx(&["run", c, "--device", "cpu", "--input", "x=random"]);
    assert!(
        !ok && err.contains("`batch`") && err.contains("--dim"),
        "{err}"
    );

    let bad_mask = format!("attention_mask={}", d.join("mask6.npy").display());
    let (ok, _, err) = rlx(&[
        "run", m, "--device", "cpu", "--input", &ids_arg, "--input", &bad_mask,
    ]);
    assert!(
        !ok && err.contains("attention_mask") && err.contains("sequence") && err.contains("= 5"),
        "{err}"
    );

    let (ok, text, err) = rlx(&[
        "bench", m, "--device", "cpu", "--input", &ids_arg, "--input", &mask_arg, "--warmup", "0",
        "--iters", "2", "--json",
    ]);
    assert!(ok && text.contains("\"compile_ms\""), "{text}{err}");
    let (ok, text, err) = rlx(&[
        "bench", c, "--device", "cpu", "--input", "x=random", "--dim", "batch=3", "--warmup", "0",
        "--iters", "1",
    ]);
    assert!(ok && text.contains("x[3, 3, 6, 6]"), "{text}{err}");
    std::fs::remove_dir_all(&d).ok();
}

/// `rlx bench --profile --trace` on every available device of the CPU, CUDA and Vulkan: the
/// trace is Chrome's JSON with one complete event per kernel, back to back, adding up to the
/// profile's kernel time; GPUs report their memory pool's peaks.
#[test]
fn bench_profiles_and_traces_on_every_available_device() {
    let d = dir("profile");
    let cnn_path = d.join("cnn.onnx");
    std::fs::write(&cnn_path, cnn()).unwrap();
    let c = cnn_path.to_str().unwrap();
    let (ok, text, err) = rlx(&["devices", "--json"]);
    assert!(ok, "{err}");
    let devices: serde_json::Value = serde_json::from_str(&text).unwrap();
    for device in ["cpu", "cuda", "vulkan"] {
        let available = devices
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["device"] == device && v["available"] == true);
        if !available {
            rlx_driver::testing::skip(
                &format!("bench_profiles_and_traces ({device})"),
                "device not available here",
            );
            continue;
        }
        let trace = d.join(format!("{device}.json"));
        let (ok, text, err) = rlx(&[
            "bench",
            c,
            "--device",
            device,
            "--input",
            "x=random",
            "--dim",
            "batch=2",
            "--warmup",
            "1",
            "--iters",
            "3",
            "--trace",
            trace.to_str().unwrap(),
            "--json",
        ]);
        assert!(ok, "{device}: {err}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        if device != "cpu" {
            // the device pool's statistics: what the run holds and what it reserved
            let m = &v["memory"];
            let (used, reserved) = (
                m["peak_bytes_in_use"].as_u64().unwrap(),
                m["peak_bytes_reserved"].as_u64().unwrap(),
            );
            assert!(used > 0 && reserved >= used, "{device}: {m}");
        }
        let p = &v["profile"];
        let kernel_ms = p["kernel_ms"].as_f64().unwrap();
        assert!(kernel_ms > 0.0, "{device}: {p}");
        assert!(
            !p["by_kind"].as_array().unwrap().is_empty(),
            "{device}: {p}"
        );
        assert!(p["clock"].as_str().is_some(), "{device}: {p}");
        let t: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
        let events: Vec<&serde_json::Value> = t["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X")
            .collect();
        assert!(!events.is_empty(), "{device}: {t}");
        let mut end = 0.0;
        for e in &events {
            assert!(e["name"].as_str().is_some_and(|n| !n.is_empty()), "{e}");
            let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
            assert!(dur >= 0.0 && (ts - end).abs() < 1e-6, "{device}: {e}");
            end = ts + dur;
        }
        assert!(
            (end / 1e3 - kernel_ms).abs() < 1e-6 * kernel_ms.max(1.0),
            "{device}"
        );
    }
    std::fs::remove_dir_all(&d).ok();
}

/// A real-size model, when `RLX_DYN_ONNX` names one with `input_ids`/`attention_mask`
/// inputs (e.g. MiniLM from `../shared/bench/build_minilm_onnx.py`): the time to import and
/// compile a new shape of the cached model, printed.
#[test]
fn a_new_shape_of_a_large_model_compiles_in_milliseconds() {
    let Ok(path) = std::env::var("RLX_DYN_ONNX") else {
        eprintln!("SKIPPED: set RLX_DYN_ONNX to a BERT-style ONNX file to time new shapes");
        return;
    };
    let t = std::time::Instant::now();
    let parsed = Arc::new(ParsedModel::open(&path).unwrap());
    eprintln!(
        "open (decode weights): {:.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    let m = dynamic(&session(), parsed, CompileOptions::default());
    for (b, s) in [(1, 16), (2, 32), (4, 128), (1, 16)] {
        let (inputs, _, _) = bert_inputs(b, s, 1);
        let bindings = m.bind(&inputs).unwrap();
        let before = m.compiles();
        let t = std::time::Instant::now();
        let c = m.compiled(&bindings).unwrap();
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let t = std::time::Instant::now();
        c.run(&inputs).unwrap();
        let first_ms = t.elapsed().as_secs_f64() * 1e3;
        let t = std::time::Instant::now();
        c.run(&inputs).unwrap();
        let next_ms = t.elapsed().as_secs_f64() * 1e3;
        let what = if m.compiles() > before {
            "import + compile"
        } else {
            "cache hit"
        };
        eprintln!("[{b},{s}]: {what} {ms:.2} ms, first run {first_ms:.2} ms, next {next_ms:.2} ms");
    }
}
