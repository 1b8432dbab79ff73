//! `json_query`: picks a value out of a JSON document with a JSON Pointer.

use serde_json::Value;
use toolhost_plugin_api::{ToolError, tool};

/// Extracts a value from a JSON document with a JSON Pointer (RFC 6901: "/a/0/b" is key a,
/// first element, key b; "" is the whole document) and returns it as pretty-printed JSON.
/// When the pointer does not resolve, the error names the deepest part that exists and
/// its keys, so you can correct the pointer.
#[tool(risk = read)]
pub(crate) fn json_query(
    /// The JSON document, as text.
    json: String,
    /// A JSON Pointer (RFC 6901) such as "/items/0/name"; "" is the whole document.
    #[arg(default = "")]
    pointer: String,
) -> Result<String, ToolError> {
    let doc: Value = serde_json::from_str(&json)
        .map_err(|e| ToolError::invalid_args(format!("`json` is not valid JSON: {e}")))?;
    if !pointer.is_empty() && !pointer.starts_with('/') {
        return Err(ToolError::invalid_args(format!(
            "`pointer` must be empty or start with '/', got '{pointer}'"
        )));
    }
    match doc.pointer(&pointer) {
        Some(v) => serde_json::to_string_pretty(v).map_err(ToolError::failed),
        None => Err(ToolError::Failed(explain_miss(&doc, &pointer))),
    }
}

/// Says how far `pointer` got and what was there.
fn explain_miss(doc: &Value, pointer: &str) -> String {
    let mut here = doc;
    let mut walked = String::new();
    for token in pointer.split('/').skip(1) {
        let key = token.replace("~1", "/").replace("~0", "~");
        let next = match here {
            Value::Object(map) => map.get(&key),
            Value::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        };
        match next {
            Some(v) => {
                walked.push('/');
                walked.push_str(token);
                here = v;
            }
            None => {
                let at = if walked.is_empty() {
                    "the document root"
                } else {
                    &walked
                };
                let has = match here {
                    Value::Object(map) => format!(
                        "an object with keys: {}",
                        map.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                    Value::Array(items) => format!("an array of {} elements", items.len()),
                    other => format!("a {} value", type_name(other)),
                };
                return format!(
                    "no value at '{pointer}': '{key}' is not found at {at}, which is {has}"
                );
            }
        }
    }
    format!("no value at '{pointer}'")
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use serde_json::json;
    use toolhost_plugin_api::ToolError;
    use toolhost_plugin_api::testing::call;

    use super::json_query;

    const DOC: &str = r#"{"items": [{"name": "a", "n": 1}, {"name": "b"}], "a/b": {"~x": true}}"#;

    fn query(pointer: &str) -> Result<String, ToolError> {
        call(&json_query, json!({"json": DOC, "pointer": pointer}))
    }

    #[test]
    fn picks_values_by_pointer() {
        assert_eq!(query("/items/0/name"), Ok("\"a\"".to_owned()));
        assert_eq!(query("/items/1"), Ok("{\n  \"name\": \"b\"\n}".to_owned()));
        // RFC 6901 escapes: ~1 is '/', ~0 is '~'.
        assert_eq!(query("/a~1b/~0x"), Ok("true".to_owned()));
        let whole = call(&json_query, json!({"json": "[1, 2]"})).unwrap();
        assert_eq!(whole, "[\n  1,\n  2\n]");
    }

    #[test]
    fn a_miss_says_how_far_the_pointer_got() {
        assert_eq!(
            query("/items/0/colour"),
            Err(ToolError::Failed(
                "no value at '/items/0/colour': 'colour' is not found at /items/0, which is an \
                 object with keys: n, name"
                    .to_owned()
            ))
        );
        assert_eq!(
            query("/items/5"),
            Err(ToolError::Failed(
                "no value at '/items/5': '5' is not found at /items, which is an array of 2 \
                 elements"
                    .to_owned()
            ))
        );
        assert_eq!(
            query("/nope"),
            Err(ToolError::Failed(
                "no value at '/nope': 'nope' is not found at the document root, which is an \
                 object with keys: a/b, items"
                    .to_owned()
            ))
        );
        assert_eq!(
            query("/items/0/n/deeper"),
            Err(ToolError::Failed(
                "no value at '/items/0/n/deeper': 'deeper' is not found at /items/0/n, which is \
                 a number value"
                    .to_owned()
            ))
        );
    }

    #[test]
    fn bad_documents_and_pointers_are_invalid_arguments() {
        let out = call(&json_query, json!({"json": "{oops", "pointer": ""}));
        assert!(
            matches!(&out, Err(ToolError::InvalidArgs(m)) if m.starts_with("`json` is not valid JSON")),
            "{out:?}"
        );
        assert_eq!(
            query("items"),
            Err(ToolError::InvalidArgs(
                "`pointer` must be empty or start with '/', got 'items'".to_owned()
            ))
        );
        assert_eq!(
            call(&json_query, json!({"pointer": "/a"})),
            Err(ToolError::InvalidArgs(
                r#""json" is a required property"#.to_owned()
            ))
        );
    }
}
