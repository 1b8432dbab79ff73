//! Processes tagged with an environment entry (`TOOLHOST_SESSION=<session id>`), found by
//! scanning `/proc` (`toolhost_sandbox::process_tree::find_tagged`, which `run_command`'s
//! end-of-call cleanup uses too) and ended: what a child turn's tools left running is ended at the
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
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::time::{Duration, Instant};

use crate::sys::sandbox::{TaggedProcess, find_tagged, signal_tagged};

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

/// Ends every process of this uid whose environment holds `variable=value` (SIGTERM,
/// up to `grace` to exit, then SIGKILL), in up to three rounds (a process forked by one
/// being ended is found by the next); returns what was ended. Blocking: it waits up to
/// `grace` per round. Leaves alone the processes `keep` names (by pid): those a child turn handed to its
/// parent, or all but the one to end.
pub(crate) fn end_tagged_except(
    variable: &str,
    value: &str,
    grace: Duration,
    keep: &dyn Fn(i32) -> bool,
) -> Vec<EndedProcess> {
    let mut ended: Vec<EndedProcess> = Vec::new();
    for _ in 0..3 {
        // This process and its live plugin workers are never ended.
        let workers = crate::sys::workers::live_pids();
        let skip = |pid: i32| keep(pid) || u32::try_from(pid).is_ok_and(|p| workers.contains(&p));
        let found = find_tagged(variable, value, &skip);
        if found.is_empty() {
            break;
        }
        for t in &found {
            signal_tagged(t, libc::SIGTERM);
        }
        let end = Instant::now() + grace;
        let mut left: Vec<&TaggedProcess> = found.iter().collect();
        loop {
            left.retain(|t| !has_exited(&t.pidfd));
            if left.is_empty() || Instant::now() >= end {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let killed: BTreeSet<i32> = left.iter().map(|t| t.pid).collect();
        for t in &left {
            signal_tagged(t, libc::SIGKILL);
        }
        ended.extend(found.iter().map(|t| {
            EndedProcess {
                pid: t.pid,
                name: std::fs::read_to_string(format!("/proc/{}/comm", t.pid))
                    .map(|n| n.trim_end().to_owned())
                    .unwrap_or_else(|_| "?".to_owned()),
                killed: killed.contains(&t.pid),
            }
        }));
    }
    ended
}

/// A live process tagged `variable=value`: its pid, command name and command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TaggedInfo {
    /// Its id.
    pub(crate) pid: i32,
    /// Its command name (`/proc/PID/comm`).
    pub(crate) name: String,
    /// Its command line, arguments joined by spaces (at most 200 characters).
    pub(crate) command: String,
}

/// The live processes of this uid tagged `variable=value` (this process and its plugin
/// workers left out), without touching them.
pub(crate) fn list_tagged(variable: &str, value: &str) -> Vec<TaggedInfo> {
    let workers = crate::sys::workers::live_pids();
    let skip = |pid: i32| u32::try_from(pid).is_ok_and(|p| workers.contains(&p));
    find_tagged(variable, value, &skip)
        .iter()
        .map(|t| {
            let command: String = std::fs::read(format!("/proc/{}/cmdline", t.pid))
                .map(|c| {
                    c.split(|b| *b == 0)
                        .filter(|a| !a.is_empty())
                        .map(|a| String::from_utf8_lossy(a).into_owned())
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_default();
            TaggedInfo {
                pid: t.pid,
                name: std::fs::read_to_string(format!("/proc/{}/comm", t.pid))
                    .map(|n| n.trim_end().to_owned())
                    .unwrap_or_else(|_| "?".to_owned()),
                command: command.chars().take(200).collect(),
            }
        })
        .collect()
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

/// Whether the process has exited (its pidfd is readable then); a zombie counts as exited.
fn has_exited(pidfd: &OwnedFd) -> bool {
    crate::sys::process::wait_fd(pidfd.as_raw_fd(), libc::POLLIN, 0).unwrap_or(true)
}

/// Ends what every live stdio MCP server started that left its process group (found by
/// its tag): what a host does on its way out, after ending the servers' groups.
pub(crate) fn end_server_stragglers() {
    for tag in crate::sys::workers::take_tags() {
        end_tagged_except(
            crate::sys::workers::MCP_SERVER_TAG,
            &tag,
            Duration::from_millis(100),
            &|_| false,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

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
        let ended = end_tagged_except(SESSION_VARIABLE, &tag, Duration::from_millis(300), &|_| {
            false
        });
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
        assert!(end_tagged_except(SESSION_VARIABLE, "", Duration::ZERO, &|_| false).is_empty());
        other.kill().expect("kill");
        other.wait().expect("reap");
    }
}
