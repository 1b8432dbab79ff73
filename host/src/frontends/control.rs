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

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;

use crate::calls::dispatcher::{CallErrorKind, ToolResult};
use crate::host::HostStatus;
use crate::plugins::status::RescanReport;

/// The longest request line accepted.
const MAX_REQUEST: u64 = 4 * 1024 * 1024;

/// Whether a process or file of `uid` may be trusted on the control socket: ours or root's.
#[cfg(unix)]
fn trusted_uid(uid: u32) -> bool {
    uid == crate::sys::private::effective_uid() || uid == 0
}

/// `uid N (name)`, or `uid N` for a user without a name.
#[cfg(unix)]
fn describe_uid(uid: u32) -> String {
    match crate::sys::permissions::user_name(uid) {
        Some(name) => format!("uid {uid} ({name})"),
        None => format!("uid {uid}"),
    }
}

/// The control socket's default path: `$XDG_RUNTIME_DIR/toolhost/control.sock`, else
/// `$TMPDIR/toolhost-$UID/control.sock`.
pub fn default_control_path() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("toolhost").join("control.sock");
    }
    #[cfg(unix)]
    let user = crate::sys::private::effective_uid().to_string();
    #[cfg(not(unix))]
    let user = "user".to_owned();
    std::env::temp_dir()
        .join(format!("toolhost-{user}"))
        .join("control.sock")
}

/// What a client asks the host, by method. Its JSON form is the `method` and `params` of a
/// request line.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "method", content = "params", rename_all = "snake_case")]
pub enum ControlRequest {
    /// Rescan the plugin directories now; answered with a [`RescanReport`].
    Reload,
    /// The host's state; answered with a [`HostStatus`].
    Status,
    /// Every tool with its schema and plugin file; answered with the array `toolhost list
    /// --json` prints.
    List,
    /// Run one tool call as a profile's agent; answered with a [`CallReply`] (a call that
    /// fails is still a result, with `is_error` and a code saying why).
    Call(CallParams),
}

impl ControlRequest {
    /// The methods, for messages.
    pub const METHODS: &'static str = "reload, status, list and call";

    /// The request `method` with `params` names, or why it is not one.
    pub fn from_parts(method: &str, params: Option<Value>) -> Result<ControlRequest, ControlFault> {
        match method {
            // These take no parameters; whatever is sent is ignored.
            "reload" => Ok(ControlRequest::Reload),
            "status" => Ok(ControlRequest::Status),
            "list" => Ok(ControlRequest::List),
            "call" => {
                let params = params.unwrap_or_else(|| Value::Object(serde_json::Map::new()));
                serde_json::from_value(params)
                    .map(ControlRequest::Call)
                    .map_err(|e| {
                        ControlFault::new(
                            ControlFault::INVALID_PARAMS,
                            format!(
                                "call needs params {{\"tool\": NAME, \"arguments\": {{...}}}} ({e})"
                            ),
                        )
                    })
            }
            other => Err(ControlFault::new(
                ControlFault::METHOD_NOT_FOUND,
                format!(
                    "unknown method '{other}'; the methods are {}",
                    ControlRequest::METHODS
                ),
            )),
        }
    }
}

/// The parameters of [`ControlRequest::Call`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallParams {
    /// The tool's name.
    pub tool: String,
    /// The arguments object (default: `{}`).
    #[serde(default = "empty_object")]
    pub arguments: Value,
    /// The profile whose agent makes the call (default: the host's default profile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// A limit shorter than the host's call timeout (a longer one is ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<f64>,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

/// The answer to [`ControlRequest::Call`]: the call's result as the dispatcher returned it,
/// plus a numeric `code` (0 on success, else one per [`CallErrorKind`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallReply {
    /// The id of the call.
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// The tool's output, or the error message.
    pub output: String,
    /// Whether `output` is an error.
    pub is_error: bool,
    /// What kind of error, if any.
    pub error: Option<CallErrorKind>,
    /// 0 on success, else [`call_error_code`] of `error`.
    #[serde(default)]
    pub code: i32,
    /// Seconds the call took, policy and validation included.
    pub elapsed: f64,
}

