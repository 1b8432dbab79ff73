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
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::link::Link;
use super::protocol::{
    CallFrame, FrameReader, FromWorker, Hello, Init, PROTOCOL_VERSION, ToWorker, WireOutcome,
    WireToolError,
};
use super::proxy::{ProxyCaller, ProxyChildTurns, ProxyRequests};
use crate::plugins::load::error::PluginLoadError;
use crate::plugins::load::loader;
use crate::plugins::run::call_pool::{self, PoolError};
use crate::plugins::run::plugin_tool::{Answered, PluginTool};
use crate::sys::confinement::{Confinement, Protection};
use crate::sys::containment::ContainmentKind;
use crate::sys::pid_namespace;
use crate::sys::rlimit::{self, Resource};
use crate::sys::sandbox::caps;
use crate::sys::sandbox::seccomp;
use crate::sys::sandbox::{self, SandboxMode, SandboxOutcome};
use toolhost_calls::context::{CallContext, TurnIdentity, TurnServices};
use toolhost_calls::tool::ToolError;

/// How long a fresh worker waits for its `init` before it gives up.
const INIT_TIMEOUT: Duration = Duration::from_secs(30);

use crate::sys::process::exit_now;

/// The worker's `main`: serves on descriptor `fd` until the host closes it. Returns only
/// on a failure before serving started (the exit code).
pub fn run(fd: RawFd) -> i32 {
    // Only the standard descriptors and the protocol socket; the socket is not passed on
    // to programs the plugin runs (a child holding it would hide the worker's death).
    crate::sys::process::close_from(fd + 1);
    let stream = match crate::sys::process::inherited_socket(fd) {
        Ok(stream) => stream,
        Err(e) => {
            eprintln!("toolhost worker: {e} (this command is started by toolhost itself)");
            return 2;
        }
    };
    if let Err(e) = crate::sys::process::set_cloexec(fd) {
        eprintln!("toolhost worker: could not mark descriptor {fd} close-on-exec: {e}");
        return 2;
    }
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
    let link = Arc::new(Link::new(stream));
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
    // Confinement first: no thread exists yet (Landlock and seccomp bind this thread and
    // the threads it starts; the PID namespace forks), and no plugin code has run.
    let confinement = match confine(&init, fd) {
        Ok(confinement) => confinement,
        Err(e) => {
            link.send(&failed(format!("{}: {e}", init.file.display()), false));
            return 2;
        }
    };
    if !confinement.fully_enforced() && init.sandbox != SandboxMode::Off {
        tracing::warn!(file = %init.file.display(), "{confinement}");
    }
    let (plugin, tools) =
        match loader::load_library_tools(&init.file, &init.copy, &init.sha256, true, false, None) {
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
        settings_schema: plugin.settings_schema.clone(),
        confinement,
        pid: std::process::id(),
    })));
    serve(&mut reader, &link, &tools, &runtime)
}

/// Why the worker could not confine itself.
#[derive(Debug, thiserror::Error)]
enum ConfineError {
    /// A limit, the namespace, or a capability could not be set.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Landlock refused (or, required, is not supported).
    #[error(transparent)]
    Sandbox(#[from] sandbox::SandboxError),
    /// The seccomp filter could not be installed, and the sandbox is required.
    #[error(
        "{0}; the sandbox is required, so the worker does not start (set `[isolation] \
         sandbox = \"best-effort\"` to run it without the filter)"
    )]
    Seccomp(seccomp::SeccompError),
    /// Memory cannot be bounded here, and the sandbox is required.
    #[error(
        "memory is not bounded: {0}; the sandbox is required, so the worker does not start \
         (set `[isolation] sandbox = \"best-effort\"` to run it anyway)"
    )]
    Memory(String),
}

