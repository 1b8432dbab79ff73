//! Private state on disk: folders the host keeps state in are mode 0700 and state files
//! 0600, created that way (never created open and narrowed afterwards), and existing ones
//! that are wider are tightened with a log line. Every state file of the host (tokens,
//! trust pins, session databases, profile state) goes through here.

use std::fs;
use std::io::{self, Write as _};
use std::path::Path;

#[cfg(unix)]
use std::os::unix::fs::{
    DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _,
};

/// The effective uid of this process: the user whose files and sockets it trusts.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Creates `dir` (and missing parents) with mode 0700; an existing `dir` that group or
/// others can reach is narrowed to 0700 with a log line. Parents that already exist are
/// left alone.
pub fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    builder.mode(0o700);
    builder.create(dir)?;
    tighten(dir, 0o700)
}

/// Narrows an existing file to 0600 (or a folder to 0700) if group or others have any
/// access, saying so in the log. A missing path is fine.
pub fn tighten_existing(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => tighten(path, 0o700),
        Ok(_) => tighten(path, 0o600),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(unix)]
fn tighten(path: &Path, mode: u32) -> io::Result<()> {
    let meta = fs::symlink_metadata(path)?;
    let old = meta.mode() & 0o7777;
    if old & 0o077 != 0 {
        fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
        tracing::warn!(
            path = %path.display(),
            "narrowed the mode of {} from {old:04o} to {mode:04o}: it holds private state \
             that other users of this machine could read",
            path.display()
        );
    }
    Ok(())
}

#[cfg(not(unix))]
fn tighten(_path: &Path, _mode: u32) -> io::Result<()> {
    Ok(())
}

/// Opens `path` for reading and writing, creating it with mode 0600 if it is missing; an
/// existing file that is wider is narrowed first.
pub fn open_private_file(path: &Path) -> io::Result<fs::File> {
    tighten_existing(path)?;
    let mut options = fs::OpenOptions::new();
    options.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    options.mode(0o600);
    options.open(path)
}

/// Replaces `path` with `bytes` atomically: written to a fresh 0600 file with an
/// unpredictable name in the same folder, synced, then renamed over `path`. A reader
/// sees the old contents or the new, never half a file.
pub fn write_private_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // tempfile creates its files with O_EXCL and mode 0600.
    let mut tmp = tempfile::Builder::new()
        .prefix(".toolhost-")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// The host's state directory: `$XDG_STATE_HOME/toolhost`, else
/// `~/.local/state/toolhost`; `None` when neither variable is set. Trust pins
/// (`trust.json`) and tokens (`tokens.json`) live here. Not created here: callers that
/// write into it create it with [`ensure_private_dir`] (mode 0700).
pub fn state_dir() -> Option<std::path::PathBuf> {
    let base = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| Path::new(&h).join(".local").join("state"))
        })?;
    Some(base.join("toolhost"))
}

/// Whether `path` is private: not readable, writable or searchable by group or others.
#[cfg(unix)]
pub fn is_private(path: &Path) -> io::Result<bool> {
    Ok(fs::symlink_metadata(path)?.mode() & 0o077 == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_and_folders_are_created_private_and_tightened() {
        let root = tempfile::tempdir().expect("temp dir");
        let dir = root.path().join("a").join("state");
        ensure_private_dir(&dir).expect("create");
        assert!(is_private(&dir).expect("stat"));
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod");
        ensure_private_dir(&dir).expect("tighten");
        assert!(is_private(&dir).expect("stat"));

        let file = dir.join("x.json");
        write_private_file(&file, b"{}").expect("write");
        assert!(is_private(&file).expect("stat"));
        assert_eq!(fs::read(&file).expect("read"), b"{}");
        fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).expect("chmod");
        drop(open_private_file(&file).expect("open"));
        assert!(is_private(&file).expect("stat"));
        let fresh = dir.join("new.db");
        drop(open_private_file(&fresh).expect("create"));
        assert!(is_private(&fresh).expect("stat"));
        // Nothing but the two files is left behind.
        assert_eq!(fs::read_dir(&dir).expect("list").count(), 2);
    }
}
