//! The audit log's writer: one thread fed by a bounded queue, appending one line per call
//! with the previous line's sha256 as `prev`, rotating by size.
//!
//! Several processes may share one log (`serve` and a one-shot `toolhost call`): each
//! line is appended under an exclusive lock on the file (`flock`), and a writer that
//! finds the file longer than it left it (or a new file at the path, rotated by another
//! process) reads the last line again before it chains to it. The file is opened 0600 in a
//! 0700 folder through `sys/private.rs` (a link at the path or at its folder is refused).
//! Lines go to the unbuffered file as soon as the writer takes them, several to one
//! `write` under load: after a write the writer gathers for 2 ms instead of being woken by
//! every call (a wake-up per call cost more than the write on these machines), so a line
//! waits at most that long in memory. The file is fsynced when it is rotated and when
//! the log is closed.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::record::{AuditRecord, GENESIS, canonical_json, sha256_hex};

/// A record on its way to the writer: the line without `prev` and `arguments_sha256`
/// (computed by the writer, off the call path), and the arguments if the call had them.
pub(super) struct Pending {
    pub(super) record: AuditRecord,
    pub(super) arguments: Option<serde_json::Value>,
    pub(super) include_arguments: bool,
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

/// The file the writer appends to, and what it knows of its end.
struct Open {
    file: File,
    ino: u64,
    /// The length after our last line (`u64::MAX`: not known yet).
    len: u64,
    /// sha256 of the last line.
    last: String,
}

/// The log file and its rotation.
pub(super) struct Sink {
    path: PathBuf,
    max_bytes: u64,
    keep: usize,
    open: Option<Open>,
    /// The last line's hash when this writer rotated it away and kept no rotated file.
    carried: Option<String>,
}

enum Step {
    Done,
    Reopen,
}

impl Sink {
    /// The log at `path` (its folder is created 0700; the file 0600 on first open).
    pub(super) fn new(path: PathBuf, max_bytes: u64, keep: usize) -> io::Result<Sink> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            crate::sys::private::ensure_private_dir(dir)?;
        }
        let mut sink = Sink {
            path,
            max_bytes,
            keep,
            open: None,
            carried: None,
        };
        sink.reopen()?;
        Ok(sink)
    }

    fn reopen(&mut self) -> io::Result<()> {
        let file = crate::sys::private::open_private_file(&self.path)?;
        let ino = file.metadata()?.ino();
        self.open = Some(Open {
            file,
            ino,
            len: u64::MAX,
            last: String::new(),
        });
        Ok(())
    }

    /// Appends `records` in order, each with `prev` set to the hash of the line before
    /// it: one lock and one write for as many as fit before a rotation.
    pub(super) fn append(&mut self, records: &mut [AuditRecord]) -> io::Result<()> {
        let mut done = 0;
        let mut reopened = 0;
        while done < records.len() {
            if self.open.is_none() {
                self.reopen()?;
            }
            match self.append_locked(&mut records[done..]) {
                Ok((n, Step::Done)) => done += n,
                Ok((n, Step::Reopen)) => {
                    done += n;
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

    /// Writes as many of `records` as fit before a rotation, under the file's lock: how
    /// many, and whether the file must be opened again (rotated, here or elsewhere).
    fn append_locked(&mut self, records: &mut [AuditRecord]) -> io::Result<(usize, Step)> {
        let Some(open) = self.open.as_mut() else {
            return Ok((0, Step::Reopen));
        };
        open.file.lock()?;
        let step = (|| {
            // Another process rotated the file: append to the one at the path now.
            match std::fs::symlink_metadata(&self.path) {
                Ok(m) if m.ino() == open.ino => {}
                _ => return Ok((0, Step::Reopen)),
            }
            let mut len = open.file.metadata()?.len();
            if len != open.len {
                open.last = last_hash(&open.file, len, &self.path, self.carried.as_deref())?;
                if len > 0 && !ends_with_newline(&open.file, len)? {
                    // A torn line (a crash mid-write): ended here, so `verify` names it.
                    open.file.write_all_at(b"\n", len)?;
                    len += 1;
                }
            }
            let mut out = Vec::new();
            let mut last = open.last.clone();
            let mut written = 0;
            let mut step = Step::Done;
            for record in records.iter_mut() {
                record.prev.clone_from(&last);
                let line = serde_json::to_vec(record).map_err(io::Error::other)?;
                let end = len + out.len() as u64;
                if self.max_bytes > 0 && end > 0 && end + line.len() as u64 + 1 > self.max_bytes {
                    step = Step::Reopen;
                    break;
                }
                last = sha256_hex(&line);
                out.extend_from_slice(&line);
                out.push(b'\n');
                written += 1;
            }
            if !out.is_empty() {
                open.file.write_all_at(&out, len)?;
                open.len = len + out.len() as u64;
                open.last = last;
            }
            if matches!(step, Step::Reopen) {
                open.file.sync_all()?;
                self.carried = Some(open.last.clone());
                rotate(&self.path, self.keep)?;
            }
            Ok((written, step))
        })();
        let _ = open.file.unlock();
        step
    }

    /// fsyncs the file.
    pub(super) fn sync(&mut self) -> io::Result<()> {
        match &self.open {
            Some(open) => open.file.sync_all(),
            None => Ok(()),
        }
    }
}

/// Shifts the rotated files up by one (dropping the oldest past `keep`) and moves the
/// log to `.1` (or removes it when `keep` is 0).
fn rotate(path: &Path, keep: usize) -> io::Result<()> {
    let ignore_missing = |r: io::Result<()>| match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    };
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

/// The hash the next line chains to: the last line of `file` (`len` bytes long), or for
/// an empty file the last line of the newest rotated file, else `carried`, else zeros.
fn last_hash(file: &File, len: u64, path: &Path, carried: Option<&str>) -> io::Result<String> {
    if len > 0 {
        return Ok(sha256_hex(&last_line(file, len)?));
    }
    match crate::sys::private::open_regular_file(&rotated(path, 1)) {
        Ok(older) => {
            let len = older.metadata()?.len();
            if len > 0 {
                return Ok(sha256_hex(&last_line(&older, len)?));
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    Ok(carried.unwrap_or(GENESIS).to_owned())
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

/// The most lines written with one lock and one `write`.
const BATCH: usize = 256;

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
            write(&mut sink, &mut batch);
            if ended {
                break;
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
fn ready(msg: Msg) -> AuditRecord {
    let Msg::Record(pending) = msg;
    let Pending {
        mut record,
        arguments,
        include_arguments,
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
    use crate::audit::record::AuditCaller;
    use crate::calls::decision::Decision;

    fn record(n: usize) -> AuditRecord {
        AuditRecord {
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
            prev: String::new(),
        }
    }

    #[test]
    fn two_writers_of_one_log_keep_one_chain_across_rotations() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log").join("audit.jsonl");
        let mut a = Sink::new(path.clone(), 1500, 20).expect("a");
        let mut b = Sink::new(path.clone(), 1500, 20).expect("b");
        for n in 0..30 {
            let sink = if n % 3 == 0 { &mut a } else { &mut b };
            sink.append(&mut [record(n)]).expect("append");
        }
        assert!(rotated(&path, 1).exists(), "rotated");
        let report = crate::audit::verify(&path).expect("one chain");
        assert_eq!(report.lines, 30);
        assert!(!report.starts_after_removed_files);
        // A torn last line (a crash mid-write) is ended and named by verify.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .expect("open");
        f.write_all(b"{\"time\":").expect("torn");
        a.append(&mut [record(99), record(100)])
            .expect("append after a torn line");
        let broken = crate::audit::verify(&path).expect_err("the torn line");
        assert!(
            broken.to_string().contains("not an audit record"),
            "{broken}"
        );
    }
}
