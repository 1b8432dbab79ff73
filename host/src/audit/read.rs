//! Reading the audit log back: its files oldest first (every rotated file there is, then
//! the log), every record, and `verify`, which checks the chain inside the log, the line
//! numbers (`seq`), the rotated files that should be there and the log's two ends against
//! its head (`head.rs`), and checkpoints taken from syslog, and names each thing wrong.
//!
//! `verify` reads a snapshot: under a shared `flock` on the log (a writer holds it
//! exclusively while it appends and rotates) it opens every file and reads the head and
//! the log's length, then reads the files through those descriptors without the lock, so
//! a busy host neither waits for it nor makes it see half a batch or a rotation.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufRead as _, BufReader, Read as _};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use super::AuditError;
use super::head::{Head, HeadState, head_path, read_head};
use super::record::{AuditRecord, ChainPoint, GENESIS, HeadMismatch, sha256_hex};
use super::writer::{rotated, rotated_numbers};

/// The log's files that exist, oldest first: every `FILE.N` there is (the highest `N`
/// first, gaps skipped), then `FILE`.
pub fn log_files(path: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = rotated_numbers(path)
        .unwrap_or_default()
        .into_iter()
        .rev()
        .map(|n| rotated(path, n))
        .collect();
    if std::fs::symlink_metadata(path).is_ok() {
        files.push(path.to_path_buf());
    }
    files
}

/// Each line of `reader` (its bytes without the newline), in order.
fn lines(reader: impl io::Read, file: &Path) -> Result<Vec<Vec<u8>>, AuditError> {
    let mut out = Vec::new();
    for line in BufReader::new(reader).split(b'\n') {
        out.push(line.map_err(|source| AuditError::Io {
            action: "read",
            path: file.to_path_buf(),
            source,
        })?);
    }
    Ok(out)
}

/// What kind of thing `verify` found wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProblemKind {
    /// A line that is no audit record (edited, or torn by a crash).
    NotARecord,
    /// A line whose `prev` is not the sha256 of the line before it.
    ChainBroken,
    /// A line whose `seq` does not follow the line before it.
    SeqBroken,
    /// A rotated file (or the log itself) that should be there is not.
    MissingFile,
    /// Lines gone from the start of the oldest kept file.
    CutHead,
    /// Lines gone from the end of the log.
    CutTail,
    /// The log's last line is not the one its head recorded.
    EditedLast,
    /// Lines after the last one the head recorded.
    PastHead,
    /// No head file beside the log.
    NoHead,
    /// A head file that is no head (edited or damaged).
    BadHead,
    /// A line a writer wrote after finding the log disagreeing with its head.
    WriterFoundMismatch,
    /// A checkpoint (`--expect`) the log does not match.
    Checkpoint,
}

/// One thing `verify` found wrong: where, and what it means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// What kind of thing.
    pub kind: ProblemKind,
    /// The file it is in (or that is missing).
    pub file: PathBuf,
    /// The line (from 1), when it is one line's.
    pub line: Option<u64>,
    /// What was found, what it means and what to do (for a missing file, what follows its
    /// path: `is missing: ...`).
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.line, self.kind) {
            (Some(line), _) => write!(f, "{}, line {line}: {}", self.file.display(), self.message),
            // "FILE is missing: ..."
            (None, ProblemKind::MissingFile) => {
                write!(f, "{} {}", self.file.display(), self.message)
            }
            (None, _) => write!(f, "{}: {}", self.file.display(), self.message),
        }
    }
}

/// What `verify` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// The files read, oldest first.
    pub files: Vec<PathBuf>,
    /// Lines read.
    pub lines: u64,
    /// The first and last `seq` of the numbered lines read.
    pub seqs: Option<(u64, u64)>,
    /// The head, if there is a readable one.
    pub head: Option<Head>,
    /// What was found right that is worth saying (checkpoints matched, a head left
    /// mid-batch, lines before the oldest kept one rotated away).
    pub notes: Vec<String>,
    /// Everything found wrong, in the order of the log.
    pub problems: Vec<Problem>,
}

impl VerifyReport {
    /// Whether nothing was found wrong.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

impl std::str::FromStr for ChainPoint {
    type Err = BadCheckpoint;

