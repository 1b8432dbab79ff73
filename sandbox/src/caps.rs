//! Dropping every Linux capability: a plugin worker of a host that runs as root (or in a
//! user namespace of its own) gives up the bounding, ambient, inheritable, permitted and
//! effective sets before it loads the plugin, and a sandboxed command does between `fork`
//! and `exec`; both lock the secure bits so that running a program as uid 0 grants none
//! back. A process without capabilities does nothing here.

use std::io;

/// `_LINUX_CAPABILITY_VERSION_3` from `<linux/capability.h>`.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// The secure bits that stop uid 0 from regaining capabilities, each with its lock:
/// `SECBIT_NOROOT`, `SECBIT_NO_SETUID_FIXUP` and `SECBIT_NO_CAP_AMBIENT_RAISE` with
/// their `_LOCKED` bits, and `SECBIT_KEEP_CAPS_LOCKED` (keep-caps itself off).
const SECURE_BITS: libc::c_ulong = 0b1110_1111;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// The calling thread's permitted capability sets (both 32-bit halves).
fn permitted() -> io::Result<[CapData; 2]> {
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capget writes two CapData structs (version 3) into `data` and reads the
    // header; both live on this stack.
    let r = unsafe { libc::syscall(libc::SYS_capget, &raw mut header, data.as_mut_ptr()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(data)
}

/// Whether the calling thread holds any capability (permitted set).
pub fn has_any() -> bool {
    permitted().is_ok_and(|d| d.iter().any(|h| h.permitted != 0 || h.effective != 0))
}

/// The highest capability number this kernel knows.
pub fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63)
}

/// Drops every capability of the calling thread (and of what it starts afterwards), for
/// good. Call it before other threads exist.
pub fn drop_all() -> io::Result<()> {
    drop_all_up_to(last_cap(), has_any())
        .map_err(|(step, e)| io::Error::new(e.kind(), format!("could not {step}: {e}")))?;
    if has_any() {
        return Err(io::Error::other(
            "capabilities remained after they were dropped",
        ));
    }
    Ok(())
}

/// [`drop_all`] for a child between `fork` and `exec`: `last_cap` and `held` (whether
/// the parent holds capabilities) are found by the parent, because reading them
/// allocates. Only system calls here; the error is the failing call's `errno`.
pub fn drop_all_in_child(last_cap: u32, held: bool) -> io::Result<()> {
    drop_all_up_to(last_cap, held).map_err(|(_, e)| e)
}

/// The system calls of [`drop_all`]; an error names the step (a static string: nothing
/// here allocates).
fn drop_all_up_to(last_cap: u32, held: bool) -> Result<(), (&'static str, io::Error)> {
    let zero: libc::c_ulong = 0;
    if held {
        // The bounding set and the secure bits first: both need CAP_SETPCAP.
        for cap in 0..=last_cap {
            // SAFETY: PR_CAPBSET_DROP reads only its integer arguments.
            let r = unsafe {
                libc::prctl(
                    libc::PR_CAPBSET_DROP,
                    libc::c_ulong::from(cap),
                    zero,
                    zero,
                    zero,
                )
            };
            if r != 0 {
                let e = io::Error::last_os_error();
                // A capability this kernel does not know.
                if e.raw_os_error() != Some(libc::EINVAL) {
                    return Err(("drop a capability from the bounding set", e));
                }
            }
        }
        // SAFETY: PR_SET_SECUREBITS reads only its integer arguments.
        if unsafe { libc::prctl(libc::PR_SET_SECUREBITS, SECURE_BITS, zero, zero, zero) } != 0 {
            return Err(("lock the secure bits", io::Error::last_os_error()));
        }
    }
    // SAFETY: PR_CAP_AMBIENT_CLEAR_ALL reads only its integer arguments.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            zero,
            zero,
            zero,
        )
    };
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capset reads the header and two CapData structs (version 3), all on this
    // stack.
    let r = unsafe { libc::syscall(libc::SYS_capset, &raw mut header, data.as_ptr()) };
    if r != 0 {
        return Err(("clear the capability sets", io::Error::last_os_error()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_drops_every_capability() {
        let (before, after, bounding) = std::thread::spawn(|| {
            let before = has_any();
            drop_all().expect("drop");
            let zero: libc::c_ulong = 0;
            // SAFETY: PR_CAPBSET_READ reads only its integer arguments.
            let bounding = unsafe {
                libc::prctl(libc::PR_CAPBSET_READ, 21 as libc::c_ulong, zero, zero, zero)
            };
            (before, has_any(), bounding)
        })
        .join()
        .expect("thread");
        assert!(!after, "capabilities left");
        if before {
            // CAP_SYS_ADMIN (21) is gone from the bounding set too.
            assert_eq!(bounding, 0);
        } else {
            eprintln!("note: the test runs without capabilities; dropping was a no-op");
        }
    }
}
