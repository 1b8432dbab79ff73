//! The Landlock sandbox toolhost confines code with: a plugin worker puts itself in it
//! before it loads a plugin ([`apply`]), and the workspace plugin's `run_command` builds it
//! in the parent and has each command's child process enter it between `fork` and `exec`
//! ([`prepare`], [`PreparedSandbox::enter`]). The filesystem is denied except for the
//! paths its rules list (read and execute, or read and write), TCP bind and connect are
//! denied unless the rules allow the network (UDP too on kernels with ABI 10), and
//! signals and abstract Unix sockets are scoped to the sandbox (ABI 6). Built on the
//! `landlock` crate; the raw system calls here ask the kernel for its Landlock ABI and,
//! in a forked child, enter a prepared ruleset (the crate's `restrict_self` builds error
//! values on its failure paths, and a child of a multi-threaded process may only make
//! async-signal-safe calls).
//!
//! Landlock binds the calling thread and the threads and processes it starts afterwards,
//! never threads that already exist, so [`apply`] must run before the worker starts any
//! thread. What an older kernel cannot enforce is reported ([`SandboxOutcome::Partial`],
//! [`SandboxOutcome::NotSupported`]) in best-effort mode and refused in required mode.
//!
//! [`runner`] runs one command inside a prepared sandbox (its own session, a time limit,
//! cancellation, both streams captured) and [`process_tree`] kills everything it started:
//! what the workspace plugin's `run_command` and the Rust plugin's cargo tools share.

pub mod caps;
pub mod mark;
pub mod process_tree;
pub mod protected;
pub mod runner;
pub mod seccomp;

use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd as _, AsRawFd as _, OwnedFd};
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access as _, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible as _, PathBeneath,
    PathFd, PathFdError, Ruleset, RulesetAttr as _, RulesetCreated, RulesetCreatedAttr as _,
    RulesetError, RulesetStatus, Scope,
};

/// The newest Landlock ABI this module asks for (the newest the `landlock` crate knows).
/// Rights a kernel does not know are dropped on that kernel (best effort).
const LATEST: ABI = ABI::V10;

/// The Landlock ABI that enforces every filesystem rule [`SandboxRules`] can express:
/// read, write, execute, create, remove, and truncate (ABI 3, Linux 6.2). ABI 1 and 2
/// confine the rest but cannot stop truncating a file outside the write paths.
pub const FILESYSTEM_ABI: u32 = 3;

/// The Landlock ABI that can deny TCP bind and connect (ABI 4, Linux 6.7).
pub const NETWORK_ABI: u32 = 4;

/// The Landlock ABI that can deny connecting to Unix sockets by path (ABI 9).
pub const UNIX_SOCKET_ABI: u32 = 9;

/// The Landlock ABI that can deny UDP bind and send (ABI 10).
pub const UDP_ABI: u32 = 10;

/// The Landlock ABI that scopes signals and abstract Unix sockets to the sandbox (ABI 6,
/// Linux 6.12): a sandboxed process can signal, and connect to abstract sockets of, only
/// processes in its own sandbox.
pub const SCOPE_ABI: u32 = 6;

/// `LANDLOCK_CREATE_RULESET_VERSION` from `<linux/landlock.h>` (libc does not define it).
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1 << 0;

/// How hard a worker insists on the sandbox (`[isolation] sandbox` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// No sandbox: the worker runs with the user's full access.
    Off,
    /// Enforce what the running kernel supports and report the rest.
    #[default]
    BestEffort,
    /// Refuse to run a plugin unless every rule is enforced.
    Required,
}

/// What a sandboxed worker may touch. Everything else on the filesystem is denied for
/// every access right the running kernel can control.
///
/// A path names a directory (the rule covers everything beneath it) or a single file;
/// symbolic links are followed when the sandbox is applied (so `/proc/self` means the
/// worker's own `/proc/<pid>`). Paths that do not exist then are skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SandboxRules {
    /// May be read and executed (mapped as code): the plugin file, system libraries.
    pub read: Vec<PathBuf>,
    /// May be read, written, created in, removed from, renamed within and truncated; not
    /// executed unless also listed in `read`.
    pub write: Vec<PathBuf>,
    /// `false` denies TCP bind and connect to every port (and UDP too on kernels with
    /// Landlock ABI 10); `true` leaves the network alone.
    pub network: bool,
    /// Unix-domain sockets may be made (a command's or a plugin's own need, the
    /// profile's choice); `false` has the seccomp filter refuse `socket(AF_UNIX)`, so the
    /// host's control socket and every other local service stay out of reach. Only
    /// [`prepare`] reads it (a worker installs its filter itself).
    #[serde(default)]
    pub unix_sockets: bool,
    /// Paths no rule may reach, whatever `read` and `write` say: the host's state (kept
    /// outputs, approvals, tokens, the audit log, sessions). A rule above one is carved
    /// around it ([`protected::carve`]); a rule beneath one is dropped unless it is also
    /// in `private`. [`prepare`] and [`apply`] add what the host put in the environment
    /// ([`protected::from_env`]).
    #[serde(default)]
    pub hidden: Vec<PathBuf>,
    /// Write paths beneath a hidden path that are still granted: a worker's own profile
    /// state folder, which the host puts inside its state folder.
    #[serde(default)]
    pub private: Vec<PathBuf>,
}

