//! The config file's schema: [`RawConfig`] and one struct per section, each key with
//! its default; serde refuses unknown keys and wrong types (with the line).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use crate::plugins::isolation::IsolationMode;
use crate::plugins::load::loader::DEFAULT_MAX_FILE_SIZE;
use crate::plugins::load::trust::{PublisherEntry, TrustMode};
use crate::sys::sandbox::SandboxMode;
use toolhost_calls::tool::Risk;

/// Writes a section a profile may override once: its keys are listed here and nowhere
/// else, and the merge (each key a profile gives replaces the host config's) follows from
/// them, so a new key cannot be left out of it.
///
/// `options`: the section's keys are all optional (unset means the built-in default,
/// resolved later) and a profile writes the same section. `with profile form`: the
/// section has its defaults; the profile's form, every key optional, is generated beside
/// it with `has_any`.
macro_rules! overridable_section {
    (
        options
        $(#[$meta:meta])*
        pub struct $raw:ident {
            $( $(#[$fmeta:meta])* pub $field:ident : Option<$ty:ty>, )*
        }
    ) => {
        $(#[$meta])*
        pub struct $raw {
            $( $(#[$fmeta])* pub $field: Option<$ty>, )*
        }

        impl $raw {
            /// These settings with `profile`'s keys in their place.
            pub fn overridden(&self, profile: &$raw) -> $raw {
                $raw {
                    $( $field: Clone::clone(&profile.$field).or_else(|| Clone::clone(&self.$field)), )*
                }
            }
        }
    };
    (
        with profile form $(#[$pmeta:meta])* $profile:ident;
        $(#[$meta:meta])*
        pub struct $raw:ident {
            $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty, )*
        }
    ) => {
        $(#[$meta])*
        pub struct $raw {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        $(#[$pmeta])*
        #[derive(Debug, Clone, Default, Deserialize)]
        #[serde(deny_unknown_fields, default)]
        pub struct $profile {
            $(
                #[doc = concat!("See [`", stringify!($raw), "::", stringify!($field), "`].")]
                pub $field: Option<$ty>,
            )*
        }

        impl $profile {
            /// Whether the profile sets any key.
            pub fn has_any(&self) -> bool {
                false $( || self.$field.is_some() )*
            }
        }

        impl $raw {
            /// These settings with `profile`'s keys in their place.
            pub fn overridden(&self, profile: &$profile) -> $raw {
                $raw {
                    $( $field: Clone::clone(&profile.$field).unwrap_or_else(|| Clone::clone(&self.$field)), )*
                }
            }
        }
    };
}

/// The host's config file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// Plugin directories, in load order.
    #[serde(default)]
    pub plugin_dirs: Vec<PathBuf>,
    /// Where profiles live: `<profiles_dir>/<name>/config.toml`.
    pub profiles_dir: Option<PathBuf>,
    /// The profile used when none is named.
    #[serde(default = "default_profile_name")]
    pub default_profile: String,
    /// The control socket of `toolhost serve`.
    pub control_socket: Option<PathBuf>,
    /// Where state lives (sessions, notes, kept outputs, tokens, trust pins):
    /// `$XDG_STATE_HOME/toolhost` unless set; a profile's is `profiles/<name>/` below it.
    pub state_dir: Option<PathBuf>,
    /// Call time limits.
    #[serde(default)]
    pub calls: RawCalls,
    /// Approval settings.
    #[serde(default)]
    pub approval: RawApproval,
    /// Availability checks.
    #[serde(default)]
    pub availability: RawAvailability,
    /// Hot reload.
    #[serde(default)]
    pub reload: RawReload,
    /// Which plugin files are considered at all.
    #[serde(default)]
    pub plugins: RawPlugins,
    /// Trust modes: pinned or signed plugin files only.
    #[serde(default)]
    pub trust: RawTrust,
    /// Which plugins run in worker processes, and how workers are confined.
    #[serde(default)]
    pub isolation: RawIsolation,
    /// Named tool lists, used in profiles as `"@name"`.
    #[serde(default)]
    pub toolsets: BTreeMap<String, Vec<String>>,
    /// Per-tool settings: risk overrides.
    #[serde(default)]
    pub tools: BTreeMap<String, RawTool>,
    /// The MCP frontend (`toolhost serve --mcp`).
    #[serde(default)]
    pub mcp: RawMcp,
    /// The Prometheus endpoint (`toolhost serve --metrics`).
    #[serde(default)]
    pub metrics: RawMetrics,
    /// The model the agent talks to (`toolhost chat` / `run`).
    #[serde(default)]
    pub model: RawModel,
    /// The agent's limits.
    #[serde(default)]
    pub agent: RawAgent,
    /// The output budget and the kept outputs (a profile may override each key).
    #[serde(default)]
    pub output: RawOutput,
    /// The workspace the file and command tools are confined to (a profile may override
    /// each key).
    #[serde(default)]
    pub workspace: RawWorkspace,
    /// The audit log: one line per call, chained by hashes.
    #[serde(default)]
    pub audit: RawAudit,
    /// MCP servers whose tools the host serves beside its plugins'.
    #[serde(default)]
    pub mcp_servers: Vec<super::mcp_servers::RawMcpServer>,
}

/// `[audit]`: the audit log (one JSON line per call, each carrying the sha256 of the line
/// before it).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawAudit {
    /// Whether calls are recorded (default true).
    pub enabled: bool,
    /// The log file (default `audit.jsonl` in the state directory,
    /// `$XDG_STATE_HOME/toolhost`).
    pub file: Option<PathBuf>,
    /// Whether each line carries the call's arguments (default false: only their sha256).
    pub include_arguments: bool,
    /// The size at which the file is rotated (`audit.jsonl.1`, ...), bytes; 0: never.
    pub max_bytes: u64,
    /// How many rotated files are kept.
    pub keep: usize,
    /// Lines waiting for the writer at most; past it, calls wait for the writer.
    pub queue: usize,
    /// Whether a checkpoint of each batch of lines (its last line's seq and sha256) goes
    /// to syslog, a copy the host cannot rewrite later (default false).
    pub syslog: bool,
    /// The syslog socket (default `/dev/log`).
    pub syslog_socket: Option<PathBuf>,
}

impl Default for RawAudit {
    fn default() -> Self {
        let d = crate::audit::AuditSettings::default();
        RawAudit {
            enabled: true,
            file: None,
            include_arguments: d.include_arguments,
            max_bytes: d.max_bytes,
            keep: d.keep,
            queue: d.queue,
            syslog: false,
            syslog_socket: None,
        }
    }
}

overridable_section! {
    options
    /// `[workspace]`: the folders the workspace tools may read and write beneath, and the
    /// rules for the commands and fetches they make. In a profile's config.toml, each key
    /// given replaces the host config's.
    #[derive(Debug, Clone, Default, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    pub struct RawWorkspace {
        /// The roots (relative paths are relative to the file that sets them; `~/` is the
        /// home folder). None: no workspace.
        pub roots: Option<Vec<PathBuf>>,
        /// Commands may use the network (default false).
        pub allow_network: Option<bool>,
        /// `run_command` takes shell command lines (default false: a program and arguments).
        pub shell: Option<bool>,
        /// Programs `run_command` refuses, besides the built-in list.
        pub deny_programs: Option<Vec<String>>,
        /// Environment variables passed to commands besides the built-in allowlist.
        pub env: Option<Vec<String>>,
        /// A command's time limit, seconds (default 120).
        pub command_timeout_secs: Option<u64>,
        /// `fetch_url` may reach loopback, private, link-local and metadata addresses
        /// (default false).
        pub allow_private_addresses: Option<bool>,
        /// Commands may make Unix-domain sockets (default false: the seccomp filter refuses
        /// them, so no command reaches the host's control socket or another local service).
        pub allow_unix_sockets: Option<bool>,
    }
}

overridable_section! {
    with profile form
    /// A profile's `[output]`: each key given replaces the host config's.
    RawProfileOutput;
    /// `[output]`: how much text one result may carry, and how long cut outputs are kept.
    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    pub struct RawOutput {
        /// The most characters of one result's text; 0: no limit (at least 1000 otherwise).
        pub max_chars: usize,
        /// The most lines of one result's text; 0: no limit.
        pub max_lines: usize,
        /// Days a cut output's full text is kept; 0: kept regardless of age.
        pub keep_days: f64,
        /// The most MiB of kept outputs per profile (the oldest go first); 0: no limit.
        pub keep_mb: u64,
        /// The most characters an MCP client may raise its limit to with
        /// `_meta["anthropic/maxResultSizeChars"]`; 0: clients cannot change it.
        pub mcp_max_chars_ceiling: usize,
        /// Whether profiles get the `read_output` tool.
        pub read_output: bool,
    }
}

impl Default for RawOutput {
    /// The resolved defaults (`OutputSettings::default`, written once), as the file says
    /// them.
    fn default() -> Self {
        let d = toolhost_calls::outputs::OutputSettings::default();
        RawOutput {
            max_chars: d.budget.max_chars,
            max_lines: d.budget.max_lines,
            keep_days: d.keep_for.map_or(0.0, |k| k.as_secs_f64() / 86_400.0),
            keep_mb: d.keep_bytes >> 20,
            mcp_max_chars_ceiling: d.max_chars_ceiling,
            read_output: d.read_output,
        }
    }
}

/// `[model]`: an OpenAI-compatible Chat Completions server.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawModel {
    /// e.g. `https://api.openai.com/v1` or `http://localhost:11434/v1`
    /// (`TOOLHOST_MODEL_BASE_URL` overrides it).
    pub base_url: Option<String>,
    /// The model name (`TOOLHOST_MODEL` overrides it).
    pub model: Option<String>,
    /// The environment variable holding the API key (`TOOLHOST_API_KEY` always wins).
    pub api_key_env: String,
    /// Seconds one model request may take.
    pub timeout_secs: f64,
    /// Retries of a 429, a 5xx or a connection failure.
    pub max_retries: u32,
    /// Ask for streamed answers (`TOOLHOST_MODEL_STREAM` overrides it).
    pub stream: bool,
    /// The model's context window, in tokens (`TOOLHOST_MODEL_CONTEXT_WINDOW` overrides
    /// it): conversations are compacted to fit it.
    pub context_window: u64,
    /// Tokens of the window left for the answer (default: an eighth of the window;
    /// `TOOLHOST_MODEL_RESERVE_OUTPUT_TOKENS` overrides it).
    pub reserve_output_tokens: Option<u64>,
}

/// `[model] context_window` when neither the file nor the environment sets it.
pub(super) const DEFAULT_CONTEXT_WINDOW: u64 = 32_768;

impl Default for RawModel {
    fn default() -> Self {
        RawModel {
            base_url: None,
            model: None,
            api_key_env: "OPENAI_API_KEY".to_owned(),
            timeout_secs: 120.0,
            max_retries: 3,
            stream: true,
            context_window: DEFAULT_CONTEXT_WINDOW,
            reserve_output_tokens: None,
        }
    }
}

/// `[agent]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawAgent {
    /// The most model calls in one turn.
    pub max_iterations: u32,
    /// Child turns (`delegate_task`).
    pub children: RawChildren,
}

impl Default for RawAgent {
    fn default() -> Self {
        RawAgent {
            max_iterations: 20,
            children: RawChildren::default(),
        }
    }
}

/// `[agent.children] child_timeout_seconds` when the file does not set it.
pub(super) const DEFAULT_CHILD_TIMEOUT_SECS: u64 = 300;

/// `[agent.children]`. Four keys have an older name that still works (`max_depth`,
/// `max_concurrent`, `timeout_secs`; `exclude` and `delegators` keep theirs); a table that
/// sets a key under both names is refused ([`RawChildren::both_spellings`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawChildren {
    /// How deep turns may nest (default 2): a turn at this depth starts no children.
    pub max_spawn_depth: Option<u32>,
    /// The old name of `max_spawn_depth`.
    pub max_depth: Option<u32>,
    /// How many delegating calls run children at once per depth (default 3), and how
    /// many tasks of one call run at once.
    pub max_concurrent_children: Option<usize>,
    /// The old name of `max_concurrent_children`.
    pub max_concurrent: Option<usize>,
    /// Seconds one child turn may take once it runs (default 300).
    pub child_timeout_seconds: Option<f64>,
    /// The old name of `child_timeout_seconds`.
    pub timeout_secs: Option<f64>,
    /// Tools a leaf child never gets (an orchestrator keeps `delegate_task`).
    pub exclude: Vec<String>,
    /// Tools whose calls wait for child turns, each with the most child turns one of its
    /// calls starts: such a call may last as long as that many children
    /// (`max_concurrent_children` at a time).
    pub delegators: BTreeMap<String, u32>,
    /// A background batch reports per unit (tasks sharing a `group`, each ungrouped task
    /// alone) instead of once for the whole batch.
    pub independent_completions: bool,
    /// Children may be orchestrators (keep `delegate_task`).
    pub orchestrator_enabled: bool,
    /// Children's calls that need approval are approved without asking.
    pub subagent_auto_approve: bool,
    /// The most model calls in one child turn (default: `[agent] max_iterations`).
    pub max_iterations: Option<u32>,
}

impl Default for RawChildren {
    fn default() -> Self {
        RawChildren {
            max_spawn_depth: None,
            max_depth: None,
            max_concurrent_children: None,
            max_concurrent: None,
            child_timeout_seconds: None,
            timeout_secs: None,
            exclude: ["delegate_task", "clarify", "memory"]
                .map(str::to_owned)
                .to_vec(),
            // The shipped delegate_task plugin starts at most 5 children (its `MAX_TASKS`,
            // its schema's `maxItems`).
            delegators: BTreeMap::from([("delegate_task".to_owned(), 5)]),
            independent_completions: false,
            orchestrator_enabled: false,
            subagent_auto_approve: false,
            max_iterations: None,
        }
    }
}

impl RawChildren {
    /// A key set under both its name and its old name, as `(name, old name)`.
    pub fn both_spellings(&self) -> Option<(&'static str, &'static str)> {
        if self.max_spawn_depth.is_some() && self.max_depth.is_some() {
            Some(("max_spawn_depth", "max_depth"))
        } else if self.max_concurrent_children.is_some() && self.max_concurrent.is_some() {
            Some(("max_concurrent_children", "max_concurrent"))
        } else if self.child_timeout_seconds.is_some() && self.timeout_secs.is_some() {
            Some(("child_timeout_seconds", "timeout_secs"))
        } else {
            None
        }
    }

    /// `max_spawn_depth` (or its old name), default 2.
    pub fn spawn_depth(&self) -> u32 {
        self.max_spawn_depth.or(self.max_depth).unwrap_or(2)
    }

    /// `max_concurrent_children` (or its old name), default 3, at least 1.
    pub fn concurrent_children(&self) -> usize {
        self.max_concurrent_children
            .or(self.max_concurrent)
            .unwrap_or(3)
            .max(1)
    }

    /// `child_timeout_seconds` (or its old name) as written, with the name it was
    /// written under; the default when neither is set.
    pub fn timeout(&self) -> (&'static str, f64) {
        match (self.child_timeout_seconds, self.timeout_secs) {
            (Some(secs), _) => ("agent.children.child_timeout_seconds", secs),
            (None, Some(secs)) => ("agent.children.timeout_secs", secs),
            (None, None) => (
                "agent.children.child_timeout_seconds",
                DEFAULT_CHILD_TIMEOUT_SECS as f64,
            ),
        }
    }
}

fn default_profile_name() -> String {
    "default".to_owned()
}

impl Default for RawConfig {
    fn default() -> Self {
        RawConfig {
            plugin_dirs: Vec::new(),
            profiles_dir: None,
            default_profile: default_profile_name(),
            control_socket: None,
            state_dir: None,
            calls: RawCalls::default(),
            approval: RawApproval::default(),
            availability: RawAvailability::default(),
            reload: RawReload::default(),
            plugins: RawPlugins::default(),
            trust: RawTrust::default(),
            isolation: RawIsolation::default(),
            toolsets: BTreeMap::new(),
            tools: BTreeMap::new(),
            mcp: RawMcp::default(),
            metrics: RawMetrics::default(),
            model: RawModel::default(),
            agent: RawAgent::default(),
            output: RawOutput::default(),
            workspace: RawWorkspace::default(),
            audit: RawAudit::default(),
            mcp_servers: Vec::new(),
        }
    }
}

/// `[metrics]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawMetrics {
    /// Serve Prometheus text at `http://ADDR/metrics` (`--metrics ADDR` wins).
    pub listen: Option<String>,
    /// Ask scrapers for a bearer token (from `toolhost token`) on a loopback address too;
    /// off loopback one is always needed.
    pub require_token: bool,
}

/// How long a call waits for a terminal's answer by default (`[mcp]
/// terminal_approval_secs`).
pub const DEFAULT_TERMINAL_APPROVAL: std::time::Duration = std::time::Duration::from_secs(120);

/// How long an MCP client has to answer a question put to it (`[mcp]
/// client_answer_secs`): an approval, a plugin's question or sampling request.
pub(crate) const DEFAULT_CLIENT_ANSWER: std::time::Duration =
    std::time::Duration::from_secs(15 * 60);

/// `[mcp]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawMcp {
    /// What happens to a call that needs approval when the MCP client cannot be asked
    /// (it does not support elicitation).
    pub without_elicitation: WithoutElicitation,
    /// With `without_elicitation = "terminal"`: seconds a call waits for a terminal's
    /// answer before it is refused.
    pub terminal_approval_secs: f64,
    /// Seconds an MCP client has to answer what it is asked during a call (an approval,
    /// a plugin's question or sampling request): an elicitation it is sent, or the
    /// input-required result a 2026-07-28 client answers by calling again.
    pub client_answer_secs: f64,
    /// Host names (or `host:port`) HTTP requests may name in their `Host` header, besides
    /// the loopback names, which are always allowed (DNS-rebinding protection).
    pub allowed_hosts: Vec<String>,
    /// Browser origins (`https://app.example.com:443`, `http://localhost:*`) allowed to
    /// call besides the server's own; requests with any other `Origin` get 403.
    pub allowed_origins: Vec<String>,
    /// The bearer-token file (default: `tokens.json` in the state directory).
    pub tokens_file: Option<PathBuf>,
    /// Connections served at once; past it the oldest idle connection is closed, and when
    /// every connection is busy new ones wait.
    pub max_connections: usize,
    /// Seconds a new connection has to send its first request's headers (and a TLS
    /// handshake), and a request to send its body.
    pub header_read_timeout_secs: f64,
    /// Seconds an idle keep-alive connection is kept open.
    pub idle_timeout_secs: f64,
    /// Live MCP sessions (handshake clients); past it the oldest idle one is ended.
    pub max_sessions: usize,
    /// Live MCP sessions of one token; past it that token's own oldest idle session is
    /// ended, never another token's.
    pub max_sessions_per_token: usize,
    /// Seconds a session without requests or open streams lives.
    pub session_idle_secs: f64,
    /// The largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// OAuth 2.1 access tokens from an authorization server, beside the static tokens
    /// (`[mcp.oauth]`).
    pub oauth: Option<RawOAuth>,
}

/// `[mcp.oauth]`: toolhost as an OAuth 2.1 resource server (MCP authorization,
/// RFC 9728 metadata, RFC 8707 audience, RFC 9068 JWT access tokens).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOAuth {
    /// The authorization server's issuer identifier (the `iss` of its tokens; its
    /// metadata is found under it).
    pub issuer: String,
    /// This server's resource identifier: the audience (`aud`) its tokens must name, and
    /// the `resource` of its protected-resource metadata (`https://mcp.example.com/mcp`).
    pub resource: String,
    /// Where the issuer's signing keys are; default: the `jwks_uri` of its metadata.
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// Scopes every token must carry (all of them).
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Scope to profile: a token with that scope is served that profile's tools.
    #[serde(default)]
    pub profiles: std::collections::BTreeMap<String, String>,
    /// Signature algorithms accepted (asymmetric only).
    #[serde(default = "default_oauth_algorithms")]
    pub algorithms: Vec<String>,
    /// Seconds of clock skew allowed on `exp` and `nbf`.
    #[serde(default = "default_oauth_leeway")]
    pub leeway_secs: u64,
}

/// The signature algorithms `[mcp.oauth]` may accept (JOSE names): asymmetric only.
pub(crate) const OAUTH_ALGORITHMS: [&str; 9] = [
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

fn default_oauth_algorithms() -> Vec<String> {
    OAUTH_ALGORITHMS.map(str::to_owned).to_vec()
}

fn default_oauth_leeway() -> u64 {
    60
}

impl Default for RawMcp {
    /// The resolved defaults (`HttpLimits::default`), as the file says them.
    fn default() -> Self {
        let limits = super::http_limits::HttpLimits::default();
        RawMcp {
            without_elicitation: WithoutElicitation::default(),
            terminal_approval_secs: DEFAULT_TERMINAL_APPROVAL.as_secs_f64(),
            client_answer_secs: DEFAULT_CLIENT_ANSWER.as_secs_f64(),
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            tokens_file: None,
            max_connections: limits.max_connections,
            header_read_timeout_secs: limits.header_read_timeout.as_secs_f64(),
            idle_timeout_secs: limits.idle_timeout.as_secs_f64(),
            max_sessions: limits.max_sessions,
            max_sessions_per_token: limits.max_sessions_per_token,
            session_idle_secs: limits.session_idle.as_secs_f64(),
            max_body_bytes: limits.max_body_bytes,
            oauth: None,
        }
    }
}

/// `[mcp] without_elicitation`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WithoutElicitation {
    /// Refuse the call with a message saying how to allow it (the default).
    #[default]
    Refuse,
    /// Run it: the operator trusts the client to ask its user (most clients ask before
    /// every tool call).
    Approve,
    /// Wait for an operator to answer it at a terminal on the control socket (`toolhost
    /// approvals pending`, `toolhost approvals answer ID`), `terminal_approval_secs` at
    /// most; unanswered, it is refused.
    Terminal,
}

/// `[calls]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawCalls {
    /// Seconds one call may run.
    pub timeout_secs: f64,
    /// Seconds an interactive call may run.
    pub interactive_timeout_secs: f64,
}

