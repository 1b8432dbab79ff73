//! Read records: what a file was the last time a workspace tool showed its lines with
//! anchors, so `edit_file` can prove that an anchored edit replaces lines the model saw,
//! unchanged and at the same numbers.
//!
//! A record holds a 64-bit hash of every line of the whole file (FNV-1a: it detects
//! changes, it does not resist someone crafting a collision, who could as well write the
//! file) and, per line, whether it was *shown*: with its anchor by `read_file`,
//! `batch_read` or an answer of `edit_file` (a refusal's current lines, the new anchors
//! after an edit), or written whole by `write_file`. When a file is recorded again, the
//! lines it shows become shown, and lines shown before stay shown only where they are
//! unchanged at the same numbers (the longest common prefix, and the common suffix when
//! the line count is the same); everything else is not. Only files up to
//! [`MAX_EDIT_BYTES`] are recorded, since larger ones cannot be edited.
//!
//! Records are kept per profile and real path (the kernel's name of the open file, so a
//! path through a linked folder finds the same record), one file each in
//! `workspace-reads/` of the profile's state folder, so a read in one process (`toolhost
//! call read_file`, a stateless MCP client) counts for an edit in another. Each is
//! `HASH.rec` (a hash of the path; the path is inside too and checked), written 0600 by
//! an exclusive temporary file and a rename, read with `O_NOFOLLOW`, never through a link
//! or anything but a regular file; the folder is opened without following a link. At most
//! [`MAX_RECORDS`] records and [`MAX_FOLDER_BYTES`] are kept, the least recently written
//! removed first. On a host that gives no state folder the records live in this process's
//! memory (per profile, as many), so reads and edits must come through the same process.
//! Weak spot: records are per profile, not per conversation: two agents of one profile
//! share what was read.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{self, Read as _, Write as _};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use cap_std::ambient_authority;
use cap_std::fs::{Dir, DirBuilder, DirBuilderExt as _, OpenOptions, OpenOptionsExt as _};
use toolhost_plugin_api::ToolContext;

use crate::write::random_u64;

/// Largest file `edit_file` edits and a read records (`edit_file` holds the file, the
/// edited text and, for the syntax check, two syntax trees in memory).
pub(crate) const MAX_EDIT_BYTES: u64 = 8 << 20;
/// Records kept at most (per profile).
pub(crate) const MAX_RECORDS: usize = 256;
/// Bytes of records kept at most (per profile): a record costs about 8 bytes a line.
pub(crate) const MAX_FOLDER_BYTES: u64 = 64 << 20;
/// The largest record read back: the header, a path, a hash for every line of the largest
/// file recorded, and shown ranges at their most scattered.
const MAX_RECORD_BYTES: u64 = 48 + 4096 + 8 * (MAX_EDIT_BYTES + 1) + 16 * (MAX_EDIT_BYTES / 2 + 1);
/// The folder in the profile's state folder.
const FOLDER: &str = "workspace-reads";
/// The first bytes of a record file (format version 1).
const MAGIC: &[u8; 16] = b"toolhost-read 1\n";
/// Leftover temporary files (a crash between create and rename) older than this go.
const STALE_TEMP_SECS: u64 = 3600;

/// Why a record could not be read or written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RecordError {
    /// An I/O error.
    #[error("could not {action} {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// On what.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// A link, FIFO or other non-file where a record or the folder belongs.
    #[error(
        "{} is a symbolic link or not a regular {what}; toolhost never follows links in its \
         state folders: remove it",
        path.display()
    )]
    NotPlain {
        /// Where.
        path: PathBuf,
        /// "file" or "folder".
        what: &'static str,
    },
    /// A record that does not decode.
    #[error("the read record {} is damaged ({why}); it is replaced at the next read", path.display())]
    Damaged {
        /// Where.
        path: PathBuf,
        /// What is wrong.
        why: &'static str,
    },
}

