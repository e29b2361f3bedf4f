//! Parsing the GGUF container: header, metadata, tensor infos, aligned tensor data.
//!
//! Layout (little-endian): magic `GGUF`, version u32, tensor count u64, metadata count u64;
//! metadata entries (key string, value type u32, value); tensor infos (name, rank u32, dims
//! u64 each, innermost first, type u32, offset u64 relative to the data section); padding
//! to `general.alignment` (default 32); the data section.

use crate::GgufError;
use memmap2::Mmap;
use rlx_ir::Buffer;
use rlx_ir::QuantFormat;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The most nested arrays the reader follows.
const MAX_DEPTH: usize = 4;

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    /// u8
    U8(u8),
    /// i8
    I8(i8),
    /// u16
    U16(u16),
    /// i16
    I16(i16),
    /// u32
    U32(u32),
    /// i32
    I32(i32),
    /// f32
    F32(f32),
    /// bool
    Bool(bool),
    /// UTF-8 string (invalid sequences replaced)
    String(String),
    /// array of values of one type
    Array(Vec<MetaValue>),
    /// u64
    U64(u64),
    /// i64
    I64(i64),
    /// f64
    F64(f64),
}

impl MetaValue {
    /// The value as an unsigned integer, when it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            MetaValue::U8(v) => Some(v as u64),
            MetaValue::U16(v) => Some(v as u64),
            MetaValue::U32(v) => Some(v as u64),
            MetaValue::U64(v) => Some(v),
            MetaValue::I8(v) => u64::try_from(v).ok(),
            MetaValue::I16(v) => u64::try_from(v).ok(),
            MetaValue::I32(v) => u64::try_from(v).ok(),
            MetaValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a signed integer, when it is an integer that fits.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            MetaValue::I8(v) => Some(v as i64),
            MetaValue::I16(v) => Some(v as i64),
            MetaValue::I32(v) => Some(v as i64),
            MetaValue::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }

    /// The value as a float, when it is any number.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetaValue::F32(v) => Some(v as f64),
            MetaValue::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    /// The string, when it is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// The elements, when it is an array.
    pub fn as_array(&self) -> Option<&[MetaValue]> {
        match self {
            MetaValue::Array(v) => Some(v),
            _ => None,
        }
    }

    /// The bool, when it is one.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            MetaValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    fn type_name(&self) -> &'static str {
        match self {
            MetaValue::U8(_) => "u8",
            MetaValue::I8(_) => "i8",
            MetaValue::U16(_) => "u16",
            MetaValue::I16(_) => "i16",
            MetaValue::U32(_) => "u32",
            MetaValue::I32(_) => "i32",
            MetaValue::F32(_) => "f32",
            MetaValue::Bool(_) => "bool",
            MetaValue::String(_) => "string",
            MetaValue::Array(_) => "array",
            MetaValue::U64(_) => "u64",
            MetaValue::I64(_) => "i64",
            MetaValue::F64(_) => "f64",
        }
    }
}

impl fmt::Display for MetaValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetaValue::String(s) => write!(f, "{s:?}"),
            MetaValue::Array(v) => write!(f, "[{} items]", v.len()),
            MetaValue::U8(v) => write!(f, "{v}"),
            MetaValue::I8(v) => write!(f, "{v}"),
            MetaValue::U16(v) => write!(f, "{v}"),
            MetaValue::I16(v) => write!(f, "{v}"),
            MetaValue::U32(v) => write!(f, "{v}"),
            MetaValue::I32(v) => write!(f, "{v}"),
            MetaValue::F32(v) => write!(f, "{v}"),
            MetaValue::Bool(v) => write!(f, "{v}"),
            MetaValue::U64(v) => write!(f, "{v}"),
            MetaValue::I64(v) => write!(f, "{v}"),
            MetaValue::F64(v) => write!(f, "{v}"),
        }
    }
}

/// A GGML tensor type as stored in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GgmlType(pub u32);

