//! The `rlx` Python package (module `rlx._rlx`, re-exported by `python/rlx/__init__.py`):
//! a thin layer over the library crates. `InferenceSession` runs ONNX files with ONNX
//! Runtime's API (`rlx_onnx::runtime`), `embed` and `generate` run Hugging Face folders and
//! GGUF files (`rlx_llm`), `devices` lists what `rlx devices` lists (`rlx_runtime`).
//!
//! numpy inputs are read in place, outputs move into numpy, `rlx.Tensor` speaks DLPack,
//! models run with the GIL released, and every error is an `rlx.RlxError` subclass with
//! the CLI's message.

mod binding;
mod convert;
mod dlpack;
mod embed;
mod error;
mod llm;
mod session;

use embed::EmbeddingModel;
use llm::{LanguageModel, TextIterator};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use rlx_llm::EngineSettings;
use session::{InferenceSession, NodeArg};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Every device: `device`, `registered` (compiled in), `available`, `reason` (why not),
/// `info` (name, memory_bytes, compute_units, arch, software) — as `rlx devices --json`.
#[pyfunction]
fn devices(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    let statuses = py.detach(rlx_runtime::device_statuses);
    let mut out = Vec::with_capacity(statuses.len());
    for s in statuses {
        let d = PyDict::new(py);
        d.set_item("device", s.device.name())?;
        d.set_item("registered", s.registered)?;
        d.set_item("available", s.available)?;
        d.set_item("reason", s.reason)?;
        let info = match s.info {
            Some(i) => {
                let info = PyDict::new(py);
                info.set_item("name", i.name)?;
                info.set_item("memory_bytes", i.memory_bytes)?;
                info.set_item("compute_units", i.compute_units)?;
                info.set_item("arch", i.arch)?;
                info.set_item("software", i.software)?;
                Some(info)
            }
            None => None,
        };
        d.set_item("info", info)?;
        out.push(d);
    }
    Ok(out)
}

/// What a model path holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Onnx,
    Embedding,
    Language,
}

fn kind_of(path: &str) -> PyResult<Kind> {
    if path.ends_with(".onnx") {
        return Ok(Kind::Onnx);
    }
    let p = Path::new(path);
    if p.is_dir() || path.starts_with("hf:") {
        let dir = rlx_models::resolve(path).map_err(error::model)?;
        // a folder without config.json may hold a GGUF file: the Llama loader says
        if let Ok(rlx_models::Family::Bert) = rlx_models::family(&dir) {
            return Ok(Kind::Embedding);
        }
    }
    Ok(Kind::Language)
}

/// Loads a model by what the path holds: an `.onnx` file gives an `InferenceSession`, a
/// BERT-family folder an `EmbeddingModel`, a GGUF file or Llama-family folder a
/// `LanguageModel`. `hf:<owner>/<name>` downloads a folder first. Language models only:
/// `context` (rows per sequence; a Phi-3 longrope model asked for more than its original
/// context takes its long RoPE factors) and `exact_quant` (f32 activations in products over
/// quantized weights instead of int8 ones).
#[pyfunction]
#[pyo3(signature = (path, device="auto", *, context=None, exact_quant=false))]
fn load(
    py: Python<'_>,
    path: &Bound<'_, PyAny>,
    device: &str,
    context: Option<usize>,
    exact_quant: bool,
) -> PyResult<Py<PyAny>> {
    let spec: PathBuf = path.extract()?;
    let spec = spec.to_string_lossy().into_owned();
    let s = spec.clone();
    let kind = py.detach(move || kind_of(&s))?;
    if kind != Kind::Language && (context.is_some() || exact_quant) {
        return Err(error::invalid(format!(
            "`context` and `exact_quant` apply to language models; {spec} is not one"
        )));
    }
    Ok(match kind {
        Kind::Onnx => Py::new(py, InferenceSession::open(path, device, "f32", None)?)?.into_any(),
        Kind::Embedding => Py::new(py, EmbeddingModel::open(py, &spec, device)?)?.into_any(),
        Kind::Language => {
            let settings = EngineSettings {
                context,
                exact_quant,
                ..EngineSettings::default()
            };
            Py::new(
                py,
                LanguageModel::open(py, PathBuf::from(spec), device, settings)?,
            )?
            .into_any()
        }
    })
}

/// The model the convenience functions loaded last, by (path, device): `rlx.embed` and
/// `rlx.generate` called again with the same model reuse it instead of loading it again.
static LAST_EMBEDDER: LastModel<EmbeddingModel> = Mutex::new(None);
static LAST_LLM: LastModel<LanguageModel> = Mutex::new(None);

/// A model with the path and device it was loaded for.
type LastModel<T> = Mutex<Option<(String, String, Arc<Py<T>>)>>;

