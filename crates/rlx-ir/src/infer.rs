//! Shape and dtype inference: one rule per op. Errors are plain sentences; the graph wraps
//! them with the node name, op and input types.

use crate::op::{slice_range, AttnMask, Op, PoolKind};
use crate::shape::broadcast_shapes;
use crate::{DType, Dim, Shape, TensorType};

/// Infers the result type of `op` applied to inputs of the given types.
///
/// # Errors
/// A sentence saying which rule the inputs break (arity, dtype, rank or dim mismatch).
pub fn infer(op: &Op, inputs: &[&TensorType]) -> Result<TensorType, String> {
    let arity = |lo: usize, hi: usize| -> Result<(), String> {
        if inputs.len() < lo || inputs.len() > hi {
            if lo == hi {
                Err(format!("expects {lo} inputs, got {}", inputs.len()))
            } else {
                Err(format!("expects {lo} to {hi} inputs, got {}", inputs.len()))
            }
        } else {
            Ok(())
        }
    };
    let moves_only = matches!(
        op,
        Op::Cast(_)
            | Op::BitCast(_)
            | Op::Where
            | Op::Reshape(_)
            | Op::Transpose(_)
            | Op::Slice { .. }
            | Op::Concat { .. }
            | Op::Gather { .. }
            | Op::Expand(_)
            | Op::Pad { .. }
    );
    if let Some(t) = inputs.iter().find(|t| t.dtype.is_narrow()) {
        if !moves_only {
            return Err(format!(
                "dtype {} is storage only (cast it to compute on it)",
                t.dtype
            ));
        }
    }
    match op {
        Op::Input { .. } | Op::Param { .. } => {
            Err("inputs and params declare their type; nothing to infer".into())
        }
        Op::Constant(t) => {
            arity(0, 0)?;
            Ok(TensorType::new(t.dtype(), Shape::of(t.shape())))
        }
        Op::Unary(u) => {
            arity(1, 1)?;
            let x = inputs[0];
            if !u.accepts(x.dtype) {
                return Err(format!("does not accept dtype {}", x.dtype));
            }
            Ok(x.clone())
        }
        Op::Binary(b) => {
            arity(2, 2)?;
            let (x, y) = (inputs[0], inputs[1]);
            if x.dtype != y.dtype {
                return Err(format!("operand dtypes differ: {} vs {}", x.dtype, y.dtype));
            }
            if !b.accepts(x.dtype) {
                return Err(format!("does not accept dtype {}", x.dtype));
            }
            let shape = broadcast(&x.shape, &y.shape)?;
            Ok(TensorType::new(b.result_dtype(x.dtype), shape))
        }
        Op::Where => {
            arity(3, 3)?;
            let (c, x, y) = (inputs[0], inputs[1], inputs[2]);
            if c.dtype != DType::Bool {
                return Err(format!("condition must be bool, got {}", c.dtype));
            }
            if x.dtype != y.dtype {
                return Err(format!("branch dtypes differ: {} vs {}", x.dtype, y.dtype));
            }
            let s = broadcast(&broadcast(&c.shape, &x.shape)?, &y.shape)?;
            Ok(TensorType::new(x.dtype, s))
        }
        Op::Cast(to) => {
            arity(1, 1)?;
            Ok(TensorType::new(*to, inputs[0].shape.clone()))
        }
        Op::BitCast(to) => {
            arity(1, 1)?;
            let from = inputs[0].dtype;
            if from.bits() != to.bits() || from.bits() < 8 {
                return Err(format!(
                    "cannot reinterpret {from} ({} bits) as {to} ({} bits)",
                    from.bits(),
                    to.bits()
                ));
            }
            Ok(TensorType::new(*to, inputs[0].shape.clone()))
        }
        Op::Reduce {
            op: _,
            axes,
            keepdims,
        } => {
            arity(1, 1)?;
            let x = inputs[0];
            check_axes(axes, x.shape.rank())?;
            let dims = x
                .shape
                .dims()
                .iter()
                .enumerate()
                .filter_map(|(i, d)| {
                    if axes.contains(&i) {
                        keepdims.then_some(Dim::Static(1))
                    } else {
                        Some(d.clone())
                    }
                })
                .collect();
            Ok(TensorType::new(x.dtype, Shape(dims)))
        }
        Op::ArgReduce { axis, keepdims, .. } => {
            arity(1, 1)?;
            let x = inputs[0];
            check_axes(&[*axis], x.shape.rank())?;
            let mut dims = x.shape.0.clone();
            if *keepdims {
                dims[*axis] = Dim::Static(1);
            } else {
                dims.remove(*axis);
            }
            Ok(TensorType::new(DType::I64, Shape(dims)))
        }
        Op::Softmax { axis } | Op::LogSoftmax { axis } => {
            arity(1, 1)?;
            float_only(inputs[0].dtype)?;
            check_axes(&[*axis], inputs[0].shape.rank())?;
            Ok(inputs[0].clone())
        }
        Op::LayerNorm { axis, .. } | Op::RmsNorm { axis, .. } => {
            let is_ln = matches!(op, Op::LayerNorm { .. });
            if is_ln {
                arity(3, 3)?;
            } else {
                arity(2, 2)?;
            }
            let x = inputs[0];
            float_only(x.dtype)?;
            check_axes(&[*axis], x.shape.rank())?;
            let norm = Shape(x.shape.0[*axis..].to_vec());
            for p in &inputs[1..] {
                if p.dtype != x.dtype {
                    return Err(format!(
                        "scale/bias dtype {} differs from x {}",
                        p.dtype, x.dtype
                    ));
                }
                if broadcast(&p.shape, &norm).ok().as_ref() != Some(&norm) {
                    return Err(format!(
                        "scale/bias shape {} does not broadcast to normalized shape {norm}",
                        p.shape
                    ));
                }
            }
            Ok(x.clone())
        }
        Op::MatMul => {
            arity(2, 2)?;
            let (a, b) = (inputs[0], inputs[1]);
            if a.dtype != b.dtype {
                return Err(format!("operand dtypes differ: {} vs {}", a.dtype, b.dtype));
            }
            if a.dtype == DType::Bool {
                return Err("does not accept bool".into());
            }
            if a.shape.rank() < 2 || b.shape.rank() < 2 {
                return Err("operands need rank >= 2 (reshape vectors first)".into());
            }
            let (ra, rb) = (a.shape.rank(), b.shape.rank());
            let k1 = &a.shape.0[ra - 1];
            let k2 = &b.shape.0[rb - 2];
            if k1 != k2 {
                return Err(format!("inner dims differ: {k1} vs {k2}"));
            }
            let batch = broadcast(
                &Shape(a.shape.0[..ra - 2].to_vec()),
                &Shape(b.shape.0[..rb - 2].to_vec()),
            )?;
            let mut dims = batch.0;
            dims.push(a.shape.0[ra - 2].clone());
            dims.push(b.shape.0[rb - 1].clone());
            Ok(TensorType::new(a.dtype, Shape(dims)))
        }
        Op::Conv2d(p) => {
            arity(2, 3)?;
            let (x, w) = (inputs[0], inputs[1]);
            float_only(x.dtype)?;
            if w.dtype != x.dtype {
                return Err(format!(
                    "weight dtype {} differs from x {}",
                    w.dtype, x.dtype
                ));
            }
            if x.shape.rank() != 4 || w.shape.rank() != 4 {
                return Err("x and w must be rank 4 (NCHW, OIHW)".into());
            }
            if p.groups == 0 || p.stride.contains(&0) || p.dilation.contains(&0) {
                return Err("groups, strides and dilations must be positive".into());
            }
            let ws = w.shape.as_static().ok_or("weight shape must be static")?;
            let (o, ci_g, kh, kw) = (ws[0], ws[1], ws[2], ws[3]);
            if let Some(c) = x.shape.0[1].as_static() {
                if c != ci_g * p.groups {
                    return Err(format!(
                        "x has {c} channels but weight expects {ci_g} x {} groups",
                        p.groups
                    ));
                }
            }
            if o % p.groups != 0 {
                return Err(format!(
                    "{o} output channels not divisible by {} groups",
                    p.groups
                ));
            }
            if let Some(b) = inputs.get(2) {
                if b.shape != Shape::of(&[o]) || b.dtype != x.dtype {
                    return Err(format!("bias must be {}[{o}], got {b}", x.dtype));
                }
            }
            let h = conv_out(
                &x.shape.0[2],
                kh,
                p.stride[0],
                p.pads[0],
                p.pads[2],
                p.dilation[0],
                false,
            )?;
            let wd = conv_out(
                &x.shape.0[3],
                kw,
                p.stride[1],
                p.pads[1],
                p.pads[3],
                p.dilation[1],
                false,
            )?;
            Ok(TensorType::new(
                x.dtype,
                Shape(vec![x.shape.0[0].clone(), Dim::Static(o), h, wd]),
            ))
        }
        Op::Pool2d(p) => {
            arity(1, 1)?;
            let x = inputs[0];
            float_only(x.dtype)?;
            if x.shape.rank() != 4 {
                return Err("x must be rank 4 (NCHW)".into());
            }
            if p.kernel.contains(&0) || p.stride.contains(&0) || p.dilation.contains(&0) {
                return Err("kernel, strides and dilations must be positive".into());
            }
            if p.pads[0] >= p.kernel[0] * p.dilation[0] || p.pads[1] >= p.kernel[1] * p.dilation[1]
            {
                return Err("padding must be smaller than the window".into());
            }
            let h = conv_out(
                &x.shape.0[2],
                p.kernel[0],
                p.stride[0],
                p.pads[0],
                p.pads[2],
                p.dilation[0],
                p.ceil_mode,
            )?;
            let w = conv_out(
                &x.shape.0[3],
                p.kernel[1],
                p.stride[1],
                p.pads[1],
                p.pads[3],
                p.dilation[1],
                p.ceil_mode,
            )?;
            Ok(TensorType::new(
                x.dtype,
                Shape(vec![x.shape.0[0].clone(), x.shape.0[1].clone(), h, w]),
            ))
        }
        Op::GlobalPool(_kind) => {
            arity(1, 1)?;
            let x = inputs[0];
            float_only(x.dtype)?;
            if x.shape.rank() < 3 {
                return Err("x must be rank >= 3 (N, C, spatial...)".into());
            }
            let mut dims = x.shape.0.clone();
            for d in dims.iter_mut().skip(2) {
                *d = Dim::Static(1);
            }
            let _ = PoolKind::Max;
            Ok(TensorType::new(x.dtype, Shape(dims)))
        }
        Op::Reshape(target) => {
            arity(1, 1)?;
            let x = inputs[0];
            if x.shape.symbolic_numel() != target.symbolic_numel() {
                return Err(format!(
                    "cannot reshape {} into {target}: element counts differ",
                    x.shape
                ));
            }
            Ok(TensorType::new(x.dtype, target.clone()))
        }
        Op::Transpose(perm) => {
            arity(1, 1)?;
            let x = inputs[0];
            let mut seen = vec![false; x.shape.rank()];
            if perm.len() != x.shape.rank()
                || perm
                    .iter()
                    .any(|&p| p >= seen.len() || std::mem::replace(&mut seen[p], true))
            {
                return Err(format!(
                    "perm {perm:?} is not a permutation of rank {}",
                    x.shape.rank()
                ));
            }
            Ok(TensorType::new(
                x.dtype,
                Shape(perm.iter().map(|&p| x.shape.0[p].clone()).collect()),
            ))
        }
        Op::Slice {
            axes,
            starts,
            ends,
            steps,
        } => {
            arity(1, 1)?;
            let x = inputs[0];
            if axes.len() != starts.len() || axes.len() != ends.len() || axes.len() != steps.len() {
                return Err("axes, starts, ends and steps must have equal lengths".into());
            }
            check_axes_unsorted(axes, x.shape.rank())?;
            let mut dims = x.shape.0.clone();
            for (i, &a) in axes.iter().enumerate() {
                if steps[i] == 0 {
                    return Err(format!("step of axis {a} is zero"));
                }
                dims[a] = match &dims[a] {
                    Dim::Static(n) => Dim::Static(slice_range(*n, starts[i], ends[i], steps[i]).1),
                    sym => {
                        if starts[i] == 0 && ends[i] >= i32::MAX as i64 && steps[i] == 1 {
                            sym.clone()
                        } else {
                            return Err(format!(
                                "cannot slice symbolic dim {sym} partially; bind it first"
                            ));
                        }
                    }
                };
            }
            Ok(TensorType::new(x.dtype, Shape(dims)))
        }
        Op::Concat { axis } => {
            if inputs.is_empty() {
                return Err("expects at least 1 input".into());
            }
            let first = inputs[0];
            check_axes(&[*axis], first.shape.rank())?;
            let mut total = 0usize;
            let mut sym: Option<Dim> = None;
            for t in inputs {
                if t.dtype != first.dtype || t.shape.rank() != first.shape.rank() {
                    return Err(format!("inputs disagree: {first} vs {t}"));
                }
                for (i, (a, b)) in t.shape.0.iter().zip(&first.shape.0).enumerate() {
                    if i != *axis && a != b {
                        return Err(format!(
                            "inputs disagree off the concat axis: {first} vs {t}"
                        ));
                    }
                }
                match &t.shape.0[*axis] {
                    Dim::Static(n) => total += n,
                    d => {
                        if sym.is_some() || inputs.len() > 1 {
                            return Err(format!(
                                "cannot concat along symbolic dim {d}; bind it first"
                            ));
                        }
                        sym = Some(d.clone());
                    }
                }
            }
            let mut dims = first.shape.0.clone();
            dims[*axis] = sym.unwrap_or(Dim::Static(total));
            Ok(TensorType::new(first.dtype, Shape(dims)))
        }
        Op::Gather { axis } => {
            arity(2, 2)?;
            let (d, idx) = (inputs[0], inputs[1]);
            if !matches!(idx.dtype, DType::I32 | DType::I64) {
                return Err(format!("indices must be i32 or i64, got {}", idx.dtype));
            }
            check_axes(&[*axis], d.shape.rank())?;
            let mut dims = d.shape.0[..*axis].to_vec();
            dims.extend(idx.shape.0.iter().cloned());
            dims.extend(d.shape.0[*axis + 1..].iter().cloned());
            Ok(TensorType::new(d.dtype, Shape(dims)))
        }
        Op::Expand(target) => {
            arity(1, 1)?;
            let x = inputs[0];
            let s = broadcast(&x.shape, target)?;
            Ok(TensorType::new(x.dtype, s))
        }
        Op::Pad { pads, mode } => {
            arity(1, 1)?;
            let x = inputs[0];
            if pads.len() != x.shape.rank() {
                return Err(format!(
                    "{} pad pairs for rank {}",
                    pads.len(),
                    x.shape.rank()
                ));
            }
            let mut dims = Vec::new();
            for (d, &(b, a)) in x.shape.0.iter().zip(pads) {
                dims.push(match d {
                    Dim::Static(n) => {
                        if !matches!(mode, crate::PadMode::Constant(_)) && (b > 0 || a > 0) {
                            let limit = if matches!(mode, crate::PadMode::Reflect) {
                                n.saturating_sub(1)
                            } else if *n == 0 {
                                0
                            } else {
                                usize::MAX
                            };
                            if b > limit || a > limit {
                                return Err(format!(
                                    "pad ({b}, {a}) too large for dim {n} in {mode:?} mode"
                                ));
                            }
                        }
                        Dim::Static(n + b + a)
                    }
                    s if b == 0 && a == 0 => s.clone(),
                    s => return Err(format!("cannot pad symbolic dim {s}; bind it first")),
                });
            }
            Ok(TensorType::new(x.dtype, Shape(dims)))
        }
        Op::Attention { mask, .. } => {
            if *mask == AttnMask::Additive {
                arity(4, 4)?;
            } else {
                arity(3, 3)?;
            }
            let (q, k, v) = (inputs[0], inputs[1], inputs[2]);
            float_only(q.dtype)?;
            if k.dtype != q.dtype || v.dtype != q.dtype {
                return Err("q, k, v dtypes differ".into());
            }
            let r = q.shape.rank();
            if r < 2 || k.shape.rank() != r || v.shape.rank() != r {
                return Err("q, k, v must have the same rank >= 2".into());
            }
            if q.shape.0[r - 1] != k.shape.0[r - 1] {
                return Err(format!(
                    "q and k head sizes differ: {} vs {}",
                    q.shape.0[r - 1],
                    k.shape.0[r - 1]
                ));
            }
            if k.shape.0[r - 2] != v.shape.0[r - 2] {
                return Err("k and v sequence lengths differ".into());
            }
            let batch = broadcast(
                &broadcast(
                    &Shape(q.shape.0[..r - 2].to_vec()),
                    &Shape(k.shape.0[..r - 2].to_vec()),
                )?,
                &Shape(v.shape.0[..r - 2].to_vec()),
            )?;
            let mut dims = batch.0;
            dims.push(q.shape.0[r - 2].clone());
            dims.push(v.shape.0[r - 1].clone());
            if let Some(m) = inputs.get(3) {
                if m.dtype != q.dtype {
                    return Err(format!("mask dtype {} differs from q {}", m.dtype, q.dtype));
                }
                let mut scores = dims.clone();
                scores[r - 1] = k.shape.0[r - 2].clone();
                let scores = Shape(scores);
                if broadcast(&m.shape, &scores).ok().as_ref() != Some(&scores) {
                    return Err(format!(
                        "mask {} does not broadcast to scores {scores}",
                        m.shape
                    ));
                }
            }
            Ok(TensorType::new(q.dtype, Shape(dims)))
        }
        Op::QuantMatMul { format, n, k, .. } => {
            arity(2, 2)?;
            let (x, w) = (inputs[0], inputs[1]);
            if x.dtype != DType::F32 {
                return Err(format!("activations must be f32, got {}", x.dtype));
            }
            if w.dtype != DType::U8 {
                return Err(format!("packed weights must be u8, got {}", w.dtype));
            }
            if *n == 0 || *k == 0 {
                return Err("n and k must be positive".into());
            }
            let bytes = format
                .bytes_for(*k)
                .and_then(|row| row.checked_mul(*n))
                .ok_or_else(|| {
                    format!(
                        "k = {k} is not a whole number of {format} blocks of {}",
                        format.block()
                    )
                })?;
            if w.shape != Shape::of(&[bytes]) {
                return Err(format!(
                    "packed weights must be u8[{bytes}] ({n} rows of {k} {format} values), got {}",
                    w.shape
                ));
            }
            let r = x.shape.rank();
            if r < 1 {
                return Err("activations need rank >= 1".into());
            }
            if x.shape.0[r - 1] != Dim::Static(*k) {
                return Err(format!(
                    "activations' last dim is {}, expected k = {k}",
                    x.shape.0[r - 1]
                ));
            }
            let mut dims = x.shape.0.clone();
            dims[r - 1] = Dim::Static(*n);
            Ok(TensorType::new(DType::F32, Shape(dims)))
        }
        Op::MatMulInteger(p) => p.infer(inputs),
        Op::ConvInteger(p) => p.infer(inputs),
    }
}

