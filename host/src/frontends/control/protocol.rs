//! The control protocol's messages, typed and without I/O: [`ControlRequest`] by method,
//! answered by a [`ControlResponse`] with a result or a [`ControlFault`] and its numeric
//! code, JSON-RPC 2.0 shaped. The server (`server.rs`) and the client (`client.rs`) both
//! speak through these types.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::legacy_error_line;
use crate::host::HostStatus;
use crate::plugins::catalog::RescanReport;
use toolhost_calls::result::{CallErrorKind, ToolResult};

/// What a client asks the host, by method. Its JSON form is the `method` and `params` of a
/// request line.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "method", content = "params", rename_all = "snake_case")]
pub enum ControlRequest {
    /// Rescan the plugin directories now; answered with a [`RescanReport`].
    Reload,
    /// The host's state; answered with a [`HostStatus`].
    Status,
    /// Every tool with its schema and plugin file; answered with the array `toolhost list
    /// --json` prints.
    List,
    /// Run one tool call as a profile's agent; answered with a [`CallReply`] (a call that
    /// fails is still a result, with `is_error` and a code saying why).
    Call(CallParams),
    /// The approval questions waiting for a terminal (`[mcp] without_elicitation =
    /// "terminal"`); answered with an array of
    /// [`RelayedQuestion`](crate::approval_relay::RelayedQuestion).
    ApprovalsPending,
    /// Answer one of them; answered with `null` once the call it held goes on.
    ApprovalsAnswer(AnswerParams),
}

/// The parameters of [`ControlRequest::ApprovalsAnswer`]: the question's id and the
/// answer (`{"id": 3, "answer": "once"}`, `"session"`, `"always"`, or `"no"` with a
/// `reason`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnswerParams {
    /// The question's id, as `approvals_pending` lists it.
    pub id: u64,
    /// The answer.
    #[serde(flatten)]
    pub reply: ApprovalReply,
}

impl ControlRequest {
    /// The methods, for messages.
    pub const METHODS: &'static str =
        "reload, status, list, call, approvals_pending and approvals_answer";

    /// The request `method` with `params` names, or why it is not one.
    pub fn from_parts(method: &str, params: Option<Value>) -> Result<ControlRequest, ControlFault> {
        match method {
            // These take no parameters; whatever is sent is ignored.
            "reload" => Ok(ControlRequest::Reload),
            "status" => Ok(ControlRequest::Status),
            "list" => Ok(ControlRequest::List),
            "approvals_pending" => Ok(ControlRequest::ApprovalsPending),
            "approvals_answer" => {
                let params = params.unwrap_or(Value::Null);
                serde_json::from_value(params)
                    .map(ControlRequest::ApprovalsAnswer)
                    .map_err(|e| {
                        ControlFault::new(
                            ControlFault::INVALID_PARAMS,
                            format!(
                                "approvals_answer needs params {{\"id\": N, \"answer\": \
                                 \"once\"|\"session\"|\"always\"|\"no\"}} ({e})"
                            ),
                        )
                    })
            }
            "call" => {
                let params = params.unwrap_or_else(|| Value::Object(serde_json::Map::new()));
                serde_json::from_value(params)
                    .map(ControlRequest::Call)
                    .map_err(|e| {
                        ControlFault::new(
                            ControlFault::INVALID_PARAMS,
                            format!(
                                "call needs params {{\"tool\": NAME, \"arguments\": {{...}}}} ({e})"
                            ),
                        )
                    })
            }
            other => Err(ControlFault::new(
                ControlFault::METHOD_NOT_FOUND,
                format!(
                    "unknown method '{other}'; the methods are {}",
                    ControlRequest::METHODS
                ),
            )),
        }
    }
}

/// The parameters of [`ControlRequest::Call`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallParams {
    /// The tool's name.
    pub tool: String,
    /// The arguments object (default: `{}`).
    #[serde(default = "empty_object")]
    pub arguments: Value,
    /// The profile whose agent makes the call (default: the host's default profile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// A limit shorter than the host's call timeout (a longer one is ignored). On the wire
    /// it is `timeout_secs`, a number of seconds; one no `Duration` can hold (negative, not
    /// a number) is no limit.
    #[serde(
        default,
        rename = "timeout_secs",
        with = "wire_seconds",
        skip_serializing_if = "Option::is_none"
    )]
    pub timeout: Option<Duration>,
    /// The client can answer approval questions on this connection (it has a person at
    /// a terminal): a call that needs approval sends an [`ApprovalQuestion`] before its
    /// reply. Without it, such calls are refused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ask: bool,
    /// Approve the call without asking (`toolhost call --control --yes`), as the host's
    /// own user may: honoured only for a peer whose uid is the host's (or root's); any
    /// other peer's call is refused with a fault saying so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub yes: bool,
}

