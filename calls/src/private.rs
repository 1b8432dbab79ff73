//! Private state on disk: folders the host keeps state in are mode 0700 and state files
//! 0600, created that way (never created open and narrowed afterwards), and existing ones
//! that are wider are tightened with a log line. Every state file of the host (tokens,
//! trust pins, session databases, profile state) goes through here.
//!
//! No link is followed where state belongs: a plugin worker may write into a profile's
//! state folder, and the host may run as root, so a symbolic link planted there must not
//! make the host open, create, write or chmod a file elsewhere. A state file is opened
//! relative to its folder's descriptor with `O_NOFOLLOW` (and `O_NONBLOCK`, so a FIFO
//! cannot hold the host), checked with `fstat` (only regular files pass) and narrowed with
//! `fchmod` on that descriptor, never by path. A link (or a FIFO, device or socket) where
//! a state file or the state folder itself should be is refused with an error naming it.
//! Links in the components above a state folder (`/home` → `/usr/home`) are the machine's
//! layout and are followed.

use std::ffi::{CStr, CString, OsStr};
use std::fs;
use std::io::{self, Write as _};
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

/// The effective uid of this process: the user whose files and sockets it trusts.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The refusal of a link where state belongs.
fn link_refused(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{} is a symbolic link; toolhost never follows links in its state folders: \
             remove it (and find out who put it there)",
            path.display()
        ),
    )
}

/// The refusal of something that is not what state is kept in (`what`: "a regular file").
fn wrong_kind(path: &Path, kind: &str, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{} is {kind}, not {what}; toolhost keeps only regular files and folders in its \
             state folders: remove it",
            path.display()
        ),
    )
}

/// What kind of file a `st_mode` describes, for messages ("a FIFO", "a folder").
fn kind_of(mode: libc::mode_t) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFREG => "a regular file",
        libc::S_IFDIR => "a folder",
        libc::S_IFLNK => "a symbolic link",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFCHR => "a character device",
        libc::S_IFBLK => "a block device",
        libc::S_IFSOCK => "a socket",
        _ => "of an unknown kind",
    }
}

fn is_kind(st: &libc::stat, kind: libc::mode_t) -> bool {
    st.st_mode & libc::S_IFMT == kind
}

/// `name` as a C string, for the `*at` calls.
fn c_name(name: &OsStr, path: &Path) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} contains a NUL byte; name it without one",
                path.display()
            ),
        )
    })
}

/// `path` as a C string.
fn c_path(path: &Path) -> io::Result<CString> {
    c_name(path.as_os_str(), path)
}

/// Takes ownership of the descriptor a libc call returned, or its error.
fn owned(fd: libc::c_int) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by open/openat, is open, and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat(dir, name, flags | O_NOFOLLOW | O_CLOEXEC, mode)`.
fn open_at(
    dir: &OwnedFd,
    name: &CStr,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> io::Result<OwnedFd> {
    // SAFETY: `dir` is an open descriptor and `name` a NUL-terminated string that outlives
    // the call; `mode` is passed as the variadic mode argument openat reads with O_CREAT.
    owned(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode,
        )
    })
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`: what is at `name` itself.
fn stat_at(dir: &OwnedFd, name: &CStr) -> io::Result<libc::stat> {
    let mut st = MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `dir` is open, `name` is NUL-terminated, `st` is valid for one stat's write.
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatat succeeded, so it filled `st`.
    Ok(unsafe { st.assume_init() })
}

/// `fstat` of an open descriptor.
fn stat_fd(fd: &OwnedFd) -> io::Result<libc::stat> {
    let mut st = MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `fd` is open and `st` is valid for one stat's write.
    if unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat succeeded, so it filled `st`.
    Ok(unsafe { st.assume_init() })
}

/// Narrows the open `fd` (last `fstat`ed as `st`) to `mode` if group or others have any
/// access, by `fchmod` on the descriptor; says so in the log.
fn tighten_fd(fd: &OwnedFd, st: &libc::stat, mode: libc::mode_t, path: &Path) -> io::Result<()> {
    let old = st.st_mode & 0o7777;
    if old & 0o077 != 0 {
        // SAFETY: `fd` is open; fchmod changes the mode of that file only.
        if unsafe { libc::fchmod(fd.as_raw_fd(), mode) } != 0 {
            return Err(io::Error::last_os_error());
        }
        tracing::warn!(
            path = %path.display(),
            "narrowed the mode of {} from {old:04o} to {mode:04o}: it holds private state \
             that other users of this machine could read",
            path.display()
        );
    }
    Ok(())
}

