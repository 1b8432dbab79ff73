//! The test host's service table: the `HostVTable` a real host implements, answered from
//! the `TestHost`'s settings, scripts and recorders. Messages for a missing script read
//! like a host without the service, and name the builder method that scripts it.
//!
//! The `unsafe` here: the context handed to the tool points at the `TestHost`, which the
//! call borrows for as long as the context exists; these functions read it back.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use abi_stable::prefix_type::WithMetadata;
use abi_stable::std_types::{RResult, RStr, RString};
use async_ffi::{FfiFuture, FutureExt as _};
use serde::Serialize;
use serde_json::Value;

use super::signal::{Sleep, WhenCancelled};
use super::{Progress, TestHost};
use crate::client::{AskRequest, SampleRequest};
use crate::context::{ChildTurnCall, ServiceError};
use crate::ffi::{FfiCallContext, HostVTable, HostVTable_Ref, LogLevel};
use crate::host_request::{HostRequest, HostRequestError, SettingsAnswer, StateDirAnswer};

// The tool may use the context from any thread (`FfiCallContext` is `Send + Sync`).
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<TestHost>();
};

impl TestHost {
    /// The context for a call. It borrows `self`, so the host outlives every use of it.
    pub(super) fn ffi_context(&self) -> FfiCallContext<'_> {
        FfiCallContext {
            data: std::ptr::from_ref(self).cast::<c_void>(),
            host: HOST_VTABLE,
            _marker: PhantomData,
        }
    }

    /// Runs a test's script, catching its panic (an `assert!` in it): the tool gets a
    /// service error and the call re-raises the panic when it returns.
    fn run_script<A>(
        &self,
        what: &str,
        script: impl FnOnce() -> Result<A, ServiceError>,
    ) -> Result<A, ServiceError> {
        match catch_unwind(AssertUnwindSafe(script)) {
            Ok(answer) => answer,
            Err(payload) => {
                let message = crate::unwind::take_message(payload);
                let mut records = self.records();
                records
                    .script_panic
                    .get_or_insert_with(|| format!("the {what} script panicked: {message}"));
                Err(ServiceError::Failed(format!(
                    "the test's {what} script panicked: {message}"
                )))
            }
        }
    }

    fn ask(&self, request: &str) -> Result<String, ServiceError> {
        let request: AskRequest = serde_json::from_str(request).map_err(|e| {
            ServiceError::Failed(format!("malformed asking the person request: {e}"))
        })?;
        self.records().asked.push(request.clone());
        let Some(script) = &self.scripts.ask else {
            return Err(ServiceError::Unavailable(
                "asking the person is not available: no answer scripted: use TestHost::on_ask"
                    .to_owned(),
            ));
        };
        let answer = self.run_script("on_ask", || lock(script)(&request))?;
        encode(&answer)
    }

    fn sample(&self, request: &str) -> Result<String, ServiceError> {
        let request: SampleRequest = serde_json::from_str(request)
            .map_err(|e| ServiceError::Failed(format!("malformed sampling request: {e}")))?;
        self.records().sampled.push(request.clone());
        let Some(script) = &self.scripts.sample else {
            return Err(ServiceError::Unavailable(
                "sampling is not available: no answer scripted: use TestHost::on_sample".to_owned(),
            ));
        };
        let answer = self.run_script("on_sample", || lock(script)(&request))?;
        encode(&answer)
    }

    /// The answer to one question of `ctx.ask_client`, from the scripts and roots set.
    fn client_answer(&self, question: &crate::ClientQuestion) -> crate::ClientAnswer {
        let answer = match question {
            crate::ClientQuestion::Ask { request, .. } => serde_json::to_string(request)
                .map_err(|e| ServiceError::Failed(e.to_string()))
                .and_then(|r| self.ask(&r))
                .and_then(|a| decode(&a).map(crate::ClientAnswer::Ask)),
            crate::ClientQuestion::Sample { request, .. } => serde_json::to_string(request)
                .map_err(|e| ServiceError::Failed(e.to_string()))
                .and_then(|r| self.sample(&r))
                .and_then(|a| decode(&a).map(crate::ClientAnswer::Sample)),
            crate::ClientQuestion::Url { message, url, .. } => {
                serde_json::to_string(&crate::ClientQuestion::url_as_text(message, url))
                    .map_err(|e| ServiceError::Failed(e.to_string()))
                    .and_then(|r| self.ask(&r))
                    .and_then(|a| decode(&a).map(crate::ClientAnswer::Ask))
            }
            crate::ClientQuestion::Roots { .. } => match &self.roots {
                Some(roots) => Ok(crate::ClientAnswer::Roots(crate::RootsAnswer {
                    roots: roots.clone(),
                })),
                None => Err(ServiceError::Unavailable(
                    "the client has no roots to give: none set (use TestHost::roots)".to_owned(),
                )),
            },
        };
        answer.unwrap_or_else(crate::ClientAnswer::from)
    }

    fn child_turn(&self, request: &str) -> Result<String, ServiceError> {
        let call: ChildTurnCall = match serde_json::from_str(request) {
            Ok(r) => r,
            // Well-formed JSON without a text `prompt` (the host's message).
            Err(e) if e.classify() == serde_json::error::Category::Data => {
                return Err(ServiceError::Failed(
                    "a child turn needs a prompt".to_owned(),
                ));
            }
            Err(e) => {
                return Err(ServiceError::Failed(format!(
                    "malformed child-turn request: {e}"
                )));
            }
        };
        self.records().child_turns.push(call.clone());
        let request = call.request;
        let Some(script) = &self.scripts.child_turn else {
            return Err(ServiceError::Unavailable(
                "child turns are not available: no answer scripted: use \
                 TestHost::on_child_turn"
                    .to_owned(),
            ));
        };
        self.run_script("on_child_turn", || lock(script)(&request))
    }

    fn host_request(&self, method: &str, params: &str) -> Result<String, ServiceError> {
        let params: Value = match serde_json::from_str(params) {
            Ok(p) => p,
            Err(e) => {
                self.records()
                    .host_requests
                    .push((method.to_owned(), Value::Null));
                return Err(ServiceError::Failed(format!(
                    "malformed parameters for '{method}': {e}"
                )));
            }
        };
        self.records()
            .host_requests
            .push((method.to_owned(), params.clone()));
        // Requests this API knows are read as a host reads them (a malformed one fails
        // the same way); the state folder is always the host's own.
        match HostRequest::from_wire(method, params.clone()) {
            Ok(HostRequest::ProfileStateDir(_)) => {
                let dir = self.state_dir_result().map_err(ServiceError::Failed)?;
                let path = dir.to_str().ok_or_else(|| {
                    ServiceError::Failed(format!(
                        "the state folder's path is not UTF-8: {}",
                        dir.display()
                    ))
                })?;
                return encode(&StateDirAnswer {
                    path: path.to_owned(),
                });
            }
            // The plugin's settings are the host's own too: `TestHost::settings`.
            Ok(HostRequest::PluginSettings(_)) => {
                return encode(&SettingsAnswer {
                    settings: self.settings.clone(),
                    base: self.settings_base.0.clone(),
                    home: self.settings_base.1.clone(),
                    strict: true,
                });
            }
            // And the output budget: `TestHost::output_budget`.
            Ok(HostRequest::OutputBudget(_)) => {
                return encode(&self.output_budget);
            }
            // So is the profile's workspace: `TestHost::workspace`.
            Ok(HostRequest::ProfileWorkspace(_)) => {
                return encode(&self.workspace);
            }
            // And the conversation's history, where `TestHost::session_summary` set one:
            // the last requests, as a host keeps them.
            Ok(HostRequest::SessionsSummary(query)) if self.summary.is_some() => {
                let mut history = self.summary.clone().unwrap_or_default();
                let last = query.last.unwrap_or(20).clamp(1, 100) as usize;
                let skip = history.requests.len().saturating_sub(last);
                history.requests.drain(..skip);
                return encode(&history);
            }
            // Delegations have a script of their own: `TestHost::on_delegate`.
            Ok(HostRequest::Delegate(request)) => {
                self.records().delegations.push(request.clone());
                let Some(script) = &self.scripts.delegate else {
                    return Err(ServiceError::Unavailable(
                        "'agent.delegate' is not available: no answer scripted: use \
                         TestHost::on_delegate"
                            .to_owned(),
                    ));
                };
                let answer = self.run_script("on_delegate", || lock(script)(&request))?;
                return encode(&answer);
            }
            // Several questions: each to its script, in order, as a terminal asks them.
            Ok(HostRequest::ClientAsk(questions)) => {
                let answers = questions
                    .questions
                    .iter()
                    .map(|question| self.client_answer(question))
                    .collect();
                return encode(&crate::ClientAnswers { answers });
            }
            Ok(HostRequest::CallDetach(_)) => {
                return encode(&crate::DetachAnswer { detached: false });
            }
            Err(e @ HostRequestError::Malformed { .. }) => {
                return Err(ServiceError::Failed(e.to_string()));
            }
            Ok(_) | Err(HostRequestError::Unknown(_)) => {}
        }
        let Some(script) = &self.scripts.host_request else {
            return Err(ServiceError::Unavailable(
                if HostRequest::METHODS.contains(&method) {
                    format!(
                        "'{method}' is not available: no answer scripted: use \
                         TestHost::on_host_request"
                    )
                } else {
                    format!(
                        "this host does not know the request '{method}' (no answer \
                         scripted: use TestHost::on_host_request)"
                    )
                },
            ));
        };
        let answer = self.run_script("on_host_request", || lock(script)(method, &params))?;
        encode(&answer)
    }
}

