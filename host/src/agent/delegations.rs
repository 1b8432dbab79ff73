//! Background delegations: `delegate_task` with `background` (the `agent.delegate` host
//! request) starts child turns that run on after the call returns. This module keeps what
//! is running and the completion queue of each parent session: when a completion unit
//! finishes, its results become a `user` message of the parent's session, marked
//! `[background delegation ID finished: ...]`. While a turn of that session runs, the
//! message waits in the queue and the turn takes it at its next step boundary (after
//! its tool results are stored, before the next model call); with no turn running it is
//! stored at once, and the session's next turn reads it with the history.
//!
//! Durability is process-local: the running delegations live in this process's agent
//! (the store keeps a record of each, with the pid, for `toolhost sessions` and
//! `status`); when the agent shuts down (the chat ends, `run` exits), they are cancelled.
//! A record left `running` by a process that died is shown as lost.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use toolhost_calls::context::ChildTurnError;

use super::AgentError;
use super::messages::{Message, Role};
use super::sessions::{self, DelegationRecord, RunState, SessionError, SessionStore, UnitRecord};

/// What a person watching sees when a unit of a background delegation finishes (the
/// chat prints a line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegationReport {
    /// The delegation's id.
    pub delegation: String,
    /// The unit's id.
    pub unit: String,
    /// How many tasks the unit had.
    pub tasks: usize,
    /// Where the unit ended: done, failed (every task failed) or cancelled.
    pub state: RunState,
    /// How many units of the delegation are still running.
    pub still_running: usize,
}

/// The outcome of one task of a unit: its prompt and the child's answer or error.
pub(super) struct TaskOutcome {
    pub(super) task: String,
    pub(super) answer: Result<String, TaskFailure>,
}

