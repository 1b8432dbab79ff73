//! `read_file` and `batch_read`: a file's text in `<context>` framing, each line shown
//! with its hashline anchor (`12:a3f|text`), a range of lines at a time. Binary files are
//! described (size and a guess of the kind from their first bytes), never dumped.
//!
//! Every file is opened through its root's directory handle (see `roots`), so neither
//! `..`, an absolute path outside, nor a symbolic link (also one swapped in between a
//! check and the open) reaches a file outside the workspace. Files over
//! [`MAX_FILE_BYTES`] are not held whole: only the lines asked for are read, and their
//! total is not counted. Each read of a file `edit_file` could edit is put on record (see
//! `reads`): the hash of every line and which lines were shown, so an anchored edit can
//! prove it replaces what was read.
//!
//! A file with several hard links is read (a hard link is the same file under another
//! name; only someone who may already reach the file can make one, with the kernel's
//! `fs.protected_hardlinks`, and a sandboxed command cannot link across its Landlock
//! rules), and the result says how many links it has. Weak spot: a file is judged binary
//! from its first 8 KiB only (as ripgrep does); a NUL byte further on is shown as text.

use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, Read};

use cap_std::fs::{MetadataExt as _, OpenOptions, OpenOptionsExt as _};
use schemars::JsonSchema;
use serde::Deserialize;
use toolhost_plugin_api::{CancelFlag, OutputBudget, ToolContext, ToolError, tool};

use crate::anchors;
use crate::listing::human_size;
use crate::reads::{self, MAX_EDIT_BYTES, Reads, Record};
use crate::roots::{self, Workspace};

/// Lines shown when the call names no `limit`.
pub(crate) const DEFAULT_LIMIT: usize = 2000;
/// The most lines one read may ask for.
pub(crate) const MAX_LIMIT: usize = 20_000;
/// Files larger than this are read only up to the lines asked for.
pub(crate) const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;
/// The most paths `batch_read` takes.
pub(crate) const MAX_BATCH: usize = 20;
/// How much of a file is looked at to tell text from binary.
const SNIFF_BYTES: usize = 8 * 1024;
/// Characters of one line shown before it is cut (the anchor still hashes all of it).
const MAX_LINE_CHARS: usize = 2000;

/// Arguments of `read_file`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// The file: relative to the first workspace root, or an absolute path beneath one of
    /// the roots.
    path: String,
    /// The first line to show, counted from 1. Default 1.
    #[serde(default)]
    #[schemars(range(min = 1))]
    offset: Option<usize>,
    /// How many lines to show. Default 2000, at most 20000.
    #[serde(default)]
    #[schemars(range(min = 1, max = 20000))]
    limit: Option<usize>,
}

/// Arguments of `batch_read`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchReadArgs {
    /// The files (1 to 20): relative to the first workspace root, or absolute beneath a
    /// root.
    #[schemars(length(min = 1, max = 20))]
    paths: Vec<String>,
    /// How many lines to show of each file, from its first line. Default 2000, at most
    /// 20000.
    #[serde(default)]
    #[schemars(range(min = 1, max = 20000))]
    limit: Option<usize>,
}

/// The lines a read shows: from `offset` (1-based), at most `limit`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LineRange {
    /// The first line, from 1.
    pub(crate) offset: usize,
    /// How many lines at most.
    pub(crate) limit: usize,
}

impl LineRange {
    /// The range a call asked for, defaults filled in and limits checked.
    pub(crate) fn asked(offset: Option<usize>, limit: Option<usize>) -> Result<Self, ToolError> {
        let offset = offset.unwrap_or(1);
        let limit = limit.unwrap_or(DEFAULT_LIMIT);
        if offset == 0 {
            return Err(ToolError::invalid_args(
                "offset counts lines from 1; use 1 for the start of the file",
            ));
        }
        if limit == 0 || limit > MAX_LIMIT {
            return Err(ToolError::invalid_args(format!(
                "limit must be between 1 and {MAX_LIMIT} lines (got {limit}); read a long \
                 file in parts with offset"
            )));
        }
        Ok(LineRange { offset, limit })
    }
}

