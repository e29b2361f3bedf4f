//! Host tensors: typed element storage with a static shape. Used for constants, params,
//! run inputs and outputs, and by the validation interpreter.

use crate::buffer::{Buffer, Pod};
use crate::narrow::{F4E2M1, F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, F8E8M0};
use crate::DType;
use half::{bf16, f16};
use std::fmt;
use std::sync::Arc;

/// Typed element storage. One variant per [`DType`]; each holds a [`Buffer`], owned or
/// borrowed from memory someone else owns (a memory-mapped file).
#[derive(Debug, Clone, PartialEq)]
pub enum TensorData {
    /// f32 elements.
    F32(Buffer<f32>),
    /// f16 elements.
    F16(Buffer<f16>),
    /// bf16 elements.
    BF16(Buffer<bf16>),
    /// f64 elements.
    F64(Buffer<f64>),
    /// i8 elements.
    I8(Buffer<i8>),
    /// u8 elements.
    U8(Buffer<u8>),
    /// i32 elements.
    I32(Buffer<i32>),
    /// i64 elements.
    I64(Buffer<i64>),
    /// bool elements.
    Bool(Buffer<bool>),
    /// i16 elements.
    I16(Buffer<i16>),
    /// u16 elements.
    U16(Buffer<u16>),
    /// u32 elements.
    U32(Buffer<u32>),
    /// u64 elements.
    U64(Buffer<u64>),
    /// f8e4m3fn elements.
    F8E4M3FN(Buffer<F8E4M3FN>),
    /// f8e4m3fnuz elements.
    F8E4M3FNUZ(Buffer<F8E4M3FNUZ>),
    /// f8e5m2 elements.
    F8E5M2(Buffer<F8E5M2>),
    /// f8e5m2fnuz elements.
    F8E5M2FNUZ(Buffer<F8E5M2FNUZ>),
    /// f8e8m0 elements.
    F8E8M0(Buffer<F8E8M0>),
    /// f4e2m1 elements, one per byte.
    F4E2M1(Buffer<F4E2M1>),
    /// i4 elements, one per byte (values in -8..=7).
    I4(Buffer<i8>),
    /// u4 elements, one per byte (values in 0..=15).
    U4(Buffer<u8>),
    /// i2 elements, one per byte (values in -2..=1).
    I2(Buffer<i8>),
    /// u2 elements, one per byte (values in 0..=3).
    U2(Buffer<u8>),
}

/// Runs `$body` with `$v` bound to the element [`Buffer`] of any
/// [`TensorData`] variant.
#[macro_export]
macro_rules! each_tensor_data {
    ($e:expr, $v:ident => $body:expr) => {
        match $e {
            $crate::TensorData::F32($v) => $body,
            $crate::TensorData::F16($v) => $body,
            $crate::TensorData::BF16($v) => $body,
            $crate::TensorData::F64($v) => $body,
            $crate::TensorData::I8($v) => $body,
            $crate::TensorData::U8($v) => $body,
            $crate::TensorData::I32($v) => $body,
            $crate::TensorData::I64($v) => $body,
            $crate::TensorData::Bool($v) => $body,
            $crate::TensorData::I16($v) => $body,
            $crate::TensorData::U16($v) => $body,
            $crate::TensorData::U32($v) => $body,
            $crate::TensorData::U64($v) => $body,
            $crate::TensorData::F8E4M3FN($v) => $body,
            $crate::TensorData::F8E4M3FNUZ($v) => $body,
            $crate::TensorData::F8E5M2($v) => $body,
            $crate::TensorData::F8E5M2FNUZ($v) => $body,
            $crate::TensorData::F8E8M0($v) => $body,
            $crate::TensorData::F4E2M1($v) => $body,
            $crate::TensorData::I4($v) => $body,
            $crate::TensorData::U4($v) => $body,
            $crate::TensorData::I2($v) => $body,
            $crate::TensorData::U2($v) => $body,
        }
    };
}

