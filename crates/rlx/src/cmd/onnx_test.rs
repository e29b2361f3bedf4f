//! `rlx onnx-test DIR`: runs ONNX backend tests (`<test>/model.onnx` plus
//! `test_data_set_*/{input,output}_N.pb`) and classifies each as passed, failed (wrong
//! numbers), unsupported (a clean error) or crashed (panic, abort, timeout). Every test runs
//! in its own process (the hidden verb `rlx onnx-test-one`), so one crash cannot take the
//! runner down.

use super::model::device;
use super::onnx_case::{run_case, Outcome};
use super::CmdResult;
use serde::Serialize;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Arguments of `rlx onnx-test`.
#[derive(clap::Args)]
pub struct Args {
    /// A test directory, or a directory of them (searched two levels deep).
    dir: PathBuf,
    /// Device name.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Seconds before a test counts as crashed (timeout).
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// Tests run at once (default: the number of cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// Only tests whose name contains this.
    #[arg(long)]
    filter: Option<String>,
    /// A file of test names (one a line, `#` comments) that must pass: exit 1 otherwise.
    #[arg(long)]
    expect_pass: Option<PathBuf>,
    /// Exit 1 when any test crashed.
    #[arg(long)]
    fail_on_crash: bool,
}

/// Arguments of the hidden `rlx onnx-test-one`.
#[derive(clap::Args)]
pub struct OneArgs {
    /// The test directory.
    dir: PathBuf,
    /// Device name.
    #[arg(long, default_value = "cpu")]
    device: String,
}

/// One test's classification.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct TestResult {
    /// test directory name
    pub name: String,
    /// passed, failed, unsupported or crashed
    pub status: String,
    /// why, for anything but a pass
    pub message: String,
}

/// Finds test directories: DIR itself, or its children (and grandchildren) holding a
/// `model.onnx`, sorted by path.
fn find_tests(dir: &Path) -> Result<Vec<PathBuf>, String> {
    if dir.join("model.onnx").is_file() {
        return Ok(vec![dir.to_path_buf()]);
    }
    let mut out = Vec::new();
    let list = |d: &Path| -> Result<Vec<PathBuf>, String> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(d)
            .map_err(|e| format!("{}: {e}", d.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir())
            .collect();
        v.sort();
        Ok(v)
    };
    for child in list(dir)? {
        if child.join("model.onnx").is_file() {
            out.push(child);
        } else {
            out.extend(
                list(&child)?
                    .into_iter()
                    .filter(|g| g.join("model.onnx").is_file()),
            );
        }
    }
    if out.is_empty() {
        return Err(format!(
            "{}: no `model.onnx` found in it or below it",
            dir.display()
        ));
    }
    Ok(out)
}

fn test_name(p: &Path) -> String {
    p.file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.display().to_string())
}

/// Runs one test in a child process with a timeout.
fn run_isolated(exe: &Path, dir: &Path, device: &str, timeout: Duration) -> TestResult {
    let name = test_name(dir);
    let crashed = |message: String| TestResult {
        name: name.clone(),
        status: "crashed".into(),
        message,
    };
    let child = Command::new(exe)
        .arg("onnx-test-one")
        .arg(dir)
        .arg("--device")
        .arg(device)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return crashed(format!("cannot start `{}`: {e}", exe.display())),
    };
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut r) = r {
                let _ = r.read_to_string(&mut s);
            }
            s
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if start.elapsed() > timeout => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return crashed(format!("waiting for the test process: {e}")),
        }
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    let tail = |s: &str| -> String {
        let lines: Vec<&str> = s.lines().rev().take(3).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
    };
    let Some(status) = status else {
        return crashed(format!("timeout after {}s", timeout.as_secs()));
    };
    if status.success() {
        if let Some(line) = stdout.lines().rev().find(|l| l.starts_with('{')) {
            if let Ok(r) = serde_json::from_str::<TestResult>(line) {
                return r;
            }
        }
        return crashed(format!("no result printed; stderr: {}", tail(&stderr)));
    }
    crashed(format!("exit status {status}; stderr: {}", tail(&stderr)))
}

/// Runs every test under DIR and prints the classification.
pub fn run(args: Args) -> CmdResult {
    device(&args.device)?;
    let mut tests = find_tests(&args.dir)?;
    if let Some(f) = &args.filter {
        tests.retain(|t| test_name(t).contains(f.as_str()));
    }
    let exe = std::env::current_exe()?;
    let jobs = args
        .jobs
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
        .max(1);
    let timeout = Duration::from_secs(args.timeout);
    let next = AtomicUsize::new(0);
    let results: Vec<Mutex<Option<TestResult>>> = tests.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..jobs.min(tests.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(t) = tests.get(i) else { break };
                let r = run_isolated(&exe, t, &args.device, timeout);
                *results[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
            });
        }
    });
    let results: Vec<TestResult> = results
        .into_iter()
        .filter_map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
        .collect();
    let count = |s: &str| results.iter().filter(|r| r.status == s).count();
    let (passed, failed, unsupported, crashed) = (
        count("passed"),
        count("failed"),
        count("unsupported"),
        count("crashed"),
    );
    if args.json {
        let v = serde_json::json!({
            "total": results.len(),
            "passed": passed,
            "failed": failed,
            "unsupported": unsupported,
            "crashed": crashed,
            "tests": results,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for r in &results {
            let msg = r.message.lines().next().unwrap_or("");
            println!("{:<12} {}  {}", r.status, r.name, msg);
        }
        println!(
            "total {}: {passed} passed, {failed} failed, {unsupported} unsupported, {crashed} crashed",
            results.len()
        );
    }
    let mut problems = Vec::new();
    if args.fail_on_crash && crashed > 0 {
        problems.push(format!("{crashed} test(s) crashed"));
    }
    if let Some(path) = &args.expect_pass {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut missing = Vec::new();
        for name in text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            if let Some(r) = results.iter().find(|r| r.name == name) {
                if r.status != "passed" {
                    missing.push(format!("{name} ({})", r.status));
                }
            }
        }
        if !missing.is_empty() {
            problems.push(format!(
                "{} expected pass(es) did not pass: {}",
                missing.len(),
                missing.join(", ")
            ));
        }
    }
    if !problems.is_empty() {
        return Err(problems.join("; ").into());
    }
    Ok(())
}

/// Runs one test in this process and prints its classification as one JSON line.
pub fn run_one(args: OneArgs) -> CmdResult {
    let name = test_name(&args.dir);
    let (status, message) = match run_case(&args.dir, &args.device) {
        Ok(Outcome::Passed) => ("passed", String::new()),
        Ok(Outcome::Failed(m)) => ("failed", m),
        Err(m) => ("unsupported", m),
    };
    let r = TestResult {
        name,
        status: status.into(),
        message,
    };
    println!("{}", serde_json::to_string(&r)?);
    Ok(())
}