impl Default for RawCalls {
    /// The resolved defaults (`DispatchConfig::default`), as the file says them.
    fn default() -> Self {
        let d = toolhost_calls::dispatcher::DispatchConfig::default();
        RawCalls {
            timeout_secs: d.timeout.as_secs_f64(),
            interactive_timeout_secs: d.interactive_timeout.as_secs_f64(),
        }
    }
}

/// `[approval]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawApproval {
    /// Whether a person may approve a tool for the rest of the session.
    pub remember_for_session: bool,
}

impl Default for RawApproval {
    /// The resolved default (`CallSettings::default`).
    fn default() -> Self {
        RawApproval {
            remember_for_session: toolhost_calls::door::CallSettings::default().remember_approvals,
        }
    }
}

/// `[availability]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawAvailability {
    /// How long an availability answer is cached, in seconds.
    pub cache_secs: f64,
}

impl Default for RawAvailability {
    /// The resolved default (`CallSettings::default`), in seconds.
    fn default() -> Self {
        RawAvailability {
            cache_secs: toolhost_calls::door::CallSettings::default()
                .availability_ttl
                .as_secs_f64(),
        }
    }
}

/// `[reload]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawReload {
    /// Watch the plugin directories (`toolhost serve`).
    pub watch: bool,
    /// Reloads after which status recommends a restart.
    pub max_generations: u64,
    /// Quiet time (seconds) the watcher waits for after file events before it rescans.
    pub debounce_secs: f64,
    /// Rescan at once when a plugin file arrives complete (renamed in, or closed after
    /// writing with whole ELF headers), without the debounce.
    pub immediate: bool,
}

