//! f32 scaled dot-product attention: per (batch, head), scores = q.k^T, masked softmax in
//! place, out = p.v. Batches run in parallel when there are enough. With AVX2/FMA and at
//! least 32 queries both products run on the packed GEMM's register tile (k^T and v packed
//! per head); otherwise through the `gemm` crate.

use super::matmul::{gemm, Mat};
use super::packed_gemm::{self, PackedRhs};
use crate::fast::math;
use crate::interp::index::{broadcast_map, broadcast_strides, for_each_index};
use rayon::prelude::*;
use rlx_ir::AttnMask;

/// Query rows from which attention packs its k^T and v operands per head.
const PACK_ROWS: usize = 32;

/// A compiled attention.
#[derive(Debug, Clone)]
pub(crate) struct AttnPlan {
    pub sq: usize,
    pub sk: usize,
    pub d: usize,
    pub dv: usize,
    /// element offsets of each batch's q, k, v matrices
    pub q_off: Vec<usize>,
    pub k_off: Vec<usize>,
    pub v_off: Vec<usize>,
    pub mask: AttnMask,
    /// additive mask: per-batch offset, then row and column strides
    pub m_off: Vec<usize>,
    pub m_rs: usize,
    pub m_cs: usize,
    pub scale: f32,
    pub workers: usize,
    pub threads: usize,
}

impl AttnPlan {
    /// Plans attention over operands of the given shapes giving `out`.
    pub fn new(
        mask: AttnMask,
        scale: Option<f64>,
        ins: &[&[usize]],
        out: &[usize],
        threads: usize,
    ) -> AttnPlan {
        let r = out.len();
        let batch = &out[..r - 2];
        let offs = |s: &[usize]| -> Vec<usize> {
            let mat = s[r - 2] * s[r - 1];
            broadcast_map(&s[..r - 2], batch)
                .into_iter()
                .map(|b| b * mat)
                .collect()
        };
        let (sq, dv) = (out[r - 2], out[r - 1]);
        let (d, sk) = (ins[0][r - 1], ins[1][r - 2]);
        let (mut m_off, mut m_rs, mut m_cs) = (vec![], 0, 0);
        if let Some(ms) = ins.get(3) {
            let mut scores = batch.to_vec();
            scores.extend([sq, sk]);
            let st = broadcast_strides(ms, &scores);
            for_each_index(batch, |_, idx| {
                m_off.push(idx.iter().zip(&st).map(|(i, s)| i * s).sum())
            });
            (m_rs, m_cs) = (st[r - 2], st[r - 1]);
        }
        let n_batch: usize = batch.iter().product();
        AttnPlan {
            sq,
            sk,
            d,
            dv,
            q_off: offs(ins[0]),
            k_off: offs(ins[1]),
            v_off: offs(ins[2]),
            mask,
            m_off,
            m_rs,
            m_cs,
            scale: scale.unwrap_or(1.0 / (d as f64).sqrt()) as f32,
            workers: if n_batch >= 2 {
                n_batch.min(threads)
            } else {
                1
            },
            threads,
        }
    }

    /// f32 elements of score scratch needed.
    pub fn scratch_len(&self) -> usize {
        self.workers * self.sq * self.sk
    }

    /// Runs attention; `mask` is the additive mask when there is one.
    pub fn run(
        &self,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        mask: Option<&[f32]>,
        out: &mut [f32],
        scratch: &mut [f32],
    ) {
        let (sq, sk, dv) = (self.sq, self.sk, self.dv);
        let n_batch = self.q_off.len();
        if sq * dv == 0 || n_batch == 0 {
            return;
        }
        let per = n_batch.div_ceil(self.workers);
        let gemm_threads = if self.workers == 1 { self.threads } else { 1 };
        let scores: Vec<&mut [f32]> = if sk == 0 {
            (0..self.workers).map(|_| Default::default()).collect()
        } else {
            scratch.chunks_mut(sq * sk).collect()
        };
        // packing k^T and v costs about what `PACK_ROWS` query rows of arithmetic do: fewer
        // queries (decode steps, short prompts over a long cache) stay on the gemm crate
        let packed = packed_gemm::supported() && sq >= PACK_ROWS;
        out.par_chunks_mut(per * sq * dv)
            .zip(scores.into_par_iter())
            .enumerate()
            .for_each(|(w, (outs, s))| {
                let mut ops = packed.then(|| (PackedRhs::empty(), PackedRhs::empty()));
                for (j, o) in outs.chunks_mut(sq * dv).enumerate() {
                    self.one(w * per + j, q, k, v, mask, o, s, ops.as_mut(), gemm_threads);
                }
            });
    }

