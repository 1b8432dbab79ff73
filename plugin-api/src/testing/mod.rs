//! Testing tools in plain Rust: a [`TestHost`] runs a [`Tool`] through the same export
//! glue and call boundary as a real host, with scripted host services, captured events
//! and a temporary state folder. No `unsafe` in the author's code (it is all inside this
//! crate), no runtime, no extra dependencies.
//!
//! Enable it for tests only:
//!
//! ```toml
//! [dev-dependencies]
//! toolhost-plugin-api = { version = "0.1.4", features = ["testing"] }
//! ```
//!
//! The call goes through the plugin side exactly as in a host: the tool is wrapped by the
//! glue [`export_plugin!`](crate::export_plugin) uses, its metadata and its `call` are
//! reached through its vtable, and the context it gets is served through a host vtable.
//! So argument parsing (a [`TypedTool`](crate::TypedTool)'s messages), caught panics
//! (`tool '...' panicked: ...`) and the output text are what a host would see.
//!
//! ```
//! use std::time::Duration;
//! use serde_json::json;
//! use toolhost_plugin_api::testing::{call, TestHost};
//! use toolhost_plugin_api::{
//!     AskAnswer, AskRequest, LogLevel, Risk, ToolContext, ToolError, TypedTool,
//! };
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct PlanArgs {
//!     /// How many steps.
//!     steps: u32,
//! }
//!
//! /// Asks before it starts, then works step by step until done or cancelled.
//! struct Plan;
//!
//! impl TypedTool for Plan {
//!     type Args = PlanArgs;
//!     fn name(&self) -> &str { "plan" }
//!     fn description(&self) -> &str { "Runs a plan of `steps` steps." }
//!     fn risk(&self) -> Risk { Risk::Read }
//!     async fn run(&self, ctx: &ToolContext<'_>, a: PlanArgs) -> Result<String, ToolError> {
//!         let answer = ctx.ask_user(&AskRequest::text("Go ahead?")).await?;
//!         if !matches!(answer, AskAnswer::Accept { .. }) {
//!             return Err(ToolError::failed("not approved"));
//!         }
//!         for step in 0..a.steps {
//!             ctx.progress(f64::from(step), Some(f64::from(a.steps)), None);
//!             ctx.sleep(Duration::from_millis(10)).await?;
//!         }
//!         ctx.log(LogLevel::INFO, "plan done");
//!         Ok(format!("{} steps in profile {}", a.steps, ctx.profile_id()))
//!     }
//! }
//!
//! // Arguments are parsed by the same glue as in a plugin: a bad one is the host's error.
//! assert!(matches!(call(&Plan, json!({"steps": "two"})), Err(ToolError::InvalidArgs(_))));
//! // No person is attached by default: asking fails as in a host without one.
//! assert!(call(&Plan, json!({"steps": 2})).is_err());
//!
//! let host = TestHost::new()
//!     .profile("work")
//!     .on_ask(|_req: &AskRequest| Ok(AskAnswer::Accept { content: json!({"answer": "yes"}) }));
//! assert_eq!(host.call(&Plan, json!({"steps": 2})), Ok("2 steps in profile work".into()));
//! assert_eq!(host.asked()[0].message, "Go ahead?");
//! assert_eq!(host.progress().len(), 2);
//! assert_eq!(host.logs(), vec![(LogLevel::INFO, "plan done".to_owned())]);
//!
//! // Cancelled while it sleeps: the sleep ends early and the call fails.
//! host.cancel_after(Duration::from_millis(30));
//! assert!(host.call(&Plan, json!({"steps": 1000})).is_err());
//! ```
//!
//! # What differs from a host
//! - There is no time limit: a tool that never finishes blocks [`TestHost::call`]. Use
//!   [`TestHost::cancel_after`] as the host's timeout would.
//! - The call is polled on the calling thread (a host polls it on a thread of its own).
//! - Scripts answer at once, synchronously.
//! - Cancelling is for the host, not one call: once cancelled, every later call on the
//!   same `TestHost` starts cancelled. Make a new `TestHost` for a fresh start.

#[cfg(all(test, feature = "macros"))]
mod attribute_tests;
mod lent;
mod plugin;
mod services;
mod signal;
mod temp;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use serde_json::Value;

use crate::client::{AskAnswer, AskRequest, SampleAnswer, SampleRequest};
use crate::context::{ChildTurnRequest, ServiceError};
use crate::ffi::LogLevel;
use crate::outcome::ToolOutput;
use crate::risk::Risk;
use crate::tool::{Requirements, Tool, ToolError};

use lent::Exported;
pub use plugin::{check_plugin, check_settings};
use signal::Signal;
use temp::TempDir;

/// Calls `tool` with `args` on a default [`TestHost`] and returns what a host would get.
///
/// Shorthand for `TestHost::new().call(tool, args)`: profile `default`, session
/// `test-session`, model `test-model`, no scripted services.
///
/// ```
/// use serde_json::json;
/// use toolhost_plugin_api::testing::call;
/// use toolhost_plugin_api::{Risk, ToolContext, ToolError, TypedTool};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Args { name: String }
/// struct Greet;
/// impl TypedTool for Greet {
///     type Args = Args;
///     fn name(&self) -> &str { "greet" }
///     fn description(&self) -> &str { "Greets." }
///     fn risk(&self) -> Risk { Risk::Read }
///     async fn run(&self, _: &ToolContext<'_>, a: Args) -> Result<String, ToolError> {
///         Ok(format!("Hello, {}!", a.name))
///     }
/// }
///
/// assert_eq!(call(&Greet, json!({"name": "Ada"})), Ok("Hello, Ada!".to_owned()));
/// // Checked against the schema first, as the host does, with its message.
/// assert_eq!(
///     call(&Greet, json!({})),
///     Err(ToolError::InvalidArgs(r#""name" is a required property"#.to_owned()))
/// );
/// ```
///
/// # Panics
/// As [`TestHost::call`].
pub fn call<T: Tool>(tool: &T, args: Value) -> Result<String, ToolError> {
    TestHost::new().call(tool, args)
}

type Script<R, A> = Mutex<Box<dyn FnMut(&R) -> Result<A, ServiceError> + Send>>;
type RequestScript = Mutex<Box<dyn FnMut(&str, &Value) -> Result<Value, ServiceError> + Send>>;

#[derive(Default)]
struct Scripts {
    ask: Option<Script<AskRequest, AskAnswer>>,
    sample: Option<Script<SampleRequest, SampleAnswer>>,
    child_turn: Option<Script<ChildTurnRequest, String>>,
    delegate: Option<Script<crate::DelegationRequest, crate::DelegationAnswer>>,
    host_request: Option<RequestScript>,
}

#[derive(Default)]
struct Records {
    logs: Vec<(LogLevel, String)>,
    progress: Vec<Progress>,
    asked: Vec<AskRequest>,
    sampled: Vec<SampleRequest>,
    child_turns: Vec<crate::ChildTurnCall>,
    delegations: Vec<crate::DelegationRequest>,
    host_requests: Vec<(String, Value)>,
    /// The first panic of a script during the current call; the call re-raises it.
    script_panic: Option<String>,
}

/// A host for tests: runs tools the way a host does, answers their service requests from
/// scripts, and records what they did.
///
/// Build it with the builder methods ([`TestHost::profile`], [`TestHost::on_ask`], ...),
/// call tools with [`TestHost::call`] (blocking) or [`TestHost::call_async`], then look
/// at what the tool did ([`TestHost::logs`], [`TestHost::progress`], [`TestHost::asked`],
/// ...). It is `Send + Sync`: another thread may [`TestHost::cancel`] while a call runs.
/// Dropping it removes its [state folder](TestHost::state_dir).
///
/// A service with no script answers as a host without that service does
/// ([`ServiceError::Unavailable`], saying which method scripts it).
///
/// ```
/// use serde_json::json;
/// use toolhost_plugin_api::testing::TestHost;
/// use toolhost_plugin_api::{Risk, ToolContext, ToolError, TypedTool};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct NoArgs {}
/// struct WhoAmI;
/// impl TypedTool for WhoAmI {
///     type Args = NoArgs;
///     fn name(&self) -> &str { "who_am_i" }
///     fn description(&self) -> &str { "Says who is calling." }
///     fn risk(&self) -> Risk { Risk::Read }
///     async fn run(&self, ctx: &ToolContext<'_>, _: NoArgs) -> Result<String, ToolError> {
///         Ok(format!("{}/{}/{}", ctx.profile_id(), ctx.session_id(), ctx.model()))
///     }
/// }
///
/// let host = TestHost::new();
/// assert_eq!(host.call(&WhoAmI, json!({})), Ok("default/test-session/test-model".into()));
/// let host = TestHost::new().profile("work").session("s-1").model("m");
/// assert_eq!(host.call(&WhoAmI, json!({})), Ok("work/s-1/m".into()));
/// ```
pub struct TestHost {
    profile: String,
    session: String,
    model: String,
    scripts: Scripts,
    /// The plugin's settings (`ctx.settings()`), `{}` unless set.
    settings: Value,
    /// What the settings' paths are relative to (`TestHost::settings_base`).
    settings_base: (Option<String>, Option<String>),
    /// The profile's workspace (`ctx.workspace()`), no roots unless set.
    workspace: crate::WorkspaceAnswer,
    /// The call's output budget (`ctx.output_budget()`), the host's default unless set.
    output_budget: crate::OutputBudget,
    /// The conversation's history (`ctx.session_summary()`), if set.
    summary: Option<crate::SessionsSummaryAnswer>,
    /// The client's roots (`ctx.roots()`), if set.
    roots: Option<Vec<crate::Root>>,
    records: Mutex<Records>,
    signal: Arc<Signal>,
    /// Created at first use; removed on drop.
    state_dir: OnceLock<Result<TempDir, String>>,
}

impl Default for TestHost {
    /// The same as [`TestHost::new`].
    ///
    /// ```
    /// # use toolhost_plugin_api::testing::TestHost;
    /// let host = TestHost::default();
    /// ```
    fn default() -> Self {
        TestHost {
            profile: "default".to_owned(),
            session: "test-session".to_owned(),
            model: "test-model".to_owned(),
            scripts: Scripts::default(),
            settings: Value::Object(serde_json::Map::new()),
            settings_base: (None, None),
            workspace: crate::WorkspaceAnswer::default(),
            output_budget: TestHost::DEFAULT_OUTPUT_BUDGET,
            summary: None,
            roots: None,
            records: Mutex::default(),
            signal: Arc::default(),
            state_dir: OnceLock::new(),
        }
    }
}

impl std::fmt::Debug for TestHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestHost")
            .field("profile", &self.profile)
            .field("session", &self.session)
            .field("model", &self.model)
            .field("cancelled", &self.signal.is_cancelled())
            .field(
                "state_dir",
                &self
                    .state_dir
                    .get()
                    .and_then(|d| d.as_ref().ok())
                    .map(TempDir::path),
            )
            .finish_non_exhaustive()
    }
}

