//! The `toolhost` subcommands, one file each. Every command is a clap `Args` struct whose
//! `run` returns the exit code, or the error `main` prints (once). What several commands
//! share lives here: plugin directories, loading with warnings, the profile a command runs
//! as, the terminal's approver, the async runtime, and the failures that exit with a code
//! other than 1.

pub(crate) mod agent;
pub(crate) mod approvals;
pub(crate) mod audit;
pub(crate) mod call;
pub(crate) mod check;
pub(crate) mod control;
pub(crate) mod install;
pub(crate) mod list;
pub(crate) mod new;
pub(crate) mod output;
pub(crate) mod serve;
pub(crate) mod sessions;
pub(crate) mod shell;
pub(crate) mod token;
pub(crate) mod trust;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use toolhost::{
    ConfigError, LoadPolicy, LoadReport, LoadedConfig, PluginLoader, Profile, ToolRegistry,
};

use crate::approve;

/// A failure that is more than one `error:` line and exit code 1.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Failure {
    /// The command line asks for something that cannot be done: exit code 2.
    #[error("{0}")]
    Usage(String),
    /// Several problems, each on its own `error:` line: exit code 1.
    #[error("{}", .0.join("\nerror: "))]
    Several(Vec<String>),
}

impl Failure {
    /// The process's exit code for this failure.
    pub(crate) fn exit_code(&self) -> ExitCode {
        match self {
            Failure::Usage(_) => ExitCode::from(2),
            Failure::Several(_) => ExitCode::FAILURE,
        }
    }
}

/// A usage error (exit code 2) saying `message`.
pub(crate) fn usage(message: impl Into<String>) -> anyhow::Error {
    Failure::Usage(message.into()).into()
}

/// The value parser of flags that take seconds (`--timeout 0.5`): the config file's
/// check and message, so a flag and a key accept the same numbers.
pub(crate) fn seconds(text: &str) -> Result<Duration, toolhost::SecondsError> {
    text.parse::<f64>()
        .map_err(|_| toolhost::SecondsError)
        .and_then(toolhost::positive_seconds)
}

/// `--workspace`, shared by the commands that run a profile's tools.
#[derive(clap::Args, Default)]
pub(crate) struct WorkspaceRoots {
    /// A folder the workspace tools (read_file, edit_file, run_command, ...) may use
    /// (repeatable; the first is where relative paths start), in place of the profiles'
    /// `[workspace] roots`.
    #[arg(long = "workspace", value_name = "DIR")]
    pub(crate) roots: Vec<PathBuf>,
}

/// `--plugins`, shared by the commands that load plugins.
#[derive(clap::Args)]
pub(crate) struct PluginDirs {
    /// A plugin directory (repeatable). Default: $TOOLHOST_PLUGINS (colon-separated), else
    /// $XDG_DATA_HOME/toolhost/plugins (~/.local/share/toolhost/plugins).
    #[arg(long = "plugins", value_name = "DIR")]
    pub(crate) dirs: Vec<PathBuf>,
    /// Run every plugin in a worker process of its own (supervised and sandboxed; see
    /// `[isolation]` in the config for per-plugin choices).
    #[arg(long)]
    pub(crate) isolate: bool,
}

impl PluginDirs {
    /// `--plugins`, else $TOOLHOST_PLUGINS, else the config's `plugin_dirs`, else the
    /// default directory.
    pub(crate) fn resolve(&self, config: &LoadedConfig) -> Vec<PathBuf> {
        if !self.dirs.is_empty() {
            return self.dirs.clone();
        }
        if let Some(v) = std::env::var_os("TOOLHOST_PLUGINS").filter(|v| !v.is_empty()) {
            return std::env::split_paths(&v).collect();
        }
        if !config.plugin_dirs().is_empty() {
            return config.plugin_dirs().to_vec();
        }
        vec![toolhost::default_plugin_dir()]
    }
}

/// The plugin directories a command uses when none is given on its command line:
/// $TOOLHOST_PLUGINS, else the config's `plugin_dirs`, else the default directory.
pub(crate) fn configured_plugin_dirs(config: &LoadedConfig) -> Vec<PathBuf> {
    PluginDirs {
        dirs: Vec::new(),
        isolate: false,
    }
    .resolve(config)
}

/// The control socket: `explicit` (`--control`), else the config's, else the default.
pub(crate) fn control_socket(config: &LoadedConfig, explicit: Option<PathBuf>) -> PathBuf {
    explicit
        .or_else(|| config.control_socket().map(PathBuf::from))
        .unwrap_or_else(toolhost::default_control_path)
}

/// The profile a one-shot command runs as: the one named, else the config's default
/// profile, loaded from its directory (the default profile may have none: it then gets
/// every tool).
pub(crate) fn resolve_profile(
    config: &LoadedConfig,
    requested: Option<&str>,
) -> Result<Profile, ConfigError> {
    Profile::load(config, requested.unwrap_or(config.default_profile()))
}

