//! `ai.onnx.ml` `LabelEncoder`: a lookup table from keys to values (a tokenizer's
//! vocabulary, a class-name map). Strings and known inputs are looked up on the host at
//! import; a numeric input known only at run time becomes a chain of `where(x == key)`
//! selects, for tables of up to `MAX_GRAPH_KEYS` (64) keys.

use crate::ctx::{invalid, unsupported, Ctx, Fail, Val, R};
use crate::data::{to_strings, StringTensor};
use crate::node::NodeIn;
use crate::tensor::{to_tensor, ExternalData};
use crate::value::Value;
use rlx_ir::{BinaryOp, DType, Tensor};
use std::sync::Arc;

/// Largest table mapped into the graph (one compare and select per key).
const MAX_GRAPH_KEYS: usize = 64;

/// Keys or values of the table: numbers of a dtype, or strings.
#[derive(Debug, Clone, PartialEq)]
enum Column {
    Numbers(DType, Vec<f64>),
    Strings(Vec<String>),
}

impl Column {
    fn len(&self) -> usize {
        match self {
            Column::Numbers(_, v) => v.len(),
            Column::Strings(v) => v.len(),
        }
    }
}

/// A tensor attribute as a column.
fn tensor_column(t: &crate::proto::TensorProto) -> R<Column> {
    if t.data_type() == crate::proto::tensor_proto::DataType::String as i32 {
        return Ok(Column::Strings(to_strings(t).map_err(Fail::Invalid)?.data));
    }
    let t = to_tensor(t, &mut ExternalData::new(None)).map_err(Fail::Unsupported)?;
    Ok(Column::Numbers(t.dtype(), t.to_f64_vec()))
}

/// The column given by `{prefix}_int64s`, `_floats`, `_strings` or `_tensor`.
fn column(n: &NodeIn, prefix: &str) -> R<Option<Column>> {
    let mut found = Vec::new();
    if let Some(v) = n.ints_opt(&format!("{prefix}_int64s"))? {
        found.push(Column::Numbers(
            DType::I64,
            v.iter().map(|&x| x as f64).collect(),
        ));
    }
    if let Some(v) = n.floats_opt(&format!("{prefix}_floats"))? {
        found.push(Column::Numbers(
            DType::F32,
            v.iter().map(|&x| x as f64).collect(),
        ));
    }
    if let Some(v) = n.strings_opt(&format!("{prefix}_strings"))? {
        found.push(Column::Strings(v));
    }
    if let Some(t) = n.tensor_opt(&format!("{prefix}_tensor"))? {
        found.push(tensor_column(t)?);
    }
    if found.len() > 1 {
        invalid!("more than one `{prefix}_*` attribute");
    }
    Ok(found.pop())
}

/// The default for values like `values`: `default_tensor`, or the typed attribute
/// (`-1`, `-0.0`, `_Unused` when absent).
fn default(n: &NodeIn, values: &Column) -> R<Column> {
    let t = n.tensor_opt("default_tensor")?;
    let int = n.int_opt("default_int64")?;
    let float = n.float_opt("default_float")?;
    let string = n.string_opt("default_string")?;
    if let Some(t) = t {
        let c = tensor_column(t)?;
        if c.len() != 1 {
            invalid!("default_tensor must hold one value");
        }
        return Ok(c);
    }
    Ok(match values {
        Column::Numbers(DType::I64, _) => {
            Column::Numbers(DType::I64, vec![int.unwrap_or(-1) as f64])
        }
        Column::Numbers(d, _) => Column::Numbers(*d, vec![float.map_or(-0.0, |f| f as f64)]),
        Column::Strings(_) => Column::Strings(vec![string.unwrap_or_else(|| "_Unused".into())]),
    })
}

/// Position of a number among numeric keys (NaN finds NaN).
fn find_number(keys: &[f64], x: f64) -> Option<usize> {
    keys.iter()
        .position(|&k| k == x || (k.is_nan() && x.is_nan()))
}

/// `LabelEncoder` (ai.onnx.ml 2 to 4).
pub fn label_encoder(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Value>> {
    let (Some(keys), Some(values)) = (column(n, "keys")?, column(n, "values")?) else {
        invalid!("LabelEncoder needs keys and values");
    };
    if keys.len() != values.len() {
        invalid!("{} keys for {} values", keys.len(), values.len());
    }
    let fallback = default(n, &values)?;
    // picks, per input element, the index of its key (None: the default)
    let (shape, picks): (Vec<usize>, Vec<Option<usize>>) = match (n.value(0)?, &keys) {
        (Value::Strings(s), Column::Strings(k)) => (
            s.shape.clone(),
            s.data
                .iter()
                .map(|x| k.iter().position(|y| y == x))
                .collect(),
        ),
        (Value::Tensor(x), Column::Numbers(_, k)) => match ctx.try_const(&x) {
            Some(t) => (
                t.shape().to_vec(),
                t.to_f64_vec()
                    .into_iter()
                    .map(|v| find_number(k, v))
                    .collect(),
            ),
            None => return in_graph(ctx, &x, k, &values, &fallback),
        },
        (x, _) => invalid!("a {} input for keys of another type", x.kind()),
    };
    Ok(vec![match (&values, &fallback) {
        (Column::Strings(v), Column::Strings(d)) => {
            let data = picks
                .iter()
                .map(|p| p.map_or(d[0].clone(), |i| v[i].clone()))
                .collect();
            Value::Strings(Arc::new(StringTensor { shape, data }))
        }
        (Column::Numbers(dt, v), Column::Numbers(_, d)) => {
            let data: Vec<f64> = picks.iter().map(|p| p.map_or(d[0], |i| v[i])).collect();
            let t =
                Tensor::from_f64(*dt, &shape, &data).map_err(|e| Fail::Invalid(e.to_string()))?;
            Val::konst(t).into()
        }
        _ => invalid!("the default's type differs from the values'"),
    }])
}

/// The table as graph ops over a run-time numeric input: `where(x == key, value, ...)`.
fn in_graph(
    ctx: &mut Ctx,
    x: &Val,
    keys: &[f64],
    values: &Column,
    fallback: &Column,
) -> R<Vec<Value>> {
    let (Column::Numbers(dt, v), Column::Numbers(_, d)) = (values, fallback) else {
        unsupported!("string values for an input known only at run time (strings run on the host)");
    };
    if keys.len() > MAX_GRAPH_KEYS {
        unsupported!(
            "a table of {} keys over an input known only at run time (at most {MAX_GRAPH_KEYS})",
            keys.len()
        );
    }
    let dims = ctx.dims(x);
    let mut out = ctx.scalar(*dt, d[0]);
    out = ctx.expand(&out, dims)?;
    for (k, v) in keys.iter().zip(v) {
        let key = ctx.scalar_like(x, *k);
        let hit = ctx.binary(BinaryOp::Eq, x, &key)?;
        let val = ctx.scalar(*dt, *v);
        out = ctx.where_(&hit, &val, &out)?;
    }
    Ok(vec![out.into()])
}
