//! One running worker process as the host sees it: its socket, the calls in flight on it
//! (multiplexed by id), the messages it sends (replies, log lines, progress, host
//! services, each answered with the services of the call it belongs to) and its end
//! (reaped with whatever it started, its calls failed with the reason, its owner told so
//! that the lifecycle counts the crash). It knows nothing of restarts: its owner, the
//! supervisor, decides those.

use std::collections::HashMap;
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt as _;
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;
use tokio::sync::oneshot;
use toolhost_plugin_api::{HostRequest, HostRequestError, LogLevel, ServiceError};

use super::error::{SendError, WorkerStopped};
use super::lifecycle::AfterCrash;
use super::protocol::{self, FrameReader, FromWorker, ServiceCall, ToWorker, WireServiceError};
use crate::sys::confinement::Confinement;
use crate::sys::containment::Containment;
use toolhost_calls::context::{TurnIdentity, TurnServices};
use toolhost_calls::tool::{ToolError, ToolOutput};

/// What a call gets back from the connection: the tool's result, or why the worker
/// could not give one.
pub(super) type Outcome = Result<Result<ToolOutput, ToolError>, WorkerStopped>;

/// A call in flight: where its answer goes and the services its plugin code may ask for.
pub(super) struct Pending {
    pub(super) tx: oneshot::Sender<Outcome>,
    pub(super) services: TurnServices,
    pub(super) turn: Arc<TurnIdentity>,
    pub(super) cancel: tokio_util::sync::CancellationToken,
    pub(super) runtime: tokio::runtime::Handle,
    pub(super) tool: Arc<str>,
    /// The plugin's settings, for its `plugin.settings` requests.
    pub(super) settings: Arc<toolhost_plugin_api::SettingsAnswer>,
}

/// Who is told when a worker ends unexpectedly (the supervisor): it counts the crash and
/// says what happens next, for the errors of the calls the crash failed.
pub(super) trait WorkerOwner: Send + Sync {
    /// `conn`'s worker died with `reason`.
    fn crashed(&self, conn: &Connection, reason: &str) -> AfterCrash;
}

/// The last line a worker wrote on stderr (a crash's own explanation), kept by the
/// thread that logs its stderr.
#[derive(Default)]
pub(super) struct LastWords {
    pub(super) line: Mutex<Option<String>>,
    /// Disconnected once the logging thread has read the pipe to its end.
    pub(super) closed: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
}