/// Opens the folder `path` (`O_DIRECTORY | O_NOFOLLOW`): a link at its last component is
/// refused; links above it are followed.
fn open_folder(path: &Path) -> io::Result<OwnedFd> {
    let at = if path.as_os_str().is_empty() {
        Path::new(".")
    } else {
        path
    };
    let c = c_path(at)?;
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    let fd = owned(unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    });
    fd.map_err(|e| match fs::symlink_metadata(at) {
        Ok(m) if m.file_type().is_symlink() => link_refused(path),
        Ok(m) if !m.is_dir() => wrong_kind(
            path,
            kind_of(std::os::unix::fs::MetadataExt::mode(&m) as libc::mode_t),
            "a folder",
        ),
        _ => e,
    })
}

/// The folder and last component of a state file's path.
fn split(path: &Path) -> io::Result<(&Path, &OsStr)> {
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} names no file; give the state file's full path",
                path.display()
            ),
        )
    })?;
    Ok((path.parent().unwrap_or(Path::new("")), name))
}

/// What a state path may be.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Accept {
    /// Only a regular file.
    File,
    /// A regular file or a folder.
    FileOrFolder,
}

/// Opens `name` in the folder `dir` (its path is `path`) with `flags | O_NOFOLLOW |
/// O_NONBLOCK | O_NOCTTY`, then refuses by `fstat` what `accept` does not take. A link is
/// refused with a message that says so. Returns the descriptor (still `O_NONBLOCK`) and
/// its `fstat`.
fn open_state(
    dir: &OwnedFd,
    name: &CStr,
    path: &Path,
    flags: libc::c_int,
    accept: Accept,
) -> io::Result<(OwnedFd, libc::stat)> {
    let refuse = |st: &libc::stat| {
        if is_kind(st, libc::S_IFLNK) {
            Some(link_refused(path))
        } else if is_kind(st, libc::S_IFREG)
            || (accept == Accept::FileOrFolder && is_kind(st, libc::S_IFDIR))
        {
            None
        } else {
            let what = match accept {
                Accept::File => "a regular file",
                Accept::FileOrFolder => "a regular file or a folder",
            };
            Some(wrong_kind(path, kind_of(st.st_mode), what))
        }
    };
    let fd = match open_at(dir, name, flags | libc::O_NONBLOCK | libc::O_NOCTTY, 0o600) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(e),
        // ELOOP (a link), EISDIR, ENXIO (a socket), ...: say what is there if it is the
        // cause.
        Err(e) => {
            return Err(stat_at(dir, name)
                .ok()
                .and_then(|st| refuse(&st))
                .unwrap_or(e));
        }
    };
    let st = stat_fd(&fd)?;
    match refuse(&st) {
        Some(e) => Err(e),
        None => Ok((fd, st)),
    }
}

/// Clears `O_NONBLOCK` (set for the open, so a FIFO could not hold it) on a regular file.
fn set_blocking(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: `fd` is open; F_GETFL reads its status flags.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is open; F_SETFL only changes its status flags.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Creates `dir` (and missing parents) with mode 0700; an existing `dir` that group or
/// others can reach is narrowed to 0700 with a log line. Parents that already exist are
/// left alone. `dir` itself must be a folder, not a link to one: a link is refused.
pub fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    let fd = make_folder(dir, false)?;
    let st = stat_fd(&fd)?;
    tighten_fd(&fd, &st, 0o700, dir)
}

