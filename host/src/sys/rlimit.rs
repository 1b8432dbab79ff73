//! Process resource limits: a serving host raises its soft open-file limit to the hard
//! limit at start-up, as servers do (desktops often start programs with a soft limit of
//! 1,024), and sizes the HTTP connection limit to leave a reserve of descriptors for the
//! control socket, plugin loads, the watcher and the session database. A plugin worker
//! confines itself here too: fixed limits on memory, descriptors and core dumps, and no new
//! privileges.
//!
//! `RLIMIT_AS` is the memory limit of a worker process because it counts every mapping;
//! `RLIMIT_DATA` leaves `MAP_SHARED` memory unbounded.

use std::io;

/// Descriptors kept back from HTTP connections for everything else the host opens.
pub(crate) const RESERVED_DESCRIPTORS: u64 = 256;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns the soft limit now in force.
pub(crate) fn raise_open_file_limit() -> io::Result<u64> {
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
pub(crate) fn connections_within(configured: usize, nofile: u64) -> usize {
    let room = nofile.saturating_sub(RESERVED_DESCRIPTORS).max(16);
    configured.min(usize::try_from(room).unwrap_or(usize::MAX))
}

/// A resource limit a plugin worker sets on itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resource {
    /// The address space, in bytes (`RLIMIT_AS`): every mapping counts, shared ones
    /// included (`RLIMIT_DATA` does not bound `MAP_SHARED` memory).
    AddressSpace,
    /// Tasks of the uid in the current user namespace (`RLIMIT_NPROC`).
    Processes,
    /// Open file descriptors (`RLIMIT_NOFILE`).
    OpenFiles,
    /// The size of a core dump, in bytes (`RLIMIT_CORE`); 0 writes none.
    Core,
}

/// The resource argument of `getrlimit`/`setrlimit` (its C type differs between C
/// libraries).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
type RawResource = libc::__rlimit_resource_t;
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
type RawResource = libc::c_int;

impl Resource {
    fn raw(self) -> RawResource {
        match self {
            Resource::AddressSpace => libc::RLIMIT_AS,
            Resource::Processes => libc::RLIMIT_NPROC,
            Resource::OpenFiles => libc::RLIMIT_NOFILE,
            Resource::Core => libc::RLIMIT_CORE,
        }
    }

    /// The name error messages use.
    fn describe(self) -> &'static str {
        match self {
            Resource::AddressSpace => "the address-space limit (RLIMIT_AS)",
            Resource::Processes => "the process limit (RLIMIT_NPROC)",
            Resource::OpenFiles => "the open-file limit (RLIMIT_NOFILE)",
            Resource::Core => "the core-dump size limit (RLIMIT_CORE)",
        }
    }
}

/// The soft and hard limits of `resource` in force now.
fn get_limit(resource: Resource) -> io::Result<libc::rlimit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given, which lives on this stack.
    if unsafe { libc::getrlimit(resource.raw(), &mut limit) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("could not read {}: {e}", resource.describe()),
        ));
    }
    Ok(limit)
}

/// Sets both the soft and the hard limit of `resource` to `value` for the whole process
/// (`u64::MAX` means unlimited).
///
/// It never raises the hard limit: a `value` above the current hard limit is clamped to it
/// (so the call succeeds without privileges, and a privileged process does not lift a
/// limit someone set on it). Lowering a hard limit cannot be undone without
/// `CAP_SYS_RESOURCE`, which is the point for a worker.
pub(crate) fn set_limit(resource: Resource, value: u64) -> io::Result<()> {
    let current = get_limit(resource)?;
    let value = libc::rlim_t::from(value).min(current.rlim_max);
    let limit = libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    };
    // SAFETY: setrlimit only reads the struct it is given.
    if unsafe { libc::setrlimit(resource.raw(), &limit) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("could not set {} to {value}: {e}", resource.describe()),
        ));
    }
    Ok(())
}

/// Whether `path`, a folder or regular file, is on a memory-backed filesystem (tmpfs or
/// ramfs), where writing holds memory that no per-process limit counts. A device
/// (`/dev/null` is on devtmpfs) holds nothing written to it; a path that cannot be
/// examined counts as not.
pub(crate) fn on_memory_filesystem(path: &std::path::Path) -> bool {
    if !std::fs::metadata(path).is_ok_and(|m| m.is_dir() || m.is_file()) {
        return false;
    }
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: an all-zero statfs is a valid value for statfs(2) to fill in.
    let mut info: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: statfs reads the NUL-terminated path and writes only `info`.
    if unsafe { libc::statfs(c_path.as_ptr(), &raw mut info) } != 0 {
        return false;
    }
    #[allow(clippy::unnecessary_cast)]
    let kind = info.f_type as i64;
    kind == TMPFS_MAGIC || kind == RAMFS_MAGIC
}

/// Whether this process's real uid is 0, which the kernel exempts from `RLIMIT_NPROC`.
pub(crate) fn real_uid_is_root() -> bool {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() == 0 }
}

/// The address space this process maps now (`VmSize` of `/proc/self/status`), bytes.
pub(crate) fn address_space_in_use() -> io::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .ok_or_else(|| io::Error::other("no VmSize in /proc/self/status"))
}

/// Sets `PR_SET_NO_NEW_PRIVS` on the calling thread (inherited by the threads and
/// processes it starts afterwards; it cannot be unset): `execve` no longer grants
/// privileges (setuid and setgid bits, file capabilities are ignored). Landlock requires it
/// of a process without `CAP_SYS_ADMIN`.
pub(crate) fn no_new_privs() -> io::Result<()> {
    let (one, zero): (libc::c_ulong, libc::c_ulong) = (1, 0);
    // SAFETY: prctl with PR_SET_NO_NEW_PRIVS reads only its integer arguments (passed as
    // unsigned longs, as the kernel reads them; the unused ones must be 0).
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, one, zero, zero, zero) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("could not set no_new_privs: {e}"),
        ));
    }
    Ok(())
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

    #[test]
    fn set_limit_lowers_core_to_zero_and_never_raises_the_hard_limit() {
        set_limit(Resource::Core, 0).expect("lower RLIMIT_CORE");
        let core = get_limit(Resource::Core).expect("read RLIMIT_CORE");
        assert_eq!((core.rlim_cur, core.rlim_max), (0, 0));
        // Asking for more than the hard limit is clamped to it, even as root.
        set_limit(Resource::Core, u64::MAX).expect("clamped");
        let core = get_limit(Resource::Core).expect("read RLIMIT_CORE");
        assert_eq!((core.rlim_cur, core.rlim_max), (0, 0));
    }

    #[test]
    fn no_new_privs_sticks_on_the_thread() {
        let flag = std::thread::spawn(|| {
            no_new_privs().expect("prctl");
            let zero: libc::c_ulong = 0;
            // SAFETY: PR_GET_NO_NEW_PRIVS reads only its integer arguments, all 0.
            unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, zero, zero, zero, zero) }
        })
        .join()
        .expect("thread");
        assert_eq!(flag, 1);
    }
}
