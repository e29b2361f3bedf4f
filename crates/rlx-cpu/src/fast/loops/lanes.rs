//! The lane bytecode: one instruction per kernel expression, each evaluated over a chunk of
//! up to [`LANES`] loop points at once into its own scratch register. f32 lanes are the fast
//! path (f32 and bool values, bool as 0/1); f64 lanes carry every other dtype exactly as the
//! interpreter does, rounding after each instruction.

use super::super::math;
use super::super::memory::{dispatch, Data, Elem};
use rlx_ir::{BinaryOp, Composite, DType, UnaryOp};

/// Loop points evaluated per instruction dispatch.
pub(crate) const LANES: usize = 256;

/// What an instruction computes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum InstKind {
    /// read kernel input n
    Load(usize),
    /// a constant, already rounded to the instruction dtype
    Const(f64),
    Unary(UnaryOp, usize),
    /// binary op with the operand dtype
    Binary(BinaryOp, usize, usize, DType),
    Where(usize, usize, usize),
    Cast(usize),
    /// `x * y + z` (fused multiply-add where available), then optionally GELU: built only
    /// for f32 lanes by fusing a Mul, an Add and a Gelu whose results have no other use
    MulAdd(usize, usize, usize, Option<UnaryOp>),
    /// the finished reduction values of this chunk's output points
    Reduced,
}

/// One instruction: writes register `dst` (the expression's index) with values of `dtype`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Inst {
    pub dst: usize,
    pub kind: InstKind,
    pub dtype: DType,
}

/// A lane type: f32 (fast) or f64 (exact for every other dtype).
pub(crate) trait Lane: Copy + Send + Sync + Default + 'static {
    fn from_elem<T: Elem>(v: T) -> Self;
}

impl Lane for f32 {
    #[inline(always)]
    fn from_elem<T: Elem>(v: T) -> f32 {
        v.to_f32()
    }
}

impl Lane for f64 {
    #[inline(always)]
    fn from_elem<T: Elem>(v: T) -> f64 {
        v.to_f64()
    }
}

/// How an input is laid out over a lane space, decided at compile time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// consecutive points read consecutive elements
    Contiguous,
    /// every point reads the same element
    Broadcast,
    /// anything else: walked row by row along the innermost dim
    Strided,
}

/// A loop space (dims) and how one input is read over it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Access<'a> {
    pub dims: &'a [usize],
    pub strides: &'a [isize],
    pub layout: Layout,
}

/// Reads points `start..start + dst.len()` (row-major over `a.dims`) of an input whose point
/// 0 is element `base`.
#[inline]
pub(crate) fn load<L: Lane>(
    src: Data<'_>,
    a: Access<'_>,
    base: isize,
    start: usize,
    dst: &mut [L],
) {
    dispatch!(src, Data, s => load_typed(s, a, base, start, dst))
}

fn load_typed<T: Elem, L: Lane>(
    src: &[T],
    a: Access<'_>,
    base: isize,
    start: usize,
    dst: &mut [L],
) {
    let n = dst.len();
    match a.layout {
        Layout::Contiguous => {
            let o = base as usize + start;
            for (d, &s) in dst.iter_mut().zip(&src[o..o + n]) {
                *d = L::from_elem(s);
            }
        }
        Layout::Broadcast => dst.fill(L::from_elem(src[base as usize])),
        Layout::Strided => load_strided(src, a, base, start, dst),
    }
}

