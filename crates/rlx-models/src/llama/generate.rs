//! Generation on the graph path: the [`Runner`] that compiles and runs graphs, the host KV cache, [`Sequence`] and [`Generator`].

use super::{model_err, sample_with_history, Llama, LlamaConfig, LlamaError, Sampling, Stage};
use rlx_ir::{Buffer, Graph, SplitMix64, Tensor, TensorData};
use rlx_mem::{Allocation, AllocatorConfig, HostProvider, SubAllocator};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// Compiles and runs graphs for the [`Generator`] (the CLI and tests adapt an
/// `rlx_runtime::Session`; this crate stays below the runtime).
pub trait Runner {
    /// Sets a weight shared by every graph compiled afterwards.
    fn set_param(&mut self, name: &str, value: Arc<Tensor>);
    /// Compiles a graph; returns a handle for [`Runner::run`].
    ///
    /// # Errors
    /// Any compile failure, as text.
    fn compile(&mut self, graph: &Graph) -> Result<usize, String>;
    /// Lets go of a compiled graph (its handle is not used again); by default kept.
    fn release(&mut self, _handle: usize) {}
    /// Runs a compiled graph with inputs by name.
    ///
    /// # Errors
    /// Any run failure, as text.
    fn run(
        &mut self,
        handle: usize,
        inputs: &HashMap<String, Tensor>,
    ) -> Result<Vec<(String, Tensor)>, String>;
}

/// Timings and tokens of one generation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenerationStats {
    /// prompt token ids
    pub prompt_tokens: Vec<u32>,
    /// generated token ids
    pub tokens: Vec<u32>,
    /// seconds compiling the prefill and decode graphs
    pub compile_s: f64,
    /// seconds of the prefill run (the first token's logits)
    pub prefill_s: f64,
    /// seconds of all decode steps
    pub decode_s: f64,
    /// decode steps run
    pub decode_steps: usize,
    /// bytes of the KV cache, allocated once
    pub kv_cache_bytes: usize,
    /// seconds of each decode step (sampling included)
    pub step_s: Vec<f64>,
}

impl GenerationStats {
    /// Prompt tokens per second.
    pub fn prefill_tok_s(&self) -> f64 {
        self.prompt_tokens.len() as f64 / self.prefill_s.max(1e-12)
    }

    /// Decode tokens per second.
    pub fn decode_tok_s(&self) -> f64 {
        self.decode_steps as f64 / self.decode_s.max(1e-12)
    }
}

/// Host memory for KV caches: an `rlx-mem` sub-allocator over host blocks.
type HostMemory = Arc<Mutex<SubAllocator>>;

fn lock(m: &HostMemory) -> MutexGuard<'_, SubAllocator> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One KV cache's memory: a block of the generator's host allocator, freed on drop.
struct CacheBlock {
    memory: HostMemory,
    allocation: Option<Allocation>,
}

impl Drop for CacheBlock {
    fn drop(&mut self) {
        if let Some(a) = self.allocation.take() {
            // freeing a live allocation of its own allocator cannot fail
            let _ = lock(&self.memory).free(a);
        }
    }
}

/// A zeroed f32 KV cache of `shape` in one allocation from `memory`.
fn alloc_cache(memory: &HostMemory, shape: Vec<usize>) -> Result<Tensor, LlamaError> {
    let len: usize = shape.iter().product();
    let bytes = len * std::mem::size_of::<f32>();
    let allocation = lock(memory)
        .alloc(bytes, 64)
        .map_err(|e| LlamaError::Run(format!("KV cache of {bytes} bytes: {e}")))?;
    let ptr = allocation.addr() as *mut f32;
    // SAFETY: the allocation is `bytes` of host memory, 64-byte aligned, ours alone until
    // freed; zeroing makes every element an initialized f32.
    unsafe { std::ptr::write_bytes(ptr, 0, len) };
    let owner = Box::new(CacheBlock {
        memory: memory.clone(),
        allocation: Some(allocation),
    });
    // SAFETY: as above; `owner` frees the allocation only when the buffer is dropped.
    let buf = unsafe { Buffer::exclusive(owner, ptr, len) };
    Ok(Tensor::new(shape, TensorData::F32(buf)).expect("sizes"))
}

/// Compiled graphs a [`Generator`] keeps (prefill by prompt length, decode by capacity and
/// batch); past this many, the oldest are released.
const KEPT_GRAPHS: usize = 32;

