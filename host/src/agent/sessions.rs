//! A profile's conversations in SQLite: every message committed as it arrives (a crash
//! mid-turn loses nothing already said), with an FTS5 index for `session_search`, and the
//! compactions of each session (what was left out of the requests to fit the model's
//! window, and the summaries the model wrote; the messages themselves stay whole).
//!
//! The schema is versioned with SQLite's `user_version`: `MIGRATIONS` is the ordered
//! list, each run once in its own write transaction, which also sets the version. The
//! first is today's schema; it adopts a database made before versions existed (version
//! 0 with tables in it) by adding only what that database lacks. A database of a newer
//! toolhost (a version past the list) is refused, never written.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use serde::Deserialize as _;
use serde::de::IntoDeserializer as _;
use toolhost_plugin_api::SessionHit;

use super::messages::{Message, ModelToolCall, Role};
use toolhost_calls::profile_dirs::ProfileDirs;

/// Why the session store failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The database could not be opened or written.
    #[error(
        "the session database {path} failed: {source}; check that the profile's state folder \
         is writable (and not on a network file system)"
    )]
    Db {
        /// The database file.
        path: PathBuf,
        /// The cause.
        source: rusqlite::Error,
    },
    /// The database file (or a file beside it) could not be opened as a private (0600)
    /// regular file: a link or a FIFO is there, or it could not be created or narrowed.
    #[error(
        "could not open the session database file {path} as a private (0600) regular \
         file: {source}; check that the profile's state folder belongs to the host's user"
    )]
    File {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// No such session.
    #[error("there is no session '{0}' in this profile")]
    NoSession(String),
    /// The database was made by a newer toolhost (its schema version is past this one's).
    #[error(
        "the session database {path} has schema version {found}, newer than this toolhost \
         knows ({known}); use the newer toolhost, or move the file away to start afresh"
    )]
    NewerSchema {
        /// The database file.
        path: PathBuf,
        /// Its `user_version`.
        found: i64,
        /// The last version this build knows.
        known: usize,
    },
    /// The worker thread running a store operation failed.
    #[error("a session-store operation failed: {0}")]
    Worker(String),
    /// A value could not be written as JSON (a bug: report it with the session's id).
    #[error("could not encode the {what} of session '{session}' as JSON: {source}")]
    Encode {
        /// What was being stored.
        what: &'static str,
        /// The session.
        session: String,
        /// The encoder's message.
        source: serde_json::Error,
    },
    /// A message id that is not one of the session's (it was removed, or the id is of
    /// another session).
    #[error("session '{session}' has no message {id}; read the session's messages again")]
    NoMessage {
        /// The session.
        session: String,
        /// The row id asked for.
        id: i64,
    },
}

/// A stored name this build does not know (a newer toolhost wrote it, or the database was
/// edited by hand).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "'{name}' is not a {kind} this toolhost knows ({known}); a newer toolhost may have written \
     it: use that version, or remove the row"
)]
pub struct UnknownName {
    /// What it should have named.
    pub kind: &'static str,
    /// The name found.
    pub name: String,
    /// The names there are, comma-separated.
    pub known: String,
}

/// An enum kept as text, in the database and in JSON, by one list of names: its
/// `as_str`, `FromStr`, `Display`, serde and SQLite forms all read that list, so no
/// second mapping can drift from it, and an unknown name is an [`UnknownName`] error.
macro_rules! named_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident ($kind:literal) {
            $($(#[$vmeta:meta])* $variant:ident = $text:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// Its name.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        impl std::str::FromStr for $name {
            type Err = UnknownName;

            fn from_str(text: &str) -> Result<Self, UnknownName> {
                match text {
                    $($text => Ok($name::$variant),)+
                    _ => Err(UnknownName {
                        kind: $kind,
                        name: text.to_owned(),
                        known: [$($text),+].join(", "),
                    }),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }

        impl ToSql for $name {
            fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
                Ok(ToSqlOutput::from(self.as_str()))
            }
        }

        impl FromSql for $name {
            fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
                value
                    .as_str()?
                    .parse()
                    .map_err(|e: UnknownName| FromSqlError::Other(Box::new(e)))
            }
        }
    };
}

/// A role is stored as its wire name (`user`, `assistant`, ...), the one serde gives it.
impl ToSql for Role {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::String(name)) => Ok(ToSqlOutput::from(name)),
            other => Err(rusqlite::Error::ToSqlConversionFailure(
                format!("the role {self:?} has no name: {other:?}").into(),
            )),
        }
    }
}

/// A stored role; a name this version does not know is read as `user`.
impl FromSql for Role {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        let name = value.as_str()?;
        let role: Result<Role, serde::de::value::Error> =
            Role::deserialize(name.into_deserializer());
        Ok(role.unwrap_or(Role::User))
    }
}

named_enum! {
    /// A stage of compaction (`agent/compaction.rs`).
    pub enum CompactionStage ("compaction stage") {
        /// Old tool results sent as one-line stubs naming their kept output.
        Stubs = "stubs",
        /// Older turns sent as a summary the model wrote.
        Summary = "summary",
        /// Messages still too large sent cut, with a marker.
        Cut = "cut",
    }
}

named_enum! {
    /// Where a background delegation, or one of its completion units, stands.
    pub enum RunState ("delegation state") {
        /// Its tasks are running.
        Running = "running",
        /// It finished (some task answered).
        Done = "done",
        /// Every task failed.
        Failed = "failed",
        /// It was cancelled (its parent turn was, or the agent ended).
        Cancelled = "cancelled",
    }
}

/// A delegation's state as shown: its recorded one, or lost when it is recorded running
/// but its process is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShownState {
    /// As recorded.
    Recorded(RunState),
    /// Recorded running, but its process exited (delegations live in their process).
    Lost,
}

