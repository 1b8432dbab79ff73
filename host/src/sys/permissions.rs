//! Strict permissions for plugin files, after OpenSSH's `StrictModes`: a plugin file, the
//! directory it is in, and for a symlink its final target and the target's directory must
//! be owned by the host's effective user or root and not writable by group or others.
//! Anyone else who can change one of them could make the host run their code.
//!
//! The loader checks the paths before it opens a file and checks the opened descriptor
//! again (`fstat`), so a file swapped in between is caught. Weak spot: only the file's own
//! directory (and the symlink target's) is checked, not every folder up to `/`; a plugin
//! directory inside a folder another user can rename things in is not noticed.
//! `[plugins] strict_permissions = false` turns the check off (development only).

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
    " (or, on a development machine only, set [plugins] strict_permissions = false)"
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
    if p.mode & 0o022 != 0 {
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

/// The decision on one path's owner and mode, for the user `euid`.
pub(crate) fn judge(
    path: &Path,
    role: &'static str,
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
    })
}

/// Checks a plugin file's path before it is opened: its directory, and the file itself,
/// or for a symlink its final target and the target's directory.
pub(crate) fn check_path(file: &Path) -> Result<(), PermissionCheck> {
    let euid = effective_uid();
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
    judge(&dir, "its directory", d.uid(), d.mode(), euid)?;
    let link = stat(file, false)?;
    if link.file_type().is_symlink() {
        let target = fs::canonicalize(file).map_err(|source| PermissionCheck::Io {
            path: file.to_path_buf(),
            source,
        })?;
        let t = stat(&target, true)?;
        judge(&target, "the symlink's target", t.uid(), t.mode(), euid)?;
        let target_dir = parent_of(&target);
        let td = stat(&target_dir, true)?;
        judge(
            &target_dir,
            "the target's directory",
            td.uid(),
            td.mode(),
            euid,
        )?;
    } else {
        judge(file, "the plugin file", link.uid(), link.mode(), euid)?;
    }
    Ok(())
}

/// Checks the opened file (by its `fstat` metadata) again: catches a swap after
/// [`check_path`].
pub(crate) fn check_opened(file: &Path, meta: &fs::Metadata) -> Result<(), PermissionProblem> {
    judge(
        file,
        "the plugin file",
        meta.uid(),
        meta.mode(),
        effective_uid(),
    )
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
        assert!(judge(p, "the plugin file", 1000, 0o100755, 1000).is_ok());
        assert!(judge(p, "the plugin file", 0, 0o100755, 1000).is_ok());
        assert!(judge(p, "its directory", 0, 0o040700, 0).is_ok());

        let group = judge(p, "the plugin file", 0, 0o100775, 0).expect_err("group-writable");
        let text = group.to_string();
        assert!(text.contains("writable by its group"), "{text}");
        assert!(text.contains("mode 0775"), "{text}");
        assert!(text.contains("`chmod go-w /plugins/libx.so`"), "{text}");
        assert!(!text.contains("chown"), "{text}");

        let sticky =
            judge(Path::new("/tmp"), "its directory", 0, 0o041777, 0).expect_err("world-writable");
        assert!(sticky.to_string().contains("writable by group and others"));

        let foreign = judge(p, "the plugin file", 4242, 0o100644, 0).expect_err("foreign");
        let text = foreign.to_string();
        assert!(text.contains("owned by a user other than root"), "{text}");
        assert!(text.contains("uid 4242"), "{text}");
        assert!(text.contains("`chown root /plugins/libx.so`"), "{text}");

        let odd =
            judge(Path::new("/a b/x.so"), "the plugin file", 0, 0o100666, 0).expect_err("others");
        assert!(
            odd.to_string().contains("`chmod go-w '/a b/x.so'`"),
            "{odd}"
        );
    }

    #[test]
    fn root_has_a_name() {
        assert_eq!(user_name(0).as_deref(), Some("root"));
    }
}
