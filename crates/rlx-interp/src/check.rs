//! Structural checks of a kernel program, shared by the reference interpreter and the CPU
//! fast path (`rlx-cpu`) so both reject the same programs with the same messages: buffer
//! references, alias chains, view bounds, dtypes, read-before-write, and the bound inputs and
//! params.

use crate::graph_check_bound;
use crate::InterpError;
use rlx_ir::kernel::{BufferId, BufferKind, Kernel, KernelProgram, LoopKernel, View};
use rlx_ir::{DType, Op, Shape, Tensor, TensorType};
use std::collections::HashMap;
use std::sync::Arc;

/// What the checks learn about a program.
#[derive(Debug, Clone)]
pub struct ProgramInfo {
    /// static shape per buffer
    pub shapes: Vec<Vec<usize>>,
    /// the buffer whose storage each buffer uses (itself unless an alias)
    pub roots: Vec<BufferId>,
    /// per kernel: the library op's result type (None for loop kernels)
    pub lib_results: Vec<Option<(DType, Vec<usize>)>>,
}

fn invalid(m: String) -> InterpError {
    InterpError::Invalid(m)
}

/// Checks that a view stays inside a buffer of `len` elements over output dims `out` and
/// reduction dims `red`. Nothing is read when an output dim is 0; a reduction dim of 0
/// still reads index 0 (the epilogue runs at reduction index 0), so it counts as 1.
pub(crate) fn check_view(
    view: &View,
    out: &[usize],
    red: &[usize],
    len: usize,
) -> Result<(), String> {
    if out.contains(&0) {
        return Ok(());
    }
    // A view that moves along an empty reduction dim is read only by the prologue, which
    // runs zero times (epilogue loads never move along reduction dims).
    let moves_along_empty = red
        .iter()
        .zip(&view.strides[out.len().min(view.strides.len())..])
        .any(|(&d, &s)| d == 0 && s != 0);
    if moves_along_empty {
        return Ok(());
    }
    let (mut lo, mut hi) = (view.offset as i128, view.offset as i128);
    for (&d, &s) in out.iter().chain(red).zip(&view.strides) {
        let span = (d.max(1) as i128 - 1) * s as i128;
        if span < 0 {
            lo += span;
        } else {
            hi += span;
        }
    }
    if lo < 0 || hi >= len as i128 {
        return Err(format!(
            "view offset={} strides={:?} over dims {out:?}+{red:?} reads elements {lo}..={hi} \
             of a buffer of {len}",
            view.offset, view.strides
        ));
    }
    Ok(())
}

/// Checks a loop kernel against the types of the buffers its inputs read (`inputs[i]` is
/// the dtype and element count of input `i`'s buffer).
pub(crate) fn check_loop(k: &LoopKernel, inputs: &[(DType, usize)]) -> Result<(), InterpError> {
    k.verify().map_err(invalid)?;
    if inputs.len() != k.inputs.len() {
        return Err(invalid(format!(
            "kernel `{}` declares {} inputs but got {}",
            k.name,
            k.inputs.len(),
            inputs.len()
        )));
    }
    for (i, (inp, &(dtype, len))) in k.inputs.iter().zip(inputs).enumerate() {
        if inp.dtype != dtype {
            return Err(invalid(format!(
                "kernel `{}` input {i} is declared {} but its buffer holds {dtype}",
                k.name, inp.dtype
            )));
        }
        check_view(&inp.view, &k.shape, &k.reduce_shape, len)
            .map_err(|m| invalid(format!("kernel `{}` input {i}: {m}", k.name)))?;
    }
    Ok(())
}

fn check_result(
    kernel: &str,
    what: &str,
    (dtype, numel): (DType, usize),
    out: &TensorType,
) -> Result<(), InterpError> {
    let out_numel = out.shape.numel().unwrap_or(0);
    if dtype != out.dtype || numel != out_numel {
        return Err(invalid(format!(
            "kernel `{kernel}` {what} gives {dtype} x {numel} elements but its output buffer \
             is {out}"
        )));
    }
    Ok(())
}

