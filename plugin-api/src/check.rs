//! The one check of a tool's metadata that decides whether a host takes the tool: its
//! name, its schemas (an object at the top, and a schema that compiles), and a plugin's
//! export list as a whole (no two tools of one name, not too many tools). Hosts run it at
//! load and registration, and the test harness runs it in `describe`, `call` and
//! `check_plugin`, so `cargo test` refuses exactly what a host refuses, with the same
//! messages. It needs the `check` feature (jsonschema, the schema compiler hosts use: one
//! version, one verdict); `testing` enables it, and a plugin's own build never needs it.

use std::sync::Arc;

use serde_json::Value;

pub use crate::export::ToolMetadata;
use crate::limits::MAX_TOOLS_PER_PLUGIN;
use crate::outcome::ToolOutput;

/// The longest tool name every model API accepts.
pub const MAX_TOOL_NAME_CHARS: usize = 64;

/// What a tool that passed [`check_tool`] keeps: its schemas, compiled, so a host
/// validates calls with what was checked instead of compiling them again (a plugin tool
/// keeps it from its load to its registration).
#[derive(Debug, Clone)]
pub struct CheckedTool {
    /// The argument schema, compiled.
    pub arguments: Arc<jsonschema::Validator>,
    /// The output schema, compiled, if the tool declares one.
    pub output: Option<Arc<jsonschema::Validator>>,
}

/// The schemas a tool declares, by role. Each role says how messages name it and why
/// its top level must be an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaRole {
    /// The argument schema (`schema()`): calls are validated against it.
    Arguments,
    /// An output schema (MCP's `outputSchema`): structured results are validated against
    /// it, and MCP requires an object schema.
    Output,
    /// A plugin's settings schema (`export_plugin! { settings: T, .. }`): the host's
    /// `[plugins.NAME.settings]` table is validated against it when the plugin loads.
    Settings,
}

impl SchemaRole {
    fn what(self) -> &'static str {
        match self {
            SchemaRole::Arguments => "argument schema",
            SchemaRole::Output => "output schema",
            SchemaRole::Settings => "settings schema",
        }
    }

    fn why_object(self) -> &'static str {
        match self {
            SchemaRole::Arguments => {
                "tool arguments are always a JSON object, so no call could pass it"
            }
            SchemaRole::Output => "MCP requires an object schema for structured results",
            SchemaRole::Settings => "settings are always a TOML table",
        }
    }

    fn fix(self) -> &'static str {
        match self {
            SchemaRole::Arguments => {
                "fix the tool's `schema()` (or the argument type it is derived from)"
            }
            SchemaRole::Output => {
                "fix the tool's `output_schema()` (or the output type it is derived from)"
            }
            SchemaRole::Settings => "fix the settings type named in `export_plugin!`",
        }
    }
}

/// Checks one tool's metadata as every host does before it takes the tool: `Err` is the
/// message a host logs when it leaves the tool out (`tool 'x': ...`).
///
/// ```
/// # #[cfg(feature = "check")] {
/// use toolhost_plugin_api::check::{ToolMetadata, check_tool};
/// let meta = ToolMetadata {
///     name: "Search Notes".into(),
///     description: "Searches.".into(),
///     schema: serde_json::json!({"type": "object"}),
///     risk: toolhost_plugin_api::Risk::Read,
///     interactive: false,
///     requirements: Default::default(),
///     output_schema: None,
/// };
/// assert!(check_tool(&meta).unwrap_err().contains("invalid name"));
/// # }
/// ```
pub fn check_tool(meta: &ToolMetadata) -> Result<CheckedTool, String> {
    check_parts(&meta.name, &meta.schema, meta.output_schema.as_ref())
}