fn load_strided<T: Elem, L: Lane>(
    src: &[T],
    a: Access<'_>,
    base: isize,
    start: usize,
    dst: &mut [L],
) {
    let rank = a.dims.len();
    let last = rank - 1;
    let mut idx_buf = [0usize; 16];
    let mut idx_heap = Vec::new();
    let idx: &mut [usize] = if rank <= 16 {
        &mut idx_buf[..rank]
    } else {
        idx_heap.resize(rank, 0);
        &mut idx_heap
    };
    let mut rest = start;
    for d in (0..rank).rev() {
        idx[d] = rest % a.dims[d];
        rest /= a.dims[d];
    }
    let mut off = base
        + idx
            .iter()
            .zip(a.strides)
            .map(|(&i, &s)| i as isize * s)
            .sum::<isize>();
    let (dl, sl) = (a.dims[last], a.strides[last]);
    let mut j = 0;
    let n = dst.len();
    while j < n {
        let seg = (dl - idx[last]).min(n - j);
        let out = &mut dst[j..j + seg];
        match sl {
            1 => {
                let o = off as usize;
                for (d, &s) in out.iter_mut().zip(&src[o..o + seg]) {
                    *d = L::from_elem(s);
                }
            }
            0 => out.fill(L::from_elem(src[off as usize])),
            _ => {
                for (t, d) in out.iter_mut().enumerate() {
                    *d = L::from_elem(src[(off + t as isize * sl) as usize]);
                }
            }
        }
        j += seg;
        idx[last] += seg;
        off += seg as isize * sl;
        if idx[last] == dl {
            off -= dl as isize * sl;
            idx[last] = 0;
            for d in (0..last).rev() {
                idx[d] += 1;
                off += a.strides[d];
                if idx[d] < a.dims[d] {
                    break;
                }
                off -= a.dims[d] as isize * a.strides[d];
                idx[d] = 0;
            }
        }
    }
}

/// Loads input `k` into the given lanes.
pub(crate) type Loader<'a, L> = dyn FnMut(usize, &mut [L]) + 'a;

/// Registers read straight from input memory, and the output written in place: lets an
/// elementwise kernel over contiguous f32 buffers skip copying its operands into registers
/// and its result out of them.
#[derive(Default)]
pub(crate) struct Direct<'a, 'o> {
    /// `(register, slice)`: the register's loads are skipped and reads see the slice
    pub alias: &'a [(usize, &'a [f32])],
    /// `(register, out)`: the instruction writing the register writes `out` instead
    pub out: Option<(usize, &'o mut [f32])>,
}

/// Evaluates `insts` over `n` lanes (f32). `reduced` holds the finished reductions.
pub(crate) fn eval_f32(
    insts: &[Inst],
    regs: &mut [f32],
    n: usize,
    load: &mut Loader<'_, f32>,
    reduced: &[f32],
    direct: Direct<'_, '_>,
) {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::fast::library::packed_gemm::avx512() {
            // SAFETY: `avx512` checked the features the clone was compiled for.
            unsafe { eval_f32_avx512(insts, regs, n, load, reduced, direct) };
            return;
        }
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports the features the clone was compiled for.
            unsafe { eval_f32_avx2(insts, regs, n, load, reduced, direct) };
            return;
        }
    }
    eval_f32_body::<false>(insts, regs, n, load, reduced, direct)
}

/// The same body compiled with AVX-512F (and FMA), so the per-op loops use 16-wide vectors.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn eval_f32_avx512(
    insts: &[Inst],
    regs: &mut [f32],
    n: usize,
    load: &mut Loader<'_, f32>,
    reduced: &[f32],
    direct: Direct<'_, '_>,
) {
    eval_f32_body::<true>(insts, regs, n, load, reduced, direct)
}

/// The same body compiled with AVX2 and FMA enabled, so the per-op loops use 8-wide vectors.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn eval_f32_avx2(
    insts: &[Inst],
    regs: &mut [f32],
    n: usize,
    load: &mut Loader<'_, f32>,
    reduced: &[f32],
    direct: Direct<'_, '_>,
) {
    eval_f32_body::<true>(insts, regs, n, load, reduced, direct)
}