/// Reads a text file in the workspace. Returns its lines wrapped in <context path="..."
/// lines="A-B of N"> ... </context>, each line shown as NUMBER:HASH|text (e.g.
/// `12:a3f|fn main() {`); the NUMBER:HASH anchors are what edit_file takes to name
/// lines. Shows 2000 lines from `offset` (default line 1) unless `limit` says otherwise
/// (at most 20000), fewer where the result would pass the output budget, and says at
/// the end which lines were left out and the offset to read on from. Lines longer than
/// 2000 characters are cut (the cut is marked). Files over 10 MiB are read only up to
/// the lines asked for. Binary files (images, archives, executables...) are described
/// (kind and size), not shown; a directory is refused (use list_dir). Paths are
/// relative to the first workspace root (or absolute beneath a root); nothing outside
/// the roots can be read.
#[tool(risk = read, workspace)]
pub async fn read_file(
    ctx: &ToolContext<'_>,
    #[args] args: ReadFileArgs,
) -> Result<String, ToolError> {
    let range = LineRange::asked(args.offset, args.limit)?;
    let workspace = Workspace::of(ctx).await?;
    let reads = Reads::of(ctx).await;
    let budget = ctx.output_budget().await;
    ctx.blocking(move |cancel| read_one(&workspace, &reads, &args.path, range, budget, cancel))
        .await
        .map_err(ToolError::failed)?
}

/// Reads up to 20 files of the workspace in one call, each exactly as read_file shows
/// it: one <context path="..." lines="A-B of N"> ... </context> block per file, lines
/// as NUMBER:HASH|text anchors, binary files described rather than shown. `limit`
/// (default 2000, at most 20000) is the lines shown of each file, from its first line
/// (the files share the output budget equally, what one leaves going to the next; a
/// file there is no room for is marked not-read); use read_file with offset to read
/// further. A file that cannot be read gets an <error path="...">why</error> block in
/// its place; the others are still read.
#[tool(risk = read, workspace)]
pub async fn batch_read(
    ctx: &ToolContext<'_>,
    #[args] args: BatchReadArgs,
) -> Result<String, ToolError> {
    if args.paths.is_empty() {
        return Err(ToolError::invalid_args("paths must name at least one file"));
    }
    if args.paths.len() > MAX_BATCH {
        return Err(ToolError::invalid_args(format!(
            "batch_read takes at most {MAX_BATCH} paths (got {}); split them over several \
                 calls",
            args.paths.len()
        )));
    }
    let range = LineRange::asked(None, args.limit)?;
    let workspace = Workspace::of(ctx).await?;
    let reads = Reads::of(ctx).await;
    let budget = ctx.output_budget().await;
    ctx.blocking(move |cancel| {
        let mut out = String::new();
        for (i, path) in args.paths.iter().enumerate() {
            if cancel.is_cancelled() {
                return Err(ToolError::failed("cancelled"));
            }
            if !out.is_empty() {
                out.push('\n');
            }
            // What is left of the budget, less a line for each file still to come.
            let later = &args.paths[i + 1..];
            let Some(left) = budget_left(budget, &out, later) else {
                let _ = writeln!(out, "{}", not_read(path));
                continue;
            };
            match read_one(&workspace, &reads, path, range, left, cancel) {
                Ok(block) => out.push_str(&block),
                Err(e) => {
                    let why = match e {
                        ToolError::Failed(m) | ToolError::InvalidArgs(m) => m,
                    };
                    let _ = writeln!(out, "<error path=\"{}\">{why}</error>", attr(path));
                }
            }
        }
        Ok(out)
    })
    .await
    .map_err(ToolError::failed)?
}

/// The line `batch_read` shows for a file it had no budget left to read.
fn not_read(path: &str) -> String {
    format!(
        "<not-read path=\"{}\">no room for it in this result's output budget; read it with read_file</not-read>",
        attr(path)
    )
}

/// This file's share of what is left of `budget` after `out`: an equal part for it and
/// each of `later` (what a file leaves of its part goes to those after it); `None` when
/// the share is too small to show a file (its frame and a few lines).
fn budget_left(budget: OutputBudget, out: &str, later: &[String]) -> Option<OutputBudget> {
    let used_chars = out.chars().count() as u64;
    let used_lines = out.bytes().filter(|&b| b == b'\n').count() as u64;
    let files = later.len() as u64 + 1;
    let share = |max: u64, used: u64, least: u64| -> Option<u64> {
        if max == 0 {
            return Some(0);
        }
        Some(max.checked_sub(used)? / files).filter(|share| *share >= least)
    };
    Some(OutputBudget {
        max_chars: share(budget.max_chars, used_chars, FRAME_CHARS + 200)?,
        max_lines: share(budget.max_lines, used_lines, FRAME_LINES + 3)?,
    })
}

/// The characters a read keeps for its frame and notes besides the path (the context
/// lines, the "read on" note, the notes on encoding, record and hard links).
const FRAME_CHARS: u64 = 1200;
/// The lines it keeps for them.
const FRAME_LINES: u64 = 6;

