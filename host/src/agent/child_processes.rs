//! A child turn's teardown: the processes its tools started on its behalf (tagged
//! `TOOLHOST_SESSION=<the child's session id>` in their environment, the convention
//! plugin-api documents for tools that start processes) are ended when the child turn
//! ends, however it ends (answer, failure, time-out, cancel), and reported: a tracing
//! line always, and a line appended to the child's answer, so the parent's model knows.
//!
//! A child may hand a process to its parent instead (the `process_manage` tool's
//! `handoff`, recorded in [`Handoffs`]): it is left running at the child's teardown, the
//! child's answer says so, and it ends with the parent's own teardown when the parent is
//! a child turn too (a top-level turn ends none of its tools' processes).
//!
//! The ending runs when the child's outcome is known. If the parent's call is dropped
//! before that (its grace after a cancel ran out while the child was still stopping), a
//! [`Teardown`] guard held across the child turn cancels the child and ends its tagged
//! processes from a blocking task of its own instead (logged, since no answer is left to
//! report them in).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::sys::tagged::{self, EndedProcess, SESSION_VARIABLE};

/// How long a tagged process has to exit after SIGTERM before it is killed.
const GRACE: Duration = Duration::from_secs(1);

/// A process a child turn handed to its parent: tagged with the child's session, it is
/// the parent's now.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Handoff {
    from: String,
    pid: i32,
    to: String,
}

/// The processes child turns handed to their parents, for the agent's lifetime.
#[derive(Debug, Default)]
pub(crate) struct Handoffs {
    handed: Mutex<Vec<Handoff>>,
}

impl Handoffs {
    /// `pid`, tagged with `from`, is `to`'s now.
    pub(super) fn hand(&self, from: &str, pid: i32, to: &str) {
        let mut handed = self.handed.lock().unwrap_or_else(PoisonError::into_inner);
        // Forget the processes that are gone (a top-level parent never ends its own).
        handed.retain(|h| std::path::Path::new(&format!("/proc/{}", h.pid)).exists());
        if !handed.iter().any(|h| h.from == from && h.pid == pid) {
            handed.push(Handoff {
                from: from.to_owned(),
                pid,
                to: to.to_owned(),
            });
        }
    }

    /// The pids `session` handed to its parent.
    fn from(&self, session: &str) -> Vec<i32> {
        self.handed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|h| h.from == session)
            .map(|h| h.pid)
            .collect()
    }

    /// What was handed to `session` (tag and pid): ending with it, forgotten here.
    fn take_to(&self, session: &str) -> Vec<(String, i32)> {
        self.handed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extract_if(.., |h| h.to == session)
            .map(|h| (h.from, h.pid))
            .collect()
    }

    /// The processes handed to `session`, as `(tag, pid)`.
    pub(super) fn to(&self, session: &str) -> Vec<(String, i32)> {
        self.handed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|h| h.to == session)
            .map(|h| (h.from.clone(), h.pid))
            .collect()
    }
}

/// Ends what the child turn of `session` left running, but what it handed to its parent,
/// and what its own children handed to it. Blocking. Returns the ended processes and the
/// handed ones still running (pid and name).
fn end_blocking(session: &str, handoffs: &Handoffs) -> (Vec<EndedProcess>, Vec<(i32, String)>) {
    let kept = handoffs.from(session);
    let inherited = handoffs.take_to(session);
    let mut ended =
        tagged::end_tagged_except(SESSION_VARIABLE, session, GRACE, &|pid| kept.contains(&pid));
    for (tag, pid) in inherited {
        ended.extend(tagged::end_tagged_except(
            SESSION_VARIABLE,
            &tag,
            GRACE,
            &|p| p != pid,
        ));
    }
    let handed = tagged::list_tagged(SESSION_VARIABLE, session)
        .into_iter()
        .filter(|p| kept.contains(&p.pid))
        .map(|p| (p.pid, p.name))
        .collect();
    (ended, handed)
}

