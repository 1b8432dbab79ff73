//! The host's live plugin workers, so that the doors a worker must not reach (the control
//! socket) can refuse it and everything it started, whatever its uid: a peer is refused if
//! a worker is among its ancestors, if it is in a worker's session (every worker leads
//! one), if it is in a worker's cgroup, or if it is a child the host inherited (as child
//! subreaper) that carries a worker's seccomp filters (counted: a command the host's own
//! process started has one fewer, see `seccomp::WORKER_FILTERS`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

/// Live workers by process id, with their cgroup folders (if any).
static LIVE: Mutex<BTreeMap<u32, Vec<PathBuf>>> = Mutex::new(BTreeMap::new());

/// A worker with process id `pid` started (in the cgroup folders `cgroups`).
pub(crate) fn register(pid: u32, cgroups: Vec<PathBuf>) {
    LIVE.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(pid, cgroups);
}

/// The worker with process id `pid` ended (and was reaped).
pub(crate) fn unregister(pid: u32) {
    LIVE.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(&pid);
}

/// The live workers' process ids.
pub(crate) fn live_pids() -> BTreeSet<u32> {
    LIVE.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .keys()
        .copied()
        .collect()
}

/// The tags of the live stdio MCP servers' processes ([`MCP_SERVER_TAG`]).
static SERVER_TAGS: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// The environment variable that tags a stdio MCP server's processes, so that what it
/// started that left its process group is found and ended with it.
pub(crate) const MCP_SERVER_TAG: &str = "TOOLHOST_MCP_SERVER";

/// A stdio MCP server tagged `tag` started.
pub(crate) fn register_tag(tag: &str) {
    SERVER_TAGS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(tag.to_owned());
}

/// The server tagged `tag` and what it started were ended.
pub(crate) fn unregister_tag(tag: &str) {
    SERVER_TAGS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(tag);
}

/// Every live server's tag, taken out (the host is ending them all).
pub(crate) fn take_tags() -> Vec<String> {
    std::mem::take(&mut *SERVER_TAGS.lock().unwrap_or_else(PoisonError::into_inner))
        .into_iter()
        .collect()
}

/// Set once the host has begun ending every worker on its way out.
static ENDING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether the host is ending every worker on its way out (what ends then is no crash).
pub(crate) fn ending() -> bool {
    ENDING.load(std::sync::atomic::Ordering::Acquire)
}

/// Every live worker, taken out of the registry (the host is ending them all): pid and
/// cgroup folders.
pub(crate) fn take_all() -> Vec<(u32, Vec<PathBuf>)> {
    ENDING.store(true, std::sync::atomic::Ordering::Release);
    std::mem::take(&mut *LIVE.lock().unwrap_or_else(PoisonError::into_inner))
        .into_iter()
        .collect()
}

/// Why `pid` counts as one of this host's workers or what one started, or `None`.
pub(crate) fn worker_origin(pid: u32) -> Option<String> {
    use crate::sys::sandbox::process_tree;
    let live = live_pids();
    let me = std::process::id();
    if live.contains(&pid) {
        return Some(format!("process {pid} is a plugin worker"));
    }
    if let Ok(text) = fs::read_to_string(format!("/proc/{pid}/cgroup"))
        && text.contains(&format!("/toolhost-{me}/worker-"))
    {
        return Some(format!("process {pid} is in a plugin worker's cgroup"));
    }
    let as_u32 = |p: i32| u32::try_from(p).ok();
    let raw = i32::try_from(pid).ok()?;
    let session = process_tree::session_of(raw).and_then(as_u32)?;
    if live.contains(&session) {
        return Some(format!(
            "process {pid} is in the session of plugin worker {session}"
        ));
    }
    // Ancestors up to the host (or init).
    let chain = process_tree::ancestors(raw)?;
    let below_host = chain
        .iter()
        .filter_map(|&p| as_u32(p))
        .take_while(|&p| p != me);
    if let Some(worker) = below_host.into_iter().find(|p| live.contains(p)) {
        return Some(format!(
            "process {pid} was started by plugin worker {worker}"
        ));
    }
    let parent = chain.first().copied().and_then(as_u32);
    if parent == Some(me) && carries_marks(pid) {
        return Some(format!(
            "process {pid} was started by a plugin worker (it carries a worker's seccomp \
             filter)"
        ));
    }
    None
}

