//! Fuzzes the ONNX loader: arbitrary bytes must decode and import to a model or a clean
//! error, never a panic, an abort or unbounded memory.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let opts = rlx_onnx::ImportOptions::default();
    let _ = rlx_onnx::load_bytes(bytes::Bytes::copy_from_slice(data), None, "fuzz", &opts);
});
