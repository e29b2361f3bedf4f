//! The OpenAI API's request bodies as RLX reads them, checked before anything runs, and the
//! error body every failure answers with.

use rlx_llm::chat::Message;
use rlx_llm::Sampling;
use serde::Deserialize;
use serde_json::{json, Value};

/// An error answered to the client: an HTTP status and an OpenAI-style JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status
    pub status: u16,
    /// `invalid_request_error`, `rate_limit_error`, `timeout`, `server_error`, ...
    pub kind: &'static str,
    /// what went wrong, for a person
    pub message: String,
    /// the request field at fault, if one is
    pub param: Option<String>,
}

impl ApiError {
    /// A 400 for the field `param`.
    pub fn bad(param: Option<&str>, message: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            kind: "invalid_request_error",
            message: message.into(),
            param: param.map(str::to_string),
        }
    }

    /// An error of `status` and `kind`.
    pub fn new(status: u16, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            kind,
            message: message.into(),
            param: None,
        }
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.status,
        }})
    }
}

/// `stop` as a string or a list of strings.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    /// one stop string
    One(String),
    /// several
    Many(Vec<String>),
}

/// `stream_options`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    /// send a last chunk with the usage counts
    #[serde(default)]
    pub include_usage: bool,
}

/// The settings chat and text completions share.
#[derive(Debug, Clone, Deserialize)]
pub struct Common {
    /// the model name (any name is accepted: the server runs one model)
    #[serde(default)]
    pub model: Option<String>,
    /// most tokens to generate
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// newer name of `max_tokens`
    #[serde(default)]
    pub max_completion_tokens: Option<u64>,
    /// sampling temperature (0: greedy)
    #[serde(default)]
    pub temperature: Option<f64>,
    /// nucleus mass
    #[serde(default)]
    pub top_p: Option<f64>,
    /// keep the k most likely tokens
    #[serde(default)]
    pub top_k: Option<u64>,
    /// drop tokens below this fraction of the most likely
    #[serde(default)]
    pub min_p: Option<f64>,
    /// penalty of tokens already in the sequence
    #[serde(default)]
    pub repetition_penalty: Option<f64>,
    /// sampling seed
    #[serde(default)]
    pub seed: Option<u64>,
    /// completions per request
    #[serde(default)]
    pub n: Option<u64>,
    /// stop strings
    #[serde(default)]
    pub stop: Option<Stop>,
    /// stream server-sent events
    #[serde(default)]
    pub stream: Option<bool>,
    /// streaming settings
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// generate `max_tokens` even past the end-of-sequence token (benchmarks)
    #[serde(default)]
    pub ignore_eos: Option<bool>,
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    /// the conversation
    pub messages: Vec<ChatMessage>,
    /// the shared settings
    #[serde(flatten)]
    pub common: Common,
}

/// One message as clients send it: content as a string or a list of text parts.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, ...
    pub role: String,
    /// the text, or text parts
    #[serde(default)]
    pub content: Option<Content>,
}

/// Message content.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// plain text
    Text(String),
    /// parts (`{"type": "text", "text": ...}`)
    Parts(Vec<Part>),
}

/// A content part.
#[derive(Debug, Clone, Deserialize)]
pub struct Part {
    /// `text` (other kinds are refused)
    #[serde(rename = "type")]
    pub kind: String,
    /// the text of a text part
    #[serde(default)]
    pub text: Option<String>,
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    /// the prompt: text, or a list of one text
    pub prompt: Prompt,
    /// the shared settings
    #[serde(flatten)]
    pub common: Common,
}

/// A completion prompt.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    /// one text
    Text(String),
    /// texts (exactly one is accepted)
    Texts(Vec<String>),
    /// token ids
    Tokens(Vec<u32>),
}

/// `POST /v1/embeddings`.
#[derive(Debug, Clone, Deserialize)]
pub struct EmbeddingRequest {
    /// one text or several
    pub input: EmbedInput,
    /// the model name (any is accepted)
    #[serde(default)]
    pub model: Option<String>,
    /// `float` (the default) or `base64` is refused
    #[serde(default)]
    pub encoding_format: Option<String>,
}

/// Embedding input.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum EmbedInput {
    /// one text
    One(String),
    /// several texts
    Many(Vec<String>),
}

/// Parses a JSON body into `T`; a syntax error or a field of the wrong type is a 400 naming
/// the place.
///
/// # Errors
/// As above.
pub fn parse<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, ApiError> {
    if body.is_empty() {
        return Err(ApiError::bad(None, "the request has no body; send JSON"));
    }
    serde_json::from_slice(body).map_err(|e| {
        let what = match e.classify() {
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                "malformed JSON"
            }
            _ => "invalid request",
        };
        ApiError::bad(None, format!("{what}: {e}"))
    })
}

/// A generation request checked and ready for the worker.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// most tokens to generate
    pub max_tokens: usize,
    /// how to sample
    pub sampling: Sampling,
    /// stop strings
    pub stop: Vec<String>,
    /// completions to make
    pub n: usize,
    /// stream as server-sent events
    pub stream: bool,
    /// a last chunk with usage when streaming
    pub include_usage: bool,
    /// keep going past the end-of-sequence token
    pub ignore_eos: bool,
}

