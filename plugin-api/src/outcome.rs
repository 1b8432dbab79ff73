//! What a tool returns besides its text: a structured value, details for the host and its
//! clients (never the model), and content blocks. [`ToolOutput`] is the whole outcome of
//! one call; a tool that returns only text returns a `String`, which converts into one.
//!
//! Since plugin-api 0.1.4 (ABI 0.1.4) the outcome crosses the boundary as it is. A host
//! that predates it calls the tool table's older entry point and gets the [degraded
//! text](ToolOutput::degraded_text) instead: the content blocks' envelope (when there are
//! media blocks, or blocks and no text), or the text, or the structured value's JSON.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::content::{Content, content_output};

/// Structured data about a call for the host's session store, its status and its clients,
/// never for the model's text. Keyed by kind (the set is open): [`DIAGNOSTICS`] is one,
/// keys starting with `toolhost/` are the host's own (say, [`FULL_OUTPUT`]).
///
/// ```
/// use toolhost_plugin_api::Details;
///
/// let mut details = Details::new();
/// details.insert("timings".to_owned(), serde_json::json!({"fetch_ms": 12}));
/// assert_eq!(details["timings"]["fetch_ms"], 12);
/// ```
pub type Details = BTreeMap<String, Value>;

/// The detail kind of compiler or linter diagnostics: its value is a JSON list of
/// [`Diagnostic`]s (what [`ToolOutput::with_diagnostics`] writes).
///
/// ```
/// assert_eq!(toolhost_plugin_api::DIAGNOSTICS, "diagnostics");
/// ```
pub const DIAGNOSTICS: &str = "diagnostics";

/// The detail kind the host adds when the text the model got was cut to the output
/// budget: where the full output is kept (`{"id", "chars", "lines", "bytes"}`). Tools do
/// not set it.
///
/// ```
/// assert!(toolhost_plugin_api::FULL_OUTPUT.starts_with("toolhost/"));
/// ```
pub const FULL_OUTPUT: &str = "toolhost/full_output";

/// One diagnostic of a compiler, linter or checker, as a tool reports it in its details
/// (see [`ToolOutput::with_diagnostics`]).
///
/// ```
/// use toolhost_plugin_api::Diagnostic;
///
/// let d = Diagnostic::new("error", "mismatched types").at("src/main.rs", 3, 9).code("E0308");
/// assert_eq!(d.line, Some(3));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    /// `error`, `warning`, `note`, `help`, ... as the tool that made it says.
    pub level: String,
    /// The message.
    pub message: String,
    /// The code (`E0308`, `clippy::needless_return`), if there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The file it is about, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Its line (1-based).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    /// Its column (1-based).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<u64>,
    /// Anything more (spans, children, suggested replacements), as the tool has it.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub extra: Value,
}

impl Diagnostic {
    /// A diagnostic with a level and a message.
    ///
    /// ```
    /// let d = toolhost_plugin_api::Diagnostic::new("warning", "unused variable `x`");
    /// assert_eq!(d.level, "warning");
    /// ```
    pub fn new(level: impl Into<String>, message: impl Into<String>) -> Self {
        Diagnostic {
            level: level.into(),
            message: message.into(),
            code: None,
            file: None,
            line: None,
            column: None,
            extra: Value::Null,
        }
    }

    /// Where it is.
    ///
    /// ```
    /// let d = toolhost_plugin_api::Diagnostic::new("error", "oops").at("a.rs", 1, 2);
    /// assert_eq!((d.file.as_deref(), d.column), (Some("a.rs"), Some(2)));
    /// ```
    pub fn at(mut self, file: impl Into<String>, line: u64, column: u64) -> Self {
        self.file = Some(file.into());
        self.line = Some(line);
        self.column = Some(column);
        self
    }

    /// Where it is, by line only (a file-level or line-level finding, with no column).
    ///
    /// ```
    /// let d = toolhost_plugin_api::Diagnostic::new("warning", "line too long").line("guide.md", 12);
    /// assert_eq!((d.file.as_deref(), d.line, d.column), (Some("guide.md"), Some(12), None));
    /// ```
    pub fn line(mut self, file: impl Into<String>, line: u64) -> Self {
        self.file = Some(file.into());
        self.line = Some(line);
        self.column = None;
        self
    }

    /// Its code.
    ///
    /// ```
    /// let d = toolhost_plugin_api::Diagnostic::new("error", "oops").code("E0001");
    /// assert_eq!(d.code.as_deref(), Some("E0001"));
    /// ```
    pub fn code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }
}

