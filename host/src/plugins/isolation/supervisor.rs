//! The host's side of plugin workers. A [`WorkerPlugin`] is one plugin file at one
//! generation run in worker processes: it starts a worker, sends it calls (each a
//! [`WorkerTool`] call, multiplexed by id), answers the host services the plugin asks for,
//! and when the worker dies fails the calls in flight with the reason, starts a fresh
//! worker for the next call (with exponential backoff), and quarantines a plugin that keeps
//! crashing. Dropping the last reference (a reload replaced the generation and its calls
//! finished) ends the worker, which returns all of its memory.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::oneshot;
use toolhost_plugin_api::{HostRequest, HostRequestError, LogLevel, ServiceError};

use super::IsolationPolicy;
use super::log_limit;
use super::protocol::{
    self, CallFrame, FrameReader, FromWorker, Hello, Init, Limits, PROTOCOL_VERSION, ServiceCall,
    ToWorker,
};
use crate::calls::context::{CallContext, TurnServices};
use crate::calls::tool::{DynTool, Risk, ToolError, ToolOrigin, ToolSpec};
use crate::sys::confinement::{Confinement, Protection};
use crate::sys::containment::{self, Containment};
use crate::sys::sandbox::{self, SandboxMode, SandboxRules};

/// What a worker looks like in status.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerStatus {
    /// The worker's process id, while one runs.
    pub pid: Option<u32>,
    /// `running`, `stopped` (restarts on the next call) or `quarantined`.
    pub state: String,
    /// Workers started after the first.
    pub restarts: u64,
    /// Failures within the crash window.
    pub recent_crashes: u32,
    /// How the last worker ended, if one did.
    pub last_exit: Option<String>,
    /// Why its tools are refused, while quarantined.
    pub quarantined: Option<String>,
    /// What confines it, in one line ("fully enforced (...)" only when every
    /// protection holds).
    pub sandbox: String,
    /// What confines it, protection by protection.
    #[serde(default)]
    pub confinement: Confinement,
    /// What keeps its processes together: `cgroup v1 PATH`, `cgroup v2 PATH`, `PID
    /// namespace` or `process group`.
    #[serde(default)]
    pub containment: String,
    /// The running worker of each profile that called the plugin (one worker per
    /// profile; `""`: calls that name no profile), by process id.
    #[serde(default)]
    pub profiles: BTreeMap<String, u32>,
}

/// What a call gets back from the connection: the tool's result, or why the worker
/// could not give one.
type Outcome = Result<Result<String, ToolError>, String>;

struct Pending {
    tx: oneshot::Sender<Outcome>,
    services: TurnServices,
    turn: Arc<crate::calls::context::TurnIdentity>,
    cancel: tokio_util::sync::CancellationToken,
    runtime: tokio::runtime::Handle,
    tool: Arc<str>,
}

/// The last line a worker wrote on stderr (a crash's own explanation), kept by the
/// thread that logs its stderr.
#[derive(Default)]
struct LastWords {
    line: Mutex<Option<String>>,
    /// Disconnected once the logging thread has read the pipe to its end.
    closed: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
}

