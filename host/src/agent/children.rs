//! Child turns for tools such as `delegate_task`: on the same agent, with the parent's
//! tools minus those the child's role goes without, one level deeper, within the depth,
//! concurrency and time limits of `[agent.children]`; in the foreground (the call waits)
//! or in the background (`agent.delegate`: the call returns, the units report through
//! the parent session's completion queue, see `delegations.rs`).
//!
//! Concurrency is counted by calls, not tasks: every child turn of one tool call
//! (foreground or background, all its units) shares one slot of the depth's semaphore
//! (`max_concurrent_children` slots per depth, so a child waiting for its own children
//! never holds the permit they need), and within a call at most
//! `max_concurrent_children` tasks run at once. A task waiting for its slot is queued;
//! its time limit starts when it runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use async_trait::async_trait;
use tokio::sync::{OnceCell, OwnedSemaphorePermit, Semaphore, SemaphorePermit};
use tokio_util::sync::CancellationToken;
use toolhost_plugin_api::{
    ChildRole, ChildTurnCall, ChildTurnRequest, DelegationAnswer, DelegationRequest,
    DelegationUnit, ServiceError,
};

use super::delegations::{TaskFailure, TaskOutcome, units_of};
use super::{AgentInner, blocking};
use toolhost_calls::context::{ChildTurnError, ChildTurnService, TurnIdentity};

/// The concurrency slot of one tool call: one permit of its depth's semaphore, held
/// while any child turn of the call waits or runs, and the call's own task limit.
pub(super) struct CallSlot {
    depth: Arc<Semaphore>,
    held: OnceCell<OwnedSemaphorePermit>,
    tasks: Semaphore,
}

impl CallSlot {
    /// Waits for the call's slot (taken once) and then for a task place in it.
    async fn enter(
        &self,
        cancel: &CancellationToken,
    ) -> Result<SemaphorePermit<'_>, ChildTurnError> {
        let admitted = async {
            self.held
                .get_or_try_init(|| Arc::clone(&self.depth).acquire_owned())
                .await
                .map_err(|_| ChildTurnError::ShuttingDown)?;
            self.tasks
                .acquire()
                .await
                .map_err(|_| ChildTurnError::ShuttingDown)
        };
        tokio::select! {
            permit = admitted => permit,
            () = cancel.cancelled() => Err(ChildTurnError::Cancelled),
        }
    }
}

/// The slots of the calls that have children now, by (turn, call id).
#[derive(Default)]
pub(super) struct CallSlots {
    slots: Mutex<HashMap<(u64, String), Weak<CallSlot>>>,
}

impl CallSlots {
    /// The slot of call `call` of turn `turn` (made on first use; it lasts while a
    /// child turn of the call holds it).
    fn get(&self, turn: u64, call: &str, depth: &Arc<Semaphore>, per_call: usize) -> Arc<CallSlot> {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (turn, call.to_owned());
        if let Some(slot) = slots.get(&key).and_then(Weak::upgrade) {
            return slot;
        }
        slots.retain(|_, slot| slot.strong_count() > 0);
        let slot = Arc::new(CallSlot {
            depth: Arc::clone(depth),
            held: OnceCell::new(),
            tasks: Semaphore::new(per_call.max(1)),
        });
        slots.insert(key, Arc::downgrade(&slot));
        slot
    }
}

/// Child turns for the calls of one turn: on the same agent, one level deeper.
#[derive(Clone)]
pub(super) struct ChildTurns {
    pub(super) agent: Arc<AgentInner>,
    /// The tools the parent's turn went without.
    pub(super) without: Arc<[String]>,
    pub(super) depth: u32,
    /// The parent turn's cancel token: background children stop with the turn that
    /// started them (not with their call, which returns at once).
    pub(super) turn_cancel: CancellationToken,
    /// Tells this turn's calls apart from other turns' (model call ids repeat).
    pub(super) turn_serial: u64,
    /// The call these child turns belong to (set per call by `for_call`).
    pub(super) call_id: Option<Arc<str>>,
}

/// One child turn to run: its prompt (with context) and the tools it goes without.
struct ChildPlan {
    prompt: String,
    without: Arc<[String]>,
}

