//! Replays every generated trace ([`rlx_mem::TraceSpec::presets`]) and the trace files given
//! through the expandable segment over the counting provider, one table row per trace.
//!
//! `policy_scan [--proportional] [--seeds N] [TRACE...]` (`--proportional`: the previous online
//! policy; `--seeds N`: instead, each preset with seeds 0..N, one line per preset of
//! `peak:fragmentation/provider allocations`).

use std::path::Path;

use rlx_mem::{
    human_bytes, read_trace, replay_trace, GranulePolicy, GranuleRule, ProviderChoice,
    ReplayOptions, TraceSpec,
};

fn main() {
    let mut traces: Vec<_> = TraceSpec::presets()
        .iter()
        .map(TraceSpec::generate)
        .collect();
    let mut policy = GranulePolicy::online();
    let mut seeds = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--proportional" {
            policy = GranulePolicy::proportional();
            continue;
        }
        if arg == "--seeds" {
            seeds = args.next().and_then(|n| n.parse::<u64>().ok());
            continue;
        }
        match read_trace(Path::new(&arg)) {
            Ok(trace) => traces.push(trace),
            Err(err) => eprintln!("error: {err}"),
        }
    }
    let opts = ReplayOptions {
        provider: ProviderChoice::Counting,
        runs: 1,
        compare_system: false,
        granule_rule: GranuleRule::Policy(policy),
        ..ReplayOptions::default()
    };
    println!("policy: {policy}");
    if let Some(seeds) = seeds {
        for spec in TraceSpec::presets() {
            let mut line = spec.name.clone();
            for seed in 0..seeds {
                let trace = TraceSpec {
                    seed,
                    ..spec.clone()
                }
                .generate();
                match replay_trace(&trace, &opts) {
                    Ok(r) => {
                        line += &format!(
                            " {}:{:.3}/{}",
                            human_bytes(r.peak_live_bytes).replace(' ', ""),
                            r.fragmentation,
                            r.provider_allocs
                        )
                    }
                    Err(err) => line += &format!(" error: {err}"),
                }
            }
            println!("{line}");
        }
        return;
    }
    println!(
        "| trace | events | peak live | fragmentation | provider allocations | pieces created (MiB) \
         | map / unmap calls |"
    );
    println!("|---|---|---|---|---|---|---|");
    for trace in &traces {
        let r = match replay_trace(trace, &opts) {
            Ok(r) => r,
            Err(err) => {
                eprintln!("error: {}: {err}", trace.source);
                continue;
            }
        };
        let created: Vec<String> = r
            .granules_created
            .iter()
            .map(|&(size, n)| format!("{n}×{}", size >> 20))
            .collect();
        let name = Path::new(&r.trace)
            .file_name()
            .map_or(r.trace.clone(), |n| n.to_string_lossy().into());
        println!(
            "| {} | {} | {} | {:.3} | {} | {} | {} / {} |",
            name.trim_end_matches(".jsonl.gz"),
            r.events,
            human_bytes(r.peak_live_bytes),
            r.fragmentation,
            r.provider_allocs,
            created.join(", "),
            r.map_calls,
            r.unmap_calls,
        );
    }
}
