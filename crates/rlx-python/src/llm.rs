//! `rlx.LanguageModel` and `rlx.generate`: a Llama-family model (GGUF or Hugging Face
//! folder) on a thread of its own that keeps the model and its `rlx_llm::Engine` (compiled
//! graphs, or the CUDA engine) between calls; text pieces come back through a channel, so
//! the caller iterates them with the GIL released while it waits.

use crate::error;
use pyo3::exceptions::PyStopIteration;
use pyo3::prelude::*;
use rlx_driver::Device;
use rlx_llm::chat::{self, Message};
use rlx_llm::{llm_device, Engine, EngineSettings, Llama, LlmError, Sampling};
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Mutex;

/// One `generate` call for the model's thread.
struct Job {
    prompt: String,
    chat: bool,
    max_tokens: usize,
    sampling: Sampling,
    stops: Vec<String>,
    ignore_eos: bool,
    pieces: Sender<Result<String, LlmError>>,
}

/// A loaded Llama-family model that generates text.
#[pyclass(frozen, module = "rlx")]
pub struct LanguageModel {
    jobs: Sender<Job>,
    path: String,
    device: Device,
}

impl LanguageModel {
    /// Loads the model on its own thread and builds its engine there.
    ///
    /// # Errors
    /// The model does not load, or the device is unavailable or cannot run it.
    pub fn open(
        py: Python<'_>,
        path: PathBuf,
        device: &str,
        settings: EngineSettings,
    ) -> PyResult<LanguageModel> {
        let device = llm_device(device).map_err(error::llm)?;
        let (jobs, rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), LlmError>>();
        let label = path.display().to_string();
        std::thread::Builder::new()
            .name("rlx-generate".into())
            .spawn(move || serve(path, device, settings, rx, ready_tx))
            .map_err(|e| error::RunError::new_err(format!("starting the model's thread: {e}")))?;
        let ready = py.detach(move || ready_rx.recv());
        match ready {
            Ok(Ok(())) => Ok(LanguageModel {
                jobs,
                path: label,
                device,
            }),
            Ok(Err(e)) => Err(error::llm(e)),
            Err(_) => Err(error::RunError::new_err(
                "the model's thread ended while loading",
            )),
        }
    }

    /// Queues a generation; its pieces arrive on the returned stream.
    pub fn start(&self, request: Request) -> PyResult<TextIterator> {
        let sampling = Sampling {
            temperature: request.temperature,
            top_p: request.top_p,
            top_k: request.top_k,
            min_p: request.min_p,
            repetition_penalty: request.repeat_penalty,
            seed: request.seed,
        };
        sampling.validate().map_err(error::invalid)?;
        let (pieces, rx) = mpsc::channel();
        let job = Job {
            prompt: request.prompt,
            chat: request.chat,
            max_tokens: request.max_tokens,
            sampling,
            stops: request.stop,
            ignore_eos: request.ignore_eos,
            pieces,
        };
        self.jobs
            .send(job)
            .map_err(|_| error::RunError::new_err("the model's thread has ended"))?;
        Ok(TextIterator {
            pieces: Mutex::new(rx),
        })
    }
}

/// What `generate` asks for (the CLI's `rlx generate` flags).
pub struct Request {
    /// the prompt text
    pub prompt: String,
    /// most tokens to generate
    pub max_tokens: usize,
    /// sampling temperature; 0 is greedy
    pub temperature: f64,
    /// keep only the k most likely tokens (0: all)
    pub top_k: usize,
    /// nucleus sampling mass
    pub top_p: f64,
    /// drop tokens less likely than this fraction of the most likely one
    pub min_p: f64,
    /// penalty of tokens already in the sequence (1: off)
    pub repeat_penalty: f64,
    /// seed of the sampling RNG
    pub seed: u64,
    /// wrap the prompt in the model's chat template
    pub chat: bool,
    /// strings that end the text (not included)
    pub stop: Vec<String>,
    /// keep generating past an end-of-sequence token
    pub ignore_eos: bool,
}

