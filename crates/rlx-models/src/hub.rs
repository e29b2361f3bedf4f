//! Model folders by name from the Hugging Face hub (`hf:<owner>/<name>`), cached on disk.
//!
//! `https://huggingface.co/<name>/resolve/<revision>/<file>` for `config.json`, the
//! weights (`model.safetensors`, or `model.safetensors.index.json` and its shards),
//! `tokenizer.json`, and sentence-transformers' small side files when present. Files land in
//! `<cache>/<owner>--<name>/<revision>/`; a file already there is not fetched again. Each
//! download goes to `<file>.part` and is renamed when complete, so an interrupted fetch
//! never looks cached. `HF_TOKEN`, when set, is sent as a bearer token (gated models).
//! Built only with the `hub` feature (HTTPS through `ureq`).

use crate::error::{ModelError, Result};
use std::path::{Path, PathBuf};

/// The prefix that marks a hub name in a `--model` argument.
pub const PREFIX: &str = "hf:";

/// Files a BERT-style folder needs.
#[cfg_attr(not(feature = "hub"), allow(dead_code))]
const REQUIRED: &[&str] = &["config.json", "tokenizer.json"];
/// Files fetched when the hub has them.
#[cfg_attr(not(feature = "hub"), allow(dead_code))]
const OPTIONAL: &[&str] = &[
    "sentence_bert_config.json",
    "modules.json",
    "1_Pooling/config.json",
];

/// Where downloads are cached: `$RLX_CACHE_DIR/hub`, else `$XDG_CACHE_HOME/rlx/hub`, else
/// `~/.cache/rlx/hub`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("RLX_CACHE_DIR") {
        return PathBuf::from(d).join("hub");
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("rlx").join("hub");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache").join("rlx").join("hub")
}

/// Splits `owner/name[@revision]` into the repo and the revision (`main` by default).
///
/// # Errors
/// An empty name, or one with characters a repo name cannot have.
pub fn parse_name(spec: &str) -> Result<(String, String)> {
    let (repo, rev) = spec.split_once('@').unwrap_or((spec, "main"));
    let ok = |s: &str| {
        !s.is_empty()
            && !s.split('/').any(|p| p.is_empty() || p == "." || p == "..")
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
    };
    if !ok(repo) || repo.matches('/').count() > 1 || !ok(rev) {
        return Err(ModelError::Hub(format!(
            "`{spec}` is not a hub model name (expected owner/name or owner/name@revision)"
        )));
    }
    Ok((repo.to_string(), rev.to_string()))
}

/// The folder for `hf:<name>` (or `<name>`), downloading what is not cached yet.
///
/// # Errors
/// A malformed name, the network unreachable (the error says so and how to work
/// offline), a required file absent from the hub, or a write failure in the cache.
pub fn fetch(spec: &str) -> Result<PathBuf> {
    let name = spec.strip_prefix(PREFIX).unwrap_or(spec);
    let (repo, rev) = parse_name(name)?;
    let dir = cache_dir().join(repo.replace('/', "--")).join(&rev);
    fetch_into(&repo, &rev, &dir)?;
    Ok(dir)
}

#[cfg(feature = "hub")]
fn fetch_into(repo: &str, rev: &str, dir: &Path) -> Result<()> {
    let client = Client::new(repo, rev);
    for f in REQUIRED {
        client.get(f, dir, true)?;
    }
    if !dir.join("model.safetensors").is_file() {
        let single = client.get("model.safetensors", dir, false)?;
        if !single {
            let found = client.get("model.safetensors.index.json", dir, false)?;
            if !found {
                return Err(ModelError::Hub(format!(
                    "{repo}@{rev} has neither model.safetensors nor model.safetensors.index.json"
                )));
            }
            for shard in shards(&dir.join("model.safetensors.index.json"))? {
                client.get(&shard, dir, true)?;
            }
        }
    }
    for f in OPTIONAL {
        client.get(f, dir, false)?;
    }
    Ok(())
}

#[cfg(not(feature = "hub"))]
fn fetch_into(repo: &str, _rev: &str, _dir: &Path) -> Result<()> {
    Err(ModelError::Hub(format!(
        "cannot fetch `{repo}`: this build has no hub support (enable rlx-models' `hub` feature)"
    )))
}

