//! Named requests a plugin sends the host (plugin-api 0.1.3) as typed values: on the wire
//! each is a method name and JSON parameters, and each has a typed answer.

use serde::de::{Deserializer, IgnoredAny};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A request to the host. Its JSON form (`{"method": ..., "params": ...}`, of which the
/// method and the parameters cross the ABI as two strings) is what
/// [`ToolContext::host_request`](crate::ToolContext::host_request) sends, so plugins built
/// before this type existed are understood.
///
/// Tools usually call the typed helpers ([`ToolContext::state_dir`],
/// [`ToolContext::search_sessions`]); [`ToolContext::request`] sends any request and reads
/// its typed answer:
///
/// ```
/// use toolhost_plugin_api::{HostRequest, NoParams, ServiceError, StateDirAnswer, ToolContext};
///
/// async fn state_folder(ctx: &ToolContext<'_>) -> Result<String, ServiceError> {
///     let answer: StateDirAnswer = ctx.request(&HostRequest::ProfileStateDir(NoParams)).await?;
///     Ok(answer.path)
/// }
/// ```
///
/// [`ToolContext::state_dir`]: crate::ToolContext::state_dir
/// [`ToolContext::search_sessions`]: crate::ToolContext::search_sessions
/// [`ToolContext::request`]: crate::ToolContext::request
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "method", content = "params")]
#[non_exhaustive]
pub enum HostRequest {
    /// `profile.state_dir`: the folder where the call's profile keeps its state. Takes no
    /// parameters (`{}`; whatever is sent is ignored). Answered with [`StateDirAnswer`].
    #[serde(rename = "profile.state_dir")]
    ProfileStateDir(NoParams),
    /// `sessions.search`: full-text search over the profile's past conversations.
    /// Answered with [`SessionsSearchAnswer`].
    #[serde(rename = "sessions.search")]
    SessionsSearch(SessionQuery),
    /// `plugin.settings` (0.1.4): the calling plugin's settings, the host config's
    /// `[plugins.NAME.settings]` table. Takes no parameters. Answered with
    /// [`SettingsAnswer`].
    #[serde(rename = "plugin.settings")]
    PluginSettings(NoParams),
    /// `profile.workspace` (0.1.4): the call's profile's workspace, the folders its file
    /// and command tools are confined to and the rules for commands and fetches (the
    /// profile's `[workspace]` table over the host config's). Takes no parameters.
    /// Answered with [`WorkspaceAnswer`].
    #[serde(rename = "profile.workspace")]
    ProfileWorkspace(NoParams),
    /// `agent.delegate` (0.1.4): start a background delegation, child turns that run on
    /// after the call returns and whose results the host adds to the conversation as
    /// they complete. Only an agent's turn answers it. Answered with
    /// [`DelegationAnswer`].
    #[serde(rename = "agent.delegate")]
    Delegate(DelegationRequest),
    /// `sessions.summary` (0.1.4): the current conversation's history, compact: the
    /// person's requests, numbered, each with its outcome (the answer shortened, the tools
    /// called with counts, their errors). Answered with [`SessionsSummaryAnswer`]; only
    /// in an agent's turn (a host without one answers [`ServiceError::Unavailable`](crate::ServiceError::Unavailable)).
    #[serde(rename = "sessions.summary")]
    SessionsSummary(SummaryQuery),
    /// `call.output_budget` (0.1.4): the most text this call's result may hold before
    /// the host cuts it. Takes no parameters. Answered with
    /// [`OutputBudget`](crate::OutputBudget); every host since 0.1.4 answers it, for every
    /// call.
    #[serde(rename = "call.output_budget")]
    OutputBudget(NoParams),
    /// `client.ask` (0.1.4): asks the call's client several things at once (questions,
    /// completions, its roots), each under a name. Answered with
    /// [`ClientAnswers`](crate::ClientAnswers), one answer per question in order.
    #[serde(rename = "client.ask")]
    ClientAsk(crate::ClientQuestions),
    /// `call.detach` (0.1.4): lets the rest of the call run as a task its client polls,
    /// where the tool declares task support and the client can hold tasks. Takes no
    /// parameters. Answered with [`DetachAnswer`](crate::DetachAnswer).
    #[serde(rename = "call.detach")]
    CallDetach(NoParams),
}

