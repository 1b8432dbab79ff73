//! The context a call runs in: the turn it belongs to (profile, session, model), who is
//! calling (frontend, uid, token, client), its cancel token, and the host services a tool may use (child turns; progress, questions
//! for the person and completions from the caller's model, through a [`CallerChannel`]).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use toolhost_plugin_api::{
    AskAnswer, AskRequest, ChildTurnCall, ClientAnswer, ClientQuestion, DelegationAnswer,
    DelegationRequest, HostAnswer, HostRequest, LogLevel, SampleAnswer, SampleRequest,
    ServiceError, StateDirAnswer,
};

/// Which turn a call works for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnIdentity {
    /// The profile whose agent runs the turn (tools keep per-profile state apart with it).
    pub profile_id: String,
    /// The session (conversation) the turn belongs to.
    pub session_id: String,
    /// The model that asked for the calls.
    pub model: String,
}

/// Which way a call came in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Frontend {
    /// A program using the library directly.
    #[default]
    Library,
    /// `toolhost call` in this process.
    Cli,
    /// The control socket (`toolhost call --control`).
    Control,
    /// An MCP client (stdio or HTTP).
    Mcp,
    /// The host's own agent (`toolhost run`, `chat`).
    Agent,
    /// A child turn of the agent (`delegate_task`).
    ChildTurn,
}

impl fmt::Display for Frontend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Frontend::Library => "library",
            Frontend::Cli => "cli",
            Frontend::Control => "control",
            Frontend::Mcp => "mcp",
            Frontend::Agent => "agent",
            Frontend::ChildTurn => "child_turn",
        })
    }
}

/// Who is calling: the frontend and what it knows of the caller. Observers (statistics,
/// later an audit log) see it with every call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Caller {
    /// The way in.
    pub frontend: Frontend,
    /// The calling process's uid, where the frontend knows it (CLI, control socket, stdio).
    pub uid: Option<u32>,
    /// The name of the bearer token it authenticated with (MCP over HTTP).
    pub token: Option<String>,
    /// The client's name and version, as it gave them (MCP).
    pub client: Option<(String, String)>,
    /// The W3C trace context (`traceparent`) the client sent with the call (MCP
    /// `_meta`), as it sent it; recorded in the audit log.
    pub traceparent: Option<String>,
}

impl Caller {
    /// A caller of `frontend` that said nothing more about itself.
    pub fn new(frontend: Frontend) -> Caller {
        Caller {
            frontend,
            ..Caller::default()
        }
    }

    /// This process's user calling through `frontend` (the CLI, the agent).
    pub fn this_process(frontend: Frontend) -> Caller {
        Caller {
            frontend,
            uid: Some(crate::private::effective_uid()),
            ..Caller::default()
        }
    }
}

/// Runs child turns for tools such as `delegate_task`. The agent runtime provides it.
#[async_trait]
pub trait ChildTurnService: Send + Sync {
    /// Runs one child turn for `parent` with `request` and returns the child's final
    /// answer, or why there is none (its text is what the calling tool and its model
    /// read). `cancel` is the calling tool's: when the call is cancelled or times out, so
    /// is the child.
    async fn run_child_turn(
        &self,
        parent: &TurnIdentity,
        request: ChildTurnCall,
        cancel: CancellationToken,
    ) -> Result<String, ChildTurnError>;

    /// Starts a background delegation for `parent` (the `agent.delegate` request): its
    /// tasks run on after the call returns; the answer names the delegation and its
    /// completion units. `cancel` is the calling tool's (a background delegation does not
    /// stop with its call). A service that cannot answers [`ServiceError::Unavailable`].
    async fn delegate(
        &self,
        _parent: &TurnIdentity,
        _request: DelegationRequest,
        _cancel: CancellationToken,
    ) -> Result<DelegationAnswer, ServiceError> {
        Err(ServiceError::Unavailable(
            "background delegation is not available in this host: no agent runs this call"
                .to_owned(),
        ))
    }

