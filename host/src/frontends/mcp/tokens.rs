//! Bearer tokens for MCP over HTTP: `toolhost token add | list | revoke` keep them in a
//! 0600 file (only each token's sha256, name, profile, scopes and creation time: the
//! token itself is shown once and never stored), and the HTTP doors check every request
//! against that file, re-reading it when it changes so a revocation counts from the next
//! request. A token's scopes say which door it opens: `mcp` (call tools) or `metrics`
//! (scrape `/metrics`), so a scrape credential cannot call tools.
//!
//! Tokens are 256 random bits, URL-safe base64 with a `thk_` prefix (so a leaked one is
//! recognisable in logs and by secret scanners). Storing a plain sha256 is enough for
//! random 256-bit secrets (there is nothing to brute-force), and the comparison of hashes
//! runs in constant time.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use sha2::Digest as _;

use crate::state::{Change, SharedState, StateError};
use crate::sys::safe_open::{Fingerprint, fingerprint};
use toolhost_calls::private::{ensure_private_dir, tighten_existing, write_private_file};

/// The prefix every token starts with.
const PREFIX: &str = "thk_";
/// The largest token file read (a file that big holds thousands of tokens).
const MAX_FILE: u64 = 4 * 1024 * 1024;

/// One token, as stored: never the token itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    /// The operator's name for it (the client or person it was given to).
    pub name: String,
    /// The profile its client is served; `None`: the server's `--profile`.
    pub profile: Option<String>,
    /// What it may do. A record without the field (written before scopes existed) may
    /// call tools over MCP, as it could then.
    #[serde(default = "TokenScope::before_scopes")]
    pub scopes: Vec<TokenScope>,
    /// When it was made (RFC 3339).
    pub created: String,
    /// sha256 of the token, hex.
    pub sha256: String,
}

/// What a token may do: which HTTP door it opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenScope {
    /// Call tools over MCP (`serve --mcp http`).
    Mcp,
    /// Read Prometheus metrics (`serve --metrics`).
    Metrics,
}

impl TokenScope {
    /// The scopes of a record written before scopes existed: MCP only.
    fn before_scopes() -> Vec<TokenScope> {
        vec![TokenScope::Mcp]
    }

    /// Its name, as the config and `toolhost token` write it.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenScope::Mcp => "mcp",
            TokenScope::Metrics => "metrics",
        }
    }
}

/// A scope name that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a token scope: use mcp (call tools) or metrics (scrape /metrics)")]
pub struct UnknownScope(pub String);

impl std::str::FromStr for TokenScope {
    type Err = UnknownScope;

    fn from_str(s: &str) -> Result<TokenScope, UnknownScope> {
        match s {
            "mcp" => Ok(TokenScope::Mcp),
            "metrics" => Ok(TokenScope::Metrics),
            other => Err(UnknownScope(other.to_owned())),
        }
    }
}

impl std::fmt::Display for TokenScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The file's format: version 1 has no scopes (every token calls tools); version 2 is
/// written as soon as one token has other scopes, so an older toolhost refuses the file
/// instead of letting a metrics token call tools.
const VERSION_WITHOUT_SCOPES: u32 = 1;
const VERSION_WITH_SCOPES: u32 = 2;

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenFile {
    version: u32,
    tokens: Vec<TokenRecord>,
}

/// Why a token operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The token file could not be read or written.
    #[error(
        "could not {action} the token file {}: {source}; check that it and its folder \
         belong to this user",
        path.display()
    )]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The token file is not what toolhost writes.
    #[error(
        "the token file {} is damaged ({reason}); fix it, or move it away and make new tokens \
         with `toolhost token add`",
        path.display()
    )]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// `add` with a name that is taken.
    #[error(
        "a token named '{0}' exists already; pick another name, or `toolhost token revoke {0}` first"
    )]
    Exists(String),
    /// `revoke` of a name that is not there.
    #[error("there is no token named '{0}'; `toolhost token list` shows the names")]
    NoSuchToken(String),
    /// A name that cannot be shown safely in a table or a log.
    #[error("'{0}' is not a usable token name: use 1 to 64 letters, digits, '.', '_' or '-'")]
    BadName(String),
    /// The system's random source failed.
    #[error("could not get random bytes for a token: {0}")]
    Random(String),
    /// The shared state database could not be used.
    #[error(transparent)]
    Shared(#[from] StateError),
}