/// Reads `path` as `read_file` shows it: the framed block, with the notes after it, within
/// `budget` (the lines past it are left for the next read, which the note says); puts the
/// lines shown on record.
pub(crate) fn read_one(
    workspace: &Workspace,
    reads: &Reads,
    path: &str,
    range: LineRange,
    budget: OutputBudget,
    cancel: &CancelFlag,
) -> Result<String, ToolError> {
    let resolved = workspace.resolve(path)?;
    let shown = resolved.shown();
    let mut options = OpenOptions::new();
    // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused just below).
    options
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    let file = resolved
        .root
        .dir
        .open_with(&resolved.rel, &options)
        .map_err(|e| match e.kind() {
            io::ErrorKind::IsADirectory => is_a_directory(&shown),
            _ => roots::io_error(&shown, &e),
        })?;
    resolved.check_opened(&file)?;
    let meta = file.metadata().map_err(|e| roots::io_error(&shown, &e))?;
    if meta.is_dir() {
        return Err(is_a_directory(&shown));
    }
    if !meta.is_file() {
        return Err(ToolError::failed(format!(
            "{shown} is not a regular file (a FIFO, socket or device); read_file reads \
             regular files only"
        )));
    }
    let size = meta.len();
    let key = reads::key_of(&file, resolved.root.path.join(&resolved.rel));
    let (mut out, seen) = read_text(&shown, size, file.into_std(), range, budget, cancel)?;
    if let Some(seen) = seen {
        let old = reads.load(&key).ok().flatten();
        let mut record = Record::carried(old.as_ref(), seen.hashes);
        record.show(seen.first, seen.last);
        if let Err(e) = reads.save(&key, &record) {
            let _ = writeln!(
                out,
                "(note: this read could not be put on record ({e}); edit_file refuses \
                 anchored edits of lines not on record: edit by old_text/new_text instead)"
            );
        }
    }
    if meta.nlink() > 1 {
        let _ = writeln!(
            out,
            "(this file has {} hard links: other names for the same file; edit_file and \
             write_file replace this name only, and write_file's append is refused)",
            meta.nlink()
        );
    }
    Ok(out)
}

/// What a read showed of a file it read whole: every line's hash and the lines shown.
struct Seen {
    hashes: Vec<u64>,
    first: usize,
    last: usize,
}

fn is_a_directory(shown: &str) -> ToolError {
    ToolError::failed(format!(
        "{shown} is a directory, not a file; use list_dir to see what it holds"
    ))
}

