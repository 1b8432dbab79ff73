//! A plugin worker's own PID namespace, made by the worker itself where no cgroup can be
//! had: the worker process (the host's child, "A") enters a new user and PID namespace and
//! forks the namespace's init ("B", PID 1), which forks the real worker ("C", PID 2) and
//! reaps every orphan. When C ends, B ends with it and the kernel kills every process left
//! in the namespace; when the host kills A, B gets `SIGKILL` (its parent-death signal) and
//! the same happens. A and B wait, and A ends as C did (same exit code, same signal), so
//! the host's crash messages are unchanged. Only C returns from [`enter`].
//!
//! Call it before any thread exists: it forks.
//!
//! A stdio MCP server gets the same between `fork` and `exec`
//! ([`enter_from_pre_exec`], async-signal-safe): A is the child the host spawned, C
//! returns from the hook and runs the server's program.

use std::io;
use std::os::fd::RawFd;

/// Enters the namespace; returns in the real worker (C) only. `socket` (the protocol
/// socket) is closed in A and B, so only C holds it.
pub(crate) fn enter(socket: RawFd) -> io::Result<()> {
    make(&ChildMaps::of_this_process(), Closing::Socket(socket)).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("could not make a user and PID namespace: {e}"),
        )
    })
}

/// What A and B close, so that only C holds what it needs.
#[derive(Clone, Copy)]
enum Closing {
    /// A worker's protocol socket.
    Socket(RawFd),
    /// Every descriptor (but their status pipe): a `Command`'s child, whose parent
    /// reads an exec-error pipe and the program's standard streams.
    AllBut,
}

/// A, B and C as the module says; returns in C only. System calls only (no allocation).
fn make(maps: &ChildMaps, closing: Closing) -> io::Result<()> {
    // SAFETY: unshare takes an integer.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWPID) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // The same uid and gid inside, so files keep their owners.
    write_file(c"/proc/self/setgroups", b"deny")?;
    write_file(c"/proc/self/uid_map", &maps.uid_map)?;
    write_file(c"/proc/self/gid_map", &maps.gid_map)?;
    let mut pipe = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let [read_end, write_end] = pipe;
    // SAFETY: no other thread exists (the callers' contract); B continues below.
    let b = unsafe { libc::fork() };
    if b < 0 {
        return Err(io::Error::last_os_error());
    }
    if b > 0 {
        // A: wait for B, then end as C did.
        match closing {
            // SAFETY: closing descriptors this process owns.
            Closing::Socket(socket) => unsafe {
                libc::close(socket);
                libc::close(write_end);
            },
            Closing::AllBut => close_all_but(read_end),
        }
        let status = read_status(read_end);
        let mut ignored = 0;
        // SAFETY: reaps B; writes its status here.
        unsafe { libc::waitpid(b, &raw mut ignored, 0) };
        mirror(status.unwrap_or(ignored));
    }
    // B: PID 1. Dies with A.
    let (sigkill, zero): (libc::c_ulong, libc::c_ulong) = (libc::SIGKILL as libc::c_ulong, 0);
    // SAFETY: PR_SET_PDEATHSIG reads only its integer arguments; the read end is A's.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, sigkill, zero, zero, zero);
        libc::close(read_end);
    }
    // SAFETY: B is single-threaded too.
    let c = unsafe { libc::fork() };
    if c < 0 {
        // SAFETY: _exit never returns.
        unsafe { libc::_exit(125) };
    }
    if c == 0 {
        // C. Dies with B (which the kernel guarantees: B is PID 1).
        // SAFETY: closing the write end, which only B uses.
        unsafe { libc::close(write_end) };
        return Ok(());
    }
    match closing {
        // SAFETY: B does not use the protocol socket.
        Closing::Socket(socket) => unsafe {
            libc::close(socket);
        },
        Closing::AllBut => close_all_but(write_end),
    }
    init(c, write_end)
}

