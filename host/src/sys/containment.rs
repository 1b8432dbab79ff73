//! Keeping a plugin worker's processes together so that none outlives it, and bounding
//! their memory and number: a cgroup of the worker's own where the host can make one
//! (cgroup v2 with the `memory` and `pids` controllers, or the v1 `memory` and `pids`
//! hierarchies: root, or a delegated systemd slice), else a PID namespace (the worker makes
//! it, in a user namespace of its own, see `isolation::pid_namespace`), else only the
//! worker's process group. Every worker is also a session leader (its own process group),
//! and dies with its host (`PR_SET_PDEATHSIG`).
//!
//! What each gives:
//! - cgroup: `memory.max` / `memory.limit_in_bytes` bounds all memory of every process in
//!   it (shared mappings included), `pids.max` the processes, and teardown kills every
//!   process in it (`cgroup.kill`, or one by one on v1), wherever it moved in the tree.
//! - PID namespace: the worker's processes cannot see or signal anything outside; when
//!   the worker ends, the kernel kills every process in the namespace. Memory is bounded
//!   per process (`RLIMIT_AS`), processes by `RLIMIT_NPROC`, which the kernel counts per
//!   user namespace, so it bounds this worker's tree alone.
//! - process group: teardown kills the group; a process that left it (`setsid`) is found
//!   among the host's children (the host is their child subreaper) by the worker's seccomp
//!   filters it inherited, and killed. Memory is bounded per process (`RLIMIT_AS`); processes are not
//!   bounded (`RLIMIT_NPROC` counts every process of the uid).

use std::fs::{self, File};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// How a worker's processes are kept together (`[isolation] containment`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ContainmentMode {
    /// The strongest this host can make: a cgroup, else a PID namespace, else the
    /// process group.
    #[default]
    Auto,
    /// A cgroup of the worker's own; a worker is not started without one.
    Cgroup,
    /// A PID namespace (in a user namespace); a worker is not started without one.
    PidNamespace,
    /// Only the worker's process group (and the host as child subreaper).
    ProcessGroup,
}

/// What a worker was actually given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum ContainmentKind {
    /// A cgroup of its own.
    Cgroup,
    /// A PID namespace it makes itself.
    PidNamespace,
    /// Its process group.
    ProcessGroup,
}

impl std::fmt::Display for ContainmentKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ContainmentKind::Cgroup => "cgroup",
            ContainmentKind::PidNamespace => "PID namespace",
            ContainmentKind::ProcessGroup => "process group",
        })
    }
}

/// Why the containment asked for could not be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ContainmentError {
    /// `containment = "cgroup"` and no cgroup could be made.
    #[error(
        "`[isolation] containment = \"cgroup\"`, but this host cannot make a cgroup for a \
         worker: {0}; run toolhost as root or in a systemd unit with `Delegate=yes`, or set \
         `containment = \"auto\"`"
    )]
    NoCgroup(String),
    /// `containment = "pid-namespace"` and this kernel does not let the host make one.
    #[error(
        "`[isolation] containment = \"pid-namespace\"`, but this host cannot make a PID \
         namespace: {0}; allow unprivileged user namespaces \
         (`sysctl kernel.unprivileged_userns_clone=1`, or the AppArmor \
         `userns` rule), or set `containment = \"auto\"`"
    )]
    NoPidNamespace(&'static NoPidNamespaces),
}

/// One controller directory of a worker's cgroup.
#[derive(Debug)]
struct CgroupDir {
    path: PathBuf,
    v2: bool,
}

/// A worker's cgroup: one directory (v2) or one per controller (v1). Dropping it kills
/// every process still in it and removes the directories.
#[derive(Debug)]
pub(crate) struct WorkerCgroup {
    dirs: Vec<CgroupDir>,
    /// `cgroup.procs` of each directory, open for the worker to write itself into
    /// between fork and exec.
    procs: Vec<File>,
    /// What the cgroup bounds, for status.
    pub(crate) memory_bytes: u64,
    pub(crate) max_processes: u64,
}