impl TensorData {
    /// The dtype of these elements.
    pub fn dtype(&self) -> DType {
        match self {
            TensorData::F32(_) => DType::F32,
            TensorData::F16(_) => DType::F16,
            TensorData::BF16(_) => DType::BF16,
            TensorData::F64(_) => DType::F64,
            TensorData::I8(_) => DType::I8,
            TensorData::U8(_) => DType::U8,
            TensorData::I32(_) => DType::I32,
            TensorData::I64(_) => DType::I64,
            TensorData::Bool(_) => DType::Bool,
            TensorData::I16(_) => DType::I16,
            TensorData::U16(_) => DType::U16,
            TensorData::U32(_) => DType::U32,
            TensorData::U64(_) => DType::U64,
            TensorData::F8E4M3FN(_) => DType::F8E4M3FN,
            TensorData::F8E4M3FNUZ(_) => DType::F8E4M3FNUZ,
            TensorData::F8E5M2(_) => DType::F8E5M2,
            TensorData::F8E5M2FNUZ(_) => DType::F8E5M2FNUZ,
            TensorData::F8E8M0(_) => DType::F8E8M0,
            TensorData::F4E2M1(_) => DType::F4E2M1,
            TensorData::I4(_) => DType::I4,
            TensorData::U4(_) => DType::U4,
            TensorData::I2(_) => DType::I2,
            TensorData::U2(_) => DType::U2,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        each_tensor_data!(self, v => v.len())
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when the elements borrow memory someone else owns (see [`Buffer::is_shared`]).
    pub fn is_shared(&self) -> bool {
        each_tensor_data!(self, v => v.is_shared())
    }

    /// Storage of `dtype` that reads little-endian `bytes` in place, without a copy, kept
    /// alive by `owner` (see [`Buffer::from_bytes_shared`]). `None` when that is not
    /// possible: a big-endian host, bool or a narrow dtype, `bytes` misaligned for the
    /// element type, a length that is not a multiple, or bytes outside `owner`'s.
    pub fn shared_from_le_bytes<O>(dtype: DType, owner: Arc<O>, bytes: &[u8]) -> Option<TensorData>
    where
        O: AsRef<[u8]> + Send + Sync + 'static,
    {
        fn buf<T: Pod, O: AsRef<[u8]> + Send + Sync + 'static>(
            owner: Arc<O>,
            bytes: &[u8],
        ) -> Option<Buffer<T>> {
            Buffer::from_bytes_shared(owner, bytes)
        }
        if cfg!(target_endian = "big") {
            return None;
        }
        Some(match dtype {
            DType::F32 => TensorData::F32(buf(owner, bytes)?),
            DType::F16 => TensorData::F16(buf(owner, bytes)?),
            DType::BF16 => TensorData::BF16(buf(owner, bytes)?),
            DType::F64 => TensorData::F64(buf(owner, bytes)?),
            DType::I8 => TensorData::I8(buf(owner, bytes)?),
            DType::U8 => TensorData::U8(buf(owner, bytes)?),
            DType::I16 => TensorData::I16(buf(owner, bytes)?),
            DType::U16 => TensorData::U16(buf(owner, bytes)?),
            DType::I32 => TensorData::I32(buf(owner, bytes)?),
            DType::U32 => TensorData::U32(buf(owner, bytes)?),
            DType::I64 => TensorData::I64(buf(owner, bytes)?),
            DType::U64 => TensorData::U64(buf(owner, bytes)?),
            _ => return None,
        })
    }

    /// Element `i` as an exact f64 (i64 beyond 2^53 loses precision).
    pub fn get_f64(&self, i: usize) -> f64 {
        match self {
            TensorData::F32(v) => v[i] as f64,
            TensorData::F16(v) => v[i].to_f64(),
            TensorData::BF16(v) => v[i].to_f64(),
            TensorData::F64(v) => v[i],
            TensorData::I8(v) => v[i] as f64,
            TensorData::U8(v) => v[i] as f64,
            TensorData::I32(v) => v[i] as f64,
            TensorData::I64(v) => v[i] as f64,
            TensorData::Bool(v) => v[i] as u8 as f64,
            TensorData::I16(v) => v[i] as f64,
            TensorData::U16(v) => v[i] as f64,
            TensorData::U32(v) => v[i] as f64,
            TensorData::U64(v) => v[i] as f64,
            TensorData::F8E4M3FN(v) => v[i].to_f64(),
            TensorData::F8E4M3FNUZ(v) => v[i].to_f64(),
            TensorData::F8E5M2(v) => v[i].to_f64(),
            TensorData::F8E5M2FNUZ(v) => v[i].to_f64(),
            TensorData::F8E8M0(v) => v[i].to_f64(),
            TensorData::F4E2M1(v) => v[i].to_f64(),
            TensorData::I4(v) | TensorData::I2(v) => v[i] as f64,
            TensorData::U4(v) | TensorData::U2(v) => v[i] as f64,
        }
    }

    /// Builds storage of `dtype` from values, rounding each with [`DType::round`].
    pub fn from_f64(dtype: DType, values: impl IntoIterator<Item = f64>) -> TensorData {
        let it = values.into_iter().map(|v| dtype.round(v));
        match dtype {
            DType::F32 => TensorData::F32(it.map(|v| v as f32).collect()),
            DType::F16 => TensorData::F16(it.map(f16::from_f64).collect()),
            DType::BF16 => TensorData::BF16(it.map(bf16::from_f64).collect()),
            DType::F64 => TensorData::F64(it.collect()),
            DType::I8 => TensorData::I8(it.map(|v| v as i8).collect()),
            DType::U8 => TensorData::U8(it.map(|v| v as u8).collect()),
            DType::I32 => TensorData::I32(it.map(|v| v as i32).collect()),
            DType::I64 => TensorData::I64(it.map(|v| v as i64).collect()),
            DType::Bool => TensorData::Bool(it.map(|v| v != 0.0).collect()),
            DType::I16 => TensorData::I16(it.map(|v| v as i16).collect()),
            DType::U16 => TensorData::U16(it.map(|v| v as u16).collect()),
            DType::U32 => TensorData::U32(it.map(|v| v as u32).collect()),
            DType::U64 => TensorData::U64(it.map(|v| v as u64).collect()),
            DType::F8E4M3FN => TensorData::F8E4M3FN(it.map(F8E4M3FN::from_f64).collect()),
            DType::F8E4M3FNUZ => TensorData::F8E4M3FNUZ(it.map(F8E4M3FNUZ::from_f64).collect()),
            DType::F8E5M2 => TensorData::F8E5M2(it.map(F8E5M2::from_f64).collect()),
            DType::F8E5M2FNUZ => TensorData::F8E5M2FNUZ(it.map(F8E5M2FNUZ::from_f64).collect()),
            DType::F8E8M0 => TensorData::F8E8M0(it.map(F8E8M0::from_f64).collect()),
            DType::F4E2M1 => TensorData::F4E2M1(it.map(F4E2M1::from_f64).collect()),
            DType::I4 => TensorData::I4(it.map(|v| v as i8).collect()),
            DType::U4 => TensorData::U4(it.map(|v| v as u8).collect()),
            DType::I2 => TensorData::I2(it.map(|v| v as i8).collect()),
            DType::U2 => TensorData::U2(it.map(|v| v as u8).collect()),
        }
    }

    /// The elements' bytes as stored in memory, without a copy (one byte per narrow
    /// element; little-endian on the hosts RLX supports).
    pub fn as_bytes(&self) -> &[u8] {
        fn raw<T>(v: &[T]) -> &[u8] {
            // SAFETY: every element type is plain old data without padding (bool is one
            // byte, the narrow floats are `repr(transparent)` over u8).
            unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
        }
        each_tensor_data!(self, v => raw(v))
    }

    /// Raw little-endian bytes of the elements.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        fn cat<T, const N: usize>(v: &[T], f: impl Fn(&T) -> [u8; N]) -> Vec<u8> {
            v.iter().flat_map(f).collect()
        }
        match self {
            TensorData::F32(v) => cat(v, |x| x.to_le_bytes()),
            TensorData::F16(v) => cat(v, |x| x.to_le_bytes()),
            TensorData::BF16(v) => cat(v, |x| x.to_le_bytes()),
            TensorData::F64(v) => cat(v, |x| x.to_le_bytes()),
            TensorData::I8(v) => cat(v, |x| x.to_le_bytes()),
            TensorData::U8(v) => v.to_vec(),
            TensorData::I32(v) => cat(v, |x| x.to_le_bytes()),
            TensorData::I64(v) => cat(v, |x| x.to_le_bytes()),
            TensorData::Bool(v) => v.iter().map(|&b| b as u8).collect(),
            TensorData::I16(v) => cat(v, |x| x.to_le_bytes()),
            TensorData::U16(v) => cat(v, |x| x.to_le_bytes()),
            TensorData::U32(v) => cat(v, |x| x.to_le_bytes()),
            TensorData::U64(v) => cat(v, |x| x.to_le_bytes()),
            TensorData::F8E4M3FN(v) => v.iter().map(|x| x.0).collect(),
            TensorData::F8E4M3FNUZ(v) => v.iter().map(|x| x.0).collect(),
            TensorData::F8E5M2(v) => v.iter().map(|x| x.0).collect(),
            TensorData::F8E5M2FNUZ(v) => v.iter().map(|x| x.0).collect(),
            TensorData::F8E8M0(v) => v.iter().map(|x| x.0).collect(),
            TensorData::F4E2M1(v) => v.iter().map(|x| x.0).collect(),
            TensorData::I4(v) | TensorData::I2(v) => v.iter().map(|&x| x as u8).collect(),
            TensorData::U4(v) | TensorData::U2(v) => v.to_vec(),
        }
    }

    /// Parses little-endian bytes of `dtype` (one byte per narrow element, the layout
    /// [`TensorData::to_le_bytes`] writes); `None` when the length is not a multiple, or
    /// when a 4- or 2-bit integer byte holds a value out of its range.
    pub fn from_le_bytes(dtype: DType, bytes: &[u8]) -> Option<TensorData> {
        let n = dtype.size_bytes();
        if !bytes.len().is_multiple_of(n) {
            return None;
        }
        fn arr<const N: usize>(c: &[u8]) -> [u8; N] {
            let mut a = [0u8; N];
            a.copy_from_slice(c);
            a
        }
        let ch = bytes.chunks_exact(n);
        Some(match dtype {
            DType::F32 => TensorData::F32(ch.map(|c| f32::from_le_bytes(arr(c))).collect()),
            DType::F16 => TensorData::F16(ch.map(|c| f16::from_le_bytes(arr(c))).collect()),
            DType::BF16 => TensorData::BF16(ch.map(|c| bf16::from_le_bytes(arr(c))).collect()),
            DType::F64 => TensorData::F64(ch.map(|c| f64::from_le_bytes(arr(c))).collect()),
            DType::I8 => TensorData::I8(bytes.iter().map(|&b| b as i8).collect()),
            DType::U8 => TensorData::U8(bytes.to_vec().into()),
            DType::I32 => TensorData::I32(ch.map(|c| i32::from_le_bytes(arr(c))).collect()),
            DType::I64 => TensorData::I64(ch.map(|c| i64::from_le_bytes(arr(c))).collect()),
            DType::Bool => TensorData::Bool(bytes.iter().map(|&b| b != 0).collect()),
            DType::I16 => TensorData::I16(ch.map(|c| i16::from_le_bytes(arr(c))).collect()),
            DType::U16 => TensorData::U16(ch.map(|c| u16::from_le_bytes(arr(c))).collect()),
            DType::U32 => TensorData::U32(ch.map(|c| u32::from_le_bytes(arr(c))).collect()),
            DType::U64 => TensorData::U64(ch.map(|c| u64::from_le_bytes(arr(c))).collect()),
            DType::F8E4M3FN => TensorData::F8E4M3FN(bytes.iter().map(|&b| F8E4M3FN(b)).collect()),
            DType::F8E4M3FNUZ => {
                TensorData::F8E4M3FNUZ(bytes.iter().map(|&b| F8E4M3FNUZ(b)).collect())
            }
            DType::F8E5M2 => TensorData::F8E5M2(bytes.iter().map(|&b| F8E5M2(b)).collect()),
            DType::F8E5M2FNUZ => {
                TensorData::F8E5M2FNUZ(bytes.iter().map(|&b| F8E5M2FNUZ(b)).collect())
            }
            DType::F8E8M0 => TensorData::F8E8M0(bytes.iter().map(|&b| F8E8M0(b)).collect()),
            DType::F4E2M1 => {
                if bytes.iter().any(|&b| b > 15) {
                    return None;
                }
                TensorData::F4E2M1(bytes.iter().map(|&b| F4E2M1(b)).collect())
            }
            DType::I4 | DType::U4 | DType::I2 | DType::U2 => {
                let vals: Vec<f64> = bytes
                    .iter()
                    .map(|&b| {
                        if dtype.is_unsigned() {
                            b as f64
                        } else {
                            b as i8 as f64
                        }
                    })
                    .collect();
                if vals.iter().any(|&v| dtype.round(v) != v) {
                    return None;
                }
                TensorData::from_f64(dtype, vals)
            }
        })
    }
}

