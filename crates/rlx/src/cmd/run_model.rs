//! `rlx run MODEL.onnx`: inputs from `.npy` files or random, outputs to `.npy` files.

use super::model::device;
use super::{npy, CmdResult};
use rlx_ir::{Dim, Tensor, TensorType};
use rlx_runtime::{CompileOptions, Session};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Instant;

/// `NAME` with every character outside `[A-Za-z0-9_.-]` replaced by `_`, for file names.
pub fn file_stem(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Runs a model file once with the given inputs, compiled with `options` (mixed precision,
/// approximate GELU). Symbolic dims take the sizes of the input files, and the model is
/// imported with them bound, so ops that need static shapes run on dynamic-axis models.
pub fn run_model(
    path: &str,
    device_name: &str,
    input_args: &[String],
    dims: &HashMap<String, usize>,
    out_dir: Option<&Path>,
    json: bool,
    options: CompileOptions,
) -> CmdResult {
    let mut files: HashMap<String, Tensor> = HashMap::new();
    let mut random: Vec<String> = Vec::new();
    for a in input_args {
        let (name, value) = a
            .split_once('=')
            .ok_or_else(|| format!("--input `{a}`: expected NAME=FILE.npy or NAME=random"))?;
        if value == "random" {
            random.push(name.to_string());
        } else {
            let t = npy::read(Path::new(value)).map_err(|e| format!("--input {name}: {e}"))?;
            files.insert(name.to_string(), t);
        }
    }
    let device = device(device_name)?;
    let t0 = Instant::now();
    let parsed = std::sync::Arc::new(rlx_onnx::ParsedModel::open(path)?);
    let declared = parsed.inputs().to_vec();
    complete_inputs(&declared, &mut files, &random, dims)?;
    let session = Session::new(device)?;
    let model = rlx::onnx::dynamic_with(&session, parsed, files.clone(), options);
    model.bind(&files)?;
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    // The first run compiles every stage (one, unless shapes depend on computed values);
    // the compile time is reported apart from the run's.
    let t1 = Instant::now();
    let outputs = model.run(&files)?;
    let first_ms = t1.elapsed().as_secs_f64() * 1e3;
    let compile_ms = load_ms + model.total_compile_ms();
    let run_ms = (first_ms - model.total_compile_ms()).max(0.0);
    if let Some(dir) = out_dir {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for (name, t) in &outputs {
            npy::write(&dir.join(format!("{}.npy", file_stem(name))), t)?;
        }
    }
    if json {
        let outs: Vec<serde_json::Value> = outputs
            .iter()
            .map(|(n, t)| {
                serde_json::json!({
                    "name": n,
                    "dtype": t.dtype().name(),
                    "shape": t.shape(),
                    "head": t.to_f64_vec().into_iter().take(8).collect::<Vec<_>>(),
                })
            })
            .collect();
        let mut v = serde_json::json!({
            "model": path,
            "device": device.name(),
            "outputs": outs,
            "timings_ms": {"load_and_compile": compile_ms, "run": run_ms},
        });
        if let Some(m) = session.backend().memory() {
            v["memory"] = super::bench::memory_json(&m);
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("model     {path}");
        println!("device    {device}");
        for (n, t) in &outputs {
            println!("output    {n}: {t:?}");
        }
        println!("timings   load+compile {compile_ms:.2} ms, run {run_ms:.3} ms");
    }
    Ok(())
}

/// Checks the inputs read from files against the model's declared inputs (unknown names,
/// dtypes, ranks, static dims, consistent symbol sizes), then adds the `NAME=random` ones:
/// their symbolic dims take the sizes the files give, or those of `dims` (`--dim`). Returns
/// every symbol size known.
///
/// # Errors
/// An unknown input name, a file that contradicts the model or `dims`, or a random input
/// with a symbolic dim no file or `dims` gives a size to.
pub fn complete_inputs(
    declared: &[(String, TensorType)],
    files: &mut HashMap<String, Tensor>,
    random: &[String],
    dims: &HashMap<String, usize>,
) -> Result<BTreeMap<String, usize>, Box<dyn std::error::Error>> {
    let names = || {
        declared
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    for name in files.keys().chain(random) {
        if !declared.iter().any(|(n, _)| n == name) {
            return Err(format!(
                "--input {name}: the model has no input `{name}`; inputs: {}",
                names()
            )
            .into());
        }
    }
    let given: Vec<(String, TensorType)> = declared
        .iter()
        .filter(|(n, _)| files.contains_key(n))
        .cloned()
        .collect();
    let mut bindings = rlx_runtime::bind_inputs(&given, files)?;
    for (k, &v) in dims {
        match bindings.get(k) {
            Some(&b) if b != v => {
                return Err(format!("--dim {k}={v}: the input files give `{k}` = {b}").into())
            }
            _ => {
                bindings.insert(k.clone(), v);
            }
        }
    }
    for (i, name) in random.iter().enumerate() {
        let Some((_, ty)) = declared.iter().find(|(n, _)| n == name) else {
            continue;
        };
        let shape: Vec<usize> = ty
            .shape
            .dims()
            .iter()
            .map(|d| match d {
                Dim::Static(n) => Ok(*n),
                Dim::Sym(s) => bindings.get(&**s).copied().ok_or_else(|| {
                    format!(
                        "--input {name}=random: dim `{s}` of {ty} is symbolic and no input file gives it; pass a .npy file or --dim {s}=N"
                    )
                }),
            })
            .collect::<Result<_, _>>()?;
        files.insert(name.clone(), Tensor::random(ty.dtype, &shape, 1 + i as u64));
    }
    Ok(bindings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_stems_are_safe() {
        assert_eq!(file_stem("out:0/logits"), "out_0_logits");
        assert_eq!(file_stem("a.b-c_d"), "a.b-c_d");
    }
}
