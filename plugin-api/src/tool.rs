//! The traits plugin authors implement: [`Tool`] for JSON arguments, [`TypedTool`] for
//! arguments deserialized into a Rust type whose JSON Schema is derived with schemars.

use std::fmt;
use std::future::Future;

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::{Cancelled, ServiceError, ToolContext};
use crate::outcome::{Details, ToolOutput};
use crate::risk::Risk;

/// Why a tool call did not produce an output. It goes back to the model as a result with
/// `is_error: true`, so the model can correct itself; it never ends the turn.
///
/// Write the message for the model: what went wrong and what to do instead.
///
/// ```
/// use toolhost_plugin_api::ToolError;
///
/// fn parse_port(text: &str) -> Result<u16, ToolError> {
///     text.parse()
///         .map_err(|e| ToolError::invalid_args(format!("`port` must be 1-65535 ({e})")))
/// }
///
/// let e = parse_port("http").unwrap_err();
/// assert!(matches!(e, ToolError::InvalidArgs(_)));
/// assert!(e.to_string().starts_with("invalid arguments: `port` must be 1-65535"));
/// assert_eq!(ToolError::failed("disk full").to_string(), "disk full");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolError {
    /// The arguments were well-formed JSON but made no sense (shown to the model as
    /// `invalid arguments: ...`).
    InvalidArgs(String),
    /// The tool ran and failed.
    Failed(String),
}

impl ToolError {
    /// A [`ToolError::Failed`] from anything printable, e.g. an I/O error.
    ///
    /// ```
    /// use toolhost_plugin_api::ToolError;
    ///
    /// fn read(path: &str) -> Result<String, ToolError> {
    ///     std::fs::read_to_string(path).map_err(ToolError::failed)
    /// }
    ///
    /// assert!(matches!(read("/no/such/file"), Err(ToolError::Failed(_))));
    /// ```
    pub fn failed(message: impl fmt::Display) -> Self {
        ToolError::Failed(message.to_string())
    }

