//! A plugin worker's own PID namespace, made by the worker itself where no cgroup can be
//! had: the worker process (the host's child, "A") enters a new user and PID namespace and
//! forks the namespace's init ("B", PID 1), which forks the real worker ("C", PID 2) and
//! reaps every orphan. When C ends, B ends with it and the kernel kills every process left
//! in the namespace; when the host kills A, B gets `SIGKILL` (its parent-death signal) and
//! the same happens. A and B wait, and A ends as C did (same exit code, same signal), so
//! the host's crash messages are unchanged. Only C returns from [`enter`].
//!
//! Call it before any thread exists: it forks.

use std::io;
use std::os::fd::RawFd;

/// Enters the namespace; returns in the real worker (C) only. `socket` (the protocol
/// socket) is closed in A and B, so only C holds it.
pub(crate) fn enter(socket: RawFd) -> io::Result<()> {
    // SAFETY: geteuid/getegid have no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    // SAFETY: unshare takes an integer.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWPID) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("could not make a user and PID namespace: {e}"),
        ));
    }
    // The same uid and gid inside, so files keep their owners.
    std::fs::write("/proc/self/setgroups", "deny")?;
    std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
    std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    let mut pipe = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let [read_end, write_end] = pipe;
    // SAFETY: no other thread exists (the caller's contract); the child continues below.
    let b = unsafe { libc::fork() };
    if b < 0 {
        return Err(io::Error::last_os_error());
    }
    if b > 0 {
        // A: wait for B, then end as C did.
        // SAFETY: closing descriptors this process owns.
        unsafe {
            libc::close(socket);
            libc::close(write_end);
        }
        let status = read_status(read_end);
        let mut ignored = 0;
        // SAFETY: reaps B; writes its status here.
        unsafe { libc::waitpid(b, &raw mut ignored, 0) };
        mirror(status.unwrap_or(ignored));
    }
    // B: PID 1. Dies with A.
    let (sigkill, zero): (libc::c_ulong, libc::c_ulong) = (libc::SIGKILL as libc::c_ulong, 0);
    // SAFETY: PR_SET_PDEATHSIG reads only its integer arguments.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, sigkill, zero, zero, zero) };
    // SAFETY: closing the read end, which only A uses.
    unsafe { libc::close(read_end) };
    // SAFETY: B is single-threaded too.
    let c = unsafe { libc::fork() };
    if c < 0 {
        // SAFETY: _exit never returns.
        unsafe { libc::_exit(125) };
    }
    if c == 0 {
        // C: the worker. Dies with B (which the kernel guarantees: B is PID 1).
        // SAFETY: closing the write end, which only B uses.
        unsafe { libc::close(write_end) };
        return Ok(());
    }
    // SAFETY: B does not use the protocol socket.
    unsafe { libc::close(socket) };
    loop {
        let mut status = 0;
        // SAFETY: reaps any child (orphans are reparented to B); writes the status here.
        let pid = unsafe { libc::waitpid(-1, &raw mut status, 0) };
        if pid == c {
            let bytes = status.to_ne_bytes();
            // SAFETY: writes four bytes from the stack to the pipe; B then exits, which
            // kills every process left in the namespace.
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
