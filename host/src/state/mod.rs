//! Shared state for many replicas: `[state] backend = "postgres"` keeps what one host
//! otherwise keeps in files (bearer tokens, lasting approvals, kept outputs, pending
//! approval questions, the audit log) in PostgreSQL, so every replica behind a load
//! balancer sees the same. Files stay the default: a host without `[state]` is unchanged.
//!
//! [`SharedState`] owns a small tokio runtime of its own (one thread) on which the pool
//! (`deadpool-postgres` over `tokio-postgres`) and the change listener run. The host's
//! stores are synchronous (a kept output is written on the call path like a file is), so
//! they hand their query to that runtime and wait on a plain channel: this works from a
//! tokio worker of any flavour, a blocking thread or a plain thread, with no nested
//! runtime.
//!
//! **Changes reach every replica** through `LISTEN toolhost_changes`: a writer sends
//! `NOTIFY` in the transaction that changes tokens or approvals, and each replica's
//! listener bumps a generation the caches compare against. While the listener is not
//! connected (the database restarted, the network broke) the caches are not trusted:
//! every check asks the database, so a revocation is never missed, only slower.

pub mod approvals;
mod migrations;
mod outputs;
mod pending;
pub(crate) mod tokens;

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

pub use approvals::SharedApprovals;
pub use outputs::SharedOutputStore;
pub(crate) use pending::SharedPending;

/// The channel writers notify and replicas listen on.
const CHANNEL: &str = "toolhost_changes";
/// How long a query waits for a connection from the pool (or to make one) before the
/// call that needs it fails: the database being away is said within this time.
const CONNECT_WAIT: Duration = Duration::from_secs(3);
/// The longest the listener waits between tries to reconnect.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// What kind of state changed (the payload of a notification).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// A token was added or revoked.
    Tokens,
    /// A lasting approval was kept or revoked.
    Approvals,
}

impl Change {
    fn payload(self) -> &'static str {
        match self {
            Change::Tokens => "tokens",
            Change::Approvals => "approvals",
        }
    }
}

/// `[state]` as the host uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateSettings {
    /// The PostgreSQL connection URL (`postgres://user@host/db?sslmode=require`).
    pub url: String,
    /// Extra CA certificates (PEM) trusted for the database's TLS certificate.
    pub ca_file: Option<PathBuf>,
    /// Connections in the pool at most.
    pub pool_size: usize,
    /// This replica's name (its audit chain's), unique per replica.
    pub replica: String,
}

impl StateSettings {
    /// The URL with any password replaced, for messages and status.
    pub fn redacted_url(&self) -> String {
        redact(&self.url)
    }
}

/// `url` with the password of `user:password@` replaced by `***`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// Why the shared state could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The URL is not one tokio-postgres understands.
    #[error("[state] url is not a PostgreSQL connection URL ({url}): {source}")]
    BadUrl {
        /// The URL, password hidden.
        url: String,
        /// Why.
        source: tokio_postgres::Error,
    },
    /// The CA file could not be read or holds no certificate.
    #[error("[state] ca_file {}: {reason}", path.display())]
    BadCaFile {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The state runtime could not start.
    #[error("could not start the shared state's thread: {0}")]
    Runtime(#[source] std::io::Error),
    /// No connection to the database within the wait.
    #[error(
        "the shared state database ({url}) cannot be reached: {reason}; calls that need it \
         fail until it is back (the replica reconnects on its own)"
    )]
    Unavailable {
        /// The URL, password hidden.
        url: String,
        /// Why.
        reason: String,
    },
    /// A query failed.
    #[error("the shared state database ({url}) refused to {action}: {source}")]
    Query {
        /// The URL, password hidden.
        url: String,
        /// What was being done.
        action: &'static str,
        /// Why.
        source: tokio_postgres::Error,
    },
    /// The database holds a schema newer than this toolhost knows.
    #[error(
        "the shared state database ({url}) is at schema version {found}, newer than this \
         toolhost's {known}: a newer toolhost migrated it; run that version on every replica"
    )]
    NewerSchema {
        /// The URL, password hidden.
        url: String,
        /// The database's version.
        found: i32,
        /// The newest this toolhost knows.
        known: i32,
    },
    /// A stored value is not what this toolhost writes.
    #[error("the shared state database ({url}) holds a damaged {what}: {reason}")]
    Damaged {
        /// The URL, password hidden.
        url: String,
        /// What.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// The state runtime ended (the host is shutting down).
    #[error("the shared state's thread has ended (the host is shutting down)")]
    Gone,
}

