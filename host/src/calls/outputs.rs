//! The output budget and the output store. A tool's text longer than the budget goes on
//! as its head and its tail with one marker line between them that says how much was left
//! out and how to read it; the full text is kept in the profile's `outputs/` folder under
//! an unguessable id, readable only by the profile and token that made it. The call door
//! applies this to every result (see `door.rs`); `read_output`, `toolhost output` and MCP
//! `resources/read` read it back through [`OutputStore::read`].
//!
//! Weak spots: the running total that decides when to prune is this process's view; two
//! hosts sharing a profile each prune by their own count (both by age and size, so the
//! folder still stays bounded). A read loads the whole text into memory (outputs are at
//! most what a tool returned, which the plugin boundary already held in memory).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The detail key of a result whose text was cut (the seed's `FullOutput`):
/// `{"id", "chars", "lines", "bytes"}` of the full text.
pub const FULL_OUTPUT_DETAIL: &str = toolhost_plugin_api::FULL_OUTPUT;

/// The name of the native tool that reads kept outputs back.
pub const READ_OUTPUT_TOOL: &str = "read_output";

/// The smallest `max_chars` that is not 0: room for the marker line and some text.
pub const MIN_MAX_CHARS: usize = 1000;

/// How many lines a read of a range returns when it names no limit.
pub const DEFAULT_READ_LINES: usize = 400;

/// How much text a result may carry: characters and lines, 0 meaning that limit is off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The most characters (Unicode scalar values); 0: no limit.
    pub max_chars: usize,
    /// The most lines; 0: no limit.
    pub max_lines: usize,
}

impl Budget {
    /// 30,000 characters (about 8,000 tokens, what Claude Code allows one command's output)
    /// and 1,000 lines.
    pub const DEFAULT: Budget = Budget {
        max_chars: 30_000,
        max_lines: 1_000,
    };

    /// No limit at all.
    pub const OFF: Budget = Budget {
        max_chars: 0,
        max_lines: 0,
    };

    /// Whether both limits are off.
    pub fn is_off(&self) -> bool {
        self.max_chars == 0 && self.max_lines == 0
    }

    /// Whether `text` fits. Counting stops at the limits, so a short text costs next to
    /// nothing.
    pub fn fits(&self, text: &str) -> bool {
        fits(text, self.max_chars, self.max_lines)
    }
}

impl Default for Budget {
    fn default() -> Self {
        Budget::DEFAULT
    }
}

/// A profile's `[output]` settings, resolved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OutputSettings {
    /// The budget every result is held to.
    pub budget: Budget,
    /// Kept outputs older than this are removed; `None`: kept regardless of age.
    pub keep_for: Option<Duration>,
    /// The most bytes of kept outputs; past it the oldest go. 0: no limit.
    pub keep_bytes: u64,
    /// The most characters an MCP client may ask for with
    /// `_meta["anthropic/maxResultSizeChars"]`; 0: clients cannot change the budget.
    pub mcp_max_chars_ceiling: usize,
    /// Whether the profile's tools include `read_output`.
    pub read_output: bool,
}

impl Default for OutputSettings {
    fn default() -> Self {
        OutputSettings {
            budget: Budget::DEFAULT,
            keep_for: Some(Duration::from_secs(7 * 24 * 3600)),
            keep_bytes: 256 << 20,
            mcp_max_chars_ceiling: 500_000,
            read_output: true,
        }
    }
}

impl OutputSettings {
    /// The budget of one request: the profile's, or, when an MCP client asked for its own
    /// character limit, that limit (within [`MIN_MAX_CHARS`] and the ceiling) with no line
    /// limit (the client said how much text it takes).
    pub fn budget_for(&self, asked: Option<usize>) -> Budget {
        match asked {
            Some(chars) if self.mcp_max_chars_ceiling > 0 => Budget {
                max_chars: chars
                    .clamp(MIN_MAX_CHARS, self.mcp_max_chars_ceiling.max(MIN_MAX_CHARS)),
                max_lines: 0,
            },
            _ => self.budget,
        }
    }
}

/// How big a text is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Size {
    /// Characters (Unicode scalar values).
    pub chars: usize,
    /// Lines: newlines, plus one for a last line without one.
    pub lines: usize,
    /// Bytes of UTF-8.
    pub bytes: usize,
}

impl Size {
    /// Measures `text` (all of it).
    pub fn of(text: &str) -> Size {
        Size {
            chars: text.chars().count(),
            lines: line_count(text),
            bytes: text.len(),
        }
    }
}

