//! The agent runtime: runs turns for a profile. This is its facade (the `Agent`, what it
//! is made of, how a turn fails); the turn loop is in `turn.rs`, child turns in
//! `children.rs` (their teardown in `child_processes.rs`), background delegations and their
//! completion queues in `delegations.rs`, the host requests it answers in `requests.rs` (a
//! session's compact history in `history.rs`), the conversation's messages in
//! `messages.rs`, the model and its wire format in `model.rs` and `wire.rs` (streamed
//! answers in `stream.rs`), fitting requests to the model's context window in
//! `compaction.rs`, the sessions in `sessions.rs`. Its settings are the configuration's
//! resolved ones ([`AgentSettings`], [`ModelSettings`](crate::ModelSettings)), used as they
//! are.

mod child_processes;
mod children;
mod compaction;
mod delegations;
mod history;
mod messages;
pub mod model;
mod process_manage;
mod requests;
pub mod sessions;
pub(crate) mod stream;
pub mod todo;
mod turn;
mod wire;

pub use delegations::DelegationReport;
pub use turn::TurnObserver;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::config::AgentSettings;
use model::{ModelError, ModelProvider};
use sessions::{SessionError, SessionStore};
use toolhost_calls::context::{CallerChannel, ProfileRequests};
use toolhost_calls::door::{CallDoor, UnknownProfile};

/// Why a turn ended without an answer. What was said before stays in the session.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The model did not answer.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The session store failed.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The model kept calling tools.
    #[error(
        "the turn stopped after {0} model calls without a final answer (raise [agent] \
         max_iterations if the task needs more steps)"
    )]
    IterationLimit(u32),
    /// The turn was cancelled.
    #[error("the turn was cancelled")]
    Cancelled,
    /// The profile's state folder could not be made.
    #[error("{0}")]
    StateDir(String),
    /// The door has no such profile.
    #[error(transparent)]
    Profile(#[from] UnknownProfile),
    /// The model refused the conversation as too long even after it was compacted.
    #[error(
        "{source}\n(the conversation was compacted to about {tokens} tokens by toolhost's \
         estimate and sent again, and refused again; [model] context_window is {window}: \
         lower it to the model's real window, or start a new session)"
    )]
    TooLong {
        /// The estimate of the request refused the second time.
        tokens: u64,
        /// `[model] context_window`.
        window: u64,
        /// What the server said.
        source: ModelError,
    },
}

/// Runs turns for one profile.
#[derive(Clone)]
pub struct Agent {
    inner: Arc<AgentInner>,
}

struct AgentInner {
    profile: String,
    door: CallDoor,
    model: Arc<dyn ModelProvider>,
    store: Arc<SessionStore>,
    profile_requests: ProfileRequests,
    config: AgentSettings,
    /// One semaphore per depth that may start children (`max_concurrent` calls each): a
    /// child waiting for its own children never holds the permit they need.
    children: Vec<Arc<Semaphore>>,
    /// The slots of the calls that have children now (see `children.rs`).
    slots: children::CallSlots,
    /// Background delegations and the sessions' completion queues.
    delegations: Arc<delegations::Delegations>,
    /// Numbers turns (a call's slot is keyed by its turn and its id).
    turn_serial: AtomicU64,
    caller: Option<Arc<dyn CallerChannel>>,
    observer: Option<Arc<dyn TurnObserver>>,
    /// Request sizes, calibrated by the usage the model server reports.
    estimator: compaction::Estimator,
    /// The processes child turns handed to their parents (`process_manage`).
    handoffs: Arc<child_processes::Handoffs>,
}

