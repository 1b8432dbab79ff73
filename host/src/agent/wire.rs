//! The Chat Completions wire format as Rust types: the request the client sends and the
//! response it reads, read as leniently as local OpenAI-compatible servers need (missing
//! fields, `null` text, arguments as text or as an object, ids left out). A streamed
//! answer's chunks (`stream: true`) are typed here too; `stream.rs` assembles them.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::messages::{Message, ModelToolCall, Role, Usage};
use toolhost_calls::tool::ToolSpec;

/// A `POST /chat/completions` body.
#[derive(Debug, Serialize)]
pub(crate) struct ChatRequest<'a> {
    /// The model's name.
    pub(crate) model: &'a str,
    /// The conversation so far.
    pub(crate) messages: Vec<RequestMessage<'a>>,
    /// The tools offered (left out when there are none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) tools: Vec<RequestTool<'a>>,
    /// Whether the answer is to come as server-sent events (left out when not).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) stream: bool,
    /// With `stream`: ask for the usage in a last chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) stream_options: Option<StreamOptions>,
}

/// `stream_options` of a streamed request.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct StreamOptions {
    /// Send `usage` in a last chunk (whose `choices` is empty).
    pub(crate) include_usage: bool,
}

/// One message of a request.
#[derive(Debug, Serialize)]
pub(crate) struct RequestMessage<'a> {
    role: Role,
    /// Sent as `null` when the message has no text (an assistant message that only calls
    /// tools).
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<RequestToolCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
}

/// A tool call of an assistant message, as the request repeats it.
#[derive(Debug, Serialize)]
struct RequestToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: FunctionKind,
    function: RequestFunction<'a>,
}

/// The only kind of tool Chat Completions has: `"function"`.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "lowercase")]
enum FunctionKind {
    Function,
}

#[derive(Debug, Serialize)]
struct RequestFunction<'a> {
    name: &'a str,
    /// JSON text, as the model wrote it.
    arguments: &'a str,
}

/// A tool offered to the model.
#[derive(Debug, Serialize)]
pub(crate) struct RequestTool<'a> {
    #[serde(rename = "type")]
    kind: FunctionKind,
    function: ToolFunction<'a>,
}

#[derive(Debug, Serialize)]
struct ToolFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

impl<'a> ChatRequest<'a> {
    /// The request for the model's next message after `messages`, offered `tools`.
    pub(crate) fn new(model: &'a str, messages: &'a [Message], tools: &[&'a ToolSpec]) -> Self {
        ChatRequest {
            model,
            messages: messages.iter().map(RequestMessage::from).collect(),
            tools: tools
                .iter()
                .map(|t| RequestTool {
                    kind: FunctionKind::Function,
                    function: ToolFunction {
                        name: &t.name,
                        description: &t.description,
                        parameters: &t.schema,
                    },
                })
                .collect(),
            stream: false,
            stream_options: None,
        }
    }

    /// This request, asking for its answer as a stream (`stream`) or in one piece.
    pub(crate) fn streamed(self, stream: bool) -> Self {
        ChatRequest {
            stream,
            stream_options: stream.then_some(StreamOptions {
                include_usage: true,
            }),
            ..self
        }
    }
}

impl<'a> From<&'a Message> for RequestMessage<'a> {
    fn from(m: &'a Message) -> Self {
        RequestMessage {
            role: m.role,
            content: m.content.as_deref(),
            tool_calls: m
                .tool_calls
                .iter()
                .map(|c| RequestToolCall {
                    id: &c.id,
                    kind: FunctionKind::Function,
                    function: RequestFunction {
                        name: &c.name,
                        arguments: &c.arguments,
                    },
                })
                .collect(),
            tool_call_id: m.tool_call_id.as_deref(),
        }
    }
}

/// A field as a lenient reader sees it: missing, `null`, of the expected type, or of
/// another (kept, so it can be quoted or passed on).
#[derive(Debug, Default)]
pub(crate) enum Loose<T> {
    /// Not there.
    #[default]
    Missing,
    /// `null`.
    Null,
    /// Of the expected type.
    Typed(T),
    /// Of another type.
    Other(Value),
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Loose<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        if value.is_null() {
            return Ok(Loose::Null);
        }
        Ok(match T::deserialize(&value) {
            Ok(typed) => Loose::Typed(typed),
            Err(_) => Loose::Other(value),
        })
    }
}

