//! The screen every message from an MCP client passes before rmcp handles it, on both
//! transports: what rmcp would drop unanswered, answer without the request's id, or
//! answer "Method not found" for a method it knows (its request union falls back to a
//! custom request when a known method's params do not fit) is refused here with the
//! JSON-RPC error it should get: -32700 (not JSON, id null), -32600 (not a request, with
//! its id when one can be read) or -32602 (a known method's params that do not fit,
//! naming the problem).

use rmcp::model::{
    CallToolRequestParams, CancelTaskParams, ClientJsonRpcMessage, ClientRequest, GetTaskParams,
    InitializeRequestParams, JsonRpcMessage, PaginatedRequestParams, ReadResourceRequestParams,
    RequestId, SetLevelRequestParams, UpdateTaskParams,
};
use serde_json::{Value, json};

/// A message refused before it reached rmcp, and the answer it gets.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refused {
    /// Not JSON at all (-32700; no id can be read).
    #[error("Parse error: {0}")]
    Parse(String),
    /// JSON, but no JSON-RPC message (-32600).
    #[error("Invalid Request: {reason}")]
    Request {
        /// Its id, if one can be read.
        id: Option<RequestId>,
        /// What is wrong.
        reason: String,
    },
    /// A request of a known method whose params do not fit it (-32602).
    #[error("Invalid params: {reason}")]
    Params {
        /// The request's id.
        id: RequestId,
        /// What is wrong, naming the method.
        reason: String,
    },
    /// A notification that is no message: dropped unanswered, as notifications are.
    #[error("a notification that is no MCP message")]
    Notification,
}

impl Refused {
    /// The JSON-RPC error code.
    pub(crate) fn code(&self) -> i64 {
        match self {
            Refused::Parse(_) => -32700,
            Refused::Request { .. } | Refused::Notification => -32600,
            Refused::Params { .. } => -32602,
        }
    }

    /// The error response to send (`id` null when none could be read); `None` for a
    /// notification, which gets no answer.
    pub(crate) fn response(&self) -> Option<Value> {
        let id = match self {
            Refused::Parse(_) | Refused::Request { id: None, .. } => Value::Null,
            Refused::Request { id: Some(id), .. } | Refused::Params { id, .. } => {
                serde_json::to_value(id).unwrap_or(Value::Null)
            }
            Refused::Notification => return None,
        };
        Some(json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {"code": self.code(), "message": self.to_string()},
        }))
    }
}

/// Methods rmcp decodes into a typed request: one of these that comes out as a custom
/// request had params that do not fit it.
const TYPED: &[&str] = &[
    "ping",
    "initialize",
    "server/discover",
    "completion/complete",
    "logging/setLevel",
    "prompts/get",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "resources/directory/read",
    "subscriptions/listen",
    "tools/call",
    "tools/list",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "skills/list",
    "skills/get",
];

/// Methods the 2026-07-28 revision removed: a request that speaks that revision and names
/// one is no bad-params request but an unknown method, which rmcp answers (-32601, HTTP
/// 404 on the stateless path), so the screen passes it on whatever its params.
const REMOVED_IN_2026: &[&str] = &[
    "initialize",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];

/// The `_meta` key a 2026-07-28 request names its revision in.
const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";

/// Whether a revision's name is 2026-07-28 or later (the names are dates).
fn speaks_2026(version: &str) -> bool {
    version >= rmcp::model::ProtocolVersion::V_2026_07_28.as_str()
}

/// One message from a client (a line on stdio, a POST body): the message as rmcp decodes
/// it, or why it is refused. `header_version` is the HTTP request's `MCP-Protocol-Version`
/// (none on stdio).
pub(crate) fn screen(
    raw: &[u8],
    header_version: Option<&str>,
) -> Result<ClientJsonRpcMessage, Refused> {
    let raw = raw.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(raw);
    // The hot path: a message rmcp decodes as one it knows passes as decoded, one parse as
    // rmcp's own transport makes. Only what it cannot decode, or decodes as a custom
    // request (an unknown method, or a known one whose params did not fit), is looked at
    // closer below.
    match serde_json::from_slice::<ClientJsonRpcMessage>(raw) {
        Ok(JsonRpcMessage::Request(request))
            if matches!(request.request, ClientRequest::CustomRequest(_)) => {}
        Ok(message) => return Ok(message),
        Err(_) => {}
    }
    let value: Value = serde_json::from_slice(raw).map_err(|e| Refused::Parse(e.to_string()))?;
    let Value::Object(fields) = &value else {
        return Err(Refused::Request {
            id: None,
            reason: format!(
                "a JSON-RPC message is an object, not {} (MCP has no batches)",
                kind(&value)
            ),
        });
    };
    let id = match fields.get("id") {
        Some(Value::Number(n)) => n.as_i64().map(RequestId::Number),
        Some(Value::String(s)) => Some(RequestId::String(s.as_str().into())),
        _ => None,
    };
    let method = match fields.get("method") {
        Some(Value::String(m)) => Some(m.clone()),
        _ => None,
    };
    let meta_version = fields
        .get("params")
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(META_PROTOCOL_VERSION))
        .and_then(Value::as_str);
    let modern = meta_version.or(header_version).is_some_and(speaks_2026);
    if modern
        && method
            .as_deref()
            .is_some_and(|m| REMOVED_IN_2026.contains(&m))
    {
        // rmcp decodes it as it can and answers "Method not found" for the revision.
        return serde_json::from_value(value).map_err(|e| Refused::Request {
            id,
            reason: e.to_string(),
        });
    }
    if let (Some(id), Some(method)) = (&id, &method)
        && let Some(params) = fields.get("params")
        && !params.is_object()
    {
        return Err(Refused::Params {
            id: id.clone(),
            reason: format!(
                "the params of {method} must be an object, not {}",
                kind(params)
            ),
        });
    }
    let notification = id.is_none() && method.is_some() && !fields.contains_key("id");
    let message: ClientJsonRpcMessage = match serde_json::from_value(value) {
        Ok(m) => m,
        Err(_) if notification => return Err(Refused::Notification),
        Err(e) => {
            return Err(Refused::Request {
                id,
                reason: e.to_string(),
            });
        }
    };
    if let JsonRpcMessage::Request(request) = &message
        && let ClientRequest::CustomRequest(custom) = &request.request
        && TYPED.contains(&custom.method.as_str())
    {
        return Err(Refused::Params {
            id: request.id.clone(),
            reason: params_problem(&custom.method, custom.params.as_ref()),
        });
    }
    Ok(message)
}

