//! `TensorProto` to [`Tensor`]: typed fields, raw data, and external data files (memory
//! mapped, so a weight is copied once, straight from the page cache into its typed storage).

use crate::dtype::to_dtype;
use crate::proto::{tensor_proto::DataLocation, TensorProto};
use memmap2::Mmap;
use rlx_ir::{DType, Tensor, TensorData};
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// Where external data files are looked up, and the files mapped so far.
#[derive(Default)]
pub struct ExternalData {
    /// directory of the model file; `None` when loading from bytes (external data refused)
    pub base_dir: Option<PathBuf>,
    maps: HashMap<PathBuf, Arc<Mmap>>,
}

impl ExternalData {
    /// External data resolved relative to `base_dir`.
    pub fn new(base_dir: Option<PathBuf>) -> ExternalData {
        ExternalData {
            base_dir,
            maps: HashMap::new(),
        }
    }

    fn bytes(&mut self, t: &TensorProto) -> Result<(Arc<Mmap>, usize, usize), String> {
        let mut location = None;
        let mut offset = 0usize;
        let mut length = None;
        for e in &t.external_data {
            let v = e.value();
            let num = || {
                v.parse::<usize>()
                    .map_err(|_| format!("external data `{}` is not a number: `{v}`", e.key()))
            };
            match e.key() {
                "location" => location = Some(v.to_string()),
                "offset" => offset = num()?,
                "length" => length = Some(num()?),
                _ => {}
            }
        }
        let location = location.ok_or("external data without a `location`")?;
        let rel = Path::new(&location);
        if rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(format!(
                "external data location `{location}` must be a relative path inside the model's directory"
            ));
        }
        let base = self
            .base_dir
            .as_ref()
            .ok_or("external data needs the model's directory (load the model from a file)")?;
        let path = base.join(rel);
        let map = match self.maps.get(&path) {
            Some(m) => m.clone(),
            None => {
                let file = std::fs::File::open(&path)
                    .map_err(|e| format!("external data file `{}`: {e}", path.display()))?;
                // SAFETY: the map is read-only; a file changed underneath would change weight
                // values, never memory safety of this process beyond what reading gives.
                let map = unsafe { Mmap::map(&file) }
                    .map_err(|e| format!("cannot map `{}`: {e}", path.display()))?;
                let map = Arc::new(map);
                self.maps.insert(path.clone(), map.clone());
                map
            }
        };
        let len = length.unwrap_or(map.len().saturating_sub(offset));
        if offset.checked_add(len).is_none_or(|end| end > map.len()) {
            return Err(format!(
                "external data `{location}`: offset {offset} + length {len} past the end of the file ({} bytes)",
                map.len()
            ));
        }
        Ok((map, offset, len))
    }
}

/// The static shape of a tensor proto.
///
/// # Errors
/// Negative dims or an element count that overflows.
pub fn proto_shape(t: &TensorProto) -> Result<Vec<usize>, String> {
    let mut numel = 1usize;
    let mut shape = Vec::with_capacity(t.dims.len());
    for &d in &t.dims {
        let d = usize::try_from(d).map_err(|_| format!("negative dim {d} in {:?}", t.dims))?;
        numel = numel
            .checked_mul(d)
            .ok_or_else(|| format!("dims {:?} overflow", t.dims))?;
        shape.push(d);
    }
    Ok(shape)
}

/// Converts a tensor proto to a host tensor. 4-bit elements come packed two to a byte and
/// 2-bit ones four to a byte (low bits first); they are unpacked to one per byte.
///
/// # Errors
/// Unsupported element types (strings, complex), data that does not match the dims, or
/// unreadable external data; the message names what is wrong.
pub fn to_tensor(t: &TensorProto, ext: &mut ExternalData) -> Result<Tensor, String> {
    let dtype = to_dtype(t.data_type())?;
    let shape = proto_shape(t)?;
    let numel: usize = shape.iter().product();
    let data = if t.data_location() == DataLocation::External {
        let (map, off, len) = ext.bytes(t)?;
        from_raw(dtype, &map[off..off + len], numel)?
    } else if let Some(raw) = t.raw_data.as_ref().filter(|r| !r.is_empty() || numel == 0) {
        from_raw(dtype, raw, numel)?
    } else if numel == 0 {
        from_raw(dtype, &[], 0)?
    } else {
        from_fields(t, dtype, numel)?
    };
    Tensor::new(shape, data).map_err(|e| e.to_string())
}

