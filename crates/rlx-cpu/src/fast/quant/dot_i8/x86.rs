//! The x86 kernels of the 32-value formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), what every
//! kernel shares (the byte product per instruction set, [`rows`]), and the entry points:
//! one per instruction set, compiled with its features, into which every format's kernel
//! (these and [`super::x86_k`]'s) inlines.

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

/// The block's activation `[dx, dx * sum(a)]` in lanes 0 and 1.
#[inline(always)]
unsafe fn act_scales(ds: *const [f32; 2]) -> __m128 {
    _mm_castpd_ps(_mm_load_sd(ds as *const f64))
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

/// The arguments of a kernel: `out.len()` rows of `row_bytes` from `w`, the activation row,
/// the results.
pub(super) type Args<'a, 'b> = (&'a [u8], usize, Q8Row<'a>, &'b mut [f32]);

/// Rows dotted together: they share each activation block's load and scales.
pub(super) const ROWS: usize = 4;

/// Q4_0 / Q4_1 / Q5_0 / Q5_1 rows (`FIVE`: five bits, `MIN`: a stored minimum) dot `a`, `R`
/// rows at a time; lengths checked by the caller.
#[inline(always)]
unsafe fn dot_q45<D: Dot, const FIVE: bool, const MIN: bool, const R: usize>(
    w: *const u8,
    row_bytes: usize,
    a: Q8Row<'_>,
    out: *mut f32,
) {
    let qh = if MIN { 4 } else { 2 };
    let qo = if FIVE { qh + 4 } else { qh };
    let bb = qo + 16;
    let (ap, dsp) = (a.qs.as_ptr(), a.ds.as_ptr());
    // lane 0 scales the block's integer sum, lane 1 is the block's offset term
    let off_mul = match (MIN, FIVE) {
        (true, _) => _mm_set1_ps(1.0),
        (false, false) => _mm_setr_ps(1.0, -8.0, 0.0, 0.0),
        (false, true) => _mm_setr_ps(1.0, -16.0, 0.0, 0.0),
    };
    let mut acc = [_mm256_setzero_ps(); R];
    let mut off = [_mm_setzero_ps(); R];
    for b in 0..a.ds.len() {
        let x = _mm256_loadu_si256(ap.add(b * QK) as *const __m256i);
        let xs = act_scales(dsp.add(b));
        for r in 0..R {
            let blk = w.add(r * row_bytes + b * bb);
            // the same block of the rows after these: one group's pass ahead
            _mm_prefetch::<_MM_HINT_T0>(blk.wrapping_add(R * row_bytes) as *const i8);
            let mut q = nibbles(blk.add(qo));
            if FIVE {
                q = _mm256_or_si256(q, fifth_bits(blk.add(qh)));
            }
            let p = D::dot(_mm256_setzero_si256(), q, x);
            // [dw, mw] (with a minimum) or [dw, dw], times [dx, sx]
            let dm = if MIN {
                _mm_cvtph_ps(_mm_cvtsi32_si128((blk as *const i32).read_unaligned()))
            } else {
                let d = (blk as *const u16).read_unaligned() as i32;
                _mm_cvtph_ps(_mm_set1_epi16(d as i16))
            };
            let t = _mm_mul_ps(_mm_mul_ps(dm, xs), off_mul);
            acc[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(t), _mm256_cvtepi32_ps(p), acc[r]);
            off[r] = _mm_add_ps(off[r], t);
        }
    }
    for r in 0..R {
        *out.add(r) = hsum(acc[r]) + _mm_cvtss_f32(_mm_shuffle_ps(off[r], off[r], 1));
    }
}

/// Q8_0 rows dot `a`, `R` rows at a time: |w| times a with w's sign, so the unsigned
/// operand fits a byte.
#[inline(always)]
unsafe fn dot_q8_0<D: Dot, const R: usize>(
    w: *const u8,
    row_bytes: usize,
    a: Q8Row<'_>,
    out: *mut f32,
) {
    let (ap, dsp) = (a.qs.as_ptr(), a.ds.as_ptr());
    let mut acc = [_mm256_setzero_ps(); R];
    for b in 0..a.ds.len() {
        let x = _mm256_loadu_si256(ap.add(b * QK) as *const __m256i);
        let xs = act_scales(dsp.add(b));
        for (r, acc) in acc.iter_mut().enumerate() {
            let blk = w.add(r * row_bytes + b * 34);
            // the same block of the rows after these: one group's pass ahead
            _mm_prefetch::<_MM_HINT_T0>(blk.wrapping_add(R * row_bytes) as *const i8);
            let q = _mm256_loadu_si256(blk.add(2) as *const __m256i);
            let p = D::dot(
                _mm256_setzero_si256(),
                _mm256_sign_epi8(q, q),
                _mm256_sign_epi8(x, q),
            );
            let d = (blk as *const u16).read_unaligned() as i32;
            let t = _mm_mul_ss(_mm_cvtph_ps(_mm_cvtsi32_si128(d)), xs);
            *acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(t), _mm256_cvtepi32_ps(p), *acc);
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        *out.add(r) = hsum(*acc);
    }
}

/// Runs `group` (a kernel of `ROWS` rows) over the rows, then `one` (the kernel of one row)
/// on the rest; both take the first row's bytes and result. Closures, not function
/// pointers, so the kernels inline into the entry point compiled with the features.
#[inline(always)]
unsafe fn rows(
    (w, row_bytes, _, out): Args<'_, '_>,
    group: impl Fn(*const u8, *mut f32),
    one: impl Fn(*const u8, *mut f32),
) {
    let n = out.len();
    let (wp, op) = (w.as_ptr(), out.as_mut_ptr());
    let mut j = 0;
    while j + ROWS <= n {
        group(wp.add(j * row_bytes), op.add(j));
        j += ROWS;
    }
    while j < n {
        one(wp.add(j * row_bytes), op.add(j));
        j += 1;
    }
}

/// Runs `format`'s kernel with the byte product `D`; false when no kernel covers it.
#[inline(always)]
unsafe fn run<D: Dot>(format: QuantFormat, args: Args<'_, '_>) -> bool {
    let (rb, a) = (args.1, args.2);
    macro_rules! kernel {
        ($k:ident $(, $c:tt)*) => {
            rows(
                args,
                |w, o| $k::<D, $($c,)* ROWS>(w, rb, a, o),
                |w, o| $k::<D, $($c,)* 1>(w, rb, a, o),
            )
        };
    }
    use x86_k::{dot_k16, dot_q45k, Q2K, Q3K, Q6K};
    match format {
        QuantFormat::Q4_0 => kernel!(dot_q45, false, false),
        QuantFormat::Q4_1 => kernel!(dot_q45, false, true),
        QuantFormat::Q5_0 => kernel!(dot_q45, true, false),
        QuantFormat::Q5_1 => kernel!(dot_q45, true, true),
        QuantFormat::Q8_0 => kernel!(dot_q8_0),
        QuantFormat::Q4K => kernel!(dot_q45k, false),
        QuantFormat::Q5K => kernel!(dot_q45k, true),
        QuantFormat::Q2K => kernel!(dot_k16, Q2K),
        QuantFormat::Q3K => kernel!(dot_k16, Q3K),
        QuantFormat::Q6K => kernel!(dot_k16, Q6K),
        _ => return false,
    }
    true
}

// One entry point per instruction set, each compiled with its features.
// SAFETY (all): called only when `isa()` found the features, with lengths checked.

/// [`run`] with AVX2 byte products.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn run_avx2(format: QuantFormat, args: Args<'_, '_>) -> bool {
    run::<Avx2>(format, args)
}

/// [`run`] with AVX-VNNI byte products.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(super) unsafe fn run_avxvnni(format: QuantFormat, args: Args<'_, '_>) -> bool {
    run::<AvxVnni>(format, args)
}

/// [`run`] with AVX-512 VNNI byte products (on 256-bit registers).
#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
pub(super) unsafe fn run_avx512vnni(format: QuantFormat, args: Args<'_, '_>) -> bool {
    run::<Avx512Vnni>(format, args)
}
