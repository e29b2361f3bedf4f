//! f32 scaled dot-product attention: per (batch, head), scores = q.k^T, masked softmax in
//! place, out = p.v. Batches run in parallel when there are enough. With AVX2/FMA and at
//! least 32 queries both products run on the packed GEMM's register tile (k^T and v packed
//! per head); otherwise through the `gemm` crate.

use super::matmul::{gemm, Mat};
use super::packed_gemm::{self, PackedRhs};
use crate::fast::math;
use crate::fast::memory::OutPtr;
use crate::fast::pool;
use rlx_interp::index::{broadcast_strides, for_each_index};
use rlx_ir::AttnMask;
use std::sync::Mutex;

/// Query rows from which attention packs its k^T and v operands per head.
const PACK_ROWS: usize = 32;

/// Where attention reads an operand or writes its result: the element offset of each
/// batch's matrix, and the row and column strides inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Operand {
    pub off: Vec<usize>,
    pub rs: usize,
    pub cs: usize,
}

impl Operand {
    /// Operand `shape` (batch dims aligned right to `batch`; size-1 dims broadcast) read at
    /// `offset` with one stride per dim of `shape`.
    pub fn strided(shape: &[usize], offset: usize, strides: &[usize], batch: &[usize]) -> Operand {
        let r = shape.len();
        let lead = (batch.len() + 2).saturating_sub(r);
        let st: Vec<usize> = (0..batch.len())
            .map(|d| {
                if d < lead || shape[d - lead] == 1 {
                    0
                } else {
                    strides[d - lead]
                }
            })
            .collect();
        let mut off = Vec::new();
        for_each_index(batch, |_, idx| {
            off.push(offset + idx.iter().zip(&st).map(|(i, s)| i * s).sum::<usize>())
        });
        Operand {
            off,
            rs: if shape[r - 2] == 1 { 0 } else { strides[r - 2] },
            cs: if shape[r - 1] == 1 { 0 } else { strides[r - 1] },
        }
    }

    /// Operand `shape` stored packed row-major.
    pub fn packed(shape: &[usize], batch: &[usize]) -> Operand {
        let strides = rlx_interp::index::strides(shape);
        Operand::strided(shape, 0, &strides, batch)
    }

    /// One past the last element of batch `b`'s `rows x cols` matrix (its offset when the
    /// matrix is empty).
    fn end(&self, b: usize, rows: usize, cols: usize) -> usize {
        if rows == 0 || cols == 0 {
            return self.off[b];
        }
        self.off[b] + (rows - 1) * self.rs + (cols - 1) * self.cs + 1
    }
}

