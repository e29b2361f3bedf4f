//! One ONNX backend test, run in this process: import with the first data set's inputs
//! available for freezing, compile, run every data set, compare with the expected outputs
//! (rtol 1e-3, atol 1e-7, or `data.json`'s `rtol` / `atol`).

use super::model::device;
use rlx_ir::Tensor;
use rlx_onnx::{ImportOptions, OnnxError};
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

/// Tensors of a data set bound to `names` (by the file's tensor name, else by position).
fn load_set(files: &[PathBuf], names: &[String]) -> Result<Vec<(String, Tensor)>, String> {
    let mut out = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let (name, t) = rlx_onnx::load_tensor_pb(f).map_err(|e| e.to_string())?;
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

/// Runs the test in `dir`: `Err` is a clean error (unsupported), `Ok` a verdict.
pub fn run_case(dir: &Path, device_name: &str) -> Result<Outcome, String> {
    let model_path = dir.join("model.onnx");
    let bytes = std::fs::read(&model_path).map_err(|e| format!("{}: {e}", model_path.display()))?;
    let label = model_path.display().to_string();
    let proto = rlx_onnx::decode_model(bytes.into(), &label).map_err(|e| e.to_string())?;
    let graph = proto.graph.as_ref().ok_or("the model has no graph")?;
    let inits: Vec<&str> = graph.initializer.iter().map(|t| t.name()).collect();
    let in_names: Vec<String> = graph
        .input
        .iter()
        .map(|v| v.name().to_string())
        .filter(|n| !inits.contains(&n.as_str()))
        .collect();
    let out_names: Vec<String> = graph.output.iter().map(|v| v.name().to_string()).collect();
    // Sequences, maps and optionals have no IR type; say so before reading their data.
    for v in graph.input.iter().chain(&graph.output) {
        use rlx_onnx::proto::type_proto::Value;
        let kind = match v.r#type.as_ref().and_then(|t| t.value.as_ref()) {
            Some(Value::TensorType(_)) | None => continue,
            Some(Value::SequenceType(_)) => "a sequence",
            Some(Value::MapType(_)) => "a map",
            Some(Value::OptionalType(_)) => "an optional",
            Some(Value::SparseTensorType(_)) => "a sparse tensor",
            Some(Value::OpaqueType(_)) => "an opaque value",
        };
        return Err(format!(
            "`{}` is {kind}; only tensors are supported",
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
        let opts = ImportOptions {
            known_inputs: inputs.iter().cloned().collect(),
            ..ImportOptions::default()
        };
        let model = rlx_onnx::load(&model_path, &opts).map_err(|e: OnnxError| e.to_string())?;
        let session = Session::new(device).map_err(|e| e.to_string())?;
        for (name, t) in model.params {
            session.set_param(&name, t);
        }
        let compiled = session
            .compile(&model.graph, CompileOptions::default())
            .map_err(|e| format!("compile: {e}"))?;
        let declared: Vec<String> = compiled.inputs().into_iter().map(|(n, _)| n).collect();
        let feed: HashMap<String, Tensor> = inputs
            .into_iter()
            .filter(|(n, _)| declared.contains(n))
            .collect();
        let outputs = compiled.run(&feed).map_err(|e| format!("run: {e}"))?;
        for (name, want) in &expected {
            let Some((_, got)) = outputs.iter().find(|(n, _)| n == name) else {
                return Ok(Outcome::Failed(format!("output `{name}` was not produced")));
            };
            if let Err(m) = compare(name, want, got, rtol, atol) {
                return Ok(Outcome::Failed(m));
            }
        }
    }
    Ok(Outcome::Passed)
}
