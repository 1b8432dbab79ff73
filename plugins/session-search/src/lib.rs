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
