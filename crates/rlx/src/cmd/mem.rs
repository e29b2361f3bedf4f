//! `rlx mem replay`: replay an allocation trace through RLX's sub-allocator.

use super::CmdResult;
use std::path::PathBuf;

/// Memory verbs.
#[derive(clap::Subcommand)]
pub enum Command {
    /// Replay a JSON-lines allocation trace (plain or .gz) and print fragmentation and speed.
    Replay(ReplayArgs),
}

/// Arguments of `rlx mem replay`.
#[derive(clap::Args)]
pub struct ReplayArgs {
    /// Trace file (`{"op":"alloc","id":N,"bytes":B}` / `{"op":"free","id":N}` lines), or
    /// `gen:NAME` for a generated one (`gen:0.5b-long-decode`, `gen:8b`, `gen:8b-mixed-batch`,
    /// `gen:13b`).
    trace: PathBuf,
    /// Block size the sub-allocator asks its provider for, in bytes.
    #[arg(long)]
    block_size: Option<usize>,
    /// Requests above this many bytes get a dedicated block.
    #[arg(long)]
    dedicated_threshold: Option<usize>,
    /// Replay through growable blocks instead of one expandable segment (the default:
    /// a virtual range with physical granules mapped on demand).
    #[arg(long)]
    blocks: bool,
    /// A fixed physical granule for the expandable segment, in bytes (default: the online
    /// policy, pieces sized to each request with at most held / 20 beyond it, see rlx-mem).
    #[arg(long)]
    granule: Option<usize>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// Runs a memory verb.
pub fn run(command: Command) -> CmdResult {
    match command {
        Command::Replay(a) => {
            let mut opts = rlx_mem::ReplayOptions::default();
            if let Some(b) = a.block_size {
                opts.block_size = Some(b);
            }
            if let Some(t) = a.dedicated_threshold {
                opts.dedicated_threshold = Some(t);
            }
            if a.blocks {
                opts.expandable = false;
            }
            if let Some(g) = a.granule {
                opts.granule = Some(g);
            }
            let report = rlx_mem::replay_source(&a.trace, &opts)?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                println!("{report}");
            }
            Ok(())
        }
    }
}