fn newlines(text: &str) -> usize {
    text.bytes().filter(|&b| b == b'\n').count()
}

fn line_count(text: &str) -> usize {
    newlines(text) + usize::from(!text.is_empty() && !text.ends_with('\n'))
}

/// Whether `text` is within `max_chars` characters and `max_lines` lines (0: no limit),
/// counting no further than the limits.
fn fits(text: &str, max_chars: usize, max_lines: usize) -> bool {
    if max_chars > 0 && text.len() > max_chars && text.chars().nth(max_chars).is_some() {
        return false;
    }
    if max_lines > 0 {
        // More than `max_lines` lines means at least `max_lines` newlines with text after
        // the last of them.
        let mut seen = 0;
        for (i, b) in text.bytes().enumerate() {
            if b == b'\n' {
                seen += 1;
                if seen == max_lines {
                    return i + 1 == text.len();
                }
            }
        }
    }
    true
}

/// Where the text a marker leaves out can be read, which the marker says.
#[derive(Debug, Clone, Copy)]
pub enum Rest<'a> {
    /// Kept under this id.
    Kept(&'a str),
    /// Not kept (no store, or it could not be written): the marker says so.
    NotKept,
    /// The text is an excerpt of the kept output `id` that starts at line `first_line`:
    /// the marker points to smaller ranges of it (no new id).
    Excerpt {
        /// The kept output.
        id: &'a str,
        /// The output's line number of the excerpt's first line (1-based).
        first_line: usize,
    },
}

/// A text cut to a budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    /// Head, marker line, tail.
    pub text: String,
    /// The full text's size.
    pub full: Size,
    /// Characters left out.
    pub left_out_chars: usize,
    /// Lines wholly or partly left out.
    pub left_out_lines: usize,
    /// The (1-based) number of the first line left out, wholly or partly.
    pub first_left_out: usize,
}

/// `text` as its head and tail with one marker line between them, within `max_chars`
/// characters and `max_lines` lines (0: that limit off); `None` if it fits as it is.
/// Never splits a character. The marker says how many characters and lines were left
/// out and where to read them (`rest`). A `max_chars` under [`MIN_MAX_CHARS`] may be
/// exceeded by the marker itself.
pub fn cut(text: &str, max_chars: usize, max_lines: usize, rest: Rest<'_>) -> Option<Cut> {
    if fits(text, max_chars, max_lines) {
        return None;
    }
    let full = Size::of(text);
    // The longest the marker can be: every number at its largest.
    let reserve = marker(rest, full.chars, full.lines, full.lines, full.lines).len() + 2;
    let char_room = if max_chars == 0 {
        usize::MAX
    } else {
        max_chars.saturating_sub(reserve)
    };
    let line_room = if max_lines == 0 {
        usize::MAX
    } else {
        max_lines - 1
    };

    // The head: at most half the lines and half the characters.
    let (head_chars_room, head_lines_room) = (char_room / 2, line_room / 2);
    let (mut head_end, mut head_chars, mut head_nl) = (0, 0, 0usize);
    for (i, c) in text.char_indices() {
        if head_chars == head_chars_room || head_nl == head_lines_room {
            break;
        }
        head_end = i + c.len_utf8();
        head_chars += 1;
        if c == '\n' {
            head_nl += 1;
        }
    }
    // Whole lines where at least one fits: the partial last line goes to the middle.
    if let Some(nl) = text[..head_end].rfind('\n')
        && nl + 1 < head_end
    {
        head_chars -= text[nl + 1..head_end].chars().count();
        head_end = nl + 1;
    }
    let head = &text[..head_end];
    let head_partial = !head.is_empty() && !head.ends_with('\n');
    let head_lines = head_nl + usize::from(head_partial);

    // The tail: what room is left, from the end, starting at a line's start unless the
    // characters run out first.
    let tail_chars_room = char_room.saturating_sub(head_chars);
    let tail_lines_room = line_room.saturating_sub(head_lines);
    let ends_nl = text.ends_with('\n');
    let rest_text = &text[head_end..];
    let (mut tail_start, mut tail_chars, mut tail_nl) = (rest_text.len(), 0, 0);
    for (i, c) in rest_text.char_indices().rev() {
        let nl = tail_nl + usize::from(c == '\n');
        let lines = nl + usize::from(!ends_nl);
        if tail_chars + 1 > tail_chars_room || lines > tail_lines_room {
            break;
        }
        tail_start = i;
        tail_chars += 1;
        tail_nl = nl;
    }
    // Likewise the tail starts at a line's start where a whole line fits.
    let starts_line = tail_start == 0 || rest_text[..tail_start].ends_with('\n');
    if !starts_line
        && let Some(nl) = rest_text[tail_start..].find('\n')
        && tail_start + nl + 1 < rest_text.len()
    {
        tail_chars -= rest_text[tail_start..=tail_start + nl].chars().count();
        tail_start += nl + 1;
    }
    let tail = &rest_text[tail_start..];
    let middle = &rest_text[..tail_start];

    let first_left_out = head_nl + 1;
    let middle_nl = newlines(middle);
    // The line holding the middle's last byte (a newline belongs to the line it ends).
    let last_left_out = head_nl + middle_nl + usize::from(!middle.ends_with('\n'));
    let left_out_lines = last_left_out.saturating_sub(first_left_out) + 1;
    let left_out_chars = full.chars - head_chars - tail_chars;

    let line = marker(
        rest,
        left_out_chars,
        left_out_lines,
        first_left_out,
        left_out_lines.min(DEFAULT_READ_LINES),
    );
    let mut out = String::with_capacity(head.len() + line.len() + tail.len() + 2);
    out.push_str(head);
    if head_partial {
        out.push('\n');
    }
    out.push_str(&line);
    out.push('\n');
    out.push_str(tail);
    Some(Cut {
        text: out,
        full,
        left_out_chars,
        left_out_lines,
        first_left_out,
    })
}

