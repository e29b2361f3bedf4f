//! `rlx bench MODEL`: compile once (timed apart), warm up, then time runs; median and p90.
//! MODEL is an ONNX file, a model folder (BERT family; `hf:<name>` downloads one) or a
//! GGUF file. `--profile` adds the device time per kernel, summed per kind, on every device
//! that can time its kernels; `--trace FILE.json` writes it as a Chrome / Perfetto trace.

use super::model::device;
use super::{npy, CmdResult};
use rlx_ir::{Dim, Graph, Tensor, TensorType};
use rlx_models::{BertModel, Family};
use rlx_runtime::{CompileOptions, RunProfile, Session};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// Arguments of `rlx bench`.
#[derive(clap::Args)]
pub struct Args {
    /// An ONNX file, a model folder (or `hf:<owner>/<name>`), or a GGUF file.
    model: String,
    /// Device name, or `auto` for the fastest available.
    #[arg(long, default_value = "auto")]
    device: String,
    /// An input: `NAME=FILE.npy` or `NAME=random` (repeatable). Model folders fill the
    /// inputs left out (BERT: random `input_ids`, mask of ones, positions `0..seq`).
    #[arg(long = "input", value_name = "NAME=FILE.npy|NAME=random")]
    inputs: Vec<String>,
    /// Sizes of symbolic dims for random inputs, e.g. `--dim batch=8 --dim seq=128`
    /// (model folders default to batch=1, seq=128). ONNX models take the sizes of their
    /// `.npy` input files without it.
    #[arg(long = "dim", value_name = "SYMBOL=N", value_delimiter = ',')]
    dims: Vec<String>,
    /// Untimed runs before timing.
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Timed runs.
    #[arg(long, default_value_t = 20)]
    iters: usize,
    /// Print one JSON object: model, device, compile_ms, median_ms, p90_ms, iters.
    #[arg(long)]
    json: bool,
    /// Also time every kernel on the device's clock (CPU wall clock, CUDA events, GPU
    /// timestamps) and print the device time per kernel kind and the slowest kernels.
    #[arg(long)]
    profile: bool,
    /// Write a Chrome / Perfetto trace of one profiled run (kernels back to back, with
    /// their kinds and source ops) to this JSON file; implies `--profile`.
    #[arg(long, value_name = "FILE.json")]
    trace: Option<std::path::PathBuf>,
    /// Llama models: prompt tokens per sequence (random ids).
    #[arg(long, default_value_t = 512)]
    prompt_tokens: usize,
    /// Llama models: tokens generated per sequence (the first comes from the prefill).
    #[arg(long, default_value_t = 128)]
    gen_tokens: usize,
    /// Llama models: sequences decoding together (CUDA).
    #[arg(long, default_value_t = 1)]
    batch: usize,
    #[command(flatten)]
    compile: super::run::CompileFlags,
}

/// A model ready to bench: graph, weights, and the inputs of one run.
struct Prepared {
    graph: Graph,
    params: Vec<(String, Arc<Tensor>)>,
    inputs: HashMap<String, Tensor>,
}

