//! bf16 matrix products on Intel AMX (the tile matrix-multiply unit of Sapphire Rapids and
//! later Xeons): `c[m x n] = a[m x k] . b` with `a` bf16 row-major, `b` a bf16 weight
//! packed once into tile panels, f32 accumulation in the tile registers, and `c` rounded
//! to bf16 (the product's dtype under mixed precision). It serves the packed-weight matmuls
//! of `--precision bf16` where the CPU has AMX-BF16 and the OS grants the tile state;
//! elsewhere those products keep the f32 packed GEMM on widened operands.
//!
//! Blocking: 32 x 32 blocks of `c` in four 16 x 16 f32 accumulator tiles, fed per 32-wide
//! step of k by two 16-row tiles of `a` (loaded straight from its rows) and two 16-column
//! tiles of `b`, the eight tile registers AMX has. A weight panel holds 16 columns as k/2
//! rows of (k, k+1) pairs, 64 bytes each: the layout `tdpbf16ps` reads for its B operand.
//! Blocks of `a` whose rows or k fall short of a whole tile are copied, zero-padded, into a
//! per-thread buffer first.

use super::super::memory::Data;
use crate::fast::pool;
use half::bf16;
use std::ops::Range;
use std::sync::OnceLock;

/// Rows and columns of an accumulator tile; rows of an operand tile.
const T: usize = 16;
/// k per step: 32 bf16 fill one 64-byte tile row.
const TK: usize = 32;
/// Rows (and columns) of `c` per block: 2 x 2 accumulator tiles.
const B2: usize = 2 * T;

/// True when AMX-BF16 can run here: the CPU has it, the OS enabled the tile state and
/// granted it to this process (Linux asks for it once), and `RLX_CPU_AMX` is not `0`.
pub(crate) fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| crate::settings::AMX.switch() && detect())
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn detect() -> bool {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    let (max, l1) = (__cpuid(0).eax, __cpuid(1));
    if max < 7 || l1.ecx & (1 << 27) == 0 {
        return false; // no cpuid leaf 7, or no OSXSAVE (so no xgetbv)
    }
    let l7 = __cpuid_count(7, 0);
    let (amx_bf16, amx_tile) = (l7.edx & (1 << 22) != 0, l7.edx & (1 << 24) != 0);
    if !(amx_bf16 && amx_tile) {
        return false;
    }
    // Linux hands out the 8 KiB tile data state only on request (arch_prctl
    // ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA); without it tile instructions fault.
    const ARCH_REQ_XCOMP_PERM: u64 = 0x1023;
    const XFEATURE_XTILEDATA: u64 = 18;
    if arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0 {
        return false;
    }
    // SAFETY: OSXSAVE is set (checked above), so xgetbv may run.
    let xcr0 = unsafe { xgetbv0() };
    // XTILECFG and XTILEDATA enabled; AVX-512 BF16 rounds the results (every AMX CPU has it)
    xcr0 & (3 << 17) == 3 << 17 && super::super::math::avx512_bf16()
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn detect() -> bool {
    false
}

/// The `arch_prctl` system call (number 158 on x86-64 Linux).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn arch_prctl(code: u64, arg: u64) -> i64 {
    let ret: i64;
    // SAFETY: arch_prctl with these codes only changes this process's permissions; the
    // kernel clobbers rcx and r11 on syscall.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") 158i64 => ret,
            in("rdi") code,
            in("rsi") arg,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// XCR0, the OS-enabled state components.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[target_feature(enable = "xsave")]
unsafe fn xgetbv0() -> u64 {
    std::arch::x86_64::_xgetbv(0)
}

/// 64 bytes of a packed panel: 16 columns x one (k, k+1) pair, as bf16 bits.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct PairRow([u16; 2 * T]);

/// A weight `b[k x n]` packed for [`gemm()`]: panels of 16 columns (an even number of them,
/// zero-padded), each `kp / 2` pair rows, `kp` = `k` rounded up to 32 (zero-padded).
pub(crate) struct AmxRhs {
    k: usize,
    n: usize,
    kp: usize,
    panels: usize,
    data: Vec<PairRow>,
}

impl std::fmt::Debug for AmxRhs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AmxRhs({} x {})", self.k, self.n)
    }
}

