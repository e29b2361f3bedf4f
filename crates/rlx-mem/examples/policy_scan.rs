//! Replays every generated trace ([`rlx_mem::TraceSpec::presets`]) and the trace files given
//! through the expandable segment over the counting provider, one table row per trace.
//!
//! `policy_scan [--proportional] [--seeds N [--peak-min K | --peak-granule]] [TRACE...]`
//! (`--proportional`: the previous online policy; `--seeds N`: instead, each preset with seeds
//! 0..N, one line per preset of `peak:fragmentation/provider allocations`, then its maxima and
//! how many runs miss 1.05 fragmentation or 100 provider allocations). Two oracles that know
//! each trace's peak, for comparison with the online policy: `--peak-min K`, the online policy
//! with its smallest piece raised to the peak / K (a power of two), and `--peak-granule`, one
//! fixed piece of the peak / 100 (`rlx_mem::GranuleRule::Peak`).

use std::path::Path;

use rlx_mem::{
    human_bytes, read_trace, replay_trace, GranulePolicy, GranuleRule, ProviderChoice,
    ReplayOptions, TraceSpec,
};

/// Which oracle, if any, replaces the policy in `--seeds` mode.
#[derive(Clone, Copy)]
enum Oracle {
    None,
    PeakMin(usize),
    PeakGranule,
}

fn main() {
    let mut traces: Vec<_> = TraceSpec::presets()
        .iter()
        .map(TraceSpec::generate)
        .collect();
    let mut policy = GranulePolicy::online();
    let mut seeds = None;
    let mut oracle = Oracle::None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--proportional" {
            policy = GranulePolicy::proportional();
            continue;
        }
        if arg == "--peak-min" {
            oracle = args
                .next()
                .and_then(|k| k.parse::<usize>().ok())
                .map_or(Oracle::None, |k| Oracle::PeakMin(k.max(1)));
            continue;
        }
        if arg == "--peak-granule" {
            oracle = Oracle::PeakGranule;
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
        let mut misses = 0;
        for spec in TraceSpec::presets() {
            let mut line = spec.name.clone();
            let (mut worst_frag, mut worst_allocs) = (0f64, 0u64);
            for seed in 0..seeds {
                let trace = TraceSpec {
                    seed,
                    ..spec.clone()
                }
                .generate();
                let peak = trace.peak_live_bytes;
                let rule = match (oracle, policy) {
                    (Oracle::None, _) => GranuleRule::Policy(policy),
                    (Oracle::PeakGranule, _) => GranuleRule::Peak,
                    (
                        Oracle::PeakMin(k),
                        GranulePolicy::Spanning {
                            divisor,
                            min_bytes,
                            max_bytes,
                            peak_divisor,
                        },
                    ) => GranuleRule::Policy(GranulePolicy::Spanning {
                        divisor,
                        min_bytes: min_bytes.max(1 << (peak / k).max(1).ilog2()),
                        max_bytes,
                        peak_divisor,
                    }),
                    // The oracle of the peak-based granule where the policy has no minimum piece.
                    (Oracle::PeakMin(_), _) => GranuleRule::Peak,
                };
                let opts = ReplayOptions {
                    granule_rule: rule,
                    ..opts.clone()
                };
                match replay_trace(&trace, &opts) {
                    Ok(r) => {
                        worst_frag = worst_frag.max(r.fragmentation);
                        worst_allocs = worst_allocs.max(r.provider_allocs);
                        misses += usize::from(r.fragmentation > 1.05 || r.provider_allocs > 100);
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
            println!("{line} | max {worst_frag:.3}/{worst_allocs}");
        }
        println!("runs over 1.05 fragmentation or 100 provider allocations: {misses}");
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
