//! Shape ops: reading shapes (`Shape`, `Size`), changing them without moving data
//! (`Reshape`, `Flatten`, `Squeeze`, `Unsqueeze`) and making constants of a shape.

use crate::ctx::{invalid, unsupported, Ctx, Fail, Val, R};
use crate::node::NodeIn;
use crate::tensor::{proto_shape, to_tensor, ExternalData};
use rlx_ir::{DType, Dim, Tensor};

fn one(v: Val) -> R<Vec<Val>> {
    Ok(vec![v])
}

/// `Shape` with `start` / `end` (opset 15+).
pub fn shape(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let dims = ctx.shape(&x)?;
    let r = dims.len() as i64;
    let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
    let start = clamp(n.int("start", 0)?);
    let end = clamp(n.int("end", r)?);
    let sel: Vec<i64> = dims[start..end.max(start)]
        .iter()
        .map(|&d| d as i64)
        .collect();
    one(ctx.ints(&sel))
}

/// `Size`: the element count as an i64 scalar.
pub fn size(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let numel: usize = ctx.shape(&x)?.iter().product();
    one(ctx.scalar(DType::I64, numel as f64))
}

/// `Reshape` to a shape known at import (`0` copies a dim unless `allowzero`, `-1` infers).
pub fn reshape(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let target = ctx.const_ints(&n.input(1)?, "the target shape")?;
    let allowzero = n.int("allowzero", 0)? != 0;
    let dims = ctx.dims(&x);
    let mut out: Vec<Option<Dim>> = Vec::with_capacity(target.len());
    for (i, &t) in target.iter().enumerate() {
        out.push(match t {
            0 if !allowzero => Some(dims.get(i).cloned().ok_or_else(|| {
                Fail::Invalid(format!(
                    "shape[{i}] = 0 copies a dim past rank {}",
                    dims.len()
                ))
            })?),
            -1 => None,
            t if t < 0 => invalid!("shape {target:?} has a negative size {t}"),
            t => Some(Dim::Static(t as usize)),
        });
    }
    if out.iter().filter(|d| d.is_none()).count() > 1 {
        invalid!("shape {target:?} has more than one -1");
    }
    let resolved = if out.iter().any(|d| d.is_none()) {
        let Some(total) = ctx
            .ty(&x)
            .shape
            .as_static()
            .and_then(|d| crate::ctx::checked_numel(&d))
        else {
            // symbolic: -1 takes the dims not accounted for, when they line up
            unsupported!("reshape with -1 of a symbolic shape {}", ctx.ty(&x).shape);
        };
        let known_dims: Vec<usize> = out
            .iter()
            .flatten()
            .map(|d| d.as_static().unwrap_or(1))
            .collect();
        let known = crate::ctx::checked_numel(&known_dims).unwrap_or(0);
        if known == 0 || total % known != 0 {
            invalid!("cannot reshape {} elements into {target:?}", total);
        }
        out.into_iter()
            .map(|d| d.unwrap_or(Dim::Static(total / known)))
            .collect()
    } else {
        out.into_iter().flatten().collect()
    };
    one(ctx.reshape_dims(&x, resolved)?)
}

/// `Flatten` at `axis` into 2-D.
pub fn flatten(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let dims = ctx.shape(&x)?;
    let axis = n.int("axis", 1)?;
    let r = dims.len() as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if !(0..=r).contains(&a) {
        invalid!("axis {axis} out of range for rank {r}");
    }
    let a = a as usize;
    let outer: usize = dims[..a].iter().product();
    let inner: usize = dims[a..].iter().product();
    one(ctx.reshape(&x, &[outer, inner])?)
}

/// Axes from the attribute (old opsets) or the second input (new ones).
fn axes_arg(ctx: &mut Ctx, n: &NodeIn, input_since: i64) -> R<Option<Vec<i64>>> {
    if n.opset >= input_since {
        match n.opt(1) {
            Some(v) => Ok(Some(ctx.const_ints(&v, "axes")?)),
            None => Ok(None),
        }
    } else {
        n.ints_opt("axes")
    }
}

/// `Squeeze`: the given axes, or every size-1 dim.
pub fn squeeze(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let dims = ctx.dims(&x);
    let axes = match axes_arg(ctx, n, 13)? {
        Some(a) => ctx.axes(&a, dims.len())?,
        None => (0..dims.len())
            .filter(|&i| dims[i] == Dim::Static(1))
            .collect(),
    };
    for &a in &axes {
        if dims[a] != Dim::Static(1) {
            invalid!("cannot squeeze axis {a} of size {}", dims[a]);
        }
    }
    let out: Vec<Dim> = dims
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !axes.contains(i))
        .map(|(_, d)| d)
        .collect();
    one(ctx.reshape_dims(&x, out)?)
}

/// `Unsqueeze`: axes index the result.
pub fn unsqueeze(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let Some(axes) = axes_arg(ctx, n, 13)? else {
        invalid!("axes are required");
    };
    let rank = ctx.rank(&x) + axes.len();
    let axes = ctx.axes(&axes, rank)?;
    one(ctx.unsqueeze(&x, &axes)?)
}