/// The 64-bit hash of one line's content (without its line break): FNV-1a.
pub(crate) fn hash_line(line: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in line {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The content of one line as read from a file (`line` may end with `\n`): without the
/// `\n` and a `\r` just before it, as `edit_file` splits lines.
pub(crate) fn line_content(line: &[u8]) -> &[u8] {
    match line.strip_suffix(b"\n") {
        Some(rest) => rest.strip_suffix(b"\r").unwrap_or(rest),
        None => line,
    }
}

/// The hashes of every line of `text`, split as `read_file` and `edit_file` number lines
/// (a final line break ends the last line rather than starting an empty one).
pub(crate) fn line_hashes(text: &[u8]) -> Vec<u64> {
    text.split_inclusive(|&b| b == b'\n')
        .map(|line| hash_line(line_content(line)))
        .collect()
}

/// What a file was when it was last recorded, and which of its lines were shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    /// The hash of every line.
    pub(crate) hashes: Vec<u64>,
    /// Per line: shown with its anchor (or written whole) and unchanged since.
    pub(crate) shown: Vec<bool>,
}

/// How a record and the file now line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Common {
    /// Lines in the record.
    pub(crate) read: usize,
    /// Lines in the file now.
    pub(crate) now: usize,
    /// The first `prefix` lines are the same in both.
    pub(crate) prefix: usize,
    /// The last `suffix` lines are the same in both (not overlapping the prefix).
    pub(crate) suffix: usize,
}

impl Common {
    /// The lines of the file now (from 1) that differ from the record: `first..=last`,
    /// empty (`last < first`) when lines were only removed there.
    pub(crate) fn changed_now(&self) -> (usize, usize) {
        (self.prefix + 1, self.now - self.suffix)
    }

    /// Lines added (positive) or removed (negative) since the record.
    pub(crate) fn shift(&self) -> isize {
        signed(self.now) - signed(self.read)
    }
}

fn signed(n: usize) -> isize {
    isize::try_from(n).unwrap_or(isize::MAX)
}

/// What became of lines `first..=last` of a record (the same numbers in the file now).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lines {
    /// Unchanged, at the same numbers, and shown: an edit may replace them.
    Read,
    /// A line among them changed (or they reach past the end of what was recorded).
    Changed,
    /// Unchanged, but lines were added or removed above them: they are now `by` lines
    /// further down (negative: up).
    Shifted {
        /// How far they moved.
        by: isize,
    },
    /// Unchanged at the same numbers, but lines `first..=last` of them were never shown
    /// with anchors (or changed before the last showing).
    Unseen {
        /// The first line not shown.
        first: usize,
        /// The last line not shown.
        last: usize,
    },
}

impl Record {
    /// A record of `hashes` with every line shown (a file written whole).
    pub(crate) fn all_shown(hashes: Vec<u64>) -> Record {
        let shown = vec![true; hashes.len()];
        Record { hashes, shown }
    }

    /// How this record and the file now (`now`, its line hashes) line up.
    pub(crate) fn common(&self, now: &[u64]) -> Common {
        let (read, count) = (self.hashes.len(), now.len());
        let prefix = self
            .hashes
            .iter()
            .zip(now)
            .take_while(|(a, b)| a == b)
            .count();
        let room = read.min(count) - prefix;
        let suffix = self
            .hashes
            .iter()
            .rev()
            .zip(now.iter().rev())
            .take(room)
            .take_while(|(a, b)| a == b)
            .count();
        Common {
            read,
            now: count,
            prefix,
            suffix,
        }
    }