impl From<ToolResult> for CallReply {
    fn from(r: ToolResult) -> Self {
        CallReply {
            code: match r.error {
                Some(kind) => call_error_code(kind),
                // An error result without a kind does not happen; say "failed" if it does.
                None if r.is_error => call_error_code(CallErrorKind::Failed),
                None => 0,
            },
            call_id: r.call_id,
            name: r.name,
            output: r.output,
            is_error: r.is_error,
            error: r.error,
            elapsed: r.elapsed.as_secs_f64(),
        }
    }
}

/// The numeric code of a failed call's kind, in a call reply's `code` (README: "The
/// control protocol").
pub fn call_error_code(kind: CallErrorKind) -> i32 {
    match kind {
        CallErrorKind::ToolNotFound => 1,
        CallErrorKind::Denied => 2,
        CallErrorKind::NotApproved => 3,
        CallErrorKind::Unavailable => 4,
        CallErrorKind::InvalidArgs => 5,
        CallErrorKind::Failed => 6,
        CallErrorKind::Panicked => 7,
        CallErrorKind::TimedOut => 8,
        CallErrorKind::Cancelled => 9,
    }
}

/// What the host answers a request with, by method.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum ControlResult {
    /// For [`ControlRequest::Reload`].
    Reload(RescanReport),
    /// For [`ControlRequest::Status`].
    Status(Box<HostStatus>),
    /// For [`ControlRequest::List`].
    List(Vec<Value>),
    /// For [`ControlRequest::Call`].
    Call(CallReply),
}

/// A request the host could not answer: a JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct ControlFault {
    /// What went wrong, for scripts: one of the constants below (0 from hosts that sent
    /// no code).
    #[serde(default)]
    pub code: i32,
    /// What went wrong, for people.
    pub message: String,
}

impl ControlFault {
    /// The line is not JSON.
    pub const PARSE_ERROR: i32 = -32700;
    /// The line is JSON but not a request (no `method`), or too long.
    pub const INVALID_REQUEST: i32 = -32600;
    /// No such method.
    pub const METHOD_NOT_FOUND: i32 = -32601;
    /// The method's parameters are wrong (e.g. `call` without a tool name).
    pub const INVALID_PARAMS: i32 = -32602;
    /// The host failed answering (e.g. the rescan task died).
    pub const INTERNAL_ERROR: i32 = -32603;
    /// The request names a profile the host does not have.
    pub const UNKNOWN_PROFILE: i32 = -32001;

    /// A fault with `code` and `message`.
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        ControlFault {
            code,
            message: message.into(),
        }
    }
}

/// One response line: the request's id and its result or fault.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControlResponse {
    /// `"2.0"` (empty from hosts that predate it).
    #[serde(default)]
    pub jsonrpc: String,
    /// The request's id (`null` when there was none, or it could not be read).
    #[serde(default)]
    pub id: Value,
    /// The answer.
    #[serde(flatten)]
    pub outcome: ControlOutcome,
}

/// A response's `result` or `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlOutcome {
    /// What the method returned; its type follows from the method.
    Result(Value),
    /// Why there is no result.
    Error(ControlFault),
}

impl ControlResponse {
    fn new(id: Value, outcome: ControlOutcome) -> Self {
        ControlResponse {
            jsonrpc: JSONRPC.to_owned(),
            id,
            outcome,
        }
    }

    /// The response line (without its newline).
    fn to_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| {
            legacy_error_line(&format!("the host could not encode its answer: {e}"))
        })
    }
}

const JSONRPC: &str = "2.0";

/// A request line as it arrives: everything optional, so that what is missing can be
/// named.
#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    id: Value,
    #[serde(default)]
    method: Option<Value>,
    #[serde(default)]
    params: Option<Value>,
}

/// A request line as a client sends it.
#[derive(Serialize)]
struct Outgoing<'a, R: Serialize> {
    jsonrpc: &'static str,
    id: u64,
    #[serde(flatten)]
    request: &'a R,
}

