//! Fused loop nests ([`LoopKernel`]) to WGSL, and fused elementwise epilogues of library
//! kernels.
//!
//! Elementwise kernels run one invocation per output element in a grid-stride loop, or
//! four per invocation with `vec4` loads and stores when the output and inputs are
//! contiguous f32 (or natively stored f16) at offsets and counts that are multiples of 4.
//! Reductions spread their rows over invocations as [`super::rows`] says (workgroup trees,
//! or subgroup operations where the adapter has them). The prologue runs per reduction
//! point, the epilogue once per output element. Dims every view walks contiguously are
//! merged first.

use super::dialect::Wgsl;
use super::rows::{lanes_for, Frame};
use super::scalar::{self, compute};
use super::{grid_loop, groups_for, main_sig, offset, ArgRef, Emitted, IndexSpace, Kb, Target, WG};
use rlx_ir::kernel::LoopKernel;
use rlx_ir::render::{
    coords, emit_nodes, epilogue_nodes, epilogue_space, loop_spaces, max_offset, Operand,
};
use rlx_ir::DType;

/// A library kernel's fused elementwise epilogue: input 0 is the library value, the others
/// are read through their views at the element's coordinates.
pub struct Epilogue<'a> {
    /// the epilogue kernel
    pub kernel: &'a LoopKernel,
}

