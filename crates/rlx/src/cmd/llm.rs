//! The text-generation engines behind `rlx generate` and `rlx bench` on a Llama-family
//! model: the CUDA engine (`rlx-cuda-llm`: weights resident in their stored format, paged
//! KV cache, CUDA-graph decode, batched sequences) where the device is `cuda`, else the graph
//! path through a `Session` (the CPU backend runs the quantized matmuls).

use super::generate::SessionRunner;
use rlx_driver::Device;
use rlx_models::llama::{GenerationStats, Generator, Llama, Sampling};
use rlx_runtime::{backend_for, CompileOptions, Session};

/// The device a Llama model generates on: `auto` is CUDA where it is available, else the CPU
/// (the wgpu backends have no quantized matmul yet).
pub fn llm_device(arg: &str) -> Result<Device, Box<dyn std::error::Error>> {
    if arg == "auto" {
        let cuda = backend_for(Device::Cuda).is_some_and(|b| b.availability().available);
        return Ok(if cuda { Device::Cuda } else { Device::Cpu });
    }
    Ok(arg.parse::<Device>()?)
}

/// One generation engine over a loaded model.
pub enum Engine<'m> {
    /// the graph path through a session (CPU)
    Graph(Box<Generator<'m, SessionRunner>>),
    /// the CUDA engine
    #[cfg(feature = "cuda")]
    Cuda(Box<rlx_cuda_llm::CudaLlm>),
}

/// Settings of the CUDA engine from the command line.
#[derive(Debug, Clone, Copy, Default)]
pub struct EngineSettings {
    /// worker threads (CPU)
    pub threads: Option<usize>,
    /// sequences decoding together (CUDA)
    pub max_sequences: usize,
    /// rows per sequence (CUDA; None: the model's context)
    pub context: Option<usize>,
}

impl<'m> Engine<'m> {
    /// Builds the engine for `device`.
    pub fn new(
        model: &'m Llama,
        device: Device,
        s: EngineSettings,
    ) -> Result<Engine<'m>, Box<dyn std::error::Error>> {
        #[cfg(feature = "cuda")]
        if device == Device::Cuda {
            let options = rlx_cuda_llm::LlmOptions {
                max_sequences: s.max_sequences.max(1),
                context: s.context,
                ..Default::default()
            };
            return Ok(Engine::Cuda(Box::new(rlx_cuda_llm::CudaLlm::new(
                model, options,
            )?)));
        }
        let options = CompileOptions {
            threads: s.threads,
            ..Default::default()
        };
        let runner = SessionRunner::new(Session::new(device)?, options);
        Ok(Engine::Graph(Box::new(Generator::new(model, runner))))
    }

    /// Generates for one prompt; `stop_ids` end it (empty: never stop early).
    pub fn generate(
        &mut self,
        prompt: &[u32],
        max_tokens: usize,
        sampling: &Sampling,
        stop_ids: &[u32],
        on_token: &mut dyn FnMut(u32),
    ) -> Result<GenerationStats, Box<dyn std::error::Error>> {
        match self {
            Engine::Graph(g) => {
                g.stop_ids = stop_ids.to_vec();
                Ok(g.generate(prompt, max_tokens, sampling, on_token)?)
            }
            #[cfg(feature = "cuda")]
            Engine::Cuda(e) => Ok(e.generate(prompt, max_tokens, sampling, stop_ids, on_token)?),
        }
    }

    /// Generates for several prompts: together in one batch on CUDA (sequences leave the
    /// batch as they finish), one after another elsewhere. Returns each prompt's tokens and
    /// the seconds of the whole batch.
    pub fn generate_batch(
        &mut self,
        prompts: &[Vec<u32>],
        max_tokens: usize,
        sampling: &Sampling,
        stop_ids: &[u32],
    ) -> Result<BatchResult, Box<dyn std::error::Error>> {
        let start = std::time::Instant::now();
        match self {
            #[cfg(feature = "cuda")]
            Engine::Cuda(e) => {
                let mut ids = Vec::new();
                let mut tokens: Vec<Vec<u32>> = Vec::new();
                let mut done = Vec::new();
                let result = (|| -> Result<(), Box<dyn std::error::Error>> {
                    for (i, p) in prompts.iter().enumerate() {
                        let s = Sampling {
                            seed: sampling.seed.wrapping_add(i as u64),
                            ..*sampling
                        };
                        let (id, first) = e.add(p, s)?;
                        ids.push(id);
                        tokens.push(vec![first]);
                        done.push(stop_ids.contains(&first) || max_tokens <= 1);
                        if done[i] {
                            e.remove(id);
                        }
                    }
                    while done.iter().any(|d| !d) {
                        let out = e.step()?;
                        for (id, t) in out {
                            let i = ids.iter().position(|x| *x == id).expect("ours");
                            tokens[i].push(t);
                            if stop_ids.contains(&t) || tokens[i].len() >= max_tokens {
                                done[i] = true;
                                e.remove(id);
                            }
                        }
                    }
                    Ok(())
                })();
                for id in &ids {
                    e.remove(*id);
                }
                result?;
                let generated: usize = tokens.iter().map(Vec::len).sum();
                Ok(BatchResult {
                    tokens,
                    seconds: start.elapsed().as_secs_f64(),
                    generated,
                })
            }
            _ => {
                let mut tokens = Vec::new();
                for p in prompts {
                    let st = self.generate(p, max_tokens, sampling, stop_ids, &mut |_| {})?;
                    tokens.push(st.tokens);
                }
                let generated = tokens.iter().map(Vec::len).sum();
                Ok(BatchResult {
                    tokens,
                    seconds: start.elapsed().as_secs_f64(),
                    generated,
                })
            }
        }
    }
}

/// What [`Engine::generate_batch`] returns.
#[derive(Debug, Clone)]
pub struct BatchResult {
    /// tokens generated per prompt
    pub tokens: Vec<Vec<u32>>,
    /// seconds of the whole batch (prefill included)
    pub seconds: f64,
    /// tokens generated in all
    pub generated: usize,
}
