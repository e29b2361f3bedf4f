//! Running a compiled loop kernel: output points are split into blocks run in parallel;
//! each block is evaluated [`LANES`] points at a time. Reductions either walk the reduced
//! dims inside each output point (`Inner`, vectorized over reduction points), walk output
//! points in lanes (`Outer`, for short reductions), or, when there are too few output
//! points to keep every thread busy, split each long reduction across threads.

use super::lanes::{eval_f32, eval_f64, load, Direct, Inst, Lane, Layout, Loader, LANES};
use super::{LoopExec, Strategy};
use crate::fast::memory::{dispatch, Data, DataMut, Elem};
use crate::fast::pool;
use rlx_ir::{DType, ReduceOp};

/// Where a kernel input comes from.
#[derive(Clone, Copy)]
pub(crate) enum Src<'a> {
    /// a buffer
    Buf(Data<'a>),
    /// the output itself, read at the point being written (in-place library epilogue)
    InPlace,
}

/// Lane-type specific evaluation and reduction arithmetic.
pub(crate) trait LaneMath: Lane {
    fn eval(
        insts: &[Inst],
        regs: &mut [Self],
        n: usize,
        load: &mut Loader<'_, Self>,
        red: &[Self],
        direct: Direct<'_, '_>,
    );
    /// True for f32 lanes, the only ones that take [`Direct`] operands.
    const F32: bool;
    fn to_elem<T: Elem>(v: Self) -> T;
    fn identity(op: ReduceOp) -> Self;
    /// Folds many values into one accumulator.
    fn fold(op: ReduceOp, acc: Self, xs: &[Self]) -> Self;
    /// Combines two accumulators.
    fn combine(op: ReduceOp, a: Self, b: Self) -> Self;
    fn finish(op: ReduceOp, acc: Self, n: usize, dtype: DType) -> Self;
}

impl LaneMath for f32 {
    fn eval(
        insts: &[Inst],
        regs: &mut [f32],
        n: usize,
        load: &mut Loader<'_, f32>,
        red: &[f32],
        direct: Direct<'_, '_>,
    ) {
        eval_f32(insts, regs, n, load, red, direct)
    }
    const F32: bool = true;
    #[inline(always)]
    fn to_elem<T: Elem>(v: f32) -> T {
        T::from_f32(v)
    }
    fn identity(op: ReduceOp) -> f32 {
        op.identity() as f32
    }
    fn fold(op: ReduceOp, acc: f32, xs: &[f32]) -> f32 {
        let chunks = xs.chunks_exact(8);
        let rest = chunks.remainder();
        let mut p = [Self::identity(op); 8];
        let mut nan = [false; 8];
        match op {
            ReduceOp::Sum | ReduceOp::Mean => {
                chunks.for_each(|c| (0..8).for_each(|i| p[i] += c[i]))
            }
            ReduceOp::Prod => chunks.for_each(|c| (0..8).for_each(|i| p[i] *= c[i])),
            ReduceOp::Max => chunks.for_each(|c| {
                (0..8).for_each(|i| {
                    p[i] = if c[i] > p[i] { c[i] } else { p[i] };
                    nan[i] |= c[i].is_nan();
                })
            }),
            ReduceOp::Min => chunks.for_each(|c| {
                (0..8).for_each(|i| {
                    p[i] = if c[i] < p[i] { c[i] } else { p[i] };
                    nan[i] |= c[i].is_nan();
                })
            }),
        }
        let mut acc = p.iter().fold(acc, |a, &b| Self::combine(op, a, b));
        if nan.iter().any(|&n| n) {
            acc = f32::NAN;
        }
        rest.iter().fold(acc, |a, &b| Self::combine(op, a, b))
    }
    #[inline(always)]
    fn combine(op: ReduceOp, a: f32, b: f32) -> f32 {
        match op {
            ReduceOp::Sum | ReduceOp::Mean => a + b,
            ReduceOp::Prod => a * b,
            ReduceOp::Max if a.is_nan() || b.is_nan() => f32::NAN,
            ReduceOp::Min if a.is_nan() || b.is_nan() => f32::NAN,
            ReduceOp::Max => a.max(b),
            ReduceOp::Min => a.min(b),
        }
    }
    fn finish(op: ReduceOp, acc: f32, n: usize, _dtype: DType) -> f32 {
        match op {
            ReduceOp::Mean => acc / n as f32,
            _ => acc,
        }
    }
}

