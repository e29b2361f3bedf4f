//! rlx-serve: `rlx serve`, an OpenAI-compatible HTTP server, and `rlx loadtest`.
//!
//! - [`http`]: the routes (`/v1/chat/completions`, `/v1/completions`, `/v1/embeddings`,
//!   `/v1/models`, `/health`, `/metrics`) on axum; request bodies parsed and checked in
//!   [`api`], errors as OpenAI-style JSON bodies.
//! - [`worker`]: one thread owns the language model and its [`rlx_llm::Engine`]; requests
//!   join the running batch between decode steps and leave it when they finish, time out or
//!   their client goes away (their KV cache freed at once). A second thread batches
//!   embedding requests.
//! - [`metrics`]: counters and gauges in Prometheus' text format.
//! - [`load`]: concurrent streaming clients against any OpenAI-compatible server.

pub mod api;
pub mod http;
pub mod load;
pub mod metrics;
pub mod worker;

use std::net::SocketAddr;
use std::path::PathBuf;

/// Errors of starting the server.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A model could not be loaded or its device could not be set up.
    #[error("{0}")]
    Model(String),
    /// The address could not be bound.
    #[error("binding {addr}: {err}")]
    Bind {
        /// the address asked for
        addr: String,
        /// why it failed
        err: std::io::Error,
    },
    /// Bad settings.
    #[error("{0}")]
    Settings(String),
}

/// How the server is set up (`rlx serve`'s flags).
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// the language model (GGUF or Hugging Face folder); None: embeddings only
    pub model: Option<PathBuf>,
    /// a BERT-family folder for `/v1/embeddings`
    pub embedding_model: Option<PathBuf>,
    /// `auto`, `cuda`, `cpu`, ...
    pub device: String,
    /// address to listen on
    pub host: String,
    /// port (0: any free port)
    pub port: u16,
    /// sequences decoding together
    pub max_sequences: usize,
    /// requests waiting beyond the running batch before new ones get 429
    pub max_queue: usize,
    /// KV rows per sequence (None: the model's context)
    pub context: Option<usize>,
    /// seconds a request may take in all before it is ended (0: no limit)
    pub timeout_s: f64,
    /// tokens generated when a request gives no `max_tokens`
    pub default_max_tokens: usize,
    /// CPU worker threads (None: the runtime's default)
    pub threads: Option<usize>,
    /// quantized products keep f32 activations (see `EngineSettings::exact_quant`)
    pub exact_quant: bool,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            model: None,
            embedding_model: None,
            device: "auto".into(),
            host: "127.0.0.1".into(),
            port: 8080,
            max_sequences: 16,
            max_queue: 256,
            context: None,
            timeout_s: 600.0,
            default_max_tokens: 256,
            threads: None,
            exact_quant: false,
        }
    }
}

/// A running server: its address, and a handle that stops it.
pub struct Server {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, lets requests in flight finish, and waits for the server to end.
    pub fn stop(mut self) {
        self.shutdown();
    }

    /// Waits until the server ends (Ctrl-C or SIGTERM).
    pub fn wait(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    fn shutdown(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Loads the models, binds the address and serves in background threads.
///
/// # Errors
/// No model given, a model that does not load, a device that is absent, or an address
/// that cannot be bound.
pub fn start(opts: ServeOptions) -> Result<Server, ServeError> {
    http::start(opts)
}