/// What a child agent may do (0.1.4). In JSON, `"leaf"` or `"orchestrator"`.
///
/// ```
/// use toolhost_plugin_api::ChildRole;
///
/// assert_eq!(serde_json::to_string(&ChildRole::Leaf).unwrap(), r#""leaf""#);
/// assert_eq!(ChildRole::default(), ChildRole::Leaf);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChildRole {
    /// Does the task itself: it goes without delegation, questions to the person and
    /// memory (and whatever else the host excludes for children).
    #[default]
    Leaf,
    /// May hand parts of its task to children of its own (keeps `delegate_task`). Hosts
    /// allow it only where the operator turned it on, and only as deep as they allow.
    Orchestrator,
}

/// The parameters of `agent.delegate`: the tasks of one background delegation.
///
/// ```
/// use toolhost_plugin_api::{DelegatedTask, DelegationRequest, HostRequest};
/// use serde_json::json;
///
/// let request = DelegationRequest {
///     tasks: vec![
///         DelegatedTask::new("read the logs").in_group("logs"),
///         DelegatedTask::new("read the metrics"),
///     ],
/// };
/// let (method, params) = HostRequest::Delegate(request).to_wire().unwrap();
/// assert_eq!(method, "agent.delegate");
/// assert_eq!(params, json!({"tasks": [
///     {"prompt": "read the logs", "group": "logs"},
///     {"prompt": "read the metrics"},
/// ]}));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DelegationRequest {
    /// The tasks, each a child turn.
    pub tasks: Vec<DelegatedTask>,
}

/// One task of a [`DelegationRequest`].
///
/// ```
/// use toolhost_plugin_api::{ChildRole, DelegatedTask};
///
/// let task = DelegatedTask::new("Fix the failing test")
///     .with_context("the login test fails since the last commit")
///     .with_role(ChildRole::Orchestrator);
/// assert_eq!(task.role, Some(ChildRole::Orchestrator));
/// assert_eq!(task.group, None); // a completion unit of its own
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DelegatedTask {
    /// What the child agent is asked to do.
    pub prompt: String,
    /// Background the child needs, if any.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::lenient::text_or_none"
    )]
    pub context: Option<String>,
    /// The child's role; `None` is a leaf.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<ChildRole>,
    /// Tasks sharing a group complete together (where the host reports completions per
    /// unit); `None`: the task is a unit of its own.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::lenient::text_or_none"
    )]
    pub group: Option<String>,
}

impl DelegatedTask {
    /// A task for `prompt`, without context, role or group.
    pub fn new(prompt: impl Into<String>) -> Self {
        DelegatedTask {
            prompt: prompt.into(),
            ..DelegatedTask::default()
        }
    }

    /// This task with `context`.
    #[must_use]
    pub fn with_context(mut self, context: impl Into<String>) -> Self {
        self.context = Some(context.into());
        self
    }

    /// This task with `role`.
    #[must_use]
    pub fn with_role(mut self, role: ChildRole) -> Self {
        self.role = Some(role);
        self
    }

    /// This task in `group`.
    #[must_use]
    pub fn in_group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }
}

/// The answer to [`HostRequest::Delegate`]: the delegation's id and its completion units,
/// `{"delegation": "d-...", "units": [{"id": "d-.../u1", "tasks": [0, 1]}]}`.
///
/// ```
/// use toolhost_plugin_api::DelegationAnswer;
///
/// let answer: DelegationAnswer = serde_json::from_str(
///     r#"{"delegation": "d-1", "units": [{"id": "d-1/u1", "tasks": [0, 1]}]}"#,
/// )
/// .unwrap();
/// assert_eq!(answer.units[0].tasks, [0, 1]);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DelegationAnswer {
    /// The delegation's id; completions name it.
    pub delegation: String,
    /// Its completion units: each reports once, when all its tasks are done.
    #[serde(default)]
    pub units: Vec<DelegationUnit>,
}

/// One completion unit of a delegation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DelegationUnit {
    /// The unit's id (`DELEGATION/uN`).
    pub id: String,
    /// The tasks it covers, as indexes into the request's `tasks`.
    #[serde(default)]
    pub tasks: Vec<usize>,
}