impl LastWords {
    /// The last line, once the worker has exited: waits (briefly: a process the plugin
    /// started may hold the pipe open) for the logging thread to read what is left.
    pub(super) fn after_exit(&self) -> Option<String> {
        let closed = self
            .closed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(closed) = closed {
            let _ = closed.recv_timeout(Duration::from_millis(200));
        }
        self.line
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// One running worker process and its socket.
pub(super) struct Connection {
    stream: Mutex<UnixStream>,
    pending: Mutex<HashMap<u64, Pending>>,
    next_id: AtomicU64,
    pub(super) pid: u32,
    child: Mutex<Option<Child>>,
    alive: AtomicBool,
    /// The host ended it on purpose (a generation retired): not a crash.
    closing: AtomicBool,
    kill_reason: Mutex<Option<String>>,
    owner: Mutex<Option<Weak<dyn WorkerOwner>>>,
    plugin: Arc<str>,
    last_words: Arc<LastWords>,
    pub(super) confinement: Confinement,
    /// Keeps the worker's processes together; ended with it.
    pub(super) containment: Containment,
    /// The worker's private temporary folder (its `TMPDIR`), removed with the connection.
    pub(super) tmp: Option<tempfile::TempDir>,
}

impl Connection {
    pub(super) fn alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Sends `message`. A write that fails kills the worker (it no longer reads).
    pub(super) fn send(&self, message: &ToWorker) -> Result<(), SendError> {
        let frame = protocol::encode(message).map_err(SendError::Refused)?;
        let stream = self.stream.lock().unwrap_or_else(PoisonError::into_inner);
        protocol::write_frame(&stream, &frame).map_err(|e| {
            let error = SendError::Stopped(e);
            drop(stream);
            self.kill(&error.to_string());
            error
        })
    }

    /// The supervisor to tell when the worker ends unexpectedly.
    pub(super) fn set_owner(&self, owner: Weak<dyn WorkerOwner>) {
        *self.owner.lock().unwrap_or_else(PoisonError::into_inner) = Some(owner);
    }

    /// Whether the worker is dead or being killed (a reason to kill it was given).
    pub(super) fn dying(&self) -> bool {
        !self.alive()
            || self
                .kill_reason
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_some()
    }

    /// Waits (up to 2 s) until the host has seen this worker end, so that the next
    /// `connection()` starts a fresh one.
    pub(super) async fn wait_dead(&self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.alive() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Ends the worker with SIGKILL; `reason` goes into every error it causes.
    pub(super) fn kill(&self, reason: &str) {
        {
            let mut slot = self
                .kill_reason
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if slot.is_none() {
                *slot = Some(reason.to_owned());
            }
        }
        if let Some(child) = self
            .child
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
        {
            let _ = child.kill();
        }
    }

    /// Ends the worker on purpose (it has no calls left): shutting the socket down ends
    /// the host's reader at once, which kills and reaps the worker (`finish`).
    pub(super) fn close(&self) {
        self.closing.store(true, Ordering::Release);
        let _ = self
            .stream
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .shutdown(std::net::Shutdown::Both);
    }

    /// Registers a call; `None` if the worker died meanwhile (its calls were already
    /// failed, so this one would never hear back).
    pub(super) fn begin(&self, pending: Pending) -> Option<u64> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut calls = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        calls.insert(id, pending);
        // `finish` marks the worker dead before it takes this lock to fail the calls: seen
        // alive here, this call is failed there if the worker dies.
        if self.alive() {
            Some(id)
        } else {
            calls.remove(&id);
            None
        }
    }

    pub(super) fn is_pending(&self, id: u64) -> bool {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(&id)
    }

    /// Forgets call `id` (it was never sent): nobody waits for its answer.
    pub(super) fn forget(&self, id: u64) {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
    }

    /// Starts the threads that follow the worker: one waits for the process to end (a
    /// process the plugin started could hold the socket open, so the end is learned from
    /// the process itself) and shuts the socket down, which ends the other, the reader of
    /// its messages, which then reaps the worker and fails its calls (`finish`).
    pub(super) fn start_reading(self: &Arc<Self>, mut reader: FrameReader) -> std::io::Result<()> {
        let pid = self.pid;
        if let Ok(watched) = self
            .stream
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .try_clone()
        {
            let _ = std::thread::Builder::new()
                .name("toolhost-worker-wait".to_owned())
                .spawn(move || {
                    crate::sys::process::wait_for_exit(pid);
                    let _ = watched.shutdown(std::net::Shutdown::Both);
                });
        }
        let reading = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("toolhost-worker-read".to_owned())
            .spawn(move || {
                loop {
                    match reader.next::<FromWorker>(None) {
                        Ok(Some(message)) => reading.handle(message),
                        Ok(None) => break,
                        Err(e) => {
                            reading.kill(&format!("it sent a message the host cannot read ({e})"));
                            break;
                        }
                    }
                }
                reading.finish();
            });
        if let Err(e) = spawned {
            self.kill("the host could not start a thread to read it");
            self.finish();
            return Err(e);
        }
        Ok(())
    }

    /// One message from the worker.
    fn handle(self: &Arc<Self>, message: FromWorker) {
        match message {
            FromWorker::Reply { id, result } => {
                let waiting = self
                    .pending
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&id);
                if let Some(p) = waiting {
                    let _ =
                        p.tx.send(Ok(result.map(ToolOutput::from).map_err(ToolError::from)));
                }
            }
            FromWorker::Log {
                call,
                level,
                message,
            } => {
                let found = self.with_pending(call, |p| {
                    (
                        p.services.caller.clone(),
                        p.runtime.clone(),
                        Arc::clone(&p.tool),
                    )
                });
                let Some((caller, runtime, tool)) = found else {
                    return;
                };
                crate::plugins::run::host_services::log_tool_line(
                    LogLevel(level),
                    &self.plugin,
                    &tool,
                    &message,
                );
                if let Some(caller) = caller {
                    let _entered = runtime.enter();
                    caller.log(LogLevel(level), &tool, &message);
                }
            }
            FromWorker::Progress {
                call,
                progress,
                total,
                message,
            } => {
                let found =
                    self.with_pending(call, |p| (p.services.caller.clone(), p.runtime.clone()));
                if let Some((Some(caller), runtime)) = found {
                    let _entered = runtime.enter();
                    caller.progress(progress, total, message.as_deref());
                }
            }
            FromWorker::Service { id, call, request } => {
                let found = self.with_pending(call, |p| {
                    (
                        p.services.clone(),
                        Arc::clone(&p.turn),
                        p.cancel.clone(),
                        p.runtime.clone(),
                        Arc::clone(&p.settings),
                    )
                });
                let Some((services, turn, cancel, runtime, settings)) = found else {
                    let answer = Err(ServiceError::Unavailable(
                        "the call this request belongs to has ended".to_owned(),
                    )
                    .into());
                    let _ = self.send(&ToWorker::ServiceReply { id, answer });
                    return;
                };
                let conn = Arc::clone(self);
                runtime.spawn(async move {
                    let inner =
                        tokio::spawn(answer_service(request, services, turn, cancel, settings));
                    let answer = inner.await.unwrap_or_else(|e| {
                        Err(WireServiceError(format!(
                            "the host service failed inside the host ({e}); this is a bug in \
                             toolhost, please report it"
                        )))
                    });
                    // An answer too large to send is refused, so the call waiting for
                    // it hears so now.
                    if let Err(why) = conn.send(&ToWorker::ServiceReply { id, answer }) {
                        let answer = Err(ServiceError::Failed(format!(
                            "the host's answer could not be sent to the worker: {why}"
                        ))
                        .into());
                        let _ = conn.send(&ToWorker::ServiceReply { id, answer });
                    }
                });
            }
            FromWorker::Hello(_) | FromWorker::LoadFailed { .. } => {
                tracing::warn!(plugin = &*self.plugin, "a worker said hello twice; ignored");
            }
        }
    }

    fn with_pending<T>(&self, call: u64, f: impl FnOnce(&Pending) -> T) -> Option<T> {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&call)
            .map(f)
    }

