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

/// Prompts on stderr and reads the answer from stdin (a terminal).
pub(crate) struct TerminalApprover;

#[async_trait]
impl Approver for TerminalApprover {
    async fn ask(&self, request: &ApprovalRequest) -> ApprovalAnswer {
        let question = format!(
            "Allow tool '{}' ({}, from {}) to run with {}?\n[y] yes  [s] yes, for this session  [N] no: ",
            request.tool, request.risk, request.origin, request.arguments
        );
        match ask(&question).await {
            Some(line) => match line.trim().to_ascii_lowercase().as_str() {
                "y" | "yes" => ApprovalAnswer::Approve,
                "s" | "session" => ApprovalAnswer::ApproveForSession,
                _ => ApprovalAnswer::Decline("the user answered no".to_owned()),
            },
            _ => ApprovalAnswer::Decline("the terminal could not be read".to_owned()),
        }
    }
}
