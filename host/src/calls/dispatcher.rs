//! The dispatcher: runs the tool calls of one model response. Calls run concurrently, or
//! one at a time when any of them is interactive; results come back in the order asked.
//! Every failure (unknown tool, refused by policy, invalid arguments, tool error, panic,
//! timeout, cancellation) is a result with `is_error: true`, never an early return.

use std::fmt::Write as _;
use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use toolhost_plugin_api::{CatchUnwind, take_message};

use crate::calls::context::{CallContext, Turn};
use crate::calls::policy::{CallPolicy, Refusal, denied_message};
use crate::calls::registry::{RegisteredTool, ToolRegistry};
use crate::calls::stats::CallObserver;
use crate::calls::tool::ToolError;

/// One call the model asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The model's id for the call, echoed in the result.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments object.
    pub arguments: Value,
}

/// The outcome of one call, as it goes back to the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolResult {
    /// The id of the call.
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// The tool's output, or the error message.
    pub output: String,
    /// Whether `output` is an error.
    pub is_error: bool,
    /// What kind of error, if any.
    pub error: Option<CallErrorKind>,
    /// How long the call took, policy and validation included.
    #[serde(serialize_with = "serialize_secs")]
    pub elapsed: Duration,
}

fn serialize_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// Why a call ended in an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallErrorKind {
    /// No tool with that name.
    ToolNotFound,
    /// The tool is switched off by policy.
    Denied,
    /// The call needed approval that was not given.
    NotApproved,
    /// The tool's requirements (environment, programs) are not met.
    Unavailable,
    /// The arguments violated the schema, or the tool said they made no sense.
    InvalidArgs,
    /// The tool ran and failed.
    Failed,
    /// Host-side tool code panicked (plugin panics are caught in the plugin: `Failed`).
    Panicked,
    /// The call ran past its timeout.
    TimedOut,
    /// The turn was cancelled.
    Cancelled,
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

/// Runs tool calls against a registry under a policy.
#[derive(Clone)]
pub struct Dispatcher {
    config: DispatchConfig,
    policy: Arc<dyn CallPolicy>,
    observer: Option<Arc<dyn CallObserver>>,
    /// Per-tool limits that replace `config`'s (for a tool that waits on others, such as
    /// delegate_task, whose limit the agent sizes to its child turns).
    tool_timeouts: Arc<std::collections::HashMap<String, Duration>>,
}

impl Dispatcher {
    /// A dispatcher with these settings and policy.
    pub fn new(config: DispatchConfig, policy: Arc<dyn CallPolicy>) -> Self {
        Dispatcher {
            config,
            policy,
            observer: None,
            tool_timeouts: Arc::default(),
        }
    }

    /// The same dispatcher, with these tools' calls limited to their own durations.
    pub fn with_tool_timeouts(
        mut self,
        timeouts: impl IntoIterator<Item = (String, Duration)>,
    ) -> Self {
        let mut all = (*self.tool_timeouts).clone();
        all.extend(timeouts);
        self.tool_timeouts = Arc::new(all);
        self
    }

