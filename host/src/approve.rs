//! Asking the person at the terminal to approve a call (`toolhost call` without `--yes`).

use std::io::{BufRead, Write};

use async_trait::async_trait;
use toolhost::{ApprovalAnswer, ApprovalRequest, Approver};

/// One question on the terminal at a time: calls run in parallel (and child turns too),
/// and an answer must go to the question the person is looking at.
pub(crate) static TERMINAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Prompts on stderr and reads the answer from stdin (a terminal).
pub(crate) struct TerminalApprover;

#[async_trait]
impl Approver for TerminalApprover {
    async fn ask(&self, request: &ApprovalRequest) -> ApprovalAnswer {
        let question = format!(
            "Allow tool '{}' ({}, from {}) to run with {}?\n[y] yes  [s] yes, for this session  [N] no: ",
            request.tool, request.risk, request.origin, request.arguments
        );
        let _turn = TERMINAL.lock().await;
        let answer = tokio::task::spawn_blocking(move || {
            let mut err = std::io::stderr();
            let _ = err.write_all(question.as_bytes());
            let _ = err.flush();
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line).map(|_| line)
        })
        .await;
        match answer {
            Ok(Ok(line)) => match line.trim().to_ascii_lowercase().as_str() {
                "y" | "yes" => ApprovalAnswer::Approve,
                "s" | "session" => ApprovalAnswer::ApproveForSession,
                _ => ApprovalAnswer::Decline("the user answered no".to_owned()),
            },
            _ => ApprovalAnswer::Decline("the terminal could not be read".to_owned()),
        }
    }
}
