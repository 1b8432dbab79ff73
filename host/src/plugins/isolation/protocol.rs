//! The worker protocol: the typed messages the host and a plugin worker exchange over
//! their socketpair, and the framing (a 4-byte little-endian length, then the message as
//! JSON). Reading spins briefly before it blocks, because waking an idle core costs more
//! than a whole call on a small machine; writing never blocks forever.
//!
//! Order of a worker's life: the host sends [`ToWorker::Init`]; the worker answers
//! [`FromWorker::Hello`] (or [`FromWorker::LoadFailed`]) with the same protocol version;
//! then calls, cancels and service answers go one way and replies, log lines, progress and
//! service requests the other, all multiplexed by id. The host closing its end ends the
//! worker.

use std::io::{self, Read as _, Write as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolhost_plugin_api::{AskRequest, ChildTurnCall, SampleRequest, ServiceError};

use crate::sys::confinement::Confinement;
use crate::sys::containment::ContainmentKind;
use crate::sys::sandbox::{SandboxMode, SandboxRules};
use toolhost_calls::tool::ToolSpec;

/// Bumped whenever a message changes; both sides refuse another version.
pub(crate) const PROTOCOL_VERSION: u32 = 3;

/// The largest frame either side accepts (a tool's output or arguments included).
pub(crate) const MAX_FRAME: usize = 64 << 20;

/// How long a reader keeps spinning for the next frame before it sleeps in `poll`.
pub(crate) const SPIN: Duration = Duration::from_micros(150);

/// How long a write may wait for the other side to make room before it fails.
const WRITE_TIMEOUT_MS: i32 = 10_000;

/// What the host sends a worker.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub(crate) enum ToWorker {
    /// First message: what to load and how to confine it.
    Init(Box<Init>),
    /// Run tool number `tool` (in the order of the hello) with these arguments.
    Call(Box<CallFrame>),
    /// The call's cancel signal fired (timeout, turn stopped, client gone).
    Cancel {
        /// The call.
        id: u64,
    },
    /// The host gave up the call (its caller stopped waiting): drop the plugin's future.
    /// The worker answers with an error reply once it is gone, and does not answer while
    /// plugin code of it still runs (the host then ends the worker).
    Abandon {
        /// The call.
        id: u64,
    },
    /// The answer to a host service the worker asked for.
    ServiceReply {
        /// The service request.
        id: u64,
        /// The answer as JSON, or the error.
        answer: Result<Value, WireServiceError>,
    },
}

/// A host service's failure as it crosses the socket: the text of
/// `ServiceError::to_wire` (a child turn's error: its message as it is), serialized as
/// that text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(transparent)]
#[error("{0}")]
pub(crate) struct WireServiceError(pub(crate) String);

impl From<ServiceError> for WireServiceError {
    fn from(e: ServiceError) -> Self {
        WireServiceError(e.to_wire())
    }
}

impl WireServiceError {
    /// The service error it stands for.
    pub(crate) fn into_service_error(self) -> ServiceError {
        ServiceError::from_wire(self.0)
    }
}

/// What to load and how.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Init {
    /// Must equal [`PROTOCOL_VERSION`].
    pub(crate) protocol: u32,
    /// The operator's path (for messages).
    pub(crate) file: PathBuf,
    /// The host's private, verified copy: what the worker maps.
    pub(crate) copy: PathBuf,
    /// sha256 of the copy.
    pub(crate) sha256: String,
    /// Resource limits.
    pub(crate) limits: Limits,
    /// Landlock mode and rules.
    pub(crate) sandbox: SandboxMode,
    /// What the sandbox allows.
    pub(crate) rules: SandboxRules,
    /// Unix-domain sockets allowed (the seccomp filter refuses them otherwise).
    pub(crate) unix_sockets: bool,
    /// How the host keeps the worker's processes together; a PID namespace the worker
    /// makes itself.
    pub(crate) containment: ContainmentKind,
    /// The worker's own log filter (e.g. `info`).
    pub(crate) log_filter: String,
}

/// Resource limits of a worker (0: not limited).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Limits {
    /// The address space a process may add to what the worker had before loading
    /// (`RLIMIT_AS`), bytes.
    pub(crate) memory_bytes: u64,
    /// Tasks in the worker's user namespace (`RLIMIT_NPROC`, with a PID namespace only;
    /// a cgroup's `pids.max` is set by the host).
    pub(crate) max_processes: u64,
    /// `RLIMIT_NOFILE`.
    pub(crate) open_files: u64,
}

