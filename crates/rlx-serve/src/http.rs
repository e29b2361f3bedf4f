//! The routes: OpenAI-compatible chat and text completions (streamed as server-sent events
//! or not), embeddings, models, health and metrics.

use crate::api::{self, ApiError, ChatRequest, CompletionRequest, EmbedInput, EmbeddingRequest};
use crate::metrics::Metrics;
use crate::worker::{self, EmbedJob, EmbedWorker, Event, Input, Job, LlmSettings, LlmWorker};
use crate::{ServeError, ServeOptions, Server};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use rlx_llm::EngineSettings;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc::unbounded_channel;

/// What every route shares.
struct AppState {
    llm: Option<LlmWorker>,
    embed: Option<EmbedWorker>,
    metrics: Arc<Metrics>,
    options: ServeOptions,
    next_id: AtomicU64,
}

type Shared = Arc<AppState>;

/// Loads the models and serves on a background thread (see [`crate::start`]).
pub(crate) fn start(opts: ServeOptions) -> Result<Server, ServeError> {
    if opts.model.is_none() && opts.embedding_model.is_none() {
        return Err(ServeError::Settings(
            "give a model to serve: --model (text generation) and/or --embedding-model".into(),
        ));
    }
    if opts.max_sequences == 0 {
        return Err(ServeError::Settings(
            "--max-sequences must be at least 1".into(),
        ));
    }
    let metrics = Arc::new(Metrics::default());
    let llm = match &opts.model {
        Some(path) => Some(worker::spawn_llm(
            LlmSettings {
                path: path.clone(),
                device: opts.device.clone(),
                engine: EngineSettings {
                    threads: opts.threads,
                    max_sequences: opts.max_sequences,
                    context: opts.context,
                    exact_quant: opts.exact_quant,
                },
            },
            metrics.clone(),
        )?),
        None => None,
    };
    let embed = match &opts.embedding_model {
        Some(dir) => {
            let device = rlx_llm::llm_device(&opts.device)
                .map_err(|e| ServeError::Settings(e.to_string()))?;
            Some(worker::spawn_embed(dir.clone(), device, metrics.clone())?)
        }
        None => None,
    };
    let addr = format!("{}:{}", opts.host, opts.port);
    let listener = std::net::TcpListener::bind(&addr).map_err(|err| ServeError::Bind {
        addr: addr.clone(),
        err,
    })?;
    let bound = listener.local_addr().map_err(|err| ServeError::Bind {
        addr: addr.clone(),
        err,
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|err| ServeError::Bind { addr, err })?;
    let state = Arc::new(AppState {
        llm,
        embed,
        metrics,
        options: opts,
        next_id: AtomicU64::new(1),
    });
    let app = router(state);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("rlx-http".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("rlx serve: starting the HTTP runtime: {e}");
                    return;
                }
            };
            rt.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        eprintln!("rlx serve: {e}");
                        return;
                    }
                };
                let shutdown = async move {
                    tokio::select! {
                        _ = stop_rx => {}
                        _ = tokio::signal::ctrl_c() => {}
                    }
                };
                if let Err(e) = axum::serve(listener, app)
                    .with_graceful_shutdown(shutdown)
                    .await
                {
                    eprintln!("rlx serve: {e}");
                }
            });
        })
        .map_err(|e| ServeError::Settings(format!("starting the HTTP thread: {e}")))?;
    Ok(Server {
        addr: bound,
        stop: Some(stop_tx),
        thread: Some(thread),
    })
}

fn router(state: Shared) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .with_state(state)
}

fn error(state: &AppState, route: &str, e: &ApiError) -> Response {
    state.metrics.request(route, e.status);
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, Json(e.body())).into_response()
}

fn ok(state: &AppState, route: &str, body: Value) -> Response {
    state.metrics.request(route, 200);
    Json(body).into_response()
}

async fn not_found() -> Response {
    let e = ApiError::new(404, "not_found", "no such route; see /v1/models, /v1/chat/completions, /v1/completions, /v1/embeddings, /health, /metrics");
    (StatusCode::NOT_FOUND, Json(e.body())).into_response()
}

async fn health(State(s): State<Shared>) -> Response {
    ok(&s, "/health", json!({"status": "ok"}))
}

async fn metrics(State(s): State<Shared>) -> Response {
    s.metrics.request("/metrics", 200);
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        s.metrics.render(),
    )
        .into_response()
}

async fn models(State(s): State<Shared>) -> Response {
    let mut data = Vec::new();
    if let Some(l) = &s.llm {
        data.push(
            json!({"id": l.info.name, "object": "model", "created": 0, "owned_by": "rlx",
            "context_length": l.info.context, "device": l.info.device.name()}),
        );
    }
    if let Some(e) = &s.embed {
        data.push(json!({"id": e.name, "object": "model", "created": 0, "owned_by": "rlx"}));
    }
    ok(&s, "/v1/models", json!({"object": "list", "data": data}))
}

