//! The dispatcher: runs the tool calls of one model response. Calls run concurrently, or
//! one at a time when any of them is interactive; results come back in the order asked.
//! Every failure (unknown tool, refused by policy, invalid arguments, tool error, panic,
//! timeout, cancellation) is a result with `is_error: true`, never an early return.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use toolhost_plugin_api::{CatchUnwind, ToolOutput, take_message};

use crate::context::CallContext;
use crate::decision::Decision;
use crate::policy::{CallPolicy, Refusal, denied_message};
use crate::registry::{RegisteredTool, ToolRegistry};
use crate::result::{CallErrorKind, ToolResult};
use crate::tool::{Arguments, Risk, ToolError};

/// One call the model asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The model's id for the call, echoed in the result.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments object (and the caller's JSON text of it, if it sent text).
    pub arguments: Arguments,
}

impl ToolCall {
    /// A call of `name` with `arguments` (a JSON value, or [`Arguments::parse`]d text).
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<Arguments>,
    ) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }
}

/// Sees every call the [`CallDoor`](crate::door::CallDoor) runs, with who called and how it
/// ended, as the caller got it (after the output budget; e.g.
/// [`CallStats`](crate::stats::CallStats)). The door is the one place observers are registered.
pub trait CallObserver: Send + Sync {
    /// Called once per call, after it ended; `ctx` is the context it ran in (profile,
    /// session, caller).
    fn record(&self, ctx: &CallContext, result: &ToolResult);

    /// What the [`CallDoor`](crate::door::CallDoor) calls once per call, after the output
    /// budget: the result as the caller gets it, with the tool that was called (if it
    /// exists) and its arguments (if [`CallObserver::wants_arguments`]). An observer that
    /// must not lose a record (the audit log) may return a wait the call then awaits
    /// before it returns, rather than drop it. The default calls
    /// [`CallObserver::record`].
    fn observe(&self, ctx: &CallContext, call: &ObservedCall<'_>) -> Option<ObserverWait> {
        self.record(ctx, call.result);
        None
    }

    /// Whether [`CallObserver::observe`] needs the call's arguments (the door then keeps
    /// a copy of them for it).
    fn wants_arguments(&self) -> bool {
        false
    }
}

/// A wait an observer asks a call to finish before it returns (see
/// [`CallObserver::observe`]).
pub type ObserverWait = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// One ended call as the door's observers see it.
pub struct ObservedCall<'a> {
    /// The result, as the caller gets it (held to the output budget; `decision` says how
    /// admission decided).
    pub result: &'a ToolResult,
    /// The tool called, when the profile has one of that name.
    pub tool: Option<&'a dyn crate::tool::DynTool>,
    /// The call's arguments, when an observer asked for them.
    pub arguments: Option<&'a Value>,
}

/// Dispatcher settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DispatchConfig {
    /// How long one call may run before it is cancelled.
    pub timeout: Duration,
    /// The same for interactive tools, which wait for a person (an editor, a question).
    pub interactive_timeout: Duration,
    /// After a timeout or cancellation, how long the tool gets to notice its cancel signal
    /// and return before its future is dropped.
    pub cancel_grace: Duration,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        DispatchConfig {
            timeout: Duration::from_secs(60),
            interactive_timeout: Duration::from_secs(15 * 60),
            cancel_grace: Duration::from_secs(2),
        }
    }
}

/// A batch's time limits: the settings, and per-tool limits that replace them (for a
/// tool that waits on others, such as delegate_task, whose limit the agent sizes to its
/// child turns). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Limits {
    /// The limits every tool gets.
    pub config: DispatchConfig,
    /// Tools whose calls are limited to their own durations.
    pub tool_timeouts: Arc<HashMap<String, Duration>>,
}

impl Limits {
    /// `config` for every tool.
    pub fn new(config: DispatchConfig) -> Limits {
        Limits {
            config,
            tool_timeouts: Arc::default(),
        }
    }

    /// The same limits, with these tools' calls limited to their own durations.
    pub fn with_tool_timeouts(
        mut self,
        timeouts: impl IntoIterator<Item = (String, Duration)>,
    ) -> Limits {
        let mut all = (*self.tool_timeouts).clone();
        all.extend(timeouts);
        self.tool_timeouts = Arc::new(all);
        self
    }

    /// These limits held to `cap` (a request's shorter limit), or `None` when `cap`
    /// shortens none of them.
    pub fn capped(&self, cap: Duration) -> Option<Limits> {
        let c = self.config;
        (cap < c.timeout || cap < c.interactive_timeout).then(|| Limits {
            config: DispatchConfig {
                timeout: cap.min(c.timeout),
                interactive_timeout: cap.min(c.interactive_timeout),
                ..c
            },
            tool_timeouts: Arc::clone(&self.tool_timeouts),
        })
    }

