//! Out-of-process plugins: the same `.so` run in a supervised, sandboxed worker process
//! instead of the host, chosen per plugin by the operator. `protocol` is the wire between
//! host and worker; `worker`, `link` (its end of the connection) and `proxy` (the host
//! services inside it) the worker's side; `supervisor` the host's (start, calls, crashes,
//! restarts with backoff, quarantine, ending a generation's worker).

mod connection;
mod error;
pub(crate) mod lifecycle;
mod link;
mod log_limit;
pub(crate) mod protocol;
mod proxy;
mod refusal;
pub(crate) mod spawn;
pub(crate) mod supervisor;
pub(crate) mod worker;
mod worker_tool;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::sys::containment::ContainmentMode;
use crate::sys::sandbox::SandboxMode;

/// Where a plugin's code runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IsolationMode {
    /// Mapped into the host: fastest; a crash in it ends the host.
    #[default]
    InProcess,
    /// In a worker process of its own: a crash ends only the worker, which restarts.
    Process,
}

impl std::fmt::Display for IsolationMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            IsolationMode::InProcess => "in-process",
            IsolationMode::Process => "process",
        })
    }
}

/// How plugins are isolated (`[isolation]` and `--isolate`).
#[derive(Debug, Clone)]
pub struct IsolationPolicy {
    /// The mode of plugins the table below does not name.
    pub default: IsolationMode,
    /// Per plugin name (or file name, e.g. `libfoo.so`): its mode.
    pub plugins: BTreeMap<String, IsolationMode>,
    /// The Landlock sandbox of workers.
    pub sandbox: SandboxMode,
    /// Extra paths workers may read.
    pub read_paths: Vec<PathBuf>,
    /// Paths workers may write (besides their own profile's state folder).
    pub write_paths: Vec<PathBuf>,
    /// Each profile's workspace roots: its workers may read, write and run programs
    /// beneath them (the workspace tools work there), other profiles' workers may not.
    pub workspace_roots: BTreeMap<String, Vec<PathBuf>>,
    /// What the workspace tools never reach, whatever the roots
    /// ([`LoadedConfig::workspace_protected_paths`](crate::LoadedConfig::workspace_protected_paths)):
    /// hidden from the sandbox of every worker that works in a workspace (and so from the
    /// commands it runs).
    pub workspace_protected: Vec<PathBuf>,
    /// Where profiles keep their state (`<state_dir>/profiles`): a profile's worker may
    /// write `<profile_states>/<profile>/state` (made when the worker starts if missing)
    /// and no other profile's. `None`: workers write no state folder.
    pub profile_states: Option<PathBuf>,
    /// The profile whose worker is started when a plugin loads (others start on their
    /// first call).
    pub default_profile: String,
    /// TCP for every plugin; otherwise only plugins with a `network` tool get it.
    pub allow_network: bool,
    /// A worker's memory, bytes (0: none): its cgroup's limit for all of its processes
    /// where it has a cgroup, and for each process the address space it may add to what
    /// it had before the plugin loaded (`RLIMIT_AS`).
    pub memory_limit_bytes: u64,
    /// Tasks (processes and threads) a worker and what it starts may have at once: its
    /// cgroup's `pids.max`, or `RLIMIT_NPROC` in its own user namespace (0: none).
    pub max_processes: u64,
    /// How a worker's processes are kept together and ended with it.
    pub containment: ContainmentMode,
    /// Plugins (by name or file name) whose workers may make Unix-domain sockets (e.g. to
    /// reach a database's socket); every other worker's seccomp filter refuses them.
    pub unix_sockets: Vec<String>,
    /// `RLIMIT_NOFILE` of a worker (0: inherited).
    pub open_files: u64,
    /// More than this many crashes within `crash_window` quarantine the plugin.
    pub max_crashes: u32,
    /// See `max_crashes`.
    pub crash_window: Duration,
    /// A call that ignores its cancel signal this long gets its worker killed.
    pub kill_after_cancel: Duration,
    /// How long a worker may take to load its plugin and say hello.
    pub start_timeout: Duration,
    /// The program started as a worker (`toolhost` itself).
    pub worker_exe: PathBuf,
    /// The workers' log filter.
    pub log_filter: String,
    /// Inspection only (`check --isolate`): no writes, no network, no environment, and a
    /// sandbox that must be enforced.
    pub inspect: bool,
}

