//! Test support shared by every crate: honest skips.

use std::io::Write;

/// Marks the calling test as skipped: prints `SKIPPED: <reason>` and, when the test runner
/// set `RLX_SKIP_LOG`, appends the test name and reason there so the summary counts it as
/// skipped instead of passed. The caller returns right after.
pub fn skip(test: &str, reason: &str) {
    println!("SKIPPED: {test}: {reason}");
    eprintln!("SKIPPED: {test}: {reason}");
    if let Ok(path) = std::env::var("RLX_SKIP_LOG") {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            // One write per line: test processes append concurrently, and `writeln!` on a
            // file issues a write per formatted piece, which can interleave.
            let _ = f.write_all(format!("{test}\t{reason}\n").as_bytes());
        }
    }
}