impl ShownState {
    /// As it is shown.
    pub fn as_str(self) -> &'static str {
        match self {
            ShownState::Recorded(state) => state.as_str(),
            ShownState::Lost => "lost: its process exited",
        }
    }
}

impl std::fmt::Display for ShownState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for ShownState {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// One compaction of a session's requests, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Compaction {
    /// Which stage.
    pub stage: CompactionStage,
    /// How many messages it replaced (stubs, summary) or cut.
    pub messages: u64,
    /// The request's estimated tokens before.
    pub tokens_before: u64,
    /// And after.
    pub tokens_after: u64,
    /// For a summary: its text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// For a summary: the conversation's messages it stands for end before this one (an
    /// index into the conversation as a turn sends it, the system prompt at 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub through: Option<u64>,
    /// When (RFC 3339; empty until recorded).
    pub created: String,
}

/// One session as `toolhost sessions list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SessionSummary {
    /// Its id.
    pub id: String,
    /// The session whose turn started it (a child turn's), if any.
    pub parent: Option<String>,
    /// When it started (RFC 3339).
    pub created: String,
    /// How many messages it holds.
    pub messages: u64,
    /// When its last message was stored, if it has any.
    pub last: Option<String>,
    /// The first 200 characters of its first request.
    pub first_request: Option<String>,
}

/// The sessions of one profile.
pub struct SessionStore {
    path: PathBuf,
    conn: Mutex<Connection>,
}

const PRAGMAS: &str = "
PRAGMA journal_mode = WAL;
PRAGMA synchronous = NORMAL;
";

/// Version 1: the tables, the index and the full-text index as of the first versioned
/// release. `IF NOT EXISTS` and [`ADDED_COLUMNS`] let it adopt an unversioned database.
const SCHEMA_V1: &str = "
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    parent TEXT,
    created TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    session TEXT NOT NULL REFERENCES sessions(id),
    role TEXT NOT NULL,
    content TEXT,
    tool_calls TEXT,
    tool_call_id TEXT,
    created TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_session ON messages(session, id);
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(
    content, content='messages', content_rowid='id'
);
CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
";

/// Columns unversioned releases added to `messages` after the first schema (version 1
/// has them; an unversioned database may lack them).
const ADDED_COLUMNS: [&str; 2] = [
    // A tool message's details (JSON), never the model's.
    "details",
    // A tool message's full text when the model got it cut to the output budget (no
    // longer written: kept outputs hold it; older rows keep theirs).
    "full_text",
];

/// One step of the schema: run inside the write transaction that sets its version.
type Migration = fn(&rusqlite::Transaction<'_>) -> rusqlite::Result<()>;

/// The schema's steps, in order: version `i + 1` is reached by running `MIGRATIONS[i]`.
/// Append only; never edit a released step.
const MIGRATIONS: [Migration; 4] = [schema_v1, schema_v2, schema_v3, schema_v4];

/// Version 2: the compactions of each session's requests.
fn schema_v2(tx: &rusqlite::Transaction<'_>) -> rusqlite::Result<()> {
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS compactions (
             id INTEGER PRIMARY KEY,
             session TEXT NOT NULL REFERENCES sessions(id),
             stage TEXT NOT NULL,
             messages INTEGER NOT NULL,
             tokens_before INTEGER NOT NULL,
             tokens_after INTEGER NOT NULL,
             summary TEXT,
             through INTEGER,
             created TEXT NOT NULL
         );
         CREATE INDEX IF NOT EXISTS compactions_by_session ON compactions(session, id);",
    )
}

/// Version 3: background delegations (`toolhost sessions` and `status` show them).
fn schema_v3(tx: &rusqlite::Transaction<'_>) -> rusqlite::Result<()> {
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS delegations (
            id TEXT PRIMARY KEY,
            parent TEXT NOT NULL,
            children TEXT NOT NULL,
            units TEXT NOT NULL,
            state TEXT NOT NULL,
            pid INTEGER NOT NULL,
            started TEXT NOT NULL,
            ended TEXT
        );
        CREATE INDEX IF NOT EXISTS delegations_by_parent ON delegations(parent);",
    )
}

/// Version 4: each session's task list (the agent's `todo` tool).
fn schema_v4(tx: &rusqlite::Transaction<'_>) -> rusqlite::Result<()> {
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS todos (
            session TEXT PRIMARY KEY REFERENCES sessions(id),
            items TEXT NOT NULL,
            updated TEXT NOT NULL
        );",
    )
}

/// A background delegation as the store keeps it: who started it, its child sessions and
/// units, its state and the process that runs it (delegations live in that process: when
/// it exits, they end).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DelegationRecord {
    /// Its id (`d-...`).
    pub id: String,
    /// The session whose turn started it (its completions are added there).
    pub parent: String,
    /// The child turns' sessions, as they started.
    pub children: Vec<String>,
    /// Its completion units.
    pub units: Vec<UnitRecord>,
    /// Where it stands (`failed`: every task failed).
    pub state: RunState,
    /// The process running it.
    pub pid: u32,
    /// When it started (RFC 3339).
    pub started: String,
    /// When it ended, if it has.
    pub ended: Option<String>,
}

/// One completion unit of a [`DelegationRecord`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UnitRecord {
    /// Its id (`DELEGATION/uN`).
    pub id: String,
    /// Its tasks, as indexes into the delegation's.
    pub tasks: Vec<usize>,
    /// Where it stands.
    pub state: RunState,
}

impl DelegationRecord {
    /// The state to show: a `running` delegation whose process is gone is
    /// `lost: its process exited` (delegations live only as long as their process).
    pub fn shown_state(&self) -> ShownState {
        if self.state == RunState::Running && !process_exists(self.pid) {
            ShownState::Lost
        } else {
            ShownState::Recorded(self.state)
        }
    }
}