/// What is wrong with `params` for `method` (one rmcp did not decode).
fn params_problem(method: &str, params: Option<&Value>) -> String {
    let problem = match method {
        "initialize" => problem::<InitializeRequestParams>(params),
        "tools/call" => problem::<CallToolRequestParams>(params),
        "resources/read" => problem::<ReadResourceRequestParams>(params),
        "logging/setLevel" => problem::<SetLevelRequestParams>(params),
        "tasks/get" => problem::<GetTaskParams>(params),
        "tasks/update" => problem::<UpdateTaskParams>(params),
        "tasks/cancel" => problem::<CancelTaskParams>(params),
        "tools/list" | "resources/list" | "resources/templates/list" | "prompts/list" => {
            params.and_then(|p| problem::<PaginatedRequestParams>(Some(p)))
        }
        _ => None,
    };
    match problem {
        Some(why) => format!("{method}: {why}"),
        None => format!("the params do not fit {method}"),
    }
}

/// Why `params` is no `T` (`None`: it is one).
fn problem<T: serde::de::DeserializeOwned>(params: Option<&Value>) -> Option<String> {
    match params {
        None => Some("params are missing".to_owned()),
        Some(p) => T::deserialize(p).err().map(|e| e.to_string()),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(raw: &str) -> Value {
        match screen(raw.as_bytes(), None) {
            Err(refused) => refused.response().unwrap_or(Value::Null),
            Ok(m) => panic!("passed: {m:?}"),
        }
    }

    #[test]
    fn each_kind_of_bad_message_gets_its_error_and_id() {
        let a = answer("not json");
        assert_eq!(
            (a["id"].clone(), a["error"]["code"].clone()),
            (Value::Null, json!(-32700))
        );
        let a = answer(r#"{"jsonrpc":"2.0","id":7,"method":5}"#);
        assert_eq!(
            (a["id"].clone(), a["error"]["code"].clone()),
            (json!(7), json!(-32600))
        );
        let a = answer(r#"{"jsonrpc":"2.0","id":"s","method":"tools/call","params":5}"#);
        assert_eq!(
            (a["id"].clone(), a["error"]["code"].clone()),
            (json!("s"), json!(-32602))
        );
        let a = answer(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{}}"#);
        assert_eq!(a["error"]["code"], -32602, "{a}");
        let message = a["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("tools/call") && message.contains("name"),
            "{a}"
        );
        let a = answer(r#"{"jsonrpc":"2.0","id":4,"method":"initialize","params":{"x":1}}"#);
        assert_eq!(a["error"]["code"], -32602, "{a}");
        assert!(matches!(
            screen(
                br#"{"jsonrpc":"2.0","method":"notifications/x","params":5}"#,
                None
            ),
            Err(Refused::Notification)
        ));
    }

    #[test]
    fn good_messages_pass() {
        for raw in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo"}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"my/own","params":{"a":1}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":4,"result":{}}"#,
        ] {
            assert!(screen(raw.as_bytes(), None).is_ok(), "{raw}");
        }
    }

    #[test]
    fn a_method_2026_07_28_removed_is_left_to_rmcp_when_the_request_speaks_it() {
        let bad_init = r#"{"jsonrpc":"2.0","id":4,"method":"initialize","params":{"x":1}}"#;
        // By the header (HTTP) or by the request's `_meta`: rmcp answers method not found.
        assert!(screen(bad_init.as_bytes(), Some("2026-07-28")).is_ok());
        let in_meta = r#"{"jsonrpc":"2.0","id":5,"method":"logging/setLevel","params":
            {"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        assert!(screen(in_meta.as_bytes(), None).is_ok());
        // Older revisions still get the params named, and other methods too.
        assert_eq!(
            answer(bad_init)["error"]["code"],
            -32602,
            "a 2025-11-25 initialize with bad params"
        );
        let call = r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{}}"#;
        assert!(matches!(
            screen(call.as_bytes(), Some("2026-07-28")),
            Err(Refused::Params { .. })
        ));
    }
}
