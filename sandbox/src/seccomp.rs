//! The seccomp filter every process toolhost starts is held to: a plugin worker installs
//! it on itself before it loads a plugin ([`apply`]), and a command (`run_command`, the
//! Rust tools' cargo and rustc) enters it between fork and exec ([`Filters::install`],
//! through [`crate::PreparedSandbox::enter`]). It refuses (with `EPERM`) the sockets the
//! process may not make and the system calls a tool has no business making, for it and
//! everything it starts. Built with the `seccompiler` crate; the filter cannot be removed
//! once installed.
//!
//! What it refuses:
//! - `socket()` of the Unix family (path-named and abstract sockets: the host's control
//!   socket, other programs' sockets) unless the operator allowed them for the plugin;
//!   raw and packet sockets always; with no network, every family but Unix (so UDP too);
//!   netlink other than `NETLINK_ROUTE` (which the C library's resolver reads).
//! - memory no per-process limit counts: `memfd_create` and `memfd_secret` (pages that are
//!   never mapped escape `RLIMIT_AS`) and System V shared memory (`shmget`, `shmat`: a
//!   segment outlives every mapping of it).
//! - io_uring (its operations bypass this filter), tracing and reading other processes
//!   (`ptrace`, `process_vm_*`, `pidfd_getfd`, `kcmp`), namespaces and mounts (`unshare`,
//!   `setns`, `mount` and the new mount API, `pivot_root`, `chroot`), the kernel's keyring,
//!   BPF, `perf_event_open`, `userfaultfd`, modules, `kexec`, `reboot`, swap, clocks,
//!   `acct`, quotas, `open_by_handle_at`, `iopl`/`ioperm`, `syslog`, `personality`.
//! - `clone3` answers `ENOSYS` (its flags live in memory a filter cannot read), so the C
//!   library falls back to `clone`, whose namespace flags are refused.
//!
//! Weak spot: architectures other than x86_64 and aarch64 get no filter (reported).

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// What the filter lets a worker do with sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketRules {
    /// IPv4 and IPv6 sockets (TCP and UDP; never raw).
    pub network: bool,
    /// Unix-domain sockets (connecting to a path or an abstract name).
    pub unix: bool,
}

