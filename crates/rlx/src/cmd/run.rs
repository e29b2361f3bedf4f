//! `rlx run`: compile and run a model; with no MODEL, the bundled digits demo with its
//! accuracy on 360 held-out images.

use super::model::{device, load};
use super::CmdResult;
use rlx_runtime::{CompileOptions, Session};
use std::collections::HashMap;
use std::time::Instant;

/// Arguments of `rlx run`.
#[derive(clap::Args)]
pub struct Args {
    /// Model to run (omit for the bundled demo).
    model: Option<String>,
    /// Device name, or `auto` for the fastest available.
    #[arg(long, default_value = "auto")]
    device: String,
    /// Timed runs after one warm-up.
    #[arg(long, default_value_t = 20)]
    iters: usize,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// An input of a model file: `NAME=FILE.npy` or `NAME=random` (repeatable).
    #[arg(long = "input", value_name = "NAME=FILE.npy|NAME=random")]
    inputs: Vec<String>,
    /// Sizes of symbolic dims that no input file gives (for `NAME=random` inputs), e.g.
    /// `--dim batch=8`; dims of `.npy` inputs take the files' sizes.
    #[arg(long = "dim", value_name = "SYMBOL=N", value_delimiter = ',')]
    dims: Vec<String>,
    /// Write each output of a model file as `DIR/NAME.npy`.
    #[arg(long, value_name = "DIR")]
    output: Option<std::path::PathBuf>,
    #[command(flatten)]
    compile: CompileFlags,
}

/// The compile options `rlx run` and `rlx bench` share.
#[derive(clap::Args)]
pub struct CompileFlags {
    /// Mixed precision: run f32 matrix products (matmul, conv, attention) in `f16` or
    /// `bf16` with f32 accumulation; on CUDA the activations between them are stored in it
    /// too (as PyTorch's `model.half()`; norms and softmax compute in f32); `f32` runs the
    /// model's own types.
    #[arg(long, default_value = "f32", value_parser = ["f32", "f16", "bf16"])]
    pub precision: String,
    /// Run exact GELU as its tanh approximation (opt-in: absolute error up to 4.7e-4); on
    /// CUDA it then fuses into the preceding GEMM.
    #[arg(long)]
    pub approximate_gelu: bool,
    /// Validation layer: every run also checks each node's value on the device against the
    /// CPU interpreter (fed the device's operands) and fails naming the first node that
    /// diverges, with its operands. Slow; for debugging a device.
    #[arg(long)]
    pub validate: bool,
    /// Quantized products (GGUF block formats, MatMulNBits) keep f32 activations instead of
    /// quantizing them to int8 per 32 values (slower; the default matches llama.cpp).
    #[arg(long)]
    pub exact_quant: bool,
}

impl CompileFlags {
    /// The compile options these flags ask for (no symbol bindings).
    pub fn options(&self) -> CompileOptions {
        CompileOptions {
            precision: match self.precision.as_str() {
                "f16" => Some(rlx_ir::DType::F16),
                "bf16" => Some(rlx_ir::DType::BF16),
                _ => None,
            },
            approximate_gelu: self.approximate_gelu,
            validate: self.validate,
            exact_quant: self.exact_quant,
            ..CompileOptions::default()
        }
    }

    /// Prints the lines of the text report for the options that differ from the default.
    pub fn print(&self) {
        if self.precision != "f32" {
            println!("precision {} products, f32 accumulation", self.precision);
        }
        if self.approximate_gelu {
            println!("gelu      tanh approximation (--approximate-gelu)");
        }
        if self.validate {
            println!("validate  every node of every run agreed with the CPU interpreter");
        }
    }
}

/// Runs a model file, or the demo without one.
pub fn run(args: Args) -> CmdResult {
    match args.model.as_deref() {
        None | Some("demo") => {
            if !args.inputs.is_empty() || args.output.is_some() || !args.dims.is_empty() {
                return Err(
                    "--input, --dim and --output apply to model files, not the bundled demo".into(),
                );
            }
            run_demo(args)
        }
        Some(_) => super::run_model::run_model(
            args.model.as_deref().unwrap_or_default(),
            &args.device,
            &args.inputs,
            &parse_dims(&args.dims)?,
            args.output.as_deref(),
            args.json,
            args.compile.options(),
        ),
    }
}

