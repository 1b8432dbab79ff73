//! A streamed Chat Completions answer (`stream: true`): the server-sent events cut out of
//! the bytes as they arrive ([`SseDecoder`]), and their chunks assembled into the message
//! ([`Assembly`]): text deltas appended (and handed on as they come), tool calls gathered
//! by `index` (id and name from their first piece, `arguments` from all of them), the usage
//! from the last chunk. Hand-written: SSE as model servers use it is a few rules (`data:`
//! lines, a blank line ends an event, `:` comments, `[DONE]`), and the wire types of the
//! chunks are in `wire.rs`. Lenient where servers differ: a `data:` line that follows a
//! complete event without the blank line still starts a new event, and a body that ends
//! without `[DONE]` ends the answer.

use serde_json::Value;

use super::messages::{Message, ModelToolCall, Role, Usage};
use super::wire::{
    ChatChunk, ChunkChoice, Delta, DeltaFunction, DeltaToolCall, Loose, ResponseError,
};

/// The `data` of the event that ends a stream.
const DONE: &str = "[DONE]";

/// Cuts server-sent events out of a byte stream: feed it the body's chunks as they come
/// (a line, even a UTF-8 character, may be split across them) and get each complete
/// event's data.
#[derive(Debug, Default)]
pub(crate) struct SseDecoder {
    /// Bytes of a line not yet ended.
    partial: Vec<u8>,
    /// The data lines of the event being read.
    data: Option<String>,
}

impl SseDecoder {
    /// Reads `bytes`; returns the data of the events they complete, in order.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut events = Vec::new();
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            self.partial.extend_from_slice(&rest[..end]);
            rest = &rest[end + 1..];
            let line = std::mem::take(&mut self.partial);
            let line = String::from_utf8_lossy(&line);
            self.line(line.strip_suffix('\r').unwrap_or(&line), &mut events);
        }
        self.partial.extend_from_slice(rest);
        events
    }

    /// The data of an event the body ended in without its blank line.
    pub(crate) fn finish(&mut self) -> Vec<String> {
        let mut events = Vec::new();
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            let line = String::from_utf8_lossy(&line).into_owned();
            self.line(line.strip_suffix('\r').unwrap_or(&line), &mut events);
        }
        events.extend(self.data.take());
        events
    }

    fn line(&mut self, line: &str, events: &mut Vec<String>) {
        if line.is_empty() {
            events.extend(self.data.take());
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        if field != "data" {
            // event:, id:, retry: say nothing a chat answer needs.
            return;
        }
        match &mut self.data {
            // A server that leaves out the blank line between events: the last one was
            // whole, so this line starts the next.
            Some(pending) if is_whole(pending) => {
                events.extend(self.data.replace(value.to_owned()));
            }
            Some(pending) => {
                pending.push('\n');
                pending.push_str(value);
            }
            None => self.data = Some(value.to_owned()),
        }
    }
}

/// Whether an event's data is complete as it is (`[DONE]` or a whole JSON value).
fn is_whole(data: &str) -> bool {
    data.trim() == DONE || serde_json::from_str::<serde::de::IgnoredAny>(data).is_ok()
}

/// A tool call being assembled.
#[derive(Debug)]
struct PartialCall {
    /// Which call (the chunks' `index`).
    index: usize,
    id: Option<String>,
    name: Option<String>,
    arguments: String,
}

/// A streamed message being assembled from its chunks.
#[derive(Debug, Default)]
pub(crate) struct Assembly {
    content: String,
    calls: Vec<PartialCall>,
    usage: Option<Usage>,
    done: bool,
    chunks: usize,
}