/// The containment of one worker, made by the host before it starts the worker.
#[derive(Debug)]
pub(crate) enum Containment {
    /// In a cgroup.
    Cgroup(WorkerCgroup),
    /// The worker makes a PID namespace itself.
    PidNamespace,
    /// Its process group only.
    ProcessGroup,
}

impl Containment {
    /// What kind it is.
    pub(crate) fn kind(&self) -> ContainmentKind {
        match self {
            Containment::Cgroup(_) => ContainmentKind::Cgroup,
            Containment::PidNamespace => ContainmentKind::PidNamespace,
            Containment::ProcessGroup => ContainmentKind::ProcessGroup,
        }
    }

    /// What it is, for status: `cgroup v1 PATH`, `PID namespace`, `process group`.
    pub(crate) fn describe(&self) -> String {
        match self {
            Containment::Cgroup(c) => c.describe(),
            other => other.kind().to_string(),
        }
    }

    /// The cgroup folders (none without a cgroup).
    pub(crate) fn cgroup_paths(&self) -> Vec<PathBuf> {
        match self {
            Containment::Cgroup(c) => c.paths(),
            _ => Vec::new(),
        }
    }

    /// The raw `cgroup.procs` descriptors the child writes itself into.
    pub(crate) fn procs_fds(&self) -> Vec<RawFd> {
        match self {
            Containment::Cgroup(c) => c.procs.iter().map(AsRawFd::as_raw_fd).collect(),
            _ => Vec::new(),
        }
    }

    /// Kills every process of the worker with pid `pid` (a session and process group
    /// leader) that is still alive: its cgroup, its process group, and (process group
    /// only) the host's reparented children that came from a worker.
    pub(crate) fn kill_all(&self, pid: u32) {
        if let Containment::Cgroup(cgroup) = self {
            cgroup.kill_all();
        }
        if let Ok(pgid) = libc::pid_t::try_from(pid) {
            // SAFETY: kill takes integers only; a negative pid names the process group.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
        if matches!(self, Containment::ProcessGroup) {
            // A process that left the group becomes the host's only once its parent in
            // the group has died: wait for that before looking for it.
            wait_groups_dead(&[pid]);
            kill_escaped_orphans();
        }
    }
}

/// Makes the containment for a new worker, the strongest `mode` allows.
pub(crate) fn make(
    mode: ContainmentMode,
    memory_bytes: u64,
    max_processes: u64,
) -> Result<Containment, ContainmentError> {
    let made = match mode {
        ContainmentMode::Cgroup => WorkerCgroup::make(memory_bytes, max_processes)
            .map(Containment::Cgroup)
            .map_err(|e| ContainmentError::NoCgroup(e.to_string())),
        ContainmentMode::PidNamespace => match pid_namespaces() {
            Ok(()) => Ok(Containment::PidNamespace),
            Err(e) => Err(ContainmentError::NoPidNamespace(e)),
        },
        ContainmentMode::ProcessGroup => Ok(Containment::ProcessGroup),
        ContainmentMode::Auto => match WorkerCgroup::make(memory_bytes, max_processes) {
            Ok(cgroup) => Ok(Containment::Cgroup(cgroup)),
            Err(cgroup_error) => {
                tracing::debug!("no cgroup for a worker: {cgroup_error}");
                if pid_namespaces().is_ok() {
                    Ok(Containment::PidNamespace)
                } else {
                    Ok(Containment::ProcessGroup)
                }
            }
        },
    };
    // Only a process group needs the host to inherit the worker's orphans (a cgroup and a
    // PID namespace hold them); the host then reaps them too.
    // (`main` made the host one already; a host embedded as a library is made one here.)
    if matches!(made, Ok(Containment::ProcessGroup))
        && let Err(e) = crate::sys::sandbox::process_tree::become_subreaper()
    {
        tracing::debug!("could not become child subreaper: {e}");
    }
    made
}

/// Why this host cannot make PID namespaces (see [`ContainmentError::NoPidNamespace`] for
/// what to do).
#[derive(Debug, thiserror::Error)]
pub(crate) enum NoPidNamespaces {
    /// The probe's child process could not be started.
    #[error("fork failed: {0}")]
    Fork(#[source] io::Error),
    /// The kernel refused (unprivileged user namespaces are off, or AppArmor denies them).
    #[error("the kernel refuses unshare(CLONE_NEWUSER | CLONE_NEWPID) to this user")]
    Refused,
}

/// Whether this host can make PID namespaces (in a user namespace): tried once, in a
/// child process that does nothing else.
pub(crate) fn pid_namespaces() -> Result<(), &'static NoPidNamespaces> {
    static PROBE: OnceLock<Result<(), NoPidNamespaces>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            // SAFETY: the child only calls unshare and _exit (async-signal-safe).
            let pid = unsafe { libc::fork() };
            if pid < 0 {
                return Err(NoPidNamespaces::Fork(io::Error::last_os_error()));
            }
            if pid == 0 {
                // SAFETY: unshare takes an integer; _exit never returns.
                unsafe {
                    let ok = libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWPID) == 0;
                    libc::_exit(if ok { 0 } else { 1 });
                }
            }
            let mut status = 0;
            // SAFETY: waits for the child just forked; writes its status here.
            let r = unsafe { libc::waitpid(pid, &raw mut status, 0) };
            if r == pid && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
                Ok(())
            } else {
                Err(NoPidNamespaces::Refused)
            }
        })
        .as_ref()
        .map(|_| ())
}

