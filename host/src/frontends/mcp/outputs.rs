//! Results and kept outputs over MCP: a call's result as MCP has it (content, structured
//! content, details, `isError`), the `resource_link` and `_meta["toolhost/output"]` a cut result
//! carries, the `toolhost://output/{id}` resource template, `resources/read` of one (all
//! of it, `?lines=A:B` or `?grep=RE`), owner-checked, and the client's own limit from
//! `_meta["anthropic/maxResultSizeChars"]`.

use std::sync::Arc;

use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolResult, ContentBlock, MetaObject, ReadResourceResult, Resource, ResourceContents,
    ResourceTemplate,
};
use serde_json::json;

use toolhost_calls::details::{FullOutput, HostDetail as _};
use toolhost_calls::outputs::{
    DEFAULT_CONTEXT, OutputError, OutputStore, Owner, RangeError, ReadRange,
};
use toolhost_calls::result::{CallErrorKind, ToolResult};

/// The `_meta` key by which a client (Claude Code) says how many characters of one result
/// it takes.
const MAX_RESULT_CHARS_META: &str = "anthropic/maxResultSizeChars";

/// The URI prefix of kept outputs.
const PREFIX: &str = "toolhost://output/";

/// The characters a tools/call asks for, from its params' `_meta` or the request's.
pub(super) fn max_result_chars(params: Option<&MetaObject>, request: &MetaObject) -> Option<usize> {
    params
        .and_then(|m| m.get(MAX_RESULT_CHARS_META))
        .or_else(|| request.get(MAX_RESULT_CHARS_META))
        .and_then(serde_json::Value::as_u64)
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
}

/// The kept output of `result`, if its text was cut.
pub(super) fn link(result: &ToolResult) -> Option<FullOutput> {
    FullOutput::read(&result.details)
}

/// `result` with a `resource_link` to the kept output and `_meta["toolhost/output"]`.
pub(super) fn with_link(mut result: CallToolResult, link: Option<FullOutput>) -> CallToolResult {
    let Some(link) = link else {
        return result;
    };
    let uri = format!("{PREFIX}{}", link.id);
    result.content.push(ContentBlock::resource_link(
        Resource::new(uri.clone(), format!("output {}", link.id))
            .with_description(
                "The full text of this result, which was cut to the output budget \
                 (append ?lines=A:B or ?grep=REGEX to read a part)",
            )
            .with_mime_type("text/plain")
            .with_size(link.bytes),
    ));
    let meta = result.meta.get_or_insert_with(MetaObject::new);
    meta.insert(
        "toolhost/output".to_owned(),
        json!({"id": link.id, "chars": link.chars, "lines": link.lines, "uri": uri}),
    );
    result
}

/// The template every kept output's URI fits.
pub(super) fn resource_template() -> ResourceTemplate {
    ResourceTemplate::new(format!("{PREFIX}{{id}}"), "kept output")
        .with_description(
            "The full text of a tool result that was cut to the output budget; its id is in \
             the result's marker line and resource_link. ?lines=A:B reads lines A to B, \
             ?grep=REGEX the matching lines.",
        )
        .with_mime_type("text/plain")
}

/// `resources/read` of `uri` for `owner`: the same "not found" for an unknown id, a
/// pruned one and another owner's.
pub(super) async fn read(
    store: Option<Arc<OutputStore>>,
    owner: Owner,
    uri: String,
) -> Result<ReadResourceResult, McpError> {
    // SEP-2164: invalid params naming the URI in `data` (the same answer for another
    // client's output as for none, so it tells nothing of what others keep).
    let not_found = |uri: &str| {
        McpError::invalid_params(
            format!(
                "no resource '{uri}' for this client (kept outputs are readable only by the \
                 profile and token that made them, and are removed after a while)"
            ),
            Some(serde_json::json!({ "uri": uri })),
        )
    };
    let Some(rest) = uri.strip_prefix(PREFIX) else {
        return Err(not_found(&uri));
    };
    let (id, query) = rest.split_once('?').unwrap_or((rest, ""));
    let range = range(query).map_err(|e| McpError::invalid_params(e.to_string(), None))?;
    let Some(store) = store else {
        return Err(not_found(&uri));
    };
    let id = id.to_owned();
    let read = tokio::task::spawn_blocking(move || store.read(&owner, &id, &range))
        .await
        .map_err(|e| McpError::internal_error(format!("reading the output failed: {e}"), None))?;
    match read {
        Ok(excerpt) => Ok(ReadResourceResult::new(vec![ResourceContents::text(
            excerpt.text,
            uri,
        )])),
        Err(OutputError::NotFound { .. }) => Err(not_found(&uri)),
        Err(OutputError::BadRange(e)) => Err(McpError::invalid_params(e.to_string(), None)),
        Err(e) => Err(McpError::internal_error(e.to_string(), None)),
    }
}

