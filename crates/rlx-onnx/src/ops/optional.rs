//! Optional values, resolved at import: whether an optional holds a value is known as the
//! model is read (`Value::Opt`), so `OptionalHasElement` folds to a constant and an `If`
//! on it takes one branch. Also `Identity` of values that are not tensors.

use crate::ctx::{invalid, Ctx, R};
use crate::node::NodeIn;
use crate::value::Value;
use rlx_ir::DType;

/// `Optional`: the input wrapped, or an empty optional of the `type` attribute's type.
pub fn optional(_ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Value>> {
    let ty = n.type_opt("type")?;
    let v = n.value_opt(0);
    if v.is_none() && ty.is_none() {
        invalid!("an empty Optional needs the `type` attribute");
    }
    Ok(vec![Value::Opt(v.map(Box::new))])
}

/// `OptionalHasElement`: true when the input holds a value (a plain tensor or sequence
/// does; a missing input does not), a bool scalar known at import.
pub fn optional_has_element(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Value>> {
    let has = match n.value_opt(0) {
        Some(Value::Opt(v)) => v.is_some(),
        Some(_) => true,
        None => false,
    };
    Ok(vec![ctx
        .scalar(DType::Bool, if has { 1.0 } else { 0.0 })
        .into()])
}

/// `OptionalGetElement`: the value an optional holds (a plain tensor or sequence is its
/// own value).
pub fn optional_get_element(_ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Value>> {
    match n.value(0)? {
        Value::Opt(Some(v)) => Ok(vec![*v]),
        Value::Opt(None) => invalid!("OptionalGetElement of an empty optional"),
        v => Ok(vec![v]),
    }
}

/// `Identity` of a sequence, optional or string tensor: the value itself.
pub fn identity(_ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Value>> {
    Ok(vec![n.value(0)?])
}
