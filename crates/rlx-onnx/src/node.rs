//! One ONNX node as the op mappers see it: inputs resolved to [`Value`]s, typed attribute
//! getters that remember which attributes were read (so an attribute nobody read is
//! reported, never silently ignored), and the node's opset version.

use crate::ctx::{invalid, Val, R};
use crate::import::Slot;
use crate::proto::{
    attribute_proto::AttributeType, AttributeProto, GraphProto, NodeProto, TensorProto, TypeProto,
};
use crate::value::{expect_tensor, Value};
use std::cell::RefCell;
use std::collections::HashMap;
use std::collections::HashSet;

/// A node being mapped.
pub struct NodeIn<'a> {
    /// the node
    pub proto: &'a NodeProto,
    /// its display name
    pub name: String,
    /// opset version of its domain
    pub opset: i64,
    /// inputs; `None` for omitted optional inputs
    pub inputs: Vec<Option<Value>>,
    /// the names visible to the node, for subgraphs of control flow
    pub env: Env<'a>,
    read: RefCell<HashSet<String>>,
}

/// What a node's subgraphs see: the enclosing names, the model's opsets, the file.
#[derive(Clone, Copy)]
pub struct Env<'a> {
    /// names bound so far in the enclosing graph(s)
    pub scope: &'a HashMap<String, Slot>,
    /// imported opsets by domain
    pub opsets: &'a HashMap<String, i64>,
    /// the model file, for errors
    pub file: &'a str,
}

impl<'a> NodeIn<'a> {
    /// A node with resolved inputs.
    pub fn new(
        proto: &'a NodeProto,
        name: String,
        opset: i64,
        inputs: Vec<Option<Value>>,
        env: Env<'a>,
    ) -> Self {
        let mut read = HashSet::new();
        if opset < 6 {
            // An in-place memory hint of opsets 1 to 5 with no effect on values.
            read.insert("consumed_inputs".to_string());
        }
        NodeIn {
            proto,
            name,
            opset,
            inputs,
            env,
            read: RefCell::new(read),
        }
    }

    /// The op type, e.g. `Conv`.
    pub fn op_type(&self) -> &str {
        self.proto.op_type()
    }

    /// Required tensor input `i`.
    ///
    /// # Errors
    /// Invalid when the input is missing, unsupported when it is not a tensor.
    pub fn input(&self, i: usize) -> R<Val> {
        expect_tensor(&self.value(i)?, &format!("input {i}"))
    }

    /// Optional tensor input `i` (the import hands tensor mappers tensors only).
    pub fn opt(&self, i: usize) -> Option<Val> {
        self.value_opt(i)?.tensor().cloned()
    }

    /// Required input `i`, of any type.
    ///
    /// # Errors
    /// Invalid when the input is missing.
    pub fn value(&self, i: usize) -> R<Value> {
        match self.value_opt(i) {
            Some(v) => Ok(v),
            None => invalid!("input {i} is required but missing"),
        }
    }

    /// Optional input `i`, of any type.
    pub fn value_opt(&self, i: usize) -> Option<Value> {
        self.inputs.get(i).cloned().flatten()
    }

    /// Number of input slots (including omitted ones).
    pub fn n_inputs(&self) -> usize {
        self.inputs.len()
    }

    /// Number of output slots.
    pub fn n_outputs(&self) -> usize {
        self.proto.output.len()
    }

    /// True when output `i` exists and is named (so some consumer wants it).
    pub fn wants(&self, i: usize) -> bool {
        self.proto.output.get(i).is_some_and(|n| !n.is_empty())
    }

    fn attr(&self, name: &str) -> Option<&'a AttributeProto> {
        let a = self.proto.attribute.iter().find(|a| a.name() == name)?;
        self.read.borrow_mut().insert(name.to_string());
        Some(a)
    }

    fn typed(&self, name: &str, want: AttributeType) -> R<Option<&'a AttributeProto>> {
        let Some(a) = self.attr(name) else {
            return Ok(None);
        };
        if a.r#type() != want && a.r#type() != AttributeType::Undefined {
            invalid!(
                "attribute `{name}` has type {:?}, expected {:?}",
                a.r#type(),
                want
            );
        }
        Ok(Some(a))
    }

    /// An int attribute, if present.
    pub fn int_opt(&self, name: &str) -> R<Option<i64>> {
        Ok(self.typed(name, AttributeType::Int)?.map(|a| a.i()))
    }

    /// An int attribute with a default.
    pub fn int(&self, name: &str, default: i64) -> R<i64> {
        Ok(self.int_opt(name)?.unwrap_or(default))
    }

    /// A float attribute, if present.
    pub fn float_opt(&self, name: &str) -> R<Option<f32>> {
        Ok(self.typed(name, AttributeType::Float)?.map(|a| a.f()))
    }

    /// A float attribute with a default.
    pub fn float(&self, name: &str, default: f32) -> R<f32> {
        Ok(self.float_opt(name)?.unwrap_or(default))
    }

    /// A string attribute, if present.
    pub fn string_opt(&self, name: &str) -> R<Option<String>> {
        Ok(self
            .typed(name, AttributeType::String)?
            .map(|a| String::from_utf8_lossy(a.s()).into_owned()))
    }

    /// A string attribute with a default.
    pub fn string(&self, name: &str, default: &str) -> R<String> {
        Ok(self
            .string_opt(name)?
            .unwrap_or_else(|| default.to_string()))
    }

    /// An ints attribute, if present.
    pub fn ints_opt(&self, name: &str) -> R<Option<Vec<i64>>> {
        Ok(self
            .typed(name, AttributeType::Ints)?
            .map(|a| a.ints.clone()))
    }

    /// A floats attribute, if present.
    pub fn floats_opt(&self, name: &str) -> R<Option<Vec<f32>>> {
        Ok(self
            .typed(name, AttributeType::Floats)?
            .map(|a| a.floats.clone()))
    }

    /// A strings attribute, if present.
    pub fn strings_opt(&self, name: &str) -> R<Option<Vec<String>>> {
        Ok(self.typed(name, AttributeType::Strings)?.map(|a| {
            a.strings
                .iter()
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        }))
    }

    /// A tensor attribute, if present.
    pub fn tensor_opt(&self, name: &str) -> R<Option<&'a TensorProto>> {
        Ok(self
            .typed(name, AttributeType::Tensor)?
            .and_then(|a| a.t.as_ref()))
    }

    /// A graph attribute, if present.
    pub fn graph_opt(&self, name: &str) -> R<Option<&'a GraphProto>> {
        Ok(self
            .typed(name, AttributeType::Graph)?
            .and_then(|a| a.g.as_ref()))
    }

    /// A type attribute (`Optional`'s `type`), if present.
    pub fn type_opt(&self, name: &str) -> R<Option<&'a TypeProto>> {
        Ok(self
            .typed(name, AttributeType::TypeProto)?
            .and_then(|a| a.tp.as_ref()))
    }

    /// Names of attributes present on the node that no mapper read.
    pub fn unread(&self) -> Vec<String> {
        let read = self.read.borrow();
        self.proto
            .attribute
            .iter()
            .map(|a| a.name().to_string())
            .filter(|n| !read.contains(n))
            .collect()
    }
}