/// The marker line (ASCII only, so its length in bytes is its length in characters).
fn marker(rest: Rest<'_>, chars: usize, lines: usize, offset: usize, limit: usize) -> String {
    let (chars, lines) = (
        toolhost_plugin_api::__private::grouped(chars),
        toolhost_plugin_api::__private::grouped(lines),
    );
    match rest {
        Rest::Kept(id) => format!(
            "[toolhost: {chars} characters in {lines} lines left out of this output (id {id}); \
             read them with read_output {{\"id\":\"{id}\",\"offset\":{offset},\"limit\":{limit}}} \
             or {{\"id\":\"{id}\",\"grep\":\"REGEX\"}}; from a shell: toolhost output {id}]"
        ),
        Rest::NotKept => format!(
            "[toolhost: {chars} characters in {lines} lines left out of this output; the full \
             output was not kept]"
        ),
        Rest::Excerpt { id, first_line } => format!(
            "[toolhost: {chars} characters in {lines} lines left out of this excerpt; read \
             fewer lines at a time, e.g. read_output {{\"id\":\"{id}\",\"offset\":{},\
             \"limit\":{limit}}}]",
            first_line + offset - 1
        ),
    }
}

/// Who made an output, and so who may read it: the profile, and over MCP HTTP the name
/// of the token (`None` for local callers: the command line, the control socket, stdio,
/// the agent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// The profile the call ran as.
    pub profile: String,
    /// The bearer token's name, for HTTP callers.
    pub token: Option<String>,
}

/// What is kept beside an output's text (`<id>.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputMeta {
    /// Who may read it.
    pub owner: Owner,
    /// The tool that produced it.
    pub tool: String,
    /// When it was kept, seconds since the Unix epoch.
    pub created: u64,
    /// Whether it was an error result.
    pub is_error: bool,
    /// Its size.
    #[serde(flatten)]
    pub size: Size,
    /// The rest of the result (everything but the text: error kind, details, ...).
    #[serde(default)]
    pub result: Value,
}

/// A record's owner and size, read without the rest (no `flatten`: that would buffer
/// the rest of the record; unknown keys are skipped).
#[derive(Deserialize)]
struct OwnerAndSize {
    owner: Owner,
    chars: usize,
    lines: usize,
    bytes: usize,
}

/// A record that names who may read its output.
trait Owned {
    fn owner(&self) -> &Owner;
}

impl Owned for OutputMeta {
    fn owner(&self) -> &Owner {
        &self.owner
    }
}

impl Owned for OwnerAndSize {
    fn owner(&self) -> &Owner {
        &self.owner
    }
}

