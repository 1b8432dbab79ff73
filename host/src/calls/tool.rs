//! The host's view of a tool: its spec (what the model sees, plus risk and interactivity),
//! where it came from, and the async call. Plugin tools and tools compiled into the host
//! implement the same trait, so the registry and dispatcher treat them alike.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;
pub use toolhost_plugin_api::{Requirements, Risk, ToolError};

use crate::calls::context::CallContext;

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
    },
}

impl ToolOrigin {
    /// The plugin file's sha256, or `""` for native tools.
    pub fn sha256(&self) -> &str {
        match self {
            ToolOrigin::Native => "",
            ToolOrigin::Plugin { sha256, .. } => sha256,
        }
    }

    /// The plugin name, or `"native"`.
    pub fn plugin_name(&self) -> &str {
        match self {
            ToolOrigin::Native => "native",
            ToolOrigin::Plugin { plugin, .. } => plugin,
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
        }
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
    async fn call(&self, ctx: &CallContext, args: Value) -> Result<String, ToolError>;

    /// Whether its code runs in a process of its own (a plugin worker), not the host's.
    fn isolated(&self) -> bool {
        false
    }
}
