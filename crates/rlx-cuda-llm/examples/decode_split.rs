//! Diagnosis, not a headline: batch-1 decode speed of a model folder or GGUF file with the
//! split-k single-row products (`LlmOptions::split_k`) off (0), on for k >= 1024 and on for
//! every product (1, the default), and (block formats) with int8 activations
//! (`LlmOptions::int8_activations`) against f32 ones (the default), in one process, twice.
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
    let settings = [(0, false), (1024, false), (1, false), (1, true)];
    for (split_k, int8) in settings.into_iter().chain(settings) {
        let options = LlmOptions {
            max_sequences: 1,
            context: Some(prompt.len() + tokens + 1),
            split_k,
            int8_activations: int8,
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
            Ok(tps) => {
                println!("split_k {split_k:5} int8 {int8:5}: decode {tps:8.1} tok/s (median step)")
            }
            Err(e) => println!("split_k {split_k:5} int8 {int8:5}: error: {e}"),
        }
    }
    // where a decode step's time goes: every kernel timed between two events (no graphs,
    // no launch overlap, so the sum exceeds a graph step)
    // (products named with their n x k), with f32 and with int8 activations
    let profile = |int8: bool| -> Result<(), rlx_cuda_llm::LlmError> {
        let options = LlmOptions {
            max_sequences: 1,
            context: Some(prompt.len() + tokens + 1),
            profile_kernels: true,
            int8_activations: int8,
            ..Default::default()
        };
        let mut llm = CudaLlm::new(&model, options)?;
        let s = Sampling::default();
        llm.generate(&prompt, 8, &s, &[], |_| {})?;
        llm.kernel_profile()?;
        let steps = 32;
        llm.generate(&[prompt[0]], steps, &s, &[], |_| {})?;
        let k = llm.kernel_profile()?;
        let total: f64 = k.iter().map(|k| k.ms).sum();
        println!(
            "kernel profile (int8 {int8}) over {steps} steps: {:.1} us a step",
            total * 1e3 / steps as f64
        );
        for k in k.iter().take(24) {
            println!(
                "  {:32} {:6} calls {:9.1} us a step {:7.2} us a call",
                k.name,
                k.calls,
                k.ms * 1e3 / steps as f64,
                k.ms * 1e3 / k.calls as f64
            );
        }
        Ok(())
    };
    for int8 in [false, true] {
        if let Err(e) = profile(int8) {
            println!("kernel profile (int8 {int8}): error: {e}");
        }
    }
}