    /// The same dispatcher, reporting every call result to `observer` (e.g. [`CallStats`](crate::CallStats)).
    pub fn with_observer(mut self, observer: Arc<dyn CallObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// The same dispatcher (policy, observer) with other settings.
    pub fn with_config(&self, config: DispatchConfig) -> Self {
        Dispatcher {
            config,
            ..self.clone()
        }
    }

    /// The same dispatcher (settings, observer) under another policy.
    pub fn with_policy(&self, policy: Arc<dyn CallPolicy>) -> Self {
        Dispatcher {
            policy,
            ..self.clone()
        }
    }

    /// The settings.
    pub fn config(&self) -> DispatchConfig {
        self.config
    }

    /// Runs the calls of one model response and returns one result per call, in the
    /// order of `calls`. They run concurrently on the runtime's workers, or one at a time
    /// if any of them is interactive. Dropping the returned future cancels the calls.
    pub async fn dispatch(
        &self,
        registry: &ToolRegistry,
        turn: &Turn,
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
            let entry = registry.get(&call.name).cloned();
            let missing = entry
                .is_none()
                .then(|| unknown_tool_message(&call.name, registry));
            let turn = turn.clone();
            let this = self.clone();
            tokio::spawn(async move {
                let entry = match (&entry, missing) {
                    (Some(e), _) => Ok(e),
                    (None, m) => Err(m.unwrap_or_default()),
                };
                this.job(entry, &turn, call).run().await
            })
        });
        let mut handles = TaskGroup(tasks.collect());
        let mut results = Vec::with_capacity(handles.0.len());
        for (handle, (call_id, name)) in handles.0.iter_mut().zip(names) {
            results.push(match handle.await {
                Ok(r) => r,
                Err(e) => ToolResult {
                    output: format!("the call of tool '{name}' ended abnormally in the host: {e}"),
                    call_id,
                    name,
                    is_error: true,
                    error: Some(CallErrorKind::Panicked),
                    elapsed: Duration::ZERO,
                },
            });
        }
        results
    }

    /// Runs one call.
    pub async fn call(&self, registry: &ToolRegistry, turn: &Turn, call: ToolCall) -> ToolResult {
        let entry = registry
            .get(&call.name)
            .ok_or_else(|| unknown_tool_message(&call.name, registry));
        self.job(entry, turn, call).run().await
    }

    fn job<'a>(
        &'a self,
        entry: Result<&'a RegisteredTool, String>,
        turn: &'a Turn,
        call: ToolCall,
    ) -> CallJob<'a> {
        CallJob {
            entry,
            call,
            turn,
            policy: self.policy.as_ref(),
            observer: self.observer.as_deref(),
            config: self.config,
            tool_timeouts: &self.tool_timeouts,
        }
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

/// One call, borrowing what it needs from the dispatcher and the turn (no clones on the
/// one-call path).
struct CallJob<'a> {
    entry: Result<&'a RegisteredTool, String>,
    call: ToolCall,
    turn: &'a Turn,
    policy: &'a dyn CallPolicy,
    observer: Option<&'a dyn CallObserver>,
    config: DispatchConfig,
    tool_timeouts: &'a std::collections::HashMap<String, Duration>,
}

enum Stop {
    TimedOut,
    Cancelled,
}