/// One call.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct CallFrame {
    /// Chosen by the host, unique per worker.
    pub(crate) id: u64,
    /// Index of the tool in the hello.
    pub(crate) tool: u32,
    /// The arguments, as JSON text.
    pub(crate) args: String,
    /// The turn's profile, session and model.
    pub(crate) profile_id: String,
    /// See above.
    pub(crate) session_id: String,
    /// See above.
    pub(crate) model: String,
    /// Which services the host side has for this call (the worker offers exactly those).
    pub(crate) caller: bool,
    /// See above.
    pub(crate) child_turns: bool,
    /// See above.
    pub(crate) requests: bool,
    /// The call's output budget (`call.output_budget`), characters and lines (0: off).
    pub(crate) budget: (usize, usize),
}

/// What a worker sends the host.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub(crate) enum FromWorker {
    /// The plugin loaded.
    Hello(Box<Hello>),
    /// The plugin did not load; the worker exits after this.
    LoadFailed {
        /// The worker's protocol version.
        protocol: u32,
        /// Why, as the in-process loader would say it.
        message: String,
        /// Whether the failure is one a later attempt could pass (a refused sandbox).
        may_pass_later: bool,
    },
    /// A call finished.
    Reply {
        /// The call.
        id: u64,
        /// The outcome, or the tool's error.
        result: Result<WireOutcome, WireToolError>,
    },
    /// A log line of a call's tool.
    Log {
        /// The call.
        call: u64,
        /// `LogLevel`'s number.
        level: u8,
        /// The line.
        message: String,
    },
    /// Progress of a call.
    Progress {
        /// The call.
        call: u64,
        /// Done so far.
        progress: f64,
        /// Out of (if known).
        total: Option<f64>,
        /// What is happening.
        message: Option<String>,
    },
    /// A host service a call's plugin code asked for.
    Service {
        /// Chosen by the worker; the answer carries it.
        id: u64,
        /// The call it is for.
        call: u64,
        /// What is asked.
        request: ServiceCall,
    },
}

/// The plugin, as the worker loaded it.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Hello {
    /// The worker's protocol version.
    pub(crate) protocol: u32,
    /// The plugin's name, version and plugin-api version.
    pub(crate) name: String,
    /// See above.
    pub(crate) version: String,
    /// See above.
    pub(crate) api_version: String,
    /// See above.
    #[serde(default)]
    pub(crate) abi_version: String,
    /// Its tools, in export order.
    pub(crate) tools: Vec<ToolSpec>,
    /// Tools left out (their metadata failed), one message each.
    pub(crate) skipped_tools: Vec<String>,
    /// The plugin's settings schema, when it declares one (the host checks its settings
    /// against it).
    #[serde(default)]
    pub(crate) settings_schema: Option<serde_json::Value>,
    /// What confines the worker, protection by protection (the host adds what it set up:
    /// the cgroup).
    pub(crate) confinement: Confinement,
    /// The worker's process id.
    pub(crate) pid: u32,
}

/// A tool's outcome as it crosses (the parts it has).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct WireOutcome {
    /// What the model reads.
    pub(crate) text: String,
    /// The structured value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) structured: Option<serde_json::Value>,
    /// Details, by kind.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub(crate) details: toolhost_plugin_api::Details,
    /// Content blocks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) content: Vec<toolhost_plugin_api::Content>,
    /// The call did not do what was asked.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) is_error: bool,
}

impl From<toolhost_calls::tool::ToolOutput> for WireOutcome {
    fn from(o: toolhost_calls::tool::ToolOutput) -> Self {
        WireOutcome {
            text: o.text,
            structured: o.structured,
            details: o.details,
            content: o.content,
            is_error: o.is_error,
        }
    }
}

impl From<WireOutcome> for toolhost_calls::tool::ToolOutput {
    fn from(o: WireOutcome) -> Self {
        toolhost_calls::tool::ToolOutput {
            text: o.text,
            structured: o.structured,
            details: o.details,
            content: o.content,
            is_error: o.is_error,
        }
    }
}

/// A tool's error as it crosses.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct WireToolError {
    /// `true`: invalid arguments; `false`: failed.
    pub(crate) invalid_args: bool,
    /// The message.
    pub(crate) message: String,
}

