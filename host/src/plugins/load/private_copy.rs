//! The private copy a plugin is loaded from: copied from the opened file with its
//! sha256 computed on the same reads (a file that changes during the copy is refused),
//! into a per-process folder of the temporary directory, whose leftovers from dead
//! processes are swept at start-up.

use std::fs;
use std::io::{self, Read};
use std::path::Path;

use sha2::Digest as _;

use crate::plugins::load::error::LoadErrorKind;

/// Copies the opened `src` (its `fstat` was `before`) to `copy`, at most `limit` bytes,
/// hashing what it copies and showing every chunk to `observe`, and checks that the file
/// did not change while it was read (a writer still at work).
pub(super) fn copy_and_hash(
    src: &fs::File,
    before: &fs::Metadata,
    copy: &Path,
    limit: u64,
    observe: impl FnMut(&[u8]),
) -> Result<(String, u64), LoadErrorKind> {
    let io_err = |source| LoadErrorKind::Io {
        action: "copy the file for loading",
        source,
    };
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let dest = options.open(copy).map_err(io_err)?;
    let (sha256, size) =
        hash_copy(src.take(limit.saturating_add(1)), dest, observe).map_err(io_err)?;
    check_unchanged(src, before, size, limit)?;
    Ok((sha256, size))
}

/// After reading `size` bytes of `src`: refuses a file that grew past `limit` or changed
/// since its `fstat` `before`.
pub(super) fn check_unchanged(
    src: &fs::File,
    before: &fs::Metadata,
    size: u64,
    limit: u64,
) -> Result<(), LoadErrorKind> {
    if size > limit {
        return Err(LoadErrorKind::TooLarge { size, limit });
    }
    let after = src.metadata().map_err(|source| LoadErrorKind::Io {
        action: "look at the file after reading it",
        source,
    })?;
    if same_version(before, &after) && size == after.len() {
        Ok(())
    } else {
        Err(LoadErrorKind::ChangedWhileLoading)
    }
}

/// Copies everything `reader` yields to `writer`, showing each chunk to `observe`,
/// returning its sha256 (hex) and size.
pub(super) fn hash_copy(
    mut reader: impl Read,
    mut writer: impl io::Write,
    mut observe: impl FnMut(&[u8]),
) -> io::Result<(String, u64)> {
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut size = 0u64;
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            return Ok((hex(&sha2::Digest::finalize(hasher)), size));
        }
        sha2::Digest::update(&mut hasher, &buf[..n]);
        observe(&buf[..n]);
        writer.write_all(&buf[..n])?;
        size += n as u64;
    }
}

/// Whether two looks at a file saw the same contents (size, mtime and ctime).
fn same_version(a: &fs::Metadata, b: &fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        a.len() == b.len()
            && a.mtime() == b.mtime()
            && a.mtime_nsec() == b.mtime_nsec()
            && a.ctime() == b.ctime()
            && a.ctime_nsec() == b.ctime_nsec()
    }
    #[cfg(not(unix))]
    {
        a.len() == b.len() && a.modified().ok() == b.modified().ok()
    }
}

