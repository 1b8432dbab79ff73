//! Asking the person at the terminal: approvals (`toolhost call`, `run`, `chat` without
//! `--yes`), questions from tools, and the chat's prompt, all reading one line at a time
//! from a single stdin reader.

use std::io::{BufRead, IsTerminal as _, Write};
use std::sync::OnceLock;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::Mutex;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use toolhost::{ApprovalAnswer, ApprovalRequest, Approver, CallerChannel};
use toolhost_plugin_api::{AskAnswer, AskRequest, ServiceError};

/// A line to read: the prompt to show, and whether the line goes into the chat's
/// history.
struct Prompt {
    text: String,
    history: bool,
}

/// The one reader of stdin: the lines typed, in order, and (on a terminal) the prompts
/// to read them with.
struct Reader {
    lines: Mutex<UnboundedReceiver<String>>,
    /// On a terminal, each question hands its prompt to the line editor here; `None`:
    /// stdin is a file or pipe, read line by line as it comes.
    prompts: Option<std::sync::Mutex<std::sync::mpsc::Sender<Prompt>>>,
}

/// Where the chat's history is kept (set by `chat` before its first prompt).
static HISTORY: OnceLock<std::path::PathBuf> = OnceLock::new();

/// Keeps the chat's prompt lines in `file` (0600; up to 1000 lines), recalled with the
/// arrow keys in later chats. Call before the first question.
pub(crate) fn keep_history(file: std::path::PathBuf) {
    let _ = HISTORY.set(file);
}

/// The lines typed on stdin, read by one thread for the whole process, so that a
/// question abandoned by a cancelled turn never swallows the next line.
fn reader() -> &'static Reader {
    static READER: OnceLock<Reader> = OnceLock::new();
    READER.get_or_init(|| {
        let (tx, rx) = unbounded_channel();
        let prompts = if std::io::stdin().is_terminal() {
            let (prompt_tx, prompt_rx) = std::sync::mpsc::channel::<Prompt>();
            std::thread::spawn(move || edit_lines(&prompt_rx, &tx));
            Some(std::sync::Mutex::new(prompt_tx))
        } else {
            std::thread::spawn(move || {
                let stdin = std::io::stdin();
                loop {
                    let mut line = String::new();
                    match stdin.lock().read_line(&mut line) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            if tx.send(line).is_err() {
                                break;
                            }
                        }
                    }
                }
            });
            None
        };
        Reader {
            lines: Mutex::new(rx),
            prompts,
        }
    })
}

/// Reads lines on the terminal with a line editor (rustyline: editing keys, and the
/// chat's history with the arrow keys), one per prompt asked for. The editor talks to
/// the terminal itself (`/dev/tty`), never to stdout, which may carry an answer. Ctrl-C
/// or Ctrl-D at a prompt ends the input (the chat ends; a question is declined).
fn edit_lines(
    prompts: &std::sync::mpsc::Receiver<Prompt>,
    lines: &tokio::sync::mpsc::UnboundedSender<String>,
) {
    use rustyline::history::{DefaultHistory, History as _};
    let config = rustyline::Config::builder()
        .max_history_size(1000)
        .unwrap_or_else(|_| rustyline::Config::builder())
        .behavior(rustyline::config::Behavior::PreferTerm)
        .auto_add_history(false)
        .build();
    let Ok(mut editor) = rustyline::Editor::<(), DefaultHistory>::with_config(config) else {
        return;
    };
    let history = HISTORY.get().filter(|f| private_file(f));
    if let Some(file) = history {
        let _ = editor.history_mut().load(file);
    }
    while let Ok(prompt) = prompts.recv() {
        match editor.readline(&prompt.text) {
            Ok(line) => {
                if prompt.history && !line.trim().is_empty() {
                    let _ = editor.add_history_entry(line.as_str());
                    if let Some(file) = history {
                        let _ = editor.history_mut().append(file);
                    }
                }
                if lines.send(format!("{line}\n")).is_err() {
                    break;
                }
            }
            Err(_) => break,
        }
    }
}

