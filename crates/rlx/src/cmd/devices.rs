//! `rlx devices`: every device, whether a backend is compiled in, and whether it can run now.

use super::CmdResult;
use rlx_runtime::device_statuses;

/// Arguments of `rlx devices`.
#[derive(clap::Args)]
pub struct Args {
    /// Print a JSON array instead of a table.
    #[arg(long)]
    json: bool,
}

/// Lists devices.
pub fn run(args: Args) -> CmdResult {
    let rows: Vec<_> = device_statuses()
        .into_iter()
        .map(|s| (s.device, s.registered, s.available, s.reason, s.info))
        .collect();
    if args.json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|(d, r, a, reason, info)| {
                serde_json::json!({
                    "device": d.name(),
                    "registered": r,
                    "available": a,
                    "reason": reason,
                    "info": info,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{:<8} {:<10} {:<9} details",
        "device", "registered", "available"
    );
    for (d, r, a, reason, info) in rows {
        let details = match info {
            Some(i) => {
                let units = i
                    .compute_units
                    .map(|u| format!(", {u} threads"))
                    .unwrap_or_default();
                format!("{}{units}", i.name)
            }
            None => reason.unwrap_or_default(),
        };
        println!("{:<8} {:<10} {:<9} {details}", d.name(), yes(r), yes(a));
    }
    Ok(())
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}