impl GgmlType {
    /// The IR format for this type, when RLX reads it.
    pub fn format(self) -> Option<QuantFormat> {
        Some(match self.0 {
            0 => QuantFormat::F32,
            1 => QuantFormat::F16,
            2 => QuantFormat::Q4_0,
            3 => QuantFormat::Q4_1,
            6 => QuantFormat::Q5_0,
            7 => QuantFormat::Q5_1,
            8 => QuantFormat::Q8_0,
            10 => QuantFormat::Q2K,
            11 => QuantFormat::Q3K,
            12 => QuantFormat::Q4K,
            13 => QuantFormat::Q5K,
            14 => QuantFormat::Q6K,
            30 => QuantFormat::BF16,
            _ => return None,
        })
    }

    /// The GGML name of the type (`q4_1`, ...), or `type N` for unknown ones.
    pub fn name(self) -> String {
        const NAMES: [&str; 31] = [
            "f32", "f16", "q4_0", "q4_1", "q4_2", "q4_3", "q5_0", "q5_1", "q8_0", "q8_1", "q2_k",
            "q3_k", "q4_k", "q5_k", "q6_k", "q8_k", "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s",
            "iq4_nl", "iq3_s", "iq2_s", "iq4_xs", "i8", "i16", "i32", "i64", "f64", "iq1_m",
            "bf16",
        ];
        NAMES
            .get(self.0 as usize)
            .map(|s| s.to_string())
            .unwrap_or_else(|| format!("type {}", self.0))
    }
}

/// One tensor's description.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// the name (`blk.0.attn_q.weight`)
    pub name: String,
    /// dims, innermost first (GGML order: `[k, n]` for a weight of n rows of k values)
    pub dims: Vec<u64>,
    /// the stored type
    pub ggml_type: GgmlType,
    /// byte offset within the data section
    pub offset: u64,
    /// bytes of data (known for supported types)
    pub size: usize,
}

impl TensorInfo {
    /// Number of values.
    pub fn numel(&self) -> usize {
        self.dims.iter().product::<u64>() as usize
    }

    /// Dims outermost first (numpy order): `[n, k]` for a weight of n rows of k values.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }
}

enum Storage {
    /// shared with the tensors borrowed from it ([`GgufFile::tensor_buffer`])
    Mmap(Arc<Mmap>),
    Owned(Vec<u8>),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mmap(m) => m,
            Storage::Owned(v) => v,
        }
    }
}

/// A parsed GGUF file; tensor bytes stay in the mapping until asked for.
pub struct GgufFile {
    path: Option<PathBuf>,
    storage: Storage,
    /// format version (2 or 3)
    pub version: u32,
    /// metadata by key
    pub metadata: BTreeMap<String, MetaValue>,
    /// tensor infos in file order
    pub tensors: Vec<TensorInfo>,
    /// alignment of the data section and of every tensor
    pub alignment: usize,
    /// byte offset of the data section
    pub data_offset: usize,
}

impl fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
    path: Option<&'a Path>,
}

impl<'a> Cursor<'a> {
    fn err(&self, message: impl Into<String>) -> GgufError {
        GgufError::Malformed {
            path: self.path.map(Path::to_path_buf),
            message: message.into(),
            offset: self.pos,
        }
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], GgufError> {
        if self.b.len() - self.pos < n {
            return Err(self.err(format!(
                "truncated: {what} needs {n} bytes, {} left",
                self.b.len() - self.pos
            )));
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn arr<const N: usize>(&mut self, what: &str) -> Result<[u8; N], GgufError> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.arr(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.arr(what)?))
    }

    /// A count that must fit in what is left, given at least `min_size` bytes per item.
    fn count(&mut self, what: &str, min_size: usize) -> Result<usize, GgufError> {
        let n = self.u64(what)?;
        let left = (self.b.len() - self.pos) as u64;
        if n.saturating_mul(min_size as u64) > left {
            return Err(self.err(format!(
                "{what} is {n}, more than the {left} bytes left can hold"
            )));
        }
        Ok(n as usize)
    }