/// Benchmarks MODEL.
pub fn run(args: Args) -> CmdResult {
    let device = device(&args.device)?;
    let dims = super::run::parse_dims(&args.dims)?;
    let mut files: HashMap<String, Tensor> = HashMap::new();
    let mut random: Vec<String> = Vec::new();
    for a in &args.inputs {
        let (name, value) = a
            .split_once('=')
            .ok_or_else(|| format!("--input `{a}`: expected NAME=FILE.npy or NAME=random"))?;
        if value == "random" {
            random.push(name.to_string());
        } else {
            let t = npy::read(Path::new(value)).map_err(|e| format!("--input {name}: {e}"))?;
            files.insert(name.to_string(), t);
        }
    }

    let t_load = Instant::now();
    let path = args.model.as_str();
    let is_llama_dir = Path::new(path).is_dir()
        && rlx_models::family(Path::new(path)).ok() == Some(rlx_models::Family::Llama);
    let prepared = if path.ends_with(".gguf") || is_llama_dir {
        return bench_llama(path, &args, device);
    } else if path.ends_with(".onnx") {
        match prepare_onnx(path, files, &random, &dims)? {
            Onnx::Graph(p) => p,
            Onnx::Staged(inputs) => {
                if args.profile || args.trace.is_some() {
                    return Err(format!(
                        "--profile: {path} runs in stages (its shapes depend on values it \
                         computes), which cannot be profiled as one graph yet"
                    )
                    .into());
                }
                return super::bench_staged::bench(super::bench_staged::StagedBench {
                    path,
                    device,
                    inputs,
                    warmup: args.warmup,
                    iters: args.iters,
                    json: args.json,
                    options: args.compile.options(),
                    load_ms: t_load.elapsed().as_secs_f64() * 1e3,
                });
            }
        }
    } else {
        prepare_folder(path, files, &random, &dims)?
    };
    let load_ms = t_load.elapsed().as_secs_f64() * 1e3;

    let Prepared {
        graph,
        params,
        inputs,
    } = prepared;
    let bindings = bind_symbols(&graph, &inputs)?;
    let session = Session::new(device)?;
    for (name, t) in params {
        session.params().set(&name, t);
    }
    let t_compile = Instant::now();
    let options = CompileOptions {
        bindings,
        ..args.compile.options()
    };
    let compiled = session.compile(&graph, options)?;
    let compile_ms = t_compile.elapsed().as_secs_f64() * 1e3;

    for _ in 0..args.warmup {
        compiled.run(&inputs)?;
    }
    let iters = args.iters.max(1);
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        compiled.run(&inputs)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    let median_ms = quantile(&times, 0.5);
    let p90_ms = quantile(&times, 0.9);
    // (a validating run checks host results; the bound path is timed without it)
    let bound = if args.compile.validate {
        None
    } else {
        time_bound(&session, &compiled, &inputs, args.warmup, iters)?
    };
    let shapes: BTreeMap<&String, &[usize]> = inputs.iter().map(|(n, t)| (n, t.shape())).collect();

    let profile = if args.profile || args.trace.is_some() {
        let p = compiled
            .profile(&inputs, iters)?
            .ok_or_else(|| format!("--profile: {device} cannot time its kernels"))?;
        if let Some(path) = &args.trace {
            std::fs::write(
                path,
                p.chrome_trace(&format!("rlx {} on {device}", args.model)),
            )
            .map_err(|e| format!("--trace {}: {e}", path.display()))?;
        }
        Some(Profile::from(&p))
    } else {
        None
    };
    if args.json {
        let mut v = serde_json::json!({
            "model": args.model,
            "device": device.name(),
            "compile_ms": compile_ms,
            "median_ms": median_ms,
            "p90_ms": p90_ms,
            "iters": iters,
            "warmup": args.warmup,
            "load_ms": load_ms,
            "min_ms": times[0],
            "inputs": shapes,
            "precision": args.compile.precision,
            "approximate_gelu": args.compile.approximate_gelu,
        });
        if let Some(b) = &bound {
            v["bound_median_ms"] = quantile(b, 0.5).into();
            v["bound_p90_ms"] = quantile(b, 0.9).into();
        }
        if let Some(p) = &profile {
            v["profile"] = p.to_json();
        }
        v["arena_bytes"] = compiled
            .first_variant()
            .map_or(0, |v| v.executable.arena_bytes())
            .into();
        if let Some(m) = compiled.memory() {
            v["memory"] = memory_json(&m);
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("model     {}", args.model);
        println!("device    {device}");
        let shapes: Vec<String> = shapes.iter().map(|(n, s)| format!("{n}{s:?}")).collect();
        println!("inputs    {}", shapes.join(" "));
        println!("load      {load_ms:.1} ms");
        println!("compile   {compile_ms:.1} ms");
        args.compile.print();
        println!(
            "run       median {median_ms:.3} ms, p90 {p90_ms:.3} ms, min {:.3} ms ({iters} runs after {} warm-up)",
            times[0], args.warmup
        );
        if let Some(b) = &bound {
            println!(
                "bound     median {:.3} ms, p90 {:.3} ms (inputs and outputs in device buffers, as IoBinding)",
                quantile(b, 0.5),
                quantile(b, 0.9)
            );
        }
        if let Some(m) = compiled.memory() {
            let mb = |b: usize| b as f64 / 1e6;
            println!(
                "memory    device peak {:.1} MB in use, {:.1} MB reserved ({} provider allocations)",
                mb(m.peak_bytes_in_use),
                mb(m.peak_bytes_reserved),
                m.provider_allocs
            );
        }
        if let Some(p) = &profile {
            p.print();
        }
    }
    Ok(())
}

/// Sorted run times with the inputs uploaded once into device buffers and the outputs left
/// in device buffers (`CompiledGraph::run_with`, what ONNX Runtime's IoBinding users run):
/// the device's compute plus one launch and synchronization, no host copies. `None` on a
/// device without buffers of its own (the CPU).
fn time_bound(
    session: &Session,
    compiled: &rlx_runtime::CompiledGraph,
    inputs: &HashMap<String, Tensor>,
    warmup: usize,
    iters: usize,
) -> Result<Option<Vec<f64>>, Box<dyn std::error::Error>> {
    if session.device() == rlx_driver::Device::Cpu {
        return Ok(None);
    }
    let mut binding = rlx_runtime::Binding::new();
    for (name, t) in inputs {
        match session.to_device(t) {
            Ok(b) => binding.bind_input_buffer(name, b),
            Err(_) => return Ok(None),
        }
    }
    for _ in 0..warmup.max(1) {
        compiled.run_with(&mut binding)?;
    }
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        compiled.run_with(&mut binding)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok(Some(times))
}

/// The device pool's statistics as `--json` reports them (`rlx bench`, `rlx run`).
pub fn memory_json(m: &rlx_mem::Stats) -> serde_json::Value {
    serde_json::json!({
        "bytes_in_use": m.bytes_in_use,
        "peak_bytes_in_use": m.peak_bytes_in_use,
        "bytes_reserved": m.bytes_reserved,
        "peak_bytes_reserved": m.peak_bytes_reserved,
        "provider_allocs": m.provider_allocs,
        "fragmentation": m.fragmentation,
    })
}

/// The `q` quantile of sorted times (nearest rank).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// Llama-family models (GGUF, or a Hugging Face folder), as llama-bench measures them:
/// `--batch` sequences of `--prompt-tokens` random prompt tokens are prefilled (timed per
/// sequence), then decode `--gen-tokens` tokens together (timed per step, after `--warmup`
/// untimed steps of a warm-up batch that also compiles and captures what the timed one
/// replays). Prefill and decode tokens/s are reported apart.
fn bench_llama(path: &str, args: &Args, device: rlx_driver::Device) -> CmdResult {
    use rlx_llm::{Engine, EngineSettings, Llama, Sampling};
    let device = if args.device == "auto" {
        rlx_llm::llm_device("auto")?
    } else {
        device
    };
    let t_load = Instant::now();
    let mut model = Llama::open(Path::new(path))?;
    let load_ms = t_load.elapsed().as_secs_f64() * 1e3;
    let (n_prompt, n_gen, batch) = (
        args.prompt_tokens.max(1),
        args.gen_tokens.max(2),
        args.batch.max(1),
    );
    let vocab = model.config.vocab as u64;
    let mut rng = rlx_ir::SplitMix64(42);
    let prompts: Vec<Vec<u32>> = (0..batch)
        .map(|_| {
            (0..n_prompt)
                .map(|_| (rng.next_u64() % vocab) as u32)
                .collect()
        })
        .collect();
    let t_compile = Instant::now();
    let context = n_prompt + n_gen + args.warmup + 1;
    // a Phi-3 longrope model benched past its original context takes its long factors
    model.extend_context(context);
    let settings = EngineSettings {
        threads: None,
        max_sequences: batch,
        context: Some(context),
        exact_quant: args.compile.exact_quant,
    };
    let mut engine = Engine::new(&model, device, settings)?;
    let greedy = Sampling::default();
    // Every sequence is promised the same rows (prompt + tokens), so the graph path sizes
    // one decode graph for all of them and the warm-up compiles it.
    let rows = n_prompt + n_gen;
    // warm-up: the first prompt whole (compiles its prefill), the others short; steps that
    // compile and capture what the timed batch replays
    let mut ids = Vec::new();
    for (i, p) in prompts.iter().enumerate() {
        let p = if i == 0 { &p[..] } else { &p[..p.len().min(8)] };
        ids.push(engine.add(p, rows - p.len(), greedy)?.0);
    }
    for _ in 0..args.warmup.max(1) {
        engine.step()?;
    }
    for id in ids.drain(..) {
        engine.remove(id);
    }
    let compile_ms = t_compile.elapsed().as_secs_f64() * 1e3;
    let mut prefill_s = 0.0;
    for p in &prompts {
        let t = Instant::now();
        ids.push(engine.add(p, n_gen, greedy)?.0);
        prefill_s += t.elapsed().as_secs_f64();
    }
    let mut steps_ms = Vec::new();
    for _ in 1..n_gen {
        let t = Instant::now();
        engine.step()?;
        steps_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    for id in ids {
        engine.remove(id);
    }
    let mut times = steps_ms.clone();
    if times.is_empty() {
        return Err("no decode steps were timed".into());
    }
    times.sort_by(f64::total_cmp);
    let (median_ms, p90_ms) = (quantile(&times, 0.5), quantile(&times, 0.9));
    let total_ms: f64 = steps_ms.iter().sum();
    let decode_tok_s = (batch * steps_ms.len()) as f64 / (total_ms / 1e3).max(1e-12);
    let prefill_tok_s = (batch * n_prompt) as f64 / prefill_s.max(1e-12);
    if args.json {
        let v = serde_json::json!({
            "model": path,
            "device": device.name(),
            "load_ms": load_ms,
            "compile_ms": compile_ms,
            "batch": batch,
            "prompt_tokens": n_prompt,
            "gen_tokens": n_gen,
            "prefill_ms": prefill_s * 1e3,
            "prefill_tok_s": prefill_tok_s,
            "decode_tok_s": decode_tok_s,
            "median_ms": median_ms,
            "p90_ms": p90_ms,
            "min_ms": times[0],
            "iters": times.len(),
            "warmup": args.warmup,
            "unit": "decode step (one token per sequence)",
            "weight_bytes": model.bytes_per_token(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("model     {path}");
        println!("device    {device}");
        println!("load      {load_ms:.1} ms");
        println!("setup     {compile_ms:.1} ms (compile, upload, warm-up)");
        println!(
            "prefill   {:.1} ms for {batch} x {n_prompt} tokens ({prefill_tok_s:.1} tok/s)",
            prefill_s * 1e3
        );
        println!(
            "decode    {decode_tok_s:.1} tok/s in all; median {median_ms:.3} ms/step, p90 \
             {p90_ms:.3} ms, min {:.3} ms ({} steps of {batch} sequences)",
            times[0],
            times.len(),
        );
    }
    Ok(())
}

/// An ONNX model ready to bench: one graph, or (shapes that depend on computed values) the
/// inputs of a staged run.
enum Onnx {
    Graph(Prepared),
    Staged(HashMap<String, Tensor>),
}

fn prepare_onnx(
    path: &str,
    mut files: HashMap<String, Tensor>,
    random: &[String],
    dims: &HashMap<String, usize>,
) -> Result<Onnx, Box<dyn std::error::Error>> {
    let parsed = rlx_onnx::ParsedModel::open(path)?;
    let declared = parsed.inputs().to_vec();
    let bindings = super::run_model::complete_inputs(&declared, &mut files, random, dims)?;
    let opts = rlx_onnx::ImportOptions {
        known_inputs: files.clone(),
        dims: bindings.into_iter().collect(),
        ..Default::default()
    };
    let model = parsed.specialise(&opts)?;
    if !model.cut.is_empty() {
        return Ok(Onnx::Staged(files));
    }
    check_known(&files, &declared_inputs(&model.graph))?;
    Ok(Onnx::Graph(Prepared {
        graph: model.graph,
        params: model.params,
        inputs: files,
    }))
}

fn prepare_folder(
    spec: &str,
    mut files: HashMap<String, Tensor>,
    random: &[String],
    dims: &HashMap<String, usize>,
) -> Result<Prepared, Box<dyn std::error::Error>> {
    let dir = rlx_models::resolve(spec)?;
    match rlx_models::family(&dir)? {
        Family::Bert => {}
        Family::Llama => {
            return Err(format!(
                "{}: a downloaded Llama folder: run `rlx bench {}`",
                spec,
                dir.display()
            )
            .into())
        }
    }
    let model = BertModel::load(&dir)?;
    let batch = dims.get("batch").copied().unwrap_or(1);
    let seq = dims.get("seq").copied().unwrap_or(128);
    if seq > model.config.max_position_embeddings {
        return Err(format!(
            "--dim seq={seq}: longer than the model's {} positions",
            model.config.max_position_embeddings
        )
        .into());
    }
    let declared = declared_inputs(&model.graph);
    let synthetic = model.random_inputs(batch, seq, 1);
    for name in random {
        let t = synthetic
            .get(name)
            .ok_or_else(|| format!("--input {name}=random: the model has no input `{name}`"))?;
        files.insert(name.clone(), t.clone());
    }
    if !files.contains_key(rlx_models::bert::INPUT_IDS) {
        files.insert(
            rlx_models::bert::INPUT_IDS.into(),
            synthetic[rlx_models::bert::INPUT_IDS].clone(),
        );
    }
    model.complete_inputs(&mut files)?;
    check_known(&files, &declared)?;
    Ok(Prepared {
        graph: model.graph,
        params: model
            .params
            .into_iter()
            .map(|(n, t)| (n, Arc::new(t)))
            .collect(),
        inputs: files,
    })
}

fn declared_inputs(g: &Graph) -> HashMap<String, TensorType> {
    g.inputs()
        .into_iter()
        .map(|(n, id)| (n, g.ty(id).clone()))
        .collect()
}

fn check_known(
    inputs: &HashMap<String, Tensor>,
    declared: &HashMap<String, TensorType>,
) -> Result<(), String> {
    let mut names: Vec<&str> = declared.keys().map(String::as_str).collect();
    names.sort();
    for name in inputs.keys() {
        if !declared.contains_key(name) {
            return Err(format!(
                "--input {name}: the model has no such input; inputs: {}",
                names.join(", ")
            ));
        }
    }
    if let Some(missing) = names.iter().find(|n| !inputs.contains_key(**n)) {
        return Err(format!(
            "input `{missing}` ({}) is not given: pass --input {missing}=FILE.npy or {missing}=random",
            declared[*missing]
        ));
    }
    Ok(())
}

/// Symbol sizes from the inputs' shapes, so the graph compiles now (timed) rather than at
/// the first run.
fn bind_symbols(
    g: &Graph,
    inputs: &HashMap<String, Tensor>,
) -> Result<HashMap<String, usize>, String> {
    let mut out: HashMap<String, usize> = HashMap::new();
    for (name, ty) in declared_inputs(g) {
        let Some(t) = inputs.get(&name) else { continue };
        if t.shape().len() != ty.shape.rank() {
            return Err(format!(
                "input `{name}`: expected {ty}, got {}{:?}",
                t.dtype(),
                t.shape()
            ));
        }
        for (d, &n) in ty.shape.dims().iter().zip(t.shape()) {
            if let Dim::Sym(s) = d {
                if let Some(&prev) = out.get(&**s) {
                    if prev != n {
                        return Err(format!(
                            "input `{name}`: dim `{s}` is {n} here but {prev} in another input"
                        ));
                    }
                }
                out.insert(s.to_string(), n);
            }
        }
    }
    Ok(out)
}

/// Device time per kernel kind and the slowest kernels of a [`RunProfile`].
struct Profile {
    runs: usize,
    clock: &'static str,
    /// per kind: (kernels per run, microseconds per run)
    kinds: Vec<(String, usize, f64)>,
    /// per kernel name: (kind, microseconds per run)
    top: Vec<(String, String, f64)>,
    /// microseconds per run in kernels
    total: f64,
}

impl From<&RunProfile> for Profile {
    fn from(p: &RunProfile) -> Profile {
        let mut by_kind: BTreeMap<String, (usize, f64)> = BTreeMap::new();
        let mut by_name: HashMap<String, (String, f64)> = HashMap::new();
        for k in &p.kernels {
            let e = by_kind.entry(k.kind.clone()).or_default();
            e.0 += 1;
            e.1 += k.micros;
            by_name
                .entry(k.name.clone())
                .or_insert((k.kind.clone(), 0.0))
                .1 += k.micros;
        }
        let mut kinds: Vec<(String, usize, f64)> =
            by_kind.into_iter().map(|(k, (n, s))| (k, n, s)).collect();
        kinds.sort_by(|a, b| b.2.total_cmp(&a.2));
        let mut top: Vec<(String, String, f64)> =
            by_name.into_iter().map(|(n, (k, s))| (n, k, s)).collect();
        top.sort_by(|a, b| b.2.total_cmp(&a.2));
        Profile {
            runs: p.runs,
            clock: p.clock,
            kinds,
            top,
            total: p.kernel_micros(),
        }
    }
}

impl Profile {
    fn print(&self) {
        let ms = |us: f64| us / 1e3;
        println!(
            "profile   {:.3} ms per run in kernels (device time, {}, medians of {} runs):",
            ms(self.total),
            self.clock,
            self.runs
        );
        for (kind, n, us) in &self.kinds {
            println!(
                "  {kind:<14} {:>8.3} ms  {:>5.1}%  {n} kernels",
                ms(*us),
                100.0 * us / self.total.max(1e-9)
            );
        }
        println!("  slowest kernels:");
        for (name, kind, us) in self.top.iter().take(15) {
            println!("  {:>8.3} ms  {kind:<12} {name}", ms(*us));
        }
    }

    fn to_json(&self) -> serde_json::Value {
        let ms = |us: f64| us / 1e3;
        serde_json::json!({
            "runs": self.runs,
            "clock": self.clock,
            "kernel_ms": ms(self.total),
            "by_kind": self.kinds.iter().map(|(k, n, us)| serde_json::json!({
                "kind": k, "kernels": n, "ms": ms(*us)
            })).collect::<Vec<_>>(),
            "slowest": self.top.iter().take(15).map(|(name, k, us)| serde_json::json!({
                "kernel": name, "kind": k, "ms": ms(*us)
            })).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        let t: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(quantile(&t, 0.5), 5.0);
        assert_eq!(quantile(&t, 0.9), 9.0);
        assert_eq!(quantile(&[3.0], 0.9), 3.0);
    }
}
