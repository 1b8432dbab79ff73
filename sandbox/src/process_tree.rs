//! Finding and killing every process a command started: its session and process group
//! (the command is made leader of both) and every descendant, found by walking `/proc`.
//! The tree is stopped first (SIGSTOP, repeated until no new process appears, so nothing
//! forks while it is being killed), then killed (SIGKILL).
//!
//! A process that leaves the session (`setsid`) and whose parent has exited (a daemon's
//! double fork) is no longer linked to the command in `/proc`; it is found by its
//! environment instead: every command starts with `TOOLHOST_COMMAND=<a tag unique to the
//! call>`, which its descendants inherit, and `kill_tagged` ends every process of this
//! uid whose `/proc/PID/environ` holds that entry.
//!
//! Weak spot: a process that both escapes the tree and drops the tag (`setsid env -i ...`)
//! is not found; the sandbox still holds it (no writes outside the roots, no network
//! unless allowed), and the host ends what carries the call's `TOOLHOST_SESSION` at a
//! child turn's teardown. Where `/proc` belongs to another PID namespace than this
//! process's (its pids are not ours to signal), the environment scan does nothing.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::os::unix::fs::MetadataExt as _;
#[cfg(test)]
use std::time::{Duration, Instant};

/// A process as `/proc/PID/stat` describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    /// Its id.
    pid: i32,
    /// Its parent's id.
    ppid: i32,
    /// Its process group.
    pgrp: i32,
    /// Its session.
    session: i32,
    /// Its state letter (`Z`: a zombie, already dead).
    state: u8,
    /// Its controlling terminal's device number (0: none).
    tty: i32,
    /// When it started (clock ticks after boot).
    start: u64,
}

/// Reads `/proc/PID/stat`; `None` when the process is gone (or the line is unreadable).
fn stat(pid: i32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Parses a `/proc/PID/stat` line. The command name (in parentheses) may hold spaces and
/// parentheses, so the fields are read after the last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let pid = text.split_whitespace().next()?.parse().ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = *fields.next()?.as_bytes().first()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    let session = fields.next()?.parse().ok()?;
    let tty = fields.next().and_then(|f| f.parse().ok()).unwrap_or(0);
    // Field 22 (starttime), 15 fields after tty_nr (field 7); 0 if the line is short.
    let start = fields.nth(14).and_then(|f| f.parse().ok()).unwrap_or(0);
    Some(Stat {
        pid,
        ppid,
        pgrp,
        session,
        state,
        tty,
        start,
    })
}

/// Every process readable in `/proc` now.
fn all_processes() -> Vec<Stat> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(stat)
        .collect()
}

/// The live (not zombie) processes of `leader`'s tree: in its session or process group,
/// or descended from it or from one of those. Never this process or PID 1.
pub fn members(leader: i32) -> Vec<i32> {
    tree_of(leader, &all_processes())
}

/// [`members`] over a given process table (for tests).
fn tree_of(leader: i32, table: &[Stat]) -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for p in table {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    let mut found: HashSet<i32> = table
        .iter()
        .filter(|p| p.pid == leader || p.pgrp == leader || p.session == leader)
        .map(|p| p.pid)
        .collect();
    let mut queue: Vec<i32> = found.iter().copied().chain([leader]).collect();
    while let Some(pid) = queue.pop() {
        for &child in children.get(&pid).map(Vec::as_slice).unwrap_or_default() {
            if found.insert(child) {
                queue.push(child);
            }
        }
    }
    let live: HashSet<i32> = table
        .iter()
        .filter(|p| p.state != b'Z')
        .map(|p| p.pid)
        .collect();
    let mut out: Vec<i32> = found
        .into_iter()
        .filter(|pid| *pid != me && *pid > 1 && live.contains(pid))
        .collect();
    out.sort_unstable();
    out
}

