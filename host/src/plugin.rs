//! Plugin tools on the host side: the adapter that makes a plugin's [`FfiTool`] a host
//! [`Tool`], and the table of host services every plugin call receives.
//!
//! This is one of the two modules (with `loader`) that contain `unsafe`: the plugin's
//! vtable functions are called with the object they were exported with, and the context
//! pointer handed to the plugin points at a `CallState` that outlives the call's future.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use abi_stable::prefix_type::WithMetadata;
use abi_stable::std_types::{RResult, RStr, RString};
use async_ffi::{FfiFuture, FutureExt};
use async_trait::async_trait;
use serde_json::Value;
use toolhost_plugin_api::ffi::{
    FfiCallContext, FfiTool, FfiToolError, HostVTable, HostVTable_Ref, LogLevel,
};
use toolhost_plugin_api::{__private::UNAVAILABLE_PREFIX, ToolError};

use crate::context::ToolContext;
use crate::tool::{Requirements, Tool, ToolOrigin, ToolSpec};

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
    pub tools: Vec<Arc<dyn Tool>>,
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
impl Tool for PluginTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn origin(&self) -> &ToolOrigin {
        &self.origin
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<String, ToolError> {
        // serde_json's writer, not `Display`: it skips the formatting machinery.
        let args = serde_json::to_string(&args)
            .map_err(|e| ToolError::InvalidArgs(format!("could not encode the arguments: {e}")))?;
        let state = CallState {
            ctx,
            tool: &self.spec.name,
            plugin: self.origin.plugin_name(),
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

/// What the context handed to a plugin points at.
struct CallState<'a> {
    ctx: &'a ToolContext,
    tool: &'a str,
    plugin: &'a str,
}

// The plugin may use the context from any thread (`FfiCallContext` is `Send + Sync`).
const _: () = {
    const fn assert_sync<T: Sync>() {}
    assert_sync::<CallState<'static>>();
};

impl<'a> CallState<'a> {
    /// The context for the plugin. It borrows `self`, so the borrow checker keeps the state
    /// alive for as long as the plugin's future can use the context.
    fn ffi_context(&'a self) -> FfiCallContext<'a> {
        FfiCallContext {
            data: std::ptr::from_ref(self).cast::<c_void>(),
            host: HOST_VTABLE,
            _marker: PhantomData,
        }
    }
}

/// The call state behind a context the host created.
///
/// # Safety
/// `ctx` must come from [`CallState::ffi_context`] (the plugin passes back what it got).
unsafe fn state<'a>(ctx: &'a FfiCallContext<'a>) -> &'a CallState<'a> {
    // SAFETY: per the function's contract, `data` points at a live `CallState` that
    // outlives `'a`.
    unsafe { &*ctx.data.cast::<CallState<'a>>() }
}

const HOST_VTABLE: HostVTable_Ref = {
    const TABLE: &WithMetadata<HostVTable> = &WithMetadata::new(HostVTable {
        profile_id: host_profile_id,
        session_id: host_session_id,
        model: host_model,
        is_cancelled: host_is_cancelled,
        cancelled: host_cancelled,
        log: host_log,
        sleep: host_sleep,
        child_turn: host_child_turn,
        progress: host_progress,
        ask_user: host_ask_user,
        sample: host_sample,
        host_request: host_host_request,
        #[cfg(feature = "__test_newer_api")]
        newer_service: host_newer_service,
    });
    HostVTable_Ref(TABLE.static_as_prefix())
};

#[cfg(feature = "__test_newer_api")]
unsafe extern "C" fn host_newer_service(_ctx: &FfiCallContext<'_>) -> RString {
    RString::from("served by a newer host")
}

unsafe extern "C" fn host_profile_id<'a>(ctx: &'a FfiCallContext<'a>) -> RStr<'a> {
    // SAFETY: the plugin passes back the context it was given.
    RStr::from_str(&unsafe { state(ctx) }.ctx.turn.profile_id)
}

unsafe extern "C" fn host_session_id<'a>(ctx: &'a FfiCallContext<'a>) -> RStr<'a> {
    // SAFETY: as above.
    RStr::from_str(&unsafe { state(ctx) }.ctx.turn.session_id)
}

unsafe extern "C" fn host_model<'a>(ctx: &'a FfiCallContext<'a>) -> RStr<'a> {
    // SAFETY: as above.
    RStr::from_str(&unsafe { state(ctx) }.ctx.turn.model)
}

unsafe extern "C" fn host_is_cancelled(ctx: &FfiCallContext<'_>) -> bool {
    // SAFETY: as above.
    unsafe { state(ctx) }.ctx.cancel.is_cancelled()
}

unsafe extern "C" fn host_cancelled(ctx: &FfiCallContext<'_>) -> FfiFuture<()> {
    // SAFETY: as above.
    let token = unsafe { state(ctx) }.ctx.cancel.clone();
    async move { token.cancelled().await }.into_ffi()
}

unsafe extern "C" fn host_log(ctx: &FfiCallContext<'_>, level: LogLevel, message: RStr<'_>) {
    // SAFETY: as above.
    let s = unsafe { state(ctx) };
    let message = message.as_str();
    match level {
        LogLevel::ERROR => tracing::error!(plugin = s.plugin, tool = s.tool, "{message}"),
        LogLevel::WARN => tracing::warn!(plugin = s.plugin, tool = s.tool, "{message}"),
        LogLevel::INFO => tracing::info!(plugin = s.plugin, tool = s.tool, "{message}"),
        _ => tracing::debug!(plugin = s.plugin, tool = s.tool, "{message}"),
    }
    if let Some(caller) = &s.ctx.services.caller {
        // Nothing may unwind out of this extern "C" function.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            caller.log(level, s.tool, message);
        }));
    }
}