/// What [`apply`] enforced, for the log and the host's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxOutcome {
    /// The mode was [`SandboxMode::Off`]: nothing was restricted.
    Off,
    /// Every rule is enforced.
    Full {
        /// The kernel's Landlock ABI.
        abi: u32,
    },
    /// The kernel enforces some of the rules (best-effort mode only).
    Partial {
        /// What is not enforced, and which ABI would enforce it.
        detail: String,
    },
    /// The kernel enforces none of the rules (best-effort mode only).
    NotSupported {
        /// Why not.
        detail: String,
    },
}

impl fmt::Display for SandboxOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SandboxOutcome::Off => f.write_str("Landlock sandbox off"),
            SandboxOutcome::Full { abi } => {
                write!(f, "Landlock sandbox fully enforced (ABI {abi})")
            }
            SandboxOutcome::Partial { detail } => {
                write!(f, "Landlock sandbox partially enforced: {detail}")
            }
            SandboxOutcome::NotSupported { detail } => {
                write!(f, "Landlock sandbox not enforced: {detail}")
            }
        }
    }
}

/// Why [`apply`] did not sandbox the thread.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// Required mode, and the kernel cannot enforce every rule. Nothing was restricted.
    #[error(
        "the Landlock sandbox is required, but the kernel does not support it: {detail}; \
         upgrade the kernel, or set `[isolation] sandbox = \"best-effort\"` (or \"off\") to \
         run plugins without it"
    )]
    NotEnforced {
        /// What the kernel lacks.
        detail: String,
    },
    /// A path of the rules exists but could not be opened (or examined) to allow it.
    /// Nothing was restricted.
    #[error(
        "could not open sandbox path {} to allow access to it: {source}; fix its \
         permissions or remove it from the isolation paths",
        path.display()
    )]
    Path {
        /// The path from the rules.
        path: PathBuf,
        /// Why it could not be opened.
        source: io::Error,
    },
    /// The kernel refused the ruleset or the restriction.
    #[error(
        "could not apply the Landlock sandbox: {0}; set `[isolation] sandbox = \"off\"` to \
         run plugins without it"
    )]
    Landlock(#[from] RulesetError),
}

/// The Landlock ABI version the running kernel supports, or `None` if it has no Landlock
/// (not built in, or not enabled at boot).
pub fn kernel_abi() -> Option<u32> {
    probe().ok()
}

/// Asks the kernel for its Landlock ABI version; the error says why there is none.
fn probe() -> io::Result<u32> {
    // SAFETY: with a null attribute, size 0 and only the VERSION flag, the kernel reads no
    // memory: it returns the ABI version or an error (ENOSYS, EOPNOTSUPP).
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if version < 0 {
        return Err(io::Error::last_os_error());
    }
    u32::try_from(version).map_err(|_| io::Error::other("Landlock ABI version out of range"))
}

/// Why the kernel has no Landlock, from the error of [`probe`].
fn unsupported_detail(error: &io::Error) -> String {
    if error.raw_os_error() == Some(libc::EOPNOTSUPP) {
        "Landlock is built into this kernel but not enabled (add `landlock` to the `lsm=` \
         boot parameter)"
            .to_owned()
    } else {
        format!(
            "this kernel has no Landlock ({error}); it needs Linux 5.13 or later built with \
             CONFIG_SECURITY_LANDLOCK"
        )
    }
}

