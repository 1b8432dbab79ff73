//! `text_stats`: counts lines, words, characters and bytes of a text.

use serde_json::json;
use toolhost_plugin_api::{ToolError, tool};

/// Counts the lines, words (whitespace-separated), Unicode characters and UTF-8 bytes of a
/// text, and the length of its longest line in characters. Use it instead of counting
/// yourself when a length limit matters.
#[tool(risk = read)]
pub(crate) fn text_stats(
    /// The text to measure.
    text: String,
) -> Result<String, ToolError> {
    let t = &text;
    Ok(json!({
        "lines": t.lines().count(),
        "words": t.split_whitespace().count(),
        "characters": t.chars().count(),
        "bytes": t.len(),
        "longest_line": t.lines().map(|l| l.chars().count()).max().unwrap_or(0),
    })
    .to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use serde_json::{Value, json};
    use toolhost_plugin_api::ToolError;
    use toolhost_plugin_api::testing::call;

    use super::text_stats;

    fn stats(text: &str) -> Value {
        serde_json::from_str(&call(&text_stats, json!({"text": text})).unwrap()).unwrap()
    }

    #[test]
    fn counts_lines_words_characters_and_bytes() {
        assert_eq!(
            stats("héllo wörld\n  two   words here\n"),
            json!({"lines": 2, "words": 5, "characters": 31, "bytes": 33, "longest_line": 18})
        );
    }

    #[test]
    fn an_empty_text_is_all_zeros() {
        assert_eq!(
            stats(""),
            json!({"lines": 0, "words": 0, "characters": 0, "bytes": 0, "longest_line": 0})
        );
    }

    #[test]
    fn needs_a_text() {
        for args in [
            json!({}),
            json!({"text": 1}),
            json!({"text": "a", "more": 1}),
        ] {
            let out = call(&text_stats, args.clone());
            assert!(
                matches!(out, Err(ToolError::InvalidArgs(_))),
                "{args}: {out:?}"
            );
        }
    }
}
