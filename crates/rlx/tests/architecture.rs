//! Keeps ARCHITECTURE.md true: every path it names must exist. Paths starting with
//! `crates/`, `scripts/`, `assets/` or `python/` are checked from the repo root; bare file names such
//! as `session.rs` or `builtin/` are checked inside the `src/` of the crate whose section
//! they appear in.

use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn backticked(line: &str) -> Vec<&str> {
    line.split('`').skip(1).step_by(2).collect()
}

#[test]
fn every_path_in_architecture_md_exists() {
    let root = repo_root();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md"))
        .expect("ARCHITECTURE.md at the repo root");
    let mut section_crate: Option<PathBuf> = None;
    let mut missing = Vec::new();
    let mut checked = 0;
    for line in text.lines() {
        if let Some(h) = line.strip_prefix("### ") {
            section_crate = backticked(h)
                .into_iter()
                .find(|t| t.starts_with("crates/"))
                .map(|t| root.join(t));
        }
        if line.starts_with("## ") {
            section_crate = None;
        }
        for tok in backticked(line) {
            let tok = tok.split_whitespace().next().unwrap_or("");
            if tok.contains('<') {
                continue;
            }
            let rooted = ["crates/", "scripts/", "assets/", "python/"]
                .iter()
                .any(|p| tok.starts_with(p));
            let path = if rooted {
                root.join(tok)
            } else if tok.ends_with(".rs") || (tok.ends_with('/') && !tok.contains(' ')) {
                match &section_crate {
                    Some(c) => c.join("src").join(tok),
                    None => continue,
                }
            } else {
                continue;
            };
            checked += 1;
            if !path.exists() {
                missing.push(tok.to_string());
            }
        }
    }
    assert!(
        checked > 20,
        "expected ARCHITECTURE.md to name many paths, found {checked}"
    );
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist: {missing:?}"
    );
}

#[test]
fn every_crate_has_a_section() {
    let root = repo_root();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().to_string();
        assert!(
            text.contains(&format!("### `{name}`")),
            "ARCHITECTURE.md has no section for crate {name}"
        );
    }
}
