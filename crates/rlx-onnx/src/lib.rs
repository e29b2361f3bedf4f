//! The RLX ONNX importer: an ONNX model file becomes an [`rlx_ir::Graph`] plus named
//! weights.
//!
//! - The protobuf types are generated from the vendored `proto/onnx.proto` ([`proto`]).
//! - Initializers become params (external data files are memory-mapped and copied once
//!   into typed storage); graph inputs become run-time inputs with dynamic dims as symbols.
//! - Every ONNX op maps to IR ops in [`ops`], one line per op in its registry; values known
//!   at import (constants, initializers, shape computations) fold as they are read.
//! - ONNX Runtime's contrib ops (`com.microsoft`) decompose into IR ops in [`contrib`].
//! - Every unsupported node is listed in one [`OnnxError::Unsupported`].
//! - [`ParsedModel`] keeps a decoded model and imports it again per set of dim sizes, so a
//!   runtime can specialise a dynamic-axis model to the shapes of its inputs.
//! - Ops whose output shape depends on values (`NonZero`, `NonMaxSuppression`, ...) fold
//!   at import when their inputs are known ([`host`]); otherwise an import stops at them
//!   and a runtime evaluates them between compiled stages ([`stage`]).
//!
//! - Sequences, optionals and string tensors are resolved at import ([`ops::values`]):
//!   sequence positions and lengths, whether an optional holds a value and every string
//!   are known as the model is read, so the graph stays a plain tensor graph. Graph
//!   inputs and outputs of those types cross as tensors ([`OnnxValue`], [`OutputLayout`]).
//! - With the `runtime` feature, [`runtime::dynamic`] puts a [`ParsedModel`] behind an
//!   `rlx_runtime::DynamicGraph`, compiled once per shape signature of its inputs.
//!
//! Importers build a graph and never touch a device; the only other crate used is the
//! device-free validation interpreter (`rlx-interp`), for the reference semantics of constant
//! folding (and, with the `runtime` feature, the runtime's `DynamicGraph`, which compiles what
//! the importer builds).

pub mod contrib;
mod ctx;
mod data;
mod dtype;
mod emit;
mod error;
pub mod host;
pub(crate) mod import;
mod node;
pub mod ops;
mod parsed;
pub mod proto;
#[cfg(feature = "runtime")]
pub mod runtime;
pub mod stage;
mod tensor;
mod value;

pub use data::{element_name, load_value_pb, OnnxValue, OutputLayout, StringTensor};
pub use dtype::{onnx_type_name, to_dtype, to_onnx};
pub use error::{OnnxError, UnsupportedNode};
pub use import::{MAX_OPSET, MIN_OPSET};
pub use parsed::{ParsedModel, Specialised};

use bytes::Bytes;
use prost::Message;
use rlx_ir::{Graph, Tensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// How to import.
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// Values of graph inputs. The importer freezes one into a constant only where the IR
    /// needs a static value (a shape, axes, pads, a sequence length) and the model computes
    /// it from that input; every other use stays a run-time input. Frozen inputs are listed
    /// in [`OnnxModel::frozen_inputs`].
    pub known_inputs: HashMap<String, Tensor>,
    /// Sizes for symbolic dims of the graph inputs, by the name the model gives them
    /// (`batch`, `sequence`, ...; unnamed dims are `INPUT_dI`): bound at import, so ops that
    /// need static shapes (CumSum, Range lengths, ...) import, and every shape is checked
    /// once. Dims not named here stay symbolic.
    pub dims: HashMap<String, usize>,
    /// Values an earlier stage of a staged run computed, with their (static) types: read
    /// as graph inputs of those names, and the nodes that computed them are not mapped
    /// again (see [`stage`]). Empty for a first (or only) stage.
    pub carried: Vec<(String, rlx_ir::TensorType)>,
    /// Values of graph inputs that are sequences, optionals or string tensors: the
    /// importer needs their layout (a sequence's length, whether an optional holds a
    /// value) and their strings at import. Their tensors stay run-time inputs, fed as
    /// [`OnnxValue::feeds`] names them.
    pub known_values: HashMap<String, OnnxValue>,
}

