//! The host's view of a tool: its spec (what the model sees, plus risk and interactivity),
//! where it came from, and the async call. Plugin tools and tools compiled into the host
//! implement the same trait, so the registry and dispatcher treat them alike.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;
pub use toolhost_plugin_api::{Requirements, Risk, ToolError, ToolOutput};

use crate::context::CallContext;

/// What describes a tool: the model sees `name`, `description` and `schema`; the host
/// reads `risk` and `interactive`.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, written for the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub schema: Value,
    /// Declared risk level.
    pub risk: Risk,
    /// Whether a batch holding it runs one call at a time.
    pub interactive: bool,
    /// What it needs to be available (environment variables, programs on `PATH`).
    pub requirements: Requirements,
    /// JSON Schema of its structured result, if it declares one (MCP `outputSchema`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
}

/// Where a tool comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolOrigin {
    /// Compiled into the host (or into a test or benchmark).
    Native,
    /// Exported by a plugin file.
    Plugin {
        /// The plugin's name.
        plugin: Arc<str>,
        /// The file it was loaded from (the operator's path, not the private copy).
        file: Arc<PathBuf>,
        /// sha256 of the file as loaded: identifies the generation (remembered approvals
        /// are tied to it).
        sha256: Arc<str>,
        /// The plugin's own version (one pointer wide: origins travel in errors).
        version: Arc<String>,
    },
    /// Listed by an MCP server (`[[mcp_servers]]`).
    McpServer {
        /// The server and what the tool is (one pointer wide: origins travel in errors).
        source: Arc<McpSource>,
    },
}

/// Where an MCP server's tool comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpSource {
    /// The server's name in the config.
    pub server: String,
    /// The server's command line or URL.
    pub endpoint: String,
    /// sha256 of the server's name and version and the tool's definition: what a lasting
    /// approval is tied to, as a plugin's is to its file.
    pub identity: String,
}

impl ToolOrigin {
    /// The plugin file's sha256, or `""` for native tools.
    pub fn sha256(&self) -> &str {
        match self {
            ToolOrigin::Native => "",
            ToolOrigin::Plugin { sha256, .. } => sha256,
            ToolOrigin::McpServer { source, .. } => &source.identity,
        }
    }

    /// The plugin's version, or `""` for native tools and a server's.
    pub fn plugin_version(&self) -> &str {
        match self {
            ToolOrigin::Native | ToolOrigin::McpServer { .. } => "",
            ToolOrigin::Plugin { version, .. } => version,
        }
    }

    /// The plugin name, `"mcp"` for an MCP server's tool (its server: [`ToolOrigin::mcp_server`]), or `"native"`.
    pub fn plugin_name(&self) -> &str {
        match self {
            ToolOrigin::Native => "native",
            ToolOrigin::Plugin { plugin, .. } => plugin,
            ToolOrigin::McpServer { .. } => "mcp",
        }
    }

    /// The MCP server that lists it, if one does.
    pub fn mcp_server(&self) -> Option<&str> {
        match self {
            ToolOrigin::McpServer { source } => Some(&source.server),
            _ => None,
        }
    }
}

impl fmt::Display for ToolOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolOrigin::Native => f.write_str("built into the host"),
            ToolOrigin::Plugin { plugin, file, .. } => {
                write!(f, "plugin '{plugin}' ({})", file.display())
            }
            ToolOrigin::McpServer { source } => {
                write!(f, "MCP server '{}' ({})", source.server, source.endpoint)
            }
        }
    }
}

/// A call's arguments: the JSON value the host validates and, when the caller sent JSON
/// text (the model, the command line), that text. The text is what crosses to a plugin,
/// so arguments are parsed once on the way in and never written out again; a caller that
/// had only a value (an MCP client's, parsed by the protocol layer) has it written once.
#[derive(Debug, Clone)]
pub struct Arguments {
    value: Value,
    text: Option<String>,
}

impl Arguments {
    /// Arguments from the caller's JSON text (parsed here, once).
    pub fn parse(text: impl Into<String>) -> Result<Arguments, serde_json::Error> {
        let text = text.into();
        let value = serde_json::from_str(&text)?;
        Ok(Arguments {
            value,
            text: Some(text),
        })
    }

    /// The value (what the schema is checked against).
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// The value, for a tool that takes it.
    pub fn into_value(self) -> Value {
        self.value
    }

    /// The JSON text: the caller's, or the value written out.
    pub fn into_text(self) -> String {
        match self.text {
            Some(text) => text,
            // serde_json's writer, not `Display`: it skips the formatting machinery.
            None => serde_json::to_string(&self.value).unwrap_or_else(|_| "{}".to_owned()),
        }
    }
}

impl From<Value> for Arguments {
    fn from(value: Value) -> Arguments {
        Arguments { value, text: None }
    }
}

impl PartialEq for Arguments {
    /// Arguments are equal when their values are (however the text was spaced).
    fn eq(&self, other: &Arguments) -> bool {
        self.value == other.value
    }
}

impl Default for Arguments {
    fn default() -> Arguments {
        Arguments::from(Value::Object(serde_json::Map::new()))
    }
}

/// A tool the host can call.
#[async_trait]
pub trait DynTool: Send + Sync {
    /// The tool's spec; fixed for the tool's lifetime.
    fn spec(&self) -> &ToolSpec;
    /// Where the tool comes from.
    fn origin(&self) -> &ToolOrigin;
    /// Runs the tool with arguments the dispatcher already validated against the schema.
    /// Its outcome's structured value is checked against [`ToolSpec::output_schema`] by
    /// the dispatcher (a `String` converts into a text-only outcome with `.into()`).
    async fn call(&self, ctx: &CallContext, args: Arguments) -> Result<ToolOutput, ToolError>;

    /// Its schemas as the shared check compiled them when it was loaded, if it was (a
    /// plugin tool in this process): the registry takes them instead of compiling again.
    #[doc(hidden)]
    fn checked(&self) -> Option<&toolhost_plugin_api::check::CheckedTool> {
        None
    }

    /// Whether its code runs in a process of its own (a plugin worker), not the host's.
    fn isolated(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_keep_the_callers_text_and_write_a_value_once() {
        let text = r#"{ "b": 1.50, "a": [1, 2] }"#;
        let parsed = Arguments::parse(text).expect("valid JSON");
        assert_eq!(parsed.value()["b"], serde_json::json!(1.5));
        // The text crosses as the caller wrote it: spacing, key order and number form.
        assert_eq!(parsed.clone().into_text(), text);
        let from_value = Arguments::from(serde_json::json!({"b": 1.5, "a": [1, 2]}));
        assert_eq!(parsed, from_value);
        assert_eq!(from_value.into_text(), r#"{"a":[1,2],"b":1.5}"#);
        assert!(Arguments::parse("{not json").is_err());
    }
}
