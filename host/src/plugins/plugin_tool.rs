//! Plugin tools on the host side: the adapter that makes a plugin's [`FfiTool`] a host
//! [`DynTool`], and the table of host services every plugin call receives.
//!
//! This is one of the two modules (with `loader`) that contain `unsafe`: the plugin's
//! vtable functions are called with the object they were exported with, and the context
//! pointer handed to the plugin points at a `CallState` that outlives the call's future.
//!
//! Host services work from any thread: the runtime handle current when the call started
//! is kept in the call state, and every service future enters it on each poll (a plugin
//! may drive `ctx.sleep()` from a thread of its own). `sleep` first polled on a thread
//! outside the runtime uses a timer thread of its own, so it completes even when the plugin
//! blocks the thread that polls the call. A panic in a service future becomes a service
//! error for the plugin, never a panic across the boundary.

use std::ffi::c_void;
use std::future::Future;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use abi_stable::prefix_type::WithMetadata;
use abi_stable::std_types::{RResult, RStr, RString};
use async_ffi::{FfiFuture, FutureExt};
use async_trait::async_trait;
use serde_json::Value;
use toolhost_plugin_api::ffi::{
    FfiCallContext, FfiTool, FfiToolError, HostVTable, HostVTable_Ref, LogLevel,
};
use toolhost_plugin_api::{
    AskRequest, ChildTurnRequest, HostAnswer, HostRequest, HostRequestError, SampleRequest,
    ServiceError, ToolError,
};

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

/// What the context handed to a plugin points at.
struct CallState<'a> {
    ctx: &'a CallContext,
    tool: &'a str,
    plugin: &'a str,
    /// The runtime the call started on; service futures enter it on every poll.
    runtime: Option<tokio::runtime::Handle>,
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
    // SAFETY: as above.
    let runtime = unsafe { state(ctx) }.runtime.clone();
    caller_service(
        runtime,
        caller,
        request,
        "asking the person",
        |caller, request: AskRequest| Box::pin(async move { caller.ask_user(request).await }),
    )
}

unsafe extern "C" fn host_sample(
    ctx: &FfiCallContext<'_>,
    request: RStr<'_>,
) -> FfiFuture<RResult<RString, RString>> {
    // SAFETY: as above.
    let caller = unsafe { state(ctx) }.ctx.services.caller.clone();
    // SAFETY: as above.
    let runtime = unsafe { state(ctx) }.runtime.clone();
    caller_service(
        runtime,
        caller,
        request,
        "sampling",
        |caller, request: SampleRequest| Box::pin(async move { caller.sample(request).await }),
    )
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
    let runtime = s.runtime.clone();
    in_runtime(
        runtime,
        async move {
            let Some(service) = service else {
                return to_ffi::<HostAnswer>(Err(ServiceError::Unavailable(format!(
                    "'{method}' is not available: this call has no profile (it came from a \
                     client that names none)"
                ))));
            };
            let params = match params {
                Ok(p) => p,
                Err(e) => {
                    return to_ffi::<HostAnswer>(Err(ServiceError::Failed(format!(
                        "malformed parameters for '{method}': {e}"
                    ))));
                }
            };
            let request = match HostRequest::from_wire(&method, params) {
                Ok(request) => request,
                Err(e @ HostRequestError::Unknown(_)) => {
                    return to_ffi::<HostAnswer>(Err(ServiceError::Unavailable(e.to_string())));
                }
                Err(e) => return to_ffi::<HostAnswer>(Err(ServiceError::Failed(e.to_string()))),
            };
            to_ffi(service.request(&turn, request).await)
        },
        service_panicked,
    )
}

/// A service's answer as it crosses to the plugin: JSON text, or the error in the form
/// the plugin side reads back ([`ServiceError::to_wire`]).
fn to_ffi<A: serde::Serialize>(answer: Result<A, ServiceError>) -> RResult<RString, RString> {
    let answer = answer.and_then(|answer| {
        serde_json::to_string(&answer)
            .map_err(|e| ServiceError::Failed(format!("could not encode the host's answer: {e}")))
    });
    match answer {
        Ok(answer) => RResult::ROk(RString::from(answer)),
        Err(e) => RResult::RErr(RString::from(e.to_wire())),
    }
}

type ServiceFuture<A> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<A, ServiceError>> + Send>>;

