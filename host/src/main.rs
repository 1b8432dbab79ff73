//! The `toolhost` command: list the tools of a plugin directory, call one, check a plugin
//! file, run a long-lived host (`serve`) and talk to it (`reload`, `status`,
//! `call --control`). Everything goes through the library's loader, registry and
//! dispatcher.

mod remote;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use serde_json::Value;
use toolhost::{
    DispatchConfig, Dispatcher, LoadReport, PluginLoader, ReadOnlyPolicy, ToolCall, ToolRegistry,
    Turn, TurnInfo,
};

/// Loads tools for LLM agents from compiled plugins and runs them.
#[derive(Parser)]
#[command(name = "toolhost", version, about, long_about = None)]
struct Cli {
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
        #[arg(long, default_value_t = 60.0)]
        timeout: f64,
        /// Run the call in the host listening on this control socket instead of loading
        /// the plugins here.
        #[arg(long, value_name = "PATH")]
        control: Option<PathBuf>,
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
        /// keeps the old library mapped).
        #[arg(long, default_value_t = 64)]
        max_generations: u64,
        /// Seconds one call may run before it is cancelled.
        #[arg(long, default_value_t = 60.0)]
        timeout: f64,
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
    /// Validate one plugin file: print its name, versions and tools, or why it is refused.
    Check {
        /// The plugin file (a .so).
        file: PathBuf,
    },
}

#[derive(clap::Args)]
struct PluginDirs {
    /// A plugin directory (repeatable). Default: $TOOLHOST_PLUGINS (colon-separated), else
    /// $XDG_DATA_HOME/toolhost/plugins (~/.local/share/toolhost/plugins).
    #[arg(long = "plugins", value_name = "DIR")]
    dirs: Vec<PathBuf>,
}

impl PluginDirs {
    fn resolve(&self) -> Vec<PathBuf> {
        if !self.dirs.is_empty() {
            return self.dirs.clone();
        }
        if let Some(v) = std::env::var_os("TOOLHOST_PLUGINS").filter(|v| !v.is_empty()) {
            return std::env::split_paths(&v).collect();
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
        "info"
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
    match cli.command {
        Command::List { plugins, json } => list(&plugins.resolve(), json),
        Command::Call {
            plugins,
            control: Some(_),
            ..
        } if !plugins.dirs.is_empty() => {
            eprintln!(
                "error: --plugins and --control don't go together: with --control the running \
                 host's plugins are used"
            );
            ExitCode::from(2)
        }
        Command::Call {
            tool,
            args,
            timeout,
            control: Some(socket),
            ..
        } => match parse_call_args(&args, timeout) {
            Ok((arguments, timeout)) => remote::call(&socket, &tool, arguments, timeout),
            Err(code) => code,
        },
        Command::Call {
            tool,
            args,
            plugins,
            timeout,
            control: None,
        } => call(&tool, &args, &plugins.resolve(), timeout),
        Command::Check { file } => check(&file),
        Command::Serve {
            plugins,
            no_watch,
            control,
            max_generations,
            timeout,
        } => remote::serve(remote::ServeArgs {
            dirs: plugins.resolve(),
            watch: !no_watch,
            control: control.unwrap_or_else(toolhost::default_control_path),
            max_generations,
            timeout,
        }),
        Command::Reload { control, json } => remote::reload(
            &control.unwrap_or_else(toolhost::default_control_path),
            json,
        ),
        Command::Status { control, json } => remote::status(
            &control.unwrap_or_else(toolhost::default_control_path),
            json,
        ),
    }
}

fn new_loader() -> Result<PluginLoader, ExitCode> {
    PluginLoader::new().map_err(|e| {
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

fn list(dirs: &[PathBuf], as_json: bool) -> ExitCode {
    let loader = match new_loader() {
        Ok(l) => l,
        Err(code) => return code,
    };
    let (report, registry) = load(&loader, dirs);
    if report.plugins.is_empty() {
        let shown: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        eprintln!("note: no plugins loaded from {}", shown.join(", "));
    }
    if as_json {
        let tools = registry.listing();
        match serde_json::to_string_pretty(&tools) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("error: could not encode the listing: {e}");
                return ExitCode::FAILURE;
            }
        }
        return ExitCode::SUCCESS;
    }
    let rows: Vec<[String; 5]> = registry
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
    );
    ExitCode::SUCCESS
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

pub(crate) fn print_table<const N: usize>(header: &[&str; N], rows: &[[String; N]]) {
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
        println!("{}", out.trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
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

fn call(tool: &str, args: &str, dirs: &[PathBuf], timeout: f64) -> ExitCode {
    let (arguments, timeout) = match parse_call_args(args, timeout) {
        Ok(parsed) => parsed,
        Err(code) => return code,
    };
    let loader = match new_loader() {
        Ok(l) => l,
        Err(code) => return code,
    };
    let (_report, registry) = load(&loader, dirs);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: could not start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let dispatcher = Dispatcher::new(
        DispatchConfig {
            timeout,
            interactive_timeout: timeout,
            ..DispatchConfig::default()
        },
        Arc::new(ReadOnlyPolicy),
    );
    let turn = Turn::new(TurnInfo {
        profile_id: "cli".to_owned(),
        session_id: format!("cli-{}", std::process::id()),
        model: "none".to_owned(),
    });
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
        ExitCode::FAILURE
    } else {
        println!("{}", result.output);
        ExitCode::SUCCESS
    }
}

fn check(file: &Path) -> ExitCode {
    let loader = match new_loader() {
        Ok(l) => l,
        Err(code) => return code,
    };
    let plugin = match loader.load_file(file) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("file:        {}", plugin.file.display());
    println!("plugin:      {} {}", plugin.name, plugin.version);
    println!(
        "plugin-api:  {} (this host: {})",
        plugin.api_version,
        toolhost::API_VERSION
    );
    println!("tools:       {}", plugin.tools.len());
    let (_registry, problems) = ToolRegistry::from_plugins(std::slice::from_ref(&plugin));
    for t in &plugin.tools {
        let spec = t.spec();
        let flag = if spec.interactive {
            ", interactive"
        } else {
            ""
        };
        println!(
            "  {} ({}{flag}): {}",
            spec.name,
            spec.risk,
            summary(&spec.description, 72)
        );
    }
    for skipped in &plugin.skipped_tools {
        eprintln!("error: {skipped}; the tool would be left out");
    }
    for e in &problems {
        eprintln!("error: {e}");
    }
    if problems.is_empty() && plugin.skipped_tools.is_empty() {
        println!("ok");
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
