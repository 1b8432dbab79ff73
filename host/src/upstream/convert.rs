//! What crosses between an MCP server's protocol types and the host's: a listed tool to a
//! `ToolSpec` (its name under the server's prefix, its risk from its annotations), a
//! `tools/call` result to a `ToolOutput` (text, structured content, images, audio,
//! resources and resource links, the error flag), and a server's questions and sampling
//! requests to the host's `AskRequest` and `SampleRequest` and back.

use std::collections::BTreeSet;

use rmcp::model::{
    CallToolResult, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams,
    ElicitResult, ElicitationAction, Role, SamplingMessage, Tool,
};
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use toolhost_calls::tool::{Requirements, Risk, ToolOutput, ToolSpec};
use toolhost_plugin_api::{
    AskAnswer, AskRequest, Content, EmbeddedResource, SampleAnswer, SampleRequest,
};

/// The longest tool name every model API accepts.
const MAX_NAME: usize = 64;

/// The risk a server's annotations give a tool: `readOnlyHint` read, `destructiveHint`
/// destructive, `openWorldHint` network, otherwise write. Only hints the server set to
/// `true` count (MCP's defaults would make every unannotated tool destructive and
/// networked; write, which asks a person, is the honest middle). A server not trusted
/// (`trust_annotations = false`, the default) cannot lower a tool below write: its
/// `readOnlyHint` is ignored, its hints that raise the risk still count.
pub(crate) fn risk(tool: &Tool, trusted: bool) -> Risk {
    let Some(a) = &tool.annotations else {
        return Risk::Write;
    };
    if a.read_only_hint == Some(true) && trusted {
        Risk::Read
    } else if a.destructive_hint == Some(true) {
        Risk::Destructive
    } else if a.open_world_hint == Some(true) {
        Risk::Network
    } else {
        Risk::Write
    }
}

/// The name the host lists a server's tool under: `prefix` and the tool's own name, each
/// character a tool name may not hold made `_`, at most 64 characters (a longer one is cut
/// and ends in 8 hex digits of its full name's sha256), and unique among `taken` (a
/// second tool that comes out the same gets `_2`, `_3`, ...). Adds it to `taken`.
pub(crate) fn local_name(prefix: &str, remote: &str, taken: &mut BTreeSet<String>) -> String {
    let clean: String = format!("{prefix}{remote}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let fit = |name: String, room: usize| -> String {
        if name.len() <= room {
            return name;
        }
        let digest = Sha256::digest(remote.as_bytes());
        let hex: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
        format!("{}_{hex}", &name[..room.saturating_sub(9)])
    };
    let mut name = fit(clean.clone(), MAX_NAME);
    let mut n = 2;
    while taken.contains(&name) {
        let suffix = format!("_{n}");
        name = format!("{}{suffix}", fit(clean.clone(), MAX_NAME - suffix.len()));
        n += 1;
    }
    taken.insert(name.clone());
    name
}

/// The spec of a server's tool, listed as `name`.
pub(crate) fn spec(name: String, tool: &Tool, trusted: bool) -> ToolSpec {
    let description = tool
        .description
        .as_deref()
        .map(str::to_owned)
        .or_else(|| tool.title.clone())
        .or_else(|| tool.annotations.as_ref().and_then(|a| a.title.clone()))
        .unwrap_or_default();
    ToolSpec {
        name,
        description,
        schema: Value::Object((*tool.input_schema).clone()),
        risk: risk(tool, trusted),
        interactive: false,
        requirements: Requirements::default(),
        output_schema: tool
            .output_schema
            .as_ref()
            .map(|s| Value::Object((**s).clone())),
    }
}

