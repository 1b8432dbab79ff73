//! The control socket's server side: binds the 0600 socket in a private folder, admits
//! only its own uid and root (SO_PEERCRED) and never a process a toolhost started or
//! confined, and answers request lines through a
//! [`ControlHandler`](super::ControlHandler).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;

use toolhost_calls::context::{Caller, Frontend};

use super::default_control_path;
use super::protocol::{APPROVE_METHOD, AnswerLine, JSONRPC, QuestionLine, decode};
use super::{
    ApprovalQuestion, ApprovalReply, ControlError, ControlFault, ControlHandler, ControlOutcome,
    ControlPeer, ControlResponse, check_private_dir, describe_uid, is_socket, legacy_error_line,
    trusted_uid,
};

/// The longest request line accepted.
const MAX_REQUEST: u64 = 4 * 1024 * 1024;

/// A bound control socket; the file is removed when this is dropped.
pub struct ControlSocket {
    listener: UnixListener,
    path: PathBuf,
}

impl ControlSocket {
    /// Binds `path` (creating its directory with mode 0700 if needed) and sets the
    /// socket's mode to 0600. A stale socket file (no host answering) is replaced.
    pub async fn bind(path: &Path) -> Result<ControlSocket, ControlError> {
        let io_err = |action, source| ControlError::Io {
            action,
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
            && !dir.exists()
        {
            let mut builder = std::fs::DirBuilder::new();
            builder.recursive(true);
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            builder
                .create(dir)
                .map_err(|e| io_err("create the directory of", e))?;
        }
        if let Some(dir) = path.parent()
            && path == default_control_path()
        {
            check_private_dir(dir).map_err(|e| io_err("use the directory of", e))?;
        }
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if !is_socket(&meta) {
                return Err(io_err(
                    "replace",
                    io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        "a file that is not a socket is in the way; remove it or pass another --control path",
                    ),
                ));
            }
            if UnixStream::connect(path).await.is_ok() {
                return Err(ControlError::InUse {
                    path: path.to_path_buf(),
                });
            }
            std::fs::remove_file(path).map_err(|e| io_err("remove the stale", e))?;
        }
        // Bound under a temporary name, made 0600, then renamed into place: the socket
        // never appears at `path` with the umask's mode, not even for an instant.
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let staged = path.with_file_name(format!(".{name}.{}.binding", std::process::id()));
        let _ = std::fs::remove_file(&staged);
        let listener = UnixListener::bind(&staged).map_err(|e| io_err("bind", e))?;
        let placed = {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| io_err("set the mode of", e))
                .and_then(|()| std::fs::rename(&staged, path).map_err(|e| io_err("bind", e)))
        };
        if let Err(e) = placed {
            let _ = std::fs::remove_file(&staged);
            return Err(e);
        }
        Ok(ControlSocket {
            listener,
            path: path.to_path_buf(),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Accepts connections and answers their requests until `stop` is cancelled. Open
    /// connections see `stop` too: they finish the request at hand, then close. They are
    /// returned to the caller to wait for (bounded) or drop.
    pub async fn serve<H: ControlHandler>(
        &self,
        handler: Arc<H>,
        stop: CancellationToken,
    ) -> tokio::task::JoinSet<()> {
        let mut connections = tokio::task::JoinSet::new();
        let open = handler.open_connections();
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, _)) => match admit(&stream) {
                        Ok(peer) => {
                            let counted = open.clone().map(OpenConnection::new);
                            let served = serve_connection(
                                stream,
                                peer,
                                Arc::clone(&handler),
                                stop.clone(),
                            );
                            connections.spawn(async move {
                                served.await;
                                drop(counted);
                            });
                        }
                        Err(refusal) => {
                            connections.spawn(refuse(stream, refusal));
                        }
                    },
                    Err(e) => {
                        // E.g. out of file descriptors: don't spin; try again shortly.
                        tracing::warn!("accepting a control connection failed: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        connections
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Why a connection to the control socket is refused; its text is the client's answer.
#[derive(Debug, thiserror::Error)]
enum Refusal {
    /// The peer is a process this host started (a command, cargo, a build script, a
    /// test binary, a worker's child).
    #[error(
        "permission denied: processes toolhost started (commands, cargo, build scripts, \
         plugin workers and what they run) may not use the control socket ({why})"
    )]
    Started {
        /// How it descends from the host.
        why: String,
    },
    /// The peer is one of this host's plugin workers, or a process one started.
    #[error(
        "permission denied: plugin workers and the processes they start may not use the \
         control socket ({why})"
    )]
    Worker {
        /// How it descends from a worker.
        why: String,
    },
    /// The peer is confined by a sandbox: another toolhost's command, MCP server or
    /// worker (or a sandbox of someone else's), which no toolhost takes for its user.
    #[error(
        "permission denied: processes a toolhost confined (any toolhost's commands, MCP \
         servers and plugin workers) may not use the control socket ({why}); run toolhost's \
         commands from a terminal outside every sandbox"
    )]
    Confined {
        /// What marks it as confined.
        why: String,
    },
    /// The peer's credentials could not be read.
    #[error(
        "permission denied: this toolhost serves only uid {me} and root, and could not tell \
         who you are ({source})"
    )]
    UnknownPeer {
        /// This host's effective uid.
        me: u32,
        /// Why SO_PEERCRED failed.
        source: io::Error,
    },
    /// The peer runs as another user.
    #[error("permission denied: this toolhost serves only uid {me} and root")]
    OtherUser {
        /// This host's effective uid.
        me: u32,
    },
}

