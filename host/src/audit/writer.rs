//! The audit log's writer: one thread fed by a bounded queue, appending one line per call
//! with the previous line's sha256 as `prev`, rotating by size.
//!
//! Several processes may share one log (`serve` and a one-shot `toolhost call`): each
//! line is appended under an exclusive lock on the file (`flock`), and a writer that
//! finds the file longer than it left it (or a new file at the path, rotated by another
//! process) reads the last line again before it chains to it. The file is opened 0600 in a
//! 0700 folder through `sys/private.rs` (a link at the path or at its folder is refused).
//! Each line is written with one `write` on the unbuffered file (nothing waits in a
//! buffer); the file is fsynced when it is rotated and when the log is closed.

use std::fs::File;
use std::io::{self, Seek as _, SeekFrom, Write as _};
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

    /// Appends `record` with `prev` set to the last line's hash.
    pub(super) fn append(&mut self, record: &mut AuditRecord) -> io::Result<()> {
        for _ in 0..16 {
            if self.open.is_none() {
                self.reopen()?;
            }
            let step = self.append_locked(record);
            match step {
                Ok(Step::Done) => return Ok(()),
                Ok(Step::Reopen) => self.open = None,
                Err(e) => {
                    self.open = None;
                    return Err(e);
                }
            }
        }
        Err(io::Error::other(format!(
            "{} kept changing under the writer (rotated by another process 16 times in a row)",
            self.path.display()
        )))
    }

    fn append_locked(&mut self, record: &mut AuditRecord) -> io::Result<Step> {
        let Some(open) = self.open.as_mut() else {
            return Ok(Step::Reopen);
        };
        open.file.lock()?;
        let step = (|| {
            // Another process rotated the file: append to the one at the path now.
            match std::fs::symlink_metadata(&self.path) {
                Ok(m) if m.ino() == open.ino => {}
                _ => return Ok(Step::Reopen),
            }
            let len = open.file.metadata()?.len();
            if len != open.len {
                open.last = last_hash(&open.file, len, &self.path, self.carried.as_deref())?;
                if len > 0 && !ends_with_newline(&open.file, len)? {
                    // A torn line (a crash mid-write): ended here, so `verify` names it.
                    open.file.seek(SeekFrom::End(0))?;
                    open.file.write_all(b"\n")?;
                }
            }
            record.prev.clone_from(&open.last);
            let mut line = serde_json::to_vec(record).map_err(io::Error::other)?;
            let len = open.file.metadata()?.len();
            if self.max_bytes > 0 && len > 0 && len + line.len() as u64 + 1 > self.max_bytes {
                open.file.sync_all()?;
                self.carried = Some(open.last.clone());
                rotate(&self.path, self.keep)?;
                return Ok(Step::Reopen);
            }
            let hash = sha256_hex(&line);
            line.push(b'\n');
            open.file.seek(SeekFrom::End(0))?;
            open.file.write_all(&line)?;
            open.len = len + line.len() as u64;
            open.last = hash;
            Ok(Step::Done)
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

/// The writer thread: writes what it is sent until every sender is gone, then fsyncs.
/// A line that cannot be written is retried (with a growing pause, logged) rather than
/// dropped: the queue fills and calls wait.
pub(super) fn run(mut rx: tokio::sync::mpsc::Receiver<Msg>, mut sink: Sink) {
    while let Some(msg) = rx.blocking_recv() {
        match msg {
            Msg::Record(pending) => {
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
                let mut pause = Duration::from_millis(100);
                while let Err(e) = sink.append(&mut record) {
                    tracing::error!(
                        file = %sink.path.display(),
                        "could not write to the audit log (calls wait until it can): {e}"
                    );
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
    if let Err(e) = sink.sync() {
        tracing::error!(file = %sink.path.display(), "could not fsync the audit log: {e}");
    }
}

#[cfg(test)]
mod tests {
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
            sink.append(&mut record(n)).expect("append");
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
        a.append(&mut record(99)).expect("append after a torn line");
        let broken = crate::audit::verify(&path).expect_err("the torn line");
        assert!(
            broken.to_string().contains("not an audit record"),
            "{broken}"
        );
    }
}
