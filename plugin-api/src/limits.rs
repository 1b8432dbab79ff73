//! The caps a host puts on a plugin's metadata (description, schema, tool count), checked
//! as the metadata crosses and before the host parses or copies it, so a plugin cannot
//! make a host use memory out of proportion to what a model can read.

/// The longest tool name a host reads, in bytes (1 KiB; the registry's name rules then
/// allow far less).
pub const MAX_NAME_BYTES: usize = 1024;

/// The longest tool description a host accepts, in bytes (16 KiB). Longer ones leave the
/// tool out; a model reads every description on every turn, so a page is plenty.
pub const MAX_DESCRIPTION_BYTES: usize = 16 * 1024;

/// The largest argument schema a host accepts, as the JSON text that crosses, in bytes
/// (256 KiB). The same cap applies to a tool's requirements.
pub const MAX_SCHEMA_BYTES: usize = 256 * 1024;

/// The deepest nesting of arrays and objects a host accepts in an argument schema (64
/// levels; the top object is level 1).
pub const MAX_SCHEMA_DEPTH: usize = 64;

/// The most tools one plugin may export (1,000). A plugin exporting more is refused as a
/// whole, before any tool's metadata is read.
pub const MAX_TOOLS_PER_PLUGIN: usize = 1_000;

/// How deeply `value`'s arrays and objects nest (a scalar: 0, `{}`: 1). Walks without
/// recursion, and stops counting past `limit + 1`.
pub(crate) fn nesting_depth(value: &serde_json::Value, limit: usize) -> usize {
    let mut deepest = 0;
    let mut stack: Vec<(&serde_json::Value, usize)> = vec![(value, 1)];
    while let Some((v, depth)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &serde_json::Value>> = match v {
            serde_json::Value::Array(items) => Box::new(items.iter()),
            serde_json::Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        deepest = deepest.max(depth);
        if depth > limit {
            break;
        }
        stack.extend(children.map(|c| (c, depth + 1)));
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn depth_counts_arrays_and_objects_only() {
        assert_eq!(nesting_depth(&json!(3), 64), 0);
        assert_eq!(nesting_depth(&json!({}), 64), 1);
        assert_eq!(nesting_depth(&json!({"a": [1, {"b": []}]}), 64), 4);
        let mut deep = json!({});
        for _ in 0..99 {
            deep = json!({ "not": deep });
        }
        assert_eq!(nesting_depth(&deep, 200), 100);
        assert!(nesting_depth(&deep, 10) > 10);
    }
}