    /// A checkpoint as `SEQ:SHA256` (what syslog's `seq=N sha256=HASH` says).
    fn from_str(text: &str) -> Result<ChainPoint, BadCheckpoint> {
        let bad = || BadCheckpoint {
            text: text.to_owned(),
        };
        let (seq, sha) = text.split_once(':').ok_or_else(bad)?;
        let seq: u64 = seq.trim().parse().map_err(|_| bad())?;
        let sha = sha.trim().to_ascii_lowercase();
        if seq == 0 || sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        Ok(ChainPoint { seq, sha256: sha })
    }
}

/// A checkpoint (`verify --expect`) that is not `SEQ:SHA256`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "'{text}' is no checkpoint: give SEQ:SHA256, the seq= and sha256= of a toolhost-audit \
     message (e.g. 42:3f7a...)"
)]
pub struct BadCheckpoint {
    /// The text given.
    text: String,
}

/// One file's place in the log: a rotated file or the log itself, open or missing.
struct Slot {
    path: PathBuf,
    /// The open file and how many of its bytes to read (`None`: missing).
    file: Option<(File, u64)>,
}

/// The log as it was at one moment: its files oldest first and its head.
struct Snapshot {
    slots: Vec<Slot>,
    head: io::Result<HeadState>,
}

/// Opens every file of the log at `path` and reads its head under a shared lock on the
/// log, so no writer is halfway through a batch or a rotation.
fn snapshot(path: &Path) -> Result<Snapshot, AuditError> {
    let io_error = |action, path: &Path, source| AuditError::Io {
        action,
        path: path.to_path_buf(),
        source,
    };
    let open = |p: &Path| match toolhost_calls::private::open_regular_file(p) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error("open", p, e)),
    };
    for _ in 0..16 {
        let log = open(path)?;
        if let Some(f) = &log {
            f.lock_shared().map_err(|e| io_error("lock", path, e))?;
            let same = std::fs::symlink_metadata(path)
                .ok()
                .zip(f.metadata().ok())
                .is_some_and(|(at_path, open)| at_path.ino() == open.ino());
            if !same {
                // Rotated between the open and the lock: take the new file.
                let _ = f.unlock();
                continue;
            }
        }
        let taken = (|| {
            let head = read_head(path);
            let numbers =
                rotated_numbers(path).map_err(|e| io_error("list the files of", path, e))?;
            let highest = numbers.last().copied().unwrap_or(0);
            // (A head edited to claim absurdly many files names a bounded number missing.)
            let expected = highest.max(match &head {
                Ok(HeadState::Found(h)) => usize::try_from(h.rotated)
                    .unwrap_or(usize::MAX)
                    .min(highest + 1000),
                _ => 0,
            });
            let mut slots = Vec::new();
            for n in (1..=expected).rev() {
                let p = rotated(path, n);
                let file = match open(&p)? {
                    Some(f) => {
                        let len = f.metadata().map_err(|e| io_error("read", &p, e))?.len();
                        Some((f, len))
                    }
                    None => None,
                };
                slots.push(Slot { path: p, file });
            }
            let file = match &log {
                Some(f) => {
                    let len = f.metadata().map_err(|e| io_error("read", path, e))?.len();
                    Some((f.try_clone().map_err(|e| io_error("read", path, e))?, len))
                }
                None => None,
            };
            slots.push(Slot {
                path: path.to_path_buf(),
                file,
            });
            Ok(Snapshot { slots, head })
        })();
        if let Some(f) = &log {
            let _ = f.unlock();
        }
        let snapshot = taken?;
        if log.is_none() && snapshot.slots.iter().all(|s| s.file.is_none()) {
            return Err(io_error(
                "read",
                path,
                io::Error::new(io::ErrorKind::NotFound, "no such file"),
            ));
        }
        return Ok(snapshot);
    }
    Err(io_error(
        "read",
        path,
        io::Error::other("it was rotated 16 times while verify tried to lock it"),
    ))
}

/// Where a line is: its file (an index into the files) and number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Loc {
    slot: usize,
    line: u64,
}

/// What `verify` keeps of a line it has read.
#[derive(Debug, Clone)]
struct Seen {
    at: Loc,
    /// Its `seq` (0: none, or no record).
    seq: u64,
    sha: String,
    record: bool,
}

/// A run of files that should be there and are not.
struct Gap {
    slots: Vec<usize>,
    /// The last `seq` read before the gap.
    before: Option<u64>,
    /// The first `seq` read after it.
    after: Option<u64>,
}

/// The short form of a sha256 in messages.
fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

