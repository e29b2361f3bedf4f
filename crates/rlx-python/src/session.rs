//! `rlx.InferenceSession`: ONNX Runtime's session API over an ONNX file compiled per shape
//! signature of its inputs (`rlx_onnx::runtime::dynamic`), so switching is one line.

use crate::binding::IoBinding;
use crate::convert;
use crate::dlpack::PyTensor;
use crate::error::{self, invalid};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};
use rlx_driver::Device;
use rlx_ir::{DType, Dim, Tensor, TensorType};
use rlx_onnx::ParsedModel;
use rlx_runtime::{CompileOptions, DynamicGraph, Session};
use std::collections::HashMap;
use std::sync::Arc;

/// An input or output of a model as ONNX Runtime describes it.
#[pyclass(frozen, module = "rlx", get_all)]
pub struct NodeArg {
    /// the name
    name: String,
    /// dims: ints, strings for symbolic dims; None where the model does not say
    shape: Option<Py<PyList>>,
    /// `tensor(float)`, `tensor(int64)`, ...
    r#type: String,
}

#[pymethods]
impl NodeArg {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let shape = match &self.shape {
            Some(s) => s.bind(py).repr()?.to_string(),
            None => "None".into(),
        };
        Ok(format!(
            "NodeArg(name='{}', type='{}', shape={shape})",
            self.name, self.r#type
        ))
    }
}

fn node_arg(py: Python<'_>, name: &str, ty: Option<&TensorType>) -> PyResult<NodeArg> {
    let Some(ty) = ty else {
        return Ok(NodeArg {
            name: name.to_string(),
            shape: None,
            r#type: "tensor(unknown)".into(),
        });
    };
    let dims = PyList::empty(py);
    for d in ty.shape.dims() {
        match d {
            Dim::Static(n) => dims.append(*n)?,
            Dim::Sym(s) => dims.append(PyString::new(py, s))?,
        }
    }
    Ok(NodeArg {
        name: name.to_string(),
        shape: Some(dims.unbind()),
        r#type: convert::ort_type(ty.dtype),
    })
}

/// The device of a `device=` argument: `auto` is the fastest available (as the CLI's).
pub fn device_arg(name: &str) -> PyResult<Device> {
    if name == "auto" {
        return Ok(rlx_runtime::auto_device());
    }
    name.parse::<Device>().map_err(|e| invalid(e.to_string()))
}

