//! A loaded configuration: reading the file the careful way, resolving paths, checking
//! every value once (durations become `Duration`s here) and turning sections into what
//! the other modules take (`LoadPolicy`, `CallSettings`, the `*Settings` of
//! `settings.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::settings::MODEL_RETRY_BACKOFF;
use super::{
    AgentSettings, ConfigError, ContextSettings, HttpLimits, MAX_CONFIG_FILE_SIZE, McpSettings,
    ModelSettings, Profile, RawConfig, RawProfile, ReloadSettings, SecondsError, positive_seconds,
    seconds_or_zero,
};
use crate::plugins::load::loader::LoadPolicy;
use crate::plugins::load::trust::TrustPolicy;
use toolhost_calls::door::CallSettings;
use toolhost_calls::policy::RiskOverride;
use toolhost_calls::profile_dirs::{Folder, ProfileDirs};

/// The environment variable `name` read as a `T`, if it is set (and not blank), or what
/// is wrong with it (`what` says what it should be).
fn env_value<T: std::str::FromStr>(
    name: &'static str,
    what: &'static str,
) -> Result<Option<T>, EnvValueError> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v.trim().parse().map(Some).map_err(|_| EnvValueError {
            name,
            value: v,
            what,
        }),
        _ => Ok(None),
    }
}

/// An environment variable that overrides a config key but is not what that key takes.
#[derive(Debug, thiserror::Error)]
#[error("the environment variable {name} is '{value}': give {what}, or unset it")]
struct EnvValueError {
    /// The variable.
    name: &'static str,
    /// Its value.
    value: String,
    /// What it should be.
    what: &'static str,
}

/// Where the config file is looked for when `--config` is not given:
/// `$XDG_CONFIG_HOME/toolhost/config.toml`, else `~/.config/toolhost/config.toml`.
pub fn default_config_path() -> PathBuf {
    crate::sys::dirs::config_dir()
        .unwrap_or_else(|| PathBuf::from("toolhost"))
        .join("config.toml")
}

/// The plugin folder used when neither `--plugins`, `TOOLHOST_PLUGINS` nor the config
/// names one: `$XDG_DATA_HOME/toolhost/plugins`, else `~/.local/share/toolhost/plugins`;
/// with `--system`, the system layout's (root's) plugin folder.
pub fn default_plugin_dir() -> PathBuf {
    crate::sys::dirs::plugin_dir().unwrap_or_else(|| PathBuf::from("toolhost/plugins"))
}

/// A loaded configuration and where it came from.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    /// The file as written (its relative paths made relative to its directory): private
    /// to `config/`, which resolves every section of it at load; everything else reads
    /// the resolved settings.
    config: RawConfig,
    /// The file, if one was read.
    pub file: Option<PathBuf>,
    /// What loading resolved from it.
    resolved: Resolved,
    /// How plugins are isolated, resolved with every profile's workspace the first time a
    /// command asks (it reads every profile's file: commands that load no plugin never
    /// pay for it), again when the command line replaces the roots.
    isolation: std::sync::OnceLock<crate::IsolationPolicy>,
    /// Workspace roots given on the command line (`--workspace DIR`): every profile's,
    /// in place of the configured ones.
    workspace_roots: Option<Vec<PathBuf>>,
    /// The plugin folders the command loads from (`--plugins`, `TOOLHOST_PLUGINS`), which
    /// the workspace tools never touch ([`LoadedConfig::workspace_protected_paths`]).
    plugin_dirs_in_use: Vec<PathBuf>,
}

/// The sections loading checks and resolves once, durations as `Duration`s.
#[derive(Debug, Clone)]
struct Resolved {
    calls: CallSettings,
    model_timeout: Duration,
    model_stream: bool,
    agent: AgentSettings,
    mcp: McpSettings,
    watch: crate::plugins::catalog::watch::WatchConfig,
    /// `[output]`, checked at load (profiles resolve their own overrides).
    output: toolhost_calls::outputs::OutputSettings,
    /// `[model]` with the environment's overrides, read at load.
    model: Option<ModelSettings>,
    /// `[metrics]`, its address parsed.
    metrics: MetricsSettings,
    /// `[reload]`'s watch switch and generation count.
    reload: ReloadSettings,
    /// `[[mcp_servers]]`, checked.
    mcp_servers: Vec<super::McpServerSettings>,
}

