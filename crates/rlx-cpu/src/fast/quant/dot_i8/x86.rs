//! The x86 kernels of the 32-value formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), what every
//! kernel shares (the byte product per instruction set, the activation rows [`Acts`],
//! [`rows`]), and the entry points: one per instruction set, compiled with its features,
//! into which every format's kernel (these and [`super::x86_k`]'s) inlines.
//!
//! A kernel dots `R` weight rows with `M` activation rows (one to four): it unpacks each
//! weight block once and dots it with every activation row, and computes the block's float
//! scales for all of them in one vector (the 32-value formats: in a first pass over a tile
//! of blocks, read back as broadcast loads, so a pair costs a byte product, a conversion
//! and a multiply-add). The float operations of one (weight row, activation row) pair are
//! those of `M = 1`, in the same order, so a row computes bit for bit the same whatever
//! rows come with it.

use super::x86_k;
use super::{Q8Row, QK};
use rlx_ir::QuantFormat;
use std::arch::x86_64::*;

/// `acc + ` the sums of four adjacent products of unsigned bytes `u` and signed bytes `s`,
/// per 32-bit lane; the products of one lane must not exceed `i16` in pairs (they do not:
/// `u <= 128`, `|s| <= 127`).
pub(super) trait Dot {
    /// The sums, added to `acc`.
    unsafe fn dot(acc: __m256i, u: __m256i, s: __m256i) -> __m256i;
}

/// `vpmaddubsw` then `vpmaddwd` by ones.
pub(super) struct Avx2;
/// `vpdpbusd` (AVX-VNNI, 256-bit).
pub(super) struct AvxVnni;
/// `vpdpbusd` (AVX-512 VNNI on 256-bit registers).
pub(super) struct Avx512Vnni;

impl Dot for Avx2 {
    #[inline(always)]
    unsafe fn dot(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        let pairs = _mm256_maddubs_epi16(u, s);
        _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
    }
}

impl Dot for AvxVnni {
    #[inline(always)]
    unsafe fn dot(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        _mm256_dpbusd_avx_epi32(acc, u, s)
    }
}

impl Dot for Avx512Vnni {
    #[inline(always)]
    unsafe fn dot(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(acc, u, s)
    }
}

/// The sum of the eight lanes of `v`.
#[inline(always)]
pub(super) unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
}

/// `M` activation rows (one to four) of `nb` blocks each, as raw pointers for the kernels.
#[derive(Clone, Copy)]
pub(super) struct Acts<const M: usize> {
    /// per row: the quantized values
    pub qs: [*const i8; M],
    /// per row: per block `[dx, dx * sum(a)]`
    pub ds: [*const [f32; 2]; M],
    /// blocks of 32 values per row
    pub nb: usize,
}

impl<const M: usize> Acts<M> {
    /// The first `M` rows of `rows` (all of the same length).
    fn new(rows: &[Q8Row<'_>]) -> Self {
        const { assert!(M >= 1 && M <= 4, "one to four activation rows") };
        let mut a = Acts {
            qs: [std::ptr::null(); M],
            ds: [std::ptr::null(); M],
            nb: rows[0].ds.len(),
        };
        for (i, row) in rows[..M].iter().enumerate() {
            a.qs[i] = row.qs.as_ptr();
            a.ds[i] = row.ds.as_ptr();
        }
        a
    }

    /// The 32 values of block `b` of row `i`.
    #[inline(always)]
    pub(super) unsafe fn x(&self, i: usize, b: usize) -> __m256i {
        _mm256_loadu_si256(self.qs[i].add(b * QK) as *const __m256i)
    }

    /// `[dx, dx * sum(a)]` of block `b` of every row, row `i` in lanes `2i` and `2i + 1`
    /// (0 past the rows).
    #[inline(always)]
    unsafe fn ds(&self, b: usize) -> __m256 {
        let row = |i: usize| {
            if i < M {
                _mm_load_sd(self.ds[i].add(b) as *const f64)
            } else {
                _mm_setzero_pd()
            }
        };
        let lo = _mm_unpacklo_pd(row(0), row(1));
        if M <= 2 {
            return _mm256_zextps128_ps256(_mm_castpd_ps(lo));
        }
        let hi = _mm_unpacklo_pd(row(2), row(3));
        _mm256_castpd_ps(_mm256_set_m128d(hi, lo))
    }
}

/// The 32 nibbles of a Q4 block's 16 bytes at `p`, in value order (low nibbles are values
/// 0..16, high nibbles 16..32).
#[inline(always)]
unsafe fn nibbles(p: *const u8) -> __m256i {
    let q = _mm_loadu_si128(p as *const __m128i);
    let both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
}

/// The 32 bits of the little-endian `u32` at `p` as bytes, bit `i` giving byte `i`
/// `0x10` when set, else 0 (a Q5 block's fifth bits, llama.cpp's `bytes_from_bits_32`).
#[inline(always)]
unsafe fn fifth_bits(p: *const u8) -> __m256i {
    let bits = (p as *const i32).read_unaligned();
    // byte i of lane group g (8 bytes) takes input byte g; then each tests its own bit
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(bits),
        _mm256_set_epi64x(
            0x0303030303030303,
            0x0202020202020202,
            0x0101010101010101,
            0,
        ),
    );
    let all_but_own = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
    let set = _mm256_cmpeq_epi8(_mm256_or_si256(spread, all_but_own), _mm256_set1_epi8(-1));
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

/// The arguments of an entry point: `n` rows of `row_bytes` from `w`, one to four
/// activation rows, and per activation row its `n` results.
pub(super) type Args<'a, 'b, 'c> = (&'a [u8], usize, &'a [Q8Row<'a>], &'b mut [&'c mut [f32]]);

