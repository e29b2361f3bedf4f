//! RLX's own f32 GEMM for products whose right operand is a weight (a param or a constant).
//!
//! The weight `b[k x n]` is packed into 16-column panels (`panel[k][16]`, zero-padded) and
//! kept for as long as the weight stays bound, so later runs never pack or convert it again
//! (f16 and bf16 weights are widened to f32 at packing; when to pack is the library
//! kernel's call). A run reads the left operand's rows in place (six row pointers) and
//! drives a 6 x 16 AVX2/FMA register tile: per step of k, two loads of the weight panel,
//! six broadcasts, twelve FMAs; the next panel and the tile's output lines are prefetched.
//! Blocks of k (≤ 512) keep a weight panel in L1 while row blocks (≤ 96 rows) stream
//! through it from L2. Threads split the weight panels when the product has few rows, the
//! rows otherwise, in several tasks per thread so that work stealing absorbs a core the host
//! slows down.
//!
//! The micro-kernel needs AVX2 and FMA ([`supported`]); elsewhere the planner keeps the
//! `gemm` crate. `RLX_CPU_PACKED_GEMM=0` turns this path off (an A/B switch).

use super::super::memory::{Data, OutPtr};
use crate::fast::pool;
use std::ops::Range;

/// Columns per weight panel (two 8-lane registers).
const NR: usize = 16;
/// Rows per register tile.
const MR: usize = 6;
/// Largest block of k kept in L1 per weight panel (512 measured ahead of 256 and 128 on
/// MiniLM's products, within this machine's noise).
const KC: usize = 512;
/// Fewest rows for which a weight is worth packing (each packed panel is then reused by at
/// least this many rows).
pub(crate) const MIN_ROWS: usize = 16;
/// Largest block of rows per L2 block.
const MC: usize = 96;

/// A cache line of f32s: the packed buffers are 64-byte aligned.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([f32; 16]);

fn lines(len: usize) -> Vec<Line> {
    vec![Line([0.0; 16]); len.div_ceil(16)]
}

fn as_f32(v: &[Line]) -> &[f32] {
    // SAFETY: `Line` is `repr(C)` over 16 f32s with no padding.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const f32, v.len() * 16) }
}

fn as_f32_mut(v: &mut [Line]) -> &mut [f32] {
    // SAFETY: as above.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut f32, v.len() * 16) }
}

/// True when this CPU runs the packed micro-kernel (x86-64 with AVX2 and FMA) and
/// `RLX_CPU_PACKED_GEMM` is not `0`.
pub(crate) fn supported() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| crate::settings::PACKED_GEMM.switch() && fma())
}

/// True when the CPU has AVX2 and FMA (checked once).
pub(crate) fn fma() -> bool {
    static FMA: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FMA.get_or_init(cpu_has_fma)
}

/// True when the CPU has AVX-512F (checked once) and `RLX_CPU_AVX512` is not `0`: the
/// packed tiles then cover two panels (6 x 32) with 512-bit registers.
pub(crate) fn avx512() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| crate::settings::AVX512.switch() && fma() && cpu_has_avx512())
}

#[cfg(target_arch = "x86_64")]
fn cpu_has_avx512() -> bool {
    is_x86_feature_detected!("avx512f")
}

#[cfg(not(target_arch = "x86_64"))]
fn cpu_has_avx512() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
fn cpu_has_fma() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
}

#[cfg(not(target_arch = "x86_64"))]
fn cpu_has_fma() -> bool {
    false
}

/// A weight `b[k x n]` packed into 16-column panels.
pub(crate) struct PackedRhs {
    k: usize,
    n: usize,
    data: Vec<Line>,
}

impl std::fmt::Debug for PackedRhs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PackedRhs({} x {})", self.k, self.n)
    }
}

impl PackedRhs {
    /// Packs the row-major `b[k x n]` (any float dtype, widened to f32).
    pub fn pack(b: Data<'_>, k: usize, n: usize) -> PackedRhs {
        let widened;
        let src: &[f32] = match b.f32() {
            Some(s) => s,
            None => {
                let mut w = vec![0.0f32; k * n];
                b.load_f32(&mut w);
                widened = w;
                &widened
            }
        };
        let mut packed = PackedRhs::empty();
        packed.repack(src, k, n, n, 1);
        packed
    }

