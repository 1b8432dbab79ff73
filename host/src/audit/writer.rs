//! The audit log's writer: one thread fed by a bounded queue, appending one line per call
//! with its number (`seq`) and the previous line's sha256 (`prev`), recording the chain's
//! end in the head file (`head.rs`), rotating by size.
//!
//! Several processes may share one log (`serve` and a one-shot `toolhost call`): each
//! line is appended under an exclusive lock on the file (`flock`), and a writer that
//! finds the file longer than it left it (or a new file at the path, rotated by another
//! process, or another head file) reads the last line and the head again before it
//! chains to them. The file is opened 0600 in a 0700 folder through `sys/private.rs` (a
//! link at the path or at its folder is refused), the head beside it the same way.
//! Lines go to the unbuffered file as soon as the writer takes them, several to one
//! `write` under load: after a write the writer gathers for 2 ms instead of being woken by
//! every call (a wake-up per call cost more than the write on these machines), so a line
//! waits at most that long in memory. A write takes at most a few lines (`BATCH`) and,
//! with more queued, the writer yields its CPU before the next: hashing a long batch in
//! one go made a call on a shared or single CPU wait hundreds of microseconds behind it. The file and the head are fsynced when the file is
//! rotated and when the log is closed.
//!
//! **A log whose end disagrees with its head.** Before it chains to the log, the writer
//! checks the log's last line (or, in a log just rotated, the last line of `FILE.1`)
//! against the head: the same `seq` and sha256, or the `pending` batch of a writer that
//! ended mid-batch. When they disagree (the end was cut, the last line edited, lines
//! added that no writer recorded, the head removed or damaged), it does not chain
//! silently to what it found, and it does not stop writing either (the call would go
//! unrecorded, or every call would wait on a log no writer can fix). It logs an error and
//! writes the next line with a `mismatch` field saying what the head recorded and what
//! the log held, chained to the head's last line (the line a writer really wrote) and
//! numbered past both, so no `seq` is used twice and no line is lost. That line stays in
//! the log: `verify` names it, and the syslog checkpoints carry it, for as long as the log
//! keeps it. With no head to go by (removed, or unreadable), the line chains to the log's
//! last line and a new head is written from the log as found; the `mismatch` field says
//! the head was missing. A log without a head whose last line has no `seq` (written by an
//! older toolhost) or that has no lines at all is adopted quietly: the head starts there.

use std::fs::File;
use std::io::{self, BufRead as _};
use std::os::unix::fs::{FileExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::head::{Head, HeadFile, HeadState};
use super::record::{AuditRecord, ChainPoint, GENESIS, HeadMismatch, canonical_json, sha256_hex};
use super::syslog::Syslog;

/// A record on its way to the writer: the line without `seq`, `prev` and
/// `arguments_sha256` (set by the writer, off the call path), and the arguments if the
/// call had them.
pub(super) struct Pending {
    pub(super) record: AuditRecord,
    pub(super) arguments: Option<serde_json::Value>,
    pub(super) include_arguments: bool,
    /// Told once the line is stored (the shared log, whose calls wait for that).
    pub(super) committed: Option<tokio::sync::oneshot::Sender<()>>,
}

/// What the writer thread is sent.
pub(super) enum Msg {
    /// A line to write.
    Record(Box<Pending>),
}

/// The path of the `n`th rotated file (`audit.jsonl.1` is the newest).
pub(crate) fn rotated(path: &Path, n: usize) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

/// The numbers of the rotated files of the log at `path` that exist (`FILE.N`), in
/// ascending order, gaps and all.
pub(crate) fn rotated_numbers(path: &Path) -> io::Result<Vec<usize>> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Ok(Vec::new());
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let mut prefix = name.as_encoded_bytes().to_vec();
    prefix.push(b'.');
    let entries = match std::fs::read_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        other => other?,
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry?;
        let file_name = entry.file_name();
        let Some(rest) = file_name.as_encoded_bytes().strip_prefix(prefix.as_slice()) else {
            continue;
        };
        let number = std::str::from_utf8(rest)
            .ok()
            .and_then(|r| r.parse::<usize>().ok())
            .filter(|n| *n > 0 && n.to_string().as_bytes() == rest);
        out.extend(number);
    }
    out.sort_unstable();
    Ok(out)
}