/// The model's thread: loads, answers `ready`, then runs jobs one after another until the
/// `LanguageModel` (and every iterator's sender) is gone.
fn serve(
    path: PathBuf,
    device: Device,
    settings: EngineSettings,
    jobs: Receiver<Job>,
    ready: Sender<Result<(), LlmError>>,
) {
    let mut model = match Llama::open(&path) {
        Ok(m) => m,
        Err(e) => {
            let _ = ready.send(Err(e.into()));
            return;
        }
    };
    if let Some(n) = settings.context {
        // past the original context a Phi-3 longrope model takes its long RoPE factors
        model.extend_context(n);
    }
    let mut engine = match Engine::new(&model, device, settings) {
        Ok(e) => e,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let _ = ready.send(Ok(()));
    while let Ok(job) = jobs.recv() {
        if let Err(e) = run(&mut engine, &model, &job) {
            let _ = job.pieces.send(Err(e));
        }
    }
}

fn run(engine: &mut Engine<'_>, model: &Llama, job: &Job) -> Result<(), LlmError> {
    let text = if job.chat {
        chat::prompt(model, &[Message::new("user", &job.prompt)])?
    } else {
        job.prompt.clone()
    };
    let prompt = model
        .tokenizer
        .encode(&text)
        .map_err(|e| LlmError::Invalid(e.to_string()))?;
    let stop_ids = if job.ignore_eos {
        Vec::new()
    } else {
        model.tokenizer.stop_ids.clone()
    };
    engine.generate_text(
        &prompt,
        job.max_tokens,
        job.sampling,
        &stop_ids,
        &job.stops,
        &mut |piece| job.pieces.send(Ok(piece.to_string())).is_ok(),
    )?;
    Ok(())
}

#[pymethods]
impl LanguageModel {
    /// Generates after `prompt`: an iterator of text pieces (`stream=True`) or the text.
    #[pyo3(signature = (prompt, max_tokens=64, *, stream=true, temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0, seed=0, chat=false, stop=None, ignore_eos=false))]
    #[allow(clippy::too_many_arguments)]
    pub fn generate(
        &self,
        py: Python<'_>,
        prompt: String,
        max_tokens: usize,
        stream: bool,
        temperature: f64,
        top_k: usize,
        top_p: f64,
        min_p: f64,
        repeat_penalty: f64,
        seed: u64,
        chat: bool,
        stop: Option<Vec<String>>,
        ignore_eos: bool,
    ) -> PyResult<Py<PyAny>> {
        let it = self.start(Request {
            prompt,
            max_tokens,
            temperature,
            top_k,
            top_p,
            min_p,
            repeat_penalty,
            seed,
            chat,
            stop: stop.unwrap_or_default(),
            ignore_eos,
        })?;
        if stream {
            return Ok(Py::new(py, it)?.into_any());
        }
        let text = it.collect(py)?;
        Ok(text.into_pyobject(py)?.into_any().unbind())
    }

    /// The device it generates on.
    #[getter]
    fn device(&self) -> String {
        self.device.name().to_string()
    }

    fn __repr__(&self) -> String {
        format!(
            "rlx.LanguageModel('{}', device='{}')",
            self.path, self.device
        )
    }
}

/// Text pieces of one generation, as they are produced.
#[pyclass(frozen, module = "rlx")]
pub struct TextIterator {
    pieces: Mutex<Receiver<Result<String, LlmError>>>,
}

impl TextIterator {
    /// The next piece, waiting with the GIL released; `None` at the end.
    fn next_piece(&self, py: Python<'_>) -> PyResult<Option<String>> {
        let pieces = &self.pieces;
        let next = py.detach(|| pieces.lock().unwrap_or_else(|e| e.into_inner()).recv());
        match next {
            Ok(Ok(piece)) => Ok(Some(piece)),
            Ok(Err(e)) => Err(error::llm(e)),
            Err(_) => Ok(None),
        }
    }

    /// Every remaining piece joined.
    pub fn collect(&self, py: Python<'_>) -> PyResult<String> {
        let mut text = String::new();
        while let Some(p) = self.next_piece(py)? {
            text.push_str(&p);
        }
        Ok(text)
    }
}

#[pymethods]
impl TextIterator {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<String> {
        match self.next_piece(py)? {
            Some(p) => Ok(p),
            None => Err(PyStopIteration::new_err(())),
        }
    }
}