/// Why a task of a background delegation gave no answer.
#[derive(Debug, thiserror::Error)]
pub(super) enum TaskFailure {
    /// The child turn ended without one (its error says why).
    #[error(transparent)]
    Turn(#[from] ChildTurnError),
    /// The host task that ran it ended without a result (a panic, or the runtime shutting
    /// down).
    #[error("the child turn failed inside the host: {0}")]
    Lost(tokio::task::JoinError),
}

/// The background delegations of one agent and the completion queues of its sessions.
pub(super) struct Delegations {
    store: Arc<SessionStore>,
    state: Mutex<State>,
    /// Bumped at every completion (turns waiting for one watch it).
    changed: watch::Sender<u64>,
}

#[derive(Default)]
struct State {
    sessions: HashMap<String, SessionQueue>,
    running: HashMap<String, Running>,
}

/// One parent session's queue.
#[derive(Default)]
struct SessionQueue {
    /// Turns of the session running now.
    active_turns: usize,
    /// Completions waiting for the running turn's next step.
    pending: Vec<Message>,
    /// Units of its delegations not finished yet.
    outstanding: usize,
}

struct Running {
    record: DelegationRecord,
    cancel: CancellationToken,
}

impl Delegations {
    pub(super) fn new(store: Arc<SessionStore>) -> Delegations {
        Delegations {
            store,
            state: Mutex::default(),
            changed: watch::Sender::new(0),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A turn of `session` starts: completions wait for its step boundaries until the
    /// guard is dropped.
    pub(super) fn begin_turn(self: &Arc<Self>, session: &str) -> ActiveTurn {
        self.state()
            .sessions
            .entry(session.to_owned())
            .or_default()
            .active_turns += 1;
        ActiveTurn {
            delegations: Arc::clone(self),
            session: session.to_owned(),
        }
    }

    /// The completions that arrived for `session` since the last drain.
    pub(super) fn drain(&self, session: &str) -> Vec<Message> {
        self.state()
            .sessions
            .get_mut(session)
            .map(|q| std::mem::take(&mut q.pending))
            .unwrap_or_default()
    }

    /// Waits until a completion for `session` is queued or none is outstanding.
    pub(super) async fn wait(
        &self,
        session: &str,
        cancel: &CancellationToken,
    ) -> Result<(), AgentError> {
        let mut changed = self.changed.subscribe();
        loop {
            {
                let state = self.state();
                match state.sessions.get(session) {
                    Some(q) if q.pending.is_empty() && q.outstanding > 0 => {}
                    _ => return Ok(()),
                }
            }
            tokio::select! {
                _ = changed.changed() => {}
                () = cancel.cancelled() => return Err(AgentError::Cancelled),
            }
        }
    }

    /// Records a new delegation of `parent` with these units (each a list of task
    /// indexes); its children stop when `cancel` fires. Returns its id.
    pub(super) fn start(
        &self,
        parent: &str,
        units: &[Vec<usize>],
        cancel: CancellationToken,
    ) -> Result<DelegationRecord, SessionError> {
        let id = format!("d-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        let record = DelegationRecord {
            units: units
                .iter()
                .enumerate()
                .map(|(i, tasks)| UnitRecord {
                    id: format!("{id}/u{}", i + 1),
                    tasks: tasks.clone(),
                    state: RunState::Running,
                })
                .collect(),
            id,
            parent: parent.to_owned(),
            children: Vec::new(),
            state: RunState::Running,
            pid: std::process::id(),
            started: sessions::timestamp(),
            ended: None,
        };
        self.store.record_delegation(&record)?;
        let mut state = self.state();
        state
            .sessions
            .entry(parent.to_owned())
            .or_default()
            .outstanding += units.len();
        state.running.insert(
            record.id.clone(),
            Running {
                record: record.clone(),
                cancel,
            },
        );
        Ok(record)
    }

    /// A child turn of delegation `id` started in `session`.
    pub(super) fn child_started(&self, id: &str, session: &str) {
        let mut state = self.state();
        let Some(running) = state.running.get_mut(id) else {
            return;
        };
        running.record.children.push(session.to_owned());
        // Written under the lock: records of one delegation reach the store in the order
        // they were made, so a later one is never overwritten by an earlier one.
        if let Err(e) = self.store.record_delegation(&running.record) {
            tracing::warn!(error = %e, delegation = id, "could not record a delegation's child");
        }
    }

    /// Unit `unit` (its index) of delegation `id` finished with `outcomes`: its
    /// completion goes to the parent's session (queued for a running turn, or stored),
    /// the record is updated. `None` when the delegation is not known (already ended).
    pub(super) fn unit_finished(
        &self,
        id: &str,
        unit: usize,
        outcomes: &[TaskOutcome],
        cancelled: bool,
    ) -> Option<DelegationReport> {
        let unit_state = if cancelled {
            RunState::Cancelled
        } else if outcomes.iter().all(|o| o.answer.is_err()) {
            RunState::Failed
        } else {
            RunState::Done
        };
        let mut state = self.state();
        let running = state.running.get_mut(id)?;
        let record = &mut running.record;
        let unit_record = record.units.get_mut(unit)?;
        unit_record.state = unit_state;
        let unit_id = unit_record.id.clone();
        let still_running = record
            .units
            .iter()
            .filter(|u| u.state == RunState::Running)
            .count();
        if still_running == 0 {
            record.state = if record.units.iter().any(|u| u.state == RunState::Cancelled) {
                RunState::Cancelled
            } else if record.units.iter().all(|u| u.state == RunState::Failed) {
                RunState::Failed
            } else {
                RunState::Done
            };
            record.ended = Some(sessions::timestamp());
        }
        let record = record.clone();
        let parent = record.parent.clone();
        if still_running == 0 {
            state.running.remove(id);
        }
        let message = completion_message(&record.id, &unit_id, outcomes, unit_state, still_running);
        let queue = state.sessions.entry(parent.clone()).or_default();
        queue.outstanding = queue.outstanding.saturating_sub(1);
        // Stored under the lock: a turn starting now reads it with the history, or
        // finds it in its queue; never neither, never both.
        if queue.active_turns > 0 {
            queue.pending.push(message);
        } else if let Err(e) = self.store.append(&parent, &message) {
            tracing::warn!(error = %e, delegation = id, "could not add a completion to its session");
        }
        // Under the lock, like a child's start: the last state written is the last made.
        if let Err(e) = self.store.record_delegation(&record) {
            tracing::warn!(error = %e, delegation = id, "could not record a delegation's state");
        }
        drop(state);
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
        Some(DelegationReport {
            delegation: record.id,
            unit: unit_id,
            tasks: outcomes.len(),
            state: unit_state,
            still_running,
        })
    }

    /// The ids of the delegations running now.
    pub(super) fn running(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.state().running.keys().cloned().collect();
        ids.sort();
        ids
    }

    /// Cancels every running delegation and records them as cancelled (the agent is
    /// shutting down: their children cannot outlive the process).
    pub(super) fn shutdown(&self) {
        let running: Vec<Running> = self.state().running.drain().map(|(_, r)| r).collect();
        for Running { mut record, cancel } in running {
            cancel.cancel();
            record.state = RunState::Cancelled;
            record.ended = Some(sessions::timestamp());
            for unit in &mut record.units {
                if unit.state == RunState::Running {
                    unit.state = RunState::Cancelled;
                }
            }
            if let Err(e) = self.store.record_delegation(&record) {
                tracing::warn!(error = %e, delegation = record.id, "could not record a cancelled delegation");
            }
        }
    }

    /// A turn of `session` ended: completions that arrived after its last step are
    /// stored now.
    fn end_turn(&self, session: &str) {
        let mut state = self.state();
        let Some(queue) = state.sessions.get_mut(session) else {
            return;
        };
        queue.active_turns = queue.active_turns.saturating_sub(1);
        if queue.active_turns > 0 || queue.pending.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut queue.pending);
        if let Err(e) = self.store.append_all(session, &pending) {
            tracing::warn!(error = %e, session, "could not add completions to their session");
        }
    }
}

impl super::AgentInner {
    /// At a turn's final answer: whether a completion is there for the model to read
    /// (waiting for the next one while units of the session are outstanding).
    pub(super) async fn background_left(
        &self,
        session: &str,
        cancel: &CancellationToken,
    ) -> Result<bool, AgentError> {
        self.delegations.wait(session, cancel).await?;
        Ok(self
            .delegations
            .state()
            .sessions
            .get(session)
            .is_some_and(|q| !q.pending.is_empty()))
    }
}

/// A running turn of a session (see [`Delegations::begin_turn`]).
pub(super) struct ActiveTurn {
    delegations: Arc<Delegations>,
    session: String,
}

impl Drop for ActiveTurn {
    fn drop(&mut self) {
        self.delegations.end_turn(&self.session);
    }
}

/// The completion units of a batch: one for all tasks; with `independent`, one per group
/// (in the order groups first appear) and one per ungrouped task.
pub(super) fn units_of(groups: &[Option<String>], independent: bool) -> Vec<Vec<usize>> {
    if !independent {
        return vec![(0..groups.len()).collect()];
    }
    let mut units: Vec<Vec<usize>> = Vec::new();
    let mut by_group: HashMap<&str, usize> = HashMap::new();
    for (i, group) in groups.iter().enumerate() {
        match group.as_deref() {
            Some(g) => match by_group.get(g) {
                Some(&u) => units[u].push(i),
                None => {
                    by_group.insert(g, units.len());
                    units.push(vec![i]);
                }
            },
            None => units.push(vec![i]),
        }
    }
    units
}

/// The message a finished unit adds to its parent's session.
fn completion_message(
    delegation: &str,
    unit: &str,
    outcomes: &[TaskOutcome],
    state: RunState,
    still_running: usize,
) -> Message {
    let verb = if state == RunState::Cancelled {
        "cancelled"
    } else {
        "finished"
    };
    let tasks = match outcomes.len() {
        1 => "1 task".to_owned(),
        n => format!("{n} tasks"),
    };
    let more = match still_running {
        0 => String::new(),
        1 => "; 1 more unit of it is still running".to_owned(),
        n => format!("; {n} more units of it are still running"),
    };
    let results: Vec<_> = outcomes
        .iter()
        .map(|o| match &o.answer {
            Ok(answer) => json!({"task": o.task, "answer": answer}),
            Err(error) => json!({"task": o.task, "error": error.to_string()}),
        })
        .collect();
    let body = json!({"delegation": delegation, "unit": unit, "results": results});
    Message::text(
        Role::User,
        format!("[background delegation {delegation} {verb}: unit {unit}, {tasks}{more}]\n{body}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_one_unit_unless_completions_are_independent() {
        let g = |s: &str| Some(s.to_owned());
        let groups = [g("a"), None, g("b"), g("a"), None];
        assert_eq!(units_of(&groups, false), [vec![0, 1, 2, 3, 4]]);
        assert_eq!(
            units_of(&groups, true),
            [vec![0, 3], vec![1], vec![2], vec![4]]
        );
    }

    #[test]
    fn a_completion_names_its_delegation_unit_and_results() {
        let outcomes = [
            TaskOutcome {
                task: "one".to_owned(),
                answer: Ok("ONE".to_owned()),
            },
            TaskOutcome {
                task: "two".to_owned(),
                answer: Err(ChildTurnError::Refused("it broke".to_owned()).into()),
            },
        ];
        let m = completion_message("d-1", "d-1/u1", &outcomes, RunState::Done, 2);
        assert_eq!(m.role, Role::User);
        let text = m.content.unwrap_or_default();
        let (head, body) = text.split_once('\n').unwrap_or_default();
        assert_eq!(
            head,
            "[background delegation d-1 finished: unit d-1/u1, 2 tasks; 2 more units of it \
             are still running]"
        );
        let body: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
        assert_eq!(body["results"][1]["error"], "it broke");
        assert_eq!(body["unit"], "d-1/u1");
    }
}
