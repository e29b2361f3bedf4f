//! The GGUF loader's fuzz smoke (run in CI; `fuzz/fuzz_targets/gguf_loader.rs` is the
//! open-ended version under cargo-fuzz): a small GGUF file written by `export_gguf`, damaged
//! in two thousand seeded ways (bytes overwritten, 8-byte counts and lengths made huge,
//! the file cut short), must each load as a model or give an error, never panic; the
//! models that still load must build their decode graph and tokenize a text.

use rlx_gguf::{ChatTokenizer, GgufFile};
use rlx_ir::SplitMix64;
use rlx_models::llama::export::export_gguf;
use rlx_models::llama::sample::RandomLlama;
use rlx_models::llama::{Llama, Stage};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Loads `bytes` as far as it goes; Err(panic message) when anything panics.
fn load(bytes: Vec<u8>) -> Result<&'static str, String> {
    catch_unwind(AssertUnwindSafe(move || {
        let Ok(f) = GgufFile::from_bytes(bytes) else {
            return "file refused";
        };
        let tokens = ChatTokenizer::from_gguf(&f).map(|t| t.encode("Hello, world! 1234"));
        let Ok(model) = Llama::from_gguf(&f) else {
            return "model refused";
        };
        let _ = tokens;
        match model.build_graph(Stage::Decode {
            capacity: 8,
            batch: 1,
        }) {
            Ok(_) => "loaded",
            Err(_) => "graph refused",
        }
    }))
    .map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}

/// Damaged files per run.
const CASES: usize = 2000;

#[test]
fn damaged_gguf_files_load_or_give_errors() {
    let dir = std::env::temp_dir().join(format!("rlx-gguf-mutations-{}", std::process::id()));
    RandomLlama::default().write(&dir).unwrap();
    let source = Llama::open(&dir).unwrap();
    let path = dir.join("model.gguf");
    export_gguf(
        &source,
        &dir,
        &path,
        rlx_gguf::QuantFormat::Q8_0,
        1,
        &mut |_| {},
    )
    .unwrap();
    let good = std::fs::read(&path).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(load(good.clone()), Ok("loaded"), "the undamaged file");
    // the parser's work is in the header, metadata and tensor table: most edits land there
    let head = good.len().min(64 * 1024);
    let mut rng = SplitMix64(0x6775_6666);
    let mut pick = |n: usize| (rng.next_u64() % n as u64) as usize;
    let mut failures = Vec::new();
    let mut outcomes = std::collections::BTreeMap::new();
    for case in 0..CASES {
        let mut b = good.clone();
        let what = match case % 4 {
            0 => {
                let at = pick(head);
                b[at] = pick(256) as u8;
                format!("byte {at} overwritten")
            }
            1 => {
                let at = pick(head - 8);
                let huge = [u64::MAX, 1 << 40, 1 << 31, u32::MAX as u64][pick(4)];
                b[at..at + 8].copy_from_slice(&huge.to_le_bytes());
                format!("u64 {huge} at {at}")
            }
            2 => {
                let len = pick(good.len());
                b.truncate(len);
                format!("cut at {len}")
            }
            _ => {
                for _ in 0..8 {
                    let at = pick(good.len());
                    b[at] ^= 1 << pick(8);
                }
                "8 bits flipped anywhere".to_string()
            }
        };
        match load(b) {
            Ok(o) => *outcomes.entry(o).or_insert(0) += 1,
            Err(msg) => failures.push(format!("case {case} ({what}): panicked: {msg}")),
        }
    }
    println!("outcomes of {CASES} damaged files: {outcomes:?}");
    assert!(
        failures.is_empty(),
        "{} of {CASES} damaged files panicked: {:#?}",
        failures.len(),
        &failures[..failures.len().min(8)]
    );
}