unsafe extern "C" fn host_progress(
    ctx: &FfiCallContext<'_>,
    progress: f64,
    total: f64,
    message: RStr<'_>,
) {
    // SAFETY: as above.
    let s = unsafe { state(ctx) };
    // A non-finite number cannot cross as JSON; an infinite total means "unknown".
    if !progress.is_finite() {
        return;
    }
    if let Some(caller) = &s.ctx.services.caller {
        let total = total.is_finite().then_some(total);
        let message = (!message.is_empty()).then_some(message.as_str());
        // Nothing may unwind out of this extern "C" function.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            caller.progress(progress, total, message);
        }));
    }
}

unsafe extern "C" fn host_ask_user(
    ctx: &FfiCallContext<'_>,
    request: RStr<'_>,
) -> FfiFuture<RResult<RString, RString>> {
    // SAFETY: as above.
    let caller = unsafe { state(ctx) }.ctx.services.caller.clone();
    caller_service(caller, request, "asking the person", |caller, request| {
        Box::pin(async move { caller.ask_user(request).await })
    })
}

unsafe extern "C" fn host_sample(
    ctx: &FfiCallContext<'_>,
    request: RStr<'_>,
) -> FfiFuture<RResult<RString, RString>> {
    // SAFETY: as above.
    let caller = unsafe { state(ctx) }.ctx.services.caller.clone();
    caller_service(caller, request, "sampling", |caller, request| {
        Box::pin(async move { caller.sample(request).await })
    })
}

