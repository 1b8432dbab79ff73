//! A call's result as every part sees it (the model, MCP, the audit log, the session
//! store): its text, whether and why it failed, its structured value, details and content
//! blocks, and how admission decided it.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolhost_plugin_api::{Content, Details};

use crate::decision::Decision;

/// The outcome of one call, as it goes back to the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolResult {
    /// The id of the call.
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// The tool's output, or the error message.
    pub output: String,
    /// Whether `output` is an error.
    pub is_error: bool,
    /// What kind of error, if any.
    pub error: Option<CallErrorKind>,
    /// How long the call took, policy and validation included.
    #[serde(serialize_with = "serialize_secs")]
    pub elapsed: Duration,
    /// The tool's structured result, checked against its output schema when it declares
    /// one (MCP `structuredContent`); never on an error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<Value>,
    /// Structured data about the call for the session store, status and clients, never
    /// the model's text, by kind (see `toolhost_plugin_api::Details`). The host adds
    /// `toolhost/...` kinds: `toolhost/full_output` when the text was cut (where the full
    /// output is kept), `toolhost/structured_omitted` when the structured result was left
    /// out for the budget.
    #[serde(default, skip_serializing_if = "Details::is_empty")]
    pub details: Details,
    /// Content blocks for clients that show them (MCP); the model reads `output`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<Content>,
    /// How admission decided the call (who approved it, or why it never ran). Not
    /// serialized: it is the host's record (the audit log's), not the caller's answer.
    #[serde(skip)]
    pub decision: Decision,
}

impl ToolResult {
    /// An error result for a call that never ran (refused before it reached a
    /// dispatcher: an unknown profile, a model's unparseable arguments, ...).
    pub fn refused(call_id: String, name: String, message: String, kind: CallErrorKind) -> Self {
        ToolResult {
            call_id,
            name,
            output: message,
            is_error: true,
            error: Some(kind),
            elapsed: Duration::ZERO,
            structured: None,
            details: Details::new(),
            content: Vec::new(),
            decision: match kind {
                CallErrorKind::ToolNotFound => Decision::NotFound,
                CallErrorKind::Denied => Decision::Denied,
                CallErrorKind::Unavailable => Decision::Unavailable,
                CallErrorKind::SchemaViolation => Decision::InvalidArguments,
                _ => Decision::Undecided,
            },
        }
    }
}

fn serialize_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// Why a call ended in an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallErrorKind {
    /// No tool with that name.
    ToolNotFound,
    /// The tool is switched off by policy.
    Denied,
    /// The call needed approval that was not given.
    NotApproved,
    /// The tool's requirements (environment, programs) are not met.
    Unavailable,
    /// The tool said the arguments made no sense (its own `InvalidArgs`: a value out of
    /// range, an unknown time zone).
    InvalidArgs,
    /// The arguments do not match the tool's argument schema (or are not JSON): the host
    /// refused them before the tool ran.
    SchemaViolation,
    /// The tool ran and failed.
    Failed,
    /// The tool returned a structured result that does not match its output schema (or
    /// none, although it declares one).
    InvalidOutput,
    /// Host-side tool code panicked (plugin panics are caught in the plugin: `Failed`).
    Panicked,
    /// The call ran past its timeout.
    TimedOut,
    /// The turn was cancelled.
    Cancelled,
}