/// Which part of an output a read returns.
#[derive(Debug, Clone)]
pub enum ReadRange {
    /// All of it, exactly as kept.
    All,
    /// Lines `offset..offset+limit` (1-based; `None`: to the end), exactly as kept
    /// (newlines included).
    Lines {
        /// The first line, 1-based.
        offset: usize,
        /// How many lines; `None`: to the end.
        limit: Option<usize>,
    },
    /// The lines that match, with `context` lines around each, numbered like `grep -n`
    /// (`12:` a match, `11-` context, `--` between groups).
    Grep {
        /// What to look for.
        pattern: regex::Regex,
        /// Lines shown before and after each match.
        context: usize,
    },
}

/// Lines shown before and after each match of a grep read, unless the reader says.
pub const DEFAULT_CONTEXT: usize = 2;

impl ReadRange {
    /// `A:B` (lines A to B), `A:` (line A to the end) or `A` (line A alone), counted from
    /// 1, as the command line and MCP take them. `Err` says what to write instead.
    pub fn lines(text: &str) -> Result<ReadRange, String> {
        let bad = || {
            format!(
                "`{text}` is not a range of lines: give A:B (lines A to B), A: (line A to the \
                 end) or A, with lines counted from 1"
            )
        };
        let number = |s: &str| s.trim().parse::<usize>().ok().filter(|n| *n >= 1);
        let (from, to) = match text.split_once(':') {
            Some((a, "")) => (number(a).ok_or_else(bad)?, None),
            Some((a, b)) => (number(a).ok_or_else(bad)?, Some(number(b).ok_or_else(bad)?)),
            None => {
                let a = number(text).ok_or_else(bad)?;
                (a, Some(a))
            }
        };
        if to.is_some_and(|to| to < from) {
            return Err(bad());
        }
        Ok(ReadRange::Lines {
            offset: from,
            limit: to.map(|to| to - from + 1),
        })
    }

    /// The lines matching the regular expression `pattern`, with `context` lines around
    /// each. `Err` names what is wrong with it.
    pub fn grep(pattern: &str, context: usize) -> Result<ReadRange, String> {
        regex::Regex::new(pattern)
            .map(|pattern| ReadRange::Grep { pattern, context })
            .map_err(|e| format!("`{pattern}` is not a regular expression: {e}"))
    }
}

/// A part of an output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Excerpt {
    /// The text.
    pub text: String,
    /// The output's line number of its first line (1-based; 1 for a grep).
    pub first_line: usize,
    /// The output's size.
    pub size: Size,
    /// For a grep, how many lines matched.
    pub matches: Option<usize>,
}

/// Why an output could not be kept, pruned or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutputError {
    /// No such output for this caller: never made, pruned, or made by another profile or
    /// token (which get exactly this answer too).
    #[error(
        "there is no output '{id}' for this caller (outputs are readable only by the profile \
         and token that made them, and are removed after a while; run the call again to get \
         a new one)"
    )]
    NotFound {
        /// The id asked for.
        id: String,
    },
    /// The store's folder or files could not be used.
    #[error("could not {action} {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A range that is no range.
    #[error("{0}")]
    BadRange(String),
}

/// What a prune removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// Outputs removed because they were too old.
    pub by_age: usize,
    /// Outputs removed to bring the total under the size limit.
    pub by_size: usize,
    /// Bytes freed.
    pub freed_bytes: u64,
    /// Bytes kept afterwards.
    pub kept_bytes: u64,
}

/// A profile's kept outputs: `<state>/outputs/<id>.txt` (the text, raw) and `<id>.json`
/// ([`OutputMeta`]), in a 0700 folder, files 0600.
#[derive(Debug)]
pub struct OutputStore {
    dir: PathBuf,
    keep_for: Option<Duration>,
    keep_bytes: u64,
    /// The bytes kept, as of the last scan plus what was written since (`None`: not
    /// scanned yet), and when the last scan was.
    total: Mutex<(Option<u64>, Option<Instant>)>,
}

/// How often writes rescan the folder for outputs past their age.
const AGE_SCAN_EVERY: Duration = Duration::from_secs(3600);

impl OutputStore {
    /// The store in `dir` (created on the first write) with `settings`' limits.
    pub fn new(dir: PathBuf, settings: &OutputSettings) -> OutputStore {
        OutputStore {
            dir,
            keep_for: settings.keep_for,
            keep_bytes: settings.keep_bytes,
            total: Mutex::new((None, None)),
        }
    }

