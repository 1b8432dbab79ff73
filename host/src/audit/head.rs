//! The audit log's head, `FILE.head`: the chain's end kept outside the log (the `seq` and
//! sha256 of the last line written, the `seq` of the oldest line the kept files should
//! hold, how many rotated files there should be), so `verify` can name a log cut at its
//! end or at its start, a removed rotated file, and an edited last line, none of which the
//! chain inside the log shows.
//!
//! It is one fixed-size text line, rewritten in place (one `pwrite`) by the writer under
//! the log's `flock`, twice per batch of lines: first with the batch's last line as
//! `pending` (before the lines are written), then with it as the last line (after). A
//! writer that dies between the two leaves a head whose `pending` entry matches the log,
//! which is no tampering. The line ends with a check (the first 16 hex digits of the
//! sha256 of what precedes it), so a torn or hand-edited head is told from a good one.
//! Created 0600 through `sys/private.rs` (a link at its path is refused), like the log.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

use super::record::{ChainPoint, GENESIS, sha256_hex};

/// The head's format version (the number after `toolhost-audit-head`).
pub const HEAD_VERSION: u32 = 1;

/// The length of the head's line, newline included (every field is zero-padded).
const HEAD_LEN: usize = 312;

/// The path of the head of the log at `path`: `FILE.head`.
pub fn head_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".head");
    PathBuf::from(name)
}

/// What the head file records of the log's chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// The last line written (`seq` 0 and all zeros: none yet).
    pub last: ChainPoint,
    /// The last line of a batch being written (set before the batch is written, cleared
    /// after): a log ending there is no tampering, only a writer that ended mid-batch.
    pub pending: Option<ChainPoint>,
    /// The `seq` of the oldest line the kept files should hold: 1, or one past the last
    /// line of the newest file rotation dropped (`[audit] keep`).
    pub oldest: u64,
    /// How many rotated files (`FILE.1` ... `FILE.rotated`) there should be.
    pub rotated: u64,
}

impl Head {
    /// Whether the log ending with `point` is the end this head records (its last line,
    /// or the batch a writer was writing when it ended).
    pub fn ends_at(&self, point: &ChainPoint) -> bool {
        self.last == *point || self.pending.as_ref() == Some(point)
    }

    /// The head as one line of exactly `HEAD_LEN` bytes.
    pub(super) fn encode(&self) -> Vec<u8> {
        let none = ChainPoint {
            seq: 0,
            sha256: GENESIS.to_owned(),
        };
        let pending = self.pending.as_ref().unwrap_or(&none);
        let body = format!(
            "toolhost-audit-head {HEAD_VERSION} seq={:020} sha256={:0>64} pending_seq={:020} \
             pending_sha256={:0>64} oldest={:020} rotated={:020}",
            self.last.seq, self.last.sha256, pending.seq, pending.sha256, self.oldest, self.rotated
        );
        let check = &sha256_hex(body.as_bytes())[..16];
        format!("{body} check={check}\n").into_bytes()
    }

    /// Reads a head line; the error says what is wrong with it.
    pub(super) fn decode(bytes: &[u8]) -> Result<Head, HeadError> {
        let text = std::str::from_utf8(bytes).map_err(|_| HeadError::NotText)?;
        let line = text.strip_suffix('\n').unwrap_or(text);
        let mut words = line.split(' ');
        if words.next() != Some("toolhost-audit-head") {
            return Err(HeadError::Foreign);
        }
        match words.next().map(str::parse::<u32>) {
            Some(Ok(HEAD_VERSION)) => {}
            Some(Ok(version)) => return Err(HeadError::Newer { version }),
            _ => return Err(HeadError::NoVersion),
        }
        let Some((body, check)) = line.rsplit_once(" check=") else {
            return Err(HeadError::NoCheck);
        };
        if bytes.len() != HEAD_LEN || sha256_hex(body.as_bytes()).get(..16) != Some(check) {
            return Err(HeadError::CheckFails);
        }
        let mut fields = std::collections::HashMap::new();
        for word in words {
            if let Some((key, value)) = word.split_once('=') {
                fields.insert(key, value);
            }
        }
        let number = |key: &'static str| -> Result<u64, HeadError> {
            fields
                .get(key)
                .and_then(|v| v.parse().ok())
                .ok_or(HeadError::NoNumber { key })
        };
        let hash = |key: &'static str| -> Result<String, HeadError> {
            fields
                .get(key)
                .filter(|v| v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()))
                .map(|v| v.to_ascii_lowercase())
                .ok_or(HeadError::NoHash { key })
        };
        let pending = ChainPoint {
            seq: number("pending_seq")?,
            sha256: hash("pending_sha256")?,
        };
        Ok(Head {
            last: ChainPoint {
                seq: number("seq")?,
                sha256: hash("sha256")?,
            },
            pending: (pending.seq > 0).then_some(pending),
            oldest: number("oldest")?,
            rotated: number("rotated")?,
        })
    }
}

