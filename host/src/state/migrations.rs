//! The shared state's schema, as numbered migrations applied in order at start-up under
//! an advisory lock (replicas starting together migrate once), each in its own
//! transaction with the version it reaches. A database at a newer version than this
//! toolhost knows is refused, not used.

use super::{SharedState, StateError};

/// Every migration, in order; version N is `MIGRATIONS[N - 1]`. Never edit one that has
/// shipped: add the next.
const MIGRATIONS: &[&str] = &[
    // 1: the state a single host keeps in files.
    r"
    CREATE TABLE toolhost_tokens (
        name text PRIMARY KEY,
        profile text,
        scopes text[] NOT NULL,
        created text NOT NULL,
        sha256 text NOT NULL UNIQUE
    );
    CREATE TABLE toolhost_approvals (
        profile text NOT NULL,
        tool text NOT NULL,
        plugin text NOT NULL,
        plugin_sha256 text NOT NULL,
        schema_sha256 text NOT NULL,
        risk text NOT NULL,
        approved_at text NOT NULL,
        approved_by text NOT NULL,
        PRIMARY KEY (profile, tool, plugin_sha256, schema_sha256, risk)
    );
    CREATE TABLE toolhost_outputs (
        profile text NOT NULL,
        id text NOT NULL,
        meta jsonb NOT NULL,
        body text NOT NULL,
        bytes bigint NOT NULL,
        kept_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (profile, id)
    );
    CREATE INDEX toolhost_outputs_age ON toolhost_outputs (profile, kept_at);
    CREATE TABLE toolhost_pending_approvals (
        state text PRIMARY KEY,
        call bytea NOT NULL,
        asked_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE toolhost_audit (
        replica text NOT NULL,
        seq bigint NOT NULL,
        line text NOT NULL,
        sha256 text NOT NULL,
        written_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (replica, seq)
    );
    CREATE TABLE toolhost_audit_heads (
        replica text PRIMARY KEY,
        seq bigint NOT NULL,
        sha256 text NOT NULL
    );
    ",
];

/// The advisory lock key migrations run under (any fixed number; "toolhost").
const LOCK: i64 = 0x746f_6f6c_686f_7374;

/// The schema version this toolhost writes.
pub(crate) fn known() -> i32 {
    i32::try_from(MIGRATIONS.len()).unwrap_or(i32::MAX)
}

/// Brings the database to [`known`], or refuses a newer one.
pub(super) async fn migrate(state: &SharedState) -> Result<(), StateError> {
    let mut client = state.client().await?;
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS toolhost_schema (
                version integer PRIMARY KEY,
                applied_at timestamptz NOT NULL DEFAULT now()
            )",
        )
        .await
        .map_err(state.query_error("create its schema table"))?;
    let tx = client
        .transaction()
        .await
        .map_err(state.query_error("begin a migration"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK])
        .await
        .map_err(state.query_error("lock for a migration"))?;
    let row = tx
        .query_one("SELECT coalesce(max(version), 0) FROM toolhost_schema", &[])
        .await
        .map_err(state.query_error("read its schema version"))?;
    let found: i32 = row.get(0);
    if found > known() {
        return Err(StateError::NewerSchema {
            url: state.settings().redacted_url(),
            found,
            known: known(),
        });
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(found.max(0) as usize) {
        let version = i32::try_from(index + 1).unwrap_or(i32::MAX);
        tx.batch_execute(sql)
            .await
            .map_err(state.query_error("apply a schema migration"))?;
        tx.execute(
            "INSERT INTO toolhost_schema (version) VALUES ($1)",
            &[&version],
        )
        .await
        .map_err(state.query_error("record a schema migration"))?;
        tracing::info!(version, "migrated the shared state database");
    }
    tx.commit()
        .await
        .map_err(state.query_error("commit a migration"))
}