#[inline(always)]
fn eval_f32_body<const FMA: bool>(
    insts: &[Inst],
    regs: &mut [f32],
    n: usize,
    load: &mut Loader<'_, f32>,
    reduced: &[f32],
    direct: Direct<'_, '_>,
) {
    let Direct { alias, mut out } = direct;
    for inst in insts {
        if matches!(inst.kind, InstKind::Load(_)) && alias.iter().any(|a| a.0 == inst.dst) {
            continue;
        }
        let (lo, hi) = regs.split_at_mut(inst.dst * LANES);
        let d = match &mut out {
            Some((reg, o)) if *reg == inst.dst => &mut o[..n],
            _ => &mut hi[..n],
        };
        let r = |i: usize| match alias.iter().find(|a| a.0 == i) {
            Some((_, s)) => &s[..n],
            None => &lo[i * LANES..i * LANES + n],
        };
        let mut to_bool = false;
        match inst.kind {
            InstKind::Load(k) => load(k, d),
            InstKind::Const(c) => d.fill(c as f32),
            InstKind::Unary(op, a) => {
                unary_f32::<FMA>(op, r(a), d);
                to_bool = inst.dtype == DType::Bool && op != UnaryOp::Not;
            }
            InstKind::Binary(op, a, b, _) => {
                binary_f32(op, r(a), r(b), d);
                to_bool = inst.dtype == DType::Bool && !op.is_comparison() && !op.is_logical();
            }
            InstKind::Where(c, a, b) => {
                for (((d, &c), &a), &b) in d.iter_mut().zip(r(c)).zip(r(a)).zip(r(b)) {
                    *d = if c != 0.0 { a } else { b };
                }
            }
            InstKind::Cast(a) if super::small_int(inst.dtype) => wrap_to(inst.dtype, r(a), d),
            InstKind::Cast(a) => {
                d.copy_from_slice(r(a));
                to_bool = inst.dtype == DType::Bool;
            }
            InstKind::MulAdd(x, y, z, op) => mul_add_f32::<FMA>(op, r(x), r(y), r(z), d),
            InstKind::Reduced => d.copy_from_slice(&reduced[..n]),
        }
        if to_bool {
            for v in d.iter_mut() {
                *v = (*v != 0.0) as u8 as f32;
            }
        }
    }
}

/// `d = x` cast to the 8- or 16-bit integer `to`, as the interpreter casts (truncated
/// towards zero through i64, saturating there, NaN to 0, then wrapped to the width), each
/// value exact in f32. Chunks whose values all lie within ±2^31 take a vector-friendly
/// i32 conversion, which truncates and wraps them the same way.
#[inline(always)]
pub(crate) fn wrap_to(to: DType, x: &[f32], d: &mut [f32]) {
    const I32_EDGE: f32 = 2_147_483_648.0;
    let narrow = |i: i64| -> f32 {
        match to {
            DType::U8 => i as u8 as f32,
            DType::I8 => i as i8 as f32,
            DType::U16 => i as u16 as f32,
            _ => i as i16 as f32,
        }
    };
    let small = x.iter().fold(true, |ok, &v| ok & (v.abs() < I32_EDGE));
    if small {
        match to {
            DType::U8 => map1(x, d, |v| v as i32 as u8 as f32),
            DType::I8 => map1(x, d, |v| v as i32 as i8 as f32),
            DType::U16 => map1(x, d, |v| v as i32 as u16 as f32),
            _ => map1(x, d, |v| v as i32 as i16 as f32),
        }
    } else {
        map1(x, d, |v| narrow(v as i64));
    }
}

#[inline(always)]
fn map1(x: &[f32], d: &mut [f32], f: impl Fn(f32) -> f32) {
    for (d, &x) in d.iter_mut().zip(x) {
        *d = f(x);
    }
}

#[inline(always)]
fn map2(x: &[f32], y: &[f32], d: &mut [f32], f: impl Fn(f32, f32) -> f32) {
    for ((d, &x), &y) in d.iter_mut().zip(x).zip(y) {
        *d = f(x, y);
    }
}

/// `d = op(x * y + z)`; `op` is `None` or `Some(Gelu)`.
#[inline(always)]
fn mul_add_f32<const FMA: bool>(
    op: Option<UnaryOp>,
    x: &[f32],
    y: &[f32],
    z: &[f32],
    d: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if FMA && op == Some(UnaryOp::GELU) {
        // SAFETY: `FMA` is true only inside `eval_f32_avx2` and `eval_f32_avx512`, after
        // feature detection (both imply AVX2 and FMA).
        unsafe { math::avx2::mul_add_gelu(x, y, z, d) };
        return;
    }
    let madd = |a: f32, b: f32, c: f32| if FMA { a.mul_add(b, c) } else { a * b + c };
    let it = d.iter_mut().zip(x).zip(y).zip(z);
    match op {
        None => it.for_each(|(((d, &a), &b), &c)| *d = madd(a, b, c)),
        Some(UnaryOp::GELU) => {
            it.for_each(|(((d, &a), &b), &c)| *d = math::gelu::<FMA>(madd(a, b, c)))
        }
        Some(op) => unreachable!("{op:?} is never fused"),
    }
}