/// Parses `--dim SYMBOL=N` arguments.
///
/// # Errors
/// An argument without `=` or whose size is not a number.
pub fn parse_dims(args: &[String]) -> Result<HashMap<String, usize>, String> {
    let mut dims = HashMap::new();
    for d in args {
        let (k, v) = d
            .split_once('=')
            .ok_or_else(|| format!("--dim `{d}`: expected SYMBOL=N"))?;
        let n = v
            .parse()
            .map_err(|_| format!("--dim `{d}`: `{v}` is not a size"))?;
        dims.insert(k.to_string(), n);
    }
    Ok(dims)
}

/// Runs the demo and reports accuracy and timings.
fn run_demo(args: Args) -> CmdResult {
    let model = load(args.model.as_deref())?;
    let device = device(&args.device)?;
    let t_load = Instant::now();
    let session = Session::new(device)?;
    for (name, t) in model.params {
        session.set_param(&name, t);
    }
    let (images, labels, reference) = rlx::demo::test_set()?;
    let n = images.shape()[0];
    let options = CompileOptions {
        bindings: HashMap::from([("batch".to_string(), n)]),
        ..args.compile.options()
    };
    let compiled = session.compile(&model.graph, options)?;
    let compile_ms = t_load.elapsed().as_secs_f64() * 1e3;
    let inputs = HashMap::from([("images".to_string(), images)]);
    let t_first = Instant::now();
    let outputs = compiled.run(&inputs)?;
    let first_ms = t_first.elapsed().as_secs_f64() * 1e3;
    let mut times = Vec::with_capacity(args.iters);
    for _ in 0..args.iters.max(1) {
        let t = Instant::now();
        compiled.run(&inputs)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    let median_ms = times[times.len() / 2];
    let p90_ms = times[(times.len() * 9 / 10).min(times.len() - 1)];
    let logits = &outputs[0].1;
    let preds = rlx::demo::argmax_rows(logits);
    let labels = labels.to_f64_vec();
    let correct = preds
        .iter()
        .zip(&labels)
        .filter(|(p, l)| **p as f64 == **l)
        .count();
    let accuracy = correct as f64 / n as f64;
    let max_abs_err = logits
        .to_f64_vec()
        .iter()
        .zip(reference.to_f64_vec())
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    let variant = compiled.first_variant();
    let kernels = variant
        .as_ref()
        .map(|v| v.executable.kernel_count())
        .unwrap_or(0);
    if args.json {
        let mut v = serde_json::json!({
            "model": model.name,
            "device": device.name(),
            "precision": args.compile.precision,
            "approximate_gelu": args.compile.approximate_gelu,
            "accuracy": accuracy,
            "outputs": {
                "logits": {"dtype": logits.dtype().name(), "shape": logits.shape()},
                "predictions": preds,
                "max_abs_err_vs_reference": max_abs_err,
            },
            "timings_ms": {
                "compile": compile_ms,
                "first_run": first_ms,
                "median": median_ms,
                "p90": p90_ms,
                "per_image_median": median_ms / n as f64,
            },
            "kernels": kernels,
        });
        if let Some(m) = compiled.memory() {
            v["memory"] = super::bench::memory_json(&m);
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("model     {}", model.name);
        println!("device    {device}");
        args.compile.print();
        println!(
            "accuracy  {:.2}% ({correct}/{n} held-out digits)",
            accuracy * 100.0
        );
        println!("parity    max |logit - numpy reference| = {max_abs_err:.2e}");
        println!("kernels   {kernels} per run");
        println!(
            "timings   compile {compile_ms:.2} ms, first run {first_ms:.3} ms, median {median_ms:.3} ms (p90 {p90_ms:.3} ms) for {n} images over {} runs",
            times.len()
        );
    }
    Ok(())
}