/// Sequences one decode step runs together at most ([`Generator::next_batch`]); up to this
/// many rows the CPU's quantized products compute every row as a single-row step does.
pub const MAX_DECODE_BATCH: usize = 16;

/// One sequence of a [`Generator`]: its KV cache, its attention mask (updated in place each
/// step) and its sampler state. Made by [`Generator::start`], advanced by
/// [`Generator::next`] or, with others of its capacity, [`Generator::next_batch`];
/// dropping it frees its cache.
pub struct Sequence {
    cache: Option<Tensor>,
    /// the decode mask's `group * (cap + 1)` values: 0 for rows written, the last column
    /// (the new row) 0, -inf elsewhere
    mask: Vec<f32>,
    /// the decode graph's capacity (KV rows)
    cap: usize,
    /// rows in the cache (the next position)
    pos: usize,
    last: u32,
    sampling: Sampling,
    rng: SplitMix64,
    history: Vec<u32>,
    /// seconds spent compiling graphs for this sequence
    pub compile_s: f64,
    /// seconds of the prompt's run (compiling excluded)
    pub prefill_s: f64,
    /// bytes of this sequence's KV cache
    pub kv_cache_bytes: usize,
}

impl Sequence {
    /// Rows of KV cache this sequence may still fill (0: [`Generator::next`] fails).
    pub fn rows_left(&self) -> usize {
        self.cap - self.pos
    }

    /// The KV rows its cache holds in all (sequences of one capacity step together).
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Tokens so far: the prompt and every generated token.
    pub fn history(&self) -> &[u32] {
        &self.history
    }
}

/// Generates text with a [`Llama`] through a [`Runner`]: one sequence at a time with
/// [`Generator::generate`], or several interleaved with [`Generator::start`] and
/// [`Generator::next`] (each with its own KV cache; compiled graphs are shared).
pub struct Generator<'a, R: Runner> {
    model: &'a Llama,
    runner: R,
    /// where KV caches come from: one allocation per sequence
    memory: HostMemory,
    /// compiled graphs by stage, with their last use
    graphs: HashMap<Stage, (usize, u64)>,
    uses: u64,
    /// ids that end the generation (the tokenizer's eos and `<|im_end|>`; empty: never stop)
    pub stop_ids: Vec<u32>,
}

impl<'a, R: Runner> Generator<'a, R> {
    /// Hands the model's weights to the runner.
    pub fn new(model: &'a Llama, mut runner: R) -> Self {
        for (name, t) in &model.params {
            runner.set_param(name, t.clone());
        }
        Generator {
            model,
            runner,
            memory: Arc::new(Mutex::new(SubAllocator::new(
                Box::new(HostProvider::new()),
                AllocatorConfig::default(),
            ))),
            graphs: HashMap::new(),
            uses: 0,
            stop_ids: model.tokenizer.stop_ids.clone(),
        }
    }

