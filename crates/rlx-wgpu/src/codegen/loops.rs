//! Fused loop nests ([`LoopKernel`]) to WGSL, and fused elementwise epilogues of library
//! kernels.
//!
//! Elementwise kernels run one invocation per output element in a grid-stride loop.
//! Reductions give each output row `T` invocations (1 for short rows, up to the whole
//! workgroup for long ones); partial results combine in a workgroup-memory tree. The
//! prologue runs per reduction point, the epilogue once per output element. Dims every view
//! walks contiguously are merged first.

use super::scalar::{self, cast, compute, literal, load, store};
use super::{
    contiguous, coords, grid_loop, groups_for, main_sig, offset, ArgRef, Emitted, IndexSpace, Kb,
    Target, WG,
};
use rlx_ir::kernel::{Expr, LoopKernel};
use rlx_ir::DType;

/// Statements `let {prefix}{i}: T = ...;` for every node in `which`. `elem(k)` gives the
/// compute value of input `k`; `reduced` names the finished reduction.
///
/// # Errors
/// A node whose op does not accept its dtype, naming the node.
pub fn emit_nodes(
    k: &LoopKernel,
    which: &[bool],
    prefix: &str,
    elem: &mut dyn FnMut(usize) -> String,
    reduced: Option<&str>,
) -> Result<String, String> {
    let mut s = String::new();
    let name = |i: usize| format!("{prefix}{i}");
    for (i, n) in k.body.iter().enumerate() {
        if !which[i] {
            continue;
        }
        if !scalar::storable(n.dtype) {
            return Err(format!(
                "e{i}: {} is not supported by WGSL kernels",
                n.dtype
            ));
        }
        let dt = |a: usize| k.body[a].dtype;
        let rhs = match &n.expr {
            Expr::Load(inp) => elem(*inp),
            Expr::Const(c) => literal(n.dtype, *c),
            Expr::Unary(op, a) => scalar::unary(*op, dt(*a), &name(*a))
                .ok_or_else(|| format!("e{i}: {} does not accept {}", op.name(), dt(*a)))?,
            Expr::Binary(op, a, b) => scalar::binary(*op, dt(*a), &name(*a), &name(*b))
                .ok_or_else(|| format!("e{i}: {} does not accept {}", op.name(), dt(*a)))?,
            Expr::Where(c, a, b) => format!("select({}, {}, {})", name(*b), name(*a), name(*c)),
            Expr::Cast(a) => cast(dt(*a), n.dtype, &name(*a)),
            Expr::Reduced => reduced
                .ok_or_else(|| format!("e{i}: reads a reduction outside an epilogue"))?
                .to_string(),
        };
        s += &format!("let {}: {} = {rhs};\n", name(i), compute(n.dtype));
    }
    Ok(s)
}

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
        let first = kernel.inputs.first()?;
        let identity = first.view.offset == 0 && first.view.strides == contiguous(&kernel.shape);
        let elementwise = kernel.reduce.is_none() && kernel.reduce_numel() == 1;
        (identity && elementwise).then_some(Epilogue { kernel })
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
        let strides: Vec<Vec<isize>> = k.inputs.iter().map(|i| i.view.strides.clone()).collect();
        let sp = IndexSpace::merge(&k.shape, &strides);
        let mut s = format!("{{\n{}", coords(linear, "q", &sp.dims));
        let mut elem = |i: usize| {
            if i == 0 {
                value.to_string()
            } else {
                let inp = &k.inputs[i];
                let b = kb.read(ArgRef::Buffer(inp.buffer), inp.dtype);
                let off = offset(&inp.view.offset.to_string(), "q", &sp.strides[i]);
                load(inp.dtype, &b, &off)
            }
        };
        s += &emit_nodes(k, &k.needed(&[k.result]), "p", &mut elem, None)?;
        s += &store(k.out_dtype(), out, linear, &format!("p{}", k.result));
        Ok(s + "}\n")
    }
}

/// Invocations per output row of a reduction of `len` points.
pub fn lanes_for(len: usize, dtype: DType) -> usize {
    if len <= 32 || dtype == DType::Bool {
        1
    } else if len <= 256 {
        32
    } else if len <= 2048 {
        64
    } else {
        WG
    }
}

