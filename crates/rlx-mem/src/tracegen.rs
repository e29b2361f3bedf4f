//! Synthetic allocation traces of transformer inference at every scale, generated in memory
//! from a seed, so tests and replays need no trace files.
//!
//! The workload: requests run one after another, each a prefill over its prompt (per layer:
//! norm, q/k/v, attention scores or a fused attention, output, MLP), then decode steps that
//! grow every layer's KV cache by allocating it longer and freeing the old one (as frameworks
//! that concatenate do), so long-lived caches of drifting sizes interleave with short-lived
//! activations. A decode step may add several tokens at once, which keeps a long decode's
//! peak while replaying it in few events. Sizes follow a model shape ([`ModelShape`]).

use crate::trace::{Trace, TraceEvent};

/// The dimensions of a decoder-only transformer that decide its allocation sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelShape {
    /// Hidden size.
    pub hidden: usize,
    /// Width of the K (and V) projection: KV heads × head size.
    pub kv: usize,
    /// MLP inner size.
    pub ffn: usize,
    /// Attention heads (the score tensors are heads × query × key).
    pub heads: usize,
    /// Decoder layers.
    pub layers: usize,
    /// Bytes per element.
    pub elem: usize,
}

impl ModelShape {
    /// A 0.5B-class model (Qwen2-0.5B-like: 896 hidden, 2 KV heads of 64, 24 layers), bf16.
    pub const SMALL_05B: ModelShape = ModelShape {
        hidden: 896,
        kv: 128,
        ffn: 4864,
        heads: 14,
        layers: 24,
        elem: 2,
    };
    /// An 8B-class model (Llama-3-8B-like: 4096 hidden, 8 KV heads of 128, 32 layers), bf16.
    pub const LLAMA_8B: ModelShape = ModelShape {
        hidden: 4096,
        kv: 1024,
        ffn: 14336,
        heads: 32,
        layers: 32,
        elem: 2,
    };
    /// A 13B-class model (Llama-2-13B-like: 5120 hidden, no grouped KV, 40 layers), bf16.
    pub const LLAMA_13B: ModelShape = ModelShape {
        hidden: 5120,
        kv: 5120,
        ffn: 13824,
        heads: 40,
        layers: 40,
        elem: 2,
    };
}

/// What to generate: a model, a request mix and a seed. Same spec, same trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceSpec {
    /// Name reported as the trace's source.
    pub name: String,
    /// Sizes of the model.
    pub model: ModelShape,
    /// Requests, run one after another.
    pub requests: usize,
    /// Prompt length of each request: uniform in `prompt.0..=prompt.1` tokens.
    pub prompt: (usize, usize),
    /// Batch size of each request, drawn uniformly from this list.
    pub batches: Vec<usize>,
    /// Prefill chunk in tokens (chunked prefill: each chunk attends to everything before it
    /// and grows the KV caches); 0 prefills the whole prompt at once.
    pub prefill_chunk: usize,
    /// Decode steps per request.
    pub decode_steps: usize,
    /// Tokens each decode step adds to the KV cache (and computes activations for).
    pub tokens_per_step: usize,
    /// Fused attention: no heads × query × key score tensors.
    pub flash: bool,
    /// Seed of the generator.
    pub seed: u64,
}

impl TraceSpec {
    /// A 0.5B-class model decoding a long sequence: 2 requests, prompts of 10–14k tokens
    /// prefilled in chunks of 2048, then 96 decode steps each (peak about 240 MB, mostly the KV
    /// cache).
    pub fn small_long_decode() -> Self {
        TraceSpec {
            name: "gen:0.5b-long-decode".into(),
            model: ModelShape::SMALL_05B,
            requests: 3,
            prompt: (2048, 8192),
            batches: vec![1],
            prefill_chunk: 0,
            decode_steps: 48,
            tokens_per_step: 1,
            flash: true,
            seed: 1,
        }
    }

    /// An 8B-class model, unfused attention, prompts of 128–4096 tokens, short decodes
    /// (the shape of the shared llama8b-seqvar trace, in fewer events).
    pub fn llama8b() -> Self {
        TraceSpec {
            name: "gen:8b".into(),
            model: ModelShape::LLAMA_8B,
            requests: 8,
            prompt: (128, 4096),
            batches: vec![1],
            prefill_chunk: 0,
            decode_steps: 4,
            tokens_per_step: 1,
            flash: false,
            seed: 8,
        }
    }

