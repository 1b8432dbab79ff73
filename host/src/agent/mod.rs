//! The agent runtime: turns for a profile (the model is offered the profile's tools, its
//! tool calls go through the dispatcher, the results go back, until it answers without
//! tool calls or the iteration limit), the sessions they are stored in, and child turns
//! for tools such as `delegate_task`.

pub mod model;
pub mod sessions;
mod wire;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use toolhost_plugin_api::{
    ChildTurnRequest, HostAnswer, HostRequest, ServiceError, SessionsSearchAnswer,
};

use crate::calls::availability::Availability;
use crate::calls::context::{
    CallerChannel, ChildTurnService, HostRequests, ProfileRequests, Turn, TurnIdentity,
    TurnServices,
};
use crate::calls::dispatcher::{CallErrorKind, Dispatcher, ToolCall, ToolResult};
use crate::calls::registry::ToolRegistry;
use model::{Message, ModelError, ModelProvider, Role};
use sessions::{SessionError, SessionStore};

/// Limits of child turns (`[agent.children]`).
#[derive(Debug, Clone)]
pub struct ChildConfig {
    /// How deep turns may nest: a turn at this depth cannot start a child.
    pub max_depth: u32,
    /// How many child turns run at once across the agent.
    pub max_concurrent: usize,
    /// How long one child turn may take.
    pub timeout: Duration,
    /// Tools a child never gets.
    pub exclude: Vec<String>,
}

impl Default for ChildConfig {
    fn default() -> Self {
        ChildConfig {
            max_depth: 2,
            max_concurrent: 3,
            timeout: Duration::from_secs(300),
            exclude: ["delegate_task", "clarify", "memory"]
                .map(str::to_owned)
                .to_vec(),
        }
    }
}

/// How an agent runs turns.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The most model calls in one turn.
    pub max_iterations: u32,
    /// The system prompt (the profile's, or the default).
    pub system_prompt: String,
    /// Child turns.
    pub children: ChildConfig,
}

/// The most tasks the shipped delegate_task plugin sends in one call (its `MAX_TASKS`);
/// the agent sizes that tool's call limit by it.
pub const DELEGATE_BATCH: u32 = 5;

/// The system prompt when the profile sets none.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are a helpful assistant. Use the tools you are \
    given when they help; when a tool returns an error, read it and correct the call.";

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            max_iterations: 20,
            system_prompt: DEFAULT_SYSTEM_PROMPT.to_owned(),
            children: ChildConfig::default(),
        }
    }
}

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
}

/// What a person watching a turn sees happen (the chat shows each as it comes).
pub trait TurnObserver: Send + Sync {
    /// The model asked for these calls (before they run).
    fn tool_calls(&self, _depth: u32, _calls: &[ToolCall]) {}
    /// A call's result.
    fn tool_result(&self, _depth: u32, _result: &ToolResult) {}
    /// The model's text (the final answer, or text alongside tool calls).
    fn assistant_text(&self, _depth: u32, _text: &str) {}
}

/// Where the agent gets the tools of its profile (the catalog's current view, or a fixed
/// registry for one-shot commands).
pub type RegistrySource = Arc<dyn Fn() -> Arc<ToolRegistry> + Send + Sync>;

/// Runs turns for one profile.
#[derive(Clone)]
pub struct Agent {
    inner: Arc<AgentInner>,
}

struct AgentInner {
    profile: String,
    registry: RegistrySource,
    availability: Arc<Availability>,
    dispatcher: Dispatcher,
    model: Arc<dyn ModelProvider>,
    store: Arc<SessionStore>,
    profile_requests: ProfileRequests,
    config: AgentConfig,
    /// One semaphore per depth that may start children (`max_concurrent` each): a child
    /// waiting for its own children never holds the permit they need.
    children: Vec<Semaphore>,
    caller: Option<Arc<dyn CallerChannel>>,
    observer: Option<Arc<dyn TurnObserver>>,
}

/// What an agent is made of.
pub struct AgentParts {
    /// The profile's name.
    pub profile: String,
    /// Its state folder (the sessions database lives there).
    pub state_dir: PathBuf,
    /// Its tools.
    pub registry: RegistrySource,
    /// Availability checks (shared with the host).
    pub availability: Arc<Availability>,
    /// The dispatcher (with the policy that asks for approvals).
    pub dispatcher: Dispatcher,
    /// The model.
    pub model: Arc<dyn ModelProvider>,
    /// Settings.
    pub config: AgentConfig,
    /// Whoever is at the other end (the chat terminal), if anyone.
    pub caller: Option<Arc<dyn CallerChannel>>,
    /// Who watches turns, if anyone.
    pub observer: Option<Arc<dyn TurnObserver>>,
}