impl AmxRhs {
    /// Packs the row-major `b[k x n]` (bf16 as it is; other float dtypes rounded to bf16).
    pub fn pack(b: Data<'_>, k: usize, n: usize) -> AmxRhs {
        let converted;
        let src: &[bf16] = match b {
            Data::BF16(s) => s,
            other => {
                let mut w = vec![0.0f32; k * n];
                other.load_f32(&mut w);
                converted = w.into_iter().map(bf16::from_f32).collect::<Vec<_>>();
                &converted
            }
        };
        assert!(src.len() >= k * n, "packed operand out of bounds");
        let kp = k.div_ceil(TK) * TK;
        let panels = n.div_ceil(T).div_ceil(2) * 2;
        let mut data = vec![PairRow([0; 2 * T]); panels * kp / 2];
        for p in 0..panels {
            for kk in 0..k {
                let row = &mut data[p * kp / 2 + kk / 2].0;
                for j in 0..T.min(n.saturating_sub(p * T)) {
                    row[2 * j + kk % 2] = src[kk * n + p * T + j].to_bits();
                }
            }
        }
        AmxRhs {
            k,
            n,
            kp,
            panels,
            data,
        }
    }

    /// Pair rows of one panel.
    fn panel(&self, p: usize) -> &[PairRow] {
        &self.data[p * self.kp / 2..(p + 1) * self.kp / 2]
    }
}

/// Where [`gemm()`] writes `c`: rounded to bf16 (the product's dtype), or the f32
/// accumulators as they are (for an epilogue that widens the product first).
pub(crate) enum Out<'a> {
    Bf16(&'a mut [bf16]),
    F32(&'a mut [f32]),
}

/// `c[m x n] = a[m x k] . b`, `a` and `c` row-major and contiguous; `threads > 1` splits
/// row blocks (and, for few rows, column blocks) over the current pool ([`pool`]). Callers
/// check [`available`] first.
pub(crate) fn gemm(m: usize, a: &[bf16], b: &AmxRhs, c: Out<'_>, threads: usize) {
    let (k, n) = (b.k, b.n);
    assert!(available(), "AMX gemm without AMX");
    let (c_len, out) = match c {
        Out::Bf16(c) => (c.len(), OutPtr::Bf16(c.as_mut_ptr())),
        Out::F32(c) => (c.len(), OutPtr::F32(c.as_mut_ptr())),
    };
    assert!(
        a.len() >= m * k && c_len >= m * n,
        "AMX gemm operand out of bounds"
    );
    if m == 0 || n == 0 {
        return;
    }
    let run = |rows: Range<usize>, pairs: Range<usize>| {
        // SAFETY: AMX is available (asserted); `rows` x the columns of `pairs` lie inside
        // `c` and no other task writes them.
        unsafe { block(rows, pairs, a, b, out.ptr(), 0) }
    };
    let pairs = b.panels / 2;
    let row_blocks = m.div_ceil(B2);
    let threads = threads.max(1);
    if threads == 1 || m * n * k < 1 << 18 {
        run(0..m, 0..pairs);
    } else if row_blocks >= 2 * threads {
        // a few row blocks per task; each task streams the whole weight
        let per = row_blocks.div_ceil(4 * threads).max(1) * B2;
        pool::for_each(m.div_ceil(per), |t| {
            run(t * per..((t + 1) * per).min(m), 0..pairs)
        });
    } else {
        let per = pairs.div_ceil(2 * threads).max(1);
        pool::for_each(pairs.div_ceil(per), |t| {
            run(0..m, t * per..((t + 1) * per).min(pairs))
        });
    }
}

/// [`gemm()`] in f32 handed over block by block: each task computes whole rows (32 at a time,
/// every column) into its own buffer and calls `finish(first_row, rows)` with them, so an
/// epilogue runs on each block while it is in cache. Returns false, computing nothing,
/// when the rows are too few to split that way over `threads` (then [`gemm()`] splits by
/// columns instead).
pub(crate) fn gemm_blocks(
    m: usize,
    a: &[bf16],
    b: &AmxRhs,
    threads: usize,
    finish: &(dyn Fn(usize, &mut [f32]) + Sync),
) -> bool {
    let (k, n) = (b.k, b.n);
    assert!(available(), "AMX gemm without AMX");
    assert!(a.len() >= m * k, "AMX gemm operand out of bounds");
    let row_blocks = m.div_ceil(B2);
    let threads = threads.max(1);
    if threads > 1 && row_blocks < 2 * threads && m * n * k >= 1 << 18 {
        return false;
    }
    let pairs = b.panels / 2;
    let run = |blocks: Range<usize>| {
        let mut buf = vec![0f32; B2 * n];
        for bi in blocks {
            let r0 = bi * B2;
            let mr = B2.min(m - r0);
            let out = &mut buf[..mr * n];
            // SAFETY: AMX is available (asserted); `out` holds rows r0..r0 + mr of the
            // result and belongs to this task alone.
            unsafe {
                block(
                    r0..r0 + mr,
                    0..pairs,
                    a,
                    b,
                    OutPtr::F32(out.as_mut_ptr()),
                    r0,
                )
            };
            finish(r0, out);
        }
    };
    if threads == 1 || m * n * k < 1 << 18 {
        run(0..row_blocks);
    } else {
        let per = row_blocks.div_ceil(4 * threads).max(1);
        pool::for_each(row_blocks.div_ceil(per), |t| {
            run(t * per..((t + 1) * per).min(row_blocks))
        });
    }
    true
}

/// A raw output pointer shared by the tasks of one product (each writes its own block).
#[derive(Clone, Copy)]
enum OutPtr {
    Bf16(*mut bf16),
    F32(*mut f32),
}
// SAFETY: tasks write disjoint blocks of the output.
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// Itself (a method, so closures capture the `Sync` wrapper, not its pointer).
    fn ptr(self) -> OutPtr {
        self
    }
}

