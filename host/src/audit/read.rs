//! Reading the audit log back: its files oldest first (the rotated ones, then the log),
//! every record, and the chain check that names the first line that breaks it.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};

use super::AuditError;
use super::record::{AuditRecord, GENESIS, sha256_hex};
use super::writer::rotated;

/// The log's files that exist, oldest first: `FILE.N`, ..., `FILE.1`, `FILE`.
pub fn log_files(path: &Path) -> Vec<PathBuf> {
    let mut rotated_files = Vec::new();
    let mut n = 1;
    loop {
        let p = rotated(path, n);
        if std::fs::symlink_metadata(&p).is_err() {
            break;
        }
        rotated_files.push(p);
        n += 1;
    }
    rotated_files.reverse();
    if std::fs::symlink_metadata(path).is_ok() {
        rotated_files.push(path.to_path_buf());
    }
    rotated_files
}

/// Each line of `file` (its bytes without the newline) with its number, in order.
fn lines(file: &Path) -> Result<Vec<Vec<u8>>, AuditError> {
    let io = |action, source| AuditError::Io {
        action,
        path: file.to_path_buf(),
        source,
    };
    let f = crate::sys::private::open_regular_file(file).map_err(|e| io("open", e))?;
    let mut out = Vec::new();
    for line in BufReader::new(f).split(b'\n') {
        out.push(line.map_err(|e| io("read", e))?);
    }
    Ok(out)
}

/// What `verify` found: how many lines in which files, and whether the chain starts
/// after rotated files that are gone (its first line's `prev` is not all zeros).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// The files checked, oldest first.
    pub files: Vec<PathBuf>,
    /// Lines checked.
    pub lines: u64,
    /// The oldest line's predecessor is in a rotated file no longer kept.
    pub starts_after_removed_files: bool,
}

/// Checks the chain of the log at `path` across its rotated files: every line is an
/// audit record whose `prev` is the sha256 of the line before it. The error names the
/// first line that breaks it.
pub fn verify(path: &Path) -> Result<VerifyReport, AuditError> {
    let files = log_files(path);
    if files.is_empty() {
        return Err(AuditError::Io {
            action: "read",
            path: path.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
        });
    }
    let mut expected: Option<String> = None;
    let mut previous: Option<(PathBuf, u64)> = None;
    let mut count = 0;
    let mut starts_after_removed_files = false;
    for file in &files {
        for (i, line) in lines(file)?.iter().enumerate() {
            let number = i as u64 + 1;
            let broken = |reason: String| AuditError::Broken {
                file: file.clone(),
                line: number,
                reason,
            };
            let record: AuditRecord = serde_json::from_slice(line).map_err(|e| {
                broken(format!(
                    "not an audit record ({e}): the line was changed or cut"
                ))
            })?;
            match &expected {
                None => starts_after_removed_files = record.prev != GENESIS,
                Some(hash) if *hash == record.prev => {}
                Some(_) => {
                    let before = match &previous {
                        Some((f, n)) if f == file => format!("line {n}"),
                        Some((f, n)) => format!("line {n} of {}", f.display()),
                        None => "the line before".to_owned(),
                    };
                    return Err(broken(format!(
                        "its prev does not match the sha256 of {before}: {before} was \
                         changed, or lines between them were removed"
                    )));
                }
            }
            expected = Some(sha256_hex(line));
            previous = Some((file.clone(), number));
            count += 1;
        }
    }
    Ok(VerifyReport {
        files,
        lines: count,
        starts_after_removed_files,
    })
}

/// Every record of the log at `path` and its rotated files, oldest first (the chain is
/// not checked: see [`verify`]).
pub fn read_records(path: &Path) -> Result<Vec<AuditRecord>, AuditError> {
    let mut out = Vec::new();
    for file in log_files(path) {
        for (i, line) in lines(&file)?.iter().enumerate() {
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
