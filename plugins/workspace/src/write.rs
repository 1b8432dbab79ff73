//! `write_file`: creates, replaces or appends to a file beneath a workspace root, and the
//! safe writing `edit_file` shares: every open goes through the root's directory handle
//! (cap-std), so no `..`, absolute path or symbolic link leads outside the roots.
//!
//! Replacing goes through a temporary file created exclusively (O_EXCL, an unpredictable
//! name) in the target's folder, given the old file's mode (and owner and group where
//! the host may set them), synced, then renamed over the target: a reader never sees
//! half a file. A symbolic link at the target is refused unless `follow_symlinks` (then
//! the file it points to is written, and only if that is beneath a root); `create` never
//! follows a link and `append` opens with O_NOFOLLOW. Ported from the `utils` plugin's
//! `write_file`, which wrote anywhere the host's user could.
//!
//! Hard links: a rename replaces the name only, so `overwrite` (and `edit_file`) leave
//! the file's other names, which may be outside the workspace, with the old content.
//! `append` is the one write into an existing file in place, and it refuses a file with
//! more than one link (checked on the opened file, before writing). What a write leaves
//! is put on record (see `reads`): every line of a file written whole, the appended lines
//! of an append, so `edit_file` takes anchors of what the model wrote.

use std::ffi::OsString;
use std::io::{self, Read as _, Seek as _, Write};
use std::path::{Component, Path, PathBuf};

use cap_std::fs::{Dir, Metadata, MetadataExt as _, OpenOptions, OpenOptionsExt as _};
use schemars::JsonSchema;
use serde::Deserialize;
use toolhost_plugin_api::{ToolContext, ToolError, tool};

use crate::reads::{self, MAX_EDIT_BYTES, Reads, Record};
use crate::roots::{Resolved, Workspace, describe_io};

/// How `write_file` treats an existing file.
#[derive(Deserialize, JsonSchema, Clone, Copy, Default, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum WriteMode {
    /// Fail if the file exists (a symbolic link there counts as existing).
    #[default]
    Create,
    /// Replace the file's content atomically, keeping its mode (and owner where allowed).
    Overwrite,
    /// Add to the end of the file, creating it if needed.
    Append,
}

/// Arguments of `write_file`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileArgs {
    /// The file to write: relative to the first workspace root, or absolute beneath one
    /// of the roots. `..` is not allowed.
    path: String,
    /// The text to write (the whole file for "create" and "overwrite").
    content: String,
    /// "create" (default: fail if the file exists), "overwrite" or "append".
    #[serde(default)]
    mode: WriteMode,
    /// Create missing parent folders (beneath the workspace root). Default false: the
    /// parent folder must exist.
    #[serde(default)]
    create_dirs: bool,
    /// If `path` is a symbolic link, write the file it points to (keeping the link); the
    /// link must point inside the workspace. Default false: a link at `path` is refused.
    #[serde(default)]
    follow_symlinks: bool,
}

/// Writes text to a file in the workspace (paths relative to the first workspace root,
/// or absolute beneath a root; nothing outside the roots can be written). mode "create"
/// (the default) refuses to touch an existing file, "overwrite" replaces the whole
/// content atomically (keeping the file's permissions), "append" adds to its end. The
/// parent folder must exist unless create_dirs is true. A symbolic link at the path is
/// refused unless follow_symlinks is true (the link must point inside the workspace).
/// Writes replace this name only, never writing through a hard link: append refuses a
/// file with other links (overwrite it instead). To change part of an existing file,
/// prefer edit_file. Returns what was written where (for overwrite: how many lines
/// changed).
#[tool(risk = write, workspace)]
pub async fn write_file(
    ctx: &ToolContext<'_>,
    #[args] args: WriteFileArgs,
) -> Result<String, ToolError> {
    let workspace = Workspace::of(ctx).await?;
    let reads = Reads::of(ctx).await;
    ctx.blocking(move |_| write(&workspace, &reads, &args))
        .await
        .map_err(ToolError::failed)?
}

