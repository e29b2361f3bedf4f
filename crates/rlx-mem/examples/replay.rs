//! Replays an allocation trace through the rlx-mem sub-allocator and prints the report.
//!
//! `replay TRACE|gen:NAME [--json] [--expandable | --blocks] [--granule B|online|proportional|peak]
//!  [--granule-divisor K] [--granule-min B] [--granule-max B] [--peak-divisor K] [--max-cached B]
//!  [--headroom-permille N] [--block-size B] [--dedicated-threshold B]
//!  [--provider auto|host|counting] [--no-grow] [--runs N]`
//!
//! `--expandable` (the default) replays through one expandable segment (physical pieces mapped
//! on demand, at most `--max-cached` bytes of free pieces kept mapped). Pieces are sized online
//! by default ([`rlx_mem::GranulePolicy::online`]: fitted to requests, target held /
//! `--granule-divisor` of at least `--granule-min`, pieces up to the peak in use /
//! `--peak-divisor` and `--granule-max`: 20, 4 MiB, 6, 1 GiB); `--granule proportional` is the
//! previous default (held / 12, 8 MiB..1 GiB, the same tuning flags but `--peak-divisor`),
//! `--granule B` fixes them at B bytes, `--granule peak` uses the trace's peak / 100 (an
//! oracle). `--blocks` replays through
//! growable blocks (`--no-grow`: fixed blocks plus dedicated ones). `gen:NAME` replays a
//! generated trace ([`rlx_mem::TraceSpec::preset`]: `gen:0.5b-long-decode`, `gen:8b`,
//! `gen:8b-mixed-batch`, `gen:13b`) instead of a file.

use std::path::PathBuf;
use std::process::ExitCode;

use rlx_mem::{replay_source, GranulePolicy, GranuleRule, ProviderChoice, ReplayOptions};

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
    let (mut divisor, mut min_bytes, mut max_bytes, mut peak_divisor) = (None, None, None, None);
    let mut proportional = false;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--json" => json = true,
            "--no-grow" => {
                opts.grow_in_place = false;
                opts.expandable = false;
            }
            "--expandable" => opts.expandable = true,
            "--blocks" => opts.expandable = false,
            "--granule" => match args.next() {
                Some(v) if v == "online" => {
                    opts.granule = None;
                    opts.granule_rule = GranuleRule::Online;
                }
                Some(v) if v == "proportional" => {
                    opts.granule = None;
                    opts.granule_rule = GranuleRule::Online;
                    proportional = true;
                }
                Some(v) if v == "peak" => {
                    opts.granule = None;
                    opts.granule_rule = GranuleRule::Peak;
                }
                v => opts.granule = Some(parse_bytes(&arg, v)?),
            },
            "--granule-divisor" => divisor = Some(parse_bytes(&arg, args.next())?.max(1)),
            "--granule-min" => min_bytes = Some(parse_bytes(&arg, args.next())?),
            "--granule-max" => max_bytes = Some(parse_bytes(&arg, args.next())?),
            "--peak-divisor" => peak_divisor = Some(parse_bytes(&arg, args.next())?.max(1)),
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
    if opts.granule_rule == GranuleRule::Online {
        let base = if proportional {
            GranulePolicy::proportional()
        } else {
            GranulePolicy::online()
        };
        opts.granule_rule = GranuleRule::Policy(match base {
            GranulePolicy::Proportional {
                divisor: d,
                min_bytes: lo,
                max_bytes: hi,
            } => GranulePolicy::Proportional {
                divisor: divisor.unwrap_or(d),
                min_bytes: min_bytes.unwrap_or(lo),
                max_bytes: max_bytes.unwrap_or(hi),
            },
            GranulePolicy::Spanning {
                divisor: d,
                min_bytes: lo,
                max_bytes: hi,
                peak_divisor: p,
            } => GranulePolicy::Spanning {
                divisor: divisor.unwrap_or(d),
                min_bytes: min_bytes.unwrap_or(lo),
                max_bytes: max_bytes.unwrap_or(hi),
                peak_divisor: peak_divisor.unwrap_or(p),
            },
            other => other,
        });
    }
    let path = path.ok_or(
        "usage: replay TRACE|gen:NAME [--json] [--expandable | --blocks] [--granule B|online|proportional|peak] \
         [--granule-divisor K] [--granule-min B] [--granule-max B] [--peak-divisor K] \
         [--max-cached B] \
         [--headroom-permille N] [--block-size B] [--dedicated-threshold B] \
         [--provider auto|host|counting] [--no-grow] [--runs N]",
    )?;
    let report = replay_source(&path, &opts).map_err(|err| err.to_string())?;
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