    /// The model this generator runs.
    pub fn model(&self) -> &'a Llama {
        self.model
    }

    /// Counters of the host allocator KV caches come from (one allocation per sequence,
    /// freed when it ends).
    pub fn cache_memory(&self) -> rlx_mem::Stats {
        lock(&self.memory).stats()
    }

    /// The compiled graph of `stage` (compiled now unless kept from before); adds the
    /// seconds spent compiling to `compile_s`.
    fn graph(&mut self, stage: Stage, compile_s: &mut f64) -> Result<usize, LlamaError> {
        let key = stage;
        self.uses += 1;
        if let Some(g) = self.graphs.get_mut(&key) {
            g.1 = self.uses;
            return Ok(g.0);
        }
        if self.graphs.len() >= KEPT_GRAPHS {
            let oldest = self
                .graphs
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| *k);
            if let Some((handle, _)) = oldest.and_then(|k| self.graphs.remove(&k)) {
                self.runner.release(handle);
            }
        }
        let start = Instant::now();
        let handle = self
            .runner
            .compile(&self.model.build_graph(stage)?)
            .map_err(LlamaError::Run)?;
        *compile_s += start.elapsed().as_secs_f64();
        self.graphs.insert(key, (handle, self.uses));
        Ok(handle)
    }

    /// Starts a sequence: runs `prompt` (token ids) with room for `capacity` rows in all
    /// (prompt and generated tokens; at most the model's context) and returns it with its
    /// first generated token.
    ///
    /// # Errors
    /// An empty prompt, a token outside the vocabulary, a capacity beyond the context or
    /// below the prompt, or a compile/run failure.
    pub fn start(
        &mut self,
        prompt: &[u32],
        capacity: usize,
        sampling: &Sampling,
    ) -> Result<(Sequence, u32), LlamaError> {
        let m = self.model;
        let c = &m.config;
        let t = prompt.len();
        if t == 0 {
            return Err(model_err("the prompt has no tokens"));
        }
        let cap = capacity.max(t + 1);
        if cap > c.context {
            return Err(model_err(format!(
                "the prompt ({t} tokens) and the tokens to generate need {cap} rows, past \
                 the context of {}",
                c.context
            )));
        }
        sampling.validate().map_err(model_err)?;
        let run_err = LlamaError::Run;
        let (hd, kvh, g) = (c.head_dim, c.kv_heads, c.group());
        let mut compile_s = 0.0;
        let prefill = self.graph(Stage::Prefill { tokens: t }, &mut compile_s)?;

        // The KV cache: allocated here, once, for the whole sequence.
        let cache_len = c.layers * 2 * kvh * cap * hd;
        let mut cache = alloc_cache(&self.memory, vec![c.layers, 2, kvh, cap, hd])?;

        let start = Instant::now();
        let inputs = m.prefill_inputs(prompt)?;
        let out = self.runner.run(prefill, &inputs).map_err(run_err)?;
        let logits = write_rows(c, &mut [(&mut cache, 0)], &out, t)?;
        let mut rng = SplitMix64(sampling.seed);
        let mut history = prompt.to_vec();
        let first = sample_with_history(logits, sampling, &mut rng, &history);
        history.push(first);
        let prefill_s = start.elapsed().as_secs_f64();

        // The decode mask: the prompt's rows and the new row visible, updated by each step.
        let mut mask = vec![f32::NEG_INFINITY; g * (cap + 1)];
        for r in 0..g {
            mask[r * (cap + 1)..r * (cap + 1) + t].fill(0.0);
            mask[r * (cap + 1) + cap] = 0.0;
        }
        let seq = Sequence {
            cache: Some(cache),
            mask,
            cap,
            pos: t,
            last: first,
            sampling: *sampling,
            rng,
            history,
            compile_s,
            prefill_s,
            kv_cache_bytes: cache_len * 4,
        };
        Ok((seq, first))
    }

    /// One decode step of `seq`: returns its next token.
    ///
    /// # Errors
    /// The sequence's cache is full ([`Sequence::rows_left`] is 0), or a compile/run
    /// failure (the sequence is then unusable; drop it).
    pub fn next(&mut self, seq: &mut Sequence) -> Result<u32, LlamaError> {
        Ok(self.next_batch(&mut [seq])?[0])
    }

    /// One decode step of several sequences of the same [`Sequence::capacity`] together (at
    /// most [`MAX_DECODE_BATCH`]): one graph whose products read each weight once for all
    /// of them, each sequence attending over its own cache. Returns each one's next token,
    /// in order; every sequence's tokens are those [`Generator::next`] would give it.
    ///
    /// # Errors
    /// No sequences, more than [`MAX_DECODE_BATCH`], capacities that differ, a full cache
    /// (naming the sequence's place in `seqs`), or a compile/run failure (the sequences are
    /// then unusable; drop them).
    pub fn next_batch(&mut self, seqs: &mut [&mut Sequence]) -> Result<Vec<u32>, LlamaError> {
        let m = self.model;
        let c = &m.config;
        let batch = seqs.len();
        let Some(cap) = seqs.first().map(|s| s.cap) else {
            return Err(model_err("a decode step of no sequences"));
        };
        if batch > MAX_DECODE_BATCH {
            return Err(model_err(format!(
                "{batch} sequences in one decode step, past the {MAX_DECODE_BATCH} allowed"
            )));
        }
        for (i, seq) in seqs.iter().enumerate() {
            if seq.cap != cap {
                return Err(model_err(format!(
                    "sequences of {cap} and {} KV rows cannot step together",
                    seq.cap
                )));
            }
            if seq.pos >= cap {
                return Err(model_err(format!(
                    "sequence {i} of the step filled its {cap} rows of KV cache"
                )));
            }
        }
        let mut compile_s = 0.0;
        let decode = self.graph(
            Stage::Decode {
                capacity: cap,
                batch,
            },
            &mut compile_s,
        )?;
        for seq in seqs.iter_mut() {
            seq.compile_s += compile_s;
        }
        let (hidden, g) = (c.hidden, c.group());
        let mut x = vec![0f32; batch * hidden];
        let mut mask = Vec::with_capacity(batch * g * (cap + 1));
        for (seq, xr) in seqs.iter().zip(x.chunks_exact_mut(hidden)) {
            m.embed(seq.last, xr)?;
            mask.extend_from_slice(&seq.mask);
        }
        let (cos, sin) = rope_rows(c, seqs.iter().map(|s| s.pos));
        let mut inputs = HashMap::from([
            (
                "x".to_string(),
                Tensor::from_f32(&[batch, hidden], x).expect("sizes"),
            ),
            ("cos".to_string(), cos),
            ("sin".to_string(), sin),
            (
                "mask".to_string(),
                Tensor::from_f32(&[batch * g, cap + 1], mask).expect("sizes"),
            ),
        ]);
        let mut lost = false;
        for (b, seq) in seqs.iter_mut().enumerate() {
            match seq.cache.take() {
                Some(cache) => {
                    inputs.insert(format!("kv_cache.{b}"), cache);
                }
                None => lost = true,
            }
        }
        let result = if lost {
            Err("an earlier step of one of these sequences failed".to_string())
        } else {
            self.runner.run(decode, &inputs)
        };
        for (b, seq) in seqs.iter_mut().enumerate() {
            if let Some(cache) = inputs.remove(&format!("kv_cache.{b}")) {
                seq.cache = Some(cache);
            }
        }
        let out = result.map_err(LlamaError::Run)?;
        let logits = {
            let mut caches: Vec<(&mut Tensor, usize)> = seqs
                .iter_mut()
                .map(|s| (s.cache.as_mut().expect("returned"), s.pos))
                .collect();
            write_rows(c, &mut caches, &out, 1)?
        };
        let vocab = logits.len() / batch;
        let mut tokens = Vec::with_capacity(batch);
        for (seq, row) in seqs.iter_mut().zip(logits.chunks_exact(vocab)) {
            let next = sample_with_history(row, &seq.sampling, &mut seq.rng, &seq.history);
            seq.history.push(next);
            // the row just written becomes visible to the next step
            for r in 0..g {
                seq.mask[r * (cap + 1) + seq.pos] = 0.0;
            }
            seq.pos += 1;
            seq.last = next;
            tokens.push(next);
        }
        Ok(tokens)
    }

    /// Generates up to `max_tokens` after `prompt` (token ids), calling `on_token` with each
    /// new id as soon as it is picked; stops early at a stop id. The KV cache holds
    /// `prompt.len() + max_tokens` rows and is allocated once.
    ///
    /// # Errors
    /// An empty prompt, a context beyond the model's, or a compile/run failure.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        max_tokens: usize,
        sampling: &Sampling,
        mut on_token: impl FnMut(u32),
    ) -> Result<GenerationStats, LlamaError> {
        let c = &self.model.config;
        let t = prompt.len();
        if t > 0 && t + max_tokens.max(1) > c.context {
            return Err(model_err(format!(
                "prompt ({t}) + max tokens ({max_tokens}) exceed the context of {}",
                c.context
            )));
        }
        let mut stats = GenerationStats {
            prompt_tokens: prompt.to_vec(),
            ..Default::default()
        };
        let (mut seq, first) = self.start(prompt, t + max_tokens.max(1), sampling)?;
        stats.prefill_s = seq.prefill_s;
        stats.kv_cache_bytes = seq.kv_cache_bytes;
        stats.tokens.push(first);
        on_token(first);
        if max_tokens > 1 && !self.stop_ids.contains(&first) {
            let start = Instant::now();
            let before = seq.compile_s;
            stats.step_s.reserve(max_tokens);
            while stats.tokens.len() < max_tokens {
                let step = Instant::now();
                let compiled = seq.compile_s;
                let next = self.next(&mut seq)?;
                stats.decode_steps += 1;
                // the first step compiles the decode graph: not a step's time
                let s = step.elapsed().as_secs_f64() - (seq.compile_s - compiled);
                stats.step_s.push(s);
                stats.tokens.push(next);
                on_token(next);
                if self.stop_ids.contains(&next) {
                    break;
                }
            }
            stats.decode_s = start.elapsed().as_secs_f64() - (seq.compile_s - before);
        }
        stats.compile_s = seq.compile_s;
        Ok(stats)
    }
}