/// Why the filter was not installed.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    /// The architecture has no filter here.
    #[error(
        "no seccomp filter is defined for the {0} architecture; toolhost filters system \
         calls on x86_64 and aarch64"
    )]
    Unsupported(&'static str),
    /// The kernel refused the filter.
    #[error(
        "could not install the seccomp filter: {0}; the kernel needs seccomp filters \
         (CONFIG_SECCOMP_FILTER), and the process no new privileges first"
    )]
    Install(#[source] std::io::Error),
    /// Building a rule failed.
    #[error("could not build the seccomp filter: {0}")]
    Build(#[from] seccompiler::BackendError),
}

/// The system calls refused outright (`EPERM`).
fn refused_calls() -> Vec<i64> {
    let mut calls = vec![
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_pidfd_getfd,
        libc::SYS_kcmp,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_reboot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_settimeofday,
        libc::SYS_clock_settime,
        libc::SYS_clock_adjtime,
        libc::SYS_adjtimex,
        libc::SYS_acct,
        libc::SYS_quotactl,
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
        libc::SYS_syslog,
        libc::SYS_personality,
        libc::SYS_fanotify_init,
        libc::SYS_vhangup,
        libc::SYS_memfd_create,
        libc::SYS_memfd_secret,
        libc::SYS_shmget,
        libc::SYS_shmat,
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([libc::SYS_iopl, libc::SYS_ioperm]);
    calls
}

/// The namespace flags `clone` may not carry.
const NAMESPACE_FLAGS: [u64; 7] = [
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWCGROUP as u64,
];

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, SeccompError> {
    Ok(SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Dword,
        op,
        value,
    )?)
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, SeccompError> {
    Ok(SeccompRule::new(conditions)?)
}

/// The rules under which `socket(domain, type, protocol)` is refused (any one matching
/// refuses the call; an empty list refuses every call).
fn socket_rules(sockets: SocketRules) -> Result<Vec<SeccompRule>, SeccompError> {
    use SeccompCmpOp::{Eq, MaskedEq, Ne};
    let domain = |op, v: i32| cond(0, op, v as u64);
    // The socket type without SOCK_NONBLOCK / SOCK_CLOEXEC.
    let raw_type = || cond(1, MaskedEq(0xf), libc::SOCK_RAW as u64);
    // A family other than the allowed ones: Unix (if allowed), IPv4, IPv6 and netlink
    // (with the network).
    let mut others = Vec::new();
    if sockets.unix {
        others.push(domain(Ne, libc::AF_UNIX)?);
    }
    if sockets.network {
        others.push(domain(Ne, libc::AF_INET)?);
        others.push(domain(Ne, libc::AF_INET6)?);
        others.push(domain(Ne, libc::AF_NETLINK)?);
    }
    if others.is_empty() {
        return Ok(Vec::new());
    }
    let mut rules = vec![rule(others)?];
    if sockets.network {
        rules.push(rule(vec![domain(Eq, libc::AF_INET)?, raw_type()?])?);
        rules.push(rule(vec![domain(Eq, libc::AF_INET6)?, raw_type()?])?);
        rules.push(rule(vec![
            domain(Eq, libc::AF_NETLINK)?,
            cond(2, Ne, libc::NETLINK_ROUTE as u64)?,
        ])?);
    }
    Ok(rules)
}

/// This machine's architecture, as the filter compiler names it.
fn arch() -> Result<TargetArch, SeccompError> {
    match std::env::consts::ARCH {
        "x86_64" => Ok(TargetArch::x86_64),
        "aarch64" => Ok(TargetArch::aarch64),
        other => Err(SeccompError::Unsupported(other)),
    }
}

/// The filter that refuses with `EPERM`.
fn refusing_program(sockets: SocketRules) -> Result<BpfProgram, SeccompError> {
    let mut refused: BTreeMap<i64, Vec<SeccompRule>> = refused_calls()
        .into_iter()
        .map(|call| (call, Vec::new()))
        .collect();
    refused.insert(libc::SYS_socket, socket_rules(sockets)?);
    // clone with any namespace flag (one rule per flag: `flags & flag == flag`).
    let clone_rules = NAMESPACE_FLAGS
        .iter()
        .map(|&flag| {
            rule(vec![SeccompCondition::new(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(flag),
                flag,
            )?])
        })
        .collect::<Result<Vec<_>, _>>()?;
    refused.insert(libc::SYS_clone, clone_rules);
    let filter = SeccompFilter::new(
        refused,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch()?,
    )?;
    Ok(filter.try_into()?)
}

/// The filter that makes `clone3` fail with `ENOSYS`, so the C library falls back to
/// `clone`, whose flags the other filter can read.
fn clone3_program() -> Result<BpfProgram, SeccompError> {
    let rules: BTreeMap<i64, Vec<SeccompRule>> =
        [(libc::SYS_clone3, Vec::new())].into_iter().collect();
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch()?,
    )?;
    Ok(filter.try_into()?)
}

/// How many filters a command's sandbox installs ([`Filters::install`]).
pub const COMMAND_FILTERS: u32 = 2;

/// How many filters a worker installs ([`apply`]): a command's two and the worker's mark,
/// a filter that allows everything. Filters can be added, never removed, so every process
/// a worker started (its commands too) has at least this many more than the host, and a
/// command the host's own process started has exactly [`COMMAND_FILTERS`] more: the host
/// tells the two apart by the count ([`filters_of`]).
pub const WORKER_FILTERS: u32 = COMMAND_FILTERS + 1;

/// Installs a worker's filters on the calling thread (and what it starts afterwards):
/// those of [`Filters`] and the worker's mark (see [`WORKER_FILTERS`]). Needs
/// `PR_SET_NO_NEW_PRIVS` (set by the caller) or `CAP_SYS_ADMIN`.
pub fn apply(sockets: SocketRules) -> Result<(), SeccompError> {
    Filters::compile(sockets)?
        .install()
        .and_then(|()| install(&[ALLOW_ALL]))
        .map_err(SeccompError::Install)
}

/// A one-instruction program that allows every call: `BPF_RET | BPF_K`,
/// `SECCOMP_RET_ALLOW`.
const ALLOW_ALL: libc::sock_filter = libc::sock_filter {
    code: 0x06,
    jt: 0,
    jf: 0,
    k: 0x7fff_0000,
};

/// The number of seccomp filters process `pid` is held to (`Seccomp_filters` of its
/// `/proc/PID/status`), or `None` when it is gone or the kernel does not say.
pub fn filters_of(pid: i32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Seccomp_filters:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Installs one compiled program on the calling thread (`seccomp(2)`, no allocation).
fn install(program: &[libc::sock_filter]) -> std::io::Result<()> {
    let prog = libc::sock_fprog {
        len: u16::try_from(program.len())
            .map_err(|_| std::io::Error::from_raw_os_error(libc::E2BIG))?,
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: seccomp(2) reads `prog` and the `len` instructions it points to, all alive
    // across the call.
    let done = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_SET_MODE_FILTER,
            0 as libc::c_uint,
            &raw const prog,
        )
    };
    if done != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The two filters compiled in a parent, for a child to install between fork and exec
/// ([`Filters::install`]), where nothing may allocate.
#[derive(Debug)]
pub struct Filters {
    /// `clone3` answers `ENOSYS`.
    clone3: BpfProgram,
    /// Everything else refused with `EPERM`.
    refusing: BpfProgram,
}

/// `SECCOMP_SET_MODE_FILTER` from `<linux/seccomp.h>`.
const SECCOMP_SET_MODE_FILTER: libc::c_uint = 1;

impl Filters {
    /// Compiles the filters for `sockets`.
    pub fn compile(sockets: SocketRules) -> Result<Filters, SeccompError> {
        Ok(Filters {
            clone3: clone3_program()?,
            refusing: refusing_program(sockets)?,
        })
    }

    /// Installs both filters on the calling thread. Async-signal-safe (two `seccomp(2)`
    /// calls over memory compiled before the fork): it may run in a `pre_exec` hook. Needs
    /// `PR_SET_NO_NEW_PRIVS` first.
    pub fn install(&self) -> std::io::Result<()> {
        for program in [&self.clone3, &self.refusing] {
            // SAFETY: seccompiler's `sock_filter` is `#[repr(C)]` with the kernel's layout,
            // the same as libc's: the slice is reinterpreted in place, not copied.
            let program = unsafe {
                std::slice::from_raw_parts(
                    program.as_ptr().cast::<libc::sock_filter>(),
                    program.len(),
                )
            };
            install(program)?;
        }
        Ok(())
    }
}
