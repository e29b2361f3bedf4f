//! Batched matmul through the `gemm` crate, and the gemm wrapper other kernels share.

use super::packed_gemm::{self, PackedRhs};
use crate::fast::memory::OutPtr;
use crate::fast::pool;

/// A row-major-ish matrix operand: elements at `data[i * rs + j * cs]`.
#[derive(Clone, Copy)]
pub(crate) struct Mat<'a, T> {
    pub data: &'a [T],
    pub rs: usize,
    pub cs: usize,
}

/// `c[m x n] (row stride ldc) = (accumulate ? c : 0) + scale * a[m x k] . b[k x n]` through
/// gemm; `threads > 1` splits the work over the pool ([`pool`]) by rows, or by columns when
/// the rows are few, each part one single-threaded gemm call.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm<T: Copy + Default + Send + Sync + 'static>(
    m: usize,
    n: usize,
    k: usize,
    a: Mat<'_, T>,
    b: Mat<'_, T>,
    c: &mut [T],
    ldc: usize,
    accumulate: bool,
    one: T,
    scale: T,
    threads: usize,
) {
    if m == 0 || n == 0 {
        return;
    }
    assert!((m - 1) * ldc + n <= c.len(), "gemm output out of bounds");
    if k == 0 {
        if !accumulate {
            (0..m).for_each(|i| c[i * ldc..i * ldc + n].fill(T::default()));
        }
        return;
    }
    assert!(
        (m - 1) * a.rs + (k - 1) * a.cs < a.data.len(),
        "gemm lhs out of bounds"
    );
    assert!(
        (k - 1) * b.rs + (n - 1) * b.cs < b.data.len(),
        "gemm rhs out of bounds"
    );
    // One gemm call over rows `rows` and columns `cols` of the result.
    let part = |rows: std::ops::Range<usize>, cols: std::ops::Range<usize>, c: *mut T| {
        // SAFETY: the asserts above keep every strided access of the whole product inside
        // the slices, a part reads and writes a subset of it, and parts write disjoint
        // elements of `c`, which does not overlap `a` or `b` (distinct borrows).
        unsafe {
            gemm::gemm(
                rows.len(),
                cols.len(),
                k,
                c.add(rows.start * ldc + cols.start),
                1,
                ldc as isize,
                accumulate,
                a.data.as_ptr().add(rows.start * a.rs),
                a.cs as isize,
                a.rs as isize,
                b.data.as_ptr().add(cols.start * b.cs),
                b.cs as isize,
                b.rs as isize,
                one,
                scale,
                false,
                false,
                false,
                gemm::Parallelism::None,
            )
        }
    };
    let threads = threads.min(pool::threads());
    if threads <= 1 || m * n * k < 1 << 15 {
        return part(0..m, 0..n, c.as_mut_ptr());
    }
    // about two parts per thread, by rows unless they are too few to share
    let parts = 2 * threads;
    let out = OutPtr(c.as_mut_ptr());
    if m >= parts * 4 || m >= n {
        let per = m.div_ceil(parts);
        pool::for_each(m.div_ceil(per), |t| {
            part(t * per..((t + 1) * per).min(m), 0..n, out.ptr())
        });
    } else {
        let per = n.div_ceil(parts);
        pool::for_each(n.div_ceil(per), |t| {
            part(0..m, t * per..((t + 1) * per).min(n), out.ptr())
        });
    }
}

/// Fewest rows of a batch of [`MatMulPlan::run_f32`] for which packing its right operand
/// pays (as attention's per-head products).
const PACKED_ROWS: usize = 32;

/// A compiled batched matmul `[.., m, k] x [.., k, n]`.
#[derive(Debug, Clone)]
pub(crate) struct MatMulPlan {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// element offsets of each batch's lhs and rhs matrices
    pub a_off: Vec<usize>,
    pub b_off: Vec<usize>,
    /// the rhs is shared and the lhs batches are contiguous: one gemm with m * batch rows
    pub fold: bool,
    /// many small matrices: batches in parallel, gemm single-threaded
    pub par_batches: bool,
    pub threads: usize,
}