    /// The worker is gone: reap it, tell the supervisor, fail the calls in flight.
    fn finish(&self) {
        self.alive.store(false, Ordering::Release);
        let child = self
            .child
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let status = child.and_then(|mut child| {
            let _ = child.kill();
            child.wait().ok()
        });
        // Whatever the plugin started dies with its worker.
        self.containment.kill_all(self.pid);
        crate::sys::workers::unregister(self.pid);
        if self.closing.load(Ordering::Acquire) {
            tracing::debug!(plugin = &*self.plugin, pid = self.pid, "worker ended");
            self.fail_all("its worker was ended (the plugin was reloaded or removed)");
            return;
        }
        let killed = self
            .kill_reason
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut reason = match (killed, status) {
            (Some(why), _) => format!("was killed: {why}"),
            (None, Some(status)) => describe(status),
            (None, None) => "ended".to_owned(),
        };
        if let Some(words) = self.last_words.after_exit() {
            reason.push_str(&format!(" (its last words: {words})"));
        }
        let owner = self
            .owner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .and_then(Weak::upgrade);
        let next = match owner {
            Some(owner) => owner.crashed(self, &reason).to_string(),
            None => String::new(),
        };
        self.fail_all(&format!("its worker (pid {}) {reason}{next}", self.pid));
    }

    fn fail_all(&self, what: &str) {
        let pending: Vec<Pending> = self
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
            .map(|(_, p)| p)
            .collect();
        for p in pending {
            let _ = p.tx.send(Err(WorkerStopped {
                plugin: Arc::clone(&self.plugin),
                tool: p.tool,
                what: what.to_owned(),
            }));
        }
    }
}