impl CallJob<'_> {
    async fn run(mut self) -> ToolResult {
        let observer = self.observer.take();
        let result = self.run_inner().await;
        if let Some(o) = observer {
            o.record(&result);
        }
        result
    }

    async fn run_inner(self) -> ToolResult {
        let start = Instant::now();
        let CallJob {
            entry,
            call,
            turn,
            policy,
            observer: _,
            config,
            tool_timeouts,
        } = self;
        let ToolCall {
            id,
            name,
            arguments,
        } = call;
        let done = |output: String, error: Option<CallErrorKind>| ToolResult {
            call_id: id.clone(),
            name: name.clone(),
            is_error: error.is_some(),
            output,
            error,
            elapsed: start.elapsed(),
        };
        if turn.cancel.is_cancelled() {
            return done(
                format!("tool '{name}' was not started: the turn was cancelled"),
                Some(CallErrorKind::Cancelled),
            );
        }
        let entry = match entry {
            Ok(e) => e,
            Err(msg) => return done(msg, Some(CallErrorKind::ToolNotFound)),
        };
        // A tool switched off is refused before anything else, whatever its arguments.
        if entry.spec().risk == crate::Risk::Deny {
            return done(denied_message(entry.spec()), Some(CallErrorKind::Denied));
        }
        // Validate first: nobody should be asked to approve a call that cannot run.
        match std::panic::catch_unwind(AssertUnwindSafe(|| entry.validate(&arguments))) {
            Ok(Ok(())) => {}
            Ok(Err(problems)) => {
                return done(
                    format!("invalid arguments: {problems}"),
                    Some(CallErrorKind::InvalidArgs),
                );
            }
            Err(panic) => {
                return done(
                    format!(
                        "validating the arguments of tool '{name}' failed in the host: {}",
                        take_message(panic)
                    ),
                    Some(CallErrorKind::Panicked),
                );
            }
        }
        // The check may wait for a person; stopping the turn stops the wait.
        let checked = tokio::select! {
            // The check first: most finish at once, and the cancel branch is then never
            // polled (polling it registers a waiter on the token).
            biased;
            checked = CatchUnwind::new(policy.check(entry.tool().as_ref(), &arguments, &turn.info)) => checked,
            () = turn.cancel.cancelled() => {
                return done(
                    format!("tool '{name}' was cancelled while waiting for approval"),
                    Some(CallErrorKind::Cancelled),
                );
            }
        };
        match checked {
            Ok(Ok(())) => {}
            Ok(Err(Refusal::Denied(m))) => return done(m, Some(CallErrorKind::Denied)),
            Ok(Err(Refusal::NotApproved(m))) => return done(m, Some(CallErrorKind::NotApproved)),
            Ok(Err(Refusal::Unavailable(m))) => return done(m, Some(CallErrorKind::Unavailable)),
            Err(panic) => {
                return done(
                    format!("the policy check of tool '{name}' failed in the host: {panic}"),
                    Some(CallErrorKind::Panicked),
                );
            }
        }
        let limit = match tool_timeouts.get(&name) {
            Some(limit) => *limit,
            None if entry.spec().interactive => config.interactive_timeout,
            None => config.timeout,
        };
        let cancel = turn.cancel.child_token();
        let ctx = CallContext {
            turn: Arc::clone(&turn.info),
            cancel: cancel.clone(),
            services: turn.services.clone(),
        };
        // The time limit counts the tool's own run, not the policy check before it.
        let running = Instant::now();
        let mut future = pin!(CatchUnwind::new(entry.tool().call(&ctx, arguments)));
        let stop = tokio::select! {
            biased;
            outcome = &mut future => {
                return match outcome {
                    Ok(Ok(output)) => done(output, None),
                    Ok(Err(ToolError::InvalidArgs(m))) => {
                        done(format!("invalid arguments: {m}"), Some(CallErrorKind::InvalidArgs))
                    }
                    // A tool that stops with an error because its turn was cancelled
                    // reports the cancellation, not a failure.
                    Ok(Err(ToolError::Failed(m))) if turn.cancel.is_cancelled() => done(
                        format!(
                            "tool '{name}' was cancelled after {:.1} s: {m}",
                            running.elapsed().as_secs_f64()
                        ),
                        Some(CallErrorKind::Cancelled),
                    ),
                    Ok(Err(ToolError::Failed(m))) => done(m, Some(CallErrorKind::Failed)),
                    Err(panic) => done(
                        format!("tool '{name}' panicked: {panic}"),
                        Some(CallErrorKind::Panicked),
                    ),
                };
            }
            () = turn.cancel.cancelled() => Stop::Cancelled,
            () = tokio::time::sleep(limit) => Stop::TimedOut,
        };
        let ran = running.elapsed().as_secs_f64();
        // Tell the tool, give it a moment to wind down, then drop it.
        cancel.cancel();
        let _ = tokio::time::timeout(config.cancel_grace, &mut future).await;
        match stop {
            Stop::TimedOut => done(
                format!(
                    "tool '{name}' timed out after {ran:.1} s (the limit is {:.1} s) and was cancelled",
                    limit.as_secs_f64()
                ),
                Some(CallErrorKind::TimedOut),
            ),
            Stop::Cancelled => done(
                format!("tool '{name}' was cancelled after {ran:.1} s"),
                Some(CallErrorKind::Cancelled),
            ),
        }
    }
}
