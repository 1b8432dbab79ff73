//! Calls that run as tasks (MCP's tasks extension, `io.modelcontextprotocol/tasks`): a
//! call whose tool declares task support and whose sessionless client holds tasks goes
//! on in the background once the plugin detaches it; the client polls `tasks/get` for
//! its status, questions and result, answers with `tasks/update` and stops it with
//! `tasks/cancel`. Each task belongs to the caller that started it (its token and client):
//! another caller is told it does not exist. rmcp's task manager keeps their state.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, DetailedTask, Task};
use rmcp::task_manager::{TaskContext, TaskExit, TaskManager, TaskOptions};
use serde_json::Value;
use tokio::sync::mpsc;

use super::caller::Question;
use super::suspended::{Owner, Running};
use toolhost_calls::result::{CallErrorKind, ToolResult};

/// At most this many tasks of one caller run at once; past it a call does not detach
/// (its caller waits for it, as for any call).
const MAX_PER_CALLER: usize = 32;
/// At most this many tasks run on this server.
const MAX_RUNNING: usize = 1024;
/// At most this many tasks of one caller are kept (running, or finished with their
/// result), and this many in all: results are held for their clients, bounded.
const MAX_KEPT_PER_CALLER: usize = 256;
const MAX_KEPT: usize = 4096;
/// How long a task is kept: a call still running then is stopped (failed), a finished
/// one's result is kept as long again for its client to read.
const TASK_TTL_MS: u64 = 60 * 60 * 1000;
/// How often clients are asked to poll.
const POLL_INTERVAL_MS: u64 = 500;

/// The tasks of one MCP server and who started each.
#[derive(Default)]
pub(super) struct Tasks {
    manager: TaskManager,
    /// Each task's owner and when it was made (a task is gone two lifetimes after).
    owners: Mutex<HashMap<String, (Owner, std::time::Instant)>>,
    /// This replica's name, when it is one of many: a task runs on the replica that
    /// started it, and a request for it that reaches another is told so.
    replica: Option<String>,
}

impl Tasks {
    /// The tasks of replica `replica` (`None`: a single host).
    pub(super) fn new(replica: Option<String>) -> Tasks {
        Tasks {
            manager: TaskManager::default(),
            owners: Mutex::default(),
            replica,
        }
    }

    /// Runs `run` on as a task of `owner`'s, or hands it back when the caller (or the
    /// server) runs as many tasks as it may.
    #[allow(
        clippy::result_large_err,
        reason = "the refusal hands the call back whole, to go on in its request"
    )]
    pub(super) fn start(&self, owner: Owner, run: Running, tool: String) -> Result<Task, Running> {
        let mut owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
        // The manager lets a task go at most two lifetimes after it was made (one to run,
        // one to keep its result): forget those, and count the rest as kept.
        let gone_after = std::time::Duration::from_millis(2 * TASK_TTL_MS);
        owners.retain(|_, (_, made)| made.elapsed() < gone_after);
        // Counted by token (and connection), not by the client's self-chosen name.
        let kept_by_caller = owners
            .values()
            .filter(|(o, _)| o.same_quota(&owner))
            .count();
        let running = |id: &String| {
            self.manager
                .get_task(id)
                .is_ok_and(|t| !t.task.status.is_terminal())
        };
        let mine = owners
            .iter()
            .filter(|(id, (o, _))| o.same_quota(&owner) && running(id))
            .count();
        if mine >= MAX_PER_CALLER
            || kept_by_caller >= MAX_KEPT_PER_CALLER
            || owners.len() >= MAX_KEPT
            || self.manager.running_task_count() >= MAX_RUNNING
        {
            return Err(run);
        }
        let options = TaskOptions::new()
            .with_ttl_ms(TASK_TTL_MS)
            .with_poll_interval_ms(POLL_INTERVAL_MS);
        let task = self.manager.spawn(options, move |context| {
            Box::pin(run_task(run, context, tool))
        });
        owners.insert(task.task_id.clone(), (owner, std::time::Instant::now()));
        Ok(task)
    }

    /// The task `id` if `owner` started it (else, as for an id nobody knows, -32602).
    fn check(&self, id: &str, owner: &Owner) -> Result<(), McpError> {
        let owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
        match owners.get(id) {
            Some((o, _)) if o == owner => Ok(()),
            _ => Err(McpError::invalid_params(
                match &self.replica {
                    None => format!(
                        "unknown task '{id}': no task of this client has that id (it may have \
                         expired)"
                    ),
                    Some(replica) => format!(
                        "unknown task '{id}': no task of this client has that id on replica \
                         '{replica}' (it may have expired, or run on another replica: a task \
                         stays on the replica that started it, so send its requests there)"
                    ),
                },
                None,
            )),
        }
    }

    /// `tasks/get`.
    pub(super) fn get(&self, id: &str, owner: &Owner) -> Result<DetailedTask, McpError> {
        self.check(id, owner)?;
        self.manager.get_task(id)
    }

    /// `tasks/update`: the client's answers to the task's questions.
    pub(super) fn update(
        &self,
        id: &str,
        owner: &Owner,
        responses: impl IntoIterator<Item = (String, Value)>,
    ) -> Result<(), McpError> {
        self.check(id, owner)?;
        self.manager.update_task(id, responses)
    }

    /// `tasks/cancel`: the plugin's call is cancelled; the task settles as `cancelled`.
    pub(super) fn cancel(&self, id: &str, owner: &Owner) -> Result<(), McpError> {
        self.check(id, owner)?;
        self.manager.cancel_task(id)
    }
}