/// A compiled attention.
#[derive(Debug, Clone)]
pub(crate) struct AttnPlan {
    pub sq: usize,
    pub sk: usize,
    pub d: usize,
    pub dv: usize,
    /// where q, k and v are read and the result written
    pub q: Operand,
    pub k: Operand,
    pub v: Operand,
    pub out: Operand,
    /// the result is not packed: each matrix goes through scratch, then to its rows
    pub scatter: bool,
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
    /// Plans attention over operands of the given shapes giving `out`; `q`, `k`, `v` and
    /// `result` are read and written as given (packed ones by default, see [`Operand`]).
    pub fn new(
        mask: AttnMask,
        scale: Option<f64>,
        ins: &[&[usize]],
        out: &[usize],
        views: [Option<Operand>; 4],
        threads: usize,
    ) -> AttnPlan {
        let r = out.len();
        let batch = &out[..r - 2];
        let [q, k, v, o] = views;
        let q = q.unwrap_or_else(|| Operand::packed(ins[0], batch));
        let k = k.unwrap_or_else(|| Operand::packed(ins[1], batch));
        let v = v.unwrap_or_else(|| Operand::packed(ins[2], batch));
        let o = o.unwrap_or_else(|| Operand::packed(out, batch));
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
            scatter: o != Operand::packed(out, batch),
            q,
            k,
            v,
            out: o,
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

    /// f32 elements of scratch needed: each worker's scores, and its result matrix when the
    /// result is not packed.
    pub fn scratch_len(&self) -> usize {
        self.workers * self.per_worker()
    }

    /// Each worker's scratch: its scores, one reciprocal row sum per query, and its result
    /// matrix when the result is not packed.
    fn per_worker(&self) -> usize {
        self.sq * self.sk + self.sq + if self.scatter { self.sq * self.dv } else { 0 }
    }

    /// True when every batch's operands lie inside the buffers given (checked once per run:
    /// the views come from the planner, the buffers from the arena).
    fn fits(&self, q: usize, k: usize, v: usize, out: usize) -> bool {
        let (sq, sk, d, dv) = (self.sq, self.sk, self.d, self.dv);
        (0..self.q.off.len()).all(|b| {
            self.q.end(b, sq, d) <= q
                && self.k.end(b, sk, d) <= k
                && self.v.end(b, sk, dv) <= v
                && self.out.end(b, sq, dv) <= out
        })
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
        let n_batch = self.q.off.len();
        if sq * dv == 0 || n_batch == 0 {
            return;
        }
        assert!(
            self.fits(q.len(), k.len(), v.len(), out.len()),
            "attention operands out of bounds"
        );
        let per = n_batch.div_ceil(self.workers);
        let gemm_threads = if self.workers == 1 { self.threads } else { 1 };
        let per_worker = self.per_worker();
        let scratch: Vec<Mutex<&mut [f32]>> = if per_worker == 0 {
            (0..self.workers).map(|_| Mutex::default()).collect()
        } else {
            scratch.chunks_mut(per_worker).map(Mutex::new).collect()
        };
        let scratch_of = |w: usize| scratch[w].lock().unwrap_or_else(|e| e.into_inner());
        // packing k^T and v costs about what `PACK_ROWS` query rows of arithmetic do: fewer
        // queries (decode steps, short prompts over a long cache) stay on the gemm crate
        let packed = packed_gemm::supported() && sq >= PACK_ROWS;
        if !self.scatter {
            pool::for_each_chunk_mut(out, per * sq * dv, |w, outs| {
                let mut s = scratch_of(w);
                let mut ops = packed.then(|| (PackedRhs::empty(), PackedRhs::empty()));
                for (j, o) in outs.chunks_mut(sq * dv).enumerate() {
                    self.one(
                        w * per + j,
                        q,
                        k,
                        v,
                        mask,
                        o,
                        &mut s,
                        ops.as_mut(),
                        gemm_threads,
                    );
                }
            });
            return;
        }
        // Strided results interleave across batches: each matrix is computed into the
        // worker's scratch, then its rows are written where the view puts them.
        let dst = OutPtr(out.as_mut_ptr());
        pool::for_each(scratch.len(), |w| {
            let mut s = scratch_of(w);
            let (scores, tile) = s.split_at_mut(sq * sk + sq);
            let mut ops = packed.then(|| (PackedRhs::empty(), PackedRhs::empty()));
            for b in w * per..((w + 1) * per).min(n_batch) {
                self.one(b, q, k, v, mask, tile, scores, ops.as_mut(), gemm_threads);
                for (i, row) in tile.chunks(dv).enumerate() {
                    let at = self.out.off[b] + i * self.out.rs;
                    // SAFETY (both arms): `fits` bounds every batch's result inside `out`,
                    // and distinct batches of a result view never share an element.
                    if self.out.cs == 1 {
                        unsafe {
                            std::ptr::copy_nonoverlapping(row.as_ptr(), dst.ptr().add(at), dv)
                        };
                    } else {
                        for (c, &x) in row.iter().enumerate() {
                            unsafe { *dst.ptr().add(at + c * self.out.cs) = x };
                        }
                    }
                }
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
        let (qo, ko, vo) = (&self.q, &self.k, &self.v);
        let (q, k, v) = (
            &q[qo.off[b]..qo.end(b, sq, d)],
            &k[ko.off[b]..ko.end(b, sk, d)],
            &v[vo.off[b]..vo.end(b, sk, dv)],
        );
        // the probabilities stay unnormalised through p.v; each result row is divided by
        // its sum afterwards (dv values a row instead of sk)
        let (s, inv) = s.split_at_mut(sq * sk);
        let inv = &mut inv[..sq];
        match ops {
            Some((kt, vp)) if qo.cs == 1 && qo.rs >= d => {
                // k^T[d x sk]: element (i, j) is k[j][i]
                kt.repack(k, d, sk, ko.cs, ko.rs);
                vp.repack(v, sk, dv, vo.rs, vo.cs);
                packed_gemm::gemm_packed_strided(sq, q, qo.rs, kt, s, sk, threads);
                self.softmax(b, s, inv, mask);
                packed_gemm::gemm_packed(sq, s, vp, out, threads);
            }
            _ => {
                let mat = |data, rs, cs| Mat { data, rs, cs };
                gemm(
                    sq,
                    sk,
                    d,
                    mat(q, qo.rs, qo.cs),
                    mat(k, ko.cs, ko.rs),
                    s,
                    sk,
                    false,
                    1.0,
                    1.0,
                    threads,
                );
                self.softmax(b, s, inv, mask);
                let p = mat(&*s, sk, 1);
                gemm(
                    sq,
                    dv,
                    sk,
                    p,
                    mat(v, vo.rs, vo.cs),
                    out,
                    dv,
                    false,
                    1.0,
                    1.0,
                    threads,
                );
            }
        }
        for (row, &r) in out.chunks_mut(dv).zip(inv.iter()) {
            row.iter_mut().for_each(|x| *x *= r);
        }
    }

    /// Masks and exponentiates the score rows of batch `b` in place (`e^(scale * (x - max))`,
    /// unnormalised) and writes each row's reciprocal sum to `inv` (0 for a row with every
    /// key masked, which is zeroed).
    fn softmax(&self, b: usize, s: &mut [f32], inv: &mut [f32], mask: Option<&[f32]>) {
        #[cfg(target_arch = "x86_64")]
        if packed_gemm::avx512() {
            // SAFETY: AVX-512F (with AVX2 and FMA) is present.
            return unsafe { self.softmax_avx512(b, s, inv, mask) };
        }
        #[cfg(target_arch = "x86_64")]
        if packed_gemm::fma() {
            // SAFETY: AVX2 and FMA are present.
            return unsafe { self.softmax_fma(b, s, inv, mask) };
        }
        self.softmax_rows::<false>(b, s, inv, mask)
    }

    /// [`AttnPlan::softmax`] compiled for AVX-512, so the exp pass runs 16 lanes wide.
    ///
    /// # Safety
    /// AVX-512F, AVX2 and FMA are present.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn softmax_avx512(
        &self,
        b: usize,
        s: &mut [f32],
        inv: &mut [f32],
        mask: Option<&[f32]>,
    ) {
        self.softmax_rows::<true>(b, s, inv, mask)
    }

    /// [`AttnPlan::softmax`] compiled for AVX2/FMA, so every pass vectorises 8 lanes wide.
    ///
    /// # Safety
    /// AVX2 and FMA are present.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn softmax_fma(&self, b: usize, s: &mut [f32], inv: &mut [f32], mask: Option<&[f32]>) {
        self.softmax_rows::<true>(b, s, inv, mask)
    }

    #[inline(always)]
    fn softmax_rows<const FMA: bool>(
        &self,
        b: usize,
        s: &mut [f32],
        inv: &mut [f32],
        mask: Option<&[f32]>,
    ) {
        let (sq, sk, scale) = (self.sq, self.sk, self.scale);
        // Without a mask to add to the scaled scores, the scale folds into the exponent's
        // FMA (a positive scale keeps the max where it is); with one, the scores are scaled
        // and masked first.
        let folded = mask.is_none() && scale > 0.0;
        let k = if folded { scale } else { 1.0 };
        for (i, (row, inv)) in s.chunks_mut(sk).zip(inv.iter_mut()).enumerate() {
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
                None if folded => {}
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
                *inv = 0.0;
                continue;
            }
            let shift = -k * max;
            // exp and its sum in one pass, sixteen partial sums so the loop vectorises
            let mut acc = [0.0f32; 16];
            let mut chunks = row.chunks_exact_mut(16);
            for c in &mut chunks {
                for (a, x) in acc.iter_mut().zip(c.iter_mut()) {
                    *x = math::exp_nonpositive::<FMA>(math::madd::<FMA>(*x, k, shift));
                    *a += *x;
                }
            }
            let mut total = 0.0;
            for x in chunks.into_remainder() {
                *x = math::exp_nonpositive::<FMA>(math::madd::<FMA>(*x, k, shift));
                total += *x;
            }
            *inv = 1.0 / (acc.iter().sum::<f32>() + total);
        }
    }
}