/// A host tensor: dtype, static shape and row-major elements.
#[derive(Clone, PartialEq)]
pub struct Tensor {
    shape: Vec<usize>,
    data: TensorData,
}

/// A tensor whose element count does not match its shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tensor data has {len} elements but shape {shape:?} needs {expected}")]
pub struct TensorSizeError {
    /// The shape asked for.
    pub shape: Vec<usize>,
    /// Elements given.
    pub len: usize,
    /// Elements the shape needs.
    pub expected: usize,
}

impl Tensor {
    /// A tensor from storage and shape; fails when the element count differs.
    pub fn new(shape: Vec<usize>, data: TensorData) -> Result<Tensor, TensorSizeError> {
        let expected: usize = shape.iter().product();
        if expected != data.len() {
            return Err(TensorSizeError {
                shape,
                len: data.len(),
                expected,
            });
        }
        Ok(Tensor { shape, data })
    }

    /// An f32 tensor; fails when the element count differs from the shape.
    pub fn from_f32(shape: &[usize], values: Vec<f32>) -> Result<Tensor, TensorSizeError> {
        Tensor::new(shape.to_vec(), TensorData::F32(values.into()))
    }

    /// A tensor of `dtype` from exact values, rounded to the dtype.
    pub fn from_f64(
        dtype: DType,
        shape: &[usize],
        values: &[f64],
    ) -> Result<Tensor, TensorSizeError> {
        Tensor::new(
            shape.to_vec(),
            TensorData::from_f64(dtype, values.iter().copied()),
        )
    }