/// The log file the writer appends to, and what it knows of its end.
struct Open {
    file: File,
    ino: u64,
    /// The length after our last line (`u64::MAX`: not known yet).
    len: u64,
}

/// The log's last line as a writer finds it.
struct Tail {
    point: ChainPoint,
    /// Whether it is an audit record at all (a torn or foreign line is not).
    record: bool,
}

/// The `seq` of a line, read without the rest of it (`None`: no audit record).
fn seq_of(line: &[u8]) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Numbered {
        #[serde(default)]
        seq: u64,
        #[allow(dead_code, reason = "only there to tell a record from other JSON")]
        prev: String,
    }
    serde_json::from_slice::<Numbered>(line).ok().map(|n| n.seq)
}

impl Tail {
    fn of(line: &[u8]) -> Tail {
        let seq = seq_of(line);
        Tail {
            point: ChainPoint {
                seq: seq.unwrap_or(0),
                sha256: sha256_hex(line),
            },
            record: seq.is_some(),
        }
    }
}

/// The log file and its head, and their rotation.
pub(super) struct Sink {
    path: PathBuf,
    max_bytes: u64,
    keep: usize,
    open: Option<Open>,
    head_file: HeadFile,
    /// The head as last read or written (current while `open.len` is).
    head: Head,
    /// The line the next one chains to.
    chain: ChainPoint,
    /// The next line's `seq`.
    next_seq: u64,
    /// What the next line records of a log that disagreed with its head.
    mismatch: Option<HeadMismatch>,
    syslog: Option<Syslog>,
}

enum Step {
    Done,
    Reopen,
}