impl LastWords {
    /// The last line, once the worker has exited: waits (briefly: a process the plugin
    /// started may hold the pipe open) for the logging thread to read what is left.
    fn after_exit(&self) -> Option<String> {
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
pub(crate) struct Connection {
    stream: Mutex<UnixStream>,
    pending: Mutex<HashMap<u64, Pending>>,
    next_id: AtomicU64,
    pid: u32,
    child: Mutex<Option<Child>>,
    alive: AtomicBool,
    /// The host ended it on purpose (a generation retired): not a crash.
    closing: AtomicBool,
    kill_reason: Mutex<Option<String>>,
    owner: Mutex<Weak<WorkerPlugin>>,
    plugin: Arc<str>,
    last_words: Arc<LastWords>,
    confinement: Confinement,
    /// Keeps the worker's processes together; ended with it.
    containment: Containment,
}

impl Connection {
    fn alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    fn send(&self, message: &ToWorker) -> Result<(), String> {
        let frame = protocol::encode(message).map_err(|e| e.to_string())?;
        let stream = self.stream.lock().unwrap_or_else(PoisonError::into_inner);
        protocol::write_frame(&stream, &frame).map_err(|e| {
            let reason = format!("stopped reading its messages ({e})");
            drop(stream);
            self.kill(&reason);
            reason
        })
    }

    /// Whether the worker is dead or being killed (a reason to kill it was given).
    fn dying(&self) -> bool {
        !self.alive()
            || self
                .kill_reason
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_some()
    }

    /// Waits (up to 2 s) until the host has seen this worker end, so that the next
    /// `connection()` starts a fresh one.
    async fn wait_dead(&self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.alive() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Ends the worker with SIGKILL; `reason` goes into every error it causes.
    pub(crate) fn kill(&self, reason: &str) {
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
    fn close(&self) {
        self.closing.store(true, Ordering::Release);
        let _ = self
            .stream
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .shutdown(std::net::Shutdown::Both);
    }

    /// Registers a call; `None` if the worker died meanwhile (its calls were already
    /// failed, so this one would never hear back).
    fn begin(&self, pending: Pending) -> Option<u64> {
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

    fn is_pending(&self, id: u64) -> bool {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(&id)
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
                    let _ = p.tx.send(Ok(result.map_err(ToolError::from)));
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
                crate::plugins::host_services::log_tool_line(
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
                    )
                });
                let Some((services, turn, cancel, runtime)) = found else {
                    let answer = Err(ServiceError::Unavailable(
                        "the call this request belongs to has ended".to_owned(),
                    )
                    .to_wire());
                    let _ = self.send(&ToWorker::ServiceReply { id, answer });
                    return;
                };
                let conn = Arc::clone(self);
                runtime.spawn(async move {
                    let inner = tokio::spawn(answer_service(request, services, turn, cancel));
                    let answer = inner.await.unwrap_or_else(|e| {
                        Err(format!(
                            "the host service failed inside the host ({e}); this is a bug in \
                             toolhost, please report it"
                        ))
                    });
                    // An answer too large to send is refused, so the call waiting for
                    // it hears so now.
                    if let Err(why) = conn.send(&ToWorker::ServiceReply { id, answer }) {
                        let answer = Err(ServiceError::Failed(format!(
                            "the host's answer could not be sent to the worker: {why}"
                        ))
                        .to_wire());
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
            .upgrade();
        let next = match owner {
            Some(owner) => owner.crashed(Some(self), &reason),
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
            let _ = p.tx.send(Err(format!(
                "plugin '{}' stopped during the call to '{}': {what}",
                self.plugin, p.tool
            )));
        }
    }
}

/// "killed by signal 11 (SIGSEGV)" or "exited with status 3".
fn describe(status: ExitStatus) -> String {
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
/// belongs to: the answer as JSON, or the error in `ServiceError::to_wire` form.
async fn answer_service(
    request: ServiceCall,
    services: TurnServices,
    turn: Arc<crate::calls::context::TurnIdentity>,
    cancel: tokio_util::sync::CancellationToken,
) -> Result<Value, String> {
    fn encode<A: Serialize>(answer: Result<A, ServiceError>) -> Result<Value, String> {
        answer
            .and_then(|a| {
                serde_json::to_value(a).map_err(|e| {
                    ServiceError::Failed(format!("could not encode the host's answer: {e}"))
                })
            })
            .map_err(|e| e.to_wire())
    }
    let missing = |what: &str| {
        Err(ServiceError::Unavailable(format!("{what} is not available for this call")).to_wire())
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
                .map_err(|e| e.to_string()),
            None => missing("a child turn"),
        },
        ServiceCall::Host { method, params } => {
            let Some(requests) = services.requests else {
                return missing(&format!("'{method}'"));
            };
            match HostRequest::from_wire(&method, params) {
                Ok(request) => encode(requests.request(&turn, request).await),
                Err(e @ HostRequestError::Unknown(_)) => {
                    Err(ServiceError::Unavailable(e.to_string()).to_wire())
                }
                Err(e) => Err(ServiceError::Failed(e.to_string()).to_wire()),
            }
        }
    }
}

/// How a worker is started: its environment and whether it may use TCP. Derived from the
/// plugin's declared tools after the first start.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Launch {
    env: Vec<(String, String)>,
    network: bool,
    /// Unix-domain sockets allowed (`[isolation] unix_sockets` names the plugin).
    unix_sockets: bool,
}

/// What a fresh worker said.
struct Started {
    conn: Arc<Connection>,
    hello: Hello,
}

#[derive(Default)]
struct SupState {
    /// One worker per profile (`""`: calls that name none), each able to write only that
    /// profile's state folder.
    conns: BTreeMap<String, Arc<Connection>>,
    crashes: VecDeque<Instant>,
    restarts: u64,
    last_exit: Option<String>,
    quarantined: Option<String>,
    not_before: Option<Instant>,
}

/// One plugin file at one generation, run in workers.
pub(crate) struct WorkerPlugin {
    name: Arc<str>,
    file: PathBuf,
    /// The host's verified private copy the workers map; removed with the generation.
    copy: PathBuf,
    sha256: String,
    policy: Arc<IsolationPolicy>,
    launch: Launch,
    tool_names: Vec<String>,
    state: Mutex<SupState>,
    starting: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for WorkerPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerPlugin")
            .field("name", &self.name)
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

/// What the worker loaded, for the loader.
pub(crate) struct WorkerLoad {
    pub(crate) plugin: Arc<WorkerPlugin>,
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) api_version: String,
    pub(crate) abi_version: String,
    pub(crate) tools: Vec<ToolSpec>,
    pub(crate) skipped_tools: Vec<String>,
}

impl WorkerPlugin {
    /// Starts the first worker for `file` (its verified private copy is `copy`) and
    /// reads the plugin's tools. Blocking. If the tools need more than the most restrictive
    /// start gave them (environment variables they name, TCP for a `network` tool), the
    /// worker is started once more with exactly that, before any call.
    pub(crate) fn start(
        file: &Path,
        copy: &Path,
        sha256: &str,
        policy: Arc<IsolationPolicy>,
    ) -> Result<WorkerLoad, String> {
        let strict = Launch {
            env: Vec::new(),
            network: policy.allow_network,
            unix_sockets: policy.allows_unix_sockets(None, file),
        };
        let profile = policy.default_profile.clone();
        let first = spawn(file, copy, sha256, &policy, &strict, None, &profile)?;
        let wanted = launch_for(&first.hello, file, &policy);
        let started = if wanted == strict {
            first
        } else {
            first.conn.close();
            let again = spawn(file, copy, sha256, &policy, &wanted, None, &profile)?;
            if tool_names(&again.hello.tools) != tool_names(&first.hello.tools) {
                again.conn.close();
                return Err("the plugin exported different tools when started again".to_owned());
            }
            again
        };
        let hello = started.hello;
        let plugin = Arc::new(WorkerPlugin {
            name: Arc::from(hello.name.as_str()),
            file: file.to_path_buf(),
            copy: copy.to_path_buf(),
            sha256: sha256.to_owned(),
            policy,
            launch: wanted,
            tool_names: tool_names(&hello.tools),
            state: Mutex::new(SupState {
                conns: BTreeMap::from([(profile, Arc::clone(&started.conn))]),
                ..SupState::default()
            }),
            starting: tokio::sync::Mutex::new(()),
        });
        *started
            .conn
            .owner
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Arc::downgrade(&plugin);
        Ok(WorkerLoad {
            plugin,
            name: hello.name,
            version: hello.version,
            api_version: hello.api_version,
            abi_version: hello.abi_version,
            tools: hello.tools,
            skipped_tools: hello.skipped_tools,
        })
    }

    /// The plugin's tools as host tools.
    pub(crate) fn tools(self: &Arc<Self>, specs: Vec<ToolSpec>) -> Vec<Arc<dyn DynTool>> {
        let origin = ToolOrigin::Plugin {
            plugin: Arc::clone(&self.name),
            file: Arc::new(self.file.clone()),
            sha256: Arc::from(self.sha256.as_str()),
        };
        specs
            .into_iter()
            .enumerate()
            .map(|(index, spec)| {
                Arc::new(WorkerTool {
                    plugin: Arc::clone(self),
                    index: u32::try_from(index).unwrap_or(u32::MAX),
                    name: Arc::from(spec.name.as_str()),
                    spec,
                    origin: origin.clone(),
                }) as Arc<dyn DynTool>
            })
            .collect()
    }

    /// The plugin's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Status of its worker.
    pub(crate) fn status(&self) -> WorkerStatus {
        let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let live: Vec<(&String, &Arc<Connection>)> =
            st.conns.iter().filter(|(_, c)| c.alive()).collect();
        // The default profile's worker first, else any.
        let conn = live
            .iter()
            .find(|(p, _)| **p == self.policy.default_profile)
            .or(live.first())
            .map(|(_, c)| *c);
        let window_start = Instant::now().checked_sub(self.policy.crash_window);
        WorkerStatus {
            pid: conn.map(|c| c.pid),
            state: if st.quarantined.is_some() {
                "quarantined"
            } else if conn.is_some() {
                "running"
            } else {
                "stopped"
            }
            .to_owned(),
            restarts: st.restarts,
            recent_crashes: u32::try_from(
                st.crashes
                    .iter()
                    .filter(|t| window_start.is_none_or(|s| **t >= s))
                    .count(),
            )
            .unwrap_or(u32::MAX),
            last_exit: st.last_exit.clone(),
            quarantined: st.quarantined.clone(),
            sandbox: conn.map(|c| c.confinement.to_string()).unwrap_or_default(),
            confinement: conn.map(|c| c.confinement.clone()).unwrap_or_default(),
            profiles: live.iter().map(|(p, c)| ((*p).clone(), c.pid)).collect(),
            containment: conn.map(|c| c.containment.describe()).unwrap_or_default(),
        }
    }

    /// Lets a quarantined plugin start again (`toolhost reload`); `true` if it was.
    pub(crate) fn lift_quarantine(&self) -> bool {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.crashes.clear();
        st.not_before = None;
        let was = st.quarantined.take().is_some();
        if was {
            tracing::info!(plugin = &*self.name, "quarantine lifted");
        }
        was
    }

    /// A worker of this plugin died with `reason`; returns what happens next, for the
    /// callers' errors.
    /// A worker that failed to start counts too (`conn` is `None`).
    fn crashed(&self, conn: Option<&Connection>, reason: &str) -> String {
        let now = Instant::now();
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(conn) = conn {
            st.conns.retain(|_, c| !std::ptr::eq(&**c, conn));
        }
        st.last_exit = Some(reason.to_owned());
        st.crashes.push_back(now);
        let window = self.policy.crash_window;
        while st
            .crashes
            .front()
            .is_some_and(|t| now.duration_since(*t) > window)
        {
            st.crashes.pop_front();
        }
        let n = st.crashes.len();
        let next = if n > self.policy.max_crashes as usize {
            let why = format!(
                "its worker failed {n} times within {} s (last: {reason})",
                window.as_secs()
            );
            st.quarantined = Some(why);
            format!(
                "; the plugin is now quarantined ({n} failures within {} s): its tools are \
                 refused until its file changes or `toolhost reload`",
                window.as_secs()
            )
        } else {
            let delay = backoff(n);
            st.not_before = Some(now + delay);
            if delay.is_zero() {
                "; a fresh worker starts on the next call".to_owned()
            } else {
                format!(
                    "; a fresh worker starts on the next call, after {} ms",
                    delay.as_millis()
                )
            }
        };
        tracing::warn!(
            plugin = &*self.name,
            "the plugin's worker {}{next}",
            crate::text::for_log(reason)
        );
        next
    }

    /// The live connection of `profile`'s worker, starting one if none runs.
    async fn connection(self: &Arc<Self>, profile: &str) -> Result<Arc<Connection>, String> {
        loop {
            let wait = {
                let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(conn) = st.conns.get(profile).filter(|c| c.alive()) {
                    return Ok(Arc::clone(conn));
                }
                if let Some(why) = &st.quarantined {
                    return Err(format!(
                        "plugin '{}' is quarantined: {why}. Fix the plugin and replace its \
                         file, or run `toolhost reload` to let it start again",
                        self.name
                    ));
                }
                st.not_before
                    .map(|t| t.saturating_duration_since(Instant::now()))
            };
            if let Some(wait) = wait.filter(|w| !w.is_zero()) {
                tokio::time::sleep(wait).await;
            }
            let _one_at_a_time = self.starting.lock().await;
            {
                let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                if st.conns.get(profile).is_some_and(|c| c.alive()) || st.quarantined.is_some() {
                    continue;
                }
                if st.not_before.is_some_and(|t| t > Instant::now()) {
                    continue;
                }
            }
            let this = Arc::clone(self);
            let for_profile = profile.to_owned();
            let started = tokio::task::spawn_blocking(move || this.restart(&for_profile))
                .await
                .unwrap_or_else(|e| Err(format!("starting the worker failed: {e}")));
            match started {
                Ok(conn) => {
                    let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                    let fresh = st
                        .conns
                        .insert(profile.to_owned(), Arc::clone(&conn))
                        .is_none();
                    // A profile's first worker is a start, not a restart.
                    if !fresh || st.last_exit.is_some() {
                        st.restarts += 1;
                    }
                    st.not_before = None;
                    tracing::info!(plugin = &*self.name, pid = conn.pid, "worker restarted");
                    return Ok(conn);
                }
                Err(e) => {
                    let reason = format!("could not be started again: {e}");
                    let next = self.crashed(None, &reason);
                    return Err(format!("plugin '{}': its worker {reason}{next}", self.name));
                }
            }
        }
    }

    /// Starts a fresh worker for `profile` (blocking) and checks it exports what the
    /// first did.
    fn restart(self: &Arc<Self>, profile: &str) -> Result<Arc<Connection>, String> {
        let started = spawn(
            &self.file,
            &self.copy,
            &self.sha256,
            &self.policy,
            &self.launch,
            Some(Arc::clone(&self.name)),
            profile,
        )?;
        if tool_names(&started.hello.tools) != self.tool_names {
            started.conn.close();
            return Err("the plugin exported different tools than when it was loaded".to_owned());
        }
        *started
            .conn
            .owner
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Arc::downgrade(self);
        Ok(started.conn)
    }
}

impl Drop for WorkerPlugin {
    fn drop(&mut self) {
        let conns = std::mem::take(
            &mut self
                .state
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .conns,
        );
        for conn in conns.into_values() {
            conn.close();
        }
        let _ = std::fs::remove_file(&self.copy);
    }
}

impl Connection {
    fn new(
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
            owner: Mutex::new(Weak::new()),
            plugin,
            last_words,
            confinement,
            containment,
        }
    }
}

/// Exponential backoff before the n-th restart within the crash window: none for the
/// first, then 100 ms doubling up to 5 s.
fn backoff(n: usize) -> Duration {
    if n <= 1 {
        return Duration::ZERO;
    }
    let exp = u32::try_from(n - 2).unwrap_or(u32::MAX).min(6);
    Duration::from_millis(100u64 << exp).min(Duration::from_secs(5))
}

fn tool_names(tools: &[ToolSpec]) -> Vec<String> {
    tools.iter().map(|t| t.name.clone()).collect()
}

/// The environment and network a plugin's declared tools need: the variables their
/// requirements name (where the host has them), `PATH` if they need programs, TCP if one
/// is a `network` tool or the config allows it for all.
fn launch_for(hello: &Hello, file: &Path, policy: &IsolationPolicy) -> Launch {
    if policy.inspect {
        return Launch {
            env: Vec::new(),
            network: false,
            unix_sockets: false,
        };
    }
    let tools = &hello.tools;
    let mut names: Vec<&str> = tools
        .iter()
        .flat_map(|t| t.requirements.env.iter().map(String::as_str))
        .collect();
    if tools.iter().any(|t| !t.requirements.programs.is_empty()) {
        names.push("PATH");
    }
    names.sort_unstable();
    names.dedup();
    let env = names
        .into_iter()
        .filter_map(|name| std::env::var(name).ok().map(|v| (name.to_owned(), v)))
        .collect();
    Launch {
        env,
        network: policy.allow_network || tools.iter().any(|t| t.risk == Risk::Network),
        unix_sockets: policy.allows_unix_sockets(Some(&hello.name), file),
    }
}

/// The sandbox rules of a worker for `copy`.
/// The profile whose worker serves a call for `profile`: itself, or `""` (no state
/// folder) for a name that is not one plain folder name.
fn worker_profile(profile: &str) -> &str {
    // The rule profile names follow (`Profile::load`).
    let plain =
        !profile.is_empty() && !profile.starts_with('.') && !profile.contains(['/', '\\', '\0']);
    if plain { profile } else { "" }
}

/// The sandbox rules of `profile`'s worker for `copy`: it may write that profile's state
/// folder (and the configured write paths), no other profile's.
fn rules_for(copy: &Path, policy: &IsolationPolicy, network: bool, profile: &str) -> SandboxRules {
    let mut read = sandbox::system_read_paths();
    read.push(copy.to_path_buf());
    read.extend(policy.read_paths.iter().cloned());
    // Writing to /dev/null is how output is thrown away (`Stdio::null()`).
    let mut write: Vec<PathBuf> = vec![PathBuf::from("/dev/null")];
    let state = policy
        .profiles_dir
        .as_ref()
        .filter(|_| !worker_profile(profile).is_empty())
        .map(|dir| dir.join(profile).join("state"));
    if let Some(dir) = &state {
        // A state folder the host would make on the plugin's first `state_dir()` must
        // exist now for the sandbox to allow it (made 0700, as the host makes it). One
        // that was refused (a link: the sandbox would allow its target) is left out.
        match crate::sys::private::ensure_private_dir(dir) {
            Ok(()) => write.push(dir.clone()),
            Err(e) => tracing::warn!(
                "could not create the state folder {} for plugin workers, who will not be \
                 able to write there: {e}",
                dir.display()
            ),
        }
    }
    write.extend(policy.write_paths.iter().cloned());
    SandboxRules {
        read,
        write,
        network,
    }
}

/// Starts a worker and reads its hello. Blocking.
fn spawn(
    file: &Path,
    copy: &Path,
    sha256: &str,
    policy: &IsolationPolicy,
    launch: &Launch,
    name: Option<Arc<str>>,
    profile: &str,
) -> Result<Started, String> {
    let (host_end, worker_end) =
        UnixStream::pair().map_err(|e| format!("could not create a socketpair: {e}"))?;
    let containment = containment::make(
        policy.containment,
        policy.memory_limit_bytes,
        policy.max_processes,
    )
    .map_err(|e| e.to_string())?;
    let mut command = Command::new(&policy.worker_exe);
    command
        .arg("__worker")
        .arg("--fd")
        .arg("3")
        .env_clear()
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // The worker's end becomes its descriptor 3; whatever plugin code prints goes to the
    // log, never to the host's stdout (the MCP stdio protocol).
    crate::sys::process::pass_socket(&mut command, &worker_end, 3, containment.procs_fds());
    let mut child = crate::sys::process::spawn_from_keeper(command).map_err(|e| {
        format!(
            "could not start a worker ({}): {e}",
            policy.worker_exe.display()
        )
    })?;
    drop(worker_end);
    let pid = child.id();
    crate::sys::workers::register(pid, containment.cgroup_paths());
    let label: Arc<OnceLock<Arc<str>>> = Arc::new(OnceLock::new());
    if let Some(name) = name {
        let _ = label.set(name);
    }
    let last_words: Arc<LastWords> = Arc::default();
    if let Some(stderr) = child.stderr.take() {
        let label = Arc::clone(&label);
        let last_words = Arc::clone(&last_words);
        let (closed_tx, closed_rx) = std::sync::mpsc::channel::<()>();
        *last_words
            .closed
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(closed_rx);
        let file_name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let _ = std::thread::Builder::new()
            .name("toolhost-worker-log".to_owned())
            .spawn(move || {
                // Dropped at the end of the pipe: `LastWords::after_exit` stops waiting.
                let _closed = closed_tx;
                let mut limit = log_limit::LogLimit::new(Instant::now());
                let dropped = |plugin: &str, n: u64| {
                    tracing::info!(
                        target: "toolhost::worker",
                        plugin,
                        pid,
                        "dropped {n} lines of the worker's output (more than {} at once or \
                         {} a second)",
                        log_limit::BURST,
                        log_limit::PER_SECOND
                    );
                };
                for line in log_limit::lines(stderr) {
                    let plugin = label.get().map_or(file_name.as_str(), |n| n);
                    let admit = limit.admit(Instant::now());
                    if let Some(n) = admit.report_dropped {
                        dropped(plugin, n);
                    }
                    if admit.log {
                        let line = log_limit::for_log(&line);
                        let line = crate::text::for_log(&line);
                        tracing::info!(target: "toolhost::worker", plugin, pid, "{line}");
                    }
                    // Rust's hint under a panic or allocation failure says nothing
                    // about what happened: the line before it does.
                    if !line.trim().is_empty()
                        && !line.starts_with("note: run with `RUST_BACKTRACE")
                    {
                        *last_words
                            .line
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner) =
                            Some(line.chars().take(300).collect());
                    }
                }
                if let Some(n) = limit.finish() {
                    dropped(label.get().map_or(file_name.as_str(), |n| n), n);
                }
            });
    }
    let fail = |child: &mut Child, message: String| {
        let _ = child.kill();
        let _ = child.wait();
        containment.kill_all(pid);
        crate::sys::workers::unregister(pid);
        message
    };
    if let Err(e) = host_end.set_nonblocking(true) {
        return Err(fail(
            &mut child,
            format!("could not set up the socket: {e}"),
        ));
    }
    let reader_end = match host_end.try_clone() {
        Ok(s) => s,
        Err(e) => {
            return Err(fail(
                &mut child,
                format!("could not set up the socket: {e}"),
            ));
        }
    };
    let network = launch.network;
    let init = ToWorker::Init(Box::new(Init {
        protocol: PROTOCOL_VERSION,
        file: file.to_path_buf(),
        copy: copy.to_path_buf(),
        sha256: sha256.to_owned(),
        limits: Limits {
            memory_bytes: policy.memory_limit_bytes,
            max_processes: policy.max_processes,
            open_files: policy.open_files,
        },
        sandbox: policy.sandbox,
        rules: rules_for(copy, policy, network, profile),
        unix_sockets: launch.unix_sockets,
        containment: containment.kind(),
        log_filter: policy.log_filter.clone(),
    }));
    let sent = protocol::encode(&init).and_then(|f| protocol::write_frame(&host_end, &f));
    if let Err(e) = sent {
        return Err(fail(
            &mut child,
            format!("could not send the worker its orders: {e}"),
        ));
    }
    let mut reader = FrameReader::new(reader_end);
    let hello = match reader.next::<FromWorker>(Some(policy.start_timeout)) {
        Ok(Some(FromWorker::Hello(hello))) => *hello,
        Ok(Some(FromWorker::LoadFailed { message, .. })) => {
            return Err(fail(&mut child, message));
        }
        Ok(Some(other)) => {
            return Err(fail(
                &mut child,
                format!("the worker said {other:?} before hello"),
            ));
        }
        Ok(None) => {
            let status = child.wait().map(describe).unwrap_or_default();
            containment.kill_all(pid);
            crate::sys::workers::unregister(pid);
            let words = last_words
                .after_exit()
                .map(|w| format!(" (its last words: {w})"))
                .unwrap_or_default();
            return Err(format!(
                "the plugin's worker {status} while loading it{words}: the plugin crashes \
                 when it is loaded; fix the plugin"
            ));
        }
        Err(e) => {
            return Err(fail(
                &mut child,
                format!(
                    "the worker did not load the plugin within {} s ({e}); it was killed",
                    policy.start_timeout.as_secs()
                ),
            ));
        }
    };
    if hello.protocol != PROTOCOL_VERSION {
        return Err(fail(
            &mut child,
            format!(
                "the worker speaks protocol {}, this host {PROTOCOL_VERSION}",
                hello.protocol
            ),
        ));
    }
    let mut confinement = hello.confinement.clone();
    if let Containment::Cgroup(cgroup) = &containment {
        let where_ = cgroup.describe();
        if cgroup.memory_bytes > 0 {
            confinement.set(Protection::holds(
                "memory",
                format!(
                    "{where_}: {} MiB for all its processes, and RLIMIT_AS per process",
                    cgroup.memory_bytes >> 20
                ),
            ));
        }
        if cgroup.max_processes > 0 {
            confinement.set(Protection::holds(
                "processes",
                format!("{where_}: pids.max {}", cgroup.max_processes),
            ));
        }
        confinement.set(Protection::holds(
            "cleanup",
            format!("{where_}: every process in it is killed with the worker"),
        ));
    }
    if policy.sandbox != SandboxMode::Off {
        tracing::debug!(plugin = %hello.name, pid, "{confinement}");
    }
    let plugin_name: Arc<str> = Arc::from(hello.name.as_str());
    let _ = label.set(Arc::clone(&plugin_name));
    let conn = Arc::new(Connection::new(
        host_end,
        pid,
        Some(child),
        plugin_name,
        last_words,
        confinement,
        containment,
    ));
    // The worker's end is learned from the process itself, not only from the socket (a
    // process the plugin started could hold the socket open): shutting the socket down
    // ends the reader below, which reaps the worker and fails its calls.
    if let Ok(watched) = conn
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
    let reading = Arc::clone(&conn);
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
        conn.kill("the host could not start a thread to read it");
        conn.finish();
        return Err(format!("could not start a thread for the worker: {e}"));
    }
    Ok(Started { conn, hello })
}

/// A tool of a plugin that runs in workers.
pub(crate) struct WorkerTool {
    plugin: Arc<WorkerPlugin>,
    index: u32,
    name: Arc<str>,
    spec: ToolSpec,
    origin: ToolOrigin,
}

/// Tells the worker to drop a call whose future the host dropped while the worker still
/// runs it, and kills the worker if the call does not end within the allowed time.
struct InFlight {
    conn: Arc<Connection>,
    id: u64,
    kill_after: Duration,
    tool: Arc<str>,
    done: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.done || !self.conn.is_pending(self.id) {
            return;
        }
        let _ = self.conn.send(&ToWorker::Abandon { id: self.id });
        let (conn, id, kill_after, tool) = (
            Arc::clone(&self.conn),
            self.id,
            self.kill_after,
            Arc::clone(&self.tool),
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                tokio::time::sleep(kill_after).await;
                if conn.alive() && conn.is_pending(id) {
                    conn.kill(&format!(
                        "its call to '{tool}' was still running {} ms after its caller gave \
                         up (the only way to stop a stuck native call)",
                        kill_after.as_millis()
                    ));
                }
            });
        }
    }
}

