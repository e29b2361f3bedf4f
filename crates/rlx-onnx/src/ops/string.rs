//! String tensors, computed on the host at import: string constants and inputs are known
//! then, and every string op folds (`StringConcat`, `StringSplit`, `StringNormalizer`,
//! `RegexFullMatch`, `Equal`, `Cast` to and from strings). Their numeric results (a
//! comparison, the numbers a string casts to) are constants of the graph. A string that
//! would have to be computed from run-time data is refused with the op that needs it.

use crate::ctx::{invalid, unsupported, Ctx, Fail, R};
use crate::data::{to_strings, StringTensor};
use crate::node::NodeIn;
use crate::value::Value;
use rlx_ir::{DType, Tensor};
use std::sync::Arc;

fn strings(v: StringTensor) -> R<Vec<Value>> {
    Ok(vec![Value::Strings(Arc::new(v))])
}

/// The string tensor in input `i`.
fn string_input(n: &NodeIn, i: usize) -> R<Arc<StringTensor>> {
    match n.value(i)? {
        Value::Strings(s) => Ok(s),
        other => invalid!("input {i} must be a string tensor, got a {}", other.kind()),
    }
}

/// Broadcasts two shapes the ONNX way; `None` when they do not agree.
fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    let dim = |s: &[usize], i: usize| {
        let pad = r - s.len();
        if i < pad {
            1
        } else {
            s[i - pad]
        }
    };
    (0..r)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// The flat index into a tensor of `shape` that element `flat` of a broadcast result of
/// `out` reads.
fn source_index(out: &[usize], shape: &[usize], mut flat: usize) -> usize {
    let pad = out.len() - shape.len();
    let mut idx = 0;
    let mut stride = 1;
    for i in (0..out.len()).rev() {
        let coord = flat % out[i];
        flat /= out[i];
        if i >= pad {
            let d = shape[i - pad];
            if d != 1 {
                idx += coord * stride;
            }
            stride *= d;
        }
    }
    idx
}

/// `f` applied elementwise to two broadcast string tensors.
fn zip_broadcast<T>(
    a: &StringTensor,
    b: &StringTensor,
    f: impl Fn(&str, &str) -> T,
) -> R<(Vec<usize>, Vec<T>)> {
    let Some(out) = broadcast(&a.shape, &b.shape) else {
        invalid!("shapes {:?} and {:?} do not broadcast", a.shape, b.shape);
    };
    let n: usize = out.iter().product();
    let v = (0..n)
        .map(|i| {
            let x = &a.data[source_index(&out, &a.shape, i)];
            let y = &b.data[source_index(&out, &b.shape, i)];
            f(x, y)
        })
        .collect();
    Ok((out, v))
}