impl Drop for TestHost {
    fn drop(&mut self) {
        // Ends the timer threads of `cancel_after` and of sleeps still waiting. The state
        // folder (a `TempDir`) removes itself.
        self.signal.close();
    }
}

impl TestHost {
    /// A host with profile `default`, session `test-session`, model `test-model`, no
    /// scripted services, not cancelled.
    ///
    /// ```
    /// # use toolhost_plugin_api::testing::TestHost;
    /// let host = TestHost::new();
    /// assert!(host.logs().is_empty());
    /// ```
    #[must_use]
    pub fn new() -> Self {
        TestHost::default()
    }

    /// The plugin's settings, what [`ToolContext::settings`](crate::ToolContext::settings)
    /// reads: in a host, the config's `[plugins.NAME.settings]` table (as JSON). Without
    /// this, `{}`, as for a host config without the table.
    ///
    /// ```
    /// use serde_json::{json, Value};
    /// use toolhost_plugin_api::testing::TestHost;
    /// use toolhost_plugin_api::{Risk, Tool, ToolContext, ToolError};
    ///
    /// #[derive(serde::Deserialize)]
    /// struct Settings { units: String }
    ///
    /// struct Temperature;
    /// impl Tool for Temperature {
    ///     fn name(&self) -> &str { "temperature" }
    ///     fn description(&self) -> &str { "Says the temperature." }
    ///     fn schema(&self) -> Value { json!({"type": "object"}) }
    ///     fn risk(&self) -> Risk { Risk::Read }
    ///     async fn call(&self, ctx: &ToolContext<'_>, _: Value) -> Result<String, ToolError> {
    ///         let settings: Settings = ctx.settings().await?;
    ///         Ok(format!("21 degrees ({})", settings.units))
    ///     }
    /// }
    ///
    /// let host = TestHost::new().settings(json!({"units": "celsius"}));
    /// assert_eq!(host.call(&Temperature, json!({})), Ok("21 degrees (celsius)".into()));
    /// ```
    #[must_use]
    pub fn settings(mut self, settings: Value) -> Self {
        self.settings = settings;
        self
    }

