//! safetensors checkpoints, memory-mapped: one file or a sharded set
//! (`model.safetensors.index.json`).
//!
//! Headers are parsed once at open; tensor bytes stay in the map until a tensor is asked
//! for. A tensor asked for in the dtype it is stored in reads the map in place, without a
//! copy: its [`rlx_ir::Buffer`] borrows the map and keeps it alive (an `Arc`) for as long
//! as any such tensor lives. Otherwise (another dtype, or bytes misaligned for the element
//! type) its bytes are copied out of the map once, decoding little-endian on the way
//! (f16/bf16 are widened to f32 when asked for f32). Nothing else of the file is read.

use crate::error::{ModelError, Result};
use half::{bf16, f16};
use rlx_ir::{Buffer, DType, Tensor, TensorData};
use safetensors::tensor::{Dtype, Metadata, TensorInfo};
use safetensors::SafeTensors;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One memory-mapped safetensors file with its parsed header.
pub struct SafetensorsFile {
    path: PathBuf,
    /// shared with every tensor that borrows it
    map: Arc<memmap2::Mmap>,
    /// byte offset of the data section (8 + header length)
    data_start: usize,
    metadata: Metadata,
}

impl SafetensorsFile {
    /// Maps `path` and parses its header (validated by the `safetensors` crate: offsets in
    /// bounds, no overlaps, the data section exactly covered).
    ///
    /// # Errors
    /// The file cannot be opened or mapped, or its header is malformed.
    pub fn open(path: impl AsRef<Path>) -> Result<SafetensorsFile> {
        let path = path.as_ref().to_path_buf();
        let label = path.display().to_string();
        let file = std::fs::File::open(&path).map_err(|source| ModelError::Io {
            path: label.clone(),
            source,
        })?;
        // SAFETY: a read-only map. If the file changes underneath, values read change, but
        // every read below is bounds-checked against the map's length.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|source| ModelError::Io {
            path: label.clone(),
            source,
        })?;
        let (n, metadata) =
            SafeTensors::read_metadata(&map).map_err(|e| ModelError::Safetensors {
                file: label,
                message: e.to_string(),
            })?;
        Ok(SafetensorsFile {
            path,
            map: Arc::new(map),
            data_start: 8 + n,
            metadata,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Tensor names, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.metadata.tensors().into_keys().collect();
        v.sort();
        v
    }

    /// The header entry of one tensor.
    pub fn info(&self, name: &str) -> Option<&TensorInfo> {
        self.metadata.info(name)
    }

    /// The raw little-endian bytes of one tensor, borrowed from the map (no copy).
    pub fn bytes(&self, name: &str) -> Option<&[u8]> {
        let info = self.metadata.info(name)?;
        let (a, b) = info.data_offsets;
        self.map.get(self.data_start + a..self.data_start + b)
    }

    /// The whole mapped file.
    pub fn mapped(&self) -> &[u8] {
        &self.map
    }
}

/// The weights of a model: one or several safetensors files, looked up by tensor name.
pub struct Weights {
    files: Vec<SafetensorsFile>,
    /// tensor name → index into `files`
    index: HashMap<String, usize>,
    label: String,
}