impl Llama {
    /// The inputs of the prefill graph (`build_graph(Stage::Prefill { tokens })`) for
    /// `prompt` from position 0: embedded rows `x`, RoPE tables `cos`/`sin` and the causal
    /// `mask` of every query head group.
    ///
    /// # Errors
    /// A token outside the vocabulary.
    pub fn prefill_inputs(&self, prompt: &[u32]) -> Result<HashMap<String, Tensor>, LlamaError> {
        let c = &self.config;
        let (t, g) = (prompt.len(), c.group());
        let mut x = vec![0f32; t * c.hidden];
        for (i, &tok) in prompt.iter().enumerate() {
            self.embed(tok, &mut x[i * c.hidden..(i + 1) * c.hidden])?;
        }
        let (cos, sin) = rope_tables(c, 0, t);
        let mut mask = vec![f32::NEG_INFINITY; g * t * t];
        for r in 0..g * t {
            mask[r * t..r * t + r % t + 1].fill(0.0);
        }
        Ok(HashMap::from([
            (
                "x".to_string(),
                Tensor::from_f32(&[t, c.hidden], x).expect("sizes"),
            ),
            ("cos".to_string(), cos),
            ("sin".to_string(), sin),
            (
                "mask".to_string(),
                Tensor::from_f32(&[g * t, t], mask).expect("sizes"),
            ),
        ]))
    }
}