/// A token that was just made: shown once.
#[derive(Debug)]
pub struct NewToken {
    /// What was stored.
    pub record: TokenRecord,
    /// The token itself.
    pub token: String,
}

/// The tokens of a host: its token file, or the shared state database of its replicas.
#[derive(Debug, Clone)]
pub struct TokenStore {
    path: PathBuf,
    shared: Option<Arc<SharedState>>,
}

impl TokenStore {
    /// The store in `path` (it need not exist yet).
    pub fn new(path: PathBuf) -> TokenStore {
        TokenStore { path, shared: None }
    }

    /// The store in the shared state database (`[state] backend = "postgres"`).
    pub fn shared(state: Arc<SharedState>) -> TokenStore {
        TokenStore {
            path: PathBuf::new(),
            shared: Some(state),
        }
    }

    /// Its file (empty for the shared state).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the tokens are kept, for messages: the file, or the database.
    pub fn location(&self) -> String {
        match &self.shared {
            Some(state) => format!(
                "the shared state database {}",
                state.settings().redacted_url()
            ),
            None => self.path.display().to_string(),
        }
    }

    /// The tokens, oldest first. A missing file has none.
    pub fn list(&self) -> Result<Vec<TokenRecord>, TokenError> {
        if let Some(state) = &self.shared {
            return crate::state::tokens::list(state)?
                .into_iter()
                .map(|row| from_row(row).map_err(|e| state.damaged("token", e).into()))
                .collect();
        }
        Ok(self.read()?.tokens)
    }

    /// Makes a token named `name` for `profile` with `scopes` (none: MCP only) and
    /// stores its hash.
    pub fn add(
        &self,
        name: &str,
        profile: Option<&str>,
        scopes: &[TokenScope],
    ) -> Result<NewToken, TokenError> {
        if !valid_name(name) {
            return Err(TokenError::BadName(name.to_owned()));
        }
        let mut scopes = if scopes.is_empty() {
            TokenScope::before_scopes()
        } else {
            scopes.to_vec()
        };
        scopes.sort_unstable();
        scopes.dedup();
        if let Some(state) = &self.shared {
            let token = generate()?;
            let record = new_record(name, profile, scopes, &token);
            return match crate::state::tokens::add(state, to_row(&record))? {
                true => Ok(NewToken { record, token }),
                false => Err(TokenError::Exists(name.to_owned())),
            };
        }
        let _lock = self.lock()?;
        let mut file = self.read()?;
        if file.tokens.iter().any(|t| t.name == name) {
            return Err(TokenError::Exists(name.to_owned()));
        }
        let token = generate()?;
        let record = new_record(name, profile, scopes, &token);
        file.tokens.push(record.clone());
        self.write(&mut file)?;
        Ok(NewToken { record, token })
    }

    /// Removes the token named `name`.
    pub fn revoke(&self, name: &str) -> Result<TokenRecord, TokenError> {
        if let Some(state) = &self.shared {
            return match crate::state::tokens::revoke(state, name)? {
                Some(row) => from_row(row).map_err(|e| state.damaged("token", e).into()),
                None => Err(TokenError::NoSuchToken(name.to_owned())),
            };
        }
        let _lock = self.lock()?;
        let mut file = self.read()?;
        let Some(index) = file.tokens.iter().position(|t| t.name == name) else {
            return Err(TokenError::NoSuchToken(name.to_owned()));
        };
        let removed = file.tokens.remove(index);
        self.write(&mut file)?;
        Ok(removed)
    }