#[inline(always)]
fn unary_f32<const FMA: bool>(op: UnaryOp, x: &[f32], d: &mut [f32]) {
    match op {
        UnaryOp::Neg => map1(x, d, |x| -x),
        UnaryOp::Abs => map1(x, d, f32::abs),
        UnaryOp::Exp => map1(x, d, math::exp::<FMA>),
        UnaryOp::Log => map1(x, d, f32::ln),
        UnaryOp::Sqrt => map1(x, d, f32::sqrt),
        UnaryOp::Rsqrt => map1(x, d, |x| 1.0 / x.sqrt()),
        UnaryOp::Reciprocal => map1(x, d, |x| 1.0 / x),
        UnaryOp::Tanh => map1(x, d, math::tanh::<FMA>),
        UnaryOp::Sigmoid => map1(x, d, math::sigmoid::<FMA>),
        UnaryOp::Relu => map1(x, d, |x| x.max(0.0)),
        UnaryOp::Composite(c) => composite_f32::<FMA>(c, x, d),
        UnaryOp::Erf => map1(x, d, math::erf::<FMA>),
        UnaryOp::Sin => map1(x, d, f32::sin),
        UnaryOp::Cos => map1(x, d, f32::cos),
        UnaryOp::Floor => map1(x, d, f32::floor),
        UnaryOp::Ceil => map1(x, d, f32::ceil),
        UnaryOp::Round => map1(x, d, f32::round_ties_even),
        UnaryOp::Sign => map1(x, d, |x| {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                x
            }
        }),
        UnaryOp::Not => map1(x, d, |x| (x == 0.0) as u8 as f32),
        // Integer-only: f32 lanes never run it, but keep the reference meaning.
        UnaryOp::BitNot => map1(x, d, |x| UnaryOp::BitNot.eval(x as f64) as f32),
    }
}

/// True for the composites the f32 lanes compute natively (vectorized GELU, ...); the
/// backend declines the others, which legalization expands into primitives.
pub(crate) fn native_composite(c: Composite) -> bool {
    matches!(c, Composite::Gelu | Composite::GeluTanh | Composite::Silu)
}

/// `d = c(x)` by the native forms [`native_composite`] lists.
#[inline(always)]
fn composite_f32<const FMA: bool>(c: Composite, x: &[f32], d: &mut [f32]) {
    match c {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `FMA` is true only inside `eval_f32_avx2` and `eval_f32_avx512`, after
        // feature detection (both imply AVX2 and FMA); `avx512` checks AVX-512F.
        Composite::Gelu if FMA => unsafe {
            if crate::fast::library::packed_gemm::avx512() {
                math::avx512::gelu_slice(x, d)
            } else {
                math::avx2::gelu_slice(x, d)
            }
        },
        Composite::Gelu => map1(x, d, math::gelu::<FMA>),
        Composite::GeluTanh => map1(x, d, math::gelu_tanh::<FMA>),
        Composite::Silu => map1(x, d, |x| x * math::sigmoid::<FMA>(x)),
        // Not native: legalization expands it, so only kernel programs built without
        // legalization get here; they get the reference meaning.
        _ => map1(x, d, |v| c.eval(v as f64) as f32),
    }
}

#[inline(always)]
fn binary_f32(op: BinaryOp, x: &[f32], y: &[f32], d: &mut [f32]) {
    let t = |v: bool| v as u8 as f32;
    match op {
        BinaryOp::Add => map2(x, y, d, |a, b| a + b),
        BinaryOp::Sub => map2(x, y, d, |a, b| a - b),
        BinaryOp::Mul => map2(x, y, d, |a, b| a * b),
        BinaryOp::Div => map2(x, y, d, |a, b| a / b),
        BinaryOp::Pow => map2(x, y, d, f32::powf),
        BinaryOp::Max => map2(x, y, d, |a, b| {
            if a.is_nan() || b.is_nan() {
                f32::NAN
            } else {
                a.max(b)
            }
        }),
        BinaryOp::Min => map2(x, y, d, |a, b| {
            if a.is_nan() || b.is_nan() {
                f32::NAN
            } else {
                a.min(b)
            }
        }),
        BinaryOp::Mod => map2(x, y, d, |a, b| {
            let r = a % b;
            if r != 0.0 && ((r < 0.0) != (b < 0.0)) {
                r + b
            } else {
                r
            }
        }),
        BinaryOp::FMod => map2(x, y, d, |a, b| a % b),
        BinaryOp::Eq => map2(x, y, d, |a, b| t(a == b)),
        BinaryOp::Ne => map2(x, y, d, |a, b| t(a != b)),
        BinaryOp::Lt => map2(x, y, d, |a, b| t(a < b)),
        BinaryOp::Le => map2(x, y, d, |a, b| t(a <= b)),
        BinaryOp::Gt => map2(x, y, d, |a, b| t(a > b)),
        BinaryOp::Ge => map2(x, y, d, |a, b| t(a >= b)),
        BinaryOp::And => map2(x, y, d, |a, b| t(a != 0.0 && b != 0.0)),
        BinaryOp::Or => map2(x, y, d, |a, b| t(a != 0.0 || b != 0.0)),
        BinaryOp::Xor => map2(x, y, d, |a, b| t((a != 0.0) != (b != 0.0))),
        // Integer-only: f32 lanes never run them, but keep the reference meaning.
        BinaryOp::BitAnd | BinaryOp::BitOr | BinaryOp::BitXor | BinaryOp::Shl | BinaryOp::Shr => {
            map2(x, y, d, |a, b| {
                op.eval(a as f64, b as f64, DType::I32) as f32
            })
        }
    }
}