unsafe extern "C" fn host_host_request(
    ctx: &FfiCallContext<'_>,
    method: RStr<'_>,
    params: RStr<'_>,
) -> FfiFuture<RResult<RString, RString>> {
    // SAFETY: as above.
    let s = unsafe { state(ctx) };
    let service = s.ctx.services.requests.clone();
    let turn = Arc::clone(&s.ctx.turn);
    let method = method.as_str().to_owned();
    let params: Result<Value, _> = serde_json::from_str(params.as_str());
    async move {
        let Some(service) = service else {
            return RResult::RErr(RString::from(format!(
                "{UNAVAILABLE_PREFIX}'{method}' is not available: this call has no profile \
                 (it came from a client that names none)"
            )));
        };
        let params = match params {
            Ok(p) => p,
            Err(e) => {
                return RResult::RErr(RString::from(format!(
                    "malformed parameters for '{method}': {e}"
                )));
            }
        };
        to_ffi(service.request(&turn, &method, params).await)
    }
    .into_ffi()
}

/// A service's answer as it crosses to the plugin: JSON text, or the error with the
/// "unavailable" marker the plugin side turns back into `ServiceError::Unavailable`.
fn to_ffi(answer: Result<Value, toolhost_plugin_api::ServiceError>) -> RResult<RString, RString> {
    use toolhost_plugin_api::ServiceError;
    match answer {
        Ok(answer) => RResult::ROk(RString::from(answer.to_string())),
        Err(ServiceError::Unavailable(m)) => {
            RResult::RErr(RString::from(format!("{UNAVAILABLE_PREFIX}{m}")))
        }
        Err(ServiceError::Failed(m)) => RResult::RErr(RString::from(m)),
    }
}

type ServiceFuture = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Value, toolhost_plugin_api::ServiceError>> + Send>,
>;

/// Runs a JSON-in, JSON-out caller service for a plugin; errors cross as text, with the
/// "unavailable" marker the plugin side turns back into `ServiceError::Unavailable`.
fn caller_service(
    caller: Option<Arc<dyn crate::context::Caller>>,
    request: RStr<'_>,
    what: &'static str,
    run: impl FnOnce(Arc<dyn crate::context::Caller>, Value) -> ServiceFuture,
) -> FfiFuture<RResult<RString, RString>> {
    let request: Result<Value, _> = serde_json::from_str(request.as_str());
    let future = match (caller, request) {
        (None, _) => Err(format!(
            "{UNAVAILABLE_PREFIX}{what} is not available: nobody is at the other end of this \
             call (it came from `toolhost call` or the control socket)"
        )),
        (Some(_), Err(e)) => Err(format!("malformed {what} request: {e}")),
        (Some(caller), Ok(request)) => Ok(run(caller, request)),
    };
    async move {
        match future {
            Err(message) => RResult::RErr(RString::from(message)),
            Ok(future) => to_ffi(future.await),
        }
    }
    .into_ffi()
}

unsafe extern "C" fn host_sleep(ctx: &FfiCallContext<'_>, nanos: u64) -> FfiFuture<bool> {
    // SAFETY: as above.
    let token = unsafe { state(ctx) }.ctx.cancel.clone();
    async move {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_nanos(nanos)) => true,
            () = token.cancelled() => false,
        }
    }
    .into_ffi()
}

unsafe extern "C" fn host_child_turn(
    ctx: &FfiCallContext<'_>,
    request: RStr<'_>,
) -> FfiFuture<RResult<RString, RString>> {
    // SAFETY: as above.
    let s = unsafe { state(ctx) };
    let service = s.ctx.services.child_turns.clone();
    let turn = Arc::clone(&s.ctx.turn);
    let cancel = s.ctx.cancel.clone();
    let request: Result<Value, _> = serde_json::from_str(request.as_str());
    async move {
        let Some(service) = service else {
            return RResult::RErr(RString::from(format!(
                "{UNAVAILABLE_PREFIX}child turns are not available in this host: no agent \
                 is running this call (it came from `toolhost call` or a client without an agent)"
            )));
        };
        let request = match request {
            Ok(r) => r,
            Err(e) => {
                return RResult::RErr(RString::from(format!("malformed child-turn request: {e}")));
            }
        };
        service
            .run_child_turn(&turn, request, cancel)
            .await
            .map(RString::from)
            .map_err(RString::from)
            .into()
    }
    .into_ffi()
}