/// Weight rows dotted together: they share each activation block's load and scales.
pub(super) const ROWS: usize = 4;

/// Blocks whose float scales a kernel of several activation rows computes before their
/// integer sums.
const TILE: usize = 16;

/// Per block of a tile and weight row, the scales `t` that [`dot_q45`] and [`dot_q8_0`]
/// keep in memory: one per entry point call, so that no kernel call zeroes 2 KiB.
type Scales = [[[f32; 8]; ROWS]; TILE];

/// Q4_0 / Q4_1 / Q5_0 / Q5_1 rows (`FIVE`: five bits, `MIN`: a stored minimum), `R` at a
/// time, dot the `M` rows of `a`; result `(r, i)` to `out[i] + r`. Lengths checked by the
/// caller. Per block and weight row, one vector `t` holds every activation row's
/// `[dw * dx, mw * sx]` (as `M = 1` computes it). With several activation rows, a first
/// pass per tile of blocks stores the `t`s and sums the offset terms, and the second reads
/// each row's scale back as a broadcast load, which costs no shuffle; one row keeps `t` in
/// a register.
#[inline(always)]
unsafe fn dot_q45<D: Dot, const FIVE: bool, const MIN: bool, const R: usize, const M: usize>(
    w: *const u8,
    row_bytes: usize,
    a: &Acts<M>,
    out: [*mut f32; M],
    ts: &mut Scales,
) {
    let qh = if MIN { 4 } else { 2 };
    let qo = if FIVE { qh + 4 } else { qh };
    let bb = qo + 16;
    // lanes 2i scale the block's integer sums, lanes 2i + 1 are its offset terms: without a
    // stored minimum `-8 dw sx` (Q4_0) or `-16 dw sx` (Q5_0)
    let m = if FIVE { -16.0 } else { -8.0 };
    let off_mul = _mm256_setr_ps(1.0, m, 1.0, m, 1.0, m, 1.0, m);
    // `t` of block `blk` for the activation rows' `ds`
    let scale = |blk: *const u8, ds: __m256| {
        if MIN {
            let dm = _mm_cvtph_ps(_mm_cvtsi32_si128((blk as *const i32).read_unaligned()));
            let dm = if M == 1 {
                _mm256_zextps128_ps256(dm)
            } else {
                _mm256_castpd_ps(_mm256_broadcastsd_pd(_mm_castps_pd(dm)))
            };
            _mm256_mul_ps(dm, ds)
        } else {
            let d = (blk as *const u16).read_unaligned() as i16;
            let dw = _mm256_cvtph_ps(_mm_set1_epi16(d));
            _mm256_mul_ps(_mm256_mul_ps(dw, ds), off_mul)
        }
    };
    let mut acc = [[_mm256_setzero_ps(); M]; R];
    // per weight row: the offset terms of activation row i in lane 2i + 1
    let mut off = [_mm256_setzero_ps(); R];
    // one activation row needs no tiles: all its blocks in one loop
    let tile = if M == 1 { a.nb.max(1) } else { TILE };
    for b0 in (0..a.nb).step_by(tile) {
        let blocks = b0..a.nb.min(b0 + tile);
        if M > 1 {
            for (b, ts) in blocks.clone().zip(ts.iter_mut()) {
                let ds = a.ds(b);
                for (r, (off, ts)) in off.iter_mut().zip(ts.iter_mut()).enumerate() {
                    let t = scale(w.add(r * row_bytes + b * bb), ds);
                    *off = _mm256_add_ps(*off, t);
                    _mm256_storeu_ps(ts.as_mut_ptr(), t);
                }
            }
        }
        for b in blocks {
            let tb = &ts[if M == 1 { 0 } else { b - b0 }];
            let ds = if M == 1 { a.ds(b) } else { _mm256_setzero_ps() };
            for (r, (acc, tr)) in acc.iter_mut().zip(tb).enumerate() {
                let blk = w.add(r * row_bytes + b * bb);
                // the same block of the rows after these: one group's pass ahead
                _mm_prefetch::<_MM_HINT_T0>(blk.wrapping_add(R * row_bytes) as *const i8);
                let mut q = nibbles(blk.add(qo));
                if FIVE {
                    q = _mm256_or_si256(q, fifth_bits(blk.add(qh)));
                }
                let t = if M == 1 {
                    let t = scale(blk, ds);
                    off[r] = _mm256_add_ps(off[r], t);
                    _mm256_broadcastss_ps(_mm256_castps256_ps128(t))
                } else {
                    _mm256_setzero_ps()
                };
                for (i, acc) in acc.iter_mut().enumerate() {
                    let p = D::dot(_mm256_setzero_si256(), q, a.x(i, b));
                    let t = if M == 1 {
                        t
                    } else {
                        _mm256_broadcast_ss(&tr[2 * i])
                    };
                    *acc = _mm256_fmadd_ps(t, _mm256_cvtepi32_ps(p), *acc);
                }
            }
        }
    }
    for (r, (acc, off)) in acc.iter().zip(&off).enumerate() {
        let mut offs = [0f32; 8];
        _mm256_storeu_ps(offs.as_mut_ptr(), *off);
        for (i, acc) in acc.iter().enumerate() {
            *out[i].add(r) = hsum(*acc) + offs[2 * i + 1];
        }
    }
}