/// Stops and kills `leader`'s whole tree; returns how many processes were killed.
/// Rounds of SIGSTOP repeat until a walk finds no process not yet stopped (a process
/// forked between two walks is found by the next), bounded.
pub fn kill_tree(leader: i32) -> usize {
    let mut stopped: HashSet<i32> = HashSet::new();
    for _ in 0..20 {
        let new: Vec<i32> = members(leader)
            .into_iter()
            .filter(|p| !stopped.contains(p))
            .collect();
        if new.is_empty() {
            break;
        }
        for pid in new {
            // SAFETY: kill(2) with a positive pid and a valid signal touches no memory.
            unsafe { libc::kill(pid, libc::SIGSTOP) };
            stopped.insert(pid);
        }
    }
    // Held before the kill, so waiting for each below watches that process and no other.
    let held: Vec<(i32, Option<OwnedFd>)> = stopped.iter().map(|&p| (p, pidfd_open(p))).collect();
    for &pid in &stopped {
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    // The group and the session leader's group, in case a process was missed.
    // SAFETY: killpg(2) with a positive group id touches no memory.
    unsafe { libc::killpg(leader, libc::SIGKILL) };
    // Dead before the caller scans for tagged processes: a killed process that has not
    // died yet would be found, and counted, again.
    for (pid, fd) in &held {
        if let Some(fd) = fd {
            wait_dead(fd, DEATH_LIMIT);
        }
        if *pid != leader {
            reap_if_ours(*pid);
        }
    }
    stopped.len()
}

/// Makes this process the child subreaper of what it starts (once per process; not
/// inherited by its children): an orphan (a double-forked daemon) is reparented here, not
/// to init, so it stays a descendant ([`descends_from`]) and the kill at the end of a
/// command can reap it. The host calls it at start, [`crate::runner::run`] in a worker.
pub fn become_subreaper() -> std::io::Result<()> {
    static DONE: std::sync::OnceLock<Option<i32>> = std::sync::OnceLock::new();
    let failed = DONE.get_or_init(|| {
        let (one, zero): (libc::c_ulong, libc::c_ulong) = (1, 0);
        // SAFETY: PR_SET_CHILD_SUBREAPER reads only its integer arguments.
        let done = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, one, zero, zero, zero) };
        (done != 0).then(|| std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    });
    match failed {
        None => Ok(()),
        Some(errno) => Err(std::io::Error::from_raw_os_error(*errno)),
    }
}

/// The ancestors of process `pid` by the parent links of `/proc`, its parent first, up to
/// (not including) init or a process whose parent is outside this PID namespace; `None`
/// when `pid` is gone. A link that exits during the walk (its children move up to the
/// subreaper) restarts it, bounded.
pub fn ancestors(pid: i32) -> Option<Vec<i32>> {
    'walk: for _ in 0..16 {
        let mut chain = Vec::new();
        let mut current = stat(pid)?.ppid;
        while current > 1 && chain.len() < 4096 {
            chain.push(current);
            match stat(current) {
                Some(s) => current = s.ppid,
                None => continue 'walk,
            }
        }
        return Some(chain);
    }
    None
}

/// The session process `pid` is in, or `None` when it is gone.
pub fn session_of(pid: i32) -> Option<i32> {
    stat(pid).map(|s| s.session)
}

/// Whether process `pid` descends from process `ancestor` (is it, its child, its child's
/// child...); `None` when `pid` is gone. A process cannot choose its parent: when its
/// parent dies the kernel makes its nearest child-subreaper ancestor its parent (the host
/// is one, [`become_subreaper`]), so neither a double fork nor `setsid` nor a new
/// environment takes a process out of the host's tree.
pub fn descends_from(pid: i32, ancestor: i32) -> Option<bool> {
    if pid == ancestor {
        return Some(stat(pid).is_some());
    }
    ancestors(pid).map(|chain| chain.contains(&ancestor))
}

/// The controlling terminal of process `pid` (`/dev/pts/N` where it is a
/// pseudo-terminal, else its device number), or `None` when it has none (or is gone).
pub fn controlling_terminal(pid: i32) -> Option<String> {
    let tty = stat(pid)?.tty;
    if tty == 0 {
        return None;
    }
    // The kernel's encoding of a device number in /proc/PID/stat.
    let major = (tty >> 8) & 0xfff;
    let minor = (tty & 0xff) | ((tty >> 12) & 0xfff00);
    Some(if (136..=143).contains(&major) {
        format!("/dev/pts/{}", (major - 136) * 256 + minor)
    } else {
        format!("tty device {major}:{minor}")
    })
}

/// The environment variable whose value tags one command's processes.
pub(crate) const COMMAND_TAG: &str = "TOOLHOST_COMMAND";

/// A tag no other command of this process or any other has: the plugin's pid, the time
/// and a counter.
pub fn new_tag() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{nanos}-{n}", std::process::id())
}

