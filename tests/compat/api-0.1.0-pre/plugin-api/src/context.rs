//! The call context a tool receives: which turn it works for, the model, the cancel
//! signal, and the services the host provides (log, timer, child turns).

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use abi_stable::std_types::{RResult, RStr};
use serde::Serialize;

use crate::blocking::CancelFlag;
use crate::ffi::{FfiCallContext, LogLevel};

/// What a tool knows about the call it is running: the turn, the model and cancellation,
/// plus the host's services. Borrowed for the duration of one call.
pub struct ToolContext<'a> {
    raw: &'a FfiCallContext<'a>,
}

/// A host service could not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceError {
    /// The host this plugin runs in does not provide the service (it predates it, or has
    /// no agent attached).
    Unavailable(String),
    /// The service ran and failed.
    Failed(String),
}

impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServiceError::Unavailable(m) | ServiceError::Failed(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ServiceError {}

impl From<ServiceError> for crate::ToolError {
    fn from(e: ServiceError) -> Self {
        crate::ToolError::Failed(e.to_string())
    }
}

/// The call was cancelled: the turn was stopped, or the call ran past its timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cancelled;

impl std::fmt::Display for Cancelled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the call was cancelled")
    }
}

impl std::error::Error for Cancelled {}

impl From<Cancelled> for crate::ToolError {
    fn from(_: Cancelled) -> Self {
        crate::ToolError::Failed("cancelled".to_owned())
    }
}

/// A request for a child turn (see [`ToolContext::child_turn`]).
#[derive(Debug, Clone, Serialize)]
pub struct ChildTurnRequest {
    /// What the child agent is asked to do.
    pub prompt: String,
    /// Background the child needs, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
}

impl<'a> ToolContext<'a> {
    /// Wraps the raw context the host passed. Only the export glue calls this.
    #[doc(hidden)]
    pub fn from_ffi(raw: &'a FfiCallContext<'a>) -> Self {
        ToolContext { raw }
    }

    /// The profile this call works for; keep per-profile state apart with it.
    pub fn profile_id(&self) -> &'a str {
        // SAFETY: the host keeps the context valid for `'a`; the string borrows from it.
        unsafe { (self.raw.host.profile_id())(self.raw) }.as_str()
    }

    /// The session (conversation) this call works for.
    pub fn session_id(&self) -> &'a str {
        // SAFETY: as in `profile_id`.
        unsafe { (self.raw.host.session_id())(self.raw) }.as_str()
    }

    /// The model that asked for this call.
    pub fn model(&self) -> &'a str {
        // SAFETY: as in `profile_id`.
        unsafe { (self.raw.host.model())(self.raw) }.as_str()
    }

    /// Whether the call was cancelled. Long-running tools check it between steps.
    pub fn is_cancelled(&self) -> bool {
        // SAFETY: the host keeps the context valid for `'a`.
        unsafe { (self.raw.host.is_cancelled())(self.raw) }
    }

    /// Resolves when the call is cancelled.
    pub fn cancelled(&self) -> impl Future<Output = ()> + Send + 'static {
        // SAFETY: the host keeps the context valid for `'a`; the future owns what it needs.
        unsafe { (self.raw.host.cancelled())(self.raw) }
    }

    /// Runs `future` until it finishes or the call is cancelled, whichever is first.
    pub async fn until_cancelled<F: Future>(&self, future: F) -> Result<F::Output, Cancelled> {
        let mut future = pin!(future);
        let mut cancelled = pin!(self.cancelled());
        poll_fn(|cx| {
            if let Poll::Ready(out) = future.as_mut().poll(cx) {
                return Poll::Ready(Ok(out));
            }
            cancelled.as_mut().poll(cx).map(|()| Err(Cancelled))
        })
        .await
    }

    /// Runs blocking work on its own thread (see [`crate::blocking`]) and awaits it. The
    /// work gets a [`CancelFlag`] that turns true when the call is cancelled; it should
    /// check it and stop. The call still waits for the work to return, so a host's grace
    /// period after a timeout applies to it too. A panic in `work` is an `Err`.
    pub async fn blocking<T, F>(&self, work: F) -> Result<T, String>
    where
        T: Send + 'static,
        F: FnOnce(&CancelFlag) -> T + Send + 'static,
    {
        let flag = CancelFlag::default();
        let worker_flag = flag.clone();
        let mut result = pin!(crate::blocking::blocking(move || work(&worker_flag)));
        match self.until_cancelled(result.as_mut()).await {
            Ok(out) => out,
            Err(Cancelled) => {
                flag.cancel();
                result.await
            }
        }
    }

    /// Sleeps on the host's timer; returns early with `Err(Cancelled)` if the call is
    /// cancelled first.
    pub async fn sleep(&self, duration: Duration) -> Result<(), Cancelled> {
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: the host keeps the context valid for `'a`.
        let completed = unsafe { (self.raw.host.sleep())(self.raw, nanos) }.await;
        if completed { Ok(()) } else { Err(Cancelled) }
    }

    /// Writes a line to the host's log, tagged with this plugin and tool.
    pub fn log(&self, level: LogLevel, message: &str) {
        // SAFETY: the context is valid for `'a`; the host copies the message.
        unsafe { (self.raw.host.log())(self.raw, level, RStr::from_str(message)) }
    }

    /// Runs a child turn on the agent running this call and returns its final answer.
    ///
    /// Fails with [`ServiceError::Unavailable`] when the host runs no agent for this call
    /// (for example `toolhost call` from a terminal).
    pub async fn child_turn(&self, request: &ChildTurnRequest) -> Result<String, ServiceError> {
        let request = serde_json::to_string(request)
            .map_err(|e| ServiceError::Failed(format!("could not encode the request: {e}")))?;
        // SAFETY: the context is valid for `'a`; the host copies the request before returning.
        let future = unsafe { (self.raw.host.child_turn())(self.raw, RStr::from_str(&request)) };
        match future.await {
            RResult::ROk(answer) => Ok(answer.into_string()),
            RResult::RErr(message) => Err(classify_service_error(message.into_string())),
        }
    }
}

/// Hosts prefix the message of a missing service with this marker.
#[doc(hidden)]
pub const UNAVAILABLE_PREFIX: &str = "unavailable: ";

fn classify_service_error(message: String) -> ServiceError {
    match message.strip_prefix(UNAVAILABLE_PREFIX) {
        Some(rest) => ServiceError::Unavailable(rest.to_owned()),
        None => ServiceError::Failed(message),
    }
}