/// Q8_0 rows, `R` at a time, dot the `M` rows of `a`: |w| times a with w's sign, so the
/// unsigned operand fits a byte. The scales `dw * dx` (in lanes 2i) as [`dot_q45`] has
/// them.
#[inline(always)]
unsafe fn dot_q8_0<D: Dot, const R: usize, const M: usize>(
    w: *const u8,
    row_bytes: usize,
    a: &Acts<M>,
    out: [*mut f32; M],
    ts: &mut Scales,
) {
    let scale = |blk: *const u8, ds: __m256| {
        let d = (blk as *const u16).read_unaligned() as i16;
        _mm256_mul_ps(_mm256_cvtph_ps(_mm_set1_epi16(d)), ds)
    };
    let mut acc = [[_mm256_setzero_ps(); M]; R];
    // one activation row needs no tiles: all its blocks in one loop
    let tile = if M == 1 { a.nb.max(1) } else { TILE };
    for b0 in (0..a.nb).step_by(tile) {
        let blocks = b0..a.nb.min(b0 + tile);
        if M > 1 {
            for (b, ts) in blocks.clone().zip(ts.iter_mut()) {
                let ds = a.ds(b);
                for (r, ts) in ts.iter_mut().enumerate() {
                    let t = scale(w.add(r * row_bytes + b * 34), ds);
                    _mm256_storeu_ps(ts.as_mut_ptr(), t);
                }
            }
        }
        for b in blocks {
            let tb = &ts[if M == 1 { 0 } else { b - b0 }];
            let ds = if M == 1 { a.ds(b) } else { _mm256_setzero_ps() };
            for (r, (acc, tr)) in acc.iter_mut().zip(tb).enumerate() {
                let blk = w.add(r * row_bytes + b * 34);
                // the same block of the rows after these: one group's pass ahead
                _mm_prefetch::<_MM_HINT_T0>(blk.wrapping_add(R * row_bytes) as *const i8);
                let q = _mm256_loadu_si256(blk.add(2) as *const __m256i);
                let q_abs = _mm256_sign_epi8(q, q);
                let t = if M == 1 {
                    _mm256_broadcastss_ps(_mm256_castps256_ps128(scale(blk, ds)))
                } else {
                    _mm256_setzero_ps()
                };
                for (i, acc) in acc.iter_mut().enumerate() {
                    let x = _mm256_sign_epi8(a.x(i, b), q);
                    let p = D::dot(_mm256_setzero_si256(), q_abs, x);
                    let t = if M == 1 {
                        t
                    } else {
                        _mm256_broadcast_ss(&tr[2 * i])
                    };
                    *acc = _mm256_fmadd_ps(t, _mm256_cvtepi32_ps(p), *acc);
                }
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        for (i, acc) in acc.iter().enumerate() {
            *out[i].add(r) = hsum(*acc);
        }
    }
}

/// Each pointer of `out` moved on by `j`. The kernels fill their small arrays with loops
/// like this one: closures given to `std::array::from_fn` were seen to stay calls, compiled
/// without the entry point's features.
#[inline(always)]
unsafe fn offset<const M: usize>(mut out: [*mut f32; M], j: usize) -> [*mut f32; M] {
    for o in out.iter_mut() {
        *o = o.add(j);
    }
    out
}

/// Runs `group` (a kernel of `ROWS` weight rows) over the rows, then `one` (the kernel of
/// one) on the rest; both take the first row's bytes, where its results go and the scratch
/// `ts`. Closures, not function pointers, so the kernels inline into the entry point
/// compiled with the features.
#[inline(always)]
unsafe fn rows<const M: usize>(
    w: &[u8],
    row_bytes: usize,
    out: [*mut f32; M],
    n: usize,
    ts: &mut Scales,
    group: impl Fn(*const u8, [*mut f32; M], &mut Scales),
    one: impl Fn(*const u8, [*mut f32; M], &mut Scales),
) {
    let wp = w.as_ptr();
    let mut j = 0;
    while j + ROWS <= n {
        group(wp.add(j * row_bytes), offset(out, j), ts);
        j += ROWS;
    }
    while j < n {
        one(wp.add(j * row_bytes), offset(out, j), ts);
        j += 1;
    }
}

/// Runs `format`'s kernel with the byte product `D` on `M` activation rows (`args` has
/// that many); false when no kernel covers the format.
#[inline(always)]
unsafe fn run_m<D: Dot, const M: usize>(
    format: QuantFormat,
    (w, rb, acts, outs): Args<'_, '_, '_>,
) -> bool {
    let a = Acts::<M>::new(acts);
    let n = outs[0].len();
    let mut out = [std::ptr::null_mut(); M];
    for (o, outs) in out.iter_mut().zip(outs.iter_mut()) {
        *o = outs.as_mut_ptr();
    }
    let mut ts = [[[0f32; 8]; ROWS]; TILE];
    // the 32-value formats' kernels take the scratch, the k-quants' do not
    macro_rules! kernel {
        ($k:ident $(, $c:tt)*) => {
            rows(
                w,
                rb,
                out,
                n,
                &mut ts,
                |w, o, _| $k::<D, $($c,)* ROWS, M>(w, rb, &a, o),
                |w, o, _| $k::<D, $($c,)* 1, M>(w, rb, &a, o),
            )
        };
        (scratch $k:ident $(, $c:tt)*) => {
            rows(
                w,
                rb,
                out,
                n,
                &mut ts,
                |w, o, ts| $k::<D, $($c,)* ROWS, M>(w, rb, &a, o, ts),
                |w, o, ts| $k::<D, $($c,)* 1, M>(w, rb, &a, o, ts),
            )
        };
    }
    use x86_k::{dot_k16, dot_q45k, Q2K, Q3K, Q6K};
    match format {
        QuantFormat::Q4_0 => kernel!(scratch dot_q45, false, false),
        QuantFormat::Q4_1 => kernel!(scratch dot_q45, false, true),
        QuantFormat::Q5_0 => kernel!(scratch dot_q45, true, false),
        QuantFormat::Q5_1 => kernel!(scratch dot_q45, true, true),
        QuantFormat::Q8_0 => kernel!(scratch dot_q8_0),
        QuantFormat::Q4K => kernel!(dot_q45k, false),
        QuantFormat::Q5K => kernel!(dot_q45k, true),
        QuantFormat::Q2K => kernel!(dot_k16, Q2K),
        QuantFormat::Q3K => kernel!(dot_k16, Q3K),
        QuantFormat::Q6K => kernel!(dot_k16, Q6K),
        _ => return false,
    }
    true
}

/// [`run_m`] for the number of activation rows in `args` (one to four).
#[inline(always)]
unsafe fn run<D: Dot>(format: QuantFormat, args: Args<'_, '_, '_>) -> bool {
    match args.2.len() {
        1 => run_m::<D, 1>(format, args),
        2 => run_m::<D, 2>(format, args),
        3 => run_m::<D, 3>(format, args),
        4 => run_m::<D, 4>(format, args),
        m => unreachable!("{m} activation rows in one kernel call"),
    }
}

// One entry point per instruction set, each compiled with its features.
// SAFETY (all): called only when `isa()` found the features, with lengths checked.

/// [`run`] with AVX2 byte products.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn run_avx2(format: QuantFormat, args: Args<'_, '_, '_>) -> bool {
    run::<Avx2>(format, args)
}

/// [`run`] with AVX-VNNI byte products.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(super) unsafe fn run_avxvnni(format: QuantFormat, args: Args<'_, '_, '_>) -> bool {
    run::<AvxVnni>(format, args)
}

/// [`run`] with AVX-512 VNNI byte products (on 256-bit registers).
#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
pub(super) unsafe fn run_avx512vnni(format: QuantFormat, args: Args<'_, '_, '_>) -> bool {
    run::<Avx512Vnni>(format, args)
}
