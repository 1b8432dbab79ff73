//! A copy of the audit log's chain the host cannot rewrite later: with `[audit] syslog =
//! true`, after each batch of lines the writer sends one checkpoint (the last line's `seq`
//! and sha256, its tool and outcome) to the syslog socket (`/dev/log`, read by journald
//! or a syslog daemon) as an RFC 3164 line: facility `authpriv`, tag `toolhost-audit`.
//! Once the journal has it, rewriting the log and its head together no longer goes
//! unseen: `toolhost audit verify --expect SEQ:SHA256` checks a checkpoint against the log.
//! A checkpoint pins its line and, through the chain, every line before it.
//!
//! Sent by hand over a `UnixDatagram` (no dependency, no `unsafe`), non-blocking: a full
//! or missing socket drops that checkpoint (the next one covers its lines) and is logged at
//! most once a minute; it never holds the writer, so it never holds a call.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::record::ChainPoint;

/// The tag every message carries.
pub(super) const TAG: &str = "toolhost-audit";

/// `authpriv`: security and authorization messages, kept from ordinary users.
const FACILITY_AUTHPRIV: u8 = 10;

/// Severity of a checkpoint.
const INFO: u8 = 6;

/// Severity of a log found disagreeing with its head.
const ERR: u8 = 3;

/// How often a failing socket is mentioned in the host's log at most.
const REPORT_EVERY: Duration = Duration::from_secs(60);

/// The writer's connection to syslog.
pub(super) struct Syslog {
    socket_path: PathBuf,
    socket: Option<UnixDatagram>,
    /// The log file, named in each message.
    log: String,
    /// Messages not sent since the last report of it.
    failed: u64,
    reported: Option<Instant>,
}

impl Syslog {
    /// Checkpoints of the log at `log` to the syslog socket at `socket_path`.
    pub(super) fn new(socket_path: PathBuf, log: &Path) -> Syslog {
        Syslog {
            socket_path,
            socket: None,
            log: printable(&log.display().to_string(), 512),
            failed: 0,
            reported: None,
        }
    }

    /// Sends the checkpoint of the lines `first`..=`last.seq`, the last of them a call of
    /// `tool` that ended `outcome`.
    pub(super) fn checkpoint(&mut self, first: u64, last: &ChainPoint, tool: &str, outcome: &str) {
        let message = checkpoint_message(first, last, tool, outcome, &self.log);
        self.send(INFO, &message);
    }

    /// Sends `text` (a log found disagreeing with its head) as an error.
    pub(super) fn alert(&mut self, text: &str) {
        self.send(ERR, &printable(text, 900));
    }

    fn send(&mut self, severity: u8, message: &str) {
        let line = rfc3164(
            severity,
            &jiff::Timestamp::now(),
            std::process::id(),
            message,
        );
        if self.socket.is_none() {
            match UnixDatagram::unbound().and_then(|s| s.set_nonblocking(true).map(|()| s)) {
                Ok(socket) => self.socket = Some(socket),
                Err(e) => return self.not_sent(&e),
            }
        }
        let sent = match &self.socket {
            Some(socket) => socket.send_to(line.as_bytes(), &self.socket_path),
            None => Err(std::io::Error::other("no socket")),
        };
        if let Err(e) = sent {
            self.not_sent(&e);
        }
    }

    /// Counts a message not sent, and says so at most once a minute.
    fn not_sent(&mut self, e: &std::io::Error) {
        self.failed += 1;
        if self.reported.is_none_or(|at| at.elapsed() >= REPORT_EVERY) {
            tracing::warn!(
                socket = %self.socket_path.display(),
                "could not send the audit log's checkpoint to syslog ({} not sent since the \
                 last such message): {e}; the log itself is written as before",
                self.failed
            );
            self.failed = 0;
            self.reported = Some(Instant::now());
        }
    }
}

/// The checkpoint's text: `seq=N sha256=HASH tool=T outcome=O lines=FIRST-N file=PATH`.
pub(super) fn checkpoint_message(
    first: u64,
    last: &ChainPoint,
    tool: &str,
    outcome: &str,
    log: &str,
) -> String {
    format!(
        "seq={} sha256={} tool={} outcome={} lines={first}-{} file={log}",
        last.seq,
        last.sha256,
        word(tool),
        word(outcome),
        last.seq
    )
}

/// One RFC 3164 line as the C library's `syslog()` sends it to `/dev/log`: `<PRI>Mmm dd
/// hh:mm:ss TAG[PID]: MESSAGE` (no host name; the daemon adds it). The time is UTC
/// (journald and syslog daemons stamp messages with their own time of receipt anyway).
pub(super) fn rfc3164(severity: u8, time: &jiff::Timestamp, pid: u32, message: &str) -> String {
    let pri = u16::from(FACILITY_AUTHPRIV) * 8 + u16::from(severity);
    format!(
        "<{pri}>{} {TAG}[{pid}]: {message}",
        time.strftime("%b %e %H:%M:%S")
    )
}

/// `text` with control characters replaced by `?` and cut to `max` characters.
fn printable(text: &str, max: usize) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .take(max)
        .collect()
}

/// `text` as one word of a checkpoint (a tool name a client made up may hold anything):
/// no spaces, `=` or control characters, at most 64 characters.
fn word(text: &str) -> String {
    let w: String = text
        .chars()
        .map(|c| {
            if c.is_control() || c.is_whitespace() || c == '=' {
                '?'
            } else {
                c
            }
        })
        .take(64)
        .collect();
    if w.is_empty() { "-".to_owned() } else { w }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_is_one_rfc3164_line_of_authpriv() {
        let time: jiff::Timestamp = "2026-12-01T09:05:03Z".parse().expect("time");
        let point = ChainPoint {
            seq: 12,
            sha256: "ab".repeat(32),
        };
        let message = checkpoint_message(10, &point, "no such\ntool=x", "ok", "/var/log/a.jsonl");
        let line = rfc3164(INFO, &time, 42, &message);
        assert_eq!(
            line,
            format!(
                "<86>Dec  1 09:05:03 toolhost-audit[42]: seq=12 sha256={} tool=no?such?tool?x \
                 outcome=ok lines=10-12 file=/var/log/a.jsonl",
                "ab".repeat(32)
            )
        );
        assert!(rfc3164(ERR, &time, 1, "x").starts_with("<83>"));
    }

    #[test]
    fn a_missing_socket_is_counted_not_fatal() {
        let dir = tempfile::tempdir().expect("dir");
        let mut syslog = Syslog::new(dir.path().join("no-such-socket"), Path::new("a.jsonl"));
        let point = ChainPoint {
            seq: 1,
            sha256: "00".repeat(32),
        };
        syslog.checkpoint(1, &point, "echo", "ok");
        syslog.checkpoint(1, &point, "echo", "ok");
        assert!(syslog.reported.is_some(), "the first failure is reported");
        assert_eq!(syslog.failed, 1, "the second waits for the next report");
    }
}