    /// A [`ToolError::InvalidArgs`] from anything printable.
    ///
    /// ```
    /// use toolhost_plugin_api::ToolError;
    ///
    /// let e = ToolError::invalid_args("`limit` must be at most 100");
    /// assert_eq!(e, ToolError::InvalidArgs("`limit` must be at most 100".to_owned()));
    /// ```
    pub fn invalid_args(message: impl fmt::Display) -> Self {
        ToolError::InvalidArgs(message.to_string())
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolError::InvalidArgs(m) => write!(f, "invalid arguments: {m}"),
            ToolError::Failed(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ToolError {}

/// A tool: something the model can ask the agent to do.
///
/// The model sees the name, the description and the schema: write the description for
/// the model (what the tool does, when to use it, what the arguments mean).
///
/// Implement `call` as an ordinary `async fn` (no `#[async_trait]` needed); its future
/// must be `Send`.
///
/// ```
/// use toolhost_plugin_api::{Risk, Tool, ToolContext, ToolError};
/// use serde_json::{json, Value};
///
/// struct Echo;
///
/// impl Tool for Echo {
///     fn name(&self) -> &str { "echo" }
///     fn description(&self) -> &str { "Returns `text` unchanged." }
///     fn schema(&self) -> Value {
///         json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
///     }
///     fn risk(&self) -> Risk { Risk::Read }
///     async fn call(&self, _ctx: &ToolContext<'_>, args: Value) -> Result<String, ToolError> {
///         Ok(args["text"].as_str().unwrap_or_default().to_owned())
///     }
/// }
/// ```
pub trait Tool: Send + Sync + 'static {
    /// The name the model calls the tool by: `[a-zA-Z0-9_-]`, at most 64 characters.
    fn name(&self) -> &str;
    /// What the tool does, when to use it and what the arguments mean.
    fn description(&self) -> &str;
    /// The JSON Schema of the arguments object.
    fn schema(&self) -> Value;
    /// How risky a call is; the host's approval policy reads it before every call.
    fn risk(&self) -> Risk;
    /// Interactive tools need a person at hand; a batch holding one runs one call at a time.
    /// Their calls get the host's timeout for interactive calls (toolhost's
    /// `[calls] interactive_timeout_secs`, 15 minutes by default) instead of the usual one.
    /// Say `true` for a tool that waits for a person, e.g. one that calls
    /// [`ToolContext::ask_user`].
    fn interactive(&self) -> bool {
        false
    }
    /// What the tool needs to work (environment variables, programs on `PATH`). The host
    /// checks them (with a short cache): while one is missing the tool is not shown to the
    /// model and calls to it are refused with the reason.
    ///
    /// ```
    /// use toolhost_plugin_api::{Requirements, Risk, Tool, ToolContext, ToolError};
    /// use serde_json::{Value, json};
    ///
    /// struct Weather;
    ///
    /// impl Tool for Weather {
    ///     fn name(&self) -> &str { "weather" }
    ///     fn description(&self) -> &str { "Today's weather for `city`." }
    ///     fn schema(&self) -> Value {
    ///         json!({"type": "object", "properties": {"city": {"type": "string"}}})
    ///     }
    ///     fn risk(&self) -> Risk { Risk::Network }
    ///     fn requirements(&self) -> Requirements {
    ///         Requirements::default().env(&["WEATHER_API_KEY"]).programs(&["curl"])
    ///     }
    ///     async fn call(&self, _: &ToolContext<'_>, _: Value) -> Result<String, ToolError> {
    ///         Err(ToolError::failed("not written yet"))
    ///     }
    /// }
    ///
    /// assert_eq!(Weather.requirements().env, ["WEATHER_API_KEY"]);
    /// ```
    fn requirements(&self) -> Requirements {
        Requirements::default()
    }
    /// Runs the tool. The host has validated `args` against [`Tool::schema`].
    ///
    /// Don't use tokio (or any runtime) inside a plugin: a plugin's copy of tokio has no
    /// reactor. Use the context's services ([`ToolContext::sleep`],
    /// [`ToolContext::cancelled`]) and [`crate::blocking`] for blocking work.
    fn call(
        &self,
        ctx: &ToolContext<'_>,
        args: Value,
    ) -> impl Future<Output = Result<String, ToolError>> + Send;

    /// Runs the tool with the arguments as JSON text. The default parses them into a
    /// `Value` for [`Tool::call`]; typed tools deserialize straight into their argument
    /// type. Rarely worth overriding by hand. (The glue hosts reach calls
    /// [`Tool::call_json_output`], whose default reaches `call` through `call_output`.)
    fn call_json(
        &self,
        ctx: &ToolContext<'_>,
        args: &str,
    ) -> impl Future<Output = Result<String, ToolError>> + Send {
        let parsed = serde_json::from_str::<Value>(args)
            .map_err(|e| ToolError::InvalidArgs(format!("arguments are not valid JSON: {e}")));
        async move { self.call(ctx, parsed?).await }
    }

    /// The JSON Schema of the tool's structured result ([`ToolOutput::structured`]), if
    /// it declares one: MCP clients are served it as the tool's `outputSchema`, and the
    /// host checks every structured result against it (a result that does not match is an
    /// error result naming the mismatch). Its top level must be an object. `None` (the
    /// default) declares none; a typed tool derives it from its output type (see
    /// [`TypedOutputTool`]).
    ///
    /// ```
    /// use serde_json::{json, Value};
    /// use toolhost_plugin_api::{Risk, Tool, ToolContext, ToolError, ToolOutput};
    ///
    /// struct Forecast;
    /// impl Tool for Forecast {
    ///     fn name(&self) -> &str { "forecast" }
    ///     fn description(&self) -> &str { "Tomorrow's temperature." }
    ///     fn schema(&self) -> Value { json!({"type": "object"}) }
    ///     fn risk(&self) -> Risk { Risk::Read }
    ///     fn output_schema(&self) -> Option<Value> {
    ///         Some(json!({"type": "object", "properties": {"celsius": {"type": "number"}},
    ///                     "required": ["celsius"]}))
    ///     }
    ///     async fn call_output(&self, _: &ToolContext<'_>, _: Value) -> Result<ToolOutput, ToolError> {
    ///         Ok(ToolOutput::structured(json!({"celsius": 21.5})))
    ///     }
    ///     // Required by the trait; hosts (old ones too) reach `call_output`, so only direct
    ///     // Rust callers get here: the same outcome, as text.
    ///     async fn call(&self, ctx: &ToolContext<'_>, args: Value) -> Result<String, ToolError> {
    ///         Ok(self.call_output(ctx, args).await?.degraded_text())
    ///     }
    /// }
    /// # let out = toolhost_plugin_api::testing::TestHost::new().call_output(&Forecast, json!({}));
    /// # assert_eq!(out.expect("ok").structured, Some(json!({"celsius": 21.5})));
    /// ```
    fn output_schema(&self) -> Option<Value> {
        None
    }

    /// Runs the tool and returns its whole outcome: the text, and a structured value,
    /// details and content blocks (see [`ToolOutput`]). The glue calls this for every
    /// host: hosts since plugin-api 0.1.4 get the outcome, older ones its
    /// [`ToolOutput::degraded_text`]. The default returns [`Tool::call`]'s text. A tool
    /// that returns more than text overrides it; its `call`, which the trait requires, is
    /// then reached only by direct Rust callers (return the degraded text there, see
    /// [`Tool::output_schema`]'s example).
    fn call_output(
        &self,
        ctx: &ToolContext<'_>,
        args: Value,
    ) -> impl Future<Output = Result<ToolOutput, ToolError>> + Send {
        async move { self.call(ctx, args).await.map(ToolOutput::from) }
    }

    /// [`Tool::call_output`] with the arguments as JSON text, as they cross the plugin
    /// boundary: what the glue calls. The default parses them into a `Value`; typed tools
    /// deserialize straight into their argument type. Rarely worth overriding by hand.
    fn call_json_output(
        &self,
        ctx: &ToolContext<'_>,
        args: &str,
    ) -> impl Future<Output = Result<ToolOutput, ToolError>> + Send {
        let parsed = serde_json::from_str::<Value>(args)
            .map_err(|e| ToolError::InvalidArgs(format!("arguments are not valid JSON: {e}")));
        async move { self.call_output(ctx, parsed?).await }
    }
}

/// A tool whose arguments are a Rust type: the schema is derived from it and `run`
/// receives it deserialized. Every `TypedTool` is a [`Tool`].
///
/// ```
/// use toolhost_plugin_api::{Risk, ToolContext, ToolError, TypedTool};
/// use schemars::JsonSchema;
/// use serde::Deserialize;
///
/// #[derive(Deserialize, JsonSchema)]
/// struct GreetArgs {
///     /// Who to greet.
///     name: String,
/// }
///
/// struct Greet;
///
/// impl TypedTool for Greet {
///     type Args = GreetArgs;
///     fn name(&self) -> &str { "greet" }
///     fn description(&self) -> &str { "Greets someone by name." }
///     fn risk(&self) -> Risk { Risk::Read }
///     async fn run(&self, _ctx: &ToolContext<'_>, args: GreetArgs) -> Result<String, ToolError> {
///         Ok(format!("Hello, {}!", args.name))
///     }
/// }
/// ```
pub trait TypedTool: Send + Sync + 'static {
    /// The arguments; their JSON Schema is what the model sees.
    type Args: DeserializeOwned + JsonSchema + Send;
    /// See [`Tool::name`].
    fn name(&self) -> &str;
    /// See [`Tool::description`].
    fn description(&self) -> &str;
    /// See [`Tool::risk`].
    fn risk(&self) -> Risk;
    /// See [`Tool::interactive`].
    fn interactive(&self) -> bool {
        false
    }
    /// See [`Tool::requirements`].
    fn requirements(&self) -> Requirements {
        Requirements::default()
    }
    /// Runs the tool with the deserialized arguments.
    fn run(
        &self,
        ctx: &ToolContext<'_>,
        args: Self::Args,
    ) -> impl Future<Output = Result<String, ToolError>> + Send;

    /// The JSON Schema of the structured result, if the tool declares one (see
    /// [`Tool::output_schema`]). [`TypedOutputTool`]s derive it from their output type;
    /// the default declares none.
    fn output_schema(&self) -> Option<Value> {
        None
    }

    /// Runs the tool and returns its whole outcome (see [`Tool::call_output`]). The
    /// default returns [`TypedTool::run`]'s text; override it to add details, content
    /// blocks or a structured value to a text tool:
    ///
    /// ```
    /// use toolhost_plugin_api::{Diagnostic, Risk, ToolContext, ToolError, ToolOutput, TypedTool};
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct LintArgs { path: String }
    ///
    /// struct Lint;
    /// impl TypedTool for Lint {
    ///     type Args = LintArgs;
    ///     fn name(&self) -> &str { "lint" }
    ///     fn description(&self) -> &str { "Lints a file." }
    ///     fn risk(&self) -> Risk { Risk::Read }
    ///     async fn run(&self, ctx: &ToolContext<'_>, a: LintArgs) -> Result<String, ToolError> {
    ///         Ok(self.run_output(ctx, a).await?.text)
    ///     }
    ///     async fn run_output(&self, _: &ToolContext<'_>, a: LintArgs) -> Result<ToolOutput, ToolError> {
    ///         let found = vec![Diagnostic::new("warning", "line too long").at(&a.path, 3, 101)];
    ///         Ok(ToolOutput::text(format!("{}:3:101: warning: line too long", a.path))
    ///             .with_diagnostics(found))
    ///     }
    /// }
    /// let out = toolhost_plugin_api::testing::TestHost::new()
    ///     .call_output(&Lint, serde_json::json!({"path": "a.rs"}))
    ///     .expect("lints");
    /// assert_eq!(out.details["diagnostics"][0]["column"], 101);
    /// ```
    fn run_output(
        &self,
        ctx: &ToolContext<'_>,
        args: Self::Args,
    ) -> impl Future<Output = Result<ToolOutput, ToolError>> + Send {
        async move { self.run(ctx, args).await.map(ToolOutput::from) }
    }
}

impl<T: TypedTool> Tool for T {
    fn name(&self) -> &str {
        TypedTool::name(self)
    }
    fn description(&self) -> &str {
        TypedTool::description(self)
    }
    fn schema(&self) -> Value {
        crate::schema::schema_for::<T::Args>()
    }
    fn risk(&self) -> Risk {
        TypedTool::risk(self)
    }
    fn interactive(&self) -> bool {
        TypedTool::interactive(self)
    }
    fn requirements(&self) -> Requirements {
        TypedTool::requirements(self)
    }
    async fn call(&self, ctx: &ToolContext<'_>, args: Value) -> Result<String, ToolError> {
        let args = serde_json::from_value(args).map_err(ToolError::invalid_args)?;
        self.run(ctx, args).await
    }

