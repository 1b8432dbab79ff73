//! Starting one worker process, step by step: the socketpair and the containment
//! (`prepare`), the process itself with nothing but its socket and the environment its
//! tools need (`launch_process`), the thread that logs its stderr and keeps its last words
//! (`log_stderr`), its orders (`send_orders`: what to load, how to confine itself, which
//! paths its sandbox allows), its hello (`read_hello`), what confines it (`confinement`)
//! and the threads that follow it (`Connection::start_reading`). Blocking; a worker that
//! fails at any step is killed and reaped with whatever it started.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, OnceLock, PoisonError};
use std::time::Instant;

use super::connection::{self, Connection, LastWords};
use super::error::WorkerStartError;
use super::log_limit;
use super::protocol::{
    self, FrameReader, FromWorker, Hello, Init, Limits, PROTOCOL_VERSION, ToWorker,
};
use super::{IsolationPolicy, worker_profile};
use crate::sys::confinement::{Confinement, Protection};
use crate::sys::containment::{self, Containment};
use crate::sys::sandbox::{self, SandboxMode, SandboxRules};
use toolhost_calls::profile_dirs::ProfileDirs;
use toolhost_calls::tool::Risk;

/// How a worker is started: its environment and whether it may use TCP. Derived from the
/// plugin's declared tools after the first start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Launch {
    pub(super) env: Vec<(String, String)>,
    pub(super) network: bool,
    /// Unix-domain sockets allowed (`[isolation] unix_sockets` names the plugin).
    pub(super) unix_sockets: bool,
    /// What the programs its tools declare need to read and run, outside the system's
    /// folders ([`program_paths`]).
    pub(super) read: Vec<PathBuf>,
    /// The profile's workspace roots are opened (read, write, run): one of its tools
    /// declares `Requirements::workspace` (a plugin built before that existed does).
    pub(super) workspace: bool,
}

/// Where a plugin's declared programs live, for its worker to read and run them: each
/// one's folder as `PATH` finds it outside the system's folders (`~/.cargo/bin/cargo`),
/// the folder of what that links to, and for a rustup proxy (a program that is rustup
/// under another name) rustup's home (`$RUSTUP_HOME`, else `~/.rustup`), where the
/// toolchain it runs is.
pub(crate) fn program_paths(programs: &[&str]) -> Vec<PathBuf> {
    let search: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    let rustup_home = std::env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".rustup")))
        .filter(|h| h.is_absolute());
    programs_in(programs, &search, rustup_home.as_deref())
}

/// [`program_paths`] with `PATH` as `search` and rustup's home as `rustup_home`.
fn programs_in(programs: &[&str], search: &[PathBuf], rustup_home: Option<&Path>) -> Vec<PathBuf> {
    let system = sandbox::system_read_paths();
    let mut paths: Vec<PathBuf> = Vec::new();
    let mut add = |dir: PathBuf| {
        if !system.iter().any(|s| dir.starts_with(s)) && !paths.contains(&dir) {
            paths.push(dir);
        }
    };
    // A name, never a path: a plugin must not open a folder by declaring
    // `../.ssh/id_ed25519` as a program.
    let names = programs
        .iter()
        .filter(|p| !p.is_empty() && !p.contains('/') && **p != "." && **p != "..");
    for program in names {
        let Some(found) = search
            .iter()
            .map(|dir| dir.join(program))
            .find(|candidate| candidate.is_file())
        else {
            continue;
        };
        if let Some(dir) = found.parent() {
            add(dir.to_path_buf());
        }
        let real = std::fs::canonicalize(&found).unwrap_or_else(|_| found.clone());
        if let Some(dir) = real.parent() {
            add(dir.to_path_buf());
        }
        let proxy = real
            .file_stem()
            .is_some_and(|stem| stem == "rustup" || stem == "rustup-init");
        if proxy && let Some(home) = rustup_home {
            add(home.to_path_buf());
        }
    }
    paths
}