/// Reads the lines of an open file (`size` bytes when it was opened), and for a text file
/// `edit_file` could edit, what to put on record.
fn read_text(
    shown: &str,
    size: u64,
    file: std::fs::File,
    range: LineRange,
    budget: OutputBudget,
    cancel: &CancelFlag,
) -> Result<(String, Option<Seen>), ToolError> {
    let io_err = |e: io::Error| roots::io_error(shown, &e);
    let mut head = Vec::with_capacity(SNIFF_BYTES);
    let mut file = file;
    (&mut file)
        .take(SNIFF_BYTES as u64)
        .read_to_end(&mut head)
        .map_err(io_err)?;
    if let Some(kind) = binary_kind(&head) {
        let out = format!(
            "<context path=\"{}\" kind=\"binary\">\n{kind}, {}: binary data, not shown \
             (read_file shows text files only)\n</context>\n",
            attr(shown),
            human_size(size),
        );
        return Ok((out, None));
    }
    let big = size > MAX_FILE_BYTES;
    let mut reader = BufReader::with_capacity(64 * 1024, head.as_slice().chain(file));
    let first = range.offset;
    let last_wanted = range.offset.saturating_add(range.limit - 1);
    let mut page = budget.page(
        FRAME_CHARS + 2 * attr(shown).chars().count() as u64,
        FRAME_LINES,
    );
    let mut line = Vec::new();
    let mut number = 0usize;
    let mut shown_last = 0usize;
    let mut lossy = false;
    let mut complete = true;
    // Every line's hash, while the file is small enough to edit.
    let mut hashes = (size <= MAX_EDIT_BYTES).then(Vec::new);
    let mut bytes_read = 0u64;
    loop {
        line.clear();
        let got = reader.read_until(b'\n', &mut line).map_err(io_err)?;
        if got == 0 {
            break;
        }
        number += 1;
        bytes_read += got as u64;
        if bytes_read > MAX_EDIT_BYTES {
            hashes = None;
        }
        if let Some(hashes) = hashes.as_mut() {
            hashes.push(reads::hash_line(reads::line_content(&line)));
        }
        if number.is_multiple_of(4096) && cancel.is_cancelled() {
            return Err(ToolError::failed("cancelled"));
        }
        if number < first {
            continue;
        }
        if number > last_wanted || page.is_full() {
            if big {
                // Over the size limit: stop after the lines asked for, uncounted.
                complete = false;
                break;
            }
            continue;
        }
        let bytes = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = String::from_utf8_lossy(bytes);
        lossy |= matches!(text, std::borrow::Cow::Owned(_));
        let mut shown_line = anchors::format_line_cut(number, &text, MAX_LINE_CHARS);
        if page.is_empty()
            && let Some(room) = page.room_chars()
            && shown_line.chars().count() as u64 > room
        {
            // Not even the first line fits whole: it is shown cut to the room there is.
            let keep = (room as usize).saturating_sub(48);
            shown_line = anchors::format_line_cut(number, &text, keep);
        }
        if !page.push_line(&shown_line) {
            if page.is_empty() {
                return Err(ToolError::failed(format!(
                    "the output budget ({} characters, {} lines) is too small to show line \
                     {number} of {shown}",
                    budget.max_chars, budget.max_lines
                )));
            }
            // The budget is reached: the lines from here are the next read's.
            if big {
                complete = false;
                break;
            }
            continue;
        }
        shown_last = number;
    }
    let total = number;
    if total == 0 {
        let out = format!(
            "<context path=\"{}\" lines=\"0 of 0\">\n</context>\n(the file is empty)\n",
            attr(shown)
        );
        return Ok((out, None));
    }
    if shown_last == 0 {
        return Err(ToolError::failed(format!(
            "{shown} has {total} lines; offset {first} is past its end (read from offset 1 to \
             {total})"
        )));
    }
    let body = page.into_text();
    let mut out = String::with_capacity(body.len() + 200);
    let of = if complete {
        format!(" of {total}")
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "<context path=\"{}\" lines=\"{first}-{shown_last}{of}\">",
        attr(shown)
    );
    out.push_str(&body);
    out.push_str("</context>\n");
    if lossy {
        out.push_str(
            "(the file is not valid UTF-8: bytes that are not were shown as \u{FFFD}; edits by \
             anchor still work on the lines shown)\n",
        );
    }
    if !complete {
        let _ = writeln!(
            out,
            "(the file is {}, over read_file's {} limit: only lines {first}-{shown_last} \
             were read and the rest were not counted; read on with offset {})",
            human_size(size),
            human_size(MAX_FILE_BYTES),
            shown_last + 1
        );
    } else if shown_last < total {
        let _ = writeln!(
            out,
            "(lines {}-{total} of {total} not shown; read on with offset {})",
            shown_last + 1,
            shown_last + 1
        );
    }
    let seen = hashes.filter(|_| complete).map(|hashes| Seen {
        hashes,
        first,
        last: shown_last,
    });
    Ok((out, seen))
}

/// What a file that starts with `head` is, if it is not text: a NUL byte, or bytes that
/// are mostly not UTF-8 text. The kind is guessed from the first bytes.
fn binary_kind(head: &[u8]) -> Option<String> {
    let magic = magic_kind(head);
    if head.contains(&0) || !mostly_text(head) {
        return Some(magic.unwrap_or("binary file").to_owned());
    }
    // PDF and some others start as text but are binary further on.
    magic
        .filter(|kind| kind.starts_with("PDF"))
        .map(str::to_owned)
}

