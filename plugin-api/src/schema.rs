//! Argument schemas as models read them best: generated from Rust types with every
//! subschema inline (no `$defs`/`$ref`), without the argument struct's own title and doc
//! comment at the top, and with documented enums as a plain `enum` whose values are
//! described in the text models read.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value};

/// The JSON Schema of `T` as a tool's argument schema, in the form models read best:
///
/// - every subschema inline: no `$defs` and `$ref`, which some model APIs reject and
///   others ignore (the model then sees a bare reference);
/// - without the `$schema` key (some model APIs reject it), and without the type's own
///   `title` and doc comment at the top level (the tool's description says what the
///   arguments are for; a struct's doc comment is written for Rust readers);
/// - documented enums (`oneOf` of `const`s, as schemars derives them) as one `enum`, so a
///   validator can name the allowed values, with each value's doc comment added to the
///   description (see [`tidy_schema`]).
///
/// [`TypedTool`](crate::TypedTool) uses it for its schema.
///
/// ```
/// use schemars::JsonSchema;
/// use serde::Deserialize;
/// use serde_json::json;
///
/// /// Arguments of `convert` (a doc comment for Rust readers: not in the schema).
/// #[derive(Deserialize, JsonSchema)]
/// struct ConvertArgs {
///     /// The unit to convert to.
///     to: Unit,
/// }
///
/// #[derive(Deserialize, JsonSchema)]
/// #[serde(rename_all = "lowercase")]
/// enum Unit {
///     /// Degrees Celsius.
///     Celsius,
///     /// Degrees Fahrenheit.
///     Fahrenheit,
/// }
///
/// let schema = toolhost_plugin_api::schema_for::<ConvertArgs>();
/// assert_eq!(
///     schema,
///     json!({
///         "type": "object",
///         "properties": {
///             "to": {
///                 "type": "string",
///                 "enum": ["celsius", "fahrenheit"],
///                 "description": "The unit to convert to. Values: `celsius`: Degrees Celsius. `fahrenheit`: Degrees Fahrenheit."
///             }
///         },
///         "required": ["to"]
///     })
/// );
/// ```
pub fn schema_for<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    if let Value::Object(map) = &mut schema {
        map.remove("$schema");
        map.remove("title");
        map.remove("description");
    }
    tidy_schema(schema)
}

/// Rewrites an argument schema into an equivalent one that models and validators handle
/// better; hosts apply it to every tool's schema before serving it, so plugins built
/// before [`schema_for`] inlined subschemas get the same treatment:
///
/// - local references (`#/$defs/Name`, `#/definitions/Name`) are replaced by what they
///   point to, and the definitions are dropped once nothing refers to them (a recursive
///   type keeps its reference, which cannot be inlined);
/// - a `oneOf`/`anyOf` whose alternatives are all fixed values of one type (`const` or
///   `enum`, as schemars derives documented enums) becomes one `enum`, and the values'
///   descriptions are appended to the description as "Values: `a`: ... `b`: ...".
///
/// Anything else is left as it is: the result accepts exactly the arguments the input
/// accepts. A schema that names its dialect (a top-level `$schema`) is returned exactly as
/// written: its author chose JSON Schema's full vocabulary on purpose, and MCP clients are
/// owed it unchanged (the MCP conformance suite checks that `$schema`, `$defs` and `$ref`
/// reach them). Generated schemas never name one ([`schema_for`] and the schema
/// generation of every earlier release leave `$schema` out).
///
/// ```
/// use serde_json::json;
/// use toolhost_plugin_api::tidy_schema;
///
/// let built_long_ago = json!({
///     "type": "object",
///     "properties": {"mode": {"$ref": "#/$defs/Mode"}},
///     "$defs": {"Mode": {"oneOf": [
///         {"type": "string", "const": "append", "description": "Add to the end."},
///         {"type": "string", "const": "replace", "description": "Replace the file."}
///     ]}}
/// });
/// assert_eq!(
///     tidy_schema(built_long_ago),
///     json!({
///         "type": "object",
///         "properties": {"mode": {
///             "type": "string",
///             "enum": ["append", "replace"],
///             "description": "Values: `append`: Add to the end. `replace`: Replace the file."
///         }}
///     })
/// );
/// ```
pub fn tidy_schema(schema: Value) -> Value {
    let Value::Object(mut root) = schema else {
        return schema;
    };
    if root.contains_key("$schema") {
        return Value::Object(root);
    }
    let mut defs = Map::new();
    for key in ["$defs", "definitions"] {
        if let Some(Value::Object(d)) = root.remove(key) {
            for (name, def) in d {
                defs.insert(format!("#/{key}/{name}"), def);
            }
        }
    }
    let mut left = Vec::new();
    let mut body = Value::Object(root);
    inline_refs(&mut body, &defs, &mut Vec::new(), &mut left);
    collapse_enums(&mut body);
    if !left.is_empty()
        && let Value::Object(root) = &mut body
    {
        // Recursive types: keep the definitions their references need, collapsed too.
        for pointer in left {
            let Some((key, name)) = pointer
                .strip_prefix("#/")
                .and_then(|p| p.split_once('/'))
                .map(|(k, n)| (k.to_owned(), n.to_owned()))
            else {
                continue;
            };
            let Some(mut def) = defs.get(&pointer).cloned() else {
                continue;
            };
            collapse_enums(&mut def);
            if let Value::Object(section) =
                root.entry(key).or_insert_with(|| Value::Object(Map::new()))
            {
                section.insert(name, def);
            }
        }
    }
    body
}