/// `[metrics]`, checked: where the Prometheus endpoint listens, if anywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricsSettings {
    /// The address (`--metrics ADDR` wins).
    pub listen: Option<std::net::SocketAddr>,
    /// Whether scrapers on a loopback address need a token too (off loopback they always
    /// do).
    pub require_token: bool,
}

impl Resolved {
    /// Resolves `c`, or names the first key whose seconds are not a usable number.
    fn new(c: &RawConfig) -> Result<Resolved, (&'static str, SecondsError)> {
        let positive = |key: &'static str, secs: f64| positive_seconds(secs).map_err(|e| (key, e));
        let calls = toolhost_calls::dispatcher::DispatchConfig {
            timeout: positive("calls.timeout_secs", c.calls.timeout_secs)?,
            interactive_timeout: positive(
                "calls.interactive_timeout_secs",
                c.calls.interactive_timeout_secs,
            )?,
            ..toolhost_calls::dispatcher::DispatchConfig::default()
        };
        // Zero: availability answers are not cached.
        let availability_ttl = seconds_or_zero(c.availability.cache_secs)
            .map_err(|e| ("availability.cache_secs", e))?;
        let model_timeout = positive("model.timeout_secs", c.model.timeout_secs)?;
        let (child_timeout_key, child_timeout_secs) = c.agent.children.timeout();
        let child_timeout = positive(child_timeout_key, child_timeout_secs)?;
        let m = &c.mcp;
        let mcp = McpSettings {
            without_elicitation: m.without_elicitation,
            terminal_approval: positive("mcp.terminal_approval_secs", m.terminal_approval_secs)?,
            client_answer: positive("mcp.client_answer_secs", m.client_answer_secs)?,
            allowed_hosts: m.allowed_hosts.clone(),
            allowed_origins: m.allowed_origins.clone(),
            limits: HttpLimits {
                max_connections: m.max_connections,
                header_read_timeout: positive(
                    "mcp.header_read_timeout_secs",
                    m.header_read_timeout_secs,
                )?,
                idle_timeout: positive("mcp.idle_timeout_secs", m.idle_timeout_secs)?,
                max_sessions: m.max_sessions,
                max_sessions_per_token: m.max_sessions_per_token,
                session_idle: positive("mcp.session_idle_secs", m.session_idle_secs)?,
                max_body_bytes: m.max_body_bytes,
            },
            // Checked with the rest of the file, below.
            oauth: None,
        };
        let debounce = positive("reload.debounce_secs", c.reload.debounce_secs)?;
        let defaults = crate::plugins::catalog::watch::WatchConfig::default();
        let watch = crate::plugins::catalog::watch::WatchConfig {
            debounce,
            // A debounce longer than the default cap is waited for in full.
            max_wait: defaults.max_wait.max(debounce),
            immediate: c.reload.immediate,
            ..defaults
        };
        Ok(Resolved {
            watch,
            calls: CallSettings {
                dispatch: calls,
                availability_ttl,
                remember_approvals: c.approval.remember_for_session,
            },
            model_timeout,
            model_stream: c.model.stream,
            agent: AgentSettings::new(&c.agent, child_timeout),
            // Set (and checked) by `LoadedConfig::resolve`.
            output: toolhost_calls::outputs::OutputSettings::default(),
            model: None,
            metrics: MetricsSettings {
                listen: None,
                require_token: c.metrics.require_token,
            },
            reload: ReloadSettings {
                watch: c.reload.watch,
                max_generations: c.reload.max_generations,
            },
            mcp,
            // Set (and checked) by `LoadedConfig::resolve`.
            mcp_servers: Vec::new(),
        })
    }
}