/// Whether `file` is a regular file (made now, empty, 0600, if missing) that only its
/// owner can read: history is what the person typed.
fn private_file(file: &std::path::Path) -> bool {
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
    let opened = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(file);
    opened
        .and_then(|f| f.metadata())
        .is_ok_and(|m| m.is_file() && m.mode() & 0o077 == 0)
}

/// Writes `question` on the terminal and waits for the next line typed (`None` at the
/// end of the input). One question at a time: calls run in parallel (and child turns
/// too), and an answer must go to the question the person is looking at.
pub(crate) async fn ask(question: &str) -> Option<String> {
    read(question, false).await
}

/// The chat's prompt: like [`ask`], and the line joins the chat's history.
pub(crate) async fn ask_prompt(question: &str) -> Option<String> {
    read(question, true).await
}

async fn read(question: &str, history: bool) -> Option<String> {
    let reader = reader();
    let mut lines = reader.lines.lock().await;
    // A tool's question may carry terminal escape sequences: shown, not obeyed.
    match &reader.prompts {
        Some(prompts) => {
            let text = toolhost::for_terminal(question, true);
            let sent = prompts
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .send(Prompt {
                    text: text.into_owned(),
                    history,
                });
            sent.ok()?;
        }
        None => {
            let mut err = std::io::stderr();
            let question = toolhost::for_terminal(question, err.is_terminal());
            let _ = err.write_all(question.as_bytes());
            let _ = err.flush();
        }
    }
    lines.recv().await
}

/// The question a call is approved by at the terminal (the same for `toolhost call`,
/// `run`, `chat` and a call the running host asks about over the control socket).
pub(crate) fn approval_question(
    tool: &str,
    risk: impl std::fmt::Display,
    origin: impl std::fmt::Display,
    arguments: &serde_json::Value,
    offer_session: bool,
    offer_always: bool,
) -> String {
    let mut keys = String::from("[y] yes  ");
    if offer_session {
        keys.push_str("[s] yes, for this session  ");
    }
    if offer_always {
        keys.push_str("[a] yes, always (until the plugin changes)  ");
    }
    keys.push_str("[N] no: ");
    format!("Allow tool '{tool}' ({risk}, from {origin}) to run with {arguments}?\n{keys}")
}

/// The answer typed (`None`: the terminal could not be read). Keys not offered are "no".
pub(crate) fn approval_answer(
    line: Option<&str>,
    offer_session: bool,
    offer_always: bool,
) -> ApprovalAnswer {
    match line.map(|l| l.trim().to_ascii_lowercase()) {
        Some(l) if l == "y" || l == "yes" => ApprovalAnswer::Approve,
        Some(l) if offer_session && (l == "s" || l == "session") => {
            ApprovalAnswer::ApproveForSession
        }
        Some(l) if offer_always && (l == "a" || l == "always") => ApprovalAnswer::ApproveAlways,
        Some(_) => ApprovalAnswer::Decline("the user answered no".to_owned()),
        None => ApprovalAnswer::Decline("the terminal could not be read".to_owned()),
    }
}

/// Prompts on stderr and reads the answer from stdin (a terminal).
pub(crate) struct TerminalApprover;

#[async_trait]
impl Approver for TerminalApprover {
    async fn ask(&self, request: &ApprovalRequest) -> ApprovalAnswer {
        let question = approval_question(
            &request.tool,
            request.risk,
            &request.origin,
            &request.arguments,
            request.offer_session,
            request.offer_always,
        );
        let line = ask(&question).await;
        approval_answer(line.as_deref(), request.offer_session, request.offer_always)
    }

    fn who(&self) -> String {
        "terminal".to_owned()
    }
}

/// Answers a running host's approval questions (`toolhost call --control`) by asking the
/// person at this terminal, with the same question as [`TerminalApprover`].
pub(crate) struct TerminalPrompt;