/// Generations of what the caches hold, and whether notifications are arriving.
#[derive(Debug)]
pub(crate) struct Changes {
    /// The listener is connected and listening: a cache whose generation matches is
    /// current. Otherwise every check asks the database.
    listening: AtomicBool,
    tokens: AtomicU64,
    approvals: AtomicU64,
    /// Told of every change of tokens, so an authenticator reads them at once (and has
    /// them should the database go away before its next request).
    tokens_changed: tokio::sync::watch::Sender<u64>,
}

impl Default for Changes {
    fn default() -> Self {
        Changes {
            listening: AtomicBool::new(false),
            tokens: AtomicU64::new(0),
            approvals: AtomicU64::new(0),
            tokens_changed: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl Changes {
    /// The generation of `kind`, or `None` while notifications may be missed.
    pub(crate) fn generation(&self, kind: Change) -> Option<u64> {
        if !self.listening.load(Ordering::Acquire) {
            return None;
        }
        Some(self.counter(kind).load(Ordering::Acquire))
    }

    fn counter(&self, kind: Change) -> &AtomicU64 {
        match kind {
            Change::Tokens => &self.tokens,
            Change::Approvals => &self.approvals,
        }
    }

    /// Something of `kind` changed (a notification, or this replica's own write).
    pub(crate) fn bump(&self, kind: Change) {
        let generation = self.counter(kind).fetch_add(1, Ordering::AcqRel) + 1;
        if kind == Change::Tokens {
            self.tokens_changed.send_replace(generation);
        }
    }

    /// A receiver told of every change of tokens.
    pub(crate) fn watch_tokens(&self) -> tokio::sync::watch::Receiver<u64> {
        self.tokens_changed.subscribe()
    }

    fn bump_all(&self) {
        self.bump(Change::Tokens);
        self.bump(Change::Approvals);
    }
}

/// A connection to the shared state: the pool, its runtime and the change listener.
pub struct SharedState {
    settings: StateSettings,
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    handle: tokio::runtime::Handle,
    pool: deadpool_postgres::Pool,
    changes: Arc<Changes>,
}

impl std::fmt::Debug for SharedState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedState")
            .field("url", &self.settings.redacted_url())
            .field("replica", &self.settings.replica)
            .finish_non_exhaustive()
    }
}

impl SharedState {
    /// Connects, migrates the schema to this toolhost's version and, with `listen`,
    /// starts the change listener (a one-shot command does not need it: it reads the
    /// database each time). Blocking; fails if the database cannot be reached now.
    pub fn connect(settings: StateSettings, listen: bool) -> Result<Arc<SharedState>, StateError> {
        let url = settings.redacted_url();
        let mut pg: tokio_postgres::Config =
            settings.url.parse().map_err(|source| StateError::BadUrl {
                url: url.clone(),
                source,
            })?;
        // A commit returns once the database has the rows, before its WAL reaches the
        // disk: an audit line or kept output is then as durable as in the files (written,
        // not fsynced per call), and a call waits a round trip, not a disk flush. Changes
        // an operator makes (tokens, lasting approvals) ask for the flush themselves
        // ([`SYNCED`]). The URL's own `options` come first and are kept.
        let options = match pg.get_options() {
            Some(given) => format!("{given} -c synchronous_commit=off"),
            None => "-c synchronous_commit=off".to_owned(),
        };
        pg.options(&options);
        let tls = tls_connector(settings.ca_file.as_deref())?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("toolhost-state")
            .enable_all()
            .build()
            .map_err(StateError::Runtime)?;
        let handle = runtime.handle().clone();
        let manager = deadpool_postgres::Manager::from_config(
            pg.clone(),
            tls.clone(),
            deadpool_postgres::ManagerConfig {
                recycling_method: deadpool_postgres::RecyclingMethod::Fast,
            },
        );
        let pool = deadpool_postgres::Pool::builder(manager)
            .max_size(settings.pool_size.max(1))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(CONNECT_WAIT))
            .create_timeout(Some(CONNECT_WAIT))
            .recycle_timeout(Some(CONNECT_WAIT))
            .build()
            .map_err(|e| StateError::Unavailable {
                url: url.clone(),
                reason: e.to_string(),
            })?;
        let state = Arc::new(SharedState {
            settings,
            runtime: Mutex::new(Some(runtime)),
            handle,
            pool,
            changes: Arc::new(Changes::default()),
        });
        let migrating = Arc::clone(&state);
        state.block(async move { migrations::migrate(&migrating).await })?;
        if listen {
            let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
            state.handle.spawn(listen_forever(
                pg,
                tls,
                Arc::clone(&state.changes),
                url,
                ready_tx,
            ));
            // The first connection is waited for (bounded), so a host that starts
            // serving has its caches backed by notifications from its first request.
            let _ = ready_rx.recv_timeout(CONNECT_WAIT);
        }
        Ok(state)
    }