/// "killed by signal 11 (SIGSEGV)" or "exited with status 3".
pub(super) fn describe(status: ExitStatus) -> String {
    if let Some(signal) = status.signal() {
        let name = match signal {
            libc::SIGSEGV => "SIGSEGV, a crash",
            libc::SIGABRT => "SIGABRT, an abort",
            libc::SIGBUS => "SIGBUS",
            libc::SIGILL => "SIGILL",
            libc::SIGFPE => "SIGFPE",
            libc::SIGKILL => "SIGKILL",
            libc::SIGTERM => "SIGTERM",
            _ => "signal",
        };
        format!("was killed by signal {signal} ({name})")
    } else {
        match status.code() {
            Some(code) => format!("exited with status {code}"),
            None => "ended".to_owned(),
        }
    }
}

/// Runs a host service for plugin code in a worker, with the services of the call it
/// belongs to: the answer as JSON, or the error.
async fn answer_service(
    request: ServiceCall,
    services: TurnServices,
    turn: Arc<TurnIdentity>,
    cancel: tokio_util::sync::CancellationToken,
    settings: Arc<toolhost_plugin_api::SettingsAnswer>,
) -> Result<Value, WireServiceError> {
    fn encode<A: Serialize>(answer: Result<A, ServiceError>) -> Result<Value, WireServiceError> {
        answer
            .and_then(|a| {
                serde_json::to_value(a).map_err(|e| {
                    ServiceError::Failed(format!("could not encode the host's answer: {e}"))
                })
            })
            .map_err(WireServiceError::from)
    }
    let missing = |what: &str| {
        Err(ServiceError::Unavailable(format!("{what} is not available for this call")).into())
    };
    match request {
        ServiceCall::Ask(request) => match services.caller {
            Some(caller) => encode(caller.ask_user(request).await),
            None => missing("asking the person"),
        },
        ServiceCall::Sample(request) => match services.caller {
            Some(caller) => encode(caller.sample(request).await),
            None => missing("sampling"),
        },
        ServiceCall::ChildTurn(request) => match services.child_turns {
            Some(children) => children
                .run_child_turn(&turn, request, cancel)
                .await
                .map(Value::String)
                .map_err(|e| WireServiceError(e.to_string())),
            None => missing("a child turn"),
        },
        // The plugin's own settings need no profile, as in process.
        ServiceCall::Host { method, .. } if method == "plugin.settings" => {
            encode(Ok::<_, ServiceError>(crate::plugins::settings::answer(
                &settings,
            )))
        }
        ServiceCall::Host { method, params } => match HostRequest::from_wire(&method, params) {
            Ok(request) => encode(
                toolhost_calls::context::answer_host_request(
                    &services,
                    &turn,
                    cancel,
                    request,
                    |_| {
                        ServiceError::Unavailable(format!(
                            "'{method}' is not available for this call"
                        ))
                    },
                )
                .await,
            ),
            Err(e @ HostRequestError::Unknown(_)) => {
                Err(ServiceError::Unavailable(e.to_string()).into())
            }
            Err(e) => Err(ServiceError::Failed(e.to_string()).into()),
        },
    }
}

impl Connection {
    /// The connection to a worker that said hello: `stream` is the host's end of its
    /// socket, `child` the process.
    pub(super) fn new(
        stream: UnixStream,
        pid: u32,
        child: Option<Child>,
        plugin: Arc<str>,
        last_words: Arc<LastWords>,
        confinement: Confinement,
        containment: Containment,
    ) -> Connection {
        Connection {
            stream: Mutex::new(stream),
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            pid,
            child: Mutex::new(child),
            alive: AtomicBool::new(true),
            closing: AtomicBool::new(false),
            kill_reason: Mutex::new(None),
            owner: Mutex::new(None),
            plugin,
            last_words,
            confinement,
            containment,
            tmp: None,
        }
    }
}