fn broadcast(a: &Shape, b: &Shape) -> Result<Shape, String> {
    broadcast_shapes(a, b).ok_or_else(|| format!("shapes {a} and {b} do not broadcast"))
}

fn float_only(d: DType) -> Result<(), String> {
    if d.is_float() {
        Ok(())
    } else {
        Err(format!("needs a float dtype, got {d}"))
    }
}

fn check_axes(axes: &[usize], rank: usize) -> Result<(), String> {
    check_axes_unsorted(axes, rank)?;
    if axes.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!("axes {axes:?} must be sorted and unique"));
    }
    Ok(())
}

fn check_axes_unsorted(axes: &[usize], rank: usize) -> Result<(), String> {
    if let Some(a) = axes.iter().find(|&&a| a >= rank) {
        return Err(format!("axis {a} out of range for rank {rank}"));
    }
    let mut seen = axes.to_vec();
    seen.sort();
    seen.dedup();
    if seen.len() != axes.len() {
        return Err(format!("axes {axes:?} repeat"));
    }
    Ok(())
}

fn conv_out(
    d: &Dim,
    k: usize,
    stride: usize,
    pad_begin: usize,
    pad_end: usize,
    dil: usize,
    ceil: bool,
) -> Result<Dim, String> {
    let pad = pad_begin + pad_end;
    let Some(n) = d.as_static() else {
        return Err(format!(
            "spatial dim {d} must be bound before convolution or pooling"
        ));
    };
    let span = dil * (k - 1) + 1;
    if n + pad < span {
        return Err(format!(
            "window {span} larger than padded input {}",
            n + pad
        ));
    }
    let num = n + pad - span;
    let mut out = if ceil {
        num.div_ceil(stride)
    } else {
        num / stride
    } + 1;
    // ONNX/PyTorch: with ceil mode the last window must start inside the input or left pad.
    if ceil && (out - 1) * stride >= n + pad_begin {
        out -= 1;
    }
    Ok(Dim::Static(out))
}