    /// A rank-0 tensor.
    pub fn scalar(dtype: DType, value: f64) -> Tensor {
        Tensor {
            shape: Vec::new(),
            data: TensorData::from_f64(dtype, [value]),
        }
    }

    /// A tensor filled with one value.
    pub fn full(dtype: DType, shape: &[usize], value: f64) -> Tensor {
        let n = shape.iter().product();
        Tensor {
            shape: shape.to_vec(),
            data: TensorData::from_f64(dtype, std::iter::repeat_n(value, n)),
        }
    }

    /// Deterministic pseudo-random values: floats uniform in [-1, 1) kept away from zero,
    /// integers in [-5, 5] (in [0, 9] for unsigned types), bools alternating at random.
    pub fn random(dtype: DType, shape: &[usize], seed: u64) -> Tensor {
        let n: usize = shape.iter().product();
        let mut rng = SplitMix64(seed ^ 0x9E37_79B9_7F4A_7C15);
        let vals = (0..n).map(|_| {
            let u = rng.next_f64();
            match dtype {
                d if d.is_float() => {
                    let v = u * 2.0 - 1.0;
                    if v.abs() < 0.05 {
                        v.signum() * 0.05 + v
                    } else {
                        v
                    }
                }
                d if d.is_unsigned() => (u * 10.0).floor(),
                DType::Bool => (u < 0.5) as u8 as f64,
                _ => (u * 11.0).floor() - 5.0,
            }
        });
        Tensor {
            shape: shape.to_vec(),
            data: TensorData::from_f64(dtype, vals),
        }
    }