/// Opens the folder `dir`, creating it (mode 0700, by `mkdirat` in its parent) and its
/// missing parents first. With `follow` false a link at `dir` itself is refused; parents
/// are opened with `follow` true.
fn make_folder(dir: &Path, follow: bool) -> io::Result<OwnedFd> {
    let opened = if follow {
        open_folder_following(dir)
    } else {
        open_folder(dir)
    };
    let missing = match opened {
        Err(e) if e.kind() == io::ErrorKind::NotFound => e,
        other => return other,
    };
    let Ok((parent, name)) = split(dir) else {
        return Err(missing);
    };
    let parent_fd = make_folder(parent, true)?;
    let c = c_name(name, dir)?;
    // SAFETY: `parent_fd` is open and `c` is NUL-terminated.
    if unsafe { libc::mkdirat(parent_fd.as_raw_fd(), c.as_ptr(), 0o700) } != 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::AlreadyExists {
            return Err(e);
        }
    }
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    let flags = if follow {
        flags
    } else {
        flags | libc::O_NOFOLLOW
    };
    // SAFETY: `parent_fd` is open and `c` is NUL-terminated.
    owned(unsafe { libc::openat(parent_fd.as_raw_fd(), c.as_ptr(), flags) }).map_err(|e| {
        match stat_at(&parent_fd, &c) {
            Ok(st) if is_kind(&st, libc::S_IFLNK) => link_refused(dir),
            Ok(st) if !is_kind(&st, libc::S_IFDIR) => {
                wrong_kind(dir, kind_of(st.st_mode), "a folder")
            }
            _ => e,
        }
    })
}

/// Opens the folder `path`, following links (a parent of a state folder).
fn open_folder_following(path: &Path) -> io::Result<OwnedFd> {
    let at = if path.as_os_str().is_empty() {
        Path::new(".")
    } else {
        path
    };
    let c = c_path(at)?;
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    owned(unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    })
}

/// Narrows an existing file to 0600 (or a folder to 0700) if group or others have any
/// access, saying so in the log. A missing path is fine; a link (or a FIFO, device or
/// socket) is refused, and nothing is changed through it.
pub fn tighten_existing(path: &Path) -> io::Result<()> {
    tighten_existing_as(path, Accept::FileOrFolder)
}

/// Like [`tighten_existing`], but only a regular file is accepted (a folder is refused):
/// for files beside a state file, such as a database's `-wal`.
pub fn tighten_existing_file(path: &Path) -> io::Result<()> {
    tighten_existing_as(path, Accept::File)
}

fn tighten_existing_as(path: &Path, accept: Accept) -> io::Result<()> {
    let (parent, name) = split(path)?;
    let dir = match open_folder(parent) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        other => other?,
    };
    let c = c_name(name, path)?;
    let (fd, st) = match open_state(&dir, &c, path, libc::O_RDONLY, accept) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        other => other?,
    };
    let mode = if is_kind(&st, libc::S_IFDIR) {
        0o700
    } else {
        0o600
    };
    tighten_fd(&fd, &st, mode, path)
}

/// Opens `path` for reading and writing, creating it with mode 0600 if it is missing; an
/// existing file that is wider is narrowed (by `fchmod` on the opened file). A link, or
/// anything but a regular file, at `path` or at its folder is refused.
pub fn open_private_file(path: &Path) -> io::Result<fs::File> {
    let (parent, name) = split(path)?;
    let dir = open_folder(parent)?;
    let c = c_name(name, path)?;
    let (fd, st) = open_state(&dir, &c, path, libc::O_RDWR | libc::O_CREAT, Accept::File)?;
    set_blocking(&fd)?;
    tighten_fd(&fd, &st, 0o600, path)?;
    Ok(fs::File::from(fd))
}

/// Opens the regular file `path` for reading. A link at it or at its folder, a FIFO or
/// anything but a regular file is refused (never followed, never blocked on), so a file
/// planted in a folder someone else can write cannot make the reader open another one.
pub fn open_regular_file(path: &Path) -> io::Result<fs::File> {
    let (parent, name) = split(path)?;
    let dir = open_folder(parent)?;
    let c = c_name(name, path)?;
    let (fd, _) = open_state(&dir, &c, path, libc::O_RDONLY, Accept::File)?;
    set_blocking(&fd)?;
    Ok(fs::File::from(fd))
}