impl Assembly {
    /// Reads one event's data; returns the text it adds to the answer, if any.
    pub(crate) fn event(&mut self, data: &str) -> Result<Option<String>, ResponseError> {
        if data.trim() == DONE {
            self.done = true;
            return Ok(None);
        }
        if data.trim().is_empty() {
            return Ok(None);
        }
        let chunk: ChatChunk = serde_json::from_str(data)
            .map_err(|e| ResponseError::ChunkNotJson(format!("{e}: {}", shorten(data))))?;
        self.chunks += 1;
        if let Loose::Typed(error) | Loose::Other(error) = chunk.error {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| error.to_string(), str::to_owned);
            return Err(ResponseError::InStream(message));
        }
        if let Some(usage) = chunk.usage.usage() {
            self.usage = Some(usage);
        }
        let Loose::Typed(choices) = chunk.choices else {
            return Ok(None);
        };
        let mut text = String::new();
        // One choice is asked for; a server that sends more is read for the first.
        let first = choices.into_iter().next();
        if let Some(Loose::Typed(ChunkChoice {
            delta: Loose::Typed(delta),
        })) = first
        {
            let Delta {
                content,
                tool_calls,
            } = delta;
            if let Loose::Typed(piece) = content {
                text.push_str(&piece);
            }
            if let Loose::Typed(pieces) = tool_calls {
                for (position, piece) in pieces.into_iter().enumerate() {
                    if let Loose::Typed(piece) = piece {
                        self.call_piece(position, piece);
                    }
                }
            }
        }
        self.content.push_str(&text);
        Ok((!text.is_empty()).then_some(text))
    }

    /// Adds a piece of a tool call to its call (by `index`; a server that leaves the index
    /// out is read by id, else as more of the last call).
    fn call_piece(&mut self, position: usize, piece: DeltaToolCall) {
        let id = match piece.id {
            Loose::Typed(id) if !id.is_empty() => Some(id),
            _ => None,
        };
        let slot = match piece.index {
            Loose::Typed(index) => self.calls.iter().position(|c| c.index == index),
            _ => match &id {
                Some(id) => self.calls.iter().position(|c| c.id.as_ref() == Some(id)),
                None => self.calls.len().checked_sub(1),
            },
        };
        let slot = slot.unwrap_or_else(|| {
            let index = match piece.index {
                Loose::Typed(index) => index,
                _ => self.calls.len().max(position),
            };
            self.calls.push(PartialCall {
                index,
                id: None,
                name: None,
                arguments: String::new(),
            });
            self.calls.len() - 1
        });
        let call = &mut self.calls[slot];
        if call.id.is_none() {
            call.id = id;
        }
        if let Loose::Typed(DeltaFunction { name, arguments }) = piece.function {
            if let Loose::Typed(name) = name
                && !name.is_empty()
                && call.name.is_none()
            {
                call.name = Some(name);
            }
            match arguments {
                Loose::Typed(Value::String(more)) => call.arguments.push_str(&more),
                Loose::Typed(Value::Null) | Loose::Missing | Loose::Null => {}
                Loose::Typed(whole) | Loose::Other(whole) => call.arguments = whole.to_string(),
            }
        }
    }

    /// Whether the stream said `[DONE]`.
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    /// Whether any chunk came.
    pub(super) fn has_chunks(&self) -> bool {
        self.chunks > 0
    }

    /// The assembled message and the usage of the last chunk that reported one.
    pub(crate) fn finish(mut self) -> Result<(Message, Option<Usage>), ResponseError> {
        self.calls.sort_by_key(|c| c.index);
        let tool_calls = self
            .calls
            .into_iter()
            .enumerate()
            .map(|(i, call)| {
                Ok(ModelToolCall {
                    id: call.id.unwrap_or_else(|| format!("call_{i}")),
                    name: call.name.ok_or(ResponseError::CallWithoutName(i))?,
                    arguments: if call.arguments.trim().is_empty() {
                        "{}".to_owned()
                    } else {
                        call.arguments
                    },
                })
            })
            .collect::<Result<Vec<_>, ResponseError>>()?;
        let content = (!self.content.is_empty()).then_some(self.content);
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
            self.usage,
        ))
    }
}

