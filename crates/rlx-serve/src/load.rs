//! A load test for any OpenAI-compatible server (`rlx loadtest`): concurrent streaming
//! clients send a fixed number of requests; every response is checked, and throughput,
//! time to first token and inter-token latency are reported.

use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What to send.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// the server's base address (`http://127.0.0.1:8080`)
    pub url: String,
    /// clients streaming at once
    pub streams: usize,
    /// requests in all
    pub requests: usize,
    /// tokens each request asks for
    pub max_tokens: usize,
    /// the prompt (request `i` appends ` #i` so prompts differ)
    pub prompt: String,
    /// chat completions (else text completions)
    pub chat: bool,
    /// ask the server to go past the end-of-sequence token (`ignore_eos`)
    pub ignore_eos: bool,
    /// the model name sent
    pub model: String,
    /// seconds one request may take
    pub timeout_s: f64,
}

/// What the load test measured.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LoadReport {
    /// requests sent
    pub requests: usize,
    /// requests that failed a check (status, error event, no end, too few tokens)
    pub failed: usize,
    /// tokens generated in all (the usage counts, else the streamed pieces)
    pub completion_tokens: usize,
    /// seconds from the first request to the last answer
    pub seconds: f64,
    /// generated tokens per second in all
    pub tok_s: f64,
    /// time to first token, median (ms)
    pub ttft_p50_ms: f64,
    /// time to first token, 99th percentile (ms)
    pub ttft_p99_ms: f64,
    /// time between streamed pieces, median (ms)
    pub itl_p50_ms: f64,
    /// time between streamed pieces, 99th percentile (ms)
    pub itl_p99_ms: f64,
    /// the first failures' messages
    pub errors: Vec<String>,
}

#[derive(Default)]
struct Tally {
    ttft: Vec<f64>,
    itl: Vec<f64>,
    tokens: usize,
    failed: usize,
    errors: Vec<String>,
}

/// The `q` quantile of sorted values (0 when empty).
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// Runs the load test.
///
/// # Errors
/// Bad settings or a runtime that cannot start; failed requests are counted, not errors.
pub fn run(o: &LoadOptions) -> Result<LoadReport, String> {
    if o.streams == 0 || o.requests == 0 || o.max_tokens == 0 {
        return Err("--streams, --requests and --max-tokens must be at least 1".into());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))?;
    rt.block_on(run_async(o.clone()))
}

async fn run_async(o: LoadOptions) -> Result<LoadReport, String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs_f64(o.timeout_s.max(1.0)))
        .build()
        .map_err(|e| e.to_string())?;
    let next = Arc::new(AtomicUsize::new(0));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..o.streams.min(o.requests) {
        let (client, next, tally, o) = (client.clone(), next.clone(), tally.clone(), o.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Relaxed);
                if i >= o.requests {
                    return;
                }
                let r = one(&client, &o, i).await;
                let mut t = tally.lock().unwrap_or_else(|e| e.into_inner());
                match r {
                    Ok((ttft, itl, tokens)) => {
                        t.ttft.push(ttft);
                        t.itl.extend(itl);
                        t.tokens += tokens;
                    }
                    Err(e) => {
                        t.failed += 1;
                        if t.errors.len() < 5 {
                            t.errors.push(format!("request {i}: {e}"));
                        }
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())?;
    }
    let seconds = start.elapsed().as_secs_f64();
    let mut t = std::mem::take(&mut *tally.lock().unwrap_or_else(|e| e.into_inner()));
    t.ttft.sort_by(f64::total_cmp);
    t.itl.sort_by(f64::total_cmp);
    Ok(LoadReport {
        requests: o.requests,
        failed: t.failed,
        completion_tokens: t.tokens,
        seconds,
        tok_s: t.tokens as f64 / seconds.max(1e-9),
        ttft_p50_ms: quantile(&t.ttft, 0.5) * 1e3,
        ttft_p99_ms: quantile(&t.ttft, 0.99) * 1e3,
        itl_p50_ms: quantile(&t.itl, 0.5) * 1e3,
        itl_p99_ms: quantile(&t.itl, 0.99) * 1e3,
        errors: t.errors,
    })
}

/// One streamed request: its time to first token, the gaps between pieces and its tokens.
async fn one(
    client: &reqwest::Client,
    o: &LoadOptions,
    i: usize,
) -> Result<(f64, Vec<f64>, usize), String> {
    use tokio_stream::StreamExt;
    let prompt = format!("{} #{i}", o.prompt);
    let mut body = json!({
        "model": o.model, "max_tokens": o.max_tokens, "temperature": 0, "stream": true,
        "stream_options": {"include_usage": true},
    });
    if o.ignore_eos {
        body["ignore_eos"] = json!(true);
    }
    let path = if o.chat {
        body["messages"] = json!([{"role": "user", "content": prompt}]);
        "/v1/chat/completions"
    } else {
        body["prompt"] = json!(prompt);
        "/v1/completions"
    };
    let url = format!("{}{path}", o.url.trim_end_matches('/'));
    let t0 = Instant::now();
    let resp = client
        .post(&url)
        .json(&body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status();
    if !status.is_success() {
        let text = resp.text().await.unwrap_or_default();
        return Err(format!("HTTP {status}: {text}"));
    }
    let mut stream = resp.bytes_stream();
    let mut buf = String::new();
    let (mut first, mut last) = (None::<f64>, 0.0f64);
    let mut gaps = Vec::new();
    let (mut pieces, mut usage, mut finished, mut done) = (0usize, None::<usize>, false, false);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| e.to_string())?;
        // servers end SSE lines with \n or \r\n
        buf.push_str(&String::from_utf8_lossy(&chunk));
        if buf.contains('\r') {
            buf = buf.replace("\r\n", "\n");
        }
        while let Some(end) = buf.find("\n\n") {
            let event: String = buf.drain(..end + 2).collect();
            for line in event.lines() {
                let Some(data) = line.strip_prefix("data:") else {
                    continue;
                };
                let data = data.trim();
                if data == "[DONE]" {
                    done = true;
                    continue;
                }
                let v: Value =
                    serde_json::from_str(data).map_err(|e| format!("bad event {data}: {e}"))?;
                if let Some(e) = v.get("error") {
                    return Err(format!("error event: {e}"));
                }
                if let Some(u) = v["usage"]["completion_tokens"].as_u64() {
                    usage = Some(u as usize);
                }
                for c in v["choices"].as_array().into_iter().flatten() {
                    let text = c["delta"]["content"]
                        .as_str()
                        .or_else(|| c["text"].as_str())
                        .unwrap_or("");
                    if !text.is_empty() {
                        let now = t0.elapsed().as_secs_f64();
                        match first {
                            None => first = Some(now),
                            Some(_) => gaps.push(now - last),
                        }
                        last = now;
                        pieces += 1;
                    }
                    if c["finish_reason"].is_string() {
                        finished = true;
                    }
                }
            }
        }
    }
    if !done || !finished {
        return Err(format!(
            "the stream ended without {}",
            if finished {
                "[DONE]"
            } else {
                "a finish_reason"
            }
        ));
    }
    let tokens = usage.unwrap_or(pieces);
    if o.ignore_eos && usage.is_some_and(|u| u != o.max_tokens) {
        return Err(format!(
            "{tokens} tokens generated, {} asked for with ignore_eos",
            o.max_tokens
        ));
    }
    Ok((first.unwrap_or(last), gaps, tokens))
}
