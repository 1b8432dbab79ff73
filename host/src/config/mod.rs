//! The host's configuration file (TOML) and the profiles directory. Every key is checked:
//! an unknown key or a wrong type stops start-up with the file, the line and the key.
//!
//! ```toml
//! plugin_dirs = ["plugins"]            # relative paths are relative to this file
//! profiles_dir = "profiles"
//! control_socket = "/run/user/1000/toolhost/control.sock"
//! default_profile = "default"
//!
//! [calls]
//! timeout_secs = 60
//! interactive_timeout_secs = 900
//!
//! [approval]
//! remember_for_session = true
//!
//! [availability]
//! cache_secs = 30
//!
//! [reload]
//! watch = true
//! max_generations = 64
//!
//! [plugins]
//! strict_permissions = true
//! max_file_size = 268435456
//!
//! [trust]
//! mode = "pinned"                      # or "any" (the default) or "signed"
//! publishers = ["RWQf6LRCGA9i53mlYecO4IzT51TGPpvWucNSCh1CBM0QTaLn73Y7GFO3"]
//!
//! [toolsets]
//! text = ["json_query", "text_stats"]
//!
//! [tools.write_file]
//! risk = "deny"
//! ```
//!
//! Config files are read the careful way (`safe_open.rs`): a regular file of at most
//! 1 MiB, so a config path that is `/dev/zero` or a FIFO fails at once with its name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::calls::policy::RiskOverride;
use crate::calls::registry::ToolRegistry;
use crate::calls::tool::Risk;
use crate::plugins::loader::{DEFAULT_MAX_FILE_SIZE, LoadPolicy};
use crate::plugins::trust::{PublisherEntry, TrustMode, TrustPolicy};

/// The largest config file (host or profile) read.
pub const MAX_CONFIG_FILE_SIZE: u64 = 1024 * 1024;

/// The host's configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
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
    /// Call time limits.
    #[serde(default)]
    pub calls: CallsConfig,
    /// Approval settings.
    #[serde(default)]
    pub approval: ApprovalConfig,
    /// Availability checks.
    #[serde(default)]
    pub availability: AvailabilityConfig,
    /// Hot reload.
    #[serde(default)]
    pub reload: ReloadConfig,
    /// Which plugin files are considered at all.
    #[serde(default)]
    pub plugins: PluginsConfig,
    /// Trust modes: pinned or signed plugin files only.
    #[serde(default)]
    pub trust: TrustConfig,
    /// Named tool lists, used in profiles as `"@name"`.
    #[serde(default)]
    pub toolsets: BTreeMap<String, Vec<String>>,
    /// Per-tool settings: risk overrides.
    #[serde(default)]
    pub tools: BTreeMap<String, ToolSettings>,
    /// The MCP frontend (`toolhost serve --mcp`).
    #[serde(default)]
    pub mcp: McpConfig,
    /// The model the agent talks to (`toolhost chat` / `run`).
    #[serde(default)]
    pub model: ModelConfig,
    /// The agent's limits.
    #[serde(default)]
    pub agent: AgentSettings,
}

/// The model settings as the environment and `[model]` resolve them; the agent turns them
/// into its client's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSettings {
    /// The server's base URL, if set anywhere.
    pub base_url: Option<String>,
    /// The model name, if set anywhere.
    pub model: Option<String>,
    /// The API key, if one is set.
    pub api_key: Option<String>,
    /// One request's limit.
    pub timeout: Duration,
    /// Retries of a 429, a 5xx or a connection failure.
    pub max_retries: u32,
}

/// What one profile's agent is configured with; the agent turns it into its own settings.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSetup {
    /// The most model calls in one turn (at least 1).
    pub max_iterations: u32,
    /// The profile's system prompt, if it sets one.
    pub system_prompt: Option<String>,
    /// Child turns.
    pub children: ChildLimits,
}

/// `[agent.children]` with its values checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildLimits {
    /// How deep turns may nest.
    pub max_depth: u32,
    /// How many child turns run at once (at least 1).
    pub max_concurrent: usize,
    /// How long one child turn may take.
    pub timeout: Duration,
    /// Tools a child never gets.
    pub exclude: Vec<String>,
    /// Tools whose calls wait for child turns, with the most children one call starts.
    pub delegators: BTreeMap<String, u32>,
}

impl Default for ChildLimits {
    fn default() -> Self {
        AgentSetup::from(&AgentSettings::default()).children
    }
}