/// Evaluates `insts` over `n` lanes in f64 with the interpreter's rounding: the generic
/// path for every dtype other than f32 and bool.
pub(crate) fn eval_f64(
    insts: &[Inst],
    regs: &mut [f64],
    n: usize,
    load: &mut Loader<'_, f64>,
    reduced: &[f64],
) {
    for inst in insts {
        let (lo, hi) = regs.split_at_mut(inst.dst * LANES);
        let d = &mut hi[..n];
        let r = |i: usize| &lo[i * LANES..i * LANES + n];
        let dt = inst.dtype;
        match inst.kind {
            InstKind::Load(k) => load(k, d),
            InstKind::Const(c) => d.fill(c),
            InstKind::Unary(op, a) => {
                for (d, &x) in d.iter_mut().zip(r(a)) {
                    *d = dt.round(op.eval(x));
                }
            }
            InstKind::Binary(op, a, b, od) => {
                for ((d, &x), &y) in d.iter_mut().zip(r(a)).zip(r(b)) {
                    *d = dt.round(op.eval(x, y, od));
                }
            }
            InstKind::Where(c, a, b) => {
                for (((d, &c), &a), &b) in d.iter_mut().zip(r(c)).zip(r(a)).zip(r(b)) {
                    *d = dt.round(if c != 0.0 { a } else { b });
                }
            }
            InstKind::Cast(a) => {
                for (d, &x) in d.iter_mut().zip(r(a)) {
                    *d = dt.round(x);
                }
            }
            InstKind::MulAdd(x, y, z, op) => {
                for (((d, &x), &y), &z) in d.iter_mut().zip(r(x)).zip(r(y)).zip(r(z)) {
                    let v = dt.round(dt.round(x * y) + z);
                    *d = op.map_or(v, |op| dt.round(op.eval(v)));
                }
            }
            InstKind::Reduced => d.copy_from_slice(&reduced[..n]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`wrap_to`] against the interpreter's cast (`DType::round` in f64) on random values
    /// of every magnitude, NaN and the infinities, in chunks that take either path.
    #[test]
    fn wrap_to_casts_as_the_interpreter() {
        let mut rng = rlx_ir::SplitMix64(24);
        let mut xs: Vec<f32> = (0..4096)
            .map(|_| {
                let mag = 2f64.powi(rng.below(80) as i32 - 8);
                let unit = rng.below(1 << 20) as f64 / (1 << 19) as f64 - 1.0;
                (unit * mag) as f32
            })
            .collect();
        xs.extend([
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            2147483648.0,
            -2147483648.0,
        ]);
        xs.extend([-2147483520.0, 2147483520.0, 9.3e18, -9.3e18, 255.5, -0.5]);
        for to in [DType::U8, DType::I8, DType::U16, DType::I16] {
            // whole chunks (some values past ±2^31) and small ones (mostly within)
            for chunk in [LANES, 7] {
                for x in xs.chunks(chunk) {
                    let mut d = vec![0f32; x.len()];
                    wrap_to(to, x, &mut d);
                    for (&v, &got) in x.iter().zip(&d) {
                        let want = to.round(v as f64);
                        assert_eq!(got as f64, want, "{to} of {v}");
                    }
                }
            }
        }
    }
}