/// The one profile a one-shot command's door serves: `profile` with `registry`, its
/// state folder's host requests, and its output budget and kept outputs (with
/// `read_output`).
pub(crate) fn profile_door_scope(
    config: &LoadedConfig,
    profile: &Profile,
    registry: ToolRegistry,
) -> anyhow::Result<Arc<dyn toolhost::Profiles>> {
    let requests = Arc::new(profile.requests());
    let store = Arc::new(output_store(config, profile)?);
    let scope = toolhost::ProfileScope::new(&profile.name, Arc::new(registry), Some(requests))
        .with_outputs(store, profile.output);
    Ok(Arc::new(toolhost::FixedProfile(scope)))
}

/// The shared state of the config's replicas (`[state] backend = "postgres"`), connected
/// once per process, on first use (`None`: files). `listen`: hear other replicas'
/// changes (`serve` asks first; a one-shot command reads the database each time).
pub(crate) fn shared_state(
    config: &LoadedConfig,
    listen: bool,
) -> anyhow::Result<Option<Arc<toolhost::SharedState>>> {
    static STATE: std::sync::OnceLock<Arc<toolhost::SharedState>> = std::sync::OnceLock::new();
    let Some(settings) = config.state_settings()? else {
        return Ok(None);
    };
    if let Some(state) = STATE.get() {
        return Ok(Some(Arc::clone(state)));
    }
    let state = toolhost::SharedState::connect(settings, listen)?;
    Ok(Some(Arc::clone(STATE.get_or_init(|| state))))
}

/// `profile`'s kept outputs: its folder, or the shared state.
pub(crate) fn output_store(
    config: &LoadedConfig,
    profile: &Profile,
) -> anyhow::Result<toolhost::OutputStore> {
    Ok(match shared_state(config, false)? {
        Some(state) => toolhost::OutputStore::shared(
            &profile.name,
            &profile.output,
            Arc::new(toolhost::state::SharedOutputStore::new(state)),
        ),
        None => toolhost::OutputStore::for_profile(&profile.dirs, &profile.output),
    })
}

/// The config's audit log, opened (`None` when `[audit] enabled = false`): its file, or
/// this replica's chain in the shared state.
pub(crate) fn audit_log(
    config: &LoadedConfig,
) -> anyhow::Result<Option<Arc<toolhost::audit::AuditLog>>> {
    let Some(settings) = config.audit()? else {
        return Ok(None);
    };
    Ok(Some(match shared_state(config, false)? {
        Some(state) => toolhost::audit::AuditLog::open_shared(&settings, &state),
        None => toolhost::audit::AuditLog::open(&settings)?,
    }))
}

/// A one-shot command's door with what every door of the binary has: `profile`'s lasting
/// approvals and the audit log.
pub(crate) fn with_audit_and_approvals(
    door: toolhost::CallDoor,
    config: &LoadedConfig,
    profile: &Profile,
) -> anyhow::Result<toolhost::CallDoor> {
    let lasting: Arc<dyn toolhost::LastingApprovals> = match shared_state(config, false)? {
        Some(state) => Arc::new(toolhost::state::SharedApprovals::new(
            state,
            [profile.name.clone()],
        )),
        None => Arc::new(toolhost::ApprovalFiles::new([(
            profile.name.clone(),
            profile.dirs.clone(),
        )])),
    };
    let door = door.with_lasting_approvals(lasting);
    Ok(match audit_log(config)? {
        Some(log) => door.with_observer(log),
        None => door,
    })
}

/// A loader with the config's load policy (every plugin in a worker with `--isolate`).
pub(crate) fn new_loader(config: &LoadedConfig, isolate: bool) -> anyhow::Result<PluginLoader> {
    new_loader_with(load_policy(config, isolate)?)
}

/// The config's load policy; `isolate`: every plugin in a worker.
pub(crate) fn load_policy(config: &LoadedConfig, isolate: bool) -> anyhow::Result<LoadPolicy> {
    let mut policy = config.load_policy()?;
    if isolate {
        let mut isolation = toolhost::IsolationPolicy::clone(&policy.isolation);
        let kept = isolation.isolate_all();
        if !kept.is_empty() {
            tracing::warn!(
                "--isolate: every plugin runs in a sandboxed worker except {}, which \
                 [isolation.plugins] keeps in-process; remove {} from that table to isolate \
                 {} too",
                kept.join(", "),
                if kept.len() == 1 { "it" } else { "them" },
                if kept.len() == 1 { "it" } else { "them" }
            );
        }
        policy.isolation = std::sync::Arc::new(isolation);
    }
    Ok(policy)
}

/// A loader with `policy`.
pub(crate) fn new_loader_with(policy: LoadPolicy) -> anyhow::Result<PluginLoader> {
    PluginLoader::with_policy(policy).map_err(|e| {
        anyhow::anyhow!(
            "could not create the private directory plugins are loaded from (under {}): {e}",
            std::env::temp_dir().display()
        )
    })
}

