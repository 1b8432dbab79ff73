//! Descriptors and processes for plugin workers: starting a worker with nothing but its
//! standard descriptors and the protocol socket (as a session leader that dies with the
//! host, in its cgroup), taking the socket over in the child, learning of a process's end
//! from the process itself (a pidfd), waiting on a descriptor with `poll`, and ending a
//! process at once.
//!
//! Workers are started from one long-lived thread: the kernel sends the parent-death
//! signal when the *thread* that started a process ends, and the threads of a blocking
//! pool come and go.

use std::io;
use std::os::fd::{AsRawFd as _, FromRawFd as _, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command};
use std::sync::{Mutex, OnceLock, PoisonError, mpsc};

/// Makes `command`'s child get `socket` as descriptor `target` and no other descriptor of
/// this process (every descriptor above `target` is marked close-on-exec, whoever opened
/// it), with its stdout sent to its stderr; the child leads a new session (so its process
/// group is its own), gets `SIGKILL` when the host ends, and writes itself into the
/// `cgroup.procs` files `cgroup_procs` before it runs anything.
pub(crate) fn pass_socket(
    command: &mut Command,
    socket: &UnixStream,
    target: RawFd,
    cgroup_procs: Vec<RawFd>,
) {
    let fd = socket.as_raw_fd();
    // SAFETY: only async-signal-safe calls (setsid, prctl, write, dup2, fcntl,
    // close_range) between fork and exec.
    unsafe {
        command.pre_exec(move || {
            crate::sys::containment::join_in_child(&cgroup_procs)?;
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            let zero: libc::c_ulong = 0;
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                zero,
                zero,
                zero,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            if fd == target {
                // dup2 onto itself would keep close-on-exec set.
                if libc::fcntl(target, libc::F_SETFD, 0) < 0 {
                    return Err(io::Error::last_os_error());
                }
            } else if libc::dup2(fd, target) < 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::dup2(2, 1) < 0 {
                return Err(io::Error::last_os_error());
            }
            // Descriptors the host inherited without close-on-exec stop here (the worker
            // closes the rest itself when the kernel lacks close_range).
            libc::syscall(
                libc::SYS_close_range,
                target + 1,
                libc::c_uint::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            );
            Ok(())
        });
    }
}

/// Starts `command` from the one long-lived thread that starts workers (see the module
/// doc), and returns the child.
pub(crate) fn spawn_from_keeper(command: Command) -> io::Result<Child> {
    type Job = (Command, mpsc::Sender<io::Result<Child>>);
    static KEEPER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    let sender = KEEPER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        let started = std::thread::Builder::new()
            .name("toolhost-worker-starter".to_owned())
            .spawn(move || {
                for (mut command, reply) in rx {
                    let _ = reply.send(command.spawn());
                }
            });
        if let Err(e) = started {
            tracing::error!("could not start the thread that starts workers: {e}");
        }
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::channel();
    sender
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .send((command, reply_tx))
        .map_err(|_| io::Error::other("the thread that starts workers is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| io::Error::other("the thread that starts workers is gone"))?
}

/// Marks every descriptor from `first` up close-on-exec, and closes them (a worker keeps
/// only what it was given).
pub(crate) fn close_from(first: RawFd) {
    // SAFETY: close_range takes integers; closing descriptors nothing in this process
    // uses yet (the worker calls it first thing).
    let r = unsafe { libc::syscall(libc::SYS_close_range, first, libc::c_uint::MAX, 0) };
    if r != 0 {
        // Older kernels: one by one, up to the open-file limit.
        let max = rlimit_nofile().min(65_536);
        for fd in first..RawFd::try_from(max).unwrap_or(RawFd::MAX) {
            // SAFETY: closing a descriptor number; EBADF for unused ones is harmless.
            unsafe { libc::close(fd) };
        }
    }
}

fn rlimit_nofile() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct on this stack.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 1024;
    }
    limit.rlim_cur
}

/// Sets close-on-exec on `fd`.
pub(crate) fn set_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl with F_SETFD takes integers.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Blocks until process `pid` (a child of this process) has ended, without reaping it:
/// through a pidfd where the kernel has them (5.3+), else `waitid(WNOWAIT)`. Returns
/// at once if it is already gone or was reaped.
pub(crate) fn wait_for_exit(pid: u32) {
    let Ok(raw) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: pidfd_open takes integers and returns a new descriptor or -1.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, raw, 0) };
    if let Ok(pidfd) = RawFd::try_from(pidfd)
        && pidfd >= 0
    {
        // SAFETY: the descriptor was just opened here and is owned by nothing else.
        let pidfd = unsafe { std::os::fd::OwnedFd::from_raw_fd(pidfd) };
        // Readable once the process has ended.
        let _ = wait_fd(pidfd.as_raw_fd(), libc::POLLIN, -1);
        return;
    }
    // SAFETY: waitid writes into the zeroed struct on this stack; WNOWAIT leaves the
    // child to be reaped by its owner.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        while libc::waitid(
            libc::P_PID,
            raw as libc::id_t,
            &raw mut info,
            libc::WEXITED | libc::WNOWAIT,
        ) != 0
        {
            if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                return;
            }
        }
    }
}

