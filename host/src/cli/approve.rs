//! Asking the person at the terminal: approvals (`toolhost call`, `run`, `chat` without
//! `--yes`), questions from tools, and the chat's prompt, all reading one line at a time
//! from a single stdin reader.

use std::io::{BufRead, Write};
use std::sync::OnceLock;

use async_trait::async_trait;
use tokio::sync::Mutex;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use toolhost::{ApprovalAnswer, ApprovalRequest, Approver};

/// The lines typed on stdin, read by one thread for the whole process, so that a
/// question abandoned by a cancelled turn never swallows the next line.
fn lines() -> &'static Mutex<UnboundedReceiver<String>> {
    static LINES: OnceLock<Mutex<UnboundedReceiver<String>>> = OnceLock::new();
    LINES.get_or_init(|| {
        let (tx, rx) = unbounded_channel();
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
        Mutex::new(rx)
    })
}

/// Writes `question` on stderr and waits for the next line typed (`None` at the end of
/// the input). One question at a time: calls run in parallel (and child turns too), and
/// an answer must go to the question the person is looking at.
pub(crate) async fn ask(question: &str) -> Option<String> {
    let mut lines = lines().lock().await;
    let mut err = std::io::stderr();
    // A tool's question may carry terminal escape sequences: shown, not obeyed.
    let question = toolhost::for_terminal(question, std::io::IsTerminal::is_terminal(&err));
    let _ = err.write_all(question.as_bytes());
    let _ = err.flush();
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
            ApprovalAnswer::Decline(reason) => toolhost::ApprovalReply::No { reason },
        }
    }
}
