//! Fuzzes the GGUF loader: arbitrary bytes must parse, build a tokenizer and a Llama model
//! (and its decode graph) or give a clean error, never a panic, an abort or unbounded memory.
//! CI runs a seeded smoke of the same (`crates/rlx-models/tests/gguf_mutations.rs`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(f) = rlx_gguf::GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    if let Ok(t) = rlx_gguf::ChatTokenizer::from_gguf(&f) {
        let _ = t.encode("Hello, world! 1234");
    }
    if let Ok(model) = rlx_models::llama::Llama::from_gguf(&f) {
        let _ = model.build_graph(rlx_models::llama::Stage::Decode { capacity: 8 });
    }
});
