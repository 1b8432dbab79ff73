//! toolhost: loads LLM-agent tools from compiled plugins and runs the calls a model asks
//! for.
//!
//! The nouns:
//! - **Plugin**: a shared library built against `toolhost-plugin-api` that exports tools.
//!   [`PluginLoader`] loads plugin files from plugin directories through private copies,
//!   checks their API version and type layouts, and reports one [`PluginLoadError`] per
//!   bad file while the others load ([`LoadReport`]).
//! - **Tool**: anything implementing [`DynTool`] (the host's object-safe tool trait; plugins
//!   implement plugin-api's `Tool`/`TypedTool`, which the host wraps): a [`ToolSpec`]
//!   (name, description, argument schema, [`Risk`], interactive flag), a [`ToolOrigin`] and
//!   an async `call`. Plugin tools and tools compiled into the host are the same to
//!   everything below.
//! - **Plugin generation**: each load of a changed file. A running host's
//!   [`PluginCatalog`] keeps one per file, swaps the registry atomically on each rescan and
//!   publishes a [`RegistryEvent`]; calls finish on the generation they started with.
//! - **Registry**: [`ToolRegistry`] holds tools by name with their compiled argument
//!   validators; `only` and `without` make the filtered copies profiles and child agents
//!   use.
//! - **Door**: [`CallDoor`] is the one way every call enters, whichever frontend it came
//!   from. A frontend fills a [`CallRequest`] (the [`Caller`], the profile, who can be
//!   asked, the channel back, a timeout cap, a cancel token) and renders the
//!   [`ToolResult`]; the door makes one [`Plan`] per request (its one policy with that
//!   approver, its [`Limits`] held to the request's cap), resolves the profile's tools
//!   ([`Profiles`]), and every [`CallObserver`] registered on it (statistics) sees every
//!   call with its context, as the caller got it.
//! - **Dispatcher**: holds nothing. A [`Plan`] runs the [`ToolCall`]s of one model
//!   response, concurrently or one at a time when any is interactive. Each call is first
//!   admitted ([`admit`]: exists, not `deny`, valid [`Arguments`], allowed by the
//!   [`CallPolicy`]) and then executed ([`execute`]: under its time limit and the
//!   [`CallContext`]'s cancel token); every outcome is a [`ToolResult`] in request order.
//! - **Policy**: [`ApprovalPolicy`] runs `read` tools and asks an [`Approver`] for the
//!   others; operators override declared risks ([`RiskOverride`]).
//! - **Context**: each call gets a [`CallContext`]: the [`TurnIdentity`] (profile, session,
//!   model), the [`Caller`], its cancel token and the [`TurnServices`] (the [`CallerChannel`] back to
//!   whoever asked, child turns, typed host requests). Plugins see it through the stable
//!   ABI as data plus a table of host services.
//! - **Profile**: a [`Profile`] names the tools its agent sees and owns a private state
//!   folder; [`LoadedConfig`] reads the config file and the profiles.
//! - **Host and frontends**: a [`Host`] is the state a running host's frontends share;
//!   [`serve`] / [`Host::start`] run one with its control socket ([`ControlSocket`],
//!   typed [`ControlRequest`]s); [`McpServer`] serves a profile's tools to MCP clients;
//!   [`agent`] runs the host's own agent turns.
//! - **Isolation hooks** ([`worker`]): a program that runs plugins in workers
//!   ([`IsolationPolicy`]) calls [`worker::run`] when it is started as one (the `toolhost`
//!   binary's `__worker` mode) and [`worker::end_all`] on its way out.
//!
//! That is the whole surface: the nouns above, their settings and their errors, plus
//! [`escape_controls`] for anyone printing plugin text to a terminal. The OS helpers
//! (private state files, resource limits, sandbox and containment internals) stay inside
//! the crate, and the `toolhost` binary (the `toolhost-cli` package) uses nothing but this
//! surface. The config file's schema as read is in [`raw`].
//!
//! ```no_run
//! use std::sync::Arc;
//! use toolhost::{AutoApprove, CallDoor, CallSettings, Caller, Frontend, LoadedPlugin,
//!                PluginLoader, ToolCall, fixed_profile};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let loader = PluginLoader::new()?;
//! let report = loader.load_dirs(&["plugins-dir".into()]);
//! for e in &report.errors {
//!     eprintln!("{e}");
//! }
//! let (registry, problems) = LoadedPlugin::registry(&report.plugins);
//! let tools = fixed_profile("default", Arc::new(registry), None);
//! let door = CallDoor::new(&CallSettings::default(), tools, Arc::new(AutoApprove));
//! let request = door.request(Caller::new(Frontend::Library));
//! let call = ToolCall::new("1", "time_now", serde_json::json!({"timezone": "UTC"}));
//! let result = door.call(&request, call).await;
//! println!("{}", result.output);
//! # Ok(()) }
//! ```