/// The parameters of [`HostRequest::SessionsSummary`]: how many of the latest requests.
///
/// ```
/// use toolhost_plugin_api::SummaryQuery;
///
/// let all: SummaryQuery = serde_json::from_str("{}").unwrap();
/// assert_eq!(all.last, None);
/// let some: SummaryQuery = serde_json::from_str(r#"{"last": 3}"#).unwrap();
/// assert_eq!(some.last, Some(3));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SummaryQuery {
    /// Only the last `last` requests (the host caps it; `None`: its default, 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<u32>,
}

impl SummaryQuery {
    /// The last `last` requests (`None`: the host's default).
    ///
    /// ```
    /// use toolhost_plugin_api::SummaryQuery;
    ///
    /// assert_eq!(SummaryQuery::last(Some(5)).last, Some(5));
    /// ```
    pub fn last(last: Option<u32>) -> Self {
        SummaryQuery { last }
    }
}

/// The answer to [`HostRequest::SessionsSummary`]. Every field has a default, so an
/// answer from a host that knows fewer of them still reads.
///
/// ```
/// use toolhost_plugin_api::SessionsSummaryAnswer;
///
/// let answer: SessionsSummaryAnswer = serde_json::from_str(
///     r#"{"session": "s-1", "total": 2, "requests": [
///         {"number": 2, "request": "run the tests", "status": "in_progress",
///          "tools": [{"name": "run_command", "calls": 1, "errors": 0}]}]}"#,
/// )
/// .unwrap();
/// assert_eq!((answer.total, answer.requests[0].number), (2, 2));
/// assert_eq!(answer.requests[0].tools[0].name, "run_command");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct SessionsSummaryAnswer {
    /// The conversation.
    pub session: String,
    /// How many requests it has in all (the answer may hold only the last ones).
    pub total: u32,
    /// The requests, oldest first.
    pub requests: Vec<RequestSummary>,
}

impl SessionsSummaryAnswer {
    /// An answer for `session` holding `requests`, all of them (`total` is their number).
    ///
    /// ```
    /// use toolhost_plugin_api::{RequestSummary, SessionsSummaryAnswer};
    ///
    /// let answer = SessionsSummaryAnswer::new("s-1", vec![RequestSummary::new(1, "hello")]);
    /// assert_eq!(answer.total, 1);
    /// ```
    pub fn new(session: impl Into<String>, requests: Vec<RequestSummary>) -> Self {
        SessionsSummaryAnswer {
            session: session.into(),
            total: u32::try_from(requests.len()).unwrap_or(u32::MAX),
            requests,
        }
    }
}

/// One request of the person's and what came of it.
///
/// ```
/// use toolhost_plugin_api::RequestSummary;
///
/// let r = RequestSummary::new(1, "add a test");
/// assert_eq!((r.number, r.request.as_str(), r.status.as_str()), (1, "add a test", "no_answer"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct RequestSummary {
    /// Its number in the conversation, from 1.
    pub number: u32,
    /// What the person asked (shortened).
    pub request: String,
    /// `answered`, `in_progress` (the request being worked on now) or `no_answer` (its
    /// turn ended without a final answer: an error, the iteration limit, a cancel).
    /// Hosts may add values.
    pub status: String,
    /// The final answer (shortened), if there was one.
    pub answer: Option<String>,
    /// The tools called for it, in the order first called.
    pub tools: Vec<ToolUse>,
    /// The first errors its tool calls returned (shortened, a few at most).
    pub errors: Vec<String>,
}

impl RequestSummary {
    /// Request `number`, saying `request`, with no outcome yet (`no_answer`).
    pub fn new(number: u32, request: impl Into<String>) -> Self {
        RequestSummary {
            number,
            request: request.into(),
            status: "no_answer".to_owned(),
            ..RequestSummary::default()
        }
    }
}

/// How often one tool was called for a request.
///
/// ```
/// use toolhost_plugin_api::ToolUse;
///
/// let used = ToolUse::new("read_file", 3, 1);
/// assert_eq!((used.calls, used.errors), (3, 1));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct ToolUse {
    /// The tool.
    pub name: String,
    /// Calls.
    pub calls: u32,
    /// Of them, calls that returned an error.
    pub errors: u32,
}

impl ToolUse {
    /// `name`, called `calls` times, `errors` of them failing.
    pub fn new(name: impl Into<String>, calls: u32, errors: u32) -> Self {
        ToolUse {
            name: name.into(),
            calls,
            errors,
        }
    }
}

