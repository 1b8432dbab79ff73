//! [`Structured`]: a structured result with the text, details and error flag that go
//! beside it, what a `#[tool]` function returns when the value alone is not enough.

use serde::Serialize;
use serde_json::Value;

use crate::outcome::{Details, ToolOutput};
use crate::tool::ToolError;

/// A structured result with what goes beside it: the text the model reads (its JSON when
/// none is given), details for the session store and clients, and whether it says the
/// call did not do what was asked. What a `#[tool]` function returns when it needs more
/// than the value alone; the tool's output schema is `T`'s.
///
/// ```
/// use toolhost_plugin_api::{Structured, ToolOutput};
///
/// #[derive(serde::Serialize, schemars::JsonSchema)]
/// struct Checked { errors: u32 }
///
/// let answer = Structured::new(Checked { errors: 2 })
///     .text("2 errors")
///     .detail("timings", serde_json::json!({"ms": 120}))
///     .failed_if(true);
/// let out: ToolOutput = answer.into_output().expect("encodes");
/// assert_eq!((out.text.as_str(), out.is_error), ("2 errors", true));
/// assert_eq!(out.structured, Some(serde_json::json!({"errors": 2})));
/// assert_eq!(out.details["timings"]["ms"], 120);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Structured<T> {
    /// The value (MCP `structuredContent`).
    pub value: T,
    /// What the model reads; `None`: the value's JSON.
    pub text: Option<String>,
    /// Details, by kind (see [`ToolOutput::details`]).
    pub details: Details,
    /// The call did not do what was asked (see [`ToolOutput::is_error`]).
    pub is_error: bool,
}

impl<T: Serialize> Structured<T> {
    /// The value alone: its JSON is the text.
    ///
    /// ```
    /// use toolhost_plugin_api::Structured;
    ///
    /// #[derive(serde::Serialize)]
    /// struct Count { files: u32 }
    ///
    /// let out = Structured::new(Count { files: 3 }).into_output().unwrap();
    /// assert_eq!(out.text, r#"{"files":3}"#);
    /// assert!(!out.is_error);
    /// ```
    pub fn new(value: T) -> Self {
        Structured {
            value,
            text: None,
            details: Details::new(),
            is_error: false,
        }
    }

    /// The text the model reads instead of the value's JSON; keep it faithful to the value.
    pub fn text(mut self, text: impl Into<String>) -> Self {
        self.text = Some(text.into());
        self
    }

    /// Adds a detail of `kind`.
    pub fn detail(mut self, kind: impl Into<String>, value: Value) -> Self {
        self.details.insert(kind.into(), value);
        self
    }

    /// Replaces the details.
    pub fn details(mut self, details: Details) -> Self {
        self.details = details;
        self
    }

    /// Says the call did not do what was asked when `failed` (a check with errors, a
    /// command that exited non-zero): it goes out as an error with its text and value.
    pub fn failed_if(mut self, failed: bool) -> Self {
        self.is_error = failed;
        self
    }

    /// The outcome: the value encoded as the structured result, the text (or the value's
    /// JSON), the details and the error flag. A value that does not encode as JSON (a map
    /// whose keys are not strings, say) is a [`ToolError::Failed`].
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use toolhost_plugin_api::{Structured, ToolError};
    ///
    /// let by_pair = BTreeMap::from([((1, 2), "a")]);
    /// assert!(matches!(Structured::new(by_pair).into_output(), Err(ToolError::Failed(_))));
    /// ```
    pub fn into_output(self) -> Result<ToolOutput, ToolError> {
        let value = serde_json::to_value(&self.value)
            .map_err(|e| ToolError::failed(format!("could not encode the tool's result: {e}")))?;
        let text = match self.text {
            Some(t) => t,
            None => value.to_string(),
        };
        Ok(ToolOutput {
            text,
            structured: Some(value),
            details: self.details,
            content: Vec::new(),
            is_error: self.is_error,
        })
    }
}
