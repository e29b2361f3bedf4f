//! The integer GEMM of `Op::MatMulInteger` (`rlx_ir::int_matmul`): u8 activation rows
//! times an i8 weight packed once ([`pack`]), every product and sum in i32, then the
//! zero-point terms and an optional f32 scale per column, written straight to the output.
//!
//! `sum((a - za) * (b - zb)) = sum(a * b) - zb * sum(a) - za * sum(b) + k * za * zb`: the
//! tiles compute only `sum(a * b)` (AVX-512 VNNI `vpdpbusd`, else exact AVX2, else a scalar
//! loop; chosen once at run time), the row sums of `a` come with its packing and the column
//! sums of `b` with the weight's, so zero points cost one multiply-add per output. Results
//! equal the reference's integers exactly, on every instruction set.

pub(crate) mod im2col;
pub(crate) mod pack;
#[cfg(target_arch = "x86_64")]
mod x86;

use super::memory::OutPtr;
use super::pool;
use pack::{PackedA, PackedB, NR};

/// Columns of one tile (two panels).
const TILE_COLS: usize = 2 * NR;
/// Most rows of one tile.
const MAX_MR: usize = 8;
/// Rows per parallel task.
const ROW_BLOCK: usize = 64;
/// Columns per parallel task (a multiple of [`TILE_COLS`]).
const COL_BLOCK: usize = 64;

/// The tile kernels an instruction set provides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Isa {
    /// plain loops
    Scalar,
    /// `vpmaddwd` on i16 halves
    Avx2,
    /// `vpdpbusd` on 512-bit registers
    Avx512Vnni,
}

impl Isa {
    /// The best this CPU has (checked once; `RLX_CPU_AVX512=0` keeps AVX2).
    pub fn best() -> Isa {
        static BEST: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            {
                if crate::settings::AVX512.switch()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vnni")
                {
                    return Isa::Avx512Vnni;
                }
                if is_x86_feature_detected!("avx2") {
                    return Isa::Avx2;
                }
            }
            Isa::Scalar
        })
    }

    /// Every instruction set this CPU has, the scalar loop first (for tests).
    #[cfg(test)]
    pub fn all() -> Vec<Isa> {
        match Isa::best() {
            Isa::Scalar => vec![Isa::Scalar],
            Isa::Avx2 => vec![Isa::Scalar, Isa::Avx2],
            Isa::Avx512Vnni => vec![Isa::Scalar, Isa::Avx2, Isa::Avx512Vnni],
        }
    }

    /// Rows per tile.
    fn mr(self) -> usize {
        match self {
            Isa::Avx512Vnni => 8,
            Isa::Avx2 | Isa::Scalar => 4,
        }
    }
}