/// Whether the worker's memory is bounded: in a cgroup, by `memory.max` (the host adds
/// that protection); otherwise by `RLIMIT_AS`, which holds only while the seccomp filter
/// refuses the memory no mapping counts (memfd, System V shared memory) and no write
/// path is on a memory-backed filesystem (tmpfs, ramfs), whose files hold memory too.
fn memory_protection(init: &Init, seccomp_holds: bool) -> Protection {
    let mib = init.limits.memory_bytes >> 20;
    if init.containment == ContainmentKind::Cgroup {
        return Protection::holds(
            "memory",
            format!("RLIMIT_AS: {mib} MiB per process over its start, and the cgroup"),
        );
    }
    if !seccomp_holds {
        return Protection::lacks(
            "memory",
            format!(
                "RLIMIT_AS {mib} MiB per process, but without the seccomp filter memfd and \
                 System V shared memory escape it (a cgroup would bound them)"
            ),
        );
    }
    if let Some(path) = init
        .rules
        .write
        .iter()
        .find(|p| crate::sys::rlimit::on_memory_filesystem(p))
    {
        return Protection::lacks(
            "memory",
            format!(
                "RLIMIT_AS {mib} MiB per process, but the write path {} is on a \
                 memory-backed filesystem (tmpfs), whose files no per-process limit counts \
                 (a cgroup would bound them: run as root or in a delegated systemd slice, or \
                 move the path off tmpfs)",
                path.display()
            ),
        );
    }
    Protection::holds(
        "memory",
        format!(
            "RLIMIT_AS: {mib} MiB per process over its start; seccomp refuses memfd and \
             System V shared memory; no write path is on tmpfs"
        ),
    )
}