/// No new privileges and a worker's seccomp filters (at least
/// [`seccomp::WORKER_FILTERS`](crate::sys::sandbox::seccomp::WORKER_FILTERS) more than this
/// host has): what every process a worker starts inherits. A command this host's own
/// process started has fewer (a command's filters only), so it is not taken for one.
pub(crate) fn carries_marks(pid: u32) -> bool {
    filters_beyond_host(pid).is_some_and(|n| n >= crate::sys::sandbox::seccomp::WORKER_FILTERS)
}

/// How many more seccomp filters process `pid` is held to than this host, when it has no
/// new privileges and seccomp in filter mode (what every toolhost sandbox sets); `None`
/// otherwise, or when it is gone.
fn filters_beyond_host(pid: u32) -> Option<u32> {
    use crate::sys::sandbox::seccomp;
    let host = i32::try_from(std::process::id())
        .ok()
        .and_then(seccomp::filters_of)
        .unwrap_or(0);
    let peer = seccomp::filters_of(i32::try_from(pid).ok()?)?;
    (no_new_privs_and_filtered(pid) && peer >= host).then(|| peer - host)
}

/// Why process `pid` counts as one some toolhost confined (this one or another, of any
/// version), or `None`: it carries toolhost's mark ([`mark`](crate::sys::sandbox::mark),
/// set by every sandbox a toolhost builds), or it is held, with no new privileges, to at
/// least a command's seccomp filters more than this host is (a toolhost older than the
/// mark, or any other sandbox: either way, not the user at a terminal). Not by parentage,
/// which a second host's commands do not share. The host's own process is never refused
/// here (see the control socket's `started_by_host`).
pub(crate) fn confined_beyond_host(pid: u32) -> Option<String> {
    use crate::sys::sandbox::{mark, seccomp};
    if pid == std::process::id() {
        return None;
    }
    let raw = i32::try_from(pid).ok()?;
    if mark::carried_by(raw) == Some(true) {
        return Some(format!(
            "process {pid} carries the mark of a process a toolhost confined (a hard \
             RLIMIT_RTTIME of at most {} us, which it cannot raise)",
            mark::MARK_US
        ));
    }
    let beyond = filters_beyond_host(pid)?;
    (beyond >= seccomp::COMMAND_FILTERS).then(|| {
        format!(
            "process {pid} is held by {beyond} more seccomp filters than this host, with no \
             new privileges: a sandbox confines it"
        )
    })
}

/// No new privileges and seccomp in filter mode.
fn no_new_privs_and_filtered(pid: u32) -> bool {
    let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .map(str::to_owned)
    };
    field("NoNewPrivs:").as_deref() == Some("1") && field("Seccomp:").as_deref() == Some("2")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_no_worker_and_its_registered_child_is() {
        assert_eq!(worker_origin(std::process::id()), None);
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let pid = child.id();
        assert_eq!(worker_origin(pid), None);
        register(pid, Vec::new());
        assert!(worker_origin(pid).is_some());
        unregister(pid);
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn a_command_this_process_started_is_not_taken_for_a_workers_process() {
        use std::os::unix::process::CommandExt as _;
        let rules = crate::sys::sandbox::SandboxRules {
            read: vec![std::path::PathBuf::from("/")],
            ..crate::sys::sandbox::SandboxRules::default()
        };
        let prepared = std::sync::Arc::new(
            toolhost_sandbox::prepare(crate::sys::sandbox::SandboxMode::BestEffort, &rules)
                .expect("prepare"),
        );
        if prepared.filter_gap().is_some() {
            println!("skipped: no seccomp filter on this architecture");
            return;
        }
        let child_side = std::sync::Arc::clone(&prepared);
        let mut command = std::process::Command::new("sleep");
        command.arg("30");
        // SAFETY: `enter` makes system calls only.
        unsafe { command.pre_exec(move || child_side.enter()) };
        let mut child = command.spawn().expect("sleep in a command's sandbox");
        let pid = child.id();
        // It has a command's marks (no new privileges, the filters) ...
        assert!(no_new_privs_and_filtered(pid));
        // ... but not a worker's, so neither the control socket's worker check nor the
        // cleanup of a worker's escaped processes takes it for one.
        assert!(!carries_marks(pid));
        assert_eq!(worker_origin(pid), None);
        let _ = child.kill();
        let _ = child.wait();
    }
}