impl Weights {
    /// Opens the weights of a model folder: `model.safetensors`, or the shards listed in
    /// `model.safetensors.index.json`.
    ///
    /// # Errors
    /// Neither file exists, a shard is missing or malformed.
    pub fn open_dir(dir: &Path) -> Result<Weights> {
        let single = dir.join("model.safetensors");
        if single.is_file() {
            return Weights::open_files(&[single]);
        }
        let index = dir.join("model.safetensors.index.json");
        if !index.is_file() {
            return Err(ModelError::MissingFile {
                dir: dir.display().to_string(),
                file: "model.safetensors".into(),
                what: "the weights; sharded checkpoints need model.safetensors.index.json".into(),
            });
        }
        let label = index.display().to_string();
        let text = std::fs::read_to_string(&index).map_err(|source| ModelError::Io {
            path: label.clone(),
            source,
        })?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| ModelError::Safetensors {
                file: label.clone(),
                message: format!("index is not JSON: {e}"),
            })?;
        let Some(map) = v.get("weight_map").and_then(|m| m.as_object()) else {
            return Err(ModelError::Safetensors {
                file: label,
                message: "index has no `weight_map` object".into(),
            });
        };
        let mut shards: Vec<String> = map
            .values()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect();
        shards.sort();
        shards.dedup();
        let paths: Vec<PathBuf> = shards.iter().map(|s| dir.join(s)).collect();
        Weights::open_files(&paths)
    }

    /// Opens a set of safetensors files as one namespace.
    ///
    /// # Errors
    /// A file cannot be opened or parsed, or two files hold the same tensor name.
    pub fn open_files(paths: &[PathBuf]) -> Result<Weights> {
        let mut files = Vec::with_capacity(paths.len());
        let mut index = HashMap::new();
        for (i, p) in paths.iter().enumerate() {
            let f = SafetensorsFile::open(p)?;
            for name in f.names() {
                if let Some(prev) = index.insert(name.clone(), i) {
                    let prev: &SafetensorsFile = &files[prev];
                    return Err(ModelError::Safetensors {
                        file: p.display().to_string(),
                        message: format!("tensor `{name}` is also in {}", prev.path().display()),
                    });
                }
            }
            files.push(f);
        }
        let label = match paths {
            [one] => one.display().to_string(),
            _ => format!("{} safetensors shards", paths.len()),
        };
        Ok(Weights {
            files,
            index,
            label,
        })
    }

    /// A label for errors: the file, or the number of shards.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Every tensor name, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.index.keys().cloned().collect();
        v.sort();
        v
    }

    /// True when the weights hold `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// The header entry of one tensor.
    pub fn info(&self, name: &str) -> Option<&TensorInfo> {
        self.index.get(name).and_then(|&i| self.files[i].info(name))
    }

    /// Raw little-endian bytes of one tensor, borrowed from the map (no copy).
    pub fn bytes(&self, name: &str) -> Option<&[u8]> {
        self.index
            .get(name)
            .and_then(|&i| self.files[i].bytes(name))
    }

    /// The tensor `name` as `dtype` with exactly the shape `expected`. Stored as `dtype`
    /// (and aligned for it, as safetensors writers align), its storage borrows the file map
    /// without a copy ([`Tensor::is_shared`]); otherwise it is converted and copied out of
    /// the map once. f16/bf16/f32/f64 files convert to any float dtype; integer tensors
    /// load only as their own dtype.
    ///
    /// # Errors
    /// [`ModelError::MissingTensor`] naming the tensor and the expected shape (with a guess
    /// at what the file calls it), or [`ModelError::TensorMismatch`] for a wrong shape or
    /// dtype.
    pub fn tensor(&self, name: &str, dtype: DType, expected: &[usize]) -> Result<Tensor> {
        let (from, bytes) = self.raw(name, dtype, expected)?;
        let mismatch = |why: &str| ModelError::TensorMismatch {
            file: self.label.clone(),
            name: name.into(),
            expected: describe(dtype, expected),
            found: format!("{from:?}{expected:?}{why}"),
        };
        let shared = match self.index.get(name) {
            Some(&i) if same_dtype(from, dtype) => {
                TensorData::shared_from_le_bytes(dtype, self.files[i].map.clone(), bytes)
            }
            _ => None,
        };
        let data = match shared {
            Some(d) => d,
            None => decode(from, dtype, bytes)
                .ok_or_else(|| mismatch(" (cannot convert this dtype)"))?,
        };
        Tensor::new(expected.to_vec(), data).map_err(|e| mismatch(&format!(" ({e})")))
    }

    /// The file dtype and raw little-endian bytes of tensor `name`, borrowed from the map,
    /// after checking that its shape is exactly `expected` (`dtype` only names what the
    /// caller wants, for messages).
    ///
    /// # Errors
    /// As [`Weights::tensor`]: a missing tensor (with a "did you mean") or a wrong shape.
    pub fn raw(&self, name: &str, dtype: DType, expected: &[usize]) -> Result<(Dtype, &[u8])> {
        let want = describe(dtype, expected);
        let Some(info) = self.info(name) else {
            return Err(ModelError::MissingTensor {
                file: self.label.clone(),
                name: name.into(),
                expected: want,
                hint: self.hint(name),
            });
        };
        let mismatch = |why: &str| ModelError::TensorMismatch {
            file: self.label.clone(),
            name: name.into(),
            expected: want.clone(),
            found: format!("{:?}{:?}{why}", info.dtype, info.shape),
        };
        if info.shape != expected {
            return Err(mismatch(""));
        }
        let bytes = self
            .bytes(name)
            .ok_or_else(|| mismatch(" (data out of range)"))?;
        Ok((info.dtype, bytes))
    }

    /// As [`Weights::raw`], but the bytes as a buffer that borrows the file map and keeps
    /// it alive (no copy), for storage used as is (packed projections).
    ///
    /// # Errors
    /// As [`Weights::raw`].
    pub fn raw_shared(
        &self,
        name: &str,
        dtype: DType,
        expected: &[usize],
    ) -> Result<(Dtype, Buffer<u8>)> {
        let (from, bytes) = self.raw(name, dtype, expected)?;
        let file = &self.files[self.index[name]];
        let buf = Buffer::from_bytes_shared(file.map.clone(), bytes)
            .expect("bytes of the map, and u8 is always aligned");
        Ok((from, buf))
    }

    /// A "did you mean" for a missing name: a tensor with the same name but for a prefix
    /// (`bert.` and the like), else the one sharing the longest dotted suffix.
    fn hint(&self, name: &str) -> String {
        let parts: Vec<&str> = name.split('.').collect();
        let mut best: Option<(usize, &String)> = None;
        for cand in self.index.keys() {
            let c: Vec<&str> = cand.split('.').collect();
            let common = parts
                .iter()
                .rev()
                .zip(c.iter().rev())
                .take_while(|(a, b)| a == b)
                .count();
            let better = match best {
                None => true,
                Some((n, b)) => common > n || (common == n && cand < b),
            };
            if common >= 2 && better {
                best = Some((common, cand));
            }
        }
        match best {
            Some((_, c)) => {
                let info = self.info(c).map(|i| format!(" {:?}{:?}", i.dtype, i.shape));
                format!(
                    "; the file has `{c}`{}; {} tensors in all",
                    info.unwrap_or_default(),
                    self.index.len()
                )
            }
            None => format!("; the file has {} tensors, none like it", self.index.len()),
        }
    }
}

