//! The `session_search` tool: full-text search over the profile's past conversations
//! (the host's session store), returning matching snippets with their session and time.

use serde::Deserialize;
use serde_json::json;
use toolhost_plugin_api::{Risk, SessionQuery, ToolContext, ToolError, TypedTool, export_plugin};

/// Arguments of `session_search`.
#[derive(Deserialize, schemars::JsonSchema)]
struct SearchArgs {
    /// Words to look for; every one must appear in a message for it to match.
    query: String,
    /// The most matches to return (1 to 20, default 5).
    #[serde(default)]
    #[schemars(range(min = 1, max = 20))]
    limit: Option<u32>,
}

struct SessionSearch;

impl TypedTool for SessionSearch {
    type Args = SearchArgs;

    fn name(&self) -> &str {
        "session_search"
    }

    fn description(&self) -> &str {
        "Searches your past conversations with this person (not the current one) for \
         messages containing every word of `query`, and returns the matching snippets \
         (matches marked [like this]) with the session they are from and when. Use it when \
         the person refers to something discussed before."
    }

    fn risk(&self) -> Risk {
        Risk::Read
    }

    async fn run(&self, ctx: &ToolContext<'_>, args: SearchArgs) -> Result<String, ToolError> {
        if args.query.trim().is_empty() {
            return Err(ToolError::invalid_args("`query` needs at least one word"));
        }
        let hits = ctx
            .search_sessions(&SessionQuery {
                query: args.query,
                limit: args.limit.unwrap_or(5).clamp(1, 20),
                exclude_current: true,
            })
            .await?;
        Ok(json!({"matches": hits}).to_string())
    }
}

export_plugin! {
    name: "session_search",
    version: env!("CARGO_PKG_VERSION"),
    tools: [SessionSearch],
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use serde_json::{Value, json};
    use toolhost_plugin_api::testing::{TestHost, call};
    use toolhost_plugin_api::{Risk, ServiceError, ToolError};

    use super::SessionSearch;

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
        let info = TestHost::new().describe(&SessionSearch);
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
            .call(&SessionSearch, json!({"query": "green tea"}))
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
        for (given, sent) in [
            (json!(3), 3),
            (json!(20), 20),
            (json!(500), 20),
            (json!(0), 1),
        ] {
            host.call(&SessionSearch, json!({"query": "tea", "limit": given}))
                .unwrap();
            let (_, params) = host.host_requests().pop().unwrap();
            assert_eq!(params["limit"], sent, "limit {given}");
        }
    }

    #[test]
    fn an_empty_query_is_refused_without_searching() {
        let host = store();
        for query in ["", "   "] {
            assert_eq!(
                host.call(&SessionSearch, json!({"query": query})),
                Err(ToolError::InvalidArgs(
                    "`query` needs at least one word".to_owned()
                ))
            );
        }
        let out = host.call(&SessionSearch, json!({"limit": 3}));
        assert!(matches!(out, Err(ToolError::InvalidArgs(m)) if m.contains("`query`")));
        let out = host.call(&SessionSearch, json!({"query": "tea", "limit": -1}));
        assert!(matches!(out, Err(ToolError::InvalidArgs(_))), "{out:?}");
        assert!(host.host_requests().is_empty());
    }

    #[test]
    fn a_host_without_a_session_store_fails_the_call_saying_why() {
        let out = call(&SessionSearch, json!({"query": "tea"}));
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
            host.call(&SessionSearch, json!({"query": "tea"})),
            Err(ToolError::Failed("the index is locked".to_owned()))
        );
        let host = TestHost::new().on_host_request(|_: &str, _: &Value| Ok(json!({"hits": 3})));
        let out = host.call(&SessionSearch, json!({"query": "tea"}));
        assert!(
            matches!(&out, Err(ToolError::Failed(m)) if m.starts_with("the host's answer was malformed")),
            "{out:?}"
        );
    }
}