impl Sink {
    /// The log at `path` (its folder is created 0700; the file and its head 0600 on first
    /// open), checked against its head; checkpoints go to the syslog socket `syslog`.
    pub(super) fn new(
        path: PathBuf,
        max_bytes: u64,
        keep: usize,
        syslog: Option<PathBuf>,
    ) -> io::Result<Sink> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            toolhost_calls::private::ensure_private_dir(dir)?;
        }
        let fresh = Head {
            last: ChainPoint {
                seq: 0,
                sha256: GENESIS.to_owned(),
            },
            pending: None,
            oldest: 1,
            rotated: 0,
        };
        let mut sink = Sink {
            head_file: HeadFile::new(&path),
            syslog: syslog.map(|socket| Syslog::new(socket, &path)),
            path,
            max_bytes,
            keep,
            open: None,
            chain: fresh.last.clone(),
            next_seq: 1,
            head: fresh,
            mismatch: None,
        };
        sink.reopen()?;
        // Checked now, so a new log has its head from the start and a disagreement is
        // logged when the host starts, not at its first call.
        sink.locked(|_, _| ())?;
        Ok(sink)
    }

    fn reopen(&mut self) -> io::Result<()> {
        let file = toolhost_calls::private::open_private_file(&self.path)?;
        let ino = file.metadata()?.ino();
        self.open = Some(Open {
            file,
            ino,
            len: u64::MAX,
        });
        Ok(())
    }

    /// Appends `records` in order, each numbered and chained to the line before it: one
    /// lock and one write for as many as fit before a rotation. Those written are taken
    /// out of `records`, also when a later step fails (so a retry writes no line twice).
    pub(super) fn append(&mut self, records: &mut Vec<AuditRecord>) -> io::Result<()> {
        let mut done = 0;
        let result = self.append_counting(records, &mut done);
        records.drain(..done);
        result
    }

    fn append_counting(&mut self, records: &mut [AuditRecord], done: &mut usize) -> io::Result<()> {
        let mut reopened = 0;
        while *done < records.len() {
            if self.open.is_none() {
                self.reopen()?;
            }
            let batch = &mut records[*done..];
            let result = self.locked(|sink, len| sink.write_locked(batch, len));
            let step = match result {
                Ok(Some((n, step))) => {
                    self.checkpoint(&records[*done..*done + n]);
                    *done += n;
                    step
                }
                Ok(None) => Ok(Step::Reopen),
                Err(e) => Err(e),
            };
            match step {
                Ok(Step::Done) => {}
                Ok(Step::Reopen) => {
                    self.open = None;
                    reopened += 1;
                    if reopened > 16 {
                        return Err(io::Error::other(format!(
                            "{} kept changing under the writer (rotated 16 times in a row)",
                            self.path.display()
                        )));
                    }
                }
                Err(e) => {
                    self.open = None;
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Runs `f` under the log's lock, after making sure the file open is the one at the
    /// path (`None` when it is not: open it again) and that what this writer knows of the
    /// log's end and its head is current. `f` is given the file's length.
    fn locked<T>(&mut self, f: impl FnOnce(&mut Sink, u64) -> T) -> io::Result<Option<T>> {
        let Some(open) = self.open.as_ref() else {
            return Ok(None);
        };
        open.file.lock()?;
        let result = (|| {
            let Some(open) = self.open.as_mut() else {
                return Ok(None);
            };
            // Another process rotated the file: append to the one at the path now.
            match std::fs::symlink_metadata(&self.path) {
                Ok(m) if m.ino() == open.ino => {}
                _ => return Ok(None),
            }
            let mut len = open.file.metadata()?.len();
            if len != open.len || !self.head_file.unchanged() {
                let tail = self.tail(len)?;
                self.reconcile(tail)?;
                let Some(open) = self.open.as_mut() else {
                    return Ok(None);
                };
                if len > 0 && !ends_with_newline(&open.file, len)? {
                    // A torn line (a crash mid-write): ended here, so `verify` names it.
                    open.file.write_all_at(b"\n", len)?;
                    len += 1;
                }
                open.len = len;
            }
            Ok(Some(f(self, len)))
        })();
        if let Some(open) = &self.open {
            let _ = open.file.unlock();
        }
        result
    }

    /// The log's last line: of the file (`len` bytes long), or for an empty file of the
    /// newest rotated file; `None` when neither has a line.
    fn tail(&self, len: u64) -> io::Result<Option<Tail>> {
        let Some(open) = &self.open else {
            return Ok(None);
        };
        if len > 0 {
            return Ok(Some(Tail::of(&last_line(&open.file, len)?)));
        }
        match toolhost_calls::private::open_regular_file(&rotated(&self.path, 1)) {
            Ok(older) => {
                let len = older.metadata()?.len();
                if len > 0 {
                    return Ok(Some(Tail::of(&last_line(&older, len)?)));
                }
                Ok(None)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Checks the log's end (`tail`) against the head and sets what the next line chains
    /// to: see the module's comment for what happens when they disagree.
    fn reconcile(&mut self, tail: Option<Tail>) -> io::Result<()> {
        let found = tail.as_ref().map_or_else(
            || ChainPoint {
                seq: 0,
                sha256: GENESIS.to_owned(),
            },
            |t| t.point.clone(),
        );
        match self.head_file.read()? {
            HeadState::Found(head) => {
                // Every line rotated away (`keep = 0`): the head's last line is the end.
                let emptied = tail.is_none() && head.oldest > head.last.seq;
                if head.ends_at(&found) || emptied {
                    self.chain = if emptied { head.last.clone() } else { found };
                    self.next_seq = self.chain.seq + 1;
                    self.mismatch = None;
                } else {
                    let pending = head.pending.as_ref().map_or(0, |p| p.seq);
                    self.next_seq = head.last.seq.max(pending).max(found.seq) + 1;
                    self.chain = head.last.clone();
                    self.disagree(Some(head.last.clone()), found);
                }
                self.head = Head {
                    last: self.chain.clone(),
                    pending: None,
                    ..head
                };
            }
            HeadState::Missing if tail.as_ref().is_none_or(|t| t.record && t.point.seq == 0) => {
                // A new log, or one an older toolhost wrote: its head starts here.
                self.head = self.rebuilt_head(found.clone())?;
                self.chain = found;
                self.next_seq = self.chain.seq + 1;
                self.mismatch = None;
                self.head_file.write(&self.head)?;
            }
            HeadState::Missing | HeadState::Unreadable(_) => {
                self.head = self.rebuilt_head(found.clone())?;
                self.chain = found.clone();
                self.next_seq = found.seq + 1;
                self.disagree(None, found);
            }
        }
        Ok(())
    }

    /// Notes a disagreement between the head (`head`, `None`: no head) and the log's end
    /// (`found`) for the next line, and logs it.
    fn disagree(&mut self, head: Option<ChainPoint>, found: ChainPoint) {
        let said = match &head {
            Some(h) => format!(
                "its head ({}) records seq {} as the last line",
                self.head_file.path().display(),
                h.seq
            ),
            None => format!(
                "its head ({}) is missing or unreadable",
                self.head_file.path().display()
            ),
        };
        let text = format!(
            "the audit log {} does not end where {said} (its last line is seq {} with \
             sha256 {}): it was cut, edited or added to outside toolhost, or the head was \
             removed; the next line records this, and `toolhost audit verify` names it",
            self.path.display(),
            found.seq,
            found.sha256
        );
        tracing::error!("{text}");
        if let Some(syslog) = &mut self.syslog {
            syslog.alert(&text);
        }
        self.mismatch = Some(HeadMismatch { head, found });
    }

    /// A head for the log as it is: its last line `last`, the oldest kept line's `seq` (1
    /// when it has none), the rotated files there are.
    fn rebuilt_head(&self, last: ChainPoint) -> io::Result<Head> {
        let rotated_files = rotated_numbers(&self.path)?;
        let oldest_file = match rotated_files.last() {
            Some(n) => rotated(&self.path, *n),
            None => self.path.clone(),
        };
        let oldest = first_seq(&oldest_file)?.filter(|s| *s > 0).unwrap_or(1);
        Ok(Head {
            last,
            pending: None,
            oldest,
            rotated: rotated_files.last().map_or(0, |n| *n as u64),
        })
    }

    /// Writes as many of `records` as fit before a rotation to the log (`len` bytes long),
    /// under its lock: how many were written, and whether the file must be opened again
    /// (rotated) or what failed (after the lines counted, if any).
    fn write_locked(&mut self, records: &mut [AuditRecord], len: u64) -> (usize, io::Result<Step>) {
        let mut out = Vec::new();
        let mut chain = self.chain.clone();
        let mut written = 0;
        let mut step = Step::Done;
        for record in records.iter_mut() {
            record.seq = self.next_seq + written as u64;
            record.prev.clone_from(&chain.sha256);
            record.mismatch = if written == 0 {
                self.mismatch.clone()
            } else {
                None
            };
            let line = match serde_json::to_vec(record) {
                Ok(line) => line,
                Err(e) => return (0, Err(io::Error::other(e))),
            };
            let end = len + out.len() as u64;
            if self.max_bytes > 0 && end > 0 && end + line.len() as u64 + 1 > self.max_bytes {
                record.mismatch = None;
                step = Step::Reopen;
                break;
            }
            chain = ChainPoint {
                seq: record.seq,
                sha256: sha256_hex(&line),
            };
            out.extend_from_slice(&line);
            out.push(b'\n');
            written += 1;
        }
        if !out.is_empty() {
            if let Err(e) = self.write_batch(&out, len, chain) {
                return (0, Err(e));
            }
            self.next_seq += written as u64;
        }
        if matches!(step, Step::Reopen) {
            return (written, self.rotate_locked().map(|()| Step::Reopen));
        }
        (written, Ok(Step::Done))
    }

    /// Writes the lines `out` at `len`, the last of them `last`, recording them in the
    /// head: first as the batch on its way, then as written. A writer that dies between
    /// the two leaves a log the next one accepts (it ends at the head's `pending`).
    fn write_batch(&mut self, out: &[u8], len: u64, last: ChainPoint) -> io::Result<()> {
        let Some(open) = self.open.as_mut() else {
            return Err(io::Error::other("the audit log is not open"));
        };
        self.head.pending = Some(last.clone());
        self.head_file.write(&self.head)?;
        open.file.write_all_at(out, len)?;
        open.len = len + out.len() as u64;
        self.head.last = last.clone();
        self.head.pending = None;
        self.chain = last;
        self.mismatch = None;
        if let Err(e) = self.head_file.write(&self.head) {
            // The lines are written and the head says they were on their way: the next
            // batch reads both again and goes on (or fails on the head, and is retried).
            open.len = u64::MAX;
            tracing::error!(
                file = %self.head_file.path().display(),
                "could not record the audit log's last line in its head: {e}"
            );
        }
        Ok(())
    }

    /// fsyncs the log, rotates it and records in the head what rotation dropped.
    fn rotate_locked(&mut self) -> io::Result<()> {
        let Some(open) = self.open.as_ref() else {
            return Err(io::Error::other("the audit log is not open"));
        };
        open.file.sync_all()?;
        let len = open.file.metadata()?.len();
        let dropped = dropped_last_seq(&self.path, &open.file, len, self.keep)?;
        rotate(&self.path, self.keep)?;
        if let Some(seq) = dropped {
            self.head.oldest = self.head.oldest.max(seq + 1);
        }
        self.head.rotated = (self.head.rotated + 1).min(self.keep as u64);
        self.head_file.write(&self.head)?;
        self.head_file.sync()
    }

    /// Sends the checkpoint of the lines just written (`records`) to syslog, if asked for.
    fn checkpoint(&mut self, records: &[AuditRecord]) {
        let (Some(syslog), Some(first), Some(last)) =
            (&mut self.syslog, records.first(), records.last())
        else {
            return;
        };
        syslog.checkpoint(first.seq, &self.chain, &last.tool, &last.outcome);
    }

    /// fsyncs the file and its head.
    pub(super) fn sync(&mut self) -> io::Result<()> {
        if let Some(open) = &self.open {
            open.file.sync_all()?;
        }
        self.head_file.sync()
    }
}

/// The `seq` of the newest line a rotation of the log at `path` (the open `file`, `len`
/// bytes long) with `keep` rotated files drops, if it drops any: the log itself when
/// `keep` is 0, else `FILE.keep` and any older file past it (left by a larger `keep`).
fn dropped_last_seq(path: &Path, file: &File, len: u64, keep: usize) -> io::Result<Option<u64>> {
    if keep == 0 {
        return Ok(if len > 0 {
            seq_of(&last_line(file, len)?)
        } else {
            None
        });
    }
    let mut newest = None;
    for n in rotated_numbers(path)?.into_iter().filter(|n| *n >= keep) {
        let older = match toolhost_calls::private::open_regular_file(&rotated(path, n)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            other => other?,
        };
        let len = older.metadata()?.len();
        if len > 0
            && let Some(seq) = seq_of(&last_line(&older, len)?)
        {
            newest = newest.max(Some(seq));
        }
    }
    Ok(newest)
}

/// Shifts the rotated files up by one (dropping `FILE.keep` and any older file past it)
/// and moves the log to `.1` (or removes it when `keep` is 0).
fn rotate(path: &Path, keep: usize) -> io::Result<()> {
    let ignore_missing = |r: io::Result<()>| match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    };
    for n in rotated_numbers(path)?.into_iter().filter(|n| *n > keep) {
        ignore_missing(std::fs::remove_file(rotated(path, n)))?;
    }
    if keep == 0 {
        return ignore_missing(std::fs::remove_file(path));
    }
    for n in (1..keep).rev() {
        ignore_missing(std::fs::rename(rotated(path, n), rotated(path, n + 1)))?;
    }
    std::fs::rename(path, rotated(path, 1))
}

fn ends_with_newline(file: &File, len: u64) -> io::Result<bool> {
    let mut b = [0u8; 1];
    file.read_exact_at(&mut b, len - 1)?;
    Ok(b[0] == b'\n')
}

/// The `seq` of the first line of the file at `path` (`None`: no file, no line, or no
/// audit record).
fn first_seq(path: &Path) -> io::Result<Option<u64>> {
    let file = match toolhost_calls::private::open_regular_file(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        other => other?,
    };
    let mut line = Vec::new();
    io::BufReader::new(file).read_until(b'\n', &mut line)?;
    if line.last() == Some(&b'\n') {
        line.pop();
    }
    Ok(seq_of(&line))
}

/// The last line of `file` (without its newline).
pub(super) fn last_line(file: &File, len: u64) -> io::Result<Vec<u8>> {
    const CHUNK: u64 = 8192;
    let mut end = len;
    if end > 0 && ends_with_newline(file, end)? {
        end -= 1;
    }
    let mut pos = end;
    let mut tail: Vec<u8> = Vec::new();
    while pos > 0 {
        let size = CHUNK.min(pos);
        pos -= size;
        let mut chunk = vec![0u8; usize::try_from(size).unwrap_or(0)];
        file.read_exact_at(&mut chunk, pos)?;
        if let Some(i) = chunk.iter().rposition(|&b| b == b'\n') {
            chunk.drain(..=i);
            chunk.extend_from_slice(&tail);
            return Ok(chunk);
        }
        chunk.extend_from_slice(&tail);
        tail = chunk;
    }
    Ok(tail)
}

/// After writing, how long the writer gathers lines before it writes again (while calls
/// keep coming): calls then never wake it, which on these machines costs more than the
/// write. When nothing came, it sleeps until the next line.
const GATHER: Duration = Duration::from_millis(2);

/// The most lines written with one lock and one `write`: small enough that hashing and
/// writing them holds a CPU for tens of microseconds, not hundreds, before the writer
/// yields it.
const BATCH: usize = 8;

/// The writer thread: writes what it is sent until every sender is gone, then fsyncs.
/// Lines that cannot be written are retried (with a growing pause, logged) rather than
/// dropped: the queue fills and calls wait.
pub(super) fn run(mut rx: tokio::sync::mpsc::Receiver<Msg>, mut sink: Sink) {
    use tokio::sync::mpsc::error::TryRecvError;
    let mut batch: Vec<AuditRecord> = Vec::with_capacity(BATCH);
    let mut ended = false;
    while !ended {
        match rx.blocking_recv() {
            Some(msg) => batch.push(ready(msg)),
            None => break,
        }
        loop {
            while batch.len() < BATCH {
                match rx.try_recv() {
                    Ok(msg) => batch.push(ready(msg)),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        ended = true;
                        break;
                    }
                }
            }
            let full = batch.len() >= BATCH;
            write(&mut sink, &mut batch);
            if ended {
                break;
            }
            if full {
                // More may be queued: write it at once, after letting a thread that
                // serves calls run if one is waiting for this CPU (a batch's hashing is
                // CPU work that a call on a shared or single CPU would otherwise wait
                // behind).
                std::thread::yield_now();
                continue;
            }
            std::thread::sleep(GATHER);
            match rx.try_recv() {
                Ok(msg) => batch.push(ready(msg)),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    ended = true;
                    break;
                }
            }
        }
    }
    write(&mut sink, &mut batch);
    if let Err(e) = sink.sync() {
        tracing::error!(file = %sink.path.display(), "could not fsync the audit log: {e}");
    }
}

/// The record of `msg` with its arguments hashed (and kept, if asked for).
pub(super) fn ready(msg: Msg) -> AuditRecord {
    let Msg::Record(pending) = msg;
    let Pending {
        mut record,
        arguments,
        include_arguments,
        committed: _,
    } = *pending;
    if let Some(args) = arguments {
        record.arguments_sha256 = sha256_hex(canonical_json(&args).as_bytes());
        if include_arguments {
            record.arguments = Some(args);
        }
    }
    record
}

/// Writes `batch` (retrying until it can) and empties it.
fn write(sink: &mut Sink, batch: &mut Vec<AuditRecord>) {
    if batch.is_empty() {
        return;
    }
    let mut pause = Duration::from_millis(100);
    while let Err(e) = sink.append(batch) {
        tracing::error!(
            file = %sink.path.display(),
            "could not write to the audit log (calls wait until it can): {e}"
        );
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_secs(5));
    }
    batch.clear();
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;
    use crate::audit::ProblemKind;
    use crate::audit::head::{head_path, read_head};
    use crate::audit::record::AuditCaller;
    use toolhost_calls::decision::Decision;

    fn record(n: usize) -> AuditRecord {
        AuditRecord {
            seq: 0,
            time: "2026-12-01T00:00:00Z".to_owned(),
            profile: "p".to_owned(),
            frontend: "library".to_owned(),
            caller: AuditCaller {
                uid: None,
                token: None,
                client: None,
                session: format!("s{n}"),
                model: "none".to_owned(),
            },
            traceparent: None,
            tool: "echo".to_owned(),
            plugin: None,
            risk: None,
            decision: Decision::RanWithoutAsking,
            outcome: "ok".to_owned(),
            duration_ms: 0.1,
            output_bytes: 2,
            output_id: None,
            arguments_sha256: String::new(),
            arguments: None,
            mismatch: None,
            prev: String::new(),
        }
    }

    fn head_of(path: &Path) -> Head {
        match read_head(path).expect("read the head") {
            HeadState::Found(head) => head,
            other => panic!("no head: {other:?}"),
        }
    }

    fn kinds(path: &Path) -> Vec<ProblemKind> {
        let report = crate::audit::verify(path, &[]).expect("verify");
        report.problems.iter().map(|p| p.kind).collect()
    }

    #[test]
    fn two_writers_of_one_log_keep_one_chain_and_one_numbering_across_rotations() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log").join("audit.jsonl");
        let mut a = Sink::new(path.clone(), 1500, 20, None).expect("a");
        let mut b = Sink::new(path.clone(), 1500, 20, None).expect("b");
        for n in 0..30 {
            let sink = if n % 3 == 0 { &mut a } else { &mut b };
            sink.append(&mut vec![record(n)]).expect("append");
        }
        assert!(rotated(&path, 1).exists(), "rotated");
        let report = crate::audit::verify(&path, &[]).expect("verify");
        assert!(report.is_ok(), "{:#?}", report.problems);
        assert_eq!(report.lines, 30);
        assert_eq!(report.seqs, Some((1, 30)));
        let head = head_of(&path);
        assert_eq!(head.last.seq, 30);
        assert_eq!(head.oldest, 1, "nothing dropped with keep = 20");
        assert!(toolhost_calls::private::is_private(&head_path(&path)).expect("stat"));
        // A torn last line (a crash mid-write) is ended; the next line says the log did not
        // end at its head, and verify names both.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .expect("open");
        f.write_all(b"{\"time\":").expect("torn");
        a.append(&mut vec![record(99), record(100)])
            .expect("append after a torn line");
        let found = kinds(&path);
        assert!(
            found.contains(&ProblemKind::NotARecord)
                && found.contains(&ProblemKind::WriterFoundMismatch),
            "{found:?}"
        );
        assert_eq!(head_of(&path).last.seq, 32, "numbered past the head");
    }

    #[test]
    fn a_writer_that_ended_between_its_lines_and_its_head_leaves_no_tampering() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.jsonl");
        let mut sink = Sink::new(path.clone(), 0, 5, None).expect("sink");
        sink.append(&mut vec![record(1), record(2)])
            .expect("append");
        let written = head_of(&path);
        // As a writer that died after writing lines 3-4 but before recording them: the
        // head still says 2, with 3-4 pending.
        sink.append(&mut vec![record(3), record(4)])
            .expect("append");
        let after = head_of(&path);
        let crashed = Head {
            pending: Some(after.last.clone()),
            ..written
        };
        std::fs::write(head_path(&path), crashed.encode()).expect("head");
        assert_eq!(kinds(&path), [], "a head left mid-batch is no tampering");
        let mut next = Sink::new(path.clone(), 0, 5, None).expect("reopen");
        next.append(&mut vec![record(5)]).expect("append");
        assert_eq!(kinds(&path), []);
        assert_eq!(head_of(&path).last.seq, 5);
    }

    #[test]
    fn rotation_records_what_it_drops_and_a_smaller_keep_drops_older_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.jsonl");
        let mut sink = Sink::new(path.clone(), 1200, 3, None).expect("sink");
        for n in 0..40 {
            sink.append(&mut vec![record(n)]).expect("append");
        }
        let head = head_of(&path);
        assert_eq!(head.rotated, 3);
        assert!(head.oldest > 1, "the oldest file was dropped: {head:?}");
        let report = crate::audit::verify(&path, &[]).expect("verify");
        assert!(report.is_ok(), "{:#?}", report.problems);
        assert_eq!(report.seqs.map(|s| s.0), Some(head.oldest));
        // Fewer kept files: the next rotation drops the files past the new keep too.
        drop(sink);
        let mut fewer = Sink::new(path.clone(), 1200, 1, None).expect("sink");
        for n in 0..6 {
            fewer.append(&mut vec![record(n)]).expect("append");
        }
        assert!(!rotated(&path, 2).exists() && !rotated(&path, 3).exists());
        assert_eq!(head_of(&path).rotated, 1);
        let report = crate::audit::verify(&path, &[]).expect("verify");
        assert!(report.is_ok(), "{:#?}", report.problems);
        // Nothing kept: every rotation empties the log, and the head carries the chain.
        drop(fewer);
        let mut none = Sink::new(path.clone(), 1200, 0, None).expect("sink");
        for n in 0..8 {
            none.append(&mut vec![record(n)]).expect("append");
        }
        let report = crate::audit::verify(&path, &[]).expect("verify");
        assert!(report.is_ok(), "{:#?}", report.problems);
    }

    #[test]
    fn a_log_an_older_toolhost_wrote_gets_a_head_and_numbered_lines_after_its_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.jsonl");
        let mut sink = Sink::new(path.clone(), 0, 5, None).expect("sink");
        sink.append(&mut vec![record(1), record(2)])
            .expect("append");
        drop(sink);
        // Strip the numbers and the head, as an older toolhost left its log.
        let text = std::fs::read_to_string(&path).expect("read");
        let mut prev = GENESIS.to_owned();
        let mut old = String::new();
        for line in text.lines() {
            let mut v: serde_json::Value = serde_json::from_str(line).expect("json");
            let map = v.as_object_mut().expect("object");
            map.remove("seq");
            map.insert("prev".to_owned(), prev.clone().into());
            let line = serde_json::to_string(&v).expect("json");
            prev = sha256_hex(line.as_bytes());
            old.push_str(&line);
            old.push('\n');
        }
        std::fs::write(&path, old).expect("write");
        std::fs::remove_file(head_path(&path)).expect("remove the head");
        assert_eq!(kinds(&path), [ProblemKind::NoHead]);
        let mut sink = Sink::new(path.clone(), 0, 5, None).expect("adopt");
        assert_eq!(kinds(&path), [], "adopted on open");
        sink.append(&mut vec![record(3)]).expect("append");
        let report = crate::audit::verify(&path, &[]).expect("verify");
        assert!(report.is_ok(), "{:#?}", report.problems);
        assert_eq!(report.seqs, Some((1, 1)));
    }
}