    /// Where the settings come from, as a host says: `config_dir` is the folder of its
    /// config file (a relative [`SettingsPath`](crate::SettingsPath) is under it), `home`
    /// the home folder of its user (`~/`). Without this, paths are read as written, as
    /// from a host that does not say.
    #[must_use]
    pub fn settings_base(mut self, config_dir: &str, home: &str) -> Self {
        self.settings_base = (Some(config_dir.to_owned()), Some(home.to_owned()));
        self
    }

    /// The profile's workspace, what [`ToolContext::workspace`](crate::ToolContext::workspace)
    /// reads: in a host, the profile's `[workspace]` table. Without it, a workspace with
    /// no roots.
    ///
    /// ```
    /// use toolhost_plugin_api::testing::TestHost;
    /// use toolhost_plugin_api::WorkspaceAnswer;
    ///
    /// let host = TestHost::new().workspace(WorkspaceAnswer::with_roots(["/srv/project"]));
    /// # let _ = host;
    /// ```
    #[must_use]
    pub fn workspace(mut self, workspace: crate::WorkspaceAnswer) -> Self {
        self.workspace = workspace;
        self
    }

    /// The budget toolhost holds results to unless a profile's `[output]` says otherwise:
    /// 30,000 characters and 1,000 lines. The harness answers `call.output_budget` with it
    /// unless [`TestHost::output_budget`] sets another.
    pub const DEFAULT_OUTPUT_BUDGET: crate::OutputBudget = crate::OutputBudget {
        max_chars: 30_000,
        max_lines: 1_000,
    };

    /// The call's output budget, what
    /// [`ToolContext::output_budget`](crate::ToolContext::output_budget) reads (the
    /// harness does not cut results to it: check a tool that pages stays within it).
    ///
    /// ```
    /// use toolhost_plugin_api::testing::TestHost;
    /// use toolhost_plugin_api::OutputBudget;
    ///
    /// let host = TestHost::new().output_budget(OutputBudget { max_chars: 2000, max_lines: 50 });
    /// # let _ = host;
    /// ```
    #[must_use]
    pub fn output_budget(mut self, budget: crate::OutputBudget) -> Self {
        self.output_budget = budget;
        self
    }

    /// The current conversation's history, what
    /// [`ToolContext::session_summary`](crate::ToolContext::session_summary) reads: the
    /// harness answers `sessions.summary` with it as a host does, keeping the last `last`
    /// requests (`total` stays). Without it the request is unavailable, as outside an
    /// agent's turn (or answered by [`TestHost::on_host_request`], if scripted).
    ///
    /// ```
    /// use toolhost_plugin_api::testing::TestHost;
    /// use toolhost_plugin_api::{RequestSummary, SessionsSummaryAnswer};
    ///
    /// let history = SessionsSummaryAnswer::new("s-1", vec![RequestSummary::new(1, "hello")]);
    /// let host = TestHost::new().session_summary(history);
    /// # let _ = host;
    /// ```
    #[must_use]
    pub fn session_summary(mut self, history: crate::SessionsSummaryAnswer) -> Self {
        self.summary = Some(history);
        self
    }

    /// The client's roots, which [`ToolContext::roots`](crate::ToolContext::roots) and a
    /// roots question of [`ToolContext::ask_client`](crate::ToolContext::ask_client) read.
    /// Without them the client has none to give ([`ServiceError::Unavailable`]). Questions
    /// for the person and the model in `ask_client` go to [`TestHost::on_ask`] and
    /// [`TestHost::on_sample`], one after another; `ctx.detach()` answers `false` (the
    /// harness holds no tasks: the call runs on, as with a caller that cannot).
    ///
    /// ```
    /// use toolhost_plugin_api::testing::TestHost;
    /// use toolhost_plugin_api::Root;
    ///
    /// let host = TestHost::new().roots(vec![Root { uri: "file:///src".into(), name: None }]);
    /// # let _ = host;
    /// ```
    #[must_use]
    pub fn roots(mut self, roots: Vec<crate::Root>) -> Self {
        self.roots = Some(roots);
        self
    }

    /// The profile calls work for ([`ToolContext::profile_id`](crate::ToolContext::profile_id)).
    ///
    /// ```
    /// # use toolhost_plugin_api::testing::TestHost;
    /// let host = TestHost::new().profile("work");
    /// ```
    #[must_use]
    pub fn profile(mut self, profile: impl Into<String>) -> Self {
        self.profile = profile.into();
        self
    }