    /// The service for one call of the batch, `call_id` being the model's id for it
    /// (every child turn of one call shares one concurrency slot); `None` (the default):
    /// this same service.
    fn for_call(&self, _call_id: &str) -> Option<Arc<dyn ChildTurnService>> {
        None
    }
}

/// Answers a plugin's host request with a call's services: a delegation goes to its
/// child-turn service, the rest to its host requests; `no_requests` says why a call
/// without either has no answer.
pub async fn answer_host_request(
    services: &TurnServices,
    turn: &TurnIdentity,
    cancel: CancellationToken,
    request: HostRequest,
    no_requests: impl FnOnce(&HostRequest) -> ServiceError,
) -> Result<HostAnswer, ServiceError> {
    match request {
        HostRequest::Delegate(delegation) => match &services.child_turns {
            Some(children) => children
                .delegate(turn, delegation, cancel)
                .await
                .map(HostAnswer::from),
            None => Err(ServiceError::Unavailable(
                "background delegation is not available: no agent is running this call (it \
                 came from `toolhost call` or a client without an agent)"
                    .to_owned(),
            )),
        },
        // The call's own budget: known wherever the call runs (a worker gets it with
        // the call), so it is answered there, profile or not.
        HostRequest::OutputBudget(_) => Ok(HostAnswer::from(toolhost_plugin_api::OutputBudget {
            max_chars: services.budget.max_chars as u64,
            max_lines: services.budget.max_lines as u64,
        })),
        // What the call asks its caller goes to its caller, wherever the call runs.
        HostRequest::ClientAsk(questions) => match &services.caller {
            Some(caller) => Ok(HostAnswer::from(toolhost_plugin_api::ClientAnswers {
                answers: caller.ask_client(questions.questions).await,
            })),
            None => Err(ServiceError::Unavailable(
                "nobody can be asked: this caller has no person or client attached".to_owned(),
            )),
        },
        HostRequest::CallDetach(_) => Ok(HostAnswer::from(toolhost_plugin_api::DetachAnswer {
            detached: match &services.caller {
                Some(caller) => caller.detach().await,
                None => false,
            },
        })),
        request => match &services.requests {
            Some(requests) => requests.request(turn, request).await,
            None => Err(no_requests(&request)),
        },
    }
}

