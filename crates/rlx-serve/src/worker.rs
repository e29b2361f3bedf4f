//! The threads that own the models: the language model's continuous-batching loop and the
//! embedding batcher.
//!
//! The language model's thread takes requests from a channel, turns them into prompt
//! tokens (chat template, tokenizer) and checks them, then admits them into the running
//! batch between decode steps while there is a free sequence slot and room in the KV cache
//! for their prompt and `max_tokens`; the prompts admitted together prefill together. Every step advances every sequence by one token; text
//! goes back to each request's channel as it forms. A sequence leaves the batch when it
//! ends (stop token or string, `max_tokens`), when its deadline passes, or when its client
//! has gone (the channel is closed): its KV cache is freed before the next step.

use crate::api::{ApiError, Generation};
use crate::metrics::Metrics;
use crate::ServeError;
use rlx_driver::Device;
use rlx_llm::chat::{self, Message};
use rlx_llm::{Engine, EngineSettings, Llama, LlmError, Sampling, SeqId, TextStream};
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc::UnboundedSender;

/// Prompt tokens admitted together while other sequences decode (one bounded prefill).
const ADMIT_TOKENS: usize = 2048;

/// What a generation request asks for.
#[derive(Debug, Clone)]
pub enum Input {
    /// chat messages, through the model's chat template
    Chat(Vec<Message>),
    /// text, tokenized as is
    Text(String),
    /// token ids
    Tokens(Vec<u32>),
}

/// What the worker tells a request, in order: `Accepted` or `Error` first; then `Text`
/// pieces and one `Done` per choice (or an `Error`).
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// the prompt was tokenized and fits
    Accepted {
        /// its tokens
        prompt_tokens: usize,
    },
    /// text of choice `index`
    Text {
        /// the choice
        index: usize,
        /// the new text
        text: String,
    },
    /// choice `index` ended
    Done {
        /// the choice
        index: usize,
        /// `stop` or `length`
        finish: &'static str,
        /// tokens it generated
        completion_tokens: usize,
    },
    /// the request failed (before `Accepted`: nothing ran)
    Error(ApiError),
}

/// A generation request for the worker.
pub struct Job {
    /// the prompt
    pub input: Input,
    /// the checked settings
    pub generation: Generation,
    /// where events go (closed: the client has gone)
    pub events: UnboundedSender<Event>,
    /// when the request arrived
    pub arrived: Instant,
    /// when it must end (None: never)
    pub deadline: Option<Instant>,
}

/// The language model as the routes see it.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    /// the name `/v1/models` lists
    pub name: String,
    /// rows per sequence
    pub context: usize,
    /// the device it runs on
    pub device: Device,
    /// sequences decoding together
    pub max_sequences: usize,
}

/// The routes' handle on the language model's thread.
pub struct LlmWorker {
    /// where requests go
    pub jobs: mpsc::Sender<Job>,
    /// the model
    pub info: ModelInfo,
}

/// Settings of the language model's thread.
#[derive(Debug, Clone)]
pub struct LlmSettings {
    /// the model file or folder
    pub path: PathBuf,
    /// its device (`auto`, `cuda`, `cpu`)
    pub device: String,
    /// the engine's settings
    pub engine: EngineSettings,
}

/// Loads the model on a new thread and starts its batching loop.
///
/// # Errors
/// The model does not load or its engine cannot be built; the message says why.
pub fn spawn_llm(s: LlmSettings, metrics: Arc<Metrics>) -> Result<LlmWorker, ServeError> {
    let (tx, rx) = mpsc::channel::<Job>();
    let (ready_tx, ready_rx) = mpsc::channel::<Result<ModelInfo, String>>();
    std::thread::Builder::new()
        .name("rlx-llm".into())
        .spawn(move || {
            let setup = (|| -> Result<(Llama, Device), LlmError> {
                let device = rlx_llm::llm_device(&s.device)?;
                let mut model = Llama::open(&s.path).map_err(|e| LlmError::Model(e.to_string()))?;
                if let Some(n) = s.engine.context {
                    model.extend_context(n);
                }
                Ok((model, device))
            })();
            let (model, device) = match setup {
                Ok(x) => x,
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("{}: {e}", s.path.display())));
                    return;
                }
            };
            let engine = match Engine::new(&model, device, s.engine) {
                Ok(e) => e,
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("{}: {e}", s.path.display())));
                    return;
                }
            };
            metrics
                .device_bytes
                .store(engine.device_bytes() as u64, Relaxed);
            let name = s
                .path
                .file_stem()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "model".into());
            let _ = ready_tx.send(Ok(ModelInfo {
                name,
                context: engine.context(),
                device,
                max_sequences: engine.max_sequences(),
            }));
            Batcher::new(engine, metrics).run(rx);
        })
        .map_err(|e| ServeError::Model(format!("starting the model's thread: {e}")))?;
    match ready_rx.recv() {
        Ok(Ok(info)) => Ok(LlmWorker { jobs: tx, info }),
        Ok(Err(m)) => Err(ServeError::Model(m)),
        Err(_) => Err(ServeError::Model(
            "the model's thread ended while loading".into(),
        )),
    }
}