impl Agent {
    /// An agent; opens (or creates) the profile's session store.
    pub fn new(parts: AgentParts) -> Result<Agent, AgentError> {
        let requests = ProfileRequests::new(parts.state_dir.clone());
        requests
            .state_dir()
            .map_err(|e| AgentError::StateDir(e.to_string()))?;
        let store = SessionStore::open(&parts.state_dir.join("sessions.sqlite3"))?;
        // delegate_task waits for child turns, which have their own limit: its call may
        // last as long as a full batch of them (`DELEGATE_BATCH` tasks, `max_concurrent`
        // at a time).
        let children = &parts.config.children;
        let rounds = DELEGATE_BATCH.div_ceil(children.max_concurrent.max(1) as u32);
        let delegate_limit = children.timeout * rounds + Duration::from_secs(30);
        let dispatcher = parts
            .dispatcher
            .with_tool_timeouts([("delegate_task".to_owned(), delegate_limit)]);
        Ok(Agent {
            inner: Arc::new(AgentInner {
                profile: parts.profile,
                registry: parts.registry,
                availability: parts.availability,
                dispatcher,
                model: parts.model,
                store: Arc::new(store),
                profile_requests: requests,
                children: (0..parts.config.children.max_depth)
                    .map(|_| Semaphore::new(parts.config.children.max_concurrent.max(1)))
                    .collect(),
                config: parts.config,
                caller: parts.caller,
                observer: parts.observer,
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
    /// Cancelling `cancel` stops the turn and every tool call in it.
    pub async fn run_turn(
        &self,
        session: &str,
        prompt: &str,
        cancel: CancellationToken,
    ) -> Result<String, AgentError> {
        let registry = (self.inner.registry)();
        Arc::clone(&self.inner)
            .turn(registry, session.to_owned(), prompt.to_owned(), cancel, 0)
            .await
    }
}

impl AgentInner {
    fn turn(
        self: Arc<Self>,
        registry: Arc<ToolRegistry>,
        session: String,
        prompt: String,
        cancel: CancellationToken,
        depth: u32,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, AgentError>> + Send>>
    {
        Box::pin(async move {
            let store = &self.store;
            let mut messages = vec![Message::text(Role::System, &self.config.system_prompt)];
            let history = {
                let (store, session) = (Arc::clone(store), session.clone());
                blocking(move || store.messages(&session)).await?
            };
            // A turn that stopped between a tool call and its result (a crash, a kill)
            // left calls unanswered; the model would refuse the conversation.
            messages.extend(sessions::repair(history));
            let user = Message::text(Role::User, prompt);
            self.append(&session, vec![user.clone()]).await?;
            messages.push(user);

            let turn = Turn {
                info: Arc::new(TurnIdentity {
                    profile_id: self.profile.clone(),
                    session_id: session.clone(),
                    model: self.model.model().to_owned(),
                }),
                cancel: cancel.clone(),
                services: TurnServices {
                    child_turns: Some(Arc::new(ChildTurns {
                        agent: Arc::clone(&self),
                        registry: Arc::clone(&registry),
                        depth,
                    })),
                    caller: self.caller.clone(),
                    requests: Some(Arc::new(AgentRequests {
                        agent: Arc::clone(&self),
                    })),
                },
            };
            for _ in 0..self.config.max_iterations {
                let specs = self.availability.visible_specs(&registry);
                let reply = self.model.complete(&messages, &specs, &cancel).await?;
                self.append(&session, vec![reply.clone()]).await?;
                if let (Some(observer), Some(text)) = (&self.observer, &reply.content)
                    && !text.is_empty()
                {
                    observer.assistant_text(depth, text);
                }
                if reply.tool_calls.is_empty() {
                    return Ok(reply.content.unwrap_or_default());
                }
                // Calls whose arguments are not JSON never reach the dispatcher: their
                // error goes back in their place, so the model can correct them.
                let mut calls = Vec::new();
                let mut slots: Vec<Option<ToolResult>> = Vec::new();
                for c in &reply.tool_calls {
                    match serde_json::from_str::<Value>(&c.arguments) {
                        Ok(arguments) => {
                            calls.push(ToolCall {
                                id: c.id.clone(),
                                name: c.name.clone(),
                                arguments,
                            });
                            slots.push(None);
                        }
                        Err(e) => slots.push(Some(ToolResult {
                            call_id: c.id.clone(),
                            name: c.name.clone(),
                            output: format!(
                                "invalid arguments: not valid JSON ({e}); send the arguments \
                                 as one JSON object"
                            ),
                            is_error: true,
                            error: Some(CallErrorKind::InvalidArgs),
                            elapsed: Duration::ZERO,
                        })),
                    }
                }
                messages.push(reply);
                if let Some(observer) = &self.observer {
                    observer.tool_calls(depth, &calls);
                }
                let mut dispatched = self
                    .dispatcher
                    .dispatch(&registry, &turn, calls)
                    .await
                    .into_iter();
                let results: Vec<ToolResult> = slots
                    .into_iter()
                    .filter_map(|slot| slot.or_else(|| dispatched.next()))
                    .collect();
                let mut answers = Vec::with_capacity(results.len());
                for result in &results {
                    if let Some(observer) = &self.observer {
                        observer.tool_result(depth, result);
                    }
                    answers.push(Message::tool_result(
                        &result.call_id,
                        cap_output(&result.output),
                    ));
                }
                // One transaction: a batch's results are stored all or none.
                self.append(&session, answers.clone()).await?;
                messages.extend(answers);
                if cancel.is_cancelled() {
                    return Err(AgentError::Cancelled);
                }
            }
            Err(AgentError::IterationLimit(self.config.max_iterations))
        })
    }
}

impl AgentInner {
    async fn append(&self, session: &str, messages: Vec<Message>) -> Result<(), SessionError> {
        let (store, session) = (Arc::clone(&self.store), session.to_owned());
        blocking(move || store.append_all(&session, &messages)).await
    }
}

/// The most bytes of one tool result the model gets (and the session keeps).
const MAX_TOOL_OUTPUT: usize = 64 * 1024;

fn cap_output(output: &str) -> String {
    crate::text::cap_bytes(output, MAX_TOOL_OUTPUT, |left| {
        format!("\n[truncated: {left} more bytes of this result were left out]")
    })
}

/// Child turns for the calls of one turn: on the same agent, with the parent's tools
/// minus the excluded ones, one level deeper.
struct ChildTurns {
    agent: Arc<AgentInner>,
    registry: Arc<ToolRegistry>,
    depth: u32,
}

#[async_trait]
impl ChildTurnService for ChildTurns {
    async fn run_child_turn(
        &self,
        parent: &TurnIdentity,
        request: ChildTurnRequest,
        call_cancel: CancellationToken,
    ) -> Result<String, String> {
        let limits = &self.agent.config.children;
        if self.depth >= limits.max_depth {
            return Err(format!(
                "child turns may nest {} deep and this turn is at that depth; do the task \
                 yourself",
                limits.max_depth
            ));
        }
        let ChildTurnRequest { prompt, context } = request;
        let prompt = match context {
            Some(context) if !context.is_empty() => format!("{prompt}\n\nContext:\n{context}"),
            _ => prompt,
        };
        // depth < max_depth here, and there is one semaphore per such depth.
        let slots = &self.agent.children[self.depth as usize];
        let _permit = tokio::select! {
            permit = slots.acquire() => permit
                .map_err(|_| "the agent is shutting down".to_owned())?,
            () = call_cancel.cancelled() => return Err("cancelled".to_owned()),
        };
        let registry = Arc::new(self.registry.without(&limits.exclude));
        let store = Arc::clone(&self.agent.store);
        let parent_session = parent.session_id.clone();
        let session = blocking(move || store.create(Some(&parent_session)))
            .await
            .map_err(|e| e.to_string())?;
        // The child stops with the calling tool (its cancel, its timeout) and its turn.
        let cancel = call_cancel.child_token();
        let mut child =
            Arc::clone(&self.agent).turn(registry, session, prompt, cancel.clone(), self.depth + 1);
        match tokio::time::timeout(limits.timeout, &mut child).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(format!("the child turn failed: {e}")),
            Err(_) => {
                // Tell it to stop, and give its tools the dispatcher's grace to do so.
                cancel.cancel();
                let grace = self.agent.dispatcher.config().cancel_grace;
                let _ = tokio::time::timeout(grace, child).await;
                Err(format!(
                    "the child turn took longer than {:?} and was stopped",
                    limits.timeout
                ))
            }
        }
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

/// Plugins' host requests in an agent's turns: the state folder and session search.
struct AgentRequests {
    agent: Arc<AgentInner>,
}

#[async_trait]
impl HostRequests for AgentRequests {
    async fn request(
        &self,
        turn: &TurnIdentity,
        request: HostRequest,
    ) -> Result<HostAnswer, ServiceError> {
        match request {
            HostRequest::SessionsSearch(query) => {
                let limit = query.limit.clamp(1, 50);
                let exclude = query
                    .exclude_current
                    .then(|| turn.session_id.clone());
                let store = Arc::clone(&self.agent.store);
                let hits = blocking(move || store.search(&query.query, limit, exclude.as_deref()))
                    .await
                    .map_err(|e| ServiceError::Failed(e.to_string()))?;
                Ok(SessionsSearchAnswer { hits }.into())
            }
            other => self.agent.profile_requests.request(turn, other).await,
        }
    }
}