/// Replaces `path` with `bytes` atomically: written to a fresh 0600 file with an
/// unpredictable name in the same folder, synced, then renamed over `path`. A reader
/// sees the old contents or the new, never half a file. The folder is opened once (a link
/// at it is refused) and both steps happen relative to it; a link at `path` is replaced,
/// not followed.
pub fn write_private_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let (parent, name) = split(path)?;
    let dir = open_folder(parent)?;
    let target = c_name(name, path)?;
    let mut random = [0u8; 16];
    getrandom::fill(&mut random).map_err(|e| io::Error::other(e.to_string()))?;
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let tmp = c_name(OsStr::new(&format!(".toolhost-{hex}.tmp")), path)?;
    let fd = open_at(
        &dir,
        &tmp,
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
        0o600,
    )?;
    let mut file = fs::File::from(fd);
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .and_then(|()| {
            // SAFETY: `dir` is open and both names are NUL-terminated.
            let rc = unsafe {
                libc::renameat(
                    dir.as_raw_fd(),
                    tmp.as_ptr(),
                    dir.as_raw_fd(),
                    target.as_ptr(),
                )
            };
            if rc == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        });
    if written.is_err() {
        // SAFETY: `dir` is open and `tmp` is NUL-terminated; a failure leaves a stray
        // temporary file, nothing worse.
        unsafe { libc::unlinkat(dir.as_raw_fd(), tmp.as_ptr(), 0) };
    }
    written
}