/// Most completions per request.
pub const MAX_N: usize = 16;

/// Checks the shared settings; `default_max_tokens` applies when none is given.
///
/// # Errors
/// A setting out of range, as a 400 naming it.
pub fn generation(c: &Common, default_max_tokens: usize) -> Result<Generation, ApiError> {
    let max_tokens = c.max_completion_tokens.or(c.max_tokens);
    let max_tokens = match max_tokens {
        Some(0) => {
            return Err(ApiError::bad(
                Some("max_tokens"),
                "max_tokens must be at least 1",
            ))
        }
        Some(m) => usize::try_from(m).unwrap_or(usize::MAX),
        None => default_max_tokens.max(1),
    };
    let n = usize::try_from(c.n.unwrap_or(1)).unwrap_or(usize::MAX);
    if n == 0 || n > MAX_N {
        return Err(ApiError::bad(
            Some("n"),
            format!("n must be between 1 and {MAX_N}, got {n}"),
        ));
    }
    let stop = match &c.stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s.clone()],
        Some(Stop::Many(v)) => v.clone(),
    };
    if stop.len() > 4 {
        return Err(ApiError::bad(Some("stop"), "at most 4 stop strings"));
    }
    let temperature = c.temperature.unwrap_or(1.0);
    let sampling = Sampling {
        temperature,
        top_p: c.top_p.unwrap_or(1.0),
        top_k: usize::try_from(c.top_k.unwrap_or(0)).unwrap_or(usize::MAX),
        min_p: c.min_p.unwrap_or(0.0),
        repetition_penalty: c.repetition_penalty.unwrap_or(1.0),
        seed: c.seed.unwrap_or(0),
    };
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::bad(
            Some("temperature"),
            format!("temperature must be between 0 and 2, got {temperature}"),
        ));
    }
    sampling.validate().map_err(|m| ApiError::bad(None, m))?;
    Ok(Generation {
        max_tokens,
        sampling,
        stop,
        n,
        stream: c.stream.unwrap_or(false),
        include_usage: c.stream_options.as_ref().is_some_and(|o| o.include_usage),
        ignore_eos: c.ignore_eos.unwrap_or(false),
    })
}

/// The messages of a chat request as the template takes them.
///
/// # Errors
/// No messages, an empty role, or non-text content, as a 400.
pub fn messages(r: &ChatRequest) -> Result<Vec<Message>, ApiError> {
    if r.messages.is_empty() {
        return Err(ApiError::bad(
            Some("messages"),
            "messages must not be empty",
        ));
    }
    let mut out = Vec::with_capacity(r.messages.len());
    for (i, m) in r.messages.iter().enumerate() {
        if m.role.trim().is_empty() {
            return Err(ApiError::bad(
                Some("messages"),
                format!("messages[{i}] has an empty role"),
            ));
        }
        let content = match &m.content {
            None => String::new(),
            Some(Content::Text(t)) => t.clone(),
            Some(Content::Parts(parts)) => {
                let mut s = String::new();
                for p in parts {
                    match (p.kind.as_str(), &p.text) {
                        ("text", Some(t)) => s.push_str(t),
                        (k, _) => {
                            return Err(ApiError::bad(
                                Some("messages"),
                                format!(
                                    "messages[{i}]: content part of type `{k}` is not \
                                     supported (text only)"
                                ),
                            ))
                        }
                    }
                }
                s
            }
        };
        out.push(Message::new(&m.role, &content));
    }
    if out.iter().all(|m| m.content.trim().is_empty()) {
        return Err(ApiError::bad(
            Some("messages"),
            "every message is empty: nothing to answer",
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked() {
        let r: ChatRequest = parse(
            br#"{"messages":[{"role":"user","content":"hi"}],
            "max_tokens":5,"temperature":0,"stop":"x","n":2,"unknown":{"a":1}}"#,
        )
        .unwrap();
        let g = generation(&r.common, 16).unwrap();
        assert_eq!(
            (g.max_tokens, g.n, g.stop.clone()),
            (5, 2, vec!["x".into()])
        );
        assert_eq!(messages(&r).unwrap()[0].content, "hi");
        let e = parse::<ChatRequest>(br#"{"messages": "hi"}"#).unwrap_err();
        assert_eq!(e.status, 400);
        let e = parse::<ChatRequest>(b"{not json").unwrap_err();
        assert!(e.message.starts_with("malformed JSON"), "{}", e.message);
        let e = parse::<ChatRequest>(br#"{"messages":[],"max_tokens":"many"}"#).unwrap_err();
        assert!(e.message.contains("invalid request"), "{}", e.message);
        let r: ChatRequest = parse(br#"{"messages":[]}"#).unwrap();
        assert_eq!(messages(&r).unwrap_err().param.as_deref(), Some("messages"));
        let r: ChatRequest = parse(
            br#"{"messages":[{"role":"user","content":"a"}],
            "temperature":7}"#,
        )
        .unwrap();
        assert_eq!(
            generation(&r.common, 1).unwrap_err().param.as_deref(),
            Some("temperature")
        );
        let r: ChatRequest = parse(
            br#"{"messages":[{"role":"user","content":"a"}],
            "max_tokens":0}"#,
        )
        .unwrap();
        assert!(generation(&r.common, 1).is_err());
    }
}
