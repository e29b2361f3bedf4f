//! Compile-time GEMM autotuning, the part that needs no GPU: which GEMMs count as the same
//! problem ([`TuneKey`]), the per-process cache of choices, and the selection rule
//! ([`fastest`]). `blas` asks cuBLASLt's heuristic for up to [`MAX_CANDIDATES`] algorithms
//! for a prepared GEMM (same descriptor, so the same compute and scale types), times each on
//! the program's own buffers and keeps the fastest; `RLX_CUDA_AUTOTUNE=0` keeps the
//! heuristic's first choice.

use crate::blas::Batching;
use crate::gemm::{Activation, GemmSpec, Operand};
use rlx_ir::DType;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// Algorithms asked of the heuristic per GEMM. 32 was tried on the H200 (2026-11-30): the
/// encoder at batch 256 read 2.39–2.43 ms against 2.36 with 8, each candidate being timed
/// alone on L2-warm operands, which the graph does not give it.
pub const MAX_CANDIDATES: usize = 8;
/// Untimed launches before timing a candidate (also proves it runs).
pub const WARMUP: usize = 3;
/// Launches per timed sample (captured as one CUDA graph, so launch gaps do not count).
pub const TIMED: usize = 10;
/// Samples per candidate, interleaved over the candidates; the minimum counts.
pub const ROUNDS: usize = 3;

/// What makes two GEMMs the same tuning problem: shapes, batch levels and strides, dtype and
/// compute mode, transposes, epilogue, alignment and batching. Buffers, offsets (beyond the
/// alignment they leave) and labels do not count.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TuneKey {
    dtype: DType,
    tf32: bool,
    m: usize,
    n: usize,
    k: usize,
    batch: usize,
    outer: usize,
    /// per operand (a, b, c): batch stride, outer stride, row stride, byte alignment
    operands: [(usize, usize, Option<usize>, u32); 3],
    trans_b: bool,
    bias: bool,
    residual: bool,
    activation: Activation,
    batching: Batching,
}

impl TuneKey {
    /// The key of `spec` prepared with `batching` (and TF32 when `tf32`).
    pub fn new(spec: &GemmSpec, tf32: bool, batching: Batching) -> TuneKey {
        let size = spec.dtype.size_bytes();
        let op = |o: &Operand| {
            (
                o.batch_stride,
                o.outer_stride,
                o.row_stride,
                o.alignment(size),
            )
        };
        TuneKey {
            dtype: spec.dtype,
            tf32: tf32 && spec.dtype == DType::F32,
            m: spec.m,
            n: spec.n,
            k: spec.k,
            batch: spec.batch,
            outer: spec.outer,
            operands: [op(&spec.a), op(&spec.b), op(&spec.c)],
            trans_b: spec.trans_b,
            bias: spec.bias.is_some(),
            residual: spec.residual.is_some(),
            activation: spec.activation,
            batching,
        }
    }
}

/// The index of the fastest candidate of `n` and its time: every candidate is timed
/// `rounds` times, round-robin, and its best sample counts; `time` returning None marks the
/// candidate failed (it is not timed again). Ties go to the earlier candidate (the
/// heuristic's order). None when every candidate failed.
pub fn fastest(
    n: usize,
    rounds: usize,
    mut time: impl FnMut(usize) -> Option<f64>,
) -> Option<(usize, f64)> {
    let mut best: Vec<Option<f64>> = vec![Some(f64::INFINITY); n];
    for _ in 0..rounds.max(1) {
        for (i, b) in best.iter_mut().enumerate() {
            let Some(cur) = *b else { continue };
            *b = match time(i) {
                Some(t) if t.is_finite() && t >= 0.0 => Some(cur.min(t)),
                _ => None,
            };
        }
    }
    best.iter()
        .enumerate()
        .filter_map(|(i, t)| t.map(|t| (i, t)))
        .fold(None, |acc: Option<(usize, f64)>, (i, t)| match acc {
            Some((_, bt)) if bt <= t => acc,
            _ => Some((i, t)),
        })
}

/// A cache of tuned choices by key.
pub struct TuneCache<V> {
    map: Mutex<HashMap<TuneKey, V>>,
}

impl<V: Clone> TuneCache<V> {
    /// An empty cache.
    pub fn new() -> Self {
        TuneCache {
            map: Mutex::new(HashMap::new()),
        }
    }

    /// The choice for `key`, if tuned before.
    pub fn get(&self, key: &TuneKey) -> Option<V> {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
    }

    /// Remembers the choice for `key`.
    pub fn insert(&self, key: TuneKey, v: V) {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, v);
    }

    /// Number of tuned problems.
    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// True when nothing was tuned yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<V: Clone> Default for TuneCache<V> {
    fn default() -> Self {
        Self::new()
    }
}

