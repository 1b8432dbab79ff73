//! Approval questions relayed to a terminal: with `[mcp] without_elicitation =
//! "terminal"`, a call from an MCP client that cannot ask its user waits, for
//! `[mcp] terminal_approval_secs` at most, for an operator who lists the waiting questions
//! on the control socket (`toolhost approvals pending`) and answers one by its id
//! (`toolhost approvals answer ID yes|session|no`). A question nobody answers in time is
//! declined, saying so; a call cancelled while it waits takes its question away. The
//! `Host` owns the relay: the MCP frontend asks, the control frontend answers, and neither
//! names the other.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::oneshot;

use toolhost_calls::policy::ApprovalAnswer;
use toolhost_calls::tool::Risk;

/// A question waiting for a terminal, as `toolhost approvals pending` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RelayedQuestion {
    /// Its id, to answer it by.
    pub id: u64,
    /// The tool.
    pub tool: String,
    /// Its risk after overrides.
    pub risk: Risk,
    /// Where the tool comes from (plugin and file).
    pub origin: String,
    /// The call's arguments.
    pub arguments: Value,
    /// Who asked: the MCP client (name, token).
    pub asked_by: String,
    /// Whether "for this session" may be answered.
    pub offer_session: bool,
    /// Whether "always" may be answered.
    pub offer_always: bool,
    /// Seconds it has waited.
    pub waited_secs: u64,
    /// Seconds left before it is declined unanswered.
    pub expires_in_secs: u64,
}

/// A question as a frontend asks it (the relay gives it its id and times).
#[derive(Debug, Clone)]
pub(crate) struct NewQuestion {
    pub(crate) tool: String,
    pub(crate) risk: Risk,
    pub(crate) origin: String,
    pub(crate) arguments: Value,
    pub(crate) asked_by: String,
    pub(crate) offer_session: bool,
    pub(crate) offer_always: bool,
}

/// Why a relayed question got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RelayError {
    /// Nobody answered within the time limit.
    #[error(
        "nobody answered at a terminal within {} s (`toolhost approvals pending` lists \
         waiting calls, `toolhost approvals answer ID yes` runs one); call the tool again to \
         ask again",
        .0.as_secs()
    )]
    Unanswered(Duration),
    /// No question with that id waits (answered already, expired, or its call ended).
    #[error(
        "no approval question {0} is waiting (answered already, expired, or its call \
         ended); `toolhost approvals pending` lists the waiting ones"
    )]
    NoSuchQuestion(u64),
    /// The answer is not one the question offers.
    #[error("question {id} does not offer \"{answer}\"; answer yes or no{}", if *.session { ", or session" } else { "" })]
    NotOffered {
        /// The question.
        id: u64,
        /// The answer given.
        answer: &'static str,
        /// Whether it offers "session".
        session: bool,
    },
}

struct Waiting {
    question: NewQuestion,
    asked: Instant,
    limit: Duration,
    answer: oneshot::Sender<ApprovalAnswer>,
}

/// The questions waiting for a terminal, shared by the host's MCP frontends (which ask)
/// and its control socket (where they are answered).
#[derive(Default)]
pub struct ApprovalRelay {
    next: AtomicU64,
    waiting: Mutex<BTreeMap<u64, Waiting>>,
}

/// Takes a question away when its call stops waiting (answered, timed out, cancelled).
struct Withdraw<'a> {
    relay: &'a ApprovalRelay,
    id: u64,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        self.relay
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
    }
}

impl ApprovalRelay {
    /// An empty relay.
    pub fn new() -> ApprovalRelay {
        ApprovalRelay::default()
    }

