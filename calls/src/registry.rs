//! The tool registry: tools by name, each with its compiled argument validator. Cheap to
//! clone (entries are shared), so profiles and child agents take filtered copies.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::tool::{DynTool, ToolOrigin, ToolOutput, ToolSpec};

/// A tool the registry refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// Two tools with one name, both deprecated or neither: the first (in load order)
    /// keeps it. (When exactly one is deprecated, the other keeps the name and the
    /// deprecated one is left out as [`Superseded`], which is not an error.)
    #[error(
        "duplicate tool '{tool}': {rejected} exports a tool with the same name as {kept}; \
         the first keeps it and the other is not registered (rename one, or remove one plugin)"
    )]
    Duplicate {
        /// The name.
        tool: String,
        /// The tool that keeps the name.
        kept: Box<ToolOrigin>,
        /// The tool that was refused.
        rejected: Box<ToolOrigin>,
    },
    /// The tool's metadata fails the check every host (and the plugin test harness)
    /// runs: a name models do not accept, or a schema that is not an object schema or
    /// does not compile.
    #[error("{origin}: {reason}; the tool is not registered")]
    Invalid {
        /// The name.
        tool: String,
        /// Where it came from.
        origin: ToolOrigin,
        /// What is wrong (`tool 'x': ...`), as `toolhost_plugin_api::check::check_tool`
        /// words it.
        reason: String,
    },
    /// `only` was asked for a tool the registry does not have.
    #[error(
        "no tool named '{tool}' is registered; `toolhost list` shows the tools the plugins provide"
    )]
    Missing {
        /// The name.
        tool: String,
    },
}

/// A tool left out, without error, because another tool of its name supersedes it: it
/// is deprecated (its argument schema's root says `"deprecated": true`, as JSON Schema
/// annotates) and the other is not. The one that is not deprecated keeps the name
/// whatever the load order (e.g. the workspace plugin's `write_file` over the one `utils`
/// keeps for a release). The operator has nothing to fix, so hosts log it at info level
/// and never count it among the registry's errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superseded {
    /// The name.
    pub tool: String,
    /// The tool that keeps the name (not deprecated).
    pub kept: ToolOrigin,
    /// The deprecated tool that was left out.
    pub left_out: ToolOrigin,
}

impl fmt::Display for Superseded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tool '{}' of {} is deprecated and left out: {} provides a tool of the same \
             name, which keeps it",
            self.tool, self.left_out, self.kept
        )
    }
}

/// Whether a tool declares itself deprecated: its argument schema's root has
/// `"deprecated": true`.
fn is_deprecated(tool: &dyn DynTool) -> bool {
    tool.spec().schema.get("deprecated") == Some(&Value::Bool(true))
}

/// Which of two tools of one name keeps it, by [`same_name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keeps {
    /// The tool registered (or installed) already.
    Existing,
    /// The tool that comes to it.
    Newcomer,
}

/// The registry's one rule for two tools of one name, which the loader, a reload and
/// `toolhost install` all ask: when exactly one of them is deprecated, the other keeps the
/// name whatever the order they come in (`Ok`, with the [`Superseded`] note to log);
/// otherwise it is a real clash, a [`RegistryError::Duplicate`] in which the existing
/// tool keeps the name.
pub fn same_name(
    existing: &dyn DynTool,
    newcomer: &dyn DynTool,
) -> Result<(Keeps, Superseded), RegistryError> {
    let tool = newcomer.spec().name.clone();
    match (is_deprecated(existing), is_deprecated(newcomer)) {
        (true, false) => Ok((
            Keeps::Newcomer,
            Superseded {
                tool,
                kept: newcomer.origin().clone(),
                left_out: existing.origin().clone(),
            },
        )),
        (false, true) => Ok((
            Keeps::Existing,
            Superseded {
                tool,
                kept: existing.origin().clone(),
                left_out: newcomer.origin().clone(),
            },
        )),
        _ => Err(RegistryError::Duplicate {
            tool,
            kept: Box::new(existing.origin().clone()),
            rejected: Box::new(newcomer.origin().clone()),
        }),
    }
}

/// Tools by name, sorted. `specs()` is what the model sees.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, RegisteredTool>,
}