    /// No matrix yet; [`PackedRhs::repack`] fills it.
    pub fn empty() -> PackedRhs {
        PackedRhs {
            k: 0,
            n: 0,
            data: Vec::new(),
        }
    }

    /// Packs `b[k x n]` with element `(i, j)` at `src[i * rs + j * cs]`, reusing this
    /// storage (per-head operands of attention are packed this way).
    pub fn repack(&mut self, src: &[f32], k: usize, n: usize, rs: usize, cs: usize) {
        if k > 0 && n > 0 {
            assert!(
                (k - 1) * rs + (n - 1) * cs < src.len(),
                "packed operand out of bounds"
            );
        }
        let panels = n.div_ceil(NR);
        let elems = panels * k * NR;
        if self.data.len() * 16 < elems {
            self.data = lines(elems);
        }
        let dst = as_f32_mut(&mut self.data);
        for p in 0..panels {
            let cols = NR.min(n - p * NR);
            for kk in 0..k {
                let to = &mut dst[(p * k + kk) * NR..][..NR];
                if cs == 1 {
                    to[..cols].copy_from_slice(&src[kk * rs + p * NR..][..cols]);
                } else {
                    for (j, t) in to[..cols].iter_mut().enumerate() {
                        *t = src[kk * rs + (p * NR + j) * cs];
                    }
                }
                to[cols..].fill(0.0);
            }
        }
        (self.k, self.n) = (k, n);
    }
}

/// `c[m x n] = a[m x k] . b` with `a` and `c` row-major and contiguous; `threads > 1` splits
/// the work over the current pool ([`pool`]). Needs [`supported`] only for speed: without AVX2
/// and FMA the tiles run in plain Rust.
pub(crate) fn gemm_packed(m: usize, a: &[f32], b: &PackedRhs, c: &mut [f32], threads: usize) {
    gemm_packed_strided(m, a, b.k, b, c, b.n, threads)
}

/// [`gemm_packed`] with row strides: row `i` of `a` starts at `i * lda`, row `i` of `c` at
/// `i * ldc` (`lda >= k`, `ldc >= n`; the elements between rows are not touched).
pub(crate) fn gemm_packed_strided(
    m: usize,
    a: &[f32],
    lda: usize,
    b: &PackedRhs,
    c: &mut [f32],
    ldc: usize,
    threads: usize,
) {
    gemm_split(m, a, lda, b, c, ldc, threads, None);
}

/// A callback given rows of a product as soon as they are written: the first row and the
/// rows themselves (`n` columns each).
pub(crate) type Finish<'f> = &'f (dyn Fn(usize, &mut [f32]) + Sync);

/// [`gemm_packed`] that calls `finish` as soon as each task has written whole rows of `c`,
/// on the task's thread, so an epilogue runs on them while they are in cache. Returns
/// false, computing nothing, when the product would split by columns (few rows for the
/// threads); the caller then runs it whole.
pub(crate) fn gemm_packed_rows(
    m: usize,
    a: &[f32],
    b: &PackedRhs,
    c: &mut [f32],
    threads: usize,
    finish: Finish<'_>,
) -> bool {
    if m > 0 && b.n > 0 && b.k > 0 && !splits_rows(m, b.n.div_ceil(NR), b.k * b.n, threads) {
        return false;
    }
    gemm_split(m, a, b.k, b, c, b.n, threads, Some(finish));
    true
}

/// True when a product of `m` rows splits over `threads` by rows (each task all columns).
fn splits_rows(m: usize, panels: usize, kn: usize, threads: usize) -> bool {
    threads <= 1
        || m * kn < 1 << 16
        || m / threads >= MC
        || m >= 64 * threads
        || panels < 2 * threads
}