    fn string(&mut self, what: &str) -> Result<String, GgufError> {
        let n = self.count(what, 1)?;
        let s = self.take(n, what)?;
        Ok(String::from_utf8_lossy(s).into_owned())
    }

    fn value(&mut self, ty: u32, depth: usize) -> Result<MetaValue, GgufError> {
        Ok(match ty {
            0 => MetaValue::U8(self.arr::<1>("u8")?[0]),
            1 => MetaValue::I8(self.arr::<1>("i8")?[0] as i8),
            2 => MetaValue::U16(u16::from_le_bytes(self.arr("u16")?)),
            3 => MetaValue::I16(i16::from_le_bytes(self.arr("i16")?)),
            4 => MetaValue::U32(self.u32("u32")?),
            5 => MetaValue::I32(i32::from_le_bytes(self.arr("i32")?)),
            6 => MetaValue::F32(f32::from_le_bytes(self.arr("f32")?)),
            7 => match self.arr::<1>("bool")?[0] {
                0 => MetaValue::Bool(false),
                1 => MetaValue::Bool(true),
                b => return Err(self.err(format!("bool value {b} is neither 0 nor 1"))),
            },
            8 => MetaValue::String(self.string("string length")?),
            9 => {
                if depth >= MAX_DEPTH {
                    return Err(self.err(format!("arrays nested deeper than {MAX_DEPTH}")));
                }
                let ety = self.u32("array element type")?;
                let min = match ety {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    8..=12 => 8,
                    t => return Err(self.err(format!("unknown array element type {t}"))),
                };
                let n = self.count("array length", min)?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.value(ety, depth + 1)?);
                }
                MetaValue::Array(v)
            }
            10 => MetaValue::U64(self.u64("u64")?),
            11 => MetaValue::I64(i64::from_le_bytes(self.arr("i64")?)),
            12 => MetaValue::F64(f64::from_le_bytes(self.arr("f64")?)),
            t => return Err(self.err(format!("unknown metadata value type {t}"))),
        })
    }
}