impl From<toolhost_calls::tool::ToolError> for WireToolError {
    fn from(e: toolhost_calls::tool::ToolError) -> Self {
        use toolhost_calls::tool::ToolError;
        match e {
            ToolError::InvalidArgs(message) => WireToolError {
                invalid_args: true,
                message,
            },
            ToolError::Failed(message) => WireToolError {
                invalid_args: false,
                message,
            },
        }
    }
}

impl From<WireToolError> for toolhost_calls::tool::ToolError {
    fn from(e: WireToolError) -> Self {
        if e.invalid_args {
            Self::InvalidArgs(e.message)
        } else {
            Self::Failed(e.message)
        }
    }
}

/// A host service asked for by plugin code in a worker.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ServiceCall {
    /// `ctx.ask_user`.
    Ask(AskRequest),
    /// `ctx.sample`.
    Sample(SampleRequest),
    /// `ctx.child_turn`: answered with a JSON string, or the child's error message.
    ChildTurn(ChildTurnCall),
    /// `ctx.host_request` (state folder, session search).
    Host {
        /// The request's method.
        method: String,
        /// Its parameters.
        params: Value,
    },
}

/// Errors of the framing.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FrameError {
    /// The socket failed.
    #[error("the worker connection failed: {0}")]
    Io(#[from] io::Error),
    /// A frame longer than [`MAX_FRAME`].
    #[error(
        "a message of {0} bytes, more than the {mib} MiB the worker protocol carries",
        mib = MAX_FRAME >> 20
    )]
    TooLarge(usize),
    /// A frame that is not a message of this protocol.
    #[error("a malformed message: {0}")]
    Malformed(#[from] serde_json::Error),
    /// The other side did not write within the time allowed.
    #[error("no message within {0:?}")]
    TimedOut(Duration),
}

/// Encodes `message` as one frame.
pub(crate) fn encode<T: Serialize>(message: &T) -> Result<Vec<u8>, FrameError> {
    let mut frame = vec![0u8; 4];
    serde_json::to_writer(&mut frame, message)?;
    let len = frame.len() - 4;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    let len = u32::try_from(len).map_err(|_| FrameError::TooLarge(len))?;
    frame[..4].copy_from_slice(&len.to_le_bytes());
    Ok(frame)
}