    fn call_json(
        &self,
        ctx: &ToolContext<'_>,
        args: &str,
    ) -> impl Future<Output = Result<String, ToolError>> + Send {
        // Straight from the text into the argument type: no intermediate `Value`.
        let parsed = serde_json::from_str::<T::Args>(args).map_err(ToolError::invalid_args);
        async move { self.run(ctx, parsed?).await }
    }

    fn output_schema(&self) -> Option<Value> {
        TypedTool::output_schema(self)
    }

    async fn call_output(
        &self,
        ctx: &ToolContext<'_>,
        args: Value,
    ) -> Result<ToolOutput, ToolError> {
        let args = serde_json::from_value(args).map_err(ToolError::invalid_args)?;
        self.run_output(ctx, args).await
    }

    fn call_json_output(
        &self,
        ctx: &ToolContext<'_>,
        args: &str,
    ) -> impl Future<Output = Result<ToolOutput, ToolError>> + Send {
        let parsed = serde_json::from_str::<T::Args>(args).map_err(ToolError::invalid_args);
        async move { self.run_output(ctx, parsed?).await }
    }
}

/// A tool whose arguments and result are Rust types: the argument schema and the output
/// schema are derived from them, `run` receives the arguments deserialized and returns the
/// result, which reaches clients as a structured value (MCP `structuredContent`, checked
/// against the output schema) and the model as its JSON text (or [`TypedOutputTool::text`]).
/// Every `TypedOutputTool` is a [`TypedTool`] and so a [`Tool`].
///
/// MCP asks for an object at the top of an output schema: make `Output` a struct (or a
/// map), not a list or a number.
///
/// ```
/// use toolhost_plugin_api::{Risk, ToolContext, ToolError, TypedOutputTool};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct WeatherArgs { city: String }
///
/// #[derive(serde::Serialize, schemars::JsonSchema)]
/// struct Weather { city: String, celsius: f64 }
///
/// struct Forecast;
/// impl TypedOutputTool for Forecast {
///     type Args = WeatherArgs;
///     type Output = Weather;
///     fn name(&self) -> &str { "forecast" }
///     fn description(&self) -> &str { "Tomorrow's temperature in a city." }
///     fn risk(&self) -> Risk { Risk::Read }
///     async fn run(&self, _: &ToolContext<'_>, a: WeatherArgs) -> Result<Weather, ToolError> {
///         Ok(Weather { city: a.city, celsius: 21.5 })
///     }
///     fn text(&self, w: &Weather) -> String { format!("{}: {} °C", w.city, w.celsius) }
/// }
///
/// let host = toolhost_plugin_api::testing::TestHost::new();
/// let out = host.call_output(&Forecast, serde_json::json!({"city": "Oslo"})).expect("runs");
/// assert_eq!(out.text, "Oslo: 21.5 °C");
/// assert_eq!(out.structured, Some(serde_json::json!({"city": "Oslo", "celsius": 21.5})));
/// assert!(host.describe(&Forecast).output_schema.is_some());
/// ```
pub trait TypedOutputTool: Send + Sync + 'static {
    /// The arguments, deserialized from the model's JSON; their schema is derived.
    type Args: DeserializeOwned + JsonSchema + Send;
    /// The result; its schema is the tool's output schema.
    type Output: Serialize + JsonSchema + Send;
    /// See [`Tool::name`].
    fn name(&self) -> &str;
    /// See [`Tool::description`].
    fn description(&self) -> &str;
    /// See [`Tool::risk`].
    fn risk(&self) -> Risk;
    /// See [`Tool::interactive`].
    fn interactive(&self) -> bool {
        false
    }
    /// See [`Tool::requirements`].
    fn requirements(&self) -> Requirements {
        Requirements::default()
    }
    /// Runs the tool (see [`Tool::call`] on runtimes and blocking work).
    fn run(
        &self,
        ctx: &ToolContext<'_>,
        args: Self::Args,
    ) -> impl Future<Output = Result<Self::Output, ToolError>> + Send;
    /// The text the model reads for a result: its JSON by default (what MCP asks for, for
    /// clients that predate structured results). Keep it faithful to the value.
    fn text(&self, output: &Self::Output) -> String {
        serde_json::to_string(output)
            .unwrap_or_else(|e| format!("(could not encode the result: {e})"))
    }
    /// Details for the session store and clients (never the model) for a result; none by
    /// default. See [`ToolOutput::details`].
    fn details(&self, output: &Self::Output) -> Details {
        let _ = output;
        Details::new()
    }
    /// Whether a result says the call did not do what was asked (a command that exited
    /// non-zero, a check with errors): it goes out as an error with its text and value
    /// (see [When to return an error](ToolOutput#when-to-return-an-error)). `false` by
    /// default.
    fn is_error(&self, output: &Self::Output) -> bool {
        let _ = output;
        false
    }
}