#[allow(clippy::too_many_arguments)]
fn gemm_split(
    m: usize,
    a: &[f32],
    lda: usize,
    b: &PackedRhs,
    c: &mut [f32],
    ldc: usize,
    threads: usize,
    finish: Option<Finish<'_>>,
) {
    let (k, n) = (b.k, b.n);
    if m == 0 || n == 0 {
        return;
    }
    assert!(lda >= k && ldc >= n, "packed gemm row strides too short");
    assert!(
        a.len() >= (m - 1) * lda + k,
        "packed gemm lhs out of bounds"
    );
    assert!(
        c.len() >= (m - 1) * ldc + n,
        "packed gemm output out of bounds"
    );
    if k == 0 {
        c.chunks_mut(ldc).take(m).for_each(|r| r[..n].fill(0.0));
        if let Some(f) = finish {
            f(0, &mut c[..m * n]);
        }
        return;
    }
    let panels = n.div_ceil(NR);
    let out = OutPtr(c.as_mut_ptr());
    let run = |rows: Range<usize>, cols: Range<usize>| {
        // SAFETY: `rows` x `cols` is inside `c` and no other task writes it.
        unsafe { block(rows.clone(), cols.clone(), a, lda, b, out.ptr(), ldc) };
        if let Some(f) = finish {
            debug_assert!(
                cols == (0..panels) && ldc == n,
                "finish needs whole, packed rows"
            );
            // SAFETY: these rows are inside `c`, written by this task alone (above).
            let done = unsafe {
                std::slice::from_raw_parts_mut(out.ptr().add(rows.start * n), rows.len() * n)
            };
            f(rows.start, done);
        }
    };
    let threads = threads.max(1);
    if threads == 1 || m * n * k < 1 << 16 {
        run(0..m, 0..panels);
    } else if splits_rows(m, panels, k * n, threads) {
        // tasks of one row block each (every block streams the weight once either way), so
        // work stealing evens out a thread that runs slow; the rows are first cut into one
        // equal share per thread, so the blocks add up evenly (blocks of the whole range
        // leave one thread a block more: 3 blocks of 256 rows on 2 threads ran at 71%)
        let tasks = row_tasks(m, threads);
        pool::for_each(tasks.len(), |t| run(tasks[t].clone(), 0..panels));
    } else {
        // about four tasks per thread; each rereads the activations (L2-resident)
        let per = panels.div_ceil(4 * threads).max(4);
        pool::for_each(panels.div_ceil(per), |t| {
            run(0..m, t * per..((t + 1) * per).min(panels))
        });
    }
}

/// Row ranges for `threads` workers: `m` rows cut into one share per thread (boundaries
/// on multiples of [`MR`]), each share into blocks of at most about [`MC`] rows.
fn row_tasks(m: usize, threads: usize) -> Vec<Range<usize>> {
    let cut = |t: usize| (m * t / threads).div_ceil(MR) * MR;
    let mut tasks = Vec::new();
    for t in 0..threads {
        let (lo, hi) = (cut(t).min(m), cut(t + 1).min(m));
        if lo >= hi {
            continue;
        }
        let per = even_block(hi - lo, MC, MR);
        let mut r = lo;
        while r < hi {
            tasks.push(r..(r + per).min(hi));
            r += per;
        }
    }
    tasks
}

/// Splits `len` into blocks of at most `max`, as even as possible, rounded up to `unit`.
fn even_block(len: usize, max: usize, unit: usize) -> usize {
    len.div_ceil(len.div_ceil(max)).div_ceil(unit) * unit
}

/// One register tile's job.
struct Tile {
    /// the six rows of the left operand at the block's first k (rows past the end repeat
    /// the last row; their results are dropped)
    a: [*const f32; MR],
    /// the weight panel at the block's first k
    b: *const f32,
    /// the next panel at the same k when the tile covers two (AVX-512: 6 x 32)
    b1: Option<*const f32>,
    kc: usize,
    /// lines of the next panel to prefetch, one per four steps of k
    prefetch: *const f32,
    /// the panel after it, prefetched alongside by the two-panel tile
    prefetch1: *const f32,
    prefetch_lines: usize,
    /// the output tile, row stride `ldc`, of which `rows x cols` are stored
    c: *mut f32,
    ldc: usize,
    rows: usize,
    cols: usize,
    /// add to the output instead of overwriting it
    accumulate: bool,
}

