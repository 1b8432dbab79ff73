//! The call context a tool receives: which turn it works for, the model, the cancel
//! signal, and the services the host provides (log, timer, child turns, progress, asking
//! the person, asking the caller's model).

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use abi_stable::std_types::{RResult, RStr};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::blocking::CancelFlag;
use crate::budget::OutputBudget;
use crate::client::{
    AskAnswer, AskRequest, ClientAnswer, ClientAnswers, ClientQuestion, ClientQuestions,
    DetachAnswer, Root, SampleAnswer, SampleRequest,
};
use crate::ffi::{FfiCallContext, LogLevel};
use crate::host_request::{
    ChildRole, DelegationAnswer, DelegationRequest, HostRequest, NoParams, SessionHit,
    SessionQuery, SessionsSearchAnswer, SessionsSummaryAnswer, SettingsAnswer, StateDirAnswer,
    SummaryQuery, WorkspaceAnswer,
};

/// What a tool knows about the call it is running: the turn, the model and cancellation,
/// plus the host's services. Borrowed for the duration of one call.
///
/// Every service works on any host: one the host lacks (an older host, or a caller that
/// cannot do it) is a [`ServiceError::Unavailable`] or, for [`ToolContext::progress`],
/// nothing at all.
///
/// ```
/// use std::time::Duration;
/// use toolhost_plugin_api::{LogLevel, Risk, ToolContext, ToolError, TypedTool};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct WaitArgs {
///     /// How many seconds to wait.
///     seconds: u32,
/// }
///
/// struct Wait;
///
/// impl TypedTool for Wait {
///     type Args = WaitArgs;
///     fn name(&self) -> &str { "wait" }
///     fn description(&self) -> &str { "Waits `seconds` seconds, reporting progress." }
///     fn risk(&self) -> Risk { Risk::Read }
///     async fn run(&self, ctx: &ToolContext<'_>, args: WaitArgs) -> Result<String, ToolError> {
///         ctx.log(LogLevel::INFO, &format!("waiting {} s", args.seconds));
///         for done in 0..args.seconds {
///             ctx.progress(f64::from(done), Some(f64::from(args.seconds)), None);
///             ctx.sleep(Duration::from_secs(1)).await?; // `Err(Cancelled)` when stopped
///         }
///         Ok(format!("waited {} s", args.seconds))
///     }
/// }
/// ```
pub struct ToolContext<'a> {
    raw: &'a FfiCallContext<'a>,
}

/// A host service could not do what was asked.
///
/// `?` turns it into a [`ToolError::Failed`](crate::ToolError::Failed) with the same
/// message; match on it to fall back when a service is missing:
///
/// ```
/// use toolhost_plugin_api::{AskAnswer, AskRequest, ServiceError, ToolContext, ToolError};
///
/// async fn confirm(ctx: &ToolContext<'_>, what: &str) -> Result<bool, ToolError> {
///     match ctx.ask_user(&AskRequest::text(format!("Really {what}? (yes/no)"))).await {
///         Ok(AskAnswer::Accept { content }) => Ok(content["answer"] == "yes"),
///         Ok(AskAnswer::Decline | AskAnswer::Cancel) => Ok(false),
///         // Nobody to ask (an older host, or a caller without a person): do not go ahead.
///         Err(ServiceError::Unavailable(_)) => Ok(false),
///         Err(e) => Err(e.into()),
///     }
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceError {
    /// The host this plugin runs in does not provide the service (it predates it, or has
    /// no agent attached).
    Unavailable(String),
    /// The service ran and failed.
    Failed(String),
}

impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServiceError::Unavailable(m) | ServiceError::Failed(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ServiceError {}

impl From<ServiceError> for ClientAnswer {
    fn from(e: ServiceError) -> Self {
        match e {
            ServiceError::Unavailable(m) => ClientAnswer::Unavailable(m),
            ServiceError::Failed(m) => ClientAnswer::Failed(m),
        }
    }
}

impl ClientAnswer {
    fn other(self, wanted: &str) -> ServiceError {
        match self {
            ClientAnswer::Unavailable(m) => ServiceError::Unavailable(m),
            ClientAnswer::Failed(m) => ServiceError::Failed(m),
            _ => ServiceError::Failed(format!(
                "the host answered with something else than {wanted}"
            )),
        }
    }

    /// The person's answer, or why there is none.
    pub fn into_ask(self) -> Result<AskAnswer, ServiceError> {
        match self {
            ClientAnswer::Ask(answer) => Ok(answer),
            other => Err(other.other("an answer")),
        }
    }

    /// The model's completion, or why there is none.
    pub fn into_sample(self) -> Result<SampleAnswer, ServiceError> {
        match self {
            ClientAnswer::Sample(answer) => Ok(answer),
            other => Err(other.other("a completion")),
        }
    }

    /// The client's roots, or why there are none.
    pub fn into_roots(self) -> Result<Vec<Root>, ServiceError> {
        match self {
            ClientAnswer::Roots(answer) => Ok(answer.roots),
            other => Err(other.other("roots")),
        }
    }
}

/// The call was cancelled: the turn was stopped, or the call ran past its timeout.
///
/// `?` turns it into `ToolError::Failed("cancelled")`; nobody reads a cancelled call's
/// result, so there is rarely more to say.
///
/// ```
/// use toolhost_plugin_api::{Cancelled, ToolError};
///
/// assert_eq!(ToolError::from(Cancelled), ToolError::failed("cancelled"));
/// assert_eq!(Cancelled.to_string(), "the call was cancelled");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cancelled;

impl std::fmt::Display for Cancelled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the call was cancelled")
    }
}

