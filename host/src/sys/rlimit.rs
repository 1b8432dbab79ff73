//! Process resource limits: a serving host raises its soft open-file limit to the hard
//! limit at start-up, as servers do (desktops often start programs with a soft limit of
//! 1,024), and sizes the HTTP connection limit to leave a reserve of descriptors for the
//! control socket, plugin loads, the watcher and the session database.

use std::io;

/// Descriptors kept back from HTTP connections for everything else the host opens.
pub const RESERVED_DESCRIPTORS: u64 = 256;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns the soft limit now in force.
pub fn raise_open_file_limit() -> io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given, which lives on this stack.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit only reads the struct it is given.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(io::Error::last_os_error());
        }
        limit.rlim_cur = limit.rlim_max;
    }
    Ok(limit.rlim_cur)
}

/// The HTTP connection limit that leaves [`RESERVED_DESCRIPTORS`] free under a soft
/// open-file limit of `nofile` (at least 16 connections).
pub fn connections_within(configured: usize, nofile: u64) -> usize {
    let room = nofile.saturating_sub(RESERVED_DESCRIPTORS).max(16);
    configured.min(usize::try_from(room).unwrap_or(usize::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_leave_a_reserve() {
        assert_eq!(connections_within(512, 20_000), 512);
        assert_eq!(connections_within(2048, 1024), 768);
        assert_eq!(connections_within(512, 100), 16);
        assert!(raise_open_file_limit().expect("getrlimit") >= 16);
    }
}

/// STUB.
#[derive(Debug, Clone, Copy)]
pub enum Resource {
    /// AS.
    AddressSpace,
    /// DATA.
    Data,
    /// NOFILE.
    OpenFiles,
    /// CORE.
    Core,
}

/// STUB.
pub fn set_limit(_resource: Resource, _value: u64) -> io::Result<()> {
    Ok(())
}

/// STUB.
pub fn no_new_privs() -> io::Result<()> {
    Ok(())
}