    /// The session calls work for ([`ToolContext::session_id`](crate::ToolContext::session_id)).
    ///
    /// ```
    /// # use toolhost_plugin_api::testing::TestHost;
    /// let host = TestHost::new().session("s-1");
    /// ```
    #[must_use]
    pub fn session(mut self, session: impl Into<String>) -> Self {
        self.session = session.into();
        self
    }

    /// The model that asks for calls ([`ToolContext::model`](crate::ToolContext::model)).
    ///
    /// ```
    /// # use toolhost_plugin_api::testing::TestHost;
    /// let host = TestHost::new().model("claude-test");
    /// ```
    #[must_use]
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// Answers [`ToolContext::ask_user`](crate::ToolContext::ask_user): the script gets
    /// each question and returns the person's answer, or an error as a host's service
    /// would. Without it, asking fails with [`ServiceError::Unavailable`], as in a host
    /// with nobody at the other end. A panic (a failed `assert!`) in the script fails the
    /// call's test when the call returns.
    ///
    /// ```
    /// use serde_json::json;
    /// use toolhost_plugin_api::testing::TestHost;
    /// use toolhost_plugin_api::{AskAnswer, AskRequest, ServiceError};
    ///
    /// let mut answers = vec![AskAnswer::Decline, AskAnswer::Accept { content: json!({"answer": "blue"}) }];
    /// let host = TestHost::new().on_ask(move |req: &AskRequest| {
    ///     assert!(!req.message.is_empty());
    ///     answers.pop().ok_or_else(|| ServiceError::Failed("asked too often".into()))
    /// });
    /// ```
    #[must_use]
    pub fn on_ask(
        mut self,
        script: impl FnMut(&AskRequest) -> Result<AskAnswer, ServiceError> + Send + 'static,
    ) -> Self {
        self.scripts.ask = Some(Mutex::new(Box::new(script)));
        self
    }

    /// Answers [`ToolContext::sample`](crate::ToolContext::sample) (the caller's model).
    /// Without it, sampling fails with [`ServiceError::Unavailable`].
    ///
    /// ```
    /// use toolhost_plugin_api::testing::TestHost;
    /// use toolhost_plugin_api::{SampleAnswer, SampleRequest};
    ///
    /// let host = TestHost::new().on_sample(|req: &SampleRequest| {
    ///     Ok(SampleAnswer { text: format!("summary of {} chars", req.prompt.len()), model: None })
    /// });
    /// ```
    #[must_use]
    pub fn on_sample(
        mut self,
        script: impl FnMut(&SampleRequest) -> Result<SampleAnswer, ServiceError> + Send + 'static,
    ) -> Self {
        self.scripts.sample = Some(Mutex::new(Box::new(script)));
        self
    }

    /// Answers [`ToolContext::child_turn`](crate::ToolContext::child_turn) with the child
    /// agent's final answer. Without it, child turns fail with
    /// [`ServiceError::Unavailable`], as in a host that runs no agent for the call.
    ///
    /// ```
    /// use toolhost_plugin_api::testing::TestHost;
    /// use toolhost_plugin_api::{ChildTurnRequest, ServiceError};
    ///
    /// let host = TestHost::new().on_child_turn(|req: &ChildTurnRequest| {
    ///     if req.prompt.is_empty() {
    ///         return Err(ServiceError::Failed("the child had nothing to do".into()));
    ///     }
    ///     Ok("child said".into())
    /// });
    /// ```
    #[must_use]
    pub fn on_child_turn(
        mut self,
        script: impl FnMut(&ChildTurnRequest) -> Result<String, ServiceError> + Send + 'static,
    ) -> Self {
        self.scripts.child_turn = Some(Mutex::new(Box::new(script)));
        self
    }

    /// Answers background delegations ([`ToolContext::delegate`](crate::ToolContext::delegate),
    /// the `agent.delegate` request) with the delegation's id and units, as a host's agent
    /// does. Without it, delegations fail with [`ServiceError::Unavailable`], as on a host
    /// older than plugin-api 0.1.4 or a call no agent runs.
    ///
    /// ```
    /// use toolhost_plugin_api::testing::TestHost;
    /// use toolhost_plugin_api::{DelegationAnswer, DelegationRequest, DelegationUnit};
    ///
    /// let host = TestHost::new().on_delegate(|req: &DelegationRequest| {
    ///     Ok(DelegationAnswer {
    ///         delegation: "d-1".into(),
    ///         units: vec![DelegationUnit {
    ///             id: "d-1/u1".into(),
    ///             tasks: (0..req.tasks.len()).collect(),
    ///         }],
    ///     })
    /// });
    /// ```
    #[must_use]
    pub fn on_delegate(
        mut self,
        script: impl FnMut(&crate::DelegationRequest) -> Result<crate::DelegationAnswer, ServiceError>
        + Send
        + 'static,
    ) -> Self {
        self.scripts.delegate = Some(Mutex::new(Box::new(script)));
        self
    }

    /// Answers named host requests ([`ToolContext::host_request`](crate::ToolContext::host_request)
    /// and the typed ones built on it, such as
    /// [`ToolContext::search_sessions`](crate::ToolContext::search_sessions), method
    /// `sessions.search`, answered `{"hits": [...]}`), with the method and the parameters
    /// as the tool sent them. Methods this API knows are first read as a host reads them,
    /// so malformed parameters fail before the script. `profile.state_dir` never reaches
    /// the script: it is always [`TestHost::state_dir`]. Without a script, every other
    /// method fails with [`ServiceError::Unavailable`].
    ///
    /// ```
    /// use serde_json::{json, Value};
    /// use toolhost_plugin_api::testing::TestHost;
    /// use toolhost_plugin_api::ServiceError;
    ///
    /// let host = TestHost::new().on_host_request(|method: &str, params: &Value| match method {
    ///     "sessions.search" => Ok(json!({"hits": [{
    ///         "session": "s-0", "time": "2025-01-01T00:00:00Z", "role": "user",
    ///         "snippet": format!("about [{}]", params["query"].as_str().unwrap_or_default()),
    ///     }]})),
    ///     other => Err(ServiceError::Unavailable(format!("no {other} here"))),
    /// });
    /// ```
    #[must_use]
    pub fn on_host_request(
        mut self,
        script: impl FnMut(&str, &Value) -> Result<Value, ServiceError> + Send + 'static,
    ) -> Self {
        self.scripts.host_request = Some(Mutex::new(Box::new(script)));
        self
    }

