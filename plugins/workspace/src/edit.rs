//! `edit_file`: changes part of a text file beneath a workspace root, by hashline
//! anchors (the `NUMBER:HASH` `read_file` shows) or by exact text, refusing stale
//! anchors and edits that break a file's syntax (see `syntax.rs`), and answering with a
//! unified diff and the changed lines' new anchors.
//!
//! Every edit of a call applies to the same read of the file: anchors name lines of the
//! file as it is on disk, edits may not overlap, and the edited text is built in one pass
//! over the original. An anchored edit must also prove what it replaces (see `reads`):
//! each anchor must name its line as it is now, and every line an edit replaces (or
//! inserts next to) must be unchanged and at the same number since the read on record,
//! and shown by it. A line changed inside a range, lines added or removed above it, or
//! no read on record refuse the call with the current lines and fresh anchors, which go
//! on record so the edit can be redone from them. Edits by exact text need no record.
//! After a write the record follows the file: the changed lines and their neighbours
//! (the anchors the answer shows) are on record, other lines as they were.
//!
//! The write goes through the temporary file and rename of `write.rs`, keeping the
//! file's mode and line endings; it replaces this name only, so a file with other hard
//! links is edited as a copy (the answer says so) and the other names keep the old text.
//! Weak spots: the file is held in memory (at most [`MAX_EDIT_BYTES`]); a change by
//! someone else between our read and the rename is detected (inode, size, modification
//! time) but not merged.

use std::fmt::Write as _;
use std::io::Read as _;
use std::ops::Range;

use cap_std::fs::{MetadataExt as _, OpenOptions, OpenOptionsExt as _};
use schemars::JsonSchema;
use serde::Deserialize;
use toolhost_plugin_api::{ToolContext, ToolError, tool};

use crate::anchors::{Anchor, format_line, line_hash};
pub(crate) use crate::reads::MAX_EDIT_BYTES;
use crate::reads::{self, Common, Lines, Reads, Record};
use crate::roots::Workspace;
use crate::syntax::{EditSpan, Grammar, Verdict, check};
use crate::write::{Place, changed_lines, replace, write_error};

/// Lines of unified diff shown at most.
const MAX_DIFF_LINES: usize = 200;
/// Lines of new anchors shown at most.
const MAX_ANCHOR_LINES: usize = 200;
/// Lines shown around a stale anchor or the nearest match, each side.
const AROUND: usize = 3;

/// Arguments of `edit_file`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditFileArgs {
    /// The file to edit: relative to the first workspace root, or absolute beneath one of
    /// the roots. It must exist (create files with write_file).
    path: String,
    /// Edits by anchor, applied together: each names lines by the `NUMBER:HASH` anchors
    /// read_file shows before each line ("12:a3f"; "12:a3f|text" as copied works too).
    /// All anchors refer to the file as you read it (line numbers are not shifted by
    /// other edits in the list); the edits must not overlap. The lines an edit replaces
    /// must be unchanged since you read them. Use either `edits` or `old_text`/`new_text`.
    #[serde(default)]
    edits: Vec<AnchoredEdit>,
    /// Edit by exact text: the text to replace, exactly as it is in the file (whitespace,
    /// indentation and line breaks included; no anchors). It must occur exactly once
    /// unless replace_all is true.
    #[serde(default)]
    old_text: Option<String>,
    /// With old_text: the text to put in its place ("" deletes it).
    #[serde(default)]
    new_text: Option<String>,
    /// With old_text: replace every occurrence (the result says how many). Default false:
    /// more than one occurrence is refused, naming their lines.
    #[serde(default)]
    replace_all: bool,
    /// Write the edit even if it turns a file that parsed cleanly into one with syntax
    /// errors (checked for Rust, Python, JavaScript, TypeScript, TSX, JSON and TOML by file
    /// extension). Default false: such an edit is refused and nothing is written.
    #[serde(default)]
    allow_syntax_errors: bool,
}

/// One edit by anchors: `from` (and optionally `to`) to replace lines, or `after` or
/// `before` to insert lines.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnchoredEdit {
    /// Replace lines starting at this line's anchor, e.g. "12:a3f".
    #[serde(default)]
    from: Option<String>,
    /// With `from`: the anchor of the last line replaced (inclusive), e.g. "15:9c0".
    /// Default: just the `from` line.
    #[serde(default)]
    to: Option<String>,
    /// Instead of replacing: insert new_text after this line's anchor.
    #[serde(default)]
    after: Option<String>,
    /// Instead of replacing: insert new_text before this line's anchor.
    #[serde(default)]
    before: Option<String>,
    /// The new lines, as plain text (no anchors or line numbers). With `from`, "" deletes
    /// the lines. A final line break is optional.
    new_text: String,
}

/// Edits part of an existing text file in the workspace, in one of two ways. (1) By
/// anchors: `edits` is a list of {"from": "12:a3f", "to": "15:9c0", "new_text": "..."}
/// (replace lines 12-15; "" deletes them) or {"after": "12:a3f", "new_text": "..."} /
/// {"before": ...} (insert lines), using the NUMBER:HASH anchors read_file shows before
/// each line. All anchors refer to the file as you read it (with read_file, or from
/// edit_file's answers); if a line an edit replaces changed since, or lines were added
/// or removed above it, or the file was not read, the whole call is refused (nothing
/// written) and the current lines are shown with fresh anchors to redo it from. (2) By
/// exact text: old_text (must occur exactly once, or set replace_all) and new_text; if
/// it is not found, the most similar lines are shown. An edit that turns a file that
/// parsed cleanly into one with a syntax error (Rust, Python, JavaScript, TypeScript,
/// JSON, TOML) is refused, naming the error's line and the syntax node the edit split,
/// unless allow_syntax_errors is true. Line endings (LF or CRLF) and permissions are
/// kept; the write is atomic and replaces this name only (never writing through
/// symbolic or hard links). Files up to 8 MiB. Returns a unified diff of the change and
/// the new anchors of the changed lines, so further edits need no new read.
#[tool(risk = write, workspace)]
pub async fn edit_file(
    ctx: &ToolContext<'_>,
    #[args] args: EditFileArgs,
) -> Result<String, ToolError> {
    let workspace = Workspace::of(ctx).await?;
    let reads = Reads::of(ctx).await;
    ctx.blocking(move |_| edit(&workspace, &reads, &args))
        .await
        .map_err(ToolError::failed)?
}

/// Which way the call edits.
enum Request<'a> {
    Anchored(&'a [AnchoredEdit]),
    Exact {
        old: &'a str,
        new: &'a str,
        all: bool,
    },
}

fn request(args: &EditFileArgs) -> Result<Request<'_>, ToolError> {
    match (&args.edits[..], &args.old_text, &args.new_text) {
        ([], Some(old), Some(new)) => Ok(Request::Exact {
            old,
            new,
            all: args.replace_all,
        }),
        ([], Some(_), None) => Err(ToolError::invalid_args(
            "old_text needs new_text (the text to put in its place; \"\" deletes it)",
        )),
        ([], None, _) => Err(ToolError::invalid_args(
            "say what to change: `edits` (a list of anchored edits) or `old_text` and \
             `new_text`",
        )),
        (edits, None, None) if !args.replace_all => Ok(Request::Anchored(edits)),
        _ => Err(ToolError::invalid_args(
            "use either `edits` or `old_text`/`new_text` (with replace_all), not both; top-level \
             new_text belongs with old_text, each anchored edit has its own new_text",
        )),
    }
}

