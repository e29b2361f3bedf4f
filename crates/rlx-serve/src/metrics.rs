//! The server's counters and gauges, written in Prometheus' text format by `GET /metrics`.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Upper bounds (seconds) of the time-to-first-token histogram's buckets.
const TTFT_BUCKETS: [f64; 10] = [0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0];

/// Everything `/metrics` reports; shared by the routes and the workers.
#[derive(Default)]
pub struct Metrics {
    /// answered requests by route and status
    requests: Mutex<Vec<(String, u16, u64)>>,
    /// prompt tokens of admitted requests
    pub prompt_tokens: AtomicU64,
    /// tokens generated
    pub generated_tokens: AtomicU64,
    /// texts embedded
    pub embedded_texts: AtomicU64,
    /// requests waiting for a place in the batch
    pub queue_depth: AtomicU64,
    /// sequences in the running batch
    pub batch_size: AtomicU64,
    /// decode steps run
    pub decode_steps: AtomicU64,
    /// sequences ended because their client went away or their time ran out
    pub cancelled: AtomicU64,
    /// bytes of device memory the language model holds (weights and KV cache)
    pub device_bytes: AtomicU64,
    ttft: Mutex<Histogram>,
}

#[derive(Default)]
struct Histogram {
    counts: [u64; TTFT_BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Metrics {
    /// Counts an answered request.
    pub fn request(&self, route: &str, status: u16) {
        let mut r = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        match r.iter_mut().find(|(p, s, _)| p == route && *s == status) {
            Some(e) => e.2 += 1,
            None => r.push((route.to_string(), status, 1)),
        }
    }

    /// Records a time to first token (seconds from the request's arrival).
    pub fn first_token(&self, seconds: f64) {
        let mut h = self.ttft.lock().unwrap_or_else(|e| e.into_inner());
        for (i, b) in TTFT_BUCKETS.iter().enumerate() {
            if seconds <= *b {
                h.counts[i] += 1;
            }
        }
        h.count += 1;
        h.sum += seconds;
    }

    /// The text `/metrics` answers with.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let mut counter = |name: &str, help: &str, kind: &str, v: u64| {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
        };
        counter(
            "rlx_prompt_tokens_total",
            "Prompt tokens of admitted requests.",
            "counter",
            self.prompt_tokens.load(Relaxed),
        );
        counter(
            "rlx_generated_tokens_total",
            "Tokens generated.",
            "counter",
            self.generated_tokens.load(Relaxed),
        );
        counter(
            "rlx_embedded_texts_total",
            "Texts embedded.",
            "counter",
            self.embedded_texts.load(Relaxed),
        );
        counter(
            "rlx_decode_steps_total",
            "Decode steps of the running batch.",
            "counter",
            self.decode_steps.load(Relaxed),
        );
        counter(
            "rlx_cancelled_total",
            "Sequences ended early: client gone or time out.",
            "counter",
            self.cancelled.load(Relaxed),
        );
        counter(
            "rlx_queue_depth",
            "Requests waiting for a place in the batch.",
            "gauge",
            self.queue_depth.load(Relaxed),
        );
        counter(
            "rlx_batch_size",
            "Sequences in the running batch.",
            "gauge",
            self.batch_size.load(Relaxed),
        );
        counter(
            "rlx_device_memory_bytes",
            "Device memory held for weights and KV cache.",
            "gauge",
            self.device_bytes.load(Relaxed),
        );
        let _ = writeln!(
            s,
            "# HELP rlx_requests_total Requests answered, by route and status.\n# TYPE \
             rlx_requests_total counter"
        );
        for (route, status, n) in self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = writeln!(
                s,
                "rlx_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
            );
        }
        let h = self.ttft.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(
            s,
            "# HELP rlx_time_to_first_token_seconds From a request's arrival to its first \
             token.\n# TYPE rlx_time_to_first_token_seconds histogram"
        );
        for (b, c) in TTFT_BUCKETS.iter().zip(h.counts) {
            let _ = writeln!(
                s,
                "rlx_time_to_first_token_seconds_bucket{{le=\"{b}\"}} {c}"
            );
        }
        let _ = writeln!(
            s,
            "rlx_time_to_first_token_seconds_bucket{{le=\"+Inf\"}} {}\n\
             rlx_time_to_first_token_seconds_sum {}\nrlx_time_to_first_token_seconds_count {}",
            h.count, h.sum, h.count
        );
        s
    }
}