impl From<&AgentSettings> for AgentSetup {
    /// The settings of a profile without a system prompt of its own.
    fn from(a: &AgentSettings) -> Self {
        AgentSetup {
            max_iterations: a.max_iterations.max(1),
            system_prompt: None,
            children: ChildLimits {
                max_depth: a.children.max_depth,
                max_concurrent: a.children.max_concurrent.max(1),
                timeout: Duration::try_from_secs_f64(a.children.timeout_secs)
                    .unwrap_or(Duration::from_secs(300)),
                exclude: a.children.exclude.clone(),
                delegators: a.children.delegators.clone(),
            },
        }
    }
}

/// `[model]`: an OpenAI-compatible Chat Completions server.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
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
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            base_url: None,
            model: None,
            api_key_env: "OPENAI_API_KEY".to_owned(),
            timeout_secs: 120.0,
            max_retries: 3,
        }
    }
}

/// `[agent]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentSettings {
    /// The most model calls in one turn.
    pub max_iterations: u32,
    /// Child turns (`delegate_task`).
    pub children: ChildSettings,
}

impl Default for AgentSettings {
    fn default() -> Self {
        AgentSettings {
            max_iterations: 20,
            children: ChildSettings::default(),
        }
    }
}

/// `[agent.children]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ChildSettings {
    /// How deep turns may nest.
    pub max_depth: u32,
    /// How many child turns run at once.
    pub max_concurrent: usize,
    /// Seconds one child turn may take.
    pub timeout_secs: f64,
    /// Tools a child never gets.
    pub exclude: Vec<String>,
    /// Tools whose calls wait for child turns, each with the most child turns one of its
    /// calls starts: such a call may last as long as that many children
    /// (`max_concurrent` at a time).
    pub delegators: BTreeMap<String, u32>,
}

impl Default for ChildSettings {
    fn default() -> Self {
        ChildSettings {
            max_depth: 2,
            max_concurrent: 3,
            timeout_secs: 300.0,
            exclude: ["delegate_task", "clarify", "memory"]
                .map(str::to_owned)
                .to_vec(),
            // The shipped delegate_task plugin starts at most 5 children (its `MAX_TASKS`,
            // its schema's `maxItems`).
            delegators: BTreeMap::from([("delegate_task".to_owned(), 5)]),
        }
    }
}

fn default_profile_name() -> String {
    "default".to_owned()
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            plugin_dirs: Vec::new(),
            profiles_dir: None,
            default_profile: default_profile_name(),
            control_socket: None,
            calls: CallsConfig::default(),
            approval: ApprovalConfig::default(),
            availability: AvailabilityConfig::default(),
            reload: ReloadConfig::default(),
            plugins: PluginsConfig::default(),
            trust: TrustConfig::default(),
            toolsets: BTreeMap::new(),
            tools: BTreeMap::new(),
            mcp: McpConfig::default(),
            model: ModelConfig::default(),
            agent: AgentSettings::default(),
        }
    }
}

/// `[mcp]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpConfig {
    /// What happens to a call that needs approval when the MCP client cannot be asked
    /// (it does not support elicitation).
    pub without_elicitation: WithoutElicitation,
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
    /// Seconds a session without requests or open streams lives.
    pub session_idle_secs: f64,
    /// The largest request body accepted, in bytes.
    pub max_body_bytes: usize,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            without_elicitation: WithoutElicitation::default(),
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            tokens_file: None,
            max_connections: 512,
            header_read_timeout_secs: 10.0,
            idle_timeout_secs: 60.0,
            max_sessions: 256,
            session_idle_secs: 1800.0,
            max_body_bytes: 4 * 1024 * 1024,
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
}

/// `[calls]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CallsConfig {
    /// Seconds one call may run.
    pub timeout_secs: f64,
    /// Seconds an interactive call may run.
    pub interactive_timeout_secs: f64,
}

impl Default for CallsConfig {
    fn default() -> Self {
        CallsConfig {
            timeout_secs: 60.0,
            interactive_timeout_secs: 900.0,
        }
    }
}

/// `[approval]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApprovalConfig {
    /// Whether a person may approve a tool for the rest of the session.
    pub remember_for_session: bool,
}

impl Default for ApprovalConfig {
    fn default() -> Self {
        ApprovalConfig {
            remember_for_session: true,
        }
    }
}

