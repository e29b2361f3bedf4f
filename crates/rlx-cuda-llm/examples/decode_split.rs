//! Diagnosis, not a headline: batch-1 decode speed of a model folder or GGUF file with the
//! split-k single-row products (`LlmOptions::split_k`) off (0, the default), on for k >= 1024
//! and on for every product (1), in one process.
//!
//! `cargo run --release -p rlx-cuda-llm --example decode_split -- MODEL [TOKENS]`

use rlx_cuda_llm::{CudaLlm, LlmOptions};
use rlx_models::llama::{Llama, Sampling};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: decode_split MODEL [TOKENS]");
        std::process::exit(2);
    };
    let tokens: usize = args.get(2).and_then(|t| t.parse().ok()).unwrap_or(128);
    let model = match Llama::open(std::path::Path::new(path)) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    let prompt: Vec<u32> = (1..17).collect();
    for split_k in [0, 1024, 1, 0, 1024, 1] {
        let options = LlmOptions {
            max_sequences: 1,
            context: Some(prompt.len() + tokens + 1),
            split_k,
            ..Default::default()
        };
        let run = || -> Result<f64, rlx_cuda_llm::LlmError> {
            let mut llm = CudaLlm::new(&model, options)?;
            let s = Sampling::default();
            llm.generate(&prompt, 8, &s, &[], |_| {})?;
            let st = llm.generate(&prompt, tokens, &s, &[], |_| {})?;
            let mut steps = st.step_s.clone();
            steps.sort_by(f64::total_cmp);
            Ok(1.0 / steps[steps.len() / 2])
        };
        match run() {
            Ok(tps) => println!("split_k {split_k:5}: decode {tps:8.1} tok/s (median step)"),
            Err(e) => println!("split_k {split_k:5}: error: {e}"),
        }
    }
}