/// sha256 of what the server says of a tool and of itself: what a lasting approval of one
/// of its tools is tied to (a tool that changes is asked about again, as a plugin file
/// that changes is).
pub(crate) fn identity(server: &str, version: &str, tool: &Tool) -> String {
    let mut hash = Sha256::new();
    hash.update(server.as_bytes());
    hash.update([0]);
    hash.update(version.as_bytes());
    hash.update([0]);
    hash.update(serde_json::to_vec(tool).unwrap_or_default());
    hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// A `tools/call` result as the host's outcome: every content block kept (text joined as
/// the text the model reads), the structured content, and `isError`.
pub(crate) fn output(result: CallToolResult) -> ToolOutput {
    let mut texts = Vec::new();
    let mut content = Vec::new();
    for block in &result.content {
        let Ok(value) = serde_json::to_value(block) else {
            continue;
        };
        let field = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_owned);
        let kind = value
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        match kind {
            "text" => {
                let text = field("text").unwrap_or_default();
                texts.push(text.clone());
                content.push(Content::Text { text });
            }
            "image" | "audio" => {
                let data = field("data").unwrap_or_default();
                let mime_type = field("mimeType").unwrap_or_default();
                texts.push(format!(
                    "[{kind}: {mime_type}, {} bytes of base64]",
                    data.len()
                ));
                content.push(if kind == "image" {
                    Content::Image { data, mime_type }
                } else {
                    Content::Audio { data, mime_type }
                });
            }
            "resource" => {
                let resource = value.get("resource").cloned().unwrap_or_default();
                let text_of =
                    |key: &str| resource.get(key).and_then(Value::as_str).map(str::to_owned);
                let uri = text_of("uri").unwrap_or_default();
                let mime_type = text_of("mimeType");
                let text = match (text_of("text"), text_of("blob")) {
                    (Some(text), _) => text,
                    (None, Some(blob)) => {
                        format!("(binary resource {uri}: {} bytes of base64)", blob.len())
                    }
                    (None, None) => String::new(),
                };
                texts.push(text.clone());
                content.push(Content::Resource {
                    resource: EmbeddedResource {
                        uri,
                        mime_type,
                        text,
                    },
                });
            }
            "resource_link" => {
                let uri = field("uri").unwrap_or_default();
                let name = field("name").unwrap_or_default();
                texts.push(format!("[resource: {name} at {uri}]"));
                content.push(Content::ResourceLink {
                    uri,
                    name,
                    description: field("description"),
                    mime_type: field("mimeType"),
                });
            }
            _ => {}
        }
    }
    let mut text = texts.join("\n");
    if text.is_empty()
        && let Some(structured) = &result.structured_content
    {
        text = structured.to_string();
    }
    // Text alone needs no blocks: the text is the content.
    if content.iter().all(|c| matches!(c, Content::Text { .. })) {
        content.clear();
    }
    ToolOutput {
        text,
        structured: result.structured_content,
        content,
        is_error: result.is_error.unwrap_or(false),
        ..ToolOutput::default()
    }
}

/// A server's form question as the host asks it. A URL question has no form: it is
/// `None` (the caller asks those through [`url_of`]).
pub(crate) fn ask_request(params: &ElicitRequestParams) -> Option<AskRequest> {
    match params {
        ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } => Some(AskRequest {
            message: message.clone(),
            schema: serde_json::to_value(requested_schema)
                .unwrap_or_else(|_| serde_json::json!({"type": "object"})),
        }),
        _ => None,
    }
}

/// A URL question's message and URL.
pub(crate) fn url_of(params: &ElicitRequestParams) -> Option<(String, String)> {
    match params {
        ElicitRequestParams::UrlElicitationParams { message, url, .. } => {
            Some((message.clone(), url.clone()))
        }
        _ => None,
    }
}

/// The answer to a server's question.
pub(crate) fn elicit_result(answer: AskAnswer) -> ElicitResult {
    match answer {
        AskAnswer::Accept { content } => {
            let result = ElicitResult::new(ElicitationAction::Accept);
            if content.is_null() {
                result
            } else {
                result.with_content(content)
            }
        }
        AskAnswer::Decline => ElicitResult::new(ElicitationAction::Decline),
        AskAnswer::Cancel => ElicitResult::new(ElicitationAction::Cancel),
    }
}

/// A server's sampling request as one prompt: each message's text, labelled by its role
/// when there are several.
pub(crate) fn sample_request(params: &CreateMessageRequestParams) -> SampleRequest {
    let text_of = |m: &SamplingMessage| -> String {
        serde_json::to_value(&m.content)
            .ok()
            .map(|v| collect_text(&v))
            .unwrap_or_default()
    };
    let prompt = if params.messages.len() == 1 {
        text_of(&params.messages[0])
    } else {
        params
            .messages
            .iter()
            .map(|m| {
                let who = if m.role == Role::Assistant {
                    "assistant"
                } else {
                    "user"
                };
                format!("{who}: {}", text_of(m))
            })
            .collect::<Vec<_>>()
            .join("\n\n")
    };
    SampleRequest {
        prompt,
        system: params.system_prompt.clone(),
        max_tokens: params.max_tokens,
    }
}