/// A Chat Completions response (what the client reads of it).
#[derive(Debug, Deserialize)]
pub(crate) struct ChatResponse {
    #[serde(default)]
    choices: Loose<Vec<Loose<Choice>>>,
    #[serde(default)]
    usage: Loose<WireUsage>,
}

/// `usage` as servers send it (any field may be missing).
#[derive(Debug, Deserialize)]
pub(crate) struct WireUsage {
    #[serde(default)]
    prompt_tokens: Loose<u64>,
    #[serde(default)]
    completion_tokens: Loose<u64>,
}

impl Loose<WireUsage> {
    /// The usage, when the server reported the prompt's tokens.
    pub(crate) fn usage(self) -> Option<Usage> {
        let Loose::Typed(usage) = self else {
            return None;
        };
        let Loose::Typed(prompt_tokens) = usage.prompt_tokens else {
            return None;
        };
        Some(Usage {
            prompt_tokens,
            completion_tokens: match usage.completion_tokens {
                Loose::Typed(n) => n,
                _ => 0,
            },
        })
    }
}

/// One chunk of a streamed answer (a `data:` event's JSON).
#[derive(Debug, Deserialize)]
pub(crate) struct ChatChunk {
    #[serde(default)]
    pub(crate) choices: Loose<Vec<Loose<ChunkChoice>>>,
    #[serde(default)]
    pub(crate) usage: Loose<WireUsage>,
    /// A server that fails mid-stream may say so in an `error` object.
    #[serde(default)]
    pub(crate) error: Loose<Value>,
}

/// A chunk's choice: what the message gained.
#[derive(Debug, Deserialize)]
pub(crate) struct ChunkChoice {
    #[serde(default)]
    pub(crate) delta: Loose<Delta>,
}

/// What a chunk adds to the message.
#[derive(Debug, Deserialize)]
pub(crate) struct Delta {
    #[serde(default)]
    pub(crate) content: Loose<String>,
    #[serde(default)]
    pub(crate) tool_calls: Loose<Vec<Loose<DeltaToolCall>>>,
}

/// A piece of a tool call: the first names it (`id`, `function.name`), the following
/// carry more of its `arguments`; `index` says which call.
#[derive(Debug, Deserialize)]
pub(crate) struct DeltaToolCall {
    #[serde(default)]
    pub(crate) index: Loose<usize>,
    #[serde(default)]
    pub(crate) id: Loose<String>,
    #[serde(default)]
    pub(crate) function: Loose<DeltaFunction>,
}

/// A piece of a tool call's function.
#[derive(Debug, Deserialize)]
pub(crate) struct DeltaFunction {
    #[serde(default)]
    pub(crate) name: Loose<String>,
    /// More of the arguments' text (some servers send the whole object at once).
    #[serde(default)]
    pub(crate) arguments: Loose<Value>,
}

#[derive(Debug, Deserialize)]
struct Choice {
    #[serde(default)]
    message: Loose<ResponseMessage>,
}

#[derive(Debug, Deserialize)]
struct ResponseMessage {
    #[serde(default)]
    content: Loose<String>,
    #[serde(default)]
    tool_calls: Loose<Vec<Loose<ResponseToolCall>>>,
}

#[derive(Debug, Deserialize)]
struct ResponseToolCall {
    #[serde(default)]
    id: Loose<String>,
    #[serde(default)]
    function: Loose<ResponseFunction>,
}

#[derive(Debug, Deserialize)]
struct ResponseFunction {
    #[serde(default)]
    name: Loose<String>,
    /// Text as the protocol says; some servers send an object, or nothing.
    #[serde(default)]
    arguments: Loose<String>,
}