impl LoadedConfig {
    /// Reads `path`, or the default location when `None` (a missing default file means
    /// the defaults). Relative paths in the file are made relative to its directory.
    pub fn load(path: Option<&Path>) -> Result<LoadedConfig, ConfigError> {
        let (path, required) = match path {
            Some(p) => (p.to_path_buf(), true),
            None => (default_config_path(), false),
        };
        let text = match read_config_text(&path, crate::sys::permissions::CONFIG_FILE) {
            Ok(t) => t,
            Err(ConfigError::Read { source, .. })
                if !required && source.kind() == std::io::ErrorKind::NotFound =>
            {
                return LoadedConfig::resolve(RawConfig::default(), None);
            }
            Err(e) => return Err(e),
        };
        let mut config: RawConfig = toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.clone(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        if let Some((name, old)) = config.agent.children.both_spellings() {
            return Err(ConfigError::Parse {
                path,
                message: format!(
                    "[agent.children] sets both `{name}` and `{old}`, its old name; keep \
                     `{name}` only"
                ),
            });
        }
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
        config.state_dir = config.state_dir.as_ref().map(resolve);
        config.mcp.tokens_file = config.mcp.tokens_file.as_ref().map(resolve);
        config.trust.file = config.trust.file.as_ref().map(resolve);
        config.audit.file = config.audit.file.as_ref().map(resolve);
        config.audit.syslog_socket = config.audit.syslog_socket.as_ref().map(resolve);
        config.state.ca_file = config.state.ca_file.as_ref().map(resolve);
        for server in &mut config.mcp_servers {
            super::mcp_servers::rebase(server, &base);
        }
        config.isolation.read_paths = config.isolation.read_paths.iter().map(resolve).collect();
        config.isolation.write_paths = config.isolation.write_paths.iter().map(resolve).collect();
        config.workspace.roots = config.workspace.roots.as_ref().map(|roots| {
            roots
                .iter()
                .map(|r| super::workspace::absolute_root(r, &base))
                .collect()
        });
        let loaded = LoadedConfig::resolve(config, Some(path))?;
        loaded.validate()?;
        Ok(loaded)
    }

    /// `config` (read from `file`) with its sections resolved.
    fn resolve(config: RawConfig, file: Option<PathBuf>) -> Result<LoadedConfig, ConfigError> {
        let mut resolved =
            Resolved::new(&config).map_err(|(key, source)| ConfigError::Seconds {
                path: file.clone().unwrap_or_default(),
                key,
                source,
            })?;
        let invalid = |message| ConfigError::Invalid {
            path: file.clone().unwrap_or_else(|| PathBuf::from("[model]")),
            message,
        };
        let env_invalid = |e: EnvValueError| ConfigError::Invalid {
            path: PathBuf::from("environment"),
            message: e.to_string(),
        };
        let m = &config.model;
        if let Some(stream) =
            env_value::<bool>("TOOLHOST_MODEL_STREAM", "true or false").map_err(env_invalid)?
        {
            resolved.model_stream = stream;
        }
        let window = env_value("TOOLHOST_MODEL_CONTEXT_WINDOW", "a number of tokens")
            .map_err(env_invalid)?
            .unwrap_or(m.context_window);
        let reserve = env_value("TOOLHOST_MODEL_RESERVE_OUTPUT_TOKENS", "a number of tokens")
            .map_err(env_invalid)?
            .or(m.reserve_output_tokens);
        resolved.agent.context =
            ContextSettings::new(window, reserve).map_err(|e| invalid(e.to_string()))?;
        if let Some(raw) = &config.mcp.oauth {
            resolved.mcp.oauth =
                Some(
                    super::settings::oauth_settings(raw).map_err(|e| ConfigError::Invalid {
                        path: file.clone().unwrap_or_default(),
                        message: e.to_string(),
                    })?,
                );
        }
        resolved.output =
            super::settings::output_settings(&config.output).map_err(|e| ConfigError::Invalid {
                path: file.clone().unwrap_or_default(),
                message: e.to_string(),
            })?;
        resolved.model = model_settings(&config.model, &resolved);
        resolved.mcp_servers =
            super::mcp_servers::resolve(&config.mcp_servers).map_err(|e| ConfigError::Invalid {
                path: file.clone().unwrap_or_default(),
                message: e.to_string(),
            })?;
        if let Some(text) = &config.metrics.listen {
            let addr = text.parse().map_err(|e| ConfigError::Invalid {
                path: file.clone().unwrap_or_default(),
                message: format!(
                    "[metrics] listen = {text:?} is not an address ({e}): write it as \
                     \"127.0.0.1:9464\" or \"[::1]:9464\""
                ),
            })?;
            resolved.metrics.listen = Some(addr);
        }
        Ok(LoadedConfig {
            config,
            file,
            resolved,
            isolation: std::sync::OnceLock::new(),
            workspace_roots: None,
            plugin_dirs_in_use: Vec::new(),
        })
    }

    /// Every profile's workspace roots are `roots` (`--workspace DIR`), in place of the
    /// configured ones. A root that is not an existing folder is an error naming it.
    pub fn with_workspace_roots(mut self, roots: &[PathBuf]) -> Result<LoadedConfig, ConfigError> {
        let mut real = Vec::new();
        for root in roots {
            let root =
                super::workspace::canonical_root(root).map_err(|e| ConfigError::Invalid {
                    path: PathBuf::from("--workspace"),
                    message: e.to_string(),
                })?;
            if !real.contains(&root) {
                real.push(root);
            }
        }
        self.workspace_roots = Some(real);
        // The workers' sandboxes follow the roots.
        self.isolation = std::sync::OnceLock::new();
        Ok(self)
    }

    /// The host config's workspace (what a profile without a config file gets), with the
    /// command line's roots in place.
    pub fn workspace(&self) -> Result<super::WorkspaceSettings, ConfigError> {
        self.workspace_for(&self.config.workspace, self.file.as_deref())
    }

    /// `raw` resolved, with the command line's roots in place; `file` is where it was
    /// written (for messages).
    fn workspace_for(
        &self,
        raw: &super::RawWorkspace,
        file: Option<&Path>,
    ) -> Result<super::WorkspaceSettings, ConfigError> {
        let hint = match file {
            Some(f) => format!("{} (a `[workspace]` table)", f.display()),
            None => format!(
                "the host config {} (a `[workspace]` table)",
                default_config_path().display()
            ),
        };
        let mut raw = raw.clone();
        if self.workspace_roots.is_some() {
            // Roots from the command line are checked already; configured ones are not
            // used, so a stale one does not stop this run.
            raw.roots = None;
        }
        let settings =
            super::WorkspaceSettings::resolve(&raw, hint).map_err(|e| ConfigError::Invalid {
                path: file.map(Path::to_path_buf).unwrap_or_default(),
                message: e.to_string(),
            })?;
        let mut settings = match &self.workspace_roots {
            Some(roots) => settings.with_roots(roots),
            None => settings,
        };
        settings.protected = self.workspace_protected_paths();
        Ok(settings)
    }

    /// These settings with the plugin folders the command loads from (`--plugins`,
    /// `TOOLHOST_PLUGINS`), which the workspace tools must not touch either.
    pub fn with_plugin_dirs_in_use(mut self, dirs: &[PathBuf]) -> LoadedConfig {
        // Relative ones are relative to where the command runs.
        self.plugin_dirs_in_use = dirs
            .iter()
            .filter_map(|d| std::path::absolute(d).ok())
            .collect();
        // The workers' sandboxes follow the protected paths.
        self.isolation = std::sync::OnceLock::new();
        self
    }

    /// What the workspace tools never read or write, whatever the roots say (in process,
    /// in a worker and in `run_command`'s sandbox): everything the sandboxes hide
    /// ([`LoadedConfig::protected_paths`]: state, approvals, tokens, the audit log, the
    /// trust file), the config file and the profiles' folder (and the default config
    /// folder when the config is there), and every plugin folder this host may load from
    /// (the configured ones, those the command names, the default and the system one). A
    /// tool that could write any of them could approve its own calls, change the host's
    /// config or plant a plugin the host then loads.
    pub fn workspace_protected_paths(&self) -> Vec<PathBuf> {
        let mut paths = self.protected_paths();
        let default_dir = default_config_path().parent().map(Path::to_path_buf);
        match &self.file {
            Some(file) => {
                paths.push(file.clone());
                if let Some(dir) = &default_dir
                    && file.starts_with(dir)
                {
                    paths.push(dir.clone());
                }
            }
            None => paths.extend(default_dir),
        }
        paths.push(self.profiles_dir());
        paths.extend(self.config.plugin_dirs.iter().cloned());
        paths.extend(self.plugin_dirs_in_use.iter().cloned());
        if let Some(v) = std::env::var_os("TOOLHOST_PLUGINS").filter(|v| !v.is_empty()) {
            paths.extend(std::env::split_paths(&v));
        }
        paths.push(default_plugin_dir());
        paths.push(crate::sys::dirs::SystemLayout::from_env().plugins);
        let mut unique: Vec<PathBuf> = Vec::new();
        for p in paths {
            let p = std::path::absolute(&p).unwrap_or(p);
            if p.is_absolute() && !unique.contains(&p) {
                unique.push(p);
            }
        }
        unique
    }

    fn invalid(&self, message: String) -> ConfigError {
        ConfigError::Invalid {
            path: self.file.clone().unwrap_or_default(),
            message,
        }
    }

    /// The checks besides the durations (which resolving made).
    fn validate(&self) -> Result<(), ConfigError> {
        let c = &self.config;
        for (key, n) in [
            ("mcp.max_connections", c.mcp.max_connections),
            ("mcp.max_sessions", c.mcp.max_sessions),
            ("mcp.max_sessions_per_token", c.mcp.max_sessions_per_token),
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

    /// Where state lives: `state_dir`, else `$XDG_STATE_HOME/toolhost` (else
    /// `~/.local/state/toolhost`); `None` only when no home folder can be found. Not
    /// created here.
    pub fn state_dir(&self) -> Option<PathBuf> {
        self.config
            .state_dir
            .clone()
            .or_else(crate::sys::dirs::state_dir)
    }

    /// What no sandbox may reach, whatever the roots say ([`toolhost_sandbox::protected`]):
    /// the state folder (kept outputs, lasting approvals, sessions, tokens, the audit log,
    /// the trust file), the profiles' state where it lives elsewhere, and the tokens,
    /// audit and trust files wherever the config puts them (the audit log with its
    /// rotated files).
    pub fn protected_paths(&self) -> Vec<PathBuf> {
        let mut paths: Vec<PathBuf> = self.state_dir().into_iter().collect();
        paths.push(self.profile_state_root());
        paths.extend(self.tokens_file());
        if let Ok(Some(audit)) = self.audit() {
            paths.extend(audit.files());
        }
        paths.extend(self.config.trust.file.clone());
        let mut unique: Vec<PathBuf> = Vec::new();
        for p in paths {
            if p.is_absolute() && !unique.contains(&p) {
                unique.push(p);
            }
        }
        unique
    }

    /// Where profiles keep their state: `<state_dir>/profiles` (`<name>/state` and
    /// `<name>/outputs` below it), else, with no state folder at all, the profiles
    /// folder (beside each profile's config, where older releases kept it).
    pub fn profile_state_root(&self) -> PathBuf {
        self.state_dir()
            .map(|d| d.join("profiles"))
            .unwrap_or_else(|| self.profiles_dir())
    }

    /// The bearer-token file of MCP over HTTP: `[mcp] tokens_file`, else `tokens.json` in
    /// the state directory (`None` when no state directory can be found).
    pub fn tokens_file(&self) -> Option<PathBuf> {
        self.config
            .mcp
            .tokens_file
            .clone()
            .or_else(|| self.state_dir().map(|d| d.join("tokens.json")))
    }

    /// The audit log's settings (`[audit]`), or `None` when it is switched off. Its file:
    /// Where the audit log is, whether or not it is enabled now (the host writes it,
    /// `toolhost audit` reads it): `[audit] file`, else `audit.jsonl` in the state
    /// directory (`state_dir`, else XDG's); `None` when nothing says where.
    pub fn audit_file(&self) -> Option<PathBuf> {
        self.config
            .audit
            .file
            .clone()
            .or_else(|| self.state_dir().map(|d| d.join("audit.jsonl")))
    }

    /// The audit log's settings ([`LoadedConfig::audit_file`]); `None` when it is off, an
    /// error when it is on and nothing says where it goes.
    pub fn audit(&self) -> Result<Option<crate::audit::AuditSettings>, ConfigError> {
        let a = &self.config.audit;
        if !a.enabled {
            return Ok(None);
        }
        let file = self.audit_file().ok_or_else(|| ConfigError::Invalid {
            path: self.file.clone().unwrap_or_default(),
            message: "[audit] is enabled but has no file, and there is no state folder \
                          (`state_dir`, XDG_STATE_HOME or HOME): set `[audit] file` or \
                          `enabled = false`"
                .to_owned(),
        })?;
        Ok(Some(crate::audit::AuditSettings {
            file,
            include_arguments: a.include_arguments,
            max_bytes: a.max_bytes,
            keep: a.keep,
            queue: a.queue.max(1),
            syslog: a.syslog.then(|| {
                a.syslog_socket.clone().unwrap_or_else(|| {
                    PathBuf::from(crate::audit::AuditSettings::DEFAULT_SYSLOG_SOCKET)
                })
            }),
        }))
    }

    /// The shared state's settings (`[state] backend = "postgres"`), or `None` for files.
    /// `TOOLHOST_STATE_URL` and `TOOLHOST_REPLICA` in the environment take the places of
    /// `url` and `replica`.
    pub fn state_settings(&self) -> Result<Option<crate::state::StateSettings>, ConfigError> {
        let raw = &self.config.state;
        if raw.backend == super::file::StateBackend::Files {
            return Ok(None);
        }
        let invalid = |message: String| ConfigError::Invalid {
            path: self.file.clone().unwrap_or_default(),
            message,
        };
        let url = std::env::var("TOOLHOST_STATE_URL")
            .ok()
            .filter(|u| !u.is_empty())
            .or_else(|| raw.url.clone())
            .ok_or_else(|| {
                invalid(
                    "[state] backend = \"postgres\" needs the database: set [state] url, or \
                     TOOLHOST_STATE_URL in the environment"
                        .to_owned(),
                )
            })?;
        let replica = std::env::var("TOOLHOST_REPLICA")
            .ok()
            .filter(|r| !r.is_empty())
            .or_else(|| raw.replica.clone())
            .or_else(|| {
                std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .ok()
                    .map(|h| h.trim().to_owned())
            })
            .unwrap_or_else(|| "toolhost".to_owned());
        let valid = (1..=64).contains(&replica.len())
            && replica
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !valid {
            return Err(invalid(format!(
                "[state] replica '{replica}' is not a usable name: use 1 to 64 letters, \
                 digits, '.', '_' or '-' (set it, or TOOLHOST_REPLICA)"
            )));
        }
        Ok(Some(crate::state::StateSettings {
            url,
            ca_file: raw.ca_file.clone(),
            pool_size: raw.pool_size.max(1),
            replica,
        }))
    }

    /// The trust policy of `[trust]`: the mode, the publishers' keys and the trust file
    /// (`[trust] file`, else `trust.json` in the state folder (`$XDG_STATE_HOME/toolhost`)).
    pub fn trust_policy(&self) -> Result<TrustPolicy, crate::plugins::load::trust::TrustError> {
        let t = &self.config.trust;
        let file = t
            .file
            .clone()
            .or_else(|| self.state_dir().map(|d| d.join("trust.json")));
        TrustPolicy::new(t.mode, &t.publishers, file)
    }

    /// Which plugin files may load: `[plugins]` and `[trust]`.
    pub fn load_policy(&self) -> Result<LoadPolicy, crate::plugins::load::trust::TrustError> {
        Ok(LoadPolicy {
            strict_permissions: self.config.plugins.strict_permissions,
            max_file_size: self.config.plugins.max_file_size,
            trust: self.trust_policy()?,
            isolation: std::sync::Arc::new(self.isolation_policy().clone()),
            settings: crate::PluginSettings::new(
                self.config.plugins.settings.clone(),
                self.file.as_deref().and_then(Path::parent),
            ),
            load_threads: self.config.plugins.load_threads,
        })
    }

    /// How plugins are isolated (`[isolation]`); `--isolate` then calls
    /// [`crate::IsolationPolicy::isolate_all`]. Each profile's workers may write that
    /// profile's state folder.
    pub fn isolation_policy(&self) -> &crate::IsolationPolicy {
        self.isolation.get_or_init(|| self.resolve_isolation())
    }

    /// `[isolation]` resolved, with each profile's workspace roots (a profile that does
    /// not load has none here; the commands that use it stop with its own error).
    fn resolve_isolation(&self) -> crate::IsolationPolicy {
        let c = &self.config.isolation;
        crate::IsolationPolicy {
            default: c.default,
            plugins: c.plugins.clone(),
            sandbox: c.sandbox,
            read_paths: c.read_paths.clone(),
            write_paths: c.write_paths.clone(),
            // A profile that does not load stops the commands that use it, with its own
            // error; here it just has no workspace.
            workspace_roots: self
                .profile_names()
                .iter()
                .filter_map(|name| Profile::load(self, name).ok())
                .filter(|p| !p.workspace.roots.is_empty())
                .map(|p| (p.name, p.workspace.roots))
                .collect(),
            profile_states: Some(self.profile_state_root()),
            workspace_protected: self.workspace_protected_paths(),
            default_profile: self.config.default_profile.clone(),
            allow_network: c.allow_network,
            memory_limit_bytes: c.memory_limit_mb.saturating_mul(1 << 20),
            max_processes: c.max_processes,
            containment: c.containment,
            unix_sockets: c.unix_sockets.clone(),
            open_files: c.open_files,
            max_crashes: c.max_crashes,
            crash_window: std::time::Duration::from_secs(c.crash_window_secs),
            kill_after_cancel: std::time::Duration::from_millis(c.kill_after_cancel_ms),
            start_timeout: std::time::Duration::from_secs(c.start_timeout_secs.max(1)),
            ..crate::IsolationPolicy::default()
        }
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

    /// The model server: `[model]` with the environment's overrides
    /// (`TOOLHOST_MODEL_BASE_URL`, `TOOLHOST_MODEL`, `TOOLHOST_API_KEY`, else the variable
    /// `api_key_env` names, `TOOLHOST_MODEL_STREAM`), read when the config was loaded;
    /// `None` unless both a base URL and a model are set somewhere.
    pub fn model(&self) -> Option<&ModelSettings> {
        self.resolved.model.as_ref()
    }

    /// The plugin folders the file names, in load order (relative to the file).
    pub fn plugin_dirs(&self) -> &[PathBuf] {
        &self.config.plugin_dirs
    }

    /// The control socket the file names, if any.
    pub fn control_socket(&self) -> Option<&Path> {
        self.config.control_socket.as_deref()
    }

    /// The profile used when none is named.
    pub fn default_profile(&self) -> &str {
        &self.config.default_profile
    }

    /// Whether plugin files others can change are refused (`[plugins]
    /// strict_permissions`).
    pub fn strict_permissions(&self) -> bool {
        self.config.plugins.strict_permissions
    }

    /// `[metrics]`, its address checked at load.
    pub fn metrics(&self) -> MetricsSettings {
        self.resolved.metrics
    }

    /// `[reload]`: watching and the generation count.
    pub fn reload(&self) -> ReloadSettings {
        self.resolved.reload
    }

    /// The named tool lists (`[toolsets]`) profiles use as `"@name"`.
    pub fn toolsets(&self) -> &BTreeMap<String, Vec<String>> {
        &self.config.toolsets
    }

    /// The agent settings for `profile`: `[agent]` and the profile's system prompt.
    pub fn agent(&self, profile: &Profile) -> AgentSettings {
        let mut settings = self.resolved.agent.clone();
        if let Some(prompt) = &profile.system_prompt {
            settings.system_prompt.clone_from(prompt);
        }
        settings
    }

    /// How `toolhost serve` watches its plugin directories (`[reload]`).
    pub fn watch(&self) -> crate::plugins::catalog::watch::WatchConfig {
        self.resolved.watch
    }

    /// Call time limits as a dispatcher config.
    pub fn dispatch(&self) -> crate::DispatchConfig {
        self.resolved.calls.dispatch
    }

    /// What the call pipeline (availability, approval policy, dispatcher) is built from.
    pub fn call_settings(&self) -> CallSettings {
        self.resolved.calls
    }

    /// The host config's `[output]` settings (what a profile without its own gets).
    pub fn output(&self) -> toolhost_calls::outputs::OutputSettings {
        self.resolved.output
    }

    /// The MCP frontend's settings (`[mcp]`).
    pub fn mcp(&self) -> &McpSettings {
        &self.resolved.mcp
    }

    /// `[[mcp_servers]]`: the MCP servers whose tools the host serves, checked.
    pub fn mcp_servers(&self) -> &[super::McpServerSettings] {
        &self.resolved.mcp_servers
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
        let text = match read_config_text(&file, crate::sys::permissions::PROFILE_CONFIG) {
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
            Some(t) => toml::from_str::<RawProfile>(&t).map_err(|e| ConfigError::Parse {
                path: file.clone(),
                message: e.to_string().trim_end().to_owned(),
            })?,
            None => RawProfile::default(),
        };
        let tools = match parsed.tools {
            None => None,
            Some(list) => Some(super::profile::expand(
                &list,
                &config.config.toolsets,
                &file,
            )?),
        };
        let output =
            super::settings::output_settings(&config.config.output.overridden(&parsed.output))
                .map_err(|e| ConfigError::Invalid {
                    path: if parsed.output.has_any() {
                        file.clone()
                    } else {
                        config.file.clone().unwrap_or_default()
                    },
                    message: e.to_string(),
                })?;
        let mut workspace = parsed.workspace.clone();
        workspace.roots = workspace.roots.as_ref().map(|roots| {
            roots
                .iter()
                .map(|r| super::workspace::absolute_root(r, &dir))
                .collect()
        });
        let sets_workspace = workspace.roots.is_some()
            || workspace.allow_network.is_some()
            || workspace.shell.is_some()
            || workspace.deny_programs.is_some()
            || workspace.env.is_some()
            || workspace.command_timeout_secs.is_some()
            || workspace.allow_private_addresses.is_some()
            || workspace.allow_unix_sockets.is_some();
        let workspace = config.workspace_for(
            &config.config.workspace.overridden(&workspace),
            if sets_workspace || config.file.is_none() && file.exists() {
                Some(&file)
            } else {
                config.file.as_deref()
            },
        )?;
        let dirs = ProfileDirs::under(&config.profile_state_root(), name);
        let state_dir = dirs.state();
        if dirs.root() != dir {
            // Older releases kept state beside the config: moved once, never lost.
            let old = ProfileDirs::at(dir.clone());
            for folder in Folder::ALL {
                super::state_move::move_state(&old.path(folder), &dirs.path(folder)).map_err(
                    |e| ConfigError::Invalid {
                        path: old.path(folder),
                        message: e.to_string(),
                    },
                )?;
            }
        }
        if dir.exists() {
            // Notes and conversations: private to the host's user (0700, tightened).
            // A link there is refused, not followed.
            toolhost_calls::private::ensure_private_dir(&state_dir).map_err(|source| {
                ConfigError::Invalid {
                    path: state_dir.clone(),
                    message: format!(
                        "the profile's state folder could not be made private (mode 0700): \
                         {source}"
                    ),
                }
            })?;
        }
        Ok(Profile {
            name: name.to_owned(),
            dir,
            dirs,
            tools,
            file,
            system_prompt: parsed.system_prompt,
            output,
            workspace,
        })
    }
}

impl LoadedConfig {
    /// Every profile in the profiles directory (sorted by name), plus the default
    /// profile if it has no directory.
    pub fn profiles(&self) -> Result<Vec<Profile>, ConfigError> {
        self.profile_names()
            .iter()
            .map(|n| Profile::load(self, n))
            .collect()
    }

    /// The names of every profile in the profiles directory (sorted), plus the default
    /// profile if it has no directory.
    fn profile_names(&self) -> Vec<String> {
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
        names
    }
}

/// Reads a config file the careful way: owned by the host's user or root and not
/// writable by group or others, nor its directory (or a symlink's target and its
/// directory), judged before the open and again on the opened descriptor
/// ([`open_checked`](crate::sys::permissions::open_checked)); a regular file (opened
/// without blocking) of at most [`MAX_CONFIG_FILE_SIZE`] bytes. A missing file is a
/// [`ConfigError::Read`] of kind `NotFound`.
pub(super) fn read_config_text(
    path: &Path,
    subject: crate::sys::permissions::Subject,
) -> Result<String, ConfigError> {
    use crate::sys::permissions::{OpenChecked, PermissionCheck};
    let read = |source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
    let not_a_config = |reason: String| ConfigError::NotAConfigFile {
        path: path.to_path_buf(),
        reason,
    };
    let (file, meta) =
        crate::sys::permissions::open_checked(path, subject).map_err(|e| match e {
            OpenChecked::Check(PermissionCheck::Refused(problem)) => ConfigError::Permissions {
                path: path.to_path_buf(),
                problem: Box::new(problem),
            },
            OpenChecked::Check(PermissionCheck::Io { source, .. }) => read(source),
            other @ OpenChecked::NotRegular { .. } => not_a_config(other.to_string()),
        })?;
    crate::sys::safe_open::read_opened_capped(file, &meta, MAX_CONFIG_FILE_SIZE)
        .and_then(crate::sys::safe_open::utf8)
        .map_err(|e| match e {
            crate::sys::safe_open::OpenError::Io(source) => read(source),
            other => not_a_config(other.to_string()),
        })
}

/// `[model]` with the environment's overrides (see [`LoadedConfig::model`]).
fn model_settings(m: &super::RawModel, resolved: &Resolved) -> Option<ModelSettings> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    Some(ModelSettings {
        base_url: var("TOOLHOST_MODEL_BASE_URL").or_else(|| m.base_url.clone())?,
        model: var("TOOLHOST_MODEL").or_else(|| m.model.clone())?,
        api_key: var("TOOLHOST_API_KEY").or_else(|| var(&m.api_key_env)),
        timeout: resolved.model_timeout,
        max_retries: m.max_retries,
        backoff: MODEL_RETRY_BACKOFF,
        stream: resolved.model_stream,
    })
}
