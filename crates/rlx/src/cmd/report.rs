//! `rlx report`: where every node runs and how (native, decomposed, unsupported).

use super::model::{device, load};
use super::CmdResult;
use rlx_runtime::{dispatch_report, is_available, CompileOptions};
use std::collections::HashMap;

/// Arguments of `rlx report`.
#[derive(clap::Args)]
pub struct Args {
    /// Model to report on (omit for the bundled demo).
    model: Option<String>,
    /// Device name, or `auto`.
    #[arg(long, default_value = "auto")]
    device: String,
    /// Bind a symbolic dim, e.g. `--bind batch=8` (unbound symbols default to 1).
    #[arg(long, value_parser = parse_binding)]
    bind: Vec<(String, usize)>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Parses `NAME=SIZE`.
pub fn parse_binding(s: &str) -> Result<(String, usize), String> {
    let (k, v) = s.split_once('=').ok_or("expected NAME=SIZE")?;
    let n = v.parse::<usize>().map_err(|e| format!("size `{v}`: {e}"))?;
    Ok((k.to_string(), n))
}

/// Bindings from `--bind`, with every other symbol of the graph bound to 1.
pub fn bindings(graph: &rlx_ir::Graph, given: &[(String, usize)]) -> HashMap<String, usize> {
    let mut map: HashMap<String, usize> = graph.symbols().into_iter().map(|s| (s, 1)).collect();
    map.extend(given.iter().cloned());
    map
}

/// Prints the dispatch report.
pub fn run(args: Args) -> CmdResult {
    let model = load(args.model.as_deref())?;
    let device = device(&args.device)?;
    let options = CompileOptions {
        bindings: bindings(&model.graph, &args.bind),
        ..CompileOptions::default()
    };
    // the report needs the device's backend registered, not available: a seam or an absent
    // GPU still says where each node would run
    let report = dispatch_report(device, &model.graph, &options)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        println!("model {} on {device}", model.name);
        if let Err(e) = is_available(device) {
            println!("({e})");
        }
        println!("{report}");
    }
    Ok(())
}