    /// How long a call of `spec`'s tool may run.
    fn for_tool(&self, spec: &crate::tool::ToolSpec) -> Duration {
        match self.tool_timeouts.get(&spec.name) {
            Some(limit) => *limit,
            None if spec.interactive => self.config.interactive_timeout,
            None => self.config.timeout,
        }
    }
}

/// What a request's calls run under: the policy that admits them and their time limits.
/// The dispatcher itself holds nothing ([`admit`] and [`execute`] take what they need);
/// the [`CallDoor`](crate::door::CallDoor) makes one plan per request, from its one
/// policy and its limits with the request's approver and cap. Cheap to clone.
#[derive(Clone)]
pub struct Plan {
    /// Admits each call (availability, approval).
    pub policy: Arc<dyn CallPolicy>,
    /// How long each call may run.
    pub limits: Limits,
}

impl Plan {
    /// A plan with these settings and policy.
    pub fn new(config: DispatchConfig, policy: Arc<dyn CallPolicy>) -> Self {
        Plan {
            policy,
            limits: Limits::new(config),
        }
    }

    /// The same plan, with these tools' calls limited to their own durations.
    pub fn with_tool_timeouts(
        mut self,
        timeouts: impl IntoIterator<Item = (String, Duration)>,
    ) -> Self {
        self.limits = self.limits.with_tool_timeouts(timeouts);
        self
    }

    /// Runs the calls of one model response and returns one result per call, in the
    /// order of `calls`. They run concurrently on the runtime's workers, or one at a time
    /// if any of them is interactive. Dropping the returned future cancels the calls.
    pub async fn dispatch(
        &self,
        registry: &ToolRegistry,
        turn: &CallContext,
        calls: Vec<ToolCall>,
    ) -> Vec<ToolResult> {
        let sequential = calls.len() < 2
            || calls
                .iter()
                .any(|c| registry.get(&c.name).is_some_and(|e| e.spec().interactive));
        if sequential {
            let mut results = Vec::with_capacity(calls.len());
            for call in calls {
                results.push(self.call(registry, turn, call).await);
            }
            return results;
        }
        let names: Vec<(String, String)> = calls
            .iter()
            .map(|c| (c.id.clone(), c.name.clone()))
            .collect();
        let tasks = calls.into_iter().map(|call| {
            let entry = registry
                .get(&call.name)
                .cloned()
                .ok_or_else(|| UnknownTool::new(&call.name, registry));
            let turn = turn.clone();
            let plan = self.clone();
            tokio::spawn(async move {
                match entry {
                    Ok(e) => run(&plan, Ok(&e), &turn, call).await,
                    Err(unknown) => run(&plan, Err(unknown), &turn, call).await,
                }
            })
        });
        let mut handles = TaskGroup(tasks.collect());
        let mut results = Vec::with_capacity(handles.0.len());
        for (handle, (call_id, name)) in handles.0.iter_mut().zip(names) {
            results.push(match handle.await {
                Ok(r) => r,
                Err(e) => {
                    let message =
                        format!("the call of tool '{name}' ended abnormally in the host: {e}");
                    ToolResult::refused(call_id, name, message, CallErrorKind::Panicked)
                }
            });
        }
        results
    }

    /// Runs one call.
    pub async fn call(
        &self,
        registry: &ToolRegistry,
        turn: &CallContext,
        call: ToolCall,
    ) -> ToolResult {
        let entry = registry
            .get(&call.name)
            .ok_or_else(|| UnknownTool::new(&call.name, registry));
        run(self, entry, turn, call).await
    }
}

/// Aborts the tasks of a batch whose dispatch future was dropped.
struct TaskGroup(Vec<JoinHandle<ToolResult>>);

impl Drop for TaskGroup {
    fn drop(&mut self) {
        for h in &self.0 {
            h.abort();
        }
    }
}

/// A call of a tool the registry does not have; says which tools it has.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UnknownTool(String);

impl UnknownTool {
    /// The call of `name`, which `registry` does not have.
    pub fn new(name: &str, registry: &ToolRegistry) -> UnknownTool {
        UnknownTool(unknown_tool_message(name, registry))
    }
}

fn unknown_tool_message(name: &str, registry: &ToolRegistry) -> String {
    let mut msg = format!("unknown tool '{name}'");
    let names = registry.names();
    if names.is_empty() {
        msg.push_str("; no tools are available");
    } else {
        msg.push_str("; available tools: ");
        msg.push_str(
            &names
                .iter()
                .take(30)
                .copied()
                .collect::<Vec<_>>()
                .join(", "),
        );
        if names.len() > 30 {
            let _ = write!(msg, " and {} more", names.len() - 30);
        }
    }
    msg
}

/// Why a call ended without output: the message for the model and its kind.
#[derive(Debug)]
pub struct CallFailure {
    /// What the model is told.
    pub message: String,
    /// Why, for callers that act on it.
    pub kind: CallErrorKind,
}