impl Drop for Tasks {
    /// The server is going away: its tasks' calls stop.
    fn drop(&mut self) {
        self.manager.shutdown();
    }
}

/// Runs a detached call to its end as the task `task`: its questions become the task's
/// input requests, its progress the task's status message, and `tasks/cancel` cancels it.
async fn run_task(
    mut run: Running,
    task: TaskContext,
    tool: String,
) -> Result<CallToolResult, TaskExit> {
    run.caller.run_as(task.clone());
    loop {
        tokio::select! {
            biased;
            result = &mut run.task => {
                let result = result.unwrap_or_else(|e| super::outputs::lost(&tool, &e));
                return outcome(result, &tool);
            }
            Some(question) = run.questions.recv() => ask(question, &task),
            () = task.cancelled() => {
                run.cancel.cancel();
                stop(&mut run.questions, &mut run.task).await;
                return Err(TaskExit::Cancelled);
            }
        }
    }
}

/// What a running task's plugin asked: questions go to the task's client.
fn ask(question: Question, task: &TaskContext) {
    match question {
        Question::Inputs(inputs) => {
            tokio::spawn(inputs.ask_task(task.clone()));
        }
        Question::Detach(ack) => {
            let _ = ack.send(true);
        }
    }
}

/// Waits for a cancelled call to stop, answering what it asks meanwhile "cancelled".
async fn stop(
    questions: &mut mpsc::Receiver<Question>,
    call: &mut tokio::task::JoinHandle<ToolResult>,
) {
    loop {
        tokio::select! {
            biased;
            _ = &mut *call => return,
            Some(question) = questions.recv() => match question {
                Question::Detach(ack) => {
                    let _ = ack.send(true);
                }
                // Dropped unanswered: the plugin is told nobody answered.
                Question::Inputs(_) => {}
            },
        }
    }
}

/// A finished call as its task settles: the result (a tool's error included, as
/// `completed` with `isError`), `cancelled`, or `failed` when the plugin crashed.
fn outcome(result: ToolResult, tool: &str) -> Result<CallToolResult, TaskExit> {
    match result.error {
        Some(CallErrorKind::Cancelled) => Err(TaskExit::Cancelled),
        Some(CallErrorKind::Panicked) => Err(TaskExit::Error(McpError::internal_error(
            result.output,
            None,
        ))),
        _ => Ok(super::outputs::complete(result, tool)),
    }
}