#[async_trait]
impl DynTool for WorkerTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn origin(&self) -> &ToolOrigin {
        &self.origin
    }

    fn isolated(&self) -> bool {
        true
    }

    async fn call(&self, ctx: &CallContext, args: Value) -> Result<String, ToolError> {
        let args = serde_json::to_string(&args)
            .map_err(|e| ToolError::InvalidArgs(format!("could not encode the arguments: {e}")))?;
        // A call with a profile's state (the agent, MCP, `toolhost call --profile`) runs in
        // that profile's worker; one without (a control-socket call, a test) in the
        // default profile's.
        let profile = match &ctx.services.requests {
            Some(_) if !worker_profile(&ctx.turn.profile_id).is_empty() => {
                ctx.turn.profile_id.as_str()
            }
            _ => self.plugin.policy.default_profile.as_str(),
        };
        // A call that never reached its worker (it died as the call started, or the frame
        // could not be written to it) is tried once more on a fresh worker: nothing of it
        // ran, so nothing runs twice.
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.try_call(ctx, profile, &args).await {
                Err(NotSent::Retry(conn, why)) if attempt == 1 => {
                    tracing::debug!(
                        plugin = &*self.plugin.name,
                        "a call did not reach its worker ({why}); trying a fresh worker"
                    );
                    conn.wait_dead().await;
                }
                Err(NotSent::Retry(_, why) | NotSent::Fail(why)) => {
                    return Err(ToolError::Failed(why));
                }
                Ok(result) => return result,
            }
        }
    }
}

