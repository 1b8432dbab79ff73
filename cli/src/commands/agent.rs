//! `toolhost run` (one turn, the answer on stdout) and `toolhost chat` (a conversation on
//! the terminal that shows tool calls, approvals and results as they happen).

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolhost::agent::model::{ModelError, OpenAiClient};
use toolhost::agent::{Agent, AgentParts, TurnObserver};
use toolhost::{CallDoor, CallerChannel, LoadedConfig, ToolCall, ToolResult};

use super::{Loaded, PluginDirs, new_loader, runtime, setup, terminal_approver};
use crate::approve;
use crate::output::{errln, outln, summary};

/// What `run` and `chat` share.
#[derive(clap::Args)]
pub(crate) struct AgentOpts {
    #[command(flatten)]
    pub(crate) plugins: PluginDirs,
    /// The profile whose agent runs (default: the config's default_profile).
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
    /// Continue this session instead of starting one.
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// Approve write, destructive and network tools without asking.
    #[arg(long)]
    yes: bool,
    #[command(flatten)]
    pub(crate) workspace: super::WorkspaceRoots,
}

/// `toolhost run`.
#[derive(clap::Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) agent: AgentOpts,
    /// What to ask.
    prompt: String,
    /// Print `{"session": ID, "answer": TEXT, "delegations": [...]}` as JSON instead of
    /// the answer's text.
    #[arg(long)]
    json: bool,
    /// End when the model answers, without waiting for background delegations (their ids
    /// are printed; they are cancelled when this process exits).
    #[arg(long)]
    detach: bool,
}

/// `toolhost chat`.
#[derive(clap::Args)]
pub(crate) struct ChatArgs {
    #[command(flatten)]
    pub(crate) agent: AgentOpts,
}

/// Prints what happens in a turn on stderr (the answer itself goes to stdout). In the
/// chat it also prints the answer's text on stdout as it streams in, and remembers the
/// context use for the line after the answer.
#[derive(Default)]
struct Printer {
    /// Print the streamed text of top-level answers (the chat; `run` prints the answer
    /// once it is whole).
    stream_answers: bool,
    state: std::sync::Mutex<PrinterState>,
}

#[derive(Default)]
struct PrinterState {
    /// Streamed text is on stdout without its line end.
    open_line: bool,
    /// The last top-level message's text was printed as it streamed.
    last_streamed: bool,
    /// The last top-level model call's context use: (tokens, window).
    context: Option<(u64, u64)>,
}

impl Printer {
    fn state(&self) -> std::sync::MutexGuard<'_, PrinterState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Ends streamed text's line on stdout, if one is open.
    fn end_line(&self) {
        let mut state = self.state();
        if state.open_line {
            state.open_line = false;
            let _ = outln!();
        }
    }

    /// Before a turn: nothing streamed yet.
    fn begin_turn(&self) {
        *self.state() = PrinterState::default();
    }

    /// After a turn: whether its answer was printed as it streamed, and its context use.
    fn end_turn(&self) -> (bool, Option<(u64, u64)>) {
        self.end_line();
        let state = self.state();
        (state.last_streamed, state.context)
    }
}

/// "61% of 32k".
fn context_line(used: u64, window: u64) -> String {
    let percent = used.saturating_mul(100) / window.max(1);
    let size = if window >= 1024 && window.is_multiple_of(1024) {
        format!("{}k", window / 1024)
    } else if window >= 1000 {
        format!("{:.1}k", window as f64 / 1000.0)
    } else {
        window.to_string()
    };
    format!("context {percent}% of {size}")
}

fn indent(depth: u32) -> String {
    "  ".repeat(depth as usize)
}

impl TurnObserver for Printer {
    fn tool_calls(&self, depth: u32, calls: &[ToolCall]) {
        self.end_line();
        for c in calls {
            errln!(
                "{}-> {} {}",
                indent(depth),
                c.name,
                summary(&c.arguments.value().to_string(), 200)
            );
        }
    }

    fn tool_result(&self, depth: u32, result: &ToolResult) {
        let mark = if result.is_error { "x" } else { "<-" };
        errln!(
            "{}{mark} {} ({:.1} s): {}",
            indent(depth),
            result.name,
            result.elapsed.as_secs_f64(),
            summary(&result.output, 300)
        );
    }

    fn assistant_text(&self, depth: u32, text: &str) {
        if depth > 0 {
            errln!("{}(helper) {}", indent(depth), summary(text, 300));
            return;
        }
        let mut state = self.state();
        state.last_streamed = state.open_line;
        if state.open_line {
            state.open_line = false;
            let _ = outln!();
        }
    }