/// Ends every live worker and everything it started (its process group, its cgroup,
/// the orphans the host inherited): what a host does on its way out, so no plugin's
/// process outlives it (`worker::end_all` also ends what MCP servers left).
pub(crate) fn end_all_workers() {
    let mut groups = Vec::new();
    for (pid, cgroups) in crate::sys::workers::take_all() {
        if let Ok(raw) = libc::pid_t::try_from(pid) {
            // SAFETY: kill takes integers; a negative pid names the process group.
            unsafe {
                libc::kill(raw, libc::SIGKILL);
                libc::kill(-raw, libc::SIGKILL);
            }
        }
        groups.push(pid);
        // Here, not on a thread of its own: the process is about to end.
        remove_cgroups(&cgroups);
    }
    // The killed are reparented to the host (their subreaper) only as their parents in
    // the groups die: wait for the groups to be dead, then sweep.
    wait_groups_dead(&groups);
    kill_escaped_orphans();
}

/// How long teardown waits for killed process groups to die before sweeping orphans
/// anyway (a process stuck in uninterruptible sleep dies late).
const GROUP_DEATH_WAIT: Duration = Duration::from_secs(2);

/// Waits, bounded by [`GROUP_DEATH_WAIT`], until no process in the process groups
/// `pgids` is alive (dead but unreaped ones count as dead: the kernel reparents a
/// process's children before it becomes a zombie).
fn wait_groups_dead(pgids: &[u32]) {
    if pgids.is_empty() {
        return;
    }
    let until = Instant::now() + GROUP_DEATH_WAIT;
    while any_alive_in(pgids) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Whether any live (not zombie) process is in one of the process groups `pgids`.
fn any_alive_in(pgids: &[u32]) -> bool {
    let Ok(entries) = fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|entry| {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            return false;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        group_and_state(&stat)
            .is_some_and(|(state, pgrp)| state != 'Z' && state != 'X' && pgids.contains(&pgrp))
    })
}

/// The state letter and process group of a `/proc/PID/stat` line (the command name in
/// parentheses may hold spaces and parentheses: the fields start after the last `)`).
fn group_and_state(stat: &str) -> Option<(char, u32)> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

/// Kills and reaps the host's children that carry a worker's marks (no new privileges
/// and a worker's seccomp filters, which a command the host's own process starts does
/// not have: it has one filter fewer) and are not live workers: processes a plugin started that left their worker's process group and were
/// reparented to the host when their parent died.
pub(crate) fn kill_escaped_orphans() {
    kill_children_while(crate::sys::workers::carries_marks);
}

