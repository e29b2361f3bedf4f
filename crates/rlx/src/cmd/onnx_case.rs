//! One ONNX backend test, run in this process: import with the first data set's inputs
//! available for freezing, compile, run every data set, compare with the expected outputs
//! (rtol 1e-3, atol 1e-7, or `data.json`'s `rtol` / `atol`). Sequences, optionals and
//! strings are given to the importer as values and compared element by element.

use super::model::device;
use rlx_ir::Tensor;
use rlx_onnx::proto::TypeProto;
use rlx_onnx::{ImportOptions, OnnxError, OnnxValue};
use rlx_runtime::{CompileOptions, Session};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The verdict of a test that ran to completion.
pub enum Outcome {
    /// every output within tolerance
    Passed,
    /// some output differs: which, and how
    Failed(String),
}

/// `test_data_set_*` directories, sorted.
fn data_sets(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_dir()
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("test_data_set_"))
        })
        .collect();
    v.sort();
    Ok(v)
}

/// `prefix_N.pb` files of a data set in N order.
fn numbered(dir: &Path, prefix: &str) -> Result<Vec<PathBuf>, String> {
    let mut v: Vec<(usize, PathBuf)> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter_map(|p| {
            let name = p.file_name()?.to_string_lossy().into_owned();
            let n = name
                .strip_prefix(prefix)?
                .strip_suffix(".pb")?
                .parse()
                .ok()?;
            Some((n, p))
        })
        .collect();
    v.sort();
    Ok(v.into_iter().map(|(_, p)| p).collect())
}

/// Values of a data set bound to `names` (by the file's value name, else by position),
/// each read as the type the model declares for it.
fn load_set(
    files: &[PathBuf],
    names: &[(String, Option<TypeProto>)],
) -> Result<Vec<(String, OnnxValue)>, String> {
    let mut out = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let ty = names.get(i).and_then(|(_, t)| t.as_ref());
        let (name, t) = rlx_onnx::load_value_pb(f, ty).map_err(|e| e.to_string())?;
        let names: Vec<String> = names.iter().map(|(n, _)| n.clone()).collect();
        let name = if names.contains(&name) {
            name
        } else {
            names
                .get(i)
                .cloned()
                .ok_or_else(|| format!("{}: more data files than values", f.display()))?
        };
        out.push((name, t));
    }
    Ok(out)
}

fn tolerance(dir: &Path) -> (f64, f64) {
    let mut tol = (1e-3, 1e-7);
    if let Ok(text) = std::fs::read_to_string(dir.join("data.json")) {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
            tol.0 = v.get("rtol").and_then(|x| x.as_f64()).unwrap_or(tol.0);
            tol.1 = v.get("atol").and_then(|x| x.as_f64()).unwrap_or(tol.1);
        }
    }
    tol
}

/// Compares values of any type: tensors as [`compare`] does, strings exactly, sequences
/// and optionals element by element.
fn compare_value(
    name: &str,
    want: &OnnxValue,
    got: &OnnxValue,
    rtol: f64,
    atol: f64,
) -> Result<(), String> {
    match (want, got) {
        (OnnxValue::Tensor(w), OnnxValue::Tensor(g)) => compare(name, w, g, rtol, atol),
        (OnnxValue::Strings(w), OnnxValue::Strings(g)) if w == g => Ok(()),
        (OnnxValue::Strings(w), OnnxValue::Strings(g)) => Err(format!(
            "output `{name}`: expected strings {:?} {:?}, got {:?} {:?}",
            w.shape, w.data, g.shape, g.data
        )),
        (OnnxValue::Sequence(w), OnnxValue::Sequence(g)) if w.len() == g.len() => {
            for (i, (w, g)) in w.iter().zip(g).enumerate() {
                compare_value(&rlx_onnx::element_name(name, i), w, g, rtol, atol)?;
            }
            Ok(())
        }
        (OnnxValue::Sequence(w), OnnxValue::Sequence(g)) => Err(format!(
            "output `{name}`: expected a sequence of {}, got {}",
            w.len(),
            g.len()
        )),
        (OnnxValue::Optional(None), OnnxValue::Optional(None)) => Ok(()),
        (OnnxValue::Optional(Some(w)), OnnxValue::Optional(Some(g))) => {
            compare_value(name, w, g, rtol, atol)
        }
        // a declared optional holding a value compares with the value itself
        (OnnxValue::Optional(Some(w)), g) => compare_value(name, w, g, rtol, atol),
        (w, OnnxValue::Optional(Some(g))) => compare_value(name, w, g, rtol, atol),
        (w, g) => Err(format!(
            "output `{name}`: expected a {}, got a {}",
            w.kind(),
            g.kind()
        )),
    }
}

/// Compares like `numpy.testing.assert_allclose` (NaNs equal, infinities by sign).
pub fn compare(
    name: &str,
    want: &Tensor,
    got: &Tensor,
    rtol: f64,
    atol: f64,
) -> Result<(), String> {
    if want.dtype() != got.dtype() || want.shape() != got.shape() {
        return Err(format!(
            "output `{name}`: expected {}{:?}, got {}{:?}",
            want.dtype(),
            want.shape(),
            got.dtype(),
            got.shape()
        ));
    }
    let mut bad = 0usize;
    let mut first = None;
    for i in 0..want.numel() {
        let (e, g) = (want.get_f64(i), got.get_f64(i));
        let ok = (e.is_nan() && g.is_nan())
            || (e.is_infinite() && e == g)
            || (e - g).abs() <= atol + rtol * e.abs();
        if !ok {
            bad += 1;
            first.get_or_insert((i, e, g));
        }
    }
    match first {
        None => Ok(()),
        Some((i, e, g)) => Err(format!(
            "output `{name}`: {bad} of {} elements differ; first at {i}: expected {e}, got {g}",
            want.numel()
        )),
    }
}