impl ChildTurns {
    /// Refuses a child when this turn is as deep as turns may nest.
    fn check_depth(&self) -> Result<(), ChildTurnError> {
        let max_depth = self.agent.config.children.max_depth;
        if self.depth >= max_depth {
            return Err(ChildTurnError::TooDeep { max_depth });
        }
        Ok(())
    }

    /// What a child of `role` runs with, or why it may not run.
    fn plan(
        &self,
        prompt: String,
        context: Option<String>,
        role: Option<ChildRole>,
    ) -> Result<ChildPlan, ChildTurnError> {
        let limits = &self.agent.config.children;
        let role = role.unwrap_or_default();
        if role == ChildRole::Orchestrator {
            if !limits.orchestrator_enabled {
                return Err(ChildTurnError::Refused(
                    "the orchestrator role is turned off on this host ([agent.children] \
                     orchestrator_enabled = false); delegate with role \"leaf\" (the \
                     default) and hand out the parts yourself"
                        .to_owned(),
                ));
            }
            if self.depth + 2 > limits.max_depth {
                return Err(ChildTurnError::Refused(format!(
                    "an orchestrator here would run at depth {}, where max_spawn_depth = {} \
                     lets it start no children of its own; delegate with role \"leaf\"",
                    self.depth + 1,
                    limits.max_depth
                )));
            }
        }
        let without: Arc<[String]> = self
            .without
            .iter()
            .chain(
                limits
                    .exclude
                    .iter()
                    .filter(|t| role == ChildRole::Leaf || t.as_str() != "delegate_task"),
            )
            .cloned()
            .collect();
        let prompt = match context {
            Some(context) if !context.is_empty() => format!("{prompt}\n\nContext:\n{context}"),
            _ => prompt,
        };
        Ok(ChildPlan { prompt, without })
    }

    /// This call's slot.
    fn slot(&self) -> Arc<CallSlot> {
        let limits = &self.agent.config.children;
        // depth < max_depth here (checked), and there is one semaphore per such depth.
        let depth = self
            .agent
            .children
            .get(self.depth as usize)
            .cloned()
            .unwrap_or_else(|| Arc::new(Semaphore::new(0)));
        self.agent.slots.get(
            self.turn_serial,
            self.call_id.as_deref().unwrap_or(""),
            &depth,
            limits.max_concurrent,
        )
    }

    /// Runs one child turn in `slot`: waits for its place, starts its session (named
    /// to `started`), and runs it within the time limit, which starts now.
    async fn run(
        &self,
        slot: Arc<CallSlot>,
        parent_session: String,
        plan: ChildPlan,
        cancel: CancellationToken,
        started: impl FnOnce(&str) + Send,
    ) -> Result<String, ChildTurnError> {
        // This child's own token: its time-out or teardown stops it, not its siblings of
        // the same call or delegation.
        let cancel = cancel.child_token();
        let _place = slot.enter(&cancel).await?;
        let store = Arc::clone(&self.agent.store);
        let session = blocking(move || store.create(Some(&parent_session)))
            .await
            .map_err(|e| ChildTurnError::Session(Box::new(e)))?;
        started(&session);
        // Ends what the child's tools leave running, however the child ends, even if
        // this future is dropped before it does.
        let teardown = super::child_processes::Teardown::new(
            &session,
            cancel.clone(),
            Arc::clone(&self.agent.handoffs),
        );
        let limits = &self.agent.config.children;
        let mut child = Arc::clone(&self.agent).turn(
            plan.without,
            session.clone(),
            plan.prompt,
            cancel.clone(),
            self.depth + 1,
            // A child's answer includes what its own background children report.
            true,
        );
        let outcome = match tokio::time::timeout(limits.timeout, &mut child).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(ChildTurnError::Failed(Box::new(e))),
            Err(_) => {
                // Tell it to stop, and give its tools the door's grace to do so.
                cancel.cancel();
                let grace = self.agent.door.limits().cancel_grace;
                let _ = tokio::time::timeout(grace, child).await;
                Err(ChildTurnError::TimedOut(limits.timeout))
            }
        };
        // Whatever its tools left running (tagged with its session) ends with it.
        teardown.finish(outcome).await
    }
}

