//! `rlx quantize IN OUT.gguf --type q4_k`: a Llama-family model (a Hugging Face folder or a
//! GGUF file) written as a GGUF file in one block format, or in llama.cpp's Q4_K_M / Q5_K_M
//! mixtures, loadable by RLX and llama.cpp.
//! Rows that are not a whole number of the format's blocks fall back to q8_0 or f16, said
//! on stderr.

use super::CmdResult;
use rlx_gguf::QuantFormat;
use rlx_models::llama::export::{export_gguf, ExportType};
use rlx_models::llama::Llama;
use std::path::PathBuf;
use std::time::Instant;

/// The formats `--type` accepts.
const TYPES: [QuantFormat; 11] = [
    QuantFormat::Q4K,
    QuantFormat::Q8_0,
    QuantFormat::Q4_0,
    QuantFormat::Q4_1,
    QuantFormat::Q5_0,
    QuantFormat::Q5_1,
    QuantFormat::Q5K,
    QuantFormat::Q6K,
    QuantFormat::Q2K,
    QuantFormat::Q3K,
    QuantFormat::F16,
];

/// Fallback notes printed one by one before the rest are counted.
const SHOWN_NOTES: usize = 3;

/// Arguments of `rlx quantize`.
#[derive(clap::Args)]
pub struct Args {
    /// A Hugging Face Llama-family folder (`config.json`, safetensors, `tokenizer.json`), a
    /// GGUF file, or a folder holding one.
    input: PathBuf,
    /// The GGUF file to write.
    output: PathBuf,
    /// Block format of the projections: q4_k, q8_0, q4_0, q4_1, q5_0, q5_1, q5_k, q6_k,
    /// q2_k, q3_k or f16; or the mixtures q4_k_m and q5_k_m (llama.cpp's: the head and some
    /// layers' value and FFN down projections in q6_k).
    #[arg(long = "type", default_value = "q4_k", value_parser = parse_type)]
    ty: ExportType,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
}

/// The mixtures `--type` accepts, by their base format.
const MIXTURES: [QuantFormat; 2] = [QuantFormat::Q4K, QuantFormat::Q5K];

fn parse_type(s: &str) -> Result<ExportType, String> {
    TYPES
        .into_iter()
        .map(ExportType::Uniform)
        .chain(MIXTURES.into_iter().map(ExportType::Medium))
        .find(|t| t.to_string().eq_ignore_ascii_case(s))
        .ok_or_else(|| {
            let names: Vec<String> = TYPES
                .iter()
                .map(|f| f.name().to_string())
                .chain(MIXTURES.iter().map(|f| format!("{f}_m")))
                .collect();
            format!("unknown type `{s}` (one of {})", names.join(", "))
        })
}

/// Runs `rlx quantize`.
pub fn run(a: Args) -> CmdResult {
    let start = Instant::now();
    let model = Llama::open(&a.input)?;
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    // written under a temporary name and renamed when complete: a failure leaves no
    // half-written OUT (and an existing OUT untouched)
    let mut partial = a.output.clone().into_os_string();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    // the first few fallbacks in full, then a count
    let mut notes = 0;
    let result = export_gguf(&model, &a.input, &partial, a.ty, threads, &mut |line| {
        notes += 1;
        if notes <= SHOWN_NOTES {
            eprintln!("note: {line}");
        }
    });
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            std::fs::remove_file(&partial).ok();
            return Err(e.into());
        }
    };
    std::fs::rename(&partial, &a.output).map_err(|e| format!("{}: {e}", a.output.display()))?;
    if notes > SHOWN_NOTES {
        eprintln!(
            "note: ... {} more tensors stored as q8_0 or f16 ({} in all)",
            notes - SHOWN_NOTES,
            notes
        );
    }
    eprintln!(
        "wrote {} ({} tensors, {:.1} MiB, {}) in {:.1}s",
        a.output.display(),
        report.tensors,
        report.bytes as f64 / (1 << 20) as f64,
        a.ty,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
