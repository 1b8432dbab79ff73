//! The host services every plugin call receives, as the plugin-api's `HostVTable`: the
//! call's identity and cancel signal, log, sleep, child turns, progress, questions,
//! sampling and typed host requests. Each service future enters the runtime the call
//! started on at every poll (a plugin may await it on its own thread), and a panic in a
//! service becomes a service error for the plugin, never a panic across the boundary.
//!
//! One of the modules with `unsafe`: the context pointer handed to the plugin points at a
//! [`CallState`] that outlives the call's future, and these functions read it back.

use std::ffi::c_void;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use abi_stable::prefix_type::WithMetadata;
use abi_stable::std_types::{RResult, RStr, RString};
use async_ffi::{FfiFuture, FutureExt};
use serde_json::Value;
use toolhost_plugin_api::ffi::{FfiCallContext, HostVTable, HostVTable_Ref, LogLevel};
use toolhost_plugin_api::{
    AskRequest, ChildTurnCall, HostAnswer, HostRequest, HostRequestError, SampleRequest,
    ServiceError,
};

use toolhost_calls::context::CallContext;

use super::timers::HostSleep;

/// What the context handed to a plugin points at. It owns what it holds: the call is
/// polled on a pool thread (`call_pool.rs`), away from the caller's stack.
pub(super) struct CallState {
    pub(super) ctx: CallContext,
    pub(super) tool: Arc<str>,
    pub(super) plugin: Arc<str>,
    /// The plugin's settings (`plugin.settings`); `None` in a worker, where the request
    /// goes to the host with the other services.
    pub(super) settings: Option<Arc<toolhost_plugin_api::SettingsAnswer>>,
    /// The runtime the call started on; service futures enter it on every poll.
    pub(super) runtime: Option<tokio::runtime::Handle>,
}

// The plugin may use the context from any thread (`FfiCallContext` is `Send + Sync`).
const _: () = {
    const fn assert_sync<T: Sync>() {}
    assert_sync::<CallState>();
};

impl CallState {
    /// The context for the plugin. It borrows `self`, so the borrow checker keeps the state
    /// alive for as long as the plugin's future can use the context.
    pub(super) fn ffi_context<'a>(&'a self) -> FfiCallContext<'a> {
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
unsafe fn state<'a>(ctx: &'a FfiCallContext<'a>) -> &'a CallState {
    // SAFETY: per the function's contract, `data` points at a live `CallState` that
    // outlives `'a`.
    unsafe { &*ctx.data.cast::<CallState>() }
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
    log_tool_line(level, &s.plugin, &s.tool, message);
    if let Some(caller) = &s.ctx.services.caller {
        // Nothing may unwind out of this extern "C" function.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            caller.log(level, &s.tool, message);
        }));
    }
}

/// A tool's log line in the host's log, at its level, with the plugin and tool named (for
/// plugins in the host and in workers alike).
pub(in crate::plugins) fn log_tool_line(level: LogLevel, plugin: &str, tool: &str, message: &str) {
    let message = crate::text::for_log(message);
    match level {
        LogLevel::ERROR => tracing::error!(plugin, tool, "{message}"),
        LogLevel::WARN => tracing::warn!(plugin, tool, "{message}"),
        LogLevel::INFO => tracing::info!(plugin, tool, "{message}"),
        _ => tracing::debug!(plugin, tool, "{message}"),
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
    // The plugin's own settings need no profile: answered here, for every caller.
    if method.as_str() == "plugin.settings"
        && let Some(settings) = &s.settings
    {
        let answer = crate::plugins::settings::answer(settings);
        return FfiFuture::new(async move { to_ffi(Ok(answer)) });
    }
    let services = s.ctx.services.clone();
    let turn = Arc::clone(&s.ctx.turn);
    let cancel = s.ctx.cancel.clone();
    let method = method.as_str().to_owned();
    let params: Result<Value, _> = serde_json::from_str(params.as_str());
    let runtime = s.runtime.clone();
    in_runtime(
        runtime,
        async move {
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
            let no_requests = |_: &HostRequest| no_profile(&method);
            to_ffi(
                toolhost_calls::context::answer_host_request(
                    &services,
                    &turn,
                    cancel,
                    request,
                    no_requests,
                )
                .await,
            )
        },
        service_panicked,
    )
}

/// The answer to a request that needs a profile, in a call that has none (in process, and
/// in a worker's proxy).
pub(crate) fn no_profile(method: &str) -> ServiceError {
    ServiceError::Unavailable(format!(
        "'{method}' is not available: this call runs without a profile's state folder (a \
         door built on a profile scope without host requests); run it through a host that \
         has a state folder (`state_dir`, or XDG_STATE_HOME/HOME set), or give the scope ProfileRequests"
    ))
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
    caller: Option<Arc<dyn toolhost_calls::context::CallerChannel>>,
    request: RStr<'_>,
    what: &'static str,
    run: impl FnOnce(Arc<dyn toolhost_calls::context::CallerChannel>, R) -> ServiceFuture<A>,
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
    HostSleep::new(
        s.runtime.clone(),
        Duration::from_nanos(nanos),
        s.ctx.cancel.clone(),
    )
    .into_ffi()
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

unsafe extern "C" fn host_child_turn(
    ctx: &FfiCallContext<'_>,
    request: RStr<'_>,
) -> FfiFuture<RResult<RString, RString>> {
    // SAFETY: as above.
    let s = unsafe { state(ctx) };
    let service = s.ctx.services.child_turns.clone();
    let turn = Arc::clone(&s.ctx.turn);
    let cancel = s.ctx.cancel.clone();
    let request: Result<ChildTurnCall, serde_json::Error> = serde_json::from_str(request.as_str());
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
                .map_err(|e| RString::from(e.to_string()))
                .into()
        },
        service_panicked,
    )
}
