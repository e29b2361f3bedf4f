//! `rlx generate PROMPT --model FILE|DIR`: text generation with a Llama-family model (GGUF, or
//! a Hugging Face folder with safetensors).
//! Tokens stream to stdout as they are produced; prompt and decode tokens/s go to stderr at
//! the end (or, with `--json`, one JSON object with text, tokens and timings to stdout).

use super::model::device;
use super::CmdResult;
use rlx_gguf::chat_prompt;
use rlx_ir::{Graph, Tensor};
use rlx_models::llama::{Generator, Llama, Runner, Sampling};
use rlx_runtime::{CompileOptions, CompiledGraph, Session};
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// Arguments of `rlx generate`.
#[derive(clap::Args)]
pub struct Args {
    /// The prompt text.
    prompt: String,
    /// A GGUF file, a folder holding one, or a Hugging Face Llama folder (`config.json`,
    /// safetensors, `tokenizer.json`).
    #[arg(long)]
    model: PathBuf,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 64)]
    max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f64,
    /// Nucleus sampling: keep the most likely tokens up to this probability mass.
    #[arg(long, default_value_t = 1.0)]
    top_p: f64,
    /// Seed of the sampling RNG.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Wrap the prompt in the model's chat template (one user turn).
    #[arg(long)]
    chat: bool,
    /// Print one JSON object (text, tokens, timings) instead of streaming.
    #[arg(long)]
    json: bool,
    /// Device (quantized matmul runs on `cpu` today).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Worker threads (default: RLX_CPU_THREADS, else RAYON_NUM_THREADS, else all cores).
    #[arg(long)]
    threads: Option<usize>,
}

/// Compiles and runs the generator's graphs in one session.
pub struct SessionRunner {
    session: Session,
    options: CompileOptions,
    graphs: Vec<CompiledGraph>,
}

impl SessionRunner {
    /// A runner on `session` compiling with `options`.
    pub fn new(session: Session, options: CompileOptions) -> Self {
        SessionRunner {
            session,
            options,
            graphs: Vec::new(),
        }
    }
}

impl Runner for SessionRunner {
    fn set_param(&mut self, name: &str, value: Arc<Tensor>) {
        self.session.params().set(name, value);
    }

    fn compile(&mut self, graph: &Graph) -> Result<usize, String> {
        let g = self
            .session
            .compile(graph, self.options.clone())
            .map_err(|e| e.to_string())?;
        self.graphs.push(g);
        Ok(self.graphs.len() - 1)
    }

    fn run(
        &mut self,
        handle: usize,
        inputs: &HashMap<String, Tensor>,
    ) -> Result<Vec<(String, Tensor)>, String> {
        self.graphs[handle].run(inputs).map_err(|e| e.to_string())
    }
}

/// Generates and prints.
pub fn run(args: Args) -> CmdResult {
    if !(0.0..=1.0).contains(&args.top_p) || args.temperature < 0.0 {
        return Err("--top-p must be in [0, 1] and --temperature >= 0".into());
    }
    let device = device(&args.device)?;
    let path = &args.model;
    let t0 = Instant::now();
    // GGUF file or folder, or a Hugging Face folder; the file mappings are dropped once
    // loaded: weights live (packed) in the model's params.
    let model = Llama::open(path)?;
    let load_s = t0.elapsed().as_secs_f64();
    let text = if args.chat {
        chat_prompt(model.tokenizer.chat_template.as_deref(), &args.prompt)
    } else {
        args.prompt.clone()
    };
    let prompt = model.tokenizer.encode(&text)?;
    let options = CompileOptions {
        threads: args.threads,
        ..Default::default()
    };
    let runner = SessionRunner::new(Session::new(device)?, options);
    let mut gen = Generator::new(&model, runner);
    let sampling = Sampling {
        temperature: args.temperature,
        top_p: args.top_p,
        seed: args.seed,
    };
    let tok = &model.tokenizer;
    let mut ids: Vec<u32> = Vec::new();
    let mut printed = 0usize;
    let mut out = std::io::stdout();
    if !args.json {
        // echo the user's text (not the chat template around it)
        print!("{}{}", args.prompt, if args.chat { "\n" } else { "" });
        let _ = out.flush();
    }
    let stats = gen.generate(&prompt, args.max_tokens, &sampling, |id| {
        if args.json || gen_stop(tok, id) {
            ids.push(id);
            return;
        }
        ids.push(id);
        // print the new complete characters (a token may end mid-UTF-8 sequence)
        if let Ok(s) = tok.decode(&ids, true) {
            if !s.ends_with('\u{FFFD}') && s.len() > printed && s.is_char_boundary(printed) {
                print!("{}", &s[printed..]);
                let _ = out.flush();
                printed = s.len();
            }
        }
    })?;
    let gen_text = tok.decode(&stats.tokens, true)?;
    if args.json {
        let j = serde_json::json!({
            "model": path.display().to_string(),
            "prompt": text,
            "prompt_tokens": stats.prompt_tokens,
            "text": gen_text,
            "tokens": stats.tokens,
            "timings": {
                "load_s": load_s,
                "compile_s": stats.compile_s,
                "prefill_s": stats.prefill_s,
                "decode_s": stats.decode_s,
                "prefill_tok_s": stats.prefill_tok_s(),
                "decode_tok_s": stats.decode_tok_s(),
                "decode_steps": stats.decode_steps,
            },
            "kv_cache_bytes": stats.kv_cache_bytes,
            "weight_bytes": model.weight_bytes,
        });
        println!("{j}");
    } else {
        if printed < gen_text.len() && gen_text.is_char_boundary(printed) {
            print!("{}", &gen_text[printed..]);
        }
        println!();
        eprintln!(
            "prompt: {} tokens, {:.1} tok/s | decode: {} tokens, {:.1} tok/s | load {:.2} s, \
             compile {:.2} s",
            stats.prompt_tokens.len(),
            stats.prefill_tok_s(),
            stats.decode_steps,
            stats.decode_tok_s(),
            load_s,
            stats.compile_s
        );
    }
    Ok(())
}

fn gen_stop(tok: &rlx_gguf::ChatTokenizer, id: u32) -> bool {
    tok.stop_ids.contains(&id)
}