impl From<SessionsSummaryAnswer> for HostAnswer {
    fn from(answer: SessionsSummaryAnswer) -> Self {
        HostAnswer::SessionsSummary(answer)
    }
}

/// The parameters of a request that takes none: sent as `{}`, anything accepted.
///
/// ```
/// use toolhost_plugin_api::NoParams;
///
/// assert_eq!(serde_json::to_string(&NoParams).unwrap(), "{}");
/// assert_eq!(serde_json::from_str::<NoParams>(r#"{"ignored": true}"#).unwrap(), NoParams);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoParams;

impl Serialize for NoParams {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_map(Some(0))?.end()
    }
}

impl<'de> Deserialize<'de> for NoParams {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        IgnoredAny::deserialize(deserializer).map(|_| NoParams)
    }
}

/// Why the host could not read a request (see [`HostRequest::from_wire`]).
///
/// ```
/// use toolhost_plugin_api::{HostRequest, HostRequestError};
/// use serde_json::json;
///
/// let e = HostRequest::from_wire("weather.today", json!({})).unwrap_err();
/// assert!(matches!(e, HostRequestError::Unknown(_)));
/// assert_eq!(e.to_string(), "this host does not know the request 'weather.today'");
///
/// let e = HostRequest::from_wire("sessions.search", json!("tea")).unwrap_err();
/// assert!(matches!(e, HostRequestError::Malformed { .. }));
/// ```
#[derive(Debug)]
pub enum HostRequestError {
    /// The method is not one this version knows (a newer plugin's request).
    Unknown(String),
    /// The parameters do not fit the method.
    Malformed {
        /// The method.
        method: String,
        /// What did not fit.
        source: serde_json::Error,
    },
}

impl std::fmt::Display for HostRequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostRequestError::Unknown(method) => {
                write!(f, "this host does not know the request '{method}'")
            }
            HostRequestError::Malformed { method, source } => {
                write!(f, "malformed parameters for '{method}': {source}")
            }
        }
    }
}

impl std::error::Error for HostRequestError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HostRequestError::Unknown(_) => None,
            HostRequestError::Malformed { source, .. } => Some(source),
        }
    }
}

/// A request as it crosses the ABI.
#[derive(Serialize, Deserialize)]
struct Wire {
    method: String,
    #[serde(default)]
    params: Value,
}

impl HostRequest {
    /// The method names this version knows.
    ///
    /// ```
    /// use toolhost_plugin_api::HostRequest;
    ///
    /// assert!(HostRequest::METHODS.contains(&"sessions.search"));
    /// ```
    pub const METHODS: [&'static str; 9] = [
        "profile.state_dir",
        "sessions.search",
        "plugin.settings",
        "profile.workspace",
        "agent.delegate",
        "sessions.summary",
        "call.output_budget",
        "client.ask",
        "call.detach",
    ];

    /// The method name and the parameters, as they cross the ABI.
    ///
    /// ```
    /// use toolhost_plugin_api::{HostRequest, NoParams};
    /// use serde_json::json;
    ///
    /// let (method, params) = HostRequest::ProfileStateDir(NoParams).to_wire().unwrap();
    /// assert_eq!((method.as_str(), params), ("profile.state_dir", json!({})));
    /// ```
    pub fn to_wire(&self) -> Result<(String, Value), serde_json::Error> {
        let wire: Wire = serde_json::from_value(serde_json::to_value(self)?)?;
        Ok((wire.method, wire.params))
    }

    /// Reads a request that crossed the ABI as `method` and `params` (what a host does with
    /// [`HostVTable::host_request`](crate::ffi::HostVTable::host_request)'s arguments).
    ///
    /// ```
    /// use toolhost_plugin_api::{HostRequest, SessionQuery};
    /// use serde_json::json;
    ///
    /// let request = HostRequest::from_wire("sessions.search", json!({"query": "tea"})).unwrap();
    /// assert_eq!(
    ///     request,
    ///     HostRequest::SessionsSearch(SessionQuery {
    ///         query: "tea".into(),
    ///         limit: 5, // the defaults
    ///         exclude_current: true,
    ///     })
    /// );
    /// ```
    pub fn from_wire(method: &str, params: Value) -> Result<HostRequest, HostRequestError> {
        if !Self::METHODS.contains(&method) {
            return Err(HostRequestError::Unknown(method.to_owned()));
        }
        let wire = Wire {
            method: method.to_owned(),
            params,
        };
        serde_json::to_value(wire)
            .and_then(serde_json::from_value)
            .map_err(|source| HostRequestError::Malformed {
                method: method.to_owned(),
                source,
            })
    }
}

