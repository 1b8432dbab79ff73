//! The `toolhost` command: list the tools of a plugin directory, call one, check a plugin
//! file, run a long-lived host (`serve`) and talk to it (`reload`, `status`,
//! `call --control`). Everything goes through the library's loader, registry and
//! dispatcher.

mod agent_cli;
mod approve;
mod output;
mod remote;
mod token_cli;
mod trust_cli;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use output::outln;
use serde_json::Value;
use toolhost::{
    ApprovalPolicy, Availability, DispatchConfig, Dispatcher, LoadReport, LoadedConfig,
    PluginLoader, Profile, ToolCall, ToolRegistry, Turn, TurnIdentity,
};

/// Loads tools for LLM agents from compiled plugins and runs them.
#[derive(Parser)]
#[command(name = "toolhost", version, about, long_about = None)]
struct Cli {
    /// The config file (default: $XDG_CONFIG_HOME/toolhost/config.toml; a missing default
    /// file means the defaults).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Load the plugins once and print their tools.
    List {
        #[command(flatten)]
        plugins: PluginDirs,
        /// Print a JSON array (with each tool's schema and plugin file) instead of a table.
        #[arg(long)]
        json: bool,
        /// Show exactly what this profile's agent sees, and the size of its tool specs.
        #[arg(long, value_name = "NAME")]
        profile: Option<String>,
    },
    /// Run one tool call and print its output (exit 0 on success, 1 on an error result).
    Call {
        /// The tool's name.
        tool: String,
        /// The arguments as a JSON object, e.g. '{"timezone": "Europe/Paris"}'.
        #[arg(default_value = "{}")]
        args: String,
        #[command(flatten)]
        plugins: PluginDirs,
        /// Seconds the call may run before it is cancelled (interactive tools too).
        /// Default: the config's `calls.timeout_secs`, else 60.
        #[arg(long)]
        timeout: Option<f64>,
        /// Run the call in the host listening on this control socket instead of loading
        /// the plugins here.
        #[arg(long, value_name = "PATH")]
        control: Option<PathBuf>,
        /// Call as this profile's agent: only its tools.
        #[arg(long, value_name = "NAME")]
        profile: Option<String>,
        /// Approve write, destructive and network tools without asking. Without it, a
        /// terminal is asked; with no terminal such calls are refused.
        #[arg(long)]
        yes: bool,
    },
    /// Run a long-lived host: load the plugins, reload them when their files change,
    /// answer `reload`, `status` and `call` on the control socket.
    Serve {
        #[command(flatten)]
        plugins: PluginDirs,
        /// Don't watch the plugin directories; rescan only on `toolhost reload`.
        #[arg(long)]
        no_watch: bool,
        /// The control socket (default: $XDG_RUNTIME_DIR/toolhost/control.sock, else
        /// $TMPDIR/toolhost-$UID/control.sock).
        #[arg(long, value_name = "PATH")]
        control: Option<PathBuf>,
        /// Past this many reloads, status and the log recommend a restart (each reload
        /// keeps the old library mapped). Default: the config's, else 64.
        #[arg(long)]
        max_generations: Option<u64>,
        /// Seconds one call may run before it is cancelled. Default: the config's, else 60.
        #[arg(long)]
        timeout: Option<f64>,
        /// Also serve the tools over MCP: `stdio` (for clients that start toolhost
        /// themselves) or `http` (streamable HTTP at http://ADDR/mcp, see --listen).
        #[arg(long, value_enum, value_name = "TRANSPORT")]
        mcp: Option<McpTransportArg>,
        /// With --mcp http: the address to listen on (port 0 picks a free port; the log
        /// says which).
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8765")]
        listen: std::net::SocketAddr,
        /// With --mcp: the profile whose tools MCP clients see. Default: the config's
        /// default_profile ("default": every tool, unless a profile of that name lists some).
        /// Over HTTP, a token made for a profile is served that profile instead.
        #[arg(long, value_name = "NAME")]
        profile: Option<String>,
        /// With --mcp http: serve without bearer tokens. Only for loopback addresses, and
        /// then every user and program on this machine can call the tools.
        #[arg(long)]
        no_auth: bool,
        /// With --mcp http on an address other machines can reach: serve plain HTTP
        /// anyway (tokens, arguments and results cross the network unencrypted).
        #[arg(long)]
        insecure_http: bool,
        /// With --mcp http: serve HTTPS with this certificate chain (PEM).
        #[arg(long, value_name = "FILE", requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// With --mcp http: the private key of --tls-cert (PEM).
        #[arg(long, value_name = "FILE", requires = "tls_cert")]
        tls_key: Option<PathBuf>,
    },
    /// Manage the bearer tokens MCP clients need for `serve --mcp http`.
    Token {
        #[command(subcommand)]
        action: token_cli::TokenAction,
    },
    /// Run one turn of a profile's agent: the model gets the prompt and the profile's
    /// tools; the answer goes to stdout, tool calls and results to stderr.
    Run {
        #[command(flatten)]
        agent: AgentOpts,
        /// What to ask.
        prompt: String,
    },
    /// Talk with a profile's agent on the terminal; tool calls, approvals and results show
    /// as they happen.
    Chat {
        #[command(flatten)]
        agent: AgentOpts,
    },
    /// Make the running host rescan its plugin directories now; print what changed.
    Reload {
        /// The host's control socket (default as for `serve`).
        #[arg(long, value_name = "PATH")]
        control: Option<PathBuf>,
        /// Print the JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Show the running host's plugins, generations, errors and per-tool statistics.
    Status {
        /// The host's control socket (default as for `serve`).
        #[arg(long, value_name = "PATH")]
        control: Option<PathBuf>,
        /// Print JSON instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// Validate one plugin file: first the static checks (permissions, trust mode, file
    /// type, size, ELF header; none of the file's code runs), then load it and print its
    /// name, versions and tools, or why it is refused.
    ///
    /// Loading a library runs its initialisers (code in the file) in this process, with
    /// your user's rights: `check` is no way to inspect a file you do not trust. (An
    /// isolated worker process for that is planned.)
    Check {
        /// The plugin file (a .so).
        file: PathBuf,
        /// Run only the static checks; do not load the library.
        #[arg(long)]
        no_load: bool,
    },
    /// Pin plugin files for `[trust] mode = "pinned"` (pins count in "signed" mode too):
    /// records each file's sha256 with its plugin name and version in the trust file
    /// (0600, in the state directory unless `[trust] file` says otherwise).
    ///
    /// The file must pass the static checks; then it is loaded once to read its plugin
    /// name and version (loading runs its initialisers: check the file first), unless
    /// --no-load is given.
    Trust {
        /// The plugin files to pin.
        #[arg(value_name = "FILE", required_unless_present_any = ["list", "remove"])]
        files: Vec<PathBuf>,
        /// Print the pinned files.
        #[arg(long, conflicts_with_all = ["files", "remove"])]
        list: bool,
        /// Remove pins: by the file's path as pinned, or by sha256 (repeatable).
        #[arg(long, value_name = "FILE|SHA256", conflicts_with = "files")]
        remove: Vec<String>,
        /// Pin by sha256 only, without loading the file (its plugin name and version are
        /// not recorded).
        #[arg(long)]
        no_load: bool,
    },
}

/// What `run` and `chat` share.
#[derive(clap::Args)]
struct AgentOpts {
    #[command(flatten)]
    plugins: PluginDirs,
    /// The profile whose agent runs (default: the config's default_profile).
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
    /// Continue this session instead of starting one.
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// Approve write, destructive and network tools without asking.
    #[arg(long)]
    yes: bool,
}

impl AgentOpts {
    fn resolve(self, config: &LoadedConfig) -> agent_cli::AgentArgs {
        agent_cli::AgentArgs {
            dirs: self.plugins.resolve(config),
            profile: self.profile,
            session: self.session,
            yes: self.yes,
        }
    }
}

/// `--mcp`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum McpTransportArg {
    /// One client on stdin/stdout.
    Stdio,
    /// Streamable HTTP on --listen.
    Http,
}

#[derive(clap::Args)]
struct PluginDirs {
    /// A plugin directory (repeatable). Default: $TOOLHOST_PLUGINS (colon-separated), else
    /// $XDG_DATA_HOME/toolhost/plugins (~/.local/share/toolhost/plugins).
    #[arg(long = "plugins", value_name = "DIR")]
    dirs: Vec<PathBuf>,
}

impl PluginDirs {
    /// `--plugins`, else $TOOLHOST_PLUGINS, else the config's `plugin_dirs`, else the
    /// default directory.
    fn resolve(&self, config: &LoadedConfig) -> Vec<PathBuf> {
        if !self.dirs.is_empty() {
            return self.dirs.clone();
        }
        if let Some(v) = std::env::var_os("TOOLHOST_PLUGINS").filter(|v| !v.is_empty()) {
            return std::env::split_paths(&v).collect();
        }
        if !config.config.plugin_dirs.is_empty() {
            return config.config.plugin_dirs.clone();
        }
        vec![default_plugin_dir()]
    }
}

fn default_plugin_dir() -> PathBuf {
    let data = std::env::var_os("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."));
    data.join("toolhost").join("plugins")
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A serving host logs its loads, reloads and removals; one-shot commands only problems.
    let default_level = if matches!(cli.command, Command::Serve { .. }) {
        // rmcp logs every stateless HTTP request at info.
        "info,rmcp=warn"
    } else {
        "warn"
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TOOLHOST_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level)),
        )
        .init();
    let config = match LoadedConfig::load(cli.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    if !config.config.plugins.strict_permissions {
        tracing::warn!(
            "[plugins] strict_permissions = false: plugin files that other users can change \
             are loaded (anyone who can write them runs code as this user); for development \
             only"
        );
    }
    let socket = |explicit: Option<PathBuf>| {
        explicit
            .or_else(|| config.config.control_socket.clone())
            .unwrap_or_else(toolhost::default_control_path)
    };
    // Every command writes stdout through `outln!`: a closed pipe ends it quietly.
    output::exit_code(match cli.command {
        Command::List {
            plugins,
            json,
            profile,
        } => list(&config, &plugins.resolve(&config), json, profile.as_deref()),
        Command::Call {
            plugins,
            control: Some(_),
            yes,
            ..
        } if !plugins.dirs.is_empty() || yes => {
            eprintln!(
                "error: --plugins and --yes don't go with --control: the running host's plugins \
                 and approval policy are used (the control socket cannot approve calls)"
            );
            Ok(ExitCode::from(2))
        }
        Command::Call {
            tool,
            args,
            timeout,
            control: Some(socket),
            profile,
            ..
        } => match parse_call_args(
            &args,
            timeout.unwrap_or(config.dispatch().timeout.as_secs_f64()),
        ) {
            Ok((arguments, timeout)) => {
                remote::call(&socket, &tool, arguments, timeout, profile.as_deref())
            }
            Err(code) => Ok(code),
        },
        Command::Call {
            tool,
            args,
            plugins,
            timeout,
            control: None,
            profile,
            yes,
        } => call(
            &config,
            &CallArgs {
                tool: &tool,
                args: &args,
                dirs: plugins.resolve(&config),
                timeout,
                profile: profile.as_deref(),
                yes,
            },
        ),
        Command::Check { file, no_load } => check(&config, &file, no_load),
        Command::Trust {
            files,
            list,
            remove,
            no_load,
        } => trust_cli::trust(
            &config,
            &trust_cli::TrustArgs {
                files,
                list,
                remove,
                no_load,
            },
        ),
        Command::Serve {
            plugins,
            no_watch,
            control,
            max_generations,
            timeout,
            mcp,
            listen,
            profile,
            no_auth,
            insecure_http,
            tls_cert,
            tls_key,
        } => Ok(remote::serve(
            &config,
            remote::ServeArgs {
                dirs: plugins.resolve(&config),
                watch: !no_watch && config.config.reload.watch,
                control_explicit: control.is_some(),
                control: socket(control),
                max_generations: max_generations.unwrap_or(config.config.reload.max_generations),
                timeout,
                mcp: mcp.map(|m| match m {
                    McpTransportArg::Stdio => remote::McpMode::Stdio,
                    McpTransportArg::Http => remote::McpMode::Http(remote::HttpArgs {
                        listen,
                        no_auth,
                        insecure_http,
                        tls: tls_cert.zip(tls_key),
                    }),
                }),
                profile,
            },
        )),
        Command::Run { agent, prompt } => agent_cli::run(&config, &agent.resolve(&config), &prompt),
        Command::Chat { agent } => agent_cli::chat(&config, &agent.resolve(&config)),
        Command::Token { action } => token_cli::run(&config, action),
        Command::Reload { control, json } => remote::reload(&socket(control), json),
        Command::Status { control, json } => remote::status(&socket(control), json),
    })
}