/// Where a VNNI tile goes: raw sums into a tile of [`TILE_COLS`] columns, or finished
/// straight into the output rows.
pub(crate) enum Dst<'a> {
    /// raw sums, row stride [`TILE_COLS`]
    Tile(&'a mut [i32]),
    /// `(raw + corr - zb * row_sum)`, times `scale` when it is not null
    Out(&'a TileOut),
}

/// The finishing terms and output of one tile, every pointer at the tile's first row or
/// column: `out[r * ldo + c] = (raw + corr[c] - zb[c] * row_sums[r]) (* scale[c])`, for
/// the first `nc` columns (i32 results when `scale` is null, else f32).
pub(crate) struct TileOut {
    pub(crate) corr: *const i32,
    pub(crate) zb: *const i32,
    pub(crate) scale: *const f32,
    pub(crate) row_sums: *const i32,
    /// i32 or f32 elements
    pub(crate) out: *mut u32,
    pub(crate) ldo: usize,
    pub(crate) nc: usize,
}

/// Where the results go: i32 sums, or f32 scaled ones (one scale, or one per column).
pub(crate) enum Out<'a> {
    I32(&'a mut [i32]),
    F32(&'a mut [f32], &'a [f32]),
}

/// Computes `out[m, n] = (a - a.zero) · (b - b_zero)` (then scaled, for [`Out::F32`]);
/// `b_zero` holds one zero point of the original weight or one per column.
pub(crate) fn gemm(
    isa: Isa,
    a: &PackedA,
    b: &PackedB,
    b_zero: &[i32],
    out: Out<'_>,
    threads: usize,
) {
    let (k, n) = (b.k, b.n);
    let m = a.row_sums.len();
    if m == 0 || n == 0 {
        return;
    }
    let za = a.zero;
    let zb: Vec<i32> = (0..n)
        .map(|j| b.zero(b_zero[if b_zero.len() == 1 { 0 } else { j }]))
        .collect();
    // k * za * zb - za * sum(b), per column
    let corr: Vec<i32> = (0..n)
        .map(|j| {
            (k as i32)
                .wrapping_mul(za)
                .wrapping_mul(zb[j])
                .wrapping_sub(za.wrapping_mul(b.col_sums[j]))
        })
        .collect();
    let zb_zero = zb.iter().all(|&z| z == 0);
    let (ptr_i, ptr_f, scale) = match out {
        Out::I32(o) => (
            OutPtr(o.as_mut_ptr()),
            OutPtr(std::ptr::null_mut()),
            &[][..],
        ),
        Out::F32(o, s) => (OutPtr(std::ptr::null_mut()), OutPtr(o.as_mut_ptr()), s),
    };
    // the fused VNNI tiles take one scale per column
    let scale_cols: Vec<f32> = match scale.len() {
        1 => vec![scale[0]; n],
        _ => scale.to_vec(),
    };
    let row_blocks = m.div_ceil(ROW_BLOCK);
    let col_blocks = n.div_ceil(COL_BLOCK);
    let task = |t: usize| {
        let (rb, cb) = (t % row_blocks, t / row_blocks);
        let rows = rb * ROW_BLOCK..((rb + 1) * ROW_BLOCK).min(m);
        let cols = cb * COL_BLOCK..((cb + 1) * COL_BLOCK).min(n);
        let mut tile = [0i32; MAX_MR * TILE_COLS];
        for j0 in cols.clone().step_by(TILE_COLS) {
            let nc = TILE_COLS.min(cols.end - j0);
            let mut i0 = rows.start;
            while i0 < rows.end {
                let mr = isa.mr().min(rows.end - i0);
                if isa == Isa::Avx512Vnni {
                    let base = i0 * n + j0;
                    let o = TileOut {
                        corr: corr[j0..].as_ptr(),
                        zb: zb[j0..].as_ptr(),
                        scale: match scale.is_empty() {
                            true => std::ptr::null(),
                            false => scale_cols[j0..].as_ptr(),
                        },
                        row_sums: a.row_sums[i0..i0 + mr].as_ptr(),
                        out: match scale.is_empty() {
                            true => ptr_i.ptr().wrapping_add(base).cast(),
                            false => ptr_f.ptr().wrapping_add(base).cast(),
                        },
                        ldo: n,
                        nc,
                    };
                    // SAFETY: rows i0..i0 + mr, columns j0..j0 + nc lie in the m x n output
                    // and belong to this task's block alone; the terms cover those columns
                    // and rows.
                    unsafe { raw_tile(isa, a, b, i0, mr, j0, nc, Dst::Out(&o)) };
                    i0 += mr;
                    continue;
                }
                // SAFETY: a tile destination is a slice.
                unsafe { raw_tile(isa, a, b, i0, mr, j0, nc, Dst::Tile(&mut tile[..])) };
                let cols = j0..j0 + nc;
                for r in 0..mr {
                    let i = i0 + r;
                    let raw = &tile[r * TILE_COLS..r * TILE_COLS + nc];
                    let terms = Terms {
                        corr: &corr[cols.clone()],
                        zb: &zb[cols.clone()],
                        row_sum: a.row_sums[i],
                        zb_zero,
                    };
                    // SAFETY: row i, columns j0..j0 + nc lie in the m x n output and belong
                    // to this task's block alone; the pointer of the variant in use is the
                    // non-null one.
                    let row = unsafe {
                        if scale.is_empty() {
                            Row::I32(std::slice::from_raw_parts_mut(
                                ptr_i.ptr().add(i * n + j0),
                                nc,
                            ))
                        } else {
                            let s = if scale.len() == 1 {
                                Scale::One(scale[0])
                            } else {
                                Scale::Columns(&scale[cols.clone()])
                            };
                            Row::F32(
                                std::slice::from_raw_parts_mut(ptr_f.ptr().add(i * n + j0), nc),
                                s,
                            )
                        }
                    };
                    finish(isa, raw, &terms, row);
                }
                i0 += mr;
            }
        }
    };
    let tasks = row_blocks * col_blocks;
    if threads > 1 && tasks > 1 {
        pool::for_each(tasks, task);
    } else {
        (0..tasks).for_each(task);
    }
}

/// The zero-point terms of one output row segment: `raw + corr - zb * row_sum`.
struct Terms<'a> {
    corr: &'a [i32],
    zb: &'a [i32],
    row_sum: i32,
    /// every `zb` is zero (symmetric weights): the row sum drops out
    zb_zero: bool,
}