/// The answer to [`HostRequest::ProfileStateDir`]: `{"path": ...}`.
///
/// ```
/// use toolhost_plugin_api::StateDirAnswer;
///
/// let answer: StateDirAnswer = serde_json::from_str(r#"{"path": "/srv/state/work"}"#).unwrap();
/// assert_eq!(answer.path, "/srv/state/work");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateDirAnswer {
    /// The folder (it exists, mode 0700).
    pub path: String,
}

/// The answer to [`HostRequest::SessionsSearch`]: `{"hits": [...]}`.
///
/// ```
/// use toolhost_plugin_api::SessionsSearchAnswer;
///
/// let answer: SessionsSearchAnswer = serde_json::from_str(
///     r#"{"hits": [{"session": "s-1", "time": "2026-11-30T09:00:00Z",
///                   "role": "user", "snippet": "a cup of [tea]"}]}"#,
/// )
/// .unwrap();
/// assert_eq!(answer.hits[0].session, "s-1");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionsSearchAnswer {
    /// The matching messages, best first.
    pub hits: Vec<SessionHit>,
}

/// The answer to [`HostRequest::PluginSettings`]: `{"settings": {...}, "base": ...,
/// "home": ...}`, the plugin's `[plugins.NAME.settings]` table as JSON (`{}` when the config
/// has none) and what the paths in it are relative to, for [`SettingsPath`](crate::SettingsPath).
///
/// ```
/// use toolhost_plugin_api::SettingsAnswer;
///
/// let answer: SettingsAnswer = serde_json::from_str(
///     r#"{"settings": {"units": "metric"}, "base": "/etc/toolhost"}"#,
/// ).unwrap();
/// assert_eq!(answer.settings["units"], "metric");
/// assert_eq!(answer.base.as_deref(), Some("/etc/toolhost"));
/// assert_eq!(answer.home, None);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SettingsAnswer {
    /// The settings table.
    pub settings: Value,
    /// The folder of the config file that holds the table: what a relative path in it is
    /// relative to. `None` when the settings come from no file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// The home folder of the host's user: what `~/` in a path means (a worker's
    /// environment may not say). `None` when the host has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<String>,
    /// A key of the table the plugin's type does not read fails the read (naming it)
    /// instead of being passed over: what `TestHost` answers, so a test with a misspelt
    /// key fails where a host would warn. Hosts leave it `false` (they warn of such keys
    /// from the plugin's settings schema when it loads).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub strict: bool,
}

/// Any answer of the host's, as it crosses the ABI (its JSON is the inner answer's).
///
/// ```
/// use toolhost_plugin_api::{HostAnswer, StateDirAnswer};
///
/// let answer = HostAnswer::from(StateDirAnswer { path: "/srv/state".into() });
/// assert_eq!(serde_json::to_string(&answer).unwrap(), r#"{"path":"/srv/state"}"#);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
#[non_exhaustive]
pub enum HostAnswer {
    /// To [`HostRequest::ProfileStateDir`].
    StateDir(StateDirAnswer),
    /// To [`HostRequest::SessionsSearch`].
    SessionsSearch(SessionsSearchAnswer),
    /// To [`HostRequest::PluginSettings`].
    Settings(SettingsAnswer),
    /// To [`HostRequest::ProfileWorkspace`].
    Workspace(WorkspaceAnswer),
    /// To [`HostRequest::SessionsSummary`].
    SessionsSummary(SessionsSummaryAnswer),
    /// To [`HostRequest::Delegate`].
    Delegation(DelegationAnswer),
    /// To [`HostRequest::OutputBudget`].
    OutputBudget(crate::OutputBudget),
    /// To [`HostRequest::ClientAsk`].
    ClientAnswers(crate::ClientAnswers),
    /// To [`HostRequest::CallDetach`].
    Detach(crate::DetachAnswer),
}