/// `f32[384, 384]`.
pub fn describe(dtype: DType, shape: &[usize]) -> String {
    format!("{dtype}{shape:?}")
}

/// True when file dtype `from` is stored exactly as `to` in memory and [`decode`] accepts
/// the pair (bool excluded: not every byte is a valid bool).
fn same_dtype(from: Dtype, to: DType) -> bool {
    matches!(
        (from, to),
        (Dtype::F32, DType::F32)
            | (Dtype::F16, DType::F16)
            | (Dtype::BF16, DType::BF16)
            | (Dtype::F64, DType::F64)
            | (Dtype::I64, DType::I64)
            | (Dtype::I32, DType::I32)
            | (Dtype::I8, DType::I8)
            | (Dtype::U8, DType::U8)
    )
}

/// Decodes little-endian `bytes` of file dtype `from` into storage of `to`.
fn decode(from: Dtype, to: DType, bytes: &[u8]) -> Option<TensorData> {
    fn floats<const N: usize>(b: &[u8], f: impl Fn([u8; N]) -> f32) -> Vec<f32> {
        b.chunks_exact(N)
            .map(|c| f(c.try_into().expect("chunk of N bytes")))
            .collect()
    }
    let as_f32 = || -> Option<Vec<f32>> {
        Some(match from {
            Dtype::F32 => floats(bytes, f32::from_le_bytes),
            Dtype::F16 => floats(bytes, |c| f16::from_le_bytes(c).to_f32()),
            Dtype::BF16 => floats(bytes, |c| bf16::from_le_bytes(c).to_f32()),
            Dtype::F64 => floats(bytes, |c: [u8; 8]| f64::from_le_bytes(c) as f32),
            _ => return None,
        })
    };
    match (from, to) {
        (_, DType::F32) => as_f32().map(|v| TensorData::F32(v.into())),
        (Dtype::F16, DType::F16) => TensorData::from_le_bytes(DType::F16, bytes),
        (Dtype::BF16, DType::BF16) => TensorData::from_le_bytes(DType::BF16, bytes),
        (Dtype::F64, DType::F64) => TensorData::from_le_bytes(DType::F64, bytes),
        (_, DType::F16) => {
            as_f32().map(|v| TensorData::F16(v.into_iter().map(f16::from_f32).collect()))
        }
        (_, DType::BF16) => {
            as_f32().map(|v| TensorData::BF16(v.into_iter().map(bf16::from_f32).collect()))
        }
        (Dtype::I64, DType::I64) => TensorData::from_le_bytes(DType::I64, bytes),
        (Dtype::I32, DType::I32) => TensorData::from_le_bytes(DType::I32, bytes),
        (Dtype::I8, DType::I8) => TensorData::from_le_bytes(DType::I8, bytes),
        (Dtype::U8, DType::U8) => TensorData::from_le_bytes(DType::U8, bytes),
        (Dtype::BOOL, DType::Bool) => TensorData::from_le_bytes(DType::Bool, bytes),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use safetensors::tensor::TensorView;

    fn write(dir: &Path, tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) -> PathBuf {
        let views: Vec<(String, TensorView<'_>)> = tensors
            .iter()
            .map(|(n, d, s, b)| {
                (
                    n.to_string(),
                    TensorView::new(*d, s.clone(), b).expect("valid view"),
                )
            })
            .collect();
        let bytes = safetensors::serialize(views, None).expect("serializes");
        let p = dir.join("model.safetensors");
        std::fs::write(&p, bytes).expect("writes");
        p
    }

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rlx-models-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("tmp dir");
        d
    }

    #[test]
    fn loads_converts_and_names_missing_tensors() {
        let dir = tmpdir("weights");
        let f32s: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let f16s: Vec<u8> = [0.5f32, -1.0]
            .iter()
            .flat_map(|&x| f16::from_f32(x).to_le_bytes())
            .collect();
        write(
            &dir,
            &[
                ("bert.encoder.w", Dtype::F32, vec![2, 3], f32s),
                ("h", Dtype::F16, vec![2], f16s),
            ],
        );
        let w = Weights::open_dir(&dir).expect("opens");
        let t = w
            .tensor("bert.encoder.w", DType::F32, &[2, 3])
            .expect("loads");
        assert_eq!(t.as_f32().expect("f32"), &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let h = w.tensor("h", DType::F32, &[2]).expect("widens");
        assert_eq!(h.as_f32().expect("f32"), &[0.5, -1.0]);

        let e = w.tensor("encoder.w", DType::F32, &[2, 3]).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("missing tensor `encoder.w`"), "{msg}");
        assert!(msg.contains("f32[2, 3]"), "{msg}");
        assert!(msg.contains("bert.encoder.w"), "{msg}");

        let e = w.tensor("bert.encoder.w", DType::F32, &[3, 2]).unwrap_err();
        assert!(
            e.to_string()
                .contains("expected f32[3, 2], found F32[2, 3]"),
            "{e}"
        );
        let e = w.tensor("h", DType::I64, &[2]).unwrap_err();
        assert!(e.to_string().contains("cannot convert"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }

    fn in_map(w: &Weights, t: &Tensor) -> bool {
        let p = t.data().as_bytes().as_ptr();
        w.files
            .iter()
            .any(|f| f.mapped().as_ptr_range().contains(&p))
    }

    #[test]
    fn same_dtype_loads_borrow_the_map_and_conversions_copy() {
        let dir = tmpdir("zero-copy");
        let vals = [1.0f32, -2.0, 3.5, 4.0, 5.0, 6.25];
        let f32s: Vec<u8> = vals.iter().flat_map(|x| x.to_le_bytes()).collect();
        let f16s: Vec<u8> = [0.5f32, -1.0]
            .iter()
            .flat_map(|&x| f16::from_f32(x).to_le_bytes())
            .collect();
        write(
            &dir,
            &[
                ("w", Dtype::F32, vec![2, 3], f32s),
                ("h", Dtype::F16, vec![2], f16s),
            ],
        );
        let w = Weights::open_dir(&dir).expect("opens");
        let t = w.tensor("w", DType::F32, &[2, 3]).expect("loads");
        assert!(t.is_shared(), "an f32 tensor loaded as f32 borrows the map");
        assert!(in_map(&w, &t));
        assert_eq!(t.as_f32().expect("f32"), &vals);
        assert_eq!(
            t.data().as_bytes().as_ptr(),
            w.bytes("w").expect("bytes").as_ptr()
        );
        let h = w.tensor("h", DType::F16, &[2]).expect("loads");
        assert!(h.is_shared() && in_map(&w, &h));
        assert_eq!(h.to_f64_vec(), vec![0.5, -1.0]);

        // converting loads copy
        let h32 = w.tensor("h", DType::F32, &[2]).expect("widens");
        assert!(!h32.is_shared() && !in_map(&w, &h32));
        assert_eq!(h32.as_f32().expect("f32"), &[0.5, -1.0]);
        let w16 = w.tensor("w", DType::F16, &[2, 3]).expect("narrows");
        assert!(!w16.is_shared());
        assert_eq!(w16.to_f64_vec(), vals.map(f64::from).to_vec());

        // the tensors keep the map alive after the weights are gone; a write copies
        assert_eq!(Arc::strong_count(&w.files[0].map), 3);
        drop(w);
        assert_eq!(t.as_f32().expect("f32"), &vals);
        let mut t2 = t.clone();
        let rlx_ir::TensorData::F32(v) = t2.data_mut() else {
            unreachable!("f32")
        };
        v[0] = 9.0;
        assert!(!t2.is_shared() && t.is_shared());
        assert_eq!(t.as_f32().expect("f32")[0], 1.0);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn misaligned_tensors_are_copied() {
        // hand-written so that the f32 tensor starts one byte into the data section
        let dir = tmpdir("misaligned");
        let header = r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"F32","shape":[2],"data_offsets":[1,9]}}"#;
        let mut header = header.as_bytes().to_vec();
        while !header.len().is_multiple_of(8) {
            header.push(b' ');
        }
        let mut file = (header.len() as u64).to_le_bytes().to_vec();
        file.extend_from_slice(&header);
        file.push(7);
        file.extend([1.5f32, -2.0].iter().flat_map(|x| x.to_le_bytes()));
        std::fs::write(dir.join("model.safetensors"), file).expect("writes");
        let w = Weights::open_dir(&dir).expect("opens");
        let b = w.tensor("b", DType::F32, &[2]).expect("loads");
        assert!(!b.is_shared(), "misaligned for f32: copied");
        assert_eq!(b.as_f32().expect("f32"), &[1.5, -2.0]);
        let a = w.tensor("a", DType::U8, &[1]).expect("loads");
        assert!(a.is_shared() && in_map(&w, &a), "u8 is always aligned");
        assert_eq!(a.to_f64_vec(), vec![7.0]);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn malformed_and_absent_files_are_errors() {
        let dir = tmpdir("bad");
        let e = Weights::open_dir(&dir).err().expect("no weights");
        assert!(e.to_string().contains("model.safetensors"), "{e}");
        std::fs::write(dir.join("model.safetensors"), b"\x05\0\0\0\0\0\0\0{bad}").expect("writes");
        let e = Weights::open_dir(&dir).err().expect("malformed");
        assert!(
            e.to_string().contains("not a valid safetensors file"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