    /// The profile's state folder ([`ToolContext::state_dir`](crate::ToolContext::state_dir)):
    /// a fresh, empty temporary folder (mode 0700), created at first use and removed with
    /// everything in it when the `TestHost` is dropped. Put fixtures in it before a call,
    /// or look at what a tool wrote.
    ///
    /// ```
    /// # use toolhost_plugin_api::testing::TestHost;
    /// let host = TestHost::new();
    /// let dir = host.state_dir().to_path_buf();
    /// std::fs::write(dir.join("seed.json"), "{}").unwrap();
    /// drop(host);
    /// assert!(!dir.exists());
    /// ```
    ///
    /// # Panics
    /// If the folder cannot be created in [`std::env::temp_dir`].
    pub fn state_dir(&self) -> &Path {
        match self.state_dir_result() {
            Ok(dir) => dir,
            Err(e) => panic!("TestHost::state_dir: {e}"),
        }
    }

    fn state_dir_result(&self) -> Result<&Path, String> {
        let dir = self.state_dir.get_or_init(|| {
            TempDir::new().map_err(|e| format!("could not create a state folder: {e}"))
        });
        match dir {
            Ok(dir) => Ok(dir.path()),
            Err(e) => Err(e.clone()),
        }
    }

    /// Calls `tool` with `args` as a host would, and waits for it on this thread (a tiny
    /// executor: no runtime needed, none started).
    ///
    /// `Err(ToolError::InvalidArgs)` and `Err(ToolError::Failed)` are what the host would
    /// get; a panic in the tool is `Failed("tool '<name>' panicked: <message>")`, as the
    /// host reports it. Arguments are validated against the tool's schema first, with the
    /// host's validator and message: what the host would refuse is
    /// `Err(InvalidArgs("/top: 500 is greater than the maximum of 100"))`, and the tool
    /// does not run.
    ///
    /// ```
    /// use serde_json::{json, Value};
    /// use toolhost_plugin_api::testing::TestHost;
    /// use toolhost_plugin_api::{Risk, Tool, ToolContext, ToolError};
    ///
    /// struct Boom;
    /// impl Tool for Boom {
    ///     fn name(&self) -> &str { "boom" }
    ///     fn description(&self) -> &str { "Panics." }
    ///     fn schema(&self) -> Value { json!({"type": "object"}) }
    ///     fn risk(&self) -> Risk { Risk::Read }
    ///     async fn call(&self, _: &ToolContext<'_>, _: Value) -> Result<String, ToolError> {
    ///         panic!("kaboom")
    ///     }
    /// }
    ///
    /// let out = TestHost::new().call(&Boom, json!({}));
    /// assert_eq!(out, Err(ToolError::Failed("tool 'boom' panicked: kaboom".into())));
    /// ```
    ///
    /// # Panics
    /// When a script of this host panicked during the call (a failed `assert!` in it), with
    /// that panic's message, so the test fails where it should.
    pub fn call<T: Tool>(&self, tool: &T, args: Value) -> Result<String, ToolError> {
        signal::block_on(self.call_async(tool, args))
    }

    /// [`TestHost::call`] as a future, for tests that run in an async runtime (such as
    /// `#[tokio::test]`). The services need no runtime: any executor can poll it.
    ///
    /// ```
    /// # use serde_json::{json, Value};
    /// # use toolhost_plugin_api::testing::TestHost;
    /// # use toolhost_plugin_api::{Risk, Tool, ToolContext, ToolError};
    /// # struct Echo;
    /// # impl Tool for Echo {
    /// #     fn name(&self) -> &str { "echo" }
    /// #     fn description(&self) -> &str { "Echoes." }
    /// #     fn schema(&self) -> Value { json!({"type": "object"}) }
    /// #     fn risk(&self) -> Risk { Risk::Read }
    /// #     async fn call(&self, _: &ToolContext<'_>, a: Value) -> Result<String, ToolError> {
    /// #         Ok(a.to_string())
    /// #     }
    /// # }
    /// async fn check(host: &TestHost) {
    ///     let out = host.call_async(&Echo, json!({"x": 1})).await;
    ///     assert_eq!(out, Ok(r#"{"x":1}"#.to_owned()));
    /// }
    /// # let host = TestHost::new();
    /// # // Any executor will do; `call` shows the same result synchronously.
    /// # assert_eq!(host.call(&Echo, json!({"x": 1})), Ok(r#"{"x":1}"#.to_owned()));
    /// ```
    ///
    /// # Panics
    /// As [`TestHost::call`].
    pub async fn call_async<T: Tool>(&self, tool: &T, args: Value) -> Result<String, ToolError> {
        self.call_output_async(tool, args).await.map(|out| out.text)
    }