/// `[availability]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AvailabilityConfig {
    /// How long an availability answer is cached, in seconds.
    pub cache_secs: f64,
}

impl Default for AvailabilityConfig {
    fn default() -> Self {
        AvailabilityConfig { cache_secs: 30.0 }
    }
}

/// `[reload]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReloadConfig {
    /// Watch the plugin directories (`toolhost serve`).
    pub watch: bool,
    /// Reloads after which status recommends a restart.
    pub max_generations: u64,
}

impl Default for ReloadConfig {
    fn default() -> Self {
        ReloadConfig {
            watch: true,
            max_generations: 64,
        }
    }
}

/// `[plugins]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PluginsConfig {
    /// Refuse plugin files (and their directories, and symlink targets) that a user
    /// other than the host's or root could change. `false` is for development only and is
    /// logged as a warning.
    pub strict_permissions: bool,
    /// Plugin files larger than this (bytes) are refused before they are read.
    pub max_file_size: u64,
}

impl Default for PluginsConfig {
    fn default() -> Self {
        PluginsConfig {
            strict_permissions: true,
            max_file_size: DEFAULT_MAX_FILE_SIZE,
        }
    }
}

/// `[trust]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrustConfig {
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
pub struct ToolSettings {
    /// The risk to use instead of the declared one: read, write, destructive, network
    /// or deny.
    #[serde(default)]
    pub risk: Option<Risk>,
    /// Must be `true` to lower a tool below its declared risk.
    #[serde(default)]
    pub allow_lower: bool,
}

/// A configuration problem. Start-up stops with it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("could not read the config file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The path is not a regular file of at most 1 MiB (a FIFO, a device, a directory, a
    /// huge file): it was not read.
    #[error(
        "could not read the config file {}: {reason}; a config file must be a regular file \
         of at most 1 MiB",
        path.display()
    )]
    NotAConfigFile {
        /// The file.
        path: PathBuf,
        /// What it is.
        reason: String,
    },
    /// The file is not valid (syntax, unknown key, wrong type): toml's message names the
    /// line, the column and the key.
    #[error("{}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, where.
        message: String,
    },
    /// A value does not fit with the rest.
    #[error("{}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong and what to do.
        message: String,
    },
    /// A profile names a tool no plugin provides.
    #[error(
        "profile '{profile}' lists tool '{tool}', which no loaded plugin provides; install \
         the plugin that provides it or remove it from {}",
        file.display()
    )]
    MissingTool {
        /// The profile.
        profile: String,
        /// The tool.
        tool: String,
        /// The profile's config file.
        file: PathBuf,
    },
    /// No such profile.
    #[error(
        "there is no profile '{profile}': create {} (it may hold just `tools = [...]`)",
        file.display()
    )]
    NoProfile {
        /// The profile.
        profile: String,
        /// Where its config file would be.
        file: PathBuf,
    },
}

/// Where the config file is looked for when `--config` is not given:
/// `$XDG_CONFIG_HOME/toolhost/config.toml`, else `~/.config/toolhost/config.toml`.
pub fn default_config_path() -> PathBuf {
    std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".config")))
        .unwrap_or_else(|| PathBuf::from("."))
        .join("toolhost")
        .join("config.toml")
}

/// A loaded configuration and where it came from.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    /// The settings.
    pub config: HostConfig,
    /// The file, if one was read.
    pub file: Option<PathBuf>,
}

impl LoadedConfig {
    /// Reads `path`, or the default location when `None` (a missing default file means
    /// the defaults). Relative paths in the file are made relative to its directory.
    pub fn load(path: Option<&Path>) -> Result<LoadedConfig, ConfigError> {
        let (path, required) = match path {
            Some(p) => (p.to_path_buf(), true),
            None => (default_config_path(), false),
        };
        let text = match read_config_text(&path) {
            Ok(t) => t,
            Err(ConfigError::Read { source, .. })
                if !required && source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Ok(LoadedConfig {
                    config: HostConfig::default(),
                    file: None,
                });
            }
            Err(e) => return Err(e),
        };
        let mut config: HostConfig = toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.clone(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let resolve = |p: &PathBuf| {
            if p.is_relative() {
                base.join(p)
            } else {
                p.clone()
            }
        };
        config.plugin_dirs = config.plugin_dirs.iter().map(resolve).collect();
        config.profiles_dir = config.profiles_dir.as_ref().map(resolve);
        config.control_socket = config.control_socket.as_ref().map(resolve);
        config.mcp.tokens_file = config.mcp.tokens_file.as_ref().map(resolve);
        config.trust.file = config.trust.file.as_ref().map(resolve);
        let loaded = LoadedConfig {
            config,
            file: Some(path),
        };
        loaded.validate()?;
        Ok(loaded)
    }

