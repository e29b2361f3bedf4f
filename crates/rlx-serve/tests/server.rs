//! `rlx serve` on loopback with a random Llama folder on the CPU: every route, streaming and
//! not, answers as the OpenAI API does and with the tokens the engine makes alone; bad
//! requests get 400 with a JSON error body; a full queue gets 429; a client that leaves
//! frees its sequence; the load test checks every response.

use rlx_llm::{Engine, EngineSettings, Llama, Sampling};
use rlx_models::llama::sample::RandomLlama;
use rlx_serve::{ServeOptions, Server};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn folder(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rlx-serve-{tag}-{}", std::process::id()));
    RandomLlama {
        vocab: 64,
        ..Default::default()
    }
    .write(&dir)
    .expect("writes");
    dir
}

fn server(dir: &std::path::Path, f: impl FnOnce(&mut ServeOptions)) -> Server {
    let mut o = ServeOptions {
        model: Some(dir.to_path_buf()),
        device: "cpu".into(),
        port: 0,
        max_sequences: 4,
        threads: Some(1),
        default_max_tokens: 8,
        ..Default::default()
    };
    f(&mut o);
    rlx_serve::start(o).expect("starts")
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

async fn post(url: &str, body: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("sends");
    let status = r.status().as_u16();
    let text = r.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|_| json!({"raw": text})),
    )
}

/// Data lines of an SSE body.
fn events(body: &str) -> Vec<String> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data:").map(|d| d.trim().to_string()))
        .collect()
}

/// Greedy tokens of `prompt` from the engine alone, as text.
fn expected(dir: &std::path::Path, prompt: &str, n: usize) -> String {
    let model = Llama::open(dir).expect("loads");
    let ids = model.tokenizer.encode(prompt).expect("encodes");
    let mut e = Engine::new(
        &model,
        rlx_driver::Device::Cpu,
        EngineSettings {
            threads: Some(1),
            ..Default::default()
        },
    )
    .expect("engine");
    let st = e
        .generate(&ids, n, &Sampling::default(), &[], &mut |_| {})
        .expect("generates");
    model.tokenizer.decode(&st.tokens, true).expect("decodes")
}