impl LaneMath for f64 {
    fn eval(
        insts: &[Inst],
        regs: &mut [f64],
        n: usize,
        load: &mut Loader<'_, f64>,
        red: &[f64],
        _direct: Direct<'_, '_>,
    ) {
        eval_f64(insts, regs, n, load, red)
    }
    const F32: bool = false;
    #[inline(always)]
    fn to_elem<T: Elem>(v: f64) -> T {
        T::from_f64(v)
    }
    fn identity(op: ReduceOp) -> f64 {
        op.identity()
    }
    fn fold(op: ReduceOp, acc: f64, xs: &[f64]) -> f64 {
        xs.iter().fold(acc, |a, &x| op.combine(a, x))
    }
    fn combine(op: ReduceOp, a: f64, b: f64) -> f64 {
        op.combine(a, b)
    }
    fn finish(op: ReduceOp, acc: f64, n: usize, dtype: DType) -> f64 {
        dtype.round(op.finish(acc, n))
    }
}

/// Per-worker registers and staging.
struct Scratch<L> {
    regs: Vec<L>,
    reduced: Vec<L>,
    inplace: Vec<L>,
    bases: Vec<isize>,
    /// per direct load: the broadcast value in every lane (filled on first use)
    bcast: Vec<f32>,
}

impl<L: LaneMath> Scratch<L> {
    fn new(e: &LoopExec) -> Scratch<L> {
        Scratch {
            regs: vec![L::default(); e.n_regs * LANES],
            reduced: vec![L::default(); LANES],
            inplace: vec![L::default(); LANES],
            bases: vec![0; e.offsets.len()],
            bcast: Vec::new(),
        }
    }
}