    /// Waits for a terminal's answer to `question`, `within` at most.
    pub(crate) async fn ask(
        &self,
        question: NewQuestion,
        within: Duration,
    ) -> Result<ApprovalAnswer, RelayError> {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = oneshot::channel();
        tracing::info!(
            id,
            tool = %question.tool,
            asked_by = %question.asked_by,
            "an approval question waits for a terminal: `toolhost approvals pending`"
        );
        self.waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                id,
                Waiting {
                    question,
                    asked: Instant::now(),
                    limit: within,
                    answer: tx,
                },
            );
        let _withdraw = Withdraw { relay: self, id };
        match tokio::time::timeout(within, rx).await {
            Ok(Ok(reply)) => Ok(reply),
            _ => Err(RelayError::Unanswered(within)),
        }
    }

    /// The questions waiting now, oldest first.
    pub fn pending(&self) -> Vec<RelayedQuestion> {
        let now = Instant::now();
        self.waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(id, w)| {
                let waited = now.saturating_duration_since(w.asked);
                RelayedQuestion {
                    id: *id,
                    tool: w.question.tool.clone(),
                    risk: w.question.risk,
                    origin: w.question.origin.clone(),
                    arguments: w.question.arguments.clone(),
                    asked_by: w.question.asked_by.clone(),
                    offer_session: w.question.offer_session,
                    offer_always: w.question.offer_always,
                    waited_secs: waited.as_secs(),
                    expires_in_secs: w.limit.saturating_sub(waited).as_secs(),
                }
            })
            .collect()
    }

    /// Answers question `id` with `reply` (`Pending` is not an answer: it reads as no);
    /// the call it holds goes on at once.
    pub fn answer(&self, id: u64, reply: ApprovalAnswer) -> Result<(), RelayError> {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(w) = waiting.get(&id) else {
            return Err(RelayError::NoSuchQuestion(id));
        };
        let refused = match &reply {
            ApprovalAnswer::ApproveForSession if !w.question.offer_session => Some("session"),
            ApprovalAnswer::ApproveAlways if !w.question.offer_always => Some("always"),
            _ => None,
        };
        let reply = match reply {
            ApprovalAnswer::Pending(reason) => ApprovalAnswer::Decline(reason),
            other => other,
        };
        if let Some(answer) = refused {
            return Err(RelayError::NotOffered {
                id,
                answer,
                session: w.question.offer_session,
            });
        }
        let Some(w) = waiting.remove(&id) else {
            return Err(RelayError::NoSuchQuestion(id));
        };
        // The call stopped waiting in between: as if it were gone already.
        w.answer
            .send(reply)
            .map_err(|_| RelayError::NoSuchQuestion(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn question() -> NewQuestion {
        NewQuestion {
            tool: "write_file".to_owned(),
            risk: Risk::Write,
            origin: "plugin 'workspace'".to_owned(),
            arguments: serde_json::json!({"path": "a"}),
            asked_by: "mcp client test".to_owned(),
            offer_session: true,
            offer_always: false,
        }
    }

    #[tokio::test]
    async fn a_question_is_listed_answered_once_and_then_gone() {
        let relay = std::sync::Arc::new(ApprovalRelay::new());
        let asking = {
            let relay = std::sync::Arc::clone(&relay);
            tokio::spawn(async move { relay.ask(question(), Duration::from_secs(60)).await })
        };
        let id = loop {
            if let Some(q) = relay.pending().first() {
                break q.id;
            }
            tokio::task::yield_now().await;
        };
        assert_eq!(
            relay.answer(id, ApprovalAnswer::ApproveAlways),
            Err(RelayError::NotOffered {
                id,
                answer: "always",
                session: true
            })
        );
        relay
            .answer(id, ApprovalAnswer::ApproveForSession)
            .expect("answered");
        assert_eq!(
            asking.await.expect("joined"),
            Ok(ApprovalAnswer::ApproveForSession)
        );
        assert!(relay.pending().is_empty());
        assert_eq!(
            relay.answer(id, ApprovalAnswer::Approve),
            Err(RelayError::NoSuchQuestion(id))
        );
    }

    #[tokio::test]
    async fn an_unanswered_question_is_declined_at_its_limit_and_withdrawn() {
        let relay = ApprovalRelay::new();
        let answer = relay.ask(question(), Duration::from_millis(20)).await;
        assert_eq!(
            answer,
            Err(RelayError::Unanswered(Duration::from_millis(20)))
        );
        assert!(relay.pending().is_empty());
    }
}
