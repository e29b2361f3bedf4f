//! `rlx embed TEXT... --model DIR`: sentence embeddings from a BERT-family folder (mean over
//! real tokens, L2-normalised). Texts of different lengths go in one batch, padded to the
//! longest and masked.

use super::model::device;
use super::CmdResult;
use rlx_models::bert::{self, SENTENCE_EMBEDDING};
use rlx_models::{BertModel, Family};
use rlx_runtime::{CompileOptions, Session};
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
    let dir = rlx_models::resolve(&args.model)?;
    match rlx_models::family(&dir)? {
        Family::Bert => {}
        Family::Llama => {
            return Err(format!(
                "{}: a Llama model generates text; use `rlx generate --model {}`",
                dir.display(),
                dir.display()
            )
            .into())
        }
    }
    let t0 = Instant::now();
    let model = BertModel::load(&dir)?;
    let tok = model.tokenizer()?;
    let session = Session::new(device)?;
    for (name, t) in &model.params {
        session.set_param(name, t.clone());
    }
    let texts: Vec<&str> = args.texts.iter().map(String::as_str).collect();
    let enc = tok.encode(&texts)?;
    let inputs = bert::inputs(&enc);
    let compiled = session.compile(&model.graph, CompileOptions::default())?;
    let outputs = compiled.run(&inputs)?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let emb = outputs
        .iter()
        .find(|(n, _)| n == SENTENCE_EMBEDDING)
        .map(|(_, t)| t)
        .ok_or("the graph has no sentence_embedding output")?;
    let dim = emb.shape()[1];
    let rows: Vec<Vec<f64>> = emb
        .to_f64_vec()
        .chunks(dim.max(1))
        .map(<[f64]>::to_vec)
        .collect();
    let tokens = enc.lengths();
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
            args.model, model.max_seq_len
        );
        println!("device    {device}");
        for ((text, row), n) in texts.iter().zip(&rows).zip(&tokens) {
            let head: Vec<String> = row.iter().take(6).map(|x| format!("{x:+.4}")).collect();
            println!("{n:>4} tok  [{}, ...] ({dim})  {text}", head.join(", "));
        }
        if rows.len() > 1 {
            println!("cosine similarity:");
            for (i, a) in rows.iter().enumerate() {
                let sims: Vec<String> = rows
                    .iter()
                    .map(|b| format!("{:6.3}", a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>()))
                    .collect();
                println!("  #{i}  {}", sims.join(" "));
            }
        }
        println!("time      {ms:.1} ms (load, compile, tokenize, run)");
    }
    Ok(())
}