    /// A 13B-class model, unfused attention, prompts of 1–6k tokens (peak about 10 GB).
    pub fn llama13b() -> Self {
        TraceSpec {
            name: "gen:13b".into(),
            model: ModelShape::LLAMA_13B,
            requests: 5,
            prompt: (1024, 6144),
            batches: vec![1],
            prefill_chunk: 0,
            decode_steps: 3,
            tokens_per_step: 1,
            flash: false,
            seed: 13,
        }
    }

    /// An 8B-class model with fused attention serving batches of 1 to 32 sequences of 64–1024
    /// tokens.
    pub fn mixed_batches() -> Self {
        TraceSpec {
            name: "gen:8b-mixed-batch".into(),
            model: ModelShape::LLAMA_8B,
            requests: 10,
            prompt: (64, 1024),
            batches: vec![1, 2, 4, 8, 16, 32],
            prefill_chunk: 0,
            decode_steps: 4,
            tokens_per_step: 1,
            flash: true,
            seed: 21,
        }
    }

    /// Every preset, smallest model first.
    pub fn presets() -> Vec<TraceSpec> {
        vec![
            Self::small_long_decode(),
            Self::llama8b(),
            Self::mixed_batches(),
            Self::llama13b(),
        ]
    }

    /// The preset called `name` (`0.5b-long-decode`, `8b`, `8b-mixed-batch`, `13b`, with or
    /// without the `gen:` prefix).
    pub fn preset(name: &str) -> Option<TraceSpec> {
        let name = name.strip_prefix("gen:").unwrap_or(name);
        Self::presets()
            .into_iter()
            .find(|spec| spec.name.strip_prefix("gen:") == Some(name))
    }

    /// The KV cache a runtime configured for this request mix reserves up front: every layer's
    /// keys and values for the largest batch at the longest prompt plus its decode steps. What
    /// a serving engine knows before the first request (its context and sequence limits), and
    /// the scale hint the trace tests give the online policy
    /// ([`crate::SubAllocator::expect_peak`]).
    pub fn kv_capacity_bytes(&self) -> usize {
        let m = self.model;
        let tokens = self.prompt.1 + self.decode_steps * self.tokens_per_step.max(1);
        let batch = self.batches.iter().copied().max().unwrap_or(1).max(1);
        m.layers * 2 * batch * tokens * m.kv * m.elem
    }

    /// Generates the trace; every allocation is freed by its end.
    pub fn generate(&self) -> Trace {
        let mut gen = Gen {
            trace: Trace {
                source: self.name.clone(),
                ..Trace::default()
            },
            sizes: Vec::new(),
            live: 0,
        };
        let mut rng = SplitMix(self.seed);
        for _ in 0..self.requests {
            let span = self.prompt.1.saturating_sub(self.prompt.0) as u64 + 1;
            let prompt = self.prompt.0 + rng.below(span) as usize;
            let batch = self.batches[rng.below(self.batches.len().max(1) as u64) as usize];
            self.request(&mut gen, prompt, batch.max(1));
        }
        gen.trace
    }

    /// One request: prefill (in chunks) then decode, its caches freed at the end.
    fn request(&self, g: &mut Gen, prompt: usize, batch: usize) {
        let mut caches: Vec<Option<(u32, u32)>> = vec![None; self.model.layers];
        let mut x = None;
        let chunk = if self.prefill_chunk == 0 {
            prompt
        } else {
            self.prefill_chunk
        };
        let mut len = 0;
        while len < prompt {
            let new = chunk.min(prompt - len);
            len += new;
            x = Some(self.forward(g, &mut caches, x, batch, new, len));
        }
        for _ in 0..self.decode_steps {
            len += self.tokens_per_step.max(1);
            x = Some(self.forward(g, &mut caches, x, batch, self.tokens_per_step.max(1), len));
        }
        if let Some(x) = x {
            g.free(x);
        }
        for (k, v) in caches.into_iter().flatten() {
            g.free(k);
            g.free(v);
        }
    }