/// The process-wide cache of chosen cuBLASLt algorithms (the opaque 64-byte algorithm
/// structs, valid for any handle on the device).
pub(crate) fn algo_cache() -> &'static TuneCache<[u64; 8]> {
    static CACHE: OnceLock<TuneCache<[u64; 8]>> = OnceLock::new();
    CACHE.get_or_init(TuneCache::new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::ArgRef;

    fn operand(arg: usize, offset: usize) -> Operand {
        Operand {
            arg: ArgRef::Buffer(arg),
            offset,
            batch_stride: 0,
            outer_stride: 0,
            row_stride: None,
        }
    }

    fn spec(label: &str) -> GemmSpec {
        GemmSpec {
            label: label.into(),
            dtype: DType::F16,
            m: 128,
            n: 384,
            k: 384,
            batch: 1,
            outer: 1,
            a: operand(0, 0),
            b: operand(1, 0),
            c: operand(2, 0),
            bias: Some(ArgRef::Buffer(3)),
            activation: Activation::None,
            residual: None,
            trans_b: false,
            alpha: 1.0,
        }
    }

    #[test]
    fn identical_problems_share_a_key() {
        let a = spec("layer0.q");
        let mut b = spec("layer5.q");
        b.a.arg = ArgRef::Buffer(10);
        b.b.arg = ArgRef::Derived(0);
        b.c.arg = ArgRef::Scratch(2);
        b.bias = Some(ArgRef::Buffer(11));
        // an offset that keeps the 256-byte alignment
        b.a.offset = 128 * 384;
        let key = |s: &GemmSpec| TuneKey::new(s, false, Batching::Strided);
        assert_eq!(key(&a), key(&b));
        // TF32 means nothing for f16
        assert_eq!(key(&a), TuneKey::new(&a, true, Batching::Strided));
    }

    type Edit = Box<dyn Fn(&mut GemmSpec)>;

    #[test]
    fn different_problems_get_different_keys() {
        let base = spec("x");
        let key = |s: &GemmSpec| TuneKey::new(s, false, Batching::Strided);
        let k0 = key(&base);
        let variants: Vec<Edit> = vec![
            Box::new(|s| s.m = 256),
            Box::new(|s| s.n = 1152),
            Box::new(|s| s.k = 1536),
            Box::new(|s| s.dtype = DType::BF16),
            Box::new(|s| s.trans_b = true),
            Box::new(|s| s.bias = None),
            Box::new(|s| s.residual = Some(ArgRef::Buffer(4))),
            Box::new(|s| s.activation = Activation::GeluTanh),
            Box::new(|s| s.batch = 12),
            Box::new(|s| s.a.batch_stride = 128 * 384),
            Box::new(|s| s.c.row_stride = Some(1152)),
            // offset of one f16 element: 2-byte alignment
            Box::new(|s| s.a.offset = 1),
        ];
        for (i, v) in variants.iter().enumerate() {
            let mut s = base.clone();
            v(&mut s);
            assert_ne!(key(&s), k0, "variant {i}");
        }
        assert_ne!(TuneKey::new(&base, false, Batching::Loop), k0);
        let mut f = base.clone();
        f.dtype = DType::F32;
        assert_ne!(
            TuneKey::new(&f, true, Batching::Strided),
            TuneKey::new(&f, false, Batching::Strided)
        );
    }

    #[test]
    fn fastest_picks_the_minimum_over_rounds() {
        // candidate 1 is fastest on its best sample; samples vary per round
        let samples = [[5.0, 4.0, 6.0], [9.0, 2.0, 3.0], [3.0, 3.5, 2.5]];
        let mut calls = vec![0usize; 3];
        let got = fastest(3, 3, |i| {
            let t = samples[i][calls[i]];
            calls[i] += 1;
            Some(t)
        });
        assert_eq!(got, Some((1, 2.0)));
        assert_eq!(calls, vec![3, 3, 3]);
    }

    #[test]
    fn fastest_skips_failures_and_prefers_the_earlier_on_ties() {
        let mut calls = vec![0usize; 4];
        let got = fastest(4, 2, |i| {
            calls[i] += 1;
            match i {
                0 => Some(2.0),
                1 => None,
                2 => Some(2.0),
                _ => Some(f64::NAN),
            }
        });
        assert_eq!(got, Some((0, 2.0)));
        // failed candidates are not timed again
        assert_eq!(calls, vec![2, 1, 2, 1]);
        // a candidate failing in a later round is dropped too
        let mut round = [0usize; 2];
        let got = fastest(2, 2, |i| {
            round[i] += 1;
            if i == 1 && round[1] == 2 {
                None
            } else {
                Some(if i == 1 { 1.0 } else { 3.0 })
            }
        });
        assert_eq!(got, Some((0, 3.0)));
        assert_eq!(fastest(3, 2, |_| None), None);
        assert_eq!(fastest(0, 2, |_| Some(1.0)), None);
    }

    #[test]
    fn the_cache_remembers_by_key() {
        let cache: TuneCache<usize> = TuneCache::new();
        assert!(cache.is_empty());
        let a = TuneKey::new(&spec("a"), false, Batching::Strided);
        let mut s = spec("b");
        s.n = 1152;
        let b = TuneKey::new(&s, false, Batching::Strided);
        cache.insert(a.clone(), 3);
        assert_eq!(cache.get(&a), Some(3));
        assert_eq!(
            cache.get(&TuneKey::new(&spec("c"), false, Batching::Strided)),
            Some(3)
        );
        assert_eq!(cache.get(&b), None);
        cache.insert(b.clone(), 5);
        assert_eq!(cache.len(), 2);
    }
}
