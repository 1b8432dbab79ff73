//! How the agent talks to a model: the `ModelProvider` trait and its OpenAI-compatible
//! Chat Completions client (whose wire format is in `wire.rs`, its streamed answers read by
//! `stream.rs`; the conversation's messages are in `messages.rs`, re-exported here).
//!
//! The client asks for a streamed answer (`stream: true`, with the usage in a last chunk)
//! unless `[model] stream = false`; a server that answers a streamed request in one piece
//! is read as it is, and one that refuses `stream` (a 4xx naming it) is asked again without
//! it, and from then on for the client's life. A streamed request's time limit
//! (`timeout_secs`) is the wait for the answer's start and then between two of its chunks;
//! a whole answer's is the whole request. A stream cut off after text was shown is not
//! retried (the text would show twice): the turn fails and can be asked again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

pub use super::messages::{Message, ModelToolCall, Role, Usage};
use super::stream::{Assembly, SseDecoder};
use super::wire::{ChatRequest, ChatResponse, ResponseError};
use crate::config::ModelSettings;
use toolhost_calls::tool::ToolSpec;

/// Why the model did not answer.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// No model is configured.
    #[error(
        "no model is configured: set [model] base_url and model in the config file, or \
         TOOLHOST_MODEL_BASE_URL and TOOLHOST_MODEL (any OpenAI-compatible server, e.g. \
         http://localhost:11434/v1 for Ollama)"
    )]
    NotConfigured,
    /// The server could not be reached.
    #[error(
        "could not reach the model server at {url}: {detail}; check [model] base_url and that \
         the server is running"
    )]
    Unreachable {
        /// The URL.
        url: String,
        /// Why.
        detail: String,
    },
    /// The server refused the key.
    #[error(
        "the model server at {url} refused the request ({status}): {body}; check the API key \
         (TOOLHOST_API_KEY, or the variable named by [model] api_key_env)"
    )]
    Auth {
        /// The URL.
        url: String,
        /// The HTTP status.
        status: u16,
        /// What it said.
        body: String,
    },
    /// The server answered with an error status.
    #[error("the model server at {url} answered {status}: {body}")]
    Status {
        /// The URL.
        url: String,
        /// The HTTP status.
        status: u16,
        /// What it said.
        body: String,
    },
    /// The answer was not a Chat Completions response.
    #[error("the model server's answer was malformed ({detail}): {body}")]
    Malformed {
        /// What was wrong.
        detail: String,
        /// The start of the answer.
        body: String,
    },
    /// The server refused the request as longer than the model's context window.
    #[error(
        "the model server at {url} refused the conversation as too long ({status}): {body}; \
         set [model] context_window to the model's real window (in tokens) so toolhost \
         compacts the conversation before it is sent"
    )]
    ContextLength {
        /// The URL.
        url: String,
        /// The HTTP status.
        status: u16,
        /// What it said.
        body: String,
    },
    /// The request took too long.
    #[error(
        "the model server did not answer within {0:?} (a streamed answer: between two of its \
         chunks); raise [model] timeout_secs or try again"
    )]
    Timeout(Duration),
    /// The turn was cancelled while waiting.
    #[error("cancelled while waiting for the model")]
    Cancelled,
}

/// Where streamed text goes as it arrives (the chat prints it).
pub type TextSink<'a> = &'a (dyn Fn(&str) + Send + Sync);

/// The model's answer to one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// The assistant's message.
    pub message: Message,
    /// What the server reported the request cost, if it did.
    pub usage: Option<Usage>,
}

/// A model the agent can talk to.
#[async_trait]
pub trait ModelProvider: Send + Sync {
    /// The model's name (what tools see as `ctx.model()`).
    fn model(&self) -> &str;

    /// The model's next message after `messages`, offered `tools`, with the usage the
    /// server reported. A provider that streams hands the answer's text to `on_text` as it
    /// arrives (the whole message is returned all the same); one that does not, never
    /// calls it.
    async fn complete(
        &self,
        messages: &[Message],
        tools: &[&ToolSpec],
        on_text: Option<TextSink<'_>>,
        cancel: &CancellationToken,
    ) -> Result<Completion, ModelError>;
}