/// Every `text` in a content value (one block or a list of them).
fn collect_text(value: &Value) -> String {
    match value {
        Value::Array(items) => items
            .iter()
            .map(collect_text)
            .filter(|t| !t.is_empty())
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Object(map) => map
            .get("text")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        _ => String::new(),
    }
}

/// The caller's model's answer to a server's sampling request.
pub(crate) fn sample_result(answer: SampleAnswer) -> CreateMessageResult {
    CreateMessageResult::new(
        SamplingMessage::assistant_text(answer.text),
        answer.model.unwrap_or_else(|| "unknown".to_owned()),
    )
    .with_stop_reason(CreateMessageResult::STOP_REASON_END_TURN)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(json: Value) -> Tool {
        serde_json::from_value(json).expect("tool")
    }

    #[test]
    fn annotations_give_the_risk_and_only_a_trusted_server_may_lower_it() {
        let base = serde_json::json!({"name": "t", "inputSchema": {"type": "object"}});
        let with = |a: Value, trusted: bool| {
            let mut t = base.clone();
            t["annotations"] = a;
            risk(&tool(t), trusted)
        };
        for trusted in [true, false] {
            assert_eq!(risk(&tool(base.clone()), trusted), Risk::Write);
            assert_eq!(
                with(serde_json::json!({"destructiveHint": true}), trusted),
                Risk::Destructive
            );
            assert_eq!(
                with(serde_json::json!({"openWorldHint": true}), trusted),
                Risk::Network
            );
            assert_eq!(
                with(serde_json::json!({"destructiveHint": false}), trusted),
                Risk::Write
            );
        }
        let read_only = serde_json::json!({"readOnlyHint": true});
        assert_eq!(with(read_only.clone(), true), Risk::Read);
        assert_eq!(with(read_only, false), Risk::Write);
        let both = serde_json::json!({"readOnlyHint": true, "destructiveHint": true});
        assert_eq!(with(both.clone(), true), Risk::Read);
        assert_eq!(with(both, false), Risk::Destructive);
    }

    #[test]
    fn names_are_prefixed_valid_short_and_unique() {
        let mut taken = BTreeSet::new();
        assert_eq!(local_name("fs_", "read.file", &mut taken), "fs_read_file");
        assert_eq!(local_name("fs_", "read/file", &mut taken), "fs_read_file_2");
        let long = "x".repeat(100);
        let a = local_name("fs_", &long, &mut taken);
        assert_eq!(a.len(), 64);
        assert!(toolhost_calls::registry::is_valid_tool_name(&a), "{a}");
        let b = local_name("fs_", &long, &mut taken);
        assert_ne!(a, b);
        assert!(
            b.len() <= 64 && toolhost_calls::registry::is_valid_tool_name(&b),
            "{b}"
        );
    }

    #[test]
    fn results_keep_every_block_structured_content_and_the_error_flag() {
        let result: CallToolResult = serde_json::from_value(serde_json::json!({
            "content": [
                {"type": "text", "text": "hello"},
                {"type": "image", "data": "iVBO", "mimeType": "image/png"},
                {"type": "resource_link", "uri": "file:///a", "name": "a"}
            ],
            "structuredContent": {"n": 1},
            "isError": true
        }))
        .expect("result");
        let out = output(result);
        assert!(out.is_error);
        assert_eq!(out.structured, Some(serde_json::json!({"n": 1})));
        assert_eq!(out.content.len(), 3);
        assert!(
            out.text.starts_with("hello\n[image: image/png"),
            "{}",
            out.text
        );
        assert!(matches!(&out.content[2], Content::ResourceLink { uri, .. } if uri == "file:///a"));
        let only: CallToolResult = serde_json::from_value(
            serde_json::json!({"content": [], "structuredContent": {"a": 2}}),
        )
        .expect("result");
        let out = output(only);
        assert_eq!(out.text, r#"{"a":2}"#);
        assert!(!out.is_error && out.content.is_empty());
    }
}