impl From<crate::ClientAnswers> for HostAnswer {
    fn from(answer: crate::ClientAnswers) -> Self {
        HostAnswer::ClientAnswers(answer)
    }
}

impl From<crate::DetachAnswer> for HostAnswer {
    fn from(answer: crate::DetachAnswer) -> Self {
        HostAnswer::Detach(answer)
    }
}

impl From<crate::OutputBudget> for HostAnswer {
    fn from(answer: crate::OutputBudget) -> Self {
        HostAnswer::OutputBudget(answer)
    }
}

impl From<DelegationAnswer> for HostAnswer {
    fn from(answer: DelegationAnswer) -> Self {
        HostAnswer::Delegation(answer)
    }
}

impl From<WorkspaceAnswer> for HostAnswer {
    fn from(answer: WorkspaceAnswer) -> Self {
        HostAnswer::Workspace(answer)
    }
}

/// The answer to [`HostRequest::ProfileWorkspace`]: the profile's workspace. Every field
/// has a default, so an answer from a host that knows fewer of them still reads (no
/// roots: no workspace).
///
/// ```
/// use toolhost_plugin_api::WorkspaceAnswer;
///
/// let answer: WorkspaceAnswer = serde_json::from_str(r#"{"roots": ["/srv/project"]}"#).unwrap();
/// assert_eq!(answer.roots, ["/srv/project"]);
/// assert!(!answer.allow_network && !answer.shell);
/// assert_eq!(answer.command_timeout_secs, 120);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct WorkspaceAnswer {
    /// The folders tools may read and write beneath, absolute; the first is where
    /// relative paths start. Empty: the profile has no workspace.
    pub roots: Vec<String>,
    /// Commands may use the network.
    pub allow_network: bool,
    /// Commands may be shell command lines (`sh -c`), not just a program and arguments.
    pub shell: bool,
    /// Programs commands may not run (names or absolute paths).
    pub deny_programs: Vec<String>,
    /// Environment variables passed to commands besides the built-in allowlist.
    pub env: Vec<String>,
    /// A command's time limit, seconds.
    pub command_timeout_secs: u64,
    /// Fetches may reach loopback, private, link-local and metadata addresses.
    pub allow_private_addresses: bool,
    /// Commands may make Unix-domain sockets (a host without this field: they may not).
    pub allow_unix_sockets: bool,
    /// Where to add roots (the config file and table), for the "no workspace" answer.
    pub config_hint: String,
    /// Paths the workspace tools may neither read nor write, whatever the roots say: the
    /// host's state (approvals, tokens, sessions, kept outputs), the audit log, its config
    /// files and its plugin folders (a host without this field: none but what its
    /// sandboxes hide).
    pub protected: Vec<String>,
}

impl Default for WorkspaceAnswer {
    fn default() -> Self {
        WorkspaceAnswer {
            roots: Vec::new(),
            allow_network: false,
            shell: false,
            deny_programs: Vec::new(),
            env: Vec::new(),
            command_timeout_secs: 120,
            allow_private_addresses: false,
            allow_unix_sockets: false,
            config_hint: String::new(),
            protected: Vec::new(),
        }
    }
}

impl WorkspaceAnswer {
    /// A workspace of `roots` with every other field at its default.
    ///
    /// ```
    /// use toolhost_plugin_api::WorkspaceAnswer;
    ///
    /// let answer = WorkspaceAnswer::with_roots(["/srv/project"]);
    /// assert_eq!(answer.roots, ["/srv/project"]);
    /// ```
    pub fn with_roots<I, S>(roots: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        WorkspaceAnswer {
            roots: roots.into_iter().map(Into::into).collect(),
            ..WorkspaceAnswer::default()
        }
    }
}

impl From<SettingsAnswer> for HostAnswer {
    fn from(answer: SettingsAnswer) -> Self {
        HostAnswer::Settings(answer)
    }
}

impl From<StateDirAnswer> for HostAnswer {
    fn from(answer: StateDirAnswer) -> Self {
        HostAnswer::StateDir(answer)
    }
}

impl From<SessionsSearchAnswer> for HostAnswer {
    fn from(answer: SessionsSearchAnswer) -> Self {
        HostAnswer::SessionsSearch(answer)
    }
}

