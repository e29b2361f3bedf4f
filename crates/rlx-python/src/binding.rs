//! `rlx.IOBinding` and `rlx.DeviceArray`: ONNX Runtime's IoBinding over
//! `rlx_runtime::Binding`. Inputs are numpy arrays (read in place), device arrays of an
//! earlier run, DLPack tensors in the session's device memory (a PyTorch CUDA tensor is
//! bound by pointer, no copy) or raw pointers; outputs stay on the device as
//! `rlx.DeviceArray`s (DLPack producers) until `copy_outputs_to_cpu` or `numpy()`.

use crate::convert;
use crate::dlpack::{self, DL_CPU, DL_CUDA};
use crate::error::{self, invalid, DeviceError};
use pyo3::prelude::*;
use pyo3::types::{PyAny, PyString};
use rlx_driver::Device;
use rlx_ir::{DType, Tensor, TensorData};
use rlx_runtime::{Binding, DeviceBuffer, DynamicGraph, RawHandle, Session};
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

/// A tensor in a session's device memory (a bound run's output, or a buffer the caller
/// bound): `numpy()` copies it to the host, `__dlpack__` hands it over without a copy.
#[pyclass(frozen, module = "rlx", name = "DeviceArray")]
pub struct DeviceArray {
    buffer: DeviceBuffer,
    session: Session,
}

/// Where a buffer's first byte is, as a DLPack device and address.
fn dl_place(b: &DeviceBuffer) -> PyResult<((i32, i32), usize)> {
    match b.handle() {
        RawHandle::Host(p) => Ok(((DL_CPU, 0), p)),
        RawHandle::Cuda(p) => Ok(((DL_CUDA, 0), p as usize)),
        RawHandle::Wgpu { .. } => Err(DeviceError::new_err(format!(
            "a {} buffer has no address other libraries can read; copy it with numpy()",
            b.device()
        ))),
    }
}

#[pymethods]
impl DeviceArray {
    /// The dims.
    #[getter]
    fn shape(&self) -> Vec<usize> {
        self.buffer.shape().to_vec()
    }

    /// ONNX Runtime's type name, `tensor(float)`.
    #[getter]
    fn r#type(&self) -> String {
        convert::ort_type(self.buffer.dtype())
    }

    /// The device the memory is on (`cpu`, `cuda`, ...).
    #[getter]
    fn device(&self) -> String {
        self.buffer.device().name().to_string()
    }

    /// The address of the first element (a CUDA device pointer on `cuda`).
    fn data_ptr(&self) -> PyResult<usize> {
        Ok(dl_place(&self.buffer)?.1)
    }

    /// The elements copied to a numpy array.
    fn numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let t = py
            .detach(|| self.session.download(&self.buffer))
            .map_err(error::runtime)?;
        convert::to_numpy(py, t)
    }

    #[pyo3(signature = (dtype=None, copy=None))]
    fn __array__<'py>(
        &self,
        py: Python<'py>,
        dtype: Option<Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = copy;
        let a = self.numpy(py)?;
        match dtype {
            Some(d) => a.call_method1("astype", (d,)),
            None => Ok(a),
        }
    }

    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<Bound<'_, PyAny>>,
        max_version: Option<Bound<'_, PyAny>>,
        dl_device: Option<Bound<'_, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        // every run and copy has finished when it returns: nothing for `stream` to wait on
        let _ = (stream, max_version, dl_device, copy);
        let (device, ptr) = dl_place(&self.buffer)?;
        let shape = self.buffer.shape().to_vec();
        // SAFETY: the buffer's elements, kept alive by the clone the capsule owns.
        unsafe {
            dlpack::export_raw(
                py,
                ptr as *mut c_void,
                device,
                self.buffer.dtype(),
                &shape,
                Box::new(self.buffer.clone()),
            )
        }
    }

    fn __dlpack_device__(&self) -> PyResult<(i32, i32)> {
        Ok(dl_place(&self.buffer)?.0)
    }

    fn __repr__(&self) -> String {
        format!(
            "rlx.DeviceArray(shape={:?}, type={}, device='{}')",
            self.buffer.shape(),
            convert::ort_type(self.buffer.dtype()),
            self.buffer.device()
        )
    }
}

/// What a bound value resolved to.
enum Resolved {
    Host(Tensor),
    Device(DeviceBuffer),
    /// an output the run allocates on the device
    Allocate,
}

/// The outputs bound so far, in binding order, and the runtime binding.
#[derive(Default)]
struct State {
    binding: Binding,
    order: Vec<String>,
}

/// ONNX Runtime's `IOBinding` (from `InferenceSession.io_binding()`): inputs and outputs
/// bound once and reused by every `run_with_iobinding`.
#[pyclass(frozen, module = "rlx", name = "IOBinding")]
pub struct IoBinding {
    pub(crate) graph: Arc<DynamicGraph>,
    /// output names in the order the model declares them
    declared: Vec<String>,
    state: Mutex<State>,
}

