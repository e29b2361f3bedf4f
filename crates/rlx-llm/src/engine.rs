//! [`Engine`]: sequences added, stepped and removed on the CUDA engine or the graph path.

use crate::{LlmError, SessionRunner, TextStream};
use rlx_driver::Device;
use rlx_models::llama::{GenerationStats, Generator, Llama, Sampling, Sequence, MAX_DECODE_BATCH};
use rlx_runtime::{backend_for, CompileOptions, Session};
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

/// KV rows the graph path's decode graphs are sized in (one compiled graph per size).
const GRAPH_ROWS: usize = 256;

/// The device a Llama model generates on: `auto` is CUDA where it is available, else the CPU
/// (the wgpu backends have no quantized matmul yet).
///
/// # Errors
/// A device name RLX does not know.
pub fn llm_device(arg: &str) -> Result<Device, LlmError> {
    if arg == "auto" {
        let cuda = cfg!(feature = "cuda")
            && backend_for(Device::Cuda).is_some_and(|b| b.availability().available);
        return Ok(if cuda { Device::Cuda } else { Device::Cpu });
    }
    arg.parse::<Device>()
        .map_err(|e| LlmError::Invalid(e.to_string()))
}

/// How an [`Engine`] is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineSettings {
    /// worker threads (CPU; None: the runtime's default)
    pub threads: Option<usize>,
    /// sequences that may generate together
    pub max_sequences: usize,
    /// KV rows per sequence (None: the model's context)
    pub context: Option<usize>,
    /// quantized products keep f32 activations (CPU: `CompileOptions::exact_quant`; CUDA:
    /// `LlmOptions::int8_activations` off); default: int8 activations, as llama.cpp
    pub exact_quant: bool,
}

impl Default for EngineSettings {
    fn default() -> Self {
        EngineSettings {
            threads: None,
            max_sequences: 1,
            context: None,
            exact_quant: false,
        }
    }
}

/// A sequence in an [`Engine`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeqId(pub usize);

enum Kind<'m> {
    /// the graph path: one KV cache per sequence; a step runs the sequences of each
    /// capacity together
    Graph {
        generator: Box<Generator<'m, SessionRunner>>,
        seqs: BTreeMap<usize, Sequence>,
        next_id: usize,
    },
    /// the CUDA engine: one batched step for every sequence
    #[cfg(feature = "cuda")]
    Cuda(Box<rlx_cuda_llm::CudaLlm>),
}

/// Text generation with one model on one device (see the crate docs).
pub struct Engine<'m> {
    kind: Kind<'m>,
    device: Device,
    model: &'m Llama,
    max_sequences: usize,
    context: usize,
    /// KV rows all sequences may hold together (None: bounded by host memory only)
    kv_rows: Option<usize>,
    /// rows promised to each sequence when it was added (prompt + most tokens)
    promised: HashMap<SeqId, usize>,
}

impl<'m> Engine<'m> {
    /// Builds the engine for `device`: the CUDA engine on `cuda`, else the graph path.
    ///
    /// # Errors
    /// The device is absent or cannot run the model (the message says why).
    pub fn new(model: &'m Llama, device: Device, s: EngineSettings) -> Result<Self, LlmError> {
        let context = s
            .context
            .unwrap_or(model.config.context)
            .min(model.config.context)
            .max(1);
        let max_sequences = s.max_sequences.max(1);
        #[cfg(feature = "cuda")]
        if device == Device::Cuda {
            let options = rlx_cuda_llm::LlmOptions {
                max_sequences,
                context: Some(context),
                int8_activations: !s.exact_quant,
                ..Default::default()
            };
            let e = rlx_cuda_llm::CudaLlm::new(model, options)?;
            let kv_rows = Some(e.free_kv_rows());
            let context = e.context();
            return Ok(Engine {
                kind: Kind::Cuda(Box::new(e)),
                device,
                model,
                max_sequences,
                context,
                kv_rows,
                promised: HashMap::new(),
            });
        }
        let options = CompileOptions {
            threads: s.threads,
            exact_quant: s.exact_quant,
            ..Default::default()
        };
        let session = Session::new(device)?;
        let runner = SessionRunner::new(session, options);
        Ok(Engine {
            kind: Kind::Graph {
                generator: Box::new(Generator::new(model, runner)),
                seqs: BTreeMap::new(),
                next_id: 0,
            },
            device,
            model,
            max_sequences,
            context,
            kv_rows: None,
            promised: HashMap::new(),
        })
    }