impl<'a> Epilogue<'a> {
    /// Wraps an epilogue when it can be fused: elementwise, and input 0 read as the
    /// contiguous result itself.
    pub fn fusable(kernel: &'a LoopKernel) -> Option<Epilogue<'a>> {
        kernel.fusable_epilogue().then_some(Epilogue { kernel })
    }

    /// The dtype stored to the output.
    pub fn out_dtype(&self) -> DType {
        self.kernel.out_dtype()
    }

    /// Statements computing element `linear` (compute value `value`) through the epilogue
    /// and storing it to `out`.
    ///
    /// # Errors
    /// A node the rules do not accept.
    pub fn apply(
        &self,
        kb: &mut Kb,
        out: &str,
        linear: &str,
        value: &str,
    ) -> Result<String, String> {
        let k = self.kernel;
        let sp = epilogue_space(k);
        let mut s = format!("{{\n{}", coords(&Wgsl, linear, "q", &sp.dims, "i32"));
        let mut read = |i: usize, strides: &[isize]| {
            let inp = &k.inputs[i];
            let b = kb.read(ArgRef::Buffer(inp.buffer), inp.dtype);
            let off = offset(&inp.view.offset.to_string(), "q", strides);
            Operand::Value(kb.load(inp.dtype, &b, &off))
        };
        s += &epilogue_nodes(&Wgsl, k, &sp, value, &mut read)?;
        s += &kb.store(k.out_dtype(), out, linear, &format!("p{}", k.result));
        Ok(s + "}\n")
    }
}

/// Emits a loop kernel writing its output to `out` and reading input `i` from `args[i]`.
///
/// # Errors
/// The kernel breaks the IR contract, uses an unsupported dtype, or is too large for
/// 32-bit indexing.
pub fn emit(
    k: &LoopKernel,
    args: &[ArgRef],
    out: ArgRef,
    target: &Target,
) -> Result<Emitted, String> {
    k.verify()?;
    let n = k.numel();
    let r = k.reduce_numel();
    super::check_i32(&k.name, n.saturating_mul(r.max(1)))?;
    let mut dims = k.shape.clone();
    dims.extend(&k.reduce_shape);
    for inp in &k.inputs {
        let span = max_offset(inp.view.offset, &dims, &inp.view.strides);
        super::check_i32(&k.name, span)?;
    }
    let (outer, inner) = loop_spaces(k);
    if vec4_ok(k, &outer, target) {
        return elementwise_vec4(k, &outer, out, args, target);
    }
    let mut kb = Kb::new(target);
    let out_b = kb.write(out, k.out_dtype());
    let ins: Vec<String> = k
        .inputs
        .iter()
        .zip(args)
        .map(|(i, a)| kb.read(*a, i.dtype))
        .collect();
    match &k.reduce {
        None => elementwise(k, &outer, &ins, &out_b, kb, target),
        Some(_) => reduction(k, &outer, &inner, &ins, &out_b, kb, target),
    }
}

fn bases(k: &LoopKernel, outer: &IndexSpace) -> String {
    k.inputs
        .iter()
        .enumerate()
        .map(|(i, inp)| {
            format!(
                "let base{i}: i32 = {};\n",
                offset(&inp.view.offset.to_string(), "o", &outer.strides[i])
            )
        })
        .collect()
}

fn elementwise(
    k: &LoopKernel,
    outer: &IndexSpace,
    ins: &[String],
    out_b: &str,
    kb: Kb,
    target: &Target,
) -> Result<Emitted, String> {
    let n = k.numel();
    let mut elem =
        |i: usize| Operand::Value(kb.load(k.inputs[i].dtype, &ins[i], &format!("base{i}")));
    let body = emit_nodes(&Wgsl, k, &k.needed(&[k.result]), "e", &mut elem, None)?;
    let groups = groups_for(n, WG, target);
    let text = format!(
        "{}{}{}{}{}{}}}\n}}\n",
        main_sig(WG),
        grid_loop("idx", n, groups, WG, "lid"),
        coords(&Wgsl, "idx", "o", &outer.dims, "i32"),
        bases(k, outer),
        body,
        kb.store(k.out_dtype(), out_b, "idx", &format!("e{}", k.result)),
    );
    Ok(kb.finish(&k.name, text, [groups, 1, 1]))
}

/// True when an elementwise kernel can run four points per invocation with `vec4` loads and
/// stores: the output is f32 (or f16 stored natively) and its last merged dim a multiple
/// of 4; every input either walks that dim contiguously from a multiple of 4 (then it is
/// read as `vec4` and must be f32 or native f16) or is constant along it (read once).
pub fn vec4_ok(k: &LoopKernel, outer: &IndexSpace, target: &Target) -> bool {
    let vec_dtype = |d: DType| d == DType::F32 || (d == DType::F16 && target.shader_f16);
    let Some(&last) = outer.dims.last() else {
        return false;
    };
    let d = outer.dims.len() - 1;
    target.vec4
        && k.reduce.is_none()
        && last % 4 == 0
        && k.numel() >= 16
        && vec_dtype(k.out_dtype())
        && k.inputs
            .iter()
            .zip(&outer.strides)
            .all(|(i, s)| match s[d] {
                0 => true,
                1 => {
                    vec_dtype(i.dtype)
                        && i.view.offset % 4 == 0
                        && s[..d].iter().all(|x| x % 4 == 0)
                }
                _ => false,
            })
}

/// Four points per invocation: contiguous inputs read as one `vec4` each, the others once,
/// the expression body emitted per lane, the result stored as one `vec4`.
fn elementwise_vec4(
    k: &LoopKernel,
    outer: &IndexSpace,
    out: ArgRef,
    args: &[ArgRef],
    target: &Target,
) -> Result<Emitted, String> {
    let mut kb = Kb::new(target);
    let d = outer.dims.len() - 1;
    let out_b = kb.vec4(out, k.out_dtype());
    let mut loads = String::new();
    let mut vector = Vec::with_capacity(k.inputs.len());
    for (i, (inp, a)) in k.inputs.iter().zip(args).enumerate() {
        if outer.strides[i][d] == 1 {
            let b = kb.vec4(*a, inp.dtype);
            loads += &format!("let v{i} = vec4<f32>({b}[base{i} >> 2u]);\n");
            vector.push(true);
        } else {
            let b = kb.read(*a, inp.dtype);
            loads += &format!(
                "let v{i} = {};\n",
                kb.load(inp.dtype, &b, &format!("base{i}"))
            );
            vector.push(false);
        }
    }
    let need = k.needed(&[k.result]);
    let mut body = String::new();
    for (l, c) in ["x", "y", "z", "w"].iter().enumerate() {
        let mut elem = |i: usize| {
            if vector[i] {
                Operand::Value(format!("v{i}.{c}"))
            } else {
                Operand::Value(format!("v{i}"))
            }
        };
        body += &emit_nodes(&Wgsl, k, &need, &format!("e{l}_"), &mut elem, None)?;
    }
    let r = k.result;
    let result = if k.out_dtype() == DType::F16 {
        format!("vec4<f16>(rlx_to_f16(e0_{r}), rlx_to_f16(e1_{r}), rlx_to_f16(e2_{r}), rlx_to_f16(e3_{r}))")
    } else {
        format!("vec4<f32>(e0_{r}, e1_{r}, e2_{r}, e3_{r})")
    };
    let n4 = k.numel() / 4;
    let groups = groups_for(n4, WG, target);
    let text = format!(
        "{}{}let idx = quad * 4;\n{}{}{loads}{body}{out_b}[quad] = {result};\n}}\n}}\n",
        main_sig(WG),
        grid_loop("quad", n4, groups, WG, "lid"),
        coords(&Wgsl, "idx", "o", &outer.dims, "i32"),
        bases(k, outer),
    );
    Ok(kb.finish(&k.name, text, [groups, 1, 1]))
}

fn reduction(
    k: &LoopKernel,
    outer: &IndexSpace,
    inner: &IndexSpace,
    ins: &[String],
    out_b: &str,
    kb: Kb,
    target: &Target,
) -> Result<Emitted, String> {
    let red = k
        .reduce
        .as_ref()
        .ok_or_else(|| format!("kernel `{}`: no reduction", k.name))?;
    let (n, r) = (k.numel(), k.reduce_numel());
    let acc_ty = compute(red.dtype);
    let mut pro_elem = |i: usize| {
        Operand::Value(kb.load(
            k.inputs[i].dtype,
            &ins[i],
            &format!("(base{i} + {})", offset("0", "r", &inner.strides[i])),
        ))
    };
    let prologue = emit_nodes(&Wgsl, k, &k.needed(&[red.value]), "e", &mut pro_elem, None)?;
    let mut epi_elem =
        |i: usize| Operand::Value(kb.load(k.inputs[i].dtype, &ins[i], &format!("base{i}")));
    let epilogue = emit_nodes(
        &Wgsl,
        k,
        &k.needed(&[k.result]),
        "f",
        &mut epi_elem,
        Some("rlx_red"),
    )?;
    let ident = scalar::identity(red.op, red.dtype);
    let fold = scalar::combine(red.op, red.dtype, "acc", &format!("e{}", red.value));
    let stored = kb.store(k.out_dtype(), out_b, "row", &format!("f{}", k.result));
    let t = lanes_for(r, red.dtype);
    let coords_o = coords(&Wgsl, "row", "o", &outer.dims, "i32");
    let coords_r = coords(&Wgsl, "ri", "r", &inner.dims, "i32");
    let bases = bases(k, outer);
    let (text, groups) = if t == 1 {
        let groups = groups_for(n, WG, target);
        let text = format!(
            "{sig}{lp}{coords_o}{bases}var acc: {acc_ty} = {ident};\n\
             for (var ri: i32 = 0; ri < {r}; ri += 1) {{\n{coords_r}{prologue}acc = {fold};\n}}\n\
             let rlx_red: {acc_ty} = {done};\n{epilogue}{stored}}}\n}}\n",
            sig = main_sig(WG),
            lp = grid_loop("row", n, groups, WG, "lid"),
            done = scalar::finish(red.op, red.dtype, "acc", r),
        );
        (text, groups)
    } else {
        let frame = Frame::new(n, t, red.dtype, target);
        let text = format!(
            "{head}var acc: {acc_ty} = {ident};\n\
             if (live) {{\n{coords_o}{bases}\
             for (var ri: i32 = lane; ri < {r}; ri += lanes) {{\n{coords_r}{prologue}acc = {fold};\n}}\n}}\n\
             {combine}\
             if (live && lane == 0) {{\n{coords_o}{bases}\
             let rlx_red: {acc_ty} = {done};\n{epilogue}{stored}}}\n{tail}",
            head = frame.head(),
            combine = frame.combine("tot", red.op, red.dtype),
            done = scalar::finish(red.op, red.dtype, "tot", r),
            tail = frame.tail(),
        );
        (text, frame.groups)
    };
    Ok(kb.finish(&k.name, text, [groups, 1, 1]))
}
