//! Plugin tools on the host side: [`LoadedPlugin`] and the adapter that makes a plugin's
//! [`FfiTool`] a host [`DynTool`] (the call crosses with a context whose services are in
//! `host_services.rs`); `ToolRegistry::from_plugins`.
//!
//! One of the modules with `unsafe` (with `loader` and `host_services`): the plugin's
//! vtable functions are called with the object they were exported with, and the context
//! handed to the plugin points at a `CallState` that outlives the call's future.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use abi_stable::std_types::{RStr, RString};
use async_ffi::BorrowingFfiFuture;
use async_trait::async_trait;
use toolhost_plugin_api::check::CheckedTool;
use toolhost_plugin_api::ffi::{FfiCallContext, FfiCallResult, FfiOutcomeResult, FfiTool};
use toolhost_plugin_api::host::answer_from_ffi;
use toolhost_plugin_api::{ToolError, ToolOutput};

use super::call_pool;
use super::host_services::CallState;
use crate::plugins::isolation::IsolationMode;
use crate::plugins::isolation::supervisor::WorkerPlugin;
use toolhost_calls::context::CallContext;
use toolhost_calls::registry::{RegistryError, ToolRegistry};
use toolhost_calls::tool::{Arguments, DynTool, ToolOrigin, ToolSpec};

/// A plugin loaded from one file.
#[derive(Clone)]
pub struct LoadedPlugin {
    /// The plugin's name.
    pub name: String,
    /// The plugin's own version.
    pub version: String,
    /// The release of toolhost-plugin-api it was built with (e.g. `0.1.4`).
    pub api_version: String,
    /// The plugin-api ABI version it was built against, the one loaders check (e.g.
    /// `0.1.3`; see `toolhost_plugin_api::ABI_VERSION`).
    pub abi_version: String,
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
    /// The JSON Schema of its settings, when it declares one (`export_plugin! { settings:
    /// T, .. }`); the config's `[plugins.NAME.settings]` were checked against it at load.
    pub settings_schema: Option<serde_json::Value>,
    /// What the load found to warn about without refusing the plugin: settings keys it
    /// does not read. Logged at load and shown by `status` and `check`.
    pub warnings: Vec<String>,
    /// Where its code runs.
    pub mode: IsolationMode,
    /// Its workers, in process mode.
    pub(crate) worker: Option<Arc<WorkerPlugin>>,
}

impl std::fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedPlugin")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("file", &self.file)
            .field("mode", &self.mode)
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

/// A tool left out of its plugin because its metadata could not be read (a panic in its
/// `name`, `description`, ... or values past the limits). The message names the tool
/// (by name, or by index when its name is what failed) and what was wrong; the plugin's
/// other tools still load.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct UnreadableTool(String);

/// A tool exported by a plugin.
pub(crate) struct PluginTool {
    object: Arc<ToolObject>,
    spec: ToolSpec,
    /// The spec's name and the plugin's, shared with every call's state.
    name: Arc<str>,
    plugin: Arc<str>,
    origin: ToolOrigin,
    /// The plugin's settings, answered to its `plugin.settings` requests; `None` in a
    /// worker, which asks the host.
    settings: Option<Arc<toolhost_plugin_api::SettingsAnswer>>,
    /// Its schemas as the shared check compiled them at load; the registry takes them.
    checked: CheckedTool,
}

/// The plugin's tool object, shared by the tool and its calls in flight: a call still
/// running on a pool thread after a reload dropped its tool keeps the object alive.
struct ToolObject(FfiTool);

impl Drop for ToolObject {
    fn drop(&mut self) {
        // SAFETY: dropped once (the last `Arc`), with the object it was exported with.
        // The library stays mapped for the life of the process, so the code is still there.
        unsafe { (self.0.vtable.drop())(self.0.this) }
    }
}