/// A tool in a registry, with the validator compiled from its schema.
#[derive(Clone)]
pub struct RegisteredTool {
    tool: Arc<dyn DynTool>,
    validator: Arc<jsonschema::Validator>,
    /// The output schema's validator, when the tool declares one.
    output_validator: Option<Arc<jsonschema::Validator>>,
}

impl RegisteredTool {
    /// The tool.
    pub fn tool(&self) -> &Arc<dyn DynTool> {
        &self.tool
    }

    /// The tool's spec.
    pub fn spec(&self) -> &ToolSpec {
        self.tool.spec()
    }

    /// Checks a successful outcome against the tool's output schema, when it declares
    /// one (the structured value must be there and match), and gives a structured value
    /// with no text its JSON as the text; the harness does the same. `Err` completes
    /// "tool 'x' ...".
    pub fn finish_output(&self, output: &mut ToolOutput) -> Result<(), InvalidOutput> {
        toolhost_plugin_api::check::finish_output(self.output_validator.as_deref(), output).map_err(
            |problem| InvalidOutput {
                tool: self.spec().name.clone(),
                problem,
            },
        )
    }

    /// Checks `args` against the tool's schema. On failure, the problems in a form the
    /// model can act on (at most five, each with the JSON path it concerns).
    pub fn validate(&self, args: &Value) -> Result<(), InvalidArguments> {
        match toolhost_plugin_api::check::problems(&self.validator, args) {
            None => Ok(()),
            Some(text) => Err(InvalidArguments { text }),
        }
    }
}

/// Arguments a tool's schema refuses. Its text (also what it derefs to) lists the problems
/// in a form the model can act on: at most five, each with the JSON path it concerns,
/// separated by `; `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text}")]
pub struct InvalidArguments {
    text: String,
}

/// A successful outcome its tool's output schema refuses: "tool 'x' returned ...", naming
/// the tool and what does not match.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tool '{tool}' {problem}")]
pub struct InvalidOutput {
    /// The tool.
    tool: String,
    /// What is wrong, as the output check says it ("returned ...").
    problem: String,
}

impl std::ops::Deref for InvalidArguments {
    type Target = str;

    fn deref(&self) -> &str {
        &self.text
    }
}

impl fmt::Debug for RegisteredTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisteredTool")
            .field("name", &self.spec().name)
            .field("origin", self.tool.origin())
            .finish()
    }
}