impl<T: TypedOutputTool> TypedTool for T {
    type Args = <T as TypedOutputTool>::Args;
    fn name(&self) -> &str {
        TypedOutputTool::name(self)
    }
    fn description(&self) -> &str {
        TypedOutputTool::description(self)
    }
    fn risk(&self) -> Risk {
        TypedOutputTool::risk(self)
    }
    fn interactive(&self) -> bool {
        TypedOutputTool::interactive(self)
    }
    fn requirements(&self) -> Requirements {
        TypedOutputTool::requirements(self)
    }
    fn output_schema(&self) -> Option<Value> {
        Some(crate::schema::schema_for::<T::Output>())
    }
    async fn run(
        &self,
        ctx: &ToolContext<'_>,
        args: <T as TypedOutputTool>::Args,
    ) -> Result<String, ToolError> {
        let value = TypedOutputTool::run(self, ctx, args).await?;
        if self.is_error(&value) {
            return Err(ToolError::failed(self.text(&value)));
        }
        Ok(self.text(&value))
    }
    async fn run_output(
        &self,
        ctx: &ToolContext<'_>,
        args: <T as TypedOutputTool>::Args,
    ) -> Result<ToolOutput, ToolError> {
        let value = TypedOutputTool::run(self, ctx, args).await?;
        let structured = serde_json::to_value(&value)
            .map_err(|e| ToolError::failed(format!("could not encode the tool's result: {e}")))?;
        Ok(ToolOutput {
            text: self.text(&value),
            structured: Some(structured),
            details: self.details(&value),
            content: Vec::new(),
            is_error: self.is_error(&value),
        })
    }
}