    /// Whether lines `first..=last` (from 1) of this record may be replaced in the file
    /// now: unchanged, at the same numbers (in the common prefix, or in the common suffix
    /// with the line count unchanged), and shown.
    pub(crate) fn lines(&self, common: &Common, first: usize, last: usize) -> Lines {
        let in_prefix = last <= common.prefix;
        let in_suffix = common.read == common.now && first > common.now - common.suffix;
        if in_prefix || in_suffix {
            let unseen: Vec<usize> = (first..=last)
                .filter(|&n| !self.shown.get(n - 1).copied().unwrap_or(false))
                .collect();
            return match (unseen.first(), unseen.last()) {
                (Some(&first), Some(&last)) => Lines::Unseen { first, last },
                _ => Lines::Read,
            };
        }
        if last <= common.read && first > common.read - common.suffix {
            Lines::Shifted { by: common.shift() }
        } else {
            Lines::Changed
        }
    }

    /// The record of the file as it is now (`now`, its line hashes): lines shown in
    /// `old` stay shown where they are unchanged at the same numbers; no others are.
    pub(crate) fn carried(old: Option<&Record>, now: Vec<u64>) -> Record {
        let mut shown = vec![false; now.len()];
        if let Some(old) = old {
            let common = old.common(&now);
            shown[..common.prefix].copy_from_slice(&old.shown[..common.prefix]);
            if common.read == common.now {
                let from = common.now - common.suffix;
                shown[from..].copy_from_slice(&old.shown[from..]);
            }
        }
        Record { hashes: now, shown }
    }

    /// Marks lines `first..=last` (from 1, clipped to the file) shown.
    pub(crate) fn show(&mut self, first: usize, last: usize) {
        let first = first.max(1);
        let last = last.min(self.shown.len());
        if first <= last {
            self.shown[first - 1..last].fill(true);
        }
    }

    /// The record as bytes: the magic, the path, the line count, the hashes, then the
    /// shown lines as ranges (count, then first and end of each, from 0).
    fn encode(&self, path: &Path) -> Vec<u8> {
        use std::os::unix::ffi::OsStrExt as _;
        let path = path.as_os_str().as_bytes();
        let mut ranges = Vec::new();
        let mut at = 0;
        while at < self.shown.len() {
            if self.shown[at] {
                let start = at;
                while at < self.shown.len() && self.shown[at] {
                    at += 1;
                }
                ranges.push((start, at));
            } else {
                at += 1;
            }
        }
        let mut out = Vec::with_capacity(48 + path.len() + 8 * self.hashes.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(path.len() as u64).to_le_bytes());
        out.extend_from_slice(path);
        out.extend_from_slice(&(self.hashes.len() as u64).to_le_bytes());
        for hash in &self.hashes {
            out.extend_from_slice(&hash.to_le_bytes());
        }
        out.extend_from_slice(&(ranges.len() as u64).to_le_bytes());
        for (start, end) in ranges {
            out.extend_from_slice(&(start as u64).to_le_bytes());
            out.extend_from_slice(&(end as u64).to_le_bytes());
        }
        out
    }

    /// Reads [`Record::encode`]'s bytes: `Ok(None)` when they are the record of another
    /// path (two paths with the same hash).
    fn decode(bytes: &[u8], path: &Path) -> Result<Option<Record>, &'static str> {
        use std::os::unix::ffi::OsStrExt as _;
        let mut input = Input(bytes);
        if input.take(MAGIC.len())? != MAGIC {
            return Err("not a read record of this version");
        }
        let path_len = input.length()?;
        let recorded_path = input.take(path_len)?;
        let count = input.length()?;
        let raw = input.take(count.checked_mul(8).ok_or("too many lines")?)?;
        let hashes: Vec<u64> = raw
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        let mut shown = vec![false; count];
        for _ in 0..input.length()? {
            let (start, end) = (input.length()?, input.length()?);
            if start > end || end > count {
                return Err("a shown range is out of bounds");
            }
            shown[start..end].fill(true);
        }
        if !input.0.is_empty() {
            return Err("bytes after the end");
        }
        if recorded_path != path.as_os_str().as_bytes() {
            return Ok(None);
        }
        Ok(Some(Record { hashes, shown }))
    }
}