/// Replaces local references by copies of their targets. `path` holds the references
/// being expanded (a reference to one of them is recursive and stays); `left` collects
/// the references that stayed.
fn inline_refs(
    value: &mut Value,
    defs: &Map<String, Value>,
    path: &mut Vec<String>,
    left: &mut Vec<String>,
) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(pointer)) = map.get("$ref").cloned()
                && let Some(target) = defs.get(&pointer)
            {
                if path.contains(&pointer) {
                    if !left.contains(&pointer) {
                        left.push(pointer);
                    }
                    return;
                }
                map.remove("$ref");
                let mut target = target.clone();
                path.push(pointer);
                inline_refs(&mut target, defs, path, left);
                path.pop();
                match target {
                    // The reference's own keys (a field's description, say) win over the
                    // definition's.
                    Value::Object(t) => {
                        for (k, v) in t {
                            map.entry(k).or_insert(v);
                        }
                    }
                    // `true` adds nothing to the reference's own keys; `false` refuses all.
                    other => {
                        if other == Value::Bool(false) {
                            *value = other;
                        }
                    }
                }
                return;
            }
            for v in map.values_mut() {
                inline_refs(v, defs, path, left);
            }
        }
        Value::Array(items) => {
            for v in items {
                inline_refs(v, defs, path, left);
            }
        }
        _ => {}
    }
}