/// cos/sin tables `[n, 1, hd/2, 1]` for positions `start..start + n` (the `cos` and `sin`
/// inputs of the graphs [`Llama::build_graph`] builds), scaled by the attention factor.
pub fn rope_tables(c: &LlamaConfig, start: usize, n: usize) -> (Tensor, Tensor) {
    rope_rows(c, start..start + n)
}

/// cos/sin tables `[n, 1, hd/2, 1]` of the `n` positions given, one row each.
fn rope_rows(c: &LlamaConfig, positions: impl Iterator<Item = usize>) -> (Tensor, Tensor) {
    let half = c.head_dim / 2;
    let (mut cos, mut sin) = (Vec::new(), Vec::new());
    for p in positions {
        for i in 0..half {
            let theta = p as f64 * c.inv_freq(i);
            cos.push((theta.cos() * c.rope_attn_scale) as f32);
            sin.push((theta.sin() * c.rope_attn_scale) as f32);
        }
    }
    let shape = [cos.len() / half.max(1), 1, half, 1];
    (
        Tensor::from_f32(&shape, cos).expect("sizes"),
        Tensor::from_f32(&shape, sin).expect("sizes"),
    )
}

/// Writes the new K/V rows of every layer into the caches: `n` rows for each `(cache,
/// pos)` of `caches` in order (the outputs' rows `i * n..(i + 1) * n` to cache `i` at
/// `pos..pos + n`); returns the logits.
fn write_rows<'o>(
    c: &LlamaConfig,
    caches: &mut [(&mut Tensor, usize)],
    out: &'o [(String, Tensor)],
    n: usize,
) -> Result<&'o [f32], LlamaError> {
    let (hd, kvh) = (c.head_dim, c.kv_heads);
    let rows = caches.len() * n;
    let mut logits = None;
    for (name, t) in out {
        let v = t
            .as_f32()
            .ok_or_else(|| LlamaError::Run(format!("output {name} is not f32")))?;
        if name == "logits" {
            logits = Some(v);
            continue;
        }
        let (kind, layer) = name
            .split_once('.')
            .and_then(|(k, l)| Some((k, l.parse::<usize>().ok()?)))
            .ok_or_else(|| LlamaError::Run(format!("unexpected output {name}")))?;
        let which = usize::from(kind == "v");
        if v.len() != kvh * rows * hd || layer >= c.layers {
            return Err(LlamaError::Run(format!(
                "output {name} has {} values",
                v.len()
            )));
        }
        for (i, (cache, pos)) in caches.iter_mut().enumerate() {
            let cap = cache.shape()[3];
            let TensorData::F32(cv) = cache.data_mut() else {
                unreachable!("f32 cache")
            };
            for hh in 0..kvh {
                let dst = (((layer * 2 + which) * kvh + hh) * cap + *pos) * hd;
                let src = (hh * rows + i * n) * hd;
                cv[dst..dst + n * hd].copy_from_slice(&v[src..src + n * hd]);
            }
        }
    }
    logits.ok_or_else(|| LlamaError::Run("no logits output".into()))
}