/// Whether the peer of a new connection may use the socket: a process running as this
/// host's effective uid or root, no process this host started (a worker, a command,
/// cargo, a build script, what they start: all run as the host's uid, and none may drive
/// the host), and no process any toolhost confined (by its mark and its seccomp filters,
/// which survive exec and no parentage decides).
/// Otherwise the reason, for the client and the log.
#[cfg(unix)]
fn admit(stream: &UnixStream) -> Result<(Caller, String), Refusal> {
    let me = toolhost_calls::private::effective_uid();
    match stream.peer_cred() {
        Ok(cred) => {
            if let Some(refusal) = cred.pid().and_then(refused_process) {
                tracing::warn!(pid = cred.pid(), "refused a control connection: {refusal}");
                return Err(refusal);
            }
            if trusted_uid(cred.uid()) {
                let caller = Caller {
                    uid: Some(cred.uid()),
                    ..Caller::new(Frontend::Control)
                };
                return Ok((caller, describe_peer(cred.uid(), cred.pid())));
            }
            untrusted(me, &cred)
        }
        Err(e) => {
            tracing::warn!("refused a control connection whose peer is unknown: {e}");
            Err(Refusal::UnknownPeer { me, source: e })
        }
    }
}

/// The refusal of process `pid` as one toolhost started or confined, whatever its uid,
/// or `None`. In order: one of this host's workers or what it started (the most precise
/// words), any other process this host started (by ancestry), and any process any
/// toolhost confined (not this host's descendant, and still never the user).
#[cfg(unix)]
fn refused_process(pid: i32) -> Option<Refusal> {
    let unsigned = u32::try_from(pid).ok();
    if let Some(why) = unsigned.and_then(crate::sys::workers::worker_origin) {
        return Some(Refusal::Worker { why });
    }
    if let Some(why) = started_by_host(pid) {
        return Some(Refusal::Started { why });
    }
    unsigned
        .and_then(crate::sys::workers::confined_beyond_host)
        .map(|why| Refusal::Confined { why })
}

/// The refusal of a peer of another uid.
#[cfg(unix)]
fn untrusted(me: u32, cred: &tokio::net::unix::UCred) -> Result<(Caller, String), Refusal> {
    tracing::warn!(
        uid = cred.uid(),
        pid = cred.pid(),
        "refused a control connection from {} (pid {}): this host serves only uid {me} and \
         root",
        describe_uid(cred.uid()),
        cred.pid()
            .map_or_else(|| "unknown".to_owned(), |p| p.to_string())
    );
    Err(Refusal::OtherUser { me })
}

