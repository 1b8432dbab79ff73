//! Processes tagged with an environment entry (`TOOLHOST_SESSION=<session id>`), found by
//! scanning `/proc` and ended: what a child turn's tools left running is ended at the
//! child's teardown, whatever their parent chain (a double-forked daemon included).
//!
//! A process is a candidate only if it runs as this process's effective uid, is not this
//! process or one of its plugin workers, and its `/proc/PID/environ` holds the exact entry
//! (`KEY=VALUE` between two NULs). Each one is held through a pidfd opened *before* its
//! environment is read, so a pid reused between the scan and the signal is read again,
//! never signalled blindly. Ending is SIGTERM, a short bounded grace, then SIGKILL.
//!
//! Weak spots: `environ` is the environment a program was started with; a process that
//! clears its environment and execs again (`env -i`) drops the tag and is not found. A
//! process that is not dumpable (a setuid program, or one that asked) has an unreadable
//! `environ` and is not found either. Nothing is done where `/proc` belongs to another
//! PID namespace than this process's (its pids would not be ours to signal).

use std::collections::BTreeSet;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::os::unix::fs::MetadataExt as _;
use std::time::{Duration, Instant};

/// The environment variable that tags processes started on behalf of a session.
pub(crate) const SESSION_VARIABLE: &str = "TOOLHOST_SESSION";

/// A process that was ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EndedProcess {
    /// Its id.
    pub(crate) pid: i32,
    /// Its command name (`/proc/PID/comm`).
    pub(crate) name: String,
    /// It ignored SIGTERM for the grace and was killed.
    pub(crate) killed: bool,
}

/// A process found with the tag, held by a pidfd.
struct Tagged {
    pid: i32,
    name: String,
    pidfd: OwnedFd,
}

