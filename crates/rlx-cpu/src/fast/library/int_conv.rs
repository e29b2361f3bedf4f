//! `Op::ConvInteger` on the integer GEMM (`fast::int_gemm`): per image and group, the
//! weight rows (packed once per bound tensor, at compile time for a constant) times the
//! input's patches (`int_gemm::im2col`, packed per run), so the sums land in NCHW order;
//! per-channel weight zero points, the bias and the requantization follow in one pass.

use super::int_matmul::ints;
use super::packed_weight::PackedWeight;
use super::WeightSource;
use crate::fast::int_gemm::im2col::Patches;
use crate::fast::int_gemm::pack::{ASource, PackedA, PackedB};
use crate::fast::int_gemm::{self, Isa, Out};
use crate::fast::memory::{Data, DataMut};
use crate::CpuError;
use rlx_ir::int_conv::{requantize, BIAS, MULTIPLIER, Y_ZERO};
use rlx_ir::int_matmul::range;
use rlx_ir::{DType, IntConv, Tensor};
use std::collections::HashMap;
use std::sync::Arc;

/// The weight rows of every group, packed as the product's left operand.
type GroupRows = Vec<PackedA>;

/// A compiled integer convolution.
#[derive(Debug)]
pub(crate) struct IntConvPlan {
    p: IntConv,
    /// images, output channels, output channels per group
    batch: usize,
    m: usize,
    m_group: usize,
    /// the window of one group
    patches: Patches,
    threads: usize,
    isa: Isa,
    /// the weight's rows packed per group, once per bound tensor
    weight: PackedWeight<GroupRows>,
}

fn invalid(what: &str) -> CpuError {
    CpuError::Invalid(format!("conv_integer: {what}"))
}

impl IntConvPlan {
    /// A plan for `x: [n, c, h, w]` by `w: [m, c / groups, kh, kw]` into `out`; `source`
    /// says where `w` comes from when it is a weight (then packed once).
    pub fn new(
        p: IntConv,
        x: &[usize],
        w: &[usize],
        out: &[usize],
        threads: usize,
        source: Option<WeightSource>,
    ) -> IntConvPlan {
        let c = p.conv;
        let plan = IntConvPlan {
            p,
            batch: x[0],
            m: w[0],
            m_group: w[0] / c.groups.max(1),
            patches: Patches {
                channels: w[1],
                h: x[2],
                w: x[3],
                kh: w[2],
                kw: w[3],
                stride: c.stride,
                pad: [c.pads[0], c.pads[1]],
                dilation: c.dilation,
                oh: out[2],
                ow: out[3],
            },
            threads,
            isa: Isa::best(),
            weight: PackedWeight::new(source),
        };
        plan.weight
            .prepack(|t| plan.pack(t.data().as_bytes(), t.dtype() == DType::I8));
        plan
    }

    /// i32 scratch values a requantized run needs (the sums of one image and group).
    pub fn scratch_len(&self) -> usize {
        self.m_group * self.patches.oh * self.patches.ow
    }

    /// The weight rows of every group, packed as the product's left operand with zero
    /// point 0 (the real zero points are applied per channel afterwards).
    fn pack(&self, w: &[u8], signed: bool) -> Option<Vec<PackedA>> {
        let k = self.patches.k();
        if w.len() != self.m * k {
            return None;
        }
        let rows = self.m_group * k;
        let groups = w.chunks_exact(rows.max(1)).map(|g| {
            let mut a = PackedA::default();
            let src = if signed {
                // SAFETY: i8 and u8 have the same size and alignment.
                let s = unsafe { std::slice::from_raw_parts(g.as_ptr().cast::<i8>(), g.len()) };
                ASource::I8(s, 0)
            } else {
                ASource::U8(g, 0)
            };
            a.fill(src, self.m_group, k, 1);
            a
        });
        Some(groups.collect())
    }

    /// The packed weight rows for this run: the cached packing while the same tensor is
    /// bound, else a fresh one (kept when `w` is a weight).
    fn packed(
        &self,
        params: &HashMap<String, Arc<Tensor>>,
        w: Data<'_>,
    ) -> Result<Arc<GroupRows>, CpuError> {
        let signed = matches!(w, Data::I8(_));
        self.weight.get(params, || {
            self.pack(w.bytes(), signed)
                .ok_or_else(|| invalid("weight size differs from the plan's"))
        })
    }