/// Reads a tensor attribute (constants are small; external data is refused here).
fn attr_tensor(t: &crate::proto::TensorProto) -> R<Tensor> {
    to_tensor(t, &mut ExternalData::new(None)).map_err(Fail::Unsupported)
}

/// `Constant` from any of its value attributes.
pub fn constant(_ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let mut found = Vec::new();
    if let Some(t) = n.tensor_opt("value")? {
        found.push(attr_tensor(t)?);
    }
    if let Some(f) = n.float_opt("value_float")? {
        found.push(Tensor::scalar(DType::F32, f as f64));
    }
    if let Some(fs) = n.floats_opt("value_floats")? {
        found.push(Tensor::from_f32(&[fs.len()], fs).map_err(|e| Fail::Invalid(e.to_string()))?);
    }
    if let Some(i) = n.int_opt("value_int")? {
        found.push(Tensor::scalar(DType::I64, i as f64));
    }
    if let Some(is) = n.ints_opt("value_ints")? {
        let v: Vec<f64> = is.iter().map(|&x| x as f64).collect();
        found.push(
            Tensor::from_f64(DType::I64, &[v.len()], &v)
                .map_err(|e| Fail::Invalid(e.to_string()))?,
        );
    }
    if n.string_opt("value_string")?.is_some() || n.strings_opt("value_strings")?.is_some() {
        unsupported!("string constants (the IR has no string dtype)");
    }
    if n.proto.attribute.iter().any(|a| a.name() == "sparse_value") {
        unsupported!("sparse constants");
    }
    if found.len() != 1 {
        invalid!("needs exactly one value attribute, got {}", found.len());
    }
    one(Val::konst(found.remove(0)))
}

/// `ConstantOfShape`: a tensor of a known shape filled with `value` (f32 0 by default).
pub fn constant_of_shape(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let shape = ctx.const_ints(&n.input(0)?, "the shape")?;
    let (dtype, value) = match n.tensor_opt("value")? {
        Some(t) => {
            let t = attr_tensor(t)?;
            if t.numel() != 1 {
                invalid!("value must have one element, got {}", t.numel());
            }
            (t.dtype(), t.get_f64(0))
        }
        None => (DType::F32, 0.0),
    };
    let dims = to_dims(&shape)?;
    let s = Val::konst(Tensor::scalar(dtype, value));
    let Some(numel) = crate::ctx::checked_numel(&dims) else {
        unsupported!("shape {dims:?} has more than 2^48 elements");
    };
    if numel <= 1 << 16 {
        return one(Val::konst(Tensor::full(dtype, &dims, value)));
    }
    let r = ctx.reshape(&s, &vec![1; dims.len()])?;
    one(ctx.expand(&r, dims.into_iter().map(Dim::Static).collect())?)
}

/// Non-negative sizes.
pub fn to_dims(v: &[i64]) -> R<Vec<usize>> {
    v.iter()
        .map(|&d| usize::try_from(d).map_err(|_| Fail::Invalid(format!("negative size in {v:?}"))))
        .collect()
}

/// `EyeLike`: ones on the `k`-th diagonal of a 2-D shape.
pub fn eye_like(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let s = ctx.shape(&x)?;
    if s.len() != 2 {
        invalid!("input must be 2-D, got rank {}", s.len());
    }
    let k = n.int("k", 0)?;
    let dtype = match n.int_opt("dtype")? {
        Some(d) => crate::dtype::to_dtype(d as i32).map_err(Fail::Unsupported)?,
        None => ctx.dtype(&x),
    };
    ctx.host_alloc(s[0].checked_mul(s[1]), "EyeLike")?;
    let mut v = vec![0.0; s[0] * s[1]];
    for i in 0..s[0] {
        let j = i as i64 + k;
        if (0..s[1] as i64).contains(&j) {
            v[i * s[1] + j as usize] = 1.0;
        }
    }
    one(ctx.tensor(dtype, &s, &v)?)
}

/// `Range(start, limit, delta)`, folded at import (its length depends on the values).
pub fn range(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let mut v = Vec::new();
    for (i, what) in ["start", "limit", "delta"].iter().enumerate() {
        let t = ctx.const_of(&n.input(i)?, what)?;
        if t.numel() != 1 {
            invalid!("{what} must be a scalar");
        }
        v.push((t.dtype(), t.get_f64(0)));
    }
    let dtype = v[0].0;
    let (start, limit, delta) = (v[0].1, v[1].1, v[2].1);
    if delta == 0.0 {
        invalid!("delta is zero");
    }
    let count = ((limit - start) / delta).ceil().max(0.0);
    if count > crate::ctx::HOST_LIMIT as f64 {
        unsupported!("a range of {count} elements is too large to fold at import");
    }
    let count = count as usize;
    let vals: Vec<f64> = (0..count).map(|i| start + i as f64 * delta).collect();
    one(ctx.tensor(dtype, &[count], &vals)?)
}

/// Shape of a tensor attribute as usize (for errors in mappers that read raw protos).
pub fn attr_dims(t: &crate::proto::TensorProto) -> R<Vec<usize>> {
    proto_shape(t).map_err(Fail::Invalid)
}