/// The whole outcome of one call that ran: what it gave, and whether it did what was
/// asked.
///
/// - `text` is what the model reads (and what hosts that predate 0.1.4 get, see
///   [`degraded_text`](Self::degraded_text)).
/// - `structured` is a JSON value for models and clients that read structured results
///   (MCP's `structuredContent`). When the tool declares an output schema
///   ([`crate::Tool::output_schema`]), the host checks the value against it: a value that
///   does not match becomes an error result naming the mismatch.
/// - `details` go to the session store, status and clients (MCP `_meta`), never to the
///   model's text.
/// - `content` are blocks (text, image, audio, resource) for clients that show them; the
///   model reads `text`.
/// - `is_error` says the call did not do what was asked although the tool ran to the end
///   and has a whole outcome to show: a command that exited non-zero, a check that found
///   errors, tests that failed. The result is an error on every path (MCP `isError`, the
///   agent's tool result, `toolhost call`'s exit status) and keeps all of the above.
///
/// # When to return an error
///
/// The flag means one thing everywhere: *the call did not do what was asked*. Return
/// `Err(ToolError)` when there is nothing to show but why (bad arguments, a file that is
/// not there); return an outcome with [`ToolOutput::failed`] when the call ran and its
/// output is how the model finds out what went wrong (a compiler's errors, a failing
/// test's panic, a command's stderr). A result the host cut to the output budget is still
/// a success if the call was one. Plugins built before 0.1.4 never set the flag: their
/// outcomes stay successes, their `Err`s errors.
///
/// ```
/// use toolhost_plugin_api::{Content, Diagnostic, ToolOutput};
///
/// let out = ToolOutput::text("1 error")
///     .with_diagnostics(vec![Diagnostic::new("error", "mismatched types").at("src/lib.rs", 3, 9)])
///     .with_structured(serde_json::json!({"errors": 1}));
/// assert_eq!(out.text, "1 error");
/// assert_eq!(out.details["diagnostics"][0]["line"], 3);
///
/// let picture = ToolOutput::from(vec![Content::text("a chart"), Content::Image {
///     data: "iVBORw0KGgo=".into(),
///     mime_type: "image/png".into(),
/// }]);
/// assert_eq!(picture.text, "a chart");
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolOutput {
    /// What the model reads.
    pub text: String,
    /// A JSON value for readers of structured results.
    pub structured: Option<Value>,
    /// Structured data that never reaches the model's text, by kind.
    pub details: Details,
    /// Content blocks for clients that show them.
    pub content: Vec<Content>,
    /// The call did not do what was asked (see [When to return an
    /// error](ToolOutput#when-to-return-an-error)).
    pub is_error: bool,
}

impl ToolOutput {
    /// An outcome that is only text.
    ///
    /// ```
    /// assert_eq!(toolhost_plugin_api::ToolOutput::text("ok").text, "ok");
    /// ```
    pub fn text(text: impl Into<String>) -> Self {
        ToolOutput {
            text: text.into(),
            ..ToolOutput::default()
        }
    }

    /// A structured value, with its JSON as the text (what MCP asks a tool to send for
    /// clients that predate structured results).
    ///
    /// ```
    /// let out = toolhost_plugin_api::ToolOutput::structured(serde_json::json!({"c": 21}));
    /// assert_eq!(out.text, r#"{"c":21}"#);
    /// ```
    pub fn structured(value: Value) -> Self {
        ToolOutput {
            text: value.to_string(),
            structured: Some(value),
            ..ToolOutput::default()
        }
    }

    /// The same outcome marked as a failed call: it ran, and did not do what was asked
    /// (see [When to return an error](ToolOutput#when-to-return-an-error)).
    ///
    /// ```
    /// use toolhost_plugin_api::ToolOutput;
    ///
    /// let out = ToolOutput::text("exit code 1\nerror: no such file").failed();
    /// assert!(out.is_error);
    /// ```
    #[must_use]
    pub fn failed(mut self) -> Self {
        self.is_error = true;
        self
    }

    /// The same outcome with a structured value (the text stays).
    ///
    /// ```
    /// let out = toolhost_plugin_api::ToolOutput::text("21 °C")
    ///     .with_structured(serde_json::json!({"celsius": 21}));
    /// assert_eq!(out.structured.unwrap()["celsius"], 21);
    /// ```
    pub fn with_structured(mut self, value: Value) -> Self {
        self.structured = Some(value);
        self
    }