    /// Its settings.
    pub fn settings(&self) -> &StateSettings {
        &self.settings
    }

    /// This replica's name.
    pub fn replica(&self) -> &str {
        &self.settings.replica
    }

    pub(crate) fn changes(&self) -> &Changes {
        &self.changes
    }

    /// Whether change notifications are arriving now.
    pub fn listening(&self) -> bool {
        self.changes.listening.load(Ordering::Acquire)
    }

    /// Runs `fut` on the state runtime and waits for it (blocking this thread).
    pub(crate) fn block<T: Send + 'static>(
        &self,
        fut: impl Future<Output = Result<T, StateError>> + Send + 'static,
    ) -> Result<T, StateError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.handle.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv().map_err(|_| StateError::Gone)?
    }

    /// Starts `fut` on the state runtime (a task that lives as long as the host).
    pub(crate) fn spawn(&self, fut: impl Future<Output = ()> + Send + 'static) {
        self.handle.spawn(fut);
    }

    /// A pooled connection (waits at most [`CONNECT_WAIT`]).
    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Object, StateError> {
        self.pool.get().await.map_err(|e| StateError::Unavailable {
            url: self.settings.redacted_url(),
            reason: pool_reason(&e),
        })
    }

    /// A query error, named.
    pub(crate) fn query_error(
        &self,
        action: &'static str,
    ) -> impl FnOnce(tokio_postgres::Error) -> StateError + '_ {
        move |source| {
            // The connection is gone, or the server is shutting down or starting: the
            // database is away, not refusing this query.
            let away = source.is_closed()
                || source.as_db_error().is_none_or(|db| {
                    let code = db.code().code();
                    code.starts_with("08") || code.starts_with("57P")
                });
            if away {
                StateError::Unavailable {
                    url: self.settings.redacted_url(),
                    reason: source.to_string(),
                }
            } else {
                StateError::Query {
                    url: self.settings.redacted_url(),
                    action,
                    source,
                }
            }
        }
    }

    /// A damaged value, named.
    pub(crate) fn damaged(&self, what: &'static str, reason: impl std::fmt::Display) -> StateError {
        StateError::Damaged {
            url: self.settings.redacted_url(),
            what,
            reason: reason.to_string(),
        }
    }
}

impl Drop for SharedState {
    fn drop(&mut self) {
        let runtime = self
            .runtime
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(runtime) = runtime {
            runtime.shutdown_background();
        }
    }
}

/// What the pool said, in a sentence (the database's own error where there is one).
fn pool_reason(e: &deadpool_postgres::PoolError) -> String {
    match e {
        deadpool_postgres::PoolError::Backend(e) => e.to_string(),
        deadpool_postgres::PoolError::Timeout(_) => {
            format!("no connection within {} s", CONNECT_WAIT.as_secs())
        }
        other => other.to_string(),
    }
}