/// What a dynamically linked Rust cdylib needs to be loaded and run normally: the dynamic
/// loader, system libraries and their configuration (`/etc`: `ld.so.cache`, `resolv.conf`,
/// certificates, `localtime`), the harmless devices, the process's own `/proc` entry
/// (Rust's std reads `/proc/self/maps`, cgroup files for `available_parallelism`) and the
/// CPU and cgroup information in `/sys`. Only the paths that exist here.
///
/// `/proc/self` is returned as is: it is resolved when the sandbox is applied, in the
/// process applying it (the worker), not in the process building the rules.
pub fn system_read_paths() -> Vec<PathBuf> {
    [
        "/usr",
        "/lib",
        "/lib64",
        "/lib32",
        "/bin",
        "/sbin",
        // What the C library and TLS read from /etc, not all of it (`/etc/shadow`, keys
        // and other services' secrets stay out of reach).
        "/etc/ld.so.cache",
        "/etc/ld.so.conf",
        "/etc/ld.so.conf.d",
        "/etc/ld.so.preload",
        "/etc/localtime",
        "/etc/timezone",
        "/etc/resolv.conf",
        "/etc/hosts",
        "/etc/host.conf",
        "/etc/nsswitch.conf",
        "/etc/gai.conf",
        "/etc/services",
        "/etc/protocols",
        "/etc/passwd",
        "/etc/group",
        "/etc/ssl",
        "/etc/ca-certificates",
        "/etc/pki",
        "/etc/alternatives",
        "/dev/null",
        "/dev/zero",
        "/dev/urandom",
        "/dev/random",
        "/proc/self",
        "/sys/devices/system/cpu",
        "/sys/fs/cgroup",
    ]
    .into_iter()
    .map(PathBuf::from)
    .filter(|p| p.exists())
    .collect()
}

/// Restricts the CALLING THREAD, and the threads and processes it starts afterwards, to
/// `rules`; returns what is enforced.
///
/// Call it before the process starts any other thread: threads that already exist stay
/// unrestricted. It also sets `PR_SET_NO_NEW_PRIVS` on the thread (the `landlock` crate
/// does so before restricting, as Landlock requires of a process without
/// `CAP_SYS_ADMIN`), so setuid programs it runs no longer gain privileges.
///
/// - [`SandboxMode::Off`] does nothing and returns [`SandboxOutcome::Off`].
/// - [`SandboxMode::BestEffort`] enforces what the kernel supports: `Full`, `Partial` or
///   `NotSupported`, never an error just because the kernel lacks support.
/// - [`SandboxMode::Required`] fails with [`SandboxError::NotEnforced`] (restricting
///   nothing) unless the kernel enforces every rule asked for: the filesystem rules need
///   Landlock ABI 3, denying the network ABI 4.
///
/// Either way, rights that only newer kernels know are added where the kernel has them
/// (device ioctls at ABI 5, connecting to UNIX sockets by path at ABI 9, UDP at ABI 10);
/// "fully enforced" does not depend on them. A path of the rules that does not exist is
/// skipped; one that exists but cannot be opened is an error naming it.
pub fn apply(mode: SandboxMode, rules: &SandboxRules) -> Result<SandboxOutcome, SandboxError> {
    if mode == SandboxMode::Off {
        return Ok(SandboxOutcome::Off);
    }
    let rules = &with_env_hidden(rules);
    let (abi, gaps) = probe_gaps(mode, rules)?;
    let path_rules = open_rules(rules)?;
    let status = build(mode, rules, path_rules)?.restrict_self()?;
    outcome(
        mode,
        abi,
        gaps,
        status.ruleset != RulesetStatus::NotEnforced,
    )
}

/// The kernel's Landlock ABI and what of `rules` it cannot enforce; in required mode a
/// gap is an error (nothing restricted).
fn probe_gaps(
    mode: SandboxMode,
    rules: &SandboxRules,
) -> Result<(io::Result<u32>, Vec<String>), SandboxError> {
    let abi = probe();
    let gaps = match &abi {
        Ok(abi) => gaps(*abi, rules),
        Err(e) => vec![unsupported_detail(e)],
    };
    if mode == SandboxMode::Required && !gaps.is_empty() {
        return Err(SandboxError::NotEnforced {
            detail: gaps.join("; "),
        });
    }
    Ok((abi, gaps))
}