enum Scale<'a> {
    One(f32),
    Columns(&'a [f32]),
}

/// One output row segment.
enum Row<'a> {
    I32(&'a mut [i32]),
    F32(&'a mut [f32], Scale<'a>),
}

/// Writes `raw` with its zero-point terms (and scale) into `row`, vectorized with AVX2 where
/// the tiles use it.
fn finish(isa: Isa, raw: &[i32], t: &Terms<'_>, row: Row<'_>) {
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Scalar {
        // SAFETY: every non-scalar `Isa` implies AVX2 (`Isa::best`).
        unsafe { finish_avx2(raw, t, row) };
        return;
    }
    let _ = isa;
    finish_plain(raw, t, row);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn finish_avx2(raw: &[i32], t: &Terms<'_>, row: Row<'_>) {
    finish_plain(raw, t, row)
}

#[inline(always)]
fn finish_plain(raw: &[i32], t: &Terms<'_>, row: Row<'_>) {
    let value = |c: usize| -> i32 {
        let v = raw[c].wrapping_add(t.corr[c]);
        if t.zb_zero {
            v
        } else {
            v.wrapping_sub(t.zb[c].wrapping_mul(t.row_sum))
        }
    };
    match row {
        Row::I32(o) => {
            for (c, o) in o.iter_mut().enumerate() {
                *o = value(c);
            }
        }
        Row::F32(o, Scale::One(s)) => {
            for (c, o) in o.iter_mut().enumerate() {
                *o = value(c) as f32 * s;
            }
        }
        Row::F32(o, Scale::Columns(s)) => {
            for (c, (o, s)) in o.iter_mut().zip(s).enumerate() {
                *o = value(c) as f32 * s;
            }
        }
    }
}

/// Raw sums `sum(a * b)` of rows `i0..i0 + mr` by columns `j0..j0 + nc` (`j0` a panel
/// start, `nc <= TILE_COLS`) into `dst`: a tile (row stride [`TILE_COLS`]), or for
/// [`Isa::Avx512Vnni`] alone, finished into the output ([`Dst::Out`]).
///
/// # Safety
/// A [`Dst::Out`]'s pointers cover rows `i0..i0 + mr` and columns `j0..j0 + nc` of the
/// output and its terms, and nothing else writes those output elements meanwhile.
#[allow(clippy::too_many_arguments)]
unsafe fn raw_tile(
    isa: Isa,
    a: &PackedA,
    b: &PackedB,
    i0: usize,
    mr: usize,
    j0: usize,
    nc: usize,
    dst: Dst<'_>,
) {
    let k4 = b.k4;
    let ps = b.panel_stride();
    let panel = j0 / NR;
    let np = nc.div_ceil(NR);
    assert!(
        (i0 + mr) * a.stride <= a.data.len()
            && a.stride >= 4 * k4
            && (panel + np) * ps <= b.data.len()
            && mr <= MAX_MR,
        "int_gemm tile bounds"
    );
    let ap = a.data[i0 * a.stride..].as_ptr();
    let bp = b.data[panel * ps..].as_ptr();
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512Vnni {
        // SAFETY: `Isa::best` found AVX-512 VNNI; the bounds were checked above (a
        // `Dst::Out`'s by the caller).
        unsafe { vnni512(ap, a.stride, bp, ps, k4, mr, np, dst) };
        return;
    }
    let Dst::Tile(tile) = dst else {
        unreachable!("finished tiles are for AVX-512 VNNI")
    };
    assert!(tile.len() >= mr * TILE_COLS, "int_gemm tile size");
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 {
        for p in 0..np {
            let t = &mut tile[p * NR..];
            // SAFETY: `Isa::best` found AVX2; the bounds were checked above.
            unsafe { avx2(ap, a.stride, bp.add(p * ps), k4, mr, t) };
        }
        return;
    }
    let _ = (ap, bp);
    for r in 0..mr {
        let arow = &a.data[(i0 + r) * a.stride..];
        for c in 0..np * NR {
            let (p, cc) = (panel + c / NR, c % NR);
            let mut s = 0i32;
            for g in 0..k4 {
                for t in 0..4 {
                    let bv = b.data[((p * k4 + g) * NR + cc) * 4 + t];
                    s = s.wrapping_add(i32::from(arow[g * 4 + t]) * i32::from(bv));
                }
            }
            tile[r * TILE_COLS + c] = s;
        }
    }
}

/// Dispatches [`x86::tile_vnni512`] on the row and panel counts.
///
/// # Safety
/// As [`x86::tile_vnni512`], with `mr <= MAX_MR` and `np` 1 or 2 (`dst` sized for them).
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
unsafe fn vnni512(
    a: *const u8,
    lda: usize,
    b: *const i8,
    ps: usize,
    k4: usize,
    mr: usize,
    np: usize,
    dst: Dst<'_>,
) {
    macro_rules! rows {
        ($np:literal) => {
            match mr {
                1 => x86::tile_vnni512::<1, $np>(a, lda, b, ps, k4, dst),
                2 => x86::tile_vnni512::<2, $np>(a, lda, b, ps, k4, dst),
                3 => x86::tile_vnni512::<3, $np>(a, lda, b, ps, k4, dst),
                4 => x86::tile_vnni512::<4, $np>(a, lda, b, ps, k4, dst),
                5 => x86::tile_vnni512::<5, $np>(a, lda, b, ps, k4, dst),
                6 => x86::tile_vnni512::<6, $np>(a, lda, b, ps, k4, dst),
                7 => x86::tile_vnni512::<7, $np>(a, lda, b, ps, k4, dst),
                _ => x86::tile_vnni512::<8, $np>(a, lda, b, ps, k4, dst),
            }
        };
    }
    if np == 1 {
        rows!(1)
    } else {
        rows!(2)
    }
}

/// Dispatches [`x86::tile_avx2`] on the row count.
///
/// # Safety
/// As [`x86::tile_avx2`], with `mr <= 4`.
#[cfg(target_arch = "x86_64")]
unsafe fn avx2(a: *const u8, lda: usize, b: *const i8, k4: usize, mr: usize, tile: &mut [i32]) {
    match mr {
        1 => x86::tile_avx2::<1>(a, lda, b, k4, tile),
        2 => x86::tile_avx2::<2>(a, lda, b, k4, tile),
        3 => x86::tile_avx2::<3>(a, lda, b, k4, tile),
        _ => x86::tile_avx2::<4>(a, lda, b, k4, tile),
    }
}

#[cfg(test)]
mod tests;