/// "the line with seq A `one`" or "the N lines with seq A-B `many`".
fn lines_with(from: u64, to: u64, one: &str, many: &str) -> String {
    if from == to {
        format!("the line with seq {from} {one}")
    } else {
        format!(
            "the {} lines with seq {from}-{to} {many}",
            to.saturating_sub(from).saturating_add(1)
        )
    }
}

/// What to do when lines were removed or changed.
const COMPARE: &str = "Check the log against its syslog checkpoints (`--expect SEQ:SHA256`) \
                       and find out who can write these files.";

/// Checks the log at `path` against itself, its head and `expect` (checkpoints taken
/// from syslog): every line is an audit record chained (`prev`) and numbered (`seq`) after
/// the one before, across every rotated file, none of which is missing; the oldest line
/// is the one the head says rotation left; the last is the head's; each checkpoint's line
/// has the checkpoint's sha256. The report names each thing wrong; the error is for a
/// log that cannot be read at all.
pub fn verify(path: &Path, expect: &[ChainPoint]) -> Result<VerifyReport, AuditError> {
    let snapshot = snapshot(path)?;
    let mut check = Check::new(&snapshot, expect);
    for (index, slot) in snapshot.slots.iter().enumerate() {
        match &slot.file {
            None => check.missing(index),
            Some((file, len)) => {
                let reader = file.try_clone().map_err(|source| AuditError::Io {
                    action: "read",
                    path: slot.path.clone(),
                    source,
                })?;
                for line in lines(reader.take(*len), &slot.path)? {
                    check.line(index, &line);
                }
                check.end_of_file();
            }
        }
    }
    Ok(check.finish(expect))
}

/// The state of one `verify`.
struct Check<'a> {
    paths: Vec<PathBuf>,
    /// Which of them were there.
    present: Vec<bool>,
    head: Option<&'a Head>,
    problems: Vec<Problem>,
    notes: Vec<String>,
    lines: u64,
    /// Lines read in the current file.
    in_file: u64,
    first: Option<(Seen, String)>,
    last: Option<Seen>,
    seqs: Option<(u64, u64)>,
    gaps: Vec<Gap>,
    /// Whether files are missing right before the current one.
    after_gap: bool,
    /// The lines the checkpoints name, once read.
    wanted: HashMap<u64, Option<Seen>>,
    /// The last line whose sha256 is the head's, and the line numbered right after the
    /// head's.
    at_head: Option<Seen>,
    after_head: Option<Loc>,
}