impl Launch {
    /// The most restrictive start, before the plugin's tools are known: no environment,
    /// TCP and Unix-domain sockets only if the configuration gives them to every plugin or
    /// to this file.
    pub(super) fn strict(file: &Path, policy: &IsolationPolicy) -> Launch {
        Launch {
            env: Vec::new(),
            network: policy.allow_network,
            unix_sockets: policy.allows_unix_sockets(None, file),
            read: Vec::new(),
            workspace: false,
        }
    }

    /// The environment and network a plugin's declared tools need: the variables their
    /// requirements name (where the host has them), `PATH` if they need programs, TCP if
    /// one is a `network` tool or the config allows it for all, the profile's workspace
    /// roots if one works there.
    pub(super) fn for_tools(hello: &Hello, file: &Path, policy: &IsolationPolicy) -> Launch {
        if policy.inspect {
            return Launch {
                env: Vec::new(),
                network: false,
                unix_sockets: false,
                read: Vec::new(),
                workspace: false,
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
        let programs: Vec<&str> = tools
            .iter()
            .flat_map(|t| t.requirements.programs.iter().map(String::as_str))
            .collect();
        Launch {
            env,
            network: policy.allow_network || tools.iter().any(|t| t.risk == Risk::Network),
            unix_sockets: policy.allows_unix_sockets(Some(&hello.name), file),
            read: program_paths(&programs),
            workspace: tools.iter().any(|t| t.requirements.workspace),
        }
    }
}

/// What a fresh worker said.
pub(super) struct Started {
    pub(super) conn: Arc<Connection>,
    pub(super) hello: Hello,
}

/// The plugin file a worker loads.
#[derive(Debug, Clone, Copy)]
pub(super) struct WorkerFile<'a> {
    /// The operator's path (for messages).
    pub(super) file: &'a Path,
    /// The host's verified private copy: what the worker maps.
    pub(super) copy: &'a Path,
    /// sha256 of the copy.
    pub(super) sha256: &'a str,
}

/// Starts a worker for `profile` and reads its hello. `name`: the plugin's name, once
/// known (it labels the worker's log lines). Blocking.
pub(super) fn spawn(
    plugin: WorkerFile<'_>,
    policy: &IsolationPolicy,
    launch: &Launch,
    name: Option<Arc<str>>,
    profile: &str,
) -> Result<Started, WorkerStartError> {
    let (host_end, worker_end, containment) = prepare(policy)?;
    let tmp = private_tmp(policy);
    let child = launch_process(
        policy,
        launch,
        &containment,
        &worker_end,
        tmp.as_ref().map(tempfile::TempDir::path),
    )?;
    drop(worker_end);
    let pid = child.id();
    crate::sys::workers::register(pid, containment.cgroup_paths());
    let label: Arc<OnceLock<Arc<str>>> = Arc::new(OnceLock::new());
    if let Some(name) = name {
        let _ = label.set(name);
    }
    let mut unready = Unready {
        child,
        pid,
        containment,
    };
    let last_words = log_stderr(&mut unready.child, plugin.file, pid, Arc::clone(&label));
    if let Err(e) = host_end.set_nonblocking(true) {
        return Err(unready.fail(WorkerStartError::Socket(e)));
    }
    let reader_end = match host_end.try_clone() {
        Ok(s) => s,
        Err(e) => return Err(unready.fail(WorkerStartError::Socket(e))),
    };
    let mut rules = rules_for(plugin.copy, policy, launch, profile);
    rules.read.extend(launch.read.iter().cloned());
    if let Some(tmp) = &tmp {
        // Read too, which grants execute: what a plugin builds in its temporary folder
        // (a doc-test rustdoc compiled, a script it wrote) may run, under this same
        // sandbox, as programs under a workspace root may.
        rules.read.push(tmp.path().to_path_buf());
        rules.write.push(tmp.path().to_path_buf());
    }
    if let Err(e) = send_orders(
        &host_end,
        plugin,
        policy,
        launch,
        rules,
        &unready.containment,
    ) {
        return Err(unready.fail(WorkerStartError::Orders(e)));
    }
    let mut reader = FrameReader::new(reader_end);
    let (
        hello,
        Unready {
            child,
            pid,
            containment,
        },
    ) = read_hello(&mut reader, policy, unready, &last_words)?;
    let confinement = confinement(&hello, &containment);
    if policy.sandbox != SandboxMode::Off {
        tracing::debug!(plugin = %hello.name, pid, "{confinement}");
    }
    let plugin_name: Arc<str> = Arc::from(hello.name.as_str());
    let _ = label.set(Arc::clone(&plugin_name));
    let mut conn = Connection::new(
        host_end,
        pid,
        Some(child),
        plugin_name,
        last_words,
        confinement,
        containment,
    );
    conn.tmp = tmp;
    let conn = Arc::new(conn);
    conn.start_reading(reader)
        .map_err(WorkerStartError::ReaderThread)?;
    Ok(Started { conn, hello })
}

/// A worker process that has not said hello yet: killed and reaped with whatever it
/// started if it fails.
struct Unready {
    child: Child,
    pid: u32,
    containment: Containment,
}

impl Unready {
    /// Kills the worker and everything it started; returns `error`.
    fn fail(mut self, error: WorkerStartError) -> WorkerStartError {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.containment.kill_all(self.pid);
        crate::sys::workers::unregister(self.pid);
        error
    }

