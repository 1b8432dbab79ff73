//! The `session_search` tool: full-text search over the profile's past conversations
//! (the host's session store), returning matching snippets with their session and time;
//! and `session_summary`: the current conversation's compact, numbered history of the
//! person's requests and their outcomes (the host's `sessions.summary` request).

use serde_json::json;
use toolhost_plugin_api::{
    RequestSummary, ServiceError, SessionQuery, SessionsSummaryAnswer, ToolContext, ToolError,
    export_plugin, tool,
};

/// Searches your past conversations with this person (not the current one) for messages
/// containing every word of `query`, and returns the matching snippets (matches marked
/// [like this]) with the session they are from and when. Use it when the person refers to
/// something discussed before.
#[tool(risk = read)]
async fn session_search(
    ctx: &ToolContext<'_>,
    /// Words to look for; every one must appear in a message for it to match.
    query: String,
    /// The most matches to return (1 to 20, default 5).
    #[arg(range = 1..=20)]
    limit: Option<u32>,
) -> Result<String, ToolError> {
    if query.trim().is_empty() {
        return Err(ToolError::invalid_args("`query` needs at least one word"));
    }
    let hits = ctx
        .search_sessions(&SessionQuery {
            query,
            limit: limit.unwrap_or(5).clamp(1, 20),
            exclude_current: true,
        })
        .await?;
    Ok(json!({"matches": hits}).to_string())
}

/// Summarises this conversation so far: the person's requests, numbered, each with what
/// came of it (the answer, shortened; the tools called, with counts and errors). The
/// request being worked on now is the last, marked in progress. Use it to recall what was
/// asked and done earlier in a long conversation.
#[tool(risk = read)]
async fn session_summary(
    ctx: &ToolContext<'_>,
    /// Only the last this many requests (1 to 100, default 20).
    #[arg(range = 1..=100)]
    last: Option<u32>,
) -> Result<String, ToolError> {
    match ctx.session_summary(last.map(|n| n.clamp(1, 100))).await {
        Ok(history) => Ok(render(&history)),
        Err(ServiceError::Unavailable(why)) if why.contains("does not know the request") => {
            Err(ToolError::failed(format!(
                "this host is too old for session summaries ({why}); it needs toolhost with \
                 plugin-api 0.1.4 or later. Go on without the summary."
            )))
        }
        Err(ServiceError::Unavailable(why)) => Err(ToolError::failed(format!(
            "there is no conversation to summarise here ({why}). Go on without the summary."
        ))),
        Err(e) => Err(e.into()),
    }
}

/// The history as compact text: a header, then one block per request.
fn render(history: &SessionsSummaryAnswer) -> String {
    let shown = history.requests.len();
    let total = history.total as usize;
    let mut out = if total == 0 {
        return "No requests yet in this conversation.".to_owned();
    } else if shown < total {
        format!("{total} requests in this conversation; the last {shown}:\n")
    } else {
        format!("{total} requests in this conversation:\n")
    };
    for r in &history.requests {
        out.push_str(&request_lines(r));
    }
    out
}

/// `3. "the request" -> answered: "the answer"`, then the tools and errors, indented.
fn request_lines(r: &RequestSummary) -> String {
    let outcome = match (r.status.as_str(), &r.answer) {
        (_, Some(answer)) => format!("answered: {answer:?}"),
        ("in_progress", None) => "in progress (this request)".to_owned(),
        ("no_answer", None) => "no answer (the turn ended early)".to_owned(),
        (other, None) => other.replace('_', " "),
    };
    let mut out = format!("{}. {:?} -> {outcome}\n", r.number, r.request);
    if !r.tools.is_empty() {
        let tools: Vec<String> = r
            .tools
            .iter()
            .map(|t| match t.errors {
                0 => format!("{} x{}", t.name, t.calls),
                e => format!("{} x{} ({e} failed)", t.name, t.calls),
            })
            .collect();
        out.push_str(&format!("   tools: {}\n", tools.join(", ")));
    }
    for error in &r.errors {
        out.push_str(&format!("   error: {error}\n"));
    }
    out
}