/// An imported model.
#[derive(Debug)]
pub struct OnnxModel {
    /// the graph: inputs, params (one per initializer used at run time), outputs
    pub graph: Graph,
    /// the weights, by param name
    pub params: Vec<(String, Tensor)>,
    /// graph inputs whose given value was frozen into the graph
    pub frozen_inputs: Vec<String>,
    /// imported opsets: domain and version
    pub opsets: Vec<(String, i64)>,
    /// producer name and version, as the file records them
    pub producer: String,
    /// the model's outputs in declared order, each with how it is put together from the
    /// graph's outputs (a tensor output is the graph output of its name)
    pub outputs: Vec<(String, OutputLayout)>,
}

/// Loads an ONNX model file (memory-mapped), resolving external data next to it.
///
/// # Errors
/// Unreadable or malformed files, missing external data, unsupported nodes (all listed),
/// inconsistent models; each error names the file and the node or tensor.
pub fn load(path: impl AsRef<Path>, opts: &ImportOptions) -> Result<OnnxModel, OnnxError> {
    let (bytes, base, label) = map_file(path.as_ref())?;
    load_bytes(bytes, Some(base), &label, opts)
}

/// Memory-maps an ONNX file: its bytes, the folder its external data resolves against, and
/// its name for messages.
pub(crate) fn map_file(path: &Path) -> Result<(Bytes, PathBuf, String), OnnxError> {
    let label = path.display().to_string();
    let io = |source| OnnxError::Io {
        path: label.clone(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    // SAFETY: read-only map; the file changing underneath changes values read, not safety
    // of the decoder, which bounds-checks every read.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
    let base = path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    Ok((Bytes::from_owner(map), base, label))
}

/// Loads a model from bytes. External data resolves against `base_dir` (refused without
/// one); `label` names the model in errors.
///
/// # Errors
/// As [`load`].
pub fn load_bytes(
    bytes: Bytes,
    base_dir: Option<PathBuf>,
    label: &str,
    opts: &ImportOptions,
) -> Result<OnnxModel, OnnxError> {
    let model = decode_model(bytes, label)?;
    let mut ext = tensor::ExternalData::new(base_dir);
    import::import(&model, label, &mut ext, opts)
}

/// Decodes and sanity-checks a `ModelProto`.
///
/// # Errors
/// Bytes that are not an ONNX model; well-known other formats are named.
pub fn decode_model(bytes: Bytes, label: &str) -> Result<proto::ModelProto, OnnxError> {
    let err = |message: String| OnnxError::Decode {
        file: label.to_string(),
        message,
    };
    if let Some(kind) = other_format(&bytes) {
        return Err(err(format!("this looks like {kind}, not an ONNX protobuf")));
    }
    if bytes.is_empty() {
        return Err(err("the file is empty".into()));
    }
    let model = proto::ModelProto::decode(bytes).map_err(|e| err(e.to_string()))?;
    if model.ir_version.is_none() || model.graph.is_none() {
        return Err(err(
            "missing ir_version or graph (truncated file, or not a model)".into(),
        ));
    }
    Ok(model)
}

/// Names a few formats people hand to an ONNX loader by mistake.
fn other_format(b: &[u8]) -> Option<&'static str> {
    if b.starts_with(b"GGUF") {
        Some("a GGUF file")
    } else if b.starts_with(b"PK\x03\x04") {
        Some("a zip archive (a PyTorch checkpoint?)")
    } else if b.starts_with(b"\x7fELF") {
        Some("an ELF binary")
    } else if b.starts_with(b"\x93NUMPY") {
        Some("a NumPy .npy file")
    } else if b.len() > 9 && b[8] == b'{' && u64::from_le_bytes(b[..8].try_into().ok()?) < 1 << 32 {
        Some("a safetensors file")
    } else {
        None
    }
}

/// Reads one `TensorProto` file (the backend test suites' `input_N.pb` / `output_N.pb`):
/// its name and value.
///
/// # Errors
/// Unreadable or malformed files, unsupported element types.
pub fn load_tensor_pb(path: impl AsRef<Path>) -> Result<(String, Tensor), OnnxError> {
    let path = path.as_ref();
    let label = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| OnnxError::Io {
        path: label.clone(),
        source,
    })?;
    let t = proto::TensorProto::decode(Bytes::from(bytes)).map_err(|e| OnnxError::Decode {
        file: label.clone(),
        message: e.to_string(),
    })?;
    let name = t.name().to_string();
    let mut ext = tensor::ExternalData::new(path.parent().map(Path::to_path_buf));
    let value = tensor::to_tensor(&t, &mut ext).map_err(|message| OnnxError::Tensor {
        file: label,
        name: name.clone(),
        message,
    })?;
    Ok((name, value))
}
