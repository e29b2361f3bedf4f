//! The registry of ops that take or make values other than tensors (sequences, optionals,
//! strings) and of control flow, whose subgraphs may carry them: one line per op. An op of
//! the tensor registry ([`crate::ops::lookup`]) is claimed here only when its inputs or
//! attributes are strings or other non-tensor values.

use crate::ctx::{Ctx, Fail, R};
use crate::node::NodeIn;
use crate::ops::{control, optional, sequence as seq, string as text};
use crate::proto::NodeProto;
use crate::value::Value;

/// Maps one node to the values of its outputs, of any type.
pub type ValueMapper = fn(&mut Ctx, &NodeIn) -> R<Vec<Value>>;

/// The mapper for `node` of `domain` (`ai.onnx` is the default one) when it takes or makes
/// values other than tensors, given its inputs.
pub fn lookup(domain: &str, node: &NodeProto, inputs: &[Option<Value>]) -> Option<ValueMapper> {
    if domain == "ai.onnx.ml" {
        return match node.op_type() {
            "LabelEncoder" => Some(crate::ops::label_encoder::label_encoder),
            _ => None,
        };
    }
    if domain != "ai.onnx" {
        return None;
    }
    let any_strings = inputs
        .iter()
        .flatten()
        .any(|v| matches!(v, Value::Strings(_)));
    let all_tensors = inputs.iter().flatten().all(|v| v.tensor().is_some());
    let string_code = crate::proto::tensor_proto::DataType::String as i64;
    Some(match node.op_type() {
        // sequences
        "SequenceEmpty" => seq::sequence_empty,
        "SequenceConstruct" => seq::sequence_construct,
        "SequenceInsert" => seq::sequence_insert,
        "SequenceErase" => seq::sequence_erase,
        "SequenceAt" => seq::sequence_at,
        "SequenceLength" => seq::sequence_length,
        "SplitToSequence" => seq::split_to_sequence,
        "ConcatFromSequence" => seq::concat_from_sequence,
        "SequenceMap" => seq::sequence_map,
        // optionals
        "Optional" => optional::optional,
        "OptionalHasElement" => optional::optional_has_element,
        "OptionalGetElement" => optional::optional_get_element,
        "Identity" if !all_tensors => optional::identity,
        // strings
        "StringConcat" => text::string_concat,
        "StringSplit" => text::string_split,
        "StringNormalizer" => text::string_normalizer,
        "RegexFullMatch" => text::regex_full_match,
        "Equal" if any_strings => text::equal,
        "Cast" if any_strings || int_attr(node, "to") == Some(string_code) => text::cast,
        "Constant" if text::is_string_constant(node) => text::constant,
        // control flow, whose values may be sequences or optionals
        "If" => control::if_,
        "Loop" => control::loop_,
        _ => return None,
    })
}

fn int_attr(node: &NodeProto, name: &str) -> Option<i64> {
    node.attribute
        .iter()
        .find(|a| a.name() == name)
        .map(|a| a.i())
}

/// An op's mapper: from the tensor registry, or from the registry of ops on sequences,
/// optionals and strings.
pub enum Handler {
    /// a mapper of tensors
    Tensor(crate::ops::Mapper),
    /// a mapper of values of any type
    Value(ValueMapper),
}

impl Handler {
    /// The mapper for `node` given its inputs (ops on non-tensor values first).
    pub fn find(domain: &str, node: &NodeProto, inputs: &[Option<Value>]) -> Option<Handler> {
        if let Some(f) = lookup(domain, node, inputs) {
            return Some(Handler::Value(f));
        }
        crate::ops::lookup(domain, node.op_type()).map(Handler::Tensor)
    }

    /// Maps the node; a tensor mapper given a value that is not a tensor is refused.
    pub fn run(&self, ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Value>> {
        match self {
            Handler::Value(f) => f(ctx, n),
            Handler::Tensor(f) => {
                for (i, v) in n.inputs.iter().enumerate() {
                    if let Some(v) = v.as_ref().filter(|v| v.tensor().is_none()) {
                        let input = n.proto.input.get(i).map_or("", |s| s.as_str());
                        return Err(Fail::Unsupported(format!(
                            "input `{input}` is a {}, which `{}` does not take{}",
                            v.kind(),
                            n.op_type(),
                            if matches!(v, Value::Strings(_)) {
                                " (strings are computed on the host at import and cannot \
                                 reach the compiled graph)"
                            } else {
                                ""
                            }
                        )));
                    }
                }
                Ok(f(ctx, n)?.into_iter().map(Value::from).collect())
            }
        }
    }
}