pub mod agent;
mod approval_relay;
pub mod audit;
mod config;
mod frontends;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod host;
mod metrics;
mod plugins;
mod serve;
pub mod state;
mod sys;
mod text;
mod upstream;

pub use approval_relay::{ApprovalRelay, RelayError, RelayedQuestion};
pub use config::{
    AgentSettings, ChildSettings, ConfigError, ContextError, ContextSettings,
    DEFAULT_SYSTEM_PROMPT, DEFAULT_TERMINAL_APPROVAL, LoadedConfig, MAX_CONFIG_FILE_SIZE,
    McpProtocol, McpServerSettings, McpSettings, McpTransport, MetricsSettings, ModelSettings,
    OAuthSettings, Profile, ProfileView, ReloadSettings, SecondsError, WithoutElicitation,
    WorkspaceSettings, config_file_schema, default_config_path, default_plugin_dir,
    positive_seconds, profile_file_schema,
};
pub use frontends::control::{
    AnswerParams, ApprovalPrompt, ApprovalQuestion, ApprovalReply, CallParams, CallReply,
    ControlClient, ControlError, ControlFault, ControlHandler, ControlOutcome, ControlPeer,
    ControlRequest, ControlResponse, ControlResult, ControlSocket, call_error_code,
    default_control_path, trust_service_user,
};
pub use frontends::mcp::http::{
    HttpAuth, HttpLimits, HttpOptions, MAX_SCRAPE_CONNECTIONS, SCRAPE_DEADLINE, TlsFiles,
    bind_http, bind_metrics, check_http_options,
};
pub use frontends::mcp::tokens::{
    AuthFailure, NewToken, TokenAuthenticator, TokenError, TokenFileError, TokenIdentity,
    TokenRecord, TokenScope, TokenStore, UnknownScope,
};
pub use frontends::mcp::{
    ClientStdio, McpClients, McpOptions, McpServeError, McpServer, McpSession,
};
pub use host::{
    ClientDirectory, ConnectedClient, Host, HostStatus, ProfileStatus, Readiness, ReloadError,
    ServeConfig, UnavailableTool, plugin_set_hash,
};
pub use metrics::{
    CLASSIC_METRICS_CONTENT_TYPE, CallMetrics, METRICS_CONTENT_TYPE, MetricsFormat, ScrapeFacts,
};
pub use plugins::catalog::status::{
    CatalogStatus, LoadErrorStatus, PluginStatus, RegistryEvent, RescanReport,
};
pub use plugins::catalog::watch::{PluginWatcher, WatchConfig, WatchError};
pub use plugins::catalog::{CatalogConfig, PluginCatalog};
pub use plugins::descriptions::{DescriptionRule, Mention, WELL_KNOWN_TOOLS};
pub use plugins::isolation::supervisor::WorkerStatus;
pub use plugins::isolation::{IsolationMode, IsolationPolicy};
pub use plugins::load::error::{LoadErrorKind, PluginLoadError, RustLibraryKind};
pub use plugins::load::index::{INDEX_FILE, IndexError, LoadReportIndexed, PluginIndex};
pub use plugins::load::loader::{
    DEFAULT_MAX_FILE_SIZE, FileFacts, LIBRARY_EXTENSION, LoadPolicy, LoadReport, PluginLoader,
};
pub use plugins::load::trust::{
    Pin, PublisherEntry, TrustError, TrustMode, TrustPolicy, TrustRefusal, TrustStore,
};
pub use plugins::run::call_pool::StuckCall;
pub use plugins::run::plugin_tool::LoadedPlugin;
pub use plugins::settings::PluginSettings;
pub use serve::{RunningHost, ServeError, serve};
pub use state::{SharedState, StateError, StateSettings};
pub use sys::confinement::{Confinement, Protection};
pub use sys::containment::ContainmentMode;
pub use sys::dirs::{
    SYSTEM_PLUGIN_DIR, SYSTEM_PLUGIN_DIR_VAR, SystemLayout, system_layout, use_system_layout,
};
pub use sys::permissions::{Guarded, PermissionProblem};
pub use sys::process_env::{ProcessEnvError, publish_protected_state};
pub use text::{escape_controls, for_terminal};
pub use toolhost_calls::approvals::{
    APPROVALS_FILE, ApprovalFile, ApprovalFiles, ApprovalsError, LastingApproval,
};
pub use toolhost_calls::availability::{Availability, Unavailable};
pub use toolhost_calls::context::{
    CallContext, Caller, CallerChannel, ChildTurnError, ChildTurnService, Frontend, HostRequests,
    ProfileRequests, TurnIdentity, TurnServices,
};
pub use toolhost_calls::decision::{ApprovalScope, Decision};
pub use toolhost_calls::details::{
    ContentOmitted, DetailError, Details, FullOutput, HostDetail, StructuredOmitted, ToolFailed,
};
pub use toolhost_calls::dispatcher::{
    CallFailure, CallObserver, DispatchConfig, Limits, ObservedCall, ObserverWait, Plan, ToolCall,
    UnknownTool, admit, execute,
};
pub use toolhost_calls::door::{
    CallDoor, CallRequest, CallSettings, FixedProfile, ProfileScope, Profiles, UnknownProfile,
    fixed_profile,
};
pub use toolhost_calls::outputs::{
    Budget, Cut, DEFAULT_CONTEXT, DEFAULT_READ_LINES, Excerpt, MIN_MAX_CHARS, OutputError,
    OutputMeta, OutputSettings, OutputStore, Owner, PruneReport, READ_OUTPUT_TOOL, RangeError,
    ReadRange, Rest, Size, cut, is_id,
};
pub use toolhost_calls::policy::{
    ApprovalAnswer, ApprovalKey, ApprovalPolicy, ApprovalRequest, Approver, AutoApprove,
    CallPolicy, LastingApprovals, NobodyToAsk, OverrideOutcome, ReadOnlyPolicy, Refusal,
    RiskOverride, apply_risk_overrides,
};
pub use toolhost_calls::profile_dirs::{Folder, ProfileDirs};
pub use toolhost_calls::read_output::with_read_output;
pub use toolhost_calls::registry::{
    InvalidArguments, Keeps, RegisteredTool, RegistryError, Superseded, ToolRegistry,
    is_valid_tool_name, same_name,
};
pub use toolhost_calls::result::{CallErrorKind, ToolResult};
pub use toolhost_calls::stats::{CallStats, ToolStatsSnapshot};
pub use toolhost_calls::tool::{
    Arguments, DynTool, Requirements, Risk, ToolError, ToolOrigin, ToolOutput, ToolSpec,
};
pub use toolhost_plugin_api::{ABI_VERSION, API_VERSION};
pub use toolhost_sandbox::{SandboxMode, SandboxRules, kernel_abi as sandbox_abi};
pub use upstream::{McpServerStatus, McpServers, McpServersError, ServerState};