/// One thread's share: rows `rows` of the output, weight panels `cols`.
///
/// # Safety
/// `c` points to the `m x n` output (row stride `ldc`) and no other thread writes these
/// tiles.
unsafe fn block(
    rows: Range<usize>,
    cols: Range<usize>,
    a: &[f32],
    lda: usize,
    b: &PackedRhs,
    c: *mut f32,
    ldc: usize,
) {
    let (k, n) = (b.k, b.n);
    let bdata = as_f32(&b.data);
    let wide = avx512();
    let kc_max = even_block(k, KC, 4);
    let mc_max = even_block(rows.len(), MC, MR);
    let mut k0 = 0;
    while k0 < k {
        let kc = kc_max.min(k - k0);
        let per_tile = kc.div_ceil(4);
        let mut m0 = rows.start;
        while m0 < rows.end {
            let mc = mc_max.min(rows.end - m0);
            let tiles = mc.div_ceil(MR);
            let mut p = cols.start;
            while p < cols.end {
                let at = |p: usize| bdata[(p * k + k0) * NR..][..kc * NR].as_ptr();
                let panel = at(p);
                let panel1 = (wide && p + 1 < cols.end).then(|| at(p + 1));
                let width = if panel1.is_some() { 2 } else { 1 };
                // the weight streams from memory once per block: while this panel's tiles
                // run from L1, the first tiles fetch the next panel (two for wide tiles)
                let next = (p + width < cols.end).then(|| at(p + width));
                let next1 = (wide && p + width + 1 < cols.end).then(|| at(p + width + 1));
                for t in 0..tiles {
                    let r0 = m0 + t * MR;
                    let last = (m0 + mc).min(r0 + MR) - 1;
                    let first_line = (t * per_tile).min(kc);
                    let tile = Tile {
                        a: std::array::from_fn(|r| a[(r0 + r).min(last) * lda + k0..].as_ptr()),
                        b: panel,
                        b1: panel1,
                        kc,
                        prefetch: next.map_or(panel, |q| q.add(first_line * NR)),
                        prefetch1: next1.or(next).map_or(panel, |q| q.add(first_line * NR)),
                        prefetch_lines: next.map_or(0, |_| per_tile.min(kc - first_line)),
                        c: c.add(r0 * ldc + p * NR),
                        ldc,
                        rows: last + 1 - r0,
                        cols: (width * NR).min(n - p * NR),
                        accumulate: k0 > 0,
                    };
                    run_tile(&tile);
                }
                p += width;
            }
            m0 += mc;
        }
        k0 += kc;
    }
}

/// Runs one tile on the best kernel this CPU has.
///
/// # Safety
/// As [`Tile`] describes: `a[r]` holds `kc` readable f32s, `b` `16 * kc`, the output tile
/// `rows x cols` writable.
unsafe fn run_tile(t: &Tile) {
    #[cfg(target_arch = "x86_64")]
    if t.b1.is_some() {
        return x86_512::tile(t);
    }
    #[cfg(target_arch = "x86_64")]
    if fma() {
        return x86::tile_fma(t);
    }
    let mut acc = [[0.0f32; NR]; MR];
    let a: [&[f32]; MR] = std::array::from_fn(|r| std::slice::from_raw_parts(t.a[r], t.kc));
    let b = std::slice::from_raw_parts(t.b, t.kc * NR);
    micro_portable(a, b, t.kc, &mut acc);
    store(t, &acc);
}

/// Stores (or adds) the first `rows x cols` of `acc` into the tile's output.
///
/// # Safety
/// The output tile is writable.
unsafe fn store<const W: usize>(t: &Tile, acc: &[[f32; W]; MR]) {
    for (r, row) in acc.iter().enumerate().take(t.rows) {
        let dst = std::slice::from_raw_parts_mut(t.c.add(r * t.ldc), t.cols);
        if t.accumulate {
            dst.iter_mut().zip(row).for_each(|(d, v)| *d += v);
        } else {
            dst.copy_from_slice(&row[..t.cols]);
        }
    }
}

/// Asks for the tile's output lines, written (or read back) at the end, so their misses
/// overlap the arithmetic instead of stalling the stores.
///
/// # Safety
/// The output tile is inside its allocation.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn prefetch_output(t: &Tile) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    for r in 0..t.rows {
        let row = t.c.add(r * t.ldc);
        _mm_prefetch::<_MM_HINT_T0>(row as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(row.add(t.cols - 1) as *const i8);
    }
}

