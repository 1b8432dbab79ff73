//! The `toolhost` command: list the tools of a plugin directory, call one, check a plugin
//! file, run a long-lived host (`serve`) and talk to it (`reload`, `status`,
//! `call --control`), run a profile's agent (`run`, `chat`), manage tokens and pins. Each
//! command is one file under `commands/`; this file parses the command line and prints a
//! command's error, once, the way ripgrep's `try_main` does.

mod approve;
mod commands;
mod json_log;
mod output;
mod system;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use toolhost::LoadedConfig;

use commands::{Failure, agent, call, check, control, install, list, new, serve, token, trust};
use output::{StdoutError, errln};

/// Loads tools for LLM agents from compiled plugins and runs them.
#[derive(Parser)]
#[command(name = "toolhost", version, about, long_about = None)]
struct Cli {
    /// The config file (default: $XDG_CONFIG_HOME/toolhost/config.toml; a missing default
    /// file means the defaults).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Use the system service's folders: config /etc/toolhost, state /var/lib/toolhost,
    /// plugins /usr/local/lib/toolhost/plugins (root's; $TOOLHOST_SYSTEM_PLUGIN_DIR moves
    /// it), control socket /run/toolhost/control.sock (systemd's $CONFIGURATION_DIRECTORY,
    /// $STATE_DIRECTORY and $RUNTIME_DIRECTORY where set). Run by root, the command acts
    /// as the user who owns /var/lib/toolhost (the unit's user), so what it writes is the
    /// service's; install and remove stay root, so the plugin folder stays root's and the
    /// service cannot write it.
    #[arg(long, global = true)]
    system: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Load the plugins once and print their tools.
    List(list::ListArgs),
    /// Run one tool call and print its output (exit 0 on success, 1 on an error result).
    Call(call::CallArgs),
    /// Run a long-lived host: load the plugins, reload them when their files change,
    /// answer `reload`, `status` and `call` on the control socket.
    Serve(serve::ServeArgs),
    /// Print a kept output (the full text of a result that was cut): all of it, a line
    /// range or the lines matching a regex. Reads the profile's state folder directly.
    Output(commands::output::OutputArgs),
    /// Manage the bearer tokens MCP clients need for `serve --mcp http`.
    Token(token::TokenArgs),
    /// Run one turn of a profile's agent: the model gets the prompt and the profile's
    /// tools; the answer goes to stdout, tool calls and results to stderr.
    Run(agent::RunArgs),
    /// Talk with a profile's agent on the terminal; tool calls, approvals and results show
    /// as they happen.
    Chat(agent::ChatArgs),
    /// Make the running host rescan its plugin directories now; print what changed.
    Reload(control::ReloadArgs),
    /// Show the running host's plugins, generations, errors and per-tool statistics.
    Status(control::StatusArgs),
    /// Validate one plugin file: first the static checks (permissions, trust mode, file
    /// type, size, ELF header; none of the file's code runs), then load it and print its
    /// name, versions and tools, or why it is refused.
    ///
    /// Loading a library runs its initialisers (code in the file) in this process, with
    /// your user's rights: to inspect a file you do not trust, use `check --isolate`, which
    /// loads it only in a sandboxed worker process with no write access and no network.
    #[command(override_usage = "toolhost check [OPTIONS] <FILE>\n       \
                                toolhost check --mcp-server <NAME> [--json]")]
    Check(check::CheckArgs),
    /// Install a plugin file into a plugin directory: `check`'s checks, a refusal if its
    /// tools clash with the installed plugins' (unless --replace), then a copy renamed
    /// into place, so a watching host loads it once; prints what the running host did.
    Install(install::InstallArgs),
    /// Remove an installed plugin by its name (or file name); prints what the running
    /// host did.
    Remove(install::RemoveArgs),
    /// Pin plugin files for `[trust] mode = "pinned"` (pins count in "signed" mode too):
    /// records each file's sha256 with its plugin name and version in the trust file
    /// (0600, in the state directory unless `[trust] file` says otherwise).
    ///
    /// The file must pass the static checks; then it is loaded once to read its plugin
    /// name and version (loading runs its initialisers: check the file first), unless
    /// --no-load is given.
    Trust(trust::TrustArgs),
    /// Read the audit log (one line per call: who, which tool of which plugin file, how it
    /// was decided, how it ended), or `audit verify` its chain of hashes.
    Audit(commands::audit::AuditArgs),
    /// List or revoke the lasting ("always") approvals of a profile.
    Approvals(commands::approvals::ApprovalsArgs),
    /// Start a plugin: write a crate that builds and tests out of the box (Cargo.toml with
    /// a cdylib + rlib library and a release profile fit for plugins, one typed tool with
    /// tests through the API's test harness, a README with the build, check, install and
    /// sign steps).
    New(new::NewArgs),
    /// List a profile's stored conversations, or show one (no host needs to run).
    Sessions(commands::sessions::SessionsArgs),
    /// Print a completion script for bash, zsh or fish on stdout.
    Completions(commands::shell::CompletionsArgs),
    /// Print the manual page (roff) on stdout: `toolhost man | man -l -`.
    Man(commands::shell::ManArgs),
    /// Internal: a plugin worker process, started by toolhost itself on a socket it
    /// passes as descriptor `--fd`.
    #[command(name = "__worker", hide = true)]
    Worker {
        /// The inherited socket.
        #[arg(long)]
        fd: i32,
    },
}

