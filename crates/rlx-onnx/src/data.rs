//! Values of every ONNX type on the host: tensors, string tensors, sequences and optionals,
//! as a caller gives graph inputs and reads outputs, and as the backend tests' data files
//! (`TensorProto`, `SequenceProto`, `OptionalProto`) hold them.
//!
//! The compiled graph computes tensors only. A sequence or optional graph input is given
//! to the graph as its tensors ([`OnnxValue::feeds`], one graph input per element, named
//! by [`element_name`]); a model output is put back together from the graph's outputs by
//! its [`OutputLayout`]. Strings never reach a device: they are computed at import.

use crate::proto::{type_proto, OptionalProto, SequenceProto, TensorProto, TypeProto};
use crate::tensor::{proto_shape, to_tensor, ExternalData};
use crate::OnnxError;
use bytes::Bytes;
use prost::Message;
use rlx_ir::Tensor;
use std::path::Path;

/// A tensor of strings (ONNX `tensor(string)`), row-major; host only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StringTensor {
    /// dims
    pub shape: Vec<usize>,
    /// elements, row-major (`shape`'s product of them)
    pub data: Vec<String>,
}

impl StringTensor {
    /// A string tensor; `None` when `data` does not have `shape`'s element count.
    pub fn new(shape: Vec<usize>, data: Vec<String>) -> Option<StringTensor> {
        (shape.iter().product::<usize>() == data.len()).then_some(StringTensor { shape, data })
    }
}

/// A value of any ONNX type the importer handles, on the host.
#[derive(Debug, Clone, PartialEq)]
pub enum OnnxValue {
    /// a numeric or boolean tensor
    Tensor(Tensor),
    /// a string tensor
    Strings(StringTensor),
    /// a sequence (of tensors, or of other values)
    Sequence(Vec<OnnxValue>),
    /// an optional: a value or none
    Optional(Option<Box<OnnxValue>>),
}

/// The graph-input or graph-output name of element `idx` of the sequence `name`.
pub fn element_name(name: &str, idx: usize) -> String {
    format!("{name}[{idx}]")
}

impl OnnxValue {
    /// What kind of value this is, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            OnnxValue::Tensor(_) => "tensor",
            OnnxValue::Strings(_) => "string tensor",
            OnnxValue::Sequence(_) => "sequence",
            OnnxValue::Optional(_) => "optional",
        }
    }

    /// The tensors to feed for a graph input `name` holding this value: the tensor itself,
    /// a sequence's elements as `name[i]`, an optional's value (nothing when empty). String
    /// tensors feed nothing: the importer reads them at import.
    pub fn feeds(&self, name: &str) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        self.feeds_into(name, &mut out);
        out
    }

    fn feeds_into(&self, name: &str, out: &mut Vec<(String, Tensor)>) {
        match self {
            OnnxValue::Tensor(t) => out.push((name.to_string(), t.clone())),
            OnnxValue::Strings(_) | OnnxValue::Optional(None) => {}
            OnnxValue::Sequence(items) => {
                for (i, v) in items.iter().enumerate() {
                    v.feeds_into(&element_name(name, i), out);
                }
            }
            OnnxValue::Optional(Some(v)) => v.feeds_into(name, out),
        }
    }
}

/// How a model output is put together from the tensors the compiled graph returns.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputLayout {
    /// the graph output of this name
    Tensor(String),
    /// a value computed at import (string tensors)
    Host(OnnxValue),
    /// a sequence of these
    Sequence(Vec<OutputLayout>),
    /// an optional: empty, or this
    Optional(Option<Box<OutputLayout>>),
}

impl OutputLayout {
    /// The output's value, from the graph's outputs of one run.
    ///
    /// # Errors
    /// A graph output the layout names is missing.
    pub fn assemble(&self, outputs: &[(String, Tensor)]) -> Result<OnnxValue, String> {
        Ok(match self {
            OutputLayout::Tensor(name) => match outputs.iter().find(|(n, _)| n == name) {
                Some((_, t)) => OnnxValue::Tensor(t.clone()),
                None => return Err(format!("graph output `{name}` was not produced")),
            },
            OutputLayout::Host(v) => v.clone(),
            OutputLayout::Sequence(items) => OnnxValue::Sequence(
                items
                    .iter()
                    .map(|l| l.assemble(outputs))
                    .collect::<Result<_, _>>()?,
            ),
            OutputLayout::Optional(None) => OnnxValue::Optional(None),
            OutputLayout::Optional(Some(l)) => {
                OnnxValue::Optional(Some(Box::new(l.assemble(outputs)?)))
            }
        })
    }
}

