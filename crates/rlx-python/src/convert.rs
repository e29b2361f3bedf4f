//! numpy arrays to host tensors and back. A C-contiguous, aligned array in native byte
//! order is read in place: the tensor borrows its memory and keeps the array alive, so a
//! run reads the caller's buffer without a copy. Outputs move their `Vec` into numpy.

use crate::dlpack;
use crate::error::invalid;
use half::f16;
use numpy::ndarray::{ArrayD, IxDyn};
use numpy::{
    Element, PyArray, PyArrayDescrMethods, PyArrayDyn, PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::types::PyAny;
use rlx_ir::{DType, Tensor, TensorData};
use std::sync::Arc;

/// Host memory someone else owns, read in place by a tensor: `keep` (a numpy array, a
/// consumed DLPack capsule) keeps the `len` bytes at `ptr` alive until it is dropped.
pub struct HostBytes<K> {
    /// what keeps the memory alive
    pub _keep: K,
    /// the first byte
    pub ptr: *const u8,
    /// how many bytes
    pub len: usize,
}

// SAFETY: the bytes are only read while `keep` (Send + Sync) keeps them alive.
unsafe impl<K: Send + Sync> Send for HostBytes<K> {}
// SAFETY: as above.
unsafe impl<K: Send + Sync> Sync for HostBytes<K> {}

impl<K> AsRef<[u8]> for HostBytes<K> {
    fn as_ref(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `ptr` points at `len` bytes, alive while `keep` is.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// Tensor storage of `dtype` reading `owner`'s bytes in place, or a copy where RLX's layout
/// differs (bool) or the bytes are misaligned.
pub fn host_tensor<K: Send + Sync + 'static>(
    name: &str,
    dtype: DType,
    shape: Vec<usize>,
    owner: HostBytes<K>,
) -> PyResult<Tensor> {
    let owner = Arc::new(owner);
    let bytes = (*owner).as_ref();
    let data = match TensorData::shared_from_le_bytes(dtype, owner.clone(), bytes) {
        Some(d) => d,
        None => TensorData::from_le_bytes(dtype, bytes)
            .ok_or_else(|| invalid(format!("input `{name}`: unreadable {dtype} elements")))?,
    };
    Tensor::new(shape, data).map_err(|e| invalid(format!("input `{name}`: {e}")))
}

/// The RLX dtype of a numpy dtype (kind letter and item size).
pub fn numpy_dtype(kind: u8, size: usize) -> Option<DType> {
    Some(match (kind, size) {
        (b'f', 4) => DType::F32,
        (b'f', 8) => DType::F64,
        (b'f', 2) => DType::F16,
        (b'i', 1) => DType::I8,
        (b'i', 2) => DType::I16,
        (b'i', 4) => DType::I32,
        (b'i', 8) => DType::I64,
        (b'u', 1) => DType::U8,
        (b'u', 2) => DType::U16,
        (b'u', 4) => DType::U32,
        (b'u', 8) => DType::U64,
        (b'b', 1) => DType::Bool,
        _ => return None,
    })
}

/// A feed value as a tensor: a numpy array (read in place where its layout allows), an
/// object with `__dlpack__`, or anything `numpy.asarray` takes.
///
/// # Errors
/// `InvalidArgument` for a dtype RLX has no counterpart of; `DeviceError` for a DLPack
/// tensor in device memory.
pub fn to_tensor(name: &str, value: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    if let Ok(array) = value.cast::<PyUntypedArray>() {
        return from_numpy(name, array);
    }
    if value.hasattr("__dlpack__")? {
        return dlpack::import(name, value);
    }
    let numpy = value.py().import("numpy")?;
    let array = numpy.call_method1("asarray", (value,))?;
    from_numpy(name, array.cast::<PyUntypedArray>()?)
}

fn from_numpy(name: &str, array: &Bound<'_, PyUntypedArray>) -> PyResult<Tensor> {
    let descr = array.dtype();
    let Some(dtype) = numpy_dtype(descr.kind(), descr.itemsize()) else {
        return Err(invalid(format!(
            "input `{name}`: numpy dtype {} has no RLX counterpart (float16/32/64, int8-64, \
             uint8-64 and bool are supported)",
            descr.str()?
        )));
    };
    let native = descr.is_native_byteorder() != Some(false);
    if !(array.is_c_contiguous() && array.is_aligned() && native) {
        // one copy into a fresh C-ordered native array, then read that in place
        let numpy = array.py().import("numpy")?;
        let fixed = numpy.call_method1(
            "ascontiguousarray",
            (array, descr.call_method1("newbyteorder", ("=",))?),
        )?;
        return from_numpy(name, fixed.cast::<PyUntypedArray>()?);
    }
    let shape = array.shape().to_vec();
    let len = array.len() * descr.itemsize();
    // SAFETY: a numpy array object's `data` points at its elements.
    let ptr = unsafe { (*array.as_array_ptr()).fields.data } as *const u8;
    let owner = HostBytes {
        _keep: array.clone().into_any().unbind(),
        ptr,
        len,
    };
    host_tensor(name, dtype, shape, owner)
}

fn array<'py, T: Element>(
    py: Python<'py>,
    shape: &[usize],
    v: Vec<T>,
) -> PyResult<Bound<'py, PyAny>> {
    let a = ArrayD::from_shape_vec(IxDyn(shape), v)
        .map_err(|e| invalid(format!("output of shape {shape:?}: {e}")))?;
    Ok(PyArray::from_owned_array(py, a).into_any())
}