/// Whether a process `pid` exists (Linux: its `/proc` entry).
fn process_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Version 1, from nothing or from an unversioned database.
fn schema_v1(tx: &rusqlite::Transaction<'_>) -> rusqlite::Result<()> {
    tx.execute_batch(SCHEMA_V1)?;
    add_missing_columns(tx)
}

/// Brings the database at `conn` to the last version, one step per transaction (an
/// immediate one: a second toolhost opening the same database waits, then finds the
/// work done).
fn migrate(conn: &mut Connection, path: &Path) -> Result<(), SessionError> {
    let db = |source| SessionError::Db {
        path: path.to_path_buf(),
        source,
    };
    loop {
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(db)?;
        let version: i64 = tx
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .map_err(db)?;
        let next = match usize::try_from(version) {
            Ok(v) if v <= MIGRATIONS.len() => MIGRATIONS.get(v),
            _ => {
                return Err(SessionError::NewerSchema {
                    path: path.to_path_buf(),
                    found: version,
                    known: MIGRATIONS.len(),
                });
            }
        };
        let Some(step) = next else {
            return Ok(());
        };
        step(&tx).map_err(db)?;
        tx.pragma_update(None, "user_version", version + 1)
            .map_err(db)?;
        tx.commit().map_err(db)?;
        tracing::debug!(
            "session database {} at schema version {}",
            path.display(),
            version + 1
        );
    }
}

/// Adds the columns an unversioned database lacks.
fn add_missing_columns(conn: &Connection) -> Result<(), rusqlite::Error> {
    let have: Vec<String> = conn
        .prepare("SELECT name FROM pragma_table_info('messages')")?
        .query_map([], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    for column in ADDED_COLUMNS {
        if !have.iter().any(|c| c == column) {
            conn.execute_batch(&format!("ALTER TABLE messages ADD COLUMN {column} TEXT"))?;
        }
    }
    Ok(())
}

fn now() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Millisecond)
        .map_or_else(|_| jiff::Timestamp::now().to_string(), |t| t.to_string())
}

/// A conversation the model will accept: every tool call of an assistant message is
/// answered (a turn that stopped between a call and its result, in a crash or a kill,
/// gets a note in its place), and tool messages that answer no call are dropped.
pub fn repair(history: Vec<Message>) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::with_capacity(history.len());
    let mut open: Vec<String> = Vec::new();
    let close = |out: &mut Vec<Message>, open: &mut Vec<String>| {
        for id in open.drain(..) {
            out.push(Message::tool_result(
                id,
                "interrupted: the turn stopped before this call finished; its result is \
                 unknown",
            ));
        }
    };
    for message in history {
        match message.role {
            Role::Tool => {
                let answers = message
                    .tool_call_id
                    .as_ref()
                    .and_then(|id| open.iter().position(|o| o == id));
                if let Some(i) = answers {
                    open.remove(i);
                    out.push(message);
                }
            }
            _ => {
                close(&mut out, &mut open);
                open = message.tool_calls.iter().map(|c| c.id.clone()).collect();
                out.push(message);
            }
        }
    }
    close(&mut out, &mut open);
    out
}

/// Turns free text into an FTS5 query: every word must appear (each quoted, so no word
/// is read as query syntax).
fn fts_query(text: &str) -> Option<String> {
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric() && c != '_' && c != '-')
        .filter(|w| !w.is_empty())
        .map(|w| format!("\"{}\"", w.replace('"', "\"\"")))
        .collect();
    (!words.is_empty()).then(|| words.join(" "))
}

/// The session database's file name.
pub const SESSIONS_FILE: &str = "sessions.sqlite3";

/// Where a profile keeps its sessions: `sessions/sessions.sqlite3`, beside its plugins'
/// state folder (like `approvals/`), never inside it, since a plugin's worker may read
/// and write that folder and the conversations are the host's to keep.
pub fn profile_sessions_file(dirs: &ProfileDirs) -> PathBuf {
    dirs.sessions().join(SESSIONS_FILE)
}

/// SQLite's files beside a database, in the order a move takes them (the side files
/// first, so a stop half-way loses no committed transaction).
const SIDE_FILES: [&str; 3] = ["-wal", "-shm", "-journal"];

/// `path` with `suffix` appended to its file name (`sessions.sqlite3-wal`).
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// A [`SessionError::File`] for `path`.
fn file_error(path: &Path) -> impl FnOnce(std::io::Error) -> SessionError + use<> {
    let path = path.to_path_buf();
    move |source| SessionError::File { path, source }
}

/// Moves a session database an older toolhost kept in the plugins' state folder (with
/// its [`SIDE_FILES`], those first) to `to`, whose folder exists. Nothing is moved when
/// the new file exists already; then the old one is left where it is, with a warning.
fn move_from_plugin_state(state_dir: &Path, to: &Path) -> Result<(), SessionError> {
    let old = state_dir.join(SESSIONS_FILE);
    let is_file = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file());
    if !is_file(&old) {
        return Ok(());
    }
    if is_file(to) {
        tracing::warn!(
            "two session databases: {} (kept) and {} (an older toolhost's, left as it is: \
             move it away once you no longer need it)",
            to.display(),
            old.display()
        );
        return Ok(());
    }
    for suffix in SIDE_FILES {
        let from = with_suffix(&old, suffix);
        match std::fs::rename(&from, with_suffix(to, suffix)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(file_error(&from)(e));
            }
            _ => {}
        }
    }
    std::fs::rename(&old, to).map_err(file_error(&old))?;
    tracing::info!(
        "moved the session database from {} to {}, out of the folder plugins may read",
        old.display(),
        to.display()
    );
    Ok(())
}

