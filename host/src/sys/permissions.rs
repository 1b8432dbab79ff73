//! Strict permissions for plugin files and config files, after OpenSSH's `StrictModes`: a
//! plugin file, a config file (the host's, a profile's) or the plugin index, the directory
//! it is in, and for a symlink its final target and the target's directory must be owned
//! by the host's effective user or root and not writable by group or others. Anyone else
//! who can change one of them could make the host run their code. A sticky directory that
//! others can write (`/tmp`) is refused too, as OpenSSH does.
//!
//! The loader checks the paths before it opens a file and checks the opened descriptor
//! again (`fstat`), so a file swapped in between is caught; [`open_checked`] does both for
//! config files, opening the path it judged with `O_NOFOLLOW`. Weak spot: only the file's
//! own directory (and the symlink target's) is checked, not every folder up to `/`; a
//! directory inside a folder another user can rename things in is not noticed.
//! `[plugins] strict_permissions = false` turns the check off for plugin files only
//! (development only): the switch is written in the config file, so it cannot vouch for
//! that file, and the message for a config file does not offer it.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

#[cfg(unix)]
use std::os::unix::fs::MetadataExt as _;

/// A file or directory that other users could change.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "{role} {} is {}{}; whoever can change it could make the host run their code. Fix: {}{}",
    path.display(),
    describe(self),
    owner_mode(self),
    fixes(self),
    ending(self)
)]
pub struct PermissionProblem {
    /// The path refused.
    pub path: PathBuf,
    /// Which part it is: "the plugin file", "its directory", "the symlink's target",
    /// "the target's directory".
    pub role: &'static str,
    /// Its owner's uid.
    pub uid: u32,
    /// Its owner's name, if the user database knows it.
    pub owner: Option<String>,
    /// Its permission bits.
    pub mode: u32,
    /// The host's effective user, by name if known.
    pub host_user: String,
    /// Whether the owner is neither the host's user nor root.
    pub foreign_owner: bool,
    /// What the checked file is: it decides whether `[plugins] strict_permissions = false`
    /// applies (and is offered).
    pub guarded: Guarded,
}

/// What a checked file is, for the rule's one switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Guarded {
    /// A plugin file: `[plugins] strict_permissions = false` turns the check off
    /// (development only), and the message says so.
    Plugin,
    /// A config file (the host's or a profile's) or the plugin index: always checked. The
    /// switch is written in the config file, so it cannot vouch for it, and is not
    /// offered.
    Config,
}

/// What is checked, for the message: the file's role ("the config file") and what it is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Subject {
    /// The file's role in the message.
    pub(crate) role: &'static str,
    /// Whether the development switch applies.
    pub(crate) guarded: Guarded,
}

/// A plugin file.
pub(crate) const PLUGIN_FILE: Subject = Subject {
    role: "the plugin file",
    guarded: Guarded::Plugin,
};

/// The host's config file.
pub(crate) const CONFIG_FILE: Subject = Subject {
    role: "the config file",
    guarded: Guarded::Config,
};

/// A profile's `config.toml`.
pub(crate) const PROFILE_CONFIG: Subject = Subject {
    role: "the profile's config file",
    guarded: Guarded::Config,
};

/// The plugin index (a cache in the state folder).
pub(crate) const PLUGIN_INDEX: Subject = Subject {
    role: "the plugin index",
    guarded: Guarded::Config,
};

fn ending(p: &PermissionProblem) -> &'static str {
    match p.guarded {
        Guarded::Plugin => {
            " (or, on a development machine only, set [plugins] strict_permissions = false)"
        }
        Guarded::Config => "",
    }
}

/// Whether `mode` is a sticky directory others can write (like `/tmp`).
fn shared_sticky(mode: u32) -> bool {
    mode & 0o170000 == 0o040000 && mode & 0o1002 == 0o1002
}

fn describe(p: &PermissionProblem) -> String {
    let mut parts = Vec::new();
    if p.foreign_owner {
        if p.host_user == "root" {
            parts.push("owned by a user other than root".to_owned());
        } else {
            parts.push(format!(
                "owned by a user other than {} or root",
                p.host_user
            ));
        }
    }
    match (p.mode & 0o020 != 0, p.mode & 0o002 != 0) {
        (true, true) => parts.push("writable by group and others".to_owned()),
        (true, false) => parts.push("writable by its group".to_owned()),
        (false, true) => parts.push("writable by others".to_owned()),
        (false, false) => {}
    }
    parts.join(" and ")
}