/// Loads the directories and connects to the config's MCP servers (`[[mcp_servers]]`,
/// their tools after the plugins'); prints every load, connection and registry error to
/// stderr as a warning.
fn load(
    config: &LoadedConfig,
    loader: &PluginLoader,
    report: LoadReport,
) -> (LoadReport, ToolRegistry) {
    for e in &report.errors {
        crate::output::warning(format_args!("{e}"));
    }
    // What serve logs and status shows: keys a plugin does not read, tables no plugin
    // reads (a misspelt plugin name).
    for w in loader.policy().settings.warnings(
        report
            .plugins
            .iter()
            .map(|p| (p.name.as_str(), p.warnings.as_slice())),
    ) {
        crate::output::warning(format_args!("{w}"));
    }
    let (servers, unreachable) = toolhost::McpServers::start_for_command(
        config.mcp_servers(),
        config
            .state_dir()
            .unwrap_or_else(std::env::temp_dir)
            .join("mcp-servers"),
        &loader.policy().isolation,
    );
    for e in &unreachable {
        crate::output::warning(format_args!("{e}"));
    }
    let (registry, problems) = toolhost::ToolRegistry::from_tools(
        report
            .plugins
            .iter()
            .flat_map(|p| p.tools.iter().cloned())
            .chain(servers),
    );
    for e in &problems {
        crate::output::warning(format_args!("{e}"));
    }
    (report, registry)
}

/// The plugins a command loaded, narrowed to what its profile's agent sees.
pub(crate) struct Loaded {
    /// What loading found.
    pub(crate) report: LoadReport,
    /// The profile's tools.
    pub(crate) registry: ToolRegistry,
    /// The profile.
    pub(crate) profile: Profile,
    /// Where the profile's tools' descriptions name tools it does not show (the
    /// description rule); each command says so in its own way.
    pub(crate) mentions: Vec<toolhost::Mention>,
}

/// Loads the plugins, applies the config's risk overrides and narrows the registry to
/// what the profile's agent sees (the one named, else the default profile). Configuration
/// problems stop here.
pub(crate) fn setup(
    config: &LoadedConfig,
    loader: &PluginLoader,
    dirs: &[PathBuf],
    profile: Option<&str>,
) -> anyhow::Result<Loaded> {
    setup_from(config, loader, loader.load_dirs(dirs), profile)
}

/// [`setup`] for a one-shot command that may not call most tools (`list`, `call`): the
/// plugins whose files are as the plugin index last saw them are answered from it, and
/// load only if one of their tools is called (see `toolhost::PluginIndex`). Without a
/// state folder, every plugin loads.
pub(crate) fn setup_indexed(
    config: &LoadedConfig,
    loader: &Arc<PluginLoader>,
    dirs: &[PathBuf],
    profile: Option<&str>,
) -> anyhow::Result<Loaded> {
    let Some(state) = config.state_dir() else {
        return setup(config, loader, dirs, profile);
    };
    let (mut index, problem) = toolhost::PluginIndex::open(state.join(toolhost::INDEX_FILE));
    if let Some(problem) = problem {
        tracing::warn!("{problem}");
    }
    let loaded = loader.load_dirs_indexed(dirs, &mut index);
    tracing::debug!(
        "{} of {} plugins answered from the plugin index",
        loaded.from_index,
        loaded.report.plugins.len()
    );
    if let Err(e) = index.save() {
        tracing::warn!("{e}; the next command loads every plugin again");
    }
    setup_from(config, loader, loaded.report, profile)
}

fn setup_from(
    config: &LoadedConfig,
    loader: &PluginLoader,
    report: LoadReport,
    profile: Option<&str>,
) -> anyhow::Result<Loaded> {
    let (report, registry) = load(config, loader, report);
    let outcome = toolhost::apply_risk_overrides(&registry, &config.risk_overrides());
    if !outcome.refused.is_empty() {
        return Err(Failure::Several(outcome.refused).into());
    }
    for line in &outcome.lowered {
        tracing::warn!("{line}");
    }
    for name in &outcome.unmatched {
        crate::output::warning(format_args!(
            "the config overrides the risk of tool '{name}', which no loaded plugin provides \
             (a typo?)"
        ));
    }
    let profile = resolve_profile(config, profile)?;
    let registry = profile.check(&outcome.registry)?;
    let mentions = toolhost::DescriptionRule::for_plugins(&report.plugins).check(&registry);
    Ok(Loaded {
        report,
        registry,
        profile,
        mentions,
    })
}

/// Who approves calls that need it: nobody asked with `--yes` (all approved), the person
/// at the terminal, or, with no terminal, nobody (refused, with `hint`).
pub(crate) fn terminal_approver(yes: bool, hint: &str) -> Arc<dyn toolhost::Approver> {
    if yes {
        Arc::new(toolhost::AutoApprove)
    } else if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        Arc::new(approve::TerminalApprover)
    } else {
        Arc::new(toolhost::NobodyToAsk {
            hint: hint.to_owned(),
        })
    }
}

/// A multi-threaded async runtime.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("could not start the async runtime: {e}"))
}