/// What is wrong with a response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ResponseError {
    /// Not JSON at all.
    #[error("not JSON: {0}")]
    NotJson(String),
    /// No `choices[0].message`.
    #[error("no choices[0].message")]
    NoMessage,
    /// `content` is neither text nor null.
    #[error("message.content is not text")]
    ContentNotText,
    /// `tool_calls` is not a list.
    #[error("message.tool_calls is not a list")]
    CallsNotAList,
    /// A tool call names no function.
    #[error("tool_calls[{0}] has no function.name")]
    CallWithoutName(usize),
    /// The message says nothing.
    #[error("the message has neither text nor tool calls")]
    Empty,
    /// A streamed chunk is not JSON.
    #[error("a streamed chunk is not JSON: {0}")]
    ChunkNotJson(String),
    /// The server said in the stream that it failed.
    #[error("the server reported an error mid-stream: {0}")]
    InStream(String),
}

impl ChatResponse {
    /// Reads the assistant message of a response's text.
    #[cfg(test)]
    pub(crate) fn parse(text: &str) -> Result<Message, ResponseError> {
        Self::parse_with_usage(text).map(|(message, _)| message)
    }

    /// Reads the assistant message of a response's text, and the usage it reports.
    pub(crate) fn parse_with_usage(text: &str) -> Result<(Message, Option<Usage>), ResponseError> {
        let response: Loose<ChatResponse> =
            serde_json::from_str(text).map_err(|e| ResponseError::NotJson(e.to_string()))?;
        let Loose::Typed(response) = response else {
            return Err(ResponseError::NoMessage);
        };
        let usage = response.usage.usage();
        let Loose::Typed(mut choices) = response.choices else {
            return Err(ResponseError::NoMessage);
        };
        if choices.is_empty() {
            return Err(ResponseError::NoMessage);
        }
        let message = match choices.swap_remove(0) {
            Loose::Typed(Choice {
                message: Loose::Missing,
            })
            | Loose::Missing
            | Loose::Null
            | Loose::Other(_) => return Err(ResponseError::NoMessage),
            Loose::Typed(Choice {
                message: Loose::Typed(message),
            }) => message,
            // A message that is not an object says nothing.
            Loose::Typed(Choice { message: _ }) => return Err(ResponseError::Empty),
        };
        let content = match message.content {
            Loose::Missing | Loose::Null => None,
            Loose::Typed(text) => Some(text),
            Loose::Other(_) => return Err(ResponseError::ContentNotText),
        };
        let calls = match message.tool_calls {
            Loose::Missing | Loose::Null => Vec::new(),
            Loose::Typed(calls) => calls,
            Loose::Other(_) => return Err(ResponseError::CallsNotAList),
        };
        let tool_calls = calls
            .into_iter()
            .enumerate()
            .map(|(i, call)| call.into_model_call(i))
            .collect::<Result<Vec<_>, _>>()?;
        if content.is_none() && tool_calls.is_empty() {
            return Err(ResponseError::Empty);
        }
        Ok((
            Message {
                role: Role::Assistant,
                content,
                tool_calls,
                tool_call_id: None,
                details: toolhost_calls::details::Details::new(),
                id: None,
            },
            usage,
        ))
    }
}