/// The Chat Completions client.
pub struct OpenAiClient {
    http: reqwest::Client,
    settings: ModelSettings,
    url: String,
    /// Whether requests ask for a stream: `[model] stream`, until the server refuses one.
    streams: AtomicBool,
}

/// What an error message quotes of a server's answer.
fn excerpt(text: &str) -> String {
    crate::text::shorten(text.trim(), 400)
}

/// Whether an error answer refuses `stream` or `stream_options`.
fn refuses_stream(status: u16, body: &str) -> bool {
    (400..500).contains(&status)
        && !matches!(status, 401 | 403 | 408 | 413 | 429)
        && body.to_lowercase().contains("stream")
}

/// Whether an error answer says the request is longer than the model's window.
fn is_context_length(status: u16, body: &str) -> bool {
    let body = body.to_lowercase();
    status == 413
        || (status == 400
            && ["context", "length", "token", "too long"]
                .iter()
                .any(|w| body.contains(w)))
}

impl OpenAiClient {
    /// A client for the server `settings` name.
    pub fn new(settings: ModelSettings) -> Result<OpenAiClient, ModelError> {
        // rustls needs one process-wide crypto provider; a second install is a no-op.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let url = format!(
            "{}/chat/completions",
            settings.base_url.trim_end_matches('/')
        );
        // The time limit is per request: a whole answer's, or a stream's between chunks.
        let http = reqwest::Client::builder()
            .connect_timeout(settings.timeout)
            .build()
            .map_err(|e| ModelError::Unreachable {
                url: url.clone(),
                detail: format!("could not set up the HTTP client: {e}"),
            })?;
        Ok(OpenAiClient {
            http,
            streams: AtomicBool::new(settings.stream),
            settings,
            url,
        })
    }

    fn unreachable(&self, detail: String) -> ModelError {
        ModelError::Unreachable {
            url: self.url.clone(),
            detail,
        }
    }

    /// One request: `body` (streamed or not), its answer read whole or as it streams.
    async fn once(
        &self,
        body: &ChatRequest<'_>,
        on_text: Option<TextSink<'_>>,
    ) -> Result<Completion, Attempt> {
        let limit = self.settings.timeout;
        let mut request = self.http.post(&self.url).json(body);
        if !body.stream {
            request = request.timeout(limit);
        }
        if let Some(key) = &self.settings.api_key {
            request = request.bearer_auth(key);
        }
        let sent = match tokio::time::timeout(limit, request.send()).await {
            Ok(sent) => sent,
            Err(_) => return Err(Attempt::Retry(ModelError::Timeout(limit), None)),
        };
        let mut response = sent.map_err(|e| {
            if e.is_timeout() {
                Attempt::Retry(ModelError::Timeout(limit), None)
            } else {
                Attempt::Retry(self.unreachable(e.to_string()), None)
            }
        })?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .and_then(|s| Duration::try_from_secs_f64(s).ok());
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        if (200..=299).contains(&status) && body.stream && !content_type.contains("json") {
            return self
                .read_stream(&mut response, &content_type, on_text)
                .await;
        }
        let text = match tokio::time::timeout(limit, response.text()).await {
            Ok(Ok(text)) => text,
            Ok(Err(e)) => {
                return Err(Attempt::Retry(
                    self.unreachable(format!("the answer was cut off: {e}")),
                    None,
                ));
            }
            Err(_) => return Err(Attempt::Retry(ModelError::Timeout(limit), None)),
        };
        let status_error = || ModelError::Status {
            url: self.url.clone(),
            status,
            body: excerpt(&text),
        };
        match status {
            200..=299 => parse_whole(&text).map_err(Attempt::Fail),
            401 | 403 => Err(Attempt::Fail(ModelError::Auth {
                url: self.url.clone(),
                status,
                body: excerpt(&text),
            })),
            _ if body.stream && refuses_stream(status, &text) => {
                Err(Attempt::NoStream(status_error()))
            }
            _ if is_context_length(status, &text) => {
                Err(Attempt::Fail(ModelError::ContextLength {
                    url: self.url.clone(),
                    status,
                    body: excerpt(&text),
                }))
            }
            429 | 500..=599 => Err(Attempt::Retry(status_error(), retry_after)),
            _ => Err(Attempt::Fail(status_error())),
        }
    }

    /// Reads a streamed answer as it comes, handing its text to `on_text`. A body that
    /// turns out to be one JSON answer (a server that does not stream and does not say
    /// so in its content type) is read as one.
    async fn read_stream(
        &self,
        response: &mut reqwest::Response,
        content_type: &str,
        on_text: Option<TextSink<'_>>,
    ) -> Result<Completion, Attempt> {
        let limit = self.settings.timeout;
        let mut decoder = SseDecoder::default();
        let mut assembly = Assembly::default();
        // Until the body's first character says which it is (no event-stream type).
        let mut sniffing = !content_type.contains("event-stream");
        let mut whole: Vec<u8> = Vec::new();
        let mut shown = false;
        let cut_off = |shown: bool, error: ModelError| {
            if shown {
                Attempt::Fail(error)
            } else {
                Attempt::Retry(error, None)
            }
        };
        let malformed = |e: ResponseError, body: &str| {
            Attempt::Fail(ModelError::Malformed {
                detail: e.to_string(),
                body: excerpt(body),
            })
        };
        loop {
            let chunk = match tokio::time::timeout(limit, response.chunk()).await {
                Ok(Ok(Some(chunk))) => chunk,
                Ok(Ok(None)) => break,
                Ok(Err(e)) => {
                    return Err(cut_off(
                        shown,
                        self.unreachable(format!("the streamed answer was cut off: {e}")),
                    ));
                }
                Err(_) => return Err(cut_off(shown, ModelError::Timeout(limit))),
            };
            let events = if sniffing {
                whole.extend_from_slice(&chunk);
                match body_kind(&whole) {
                    // Not known yet, or one JSON answer (or not an answer): read on.
                    None | Some(BodyKind::Whole) => continue,
                    Some(BodyKind::Events) => sniffing = false,
                }
                decoder.feed(&std::mem::take(&mut whole))
            } else {
                decoder.feed(&chunk)
            };
            self.take_events(events, &mut assembly, on_text, &mut shown)
                .map_err(|(e, data)| malformed(e, &data))?;
            if assembly.is_done() {
                break;
            }
        }
        if sniffing {
            let text = String::from_utf8_lossy(&whole);
            return parse_whole(&text).map_err(Attempt::Fail);
        }
        let events = decoder.finish();
        self.take_events(events, &mut assembly, on_text, &mut shown)
            .map_err(|(e, data)| malformed(e, &data))?;
        if !assembly.has_chunks() {
            return Err(Attempt::Retry(
                self.unreachable("the streamed answer ended before any of it came".to_owned()),
                None,
            ));
        }
        let (message, usage) = assembly
            .finish()
            .map_err(|e| malformed(e, "(a streamed answer)"))?;
        Ok(Completion { message, usage })
    }

    /// Reads events into `assembly`, handing new text on.
    fn take_events(
        &self,
        events: Vec<String>,
        assembly: &mut Assembly,
        on_text: Option<TextSink<'_>>,
        shown: &mut bool,
    ) -> Result<(), (ResponseError, String)> {
        for data in events {
            match assembly.event(&data) {
                Ok(Some(text)) => {
                    if let Some(sink) = on_text {
                        sink(&text);
                        *shown = true;
                    }
                }
                Ok(None) => {}
                Err(e) => return Err((e, data)),
            }
        }
        Ok(())
    }
}

