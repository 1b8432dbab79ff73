//! `read_output`: the native tool that reads a kept output back (a line range, or the
//! lines matching a regex with context), for the profile and token that made it. Its own
//! result is a page of whole lines within the call's budget that says where to read on;
//! it never makes a new kept output.

use std::fmt::Write as _;
use std::sync::{Arc, LazyLock};

use async_trait::async_trait;
use serde::Deserialize;

use crate::context::CallContext;
use crate::outputs::{
    Budget, DEFAULT_CONTEXT, DEFAULT_READ_LINES, Excerpt, OutputError, Owner, READ_OUTPUT_TOOL,
    ReadRange,
};
use crate::registry::ToolRegistry;
use crate::tool::{
    Arguments, DynTool, Requirements, Risk, ToolError, ToolOrigin, ToolOutput, ToolSpec,
};

/// The `read_output` tool.
pub struct ReadOutput;

static SPEC: LazyLock<ToolSpec> = LazyLock::new(|| ToolSpec {
    name: READ_OUTPUT_TOOL.to_owned(),
    description: format!(
        "Reads the full text of a tool output that was cut (its marker line names the id). \
         Give `offset` (first line, 1-based) and `limit` (lines, default {DEFAULT_READ_LINES}) \
         for a range, or `grep` (a regular expression) for the matching lines with `context` \
         lines around each (default {DEFAULT_CONTEXT}), each group under a `[lines A-B]` \
         header. Lines are shown as they were output; an answer holds what fits in the \
         output budget and says the offset to read on from."
    ),
    schema: serde_json::json!({
        "type": "object",
        "properties": {
            "id": {"type": "string", "description": "The output's id, from the marker line."},
            "offset": {"type": "integer", "minimum": 1, "description": "The first line to read (1-based)."},
            "limit": {"type": "integer", "minimum": 1, "description": "How many lines to read."},
            "grep": {"type": "string", "description": "A regular expression; returns the matching lines instead of a range."},
            "context": {"type": "integer", "minimum": 0, "description": "Lines shown before and after each match."}
        },
        "required": ["id"],
        "additionalProperties": false
    }),
    risk: Risk::Read,
    interactive: false,
    requirements: Requirements::default(),
    output_schema: None,
});

#[derive(Deserialize)]
struct Args {
    id: String,
    offset: Option<usize>,
    limit: Option<usize>,
    grep: Option<String>,
    context: Option<usize>,
}

#[async_trait]
impl DynTool for ReadOutput {
    fn spec(&self) -> &ToolSpec {
        &SPEC
    }

    fn origin(&self) -> &ToolOrigin {
        &ToolOrigin::Native
    }

    async fn call(&self, ctx: &CallContext, args: Arguments) -> Result<ToolOutput, ToolError> {
        let args: Args = serde_json::from_value(args.into_value())
            .map_err(|e| ToolError::InvalidArgs(e.to_string()))?;
        let Some(store) = ctx.services.outputs.clone() else {
            return Err(ToolError::Failed(
                "this call's profile keeps no outputs (it has no state folder), so there is \
                 nothing to read"
                    .to_owned(),
            ));
        };
        let range = match &args.grep {
            Some(pattern) => ReadRange::grep(pattern, args.context.unwrap_or(DEFAULT_CONTEXT))
                .map_err(|e| ToolError::InvalidArgs(format!("`grep`: {e}")))?,
            None => ReadRange::Lines {
                offset: args.offset.unwrap_or(1),
                limit: Some(args.limit.unwrap_or(DEFAULT_READ_LINES)),
            },
        };
        let owner = Owner {
            profile: ctx.turn.profile_id.clone(),
            token: ctx.caller.token.clone(),
        };
        let id = args.id.clone();
        let mut excerpt = tokio::task::spawn_blocking(move || store.read(&owner, &id, &range))
            .await
            .map_err(|e| ToolError::Failed(format!("reading the output failed: {e}")))?
            .map_err(|e| match e {
                OutputError::BadRange(e) => ToolError::InvalidArgs(e.to_string()),
                other => ToolError::Failed(other.to_string()),
            })?;
        let mut text = std::mem::take(&mut excerpt.text);
        if text.is_empty() {
            text = match excerpt.matches {
                Some(_) => "(no line matches)".to_owned(),
                None => format!(
                    "(no lines there: the output has {} lines)",
                    excerpt.size.lines
                ),
            };
        }
        // A range the caller chose comes back exactly, unless the budget stops it early.
        let chosen = args.limit.is_some();
        Ok(page(&text, &excerpt, ctx.services.budget, chosen).into())
    }
}

/// An excerpt as `read_output` answers: whole lines within the budget, and, where lines
/// are left (past the budget, or past a default range), where to read on. A range whose
/// `limit` the caller `chose` and that fits comes back exactly. A page is never cut in
/// the middle.
fn page(text: &str, excerpt: &Excerpt, budget: Budget, chosen: bool) -> String {
    let budget = toolhost_plugin_api::OutputBudget {
        max_chars: budget.max_chars as u64,
        max_lines: budget.max_lines as u64,
    };
    let mut page = budget.page(300, 2);
    let mut shown = 0usize;
    for line in text.lines() {
        if !page.push_line(line) {
            break;
        }
        shown += 1;
    }
    if page.is_empty() && !text.is_empty() {
        // A first line longer than the whole budget: shown cut, and said so.
        let room = page.room_chars().unwrap_or(0) as usize;
        let line = text.lines().next().unwrap_or("");
        let head: String = line.chars().take(room.saturating_sub(80)).collect();
        let rest = line.chars().count() - head.chars().count();
        return format!(
            "{head}… [+{rest} characters of this line not shown: it is longer than the output \
             budget; `toolhost output` prints it whole]\n"
        );
    }
    let mut out = page.into_text();
    let total_here = text.lines().count();
    match excerpt.matches {
        Some(_) if shown < total_here => {
            let _ = writeln!(
                out,
                "({} more lines of matches not shown: this is what fits in the output budget; \
                 use a narrower pattern, or read by offset from the line numbers above)",
                total_here - shown
            );
        }
        Some(_) => {}
        None => {
            let last = excerpt.first_line + shown.saturating_sub(1);
            let stopped = shown < total_here;
            if last < excerpt.size.lines && (stopped || !chosen) {
                let _ = writeln!(
                    out,
                    "(lines {}-{last} of {} shown; read on with offset {})",
                    excerpt.first_line,
                    excerpt.size.lines,
                    last + 1
                );
            }
        }
    }
    out
}

/// `tools` with `read_output` first: a plugin tool of that name is left out (with a
/// warning), as the second of two tools with one name always is.
pub fn with_read_output(tools: &ToolRegistry) -> ToolRegistry {
    let mut out = ToolRegistry::new();
    if let Err(e) = out.register(Arc::new(ReadOutput)) {
        tracing::warn!(error = %e, "read_output could not be registered");
        return tools.clone();
    }
    let (refused, superseded) = out.add_all(tools);
    for refused in refused {
        tracing::warn!("{refused}");
    }
    for left_out in superseded {
        tracing::info!("{left_out}");
    }
    out
}
