//! The integer dot path: a packed Q4_0, Q4_1 or Q8_0 weight row dotted with an activation
//! row quantized to 8 bits ([`super::q8_act`]), block by block in integers, one float
//! multiply-add per block of 32.
//!
//! Per block, with weight scale `dw` (and Q4_1 minimum `mw`) and activation block `dx * a`,
//! `s = dx * sum(a)`:
//! - Q4_1 (`w = dw * q + mw`): `dw * dx * sum(q * a) + mw * s`
//! - Q4_0 (`w = dw * (q - 8)`): `dw * dx * sum(q * a) - 8 * dw * s`
//! - Q8_0 (`w = dw * q`): `dw * dx * sum(q * a)`
//!
//! `sum(q * a)` is exact in i32; the only difference from the f32 path is the activation's
//! rounding to 8 bits (at most `dx / 2` a value), as in llama.cpp. On x86 the byte products
//! take AVX-VNNI or AVX-512 VNNI (`vpdpbusd`) where the CPU has them, else AVX2
//! (`vpmaddubsw` + `vpmaddwd`), chosen once at run time; a scalar loop elsewhere.

use super::q8_act::{Q8Row, QK};
use rlx_ir::QuantFormat;

/// Whether the integer path covers `format`.
pub(crate) fn supports(format: QuantFormat) -> bool {
    matches!(
        format,
        QuantFormat::Q4_0 | QuantFormat::Q4_1 | QuantFormat::Q8_0
    )
}

/// Dot products of the packed rows in `w` (`out.len()` rows of `row_bytes`, a format
/// [`supports`] accepts) with the quantized activation row `a` of the same length, into
/// `out`.
pub(crate) fn dot_rows(
    format: QuantFormat,
    w: &[u8],
    row_bytes: usize,
    a: Q8Row<'_>,
    out: &mut [f32],
) {
    dot_rows_on(isa(), format, w, row_bytes, a, out)
}