impl SessionStore {
    /// Opens (creating if needed) the session store of the profile whose plugins keep
    /// their state in `state_dir` ([`profile_sessions_file`]), moving one an older
    /// toolhost kept inside that folder first.
    pub fn open_for_profile(dirs: &ProfileDirs) -> Result<SessionStore, SessionError> {
        let path = profile_sessions_file(dirs);
        if let Some(dir) = path.parent() {
            toolhost_calls::private::ensure_private_dir(dir).map_err(file_error(dir))?;
        }
        move_from_plugin_state(&dirs.state(), &path)?;
        SessionStore::open(&path)
    }

    /// Whether the profile whose plugins keep their state in `state_dir` has a session
    /// database yet (here or where an older toolhost kept it).
    pub fn exists_for_profile(dirs: &ProfileDirs) -> bool {
        profile_sessions_file(dirs).exists() || dirs.state().join(SESSIONS_FILE).exists()
    }

    /// Opens (creating if needed) the store at `path`. The database is private: a new
    /// file is created 0600 before SQLite opens it (SQLite gives its `-wal` and `-shm`
    /// files the database's mode), and existing wider ones are narrowed with a log line.
    /// No link is followed: a symbolic link (or anything but a regular file) at the
    /// database or at its `-wal`, `-shm` or `-journal` is refused, and SQLite itself opens
    /// the database with `SQLITE_OPEN_NOFOLLOW`.
    pub fn open(path: &Path) -> Result<SessionStore, SessionError> {
        let db = |source| SessionError::Db {
            path: path.to_path_buf(),
            source,
        };
        drop(toolhost_calls::private::open_private_file(path).map_err(file_error(path))?);
        for suffix in SIDE_FILES {
            let side = with_suffix(path, suffix);
            toolhost_calls::private::tighten_existing_file(&side).map_err(file_error(&side))?;
        }
        let flags = OpenFlags::default() | OpenFlags::SQLITE_OPEN_NOFOLLOW;
        let mut conn = Connection::open_with_flags(path, flags).map_err(db)?;
        // Another toolhost on the same profile (a chat and a run) waits its turn.
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(db)?;
        conn.execute_batch(PRAGMAS).map_err(db)?;
        migrate(&mut conn, path)?;
        Ok(SessionStore {
            path: path.to_path_buf(),
            conn: Mutex::new(conn),
        })
    }

    fn db(&self, source: rusqlite::Error) -> SessionError {
        SessionError::Db {
            path: self.path.clone(),
            source,
        }
    }

    /// A new session (a child turn's names its parent); returns its id.
    pub fn create(&self, parent: Option<&str>) -> Result<String, SessionError> {
        let created = now();
        let id = format!(
            "{}-{}",
            jiff::Timestamp::now().strftime("%Y%m%d-%H%M%S"),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        conn.execute(
            "INSERT INTO sessions (id, parent, created) VALUES (?1, ?2, ?3)",
            params![id, parent, created],
        )
        .map_err(|e| self.db(e))?;
        Ok(id)
    }

    /// Whether `id` exists.
    pub fn exists(&self, id: &str) -> Result<bool, SessionError> {
        let conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        conn.query_row("SELECT 1 FROM sessions WHERE id = ?1", [id], |_| Ok(()))
            .optional()
            .map(|r| r.is_some())
            .map_err(|e| self.db(e))
    }

    /// Appends a message to `session`, committed before this returns; its row id.
    pub fn append(&self, session: &str, message: &Message) -> Result<i64, SessionError> {
        let conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        self.insert(&conn, session, message)
    }

    /// Appends messages to `session` in one transaction, committed before this returns;
    /// their row ids, in order (what [`SessionStore::set_details`] takes).
    pub fn append_all(
        &self,
        session: &str,
        messages: &[Message],
    ) -> Result<Vec<i64>, SessionError> {
        let mut conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        let tx = conn.transaction().map_err(|e| self.db(e))?;
        let ids = messages
            .iter()
            .map(|message| self.insert(&tx, session, message))
            .collect::<Result<Vec<_>, _>>()?;
        tx.commit().map_err(|e| self.db(e))?;
        Ok(ids)
    }

    /// Inserts one message (inside the caller's transaction, if any); its row id.
    fn insert(
        &self,
        conn: &Connection,
        session: &str,
        message: &Message,
    ) -> Result<i64, SessionError> {
        let encode = |what, value: Result<String, serde_json::Error>| {
            value.map_err(|source| SessionError::Encode {
                what,
                session: session.to_owned(),
                source,
            })
        };
        let calls = (!message.tool_calls.is_empty())
            .then(|| encode("tool calls", serde_json::to_string(&message.tool_calls)))
            .transpose()?;
        let details = (!message.details.is_empty())
            .then(|| encode("details", serde_json::to_string(&message.details)))
            .transpose()?;
        // (The `full_text` column of schema 3 is no longer written: a cut result's full
        // text has one home, the profile's kept outputs.)
        conn.execute(
            "INSERT INTO messages
                 (session, role, content, tool_calls, tool_call_id, created, details)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                session,
                message.role,
                message.content,
                calls,
                message.tool_call_id,
                now(),
                details,
            ],
        )
        .map_err(|e| self.db(e))?;
        Ok(conn.last_insert_rowid())
    }

    /// The session `session` is a child turn of, if it is one.
    pub fn parent_of(&self, session: &str) -> Result<Option<String>, SessionError> {
        let conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        conn.query_row(
            "SELECT parent FROM sessions WHERE id = ?1",
            [session],
            |row| row.get::<_, Option<String>>(0),
        )
        .optional()
        .map(Option::flatten)
        .map_err(|e| self.db(e))
    }