fn main() -> ExitCode {
    let mut cli = Cli::parse();
    // A worker reads no config and sets up its own log, before anything else runs.
    if let Command::Worker { fd } = cli.command {
        let code = toolhost::worker::run(fd);
        return ExitCode::from(u8::try_from(code).unwrap_or(2));
    }
    // Before anything reads a folder, and while there is one thread (it may change user).
    let acting = if cli.system {
        // install and remove write root's plugin folder: root stays root for them.
        let writes_plugins = matches!(cli.command, Command::Install(_) | Command::Remove(_));
        match system::enter(writes_plugins) {
            Ok(acting) => Some(acting),
            Err(e) => return report(&e.into()),
        }
    } else {
        None
    };
    init_logging(&cli.command);
    match acting {
        Some(system::ActingAs::ServiceUser { uid }) => {
            tracing::debug!("--system: acting as the service's user (uid {uid})");
        }
        Some(system::ActingAs::RootForPlugins { service_uid }) => {
            tracing::debug!(
                "--system: staying root to write the plugin folder (service uid {service_uid:?}); \
                 plugins are loaded only in sandboxed workers"
            );
            // Root writes the folder; no plugin's code runs as root in this process.
            match &mut cli.command {
                Command::Install(args) => args.isolate_loads(),
                Command::Remove(args) => args.isolate_loads(),
                _ => {}
            }
        }
        Some(system::ActingAs::Itself) | None => {}
    }
    // Commands the workspace tools run are this user's programs: they must not read the
    // host's environment (API keys) or memory through /proc/PID.
    if let Err(e) = toolhost::worker::forbid_same_user_inspection() {
        tracing::warn!(
            "could not keep other programs of this user from reading toolhost's environment \
             through /proc: {e}"
        );
    }
    // Writing a new crate, completions and the manual need no config (a broken one must
    // not stop them).
    if let Command::New(args) = cli.command {
        return args.run().unwrap_or_else(|error| report(&error));
    }
    match &cli.command {
        Command::Completions(args) => {
            return args.run::<Cli>().unwrap_or_else(|error| report(&error));
        }
        Command::Man(args) => return args.run::<Cli>().unwrap_or_else(|error| report(&error)),
        _ => {}
    }
    let code = match try_main(cli) {
        Ok(code) => code,
        Err(error) => report(&error),
    };
    // No plugin's process outlives the host.
    toolhost::worker::end_all();
    code
}