/// Everything that confines the worker, in order: toolhost's mark, its PID namespace (if the host chose
/// one), resource limits, no new privileges, no capabilities, Landlock, seccomp. Returns
/// what holds, protection by protection (the host adds its cgroup's).
fn confine(init: &Init, socket: RawFd) -> Result<Confinement, ConfineError> {
    let mut c = Confinement::default();
    // First, so every process of the worker (its PID namespace's supervisors too) carries
    // it: every toolhost's control socket refuses a marked process.
    sandbox::mark::set()?;
    rlimit::set_limit(Resource::Core, 0)?;
    let in_namespace = init.containment == ContainmentKind::PidNamespace;
    if in_namespace {
        pid_namespace::enter(socket)?;
    }
    if init.limits.memory_bytes > 0 {
        // What the worker maps now (the toolhost binary, its runtime) plus the limit: the
        // limit is what the plugin may add.
        let base = rlimit::address_space_in_use().unwrap_or(0);
        let limit = base.saturating_add(init.limits.memory_bytes);
        // Whether it bounds the worker is known once the filter is in (below).
        rlimit::set_limit(Resource::AddressSpace, limit)?;
    } else {
        c.set(Protection::lacks(
            "memory",
            "no limit configured (memory_limit_mb = 0)",
        ));
    }
    if init.limits.open_files > 0 {
        rlimit::set_limit(Resource::OpenFiles, init.limits.open_files)?;
    }
    let root = rlimit::real_uid_is_root();
    match init.containment {
        ContainmentKind::PidNamespace if root => c.set(Protection::lacks(
            "processes",
            "not bounded: the kernel exempts uid 0 from RLIMIT_NPROC (a cgroup would bound \
             it)",
        )),
        ContainmentKind::PidNamespace if init.limits.max_processes > 0 => {
            // Counted per user namespace: this worker's tree alone (plus its two
            // supervising processes).
            rlimit::set_limit(Resource::Processes, init.limits.max_processes + 2)?;
            c.set(Protection::holds(
                "processes",
                format!(
                    "RLIMIT_NPROC {} in the worker's own user namespace",
                    init.limits.max_processes
                ),
            ));
        }
        ContainmentKind::Cgroup if init.limits.max_processes > 0 => c.set(Protection::holds(
            "processes",
            format!("pids.max {} (the host's cgroup)", init.limits.max_processes),
        )),
        ContainmentKind::PidNamespace | ContainmentKind::Cgroup => c.set(Protection::lacks(
            "processes",
            "no limit configured (max_processes = 0)",
        )),
        ContainmentKind::ProcessGroup => c.set(Protection::lacks(
            "processes",
            "not bounded without a cgroup or PID namespace (RLIMIT_NPROC counts every \
             process of the uid)",
        )),
    }
    c.set(match init.containment {
        ContainmentKind::Cgroup => Protection::holds("cleanup", "cgroup (set by the host)"),
        ContainmentKind::PidNamespace => Protection::holds(
            "cleanup",
            "PID namespace: every process in it ends with the worker",
        ),
        ContainmentKind::ProcessGroup => Protection::lacks(
            "cleanup",
            "process group only: a process that leaves it survives if the host dies",
        ),
    });
    rlimit::no_new_privs()?;
    if init.sandbox == SandboxMode::Off {
        for area in [
            "filesystem",
            "tcp",
            "udp",
            "signals",
            "abstract sockets",
            "unix sockets",
            "syscalls",
            "capabilities",
        ] {
            c.set(Protection::lacks(area, "sandbox = \"off\""));
        }
        if init.limits.memory_bytes > 0 {
            c.set(memory_protection(init, false));
        }
        return Ok(c);
    }
    let outcome = sandbox::apply(init.sandbox, &init.rules)?;
    if matches!(
        outcome,
        SandboxOutcome::Full { .. } | SandboxOutcome::Partial { .. }
    ) {
        // The worker is still single-threaded here (confinement runs first).
        if let Err(e) = crate::sys::process_env::mark_state_hidden_by_worker() {
            tracing::warn!(
                "the worker could not record that its sandbox hides the host's state ({e}); \
                 its commands' sandboxes hide it again"
            );
        }
    }
    let abi = match &outcome {
        SandboxOutcome::Full { abi } => Some(*abi),
        SandboxOutcome::Partial { .. } => sandbox::kernel_abi(),
        _ => None,
    };
    let landlock = |min: u32| abi.is_some_and(|a| a >= min);
    // After Landlock (whose rules open paths the capabilities may be needed for), before
    // seccomp.
    let had_capabilities = caps::has_any();
    caps::drop_all()?;
    c.set(Protection::holds(
        "capabilities",
        if had_capabilities {
            "every capability dropped (bounding, ambient, permitted, effective)"
        } else {
            "none held"
        },
    ));
    let filter = seccomp::apply(seccomp::SocketRules {
        network: init.rules.network,
        unix: init.unix_sockets,
    });
    let seccomp_holds = match filter {
        Ok(()) => true,
        Err(e) if init.sandbox == SandboxMode::Required => return Err(ConfineError::Seccomp(e)),
        Err(e) => {
            tracing::warn!("{e}");
            false
        }
    };
    if init.limits.memory_bytes > 0 {
        let memory = memory_protection(init, seccomp_holds);
        if !memory.enforced && init.sandbox == SandboxMode::Required {
            return Err(ConfineError::Memory(memory.detail));
        }
        c.set(memory);
    }
    let abi_text = abi.map(|a| format!("Landlock ABI {a}")).unwrap_or_default();
    c.set(Protection::new(
        "filesystem",
        landlock(3),
        if landlock(3) {
            abi_text.clone()
        } else {
            outcome.to_string()
        },
    ));
    if init.rules.network {
        c.set(Protection::holds(
            "tcp",
            "allowed (a network tool, or allow_network)",
        ));
        c.set(Protection::holds(
            "udp",
            "allowed (a network tool, or allow_network)",
        ));
    } else {
        c.set(Protection::new(
            "tcp",
            landlock(4) || seccomp_holds,
            match (landlock(4), seccomp_holds) {
                (true, true) => format!("{abi_text} and seccomp deny it"),
                (true, false) => abi_text.clone(),
                (false, true) => "seccomp refuses IPv4 and IPv6 sockets".to_owned(),
                (false, false) => "needs Landlock ABI 4 (Linux 6.7) or seccomp".to_owned(),
            },
        ));
        c.set(Protection::new(
            "udp",
            seccomp_holds,
            if seccomp_holds {
                "seccomp refuses IPv4 and IPv6 sockets"
            } else {
                "needs seccomp"
            },
        ));
    }
    c.set(if landlock(sandbox::SCOPE_ABI) {
        Protection::holds("signals", format!("{abi_text} scope"))
    } else if in_namespace {
        Protection::holds("signals", "PID namespace: no process outside is visible")
    } else {
        Protection::lacks(
            "signals",
            "needs Landlock ABI 6 (Linux 6.12) or a PID namespace",
        )
    });
    c.set(if landlock(sandbox::SCOPE_ABI) {
        Protection::holds("abstract sockets", format!("{abi_text} scope"))
    } else if seccomp_holds && !init.unix_sockets {
        Protection::holds("abstract sockets", "seccomp refuses Unix sockets")
    } else {
        Protection::lacks(
            "abstract sockets",
            "needs Landlock ABI 6 (Linux 6.12), or seccomp with Unix sockets refused",
        )
    });
    c.set(if init.unix_sockets {
        Protection::holds(
            "unix sockets",
            "allowed for this plugin ([isolation] unix_sockets)",
        )
    } else if seccomp_holds {
        Protection::holds("unix sockets", "seccomp refuses them")
    } else {
        Protection::lacks("unix sockets", "needs seccomp")
    });
    c.set(Protection::new(
        "syscalls",
        seccomp_holds,
        if seccomp_holds {
            "seccomp: ptrace, io_uring, mount, namespaces, bpf, keyrings and the like refused"
        } else {
            "no seccomp filter"
        },
    ));
    Ok(c)
}