    /// The same outcome with one more detail of kind `kind` (replacing one of that kind).
    ///
    /// ```
    /// let out = toolhost_plugin_api::ToolOutput::text("done")
    ///     .with_detail("timings", serde_json::json!({"ms": 3}));
    /// assert_eq!(out.details["timings"]["ms"], 3);
    /// ```
    pub fn with_detail(mut self, kind: impl Into<String>, value: Value) -> Self {
        self.details.insert(kind.into(), value);
        self
    }

    /// The same outcome with [`Diagnostic`]s as its [`DIAGNOSTICS`] detail.
    ///
    /// ```
    /// use toolhost_plugin_api::{Diagnostic, ToolOutput};
    /// let out = ToolOutput::text("").with_diagnostics(vec![Diagnostic::new("warning", "w")]);
    /// assert_eq!(out.details["diagnostics"][0]["level"], "warning");
    /// ```
    pub fn with_diagnostics(self, diagnostics: Vec<Diagnostic>) -> Self {
        let value = serde_json::to_value(diagnostics).unwrap_or(Value::Null);
        self.with_detail(DIAGNOSTICS, value)
    }

    /// An outcome that is a list of findings: the model reads one line per diagnostic, as
    /// compilers print them (`file:line:column: level[code]: message`, the parts it has),
    /// or `no findings`; the diagnostics themselves go in the [`DIAGNOSTICS`] detail. What
    /// a `#[tool]` function returning `Vec<Diagnostic>` answers.
    ///
    /// ```
    /// use toolhost_plugin_api::{Diagnostic, ToolOutput};
    /// let out = ToolOutput::from_diagnostics(vec![
    ///     Diagnostic::new("warning", "line too long").line("guide.md", 12).code("MD013"),
    ///     Diagnostic::new("error", "no title"),
    /// ]);
    /// assert_eq!(out.text, "guide.md:12: warning[MD013]: line too long\nerror: no title");
    /// assert_eq!(out.details["diagnostics"][1]["level"], "error");
    /// assert_eq!(ToolOutput::from_diagnostics(vec![]).text, "no findings");
    /// ```
    pub fn from_diagnostics(diagnostics: Vec<Diagnostic>) -> Self {
        let lines: Vec<String> = diagnostics
            .iter()
            .map(|d| {
                let mut line = String::new();
                if let Some(file) = &d.file {
                    line.push_str(file);
                    for n in [d.line, d.column].into_iter().flatten() {
                        line.push_str(&format!(":{n}"));
                    }
                    line.push_str(": ");
                }
                line.push_str(&d.level);
                if let Some(code) = &d.code {
                    line.push_str(&format!("[{code}]"));
                }
                line.push_str(": ");
                line.push_str(&d.message);
                line
            })
            .collect();
        let text = if lines.is_empty() {
            "no findings".to_owned()
        } else {
            lines.join("\n")
        };
        ToolOutput::text(text).with_diagnostics(diagnostics)
    }

    /// The same outcome with content blocks (the text stays what the model reads).
    ///
    /// ```
    /// use toolhost_plugin_api::{Content, ToolOutput};
    /// let out = ToolOutput::text("see the image").with_content(vec![Content::text("x")]);
    /// assert_eq!(out.content.len(), 1);
    /// ```
    pub fn with_content(mut self, content: Vec<Content>) -> Self {
        self.content = content;
        self
    }

    /// What a host that predates 0.1.4 gets from this outcome through the tool table's
    /// older entry point: the content blocks' envelope when there are blocks other than
    /// text (hosts since 0.1.2 show it as blocks, so an image survives), or blocks and no
    /// text; otherwise the text if there is one; otherwise the structured value's JSON.
    /// Details are dropped.
    ///
    /// ```
    /// use toolhost_plugin_api::ToolOutput;
    /// let mut out = ToolOutput::default().with_structured(serde_json::json!([1, 2]));
    /// assert_eq!(out.degraded_text(), "[1,2]");
    /// out.text = "two numbers".into();
    /// assert_eq!(out.degraded_text(), "two numbers");
    /// ```
    pub fn degraded_text(&self) -> String {
        if self.has_media() || (self.text.is_empty() && !self.content.is_empty()) {
            content_output(&self.content)
        } else if !self.text.is_empty() {
            self.text.clone()
        } else if let Some(value) = &self.structured {
            value.to_string()
        } else {
            String::new()
        }
    }

    /// Whether a content block is something other than text.
    fn has_media(&self) -> bool {
        self.content
            .iter()
            .any(|c| !matches!(c, Content::Text { .. }))
    }