export_plugin! {
    name: "session_search",
    version: env!("CARGO_PKG_VERSION"),
    tools: [session_search, session_summary],
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use serde_json::{Value, json};
    use toolhost_plugin_api::testing::{TestHost, call};
    use toolhost_plugin_api::{Risk, ServiceError, ToolError};

    use super::{session_search, session_summary};
    use toolhost_plugin_api::{RequestSummary, SessionsSummaryAnswer, ToolUse};

    /// A history of three requests: answered with tools (one failed), cut short, current.
    fn history() -> SessionsSummaryAnswer {
        let mut first = RequestSummary::new(1, "read the readme");
        first.status = "answered".to_owned();
        first.answer = Some("It is a title.".to_owned());
        first.tools = vec![ToolUse::new("read_file", 2, 1)];
        first.errors = vec!["read_file: no such file: README.txt".to_owned()];
        let second = RequestSummary::new(2, "now fix it");
        let mut third = RequestSummary::new(3, "and test it");
        third.status = "in_progress".to_owned();
        SessionsSummaryAnswer::new("s-1", vec![first, second, third])
    }

    #[test]
    fn the_summary_is_numbered_compact_text() {
        let host = TestHost::new().session_summary(history());
        let out = host.call(&session_summary, json!({})).unwrap();
        assert_eq!(
            out,
            "3 requests in this conversation:\n\
             1. \"read the readme\" -> answered: \"It is a title.\"\n\
             \x20  tools: read_file x2 (1 failed)\n\
             \x20  error: read_file: no such file: README.txt\n\
             2. \"now fix it\" -> no answer (the turn ended early)\n\
             3. \"and test it\" -> in progress (this request)\n"
        );
        assert_eq!(
            host.host_requests(),
            [("sessions.summary".to_owned(), json!({}))]
        );
    }

    #[test]
    fn the_limit_asks_for_the_last_requests_within_1_to_100() {
        let host = TestHost::new().session_summary(history());
        let out = host.call(&session_summary, json!({"last": 1})).unwrap();
        assert!(
            out.starts_with("3 requests in this conversation; the last 1:\n3. "),
            "{out}"
        );
        host.call(&session_summary, json!({"last": 100})).unwrap();
        let (_, params) = host.host_requests().pop().unwrap();
        assert_eq!(params, json!({"last": 100}));
        // Out of range, the schema refuses it (as the host does) and nothing is asked.
        for (given, problem) in [
            (500, "/last: 500 is greater than the maximum of 100"),
            (0, "/last: 0 is less than the minimum of 1"),
        ] {
            let asked = host.host_requests().len();
            assert_eq!(
                host.call(&session_summary, json!({"last": given})),
                Err(ToolError::InvalidArgs(problem.to_owned()))
            );
            assert_eq!(host.host_requests().len(), asked);
        }
        let info = TestHost::new().describe(&session_summary);
        assert_eq!(info.risk, Risk::Read);
        assert_eq!(info.schema["properties"]["last"]["maximum"], json!(100));
    }

    #[test]
    fn an_empty_conversation_says_so() {
        let host = TestHost::new().session_summary(SessionsSummaryAnswer::new("s", Vec::new()));
        assert_eq!(
            host.call(&session_summary, json!({})),
            Ok("No requests yet in this conversation.".to_owned())
        );
    }

    #[test]
    fn an_old_host_or_no_conversation_is_said_clearly() {
        // A host that predates the request answers as hosts do for unknown requests.
        let old = TestHost::new().on_host_request(|method: &str, _: &Value| {
            Err(ServiceError::Unavailable(format!(
                "this host does not know the request '{method}'"
            )))
        });
        let out = old.call(&session_summary, json!({}));
        assert!(
            matches!(&out, Err(ToolError::Failed(m)) if m.starts_with("this host is too old for session summaries")
                && m.contains("'sessions.summary'") && m.contains("Go on without")),
            "{out:?}"
        );
        // No agent's turn (toolhost call, an MCP client).
        let out = call(&session_summary, json!({}));
        assert!(
            matches!(&out, Err(ToolError::Failed(m)) if m.starts_with("there is no conversation to summarise here")),
            "{out:?}"
        );
    }

    fn hit(snippet: &str) -> Value {
        json!({"session": "s-0", "time": "2025-01-02T03:04:05Z", "role": "user", "snippet": snippet})
    }

    /// A host whose session store has two matches for anything.
    fn store() -> TestHost {
        TestHost::new().on_host_request(|method: &str, params: &Value| {
            assert_eq!(method, "sessions.search");
            let query = params["query"].as_str().unwrap();
            Ok(json!({"hits": [hit(&format!("[{query}] first")), hit("second")]}))
        })
    }

    #[test]
    fn describes_a_read_tool_with_a_bounded_limit() {
        let info = TestHost::new().describe(&session_search);
        assert_eq!(info.name, "session_search");
        assert_eq!(info.risk, Risk::Read);
        assert_eq!(info.schema["required"], json!(["query"]));
        let limit = &info.schema["properties"]["limit"];
        assert_eq!(
            (limit["minimum"].as_u64(), limit["maximum"].as_u64()),
            (Some(1), Some(20))
        );
    }

    #[test]
    fn returns_the_stores_matches_for_the_query() {
        let host = store();
        let out = host
            .call(&session_search, json!({"query": "green tea"}))
            .unwrap();
        let out: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            out,
            json!({"matches": [hit("[green tea] first"), hit("second")]})
        );
        assert_eq!(
            host.host_requests(),
            [(
                "sessions.search".to_owned(),
                json!({"query": "green tea", "limit": 5, "exclude_current": true})
            )]
        );
    }

    #[test]
    fn the_limit_is_passed_on_within_1_to_20() {
        let host = store();
        for limit in [1, 3, 20] {
            host.call(&session_search, json!({"query": "tea", "limit": limit}))
                .unwrap();
            let (_, params) = host.host_requests().pop().unwrap();
            assert_eq!(params["limit"], limit, "limit {limit}");
        }
        // Out of range, the schema refuses it (as the host does) and nothing is asked.
        let asked = host.host_requests().len();
        for (given, problem) in [
            (500, "/limit: 500 is greater than the maximum of 20"),
            (0, "/limit: 0 is less than the minimum of 1"),
        ] {
            assert_eq!(
                host.call(&session_search, json!({"query": "tea", "limit": given})),
                Err(ToolError::InvalidArgs(problem.to_owned()))
            );
        }
        assert_eq!(host.host_requests().len(), asked);
    }

    #[test]
    fn an_empty_query_is_refused_without_searching() {
        let host = store();
        for query in ["", "   "] {
            assert_eq!(
                host.call(&session_search, json!({"query": query})),
                Err(ToolError::InvalidArgs(
                    "`query` needs at least one word".to_owned()
                ))
            );
        }
        assert_eq!(
            host.call(&session_search, json!({"limit": 3})),
            Err(ToolError::InvalidArgs(
                r#""query" is a required property"#.to_owned()
            ))
        );
        let out = host.call(&session_search, json!({"query": "tea", "limit": -1}));
        assert!(matches!(out, Err(ToolError::InvalidArgs(_))), "{out:?}");
        assert!(host.host_requests().is_empty());
    }

    #[test]
    fn a_host_without_a_session_store_fails_the_call_saying_why() {
        let out = call(&session_search, json!({"query": "tea"}));
        assert_eq!(
            out,
            Err(ToolError::Failed(
                "'sessions.search' is not available: no answer scripted: use \
                 TestHost::on_host_request"
                    .to_owned()
            ))
        );
    }

    #[test]
    fn a_failing_or_malformed_store_answer_fails_the_call() {
        let host = TestHost::new().on_host_request(|_: &str, _: &Value| {
            Err(ServiceError::Failed("the index is locked".to_owned()))
        });
        assert_eq!(
            host.call(&session_search, json!({"query": "tea"})),
            Err(ToolError::Failed("the index is locked".to_owned()))
        );
        let host = TestHost::new().on_host_request(|_: &str, _: &Value| Ok(json!({"hits": 3})));
        let out = host.call(&session_search, json!({"query": "tea"}));
        assert!(
            matches!(&out, Err(ToolError::Failed(m)) if m.starts_with("the host's answer was malformed")),
            "{out:?}"
        );
    }
}