/// `Constant` holding strings (`value` of type string, `value_string`, `value_strings`).
pub fn constant(_ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Value>> {
    if let Some(t) = n.tensor_opt("value")? {
        return strings(to_strings(t).map_err(Fail::Invalid)?);
    }
    if let Some(s) = n.string_opt("value_string")? {
        return strings(StringTensor {
            shape: vec![],
            data: vec![s],
        });
    }
    if let Some(v) = n.strings_opt("value_strings")? {
        return strings(StringTensor {
            shape: vec![v.len()],
            data: v,
        });
    }
    invalid!("a string Constant needs `value`, `value_string` or `value_strings`")
}

/// True when a `Constant` node holds strings.
pub fn is_string_constant(node: &crate::proto::NodeProto) -> bool {
    node.attribute.iter().any(|a| match a.name() {
        "value_string" | "value_strings" => true,
        "value" => a
            .t
            .as_ref()
            .is_some_and(|t| t.data_type() == crate::proto::tensor_proto::DataType::String as i32),
        _ => false,
    })
}

/// `Equal` of two string tensors: a bool tensor known at import.
pub fn equal(_ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Value>> {
    let (a, b) = (string_input(n, 0)?, string_input(n, 1)?);
    let (shape, v) = zip_broadcast(&a, &b, |x, y| if x == y { 1.0 } else { 0.0 })?;
    let t = Tensor::from_f64(DType::Bool, &shape, &v).map_err(|e| Fail::Invalid(e.to_string()))?;
    Ok(vec![crate::ctx::Val::konst(t).into()])
}

/// `StringConcat`: elementwise `x + y` with broadcasting.
pub fn string_concat(_ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Value>> {
    let (a, b) = (string_input(n, 0)?, string_input(n, 1)?);
    let (shape, data) = zip_broadcast(&a, &b, |x, y| format!("{x}{y}"))?;
    strings(StringTensor { shape, data })
}

/// Splits like Python's `str.split`: on `sep`, or on runs of whitespace (dropping empty
/// pieces) without one; at most `max` splits.
fn split_one(s: &str, sep: Option<&str>, max: Option<usize>) -> Vec<String> {
    let limit = max.map_or(usize::MAX, |m| m.saturating_add(1));
    match sep {
        Some(sep) => s.splitn(limit, sep).map(str::to_string).collect(),
        None => {
            let mut out = Vec::new();
            let mut rest = s.trim_start();
            while !rest.is_empty() {
                if out.len() + 1 == limit {
                    out.push(rest.to_string());
                    break;
                }
                let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
                out.push(rest[..end].to_string());
                rest = rest[end..].trim_start();
            }
            out
        }
    }
}

/// `StringSplit`: each string split by `delimiter` (whitespace when empty or absent) at
/// most `maxsplit` times; pieces padded with empty strings to the longest, and the counts.
pub fn string_split(_ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Value>> {
    let x = string_input(n, 0)?;
    let sep = n.string_opt("delimiter")?.filter(|s| !s.is_empty());
    let max = match n.int_opt("maxsplit")? {
        Some(m) if m < 0 => invalid!("maxsplit {m} must not be negative"),
        m => m.map(|m| m as usize),
    };
    let pieces: Vec<Vec<String>> = x
        .data
        .iter()
        .map(|s| split_one(s, sep.as_deref(), max))
        .collect();
    let width = pieces.iter().map(Vec::len).max().unwrap_or(0);
    let mut data = Vec::with_capacity(pieces.len() * width);
    for p in &pieces {
        data.extend(p.iter().cloned());
        data.extend(std::iter::repeat_n(String::new(), width - p.len()));
    }
    let mut shape = x.shape.clone();
    shape.push(width);
    let counts: Vec<f64> = pieces.iter().map(|p| p.len() as f64).collect();
    let lengths = Tensor::from_f64(DType::I64, &x.shape, &counts)
        .map_err(|e| Fail::Invalid(e.to_string()))?;
    Ok(vec![
        Value::Strings(Arc::new(StringTensor { shape, data })),
        crate::ctx::Val::konst(lengths).into(),
    ])
}

/// `StringNormalizer`: stopwords removed (compared ignoring case unless
/// `is_case_sensitive`), then `case_change_action` (`LOWER`, `UPPER`, `NONE`) applied, on
/// a `[C]` or `[1, C]` tensor; when every string is removed, one empty string remains.
pub fn string_normalizer(_ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Value>> {
    let x = string_input(n, 0)?;
    let action = n.string("case_change_action", "NONE")?;
    let sensitive = n.int("is_case_sensitive", 0)? != 0;
    n.string_opt("locale")?;
    let stops = n.strings_opt("stopwords")?.unwrap_or_default();
    let two_dim = match x.shape[..] {
        [_] => false,
        [1, _] => true,
        _ => invalid!("input must be [C] or [1, C], got {:?}", x.shape),
    };
    let is_stop = |s: &str| {
        stops.iter().any(|w| {
            if sensitive {
                w == s
            } else {
                w.to_lowercase() == s.to_lowercase()
            }
        })
    };
    let mut data: Vec<String> = Vec::with_capacity(x.data.len());
    for s in x.data.iter().filter(|s| !is_stop(s)) {
        data.push(match action.as_str() {
            "LOWER" => s.to_lowercase(),
            "UPPER" => s.to_uppercase(),
            "NONE" => s.clone(),
            other => invalid!("case_change_action `{other}` is not LOWER, UPPER or NONE"),
        });
    }
    if data.is_empty() {
        data.push(String::new());
    }
    let shape = if two_dim {
        vec![1, data.len()]
    } else {
        vec![data.len()]
    };
    strings(StringTensor { shape, data })
}

/// `RegexFullMatch`: whether each string matches `pattern` as a whole (RE2 syntax, which
/// the `regex` crate follows).
pub fn regex_full_match(_ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Value>> {
    let x = string_input(n, 0)?;
    let Some(pattern) = n.string_opt("pattern")? else {
        invalid!("attribute `pattern` is required");
    };
    let re = match regex::Regex::new(&format!("^(?:{pattern})$")) {
        Ok(re) => re,
        Err(e) => unsupported!("pattern `{pattern}` does not compile: {e}"),
    };
    let v: Vec<f64> = x
        .data
        .iter()
        .map(|s| if re.is_match(s) { 1.0 } else { 0.0 })
        .collect();
    let t =
        Tensor::from_f64(DType::Bool, &x.shape, &v).map_err(|e| Fail::Invalid(e.to_string()))?;
    Ok(vec![crate::ctx::Val::konst(t).into()])
}

/// Parses a number as ONNX's `Cast` from string does (`INF`, `-INF`, `NaN` in any case).
fn parse_number(s: &str) -> Option<f64> {
    let t = s.trim();
    match t.to_ascii_lowercase().as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => Some(f64::INFINITY),
        "-inf" | "-infinity" => Some(f64::NEG_INFINITY),
        "nan" | "+nan" | "-nan" => Some(f64::NAN),
        _ => t.parse().ok(),
    }
}

/// A number as `Cast` to string writes it.
fn format_number(v: f64, dtype: DType) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "INF" } else { "-INF" }.into()
    } else if dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16 {
        format!("{}", v as f32)
    } else {
        format!("{v}")
    }
}

/// `Cast` to or from strings: parsing and formatting at import (a numeric source must be
/// known then).
pub fn cast(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Value>> {
    let Some(to) = n.int_opt("to")? else {
        invalid!("required attribute `to` is missing");
    };
    let saturate = n.int("saturate", 1)? != 0;
    let round_mode = n.string("round_mode", "up")?;
    let string_code = crate::proto::tensor_proto::DataType::String as i64;
    match n.value(0)? {
        Value::Strings(s) if to == string_code => strings((*s).clone()),
        Value::Strings(s) => {
            let to = crate::to_dtype(to as i32).map_err(Fail::Unsupported)?;
            let mut v = Vec::with_capacity(s.data.len());
            for x in &s.data {
                match parse_number(x) {
                    Some(f) => v.push(f),
                    None => invalid!("`{x}` is not a number"),
                }
            }
            let t = Tensor::from_f64(DType::F64, &s.shape, &v)
                .map_err(|e| Fail::Invalid(e.to_string()))?;
            let x = crate::ctx::Val::konst(t);
            let y = crate::ops::elementwise::onnx_cast(ctx, &x, to, saturate, &round_mode)?;
            Ok(vec![y.into()])
        }
        Value::Tensor(x) => {
            let t = ctx.const_of(
                &x,
                "the input of a Cast to string (strings run on the host)",
            )?;
            let data = t
                .to_f64_vec()
                .into_iter()
                .map(|v| format_number(v, t.dtype()))
                .collect();
            strings(StringTensor {
                shape: t.shape().to_vec(),
                data,
            })
        }
        other => invalid!("Cast of a {}", other.kind()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_follows_python_str_split() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(split_one("  a  b c ", None, None), s(&["a", "b", "c"]));
        assert_eq!(split_one("  a  b c ", None, Some(1)), s(&["a", "b c "]));
        assert_eq!(split_one("", None, None), s(&[]));
        assert_eq!(split_one("a,,b", Some(","), None), s(&["a", "", "b"]));
        assert_eq!(split_one("a,b,c", Some(","), Some(1)), s(&["a", "b,c"]));
        assert_eq!(split_one("", Some(","), None), s(&[""]));
    }

    #[test]
    fn broadcast_indexes_like_numpy() {
        assert_eq!(broadcast(&[2, 1], &[3]), Some(vec![2, 3]));
        assert_eq!(broadcast(&[2], &[3]), None);
        // element (1, 2) of a [2, 3] result reads (1, 0) of [2, 1] and (2) of [3]
        assert_eq!(source_index(&[2, 3], &[2, 1], 5), 1);
        assert_eq!(source_index(&[2, 3], &[3], 5), 2);
        assert_eq!(source_index(&[2, 3], &[], 4), 0);
    }

    #[test]
    fn numbers_parse_and_print_as_cast_does() {
        assert_eq!(parse_number("+INF"), Some(f64::INFINITY));
        assert_eq!(parse_number("1e-5"), Some(1e-5));
        assert!(parse_number("NaN").is_some_and(f64::is_nan));
        assert_eq!(parse_number("x"), None);
        assert_eq!(format_number(0.1f32 as f64, DType::F32), "0.1");
        assert_eq!(format_number(f64::NEG_INFINITY, DType::F32), "-INF");
        assert_eq!(format_number(-3.0, DType::I64), "-3");
    }
}