/// A serving host logs its loads, reloads and removals; one-shot commands only problems.
fn init_logging(command: &Command) {
    let default_level = if matches!(command, Command::Serve(_)) {
        // rmcp logs every stateless HTTP request at info.
        "info,rmcp=warn"
    } else {
        "warn"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("TOOLHOST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    // TOOLHOST_LOG_FORMAT=json: one JSON object per line, for journald and log shippers.
    match std::env::var("TOOLHOST_LOG_FORMAT").as_deref() {
        Ok("json") => {
            builder.event_format(json_log::JsonLines).init();
            json_log::enable();
        }
        Ok("text") | Err(_) => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        Ok(other) => {
            builder
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .init();
            tracing::warn!(
                "TOOLHOST_LOG_FORMAT={other:?} is not known: use \"json\" or \"text\"; logging as text"
            );
        }
    }
}

/// Sets up what holds every process this host starts, before it starts any (and before
/// any thread exists): the host becomes their child subreaper (the mark by which the
/// control socket refuses them, see `frontends::control`), and the paths of its own state
/// go into its environment, where every sandbox built in this process or in its workers
/// hides them ([`toolhost_sandbox::protected`]).
fn confine_what_we_start(config: &LoadedConfig) {
    if let Err(e) = toolhost_sandbox::process_tree::become_subreaper() {
        tracing::warn!(
            "could not become the child subreaper of what toolhost starts ({e}): a process \
             a tool started that double-forks is reparented to init, out of the host's tree, \
             and the control socket can no longer tell it from an operator's client"
        );
    }
    if let Err(e) = toolhost::publish_protected_state(&config.protected_paths()) {
        tracing::warn!(
            "could not tell the sandboxes of what toolhost starts where its state is ({e}): \
             commands and workers may reach the state folders their roots include"
        );
    }
}

/// Loads the config and runs the command: its exit code, or the error `main` prints.
fn try_main(cli: Cli) -> anyhow::Result<ExitCode> {
    let mut config = LoadedConfig::load(cli.config.as_deref())?;
    let roots = match &cli.command {
        Command::Call(args) => &args.workspace.roots,
        Command::Serve(args) => &args.workspace.roots,
        Command::Run(args) => &args.agent.workspace.roots,
        Command::Chat(args) => &args.agent.workspace.roots,
        _ => &Vec::new(),
    };
    if !roots.is_empty() {
        config = config.with_workspace_roots(roots)?;
    }
    // The plugin folders the command loads from are out of the workspace tools' reach.
    let plugins = match &cli.command {
        Command::List(args) => Some(&args.plugins),
        Command::Call(args) => Some(&args.plugins),
        Command::Serve(args) => Some(&args.plugins),
        Command::Run(args) => Some(&args.agent.plugins),
        Command::Chat(args) => Some(&args.agent.plugins),
        _ => None,
    };
    if let Some(plugins) = plugins {
        let dirs = plugins.resolve(&config);
        config = config.with_plugin_dirs_in_use(&dirs);
    }
    confine_what_we_start(&config);
    if !config.strict_permissions() {
        tracing::warn!(
            "[plugins] strict_permissions = false: plugin files that other users can change \
             are loaded (anyone who can write them runs code as this user); for development \
             only"
        );
    }
    match cli.command {
        Command::List(args) => args.run(&config),
        Command::Call(args) => args.run(&config),
        Command::Output(args) => args.run(&config),
        Command::Serve(args) => args.run(&config),
        Command::Token(args) => args.run(&config),
        Command::Run(args) => args.run(&config),
        Command::Chat(args) => args.run(&config),
        Command::Sessions(args) => args.run(&config),
        Command::Reload(args) => args.run(&config),
        Command::Status(args) => args.run(&config),
        Command::Check(args) => args.run(&config),
        Command::Trust(args) => args.run(&config),
        Command::Install(args) => args.run(&config),
        Command::Remove(args) => args.run(&config),
        Command::Audit(args) => args.run(&config),
        Command::Approvals(args) => args.run(&config),
        Command::Worker { .. } => Err(commands::usage("__worker is started by toolhost itself")),
        Command::New(args) => args.run(),
        Command::Completions(_) | Command::Man(_) => Err(commands::usage(
            "completions and man run before the config is read",
        )),
    }
}

/// Prints a command's error on stderr and picks the exit code: 0 when stdout was closed
/// under the command (whoever read it has all they wanted), 2 for a usage error, else 1.
fn report(error: &anyhow::Error) -> ExitCode {
    if error
        .downcast_ref::<StdoutError>()
        .is_some_and(StdoutError::is_closed_pipe)
    {
        return ExitCode::SUCCESS;
    }
    if json_log::enabled() {
        tracing::error!("{error}");
    } else {
        errln!("error: {error}");
    }
    match error.downcast_ref::<Failure>() {
        Some(failure) => failure.exit_code(),
        None => ExitCode::FAILURE,
    }
}
