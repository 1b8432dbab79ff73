//! The plugin worker process (`toolhost __worker`): confines itself (resource limits,
//! no new privileges, the Landlock sandbox), loads one plugin file with the same loader
//! checks as the host, and serves its tools over the socketpair it inherited. Plugin code
//! runs here exactly as in a host: on the same plugin threads, with the same host-service
//! glue; only the services themselves are proxies that ask the host (`proxy.rs`).
//!
//! Everything that can make the worker useless ends it: the host closing its end, a
//! message it cannot read, a write that fails. The host notices and restarts it.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::protocol::{
    self, CallFrame, FrameReader, FromWorker, Hello, Init, PROTOCOL_VERSION, ServiceCall, ToWorker,
    WireToolError,
};
use super::proxy::{ProxyCaller, ProxyChildTurns, ProxyRequests};
use crate::calls::context::{CallContext, TurnIdentity, TurnServices};
use crate::calls::tool::ToolError;
use crate::plugins::call_pool;
use crate::plugins::error::PluginLoadError;
use crate::plugins::loader;
use crate::plugins::plugin_tool::PluginTool;
use crate::sys::rlimit::{self, Resource};
use crate::sys::sandbox;
use toolhost_plugin_api::ffi::FfiCallResult;

/// How long a fresh worker waits for its `init` before it gives up.
const INIT_TIMEOUT: Duration = Duration::from_secs(30);

/// The worker's end of the connection: frames out, and the service requests waiting for
/// the host's answer.
pub(crate) struct Link {
    stream: Mutex<UnixStream>,
    services: Mutex<HashMap<u64, oneshot::Sender<Result<Value, String>>>>,
    next_service: std::sync::atomic::AtomicU64,
}

impl Link {
    /// Sends `message`; a worker whose host is gone has nothing left to do and exits. A
    /// reply the protocol cannot carry (over [`protocol::MAX_FRAME`]) becomes an error
    /// reply for its call, so the host fails the call at once instead of at its timeout.
    pub(crate) fn send(&self, message: &FromWorker) {
        let Err(e) = self.try_send(message) else {
            return;
        };
        match message {
            FromWorker::Reply { id, result } => {
                let message = match e {
                    protocol::FrameError::TooLarge(frame) => {
                        let (what, len) = match result {
                            Ok(output) => ("result", output.len()),
                            Err(error) => ("error message", error.message.len()),
                        };
                        format!(
                            "the {what} is {} bytes, more than the {} MiB a worker may send; \
                             return less or write it to a file",
                            toolhost_plugin_api::__private::grouped(if len > protocol::MAX_FRAME {
                                len
                            } else {
                                frame
                            }),
                            protocol::MAX_FRAME >> 20
                        )
                    }
                    other => format!("the worker could not send the result: {other}"),
                };
                let refusal = FromWorker::Reply {
                    id: *id,
                    result: Err(WireToolError {
                        invalid_args: false,
                        message,
                    }),
                };
                if let Err(e) = self.try_send(&refusal) {
                    tracing::error!("could not send the host a call's refusal: {e}");
                }
            }
            _ => tracing::error!("could not encode a message for the host: {e}"),
        }
    }

    /// Sends `message`: `Err` if it cannot be encoded (too large); a failed write means the
    /// host is gone, and the worker exits.
    fn try_send(&self, message: &FromWorker) -> Result<(), protocol::FrameError> {
        let frame = protocol::encode(message)?;
        let stream = self.stream.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(e) = protocol::write_frame(&stream, &frame) {
            tracing::debug!("the host is gone ({e}); the worker ends");
            exit_now(0);
        }
        Ok(())
    }

    /// Asks the host for a service on behalf of call `call` and waits for the answer. A
    /// request too large to send fails at once.
    pub(crate) async fn service(&self, call: u64, request: ServiceCall) -> Result<Value, String> {
        let id = self
            .next_service
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.services
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, tx);
        if let Err(e) = self.try_send(&FromWorker::Service { id, call, request }) {
            self.services
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
            return Err(toolhost_plugin_api::ServiceError::Failed(format!(
                "the request could not be sent to the host: {e}"
            ))
            .to_wire());
        }
        rx.await.unwrap_or_else(|_| {
            Err(toolhost_plugin_api::ServiceError::Unavailable(
                "the host ended the worker before it answered".to_owned(),
            )
            .to_wire())
        })
    }
}

use crate::sys::process::exit_now;