    /// The worker ended by itself before its hello: reaps it and says how it ended.
    fn crashed_loading(mut self, last_words: &LastWords) -> WorkerStartError {
        let status = self
            .child
            .wait()
            .map(connection::describe)
            .unwrap_or_default();
        self.containment.kill_all(self.pid);
        crate::sys::workers::unregister(self.pid);
        WorkerStartError::CrashedLoading {
            status,
            last_words: last_words.after_exit(),
        }
    }
}

/// Step 1: the socketpair (host's end, worker's end) and the containment that will hold
/// the worker's processes.
fn prepare(
    policy: &IsolationPolicy,
) -> Result<(UnixStream, UnixStream, Containment), WorkerStartError> {
    let (host_end, worker_end) = UnixStream::pair().map_err(WorkerStartError::Socketpair)?;
    let containment = containment::make(
        policy.containment,
        policy.memory_limit_bytes,
        policy.max_processes,
    )?;
    Ok((host_end, worker_end, containment))
}

/// Step 2: the worker process (`toolhost __worker --fd 3`), with an empty environment
/// but what its tools need, its socket as descriptor 3 and stderr piped to the host's
/// log; whatever plugin code prints never reaches the host's stdout (the MCP stdio
/// protocol).
fn launch_process(
    policy: &IsolationPolicy,
    launch: &Launch,
    containment: &Containment,
    worker_end: &UnixStream,
    tmp: Option<&Path>,
) -> Result<Child, WorkerStartError> {
    let mut command = Command::new(&policy.worker_exe);
    command
        .arg("__worker")
        .arg("--fd")
        .arg("3")
        .env_clear()
        .envs(launch.env.iter().map(|(k, v)| (k, v)));
    if let Some(tmp) = tmp {
        command.env("TMPDIR", tmp);
    }
    // What the worker's sandbox, and its commands', hide (`sandbox::apply` reads it).
    if let Some(hidden) = std::env::var_os(sandbox::protected::ENV) {
        command.env(sandbox::protected::ENV, hidden);
    }
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    crate::sys::process::pass_socket(&mut command, worker_end, 3, containment.procs_fds());
    crate::sys::process::spawn_from_keeper(command).map_err(|source| WorkerStartError::Exec {
        exe: policy.worker_exe.clone(),
        source,
    })
}

/// The worker's own temporary folder (mode 0700, `TMPDIR` in its environment, writable
/// in its sandbox, removed when the worker's connection ends): libraries and commands
/// that need a temporary file get one no other worker or user can reach. None for an
/// inspection (which writes nothing), or when it cannot be made (logged; the worker then
/// has no writable temporary folder).
fn private_tmp(policy: &IsolationPolicy) -> Option<tempfile::TempDir> {
    if policy.inspect {
        return None;
    }
    tempfile::Builder::new()
        .prefix("toolhost-worker-")
        .tempdir()
        .map_err(|e| {
            tracing::warn!(
                "could not make a private temporary folder for a plugin worker in {}: {e}; \
                 the worker gets none",
                std::env::temp_dir().display()
            );
        })
        .ok()
}

/// Step 3: a thread that logs the worker's stderr (rate-limited, labelled with the
/// plugin's name once known, else the file's) and keeps its last line, a crash's own
/// explanation.
fn log_stderr(
    child: &mut Child,
    file: &Path,
    pid: u32,
    label: Arc<OnceLock<Arc<str>>>,
) -> Arc<LastWords> {
    let last_words: Arc<LastWords> = Arc::default();
    let Some(stderr) = child.stderr.take() else {
        return last_words;
    };
    let kept = Arc::clone(&last_words);
    let (closed_tx, closed_rx) = std::sync::mpsc::channel::<()>();
    *kept.closed.lock().unwrap_or_else(PoisonError::into_inner) = Some(closed_rx);
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
                if !line.trim().is_empty() && !line.starts_with("note: run with `RUST_BACKTRACE") {
                    *kept.line.lock().unwrap_or_else(PoisonError::into_inner) =
                        Some(line.chars().take(300).collect());
                }
            }
            if let Some(n) = limit.finish() {
                dropped(label.get().map_or(file_name.as_str(), |n| n), n);
            }
        });
    last_words
}

