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
            $( $(#[doc = $doc:literal])* pub $field:ident : $ty:ty, )*
        }
    ) => {
        $(#[$meta])*
        pub struct $raw {
            $( $(#[doc = $doc])* pub $field: $ty, )*
        }

        $(#[$pmeta])*
        #[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
        #[serde(deny_unknown_fields, default)]
        pub struct $profile {
            $(
                // The host's text for each key: the reference shows it for both files.
                $(#[doc = $doc])*
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
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// Plugin directories, in load order; relative paths are relative to the config file.
    /// Default: `[]` (then `~/.local/share/toolhost/plugins`).
    #[serde(default)]
    pub plugin_dirs: Vec<PathBuf>,
    /// Where profiles live (their `config.toml`). Default: `profiles` next to the config
    /// file.
    pub profiles_dir: Option<PathBuf>,
    /// The profile used when none is named; it may have no directory (then it gets every
    /// tool). Default: `"default"`.
    #[serde(default = "default_profile_name")]
    pub default_profile: String,
    /// The socket of `toolhost serve`. Default: `$XDG_RUNTIME_DIR/toolhost/control.sock`.
    pub control_socket: Option<PathBuf>,
    /// Where state lives: each profile's under `profiles/<name>/` (`state/`, `outputs/`),
    /// tokens, trust pins. See [State and where it lives](../operating/state.md). Default:
    /// `$XDG_STATE_HOME/toolhost`, else `~/.local/state/toolhost`.
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
    /// Which plugin files are considered at all, and each plugin's own settings: a
    /// `[plugins.NAME.settings]` table (any TOML) per plugin, which its tools read as JSON
    /// (`ctx.settings()`); `NAME` is the plugin's name as `toolhost status` shows it, not
    /// its file's. A plugin that declares a settings type has the table checked against it
    /// at load.
    #[serde(default)]
    pub plugins: RawPlugins,
    /// Trust modes: pinned or signed plugin files only.
    #[serde(default)]
    pub trust: RawTrust,
    /// Which plugins run in worker processes, and how workers are confined.
    #[serde(default)]
    pub isolation: RawIsolation,
    /// Named tool lists, used in profiles as `"@NAME"`. Default: unset.
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
    /// Where the state replicas share is kept: files (one host) or PostgreSQL (many
    /// replicas behind a load balancer).
    #[serde(default)]
    pub state: RawState,
}

/// Where a host keeps tokens, lasting approvals, kept outputs, pending approval questions
/// and the audit log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StateBackend {
    /// Files in the state folder (one host).
    #[default]
    Files,
    /// A PostgreSQL database every replica shares.
    Postgres,
}

/// `[state]`: the state many replicas share. See [Running many
/// replicas](../operating/replicas.md).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawState {
    /// `"files"` (one host: tokens, approvals, outputs and the audit log in the state
    /// folder) or `"postgres"` (all of them in the database at `url`, shared by every
    /// replica). Default: `"files"`.
    pub backend: StateBackend,
    /// The PostgreSQL connection URL (`postgres://user@host:5432/db?sslmode=require`);
    /// `TOOLHOST_STATE_URL` in the environment takes its place, to keep a password out of
    /// the file. `sslmode=require` verifies the server's certificate. Default: none.
    pub url: Option<String>,
    /// A PEM file of CA certificates trusted for the database's TLS certificate, beside
    /// the system's (relative paths are relative to the config file). Default: none.
    pub ca_file: Option<PathBuf>,
    /// Database connections each replica keeps at most. Default: `8`.
    pub pool_size: usize,
    /// This replica's name: its audit chain, and what `toolhost status` and the readiness
    /// check show (letters, digits, `.`, `_`, `-`). `TOOLHOST_REPLICA` in the environment
    /// takes its place. Default: the machine's host name.
    pub replica: Option<String>,
}

impl Default for RawState {
    fn default() -> Self {
        RawState {
            backend: StateBackend::Files,
            url: None,
            ca_file: None,
            pool_size: 8,
            replica: None,
        }
    }
}

/// `[audit]`: the audit log (one JSON line per call, each carrying the sha256 of the line
/// before it).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawAudit {
    /// Whether every call is recorded in the audit log. See [The audit
    /// log](../operating/audit-log.md). Default: `true`.
    pub enabled: bool,
    /// The log (relative paths are relative to the config file). Default:
    /// `$XDG_STATE_HOME/toolhost/audit.jsonl`.
    pub file: Option<PathBuf>,
    /// Lines carry the call's arguments; otherwise only the sha256 of their canonical JSON.
    /// Default: `false`.
    pub include_arguments: bool,
    /// The size past which the log is rotated (`audit.jsonl.1` the newest rotated file);
    /// `0`: never. Default: `67108864` (64 MiB).
    pub max_bytes: u64,
    /// Rotated files kept. Default: `5`.
    pub keep: usize,
    /// Lines waiting for the writer thread; past it calls wait for room (lines are never
    /// dropped). Default: `1024`.
    pub queue: usize,
    /// Send a checkpoint of each batch of lines (the last line's `seq` and sha256) to
    /// syslog: a copy the host cannot rewrite later. See [The audit
    /// log](../operating/audit-log.md). Default: `false`.
    pub syslog: bool,
    /// The syslog socket the checkpoints go to (relative paths are relative to the config
    /// file). Default: `/dev/log`.
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
    #[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
    #[serde(deny_unknown_fields, default)]
    pub struct RawWorkspace {
        /// The folders the workspace tools may use (relative to the config file, `~/` for
        /// home; must exist); `--workspace DIR` replaces them for one command. A profile's
        /// roots also join the sandbox of the workers of its plugins whose tools declare
        /// the workspace (`Requirements::workspace()`). See [The workspace
        /// tools](../using/workspace-tools.md). Default: unset.
        pub roots: Option<Vec<PathBuf>>,
        /// `run_command`: commands may use the network. Default: `false`.
        pub allow_network: Option<bool>,
        /// `run_command` takes shell command lines, and shells as the program (otherwise a
        /// program and its arguments only). Default: `false`.
        pub shell: Option<bool>,
        /// `run_command`: programs refused besides the built-in list. Default: `[]`.
        pub deny_programs: Option<Vec<String>>,
        /// `run_command`: environment variables commands get besides the built-in
        /// allowlist (`NAME`, `PREFIX*` or `NAME=value`). Default: `[]`.
        pub env: Option<Vec<String>>,
        /// `run_command`: the most a command may take. Default: `120`.
        pub command_timeout_secs: Option<u64>,
        /// `fetch_url` may reach loopback, private, link-local, metadata and this machine's
        /// own addresses (never documentation, multicast or other special-purpose ranges).
        /// Default: `false`.
        pub allow_private_addresses: Option<bool>,
        /// Commands may make Unix-domain sockets (the seccomp filter refuses them
        /// otherwise); the host's control socket refuses them anyway. Default: `false`.
        pub allow_unix_sockets: Option<bool>,
    }
}

overridable_section! {
    with profile form
    /// A profile's `[output]`: each key given replaces the host config's.
    RawProfileOutput;
    /// `[output]`: how much text one result may carry, and how long cut outputs are kept.
    #[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
    #[serde(deny_unknown_fields, default)]
    pub struct RawOutput {
        /// The most characters of one result's text; 0: no limit (at least 1000 otherwise).
        /// Default: `30000`.
        pub max_chars: usize,
        /// The most lines of one result's text; 0: no limit. Default: `1000`.
        pub max_lines: usize,
        /// Days a cut output's full text is kept; 0: kept regardless of age. Default: `7`.
        pub keep_days: f64,
        /// The most MiB of kept outputs per profile (the oldest go first); 0: no limit.
        /// Default: `256`.
        pub keep_mb: u64,
        /// The most characters an MCP client may raise its limit to with
        /// `_meta["anthropic/maxResultSizeChars"]`; 0: clients cannot change it. Default:
        /// `500000`.
        pub mcp_max_chars_ceiling: usize,
        /// Whether profiles get the `read_output` tool. Default: `true`.
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
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawModel {
    /// An OpenAI-compatible Chat Completions server, e.g. `https://api.openai.com/v1` or
    /// `http://localhost:11434/v1` (Ollama); `TOOLHOST_MODEL_BASE_URL` overrides it.
    /// Default: unset.
    pub base_url: Option<String>,
    /// The model name; `TOOLHOST_MODEL` overrides it. Default: unset.
    pub model: Option<String>,
    /// The environment variable holding the API key (`TOOLHOST_API_KEY` always wins; no
    /// key: none is sent). Default: `"OPENAI_API_KEY"`.
    pub api_key_env: String,
    /// One model request's limit: a whole answer's, or for a streamed one the wait for its
    /// start and then between two of its chunks. Default: `120`.
    pub timeout_secs: f64,
    /// Retries of a 429, a 5xx or a connection failure, with backoff from 0.5 s doubling (a
    /// server's `Retry-After` is honoured, capped at 30 s). Default: `3`.
    pub max_retries: u32,
    /// Ask for streamed answers (`stream: true`); a server that does not stream is read
    /// whole, one that refuses `stream` is asked without it; `TOOLHOST_MODEL_STREAM`
    /// overrides it. Default: `true`.
    pub stream: bool,
    /// The model's context window in tokens (at least 1024): requests are compacted to fit
    /// it (see Long conversations); `TOOLHOST_MODEL_CONTEXT_WINDOW` overrides it. Default:
    /// `32768`.
    pub context_window: u64,
    /// Tokens of the window left for the answer (less than half of it);
    /// `TOOLHOST_MODEL_RESERVE_OUTPUT_TOKENS` overrides it. Default: an eighth of the
    /// window.
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
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawAgent {
    /// The most model calls in one turn. Default: `20`.
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
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawChildren {
    /// How deep turns may nest (old name `max_depth`). Default: `2`.
    pub max_spawn_depth: Option<u32>,
    /// The old name of `max_spawn_depth`.
    pub max_depth: Option<u32>,
    /// Delegating calls running children at once, per nesting level (all child turns of one
    /// `delegate_task` call share one slot; children's own children have slots of their
    /// own, so nesting never deadlocks), and tasks of one call running at once (old name
    /// `max_concurrent`). Default: `3`.
    pub max_concurrent_children: Option<usize>,
    /// The old name of `max_concurrent_children`.
    pub max_concurrent: Option<usize>,
    /// One child turn's limit, counted from when it runs, not while it waits for a slot
    /// (old name `timeout_secs`). Default: `300`.
    pub child_timeout_seconds: Option<f64>,
    /// The old name of `child_timeout_seconds`.
    pub timeout_secs: Option<f64>,
    /// Tools a leaf child never gets (its tools are its parent's without these; an
    /// orchestrator keeps `delegate_task`). Default: `["delegate_task", "clarify",
    /// "memory"]`.
    pub exclude: Vec<String>,
    /// Tools whose calls wait for child turns, with the most children one call starts; such
    /// a call's time limit covers that many children (`max_concurrent_children` at a time)
    /// plus 30 s. Default: `{ delegate_task = 5 }`.
    pub delegators: BTreeMap<String, u32>,
    /// A background batch reports one completion per group (and per ungrouped task) instead
    /// of one for the batch. Default: `false`.
    pub independent_completions: bool,
    /// Children may have the role `orchestrator` (they keep `delegate_task`). Default:
    /// `false`.
    pub orchestrator_enabled: bool,
    /// Children's calls that need approval are approved without asking (by default they
    /// ask, like the parent's). Default: `false`.
    pub subagent_auto_approve: bool,
    /// Model calls in one child turn. Default: `[agent] max_iterations`.
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
            state: RawState::default(),
            mcp_servers: Vec::new(),
        }
    }
}

/// `[metrics]`.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawMetrics {
    /// Serve Prometheus metrics at `http://ADDR/metrics` from `toolhost serve` (`--metrics
    /// ADDR` wins). See [Metrics](../operating/metrics.md). Default: unset.
    pub listen: Option<String>,
    /// Ask scrapers for a bearer token of scope metrics (`toolhost token add NAME --scope
    /// metrics`) on a loopback address too; off loopback one is always asked. Default:
    /// `false`.
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
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawMcp {
    /// What happens to a call that needs approval when the MCP client cannot be asked:
    /// `"refuse"` (with a message saying how to allow it), `"approve"`, or `"terminal"` (it
    /// waits for `toolhost approvals answer ID` on the control socket). Default:
    /// `"refuse"`.
    pub without_elicitation: WithoutElicitation,
    /// With `"terminal"`: how long such a call waits for an answer before it is refused.
    /// Default: `120`.
    pub terminal_approval_secs: f64,
    /// How long an MCP client has to answer what it is asked during a call: an approval or
    /// a plugin's question or sampling request, sent as a request (`initialize` clients) or
    /// as an input-required result a 2026-07-28 client answers by calling again. Past it
    /// the approval is refused, or the plugin is told nobody answered and its call is
    /// cancelled. Default: `900`.
    pub client_answer_secs: f64,
    /// Extra `Host` header names MCP over HTTP accepts, besides `localhost`, `127.0.0.1`
    /// and `::1`. Default: `[]`.
    pub allowed_hosts: Vec<String>,
    /// Browser origins (`"https://app.example.com:443"`, `"http://localhost:*"`) allowed
    /// besides the server's own; any other `Origin` gets 403. Default: `[]`.
    pub allowed_origins: Vec<String>,
    /// Where `toolhost token` keeps token hashes and `serve --mcp http` checks them.
    /// Default: `$XDG_STATE_HOME/toolhost/tokens.json`.
    pub tokens_file: Option<PathBuf>,
    /// HTTP connections at once; when full, the oldest idle one is closed for a new one,
    /// and when all are busy new ones wait (lowered to leave 256 descriptors free under the
    /// open-file limit). Default: `512`.
    pub max_connections: usize,
    /// Time a new connection has for its TLS handshake and first request headers, and a
    /// request for its body (408). Default: `10`.
    pub header_read_timeout_secs: f64,
    /// An idle keep-alive connection is closed after this. Default: `60`.
    pub idle_timeout_secs: f64,
    /// Live MCP sessions; a new one past it ends the least recently used idle one (whose
    /// client gets 404 and starts over). Default: `256`.
    pub max_sessions: usize,
    /// Live MCP sessions of one token; past it that token's own oldest idle session is
    /// ended, never another token's.
    pub max_sessions_per_token: usize,
    /// A session with no request and no open stream for this long is ended. Default:
    /// `1800`.
    pub session_idle_secs: f64,
    /// Larger request bodies get 413. Default: `4194304`.
    pub max_body_bytes: usize,
    /// OAuth 2.1 access tokens from an authorization server, beside the static tokens
    /// (`[mcp.oauth]`).
    pub oauth: Option<RawOAuth>,
}

/// `[mcp.oauth]`: toolhost as an OAuth 2.1 resource server (MCP authorization,
/// RFC 9728 metadata, RFC 8707 audience, RFC 9068 JWT access tokens).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawOAuth {
    /// An authorization server whose JWT access tokens MCP over HTTP accepts beside its own
    /// tokens; see [OAuth access
    /// tokens](../security/http.md#mcp-over-http-oauth-access-tokens). Default: unset.
    pub issuer: String,
    /// This server's resource identifier: the audience (`aud`) tokens must name, and the
    /// `resource` of its metadata. Default: none (required with `issuer`).
    pub resource: String,
    /// Where the issuer's signing keys are. Default: the issuer's `jwks_uri`.
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// Scopes every token must carry (else 403). Default: `[]`.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Scope = profile: a token with that scope is served that profile's tools. Default:
    /// `{}`.
    #[serde(default)]
    pub profiles: std::collections::BTreeMap<String, String>,
    /// Signature algorithms accepted (never `none` or HMAC). Default: RS/PS 256-512, ES256,
    /// ES384, EdDSA.
    #[serde(default = "default_oauth_algorithms")]
    pub algorithms: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`. Default: `60`.
    #[serde(default = "default_oauth_leeway")]
    pub leeway_secs: u64,
    /// Whether a token's header must say `typ: at+jwt` (or `application/at+jwt`), as RFC
    /// 9068 asks of an access token, so an ID token or another JWT of the issuer is not
    /// taken for one. `false` also lets in `typ: JWT` and no `typ`, for an issuer that
    /// does not follow RFC 9068. Default: `true`.
    #[serde(default = "default_true")]
    pub require_at_jwt: bool,
}

/// The signature algorithms `[mcp.oauth]` may accept (JOSE names): asymmetric only.
pub(crate) const OAUTH_ALGORITHMS: [&str; 9] = [
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

fn default_oauth_algorithms() -> Vec<String> {
    OAUTH_ALGORITHMS.map(str::to_owned).to_vec()
}

fn default_true() -> bool {
    true
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawCalls {
    /// How long one call may run before it is cancelled. Default: `60`.
    pub timeout_secs: f64,
    /// The same for interactive tools, which wait for a person. Default: `900`.
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
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawApproval {
    /// Whether "approve for this session" answers are remembered. Default: `true`.
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
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawAvailability {
    /// How long a tool's requirements check is cached. Default: `30`.
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
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawReload {
    /// Whether `toolhost serve` watches the plugin directories. Default: `true`.
    pub watch: bool,
    /// Past this many reloads, status and the log recommend a restart. Default: `64`.
    pub max_generations: u64,
    /// How long the plugin directories must be quiet after file events before the watcher's
    /// full rescan. Default: `0.05`.
    pub debounce_secs: f64,
    /// A plugin file renamed in, or closed after writing, whose ELF headers say it is
    /// whole, is loaded at once (that file alone), without waiting for the debounce. See
    /// [Reloads and start-up](../operating/reloads.md). Default: `true`.
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
#[derive(Debug, Clone, schemars::JsonSchema)]
pub struct RawPlugins {
    /// Refuse plugin files that a user other than the host's or root could change (the
    /// file, its folder, a symlink's target and its folder); `false` is for development and
    /// is logged as a warning at start-up. See [Plugin files:
    /// permissions](../security/plugin-files.md). Default: `true`.
    pub strict_permissions: bool,
    /// Plugin files larger than this are refused before a byte is read. Default:
    /// `268435456` (256 MiB).
    pub max_file_size: u64,
    /// How many plugin files are copied, hashed, checked and loaded at once at start-up and
    /// in rescans; `1` for one at a time. They register in the fixed order either way.
    /// Default: `0` (the cores available).
    pub load_threads: usize,
    /// `[plugins.NAME.settings]`, by plugin name, as JSON: what `ctx.settings()` reads.
    #[schemars(skip)]
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
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawIsolation {
    /// Where plugins run: `"in-process"` (mapped into the host) or `"process"` (each in a
    /// worker process of its own); `--isolate` makes it `"process"` for every plugin
    /// `[isolation.plugins]` does not keep `"in-process"`. See [Running plugins in worker
    /// processes](../security/workers.md). Default: `"in-process"`.
    #[schemars(with = "String")]
    pub default: IsolationMode,
    /// Per plugin: `NAME = "process"` or `"in-process"`, by the plugin's name or its file
    /// name (`"libfoo.so"`). Default: `{}`.
    #[schemars(with = "std::collections::BTreeMap<String, String>")]
    pub plugins: BTreeMap<String, IsolationMode>,
    /// The sandbox of workers (Landlock, seccomp, no capabilities): `"off"`,
    /// `"best-effort"` (what the kernel supports, with a warning when that is less than
    /// all) or `"required"` (a worker is not started without the filesystem and TCP rules,
    /// the seccomp filter and the capabilities dropped). Default: `"best-effort"`.
    #[schemars(with = "String")]
    pub sandbox: SandboxMode,
    /// Paths every worker may also read (relative to the config file). Default: `[]`.
    pub read_paths: Vec<PathBuf>,
    /// Paths every worker may also read and write (relative to the config file). Default:
    /// `[]`.
    pub write_paths: Vec<PathBuf>,
    /// TCP for every worker; otherwise only plugins with a `network` tool may connect or
    /// bind. Default: `false`.
    pub allow_network: bool,
    /// A worker's memory limit: its cgroup's `memory.max` for all its processes, and for
    /// each process the address space it may add (`RLIMIT_AS`, which counts shared mappings
    /// too); `0` for none. Default: `1024`.
    pub memory_limit_mb: u64,
    /// Tasks (processes and threads) a worker and what it starts may have at once
    /// (`pids.max`, or `RLIMIT_NPROC` in its own user namespace); `0` for none. Default:
    /// `256`.
    pub max_processes: u64,
    /// How a worker's processes are kept together and ended with it: `"cgroup"`,
    /// `"pid-namespace"`, `"process-group"`, or `"auto"` (the first this host can make).
    /// See [what each gives](../security/workers.md). Default: `"auto"`.
    #[schemars(with = "String")]
    pub containment: crate::sys::containment::ContainmentMode,
    /// Plugins (by name or file name) whose workers may make Unix-domain sockets, e.g. to
    /// reach a database's socket; every other worker's seccomp filter refuses them.
    /// Default: `[]`.
    pub unix_sockets: Vec<String>,
    /// A worker's open-file limit; `0` keeps the host's. Default: `256`.
    pub open_files: u64,
    /// More crashes than this within `crash_window_secs` quarantine the plugin. Default:
    /// `5`.
    pub max_crashes: u32,
    /// The window, in seconds, in which more than `max_crashes` crashes quarantine the
    /// plugin. Default: `60`.
    pub crash_window_secs: u64,
    /// A call that ignores its cancel signal this long gets its worker killed. Default:
    /// `1500`.
    pub kill_after_cancel_ms: u64,
    /// How long a worker may take to load its plugin. Default: `10`.
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
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawTrust {
    /// `"any"`, `"pinned"` (only files pinned with `toolhost trust`) or `"signed"` (a
    /// minisign signature by a listed publisher, or pinned). Default: `"any"`.
    #[schemars(with = "String")]
    pub mode: TrustMode,
    /// Minisign public keys (the base64 line of `minisign.pub`), or `{ name = "...", key =
    /// "..." }`. Default: `[]`.
    #[schemars(with = "Vec<serde_json::Value>")]
    pub publishers: Vec<PublisherEntry>,
    /// The trust file (pins); relative paths are relative to the config file. Default:
    /// `trust.json` in `state_dir`.
    pub file: Option<PathBuf>,
}

/// `[tools.NAME]`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawTool {
    /// Override a tool's risk: `read`, `write`, `destructive`, `network` or `deny`.
    /// Default: the declared risk.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub risk: Option<Risk>,
    /// Must be `true` to lower a tool below its declared risk (logged at start-up); without
    /// it start-up stops. Default: `false`.
    #[serde(default)]
    pub allow_lower: bool,
}

/// A profile's `config.toml` as written.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawProfile {
    /// The tools its agent gets; `"@NAME"` expands a toolset. Default: every tool.
    pub tools: Option<Vec<String>>,
    /// The instructions its agent's model gets first in every turn. Default: a short
    /// default.
    pub system_prompt: Option<String>,
    /// A note for people. Default: unset.
    pub description: Option<String>,
    /// Its own output budget and kept outputs (keys not given: the host config's).
    #[serde(default)]
    pub output: RawProfileOutput,
    /// Its workspace (keys not given: the host config's).
    #[serde(default)]
    pub workspace: RawWorkspace,
}