fn edit(workspace: &Workspace, reads: &Reads, args: &EditFileArgs) -> Result<String, ToolError> {
    let request = request(args)?;
    let resolved = workspace.resolve(&args.path)?;
    let place = Place::open(resolved, false)?;
    let shown = place.shown();
    match place.existing()? {
        None => {
            return Err(ToolError::failed(format!(
                "{shown} does not exist; create it with write_file"
            )));
        }
        Some(meta) if meta.file_type().is_symlink() => {
            return Err(place.link_refusal(
                "edit_file",
                "edit the file it points to by its own path (it must be inside the workspace)",
            ));
        }
        Some(meta) if !meta.is_file() => {
            return Err(ToolError::failed(format!(
                "{shown} is not a regular file (a folder, FIFO, socket or device); edit_file \
                 edits text files"
            )));
        }
        Some(meta) if meta.len() > MAX_EDIT_BYTES => {
            return Err(ToolError::failed(format!(
                "{shown} is {} bytes; edit_file edits files up to {} MiB",
                meta.len(),
                MAX_EDIT_BYTES >> 20
            )));
        }
        Some(_) => {}
    }
    let mut options = OpenOptions::new();
    options.read(true).custom_flags(libc::O_NOFOLLOW);
    let file = place
        .dir
        .open_with(&place.name, &options)
        .map_err(|e| write_error("open", &shown, &e))?;
    // What we read is this version of the file; the rename checks it is still there.
    let meta = file
        .metadata()
        .map_err(|e| write_error("inspect", &shown, &e))?;
    if !meta.is_file() {
        return Err(ToolError::failed(format!(
            "{shown} changed into something other than a regular file; try again"
        )));
    }
    let key = reads::key_of(&file, place.resolved.root.path.join(&place.resolved.rel));
    let mut bytes = Vec::new();
    file.take(MAX_EDIT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| write_error("read", &shown, &e))?;
    let before = String::from_utf8(bytes).map_err(|_| {
        ToolError::failed(format!(
            "{shown} is not UTF-8 text (a binary file?); edit_file edits text files only"
        ))
    })?;

    let text = Text::new(&before);
    let now = text.hashes();
    let (record, record_problem) = match reads.load(&key) {
        Ok(record) => (record, None),
        Err(e) => (None, Some(e.to_string())),
    };
    let planned = match request {
        Request::Anchored(edits) => {
            let parsed = parse_anchored(edits)?;
            let proof = Proof {
                record: record.as_ref(),
                problem: record_problem.as_deref(),
            };
            prove_anchored(&text, &parsed, &shown, proof).map(|()| plan_anchored(&text, parsed))
        }
        Request::Exact { old, new, all } => plan_exact(&text, old, new, all, &shown),
    };
    let planned = match planned {
        Ok(planned) => planned,
        Err(Refused::Error(e)) => return Err(e),
        Err(Refused::Showing { message, lines }) => {
            let note = put_on_record(reads, &key, record.as_ref(), now, &lines)
                .map(|e| {
                    format!(
                        "\n(note: the lines shown could not be put on record ({e}); read the \
                         file with read_file before redoing the edit)"
                    )
                })
                .unwrap_or_default();
            return Err(ToolError::failed(format!("{message}{note}")));
        }
    };
    let (after, spans) = apply(&before, &planned.splices)?;
    if after == before {
        return Ok(format!(
            "nothing changed: the new text of {shown} equals the old; nothing was written"
        ));
    }

    let syntax_note = match Grammar::for_path(&place.resolved.rel) {
        None => None,
        Some(grammar) => match check(grammar, &before, &after, &spans) {
            Verdict::Clean(_) => None,
            Verdict::AlreadyBroken(grammar, site) => Some(format!(
                "note: {shown} already had a {} syntax error before this edit (line {}, \
                 column {}: {}), so the edit was not checked for syntax",
                grammar.name(),
                site.line,
                site.column,
                site.what
            )),
            Verdict::Unchecked(why) => Some(format!("note: syntax not checked: {why}")),
            Verdict::Broken(breakage) if !args.allow_syntax_errors => {
                let (from, to) = breakage.edited;
                let mut shown_text = format!(
                    "The edited lines ({}) as they would read, marked >, with the lines \
                     around them:\n{}\n",
                    if from == to {
                        format!("line {from}")
                    } else {
                        format!("lines {from}-{to}")
                    },
                    numbered_lines(&after, from, to)
                );
                let error_line = breakage.error.line;
                if error_line + 2 < from || error_line > to + 2 {
                    shown_text.push_str(&format!(
                        "Where the parser noticed it (line {error_line}):\n{}\n",
                        numbered_excerpt(&after, error_line)
                    ));
                }
                return Err(ToolError::failed(format!(
                    "edit_file refused: nothing was written. The edit would break {shown}: {}.\n\
                     {shown_text}\
                     Fix the new text so the file still parses (read the lines again if \
                     needed), or pass \"allow_syntax_errors\": true if the breakage is \
                     intended (e.g. one step of several edits).",
                    breakage.describe(),
                )));
            }
            Verdict::Broken(breakage) => Some(format!(
                "warning: the file now has a syntax error (allowed by allow_syntax_errors): {}",
                breakage.describe()
            )),
        },
    };

    replace(&place, after.as_bytes(), Some(&meta)).map_err(|e| write_error("write", &shown, &e))?;

    let mut out = format!("edited {shown}: {}\n", planned.summary);
    out.push_str(&unified_diff(&before, &after, &shown));
    let (anchors, anchored) = new_anchors(&after, &spans);
    out.push_str(&anchors);
    if let Some(note) = syntax_note {
        out.push_str(&note);
        out.push('\n');
    }
    // On record now: the lines shown just above, and the others as they were.
    let carried = Record::carried(record.as_ref(), now);
    let after_text = Text::new(&after);
    let mut next = Record {
        shown: carry_over_edit(&text, &carried.shown, &after_text, &spans),
        hashes: after_text.hashes(),
    };
    for (first, last) in anchored {
        next.show(first, last);
    }
    if let Err(e) = reads.save(&key, &next) {
        let _ = writeln!(
            out,
            "note: the edit could not be put on record ({e}); read the file again before \
             further edits by anchor"
        );
    }
    if meta.nlink() > 1 {
        let _ = writeln!(
            out,
            "note: {shown} had {} hard links; the edit replaced this name only, the other \
             links keep the old content",
            meta.nlink()
        );
    }
    Ok(out)
}

/// Puts lines `lines` of the file now (`now`: its line hashes) on record as shown, with
/// what `old` had shown carried over; the error if that failed.
fn put_on_record(
    reads: &Reads,
    key: &std::path::Path,
    old: Option<&Record>,
    now: Vec<u64>,
    lines: &[(usize, usize)],
) -> Option<reads::RecordError> {
    let mut record = Record::carried(old, now);
    for &(first, last) in lines {
        record.show(first, last);
    }
    reads.save(key, &record).err()
}