impl Loose<ResponseToolCall> {
    /// The `i`th call of a message: its name is required; a missing id becomes `call_{i}`,
    /// missing arguments `{}`, arguments sent as an object their JSON text.
    fn into_model_call(self, i: usize) -> Result<ModelToolCall, ResponseError> {
        let Loose::Typed(call) = self else {
            return Err(ResponseError::CallWithoutName(i));
        };
        let Loose::Typed(function) = call.function else {
            return Err(ResponseError::CallWithoutName(i));
        };
        let Loose::Typed(name) = function.name else {
            return Err(ResponseError::CallWithoutName(i));
        };
        let arguments = match function.arguments {
            Loose::Typed(text) => text,
            Loose::Missing | Loose::Null => "{}".to_owned(),
            Loose::Other(value) => value.to_string(),
        };
        let id = match call.id {
            Loose::Typed(id) => id,
            _ => format!("call_{i}"),
        };
        Ok(ModelToolCall {
            id,
            name,
            arguments,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec() -> ToolSpec {
        ToolSpec {
            name: "echo".to_owned(),
            description: "Echoes.".to_owned(),
            schema: json!({"type": "object"}),
            risk: toolhost_plugin_api::Risk::Read,
            interactive: false,
            requirements: toolhost_plugin_api::Requirements::default(),
            output_schema: None,
        }
    }

    #[test]
    fn requests_are_the_json_chat_completions_expects() {
        let messages = vec![
            Message::text(Role::System, "be kind"),
            Message::text(Role::User, "hi"),
            Message {
                role: Role::Assistant,
                content: None,
                tool_calls: vec![ModelToolCall {
                    id: "c1".to_owned(),
                    name: "echo".to_owned(),
                    arguments: "{\"text\":\"x\"}".to_owned(),
                }],
                tool_call_id: None,
                details: toolhost_calls::details::Details::new(),
                id: None,
            },
            Message::tool_result("c1", "x"),
        ];
        let spec = spec();
        let body = serde_json::to_value(ChatRequest::new("m", &messages, &[&spec])).expect("json");
        assert_eq!(
            body,
            json!({
                "model": "m",
                "messages": [
                    {"role": "system", "content": "be kind"},
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "c1", "type": "function",
                         "function": {"name": "echo", "arguments": "{\"text\":\"x\"}"}}
                    ]},
                    {"role": "tool", "content": "x", "tool_call_id": "c1"}
                ],
                "tools": [{"type": "function", "function": {
                    "name": "echo", "description": "Echoes.", "parameters": {"type": "object"}}}]
            })
        );
        let body = serde_json::to_value(ChatRequest::new("m", &messages[..1], &[])).expect("json");
        assert_eq!(
            body,
            json!({"model": "m", "messages": [{"role": "system", "content": "be kind"}]})
        );
    }

    #[test]
    fn responses_are_read_leniently() {
        let parse = |v: Value| ChatResponse::parse(&v.to_string());
        let m = parse(json!({"choices": [{"message": {"content": "hello"}}]})).expect("text");
        assert_eq!(m, Message::text(Role::Assistant, "hello"));
        let m = parse(
            json!({"choices": [{"message": {"content": null, "tool_calls": [
                {"function": {"name": "a", "arguments": {"x": 1}}},
                {"id": "b1", "function": {"name": "b"}},
                {"id": "c1", "function": {"name": "c", "arguments": null}},
            ]}}]}),
        )
        .expect("calls");
        assert_eq!(m.content, None);
        let calls: Vec<(&str, &str, &str)> = m
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
            .collect();
        assert_eq!(
            calls,
            [
                ("call_0", "a", "{\"x\":1}"),
                ("b1", "b", "{}"),
                ("c1", "c", "{}")
            ]
        );
        let m = parse(json!({"choices": [{"message": {"content": "t", "tool_calls": null}}]}))
            .expect("null calls");
        assert!(m.tool_calls.is_empty());
    }

    #[test]
    fn malformed_responses_say_what_is_wrong() {
        let cases = [
            ("not json".to_owned(), "not JSON"),
            ("[]".to_owned(), "no choices[0].message"),
            ("{}".to_owned(), "no choices[0].message"),
            (json!({"choices": []}).to_string(), "no choices[0].message"),
            (
                json!({"choices": [{}]}).to_string(),
                "no choices[0].message",
            ),
            (
                json!({"choices": [{"message": null}]}).to_string(),
                "neither text nor tool calls",
            ),
            (
                json!({"choices": [{"message": {"content": 5}}]}).to_string(),
                "message.content is not text",
            ),
            (
                json!({"choices": [{"message": {"tool_calls": {}}}]}).to_string(),
                "message.tool_calls is not a list",
            ),
            (
                json!({"choices": [{"message": {"tool_calls": [{"function": {}}]}}]}).to_string(),
                "tool_calls[0] has no function.name",
            ),
            (
                json!({"choices": [{"message": {"role": "assistant"}}]}).to_string(),
                "neither text nor tool calls",
            ),
        ];
        for (text, expected) in cases {
            let err = ChatResponse::parse(&text).expect_err(&text);
            assert!(err.to_string().contains(expected), "{text}: {err}");
        }
    }
}
