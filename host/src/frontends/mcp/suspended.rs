//! Plugin calls of sessionless (2026-07-28) clients that wait on the client: a plugin's
//! question or sampling request becomes an input-required result whose `requestState`
//! names the waiting call (kept here, never in the state itself), and the client's retry
//! with `inputResponses` answers it and resumes that same call, so a tool that asks
//! mid-way is never run twice. A state is single-use, unguessable, bound to the caller
//! (its token and client) and to the call (tool and arguments), and expires with its
//! question: the plugin is then told nobody answered and its call is cancelled.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::caller::{Inputs, McpCaller, Question};
use toolhost_calls::context::Caller;
use toolhost_calls::result::ToolResult;

/// At most this many calls of one token (over stdio: of one connection) wait for
/// answers, whatever client names its requests give; past it that token's longest-waiting
/// call is abandoned for the new one.
const MAX_PER_CALLER: usize = 32;
/// At most this many calls wait for answers in all (past it, the longest-waiting goes).
const MAX_WAITING: usize = 1024;

/// What a call may have left to ask its sessionless client once it ended: the approval
/// question the policy put (answered by calling again). Implemented by the MCP approver.
pub(super) trait AskAfter: Send + Sync {
    /// The input-required result to send instead of the call's result, if any.
    fn question_after(&self) -> Option<rmcp::model::InputRequiredResult>;
}

/// A call running for a sessionless client, its questions arriving on `questions`.
pub(super) struct Running {
    pub(super) task: JoinHandle<ToolResult>,
    pub(super) questions: mpsc::Receiver<Question>,
    pub(super) cancel: CancellationToken,
    pub(super) caller: Arc<McpCaller>,
    /// The call's approver (its question, if the policy asked, is built after the call).
    pub(super) approver: Option<Arc<dyn AskAfter>>,
}

impl Drop for Running {
    /// A call nobody drives any more (its request, suspension or task gone) is cancelled,
    /// not left running unobserved; after it ended this changes nothing.
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Who may resume a call: the token and the client that started it, and over stdio the
/// connection (whose end abandons its calls).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Owner {
    token: Option<String>,
    client: Option<String>,
    connection: Option<String>,
}

impl Owner {
    /// Whether `other` counts against the same limits: the same token and connection. The
    /// client's name is its own to choose (every request may give another), so it binds
    /// a waiting call to its client but never makes room for more.
    pub(super) fn same_quota(&self, other: &Owner) -> bool {
        self.token == other.token && self.connection == other.connection
    }

    /// `connection`: the session of a stdio connection; `None` over HTTP, where each
    /// sessionless request is a session of its own.
    pub(super) fn of(caller: &Caller, connection: Option<&str>) -> Owner {
        Owner {
            token: caller.token.clone(),
            client: caller.client.as_ref().map(|(name, _)| name.clone()),
            connection: connection.map(str::to_owned),
        }
    }
}

/// The sha256 of `parts`, each prefixed by its length (so no two lists of parts hash
/// alike): what binds an approval answer or a waiting call to the call it was asked for.
pub(super) fn digest(parts: &[&[u8]]) -> [u8; 32] {
    use sha2::Digest as _;
    let mut hash = sha2::Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part);
    }
    hash.finalize().into()
}

/// What identifies a call for its resumption: the tool and its arguments.
pub(super) fn fingerprint(tool: &str, arguments: &Value) -> [u8; 32] {
    digest(&[tool.as_bytes(), arguments.to_string().as_bytes()])
}

/// A call waiting for its client to answer `inputs`.
pub(super) struct Waiting {
    owner: Owner,
    call: [u8; 32],
    asked: Instant,
    pub(super) run: Running,
    pub(super) inputs: Inputs,
}

impl Waiting {
    /// Ends the wait unanswered: the plugin's question fails and its call is cancelled.
    fn abandon(self) {
        self.run.cancel.cancel();
        // Dropping the question's answer sender tells the plugin nobody answered.
    }
}

/// What a retry's `requestState` named.
pub(super) enum Taken {
    /// The waiting call it names, now the retry's to resume.
    Resume(Box<Waiting>),
    /// No waiting call (another kind of state, or none this server issued).
    Unknown,
    /// A waiting call, but not this caller's or not this call: refused, and the call
    /// keeps waiting for its own client.
    Refused(&'static str),
}

/// The calls waiting for answers, by request state, each for as long as a client has to
/// answer.
pub(super) struct SuspendedCalls {
    waiting: Arc<Mutex<HashMap<String, Waiting>>>,
    ttl: Duration,
    /// This replica's name, when it is one of many: the states it issues start with it,
    /// so a retry that reaches another replica is told where its call waits.
    replica: Option<String>,
}

/// What separates the replica's name from the rest of a request state.
const REPLICA_MARK: char = '~';

impl SuspendedCalls {
    pub(super) fn new(ttl: Duration, replica: Option<String>) -> SuspendedCalls {
        SuspendedCalls {
            waiting: Arc::new(Mutex::new(HashMap::new())),
            ttl,
            replica,
        }
    }