/// Why a child turn gave no answer. Its text reaches the calling tool and the model, so it
/// says what to do where the model can do something.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChildTurnError {
    /// The calling turn is as deep as turns may nest.
    #[error(
        "child turns may nest {max_depth} deep and this turn is at that depth; do the task \
         yourself"
    )]
    TooDeep {
        /// `[agent.children] max_spawn_depth`.
        max_depth: u32,
    },
    /// The child may not run as asked (a role the host does not allow); the message says
    /// what to ask instead.
    #[error("{0}")]
    Refused(String),
    /// The agent is shutting down.
    #[error("the agent is shutting down")]
    ShuttingDown,
    /// The calling tool's call was cancelled while the child waited for its turn.
    #[error("cancelled")]
    Cancelled,
    /// The child's conversation could not be started.
    #[error("{0}")]
    Session(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The child's turn ended without an answer.
    #[error("the child turn failed: {0}")]
    Failed(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The child's turn took longer than `[agent.children] child_timeout_seconds` and was
    /// stopped.
    #[error("the child turn took longer than {0:?} and was stopped")]
    TimedOut(std::time::Duration),
    /// What the host answered a worker's child-turn request, as it said it.
    #[error("{0}")]
    Relayed(String),
}

/// Whoever asked for the calls of a turn (an MCP client, the chat terminal): tools report
/// progress and log lines to it, ask its person questions and ask its model for text.
/// Every method has a default for callers that cannot do it.
#[async_trait]
pub trait CallerChannel: Send + Sync {
    /// The call got `progress` out of `total` (if known).
    fn progress(&self, _progress: f64, _total: Option<f64>, _message: Option<&str>) {}

    /// A log line of the tool's (also written to the host's log).
    fn log(&self, _level: LogLevel, _tool: &str, _message: &str) {}

    /// Asks the person a question and waits for the answer.
    async fn ask_user(&self, _request: AskRequest) -> Result<AskAnswer, ServiceError> {
        Err(ServiceError::Unavailable(
            "nobody can be asked: this caller has no person attached".to_owned(),
        ))
    }

    /// Asks the caller's model for a completion.
    async fn sample(&self, _request: SampleRequest) -> Result<SampleAnswer, ServiceError> {
        Err(ServiceError::Unavailable(
            "this caller offers no model to sample from".to_owned(),
        ))
    }

    /// Asks the caller several things (`ctx.ask_client`), answering each in order. By
    /// default one after another through [`CallerChannel::ask_user`] and
    /// [`CallerChannel::sample`], with no roots to give; a caller that can ask them at
    /// once (an MCP client) overrides it.
    async fn ask_client(&self, questions: Vec<ClientQuestion>) -> Vec<ClientAnswer> {
        let mut answers = Vec::with_capacity(questions.len());
        for question in questions {
            answers.push(
                match question {
                    ClientQuestion::Ask { request, .. } => {
                        self.ask_user(request).await.map(ClientAnswer::Ask)
                    }
                    ClientQuestion::Sample { request, .. } => {
                        self.sample(request).await.map(ClientAnswer::Sample)
                    }
                    _ => Err(ServiceError::Unavailable(
                        "this caller has no roots to give (only MCP clients with the roots \
                     capability have)"
                            .to_owned(),
                    )),
                }
                .unwrap_or_else(ClientAnswer::from),
            );
        }
        answers
    }

    /// Lets the rest of the call run as a task its caller polls (`ctx.detach()`); `true`
    /// when the caller now holds a task. By default `false`: the caller waits.
    async fn detach(&self) -> bool {
        false
    }
}

/// Answers plugins' host requests (`ctx.state_dir()`, `ctx.search_sessions(..)`). A
/// method this host does not know never gets here: the plugin is told it is unavailable.
#[async_trait]
pub trait HostRequests: Send + Sync {
    /// The answer to `request`; one this service cannot answer is
    /// [`ServiceError::Unavailable`].
    async fn request(
        &self,
        turn: &TurnIdentity,
        request: HostRequest,
    ) -> Result<HostAnswer, ServiceError>;
}

/// The host requests every profile can answer without an agent: its state folder and its
/// workspace.
pub struct ProfileRequests {
    state_dir: std::path::PathBuf,
    workspace: toolhost_plugin_api::WorkspaceAnswer,
}

impl ProfileRequests {
    /// Answers for the profile whose state lives in `state_dir`, with no workspace.
    pub fn new(state_dir: std::path::PathBuf) -> Self {
        ProfileRequests {
            state_dir,
            workspace: toolhost_plugin_api::WorkspaceAnswer::default(),
        }
    }

    /// These answers with `workspace` as the profile's workspace
    /// (`WorkspaceSettings::answer` of a loaded profile).
    #[must_use]
    pub fn with_workspace(mut self, workspace: toolhost_plugin_api::WorkspaceAnswer) -> Self {
        self.workspace = workspace;
        self
    }

    /// `profile.state_dir`: the folder, created (mode 0700) if missing; an existing one
    /// that others can reach is narrowed with a log line.
    pub fn state_dir(&self) -> Result<StateDirAnswer, ServiceError> {
        crate::private::ensure_private_dir(&self.state_dir).map_err(|e| {
            ServiceError::Failed(format!(
                "could not create the profile's state folder {}: {e}",
                self.state_dir.display()
            ))
        })?;
        let path = self.state_dir.to_str().ok_or_else(|| {
            ServiceError::Failed(format!(
                "the profile's state folder {} is not valid UTF-8; move the profiles to a \
                 path that is",
                self.state_dir.display()
            ))
        })?;
        Ok(StateDirAnswer {
            path: path.to_owned(),
        })
    }
}

#[async_trait]
impl HostRequests for ProfileRequests {
    async fn request(
        &self,
        _turn: &TurnIdentity,
        request: HostRequest,
    ) -> Result<HostAnswer, ServiceError> {
        match request {
            HostRequest::ProfileStateDir(_) => self.state_dir().map(HostAnswer::from),
            HostRequest::ProfileWorkspace(_) => Ok(HostAnswer::from(self.workspace.clone())),
            HostRequest::SessionsSearch(_) => Err(ServiceError::Unavailable(
                "session search needs an agent's turn (toolhost run or chat); this call \
                 has none"
                    .to_owned(),
            )),
            HostRequest::Delegate(_) => Err(ServiceError::Unavailable(
                "background delegation needs an agent's turn (toolhost run or chat); this \
                 call has none"
                    .to_owned(),
            )),
            HostRequest::SessionsSummary(_) => Err(ServiceError::Unavailable(
                "a session summary needs an agent's turn (toolhost run or chat); this call \
                 has none"
                    .to_owned(),
            )),
            other => Err(unknown_request(&other)),
        }
    }
}

/// What a host says to a request it has no answer for (one a newer plugin-api added).
pub fn unknown_request(request: &HostRequest) -> ServiceError {
    let method = request
        .to_wire()
        .map_or_else(|_| format!("{request:?}"), |(method, _)| method);
    ServiceError::Unavailable(format!("this host does not know the request '{method}'"))
}

/// The services a host offers to the calls of one turn.
#[derive(Clone, Default)]
pub struct TurnServices {
    /// `None` where no agent runs the turn (e.g. `toolhost call`).
    pub child_turns: Option<Arc<dyn ChildTurnService>>,
    /// `None` where nobody is at the other end to report to or ask.
    pub caller: Option<Arc<dyn CallerChannel>>,
    /// `None` where no profile is known.
    pub requests: Option<Arc<dyn HostRequests>>,
    /// Where the profile keeps cut outputs (`read_output` reads them); `None` where
    /// nothing is kept.
    pub outputs: Option<Arc<crate::outputs::OutputStore>>,
    /// The budget the calls' results are held to (`read_output` cuts its own to it).
    pub budget: crate::outputs::Budget,
}

/// The context calls run in: who they work for, how to stop them, what services they
/// have. The dispatcher runs a batch in one and gives each call its own copy with a child
/// cancel token (cancelled when the batch's is, or when the call times out).
#[derive(Clone, Default)]
pub struct CallContext {
    /// Profile, session and model.
    pub turn: Arc<TurnIdentity>,
    /// Who is calling (frontend, uid, token, client).
    pub caller: Arc<Caller>,
    /// Fires when the turn is stopped (or, in a call's own copy, when it times out).
    pub cancel: CancellationToken,
    /// Host services.
    pub services: TurnServices,
}

impl CallContext {
    /// A context with these details, a fresh cancel token and no services.
    pub fn new(turn: TurnIdentity) -> Self {
        CallContext {
            turn: Arc::new(turn),
            caller: Arc::default(),
            cancel: CancellationToken::new(),
            services: TurnServices::default(),
        }
    }

    /// The context of the call `call_id` of this batch: the same identity and services
    /// (the child-turn service made the call's own), and a cancel token of its own that
    /// the batch's cancels.
    pub fn for_call(&self, call_id: &str) -> CallContext {
        let mut services = self.services.clone();
        services.child_turns = services
            .child_turns
            .map(|c| c.for_call(call_id).unwrap_or(c));
        CallContext {
            turn: Arc::clone(&self.turn),
            caller: Arc::clone(&self.caller),
            cancel: self.cancel.child_token(),
            services,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frontends_print_as_their_config_names() {
        assert_eq!(Frontend::ChildTurn.to_string(), "child_turn");
        assert_eq!(Caller::new(Frontend::Mcp).frontend, Frontend::Mcp);
        let call = CallContext::new(TurnIdentity::default()).for_call("c1");
        assert_eq!(call.caller.frontend, Frontend::Library);
    }
}