/// What a tool needs to be available; see [`Tool::requirements`].
///
/// ```
/// use toolhost_plugin_api::{Requirements, TaskSupport};
///
/// let needs = Requirements::default().env(&["GITHUB_TOKEN"]).programs(&["git", "gh"]);
/// assert_eq!(needs.env, ["GITHUB_TOKEN"]);
/// assert_eq!(needs.programs, ["git", "gh"]);
/// assert_eq!(
///     Requirements::default(),
///     Requirements { env: vec![], programs: vec![], workspace: false, task: TaskSupport::Forbidden }
/// );
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Requirements {
    /// Environment variables that must be set (and not empty), e.g. an API key.
    pub env: Vec<String>,
    /// Programs that must be found on `PATH`, e.g. `"git"`.
    pub programs: Vec<String>,
    /// The tool reads, writes or runs programs in the profile's workspace (the folders
    /// `ctx.workspace()` names: `--workspace DIR`, `[workspace] roots`). A host that runs
    /// plugins in sandboxed workers (`--isolate`) opens those folders only to the workers
    /// of plugins with a tool that says so; see [`Requirements::workspace`].
    ///
    /// In the JSON that crosses to the host the key is always written. A plugin built
    /// before it existed (plugin-api 0.1.3 and older) writes no key, and hosts read that
    /// as `true`: such a plugin keeps the access it always had.
    #[serde(default = "workspace_unsaid")]
    pub workspace: bool,
    /// Whether the tool's calls may run as tasks their client polls (MCP's tasks
    /// extension); see [`Requirements::task`]. Written only when not `Forbidden`, so hosts
    /// that predate it read the tool as they always did.
    #[serde(default, skip_serializing_if = "is_forbidden")]
    pub task: crate::TaskSupport,
}