impl<'a> Check<'a> {
    fn new(snapshot: &'a Snapshot, expect: &[ChainPoint]) -> Check<'a> {
        let mut problems = Vec::new();
        let head_file = head_path(&snapshot.slots[snapshot.slots.len() - 1].path);
        let head = match &snapshot.head {
            Ok(HeadState::Found(h)) => Some(h),
            Ok(HeadState::Missing) => None,
            Ok(HeadState::Unreadable(why)) => {
                problems.push(Problem {
                    kind: ProblemKind::BadHead,
                    file: head_file,
                    line: None,
                    message: format!(
                        "this is not a head toolhost wrote: {why}. The log's ends cannot be \
                         checked against it. {COMPARE} The next line a host writes records \
                         this and writes a new head."
                    ),
                });
                None
            }
            Err(e) => {
                problems.push(Problem {
                    kind: ProblemKind::BadHead,
                    file: head_file,
                    line: None,
                    message: format!("the head cannot be read: {e}"),
                });
                None
            }
        };
        Check {
            paths: snapshot.slots.iter().map(|s| s.path.clone()).collect(),
            present: snapshot.slots.iter().map(|s| s.file.is_some()).collect(),
            head,
            problems,
            notes: Vec::new(),
            lines: 0,
            in_file: 0,
            first: None,
            last: None,
            seqs: None,
            gaps: Vec::new(),
            after_gap: false,
            wanted: expect.iter().map(|c| (c.seq, None)).collect(),
            at_head: None,
            after_head: None,
        }
    }

    fn problem(&mut self, kind: ProblemKind, at: Loc, message: String) {
        self.problems.push(Problem {
            kind,
            file: self.paths[at.slot].clone(),
            line: Some(at.line),
            message,
        });
    }

    /// "line N" (in the file of `here`) or "line N of FILE".
    fn name(&self, at: Loc, here: Loc) -> String {
        if at.slot == here.slot {
            format!("line {}", at.line)
        } else {
            format!("line {} of {}", at.line, self.paths[at.slot].display())
        }
    }

    fn missing(&mut self, slot: usize) {
        let before = self.seqs.map(|(_, last)| last);
        match self.gaps.last_mut() {
            Some(gap) if self.after_gap => gap.slots.push(slot),
            _ => self.gaps.push(Gap {
                slots: vec![slot],
                before,
                after: None,
            }),
        }
        self.after_gap = true;
    }

    fn end_of_file(&mut self) {
        self.in_file = 0;
    }

    fn line(&mut self, slot: usize, bytes: &[u8]) {
        self.lines += 1;
        self.in_file += 1;
        let at = Loc {
            slot,
            line: self.in_file,
        };
        let sha = sha256_hex(bytes);
        let record: Option<AuditRecord> = match serde_json::from_slice(bytes) {
            Ok(r) => Some(r),
            Err(e) => {
                self.problem(
                    ProblemKind::NotARecord,
                    at,
                    format!(
                        "not an audit record ({e}): the line was changed, or cut short (a \
                         crash while it was written). {COMPARE}"
                    ),
                );
                None
            }
        };
        let seen = Seen {
            at,
            seq: record.as_ref().map_or(0, |r| r.seq),
            sha,
            record: record.is_some(),
        };
        if let Some(record) = &record {
            self.numbered(&seen, record);
            if self.first.is_none() {
                self.first = Some((seen.clone(), record.prev.clone()));
            }
            let after_gap = self.after_gap && at.line == 1;
            if let Some(m) = &record.mismatch {
                self.writer_found(&seen, record, m);
            } else if !after_gap && let Some(before) = self.last.clone() {
                self.chained(&before, &seen, record);
            }
        } else if self.first.is_none() {
            self.first = Some((seen.clone(), String::new()));
        }
        if at.line == 1 {
            self.after_gap = false;
        }
        self.last = Some(seen);
    }

    /// Keeps what the ends, the gaps and the checkpoints need of a numbered line.
    fn numbered(&mut self, seen: &Seen, record: &AuditRecord) {
        if let Some(head) = self.head {
            if seen.sha == head.last.sha256 {
                self.at_head = Some(seen.clone());
            }
            if head.last.seq > 0 && seen.seq == head.last.seq + 1 && self.after_head.is_none() {
                self.after_head = Some(seen.at);
            }
        }
        if record.seq == 0 {
            return;
        }
        self.seqs = Some(match self.seqs {
            None => (record.seq, record.seq),
            Some((first, _)) => (first, record.seq),
        });
        if let Some(gap) = self.gaps.last_mut()
            && gap.after.is_none()
        {
            gap.after = Some(record.seq);
        }
        if let Some(slot) = self.wanted.get_mut(&record.seq) {
            *slot = Some(seen.clone());
        }
    }

    /// Checks `seen` (`record`) against the line before it.
    fn chained(&mut self, before: &Seen, seen: &Seen, record: &AuditRecord) {
        let name = self.name(before.at, seen.at);
        let numbered = before.seq > 0 && seen.seq > 0;
        if record.prev != before.sha {
            let why = if numbered && seen.seq > before.seq + 1 {
                format!(
                    "{} between them",
                    lines_with(before.seq + 1, seen.seq - 1, "was removed", "were removed")
                )
            } else if numbered && seen.seq == before.seq + 1 {
                format!(
                    "no line is missing between them (seq {} and {}), so {name} was changed \
                     (or this line's prev was)",
                    before.seq, seen.seq
                )
            } else {
                format!("{name} was changed, or lines between them were removed")
            };
            self.problem(
                ProblemKind::ChainBroken,
                seen.at,
                format!("its prev does not match the sha256 of {name}: {why}. {COMPARE}"),
            );
        } else if before.record && before.seq > 0 && seen.seq != before.seq + 1 {
            let why = if seen.seq == 0 {
                "it has no seq: it was written by an older toolhost sharing this log, or \
                 edited"
                    .to_owned()
            } else {
                "the chain holds, so a seq was edited".to_owned()
            };
            self.problem(
                ProblemKind::SeqBroken,
                seen.at,
                format!(
                    "its seq is {} but {name} is seq {}: {why}. {COMPARE}",
                    seen.seq, before.seq
                ),
            );
        }
    }

    /// Names the line a writer wrote after finding the log disagreeing with its head.
    fn writer_found(&mut self, seen: &Seen, record: &AuditRecord, m: &HeadMismatch) {
        let before = self
            .last
            .as_ref()
            .map(|b| self.name(b.at, seen.at))
            .unwrap_or_else(|| "the line before".to_owned());
        let f = &m.found;
        let message = match &m.head {
            None => format!(
                "when this line (seq {}) was written, the log's head file was missing or \
                 unreadable (removed, or damaged), so the writer chained it to the log's last \
                 line as found (seq {}, sha256 {}) and wrote a new head: lines cut from the end, \
                 or a last line edited, before then cannot be told from the head. {COMPARE}",
                record.seq,
                f.seq,
                short(&f.sha256)
            ),
            Some(h) => {
                let what = if f.seq > 0 && h.seq > f.seq {
                    format!(
                        "{} from the end (the head recorded seq {} as the last line, the log \
                         ended at seq {})",
                        lines_with(f.seq + 1, h.seq, "had been cut", "had been cut"),
                        h.seq,
                        f.seq
                    )
                } else if f.seq > 0 && f.seq == h.seq {
                    format!(
                        "the last line, seq {}, had been edited (its sha256 was {}, the head \
                         recorded {})",
                        f.seq,
                        short(&f.sha256),
                        short(&h.sha256)
                    )
                } else if f.seq > h.seq {
                    format!(
                        "{} after the head's last line (seq {}) without a writer recording \
                         them",
                        lines_with(h.seq + 1, f.seq, "had been added", "had been added"),
                        h.seq
                    )
                } else {
                    format!(
                        "its last line (sha256 {}) was not the one the head recorded (seq {}, \
                         sha256 {}): it was edited, torn by a crash, or lines were cut",
                        short(&f.sha256),
                        h.seq,
                        short(&h.sha256)
                    )
                };
                format!(
                    "when this line (seq {}) was written, the log did not end where its head \
                     said: {what}. The writer chained this line to the line the head recorded, \
                     not to {before}, and numbered it past both, so nothing written since is \
                     lost. {COMPARE}",
                    record.seq
                )
            }
        };
        self.problem(ProblemKind::WriterFoundMismatch, seen.at, message);
    }

    fn finish(mut self, expect: &[ChainPoint]) -> VerifyReport {
        self.gaps_found();
        self.start_found();
        self.end_found();
        self.checkpoints(expect);
        VerifyReport {
            files: self
                .paths
                .iter()
                .zip(&self.present)
                .filter(|(_, present)| **present)
                .map(|(p, _)| p.clone())
                .collect(),
            lines: self.lines,
            seqs: self.seqs,
            head: self.head.cloned(),
            notes: self.notes,
            problems: self.problems,
        }
    }

    /// Names the files that should be there and are not, with the lines they held.
    fn gaps_found(&mut self) {
        let gaps = std::mem::take(&mut self.gaps);
        for gap in &gaps {
            let names: Vec<String> = gap
                .slots
                .iter()
                .map(|s| self.paths[*s].display().to_string())
                .collect();
            let is_log = gap.slots.last() == Some(&(self.paths.len() - 1));
            let from = gap
                .before
                .map(|s| s + 1)
                .or_else(|| self.head.map(|h| h.oldest).filter(|o| *o > 0));
            let to = gap
                .after
                .map(|s| s.saturating_sub(1))
                .or_else(|| self.head.map(|h| h.last.seq));
            let lines = match (from, to) {
                (Some(from), Some(to)) if from <= to => lines_with(from, to, "is gone", "are gone"),
                _ => "the lines it held are gone".to_owned(),
            };
            let what = match names.get(1..) {
                Some(others) if !others.is_empty() => {
                    format!("is missing, and so is {}", others.join(" and "))
                }
                _ => "is missing".to_owned(),
            };
            let why = if is_log {
                "the log itself was removed or moved"
            } else {
                "deleted or moved: rotation renames files and leaves no gap"
            };
            let file = self.paths[gap.slots[0]].clone();
            self.problems.push(Problem {
                kind: ProblemKind::MissingFile,
                file,
                line: None,
                message: format!(
                    "{what}: {lines} ({why}). Restore it from a backup if there is one. \
                     {COMPARE}"
                ),
            });
        }
        self.gaps = gaps;
    }

    /// Checks the oldest line against what the head says rotation left.
    fn start_found(&mut self) {
        let Some((first, prev)) = self.first.clone() else {
            return;
        };
        // Files missing before the first one already name the lines gone.
        if self
            .gaps
            .first()
            .is_some_and(|g| g.slots.first() == Some(&0))
        {
            return;
        }
        match self.head {
            Some(head) if first.seq > 0 && head.oldest > 0 && first.seq > head.oldest => {
                self.problem(
                    ProblemKind::CutHead,
                    first.at,
                    format!(
                        "the log starts at seq {}, but its head says rotation left every line \
                         from seq {} on: {}, cut from the start of this file or with an older \
                         rotated file removed. {COMPARE}",
                        first.seq,
                        head.oldest,
                        lines_with(head.oldest, first.seq - 1, "is gone", "are gone")
                    ),
                );
            }
            Some(head) if first.seq == 1 && head.oldest == 1 && prev != GENESIS => {
                self.problem(
                    ProblemKind::CutHead,
                    first.at,
                    format!(
                        "the log's first line (seq 1) does not start the chain (its prev is \
                         not all zeros): it was edited. {COMPARE}"
                    ),
                );
            }
            Some(head) if first.seq > 1 && first.seq == head.oldest => self.notes.push(format!(
                "lines before seq {} were dropped by rotation ([audit] keep)",
                first.seq
            )),
            None if first.record && prev != GENESIS => self.notes.push(
                "the oldest line follows lines no longer kept (rotated away, or removed: \
                 without a head it cannot be told)"
                    .to_owned(),
            ),
            _ => {}
        }
    }

    /// Checks the log's last line against the head.
    fn end_found(&mut self) {
        let log = self.paths.len() - 1;
        let Some(head) = self.head else {
            if self.problems.iter().any(|p| p.kind == ProblemKind::BadHead) {
                return;
            }
            let numbered = self.seqs.is_some();
            let message = if numbered {
                format!(
                    "there is no head file beside the log, but its lines are numbered (seq), \
                     so a toolhost writer kept one: it was removed. Without it a cut end or an \
                     edited last line cannot be found. {COMPARE} The next line a host writes \
                     records the removal and starts a new head."
                )
            } else {
                "there is no head file beside the log: it was written by an older toolhost \
                 (its lines have no seq), or its head was removed. Only the chain inside the \
                 log is checked, so a cut end cannot be found. A host that opens the log \
                 starts its head."
                    .to_owned()
            };
            self.problems.push(Problem {
                kind: ProblemKind::NoHead,
                file: head_path(&self.paths[log]),
                line: None,
                message,
            });
            return;
        };
        let Some(last) = self.last.clone() else {
            if head.last.seq > 0 && head.oldest <= head.last.seq {
                self.problems.push(Problem {
                    kind: ProblemKind::CutTail,
                    file: self.paths[log].clone(),
                    line: None,
                    message: format!(
                        "the log holds no line, but its head records lines up to seq {}: {}. \
                         {COMPARE}",
                        head.last.seq,
                        lines_with(head.oldest.max(1), head.last.seq, "was cut", "were cut")
                    ),
                });
            }
            return;
        };
        let point = ChainPoint {
            seq: last.seq,
            sha256: last.sha.clone(),
        };
        if head.last == point {
            return;
        }
        if head.pending.as_ref() == Some(&point) {
            self.notes.push(format!(
                "the log ends at the batch a writer was writing when it ended (seq {}): the \
                 head had not recorded it yet, which a crash leaves, not tampering",
                point.seq
            ));
            return;
        }
        let (h, f) = (head.last.seq, last.seq);
        if h > 0 && f > 0 && f < h {
            self.problem(
                ProblemKind::CutTail,
                last.at,
                format!(
                    "the log ends here at seq {f}, but its head records seq {h} as the last \
                     line written: {} from the end. {COMPARE}",
                    lines_with(f + 1, h, "was cut", "were cut")
                ),
            );
        } else if h > 0 && f == h {
            self.problem(
                ProblemKind::EditedLast,
                last.at,
                format!(
                    "this last line (seq {f}) is not the one its head records: its sha256 is \
                     {}, the head's {}: it was edited after it was written. {COMPARE}",
                    short(&last.sha),
                    short(&head.last.sha256)
                ),
            );
        } else if let Some(at) = self.after_head.or(self
            .at_head
            .as_ref()
            .filter(|s| s.at != last.at)
            .map(|s| Loc {
                slot: s.at.slot,
                line: s.at.line + 1,
            }))
        {
            let lines = if f > h && h > 0 {
                lines_with(h + 1, f, "comes", "come")
            } else {
                "the lines from here on come".to_owned()
            };
            self.problem(
                ProblemKind::PastHead,
                at,
                format!(
                    "{lines} after the last line its head records (seq {h}): no toolhost writer \
                     recorded them, so they were added by hand or by another program. \
                     {COMPARE}"
                ),
            );
        } else {
            self.problem(
                ProblemKind::EditedLast,
                last.at,
                format!(
                    "the log's last line is not the one its head records (seq {h}, sha256 {}): \
                     it was edited, or lines were cut from the end. {COMPARE}",
                    short(&head.last.sha256)
                ),
            );
        }
    }

    /// Checks each checkpoint against the line it names.
    fn checkpoints(&mut self, expect: &[ChainPoint]) {
        let log = self.paths[self.paths.len() - 1].clone();
        for checkpoint in expect {
            let seq = checkpoint.seq;
            match self.wanted.get(&seq).cloned().flatten() {
                Some(seen) if seen.sha == checkpoint.sha256 => self.notes.push(format!(
                    "checkpoint seq {seq} matches {}, line {}",
                    self.paths[seen.at.slot].display(),
                    seen.at.line
                )),
                Some(seen) => self.problem(
                    ProblemKind::Checkpoint,
                    seen.at,
                    format!(
                        "this line is seq {seq}, but its sha256 is {} where the checkpoint \
                         says {}: the line was changed after the checkpoint was sent, or the \
                         log was rewritten (with its head, if the head agrees). {COMPARE}",
                        short(&seen.sha),
                        short(&checkpoint.sha256)
                    ),
                ),
                None => {
                    let (first, last) = self.seqs.unwrap_or((0, 0));
                    let oldest = self.head.map_or(0, |h| h.oldest);
                    if seq > last {
                        self.problems.push(Problem {
                            kind: ProblemKind::Checkpoint,
                            file: log.clone(),
                            line: None,
                            message: format!(
                                "the checkpoint names seq {seq}, but the log ends at seq \
                                 {last}: {} from the end (and the head rewritten to match, if \
                                 it agrees). {COMPARE}",
                                lines_with(last + 1, seq, "was cut", "were cut")
                            ),
                        });
                    } else if seq < first && oldest > seq {
                        self.notes.push(format!(
                            "checkpoint seq {seq} cannot be checked: rotation dropped it (the \
                             oldest line kept is seq {first})"
                        ));
                    } else {
                        self.problems.push(Problem {
                            kind: ProblemKind::Checkpoint,
                            file: log.clone(),
                            line: None,
                            message: format!(
                                "the checkpoint names seq {seq}, which should be in the log \
                                 (it holds seq {first}-{last}) but is not: the line was \
                                 removed. {COMPARE}"
                            ),
                        });
                    }
                }
            }
        }
    }
}

/// Every record of the log at `path` and its rotated files, oldest first (nothing is
/// checked: see [`verify`]).
pub fn read_records(path: &Path) -> Result<Vec<AuditRecord>, AuditError> {
    let mut out = Vec::new();
    for file in log_files(path) {
        let f =
            toolhost_calls::private::open_regular_file(&file).map_err(|source| AuditError::Io {
                action: "open",
                path: file.clone(),
                source,
            })?;
        for (i, line) in lines(f, &file)?.iter().enumerate() {
            let record = serde_json::from_slice(line).map_err(|e| AuditError::Broken {
                file: file.clone(),
                line: i as u64 + 1,
                reason: format!("not an audit record ({e})"),
            })?;
            out.push(record);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_is_seq_colon_sha256() {
        let sha = "AB".repeat(32);
        let point: ChainPoint = format!("42:{sha}").parse().expect("parse");
        assert_eq!(point.seq, 42);
        assert_eq!(point.sha256, "ab".repeat(32), "lower-cased");
        for bad in ["42", "x:ab", "0:abab", &format!("1:{}", "g".repeat(64))] {
            let err = bad.parse::<ChainPoint>().expect_err(bad);
            assert!(err.to_string().contains("SEQ:SHA256"), "{err}");
        }
    }

    #[test]
    fn a_range_of_lines_is_named_with_its_count() {
        assert_eq!(
            lines_with(3, 3, "was cut", "were cut"),
            "the line with seq 3 was cut"
        );
        assert_eq!(
            lines_with(21, 40, "is gone", "are gone"),
            "the 20 lines with seq 21-40 are gone"
        );
    }
}