pub(crate) fn new_loader(config: &LoadedConfig) -> Result<PluginLoader, ExitCode> {
    let policy = config.load_policy().map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::FAILURE
    })?;
    new_loader_with(policy)
}

/// A loader with `policy`, or the reason on stderr.
pub(crate) fn new_loader_with(policy: toolhost::LoadPolicy) -> Result<PluginLoader, ExitCode> {
    PluginLoader::with_policy(policy).map_err(|e| {
        eprintln!(
            "error: could not create the private directory plugins are loaded from (under {}): {e}",
            std::env::temp_dir().display()
        );
        ExitCode::FAILURE
    })
}

/// Loads the directories, prints every load and registry error to stderr.
fn load(loader: &PluginLoader, dirs: &[PathBuf]) -> (LoadReport, ToolRegistry) {
    let report = loader.load_dirs(dirs);
    for e in &report.errors {
        eprintln!("warning: {e}");
    }
    let (registry, problems) = ToolRegistry::from_plugins(&report.plugins);
    for e in &problems {
        eprintln!("warning: {e}");
    }
    (report, registry)
}

/// Loads the plugins, applies the config's risk overrides and, with a profile, narrows
/// the registry to what that profile's agent sees. Configuration problems stop here.
pub(crate) fn setup(
    config: &LoadedConfig,
    loader: &PluginLoader,
    dirs: &[PathBuf],
    profile: Option<&str>,
) -> Result<(LoadReport, ToolRegistry, Profile), ExitCode> {
    let (report, registry) = load(loader, dirs);
    let outcome = toolhost::apply_risk_overrides(&registry, &config.risk_overrides());
    if !outcome.refused.is_empty() {
        for e in &outcome.refused {
            eprintln!("error: {e}");
        }
        return Err(ExitCode::FAILURE);
    }
    for line in &outcome.lowered {
        tracing::warn!("{line}");
    }
    for name in &outcome.unmatched {
        eprintln!(
            "warning: the config overrides the risk of tool '{name}', which no loaded plugin provides (a typo?)"
        );
    }
    // Every command runs as a profile's agent: the one named, else the default profile.
    let name = profile.unwrap_or(&config.config.default_profile);
    let loaded = Profile::load(config, name).and_then(|p| {
        let registry = p.check(&outcome.registry)?;
        Ok((registry, p))
    });
    let (registry, profile) = loaded.map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::FAILURE
    })?;
    Ok((report, registry, profile))
}