fn shorten(text: &str) -> String {
    crate::text::shorten(text.trim(), 200)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The events of `body` fed in pieces of `size` bytes.
    fn events_in_pieces(body: &str, size: usize) -> Vec<String> {
        let mut decoder = SseDecoder::default();
        let mut events = Vec::new();
        for piece in body.as_bytes().chunks(size) {
            events.extend(decoder.feed(piece));
        }
        events.extend(decoder.finish());
        events
    }

    #[test]
    fn events_are_cut_out_however_the_bytes_are_split() {
        let body = ": keep-alive\r\n\r\ndata: {\"a\":\"é\"}\r\n\r\nevent: x\ndata: one\ndata: two\n\n\
                    data: {\"b\":1}\ndata: {\"c\":2}\n\ndata: [DONE]";
        let expected = [
            "{\"a\":\"é\"}",
            "one\ntwo",
            "{\"b\":1}",
            "{\"c\":2}",
            "[DONE]",
        ];
        for size in [1, 2, 3, 7, 1000] {
            assert_eq!(events_in_pieces(body, size), expected, "pieces of {size}");
        }
    }

    /// A stream of `chunks`, as a server sends it.
    fn sse(chunks: &[Value]) -> String {
        let mut body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
        body.push_str("data: [DONE]\n\n");
        body
    }

    /// An assembled answer.
    type Assembled = Result<(Message, Option<Usage>), ResponseError>;

    fn assemble(body: &str, size: usize) -> (Assembled, Vec<String>) {
        let mut assembly = Assembly::default();
        let mut shown = Vec::new();
        for data in events_in_pieces(body, size) {
            match assembly.event(&data) {
                Ok(Some(text)) => shown.push(text),
                Ok(None) => {}
                Err(e) => return (Err(e), shown),
            }
        }
        assert!(assembly.is_done());
        (assembly.finish(), shown)
    }

    #[test]
    fn text_and_tool_calls_split_across_chunks_are_assembled() {
        let delta =
            |d: Value| json!({"choices": [{"index": 0, "delta": d, "finish_reason": null}]});
        let body = sse(&[
            delta(json!({"role": "assistant", "content": ""})),
            delta(json!({"content": "Let me "})),
            delta(json!({"content": "look."})),
            delta(
                json!({"tool_calls": [{"index": 0, "id": "c0", "type": "function",
                "function": {"name": "grep", "arguments": ""}}]}),
            ),
            delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"pat"}}]})),
            delta(json!({"tool_calls": [{"index": 1, "id": "c1",
                "function": {"name": "echo", "arguments": "{\"te"}}]})),
            delta(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "tern\": \"a b"}}]}),
            ),
            delta(json!({"tool_calls": [{"index": 1, "function": {"arguments": "xt\":1}"}}]})),
            delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"}"}}]})),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 120, "completion_tokens": 30}}),
        ]);
        for size in [1, 5, 64, 100_000] {
            let (assembled, shown) = assemble(&body, size);
            let (message, usage) = assembled.expect("assembled");
            assert_eq!(shown, ["Let me ", "look."]);
            assert_eq!(message.content.as_deref(), Some("Let me look."));
            let calls: Vec<(&str, &str, &str)> = message
                .tool_calls
                .iter()
                .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
                .collect();
            assert_eq!(
                calls,
                [
                    ("c0", "grep", "{\"pattern\": \"a b\"}"),
                    ("c1", "echo", "{\"text\":1}")
                ]
            );
            assert_eq!(
                usage,
                Some(Usage {
                    prompt_tokens: 120,
                    completion_tokens: 30
                })
            );
        }
    }

    #[test]
    fn lenient_servers_are_read_and_errors_named() {
        // No index, arguments as an object, no usage.
        let body = sse(&[json!({"choices": [{"delta": {"tool_calls": [
            {"id": "x", "function": {"name": "a", "arguments": {"k": 1}}}
        ]}}]})]);
        let (message, usage) = assemble(&body, 9).0.expect("assembled");
        assert_eq!(message.tool_calls[0].arguments, "{\"k\":1}");
        assert_eq!(message.content, None);
        assert_eq!(usage, None);

        let body = sse(&[json!({"error": {"message": "the GPU caught fire"}})]);
        let err = assemble(&body, 9).0.expect_err("error");
        assert!(err.to_string().contains("GPU caught fire"), "{err}");

        let body = sse(&[json!({"choices": [{"delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": "{}"}}
        ]}}]})]);
        assert_eq!(
            assemble(&body, 9).0.expect_err("nameless"),
            ResponseError::CallWithoutName(0)
        );

        let body = sse(&[json!({"choices": [{"delta": {"content": ""}}]})]);
        assert_eq!(
            assemble(&body, 9).0.expect_err("empty"),
            ResponseError::Empty
        );

        let mut assembly = Assembly::default();
        assert!(matches!(
            assembly.event("{not json"),
            Err(ResponseError::ChunkNotJson(_))
        ));
    }
}
