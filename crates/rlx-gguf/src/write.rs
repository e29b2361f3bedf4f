//! Writing GGUF v3 files: metadata, tensor infos, then each tensor's bytes, streamed.
//!
//! The caller declares every tensor (name, GGML dims, type) up front, so that the header
//! with its offsets is written first, then hands over the bytes tensor by tensor in the
//! declared order ([`GgufWriter::tensor_data`]); nothing but one tensor is held at a time.
//! The layout is the one [`crate::GgufFile`] parses.

use crate::{GgmlType, GgufError, MetaValue};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Alignment of the data section and of every tensor in it.
const ALIGNMENT: usize = 32;

/// A tensor to be written: its name, dims innermost first (`[k, n]` for n rows of k
/// values) and stored type.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorDecl {
    /// the name (`blk.0.attn_q.weight`)
    pub name: String,
    /// dims, innermost first
    pub dims: Vec<u64>,
    /// the stored type
    pub ggml_type: GgmlType,
}

impl TensorDecl {
    /// Bytes of the tensor's data, or None for types RLX cannot size.
    pub fn size(&self) -> Option<usize> {
        let numel: u64 = self.dims.iter().product();
        self.ggml_type.format()?.bytes_for(numel as usize)
    }
}

/// The GGML type id of a format (the inverse of [`GgmlType::format`]).
pub fn ggml_type_of(format: crate::QuantFormat) -> GgmlType {
    use crate::QuantFormat as Q;
    GgmlType(match format {
        Q::F32 => 0,
        Q::F16 => 1,
        Q::Q4_0 => 2,
        Q::Q4_1 => 3,
        Q::Q5_0 => 6,
        Q::Q5_1 => 7,
        Q::Q8_0 => 8,
        Q::Q2K => 10,
        Q::Q3K => 11,
        Q::Q4K => 12,
        Q::Q5K => 13,
        Q::Q6K => 14,
        Q::BF16 => 30,
    })
}

/// A GGUF file being written: header done, tensor data pending.
pub struct GgufWriter {
    out: BufWriter<File>,
    path: PathBuf,
    tensors: Vec<(TensorDecl, usize)>,
    next: usize,
    written: usize,
}

impl GgufWriter {
    /// Creates `path` and writes the header, the metadata and the tensor infos.
    ///
    /// # Errors
    /// The file cannot be created or written, or a tensor has a type RLX cannot size.
    pub fn create(
        path: &Path,
        metadata: &[(String, MetaValue)],
        tensors: Vec<TensorDecl>,
    ) -> Result<GgufWriter, GgufError> {
        let io = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut sized = Vec::with_capacity(tensors.len());
        for t in tensors {
            let size = t.size().ok_or_else(|| GgufError::Tensor {
                name: t.name.clone(),
                message: format!(
                    "cannot write type {} with dims {:?}",
                    t.ggml_type.name(),
                    t.dims
                ),
            })?;
            sized.push((t, size));
        }
        let header = header_bytes(metadata, &sized);
        let file = File::create(path).map_err(io)?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        out.write_all(&header).map_err(io)?;
        Ok(GgufWriter {
            out,
            path: path.to_path_buf(),
            tensors: sized,
            next: 0,
            written: header.len(),
        })
    }

    /// The declaration of the next tensor [`Self::tensor_data`] expects, if any is left.
    pub fn next_tensor(&self) -> Option<&TensorDecl> {
        self.tensors.get(self.next).map(|(t, _)| t)
    }

    /// Writes the next declared tensor's bytes (padded to the alignment).
    ///
    /// # Errors
    /// Every tensor is already written, the length is not the declared size, or the write
    /// fails.
    pub fn tensor_data(&mut self, bytes: &[u8]) -> Result<(), GgufError> {
        let Some((t, size)) = self.tensors.get(self.next) else {
            return Err(GgufError::Tensor {
                name: "(none)".into(),
                message: "more tensor data than declared tensors".into(),
            });
        };
        if bytes.len() != *size {
            return Err(GgufError::Tensor {
                name: t.name.clone(),
                message: format!("{} bytes given, {size} declared", bytes.len()),
            });
        }
        let io = |source| GgufError::Io {
            path: self.path.clone(),
            source,
        };
        self.out.write_all(bytes).map_err(io)?;
        let pad = bytes.len().next_multiple_of(ALIGNMENT) - bytes.len();
        self.out.write_all(&[0u8; ALIGNMENT][..pad]).map_err(io)?;
        self.written += bytes.len() + pad;
        self.next += 1;
        Ok(())
    }

    /// Flushes the file after the last tensor; returns its size in bytes.
    ///
    /// # Errors
    /// Tensors declared but not written, or the flush fails.
    pub fn finish(mut self) -> Result<usize, GgufError> {
        if let Some((t, _)) = self.tensors.get(self.next) {
            return Err(GgufError::Tensor {
                name: t.name.clone(),
                message: "declared but never written".into(),
            });
        }
        self.out.flush().map_err(|source| GgufError::Io {
            path: self.path.clone(),
            source,
        })?;
        Ok(self.written)
    }
}

fn put_str(b: &mut Vec<u8>, s: &str) {
    b.extend((s.len() as u64).to_le_bytes());
    b.extend(s.as_bytes());
}