fn list(
    config: &LoadedConfig,
    dirs: &[PathBuf],
    as_json: bool,
    profile: Option<&str>,
) -> std::io::Result<ExitCode> {
    let loader = match new_loader(config) {
        Ok(l) => l,
        Err(code) => return Ok(code),
    };
    let (report, registry, _) = match setup(config, &loader, dirs, profile) {
        Ok(loaded) => loaded,
        Err(code) => return Ok(code),
    };
    if report.plugins.is_empty() {
        let shown: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        eprintln!("note: no plugins loaded from {}", shown.join(", "));
    }
    let availability = Availability::new(Duration::from_secs_f64(
        config.config.availability.cache_secs,
    ));
    if as_json {
        let tools = registry.listing();
        match serde_json::to_string_pretty(&tools) {
            Ok(s) => outln!("{s}")?,
            Err(e) => {
                eprintln!("error: could not encode the listing: {e}");
                return Ok(ExitCode::FAILURE);
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    // With a profile: exactly what its agent sees. Without: every tool, deny ones included.
    let visible = availability.visible_specs(&registry);
    let shown: Vec<&toolhost::RegisteredTool> = registry
        .iter()
        .filter(|t| profile.is_none() || visible.iter().any(|s| s.name == t.spec().name))
        .collect();
    let rows: Vec<[String; 5]> = shown
        .iter()
        .map(|t| {
            let spec = t.spec();
            [
                spec.name.clone(),
                spec.risk.to_string(),
                if spec.interactive { "yes" } else { "no" }.to_owned(),
                t.tool().origin().plugin_name().to_owned(),
                summary(&spec.description, 72),
            ]
        })
        .collect();
    print_table(
        &["NAME", "RISK", "INTERACTIVE", "PLUGIN", "DESCRIPTION"],
        &rows,
    )?;
    for t in registry.iter() {
        if let Err(reason) = availability.check(t.spec()) {
            outln!("unavailable: {reason}")?;
        }
    }
    if let Some(name) = profile {
        // What the model is sent: name, description and parameters of each tool it sees.
        let chars: usize = visible
            .iter()
            .map(|s| {
                serde_json::json!({"name": s.name, "description": s.description, "parameters": s.schema})
                    .to_string()
                    .chars()
                    .count()
            })
            .sum();
        outln!()?;
        outln!(
            "profile '{name}': its agent sees {} tools; their specs take {chars} characters (about {} tokens)",
            visible.len(),
            chars.div_ceil(4)
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The first line of `text`, cut to `max` characters.
pub(crate) fn summary(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or_default().trim();
    if line.chars().count() <= max {
        line.to_owned()
    } else {
        let cut: String = line.chars().take(max.saturating_sub(3)).collect();
        format!("{cut}...")
    }
}

/// Prints a table with aligned columns (an `Err` if stdout is closed).
pub(crate) fn print_table<const N: usize>(
    header: &[&str; N],
    rows: &[[String; N]],
) -> std::io::Result<()> {
    let mut widths = header.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == N {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  "));
            }
        }
        outln!("{}", out.trim_end())
    };
    line(header.to_vec())?;
    for row in rows {
        line(row.iter().map(String::as_str).collect())?;
    }
    Ok(())
}

/// Parses the arguments JSON and the timeout; on a usage error prints it and returns
/// exit code 2.
fn parse_call_args(args: &str, timeout: f64) -> Result<(Value, Duration), ExitCode> {
    let usage = ExitCode::from(2);
    let arguments: Value = match serde_json::from_str(args) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => {
            eprintln!("error: the arguments must be a JSON object, e.g. '{{\"key\": \"value\"}}'");
            return Err(usage);
        }
        Err(e) => {
            eprintln!(
                "error: the arguments are not valid JSON ({e}); pass one JSON object in single quotes"
            );
            return Err(usage);
        }
    };
    match Duration::try_from_secs_f64(timeout) {
        Ok(t) if !t.is_zero() => Ok((arguments, t)),
        _ => {
            eprintln!("error: --timeout must be a positive number of seconds");
            Err(usage)
        }
    }
}

/// What `toolhost call` (in this process) was asked for.
struct CallArgs<'a> {
    tool: &'a str,
    args: &'a str,
    dirs: Vec<PathBuf>,
    timeout: Option<f64>,
    profile: Option<&'a str>,
    yes: bool,
}

fn call(config: &LoadedConfig, a: &CallArgs<'_>) -> std::io::Result<ExitCode> {
    let limits = config.dispatch();
    let timeout = a.timeout.unwrap_or(limits.timeout.as_secs_f64());
    let (arguments, timeout) = match parse_call_args(a.args, timeout) {
        Ok(parsed) => parsed,
        Err(code) => return Ok(code),
    };
    let loader = match new_loader(config) {
        Ok(l) => l,
        Err(code) => return Ok(code),
    };
    let (_report, registry, profile) = match setup(config, &loader, &a.dirs, a.profile) {
        Ok(loaded) => loaded,
        Err(code) => return Ok(code),
    };
    let (tool, yes) = (a.tool, a.yes);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: could not start the async runtime: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let approver: Arc<dyn toolhost::Approver> = if yes {
        Arc::new(toolhost::AutoApprove)
    } else if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        Arc::new(approve::TerminalApprover)
    } else {
        Arc::new(toolhost::NobodyToAsk {
            hint: "pass --yes to approve it without a terminal".to_owned(),
        })
    };
    let availability = Arc::new(Availability::new(Duration::from_secs_f64(
        config.config.availability.cache_secs,
    )));
    let policy = ApprovalPolicy::new(
        approver,
        availability,
        config.config.approval.remember_for_session,
    );
    let explicit = a.timeout.is_some();
    let dispatcher = Dispatcher::new(
        DispatchConfig {
            timeout,
            interactive_timeout: if explicit {
                timeout
            } else {
                limits.interactive_timeout
            },
            ..limits
        },
        Arc::new(policy),
    );
    let mut turn = Turn::new(TurnIdentity {
        profile_id: profile.name.clone(),
        session_id: format!("cli-{}", std::process::id()),
        model: "none".to_owned(),
    });
    // Tools that keep per-profile state (memory) find the profile's folder.
    turn.services.requests = Some(Arc::new(toolhost::ProfileRequests::new(
        profile.state_dir.clone(),
    )));
    let call = ToolCall {
        id: "cli-1".to_owned(),
        name: tool.to_owned(),
        arguments,
    };
    let result = runtime.block_on(async {
        let cancel = turn.cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("interrupted: cancelling the call");
                cancel.cancel();
            }
        });
        dispatcher.call(&registry, &turn, call).await
    });
    if result.is_error {
        eprintln!("error: {}", result.output);
        Ok(ExitCode::FAILURE)
    } else {
        outln!("{}", result.output)?;
        Ok(ExitCode::SUCCESS)
    }
}