fn write(workspace: &Workspace, reads: &Reads, args: &WriteFileArgs) -> Result<String, ToolError> {
    let asked = workspace.resolve(&args.path)?;
    let asked_shown = asked.shown();
    let (target, through) = if args.follow_symlinks {
        follow_links(workspace, asked, args.create_dirs)?
    } else {
        (asked, None)
    };
    let place = Place::open(target, args.create_dirs)?;
    let shown = match &through {
        Some(link) => format!("{} (through the link {link})", place.shown()),
        None => place.shown(),
    };
    let existing = place.existing()?;
    if let Some(meta) = &existing
        && meta.file_type().is_symlink()
    {
        return Err(place.link_refusal("write_file", "pass \"follow_symlinks\": true to write the file it points to (it must be inside the workspace), or choose another path"));
    }
    let bytes = args.content.len();
    let fallback = place.resolved.root.path.join(&place.resolved.rel);
    // A file written whole is on record whole (if it is small enough to edit).
    let record_whole = |key: &Path| {
        if bytes as u64 <= MAX_EDIT_BYTES {
            let record = Record::all_shown(reads::line_hashes(args.content.as_bytes()));
            record_note(reads.save(key, &record))
        } else {
            String::new()
        }
    };
    match args.mode {
        WriteMode::Create => {
            if existing.is_some() {
                return Err(ToolError::failed(format!(
                    "{asked_shown} already exists; use mode \"overwrite\" to replace it, \
                     \"append\" to add to it, or edit_file to change part of it"
                )));
            }
            let mut options = OpenOptions::new();
            options.write(true).create_new(true).mode(0o666);
            let mut file = place
                .dir
                .open_with(&place.name, &options)
                .map_err(|e| write_error("create", &shown, &e))?;
            file.write_all(args.content.as_bytes())
                .map_err(|e| write_error("write", &shown, &e))?;
            let key = reads::key_of(&file, fallback);
            let note = record_whole(&key);
            Ok(format!(
                "created {shown} ({bytes} bytes, {} lines){note}",
                line_count(&args.content)
            ))
        }
        WriteMode::Overwrite => {
            let before = existing
                .as_ref()
                .filter(|m| m.is_file() && m.len() <= DIFF_LIMIT)
                .and_then(|_| place.dir.read_to_string(&place.name).ok());
            replace(&place, args.content.as_bytes(), None)
                .map_err(|e| write_error("overwrite", &shown, &e))?;
            let key = reads::key_in(&place.dir, &place.name, fallback);
            let mut note = record_whole(&key);
            if let Some(meta) = existing.as_ref().filter(|m| m.is_file() && m.nlink() > 1) {
                note.push_str(&format!(
                    "; it had {} hard links: this name has the new content, the other links \
                     keep the old",
                    meta.nlink()
                ));
            }
            let summary = match (&existing, before) {
                (None, _) => "; it did not exist, so it was created".to_owned(),
                (Some(_), Some(before)) => {
                    let (added, removed) = changed_lines(&before, &args.content);
                    format!("; was {} bytes; +{added} -{removed} lines", before.len())
                }
                (Some(meta), None) => format!("; was {} bytes", meta.len()),
            };
            Ok(format!("overwrote {shown} ({bytes} bytes{summary}){note}"))
        }
        WriteMode::Append => {
            refuse_special(existing.as_ref()).map_err(|e| write_error("append to", &shown, &e))?;
            let mut options = OpenOptions::new();
            options
                .read(true)
                .append(true)
                .create(true)
                .mode(0o666)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
            // Readable too, to put the result on record; a write-only file is appended to
            // all the same.
            let (mut file, readable) = match place.dir.open_with(&place.name, &options) {
                Ok(file) => (file, true),
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                    options.read(false);
                    let file = place
                        .dir
                        .open_with(&place.name, &options)
                        .map_err(|e| write_error("open", &shown, &e))?;
                    (file, false)
                }
                Err(e) => return Err(write_error("open", &shown, &e)),
            };
            // The file opened, not the name looked at before: a write in place goes into
            // every name of the file.
            let opened = file
                .metadata()
                .map_err(|e| write_error("inspect", &shown, &e))?;
            refuse_special(Some(&opened)).map_err(|e| write_error("append to", &shown, &e))?;
            if opened.nlink() > 1 {
                return Err(ToolError::failed(format!(
                    "write_file refused: nothing was written. {shown} has {} hard links (other \
                     names for the same file, which may be outside the workspace), and \
                     appending writes into the file itself, so every name would change. Write \
                     the whole file with mode \"overwrite\" (it replaces this name only and \
                     leaves the other links untouched), or remove the extra link first",
                    opened.nlink()
                )));
            }
            file.write_all(args.content.as_bytes())
                .map_err(|e| write_error("append to", &shown, &e))?;
            let note = if bytes == 0 || !readable {
                String::new()
            } else {
                let key = reads::key_of(&file, fallback);
                record_note(record_append(reads, &key, file, bytes as u64))
            };
            Ok(format!("appended {bytes} bytes to {shown}{note}"))
        }
    }
}