    fn assistant_delta(&self, depth: u32, text: &str) {
        if depth > 0 || !self.stream_answers {
            return;
        }
        let mut state = self.state();
        // Control characters escaped on a terminal, as every answer is.
        if crate::output::raw(text).is_ok() {
            state.open_line = true;
        }
    }

    fn context_use(&self, depth: u32, used: u64, window: u64) {
        if depth == 0 {
            self.state().context = Some((used, window));
        }
    }

    fn delegation_finished(&self, report: &toolhost::agent::DelegationReport) {
        let tasks = match report.tasks {
            1 => "1 task".to_owned(),
            n => format!("{n} tasks"),
        };
        let state = match report.state {
            toolhost::agent::sessions::RunState::Done => "finished",
            other => other.as_str(),
        };
        let more = match report.still_running {
            0 => String::new(),
            n => format!("; {n} more unit(s) still running"),
        };
        errln!(
            "background delegation {} {state} ({tasks}, unit {}){more}",
            report.delegation,
            report.unit
        );
    }
}

/// The profile's agent, with a terminal for approvals and questions when there is one,
/// watched by `printer`.
fn agent(config: &LoadedConfig, a: &AgentOpts, printer: Arc<Printer>) -> anyhow::Result<Agent> {
    let model = OpenAiClient::new(config.model().cloned().ok_or(ModelError::NotConfigured)?)?;
    let loader = new_loader(config, a.plugins.isolate)?;
    let Loaded {
        registry,
        profile,
        mentions,
        ..
    } = setup(
        config,
        &loader,
        &a.plugins.resolve(config),
        a.profile.as_deref(),
    )?;
    for mention in &mentions {
        tracing::warn!("{mention}");
    }
    let terminal = std::io::stdin().is_terminal();
    let door = CallDoor::new(
        &config.call_settings(),
        super::profile_door_scope(config, &profile, registry)?,
        terminal_approver(a.yes, "pass --yes to approve such calls without a terminal"),
    );
    let door = super::with_audit_and_approvals(door, config, &profile)?;
    let agent = Agent::new(AgentParts {
        profile: profile.name.clone(),
        dirs: profile.dirs.clone(),
        workspace: profile.workspace.clone(),
        door,
        model: Arc::new(model),
        config: config.agent(&profile),
        caller: Some(Arc::new(approve::TerminalCaller::new(terminal)) as Arc<dyn CallerChannel>),
        observer: Some(printer),
    })?;
    Ok(agent)
}

/// The session asked for, or a new one.
fn session(agent: &Agent, wanted: Option<&str>) -> anyhow::Result<String> {
    let found = match wanted {
        Some(id) => agent
            .sessions()
            .exists(id)
            .map(|e| e.then(|| id.to_owned())),
        None => agent.new_session().map(Some).map_err(|e| match e {
            toolhost::agent::AgentError::Session(s) => s,
            other => toolhost::agent::sessions::SessionError::NoSession(other.to_string()),
        }),
    };
    found?.ok_or_else(|| {
        anyhow::anyhow!(
            "this profile has no session '{}'; leave out --session to start one",
            wanted.unwrap_or_default()
        )
    })
}

/// Cancels `cancel` on Ctrl-C while `run` runs.
async fn cancellable<T>(cancel: &CancellationToken, run: impl Future<Output = T>) -> T {
    let watcher = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                errln!("interrupted: stopping the turn");
                cancel.cancel();
            }
        })
    };
    let out = run.await;
    watcher.abort();
    out
}

/// The agent, its session (the one asked for, or a new one) and a runtime to run it on.
/// Where the chat of `a`'s profile keeps its prompt history: beside its conversations
/// in `sessions/`, never in the plugins' `state/` folder (a plugin's worker may read and
/// write that one: it would read what was typed, or plant lines the up arrow brings
/// back). A history an older toolhost kept there is moved once.
fn agent_history(a: &AgentOpts, config: &LoadedConfig) -> std::path::PathBuf {
    let Ok(profile) = super::resolve_profile(config, a.profile.as_deref()) else {
        return std::path::PathBuf::new();
    };
    let file = profile.dirs.sessions().join("chat_history");
    let old = profile.dirs.state().join("chat_history");
    let is_file = |p: &std::path::Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file());
    if is_file(&old)
        && !is_file(&file)
        && let Err(e) = std::fs::rename(&old, &file)
    {
        tracing::warn!(
            "could not move the chat history from {} to {}: {e}; it starts anew",
            old.display(),
            file.display()
        );
    }
    file
}