impl Default for RawReload {
    fn default() -> Self {
        // The resolved defaults (`ReloadSettings`, and the watcher's `WatchConfig`).
        let reload = super::reload::ReloadSettings::default();
        let watch = crate::plugins::catalog::watch::WatchConfig::default();
        RawReload {
            watch: reload.watch,
            max_generations: reload.max_generations,
            debounce_secs: watch.debounce.as_secs_f64(),
            immediate: watch.immediate,
        }
    }
}

/// `[plugins]`: its own keys, and one `[plugins.NAME.settings]` table per plugin. Read by
/// hand (serde cannot refuse unknown keys and take a map of the rest at once): every key
/// that is not one of its own must be a plugin's table with only `settings`.
#[derive(Debug, Clone)]
pub struct RawPlugins {
    /// Refuse plugin files (and their directories, and symlink targets) that a user
    /// other than the host's or root could change. `false` is for development only and is
    /// logged as a warning.
    pub strict_permissions: bool,
    /// Plugin files larger than this (bytes) are refused before they are read.
    pub max_file_size: u64,
    /// How many plugin files load at once (start-up, rescans): 0 for the cores available.
    pub load_threads: usize,
    /// `[plugins.NAME.settings]`, by plugin name, as JSON: what `ctx.settings()` reads.
    pub settings: BTreeMap<String, serde_json::Value>,
}