/// Puts the file after an append on record: lines shown before stay shown where they are
/// unchanged, and the lines the appended bytes (the last `appended` of the file, as far
/// as this process knows) are on are shown. Files too large to edit are not recorded.
fn record_append(
    reads: &Reads,
    key: &Path,
    file: cap_std::fs::File,
    appended: u64,
) -> Result<(), reads::RecordError> {
    let io_error = |source| reads::RecordError::Io {
        action: "read back",
        path: key.to_path_buf(),
        source,
    };
    let mut file = file.into_std();
    let end = file.metadata().map_err(io_error)?.len();
    if end > MAX_EDIT_BYTES {
        return Ok(());
    }
    let mut text = Vec::new();
    file.rewind().map_err(io_error)?;
    file.take(end).read_to_end(&mut text).map_err(io_error)?;
    let start = usize::try_from(end.saturating_sub(appended))
        .unwrap_or(usize::MAX)
        .min(text.len());
    let first = text[..start].iter().filter(|&&b| b == b'\n').count() + 1;
    let old = reads.load(key).ok().flatten();
    let mut record = Record::carried(old.as_ref(), reads::line_hashes(&text));
    record.show(first, usize::MAX);
    reads.save(key, &record)
}

/// The words a result ends with when what was written could not be put on record.
fn record_note(saved: Result<(), reads::RecordError>) -> String {
    match saved {
        Ok(()) => String::new(),
        Err(e) => format!(
            "; note: not put on record ({e}), so edit_file takes anchors of it only after a \
             read_file"
        ),
    }
}

/// Old files up to this size are read for the overwrite summary.
const DIFF_LIMIT: u64 = 4 << 20;

fn line_count(text: &str) -> usize {
    text.lines().count()
}

/// Lines added and removed between two texts.
pub(crate) fn changed_lines(before: &str, after: &str) -> (usize, usize) {
    let diff = similar::TextDiff::from_lines(before, after);
    let (mut added, mut removed) = (0, 0);
    for change in diff.iter_all_changes() {
        match change.tag() {
            similar::ChangeTag::Insert => added += 1,
            similar::ChangeTag::Delete => removed += 1,
            similar::ChangeTag::Equal => {}
        }
    }
    (added, removed)
}

/// Symbolic links followed at most, as the kernel does.
const MAX_LINKS: usize = 40;

/// With `follow_symlinks`: the path the chain of links at `start` ends at (which may not
/// exist yet) and how the link was shown; every hop must stay inside the workspace.
fn follow_links<'a>(
    workspace: &'a Workspace,
    start: Resolved<'a>,
    create_dirs: bool,
) -> Result<(Resolved<'a>, Option<String>), ToolError> {
    let first_shown = start.shown();
    let mut current = start;
    for hop in 0..MAX_LINKS {
        let place = Place::open(current, create_dirs && hop == 0)?;
        let is_link = place
            .existing()?
            .is_some_and(|m| m.file_type().is_symlink());
        if !is_link {
            let through = (hop > 0).then_some(first_shown);
            return Ok((place.resolved, through));
        }
        let points_to = place
            .dir
            .read_link_contents(&place.name)
            .map_err(|e| write_error("read the link", &place.shown(), &e))?;
        let absolute = if points_to.is_absolute() {
            points_to.clone()
        } else {
            // Relative to the link's real folder (opened through the root, so real).
            let parent = place.resolved.with_rel(parent_of(&place.resolved.rel));
            parent.real_dir()?.join(&points_to)
        };
        let outside = || {
            ToolError::failed(format!(
                "{} is a symbolic link to {}, which is outside the workspace; write_file \
                 only writes beneath the workspace roots ({})",
                place.shown(),
                points_to.display(),
                workspace.roots_list()
            ))
        };
        let normal = normalize(&absolute).ok_or_else(outside)?;
        let text = normal.to_str().ok_or_else(outside)?;
        current = workspace.resolve(text).map_err(|_| outside())?;
    }
    Err(ToolError::failed(format!(
        "{first_shown} is a chain of more than {MAX_LINKS} symbolic links (a loop?); choose \
         another path"
    )))
}