fn check(config: &LoadedConfig, file: &Path, no_load: bool) -> std::io::Result<ExitCode> {
    let loader = match new_loader(config) {
        Ok(l) => l,
        Err(code) => return Ok(code),
    };
    outln!("file:        {}", file.display())?;
    outln!("static checks (none of the file's code runs):")?;
    let facts = match loader.inspect(file) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let policy = loader.policy();
    outln!(
        "  type, size:  regular file, {} bytes (max_file_size {})",
        facts.size,
        policy.max_file_size
    )?;
    if policy.strict_permissions {
        outln!(
            "  permissions: ok (owner uid {}, mode {:04o}; its directory is not writable by others)",
            facts.uid,
            facts.mode & 0o7777
        )?;
    } else {
        outln!("  permissions: not checked ([plugins] strict_permissions = false)")?;
    }
    outln!("  ELF header:  complete")?;
    outln!("  sha256:      {}", facts.sha256)?;
    match (&facts.untrusted, policy.trust.mode()) {
        (Some(refusal), _) => {
            eprintln!("error: {}: {refusal}", file.display());
            return Ok(ExitCode::FAILURE);
        }
        (None, toolhost::TrustMode::Any) => {
            outln!("  trust:       mode \"any\" (every file that passes the checks loads)")?
        }
        (None, toolhost::TrustMode::Pinned) => outln!("  trust:       pinned")?,
        (None, toolhost::TrustMode::Signed) => {
            outln!("  trust:       signed by a listed publisher, or pinned")?
        }
    }
    if no_load {
        outln!("ok (not loaded: --no-load)")?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "loading it: this runs the library's initialisers (code in the file) in this process, \
         so `check` is no way to inspect a file you do not trust"
    )?;
    let plugin = match loader.load_file(file) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    outln!("plugin:      {} {}", plugin.name, plugin.version)?;
    outln!(
        "plugin-api:  {} (this host: {})",
        plugin.api_version,
        toolhost::API_VERSION
    )?;
    outln!("tools:       {}", plugin.tools.len())?;
    let (_registry, problems) = ToolRegistry::from_plugins(std::slice::from_ref(&plugin));
    for t in &plugin.tools {
        let spec = t.spec();
        let flag = if spec.interactive {
            ", interactive"
        } else {
            ""
        };
        outln!(
            "  {} ({}{flag}): {}",
            spec.name,
            spec.risk,
            summary(&spec.description, 72)
        )?;
    }
    for skipped in &plugin.skipped_tools {
        eprintln!("error: {skipped}; the tool would be left out");
    }
    for e in &problems {
        eprintln!("error: {e}");
    }
    if problems.is_empty() && plugin.skipped_tools.is_empty() {
        outln!("ok")?;
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::FAILURE)
    }
}