#[async_trait]
impl toolhost::ApprovalPrompt for TerminalPrompt {
    async fn answer(&self, q: &toolhost::ApprovalQuestion) -> toolhost::ApprovalReply {
        let question = approval_question(
            &q.tool,
            q.risk,
            &q.origin,
            &q.arguments,
            q.offer_session,
            q.offer_always,
        );
        let line = ask(&question).await;
        match approval_answer(line.as_deref(), q.offer_session, q.offer_always) {
            ApprovalAnswer::Approve => toolhost::ApprovalReply::Once,
            ApprovalAnswer::ApproveForSession => toolhost::ApprovalReply::Session,
            ApprovalAnswer::ApproveAlways => toolhost::ApprovalReply::Always,
            ApprovalAnswer::Decline(reason) | ApprovalAnswer::Pending(reason) => {
                toolhost::ApprovalReply::No { reason }
            }
        }
    }
}

/// The person at the terminal: answers `clarify` and other questions tools ask (when
/// stdin is a terminal), and sees tools' progress on stderr.
pub(crate) struct TerminalCaller {
    /// Whether questions can be asked (stdin is a terminal).
    ask: bool,
    /// Where progress lines go, and when the last one was written (lines are at most
    /// five a second on a file or pipe; a terminal's one status line is rewritten).
    progress: std::sync::Mutex<Option<std::time::Instant>>,
}

impl TerminalCaller {
    /// The person at this terminal; `ask`: stdin is a terminal, so questions can be
    /// answered.
    pub(crate) fn new(ask: bool) -> TerminalCaller {
        TerminalCaller {
            ask,
            progress: std::sync::Mutex::new(None),
        }
    }
}

#[async_trait]
impl CallerChannel for TerminalCaller {
    fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let mut last = self
            .progress
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let done = total.is_some_and(|t| progress >= t);
        let terminal = std::io::stderr().is_terminal();
        let now = std::time::Instant::now();
        if !terminal
            && !done
            && last.is_some_and(|l| now.duration_since(l) < std::time::Duration::from_millis(200))
        {
            return;
        }
        *last = Some(now);
        let amount = match total {
            Some(t) if t > 0.0 => format!("{:.0}% ({progress}/{t})", progress / t * 100.0),
            _ => format!("{progress}"),
        };
        let text = match message {
            Some(m) => format!("progress: {amount} {}", crate::output::summary(m, 100)),
            None => format!("progress: {amount}"),
        };
        let mut err = std::io::stderr().lock();
        let text = toolhost::for_terminal(&text, terminal);
        let _ = if terminal {
            // One status line, rewritten in place; the finished one stays.
            write!(err, "\r{text}\x1b[K{}", if done { "\n" } else { "" })
        } else {
            writeln!(err, "{text}")
        };
        let _ = err.flush();
    }

    async fn sample(
        &self,
        _request: toolhost_plugin_api::SampleRequest,
    ) -> Result<toolhost_plugin_api::SampleAnswer, ServiceError> {
        // A model answers tools' sampling requests in an agent's turns (the agent's own
        // channel); a person at a terminal is not one.
        Err(ServiceError::Unavailable(
            "sampling is not available: nobody is at the other end that has a model (the \
             terminal offers none)"
                .to_owned(),
        ))
    }

    async fn ask_user(&self, request: AskRequest) -> Result<AskAnswer, ServiceError> {
        if !self.ask {
            return Err(ServiceError::Unavailable(
                "asking the person is not available: nobody is at the other end (stdin is \
                 not a terminal)"
                    .to_owned(),
            ));
        }
        let message = &request.message;
        let choices: Vec<String> = request
            .schema
            .pointer("/properties/answer/enum")
            .and_then(Value::as_array)
            .map(|c| {
                c.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let mut question = format!("? {message}\n");
        if !choices.is_empty() {
            question.push_str(&format!("  (one of: {})\n", choices.join(", ")));
        }
        question.push_str("answer (empty to decline): ");
        let line = ask(&question).await.ok_or_else(|| {
            ServiceError::Failed("the terminal's input ended before an answer".to_owned())
        })?;
        let answer = line.trim();
        Ok(if answer.is_empty() {
            AskAnswer::Decline
        } else {
            AskAnswer::Accept {
                content: json!({"answer": answer}),
            }
        })
    }
}