/// The tile in plain Rust (CPUs without AVX2/FMA, and tests).
fn micro_portable(a: [&[f32]; MR], b: &[f32], kc: usize, acc: &mut [[f32; NR]; MR]) {
    for p in 0..kc {
        let bp = &b[p * NR..][..NR];
        for (r, row) in acc.iter_mut().enumerate() {
            let av = a[r][p];
            row.iter_mut()
                .zip(bp)
                .for_each(|(c, &bv)| *c = av.mul_add(bv, *c));
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{prefetch_output, store, Tile, MR, NR};
    use std::arch::x86_64::*;

    /// The 6 x 16 AVX2/FMA tile: twelve accumulators, k unrolled by four, one prefetch of
    /// the next panel per four steps; full tiles are stored straight from the registers.
    ///
    /// # Safety
    /// AVX2 and FMA are present, and `t` is valid as [`Tile`] describes.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn tile_fma(t: &Tile) {
        prefetch_output(t);
        let mut c = [_mm256_setzero_ps(); 2 * MR];
        let [a0, a1, a2, a3, a4, a5] = t.a;
        let rows = [a0, a1, a2, a3, a4, a5];
        let mut b = t.b;
        macro_rules! step {
            ($i:expr, $o:expr) => {{
                let b0 = _mm256_loadu_ps(b.add($o * NR));
                let b1 = _mm256_loadu_ps(b.add($o * NR + 8));
                for r in 0..MR {
                    let x = _mm256_broadcast_ss(&*rows[r].add($i + $o));
                    c[2 * r] = _mm256_fmadd_ps(x, b0, c[2 * r]);
                    c[2 * r + 1] = _mm256_fmadd_ps(x, b1, c[2 * r + 1]);
                }
            }};
        }
        let mut i = 0;
        let mut line = 0;
        while i + 4 <= t.kc {
            if line < t.prefetch_lines {
                _mm_prefetch::<_MM_HINT_T0>(t.prefetch.add(line * NR) as *const i8);
                line += 1;
            }
            step!(i, 0);
            step!(i, 1);
            step!(i, 2);
            step!(i, 3);
            b = b.add(4 * NR);
            i += 4;
        }
        while i < t.kc {
            step!(i, 0);
            b = b.add(NR);
            i += 1;
        }
        while line < t.prefetch_lines {
            _mm_prefetch::<_MM_HINT_T0>(t.prefetch.add(line * NR) as *const i8);
            line += 1;
        }
        if t.rows == MR && t.cols == NR {
            for (r, pair) in c.chunks_exact(2).enumerate() {
                let dst = t.c.add(r * t.ldc);
                let (mut x0, mut x1) = (pair[0], pair[1]);
                if t.accumulate {
                    x0 = _mm256_add_ps(x0, _mm256_loadu_ps(dst));
                    x1 = _mm256_add_ps(x1, _mm256_loadu_ps(dst.add(8)));
                }
                _mm256_storeu_ps(dst, x0);
                _mm256_storeu_ps(dst.add(8), x1);
            }
        } else {
            let mut acc = [[0.0f32; NR]; MR];
            for (row, pair) in acc.iter_mut().zip(c.chunks_exact(2)) {
                _mm256_storeu_ps(row.as_mut_ptr(), pair[0]);
                _mm256_storeu_ps(row.as_mut_ptr().add(8), pair[1]);
            }
            store(t, &acc);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86_512 {
    use super::{prefetch_output, store, Tile, MR, NR};
    use std::arch::x86_64::*;

    /// The 6 x 32 AVX-512 tile over two panels: twelve 16-lane accumulators, k unrolled by
    /// four, the next panels prefetched as in the AVX2 tile.
    ///
    /// # Safety
    /// AVX-512F is present, and `t` is valid as [`Tile`] describes with `b1` set.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn tile(t: &Tile) {
        prefetch_output(t);
        let mut c = [_mm512_setzero_ps(); 2 * MR];
        let rows = t.a;
        let (mut b0p, mut b1p) = (t.b, t.b1.expect("two panels"));
        macro_rules! step {
            ($i:expr, $o:expr) => {{
                let b0 = _mm512_loadu_ps(b0p.add($o * NR));
                let b1 = _mm512_loadu_ps(b1p.add($o * NR));
                for r in 0..MR {
                    let x = _mm512_set1_ps(*rows[r].add($i + $o));
                    c[2 * r] = _mm512_fmadd_ps(x, b0, c[2 * r]);
                    c[2 * r + 1] = _mm512_fmadd_ps(x, b1, c[2 * r + 1]);
                }
            }};
        }
        let mut i = 0;
        let mut line = 0;
        while i + 4 <= t.kc {
            if line < t.prefetch_lines {
                _mm_prefetch::<_MM_HINT_T0>(t.prefetch.add(line * NR) as *const i8);
                _mm_prefetch::<_MM_HINT_T0>(t.prefetch1.add(line * NR) as *const i8);
                line += 1;
            }
            step!(i, 0);
            step!(i, 1);
            step!(i, 2);
            step!(i, 3);
            b0p = b0p.add(4 * NR);
            b1p = b1p.add(4 * NR);
            i += 4;
        }
        while i < t.kc {
            step!(i, 0);
            b0p = b0p.add(NR);
            b1p = b1p.add(NR);
            i += 1;
        }
        while line < t.prefetch_lines {
            _mm_prefetch::<_MM_HINT_T0>(t.prefetch.add(line * NR) as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(t.prefetch1.add(line * NR) as *const i8);
            line += 1;
        }
        if t.rows == MR && t.cols == 2 * NR {
            for (r, pair) in c.chunks_exact(2).enumerate() {
                let dst = t.c.add(r * t.ldc);
                let (mut x0, mut x1) = (pair[0], pair[1]);
                if t.accumulate {
                    x0 = _mm512_add_ps(x0, _mm512_loadu_ps(dst));
                    x1 = _mm512_add_ps(x1, _mm512_loadu_ps(dst.add(NR)));
                }
                _mm512_storeu_ps(dst, x0);
                _mm512_storeu_ps(dst.add(NR), x1);
            }
        } else {
            let mut acc = [[0.0f32; 2 * NR]; MR];
            for (row, pair) in acc.iter_mut().zip(c.chunks_exact(2)) {
                _mm512_storeu_ps(row.as_mut_ptr(), pair[0]);
                _mm512_storeu_ps(row.as_mut_ptr().add(NR), pair[1]);
            }
            store(t, &acc);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(m: usize, n: usize, k: usize, a: &[f32], b: &[f32]) -> Vec<f64> {
        let mut c = vec![0.0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k)
                    .map(|p| a[i * k + p] as f64 * b[p * n + j] as f64)
                    .sum();
            }
        }
        c
    }

    fn random(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn matches_f64_reference_over_edge_shapes() {
        let pool = pool::Pool::new(3).unwrap();
        let shapes = [
            (1, 1, 1),
            (7, 17, 3),
            (6, 16, 4),
            (13, 33, 257),
            (200, 40, 600),
            (128, 96, 384),
            (5, 300, 70),
            (97, 15, 9),
        ];
        for (i, &(m, n, k)) in shapes.iter().enumerate() {
            let a = random(m * k, 2 * i as u64 + 1);
            let b = random(k * n, 2 * i as u64 + 2);
            let want = reference(m, n, k, &a, &b);
            let packed = PackedRhs::pack(Data::F32(&b), k, n);
            for threads in [1, 2, 3] {
                let mut c = vec![f32::NAN; m * n];
                pool::with(&pool, || gemm_packed(m, &a, &packed, &mut c, threads));
                let err = c
                    .iter()
                    .zip(&want)
                    .map(|(&x, &y)| (x as f64 - y).abs())
                    .fold(0.0, f64::max);
                let scale = want.iter().map(|v| v.abs()).fold(1.0, f64::max);
                assert!(
                    err <= 1e-5 * scale * (k as f64).sqrt(),
                    "{m}x{n}x{k} threads {threads}: max error {err}"
                );
            }
        }
    }

    #[test]
    fn row_tasks_cover_the_rows_once_in_even_shares() {
        for (m, threads) in [(256, 2), (1024, 2), (1000, 3), (7, 2), (96, 4), (2048, 2)] {
            let tasks = row_tasks(m, threads);
            let mut next = 0;
            for t in &tasks {
                assert_eq!(t.start, next, "{m} rows, {threads} threads: {tasks:?}");
                assert!(t.end > t.start && t.len() <= MC + MR);
                next = t.end;
            }
            assert_eq!(next, m);
            // each thread's share differs from m / threads by less than a register tile
            for t in 0..threads {
                let lo = (m * t / threads).div_ceil(MR) * MR;
                let hi = (m * (t + 1) / threads).div_ceil(MR) * MR;
                let share = hi.min(m) - lo.min(m);
                assert!(
                    share.abs_diff(m / threads) <= MR,
                    "{m} rows, {threads} threads"
                );
            }
        }
    }

    #[test]
    fn two_panel_tile_matches_two_portable_tiles() {
        if !avx512() {
            rlx_driver::testing::skip(
                "packed_gemm::two_panel_tile_matches_two_portable_tiles",
                "no AVX-512F on this CPU (or RLX_CPU_AVX512=0)",
            );
            return;
        }
        let kc = 37;
        let a = random(MR * kc, 9);
        let (b0, b1) = (random(NR * kc, 10), random(NR * kc, 11));
        let rows: [&[f32]; MR] = std::array::from_fn(|r| &a[r * kc..][..kc]);
        let (mut want0, mut want1) = ([[0.0f32; NR]; MR], [[0.0f32; NR]; MR]);
        micro_portable(rows, &b0, kc, &mut want0);
        micro_portable(rows, &b1, kc, &mut want1);
        for (tile_rows, cols, accumulate) in [
            (MR, 2 * NR, false),
            (MR, 2 * NR, true),
            (4, 27, false),
            (5, 20, true),
        ] {
            let mut got = [[1.0f32; 2 * NR]; MR];
            let tile = Tile {
                a: std::array::from_fn(|r| a[r * kc..].as_ptr()),
                b: b0.as_ptr(),
                b1: Some(b1.as_ptr()),
                kc,
                prefetch: b0.as_ptr(),
                prefetch1: b1.as_ptr(),
                prefetch_lines: 3,
                c: got.as_mut_ptr() as *mut f32,
                ldc: 2 * NR,
                rows: tile_rows,
                cols,
                accumulate,
            };
            // SAFETY: the operands hold kc steps and the tile is 6 x 32, row stride 32.
            unsafe { run_tile(&tile) };
            for (r, g) in got.iter().enumerate() {
                for (j, &g) in g.iter().enumerate() {
                    let w = if j < NR {
                        want0[r][j]
                    } else {
                        want1[r][j - NR]
                    };
                    let w = if r >= tile_rows || j >= cols {
                        1.0
                    } else if accumulate {
                        w + 1.0
                    } else {
                        w
                    };
                    assert!(
                        (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                        "{g} vs {w} at {r},{j}"
                    );
                }
            }
        }
    }

    #[test]
    fn portable_tile_matches_the_fma_tile() {
        let kc = 37;
        let a = random(MR * kc, 7);
        let b = random(NR * kc, 8);
        let rows: [&[f32]; MR] = std::array::from_fn(|r| &a[r * kc..][..kc]);
        let mut want = [[0.0f32; NR]; MR];
        micro_portable(rows, &b, kc, &mut want);
        for (cols, accumulate) in [(NR, false), (NR, true), (11, false), (11, true)] {
            let mut got = [[1.0f32; NR]; MR];
            let tile = Tile {
                a: std::array::from_fn(|r| a[r * kc..].as_ptr()),
                b: b.as_ptr(),
                b1: None,
                kc,
                prefetch: b.as_ptr(),
                prefetch1: b.as_ptr(),
                prefetch_lines: 3,
                c: got.as_mut_ptr() as *mut f32,
                ldc: NR,
                rows: MR,
                cols,
                accumulate,
            };
            // SAFETY: the operands hold kc steps and the tile is 6 x 16, row stride 16.
            unsafe { run_tile(&tile) };
            for (g, w) in got.iter().zip(&want) {
                for j in 0..NR {
                    let w = if j >= cols {
                        1.0
                    } else if accumulate {
                        w[j] + 1.0
                    } else {
                        w[j]
                    };
                    assert!(
                        (g[j] - w).abs() <= 1e-5 * (1.0 + w.abs()),
                        "{} vs {w}",
                        g[j]
                    );
                }
            }
        }
    }

    #[test]
    fn half_precision_weights_are_widened_at_packing() {
        let (k, n) = (9, 20);
        let b = random(k * n, 3);
        let h: Vec<half::f16> = b.iter().map(|&v| half::f16::from_f32(v)).collect();
        let packed = PackedRhs::pack(Data::F16(&h), k, n);
        let a = random(4 * k, 4);
        let mut c = vec![0.0; 4 * n];
        gemm_packed(4, &a, &packed, &mut c, 1);
        let widened: Vec<f32> = h.iter().map(|v| v.to_f32()).collect();
        let want = reference(4, n, k, &a, &widened);
        for (x, y) in c.iter().zip(&want) {
            assert!((*x as f64 - y).abs() < 1e-5);
        }
    }
}