/// What a streamed request's answer turned out to be.
#[derive(Debug, PartialEq, Eq)]
enum BodyKind {
    /// Server-sent events.
    Events,
    /// One piece (a JSON answer, or something else to be named as malformed).
    Whole,
}

/// What the start of a body says it is, once it says (`None`: not yet).
fn body_kind(start: &[u8]) -> Option<BodyKind> {
    let text = String::from_utf8_lossy(start);
    let text = text.trim_start();
    let fields = ["data:", "event:", "id:", "retry:", ":"];
    if fields.iter().any(|f| text.starts_with(f)) {
        return Some(BodyKind::Events);
    }
    if fields.iter().any(|f| f.starts_with(text)) {
        // Could still be one of them.
        return None;
    }
    Some(BodyKind::Whole)
}

/// One attempt's failure: worth retrying (after the server's Retry-After, if it said), not,
/// or worth asking again at once without `stream`.
enum Attempt {
    Retry(ModelError, Option<Duration>),
    Fail(ModelError),
    NoStream(ModelError),
}

/// Reads the assistant message out of a Chat Completions response.
pub fn parse_completion(text: &str) -> Result<Message, ModelError> {
    parse_whole(text).map(|c| c.message)
}

/// Reads a whole (not streamed) Chat Completions response and its usage.
fn parse_whole(text: &str) -> Result<Completion, ModelError> {
    ChatResponse::parse_with_usage(text)
        .map(|(message, usage)| Completion { message, usage })
        .map_err(|e| ModelError::Malformed {
            detail: e.to_string(),
            body: excerpt(text),
        })
}