/// Kills and reaps every child of the host that carries toolhost's mark
/// ([`mark`](crate::sys::sandbox::mark)) and is not a live worker: on the host's way
/// out, what its commands and MCP servers started that left their session and cleared
/// their environment (a daemon), reparented to the host (their subreaper) when their
/// parent died. Never while the host serves: its own commands are such children too.
pub(crate) fn kill_marked_children() {
    kill_children_while(|pid| {
        i32::try_from(pid)
            .ok()
            .and_then(crate::sys::sandbox::mark::carried_by)
            == Some(true)
    });
}

/// Sweeps the host's children that `doomed` picks until none is left.
fn kill_children_while(doomed: impl Fn(u32) -> bool) {
    // Each pass reaps what it kills, by which time their own children are the host's:
    // the next pass finds those. Bounded, for a tree that forks as fast as it is killed.
    for _ in 0..16 {
        if kill_children_once(&doomed) == 0 {
            break;
        }
    }
}

/// One sweep of [`kill_children_while`]; how many it killed.
fn kill_children_once(doomed: &impl Fn(u32) -> bool) -> usize {
    let me = std::process::id();
    let live = crate::sys::workers::live_pids();
    let mut killed = 0;
    for pid in host_children(me) {
        if live.contains(&pid) || !doomed(pid) {
            continue;
        }
        killed += 1;
        if let Ok(raw) = libc::pid_t::try_from(pid) {
            // SAFETY: kill and waitpid take integers; the status is written here. The
            // child is ours (reparented), so reaping it is our job.
            unsafe {
                libc::kill(raw, libc::SIGKILL);
                let mut status = 0;
                libc::waitpid(raw, &raw mut status, 0);
            }
        }
    }
    killed
}

/// The host's children (every thread's).
fn host_children(me: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = fs::read_dir(format!("/proc/{me}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        if let Ok(text) = fs::read_to_string(task.path().join("children")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Where the cgroup hierarchies are mounted: the v2 mount, and the v1 `memory` and
/// `pids` ones.
#[derive(Debug, Default)]
struct Mounts {
    v2: Option<PathBuf>,
    memory: Option<PathBuf>,
    pids: Option<PathBuf>,
}

fn mounts() -> &'static Mounts {
    static MOUNTS: OnceLock<Mounts> = OnceLock::new();
    MOUNTS.get_or_init(|| {
        let mut m = Mounts::default();
        let Ok(text) = fs::read_to_string("/proc/self/mountinfo") else {
            return m;
        };
        for line in text.lines() {
            // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS ... - FSTYPE SOURCE SUPEROPTS
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let mount_point = left.split(' ').nth(4).map(PathBuf::from);
            let mut right = right.split(' ');
            let fstype = right.next().unwrap_or_default();
            let super_opts = right.nth(1).unwrap_or_default();
            match (fstype, mount_point) {
                ("cgroup2", Some(p)) if m.v2.is_none() => m.v2 = Some(p),
                ("cgroup", Some(p)) => {
                    let opts: Vec<&str> = super_opts.split(',').collect();
                    if opts.contains(&"memory") && m.memory.is_none() {
                        m.memory = Some(p.clone());
                    }
                    if opts.contains(&"pids") && m.pids.is_none() {
                        m.pids = Some(p);
                    }
                }
                _ => {}
            }
        }
        m
    })
}

/// This process's cgroup path in the hierarchy of `controller` (`""` for v2).
fn own_cgroup(controller: &str) -> Option<PathBuf> {
    let text = fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let matches = if controller.is_empty() {
            controllers.is_empty()
        } else {
            controllers.split(',').any(|c| c == controller)
        };
        matches.then(|| PathBuf::from(path.trim_start_matches('/')))
    })
}

/// Sweeps `parent` for stale worker cgroups, once per folder per process.
fn sweep_once(parent: &Path) {
    static SWEPT: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    let mut swept = SWEPT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !swept.iter().any(|p| p == parent) {
        swept.push(parent.to_path_buf());
        sweep_stale(parent);
    }
}

/// Workers started by this host (for unique cgroup names).
static NEXT: AtomicU64 = AtomicU64::new(0);