#[test]
fn routes_answer_like_the_openai_api() {
    let dir = folder("routes");
    let want = expected(&dir, "w5 w9 w11", 6);
    let s = server(&dir, |_| {});
    let base = format!("http://{}", s.addr());
    rt().block_on(async {
        let health = reqwest::get(format!("{base}/health"))
            .await
            .expect("health");
        assert_eq!(health.status().as_u16(), 200);
        let models: Value = reqwest::get(format!("{base}/v1/models"))
            .await
            .expect("models")
            .json()
            .await
            .expect("json");
        assert_eq!(models["data"][0]["object"], "model");

        // a text completion, greedy, past the end token: the engine's own tokens
        let (st, v) = post(
            &format!("{base}/v1/completions"),
            r#"{"prompt":"w5 w9 w11","max_tokens":6,"temperature":0,"ignore_eos":true}"#,
        )
        .await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["object"], "text_completion");
        assert_eq!(v["choices"][0]["text"], want.as_str());
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        assert_eq!(v["usage"]["completion_tokens"], 6);
        assert_eq!(v["usage"]["prompt_tokens"], 3);

        // the same streamed: the pieces join to the same text, then usage and [DONE]
        let body = reqwest::Client::new()
            .post(format!("{base}/v1/completions"))
            .json(&json!({"prompt":"w5 w9 w11","max_tokens":6,"temperature":0,
                "ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}))
            .send()
            .await
            .expect("sends")
            .text()
            .await
            .expect("body");
        let ev = events(&body);
        assert_eq!(ev.last().map(String::as_str), Some("[DONE]"), "{body}");
        let mut text = String::new();
        let mut usage = None;
        for e in &ev[..ev.len() - 1] {
            let v: Value = serde_json::from_str(e).expect("json event");
            if let Some(t) = v["choices"][0]["text"].as_str() {
                text.push_str(t);
            }
            if v["usage"].is_object() {
                usage = Some(v["usage"]["completion_tokens"].clone());
            }
        }
        assert_eq!(text, want);
        assert_eq!(usage, Some(json!(6)));

        // chat: the template wraps the message; two choices; a stop string ends the text
        let (st, v) = post(
            &format!("{base}/v1/chat/completions"),
            r#"{"messages":[{"role":"user","content":"w7 w8"}],"max_tokens":5,"n":2,
               "temperature":0.8,"seed":3,"ignore_eos":true}"#,
        )
        .await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["choices"].as_array().map(Vec::len), Some(2));
        assert_eq!(v["choices"][1]["message"]["role"], "assistant");
        assert_eq!(v["usage"]["completion_tokens"], 10);
        let stop = want.split(' ').nth(2).expect("three words").to_string();
        let (st, v) = post(
            &format!("{base}/v1/completions"),
            &json!({"prompt":"w5 w9 w11","max_tokens":6,"temperature":0,"ignore_eos":true,
                "stop":[stop]})
            .to_string(),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        let head = want[..want.find(&stop).expect("in text")].to_string();
        assert_eq!(v["choices"][0]["text"], head.as_str());

        let metrics = reqwest::get(format!("{base}/metrics"))
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text");
        assert!(metrics.contains("rlx_generated_tokens_total"), "{metrics}");
        assert!(
            metrics.contains("rlx_requests_total{route=\"/v1/completions\",status=\"200\"} 3"),
            "{metrics}"
        );
        assert!(metrics.contains("rlx_time_to_first_token_seconds_count"));
    });
    s.stop();
}

#[test]
fn bad_requests_get_400_with_a_json_error() {
    let dir = folder("bad");
    let s = server(&dir, |o| o.context = Some(32));
    let base = format!("http://{}", s.addr());
    rt().block_on(async {
        let chat = format!("{base}/v1/chat/completions");
        let cases: &[(&str, &str, &str)] = &[
            (&chat, "{not json", "malformed JSON"),
            (&chat, "", "no body"),
            (&chat, r#"{"messages":"hi"}"#, "invalid request"),
            (&chat, r#"{"messages":[]}"#, "must not be empty"),
            (
                &chat,
                r#"{"messages":[{"role":"user","content":""}]}"#,
                "empty",
            ),
            (
                &chat,
                r#"{"messages":[{"role":"user","content":"w3"}],"max_tokens":"x"}"#,
                "invalid request",
            ),
            (
                &chat,
                r#"{"messages":[{"role":"user","content":"w3"}],"max_tokens":1000}"#,
                "context",
            ),
            (
                &chat,
                r#"{"messages":[{"role":"user","content":"w3"}],"temperature":-1}"#,
                "temperature",
            ),
            (
                &chat,
                r#"{"messages":[{"role":"user","content":"w3"}],"n":0}"#,
                "n must be",
            ),
            (
                &format!("{base}/v1/completions"),
                r#"{"prompt":[1,2,9999]}"#,
                "outside the vocabulary",
            ),
            (
                &format!("{base}/v1/completions"),
                r#"{"prompt":""}"#,
                "empty",
            ),
            (
                &format!("{base}/v1/embeddings"),
                r#"{"input":"x"}"#,
                "no embedding model",
            ),
        ];
        for (url, body, needle) in cases {
            let (st, v) = post(url, body).await;
            assert_eq!(st, 400, "{body}: {v}");
            let m = v["error"]["message"].as_str().unwrap_or("");
            assert!(m.contains(needle), "{body}: `{m}` lacks `{needle}`");
            assert_eq!(v["error"]["type"], "invalid_request_error");
        }
        let (st, v) = post(&format!("{base}/v1/nothing"), "{}").await;
        assert_eq!(st, 404, "{v}");
        // the server still works after all that
        let (st, v) = post(
            &format!("{base}/v1/completions"),
            r#"{"prompt":"w3 w4","max_tokens":2}"#,
        )
        .await;
        assert_eq!(st, 200, "{v}");
    });
    s.stop();
}

#[test]
fn a_full_queue_gets_429() {
    let dir = folder("queue");
    let s = server(&dir, |o| o.max_queue = 0);
    let base = format!("http://{}", s.addr());
    rt().block_on(async {
        let (st, v) = post(&format!("{base}/v1/completions"), r#"{"prompt":"w3"}"#).await;
        assert_eq!(st, 429, "{v}");
        assert_eq!(v["error"]["type"], "rate_limit_error");
    });
    s.stop();
}

async fn metric(base: &str, name: &str) -> f64 {
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1.0)
}

#[test]
fn a_client_that_leaves_frees_its_sequence() {
    let dir = folder("cancel");
    let s = server(&dir, |_| {});
    let base = format!("http://{}", s.addr());
    rt().block_on(async {
        let mut r = reqwest::Client::new()
            .post(format!("{base}/v1/completions"))
            .json(&json!({"prompt":"w3 w4","max_tokens":1000,"ignore_eos":true,"stream":true}))
            .send()
            .await
            .expect("sends");
        assert_eq!(r.status().as_u16(), 200);
        let first = r.chunk().await.expect("a chunk");
        assert!(first.is_some());
        let t = Instant::now();
        while metric(&base, "rlx_batch_size").await != 1.0 && t.elapsed().as_secs() < 20 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        drop(r);
        let t = Instant::now();
        while metric(&base, "rlx_cancelled_total").await < 1.0 {
            assert!(
                t.elapsed().as_secs() < 20,
                "the sequence was not freed after its client left"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let t = Instant::now();
        while metric(&base, "rlx_batch_size").await != 0.0 {
            assert!(t.elapsed().as_secs() < 20, "the batch did not empty");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(metric(&base, "rlx_generated_tokens_total").await < 1000.0);
    });
    s.stop();
}

#[test]
fn concurrent_streams_get_their_own_tokens_and_the_load_test_checks_them() {
    let dir = folder("load");
    let want = expected(&dir, "w5 w9 w11", 6);
    let s = server(&dir, |o| o.max_sequences = 3);
    let base = format!("http://{}", s.addr());
    rt().block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..6 {
            let url = format!("{base}/v1/completions");
            tasks.push(tokio::spawn(async move {
                post(
                    &url,
                    r#"{"prompt":"w5 w9 w11","max_tokens":6,"temperature":0,"ignore_eos":true}"#,
                )
                .await
            }));
        }
        for t in tasks {
            let (st, v) = t.await.expect("joins");
            assert_eq!(st, 200, "{v}");
            assert_eq!(v["choices"][0]["text"], want.as_str());
        }
    });
    let report = rlx_serve::load::run(&rlx_serve::load::LoadOptions {
        url: base.clone(),
        streams: 4,
        requests: 8,
        max_tokens: 5,
        prompt: "w3 w4".into(),
        chat: true,
        ignore_eos: true,
        model: "m".into(),
        timeout_s: 60.0,
    })
    .expect("runs");
    assert_eq!(report.failed, 0, "{:?}", report.errors);
    assert_eq!(report.completion_tokens, 40);
    assert!(report.ttft_p50_ms > 0.0 && report.tok_s > 0.0);
    s.stop();
}

#[test]
fn embeddings_of_minilm_when_fetched() {
    let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/minilm");
    if !d.join("model.safetensors").is_file() {
        rlx_driver::testing::skip(
            "rlx-serve::embeddings_of_minilm_when_fetched",
            "models/minilm not fetched (scripts/fetch-models.sh)",
        );
        return;
    }
    let s = rlx_serve::start(ServeOptions {
        embedding_model: Some(d),
        device: "cpu".into(),
        port: 0,
        ..Default::default()
    })
    .expect("starts");
    let base = format!("http://{}", s.addr());
    rt().block_on(async {
        let texts = [
            "A cat sat on the mat.",
            "A kitten rests on a rug.",
            "Stocks fell.",
        ];
        let (st, v) = post(
            &format!("{base}/v1/embeddings"),
            &json!({"input": texts}).to_string(),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        let rows: Vec<Vec<f64>> = (0..3)
            .map(|i| {
                v["data"][i]["embedding"]
                    .as_array()
                    .expect("vector")
                    .iter()
                    .map(|x| x.as_f64().expect("number"))
                    .collect()
            })
            .collect();
        assert_eq!(rows[0].len(), 384);
        let cos = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
        assert!(cos(&rows[0], &rows[1]) > cos(&rows[0], &rows[2]));
        // one text alone embeds as in the batch (batching by length changes nothing)
        let (_, one) = post(
            &format!("{base}/v1/embeddings"),
            &json!({"input": texts[2]}).to_string(),
        )
        .await;
        let alone: Vec<f64> = one["data"][0]["embedding"]
            .as_array()
            .expect("vector")
            .iter()
            .map(|x| x.as_f64().expect("number"))
            .collect();
        let diff = alone
            .iter()
            .zip(&rows[2])
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(diff < 1e-4, "{diff}");
        let (st, _) = post(
            &format!("{base}/v1/chat/completions"),
            r#"{"messages":[{"role":"user","content":"x"}]}"#,
        )
        .await;
        assert_eq!(st, 400, "no language model");
    });
    s.stop();
}