/// An untyped request (any method, any params), for [`ControlClient::request`].
#[derive(Serialize)]
struct RawRequest<'a> {
    method: &'a str,
    params: Value,
}

/// What a control request asks the host to do.
pub trait ControlHandler: Send + Sync + 'static {
    /// Answers one request: the result, or why there is none.
    fn handle(
        &self,
        request: ControlRequest,
    ) -> impl Future<Output = Result<ControlResult, ControlFault>> + Send;
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
        let listener = UnixListener::bind(path).map_err(|e| io_err("bind", e))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| io_err("set the mode of", e))?;
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
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, _)) => match admit(&stream) {
                        Ok(()) => {
                            connections.spawn(serve_connection(
                                stream,
                                Arc::clone(&handler),
                                stop.clone(),
                            ));
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

/// Whether the peer of a new connection may use the socket: a process running as this
/// host's effective uid or root. Otherwise the reason, for the client and the log.
#[cfg(unix)]
fn admit(stream: &UnixStream) -> Result<(), String> {
    let me = crate::sys::private::effective_uid();
    match stream.peer_cred() {
        Ok(cred) if trusted_uid(cred.uid()) => Ok(()),
        Ok(cred) => {
            tracing::warn!(
                uid = cred.uid(),
                pid = cred.pid(),
                "refused a control connection from {} (pid {}): this host serves only uid \
                 {me} and root",
                describe_uid(cred.uid()),
                cred.pid()
                    .map_or_else(|| "unknown".to_owned(), |p| p.to_string())
            );
            Err(format!(
                "permission denied: this toolhost serves only uid {me} and root"
            ))
        }
        Err(e) => {
            tracing::warn!("refused a control connection whose peer is unknown: {e}");
            Err(format!(
                "permission denied: this toolhost serves only uid {me} and root, and could \
                 not tell who you are ({e})"
            ))
        }
    }
}

#[cfg(not(unix))]
fn admit(_stream: &UnixStream) -> Result<(), String> {
    Ok(())
}

/// How long a refused client gets to read its answer before the connection is closed.
const REFUSAL_LINGER: Duration = Duration::from_secs(2);

/// Answers a refused connection with one error line, then closes it. What the client sent
/// meanwhile is read and dropped unparsed (a little of it, for a short while), so its
/// request does not fail with a broken pipe before it reads why.
async fn refuse(stream: UnixStream, reason: String) {
    let (mut read, mut write) = stream.into_split();
    let mut line = legacy_error_line(&reason);
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

async fn serve_connection<H: ControlHandler>(
    stream: UnixStream,
    handler: Arc<H>,
    stop: CancellationToken,
) {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    loop {
        let mut line = Vec::new();
        let mut limited = (&mut reader).take(MAX_REQUEST + 1);
        let read = tokio::select! {
            () = stop.cancelled() => return,
            read = limited.read_until(b'\n', &mut line) => read,
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
            answer(&*handler, &line).await
        };
        let mut text = response.to_line();
        text.push('\n');
        if write.write_all(text.as_bytes()).await.is_err() || too_long {
            return;
        }
    }
}

async fn answer<H: ControlHandler>(handler: &H, line: &[u8]) -> ControlResponse {
    let (id, request) = match decode(line) {
        Ok(decoded) => decoded,
        Err((id, fault)) => return ControlResponse::new(id, ControlOutcome::Error(fault)),
    };
    let outcome = match handler.handle(request).await {
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

/// A request line's id and request, or the id (when readable) and why it is no request.
fn decode(line: &[u8]) -> Result<(Value, ControlRequest), (Value, ControlFault)> {
    let value: Value = serde_json::from_slice(line).map_err(|e| {
        (
            Value::Null,
            ControlFault::new(
                ControlFault::PARSE_ERROR,
                format!("malformed request (not JSON: {e}); send one JSON object per line"),
            ),
        )
    })?;
    let no_method = || {
        ControlFault::new(
            ControlFault::INVALID_REQUEST,
            "malformed request: \"method\" (a string) is missing",
        )
    };
    // Only an object is a request (serde would also read a struct from an array).
    if !value.is_object() {
        return Err((Value::Null, no_method()));
    }
    let envelope: Envelope =
        serde_json::from_value(value).map_err(|_| (Value::Null, no_method()))?;
    let Some(Value::String(method)) = envelope.method else {
        return Err((envelope.id, no_method()));
    };
    match ControlRequest::from_parts(&method, envelope.params) {
        Ok(request) => Ok((envelope.id, request)),
        Err(fault) => Err((envelope.id, fault)),
    }
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
    let me = crate::sys::private::effective_uid();
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

/// The socket file must be owned by this user or root.
#[cfg(unix)]
fn check_owner(path: &Path, meta: &std::fs::Metadata) -> Result<(), ControlError> {
    use std::os::unix::fs::MetadataExt;
    if trusted_uid(meta.uid()) {
        Ok(())
    } else {
        Err(ControlError::NotYours {
            path: path.to_path_buf(),
            owner: meta.uid(),
        })
    }
}

#[cfg(not(unix))]
fn check_owner(_path: &Path, _meta: &std::fs::Metadata) -> Result<(), ControlError> {
    Ok(())
}

/// The process that accepted the connection must run as this user or root (the socket
/// file may have been swapped between the check of its owner and the connect).
#[cfg(unix)]
fn check_peer(path: &Path, stream: &UnixStream) -> Result<(), ControlError> {
    let cred = stream.peer_cred().map_err(|source| ControlError::Io {
        action: "identify the process behind",
        path: path.to_path_buf(),
        source,
    })?;
    if trusted_uid(cred.uid()) {
        Ok(())
    } else {
        Err(ControlError::WrongPeer {
            path: path.to_path_buf(),
            uid: cred.uid(),
            pid: cred.pid(),
        })
    }
}

#[cfg(not(unix))]
fn check_peer(_path: &Path, _stream: &UnixStream) -> Result<(), ControlError> {
    Ok(())
}

/// A connection to a running host's control socket.
pub struct ControlClient {
    reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    writer: tokio::net::unix::OwnedWriteHalf,
    next_id: u64,
    path: PathBuf,
    limit: Option<Duration>,
}

/// Why the socket at `path` could not be reached: no permission (EACCES, EPERM), or no
/// host there.
fn unreachable_socket(path: &Path, source: io::Error) -> ControlError {
    let path = path.to_path_buf();
    match source.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => ControlError::PermissionDenied { path, source },
        _ => ControlError::NotRunning { path, source },
    }
}

impl ControlClient {
    /// Connects to the host listening on `path`. Before anything is sent, the socket file
    /// must be owned by this user or root, and the process answering must run as this user
    /// or root: a socket someone else planted at the path is refused, never queried.
    pub async fn connect(path: &Path) -> Result<ControlClient, ControlError> {
        let meta = std::fs::symlink_metadata(path).map_err(|e| unreachable_socket(path, e))?;
        if !is_socket(&meta) {
            return Err(ControlError::NotASocket {
                path: path.to_path_buf(),
            });
        }
        check_owner(path, &meta)?;
        let stream = UnixStream::connect(path)
            .await
            .map_err(|e| unreachable_socket(path, e))?;
        check_peer(path, &stream)?;
        let (read, writer) = stream.into_split();
        Ok(ControlClient {
            reader: BufReader::new(read),
            writer,
            next_id: 1,
            path: path.to_path_buf(),
            limit: None,
        })
    }

    /// Bounds how long every later request waits for its answer.
    pub fn answer_within(mut self, limit: Duration) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Rescans the host's plugin directories; what changed.
    pub async fn reload(&mut self) -> Result<RescanReport, ControlError> {
        self.send_typed(&ControlRequest::Reload).await
    }

    /// The host's status.
    pub async fn status(&mut self) -> Result<HostStatus, ControlError> {
        self.send_typed(&ControlRequest::Status).await
    }

    /// Runs one call in the host.
    pub async fn call(&mut self, params: CallParams) -> Result<CallReply, ControlError> {
        self.send_typed(&ControlRequest::Call(params)).await
    }

    /// Sends `request` and reads its result as `T`.
    async fn send_typed<T: serde::de::DeserializeOwned>(
        &mut self,
        request: &ControlRequest,
    ) -> Result<T, ControlError> {
        let result = self.send(request).await?;
        serde_json::from_value(result)
            .map_err(|e| ControlError::BadResponse(format!("an unexpected result: {e}")))
    }

    /// Sends one typed request and returns its (untyped) result.
    pub async fn send(&mut self, request: &ControlRequest) -> Result<Value, ControlError> {
        self.exchange(request).await
    }

    /// Sends one request with any method and params and returns its result: for methods
    /// this client has no typed call for, and for testing the host's answers to odd
    /// requests.
    pub async fn request(&mut self, method: &str, params: Value) -> Result<Value, ControlError> {
        self.exchange(&RawRequest { method, params }).await
    }

    /// Sends `request` (within the limit, if one is set) and returns its result.
    async fn exchange<R: Serialize>(&mut self, request: &R) -> Result<Value, ControlError> {
        match self.limit {
            None => self.exchange_now(request).await,
            Some(limit) => tokio::time::timeout(limit, self.exchange_now(request))
                .await
                .map_err(|_| ControlError::Timeout {
                    path: self.path.clone(),
                    waited: limit,
                })?,
        }
    }

    async fn exchange_now<R: Serialize>(&mut self, request: &R) -> Result<Value, ControlError> {
        let id = self.next_id;
        self.next_id += 1;
        let mut line = serde_json::to_string(&Outgoing {
            jsonrpc: JSONRPC,
            id,
            request,
        })
        .map_err(|e| ControlError::BadRequest(e.to_string()))?;
        line.push('\n');
        let lost = |e: io::Error| ControlError::BadResponse(format!("the connection failed: {e}"));
        let sent = self.writer.write_all(line.as_bytes()).await;
        let mut answer = String::new();
        let read = self.reader.read_line(&mut answer).await;
        // A host that refused the connection may have closed it before the request was
        // written: its answer, already here, says why.
        if let Err(e) = sent
            && answer.is_empty()
        {
            return Err(lost(e));
        }
        if read.map_err(lost)? == 0 {
            return Err(ControlError::BadResponse(
                "the host closed the connection".to_owned(),
            ));
        }
        let response: ControlResponse = serde_json::from_str(&answer)
            .map_err(|e| ControlError::BadResponse(format!("{e}: {answer}")))?;
        match response.outcome {
            ControlOutcome::Result(result) => Ok(result),
            ControlOutcome::Error(fault) => Err(ControlError::Refused(fault)),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn fault(line: &str) -> (Value, ControlFault) {
        match decode(line.as_bytes()) {
            Ok((_, request)) => panic!("{line} decoded as {request:?}"),
            Err(refused) => refused,
        }
    }

    #[test]
    fn requests_decode_with_or_without_jsonrpc_and_params() {
        for line in [
            r#"{"id": 1, "method": "status"}"#,
            r#"{"jsonrpc": "2.0", "id": 1, "method": "status", "params": {}}"#,
            r#"{"id": 1, "method": "status", "params": [1, 2]}"#,
        ] {
            let (id, request) = decode(line.as_bytes()).expect(line);
            assert_eq!((id, request), (json!(1), ControlRequest::Status));
        }
        let (id, request) = decode(
            br#"{"method": "call", "params": {"tool": "echo", "profile": "p", "timeout_secs": 2}}"#,
        )
        .expect("a call");
        assert_eq!(id, Value::Null);
        assert_eq!(
            request,
            ControlRequest::Call(CallParams {
                tool: "echo".to_owned(),
                arguments: json!({}),
                profile: Some("p".to_owned()),
                timeout_secs: Some(2.0),
            })
        );
    }

    #[test]
    fn each_kind_of_bad_request_has_its_code_and_keeps_the_id() {
        let (id, f) = fault("not json");
        assert_eq!((id, f.code), (Value::Null, ControlFault::PARSE_ERROR));
        assert!(f.message.contains("malformed request"), "{f}");
        let (_, f) = fault("[1, \"status\"]");
        assert_eq!(f.code, ControlFault::INVALID_REQUEST);
        let (id, f) = fault(r#"{"id": "a", "method": 5}"#);
        assert_eq!((id, f.code), (json!("a"), ControlFault::INVALID_REQUEST));
        let (id, f) = fault(r#"{"id": 5, "method": "explode"}"#);
        assert_eq!((id, f.code), (json!(5), ControlFault::METHOD_NOT_FOUND));
        assert!(f.message.contains("unknown method 'explode'"), "{f}");
        let (_, f) = fault(r#"{"id": 6, "method": "call", "params": {"arguments": {}}}"#);
        assert_eq!(f.code, ControlFault::INVALID_PARAMS);
        assert!(
            f.message.starts_with("call needs params {\"tool\": NAME"),
            "{f}"
        );
    }

    #[test]
    fn responses_are_json_rpc_shaped_and_old_ones_still_read() {
        let ok = ControlResponse::new(json!(1), ControlOutcome::Result(json!({"a": 1})));
        let line: Value = serde_json::from_str(&ok.to_line()).expect("JSON");
        assert_eq!(line, json!({"jsonrpc": "2.0", "id": 1, "result": {"a": 1}}));
        let err = ControlResponse::new(
            json!(2),
            ControlOutcome::Error(ControlFault::new(ControlFault::UNKNOWN_PROFILE, "no")),
        );
        let line: Value = serde_json::from_str(&err.to_line()).expect("JSON");
        assert_eq!(
            line,
            json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32001, "message": "no"}})
        );
        // A refused connection's line, and answers of hosts from before the codes.
        let refusal =
            legacy_error_line("permission denied: this toolhost serves only uid 1 and root");
        assert_eq!(
            refusal,
            r#"{"id":null,"error":{"message":"permission denied: this toolhost serves only uid 1 and root"}}"#
        );
        let read: ControlResponse = serde_json::from_str(&refusal).expect("reads");
        assert_eq!(
            read.outcome,
            ControlOutcome::Error(ControlFault::new(
                0,
                "permission denied: this toolhost serves only uid 1 and root"
            ))
        );
        let old: ControlResponse =
            serde_json::from_str(r#"{"id": 3, "result": []}"#).expect("reads");
        assert_eq!(old.outcome, ControlOutcome::Result(json!([])));
    }

    #[test]
    fn a_request_is_written_as_method_and_params() {
        let line = serde_json::to_value(Outgoing {
            jsonrpc: JSONRPC,
            id: 7,
            request: &ControlRequest::Reload,
        })
        .expect("encodes");
        assert_eq!(line, json!({"jsonrpc": "2.0", "id": 7, "method": "reload"}));
        let call = ControlRequest::Call(CallParams {
            tool: "echo".to_owned(),
            arguments: json!({"text": "hi"}),
            profile: None,
            timeout_secs: None,
        });
        let line = serde_json::to_value(Outgoing {
            jsonrpc: JSONRPC,
            id: 8,
            request: &call,
        })
        .expect("encodes");
        assert_eq!(
            line,
            json!({"jsonrpc": "2.0", "id": 8, "method": "call",
                   "params": {"tool": "echo", "arguments": {"text": "hi"}}})
        );
    }

    #[test]
    fn every_call_error_kind_has_its_own_code() {
        let kinds = [
            CallErrorKind::ToolNotFound,
            CallErrorKind::Denied,
            CallErrorKind::NotApproved,
            CallErrorKind::Unavailable,
            CallErrorKind::InvalidArgs,
            CallErrorKind::Failed,
            CallErrorKind::Panicked,
            CallErrorKind::TimedOut,
            CallErrorKind::Cancelled,
        ];
        let codes: std::collections::BTreeSet<i32> =
            kinds.iter().map(|k| call_error_code(*k)).collect();
        assert_eq!(codes.len(), kinds.len());
        assert!(!codes.contains(&0), "0 means success");
    }
}
