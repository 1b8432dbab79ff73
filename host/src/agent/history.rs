//! A session's history, compact, for the `sessions.summary` host request (the
//! `session_summary` tool): the person's requests, numbered, each with its outcome (the
//! final answer shortened, the tools called with counts and errors). Built from the
//! stored messages; a tool result is an error where the turn recorded it so (the
//! `toolhost/error` detail, which [`tool_message_details`] adds).

use std::collections::HashMap;

use toolhost_plugin_api::{RequestSummary, SessionsSummaryAnswer, ToolUse};

use super::messages::{Message, Role};
use toolhost_calls::details::{Details, HostDetail as _, ToolFailed};
use toolhost_calls::result::ToolResult;

/// How many requests an answer holds unless asked otherwise, and at most.
const DEFAULT_LAST: u32 = 20;
const MAX_LAST: u32 = 100;

/// How much of a request, an answer and an error the summary keeps.
const REQUEST_CHARS: usize = 160;
const ANSWER_CHARS: usize = 200;
const ERROR_CHARS: usize = 120;
/// The most errors listed per request.
const ERRORS_PER_REQUEST: usize = 3;

/// The details a tool result is stored with: the result's own, and for an error the
/// [`ToolFailed`] kind (which the summary counts).
pub(super) fn tool_message_details(result: &ToolResult) -> Details {
    let mut details = result.details.clone();
    if result.is_error {
        ToolFailed { kind: result.error }.insert_into(&mut details);
    }
    details
}

/// The summary of `session`'s `messages`, its last `last` requests (default 20, at most
/// 100). The last request, unanswered, is the one in progress (the caller's own turn).
pub(super) fn summarize(
    session: &str,
    messages: &[Message],
    last: Option<u32>,
) -> SessionsSummaryAnswer {
    let mut requests: Vec<RequestSummary> = Vec::new();
    // The tool each call id named, to count a result's error against its tool.
    let mut called: HashMap<&str, &str> = HashMap::new();
    for message in messages {
        match message.role {
            Role::System => {}
            Role::User => {
                let number = u32::try_from(requests.len() + 1).unwrap_or(u32::MAX);
                let text = one_line(message.content.as_deref().unwrap_or_default());
                requests.push(RequestSummary::new(
                    number,
                    crate::text::shorten(&text, REQUEST_CHARS),
                ));
            }
            Role::Assistant => {
                let Some(current) = requests.last_mut() else {
                    continue;
                };
                for call in &message.tool_calls {
                    called.insert(&call.id, &call.name);
                    match current.tools.iter_mut().find(|t| t.name == call.name) {
                        Some(used) => used.calls += 1,
                        None => current.tools.push(ToolUse::new(call.name.clone(), 1, 0)),
                    }
                }
                if message.tool_calls.is_empty() {
                    let text = one_line(message.content.as_deref().unwrap_or_default());
                    current.answer = Some(crate::text::shorten(&text, ANSWER_CHARS));
                    current.status = "answered".to_owned();
                }
            }
            Role::Tool => {
                let Some(current) = requests.last_mut() else {
                    continue;
                };
                let is_error = ToolFailed::is_in(&message.details);
                if !is_error {
                    continue;
                }
                let tool = message
                    .tool_call_id
                    .as_deref()
                    .and_then(|id| called.get(id).copied())
                    .unwrap_or("?");
                if let Some(used) = current.tools.iter_mut().find(|t| t.name == tool) {
                    used.errors += 1;
                }
                if current.errors.len() < ERRORS_PER_REQUEST {
                    let text = one_line(message.content.as_deref().unwrap_or_default());
                    current.errors.push(format!(
                        "{tool}: {}",
                        crate::text::shorten(&text, ERROR_CHARS)
                    ));
                }
            }
        }
    }
    if let Some(current) = requests.last_mut()
        && current.answer.is_none()
    {
        current.status = "in_progress".to_owned();
    }
    let total = u32::try_from(requests.len()).unwrap_or(u32::MAX);
    let keep = last.unwrap_or(DEFAULT_LAST).clamp(1, MAX_LAST) as usize;
    let skip = requests.len().saturating_sub(keep);
    requests.drain(..skip);
    let mut answer = SessionsSummaryAnswer::new(session, requests);
    answer.total = total;
    answer
}

/// `text` on one line: runs of whitespace become one space.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::messages::ModelToolCall;

    fn calls(list: &[(&str, &str)]) -> Message {
        Message {
            tool_calls: list
                .iter()
                .map(|(id, name)| ModelToolCall {
                    id: (*id).to_owned(),
                    name: (*name).to_owned(),
                    arguments: "{}".to_owned(),
                })
                .collect(),
            content: None,
            ..Message::text(Role::Assistant, "")
        }
    }

    fn failed(id: &str, text: &str) -> Message {
        Message {
            details: toolhost_calls::details::from_value(
                serde_json::json!({"toolhost/error": {"kind": "failed"}}),
            ),
            ..Message::tool_result(id, text)
        }
    }

    fn session() -> Vec<Message> {
        vec![
            Message::text(Role::System, "be helpful"),
            Message::text(Role::User, "read   the\nreadme"),
            calls(&[("a", "read_file"), ("b", "read_file")]),
            Message::tool_result("a", "# Title"),
            failed("b", "no such file: README.txt"),
            Message::text(Role::Assistant, "It is a title."),
            Message::text(Role::User, "now fix it"),
            calls(&[("c", "edit_file")]),
            failed("c", "anchor 3:ab not found"),
            Message::text(Role::User, "and test it"),
            calls(&[("d", "run_command")]),
        ]
    }

    #[test]
    fn requests_are_numbered_with_their_outcomes() {
        let answer = summarize("s-1", &session(), None);
        assert_eq!((answer.session.as_str(), answer.total), ("s-1", 3));
        let [first, second, third] = &answer.requests[..] else {
            panic!("{answer:?}");
        };
        assert_eq!(first.number, 1);
        assert_eq!(first.request, "read the readme");
        assert_eq!(first.status, "answered");
        assert_eq!(first.answer.as_deref(), Some("It is a title."));
        assert_eq!(first.tools, [ToolUse::new("read_file", 2, 1)]);
        assert_eq!(first.errors, ["read_file: no such file: README.txt"]);
        assert_eq!(second.status, "no_answer");
        assert_eq!(second.tools, [ToolUse::new("edit_file", 1, 1)]);
        assert_eq!(third.status, "in_progress");
        assert_eq!(third.tools, [ToolUse::new("run_command", 1, 0)]);
    }

    #[test]
    fn the_limit_keeps_the_last_requests_and_the_total() {
        let answer = summarize("s-1", &session(), Some(1));
        assert_eq!(answer.total, 3);
        assert_eq!(answer.requests.len(), 1);
        assert_eq!(answer.requests[0].number, 3);
        assert_eq!(summarize("s", &session(), Some(0)).requests.len(), 1);
        assert!(summarize("s", &[], None).requests.is_empty());
    }

    #[test]
    fn long_requests_and_answers_are_shortened() {
        let long = "x".repeat(1000);
        let messages = [
            Message::text(Role::User, &long),
            Message::text(Role::Assistant, &long),
        ];
        let answer = summarize("s", &messages, None);
        let r = &answer.requests[0];
        assert!(r.request.starts_with(&"x".repeat(REQUEST_CHARS)));
        assert!(
            r.request.ends_with("(840 more characters)"),
            "{}",
            r.request
        );
        assert!(
            r.answer
                .as_deref()
                .is_some_and(|a| a.ends_with("(800 more characters)"))
        );
    }
}