    /// The store of a profile whose state folder is `state_dir`: `outputs/` beside it,
    /// not in it. Plugin workers of the profile may write its state folder, and a kept
    /// output is the host's: another plugin's or another token's, read back by the host.
    pub fn for_profile(state_dir: &Path, settings: &OutputSettings) -> OutputStore {
        OutputStore::new(state_dir.with_file_name("outputs"), settings)
    }

    /// Keeps `text` with `meta` (whose `size` is `Size::of(text)`) and returns its new id.
    /// Blocking.
    pub fn save(&self, meta: OutputMeta, text: &str) -> Result<String, OutputError> {
        let io = |action, path: &Path| {
            let path = path.to_path_buf();
            move |source| OutputError::Io {
                action,
                path,
                source,
            }
        };
        crate::sys::private::ensure_private_dir(&self.dir)
            .map_err(io("create the output folder", &self.dir))?;
        let id = new_id().map_err(io("make an id for an output in", &self.dir))?;
        let txt = self.dir.join(format!("{id}.txt"));
        crate::sys::private::open_private_file(&txt)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(io("write", &txt))?;
        let json = self.dir.join(format!("{id}.json"));
        let meta_text = serde_json::to_vec(&meta).map_err(|e| OutputError::Io {
            action: "write",
            path: json.clone(),
            source: std::io::Error::other(e),
        })?;
        crate::sys::private::write_private_file(&json, &meta_text).map_err(io("write", &json))?;
        let written = text.len() as u64 + meta_text.len() as u64;
        let prune = {
            let mut total = self.total.lock().unwrap_or_else(PoisonError::into_inner);
            let kept = total.0.map(|t| t + written);
            total.0 = kept;
            kept.is_none_or(|t| self.keep_bytes > 0 && t > self.keep_bytes)
                || total.1.is_none_or(|at| at.elapsed() > AGE_SCAN_EVERY)
        };
        if prune && let Err(e) = self.prune() {
            tracing::warn!(error = %e, "could not prune the kept outputs");
        }
        Ok(id)
    }

    /// The metadata of output `id`, if `owner` made it.
    pub fn meta(&self, owner: &Owner, id: &str) -> Result<OutputMeta, OutputError> {
        self.owned::<OutputMeta>(owner, id)
    }