/// Step 4: the worker's orders: what to load, its limits, its sandbox and how its
/// processes are contained.
fn send_orders(
    host_end: &UnixStream,
    plugin: WorkerFile<'_>,
    policy: &IsolationPolicy,
    launch: &Launch,
    rules: SandboxRules,
    containment: &Containment,
) -> Result<(), protocol::FrameError> {
    let init = ToWorker::Init(Box::new(Init {
        protocol: PROTOCOL_VERSION,
        file: plugin.file.to_path_buf(),
        copy: plugin.copy.to_path_buf(),
        sha256: plugin.sha256.to_owned(),
        limits: Limits {
            memory_bytes: policy.memory_limit_bytes,
            max_processes: policy.max_processes,
            open_files: policy.open_files,
        },
        sandbox: policy.sandbox,
        rules,
        unix_sockets: launch.unix_sockets,
        containment: containment.kind(),
        log_filter: policy.log_filter.clone(),
    }));
    protocol::encode(&init).and_then(|f| protocol::write_frame(host_end, &f))
}

/// Step 5: the worker's hello (within `start_timeout`), in this host's protocol. Anything
/// else kills it; a worker that ended by itself crashed while it loaded the plugin.
fn read_hello(
    reader: &mut FrameReader,
    policy: &IsolationPolicy,
    unready: Unready,
    last_words: &LastWords,
) -> Result<(Hello, Unready), WorkerStartError> {
    let hello = match reader.next::<FromWorker>(Some(policy.start_timeout)) {
        Ok(Some(FromWorker::Hello(hello))) => *hello,
        Ok(Some(FromWorker::LoadFailed { message, .. })) => {
            return Err(unready.fail(WorkerStartError::LoadFailed(message)));
        }
        Ok(Some(other)) => {
            return Err(unready.fail(WorkerStartError::BeforeHello(format!("{other:?}"))));
        }
        Ok(None) => return Err(unready.crashed_loading(last_words)),
        Err(source) => {
            return Err(unready.fail(WorkerStartError::NoHello {
                timeout_secs: policy.start_timeout.as_secs(),
                source,
            }));
        }
    };
    if hello.protocol != PROTOCOL_VERSION {
        return Err(unready.fail(WorkerStartError::Protocol {
            worker: hello.protocol,
        }));
    }
    Ok((hello, unready))
}