impl MatMulPlan {
    /// Plans `a x b` giving `out_shape`.
    pub fn new(a: &[usize], b: &[usize], out_shape: &[usize], threads: usize) -> MatMulPlan {
        use rlx_interp::index::broadcast_map;
        let r = out_shape.len();
        let (m, n, k) = (out_shape[r - 2], out_shape[r - 1], a[a.len() - 1]);
        let batch = &out_shape[..r - 2];
        let a_off: Vec<usize> = broadcast_map(&a[..a.len() - 2], batch)
            .into_iter()
            .map(|i| i * m * k)
            .collect();
        let b_off: Vec<usize> = broadcast_map(&b[..b.len() - 2], batch)
            .into_iter()
            .map(|i| i * k * n)
            .collect();
        let fold =
            b_off.iter().all(|&o| o == 0) && a_off.iter().enumerate().all(|(i, &o)| o == i * m * k);
        let par_batches = !fold && a_off.len() >= 2 * threads && m * n * k <= 1 << 21;
        MatMulPlan {
            m,
            n,
            k,
            a_off,
            b_off,
            fold,
            par_batches,
            threads,
        }
    }

    /// Runs an f32 product: batches of at least [`PACKED_ROWS`] rows against their own
    /// right operand (attention's per-head products) on the packed AVX2/AVX-512 tiles, each
    /// right operand packed per run; the rest as [`MatMulPlan::run`].
    pub fn run_f32(&self, a: &[f32], b: &[f32], c: &mut [f32]) {
        let (m, n, k) = (self.m, self.n, self.k);
        if self.fold || m < PACKED_ROWS || n == 0 || k == 0 || !packed_gemm::supported() {
            return self.run(a, b, c, 1.0);
        }
        let one = |rhs: &mut PackedRhs, i: usize, ci: &mut [f32], threads: usize| {
            rhs.repack(&b[self.b_off[i]..], k, n, n, 1);
            packed_gemm::gemm_packed(m, &a[self.a_off[i]..][..m * k], rhs, ci, threads);
        };
        if self.par_batches {
            pool::for_each_chunk_mut_init(c, m * n, PackedRhs::empty, |rhs, i, ci| {
                one(rhs, i, ci, 1)
            });
        } else {
            let mut rhs = PackedRhs::empty();
            for (i, ci) in c.chunks_mut(m * n).enumerate() {
                one(&mut rhs, i, ci, self.threads);
            }
        }
    }

    /// Runs the product over typed slices (f32 or f64).
    pub fn run<T: Copy + Default + Send + Sync + 'static>(
        &self,
        a: &[T],
        b: &[T],
        c: &mut [T],
        one: T,
    ) {
        let (m, n, k) = (self.m, self.n, self.k);
        let mat_a = |off: usize| Mat {
            data: &a[off..],
            rs: k,
            cs: 1,
        };
        let mat_b = |off: usize| Mat {
            data: &b[off..],
            rs: n,
            cs: 1,
        };
        if self.fold {
            let rows = m * self.a_off.len();
            gemm(
                rows,
                n,
                k,
                mat_a(0),
                mat_b(0),
                c,
                n,
                false,
                one,
                one,
                self.threads,
            );
        } else if self.par_batches {
            pool::for_each_chunk_mut(c, (m * n).max(1), |i, ci| {
                gemm(
                    m,
                    n,
                    k,
                    mat_a(self.a_off[i]),
                    mat_b(self.b_off[i]),
                    ci,
                    n,
                    false,
                    one,
                    one,
                    1,
                )
            });
        } else {
            for (i, ci) in c.chunks_mut((m * n).max(1)).enumerate() {
                let (ao, bo) = (self.a_off[i], self.b_off[i]);
                gemm(
                    m,
                    n,
                    k,
                    mat_a(ao),
                    mat_b(bo),
                    ci,
                    n,
                    false,
                    one,
                    one,
                    self.threads,
                );
            }
        }
    }
}