/// The worker's log goes to its stderr, which the host reads into its own log with the
/// plugin's name. Tool log lines travel as messages instead (the host logs those).
fn init_logging(filter: &str) {
    let filter = format!("{filter},toolhost::plugins::run::host_services=off");
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
            Ok(Some(ToWorker::ServiceReply { id, answer })) => link.answered(id, answer),
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
                as Arc<dyn toolhost_calls::context::CallerChannel>
        }),
        child_turns: frame.child_turns.then(|| {
            Arc::new(ProxyChildTurns::new(Arc::clone(link), id))
                as Arc<dyn toolhost_calls::context::ChildTurnService>
        }),
        // Always one, for the plugin's settings; the profile's requests only with a profile.
        requests: Some(
            Arc::new(ProxyRequests::new(Arc::clone(link), id, frame.requests))
                as Arc<dyn toolhost_calls::context::HostRequests>,
        ),
        budget: toolhost_calls::outputs::Budget {
            max_chars: frame.budget.0,
            max_lines: frame.budget.1,
        },
        ..TurnServices::default()
    };
    let ctx = CallContext {
        turn: Arc::new(TurnIdentity {
            profile_id: frame.profile_id,
            session_id: frame.session_id,
            model: frame.model,
        }),
        caller: Arc::default(),
        cancel: cancel.clone(),
        services,
    };
    let handle = runtime.handle().clone();
    let future = tool.prepare(&ctx, frame.args, Some(handle));
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
        Box::new(move |outcome: Result<Answered, PoolError>| {
            calls
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
            let result = match outcome {
                Ok(answered) => tool.outcome(answered.answer),
                Err(e) => Err(ToolError::Failed(e.to_string())),
            };
            link.send(&FromWorker::Reply {
                id,
                result: result.map(WireOutcome::from).map_err(WireToolError::from),
            });
        })
    };
    match call_pool::start(name, plugin, future, on_done) {
        Ok(detached) => {
            if let Some(running) = calls
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_mut(&id)
            {
                running.detached = Some(detached);
            }
        }
        Err(e) => {
            calls
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
            link.send(&FromWorker::Reply {
                id,
                result: Err(WireToolError {
                    invalid_args: false,
                    message: e.to_string(),
                }),
            });
        }
    }
}
