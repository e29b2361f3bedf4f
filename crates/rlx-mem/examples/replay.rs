//! Replays an allocation trace through the rlx-mem sub-allocator and prints the report.
//!
//! `replay TRACE [--json] [--expandable | --blocks] [--granule B] [--max-cached B]
//!  [--block-size B] [--dedicated-threshold B] [--provider auto|host|counting] [--no-grow] [--runs N]`
//!
//! `--expandable` (the default) replays through one expandable segment (physical granules of
//! `--granule` bytes mapped on demand, at most `--max-cached` bytes of free granules kept
//! mapped); `--blocks` through growable blocks (`--no-grow`: fixed blocks plus dedicated ones).

use std::path::PathBuf;
use std::process::ExitCode;

use rlx_mem::{replay_file, ProviderChoice, ReplayOptions};

fn parse_bytes(flag: &str, value: Option<String>) -> Result<usize, String> {
    let value = value.ok_or(format!("{flag} needs a value"))?;
    let (digits, scale) = match value.to_ascii_lowercase() {
        v if v.ends_with('g') => (v[..v.len() - 1].to_string(), 1usize << 30),
        v if v.ends_with('m') => (v[..v.len() - 1].to_string(), 1 << 20),
        v if v.ends_with('k') => (v[..v.len() - 1].to_string(), 1 << 10),
        v => (v, 1),
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or(format!("{flag}: cannot read {value:?} as a byte count"))
}

fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let mut opts = ReplayOptions::default();
    let mut json = false;
    let mut path: Option<PathBuf> = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--json" => json = true,
            "--no-grow" => {
                opts.grow_in_place = false;
                opts.expandable = false;
            }
            "--expandable" => opts.expandable = true,
            "--blocks" => opts.expandable = false,
            "--granule" => opts.granule = Some(parse_bytes(&arg, args.next())?),
            "--headroom-permille" => {
                opts.headroom_permille = parse_bytes(&arg, args.next())?
                    .try_into()
                    .unwrap_or(u32::MAX)
            }
            "--max-cached" => opts.max_cached_bytes = Some(parse_bytes(&arg, args.next())?),
            "--block-size" => opts.block_size = Some(parse_bytes(&arg, args.next())?),
            "--dedicated-threshold" => {
                opts.dedicated_threshold = Some(parse_bytes(&arg, args.next())?)
            }
            "--runs" => opts.runs = parse_bytes(&arg, args.next())?,
            "--provider" => {
                opts.provider = match args.next().as_deref() {
                    Some("auto") => ProviderChoice::Auto,
                    Some("host") => ProviderChoice::Host,
                    Some("counting") => ProviderChoice::Counting,
                    other => {
                        return Err(format!(
                            "--provider: expected auto, host or counting, got {other:?}"
                        ))
                    }
                }
            }
            flag if flag.starts_with("--") => return Err(format!("unknown option {flag}")),
            _ if path.is_none() => path = Some(PathBuf::from(arg)),
            _ => return Err(format!("unexpected argument {arg}")),
        }
    }
    let path = path.ok_or(
        "usage: replay TRACE [--json] [--expandable | --blocks] [--granule B] [--max-cached B] \
         [--block-size B] [--dedicated-threshold B] [--provider auto|host|counting] [--no-grow] \
         [--runs N]",
    )?;
    let report = replay_file(&path, &opts).map_err(|err| err.to_string())?;
    if json {
        let text = serde_json::to_string_pretty(&report).map_err(|err| err.to_string())?;
        println!("{text}");
    } else {
        println!("{report}");
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}
