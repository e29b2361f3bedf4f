//! `rlx generate PROMPT --model FILE|DIR`: text generation with a Llama-family model (GGUF, or
//! a Hugging Face folder with safetensors).
//! Tokens stream to stdout as they are produced; prompt and decode tokens/s go to stderr at
//! the end (or, with `--json`, one JSON object with text, tokens and timings to stdout).

use super::CmdResult;
use rlx_llm::chat::{self, Message};
use rlx_llm::{llm_device, Engine, EngineSettings, Llama, Sampling};
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

/// Arguments of `rlx generate`.
#[derive(clap::Args)]
pub struct Args {
    /// The prompt text; several prompts generate together (one batch on CUDA).
    #[arg(required = true)]
    prompts: Vec<String>,
    /// A GGUF file, a folder holding one, or a Hugging Face Llama, Mistral, Qwen2, Gemma or
    /// Phi-3 folder (`config.json`, safetensors, `tokenizer.json`).
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
    /// Keep only the k most likely tokens (0: all).
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// Drop tokens less likely than this fraction of the most likely one (0: none).
    #[arg(long, default_value_t = 0.0)]
    min_p: f64,
    /// Penalise tokens already in the sequence (1: off).
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f64,
    /// Seed of the sampling RNG.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Wrap the prompt in the model's chat template (one user turn).
    #[arg(long)]
    chat: bool,
    /// Print one JSON object (text, tokens, timings) instead of streaming.
    #[arg(long)]
    json: bool,
    /// Device: `auto` (CUDA where available, else the CPU), `cuda` or `cpu`.
    #[arg(long, default_value = "auto")]
    device: String,
    /// Worker threads (default: RLX_CPU_THREADS, else RAYON_NUM_THREADS, else all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Generate `--max-tokens` tokens even past an end-of-sequence token (benchmarks,
    /// comparisons with other runtimes).
    #[arg(long)]
    ignore_eos: bool,
    /// Rows of KV cache per sequence (default: the model's context; a Phi-3 longrope model
    /// asked for more takes its long RoPE factors, up to the context it was trained for).
    #[arg(long)]
    context: Option<usize>,
    /// Quantized products keep f32 activations instead of int8 ones (slower; the default
    /// matches llama.cpp).
    #[arg(long)]
    exact_quant: bool,
}

/// Generates and prints.
pub fn run(args: Args) -> CmdResult {
    let sampling = Sampling {
        temperature: args.temperature,
        top_p: args.top_p,
        top_k: args.top_k,
        min_p: args.min_p,
        repetition_penalty: args.repeat_penalty,
        seed: args.seed,
    };
    sampling.validate()?;
    let device = llm_device(&args.device)?;
    let path = &args.model;
    let t0 = Instant::now();
    // GGUF file or folder, or a Hugging Face folder; the file mappings are dropped once
    // loaded: weights live (packed) in the model's params.
    let mut model = Llama::open(path)?;
    if let Some(n) = args.context {
        // past the original context a Phi-3 longrope model takes its long RoPE factors
        model.extend_context(n);
    }
    let load_s = t0.elapsed().as_secs_f64();
    let mut texts: Vec<String> = Vec::new();
    for p in &args.prompts {
        texts.push(if args.chat {
            chat::prompt(&model, &[Message::new("user", p)])?
        } else {
            p.clone()
        });
    }
    let mut prompts = Vec::new();
    for t in &texts {
        prompts.push(model.tokenizer.encode(t)?);
    }
    let settings = EngineSettings {
        threads: args.threads,
        max_sequences: prompts.len(),
        context: args.context,
        exact_quant: args.exact_quant,
    };
    let mut engine = Engine::new(&model, device, settings)?;
    let tok = &model.tokenizer;
    let stop_ids = if args.ignore_eos {
        Vec::new()
    } else {
        tok.stop_ids.clone()
    };
    if prompts.len() > 1 {
        let r = engine.generate_batch(&prompts, args.max_tokens, &sampling, &stop_ids)?;
        let mut results = Vec::new();
        for (i, ids) in r.tokens.iter().enumerate() {
            let text = tok.decode(ids, true)?;
            if !args.json {
                println!("[{i}] {}{text}", args.prompts[i]);
            }
            results.push(serde_json::json!({
                "prompt": texts[i],
                "prompt_tokens": prompts[i],
                "text": text,
                "tokens": ids,
            }));
        }
        let tok_s = r.generated as f64 / r.seconds.max(1e-12);
        if args.json {
            let j = serde_json::json!({
                "model": path.display().to_string(),
                "device": device.name(),
                "results": results,
                "timings": {"load_s": load_s, "total_s": r.seconds, "generated_tok_s": tok_s},
            });
            println!("{j}");
        } else {
            eprintln!(
                "{} prompts on {device}: {} tokens in {:.2} s ({tok_s:.1} tok/s, prefill \
                 included) | load {load_s:.2} s",
                prompts.len(),
                r.generated,
                r.seconds
            );
        }
        return Ok(());
    }
    let prompt = &prompts[0];
    let mut ids: Vec<u32> = Vec::new();
    let mut printed = 0usize;
    let mut out = std::io::stdout();
    if !args.json {
        // echo the user's text (not the chat template around it)
        print!("{}{}", args.prompts[0], if args.chat { "\n" } else { "" });
        let _ = out.flush();
    }
    let stats = engine.generate(prompt, args.max_tokens, &sampling, &stop_ids, &mut |id| {
        if args.json || stop_ids.contains(&id) {
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
            "device": device.name(),
            "prompt": texts[0],
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
            "{device} | prompt: {} tokens, {:.1} tok/s | decode: {} tokens, {:.1} tok/s | load \
             {:.2} s, compile {:.2} s",
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
