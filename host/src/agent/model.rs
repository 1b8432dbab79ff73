//! How the agent talks to a model: the `ModelProvider` trait and its OpenAI-compatible
//! Chat Completions client (whose wire format is in `wire.rs`; the conversation's messages
//! are in `messages.rs`, re-exported here).

use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

pub use super::messages::{Message, ModelToolCall, Role};
use super::wire::{ChatRequest, ChatResponse};
use crate::calls::tool::ToolSpec;
use crate::config::ModelSettings;

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
    /// The request took too long.
    #[error(
        "the model server did not answer within {0:?}; raise [model] timeout_secs or try again"
    )]
    Timeout(Duration),
    /// The turn was cancelled while waiting.
    #[error("cancelled while waiting for the model")]
    Cancelled,
}

/// A model the agent can talk to.
#[async_trait]
pub trait ModelProvider: Send + Sync {
    /// The model's name (what tools see as `ctx.model()`).
    fn model(&self) -> &str;

    /// The model's next message after `messages`, offered `tools`.
    async fn complete(
        &self,
        messages: &[Message],
        tools: &[&ToolSpec],
        cancel: &CancellationToken,
    ) -> Result<Message, ModelError>;
}

/// The Chat Completions client.
pub struct OpenAiClient {
    http: reqwest::Client,
    settings: ModelSettings,
    url: String,
}

/// What an error message quotes of a server's answer.
fn excerpt(text: &str) -> String {
    crate::text::shorten(text.trim(), 400)
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
        let http = reqwest::Client::builder()
            .timeout(settings.timeout)
            .build()
            .map_err(|e| ModelError::Unreachable {
                url: url.clone(),
                detail: format!("could not set up the HTTP client: {e}"),
            })?;
        Ok(OpenAiClient {
            http,
            settings,
            url,
        })
    }

    async fn once(&self, body: &ChatRequest<'_>) -> Result<Message, Attempt> {
        let mut request = self.http.post(&self.url).json(body);
        if let Some(key) = &self.settings.api_key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(|e| {
            if e.is_timeout() {
                Attempt::Retry(ModelError::Timeout(self.settings.timeout), None)
            } else {
                Attempt::Retry(
                    ModelError::Unreachable {
                        url: self.url.clone(),
                        detail: e.to_string(),
                    },
                    None,
                )
            }
        })?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .and_then(|s| Duration::try_from_secs_f64(s).ok());
        let text = response.text().await.map_err(|e| {
            Attempt::Retry(
                ModelError::Unreachable {
                    url: self.url.clone(),
                    detail: format!("the answer was cut off: {e}"),
                },
                None,
            )
        })?;
        match status {
            200..=299 => parse_completion(&text).map_err(Attempt::Fail),
            401 | 403 => Err(Attempt::Fail(ModelError::Auth {
                url: self.url.clone(),
                status,
                body: excerpt(&text),
            })),
            429 | 500..=599 => Err(Attempt::Retry(
                ModelError::Status {
                    url: self.url.clone(),
                    status,
                    body: excerpt(&text),
                },
                retry_after,
            )),
            _ => Err(Attempt::Fail(ModelError::Status {
                url: self.url.clone(),
                status,
                body: excerpt(&text),
            })),
        }
    }
}

/// One attempt's failure: worth retrying (after the server's Retry-After, if it said), or not.
enum Attempt {
    Retry(ModelError, Option<Duration>),
    Fail(ModelError),
}

/// Reads the assistant message out of a Chat Completions response.
pub fn parse_completion(text: &str) -> Result<Message, ModelError> {
    ChatResponse::parse(text).map_err(|e| ModelError::Malformed {
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
        cancel: &CancellationToken,
    ) -> Result<Message, ModelError> {
        let body = ChatRequest::new(&self.settings.model, messages, tools);
        let mut wait = self.settings.backoff;
        let mut attempt = 0;
        loop {
            let outcome = tokio::select! {
                () = cancel.cancelled() => return Err(ModelError::Cancelled),
                outcome = self.once(&body) => outcome,
            };
            match outcome {
                Ok(message) => return Ok(message),
                Err(Attempt::Fail(e)) => return Err(e),
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