impl std::error::Error for Cancelled {}

/// A request for a child turn (see [`ToolContext::child_turn`]): `{"prompt", "context"}`.
///
/// ```
/// use toolhost_plugin_api::ChildTurnRequest;
///
/// let request = ChildTurnRequest {
///     prompt: "Summarise the attached log in three lines.".into(),
///     context: Some("ERROR disk full at 03:12".into()),
/// };
/// let json = serde_json::to_value(&request).unwrap();
/// assert_eq!(json["context"], "ERROR disk full at 03:12");
///
/// // Read leniently: a context that is not text is left out.
/// let read: ChildTurnRequest = serde_json::from_str(r#"{"prompt": "hi", "context": 5}"#).unwrap();
/// assert_eq!(read.context, None);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChildTurnRequest {
    /// What the child agent is asked to do.
    pub prompt: String,
    /// Background the child needs, if any (anything but text is ignored).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::lenient::text_or_none"
    )]
    pub context: Option<String>,
}

impl ChildTurnRequest {
    /// A request for `prompt` with no context.
    ///
    /// ```
    /// use toolhost_plugin_api::ChildTurnRequest;
    ///
    /// let request = ChildTurnRequest::new("Summarise the log.").with_context("ERROR disk full");
    /// assert_eq!(request.context.as_deref(), Some("ERROR disk full"));
    /// ```
    pub fn new(prompt: impl Into<String>) -> Self {
        ChildTurnRequest {
            prompt: prompt.into(),
            ..ChildTurnRequest::default()
        }
    }

    /// This request with `context`.
    #[must_use]
    pub fn with_context(mut self, context: impl Into<String>) -> Self {
        self.context = Some(context.into());
        self
    }
}

/// What crosses for a child turn (0.1.4): the [`ChildTurnRequest`]'s keys and, when the
/// plugin asked with [`ToolContext::child_turn_as`], the child's `role`. Hosts and test
/// harnesses read it; plugins build a [`ChildTurnRequest`]. (The role is not a field of
/// the request itself so that code written against 0.1.3, which builds the request with
/// a struct literal, still compiles.)
///
/// ```
/// use toolhost_plugin_api::{ChildRole, ChildTurnCall};
///
/// let call: ChildTurnCall =
///     serde_json::from_str(r#"{"prompt": "plan it", "role": "orchestrator"}"#).unwrap();
/// assert_eq!((call.request.prompt.as_str(), call.role), ("plan it", Some(ChildRole::Orchestrator)));
/// // What a 0.1.3 plugin sends: no role, a leaf.
/// let old: ChildTurnCall = serde_json::from_str(r#"{"prompt": "hi"}"#).unwrap();
/// assert_eq!(old.role, None);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ChildTurnCall {
    /// The request.
    #[serde(flatten)]
    pub request: ChildTurnRequest,
    /// The child's role: `None` is [`ChildRole::Leaf`]. A host older than 0.1.4 ignores
    /// it (its children are all leaves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<ChildRole>,
}

impl ChildTurnCall {
    /// `request`, for a child with `role` (`None`: a leaf).
    pub fn new(request: ChildTurnRequest, role: Option<ChildRole>) -> Self {
        ChildTurnCall { request, role }
    }
}

impl<'a> ToolContext<'a> {
    /// Wraps the raw context the host passed. Only the export glue calls this.
    #[doc(hidden)]
    pub fn from_ffi(raw: &'a FfiCallContext<'a>) -> Self {
        ToolContext { raw }
    }