#[cfg(not(unix))]
fn admit(_stream: &UnixStream) -> Result<(Caller, String), Refusal> {
    Ok((Caller::new(Frontend::Control), "control client".to_owned()))
}

/// Why the process `pid` counts as one this host started, or `None`. The mark is the
/// process tree: the host is the child subreaper of everything it starts (so a double
/// fork reparents to the host, never to init), no process can choose its parent, and
/// `setsid` or `env -i` change neither, so every process a command, cargo, a build script
/// or a worker started stays a descendant of the host for as long as the host runs. A
/// pid that is gone by now is refused too (nothing can be asked of it).
#[cfg(unix)]
fn started_by_host(pid: i32) -> Option<String> {
    let me = i32::try_from(std::process::id()).ok()?;
    if pid == me {
        // The host's own process: a program embedding the library, or a plugin loaded in
        // process, which is the host's own native code and could read what the socket
        // guards straight from memory; refusing it would guard nothing. Plugins that are
        // not trusted that far run in a worker (`--isolate`), a child refused below.
        return None;
    }
    match crate::sys::sandbox::process_tree::descends_from(pid, me) {
        Some(true) => Some(format!("process {pid} descends from toolhost (pid {me})")),
        Some(false) => None,
        None => Some(format!("process {pid} exited before it could be checked")),
    }
}

/// What a control client is, for the audit log and lasting approvals: its uid, its pid,
/// and its terminal only when it has one (a program with no controlling terminal is not
/// "a terminal", whatever it says).
#[cfg(unix)]
fn describe_peer(uid: u32, pid: Option<i32>) -> String {
    let pid_text = pid.map_or_else(|| "pid unknown".to_owned(), |p| format!("pid {p}"));
    match pid.and_then(crate::sys::sandbox::process_tree::controlling_terminal) {
        Some(tty) => format!("control client at terminal {tty} (uid {uid}, {pid_text})"),
        None => format!("control client without a terminal (uid {uid}, {pid_text})"),
    }
}

/// How long a refused client gets to read its answer before the connection is closed.
const REFUSAL_LINGER: Duration = Duration::from_secs(2);

/// Answers a refused connection with one error line, then closes it. What the client sent
/// meanwhile is read and dropped unparsed (a little of it, for a short while), so its
/// request does not fail with a broken pipe before it reads why.
async fn refuse(stream: UnixStream, reason: Refusal) {
    let (mut read, mut write) = stream.into_split();
    let mut line = legacy_error_line(&reason.to_string());
    line.push('\n');
    let answered = tokio::time::timeout(REFUSAL_LINGER, async {
        write.write_all(line.as_bytes()).await?;
        write.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut drained = 0usize;
        while drained < 64 * 1024 {
            match read.read(&mut sink).await? {
                0 => break,
                n => drained += n,
            }
        }
        Ok::<(), io::Error>(())
    })
    .await;
    if let Ok(Err(e)) = answered {
        tracing::debug!("a refused control connection closed: {e}");
    }
}

/// One admitted connection in the handler's count, for as long as it is held.
struct OpenConnection(Arc<std::sync::atomic::AtomicUsize>);