/// A question the host sends over the control connection while a call waits for a
/// person's approval (only to a client whose call said `ask`). On the wire: a request
/// line from the host, `{"jsonrpc": "2.0", "id": "approval-N", "method": "approve",
/// "params": {...}}`, answered by the client with `{"id": "approval-N", "result":
/// ApprovalReply}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalQuestion {
    /// The tool.
    pub tool: String,
    /// Its risk after overrides.
    pub risk: toolhost_calls::tool::Risk,
    /// Where it comes from (for people).
    pub origin: String,
    /// The call's arguments.
    pub arguments: Value,
    /// Whether "for this session" may be answered.
    #[serde(default)]
    pub offer_session: bool,
    /// Whether "always" may be answered.
    #[serde(default)]
    pub offer_always: bool,
}

/// The client's answer to an [`ApprovalQuestion`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum ApprovalReply {
    /// Run this call.
    Once,
    /// Run it and the tool's later calls in this session.
    Session,
    /// Run it and the tool's later calls, across restarts.
    Always,
    /// Don't run it.
    No {
        /// Why (for the model).
        reason: String,
    },
}

/// The method name of an approval question line.
pub(super) const APPROVE_METHOD: &str = "approve";

/// A line the host sends while a request waits: a question for the client.
#[derive(Serialize, Deserialize)]
pub(super) struct QuestionLine {
    pub(super) jsonrpc: String,
    pub(super) id: String,
    pub(super) method: String,
    pub(super) params: ApprovalQuestion,
}

/// The client's answer line to a [`QuestionLine`].
#[derive(Serialize, Deserialize)]
pub(super) struct AnswerLine {
    pub(super) jsonrpc: String,
    pub(super) id: String,
    pub(super) result: ApprovalReply,
}

/// A line the client reads after sending a request: a question from the host (it has a
/// `method`), or the request's response.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum HostLine {
    Question(QuestionLine),
    Response(ControlResponse),
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

/// `timeout_secs` on the wire: seconds as a JSON number, a [`Duration`] everywhere else.
mod wire_seconds {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        limit: &Option<Duration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match limit {
            Some(d) => s.serialize_f64(d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.and_then(|s| Duration::try_from_secs_f64(s).ok()))
    }
}

/// The answer to [`ControlRequest::Call`]: the call's result as the dispatcher returned it,
/// plus a numeric `code` (0 on success, else one per [`CallErrorKind`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallReply {
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
    /// 0 on success, else [`call_error_code`] of `error`.
    #[serde(default)]
    pub code: i32,
    /// Seconds the call took, policy and validation included.
    pub elapsed: f64,
    /// The tool's structured result, if it returned one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<Value>,
    /// The call's details, by kind (never the model's text).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub details: std::collections::BTreeMap<String, Value>,
    /// Content blocks, if the tool returned any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<toolhost_plugin_api::Content>,
}

impl From<ToolResult> for CallReply {
    fn from(r: ToolResult) -> Self {
        CallReply {
            code: match r.error {
                Some(kind) => call_error_code(kind),
                // An error result without a kind does not happen; say "failed" if it does.
                None if r.is_error => call_error_code(CallErrorKind::Failed),
                None => 0,
            },
            call_id: r.call_id,
            name: r.name,
            output: r.output,
            is_error: r.is_error,
            error: r.error,
            elapsed: r.elapsed.as_secs_f64(),
            structured: r.structured,
            details: r.details,
            content: r.content,
        }
    }
}

/// The numeric code of a failed call's kind, in a call reply's `code` (README: "The
/// control protocol").
pub fn call_error_code(kind: CallErrorKind) -> i32 {
    match kind {
        CallErrorKind::ToolNotFound => 1,
        CallErrorKind::Denied => 2,
        CallErrorKind::NotApproved => 3,
        CallErrorKind::Unavailable => 4,
        CallErrorKind::InvalidArgs => 5,
        CallErrorKind::Failed => 6,
        CallErrorKind::Panicked => 7,
        CallErrorKind::TimedOut => 8,
        CallErrorKind::Cancelled => 9,
        CallErrorKind::SchemaViolation => 10,
        CallErrorKind::InvalidOutput => 11,
    }
}

/// What the host answers a request with, by method.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum ControlResult {
    /// For [`ControlRequest::Reload`].
    Reload(RescanReport),
    /// For [`ControlRequest::Status`].
    Status(Box<HostStatus>),
    /// For [`ControlRequest::List`].
    List(Vec<Value>),
    /// For [`ControlRequest::Call`].
    Call(CallReply),
    /// For [`ControlRequest::ApprovalsPending`].
    ApprovalsPending(Vec<crate::approval_relay::RelayedQuestion>),
    /// For [`ControlRequest::ApprovalsAnswer`].
    ApprovalsAnswered,
}

