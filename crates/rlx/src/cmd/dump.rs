//! `rlx dump`: print a compile stage (`graph`, `optimized`, `kernels`), the graph right
//! after one named optimization pass (`--after fold`; the names are `rlx_opt::PASSES`), or
//! the kernel program with what the device's kernel-IR passes decide up to one of them
//! (`--after elide_views`; the names are `rlx_opt::KERNEL_PASSES`).

use super::model::{device, load};
use super::report::{bindings, parse_binding};
use super::CmdResult;
use rlx_driver::Device;
use rlx_runtime::{kernels_after, CompileOptions, Session};

/// Compile stages that can be dumped; the names match the pipeline.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Stage {
    /// the graph as built or imported
    Graph,
    /// after the optimization passes and legalization
    Optimized,
    /// the kernel program the backend compiled
    Kernels,
}

/// Arguments of `rlx dump`.
#[derive(clap::Args)]
pub struct Args {
    /// Model to dump (omit for the bundled demo).
    model: Option<String>,
    /// Which stage.
    #[arg(long, value_enum, default_value = "graph")]
    stage: Stage,
    /// Instead of a stage, the graph right after this optimization pass (the pipeline stops
    /// there), or, for a kernel-IR pass, the kernel program and the decisions of the passes
    /// the device chooses up to and including it.
    #[arg(
        long,
        value_name = "PASS",
        conflicts_with = "stage",
        value_parser = clap::builder::PossibleValuesParser::new(
            rlx_opt::PASSES.iter().chain(rlx_opt::KERNEL_PASSES)
        )
    )]
    after: Option<String>,
    /// Device name, or `auto` (the cpu for a kernel-IR pass, whose decisions need no device).
    #[arg(long, default_value = "auto")]
    device: String,
    /// Bind a symbolic dim, e.g. `--bind batch=8` (unbound symbols default to 1).
    #[arg(long, value_parser = parse_binding)]
    bind: Vec<(String, usize)>,
}

/// Prints the stage.
pub fn run(args: Args) -> CmdResult {
    let model = load(args.model.as_deref())?;
    let options = || CompileOptions {
        bindings: bindings(&model.graph, &args.bind),
        ..CompileOptions::default()
    };
    if let Some(pass) = args
        .after
        .as_deref()
        .filter(|p| rlx_opt::KERNEL_PASSES.contains(p))
    {
        let device = match args.device.as_str() {
            "auto" => Device::Cpu,
            name => device(name)?,
        };
        let k = kernels_after(device, &model.graph, &options(), pass)?;
        print!("{}", k.program);
        println!("# lowering (every device):");
        for bias in &k.fused_biases {
            println!("{bias}");
        }
        println!("# kernel passes on {device} up to {pass}:");
        print!("{}", k.decisions);
        return Ok(());
    }
    if let Some(pass) = &args.after {
        let session = Session::new(device(&args.device)?)?;
        print!("{}", session.graph_after(&model.graph, &options(), pass)?);
        return Ok(());
    }
    let compile = || -> Result<_, Box<dyn std::error::Error>> {
        let session = Session::new(device(&args.device)?)?;
        let compiled = session.compile(&model.graph, options())?;
        Ok(compiled.first_variant().ok_or("nothing was compiled")?)
    };
    let text = match args.stage {
        Stage::Graph => model.graph.to_string(),
        Stage::Optimized => compile()?.graph.to_string(),
        Stage::Kernels => compile()?.executable.dump(),
    };
    print!("{text}");
    Ok(())
}