    /// The task list of `session` (the agent's `todo` tool); empty if it has none.
    pub fn todos(&self, session: &str) -> Result<Vec<super::todo::TodoItem>, SessionError> {
        let conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        let items: Option<String> = conn
            .query_row(
                "SELECT items FROM todos WHERE session = ?1",
                [session],
                |row| row.get(0),
            )
            .optional()
            .map_err(|e| self.db(e))?;
        // A list this version cannot read (written by hand) reads as empty, not an error
        // that would stop the turn; the next write replaces it.
        Ok(items
            .and_then(|items| serde_json::from_str(&items).ok())
            .unwrap_or_default())
    }

    /// Replaces the task list of `session`, committed before this returns.
    pub fn set_todos(
        &self,
        session: &str,
        items: &[super::todo::TodoItem],
    ) -> Result<(), SessionError> {
        if !self.exists(session)? {
            return Err(SessionError::NoSession(session.to_owned()));
        }
        let text = serde_json::to_string(items).map_err(|source| SessionError::Encode {
            what: "todos",
            session: session.to_owned(),
            source,
        })?;
        let conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        conn.execute(
            "INSERT INTO todos (session, items, updated) VALUES (?1, ?2, ?3)
             ON CONFLICT(session) DO UPDATE SET items = excluded.items, updated = excluded.updated",
            params![session, text, now()],
        )
        .map_err(|e| self.db(e))?;
        Ok(())
    }

    /// The messages of `session`, in order.
    pub fn messages(&self, session: &str) -> Result<Vec<Message>, SessionError> {
        if !self.exists(session)? {
            return Err(SessionError::NoSession(session.to_owned()));
        }
        let conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        let mut stmt = conn
            .prepare(
                "SELECT role, content, tool_calls, tool_call_id, details, id FROM messages
                 WHERE session = ?1 ORDER BY id",
            )
            .map_err(|e| self.db(e))?;
        let rows = stmt
            .query_map([session], |row| {
                let calls: Option<String> = row.get(2)?;
                let details: Option<String> = row.get(4)?;
                Ok(Message {
                    details: details
                        .and_then(|d| serde_json::from_str(&d).ok())
                        .unwrap_or_default(),
                    id: row.get(5)?,
                    role: row.get(0)?,
                    content: row.get(1)?,
                    tool_calls: calls
                        .and_then(|c| serde_json::from_str::<Vec<ModelToolCall>>(&c).ok())
                        .unwrap_or_default(),
                    tool_call_id: row.get(3)?,
                })
            })
            .map_err(|e| self.db(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.db(e))
    }

    /// Records a compaction of `session`'s requests.
    pub fn record_compaction(&self, session: &str, c: &Compaction) -> Result<(), SessionError> {
        let conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        conn.execute(
            "INSERT INTO compactions
                 (session, stage, messages, tokens_before, tokens_after, summary, through, created)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                session,
                c.stage,
                count(c.messages),
                count(c.tokens_before),
                count(c.tokens_after),
                c.summary,
                c.through.map(count),
                now(),
            ],
        )
        .map_err(|e| self.db(e))?;
        Ok(())
    }