/// The bytes of a record not yet decoded.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if n > self.0.len() {
            return Err("it ends too early");
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    /// A length or index: a little-endian u64 that must fit in memory.
    fn length(&mut self) -> Result<usize, &'static str> {
        let bytes: [u8; 8] = self.take(8)?.try_into().map_err(|_| "it ends too early")?;
        usize::try_from(u64::from_le_bytes(bytes)).map_err(|_| "a length is too large")
    }
}

/// The path a record is kept under: the kernel's name of the open `handle`
/// (`/proc/self/fd/N`: real, links resolved), else `fallback`.
pub(crate) fn key_of(handle: &impl AsRawFd, fallback: PathBuf) -> PathBuf {
    match std::fs::read_link(format!("/proc/self/fd/{}", handle.as_raw_fd())) {
        Ok(path) if path.is_absolute() && !path.to_string_lossy().ends_with(" (deleted)") => path,
        _ => fallback,
    }
}

/// The path a record of `name` in the open folder `dir` is kept under.
pub(crate) fn key_in(dir: &Dir, name: &OsString, fallback: PathBuf) -> PathBuf {
    match std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd())) {
        Ok(path) if path.is_absolute() => path.join(name),
        _ => fallback,
    }
}

/// Where a call's records are kept.
#[derive(Debug, Clone)]
pub(crate) struct Reads {
    store: Store,
}

#[derive(Debug, Clone)]
enum Store {
    /// The profile's state folder (the records go in [`FOLDER`] beneath it).
    Folder(PathBuf),
    /// This process's memory, for this profile.
    Memory(String),
}

/// Records kept in memory (a host without state folders): (profile, path), record;
/// the least recently written first.
static MEMORY: Mutex<VecDeque<((String, PathBuf), Record)>> = Mutex::new(VecDeque::new());

impl Reads {
    /// The records of the call's profile: in its state folder, else in memory.
    pub(crate) async fn of(ctx: &ToolContext<'_>) -> Reads {
        let store = match ctx.state_dir().await {
            Ok(dir) => Store::Folder(dir),
            Err(_) => Store::Memory(ctx.profile_id().to_owned()),
        };
        Reads { store }
    }

    /// Records in `state_dir` (tests).
    #[cfg(test)]
    pub(crate) fn in_folder(state_dir: PathBuf) -> Reads {
        Reads {
            store: Store::Folder(state_dir),
        }
    }