impl PluginTool {
    /// Reads the tool's metadata through its vtable. A panic in the plugin's metadata
    /// methods comes back as an error and the tool is not used.
    pub(crate) fn new(
        ffi: FfiTool,
        origin: ToolOrigin,
        index: usize,
        settings: Option<Arc<toolhost_plugin_api::SettingsAnswer>>,
    ) -> Result<PluginTool, UnreadableTool> {
        let (vt, this) = (ffi.vtable, ffi.this);
        match Self::read_spec(&ffi, index) {
            Ok((spec, checked)) => Ok(PluginTool {
                checked,
                object: Arc::new(ToolObject(ffi)),
                name: Arc::from(spec.name.as_str()),
                plugin: Arc::from(origin.plugin_name()),
                spec,
                origin,
                settings,
            }),
            Err(e) => {
                // SAFETY: the tool is not used again; the plugin's drop swallows panics.
                unsafe { (vt.drop())(this) };
                Err(e)
            }
        }
    }

    fn read_spec(ffi: &FfiTool, index: usize) -> Result<(ToolSpec, CheckedTool), UnreadableTool> {
        // SAFETY: `ffi` came from the plugin's `tools` function and is not dropped yet.
        let meta = unsafe { toolhost_plugin_api::host::read_tool_metadata(ffi, index) }
            .map_err(UnreadableTool)?;
        // Here, so a tool a host refuses is left out at load (in a worker too) and `check`
        // says why; the registry takes the compiled schemas instead of checking again.
        let checked = toolhost_plugin_api::check::check_tool(&meta).map_err(UnreadableTool)?;
        let spec = ToolSpec {
            name: meta.name,
            description: meta.description,
            schema: meta.schema,
            risk: meta.risk,
            interactive: meta.interactive,
            requirements: meta.requirements,
            output_schema: meta.output_schema,
        };
        Ok((spec, checked))
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

    fn checked(&self) -> Option<&CheckedTool> {
        Some(&self.checked)
    }

    async fn call(&self, ctx: &CallContext, args: Arguments) -> Result<ToolOutput, ToolError> {
        // The caller's text crosses as it came (written out only if there was none).
        let args = args.into_text();
        let runtime = tokio::runtime::Handle::try_current().ok();
        let call = self.prepare(ctx, args, runtime);
        let answered = call_pool::run(Arc::clone(&self.name), Arc::clone(&self.plugin), call)
            .await
            .map_err(|e| ToolError::Failed(e.to_string()))?;
        // What the call held (its context, arguments, the tool) is dropped here, by the
        // thread that made it, not by the plugin thread: its reference counts stay on
        // this thread's cache.
        self.outcome(answered.answer)
    }
}

impl PluginTool {
    /// The call, ready for a pool thread: the plugin's entry point runs at its first poll.
    pub(crate) fn prepare(
        &self,
        ctx: &CallContext,
        args: String,
        runtime: Option<tokio::runtime::Handle>,
    ) -> call_pool::PoolFuture<Answered> {
        let state = CallState {
            ctx: ctx.clone(),
            tool: Arc::clone(&self.name),
            plugin: Arc::clone(&self.plugin),
            settings: self.settings.clone(),
            runtime,
        };
        Box::pin(PluginCall::new(Arc::clone(&self.object), state, args))
    }

    /// What the plugin's answer means for the host. A plugin built before ABI 0.1.4
    /// answers with text (a content envelope in it becomes blocks); a newer one with its
    /// whole outcome.
    pub(crate) fn outcome(&self, answer: PluginAnswer) -> Result<ToolOutput, ToolError> {
        let answer = match answer {
            PluginAnswer::Text(r) => r.into_result().map(|text| (text, RString::new())),
            PluginAnswer::Outcome(r) => r.into_result().map(|o| (o.text, o.extra)),
        };
        answer_from_ffi(&self.spec.name, answer)
    }