/// Whether `path` is private: not readable, writable or searchable by group or others
/// (what the tests of every state file check).
pub fn is_private(path: &Path) -> io::Result<bool> {
    use std::os::unix::fs::MetadataExt as _;
    Ok(fs::symlink_metadata(path)?.mode() & 0o077 == 0)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt as _;
    use std::os::unix::fs::PermissionsExt as _;
    use std::path::PathBuf;
    use std::sync::mpsc;
    use std::time::Duration;

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
        fs::set_permissions(&fresh, fs::Permissions::from_mode(0o640)).expect("chmod");
        tighten_existing(&fresh).expect("tighten");
        assert!(is_private(&fresh).expect("stat"));
        tighten_existing_file(&dir.join("missing")).expect("a missing file is fine");
        // Nothing but the two files is left behind.
        assert_eq!(fs::read_dir(&dir).expect("list").count(), 2);
    }

    /// A state folder, and outside it a file (0644, "x") and a folder (0755, empty) that
    /// planted links point at.
    struct Planted {
        _root: tempfile::TempDir,
        state: PathBuf,
        file: PathBuf,
        folder: PathBuf,
    }

    impl Planted {
        fn new() -> Planted {
            let root = tempfile::tempdir().expect("temp dir");
            let state = root.path().join("state");
            fs::create_dir(&state).expect("state");
            fs::set_permissions(&state, fs::Permissions::from_mode(0o700)).expect("chmod");
            let outside = root.path().join("outside");
            fs::create_dir(&outside).expect("outside");
            let file = outside.join("victim");
            fs::write(&file, "x").expect("victim");
            fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).expect("chmod");
            let folder = outside.join("folder");
            fs::create_dir(&folder).expect("folder");
            fs::set_permissions(&folder, fs::Permissions::from_mode(0o755)).expect("chmod");
            Planted {
                _root: root,
                state,
                file,
                folder,
            }
        }

        /// `state/name`, a link to `target`.
        fn link(&self, name: &str, target: &Path) -> PathBuf {
            let link = self.state.join(name);
            std::os::unix::fs::symlink(target, &link).expect("symlink");
            link
        }

        /// The targets are as they were.
        fn untouched(&self) {
            let mode = |p: &Path| fs::metadata(p).expect("stat").mode() & 0o7777;
            assert_eq!(mode(&self.file), 0o644, "the file outside was chmodded");
            assert_eq!(fs::read(&self.file).expect("read"), b"x");
            assert_eq!(mode(&self.folder), 0o755, "the folder outside was chmodded");
            assert_eq!(
                fs::read_dir(&self.folder).expect("list").count(),
                0,
                "something was created in the folder outside"
            );
        }
    }

    fn refused_as_link(result: io::Result<()>, link: &Path) {
        let err = result.expect_err("a link must be refused");
        let text = err.to_string();
        assert!(
            text.contains(&link.display().to_string())
                && text.contains("is a symbolic link")
                && text.contains("remove it"),
            "{text}"
        );
    }

    /// A function given a state path, as a test calls it.
    type StateFn = fn(&Path) -> io::Result<()>;

    /// The functions that open a state file, each as a test sees it.
    fn file_functions() -> Vec<(&'static str, StateFn)> {
        vec![
            ("open_private_file", |p| open_private_file(p).map(drop)),
            ("tighten_existing", tighten_existing),
            ("tighten_existing_file", tighten_existing_file),
            ("ensure_private_dir", ensure_private_dir),
        ]
    }

    #[test]
    fn a_link_where_a_state_file_or_folder_belongs_is_refused_and_its_target_untouched() {
        for (name, function) in file_functions() {
            let planted = Planted::new();
            for (link_name, target) in [
                ("to-file", planted.file.clone()),
                ("to-folder", planted.folder.clone()),
            ] {
                let link = planted.link(link_name, &target);
                refused_as_link(function(&link), &link);
                assert!(fs::symlink_metadata(&link).expect("stat").is_symlink());
            }
            planted.untouched();
            eprintln!("{name}: refused");
        }
    }

    #[test]
    fn a_dangling_link_is_refused_and_nothing_is_created_at_its_target() {
        for (name, function) in file_functions() {
            let planted = Planted::new();
            let target = planted.folder.join("created-as-root");
            let link = planted.link("dangling", &target);
            refused_as_link(function(&link), &link);
            assert!(!target.exists(), "{name} created the link's target");
            planted.untouched();
        }
    }

    #[test]
    fn a_linked_state_folder_is_refused_for_the_files_in_it() {
        let planted = Planted::new();
        fs::write(planted.folder.join("tokens.json"), "x").expect("write");
        fs::set_permissions(
            planted.folder.join("tokens.json"),
            fs::Permissions::from_mode(0o644),
        )
        .expect("chmod");
        let folder = planted.link("linked", &planted.folder);
        for (_, function) in file_functions().into_iter().take(3) {
            refused_as_link(function(&folder.join("tokens.json")), &folder);
        }
        refused_as_link(write_private_file(&folder.join("new.json"), b"{}"), &folder);
        let mode = fs::metadata(planted.folder.join("tokens.json"))
            .expect("stat")
            .mode();
        assert_eq!(mode & 0o777, 0o644);
        let names: Vec<_> = fs::read_dir(&planted.folder)
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["tokens.json"]);
        assert_eq!(
            fs::metadata(&planted.folder).expect("stat").mode() & 0o777,
            0o755
        );
    }

    #[test]
    fn writing_over_a_planted_link_replaces_the_link_not_its_target() {
        let planted = Planted::new();
        let link = planted.link("trust.json", &planted.file);
        write_private_file(&link, b"{}").expect("write");
        let meta = fs::symlink_metadata(&link).expect("stat");
        assert!(meta.is_file(), "the link is replaced by a file");
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert_eq!(fs::read(&link).expect("read"), b"{}");
        planted.untouched();
        // No temporary file is left behind.
        assert_eq!(fs::read_dir(&planted.state).expect("list").count(), 1);
    }

    #[test]
    fn a_fifo_where_a_state_file_belongs_is_refused_without_blocking() {
        let planted = Planted::new();
        let fifo = planted.state.join("sessions.sqlite3-wal");
        let c = c_path(&fifo).expect("path");
        // SAFETY: `c` is a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo");
        for (name, function) in file_functions().into_iter().take(3) {
            let (tx, rx) = mpsc::channel();
            let path = fifo.clone();
            std::thread::spawn(move || tx.send(function(&path).map_err(|e| e.to_string())));
            let result = rx
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("{name} blocked on a FIFO"));
            let err = result.expect_err("a FIFO must be refused");
            assert!(
                err.contains("is a FIFO, not a regular file")
                    && err.contains("sessions.sqlite3-wal"),
                "{name}: {err}"
            );
            let mode = fs::symlink_metadata(&fifo).expect("stat").mode();
            assert_eq!(mode & 0o777, 0o644, "{name} chmodded the FIFO");
        }
    }

    #[test]
    fn a_folder_is_refused_where_only_a_file_belongs() {
        let planted = Planted::new();
        let folder = planted.state.join("sessions.sqlite3-shm");
        fs::create_dir(&folder).expect("mkdir");
        let err = tighten_existing_file(&folder).expect_err("refused");
        assert!(
            err.to_string().contains("is a folder, not a regular file"),
            "{err}"
        );
        let err = open_private_file(&folder).expect_err("refused");
        assert!(
            err.to_string().contains("is a folder, not a regular file"),
            "{err}"
        );
    }
}