/// [`dot_rows`] with the kernels of `isa` (which the CPU must have: [`isa`] or below).
fn dot_rows_on(
    isa: Isa,
    format: QuantFormat,
    w: &[u8],
    row_bytes: usize,
    a: Q8Row<'_>,
    out: &mut [f32],
) {
    let nb = a.ds.len();
    assert!(
        row_bytes >= nb * format.block_bytes()
            && w.len() >= out.len() * row_bytes
            && a.qs.len() >= nb * QK,
        "dot_i8 lengths"
    );
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `isa` is what the CPU has, or below it (the callers' contract); the lengths
    // were checked above.
    unsafe {
        let args = (w, row_bytes, a, &mut *out);
        match (isa, format) {
            (Isa::AvxVnni, QuantFormat::Q4_1) => return x86::q4_1_avxvnni(args),
            (Isa::AvxVnni, QuantFormat::Q4_0) => return x86::q4_0_avxvnni(args),
            (Isa::AvxVnni, QuantFormat::Q8_0) => return x86::q8_0_avxvnni(args),
            (Isa::Avx512Vnni, QuantFormat::Q4_1) => return x86::q4_1_avx512(args),
            (Isa::Avx512Vnni, QuantFormat::Q4_0) => return x86::q4_0_avx512(args),
            (Isa::Avx512Vnni, QuantFormat::Q8_0) => return x86::q8_0_avx512(args),
            (Isa::Avx2, QuantFormat::Q4_1) => return x86::q4_1_avx2(args),
            (Isa::Avx2, QuantFormat::Q4_0) => return x86::q4_0_avx2(args),
            (Isa::Avx2, QuantFormat::Q8_0) => return x86::q8_0_avx2(args),
            _ => {}
        }
    }
    let _ = isa;
    for (j, o) in out.iter_mut().enumerate() {
        *o = dot_scalar(format, &w[j * row_bytes..(j + 1) * row_bytes], a);
    }
}

/// Every instruction set this CPU has (the scalar loop first) and the dot products of
/// `w`'s rows with `a` its kernels give, for tests that check each kernel.
#[cfg(test)]
pub(crate) fn each_isa(
    format: QuantFormat,
    w: &[u8],
    row_bytes: usize,
    a: Q8Row<'_>,
) -> Vec<(String, Vec<f32>)> {
    let best = isa();
    let mut all = vec![Isa::None];
    #[cfg(target_arch = "x86_64")]
    {
        let has = |f: &str| match f {
            "avxvnni" => is_x86_feature_detected!("avxvnni"),
            _ => is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl"),
        };
        if best != Isa::None {
            all.push(Isa::Avx2);
            if has("avxvnni") {
                all.push(Isa::AvxVnni);
            }
            if has("avx512vnni") {
                all.push(Isa::Avx512Vnni);
            }
        }
    }
    let rows = w.len() / row_bytes;
    all.into_iter()
        .map(|i| {
            let mut out = vec![f32::NAN; rows];
            dot_rows_on(i, format, w, row_bytes, a, &mut out);
            (format!("{i:?}"), out)
        })
        .collect()
}

/// The scalar reference of one row of [`dot_rows`] (and its path off x86).
fn dot_scalar(format: QuantFormat, w: &[u8], a: Q8Row<'_>) -> f32 {
    let bb = format.block_bytes();
    let h = |b: &[u8], i: usize| half::f16::from_le_bytes([b[i], b[i + 1]]).to_f32();
    let mut acc = 0f32;
    for ((blk, qa), &[dx, sx]) in w.chunks_exact(bb).zip(a.qs.chunks_exact(QK)).zip(a.ds) {
        let dw = h(blk, 0);
        acc += match format {
            QuantFormat::Q8_0 => {
                let sum: i32 = blk[2..34]
                    .iter()
                    .zip(qa)
                    .map(|(&q, &x)| (q as i8) as i32 * x as i32)
                    .sum();
                dw * dx * sum as f32
            }
            QuantFormat::Q4_0 | QuantFormat::Q4_1 => {
                let qs = if format == QuantFormat::Q4_1 { 4 } else { 2 };
                let sum: i32 = blk[qs..qs + 16]
                    .iter()
                    .enumerate()
                    .map(|(j, &q)| {
                        (q & 15) as i32 * qa[j] as i32 + (q >> 4) as i32 * qa[j + 16] as i32
                    })
                    .sum();
                let off = if format == QuantFormat::Q4_1 {
                    h(blk, 2)
                } else {
                    -8.0 * dw
                };
                dw * dx * sum as f32 + off * sx
            }
            _ => unreachable!("dot_i8 covers q4_0, q4_1 and q8_0 only"),
        };
    }
    acc
}

/// The instruction set the kernels use (`None`: the scalar loop).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
enum Isa {
    None,
    Avx2,
    AvxVnni,
    Avx512Vnni,
}

#[cfg(not(target_arch = "x86_64"))]
fn isa() -> Isa {
    Isa::None
}

/// The best instruction set of this CPU, detected once.
#[cfg(target_arch = "x86_64")]
fn isa() -> Isa {
    use std::sync::OnceLock;
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(|| {
        let base = is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c");
        if !base {
            Isa::None
        } else if is_x86_feature_detected!("avxvnni") {
            Isa::AvxVnni
        } else if is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl") {
            Isa::Avx512Vnni
        } else {
            Isa::Avx2
        }
    })
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Q8Row, QK};
    use std::arch::x86_64::*;

    /// `acc + ` the sums of four adjacent products of unsigned bytes `u` and signed bytes
    /// `s`, per 32-bit lane; the products of one lane must not exceed `i16` in pairs (they
    /// do not: `u <= 128`, `|s| <= 127`).
    pub(super) trait Dot {
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

    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
    }

    /// The block's activation `[dx, dx * sum(a)]` in lanes 0 and 1.
    #[inline(always)]
    unsafe fn act_scales(ds: *const [f32; 2]) -> __m128 {
        _mm_castpd_ps(_mm_load_sd(ds as *const f64))
    }

    /// The 32 nibbles of a Q4 block's 16 bytes at `p`, in value order (low nibbles are
    /// values 0..16, high nibbles 16..32).
    #[inline(always)]
    unsafe fn nibbles(p: *const u8) -> __m256i {
        let q = _mm_loadu_si128(p as *const __m128i);
        let both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
        _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
    }

    /// The arguments of a kernel: `out.len()` rows of `row_bytes` from `w`, the activation
    /// row, the results.
    pub(super) type Args<'a, 'b> = (&'a [u8], usize, Q8Row<'a>, &'b mut [f32]);

    /// Rows dotted together: they share each activation block's load and scales.
    const ROWS: usize = 4;

    /// Q4_0 (`MIN` false) or Q4_1 (`MIN` true) rows dot `a`, `R` rows at a time; lengths
    /// checked by the caller.
    #[inline(always)]
    unsafe fn dot_q4<D: Dot, const MIN: bool, const R: usize>(
        w: *const u8,
        row_bytes: usize,
        a: Q8Row<'_>,
        out: *mut f32,
    ) {
        let (bb, qo) = if MIN { (20, 4) } else { (18, 2) };
        let (ap, dsp) = (a.qs.as_ptr(), a.ds.as_ptr());
        // lane 0 scales the block's integer sum, lane 1 is the block's offset term
        let off_mul = if MIN {
            _mm_set1_ps(1.0)
        } else {
            _mm_setr_ps(1.0, -8.0, 0.0, 0.0)
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
                let p = D::dot(_mm256_setzero_si256(), nibbles(blk.add(qo)), x);
                // [dw, mw] (Q4_1) or [dw, dw] (Q4_0), times [dx, sx]
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

    /// Runs `group` (a kernel of `ROWS` rows) over the rows, then `one` (the kernel of one
    /// row) on the rest; both take the first row's bytes and result. Closures, not function
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

    // One entry point per (format, instruction set), each compiled with its features.
    // SAFETY (all): called only when `isa()` found the features, with lengths checked.

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn q4_1_avx2(args: Args<'_, '_>) {
        let (rb, a) = (args.1, args.2);
        rows(
            args,
            |w, o| dot_q4::<Avx2, true, ROWS>(w, rb, a, o),
            |w, o| dot_q4::<Avx2, true, 1>(w, rb, a, o),
        )
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn q4_0_avx2(args: Args<'_, '_>) {
        let (rb, a) = (args.1, args.2);
        rows(
            args,
            |w, o| dot_q4::<Avx2, false, ROWS>(w, rb, a, o),
            |w, o| dot_q4::<Avx2, false, 1>(w, rb, a, o),
        )
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn q8_0_avx2(args: Args<'_, '_>) {
        let (rb, a) = (args.1, args.2);
        rows(
            args,
            |w, o| dot_q8_0::<Avx2, ROWS>(w, rb, a, o),
            |w, o| dot_q8_0::<Avx2, 1>(w, rb, a, o),
        )
    }
    #[target_feature(enable = "avx2,fma,f16c,avxvnni")]
    pub(super) unsafe fn q4_1_avxvnni(args: Args<'_, '_>) {
        let (rb, a) = (args.1, args.2);
        rows(
            args,
            |w, o| dot_q4::<AvxVnni, true, ROWS>(w, rb, a, o),
            |w, o| dot_q4::<AvxVnni, true, 1>(w, rb, a, o),
        )
    }
    #[target_feature(enable = "avx2,fma,f16c,avxvnni")]
    pub(super) unsafe fn q4_0_avxvnni(args: Args<'_, '_>) {
        let (rb, a) = (args.1, args.2);
        rows(
            args,
            |w, o| dot_q4::<AvxVnni, false, ROWS>(w, rb, a, o),
            |w, o| dot_q4::<AvxVnni, false, 1>(w, rb, a, o),
        )
    }
    #[target_feature(enable = "avx2,fma,f16c,avxvnni")]
    pub(super) unsafe fn q8_0_avxvnni(args: Args<'_, '_>) {
        let (rb, a) = (args.1, args.2);
        rows(
            args,
            |w, o| dot_q8_0::<AvxVnni, ROWS>(w, rb, a, o),
            |w, o| dot_q8_0::<AvxVnni, 1>(w, rb, a, o),
        )
    }
    #[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
    pub(super) unsafe fn q4_1_avx512(args: Args<'_, '_>) {
        let (rb, a) = (args.1, args.2);
        rows(
            args,
            |w, o| dot_q4::<Avx512Vnni, true, ROWS>(w, rb, a, o),
            |w, o| dot_q4::<Avx512Vnni, true, 1>(w, rb, a, o),
        )
    }
    #[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
    pub(super) unsafe fn q4_0_avx512(args: Args<'_, '_>) {
        let (rb, a) = (args.1, args.2);
        rows(
            args,
            |w, o| dot_q4::<Avx512Vnni, false, ROWS>(w, rb, a, o),
            |w, o| dot_q4::<Avx512Vnni, false, 1>(w, rb, a, o),
        )
    }
    #[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
    pub(super) unsafe fn q8_0_avx512(args: Args<'_, '_>) {
        let (rb, a) = (args.1, args.2);
        rows(
            args,
            |w, o| dot_q8_0::<Avx512Vnni, ROWS>(w, rb, a, o),
            |w, o| dot_q8_0::<Avx512Vnni, 1>(w, rb, a, o),
        )
    }
}