/// A request the host could not answer: a JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct ControlFault {
    /// What went wrong, for scripts: one of the constants below (0 from hosts that sent
    /// no code).
    #[serde(default)]
    pub code: i32,
    /// What went wrong, for people.
    pub message: String,
}

impl ControlFault {
    /// The line is not JSON.
    pub const PARSE_ERROR: i32 = -32700;
    /// The line is JSON but not a request (no `method`), or too long.
    pub const INVALID_REQUEST: i32 = -32600;
    /// No such method.
    pub const METHOD_NOT_FOUND: i32 = -32601;
    /// The method's parameters are wrong (e.g. `call` without a tool name).
    pub const INVALID_PARAMS: i32 = -32602;
    /// The host failed answering (e.g. the rescan task died).
    pub const INTERNAL_ERROR: i32 = -32603;
    /// The request names a profile the host does not have.
    pub const UNKNOWN_PROFILE: i32 = -32001;

    /// A fault with `code` and `message`.
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        ControlFault {
            code,
            message: message.into(),
        }
    }
}

/// One response line: the request's id and its result or fault.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControlResponse {
    /// `"2.0"` (empty from hosts that predate it).
    #[serde(default)]
    pub jsonrpc: String,
    /// The request's id (`null` when there was none, or it could not be read).
    #[serde(default)]
    pub id: Value,
    /// The answer.
    #[serde(flatten)]
    pub outcome: ControlOutcome,
}

/// A response's `result` or `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlOutcome {
    /// What the method returned; its type follows from the method.
    Result(Value),
    /// Why there is no result.
    Error(ControlFault),
}

impl ControlResponse {
    pub(crate) fn new(id: Value, outcome: ControlOutcome) -> Self {
        ControlResponse {
            jsonrpc: JSONRPC.to_owned(),
            id,
            outcome,
        }
    }

    /// The response line (without its newline).
    pub(crate) fn to_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| {
            legacy_error_line(&format!("the host could not encode its answer: {e}"))
        })
    }
}

pub(super) const JSONRPC: &str = "2.0";

/// A request line as it arrives: everything optional, so that what is missing can be
/// named.
#[derive(Deserialize)]
pub(super) struct Envelope {
    #[serde(default)]
    pub(super) id: Value,
    #[serde(default)]
    pub(super) method: Option<Value>,
    #[serde(default)]
    pub(super) params: Option<Value>,
}

/// A request line as a client sends it.
#[derive(Serialize)]
pub(super) struct Outgoing<'a, R: Serialize> {
    pub(super) jsonrpc: &'static str,
    pub(super) id: u64,
    #[serde(flatten)]
    pub(super) request: &'a R,
}

/// An untyped request (any method, any params), for [`ControlClient::request`].
#[derive(Serialize)]
pub(super) struct RawRequest<'a> {
    pub(super) method: &'a str,
    pub(super) params: Value,
}