    /// The profile this call works for; keep per-profile state apart with it (or keep it
    /// in [`ToolContext::state_dir`], which is per profile already).
    ///
    /// ```
    /// use toolhost_plugin_api::ToolContext;
    ///
    /// fn cache_key(ctx: &ToolContext<'_>, url: &str) -> String {
    ///     format!("{}/{url}", ctx.profile_id())
    /// }
    /// ```
    pub fn profile_id(&self) -> &'a str {
        // SAFETY: the host keeps the context valid for `'a`; the string borrows from it.
        unsafe { (self.raw.host.profile_id())(self.raw) }.as_str()
    }

    /// The session (conversation) this call works for.
    ///
    /// ```
    /// use toolhost_plugin_api::{SessionQuery, ToolContext};
    ///
    /// // A search that leaves out this conversation by hand.
    /// async fn elsewhere(ctx: &ToolContext<'_>, words: &str) -> usize {
    ///     let query = SessionQuery { query: words.into(), limit: 20, exclude_current: false };
    ///     let hits = ctx.search_sessions(&query).await.unwrap_or_default();
    ///     hits.iter().filter(|hit| hit.session != ctx.session_id()).count()
    /// }
    /// ```
    pub fn session_id(&self) -> &'a str {
        // SAFETY: as in `profile_id`.
        unsafe { (self.raw.host.session_id())(self.raw) }.as_str()
    }

    /// The model that asked for this call.
    ///
    /// ```
    /// use toolhost_plugin_api::{LogLevel, ToolContext};
    ///
    /// fn note_caller(ctx: &ToolContext<'_>) {
    ///     ctx.log(LogLevel::DEBUG, &format!("called by {}", ctx.model()));
    /// }
    /// ```
    pub fn model(&self) -> &'a str {
        // SAFETY: as in `profile_id`.
        unsafe { (self.raw.host.model())(self.raw) }.as_str()
    }

    /// Whether the call was cancelled. Long-running tools check it between steps.
    ///
    /// ```
    /// use toolhost_plugin_api::{ToolContext, ToolError};
    ///
    /// async fn resize_all(ctx: &ToolContext<'_>, files: &[String]) -> Result<String, ToolError> {
    ///     for (done, file) in files.iter().enumerate() {
    ///         if ctx.is_cancelled() {
    ///             return Err(ToolError::failed(format!("stopped after {done} files")));
    ///         }
    ///         // ... resize `file` ...
    /// #       let _ = file;
    ///     }
    ///     Ok(format!("resized {} files", files.len()))
    /// }
    /// ```
    pub fn is_cancelled(&self) -> bool {
        // SAFETY: the host keeps the context valid for `'a`.
        unsafe { (self.raw.host.is_cancelled())(self.raw) }
    }

    /// Resolves when the call is cancelled. The future owns what it needs, so it can be
    /// sent to a thread of the tool's own or outlive the call.
    ///
    /// ```
    /// use toolhost_plugin_api::{ToolContext, ToolError};
    ///
    /// /// Keeps a lock (say) until the person stops the turn.
    /// async fn hold_until_stopped(ctx: &ToolContext<'_>) -> Result<String, ToolError> {
    ///     ctx.cancelled().await;
    ///     Ok("released".into())
    /// }
    /// ```
    pub fn cancelled(&self) -> impl Future<Output = ()> + Send + 'static {
        // SAFETY: the host keeps the context valid for `'a`; the future owns what it needs.
        unsafe { (self.raw.host.cancelled())(self.raw) }
    }

    /// Runs `future` until it finishes or the call is cancelled, whichever is first.
    ///
    /// ```
    /// use toolhost_plugin_api::{ToolContext, ToolError};
    ///
    /// async fn slow_answer() -> String {
    ///     // ... awaits something that may take long ...
    ///     "42".into()
    /// }
    ///
    /// async fn run(ctx: &ToolContext<'_>) -> Result<String, ToolError> {
    ///     let answer = ctx.until_cancelled(slow_answer()).await?; // `Err(Cancelled)` converts
    ///     Ok(answer)
    /// }
    /// ```
    pub async fn until_cancelled<F: Future>(&self, future: F) -> Result<F::Output, Cancelled> {
        let mut future = pin!(future);
        let mut cancelled = pin!(self.cancelled());
        poll_fn(|cx| {
            if let Poll::Ready(out) = future.as_mut().poll(cx) {
                return Poll::Ready(Ok(out));
            }
            cancelled.as_mut().poll(cx).map(|()| Err(Cancelled))
        })
        .await
    }

    /// Runs blocking work on its own thread (see [`crate::blocking`]) and awaits it. The
    /// work gets a [`CancelFlag`] that turns true when the call is cancelled; it should
    /// check it and stop. The call still waits for the work to return, so a host's grace
    /// period after a timeout applies to it too. A panic in `work` is an `Err`.
    ///
    /// ```
    /// use std::io::{BufRead, BufReader};
    /// use toolhost_plugin_api::{ToolContext, ToolError};
    ///
    /// async fn count_errors(ctx: &ToolContext<'_>, path: String) -> Result<String, ToolError> {
    ///     let counted = ctx
    ///         .blocking(move |cancel| -> std::io::Result<Option<usize>> {
    ///             let mut errors = 0;
    ///             for line in BufReader::new(std::fs::File::open(&path)?).lines() {
    ///                 if cancel.is_cancelled() {
    ///                     return Ok(None); // stop soon after a cancel
    ///                 }
    ///                 errors += usize::from(line?.contains("ERROR"));
    ///             }
    ///             Ok(Some(errors))
    ///         })
    ///         .await
    ///         .map_err(ToolError::failed)? // the work panicked
    ///         .map_err(ToolError::failed)?; // an I/O error
    ///     match counted {
    ///         Some(n) => Ok(format!("{n} lines with ERROR")),
    ///         None => Err(ToolError::failed("cancelled")),
    ///     }
    /// }
    /// ```
    pub async fn blocking<T, F>(&self, work: F) -> Result<T, String>
    where
        T: Send + 'static,
        F: FnOnce(&CancelFlag) -> T + Send + 'static,
    {
        let flag = CancelFlag::default();
        let worker_flag = flag.clone();
        let mut result = pin!(crate::blocking::blocking(move || work(&worker_flag)));
        match self.until_cancelled(result.as_mut()).await {
            Ok(out) => out,
            Err(Cancelled) => {
                flag.cancel();
                result.await
            }
        }
    }

    /// Sleeps on the host's timer; returns early with `Err(Cancelled)` if the call is
    /// cancelled first. (A plugin has no timer of its own: `tokio::time::sleep` panics
    /// inside a plugin, and `std::thread::sleep` holds a host thread.)
    ///
    /// ```
    /// use std::time::Duration;
    /// use toolhost_plugin_api::{ToolContext, ToolError};
    ///
    /// async fn wait_for_file(ctx: &ToolContext<'_>, path: &str) -> Result<String, ToolError> {
    ///     for _ in 0..30 {
    ///         if std::path::Path::new(path).exists() {
    ///             return Ok(format!("{path} is there"));
    ///         }
    ///         ctx.sleep(Duration::from_millis(500)).await?;
    ///     }
    ///     Err(ToolError::failed(format!("{path} did not appear within 15 s")))
    /// }
    /// ```
    pub async fn sleep(&self, duration: Duration) -> Result<(), Cancelled> {
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: the host keeps the context valid for `'a`.
        let completed = unsafe { (self.raw.host.sleep())(self.raw, nanos) }.await;
        if completed { Ok(()) } else { Err(Cancelled) }
    }

    /// Writes a line to the host's log, tagged with this plugin and tool. toolhost also
    /// sends it to an MCP client that asked for log messages (`notifications/message`).
    ///
    /// ```
    /// use toolhost_plugin_api::{LogLevel, ToolContext};
    ///
    /// fn retrying(ctx: &ToolContext<'_>, attempt: u32, error: &str) {
    ///     ctx.log(LogLevel::WARN, &format!("attempt {attempt} failed: {error}; retrying"));
    /// }
    /// ```
    pub fn log(&self, level: LogLevel, message: &str) {
        // SAFETY: the context is valid for `'a`; the host copies the message.
        unsafe { (self.raw.host.log())(self.raw, level, RStr::from_str(message)) }
    }

    /// Runs a child turn on the agent running this call and returns its final answer.
    ///
    /// Fails with [`ServiceError::Unavailable`] when the host runs no agent for this call
    /// (for example `toolhost call` from a terminal).
    ///
    /// ```
    /// use toolhost_plugin_api::{ChildTurnRequest, ToolContext, ToolError};
    ///
    /// async fn summarise(ctx: &ToolContext<'_>, text: String) -> Result<String, ToolError> {
    ///     let request = ChildTurnRequest::new("Summarise this in three bullet points.")
    ///         .with_context(text);
    ///     Ok(ctx.child_turn(&request).await?)
    /// }
    /// ```
    pub async fn child_turn(&self, request: &ChildTurnRequest) -> Result<String, ServiceError> {
        let request = serde_json::to_string(request)
            .map_err(|e| ServiceError::Failed(format!("could not encode the request: {e}")))?;
        self.child_turn_wire(&request).await
    }

    /// Like [`child_turn`](Self::child_turn), for a child with `role` (0.1.4): an
    /// [`Orchestrator`](ChildRole::Orchestrator) may delegate in turn, where the host
    /// allows it (toolhost: `[agent.children] orchestrator_enabled`, within
    /// `max_spawn_depth`; otherwise the request fails and says so). A host older than
    /// 0.1.4 runs a leaf.
    ///
    /// ```
    /// use toolhost_plugin_api::{ChildRole, ChildTurnRequest, ToolContext, ToolError};
    ///
    /// async fn plan(ctx: &ToolContext<'_>, goal: String) -> Result<String, ToolError> {
    ///     let request = ChildTurnRequest::new(format!("Plan and carry out: {goal}"));
    ///     Ok(ctx.child_turn_as(&request, ChildRole::Orchestrator).await?)
    /// }
    /// ```
    pub async fn child_turn_as(
        &self,
        request: &ChildTurnRequest,
        role: ChildRole,
    ) -> Result<String, ServiceError> {
        let call = ChildTurnCall::new(request.clone(), Some(role));
        let request = serde_json::to_string(&call)
            .map_err(|e| ServiceError::Failed(format!("could not encode the request: {e}")))?;
        self.child_turn_wire(&request).await
    }

    /// Sends a child turn's JSON to the host.
    async fn child_turn_wire(&self, request: &str) -> Result<String, ServiceError> {
        // SAFETY: the context is valid for `'a`; the host copies the request before returning.
        let future = unsafe { (self.raw.host.child_turn())(self.raw, RStr::from_str(request)) };
        match future.await {
            RResult::ROk(answer) => Ok(answer.into_string()),
            RResult::RErr(message) => Err(ServiceError::from_wire(message.into_string())),
        }
    }
}