fn from_raw(dtype: DType, bytes: &[u8], numel: usize) -> Result<TensorData, String> {
    let want = numel
        .checked_mul(dtype.bits())
        .ok_or("byte size overflows")?
        .div_ceil(8);
    if bytes.len() != want {
        return Err(format!(
            "raw data has {} bytes, but {numel} {dtype} elements need {want}",
            bytes.len()
        ));
    }
    if dtype.bits() < 8 {
        return Ok(unpack(dtype, bytes, numel));
    }
    TensorData::from_le_bytes(dtype, bytes).ok_or_else(|| "raw data length mismatch".into())
}

/// Unpacks `numel` elements of a 4- or 2-bit dtype, low bits first, to one per byte.
fn unpack(dtype: DType, bytes: &[u8], numel: usize) -> TensorData {
    let bits = dtype.bits();
    let per_byte = 8 / bits;
    let mask = (1u8 << bits) - 1;
    let codes = (0..numel).map(|i| (bytes[i / per_byte] >> ((i % per_byte) * bits)) & mask);
    if dtype.is_float() {
        let raw: Vec<u8> = codes.collect();
        TensorData::from_le_bytes(dtype, &raw).expect("codes are within the element width")
    } else {
        let signed = !dtype.is_unsigned();
        TensorData::from_f64(
            dtype,
            codes.map(|c| {
                let v = c as i64;
                if signed && v >= 1 << (bits - 1) {
                    (v - (1 << bits)) as f64
                } else {
                    v as f64
                }
            }),
        )
    }
}

fn from_fields(t: &TensorProto, dtype: DType, numel: usize) -> Result<TensorData, String> {
    let check = |n: usize, field: &str| {
        if n == numel {
            Ok(())
        } else {
            Err(format!(
                "{field} has {n} values, but the dims {:?} need {numel}",
                t.dims
            ))
        }
    };
    Ok(match dtype {
        DType::F32 => {
            check(t.float_data.len(), "float_data")?;
            TensorData::F32(t.float_data.clone().into())
        }
        DType::F64 => {
            check(t.double_data.len(), "double_data")?;
            TensorData::F64(t.double_data.clone().into())
        }
        DType::I64 => {
            check(t.int64_data.len(), "int64_data")?;
            TensorData::I64(t.int64_data.clone().into())
        }
        DType::F16 | DType::BF16 => {
            check(t.int32_data.len(), "int32_data")?;
            let bits = t.int32_data.iter().map(|&b| b as u16);
            if dtype == DType::F16 {
                TensorData::F16(bits.map(half::f16::from_bits).collect())
            } else {
                TensorData::BF16(bits.map(half::bf16::from_bits).collect())
            }
        }
        DType::I32 | DType::I8 | DType::U8 | DType::Bool | DType::I16 | DType::U16 => {
            check(t.int32_data.len(), "int32_data")?;
            TensorData::from_f64(dtype, t.int32_data.iter().map(|&v| v as f64))
        }
        DType::U32 | DType::U64 => {
            check(t.uint64_data.len(), "uint64_data")?;
            TensorData::from_f64(dtype, t.uint64_data.iter().map(|&v| v as f64))
        }
        DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ | DType::F8E8M0 => {
            check(t.int32_data.len(), "int32_data")?;
            let bits: Vec<u8> = t.int32_data.iter().map(|&b| b as u8).collect();
            TensorData::from_le_bytes(dtype, &bits).ok_or("int32_data length mismatch")?
        }
        DType::F4E2M1 | DType::I4 | DType::U4 | DType::I2 | DType::U2 => {
            // Packed like raw data, one byte of codes per int32.
            let want = numel.div_ceil(8 / dtype.bits());
            if t.int32_data.len() != want {
                return Err(format!(
                    "int32_data has {} packed bytes, but {numel} {dtype} elements need {want}",
                    t.int32_data.len()
                ));
            }
            let bytes: Vec<u8> = t.int32_data.iter().map(|&b| b as u8).collect();
            unpack(dtype, &bytes, numel)
        }
    })
}