fn write_file(path: &Path, value: &str) -> io::Result<()> {
    fs::write(path, value).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("could not write {value:?} to {}: {e}", path.display()),
        )
    })
}

impl WorkerCgroup {
    /// A fresh cgroup for one worker with its limits set (0: not limited).
    fn make(memory_bytes: u64, max_processes: u64) -> io::Result<WorkerCgroup> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("worker-{n}");
        let group = format!("toolhost-{}", std::process::id());
        let m = mounts();
        // v2 with both controllers.
        if let (Some(root), Some(own)) = (&m.v2, own_cgroup("")) {
            sweep_once(&root.join(&own));
            match Self::make_v2(
                &root.join(own).join(&group),
                &name,
                memory_bytes,
                max_processes,
            ) {
                Ok(cgroup) => return Ok(cgroup),
                Err(e) => tracing::debug!("no cgroup v2 for a worker: {e}"),
            }
        }
        // v1: the memory and pids hierarchies.
        let (Some(memory), Some(pids)) = (&m.memory, &m.pids) else {
            return Err(io::Error::other(
                "no cgroup v2 hierarchy with the memory and pids controllers, and no v1 \
                 memory and pids hierarchies",
            ));
        };
        let mut cgroup = WorkerCgroup {
            dirs: Vec::new(),
            procs: Vec::new(),
            memory_bytes,
            max_processes,
        };
        for (mount, controller) in [(memory, "memory"), (pids, "pids")] {
            let parent = mount.join(own_cgroup(controller).unwrap_or_default());
            sweep_once(&parent);
            let dir = parent.join(&group).join(&name);
            fs::create_dir_all(&dir).map_err(|e| {
                io::Error::new(e.kind(), format!("could not create {}: {e}", dir.display()))
            })?;
            cgroup.dirs.push(CgroupDir {
                path: dir.clone(),
                v2: false,
            });
            match controller {
                "memory" if memory_bytes > 0 => {
                    write_file(
                        &dir.join("memory.limit_in_bytes"),
                        &memory_bytes.to_string(),
                    )?;
                    // Without swap accounting this file is absent: memory alone is bounded.
                    let _ = fs::write(
                        dir.join("memory.memsw.limit_in_bytes"),
                        memory_bytes.to_string(),
                    );
                }
                "pids" if max_processes > 0 => {
                    write_file(&dir.join("pids.max"), &max_processes.to_string())?;
                }
                _ => {}
            }
            cgroup.procs.push(open_procs(&dir)?);
        }
        Ok(cgroup)
    }

    fn make_v2(
        group: &Path,
        name: &str,
        memory_bytes: u64,
        max_processes: u64,
    ) -> io::Result<WorkerCgroup> {
        fs::create_dir_all(group)?;
        let controllers = fs::read_to_string(group.join("cgroup.controllers"))?;
        let has = |c: &str| controllers.split_whitespace().any(|x| x == c);
        if !has("memory") || !has("pids") {
            let _ = fs::remove_dir(group);
            return Err(io::Error::other(format!(
                "{} lacks the memory and pids controllers (it has: {})",
                group.display(),
                controllers.trim()
            )));
        }
        write_file(&group.join("cgroup.subtree_control"), "+memory +pids")?;
        let dir = group.join(name);
        fs::create_dir_all(&dir)?;
        let mut cgroup = WorkerCgroup {
            dirs: vec![CgroupDir {
                path: dir.clone(),
                v2: true,
            }],
            procs: Vec::new(),
            memory_bytes,
            max_processes,
        };
        if memory_bytes > 0 {
            write_file(&dir.join("memory.max"), &memory_bytes.to_string())?;
            let _ = fs::write(dir.join("memory.swap.max"), "0");
        }
        if max_processes > 0 {
            write_file(&dir.join("pids.max"), &max_processes.to_string())?;
        }
        cgroup.procs.push(open_procs(&dir)?);
        Ok(cgroup)
    }

    /// The directories, for status.
    pub(crate) fn describe(&self) -> String {
        let v = if self.dirs.iter().any(|d| d.v2) { 2 } else { 1 };
        let first = self
            .dirs
            .first()
            .map(|d| d.path.display().to_string())
            .unwrap_or_default();
        format!("cgroup v{v} {first}")
    }

    /// Kills every process in the cgroup and waits (briefly) until it is empty.
    fn kill_all(&self) {
        for dir in &self.dirs {
            kill_members(&dir.path);
        }
    }

    /// Its folders.
    pub(crate) fn paths(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.path.clone()).collect()
    }
}

