//! The control socket: a Unix domain socket (mode 0600) speaking JSON lines, one request
//! and one response per line. `toolhost reload`, `status` and `call --control` are its
//! clients. A malformed or unknown request gets an error response and the connection
//! stays usable.
//!
//! Both ends check the other: the server answers only processes running as its own
//! effective uid or root (SO_PEERCRED, beyond the file mode, which a careless `chmod` or a
//! socket in a shared folder could widen); the client sends nothing to a socket file owned
//! by anyone but itself or root, nor to a server process running as anyone else. The
//! checks are by uid only: another process of the same user is trusted, as it can read the
//! user's files anyway.
//!
//! The messages are JSON-RPC 2.0 shaped and typed: [`ControlRequest`] (by method),
//! answered by a [`ControlResponse`] carrying a result or a [`ControlFault`] with a numeric
//! code. Request: `{"jsonrpc": "2.0", "id": 1, "method": "status", "params": {}}` (`jsonrpc`
//! and `id` are optional; `id` is echoed). Response: `{"jsonrpc": "2.0", "id": 1, "result":
//! ...}` or `{"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "..."}}`.
//! While a `call` whose params say `ask` waits for approval, the host sends the client an
//! [`ApprovalQuestion`] line and reads its [`ApprovalReply`] before the response.

mod client;
mod host_handler;
mod protocol;
mod server;

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use toolhost_calls::context::Caller;

pub use client::{ApprovalPrompt, ControlClient, trust_service_user};
pub use protocol::*;
pub use server::ControlSocket;

/// The control socket's default path: `$XDG_RUNTIME_DIR/toolhost/control.sock`, else
/// `$TMPDIR/toolhost-$UID/control.sock`.
pub fn default_control_path() -> PathBuf {
    if let Some(dir) = crate::sys::dirs::runtime_dir() {
        return dir.join("control.sock");
    }
    #[cfg(unix)]
    let user = toolhost_calls::private::effective_uid().to_string();
    #[cfg(not(unix))]
    let user = "user".to_owned();
    std::env::temp_dir()
        .join(format!("toolhost-{user}"))
        .join("control.sock")
}

/// What answers control requests (the [`Host`](crate::Host) does).
pub trait ControlHandler: Send + Sync + 'static {
    /// Answers one request of `peer` (the connection's process: the control frontend and
    /// its uid): the result, or why there is none.
    fn handle(
        &self,
        request: ControlRequest,
        peer: &ControlPeer,
    ) -> impl Future<Output = Result<ControlResult, ControlFault>> + Send;

    /// Where the socket keeps its count of open (admitted) connections, if the handler
    /// wants it (the host shows it in its metrics).
    fn open_connections(&self) -> Option<Arc<std::sync::atomic::AtomicUsize>> {
        None
    }
}

/// The process at the other end of a control connection (already admitted: its uid is
/// the host's or root), and the way to ask it an approval question while one of its
/// requests waits.
#[derive(Clone)]
pub struct ControlPeer {
    /// Who it is: the control frontend and its uid.
    pub caller: Caller,
    /// What it is, as the host found it (its terminal only when it has one).
    pub who: String,
    questions: std::sync::Arc<server::Questions>,
}

impl ControlPeer {
    /// Asks the client to approve a call (only for a call whose params said `ask`): its
    /// answer, or why there is none (the connection failed, or it sent something else).
    pub async fn ask(&self, question: ApprovalQuestion) -> Result<ApprovalReply, ControlError> {
        self.questions.ask(question).await
    }
}