/// The tile configuration: palette 1, eight tiles of 16 rows x 64 bytes.
#[repr(C, align(64))]
struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

const CONFIG: TileConfig = TileConfig {
    palette: 1,
    start_row: 0,
    reserved: [0; 14],
    colsb: [64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0],
    rows: [16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0],
};

/// Computes rows `rows` x panel pairs `pairs` of `c`.
///
/// # Safety
/// AMX is available (AVX-512 BF16 with it); `c` points to row `c_row` of an `m x n`
/// row-major result (or of a part of it holding rows `c_row..`) that contains `rows`, and
/// no other thread writes this block.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn block(
    rows: Range<usize>,
    pairs: Range<usize>,
    a: &[bf16],
    b: &AmxRhs,
    c: OutPtr,
    c_row: usize,
) {
    use std::arch::asm;
    let (k, n, kp) = (b.k, b.n, b.kp);
    let steps = kp / TK;
    // a zero-padded copy of a row block whose rows or k fall short of whole tiles
    let mut padded: Vec<u16> = Vec::new();
    let mut acc = [[0f32; B2]; B2];
    asm!("ldtilecfg [{0}]", in(reg) &CONFIG, options(nostack, readonly));
    let mut r0 = rows.start;
    while r0 < rows.end {
        let mr = B2.min(rows.end - r0);
        let (a_ptr, lda) = if mr == B2 && k == kp {
            (a.as_ptr().add(r0 * k) as *const u16, k * 2)
        } else {
            padded.clear();
            padded.resize(B2 * kp, 0);
            for r in 0..mr {
                let src = &a[(r0 + r) * k..(r0 + r + 1) * k];
                for (d, s) in padded[r * kp..r * kp + k].iter_mut().zip(src) {
                    *d = s.to_bits();
                }
            }
            (padded.as_ptr(), kp * 2)
        };
        for pair in pairs.clone() {
            let (b0, b1) = (b.panel(2 * pair).as_ptr(), b.panel(2 * pair + 1).as_ptr());
            asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                options(nostack, nomem)
            );
            for s in 0..steps {
                let a0 = a_ptr.add(s * TK) as *const u8;
                let a1 = a0.add(T * lda);
                let (t0, t1) = (b0.add(s * T) as *const u8, b1.add(s * T) as *const u8);
                asm!(
                    "tileloadd tmm4, [{a0} + {lda}]",
                    "tileloadd tmm5, [{a1} + {lda}]",
                    "tileloadd tmm6, [{t0} + {sixty_four}]",
                    "tileloadd tmm7, [{t1} + {sixty_four}]",
                    "tdpbf16ps tmm0, tmm4, tmm6",
                    "tdpbf16ps tmm1, tmm4, tmm7",
                    "tdpbf16ps tmm2, tmm5, tmm6",
                    "tdpbf16ps tmm3, tmm5, tmm7",
                    a0 = in(reg) a0,
                    a1 = in(reg) a1,
                    lda = in(reg) lda,
                    t0 = in(reg) t0,
                    t1 = in(reg) t1,
                    sixty_four = in(reg) 64usize,
                    options(nostack, readonly)
                );
            }
            let c0 = pair * B2;
            let nc = B2.min(n.saturating_sub(c0));
            // A whole 32 x 32 f32 block goes from the tiles straight to its rows of `c`;
            // partial blocks and bf16 results go through `acc` first.
            let (dst, ld) = match c {
                OutPtr::F32(c) if mr == B2 && nc == B2 => {
                    (c.add((r0 - c_row) * n + c0) as *mut u8, n * 4)
                }
                _ => (acc.as_mut_ptr() as *mut u8, B2 * 4),
            };
            asm!(
                "tilestored [{p0} + {ld}], tmm0",
                "tilestored [{p1} + {ld}], tmm1",
                "tilestored [{p2} + {ld}], tmm2",
                "tilestored [{p3} + {ld}], tmm3",
                p0 = in(reg) dst,
                p1 = in(reg) dst.add(T * 4),
                p2 = in(reg) dst.add(T * ld),
                p3 = in(reg) dst.add(T * ld + T * 4),
                ld = in(reg) ld,
                options(nostack)
            );
            if dst != acc.as_mut_ptr() as *mut u8 {
                continue;
            }
            for (r, row) in acc.iter().enumerate().take(mr) {
                let at = (r0 + r - c_row) * n + c0;
                match c {
                    OutPtr::F32(c) => {
                        std::slice::from_raw_parts_mut(c.add(at), nc).copy_from_slice(&row[..nc])
                    }
                    OutPtr::Bf16(c) => super::super::math::round_to_bf16_avx512(
                        std::slice::from_raw_parts_mut(c.add(at), nc),
                        &row[..nc],
                    ),
                }
            }
        }
        r0 += mr;
    }
    asm!("tilerelease", options(nostack, nomem));
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn block(_: Range<usize>, _: Range<usize>, _: &[bf16], _: &AmxRhs, _: OutPtr, _: usize) {
    unreachable!("AMX is x86-64 only")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> f32 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    /// Against an f64 product of the same bf16 operands, over shapes with partial tiles
    /// in every dimension, single- and multi-threaded.
    #[test]
    fn matches_an_f64_product_of_the_same_bf16_operands() {
        if !available() {
            rlx_driver::testing::skip(
                "amx_gemm::matches_an_f64_product_of_the_same_bf16_operands",
                "no AMX-BF16 on this CPU (or the OS did not grant the tile state)",
            );
            return;
        }
        let mut seed = 7;
        for &(m, k, n, threads) in &[
            (1, 32, 16, 1),
            (32, 64, 32, 1),
            (37, 50, 45, 1),
            (128, 384, 1152, 2),
            (200, 96, 70, 2),
            (5, 1536, 384, 2),
        ] {
            let a: Vec<bf16> = (0..m * k).map(|_| bf16::from_f32(lcg(&mut seed))).collect();
            let bw: Vec<bf16> = (0..k * n).map(|_| bf16::from_f32(lcg(&mut seed))).collect();
            let packed = AmxRhs::pack(Data::BF16(&bw), k, n);
            let mut c = vec![bf16::from_f32(f32::NAN); m * n];
            gemm(m, &a, &packed, Out::Bf16(&mut c), threads);
            let mut wide = vec![f32::NAN; m * n];
            gemm(m, &a, &packed, Out::F32(&mut wide), threads);
            // block by block, the same f32 values (when the rows allow that split)
            let blocks = std::sync::Mutex::new(vec![f32::NAN; m * n]);
            let done = gemm_blocks(m, &a, &packed, threads, &|r0, rows| {
                blocks.lock().unwrap()[r0 * n..r0 * n + rows.len()].copy_from_slice(rows);
            });
            if done {
                assert_eq!(blocks.into_inner().unwrap(), wide, "{m}x{k}x{n} by blocks");
            }
            let (mut num, mut den) = (0f64, 0f64);
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = (0..k)
                        .map(|kk| a[i * k + kk].to_f64() * bw[kk * n + j].to_f64())
                        .sum();
                    let got = c[i * n + j].to_f64();
                    assert!(got.is_finite(), "unwritten output at {i},{j} ({m}x{k}x{n})");
                    // the f32 accumulators, then their rounding, are what the bf16 output holds
                    let acc = wide[i * n + j];
                    assert_eq!(
                        bf16::from_f32(acc),
                        c[i * n + j],
                        "at {i},{j} ({m}x{k}x{n})"
                    );
                    assert!((acc as f64 - want).abs() <= 1e-5 * (1.0 + want.abs()));
                    num += (got - want).powi(2);
                    den += want * want;
                }
            }
            let rel = (num / den).sqrt();
            // f32 accumulation, then one rounding to bf16 (relative 2^-9 at most)
            assert!(rel < 4e-3, "{m}x{k}x{n}: relative L2 {rel}");
        }
    }
}