fn owner_mode(p: &PermissionProblem) -> String {
    let owner = match &p.owner {
        Some(name) => format!("{name} (uid {})", p.uid),
        None => format!("uid {}", p.uid),
    };
    format!(" (owner {owner}, mode {:04o})", p.mode & 0o7777)
}

fn fixes(p: &PermissionProblem) -> String {
    let path = shell_quote(&p.path);
    let mut fix = Vec::new();
    if shared_sticky(p.mode) {
        // `chmod go-w /tmp` would break the machine: the file has to move.
        fix.push(format!(
            "move the file out of {path} (a folder every user can write) into one only {} \
             or root can write",
            p.host_user
        ));
    } else if p.mode & 0o022 != 0 {
        fix.push(format!("`chmod go-w {path}`"));
    }
    if p.foreign_owner {
        fix.push(format!("`chown {} {path}`", p.host_user));
    }
    fix.join(" and ")
}

/// The path as a shell word: quoted when it holds anything but plain characters.
fn shell_quote(path: &Path) -> String {
    let s = path.display().to_string();
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+,:@%".contains(c))
    {
        s
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Why a path could not be checked or was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PermissionCheck {
    /// Others could change it.
    #[error(transparent)]
    Refused(#[from] PermissionProblem),
    /// It could not be looked at.
    #[error("could not look at {}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
}

/// The decision on one path's owner and mode, for the user `euid`; `guarded` decides
/// the message's ending.
pub(crate) fn judge(
    path: &Path,
    role: &'static str,
    guarded: Guarded,
    uid: u32,
    mode: u32,
    euid: u32,
) -> Result<(), PermissionProblem> {
    let foreign_owner = uid != euid && uid != 0;
    if !foreign_owner && mode & 0o022 == 0 {
        return Ok(());
    }
    Err(PermissionProblem {
        path: path.to_path_buf(),
        role,
        uid,
        owner: user_name(uid),
        mode,
        host_user: user_name(euid).unwrap_or_else(|| euid.to_string()),
        foreign_owner,
        guarded,
    })
}

/// Checks a plugin file's path before it is opened: its directory, and the file itself,
/// or for a symlink its final target and the target's directory.
pub(crate) fn check_path(file: &Path) -> Result<(), PermissionCheck> {
    check_path_as(file, PLUGIN_FILE).map(|_| ())
}

/// [`check_path`] for any `subject`. Returns the path it judged last: the file itself,
/// or for a symlink its final target (what to open with `O_NOFOLLOW`).
pub(crate) fn check_path_as(file: &Path, subject: Subject) -> Result<PathBuf, PermissionCheck> {
    let euid = effective_uid();
    let g = subject.guarded;
    let stat = |p: &Path, follow: bool| {
        let meta = if follow {
            fs::metadata(p)
        } else {
            fs::symlink_metadata(p)
        };
        meta.map_err(|source| PermissionCheck::Io {
            path: p.to_path_buf(),
            source,
        })
    };
    let dir = parent_of(file);
    let d = stat(&dir, true)?;
    judge(&dir, "its directory", g, d.uid(), d.mode(), euid)?;
    let link = stat(file, false)?;
    if link.file_type().is_symlink() {
        let target = fs::canonicalize(file).map_err(|source| PermissionCheck::Io {
            path: file.to_path_buf(),
            source,
        })?;
        let t = stat(&target, true)?;
        judge(&target, "the symlink's target", g, t.uid(), t.mode(), euid)?;
        let target_dir = parent_of(&target);
        let td = stat(&target_dir, true)?;
        judge(
            &target_dir,
            "the target's directory",
            g,
            td.uid(),
            td.mode(),
            euid,
        )?;
        Ok(target)
    } else {
        judge(file, subject.role, g, link.uid(), link.mode(), euid)?;
        Ok(file.to_path_buf())
    }
}

/// Checks the opened file (by its `fstat` metadata) again: catches a swap after
/// [`check_path`].
pub(crate) fn check_opened(file: &Path, meta: &fs::Metadata) -> Result<(), PermissionProblem> {
    check_opened_as(file, meta, PLUGIN_FILE)
}

/// [`check_opened`] for any `subject`.
pub(crate) fn check_opened_as(
    file: &Path,
    meta: &fs::Metadata,
    subject: Subject,
) -> Result<(), PermissionProblem> {
    judge(
        file,
        subject.role,
        subject.guarded,
        meta.uid(),
        meta.mode(),
        effective_uid(),
    )
}

/// Checks `file`'s path ([`check_path_as`]), opens the path it judged (the file, or a
/// symlink's final target) with `O_NOFOLLOW | O_NONBLOCK | O_NOCTTY`, refuses anything
/// but a regular file, and judges the opened descriptor's `fstat` again, so a file
/// swapped in between the check and the open is caught. Returns the file and that
/// `fstat`'s metadata. A missing file is an `Io` error of kind
/// `NotFound` naming `file`.
pub(crate) fn open_checked(
    file: &Path,
    subject: Subject,
) -> Result<(fs::File, fs::Metadata), OpenChecked> {
    // Nothing there: nothing to check (the directory is not judged for a missing file).
    // A FIFO or a device (`/dev/zero` is 0666) is not judged either: it is no config file.
    let target = fs::metadata(file).map_err(|source| {
        OpenChecked::Check(PermissionCheck::Io {
            path: file.to_path_buf(),
            source,
        })
    })?;
    if !target.file_type().is_file() {
        return Err(OpenChecked::NotRegular {
            kind: super::safe_open::kind_of(&target.file_type()),
        });
    }
    let judged = check_path_as(file, subject).map_err(OpenChecked::Check)?;
    let (opened, meta) = super::safe_open::open_regular_nofollow(&judged).map_err(|e| match e {
        super::safe_open::OpenError::NotRegular { kind } => OpenChecked::NotRegular { kind },
        // Opening checks no size: only an I/O error is left.
        other => OpenChecked::Check(PermissionCheck::Io {
            path: judged.clone(),
            source: match other {
                super::safe_open::OpenError::Io(source) => source,
                too_large => io::Error::other(too_large.to_string()),
            },
        }),
    })?;
    check_opened_as(&judged, &meta, subject)
        .map_err(|p| OpenChecked::Check(PermissionCheck::Refused(p)))?;
    Ok((opened, meta))
}

/// Why [`open_checked`] did not open a file.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenChecked {
    /// Refused, or not looked at (missing, unreadable, a link swapped in).
    #[error(transparent)]
    Check(PermissionCheck),
    /// Not a regular file.
    #[error("not a regular file (it is {kind})")]
    NotRegular {
        /// What it is.
        kind: &'static str,
    },
}

fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

pub(crate) use toolhost_calls::private::effective_uid;

/// The name of user `uid` in the user database, if it has one.
pub(crate) fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: all-zero bytes are a valid `passwd` (null pointers, zero ids).
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: `pwd`, `buf` and `result` are valid for writes for the lengths given;
    // getpwuid_r writes only within them and is thread-safe.
    let rc = unsafe {
        libc::getpwuid_r(
            uid,
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() || pwd.pw_name.is_null() {
        return None;
    }
    // SAFETY: on success pw_name points to a NUL-terminated string inside `buf`.
    let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) };
    Some(name.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_and_mode_decide_and_the_message_says_what_to_run() {
        let p = Path::new("/plugins/libx.so");
        assert!(judge(p, "the plugin file", Guarded::Plugin, 1000, 0o100755, 1000).is_ok());
        assert!(judge(p, "the plugin file", Guarded::Plugin, 0, 0o100755, 1000).is_ok());
        assert!(judge(p, "its directory", Guarded::Plugin, 0, 0o040700, 0).is_ok());

        let group = judge(p, "the plugin file", Guarded::Plugin, 0, 0o100775, 0)
            .expect_err("group-writable");
        let text = group.to_string();
        assert!(text.contains("writable by its group"), "{text}");
        assert!(text.contains("mode 0775"), "{text}");
        assert!(text.contains("`chmod go-w /plugins/libx.so`"), "{text}");
        assert!(!text.contains("chown"), "{text}");

        let sticky = judge(
            Path::new("/tmp"),
            "its directory",
            Guarded::Plugin,
            0,
            0o041777,
            0,
        )
        .expect_err("world-writable");
        let text = sticky.to_string();
        assert!(text.contains("writable by group and others"), "{text}");
        // Not `chmod go-w /tmp`: the file has to move.
        assert!(!text.contains("chmod"), "{text}");
        assert!(text.contains("move the file out of /tmp"), "{text}");

        let foreign =
            judge(p, "the plugin file", Guarded::Plugin, 4242, 0o100644, 0).expect_err("foreign");
        let text = foreign.to_string();
        assert!(text.contains("owned by a user other than root"), "{text}");
        assert!(text.contains("uid 4242"), "{text}");
        assert!(text.contains("`chown root /plugins/libx.so`"), "{text}");

        let odd = judge(
            Path::new("/a b/x.so"),
            "the plugin file",
            Guarded::Plugin,
            0,
            0o100666,
            0,
        )
        .expect_err("others");
        assert!(
            odd.to_string().contains("`chmod go-w '/a b/x.so'`"),
            "{odd}"
        );
    }

    #[test]
    fn a_config_files_message_does_not_offer_the_plugin_switch() {
        let plugin = judge(
            Path::new("/plugins/libx.so"),
            PLUGIN_FILE.role,
            PLUGIN_FILE.guarded,
            0,
            0o100666,
            0,
        )
        .expect_err("others");
        assert!(
            plugin.to_string().ends_with(
                " (or, on a development machine only, set [plugins] strict_permissions = false)"
            ),
            "{plugin}"
        );
        for subject in [CONFIG_FILE, PROFILE_CONFIG, PLUGIN_INDEX] {
            let p = Path::new("/etc/toolhost/config.toml");
            let refused = judge(p, subject.role, subject.guarded, 4242, 0o100666, 0)
                .expect_err("foreign and others");
            let text = refused.to_string();
            assert!(!text.contains("strict_permissions"), "{text}");
            assert!(text.starts_with(subject.role), "{text}");
            assert!(
                text.contains("`chmod go-w /etc/toolhost/config.toml` and `chown root "),
                "{text}"
            );
            let dir = judge(
                Path::new("/etc/toolhost"),
                "its directory",
                subject.guarded,
                0,
                0o040777,
                0,
            )
            .expect_err("others");
            assert!(!dir.to_string().contains("strict_permissions"), "{dir}");
        }
    }

    #[test]
    fn open_checked_refuses_a_writable_file_and_a_fifo_and_opens_a_good_links_target() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("config.toml");
        assert!(matches!(
            open_checked(&file, CONFIG_FILE),
            Err(OpenChecked::Check(PermissionCheck::Io { source, .. }))
                if source.kind() == io::ErrorKind::NotFound
        ));
        fs::write(&file, "x = 1\n").expect("write");
        fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).expect("chmod");
        let (_, meta) = open_checked(&file, CONFIG_FILE).expect("a good file opens");
        assert_eq!(meta.len(), 6);
        fs::set_permissions(&file, fs::Permissions::from_mode(0o666)).expect("chmod");
        match open_checked(&file, CONFIG_FILE) {
            Err(OpenChecked::Check(PermissionCheck::Refused(p))) => {
                assert_eq!(p.path, file);
                assert_eq!(p.guarded, Guarded::Config);
                assert!(
                    p.to_string().contains("writable by group and others"),
                    "{p}"
                );
            }
            other => panic!("a 0666 config opened: {other:?}"),
        }
        // A link to a good file is judged by its target, and the target is what opens.
        fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).expect("chmod");
        let link = dir.path().join("link.toml");
        std::os::unix::fs::symlink(&file, &link).expect("symlink");
        assert!(open_checked(&link, CONFIG_FILE).is_ok());
        // A FIFO is refused without blocking.
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().expect("utf-8")).expect("no NUL");
        // SAFETY: `c` is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(matches!(
            open_checked(&fifo, CONFIG_FILE),
            Err(OpenChecked::NotRegular { kind: "a FIFO" })
        ));
        // Not judged as a config file (its 0666 is no fault): not a regular file.
        assert!(matches!(
            open_checked(Path::new("/dev/zero"), CONFIG_FILE),
            Err(OpenChecked::NotRegular {
                kind: "a character device"
            })
        ));
    }

    #[test]
    fn root_has_a_name() {
        assert_eq!(user_name(0).as_deref(), Some("root"));
    }
}