    /// The compactions of `session`, oldest first.
    pub fn compactions(&self, session: &str) -> Result<Vec<Compaction>, SessionError> {
        let conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        let mut stmt = conn
            .prepare(
                "SELECT stage, messages, tokens_before, tokens_after, summary, through, created
                 FROM compactions WHERE session = ?1 ORDER BY id",
            )
            .map_err(|e| self.db(e))?;
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        let rows = stmt
            .query_map([session], |row| {
                let through: Option<i64> = row.get(5)?;
                Ok(Compaction {
                    stage: row.get(0)?,
                    messages: count(row.get(1)?),
                    tokens_before: count(row.get(2)?),
                    tokens_after: count(row.get(3)?),
                    summary: row.get(4)?,
                    through: through.map(count),
                    created: row.get(6)?,
                })
            })
            .map_err(|e| self.db(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.db(e))
    }

    /// The last compaction of `session` at `stage`, if any.
    pub fn last_compaction(
        &self,
        session: &str,
        stage: CompactionStage,
    ) -> Result<Option<Compaction>, SessionError> {
        // Few rows per session; the index orders them.
        Ok(self
            .compactions(session)?
            .into_iter()
            .rev()
            .find(|c| c.stage == stage))
    }

    /// Notes on `session`'s message `id` (its row, from [`SessionStore::append_all`] or
    /// [`Message::id`]) that its text is kept as an output: its details become
    /// `details`. The text stays as it was. An id that is not a message of `session` is
    /// an error naming both.
    pub fn set_details(
        &self,
        session: &str,
        id: i64,
        details: &toolhost_calls::details::Details,
    ) -> Result<(), SessionError> {
        let text = serde_json::to_string(details).map_err(|source| SessionError::Encode {
            what: "details",
            session: session.to_owned(),
            source,
        })?;
        let conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        let changed = conn
            .execute(
                "UPDATE messages SET details = ?3 WHERE session = ?1 AND id = ?2",
                params![session, id, text],
            )
            .map_err(|e| self.db(e))?;
        if changed == 0 {
            return Err(SessionError::NoMessage {
                session: session.to_owned(),
                id,
            });
        }
        Ok(())
    }

    /// Every session, newest first: when it started and last changed, its parent (a child
    /// turn's), how many messages it has and the start of its first request.
    pub fn list(&self) -> Result<Vec<SessionSummary>, SessionError> {
        let conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        let mut stmt = conn
            .prepare(
                "SELECT s.id, s.parent, s.created,
                        (SELECT COUNT(*) FROM messages m WHERE m.session = s.id),
                        (SELECT MAX(m.created) FROM messages m WHERE m.session = s.id),
                        (SELECT m.content FROM messages m WHERE m.session = s.id
                           AND m.role = 'user' ORDER BY m.id LIMIT 1)
                 FROM sessions s ORDER BY s.created DESC, s.id",
            )
            .map_err(|e| self.db(e))?;
        let rows = stmt
            .query_map([], |row| {
                let first: Option<String> = row.get(5)?;
                Ok(SessionSummary {
                    id: row.get(0)?,
                    parent: row.get(1)?,
                    created: row.get(2)?,
                    messages: row.get(3)?,
                    last: row.get(4)?,
                    first_request: first.map(|f| f.chars().take(200).collect()),
                })
            })
            .map_err(|e| self.db(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.db(e))
    }

    /// Messages matching every word of `query`, best first, at most `limit`; leaves out
    /// `exclude` (the session asking).
    pub fn search(
        &self,
        query: &str,
        limit: u32,
        exclude: Option<&str>,
    ) -> Result<Vec<SessionHit>, SessionError> {
        let Some(query) = fts_query(query) else {
            return Ok(Vec::new());
        };
        let conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        let mut stmt = conn
            .prepare(
                "SELECT m.session, m.created, m.role,
                        snippet(messages_fts, 0, '[', ']', '…', 16)
                 FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid
                 WHERE messages_fts MATCH ?1 AND m.session IS NOT ?2
                 ORDER BY rank LIMIT ?3",
            )
            .map_err(|e| self.db(e))?;
        let rows = stmt
            .query_map(params![query, exclude, limit], |row| {
                Ok(SessionHit {
                    session: row.get(0)?,
                    time: row.get(1)?,
                    role: row.get(2)?,
                    snippet: row.get(3)?,
                })
            })
            .map_err(|e| self.db(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.db(e))
    }
}

impl SessionStore {
    /// Writes `record` (a new one, or its new state), committed before this returns.
    pub fn record_delegation(&self, record: &DelegationRecord) -> Result<(), SessionError> {
        let encode = |what, value: Result<String, serde_json::Error>| {
            value.map_err(|source| SessionError::Encode {
                what,
                session: record.parent.clone(),
                source,
            })
        };
        let children = encode("child sessions", serde_json::to_string(&record.children))?;
        let units = encode("units", serde_json::to_string(&record.units))?;
        let conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        conn.execute(
            "INSERT OR REPLACE INTO delegations
                 (id, parent, children, units, state, pid, started, ended)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                record.id,
                record.parent,
                children,
                units,
                record.state,
                record.pid,
                record.started,
                record.ended,
            ],
        )
        .map_err(|e| self.db(e))?;
        Ok(())
    }

    /// The delegations started by `parent`'s turns (every one when `None`), newest first.
    pub fn delegations(&self, parent: Option<&str>) -> Result<Vec<DelegationRecord>, SessionError> {
        let conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        let mut stmt = conn
            .prepare(
                "SELECT id, parent, children, units, state, pid, started, ended FROM delegations
                 WHERE ?1 IS NULL OR parent = ?1 ORDER BY started DESC, id",
            )
            .map_err(|e| self.db(e))?;
        let rows = stmt
            .query_map([parent], |row| {
                let children: String = row.get(2)?;
                let units: String = row.get(3)?;
                Ok(DelegationRecord {
                    id: row.get(0)?,
                    parent: row.get(1)?,
                    children: serde_json::from_str(&children).unwrap_or_default(),
                    units: serde_json::from_str(&units).unwrap_or_default(),
                    state: row.get(4)?,
                    pid: row.get(5)?,
                    started: row.get(6)?,
                    ended: row.get(7)?,
                })
            })
            .map_err(|e| self.db(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.db(e))
    }
}

/// The time now, as the store writes it (RFC 3339, milliseconds).
pub(super) fn timestamp() -> String {
    now()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_in_the_plugins_state_folder_moves_beside_it_with_its_side_files() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("p").join("state");
        std::fs::create_dir_all(&state).expect("state");
        let old = state.join(SESSIONS_FILE);
        let id = {
            let store = SessionStore::open(&old).expect("the old place");
            store.create(None).expect("a session")
        };
        std::fs::write(state.join("sessions.sqlite3-journal"), b"").expect("side file");
        std::fs::write(state.join("memory.json"), b"{}").expect("a plugin's file");
        let store = SessionStore::open_for_profile(&ProfileDirs::of_state(&state))
            .expect("moved and opened");
        let new = profile_sessions_file(&ProfileDirs::of_state(&state));
        assert_eq!(new, dir.path().join("p/sessions/sessions.sqlite3"));
        assert!(new.is_file() && !old.exists());
        assert!(!state.join("sessions.sqlite3-journal").exists());
        assert!(state.join("memory.json").exists(), "plugins' files stay");
        let mode = std::fs::metadata(new.parent().expect("folder"))
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        assert!(store.list().expect("list").iter().any(|s| s.id == id));
        drop(store);
        // An old file appearing again beside a new one is left alone.
        std::fs::write(&old, b"not a database").expect("old again");
        SessionStore::open_for_profile(&ProfileDirs::of_state(&state)).expect("the new one wins");
        assert_eq!(std::fs::read(&old).expect("old"), b"not a database");
        assert!(SessionStore::exists_for_profile(&ProfileDirs::of_state(
            &state
        )));
    }

    #[test]
    fn delegations_are_kept_and_a_running_one_of_a_gone_process_shows_as_lost() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SessionStore::open(&dir.path().join("s.db")).expect("open");
        let parent = store.create(None).expect("session");
        let mut record = DelegationRecord {
            id: "d-1".to_owned(),
            parent: parent.clone(),
            children: Vec::new(),
            units: vec![UnitRecord {
                id: "d-1/u1".to_owned(),
                tasks: vec![0, 1],
                state: RunState::Running,
            }],
            state: RunState::Running,
            pid: std::process::id(),
            started: now(),
            ended: None,
        };
        store.record_delegation(&record).expect("record");
        assert_eq!(
            store.delegations(Some(&parent)).expect("list"),
            [record.clone()]
        );
        assert_eq!(record.shown_state(), "running");
        record.children.push("c-1".to_owned());
        record.state = RunState::Done;
        store.record_delegation(&record).expect("update");
        assert_eq!(store.delegations(None).expect("list"), [record.clone()]);
        assert!(store.delegations(Some("other")).expect("list").is_empty());
        // A pid no process has (past the kernel's limit).
        record.state = RunState::Running;
        record.pid = u32::MAX;
        assert_eq!(record.shown_state(), "lost: its process exited");
    }

    #[test]
    fn each_stored_name_round_trips_and_an_unknown_one_is_an_error_naming_it() {
        for stage in CompactionStage::ALL {
            assert_eq!(stage.as_str().parse::<CompactionStage>(), Ok(*stage));
            let json = serde_json::to_value(stage).expect("json");
            assert_eq!(json, serde_json::json!(stage.as_str()));
            assert_eq!(
                serde_json::from_value::<CompactionStage>(json).ok(),
                Some(*stage)
            );
        }
        for state in RunState::ALL {
            assert_eq!(state.as_str().parse::<RunState>(), Ok(*state));
            assert_eq!(state.to_string(), state.as_str());
        }
        let e = "paused".parse::<RunState>().err().map(|e| e.to_string());
        assert!(
            e.as_deref().is_some_and(
                |e| e.contains("'paused'") && e.contains("running, done, failed, cancelled")
            ),
            "{e:?}"
        );
        assert!(serde_json::from_value::<CompactionStage>(serde_json::json!("squash")).is_err());

        // A row a newer toolhost wrote is an error naming it, not a silent `cut`.
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SessionStore::open(&dir.path().join("s.db")).expect("open");
        let a = store.create(None).expect("session");
        store
            .conn
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .execute(
                "INSERT INTO compactions
                     (session, stage, messages, tokens_before, tokens_after, created)
                 VALUES (?1, 'squash', 1, 2, 1, 'now')",
                [&a],
            )
            .expect("insert");
        let e = store.compactions(&a).err().map(|e| e.to_string());
        assert!(
            e.as_deref().is_some_and(|e| e.contains("'squash'")),
            "{e:?}"
        );
    }

    #[test]
    fn messages_are_kept_and_found() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SessionStore::open(&dir.path().join("s.db")).expect("open");
        let a = store.create(None).expect("session");
        store
            .append(
                &a,
                &Message::text(Role::User, "the launch code is PURPLE-42"),
            )
            .expect("append");
        let b = store.create(None).expect("session");
        store
            .append(&b, &Message::text(Role::User, "what was the code?"))
            .expect("append");
        let hits = store.search("purple-42", 5, Some(&b)).expect("search");
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].session, a);
        assert!(hits[0].snippet.contains("[PURPLE-42]"), "{:?}", hits[0]);
        assert!(store.search("\"unbalanced", 5, None).is_ok());
        assert_eq!(store.messages(&a).expect("messages").len(), 1);
    }

    #[cfg(unix)]
    #[test]
    fn the_database_and_its_wal_and_shm_are_private_and_wider_ones_are_narrowed() {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = |p: &Path| {
            std::fs::metadata(p)
                .map(|m| m.permissions().mode() & 0o777)
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        };
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("sessions.sqlite3");
        let side = |suffix: &str| dir.path().join(format!("sessions.sqlite3{suffix}"));
        {
            let store = SessionStore::open(&path).expect("open");
            let id = store.create(None).expect("session");
            store
                .append(&id, &Message::text(Role::User, "private words"))
                .expect("append");
            // The connection is open: WAL mode keeps both side files.
            assert_eq!(mode(&path), 0o600);
            assert_eq!(mode(&side("-wal")), 0o600);
            assert_eq!(mode(&side("-shm")), 0o600);
        }
        for file in [path.clone(), side("-wal"), side("-shm")] {
            if file.exists() {
                std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))
                    .expect("chmod");
            }
        }
        let store = SessionStore::open(&path).expect("reopen");
        assert_eq!(mode(&path), 0o600, "an existing 0644 database is narrowed");
        for suffix in ["-wal", "-shm"] {
            if side(suffix).exists() {
                assert_eq!(mode(&side(suffix)), 0o600, "{suffix}");
            }
        }
        assert!(!store.search("private", 5, None).expect("search").is_empty());
    }

    #[test]
    fn an_older_database_gets_the_details_and_full_text_columns() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("sessions.sqlite3");
        {
            let conn = Connection::open(&path).expect("open");
            conn.execute_batch(
                "CREATE TABLE sessions (id TEXT PRIMARY KEY, parent TEXT, created TEXT NOT NULL);
                 CREATE TABLE messages (id INTEGER PRIMARY KEY, session TEXT NOT NULL,
                     role TEXT NOT NULL, content TEXT, tool_calls TEXT, tool_call_id TEXT,
                     created TEXT NOT NULL);
                 INSERT INTO sessions VALUES ('s', NULL, 'then');
                 INSERT INTO messages (session, role, content, created)
                     VALUES ('s', 'user', 'old words', 'then');",
            )
            .expect("an old schema");
        }
        let store = SessionStore::open(&path).expect("migrated");
        let kept = Message {
            details: toolhost_calls::details::from_value(
                serde_json::json!({"toolhost/full_output": {"id": "o1"}}),
            ),
            ..Message::tool_result("c1", "the cut text")
        };
        let id = store.append("s", &kept).expect("append");
        let messages = store.messages("s").expect("messages");
        assert_eq!(messages[0].content.as_deref(), Some("old words"));
        assert!(messages[0].details.is_empty());
        assert_eq!(messages[1], kept);
        assert_eq!(messages[1].id, Some(id));
        drop(store);
        SessionStore::open(&path).expect("a second open adds nothing");
        let conn = Connection::open(&path).expect("open");
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .expect("version");
        assert_eq!(version, MIGRATIONS.len() as i64);
    }

    #[test]
    fn an_unversioned_database_of_the_last_release_is_adopted_without_loss() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("sessions.sqlite3");
        {
            // What releases before versioning made: version 1's tables, no user_version.
            let conn = Connection::open(&path).expect("open");
            conn.execute_batch(SCHEMA_V1).expect("schema");
            add_missing_columns(&conn).expect("columns");
            conn.execute_batch(
                "INSERT INTO sessions VALUES ('s', NULL, 'then');
                 INSERT INTO messages (session, role, content, created, details, full_text)
                     VALUES ('s', 'tool', 'kept words', 'then', '{\"k\":1}', 'all of it');",
            )
            .expect("rows");
        }
        let store = SessionStore::open(&path).expect("adopted");
        let messages = store.messages("s").expect("messages");
        assert_eq!(messages.len(), 1);
        assert_eq!(messages[0].content.as_deref(), Some("kept words"));
        assert_eq!(store.search("kept", 5, None).expect("search").len(), 1);
        drop(store);
        let conn = Connection::open(&path).expect("open");
        let kept: String = conn
            .query_row("SELECT full_text FROM messages", [], |r| r.get(0))
            .expect("the older row's full text");
        assert_eq!(kept, "all of it", "an older row keeps what it had");
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .expect("version");
        assert_eq!(version, MIGRATIONS.len() as i64);
    }

    #[test]
    fn compactions_are_recorded_per_session_and_details_noted() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SessionStore::open(&dir.path().join("s.db")).expect("open");
        let (a, b) = (
            store.create(None).expect("a"),
            store.create(None).expect("b"),
        );
        let event = |stage, summary: Option<&str>| Compaction {
            stage,
            messages: 3,
            tokens_before: 900,
            tokens_after: 400,
            summary: summary.map(str::to_owned),
            through: summary.map(|_| 7),
            created: String::new(),
        };
        store
            .record_compaction(&a, &event(CompactionStage::Stubs, None))
            .expect("record");
        store
            .record_compaction(&a, &event(CompactionStage::Summary, Some("so far")))
            .expect("record");
        assert!(store.compactions(&b).expect("b").is_empty());
        let kept = store.compactions(&a).expect("a");
        assert_eq!(kept.len(), 2);
        assert_eq!(kept[1].summary.as_deref(), Some("so far"));
        assert_eq!(kept[1].through, Some(7));
        let last = store
            .last_compaction(&a, CompactionStage::Summary)
            .expect("last")
            .expect("one");
        assert_eq!(last.tokens_after, 400);

        // Two results with the same call id and text: the one noted is the one named.
        let ids = store
            .append_all(
                &a,
                &[
                    Message::tool_result("c1", "long text"),
                    Message::tool_result("c1", "long text"),
                ],
            )
            .expect("append");
        let details = toolhost_calls::details::from_value(
            serde_json::json!({"toolhost/full_output": {"id": "o1"}}),
        );
        store.set_details(&a, ids[1], &details).expect("noted");
        let messages = store.messages(&a).expect("messages");
        assert!(messages[0].details.is_empty());
        assert_eq!(messages[1].details, details);
        assert_eq!(messages[1].content.as_deref(), Some("long text"));
        assert_eq!(messages[1].id, Some(ids[1]));
        let e = store
            .set_details("elsewhere", ids[1], &details)
            .expect_err("another session's message");
        assert!(e.to_string().contains("has no message"), "{e}");
    }

    #[test]
    fn a_database_of_a_newer_toolhost_is_refused_untouched() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("sessions.sqlite3");
        {
            let conn = Connection::open(&path).expect("open");
            conn.execute_batch("CREATE TABLE future (x); PRAGMA user_version = 99;")
                .expect("future");
        }
        let err = SessionStore::open(&path).err().expect("refused");
        assert!(
            matches!(err, SessionError::NewerSchema { found: 99, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("newer toolhost"), "{err}");
        let conn = Connection::open(&path).expect("open");
        let tables: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE name = 'sessions'",
                [],
                |r| r.get(0),
            )
            .expect("count");
        assert_eq!(tables, 0, "nothing was added");
    }

    #[test]
    fn repair_answers_interrupted_calls_and_drops_orphan_results() {
        let call = |id: &str| ModelToolCall {
            id: id.to_owned(),
            name: "t".to_owned(),
            arguments: "{}".to_owned(),
        };
        let asked = Message {
            role: Role::Assistant,
            content: None,
            tool_calls: vec![call("a"), call("b")],
            tool_call_id: None,
            details: toolhost_calls::details::Details::new(),
            id: None,
        };
        let history = vec![
            Message::text(Role::User, "go"),
            asked,
            Message::tool_result("a", "done"),
            Message::tool_result("zzz", "orphan"),
            Message::text(Role::User, "again"),
        ];
        let repaired = repair(history);
        let ids: Vec<Option<&str>> = repaired.iter().map(|m| m.tool_call_id.as_deref()).collect();
        assert_eq!(ids, [None, None, Some("a"), Some("b"), None]);
        assert!(
            repaired[3]
                .content
                .as_deref()
                .is_some_and(|c| c.starts_with("interrupted"))
        );
    }
}