    /// The dtype.
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    /// The static shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.data.len()
    }

    /// The typed storage.
    pub fn data(&self) -> &TensorData {
        &self.data
    }

    /// The typed storage, mutably.
    pub fn data_mut(&mut self) -> &mut TensorData {
        &mut self.data
    }

    /// True when the elements borrow memory someone else owns (no copy was made).
    pub fn is_shared(&self) -> bool {
        self.data.is_shared()
    }

    /// Consumes the tensor into its storage.
    pub fn into_data(self) -> TensorData {
        self.data
    }

    /// The f32 elements, when the dtype is f32.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            TensorData::F32(v) => Some(v.as_slice()),
            _ => None,
        }
    }

    /// All elements as f64.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        (0..self.numel()).map(|i| self.data.get_f64(i)).collect()
    }

    /// Element `i` (row-major) as f64.
    pub fn get_f64(&self, i: usize) -> f64 {
        self.data.get_f64(i)
    }

    /// Same elements, new shape with the same element count.
    pub fn reshaped(self, shape: &[usize]) -> Result<Tensor, TensorSizeError> {
        Tensor::new(shape.to_vec(), self.data)
    }

    /// Converts to another dtype with [`DType::round`].
    pub fn cast(&self, dtype: DType) -> Tensor {
        Tensor {
            shape: self.shape.clone(),
            data: TensorData::from_f64(dtype, self.to_f64_vec()),
        }
    }

    /// Bytes of element storage.
    pub fn size_bytes(&self) -> usize {
        self.numel() * self.dtype().size_bytes()
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.numel().min(8);
        let head: Vec<String> = (0..n).map(|i| format!("{}", self.get_f64(i))).collect();
        write!(
            f,
            "Tensor({}{:?} [{}{}])",
            self.dtype(),
            self.shape,
            head.join(", "),
            if self.numel() > n { ", ..." } else { "" }
        )
    }
}