fn cached<T>(
    slot: &LastModel<T>,
    path: &str,
    device: &str,
    open: impl FnOnce() -> PyResult<Py<T>>,
) -> PyResult<Arc<Py<T>>> {
    if let Some((p, d, m)) = slot.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        if p == path && d == device {
            return Ok(m.clone());
        }
    }
    let m = Arc::new(open()?);
    *slot.lock().unwrap_or_else(|e| e.into_inner()) =
        Some((path.to_string(), device.to_string(), m.clone()));
    Ok(m)
}

/// A list of texts from a str or a sequence of str.
fn texts_arg(texts: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if let Ok(s) = texts.cast::<PyString>() {
        return Ok(vec![s.to_string()]);
    }
    texts.extract()
}

/// Sentence embeddings (mean-pooled, L2-normalised) of `texts` with a BERT-family folder
/// (or an `EmbeddingModel`): a `(len(texts), dim)` float32 numpy array.
#[pyfunction]
#[pyo3(name = "embed", signature = (texts, model, device="auto"))]
fn embed_texts<'py>(
    py: Python<'py>,
    texts: &Bound<'py, PyAny>,
    model: &Bound<'py, PyAny>,
    device: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let texts = texts_arg(texts)?;
    if let Ok(m) = model.cast::<EmbeddingModel>() {
        return Ok(m.get().embed_texts(py, texts)?.into_any());
    }
    let path: PathBuf = model.extract()?;
    let path = path.to_string_lossy().into_owned();
    let m = cached(&LAST_EMBEDDER, &path, device, || {
        Py::new(py, EmbeddingModel::open(py, &path, device)?)
    })?;
    Ok(m.get().embed_texts(py, texts)?.into_any())
}

/// Generates after `prompt` with a GGUF file or Llama-family folder (or a
/// `LanguageModel`): an iterator of text pieces (`stream=True`) or the whole text. Sampling
/// as `rlx generate`: temperature (0: greedy), top_k, top_p, min_p, repeat_penalty, seed.
/// `context` and `exact_quant` load a model path as `rlx.load` does (not for a
/// `LanguageModel`, which was loaded with its own).
#[pyfunction]
#[pyo3(signature = (prompt, model, max_tokens=64, *, stream=true, device="auto", temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0, seed=0, chat=false, stop=None, ignore_eos=false, context=None, exact_quant=false))]
#[allow(clippy::too_many_arguments)]
fn generate(
    py: Python<'_>,
    prompt: String,
    model: &Bound<'_, PyAny>,
    max_tokens: usize,
    stream: bool,
    device: &str,
    temperature: f64,
    top_k: usize,
    top_p: f64,
    min_p: f64,
    repeat_penalty: f64,
    seed: u64,
    chat: bool,
    stop: Option<Vec<String>>,
    ignore_eos: bool,
    context: Option<usize>,
    exact_quant: bool,
) -> PyResult<Py<PyAny>> {
    let generate = |m: &LanguageModel| {
        m.generate(
            py,
            prompt,
            max_tokens,
            stream,
            temperature,
            top_k,
            top_p,
            min_p,
            repeat_penalty,
            seed,
            chat,
            stop,
            ignore_eos,
        )
    };
    if let Ok(m) = model.cast::<LanguageModel>() {
        if context.is_some() || exact_quant {
            return Err(error::invalid(
                "`context` and `exact_quant` are load settings: give them to rlx.load, or pass \
                 a model path",
            ));
        }
        return generate(m.get());
    }
    let path: PathBuf = model.extract()?;
    // the settings are part of the cached model's identity
    let key = format!(
        "{}\u{0}{context:?}\u{0}{exact_quant}",
        path.to_string_lossy()
    );
    let settings = EngineSettings {
        context,
        exact_quant,
        ..EngineSettings::default()
    };
    let m = cached(&LAST_LLM, &key, device, || {
        Py::new(py, LanguageModel::open(py, path, device, settings)?)
    })?;
    generate(m.get())
}

/// The extension module.
#[pymodule]
fn _rlx(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("RlxError", py.get_type::<error::RlxError>())?;
    m.add("InvalidArgument", py.get_type::<error::InvalidArgument>())?;
    m.add("ModelError", py.get_type::<error::ModelError>())?;
    m.add("DeviceError", py.get_type::<error::DeviceError>())?;
    m.add("RunError", py.get_type::<error::RunError>())?;
    m.add_class::<InferenceSession>()?;
    m.add_class::<NodeArg>()?;
    m.add_class::<dlpack::PyTensor>()?;
    m.add_class::<binding::IoBinding>()?;
    m.add_class::<binding::DeviceArray>()?;
    m.add_class::<EmbeddingModel>()?;
    m.add_class::<LanguageModel>()?;
    m.add_class::<TextIterator>()?;
    m.add_function(wrap_pyfunction!(devices, m)?)?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(embed_texts, m)?)?;
    m.add_function(wrap_pyfunction!(generate, m)?)?;
    Ok(())
}