/// A request line's id and request, or the id (when readable) and why it is no request.
pub(crate) fn decode(line: &[u8]) -> Result<(Value, ControlRequest), (Value, ControlFault)> {
    let value: Value = serde_json::from_slice(line).map_err(|e| {
        (
            Value::Null,
            ControlFault::new(
                ControlFault::PARSE_ERROR,
                format!("malformed request (not JSON: {e}); send one JSON object per line"),
            ),
        )
    })?;
    let no_method = || {
        ControlFault::new(
            ControlFault::INVALID_REQUEST,
            "malformed request: \"method\" (a string) is missing",
        )
    };
    // Only an object is a request (serde would also read a struct from an array).
    if !value.is_object() {
        return Err((Value::Null, no_method()));
    }
    let envelope: Envelope =
        serde_json::from_value(value).map_err(|_| (Value::Null, no_method()))?;
    let Some(Value::String(method)) = envelope.method else {
        return Err((envelope.id, no_method()));
    };
    match ControlRequest::from_parts(&method, envelope.params) {
        Ok(request) => Ok((envelope.id, request)),
        Err(fault) => Err((envelope.id, fault)),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use toolhost_calls::result::CallErrorKind;

    fn fault(line: &str) -> (Value, ControlFault) {
        match decode(line.as_bytes()) {
            Ok((_, request)) => panic!("{line} decoded as {request:?}"),
            Err(refused) => refused,
        }
    }

    #[test]
    fn requests_decode_with_or_without_jsonrpc_and_params() {
        for line in [
            r#"{"id": 1, "method": "status"}"#,
            r#"{"jsonrpc": "2.0", "id": 1, "method": "status", "params": {}}"#,
            r#"{"id": 1, "method": "status", "params": [1, 2]}"#,
        ] {
            let (id, request) = decode(line.as_bytes()).expect(line);
            assert_eq!((id, request), (json!(1), ControlRequest::Status));
        }
        let (id, request) = decode(
            br#"{"method": "call", "params": {"tool": "echo", "profile": "p", "timeout_secs": 2}}"#,
        )
        .expect("a call");
        assert_eq!(id, Value::Null);
        assert_eq!(
            request,
            ControlRequest::Call(CallParams {
                tool: "echo".to_owned(),
                arguments: json!({}),
                profile: Some("p".to_owned()),
                timeout: Some(Duration::from_secs(2)),
                ask: false,
                yes: false,
            })
        );
    }

    #[test]
    fn each_kind_of_bad_request_has_its_code_and_keeps_the_id() {
        let (id, f) = fault("not json");
        assert_eq!((id, f.code), (Value::Null, ControlFault::PARSE_ERROR));
        assert!(f.message.contains("malformed request"), "{f}");
        let (_, f) = fault("[1, \"status\"]");
        assert_eq!(f.code, ControlFault::INVALID_REQUEST);
        let (id, f) = fault(r#"{"id": "a", "method": 5}"#);
        assert_eq!((id, f.code), (json!("a"), ControlFault::INVALID_REQUEST));
        let (id, f) = fault(r#"{"id": 5, "method": "explode"}"#);
        assert_eq!((id, f.code), (json!(5), ControlFault::METHOD_NOT_FOUND));
        assert!(f.message.contains("unknown method 'explode'"), "{f}");
        let (_, f) = fault(r#"{"id": 6, "method": "call", "params": {"arguments": {}}}"#);
        assert_eq!(f.code, ControlFault::INVALID_PARAMS);
        assert!(
            f.message.starts_with("call needs params {\"tool\": NAME"),
            "{f}"
        );
    }

    #[test]
    fn responses_are_json_rpc_shaped_and_old_ones_still_read() {
        let ok = ControlResponse::new(json!(1), ControlOutcome::Result(json!({"a": 1})));
        let line: Value = serde_json::from_str(&ok.to_line()).expect("JSON");
        assert_eq!(line, json!({"jsonrpc": "2.0", "id": 1, "result": {"a": 1}}));
        let err = ControlResponse::new(
            json!(2),
            ControlOutcome::Error(ControlFault::new(ControlFault::UNKNOWN_PROFILE, "no")),
        );
        let line: Value = serde_json::from_str(&err.to_line()).expect("JSON");
        assert_eq!(
            line,
            json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32001, "message": "no"}})
        );
        // A refused connection's line, and answers of hosts from before the codes.
        let refusal =
            legacy_error_line("permission denied: this toolhost serves only uid 1 and root");
        assert_eq!(
            refusal,
            r#"{"id":null,"error":{"message":"permission denied: this toolhost serves only uid 1 and root"}}"#
        );
        let read: ControlResponse = serde_json::from_str(&refusal).expect("reads");
        assert_eq!(
            read.outcome,
            ControlOutcome::Error(ControlFault::new(
                0,
                "permission denied: this toolhost serves only uid 1 and root"
            ))
        );
        let old: ControlResponse =
            serde_json::from_str(r#"{"id": 3, "result": []}"#).expect("reads");
        assert_eq!(old.outcome, ControlOutcome::Result(json!([])));
    }

    #[test]
    fn a_request_is_written_as_method_and_params() {
        let line = serde_json::to_value(Outgoing {
            jsonrpc: JSONRPC,
            id: 7,
            request: &ControlRequest::Reload,
        })
        .expect("encodes");
        assert_eq!(line, json!({"jsonrpc": "2.0", "id": 7, "method": "reload"}));
        let call = ControlRequest::Call(CallParams {
            tool: "echo".to_owned(),
            arguments: json!({"text": "hi"}),
            profile: None,
            timeout: None,
            ask: false,
            yes: false,
        });
        let line = serde_json::to_value(Outgoing {
            jsonrpc: JSONRPC,
            id: 8,
            request: &call,
        })
        .expect("encodes");
        assert_eq!(
            line,
            json!({"jsonrpc": "2.0", "id": 8, "method": "call",
                   "params": {"tool": "echo", "arguments": {"text": "hi"}}})
        );
    }

    #[test]
    fn every_call_error_kind_has_its_own_code() {
        let kinds = [
            CallErrorKind::ToolNotFound,
            CallErrorKind::Denied,
            CallErrorKind::NotApproved,
            CallErrorKind::Unavailable,
            CallErrorKind::InvalidArgs,
            CallErrorKind::Failed,
            CallErrorKind::Panicked,
            CallErrorKind::TimedOut,
            CallErrorKind::Cancelled,
            CallErrorKind::SchemaViolation,
        ];
        let codes: std::collections::BTreeSet<i32> =
            kinds.iter().map(|k| call_error_code(*k)).collect();
        assert_eq!(codes.len(), kinds.len());
        assert!(!codes.contains(&0), "0 means success");
    }
}