/// Runs a caller service for a plugin: reads the typed request, answers typed, and sends
/// errors in the form the plugin side reads back into a [`ServiceError`].
fn caller_service<R, A>(
    runtime: Option<tokio::runtime::Handle>,
    caller: Option<Arc<dyn crate::calls::context::CallerChannel>>,
    request: RStr<'_>,
    what: &'static str,
    run: impl FnOnce(Arc<dyn crate::calls::context::CallerChannel>, R) -> ServiceFuture<A>,
) -> FfiFuture<RResult<RString, RString>>
where
    R: serde::de::DeserializeOwned,
    A: serde::Serialize + Send + 'static,
{
    let request: Result<R, _> = serde_json::from_str(request.as_str());
    let future = match (caller, request) {
        (None, _) => Err(ServiceError::Unavailable(format!(
            "{what} is not available: nobody is at the other end of this call (it came from \
             `toolhost call` or the control socket)"
        ))),
        (Some(_), Err(e)) => Err(ServiceError::Failed(format!(
            "malformed {what} request: {e}"
        ))),
        (Some(caller), Ok(request)) => Ok(run(caller, request)),
    };
    in_runtime(
        runtime,
        async move {
            match future {
                Err(e) => to_ffi::<A>(Err(e)),
                Ok(future) => to_ffi(future.await),
            }
        },
        service_panicked,
    )
}

unsafe extern "C" fn host_sleep(ctx: &FfiCallContext<'_>, nanos: u64) -> FfiFuture<bool> {
    // SAFETY: as above.
    let s = unsafe { state(ctx) };
    HostSleep {
        runtime: s.runtime.clone(),
        duration: Duration::from_nanos(nanos),
        cancelled: Box::pin(s.ctx.cancel.clone().cancelled_owned()),
        timer: None,
    }
    .into_ffi()
}

/// `sleep` for a plugin: `true` when the time is up, `false` when the call was cancelled
/// first. Where it is first polled decides the timer: on a thread of the host's runtime,
/// the runtime's timer (polled inside the call's runtime from then on, whichever thread
/// polls); on any other thread (a plugin's own), a [`ThreadTimer`], which needs nobody to
/// drive it, so the sleep ends even if the plugin blocks the thread that polls the call.
/// A panic ends it as cancelled (the API's only other answer); it is logged.
struct HostSleep {
    runtime: Option<tokio::runtime::Handle>,
    duration: Duration,
    cancelled: Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
    timer: Option<SleepTimer>,
}

enum SleepTimer {
    Runtime(Pin<Box<tokio::time::Sleep>>),
    Thread(ThreadTimer),
}

impl Future for HostSleep {
    type Output = bool;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        let this = &mut *self;
        let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if this.cancelled.as_mut().poll(cx).is_ready() {
                return Poll::Ready(false);
            }
            let on_runtime_thread = tokio::runtime::Handle::try_current().is_ok();
            let _entered = this.runtime.as_ref().map(tokio::runtime::Handle::enter);
            let duration = this.duration;
            let timer = this.timer.get_or_insert_with(|| {
                if on_runtime_thread {
                    SleepTimer::Runtime(Box::pin(tokio::time::sleep(duration)))
                } else {
                    SleepTimer::Thread(ThreadTimer::new(duration))
                }
            });
            let elapsed = match timer {
                SleepTimer::Runtime(sleep) => sleep.as_mut().poll(cx),
                SleepTimer::Thread(thread) => Pin::new(thread).poll(cx),
            };
            elapsed.map(|()| true)
        }));
        polled.unwrap_or_else(|payload| {
            let message = toolhost_plugin_api::take_message(payload);
            tracing::warn!("a plugin's sleep panicked in the host: {message}");
            Poll::Ready(false)
        })
    }
}

impl Drop for HostSleep {
    fn drop(&mut self) {
        let _entered = self.runtime.as_ref().map(tokio::runtime::Handle::enter);
        let timer = self.timer.take();
        if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(timer)))
        {
            toolhost_plugin_api::dispose_payload(payload);
        }
    }
}

/// Makes a host service's future safe to hand to a plugin: each poll runs inside the
/// runtime the call started on (whatever thread the plugin polls from), a panic in `poll`
/// ends the future with `on_panic(message)`, and the future is dropped inside the runtime
/// and under `catch_unwind`.
fn in_runtime<F>(
    runtime: Option<tokio::runtime::Handle>,
    future: F,
    on_panic: fn(String) -> F::Output,
) -> FfiFuture<F::Output>
where
    F: Future + Send + 'static,
    F::Output: 'static,
{
    InRuntime {
        runtime,
        inner: Some(Box::pin(future)),
        on_panic,
    }
    .into_ffi()
}