/// The strings of a `tensor(string)` proto.
///
/// # Errors
/// A count of strings that disagrees with the dims.
pub fn to_strings(t: &TensorProto) -> Result<StringTensor, String> {
    let shape = proto_shape(t)?;
    let data: Vec<String> = t
        .string_data
        .iter()
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();
    let n = data.len();
    StringTensor::new(shape.clone(), data).ok_or_else(|| {
        format!("string_data has {n} strings, but the dims {shape:?} need another count")
    })
}

/// A tensor proto as a value: strings or numbers.
fn tensor_value(t: &TensorProto, ext: &mut ExternalData) -> Result<OnnxValue, String> {
    if t.data_type() == crate::proto::tensor_proto::DataType::String as i32 {
        return to_strings(t).map(OnnxValue::Strings);
    }
    to_tensor(t, ext).map(OnnxValue::Tensor)
}

/// A sequence proto as a value.
fn sequence_value(s: &SequenceProto, ext: &mut ExternalData) -> Result<OnnxValue, String> {
    let mut items = Vec::new();
    for t in &s.tensor_values {
        items.push(tensor_value(t, ext)?);
    }
    for q in &s.sequence_values {
        items.push(sequence_value(q, ext)?);
    }
    for o in &s.optional_values {
        items.push(optional_value(o, ext)?);
    }
    if !s.sparse_tensor_values.is_empty() || !s.map_values.is_empty() {
        return Err("sequences of sparse tensors or maps are not supported".into());
    }
    Ok(OnnxValue::Sequence(items))
}

/// An optional proto as a value.
fn optional_value(o: &OptionalProto, ext: &mut ExternalData) -> Result<OnnxValue, String> {
    let inner = if let Some(t) = &o.tensor_value {
        Some(tensor_value(t, ext)?)
    } else if let Some(s) = &o.sequence_value {
        Some(sequence_value(s, ext)?)
    } else if let Some(q) = &o.optional_value {
        Some(optional_value(q, ext)?)
    } else if o.sparse_tensor_value.is_some() || o.map_value.is_some() {
        return Err("optionals of sparse tensors or maps are not supported".into());
    } else {
        None
    };
    Ok(OnnxValue::Optional(inner.map(Box::new)))
}

/// Reads one test data file (`input_N.pb` / `output_N.pb`) holding a value of type `ty`
/// (a tensor when the model leaves the type out): its name and value.
///
/// # Errors
/// Unreadable or malformed files, unsupported element types.
pub fn load_value_pb(
    path: impl AsRef<Path>,
    ty: Option<&TypeProto>,
) -> Result<(String, OnnxValue), OnnxError> {
    let path = path.as_ref();
    let label = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| OnnxError::Io {
        path: label.clone(),
        source,
    })?;
    let bytes = Bytes::from(bytes);
    let decode_err = |e: prost::DecodeError| OnnxError::Decode {
        file: label.clone(),
        message: e.to_string(),
    };
    let mut ext = ExternalData::new(path.parent().map(Path::to_path_buf));
    let (name, value) = match ty.and_then(|t| t.value.as_ref()) {
        Some(type_proto::Value::SequenceType(_)) => {
            let s = SequenceProto::decode(bytes).map_err(decode_err)?;
            (s.name().to_string(), sequence_value(&s, &mut ext))
        }
        Some(type_proto::Value::OptionalType(_)) => {
            let o = OptionalProto::decode(bytes).map_err(decode_err)?;
            (o.name().to_string(), optional_value(&o, &mut ext))
        }
        _ => {
            let t = TensorProto::decode(bytes).map_err(decode_err)?;
            (t.name().to_string(), tensor_value(&t, &mut ext))
        }
    };
    let value = value.map_err(|message| OnnxError::Tensor {
        file: label,
        name: name.clone(),
        message,
    })?;
    Ok((name, value))
}
