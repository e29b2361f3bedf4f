//! `rlx run MODEL.onnx`: inputs from `.npy` files or random, outputs to `.npy` files.

use super::model::{device, load_onnx};
use super::{npy, CmdResult};
use rlx_ir::{Dim, Tensor};
use rlx_runtime::{CompileOptions, Session};
use std::collections::HashMap;
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
/// approximate GELU; symbols are bound from the inputs at run time).
pub fn run_model(
    path: &str,
    device_name: &str,
    input_args: &[String],
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
    let model = load_onnx(path, &files)?;
    let declared: HashMap<String, rlx_ir::TensorType> = model
        .graph
        .inputs()
        .into_iter()
        .map(|(n, id)| (n, model.graph.ty(id).clone()))
        .collect();
    for (i, name) in random.iter().enumerate() {
        let ty = declared
            .get(name)
            .ok_or_else(|| format!("--input {name}=random: the model has no input `{name}`"))?;
        let shape: Vec<usize> = ty
            .shape
            .dims()
            .iter()
            .map(|d| match d {
                Dim::Static(n) => Ok(*n),
                Dim::Sym(s) => Err(format!(
                    "--input {name}=random: dim `{s}` of {ty} is symbolic; pass a .npy file"
                )),
            })
            .collect::<Result<_, _>>()?;
        files.insert(name.clone(), Tensor::random(ty.dtype, &shape, 1 + i as u64));
    }
    for name in files.keys() {
        if !declared.contains_key(name) {
            let mut names: Vec<&String> = declared.keys().collect();
            names.sort();
            return Err(format!(
                "--input {name}: the model has no such input; inputs: {}",
                names
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
            .into());
        }
    }
    let session = Session::new(device)?;
    for (name, t) in model.params {
        session.set_param(&name, t);
    }
    let compiled = session.compile(&model.graph, options)?;
    let compile_ms = t0.elapsed().as_secs_f64() * 1e3;
    let t1 = Instant::now();
    let outputs = compiled.run(&files)?;
    let run_ms = t1.elapsed().as_secs_f64() * 1e3;
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
        let v = serde_json::json!({
            "model": path,
            "device": device.name(),
            "outputs": outs,
            "timings_ms": {"load_and_compile": compile_ms, "run": run_ms},
        });
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_stems_are_safe() {
        assert_eq!(file_stem("out:0/logits"), "out_0_logits");
        assert_eq!(file_stem("a.b-c_d"), "a.b-c_d");
    }
}