/// What an agent is made of.
pub struct AgentParts {
    /// The profile's name.
    pub profile: String,
    /// Its folders (the plugins' state folder, the sessions database beside it).
    pub dirs: toolhost_calls::profile_dirs::ProfileDirs,
    /// Its workspace, answered to plugins' `profile.workspace` requests (default: none).
    pub workspace: crate::config::WorkspaceSettings,
    /// The door its calls enter by (which finds the profile's tools, and asks for
    /// approvals).
    pub door: CallDoor,
    /// The model.
    pub model: Arc<dyn ModelProvider>,
    /// Settings.
    pub config: AgentSettings,
    /// Whoever is at the other end (the chat terminal), if anyone.
    pub caller: Option<Arc<dyn CallerChannel>>,
    /// Who watches turns, if anyone.
    pub observer: Option<Arc<dyn TurnObserver>>,
}

impl Agent {
    /// An agent; opens (or creates) the profile's session store.
    pub fn new(parts: AgentParts) -> Result<Agent, AgentError> {
        let requests =
            ProfileRequests::new(parts.dirs.state()).with_workspace(parts.workspace.answer());
        requests
            .state_dir()
            .map_err(|e| AgentError::StateDir(e.to_string()))?;
        let store = Arc::new(SessionStore::open_for_profile(&parts.dirs)?);
        // Delegators (delegate_task) wait for child turns, which have their own limit.
        let door = parts
            .door
            .with_tool_timeouts(parts.config.children.delegator_timeouts());
        Ok(Agent {
            inner: Arc::new(AgentInner {
                profile: parts.profile,
                door,
                model: parts.model,
                delegations: Arc::new(delegations::Delegations::new(Arc::clone(&store))),
                store,
                profile_requests: requests,
                children: (0..parts.config.children.max_depth)
                    .map(|_| Arc::new(Semaphore::new(parts.config.children.max_concurrent.max(1))))
                    .collect(),
                slots: children::CallSlots::default(),
                turn_serial: AtomicU64::new(0),
                config: parts.config,
                caller: parts.caller,
                observer: parts.observer,
                estimator: compaction::Estimator::default(),
                handoffs: Arc::default(),
            }),
        })
    }

    /// The session store.
    pub fn sessions(&self) -> &SessionStore {
        &self.inner.store
    }

    /// A new session; returns its id.
    pub fn new_session(&self) -> Result<String, AgentError> {
        Ok(self.inner.store.create(None)?)
    }

    /// Runs one turn of `session` for `prompt` and returns the model's final answer.
    /// Cancelling `cancel` stops the turn, every tool call in it and the background
    /// delegations it started; a turn that ends leaves them running (their completions
    /// are added to the session, see [`Agent::run_turn_to_the_end`]).
    pub async fn run_turn(
        &self,
        session: &str,
        prompt: &str,
        cancel: CancellationToken,
    ) -> Result<String, AgentError> {
        Arc::clone(&self.inner)
            .turn(
                Arc::from([]),
                session.to_owned(),
                prompt.to_owned(),
                cancel,
                0,
                false,
            )
            .await
    }

    /// Like [`Agent::run_turn`], but the turn ends only when no background delegation of
    /// the session is outstanding: a final answer given while units run waits for the
    /// next completion, which the model then reads and goes on from (`toolhost run`).
    pub async fn run_turn_to_the_end(
        &self,
        session: &str,
        prompt: &str,
        cancel: CancellationToken,
    ) -> Result<String, AgentError> {
        Arc::clone(&self.inner)
            .turn(
                Arc::from([]),
                session.to_owned(),
                prompt.to_owned(),
                cancel,
                0,
                true,
            )
            .await
    }

    /// The ids of the background delegations running in this agent now.
    pub fn running_delegations(&self) -> Vec<String> {
        self.inner.delegations.running()
    }

    /// Ends the agent's background work: every running delegation is cancelled and
    /// recorded so (they live in this process; see `toolhost sessions show`). Call it
    /// when the chat or run ends.
    pub fn shutdown(&self) {
        self.inner.delegations.shutdown();
    }
}

/// Runs a session-store operation off the async workers (SQLite may wait on a lock).
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, SessionError> + Send + 'static,
) -> Result<T, SessionError> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|e| Err(SessionError::Worker(e.to_string())))
}