/// The sha256 of everything `reader` yields, as lowercase hex.
pub(crate) fn sha256_hex(reader: impl Read) -> io::Result<String> {
    hash_copy(reader, io::sink(), |_| ()).map(|(hex, _)| hex)
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// Removes what dead loaders left in `base` (the temporary directory): a folder is
/// removed only if its name is exactly `toolhost-<pid>-<hex>` as [`PluginLoader::new`]
/// makes them, it is a real directory (looked at with `lstat`: a symlink is never
/// followed or removed), owned by this process's effective uid, and no process `<pid>`
/// exists (`/proc/<pid>`; without a readable `/proc` nothing is swept). Inside it only
/// regular files and symlinks are unlinked (never followed); a folder holding anything
/// else is left as it is. Failures are logged and ignored: a sweep never stops a start.
///
/// Weak spot: a process in another PID namespace sharing this temporary directory looks
/// dead; its folder (holding nothing between loads) would be removed.
pub(super) fn sweep_dead_private_dirs(base: &Path) -> usize {
    let own_pid = std::process::id();
    if fs::symlink_metadata("/proc/self").is_err() {
        return 0;
    }
    let Ok(entries) = fs::read_dir(base) else {
        return 0;
    };
    let uid = toolhost_calls::private::effective_uid();
    let mut swept = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(private_dir_pid) else {
            continue;
        };
        if pid == own_pid || Path::new("/proc").join(pid.to_string()).exists() {
            continue;
        }
        let dir = entry.path();
        let Ok(meta) = fs::symlink_metadata(&dir) else {
            continue;
        };
        #[cfg(unix)]
        let ours = {
            use std::os::unix::fs::MetadataExt;
            meta.uid() == uid
        };
        #[cfg(not(unix))]
        let ours = false;
        if !meta.file_type().is_dir() || !ours {
            continue;
        }
        match remove_private_dir(&dir) {
            // Another host starting at the same time swept it first.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Ok(()) => {
                tracing::info!(dir = %dir.display(), "removed the private copy folder of a dead toolhost process");
                swept += 1;
            }
            Err(e) => tracing::warn!(
                dir = %dir.display(),
                "could not remove the private copy folder of a dead toolhost process: {e}; \
                 remove it by hand"
            ),
        }
    }
    swept
}

/// The pid in a private directory's name, if the name is exactly `toolhost-<pid>-<hex>`.
fn private_dir_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("toolhost-")?;
    let (pid, tag) = rest.split_once('-')?;
    let digits = |s: &str, radix: u32| !s.is_empty() && s.chars().all(|c| c.is_digit(radix));
    if !digits(pid, 10) || !digits(tag, 16) || pid.starts_with('0') {
        return None;
    }
    pid.parse().ok()
}

/// Unlinks the regular files and symlinks in `dir` (never following one), then removes
/// `dir`, which fails if anything else was in it.
fn remove_private_dir(dir: &Path) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_file() || kind.is_symlink() {
            match fs::remove_file(entry.path()) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
    }
    fs::remove_dir(dir)
}

pub(super) fn create_private_dir(dir: &Path) -> io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_dir_names_are_matched_exactly() {
        assert_eq!(private_dir_pid("toolhost-123-1a2b0"), Some(123));
        for other in [
            "toolhost-123",
            "toolhost--1a",
            "toolhost-0123-1a",
            "toolhost-12a-1a",
            "toolhost-123-xyz",
            "toolhost-123-1a-2",
            "toolhost-123-",
            "xtoolhost-123-1a",
            "toolhost-99999999999-1a",
        ] {
            assert_eq!(private_dir_pid(other), None, "{other}");
        }
    }

    #[test]
    fn the_sweep_removes_only_dead_processes_own_folders_and_follows_no_link() {
        let base = tempfile::tempdir().expect("temp dir");
        let keep = tempfile::tempdir().expect("temp dir");
        let kept_file = keep.path().join("precious.so");
        fs::write(&kept_file, b"x").expect("write");
        // No such process: a pid above Linux's largest.
        let dead = base.path().join("toolhost-999999999-1a0");
        create_private_dir(&dead).expect("mkdir");
        fs::write(dead.join("plugin-0.so"), b"copy").expect("write");
        std::os::unix::fs::symlink(keep.path(), dead.join("link")).expect("symlink");
        // A link with a dead pid's name, to a folder that must survive.
        let link = base.path().join("toolhost-999999998-1a0");
        std::os::unix::fs::symlink(keep.path(), &link).expect("symlink");
        // A live process (this one) and a name that is not ours.
        let live = base
            .path()
            .join(format!("toolhost-{}-1a0", std::process::id()));
        create_private_dir(&live).expect("mkdir");
        let other = base.path().join("toolhost-999999999-zz");
        create_private_dir(&other).expect("mkdir");
        // A dead process's folder holding a folder is left alone.
        let nested = base.path().join("toolhost-999999997-1");
        fs::create_dir_all(nested.join("inner")).expect("mkdir");

        assert_eq!(sweep_dead_private_dirs(base.path()), 1);
        assert!(!dead.exists());
        assert!(fs::symlink_metadata(&link).is_ok(), "the link was removed");
        assert!(kept_file.exists(), "a link was followed");
        assert!(live.exists() && other.exists() && nested.exists());
    }
}