/// ONNX Runtime's `providers=` as a device: the first one RLX has a device for.
fn provider_device(providers: &Bound<'_, PyAny>) -> PyResult<Option<&'static str>> {
    for p in providers.try_iter()? {
        let p = p?;
        // an entry is a name or a (name, options) pair
        let name: String = match p.extract::<String>() {
            Ok(n) => n,
            Err(_) => {
                check_provider_entry(&p.get_item(1)?)?;
                p.get_item(0)?.extract()?
            }
        };
        match name.as_str() {
            "CUDAExecutionProvider" | "TensorrtExecutionProvider" => return Ok(Some("cuda")),
            "CPUExecutionProvider" => return Ok(Some("cpu")),
            _ => {}
        }
    }
    Ok(None)
}

/// The worker threads an ONNX Runtime `SessionOptions` (or any object with its attribute
/// names, or a dict) asks for: `intra_op_num_threads`, 0 meaning the default.
fn session_threads(options: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
    let value = if let Ok(d) = options.cast::<PyDict>() {
        d.get_item("intra_op_num_threads")?
    } else if options.hasattr("intra_op_num_threads")? {
        Some(options.getattr("intra_op_num_threads")?)
    } else {
        None
    };
    let Some(value) = value else { return Ok(None) };
    let n: i64 = value.extract().map_err(|_| {
        invalid("sess_options.intra_op_num_threads: expected an integer".to_string())
    })?;
    match n {
        0 => Ok(None),
        n if n > 0 => Ok(Some(n as usize)),
        n => Err(invalid(format!(
            "sess_options.intra_op_num_threads = {n}: expected 0 (the default) or a positive count"
        ))),
    }
}

/// ONNX Runtime's per-provider options (a list of dicts, one per provider): a `device_id`
/// other than 0 is refused, since RLX opens the first device of a kind; other keys are
/// ONNX Runtime's tuning knobs with no meaning here.
fn check_provider_options(options: &Bound<'_, PyAny>) -> PyResult<()> {
    for entry in options.try_iter()? {
        check_provider_entry(&entry?)?;
    }
    Ok(())
}

/// One provider's options (a dict); see [`check_provider_options`].
fn check_provider_entry(entry: &Bound<'_, PyAny>) -> PyResult<()> {
    let Ok(d) = entry.cast::<PyDict>() else {
        return Err(invalid(
            "provider options: expected a dict per provider".to_string(),
        ));
    };
    if let Some(id) = d.get_item("device_id")? {
        let id: String = id.str()?.extract()?;
        if id.trim() != "0" {
            return Err(invalid(format!(
                "provider options device_id = {id}: RLX opens the first device of a kind (device_id 0)"
            )));
        }
    }
    Ok(())
}

fn precision_arg(p: &str) -> PyResult<Option<DType>> {
    match p {
        "f32" => Ok(None),
        "f16" => Ok(Some(DType::F16)),
        "bf16" => Ok(Some(DType::BF16)),
        other => Err(invalid(format!(
            "precision `{other}`: expected f32, f16 or bf16"
        ))),
    }
}

/// An ONNX model compiled for a device, run like an `onnxruntime.InferenceSession`.
#[pyclass(frozen, module = "rlx")]
pub struct InferenceSession {
    graph: Arc<DynamicGraph>,
    parsed: Arc<ParsedModel>,
    device: Device,
    /// worker threads asked for (None: all cores)
    threads: Option<usize>,
}

impl InferenceSession {
    /// Opens an ONNX file (or its bytes) on a device.
    ///
    /// # Errors
    /// `ModelError` for an unreadable file, `DeviceError` for an unavailable device,
    /// `InvalidArgument` for a bad precision.
    pub fn open(
        model: &Bound<'_, PyAny>,
        device: &str,
        precision: &str,
        threads: Option<usize>,
    ) -> PyResult<InferenceSession> {
        let precision = precision_arg(precision)?;
        let device = device_arg(device)?;
        let parsed = if let Ok(bytes) = model.cast::<PyBytes>() {
            let bytes = bytes::Bytes::copy_from_slice(bytes.as_bytes());
            ParsedModel::from_bytes(bytes, None, "<bytes>").map_err(error::model)?
        } else {
            let path: std::path::PathBuf = model.extract()?;
            model
                .py()
                .detach(|| ParsedModel::open(&path))
                .map_err(error::model)?
        };
        let parsed = Arc::new(parsed);
        let session = Session::new(device).map_err(error::runtime)?;
        let options = CompileOptions {
            precision,
            threads,
            ..CompileOptions::default()
        };
        let graph = Arc::new(rlx_onnx::runtime::dynamic(
            &session,
            parsed.clone(),
            options,
        ));
        Ok(InferenceSession {
            graph,
            parsed,
            device,
            threads,
        })
    }

    /// Runs with feeds converted from Python, the GIL released meanwhile; the outputs asked
    /// for, in order.
    fn run_tensors_inner(
        &self,
        py: Python<'_>,
        output_names: Option<Vec<String>>,
        input_feed: &Bound<'_, PyDict>,
    ) -> PyResult<Vec<Tensor>> {
        let mut feeds = HashMap::with_capacity(input_feed.len());
        for (k, v) in input_feed.iter() {
            let name: String = k
                .extract()
                .map_err(|_| invalid(format!("input names are str, not {}", k.get_type())))?;
            let t = convert::to_tensor(&name, &v)?;
            feeds.insert(name, t);
        }
        let outputs = py
            .detach(|| self.graph.run(&feeds))
            .map_err(error::runtime)?;
        drop(feeds);
        let mut outputs: Vec<(String, Option<Tensor>)> =
            outputs.into_iter().map(|(n, t)| (n, Some(t))).collect();
        let names = match output_names {
            Some(n) => n,
            None => self.output_names(&outputs),
        };
        let mut picked = Vec::with_capacity(names.len());
        for name in &names {
            let slot = outputs.iter_mut().find(|(n, _)| n == name);
            match slot {
                Some((_, t @ Some(_))) => picked.extend(t.take()),
                // the same name asked twice: a copy of the first
                Some((_, None)) => {
                    let first = names.iter().position(|n| n == name);
                    picked.extend(first.and_then(|i| picked.get(i).cloned()));
                }
                None => {
                    let have: Vec<&str> = outputs.iter().map(|(n, _)| n.as_str()).collect();
                    return Err(invalid(format!(
                        "output `{name}`: the model has no such output (it has {})",
                        have.join(", ")
                    )));
                }
            }
        }
        Ok(picked)
    }

    /// All outputs: the declared ones in declared order, then any others the graph gave.
    fn output_names(&self, outputs: &[(String, Option<Tensor>)]) -> Vec<String> {
        let mut names: Vec<String> = self
            .parsed
            .outputs()
            .iter()
            .map(|(n, _)| n.clone())
            .filter(|n| outputs.iter().any(|(o, _)| o == n))
            .collect();
        for (n, _) in outputs {
            if !names.contains(n) {
                names.push(n.clone());
            }
        }
        names
    }
}

#[pymethods]
impl InferenceSession {
    #[new]
    #[pyo3(signature = (path_or_bytes, device="auto", precision="f32", *, providers=None, sess_options=None, provider_options=None, threads=None))]
    fn py_new(
        path_or_bytes: &Bound<'_, PyAny>,
        device: &str,
        precision: &str,
        providers: Option<&Bound<'_, PyAny>>,
        sess_options: Option<&Bound<'_, PyAny>>,
        provider_options: Option<&Bound<'_, PyAny>>,
        threads: Option<usize>,
    ) -> PyResult<InferenceSession> {
        let threads = match threads {
            Some(t) => Some(t),
            None => sess_options.map(session_threads).transpose()?.flatten(),
        };
        if let Some(options) = provider_options {
            check_provider_options(options)?;
        }
        let mut device = device;
        if device == "auto" {
            if let Some(p) = providers {
                if let Some(d) = provider_device(p)? {
                    device = d;
                }
            }
        }
        InferenceSession::open(path_or_bytes, device, precision, threads)
    }

    /// Runs the model: `output_names` (None: all) from `input_feed` (name to array).
    #[pyo3(signature = (output_names, input_feed, run_options=None))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        output_names: Option<Vec<String>>,
        input_feed: &Bound<'py, PyDict>,
        run_options: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let _ = run_options;
        self.run_tensors_inner(py, output_names, input_feed)?
            .into_iter()
            .map(|t| convert::to_numpy(py, t))
            .collect()
    }

    /// As `run`, returning `rlx.Tensor`s (DLPack producers) instead of numpy arrays.
    #[pyo3(signature = (output_names, input_feed))]
    fn run_tensors(
        &self,
        py: Python<'_>,
        output_names: Option<Vec<String>>,
        input_feed: &Bound<'_, PyDict>,
    ) -> PyResult<Vec<PyTensor>> {
        Ok(self
            .run_tensors_inner(py, output_names, input_feed)?
            .into_iter()
            .map(PyTensor::new)
            .collect())
    }

    /// ONNX Runtime's `IOBinding`: inputs and outputs bound once (numpy arrays, DLPack
    /// tensors in device memory, `rlx.DeviceArray`s), outputs left on the device.
    fn io_binding(&self) -> IoBinding {
        let declared = self
            .parsed
            .outputs()
            .iter()
            .map(|(n, _)| n.clone())
            .collect();
        IoBinding::new(self.graph.clone(), declared)
    }

    /// Runs the model over an `IOBinding` of this session (the GIL released meanwhile);
    /// its outputs are then `get_outputs()` / `copy_outputs_to_cpu()`.
    #[pyo3(signature = (iobinding, run_options=None))]
    fn run_with_iobinding(
        &self,
        py: Python<'_>,
        iobinding: &IoBinding,
        run_options: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let _ = run_options;
        if !Arc::ptr_eq(&iobinding.graph, &self.graph) {
            return Err(invalid("the IOBinding belongs to another InferenceSession"));
        }
        py.detach(|| iobinding.run()).map_err(error::runtime)
    }

    /// The inputs: name, shape (symbolic dims as strings), type.
    fn get_inputs(&self, py: Python<'_>) -> PyResult<Vec<NodeArg>> {
        self.graph
            .inputs()
            .iter()
            .map(|(n, t)| node_arg(py, n, Some(t)))
            .collect()
    }

    /// The outputs as the model declares them.
    fn get_outputs(&self, py: Python<'_>) -> PyResult<Vec<NodeArg>> {
        self.parsed
            .outputs()
            .iter()
            .map(|(n, t)| node_arg(py, n, t.as_ref()))
            .collect()
    }

    /// The options in effect, as an `rlx.SessionOptions` (`intra_op_num_threads`: 0 for all
    /// cores).
    fn get_session_options<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let options = py.import("rlx")?.getattr("SessionOptions")?.call0()?;
        options.setattr("intra_op_num_threads", self.threads.unwrap_or(0))?;
        Ok(options)
    }

    /// ONNX Runtime's provider name for the device (`CPUExecutionProvider`, ...).
    fn get_providers(&self) -> Vec<String> {
        vec![match self.device {
            Device::Cpu => "CPUExecutionProvider".to_string(),
            Device::Cuda => "CUDAExecutionProvider".to_string(),
            d => format!("RLX:{d}"),
        }]
    }

    /// The device the model runs on.
    #[getter]
    fn device(&self) -> String {
        self.device.name().to_string()
    }

    fn __repr__(&self) -> String {
        format!(
            "rlx.InferenceSession('{}', device='{}')",
            self.parsed.label(),
            self.device
        )
    }
}