#[async_trait]
impl ChildTurnService for ChildTurns {
    async fn run_child_turn(
        &self,
        parent: &TurnIdentity,
        request: ChildTurnCall,
        call_cancel: CancellationToken,
    ) -> Result<String, ChildTurnError> {
        self.check_depth()?;
        let ChildTurnCall {
            request: ChildTurnRequest { prompt, context },
            role,
            ..
        } = request;
        let plan = self.plan(prompt, context, role)?;
        // The child stops with the calling tool (its cancel, its timeout) and its turn.
        let cancel = call_cancel.child_token();
        self.run(self.slot(), parent.session_id.clone(), plan, cancel, |_| {})
            .await
    }

    async fn delegate(
        &self,
        parent: &TurnIdentity,
        request: DelegationRequest,
        _cancel: CancellationToken,
    ) -> Result<DelegationAnswer, ServiceError> {
        let refused = |e: ChildTurnError| ServiceError::Failed(e.to_string());
        if request.tasks.is_empty() {
            return Err(ServiceError::Failed(
                "a delegation needs at least one task".to_owned(),
            ));
        }
        self.check_depth().map_err(refused)?;
        let groups: Vec<Option<String>> = request.tasks.iter().map(|t| t.group.clone()).collect();
        let mut plans = Vec::with_capacity(request.tasks.len());
        let mut prompts = Vec::with_capacity(request.tasks.len());
        for task in request.tasks {
            prompts.push(task.prompt.clone());
            plans.push(Some(
                self.plan(task.prompt, task.context, task.role)
                    .map_err(refused)?,
            ));
        }
        let units = units_of(&groups, self.agent.config.children.independent_completions);
        // Background children stop with the turn that started them, or the agent.
        let cancel = self.turn_cancel.child_token();
        let delegations = Arc::clone(&self.agent.delegations);
        let record = {
            let (delegations, session, units, cancel) = (
                Arc::clone(&delegations),
                parent.session_id.clone(),
                units.clone(),
                cancel.clone(),
            );
            blocking(move || delegations.start(&session, &units, cancel))
                .await
                .map_err(|e| ServiceError::Failed(e.to_string()))?
        };
        let slot = self.slot();
        for (index, tasks) in units.iter().enumerate() {
            let mut runs = Vec::with_capacity(tasks.len());
            for &task in tasks {
                let Some(plan) = plans.get_mut(task).and_then(Option::take) else {
                    continue;
                };
                let this = self.clone();
                let (slot, session, cancel) =
                    (Arc::clone(&slot), parent.session_id.clone(), cancel.clone());
                let (delegations, id) = (Arc::clone(&delegations), record.id.clone());
                let prompt = prompts.get(task).cloned().unwrap_or_default();
                runs.push(tokio::spawn(async move {
                    let started = |child: &str| delegations.child_started(&id, child);
                    let answer = this.run(slot, session, plan, cancel, started).await;
                    TaskOutcome {
                        task: prompt,
                        answer: answer.map_err(TaskFailure::Turn),
                    }
                }));
            }
            let (agent, id, cancel) = (Arc::clone(&self.agent), record.id.clone(), cancel.clone());
            tokio::spawn(async move {
                let mut outcomes = Vec::with_capacity(runs.len());
                for run in runs {
                    outcomes.push(run.await.unwrap_or_else(|e| TaskOutcome {
                        task: String::new(),
                        answer: Err(TaskFailure::Lost(e)),
                    }));
                }
                let cancelled = cancel.is_cancelled();
                let delegations = Arc::clone(&agent.delegations);
                let report = blocking(move || {
                    Ok(delegations.unit_finished(&id, index, &outcomes, cancelled))
                })
                .await;
                if let (Ok(Some(report)), Some(observer)) = (report, &agent.observer) {
                    observer.delegation_finished(&report);
                }
            });
        }
        Ok(DelegationAnswer {
            delegation: record.id,
            units: record
                .units
                .into_iter()
                .map(|u| DelegationUnit {
                    id: u.id,
                    tasks: u.tasks,
                })
                .collect(),
        })
    }

    fn for_call(&self, call_id: &str) -> Option<Arc<dyn ChildTurnService>> {
        Some(Arc::new(ChildTurns {
            call_id: Some(Arc::from(call_id)),
            ..self.clone()
        }))
    }
}