impl Default for RawPlugins {
    fn default() -> Self {
        RawPlugins {
            strict_permissions: true,
            max_file_size: DEFAULT_MAX_FILE_SIZE,
            load_threads: 0,
            settings: BTreeMap::new(),
        }
    }
}

impl<'de> Deserialize<'de> for RawPlugins {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let table = toml::Table::deserialize(deserializer)?;
        let mut plugins = RawPlugins::default();
        for (key, value) in table {
            let wrong = |e: toml::de::Error| D::Error::custom(format!("`plugins.{key}`: {e}"));
            match key.as_str() {
                "strict_permissions" => {
                    plugins.strict_permissions = value.try_into().map_err(wrong)?
                }
                "max_file_size" => plugins.max_file_size = value.try_into().map_err(wrong)?,
                "load_threads" => plugins.load_threads = value.try_into().map_err(wrong)?,
                _ => {
                    let settings =
                        super::plugin_settings::from_toml(&key, value).map_err(D::Error::custom)?;
                    plugins.settings.insert(key, settings);
                }
            }
        }
        Ok(plugins)
    }
}

/// `[isolation]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawIsolation {
    /// `in-process` (default) or `process`: where plugins not named below run.
    pub default: IsolationMode,
    /// Per plugin name (or file name): `process` or `in-process`.
    pub plugins: BTreeMap<String, IsolationMode>,
    /// `off`, `best-effort` (default) or `required`: the Landlock sandbox of workers.
    pub sandbox: SandboxMode,
    /// Paths every worker may read, besides its plugin file and the system libraries.
    pub read_paths: Vec<PathBuf>,
    /// Paths every worker may write, besides its own profile's state folder.
    pub write_paths: Vec<PathBuf>,
    /// TCP for every worker; otherwise only plugins with a `network` tool get it.
    pub allow_network: bool,
    /// A worker's memory limit, MiB (its cgroup's for all its processes, and the address
    /// space each process may add, `RLIMIT_AS`); 0 for none.
    pub memory_limit_mb: u64,
    /// Tasks (processes and threads) a worker and what it starts may have; 0 for none.
    pub max_processes: u64,
    /// `auto` (default), `cgroup`, `pid-namespace` or `process-group`: how a worker's
    /// processes are kept together and ended with it.
    pub containment: crate::sys::containment::ContainmentMode,
    /// Plugins (by name or file name) whose workers may use Unix-domain sockets.
    pub unix_sockets: Vec<String>,
    /// A worker's open-file limit; 0 keeps the host's.
    pub open_files: u64,
    /// More crashes than this within `crash_window_secs` quarantine a plugin.
    pub max_crashes: u32,
    /// See `max_crashes`.
    pub crash_window_secs: u64,
    /// A call that ignores its cancel signal this long (ms) gets its worker killed.
    pub kill_after_cancel_ms: u64,
    /// Seconds a worker may take to load its plugin.
    pub start_timeout_secs: u64,
}