/// Binds the symbolic dims of a tensor input's declared type to the sizes of its value
/// (as a runtime specialises a model to its inputs), so they meet the static shapes of
/// sequence elements and strings, which the importer reads from their values.
fn bind_dims(name: &str, ty: &TypeProto, shape: &[usize], dims: &mut HashMap<String, usize>) {
    use rlx_onnx::proto::{tensor_shape_proto::dimension::Value as D, type_proto::Value};
    let Some(Value::TensorType(tt)) = &ty.value else {
        return;
    };
    let Some(decl) = &tt.shape else {
        return;
    };
    if decl.dim.len() != shape.len() {
        return;
    }
    for (i, (d, &size)) in decl.dim.iter().zip(shape).enumerate() {
        let sym = match &d.value {
            Some(D::DimValue(_)) => continue,
            Some(D::DimParam(p)) if !p.is_empty() => p.clone(),
            _ => format!("{name}_d{i}"),
        };
        dims.entry(sym).or_insert(size);
    }
}

/// Runs the test in `dir`: `Err` is a clean error (unsupported), `Ok` a verdict.
pub fn run_case(dir: &Path, device_name: &str) -> Result<Outcome, String> {
    let model_path = dir.join("model.onnx");
    let bytes = std::fs::read(&model_path).map_err(|e| format!("{}: {e}", model_path.display()))?;
    let label = model_path.display().to_string();
    let proto = rlx_onnx::decode_model(bytes.into(), &label).map_err(|e| e.to_string())?;
    let graph = proto.graph.as_ref().ok_or("the model has no graph")?;
    let inits: Vec<&str> = graph.initializer.iter().map(|t| t.name()).collect();
    let declared = |v: &rlx_onnx::proto::ValueInfoProto| (v.name().to_string(), v.r#type.clone());
    let in_names: Vec<(String, Option<TypeProto>)> = graph
        .input
        .iter()
        .filter(|v| !inits.contains(&v.name()))
        .map(declared)
        .collect();
    let out_names: Vec<(String, Option<TypeProto>)> = graph.output.iter().map(declared).collect();
    // Maps and sparse tensors have no importer value; say so before reading their data.
    for v in graph.input.iter().chain(&graph.output) {
        use rlx_onnx::proto::type_proto::Value;
        let kind = match v.r#type.as_ref().and_then(|t| t.value.as_ref()) {
            Some(Value::MapType(_)) => "a map",
            Some(Value::SparseTensorType(_)) => "a sparse tensor",
            Some(Value::OpaqueType(_)) => "an opaque value",
            _ => continue,
        };
        return Err(format!(
            "`{}` is {kind}; only tensors, sequences, optionals and strings are supported",
            v.name()
        ));
    }
    let (rtol, atol) = tolerance(dir);
    let sets = data_sets(dir)?;
    if sets.is_empty() {
        return Err("no test_data_set_* directory".into());
    }
    let device = device(device_name).map_err(|e| e.to_string())?;
    for set in &sets {
        let inputs = load_set(&numbered(set, "input_")?, &in_names)?;
        let expected = load_set(&numbered(set, "output_")?, &out_names)?;
        let mut opts = ImportOptions::default();
        for ((name, v), (_, ty)) in inputs.iter().zip(&in_names) {
            if let (OnnxValue::Tensor(t), Some(ty)) = (v, ty) {
                bind_dims(name, ty, t.shape(), &mut opts.dims);
            }
            if let OnnxValue::Tensor(t) = v {
                opts.known_inputs.insert(name.clone(), t.clone());
            } else {
                opts.known_values.insert(name.clone(), v.clone());
            }
        }
        let model = rlx_onnx::load(&model_path, &opts).map_err(|e: OnnxError| e.to_string())?;
        // a model whose outputs are all computed at import (strings) runs no graph
        let outputs = if model.graph.outputs().is_empty() {
            Vec::new()
        } else {
            let session = Session::new(device).map_err(|e| e.to_string())?;
            for (name, t) in model.params {
                session.set_param(&name, t);
            }
            let compiled = session
                .compile(&model.graph, CompileOptions::default())
                .map_err(|e| format!("compile: {e}"))?;
            let declared: Vec<String> = compiled.inputs().into_iter().map(|(n, _)| n).collect();
            let feed: HashMap<String, Tensor> = inputs
                .iter()
                .flat_map(|(n, v)| v.feeds(n))
                .filter(|(n, _)| declared.contains(n))
                .collect();
            compiled.run(&feed).map_err(|e| format!("run: {e}"))?
        };
        for (name, want) in &expected {
            let Some((_, layout)) = model.outputs.iter().find(|(n, _)| n == name) else {
                return Ok(Outcome::Failed(format!("output `{name}` was not produced")));
            };
            let got = match layout.assemble(&outputs) {
                Ok(v) => v,
                Err(m) => return Ok(Outcome::Failed(m)),
            };
            if let Err(m) = compare_value(name, want, &got, rtol, atol) {
                return Ok(Outcome::Failed(m));
            }
        }
    }
    Ok(Outcome::Passed)
}
