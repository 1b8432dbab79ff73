//! `run_command`: runs a program (or, where the workspace allows it, a shell command line)
//! in a workspace folder, inside a Landlock sandbox that lets it read and execute
//! everywhere but write only beneath the roots, its private temporary folder and the
//! harmless devices, with no network unless `[workspace] allow_network`; with a reduced
//! environment, a denylist of programs, a time limit and cancellation that kill its whole
//! process tree. Returns the exit status and both streams.
//!
//! The sandbox is the one every process toolhost starts gets ([`toolhost_sandbox::prepare`]):
//! Landlock, the seccomp filter (no Unix sockets unless `[workspace] allow_unix_sockets`,
//! no IPv4 or IPv6 sockets without the network, no memfd), no capabilities, no new
//! privileges, no inherited descriptor, and the host's state hidden.
//!
//! What the sandbox does not stop: reading any other file the host's user can read (secrets
//! in the home folder included, and other processes' `/proc/PID/environ` and `cmdline`),
//! using the CPU and memory (a command has no memory limit of its own), and a process that
//! escapes both the process tree and its environment tag (see
//! [`toolhost_sandbox::process_tree`]). Every command
//! carries `TOOLHOST_SESSION=<the call's session>`, by which the host ends what a child
//! turn's commands left running. On a kernel without Landlock nothing of the
//! sandbox holds, and the result says so.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_plugin_api::{CancelFlag, OutputBudget, Structured, ToolContext, ToolError, tool};
use toolhost_sandbox::runner::{self, Finished, Launch};
use toolhost_sandbox::{
    PreparedSandbox, SandboxError, SandboxMode, SandboxOutcome, SandboxRules, UDP_ABI,
    UNIX_SOCKET_ABI,
};

use crate::command_policy::{Denylist, command_env, find_program};
use crate::roots::Workspace;

/// Arguments of `run_command`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCommandArgs {
    /// The program to run: a name found on PATH (e.g. "cargo", "git", "ls") or a path.
    /// No shell is involved: pipes, redirections, globs and `&&` are not interpreted.
    #[serde(default)]
    program: Option<String>,
    /// The program's arguments, one string each (no quoting needed).
    #[serde(default)]
    args: Vec<String>,
    /// Instead of program and args: a shell command line, run with `sh -c` (pipes,
    /// redirections, `&&`). Refused unless the workspace config says `shell = true`.
    #[serde(default)]
    command: Option<String>,
    /// The folder to run in: a path in the workspace (relative to the first root, or
    /// absolute beneath a root). Default: the first root.
    #[serde(default)]
    cwd: Option<String>,
    /// Seconds before the command and everything it started are killed. Default and
    /// maximum: the workspace's command_timeout_secs (120 unless configured).
    #[serde(default)]
    timeout_secs: Option<u64>,
    /// Text given to the command on standard input. Default: none (end of file at once).
    #[serde(default)]
    stdin: Option<String>,
}

/// What `run_command` returns.
#[derive(Serialize, JsonSchema)]
pub struct CommandResult {
    /// The exit code; absent when a signal ended the command.
    pub exit_code: Option<i32>,
    /// The signal that ended the command (9 after a time-out or cancel).
    pub signal: Option<i32>,
    /// It ran past its time limit and was killed.
    pub timed_out: bool,
    /// The call was cancelled and the command was killed.
    pub cancelled: bool,
    /// Wall time in milliseconds.
    pub duration_ms: u64,
    /// Standard output (the middle dropped past 8 MiB, marked).
    pub stdout: String,
    /// Standard error (the middle dropped past 8 MiB, marked).
    pub stderr: String,
    /// What the sandbox enforced, and what this kernel leaves open.
    pub sandbox: String,
    /// Notes: the time limit used, processes killed, output left out, sandbox gaps.
    pub notes: Vec<String>,
    /// The streams whole, where `stdout` and `stderr` above were cut to the output
    /// budget (the text the model reads has them whole; the host keeps it when it cuts).
    #[serde(skip)]
    whole: Option<(String, String)>,
}

impl CommandResult {
    /// The call did not do what was asked: the command did not exit with 0 (it failed,
    /// was killed, timed out or was cancelled).
    fn failed(&self) -> bool {
        self.exit_code != Some(0)
    }

