//! Rich tool output: a tool that returns more than text (an image, audio, an embedded
//! resource, several parts) returns [`Content`] blocks encoded by [`content_output`].
//! They cross the plugin boundary as ordinary output text (plugin-api 0.1.2; no ABI
//! change). toolhost passes them to MCP clients as content blocks; everywhere else (its
//! own agent's model, `toolhost call`) the output is passed on as it is, the JSON text of
//! the blocks, as it is by hosts that predate 0.1.2.

use serde::{Deserialize, Serialize};

/// The key of the one-field JSON object that carries content blocks in a tool's output.
///
/// ```
/// use toolhost_plugin_api::{CONTENT_KEY, Content, content_output};
///
/// let output: serde_json::Value = serde_json::from_str(&content_output(&[Content::text("hi")]))
///     .expect("JSON");
/// assert_eq!(output[CONTENT_KEY][0]["text"], "hi");
/// ```
pub const CONTENT_KEY: &str = "toolhost:content";

/// One part of a tool's output, in MCP's wire shape.
///
/// ```
/// use toolhost_plugin_api::{Content, EmbeddedResource};
///
/// let blocks = [
///     Content::text("The chart and its data:"),
///     Content::Image { data: "iVBORw0KGgo=".into(), mime_type: "image/png".into() },
///     Content::Resource {
///         resource: EmbeddedResource {
///             uri: "file:///tmp/data.csv".into(),
///             mime_type: Some("text/csv".into()),
///             text: "x,y\n1,2\n".into(),
///         },
///     },
/// ];
/// let json = serde_json::to_value(&blocks[1]).expect("JSON");
/// assert_eq!(
///     json,
///     serde_json::json!({"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"})
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Content {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image, base64-encoded.
    Image {
        /// The bytes, base64 (standard alphabet, padded).
        data: String,
        /// e.g. `image/png`.
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    /// Audio, base64-encoded.
    Audio {
        /// The bytes, base64 (standard alphabet, padded).
        data: String,
        /// e.g. `audio/wav`.
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    /// A resource embedded in the result.
    Resource {
        /// The resource.
        resource: EmbeddedResource,
    },
    /// A link to a resource the client may read (MCP `resource_link`).
    #[serde(rename = "resource_link")]
    ResourceLink {
        /// Where it is.
        uri: String,
        /// Its name.
        name: String,
        /// What it is, for a reader.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
        /// e.g. `text/plain`.
        #[serde(default, rename = "mimeType", skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
}

/// A text resource embedded in a tool's output (see [`Content::Resource`]).
///
/// ```
/// use toolhost_plugin_api::EmbeddedResource;
///
/// let note = EmbeddedResource {
///     uri: "note://42".into(),
///     mime_type: None,
///     text: "Buy tea".into(),
/// };
/// assert_eq!(
///     serde_json::to_value(&note).expect("JSON"),
///     serde_json::json!({"uri": "note://42", "text": "Buy tea"})
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmbeddedResource {
    /// Its URI.
    pub uri: String,
    /// e.g. `text/plain`.
    #[serde(rename = "mimeType", default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Its text.
    pub text: String,
}

impl Content {
    /// A text block.
    ///
    /// ```
    /// use toolhost_plugin_api::Content;
    ///
    /// assert_eq!(Content::text("done"), Content::Text { text: "done".to_owned() });
    /// ```
    pub fn text(text: impl Into<String>) -> Self {
        Content::Text { text: text.into() }
    }
}

#[derive(Serialize, Deserialize)]
struct Envelope<C> {
    #[serde(rename = "toolhost:content")]
    content: C,
}

/// Encodes content blocks as a tool's output (`{"toolhost:content": [...]}`).
///
/// ```
/// use toolhost_plugin_api::{Content, Risk, Tool, ToolContext, ToolError};
/// use serde_json::{Value, json};
///
/// struct Snapshot;
///
/// impl Tool for Snapshot {
///     fn name(&self) -> &str { "snapshot" }
///     fn description(&self) -> &str { "Takes a picture of the screen." }
///     fn schema(&self) -> Value { json!({"type": "object"}) }
///     fn risk(&self) -> Risk { Risk::Read }
///     async fn call(&self, _ctx: &ToolContext<'_>, _args: Value) -> Result<String, ToolError> {
///         let png_base64 = "iVBORw0KGgo=".to_owned(); // the picture, base64-encoded
///         Ok(toolhost_plugin_api::content_output(&[
///             Content::text("The screen now:"),
///             Content::Image { data: png_base64, mime_type: "image/png".into() },
///         ]))
///     }
/// }
/// ```
pub fn content_output(blocks: &[Content]) -> String {
    serde_json::to_string(&Envelope { content: blocks })
        .unwrap_or_else(|e| format!("could not encode the tool's content: {e}"))
}

/// The content blocks in a tool's output, if it was made by [`content_output`]; `None`
/// for plain output (text or any other JSON).
///
/// ```
/// use toolhost_plugin_api::{Content, content_output, parse_content_output};
///
/// let output = content_output(&[Content::text("hi")]);
/// assert_eq!(parse_content_output(&output), Some(vec![Content::text("hi")]));
/// assert_eq!(parse_content_output("just text"), None);
/// assert_eq!(parse_content_output(r#"{"answer": 42}"#), None);
/// ```
pub fn parse_content_output(output: &str) -> Option<Vec<Content>> {
    // Cheap test first: most outputs are not content envelopes.
    let trimmed = output.trim_start();
    let rest = trimmed.strip_prefix('{')?.trim_start();
    if !rest.starts_with("\"toolhost:content\"") {
        return None;
    }
    serde_json::from_str::<Envelope<Vec<Content>>>(output)
        .ok()
        .map(|e| e.content)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_round_trips_and_plain_output_is_not_content() {
        let blocks = vec![
            Content::text("hi"),
            Content::Image {
                data: "AAAA".into(),
                mime_type: "image/png".into(),
            },
        ];
        let out = content_output(&blocks);
        assert!(
            out.starts_with("{\"toolhost:content\":[{\"type\":\"text\""),
            "{out}"
        );
        assert_eq!(parse_content_output(&out), Some(blocks));
        assert_eq!(parse_content_output("{\"a\": 1}"), None);
        assert_eq!(parse_content_output("plain text"), None);
        assert_eq!(parse_content_output("{\"toolhost:content\": 3}"), None);
    }
}
