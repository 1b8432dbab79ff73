//! `toolhost --system`: every command on the system service's folders (the ones systemd
//! makes for the unit, and root's plugin folder), and, run by root, as the user who owns
//! the service's state folder, so what an operator adds (a token, a pin) is the service's
//! and readable by it. `install` and `remove` stay root: the plugin folder is root's, and
//! the service's user must not be able to write it.

use std::os::unix::fs::MetadataExt as _;

/// Why `--system` could not be entered.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SystemError {
    /// The state folder could not be read.
    #[error("could not read the service's state folder {path}: {source}")]
    State {
        /// The folder.
        path: std::path::PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// Switching to the service's user failed.
    #[error(
        "could not act as the service's user (uid {uid}, gid {gid}, the owner of {path}): \
         {call} failed: {source}"
    )]
    Switch {
        /// The uid.
        uid: u32,
        /// The gid.
        gid: u32,
        /// The state folder.
        path: std::path::PathBuf,
        /// The system call.
        call: &'static str,
        /// What failed.
        source: std::io::Error,
    },
}

/// What `--system` did about the user this process runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ActingAs {
    /// This process's own user (not root, or root with no service user yet).
    Itself,
    /// Root stayed root to write the plugin folder (root's), trusting the service's
    /// control socket (owned by its user) for the report of what it loaded.
    RootForPlugins {
        /// The service's user, if its state folder says who it is.
        service_uid: Option<u32>,
    },
    /// Root switched to the service's user (the owner of the state folder).
    ServiceUser {
        /// Its uid.
        uid: u32,
    },
}

/// Uses the system service's folders for everything this process does, and when run by
/// root, becomes the user who owns the state folder (the unit's `User=`, as systemd's
/// `StateDirectory=` made it), unless `writes_plugins` (`install`, `remove`): then root
/// stays root, so the plugin folder stays root's. Call it first, while the process has
/// one thread.
pub(crate) fn enter(writes_plugins: bool) -> Result<ActingAs, SystemError> {
    let layout = toolhost::SystemLayout::from_env();
    let state = layout.state.clone();
    toolhost::use_system_layout(layout);
    // SAFETY: geteuid cannot fail and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(ActingAs::Itself);
    }
    let meta = match std::fs::metadata(&state) {
        Ok(meta) => meta,
        // No service has run yet: root keeps acting as itself (systemd gives the folder
        // to the unit's user when it starts).
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ActingAs::Itself),
        Err(source) => {
            return Err(SystemError::State {
                path: state,
                source,
            });
        }
    };
    let (uid, gid) = (meta.uid(), meta.gid());
    if writes_plugins {
        let service_uid = (uid != 0).then_some(uid);
        if let Some(uid) = service_uid {
            toolhost::trust_service_user(uid);
        }
        return Ok(ActingAs::RootForPlugins { service_uid });
    }
    if uid == 0 {
        return Ok(ActingAs::Itself);
    }
    let fail = |call: &'static str| SystemError::Switch {
        uid,
        gid,
        path: state.clone(),
        call,
        source: std::io::Error::last_os_error(),
    };
    // Groups first, then the gid, then the uid (after which neither could change).
    // SAFETY: plain system calls on values; `&gid` outlives the call.
    unsafe {
        if libc::setgroups(1, &gid) != 0 {
            return Err(fail("setgroups"));
        }
        if libc::setgid(gid) != 0 {
            return Err(fail("setgid"));
        }
        if libc::setuid(uid) != 0 {
            return Err(fail("setuid"));
        }
    }
    Ok(ActingAs::ServiceUser { uid })
}