    /// Holds the structured value within `budget`'s characters: past it, each stream
    /// keeps its head and tail with a marker, and the whole streams stay for the text.
    fn hold_to(&mut self, budget: OutputBudget) {
        let chars =
            |r: &CommandResult| serde_json::to_string(r).map_or(usize::MAX, |j| j.chars().count());
        let max = budget.max_chars as usize;
        if max == 0 || chars(self) <= max {
            return;
        }
        let whole = (
            std::mem::take(&mut self.stdout),
            std::mem::take(&mut self.stderr),
        );
        let fixed = chars(self) + 400;
        // Room for both streams, halved until their JSON (escapes included) fits.
        let mut room = max.saturating_sub(fixed) / 2;
        loop {
            self.stdout = head_and_tail(&whole.0, room);
            self.stderr = head_and_tail(&whole.1, room);
            if chars(self) <= max || room == 0 {
                break;
            }
            room /= 2;
        }
        self.notes.push(
            "stdout and stderr in the structured result are cut to the output budget (head \
             and tail); the text result has them whole"
                .to_owned(),
        );
        self.whole = Some(whole);
    }
}

/// `text` within `room` characters: its head and tail with a marker line between.
fn head_and_tail(text: &str, room: usize) -> String {
    let total = text.chars().count();
    if total <= room {
        return text.to_owned();
    }
    let half = room.saturating_sub(80) / 2;
    let head: String = text.chars().take(half).collect();
    let tail: String = text.chars().skip(total - half).collect();
    format!(
        "{head}\n[… {} characters left out here; the text result has them …]\n{tail}",
        total - 2 * half
    )
}

/// Runs a program with arguments in a workspace folder and returns its exit code,
/// standard output and standard error (under a `--- stderr ---` header), and how long
/// it took. Give `program` and `args` (no shell: no pipes, redirections or globs);
/// `command` (a shell line run with sh -c) works only if the workspace config says
/// `shell = true`, and a shell line can get around the program denylist. The command
/// runs in a sandbox: it can read and execute files anywhere the host's user can (so it
/// can read secrets that user can read, other processes' environment in /proc
/// included), but can write only beneath the workspace roots and its own temporary
/// folder (TMPDIR, removed afterwards), and has no network unless the workspace allows
/// it (tools that download, or write caches in the home folder, fail). The environment
/// is reduced to an allowlist (PATH, HOME, LANG, LC_*, TERM, TZ, USER, CARGO_HOME, ...
/// plus the workspace's env); privilege changes (sudo, su, ...), power and disk tools
/// and the workspace's deny_programs are refused. Default time limit and maximum: the
/// workspace's command_timeout_secs (120 s unless configured); on time-out or cancel
/// the command and every process it started are killed, as is anything it leaves
/// running when it exits. Each stream is kept up to 8 MiB (the middle dropped past
/// that, marked); long results are cut by the host, whose full text stays readable with
/// read_output. A command that does not exit with 0 (or is killed, times out or is
/// cancelled) is an error result, with all of its output.
#[tool(risk = destructive, workspace)]
pub async fn run_command(
    ctx: &ToolContext<'_>,
    #[args] args: RunCommandArgs,
) -> Result<Structured<CommandResult>, ToolError> {
    let workspace = Workspace::of(ctx).await?;
    let mut planned = plan(&workspace, args)?;
    planned.session = ctx.session_id().to_owned();
    let budget = ctx.output_budget().await;
    let mut value = ctx
        .blocking(move |cancel| execute(planned, cancel))
        .await
        .map_err(ToolError::failed)??;
    value.hold_to(budget);
    let text = run_command_text(&value);
    let failed = value.failed();
    Ok(Structured::new(value).text(text).failed_if(failed))
}

/// The text the model reads for a result of `run_command`.
fn run_command_text(r: &CommandResult) -> String {
    let (stdout, stderr) = r
        .whole
        .as_ref()
        .map_or((&r.stdout, &r.stderr), |(out, err)| (out, err));
    let mut text = match (r.exit_code, r.signal) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "ended".to_owned(),
    };
    text.push_str(&format!(" in {:.2} s\n", r.duration_ms as f64 / 1000.0));
    for note in &r.notes {
        text.push_str(&format!("note: {note}\n"));
    }
    if stdout.is_empty() && stderr.is_empty() {
        text.push_str("(no output)\n");
    }
    text.push_str(stdout);
    if !stderr.is_empty() {
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str("--- stderr ---\n");
        text.push_str(stderr);
    }
    text
}

