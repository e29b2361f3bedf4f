//! The `rlx` command. Exit codes: 0 ok, 1 error, 2 bad usage.

mod cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// RLX: compile a model once, run it fast on any device.
#[derive(Parser)]
#[command(name = "rlx", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Registered and available devices, with reasons.
    Devices(cmd::devices::Args),
    /// Run a model (no MODEL: the bundled demo).
    Run(cmd::run::Args),
    /// Dispatch report: where each node runs, and how.
    Report(cmd::report::Args),
    /// Print what the compiler produced at a stage.
    Dump(cmd::dump::Args),
    /// Compile time, then median and p90 of timed runs (ONNX file, model folder, GGUF).
    Bench(cmd::bench::Args),
    /// Sentence embeddings from a BERT-family model folder.
    Embed(cmd::embed::Args),
    /// Write a Llama-family model as a GGUF file in one block format (q4_k, q8_0, ...).
    Quantize(cmd::quantize::Args),
    /// Text generation with a Llama-family GGUF model (streams tokens).
    Generate(cmd::generate::Args),
    /// An OpenAI-compatible HTTP server with continuous batching.
    Serve(cmd::serve::Args),
    /// Concurrent streaming clients against an OpenAI-compatible server.
    Loadtest(cmd::serve::LoadArgs),
    /// Run a directory of ONNX backend tests and classify each.
    OnnxTest(cmd::onnx_test::Args),
    /// Run one ONNX backend test in this process (used by `onnx-test`).
    #[command(hide = true)]
    OnnxTestOne(cmd::onnx_test::OneArgs),
    /// Memory tools.
    Mem {
        #[command(subcommand)]
        command: cmd::mem::Command,
    },
}

fn main() -> ExitCode {
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        if msg.contains("failed printing to stdout") {
            // the reader closed the pipe (`rlx report | head`): stop quietly, as Unix tools do
            std::process::exit(0);
        }
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("error: internal error (a bug in rlx, please report it): {msg}{at}");
    }));
    let cli = Cli::parse();
    // a panic has printed its message through the hook; the exit status is 1, as for any
    // other error, not Rust's 101
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match cli.command {
        Command::Devices(a) => cmd::devices::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Report(a) => cmd::report::run(a),
        Command::Dump(a) => cmd::dump::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Embed(a) => cmd::embed::run(a),
        Command::Quantize(a) => cmd::quantize::run(a),
        Command::Generate(a) => cmd::generate::run(a),
        Command::Serve(a) => cmd::serve::run(a),
        Command::Loadtest(a) => cmd::serve::load(a),
        Command::Mem { command } => cmd::mem::run(command),
        Command::OnnxTest(a) => cmd::onnx_test::run(a),
        Command::OnnxTestOne(a) => cmd::onnx_test::run_one(a),
    }));
    let Ok(result) = run else {
        return ExitCode::from(1);
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