/// Why the control socket could not be set up or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// Another host answers on the socket.
    #[error(
        "another toolhost is already listening on {}; stop it, or pass another --control path",
        path.display()
    )]
    InUse {
        /// The socket path.
        path: PathBuf,
    },
    /// Creating, binding or securing the socket failed.
    #[error(
        "could not {action} the control socket {}: {source}; check the directory's \
         permissions, and keep the path under 107 bytes (pass a shorter --control path)",
        path.display()
    )]
    Io {
        /// What was being done.
        action: &'static str,
        /// The socket path.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// No host listens on the socket.
    #[error(
        "no toolhost is listening on {} ({source}); start one with `toolhost serve`, or pass \
         the --control path it uses",
        path.display()
    )]
    NotRunning {
        /// The socket path.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The socket (or its directory) is closed to this user: it belongs to another user's
    /// host, or its mode was narrowed on purpose.
    #[error(
        "permission denied on the control socket {} ({source}): it belongs to another \
         user's toolhost or its directory is closed to you; run the command as the host's \
         user, or pass the --control path of your own host",
        path.display()
    )]
    PermissionDenied {
        /// The socket path.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The file at the path is owned by someone else: whatever listens there is not this
    /// user's host, so nothing is sent to it.
    #[error(
        "a socket owned by {} is at {}: it is not your toolhost; remove it or pass --control \
         with the path of your own host",
        describe_owner(*.owner),
        path.display()
    )]
    NotYours {
        /// The socket path.
        path: PathBuf,
        /// The uid owning the socket file.
        owner: u32,
    },
    /// The process serving the socket runs as someone else.
    #[error(
        "the process answering on {} runs as {}{}, not as you or root: it is not your \
         toolhost; stop it, or pass --control with the path of your own host",
        path.display(),
        describe_owner(*.uid),
        pid.map(|p| format!(", pid {p}")).unwrap_or_default()
    )]
    WrongPeer {
        /// The socket path.
        path: PathBuf,
        /// The server process's uid.
        uid: u32,
        /// The server process's pid, when the kernel says.
        pid: Option<i32>,
    },
    /// Something that is not a socket is at the path.
    #[error(
        "{} is not a socket, so no toolhost listens there; remove it or pass another --control path",
        path.display()
    )]
    NotASocket {
        /// The path.
        path: PathBuf,
    },
    /// The host answered with an error (its code says which kind).
    #[error("the host refused the request: {0}")]
    Refused(ControlFault),
    /// The request could not be encoded.
    #[error("the request could not be encoded: {0}")]
    BadRequest(String),
    /// The host's answer was not a valid response.
    #[error("the host sent an invalid response: {0}")]
    BadResponse(String),
    /// The host did not answer in time.
    #[error(
        "the host on {} did not answer within {} s; check `toolhost status` or its log",
        path.display(),
        waited.as_secs()
    )]
    Timeout {
        /// The socket path.
        path: PathBuf,
        /// How long the client waited.
        waited: Duration,
    },
}

#[cfg(unix)]
fn describe_owner(uid: u32) -> String {
    describe_uid(uid)
}

#[cfg(not(unix))]
fn describe_owner(uid: u32) -> String {
    format!("uid {uid}")
}

#[cfg(unix)]
fn is_socket(meta: &std::fs::Metadata) -> bool {
    std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type())
}

#[cfg(not(unix))]
fn is_socket(_meta: &std::fs::Metadata) -> bool {
    true
}

/// The default socket's directory may sit in a shared place (`$TMPDIR`): it must be a real
/// directory of ours that nobody else can write to.
#[cfg(unix)]
fn check_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(dir)?;
    let me = toolhost_calls::private::effective_uid();
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o077 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} must be a directory owned by this user with mode 0700 (it is not: someone \
                 else may have made it); remove it, or pass --control with a path in a private \
                 directory",
                dir.display()
            ),
        ));
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

/// An error line in the shape before codes (`{"id": null, "error": {"message": ...}}`):
/// what a refused connection gets, exactly as documented.
fn legacy_error_line(message: &str) -> String {
    #[derive(Serialize)]
    struct Refusal<'a> {
        id: Value,
        error: Message<'a>,
    }
    #[derive(Serialize)]
    struct Message<'a> {
        message: &'a str,
    }
    serde_json::to_string(&Refusal {
        id: Value::Null,
        error: Message { message },
    })
    .unwrap_or_else(|_| "{\"id\":null,\"error\":{\"message\":\"refused\"}}".to_owned())
}

/// Whether a process or file of `uid` may be trusted on the control socket: ours or root's.
#[cfg(unix)]
fn trusted_uid(uid: u32) -> bool {
    uid == toolhost_calls::private::effective_uid() || uid == 0
}

/// `uid N (name)`, or `uid N` for a user without a name.
#[cfg(unix)]
fn describe_uid(uid: u32) -> String {
    match crate::sys::permissions::user_name(uid) {
        Some(name) => format!("uid {uid} ({name})"),
        None => format!("uid {uid}"),
    }
}