/// The GGUF value type id of a value.
fn value_type(v: &MetaValue) -> u32 {
    match v {
        MetaValue::U8(_) => 0,
        MetaValue::I8(_) => 1,
        MetaValue::U16(_) => 2,
        MetaValue::I16(_) => 3,
        MetaValue::U32(_) => 4,
        MetaValue::I32(_) => 5,
        MetaValue::F32(_) => 6,
        MetaValue::Bool(_) => 7,
        MetaValue::String(_) => 8,
        MetaValue::Array(_) => 9,
        MetaValue::U64(_) => 10,
        MetaValue::I64(_) => 11,
        MetaValue::F64(_) => 12,
    }
}

/// A value's bytes (without its type id). Arrays take their element type from the first
/// element (an empty array is written as an array of strings).
fn put_value(b: &mut Vec<u8>, v: &MetaValue) {
    match v {
        MetaValue::U8(x) => b.push(*x),
        MetaValue::I8(x) => b.push(*x as u8),
        MetaValue::U16(x) => b.extend(x.to_le_bytes()),
        MetaValue::I16(x) => b.extend(x.to_le_bytes()),
        MetaValue::U32(x) => b.extend(x.to_le_bytes()),
        MetaValue::I32(x) => b.extend(x.to_le_bytes()),
        MetaValue::F32(x) => b.extend(x.to_le_bytes()),
        MetaValue::Bool(x) => b.push(*x as u8),
        MetaValue::String(s) => put_str(b, s),
        MetaValue::Array(items) => {
            b.extend(items.first().map_or(8, value_type).to_le_bytes());
            b.extend((items.len() as u64).to_le_bytes());
            for item in items {
                put_value(b, item);
            }
        }
        MetaValue::U64(x) => b.extend(x.to_le_bytes()),
        MetaValue::I64(x) => b.extend(x.to_le_bytes()),
        MetaValue::F64(x) => b.extend(x.to_le_bytes()),
    }
}

/// Header, metadata (plus `general.alignment`) and tensor infos, padded to the alignment.
fn header_bytes(metadata: &[(String, MetaValue)], tensors: &[(TensorDecl, usize)]) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend((tensors.len() as u64).to_le_bytes());
    let has_alignment = metadata.iter().any(|(k, _)| k == "general.alignment");
    let count = metadata.len() + usize::from(!has_alignment);
    b.extend((count as u64).to_le_bytes());
    for (key, value) in metadata {
        put_str(&mut b, key);
        b.extend(value_type(value).to_le_bytes());
        put_value(&mut b, value);
    }
    if !has_alignment {
        put_str(&mut b, "general.alignment");
        b.extend(4u32.to_le_bytes());
        b.extend((ALIGNMENT as u32).to_le_bytes());
    }
    let mut offset = 0usize;
    for (t, size) in tensors {
        put_str(&mut b, &t.name);
        b.extend((t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            b.extend(d.to_le_bytes());
        }
        b.extend(t.ggml_type.0.to_le_bytes());
        b.extend((offset as u64).to_le_bytes());
        offset += size.next_multiple_of(ALIGNMENT);
    }
    b.resize(b.len().next_multiple_of(ALIGNMENT), 0);
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GgufFile, QuantFormat};

    #[test]
    fn written_files_read_back() {
        let dir = std::env::temp_dir().join(format!("rlx-gguf-write-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.gguf");
        let meta = vec![
            (
                "general.architecture".to_string(),
                MetaValue::String("llama".into()),
            ),
            ("a.f".to_string(), MetaValue::F32(0.5)),
            (
                "a.list".to_string(),
                MetaValue::Array(vec![MetaValue::I32(-1), MetaValue::I32(7)]),
            ),
            ("a.empty".to_string(), MetaValue::Array(vec![])),
        ];
        let x: Vec<f32> = (0..3 * 64).map(|i| (i as f32 * 0.37).sin()).collect();
        let decl = |name: &str, dims: Vec<u64>, f| TensorDecl {
            name: name.into(),
            dims,
            ggml_type: ggml_type_of(f),
        };
        let tensors = vec![
            decl("q", vec![64, 3], QuantFormat::Q8_0),
            decl("n", vec![5], QuantFormat::F32),
        ];
        let mut w = GgufWriter::create(&path, &meta, tensors).unwrap();
        assert!(w.tensor_data(&[0; 3]).is_err(), "a wrong size is refused");
        w.tensor_data(&crate::quantize(QuantFormat::Q8_0, &x).unwrap())
            .unwrap();
        let unfinished = GgufWriter::create(
            &dir.join("u.gguf"),
            &meta,
            vec![decl("n", vec![5], QuantFormat::F32)],
        )
        .unwrap();
        assert!(unfinished.finish().is_err(), "a missing tensor is an error");
        let n: Vec<u8> = (0..5).flat_map(|i| (i as f32).to_le_bytes()).collect();
        w.tensor_data(&n).unwrap();
        assert!(w.tensor_data(&n).is_err(), "no undeclared tensor");
        w.finish().unwrap();
        let f = GgufFile::open(&path).unwrap();
        assert_eq!(f.get_str("general.architecture").unwrap(), "llama");
        assert_eq!(f.get_f64("a.f").unwrap(), 0.5);
        assert_eq!(
            f.get("a.list").unwrap().as_array().unwrap()[0].as_i64(),
            Some(-1)
        );
        assert_eq!(f.get("a.empty").unwrap().as_array().unwrap().len(), 0);
        let (shape, q) = f.dequantize("q").unwrap();
        assert_eq!(shape, [3, 64]);
        for (a, b) in q.iter().zip(&x) {
            assert!((a - b).abs() < 0.01, "{a} vs {b}");
        }
        assert_eq!(f.dequantize("n").unwrap().1, [0.0, 1.0, 2.0, 3.0, 4.0]);
        std::fs::remove_dir_all(&dir).ok();
    }
}
