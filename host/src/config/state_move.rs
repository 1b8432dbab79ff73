//! Moving a profile's state from where older releases kept it (beside its config, in
//! `<profiles_dir>/<name>/state` and `outputs`) to where XDG puts state
//! (`<state_dir>/profiles/<name>/...`), once, at load (an empty folder at the new place
//! counts as none). A rename when both are on one
//! filesystem; else a copy (private: folders 0700, files 0600, links recreated, never
//! followed) into a temporary folder beside the new place, renamed into place, and only
//! then the old folder removed: an interrupted move leaves the old place whole. When
//! both places exist, the new one wins and the old one is left as it is, with a warning
//! naming both. Each move is logged once as a warning (`moved state from OLD to NEW`), so
//! it shows without `TOOLHOST_LOG`. Weak spot: FIFOs, sockets and devices in an old state folder (a worker
//! may have made them) are not copied across filesystems; they are named in the log.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

/// What [`move_state`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Moved {
    /// Nothing was in the old place.
    Nothing,
    /// Renamed (same filesystem).
    Renamed,
    /// Copied across filesystems, then the old folder removed.
    Copied,
    /// Both places exist: the new one is kept, the old one left.
    BothExist,
}

/// Why state could not be moved (the old place is then left as it was).
#[derive(Debug, thiserror::Error)]
#[error(
    "could not move the state folder {} to {}: {source}; the old folder is left as it \
     was: move it there by hand (or fix the cause and start toolhost again)",
    old.display(), new.display()
)]
pub(crate) struct StateMoveError {
    old: PathBuf,
    new: PathBuf,
    #[source]
    source: io::Error,
}

/// Moves the folder `old` to `new` (whose parent is created private), once.
pub(crate) fn move_state(old: &Path, new: &Path) -> Result<Moved, StateMoveError> {
    let fail = |source: io::Error| StateMoveError {
        old: old.to_path_buf(),
        new: new.to_path_buf(),
        source,
    };
    let meta = match fs::symlink_metadata(old) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Moved::Nothing),
        Err(e) => return Err(fail(e)),
    };
    if !meta.is_dir() {
        return Err(fail(io::Error::other(
            "it is not a folder (a link where state belonged is not followed)",
        )));
    }
    // An empty folder at the new place (made by a command that looked at the profile
    // before its old state was there) is no state: it gives way (rmdir removes nothing
    // else, and fails if something arrived in it meanwhile).
    if fs::symlink_metadata(new).is_ok_and(|m| m.is_dir())
        && fs::read_dir(new).is_ok_and(|mut entries| entries.next().is_none())
    {
        let _ = fs::remove_dir(new);
    }
    match fs::symlink_metadata(new) {
        Ok(_) => {
            tracing::warn!(
                "state of an older toolhost found in {} while {} exists too: using {} and \
                 leaving {} as it is (merge or remove it by hand)",
                old.display(),
                new.display(),
                new.display(),
                old.display()
            );
            return Ok(Moved::BothExist);
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(fail(e)),
    }
    if let Some(parent) = new.parent() {
        toolhost_calls::private::ensure_private_dir(parent).map_err(fail)?;
    }
    match fs::rename(old, new) {
        Ok(()) => {
            tracing::warn!("moved state from {} to {}", old.display(), new.display());
            return Ok(Moved::Renamed);
        }
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {}
        Err(e) => return Err(fail(e)),
    }
    // Another filesystem: copy beside the new place, rename into place, then remove.
    let parent = new.parent().unwrap_or(Path::new("."));
    let staging = tempfile::Builder::new()
        .prefix(".moving-state-")
        .tempdir_in(parent)
        .map_err(fail)?;
    let copy = staging.path().join("state");
    copy_tree(old, &copy).map_err(fail)?;
    fs::rename(&copy, new).map_err(fail)?;
    drop(staging);
    fs::remove_dir_all(old).map_err(fail)?;
    tracing::warn!(
        "moved state from {} to {} (copied: another filesystem; the old folder is removed)",
        old.display(),
        new.display()
    );
    Ok(Moved::Copied)
}

/// Copies the folder `from` to the new folder `to`: folders 0700, files 0600, links as
/// links; nothing is followed.
fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    fs::DirBuilder::new().mode(0o700).create(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_tree(&src, &dst)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(&src)?, &dst)?;
        } else if kind.is_file() {
            let mut reader = fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(&src)?;
            let mut writer = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&dst)?;
            io::copy(&mut reader, &mut writer)?;
            writer.sync_all()?;
        } else {
            tracing::warn!(
                "not copying {} (not a file, folder or link) to the new state folder",
                src.display()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_once_and_keeps_the_new_place_on_a_collision() {
        let root = tempfile::tempdir().expect("temp dir");
        let old = root.path().join("old/state");
        fs::create_dir_all(old.join("sub")).expect("old");
        fs::write(old.join("memory.json"), "{}").expect("note");
        fs::write(old.join("sub/x"), "x").expect("nested");
        std::os::unix::fs::symlink("/nonexistent", old.join("link")).expect("link");
        let new = root.path().join("new/profiles/p/state");
        assert_eq!(move_state(&old, &new).expect("move"), Moved::Renamed);
        assert!(!old.exists());
        assert_eq!(fs::read_to_string(new.join("sub/x")).expect("moved"), "x");
        assert_eq!(move_state(&old, &new).expect("again"), Moved::Nothing);

        let fresh = root.path().join("fresh");
        fs::create_dir_all(&fresh).expect("empty new place");
        fs::create_dir_all(&old).expect("old again");
        fs::write(old.join("memory.json"), "old").expect("note");
        assert_eq!(
            move_state(&old, &fresh).expect("into an empty folder"),
            Moved::Renamed
        );
        fs::create_dir_all(&old).expect("old again");
        fs::write(old.join("memory.json"), "old").expect("note");
        assert_eq!(move_state(&old, &new).expect("both"), Moved::BothExist);
        assert_eq!(
            fs::read_to_string(old.join("memory.json")).expect("kept"),
            "old"
        );
        assert_eq!(
            fs::read_to_string(new.join("memory.json")).expect("kept"),
            "{}"
        );
    }

    #[test]
    fn a_copy_is_private_and_keeps_links_as_links() {
        use std::os::unix::fs::PermissionsExt as _;
        let root = tempfile::tempdir().expect("temp dir");
        let old = root.path().join("old");
        fs::create_dir_all(old.join("d")).expect("old");
        fs::write(old.join("d/f"), "data").expect("file");
        fs::set_permissions(old.join("d/f"), fs::Permissions::from_mode(0o644)).expect("chmod");
        std::os::unix::fs::symlink("/etc/passwd", old.join("l")).expect("link");
        let to = root.path().join("copy");
        copy_tree(&old, &to).expect("copy");
        assert_eq!(fs::read_to_string(to.join("d/f")).expect("copied"), "data");
        let mode = fs::metadata(to.join("d/f"))
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(
            fs::symlink_metadata(to.join("l"))
                .expect("lstat")
                .is_symlink()
        );
    }

    #[test]
    fn a_link_in_the_old_place_is_not_followed() {
        let root = tempfile::tempdir().expect("temp dir");
        let target = root.path().join("elsewhere");
        fs::create_dir(&target).expect("dir");
        let old = root.path().join("state");
        std::os::unix::fs::symlink(&target, &old).expect("link");
        let err = move_state(&old, &root.path().join("new")).expect_err("refused");
        assert!(err.to_string().contains("not followed"), "{err}");
        assert!(target.exists() && !root.path().join("new").exists());
    }
}