    /// Calls `tool` as [`TestHost::call`] does and returns its whole outcome: the text, the
    /// structured value, the details and the content blocks, as a host gets them (see
    /// [`ToolOutput`]). A structured value is checked against the tool's output schema as
    /// the host checks it: one that does not match is `Err(Failed)` naming the mismatch.
    /// An outcome whose text is a content envelope ([`crate::content_output`]) has its
    /// blocks in `content`, as in the host.
    ///
    /// ```
    /// use serde_json::{json, Value};
    /// use toolhost_plugin_api::testing::TestHost;
    /// use toolhost_plugin_api::{Risk, Tool, ToolContext, ToolError, ToolOutput};
    ///
    /// struct Count;
    /// impl Tool for Count {
    ///     fn name(&self) -> &str { "count" }
    ///     fn description(&self) -> &str { "Counts." }
    ///     fn schema(&self) -> Value { json!({"type": "object"}) }
    ///     fn risk(&self) -> Risk { Risk::Read }
    ///     async fn call(&self, ctx: &ToolContext<'_>, a: Value) -> Result<String, ToolError> {
    ///         Ok(self.call_output(ctx, a).await?.degraded_text())
    ///     }
    ///     async fn call_output(&self, _: &ToolContext<'_>, _: Value) -> Result<ToolOutput, ToolError> {
    ///         Ok(ToolOutput::text("3 items").with_detail("timings", json!({"ms": 2})))
    ///     }
    /// }
    ///
    /// let out = TestHost::new().call_output(&Count, json!({})).expect("counts");
    /// assert_eq!(out.text, "3 items");
    /// assert_eq!(out.details["timings"]["ms"], 2);
    /// ```
    ///
    /// # Panics
    /// As [`TestHost::call`].
    pub fn call_output<T: Tool>(&self, tool: &T, args: Value) -> Result<ToolOutput, ToolError> {
        signal::block_on(self.call_output_async(tool, args))
    }

    /// [`TestHost::call_output`] as a future (see [`TestHost::call_async`]).
    ///
    /// ```
    /// # use serde_json::json;
    /// # use toolhost_plugin_api::testing::TestHost;
    /// # use toolhost_plugin_api::{Risk, ToolContext, ToolError, TypedTool};
    /// # #[derive(serde::Deserialize, schemars::JsonSchema)] struct A {}
    /// # struct T;
    /// # impl TypedTool for T {
    /// #     type Args = A;
    /// #     fn name(&self) -> &str { "t" }
    /// #     fn description(&self) -> &str { "T." }
    /// #     fn risk(&self) -> Risk { Risk::Read }
    /// #     async fn run(&self, _: &ToolContext<'_>, _: A) -> Result<String, ToolError> { Ok("ok".into()) }
    /// # }
    /// async fn check(host: &TestHost) {
    ///     assert_eq!(host.call_output_async(&T, json!({})).await.map(|o| o.text), Ok("ok".into()));
    /// }
    /// # assert_eq!(TestHost::new().call(&T, json!({})), Ok("ok".to_owned()));
    /// ```
    ///
    /// # Panics
    /// As [`TestHost::call`].
    pub async fn call_output_async<T: Tool>(
        &self,
        tool: &T,
        args: Value,
    ) -> Result<ToolOutput, ToolError> {
        let exported = Exported::new(tool);
        // A host reads the metadata at load and leaves a tool whose metadata fails out.
        let (info, checked) = exported
            .info()
            .map_err(|e| ToolError::Failed(format!("a host would not load this tool: {e}")))?;
        let name = info.name;
        // The host validates the arguments against the schema before the call, with the
        // same validator and the same message.
        if let Some(problems) = crate::check::problems(&checked.arguments, &args) {
            return Err(ToolError::InvalidArgs(problems));
        }
        // serde_json's writer, as the host encodes them.
        let args = serde_json::to_string(&args)
            .map_err(|e| ToolError::InvalidArgs(format!("could not encode the arguments: {e}")))?;
        self.records().script_panic = None;
        let ctx = self.ffi_context();
        let outcome = exported.call(&ctx, &args).await;
        if let Some(message) = self.records().script_panic.take() {
            panic!("a TestHost script panicked during the call: {message}");
        }
        // What the host makes of the plugin's answer.
        let answer = outcome.into_result().map(|o| (o.text, o.extra));
        let mut out = crate::export::answer_from_ffi(&name, answer)?;
        crate::check::finish_output(checked.output.as_deref(), &mut out)
            .map_err(|e| ToolError::Failed(format!("tool '{name}' {e}")))?;
        Ok(out)
    }