/// One choice of a request, waiting or running.
struct Choice {
    index: usize,
    prompt: Arc<Vec<u32>>,
    generation: Generation,
    events: UnboundedSender<Event>,
    arrived: Instant,
    deadline: Option<Instant>,
}

impl Choice {
    fn gone(&self, now: Instant) -> Option<ApiError> {
        if self.events.is_closed() {
            return Some(ApiError::new(499, "cancelled", "the client went away"));
        }
        match self.deadline {
            Some(d) if now >= d => Some(ApiError::new(
                504,
                "timeout",
                "the request ran past the server's time limit",
            )),
            _ => None,
        }
    }
}

struct Live<'m> {
    choice: Choice,
    text: TextStream<'m>,
    generated: usize,
}

/// The batching loop's state.
struct Batcher<'m> {
    engine: Engine<'m>,
    metrics: Arc<Metrics>,
    waiting: VecDeque<Choice>,
    live: HashMap<SeqId, Live<'m>>,
}

impl<'m> Batcher<'m> {
    fn new(engine: Engine<'m>, metrics: Arc<Metrics>) -> Self {
        Batcher {
            engine,
            metrics,
            waiting: VecDeque::new(),
            live: HashMap::new(),
        }
    }

    fn run(mut self, rx: mpsc::Receiver<Job>) {
        loop {
            if self.live.is_empty() && self.waiting.is_empty() {
                match rx.recv() {
                    Ok(job) => self.intake(job),
                    Err(_) => return,
                }
            }
            while let Ok(job) = rx.try_recv() {
                self.intake(job);
            }
            self.drop_gone();
            self.admit();
            self.metrics
                .batch_size
                .store(self.live.len() as u64, Relaxed);
            if !self.live.is_empty() {
                self.step();
                self.metrics
                    .batch_size
                    .store(self.live.len() as u64, Relaxed);
            }
        }
    }

    /// Tokenizes and checks a request; queues its choices.
    fn intake(&mut self, job: Job) {
        let n = job.generation.n;
        let prompt = match self.tokens(&job) {
            Ok(p) => p,
            Err(e) => {
                self.metrics.queue_depth.fetch_sub(n as u64, Relaxed);
                let _ = job.events.send(Event::Error(e));
                return;
            }
        };
        let _ = job.events.send(Event::Accepted {
            prompt_tokens: prompt.len(),
        });
        self.metrics
            .prompt_tokens
            .fetch_add((prompt.len() * n) as u64, Relaxed);
        let prompt = Arc::new(prompt);
        for index in 0..n {
            let mut generation = job.generation.clone();
            generation.sampling.seed = generation.sampling.seed.wrapping_add(index as u64);
            self.waiting.push_back(Choice {
                index,
                prompt: prompt.clone(),
                generation,
                events: job.events.clone(),
                arrived: job.arrived,
                deadline: job.deadline,
            });
        }
    }

    fn tokens(&self, job: &Job) -> Result<Vec<u32>, ApiError> {
        let model = self.engine.model();
        let bad = |m: String| ApiError::bad(Some("prompt"), m);
        let ids = match &job.input {
            Input::Tokens(t) => t.clone(),
            Input::Text(t) => model.tokenizer.encode(t).map_err(|e| bad(e.to_string()))?,
            Input::Chat(m) => {
                let text = chat::prompt(model, m)
                    .map_err(|e| ApiError::bad(Some("messages"), e.to_string()))?;
                model
                    .tokenizer
                    .encode(&text)
                    .map_err(|e| bad(e.to_string()))?
            }
        };
        let vocab = model.config.vocab;
        if let Some(t) = ids.iter().find(|&&t| t as usize >= vocab) {
            return Err(bad(format!(
                "token {t} is outside the vocabulary of {vocab}"
            )));
        }
        self.engine
            .check(ids.len(), job.generation.max_tokens)
            .map_err(|e| ApiError::bad(Some("max_tokens"), e.to_string()))?;
        Ok(ids)
    }

