//! Descriptors and processes for plugin workers: handing a socket to a child as a fixed
//! descriptor, taking it over in the child, waiting on a descriptor with `poll`, and
//! ending a process at once.

use std::io;
use std::os::fd::{AsRawFd as _, FromRawFd as _, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::process::Command;

/// Makes `command`'s child get `socket` as descriptor `target` (and no other descriptor
/// of this process: the rest are close-on-exec), with its stdout sent to its stderr.
pub(crate) fn pass_socket(command: &mut Command, socket: &UnixStream, target: RawFd) {
    let fd = socket.as_raw_fd();
    // SAFETY: only async-signal-safe calls (dup2, fcntl) between fork and exec.
    unsafe {
        command.pre_exec(move || {
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
            Ok(())
        });
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
