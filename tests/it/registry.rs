//! The registry's operations, with tools from real plugins.

use toolhost::RegistryError;

use crate::support::{PluginDir, load};

#[test]
fn names_and_specs_are_sorted_and_only_and_without_filter() {
    let dir = PluginDir::with(&["toolhost_utils", "hello_tools"]);
    let (_, registry, problems) = load(&dir);
    assert!(problems.is_empty(), "{problems:?}");
    let names = registry.names();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);
    let spec_names: Vec<_> = registry.specs().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(spec_names, names);

    let only = registry.only(&["time_now", "greet"]).expect("both exist");
    assert_eq!(only.names(), ["greet", "time_now"]);

    match registry.only(&["greet", "no_such_tool", "also_missing"]) {
        Err(RegistryError::Missing { tool }) => assert_eq!(tool, "no_such_tool"),
        other => panic!("expected the first missing name, got {other:?}"),
    }

    let without = registry.without(&["greet", "not_there"]);
    assert!(without.get("greet").is_none());
    assert_eq!(without.len(), registry.len() - 1);
}

#[test]
fn duplicate_tool_name_keeps_the_first_in_load_order_and_names_both_files() {
    let dir = PluginDir::with(&["fixture_duplicate", "fixture_basic"]);
    let (report, registry, problems) = load(&dir);
    // Sorted file names: libfixture_basic.so loads before libfixture_duplicate.so.
    let order: Vec<_> = report.plugins.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(order, ["basic", "duplicate"]);
    assert_eq!(
        registry
            .get("echo")
            .expect("echo")
            .tool()
            .origin()
            .plugin_name(),
        "basic"
    );
    assert!(
        registry.get("dup_only").is_some(),
        "the duplicate plugin's other tool registers"
    );
    assert_eq!(problems.len(), 1);
    let text = problems[0].to_string();
    assert!(text.contains("'echo'"), "{text}");
    assert!(
        text.contains("libfixture_basic.so") && text.contains("libfixture_duplicate.so"),
        "{text}"
    );
}

/// A documented enum (`write_file`'s `mode`) is served as an `enum` with the values'
/// descriptions; a bad value is told the values it may take, not "not valid under any of
/// the schemas".
#[test]
fn a_bad_enum_value_is_told_the_allowed_values() {
    let dir = PluginDir::with(&["toolhost_utils"]);
    let (_, registry, _) = load(&dir);
    let write_file = registry.get("write_file").expect("write_file");
    let mode = &write_file.spec().schema["properties"]["mode"];
    assert_eq!(
        mode["enum"],
        serde_json::json!(["create", "overwrite", "append"]),
        "{mode:#}"
    );
    assert!(mode.get("oneOf").is_none(), "{mode:#}");
    let err = write_file
        .validate(&serde_json::json!({"path": "/tmp/x", "content": "y", "mode": "sideways"}))
        .expect_err("sideways is no mode");
    assert!(
        err.contains("\"sideways\" is not one of")
            && err.contains("\"create\"")
            && err.contains("\"overwrite\"")
            && err.contains("\"append\""),
        "{err}"
    );
    assert!(!err.contains("any of the schemas"), "{err}");
}

/// A `oneOf` of fixed values that cannot become one `enum` (values of different types)
/// still names the allowed values when a call misses them all.
#[test]
fn a_one_of_of_fixed_values_of_mixed_types_is_told_the_allowed_values() {
    let mut registry = toolhost::ToolRegistry::new();
    let tool = Fixed(toolhost::ToolSpec {
        name: "fixed".to_owned(),
        description: String::new(),
        schema: serde_json::json!({"type": "object", "properties": {"level": {"oneOf": [
            {"const": "auto", "type": "string", "description": "Pick one."},
            {"const": 3, "type": "integer", "description": "Three."}
        ]}}}),
        risk: toolhost::Risk::Read,
        interactive: false,
        requirements: Default::default(),
        output_schema: None,
    });
    registry
        .register(std::sync::Arc::new(tool))
        .expect("registers");
    let err = registry
        .get("fixed")
        .expect("tool")
        .validate(&serde_json::json!({"level": "max"}))
        .expect_err("max is not allowed");
    assert!(
        err.contains("\"max\" is not one of the allowed values: \"auto\", 3"),
        "{err}"
    );
}

/// A tool of the host's own with the spec a test gives it.
struct Fixed(toolhost::ToolSpec);

#[async_trait::async_trait]
impl toolhost::DynTool for Fixed {
    fn spec(&self) -> &toolhost::ToolSpec {
        &self.0
    }
    fn origin(&self) -> &toolhost::ToolOrigin {
        &toolhost::ToolOrigin::Native
    }
    async fn call(
        &self,
        _ctx: &toolhost::CallContext,
        _args: toolhost::Arguments,
    ) -> Result<toolhost::ToolOutput, toolhost::ToolError> {
        Ok(toolhost::ToolOutput::default())
    }
}

/// Arguments are always a JSON object: a tool whose schema's top level is anything else
/// could never be called, so it is refused with why.
#[test]
fn a_tool_whose_schema_is_not_an_object_schema_is_refused_with_why() {
    for (name, schema) in [
        ("listy", serde_json::json!({"type": "array"})),
        ("anything", serde_json::json!(true)),
    ] {
        let mut registry = toolhost::ToolRegistry::new();
        let tool = Fixed(toolhost::ToolSpec {
            name: name.to_owned(),
            description: "x".to_owned(),
            schema,
            risk: toolhost::Risk::Read,
            interactive: false,
            requirements: toolhost::Requirements::default(),
            output_schema: None,
        });
        let err = registry
            .register(std::sync::Arc::new(tool))
            .expect_err("refused");
        let text = err.to_string();
        assert!(
            text.contains(name) && text.contains("always a JSON object"),
            "{text}"
        );
    }
}