/// A search of past conversations (see [`ToolContext::search_sessions`](crate::ToolContext::search_sessions)). Read leniently,
/// as hosts always have: a missing or mistyped field takes its default (no words, 5 hits,
/// leave out the current conversation).
///
/// ```
/// use toolhost_plugin_api::SessionQuery;
///
/// let query = SessionQuery { query: "deploy staging".into(), limit: 10, exclude_current: true };
/// # let _ = query;
/// let defaults: SessionQuery = serde_json::from_str(r#"{"query": "tea"}"#).unwrap();
/// assert_eq!((defaults.limit, defaults.exclude_current), (5, true));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionQuery {
    /// Words to look for (all of them must appear).
    #[serde(default, deserialize_with = "crate::lenient::text")]
    pub query: String,
    /// The most hits to return.
    #[serde(
        default = "crate::lenient::five",
        deserialize_with = "crate::lenient::count_or_five"
    )]
    pub limit: u32,
    /// Leave out the conversation this call belongs to.
    #[serde(
        default = "crate::lenient::yes",
        deserialize_with = "crate::lenient::flag_or_yes"
    )]
    pub exclude_current: bool,
}

/// One message that matched a [`SessionQuery`].
///
/// ```
/// use toolhost_plugin_api::SessionHit;
///
/// fn line(hit: &SessionHit) -> String {
///     format!("{} {} ({}): {}", hit.time, hit.role, hit.session, hit.snippet)
/// }
/// # let hit = SessionHit { session: "s-1".into(), time: "2026-11-30T09:00:00Z".into(),
/// #     role: "user".into(), snippet: "a cup of [tea]".into() };
/// # assert_eq!(line(&hit), "2026-11-30T09:00:00Z user (s-1): a cup of [tea]");
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct SessionHit {
    /// The conversation it is from.
    pub session: String,
    /// When it was said (RFC 3339, UTC).
    pub time: String,
    /// Who said it (`user`, `assistant`, `tool`).
    pub role: String,
    /// The matching text around the words found, which are marked `[like this]`.
    pub snippet: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_cross_as_the_method_and_params_older_plugins_send() {
        let (method, params) = HostRequest::ProfileStateDir(NoParams)
            .to_wire()
            .expect("encodes");
        assert_eq!((method.as_str(), params), ("profile.state_dir", json!({})));
        let query = SessionQuery {
            query: "tea".to_owned(),
            limit: 3,
            exclude_current: false,
        };
        let (method, params) = HostRequest::SessionsSearch(query.clone())
            .to_wire()
            .expect("encodes");
        assert_eq!(method, "sessions.search");
        assert_eq!(
            params,
            json!({"query": "tea", "limit": 3, "exclude_current": false})
        );
        assert_eq!(
            HostRequest::from_wire("sessions.search", params).expect("decodes"),
            HostRequest::SessionsSearch(query)
        );
        assert_eq!(
            HostRequest::from_wire("profile.state_dir", json!(null)).expect("decodes"),
            HostRequest::ProfileStateDir(NoParams)
        );
    }

    #[test]
    fn search_parameters_are_read_leniently_as_before() {
        let read = |params| match HostRequest::from_wire("sessions.search", params) {
            Ok(HostRequest::SessionsSearch(q)) => q,
            other => panic!("{other:?}"),
        };
        let q = read(json!({}));
        assert_eq!(
            (q.query.as_str(), q.limit, q.exclude_current),
            ("", 5, true)
        );
        let q = read(json!({"query": 5, "limit": "x", "exclude_current": "no"}));
        assert_eq!(
            (q.query.as_str(), q.limit, q.exclude_current),
            ("", 5, true)
        );
        assert_eq!(read(json!({"limit": u64::MAX})).limit, u32::MAX);
    }

    #[test]
    fn unknown_methods_are_told_apart() {
        assert!(matches!(
            HostRequest::from_wire("weather.today", json!({})),
            Err(HostRequestError::Unknown(m)) if m == "weather.today"
        ));
    }

    #[test]
    fn answers_cross_as_their_own_json() {
        let answer = HostAnswer::from(StateDirAnswer {
            path: "/x".to_owned(),
        });
        assert_eq!(
            serde_json::to_value(answer).expect("json"),
            json!({"path": "/x"})
        );
    }
}