/// The socket this process inherited as descriptor `fd`, if `fd` is one.
pub(crate) fn inherited_socket(fd: RawFd) -> io::Result<UnixStream> {
    // SAFETY: fstat only writes into the struct it is given.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &raw mut stat) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if stat.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(io::Error::other(format!("descriptor {fd} is not a socket")));
    }
    // SAFETY: `fd` is open, a socket, and owned by nothing else in this process (the
    // parent passed it for this purpose).
    Ok(unsafe { UnixStream::from_raw_fd(fd) })
}

/// Waits until `fd` is ready for `events` (`libc::POLLIN`, `POLLOUT`); `false` on timeout
/// (`timeout_ms` < 0 waits for ever).
pub(crate) fn wait_fd(fd: RawFd, events: libc::c_short, timeout_ms: i32) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd; the caller keeps the descriptor open meanwhile.
        let n = unsafe { libc::poll(&raw mut pfd, 1, timeout_ms) };
        if n >= 0 {
            return Ok(n > 0);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Ends this process at once: no destructors, no `atexit` handlers (a plugin's could hang
/// or crash on the way out).
pub(crate) fn exit_now(code: i32) -> ! {
    // SAFETY: `_exit` takes no pointers and never returns.
    unsafe { libc::_exit(code) }
}

/// Makes this process "not dumpable": its `/proc/PID` files (`environ`, `mem`, `maps`,
/// ...) become root's, so a program of the same user, a command a workspace tool ran
/// included, cannot read the host's environment (API keys) or memory, and cannot attach
/// a debugger to it. Programs this process starts are dumpable again at their `exec`.
pub fn forbid_same_user_inspection() -> io::Result<()> {
    // SAFETY: prctl with PR_SET_DUMPABLE takes integers only.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Makes `command`'s child (an MCP server toolhost starts) join the cgroups whose
/// `cgroup.procs` are open as `cgroup_procs`, lead a session and process group of its
/// own, get `SIGKILL` when the thread that starts it ends
/// (`PR_SET_PDEATHSIG`: start it from a long-lived thread, as a runtime's worker is),
/// with `namespace` make a PID namespace the program runs in
/// ([`pid_namespace::enter_from_pre_exec`](crate::sys::pid_namespace::enter_from_pre_exec):
/// every process it starts ends with it, even when the host is killed), and enter
/// `sandbox`, all between fork and exec.
pub(crate) fn confine_child(
    command: &mut tokio::process::Command,
    sandbox: std::sync::Arc<crate::sys::sandbox::PreparedSandbox>,
    cgroup_procs: Vec<RawFd>,
    namespace: Option<crate::sys::pid_namespace::ChildMaps>,
) {
    // SAFETY: write, setsid, prctl, the namespace's and the sandbox's entry are system
    // calls only (no allocation, no lock): async-signal-safe, as a pre_exec hook must be.
    unsafe {
        command.pre_exec(move || {
            crate::sys::containment::join_in_child(&cgroup_procs)?;
            libc::setsid();
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            if let Some(maps) = &namespace {
                crate::sys::pid_namespace::enter_from_pre_exec(maps)?;
            }
            sandbox.enter()
        });
    }
}

/// Lowers the calling thread's scheduling priority (its nice value) by `by`: the thread
/// still gets its share of a busy machine, but a thread that wakes to serve a request
/// preempts it. Best effort: an error leaves the thread as it was.
pub(crate) fn lower_thread_priority(by: i32) -> io::Result<()> {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let who = libc::id_t::try_from(tid).map_err(|_| io::Error::other("negative thread id"))?;
    // getpriority may return -1 as a value: errno says whether it failed.
    // SAFETY: plain system calls on this thread's own id.
    let now = unsafe {
        *libc::__errno_location() = 0;
        libc::getpriority(libc::PRIO_PROCESS, who)
    };
    if now == -1 && io::Error::last_os_error().raw_os_error() != Some(0) {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above; Linux applies PRIO_PROCESS with a thread id to that thread alone.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, who, (now + by).min(19)) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