struct InRuntime<F: Future> {
    runtime: Option<tokio::runtime::Handle>,
    inner: Option<Pin<Box<F>>>,
    on_panic: fn(String) -> F::Output,
}

impl<F: Future> Future for InRuntime<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        let _entered = this.runtime.as_ref().map(tokio::runtime::Handle::enter);
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready((this.on_panic)("polled after it was dropped".to_owned()));
        };
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.as_mut().poll(cx))) {
            Ok(poll) => poll,
            Err(payload) => {
                let message = toolhost_plugin_api::take_message(payload);
                tracing::warn!("a host service for a plugin panicked: {message}");
                Poll::Ready((this.on_panic)(message))
            }
        }
    }
}

impl<F: Future> Drop for InRuntime<F> {
    fn drop(&mut self) {
        let _entered = self.runtime.as_ref().map(tokio::runtime::Handle::enter);
        let inner = self.inner.take();
        if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(inner)))
        {
            toolhost_plugin_api::dispose_payload(payload);
        }
    }
}

/// The answer a plugin gets when a JSON service panicked in the host.
fn service_panicked(message: String) -> RResult<RString, RString> {
    RResult::RErr(RString::from(format!(
        "the host service failed inside the host ({message}); this is a bug in toolhost, \
         please report it"
    )))
}

/// A timer that runs on a thread of its own: for `sleep` asked from a thread outside the
/// host's runtime. The thread starts at the first poll and ends when the time is up or the
/// timer is dropped, whichever comes first.
struct ThreadTimer {
    duration: Duration,
    shared: Arc<TimerShared>,
}

#[derive(Default)]
struct TimerShared {
    state: Mutex<TimerState>,
    changed: Condvar,
}

#[derive(Default)]
struct TimerState {
    started: bool,
    fired: bool,
    dropped: bool,
    waker: Option<Waker>,
}

impl ThreadTimer {
    fn new(duration: Duration) -> ThreadTimer {
        ThreadTimer {
            duration,
            shared: Arc::default(),
        }
    }

    fn run(shared: &TimerShared, deadline: Option<Instant>) {
        let mut state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if state.dropped {
                return;
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                break;
            }
            state = match left {
                Some(left) => {
                    shared
                        .changed
                        .wait_timeout(state, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                None => shared
                    .changed
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
            };
        }
        state.fired = true;
        let waker = state.waker.take();
        drop(state);
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl Future for ThreadTimer {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self
            .shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if state.fired {
            return Poll::Ready(());
        }
        state.waker = Some(cx.waker().clone());
        if !state.started {
            state.started = true;
            // `None`: further away than `Instant` can say, so never.
            let deadline = Instant::now().checked_add(self.duration);
            let shared = Arc::clone(&self.shared);
            let spawned = std::thread::Builder::new()
                .name("toolhost-plugin-sleep".to_owned())
                .spawn(move || ThreadTimer::run(&shared, deadline));
            if let Err(e) = spawned {
                tracing::warn!("could not start a timer thread for a plugin's sleep: {e}");
                state.fired = true;
                return Poll::Ready(());
            }
        }
        Poll::Pending
    }
}

impl Drop for ThreadTimer {
    fn drop(&mut self) {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .dropped = true;
        self.shared.changed.notify_all();
    }
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
    let request: Result<ChildTurnRequest, serde_json::Error> =
        serde_json::from_str(request.as_str());
    let runtime = s.runtime.clone();
    in_runtime(
        runtime,
        async move {
            let Some(service) = service else {
                return RResult::RErr(RString::from(
                    ServiceError::Unavailable(
                        "child turns are not available in this host: no agent is running this \
                         call (it came from `toolhost call` or a client without an agent)"
                            .to_owned(),
                    )
                    .to_wire(),
                ));
            };
            let request = match request {
                Ok(r) => r,
                // Well-formed JSON without a text `prompt`.
                Err(e) if e.classify() == serde_json::error::Category::Data => {
                    return RResult::RErr(RString::from("a child turn needs a prompt"));
                }
                Err(e) => {
                    return RResult::RErr(RString::from(format!(
                        "malformed child-turn request: {e}"
                    )));
                }
            };
            service
                .run_child_turn(&turn, request, cancel)
                .await
                .map(RString::from)
                .map_err(RString::from)
                .into()
        },
        service_panicked,
    )
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
