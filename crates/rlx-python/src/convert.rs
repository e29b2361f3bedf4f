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
use rlx_ir::{Buffer, DType, Tensor, TensorData};
use std::sync::Arc;

/// Keeps a numpy array alive while a tensor reads its memory.
struct ArrayOwner {
    _array: Py<PyAny>,
    ptr: *const u8,
    len: usize,
}

// SAFETY: the pointer is only read, as a byte slice, while `_array` (a reference that keeps
// the memory alive; `Py` is Send + Sync) lives.
unsafe impl Send for ArrayOwner {}
// SAFETY: as above.
unsafe impl Sync for ArrayOwner {}

impl AsRef<[u8]> for ArrayOwner {
    fn as_ref(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `ptr` points at the array's `len` bytes, alive while `_array` is.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// The RLX dtype of a numpy dtype (kind letter and item size).
fn numpy_dtype(kind: u8, size: usize) -> Option<DType> {
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
    let ptr = unsafe { (*array.as_array_ptr()).data } as *const u8;
    let owner = Arc::new(ArrayOwner {
        _array: array.clone().into_any().unbind(),
        ptr,
        len,
    });
    let bytes = (*owner).as_ref();
    // bool (and an empty array) is copied: RLX's bool storage is not numpy's byte layout
    let data = match TensorData::shared_from_le_bytes(dtype, owner.clone(), bytes) {
        Some(d) => d,
        None => TensorData::from_le_bytes(dtype, bytes)
            .ok_or_else(|| invalid(format!("input `{name}`: unreadable {dtype} elements")))?,
    };
    Tensor::new(shape, data).map_err(|e| invalid(format!("input `{name}`: {e}")))
}

fn array<T: Element>(py: Python<'_>, shape: &[usize], v: Vec<T>) -> PyResult<Bound<'_, PyAny>> {
    let a = ArrayD::from_shape_vec(IxDyn(shape), v)
        .map_err(|e| invalid(format!("output of shape {shape:?}: {e}")))?;
    Ok(PyArray::from_owned_array(py, a).into_any())
}

/// A tensor as a numpy array; an owned buffer moves into numpy without a copy. bf16 and the
/// narrow float formats (no numpy dtype) come back as float32.
pub fn to_numpy(py: Python<'_>, t: Tensor) -> PyResult<Bound<'_, PyAny>> {
    let shape = t.shape().to_vec();
    let v = |b: Buffer<_>| b.into_vec();
    match t.into_data() {
        TensorData::F32(b) => array::<f32>(py, &shape, v(b)),
        TensorData::F64(b) => array::<f64>(py, &shape, v(b)),
        TensorData::F16(b) => array::<f16>(py, &shape, v(b)),
        TensorData::I8(b) => array::<i8>(py, &shape, v(b)),
        TensorData::I16(b) => array::<i16>(py, &shape, v(b)),
        TensorData::I32(b) => array::<i32>(py, &shape, v(b)),
        TensorData::I64(b) => array::<i64>(py, &shape, v(b)),
        TensorData::U8(b) => array::<u8>(py, &shape, v(b)),
        TensorData::U16(b) => array::<u16>(py, &shape, v(b)),
        TensorData::U32(b) => array::<u32>(py, &shape, v(b)),
        TensorData::U64(b) => array::<u64>(py, &shape, v(b)),
        TensorData::Bool(b) => array::<bool>(py, &shape, v(b)),
        other => {
            let t = Tensor::new(shape.clone(), other)
                .map_err(|e| invalid(format!("output: {e}")))?
                .cast(DType::F32);
            to_numpy(py, t)
        }
    }
}

/// A numpy array of f32 rows, moved in without a copy.
pub fn f32_matrix(py: Python<'_>, rows: usize, cols: usize, v: Vec<f32>) -> PyResult<Bound<'_, PyArrayDyn<f32>>> {
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
