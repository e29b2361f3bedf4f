//! Resolving the MODEL argument of the verbs into a graph with its weights.

use rlx_driver::Device;
use rlx_ir::{Graph, Tensor};
use rlx_runtime::auto_device;
use std::collections::HashMap;

/// A loaded model: graph, weights, and a human name.
pub struct Loaded {
    /// what to call it in output
    pub name: String,
    /// the graph
    pub graph: Graph,
    /// weights by name
    pub params: Vec<(String, Tensor)>,
}

/// Loads MODEL; `None` or `demo` is the bundled demo.
pub fn load(model: Option<&str>) -> Result<Loaded, Box<dyn std::error::Error>> {
    match model {
        None | Some("demo") => Ok(Loaded {
            name: "demo (digits CNN)".into(),
            graph: rlx::demo::build_graph()?,
            params: rlx::demo::weights()?,
        }),
        Some(path) if path.ends_with(".onnx") => load_onnx(path, &HashMap::new()),
        Some(path) if std::path::Path::new(path).is_dir() || path.starts_with("hf:") => {
            load_folder(path)
        }
        Some(path) => Err(format!(
            "cannot load `{path}`: this build of rlx reads ONNX models (`.onnx`), model folders (BERT family) and the bundled demo (omit MODEL)"
        )
        .into()),
    }
}

/// Loads a Hugging Face model folder (`hf:<name>` downloads one) through `rlx-models`.
pub fn load_folder(spec: &str) -> Result<Loaded, Box<dyn std::error::Error>> {
    let dir = rlx_models::resolve(spec)?;
    match rlx_models::family(&dir)? {
        rlx_models::Family::Bert => {
            let m = rlx_models::BertModel::load(&dir)?;
            Ok(Loaded {
                name: spec.to_string(),
                graph: m.graph,
                params: m.params,
            })
        }
        rlx_models::Family::Llama => Err(format!(
            "{}: a Llama model runs through `rlx generate` (or `rlx bench`), not as one graph",
            dir.display()
        )
        .into()),
    }
}

/// Loads an ONNX model; `known` are input values it may freeze where the IR needs a static
/// value (see `rlx_onnx::ImportOptions`).
pub fn load_onnx(
    path: &str,
    known: &HashMap<String, Tensor>,
) -> Result<Loaded, Box<dyn std::error::Error>> {
    load_onnx_with(path, known, &HashMap::new())
}

/// [`load_onnx`] with symbolic input dims bound to sizes at import (`--dim NAME=N`).
pub fn load_onnx_with(
    path: &str,
    known: &HashMap<String, Tensor>,
    dims: &HashMap<String, usize>,
) -> Result<Loaded, Box<dyn std::error::Error>> {
    let opts = rlx_onnx::ImportOptions {
        known_inputs: known.clone(),
        dims: dims.clone(),
        ..Default::default()
    };
    let m = rlx_onnx::load(path, &opts)?;
    Ok(Loaded {
        name: path.to_string(),
        graph: m.graph,
        params: m.params,
    })
}

/// Parses `--device`: `auto` picks the fastest available device.
pub fn device(arg: &str) -> Result<Device, Box<dyn std::error::Error>> {
    if arg == "auto" {
        Ok(auto_device())
    } else {
        Ok(arg.parse::<Device>()?)
    }
}