/// The worker's `main`: serves on descriptor `fd` until the host closes it. Returns only
/// on a failure before serving started (the exit code).
pub fn run(fd: RawFd) -> i32 {
    let stream = match crate::sys::process::inherited_socket(fd) {
        Ok(stream) => stream,
        Err(e) => {
            eprintln!("toolhost worker: {e} (this command is started by toolhost itself)");
            return 2;
        }
    };
    if let Err(e) = stream.set_nonblocking(true) {
        eprintln!("toolhost worker: descriptor {fd} is not a usable socket: {e}");
        return 2;
    }
    let reader_stream = match stream.try_clone() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("toolhost worker: could not duplicate the socket: {e}");
            return 2;
        }
    };
    let link = Arc::new(Link {
        stream: Mutex::new(stream),
        services: Mutex::new(HashMap::new()),
        next_service: std::sync::atomic::AtomicU64::new(0),
    });
    let mut reader = FrameReader::new(reader_stream);
    let init: Init = match reader.next(Some(INIT_TIMEOUT)) {
        Ok(Some(ToWorker::Init(init))) => *init,
        Ok(Some(other)) => {
            eprintln!("toolhost worker: expected init, got {other:?}");
            return 2;
        }
        Ok(None) => return 0,
        Err(e) => {
            eprintln!("toolhost worker: no init from the host: {e}");
            return 2;
        }
    };
    init_logging(&init.log_filter);
    let failed = |message: String, may_pass_later: bool| FromWorker::LoadFailed {
        protocol: PROTOCOL_VERSION,
        message,
        may_pass_later,
    };
    if init.protocol != PROTOCOL_VERSION {
        link.send(&failed(
            format!(
                "the worker speaks protocol {PROTOCOL_VERSION}, the host {}: the toolhost \
                 binary changed under the running host; restart toolhost",
                init.protocol
            ),
            false,
        ));
        return 2;
    }
    // Confinement first: no thread exists yet (Landlock binds this thread and the threads
    // it starts), and no plugin code has run.
    if let Err(e) = confine(&init) {
        link.send(&failed(format!("{}: {e}", init.file.display()), false));
        return 2;
    }
    let sandbox = match sandbox::apply(init.sandbox, &init.rules) {
        Ok(outcome) => {
            if matches!(
                outcome,
                sandbox::SandboxOutcome::Partial { .. }
                    | sandbox::SandboxOutcome::NotSupported { .. }
            ) {
                tracing::warn!(file = %init.file.display(), "{outcome}");
            }
            outcome.to_string()
        }
        Err(e) => {
            link.send(&failed(format!("{}: {e}", init.file.display()), false));
            return 2;
        }
    };
    let (plugin, tools) =
        match loader::load_library_tools(&init.file, &init.copy, &init.sha256, true, false) {
            Ok(loaded) => loaded,
            Err(kind) => {
                let error = PluginLoadError {
                    file: init.file.clone(),
                    kind,
                };
                link.send(&failed(error.to_string(), false));
                return 1;
            }
        };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("toolhost-worker")
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            link.send(&failed(
                format!("could not start the worker's runtime: {e}"),
                true,
            ));
            return 2;
        }
    };
    link.send(&FromWorker::Hello(Box::new(Hello {
        protocol: PROTOCOL_VERSION,
        name: plugin.name.clone(),
        version: plugin.version.clone(),
        api_version: plugin.api_version.clone(),
        abi_version: plugin.abi_version.clone(),
        tools: plugin.tools.iter().map(|t| t.spec().clone()).collect(),
        skipped_tools: plugin.skipped_tools.clone(),
        sandbox,
        pid: std::process::id(),
    })));
    serve(&mut reader, &link, &tools, &runtime)
}

/// Resource limits and no new privileges, from `init`.
fn confine(init: &Init) -> std::io::Result<()> {
    rlimit::set_limit(Resource::Core, 0)?;
    if init.limits.memory_bytes > 0 {
        rlimit::set_limit(Resource::Data, init.limits.memory_bytes)?;
    }
    if init.limits.open_files > 0 {
        rlimit::set_limit(Resource::OpenFiles, init.limits.open_files)?;
    }
    rlimit::no_new_privs()
}

/// The worker's log goes to its stderr, which the host reads into its own log with the
/// plugin's name. Tool log lines travel as messages instead (the host logs those).
fn init_logging(filter: &str) {
    let filter = format!("{filter},toolhost::plugins::host_services=off");
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .without_time()
        .with_target(false)
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .try_init();
}