impl CallFailure {
    /// A failure with this message and kind.
    pub fn new(message: String, kind: CallErrorKind) -> Self {
        CallFailure { message, kind }
    }
}

/// What a failed call says when its tool gave no message (found by the `plugin_tool` fuzz
/// target: an empty failure reached the model as an empty error).
fn unexplained(tool: &str) -> String {
    format!(
        "tool '{tool}' failed without saying why (its error message was empty); the \
         tool's author can make it say what went wrong"
    )
}

enum Stop {
    TimedOut,
    Cancelled,
}

/// Admits one call under `plan` and executes it. (The door's observers see the result,
/// once, after its output budget.)
async fn run(
    plan: &Plan,
    entry: Result<&RegisteredTool, UnknownTool>,
    turn: &CallContext,
    mut call: ToolCall,
) -> ToolResult {
    let start = Instant::now();
    let mut decision = Decision::Undecided;
    let outcome = match admit(plan.policy.as_ref(), entry, &call, turn, &mut decision).await {
        Ok(tool) => {
            let arguments = std::mem::take(&mut call.arguments);
            execute(&plan.limits, tool, &call.id, arguments, turn).await
        }
        Err(refused) => Err(refused),
    };
    let mut result = match outcome {
        Ok(out) => ToolResult {
            call_id: call.id,
            name: call.name,
            is_error: out.is_error,
            output: out.text,
            // A call that ran to the end and did not do what was asked.
            error: out.is_error.then_some(CallErrorKind::Failed),
            elapsed: start.elapsed(),
            structured: out.structured,
            details: out.details,
            content: out.content,
            decision: Decision::Undecided,
        },
        Err(failure) => ToolResult {
            elapsed: start.elapsed(),
            ..ToolResult::refused(call.id, call.name, failure.message, failure.kind)
        },
    };
    result.decision = decision;
    result
}

/// Admission, in order: the turn is still running, the tool exists, it is not
/// switched off (`deny`, the only place that is checked), its arguments are valid
/// (nobody should be asked to approve a call that cannot run), and the policy allows
/// it (availability, approval). Nothing of the tool's code runs here. `decision` is
/// set to what was decided (left undecided when the call stops before that).
pub async fn admit<'a>(
    policy: &dyn CallPolicy,
    entry: Result<&'a RegisteredTool, UnknownTool>,
    call: &ToolCall,
    turn: &CallContext,
    decision: &mut Decision,
) -> Result<&'a RegisteredTool, CallFailure> {
    let name = &call.name;
    if turn.cancel.is_cancelled() {
        return Err(CallFailure::new(
            format!("tool '{name}' was not started: the turn was cancelled"),
            CallErrorKind::Cancelled,
        ));
    }
    let entry = match entry {
        Ok(e) => e,
        Err(unknown) => {
            *decision = Decision::NotFound;
            return Err(CallFailure::new(
                unknown.to_string(),
                CallErrorKind::ToolNotFound,
            ));
        }
    };
    // A tool switched off is refused before anything else, whatever its arguments.
    if entry.spec().risk == Risk::Deny {
        *decision = Decision::Denied;
        return Err(CallFailure::new(
            denied_message(entry.spec()),
            CallErrorKind::Denied,
        ));
    }
    let arguments = call.arguments.value();
    match std::panic::catch_unwind(AssertUnwindSafe(|| entry.validate(arguments))) {
        Ok(Ok(())) => {}
        Ok(Err(problems)) => {
            *decision = Decision::InvalidArguments;
            return Err(CallFailure::new(
                format!("invalid arguments: {problems}"),
                CallErrorKind::SchemaViolation,
            ));
        }
        Err(panic) => {
            return Err(CallFailure::new(
                format!(
                    "validating the arguments of tool '{name}' failed in the host: {}",
                    take_message(panic)
                ),
                CallErrorKind::Panicked,
            ));
        }
    }
    // The check may wait for a person; stopping the turn stops the wait.
    let checked = tokio::select! {
        // The check first: most finish at once, and the cancel branch is then never
        // polled (polling it registers a waiter on the token).
        biased;
        checked = CatchUnwind::new(policy.decide(entry.tool().as_ref(), arguments, &turn.turn)) => checked,
        () = turn.cancel.cancelled() => {
            return Err(CallFailure::new(
                format!("tool '{name}' was cancelled while waiting for approval"),
                CallErrorKind::Cancelled,
            ));
        }
    };
    match checked {
        Ok(Ok(decided)) => {
            *decision = decided;
            Ok(entry)
        }
        Ok(Err(Refusal::Denied(m))) => {
            *decision = Decision::Denied;
            Err(CallFailure::new(m, CallErrorKind::Denied))
        }
        Ok(Err(Refusal::NotApproved(m))) => {
            *decision = Decision::Refused {
                by: "policy".to_owned(),
            };
            Err(CallFailure::new(m, CallErrorKind::NotApproved))
        }
        Ok(Err(Refusal::Pending { by, message })) => {
            *decision = Decision::Pending { by };
            Err(CallFailure::new(message, CallErrorKind::NotApproved))
        }
        Ok(Err(Refusal::Declined { by, message })) => {
            *decision = Decision::Refused { by };
            Err(CallFailure::new(message, CallErrorKind::NotApproved))
        }
        Ok(Err(Refusal::Unavailable(m))) => {
            *decision = Decision::Unavailable;
            Err(CallFailure::new(m, CallErrorKind::Unavailable))
        }
        Err(panic) => Err(CallFailure::new(
            format!("the policy check of tool '{name}' failed in the host: {panic}"),
            CallErrorKind::Panicked,
        )),
    }
}