fn lock<T: ?Sized>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn encode<A: Serialize>(answer: &A) -> Result<String, ServiceError> {
    serde_json::to_string(answer)
        .map_err(|e| ServiceError::Failed(format!("could not encode the host's answer: {e}")))
}

/// An answer as it crosses to the plugin, already there (the scripts are synchronous).
fn ready(answer: Result<String, ServiceError>) -> FfiFuture<RResult<RString, RString>> {
    let wire = match answer {
        Ok(json) => RResult::ROk(RString::from(json)),
        Err(e) => RResult::RErr(RString::from(e.to_wire())),
    };
    async move { wire }.into_ffi()
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

/// The test host behind a context.
///
/// # Safety
/// `ctx` must come from [`TestHost::ffi_context`] (the tool passes back what it got).
unsafe fn host<'a>(ctx: &'a FfiCallContext<'a>) -> &'a TestHost {
    // SAFETY: per the function's contract, `data` points at a `TestHost` that the
    // context borrows, so it outlives `'a`.
    unsafe { &*ctx.data.cast::<TestHost>() }
}

#[cfg(feature = "__test_newer_api")]
unsafe extern "C" fn host_newer_service(_ctx: &FfiCallContext<'_>) -> RString {
    RString::from("served by the test host")
}

unsafe extern "C" fn host_profile_id<'a>(ctx: &'a FfiCallContext<'a>) -> RStr<'a> {
    // SAFETY: the tool passes back the context it was given.
    RStr::from_str(&unsafe { host(ctx) }.profile)
}

unsafe extern "C" fn host_session_id<'a>(ctx: &'a FfiCallContext<'a>) -> RStr<'a> {
    // SAFETY: as above.
    RStr::from_str(&unsafe { host(ctx) }.session)
}

unsafe extern "C" fn host_model<'a>(ctx: &'a FfiCallContext<'a>) -> RStr<'a> {
    // SAFETY: as above.
    RStr::from_str(&unsafe { host(ctx) }.model)
}

unsafe extern "C" fn host_is_cancelled(ctx: &FfiCallContext<'_>) -> bool {
    // SAFETY: as above.
    unsafe { host(ctx) }.signal.is_cancelled()
}

unsafe extern "C" fn host_cancelled(ctx: &FfiCallContext<'_>) -> FfiFuture<()> {
    // SAFETY: as above.
    let signal = std::sync::Arc::clone(&unsafe { host(ctx) }.signal);
    WhenCancelled::new(signal).into_ffi()
}

unsafe extern "C" fn host_sleep(ctx: &FfiCallContext<'_>, nanos: u64) -> FfiFuture<bool> {
    // SAFETY: as above.
    let signal = std::sync::Arc::clone(&unsafe { host(ctx) }.signal);
    Sleep::new(signal, Duration::from_nanos(nanos)).into_ffi()
}

unsafe extern "C" fn host_log(ctx: &FfiCallContext<'_>, level: LogLevel, message: RStr<'_>) {
    // SAFETY: as above.
    let host = unsafe { host(ctx) };
    host.records()
        .logs
        .push((level, message.as_str().to_owned()));
}

unsafe extern "C" fn host_progress(
    ctx: &FfiCallContext<'_>,
    progress: f64,
    total: f64,
    message: RStr<'_>,
) {
    // As the host: a non-finite number cannot be reported (it is dropped), a non-finite
    // total is "unknown", an empty message is none.
    if !progress.is_finite() {
        return;
    }
    // SAFETY: as above.
    let host = unsafe { host(ctx) };
    host.records().progress.push(Progress {
        progress,
        total: total.is_finite().then_some(total),
        message: (!message.is_empty()).then(|| message.as_str().to_owned()),
    });
}

unsafe extern "C" fn host_ask_user(
    ctx: &FfiCallContext<'_>,
    request: RStr<'_>,
) -> FfiFuture<RResult<RString, RString>> {
    // SAFETY: as above.
    ready(unsafe { host(ctx) }.ask(request.as_str()))
}

unsafe extern "C" fn host_sample(
    ctx: &FfiCallContext<'_>,
    request: RStr<'_>,
) -> FfiFuture<RResult<RString, RString>> {
    // SAFETY: as above.
    ready(unsafe { host(ctx) }.sample(request.as_str()))
}

unsafe extern "C" fn host_child_turn(
    ctx: &FfiCallContext<'_>,
    request: RStr<'_>,
) -> FfiFuture<RResult<RString, RString>> {
    // SAFETY: as above.
    let answer = unsafe { host(ctx) }.child_turn(request.as_str());
    // A child turn answers with its text, not JSON.
    let wire = match answer {
        Ok(text) => RResult::ROk(RString::from(text)),
        Err(e) => RResult::RErr(RString::from(e.to_wire())),
    };
    async move { wire }.into_ffi()
}

unsafe extern "C" fn host_host_request(
    ctx: &FfiCallContext<'_>,
    method: RStr<'_>,
    params: RStr<'_>,
) -> FfiFuture<RResult<RString, RString>> {
    // SAFETY: as above.
    ready(unsafe { host(ctx) }.host_request(method.as_str(), params.as_str()))
}

/// Reads back an answer the scripts' encoding wrote.
fn decode<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, ServiceError> {
    serde_json::from_str(text).map_err(|e| ServiceError::Failed(e.to_string()))
}
