//! A tool of a plugin that runs in workers, as the host's [`DynTool`]: a call goes to the
//! worker of the caller's profile (started if none runs), waits for its answer, tells the
//! worker when the caller cancels or gives up, and gets the worker killed when a call
//! ignores that for `kill_after_cancel` (the only way to stop a stuck native call). A call
//! that never reached its worker is tried once more on a fresh one. A call that failed on
//! a refused access gets a note saying what the sandbox allows (`refusal`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::oneshot;

use super::connection::{Connection, Outcome, Pending};
use super::protocol::{self, CallFrame, ToWorker};
use super::supervisor::WorkerPlugin;
use super::worker_profile;
use toolhost_calls::context::CallContext;
use toolhost_calls::tool::{Arguments, DynTool, ToolError, ToolOrigin, ToolOutput, ToolSpec};

impl WorkerPlugin {
    /// The plugin's tools as host tools (the plugin at `version`), whose plugin's settings
    /// requests are answered with `settings`.
    pub(crate) fn tools(
        self: &Arc<Self>,
        specs: Vec<ToolSpec>,
        version: &str,
        settings: Arc<toolhost_plugin_api::SettingsAnswer>,
    ) -> Vec<Arc<dyn DynTool>> {
        let origin = ToolOrigin::Plugin {
            plugin: Arc::clone(&self.name),
            file: Arc::new(self.file.clone()),
            sha256: Arc::from(self.sha256.as_str()),
            version: Arc::new(version.to_owned()),
        };
        specs
            .into_iter()
            .enumerate()
            .map(|(index, spec)| {
                Arc::new(WorkerTool {
                    plugin: Arc::clone(self),
                    index: u32::try_from(index).unwrap_or(u32::MAX),
                    name: Arc::from(spec.name.as_str()),
                    spec,
                    origin: origin.clone(),
                    settings: Arc::clone(&settings),
                }) as Arc<dyn DynTool>
            })
            .collect()
    }
}

/// A tool of a plugin that runs in workers.
struct WorkerTool {
    plugin: Arc<WorkerPlugin>,
    index: u32,
    name: Arc<str>,
    spec: ToolSpec,
    origin: ToolOrigin,
    /// The plugin's settings, answered to its calls' `plugin.settings` requests.
    settings: Arc<toolhost_plugin_api::SettingsAnswer>,
}

/// Tells the worker to drop a call whose future the host dropped while the worker still
/// runs it, and kills the worker if the call does not end within the allowed time.
struct InFlight {
    conn: Arc<Connection>,
    id: u64,
    kill_after: Duration,
    tool: Arc<str>,
    done: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.done || !self.conn.is_pending(self.id) {
            return;
        }
        let _ = self.conn.send(&ToWorker::Abandon { id: self.id });
        let (conn, id, kill_after, tool) = (
            Arc::clone(&self.conn),
            self.id,
            self.kill_after,
            Arc::clone(&self.tool),
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                tokio::time::sleep(kill_after).await;
                if conn.alive() && conn.is_pending(id) {
                    conn.kill(&format!(
                        "its call to '{tool}' was still running {} ms after its caller gave \
                         up (the only way to stop a stuck native call)",
                        kill_after.as_millis()
                    ));
                }
            });
        }
    }
}

#[async_trait]
impl DynTool for WorkerTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn origin(&self) -> &ToolOrigin {
        &self.origin
    }

    fn isolated(&self) -> bool {
        true
    }

    async fn call(&self, ctx: &CallContext, args: Arguments) -> Result<ToolOutput, ToolError> {
        // The caller's text crosses as it came (written out only if there was none).
        let args = args.into_text();
        // A call with a profile's state (the agent, MCP, `toolhost call --profile`) runs in
        // that profile's worker; one without (a control-socket call, a test) in the
        // default profile's.
        let profile = match &ctx.services.requests {
            Some(_) if !worker_profile(&ctx.turn.profile_id).is_empty() => {
                ctx.turn.profile_id.as_str()
            }
            _ => self.plugin.policy.default_profile.as_str(),
        };
        // A call that never reached its worker (it died as the call started, or the frame
        // could not be written to it) is tried once more on a fresh worker: nothing of it
        // ran, so nothing runs twice.
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.try_call(ctx, profile, &args).await {
                Err(NotSent::Retry(conn, why)) if attempt == 1 => {
                    tracing::debug!(
                        plugin = &*self.plugin.name,
                        "a call did not reach its worker ({why}); trying a fresh worker"
                    );
                    conn.wait_dead().await;
                }
                Err(NotSent::Retry(_, why) | NotSent::Fail(why)) => {
                    return Err(ToolError::Failed(why));
                }
                Ok(result) => return self.explained(result, profile),
            }
        }
    }
}

impl WorkerTool {
    /// `result`, with a note on what the worker's sandbox allows when it failed on a
    /// refused access.
    fn explained(
        &self,
        result: Result<ToolOutput, ToolError>,
        profile: &str,
    ) -> Result<ToolOutput, ToolError> {
        let note = |text: &str| {
            super::refusal::explain(
                text,
                &self.plugin.policy,
                super::refusal::Worker {
                    plugin: &self.plugin.name,
                    profile,
                    workspace: self.plugin.has_workspace(),
                },
            )
        };
        match result {
            Err(ToolError::Failed(message)) => Err(ToolError::Failed(match note(&message) {
                Some(n) => format!("{message}\n\n{n}"),
                None => message,
            })),
            Ok(mut output) if output.is_error => {
                if let Some(n) = note(&output.text) {
                    output.text = format!("{}\n\n{n}", output.text);
                }
                Ok(output)
            }
            other => other,
        }
    }
}