    /// The device the engine runs on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The model the engine runs.
    pub fn model(&self) -> &'m Llama {
        self.model
    }

    /// Rows (prompt and generated tokens) one sequence may hold.
    pub fn context(&self) -> usize {
        self.context
    }

    /// Sequences that may generate together.
    pub fn max_sequences(&self) -> usize {
        self.max_sequences
    }

    /// Sequences in the engine now.
    pub fn active(&self) -> usize {
        self.promised.len()
    }

    /// Bytes of device memory the engine holds for weights and KV cache (CUDA; 0 on the
    /// graph path, whose weights stay in host memory).
    pub fn device_bytes(&self) -> usize {
        match &self.kind {
            Kind::Graph { .. } => 0,
            #[cfg(feature = "cuda")]
            Kind::Cuda(e) => e.weight_bytes() + e.kv_bytes(),
        }
    }

    /// Whether a sequence needing `rows` rows (prompt + most tokens) can be added now
    /// without taking rows promised to the sequences already in: a free slot and room in
    /// the KV cache. A request that can never fit is refused by [`Engine::check`].
    pub fn can_add(&self, rows: usize) -> bool {
        self.fits(&[rows])
    }

    /// Whether sequences needing these rows can all be added now (as [`Engine::can_add`]
    /// for several at once, for [`Engine::add_many`]).
    pub fn fits(&self, rows: &[usize]) -> bool {
        if self.promised.len() + rows.len() > self.max_sequences {
            return false;
        }
        match self.kv_rows {
            None => true,
            Some(total) => {
                let held: usize = self.promised.values().map(|r| blocks(*r)).sum();
                let want: usize = rows.iter().map(|r| blocks(*r)).sum();
                held + want <= total
            }
        }
    }

    /// Checks that a prompt of `prompt` tokens with `max_tokens` to generate can ever run
    /// here.
    ///
    /// # Errors
    /// [`LlmError::Invalid`] for an empty prompt; [`LlmError::Capacity`] when prompt and
    /// tokens exceed the context or the whole KV cache.
    pub fn check(&self, prompt: usize, max_tokens: usize) -> Result<(), LlmError> {
        if prompt == 0 {
            return Err(LlmError::Invalid("the prompt has no tokens".into()));
        }
        let rows = prompt + max_tokens.max(1);
        if rows > self.context {
            return Err(LlmError::Capacity(format!(
                "the prompt ({prompt} tokens) and max tokens ({max_tokens}) need {rows} rows, \
                 past the context of {}",
                self.context
            )));
        }
        if let Some(total) = self.kv_rows {
            if blocks(rows) > total {
                return Err(LlmError::Capacity(format!(
                    "the request needs {rows} rows of KV cache; the device holds {total}"
                )));
            }
        }
        Ok(())
    }

    /// Adds a sequence: runs its prompt and returns its id with the first generated token.
    /// It takes part in every [`Engine::step`] until [`Engine::remove`]d; `max_tokens`
    /// (tokens it will generate at most) sizes what it is promised.
    ///
    /// # Errors
    /// As [`Engine::check`], a bad sampling setting or token, no free slot, or a run
    /// failure. Sequences already in are unaffected.
    pub fn add(
        &mut self,
        prompt: &[u32],
        max_tokens: usize,
        sampling: Sampling,
    ) -> Result<(SeqId, u32), LlmError> {
        self.add_many(&[(prompt, max_tokens, sampling)]).remove(0)
    }

    /// Adds several sequences at once (prompt, max tokens, sampling each): on CUDA their
    /// prompts run together in shared prefill steps, so admitting k requests costs about
    /// one prefill of all their tokens. One result per request, in order; a request that
    /// is refused fails alone, as [`Engine::add`] says.
    pub fn add_many(
        &mut self,
        requests: &[(&[u32], usize, Sampling)],
    ) -> Vec<Result<(SeqId, u32), LlmError>> {
        let mut out: Vec<Result<(SeqId, u32), LlmError>> = Vec::with_capacity(requests.len());
        let mut taken = self.promised.len();
        let mut ready = Vec::new();
        for (i, &(prompt, max_tokens, sampling)) in requests.iter().enumerate() {
            let checked = self.admissible(prompt, max_tokens, &sampling, taken);
            if checked.is_ok() {
                taken += 1;
                ready.push(i);
            }
            out.push(checked.map(|()| (SeqId(usize::MAX), 0)));
        }
        let rows = |i: usize| requests[i].0.len() + requests[i].1.max(1);
        let context = self.context;
        match &mut self.kind {
            Kind::Graph {
                generator,
                seqs,
                next_id,
            } => {
                for &i in &ready {
                    let (prompt, _, sampling) = requests[i];
                    let cap = rows(i).div_ceil(GRAPH_ROWS) * GRAPH_ROWS;
                    out[i] = match generator.start(prompt, cap.min(context), &sampling) {
                        Ok((seq, first)) => {
                            let id = *next_id;
                            *next_id += 1;
                            seqs.insert(id, seq);
                            Ok((SeqId(id), first))
                        }
                        Err(e) => Err(e.into()),
                    };
                }
            }
            #[cfg(feature = "cuda")]
            Kind::Cuda(e) => {
                let batch: Vec<(&[u32], Sampling)> = ready
                    .iter()
                    .map(|&i| (requests[i].0, requests[i].2))
                    .collect();
                for (&i, r) in ready.iter().zip(e.add_many(&batch)) {
                    out[i] = r
                        .map(|(id, first)| (SeqId(id.0), first))
                        .map_err(Into::into);
                }
            }
        }
        for &i in &ready {
            if let Ok((id, _)) = &out[i] {
                self.promised.insert(*id, rows(i));
            }
        }
        out
    }

    /// Checks one request of [`Engine::add_many`] with `taken` slots already in use.
    fn admissible(
        &self,
        prompt: &[u32],
        max_tokens: usize,
        sampling: &Sampling,
        taken: usize,
    ) -> Result<(), LlmError> {
        self.check(prompt.len(), max_tokens)?;
        sampling.validate().map_err(LlmError::Invalid)?;
        if taken >= self.max_sequences {
            return Err(LlmError::Capacity(format!(
                "all {} sequence slots are taken",
                self.max_sequences
            )));
        }
        let vocab = self.model.config.vocab;
        if let Some(&t) = prompt.iter().find(|&&t| t as usize >= vocab) {
            return Err(LlmError::Invalid(format!(
                "token {t} is outside the vocabulary of {vocab}"
            )));
        }
        Ok(())
    }

    /// One decode step of every sequence in the engine: each one's next token.
    ///
    /// # Errors
    /// A run failure; on the graph path the error names the sequences of the batch that
    /// failed (remove them and step again).
    pub fn step(&mut self) -> Result<Vec<(SeqId, u32)>, LlmError> {
        match &mut self.kind {
            Kind::Graph {
                generator, seqs, ..
            } => {
                // sequences of one capacity step together, up to MAX_DECODE_BATCH at a time
                let mut out = Vec::with_capacity(seqs.len());
                let mut groups: BTreeMap<usize, Vec<(usize, &mut Sequence)>> = BTreeMap::new();
                for (id, seq) in seqs.iter_mut() {
                    groups.entry(seq.capacity()).or_default().push((*id, seq));
                }
                for mut group in groups.into_values() {
                    for chunk in group.chunks_mut(MAX_DECODE_BATCH) {
                        let ids: Vec<usize> = chunk.iter().map(|(id, _)| *id).collect();
                        let mut batch: Vec<&mut Sequence> =
                            chunk.iter_mut().map(|(_, s)| &mut **s).collect();
                        let tokens = generator.next_batch(&mut batch).map_err(|e| {
                            let names: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
                            LlmError::Run(format!(
                                "sequence {}: {}",
                                names.join(", "),
                                LlmError::from(e)
                            ))
                        })?;
                        out.extend(ids.into_iter().map(SeqId).zip(tokens));
                    }
                }
                out.sort_unstable_by_key(|(id, _)| *id);
                Ok(out)
            }
            #[cfg(feature = "cuda")]
            Kind::Cuda(e) => Ok(e
                .step()?
                .into_iter()
                .map(|(id, t)| (SeqId(id.0), t))
                .collect()),
        }
    }

    /// Removes a sequence; its KV cache is given back at once.
    pub fn remove(&mut self, id: SeqId) {
        self.promised.remove(&id);
        match &mut self.kind {
            Kind::Graph { seqs, .. } => {
                seqs.remove(&id.0);
            }
            #[cfg(feature = "cuda")]
            Kind::Cuda(e) => e.remove(rlx_cuda_llm::SeqId(id.0)),
        }
    }

    /// Generates up to `max_tokens` after `prompt`, calling `on_token` with each id as it
    /// comes; stops after a token of `stop_ids` (empty: never early).
    ///
    /// # Errors
    /// As [`Engine::add`] and [`Engine::step`]; the sequence is removed either way.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        max_tokens: usize,
        sampling: &Sampling,
        stop_ids: &[u32],
        on_token: &mut dyn FnMut(u32),
    ) -> Result<GenerationStats, LlmError> {
        match &mut self.kind {
            Kind::Graph { generator, .. } => {
                generator.stop_ids = stop_ids.to_vec();
                Ok(generator.generate(prompt, max_tokens, sampling, on_token)?)
            }
            #[cfg(feature = "cuda")]
            Kind::Cuda(e) => Ok(e.generate(prompt, max_tokens, sampling, stop_ids, on_token)?),
        }
    }

    /// Generates after `prompt` and hands out the text as it comes, in pieces that never
    /// split a character ([`TextStream`]). Ends after a token of `stop_ids`, before a stop
    /// string of `stops`, after `max_tokens`, or when `on_piece` returns false (the caller
    /// went away). Returns the number of tokens generated.
    ///
    /// ```no_run
    /// use rlx_llm::{Engine, EngineSettings, Llama, Sampling};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let model = Llama::open("models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf".as_ref())?;
    /// let mut engine = Engine::new(&model, rlx_driver::Device::Cpu, EngineSettings::default())?;
    /// let prompt = model.tokenizer.encode("The capital of France is")?;
    /// let stop_ids = model.tokenizer.stop_ids.clone();
    /// engine.generate_text(&prompt, 16, Sampling::default(), &stop_ids, &[], &mut |piece| {
    ///     print!("{piece}");
    ///     true
    /// })?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`Engine::add`] and [`Engine::step`]; the sequence is removed either way.
    pub fn generate_text(
        &mut self,
        prompt: &[u32],
        max_tokens: usize,
        sampling: Sampling,
        stop_ids: &[u32],
        stops: &[String],
        on_piece: &mut dyn FnMut(&str) -> bool,
    ) -> Result<usize, LlmError> {
        if max_tokens == 0 {
            return Ok(0);
        }
        let model = self.model;
        let mut text = TextStream::new(&model.tokenizer, stops);
        let (id, mut token) = self.add(prompt, max_tokens, sampling)?;
        let mut generated = 0;
        // Ok(true): ended normally, so what the stream held back is handed out
        let result = (|| -> Result<bool, LlmError> {
            loop {
                generated += 1;
                if stop_ids.contains(&token) {
                    return Ok(true);
                }
                let piece = text.push(token)?;
                if !piece.is_empty() && !on_piece(&piece) {
                    return Ok(false);
                }
                if text.stopped() || generated >= max_tokens {
                    return Ok(true);
                }
                token = self
                    .step()?
                    .into_iter()
                    .find(|(s, _)| *s == id)
                    .map(|(_, t)| t)
                    .ok_or_else(|| LlmError::Run(format!("sequence {} gave no token", id.0)))?;
            }
        })();
        self.remove(id);
        if result? {
            let rest = text.finish()?;
            if !rest.is_empty() {
                on_piece(&rest);
            }
        }
        Ok(generated)
    }

    /// Generates for several prompts together (sequences leave as they finish; the
    /// sequence `i` samples with seed `sampling.seed + i`). Returns each prompt's tokens
    /// and the seconds of the whole batch.
    ///
    /// # Errors
    /// As [`Engine::add`] and [`Engine::step`]; every sequence is removed either way.
    pub fn generate_batch(
        &mut self,
        prompts: &[Vec<u32>],
        max_tokens: usize,
        sampling: &Sampling,
        stop_ids: &[u32],
    ) -> Result<BatchResult, LlmError> {
        let start = Instant::now();
        let mut ids = Vec::new();
        let mut tokens: Vec<Vec<u32>> = vec![Vec::new(); prompts.len()];
        let mut live: HashMap<SeqId, usize> = HashMap::new();
        let result = (|| -> Result<(), LlmError> {
            let mut waiting = 0;
            while waiting < prompts.len() || !live.is_empty() {
                // add as many waiting prompts as fit, their prompts run together
                let mut batch = Vec::new();
                let mut rows = Vec::new();
                while waiting + batch.len() < prompts.len() {
                    let i = waiting + batch.len();
                    let p = &prompts[i];
                    self.check(p.len(), max_tokens)?;
                    rows.push(p.len() + max_tokens.max(1));
                    let first = live.is_empty() && batch.is_empty();
                    if !first && !self.fits(&rows) {
                        break;
                    }
                    let s = Sampling {
                        seed: sampling.seed.wrapping_add(i as u64),
                        ..*sampling
                    };
                    batch.push((p.as_slice(), max_tokens, s));
                }
                let mut failed = None;
                for r in self.add_many(&batch) {
                    match r {
                        Ok((id, first)) => {
                            ids.push(id);
                            tokens[waiting].push(first);
                            if stop_ids.contains(&first) || max_tokens <= 1 {
                                self.remove(id);
                            } else {
                                live.insert(id, waiting);
                            }
                        }
                        Err(e) => {
                            failed.get_or_insert(e);
                        }
                    }
                    waiting += 1;
                }
                if let Some(e) = failed {
                    return Err(e);
                }
                if live.is_empty() {
                    continue;
                }
                for (id, t) in self.step()? {
                    let Some(&i) = live.get(&id) else { continue };
                    tokens[i].push(t);
                    if stop_ids.contains(&t) || tokens[i].len() >= max_tokens {
                        live.remove(&id);
                        self.remove(id);
                    }
                }
            }
            Ok(())
        })();
        for id in live.keys().copied().collect::<Vec<_>>() {
            self.remove(id);
        }
        result?;
        let generated = tokens.iter().map(Vec::len).sum();
        Ok(BatchResult {
            tokens,
            seconds: start.elapsed().as_secs_f64(),
            generated,
        })
    }
}

/// Rows rounded up to the CUDA engine's KV blocks.
fn blocks(rows: usize) -> usize {
    rows.div_ceil(16) * 16
}

/// What [`Engine::generate_batch`] returns.
#[derive(Debug, Clone)]
pub struct BatchResult {
    /// tokens generated per prompt
    pub tokens: Vec<Vec<u32>>,
    /// seconds of the whole batch (prefill included)
    pub seconds: f64,
    /// tokens generated in all
    pub generated: usize,
}