impl Default for RawIsolation {
    /// The resolved defaults (`IsolationPolicy::default`), as the file says them.
    fn default() -> Self {
        let d = crate::plugins::isolation::IsolationPolicy::default();
        RawIsolation {
            default: d.default,
            plugins: d.plugins,
            sandbox: d.sandbox,
            read_paths: d.read_paths,
            write_paths: d.write_paths,
            allow_network: d.allow_network,
            memory_limit_mb: d.memory_limit_bytes >> 20,
            max_processes: d.max_processes,
            containment: d.containment,
            unix_sockets: d.unix_sockets,
            open_files: d.open_files,
            max_crashes: d.max_crashes,
            crash_window_secs: d.crash_window.as_secs(),
            kill_after_cancel_ms: u64::try_from(d.kill_after_cancel.as_millis())
                .unwrap_or(u64::MAX),
            start_timeout_secs: d.start_timeout.as_secs(),
        }
    }
}

/// `[trust]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawTrust {
    /// `any` (default), `pinned` or `signed`.
    pub mode: TrustMode,
    /// Minisign public keys whose signatures `signed` mode accepts.
    pub publishers: Vec<PublisherEntry>,
    /// The trust file (pins). Default: `trust.json` in the state directory
    /// (`$XDG_STATE_HOME/toolhost`, else `~/.local/state/toolhost`).
    pub file: Option<PathBuf>,
}

/// `[tools.NAME]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTool {
    /// The risk to use instead of the declared one: read, write, destructive, network
    /// or deny.
    #[serde(default)]
    pub risk: Option<Risk>,
    /// Must be `true` to lower a tool below its declared risk.
    #[serde(default)]
    pub allow_lower: bool,
}

/// A profile's `config.toml` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProfile {
    /// The tools its agent gets (`@toolset` entries allowed); none: every tool.
    pub tools: Option<Vec<String>>,
    /// Its agent's system prompt.
    pub system_prompt: Option<String>,
    /// Documentation for people; not used by the host.
    pub description: Option<String>,
    /// Its own output budget and kept outputs (keys not given: the host config's).
    #[serde(default)]
    pub output: RawProfileOutput,
    /// Its workspace (keys not given: the host config's).
    #[serde(default)]
    pub workspace: RawWorkspace,
}
