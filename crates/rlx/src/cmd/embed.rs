//! `rlx embed TEXT... --model DIR`: sentence embeddings from a BERT-family folder (mean over
//! real tokens, L2-normalised). Texts of different lengths go in one batch, padded to the
//! longest and masked.

use super::model::device;
use super::CmdResult;
use rlx_llm::Embedder;
use std::time::Instant;

/// Arguments of `rlx embed`.
#[derive(clap::Args)]
pub struct Args {
    /// Texts to embed (one batch).
    #[arg(required = true)]
    texts: Vec<String>,
    /// Model folder (config.json, model.safetensors, tokenizer.json), or `hf:<owner>/<name>`
    /// to download from the Hugging Face hub into the cache.
    #[arg(long)]
    model: String,
    /// Device name, or `auto` for the fastest available.
    #[arg(long, default_value = "auto")]
    device: String,
    /// Print one JSON object: model, device, dim, embeddings, tokens.
    #[arg(long)]
    json: bool,
}

/// Embeds the texts and prints them.
pub fn run(args: Args) -> CmdResult {
    let device = device(&args.device)?;
    let t0 = Instant::now();
    let embedder = Embedder::load(&args.model, device)?;
    let texts: Vec<&str> = args.texts.iter().map(String::as_str).collect();
    let emb = embedder.embed(&texts)?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let dim = emb.dim;
    let rows: Vec<&[f32]> = emb.rows().collect();
    let tokens = &emb.tokens;
    if args.json {
        let v = serde_json::json!({
            "model": args.model,
            "device": device.name(),
            "dim": dim,
            "embeddings": rows,
            "tokens": tokens,
        });
        println!("{}", serde_json::to_string(&v)?);
    } else {
        println!(
            "model     {} ({} tokens max)",
            args.model,
            embedder.max_seq_len()
        );
        println!("device    {device}");
        for ((text, row), n) in texts.iter().zip(&rows).zip(tokens) {
            let head: Vec<String> = row.iter().take(6).map(|x| format!("{x:+.4}")).collect();
            println!("{n:>4} tok  [{}, ...] ({dim})  {text}", head.join(", "));
        }
        if rows.len() > 1 {
            println!("cosine similarity:");
            for (i, a) in rows.iter().enumerate() {
                let sims: Vec<String> = rows
                    .iter()
                    .map(|b| {
                        let dot: f64 = a
                            .iter()
                            .zip(*b)
                            .map(|(x, y)| f64::from(*x) * f64::from(*y))
                            .sum();
                        format!("{dot:6.3}")
                    })
                    .collect();
                println!("  #{i}  {}", sims.join(" "));
            }
        }
        println!("time      {ms:.1} ms (load, compile, tokenize, run)");
    }
    Ok(())
}