/// The TLS connector: system roots plus `ca_file`. The URL's `sslmode` decides whether
/// it is used (`disable`, `prefer` (the default: TLS when the server offers it),
/// `require`); when it is, the certificate is verified.
fn tls_connector(
    ca_file: Option<&std::path::Path>,
) -> Result<tokio_postgres_rustls::MakeRustlsConnect, StateError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for cert in native.certs {
        let _ = roots.add(cert);
    }
    if let Some(path) = ca_file {
        let bad = |reason: String| StateError::BadCaFile {
            path: path.to_path_buf(),
            reason,
        };
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .map_err(|e| bad(e.to_string()))?
            .collect::<Result<_, _>>()
            .map_err(|e| bad(e.to_string()))?;
        if certs.is_empty() {
            return Err(bad("it holds no PEM certificate".to_owned()));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| bad(e.to_string()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StateError::BadCaFile {
            path: ca_file
                .map(std::path::Path::to_path_buf)
                .unwrap_or_default(),
            reason: e.to_string(),
        })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// Keeps one connection listening for changes, reconnecting with a short backoff; while
/// it is down the caches are bypassed ([`Changes::generation`] is `None`), and after each
/// reconnection every cache is dropped (notifications sent meanwhile were missed).
async fn listen_forever(
    pg: tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    changes: Arc<Changes>,
    url: String,
    ready: std::sync::mpsc::SyncSender<()>,
) {
    let mut backoff = Duration::from_millis(50);
    let mut said_down = false;
    loop {
        match pg.connect(tls.clone()).await {
            Ok((client, mut connection)) => {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                let driver = tokio::spawn(async move {
                    loop {
                        let message = std::future::poll_fn(|cx| connection.poll_message(cx)).await;
                        match message {
                            Some(Ok(tokio_postgres::AsyncMessage::Notification(n))) => {
                                let _ = tx.send(n.payload().to_owned());
                            }
                            Some(Ok(_)) => {}
                            Some(Err(e)) => {
                                tracing::debug!("the shared state's listener: {e}");
                                return;
                            }
                            None => return,
                        }
                    }
                });
                match client.batch_execute(&format!("LISTEN {CHANNEL}")).await {
                    Ok(()) => {
                        changes.bump_all();
                        changes.listening.store(true, Ordering::Release);
                        let _ = ready.try_send(());
                        if said_down {
                            tracing::info!(database = %url, "the shared state database is back; changes are heard again");
                        }
                        said_down = false;
                        backoff = Duration::from_millis(50);
                        while let Some(payload) = rx.recv().await {
                            match payload.as_str() {
                                "tokens" => changes.bump(Change::Tokens),
                                "approvals" => changes.bump(Change::Approvals),
                                _ => changes.bump_all(),
                            }
                        }
                    }
                    Err(e) => tracing::debug!("LISTEN failed: {e}"),
                }
                changes.listening.store(false, Ordering::Release);
                driver.abort();
            }
            Err(e) => {
                changes.listening.store(false, Ordering::Release);
                if !said_down {
                    tracing::warn!(database = %url, "the shared state database cannot be reached ({e}); every check asks it directly until it is back");
                    said_down = true;
                }
            }
        }
        if !said_down {
            tracing::warn!(database = %url, "lost the shared state database's change notifications; reconnecting (checks ask the database meanwhile)");
            said_down = true;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Run first in a transaction whose commit must be on disk when it returns (a token or
/// an approval revoked must stay revoked if the database crashes just after).
pub(crate) const SYNCED: &str = "SET LOCAL synchronous_commit TO on";

/// `NOTIFY`s the other replicas of `kind` within `tx` (sent when it commits).
pub(crate) async fn notify(
    tx: &tokio_postgres::Transaction<'_>,
    kind: Change,
) -> Result<(), tokio_postgres::Error> {
    tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &kind.payload()])
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn a_password_in_the_url_is_never_shown() {
        assert_eq!(
            redact("postgres://toolhost:s3cret@db.example:5432/toolhost?sslmode=require"),
            "postgres://toolhost:***@db.example:5432/toolhost?sslmode=require"
        );
        assert_eq!(
            redact("postgres://toolhost@db/toolhost"),
            "postgres://toolhost@db/toolhost"
        );
        assert_eq!(redact("host=/tmp user=x"), "host=/tmp user=x");
    }
}