/// Kills every process in the cgroup folder `dir` (`cgroup.kill` on v2, else one by one
/// until a reading of the folder shows no process it has not killed: one that forked
/// meanwhile is caught by the next reading, and forks are bounded by `pids.max`). It does
/// not wait for the killed to finish exiting.
pub(crate) fn kill_members(dir: &Path) {
    if fs::write(dir.join("cgroup.kill"), "1").is_ok() {
        return;
    }
    let mut killed = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        let fresh: Vec<libc::pid_t> = members(dir)
            .into_iter()
            .filter(|p| !killed.contains(p))
            .collect();
        if fresh.is_empty() {
            break;
        }
        for pid in fresh {
            // SAFETY: kill takes integers only.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            killed.insert(pid);
        }
    }
}

/// Removes the worker cgroups a host that died without cleaning up left under `parent`
/// (`toolhost-PID` folders whose PID no longer runs), killing what is still in them.
fn sweep_stale(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("toolhost-"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let Ok(workers) = fs::read_dir(entry.path()) else {
            continue;
        };
        for worker in workers.flatten() {
            if worker.path().is_dir() {
                kill_members(&worker.path());
                let _ = fs::remove_dir(worker.path());
            }
        }
        if fs::remove_dir(entry.path()).is_ok() {
            tracing::info!(
                "removed the worker cgroups of a toolhost (pid {pid}) that ended without \
                 cleaning up: {}",
                entry.path().display()
            );
        }
    }
}

/// The processes in the cgroup directory `dir`.
fn members(dir: &Path) -> Vec<libc::pid_t> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .map(|t| {
            t.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn open_procs(dir: &Path) -> io::Result<File> {
    let path = dir.join("cgroup.procs");
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("could not open {}: {e}", path.display())))
}

impl Drop for WorkerCgroup {
    /// Kills what is left and removes the folders, on a thread of its own: a process that
    /// is still exiting keeps a cgroup busy for a moment, and a drop may happen on one of
    /// the host's runtime threads.
    fn drop(&mut self) {
        self.procs.clear();
        let dirs: Vec<PathBuf> = self.dirs.drain(..).map(|d| d.path).collect();
        let removed = std::thread::Builder::new()
            .name("toolhost-cgroup-rm".to_owned())
            .spawn(move || remove_cgroups(&dirs));
        if let Err(e) = removed {
            tracing::warn!("could not start a thread to remove a worker's cgroup: {e}");
        }
    }
}

