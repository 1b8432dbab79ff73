//! The host's live plugin workers, so that the doors a worker must not reach (the control
//! socket) can refuse it and everything it started, whatever its uid: a peer is refused if
//! a worker is among its ancestors, if it is in a worker's session (every worker leads
//! one), if it is in a worker's cgroup, or if it is a child the host inherited (as child
//! subreaper) that carries a worker's seccomp filter.

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

/// Every live worker, taken out of the registry (the host is ending them all): pid and
/// cgroup folders.
pub(crate) fn take_all() -> Vec<(u32, Vec<PathBuf>)> {
    std::mem::take(&mut *LIVE.lock().unwrap_or_else(PoisonError::into_inner))
        .into_iter()
        .collect()
}

/// Fields of `/proc/PID/stat` after the command name: (state, ppid, pgrp, session).
fn stat(pid: u32) -> Option<(u32, u32)> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold anything: split after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let _state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    let _pgrp = fields.next()?;
    let session = fields.next()?.parse().ok()?;
    Some((ppid, session))
}

/// Why `pid` counts as one of this host's workers or what one started, or `None`.
pub(crate) fn worker_origin(pid: u32) -> Option<String> {
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
    let (ppid, session) = stat(pid)?;
    if live.contains(&session) {
        return Some(format!(
            "process {pid} is in the session of plugin worker {session}"
        ));
    }
    // Ancestors, up to init (bounded: a cycle cannot happen, but a racing reuse could).
    let mut current = ppid;
    for _ in 0..4096 {
        if current <= 1 {
            break;
        }
        if live.contains(&current) {
            return Some(format!(
                "process {pid} was started by plugin worker {current}"
            ));
        }
        if current == me {
            break;
        }
        current = stat(current)?.0;
    }
    if ppid == me && carries_marks(pid) {
        return Some(format!(
            "process {pid} was started by a plugin worker (it carries a worker's seccomp \
             filter)"
        ));
    }
    None
}

/// No new privileges and a seccomp filter: what every process a worker starts inherits.
pub(crate) fn carries_marks(pid: u32) -> bool {
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
}