fn is_forbidden(task: &crate::TaskSupport) -> bool {
    !task.supported()
}

/// What a tool's requirements without a `workspace` key mean: a plugin built before the
/// key existed, which has always had the workspace.
fn workspace_unsaid() -> bool {
    true
}

impl Requirements {
    /// Needs these environment variables (added to those already listed).
    ///
    /// ```
    /// use toolhost_plugin_api::Requirements;
    ///
    /// let needs = Requirements::default().env(&["API_KEY"]).env(&["API_URL"]);
    /// assert_eq!(needs.env, ["API_KEY", "API_URL"]);
    /// ```
    pub fn env(mut self, names: &[&str]) -> Self {
        self.env.extend(names.iter().map(|s| (*s).to_owned()));
        self
    }

    /// Needs these programs on `PATH` (added to those already listed).
    ///
    /// ```
    /// use toolhost_plugin_api::Requirements;
    ///
    /// assert_eq!(Requirements::default().programs(&["ffmpeg"]).programs, ["ffmpeg"]);
    /// ```
    pub fn programs(mut self, names: &[&str]) -> Self {
        self.programs.extend(names.iter().map(|s| (*s).to_owned()));
        self
    }

    /// Works in the profile's workspace: reads, writes or runs programs under the roots
    /// `ctx.workspace()` names. Under `--isolate` only the workers of plugins with such a
    /// tool may reach those folders; a tool that does not say so is refused there by the
    /// sandbox.
    ///
    /// ```
    /// use toolhost_plugin_api::Requirements;
    ///
    /// assert!(Requirements::default().workspace().workspace);
    /// assert!(!Requirements::default().workspace);
    /// // What crosses to the host names it either way; no key is a plugin built before
    /// // it existed, which keeps the workspace.
    /// let json = serde_json::to_value(Requirements::default()).unwrap();
    /// assert_eq!(json["workspace"], false);
    /// let old: Requirements = serde_json::from_str(r#"{"env":[],"programs":[]}"#).unwrap();
    /// assert!(old.workspace);
    /// ```
    pub fn workspace(mut self) -> Self {
        self.workspace = true;
        self
    }