impl Default for IsolationPolicy {
    fn default() -> Self {
        IsolationPolicy {
            default: IsolationMode::InProcess,
            plugins: BTreeMap::new(),
            sandbox: SandboxMode::BestEffort,
            read_paths: Vec::new(),
            write_paths: Vec::new(),
            workspace_roots: BTreeMap::new(),
            workspace_protected: Vec::new(),
            profile_states: None,
            default_profile: "default".to_owned(),
            allow_network: false,
            memory_limit_bytes: 1 << 30,
            max_processes: 256,
            containment: ContainmentMode::Auto,
            unix_sockets: Vec::new(),
            open_files: 256,
            max_crashes: 5,
            crash_window: Duration::from_secs(60),
            kill_after_cancel: Duration::from_millis(1500),
            start_timeout: Duration::from_secs(10),
            worker_exe: default_worker_exe(),
            log_filter: "info".to_owned(),
            inspect: false,
        }
    }
}

/// The running binary: `/proc/self/exe` names it even after an upgrade replaced the file.
fn default_worker_exe() -> PathBuf {
    let proc = Path::new("/proc/self/exe");
    if proc.exists() {
        proc.to_path_buf()
    } else {
        std::env::current_exe().unwrap_or_else(|_| PathBuf::from("toolhost"))
    }
}

/// What the policy says about a file before any of its code ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Decided.
    Mode(IsolationMode),
    /// The table names plugins: the plugin's name decides, learned from a worker.
    ByName,
}

impl IsolationPolicy {
    /// `--isolate`: every plugin in a worker but those `[isolation.plugins]` keeps
    /// in-process by name (an operator's explicit choice, e.g. for a plugin the sandbox
    /// cannot serve); returns those names, for the flag to say so.
    pub fn isolate_all(&mut self) -> Vec<String> {
        self.default = IsolationMode::Process;
        self.plugins
            .retain(|_, mode| *mode == IsolationMode::InProcess);
        self.plugins.keys().cloned().collect()
    }

    /// For `check --isolate`: every plugin, whatever the table says, in a worker that
    /// may read its file and the system libraries only, must be sandboxed, gets no
    /// environment and no network.
    pub fn inspect_only(&mut self) {
        self.default = IsolationMode::Process;
        self.plugins.clear();
        self.inspect = true;
        self.sandbox = SandboxMode::Required;
        self.read_paths.clear();
        self.write_paths.clear();
        self.profile_states = None;
        self.allow_network = false;
    }

    /// The mode for `file`, if its file name is in the table or the table names no
    /// plugins.
    pub(crate) fn decide(&self, file: &Path) -> Decision {
        let file_name = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if let Some(mode) = self.plugins.get(file_name) {
            return Decision::Mode(*mode);
        }
        if self.plugins.is_empty() {
            Decision::Mode(self.default)
        } else {
            Decision::ByName
        }
    }

    /// Whether the plugin named `name` (file `file`) may make Unix-domain sockets.
    pub(crate) fn allows_unix_sockets(&self, name: Option<&str>, file: &Path) -> bool {
        let file_name = file.file_name().and_then(|n| n.to_str());
        self.unix_sockets
            .iter()
            .any(|n| Some(n.as_str()) == name || Some(n.as_str()) == file_name)
    }

    /// The mode for a plugin named `name`.
    pub(crate) fn mode_for_name(&self, name: &str) -> IsolationMode {
        self.plugins.get(name).copied().unwrap_or(self.default)
    }
}

/// The profile whose worker serves a call for `profile`: itself, or `""` (no state
/// folder) for a name that is not one plain folder name.
fn worker_profile(profile: &str) -> &str {
    // The rule profile names follow (`Profile::load`).
    let plain =
        !profile.is_empty() && !profile.starts_with('.') && !profile.contains(['/', '\\', '\0']);
    if plain { profile } else { "" }
}