    /// The record of the file at `path` (a key from [`key_of`] or [`key_in`]), if any.
    pub(crate) fn load(&self, path: &Path) -> Result<Option<Record>, RecordError> {
        match &self.store {
            Store::Memory(profile) => {
                let memory = MEMORY
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                Ok(memory
                    .iter()
                    .find(|((p, f), _)| p == profile && f == path)
                    .map(|(_, record)| record.clone()))
            }
            Store::Folder(state) => {
                let (dir, folder) = open_folder(state)?;
                let name = file_name(path);
                let shown = folder.join(&name);
                let mut options = OpenOptions::new();
                options
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY);
                let file = match dir.open_with(&name, &options) {
                    Ok(file) => file,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                    Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                        return Err(RecordError::NotPlain {
                            path: shown,
                            what: "file",
                        });
                    }
                    Err(source) => {
                        return Err(RecordError::Io {
                            action: "open",
                            path: shown,
                            source,
                        });
                    }
                };
                let io_error = |source| RecordError::Io {
                    action: "read",
                    path: shown.clone(),
                    source,
                };
                if !file.metadata().map_err(io_error)?.is_file() {
                    return Err(RecordError::NotPlain {
                        path: shown,
                        what: "file",
                    });
                }
                let mut bytes = Vec::new();
                file.take(MAX_RECORD_BYTES)
                    .read_to_end(&mut bytes)
                    .map_err(io_error)?;
                Record::decode(&bytes, path)
                    .map_err(|why| RecordError::Damaged { path: shown, why })
            }
        }
    }

    /// Keeps `record` as the record of the file at `path`, replacing any before, and
    /// removes the oldest records past the limits.
    pub(crate) fn save(&self, path: &Path, record: &Record) -> Result<(), RecordError> {
        match &self.store {
            Store::Memory(profile) => {
                let mut memory = MEMORY
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let key = (profile.clone(), path.to_path_buf());
                memory.retain(|(k, _)| *k != key);
                memory.push_back((key, record.clone()));
                let mine = |k: &(String, PathBuf)| k.0 == *profile;
                let mut count = memory.iter().filter(|(k, _)| mine(k)).count();
                while count > MAX_RECORDS {
                    match memory.iter().position(|(k, _)| mine(k)) {
                        Some(oldest) => {
                            memory.remove(oldest);
                            count -= 1;
                        }
                        None => break,
                    }
                }
                Ok(())
            }
            Store::Folder(state) => {
                let (dir, folder) = open_folder(state)?;
                let name = file_name(path);
                let bytes = record.encode(path);
                let mut tmp = OsString::from(".");
                tmp.push(&name);
                tmp.push(format!(".{:016x}.tmp", random_u64()));
                let mut options = OpenOptions::new();
                options.write(true).create_new(true).mode(0o600);
                let written = dir.open_with(&tmp, &options).and_then(|mut file| {
                    file.write_all(&bytes)?;
                    dir.rename(&tmp, &dir, &name)
                });
                if let Err(source) = written {
                    let _ = dir.remove_file(&tmp);
                    return Err(RecordError::Io {
                        action: "write the read record",
                        path: folder.join(&name),
                        source,
                    });
                }
                prune(&dir, &name);
                Ok(())
            }
        }
    }
}

/// Opens (creating it, 0700) the records folder in `state`, never through a link.
fn open_folder(state: &Path) -> Result<(Dir, PathBuf), RecordError> {
    let folder = state.join(FOLDER);
    let io_error = |action, source| RecordError::Io {
        action,
        path: folder.clone(),
        source,
    };
    let state_dir = Dir::open_ambient_dir(state, ambient_authority())
        .map_err(|e| io_error("open the state folder of", e))?;
    let mut builder = DirBuilder::new();
    builder.mode(0o700);
    match state_dir.create_dir_with(FOLDER, &builder) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_error("create", e)),
    }
    let mut options = OpenOptions::new();
    options
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_NOCTTY);
    match state_dir.open_with(FOLDER, &options) {
        Ok(file) => Ok((Dir::from_std_file(file.into_std()), folder)),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
            Err(RecordError::NotPlain {
                path: folder,
                what: "folder",
            })
        }
        Err(e) => Err(io_error("open", e)),
    }
}

/// The name of the record of `path`: FNV-1a 64 of its bytes, in hex.
fn file_name(path: &Path) -> OsString {
    use std::os::unix::ffi::OsStrExt as _;
    OsString::from(format!(
        "{:016x}.rec",
        hash_line(path.as_os_str().as_bytes())
    ))
}