/// `path` without `.` and with each `..` taking away the component before it; `None` if a
/// `..` would go above the file system's root.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                if !out.pop() || out.as_os_str().is_empty() {
                    return None;
                }
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    Some(out)
}

fn parent_of(rel: &Path) -> PathBuf {
    rel.parent().map(Path::to_path_buf).unwrap_or_default()
}

/// A file to write: the folder holding it, opened beneath its root, and its name there.
pub(crate) struct Place<'a> {
    /// The file as resolved.
    pub(crate) resolved: Resolved<'a>,
    /// Its folder.
    pub(crate) dir: Dir,
    /// Its name in the folder (one component).
    pub(crate) name: OsString,
}

impl<'a> Place<'a> {
    /// Opens the folder of `resolved` (creating it and its parents first if `create_dirs`).
    pub(crate) fn open(resolved: Resolved<'a>, create_dirs: bool) -> Result<Place<'a>, ToolError> {
        let Some(name) = resolved.rel.file_name().map(OsString::from) else {
            return Err(ToolError::failed(format!(
                "{} is a workspace root folder, not a file; name a file beneath it",
                resolved.shown()
            )));
        };
        let parent_rel = parent_of(&resolved.rel);
        let parent_shown = resolved.with_rel(parent_rel.clone()).shown();
        let dir = if parent_rel.as_os_str().is_empty() {
            resolved.root.dir.try_clone()
        } else {
            if create_dirs {
                // The deepest folder on the way that exists is checked before anything is
                // made in it: a link beneath the root may lead into a protected folder.
                let mut existing = parent_rel.clone();
                while !existing.as_os_str().is_empty() {
                    if let Ok(dir) = resolved.root.dir.open_dir(&existing) {
                        resolved.check_opened(&dir)?;
                        break;
                    }
                    existing.pop();
                }
                resolved
                    .root
                    .dir
                    .create_dir_all(&parent_rel)
                    .map_err(|e| write_error("create the folder", &parent_shown, &e))?;
            }
            resolved.root.dir.open_dir(&parent_rel)
        };
        let dir = dir.map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                ToolError::failed(format!(
                    "the folder {parent_shown} does not exist; pass \"create_dirs\": true to \
                     create it, or check the path"
                ))
            } else {
                write_error("open the folder", &parent_shown, &e)
            }
        })?;
        resolved.check_opened(&dir)?;
        Ok(Place {
            resolved,
            dir,
            name,
        })
    }

    /// The path as the model should see it.
    pub(crate) fn shown(&self) -> String {
        self.resolved.shown()
    }

    /// What is at the path now, not following a link there (`None`: nothing).
    pub(crate) fn existing(&self) -> Result<Option<Metadata>, ToolError> {
        match self.dir.symlink_metadata(&self.name) {
            Ok(meta) => Ok(Some(meta)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(write_error("inspect", &self.shown(), &e)),
        }
    }

    /// The refusal of a symbolic link at the path, naming where it points; `what_to_do`
    /// ends the message.
    pub(crate) fn link_refusal(&self, tool: &str, what_to_do: &str) -> ToolError {
        let target = self
            .dir
            .read_link_contents(&self.name)
            .map(|t| t.display().to_string())
            .unwrap_or_else(|_| "somewhere unreadable".to_owned());
        ToolError::failed(format!(
            "{} is a symbolic link (to {target}), and {tool} does not write through links: \
             {what_to_do}",
            self.shown()
        ))
    }
}

/// An I/O error while doing `action` on `shown`, with a hint where one helps.
pub(crate) fn write_error(action: &str, shown: &str, e: &io::Error) -> ToolError {
    let words = describe_io(shown, e);
    let hint = match e.kind() {
        io::ErrorKind::AlreadyExists => " (use mode \"overwrite\" or \"append\")",
        _ if e.raw_os_error() == Some(libc::ELOOP) => {
            " (it is a symbolic link: pass \"follow_symlinks\": true to write through it)"
        }
        _ => "",
    };
    ToolError::failed(format!("could not {action} {shown}: {words}{hint}"))
}

/// Only regular files are written: a directory, FIFO (which would block the write until
/// someone reads it), socket or device at the path is refused.
fn refuse_special(existing: Option<&Metadata>) -> io::Result<()> {
    match existing {
        Some(meta) if meta.file_type().is_symlink() => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "it became a symbolic link while being written; try again",
        )),
        Some(meta) if !meta.is_file() => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "it is not a regular file (a directory, FIFO, socket or device)",
        )),
        _ => Ok(()),
    }
}