/// Which lines of the edited text (`after`) stay shown: a line no edit touched and that
/// kept its number keeps what its line in `before` had (`shown`, per line of `before`);
/// touched lines are not (the answer's new anchors put them on record), and neither are
/// lines an edit moved (lines added or removed above them): an anchor kept from before
/// the edit names such a line by its old number, where an identical line (`}`, a blank
/// line) may now stand, so it must be shown again at its new number first.
fn carry_over_edit(
    before: &Text<'_>,
    shown: &[bool],
    after: &Text<'_>,
    spans: &[EditSpan],
) -> Vec<bool> {
    let mut out = vec![false; after.lines.len()];
    let mut passed = 0; // spans wholly before the current line
    for (index, (slot, line)) in out.iter_mut().zip(&after.lines).enumerate() {
        let end = line.next.max(line.start + 1);
        while passed < spans.len() && spans[passed].after.end <= line.start {
            // An empty span (a deletion) at this line's start touches it.
            if spans[passed].after.is_empty() && spans[passed].after.start == line.start {
                break;
            }
            passed += 1;
        }
        let touched = spans[passed..].iter().any(|s| {
            (s.after.start < end && line.start < s.after.end)
                || (s.after.is_empty() && s.after.start >= line.start && s.after.start < end)
        });
        if touched {
            continue;
        }
        let at = match passed.checked_sub(1).map(|i| &spans[i]) {
            Some(span) => line.start - span.after.end + span.before.end,
            None => line.start,
        };
        let number = before.line_of(at);
        *slot = number == index + 1
            && number
                .checked_sub(1)
                .and_then(|i| shown.get(i))
                .copied()
                .unwrap_or(false);
    }
    out
}

/// The file's text split into lines as `read_file` numbers them (on `\n`; a final line
/// break ends the last line rather than starting an empty one).
struct Text<'a> {
    text: &'a str,
    /// Per line: where it starts, where its content ends (before `\r\n` or `\n`) and
    /// where the next line starts.
    lines: Vec<LineSpan>,
    /// The line ending new lines get: `\r\n` when most of the file's lines end so.
    eol: &'static str,
}

#[derive(Debug, Clone, Copy)]
struct LineSpan {
    start: usize,
    end: usize,
    next: usize,
}

impl<'a> Text<'a> {
    fn new(text: &'a str) -> Text<'a> {
        let mut lines = Vec::new();
        let mut start = 0;
        let (mut crlf, mut lf) = (0usize, 0usize);
        while start < text.len() {
            let (end, next) = match text[start..].find('\n') {
                Some(i) => {
                    let nl = start + i;
                    if nl > start && text.as_bytes()[nl - 1] == b'\r' {
                        crlf += 1;
                        (nl - 1, nl + 1)
                    } else {
                        lf += 1;
                        (nl, nl + 1)
                    }
                }
                None => (text.len(), text.len()),
            };
            lines.push(LineSpan { start, end, next });
            start = next;
        }
        Text {
            text,
            lines,
            eol: if crlf > lf { "\r\n" } else { "\n" },
        }
    }

    /// Line `n`'s content (from 1), without its line break.
    fn line(&self, n: usize) -> &'a str {
        self.lines
            .get(n.wrapping_sub(1))
            .map_or("", |l| &self.text[l.start..l.end])
    }

    /// Line `n`'s line break ("" for a last line without one).
    fn terminator(&self, n: usize) -> &'a str {
        self.lines
            .get(n.wrapping_sub(1))
            .map_or("", |l| &self.text[l.end..l.next])
    }

    fn span(&self, n: usize) -> LineSpan {
        self.lines
            .get(n.wrapping_sub(1))
            .copied()
            .unwrap_or(LineSpan {
                start: self.text.len(),
                end: self.text.len(),
                next: self.text.len(),
            })
    }

    fn contents(&self) -> Vec<&'a str> {
        (1..=self.lines.len()).map(|n| self.line(n)).collect()
    }

    /// Every line's hash for the read record (as `read_file` hashes them).
    fn hashes(&self) -> Vec<u64> {
        (1..=self.lines.len())
            .map(|n| reads::hash_line(self.line(n).as_bytes()))
            .collect()
    }

    /// The line (from 1) that byte `at` is on.
    fn line_of(&self, at: usize) -> usize {
        self.lines.partition_point(|l| l.next <= at) + 1
    }

    /// Lines `first..=last` (clipped to the file) with their anchors, one per line.
    fn anchored(&self, first: usize, last: usize) -> String {
        let first = first.max(1);
        let last = last.min(self.lines.len());
        let mut out = String::new();
        for n in first..=last {
            out.push_str(&format_line(n, self.line(n)));
            out.push('\n');
        }
        out
    }

    /// `text` with its line breaks made this file's.
    fn with_eol(&self, text: &str) -> String {
        let lf = text.replace("\r\n", "\n");
        if self.eol == "\r\n" {
            lf.replace('\n', "\r\n")
        } else {
            lf
        }
    }
}

/// Replacing `range` of the original by `text`.
#[derive(Debug)]
struct Splice {
    range: Range<usize>,
    text: String,
    /// "edit 2 (lines 12-15)", for messages about overlaps.
    label: String,
}

/// What a call will change.
struct Plan {
    splices: Vec<Splice>,
    /// One line for the result: what was done.
    summary: String,
}

/// A call refused.
enum Refused {
    /// An error that shows no lines of the file.
    Error(ToolError),
    /// A refusal showing current lines of the file with anchors: `lines` (ranges, from 1,
    /// inclusive) go on record, so the edit can be redone from them.
    Showing {
        message: String,
        lines: Vec<(usize, usize)>,
    },
}

impl From<ToolError> for Refused {
    fn from(e: ToolError) -> Self {
        Refused::Error(e)
    }
}

/// What shows whether an anchored edit's lines are what was read: the record of the file
/// (none: never read, or not by this profile), or why it could not be used.
#[derive(Clone, Copy)]
struct Proof<'a> {
    record: Option<&'a Record>,
    problem: Option<&'a str>,
}

/// A stale anchor: which edit, which field, what it said.
struct Stale {
    edit: usize,
    field: &'static str,
    anchor: Anchor,
}

/// One anchored edit, read: its number in the call (from 1), what it does, its new text.
struct Parsed<'a> {
    number: usize,
    kind: Kind,
    new_text: &'a str,
}

fn parse_anchored(edits: &[AnchoredEdit]) -> Result<Vec<Parsed<'_>>, ToolError> {
    let mut parsed = Vec::with_capacity(edits.len());
    for (i, e) in edits.iter().enumerate() {
        let number = i + 1;
        let parse =
            |field: &'static str, value: &Option<String>| -> Result<Option<Anchor>, ToolError> {
                value
                    .as_deref()
                    .map(|v| {
                        Anchor::parse(v).map_err(|why| {
                            ToolError::invalid_args(format!("edit {number}, `{field}`: {why}"))
                        })
                    })
                    .transpose()
            };
        let (from, to, after, before) = (
            parse("from", &e.from)?,
            parse("to", &e.to)?,
            parse("after", &e.after)?,
            parse("before", &e.before)?,
        );
        let kind = match (from, to, after, before) {
            (Some(from), to, None, None) => {
                let to = to.unwrap_or_else(|| from.clone());
                if to.line < from.line {
                    return Err(ToolError::invalid_args(format!(
                        "edit {number}: `to` ({to}) is before `from` ({from}); `to` names the \
                         last line replaced"
                    )));
                }
                Kind::Replace(from, to)
            }
            (None, None, Some(after), None) => Kind::After(after),
            (None, None, None, Some(before)) => Kind::Before(before),
            _ => {
                return Err(ToolError::invalid_args(format!(
                    "edit {number}: give `from` (and optionally `to`) to replace lines, or \
                     `after` or `before` alone to insert lines"
                )));
            }
        };
        if !matches!(kind, Kind::Replace(..)) && e.new_text.is_empty() {
            return Err(ToolError::invalid_args(format!(
                "edit {number}: new_text is empty, so there is nothing to insert"
            )));
        }
        parsed.push(Parsed {
            number,
            kind,
            new_text: &e.new_text,
        });
    }
    Ok(parsed)
}