    /// May run as a task: a long call whose client, if it can hold tasks (MCP's tasks
    /// extension), gets a handle as soon as the tool calls
    /// [`ToolContext::detach`](crate::ToolContext::detach), and polls it for progress,
    /// questions and the result. With [`TaskSupport::Required`](crate::TaskSupport::Required)
    /// a 2026-07-28 MCP client that cannot hold tasks is refused before the tool runs;
    /// other callers wait for the result as for any tool.
    ///
    /// ```
    /// use toolhost_plugin_api::{Requirements, TaskSupport};
    ///
    /// let needs = Requirements::default().task(TaskSupport::Optional);
    /// assert_eq!(serde_json::to_value(&needs).unwrap()["task"], "optional");
    /// // Not written when forbidden, the default.
    /// assert!(serde_json::to_value(Requirements::default()).unwrap().get("task").is_none());
    /// ```
    pub fn task(mut self, support: crate::TaskSupport) -> Self {
        self.task = support;
        self
    }
}

// A host service's error and a cancellation become a tool failure with `?` (their types
// live with the context; the conversions live here, with `ToolError`).
impl From<ServiceError> for ToolError {
    fn from(e: ServiceError) -> Self {
        ToolError::Failed(e.to_string())
    }
}

impl From<Cancelled> for ToolError {
    fn from(_: Cancelled) -> Self {
        ToolError::Failed("cancelled".to_owned())
    }
}

/// An I/O error is a tool failure with `?`, its text the message (no ABI change: the
/// conversion runs in the plugin).
///
/// ```
/// use toolhost_plugin_api::{ToolError, tool};
///
/// /// Reads a file of the machine the host runs on.
/// #[tool(risk = read)]
/// async fn read_text(
///     /// The file's path.
///     path: String,
/// ) -> Result<String, ToolError> {
///     Ok(std::fs::read_to_string(path)?)
/// }
///
/// let e = ToolError::from(std::fs::read("/no/such/file").unwrap_err());
/// assert!(matches!(e, ToolError::Failed(m) if m.contains("No such file")));
/// ```
impl From<std::io::Error> for ToolError {
    fn from(e: std::io::Error) -> Self {
        ToolError::Failed(e.to_string())
    }
}

/// A JSON error in a tool's own work (not its arguments, which the host checks against
/// the schema) is a tool failure with `?`.
impl From<serde_json::Error> for ToolError {
    fn from(e: serde_json::Error) -> Self {
        ToolError::Failed(e.to_string())
    }
}
