//! `text_stats`: counts lines, words, characters and bytes of a text.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolhost_plugin_api::{Risk, ToolContext, ToolError, TypedTool};

/// Arguments of `text_stats`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TextStatsArgs {
    /// The text to measure.
    text: String,
}

pub(crate) struct TextStats;

impl TypedTool for TextStats {
    type Args = TextStatsArgs;

    fn name(&self) -> &str {
        "text_stats"
    }

    fn description(&self) -> &str {
        "Counts the lines, words (whitespace-separated), Unicode characters and UTF-8 bytes \
         of a text, and the length of its longest line in characters. Use it instead of \
         counting yourself when a length limit matters."
    }

    fn risk(&self) -> Risk {
        Risk::Read
    }

    async fn run(&self, _ctx: &ToolContext<'_>, args: TextStatsArgs) -> Result<String, ToolError> {
        let t = &args.text;
        Ok(json!({
            "lines": t.lines().count(),
            "words": t.split_whitespace().count(),
            "characters": t.chars().count(),
            "bytes": t.len(),
            "longest_line": t.lines().map(|l| l.chars().count()).max().unwrap_or(0),
        })
        .to_string())
    }
}