/// Step 6: what confines the worker: what it reported, and what its cgroup holds, which
/// the host made and the worker cannot see.
fn confinement(hello: &Hello, containment: &Containment) -> Confinement {
    let mut confinement = hello.confinement.clone();
    if let Containment::Cgroup(cgroup) = containment {
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
    confinement
}

/// The sandbox rules of `profile`'s worker for `copy`: it may write that profile's state
/// folder (and the configured write paths), no other profile's, and the profile's
/// workspace roots only if `launch` says its tools work there.
fn rules_for(
    copy: &Path,
    policy: &IsolationPolicy,
    launch: &Launch,
    profile: &str,
) -> SandboxRules {
    let mut read = sandbox::system_read_paths();
    read.push(copy.to_path_buf());
    read.extend(policy.read_paths.iter().cloned());
    // Writing to /dev/null is how output is thrown away (`Stdio::null()`).
    let mut write: Vec<PathBuf> = vec![PathBuf::from("/dev/null")];
    // The folders of the profile a worker may write: its plugins' state folder, never
    // the host's outputs, approvals or sessions beside it.
    let writable = policy
        .profile_states
        .as_ref()
        .filter(|_| !worker_profile(profile).is_empty())
        .map(|root| ProfileDirs::under(root, profile).worker_writable())
        .unwrap_or_default();
    let mut private = Vec::new();
    for dir in &writable {
        private.push(dir.clone());
        // A state folder the host would make on the plugin's first `state_dir()` must
        // exist now for the sandbox to allow it (made 0700, as the host makes it). One
        // that was refused (a link: the sandbox would allow its target) is left out.
        match toolhost_calls::private::ensure_private_dir(dir) {
            Ok(()) => write.push(dir.clone()),
            Err(e) => tracing::warn!(
                "could not create the state folder {} for plugin workers, who will not be \
                 able to write there: {e}",
                dir.display()
            ),
        }
    }
    write.extend(policy.write_paths.iter().cloned());
    // The profile's workspace: the tools that declare it read, write and run programs
    // there; no other plugin's worker reaches it.
    // The host's config, plugin folders and state stay out of the reach of tools that
    // work in a workspace, whatever its roots hold (and so out of their commands' reach).
    let mut hidden = Vec::new();
    if launch.workspace
        && let Some(roots) = policy.workspace_roots.get(profile)
    {
        read.extend(roots.iter().cloned());
        write.extend(roots.iter().cloned());
        hidden.extend(policy.workspace_protected.iter().cloned());
    }
    SandboxRules {
        read,
        write,
        network: launch.network,
        hidden,
        // The host's state (hidden by `sandbox::apply`, from the environment) stays out of
        // reach whatever the roots and paths say; only the profile's own plugin state is
        // granted inside it.
        private,
        ..SandboxRules::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_declared_program_opens_its_folder_a_proxy_rustups_home_and_a_path_nothing() {
        let bin = tempfile::tempdir().expect("temp dir");
        let real = tempfile::tempdir().expect("temp dir");
        let home = tempfile::tempdir().expect("temp dir");
        std::fs::write(bin.path().join("mytool"), "#!/bin/sh\n").expect("write");
        std::fs::write(real.path().join("rustup"), "#!/bin/sh\n").expect("write");
        std::os::unix::fs::symlink(real.path().join("rustup"), bin.path().join("cargo"))
            .expect("link");
        let search = [bin.path().to_path_buf()];
        assert_eq!(
            programs_in(
                &["mytool", "../etc", "nope", ""],
                &search,
                Some(home.path())
            ),
            vec![bin.path().to_path_buf()]
        );
        let real_dir = std::fs::canonicalize(real.path()).expect("real");
        assert_eq!(
            programs_in(&["cargo"], &search, Some(home.path())),
            vec![
                bin.path().to_path_buf(),
                real_dir,
                home.path().to_path_buf()
            ]
        );
    }
}