/// Empties and removes a worker's cgroup folders (and the host's group folder once its
/// last worker's is gone); a folder still busy after two seconds is left, with a warning.
pub(crate) fn remove_cgroups(dirs: &[PathBuf]) {
    for dir in dirs {
        kill_members(dir);
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            match fs::remove_dir(dir) {
                Ok(()) => break,
                Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                Err(e) if Instant::now() >= deadline => {
                    tracing::warn!("could not remove the worker cgroup {}: {e}", dir.display());
                    break;
                }
                Err(_) => {
                    kill_members(dir);
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
        if let Some(group) = dir.parent() {
            // Busy while other workers' folders are in it.
            let _ = fs::remove_dir(group);
        }
    }
}

/// Writes "0" (the writing process itself) into each of `fds` (`cgroup.procs` files).
/// Async-signal-safe: called between fork and exec.
pub(crate) fn join_in_child(fds: &[RawFd]) -> io::Result<()> {
    for &fd in fds {
        // SAFETY: writes one byte from a static buffer to an open descriptor.
        if unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) } != 1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_its_state_and_group_whatever_the_command_name() {
        assert_eq!(
            group_and_state("42 (sleep) S 1 42 42 0 -1 4194560"),
            Some(('S', 42))
        );
        assert_eq!(group_and_state("7 (a) b) (c) Z 3 9 9 0"), Some(('Z', 9)));
        assert_eq!(group_and_state("garbage"), None);
        // This test's own process group has a live member: this process.
        // SAFETY: getpgrp takes nothing and cannot fail.
        let own = u32::try_from(unsafe { libc::getpgrp() }).expect("pgrp");
        assert!(any_alive_in(&[own]));
    }

    /// cgroup v2 cannot be exercised on a machine whose memory and pids controllers are
    /// bound to v1 hierarchies (as on the machines the tests run on), so its steps are
    /// checked against a folder laid out like a v2 cgroup.
    #[test]
    fn a_v2_worker_cgroup_gets_its_controllers_and_limits() {
        let root = tempfile::tempdir().expect("temp dir");
        let group = root.path().join("toolhost-1");
        fs::create_dir(&group).expect("group");
        fs::write(group.join("cgroup.controllers"), "cpu io memory pids\n").expect("write");
        // The kernel makes a cgroup's control files; here the test does.
        fs::create_dir(group.join("worker-0")).expect("mkdir");
        fs::write(group.join("worker-0").join("cgroup.procs"), "").expect("write");
        let cgroup = WorkerCgroup::make_v2(&group, "worker-0", 64 << 20, 32).expect("v2");
        let dir = group.join("worker-0");
        let read = |name: &str| fs::read_to_string(dir.join(name)).expect(name);
        assert_eq!(
            fs::read_to_string(group.join("cgroup.subtree_control")).expect("subtree"),
            "+memory +pids"
        );
        assert_eq!(read("memory.max"), (64u64 << 20).to_string());
        assert_eq!(read("memory.swap.max"), "0");
        assert_eq!(read("pids.max"), "32");
        assert_eq!(cgroup.procs.len(), 1);
        assert!(
            cgroup.describe().starts_with("cgroup v2 "),
            "{}",
            cgroup.describe()
        );
        kill_members(&dir);
        assert_eq!(read("cgroup.kill"), "1");
        // A real cgroup folder is removed with its control files; this one is not.
        std::mem::forget(cgroup);

        let lacking = root.path().join("toolhost-2");
        fs::create_dir(&lacking).expect("group");
        fs::write(lacking.join("cgroup.controllers"), "cpu io\n").expect("write");
        let error = WorkerCgroup::make_v2(&lacking, "worker-0", 0, 0).expect_err("no pids");
        assert!(
            error.to_string().contains("lacks the memory and pids"),
            "{error}"
        );
    }

    #[test]
    fn stale_cgroups_of_a_dead_host_are_swept_and_live_ones_kept() {
        let root = tempfile::tempdir().expect("temp dir");
        // pid 1 runs; a pid beyond pid_max never does.
        let live = root.path().join("toolhost-1");
        let dead = root.path().join("toolhost-4194399");
        for dir in [&live, &dead] {
            fs::create_dir_all(dir.join("worker-0")).expect("mkdir");
        }
        sweep_stale(root.path());
        // What is in the dead host's cgroups is killed (the kernel would then let the
        // empty folders go; a plain folder keeps the file written to it).
        assert_eq!(
            fs::read_to_string(dead.join("worker-0").join("cgroup.kill")).expect("killed"),
            "1"
        );
        assert!(!live.join("worker-0").join("cgroup.kill").exists());
    }

    #[test]
    fn the_containment_modes_read_as_kebab_case() {
        for (text, mode) in [
            ("auto", ContainmentMode::Auto),
            ("cgroup", ContainmentMode::Cgroup),
            ("pid-namespace", ContainmentMode::PidNamespace),
            ("process-group", ContainmentMode::ProcessGroup),
        ] {
            let parsed: ContainmentMode =
                serde_json::from_str(&format!("\"{text}\"")).expect("parse");
            assert_eq!(parsed, mode);
        }
    }
}