    fn invalid(&self, message: String) -> ConfigError {
        ConfigError::Invalid {
            path: self.file.clone().unwrap_or_default(),
            message,
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let c = &self.config;
        for (key, secs) in [
            ("calls.timeout_secs", c.calls.timeout_secs),
            (
                "calls.interactive_timeout_secs",
                c.calls.interactive_timeout_secs,
            ),
            ("availability.cache_secs", c.availability.cache_secs),
            ("model.timeout_secs", c.model.timeout_secs),
            ("agent.children.timeout_secs", c.agent.children.timeout_secs),
            (
                "mcp.header_read_timeout_secs",
                c.mcp.header_read_timeout_secs,
            ),
            ("mcp.idle_timeout_secs", c.mcp.idle_timeout_secs),
            ("mcp.session_idle_secs", c.mcp.session_idle_secs),
        ] {
            let fits = Duration::try_from_secs_f64(secs).is_ok();
            if !fits || (!key.starts_with("availability") && secs == 0.0) {
                return Err(self.invalid(format!("`{key}` must be a positive number of seconds")));
            }
        }
        for (key, n) in [
            ("mcp.max_connections", c.mcp.max_connections),
            ("mcp.max_sessions", c.mcp.max_sessions),
            ("mcp.max_body_bytes", c.mcp.max_body_bytes),
        ] {
            if n == 0 {
                return Err(self.invalid(format!("`{key}` must be at least 1")));
            }
        }
        for (name, tools) in &c.toolsets {
            for tool in tools {
                if tool.starts_with('@') {
                    return Err(self.invalid(format!(
                        "toolset '{name}' contains '{tool}': toolsets list tool names, not other toolsets"
                    )));
                }
            }
        }
        if c.plugins.max_file_size == 0 {
            return Err(self
                .invalid("`plugins.max_file_size` must be a positive number of bytes".to_owned()));
        }
        self.trust_policy()
            .map_err(|e| self.invalid(e.to_string()))?;
        for (tool, settings) in &c.tools {
            if settings.risk.is_none() {
                return Err(self.invalid(format!(
                    "[tools.{tool}] sets no `risk`: give one (read, write, destructive, network, deny) or remove the table"
                )));
            }
        }
        Ok(())
    }

    /// The bearer-token file of MCP over HTTP: `[mcp] tokens_file`, else `tokens.json` in
    /// the state directory (`None` when neither `XDG_STATE_HOME` nor `HOME` is set).
    pub fn tokens_file(&self) -> Option<PathBuf> {
        self.config
            .mcp
            .tokens_file
            .clone()
            .or_else(|| crate::sys::private::state_dir().map(|d| d.join("tokens.json")))
    }

    /// The trust policy of `[trust]`: the mode, the publishers' keys and the trust file
    /// (`[trust] file`, else `trust.json` in [`crate::state_dir`]).
    pub fn trust_policy(&self) -> Result<TrustPolicy, crate::plugins::trust::TrustError> {
        let t = &self.config.trust;
        let file = t
            .file
            .clone()
            .or_else(|| crate::sys::private::state_dir().map(|d| d.join("trust.json")));
        TrustPolicy::new(t.mode, &t.publishers, file)
    }

    /// Which plugin files may load: `[plugins]` and `[trust]`.
    pub fn load_policy(&self) -> Result<LoadPolicy, crate::plugins::trust::TrustError> {
        Ok(LoadPolicy {
            strict_permissions: self.config.plugins.strict_permissions,
            max_file_size: self.config.plugins.max_file_size,
            trust: self.trust_policy()?,
        })
    }

    /// The risk overrides of `[tools.*]`.
    pub fn risk_overrides(&self) -> BTreeMap<String, RiskOverride> {
        self.config
            .tools
            .iter()
            .filter_map(|(name, s)| {
                s.risk.map(|risk| {
                    (
                        name.clone(),
                        RiskOverride {
                            risk,
                            allow_lower: s.allow_lower,
                        },
                    )
                })
            })
            .collect()
    }

    /// The model settings, with the environment's overrides (`TOOLHOST_MODEL_BASE_URL`,
    /// `TOOLHOST_MODEL`, `TOOLHOST_API_KEY`, else the variable `api_key_env` names).
    pub fn model(&self) -> ModelSettings {
        let m = &self.config.model;
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        ModelSettings {
            base_url: var("TOOLHOST_MODEL_BASE_URL").or_else(|| m.base_url.clone()),
            model: var("TOOLHOST_MODEL").or_else(|| m.model.clone()),
            api_key: var("TOOLHOST_API_KEY").or_else(|| var(&m.api_key_env)),
            timeout: Duration::try_from_secs_f64(m.timeout_secs)
                .unwrap_or(Duration::from_secs(120)),
            max_retries: m.max_retries,
        }
    }

    /// The agent settings for `profile`: `[agent]` and the profile's system prompt.
    pub fn agent(&self, profile: &Profile) -> AgentSetup {
        AgentSetup {
            system_prompt: profile.system_prompt.clone(),
            ..AgentSetup::from(&self.config.agent)
        }
    }

    /// Call time limits as a dispatcher config.
    pub fn dispatch(&self) -> crate::DispatchConfig {
        crate::DispatchConfig {
            timeout: Duration::from_secs_f64(self.config.calls.timeout_secs),
            interactive_timeout: Duration::from_secs_f64(
                self.config.calls.interactive_timeout_secs,
            ),
            ..crate::DispatchConfig::default()
        }
    }

    /// What the call pipeline (availability, approval policy, dispatcher) is built from.
    pub fn call_settings(&self) -> crate::CallSettings {
        crate::CallSettings {
            dispatch: self.dispatch(),
            availability_ttl: Duration::from_secs_f64(self.config.availability.cache_secs),
            remember_approvals: self.config.approval.remember_for_session,
        }
    }

    /// The profiles directory: the configured one, else `profiles/` next to the config
    /// file, else `$XDG_CONFIG_HOME/toolhost/profiles`.
    pub fn profiles_dir(&self) -> PathBuf {
        self.config.profiles_dir.clone().unwrap_or_else(|| {
            self.file
                .as_deref()
                .and_then(Path::parent)
                .map(Path::to_path_buf)
                .unwrap_or_else(|| {
                    default_config_path()
                        .parent()
                        .map(Path::to_path_buf)
                        .unwrap_or_default()
                })
                .join("profiles")
        })
    }
}

impl LoadedConfig {
    /// Every profile in the profiles directory (sorted by name), plus the default
    /// profile if it has no directory.
    pub fn profiles(&self) -> Result<Vec<Profile>, ConfigError> {
        let dir = self.profiles_dir();
        let mut names: Vec<String> = match std::fs::read_dir(&dir) {
            Ok(entries) => entries
                .filter_map(Result::ok)
                .filter(|e| e.path().join("config.toml").is_file())
                .filter_map(|e| e.file_name().to_str().map(str::to_owned))
                .collect(),
            Err(_) => Vec::new(),
        };
        if !names.contains(&self.config.default_profile) {
            names.push(self.config.default_profile.clone());
        }
        names.sort();
        names.iter().map(|n| Profile::load(self, n)).collect()
    }
}

/// A profile: `<profiles_dir>/<name>/config.toml` and its own state folder.
#[derive(Debug, Clone)]
pub struct Profile {
    /// The name.
    pub name: String,
    /// Its directory.
    pub dir: PathBuf,
    /// Where its state lives (memory notes, sessions): `<dir>/state`, created (mode 0700)
    /// on load.
    pub state_dir: PathBuf,
    /// The tools its agent gets (`@toolset` entries expanded); `None`: every tool.
    pub tools: Option<Vec<String>>,
    /// Its config file, if it has one.
    pub file: PathBuf,
    /// Its agent's system prompt, if it sets one.
    pub system_prompt: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFile {
    tools: Option<Vec<String>>,
    system_prompt: Option<String>,
    #[allow(dead_code, reason = "documentation for people; not used by the host")]
    description: Option<String>,
}

/// What a profile's agent sees now, and what it lists that is missing.
#[derive(Debug, Clone)]
pub struct ProfileView {
    /// Its tools. `registry.specs()` (what the model sees) leaves deny tools out.
    pub registry: ToolRegistry,
    /// Listed tools no loaded plugin provides right now.
    pub missing: Vec<String>,
}

impl Profile {
    /// Loads profile `name`. The default profile may have no directory: it then gets
    /// every tool. Its state folder is created.
    pub fn load(config: &LoadedConfig, name: &str) -> Result<Profile, ConfigError> {
        let invalid_name = name.is_empty() || name.starts_with('.') || name.contains(['/', '\\']);
        let dir = config.profiles_dir().join(name);
        let file = dir.join("config.toml");
        if invalid_name {
            return Err(ConfigError::NoProfile {
                profile: name.to_owned(),
                file,
            });
        }
        let text = match read_config_text(&file) {
            Ok(t) => Some(t),
            Err(ConfigError::Read { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                if name != config.config.default_profile {
                    return Err(ConfigError::NoProfile {
                        profile: name.to_owned(),
                        file,
                    });
                }
                None
            }
            Err(e) => return Err(e),
        };
        let parsed = match text {
            Some(t) => toml::from_str::<ProfileFile>(&t).map_err(|e| ConfigError::Parse {
                path: file.clone(),
                message: e.to_string().trim_end().to_owned(),
            })?,
            None => ProfileFile {
                tools: None,
                system_prompt: None,
                description: None,
            },
        };
        let tools = match parsed.tools {
            None => None,
            Some(list) => Some(expand(&list, &config.config.toolsets).map_err(|message| {
                ConfigError::Invalid {
                    path: file.clone(),
                    message,
                }
            })?),
        };
        let state_dir = dir.join("state");
        if dir.exists() {
            // Notes and conversations: private to the host's user (0700, tightened).
            crate::sys::private::ensure_private_dir(&state_dir).map_err(|source| {
                ConfigError::Read {
                    path: state_dir.clone(),
                    source,
                }
            })?;
        }
        Ok(Profile {
            name: name.to_owned(),
            dir,
            state_dir,
            tools,
            file,
            system_prompt: parsed.system_prompt,
        })
    }

    /// What the profile's agent gets from `full`: its listed tools (or all). Listed tools
    /// that are missing are reported, not fatal (hot reload).
    pub fn view(&self, full: &ToolRegistry) -> ProfileView {
        let mut missing = Vec::new();
        let registry = match &self.tools {
            None => full.clone(),
            Some(list) => {
                let present: Vec<&str> = list
                    .iter()
                    .filter(|t| {
                        let there = full.get(t).is_some();
                        if !there {
                            missing.push((*t).clone());
                        }
                        there
                    })
                    .map(String::as_str)
                    .collect();
                full.only(&present).unwrap_or_default()
            }
        };
        // Deny tools stay in the registry (so a call gets "denied by policy") but
        // `specs()` never shows them to the model.
        ProfileView { registry, missing }
    }

    /// Like [`Profile::view`], but a listed tool that is missing is an error: how
    /// start-up checks a profile.
    pub fn check(&self, full: &ToolRegistry) -> Result<ToolRegistry, ConfigError> {
        let view = self.view(full);
        match view.missing.first() {
            Some(tool) => Err(ConfigError::MissingTool {
                profile: self.name.clone(),
                tool: tool.clone(),
                file: self.file.clone(),
            }),
            None => Ok(view.registry),
        }
    }
}

/// Reads a config file the careful way: a regular file (opened without blocking) of at
/// most [`MAX_CONFIG_FILE_SIZE`] bytes.
fn read_config_text(path: &Path) -> Result<String, ConfigError> {
    use crate::sys::safe_open::OpenError;
    crate::sys::safe_open::read_capped_text(path, MAX_CONFIG_FILE_SIZE).map_err(|e| match e {
        OpenError::Io(source) => ConfigError::Read {
            path: path.to_path_buf(),
            source,
        },
        other => ConfigError::NotAConfigFile {
            path: path.to_path_buf(),
            reason: other.to_string(),
        },
    })
}

/// Expands `@toolset` entries; unknown toolsets are an error naming them.
fn expand(
    list: &[String],
    toolsets: &BTreeMap<String, Vec<String>>,
) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    for entry in list {
        let names: Vec<String> = match entry.strip_prefix('@') {
            Some(set) => toolsets.get(set).cloned().ok_or_else(|| {
                format!(
                    "`tools` uses toolset '@{set}', which the host config does not define (add [toolsets] {set} = [...])"
                )
            })?,
            None => vec![entry.clone()],
        };
        for name in names {
            if !out.contains(&name) {
                out.push(name);
            }
        }
    }
    Ok(out)
}