#[async_trait]
impl ModelProvider for OpenAiClient {
    fn model(&self) -> &str {
        &self.settings.model
    }

    async fn complete(
        &self,
        messages: &[Message],
        tools: &[&ToolSpec],
        on_text: Option<TextSink<'_>>,
        cancel: &CancellationToken,
    ) -> Result<Completion, ModelError> {
        let mut wait = self.settings.backoff;
        let mut attempt = 0;
        loop {
            let stream = self.streams.load(Ordering::Relaxed);
            let body = ChatRequest::new(&self.settings.model, messages, tools).streamed(stream);
            let outcome = tokio::select! {
                () = cancel.cancelled() => return Err(ModelError::Cancelled),
                outcome = self.once(&body, on_text) => outcome,
            };
            match outcome {
                Ok(completion) => return Ok(completion),
                Err(Attempt::Fail(e)) => return Err(e),
                Err(Attempt::NoStream(e)) => {
                    tracing::info!(
                        "the model server refused a streamed request ({e}); asking for whole \
                         answers from now on"
                    );
                    self.streams.store(false, Ordering::Relaxed);
                }
                Err(Attempt::Retry(e, _)) if attempt >= self.settings.max_retries => return Err(e),
                Err(Attempt::Retry(e, retry_after)) => {
                    attempt += 1;
                    let pause = retry_after.unwrap_or(wait).min(Duration::from_secs(30));
                    tracing::warn!(
                        "model request failed ({e}); retry {attempt} of {} in {pause:?}",
                        self.settings.max_retries
                    );
                    tokio::select! {
                        () = cancel.cancelled() => return Err(ModelError::Cancelled),
                        () = tokio::time::sleep(pause) => {}
                    }
                    wait = (wait * 2).min(Duration::from_secs(30));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_says_whether_it_streams_from_its_first_bytes() {
        assert_eq!(body_kind(b"  data: {}"), Some(BodyKind::Events));
        assert_eq!(body_kind(b": ping\n"), Some(BodyKind::Events));
        assert_eq!(body_kind(b"\n da"), None);
        assert_eq!(body_kind(b""), None);
        assert_eq!(body_kind(b"{\"choices\""), Some(BodyKind::Whole));
        assert_eq!(body_kind(b"this is not"), Some(BodyKind::Whole));
    }

    #[test]
    fn stream_refusals_and_context_errors_are_told_apart() {
        assert!(refuses_stream(
            400,
            "{\"error\": \"Unrecognized request argument: stream_options\"}"
        ));
        assert!(refuses_stream(422, "stream is not supported"));
        assert!(!refuses_stream(400, "model not found"));
        assert!(!refuses_stream(429, "too many streams"));
        assert!(is_context_length(
            400,
            "This model's maximum context length is 4096 tokens"
        ));
        assert!(is_context_length(413, "request entity too large"));
        assert!(!is_context_length(400, "model not found"));
        assert!(!is_context_length(500, "context"));
    }

    #[test]
    fn completions_parse_and_malformed_ones_are_named() {
        let text = r#"{"choices":[{"message":{"role":"assistant","content":null,
            "tool_calls":[{"id":"a","type":"function","function":{"name":"echo","arguments":"{\"text\":\"hi\"}"}}]}}]}"#;
        let m = parse_completion(text).expect("parses");
        assert_eq!(m.tool_calls[0].name, "echo");
        assert_eq!(m.tool_calls[0].arguments, r#"{"text":"hi"}"#);
        for bad in [
            "not json",
            "{}",
            r#"{"choices":[{"message":{"content":5}}]}"#,
        ] {
            assert!(matches!(
                parse_completion(bad),
                Err(ModelError::Malformed { .. })
            ));
        }
    }
}