/// [`check_tool`] on the parts it reads: the name and the schemas.
///
/// ```
/// # #[cfg(feature = "check")] {
/// use toolhost_plugin_api::check::check_parts;
/// let checked = check_parts("search", &serde_json::json!({"type": "object"}), None);
/// assert!(checked.is_ok_and(|c| c.output.is_none()));
/// # }
/// ```
pub fn check_parts(
    name: &str,
    schema: &Value,
    output_schema: Option<&Value>,
) -> Result<CheckedTool, String> {
    check_name(name).map_err(|e| format!("tool '{name}': {e}"))?;
    let compile = |role: SchemaRole, schema: &Value| {
        check_schema(role, schema)
            .map(Arc::new)
            .map_err(|e| format!("tool '{name}': {e}"))
    };
    // One line per schema a tool declares (and its field in `CheckedTool`).
    let arguments = compile(SchemaRole::Arguments, schema)?;
    let output = output_schema
        .map(|s| compile(SchemaRole::Output, s))
        .transpose()?;
    Ok(CheckedTool { arguments, output })
}

/// Why `name` is not a name every model API accepts (1-64 of `A-Z a-z 0-9 _ -`), if it
/// is not.
///
/// ```
/// # #[cfg(feature = "check")] {
/// use toolhost_plugin_api::check::check_name;
/// assert!(check_name("search_notes").is_ok());
/// assert!(check_name("Search Notes").unwrap_err().contains("' '"));
/// # }
/// ```
pub fn check_name(name: &str) -> Result<(), String> {
    let rule = "use 1-64 characters of A-Z, a-z, 0-9, _ and -";
    if name.is_empty() {
        return Err(format!("it has an invalid name: it is empty; {rule}"));
    }
    let chars = name.chars().count();
    if chars > MAX_TOOL_NAME_CHARS {
        return Err(format!(
            "it has an invalid name: it is {chars} characters long; {rule}"
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(format!(
            "it has an invalid name: {bad:?} is not allowed in it; {rule}"
        ));
    }
    Ok(())
}

/// Checks one schema a tool declares: an object schema at the top level, and a valid JSON
/// Schema (for an invalid keyword, the message names its JSON pointer in the schema, as
/// in `at /properties/query/type: ...`). Returns it compiled.
///
/// ```
/// # #[cfg(feature = "check")] {
/// use toolhost_plugin_api::check::{SchemaRole, check_schema};
/// let bad = serde_json::json!({"type": "object", "properties": {"q": {"type": "strnig"}}});
/// let why = check_schema(SchemaRole::Arguments, &bad).unwrap_err();
/// assert!(why.contains("at /properties/q/type"), "{why}");
/// # }
/// ```
pub fn check_schema(role: SchemaRole, schema: &Value) -> Result<jsonschema::Validator, String> {
    if let Some(what) = not_an_object_schema(schema) {
        return Err(format!(
            "its {}'s top level is {what}, but {}; make it an object schema \
             ({{\"type\": \"object\", \"properties\": {{...}}}})",
            role.what(),
            role.why_object()
        ));
    }
    jsonschema::validator_for(schema).map_err(|e| {
        let at = e.instance_path().to_string();
        let at = if at.is_empty() { "/".to_owned() } else { at };
        format!(
            "its {} is not a valid JSON Schema: at {at}: {e}; {}",
            role.what(),
            role.fix()
        )
    })
}

/// A plugin's settings checked against the schema it declares, as hosts check them when
/// they load it: `Ok` with one warning per top-level key the schema does not name (the
/// plugin ignores it: a typo, or a setting of another version), `Err` when the settings
/// do not fit (a wrong type, a missing key, a value out of range, or an unknown key the
/// type refuses), naming each problem's path. Messages name neither the plugin nor the
/// config file: the host adds both.
///
/// ```
/// # #[cfg(feature = "check")] {
/// use serde_json::json;
/// use toolhost_plugin_api::check::check_settings;
/// let schema = json!({"type": "object", "properties": {"units": {"type": "string"}}});
/// assert_eq!(check_settings(&schema, &json!({"units": "metric"})), Ok(vec![]));
/// let warned = check_settings(&schema, &json!({"unit": "metric"})).unwrap();
/// assert_eq!(warned, ["key 'unit' is not a setting of this plugin (it reads: units); it is ignored"]);
/// let refused = check_settings(&schema, &json!({"units": 3})).unwrap_err();
/// assert!(refused.starts_with("/units: 3 is not of type \"string\""), "{refused}");
/// # }
/// ```
pub fn check_settings(schema: &Value, settings: &Value) -> Result<Vec<String>, String> {
    let validator = check_schema(SchemaRole::Settings, schema)?;
    let known = settings_keys(schema);
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
    let open_ended = schema.get("properties").is_none()
        || schema
            .get("additionalProperties")
            .is_some_and(|a| a != &Value::Bool(false));
    let mut warnings = Vec::new();
    let mut checked = settings.clone();
    if let (Value::Object(table), false) = (&mut checked, open_ended) {
        let unknown: Vec<String> = table
            .keys()
            .filter(|k| !known.contains(&k.as_str()))
            .cloned()
            .collect();
        for key in unknown {
            let reads = if known.is_empty() {
                "it reads none".to_owned()
            } else {
                format!("it reads: {}", known.join(", "))
            };
            if closed {
                // The plugin's type refuses it: every call would fail on it.
                return Err(format!(
                    "key '{key}' is not a setting of this plugin ({reads}); remove it"
                ));
            }
            warnings.push(format!(
                "key '{key}' is not a setting of this plugin ({reads}); it is ignored"
            ));
            table.remove(&key);
        }
    }
    match problems(&validator, &checked) {
        None => Ok(warnings),
        Some(problems) => Err(problems),
    }
}

/// The keys a settings schema names at its top level (its `properties`).
///
/// ```
/// # #[cfg(feature = "check")] {
/// let schema = serde_json::json!({"type": "object", "properties": {"cities": {}, "units": {}}});
/// assert_eq!(toolhost_plugin_api::check::settings_keys(&schema), ["cities", "units"]);
/// # }
/// ```
pub fn settings_keys(schema: &Value) -> Vec<&str> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

/// What the top level of `schema` is, when it is not an object schema.
fn not_an_object_schema(schema: &Value) -> Option<String> {
    let Value::Object(map) = schema else {
        return Some(format!("`{schema}`"));
    };
    match map.get("type") {
        None => None,
        Some(Value::String(t)) if t == "object" => None,
        Some(Value::Array(types)) if types.iter().any(|t| t == "object") => None,
        Some(other) => Some(format!("of type {other}")),
    }
}

/// Why a plugin that exports `count` tools is refused whole, if it is (more than
/// [`MAX_TOOLS_PER_PLUGIN`]). Hosts count before reading any tool's metadata.
///
/// ```
/// # #[cfg(feature = "check")] {
/// use toolhost_plugin_api::check::check_tool_count;
/// assert!(check_tool_count(3).is_ok());
/// assert!(check_tool_count(1_001).is_err());
/// # }
/// ```
pub fn check_tool_count(count: usize) -> Result<(), String> {
    if count > MAX_TOOLS_PER_PLUGIN {
        return Err(format!(
            "the plugin exports {} tools, more than the {} a plugin may; split it into \
             several plugins or export fewer tools",
            crate::export::grouped(count),
            crate::export::grouped(MAX_TOOLS_PER_PLUGIN)
        ));
    }
    Ok(())
}

/// The tools of one plugin's export list that a host leaves out because an earlier one
/// has their name: `(index, message)` for each, where `index` is the position (from 0)
/// in the plugin's `tools` list and the message numbers tools from 1 as they are written
/// there. The first of a name keeps it.
///
/// ```
/// # #[cfg(feature = "check")] {
/// use toolhost_plugin_api::check::duplicate_tools;
/// let refused = duplicate_tools("notes", [(0, "a"), (1, "b"), (4, "a")]);
/// assert_eq!(refused, vec![(
///     4,
///     "plugin 'notes' exports two tools named 'a' (#1 and #5); rename one".to_owned(),
/// )]);
/// # }
/// ```
pub fn duplicate_tools<'a>(
    plugin: &str,
    tools: impl IntoIterator<Item = (usize, &'a str)>,
) -> Vec<(usize, String)> {
    let mut first: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    let mut refused = Vec::new();
    for (index, name) in tools {
        match first.get(name) {
            Some(&kept) => refused.push((
                index,
                format!(
                    "plugin '{plugin}' exports two tools named '{name}' (#{} and #{}); rename one",
                    kept + 1,
                    index + 1
                ),
            )),
            None => {
                first.insert(name, index);
            }
        }
    }
    refused
}

/// What is wrong with `value` against `validator`, in a form a model can act on (at most
/// five problems, each with the JSON path it concerns), or `None` when it is valid.
///
/// ```
/// # #[cfg(feature = "check")] {
/// use toolhost_plugin_api::check::problems;
/// let schema = serde_json::json!({"type": "object", "properties": {"n": {"type": "integer"}}});
/// let validator = jsonschema::validator_for(&schema).expect("compiles");
/// assert_eq!(problems(&validator, &serde_json::json!({"n": 1})), None);
/// let why = problems(&validator, &serde_json::json!({"n": "one"})).expect("a problem");
/// assert!(why.starts_with("/n: "), "{why}");
/// # }
/// ```
pub fn problems(validator: &jsonschema::Validator, value: &Value) -> Option<String> {
    if validator.is_valid(value) {
        return None;
    }
    let mut problems: Vec<String> = validator
        .iter_errors(value)
        .take(5)
        .map(|e| {
            let path = e.instance_path().to_string();
            let message = match allowed_values(&e) {
                Some(values) => format!(
                    "{} is not one of the allowed values: {}",
                    e.instance(),
                    values.join(", ")
                ),
                None => e.to_string(),
            };
            if path.is_empty() {
                message
            } else {
                format!("{path}: {message}")
            }
        })
        .collect();
    if problems.is_empty() {
        problems.push("the value does not match the schema".to_owned());
    }
    Some(problems.join("; "))
}

/// The values a `oneOf`/`anyOf` of `const`s (or `enum`s) allows, when that is what `e`
/// failed: a documented Rust enum arrives so, and "not valid under any of the schemas
/// listed in the 'oneOf' keyword" names none of them.
fn allowed_values(e: &jsonschema::ValidationError<'_>) -> Option<Vec<String>> {
    use jsonschema::error::ValidationErrorKind;
    let alternatives = match e.kind() {
        ValidationErrorKind::OneOfNotValid { context } | ValidationErrorKind::AnyOf { context } => {
            context
        }
        _ => return None,
    };
    let mut values = Vec::new();
    for errors in alternatives {
        let before = values.len();
        for error in errors {
            match error.kind() {
                ValidationErrorKind::Constant { expected_value } => {
                    values.push(expected_value.to_string());
                }
                ValidationErrorKind::Enum { options } => {
                    values.extend(options.as_array()?.iter().map(Value::to_string));
                }
                _ => {}
            }
        }
        // An alternative that is not a fixed value: the values alone would mislead.
        if values.len() == before {
            return None;
        }
    }
    Some(values)
}

/// Checks a tool's structured result against its compiled output schema, as hosts and the
/// harness do: `Err` completes "tool 'x' ..." (no schema: anything passes; a schema: the
/// value must be there and match).
///
/// ```
/// # #[cfg(feature = "check")] {
/// use toolhost_plugin_api::check::check_output;
/// let schema = serde_json::json!({"type": "object", "required": ["n"]});
/// let validator = jsonschema::validator_for(&schema).expect("compiles");
/// assert!(check_output(Some(&validator), Some(&serde_json::json!({"n": 1}))).is_ok());
/// assert!(check_output(Some(&validator), None).is_err());
/// assert!(check_output(None, None).is_ok());
/// # }
/// ```
pub fn check_output(
    validator: Option<&jsonschema::Validator>,
    structured: Option<&Value>,
) -> Result<(), String> {
    let Some(validator) = validator else {
        return Ok(());
    };
    match structured {
        None => Err(
            "declares an output schema but returned no structured result; return \
                     one that matches it"
                .to_owned(),
        ),
        Some(value) => match problems(validator, value) {
            None => Ok(()),
            Some(problems) => Err(format!(
                "returned a structured result that does not match its output schema: \
                 {problems}"
            )),
        },
    }
}

/// What hosts and the harness make of a successful outcome: [`check_output`] on its
/// structured value, then, for a structured value with no text, its JSON as the text the
/// model reads. `Err` completes "tool 'x' ...".
///
/// ```
/// # #[cfg(feature = "check")] {
/// use toolhost_plugin_api::ToolOutput;
/// use toolhost_plugin_api::check::finish_output;
/// let mut out = ToolOutput::default().with_structured(serde_json::json!({"n": 1}));
/// finish_output(None, &mut out).expect("no schema: anything passes");
/// assert_eq!(out.text, r#"{"n":1}"#);
/// # }
/// ```
pub fn finish_output(
    validator: Option<&jsonschema::Validator>,
    output: &mut ToolOutput,
) -> Result<(), String> {
    check_output(validator, output.structured.as_ref())?;
    if output.text.is_empty()
        && let Some(value) = &output.structured
    {
        output.text = value.to_string();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(name: &str, schema: Value) -> ToolMetadata {
        ToolMetadata {
            name: name.to_owned(),
            description: "d".to_owned(),
            schema,
            risk: crate::Risk::Read,
            interactive: false,
            requirements: crate::Requirements::default(),
            output_schema: None,
        }
    }

    #[test]
    fn names_models_refuse_are_refused_with_what_is_wrong() {
        let object = serde_json::json!({"type": "object"});
        let long = "a".repeat(77);
        for (name, why) in [
            ("Search Notes", "' ' is not allowed"),
            ("", "it is empty"),
            (long.as_str(), "it is 77 characters long"),
            ("café", "'é' is not allowed"),
        ] {
            let err = check_tool(&meta(name, object.clone())).expect_err(name);
            assert!(
                err.starts_with(&format!("tool '{name}': it has an invalid name: {why}")),
                "{err}"
            );
        }
        assert!(check_tool(&meta(&"a".repeat(64), object)).is_ok());
    }

    #[test]
    fn an_invalid_keyword_is_reported_at_its_json_pointer() {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {"query": {"type": "strnig"}}
        });
        let err = check_tool(&meta("search", schema)).expect_err("refused");
        assert!(
            err.starts_with(
                "tool 'search': its argument schema is not a valid JSON Schema: at \
                 /properties/query/type: "
            ),
            "{err}"
        );
        assert!(err.contains("strnig"), "{err}");
    }

    #[test]
    fn a_schema_whose_top_level_is_not_an_object_is_refused() {
        for schema in [
            serde_json::json!({"type": "array"}),
            serde_json::json!(true),
        ] {
            let err = check_tool(&meta("listy", schema.clone())).expect_err("refused");
            assert!(err.contains("always a JSON object"), "{err}");
            let err = check_schema(SchemaRole::Output, &schema).expect_err("refused");
            assert!(
                err.starts_with("its output schema's top level is ")
                    && err.contains("MCP requires an object schema"),
                "{err}"
            );
        }
    }

    #[test]
    fn the_second_tool_of_a_name_is_refused_naming_both_positions() {
        let refused = duplicate_tools("p", [(0, "x"), (1, "x"), (2, "y"), (3, "x")]);
        assert_eq!(
            refused,
            vec![
                (
                    1,
                    "plugin 'p' exports two tools named 'x' (#1 and #2); rename one".to_owned()
                ),
                (
                    3,
                    "plugin 'p' exports two tools named 'x' (#1 and #4); rename one".to_owned()
                ),
            ]
        );
    }
}
