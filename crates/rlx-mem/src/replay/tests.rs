use super::*;
use std::path::PathBuf;

/// A transformer-like synthetic trace: per request, a growing cache re-allocated one step
/// longer each step beside short-lived activations of random sizes.
fn synthetic_trace(seed: u64) -> String {
    let mut x = seed;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut out = String::new();
    let mut id = 0u64;
    for _request in 0..6 {
        let s = next() % 900 + 100;
        let mut cache = None;
        for step in 0..40u64 {
            let act = id;
            out.push_str(&format!(
                "{{\"op\":\"alloc\",\"id\":{act},\"bytes\":{},\"tag\":\"act\"}}\n",
                s * 4096 + next() % 5000
            ));
            let grown = id + 1;
            out.push_str(&format!(
                "{{\"op\":\"alloc\",\"id\":{grown},\"bytes\":{}}}\n",
                (s + step) * 1024
            ));
            if let Some(old) = cache.replace(grown) {
                out.push_str(&format!("{{\"op\":\"free\",\"id\":{old}}}\n"));
            }
            out.push_str(&format!("{{\"op\":\"free\",\"id\":{act}}}\n"));
            id += 2;
        }
        if let Some(old) = cache {
            out.push_str(&format!("{{\"op\":\"free\",\"id\":{old}}}\n"));
        }
    }
    out
}

fn temp_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rlx-mem-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn synthetic_trace_replays_over_both_providers() {
    let path = temp_file("synthetic.jsonl", &synthetic_trace(0x77aa_1234_5678_9abc));
    for provider in [
        ProviderChoice::Counting,
        ProviderChoice::Host,
        ProviderChoice::Auto,
    ] {
        let opts = ReplayOptions {
            provider,
            ..ReplayOptions::default()
        };
        let report = replay_file(&path, &opts).unwrap();
        assert_eq!(report.events, 6 * 40 * 4);
        assert!(
            report.fragmentation >= 1.0 && report.fragmentation < 2.0,
            "{report}"
        );
        assert!(report.peak_reserved_bytes >= report.peak_live_bytes);
        assert!(report.provider_allocs >= 1);
        assert!(report.ns_per_event > 0.0);
        assert!(report.speedup_vs_system.is_some_and(|r| r > 0.0));
        assert_eq!(report.runs, 3);
        assert_eq!(report.mode, "expandable", "the default mode");
        // Online pieces over the provider's 2 MiB granule, whatever the trace's peak.
        assert_eq!(report.granule, Some(2 << 20));
        assert_eq!(
            report.granule_policy,
            Some(crate::GranulePolicy::online().to_string())
        );
        let created: u64 = report.granules_created.iter().map(|&(_, n)| n).sum();
        assert_eq!(created, report.physical_creates);
        assert!(report
            .granules_created
            .iter()
            .all(|&(size, _)| size >= 2 << 20 && size.is_power_of_two()));
        assert!(report.peak_reserved_bytes >= 2 << 20);
        let text = report.to_string();
        assert!(
            text.contains("fragmentation") && text.contains("ns/event"),
            "{text}"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert!(json["fragmentation"].as_f64().is_some());
        if provider == ProviderChoice::Counting {
            assert_eq!(report.provider, "counting");
        }
    }
    // Options reach the allocator: no growth and a small threshold send large requests to
    // dedicated blocks.
    let opts = ReplayOptions {
        provider: ProviderChoice::Counting,
        block_size: Some(2 << 20),
        dedicated_threshold: Some(1 << 20),
        grow_in_place: false,
        runs: 1,
        compare_system: false,
        // Block options select block mode by themselves.
        ..ReplayOptions::default()
    };
    let report = replay_file(&path, &opts).unwrap();
    assert_eq!(report.mode, "blocks");
    assert_eq!(report.dedicated_threshold, Some(1 << 20));
    assert_eq!(report.block_size, 2 << 20);
    assert_eq!(report.provider_grows, 0);
    assert_eq!((report.map_calls, report.physical_creates), (0, 0));
    assert!(report.system_ns_per_event.is_none());
    // Expandable mode with a chosen granule: reserved is whole granules, every one created.
    let opts = ReplayOptions {
        provider: ProviderChoice::Counting,
        granule: Some(1 << 20),
        runs: 1,
        compare_system: false,
        ..ReplayOptions::default()
    };
    let report = replay_file(&path, &opts).unwrap();
    assert_eq!(
        (report.mode.as_str(), report.granule),
        ("expandable", Some(1 << 20))
    );
    assert_eq!(report.peak_reserved_bytes % (1 << 20), 0);
    assert!(report.peak_reserved_bytes >= report.peak_live_bytes);
    assert!(report.peak_mapped_bytes <= report.peak_reserved_bytes);
    assert_eq!(
        report.provider_allocs,
        report.provider_block_allocs + report.physical_creates
    );
    assert!(report.map_calls >= 1 && report.granules_mapped >= report.physical_creates);
    assert_eq!(
        report.granules_created,
        vec![(1 << 20, report.physical_creates)]
    );
    let text = report.to_string();
    assert!(
        text.contains("expandable segment") && text.contains("map calls"),
        "{text}"
    );
}

#[test]
fn malformed_trace_is_an_error_with_the_line() {
    let mut text = synthetic_trace(5);
    text.push_str("{\"op\":\"free\",\"id\":0}\n");
    let line = text.lines().count();
    let path = temp_file("double-free.jsonl", &text);
    let err = replay_file(&path, &ReplayOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!(":{line}: double free of id 0")),
        "{err}"
    );
}