    /// Runs the convolution: `ins` are the op's operands (as `rlx_ir::int_conv` lists
    /// them), `dst` its result, `scratch` i32 room of [`IntConvPlan::scratch_len`] values
    /// for a requantized op.
    pub fn run(
        &self,
        ins: &[Data<'_>],
        dst: DataMut<'_>,
        scratch: Option<DataMut<'_>>,
        params: &HashMap<String, Arc<Tensor>>,
    ) -> Result<(), CpuError> {
        let rows = self.packed(params, ins[1])?;
        let (x, signed) = match ins[0] {
            Data::U8(x) => (x, false),
            Data::I8(_) => (ins[0].bytes(), true),
            _ => return Err(invalid("x is not u8 or i8")),
        };
        let xz = *ins[2]
            .bytes()
            .first()
            .ok_or_else(|| invalid("x_zero holds no value"))?;
        let xz_value = ints(ins[2])[0];
        let wz = ints(ins[3]);
        let g = &self.patches;
        let (k, plane) = (g.k(), g.oh * g.ow);
        let in_plane = g.channels * g.h * g.w;
        let groups = self.m / self.m_group.max(1);
        let requant = if self.p.requantize {
            let mul = ins[MULTIPLIER]
                .f32()
                .ok_or_else(|| invalid("multiplier is not f32"))?;
            let yz = ints(ins[Y_ZERO]);
            let bias = ins.get(BIAS).map(|&b| ints(b));
            Some((mul, yz[0], bias))
        } else {
            None
        };
        let (mut out_i32, mut out_bytes, mut sums) = match (dst, scratch, &requant) {
            (DataMut::I32(o), _, None) => (Some(o), None, None),
            (d @ (DataMut::U8(_) | DataMut::I8(_)), Some(DataMut::I32(s)), Some(_)) => {
                (None, Some(d.bytes()), Some(s))
            }
            _ => return Err(invalid("result dtype the plan was not compiled for")),
        };
        let (lo, hi) = match ins.get(Y_ZERO) {
            Some(Data::I8(_)) => range(DType::I8),
            _ => range(DType::U8),
        };
        for b in 0..self.batch {
            for gi in 0..groups {
                let xs = &x[(b * groups + gi) * in_plane..(b * groups + gi + 1) * in_plane];
                let patches = PackedB::im2col(xs, signed, xz, g, self.threads);
                let first = gi * self.m_group;
                let at = (b * self.m + first) * plane;
                let len = self.m_group * plane;
                let target: &mut [i32] = match (&mut out_i32, &mut sums) {
                    (Some(o), _) => &mut o[at..at + len],
                    (None, Some(s)) => &mut s[..len],
                    _ => unreachable!("one of the two is set above"),
                };
                int_gemm::gemm(
                    self.isa,
                    &rows[gi],
                    &patches,
                    &[xz_value],
                    Out::I32(target),
                    self.threads,
                );
                // (x - xz) summed per column, for the per-channel weight zero points
                let wz_of = |o: usize| wz[if wz.len() == 1 { 0 } else { first + o }];
                let centred: Option<Vec<i32>> =
                    (0..self.m_group).any(|o| wz_of(o) != 0).then(|| {
                        patches
                            .given_col_sums()
                            .map(|s| s.wrapping_sub((k as i32).wrapping_mul(xz_value)))
                            .collect()
                    });
                for o in 0..self.m_group {
                    let row = &mut target[o * plane..(o + 1) * plane];
                    if let Some(cs) = &centred {
                        let z = wz_of(o);
                        for (v, &s) in row.iter_mut().zip(cs) {
                            *v = v.wrapping_sub(z.wrapping_mul(s));
                        }
                    }
                    if let (Some((mul, yz, bias)), Some(out)) = (&requant, &mut out_bytes) {
                        let ch = first + o;
                        let add = bias.as_ref().map_or(0, |b| b[ch]);
                        let scale = mul[if mul.len() == 1 { 0 } else { ch }];
                        let dst =
                            &mut out[(b * self.m + ch) * plane..(b * self.m + ch + 1) * plane];
                        requantize_row(row, add, scale, *yz, (lo, hi), lo < 0, dst);
                    }
                }
            }
        }
        Ok(())
    }
}

/// `requantize(sum + bias)` of one channel's row into bytes (i8 values, `signed`, as their
/// bytes), 32 values at a time where the CPU has AVX2.
fn requantize_row(
    sums: &[i32],
    bias: i32,
    scale: f32,
    zero: i32,
    (lo, hi): (i32, i32),
    signed: bool,
    out: &mut [u8],
) {
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        done = unsafe { requantize_avx2(sums, bias, scale, zero, (lo, hi), signed, out) };
    }
    for (o, &s) in out[done..].iter_mut().zip(&sums[done..]) {
        *o = requantize(s.wrapping_add(bias), scale, zero, lo, hi) as u8;
    }
}

/// [`requantize_row`]'s first multiple of 32 values, with the same arithmetic as
/// [`requantize`] (f32 product, round half to even, clamp with NaN to `lo`); returns how
/// many values it wrote.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn requantize_avx2(
    sums: &[i32],
    bias: i32,
    scale: f32,
    zero: i32,
    (lo, hi): (i32, i32),
    signed: bool,
    out: &mut [u8],
) -> usize {
    use std::arch::x86_64::*;
    let n = sums.len().min(out.len()) / 32 * 32;
    let b = _mm256_set1_epi32(bias);
    let s = _mm256_set1_ps(scale);
    let low = _mm256_set1_ps((lo - zero) as f32);
    let high = _mm256_set1_ps((hi - zero) as f32);
    let add = _mm256_set1_epi32(zero);
    // undoes the lane interleaving of the two packs below
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for i in (0..n).step_by(32) {
        let q = [0, 8, 16, 24].map(|o| {
            let v = _mm256_loadu_si256(sums.as_ptr().add(i + o).cast());
            let v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(v, b)), s);
            let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v);
            // max(NaN, low) is low, as f32::max gives
            let r = _mm256_min_ps(_mm256_max_ps(r, low), high);
            _mm256_add_epi32(_mm256_cvtps_epi32(r), add)
        });
        let ab = _mm256_packs_epi32(q[0], q[1]);
        let cd = _mm256_packs_epi32(q[2], q[3]);
        // every value is already in the target's range, so either pack is exact
        let bytes = if signed {
            _mm256_packs_epi16(ab, cd)
        } else {
            _mm256_packus_epi16(ab, cd)
        };
        let bytes = _mm256_permutevar8x32_epi32(bytes, order);
        _mm256_storeu_si256(out.as_mut_ptr().add(i).cast(), bytes);
    }
    n
}