    /// One forward pass over `new` tokens per sequence, the KV caches growing to `len`: each
    /// layer's cache is allocated longer and the old one freed (the first pass allocates it).
    /// Frees `x`, the previous pass's hidden state; returns this one's.
    fn forward(
        &self,
        g: &mut Gen,
        caches: &mut [Option<(u32, u32)>],
        x: Option<u32>,
        batch: usize,
        new: usize,
        len: usize,
    ) -> u32 {
        let ModelShape {
            hidden: h,
            kv,
            heads,
            elem: e,
            ..
        } = self.model;
        let rows = batch * new;
        let mut x = {
            let next = g.alloc(rows * h * e);
            if let Some(prev) = x {
                g.free(prev);
            }
            next
        };
        for cache in caches.iter_mut() {
            let ln = g.alloc(rows * h * e);
            let q = g.alloc(rows * h * e);
            let k = g.alloc(rows * kv * e);
            let v = g.alloc(rows * kv * e);
            g.free(ln);
            *cache = Some(match *cache {
                None => (k, v),
                Some((old_k, old_v)) => {
                    let nk = g.alloc(batch * len * kv * e);
                    g.free(old_k);
                    g.free(k);
                    let nv = g.alloc(batch * len * kv * e);
                    g.free(old_v);
                    g.free(v);
                    (nk, nv)
                }
            });
            let o = if self.flash {
                let ao = g.alloc(rows * h * e);
                g.free(q);
                let o = g.alloc(rows * h * e);
                g.free(ao);
                o
            } else {
                let scores = g.alloc(rows * heads * len * e);
                let probs = g.alloc(rows * heads * len * e);
                g.free(scores);
                g.free(q);
                let ao = g.alloc(rows * h * e);
                g.free(probs);
                let o = g.alloc(rows * h * e);
                g.free(ao);
                o
            };
            x = g.residual(x, o, rows * h * e);
            let d = g.mlp(rows, self.model);
            x = g.residual(x, d, rows * h * e);
        }
        x
    }
}

/// The trace being built: sizes by slot and the live total, for the peak.
struct Gen {
    trace: Trace,
    sizes: Vec<usize>,
    live: usize,
}

impl Gen {
    fn alloc(&mut self, bytes: usize) -> u32 {
        let slot = self.sizes.len() as u32;
        self.sizes.push(bytes);
        self.live += bytes;
        self.trace.peak_live_bytes = self.trace.peak_live_bytes.max(self.live);
        self.trace.slots += 1;
        self.trace.events.push(TraceEvent::Alloc { slot, bytes });
        slot
    }

    fn free(&mut self, slot: u32) {
        self.live -= self.sizes[slot as usize];
        self.trace.events.push(TraceEvent::Free { slot });
    }

    /// `x + y` into a new tensor; both inputs freed.
    fn residual(&mut self, x: u32, y: u32, bytes: usize) -> u32 {
        let sum = self.alloc(bytes);
        self.free(x);
        self.free(y);
        sum
    }

    /// Norm, gate and up projections, activation, down projection; returns the output.
    fn mlp(&mut self, rows: usize, m: ModelShape) -> u32 {
        let ln = self.alloc(rows * m.hidden * m.elem);
        let gate = self.alloc(rows * m.ffn * m.elem);
        let up = self.alloc(rows * m.ffn * m.elem);
        self.free(ln);
        let act = self.alloc(rows * m.ffn * m.elem);
        self.free(gate);
        self.free(up);
        let down = self.alloc(rows * m.hidden * m.elem);
        self.free(act);
        down
    }
}

/// SplitMix64: a small deterministic generator, enough to draw prompt lengths and batches.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0; the modulo bias is irrelevant here).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_trace_and_everything_freed() {
        for spec in TraceSpec::presets() {
            let a = spec.generate();
            let b = spec.generate();
            assert_eq!(a.events, b.events, "{}", spec.name);
            let allocs = a
                .events
                .iter()
                .filter(|e| matches!(e, TraceEvent::Alloc { .. }))
                .count();
            assert_eq!(2 * allocs, a.events.len(), "{}: all freed", spec.name);
            assert_eq!(a.slots, allocs);
        }
    }

    #[test]
    fn presets_by_name() {
        assert_eq!(TraceSpec::preset("13b"), Some(TraceSpec::llama13b()));
        assert_eq!(TraceSpec::preset("gen:8b"), Some(TraceSpec::llama8b()));
        assert_eq!(TraceSpec::preset("70b"), None);
    }
}