    fn io(&self, action: &'static str) -> impl FnOnce(io::Error) -> TokenError + '_ {
        move |source| TokenError::Io {
            action,
            path: self.path.clone(),
            source,
        }
    }

    fn read(&self) -> Result<TokenFile, TokenError> {
        match read_small(&self.path) {
            Ok(bytes) => {
                self.check_owner()?;
                parse(&self.path, &bytes)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(TokenFile {
                version: VERSION_WITHOUT_SCOPES,
                tokens: Vec::new(),
            }),
            Err(e) => Err(self.io("read")(e)),
        }
    }

    /// Whoever can write the token file can let anyone in: it must belong to this user
    /// (or root) and be writable by nobody else.
    fn check_owner(&self) -> Result<(), TokenError> {
        use std::os::unix::fs::MetadataExt as _;
        let meta = fs::metadata(&self.path).map_err(self.io("read"))?;
        let me = toolhost_calls::private::effective_uid();
        if meta.uid() != me && meta.uid() != 0 {
            return Err(TokenError::Damaged {
                path: self.path.clone(),
                reason: format!(
                    "it belongs to uid {}, not to this user (uid {me}), who could add tokens; \
                     `chown {me} {}` if it is yours",
                    meta.uid(),
                    self.path.display()
                ),
            });
        }
        if meta.mode() & 0o022 != 0 {
            return Err(TokenError::Damaged {
                path: self.path.clone(),
                reason: format!(
                    "group or others may write it (mode {:04o}), and so add tokens; \
                     `chmod 600 {}`",
                    meta.mode() & 0o7777,
                    self.path.display()
                ),
            });
        }
        Ok(())
    }

    /// Writes `file`, its version set by what its tokens need.
    fn write(&self, file: &mut TokenFile) -> Result<(), TokenError> {
        let scoped = file
            .tokens
            .iter()
            .any(|t| t.scopes != TokenScope::before_scopes());
        file.version = if scoped {
            VERSION_WITH_SCOPES
        } else {
            VERSION_WITHOUT_SCOPES
        };
        let text = serde_json::to_vec_pretty(file).map_err(|e| TokenError::Damaged {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        write_private_file(&self.path, &text).map_err(self.io("write"))
    }

    /// Serialises writers (two `token add` at once) with a lock file beside the store.
    fn lock(&self) -> Result<fs::File, TokenError> {
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            ensure_private_dir(dir).map_err(self.io("create the folder of"))?;
        }
        tighten_existing(&self.path).map_err(self.io("secure"))?;
        let lock_path = self.path.with_extension("lock");
        let lock =
            toolhost_calls::private::open_private_file(&lock_path).map_err(self.io("lock"))?;
        lock.lock().map_err(self.io("lock"))?;
        Ok(lock)
    }
}

/// A record as the shared state keeps it.
fn to_row(record: &TokenRecord) -> crate::state::tokens::TokenRow {
    crate::state::tokens::TokenRow {
        name: record.name.clone(),
        profile: record.profile.clone(),
        scopes: record
            .scopes
            .iter()
            .map(|s| s.as_str().to_owned())
            .collect(),
        created: record.created.clone(),
        sha256: record.sha256.clone(),
    }
}

/// The record of a row of the shared state (a scope this toolhost does not know is an
/// error, as it is in the token file: the row was written by a newer toolhost).
fn from_row(row: crate::state::tokens::TokenRow) -> Result<TokenRecord, UnknownScope> {
    Ok(TokenRecord {
        name: row.name,
        profile: row.profile,
        scopes: row
            .scopes
            .iter()
            .map(|s| s.parse())
            .collect::<Result<Vec<_>, _>>()?,
        created: row.created,
        sha256: row.sha256,
    })
}

/// The record of a new `token` (its hash, never itself).
fn new_record(
    name: &str,
    profile: Option<&str>,
    scopes: Vec<TokenScope>,
    token: &str,
) -> TokenRecord {
    TokenRecord {
        name: name.to_owned(),
        profile: profile.map(str::to_owned),
        scopes,
        created: jiff::Timestamp::now()
            .round(jiff::Unit::Second)
            .unwrap_or_else(|_| jiff::Timestamp::now())
            .to_string(),
        sha256: hash_hex(token),
    }
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

fn generate() -> Result<String, TokenError> {
    use base64::Engine as _;
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| TokenError::Random(e.to_string()))?;
    Ok(format!(
        "{PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    ))
}

fn hash(token: &str) -> [u8; 32] {
    sha2::Sha256::digest(token.as_bytes()).into()
}

fn hash_hex(token: &str) -> String {
    hash(token).iter().map(|b| format!("{b:02x}")).collect()
}

fn parse(path: &Path, bytes: &[u8]) -> Result<TokenFile, TokenError> {
    let file: TokenFile = serde_json::from_slice(bytes).map_err(|e| TokenError::Damaged {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    if file.version != VERSION_WITHOUT_SCOPES && file.version != VERSION_WITH_SCOPES {
        return Err(TokenError::Damaged {
            path: path.to_path_buf(),
            reason: format!(
                "version {} (this toolhost knows versions 1 and 2: a newer toolhost wrote it)",
                file.version
            ),
        });
    }
    Ok(file)
}

fn read_small(path: &Path) -> io::Result<Vec<u8>> {
    crate::sys::safe_open::read_capped(path, MAX_FILE).map_err(io::Error::from)
}

/// Who a request's token belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenIdentity {
    /// The token's name.
    pub name: String,
    /// Its profile, if it was made for one.
    pub profile: Option<String>,
}

/// Why a request was not let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthFailure {
    /// No `Authorization: Bearer ...` header.
    Missing,
    /// A token that is not (or no longer) in the file.
    Invalid,
    /// The token file could not be read: nobody is let in until it can.
    StoreUnreadable,
    /// A valid token without the scope this door needs (a metrics token at the MCP door,
    /// an MCP token at the metrics door).
    OutOfScope(TokenScope),
}

/// Why the token file cannot be used now: nobody is let in until it can.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum TokenFileError {
    /// Not read yet.
    #[error("not read yet")]
    NotReadYet,
    /// The file could not be looked at.
    #[error("{0}")]
    Stat(Arc<io::Error>),
    /// Reading it failed, or it is damaged.
    #[error(transparent)]
    Store(Arc<TokenError>),
}

impl PartialEq for TokenFileError {
    /// The same problem: the same kind, saying the same.
    fn eq(&self, other: &Self) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
            && self.to_string() == other.to_string()
    }
}

/// What the file said when it was last read.
struct Snapshot {
    /// The file as read; `None`: it was missing.
    version: Option<Fingerprint>,
    /// The shared state's token generation as read (`None`: not read by generation).
    generation: Option<u64>,
    /// While the shared state database cannot be reached: when to ask it again (until
    /// then the tokens last read are used; nobody can revoke one while it is down).
    retry_at: Option<std::time::Instant>,
    tokens: Vec<([u8; 32], TokenIdentity, Vec<TokenScope>)>,
    error: Option<TokenFileError>,
}

/// Checks tokens against the store, re-reading the file whenever it changed (one `stat`
/// per request), so `toolhost token revoke` counts from the next request on.
pub struct TokenAuthenticator {
    store: TokenStore,
    snapshot: Mutex<Snapshot>,
}

impl TokenAuthenticator {
    /// An authenticator reading `store`.
    pub fn new(store: TokenStore) -> TokenAuthenticator {
        TokenAuthenticator {
            store,
            snapshot: Mutex::new(Snapshot {
                version: None,
                generation: None,
                retry_at: None,
                tokens: Vec::new(),
                error: Some(TokenFileError::NotReadYet),
            }),
        }
    }

    /// With the shared state: reads the tokens again as soon as a change is heard (not at
    /// the next request), so a replica has current tokens should the database go away
    /// before then. Does nothing for a token file.
    pub fn follow_changes(self: &Arc<Self>) {
        let Some(state) = &self.store.shared else {
            return;
        };
        let mut changes = state.changes().watch_tokens();
        let me = Arc::downgrade(self);
        state.spawn(async move {
            while changes.changed().await.is_ok() {
                let Some(auth) = me.upgrade() else { return };
                let _ = tokio::task::spawn_blocking(move || drop(auth.refresh())).await;
            }
        });
    }

    /// The store it reads.
    pub fn store(&self) -> &TokenStore {
        &self.store
    }

    /// How many tokens are valid now, or why the file cannot be read.
    pub fn count(&self) -> Result<usize, TokenFileError> {
        let snapshot = self.refresh();
        match &snapshot.error {
            Some(e) => Err(e.clone()),
            None => Ok(snapshot.tokens.len()),
        }
    }

    /// Who holds a valid token now, or why the file cannot be read.
    pub fn identities(&self) -> Result<Vec<TokenIdentity>, TokenFileError> {
        let snapshot = self.refresh();
        match &snapshot.error {
            Some(e) => Err(e.clone()),
            None => Ok(snapshot.tokens.iter().map(|(_, i, _)| i.clone()).collect()),
        }
    }

    /// Checks the value of an `Authorization` header for a door that needs `scope`.
    pub fn check(
        &self,
        authorization: Option<&[u8]>,
        scope: TokenScope,
    ) -> Result<TokenIdentity, AuthFailure> {
        let Some(token) = authorization.and_then(bearer) else {
            return Err(AuthFailure::Missing);
        };
        let presented = hash(token);
        let snapshot = self.refresh();
        if snapshot.error.is_some() {
            return Err(AuthFailure::StoreUnreadable);
        }
        // Every stored hash is compared, whatever matches, in constant time.
        let mut found = None;
        for (stored, identity, scopes) in &snapshot.tokens {
            if constant_time_eq(stored, &presented) {
                found = Some((identity, scopes));
            }
        }
        match found {
            None => Err(AuthFailure::Invalid),
            Some((_, scopes)) if !scopes.contains(&scope) => Err(AuthFailure::OutOfScope(scope)),
            Some((identity, _)) => Ok(identity.clone()),
        }
    }

    fn refresh(&self) -> std::sync::MutexGuard<'_, Snapshot> {
        let mut snapshot = self.snapshot.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(state) = &self.store.shared {
            self.refresh_shared(state, &mut snapshot);
            return snapshot;
        }
        let version = match fingerprint(&self.store.path) {
            Ok(f) => Some(f),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => {
                snapshot.error = Some(TokenFileError::Stat(Arc::new(e)));
                return snapshot;
            }
        };
        if snapshot.version == version && snapshot.error.is_none() {
            return snapshot;
        }
        match self.store.list() {
            Ok(records) => {
                snapshot.tokens = identities_of(records);
                snapshot.error = None;
                snapshot.version = version;
            }
            Err(e) => {
                tracing::error!("MCP over HTTP: {e}; every request is refused until it is fixed");
                snapshot.tokens.clear();
                snapshot.error = Some(TokenFileError::Store(Arc::new(e)));
                snapshot.version = None;
            }
        }
        snapshot
    }
}

impl TokenAuthenticator {
    /// The shared state's tokens: the cached ones while notifications say nothing
    /// changed; read again after a change, and on every check while notifications may be
    /// missed. While the database cannot be reached at all, the tokens last read keep
    /// working (no revocation can be written meanwhile), asked again each second.
    fn refresh_shared(&self, state: &Arc<SharedState>, snapshot: &mut Snapshot) {
        let generation = state.changes().generation(Change::Tokens);
        if generation.is_some() && snapshot.generation == generation && snapshot.error.is_none() {
            return;
        }
        let now = std::time::Instant::now();
        if snapshot.retry_at.is_some_and(|at| now < at) && snapshot.error.is_none() {
            return;
        }
        match self.store.list() {
            Ok(records) => {
                snapshot.tokens = identities_of(records);
                snapshot.error = None;
                snapshot.generation = generation;
                snapshot.retry_at = None;
            }
            // Read well before: those tokens keep working while it is away.
            Err(TokenError::Shared(StateError::Unavailable { .. })) if snapshot.error.is_none() => {
                if snapshot.retry_at.is_none() {
                    tracing::warn!(
                        "MCP over HTTP: the shared state database cannot be reached; the \
                         tokens read last are checked until it is back"
                    );
                }
                snapshot.generation = None;
                snapshot.retry_at = Some(now + std::time::Duration::from_secs(1));
            }
            Err(e) => {
                tracing::error!("MCP over HTTP: {e}; every request is refused until it is fixed");
                snapshot.tokens.clear();
                snapshot.error = Some(TokenFileError::Store(Arc::new(e)));
                snapshot.generation = None;
            }
        }
    }
}

/// Records as the authenticator keeps them (a record whose hash is not one is skipped).
fn identities_of(records: Vec<TokenRecord>) -> Vec<([u8; 32], TokenIdentity, Vec<TokenScope>)> {
    records
        .into_iter()
        .filter_map(|r| {
            let hash = parse_hash(&r.sha256)?;
            Some((
                hash,
                TokenIdentity {
                    name: r.name,
                    profile: r.profile,
                },
                r.scopes,
            ))
        })
        .collect()
}

/// The token of an `Authorization: Bearer TOKEN` header value.
pub(crate) fn bearer(value: &[u8]) -> Option<&str> {
    let value = std::str::from_utf8(value).ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

fn parse_hash(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_made_listed_checked_and_revoked() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = TokenStore::new(dir.path().join("state").join("tokens.json"));
        let auth = TokenAuthenticator::new(store.clone());
        assert_eq!(auth.count(), Ok(0));
        let laptop = store.add("laptop", Some("coding"), &[]).expect("add");
        assert!(laptop.token.starts_with(PREFIX));
        assert_eq!(laptop.token.len(), PREFIX.len() + 43);
        assert!(toolhost_calls::private::is_private(store.path()).expect("stat"));
        let text = fs::read_to_string(store.path()).expect("read");
        assert!(
            !text.contains(&laptop.token),
            "the token itself is never stored"
        );
        assert!(matches!(
            store.add("laptop", None, &[]),
            Err(TokenError::Exists(_))
        ));
        assert!(matches!(
            store.add("a b", None, &[]),
            Err(TokenError::BadName(_))
        ));
        let ci = store.add("ci", None, &[]).expect("add");
        assert_ne!(ci.token, laptop.token);

        let header = format!("Bearer {}", laptop.token);
        assert_eq!(
            auth.check(Some(header.as_bytes()), TokenScope::Mcp),
            Ok(TokenIdentity {
                name: "laptop".to_owned(),
                profile: Some("coding".to_owned())
            })
        );
        let lower = format!("bearer  {} ", ci.token);
        assert_eq!(
            auth.check(Some(lower.as_bytes()), TokenScope::Mcp)
                .map(|i| i.name),
            Ok("ci".to_owned())
        );
        assert_eq!(auth.check(None, TokenScope::Mcp), Err(AuthFailure::Missing));
        assert_eq!(
            auth.check(Some(b"Basic abc"), TokenScope::Mcp),
            Err(AuthFailure::Missing)
        );
        let wrong = format!("Bearer {}x", laptop.token);
        assert_eq!(
            auth.check(Some(wrong.as_bytes()), TokenScope::Mcp),
            Err(AuthFailure::Invalid)
        );

        store.revoke("laptop").expect("revoke");
        assert_eq!(
            auth.check(Some(header.as_bytes()), TokenScope::Mcp),
            Err(AuthFailure::Invalid),
            "a revoked token stops working at the next request"
        );
        assert!(matches!(
            store.revoke("laptop"),
            Err(TokenError::NoSuchToken(_))
        ));
        assert_eq!(store.list().expect("list").len(), 1);

        fs::write(store.path(), b"{not json").expect("damage");
        assert_eq!(
            auth.check(Some(lower.as_bytes()), TokenScope::Mcp),
            Err(AuthFailure::StoreUnreadable)
        );
    }

    #[test]
    fn a_token_opens_only_the_doors_of_its_scopes_and_old_files_mean_mcp() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = TokenStore::new(dir.path().join("tokens.json"));
        let auth = TokenAuthenticator::new(store.clone());
        let agent = store.add("agent", None, &[]).expect("add");
        let header = format!("Bearer {}", agent.token);
        assert!(
            fs::read_to_string(store.path())
                .expect("read")
                .contains("\"version\": 1"),
            "MCP-only tokens keep the format older hosts read"
        );
        let scrape = store
            .add("prometheus", None, &[TokenScope::Metrics])
            .expect("add");
        let scrape_header = format!("Bearer {}", scrape.token);
        assert!(
            fs::read_to_string(store.path())
                .expect("read")
                .contains("\"version\": 2"),
            "a scoped token makes older hosts refuse the file rather than let it call tools"
        );
        assert!(auth.check(Some(header.as_bytes()), TokenScope::Mcp).is_ok());
        assert_eq!(
            auth.check(Some(header.as_bytes()), TokenScope::Metrics),
            Err(AuthFailure::OutOfScope(TokenScope::Metrics))
        );
        assert_eq!(
            auth.check(Some(scrape_header.as_bytes()), TokenScope::Mcp),
            Err(AuthFailure::OutOfScope(TokenScope::Mcp))
        );
        assert!(
            auth.check(Some(scrape_header.as_bytes()), TokenScope::Metrics)
                .is_ok()
        );
        let both = store
            .add(
                "both",
                None,
                &[TokenScope::Metrics, TokenScope::Mcp, TokenScope::Mcp],
            )
            .expect("add");
        assert_eq!(
            both.record.scopes,
            vec![TokenScope::Mcp, TokenScope::Metrics]
        );

        // A file written before scopes existed: its tokens call tools, and only that.
        let old = dir.path().join("old.json");
        let hash = hash_hex("thk_old");
        fs::write(
            &old,
            format!(
                r#"{{"version":1,"tokens":[{{"name":"a","profile":null,"created":"x","sha256":"{hash}"}}]}}"#
            ),
        )
        .expect("write");
        let old_auth = TokenAuthenticator::new(TokenStore::new(old));
        assert!(
            old_auth
                .check(Some(b"Bearer thk_old"), TokenScope::Mcp)
                .is_ok()
        );
        assert_eq!(
            old_auth.check(Some(b"Bearer thk_old"), TokenScope::Metrics),
            Err(AuthFailure::OutOfScope(TokenScope::Metrics))
        );
    }
}