    /// Ends waiting and running choices whose client went away or whose time ran out.
    fn drop_gone(&mut self) {
        let now = Instant::now();
        let mut i = 0;
        while i < self.waiting.len() {
            if let Some(e) = self.waiting[i].gone(now) {
                let c = self.waiting.remove(i).expect("in range");
                self.metrics.queue_depth.fetch_sub(1, Relaxed);
                self.metrics.cancelled.fetch_add(1, Relaxed);
                let _ = c.events.send(Event::Error(e));
            } else {
                i += 1;
            }
        }
        let gone: Vec<(SeqId, ApiError)> = self
            .live
            .iter()
            .filter_map(|(id, l)| l.choice.gone(now).map(|e| (*id, e)))
            .collect();
        for (id, e) in gone {
            self.engine.remove(id);
            self.metrics.cancelled.fetch_add(1, Relaxed);
            if let Some(l) = self.live.remove(&id) {
                let _ = l.choice.events.send(Event::Error(e));
            }
        }
    }

    /// Moves waiting choices into the batch while they fit; their prompts run together
    /// (at most `ADMIT_TOKENS` prompt tokens while others are decoding, so a wave of
    /// arrivals delays the running streams by one bounded prefill).
    fn admit(&mut self) {
        let mut rows = Vec::new();
        let mut tokens = 0;
        while let Some(c) = self.waiting.get(rows.len()) {
            let busy = !self.live.is_empty() || !rows.is_empty();
            if busy && tokens + c.prompt.len() > ADMIT_TOKENS {
                break;
            }
            rows.push(c.prompt.len() + c.generation.max_tokens);
            if !self.engine.fits(&rows) {
                rows.pop();
                break;
            }
            tokens += c.prompt.len();
        }
        if rows.is_empty() {
            return;
        }
        let picked: Vec<Choice> = self.waiting.drain(..rows.len()).collect();
        self.metrics
            .queue_depth
            .fetch_sub(picked.len() as u64, Relaxed);
        let requests: Vec<(&[u32], usize, Sampling)> = picked
            .iter()
            .map(|c| {
                let g = &c.generation;
                (c.prompt.as_slice(), g.max_tokens, g.sampling)
            })
            .collect();
        let added = self.engine.add_many(&requests);
        for (c, r) in picked.into_iter().zip(added) {
            match r {
                Ok((id, first)) => {
                    if c.index == 0 {
                        self.metrics.first_token(c.arrived.elapsed().as_secs_f64());
                    }
                    let model = self.engine.model();
                    let live = Live {
                        text: TextStream::new(&model.tokenizer, &c.generation.stop),
                        choice: c,
                        generated: 0,
                    };
                    self.live.insert(id, live);
                    self.token(id, first);
                }
                Err(e) => {
                    let status = match e {
                        LlmError::Invalid(_) | LlmError::Capacity(_) => 400,
                        _ => 500,
                    };
                    let kind = if status == 400 {
                        "invalid_request_error"
                    } else {
                        "server_error"
                    };
                    let _ = c
                        .events
                        .send(Event::Error(ApiError::new(status, kind, e.to_string())));
                }
            }
        }
    }

    /// One decode step of the batch.
    fn step(&mut self) {
        match self.engine.step() {
            Ok(out) => {
                self.metrics.decode_steps.fetch_add(1, Relaxed);
                for (id, t) in out {
                    self.token(id, t);
                }
            }
            Err(e) => {
                // the batch cannot go on: every running request gets the error, the
                // waiting ones stay queued
                let ids: Vec<SeqId> = self.live.keys().copied().collect();
                for id in ids {
                    self.engine.remove(id);
                    if let Some(l) = self.live.remove(&id) {
                        let _ = l.choice.events.send(Event::Error(ApiError::new(
                            500,
                            "server_error",
                            format!("generation failed: {e}"),
                        )));
                    }
                }
            }
        }
    }

    /// Hands a sequence's new token to its request; ends the sequence when it is done.
    fn token(&mut self, id: SeqId, t: u32) {
        let Some(l) = self.live.get_mut(&id) else {
            return;
        };
        l.generated += 1;
        self.metrics.generated_tokens.fetch_add(1, Relaxed);
        let g = &l.choice.generation;
        let model = self.engine.model();
        let mut finish = None;
        if !g.ignore_eos && model.tokenizer.stop_ids.contains(&t) {
            finish = Some("stop");
        } else {
            let piece = l.text.push(t).unwrap_or_default();
            if !piece.is_empty() {
                let _ = l.choice.events.send(Event::Text {
                    index: l.choice.index,
                    text: piece,
                });
            }
            if l.text.stopped() {
                finish = Some("stop");
            } else if l.generated >= g.max_tokens {
                finish = Some("length");
            }
        }
        let Some(finish) = finish else {
            return;
        };
        let rest = l.text.finish().unwrap_or_default();
        if !rest.is_empty() {
            let _ = l.choice.events.send(Event::Text {
                index: l.choice.index,
                text: rest,
            });
        }
        let _ = l.choice.events.send(Event::Done {
            index: l.choice.index,
            finish,
            completion_tokens: l.generated,
        });
        self.live.remove(&id);
        self.engine.remove(id);
    }
}