/// Ends every process of this uid whose environment holds `variable=value` (SIGTERM,
/// up to `grace` to exit, then SIGKILL), in up to three rounds (a process forked by one
/// being ended is found by the next); returns what was ended. Blocking: it waits up to
/// `grace` per round.
pub(crate) fn end_tagged(variable: &str, value: &str, grace: Duration) -> Vec<EndedProcess> {
    if value.is_empty() || !proc_is_ours() {
        return Vec::new();
    }
    let entry = format!("{variable}={value}");
    let mut ended: Vec<EndedProcess> = Vec::new();
    for _ in 0..3 {
        let found = find(entry.as_bytes(), &excluded());
        if found.is_empty() {
            break;
        }
        for t in &found {
            signal(&t.pidfd, libc::SIGTERM);
        }
        let end = Instant::now() + grace;
        let mut left: Vec<&Tagged> = found.iter().collect();
        loop {
            left.retain(|t| !has_exited(&t.pidfd));
            if left.is_empty() || Instant::now() >= end {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let killed: BTreeSet<i32> = left.iter().map(|t| t.pid).collect();
        for t in &left {
            signal(&t.pidfd, libc::SIGKILL);
        }
        ended.extend(found.iter().map(|t| EndedProcess {
            pid: t.pid,
            name: t.name.clone(),
            killed: killed.contains(&t.pid),
        }));
    }
    ended
}

/// One line for a person or a model: "ended 2 processes the helper left running: pid 123
/// sleep, pid 124 sh (killed after ignoring SIGTERM)".
pub(crate) fn describe(ended: &[EndedProcess]) -> String {
    let list: Vec<String> = ended
        .iter()
        .map(|p| {
            let how = if p.killed {
                " (killed after ignoring SIGTERM)"
            } else {
                ""
            };
            format!("pid {} {}{how}", p.pid, p.name)
        })
        .collect();
    let noun = if ended.len() == 1 {
        "process"
    } else {
        "processes"
    };
    format!(
        "ended {} {noun} the helper left running: {}",
        ended.len(),
        list.join(", ")
    )
}

/// Whether `/proc` shows this process's PID namespace (`/proc/self` is our own pid).
fn proc_is_ours() -> bool {
    let me = std::process::id().to_string();
    std::fs::read_link("/proc/self").is_ok_and(|link| link.as_os_str() == me.as_str())
}

/// This process and its live plugin workers: never ended.
fn excluded() -> BTreeSet<i32> {
    let mut out: BTreeSet<i32> = crate::sys::workers::live_pids()
        .into_iter()
        .filter_map(|p| i32::try_from(p).ok())
        .collect();
    out.extend(i32::try_from(std::process::id()).ok());
    out
}

/// The processes of this uid, other than `excluded`, whose environment holds `entry`.
fn find(entry: &[u8], excluded: &BTreeSet<i32>) -> Vec<Tagged> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let mut found = Vec::new();
    for item in dir.flatten() {
        let Some(pid) = item
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if pid <= 1 || excluded.contains(&pid) {
            continue;
        }
        if item.metadata().map_or(true, |m| m.uid() != uid) {
            continue;
        }
        // Held first, read second: if the pid was reused, the pidfd is the new process's,
        // and so is the environment read after it.
        let Some(pidfd) = pidfd_open(pid) else {
            continue;
        };
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if !holds_entry(&environ, entry) || has_exited(&pidfd) {
            continue;
        }
        let name = std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map(|n| n.trim_end().to_owned())
            .unwrap_or_else(|_| "?".to_owned());
        found.push(Tagged { pid, name, pidfd });
    }
    found
}

/// Whether a NUL-separated environment block holds exactly `entry`.
fn holds_entry(environ: &[u8], entry: &[u8]) -> bool {
    environ.split(|b| *b == 0).any(|e| e == entry)
}

fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: the descriptor was just returned to us and nobody else owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sends `signal` to the process the pidfd holds (nothing if it has exited).
fn signal(pidfd: &OwnedFd, signal: i32) {
    // SAFETY: pidfd_send_signal reads the descriptor and the signal; a null siginfo is
    // allowed.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
}

/// Whether the process has exited (its pidfd is readable then); a zombie counts as exited.
fn has_exited(pidfd: &OwnedFd) -> bool {
    crate::sys::process::wait_fd(pidfd.as_raw_fd(), libc::POLLIN, 0).unwrap_or(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    #[test]
    fn an_entry_matches_only_whole_and_exact() {
        let env = b"A=1\0TOOLHOST_SESSION=s-1\0B=2\0";
        assert!(holds_entry(env, b"TOOLHOST_SESSION=s-1"));
        assert!(!holds_entry(env, b"TOOLHOST_SESSION=s-"));
        assert!(!holds_entry(env, b"OOLHOST_SESSION=s-1"));
        assert!(!holds_entry(
            b"TOOLHOST_SESSION=s-10\0",
            b"TOOLHOST_SESSION=s-1"
        ));
        assert!(holds_entry(
            b"TOOLHOST_SESSION=s-1",
            b"TOOLHOST_SESSION=s-1"
        ));
    }

    #[test]
    fn the_line_names_each_process() {
        let ended = [
            EndedProcess {
                pid: 12,
                name: "sleep".to_owned(),
                killed: false,
            },
            EndedProcess {
                pid: 13,
                name: "stubborn".to_owned(),
                killed: true,
            },
        ];
        assert_eq!(
            describe(&ended),
            "ended 2 processes the helper left running: pid 12 sleep, pid 13 stubborn \
             (killed after ignoring SIGTERM)"
        );
        assert_eq!(
            describe(&ended[..1]),
            "ended 1 process the helper left running: pid 12 sleep"
        );
    }

    fn gone(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        })
    }

    #[test]
    fn tagged_processes_end_and_others_survive() {
        let tag = format!("unit-{}", std::process::id());
        // Each says "ready" once it is set up (the trap in place), so no signal comes early.
        let spawn = |value: &str, script: &str| {
            let mut child = Command::new("sh")
                .arg("-c")
                .arg(format!("{script} & echo ready; wait"))
                .env(SESSION_VARIABLE, value)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn sh");
            let mut line = String::new();
            let out = child.stdout.take().expect("stdout");
            std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line)
                .expect("read");
            assert_eq!(line, "ready\n");
            child
        };
        let mut tagged = spawn(&tag, "sleep 300");
        // Ignores SIGTERM (as does its shell, which waits for it): killed after the grace.
        let mut stubborn = spawn(&tag, "trap '' TERM; sh -c 'trap \"\" TERM; sleep 300'");
        let mut other = spawn(&format!("{tag}-other"), "sleep 300");
        let ended = end_tagged(SESSION_VARIABLE, &tag, Duration::from_millis(300));
        let pids: BTreeSet<i32> = ended.iter().map(|p| p.pid).collect();
        let expect: BTreeSet<i32> = [tagged.id(), stubborn.id()]
            .into_iter()
            .map(|p| i32::try_from(p).expect("pid"))
            .collect();
        assert!(expect.is_subset(&pids), "{ended:?}");
        assert!(
            ended
                .iter()
                .any(|p| p.killed && p.pid == stubborn.id() as i32),
            "{ended:?}"
        );
        tagged.wait().expect("reap");
        stubborn.wait().expect("reap");
        assert!(gone(tagged.id()) && gone(stubborn.id()));
        assert!(!gone(other.id()), "an untagged process was ended");
        assert!(end_tagged(SESSION_VARIABLE, "", Duration::ZERO).is_empty());
        other.kill().expect("kill");
        other.wait().expect("reap");
    }
}
