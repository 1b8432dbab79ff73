//! Holding a whole result (its text, structured value and content blocks) to a request's
//! output budget: what does not fit is kept in the profile's store, once, and the result
//! says where with the host's details.

use std::sync::Arc;

use super::budget::{Budget, Rest, cut};
use super::store::{OutputStore, Owner};
use crate::details::{ContentOmitted, HostDetail as _, StructuredOmitted};
use crate::result::{CallErrorKind, ToolResult};

/// What the door holds to budget a request's results: the budget, and where (and for
/// whom) cut outputs are kept.
#[derive(Clone)]
pub struct Budgeting {
    /// The most the result may hold.
    pub budget: Budget,
    /// Where cut outputs are kept (none: the cut text is lost, and the result says so).
    pub store: Option<Arc<OutputStore>>,
    /// Whose outputs they are (read back only by the same profile and caller).
    pub owner: Owner,
}

impl Budgeting {
    /// `result` within the budget: as it is if it fits, else cut, with its full text kept
    /// (off the runtime's threads) and recorded as the [`FullOutput`] detail. The flag
    /// stays what the call was: a cut never makes a success an error, or an error a
    /// success. A structured value or content blocks over the character budget (by their
    /// JSON and their text and data) are kept with the output and left out of the result,
    /// each with a detail saying so, except a structured value its tool declares an output
    /// schema for (`schema`): clients are owed that whole (MCP clients refuse a result of
    /// such a tool without it), so it stays and only the text is cut. (`read_output` pages
    /// its own answers within the same budget, so it never makes a new kept output.)
    ///
    /// [`FullOutput`]: crate::details::FullOutput
    pub async fn apply(&self, mut result: ToolResult, schema: bool) -> ToolResult {
        let max = self.budget.max_chars;
        let over = |n: usize| max != 0 && n > max;
        let structured_chars = result
            .structured
            .as_ref()
            .filter(|_| max != 0 && !schema)
            .map(json_len);
        let structured_over = structured_chars.is_some_and(over);
        let content_chars = (max != 0 && !result.content.is_empty())
            .then(|| result.content.iter().map(content_len).sum::<usize>());
        let content_over = content_chars.is_some_and(over);
        if !structured_over && !content_over && self.budget.fits(&result.output) {
            return result;
        }
        let this = self.clone();
        let call_id = result.call_id.clone();
        let name = result.name.clone();
        let decision = result.decision.clone();
        let done = tokio::task::spawn_blocking(move || {
            let text = std::mem::take(&mut result.output);
            let kept = this.store.as_ref().and_then(|store| {
                // The rest of the result (structured value, content, details) is kept
                // with the text.
                let record = serde_json::to_value(&result).unwrap_or(serde_json::Value::Null);
                match store.keep(&this.owner, &result.name, &text, result.is_error, record) {
                    Ok(full) => Some(full),
                    Err(e) => {
                        tracing::warn!(tool = %result.name, error = %e, "could not keep a cut output; the model gets the cut text only");
                        None
                    }
                }
            });
            let rest = kept.as_ref().map_or(Rest::NotKept, |full| Rest::Kept(&full.id));
            result.output = match cut(&text, this.budget.max_chars, this.budget.max_lines, rest) {
                Some(cut) => cut.text,
                None => text,
            };
            if let Some(chars) = structured_chars.filter(|_| structured_over) {
                result.structured = None;
                StructuredOmitted {
                    chars: chars as u64,
                }
                .insert_into(&mut result.details);
            }
            if let Some(chars) = content_chars.filter(|_| content_over) {
                result.content = Vec::new();
                ContentOmitted {
                    chars: chars as u64,
                }
                .insert_into(&mut result.details);
            }
            if let Some(full) = kept {
                full.insert_into(&mut result.details);
            }
            result
        })
        .await;
        done.unwrap_or_else(|e| {
            let message = format!("the output of tool '{name}' could not be budgeted: {e}");
            ToolResult {
                decision,
                ..ToolResult::refused(call_id, name, message, CallErrorKind::Panicked)
            }
        })
    }
}

/// What a content block weighs against the character budget: its text, or its data.
fn content_len(block: &toolhost_plugin_api::Content) -> usize {
    use toolhost_plugin_api::Content;
    match block {
        Content::Text { text } => text.len(),
        Content::Image { data, .. } | Content::Audio { data, .. } => data.len(),
        Content::Resource { resource } => resource.text.len(),
        Content::ResourceLink {
            uri,
            name,
            description,
            ..
        } => uri.len() + name.len() + description.as_ref().map_or(0, String::len),
    }
}

/// The length of `value`'s JSON text, without writing it out.
fn json_len(value: &serde_json::Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing to a counter cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}