#[test]
fn system_allocator_replay_times_the_same_events() {
    let trace = crate::trace::parse_trace(synthetic_trace(11).as_bytes(), "synthetic").unwrap();
    let ns = replay_system(&trace, 3);
    assert!(ns > 0.0 && ns.is_finite());
    assert_eq!(default_block_size(0), 2 << 20);
    assert_eq!(default_block_size(3 << 30), 128 << 20);
    assert_eq!(default_block_size(1 << 40), 1 << 30);
    assert_eq!(default_granule(0), 2 << 20);
    assert_eq!(default_granule(813 << 20), 16 << 20);
    assert_eq!(default_granule(2620 << 20), 32 << 20);
    assert_eq!(default_granule(1 << 45), 1 << 30);
}

fn shared_trace(name: &str) -> Option<PathBuf> {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    [
        here.join("../../../shared/traces"),
        PathBuf::from("/work/shared/traces"),
    ]
    .into_iter()
    .map(|dir| dir.join(name))
    .find(|p| p.exists())
}

/// The shared transformer traces, when present: the default (expandable, online pieces) mode
/// meets the fragmentation and provider-allocation targets on both; block mode keeps its old
/// bounds.
#[test]
fn shared_traces_meet_targets() {
    for (name, blocks_bound) in [
        ("llama8b-seqvar.jsonl.gz", 1.05),
        // Block mode misses the 1.05 target on this one (see bench/mem.md).
        ("llama8b-flash-seqvar.jsonl.gz", 1.08),
    ] {
        let Some(path) = shared_trace(name) else {
            println!("SKIPPED: shared trace {name} not found");
            continue;
        };
        let trace = crate::trace::read_trace(&path).unwrap();
        for expandable in [true, false] {
            let opts = ReplayOptions {
                provider: ProviderChoice::Counting,
                runs: 1,
                compare_system: false,
                expandable,
                ..ReplayOptions::default()
            };
            let report = replay_trace(&trace, &opts).unwrap();
            println!("{report}");
            if expandable {
                // Online: nothing about the trace is known; pieces of several sizes.
                assert!(report
                    .granule_policy
                    .as_deref()
                    .is_some_and(|p| p.starts_with("online")));
                assert!(report.granules_created.len() >= 2, "{report}");
            }
            let bound = if expandable { 1.05 } else { blocks_bound };
            assert!(report.fragmentation <= bound, "{report}");
            assert!(report.fragmentation >= 1.0, "{report}");
            assert!(report.provider_allocs <= 100, "{report}");
        }
    }
}
