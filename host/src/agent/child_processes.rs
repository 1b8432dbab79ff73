//! A child turn's teardown: the processes its tools started on its behalf (tagged
//! `TOOLHOST_SESSION=<the child's session id>` in their environment, the convention
//! plugin-api documents for tools that start processes) are ended when the child turn
//! ends, however it ends (answer, failure, time-out, cancel), and reported: a tracing
//! line always, and a line appended to the child's answer, so the parent's model knows.
//!
//! Weak spot: the ending runs when the child's outcome is known; if the parent's call is
//! dropped before that (its grace after a cancel ran out while the child was still
//! stopping), nothing here runs and the tagged processes are left for the worker's
//! containment or the next teardown of the same session (none: sessions are new per
//! child).

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