/// A ruleset built for a child process to enter: made by [`prepare`] in the parent (which
/// opens the paths and allocates), entered by [`PreparedSandbox::enter`] in the child
/// between `fork` and `exec` (which only makes system calls).
#[derive(Debug)]
pub struct PreparedSandbox {
    /// The ruleset's descriptor (close-on-exec, as the kernel makes it); `None` when there
    /// is nothing to enter (mode off, or a kernel without Landlock).
    ruleset: Option<OwnedFd>,
    /// Whether the child sets `PR_SET_NO_NEW_PRIVS` and marks every descriptor above
    /// standard error close-on-exec, so nothing the host inherited reaches the program
    /// (every mode but off).
    confined: bool,
    /// Whether the child drops every capability (every mode but off), and the highest
    /// capability number and whether the parent holds any, found before `fork`.
    drop_caps: Option<(u32, bool)>,
    /// The seccomp filters the child installs (every mode but off, where this
    /// architecture has them).
    filters: Option<seccomp::Filters>,
    /// What the child will be held to.
    outcome: SandboxOutcome,
    /// Why the seccomp filter is missing, where it is (an architecture without one).
    filter_gap: Option<seccomp::SeccompError>,
}

/// Builds the sandbox of `rules` for a child process, without restricting the caller:
/// the paths are opened and the ruleset created here, before `fork`, so the child only
/// has to enter it ([`PreparedSandbox::enter`]). Modes and outcomes as in [`apply`].
pub fn prepare(mode: SandboxMode, rules: &SandboxRules) -> Result<PreparedSandbox, SandboxError> {
    if mode == SandboxMode::Off {
        return Ok(PreparedSandbox {
            ruleset: None,
            confined: false,
            drop_caps: None,
            filters: None,
            outcome: SandboxOutcome::Off,
            filter_gap: None,
        });
    }
    let rules = &with_env_hidden(rules);
    let (abi, gaps) = probe_gaps(mode, rules)?;
    let path_rules = open_rules(rules)?;
    let created = build(mode, rules, path_rules)?;
    let ruleset: Option<OwnedFd> = created.into();
    let outcome = outcome(mode, abi, gaps, ruleset.is_some())?;
    let (filters, filter_gap) = match seccomp::Filters::compile(seccomp::SocketRules {
        network: rules.network,
        unix: rules.unix_sockets,
    }) {
        Ok(filters) => (Some(filters), None),
        Err(e) if mode == SandboxMode::Required => {
            return Err(SandboxError::NotEnforced {
                detail: e.to_string(),
            });
        }
        Err(e) => (None, Some(e)),
    };
    Ok(PreparedSandbox {
        ruleset,
        confined: true,
        drop_caps: Some((caps::last_cap(), caps::has_any())),
        filters,
        outcome,
        filter_gap,
    })
}

/// `rules` with the paths the host hid through the environment added to `hidden` (unless
/// an outer sandbox of a worker hides them already, [`protected::hidden_by_outer`]).
fn with_env_hidden(rules: &SandboxRules) -> SandboxRules {
    let mut rules = rules.clone();
    if protected::hidden_by_outer() {
        return rules;
    }
    for path in protected::from_env() {
        if !rules.hidden.contains(&path) {
            rules.hidden.push(path);
        }
    }
    rules
}

impl PreparedSandbox {
    /// What the child is held to once it has entered.
    pub fn outcome(&self) -> &SandboxOutcome {
        &self.outcome
    }

    /// Why the child gets no seccomp filter (an architecture toolhost has none for), or
    /// `None` when it does (or the mode is off).
    pub fn filter_gap(&self) -> Option<&seccomp::SeccompError> {
        self.filter_gap.as_ref()
    }

