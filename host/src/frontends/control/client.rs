//! The control socket's client side: checks the socket's owner and the serving process's
//! uid before sending anything, then sends typed requests and reads typed responses.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use super::protocol::{APPROVE_METHOD, AnswerLine, HostLine, JSONRPC, Outgoing, RawRequest};
use super::{
    ApprovalQuestion, ApprovalReply, CallParams, CallReply, ControlError, ControlOutcome,
    ControlRequest, is_socket, trusted_uid,
};
use crate::host::HostStatus;
use crate::plugins::catalog::RescanReport;

/// The system service's user, when root acts for the service as itself (`toolhost
/// --system install` stays root to write root's plugin folder): its socket is trusted
/// too.
static SERVICE_USER: std::sync::OnceLock<u32> = std::sync::OnceLock::new();

/// Makes this process's control clients also trust sockets owned, and answered, by `uid`:
/// the system service's user, for root acting for the service without becoming it. Call
/// it once, before connecting; `false` if a user was set already.
pub fn trust_service_user(uid: u32) -> bool {
    SERVICE_USER.set(uid).is_ok()
}

/// This user, root, or the service's user set by [`trust_service_user`].
fn client_trusts(uid: u32) -> bool {
    trusted_uid(uid) || SERVICE_USER.get() == Some(&uid)
}

/// The socket file must be owned by this user or root (or the service's user, see
/// [`trust_service_user`]).
#[cfg(unix)]
fn check_owner(path: &Path, meta: &std::fs::Metadata) -> Result<(), ControlError> {
    use std::os::unix::fs::MetadataExt;
    if client_trusts(meta.uid()) {
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
    if client_trusts(cred.uid()) {
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

/// Answers the approval questions a host asks while a call of this client waits (the
/// `toolhost` binary asks the person at its terminal).
#[async_trait::async_trait]
pub trait ApprovalPrompt: Send + Sync {
    /// The person's answer to `question`.
    async fn answer(&self, question: &ApprovalQuestion) -> ApprovalReply;
}

/// A connection to a running host's control socket.
pub struct ControlClient {
    reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    writer: tokio::net::unix::OwnedWriteHalf,
    next_id: u64,
    path: PathBuf,
    limit: Option<Duration>,
    prompt: Option<std::sync::Arc<dyn ApprovalPrompt>>,
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
            prompt: None,
        })
    }

    /// Answers approval questions with `prompt`: calls then say `ask`, and a call that
    /// needs approval is asked about here instead of refused. The time spent answering
    /// does not count against [`ControlClient::answer_within`].
    pub fn answering(mut self, prompt: std::sync::Arc<dyn ApprovalPrompt>) -> Self {
        self.prompt = Some(prompt);
        self
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
    pub async fn call(&mut self, mut params: CallParams) -> Result<CallReply, ControlError> {
        params.ask = self.prompt.is_some();
        self.send_typed(&ControlRequest::Call(params)).await
    }

    /// The approval questions waiting for a terminal.
    pub async fn approvals_pending(
        &mut self,
    ) -> Result<Vec<crate::approval_relay::RelayedQuestion>, ControlError> {
        self.send_typed(&ControlRequest::ApprovalsPending).await
    }

    /// Answers the waiting approval question `id`.
    pub async fn approvals_answer(
        &mut self,
        id: u64,
        reply: super::ApprovalReply,
    ) -> Result<(), ControlError> {
        self.send(&ControlRequest::ApprovalsAnswer(super::AnswerParams {
            id,
            reply,
        }))
        .await
        .map(|_| ())
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

    /// Sends `request` and returns its result, answering the host's questions on the way;
    /// each wait for the host is bounded by the limit, if one is set.
    async fn exchange<R: Serialize>(&mut self, request: &R) -> Result<Value, ControlError> {
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
        loop {
            let mut answer = String::new();
            let read = match self.limit {
                None => self.reader.read_line(&mut answer).await,
                Some(limit) => tokio::time::timeout(limit, self.reader.read_line(&mut answer))
                    .await
                    .map_err(|_| ControlError::Timeout {
                        path: self.path.clone(),
                        waited: limit,
                    })?,
            };
            // A host that refused the connection may have closed it before the request
            // was written: its answer, already here, says why.
            if let Err(e) = &sent
                && answer.is_empty()
            {
                return Err(lost(io::Error::new(e.kind(), e.to_string())));
            }
            if read.map_err(lost)? == 0 {
                return Err(ControlError::BadResponse(
                    "the host closed the connection".to_owned(),
                ));
            }
            let response = match serde_json::from_str::<HostLine>(&answer) {
                Ok(HostLine::Question(q)) if q.method == APPROVE_METHOD => {
                    let reply = match &self.prompt {
                        Some(prompt) => prompt.answer(&q.params).await,
                        None => ApprovalReply::No {
                            reason: "this client answers no questions".to_owned(),
                        },
                    };
                    let mut text = serde_json::to_string(&AnswerLine {
                        jsonrpc: JSONRPC.to_owned(),
                        id: q.id,
                        result: reply,
                    })
                    .map_err(|e| ControlError::BadRequest(e.to_string()))?;
                    text.push('\n');
                    self.writer.write_all(text.as_bytes()).await.map_err(lost)?;
                    continue;
                }
                Ok(HostLine::Question(q)) => {
                    return Err(ControlError::BadResponse(format!(
                        "the host asked an unknown question '{}'",
                        q.method
                    )));
                }
                Ok(HostLine::Response(r)) => r,
                Err(e) => return Err(ControlError::BadResponse(format!("{e}: {answer}"))),
            };
            return match response.outcome {
                ControlOutcome::Result(result) => Ok(result),
                ControlOutcome::Error(fault) => Err(ControlError::Refused(fault)),
            };
        }
    }
}
