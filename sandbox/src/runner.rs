//! Runs one sandboxed command (the workspace plugin's `run_command`, the Rust plugin's
//! cargo and rustc calls): spawned with a reduced environment, in a session
//! and process group of its own (no controlling terminal), killed with `SIGKILL` if the
//! thread that started it dies (`PR_SET_PDEATHSIG`), inside a Landlock ruleset prepared
//! before the fork and entered between fork and exec. One thread reads both streams and
//! feeds standard input through `poll(2)`, watches the process through a pidfd, the time
//! limit and the call's cancel flag, and at the end kills whatever of the command's
//! process tree is left, and every process that carries the command's tag in its
//! environment (a double-forked daemon that left the tree) ([`crate::process_tree`]). The
//! caller says when the call is cancelled with a closure, so this crate needs no plugin
//! API.
//!
//! Each stream is held up to [`STREAM_CAP`] bytes: past that the first and last halves
//! are kept and the middle is dropped (and counted).

use std::collections::VecDeque;
use std::io::{self, Write as _};
use std::os::fd::{AsRawFd as _, RawFd};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::PreparedSandbox;

use crate::process_tree;

/// The most a stream's capture holds in memory (half from its start, half from its end).
pub const STREAM_CAP: usize = 8 * 1024 * 1024;

/// How long the streams are still read after the command's tree was killed, for a
/// process that escaped the tree and holds them open.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// What to run and how.
pub struct Launch {
    /// The program's path (found on `PATH` already).
    pub program: PathBuf,
    /// `argv[0]`: the program as the caller named it.
    pub arg0: String,
    /// The arguments.
    pub args: Vec<String>,
    /// The working folder.
    pub cwd: PathBuf,
    /// The whole environment (the command's tag is added to it).
    pub env: Vec<(String, String)>,
    /// The tag (`TOOLHOST_COMMAND`) that finds the command's processes which left its
    /// tree ([`process_tree::new_tag`]).
    pub tag: String,
    /// Standard input's content; `None`: `/dev/null`.
    pub stdin: Option<Vec<u8>>,
    /// The time limit.
    pub timeout: Duration,
    /// The sandbox the child enters.
    pub sandbox: Arc<PreparedSandbox>,
}

/// How a command ended.
pub struct Finished {
    /// Its exit status (after a kill: the signal).
    pub status: ExitStatus,
    /// It ran past its time limit and was killed.
    pub timed_out: bool,
    /// The call was cancelled and it was killed.
    pub cancelled: bool,
    /// Wall time.
    pub duration: Duration,
    /// Standard output.
    pub stdout: Capture,
    /// Standard error.
    pub stderr: Capture,
    /// Processes of its tree killed at the end (the command itself after a time-out or
    /// cancel, and whatever it left running).
    pub killed: usize,
    /// The streams were still open after the tree was killed, and reading stopped.
    pub streams_abandoned: bool,
}

/// A stream's bytes: the first half of [`STREAM_CAP`], then the last half of the rest.
#[derive(Default)]
pub struct Capture {
    /// From the start.
    head: Vec<u8>,
    /// The most recent bytes after `head` filled.
    tail: VecDeque<u8>,
    /// Bytes dropped between the two.
    dropped: u64,
    /// The cap (both halves together).
    cap: usize,
}

impl Capture {
    /// An empty capture holding at most `cap` bytes.
    pub fn with_cap(cap: usize) -> Capture {
        Capture {
            cap,
            ..Capture::default()
        }
    }

    /// Adds `bytes`.
    pub fn push(&mut self, bytes: &[u8]) {
        let half = self.cap / 2;
        let room = half.saturating_sub(self.head.len());
        let (to_head, rest) = bytes.split_at(room.min(bytes.len()));
        self.head.extend_from_slice(to_head);
        let tail_cap = self.cap - half;
        if rest.len() >= tail_cap {
            self.dropped += (self.tail.len() + rest.len() - tail_cap) as u64;
            self.tail.clear();
            self.tail.extend(&rest[rest.len() - tail_cap..]);
            return;
        }
        let overflow = (self.tail.len() + rest.len()).saturating_sub(tail_cap);
        self.tail.drain(..overflow);
        self.dropped += overflow as u64;
        self.tail.extend(rest);
    }