/// Statements combining `acc` over the `t` lanes of each row group through workgroup
/// array `sh` (all lanes then read the result from `{sh}[grp * t]`). Must run in uniform
/// control flow.
pub fn tree(sh: &str, t: usize, comb: &dyn Fn(&str, &str) -> String) -> String {
    let mut s = format!("{sh}[lid] = acc;\nworkgroupBarrier();\n");
    let mut step = t / 2;
    while step >= 1 {
        s += &format!(
            "if (lane < {step}) {{ {sh}[lid] = {}; }}\nworkgroupBarrier();\n",
            comb(&format!("{sh}[lid]"), &format!("{sh}[lid + {step}]"))
        );
        step /= 2;
    }
    s
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
    let n_out = k.shape.len();
    let n = k.numel();
    let r = k.reduce_numel();
    super::check_i32(&k.name, n.saturating_mul(r.max(1)))?;
    for inp in &k.inputs {
        let span: usize = k
            .shape
            .iter()
            .chain(&k.reduce_shape)
            .zip(&inp.view.strides)
            .map(|(&d, &s)| d.saturating_sub(1).saturating_mul(s.unsigned_abs()))
            .fold(inp.view.offset, usize::saturating_add);
        super::check_i32(&k.name, span)?;
    }
    let out_strides: Vec<Vec<isize>> = k
        .inputs
        .iter()
        .map(|i| i.view.strides[..n_out].to_vec())
        .chain(std::iter::once(contiguous(&k.shape)))
        .collect();
    let outer = IndexSpace::merge(&k.shape, &out_strides);
    let inner_strides: Vec<Vec<isize>> = k
        .inputs
        .iter()
        .map(|i| i.view.strides[n_out..].to_vec())
        .collect();
    let inner = IndexSpace::merge(&k.reduce_shape, &inner_strides);
    let mut kb = Kb::new();
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
    let mut elem = |i: usize| load(k.inputs[i].dtype, &ins[i], &format!("base{i}"));
    let body = emit_nodes(k, &k.needed(&[k.result]), "e", &mut elem, None)?;
    let groups = groups_for(n, WG, target);
    let text = format!(
        "{}{}{}{}{}{}}}\n}}\n",
        main_sig(WG),
        grid_loop("idx", n, groups, WG, "lid"),
        coords("idx", "o", &outer.dims),
        bases(k, outer),
        body,
        store(k.out_dtype(), out_b, "idx", &format!("e{}", k.result)),
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
        load(
            k.inputs[i].dtype,
            &ins[i],
            &format!("(base{i} + {})", offset("0", "r", &inner.strides[i])),
        )
    };
    let prologue = emit_nodes(k, &k.needed(&[red.value]), "e", &mut pro_elem, None)?;
    let mut epi_elem = |i: usize| load(k.inputs[i].dtype, &ins[i], &format!("base{i}"));
    let epilogue = emit_nodes(
        k,
        &k.needed(&[k.result]),
        "f",
        &mut epi_elem,
        Some("rlx_red"),
    )?;
    let ident = scalar::identity(red.op, red.dtype);
    let comb = |a: &str, b: &str| scalar::combine(red.op, red.dtype, a, b);
    let done = scalar::finish(red.op, red.dtype, "acc", r);
    let stored = store(k.out_dtype(), out_b, "row", &format!("f{}", k.result));
    let t = lanes_for(r, red.dtype);
    let per_group = WG / t;
    let groups = groups_for(n, per_group, target);
    let coords_o = coords("row", "o", &outer.dims);
    let coords_r = coords("ri", "r", &inner.dims);
    let bases = bases(k, outer);
    let value = format!("e{}", red.value);
    let fold = comb("acc", &value);
    let text = if t == 1 {
        format!(
            "{sig}{lp}{coords_o}{bases}var acc: {acc_ty} = {ident};\n\
             for (var ri: i32 = 0; ri < {r}; ri += 1) {{\n{coords_r}{prologue}acc = {fold};\n}}\n\
             let rlx_red: {acc_ty} = {done};\n{epilogue}{stored}}}\n}}\n",
            sig = main_sig(WG),
            lp = grid_loop("row", n, groups, WG, "lid"),
        )
    } else {
        format!(
            "var<workgroup> sh: array<{acc_ty}, {WG}>;\n{sig}\
             let grp = lid / {t};\nlet lane = lid % {t};\n\
             for (var base: i32 = i32(wg.x) * {per_group}; base < {n}; base += {step}) {{\n\
             let row = base + grp;\n\
             var acc: {acc_ty} = {ident};\n\
             if (row < {n}) {{\n{coords_o}{bases}\
             for (var ri: i32 = lane; ri < {r}; ri += {t}) {{\n{coords_r}{prologue}acc = {fold};\n}}\n}}\n\
             {tree}\
             if (row < {n} && lane == 0) {{\n{coords_o}{bases}let acc2 = sh[lid];\n\
             let rlx_red: {acc_ty} = {done2};\n{epilogue}{stored}}}\n\
             workgroupBarrier();\n}}\n}}\n",
            sig = main_sig(WG),
            step = groups as usize * per_group,
            tree = tree("sh", t, &comb),
            done2 = scalar::finish(red.op, red.dtype, "acc2", r),
        )
    };
    Ok(kb.finish(&k.name, text, [groups, 1, 1]))
}