    /// The replica that issued `state`, when that is another than this one: the call
    /// waiting for the answer runs there, not here.
    pub(super) fn issued_elsewhere<'s>(&self, state: &'s str) -> Option<&'s str> {
        let mine = self.replica.as_deref()?;
        let (replica, _) = state.split_once(REPLICA_MARK)?;
        (replica != mine).then_some(replica)
    }

    /// This replica's name, if it is one of many.
    pub(super) fn replica(&self) -> Option<&str> {
        self.replica.as_deref()
    }

    /// Leaves `run` waiting for `inputs` and returns the state the client retries with.
    /// Within the time a client has to answer; past it the call is abandoned. When the
    /// caller (or the server) has as many calls waiting as it may, its (the server's)
    /// longest-waiting call is abandoned to make room: a client that moved on from a
    /// question never blocks its new calls.
    pub(super) fn wait(
        &self,
        owner: Owner,
        call: [u8; 32],
        run: Running,
        inputs: Inputs,
    ) -> String {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let state = match &self.replica {
            Some(replica) => format!("{replica}{REPLICA_MARK}{id}"),
            None => id,
        };
        let abandoned = {
            let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
            let mut abandoned = Vec::new();
            let mine = waiting
                .values()
                .filter(|w| w.owner.same_quota(&owner))
                .count();
            if mine >= MAX_PER_CALLER
                && let Some(oldest) = oldest(&waiting, Some(&owner))
                && let Some(w) = waiting.remove(&oldest)
            {
                abandoned.push(w);
            }
            if waiting.len() >= MAX_WAITING
                && let Some(oldest) = oldest(&waiting, None)
                && let Some(w) = waiting.remove(&oldest)
            {
                abandoned.push(w);
            }
            waiting.insert(
                state.clone(),
                Waiting {
                    owner,
                    call,
                    asked: Instant::now(),
                    run,
                    inputs,
                },
            );
            abandoned
        };
        for call in abandoned {
            call.abandon();
        }
        // The time limit: a timer, so a plugin is told even if no request comes again.
        let calls: Weak<Mutex<HashMap<String, Waiting>>> = Arc::downgrade(&self.waiting);
        let expiring = state.clone();
        let ttl = self.ttl;
        tokio::spawn(async move {
            tokio::time::sleep(ttl).await;
            let Some(calls) = calls.upgrade() else {
                return;
            };
            let expired = calls
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&expiring);
            if let Some(waiting) = expired {
                waiting.abandon();
            }
        });
        state
    }

    /// Abandons the calls waiting for the stdio connection `connection`, which ended:
    /// nobody can answer them now.
    pub(super) fn abandon_connection(&self, connection: &str) {
        let ended: Vec<Waiting> = self
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extract_if(|_, w| w.owner.connection.as_deref() == Some(connection))
            .map(|(_, w)| w)
            .collect();
        for call in ended {
            call.abandon();
        }
    }

    /// The waiting call `state` names, for `owner`'s retry of the call `call`.
    pub(super) fn take(&self, state: &str, owner: &Owner, call: &[u8; 32]) -> Taken {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(found) = waiting.get(state) else {
            return Taken::Unknown;
        };
        if found.asked.elapsed() >= self.ttl {
            if let Some(expired) = waiting.remove(state) {
                expired.abandon();
            }
            return Taken::Unknown;
        }
        if &found.owner != owner {
            return Taken::Refused("it was issued to another client");
        }
        if &found.call != call {
            return Taken::Refused("it was issued for another call (another tool or arguments)");
        }
        match waiting.remove(state) {
            Some(w) => Taken::Resume(Box::new(w)),
            None => Taken::Unknown,
        }
    }
}

/// The state of the longest-waiting call (of `owner`'s, if given).
fn oldest(waiting: &HashMap<String, Waiting>, owner: Option<&Owner>) -> Option<String> {
    waiting
        .iter()
        .filter(|(_, w)| owner.is_none_or(|o| w.owner.same_quota(o)))
        .min_by_key(|(_, w)| w.asked)
        .map(|(state, _)| state.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(token: Option<&str>, client: &str, connection: Option<&str>) -> Owner {
        Owner {
            token: token.map(str::to_owned),
            client: Some(client.to_owned()),
            connection: connection.map(str::to_owned),
        }
    }

    #[test]
    fn a_token_is_one_quota_whatever_client_names_it_gives() {
        let a = owner(Some("t1"), "client-a", None);
        assert!(a.same_quota(&owner(Some("t1"), "client-b", None)));
        assert_ne!(a, owner(Some("t1"), "client-b", None));
        assert!(!a.same_quota(&owner(Some("t2"), "client-a", None)));
        assert!(!a.same_quota(&owner(None, "client-a", None)));
        let stdio = owner(None, "x", Some("conn-1"));
        assert!(stdio.same_quota(&owner(None, "y", Some("conn-1"))));
        assert!(!stdio.same_quota(&owner(None, "x", Some("conn-2"))));
    }
}