    /// Puts toolhost's [`mark`] on the process (in every mode: every toolhost's control
    /// socket refuses it), restricts the calling thread (in a child: the child process,
    /// whose only thread it is) to the prepared ruleset, sets `PR_SET_NO_NEW_PRIVS` (so setuid programs no
    /// longer gain privileges; Landlock requires it of a process without
    /// `CAP_SYS_ADMIN`), drops every capability (a root host's command must not keep
    /// `CAP_SYS_PTRACE`, `CAP_DAC_OVERRIDE` and the rest: with them it could read the
    /// host's memory and environment, or write past the sandbox's owner checks),
    /// installs the seccomp filter ([`seccomp`]) and marks every descriptor above
    /// standard error close-on-exec (`close_range`), so no descriptor the host inherited
    /// reaches the program.
    ///
    /// Async-signal-safe: system calls only, no allocation, no lock, so it may run in a
    /// `pre_exec` hook of `std::process::Command`. The error is the system call's `errno`.
    pub fn enter(&self) -> io::Result<()> {
        // In every mode, off included: whatever holds it, the program is one a toolhost
        // started for a tool, and no toolhost's control socket may take it for its user.
        mark::set()?;
        if let Some((last_cap, held)) = self.drop_caps {
            caps::drop_all_in_child(last_cap, held)?;
        }
        if self.confined {
            // SAFETY: PR_SET_NO_NEW_PRIVS takes plain integers and touches no memory.
            if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        if let Some(fd) = &self.ruleset {
            // SAFETY: landlock_restrict_self(2) takes a ruleset descriptor (owned by self,
            // so open) and flags (none); it reads no memory of ours.
            let done = unsafe {
                libc::syscall(
                    libc::SYS_landlock_restrict_self,
                    fd.as_raw_fd(),
                    0 as libc::c_uint,
                )
            };
            if done != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        if let Some(filters) = &self.filters {
            filters.install()?;
        }
        if self.confined {
            close_inherited()?;
        }
        Ok(())
    }
}

/// `CLOSE_RANGE_CLOEXEC` from `<linux/close_range.h>`.
const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;

/// Marks every descriptor from 3 up close-on-exec (Linux 5.11); on an older kernel,
/// closes-on-exec them one by one up to the open-file limit. System calls only.
fn close_inherited() -> io::Result<()> {
    // SAFETY: close_range(2) takes integers and touches no memory.
    let done = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        )
    };
    if done == 0 {
        return Ok(());
    }
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only into `limit`.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let top = libc::c_int::try_from(limit.rlim_cur.min(1 << 20)).unwrap_or(1 << 20);
    for fd in 3..top {
        // SAFETY: fcntl on a descriptor number; EBADF for one that is not open.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    Ok(())
}

/// What is enforced, from the probe, the gaps found and whether the kernel took the
/// ruleset; in required mode anything short of everything is an error.
fn outcome(
    mode: SandboxMode,
    abi: io::Result<u32>,
    gaps: Vec<String>,
    enforced: bool,
) -> Result<SandboxOutcome, SandboxError> {
    match abi {
        Ok(_) if !enforced => not_enforced(mode, &gaps),
        Err(_) => not_enforced(mode, &gaps),
        Ok(abi) if gaps.is_empty() => Ok(SandboxOutcome::Full { abi }),
        Ok(abi) => Ok(SandboxOutcome::Partial {
            detail: format!(
                "the kernel enforces Landlock ABI {abi}: {}",
                gaps.join("; ")
            ),
        }),
    }
}

/// The outcome when the kernel enforces none of the rules.
fn not_enforced(mode: SandboxMode, gaps: &[String]) -> Result<SandboxOutcome, SandboxError> {
    let detail = if gaps.is_empty() {
        "the kernel enforced none of the rules".to_owned()
    } else {
        gaps.join("; ")
    };
    if mode == SandboxMode::Required {
        Err(SandboxError::NotEnforced { detail })
    } else {
        Ok(SandboxOutcome::NotSupported { detail })
    }
}

/// What of `rules` a kernel with Landlock ABI `abi` cannot enforce (empty: everything).
fn gaps(abi: u32, rules: &SandboxRules) -> Vec<String> {
    let mut gaps = Vec::new();
    if abi < FILESYSTEM_ABI {
        gaps.push(format!(
            "truncating files outside the write paths is not denied (that needs ABI \
             {FILESYSTEM_ABI}, Linux 6.2)"
        ));
    }
    if !rules.network && abi < NETWORK_ABI {
        gaps.push(format!(
            "network rules are not enforced (denying TCP bind and connect needs ABI \
             {NETWORK_ABI}, Linux 6.7)"
        ));
    }
    gaps
}

/// The rights a `read` path grants: read files, list directories, execute.
fn read_access() -> BitFlags<AccessFs> {
    AccessFs::from_read(LATEST)
}

/// The rights a `write` path grants: everything but execute.
fn write_access() -> BitFlags<AccessFs> {
    AccessFs::from_all(LATEST) & !AccessFs::Execute
}

/// Opens every path of `rules` that exists (read paths, then write paths), with the rights
/// it grants, before anything is restricted.
fn open_rules(rules: &SandboxRules) -> Result<Vec<PathBeneath<PathFd>>, SandboxError> {
    let read = rules.read.iter().map(|p| (p.clone(), read_access()));
    let write = rules.write.iter().map(|p| (p.clone(), write_access()));
    let carved = protected::carve(
        read.chain(write).collect(),
        &rules.hidden,
        &rules.private,
        AccessFs::ReadDir.into(),
    );
    let mut out = Vec::new();
    for (path, access) in carved {
        if let Some(rule) = open_rule(&path, access)? {
            out.push(rule);
        }
    }
    Ok(out)
}

/// A rule granting `access` beneath `path`, or `None` if `path` does not exist. A file
/// (anything but a directory) gets only the rights that apply to files: the crate would
/// count directory rights on a file as a partially enforced rule.
fn open_rule(
    path: &Path,
    access: BitFlags<AccessFs>,
) -> Result<Option<PathBeneath<PathFd>>, SandboxError> {
    let failed = |source: io::Error| SandboxError::Path {
        path: path.to_path_buf(),
        source,
    };
    let fd = match PathFd::new(path) {
        Ok(fd) => fd,
        Err(PathFdError::OpenCall { source, .. }) if is_missing(&source) => return Ok(None),
        Err(PathFdError::OpenCall { source, .. }) => return Err(failed(source)),
        Err(other) => return Err(failed(io::Error::other(other))),
    };
    // The type of what was opened (not of what `path` names now): fstat on a duplicate.
    let is_dir = fd
        .as_fd()
        .try_clone_to_owned()
        .map(File::from)
        .and_then(|f| f.metadata())
        .map_err(failed)?
        .is_dir();
    let access = if is_dir {
        access
    } else {
        access & AccessFs::from_file(LATEST)
    };
    Ok(Some(PathBeneath::new(fd, access)))
}

/// A path that does not exist (or whose parent is not a directory): skipped.
fn is_missing(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

/// Builds the ruleset (what [`SandboxMode::Required`] needs as a hard requirement, the
/// rest best effort) and adds `path_rules`; nothing is restricted yet.
fn build(
    mode: SandboxMode,
    rules: &SandboxRules,
    path_rules: Vec<PathBeneath<PathFd>>,
) -> Result<RulesetCreated, RulesetError> {
    let mut ruleset = Ruleset::default();
    if mode == SandboxMode::Required {
        // Checked above; the crate checks again and refuses to go ahead without them.
        ruleset = ruleset
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::from_all(ABI::V3))?;
        if !rules.network {
            ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
        }
    }
    ruleset = ruleset
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(LATEST))?;
    if !rules.network {
        ruleset = ruleset.handle_access(AccessNet::from_all(LATEST))?;
    }
    // Signals and abstract Unix sockets stay inside the sandbox (ABI 6 and later).
    ruleset = ruleset.scope(Scope::Signal | Scope::AbstractUnixSocket)?;
    // No network rule: with the network handled, every port is denied.
    ruleset
        .create()?
        .add_rules(path_rules.into_iter().map(Ok::<_, RulesetError>))
}