/// Checks the whole program.
///
/// # Errors
/// The first broken rule, naming the buffer or kernel.
pub fn check_program(p: &KernelProgram) -> Result<ProgramInfo, InterpError> {
    let nb = p.buffers.len();
    let mut shapes = Vec::with_capacity(nb);
    for (i, b) in p.buffers.iter().enumerate() {
        let s = b.ty.shape.as_static().ok_or_else(|| {
            invalid(format!(
                "buffer b{i} has symbolic type {}; bind it first",
                b.ty
            ))
        })?;
        if let BufferKind::Constant(t) = &b.kind {
            if t.dtype() != b.ty.dtype || t.shape() != s.as_slice() {
                return Err(InterpError::Mismatch {
                    kind: "constant",
                    name: format!("b{i}"),
                    expected: b.ty.to_string(),
                    got: format!("{}{}", t.dtype(), Shape::of(t.shape())),
                });
            }
        }
        shapes.push(s);
    }
    let mut roots = Vec::with_capacity(nb);
    for i in 0..nb {
        let mut r = i;
        let mut hops = 0;
        while let Some(t) = p.buffers[r].alias_of {
            if t >= nb || hops > nb {
                return Err(invalid(format!(
                    "buffer b{i} aliases b{t}, which does not exist or forms a cycle"
                )));
            }
            r = t;
            hops += 1;
        }
        let (a, b) = (&p.buffers[i].ty, &p.buffers[r].ty);
        if a.dtype != b.dtype || a.shape.numel() != b.shape.numel() {
            return Err(invalid(format!(
                "buffer b{i} ({a}) aliases b{r} ({b}) with a different dtype or size"
            )));
        }
        roots.push(r);
    }
    let ty = |b: BufferId| -> Result<&TensorType, InterpError> {
        p.buffers
            .get(b)
            .map(|b| &b.ty)
            .ok_or_else(|| invalid(format!("buffer b{b} does not exist ({nb} buffers)")))
    };
    let mut written = vec![false; nb];
    let mut lib_results = Vec::with_capacity(p.kernels.len());
    for k in &p.kernels {
        let name = k.name();
        let out = k.output();
        let out_ty = ty(out).map_err(|e| e.in_kernel(name))?;
        let root = roots[out];
        if p.buffers[root].kind != BufferKind::Temp {
            return Err(invalid(format!(
                "kernel `{name}` writes b{out}, which is not a temp buffer"
            )));
        }
        for r in k.reads() {
            ty(r).map_err(|e| e.in_kernel(name))?;
            let rr = roots[r];
            if rr == root {
                return Err(invalid(format!(
                    "kernel `{name}` reads b{r}, which shares storage with its output b{out}"
                )));
            }
            if p.buffers[rr].kind == BufferKind::Temp && !written[rr] {
                return Err(invalid(format!(
                    "kernel `{name}` reads temp b{r} before any kernel writes it"
                )));
            }
        }
        let info = |b: BufferId| {
            (
                p.buffers[b].ty.dtype,
                p.buffers[b].ty.shape.numel().unwrap(),
            )
        };
        match k {
            Kernel::Loop(l) => {
                let ins: Vec<_> = l.inputs.iter().map(|i| info(i.buffer)).collect();
                check_loop(l, &ins)?;
                check_result(name, "loop", (l.out_dtype(), l.numel()), out_ty)?;
                lib_results.push(None);
            }
            Kernel::Library(l) => {
                let in_tys: Vec<&TensorType> = l.inputs.iter().map(|&b| &p.buffers[b].ty).collect();
                let res = library_result(&l.op, &in_tys).map_err(|e| e.in_kernel(name))?;
                let res_numel = res.1.iter().product();
                match &l.epilogue {
                    Some(e) => {
                        if e.inputs.is_empty() || e.reduce.is_some() || e.reduce_numel() != 1 {
                            return Err(invalid(format!(
                                "kernel `{name}`: an epilogue reads the result as input 0 \
                                 and has no reduction"
                            )));
                        }
                        let mut ins = vec![(res.0, res_numel)];
                        ins.extend(e.inputs[1..].iter().map(|i| info(i.buffer)));
                        check_loop(e, &ins)?;
                        if e.numel() != res_numel {
                            return Err(invalid(format!(
                                "kernel `{name}`: epilogue covers {} elements, the result has \
                                 {res_numel}",
                                e.numel()
                            )));
                        }
                        check_result(name, "epilogue", (e.out_dtype(), e.numel()), out_ty)?;
                    }
                    None => check_result(name, l.op.name(), (res.0, res_numel), out_ty)?,
                }
                lib_results.push(Some(res));
            }
        }
        written[root] = true;
    }
    for (name, b) in &p.outputs {
        ty(*b)?;
        let r = roots[*b];
        if p.buffers[r].kind == BufferKind::Temp && !written[r] {
            return Err(invalid(format!(
                "output `{name}` is temp b{b}, which no kernel writes"
            )));
        }
    }
    Ok(ProgramInfo {
        shapes,
        roots,
        lib_results,
    })
}

/// The static result type of a library op on operands of the given types.
pub fn library_result(op: &Op, inputs: &[&TensorType]) -> Result<(DType, Vec<usize>), InterpError> {
    if matches!(op, Op::Input { .. } | Op::Param { .. }) {
        return Err(invalid(format!("{} cannot be a library kernel", op.name())));
    }
    let t = rlx_ir::infer(op, inputs).map_err(|message| InterpError::Op {
        op: op.name(),
        inputs: inputs
            .iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        message,
    })?;
    let shape = t
        .shape
        .as_static()
        .ok_or_else(|| invalid(format!("{} result {t} is not static", op.name())))?;
    Ok((t.dtype, shape))
}

/// The tensors bound to each root buffer that is an input, param or constant.
///
/// # Errors
/// A missing input or param, or one whose dtype or shape differs from the buffer's.
pub fn bind_leaves<'a>(
    p: &'a KernelProgram,
    inputs: &'a HashMap<String, Tensor>,
    params: &'a HashMap<String, Arc<Tensor>>,
) -> Result<Vec<Option<&'a Tensor>>, InterpError> {
    let mut out = Vec::with_capacity(p.buffers.len());
    for b in &p.buffers {
        let t = match (&b.kind, b.alias_of) {
            (_, Some(_)) | (BufferKind::Temp, _) => None,
            (BufferKind::Constant(t), _) => Some(&**t),
            (BufferKind::Input(name), _) => {
                let t = inputs.get(name).ok_or_else(|| InterpError::Missing {
                    kind: "input",
                    name: name.clone(),
                })?;
                graph_check_bound("input", name, &b.ty, t)?;
                Some(t)
            }
            (BufferKind::Param(name), _) => {
                let t = params.get(name).ok_or_else(|| InterpError::Missing {
                    kind: "param",
                    name: name.clone(),
                })?;
                graph_check_bound("param", name, &b.ty, t)?;
                Some(&**t)
            }
        };
        out.push(t);
    }
    Ok(out)
}