/// Execution of an admitted call: the tool runs under its time limit (which counts
/// its own run, not the admission before it) and the turn's cancel token; when either
/// stops it, the tool is told, gets the grace period to return, and is then dropped.
pub async fn execute(
    limits: &Limits,
    entry: &RegisteredTool,
    call_id: &str,
    arguments: Arguments,
    turn: &CallContext,
) -> Result<ToolOutput, CallFailure> {
    let name = &entry.spec().name;
    let limit = limits.for_tool(entry.spec());
    let ctx = turn.for_call(call_id);
    let cancel = ctx.cancel.clone();
    let running = Instant::now();
    let mut future = pin!(CatchUnwind::new(entry.tool().call(&ctx, arguments)));
    let stop = tokio::select! {
        biased;
        outcome = &mut future => {
            return match outcome {
                Ok(Ok(mut output)) => match entry.finish_output(&mut output) {
                    Ok(()) => {
                        // A failure the tool gave no words for still tells the model
                        // (and the person reading the log) what happened.
                        if output.is_error
                            && output.text.trim().is_empty()
                            && output.content.is_empty()
                        {
                            output.text = unexplained(name);
                        }
                        Ok(output)
                    }
                    Err(invalid) => Err(CallFailure::new(
                        invalid.to_string(),
                        CallErrorKind::InvalidOutput,
                    )),
                },
                Ok(Err(ToolError::InvalidArgs(m))) if m.trim().is_empty() => {
                    Err(CallFailure::new(
                        format!(
                            "invalid arguments (tool '{name}' did not say which; its schema \
                             says what it takes)"
                        ),
                        CallErrorKind::InvalidArgs,
                    ))
                }
                Ok(Err(ToolError::InvalidArgs(m))) => Err(CallFailure::new(
                    format!("invalid arguments: {m}"),
                    CallErrorKind::InvalidArgs,
                )),
                // A tool that stops with an error because its turn was cancelled
                // reports the cancellation, not a failure.
                Ok(Err(ToolError::Failed(m))) if turn.cancel.is_cancelled() => {
                    Err(CallFailure::new(
                        format!(
                            "tool '{name}' was cancelled after {:.1} s: {m}",
                            running.elapsed().as_secs_f64()
                        ),
                        CallErrorKind::Cancelled,
                    ))
                }
                Ok(Err(ToolError::Failed(m))) if m.trim().is_empty() => {
                    Err(CallFailure::new(unexplained(name), CallErrorKind::Failed))
                }
                Ok(Err(ToolError::Failed(m))) => Err(CallFailure::new(m, CallErrorKind::Failed)),
                Err(panic) => Err(CallFailure::new(
                    format!("tool '{name}' panicked: {panic}"),
                    CallErrorKind::Panicked,
                )),
            };
        }
        () = turn.cancel.cancelled() => Stop::Cancelled,
        () = tokio::time::sleep(limit) => Stop::TimedOut,
    };
    let ran = running.elapsed().as_secs_f64();
    // Tell the tool, give it a moment to wind down, then drop it.
    cancel.cancel();
    let wound_down = tokio::time::timeout(limits.config.cancel_grace, &mut future).await;
    // A tool that stops with its own word on the cancellation gets it passed on (a
    // worker killed because its call ignored the cancel says so).
    let word = match wound_down {
        Ok(Ok(Err(ToolError::Failed(m)))) => format!(": {m}"),
        _ => String::new(),
    };
    Err(match stop {
        Stop::TimedOut => CallFailure::new(
            format!(
                "tool '{name}' timed out after {ran:.1} s (the limit is {:.1} s) and was \
                 cancelled{word}",
                limit.as_secs_f64()
            ),
            CallErrorKind::TimedOut,
        ),
        Stop::Cancelled => CallFailure::new(
            format!("tool '{name}' was cancelled after {ran:.1} s{word}"),
            CallErrorKind::Cancelled,
        ),
    })
}