    /// The bytes dropped from the middle.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The text (lossy UTF-8), with a marker where the middle was dropped.
    pub fn text(&self) -> String {
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        if self.dropped > 0 {
            text.push_str(&format!(
                "\n[... {} bytes left out here: at most {} MiB of a command's stream is \
                 kept; redirect the output to a file in the workspace to keep it all ...]\n",
                self.dropped,
                self.cap / (1024 * 1024)
            ));
        }
        let (a, b) = self.tail.as_slices();
        let mut tail = a.to_vec();
        tail.extend_from_slice(b);
        text.push_str(&String::from_utf8_lossy(&tail));
        text
    }
}

/// Runs `launch` to its end, its time limit or until `cancelled` says true (asked every
/// tick, up to 100 ms apart); the error is a spawn failure (no such program, a sandbox the
/// kernel refused) or a failure to watch it.
pub fn run(launch: Launch, cancelled: &dyn Fn() -> bool) -> io::Result<Finished> {
    // Best effort: without it an orphan goes to init, where the tag still finds it.
    let _ = process_tree::become_subreaper();
    let start = Instant::now();
    let mut child = spawn(&launch)?;
    let leader = i32::try_from(child.id()).map_err(io::Error::other)?;
    let mut streams = Streams::new(&mut child, launch.stdin)?;
    let pidfd = process_tree::pidfd_open(leader);
    let deadline = start + launch.timeout;
    let (mut timed_out, mut was_cancelled) = (false, false);
    let mut killed = 0;
    let status = loop {
        if has_exited(leader)? {
            // Whatever it left running (background jobs) goes with it. The leader is not
            // reaped yet, so its id (the tree's session and group) cannot be reused by
            // another process while the tree is walked.
            killed += process_tree::kill_tree(leader);
            killed += process_tree::kill_tagged(&launch.tag);
            break child.wait()?;
        }
        let now = Instant::now();
        if cancelled() || now >= deadline {
            was_cancelled = cancelled();
            timed_out = !was_cancelled;
            killed += process_tree::kill_tree(leader);
            killed += process_tree::kill_tagged(&launch.tag);
            break child.wait()?;
        }
        let tick = if pidfd.is_some() { 100 } else { 20 };
        let wait = (deadline - now).min(Duration::from_millis(tick));
        streams.pump(pidfd.as_ref().map(|f| f.as_raw_fd()), wait)?;
    };
    let drain_end = Instant::now() + DRAIN_LIMIT;
    while streams.open() && Instant::now() < drain_end {
        streams.pump(None, Duration::from_millis(50))?;
    }
    Ok(Finished {
        status,
        timed_out,
        cancelled: was_cancelled,
        duration: start.elapsed(),
        streams_abandoned: streams.open(),
        stdout: streams.out,
        stderr: streams.err,
        killed,
    })
}

