//! Rich tool output: a tool that returns more than text (an image, audio, an embedded
//! resource, several parts) returns [`Content`] blocks encoded by [`content_output`].
//! The host passes them to MCP clients as content blocks and gives a model the text parts.

use serde::{Deserialize, Serialize};

/// The key of the one-field JSON object that carries content blocks in a tool's output.
pub const CONTENT_KEY: &str = "toolhost:content";

/// One part of a tool's output, in MCP's wire shape.
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
}

/// A text resource embedded in a tool's output.
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
pub fn content_output(blocks: &[Content]) -> String {
    serde_json::to_string(&Envelope { content: blocks })
        .unwrap_or_else(|e| format!("could not encode the tool's content: {e}"))
}

/// The content blocks in a tool's output, if it was made by [`content_output`]; `None`
/// for plain output (text or any other JSON).
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
