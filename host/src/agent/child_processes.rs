//! A child turn's teardown: the processes its tools started on its behalf (tagged
//! `TOOLHOST_SESSION=<the child's session id>` in their environment, the convention
//! plugin-api documents for tools that start processes) are ended when the child turn
//! ends, however it ends (answer, failure, time-out, cancel), and reported: a tracing
//! line always, and a line appended to the child's answer, so the parent's model knows.
//!
//! The ending runs when the child's outcome is known. If the parent's call is dropped
//! before that (its grace after a cancel ran out while the child was still stopping), a
//! [`Teardown`] guard held across the child turn cancels the child and ends its tagged
//! processes from a blocking task of its own instead (logged, since no answer is left to
//! report them in).

use std::time::Duration;

use crate::sys::tagged::{self, SESSION_VARIABLE};

/// How long a tagged process has to exit after SIGTERM before it is killed.
const GRACE: Duration = Duration::from_secs(1);

/// Ends what the child turn of `session` left running and returns its `outcome`, with
/// a line naming the ended processes appended to an answer.
pub(super) async fn end<E>(session: &str, outcome: Result<String, E>) -> Result<String, E> {
    let value = session.to_owned();
    // A blocking task runs to its end even if this future is dropped meanwhile.
    let ended =
        tokio::task::spawn_blocking(move || tagged::end_tagged(SESSION_VARIABLE, &value, GRACE))
            .await;
    let ended = match ended {
        Ok(ended) => ended,
        Err(e) => {
            tracing::warn!(session, error = %e, "could not end the child turn's processes");
            return outcome;
        }
    };
    if ended.is_empty() {
        return outcome;
    }
    let line = tagged::describe(&ended);
    tracing::info!(session, "{line}");
    outcome.map(|answer| format!("{answer}\n\n[toolhost {line}]"))
}

/// Held across a child turn: dropped before [`Teardown::finish`] (the turn's future was
/// dropped mid-way), it cancels the child and ends its tagged processes in the
/// background, so a dropped call never leaves them running.
pub(super) struct Teardown {
    session: String,
    cancel: tokio_util::sync::CancellationToken,
    armed: bool,
}

impl Teardown {
    /// A guard for the child turn of `session`, stopped through `cancel`.
    pub(super) fn new(session: &str, cancel: tokio_util::sync::CancellationToken) -> Self {
        Teardown {
            session: session.to_owned(),
            cancel,
            armed: true,
        }
    }

    /// The child turn ended with `outcome`: ends its processes and reports them in it.
    pub(super) async fn finish<E>(mut self, outcome: Result<String, E>) -> Result<String, E> {
        self.armed = false;
        end(&self.session, outcome).await
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
        // Its tools get the same grace to stop on their own as at a normal end.
        runtime.spawn_blocking(move || {
            let ended = tagged::end_tagged(SESSION_VARIABLE, &session, GRACE);
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
        drop(Teardown::new(&session, cancel.clone()));
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
        let guard = Teardown::new(&session, cancel.clone());
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