/// Writes a whole frame to a non-blocking socket, waiting in `poll` when it is full (at
/// most [`WRITE_TIMEOUT_MS`] each time). Callers hold a lock so frames never interleave.
pub(crate) fn write_frame(stream: &UnixStream, frame: &[u8]) -> Result<(), FrameError> {
    let mut rest = frame;
    let mut writer = stream;
    while !rest.is_empty() {
        match writer.write(rest) {
            Ok(0) => return Err(FrameError::Io(io::ErrorKind::WriteZero.into())),
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if !wait_fd(stream, libc::POLLOUT, WRITE_TIMEOUT_MS)? {
                    return Err(FrameError::TimedOut(Duration::from_millis(
                        WRITE_TIMEOUT_MS.unsigned_abs().into(),
                    )));
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Waits until `stream` is ready for `events`; `false` on timeout.
fn wait_fd(stream: &UnixStream, events: libc::c_short, timeout_ms: i32) -> io::Result<bool> {
    crate::sys::process::wait_fd(stream.as_raw_fd(), events, timeout_ms)
}

/// Reads frames from a non-blocking socket.
pub(crate) struct FrameReader {
    stream: UnixStream,
    buf: Vec<u8>,
    start: usize,
}

impl FrameReader {
    /// Reads from `stream`, which must be non-blocking.
    pub(crate) fn new(stream: UnixStream) -> FrameReader {
        FrameReader {
            stream,
            buf: Vec::with_capacity(16 * 1024),
            start: 0,
        }
    }

    /// The next message; `Ok(None)` when the other side closed its end. Spins for
    /// [`SPIN`] before it sleeps; gives up after `timeout` if one is given.
    pub(crate) fn next<T: DeserializeOwned>(
        &mut self,
        timeout: Option<Duration>,
    ) -> Result<Option<T>, FrameError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(frame) = self.take_frame()? {
                let message = serde_json::from_slice(frame)?;
                return Ok(Some(message));
            }
            if !self.fill(deadline)? {
                return Ok(None);
            }
        }
    }

    /// A complete frame from the buffer, if there is one.
    fn take_frame(&mut self) -> Result<Option<&[u8]>, FrameError> {
        let avail = &self.buf[self.start..];
        let Some(header) = avail.get(..4) else {
            return Ok(None);
        };
        let mut len = [0u8; 4];
        len.copy_from_slice(header);
        let len = u32::from_le_bytes(len) as usize;
        if len > MAX_FRAME {
            return Err(FrameError::TooLarge(len));
        }
        if avail.len() < 4 + len {
            return Ok(None);
        }
        let begin = self.start + 4;
        self.start = begin + len;
        Ok(Some(&self.buf[begin..begin + len]))
    }

    /// Reads more bytes; `false` at end of stream.
    fn fill(&mut self, deadline: Option<Instant>) -> Result<bool, FrameError> {
        // Drop what was consumed, so the buffer does not grow without bound.
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        let spin_until = Instant::now() + SPIN;
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match (&self.stream).read(&mut chunk) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // The other side ended with bytes of ours unread: the same end.
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let now = Instant::now();
                    if now < spin_until {
                        // Yield, not a pure spin: on a busy or single core the thread
                        // that will write the next frame needs the CPU.
                        std::thread::yield_now();
                        continue;
                    }
                    let timeout_ms = match deadline {
                        None => -1,
                        Some(d) if d <= now => {
                            return Err(FrameError::TimedOut(d.saturating_duration_since(now)));
                        }
                        Some(d) => i32::try_from((d - now).as_millis().max(1)).unwrap_or(i32::MAX),
                    };
                    if !wait_fd(&self.stream, libc::POLLIN, timeout_ms)? {
                        let waited = deadline.map(|d| d.saturating_duration_since(spin_until));
                        return Err(FrameError::TimedOut(waited.unwrap_or_default()));
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_error_crosses_as_the_same_text_as_before() {
        let reply = ToWorker::ServiceReply {
            id: 7,
            answer: Err(ServiceError::Unavailable("no person to ask".to_owned()).into()),
        };
        let json = serde_json::to_value(&reply).expect("encode");
        assert_eq!(
            json,
            serde_json::json!({
                "t": "service_reply",
                "id": 7,
                "answer": {"Err": "unavailable: no person to ask"},
            })
        );
        let back: ToWorker = serde_json::from_value(json).expect("decode");
        let ToWorker::ServiceReply {
            answer: Err(wire), ..
        } = back
        else {
            panic!("not an error reply");
        };
        assert_eq!(
            wire.into_service_error(),
            ServiceError::Unavailable("no person to ask".to_owned())
        );
    }

    #[test]
    fn frames_round_trip_in_pieces_and_end_cleanly() {
        let (a, b) = UnixStream::pair().expect("pair");
        a.set_nonblocking(true).expect("nonblocking");
        b.set_nonblocking(true).expect("nonblocking");
        let big = "x".repeat(300_000);
        let writer = std::thread::spawn(move || {
            for id in 0..3u64 {
                let frame = encode(&ToWorker::Cancel { id }).expect("encode");
                write_frame(&a, &frame).expect("write");
            }
            let frame = encode(&FromWorker::Log {
                call: 9,
                level: 1,
                message: big,
            })
            .expect("encode");
            write_frame(&a, &frame).expect("write a frame larger than the socket buffer");
        });
        let mut reader = FrameReader::new(b);
        for want in 0..3u64 {
            let got: ToWorker = reader.next(None).expect("read").expect("a message");
            assert!(matches!(got, ToWorker::Cancel { id } if id == want));
        }
        let got: FromWorker = reader.next(None).expect("read").expect("a message");
        assert!(matches!(got, FromWorker::Log { message, .. } if message.len() == 300_000));
        writer.join().expect("writer");
        let end: Option<ToWorker> = reader.next(None).expect("clean end");
        assert!(end.is_none());
    }

    #[test]
    fn a_reader_refuses_oversized_frames_and_times_out() {
        let (a, b) = UnixStream::pair().expect("pair");
        b.set_nonblocking(true).expect("nonblocking");
        let mut reader = FrameReader::new(b);
        let quiet: Result<Option<ToWorker>, _> = reader.next(Some(Duration::from_millis(20)));
        assert!(matches!(quiet, Err(FrameError::TimedOut(_))));
        (&a).write_all(&u32::MAX.to_le_bytes()).expect("write");
        let huge: Result<Option<ToWorker>, _> = reader.next(None);
        assert!(matches!(huge, Err(FrameError::TooLarge(_))));
    }
}