/// A tiny deterministic generator so tests and demos need no extra crate.
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform integer in [0, n).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip_every_dtype() {
        for d in DType::ALL {
            let t = Tensor::random(d, &[3, 5], 7);
            let bytes = t.data().to_le_bytes();
            assert_eq!(bytes.len(), t.size_bytes());
            let back = TensorData::from_le_bytes(d, &bytes).unwrap();
            assert_eq!(&back, t.data());
            assert_eq!(t.data().as_bytes(), &bytes[..]);
        }
        assert_eq!(TensorData::from_le_bytes(DType::I4, &[8]), None);
        assert_eq!(
            TensorData::from_le_bytes(DType::I4, &[0xf8]),
            Some(TensorData::I4(vec![-8].into()))
        );
    }

    #[test]
    fn shared_storage_reads_bytes_in_place() {
        let t = Tensor::random(DType::F32, &[4], 3);
        let owner = Arc::new(t.data().to_le_bytes());
        let Some(d) = TensorData::shared_from_le_bytes(DType::F32, owner.clone(), &owner[..])
        else {
            // a Vec<u8> is not guaranteed 4-byte aligned; the system allocator is
            assert!(!(owner.as_ptr() as usize).is_multiple_of(4));
            return;
        };
        assert!(d.is_shared());
        assert_eq!(&d, t.data());
        assert_eq!(d.as_bytes().as_ptr(), owner.as_ptr());
        let shared = Tensor::new(vec![4], d).unwrap();
        assert!(shared.clone().is_shared() && !t.is_shared());
        assert_eq!(
            TensorData::shared_from_le_bytes(DType::Bool, owner.clone(), &owner[..1]),
            None
        );
    }

    #[test]
    fn size_mismatch_is_an_error() {
        let e = Tensor::from_f32(&[2, 2], vec![1.0; 3]).unwrap_err();
        assert!(e.to_string().contains("needs 4"));
    }

    #[test]
    fn random_floats_are_nonzero() {
        let t = Tensor::random(DType::F32, &[1000], 1);
        assert!(t
            .to_f64_vec()
            .iter()
            .all(|v| v.abs() >= 0.05 && v.abs() <= 1.05));
    }
}