/// Stops and kills every process of this uid (never this one) whose environment holds
/// `TOOLHOST_COMMAND=<tag>`, in rounds until a scan finds none (bounded); returns how many
/// distinct processes were killed. Each is held by a pidfd opened before its environment
/// is read, so a reused pid is read again rather than signalled blindly; after each round
/// every process killed is waited for (its pidfd turns readable when it dies), so the next
/// scan cannot find, and count, a process that was killed but had not died yet. One this
/// process inherited (its child subreaper) is reaped.
pub(crate) fn kill_tagged(tag: &str) -> usize {
    let mut killed: HashSet<(i32, u64)> = HashSet::new();
    for _ in 0..20 {
        let found = find_tagged(COMMAND_TAG, tag, &|_| false);
        if found.is_empty() {
            break;
        }
        // Stopped first, so none forks while the others are killed.
        for t in &found {
            signal_tagged(t, libc::SIGSTOP);
        }
        for t in &found {
            signal_tagged(t, libc::SIGKILL);
        }
        for t in &found {
            wait_dead(&t.pidfd, DEATH_LIMIT);
            killed.insert((t.pid, t.start));
            reap_if_ours(t.pid);
        }
    }
    killed.len()
}

/// How long [`kill_tagged`] waits for one killed process to die (SIGKILL cannot be
/// caught; this bounds a process stuck in the kernel).
const DEATH_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Waits until the process of `pidfd` has died (the pidfd is readable) or `limit` passes.
fn wait_dead(pidfd: &OwnedFd, limit: std::time::Duration) {
    let end = std::time::Instant::now() + limit;
    loop {
        let left = end.saturating_duration_since(std::time::Instant::now());
        let mut fd = libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let millis = libc::c_int::try_from(left.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: `fd` is one valid pollfd structure.
        let ready = unsafe { libc::poll(&raw mut fd, 1, millis) };
        let interrupted =
            ready < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted;
        if !interrupted || left.is_zero() {
            return;
        }
    }
}

/// Reaps `pid` if it is a dead child of this process (an orphan reparented here), so it
/// does not stay a zombie; never blocks, never touches another process's child.
fn reap_if_ours(pid: i32) {
    let me = std::process::id() as i32;
    if stat(pid).is_some_and(|s| s.ppid == me && s.state == b'Z') {
        let mut status = 0;
        // SAFETY: waitpid on a pid that is our zombie child; writes only `status`.
        unsafe { libc::waitpid(pid, &raw mut status, libc::WNOHANG) };
    }
}

/// Whether `/proc` shows this process's PID namespace (`/proc/self` is our own pid):
/// otherwise its pids are not ours to signal.
fn proc_is_ours() -> bool {
    let me = std::process::id().to_string();
    std::fs::read_link("/proc/self").is_ok_and(|link| link.as_os_str() == me.as_str())
}

/// A live process found by [`find_tagged`], held by a pidfd.
#[derive(Debug)]
pub struct TaggedProcess {
    /// Its pid (as it was when found).
    pub pid: i32,
    /// Its start time (`/proc/PID/stat` field 22): with the pid, names one process.
    pub start: u64,
    /// Its pidfd: signals sent through it never reach a process that reused the pid.
    pub pidfd: OwnedFd,
}

/// The live processes of this uid, other than this one and those `skip` names, whose
/// environment holds `variable=value` exactly (empty for an empty value, or when `/proc`
/// belongs to another PID namespace). Each is held by a pidfd opened before its
/// environment is read: if the pid was reused, both are the new process's.
pub fn find_tagged(variable: &str, value: &str, skip: &dyn Fn(i32) -> bool) -> Vec<TaggedProcess> {
    if value.is_empty() || !proc_is_ours() {
        return Vec::new();
    }
    let entry = format!("{variable}={value}");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let me = std::process::id() as i32;
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
        if pid <= 1 || pid == me || skip(pid) || item.metadata().map_or(true, |m| m.uid() != uid) {
            continue;
        }
        let Some(pidfd) = pidfd_open(pid) else {
            continue;
        };
        let Some(now) = stat(pid).filter(|s| s.state != b'Z') else {
            continue;
        };
        let holds = std::fs::read(format!("/proc/{pid}/environ"))
            .is_ok_and(|env| holds_entry(&env, entry.as_bytes()));
        if holds {
            found.push(TaggedProcess {
                pid,
                start: now.start,
                pidfd,
            });
        }
    }
    found
}

/// Whether a NUL-separated environment block holds exactly `entry`.
fn holds_entry(environ: &[u8], entry: &[u8]) -> bool {
    environ.split(|b| *b == 0).any(|e| e == entry)
}

/// Sends `signal` to `process` through its pidfd (nothing if it has exited).
pub fn signal_tagged(process: &TaggedProcess, signal: i32) {
    pidfd_signal(&process.pidfd, signal);
}

/// `pidfd_open(2)`: a descriptor that holds `pid` (signals through it never reach a
/// process that reused the pid) and turns readable when it exits (Linux 5.3).
pub(crate) fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: the kernel just returned this descriptor, owned by nobody else.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn pidfd_signal(fd: &OwnedFd, signal: i32) {
    // SAFETY: pidfd_send_signal reads the descriptor and the signal; a null siginfo is
    // allowed.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
}

