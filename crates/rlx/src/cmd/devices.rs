//! `rlx devices`: every device, whether a backend is compiled in, and whether it can run now.

use super::CmdResult;
use rlx_driver::Setting;
use rlx_runtime::device_statuses;

/// Arguments of `rlx devices`.
#[derive(clap::Args)]
pub struct Args {
    /// Print a JSON array instead of a table.
    #[arg(long)]
    json: bool,
    /// List every knob (environment variable) each backend and the runtime read, with its
    /// value now and its default.
    #[arg(long)]
    settings: bool,
}

/// Lists devices.
pub fn run(args: Args) -> CmdResult {
    if args.settings {
        return settings(args.json);
    }
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

/// `rlx devices --settings`: the runtime's knobs, then each compiled-in backend's (the
/// three wgpu devices share theirs, listed once).
fn settings(json: bool) -> CmdResult {
    let mut groups: Vec<(String, Vec<Setting>)> = vec![(
        "runtime".to_string(),
        rlx_driver::settings::settings(rlx_runtime::settings::KNOBS),
    )];
    for s in device_statuses() {
        if s.settings.is_empty() {
            continue;
        }
        match groups.iter_mut().find(|(_, k)| *k == s.settings) {
            Some((name, _)) => {
                name.push_str(", ");
                name.push_str(s.device.name());
            }
            None => groups.push((s.device.name().to_string(), s.settings)),
        }
    }
    if json {
        let v: Vec<serde_json::Value> = groups
            .iter()
            .flat_map(|(group, knobs)| {
                knobs.iter().map(move |k| {
                    serde_json::json!({
                        "for": group,
                        "name": k.name,
                        "value": k.value,
                        "default": k.default,
                        "help": k.help,
                    })
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    for (group, knobs) in &groups {
        println!("{group}:");
        for k in knobs {
            let value = k.value.as_deref().unwrap_or("(unset)");
            let default = if k.default.is_empty() { "-" } else { k.default };
            println!(
                "  {:<26} {value:<10} default {default:<10} {}",
                k.name, k.help
            );
        }
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
