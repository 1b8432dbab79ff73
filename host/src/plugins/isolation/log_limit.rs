//! The rate limit on what a worker writes to stderr (and stdout, which goes there): a
//! token bucket lets [`BURST`] lines through at once and then [`PER_SECOND`] a second;
//! the rest are dropped from the host's log and counted, and the count is logged as one
//! line ("dropped N lines of the worker's output") at most once per [`REPORT_EVERY`],
//! when lines flow again, and when the output ends. Lines are read with a bound on their
//! length and cut to [`MAX_LINE_CHARS`] characters for the log, so a worker that prints
//! without newlines cannot make the host buffer without bound either.

use std::io::{self, BufRead, BufReader, Read};
use std::time::{Duration, Instant};

/// Lines logged at once before the limit applies.
pub(crate) const BURST: u32 = 200;

/// Lines logged per second once the burst is spent.
pub(crate) const PER_SECOND: u32 = 50;

/// The longest line logged, in characters; the rest is replaced by a note of its length.
pub(crate) const MAX_LINE_CHARS: usize = 1_000;

/// The most bytes of one line kept while reading (enough for [`MAX_LINE_CHARS`] of any
/// script); the rest of the line is read and thrown away.
const MAX_LINE_BYTES: usize = 4 * MAX_LINE_CHARS;

/// How often, at most, the count of dropped lines is logged while lines keep coming.
pub(crate) const REPORT_EVERY: Duration = Duration::from_secs(1);

/// What to do with one line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Admit {
    /// Log the line.
    pub(crate) log: bool,
    /// Log first that this many lines were dropped.
    pub(crate) report_dropped: Option<u64>,
}

/// A token bucket over log lines, with the count of what it dropped.
#[derive(Debug)]
pub(crate) struct LogLimit {
    tokens: f64,
    refilled: Instant,
    dropped: u64,
    reported: Instant,
}

impl LogLimit {
    /// A full bucket at `now`.
    pub(crate) fn new(now: Instant) -> LogLimit {
        LogLimit {
            tokens: f64::from(BURST),
            refilled: now,
            dropped: 0,
            reported: now,
        }
    }

    /// Whether a line that arrived at `now` is logged, and whether the count of dropped
    /// lines is due first.
    pub(crate) fn admit(&mut self, now: Instant) -> Admit {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * f64::from(PER_SECOND)).min(f64::from(BURST));
        self.refilled = now;
        let log = self.tokens >= 1.0;
        let report_dropped =
            if self.dropped > 0 && now.saturating_duration_since(self.reported) >= REPORT_EVERY {
                self.reported = now;
                Some(std::mem::take(&mut self.dropped))
            } else {
                None
            };
        if log {
            self.tokens -= 1.0;
        } else {
            self.dropped += 1;
        }
        Admit {
            log,
            report_dropped,
        }
    }

    /// The lines dropped and not yet reported (at the end of the output).
    pub(crate) fn finish(&mut self) -> Option<u64> {
        Some(std::mem::take(&mut self.dropped)).filter(|&n| n > 0)
    }
}

/// The lines of `reader`, each read with at most [`MAX_LINE_BYTES`] kept (the rest of a
/// longer line is skipped), invalid UTF-8 replaced; ends at the end of the stream or at
/// a read error.
pub(crate) fn lines(reader: impl Read) -> impl Iterator<Item = String> {
    let mut reader = BufReader::new(reader);
    std::iter::from_fn(move || read_line(&mut reader).ok().flatten())
}

/// One bounded line; `None` at the end of the stream.
fn read_line(reader: &mut impl BufRead) -> io::Result<Option<String>> {
    let mut kept = Vec::new();
    let mut skipped = 0usize;
    let mut any = false;
    loop {
        let buf = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            break;
        }
        any = true;
        let (chunk, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        let room = MAX_LINE_BYTES.saturating_sub(kept.len());
        kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
        skipped += chunk.len().saturating_sub(room);
        let used = done.unwrap_or(buf.len());
        reader.consume(used);
        if done.is_some() {
            break;
        }
    }
    if !any {
        return Ok(None);
    }
    if kept.last() == Some(&b'\r') {
        kept.pop();
    }
    let mut line = String::from_utf8_lossy(&kept).into_owned();
    if skipped > 0 {
        line.push_str(&format!(" … ({skipped} more bytes)"));
    }
    Ok(Some(line))
}

/// `line` as it goes into the log: cut to [`MAX_LINE_CHARS`] characters.
pub(crate) fn for_log(line: &str) -> String {
    crate::text::shorten(line, MAX_LINE_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_then_the_rate_and_drops_are_counted_and_reported() {
        let start = Instant::now();
        let mut limit = LogLimit::new(start);
        let logged = (0..1_000).filter(|_| limit.admit(start).log).count();
        assert_eq!(logged, BURST as usize);
        // Half a second later: 25 more tokens; the first line reports nothing yet (less
        // than REPORT_EVERY since the start).
        let later = start + Duration::from_millis(500);
        let first = limit.admit(later);
        assert_eq!(
            first,
            Admit {
                log: true,
                report_dropped: None
            }
        );
        // A second after the start the count is due, with the next line.
        let due = limit.admit(start + REPORT_EVERY);
        assert_eq!(due.report_dropped, Some(800));
        assert!(due.log);
        assert_eq!(limit.finish(), None);
        // Dropped lines with no line after them are reported at the end.
        let now = start + REPORT_EVERY;
        while limit.admit(now).log {}
        assert_eq!(limit.finish(), Some(1));
    }

    #[test]
    fn a_full_bucket_refills_only_to_the_burst() {
        let start = Instant::now();
        let mut limit = LogLimit::new(start);
        let much_later = start + Duration::from_secs(3_600);
        let logged = (0..1_000).filter(|_| limit.admit(much_later).log).count();
        assert_eq!(logged, BURST as usize);
    }

    #[test]
    fn lines_are_bounded_and_lossy() {
        let long = "y".repeat(MAX_LINE_BYTES + 10);
        let mut input = b"one\r\ntwo\n".to_vec();
        input.extend_from_slice(long.as_bytes());
        input.extend_from_slice(b"\nbad \xff");
        let got: Vec<String> = lines(input.as_slice()).collect();
        assert_eq!(got.len(), 4, "{got:?}");
        assert_eq!(got[0], "one");
        assert_eq!(got[1], "two");
        assert!(got[2].ends_with(" … (10 more bytes)"), "{}", &got[2][..40]);
        assert_eq!(got[3], "bad \u{FFFD}");
        assert!(for_log(&got[2]).chars().count() < MAX_LINE_CHARS + 40);
    }
}