/// Reads the host's messages until it closes its end; then ends the process.
fn serve(
    reader: &mut FrameReader,
    link: &Arc<Link>,
    tools: &[Arc<PluginTool>],
    runtime: &tokio::runtime::Runtime,
) -> i32 {
    let calls: Calls = Arc::default();
    loop {
        match reader.next::<ToWorker>(None) {
            Ok(Some(ToWorker::Call(frame))) => {
                start_call(*frame, link, tools, runtime, &calls);
            }
            Ok(Some(ToWorker::Cancel { id })) => {
                if let Some(running) = calls
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get(&id)
                {
                    running.cancel.cancel();
                }
            }
            Ok(Some(ToWorker::Abandon { id })) => {
                let running = calls
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&id);
                if let Some(running) = running {
                    abandon(running);
                }
            }
            Ok(Some(ToWorker::ServiceReply { id, answer })) => {
                let waiting = link
                    .services
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&id);
                if let Some(tx) = waiting {
                    let _ = tx.send(answer);
                }
            }
            Ok(Some(ToWorker::Init(_))) => {
                tracing::error!("a second init from the host; the worker ends");
                exit_now(2);
            }
            Ok(None) => exit_now(0),
            Err(e) => {
                tracing::error!("the host's messages cannot be read ({e}); the worker ends");
                exit_now(2);
            }
        }
    }
}

/// A call running in the worker.
struct Running {
    cancel: CancellationToken,
    detached: Option<call_pool::Detached>,
}

type Calls = Arc<Mutex<HashMap<u64, Running>>>;

/// Gives an abandoned call up: its future is dropped on its plugin thread (as in a host),
/// and the host hears so once it is gone. While its plugin code is stuck in a `poll` that
/// never returns, the host hears nothing and ends the worker, the only way to stop it.
fn abandon(running: Running) {
    running.cancel.cancel();
    if let Some(detached) = running.detached {
        detached.give_up();
    }
}

/// Starts a call on a plugin thread, which answers the host itself when it is done: no
/// runtime thread is woken on the way.
fn start_call(
    frame: CallFrame,
    link: &Arc<Link>,
    tools: &[Arc<PluginTool>],
    runtime: &tokio::runtime::Runtime,
    calls: &Calls,
) {
    let id = frame.id;
    let Some(tool) = tools.get(frame.tool as usize).cloned() else {
        link.send(&FromWorker::Reply {
            id,
            result: Err(WireToolError {
                invalid_args: false,
                message: format!("the worker has no tool #{}", frame.tool),
            }),
        });
        return;
    };
    let cancel = CancellationToken::new();
    let services = TurnServices {
        caller: frame.caller.then(|| {
            Arc::new(ProxyCaller::new(Arc::clone(link), id))
                as Arc<dyn crate::calls::context::CallerChannel>
        }),
        child_turns: frame.child_turns.then(|| {
            Arc::new(ProxyChildTurns::new(Arc::clone(link), id))
                as Arc<dyn crate::calls::context::ChildTurnService>
        }),
        requests: frame.requests.then(|| {
            Arc::new(ProxyRequests::new(Arc::clone(link), id))
                as Arc<dyn crate::calls::context::HostRequests>
        }),
    };
    let ctx = CallContext {
        turn: Arc::new(TurnIdentity {
            profile_id: frame.profile_id,
            session_id: frame.session_id,
            model: frame.model,
        }),
        cancel: cancel.clone(),
        services,
    };
    let handle = runtime.handle().clone();
    let future = tool.prepare(&ctx, frame.args, Some(handle.clone()));
    drop(ctx);
    calls.lock().unwrap_or_else(PoisonError::into_inner).insert(
        id,
        Running {
            cancel,
            detached: None,
        },
    );
    let (name, plugin) = tool.names();
    let on_done = {
        let (link, calls) = (Arc::clone(link), Arc::clone(calls));
        Box::new(move |outcome: Result<FfiCallResult, String>| {
            calls
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
            let result = match outcome {
                Ok(outcome) => tool.outcome(outcome),
                Err(e) => Err(ToolError::Failed(e)),
            };
            link.send(&FromWorker::Reply {
                id,
                result: result.map_err(WireToolError::from),
            });
        })
    };
    match call_pool::start(name, plugin, Some(handle), future, on_done) {
        Ok(detached) => {
            if let Some(running) = calls
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_mut(&id)
            {
                running.detached = Some(detached);
            }
        }
        Err(message) => {
            calls
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
            link.send(&FromWorker::Reply {
                id,
                result: Err(WireToolError {
                    invalid_args: false,
                    message,
                }),
            });
        }
    }
}
