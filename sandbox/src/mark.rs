//! The mark every process a toolhost confines carries, so that every toolhost's control
//! socket can refuse it, whichever host started it: a hard `RLIMIT_RTTIME` of at most
//! [`MARK_US`] microseconds. A process can lower a hard limit but never raise it without
//! `CAP_SYS_RESOURCE` in the first user namespace (which a confined process has dropped),
//! the limit survives `fork`, `exec`, `setsid` and a cleared environment, and any process
//! of any user can read it (`/proc/PID/limits`). It changes nothing else: the limit
//! bounds only the CPU time a real-time (`SCHED_FIFO`/`SCHED_RR`) thread may use without
//! blocking, and 2^40 µs is almost thirteen days of it.

use std::io;

/// The mark: a hard `RLIMIT_RTTIME` at or below this many microseconds (2^40).
pub const MARK_US: u64 = 1 << 40;

/// Puts the mark on the calling process (the limit is per process): lowers the soft and
/// the hard `RLIMIT_RTTIME` to [`MARK_US`] where they are higher, and leaves a lower one
/// as it is. Async-signal-safe (two system calls), so a child may call it between `fork`
/// and `exec`.
pub fn set() -> io::Result<()> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct this stack owns.
    if unsafe { libc::getrlimit(libc::RLIMIT_RTTIME, &raw mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mark = MARK_US as libc::rlim_t;
    if limit.rlim_max != libc::RLIM_INFINITY && limit.rlim_max <= mark {
        return Ok(());
    }
    let marked = libc::rlimit {
        rlim_cur: if limit.rlim_cur == libc::RLIM_INFINITY {
            mark
        } else {
            limit.rlim_cur.min(mark)
        },
        rlim_max: mark,
    };
    // SAFETY: setrlimit reads the struct this stack owns.
    if unsafe { libc::setrlimit(libc::RLIMIT_RTTIME, &raw const marked) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether process `pid` carries the mark: `Some(true)` when its hard `RLIMIT_RTTIME` is
/// at most [`MARK_US`], `Some(false)` when it is higher or unlimited, `None` when its
/// limits cannot be read (it is gone).
pub fn carried_by(pid: i32) -> Option<bool> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    Some(hard_rttime(&limits).is_some_and(|hard| hard <= MARK_US))
}

/// The hard limit of `Max realtime timeout` in a `/proc/PID/limits` text, `None` when it
/// is unlimited (or the line is missing).
fn hard_rttime(limits: &str) -> Option<u64> {
    let line = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max realtime timeout"))?;
    // "  <soft>  <hard>  us"
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt as _;

    #[test]
    fn reads_the_hard_limit_of_a_limits_text() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \n\
                    Max realtime priority     0                    0                    \n\
                    Max realtime timeout      unlimited            unlimited            us        \n";
        assert_eq!(hard_rttime(text), None);
        let marked = text.replace(
            "unlimited            unlimited            us",
            "1099511627776        1099511627776        us",
        );
        assert_eq!(hard_rttime(&marked), Some(MARK_US));
    }

    #[test]
    fn a_marked_child_keeps_the_mark_through_exec_and_cannot_raise_it() {
        let me = i32::try_from(std::process::id()).expect("pid");
        if carried_by(me) == Some(true) {
            println!("skipped: the tests run inside a toolhost's confinement already");
            return;
        }
        // The child tries to raise its hard limit back (as root it could; a confined
        // process has no CAP_SYS_RESOURCE, which `prlimit` without it shows below).
        let mut command = std::process::Command::new("sh");
        command
            .arg("-c")
            .arg("ulimit -H -r unlimited 2>/dev/null; exec sleep 30");
        let (last, held) = (crate::caps::last_cap(), crate::caps::has_any());
        // SAFETY: `set` makes system calls only; dropping capabilities likewise.
        unsafe {
            command.pre_exec(move || {
                set()?;
                crate::caps::drop_all_in_child(last, held)
            });
        }
        let mut child = command.spawn().expect("sh");
        let pid = i32::try_from(child.id()).expect("pid");
        // Wait (bounded) for the exec of sleep: the mark is read from the program then.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .is_ok_and(|c| c.trim() != "sleep")
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(carried_by(pid), Some(true));
        assert_eq!(carried_by(me), Some(false), "the parent is not marked");
        let _ = child.kill();
        let _ = child.wait();
    }
}