#[cfg(test)]
mod tests {
    use std::io::ErrorKind;
    use std::net::{TcpListener, TcpStream};

    use super::*;

    /// Runs `f` on a fresh thread (the sandbox binds only that thread) and rethrows its
    /// panic.
    fn on_fresh_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        match std::thread::spawn(f).join() {
            Ok(value) => value,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// The kernel's ABI, or `None` with a printed reason to skip the test.
    fn landlock_or_skip() -> Option<u32> {
        let abi = kernel_abi();
        if abi.is_none() {
            eprintln!("skipped: this kernel has no Landlock");
        }
        abi
    }

    #[test]
    fn off_restricts_nothing() {
        let outcome = on_fresh_thread(|| {
            let outcome = apply(SandboxMode::Off, &SandboxRules::default());
            std::fs::read_dir("/").expect("the root is still readable");
            outcome
        });
        assert_eq!(outcome.expect("off"), SandboxOutcome::Off);
        assert_eq!(SandboxOutcome::Off.to_string(), "Landlock sandbox off");
    }

    #[test]
    fn system_paths_exist_and_keep_proc_self_unresolved() {
        let paths = system_read_paths();
        assert!(paths.contains(&PathBuf::from("/usr")));
        assert!(paths.contains(&PathBuf::from("/proc/self")));
        assert!(paths.iter().all(|p| p.exists()));
    }

    #[test]
    fn writes_only_where_allowed_reads_where_listed() {
        let Some(abi) = landlock_or_skip() else {
            return;
        };
        let writable = tempfile::tempdir().expect("temp dir");
        let readable = tempfile::tempdir().expect("temp dir");
        std::fs::write(readable.path().join("note"), "hello").expect("write");
        let outside =
            std::env::temp_dir().join(format!("toolhost-sandbox-outside-{}", std::process::id()));
        let mut read = system_read_paths();
        read.push(readable.path().to_path_buf());
        read.push(PathBuf::from("/does/not/exist"));
        let rules = SandboxRules {
            read,
            write: vec![writable.path().to_path_buf()],
            network: true,
            ..SandboxRules::default()
        };
        let (a, b, out) = (
            writable.path().to_path_buf(),
            readable.path().to_path_buf(),
            outside.clone(),
        );
        let outcome = on_fresh_thread(move || {
            let outcome = apply(SandboxMode::BestEffort, &rules).expect("sandbox");
            std::fs::write(a.join("new"), "x").expect("write in the write path");
            std::fs::remove_file(a.join("new")).expect("remove in the write path");
            let denied = std::fs::write(b.join("new"), "x").expect_err("write in a read path");
            assert_eq!(denied.kind(), ErrorKind::PermissionDenied);
            assert_eq!(
                std::fs::read_to_string(b.join("note")).expect("read in a read path"),
                "hello"
            );
            let denied = std::fs::write(&out, "x").expect_err("write outside");
            assert_eq!(denied.kind(), ErrorKind::PermissionDenied);
            let denied = std::fs::read_dir("/var").expect_err("read outside");
            assert_eq!(denied.kind(), ErrorKind::PermissionDenied);
            std::fs::read_dir("/usr/lib").expect("system paths stay readable");
            std::fs::read_to_string("/proc/self/maps").expect("own /proc entry");
            std::thread::available_parallelism().expect("cpu count");
            // A thread started afterwards is bound too.
            let later = std::thread::spawn(move || std::fs::write(b.join("later"), "x"))
                .join()
                .expect("thread");
            assert_eq!(
                later.expect_err("denied").kind(),
                ErrorKind::PermissionDenied
            );
            outcome
        });
        let _ = std::fs::remove_file(&outside);
        if abi >= FILESYSTEM_ABI {
            assert_eq!(outcome, SandboxOutcome::Full { abi });
            assert_eq!(
                outcome.to_string(),
                format!("Landlock sandbox fully enforced (ABI {abi})")
            );
        } else {
            assert!(matches!(outcome, SandboxOutcome::Partial { .. }));
        }
        // The test thread itself was never restricted.
        std::fs::write(writable.path().join("from-test"), "x").expect("unrestricted");
        std::fs::write(readable.path().join("from-test"), "x").expect("unrestricted");
    }

    #[test]
    fn a_single_file_can_be_allowed() {
        if landlock_or_skip().is_none() {
            return;
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let (file, sibling) = (dir.path().join("allowed"), dir.path().join("sibling"));
        std::fs::write(&file, "yes").expect("write");
        std::fs::write(&sibling, "no").expect("write");
        let rules = SandboxRules {
            read: vec![file.clone()],
            write: Vec::new(),
            network: true,
            ..SandboxRules::default()
        };
        on_fresh_thread(move || {
            apply(SandboxMode::BestEffort, &rules).expect("sandbox");
            assert_eq!(std::fs::read_to_string(&file).expect("allowed"), "yes");
            let denied = std::fs::read_to_string(&sibling).expect_err("sibling");
            assert_eq!(denied.kind(), ErrorKind::PermissionDenied);
        });
    }

    #[test]
    fn the_network_is_denied_unless_allowed() {
        let Some(abi) = landlock_or_skip() else {
            return;
        };
        if abi < NETWORK_ABI {
            eprintln!("skipped: Landlock ABI {abi} cannot deny the network");
            return;
        }
        // Bound here, on the unrestricted test thread.
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let address = listener.local_addr().expect("address");
        for network in [false, true] {
            let rules = SandboxRules {
                read: system_read_paths(),
                write: Vec::new(),
                network,
                ..SandboxRules::default()
            };
            let (connected, bound) = on_fresh_thread(move || {
                apply(SandboxMode::BestEffort, &rules).expect("sandbox");
                (
                    TcpStream::connect(address).map(drop),
                    TcpListener::bind("127.0.0.1:0").map(drop),
                )
            });
            if network {
                connected.expect("connect allowed");
                bound.expect("bind allowed");
            } else {
                assert_eq!(
                    connected.expect_err("connect denied").kind(),
                    ErrorKind::PermissionDenied
                );
                assert_eq!(
                    bound.expect_err("bind denied").kind(),
                    ErrorKind::PermissionDenied
                );
            }
        }
    }

    #[test]
    fn required_is_full_here_or_refused_before_restricting() {
        let Some(abi) = landlock_or_skip() else {
            return;
        };
        let rules = SandboxRules {
            read: system_read_paths(),
            write: Vec::new(),
            network: false,
            ..SandboxRules::default()
        };
        let outcome = on_fresh_thread(move || apply(SandboxMode::Required, &rules));
        if abi >= NETWORK_ABI {
            assert_eq!(outcome.expect("required"), SandboxOutcome::Full { abi });
        } else {
            let error = outcome.expect_err("kernel too old");
            assert!(matches!(error, SandboxError::NotEnforced { .. }));
            assert!(error.to_string().contains("sandbox = \"best-effort\""));
        }
    }

    #[test]
    fn required_names_what_an_older_kernel_lacks() {
        let rules = SandboxRules::default();
        assert!(gaps(7, &rules).is_empty());
        assert_eq!(gaps(3, &rules).len(), 1);
        assert!(gaps(3, &rules)[0].contains("network"));
        assert!(
            gaps(
                3,
                &SandboxRules {
                    network: true,
                    ..rules.clone()
                }
            )
            .is_empty()
        );
        assert_eq!(gaps(2, &rules).len(), 2);
        let error = SandboxError::NotEnforced {
            detail: gaps(3, &rules).join("; "),
        };
        let message = error.to_string();
        assert!(message.contains("does not support"), "{message}");
        assert!(message.contains("`[isolation] sandbox = \"best-effort\"`"));
    }

    #[test]
    fn an_existing_path_that_cannot_be_opened_is_an_error_naming_it() {
        if landlock_or_skip().is_none() {
            return;
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let looping = dir.path().join("loop");
        std::os::unix::fs::symlink(&looping, &looping).expect("symlink");
        let rules = SandboxRules {
            read: vec![looping.clone()],
            write: Vec::new(),
            network: true,
            ..SandboxRules::default()
        };
        let result = on_fresh_thread(move || {
            let result = apply(SandboxMode::BestEffort, &rules);
            // Nothing was restricted.
            std::fs::read_dir("/").expect("unrestricted");
            result
        });
        match result {
            Err(error @ SandboxError::Path { .. }) => {
                assert!(error.to_string().contains(&looping.display().to_string()));
            }
            other => panic!("expected a path error, got {other:?}"),
        }
    }

    #[test]
    fn a_prepared_sandbox_binds_the_child_that_enters_it_not_the_parent() {
        use std::os::unix::process::CommandExt as _;
        use std::sync::Arc;

        let Some(abi) = landlock_or_skip() else {
            return;
        };
        let writable = tempfile::tempdir().expect("temp dir");
        let outside = tempfile::tempdir().expect("temp dir");
        let rules = SandboxRules {
            read: vec![PathBuf::from("/")],
            write: vec![writable.path().to_path_buf(), PathBuf::from("/dev/null")],
            network: false,
            ..SandboxRules::default()
        };
        let prepared = Arc::new(prepare(SandboxMode::BestEffort, &rules).expect("prepare"));
        if abi >= NETWORK_ABI {
            assert_eq!(prepared.outcome(), &SandboxOutcome::Full { abi });
        }
        let script = format!(
            "echo in > {}/inside; echo out > {}/outside 2>/dev/null; echo done",
            writable.path().display(),
            outside.path().display()
        );
        let mut command = std::process::Command::new("/bin/sh");
        command.arg("-c").arg(&script);
        let child_side = Arc::clone(&prepared);
        // SAFETY: `enter` makes two system calls and allocates nothing.
        unsafe { command.pre_exec(move || child_side.enter()) };
        let output = command.output().expect("run");
        assert_eq!(String::from_utf8_lossy(&output.stdout), "done\n");
        assert!(
            writable.path().join("inside").exists(),
            "write inside denied"
        );
        assert!(
            !outside.path().join("outside").exists(),
            "write outside allowed"
        );
        // The parent was never restricted.
        std::fs::write(outside.path().join("parent"), "x").expect("parent unrestricted");
        let off = prepare(SandboxMode::Off, &rules).expect("off");
        assert_eq!(off.outcome(), &SandboxOutcome::Off);
        off.enter().expect("off enters nothing");
    }

    #[test]
    fn modes_read_as_kebab_case() {
        #[derive(serde::Deserialize)]
        struct Isolation {
            sandbox: SandboxMode,
        }
        for (text, mode) in [
            ("off", SandboxMode::Off),
            ("best-effort", SandboxMode::BestEffort),
            ("required", SandboxMode::Required),
        ] {
            let json = format!("{{\"sandbox\": \"{text}\"}}");
            let parsed: Isolation = serde_json::from_str(&json).expect("parse");
            assert_eq!(parsed.sandbox, mode);
        }
        assert_eq!(SandboxMode::default(), SandboxMode::BestEffort);
    }
}