/// Shard file names listed in a safetensors index.
#[cfg_attr(not(feature = "hub"), allow(dead_code))]
fn shards(index: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(index).map_err(|source| ModelError::Io {
        path: index.display().to_string(),
        source,
    })?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| ModelError::Hub(format!("{}: {e}", index.display())))?;
    let mut out: Vec<String> = v
        .get("weight_map")
        .and_then(|m| m.as_object())
        .map(|m| {
            m.values()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out.dedup();
    if let Some(bad) = out
        .iter()
        .find(|s| parse_name(s).is_err() || s.contains('/'))
    {
        return Err(ModelError::Hub(format!(
            "{}: shard name `{bad}` is not a plain file name",
            index.display()
        )));
    }
    Ok(out)
}

#[cfg(feature = "hub")]
struct Client {
    agent: ureq::Agent,
    base: String,
    label: String,
    token: Option<String>,
}

#[cfg(feature = "hub")]
impl Client {
    fn new(repo: &str, rev: &str) -> Client {
        let config = ureq::Agent::config_builder()
            .timeout_connect(Some(std::time::Duration::from_secs(20)))
            .http_status_as_error(false)
            .build();
        let host = std::env::var("HF_ENDPOINT").unwrap_or_else(|_| "https://huggingface.co".into());
        Client {
            agent: config.into(),
            base: format!("{}/{repo}/resolve/{rev}", host.trim_end_matches('/')),
            label: format!("{repo}@{rev}"),
            token: std::env::var("HF_TOKEN").ok().filter(|t| !t.is_empty()),
        }
    }

    /// Downloads `file` into `dir` unless cached. Returns false when the hub has no such
    /// file and it is not `required`.
    fn get(&self, file: &str, dir: &Path, required: bool) -> Result<bool> {
        use std::io::Write;
        let dest = dir.join(file);
        if dest.is_file() {
            return Ok(true);
        }
        let url = format!("{}/{file}", self.base);
        let mut req = self.agent.get(&url);
        if let Some(t) = &self.token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        let resp = req.call().map_err(|e| self.net_error(&url, e))?;
        let status = resp.status().as_u16();
        if status == 404 && !required {
            return Ok(false);
        }
        if status != 200 {
            let why = match status {
                401 | 403 => " (gated or private: set HF_TOKEN)",
                404 => " (no such file or model)",
                _ => "",
            };
            return Err(ModelError::Hub(format!("{url}: HTTP {status}{why}")));
        }
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(|source| ModelError::Io {
                path: parent.display().to_string(),
                source,
            })?;
        }
        let part = dest.with_extension("part");
        let io = |source| ModelError::Io {
            path: part.display().to_string(),
            source,
        };
        let mut out = std::fs::File::create(&part).map_err(io)?;
        let mut body = resp.into_body().into_reader();
        std::io::copy(&mut body, &mut out).map_err(|e| {
            let _ = std::fs::remove_file(&part);
            ModelError::Hub(format!("{url}: download interrupted: {e}"))
        })?;
        out.flush().map_err(io)?;
        drop(out);
        std::fs::rename(&part, &dest).map_err(io)?;
        Ok(true)
    }

    fn net_error(&self, url: &str, e: ureq::Error) -> ModelError {
        let unreachable = matches!(
            e,
            ureq::Error::HostNotFound
                | ureq::Error::ConnectionFailed
                | ureq::Error::Io(_)
                | ureq::Error::Timeout(_)
        );
        if unreachable {
            ModelError::Hub(format!(
                "cannot reach {url} for {}: network unreachable ({e}); \
                 copy the model folder here another way and pass --model DIR",
                self.label
            ))
        } else {
            ModelError::Hub(format!("{url}: {e}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(
            parse_name("sentence-transformers/all-MiniLM-L6-v2").expect("valid"),
            (
                "sentence-transformers/all-MiniLM-L6-v2".into(),
                "main".into()
            )
        );
        assert_eq!(
            parse_name("bert-base-uncased@v1.0").expect("valid"),
            ("bert-base-uncased".into(), "v1.0".into())
        );
        assert!(parse_name("").is_err());
        assert!(parse_name("a/../b").is_err());
        assert!(parse_name("a/b/c").is_err());
        assert!(parse_name("a b").is_err());
    }
}