    /// The tool's and its plugin's names.
    pub(crate) fn names(&self) -> (Arc<str>, Arc<str>) {
        (Arc::clone(&self.name), Arc::clone(&self.plugin))
    }
}

/// One plugin call with everything its future borrows, owned, so it can be polled on a
/// pool thread. The plugin's `call` entry point runs at the first poll, on that thread
/// too: plugin code never runs on the caller's thread, not even the code that makes the
/// future. Fields drop in declaration order: the plugin's future first, then what it
/// borrowed. Once the plugin answered, its future is dropped on the plugin thread and what
/// it borrowed goes back to the caller with the answer ([`Answered`]).
struct PluginCall {
    future: Option<PluginFuture>,
    held: Option<Held>,
}

/// What a plugin's future borrows: the context, the state behind it, the arguments and
/// the tool object. Moving it moves only the boxes and the string's pointer, never what
/// the plugin borrowed.
struct Held {
    ffi_ctx: Box<FfiCallContext<'static>>,
    _state: Box<CallState>,
    args: String,
    object: Arc<ToolObject>,
}

/// A plugin's answer, with what its call held, for the caller to drop.
pub(crate) struct Answered {
    /// The answer.
    pub(crate) answer: PluginAnswer,
    _held: Option<Held>,
}

/// The plugin's future: its `call_outcome` (ABI 0.1.4 and later) or, for a plugin built
/// before it, its `call`.
enum PluginFuture {
    Text(BorrowingFfiFuture<'static, FfiCallResult>),
    Outcome(BorrowingFfiFuture<'static, FfiOutcomeResult>),
}

/// What a plugin call answered, through either entry point.
pub(crate) enum PluginAnswer {
    /// From `call` (a plugin built before ABI 0.1.4).
    Text(FfiCallResult),
    /// From `call_outcome`.
    Outcome(FfiOutcomeResult),
}

impl PluginCall {
    fn new(object: Arc<ToolObject>, state: CallState, args: String) -> PluginCall {
        let state = Box::new(state);
        // SAFETY: the context points into `state`'s box, which `PluginCall` owns and
        // drops only after the future (field order); the box's contents never move.
        let state_ref: &'static CallState = unsafe { &*std::ptr::from_ref(&*state) };
        PluginCall {
            future: None,
            held: Some(Held {
                ffi_ctx: Box::new(state_ref.ffi_context()),
                _state: state,
                args,
                object,
            }),
        }
    }
}

impl Future for PluginCall {
    type Output = Answered;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Answered> {
        let this = &mut *self;
        let future = match &mut this.future {
            Some(future) => future,
            None => {
                let Some(held) = &this.held else {
                    // Polled after it answered: nothing to run (a pool thread never does).
                    return Poll::Pending;
                };
                // SAFETY: the context's box and the arguments' heap buffer (a `String`
                // never changed after `new`) live in `this.held`, which is given up only
                // after the future is dropped (below) or dropped after it (field order).
                let ctx: &'static FfiCallContext<'static> =
                    unsafe { &*std::ptr::from_ref(&*held.ffi_ctx) };
                let args: &'static str = unsafe { &*std::ptr::from_ref(held.args.as_str()) };
                let (vtable, object) = (held.object.0.vtable, held.object.0.this);
                // SAFETY (both): `object` belongs to this vtable and lives as long as
                // `this.object`, which outlives the future.
                let made = match vtable.call_outcome() {
                    Some(call) => {
                        PluginFuture::Outcome(unsafe { call(object, ctx, RStr::from_str(args)) })
                    }
                    None => PluginFuture::Text(unsafe {
                        (vtable.call())(object, ctx, RStr::from_str(args))
                    }),
                };
                this.future.insert(made)
            }
        };
        let answer = match future {
            PluginFuture::Text(f) => Pin::new(f).poll(cx).map(PluginAnswer::Text),
            PluginFuture::Outcome(f) => Pin::new(f).poll(cx).map(PluginAnswer::Outcome),
        };
        answer.map(|answer| {
            // The plugin's future is dropped here, on this thread, before what it
            // borrowed leaves with the answer.
            this.future = None;
            Answered {
                answer,
                _held: this.held.take(),
            }
        })
    }
}

impl LoadedPlugin {
    /// A registry of the tools of `plugins`, in their load order (see
    /// [`ToolRegistry::from_tools`]: a tool that cannot be registered is left out with an
    /// error, the rest are registered).
    pub fn registry(plugins: &[LoadedPlugin]) -> (ToolRegistry, Vec<RegistryError>) {
        ToolRegistry::from_tools(plugins.iter().flat_map(|p| p.tools.iter().cloned()))
    }
}
