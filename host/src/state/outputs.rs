//! Kept outputs in the shared state: the full text of a cut result and its record, one
//! row each, so a `resource_link` minted by one replica reads back through any other.
//! The call core's [`OutputStore`](toolhost_calls::outputs::OutputStore) makes the ids
//! and checks the owner; this keeps the bytes and prunes by age and total size.

use std::sync::Arc;
use std::time::Duration;

use toolhost_calls::outputs::{OutputMeta, PruneReport, SharedOutputs, SharedOutputsError};

use super::SharedState;

/// The shared state as the call core's [`SharedOutputs`].
#[derive(Debug, Clone)]
pub struct SharedOutputStore {
    state: Arc<SharedState>,
}

impl SharedOutputStore {
    /// The kept outputs of `state`.
    pub fn new(state: Arc<SharedState>) -> SharedOutputStore {
        SharedOutputStore { state }
    }
}

impl SharedOutputs for SharedOutputStore {
    fn put(
        &self,
        profile: &str,
        id: &str,
        meta: &OutputMeta,
        text: &str,
    ) -> Result<(), SharedOutputsError> {
        let me = Arc::clone(&self.state);
        let meta = serde_json::to_value(meta)?;
        let (profile, id, text) = (profile.to_owned(), id.to_owned(), text.to_owned());
        let bytes = i64::try_from(text.len()).unwrap_or(i64::MAX);
        self.state.block(async move {
            let client = me.client().await?;
            client
                .execute(
                    "INSERT INTO toolhost_outputs (profile, id, meta, body, bytes) \
                     VALUES ($1, $2, $3, $4, $5)",
                    &[&profile, &id, &meta, &text, &bytes],
                )
                .await
                .map_err(me.query_error("keep an output"))?;
            Ok(())
        })?;
        Ok(())
    }

    fn get(
        &self,
        profile: &str,
        id: &str,
    ) -> Result<Option<(OutputMeta, String)>, SharedOutputsError> {
        let me = Arc::clone(&self.state);
        let (profile, id) = (profile.to_owned(), id.to_owned());
        let row = self.state.block(async move {
            let client = me.client().await?;
            client
                .query_opt(
                    "SELECT meta, body FROM toolhost_outputs WHERE profile = $1 AND id = $2",
                    &[&profile, &id],
                )
                .await
                .map_err(me.query_error("read a kept output"))
        })?;
        let Some(row) = row else { return Ok(None) };
        let meta: serde_json::Value = row.get(0);
        let meta: OutputMeta = serde_json::from_value(meta)
            .map_err(|e| self.state.damaged("kept output's record", e))?;
        Ok(Some((meta, row.get(1))))
    }

    fn prune(
        &self,
        profile: &str,
        keep_for: Option<Duration>,
        keep_bytes: u64,
    ) -> Result<PruneReport, SharedOutputsError> {
        let me = Arc::clone(&self.state);
        let profile = profile.to_owned();
        let keep_for = keep_for.map(|d| d.as_secs_f64());
        let keep_bytes = i64::try_from(keep_bytes).unwrap_or(i64::MAX);
        let report = self.state.block(async move {
            let mut client = me.client().await?;
            let tx = client
                .transaction()
                .await
                .map_err(me.query_error("begin pruning kept outputs"))?;
            let (by_age, aged_bytes) = match keep_for {
                Some(seconds) => {
                    let row = tx
                        .query_one(
                            "WITH gone AS (DELETE FROM toolhost_outputs WHERE profile = $1 \
                             AND kept_at < now() - make_interval(secs => $2) RETURNING bytes) \
                             SELECT count(*), coalesce(sum(bytes), 0)::bigint FROM gone",
                            &[&profile, &seconds],
                        )
                        .await
                        .map_err(me.query_error("prune kept outputs by age"))?;
                    (row.get::<_, i64>(0), row.get::<_, i64>(1))
                }
                None => (0, 0),
            };
            let total: i64 = tx
                .query_one(
                    "SELECT coalesce(sum(bytes), 0)::bigint FROM toolhost_outputs \
                     WHERE profile = $1",
                    &[&profile],
                )
                .await
                .map_err(me.query_error("total the kept outputs"))?
                .get(0);
            let (mut by_size, mut sized_bytes) = (0, 0);
            if keep_bytes > 0 && total > keep_bytes {
                // Oldest first, until the total is within 90% of the limit.
                let target = keep_bytes - keep_bytes / 10;
                let row = tx
                    .query_one(
                        "WITH ranked AS (SELECT id, bytes, sum(bytes) OVER \
                         (ORDER BY kept_at DESC, id DESC) AS newer FROM toolhost_outputs \
                         WHERE profile = $1), \
                         gone AS (DELETE FROM toolhost_outputs o USING ranked r \
                         WHERE o.profile = $1 AND o.id = r.id AND r.newer > $2 \
                         RETURNING o.bytes) \
                         SELECT count(*), coalesce(sum(bytes), 0)::bigint FROM gone",
                        &[&profile, &target],
                    )
                    .await
                    .map_err(me.query_error("prune kept outputs by size"))?;
                by_size = row.get::<_, i64>(0);
                sized_bytes = row.get::<_, i64>(1);
            }
            tx.commit()
                .await
                .map_err(me.query_error("commit a prune"))?;
            let count = |n: i64| usize::try_from(n).unwrap_or(0);
            let bytes = |n: i64| u64::try_from(n).unwrap_or(0);
            Ok(PruneReport {
                by_age: count(by_age),
                by_size: count(by_size),
                freed_bytes: bytes(aged_bytes) + bytes(sized_bytes),
                kept_bytes: bytes(total - sized_bytes),
            })
        })?;
        Ok(report)
    }
}
