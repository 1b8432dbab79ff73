//! The audit log: one JSON line per call (who, as which profile, which tool of which
//! plugin file, how it was decided, how it ended), each numbered (`seq`) and carrying the
//! sha256 of the line before it (`prev`), and beside it a head file (`FILE.head`: the last
//! line's `seq` and sha256, and what rotation dropped), so `toolhost audit verify` names a
//! line edited or removed anywhere, lines cut from either end, a rotated file removed,
//! and an edited last line.
//!
//! [`AuditLog`] is a [`CallObserver`] on the door: it sees every call of every frontend
//! after its output budget, builds the record on the call path (clones of what the call
//! already has) and hands it to a writer thread through a bounded queue; when the queue
//! is full the call waits for room, so records are never dropped. Hashing the arguments,
//! numbering, encoding, writing and the head happen on the writer thread (`writer.rs`,
//! `head.rs`); reading and checking in `read.rs`; the copy sent to syslog in `syslog.rs`.
//!
//! What the files cannot show: whoever can write them (the host's user, or root) can
//! rewrite the log and its head together, consistently, and `verify` then finds nothing.
//! Against that holds only a copy the host cannot rewrite later: `[audit] syslog = true`
//! sends a checkpoint of each batch of lines to syslog (the journal, ideally sealed or
//! shipped off the machine), and `verify --expect SEQ:SHA256` checks the log against it.

mod head;
mod read;
mod record;
mod shared;
mod syslog;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::mpsc::error::TrySendError;

use toolhost_calls::context::CallContext;
use toolhost_calls::details::{FullOutput, HostDetail as _};
use toolhost_calls::dispatcher::{CallObserver, ObservedCall, ObserverWait};
use toolhost_calls::result::ToolResult;
use toolhost_calls::tool::DynTool;
use writer::{Msg, Pending, Sink};

/// How much lower than the host's other threads the writer thread runs (a nice value).
const WRITER_NICE: i32 = 5;

pub use head::{HEAD_VERSION, Head, head_path};
pub use read::{
    BadCheckpoint, Problem, ProblemKind, VerifyReport, log_files, read_records, verify,
};
pub use record::{
    AuditCaller, AuditClient, AuditPlugin, AuditRecord, ChainPoint, GENESIS, HeadMismatch,
    canonical_json,
};
pub use shared::{ReplicaChain, SharedAuditReport, read_shared, verify_shared};

/// The audit log's settings (`[audit]` in the config).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditSettings {
    /// The log file.
    pub file: PathBuf,
    /// Whether lines carry the arguments (else only their sha256).
    pub include_arguments: bool,
    /// Rotate when the file would grow past this many bytes (0: never).
    pub max_bytes: u64,
    /// Rotated files kept (`FILE.1` the newest).
    pub keep: usize,
    /// Lines waiting for the writer at most; past it calls wait.
    pub queue: usize,
    /// The syslog socket each batch's checkpoint is sent to (`None`: none sent).
    pub syslog: Option<PathBuf>,
}

impl Default for AuditSettings {
    fn default() -> Self {
        AuditSettings {
            file: AuditSettings::default_file().unwrap_or_else(|| PathBuf::from("audit.jsonl")),
            include_arguments: false,
            max_bytes: 64 * 1024 * 1024,
            keep: 5,
            queue: 1024,
            syslog: None,
        }
    }
}

impl AuditSettings {
    /// Every file the log may occupy: the log, its head and each rotated file it keeps.
    pub fn files(&self) -> Vec<PathBuf> {
        [self.file.clone(), head_path(&self.file)]
            .into_iter()
            .chain((1..=self.keep).map(|n| writer::rotated(&self.file, n)))
            .collect()
    }

    /// The syslog socket checkpoints go to when none is named: `/dev/log`.
    pub const DEFAULT_SYSLOG_SOCKET: &'static str = "/dev/log";

    /// `audit.jsonl` in the state directory (`$XDG_STATE_HOME/toolhost`), if there is one.
    pub fn default_file() -> Option<PathBuf> {
        crate::sys::dirs::state_dir().map(|d| d.join("audit.jsonl"))
    }
}