/// Starts the child: its own session, death with this thread, the sandbox.
fn spawn(launch: &Launch) -> io::Result<Child> {
    let mut command = Command::new(&launch.program);
    command
        .arg0(&launch.arg0)
        .args(&launch.args)
        .current_dir(&launch.cwd)
        .env_clear()
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .env(process_tree::COMMAND_TAG, &launch.tag)
        .stdin(if launch.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: getpid(2) cannot fail.
    let parent = unsafe { libc::getpid() };
    let sandbox = Arc::clone(&launch.sandbox);
    let hook = move || -> io::Result<()> {
        // SAFETY: setsid, prctl, getppid and the two calls of `enter` are system calls:
        // async-signal-safe, no allocation, no lock (this runs between fork and exec).
        unsafe {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent died before the prctl: nobody would kill us later.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
        }
        sandbox.enter()
    };
    // SAFETY: the hook only makes async-signal-safe system calls (see above).
    unsafe { command.pre_exec(hook) };
    command.spawn()
}

/// Whether the child `pid` has exited, without reaping it (`waitid` with `WNOWAIT`).
fn has_exited(pid: i32) -> io::Result<bool> {
    let id = libc::id_t::try_from(pid).map_err(io::Error::other)?;
    // SAFETY: an all-zero siginfo_t is a valid value for waitid to fill in.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid writes only into `info`, which lives across the call.
    let done = unsafe {
        libc::waitid(
            libc::P_PID,
            id,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    if done < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: after a successful waitid, si_pid is set (0: no state change yet).
    Ok(unsafe { info.si_pid() } != 0)
}

/// The child's pipes, non-blocking.
struct Streams {
    /// Standard input and what is left to write.
    stdin: Option<(std::process::ChildStdin, Vec<u8>, usize)>,
    /// Standard output, until end of file.
    stdout: Option<std::process::ChildStdout>,
    /// Standard error, until end of file.
    stderr: Option<std::process::ChildStderr>,
    /// What was read from standard output.
    out: Capture,
    /// What was read from standard error.
    err: Capture,
}

impl Streams {
    /// Takes the child's pipes and makes them non-blocking.
    fn new(child: &mut Child, input: Option<Vec<u8>>) -> io::Result<Streams> {
        let stdin = match (child.stdin.take(), input) {
            (Some(pipe), Some(bytes)) => {
                nonblocking(pipe.as_raw_fd())?;
                Some((pipe, bytes, 0))
            }
            _ => None,
        };
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        for fd in stdout
            .iter()
            .map(|s| s.as_raw_fd())
            .chain(stderr.iter().map(|s| s.as_raw_fd()))
        {
            nonblocking(fd)?;
        }
        Ok(Streams {
            stdin,
            stdout,
            stderr,
            out: Capture::with_cap(STREAM_CAP),
            err: Capture::with_cap(STREAM_CAP),
        })
    }

    /// Whether an output stream is still open.
    fn open(&self) -> bool {
        self.stdout.is_some() || self.stderr.is_some()
    }

    /// Waits up to `wait` for a stream (or `pidfd`) to be ready, then moves what it can.
    fn pump(&mut self, pidfd: Option<RawFd>, wait: Duration) -> io::Result<()> {
        let mut fds: Vec<libc::pollfd> = Vec::with_capacity(4);
        let watch = |fd: RawFd, events: libc::c_short| libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        if let Some(s) = &self.stdout {
            fds.push(watch(s.as_raw_fd(), libc::POLLIN));
        }
        if let Some(s) = &self.stderr {
            fds.push(watch(s.as_raw_fd(), libc::POLLIN));
        }
        if let Some((s, _, _)) = &self.stdin {
            fds.push(watch(s.as_raw_fd(), libc::POLLOUT));
        }
        if let Some(fd) = pidfd {
            fds.push(watch(fd, libc::POLLIN));
        }
        let millis = libc::c_int::try_from(wait.as_millis()).unwrap_or(libc::c_int::MAX);
        if fds.is_empty() {
            std::thread::sleep(wait);
            return Ok(());
        }
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd structures.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, millis) };
        if ready < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(e)
            };
        }
        if read_into(&mut self.stdout, &mut self.out)? {
            self.stdout = None;
        }
        if read_into(&mut self.stderr, &mut self.err)? {
            self.stderr = None;
        }
        self.feed();
        Ok(())
    }

    /// Writes what standard input can take now; closes it when done or refused.
    fn feed(&mut self) {
        let Some((pipe, bytes, written)) = &mut self.stdin else {
            return;
        };
        loop {
            if *written >= bytes.len() {
                self.stdin = None; // closes it: end of file for the command
                return;
            }
            match pipe.write(&bytes[*written..]) {
                Ok(n) => *written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    // Closed by the command (it read what it wanted): stop feeding.
                    self.stdin = None;
                    return;
                }
            }
        }
    }
}

/// Reads all `stream` has now into `capture`; true at end of file.
fn read_into<R: std::io::Read>(stream: &mut Option<R>, capture: &mut Capture) -> io::Result<bool> {
    let Some(reader) = stream else {
        return Ok(false);
    };
    let mut buf = [0u8; 64 * 1024];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => return Ok(true),
            Ok(n) => capture.push(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Sets `O_NONBLOCK` on `fd`.
fn nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own, with integer arguments.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The exit code, or the signal that ended the process.
pub fn code_and_signal(status: ExitStatus) -> (Option<i32>, Option<i32>) {
    (status.code(), status.signal())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capture_keeps_both_ends_and_counts_the_middle() {
        let mut c = Capture::with_cap(10);
        c.push(b"abc");
        assert_eq!(c.text(), "abc");
        c.push(b"defgh"); // head "abcde", tail "fgh"
        assert_eq!((c.text().as_str(), c.dropped()), ("abcdefgh", 0));
        c.push(b"ijklmnop"); // tail keeps the last 5
        assert_eq!(c.dropped(), 6);
        let text = c.text();
        assert!(text.starts_with("abcde\n[... 6 bytes left out"), "{text}");
        assert!(text.ends_with("lmnop"), "{text}");
        c.push(b"q");
        assert_eq!(c.dropped(), 7);
        assert!(c.text().ends_with("mnopq"));
    }
}