/// A command checked and ready to run.
struct Planned {
    /// What the runner gets (the sandbox prepared later, on the blocking thread).
    program: PathBuf,
    /// `argv[0]`.
    arg0: String,
    /// The arguments.
    args: Vec<String>,
    /// The working folder (real, beneath a root).
    cwd: PathBuf,
    /// The roots (writable).
    roots: Vec<PathBuf>,
    /// What the command's sandbox hides besides the host's state (its config and plugin
    /// folders: [`Workspace::protected`]).
    protected: Vec<PathBuf>,
    /// `[workspace] allow_network`.
    network: bool,
    /// `[workspace] allow_unix_sockets`.
    unix_sockets: bool,
    /// `[workspace] env`.
    env: Vec<String>,
    /// Standard input.
    stdin: Option<Vec<u8>>,
    /// The time limit.
    timeout: Duration,
    /// Notes from the checks (a capped time limit).
    notes: Vec<String>,
    /// The call's session, given to the command as `TOOLHOST_SESSION` (empty: none).
    session: String,
}

/// Checks `args` against the workspace's rules: program or shell line, folder, denylist,
/// time limit.
fn plan(workspace: &Workspace, args: RunCommandArgs) -> Result<Planned, ToolError> {
    let rules = &workspace.rules;
    let cwd = match &args.cwd {
        Some(cwd) => workspace.resolve(cwd)?.real_dir()?,
        None => workspace.first().path.clone(),
    };
    let path_var = command_env(&rules.env, Path::new("/"))
        .into_iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v)
        .unwrap_or_default();
    let denylist = Denylist::new(&rules.deny_programs);
    let is_shell_line = args.command.is_some();
    let (given, argv) = match (args.program, args.command) {
        (Some(_), Some(_)) => {
            return Err(ToolError::failed(
                "give either `program` (with `args`) or `command`, not both",
            ));
        }
        (None, None) => {
            return Err(ToolError::failed(
                "no command: give `program` (a name on PATH or a path) and its `args`",
            ));
        }
        (None, Some(line)) => {
            if !rules.shell {
                return Err(ToolError::failed(
                    "shell command lines are off in this workspace: pass `program` and \
                     `args` instead (no shell), or have the operator set `shell = true` \
                     under `[workspace]` in the config",
                ));
            }
            if !args.args.is_empty() {
                return Err(ToolError::failed(
                    "`args` goes with `program`; with `command`, put everything in the \
                     command line",
                ));
            }
            if let Some((entry, word)) = denylist.refuses_shell_words(&line, &path_var) {
                return Err(denied(&word, entry));
            }
            ("sh".to_owned(), vec!["-c".to_owned(), line])
        }
        (Some(program), None) => (program, args.args),
    };
    let program = find_program(&given, &path_var, &cwd);
    if let Some(entry) = denylist.refuses(&given, program.as_deref()) {
        return Err(denied(&given, entry));
    }
    // `program: "bash", args: ["-c", ...]` is a shell command line by another name.
    if !rules.shell && !is_shell_line && is_shell(&given, program.as_deref()) {
        return Err(ToolError::failed(format!(
            "{given} is a shell, and shell command lines are off in this workspace: run the \
             program you want directly with `program` and `args` (a script file runs by its \
             own path), or have the operator set `shell = true` under `[workspace]`"
        )));
    }
    let program = program.ok_or_else(|| {
        ToolError::failed(format!(
            "{given}: no such program (looked on PATH {path_var}{}); check the name, or \
             give its path",
            if given.contains('/') {
                format!(" and at {}", cwd.join(&given).display())
            } else {
                String::new()
            }
        ))
    })?;
    let cap = rules.command_timeout_secs.max(1);
    let mut notes = Vec::new();
    let secs = match args.timeout_secs {
        Some(asked) if asked > cap => {
            notes.push(format!(
                "timeout_secs {asked} was capped to the workspace's {cap} s \
                 (command_timeout_secs)"
            ));
            cap
        }
        Some(asked) => asked.max(1),
        None => cap,
    };
    Ok(Planned {
        program,
        arg0: given,
        args: argv,
        cwd,
        roots: workspace.roots.iter().map(|r| r.path.clone()).collect(),
        protected: workspace.protected.clone(),
        network: rules.allow_network,
        unix_sockets: rules.allow_unix_sockets,
        env: rules.env.clone(),
        stdin: args.stdin.map(String::into_bytes),
        timeout: Duration::from_secs(secs),
        notes,
        session: String::new(),
    })
}

