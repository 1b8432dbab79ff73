//! Lasting ("always") approvals in the shared state: the same entries the profiles'
//! `approvals/always.json` files hold, one row each, so an approval granted through one
//! replica is honoured by all. Each replica caches a profile's approvals until a change
//! is notified; while notifications may be missed, every check reads the database, and
//! if it cannot be reached the check says "not approved" (the call asks again).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use toolhost_calls::approvals::LastingApproval;
use toolhost_calls::policy::{ApprovalKey, KeepError, LastingApprovals};
use toolhost_calls::tool::Risk;

use super::{Change, SharedState, StateError, notify};

/// The profiles' lasting approvals in the shared state, as a [`LastingApprovals`] store.
pub struct SharedApprovals {
    state: Arc<SharedState>,
    profiles: BTreeSet<String>,
    /// Per profile: the generation it was read at and what it held.
    cache: Mutex<HashMap<String, Cached>>,
}

/// A profile's approvals as read, and the generation of changes then.
type Cached = (u64, Arc<Vec<LastingApproval>>);

impl std::fmt::Debug for SharedApprovals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedApprovals")
            .field("profiles", &self.profiles)
            .finish_non_exhaustive()
    }
}

impl SharedApprovals {
    /// The approvals of `profiles` in `state`.
    pub fn new(state: Arc<SharedState>, profiles: impl IntoIterator<Item = String>) -> Self {
        SharedApprovals {
            state,
            profiles: profiles.into_iter().collect(),
            cache: Mutex::new(HashMap::new()),
        }
    }

    fn current(&self, profile: &str) -> Result<Arc<Vec<LastingApproval>>, StateError> {
        let generation = self.state.changes().generation(Change::Approvals);
        if let Some(generation) = generation {
            let cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some((seen, list)) = cache.get(profile)
                && *seen == generation
            {
                return Ok(Arc::clone(list));
            }
        }
        let list = Arc::new(list(&self.state, profile)?);
        if let Some(generation) = generation {
            self.cache
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(profile.to_owned(), (generation, Arc::clone(&list)));
        }
        Ok(list)
    }
}

impl LastingApprovals for SharedApprovals {
    fn available(&self, profile: &str) -> bool {
        self.profiles.contains(profile)
    }

    fn approved(&self, profile: &str, key: &ApprovalKey) -> bool {
        match self.current(profile) {
            Ok(list) => list.iter().any(|a| a.matches(key)),
            Err(e) => {
                tracing::warn!(profile, "lasting approvals are not honoured now: {e}");
                false
            }
        }
    }

    fn keep(&self, profile: &str, key: &ApprovalKey, by: &str) -> Result<(), KeepError> {
        if !self.available(profile) {
            return Err(KeepError::NoStore {
                profile: profile.to_owned(),
            });
        }
        keep(&self.state, profile, LastingApproval::of(key, by))
            .map_err(|e| KeepError::Store(Box::new(e)))
    }
}

/// `profile`'s lasting approvals, by tool.
pub fn list(state: &Arc<SharedState>, profile: &str) -> Result<Vec<LastingApproval>, StateError> {
    let me = Arc::clone(state);
    let profile = profile.to_owned();
    state.block(async move {
        let client = me.client().await?;
        let rows = client
            .query(
                "SELECT tool, plugin, plugin_sha256, schema_sha256, risk, approved_at, \
                 approved_by FROM toolhost_approvals WHERE profile = $1 ORDER BY tool",
                &[&profile],
            )
            .await
            .map_err(me.query_error("list the lasting approvals"))?;
        rows.iter()
            .map(|row| {
                let risk: String = row.get(4);
                let risk: Risk = serde_json::from_value(serde_json::Value::String(risk))
                    .map_err(|e| me.damaged("lasting approval", e))?;
                Ok(LastingApproval {
                    tool: row.get(0),
                    plugin: row.get(1),
                    plugin_sha256: row.get(2),
                    schema_sha256: row.get(3),
                    risk,
                    approved_at: row.get(5),
                    approved_by: row.get(6),
                })
            })
            .collect()
    })
}

/// Keeps `entry` for `profile`, replacing an older entry for the same tool.
pub fn keep(
    state: &Arc<SharedState>,
    profile: &str,
    entry: LastingApproval,
) -> Result<(), StateError> {
    let me = Arc::clone(state);
    let profile = profile.to_owned();
    state.block(async move {
        let mut client = me.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(me.query_error("begin keeping an approval"))?;
        tx.batch_execute(super::SYNCED)
            .await
            .map_err(me.query_error("ask for a synced commit"))?;
        tx.execute(
            "DELETE FROM toolhost_approvals WHERE profile = $1 AND tool = $2",
            &[&profile, &entry.tool],
        )
        .await
        .map_err(me.query_error("replace a lasting approval"))?;
        tx.execute(
            "INSERT INTO toolhost_approvals (profile, tool, plugin, plugin_sha256, \
             schema_sha256, risk, approved_at, approved_by) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                &profile,
                &entry.tool,
                &entry.plugin,
                &entry.plugin_sha256,
                &entry.schema_sha256,
                &entry.risk.to_string(),
                &entry.approved_at,
                &entry.approved_by,
            ],
        )
        .await
        .map_err(me.query_error("keep a lasting approval"))?;
        notify(&tx, Change::Approvals)
            .await
            .map_err(me.query_error("notify the replicas of an approval"))?;
        tx.commit()
            .await
            .map_err(me.query_error("commit a lasting approval"))
    })?;
    state.changes().bump(Change::Approvals);
    Ok(())
}

/// Removes `profile`'s approvals of `tool` (all of them when `None`); how many.
pub fn revoke(
    state: &Arc<SharedState>,
    profile: &str,
    tool: Option<&str>,
) -> Result<u64, StateError> {
    let me = Arc::clone(state);
    let profile = profile.to_owned();
    let tool = tool.map(str::to_owned);
    let removed = state.block(async move {
        let mut client = me.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(me.query_error("begin revoking approvals"))?;
        tx.batch_execute(super::SYNCED)
            .await
            .map_err(me.query_error("ask for a synced commit"))?;
        let removed = tx
            .execute(
                "DELETE FROM toolhost_approvals WHERE profile = $1 \
                 AND ($2::text IS NULL OR tool = $2)",
                &[&profile, &tool],
            )
            .await
            .map_err(me.query_error("revoke lasting approvals"))?;
        notify(&tx, Change::Approvals)
            .await
            .map_err(me.query_error("notify the replicas of a revocation"))?;
        tx.commit()
            .await
            .map_err(me.query_error("commit a revocation"))?;
        Ok(removed)
    })?;
    state.changes().bump(Change::Approvals);
    Ok(removed)
}