impl IoBinding {
    /// An empty binding for a session's model.
    pub fn new(graph: Arc<DynamicGraph>, declared: Vec<String>) -> IoBinding {
        IoBinding {
            graph,
            declared,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs the model over the binding (the GIL released by the caller).
    pub fn run(&self) -> Result<(), rlx_runtime::RuntimeError> {
        let mut state = self.lock();
        self.graph.run_with(&mut state.binding)
    }

    fn session(&self) -> &Session {
        self.graph.session()
    }

    /// The RLX dtype of ONNX Runtime's `element_type` (a numpy dtype or type).
    fn element_type(what: &str, et: Option<&Bound<'_, PyAny>>) -> PyResult<DType> {
        let et =
            et.ok_or_else(|| invalid(format!("{what}: buffer_ptr needs element_type and shape")))?;
        let numpy = et.py().import("numpy")?;
        let d = numpy.call_method1("dtype", (et,))?;
        let kind: String = d.getattr("kind")?.extract()?;
        let size: usize = d.getattr("itemsize")?.extract()?;
        convert::numpy_dtype(kind.as_bytes().first().copied().unwrap_or(0), size)
            .ok_or_else(|| invalid(format!("{what}: element_type {d} has no RLX counterpart")))
    }

    /// Resolves a bound value: a device type with an optional raw pointer (ONNX Runtime's
    /// form), a `DeviceArray`, a DLPack tensor, or (inputs) anything `run` takes.
    fn resolve(
        &self,
        what: &str,
        value: &Bound<'_, PyAny>,
        element_type: Option<&Bound<'_, PyAny>>,
        shape: Option<Vec<usize>>,
        buffer_ptr: Option<usize>,
        output: bool,
    ) -> PyResult<Resolved> {
        let device = self.session().device();
        if value.is_instance_of::<PyString>() {
            let kind: String = value.extract()?;
            let kind = kind.as_str();
            let on_host = kind == "cpu";
            if !on_host && kind != device.name() {
                return Err(DeviceError::new_err(format!(
                    "{what}: device_type `{kind}`, but the session runs on {device}"
                )));
            }
            let Some(ptr) = buffer_ptr else {
                if output {
                    return Ok(Resolved::Allocate);
                }
                return Err(invalid(format!(
                    "{what}: give a value, or element_type, shape and buffer_ptr"
                )));
            };
            let dtype = Self::element_type(what, element_type)?;
            let shape = shape.ok_or_else(|| invalid(format!("{what}: buffer_ptr needs shape")))?;
            if ptr == 0 {
                return Err(invalid(format!("{what}: buffer_ptr is null")));
            }
            if on_host && device != Device::Cpu {
                if output {
                    return Err(DeviceError::new_err(format!(
                        "{what}: outputs go to {device} memory; bind_output(name, '{device}') \
                         and copy_outputs_to_cpu()"
                    )));
                }
                let n = shape.iter().product::<usize>() * dtype.size_bytes();
                // SAFETY: ONNX Runtime's contract: `buffer_ptr` holds the described elements.
                let bytes = unsafe { std::slice::from_raw_parts(ptr as *const u8, n) };
                let data = TensorData::from_le_bytes(dtype, bytes)
                    .ok_or_else(|| invalid(format!("{what}: unreadable {dtype} elements")))?;
                let t = Tensor::new(shape, data).map_err(|e| invalid(format!("{what}: {e}")))?;
                return Ok(Resolved::Host(t));
            }
            let handle = if on_host {
                RawHandle::Host(ptr)
            } else {
                RawHandle::Cuda(ptr as u64)
            };
            // SAFETY: ONNX Runtime's contract: the caller keeps `buffer_ptr` alive and sized
            // while the binding holds it.
            let b = unsafe { self.session().wrap(handle, dtype, &shape, Box::new(())) }
                .map_err(error::runtime)?;
            return Ok(Resolved::Device(b));
        }
        if let Ok(array) = value.cast::<DeviceArray>() {
            return Ok(Resolved::Device(array.get().buffer.clone()));
        }
        if let Some((kind, _)) = dlpack::device_of(value)? {
            let in_place = kind == DL_CUDA || (output && kind == DL_CPU);
            if in_place {
                let stream = if kind == DL_CUDA {
                    self.session().backend().interop_stream()
                } else {
                    None
                };
                let f = dlpack::import_raw(what, value, stream)?;
                let handle = if kind == DL_CUDA {
                    RawHandle::Cuda(f.ptr as u64)
                } else {
                    RawHandle::Host(f.ptr)
                };
                if (kind == DL_CUDA) != (device == Device::Cuda) || f.device.1 != 0 {
                    return Err(DeviceError::new_err(format!(
                        "{what}: a tensor on DLPack device {:?}, but the session runs on \
                         {device} (device 0)",
                        f.device
                    )));
                }
                // SAFETY: the producer's memory, alive until the consumed capsule's deleter
                // runs, which the buffer's owner does when the last view is dropped.
                let b = unsafe {
                    self.session()
                        .wrap(handle, f.dtype, &f.shape, Box::new(f.keep))
                }
                .map_err(error::runtime)?;
                return Ok(Resolved::Device(b));
            }
        }
        if output {
            return Err(invalid(format!(
                "{what}: bind a device type ('{device}'), an rlx.DeviceArray or a DLPack tensor \
                 on the session's device"
            )));
        }
        Ok(Resolved::Host(convert::to_tensor(what, value)?))
    }
}

#[pymethods]
impl IoBinding {
    /// Binds an input: a numpy array, an `rlx.DeviceArray`, a DLPack tensor on the session's
    /// device (bound by pointer: no copy), or ONNX Runtime's `(device_type, device_id,
    /// element_type, shape, buffer_ptr)`.
    #[pyo3(signature = (name, device_type, device_id=0, element_type=None, shape=None, buffer_ptr=None))]
    fn bind_input(
        &self,
        name: &str,
        device_type: &Bound<'_, PyAny>,
        device_id: i32,
        element_type: Option<&Bound<'_, PyAny>>,
        shape: Option<Vec<usize>>,
        buffer_ptr: Option<usize>,
    ) -> PyResult<()> {
        let _ = device_id;
        let what = format!("input `{name}`");
        let v = self.resolve(&what, device_type, element_type, shape, buffer_ptr, false)?;
        let mut state = self.lock();
        match v {
            Resolved::Host(t) => state.binding.bind_input(name, t),
            Resolved::Device(b) => state.binding.bind_input_buffer(name, b),
            Resolved::Allocate => return Err(invalid(format!("{what}: no value"))),
        }
        Ok(())
    }

    /// Binds an input to a host array (ONNX Runtime's `bind_cpu_input`).
    fn bind_cpu_input(&self, name: &str, arr_on_cpu: &Bound<'_, PyAny>) -> PyResult<()> {
        let t = convert::to_tensor(name, arr_on_cpu)?;
        self.lock().binding.bind_input(name, t);
        Ok(())
    }

    /// Binds an output: a device type alone (the run allocates it on the device), an
    /// `rlx.DeviceArray` or DLPack tensor to write in place, or ONNX Runtime's raw
    /// `(device_type, device_id, element_type, shape, buffer_ptr)`.
    #[pyo3(signature = (name, device_type=None, device_id=0, element_type=None, shape=None, buffer_ptr=None))]
    fn bind_output(
        &self,
        name: &str,
        device_type: Option<&Bound<'_, PyAny>>,
        device_id: i32,
        element_type: Option<&Bound<'_, PyAny>>,
        shape: Option<Vec<usize>>,
        buffer_ptr: Option<usize>,
    ) -> PyResult<()> {
        let _ = device_id;
        let what = format!("output `{name}`");
        let v = match device_type {
            Some(value) => self.resolve(&what, value, element_type, shape, buffer_ptr, true)?,
            None => Resolved::Allocate,
        };
        let mut state = self.lock();
        match v {
            Resolved::Device(b) => state.binding.bind_output(name, b),
            Resolved::Allocate => state.binding.bind_output_to_device(name),
            Resolved::Host(_) => return Err(invalid(format!("{what}: not a device buffer"))),
        }
        if !state.order.iter().any(|n| n == name) {
            state.order.push(name.to_string());
        }
        Ok(())
    }

    /// The outputs of the last run as `rlx.DeviceArray`s, in binding order (declared
    /// order when none was bound).
    fn get_outputs(&self) -> Vec<DeviceArray> {
        let state = self.lock();
        let names: Vec<String> = if state.order.is_empty() {
            let mut names: Vec<String> = self
                .declared
                .iter()
                .filter(|n| state.binding.output(n).is_some())
                .cloned()
                .collect();
            for n in state.binding.output_names() {
                if !names.contains(&n) {
                    names.push(n);
                }
            }
            names
        } else {
            state.order.clone()
        };
        names
            .iter()
            .filter_map(|n| state.binding.output(n).cloned())
            .map(|buffer| DeviceArray {
                buffer,
                session: self.session().clone(),
            })
            .collect()
    }

    /// The outputs of the last run copied to numpy arrays, in `get_outputs` order.
    fn copy_outputs_to_cpu<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        self.get_outputs().iter().map(|a| a.numpy(py)).collect()
    }

    /// Unbinds every input.
    fn clear_binding_inputs(&self) {
        self.lock().binding.clear_inputs();
    }

    /// Unbinds every output.
    fn clear_binding_outputs(&self) {
        let mut state = self.lock();
        state.binding.clear_outputs();
        state.order.clear();
    }

    /// A no-op: inputs are read when the run starts (ONNX Runtime's API).
    fn synchronize_inputs(&self) {}

    /// A no-op: a run returns once its outputs are written (ONNX Runtime's API).
    fn synchronize_outputs(&self) {}
}
