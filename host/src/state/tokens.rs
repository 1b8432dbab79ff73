//! Bearer tokens in the shared state: the rows `toolhost token` writes and every
//! replica's authenticator reads (the same records the token file holds: never a token,
//! only its sha256). A change notifies the other replicas.

use std::sync::Arc;

use super::{Change, SharedState, StateError, notify};

/// A token's row: what the token file keeps of one (its scopes as their names). The MCP
/// frontend's `TokenStore` turns it into its record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TokenRow {
    pub(crate) name: String,
    pub(crate) profile: Option<String>,
    pub(crate) scopes: Vec<String>,
    pub(crate) created: String,
    pub(crate) sha256: String,
}

/// Every token, oldest first.
pub(crate) fn list(state: &Arc<SharedState>) -> Result<Vec<TokenRow>, StateError> {
    let me = Arc::clone(state);
    state.block(async move {
        let client = me.client().await?;
        let rows = client
            .query(
                "SELECT name, profile, scopes, created, sha256 FROM toolhost_tokens \
                 ORDER BY created, name",
                &[],
            )
            .await
            .map_err(me.query_error("list the tokens"))?;
        Ok(rows
            .iter()
            .map(|row| TokenRow {
                name: row.get(0),
                profile: row.get(1),
                scopes: row.get(2),
                created: row.get(3),
                sha256: row.get(4),
            })
            .collect())
    })
}

/// Stores `record` unless its name is taken (`false`).
pub(crate) fn add(state: &Arc<SharedState>, record: TokenRow) -> Result<bool, StateError> {
    let me = Arc::clone(state);
    let added = state.block(async move {
        let mut client = me.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(me.query_error("begin adding a token"))?;
        tx.batch_execute(super::SYNCED)
            .await
            .map_err(me.query_error("ask for a synced commit"))?;
        let inserted = tx
            .execute(
                "INSERT INTO toolhost_tokens (name, profile, scopes, created, sha256) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name) DO NOTHING",
                &[
                    &record.name,
                    &record.profile,
                    &record.scopes,
                    &record.created,
                    &record.sha256,
                ],
            )
            .await
            .map_err(me.query_error("add a token"))?;
        if inserted == 0 {
            return Ok(false);
        }
        notify(&tx, Change::Tokens)
            .await
            .map_err(me.query_error("notify the replicas of a token"))?;
        tx.commit()
            .await
            .map_err(me.query_error("commit a token"))?;
        Ok(true)
    })?;
    state.changes().bump(Change::Tokens);
    Ok(added)
}

/// Removes the token named `name`: what was removed, or `None` if there was none.
pub(crate) fn revoke(state: &Arc<SharedState>, name: &str) -> Result<Option<TokenRow>, StateError> {
    let me = Arc::clone(state);
    let name = name.to_owned();
    let removed = state.block(async move {
        let mut client = me.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(me.query_error("begin revoking a token"))?;
        tx.batch_execute(super::SYNCED)
            .await
            .map_err(me.query_error("ask for a synced commit"))?;
        let row = tx
            .query_opt(
                "DELETE FROM toolhost_tokens WHERE name = $1 \
                 RETURNING name, profile, scopes, created, sha256",
                &[&name],
            )
            .await
            .map_err(me.query_error("revoke a token"))?;
        let Some(row) = row else {
            return Ok(None);
        };
        notify(&tx, Change::Tokens)
            .await
            .map_err(me.query_error("notify the replicas of a revocation"))?;
        tx.commit()
            .await
            .map_err(me.query_error("commit a revocation"))?;
        Ok(Some(TokenRow {
            name: row.get(0),
            profile: row.get(1),
            scopes: row.get(2),
            created: row.get(3),
            sha256: row.get(4),
        }))
    })?;
    state.changes().bump(Change::Tokens);
    Ok(removed)
}