/// Why a head file is no head toolhost wrote (the message speaks of the file as "it":
/// `verify` names it before).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum HeadError {
    /// The file is empty.
    #[error("it is empty")]
    Empty,
    /// The file is not UTF-8.
    #[error("it is not text")]
    NotText,
    /// The file is something else.
    #[error("it does not start with `toolhost-audit-head`")]
    Foreign,
    /// A format this toolhost does not know (a newer one wrote it).
    #[error(
        "its format version is {version}, which this toolhost does not know (a newer one \
         wrote it)"
    )]
    Newer {
        /// The format version it has.
        version: u32,
    },
    /// No format version after the first word.
    #[error("it has no format version")]
    NoVersion,
    /// No `check=` at the end.
    #[error("it has no check")]
    NoCheck,
    /// The check is not that of the line (edited, or torn).
    #[error(
        "its check does not match its contents (it was edited, or torn by a crash while it \
         was written)"
    )]
    CheckFails,
    /// A number field missing or not a number.
    #[error("it has no number `{key}`")]
    NoNumber {
        /// The field.
        key: &'static str,
    },
    /// A sha256 field missing or not 64 hex digits.
    #[error("it has no sha256 `{key}`")]
    NoHash {
        /// The field.
        key: &'static str,
    },
}

/// What is at a head's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum HeadState {
    /// No file.
    Missing,
    /// A file that is no head (why).
    Unreadable(HeadError),
    /// A head.
    Found(Head),
}

/// Reads the head of the log at `log` (a link or FIFO at its path is an error).
pub(super) fn read_head(log: &Path) -> io::Result<HeadState> {
    let path = head_path(log);
    match toolhost_calls::private::open_regular_file(&path) {
        Ok(file) => read_from(&file),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(HeadState::Missing),
        Err(e) => Err(e),
    }
}

/// The head in `file` (read from its start, at most a little more than a head).
fn read_from(file: &File) -> io::Result<HeadState> {
    let mut buf = vec![0u8; HEAD_LEN + 1];
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], got as u64)? {
            0 => break,
            n => got += n,
        }
    }
    buf.truncate(got);
    if got == 0 {
        return Ok(HeadState::Unreadable(HeadError::Empty));
    }
    Ok(match Head::decode(&buf) {
        Ok(head) => HeadState::Found(head),
        Err(why) => HeadState::Unreadable(why),
    })
}

/// The writer's handle on the head file: kept open, rewritten in place.
pub(super) struct HeadFile {
    path: PathBuf,
    open: Option<(File, u64)>,
}

impl HeadFile {
    /// The head of the log at `log` (nothing is opened yet).
    pub(super) fn new(log: &Path) -> HeadFile {
        HeadFile {
            path: head_path(log),
            open: None,
        }
    }

    /// The head file's path.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the file at the path is the one this handle has open (false when none is
    /// open, or the file was removed or replaced since).
    pub(super) fn unchanged(&self) -> bool {
        match (&self.open, std::fs::symlink_metadata(&self.path)) {
            (Some((_, ino)), Ok(meta)) => meta.ino() == *ino,
            _ => false,
        }
    }

    /// Reads the head from the file at the path, keeping it open for writing.
    pub(super) fn read(&mut self) -> io::Result<HeadState> {
        self.open = None;
        match std::fs::symlink_metadata(&self.path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(HeadState::Missing),
            _ => {}
        }
        let file = toolhost_calls::private::open_private_file(&self.path)?;
        let state = read_from(&file)?;
        let ino = file.metadata()?.ino();
        self.open = Some((file, ino));
        Ok(state)
    }

    /// Writes `head` over the file (creating it 0600 when there is none): one `pwrite`.
    pub(super) fn write(&mut self, head: &Head) -> io::Result<()> {
        let bytes = head.encode();
        if self.open.is_none() {
            let file = toolhost_calls::private::open_private_file(&self.path)?;
            let meta = file.metadata()?;
            if meta.len() > bytes.len() as u64 {
                file.set_len(bytes.len() as u64)?;
            }
            self.open = Some((file, meta.ino()));
        }
        let Some((file, _)) = &self.open else {
            return Err(io::Error::other("the head file is not open"));
        };
        file.write_all_at(&bytes, 0)
    }

    /// fsyncs the head file.
    pub(super) fn sync(&self) -> io::Result<()> {
        match &self.open {
            Some((file, _)) => file.sync_all(),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head() -> Head {
        Head {
            last: ChainPoint {
                seq: 42,
                sha256: "ab".repeat(32),
            },
            pending: None,
            oldest: 7,
            rotated: 3,
        }
    }

    #[test]
    fn a_head_reads_back_as_written_and_always_has_one_length() {
        let mut h = head();
        let bytes = h.encode();
        assert_eq!(bytes.len(), HEAD_LEN, "{}", String::from_utf8_lossy(&bytes));
        assert_eq!(Head::decode(&bytes), Ok(h.clone()));
        h.pending = Some(ChainPoint {
            seq: u64::MAX,
            sha256: "cd".repeat(32),
        });
        h.oldest = u64::MAX;
        let bytes = h.encode();
        assert_eq!(bytes.len(), HEAD_LEN);
        assert_eq!(Head::decode(&bytes), Ok(h));
    }

    #[test]
    fn an_edited_torn_or_foreign_head_is_refused_saying_why() {
        let bytes = head().encode();
        let text = String::from_utf8(bytes.clone()).expect("text");
        let edited = text.replace("seq=00000000000000000042", "seq=00000000000000000041");
        let err = Head::decode(edited.as_bytes()).expect_err("edited");
        assert!(err.to_string().contains("check does not match"), "{err}");
        let err = Head::decode(&bytes[..100]).expect_err("torn");
        assert!(err.to_string().contains("check"), "{err}");
        let err = Head::decode(b"hello\n").expect_err("foreign");
        assert!(err.to_string().contains("toolhost-audit-head"), "{err}");
        let newer = text.replacen(" 1 ", " 2 ", 1);
        let err = Head::decode(newer.as_bytes()).expect_err("newer");
        assert_eq!(err, HeadError::Newer { version: 2 });
        assert!(err.to_string().contains("version is 2"), "{err}");
    }
}