    /// Whether there is anything besides the text.
    ///
    /// ```
    /// assert!(toolhost_plugin_api::ToolOutput::text("x").is_text_only());
    /// ```
    pub fn is_text_only(&self) -> bool {
        self.structured.is_none()
            && self.details.is_empty()
            && self.content.is_empty()
            && !self.is_error
    }
}

impl From<String> for ToolOutput {
    fn from(text: String) -> Self {
        ToolOutput::text(text)
    }
}

impl From<&str> for ToolOutput {
    fn from(text: &str) -> Self {
        ToolOutput::text(text)
    }
}

/// Blocks as an outcome: the text the model reads is their text blocks joined by
/// newlines (the blocks themselves go to clients that show them).
impl From<Vec<Content>> for ToolOutput {
    fn from(content: Vec<Content>) -> Self {
        let text = content
            .iter()
            .filter_map(|c| match c {
                Content::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
        ToolOutput {
            text,
            content,
            ..ToolOutput::default()
        }
    }
}

/// What crosses the boundary besides the text, as one JSON object (so later additions are
/// new keys, not a new layout). Hosts ignore keys they do not know.
#[derive(Serialize, Deserialize, Default)]
struct Extra {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    structured: Option<Value>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    details: Details,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    content: Vec<Content>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    is_error: bool,
}

/// Splits an outcome into the text and the `extra` JSON text that cross (`""` when there
/// is nothing besides the text).
#[doc(hidden)]
pub fn outcome_to_ffi(out: ToolOutput) -> (String, String) {
    if out.is_text_only() {
        return (out.text, String::new());
    }
    let extra = Extra {
        structured: out.structured,
        details: out.details,
        content: out.content,
        is_error: out.is_error,
    };
    let extra = serde_json::to_string(&extra).unwrap_or_else(|e| {
        // Only a map with non-string keys fails, which `Details` cannot hold.
        serde_json::json!({"details": {"toolhost/encoding_error": e.to_string()}}).to_string()
    });
    (out.text, extra)
}

/// Joins what crossed back into an outcome; `Err` says what was wrong with `extra`. A
/// text-only outcome whose text is a content envelope ([`content_output`], the 0.1.2
/// convention, which older plugins use) gets its blocks as `content`; the text stays.
#[doc(hidden)]
pub fn outcome_from_ffi(text: String, extra: &str) -> Result<ToolOutput, String> {
    if extra.trim().is_empty() {
        let content = crate::content::parse_content_output(&text).unwrap_or_default();
        return Ok(ToolOutput {
            text,
            content,
            ..ToolOutput::default()
        });
    }
    let extra: Extra = serde_json::from_str(extra)
        .map_err(|e| format!("the tool's structured outcome is not valid JSON: {e}"))?;
    Ok(ToolOutput {
        text,
        structured: extra.structured,
        details: extra.details,
        content: extra.content,
        is_error: extra.is_error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn degraded_text_prefers_media_blocks_then_text_then_blocks_then_structured() {
        let blocks = vec![Content::Image {
            data: "AA==".into(),
            mime_type: "image/png".into(),
        }];
        let out = ToolOutput::default()
            .with_structured(json!({"a": 1}))
            .with_content(blocks.clone());
        assert_eq!(out.degraded_text(), content_output(&blocks));
        assert_eq!(
            ToolOutput::default()
                .with_structured(json!({"a": 1}))
                .degraded_text(),
            r#"{"a":1}"#
        );
        assert_eq!(
            ToolOutput::text("t")
                .with_structured(json!(1))
                .degraded_text(),
            "t"
        );
        assert_eq!(ToolOutput::default().degraded_text(), "");
    }

    #[test]
    fn outcomes_round_trip_and_unknown_keys_are_ignored() {
        let out = ToolOutput::text("hi")
            .with_structured(json!({"x": [1, 2]}))
            .with_detail("k", json!("v"))
            .with_content(vec![Content::text("hi")]);
        let (text, extra) = outcome_to_ffi(out.clone());
        assert_eq!(outcome_from_ffi(text, &extra), Ok(out));
        let (text, extra) = outcome_to_ffi(ToolOutput::text("plain"));
        assert_eq!(extra, "");
        assert_eq!(
            outcome_from_ffi(text, &extra),
            Ok(ToolOutput::text("plain"))
        );
        let later = r#"{"structured": 3, "annotations": {"audience": ["user"]}}"#;
        assert_eq!(
            outcome_from_ffi("t".into(), later),
            Ok(ToolOutput::text("t").with_structured(json!(3)))
        );
        let bad = outcome_from_ffi("t".into(), "{not json");
        assert!(bad.is_err_and(|e| e.contains("not valid JSON")));
    }
}