    /// The record of output `id` read as `M` (all of it, or just its owner and size), if
    /// `owner` made it.
    fn owned<M: serde::de::DeserializeOwned + Owned>(
        &self,
        owner: &Owner,
        id: &str,
    ) -> Result<M, OutputError> {
        let not_found = || OutputError::NotFound { id: id.to_owned() };
        if !is_id(id) {
            return Err(not_found());
        }
        let json = self.dir.join(format!("{id}.json"));
        let bytes = match read_file(&json) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(not_found()),
            Err(source) => {
                return Err(OutputError::Io {
                    action: "read",
                    path: json,
                    source,
                });
            }
        };
        match serde_json::from_slice::<M>(&bytes) {
            Ok(meta) if meta.owner() == owner => Ok(meta),
            _ => Err(not_found()),
        }
    }

    /// `range` of output `id`, if `owner` made it (anyone else gets
    /// [`OutputError::NotFound`], as for an id that does not exist). Blocking.
    pub fn read(&self, owner: &Owner, id: &str, range: &ReadRange) -> Result<Excerpt, OutputError> {
        // Only the owner and the size: the rest of the record (a structured result left out
        // for the budget, say) is skipped, not built.
        let OwnerAndSize {
            chars,
            lines,
            bytes,
            ..
        } = self.owned::<OwnerAndSize>(owner, id)?;
        let size = Size {
            chars,
            lines,
            bytes,
        };
        let txt = self.dir.join(format!("{id}.txt"));
        let text = match read_file(&txt).and_then(|b| {
            String::from_utf8(b)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
        }) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(OutputError::NotFound { id: id.to_owned() });
            }
            Err(source) => {
                return Err(OutputError::Io {
                    action: "read",
                    path: txt,
                    source,
                });
            }
        };
        Ok(match range {
            ReadRange::All => Excerpt {
                text,
                first_line: 1,
                size,
                matches: None,
            },
            ReadRange::Lines { offset, limit } => {
                if *offset == 0 {
                    return Err(OutputError::BadRange(
                        "line numbers start at 1 (offset 0 is not a line)".to_owned(),
                    ));
                }
                let lines = text.split_inclusive('\n').skip(offset - 1);
                let part: String = match limit {
                    Some(n) => lines.take(*n).collect(),
                    None => lines.collect(),
                };
                Excerpt {
                    text: part,
                    first_line: *offset,
                    size,
                    matches: None,
                }
            }
            ReadRange::Grep { pattern, context } => {
                let (text, matches) = grep(&text, pattern, *context);
                Excerpt {
                    text,
                    first_line: 1,
                    size,
                    matches: Some(matches),
                }
            }
        })
    }

    /// Removes outputs older than the age limit, then, when the total is over the size
    /// limit, the oldest until it is within 90% of it; logs what it removed. Blocking.
    pub fn prune(&self) -> Result<PruneReport, OutputError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                *self.total.lock().unwrap_or_else(PoisonError::into_inner) =
                    (Some(0), Some(Instant::now()));
                return Ok(PruneReport::default());
            }
            Err(source) => {
                return Err(OutputError::Io {
                    action: "list",
                    path: self.dir.clone(),
                    source,
                });
            }
        };
        // id -> (newest modification, bytes)
        let mut outputs: BTreeMap<String, (SystemTime, u64)> = BTreeMap::new();
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name();
            let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".txt").or_else(|| n.strip_suffix(".json")))
                .filter(|id| is_id(id))
            else {
                continue;
            };
            let Ok(meta) = entry.metadata() else { continue };
            let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            let slot = outputs
                .entry(id.to_owned())
                .or_insert((SystemTime::UNIX_EPOCH, 0));
            slot.0 = slot.0.max(modified);
            slot.1 += meta.len();
        }
        let mut by_age: Vec<(SystemTime, String, u64)> = outputs
            .into_iter()
            .map(|(id, (at, bytes))| (at, id, bytes))
            .collect();
        by_age.sort();
        let mut report = PruneReport {
            kept_bytes: by_age.iter().map(|o| o.2).sum(),
            ..PruneReport::default()
        };
        let now = SystemTime::now();
        let mut kept = Vec::with_capacity(by_age.len());
        for (at, id, bytes) in by_age {
            let too_old = self
                .keep_for
                .is_some_and(|keep| now.duration_since(at).is_ok_and(|age| age > keep));
            if too_old {
                self.remove(&id);
                report.by_age += 1;
                report.freed_bytes += bytes;
                report.kept_bytes -= bytes;
            } else {
                kept.push((id, bytes));
            }
        }
        // Down to 90% of the limit, not to the limit: the next write would otherwise pass
        // it again and rescan the folder on every cut output.
        let target = self.keep_bytes - self.keep_bytes / 10;
        let over = report.kept_bytes > self.keep_bytes;
        for (id, bytes) in kept {
            if self.keep_bytes == 0 || !over || report.kept_bytes <= target {
                break;
            }
            self.remove(&id);
            report.by_size += 1;
            report.freed_bytes += bytes;
            report.kept_bytes -= bytes;
        }
        if report.by_age + report.by_size > 0 {
            tracing::info!(
                dir = %self.dir.display(),
                by_age = report.by_age,
                by_size = report.by_size,
                freed_bytes = report.freed_bytes,
                kept_bytes = report.kept_bytes,
                "pruned kept outputs (oldest first)"
            );
        }
        *self.total.lock().unwrap_or_else(PoisonError::into_inner) =
            (Some(report.kept_bytes), Some(Instant::now()));
        Ok(report)
    }

    fn remove(&self, id: &str) {
        for ext in ["json", "txt"] {
            let path = self.dir.join(format!("{id}.{ext}"));
            if let Err(e) = std::fs::remove_file(&path)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(path = %path.display(), error = %e, "could not remove a kept output");
            }
        }
    }
}