/// What is wrong with an output resource's query: the message names the key and what
/// it takes.
#[derive(Debug, thiserror::Error)]
pub(crate) enum QueryError {
    /// A value whose `%XX` escapes are not UTF-8.
    #[error("`{key}` is not valid UTF-8")]
    NotUtf8 {
        /// The key.
        key: String,
    },
    /// `context=` that is no number.
    #[error("`context={value}` is not a number of lines")]
    Context {
        /// The value.
        value: String,
    },
    /// A key other than `lines`, `grep` and `context`.
    #[error("unknown query `{key}`: use ?lines=A:B, ?lines=A: or ?grep=REGEX")]
    Unknown {
        /// The key.
        key: String,
    },
    /// A `grep=` the range refuses.
    #[error("`grep`: {0}")]
    Grep(RangeError),
    /// A `lines=` the range refuses.
    #[error("`lines`: {0}")]
    Lines(RangeError),
}

/// The range a query asks for: none (all), `lines=A:B` / `lines=A:`, or `grep=RE` (with
/// `context=N`, default 2).
pub(crate) fn range(query: &str) -> Result<ReadRange, QueryError> {
    let mut lines = None;
    let mut grep = None;
    let mut context = DEFAULT_CONTEXT;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_decode(value).ok_or_else(|| QueryError::NotUtf8 {
            key: key.to_owned(),
        })?;
        match key {
            "lines" => lines = Some(value),
            "grep" => grep = Some(value),
            "context" => {
                context = value.parse().map_err(|_| QueryError::Context {
                    value: value.clone(),
                })?;
            }
            other => {
                return Err(QueryError::Unknown {
                    key: other.to_owned(),
                });
            }
        }
    }
    if let Some(pattern) = grep {
        return ReadRange::grep(&pattern, context).map_err(QueryError::Grep);
    }
    match lines {
        Some(lines) => ReadRange::lines(&lines).map_err(QueryError::Lines),
        None => Ok(ReadRange::All),
    }
}

/// `%XX` escapes (and `+` as a space) decoded.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The result of a call whose task ended without one (it panicked or was aborted).
pub(super) fn lost(tool: &str, e: &tokio::task::JoinError) -> ToolResult {
    ToolResult::refused(
        String::new(),
        tool.to_owned(),
        format!("the call's task ended without a result ({e}); see the host's log"),
        CallErrorKind::Panicked,
    )
}

/// A finished call's result with the link to its kept output, if it was cut.
pub(crate) fn complete(result: ToolResult, tool: &str) -> CallToolResult {
    let link = link(&result);
    let result = call_result(result, tool);
    with_link(result, link)
}

/// A call's result as MCP has it, each fact once: the model's text (or the tool's own
/// content blocks) as `content`, a structured value as `structuredContent` (its JSON is a
/// text block only when the tool has no text of its own, as the spec asks for clients
/// that predate structured results), the details under `_meta["toolhost/details"]`, and
/// `isError` exactly when the call did not do what was asked (a cut to the output budget
/// is not a failure). A result with an error keeps its structured value too.
fn call_result(result: ToolResult, tool: &str) -> CallToolResult {
    let meta = (!result.details.is_empty()).then(|| {
        let mut meta = MetaObject::new();
        meta.insert(
            "toolhost/details".to_owned(),
            toolhost_calls::details::to_object(result.details),
        );
        meta
    });
    let mut content: Vec<ContentBlock> = if !result.content.is_empty() {
        result.content.iter().map(content_block).collect()
    } else if !result.output.is_empty() {
        let mut message = result.output;
        // Only where the schema refused them: a tool's own "no such time zone" is not
        // fixed by rereading the schema, and saying so misleads the model.
        if result.error == Some(CallErrorKind::SchemaViolation) {
            message =
                format!("{message} (check the arguments against the inputSchema of '{tool}')");
        }
        vec![ContentBlock::text(message)]
    } else {
        Vec::new()
    };
    if content.is_empty()
        && let Some(value) = &result.structured
    {
        content.push(ContentBlock::text(value.to_string()));
    }
    let mut out = if result.is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    out.structured_content = result.structured;
    out.meta = meta;
    out
}

/// One of the tool's content blocks as MCP's.
fn content_block(block: &toolhost_plugin_api::Content) -> ContentBlock {
    serde_json::to_value(block)
        .and_then(serde_json::from_value::<ContentBlock>)
        .unwrap_or_else(|e| ContentBlock::text(format!("(content block not representable: {e})")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_become_ranges() {
        assert!(matches!(range(""), Ok(ReadRange::All)));
        assert!(matches!(
            range("lines=3:5"),
            Ok(ReadRange::Lines {
                offset: 3,
                limit: Some(3)
            })
        ));
        assert!(matches!(
            range("lines=3:"),
            Ok(ReadRange::Lines {
                offset: 3,
                limit: None
            })
        ));
        match range("grep=line%20(7%7C9)%24&context=0") {
            Ok(ReadRange::Grep { pattern, context }) => {
                assert_eq!(pattern.as_str(), "line (7|9)$");
                assert_eq!(context, 0);
            }
            other => panic!("{other:?}"),
        }
        assert!(range("lines=5:3").is_err());
        assert!(range("lines=0:").is_err());
        assert!(range("path=/etc/passwd").is_err());
    }
}
