//! `rlx dump`: print a compile stage (`graph`, `optimized`, `kernels`), or the graph right
//! after one named optimization pass (`--after fold`; the names are `rlx_opt::PASSES`).

use super::model::{device, load};
use super::report::{bindings, parse_binding};
use super::CmdResult;
use rlx_runtime::{CompileOptions, Session};

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
    /// Instead of a stage, the graph right after this optimization pass; the pipeline
    /// stops there.
    #[arg(
        long,
        value_name = "PASS",
        conflicts_with = "stage",
        value_parser = clap::builder::PossibleValuesParser::new(rlx_opt::PASSES)
    )]
    after: Option<String>,
    /// Device name, or `auto`.
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