/// Whether `head` reads as text: at most 30% of it invalid UTF-8 or control characters
/// other than tab, line ends, form feed and escape. A character cut at the end of `head`
/// does not count.
fn mostly_text(head: &[u8]) -> bool {
    fn controls(text: &str) -> usize {
        text.chars()
            .filter(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r' | '\x0c' | '\x1b'))
            .count()
    }
    let mut bad = 0usize;
    let mut rest = head;
    loop {
        match std::str::from_utf8(rest) {
            Ok(valid) => {
                bad += controls(valid);
                break;
            }
            Err(e) => {
                let (valid, after) = rest.split_at(e.valid_up_to());
                bad += controls(std::str::from_utf8(valid).unwrap_or_default());
                match e.error_len() {
                    // A character cut by the end of the sniffed bytes.
                    None => break,
                    Some(n) => {
                        bad += n;
                        rest = &after[n..];
                    }
                }
            }
        }
    }
    bad * 10 <= head.len() * 3
}

/// A guess of a file's kind from its first bytes.
fn magic_kind(head: &[u8]) -> Option<&'static str> {
    const KINDS: &[(&[u8], &str)] = &[
        (b"\x7fELF", "ELF executable or library"),
        (b"\x89PNG\r\n\x1a\n", "PNG image"),
        (b"\xff\xd8\xff", "JPEG image"),
        (b"GIF87a", "GIF image"),
        (b"GIF89a", "GIF image"),
        (b"\x1f\x8b", "gzip archive"),
        (b"PK\x03\x04", "zip archive (or jar, docx, xlsx...)"),
        (b"PK\x05\x06", "zip archive (empty)"),
        (b"%PDF-", "PDF document"),
        (b"BZh", "bzip2 archive"),
        (b"\xfd7zXZ\x00", "xz archive"),
        (b"\x28\xb5\x2f\xfd", "zstd archive"),
        (b"7z\xbc\xaf\x27\x1c", "7-Zip archive"),
        (b"\x00asm", "WebAssembly module"),
        (b"SQLite format 3\x00", "SQLite database"),
        (
            b"\xca\xfe\xba\xbe",
            "Java class file or Mach-O universal binary",
        ),
        (b"\xcf\xfa\xed\xfe", "Mach-O binary"),
        (b"MZ", "Windows executable"),
        (b"OggS", "Ogg audio/video"),
        (b"ID3", "MP3 audio"),
        (b"fLaC", "FLAC audio"),
        (b"\x00\x00\x01\x00", "ICO icon"),
        (b"wOFF", "WOFF font"),
        (b"wOF2", "WOFF2 font"),
        (b"!<arch>\n", "ar archive (static library or .deb)"),
    ];
    if head.len() >= 12 && head.starts_with(b"RIFF") {
        return Some(match &head[8..12] {
            b"WEBP" => "WebP image",
            b"WAVE" => "WAV audio",
            b"AVI " => "AVI video",
            _ => "RIFF data",
        });
    }
    if head.len() >= 12 && &head[4..8] == b"ftyp" {
        return Some("MP4/QuickTime media");
    }
    if head.len() >= 262 && &head[257..262] == b"ustar" {
        return Some("tar archive");
    }
    KINDS
        .iter()
        .find(|(magic, _)| head.starts_with(magic))
        .map(|(_, kind)| *kind)
}

/// `text` for a double-quoted attribute of the framing.
pub(crate) fn attr(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_guessed_from_magic_bytes() {
        assert_eq!(
            binary_kind(b"\x7fELF\x02\x01\x01\x00\x00").as_deref(),
            Some("ELF executable or library")
        );
        assert_eq!(
            binary_kind(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR").as_deref(),
            Some("PNG image")
        );
        assert_eq!(
            binary_kind(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n").as_deref(),
            Some("PDF document")
        );
        assert_eq!(
            binary_kind(b"\x1f\x8b\x08\x00\x00\x00").as_deref(),
            Some("gzip archive")
        );
        assert_eq!(
            binary_kind(b"plain\x00text").as_deref(),
            Some("binary file")
        );
    }

    #[test]
    fn text_with_a_few_bad_bytes_is_text_and_noise_is_binary() {
        assert_eq!(binary_kind(b"fn main() {}\n"), None);
        // Latin-1 text: one invalid byte in a line of ASCII.
        assert_eq!(binary_kind(b"caf\xe9 au lait, s'il vous pla\xeet\n"), None);
        // A UTF-8 character cut at the end of the sniffed bytes is not held against it.
        assert_eq!(binary_kind("ab€".as_bytes().split_at(4).0), None);
        let noise: Vec<u8> = (0..512u32)
            .map(|i| u8::try_from((i * 131 + 7) % 256).unwrap_or(1) | 0x80)
            .collect();
        assert_eq!(binary_kind(&noise).as_deref(), Some("binary file"));
        assert_eq!(
            binary_kind(b"\x01\x02\x03\x04\x05\x06\x07text").as_deref(),
            Some("binary file")
        );
    }

    #[test]
    fn ranges_are_checked() {
        assert!(LineRange::asked(Some(0), None).is_err());
        assert!(LineRange::asked(None, Some(0)).is_err());
        assert!(LineRange::asked(None, Some(MAX_LIMIT + 1)).is_err());
        let r = LineRange::asked(None, None).expect("defaults");
        assert_eq!((r.offset, r.limit), (1, DEFAULT_LIMIT));
    }

    #[test]
    fn attributes_are_escaped() {
        assert_eq!(attr("a\"b<c&d"), "a&quot;b&lt;c&amp;d");
    }
}