/// Turns every `oneOf`/`anyOf` of fixed values into an `enum`, innermost first.
fn collapse_enums(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for v in map.values_mut() {
                collapse_enums(v);
            }
            for key in ["oneOf", "anyOf"] {
                if let Some(Value::Array(alternatives)) = map.get(key)
                    && let Some(fixed) = fixed_values(alternatives)
                {
                    map.remove(key);
                    apply_fixed(map, fixed);
                    break;
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(collapse_enums),
        _ => {}
    }
}

/// The values and their descriptions, when every alternative is a fixed value of the
/// same JSON type (or of no declared type) with nothing else to it.
struct Fixed {
    values: Vec<Value>,
    described: Vec<(Value, String)>,
    ty: Option<Value>,
}

fn fixed_values(alternatives: &[Value]) -> Option<Fixed> {
    let mut fixed = Fixed {
        values: Vec::new(),
        described: Vec::new(),
        ty: None,
    };
    if alternatives.is_empty() {
        return None;
    }
    for alternative in alternatives {
        let Value::Object(a) = alternative else {
            return None;
        };
        let values: Vec<Value> = match (a.get("const"), a.get("enum")) {
            (Some(c), None) => vec![c.clone()],
            (None, Some(Value::Array(e))) => e.clone(),
            _ => return None,
        };
        // Anything but a type, a title or a description would change what is accepted.
        if a.keys().any(|k| {
            !matches!(
                k.as_str(),
                "const" | "enum" | "type" | "description" | "title"
            )
        }) {
            return None;
        }
        if let Some(t) = a.get("type") {
            match &fixed.ty {
                Some(seen) if seen != t => return None,
                _ => fixed.ty = Some(t.clone()),
            }
        }
        if let Some(Value::String(d)) = a.get("description")
            && values.len() == 1
        {
            fixed.described.push((values[0].clone(), d.clone()));
        }
        for v in values {
            // oneOf refuses a value two alternatives accept; an enum would accept it.
            if fixed.values.contains(&v) {
                return None;
            }
            fixed.values.push(v);
        }
    }
    Some(fixed)
}

fn apply_fixed(map: &mut Map<String, Value>, fixed: Fixed) {
    if let Some(ty) = fixed.ty {
        map.entry("type").or_insert(ty);
    }
    map.insert("enum".to_owned(), Value::Array(fixed.values));
    if fixed.described.is_empty() {
        return;
    }
    let values = fixed
        .described
        .iter()
        .map(|(v, d)| match v {
            Value::String(s) => format!("`{s}`: {d}"),
            other => format!("`{other}`: {d}"),
        })
        .collect::<Vec<_>>()
        .join(" ");
    let description = match map.get("description") {
        Some(Value::String(own)) if !own.is_empty() => format!("{own} Values: {values}"),
        _ => format!("Values: {values}"),
    };
    map.insert("description".to_owned(), Value::String(description));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[allow(dead_code, reason = "only the schema is used")]
    #[derive(Deserialize, JsonSchema)]
    #[serde(rename_all = "lowercase")]
    /// Units (a doc comment on the type).
    enum Unit {
        /// Degrees Celsius.
        Celsius,
        /// Degrees Fahrenheit.
        Fahrenheit,
    }

    #[allow(dead_code, reason = "only the schema is used")]
    #[derive(Deserialize, JsonSchema)]
    enum Plain {
        A,
        B,
    }

    #[allow(dead_code, reason = "only the schema is used")]
    /// A place.
    #[derive(Deserialize, JsonSchema)]
    struct Place {
        /// East.
        x: f64,
    }

    #[allow(dead_code, reason = "only the schema is used")]
    /// Arguments, documented for Rust readers.
    #[derive(Deserialize, JsonSchema)]
    struct Args {
        /// The unit.
        to: Unit,
        from: Option<Unit>,
        plain: Plain,
        places: Vec<Place>,
        here: Place,
    }

    #[allow(dead_code, reason = "only the schema is used")]
    #[derive(Deserialize, JsonSchema)]
    struct Tree {
        children: Vec<Tree>,
    }

    fn has_key(v: &Value, key: &str) -> bool {
        match v {
            Value::Object(m) => m.contains_key(key) || m.values().any(|v| has_key(v, key)),
            Value::Array(a) => a.iter().any(|v| has_key(v, key)),
            _ => false,
        }
    }

    #[test]
    fn generated_schemas_are_inline_untitled_and_enums_are_enums() {
        let s = schema_for::<Args>();
        for key in ["$defs", "$ref", "$schema", "oneOf"] {
            assert!(!has_key(&s, key), "{key} in {s:#}");
        }
        assert!(
            s.get("title").is_none() && s.get("description").is_none(),
            "{s:#}"
        );
        assert_eq!(
            s["properties"]["to"],
            json!({
                "type": "string",
                "enum": ["celsius", "fahrenheit"],
                "description": "The unit. Values: `celsius`: Degrees Celsius. `fahrenheit`: Degrees Fahrenheit."
            })
        );
        assert_eq!(
            s["properties"]["plain"],
            json!({"type": "string", "enum": ["A", "B"]})
        );
        assert_eq!(
            s["properties"]["here"]["properties"]["x"]["description"],
            "East."
        );
        assert_eq!(s["properties"]["places"]["items"]["type"], "object");
        let from = &s["properties"]["from"]["anyOf"];
        assert_eq!(from[0]["enum"], json!(["celsius", "fahrenheit"]), "{s:#}");
        assert_eq!(from[1], json!({"type": "null"}));
    }

    #[test]
    fn recursive_types_keep_their_reference() {
        let s = schema_for::<Tree>();
        let text = s.to_string();
        assert!(text.contains("$ref"), "{s:#}");
        let pointer = s["properties"]["children"]["items"]["$ref"]
            .as_str()
            .expect("a reference");
        if pointer == "#" {
            return; // The root itself: nothing to keep.
        }
        let (section, name) = pointer
            .strip_prefix("#/")
            .and_then(|p| p.split_once('/'))
            .expect("local");
        assert!(
            s[section][name].is_object(),
            "the definition is kept: {s:#}"
        );
    }

    #[test]
    fn a_recursive_definition_stays_with_its_reference_and_the_rest_is_inlined() {
        let old = json!({
            "type": "object",
            "properties": {"tree": {"$ref": "#/$defs/Tree"}, "unit": {"$ref": "#/$defs/Unit"}},
            "$defs": {
                "Tree": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/Tree"}}}},
                "Unit": {"type": "string", "enum": ["c"]}
            }
        });
        let s = tidy_schema(old);
        assert_eq!(
            s["properties"]["unit"],
            json!({"type": "string", "enum": ["c"]})
        );
        assert_eq!(
            s["properties"]["tree"]["properties"]["kids"]["items"]["$ref"],
            "#/$defs/Tree"
        );
        assert!(
            s["$defs"]["Tree"].is_object() && s["$defs"].get("Unit").is_none(),
            "{s:#}"
        );
    }

    #[test]
    fn old_schemas_with_refs_are_inlined_and_sibling_keys_win() {
        let old = json!({
            "type": "object",
            "properties": {
                "a": {"$ref": "#/definitions/Mode", "description": "Field doc."},
                "b": {"type": "array", "items": {"$ref": "#/definitions/Mode"}}
            },
            "definitions": {"Mode": {"type": "string", "enum": ["x", "y"], "description": "Type doc."}}
        });
        assert_eq!(
            tidy_schema(old),
            json!({
                "type": "object",
                "properties": {
                    "a": {"type": "string", "enum": ["x", "y"], "description": "Field doc."},
                    "b": {"type": "array", "items": {"type": "string", "enum": ["x", "y"], "description": "Type doc."}}
                }
            })
        );
    }

    /// What the MCP conformance suite's `json-schema-2020-12` scenario sends through.
    #[test]
    fn a_schema_that_names_its_dialect_is_left_exactly_as_written() {
        let declared = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {"address": {"type": "object", "properties": {"city": {"type": "string"}}}},
            "properties": {
                "address": {"$ref": "#/$defs/address"},
                "mode": {"oneOf": [{"const": "a"}, {"const": "b"}]}
            },
            "additionalProperties": false
        });
        assert_eq!(tidy_schema(declared.clone()), declared);
    }

    #[test]
    fn alternatives_that_are_not_all_fixed_values_stay() {
        for kept in [
            json!({"oneOf": [{"const": "a"}, {"type": "integer"}]}),
            json!({"oneOf": [{"const": "a", "type": "string"}, {"const": 1, "type": "integer"}]}),
            json!({"oneOf": [{"const": "a"}, {"const": "a"}]}),
            json!({"oneOf": [{"const": "a", "minLength": 3}]}),
            json!({"anyOf": []}),
        ] {
            let schema = json!({"type": "object", "properties": {"p": kept.clone()}});
            assert_eq!(tidy_schema(schema)["properties"]["p"], kept);
        }
    }

    #[test]
    fn anything_but_an_object_is_returned_as_it_is() {
        assert_eq!(tidy_schema(json!(true)), json!(true));
        assert_eq!(tidy_schema(json!([1])), json!([1]));
    }
}