impl ToolContext<'_> {
    /// Reports how far the call got (`progress` out of `total`, if known) to whoever asked
    /// for it: an MCP client that asked for progress gets `notifications/progress`. Does
    /// nothing when nobody listens, or on a host older than plugin-api 0.1.2.
    ///
    /// ```
    /// use toolhost_plugin_api::ToolContext;
    ///
    /// fn report(ctx: &ToolContext<'_>, done: usize, total: Option<usize>) {
    ///     let message = format!("{done} pages fetched");
    ///     ctx.progress(done as f64, total.map(|t| t as f64), Some(&message));
    /// }
    /// ```
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        if let Some(report) = self.raw.host.progress() {
            let message = RStr::from_str(message.unwrap_or(""));
            // SAFETY: the context is valid for the call; the host copies the message.
            unsafe { report(self.raw, progress, total.unwrap_or(f64::NAN), message) }
        }
    }

    /// Asks the person behind the call a question and waits for the answer (an MCP
    /// client's elicitation form; the terminal in `toolhost chat`). Fails with
    /// [`ServiceError::Unavailable`] when nobody can be asked. A tool that asks should say
    /// so with [`Tool::interactive`](crate::Tool::interactive).
    ///
    /// ```
    /// use toolhost_plugin_api::{AskAnswer, AskRequest, ToolContext, ToolError};
    ///
    /// async fn file_name(ctx: &ToolContext<'_>) -> Result<String, ToolError> {
    ///     match ctx.ask_user(&AskRequest::text("What should the file be called?")).await? {
    ///         AskAnswer::Accept { content } => content["answer"]
    ///             .as_str()
    ///             .map(str::to_owned)
    ///             .ok_or_else(|| ToolError::failed("the answer had no text")),
    ///         AskAnswer::Decline | AskAnswer::Cancel => {
    ///             Err(ToolError::failed("the person declined to name it"))
    ///         }
    ///     }
    /// }
    /// ```
    pub async fn ask_user(&self, request: &AskRequest) -> Result<AskAnswer, ServiceError> {
        let answer = self.json_service(self.raw.host.ask_user(), "asking the person", request);
        let answer = answer.await?;
        serde_json::from_str(&answer)
            .map_err(|e| ServiceError::Failed(format!("the host's answer was malformed: {e}")))
    }

    /// Asks the caller's model for a completion (MCP sampling). Fails with
    /// [`ServiceError::Unavailable`] when the caller offers no model.
    ///
    /// ```
    /// use toolhost_plugin_api::{SampleRequest, ToolContext, ToolError};
    ///
    /// async fn title_for(ctx: &ToolContext<'_>, diff: &str) -> Result<String, ToolError> {
    ///     let request = SampleRequest {
    ///         prompt: format!("A one-line commit title for this diff:\n{diff}"),
    ///         system: None,
    ///         max_tokens: 60,
    ///     };
    ///     Ok(ctx.sample(&request).await?.text)
    /// }
    /// ```
    pub async fn sample(&self, request: &SampleRequest) -> Result<SampleAnswer, ServiceError> {
        let answer = self.json_service(self.raw.host.sample(), "sampling", request);
        let answer = answer.await?;
        serde_json::from_str(&answer)
            .map_err(|e| ServiceError::Failed(format!("the host's answer was malformed: {e}")))
    }

    /// Sends a named request to the host (plugin-api 0.1.3): JSON parameters in, JSON out.
    /// A host that predates it, or does not know `method`, answers
    /// [`ServiceError::Unavailable`]. The typed way to the same requests is
    /// [`ToolContext::request`] (or the helpers [`ToolContext::state_dir`] and
    /// [`ToolContext::search_sessions`]).
    ///
    /// ```
    /// use serde_json::json;
    /// use toolhost_plugin_api::{ServiceError, ToolContext};
    ///
    /// async fn state_folder(ctx: &ToolContext<'_>) -> Result<String, ServiceError> {
    ///     let answer = ctx.host_request("profile.state_dir", &json!({})).await?;
    ///     Ok(answer["path"].as_str().unwrap_or_default().to_owned())
    /// }
    /// ```
    pub async fn host_request(&self, method: &str, params: &Value) -> Result<Value, ServiceError> {
        let Some(service) = self.raw.host.host_request() else {
            return Err(ServiceError::Unavailable(format!(
                "'{method}' is not available: this host predates plugin-api 0.1.3"
            )));
        };
        let params = params.to_string();
        // SAFETY: the context is valid for the call; the host copies both strings before
        // returning the future.
        let future = unsafe { service(self.raw, RStr::from_str(method), RStr::from_str(&params)) };
        match future.await {
            RResult::ROk(answer) => serde_json::from_str(&answer)
                .map_err(|e| ServiceError::Failed(format!("the host's answer was malformed: {e}"))),
            RResult::RErr(message) => Err(ServiceError::from_wire(message.into_string())),
        }
    }

    /// The folder where this call's profile keeps its state (created if missing). Tools
    /// that store data per profile (notes, caches) keep it here, so one profile never sees
    /// another's. Fails with [`ServiceError::Unavailable`] on a host older than plugin-api
    /// 0.1.3, or for a call that belongs to no profile.
    ///
    /// ```
    /// use toolhost_plugin_api::{ToolContext, ToolError};
    ///
    /// async fn remember(ctx: &ToolContext<'_>, note: &str) -> Result<String, ToolError> {
    ///     let file = ctx.state_dir().await?.join("notes.txt");
    ///     let mut notes = std::fs::read_to_string(&file).unwrap_or_default();
    ///     notes.push_str(note);
    ///     notes.push('\n');
    ///     std::fs::write(&file, notes).map_err(ToolError::failed)?;
    ///     Ok("noted".into())
    /// }
    /// ```
    pub async fn state_dir(&self) -> Result<std::path::PathBuf, ServiceError> {
        let request = HostRequest::ProfileStateDir(NoParams);
        let answer: StateDirAnswer = self.request(&request).await?;
        Ok(std::path::PathBuf::from(answer.path))
    }

    /// Full-text search over this profile's past conversations (the host's session store).
    /// Fails with [`ServiceError::Unavailable`] when the call is not part of an agent's
    /// turn (toolhost's `run` and `chat` have one; `toolhost call` and MCP clients do not).
    ///
    /// ```
    /// use toolhost_plugin_api::{SessionQuery, ToolContext, ToolError};
    ///
    /// async fn recall(ctx: &ToolContext<'_>, words: &str) -> Result<String, ToolError> {
    ///     let query = SessionQuery { query: words.into(), limit: 5, exclude_current: true };
    ///     let hits = ctx.search_sessions(&query).await?;
    ///     Ok(hits.iter().map(|hit| format!("{}: {}\n", hit.time, hit.snippet)).collect())
    /// }
    /// ```
    pub async fn search_sessions(
        &self,
        query: &SessionQuery,
    ) -> Result<Vec<SessionHit>, ServiceError> {
        let request = HostRequest::SessionsSearch(query.clone());
        let answer: SessionsSearchAnswer = self.request(&request).await?;
        Ok(answer.hits)
    }

    /// The current conversation's history, compact (plugin-api 0.1.4, `sessions.summary`):
    /// the person's requests, numbered, each with its outcome. `last` keeps only the
    /// latest requests (`None`: the host's default, 20). Fails with
    /// [`ServiceError::Unavailable`] outside an agent's turn, and on a host that predates
    /// the request ("this host does not know the request 'sessions.summary'"). In tests,
    /// `TestHost::session_summary` sets the history.
    ///
    /// ```
    /// use toolhost_plugin_api::{ToolContext, ToolError};
    ///
    /// async fn requests_so_far(ctx: &ToolContext<'_>) -> Result<u32, ToolError> {
    ///     Ok(ctx.session_summary(Some(10)).await?.total)
    /// }
    /// ```
    pub async fn session_summary(
        &self,
        last: Option<u32>,
    ) -> Result<SessionsSummaryAnswer, ServiceError> {
        self.request(&HostRequest::SessionsSummary(SummaryQuery::last(last)))
            .await
    }

    /// This plugin's settings: the `[plugins.NAME.settings]` table of the host's config
    /// (any TOML, `NAME` being the plugin's name in `export_plugin!`), read into `T`. A
    /// config without the table gives `{}`, so a `T` whose fields all have defaults
    /// (`#[serde(default)]`) reads its defaults. In tests, `TestHost::settings` sets it.
    ///
    /// A field that names a file or folder is a [`SettingsPath`](crate::SettingsPath): it
    /// is read relative to the config file's folder (`~/` under the home of the host's
    /// user), as the host's own config paths are, not to whatever folder the host runs in.
    ///
    /// Fails with [`ServiceError::Unavailable`] on a host older than plugin-api 0.1.4
    /// ("this host does not know the request 'plugin.settings'"), and with
    /// [`ServiceError::Failed`] when the table does not fit `T` (the message says which
    /// key, and where to fix it).
    ///
    /// ```
    /// use toolhost_plugin_api::{ToolContext, ToolError};
    ///
    /// #[derive(serde::Deserialize, Default)]
    /// #[serde(default)]
    /// struct Settings {
    ///     units: Option<String>,
    /// }
    ///
    /// async fn units(ctx: &ToolContext<'_>) -> Result<String, ToolError> {
    ///     let settings: Settings = ctx.settings().await?;
    ///     Ok(settings.units.unwrap_or_else(|| "metric".into()))
    /// }
    /// ```
    pub async fn settings<T: DeserializeOwned>(&self) -> Result<T, ServiceError> {
        let answer: SettingsAnswer = self.request(&HostRequest::PluginSettings(NoParams)).await?;
        let base = crate::settings_path::SettingsBase {
            base: answer.base.map(std::path::PathBuf::from),
            home: answer.home.map(std::path::PathBuf::from),
        };
        let type_name = std::any::type_name::<T>();
        let (settings, unread) = crate::settings_path::with_base(base, || {
            crate::unread_keys::from_value_noting_unread::<T>(answer.settings)
        })
        .map_err(|e| {
            ServiceError::Failed(format!(
                "the plugin's settings do not fit {type_name}: {e}; fix [plugins.NAME.settings] \
                 in the host's config"
            ))
        })?;
        if answer.strict && !unread.is_empty() {
            return Err(ServiceError::Failed(format!(
                "the settings name {} that {type_name} does not read (misspelt?); a host would \
                 warn and pass over {}",
                unread
                    .iter()
                    .map(|k| format!("'{k}'"))
                    .collect::<Vec<_>>()
                    .join(", "),
                if unread.len() == 1 { "it" } else { "them" }
            )));
        }
        Ok(settings)
    }

    /// The call's profile's workspace: the folders file and command tools are confined to
    /// and the rules for the commands and fetches they make (see [`WorkspaceAnswer`]).
    /// A profile without `[workspace] roots` answers with no roots. In tests,
    /// `TestHost::workspace` sets it.
    ///
    /// A tool that works in these folders says so in its requirements
    /// ([`Requirements::workspace()`](crate::Requirements::workspace)): a host running the
    /// plugin in a sandboxed worker opens the roots only to plugins that declare them.
    ///
    /// Fails with [`ServiceError::Unavailable`] on a host older than plugin-api 0.1.4.
    ///
    /// ```
    /// use toolhost_plugin_api::{ToolContext, ToolError};
    ///
    /// async fn first_root(ctx: &ToolContext<'_>) -> Result<String, ToolError> {
    ///     let workspace = ctx.workspace().await?;
    ///     workspace.roots.first().cloned().ok_or_else(|| ToolError::failed("no workspace"))
    /// }
    /// ```
    pub async fn workspace(&self) -> Result<WorkspaceAnswer, ServiceError> {
        self.request(&HostRequest::ProfileWorkspace(NoParams)).await
    }

    /// The most text this call's result may hold before the host cuts it (0.1.4). A
    /// tool that shows part of something large (a file, search matches, a listing) fills
    /// a [`Page`](crate::Page) up to it and says where to read on, so its result is never
    /// cut in the middle; the host's cut stays the backstop for results that do not page.
    /// A host older than 0.1.4 does not say: the answer is then
    /// [`OutputBudget::UNLIMITED`], and the tool's own limits apply.
    ///
    /// ```
    /// use toolhost_plugin_api::ToolContext;
    ///
    /// async fn numbers(ctx: &ToolContext<'_>, count: u64) -> String {
    ///     let mut page = ctx.output_budget().await.page(60, 1);
    ///     let shown = (1..=count).take_while(|n| page.push_line(&n.to_string())).count() as u64;
    ///     let mut text = page.into_text();
    ///     if shown < count {
    ///         text.push_str(&format!("({} more; ask again from {})\n", count - shown, shown + 1));
    ///     }
    ///     text
    /// }
    /// ```
    pub async fn output_budget(&self) -> OutputBudget {
        self.request(&HostRequest::OutputBudget(NoParams))
            .await
            .unwrap_or(OutputBudget::UNLIMITED)
    }

    /// Asks the call's client several things at once (0.1.4): questions for the person,
    /// completions of its model, its roots. An MCP 2026-07-28 client gets them together,
    /// each under its [`key`](ClientQuestion::key), and answers them in one retry; a
    /// session client is asked them side by side; toolhost's own terminal asks its person
    /// one after another. Answers come in the order asked, each the answer or why there is
    /// none (a client without sampling gets no completion request).
    ///
    /// Fails as a whole only on a host older than 0.1.4 ([`ServiceError::Unavailable`]).
    ///
    /// ```
    /// use toolhost_plugin_api::{AskRequest, ClientQuestion, SampleRequest, ToolContext, ToolError};
    ///
    /// async fn greet(ctx: &ToolContext<'_>) -> Result<String, ToolError> {
    ///     let answers = ctx
    ///         .ask_client(&[
    ///             ClientQuestion::ask(AskRequest::text("What is your name?")).keyed("user_name"),
    ///             ClientQuestion::sample(SampleRequest {
    ///                 prompt: "A one-line greeting".into(),
    ///                 system: None,
    ///                 max_tokens: 50,
    ///             }),
    ///         ])
    ///         .await?;
    ///     let mut answers = answers.into_iter();
    ///     let name = answers.next().map(|a| a.into_ask()).transpose()?;
    ///     let line = answers.next().map(|a| a.into_sample()).transpose()?;
    ///     Ok(format!("{name:?} {line:?}"))
    /// }
    /// ```
    pub async fn ask_client(
        &self,
        questions: &[ClientQuestion],
    ) -> Result<Vec<ClientAnswer>, ServiceError> {
        let request = HostRequest::ClientAsk(ClientQuestions {
            questions: questions.to_vec(),
        });
        let answer: ClientAnswers = self.request(&request).await?;
        if answer.answers.len() != questions.len() {
            return Err(ServiceError::Failed(format!(
                "the host answered {} of {} questions",
                answer.answers.len(),
                questions.len()
            )));
        }
        Ok(answer.answers)
    }

    /// The folders the call's client works in (0.1.4): an MCP client's roots
    /// (`roots/list`). [`ServiceError::Unavailable`] where the caller has none to give (a
    /// client without the roots capability, `toolhost call`, the agent).
    ///
    /// ```
    /// use toolhost_plugin_api::{ToolContext, ToolError};
    ///
    /// async fn where_am_i(ctx: &ToolContext<'_>) -> Result<String, ToolError> {
    ///     let roots = ctx.roots().await?;
    ///     Ok(roots.iter().map(|r| r.uri.as_str()).collect::<Vec<_>>().join("\n"))
    /// }
    /// ```
    pub async fn roots(&self) -> Result<Vec<Root>, ServiceError> {
        let mut answers = self.ask_client(&[ClientQuestion::roots()]).await?;
        match answers.pop() {
            Some(answer) => answer.into_roots(),
            None => Err(ServiceError::Failed("the host gave no answer".to_owned())),
        }
    }

    /// Lets the rest of this call run as a task (0.1.4): where the tool declares task
    /// support ([`Requirements::task`](crate::Requirements::task)) and its caller can hold
    /// tasks (an MCP client with the tasks extension), the caller is answered now with a
    /// task it polls for progress, questions and the result, and `true` comes back; the
    /// call goes on exactly as before either way. Call it before long work, or after
    /// gathering what the work needs.
    ///
    /// ```
    /// use toolhost_plugin_api::{ToolContext, ToolError};
    /// use std::time::Duration;
    ///
    /// async fn export(ctx: &ToolContext<'_>) -> Result<String, ToolError> {
    ///     ctx.detach().await;
    ///     ctx.sleep(Duration::from_secs(30)).await?;
    ///     Ok("exported".into())
    /// }
    /// ```
    pub async fn detach(&self) -> bool {
        self.request::<DetachAnswer>(&HostRequest::CallDetach(NoParams))
            .await
            .is_ok_and(|answer| answer.detached)
    }

    /// Starts a background delegation (0.1.4): the host runs `request`'s tasks as child
    /// turns after this call has returned, and adds each completion unit's results to the
    /// conversation as a message the model reads at its next step. Answers at once with
    /// the delegation's id and its units (see [`DelegationAnswer`]).
    ///
    /// Fails with [`ServiceError::Unavailable`] on a host older than plugin-api 0.1.4
    /// ("this host does not know the request 'agent.delegate'") and where no agent runs
    /// the call; a tool can then run the tasks with [`ToolContext::child_turn`] and wait.
    ///
    /// ```
    /// use toolhost_plugin_api::{DelegatedTask, DelegationRequest, ServiceError, ToolContext};
    ///
    /// async fn in_background(ctx: &ToolContext<'_>, task: &str) -> Result<String, ServiceError> {
    ///     let request = DelegationRequest { tasks: vec![DelegatedTask::new(task)] };
    ///     let answer = ctx.delegate(&request).await?;
    ///     Ok(format!("started {}", answer.delegation))
    /// }
    /// ```
    pub async fn delegate(
        &self,
        request: &DelegationRequest,
    ) -> Result<DelegationAnswer, ServiceError> {
        self.request(&HostRequest::Delegate(request.clone())).await
    }

    /// Sends a typed request to the host and reads its typed answer (see [`HostRequest`]
    /// for which answer type goes with which request).
    ///
    /// ```
    /// use toolhost_plugin_api::{HostRequest, ServiceError, SessionQuery, SessionsSearchAnswer};
    /// use toolhost_plugin_api::ToolContext;
    ///
    /// async fn hits(ctx: &ToolContext<'_>, query: SessionQuery) -> Result<usize, ServiceError> {
    ///     let request = HostRequest::SessionsSearch(query);
    ///     let answer: SessionsSearchAnswer = ctx.request(&request).await?;
    ///     Ok(answer.hits.len())
    /// }
    /// ```
    pub async fn request<A: DeserializeOwned>(
        &self,
        request: &HostRequest,
    ) -> Result<A, ServiceError> {
        let (method, params) = request
            .to_wire()
            .map_err(|e| ServiceError::Failed(format!("could not encode the request: {e}")))?;
        let answer = self.host_request(&method, &params).await?;
        serde_json::from_value(answer)
            .map_err(|e| ServiceError::Failed(format!("the host's answer was malformed: {e}")))
    }

    /// Calls a JSON-in, JSON-out service appended after 0.1.1.
    fn json_service(
        &self,
        service: Option<JsonService>,
        what: &str,
        request: &impl Serialize,
    ) -> impl Future<Output = Result<String, ServiceError>> + Send + 'static {
        let future = match (service, serde_json::to_string(request)) {
            (None, _) => Err(ServiceError::Unavailable(format!(
                "{what} is not available: this host predates plugin-api 0.1.2"
            ))),
            (Some(_), Err(e)) => Err(ServiceError::Failed(format!(
                "could not encode the request: {e}"
            ))),
            // SAFETY: the context is valid for the call; the host copies the request
            // before returning the future.
            (Some(service), Ok(json)) => Ok(unsafe { service(self.raw, RStr::from_str(&json)) }),
        };
        async move {
            match future?.await {
                RResult::ROk(answer) => Ok(answer.into_string()),
                RResult::RErr(message) => Err(ServiceError::from_wire(message.into_string())),
            }
        }
    }
}

