//! Plugin tools on the host side: [`LoadedPlugin`] and the adapter that makes a plugin's
//! [`FfiTool`] a host [`DynTool`] (the call crosses with a context whose services are in
//! `host_services.rs`); `ToolRegistry::from_plugins`.
//!
//! One of the modules with `unsafe` (with `loader` and `host_services`): the plugin's
//! vtable functions are called with the object they were exported with, and the context
//! handed to the plugin points at a `CallState` that outlives the call's future.

use std::path::PathBuf;
use std::sync::Arc;

use abi_stable::std_types::{RResult, RStr, RString};
use async_trait::async_trait;
use serde_json::Value;
use toolhost_plugin_api::ToolError;
use toolhost_plugin_api::ffi::{FfiTool, FfiToolError};

use super::host_services::CallState;
use crate::calls::context::CallContext;
use crate::calls::registry::{RegistryError, ToolRegistry};
use crate::calls::tool::{DynTool, Requirements, ToolOrigin, ToolSpec};

/// A plugin loaded from one file.
#[derive(Clone)]
pub struct LoadedPlugin {
    /// The plugin's name.
    pub name: String,
    /// The plugin's own version.
    pub version: String,
    /// The plugin-api version it was built against.
    pub api_version: String,
    /// The operator's path of the file.
    pub file: PathBuf,
    /// sha256 of the bytes that were loaded (hex).
    pub sha256: String,
    /// Their size in bytes.
    pub size: u64,
    /// The tools it exports, in the order it exports them.
    pub tools: Vec<Arc<dyn DynTool>>,
    /// Tools left out because reading their metadata failed (a panic in `name`,
    /// `description`, ...), one message each; the plugin's other tools still load.
    pub skipped_tools: Vec<String>,
}

impl std::fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedPlugin")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("file", &self.file)
            .field(
                "tools",
                &self
                    .tools
                    .iter()
                    .map(|t| &t.spec().name)
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// A tool exported by a plugin.
pub(crate) struct PluginTool {
    ffi: FfiTool,
    spec: ToolSpec,
    origin: ToolOrigin,
}

impl PluginTool {
    /// Reads the tool's metadata through its vtable. A panic in the plugin's metadata
    /// methods comes back as an error and the tool is not used.
    pub(crate) fn new(
        ffi: FfiTool,
        origin: ToolOrigin,
        index: usize,
    ) -> Result<PluginTool, String> {
        let (vt, this) = (ffi.vtable, ffi.this);
        match Self::read_spec(&ffi, index) {
            Ok(spec) => Ok(PluginTool { ffi, spec, origin }),
            Err(e) => {
                // SAFETY: the tool is not used again; the plugin's drop swallows panics.
                unsafe { (vt.drop())(this) };
                Err(e)
            }
        }
    }

    fn read_spec(ffi: &FfiTool, index: usize) -> Result<ToolSpec, String> {
        let (vt, this) = (ffi.vtable, ffi.this);
        let panicked = |what: &str, m: RString| format!("reading its {what} panicked: {m}");
        // SAFETY (every vtable call below): `this` is the object exported with `vt`.
        let name = unsafe { (vt.name())(this) }
            .into_result()
            .map_err(|m| format!("tool #{index}: {}", panicked("name", m)))?
            .into_string();
        let in_tool = |e: String| format!("tool '{name}': {e}");
        let description = unsafe { (vt.description())(this) }
            .into_result()
            .map_err(|m| in_tool(panicked("description", m)))?
            .into_string();
        let schema_text = unsafe { (vt.schema())(this) }
            .into_result()
            .map_err(|m| in_tool(panicked("schema", m)))?;
        let schema: Value = serde_json::from_str(&schema_text)
            .map_err(|e| in_tool(format!("its schema is not valid JSON: {e}")))?;
        let risk = unsafe { (vt.risk())(this) }
            .into_result()
            .map_err(|m| in_tool(panicked("risk", m)))?
            .risk();
        let interactive = unsafe { (vt.interactive())(this) }
            .into_result()
            .map_err(|m| in_tool(panicked("interactive flag", m)))?;
        // Optional: plugins built before requirements existed have none.
        let requirements = match vt.requirements() {
            None => Requirements::default(),
            Some(get) => {
                let text = unsafe { get(this) }
                    .into_result()
                    .map_err(|m| in_tool(panicked("requirements", m)))?;
                serde_json::from_str(&text)
                    .map_err(|e| in_tool(format!("its requirements are not valid JSON: {e}")))?
            }
        };
        Ok(ToolSpec {
            name,
            description,
            schema,
            risk,
            interactive,
            requirements,
        })
    }
}

impl Drop for PluginTool {
    fn drop(&mut self) {
        // SAFETY: dropped once, with the object it was exported with. The library stays
        // mapped for the life of the process, so the code is still there.
        unsafe { (self.ffi.vtable.drop())(self.ffi.this) }
    }
}

#[async_trait]
impl DynTool for PluginTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn origin(&self) -> &ToolOrigin {
        &self.origin
    }

    async fn call(&self, ctx: &CallContext, args: Value) -> Result<String, ToolError> {
        // serde_json's writer, not `Display`: it skips the formatting machinery.
        let args = serde_json::to_string(&args)
            .map_err(|e| ToolError::InvalidArgs(format!("could not encode the arguments: {e}")))?;
        let state = CallState {
            ctx,
            tool: &self.spec.name,
            plugin: self.origin.plugin_name(),
            runtime: tokio::runtime::Handle::try_current().ok(),
        };
        let ffi_ctx = state.ffi_context();
        // SAFETY: `this` belongs to this vtable. `ffi_ctx` (which borrows `state`) and `args`
        // outlive the plugin's future, which is awaited or dropped within this function.
        let future =
            unsafe { (self.ffi.vtable.call())(self.ffi.this, &ffi_ctx, RStr::from_str(&args)) };
        match future.await {
            RResult::ROk(output) => Ok(output.into_string()),
            RResult::RErr(FfiToolError { kind, message }) => Err(match kind {
                FfiToolError::INVALID_ARGS => ToolError::InvalidArgs(message.into_string()),
                FfiToolError::PANICKED => {
                    ToolError::Failed(format!("tool '{}' panicked: {message}", self.spec.name))
                }
                _ => ToolError::Failed(message.into_string()),
            }),
        }
    }
}

impl ToolRegistry {
    /// Registers the tools of `plugins` in their load order. A tool that cannot be
    /// registered (duplicate name, bad name or schema) is left out with an error; the
    /// rest are registered.
    pub fn from_plugins(plugins: &[LoadedPlugin]) -> (ToolRegistry, Vec<RegistryError>) {
        let mut registry = ToolRegistry::new();
        let mut errors = Vec::new();
        for tool in plugins.iter().flat_map(|p| &p.tools) {
            if let Err(e) = registry.register(Arc::clone(tool)) {
                errors.push(e);
            }
        }
        (registry, errors)
    }
}
