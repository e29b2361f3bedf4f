//! DLPack in and out, without copies. `rlx.Tensor` (a run's output) hands its host memory
//! to any consumer of `__dlpack__` (numpy, PyTorch, JAX); a feed value with `__dlpack__`
//! is read in place when it lives in host memory and is row-major. Device memory (a CUDA
//! tensor) is refused by `run` with `DeviceError`; an `IOBinding` binds it by pointer
//! ([`import_raw`]), and `rlx.DeviceArray` exports device buffers ([`export_raw`]).

use crate::convert;
use crate::error::{invalid, DeviceError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyAny;
use rlx_ir::{DType, Tensor, TensorData};
use std::ffi::{c_void, CStr};
use std::sync::Arc;

/// `DLDeviceType::kDLCPU`.
pub const DL_CPU: i32 = 1;
/// `DLDeviceType::kDLCUDA`.
pub const DL_CUDA: i32 = 2;
/// `DLDeviceType::kDLCUDAHost` (pinned host memory).
const DL_CUDA_HOST: i32 = 3;
const DL_INT: u8 = 0;
const DL_UINT: u8 = 1;
const DL_FLOAT: u8 = 2;
const DL_BFLOAT: u8 = 4;
const DL_BOOL: u8 = 6;
const CAPSULE: &CStr = c"dltensor";
const USED_CAPSULE: &CStr = c"used_dltensor";

#[repr(C)]
#[derive(Clone, Copy)]
struct DlDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DlDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DlTensor {
    data: *mut c_void,
    device: DlDevice,
    ndim: i32,
    dtype: DlDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DlManagedTensor {
    dl_tensor: DlTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DlManagedTensor)>,
}

fn dl_dtype(dtype: DType) -> Option<DlDataType> {
    let (code, bits) = match dtype {
        DType::F32 => (DL_FLOAT, 32),
        DType::F64 => (DL_FLOAT, 64),
        DType::F16 => (DL_FLOAT, 16),
        DType::BF16 => (DL_BFLOAT, 16),
        DType::I8 => (DL_INT, 8),
        DType::I16 => (DL_INT, 16),
        DType::I32 => (DL_INT, 32),
        DType::I64 => (DL_INT, 64),
        DType::U8 => (DL_UINT, 8),
        DType::U16 => (DL_UINT, 16),
        DType::U32 => (DL_UINT, 32),
        DType::U64 => (DL_UINT, 64),
        DType::Bool => (DL_BOOL, 8),
        _ => return None,
    };
    Some(DlDataType {
        code,
        bits,
        lanes: 1,
    })
}

fn rlx_dtype(t: DlDataType) -> Option<DType> {
    if t.lanes != 1 {
        return None;
    }
    Some(match (t.code, t.bits) {
        (DL_FLOAT, 32) => DType::F32,
        (DL_FLOAT, 64) => DType::F64,
        (DL_FLOAT, 16) => DType::F16,
        (DL_BFLOAT, 16) => DType::BF16,
        (DL_INT, 8) => DType::I8,
        (DL_INT, 16) => DType::I16,
        (DL_INT, 32) => DType::I32,
        (DL_INT, 64) => DType::I64,
        (DL_UINT, 8) => DType::U8,
        (DL_UINT, 16) => DType::U16,
        (DL_UINT, 32) => DType::U32,
        (DL_UINT, 64) => DType::U64,
        (DL_BOOL, 8) => DType::Bool,
        _ => return None,
    })
}

/// What an exported capsule owns: what keeps the memory alive (a shared tensor, a device
/// buffer) and the shape array DLPack points at.
struct Export {
    _owner: Box<dyn std::any::Any + Send>,
    _shape: Vec<i64>,
    managed: DlManagedTensor,
}

unsafe extern "C" fn delete_export(m: *mut DlManagedTensor) {
    // SAFETY: `manager_ctx` is the `Box<Export>` leaked in `export`; the consumer calls the
    // deleter once.
    unsafe { drop(Box::from_raw((*m).manager_ctx as *mut Export)) };
}

unsafe extern "C" fn capsule_destructor(capsule: *mut ffi::PyObject) {
    // a capsule nobody consumed still owns its tensor; a consumed one was renamed
    // SAFETY: called by Python with the capsule being destroyed.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, CAPSULE.as_ptr()) == 1 {
            let m = ffi::PyCapsule_GetPointer(capsule, CAPSULE.as_ptr()) as *mut DlManagedTensor;
            if let Some(delete) = m.as_ref().and_then(|m| m.deleter) {
                delete(m);
            }
        }
    }
}