/// A tensor as a numpy array; an owned buffer moves into numpy without a copy. bf16 and the
/// narrow float formats (no numpy dtype) come back as float32.
pub fn to_numpy(py: Python<'_>, t: Tensor) -> PyResult<Bound<'_, PyAny>> {
    let shape = t.shape().to_vec();
    match t.into_data() {
        TensorData::F32(b) => array::<f32>(py, &shape, b.into_vec()),
        TensorData::F64(b) => array::<f64>(py, &shape, b.into_vec()),
        TensorData::F16(b) => array::<f16>(py, &shape, b.into_vec()),
        TensorData::I8(b) => array::<i8>(py, &shape, b.into_vec()),
        TensorData::I16(b) => array::<i16>(py, &shape, b.into_vec()),
        TensorData::I32(b) => array::<i32>(py, &shape, b.into_vec()),
        TensorData::I64(b) => array::<i64>(py, &shape, b.into_vec()),
        TensorData::U8(b) => array::<u8>(py, &shape, b.into_vec()),
        TensorData::U16(b) => array::<u16>(py, &shape, b.into_vec()),
        TensorData::U32(b) => array::<u32>(py, &shape, b.into_vec()),
        TensorData::U64(b) => array::<u64>(py, &shape, b.into_vec()),
        TensorData::Bool(b) => array::<bool>(py, &shape, b.into_vec()),
        other => {
            let t = Tensor::new(shape.clone(), other)
                .map_err(|e| invalid(format!("output: {e}")))?
                .cast(DType::F32);
            to_numpy(py, t)
        }
    }
}

/// A numpy array of f32 rows, moved in without a copy.
pub fn f32_matrix(
    py: Python<'_>,
    rows: usize,
    cols: usize,
    v: Vec<f32>,
) -> PyResult<Bound<'_, PyArrayDyn<f32>>> {
    let a = ArrayD::from_shape_vec(IxDyn(&[rows, cols]), v)
        .map_err(|e| invalid(format!("embeddings of {rows}x{cols}: {e}")))?;
    Ok(PyArray::from_owned_array(py, a))
}

/// ONNX Runtime's name for a tensor type: `tensor(float)`, `tensor(int64)`, ...
pub fn ort_type(dtype: DType) -> String {
    let name = match dtype {
        DType::F32 => "float",
        DType::F64 => "double",
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        DType::I8 => "int8",
        DType::I16 => "int16",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::U8 => "uint8",
        DType::U16 => "uint16",
        DType::U32 => "uint32",
        DType::U64 => "uint64",
        DType::Bool => "bool",
        other => other.name(),
    };
    format!("tensor({name})")
}