impl GgufFile {
    /// Maps and parses a file.
    ///
    /// # Errors
    /// The file cannot be read, or is not a valid GGUF v2/v3 file (named, with the offset).
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        let path = path.as_ref();
        let io = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the mapping is read-only; the file is not expected to change while open
        // (as for every memory-mapped model loader).
        let mmap = unsafe { Mmap::map(&file) }.map_err(io)?;
        Self::parse(Storage::Mmap(Arc::new(mmap)), Some(path.to_path_buf()))
    }

    /// Parses a file already in memory.
    ///
    /// # Errors
    /// As [`GgufFile::open`].
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        Self::parse(Storage::Owned(bytes), None)
    }

    fn parse(storage: Storage, path: Option<PathBuf>) -> Result<GgufFile, GgufError> {
        let b = storage.bytes();
        let mut c = Cursor {
            b,
            pos: 0,
            path: path.as_deref(),
        };
        let magic = c.arr::<4>("magic")?;
        if &magic != b"GGUF" {
            c.pos = 0;
            return Err(c.err(format!("bad magic {magic:?}, expected \"GGUF\"")));
        }
        let version = c.u32("version")?;
        if !(2..=3).contains(&version) {
            return Err(c.err(format!("version {version} (RLX reads 2 and 3)")));
        }
        let n_tensors = c.count("tensor count", 24)?;
        let n_kv = c.count("metadata count", 12)?;
        let mut metadata = BTreeMap::new();
        for _ in 0..n_kv {
            let key = c.string("metadata key length")?;
            let ty = c.u32("metadata value type")?;
            let v = c.value(ty, 0).map_err(|e| match e {
                GgufError::Malformed {
                    path,
                    message,
                    offset,
                } => GgufError::Malformed {
                    path,
                    message: format!("metadata `{key}`: {message}"),
                    offset,
                },
                e => e,
            })?;
            metadata.insert(key, v);
        }
        let alignment = match metadata.get("general.alignment") {
            None => 32,
            Some(v) => match v.as_u64() {
                Some(a) if a > 0 && a.is_power_of_two() && a <= 1 << 20 => a as usize,
                _ => return Err(c.err(format!("general.alignment {v} is not a power of two"))),
            },
        };
        let mut tensors = Vec::with_capacity(n_tensors);
        for _ in 0..n_tensors {
            let name = c.string("tensor name length")?;
            let rank = c.u32("tensor rank")? as usize;
            if rank > 8 {
                return Err(c.err(format!("tensor `{name}` has rank {rank} (at most 8)")));
            }
            let mut dims = Vec::with_capacity(rank);
            for _ in 0..rank {
                dims.push(c.u64("tensor dim")?);
            }
            let ggml_type = GgmlType(c.u32("tensor type")?);
            let offset = c.u64("tensor offset")?;
            let numel = dims
                .iter()
                .try_fold(1u64, |a, &d| a.checked_mul(d))
                .filter(|&n| n <= 1 << 48)
                .ok_or_else(|| c.err(format!("tensor `{name}` dims {dims:?} overflow")))?;
            let size = match ggml_type.format() {
                Some(f) => f.bytes_for(numel as usize).ok_or_else(|| {
                    c.err(format!(
                        "tensor `{name}`: {numel} values are not whole {} blocks",
                        f.name()
                    ))
                })?,
                None => 0,
            };
            if !offset.is_multiple_of(alignment as u64) {
                return Err(c.err(format!(
                    "tensor `{name}` offset {offset} is not aligned to {alignment}"
                )));
            }
            tensors.push(TensorInfo {
                name,
                dims,
                ggml_type,
                offset,
                size,
            });
        }
        let data_offset = c.pos.div_ceil(alignment) * alignment;
        let data_len = b.len().saturating_sub(data_offset) as u64;
        for t in &tensors {
            if t.offset.saturating_add(t.size as u64) > data_len {
                return Err(GgufError::Malformed {
                    path: path.clone(),
                    message: format!(
                        "tensor `{}` ({} bytes at data offset {}) runs past the end of the \
                         file (data section holds {data_len} bytes): truncated file?",
                        t.name, t.size, t.offset
                    ),
                    offset: data_offset,
                });
            }
        }
        Ok(GgufFile {
            path,
            storage,
            version,
            metadata,
            tensors,
            alignment,
            data_offset,
        })
    }

    /// The file path, when opened from one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// A metadata value.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.metadata.get(key)
    }

    fn meta_err(key: &str, message: impl Into<String>) -> GgufError {
        GgufError::Metadata {
            key: key.into(),
            message: message.into(),
        }
    }

    /// A required unsigned integer.
    ///
    /// # Errors
    /// Missing, or not a non-negative integer.
    pub fn get_u64(&self, key: &str) -> Result<u64, GgufError> {
        let v = self
            .get(key)
            .ok_or_else(|| Self::meta_err(key, "missing"))?;
        v.as_u64().ok_or_else(|| {
            Self::meta_err(key, format!("expected an integer, got {}", v.type_name()))
        })
    }

    /// A required number.
    ///
    /// # Errors
    /// Missing, or not a number.
    pub fn get_f64(&self, key: &str) -> Result<f64, GgufError> {
        let v = self
            .get(key)
            .ok_or_else(|| Self::meta_err(key, "missing"))?;
        v.as_f64()
            .ok_or_else(|| Self::meta_err(key, format!("expected a number, got {}", v.type_name())))
    }

    /// A required string.
    ///
    /// # Errors
    /// Missing, or not a string.
    pub fn get_str(&self, key: &str) -> Result<&str, GgufError> {
        let v = self
            .get(key)
            .ok_or_else(|| Self::meta_err(key, "missing"))?;
        v.as_str()
            .ok_or_else(|| Self::meta_err(key, format!("expected a string, got {}", v.type_name())))
    }

    /// A tensor's info by name.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The packed bytes of a tensor (still quantized).
    ///
    /// # Errors
    /// No such tensor, or a type RLX does not read.
    pub fn tensor_bytes(&self, name: &str) -> Result<(&TensorInfo, &[u8]), GgufError> {
        let t = self.tensor(name).ok_or_else(|| GgufError::Tensor {
            name: name.into(),
            message: "not in the file".into(),
        })?;
        if t.ggml_type.format().is_none() {
            return Err(GgufError::Tensor {
                name: name.into(),
                message: format!(
                    "type {} is not supported (RLX reads f32, f16, bf16, q8_0, q4_0, q4_1, \
                     q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k)",
                    t.ggml_type.name()
                ),
            });
        }
        let start = self.data_offset + t.offset as usize;
        Ok((t, &self.storage.bytes()[start..start + t.size]))
    }

    /// The packed bytes of a tensor as tensor storage: borrowed from the memory map (no
    /// copy; the buffer keeps the map alive) for a mapped file, copied for one read into
    /// memory.
    ///
    /// # Errors
    /// As [`GgufFile::tensor_bytes`].
    pub fn tensor_buffer(&self, name: &str) -> Result<(&TensorInfo, Buffer<u8>), GgufError> {
        let (t, bytes) = self.tensor_bytes(name)?;
        let shared = match &self.storage {
            Storage::Mmap(m) => Buffer::from_bytes_shared(m.clone(), bytes),
            Storage::Owned(_) => None,
        };
        Ok((t, shared.unwrap_or_else(|| bytes.to_vec().into())))
    }

    /// A tensor dequantized to f32, outermost dim first.
    ///
    /// # Errors
    /// As [`GgufFile::tensor_bytes`].
    pub fn dequantize(&self, name: &str) -> Result<(Vec<usize>, Vec<f32>), GgufError> {
        let (t, bytes) = self.tensor_bytes(name)?;
        let format = t.ggml_type.format().expect("checked by tensor_bytes");
        let mut out = vec![0f32; t.numel()];
        format.dequantize(bytes, &mut out);
        Ok((t.shape(), out))
    }

    /// Row `row` of a 2-D tensor (n rows of k values), dequantized: an embedding lookup
    /// that never dequantizes the whole table.
    ///
    /// # Errors
    /// No such tensor, not 2-D, an unsupported type, or the row out of range.
    pub fn dequantize_row(&self, name: &str, row: usize, out: &mut [f32]) -> Result<(), GgufError> {
        let (t, bytes) = self.tensor_bytes(name)?;
        let err = |message: String| GgufError::Tensor {
            name: name.into(),
            message,
        };
        if t.dims.len() != 2 {
            return Err(err(format!("expected 2 dims, got {:?}", t.dims)));
        }
        let (k, n) = (t.dims[0] as usize, t.dims[1] as usize);
        if row >= n {
            return Err(err(format!("row {row} out of range (0..{n})")));
        }
        if out.len() != k {
            return Err(err(format!(
                "row has {k} values, buffer holds {}",
                out.len()
            )));
        }
        let format = t.ggml_type.format().expect("checked by tensor_bytes");
        let rb = t.size / n;
        format.dequantize(&bytes[row * rb..(row + 1) * rb], out);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(out: &mut Vec<u8>, v: &str) {
        out.extend((v.len() as u64).to_le_bytes());
        out.extend(v.as_bytes());
    }

    /// A tiny file: two metadata entries (a string and an array of u32) and one Q8_0
    /// tensor of 2 rows x 32.
    fn tiny() -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        b.extend(2u64.to_le_bytes());
        s(&mut b, "general.architecture");
        b.extend(8u32.to_le_bytes());
        s(&mut b, "llama");
        s(&mut b, "a.list");
        b.extend(9u32.to_le_bytes());
        b.extend(4u32.to_le_bytes());
        b.extend(3u64.to_le_bytes());
        for v in [7u32, 8, 9] {
            b.extend(v.to_le_bytes());
        }
        s(&mut b, "w");
        b.extend(2u32.to_le_bytes());
        b.extend(32u64.to_le_bytes());
        b.extend(2u64.to_le_bytes());
        b.extend(8u32.to_le_bytes());
        b.extend(0u64.to_le_bytes());
        while !b.len().is_multiple_of(32) {
            b.push(0);
        }
        for r in 0..2 {
            b.extend(half::f16::from_f32(0.5).to_le_bytes());
            b.extend((0..32).map(|i| (i as i8 - r * 16) as u8));
        }
        b
    }

    #[test]
    fn reads_a_hand_built_file() {
        let f = GgufFile::from_bytes(tiny()).unwrap();
        assert_eq!(f.get_str("general.architecture").unwrap(), "llama");
        let list = f.get("a.list").unwrap().as_array().unwrap();
        assert_eq!(list[2].as_u64(), Some(9));
        let (shape, v) = f.dequantize("w").unwrap();
        assert_eq!(shape, vec![2, 32]);
        assert_eq!(v[1], 0.5);
        assert_eq!(v[32], -8.0);
        let mut row = [0f32; 32];
        f.dequantize_row("w", 1, &mut row).unwrap();
        assert_eq!(row[31], 7.5);
        assert!(f.dequantize_row("w", 2, &mut row).is_err());
        assert!(f.get_u64("general.architecture").is_err());
    }

    #[test]
    fn mapped_tensors_are_borrowed_not_copied() {
        let path = std::env::temp_dir().join(format!("rlx-gguf-{}.gguf", std::process::id()));
        std::fs::write(&path, tiny()).unwrap();
        let f = GgufFile::open(&path).unwrap();
        let (_, bytes) = f.tensor_bytes("w").unwrap();
        let (_, buf) = f.tensor_buffer("w").unwrap();
        assert!(buf.is_shared());
        assert_eq!(buf.as_ptr(), bytes.as_ptr());
        assert_eq!(&buf[..], bytes);
        // the buffer keeps the map alive after the file is dropped
        let copy = bytes.to_vec();
        drop(f);
        assert_eq!(&buf[..], &copy[..]);
        let _ = std::fs::remove_file(&path);
        // a file read into memory hands out copies
        let f = GgufFile::from_bytes(tiny()).unwrap();
        let (_, buf) = f.tensor_buffer("w").unwrap();
        assert!(!buf.is_shared());
        assert_eq!(&buf[..], f.tensor_bytes("w").unwrap().1);
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let full = tiny();
        for n in 0..full.len() {
            let r = GgufFile::from_bytes(full[..n].to_vec());
            assert!(r.is_err(), "prefix of {n} bytes parsed");
        }
    }

    #[test]
    fn corrupt_bytes_never_panic() {
        let full = tiny();
        let mut rng = rlx_ir::SplitMix64(3);
        for _ in 0..2000 {
            let mut b = full.clone();
            for _ in 0..3 {
                let i = (rng.next_u64() as usize) % b.len();
                b[i] = rng.next_u64() as u8;
            }
            let _ = GgufFile::from_bytes(b).map(|f| {
                for t in f.tensors.clone() {
                    let _ = f.dequantize(&t.name);
                }
            });
        }
    }

    #[test]
    fn bad_magic_and_version() {
        let mut b = tiny();
        b[0] = b'X';
        let e = GgufFile::from_bytes(b).unwrap_err().to_string();
        assert!(e.contains("magic"), "{e}");
        let mut b = tiny();
        b[4] = 9;
        let e = GgufFile::from_bytes(b).unwrap_err().to_string();
        assert!(e.contains("version 9"), "{e}");
    }
}