/// Why a call did not reach its worker.
enum NotSent {
    /// The worker died before it could get the call: a fresh one may take it.
    Retry(Arc<Connection>, String),
    /// The call cannot be sent at all (too large, no worker can start).
    Fail(String),
}

impl WorkerTool {
    /// One try: the profile's worker, the call sent to it, its answer.
    async fn try_call(
        &self,
        ctx: &CallContext,
        profile: &str,
        args: &str,
    ) -> Result<Result<String, ToolError>, NotSent> {
        let args = args.to_owned();
        let conn = self
            .plugin
            .connection(profile)
            .await
            .map_err(NotSent::Fail)?;
        let (tx, mut rx) = oneshot::channel();
        let begun = conn.begin(Pending {
            tx,
            services: ctx.services.clone(),
            turn: Arc::clone(&ctx.turn),
            cancel: ctx.cancel.clone(),
            runtime: tokio::runtime::Handle::current(),
            tool: Arc::clone(&self.name),
        });
        let Some(id) = begun else {
            return Err(NotSent::Retry(
                Arc::clone(&conn),
                format!(
                    "plugin '{}' lost its worker as the call started; the next call starts \
                     a fresh one",
                    self.plugin.name
                ),
            ));
        };
        let mut in_flight = InFlight {
            conn: Arc::clone(&conn),
            id,
            kill_after: self.plugin.policy.kill_after_cancel,
            tool: Arc::clone(&self.name),
            done: false,
        };
        let frame = CallFrame {
            id,
            tool: self.index,
            args,
            profile_id: ctx.turn.profile_id.clone(),
            session_id: ctx.turn.session_id.clone(),
            model: ctx.turn.model.clone(),
            caller: ctx.services.caller.is_some(),
            child_turns: ctx.services.child_turns.is_some(),
            requests: ctx.services.requests.is_some(),
        };
        // A call whose frame is refused (too large to encode, or the write failed, which
        // also kills the worker) fails now, not at its timeout.
        if let Err(why) = conn.send(&ToWorker::Call(Box::new(frame))) {
            in_flight.done = true;
            conn.pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
            let message = format!(
                "plugin '{}': the call to '{}' could not be sent to its worker: {why}",
                self.plugin.name, self.name
            );
            // A write that failed killed the worker; a frame too large to encode did not.
            return Err(if conn.dying() {
                NotSent::Retry(Arc::clone(&conn), message)
            } else {
                NotSent::Fail(message)
            });
        }
        // A quick tool answers within microseconds: look for it for a moment before
        // sleeping, which would cost a wake-up of this thread (tens of microseconds on a
        // small VM) on top of the worker's.
        let spin_until = std::time::Instant::now() + protocol::SPIN;
        let mut early = None;
        while std::time::Instant::now() < spin_until {
            match rx.try_recv() {
                Ok(outcome) => {
                    early = Some(Ok(outcome));
                    break;
                }
                Err(oneshot::error::TryRecvError::Empty) => std::thread::yield_now(),
                Err(oneshot::error::TryRecvError::Closed) => break,
            }
        }
        let outcome = if let Some(outcome) = early {
            outcome
        } else {
            self.wait(&conn, id, ctx, &mut rx).await
        };
        in_flight.done = true;
        Ok(match outcome {
            Ok(Ok(result)) => result,
            Ok(Err(why)) => Err(ToolError::Failed(why)),
            Err(_) => Err(ToolError::Failed(format!(
                "plugin '{}' lost its worker during the call",
                self.plugin.name
            ))),
        })
    }
}

impl WorkerTool {
    /// Waits for the call's answer; on a cancel, tells the worker and kills it if the call
    /// ignores that for `kill_after_cancel`.
    async fn wait(
        &self,
        conn: &Connection,
        id: u64,
        ctx: &CallContext,
        rx: &mut oneshot::Receiver<Outcome>,
    ) -> Result<Outcome, oneshot::error::RecvError> {
        let kill_after = self.plugin.policy.kill_after_cancel;
        tokio::select! {
            outcome = &mut *rx => outcome,
            () = ctx.cancel.cancelled() => {
                let _ = conn.send(&ToWorker::Cancel { id });
                match tokio::time::timeout(kill_after, &mut *rx).await {
                    Ok(outcome) => outcome,
                    Err(_) => {
                        conn.kill(&format!(
                            "its call to '{}' ignored cancellation for {} ms (the only way \
                             to stop a stuck native call)",
                            self.name,
                            kill_after.as_millis()
                        ));
                        rx.await
                    }
                }
            }
        }
    }
}