/// A `dltensor` capsule reading `tensor`'s host memory in place.
pub fn export(py: Python<'_>, tensor: Arc<Tensor>) -> PyResult<Py<PyAny>> {
    let data = tensor.data().as_bytes().as_ptr() as *mut c_void;
    let (dtype, shape) = (tensor.dtype(), tensor.shape().to_vec());
    // SAFETY: the tensor's elements, kept alive by the tensor itself.
    unsafe { export_raw(py, data, (DL_CPU, 0), dtype, &shape, Box::new(tensor)) }
}

/// A `dltensor` capsule over `shape` elements of `dtype` at `data` on `device` (DLPack's
/// device type and id), kept alive by `owner` until the consumer is done.
///
/// # Safety
/// `data` addresses those elements, row-major, valid while `owner` lives.
pub unsafe fn export_raw(
    py: Python<'_>,
    data: *mut c_void,
    device: (i32, i32),
    dtype: DType,
    shape: &[usize],
    owner: Box<dyn std::any::Any + Send>,
) -> PyResult<Py<PyAny>> {
    let dl = dl_dtype(dtype).ok_or_else(|| {
        invalid(format!(
            "a {dtype} tensor has no DLPack dtype; convert it with numpy()"
        ))
    })?;
    let mut shape: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    let ndim = shape.len() as i32;
    let shape_ptr = shape.as_mut_ptr();
    let export = Box::new(Export {
        _owner: owner,
        _shape: shape,
        managed: DlManagedTensor {
            dl_tensor: DlTensor {
                data,
                device: DlDevice {
                    device_type: device.0,
                    device_id: device.1,
                },
                ndim,
                dtype: dl,
                shape: shape_ptr,
                strides: std::ptr::null_mut(),
                byte_offset: 0,
            },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete_export),
        },
    });
    let ctx = Box::into_raw(export);
    // SAFETY: `ctx` is a live box; the capsule or its consumer frees it through the deleter.
    unsafe {
        (*ctx).managed.manager_ctx = ctx as *mut c_void;
        let managed = &mut (*ctx).managed as *mut DlManagedTensor;
        let capsule = ffi::PyCapsule_New(
            managed as *mut c_void,
            CAPSULE.as_ptr(),
            Some(capsule_destructor),
        );
        if capsule.is_null() {
            drop(Box::from_raw(ctx));
            return Err(PyErr::fetch(py));
        }
        Ok(Bound::from_owned_ptr(py, capsule).unbind())
    }
}

/// A consumed DLPack tensor: calls the producer's deleter when the last reader is gone.
pub struct Consumed(*mut DlManagedTensor);

// SAFETY: the deleter runs once, with the interpreter attached, from whichever thread.
unsafe impl Send for Consumed {}
// SAFETY: nothing is reached through a shared reference.
unsafe impl Sync for Consumed {}

impl Drop for Consumed {
    fn drop(&mut self) {
        let managed = self.0;
        // producers' deleters release Python objects: run them attached
        Python::attach(|_| {
            // SAFETY: the capsule was renamed `used_dltensor`, so this is the only call.
            unsafe {
                if let Some(delete) = (*managed).deleter {
                    delete(managed);
                }
            }
        });
    }
}