/// B's life as the namespace's init: reaps every child (orphans are reparented to it)
/// until C ends, sends C's wait status to A through `write_end`, and exits, which kills
/// every process left in the namespace. System calls only.
fn init(c: libc::pid_t, write_end: RawFd) -> ! {
    loop {
        let mut status = 0;
        // SAFETY: reaps any child; writes the status here.
        let pid = unsafe { libc::waitpid(-1, &raw mut status, 0) };
        if pid == c {
            let bytes = status.to_ne_bytes();
            // SAFETY: writes four bytes from the stack to the pipe; _exit never returns.
            unsafe {
                libc::write(write_end, bytes.as_ptr().cast(), bytes.len());
                libc::_exit(0);
            }
        }
        if pid < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD) {
            // SAFETY: _exit never returns.
            unsafe { libc::_exit(125) };
        }
    }
}

/// C's wait status as B sent it, if it did.
fn read_status(fd: RawFd) -> Option<libc::c_int> {
    let mut bytes = [0u8; 4];
    let mut got = 0;
    while got < bytes.len() {
        // SAFETY: reads into the rest of a stack buffer.
        let n = unsafe { libc::read(fd, bytes[got..].as_mut_ptr().cast(), bytes.len() - got) };
        if n <= 0 {
            if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return None;
        }
        got += usize::try_from(n).unwrap_or(0);
    }
    Some(libc::c_int::from_ne_bytes(bytes))
}

/// Ends this process as the wait status `status` says its child ended.
fn mirror(status: libc::c_int) -> ! {
    if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        // SAFETY: restores the default action and raises the signal on this process;
        // no core is written (RLIMIT_CORE is 0).
        unsafe {
            let zero = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &zero);
            libc::signal(signal, libc::SIG_DFL);
            libc::raise(signal);
        }
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        125
    };
    // SAFETY: _exit never returns.
    unsafe { libc::_exit(code) }
}

/// What a child writes into its new namespace's `uid_map` and `gid_map` (the same uid and
/// gid inside, so files keep their owners), formatted before `fork`: the child may not
/// allocate.
#[derive(Debug)]
pub(crate) struct ChildMaps {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

impl ChildMaps {
    /// The maps of this process's effective uid and gid (a child keeps them).
    pub(crate) fn of_this_process() -> ChildMaps {
        // SAFETY: geteuid/getegid have no preconditions.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        ChildMaps {
            uid_map: format!("{uid} {uid} 1").into_bytes(),
            gid_map: format!("{gid} {gid} 1").into_bytes(),
        }
    }
}

/// Writes `bytes` to the file `path` (system calls only).
fn write_file(path: &std::ffi::CStr, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: open reads the NUL-terminated path; write reads `bytes`; close takes the
    // descriptor just opened.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let error = io::Error::last_os_error();
        libc::close(fd);
        if usize::try_from(n).ok() != Some(bytes.len()) {
            return Err(error);
        }
    }
    Ok(())
}

/// Closes every descriptor of this process but `keep`.
fn close_all_but(keep: RawFd) {
    let Ok(keep) = libc::c_uint::try_from(keep) else {
        return;
    };
    // SAFETY: close_range(2) takes integers and touches no memory.
    unsafe {
        if keep > 0 {
            libc::syscall(
                libc::SYS_close_range,
                0 as libc::c_uint,
                keep - 1,
                0 as libc::c_uint,
            );
        }
        libc::syscall(
            libc::SYS_close_range,
            keep + 1,
            libc::c_uint::MAX,
            0 as libc::c_uint,
        );
    }
}

/// Makes the calling child (A, between `fork` and `exec` of a `Command`) the outside of
/// a new user and PID namespace, as [`enter`] does for a worker, and returns in C only,
/// which goes on to `exec`. A and B close every descriptor but their status pipe first:
/// the spawning parent's exec-error pipe then reports C's `exec`, and the program's
/// standard streams end when C ends. Async-signal-safe: system calls only. The child
/// must be able to write its own `uid_map`: a child of a root host can; a child of a
/// host that is not root only by making itself dumpable, which would open its copy of
/// the host's memory to the user's other processes, so such a host does not call this.
pub(crate) fn enter_from_pre_exec(maps: &ChildMaps) -> io::Result<()> {
    make(maps, Closing::AllBut)
}