/// Shells and the programs that run a command line for them: what `shell = false` keeps
/// out when they are named as the program.
const SHELLS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "csh", "tcsh", "busybox", "env",
    "xargs", "nohup", "setsid", "eval",
];

/// Whether `given` (or the program it resolved to, links followed) is a shell.
fn is_shell(given: &str, resolved: Option<&Path>) -> bool {
    let base = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .map(str::to_owned)
            .unwrap_or_default()
    };
    let mut names = vec![base(Path::new(given))];
    if let Some(path) = resolved {
        names.push(base(path));
        if let Ok(real) = std::fs::canonicalize(path) {
            names.push(base(&real));
        }
    }
    names.iter().any(|n| SHELLS.contains(&n.as_str()))
}

/// The refusal of a denylisted program.
fn denied(program: &str, entry: &str) -> ToolError {
    let source = if crate::command_policy::BUILT_IN_DENYLIST.contains(&entry) {
        "run_command's built-in denylist"
    } else {
        "the workspace's deny_programs"
    };
    ToolError::failed(format!(
        "{program} is refused: it matches `{entry}` in {source}; these programs may not be \
         run from the workspace tools"
    ))
}

/// Makes the private temporary folder, prepares the sandbox and runs the command.
fn execute(planned: Planned, cancel: &CancelFlag) -> Result<CommandResult, ToolError> {
    // 0700, removed when dropped (after the command's tree is gone).
    let tmp = tempfile::Builder::new()
        .prefix("toolhost-command-")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .tempdir()
        .map_err(|e| ToolError::failed(format!("could not make a temporary folder: {e}")))?;
    let tmp_path = std::fs::canonicalize(tmp.path())
        .map_err(|e| ToolError::failed(format!("could not find the temporary folder: {e}")))?;
    let rules = sandbox_rules(
        &planned.roots,
        &planned.protected,
        &tmp_path,
        planned.network,
        planned.unix_sockets,
    );
    let sandbox = toolhost_sandbox::prepare(SandboxMode::BestEffort, &rules)
        .map_err(|e| sandbox_error(&e))?;
    let mut notes = planned.notes;
    let sandbox_text = describe_sandbox(&sandbox, planned.network, planned.unix_sockets);
    match sandbox.outcome() {
        SandboxOutcome::Full { .. } | SandboxOutcome::Off => {}
        other => notes.push(format!("{other}; the command ran with less confinement")),
    }
    let launch = Launch {
        program: planned.program.clone(),
        arg0: planned.arg0.clone(),
        args: planned.args,
        cwd: planned.cwd,
        env: session_env(command_env(&planned.env, &tmp_path), &planned.session),
        tag: toolhost_sandbox::process_tree::new_tag(),
        stdin: planned.stdin,
        timeout: planned.timeout,
        sandbox: Arc::new(sandbox),
    };
    let finished = runner::run(launch, &|| cancel.is_cancelled()).map_err(|e| {
        ToolError::failed(format!(
            "could not run {} ({}): {e}",
            planned.arg0,
            planned.program.display()
        ))
    })?;
    drop(tmp);
    Ok(result(finished, planned.timeout, notes, sandbox_text))
}

/// `env` with `TOOLHOST_SESSION=<session>` (the convention by which the host ends what a
/// child turn's tools left running at its teardown); unchanged for a call of no session.
fn session_env(mut env: Vec<(String, String)>, session: &str) -> Vec<(String, String)> {
    env.retain(|(name, _)| name != "TOOLHOST_SESSION");
    if !session.is_empty() {
        env.push(("TOOLHOST_SESSION".to_owned(), session.to_owned()));
    }
    env
}