/// A feed value with `__dlpack__` as a tensor (read in place when row-major).
///
/// # Errors
/// `DeviceError` for device memory, `InvalidArgument` for a dtype RLX lacks.
pub fn import(name: &str, value: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let (device_type, device_id): (i32, i32) =
        value.call_method0("__dlpack_device__")?.extract()?;
    if device_type != DL_CPU && device_type != DL_CUDA_HOST {
        let kind = if device_type == 2 {
            "CUDA".to_string()
        } else {
            format!("DLPack device type {device_type}")
        };
        return Err(DeviceError::new_err(format!(
            "input `{name}`: a {kind} tensor (device {device_id}); `run` reads host memory: \
             bind device memory with `session.io_binding()` and `run_with_iobinding`, or pass \
             it from host memory (e.g. `tensor.cpu()`)"
        )));
    }
    let capsule = value.call_method0("__dlpack__")?;
    // SAFETY: a `dltensor` capsule holds a `DLManagedTensor`; renaming it takes ownership
    // (DLPack's protocol), after which our `Imported` calls its deleter once.
    let managed = unsafe {
        let m = ffi::PyCapsule_GetPointer(capsule.as_ptr(), CAPSULE.as_ptr());
        if m.is_null() {
            return Err(PyErr::fetch(value.py()));
        }
        if ffi::PyCapsule_SetName(capsule.as_ptr(), USED_CAPSULE.as_ptr()) != 0 {
            return Err(PyErr::fetch(value.py()));
        }
        m as *mut DlManagedTensor
    };
    // SAFETY: the producer's tensor description, valid until the deleter runs.
    let t = unsafe { &(*managed).dl_tensor };
    let consumed = Consumed(managed);
    let dtype = rlx_dtype(t.dtype).ok_or_else(|| {
        invalid(format!(
            "input `{name}`: DLPack dtype (code {}, {} bits, {} lanes) has no RLX counterpart",
            t.dtype.code, t.dtype.bits, t.dtype.lanes
        ))
    })?;
    let ndim =
        usize::try_from(t.ndim).map_err(|_| invalid(format!("input `{name}`: ndim {}", t.ndim)))?;
    // SAFETY: DLPack: `shape` (and `strides` when not null) hold `ndim` values.
    let shape: Vec<usize> = (0..ndim)
        .map(|i| unsafe { *t.shape.add(i) }.max(0) as usize)
        .collect();
    let strides: Option<Vec<i64>> =
        (!t.strides.is_null()).then(|| (0..ndim).map(|i| unsafe { *t.strides.add(i) }).collect());
    let size = dtype.size_bytes().max(1);
    let numel: usize = shape.iter().product();
    let base = if numel == 0 {
        std::ptr::null()
    } else {
        // SAFETY: the data pointer plus the byte offset is the first element.
        unsafe { (t.data as *const u8).add(t.byte_offset as usize) }
    };
    let row_major = rlx_ir::kernel::row_major(&shape);
    let contiguous = match &strides {
        None => true,
        Some(s) => s
            .iter()
            .zip(&shape)
            .zip(&row_major)
            .all(|((&s, &d), &r)| d <= 1 || s as isize == r),
    };
    if contiguous {
        let owner = convert::HostBytes {
            _keep: consumed,
            ptr: base,
            len: numel * size,
        };
        return convert::host_tensor(name, dtype, shape, owner);
    }
    // gather the strided elements into row-major order (one copy)
    let strides = strides.unwrap_or_default();
    let mut out = Vec::with_capacity(numel * size);
    let mut index = vec![0usize; ndim];
    for _ in 0..numel {
        let offset: i64 = index
            .iter()
            .zip(&strides)
            .map(|(&i, &s)| i as i64 * s)
            .sum();
        // SAFETY: the producer's strides address its own elements.
        let element = unsafe {
            std::slice::from_raw_parts(base.offset((offset * size as i64) as isize), size)
        };
        out.extend_from_slice(element);
        for d in (0..ndim).rev() {
            index[d] += 1;
            if index[d] < shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
    drop(consumed);
    let data = TensorData::from_le_bytes(dtype, &out)
        .ok_or_else(|| invalid(format!("input `{name}`: unreadable {dtype} elements")))?;
    Tensor::new(shape, data).map_err(|e| invalid(format!("input `{name}`: {e}")))
}

/// A contiguous DLPack tensor taken over by pointer (no copy): where it is, what it holds,
/// and the consumed capsule that keeps it alive.
pub struct Foreign {
    /// DLPack device type and id
    pub device: (i32, i32),
    /// the first element
    pub ptr: usize,
    /// the element type
    pub dtype: DType,
    /// the dims
    pub shape: Vec<usize>,
    /// calls the producer's deleter when dropped
    pub keep: Consumed,
}

/// The DLPack device of `value`, when it has `__dlpack_device__`.
///
/// # Errors
/// The method fails or returns something else than two ints.
pub fn device_of(value: &Bound<'_, PyAny>) -> PyResult<Option<(i32, i32)>> {
    if !value.hasattr("__dlpack_device__")? {
        return Ok(None);
    }
    Ok(Some(value.call_method0("__dlpack_device__")?.extract()?))
}

/// Takes `value`'s memory over by pointer, for binding (`what` names it in errors). On
/// CUDA, `stream` (the runtime's) is passed to `__dlpack__` so the producer orders its
/// pending work before ours.
///
/// # Errors
/// `InvalidArgument` for a strided tensor or a dtype RLX lacks.
pub fn import_raw(what: &str, value: &Bound<'_, PyAny>, stream: Option<u64>) -> PyResult<Foreign> {
    let capsule = match stream {
        Some(s) => {
            let kwargs = pyo3::types::PyDict::new(value.py());
            kwargs.set_item("stream", s)?;
            value.call_method("__dlpack__", (), Some(&kwargs))?
        }
        None => value.call_method0("__dlpack__")?,
    };
    // SAFETY: as in `import`: renaming the capsule takes ownership of its tensor.
    let managed = unsafe {
        let m = ffi::PyCapsule_GetPointer(capsule.as_ptr(), CAPSULE.as_ptr());
        if m.is_null() {
            return Err(PyErr::fetch(value.py()));
        }
        if ffi::PyCapsule_SetName(capsule.as_ptr(), USED_CAPSULE.as_ptr()) != 0 {
            return Err(PyErr::fetch(value.py()));
        }
        m as *mut DlManagedTensor
    };
    // SAFETY: the producer's tensor description, valid until the deleter runs.
    let t = unsafe { &(*managed).dl_tensor };
    let keep = Consumed(managed);
    let dtype = rlx_dtype(t.dtype).ok_or_else(|| {
        invalid(format!(
            "{what}: DLPack dtype (code {}, {} bits, {} lanes) has no RLX counterpart",
            t.dtype.code, t.dtype.bits, t.dtype.lanes
        ))
    })?;
    let ndim = usize::try_from(t.ndim).map_err(|_| invalid(format!("{what}: ndim {}", t.ndim)))?;
    // SAFETY: DLPack: `shape` (and `strides` when not null) hold `ndim` values.
    let shape: Vec<usize> = (0..ndim)
        .map(|i| unsafe { *t.shape.add(i) }.max(0) as usize)
        .collect();
    if !t.strides.is_null() {
        let row_major = rlx_ir::kernel::row_major(&shape);
        // SAFETY: as above.
        let contiguous = (0..ndim)
            .all(|i| shape[i] <= 1 || unsafe { *t.strides.add(i) } as isize == row_major[i]);
        if !contiguous {
            return Err(invalid(format!(
                "{what}: a strided tensor of shape {shape:?}; bind a contiguous one \
                 (`.contiguous()`)"
            )));
        }
    }
    Ok(Foreign {
        device: (t.device.device_type, t.device.device_id),
        ptr: t.data as usize + t.byte_offset as usize,
        dtype,
        shape,
        keep,
    })
}

/// A run's output: host memory handed to numpy (`numpy()`, `__array__`) or to any DLPack
/// consumer (`__dlpack__`) without a copy.
#[pyclass(frozen, module = "rlx", name = "Tensor")]
pub struct PyTensor {
    tensor: Arc<Tensor>,
}

impl PyTensor {
    /// Wraps a tensor.
    pub fn new(tensor: Tensor) -> PyTensor {
        PyTensor {
            tensor: Arc::new(tensor),
        }
    }
}

#[pymethods]
impl PyTensor {
    /// The dims.
    #[getter]
    fn shape(&self) -> Vec<usize> {
        self.tensor.shape().to_vec()
    }

    /// ONNX Runtime's type name, `tensor(float)`.
    #[getter]
    fn r#type(&self) -> String {
        convert::ort_type(self.tensor.dtype())
    }

    /// The elements as a numpy array (a copy; `numpy.from_dlpack(t)` shares them).
    fn numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        convert::to_numpy(py, (*self.tensor).clone())
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
        // host memory: no stream to synchronise; a legacy (unversioned) capsule, which
        // every consumer accepts
        let _ = (stream, max_version, dl_device, copy);
        export(py, self.tensor.clone())
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        (DL_CPU, 0)
    }

    fn __repr__(&self) -> String {
        format!(
            "rlx.Tensor(shape={:?}, type={})",
            self.tensor.shape(),
            convert::ort_type(self.tensor.dtype())
        )
    }
}