/// Ends what the child turn of `session` left running and returns its `outcome`, with
/// lines naming the ended processes and those handed to the parent appended to an answer.
pub(super) async fn end<E>(
    session: &str,
    handoffs: &Arc<Handoffs>,
    outcome: Result<String, E>,
) -> Result<String, E> {
    let value = session.to_owned();
    let handoffs = Arc::clone(handoffs);
    // A blocking task runs to its end even if this future is dropped meanwhile.
    let done = tokio::task::spawn_blocking(move || end_blocking(&value, &handoffs)).await;
    let (ended, handed) = match done {
        Ok(done) => done,
        Err(e) => {
            tracing::warn!(session, error = %e, "could not end the child turn's processes");
            return outcome;
        }
    };
    let mut lines = Vec::new();
    if !ended.is_empty() {
        let line = tagged::describe(&ended);
        tracing::info!(session, "{line}");
        lines.push(format!("[toolhost {line}]"));
    }
    if !handed.is_empty() {
        let list: Vec<String> = handed
            .iter()
            .map(|(pid, name)| format!("pid {pid} {name}"))
            .collect();
        let line = format!(
            "handed to you and still running: {} (process_manage lists them; they end with \
             your turn if you are a helper too)",
            list.join(", ")
        );
        tracing::info!(session, "{line}");
        lines.push(format!("[toolhost {line}]"));
    }
    if lines.is_empty() {
        return outcome;
    }
    outcome.map(|answer| format!("{answer}\n\n{}", lines.join("\n")))
}

/// Held across a child turn: dropped before [`Teardown::finish`] (the turn's future was
/// dropped mid-way), it cancels the child and ends its tagged processes in the
/// background, so a dropped call never leaves them running.
pub(super) struct Teardown {
    session: String,
    cancel: tokio_util::sync::CancellationToken,
    handoffs: Arc<Handoffs>,
    armed: bool,
}

impl Teardown {
    /// A guard for the child turn of `session`, stopped through `cancel`.
    pub(super) fn new(
        session: &str,
        cancel: tokio_util::sync::CancellationToken,
        handoffs: Arc<Handoffs>,
    ) -> Self {
        Teardown {
            session: session.to_owned(),
            cancel,
            handoffs,
            armed: true,
        }
    }

    /// The child turn ended with `outcome`: ends its processes and reports them in it.
    pub(super) async fn finish<E>(mut self, outcome: Result<String, E>) -> Result<String, E> {
        self.armed = false;
        end(&self.session, &self.handoffs, outcome).await
    }
}

impl Drop for Teardown {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.cancel.cancel();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                session = %self.session,
                "a dropped child turn's processes could not be ended: no runtime"
            );
            return;
        };
        let session = std::mem::take(&mut self.session);
        let handoffs = Arc::clone(&self.handoffs);
        // Its tools get the same grace to stop on their own as at a normal end.
        runtime.spawn_blocking(move || {
            let (ended, _) = end_blocking(&session, &handoffs);
            if !ended.is_empty() {
                tracing::info!(
                    session,
                    "{} (its call was dropped)",
                    tagged::describe(&ended)
                );
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::process::{Command, Stdio};
    use std::time::Instant;

    use super::*;

    /// A `sleep` tagged with `session`, already running (it said so).
    fn tagged_sleep(session: &str) -> std::process::Child {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg("sleep 300 & echo ready; wait")
            .env(SESSION_VARIABLE, session)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn sh");
        let mut line = String::new();
        let out = child.stdout.take().expect("stdout");
        std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line).expect("read");
        assert_eq!(line, "ready\n");
        child
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_child_turn_cancels_it_and_ends_its_processes() {
        let session = format!("drop-{}", std::process::id());
        let mut child = tagged_sleep(&session);
        let cancel = tokio_util::sync::CancellationToken::new();
        drop(Teardown::new(&session, cancel.clone(), Arc::default()));
        assert!(cancel.is_cancelled(), "the child is told to stop");
        // The ending runs on a blocking task of its own: wait for it, bounded.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if child.try_wait().expect("wait").is_some() {
                break;
            }
            assert!(Instant::now() < deadline, "the tagged process still runs");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_finished_child_turn_reports_what_it_ended_and_cancels_nothing() {
        let session = format!("finish-{}", std::process::id());
        let mut child = tagged_sleep(&session);
        let cancel = tokio_util::sync::CancellationToken::new();
        let guard = Teardown::new(&session, cancel.clone(), Arc::default());
        let answer = guard.finish(Ok::<_, ()>("done".to_owned())).await;
        let answer = answer.expect("an answer");
        assert!(
            // The shell and its sleep both carry the tag.
            answer.starts_with("done\n\n[toolhost ended 2 processes the helper left running"),
            "{answer}"
        );
        assert!(!cancel.is_cancelled());
        child.wait().expect("reap");
    }
}