/// What an embedding request gets back: one vector per text and the tokens embedded.
pub type Embedded = Result<(Vec<Vec<f32>>, usize), ApiError>;

/// An embedding request for the embedding thread.
pub struct EmbedJob {
    /// the texts
    pub texts: Vec<String>,
    /// where the vectors (and the token count) go
    pub reply: tokio::sync::oneshot::Sender<Embedded>,
}

/// The routes' handle on the embedding thread.
pub struct EmbedWorker {
    /// where requests go
    pub jobs: mpsc::Sender<EmbedJob>,
    /// the name `/v1/models` lists
    pub name: String,
}

/// Texts one embedding run takes at most.
const EMBED_BATCH: usize = 32;

/// Loads a BERT-family folder on a new thread that embeds batches of texts: requests that
/// arrive together are pooled, sorted by length and run in batches of similar lengths.
///
/// # Errors
/// The folder does not load or the device cannot compile it.
pub fn spawn_embed(
    dir: PathBuf,
    device: Device,
    metrics: Arc<Metrics>,
) -> Result<EmbedWorker, ServeError> {
    let (tx, rx) = mpsc::channel::<EmbedJob>();
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "embedding".into());
    std::thread::Builder::new()
        .name("rlx-embed".into())
        .spawn(move || {
            let embedder = match rlx_llm::Embedder::load(&dir.to_string_lossy(), device) {
                Ok(e) => e,
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("{}: {e}", dir.display())));
                    return;
                }
            };
            let tok = embedder.tokenizer();
            let _ = ready_tx.send(Ok(()));
            while let Ok(first) = rx.recv() {
                let mut jobs = vec![first];
                while let Ok(j) = rx.try_recv() {
                    jobs.push(j);
                }
                // every text with its job and place, sorted by length
                let mut items: Vec<(usize, usize, usize)> = Vec::new();
                let mut failed: Vec<Option<ApiError>> = vec![None; jobs.len()];
                for (j, job) in jobs.iter().enumerate() {
                    for (i, t) in job.texts.iter().enumerate() {
                        match tok.encode(&[t.as_str()]) {
                            Ok(e) => items.push((e.ids[0].len(), j, i)),
                            Err(e) => {
                                failed[j] =
                                    Some(ApiError::bad(Some("input"), format!("input[{i}]: {e}")))
                            }
                        }
                    }
                }
                items.sort();
                let mut out: Vec<Vec<Vec<f32>>> = jobs
                    .iter()
                    .map(|j| vec![Vec::new(); j.texts.len()])
                    .collect();
                let mut tokens = vec![0usize; jobs.len()];
                for chunk in items.chunks(EMBED_BATCH) {
                    let live: Vec<&(usize, usize, usize)> = chunk
                        .iter()
                        .filter(|(_, j, _)| failed[*j].is_none())
                        .collect();
                    if live.is_empty() {
                        continue;
                    }
                    let texts: Vec<&str> = live
                        .iter()
                        .map(|(_, j, i)| jobs[*j].texts[*i].as_str())
                        .collect();
                    let run = embedder
                        .embed(&texts)
                        .map(|e| e.rows().map(<[f32]>::to_vec).collect::<Vec<_>>());
                    match run {
                        Ok(rows) => {
                            for ((len, j, i), row) in live.iter().zip(rows) {
                                out[*j][*i] = row;
                                tokens[*j] += len;
                            }
                        }
                        Err(e) => {
                            for (_, j, _) in &live {
                                failed[*j] = Some(ApiError::new(
                                    500,
                                    "server_error",
                                    format!("embedding failed: {e}"),
                                ));
                            }
                        }
                    }
                }
                for (j, job) in jobs.into_iter().enumerate() {
                    let r = match failed[j].take() {
                        Some(e) => Err(e),
                        None => {
                            metrics
                                .embedded_texts
                                .fetch_add(job.texts.len() as u64, Relaxed);
                            Ok((std::mem::take(&mut out[j]), tokens[j]))
                        }
                    };
                    let _ = job.reply.send(r);
                }
            }
        })
        .map_err(|e| ServeError::Model(format!("starting the embedding thread: {e}")))?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(EmbedWorker { jobs: tx, name }),
        Ok(Err(m)) => Err(ServeError::Model(m)),
        Err(_) => Err(ServeError::Model(
            "the embedding thread ended while loading".into(),
        )),
    }
}