type JsonService = unsafe extern "C" fn(
    &FfiCallContext<'_>,
    RStr<'_>,
) -> async_ffi::FfiFuture<
    RResult<abi_stable::std_types::RString, abi_stable::std_types::RString>,
>;

#[cfg(feature = "__test_newer_api")]
impl ToolContext<'_> {
    /// Test-only: a service that a later API version appends to the host table. On a
    /// host that predates it, this is how every newer service fails: `Unavailable`.
    #[doc(hidden)]
    pub fn newer_service(&self) -> Result<String, ServiceError> {
        match self.raw.host.newer_service() {
            // SAFETY: the host keeps the context valid for the call.
            Some(service) => Ok(unsafe { service(self.raw) }.into_string()),
            None => Err(ServiceError::Unavailable(format!(
                "this host's plugin-api predates the service (the plugin was built against \
                 plugin-api ABI {})",
                crate::ABI_VERSION
            ))),
        }
    }
}

/// Hosts prefix the message of a missing service with this marker.
#[doc(hidden)]
pub const UNAVAILABLE_PREFIX: &str = "unavailable: ";

impl ServiceError {
    /// The error as it crosses the ABI: its message, marked with `"unavailable: "` when
    /// the service is missing. [`ServiceError::from_wire`] reads it back.
    ///
    /// ```
    /// use toolhost_plugin_api::ServiceError;
    ///
    /// let missing = ServiceError::Unavailable("no person to ask".into());
    /// assert_eq!(missing.to_wire(), "unavailable: no person to ask");
    /// assert_eq!(ServiceError::Failed("timed out".into()).to_wire(), "timed out");
    /// ```
    pub fn to_wire(&self) -> String {
        match self {
            ServiceError::Unavailable(m) => format!("{UNAVAILABLE_PREFIX}{m}"),
            ServiceError::Failed(m) => m.clone(),
        }
    }

    /// Reads an error that crossed the ABI (see [`ServiceError::to_wire`]).
    ///
    /// ```
    /// use toolhost_plugin_api::ServiceError;
    ///
    /// let missing = ServiceError::Unavailable("no person to ask".into());
    /// assert_eq!(ServiceError::from_wire(missing.to_wire()), missing);
    /// assert_eq!(ServiceError::from_wire("boom".into()), ServiceError::Failed("boom".into()));
    /// ```
    pub fn from_wire(message: String) -> ServiceError {
        match message.strip_prefix(UNAVAILABLE_PREFIX) {
            Some(rest) => ServiceError::Unavailable(rest.to_owned()),
            None => ServiceError::Failed(message),
        }
    }
}