/// Replaces the file at `place` with `content`: a temporary file created exclusively in
/// the same folder, given the old file's mode (and owner and group where allowed),
/// synced, then renamed over it. With `expect`, the file must still be the one described
/// (same inode, size and modification time) just before the rename, so a change made
/// meanwhile by someone else is not silently overwritten.
pub(crate) fn replace(
    place: &Place<'_>,
    content: &[u8],
    expect: Option<&Metadata>,
) -> io::Result<()> {
    let existing = match place.dir.symlink_metadata(&place.name) {
        Ok(meta) => Some(meta),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    refuse_special(existing.as_ref())?;
    let (tmp_name, file) = create_temp(&place.dir, &place.name)?;
    let written = (|| {
        let mut file = file.into_std();
        file.write_all(content)?;
        if let Some(meta) = &existing {
            keep_owner_and_mode(&file, meta)?;
        }
        file.sync_all()?;
        if let Some(expected) = expect {
            let now = place.dir.symlink_metadata(&place.name)?;
            if !same_file_state(expected, &now) {
                return Err(io::Error::other(
                    "it changed on disk while the edit was being made; read it again and redo \
                     the edit",
                ));
            }
        }
        place.dir.rename(&tmp_name, &place.dir, &place.name)
    })();
    if written.is_err() {
        let _ = place.dir.remove_file(&tmp_name);
    }
    written
}

/// Whether two looks at a file see the same version of it.
fn same_file_state(a: &Metadata, b: &Metadata) -> bool {
    a.ino() == b.ino()
        && a.dev() == b.dev()
        && a.len() == b.len()
        && a.mtime() == b.mtime()
        && a.mtime_nsec() == b.mtime_nsec()
}

/// A new temporary file beside `name`: `.NAME.RANDOM.toolhost-tmp`, created with O_EXCL
/// (mode 0666 less the umask).
fn create_temp(dir: &Dir, name: &OsString) -> io::Result<(OsString, cap_std::fs::File)> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true).mode(0o666);
    let mut last = None;
    for _ in 0..16 {
        let mut tmp = OsString::from(".");
        tmp.push(name);
        tmp.push(format!(".{:016x}.toolhost-tmp", random_u64()));
        match dir.open_with(&tmp, &options) {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free temporary name")))
}

/// 64 unpredictable bits, for temporary names: the standard library's randomly keyed
/// hasher (seeded from the operating system's random source) over the clock and a counter.
pub(crate) fn random_u64() -> u64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(nanos);
    hasher.finish()
}

/// Gives the new file the old one's owner and group (where the host may: as root, or the
/// group if it is one of the host's) and then its mode. Set-id bits are kept only when the
/// owner and group both came across.
fn keep_owner_and_mode(file: &std::fs::File, old: &Metadata) -> io::Result<()> {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let now = file.metadata()?;
    let mut same_ids = now.uid() == old.uid() && now.gid() == old.gid();
    if !same_ids {
        let tried = std::os::unix::fs::fchown(file, Some(old.uid()), Some(old.gid()))
            .or_else(|_| std::os::unix::fs::fchown(file, None, Some(old.gid())));
        match tried {
            Ok(()) => {
                let after = file.metadata()?;
                same_ids = after.uid() == old.uid() && after.gid() == old.gid();
            }
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {}
            Err(e) => return Err(e),
        }
    }
    let mut mode = old.mode() & 0o7777;
    if !same_ids {
        mode &= !0o6000;
    }
    file.set_permissions(std::fs::Permissions::from_mode(mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_takes_dotdot_away_and_refuses_going_above_the_root() {
        assert_eq!(
            normalize(Path::new("/a/b/../c/./d")),
            Some(PathBuf::from("/a/c/d"))
        );
        assert_eq!(normalize(Path::new("/a/..")), Some(PathBuf::from("/")));
        assert_eq!(normalize(Path::new("/..")), None);
    }

    #[test]
    fn changed_lines_counts_added_and_removed_lines() {
        assert_eq!(changed_lines("a\nb\nc\n", "a\nB\nc\nd\n"), (2, 1));
        assert_eq!(changed_lines("same\n", "same\n"), (0, 0));
    }

    #[test]
    fn random_names_differ() {
        assert_ne!(random_u64(), random_u64());
    }
}