/// Why the audit log could not be opened, written or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuditError {
    /// The file or its folder could not be used (a link or FIFO in its place is
    /// refused).
    #[error("could not {action} the audit log {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line read back is no audit record ([`read_records`]; [`verify`] names every
    /// problem in its report instead).
    #[error("{}, line {line}: {reason}", file.display())]
    Broken {
        /// The file holding the bad line.
        file: PathBuf,
        /// Its line number (from 1).
        line: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// The writer is gone (it panicked) or did not answer in time.
    #[error("the audit log's writer of {} {what}", path.display())]
    Writer {
        /// The file.
        path: PathBuf,
        /// What happened.
        what: &'static str,
    },
}

/// The audit log as an observer of the door. Dropping it writes what is queued, fsyncs
/// and ends the writer (waiting at most 10 s).
pub struct AuditLog {
    sender: Option<tokio::sync::mpsc::Sender<Msg>>,
    include_arguments: bool,
    path: PathBuf,
    done: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
    /// In the shared state: whether its database took the last lines.
    shared: Option<Arc<shared::Reachable>>,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl AuditLog {
    /// Opens (creating) the log of `settings` and starts its writer.
    pub fn open(settings: &AuditSettings) -> Result<Arc<AuditLog>, AuditError> {
        let path = settings.file.clone();
        let sink = Sink::new(
            path.clone(),
            settings.max_bytes,
            settings.keep,
            settings.syslog.clone(),
        )
        .map_err(|source| AuditError::Io {
            action: "open",
            path: path.clone(),
            source,
        })?;
        let (sender, rx) = tokio::sync::mpsc::channel(settings.queue.max(1));
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("toolhost-audit".to_owned())
            .spawn(move || {
                // Below the threads that serve calls: a batch of lines is hashed and
                // written in one go, and on a shared or single CPU it should wait for a
                // call that arrives meanwhile rather than delay it (the queue still
                // makes calls wait if the writer falls behind).
                if let Err(e) = crate::sys::process::lower_thread_priority(WRITER_NICE) {
                    tracing::debug!("could not lower the audit writer's priority: {e}");
                }
                writer::run(rx, sink);
                let _ = done_tx.send(());
            })
            .map_err(|source| AuditError::Io {
                action: "start the writer of",
                path: path.clone(),
                source,
            })?;
        Ok(Arc::new(AuditLog {
            sender: Some(sender),
            include_arguments: settings.include_arguments,
            path,
            done: Mutex::new(Some(done_rx)),
            shared: None,
        }))
    }

    /// The log in the shared state of many replicas (`[state] backend = "postgres"`):
    /// this replica's chain there. A call waits until its line is committed (see
    /// `shared.rs` for while the database is away). `settings.file` is not used.
    pub fn open_shared(
        settings: &AuditSettings,
        state: &Arc<crate::state::SharedState>,
    ) -> Arc<AuditLog> {
        let (sender, rx) = tokio::sync::mpsc::channel(settings.queue.max(1));
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let reachable = shared::Reachable::new();
        state.spawn(shared::run(
            rx,
            Arc::clone(state),
            Arc::clone(&reachable),
            done_tx,
        ));
        Arc::new(AuditLog {
            sender: Some(sender),
            include_arguments: settings.include_arguments,
            path: PathBuf::from(format!(
                "{} (replica {})",
                state.settings().redacted_url(),
                state.replica()
            )),
            done: Mutex::new(Some(done_rx)),
            shared: Some(reachable),
        })
    }

    /// The log file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn pending(
        &self,
        ctx: &CallContext,
        result: &ToolResult,
        tool: Option<&dyn DynTool>,
        arguments: Option<&serde_json::Value>,
    ) -> Box<Pending> {
        let caller = &ctx.caller;
        let outcome = match (result.error, result.is_error) {
            (Some(kind), _) => serde_json::to_value(kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_else(|| "failed".to_owned()),
            (None, true) => "failed".to_owned(),
            (None, false) => "ok".to_owned(),
        };
        let record = AuditRecord {
            seq: 0,
            time: jiff::Timestamp::now().to_string(),
            profile: ctx.turn.profile_id.clone(),
            frontend: caller.frontend.to_string(),
            caller: AuditCaller {
                uid: caller.uid,
                token: caller.token.clone(),
                client: caller.client.as_ref().map(|(name, version)| AuditClient {
                    name: name.clone(),
                    version: version.clone(),
                }),
                session: ctx.turn.session_id.clone(),
                model: ctx.turn.model.clone(),
            },
            traceparent: caller.traceparent.clone(),
            tool: result.name.clone(),
            plugin: tool.map(|t| AuditPlugin {
                name: t.origin().plugin_name().to_owned(),
                version: t.origin().plugin_version().to_owned(),
                sha256: t.origin().sha256().to_owned(),
                mcp_server: t.origin().mcp_server().map(str::to_owned),
            }),
            risk: tool.map(|t| t.spec().risk),
            decision: result.decision.clone(),
            outcome,
            duration_ms: result.elapsed.as_secs_f64() * 1e3,
            output_bytes: result.output.len() as u64,
            output_id: FullOutput::read(&result.details).map(|full| full.id),
            arguments_sha256: String::new(),
            arguments: None,
            mismatch: None,
            prev: String::new(),
        };
        Box::new(Pending {
            record,
            arguments: arguments.cloned(),
            include_arguments: self.include_arguments,
            committed: None,
        })
    }

    /// Queues `pending`; a wait for room when the queue is full, and in the shared log
    /// (while its database is reachable) for the line to be committed.
    fn send(&self, mut pending: Box<Pending>) -> Option<ObserverWait> {
        let sender = self.sender.as_ref()?;
        let committed = match &self.shared {
            Some(reachable) if reachable.now() => {
                let (tx, rx) = tokio::sync::oneshot::channel();
                pending.committed = Some(tx);
                Some(rx)
            }
            _ => None,
        };
        if let Some(committed) = committed {
            let sender = sender.clone();
            let path = self.path.clone();
            return Some(Box::pin(async move {
                if sender.send(Msg::Record(pending)).await.is_err() {
                    writer_gone(&path);
                    return;
                }
                let _ = committed.await;
            }));
        }
        match sender.try_send(Msg::Record(pending)) {
            Ok(()) => None,
            Err(TrySendError::Full(msg)) => {
                let sender = sender.clone();
                let path = self.path.clone();
                Some(Box::pin(async move {
                    if sender.send(msg).await.is_err() {
                        writer_gone(&path);
                    }
                }))
            }
            Err(TrySendError::Closed(_)) => {
                writer_gone(&self.path);
                None
            }
        }
    }
}

fn writer_gone(path: &Path) {
    tracing::error!(file = %path.display(), "the audit log's writer has ended: a call is not recorded");
}

impl CallObserver for AuditLog {
    /// Outside a door (a bare dispatcher's observer): the record has no plugin, risk or
    /// arguments hash. When the queue is full this thread waits for room.
    fn record(&self, ctx: &CallContext, result: &ToolResult) {
        let pending = self.pending(ctx, result, None, None);
        let Some(sender) = &self.sender else {
            return;
        };
        let Err(TrySendError::Full(msg)) = sender.try_send(Msg::Record(pending)) else {
            return;
        };
        let sender = sender.clone();
        let path = self.path.clone();
        let blocking = move || {
            if sender.blocking_send(msg).is_err() {
                writer_gone(&path);
            }
        };
        match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            // Blocking this runtime's only thread could stop what the writer waits on:
            // the record goes from a thread of its own.
            Ok(tokio::runtime::RuntimeFlavor::CurrentThread) => {
                let _ = std::thread::Builder::new()
                    .name("toolhost-audit-send".to_owned())
                    .spawn(blocking);
            }
            Ok(_) => tokio::task::block_in_place(blocking),
            Err(_) => blocking(),
        }
    }

    fn observe(&self, ctx: &CallContext, call: &ObservedCall<'_>) -> Option<ObserverWait> {
        self.send(self.pending(ctx, call.result, call.tool, call.arguments))
    }

    fn wants_arguments(&self) -> bool {
        true
    }
}

impl Drop for AuditLog {
    fn drop(&mut self) {
        // The writer ends once its last sender is gone: after the queued lines and an
        // fsync.
        drop(self.sender.take());
        let done = self
            .done
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(done) = done
            && done.recv_timeout(Duration::from_secs(10)).is_err()
        {
            tracing::error!(file = %self.path.display(), "the audit log's writer did not finish within 10 s");
        }
    }
}