async fn chat(State(s): State<Shared>, body: Bytes) -> Response {
    const ROUTE: &str = "/v1/chat/completions";
    let r = match api::parse::<ChatRequest>(&body) {
        Ok(r) => r,
        Err(e) => return error(&s, ROUTE, &e),
    };
    let (messages, g) = match (
        api::messages(&r),
        api::generation(&r.common, s.options.default_max_tokens),
    ) {
        (Ok(m), Ok(g)) => (m, g),
        (Err(e), _) | (_, Err(e)) => return error(&s, ROUTE, &e),
    };
    generate(s, ROUTE, Input::Chat(messages), g, true).await
}

async fn completions(State(s): State<Shared>, body: Bytes) -> Response {
    const ROUTE: &str = "/v1/completions";
    let r = match api::parse::<CompletionRequest>(&body) {
        Ok(r) => r,
        Err(e) => return error(&s, ROUTE, &e),
    };
    let g = match api::generation(&r.common, s.options.default_max_tokens) {
        Ok(g) => g,
        Err(e) => return error(&s, ROUTE, &e),
    };
    let input = match r.prompt {
        api::Prompt::Text(t) => Input::Text(t),
        api::Prompt::Texts(mut v) if v.len() == 1 => Input::Text(v.remove(0)),
        api::Prompt::Texts(v) => {
            let e = ApiError::bad(
                Some("prompt"),
                format!(
                    "{} prompts in one request: send one (use n for several completions)",
                    v.len()
                ),
            );
            return error(&s, ROUTE, &e);
        }
        api::Prompt::Tokens(t) => Input::Tokens(t),
    };
    if matches!(&input, Input::Text(t) if t.is_empty()) {
        return error(
            &s,
            ROUTE,
            &ApiError::bad(Some("prompt"), "the prompt is empty"),
        );
    }
    generate(s, ROUTE, input, g, false).await
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Queues a generation and answers with its result, or streams it.
async fn generate(
    s: Shared,
    route: &'static str,
    input: Input,
    g: api::Generation,
    chat: bool,
) -> Response {
    let Some(llm) = &s.llm else {
        let e = ApiError::bad(
            None,
            "this server has no language model (start it with --model)",
        );
        return error(&s, route, &e);
    };
    let n = g.n as u64;
    let depth = s.metrics.queue_depth.fetch_add(n, Relaxed);
    if depth + n > s.options.max_queue as u64 {
        s.metrics.queue_depth.fetch_sub(n, Relaxed);
        let e = ApiError::new(
            429,
            "rate_limit_error",
            format!("the server is busy: {depth} requests are waiting; retry later"),
        );
        return error(&s, route, &e);
    }
    let (tx, mut rx) = unbounded_channel();
    let arrived = Instant::now();
    let deadline =
        (s.options.timeout_s > 0.0).then(|| arrived + Duration::from_secs_f64(s.options.timeout_s));
    let job = Job {
        input,
        generation: g.clone(),
        events: tx,
        arrived,
        deadline,
    };
    if llm.jobs.send(job).is_err() {
        s.metrics.queue_depth.fetch_sub(n, Relaxed);
        let e = ApiError::new(503, "server_error", "the model's thread has stopped");
        return error(&s, route, &e);
    }
    let prompt_tokens = match rx.recv().await {
        Some(Event::Accepted { prompt_tokens }) => prompt_tokens,
        Some(Event::Error(e)) => return error(&s, route, &e),
        _ => {
            let e = ApiError::new(500, "server_error", "the model's thread ended the request");
            return error(&s, route, &e);
        }
    };
    let id = format!(
        "{}-{}",
        if chat { "chatcmpl" } else { "cmpl" },
        s.next_id.fetch_add(1, Relaxed)
    );
    let created = now_s();
    let model = llm.info.name.clone();
    if g.stream {
        s.metrics.request(route, 200);
        let (out_tx, out_rx) = tokio::sync::mpsc::channel::<Result<SseEvent, Infallible>>(64);
        tokio::spawn(async move {
            let object = if chat {
                "chat.completion.chunk"
            } else {
                "text_completion"
            };
            let chunk = |choice: Value, usage: Option<Value>| {
                let mut v = json!({"id": id, "object": object, "created": created,
                    "model": model, "choices": [choice]});
                if let Some(u) = usage {
                    v["choices"] = json!([]);
                    v["usage"] = u;
                }
                SseEvent::default().data(v.to_string())
            };
            if chat {
                for index in 0..g.n {
                    let c = json!({"index": index, "delta": {"role": "assistant", "content": ""},
                        "finish_reason": null});
                    if out_tx.send(Ok(chunk(c, None))).await.is_err() {
                        return;
                    }
                }
            }
            let (mut done, mut completion) = (0, 0);
            loop {
                let ev = tokio::select! {
                    _ = out_tx.closed() => return, // the client went away: rx drops
                    ev = rx.recv() => ev,
                };
                let end = !matches!(ev, Some(Event::Text { .. } | Event::Done { .. }));
                let msg = match ev {
                    Some(Event::Text { index, text }) => {
                        let c = if chat {
                            json!({"index": index, "delta": {"content": text}, "finish_reason": null})
                        } else {
                            json!({"index": index, "text": text, "finish_reason": null, "logprobs": null})
                        };
                        chunk(c, None)
                    }
                    Some(Event::Done {
                        index,
                        finish,
                        completion_tokens,
                    }) => {
                        done += 1;
                        completion += completion_tokens;
                        let c = if chat {
                            json!({"index": index, "delta": {}, "finish_reason": finish})
                        } else {
                            json!({"index": index, "text": "", "finish_reason": finish, "logprobs": null})
                        };
                        chunk(c, None)
                    }
                    Some(Event::Error(e)) => SseEvent::default().data(e.body().to_string()),
                    Some(Event::Accepted { .. }) => continue,
                    None => SseEvent::default().data(
                        ApiError::new(500, "server_error", "the model's thread ended the request")
                            .body()
                            .to_string(),
                    ),
                };
                if out_tx.send(Ok(msg)).await.is_err() {
                    return;
                }
                if end {
                    return;
                }
                if done == g.n {
                    break;
                }
            }
            if g.include_usage {
                let u = json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                    "total_tokens": prompt_tokens + completion});
                let _ = out_tx.send(Ok(chunk(Value::Null, Some(u)))).await;
            }
            let _ = out_tx.send(Ok(SseEvent::default().data("[DONE]"))).await;
        });
        let stream = tokio_stream::wrappers::ReceiverStream::new(out_rx);
        return Sse::new(stream).into_response();
    }
    // not streaming: gather every choice
    let mut texts = vec![String::new(); g.n];
    let mut finishes = vec![""; g.n];
    let (mut done, mut completion) = (0, 0);
    while done < g.n {
        match rx.recv().await {
            Some(Event::Text { index, text }) => texts[index].push_str(&text),
            Some(Event::Done {
                index,
                finish,
                completion_tokens,
            }) => {
                finishes[index] = finish;
                completion += completion_tokens;
                done += 1;
            }
            Some(Event::Error(e)) => return error(&s, route, &e),
            Some(Event::Accepted { .. }) => {}
            None => {
                let e = ApiError::new(500, "server_error", "the model's thread ended the request");
                return error(&s, route, &e);
            }
        }
    }
    let choices: Vec<Value> = texts
        .into_iter()
        .zip(finishes)
        .enumerate()
        .map(|(index, (text, finish))| {
            if chat {
                json!({"index": index, "message": {"role": "assistant", "content": text},
                    "finish_reason": finish, "logprobs": null})
            } else {
                json!({"index": index, "text": text, "finish_reason": finish, "logprobs": null})
            }
        })
        .collect();
    let body = json!({
        "id": id,
        "object": if chat { "chat.completion" } else { "text_completion" },
        "created": created,
        "model": model,
        "choices": choices,
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion},
    });
    ok(&s, route, body)
}

