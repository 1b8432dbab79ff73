//! Approval questions put to sessionless (2026-07-28) clients, in the shared state: the
//! request state a client gets with the question names a row, so its retry with the
//! answer is honoured by whichever replica it reaches. A state is used once (the row is
//! deleted as it is taken) and expires with its question.

use std::sync::Arc;
use std::time::Duration;

use super::{SharedState, StateError};

/// The approval questions in the shared state.
#[derive(Debug, Clone)]
pub(crate) struct SharedPending {
    state: Arc<SharedState>,
}

impl SharedPending {
    pub(crate) fn new(state: Arc<SharedState>) -> SharedPending {
        SharedPending { state }
    }

    /// Records the question `state` for the call `call` (and drops expired ones).
    pub(crate) fn add(&self, state: &str, call: [u8; 32], ttl: Duration) -> Result<(), StateError> {
        let me = Arc::clone(&self.state);
        let state = state.to_owned();
        let ttl = ttl.as_secs_f64();
        self.state.block(async move {
            let client = me.client().await?;
            // Expired questions go in the same statement (one round trip).
            client
                .execute(
                    "WITH expired AS (DELETE FROM toolhost_pending_approvals \
                     WHERE asked_at < now() - make_interval(secs => $3)) \
                     INSERT INTO toolhost_pending_approvals (state, call) VALUES ($1, $2)",
                    &[&state, &call.as_slice(), &ttl],
                )
                .await
                .map_err(me.query_error("keep an approval question"))?;
            Ok(())
        })
    }

    /// Whether `state` names an unexpired question for exactly `call`; used up either way.
    pub(crate) fn take(
        &self,
        state: &str,
        call: &[u8; 32],
        ttl: Duration,
    ) -> Result<bool, StateError> {
        let me = Arc::clone(&self.state);
        let state = state.to_owned();
        let ttl = ttl.as_secs_f64();
        let asked: Option<Vec<u8>> = self.state.block(async move {
            let client = me.client().await?;
            let row = client
                .query_opt(
                    "DELETE FROM toolhost_pending_approvals WHERE state = $1 \
                     AND asked_at >= now() - make_interval(secs => $2) RETURNING call",
                    &[&state, &ttl],
                )
                .await
                .map_err(me.query_error("take an approval question"))?;
            Ok(row.map(|r| r.get(0)))
        })?;
        Ok(asked.is_some_and(|c| c.as_slice() == call.as_slice()))
    }

    /// Whether `state` names an unexpired question (not used up).
    pub(crate) fn knows(&self, state: &str, ttl: Duration) -> Result<bool, StateError> {
        let me = Arc::clone(&self.state);
        let state = state.to_owned();
        let ttl = ttl.as_secs_f64();
        self.state.block(async move {
            let client = me.client().await?;
            let row = client
                .query_opt(
                    "SELECT 1 FROM toolhost_pending_approvals WHERE state = $1 \
                     AND asked_at >= now() - make_interval(secs => $2)",
                    &[&state, &ttl],
                )
                .await
                .map_err(me.query_error("look up an approval question"))?;
            Ok(row.is_some())
        })
    }
}