    /// One (batch, head): on the packed GEMM when `ops` holds this worker's packing storage
    /// for k^T and v, through the `gemm` crate otherwise.
    #[allow(clippy::too_many_arguments)]
    fn one(
        &self,
        b: usize,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        mask: Option<&[f32]>,
        out: &mut [f32],
        s: &mut [f32],
        ops: Option<&mut (PackedRhs, PackedRhs)>,
        threads: usize,
    ) {
        let (sq, sk, d, dv) = (self.sq, self.sk, self.d, self.dv);
        if sk == 0 {
            out.fill(0.0);
            return;
        }
        let (q, k, v) = (
            &q[self.q_off[b]..],
            &k[self.k_off[b]..],
            &v[self.v_off[b]..],
        );
        match ops {
            Some((kt, vp)) => {
                // k^T[d x sk]: element (i, j) is k[j][i]
                kt.repack(&k[..sk * d], d, sk, 1, d);
                vp.repack(&v[..sk * dv], sk, dv, dv, 1);
                packed_gemm::gemm_packed(sq, &q[..sq * d], kt, s, threads);
                self.softmax(b, s, mask);
                packed_gemm::gemm_packed(sq, s, vp, out, threads);
            }
            None => {
                let mat = |data, rs, cs| Mat { data, rs, cs };
                gemm(
                    sq,
                    sk,
                    d,
                    mat(q, d, 1),
                    mat(k, 1, d),
                    s,
                    sk,
                    false,
                    1.0,
                    1.0,
                    threads,
                );
                self.softmax(b, s, mask);
                let p = mat(&*s, sk, 1);
                gemm(
                    sq,
                    dv,
                    sk,
                    p,
                    mat(v, dv, 1),
                    out,
                    dv,
                    false,
                    1.0,
                    1.0,
                    threads,
                );
            }
        }
    }

    /// Scales, masks and normalises the score rows of batch `b` in place.
    fn softmax(&self, b: usize, s: &mut [f32], mask: Option<&[f32]>) {
        #[cfg(target_arch = "x86_64")]
        if packed_gemm::fma() {
            // SAFETY: AVX2 and FMA are present.
            return unsafe { self.softmax_fma(b, s, mask) };
        }
        self.softmax_rows::<false>(b, s, mask)
    }

    /// [`AttnPlan::softmax`] compiled for AVX2/FMA, so every pass vectorises 8 lanes wide.
    ///
    /// # Safety
    /// AVX2 and FMA are present.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn softmax_fma(&self, b: usize, s: &mut [f32], mask: Option<&[f32]>) {
        self.softmax_rows::<true>(b, s, mask)
    }

    #[inline(always)]
    fn softmax_rows<const FMA: bool>(&self, b: usize, s: &mut [f32], mask: Option<&[f32]>) {
        let (sq, sk, scale) = (self.sq, self.sk, self.scale);
        for (i, row) in s.chunks_mut(sk).enumerate() {
            match mask {
                Some(m) if self.m_cs == 1 => {
                    let m = &m[self.m_off[b] + i * self.m_rs..][..sk];
                    row.iter_mut()
                        .zip(m)
                        .for_each(|(x, &a)| *x = *x * scale + a);
                }
                Some(m) => {
                    let base = self.m_off[b] + i * self.m_rs;
                    for (j, x) in row.iter_mut().enumerate() {
                        *x = *x * scale + m[base + j * self.m_cs];
                    }
                }
                None => row.iter_mut().for_each(|x| *x *= scale),
            }
            if self.mask == AttnMask::Causal {
                // query i sees keys j <= i + sk - sq
                let seen = (i + sk + 1).saturating_sub(sq).min(sk);
                row[seen..].fill(f32::NEG_INFINITY);
            }
            let max = super::norm::max(row);
            if max == f32::NEG_INFINITY {
                row.fill(0.0);
                continue;
            }
            for x in row.iter_mut() {
                *x = math::exp::<FMA>(*x - max);
            }
            let inv = 1.0 / super::norm::sum(row);
            row.iter_mut().for_each(|x| *x *= inv);
        }
    }
}