/// Tool names that every model API accepts: 1-64 of `[A-Za-z0-9_-]`.
pub fn is_valid_tool_name(name: &str) -> bool {
    toolhost_plugin_api::check::check_name(name).is_ok()
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        ToolRegistry::default()
    }

    /// Registers `tools` in order. A tool that cannot be registered (duplicate name, bad
    /// name or schema) is left out with an error; the rest are registered. A deprecated
    /// tool superseded by one of its name that is not (see [`Superseded`]) is left out
    /// without error, logged at info level.
    pub fn from_tools(
        tools: impl IntoIterator<Item = Arc<dyn DynTool>>,
    ) -> (ToolRegistry, Vec<RegistryError>) {
        let mut registry = ToolRegistry::new();
        let mut errors = Vec::new();
        for tool in tools {
            match registry.register(tool) {
                Ok(None) => {}
                Ok(Some(left_out)) => tracing::info!("{left_out}"),
                Err(e) => errors.push(e),
            }
        }
        (registry, errors)
    }

    /// Adds a tool. Fails, leaving the registry unchanged, when the name is taken (the
    /// first tool keeps it), the name is not one models accept, or the schema does not
    /// compile. When the name is taken and exactly one of the two tools is deprecated
    /// (see [`Superseded`]), the other one holds the name afterwards, whichever came
    /// first, and `Ok(Some(_))` says which tool was left out; `Ok(None)`: added.
    pub fn register(
        &mut self,
        tool: Arc<dyn DynTool>,
    ) -> Result<Option<Superseded>, RegistryError> {
        let spec = tool.spec();
        let mut superseded = None;
        if let Some(existing) = self.tools.get(&spec.name) {
            match same_name(existing.tool.as_ref(), tool.as_ref())? {
                (Keeps::Existing, note) => return Ok(Some(note)),
                (Keeps::Newcomer, note) => superseded = Some(note),
            }
        }
        // The check plugins' tests run too (`testing::check_plugin`): one verdict. A plugin
        // tool passed it at load and brings its compiled schemas.
        let checked = match tool.checked() {
            Some(checked) => checked.clone(),
            None => toolhost_plugin_api::check::check_parts(
                &spec.name,
                &spec.schema,
                spec.output_schema.as_ref(),
            )
            .map_err(|reason| RegistryError::Invalid {
                tool: spec.name.clone(),
                origin: tool.origin().clone(),
                reason,
            })?,
        };
        let validator = checked.arguments;
        let output_validator = checked.output;
        let name = spec.name.clone();
        self.tools.insert(
            name,
            RegisteredTool {
                tool,
                validator,
                output_validator,
            },
        );
        Ok(superseded)
    }

    /// Adds every tool of `other` (with its compiled validator) whose name this registry
    /// does not hold yet. Of two tools with one name, the one that is not deprecated
    /// keeps it when exactly one is (the deprecated one is returned as [`Superseded`]);
    /// otherwise this registry's keeps it and the other is returned as a
    /// [`RegistryError::Duplicate`].
    pub fn add_all(&mut self, other: &ToolRegistry) -> (Vec<RegistryError>, Vec<Superseded>) {
        let mut refused = Vec::new();
        let mut superseded = Vec::new();
        for (name, entry) in &other.tools {
            let Some(existing) = self.tools.get(name) else {
                self.tools.insert(name.clone(), entry.clone());
                continue;
            };
            match same_name(existing.tool.as_ref(), entry.tool.as_ref()) {
                Ok((Keeps::Newcomer, note)) => {
                    superseded.push(note);
                    self.tools.insert(name.clone(), entry.clone());
                }
                Ok((Keeps::Existing, note)) => superseded.push(note),
                Err(duplicate) => refused.push(duplicate),
            }
        }
        (refused, superseded)
    }

    /// Looks a tool up by name.
    pub fn get(&self, name: &str) -> Option<&RegisteredTool> {
        self.tools.get(name)
    }

    /// The tool names, sorted (every registered tool, `deny` ones included).
    pub fn names(&self) -> Vec<&str> {
        self.tools.keys().map(String::as_str).collect()
    }

    /// The specs, sorted by name: what the model sees. Tools whose risk is `deny` are
    /// left out: they never run, so the model is not told about them.
    pub fn specs(&self) -> Vec<&ToolSpec> {
        self.tools
            .values()
            .map(RegisteredTool::spec)
            .filter(|s| s.risk != crate::tool::Risk::Deny)
            .collect()
    }

    /// A copy whose tools are `f(tool)`, each keeping its compiled validator. `f` must
    /// return a tool with the same name and schema (a wrapper that changes, say, the risk).
    pub fn map_tools(
        &self,
        mut f: impl FnMut(&Arc<dyn DynTool>) -> Arc<dyn DynTool>,
    ) -> ToolRegistry {
        let tools = self
            .tools
            .iter()
            .map(|(name, entry)| {
                let tool = f(&entry.tool);
                debug_assert_eq!(tool.spec().name, *name);
                debug_assert_eq!(tool.spec().schema, entry.tool.spec().schema);
                (
                    name.clone(),
                    RegisteredTool {
                        tool,
                        validator: Arc::clone(&entry.validator),
                        output_validator: entry.output_validator.clone(),
                    },
                )
            })
            .collect();
        ToolRegistry { tools }
    }

    /// Every registered tool, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &RegisteredTool> {
        self.tools.values()
    }

    /// Every tool as JSON for listings (`toolhost list --json`, the control socket's
    /// `list`): name, risk, interactive, plugin, file, mode (`in-process` or `process`),
    /// description, schema; a server's tool also `mcp_server` and `endpoint`.
    pub fn listing(&self) -> Vec<Value> {
        self.iter()
            .map(|t| {
                let spec = t.spec();
                let file = match t.tool().origin() {
                    crate::tool::ToolOrigin::Plugin { file, .. } => {
                        Value::from(file.display().to_string())
                    }
                    crate::tool::ToolOrigin::Native | crate::tool::ToolOrigin::McpServer { .. } => {
                        Value::Null
                    }
                };
                let mut entry = serde_json::json!({
                    "name": spec.name,
                    "risk": spec.risk.as_str(),
                    "interactive": spec.interactive,
                    "plugin": t.tool().origin().plugin_name(),
                    "file": file,
                    "mode": if t.tool().isolated() { "process" } else { "in-process" },
                    "description": spec.description,
                    "schema": spec.schema,
                });
                if let crate::tool::ToolOrigin::McpServer { source } = t.tool().origin() {
                    entry["mcp_server"] = Value::from(source.server.as_str());
                    entry["endpoint"] = Value::from(source.endpoint.as_str());
                }
                entry
            })
            .collect()
    }

    /// How many tools there are.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// A copy with just these tools. Fails with the first name that is missing.
    pub fn only<S: AsRef<str>>(&self, names: &[S]) -> Result<ToolRegistry, RegistryError> {
        let mut tools = BTreeMap::new();
        for name in names {
            let name = name.as_ref();
            let entry = self.tools.get(name).ok_or_else(|| RegistryError::Missing {
                tool: name.to_owned(),
            })?;
            tools.insert(name.to_owned(), entry.clone());
        }
        Ok(ToolRegistry { tools })
    }

    /// A copy without these tools (names it does not hold are ignored). Used for child
    /// agents, which must never reach more than their parent.
    pub fn without<S: AsRef<str>>(&self, names: &[S]) -> ToolRegistry {
        let mut tools = self.tools.clone();
        for name in names {
            tools.remove(name.as_ref());
        }
        ToolRegistry { tools }
    }
}

