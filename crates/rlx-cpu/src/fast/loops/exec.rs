//! Running a compiled loop kernel: output points are split into blocks run in parallel;
//! each block is evaluated [`LANES`] points at a time. Reductions either walk the reduced
//! dims inside each output point (`Inner`, vectorized over reduction points), walk output
//! points in lanes (`Outer`, for short reductions), or, when there are too few output
//! points to keep every thread busy, split each long reduction across threads.

use super::lanes::{eval_f32, eval_f64, load, Inst, Lane, Loader, LANES};
use super::{LoopExec, Strategy};
use crate::fast::memory::{dispatch, Data, DataMut, Elem};
use rayon::prelude::*;
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
    fn eval(insts: &[Inst], regs: &mut [Self], n: usize, load: &mut Loader<'_, Self>, red: &[Self]);
    fn to_elem<T: Elem>(v: Self) -> T;
    fn identity(op: ReduceOp) -> Self;
    /// Folds many values into one accumulator.
    fn fold(op: ReduceOp, acc: Self, xs: &[Self]) -> Self;
    /// Combines two accumulators.
    fn combine(op: ReduceOp, a: Self, b: Self) -> Self;
    fn finish(op: ReduceOp, acc: Self, n: usize, dtype: DType) -> Self;
}

impl LaneMath for f32 {
    fn eval(insts: &[Inst], regs: &mut [f32], n: usize, load: &mut Loader<'_, f32>, red: &[f32]) {
        eval_f32(insts, regs, n, load, red)
    }
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
    fn eval(insts: &[Inst], regs: &mut [f64], n: usize, load: &mut Loader<'_, f64>, red: &[f64]) {
        eval_f64(insts, regs, n, load, red)
    }
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
}

impl<L: LaneMath> Scratch<L> {
    fn new(e: &LoopExec) -> Scratch<L> {
        Scratch {
            regs: vec![L::default(); e.n_regs * LANES],
            reduced: vec![L::default(); LANES],
            inplace: vec![L::default(); LANES],
            bases: vec![0; e.offsets.len()],
        }
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
    out.par_chunks_mut(block).enumerate().for_each_init(
        || Scratch::<L>::new(e),
        |sc, (bi, chunk)| {
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
                epilogue(e, sc, srcs, start, sub);
                start += n;
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
            let partials: Vec<L> = (0..n_parts)
                .into_par_iter()
                .map_init(
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
                )
                .collect();
            let acc = partials
                .into_iter()
                .fold(L::identity(r.op), |a, b| L::combine(r.op, a, b));
            sc.reduced[j] = L::finish(r.op, acc, e.n_red, r.dtype);
        }
        epilogue(e, &mut sc, srcs, start, sub);
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
        L::eval(&e.prologue, regs, n, &mut ld, &[]);
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
        L::eval(&e.prologue, regs, n, &mut ld, &[]);
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
fn epilogue<T: Elem, L: LaneMath>(
    e: &LoopExec,
    sc: &mut Scratch<L>,
    srcs: &[Src<'_>],
    start: usize,
    sub: &mut [T],
) {
    let n = sub.len();
    let Scratch {
        regs,
        reduced,
        inplace,
        ..
    } = sc;
    if srcs.iter().any(|s| matches!(s, Src::InPlace)) {
        for (d, &s) in inplace.iter_mut().zip(sub.iter()) {
            *d = L::from_elem(s);
        }
    }
    let mut ld = |k: usize, dst: &mut [L]| match srcs[k] {
        Src::Buf(d) => load(d, e.out.access(k), e.offsets[k], start, dst),
        Src::InPlace => dst.copy_from_slice(&inplace[..dst.len()]),
    };
    L::eval(&e.epilogue, regs, n, &mut ld, reduced);
    for (o, &v) in sub
        .iter_mut()
        .zip(&regs[e.result * LANES..e.result * LANES + n])
    {
        *o = L::to_elem(v);
    }
}
