//! The integer dot path: a packed weight row dotted with an activation row quantized to 8
//! bits ([`super::q8_act`]), block by block in integers, a float multiply-add per 32 values.
//!
//! Every activation block of 32 values is `dx * a` with `sx = dx * sum(a)`. A weight
//! block or sub-block of 32 values is `dw * q + mw` (or, for Q2_K, Q3_K and Q6_K, two
//! halves of 16 with their own scales), so per 32 values the dot is
//! `dw * dx * sum(q * a) + mw * sx`:
//! - Q4_0 / Q5_0: `q` in 0..16 / 0..32, `mw = -8 dw` / `-16 dw`;
//! - Q4_1 / Q5_1: `q` in 0..16 / 0..32, `mw` the block's minimum;
//! - Q8_0: `q` signed, `mw = 0`;
//! - Q4_K / Q5_K: per sub-block `dw = d * sc`, `mw = -dmin * m` (6-bit `sc`, `m`);
//! - Q6_K / Q3_K: `q - 32` in -32..32 / `q - 4` in -4..4, `dw = d * sc` (signed 8-bit /
//!   6-bit `sc`) per 16 values; the `- 32` / `- 4` is taken off the integer sums
//!   (`32 * sum(a)` / `4 * sum(a)` per four values, once per activation block for all rows);
//! - Q2_K: `q` in 0..4, per 16 values `dw = d * sc`, `mw = -dmin * m` (4-bit `sc`, `m`);
//!   the min terms take `dx * sum(a)` per 16 values, once per activation block for all
//!   rows.
//!
//! `sum(q * a)` is exact in i32; the only difference from the f32 path is the activation's
//! rounding to 8 bits (at most `dx / 2` a value), as in llama.cpp (whose k-quant dots round
//! the activations per 256 values; RLX keeps one scale per 32 for every format). On x86 the
//! byte products take AVX-VNNI or AVX-512 VNNI (`vpdpbusd`) where the CPU has them, else
//! AVX2 (`vpmaddubsw` + `vpmaddwd`), chosen once at run time ([`x86`] for the 32-value
//! formats, [`x86_k`] for the k-quants); [`scalar`] is the reference and the path elsewhere.
//!
//! Several activation rows (a batched decode step, a short prompt) share each unpacked
//! weight block: the kernels take up to [`ACT_ROWS`] of them, and a row's result is bit for
//! bit the one it gets alone.

mod scalar;
#[cfg(target_arch = "x86_64")]
mod x86;
#[cfg(target_arch = "x86_64")]
mod x86_k;

use super::q8_act::{Q8Row, QK};
use rlx_ir::QuantFormat;

/// Whether the integer path covers `format`.
pub(crate) fn supports(format: QuantFormat) -> bool {
    matches!(
        format,
        QuantFormat::Q4_0
            | QuantFormat::Q4_1
            | QuantFormat::Q5_0
            | QuantFormat::Q5_1
            | QuantFormat::Q8_0
            | QuantFormat::Q4K
            | QuantFormat::Q5K
            | QuantFormat::Q2K
            | QuantFormat::Q3K
            | QuantFormat::Q6K
    )
}

/// Activation rows a kernel dots with each weight block it unpacks: four of them by four
/// weight rows already take the 16 AVX2 registers in accumulators, and eight measured no
/// faster.
const ACT_ROWS: usize = 4;

/// Dot products of the packed rows in `w` (`n` rows of `row_bytes`, a format [`supports`]
/// accepts) with each quantized activation row `acts[i]` of the same length, into
/// `outs[i]` (`n` values each). A row's results do not depend on the rows beside it.
pub(crate) fn dot_rows(
    format: QuantFormat,
    w: &[u8],
    row_bytes: usize,
    acts: &[Q8Row<'_>],
    outs: &mut [&mut [f32]],
) {
    dot_rows_on(isa(), format, w, row_bytes, acts, outs)
}

/// [`dot_rows`] with the kernels of `isa` (which the CPU must have: [`isa`] or below).
fn dot_rows_on(
    isa: Isa,
    format: QuantFormat,
    w: &[u8],
    row_bytes: usize,
    acts: &[Q8Row<'_>],
    outs: &mut [&mut [f32]],
) {
    let (Some(a0), Some(o0)) = (acts.first(), outs.first()) else {
        return;
    };
    let (nb, n) = (a0.ds.len(), o0.len());
    assert!(
        supports(format)
            && acts.len() == outs.len()
            && (nb * QK).is_multiple_of(format.block())
            && row_bytes >= nb * QK / format.block() * format.block_bytes()
            && w.len() >= n * row_bytes
            && acts
                .iter()
                .all(|a| a.ds.len() == nb && a.qs.len() >= nb * QK)
            && outs.iter().all(|o| o.len() == n),
        "dot_i8 lengths"
    );
    for (acts, outs) in acts.chunks(ACT_ROWS).zip(outs.chunks_mut(ACT_ROWS)) {
        #[cfg(target_arch = "x86_64")]
        {
            let args = (w, row_bytes, acts, &mut *outs);
            // SAFETY: `isa` is what the CPU has, or below it (the callers' contract); the
            // lengths were checked above, and a chunk holds one to `ACT_ROWS` (4) rows.
            let done = unsafe {
                match isa {
                    Isa::AvxVnni => x86::run_avxvnni(format, args),
                    Isa::Avx512Vnni => x86::run_avx512vnni(format, args),
                    Isa::Avx2 => x86::run_avx2(format, args),
                    Isa::None => false,
                }
            };
            if done {
                continue;
            }
        }
        let _ = isa;
        for (a, out) in acts.iter().zip(outs.iter_mut()) {
            for (j, o) in out.iter_mut().enumerate() {
                *o = scalar::dot(format, &w[j * row_bytes..(j + 1) * row_bytes], *a);
            }
        }
    }
}

/// The instruction sets of this CPU, the scalar loop first, for tests that check each
/// kernel.
#[cfg(test)]
fn each_isa_of_this_cpu() -> Vec<Isa> {
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
    all
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
    each_isa_rows(format, w, row_bytes, &[a])
        .into_iter()
        .map(|(isa, mut rows)| (isa, rows.remove(0)))
        .collect()
}

/// [`each_isa`] for several activation rows dotted together: per instruction set, per
/// activation row, the dot products with `w`'s rows.
#[cfg(test)]
pub(crate) fn each_isa_rows(
    format: QuantFormat,
    w: &[u8],
    row_bytes: usize,
    acts: &[Q8Row<'_>],
) -> Vec<(String, Vec<Vec<f32>>)> {
    let n = w.len() / row_bytes;
    each_isa_of_this_cpu()
        .into_iter()
        .map(|isa| {
            let mut out = vec![vec![f32::NAN; n]; acts.len()];
            let mut outs: Vec<&mut [f32]> = out.iter_mut().map(|o| &mut o[..]).collect();
            dot_rows_on(isa, format, w, row_bytes, acts, &mut outs);
            (format!("{isa:?}"), out)
        })
        .collect()
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
