//! `rlx embed TEXT... --model DIR`: sentence embeddings from a BERT-family folder (mean over
//! real tokens, L2-normalised). Texts of different lengths go in one batch, padded to the
//! longest and masked; `--file` reads many texts (one a line), embedded in batches of
//! similar length (`--batch-size`); `--runs N` times the whole set N times after a warm-up.

use super::model::device;
use super::CmdResult;
use rlx_llm::Embedder;
use std::time::Instant;

/// Arguments of `rlx embed`.
#[derive(clap::Args)]
pub struct Args {
    /// Texts to embed (one batch).
    #[arg(required_unless_present = "file")]
    texts: Vec<String>,
    /// Read texts from a file, one a line (`-`: standard input); they are embedded in
    /// batches of `--batch-size` texts of similar length.
    #[arg(long, value_name = "FILE")]
    file: Option<std::path::PathBuf>,
    /// Texts per batch with `--file`.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Time embedding every text this many times (after one warm-up pass) and print the
    /// median, instead of the embeddings.
    #[arg(long)]
    runs: Option<usize>,
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
    #[command(flatten)]
    compile: super::run::CompileFlags,
}

/// Embeds the texts and prints them (or, with `--runs`, times them).
pub fn run(args: Args) -> CmdResult {
    let device = device(&args.device)?;
    let t0 = Instant::now();
    let embedder = Embedder::load_with(&args.model, device, args.compile.options())?;
    let from_file = match &args.file {
        Some(path) => Some(read_lines(path)?),
        None => None,
    };
    let texts: Vec<&str> = match &from_file {
        Some(lines) => lines.iter().map(String::as_str).collect(),
        None => args.texts.iter().map(String::as_str).collect(),
    };
    let embed = || match from_file {
        Some(_) => embedder.embed_batched(&texts, args.batch_size),
        None => embedder.embed(&texts),
    };
    if let Some(runs) = args.runs {
        return time_runs(&args, &embedder, runs, &texts, embed);
    }
    let emb = embed()?;
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

/// The non-empty lines of `path` (`-`: standard input).
fn read_lines(path: &std::path::Path) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let text = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())?
    } else {
        std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?
    };
    let lines: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    if lines.is_empty() {
        return Err(format!("{}: no texts (one a line)", path.display()).into());
    }
    Ok(lines)
}

/// `--runs N`: one warm-up pass (it compiles the batch shapes), then N timed passes over
/// every text; prints the median and texts per second.
fn time_runs(
    args: &Args,
    embedder: &Embedder,
    runs: usize,
    texts: &[&str],
    embed: impl Fn() -> Result<rlx_llm::Embeddings, rlx_llm::LlmError>,
) -> CmdResult {
    let warm = Instant::now();
    let first = embed()?;
    let warm_ms = warm.elapsed().as_secs_f64() * 1e3;
    let mut ms = Vec::with_capacity(runs.max(1));
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        embed()?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    ms.sort_by(f64::total_cmp);
    let median = ms[ms.len() / 2];
    let tokens: usize = first.tokens.iter().sum();
    let per_s = texts.len() as f64 / (median / 1e3);
    if args.json {
        let v = serde_json::json!({
            "model": args.model,
            "device": embedder.device().name(),
            "precision": args.compile.precision,
            "texts": texts.len(),
            "tokens": tokens,
            "batch_size": args.batch_size,
            "warmup_ms": warm_ms,
            "median_ms": median,
            "min_ms": ms[0],
            "runs": ms.len(),
            "texts_per_s": per_s,
        });
        println!("{}", serde_json::to_string(&v)?);
    } else {
        println!("model     {}", args.model);
        println!("device    {}", embedder.device());
        args.compile.print();
        println!(
            "texts     {} ({tokens} tokens, batches of {})",
            texts.len(),
            args.batch_size
        );
        println!("warm-up   {warm_ms:.1} ms (compiles each batch shape)");
        println!(
            "median    {median:.3} ms over {} runs ({per_s:.0} texts/s)",
            ms.len()
        );
    }
    Ok(())
}