impl fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Arc;

    use serde_json::{Value, json};
    use toolhost_plugin_api::tidy_schema;

    use super::{RegistryError, Superseded, ToolRegistry};
    use crate::context::CallContext;
    use crate::tool::{
        Arguments, DynTool, Requirements, Risk, ToolError, ToolOrigin, ToolOutput, ToolSpec,
    };

    /// A tool named `name` from plugin `plugin`, deprecated or not.
    struct Fake {
        spec: ToolSpec,
        origin: ToolOrigin,
    }

    #[async_trait::async_trait]
    impl DynTool for Fake {
        fn spec(&self) -> &ToolSpec {
            &self.spec
        }
        fn origin(&self) -> &ToolOrigin {
            &self.origin
        }
        async fn call(&self, _: &CallContext, _: Arguments) -> Result<ToolOutput, ToolError> {
            Ok(String::new().into())
        }
    }

    fn origin(plugin: &str) -> ToolOrigin {
        ToolOrigin::Plugin {
            plugin: Arc::from(plugin),
            file: Arc::new(PathBuf::from(format!("/plugins/lib{plugin}.so"))),
            sha256: Arc::from("0"),
            version: Arc::new("1.0.0".to_owned()),
        }
    }

    fn fake(name: &str, plugin: &str, schema: Value) -> Arc<dyn DynTool> {
        Arc::new(Fake {
            spec: ToolSpec {
                name: name.to_owned(),
                description: format!("{name} from {plugin}"),
                schema,
                risk: Risk::Write,
                interactive: false,
                requirements: Requirements::default(),
                output_schema: None,
            },
            origin: origin(plugin),
        })
    }

    fn current(plugin: &str) -> Arc<dyn DynTool> {
        fake("write_file", plugin, json!({"type": "object"}))
    }

    fn deprecated(plugin: &str) -> Arc<dyn DynTool> {
        fake(
            "write_file",
            plugin,
            json!({"type": "object", "deprecated": true}),
        )
    }

    fn holder(registry: &ToolRegistry) -> String {
        registry
            .get("write_file")
            .expect("write_file is registered")
            .tool()
            .origin()
            .plugin_name()
            .to_owned()
    }

    fn superseded_utils() -> Superseded {
        Superseded {
            tool: "write_file".to_owned(),
            kept: origin("workspace"),
            left_out: origin("utils"),
        }
    }

    #[test]
    fn the_tool_that_is_not_deprecated_keeps_the_name_in_either_load_order() {
        let mut old_first = ToolRegistry::new();
        assert_eq!(
            old_first.register(deprecated("utils")).expect("added"),
            None
        );
        assert_eq!(
            old_first
                .register(current("workspace"))
                .expect("not an error"),
            Some(superseded_utils())
        );
        assert_eq!(holder(&old_first), "workspace");

        let mut new_first = ToolRegistry::new();
        assert_eq!(
            new_first.register(current("workspace")).expect("added"),
            None
        );
        assert_eq!(
            new_first
                .register(deprecated("utils"))
                .expect("not an error"),
            Some(superseded_utils())
        );
        assert_eq!(holder(&new_first), "workspace");
        assert_eq!(new_first.len(), 1);

        let said = superseded_utils().to_string();
        assert!(
            said.starts_with("tool 'write_file' of plugin 'utils' (/plugins/libutils.so) is deprecated and left out"),
            "{said}"
        );
    }

    #[test]
    fn add_all_lets_the_tool_that_is_not_deprecated_keep_the_name_too() {
        for (mine, theirs) in [
            (deprecated("utils"), current("workspace")),
            (current("workspace"), deprecated("utils")),
        ] {
            let mut registry = ToolRegistry::new();
            registry.register(mine).expect("added");
            let mut other = ToolRegistry::new();
            other.register(theirs).expect("added");
            other
                .register(fake("time_now", "utils", json!({"type": "object"})))
                .expect("added");
            let (refused, superseded) = registry.add_all(&other);
            assert!(refused.is_empty(), "{refused:?}");
            assert_eq!(superseded, [superseded_utils()]);
            assert_eq!(holder(&registry), "workspace");
            assert!(registry.get("time_now").is_some());
        }
    }

    #[test]
    fn two_tools_of_one_name_both_or_neither_deprecated_are_still_duplicates() {
        for make in [current, deprecated] {
            let mut registry = ToolRegistry::new();
            registry.register(make("first")).expect("added");
            let err = registry.register(make("second")).expect_err("duplicate");
            assert!(matches!(err, RegistryError::Duplicate { .. }), "{err}");
            assert_eq!(holder(&registry), "first");

            let mut other = ToolRegistry::new();
            other.register(make("third")).expect("added");
            let (refused, superseded) = registry.add_all(&other);
            assert!(superseded.is_empty());
            assert!(matches!(refused[..], [RegistryError::Duplicate { .. }]));
            assert_eq!(holder(&registry), "first");
        }
    }

    #[test]
    fn a_replacement_that_fails_the_check_leaves_the_deprecated_tool_in_place() {
        let mut registry = ToolRegistry::new();
        registry.register(deprecated("utils")).expect("added");
        let broken = fake("write_file", "workspace", json!({"type": "array"}));
        let err = registry.register(broken).expect_err("invalid schema");
        assert!(matches!(err, RegistryError::Invalid { .. }), "{err}");
        assert_eq!(holder(&registry), "utils");
    }

    /// `tidy_schema` rewrites what plugins send before the registry compiles it: the
    /// rewrite must accept and refuse exactly what the schema as written does, as this
    /// validator judges it.
    #[test]
    fn tidied_schemas_judge_arguments_as_written_ones_do() {
        let mut cases: Vec<(Value, Vec<Value>)> = vec![
            (
                json!({"type": "object", "properties": {
                    "n": {"$ref": "#/$defs/Small", "maximum": 5},
                    "o": {"$ref": "#/$defs/Small", "maximum": 20},
                    "m": {"$ref": "#/$defs/Small", "minimum": 1, "description": "Mine."}
                }, "$defs": {"Small": {"type": "integer", "maximum": 10, "description": "Theirs."}}}),
                vec![
                    json!({"n": 4}),
                    json!({"n": 7}),
                    json!({"n": 11}),
                    json!({"n": "x"}),
                    json!({"o": 15}),
                    json!({"m": 0}),
                    json!({"m": 10}),
                    json!({"m": 11}),
                ],
            ),
            (
                json!({"type": "object", "properties": {
                    "p": {"oneOf": [{"const": "a", "type": "string"}, {"const": 1, "type": "integer"}]},
                    "q": {"anyOf": [{"const": 1}, {"const": 1.0}, {"const": 2}]},
                    "r": {"oneOf": [{"const": 1}, {"const": 1.0}]},
                    "s": {"oneOf": [{"const": "a", "type": "integer"}, {"const": "b"}]},
                    "t": {"enum": ["a", "b", "c"], "oneOf": [{"const": "a"}, {"const": "b"}]}
                }}),
                vec![
                    json!({"p": "a"}),
                    json!({"p": 1}),
                    json!({"p": 1.0}),
                    json!({"p": "b"}),
                    json!({"q": 1}),
                    json!({"q": 2.0}),
                    json!({"q": 3}),
                    json!({"r": 1}),
                    json!({"s": "a"}),
                    json!({"s": "b"}),
                    json!({"t": "c"}),
                    json!({"t": "a"}),
                ],
            ),
            (
                json!({"type": "object", "properties": {"tree": {"$ref": "#/$defs/Tree"}},
                "required": ["tree"],
                "$defs": {
                    "Tree": {"type": "object", "properties": {
                        "unit": {"$ref": "#/$defs/Unit"},
                        "kids": {"type": "array", "items": {"$ref": "#/$defs/Tree"}}
                    }},
                    "Unit": {"oneOf": [{"const": "c"}, {"const": "f"}]}
                }}),
                vec![
                    json!({}),
                    json!({"tree": {"unit": "c", "kids": [{"unit": "f"}]}}),
                    json!({"tree": {"kids": [{"kids": [{"unit": "k"}]}]}}),
                ],
            ),
            (
                json!({"type": "object", "properties": {
                    "a": {"$ref": "#/$defs/A"},
                    "w": {"$ref": "#/$defs/with%20space"}
                }, "$defs": {
                    "A": {"type": "object", "properties": {"b": {"$ref": "#/$defs/B"}}},
                    "B": {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}, "n": {"type": "integer"}}},
                    "with space": {"type": "string", "minLength": 2}
                }}),
                vec![
                    json!({"a": {"b": {"a": {"b": {"n": 1}}}}}),
                    json!({"a": {"b": {"a": {"b": {"n": "x"}}}}}),
                    json!({"w": "ab"}),
                    json!({"w": "a"}),
                ],
            ),
        ];
        // Keywords on the two sides of a reference are evaluated apart.
        let apart = |def: Value, site: Value| {
            let mut site = site;
            site["$ref"] = json!("#/$defs/A");
            json!({"type": "object", "properties": {"p": site}, "$defs": {"A": def}})
        };
        cases.extend([
            (
                apart(
                    json!({"additionalProperties": false}),
                    json!({"properties": {"a": {}}}),
                ),
                vec![json!({"p": {"a": 1}}), json!({"p": {}})],
            ),
            (
                apart(
                    json!({"properties": {"a": {}}}),
                    json!({"additionalProperties": false}),
                ),
                vec![json!({"p": {"a": 1}}), json!({"p": {}})],
            ),
            (
                apart(
                    json!({"unevaluatedProperties": false}),
                    json!({"patternProperties": {"^x": {}}}),
                ),
                vec![json!({"p": {"x1": 1}}), json!({"p": {}})],
            ),
            (
                apart(json!({"prefixItems": [{}]}), json!({"items": false})),
                vec![json!({"p": [1]}), json!({"p": []})],
            ),
            (
                apart(
                    json!({"then": {"required": ["b"]}}),
                    json!({"if": {"required": ["a"]}}),
                ),
                vec![json!({"p": {"a": 1}}), json!({"p": {"a": 1, "b": 2}})],
            ),
            (
                apart(json!({"contains": {"const": 1}}), json!({"minContains": 0})),
                vec![json!({"p": []}), json!({"p": [1]}), json!({"p": [2]})],
            ),
            (
                json!({"type": "object", "properties": {"p": {"anyOf": [
                    {"const": 9007199254740992_u64}, {"const": 9007199254740993_u64}
                ]}}}),
                vec![
                    json!({"p": 9007199254740993_u64}),
                    json!({"p": 9007199254740992_u64}),
                    json!({"p": 1}),
                ],
            ),
        ]);
        for (written, instances) in cases {
            let tidied = tidy_schema(written.clone());
            assert_ne!(tidied, written, "the case exercises the rewrite");
            let before = jsonschema::validator_for(&written).expect("the written schema compiles");
            let after = jsonschema::validator_for(&tidied)
                .unwrap_or_else(|e| panic!("the tidied schema compiles: {e}\n{tidied:#}"));
            for instance in instances {
                assert_eq!(
                    before.is_valid(&instance),
                    after.is_valid(&instance),
                    "{instance} judged differently by\n{written:#}\nand\n{tidied:#}"
                );
            }
        }
    }
}