/// Removes the least recently written records past [`MAX_RECORDS`] and
/// [`MAX_FOLDER_BYTES`] (never `keep`, just written), and temporary files a crash left.
/// Best effort: a record another process removes first is fine.
fn prune(dir: &Dir, keep: &OsString) {
    let Ok(entries) = dir.entries() else {
        return;
    };
    let now = std::time::SystemTime::now();
    let mut records = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Ok(meta) = entry.metadata() else {
            continue;
        };
        let modified = meta.modified().map(|m| m.into_std()).unwrap_or(now);
        let text = name.to_string_lossy();
        if text.starts_with('.') && text.ends_with(".tmp") {
            let age = now.duration_since(modified).unwrap_or_default();
            if age.as_secs() > STALE_TEMP_SECS {
                let _ = dir.remove_file(&name);
            }
        } else if text.ends_with(".rec") && name != *keep {
            records.push((modified, meta.len(), name));
        }
    }
    let kept_bytes = dir.symlink_metadata(keep).map_or(0, |m| m.len());
    let mut count = records.len() + 1;
    let mut bytes = kept_bytes + records.iter().map(|r| r.1).sum::<u64>();
    records.sort();
    for (_, len, name) in records {
        if count <= MAX_RECORDS && bytes <= MAX_FOLDER_BYTES {
            break;
        }
        if dir.remove_file(&name).is_ok() {
            count -= 1;
            bytes = bytes.saturating_sub(len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashes(lines: &[&str]) -> Vec<u64> {
        lines.iter().map(|l| hash_line(l.as_bytes())).collect()
    }

    fn shown_all(lines: &[&str]) -> Record {
        Record::all_shown(hashes(lines))
    }

    #[test]
    fn lines_split_and_hash_as_edit_file_numbers_them() {
        assert_eq!(line_hashes(b""), Vec::<u64>::new());
        assert_eq!(line_hashes(b"a\r\nb\n\n"), hashes(&["a", "b", ""]));
        assert_eq!(line_hashes(b"a\nb"), hashes(&["a", "b"]));
        assert_eq!(line_hashes(b"a\nb\r"), hashes(&["a", "b\r"]));
        assert_ne!(hash_line(b"}"), hash_line(b"} "));
    }

    #[test]
    fn a_change_inside_the_range_or_a_shift_above_it_is_seen() {
        let read = shown_all(&["fn a() {", "x", "}", "fn b() {", "y", "}"]);
        // Line 5 changed.
        let now = hashes(&["fn a() {", "x", "}", "fn b() {", "Y", "}"]);
        let c = read.common(&now);
        assert_eq!(read.lines(&c, 4, 6), Lines::Changed);
        assert_eq!(read.lines(&c, 1, 3), Lines::Read);
        assert_eq!(read.lines(&c, 6, 6), Lines::Read, "below, same count");
        // Two lines inserted at the top: line 3 is still `}`, but another one.
        let now = hashes(&["//", "//", "fn a() {", "x", "}", "fn b() {", "y", "}"]);
        let c = read.common(&now);
        assert_eq!(read.lines(&c, 3, 3), Lines::Shifted { by: 2 });
        assert_eq!(read.lines(&c, 4, 6), Lines::Shifted { by: 2 });
        // Lines appended below: everything read is in the prefix.
        let now = hashes(&["fn a() {", "x", "}", "fn b() {", "y", "}", "new"]);
        let c = read.common(&now);
        assert_eq!(read.lines(&c, 4, 6), Lines::Read);
        assert_eq!(read.lines(&c, 6, 7), Lines::Changed, "past the read's end");
        // A change above with the same count: the suffix still counts.
        let now = hashes(&["fn a() {", "X", "}", "fn b() {", "y", "}"]);
        let c = read.common(&now);
        assert_eq!(read.lines(&c, 4, 6), Lines::Read);
        assert_eq!(read.lines(&c, 1, 3), Lines::Changed);
    }

    #[test]
    fn only_shown_lines_are_read_and_shown_lines_carry_over_where_unchanged() {
        let mut record = Record::carried(None, hashes(&["a", "b", "c", "d", "e"]));
        record.show(2, 3);
        let c = record.common(&record.hashes.clone());
        assert_eq!(record.lines(&c, 2, 3), Lines::Read);
        assert_eq!(record.lines(&c, 3, 5), Lines::Unseen { first: 4, last: 5 });
        // Line 1 changed (same count): 2-3 stay shown.
        let now = hashes(&["A", "b", "c", "d", "e"]);
        let carried = Record::carried(Some(&record), now.clone());
        assert_eq!(carried.shown, [false, true, true, false, false]);
        // A line inserted at the top: nothing shown carries over the shift.
        let now = hashes(&["new", "a", "b", "c", "d", "e"]);
        let carried = Record::carried(Some(&record), now);
        assert!(carried.shown.iter().all(|s| !s));
        record.show(0, 99);
        assert!(record.shown.iter().all(|s| *s), "clipped to the file");
    }

    #[test]
    fn records_round_trip_and_another_paths_record_is_none() {
        let mut record = Record::carried(None, hashes(&["a", "b", "c", "d"]));
        record.show(1, 1);
        record.show(3, 4);
        let path = Path::new("/w/src/lib.rs");
        let bytes = record.encode(path);
        assert_eq!(Record::decode(&bytes, path), Ok(Some(record.clone())));
        assert_eq!(Record::decode(&bytes, Path::new("/w/other")), Ok(None));
        assert!(Record::decode(&bytes[..bytes.len() - 1], path).is_err());
        assert!(Record::decode(b"garbage", path).is_err());
    }

    #[test]
    fn records_are_private_files_in_a_bounded_folder() {
        use std::os::unix::fs::PermissionsExt as _;
        let state = tempfile::tempdir().expect("tmp");
        let reads = Reads::in_folder(state.path().to_path_buf());
        let record = shown_all(&["x"]);
        assert!(matches!(reads.load(Path::new("/w/a")), Ok(None)));
        for i in 0..MAX_RECORDS + 3 {
            reads
                .save(Path::new(&format!("/w/{i}")), &record)
                .expect("save");
        }
        let folder = state.path().join(FOLDER);
        let names: Vec<_> = std::fs::read_dir(&folder)
            .expect("folder")
            .map(|e| e.expect("entry").path())
            .collect();
        assert_eq!(names.len(), MAX_RECORDS);
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&names[0]), 0o600);
        assert_eq!(mode(&folder), 0o700);
        let last = format!("/w/{}", MAX_RECORDS + 2);
        assert_eq!(
            reads.load(Path::new(&last)).expect("load"),
            Some(record.clone())
        );
    }

    #[test]
    fn without_a_state_folder_records_live_in_memory_per_profile_and_bounded() {
        let mine = Reads {
            store: Store::Memory("memory-test-a".to_owned()),
        };
        let theirs = Reads {
            store: Store::Memory("memory-test-b".to_owned()),
        };
        let record = shown_all(&["x"]);
        let path = Path::new("/w/memory-test");
        mine.save(path, &record).expect("save");
        assert_eq!(mine.load(path).expect("load"), Some(record.clone()));
        assert_eq!(theirs.load(path).expect("load"), None);
        for i in 0..MAX_RECORDS {
            mine.save(Path::new(&format!("/w/memory-test-{i}")), &record)
                .expect("save");
        }
        assert_eq!(mine.load(path).expect("load"), None, "the oldest went");
    }

    #[test]
    fn a_link_in_place_of_the_folder_or_a_record_is_refused_not_followed() {
        let state = tempfile::tempdir().expect("tmp");
        let elsewhere = tempfile::tempdir().expect("elsewhere");
        let reads = Reads::in_folder(state.path().to_path_buf());
        let path = Path::new("/w/a");
        std::os::unix::fs::symlink(elsewhere.path(), state.path().join(FOLDER)).expect("link");
        let e = reads.save(path, &shown_all(&["x"])).expect_err("link");
        assert!(matches!(e, RecordError::NotPlain { .. }), "{e}");
        assert_eq!(std::fs::read_dir(elsewhere.path()).expect("dir").count(), 0);
        std::fs::remove_file(state.path().join(FOLDER)).expect("unlink");
        reads.save(path, &shown_all(&["x"])).expect("save");
        let record = state.path().join(FOLDER).join(file_name(path));
        std::fs::remove_file(&record).expect("rm");
        std::os::unix::fs::symlink(elsewhere.path().join("f"), &record).expect("link");
        std::fs::write(elsewhere.path().join("f"), shown_all(&["x"]).encode(path)).expect("w");
        let e = reads.load(path).expect_err("link");
        assert!(matches!(e, RecordError::NotPlain { .. }), "{e}");
    }
}