/// Runs the elementwise kernel `e` (no reduction) on the calling thread for output points
/// `start..start + out.len()`, `out` holding just those points; `srcs[0]` holds input 0 for
/// just those points too (input 0 must be read at the output position), the other inputs
/// whole. A library product uses it to finish each block of its result while it is in cache.
pub(crate) fn run_points(e: &LoopExec, srcs: &[Src<'_>], out: DataMut<'_>, start: usize) {
    assert!(
        e.reduce.is_none(),
        "run_points runs elementwise kernels only"
    );
    dispatch!(out, DataMut, o => {
        if e.fast {
            points::<_, f32>(e, srcs, o, start)
        } else {
            points::<_, f64>(e, srcs, o, start)
        }
    })
}

fn points<T: Elem, L: LaneMath>(e: &LoopExec, srcs: &[Src<'_>], out: &mut [T], start: usize) {
    let mut sc = Scratch::<L>::new(e);
    let mut at = start;
    for sub in out.chunks_mut(LANES) {
        let n = sub.len();
        epilogue(e, &mut sc, srcs, at, sub, start);
        at += n;
    }
    if e.stream_out {
        stream_fence();
    }
}

/// Runs `e` writing `out`; `srcs[k]` feeds kernel input `k`.
pub(crate) fn run(e: &LoopExec, srcs: &[Src<'_>], out: DataMut<'_>) {
    if e.n_out == 0 {
        return;
    }
    dispatch!(out, DataMut, o => {
        if e.fast {
            drive::<_, f32>(e, srcs, o)
        } else {
            drive::<_, f64>(e, srcs, o)
        }
    })
}

fn block_len(e: &LoopExec) -> usize {
    let per_point = if e.reduce.is_some() {
        e.n_red.max(1)
    } else {
        1
    };
    let min_points = (1usize << 14).div_ceil(per_point);
    let b = e.n_out.div_ceil(e.threads * 8).max(min_points).max(1);
    if e.reduce.is_none() || e.strategy == Strategy::Outer {
        b.div_ceil(LANES) * LANES
    } else {
        b
    }
}

fn drive<T: Elem, L: LaneMath>(e: &LoopExec, srcs: &[Src<'_>], out: &mut [T]) {
    if let Some(r) = e.reduce {
        let few_outputs = e.n_out < 2 * e.threads && e.threads > 1;
        if e.strategy == Strategy::Inner && few_outputs && e.n_red >= 1 << 15 {
            return drive_split::<T, L>(e, srcs, out);
        }
        let _ = r;
    }
    let block = block_len(e);
    pool::for_each_chunk_mut_init(
        out,
        block,
        || Scratch::<L>::new(e),
        |sc, bi, chunk| {
            let mut start = bi * block;
            for sub in chunk.chunks_mut(LANES) {
                let n = sub.len();
                if let Some(r) = e.reduce {
                    match e.strategy {
                        Strategy::Inner => {
                            for j in 0..n {
                                let acc = reduce_point(e, sc, srcs, start + j, 0, e.n_red);
                                sc.reduced[j] = L::finish(r.op, acc, e.n_red, r.dtype);
                            }
                        }
                        Strategy::Outer => reduce_lanes(e, sc, srcs, start, n),
                    }
                }
                epilogue(e, sc, srcs, start, sub, 0);
                start += n;
            }
            if e.stream_out {
                stream_fence();
            }
        },
    );
}

/// Few output points, long reductions: each reduction is split across threads; partial
/// results combine in a fixed order so runs are deterministic.
fn drive_split<T: Elem, L: LaneMath>(e: &LoopExec, srcs: &[Src<'_>], out: &mut [T]) {
    let r = e.reduce.expect("split drives reductions");
    let parts = e.threads * 4;
    let step = e.n_red.div_ceil(parts).div_ceil(LANES) * LANES;
    let n_parts = e.n_red.div_ceil(step);
    let mut sc = Scratch::<L>::new(e);
    let mut start = 0;
    for sub in out.chunks_mut(LANES) {
        for j in 0..sub.len() {
            let partials: Vec<L> = pool::map_init(
                n_parts,
                || Scratch::<L>::new(e),
                |s, p| {
                    reduce_point(
                        e,
                        s,
                        srcs,
                        start + j,
                        p * step,
                        ((p + 1) * step).min(e.n_red),
                    )
                },
            );
            let acc = partials
                .into_iter()
                .fold(L::identity(r.op), |a, b| L::combine(r.op, a, b));
            sc.reduced[j] = L::finish(r.op, acc, e.n_red, r.dtype);
        }
        epilogue(e, &mut sc, srcs, start, sub, 0);
        start += sub.len();
    }
}

/// The unfinished reduction of output point `o` over reduction points `lo..hi`.
fn reduce_point<L: LaneMath>(
    e: &LoopExec,
    sc: &mut Scratch<L>,
    srcs: &[Src<'_>],
    o: usize,
    lo: usize,
    hi: usize,
) -> L {
    let r = e.reduce.expect("reductions only");
    for (k, b) in sc.bases.iter_mut().enumerate() {
        *b = e.offsets[k] + e.out.offset(k, o);
    }
    let Scratch { regs, bases, .. } = sc;
    let mut acc = L::identity(r.op);
    let mut r0 = lo;
    while r0 < hi {
        let n = LANES.min(hi - r0);
        let mut ld = |k: usize, dst: &mut [L]| match srcs[k] {
            Src::Buf(d) => load(d, e.red.access(k), bases[k], r0, dst),
            Src::InPlace => unreachable!("epilogues have no reduction"),
        };
        L::eval(&e.prologue, regs, n, &mut ld, &[], Direct::default());
        acc = L::fold(r.op, acc, &regs[r.value * LANES..r.value * LANES + n]);
        r0 += n;
    }
    acc
}

/// Finished reductions of output points `start..start + n` into `sc.reduced`, lanes over
/// output points.
fn reduce_lanes<L: LaneMath>(
    e: &LoopExec,
    sc: &mut Scratch<L>,
    srcs: &[Src<'_>],
    start: usize,
    n: usize,
) {
    let r = e.reduce.expect("reductions only");
    let Scratch {
        regs,
        reduced,
        bases,
        ..
    } = sc;
    reduced[..n].fill(L::identity(r.op));
    for ri in 0..e.n_red {
        for (k, b) in bases.iter_mut().enumerate() {
            *b = e.offsets[k] + e.red.offset(k, ri);
        }
        let mut ld = |k: usize, dst: &mut [L]| match srcs[k] {
            Src::Buf(d) => load(d, e.out.access(k), bases[k], start, dst),
            Src::InPlace => unreachable!("epilogues have no reduction"),
        };
        L::eval(&e.prologue, regs, n, &mut ld, &[], Direct::default());
        let v = &regs[r.value * LANES..r.value * LANES + n];
        for (a, &x) in reduced[..n].iter_mut().zip(v) {
            *a = L::combine(r.op, *a, x);
        }
    }
    for a in &mut reduced[..n] {
        *a = L::finish(r.op, *a, e.n_red, r.dtype);
    }
}

/// Evaluates the epilogue for output points `start..start + sub.len()` and stores them.
/// With f32 lanes, contiguous f32 inputs are read in place and an f32 result is written
/// straight into `sub` (see [`LoopExec::direct_loads`]).
/// Evaluates output points `start..start + sub.len()` into `sub`; input 0 holds its data
/// from point `first0` on (0: the whole input).
fn epilogue<T: Elem, L: LaneMath>(
    e: &LoopExec,
    sc: &mut Scratch<L>,
    srcs: &[Src<'_>],
    start: usize,
    sub: &mut [T],
    first0: usize,
) {
    let n = sub.len();
    let offset = |k: usize| e.offsets[k] - if k == 0 { first0 as isize } else { 0 };
    let Scratch {
        regs,
        reduced,
        inplace,
        bcast,
        ..
    } = sc;
    if L::F32 && bcast.is_empty() && !e.direct_loads.is_empty() {
        bcast.resize(e.direct_loads.len() * LANES, 0.0);
        for (&(_, k), lanes) in e.direct_loads.iter().zip(bcast.chunks_mut(LANES)) {
            if let (Src::Buf(Data::F32(s)), Layout::Broadcast) = (srcs[k], e.out.layouts[k]) {
                lanes.fill(s[offset(k) as usize]);
            }
        }
    }
    if srcs.iter().any(|s| matches!(s, Src::InPlace)) {
        for (d, &s) in inplace.iter_mut().zip(sub.iter()) {
            *d = L::from_elem(s);
        }
    }
    let mut ld = |k: usize, dst: &mut [L]| match srcs[k] {
        Src::Buf(d) => load(d, e.out.access(k), offset(k), start, dst),
        Src::InPlace => dst.copy_from_slice(&inplace[..dst.len()]),
    };
    const MAX_ALIAS: usize = 8;
    let mut alias: [(usize, &[f32]); MAX_ALIAS] = [(usize::MAX, &[]); MAX_ALIAS];
    let mut n_alias = 0;
    if L::F32 {
        let inplace: &[f32] = match inplace.get(..n) {
            // SAFETY: L is f32 (`L::F32`); the copy is only read from here on.
            Some(ip) => unsafe { std::slice::from_raw_parts(ip.as_ptr().cast(), n) },
            None => &[],
        };
        let direct = e.direct_loads.iter().zip(bcast.chunks(LANES));
        for (&(reg, k), lanes) in direct.take(MAX_ALIAS) {
            let a = match (srcs[k], e.out.layouts[k]) {
                (Src::Buf(Data::F32(_)), Layout::Broadcast) => (reg, &lanes[..n]),
                (Src::Buf(Data::F32(s)), _) => {
                    let o = (offset(k) + start as isize) as usize;
                    (reg, &s[o..o + n])
                }
                // the op result, copied out of the output above: read from that copy
                (Src::InPlace, Layout::Contiguous) if inplace.len() == n => (reg, inplace),
                _ => continue,
            };
            alias[n_alias] = a;
            n_alias += 1;
        }
    }
    let alias = &alias[..n_alias];
    let aliased = |r: usize| alias.iter().find(|a| a.0 == r).map(|a| a.1);
    let stream =
        L::F32 && e.stream_out && std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>();
    let direct_out = !stream
        && L::F32
        && e.direct_out
        && aliased(e.result).is_none()
        && std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>();
    if direct_out {
        // SAFETY: T is f32 (checked above); the slice is reborrowed for this call only.
        let out = unsafe { std::slice::from_raw_parts_mut(sub.as_mut_ptr().cast::<f32>(), n) };
        let direct = Direct {
            alias,
            out: Some((e.result, out)),
        };
        L::eval(&e.epilogue, regs, n, &mut ld, reduced, direct);
        return;
    }
    let direct = Direct { alias, out: None };
    L::eval(&e.epilogue, regs, n, &mut ld, reduced, direct);
    if stream {
        // SAFETY: T is f32 (checked above) and L is f32 (`L::F32`); both reborrowed here.
        let (out, regs) = unsafe {
            (
                std::slice::from_raw_parts_mut(sub.as_mut_ptr().cast::<f32>(), n),
                std::slice::from_raw_parts(regs.as_ptr().cast::<f32>(), regs.len()),
            )
        };
        let src = aliased(e.result).unwrap_or(&regs[e.result * LANES..e.result * LANES + n]);
        stream_store(out, src);
        return;
    }
    if let Some(s) = aliased(e.result) {
        if !round_to_bf16(sub, s) {
            for (o, &v) in sub.iter_mut().zip(s) {
                *o = T::from_f32(v);
            }
        }
        return;
    }
    let result = &regs[e.result * LANES..e.result * LANES + n];
    if L::F32 {
        // SAFETY: L is f32 (`L::F32`); the slice is reborrowed here only.
        let f = unsafe { std::slice::from_raw_parts(result.as_ptr().cast::<f32>(), n) };
        if round_to_bf16(sub, f) {
            return;
        }
    }
    for (o, &v) in sub.iter_mut().zip(result) {
        *o = L::to_elem(v);
    }
}

/// Stores f32 lanes into a bf16 output, 16 at a time with AVX-512 BF16 (round to nearest
/// even, as `bf16::from_f32`); false (nothing written) when `T` is not bf16 or the CPU
/// lacks the instructions.
fn round_to_bf16<T: Elem>(dst: &mut [T], src: &[f32]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<half::bf16>()
        && crate::fast::math::avx512_bf16()
    {
        // SAFETY: T is bf16 (checked above); the features were detected.
        unsafe {
            let dst =
                std::slice::from_raw_parts_mut(dst.as_mut_ptr().cast::<half::bf16>(), dst.len());
            crate::fast::math::round_to_bf16_avx512(dst, src);
        }
        return true;
    }
    let _ = (dst, src);
    false
}

/// Copies `src` to `dst` with non-temporal stores where the CPU has AVX: outputs much larger
/// than the caches skip the read-for-ownership of each line, a third of the traffic.
fn stream_store(dst: &mut [f32], src: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx") {
        // SAFETY: AVX is present.
        unsafe { stream_store_avx(dst, src) };
        return;
    }
    dst.copy_from_slice(src);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
fn stream_store_avx(dst: &mut [f32], src: &[f32]) {
    use std::arch::x86_64::*;
    let n = dst.len().min(src.len());
    let head = dst.as_ptr().align_offset(32).min(n);
    dst[..head].copy_from_slice(&src[..head]);
    let mut i = head;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n; dst + i is 32-byte aligned (head skipped to alignment).
        unsafe {
            _mm256_stream_ps(
                dst.as_mut_ptr().add(i),
                _mm256_loadu_ps(src.as_ptr().add(i)),
            )
        };
        i += 8;
    }
    dst[i..n].copy_from_slice(&src[i..n]);
}

/// Orders this thread's non-temporal stores before what follows (the join that publishes
/// the output to other threads).
fn stream_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence has no preconditions on x86-64.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}
