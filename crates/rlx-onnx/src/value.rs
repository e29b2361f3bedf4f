//! Values of every ONNX type during import, and how they cross the graph's boundary.
//!
//! A sequence or optional exists only in the importer: its positions and presence are
//! resolved as the model is read, so the graph it leaves behind is a plain tensor graph.
//! Its tensors are [`Val`]s like any other. String tensors are host data, computed at
//! import. A graph input of those types is declared as its tensors (`name[i]` for a
//! sequence's elements, see [`crate::element_name`]); a graph output likewise, with an
//! [`OutputLayout`] that puts it back together.

use crate::ctx::{unsupported, Ctx, Val, R};
use crate::data::{element_name, OnnxValue, OutputLayout, StringTensor};
use crate::error::{OnnxError, UnsupportedNode};
use crate::import::Slot;
use crate::proto::{type_proto, GraphProto, ValueInfoProto};
use crate::ImportOptions;
use rlx_ir::{Shape, TensorType};
use std::collections::HashMap;
use std::sync::Arc;

/// A value of any type the importer handles.
#[derive(Debug, Clone)]
pub enum Value {
    /// a tensor (a graph node or a known tensor)
    Tensor(Val),
    /// a string tensor, known at import
    Strings(Arc<StringTensor>),
    /// a sequence whose length and element positions are known at import
    Seq(Vec<Value>),
    /// an optional whose presence is known at import
    Opt(Option<Box<Value>>),
}

impl From<Val> for Value {
    fn from(v: Val) -> Value {
        Value::Tensor(v)
    }
}

impl Value {
    /// What kind of value this is, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Tensor(_) => "tensor",
            Value::Strings(_) => "string tensor",
            Value::Seq(_) => "sequence",
            Value::Opt(_) => "optional",
        }
    }

    /// The tensor, when this is one.
    pub fn tensor(&self) -> Option<&Val> {
        match self {
            Value::Tensor(v) => Some(v),
            _ => None,
        }
    }
}

/// Declares a graph input `name` holding `value` (its value given, so it may be frozen
/// where the IR needs it static): tensors become graph inputs, strings stay host data.
pub fn declare_input(ctx: &mut Ctx, name: &str, value: &OnnxValue) -> Value {
    match value {
        OnnxValue::Tensor(t) => {
            let ty = TensorType::new(t.dtype(), Shape::of(t.shape()));
            Value::Tensor(ctx.input(name, ty, Some(Arc::new(t.clone()))))
        }
        OnnxValue::Strings(s) => Value::Strings(Arc::new(s.clone())),
        OnnxValue::Sequence(items) => Value::Seq(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| declare_input(ctx, &element_name(name, i), v))
                .collect(),
        ),
        OnnxValue::Optional(v) => {
            Value::Opt(v.as_ref().map(|v| Box::new(declare_input(ctx, name, v))))
        }
    }
}

/// The kind of a graph input or output that is not a numeric tensor but a value the
/// importer resolves at import (a sequence, an optional, a string tensor); `None` for
/// tensors (and for types it refuses, which `value_type` names).
pub fn value_kind(v: &ValueInfoProto) -> Option<&'static str> {
    match v.r#type.as_ref().and_then(|t| t.value.as_ref())? {
        type_proto::Value::SequenceType(_) => Some("sequence"),
        type_proto::Value::OptionalType(_) => Some("optional"),
        type_proto::Value::TensorType(t) if t.elem_type() == 8 => Some("string tensor"),
        _ => None,
    }
}

/// Declares the graph inputs that are sequences, optionals or string tensors, from the
/// values `opts.known_values` gives them (their layout must be known at import).
pub fn declare_inputs(
    ctx: &mut Ctx,
    graph: &GraphProto,
    opts: &ImportOptions,
    scope: &mut HashMap<String, Slot>,
    file: &str,
    opset: i64,
) -> Result<(), OnnxError> {
    let mut missing = Vec::new();
    for input in &graph.input {
        let name = input.name();
        let Some(kind) = value_kind(input) else {
            continue;
        };
        if scope.contains_key(name) {
            continue; // an initializer gives it a value
        }
        match opts.known_values.get(name) {
            Some(v) => {
                let v = declare_input(ctx, name, v);
                scope.insert(name.to_string(), Slot::Val(v));
            }
            None => missing.push(UnsupportedNode {
                node: format!("graph input `{name}`"),
                domain: "ai.onnx".into(),
                op_type: "input".into(),
                opset,
                reason: format!(
                    "is a {kind}, which the importer resolves at import: give its value \
                     (ImportOptions::known_values)"
                ),
            }),
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(OnnxError::Unsupported {
            file: file.to_string(),
            nodes: missing,
        })
    }
}

/// Makes `value` the graph output(s) `name` and returns how to put it back together.
pub fn declare_output(ctx: &mut Ctx, name: &str, value: &Value) -> OutputLayout {
    match value {
        Value::Tensor(v) => {
            let id = ctx.node(v);
            ctx.graph.output(name, id);
            OutputLayout::Tensor(name.to_string())
        }
        Value::Strings(s) => OutputLayout::Host(OnnxValue::Strings((**s).clone())),
        Value::Seq(items) => OutputLayout::Sequence(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| declare_output(ctx, &element_name(name, i), v))
                .collect(),
        ),
        Value::Opt(v) => {
            OutputLayout::Optional(v.as_ref().map(|v| Box::new(declare_output(ctx, name, v))))
        }
    }
}

/// The tensor in `v`, or an error naming what it is and what needed a tensor.
///
/// # Errors
/// Unsupported when `v` is not a tensor.
pub fn expect_tensor(v: &Value, what: &str) -> R<Val> {
    match v {
        Value::Tensor(t) => Ok(t.clone()),
        Value::Strings(_) => unsupported!(
            "{what} is a string tensor; strings are computed on the host at import and cannot \
             reach the compiled graph"
        ),
        other => unsupported!("{what} is a {}, where a tensor is needed", other.kind()),
    }
}