/// Why a call did not reach its worker.
enum NotSent {
    /// The worker died before it could get the call: a fresh one may take it.
    Retry(Arc<Connection>, String),
    /// The call cannot be sent at all (too large, no worker can start).
    Fail(String),
}

impl WorkerTool {
    /// One try: the profile's worker, the call sent to it, its answer.
    async fn try_call(
        &self,
        ctx: &CallContext,
        profile: &str,
        args: &str,
    ) -> Result<Result<ToolOutput, ToolError>, NotSent> {
        let args = args.to_owned();
        let conn = self
            .plugin
            .connection(profile)
            .await
            .map_err(|e| NotSent::Fail(e.to_string()))?;
        let (tx, mut rx) = oneshot::channel();
        let begun = conn.begin(Pending {
            tx,
            services: ctx.services.clone(),
            turn: Arc::clone(&ctx.turn),
            cancel: ctx.cancel.clone(),
            runtime: tokio::runtime::Handle::current(),
            tool: Arc::clone(&self.name),
            settings: Arc::clone(&self.settings),
        });
        let Some(id) = begun else {
            return Err(NotSent::Retry(
                Arc::clone(&conn),
                format!(
                    "plugin '{}' lost its worker as the call started; the next call starts \
                     a fresh one",
                    self.plugin.name
                ),
            ));
        };
        let mut in_flight = InFlight {
            conn: Arc::clone(&conn),
            id,
            kill_after: self.plugin.policy.kill_after_cancel,
            tool: Arc::clone(&self.name),
            done: false,
        };
        let frame = CallFrame {
            id,
            tool: self.index,
            args,
            profile_id: ctx.turn.profile_id.clone(),
            session_id: ctx.turn.session_id.clone(),
            model: ctx.turn.model.clone(),
            caller: ctx.services.caller.is_some(),
            child_turns: ctx.services.child_turns.is_some(),
            requests: ctx.services.requests.is_some(),
            budget: (ctx.services.budget.max_chars, ctx.services.budget.max_lines),
        };
        // A call whose frame is refused (too large to encode, or the write failed, which
        // also kills the worker) fails now, not at its timeout.
        if let Err(why) = conn.send(&ToWorker::Call(Box::new(frame))) {
            in_flight.done = true;
            conn.forget(id);
            let message = format!(
                "plugin '{}': the call to '{}' could not be sent to its worker: {why}",
                self.plugin.name, self.name
            );
            // A write that failed killed the worker; a frame too large to encode did not.
            return Err(if conn.dying() {
                NotSent::Retry(Arc::clone(&conn), message)
            } else {
                NotSent::Fail(message)
            });
        }
        // A quick tool answers within microseconds: look for it for a moment before
        // sleeping, which would cost a wake-up of this thread (tens of microseconds on a
        // small VM) on top of the worker's.
        let spin_until = std::time::Instant::now() + protocol::SPIN;
        let mut early = None;
        while std::time::Instant::now() < spin_until {
            match rx.try_recv() {
                Ok(outcome) => {
                    early = Some(Ok(outcome));
                    break;
                }
                Err(oneshot::error::TryRecvError::Empty) => std::thread::yield_now(),
                Err(oneshot::error::TryRecvError::Closed) => break,
            }
        }
        let outcome = if let Some(outcome) = early {
            outcome
        } else {
            self.wait(&conn, id, ctx, &mut rx).await
        };
        in_flight.done = true;
        Ok(match outcome {
            Ok(Ok(result)) => result,
            Ok(Err(stopped)) => Err(ToolError::Failed(stopped.to_string())),
            Err(_) => Err(ToolError::Failed(format!(
                "plugin '{}' lost its worker during the call",
                self.plugin.name
            ))),
        })
    }
}

impl WorkerTool {
    /// Waits for the call's answer; on a cancel, tells the worker and kills it if the call
    /// ignores that for `kill_after_cancel`.
    async fn wait(
        &self,
        conn: &Connection,
        id: u64,
        ctx: &CallContext,
        rx: &mut oneshot::Receiver<Outcome>,
    ) -> Result<Outcome, oneshot::error::RecvError> {
        let kill_after = self.plugin.policy.kill_after_cancel;
        tokio::select! {
            outcome = &mut *rx => outcome,
            () = ctx.cancel.cancelled() => {
                let _ = conn.send(&ToWorker::Cancel { id });
                match tokio::time::timeout(kill_after, &mut *rx).await {
                    Ok(outcome) => outcome,
                    Err(_) => {
                        conn.kill(&format!(
                            "its call to '{}' ignored cancellation for {} ms (the only way \
                             to stop a stuck native call)",
                            self.name,
                            kill_after.as_millis()
                        ));
                        rx.await
                    }
                }
            }
        }
    }
}