/// Refuses anchored edits that do not prove what they replace: an anchor that does not
/// name its line as it is now (stale), then, against the record, lines changed inside an
/// edit's range, lines added or removed above it, lines never shown, or no record at all.
fn prove_anchored(
    text: &Text<'_>,
    parsed: &[Parsed<'_>],
    shown: &str,
    proof: Proof<'_>,
) -> Result<(), Refused> {
    let count = text.lines.len();
    let lines = text.contents();
    let mut stale = Vec::new();
    for p in parsed {
        for (field, anchor) in p.kind.anchors() {
            if !anchor.matches(&lines) {
                stale.push(Stale {
                    edit: p.number,
                    field,
                    anchor: anchor.clone(),
                });
            }
        }
    }
    let now = text.hashes();
    let common = proof.record.map(|r| r.common(&now));
    if !stale.is_empty() {
        let (message, lines) = stale_report(text, &lines, &stale, shown, count, common);
        return Err(Refused::Showing { message, lines });
    }
    let (Some(record), Some(common)) = (proof.record, common) else {
        return Err(unrecorded(text, parsed, shown, proof.problem));
    };
    let mut said = String::new();
    let mut windows = Vec::new();
    let mut on_record = Vec::new();
    for p in parsed {
        let (first, last) = p.kind.lines();
        let verdict = record.lines(&common, first, last);
        // The lines the refusal shows: the range where its lines are now, with context.
        // What it puts on record is the same, except for a shifted range: only the range
        // itself at its new numbers. Its old numbers (inside the context when the shift is
        // small) now hold other lines, and putting those on record would let the same
        // call, retried, land on them when one is identical (`}`, a blank line).
        let mut window = (first, last);
        let mut exact = false;
        let why = match verdict {
            Lines::Read => continue,
            Lines::Changed => {
                let (a, b) = common.changed_now();
                let place = match b.cmp(&a) {
                    std::cmp::Ordering::Less => format!("lines were removed after line {}", a - 1),
                    std::cmp::Ordering::Equal => format!("it differs at line {a}"),
                    std::cmp::Ordering::Greater => format!("it differs at lines {a}-{b}"),
                };
                format!(
                    "a line inside the range changed since the read (compared with the read, \
                     {place} now)"
                )
            }
            Lines::Shifted { by } => {
                let moved = |n: usize| n.saturating_add_signed(by);
                window = (moved(first), moved(last));
                exact = true;
                format!(
                    "lines were {} above it since the read: the file shifted by {by:+} lines, \
                     so what was read as {} is {} now, and the anchors name other lines",
                    if by > 0 { "added" } else { "removed" },
                    lines_word(first, last),
                    lines_word(moved(first), moved(last)),
                )
            }
            Lines::Unseen { first, last } => format!(
                "{} of it {} not shown with anchors by the read on record (or changed before \
                 it, or moved by an edit that added or removed lines above since)",
                lines_word(first, last),
                if first == last { "was" } else { "were" }
            ),
        };
        let around = (
            window.0.saturating_sub(AROUND),
            window.1.saturating_add(AROUND),
        );
        windows.push(around);
        on_record.push(if exact { window } else { around });
        let _ = writeln!(said, "- edit {} ({}): {why}", p.number, p.kind.label());
    }
    if said.is_empty() {
        return Ok(());
    }
    let (current, shown_lines) = anchored_windows(text, windows);
    let lines = within(&on_record, &shown_lines);
    Err(Refused::Showing {
        message: format!(
            "edit_file refused: nothing was written. Not every line these edits replace is \
             what was read of {shown}:\n{said}Current lines (on record now, so these anchors \
             work; of a range that moved, only the range itself, at its new numbers):\n\
             {current}Redo the edit from the current anchors (read_file shows more of the \
             file)."
        ),
        lines,
    })
}

/// The refusal of anchored edits of a file with no read on record: the current lines of
/// their ranges.
fn unrecorded(
    text: &Text<'_>,
    parsed: &[Parsed<'_>],
    shown: &str,
    problem: Option<&str>,
) -> Refused {
    let windows = parsed
        .iter()
        .map(|p| {
            let (first, last) = p.kind.lines();
            (first.saturating_sub(AROUND), last.saturating_add(AROUND))
        })
        .collect();
    let (current, lines) = anchored_windows(text, windows);
    let problem = problem
        .map(|p| format!(" (the record could not be used: {p})"))
        .unwrap_or_default();
    Refused::Showing {
        message: format!(
            "edit_file refused: nothing was written. No read of {shown} is on record for this \
             profile{problem}, so nothing shows that these anchors come from what you read: \
             anchored edits take anchors from read_file or batch_read of the file (or from \
             edit_file's answers), so that an edit never lands on lines that changed since \
             you saw them.\nThe current lines of the edits' ranges (on record now, so these \
             anchors work):\n{current}If they are the lines you meant, redo the edit with \
             these anchors; else read the file first (read_file with offset/limit around \
             those lines)."
        ),
        lines,
    }
}

/// The parts of `wanted` (line ranges, inclusive) that lie within `shown` (the ranges
/// an answer showed with anchors): only what was shown goes on record.
fn within(wanted: &[(usize, usize)], shown: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for &(a, b) in wanted {
        for &(c, d) in shown {
            let (first, last) = (a.max(c), b.min(d));
            if first <= last {
                out.push((first, last));
            }
        }
    }
    out
}

fn lines_word(first: usize, last: usize) -> String {
    if first == last {
        format!("line {first}")
    } else {
        format!("lines {first}-{last}")
    }
}

/// Lines of `text` in `ranges` (from 1, inclusive; clipped to the file and merged) with
/// their anchors, `…` between windows, at most [`MAX_ANCHOR_LINES`] lines; and the ranges
/// shown.
fn anchored_windows(
    text: &Text<'_>,
    mut ranges: Vec<(usize, usize)>,
) -> (String, Vec<(usize, usize)>) {
    let count = text.lines.len();
    ranges.retain_mut(|(a, b)| {
        *a = (*a).max(1);
        *b = (*b).min(count);
        a <= b
    });
    ranges.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::new();
    for (a, b) in ranges {
        match merged.last_mut() {
            Some(last) if a <= last.1 + 1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    let mut out = String::new();
    let mut shown = Vec::new();
    let mut left = MAX_ANCHOR_LINES;
    for (i, (a, b)) in merged.iter().enumerate() {
        if left == 0 {
            out.push_str("… (more lines left out: read_file shows them)\n");
            break;
        }
        if i > 0 {
            out.push_str("…\n");
        }
        let b = (*b).min(a + left - 1);
        out.push_str(&text.anchored(*a, b));
        shown.push((*a, b));
        left -= b + 1 - a;
    }
    (out, shown)
}

/// The edits' splices, once proven.
fn plan_anchored(text: &Text<'_>, parsed: Vec<Parsed<'_>>) -> Plan {
    let mut splices = Vec::with_capacity(parsed.len());
    let mut said = Vec::with_capacity(parsed.len());
    for Parsed {
        number,
        kind,
        new_text,
    } in parsed
    {
        let body = text.with_eol(new_text);
        let body = body
            .strip_suffix(text.eol)
            .map(str::to_owned)
            .unwrap_or(body);
        let new_lines = if new_text.is_empty() {
            0
        } else {
            body.split(text.eol).count()
        };
        let (range, replacement, words) = match &kind {
            Kind::Replace(from, to) => {
                let lines_word = lines_word(from.line, to.line);
                let (replacement, words) = if new_text.is_empty() {
                    (String::new(), format!("{lines_word} deleted"))
                } else {
                    (
                        format!("{body}{}", text.terminator(to.line)),
                        format!("{lines_word} replaced by {}", plural(new_lines, "line")),
                    )
                };
                (
                    text.span(from.line).start..text.span(to.line).next,
                    replacement,
                    words,
                )
            }
            Kind::After(at) => {
                let next = text.span(at.line).next;
                let replacement = if text.terminator(at.line).is_empty() {
                    format!("{}{body}", text.eol)
                } else {
                    format!("{body}{}", text.eol)
                };
                (
                    next..next,
                    replacement,
                    format!(
                        "{} inserted after line {}",
                        plural(new_lines, "line"),
                        at.line
                    ),
                )
            }
            Kind::Before(at) => {
                let start = text.span(at.line).start;
                (
                    start..start,
                    format!("{body}{}", text.eol),
                    format!(
                        "{} inserted before line {}",
                        plural(new_lines, "line"),
                        at.line
                    ),
                )
            }
        };
        splices.push(Splice {
            range,
            text: replacement,
            label: format!("edit {number} ({})", kind.label()),
        });
        said.push(words);
    }
    Plan {
        splices,
        summary: said.join("; "),
    }
}

/// What an anchored edit does.
enum Kind {
    Replace(Anchor, Anchor),
    After(Anchor),
    Before(Anchor),
}

impl Kind {
    fn anchors(&self) -> Vec<(&'static str, &Anchor)> {
        match self {
            Kind::Replace(from, to) if from == to => vec![("from", from)],
            Kind::Replace(from, to) => vec![("from", from), ("to", to)],
            Kind::After(a) => vec![("after", a)],
            Kind::Before(a) => vec![("before", a)],
        }
    }

    /// The lines it names (from 1, inclusive): the lines replaced, or the line inserted
    /// next to.
    fn lines(&self) -> (usize, usize) {
        match self {
            Kind::Replace(from, to) => (from.line, to.line),
            Kind::After(a) | Kind::Before(a) => (a.line, a.line),
        }
    }

    /// "lines 12-15", "after line 3", for messages.
    fn label(&self) -> String {
        match self {
            Kind::Replace(from, to) => lines_word(from.line, to.line),
            Kind::After(a) => format!("after line {}", a.line),
            Kind::Before(a) => format!("before line {}", a.line),
        }
    }
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// The refusal of stale anchors: each one, what its line holds now, the current lines
/// around it with fresh anchors (and the ranges shown). With the record's `common`, says
/// whether lines were added or removed since the read.
fn stale_report(
    text: &Text<'_>,
    lines: &[&str],
    stale: &[Stale],
    shown: &str,
    count: usize,
    common: Option<Common>,
) -> (String, Vec<(usize, usize)>) {
    let mut out = format!(
        "edit_file refused: nothing was written. {} no longer {} {shown} (it changed since it \
         was read):\n",
        plural(stale.len(), "anchor"),
        if stale.len() == 1 { "matches" } else { "match" }
    );
    let mut windows: Vec<(usize, usize)> = Vec::new();
    for s in stale {
        let n = s.anchor.line;
        let now = if n > count {
            format!("the file has only {}", plural(count, "line"))
        } else {
            format!("line {n} is now `{}`", format_line(n, lines[n - 1]))
        };
        let _ = write!(out, "- edit {}, `{}` {}: {now}", s.edit, s.field, s.anchor);
        // The line it named may have moved: the nearest line with the same hash.
        let moved = (1..=count)
            .filter(|&m| m != n && line_hash(lines[m - 1]) == s.anchor.hash)
            .min_by_key(|&m| m.abs_diff(n))
            .filter(|&m| m.abs_diff(n) <= 50);
        if let Some(m) = moved {
            let _ = write!(
                out,
                "; a line with that hash is now line {m} ({m}:{})",
                s.anchor.hash
            );
            windows.push((m.saturating_sub(AROUND), m + AROUND));
        }
        out.push('\n');
        let center = n.min(count.max(1));
        windows.push((center.saturating_sub(AROUND), center + AROUND));
    }
    if let Some(common) = common
        && common.shift() != 0
    {
        let _ = writeln!(
            out,
            "Since the read on record, lines were {}: the file has {} now, {} then.",
            if common.shift() > 0 {
                "added"
            } else {
                "removed"
            },
            plural(common.now, "line"),
            common.read
        );
    }
    let (current, windows) = anchored_windows(text, windows);
    out.push_str("Current lines:\n");
    out.push_str(&current);
    out.push_str("Redo the edit with the current anchors (read_file shows more of the file).");
    (out, windows)
}

fn plan_exact(
    text: &Text<'_>,
    old: &str,
    new: &str,
    all: bool,
    shown: &str,
) -> Result<Plan, Refused> {
    if old.is_empty() {
        return Err(Refused::Error(ToolError::invalid_args(
            "old_text is empty; give the exact text to replace (or use `edits` with anchors \
             to insert lines)",
        )));
    }
    let normalized = text.with_eol(old);
    let mut needle = normalized.as_str();
    let mut starts: Vec<usize> = text.text.match_indices(needle).map(|(i, _)| i).collect();
    if starts.is_empty() && normalized != old {
        needle = old;
        starts = text.text.match_indices(needle).map(|(i, _)| i).collect();
    }
    if starts.is_empty() {
        let (message, lines) = no_match_report(text, old, shown);
        return Err(Refused::Showing { message, lines });
    }
    let match_lines: Vec<usize> = starts.iter().map(|&s| text.line_of(s)).collect();
    let lines_list = |cap: usize| {
        let mut list: Vec<String> = match_lines.iter().take(cap).map(usize::to_string).collect();
        if match_lines.len() > cap {
            list.push(format!("and {} more", match_lines.len() - cap));
        }
        list.join(", ")
    };
    if starts.len() > 1 && !all {
        return Err(Refused::Error(ToolError::failed(format!(
            "edit_file refused: nothing was written. old_text occurs {} times in {shown} (at \
             lines {}); include more of the surrounding lines in old_text so it matches once, \
             pass \"replace_all\": true to replace every occurrence, or use `edits` with \
             anchors",
            starts.len(),
            lines_list(20)
        ))));
    }
    let replacement = text.with_eol(new);
    let splices = starts
        .iter()
        .zip(&match_lines)
        .map(|(&s, line)| Splice {
            range: s..s + needle.len(),
            text: replacement.clone(),
            label: format!("the occurrence at line {line}"),
        })
        .collect::<Vec<_>>();
    let summary = if splices.len() == 1 {
        format!(
            "replaced the one occurrence of old_text (line {})",
            match_lines[0]
        )
    } else {
        format!(
            "replaced all {} occurrences of old_text (lines {})",
            splices.len(),
            lines_list(50)
        )
    };
    Ok(Plan { splices, summary })
}

/// The refusal of an old_text that is not in the file: the most similar lines, with
/// anchors, and hints about what differs (and the lines shown).
fn no_match_report(text: &Text<'_>, old: &str, shown: &str) -> (String, Vec<(usize, usize)>) {
    let mut out =
        format!("edit_file refused: nothing was written. old_text was not found in {shown}.\n");
    let lines = text.contents();
    let old_lines: Vec<&str> = old.lines().collect();
    let mut hints = Vec::new();
    if old_lines
        .iter()
        .any(|l| Anchor::parse(l).is_ok() && l.contains('|'))
    {
        hints.push(
            "old_text contains anchors (`12:a3f|`) copied from read_file: remove them, or use \
             `edits` with those anchors"
                .to_owned(),
        );
    }
    // The same lines with other whitespace?
    let squash = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let wanted: Vec<String> = old_lines.iter().map(|l| squash(l)).collect();
    let first_wanted = wanted.iter().position(|l| !l.is_empty());
    let mut region = None;
    if let Some(skip) = first_wanted {
        let wanted = &wanted[skip..];
        let have: Vec<String> = lines.iter().map(|l| squash(l)).collect();
        if let Some(at) = (0..have.len().saturating_sub(wanted.len() - 1))
            .find(|&i| have[i..i + wanted.len()] == *wanted)
        {
            let (a, b) = (at + 1, at + wanted.len());
            hints.push(format!(
                "old_text matches lines {a}-{b} if spaces, tabs and indentation are ignored: \
                 copy those lines exactly as the file has them (shown above)"
            ));
            region = Some((a, b));
        }
    }
    if region.is_none() {
        let probe = old_lines
            .iter()
            .map(|l| l.trim())
            .find(|l| !l.is_empty())
            .unwrap_or("");
        if let Some(best) = most_similar_line(&lines, probe) {
            region = Some((best, best + old_lines.len().saturating_sub(1)));
            hints.push(format!(
                "the most similar line to old_text's first line is line {best}; compare it \
                 character by character"
            ));
        }
    }
    let mut windows = Vec::new();
    if let Some((a, b)) = region {
        out.push_str("The nearest lines now:\n");
        let (current, shown_lines) =
            anchored_windows(text, vec![(a.saturating_sub(AROUND - 1), b + AROUND - 1)]);
        out.push_str(&current);
        windows = shown_lines;
    } else if lines.is_empty() {
        hints.push(format!(
            "{shown} is empty: use write_file to give it content"
        ));
    }
    for hint in hints {
        let _ = writeln!(out, "Hint: {hint}.");
    }
    out.push_str("Copy old_text exactly from the file, or use `edits` with the anchors shown.");
    (out, windows)
}

/// The line (from 1) most like `probe` (trimmed): the lowest edit distance relative to
/// the longer of the two, among lines of comparable length.
fn most_similar_line(lines: &[&str], probe: &str) -> Option<usize> {
    const CAP: usize = 120;
    let probe: Vec<char> = probe.chars().take(CAP).collect();
    if probe.is_empty() {
        return None;
    }
    let mut best: Option<(f64, usize)> = None;
    let mut row = Vec::with_capacity(CAP + 1);
    for (i, line) in lines.iter().enumerate() {
        let line: Vec<char> = line.trim().chars().take(CAP).collect();
        if line.is_empty() || line.len() * 3 < probe.len() || probe.len() * 3 < line.len() {
            continue;
        }
        let longer = line.len().max(probe.len()) as f64;
        let score = levenshtein(&probe, &line, &mut row) as f64 / longer;
        if best.is_none_or(|(s, _)| score < s) {
            best = Some((score, i + 1));
        }
    }
    best.filter(|(score, _)| *score < 0.7).map(|(_, line)| line)
}

/// The edit distance between `a` and `b` (two rows, reused).
fn levenshtein(a: &[char], b: &[char], row: &mut Vec<usize>) -> usize {
    row.clear();
    row.extend(0..=b.len());
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

/// Builds the edited text in one pass over `before` (splices in file order; inserts at
/// a point come before a replacement starting there, in the order given) and says where
/// each splice's text landed. Overlapping splices are refused.
fn apply(before: &str, splices: &[Splice]) -> Result<(String, Vec<EditSpan>), ToolError> {
    let mut order: Vec<usize> = (0..splices.len()).collect();
    order.sort_by_key(|&i| (splices[i].range.start, !splices[i].range.is_empty(), i));
    let mut out = String::with_capacity(before.len() + 64);
    let mut cursor = 0;
    let mut previous: Option<&Splice> = None;
    let mut spans = Vec::with_capacity(splices.len());
    for i in order {
        let splice = &splices[i];
        if splice.range.start < cursor {
            let earlier = previous.map_or("an earlier edit", |p| p.label.as_str());
            return Err(ToolError::failed(format!(
                "edit_file refused: nothing was written. {} and {earlier} overlap; every \
                 edit in one call applies to the file as read, so merge them into one edit or \
                 make their line ranges disjoint",
                splice.label
            )));
        }
        out.push_str(&before[cursor..splice.range.start]);
        let at = out.len();
        out.push_str(&splice.text);
        spans.push(EditSpan {
            before: splice.range.clone(),
            after: at..out.len(),
        });
        cursor = splice.range.end;
        previous = Some(splice);
    }
    out.push_str(&before[cursor..]);
    Ok((out, spans))
}

/// A unified diff (3 lines of context) of the change, at most [`MAX_DIFF_LINES`] lines,
/// carriage returns left out.
fn unified_diff(before: &str, after: &str, shown: &str) -> String {
    let diff = similar::TextDiff::from_lines(before, after);
    let text = diff
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{shown}"), &format!("b/{shown}"))
        .to_string();
    let mut out = String::new();
    let all: Vec<&str> = text.lines().collect();
    for line in all.iter().take(MAX_DIFF_LINES) {
        out.push_str(line.strip_suffix('\r').unwrap_or(line));
        out.push('\n');
    }
    if all.len() > MAX_DIFF_LINES {
        let _ = writeln!(
            out,
            "… ({} more diff lines left out)",
            all.len() - MAX_DIFF_LINES
        );
    }
    let (added, removed) = changed_lines(before, after);
    let _ = writeln!(out, "(+{added} -{removed} lines)");
    out
}

/// The changed regions' lines in the edited text, one line of context each side, with
/// their anchors: what further edits can name without a new read (and the ranges shown).
fn new_anchors(after: &str, spans: &[EditSpan]) -> (String, Vec<(usize, usize)>) {
    let text = Text::new(after);
    let count = text.lines.len();
    if count == 0 {
        return ("The file is now empty.\n".to_owned(), Vec::new());
    }
    let ranges: Vec<(usize, usize)> = spans
        .iter()
        .map(|s| {
            let first = text.line_of(s.after.start);
            let last = if s.after.is_empty() {
                first
            } else {
                text.line_of(s.after.end - 1)
            };
            (first.saturating_sub(1), last + 1)
        })
        .collect();
    let (lines, shown) = anchored_windows(&text, ranges);
    (
        format!("Anchors of the changed lines now (with one line around):\n{lines}"),
        shown,
    )
}

/// Lines around `line` of `text`, numbered (no anchors: the text was not written).
/// Lines `from..=to` of `text` marked `>`, with two lines before and after, numbered
/// (at most 40 edited lines shown: the first and last 20).
fn numbered_lines(text: &str, from: usize, to: usize) -> String {
    let first = from.saturating_sub(2).max(1);
    let last = to + 2;
    let mut out = Vec::new();
    for (i, l) in text
        .lines()
        .enumerate()
        .skip(first - 1)
        .take(last + 1 - first)
    {
        let n = i + 1;
        let edited = (from..=to).contains(&n);
        if edited && to - from >= 40 && n >= from + 20 && n + 20 <= to {
            if n == from + 20 {
                out.push(format!(
                    "       … {} edited lines not shown …",
                    to - from - 39
                ));
            }
            continue;
        }
        let mark = if edited { ">" } else { " " };
        out.push(format!(
            "{mark}{n:>5} | {}",
            l.strip_suffix('\r').unwrap_or(l)
        ));
    }
    out.join("\n")
}

fn numbered_excerpt(text: &str, line: usize) -> String {
    let first = line.saturating_sub(2).max(1);
    text.lines()
        .enumerate()
        .skip(first - 1)
        .take(line + 3 - first)
        .map(|(i, l)| {
            let mark = if i + 1 == line { ">" } else { " " };
            format!("{mark}{:>5} | {}", i + 1, l.strip_suffix('\r').unwrap_or(l))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anchor(text: &Text<'_>, n: usize) -> String {
        format!("{n}:{}", line_hash(text.line(n)))
    }

    fn edit_by(text: &Text<'_>, from: usize, to: Option<usize>, new_text: &str) -> AnchoredEdit {
        AnchoredEdit {
            from: Some(anchor(text, from)),
            to: to.map(|t| anchor(text, t)),
            after: None,
            before: None,
            new_text: new_text.to_owned(),
        }
    }

    fn message(refused: Refused) -> String {
        match refused {
            Refused::Error(e) => e.to_string(),
            Refused::Showing { message, .. } => message,
        }
    }

    /// Edits `now` by anchors taken from a read of `read` (recorded whole).
    fn run_read(read: &str, now: &str, edits: &[AnchoredEdit]) -> Result<String, String> {
        let record = Record::all_shown(Text::new(read).hashes());
        let text = Text::new(now);
        let parsed = parse_anchored(edits).map_err(|e| e.to_string())?;
        let proof = Proof {
            record: Some(&record),
            problem: None,
        };
        prove_anchored(&text, &parsed, "f", proof).map_err(message)?;
        let plan = plan_anchored(&text, parsed);
        apply(now, &plan.splices)
            .map(|(after, _)| after)
            .map_err(|e| e.to_string())
    }

    fn run(before: &str, edits: &[AnchoredEdit]) -> Result<String, String> {
        run_read(before, before, edits)
    }

    #[test]
    fn lines_split_as_read_file_numbers_them_and_keep_their_endings() {
        let t = Text::new("a\r\nb\r\nc");
        assert_eq!(t.lines.len(), 3);
        assert_eq!(
            (t.line(2), t.terminator(2), t.terminator(3)),
            ("b", "\r\n", "")
        );
        assert_eq!(t.eol, "\r\n");
        assert_eq!(Text::new("a\n\n").lines.len(), 2);
        assert_eq!(Text::new("").lines.len(), 0);
        assert_eq!(t.line_of(0), 1);
        assert_eq!(t.line_of(3), 2);
        assert_eq!(t.with_eol("x\ny\r\n"), "x\r\ny\r\n");
    }

    #[test]
    fn replacing_deleting_and_inserting_lines() {
        let before = "one\ntwo\nthree\nfour\n";
        let t = Text::new(before);
        assert_eq!(
            run(before, &[edit_by(&t, 2, Some(3), "TWO\nTHREE\nMORE")]).expect("ok"),
            "one\nTWO\nTHREE\nMORE\nfour\n"
        );
        assert_eq!(
            run(before, &[edit_by(&t, 2, None, "")]).expect("ok"),
            "one\nthree\nfour\n"
        );
        let insert = |after: Option<usize>, before_line: Option<usize>| AnchoredEdit {
            from: None,
            to: None,
            after: after.map(|n| anchor(&t, n)),
            before: before_line.map(|n| anchor(&t, n)),
            new_text: "new\n".to_owned(),
        };
        assert_eq!(
            run(before, &[insert(Some(4), None), insert(None, Some(1))]).expect("ok"),
            "new\none\ntwo\nthree\nfour\nnew\n"
        );
        // A last line without a line break keeps having none.
        let open = "a\nb";
        let t = Text::new(open);
        assert_eq!(run(open, &[edit_by(&t, 2, None, "B")]).expect("ok"), "a\nB");
        let after_last = AnchoredEdit {
            from: None,
            to: None,
            after: Some(anchor(&t, 2)),
            before: None,
            new_text: "c".to_owned(),
        };
        assert_eq!(run(open, &[after_last]).expect("ok"), "a\nb\nc");
    }

    #[test]
    fn overlapping_edits_and_bad_ranges_are_refused() {
        let before = "1\n2\n3\n4\n5\n";
        let t = Text::new(before);
        let e = run(
            before,
            &[edit_by(&t, 1, Some(3), "x"), edit_by(&t, 3, Some(4), "y")],
        )
        .expect_err("overlap");
        assert!(e.to_string().contains("overlap"), "{e}");
        let inside = AnchoredEdit {
            from: None,
            to: None,
            after: Some(anchor(&t, 2)),
            before: None,
            new_text: "z".to_owned(),
        };
        let e = run(before, &[edit_by(&t, 1, Some(3), "x"), inside]).expect_err("inside");
        assert!(e.to_string().contains("overlap"), "{e}");
        let e = run(before, &[edit_by(&t, 3, Some(1), "x")]).expect_err("backwards");
        assert!(e.to_string().contains("is before `from`"), "{e}");
    }

    #[test]
    fn a_stale_anchor_shows_the_current_lines_and_where_the_line_went() {
        let read = "alpha\nbeta\ngamma\n";
        let t = Text::new(read);
        let edit = edit_by(&t, 2, None, "BETA");
        let now = "inserted\nalpha\nbeta\ngamma\n";
        let e = run_read(read, now, &[edit]).expect_err("stale");
        assert!(e.contains("nothing was written"), "{e}");
        assert!(e.contains("line 2 is now `2:"), "{e}");
        assert!(e.contains("now line 3"), "{e}");
        assert!(e.contains(&format_line(3, "beta")), "{e}");
        assert!(
            e.contains("lines were added: the file has 4 lines now, 3 then"),
            "{e}"
        );
    }

    #[test]
    fn a_line_changed_inside_the_range_is_refused_though_both_anchors_match() {
        let read = "fn f() {\n    a();\n    b();\n}\n";
        let t = Text::new(read);
        let edit = edit_by(&t, 1, Some(4), "fn f() {}");
        let now = "fn f() {\n    a();\n    evil();\n}\n";
        let e = run_read(read, now, &[edit]).expect_err("changed inside");
        assert!(
            e.contains("edit 1 (lines 1-4): a line inside the range changed"),
            "{e}"
        );
        assert!(e.contains("it differs at line 3 now"), "{e}");
        assert!(e.contains(&format_line(3, "    evil();")), "{e}");
    }

    #[test]
    fn a_shifted_file_is_refused_though_the_anchors_line_looks_the_same() {
        let read = "fn a() {\n    1\n}\nfn b() {\n    2\n}\n";
        let t = Text::new(read);
        // Deleting `}` of a (line 3); three lines come in at the top, and line 3 is a `}`
        // again, of another function.
        let edit = edit_by(&t, 3, None, "");
        let now = "fn z() {}\nfn y() {\n}\nfn a() {\n    1\n}\nfn b() {\n    2\n}\n";
        assert_eq!(Text::new(now).line(3), "}");
        let e = run_read(read, now, &[edit]).expect_err("shifted");
        assert!(
            e.contains("edit 1 (line 3): lines were added above it"),
            "{e}"
        );
        assert!(e.contains("shifted by +3 lines"), "{e}");
        assert!(e.contains("what was read as line 3 is line 6 now"), "{e}");
        assert!(e.contains(&format_line(6, "}")), "{e}");
    }

    #[test]
    fn changes_only_above_without_a_shift_or_only_below_do_not_refuse() {
        let read = "a\nb\nc\nd\ne\n";
        let t = Text::new(read);
        let above = "A\nb\nc\nd\ne\n";
        assert_eq!(
            run_read(read, above, &[edit_by(&t, 4, None, "D")]).expect("above"),
            "A\nb\nc\nD\ne\n"
        );
        let below = "a\nb\nc\nd\nE\nF\n";
        assert_eq!(
            run_read(read, below, &[edit_by(&t, 2, Some(3), "BC")]).expect("below"),
            "a\nBC\nd\nE\nF\n"
        );
    }

    #[test]
    fn lines_never_shown_or_no_record_are_refused_with_the_current_lines() {
        let now = "a\nb\nc\nd\ne\nf\ng\nh\n";
        let text = Text::new(now);
        let parsed_edits = [edit_by(&text, 2, Some(6), "x")];
        let parsed = parse_anchored(&parsed_edits).expect("parsed");
        let mut record = Record::carried(None, text.hashes());
        record.show(1, 4);
        let proof = Proof {
            record: Some(&record),
            problem: None,
        };
        let Err(Refused::Showing { message, lines }) = prove_anchored(&text, &parsed, "f", proof)
        else {
            panic!("lines 5-6 were never shown");
        };
        assert!(
            message.contains("lines 5-6 of it were not shown"),
            "{message}"
        );
        assert_eq!(lines, [(1, 8)]);
        let none = Proof {
            record: None,
            problem: None,
        };
        let Err(Refused::Showing { message, lines }) = prove_anchored(&text, &parsed, "f", none)
        else {
            panic!("no record");
        };
        assert!(message.contains("No read of f is on record"), "{message}");
        assert!(message.contains(&format_line(6, "f")), "{message}");
        assert_eq!(lines, [(1, 8)]);
    }

    #[test]
    fn after_an_edit_untouched_lines_keep_what_was_shown_and_touched_or_moved_ones_lose_it() {
        let before = "a\nb\nc\nd\ne\n";
        let text = Text::new(before);
        let edits = [
            edit_by(&text, 2, None, "B1\nB2"),
            AnchoredEdit {
                from: None,
                to: None,
                after: None,
                before: Some(anchor(&text, 5)),
                new_text: "new".to_owned(),
            },
        ];
        let plan = plan_anchored(&text, parse_anchored(&edits).expect("parsed"));
        let (after, spans) = apply(before, &plan.splices).expect("applied");
        assert_eq!(after, "a\nB1\nB2\nc\nd\nnew\ne\n");
        let shown = [true, false, false, true, true];
        let carried = carry_over_edit(&text, &shown, &Text::new(&after), &spans);
        // `a` kept its number; `c`, `d` and `e` moved down (two lines for one above them,
        // then one inserted), so they must be shown again before an anchor names them.
        assert_eq!(carried, [true, false, false, false, false, false, false]);
        // An edit that adds no line keeps the lines below it shown.
        let same = [edit_by(&text, 2, None, "B")];
        let plan = plan_anchored(&text, parse_anchored(&same).expect("parsed"));
        let (after, spans) = apply(before, &plan.splices).expect("applied");
        let carried = carry_over_edit(&text, &shown, &Text::new(&after), &spans);
        assert_eq!(carried, [true, false, false, true, true]);
    }

    #[test]
    fn exact_text_needs_one_match_or_replace_all() {
        let before = "let a = 1;\nlet b = 1;\n";
        let t = Text::new(before);
        let e = message(
            plan_exact(&t, "= 1", "= 2", false, "f")
                .err()
                .expect("two matches"),
        );
        assert!(
            e.contains("occurs 2 times") && e.contains("lines 1, 2"),
            "{e}"
        );
        let Ok(plan) = plan_exact(&t, "= 1", "= 2", true, "f") else {
            panic!("replace_all");
        };
        assert!(
            plan.summary.contains("all 2 occurrences"),
            "{}",
            plan.summary
        );
        assert_eq!(
            apply(before, &plan.splices).expect("ok").0,
            "let a = 2;\nlet b = 2;\n"
        );
    }

    #[test]
    fn no_match_shows_the_nearest_lines_and_whitespace_hints() {
        let before = "fn main() {\n\tlet total = 1;\n}\n";
        let t = Text::new(before);
        let e = message(
            plan_exact(&t, "    let total = 1;", "x", false, "f")
                .err()
                .expect("no match"),
        );
        assert!(e.contains("spaces, tabs and indentation"), "{e}");
        assert!(e.contains(&format_line(2, "\tlet total = 1;")), "{e}");
        let e = message(
            plan_exact(&t, "let totl = 2;", "x", false, "f")
                .err()
                .expect("no match"),
        );
        assert!(
            e.contains("most similar line to old_text's first line is line 2"),
            "{e}"
        );
    }

    #[test]
    fn levenshtein_counts_edits() {
        let mut row = Vec::new();
        let chars = |s: &str| s.chars().collect::<Vec<_>>();
        assert_eq!(
            levenshtein(&chars("kitten"), &chars("sitting"), &mut row),
            3
        );
        assert_eq!(levenshtein(&chars(""), &chars("ab"), &mut row), 2);
    }

    #[test]
    fn new_anchors_cover_the_changed_lines_with_one_around() {
        let after = "a\nb\nC\nd\ne\n";
        let spans = [EditSpan {
            before: 4..6,
            after: 4..6,
        }];
        let (shown, lines) = new_anchors(after, &spans);
        assert_eq!(lines, [(2, 4)]);
        assert!(shown.contains(&format_line(2, "b")), "{shown}");
        assert!(shown.contains(&format_line(3, "C")), "{shown}");
        assert!(shown.contains(&format_line(4, "d")), "{shown}");
        assert!(!shown.contains(&format_line(1, "a")), "{shown}");
    }
}
