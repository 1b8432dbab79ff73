//! The errors of the host's side of plugin workers: a worker that could not be started
//! ([`WorkerStartError`]), a plugin with no worker to take a call ([`WorkerUnavailable`]),
//! a message that could not be sent to a worker ([`SendError`]) and a call whose worker
//! ended before it answered ([`WorkerStopped`]). Their texts end up in load errors and
//! in failed calls' results, so each says what happened and, where someone can act, what
//! to do.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use super::lifecycle::AfterCrash;
use super::protocol::{FrameError, PROTOCOL_VERSION};
use crate::sys::containment::ContainmentError;

/// Why a worker process could not be started, or started and did not serve its plugin.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WorkerStartError {
    /// The socketpair between host and worker could not be made (descriptors exhausted).
    #[error("could not create a socketpair: {0}")]
    Socketpair(#[source] io::Error),
    /// The containment the operator asked for cannot be made here (the error says what
    /// to change).
    #[error(transparent)]
    Containment(#[from] ContainmentError),
    /// The worker program could not be run.
    #[error("could not start a worker ({}): {source}", exe.display())]
    Exec {
        /// The worker program (`[isolation] worker_exe`, normally toolhost itself).
        exe: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The host's end of the socket could not be set up.
    #[error("could not set up the socket: {0}")]
    Socket(#[source] io::Error),
    /// The first message (what to load, how to confine itself) could not be sent.
    #[error("could not send the worker its orders: {0}")]
    Orders(#[source] FrameError),
    /// The worker could not load the plugin: the loader's own message (which says what
    /// to do about the file).
    #[error("{0}")]
    LoadFailed(String),
    /// The worker sent something else than its hello first.
    #[error("the worker said {0} before hello")]
    BeforeHello(String),
    /// The worker ended while it loaded the plugin: the plugin's load-time code crashes.
    #[error(
        "the plugin's worker {status} while loading it{}: the plugin crashes when it is \
         loaded; fix the plugin",
        last_words.as_ref().map(|w| format!(" (its last words: {w})")).unwrap_or_default()
    )]
    CrashedLoading {
        /// How it ended ("was killed by signal 11 (SIGSEGV, a crash)").
        status: String,
        /// The last line it wrote on stderr.
        last_words: Option<String>,
    },
    /// No hello within `[isolation] start_timeout_secs`; the worker was killed.
    #[error(
        "the worker did not load the plugin within {} s ({source}); it was killed",
        timeout_secs
    )]
    NoHello {
        /// The time allowed.
        timeout_secs: u64,
        /// What the read said.
        source: FrameError,
    },
    /// The worker program is another toolhost version than the host.
    #[error("the worker speaks protocol {worker}, this host {PROTOCOL_VERSION}")]
    Protocol {
        /// The worker's protocol version.
        worker: u32,
    },
    /// The thread that reads the worker's messages could not be started.
    #[error("could not start a thread for the worker: {0}")]
    ReaderThread(#[source] io::Error),
    /// Started once more with the environment its tools need, the plugin exported other
    /// tools than at its first start.
    #[error("the plugin exported different tools when started again")]
    ToolsChangedOnSecondStart,
    /// A restarted worker's plugin exported other tools than when it was loaded.
    #[error("the plugin exported different tools than when it was loaded")]
    ToolsChangedSinceLoad,
    /// The task that started the worker ended without an answer.
    #[error("starting the worker failed: {0}")]
    Interrupted(#[source] tokio::task::JoinError),
}

/// Why a plugin has no worker to take a call.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WorkerUnavailable {
    /// Its workers crashed too often: refused until the file changes or a reload.
    #[error(
        "plugin '{plugin}' is quarantined: {why}. Fix the plugin and replace its file, or \
         run `toolhost reload` to let it start again"
    )]
    Quarantined {
        /// The plugin.
        plugin: Arc<str>,
        /// How often its worker failed, and the last failure.
        why: String,
    },
    /// A fresh worker could not be started; this counts as a crash.
    #[error("plugin '{plugin}': its worker could not be started again: {source}{next}")]
    NotStarted {
        /// The plugin.
        plugin: Arc<str>,
        /// Why.
        source: WorkerStartError,
        /// What happens next (backoff or quarantine).
        next: AfterCrash,
    },
}

/// A message the host could not send to a worker.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    /// It cannot be encoded (too large for the protocol): refused; the worker is fine.
    #[error(transparent)]
    Refused(FrameError),
    /// The write failed: the worker no longer reads, and is being killed.
    #[error("stopped reading its messages ({0})")]
    Stopped(FrameError),
}

/// A call's worker ended before it answered.
#[derive(Debug, thiserror::Error)]
#[error("plugin '{plugin}' stopped during the call to '{tool}': {what}")]
pub(crate) struct WorkerStopped {
    /// The plugin.
    pub(super) plugin: Arc<str>,
    /// The tool called.
    pub(super) tool: Arc<str>,
    /// How the worker ended and what happens next.
    pub(super) what: String,
}