/// Whether `pid` is gone (no such process, or a zombie waiting to be reaped).
#[cfg(test)]
fn is_gone(pid: i32) -> bool {
    stat(pid).is_none_or(|s| s.state == b'Z')
}

/// Waits until every process of `pids` is gone or `limit` passes; true if all are gone.
#[cfg(test)]
fn wait_gone(pids: &[i32], limit: Duration) -> bool {
    wait_until(limit, || pids.iter().all(|&p| is_gone(p)))
}

/// Waits until `done` holds or `limit` passes; true if it held.
#[cfg(test)]
fn wait_until(limit: Duration, done: impl Fn() -> bool) -> bool {
    let end = Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn p(pid: i32, ppid: i32, pgrp: i32, session: i32) -> Stat {
        Stat {
            pid,
            ppid,
            pgrp,
            session,
            state: b'S',
            tty: 0,
            start: 0,
        }
    }

    #[test]
    fn stat_lines_with_odd_names_parse() {
        let s = parse_stat("4242 (a (weird) name) S 1 4242 4240 0 -1 4194560 ...").expect("parse");
        assert_eq!(s, p(4242, 1, 4242, 4240));
        assert!(parse_stat("garbage").is_none());
    }

    #[test]
    fn the_tree_takes_group_session_and_descendants_but_not_others() {
        let table = [
            p(100, 50, 100, 100), // the leader
            p(101, 100, 100, 100),
            p(102, 101, 102, 100), // its own group, same session
            p(103, 1, 103, 103),   // escaped: own session, parent gone
            p(104, 103, 103, 103),
            p(105, 102, 105, 105), // left the session but still a descendant
            p(200, 50, 200, 50),   // a sibling of the leader
            Stat {
                state: b'Z',
                ..p(106, 100, 100, 100)
            },
        ];
        assert_eq!(tree_of(100, &table), vec![100, 101, 102, 105]);
    }

    #[test]
    fn a_double_forked_daemon_is_found_by_its_tag_and_killed() {
        let tag = new_tag();
        let mut command = std::process::Command::new("sh");
        // The daemon leaves the session and its parent exits: the tree no longer has it.
        command
            .arg("-c")
            .arg("(setsid sleep 300 > /dev/null 2>&1 & echo $!)")
            .env(COMMAND_TAG, &tag)
            .stdout(std::process::Stdio::piped());
        let out = command.output().expect("run sh");
        let daemon: i32 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("the daemon's pid");
        let other = std::process::Command::new("sleep")
            .arg("300")
            .env(COMMAND_TAG, format!("{tag}0"))
            .spawn();
        let mut other = other.expect("spawn sleep");
        // The daemon's pid is printed before it has exec'd `sleep`; while an exec is under
        // way its environment reads back empty, so wait (bounded) until it is `sleep`.
        assert!(
            wait_until(Duration::from_secs(30), || {
                std::fs::read(format!("/proc/{daemon}/cmdline"))
                    .is_ok_and(|c| c.starts_with(b"sleep\0"))
                    && !find_tagged(COMMAND_TAG, &tag, &|_| false).is_empty()
            }),
            "{daemon} never became a tagged `sleep`"
        );
        assert!(!is_gone(daemon));
        // Distinct processes killed: the daemon alone, whatever the retries saw.
        assert_eq!(kill_tagged(&tag), 1);
        assert!(
            wait_gone(&[daemon], Duration::from_secs(10)),
            "{daemon} survived"
        );
        assert!(
            !is_gone(other.id() as i32),
            "another tag's process was killed"
        );
        assert_eq!(kill_tagged(""), 0);
        other.kill().expect("kill");
        other.wait().expect("reap");
    }

    #[test]
    fn a_real_tree_is_killed_whole() {
        use std::os::unix::process::CommandExt as _;
        let mut command = std::process::Command::new("sh");
        command
            .arg("-c")
            .arg("sleep 300 & sleep 300 & echo started; wait")
            .stdout(std::process::Stdio::piped());
        // SAFETY: setsid(2) is async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                libc::setsid();
                Ok(())
            })
        };
        let mut child = command.spawn().expect("spawn");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("stdout");
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).expect("read");
        let leader = child.id() as i32;
        let tree = members(leader);
        assert_eq!(tree.len(), 3, "{tree:?}");
        assert_eq!(kill_tree(leader), 3);
        child.wait().expect("reap");
        assert!(
            wait_gone(&tree, Duration::from_secs(10)),
            "{tree:?} survived"
        );
    }
}