impl OpenConnection {
    fn new(count: Arc<std::sync::atomic::AtomicUsize>) -> OpenConnection {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        OpenConnection(count)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// One connection's two halves, shared by its request loop and the approval questions a
/// request in progress asks (the loop reads nothing while a request is answered).
pub(super) struct Questions {
    reader: tokio::sync::Mutex<BufReader<tokio::net::unix::OwnedReadHalf>>,
    writer: tokio::sync::Mutex<tokio::net::unix::OwnedWriteHalf>,
    next: std::sync::atomic::AtomicU64,
}

impl Questions {
    /// Sends `question` and reads the client's answer line.
    pub(super) async fn ask(
        &self,
        question: ApprovalQuestion,
    ) -> Result<ApprovalReply, ControlError> {
        let n = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = format!("approval-{n}");
        let line = QuestionLine {
            jsonrpc: JSONRPC.to_owned(),
            id: id.clone(),
            method: APPROVE_METHOD.to_owned(),
            params: question,
        };
        let mut text =
            serde_json::to_string(&line).map_err(|e| ControlError::BadRequest(e.to_string()))?;
        text.push('\n');
        let lost = |e: io::Error| {
            ControlError::BadResponse(format!("the client's connection failed: {e}"))
        };
        self.writer
            .lock()
            .await
            .write_all(text.as_bytes())
            .await
            .map_err(lost)?;
        let mut answer = Vec::new();
        let mut reader = self.reader.lock().await;
        let mut limited = (&mut *reader).take(MAX_REQUEST + 1);
        if limited.read_until(b'\n', &mut answer).await.map_err(lost)? == 0 {
            return Err(ControlError::BadResponse(
                "the client closed the connection instead of answering".to_owned(),
            ));
        }
        let answer: AnswerLine = serde_json::from_slice(&answer).map_err(|e| {
            ControlError::BadResponse(format!(
                "the client's answer is not an approval answer: {e}"
            ))
        })?;
        if answer.id != id {
            return Err(ControlError::BadResponse(format!(
                "the client answered question '{}' when asked '{id}'",
                answer.id
            )));
        }
        Ok(answer.result)
    }
}

async fn serve_connection<H: ControlHandler>(
    stream: UnixStream,
    (caller, who): (Caller, String),
    handler: Arc<H>,
    stop: CancellationToken,
) {
    let (read, write) = stream.into_split();
    let questions = Arc::new(Questions {
        reader: tokio::sync::Mutex::new(BufReader::new(read)),
        writer: tokio::sync::Mutex::new(write),
        next: std::sync::atomic::AtomicU64::new(1),
    });
    let peer = ControlPeer {
        caller,
        who,
        questions: Arc::clone(&questions),
    };
    loop {
        let mut line = Vec::new();
        let read = {
            let mut reader = questions.reader.lock().await;
            let mut limited = (&mut *reader).take(MAX_REQUEST + 1);
            tokio::select! {
                () = stop.cancelled() => return,
                read = limited.read_until(b'\n', &mut line) => read,
            }
        };
        match read {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) => {
                tracing::debug!("control connection closed: {e}");
                return;
            }
        }
        let too_long = line.len() as u64 > MAX_REQUEST;
        let response = if too_long {
            ControlResponse::new(
                Value::Null,
                ControlOutcome::Error(ControlFault::new(
                    ControlFault::INVALID_REQUEST,
                    format!("request longer than {MAX_REQUEST} bytes"),
                )),
            )
        } else {
            answer(&*handler, &peer, &line).await
        };
        let mut text = response.to_line();
        text.push('\n');
        let written = questions
            .writer
            .lock()
            .await
            .write_all(text.as_bytes())
            .await;
        if written.is_err() || too_long {
            return;
        }
    }
}

async fn answer<H: ControlHandler>(
    handler: &H,
    peer: &ControlPeer,
    line: &[u8],
) -> ControlResponse {
    let (id, request) = match decode(line) {
        Ok(decoded) => decoded,
        Err((id, fault)) => return ControlResponse::new(id, ControlOutcome::Error(fault)),
    };
    let outcome = match handler.handle(request, peer).await {
        Ok(result) => match serde_json::to_value(result) {
            Ok(value) => ControlOutcome::Result(value),
            Err(e) => ControlOutcome::Error(ControlFault::new(
                ControlFault::INTERNAL_ERROR,
                format!("the host could not encode its answer: {e}"),
            )),
        },
        Err(fault) => ControlOutcome::Error(fault),
    };
    ControlResponse::new(id, outcome)
}