/// The two process hooks of a program that runs plugins in worker processes.
pub mod worker {
    /// Serves as a plugin worker on the socket `fd` (what `toolhost __worker` runs; the
    /// host starts workers by running its own executable so).
    pub use crate::plugins::isolation::worker::run;
    /// Ends every plugin worker this process started and everything they started, what
    /// its stdio MCP servers started out of their process groups, and every child left
    /// that carries toolhost's mark (a daemon that cleared its environment): call it on
    /// the way out.
    pub fn end_all() {
        crate::sys::containment::end_all_workers();
        crate::sys::tagged::end_server_stragglers();
        crate::sys::containment::kill_marked_children();
    }
    /// Keeps programs of the same user (commands a plugin runs among them) from reading
    /// this process's environment and memory through `/proc`: call it first thing in a
    /// host's `main` (never in a worker's).
    pub use crate::sys::process::forbid_same_user_inspection;
}

/// The config file's schema as read, before it is checked and resolved into the settings
/// everything else uses (a [`LoadedConfig`] keeps it to itself): the reference for the
/// file's keys.
pub mod raw {
    pub use crate::config::{
        RawAgent, RawApproval, RawAvailability, RawCalls, RawChildren, RawConfig, RawIsolation,
        RawMcp, RawMetrics, RawModel, RawOutput, RawPlugins, RawProfile, RawProfileOutput,
        RawReload, RawTool, RawTrust, RawWorkspace,
    };
}

/// The front page's Rust example (a `#[tool]` function and its export), compiled as a
/// doctest: the README promises it builds.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;