fn prepare(
    config: &LoadedConfig,
    a: &AgentOpts,
    printer: Arc<Printer>,
) -> anyhow::Result<(Agent, String, tokio::runtime::Runtime)> {
    let agent = agent(config, a, printer)?;
    let session = session(&agent, a.session.as_deref())?;
    Ok((agent, session, runtime()?))
}

impl RunArgs {
    /// `toolhost run --profile NAME "prompt"`.
    pub(crate) fn run(self, config: &LoadedConfig) -> anyhow::Result<ExitCode> {
        let (agent, session, runtime) = prepare(config, &self.agent, Arc::new(Printer::default()))?;
        let cancel = CancellationToken::new();
        // Without --detach the turn waits for its background delegations' completions.
        let turn = async {
            if self.detach {
                agent.run_turn(&session, &self.prompt, cancel.clone()).await
            } else {
                agent
                    .run_turn_to_the_end(&session, &self.prompt, cancel.clone())
                    .await
            }
        };
        let outcome = runtime.block_on(cancellable(&cancel, turn));
        // Background delegations live in this process: what still runs ends with it.
        let detached = agent.running_delegations();
        agent.shutdown();
        // A question still waiting on the terminal must not hold the exit up.
        runtime.shutdown_background();
        match outcome {
            Ok(answer) if self.json => {
                outln!(
                    "{}",
                    json!({"session": session, "answer": answer, "delegations": detached})
                )?;
                Ok(ExitCode::SUCCESS)
            }
            Ok(answer) => {
                errln!("(session {session})");
                if !detached.is_empty() {
                    errln!(
                        "background delegations still running: {}; they are cancelled now \
                         that this process exits (run without --detach to wait for them)",
                        detached.join(", ")
                    );
                }
                outln!("{answer}")?;
                Ok(ExitCode::SUCCESS)
            }
            // The note goes on the line after the error.
            Err(e) => anyhow::bail!("{e}\n(session {session} keeps what was said)"),
        }
    }
}

impl ChatArgs {
    /// `toolhost chat --profile NAME`. A closed stdout ends the chat (the session keeps
    /// what was said).
    pub(crate) fn run(self, config: &LoadedConfig) -> anyhow::Result<ExitCode> {
        let printer = Arc::new(Printer {
            stream_answers: true,
            ..Printer::default()
        });
        let (agent, session, runtime) = prepare(config, &self.agent, Arc::clone(&printer))?;
        errln!("session {session}; an empty line or Ctrl-D ends, Ctrl-C stops a turn");
        // Ctrl-C stops the turn running; at the prompt it ends the chat.
        let current: Arc<std::sync::Mutex<Option<CancellationToken>>> = Arc::default();
        {
            let current = Arc::clone(&current);
            let ended = session.clone();
            let agent = agent.clone();
            runtime.spawn(async move {
                while tokio::signal::ctrl_c().await.is_ok() {
                    let running = current
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .clone();
                    match running {
                        Some(turn) => {
                            errln!("interrupted: stopping the turn");
                            turn.cancel();
                        }
                        None => {
                            agent.shutdown();
                            errln!("\n(session {ended}; continue it with --session {ended})");
                            std::process::exit(130);
                        }
                    }
                }
            });
        }
        approve::keep_history(agent_history(&self.agent, config));
        let mut written = Ok(());
        while let Some(line) = runtime.block_on(approve::ask_prompt("> ")) {
            let prompt = line.trim();
            if prompt.is_empty() {
                break;
            }
            let cancel = CancellationToken::new();
            *current
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(cancel.clone());
            printer.begin_turn();
            let outcome = runtime.block_on(agent.run_turn(&session, prompt, cancel));
            *current
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
            let (streamed, context) = printer.end_turn();
            match outcome {
                // Printed as it streamed in.
                Ok(_) if streamed => {}
                Ok(answer) => written = outln!("{answer}"),
                // The chat goes on: the next prompt may fare better.
                Err(e) => errln!("error: {e}"),
            }
            if let Some((used, window)) = context {
                errln!("({})", context_line(used, window));
            }
            if written.is_err() {
                break;
            }
        }
        // Background delegations end with the chat.
        let running = agent.running_delegations();
        if !running.is_empty() {
            errln!(
                "cancelling background delegations still running: {}",
                running.join(", ")
            );
        }
        agent.shutdown();
        runtime.shutdown_background();
        errln!("(session {session}; continue it with --session {session})");
        written?;
        Ok(ExitCode::SUCCESS)
    }
}