/// The bytes of the regular file `path`, opened without following a link (see
/// `sys::private::open_regular_file`).
fn read_file(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    crate::sys::private::open_regular_file(path)?.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// A fresh id: `o` and 32 hex digits from the system's random source.
fn new_id() -> std::io::Result<String> {
    let mut random = [0u8; 16];
    getrandom::fill(&mut random).map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut id = String::with_capacity(33);
    id.push('o');
    for b in random {
        let _ = write!(id, "{b:02x}");
    }
    Ok(id)
}

/// Whether `id` has the shape of an id (checked before it is ever joined to a path).
pub fn is_id(id: &str) -> bool {
    id.len() == 33
        && id.starts_with('o')
        && id[1..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The matching lines of `text` with `context` lines around them, numbered like
/// `grep -n`, and how many lines matched.
fn grep(text: &str, pattern: &regex::Regex, context: usize) -> (String, usize) {
    let lines: Vec<&str> = text.lines().collect();
    let hits: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| pattern.is_match(l))
        .map(|(i, _)| i)
        .collect();
    let mut out = String::new();
    let mut shown_to = None::<usize>; // last line index written
    for &hit in &hits {
        let from = hit.saturating_sub(context);
        let to = (hit + context).min(lines.len().saturating_sub(1));
        let start = match shown_to {
            Some(last) if from <= last + 1 => last + 1,
            Some(_) => {
                out.push_str("--\n");
                from
            }
            None => from,
        };
        for (i, line) in lines.iter().enumerate().take(to + 1).skip(start) {
            let sep = if hits.binary_search(&i).is_ok() {
                ':'
            } else {
                '-'
            };
            let _ = writeln!(out, "{}{sep}{line}", i + 1);
        }
        shown_to = Some(shown_to.map_or(to, |last| last.max(to)));
    }
    (out, hits.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbered(n: usize) -> String {
        (1..=n).map(|i| format!("line {i}\n")).collect()
    }

    #[test]
    fn a_text_within_the_budget_is_not_cut() {
        assert!(cut("short", 1000, 10, Rest::NotKept).is_none());
        let exact = "x".repeat(1000);
        assert!(cut(&exact, 1000, 0, Rest::NotKept).is_none());
        // Exactly N lines, with or without the last newline.
        assert!(cut(&numbered(10), 0, 10, Rest::NotKept).is_none());
        assert!(cut(numbered(10).trim_end(), 0, 10, Rest::NotKept).is_none());
        // 0 = off: nothing is ever cut.
        assert!(cut(&numbered(100_000), 0, 0, Rest::NotKept).is_none());
    }

    #[test]
    fn one_over_is_cut_within_the_budget_with_one_marker() {
        let over = "y".repeat(1001);
        let c = cut(&over, 1000, 0, Rest::Kept("o0123")).expect("cut");
        assert!(c.text.chars().count() <= 1000, "{}", c.text.chars().count());
        assert_eq!(c.text.matches("[toolhost:").count(), 1);
        assert_eq!(c.full.chars, 1001);
        let lines = numbered(11);
        let c = cut(&lines, 0, 10, Rest::NotKept).expect("cut");
        assert!(line_count(&c.text) <= 10, "{}", c.text);
        assert!(c.text.starts_with("line 1\n"));
        assert!(c.text.ends_with("line 11\n"));
        assert!(c.text.contains("not kept"));
        assert_eq!(c.left_out_lines, 11 - (line_count(&c.text) - 1));
    }

    #[test]
    fn characters_are_never_split() {
        // Four-byte characters, and a limit that falls inside one in bytes.
        let text: String = "😀é".repeat(5000);
        for max in [1000, 1001, 1003, 4097] {
            let c = cut(&text, max, 0, Rest::Kept("o1")).expect("cut");
            assert!(c.text.chars().count() <= max);
            let kept: usize = c
                .text
                .lines()
                .filter(|l| !l.starts_with("[toolhost:"))
                .map(|l| l.chars().count())
                .sum();
            assert_eq!(c.left_out_chars + kept, 10_000);
        }
    }

    #[test]
    fn head_and_tail_are_the_texts_own_and_the_marker_names_the_first_line_left_out() {
        let text = numbered(5000);
        let c = cut(&text, 0, 1000, Rest::Kept("oabc")).expect("cut");
        let kept: Vec<&str> = c.text.lines().collect();
        assert_eq!(kept.len(), 1000);
        assert_eq!(kept[0], "line 1");
        assert_eq!(kept[498], "line 499");
        assert!(kept[499].starts_with("[toolhost: "), "{}", kept[499]);
        assert!(kept[499].contains("\"offset\":500"), "{}", kept[499]);
        assert_eq!(kept[999], "line 5000");
        assert_eq!(c.first_left_out, 500);
        assert_eq!(c.left_out_lines, 5000 - 999);
    }

    #[test]
    fn a_character_limit_inside_a_line_keeps_whole_lines() {
        // 64-character lines: half the room ends inside one.
        let text: String = (1..=2000).map(|i| format!("{i:063}\n")).collect();
        let c = cut(&text, 5000, 0, Rest::NotKept).expect("cut");
        let (head, rest) = c.text.split_once("[toolhost:").expect("marker");
        let tail = rest.split_once('\n').map(|(_, t)| t).expect("tail");
        assert!(
            head.ends_with('\n') && text.starts_with(head),
            "whole lines in the head"
        );
        assert!(text.ends_with(tail) && text[..text.len() - tail.len()].ends_with('\n'));
        assert_eq!(c.first_left_out, head.lines().count() + 1);
        assert_eq!(
            c.left_out_lines,
            2000 - head.lines().count() - tail.lines().count()
        );
    }

    #[test]
    fn one_long_line_is_cut_inside_it() {
        let text = "z".repeat(100_000);
        let c = cut(&text, 30_000, 1000, Rest::NotKept).expect("cut");
        assert!(c.text.chars().count() <= 30_000);
        assert_eq!(c.left_out_lines, 1);
        assert_eq!(line_count(&c.text), 3);
    }

    #[test]
    fn ids_are_checked_before_they_become_paths() {
        let id = new_id().expect("random");
        assert!(is_id(&id), "{id}");
        for bad in [
            "",
            "o",
            "../etc/passwd",
            &format!("{id}x"),
            &id.to_uppercase(),
            "o/../../../../../../../etc/p",
        ] {
            assert!(!is_id(bad), "{bad}");
        }
    }

    /// Someone who can write the folder (it is the host's, 0700, but say a mistake widened
    /// it) plants a link to another file, or a FIFO, in place of a kept text: reading it
    /// back refuses both, at once, and never shows the other file.
    #[test]
    fn a_link_or_fifo_planted_in_place_of_an_output_is_refused_not_followed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = OutputStore::new(dir.path().join("outputs"), &OutputSettings::default());
        let owner = Owner {
            profile: "p".to_owned(),
            token: None,
        };
        let meta = || OutputMeta {
            owner: owner.clone(),
            tool: "t".to_owned(),
            created: 0,
            is_error: false,
            size: Size::of("kept"),
            result: Value::Null,
        };
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "not for the model").expect("secret");
        let linked = store.save(meta(), "kept").expect("saved");
        let txt = dir.path().join("outputs").join(format!("{linked}.txt"));
        std::fs::remove_file(&txt).expect("remove");
        std::os::unix::fs::symlink(&secret, &txt).expect("plant a link");
        let read = store.read(&owner, &linked, &ReadRange::All);
        assert!(
            read.as_ref().is_err_and(|e| e.to_string().contains("link")),
            "{read:?}"
        );
        let fifo = store.save(meta(), "kept").expect("saved");
        let txt = dir.path().join("outputs").join(format!("{fifo}.txt"));
        std::fs::remove_file(&txt).expect("remove");
        let c = std::ffi::CString::new(txt.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: `c` is a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
        // Would block forever if the FIFO were opened for reading like a file.
        let read = store.read(&owner, &fifo, &ReadRange::All);
        assert!(read.is_err(), "{read:?}");
        // The metadata is read the same way.
        let json = dir.path().join("outputs").join(format!("{fifo}.json"));
        std::fs::remove_file(&json).expect("remove");
        std::os::unix::fs::symlink(&secret, &json).expect("plant a link");
        assert!(store.meta(&owner, &fifo).is_err());
    }

    #[test]
    fn grep_numbers_matches_and_context_like_grep_n() {
        let text = numbered(20);
        let re = regex::Regex::new(r"^line (5|7|15)$").expect("regex");
        let (out, n) = grep(&text, &re, 1);
        assert_eq!(n, 3);
        assert_eq!(
            out,
            "4-line 4\n5:line 5\n6-line 6\n7:line 7\n8-line 8\n--\n14-line 14\n15:line 15\n16-line 16\n"
        );
    }

    #[test]
    fn a_clients_limit_is_held_between_the_minimum_and_the_ceiling() {
        let s = OutputSettings::default();
        assert_eq!(s.budget_for(None), Budget::DEFAULT);
        assert_eq!(s.budget_for(Some(10)).max_chars, MIN_MAX_CHARS);
        assert_eq!(s.budget_for(Some(10_000_000)).max_chars, 500_000);
        assert_eq!(
            s.budget_for(Some(100_000)),
            Budget {
                max_chars: 100_000,
                max_lines: 0
            }
        );
        let fixed = OutputSettings {
            mcp_max_chars_ceiling: 0,
            ..OutputSettings::default()
        };
        assert_eq!(fixed.budget_for(Some(100_000)), Budget::DEFAULT);
    }
}