    /// The tool's metadata as a host reads it at load, through the tool's vtable: name,
    /// description, argument schema, risk, interactive flag, requirements, output schema.
    ///
    /// ```
    /// use serde_json::json;
    /// use toolhost_plugin_api::testing::TestHost;
    /// use toolhost_plugin_api::{Risk, ToolContext, ToolError, TypedTool};
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Args {
    ///     /// Who to greet.
    ///     name: String,
    /// }
    /// struct Greet;
    /// impl TypedTool for Greet {
    ///     type Args = Args;
    ///     fn name(&self) -> &str { "greet" }
    ///     fn description(&self) -> &str { "Greets." }
    ///     fn risk(&self) -> Risk { Risk::Read }
    ///     async fn run(&self, _: &ToolContext<'_>, a: Args) -> Result<String, ToolError> {
    ///         Ok(a.name)
    ///     }
    /// }
    ///
    /// let info = TestHost::new().describe(&Greet);
    /// assert_eq!((info.name.as_str(), info.risk, info.interactive), ("greet", Risk::Read, false));
    /// assert_eq!(info.schema["required"], json!(["name"]));
    /// assert_eq!(info.schema["properties"]["name"]["description"], "Who to greet.");
    /// ```
    ///
    /// # Panics
    /// When a host would not load the tool: a metadata method panicked, the schema or
    /// requirements are not valid JSON, the name is not one models accept, or the schema
    /// is not an object schema or does not compile (the message names the bad keyword's
    /// JSON pointer). The message is the host's. [`check_plugin`] checks a plugin's whole
    /// export list, two tools of one name included.
    pub fn describe<T: Tool>(&self, tool: &T) -> ToolInfo {
        match Exported::new(tool).info() {
            Ok((info, _)) => info,
            Err(e) => panic!("a host would not load this tool: {e}"),
        }
    }

    /// Cancels: [`ToolContext::is_cancelled`](crate::ToolContext::is_cancelled) turns
    /// true, and `cancelled()`, `until_cancelled()` and `sleep()` end at once, in the call
    /// running now and in every later call on this host. Callable from any thread (the
    /// host is `Sync`; see also [`TestHost::canceller`]).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use serde_json::{json, Value};
    /// # use toolhost_plugin_api::testing::TestHost;
    /// # use toolhost_plugin_api::{Risk, Tool, ToolContext, ToolError};
    /// struct Wait;
    /// impl Tool for Wait {
    ///     fn name(&self) -> &str { "wait" }
    ///     fn description(&self) -> &str { "Waits an hour." }
    ///     fn schema(&self) -> Value { json!({"type": "object"}) }
    ///     fn risk(&self) -> Risk { Risk::Read }
    ///     async fn call(&self, ctx: &ToolContext<'_>, _: Value) -> Result<String, ToolError> {
    ///         ctx.sleep(Duration::from_secs(3600)).await?;
    ///         Ok("done".into())
    ///     }
    /// }
    ///
    /// let host = TestHost::new();
    /// std::thread::scope(|s| {
    ///     s.spawn(|| {
    ///         std::thread::sleep(Duration::from_millis(20));
    ///         host.cancel();
    ///     });
    ///     assert_eq!(host.call(&Wait, json!({})), Err(ToolError::Failed("cancelled".into())));
    /// });
    /// ```
    pub fn cancel(&self) {
        self.signal.cancel();
    }

    /// Cancels after `delay`, from a timer thread (as a host's call timeout would). The
    /// timer starts now; it does nothing if the host is dropped first.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use serde_json::{json, Value};
    /// # use toolhost_plugin_api::testing::TestHost;
    /// # use toolhost_plugin_api::{Risk, Tool, ToolContext, ToolError};
    /// // A tool that waits for the host to cancel it.
    /// struct Patient;
    /// impl Tool for Patient {
    ///     fn name(&self) -> &str { "patient" }
    ///     fn description(&self) -> &str { "Waits until cancelled." }
    ///     fn schema(&self) -> Value { json!({"type": "object"}) }
    ///     fn risk(&self) -> Risk { Risk::Read }
    ///     async fn call(&self, ctx: &ToolContext<'_>, _: Value) -> Result<String, ToolError> {
    ///         ctx.cancelled().await;
    ///         Ok("stopped when told".into())
    ///     }
    /// }
    ///
    /// let host = TestHost::new();
    /// host.cancel_after(Duration::from_millis(5));
    /// assert_eq!(host.call(&Patient, json!({})), Ok("stopped when told".into()));
    /// assert!(host.canceller().is_cancelled());
    /// ```
    pub fn cancel_after(&self, delay: Duration) {
        self.signal.cancel_after(delay);
    }

    /// A handle that cancels this host's calls from anywhere: `Clone`, `Send`, `'static`.
    ///
    /// ```
    /// # use toolhost_plugin_api::testing::TestHost;
    /// let host = TestHost::new();
    /// let canceller = host.canceller();
    /// std::thread::spawn(move || canceller.cancel()).join().unwrap();
    /// assert!(host.canceller().is_cancelled());
    /// ```
    pub fn canceller(&self) -> Canceller {
        Canceller {
            signal: Arc::clone(&self.signal),
        }
    }

    /// The lines the tools logged ([`ToolContext::log`](crate::ToolContext::log)), in order.
    ///
    /// ```
    /// # use toolhost_plugin_api::testing::TestHost;
    /// # use toolhost_plugin_api::LogLevel;
    /// let host = TestHost::new();
    /// // ... host.call(...) ...
    /// assert!(!host.logs().iter().any(|(level, _)| *level == LogLevel::ERROR));
    /// ```
    pub fn logs(&self) -> Vec<(LogLevel, String)> {
        self.records().logs.clone()
    }

    /// The progress the tools reported ([`ToolContext::progress`](crate::ToolContext::progress)),
    /// in order, as a host passes it on: a non-finite `progress` is dropped, a
    /// non-finite `total` is `None`, an empty message is `None`.
    ///
    /// ```
    /// # use toolhost_plugin_api::testing::{Progress, TestHost};
    /// let host = TestHost::new();
    /// // ... host.call(...) ...
    /// let fractions: Vec<f64> = host.progress().iter().filter_map(|p| Some(p.progress / p.total?)).collect();
    /// ```
    pub fn progress(&self) -> Vec<Progress> {
        self.records().progress.clone()
    }

    /// The questions the tools asked ([`ToolContext::ask_user`](crate::ToolContext::ask_user)),
    /// in order, scripted or not.
    ///
    /// ```
    /// # use toolhost_plugin_api::testing::TestHost;
    /// let host = TestHost::new();
    /// // ... host.call(...) ...
    /// assert!(host.asked().iter().all(|q| q.schema["type"] == "object"));
    /// ```
    pub fn asked(&self) -> Vec<AskRequest> {
        self.records().asked.clone()
    }

    /// The completions the tools asked for ([`ToolContext::sample`](crate::ToolContext::sample)),
    /// in order, scripted or not.
    ///
    /// ```
    /// # use toolhost_plugin_api::testing::TestHost;
    /// let host = TestHost::new();
    /// // ... host.call(...) ...
    /// assert!(host.sampled().iter().all(|s| s.max_tokens <= 1000));
    /// ```
    pub fn sampled(&self) -> Vec<SampleRequest> {
        self.records().sampled.clone()
    }

    /// The child turns the tools asked for ([`ToolContext::child_turn`](crate::ToolContext::child_turn)),
    /// in order, scripted or not.
    ///
    /// ```
    /// # use toolhost_plugin_api::testing::TestHost;
    /// let host = TestHost::new();
    /// // ... host.call(...) ...
    /// let prompts: Vec<String> = host.child_turns().into_iter().map(|t| t.prompt).collect();
    /// ```
    pub fn child_turns(&self) -> Vec<ChildTurnRequest> {
        self.records()
            .child_turns
            .iter()
            .map(|c| c.request.clone())
            .collect()
    }

    /// The child turns as they crossed, each with the role the tool asked for
    /// ([`ToolContext::child_turn_as`](crate::ToolContext::child_turn_as); `None`: a
    /// leaf), in order.
    ///
    /// ```
    /// # use toolhost_plugin_api::testing::TestHost;
    /// let host = TestHost::new();
    /// // ... host.call(...) ...
    /// let roles: Vec<_> = host.child_turn_calls().into_iter().map(|c| c.role).collect();
    /// ```
    pub fn child_turn_calls(&self) -> Vec<crate::ChildTurnCall> {
        self.records().child_turns.clone()
    }

    /// The background delegations the tools asked for
    /// ([`ToolContext::delegate`](crate::ToolContext::delegate)), in order, scripted or not.
    ///
    /// ```
    /// # use toolhost_plugin_api::testing::TestHost;
    /// let host = TestHost::new();
    /// assert!(host.delegations().is_empty());
    /// ```
    pub fn delegations(&self) -> Vec<crate::DelegationRequest> {
        self.records().delegations.clone()
    }

    /// The named host requests the tools sent ([`ToolContext::host_request`](crate::ToolContext::host_request)
    /// and the typed ones: `profile.state_dir`, `sessions.search`, ...), as method and
    /// parameters, in order, answered or not.
    ///
    /// ```
    /// # use toolhost_plugin_api::testing::TestHost;
    /// let host = TestHost::new();
    /// // ... host.call(...) ...
    /// let searches = host.host_requests().into_iter().filter(|(m, _)| m == "sessions.search").count();
    /// ```
    pub fn host_requests(&self) -> Vec<(String, Value)> {
        self.records().host_requests.clone()
    }

    fn records(&self) -> MutexGuard<'_, Records> {
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Cancels a [`TestHost`]'s calls from another thread; from [`TestHost::canceller`].
///
/// ```
/// # use std::time::Duration;
/// # use toolhost_plugin_api::testing::TestHost;
/// let host = TestHost::new();
/// let canceller = host.canceller();
/// let timer = std::thread::spawn(move || {
///     std::thread::sleep(Duration::from_millis(10));
///     canceller.cancel();
/// });
/// // ... host.call(...) sees the cancel while it runs ...
/// # timer.join().unwrap();
/// ```
#[derive(Clone)]
pub struct Canceller {
    signal: Arc<Signal>,
}

impl Canceller {
    /// Cancels, as [`TestHost::cancel`].
    ///
    /// ```
    /// # use toolhost_plugin_api::testing::TestHost;
    /// let host = TestHost::new();
    /// host.canceller().cancel();
    /// assert!(host.canceller().is_cancelled());
    /// ```
    pub fn cancel(&self) {
        self.signal.cancel();
    }

    /// Cancels after `delay`, as [`TestHost::cancel_after`].
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use toolhost_plugin_api::testing::TestHost;
    /// let host = TestHost::new();
    /// host.canceller().cancel_after(Duration::from_millis(1));
    /// ```
    pub fn cancel_after(&self, delay: Duration) {
        self.signal.cancel_after(delay);
    }

    /// Whether the host was cancelled.
    ///
    /// ```
    /// # use toolhost_plugin_api::testing::TestHost;
    /// assert!(!TestHost::new().canceller().is_cancelled());
    /// ```
    pub fn is_cancelled(&self) -> bool {
        self.signal.is_cancelled()
    }
}

impl std::fmt::Debug for Canceller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Canceller")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

/// One progress report ([`ToolContext::progress`](crate::ToolContext::progress)), as a host
/// passes it on; see [`TestHost::progress`].
///
/// Its fields are those of the host service, whose signature is fixed by the ABI, so
/// this struct does not grow and can be built to compare with:
///
/// ```
/// use toolhost_plugin_api::testing::Progress;
/// let expected = Progress { progress: 1.0, total: Some(3.0), message: None };
/// assert_eq!(expected.clone(), expected);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// How far the call got.
    pub progress: f64,
    /// Out of how much, if the tool knew.
    pub total: Option<f64>,
    /// What it is doing, if it said.
    pub message: Option<String>,
}

/// A tool's metadata as a host reads it at load; from [`TestHost::describe`].
///
/// ```
/// # use serde_json::{json, Value};
/// # use toolhost_plugin_api::testing::TestHost;
/// # use toolhost_plugin_api::{Requirements, Risk, Tool, ToolContext, ToolError};
/// struct Deploy;
/// impl Tool for Deploy {
///     fn name(&self) -> &str { "deploy" }
///     fn description(&self) -> &str { "Deploys." }
///     fn schema(&self) -> Value { json!({"type": "object", "properties": {}}) }
///     fn risk(&self) -> Risk { Risk::Destructive }
///     fn requirements(&self) -> Requirements { Requirements::default().programs(&["git"]) }
///     async fn call(&self, _: &ToolContext<'_>, _: Value) -> Result<String, ToolError> {
///         Ok(String::new())
///     }
/// }
///
/// let info = TestHost::new().describe(&Deploy);
/// assert_eq!(info.risk, Risk::Destructive);
/// assert_eq!(info.requirements.programs, ["git"]);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolInfo {
    /// The name the model calls it by.
    pub name: String,
    /// What the model reads about it.
    pub description: String,
    /// The JSON Schema of its arguments, as a host serves it to models (after
    /// [`crate::tidy_schema`], which hosts apply at load).
    pub schema: Value,
    /// Its declared risk.
    pub risk: Risk,
    /// Whether it needs a person at hand.
    pub interactive: bool,
    /// What it needs to be available.
    pub requirements: Requirements,
    /// The JSON Schema of its structured result, if it declares one (after
    /// [`crate::tidy_schema`]).
    pub output_schema: Option<Value>,
}