async fn embeddings(State(s): State<Shared>, body: Bytes) -> Response {
    const ROUTE: &str = "/v1/embeddings";
    let r = match api::parse::<EmbeddingRequest>(&body) {
        Ok(r) => r,
        Err(e) => return error(&s, ROUTE, &e),
    };
    let Some(embed) = &s.embed else {
        let e = ApiError::bad(
            None,
            "this server has no embedding model (start it with --embedding-model)",
        );
        return error(&s, ROUTE, &e);
    };
    if let Some(f) = r.encoding_format.as_deref().filter(|f| *f != "float") {
        let e = ApiError::bad(
            Some("encoding_format"),
            format!("encoding_format `{f}` is not supported (float only)"),
        );
        return error(&s, ROUTE, &e);
    }
    let texts = match r.input {
        EmbedInput::One(t) => vec![t],
        EmbedInput::Many(v) => v,
    };
    if texts.is_empty() || texts.len() > 2048 {
        let e = ApiError::bad(
            Some("input"),
            format!("input must hold 1 to 2048 texts, got {}", texts.len()),
        );
        return error(&s, ROUTE, &e);
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    if embed.jobs.send(EmbedJob { texts, reply: tx }).is_err() {
        let e = ApiError::new(503, "server_error", "the embedding thread has stopped");
        return error(&s, ROUTE, &e);
    }
    match rx.await {
        Ok(Ok((rows, tokens))) => {
            let data: Vec<Value> = rows
                .into_iter()
                .enumerate()
                .map(|(i, v)| json!({"object": "embedding", "index": i, "embedding": v}))
                .collect();
            let body = json!({"object": "list", "data": data, "model": embed.name,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}});
            ok(&s, ROUTE, body)
        }
        Ok(Err(e)) => error(&s, ROUTE, &e),
        Err(_) => {
            let e = ApiError::new(
                500,
                "server_error",
                "the embedding thread ended the request",
            );
            error(&s, ROUTE, &e)
        }
    }
}