/// The sandbox of a command: read and execute everywhere but the host's state (which
/// `prepare` hides, whatever the roots say) and what the host protects from the
/// workspace tools (its config and plugin folders: `protected`); write beneath the roots,
/// the temporary folder and the harmless devices; the network and Unix sockets as
/// configured. In a worker whose sandbox hides them already, the command's sandbox (nested
/// in the worker's, so only narrower) does not carve them again: it could not list the
/// folders on the way.
fn sandbox_rules(
    roots: &[PathBuf],
    protected: &[PathBuf],
    tmp: &Path,
    network: bool,
    unix: bool,
) -> SandboxRules {
    let hidden = if toolhost_sandbox::protected::hidden_by_outer() {
        Vec::new()
    } else {
        protected.to_vec()
    };
    let devices = [
        "/dev/null",
        "/dev/zero",
        "/dev/full",
        "/dev/random",
        "/dev/urandom",
    ];
    SandboxRules {
        read: vec![PathBuf::from("/")],
        write: roots
            .iter()
            .cloned()
            .chain([tmp.to_path_buf()])
            .chain(devices.into_iter().map(PathBuf::from))
            .collect(),
        network,
        unix_sockets: unix,
        hidden,
        ..SandboxRules::default()
    }
}

/// A sandbox that could not be built, in words for the model and the operator.
fn sandbox_error(e: &SandboxError) -> ToolError {
    ToolError::failed(match e {
        SandboxError::Path { path, source } => format!(
            "could not set up the command's sandbox: {} cannot be opened ({source}); check \
             the workspace roots",
            path.display()
        ),
        other => format!("could not set up the command's sandbox: {other}"),
    })
}

/// What the sandbox holds and what this kernel leaves open.
fn describe_sandbox(sandbox: &PreparedSandbox, network: bool, unix: bool) -> String {
    let outcome = sandbox.outcome();
    let mut text = outcome.to_string();
    match sandbox.filter_gap() {
        None if matches!(outcome, SandboxOutcome::Off) => {}
        None => {
            if !network {
                text.push_str("; seccomp refuses IPv4 and IPv6 sockets (UDP too)");
            }
            text.push_str(if unix {
                "; Unix sockets allowed ([workspace] allow_unix_sockets)"
            } else {
                "; seccomp refuses Unix sockets"
            });
        }
        Some(gap) => {
            let abi = match outcome {
                SandboxOutcome::Full { abi } => Some(*abi),
                _ => toolhost_sandbox::kernel_abi(),
            };
            text.push_str(&format!("; no seccomp filter ({gap})"));
            if let Some(abi) = abi {
                if !network && abi < UDP_ABI {
                    text.push_str(&format!(
                        "; UDP is not denied (Landlock ABI {abi}; that needs ABI {UDP_ABI})"
                    ));
                }
                if !unix && abi < UNIX_SOCKET_ABI {
                    text.push_str(&format!(
                        "; connecting to Unix sockets by path is not denied (needs ABI \
                         {UNIX_SOCKET_ABI})"
                    ));
                }
            }
        }
    }
    text.push_str(
        "; reading files is not restricted beyond the host's own state (anything else the \
         host's user can read is readable)",
    );
    text
}

/// The result of a finished command.
fn result(
    f: Finished,
    timeout: Duration,
    mut notes: Vec<String>,
    sandbox: String,
) -> CommandResult {
    let (exit_code, signal) = runner::code_and_signal(f.status);
    if f.timed_out {
        notes.push(format!(
            "timed out after {} s: the command and every process it started were killed \
             ({} processes); pass a larger timeout_secs (up to the workspace's \
             command_timeout_secs) if it needs longer",
            timeout.as_secs(),
            f.killed
        ));
    } else if f.cancelled {
        notes.push(format!(
            "cancelled: the command and every process it started were killed ({} \
             processes)",
            f.killed
        ));
    } else if f.killed > 0 {
        notes.push(format!(
            "{} processes the command left running were killed when it exited",
            f.killed
        ));
    }
    for (name, capture) in [("stdout", &f.stdout), ("stderr", &f.stderr)] {
        if capture.dropped() > 0 {
            notes.push(format!(
                "{} bytes were left out of the middle of {name} (8 MiB kept)",
                capture.dropped()
            ));
        }
    }
    if f.streams_abandoned {
        notes.push(
            "a process outside the command's tree kept its output open; reading stopped".to_owned(),
        );
    }
    CommandResult {
        exit_code,
        signal,
        timed_out: f.timed_out,
        cancelled: f.cancelled,
        duration_ms: u64::try_from(f.duration.as_millis()).unwrap_or(u64::MAX),
        stdout: f.stdout.text(),
        stderr: f.stderr.text(),
        sandbox,
        notes,
        whole: None,
    }
}
