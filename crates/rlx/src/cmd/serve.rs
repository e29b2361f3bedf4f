//! `rlx serve`: the OpenAI-compatible server (`rlx-serve`); `rlx loadtest`: concurrent
//! streaming clients against one.

use super::CmdResult;
use std::path::PathBuf;

/// Arguments of `rlx serve`.
#[derive(clap::Args)]
pub struct Args {
    /// A Llama-family model for chat and text completions: a GGUF file, a folder holding
    /// one, or a Hugging Face folder.
    #[arg(long)]
    model: Option<PathBuf>,
    /// A BERT-family folder for `/v1/embeddings`.
    #[arg(long)]
    embedding_model: Option<PathBuf>,
    /// Device: `auto` (CUDA where available, else the CPU), `cuda` or `cpu`.
    #[arg(long, default_value = "auto")]
    device: String,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0: any free port, printed at start).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Sequences decoding together in the running batch.
    #[arg(long, default_value_t = 16)]
    max_sequences: usize,
    /// Requests waiting for the batch before new ones are refused with 429.
    #[arg(long, default_value_t = 256)]
    max_queue: usize,
    /// KV rows per sequence (prompt + generated; default: the model's context).
    #[arg(long)]
    context: Option<usize>,
    /// Seconds a request may take before it is ended (0: no limit).
    #[arg(long, default_value_t = 600.0)]
    timeout: f64,
    /// Tokens generated when a request gives no max_tokens.
    #[arg(long, default_value_t = 256)]
    default_max_tokens: usize,
    /// CPU worker threads.
    #[arg(long)]
    threads: Option<usize>,
    /// Quantized products keep f32 activations instead of int8 ones (slower; the default
    /// matches llama.cpp).
    #[arg(long)]
    exact_quant: bool,
}

/// Serves until Ctrl-C.
pub fn run(a: Args) -> CmdResult {
    let opts = rlx_serve::ServeOptions {
        model: a.model,
        embedding_model: a.embedding_model,
        device: a.device,
        host: a.host,
        port: a.port,
        max_sequences: a.max_sequences,
        max_queue: a.max_queue,
        context: a.context,
        timeout_s: a.timeout,
        default_max_tokens: a.default_max_tokens,
        threads: a.threads,
        exact_quant: a.exact_quant,
    };
    let server = rlx_serve::start(opts)?;
    eprintln!(
        "rlx serve: listening on http://{} (Ctrl-C stops)",
        server.addr()
    );
    server.wait();
    Ok(())
}

/// Arguments of `rlx loadtest`.
#[derive(clap::Args)]
pub struct LoadArgs {
    /// The server's address.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// Clients streaming at once.
    #[arg(long, default_value_t = 8)]
    streams: usize,
    /// Requests in all.
    #[arg(long, default_value_t = 64)]
    requests: usize,
    /// Tokens each request asks for.
    #[arg(long, default_value_t = 64)]
    max_tokens: usize,
    /// The prompt (each request appends its number).
    #[arg(long, default_value = "Write a short story about a lighthouse keeper.")]
    prompt: String,
    /// Use chat completions (default: text completions).
    #[arg(long)]
    chat: bool,
    /// Ask for max_tokens tokens past end-of-sequence (`ignore_eos`; servers that do not
    /// know it stop early).
    #[arg(long)]
    ignore_eos: bool,
    /// The model name sent.
    #[arg(long, default_value = "default")]
    model: String,
    /// Seconds one request may take.
    #[arg(long, default_value_t = 600.0)]
    timeout: f64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs the load test and prints its report; fails when any request failed.
pub fn load(a: LoadArgs) -> CmdResult {
    let o = rlx_serve::load::LoadOptions {
        url: a.url,
        streams: a.streams,
        requests: a.requests,
        max_tokens: a.max_tokens,
        prompt: a.prompt,
        chat: a.chat,
        ignore_eos: a.ignore_eos,
        model: a.model,
        timeout_s: a.timeout,
    };
    let r = rlx_serve::load::run(&o)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!(
            "requests  {} ({} failed) over {} streams",
            r.requests, r.failed, o.streams
        );
        println!(
            "tokens    {} in {:.2} s: {:.1} tok/s",
            r.completion_tokens, r.seconds, r.tok_s
        );
        println!(
            "ttft      p50 {:.1} ms, p99 {:.1} ms",
            r.ttft_p50_ms, r.ttft_p99_ms
        );
        println!(
            "itl       p50 {:.2} ms, p99 {:.2} ms",
            r.itl_p50_ms, r.itl_p99_ms
        );
    }
    for e in &r.errors {
        eprintln!("failed: {e}");
    }
    if r.failed > 0 {
        return Err(format!("{} of {} requests failed", r.failed, r.requests).into());
    }
    Ok(())
}
