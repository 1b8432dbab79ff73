//! `grep`: searches file contents with ripgrep's crates (`grep-regex`, `grep-searcher`,
//! `ignore`), in parallel over files, and shows the matches as ripgrep does
//! (`path:line:text`, context lines as `path-line-text`, `--` between groups), sorted by
//! path so the same search always reads the same.
//!
//! Every file the walk finds is opened again through its root's directory handle and
//! searched from that handle, so a file swapped for a link to the outside is not read.
//! Memory is bounded: each walking thread keeps at most `max_matches` matching lines (the
//! first ones in path order), plus their context, and only counts the others. Binary files
//! (a NUL byte) are skipped as ripgrep skips them; matches found before the NUL byte in a
//! long file still count, as in ripgrep.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

use cap_std::fs::{OpenOptions, OpenOptionsExt as _};
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{
    BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkContextKind, SinkFinish,
    SinkMatch,
};
use ignore::WalkState;
use ignore::types::TypesBuilder;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_plugin_api::{CancelFlag, OutputBudget, Structured, ToolContext, ToolError, tool};

use crate::listing::{Globs, walk_parallel, walker};
use crate::roots::{self, Workspace};

/// Matching lines shown when the call names no `max_matches`.
pub(crate) const DEFAULT_MAX_MATCHES: usize = 200;
/// The most matching lines one call may ask for.
pub(crate) const MAX_MATCHES: usize = 2000;
/// The most context lines before or after a match.
pub(crate) const MAX_CONTEXT: usize = 20;
/// Characters of a line shown before it is cut.
pub(crate) const MAX_LINE_CHARS: usize = 500;

/// Arguments of `grep`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepArgs {
    /// What to search for: a regular expression (Rust/ripgrep syntax, e.g.
    /// `fn \w+_test`), or the exact text when `literal` is true.
    pattern: String,
    /// A folder to search beneath or a single file: relative to the first workspace
    /// root, or absolute beneath a root. Default: the first root.
    #[serde(default)]
    path: Option<String>,
    /// Search for `pattern` as written (no regular expression). Default false.
    #[serde(default)]
    literal: bool,
    /// Ignore case. Default false.
    #[serde(default)]
    case_insensitive: bool,
    /// Ignore case unless the pattern has an upper-case letter (ripgrep's `-S`). Default
    /// false.
    #[serde(default)]
    smart_case: bool,
    /// Only search files matching these glob patterns, e.g. ["*.rs", "src/**"] (a
    /// pattern without `/` matches file names at any depth; `!` excludes).
    #[serde(default)]
    glob: Vec<String>,
    /// Only search files of these types, comma-separated, with ripgrep's names: e.g.
    /// "rust", "py", "js,ts", "c,cpp", "go", "java", "md", "toml", "json", "yaml".
    #[serde(default, rename = "type")]
    file_type: Option<String>,
    /// Lines of context shown before and after each match (at most 20). Default 0.
    #[serde(default)]
    #[schemars(range(max = 20))]
    context: Option<usize>,
    /// Lines of context before each match (overrides `context`).
    #[serde(default)]
    #[schemars(range(max = 20))]
    before_context: Option<usize>,
    /// Lines of context after each match (overrides `context`).
    #[serde(default)]
    #[schemars(range(max = 20))]
    after_context: Option<usize>,
    /// The most matching lines shown (default 200, at most 2000); the others are counted.
    #[serde(default)]
    #[schemars(range(min = 1, max = 2000))]
    max_matches: Option<usize>,
    /// Also search hidden files and folders (names starting with `.`). Default false.
    #[serde(default)]
    hidden: bool,
}

/// What `grep` found.
#[derive(Serialize, JsonSchema, Debug, Default)]
pub struct GrepOutput {
    /// The files with matches shown, in path order, each with its lines in order.
    pub files: Vec<FileMatches>,
    /// Matching lines in all files searched (shown or not).
    pub total_matches: usize,
    /// Files with at least one matching line (shown or not).
    pub files_with_matches: usize,
    /// Matching lines not shown (over `max_matches`).
    pub matches_left_out: usize,
    /// Files with matches none of which is shown.
    pub files_left_out: usize,
    /// Files searched.
    pub files_searched: usize,
    /// Files skipped as binary.
    pub binary_files_skipped: usize,
    /// Files that could not be opened or read.
    pub errors: usize,
    /// Whether context lines were asked for (they are separated by `--` in the text).
    #[serde(skip)]
    with_context: bool,
    /// The most matching lines shown.
    #[serde(skip)]
    max_matches: usize,
    /// The output budget, when lines were left out to stay within it.
    #[serde(skip)]
    budget_cut: Option<OutputBudget>,
    /// About how many matching lines like these the output budget holds (`None`: no
    /// limit, or nothing to measure).
    #[serde(skip)]
    room: Option<usize>,
}

/// One file's lines in the result.
#[derive(Serialize, JsonSchema, Debug, Clone)]
pub struct FileMatches {
    /// The file, relative to the first workspace root (absolute if beneath another).
    pub path: String,
    /// Its matching lines and their context lines, in order.
    pub lines: Vec<Line>,
}

/// A matching line or a context line.
#[derive(Serialize, JsonSchema, Debug, Clone)]
pub struct Line {
    /// The line number, from 1.
    pub line: u64,
    /// The text (without its line ending; cut after 500 characters).
    pub text: String,
    /// Whether it matched (false: a context line).
    pub is_match: bool,
}

/// Searches the contents of the workspace's files for a regular expression (or exact
/// text with literal: true), like ripgrep: .gitignore-aware, hidden files only with
/// hidden: true, binary files skipped, symbolic links not followed. Narrow it with
/// `path` (a folder or one file), `glob` (e.g. ["*.rs"]) and `type` (e.g. "rust",
/// "py,js"); `case_insensitive` or `smart_case` (ignore case unless the pattern has
/// upper case); `context`/`before_context`/`after_context` lines (at most 20). Returns
/// ripgrep-style lines sorted by path: `path:line:text` for matches, `path-line-text`
/// for context, `--` between groups; long lines are cut after 500 characters. Shows at
/// most `max_matches` matching lines (default 200, at most 2000), fewer where the
/// result would pass the output budget, and counts the rest (total matches and files).
/// Paths are relative to the first workspace root.
#[tool(risk = read, workspace)]
pub async fn grep(
    ctx: &ToolContext<'_>,
    #[args] args: GrepArgs,
) -> Result<Structured<GrepOutput>, ToolError> {
    let query = Query::new(&args)?;
    let workspace = Workspace::of(ctx).await?;
    let budget = ctx.output_budget().await;
    let value = ctx
        .blocking(move |cancel| {
            let path = args.path.as_deref().unwrap_or(".");
            let mut found = search(&workspace, path, &query, cancel)?;
            fit(&mut found, budget);
            Ok::<_, ToolError>(found)
        })
        .await
        .map_err(ToolError::failed)??;
    let text = grep_text(&value);
    Ok(Structured::new(value).text(text))
}

/// The text the model reads for a result of `grep`.
fn grep_text(output: &GrepOutput) -> String {
    render(output)
}

/// A search, its arguments checked and compiled.
pub(crate) struct Query {
    matcher: RegexMatcher,
    globs: Globs,
    types: ignore::types::Types,
    before: usize,
    after: usize,
    max_matches: usize,
    hidden: bool,
}

impl Query {
    /// Compiles the pattern, globs and types of `args`; a bad one is an argument error.
    pub(crate) fn new(args: &GrepArgs) -> Result<Query, ToolError> {
        let matcher = RegexMatcherBuilder::new()
            .line_terminator(Some(b'\n'))
            .fixed_strings(args.literal)
            .case_insensitive(args.case_insensitive)
            .case_smart(args.smart_case && !args.case_insensitive)
            .build(&args.pattern)
            .map_err(|e| {
                ToolError::invalid_args(format!(
                    "'{}' is not a valid regular expression: {e}; pass literal: true to search \
                     for the text as written",
                    args.pattern
                ))
            })?;
        let mut types = TypesBuilder::new();
        types.add_defaults();
        for name in args
            .file_type
            .iter()
            .flat_map(|t| t.split(','))
            .map(str::trim)
            .filter(|t| !t.is_empty())
        {
            if !types.definitions().iter().any(|d| d.name() == name) {
                return Err(ToolError::invalid_args(format!(
                    "'{name}' is not a file type grep knows; use ripgrep's names, e.g. rust, \
                     py, js, ts, go, c, cpp, java, md, toml, json, yaml, sh (or glob: \
                     [\"*.ext\"])"
                )));
            }
            types.select(name);
        }
        let types = types
            .build()
            .map_err(|e| ToolError::invalid_args(format!("type: {e}")))?;
        let context = args.context.unwrap_or(0);
        let before = args.before_context.unwrap_or(context);
        let after = args.after_context.unwrap_or(context);
        if before > MAX_CONTEXT || after > MAX_CONTEXT {
            return Err(ToolError::invalid_args(format!(
                "context lines must be at most {MAX_CONTEXT}"
            )));
        }
        let max_matches = args.max_matches.unwrap_or(DEFAULT_MAX_MATCHES);
        if max_matches == 0 || max_matches > MAX_MATCHES {
            return Err(ToolError::invalid_args(format!(
                "max_matches must be between 1 and {MAX_MATCHES} (got {max_matches})"
            )));
        }
        Ok(Query {
            matcher,
            globs: Globs::new(&args.glob)?,
            types,
            before,
            after,
            max_matches,
            hidden: args.hidden,
        })
    }

    fn searcher(&self) -> Searcher {
        SearcherBuilder::new()
            .binary_detection(BinaryDetection::quit(b'\x00'))
            .line_number(true)
            .before_context(self.before)
            .after_context(self.after)
            .build()
    }
}

/// One file's stored lines and its count of matching lines stored.
struct Hit {
    lines: Vec<Line>,
    stored_matches: usize,
}

/// The first `cap` matching lines in path order (with their context), as one walking
/// thread or the merged result holds them.
struct Hits {
    files: BTreeMap<PathBuf, Hit>,
    stored: usize,
    cap: usize,
    after: usize,
}

impl Hits {
    fn new(cap: usize, after: usize) -> Hits {
        Hits {
            files: BTreeMap::new(),
            stored: 0,
            cap,
            after,
        }
    }

    /// Whether lines of the file at `path` could still be shown.
    fn wants(&self, path: &Path) -> bool {
        self.stored < self.cap
            || self
                .files
                .last_key_value()
                .is_some_and(|(last, _)| path < last.as_path())
    }

    fn insert(&mut self, path: PathBuf, hit: Hit) {
        self.stored += hit.stored_matches;
        self.files.insert(path, hit);
        while self.stored > self.cap {
            let excess = self.stored - self.cap;
            let Some(mut last) = self.files.last_entry() else {
                break;
            };
            let hit = last.get_mut();
            if hit.stored_matches <= excess {
                self.stored -= hit.stored_matches;
                last.remove();
            } else {
                let keep = hit.stored_matches - excess;
                truncate(&mut hit.lines, keep, self.after);
                hit.stored_matches = keep;
                self.stored -= excess;
            }
        }
    }
}

/// Cuts `lines` after its `keep`-th matching line and the context lines after it (at most
/// `after`, contiguous).
fn truncate(lines: &mut Vec<Line>, keep: usize, after: usize) {
    let mut seen = 0;
    let mut end = lines.len();
    for (i, line) in lines.iter().enumerate() {
        if line.is_match {
            seen += 1;
            if seen == keep {
                let last = line.line;
                let trailing = lines[i + 1..]
                    .iter()
                    .take(after)
                    .enumerate()
                    .take_while(|(k, l)| !l.is_match && l.line == last + 1 + *k as u64)
                    .count();
                end = i + 1 + trailing;
                break;
            }
        }
    }
    lines.truncate(end);
}

/// One walking thread's search.
struct Worker<'q> {
    query: &'q Query,
    searcher: Searcher,
    hits: Hits,
    out: GrepOutput,
}

impl<'q> Worker<'q> {
    fn new(query: &'q Query) -> Worker<'q> {
        Worker {
            query,
            searcher: query.searcher(),
            hits: Hits::new(query.max_matches, query.after),
            out: GrepOutput::default(),
        }
    }

    /// Searches the open `file`, whose path (for sorting and showing) is `path`.
    fn search(&mut self, path: PathBuf, file: &std::fs::File, cancel: &CancelFlag) {
        let store = if self.hits.wants(&path) {
            self.query.max_matches
        } else {
            0
        };
        let mut sink = Collect {
            lines: Vec::new(),
            matches: 0,
            stored: 0,
            store,
            after_left: 0,
            after: self.query.after,
            binary: false,
            cancel,
        };
        self.out.files_searched += 1;
        let searched = self
            .searcher
            .search_file(&self.query.matcher, file, &mut sink);
        if searched.is_err() {
            self.out.errors += 1;
        }
        if sink.binary {
            self.out.binary_files_skipped += 1;
        }
        if sink.matches > 0 {
            self.out.total_matches += sink.matches;
            self.out.files_with_matches += 1;
            if sink.stored > 0 {
                self.hits.insert(
                    path,
                    Hit {
                        lines: sink.lines,
                        stored_matches: sink.stored,
                    },
                );
            }
        }
    }
}

/// Collects one file's matching lines (the first `store` of them, with context) and
/// counts all of them.
struct Collect<'c> {
    lines: Vec<Line>,
    matches: usize,
    stored: usize,
    store: usize,
    after_left: usize,
    after: usize,
    binary: bool,
    cancel: &'c CancelFlag,
}

impl Sink for Collect<'_> {
    type Error = io::Error;

    fn matched(&mut self, _: &Searcher, found: &SinkMatch<'_>) -> Result<bool, io::Error> {
        if self.cancel.is_cancelled() {
            return Ok(false);
        }
        if self.stored >= self.store {
            self.matches += found.lines().count();
            return Ok(true);
        }
        let first = found.line_number().unwrap_or(0);
        for (i, line) in found.lines().enumerate() {
            self.matches += 1;
            if self.stored < self.store {
                self.lines.push(Line {
                    line: first + i as u64,
                    text: shown_text(line),
                    is_match: true,
                });
                self.stored += 1;
                self.after_left = self.after;
            }
        }
        Ok(true)
    }

    fn context(&mut self, _: &Searcher, context: &SinkContext<'_>) -> Result<bool, io::Error> {
        let keep = if self.stored < self.store {
            true
        } else if matches!(context.kind(), SinkContextKind::After) && self.after_left > 0 {
            self.after_left -= 1;
            true
        } else {
            false
        };
        if keep {
            self.lines.push(Line {
                line: context.line_number().unwrap_or(0),
                text: shown_text(context.bytes()),
                is_match: false,
            });
        }
        Ok(true)
    }

    fn binary_data(&mut self, _: &Searcher, _: u64) -> Result<bool, io::Error> {
        self.binary = true;
        Ok(false)
    }

    fn finish(&mut self, _: &Searcher, _: &SinkFinish) -> Result<(), io::Error> {
        Ok(())
    }
}

/// A line as shown: without its ending, invalid UTF-8 replaced, cut after
/// [`MAX_LINE_CHARS`] characters.
fn shown_text(bytes: &[u8]) -> String {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    let text = String::from_utf8_lossy(bytes);
    match text.char_indices().nth(MAX_LINE_CHARS) {
        None => text.into_owned(),
        Some((cut, _)) => format!(
            "{}… [+{} characters]",
            &text[..cut],
            text[cut..].chars().count()
        ),
    }
}

/// Opens `rel` beneath `root` through the root's handle, for reading (never waiting on a
/// FIFO).
fn open_beneath(dir: &cap_std::fs::Dir, rel: &Path) -> io::Result<std::fs::File> {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    Ok(dir.open_with(rel, &options)?.into_std())
}

/// Runs `query` beneath `path` (a folder or one file).
pub(crate) fn search(
    workspace: &Workspace,
    path: &str,
    query: &Query,
    cancel: &CancelFlag,
) -> Result<GrepOutput, ToolError> {
    let resolved = workspace.resolve(path)?;
    let shown = resolved.shown();
    let meta = resolved
        .root
        .dir
        .metadata(&resolved.rel)
        .map_err(|e| roots::io_error(&shown, &e))?;
    let mut result = if meta.is_file() {
        let file = open_beneath(&resolved.root.dir, &resolved.rel)
            .map_err(|e| roots::io_error(&shown, &e))?;
        resolved.check_opened(&file)?;
        let mut worker = Worker::new(query);
        worker.search(PathBuf::from(&shown), &file, cancel);
        let mut out = std::mem::take(&mut worker.out);
        out.files = collect_files(worker.hits, |p| p.display().to_string());
        out
    } else {
        let start = resolved.real_dir()?;
        let mut builder = walker(workspace, &start, query.hidden, None);
        builder.types(query.types.clone());
        let workers = walk_parallel(
            &builder,
            cancel,
            || Worker::new(query),
            |worker, entry| {
                let Ok(entry) = entry else {
                    worker.out.errors += 1;
                    return WalkState::Continue;
                };
                if !entry.file_type().is_some_and(|t| t.is_file()) {
                    return WalkState::Continue;
                }
                let rel_to_start = entry.path().strip_prefix(&start).unwrap_or(entry.path());
                if !query.globs.chooses(rel_to_start) {
                    return WalkState::Continue;
                }
                let Some((root, rel)) = workspace.locate(entry.path()) else {
                    worker.out.errors += 1;
                    return WalkState::Continue;
                };
                match open_beneath(&root.dir, &rel) {
                    Ok(file) => worker.search(entry.into_path(), &file, cancel),
                    Err(_) => worker.out.errors += 1,
                }
                WalkState::Continue
            },
        )
        .ok_or_else(|| ToolError::failed("cancelled"))?;
        let mut hits = Hits::new(query.max_matches, query.after);
        let mut out = GrepOutput::default();
        for worker in workers {
            for (path, hit) in worker.hits.files {
                hits.insert(path, hit);
            }
            out.total_matches += worker.out.total_matches;
            out.files_with_matches += worker.out.files_with_matches;
            out.files_searched += worker.out.files_searched;
            out.binary_files_skipped += worker.out.binary_files_skipped;
            out.errors += worker.out.errors;
        }
        out.files = collect_files(hits, |p| workspace.show(p));
        out
    };
    if cancel.is_cancelled() {
        return Err(ToolError::failed("cancelled"));
    }
    let shown_matches: usize = result
        .files
        .iter()
        .map(|f| f.lines.iter().filter(|l| l.is_match).count())
        .sum();
    result.matches_left_out = result.total_matches - shown_matches;
    result.files_left_out = result.files_with_matches - result.files.len();
    result.with_context = query.before > 0 || query.after > 0;
    result.max_matches = query.max_matches;
    Ok(result)
}

/// Keeps the first lines of `output` (in path order) that fit `budget` both as the text
/// and as the structured value, so neither is cut by the host; the lines left out are
/// counted with the others.
fn fit(output: &mut GrepOutput, budget: OutputBudget) {
    let fits = |text: &str, json: usize| {
        budget.fits(text) && (budget.max_chars == 0 || json as u64 <= budget.max_chars)
    };
    let (text, json) = sizes(output);
    output.room = room(output, budget, text.chars().count(), json);
    if fits(&text, json) {
        return;
    }
    let all: usize = output.files.iter().map(|f| f.lines.len()).sum();
    // The most lines that fit, by bisection (each try renders the result once).
    let (mut lo, mut hi) = (0usize, all);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        let (text, json) = sizes(&first_lines(output, mid));
        if fits(&text, json) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    *output = first_lines(output, lo);
    output.budget_cut = Some(budget);
}

/// `output` with only its first `keep` lines, the counts of what is left out updated.
fn first_lines(output: &GrepOutput, keep: usize) -> GrepOutput {
    let mut files = Vec::new();
    let mut left = keep;
    for file in &output.files {
        if left == 0 {
            break;
        }
        let mut lines = file.lines[..left.min(file.lines.len())].to_vec();
        // A group does not end in context lines without its match.
        while lines.last().is_some_and(|l| !l.is_match) && lines.len() < file.lines.len() {
            lines.pop();
        }
        left -= left.min(file.lines.len());
        if lines.iter().any(|l| l.is_match) {
            files.push(FileMatches {
                path: file.path.clone(),
                lines,
            });
        }
    }
    let shown: usize = files
        .iter()
        .map(|f| f.lines.iter().filter(|l| l.is_match).count())
        .sum();
    GrepOutput {
        matches_left_out: output.total_matches - shown,
        files_left_out: output.files_with_matches - files.len(),
        files,
        total_matches: output.total_matches,
        files_with_matches: output.files_with_matches,
        files_searched: output.files_searched,
        binary_files_skipped: output.binary_files_skipped,
        errors: output.errors,
        with_context: output.with_context,
        max_matches: output.max_matches,
        budget_cut: output.budget_cut,
        room: output.room,
    }
}

/// `output`'s text, and the characters of its structured value's JSON.
fn sizes(output: &GrepOutput) -> (String, usize) {
    let json = serde_json::to_string(output).map_or(usize::MAX, |j| j.chars().count());
    (render(output), json)
}

/// About how many matching lines the size of `output`'s lines (its `text` and `json`
/// characters, the larger) lets `budget` hold.
fn room(output: &GrepOutput, budget: OutputBudget, text: usize, json: usize) -> Option<usize> {
    let lines: usize = output.files.iter().map(|f| f.lines.len()).sum();
    let matches: usize = output
        .files
        .iter()
        .map(|f| f.lines.iter().filter(|l| l.is_match).count())
        .sum();
    if matches == 0 {
        return None;
    }
    let by_chars = (budget.max_chars > 0)
        .then(|| (budget.max_chars as usize).saturating_mul(matches) / text.max(json).max(1));
    let by_lines = (budget.max_lines > 0)
        .then(|| (budget.max_lines as usize).saturating_mul(matches) / lines.max(1));
    match (by_chars, by_lines) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn collect_files(hits: Hits, show: impl Fn(&Path) -> String) -> Vec<FileMatches> {
    hits.files
        .into_iter()
        .map(|(path, hit)| FileMatches {
            path: show(&path),
            lines: hit.lines,
        })
        .collect()
}

/// The text the model reads: ripgrep's lines, then the counts.
fn render(output: &GrepOutput) -> String {
    let mut out = String::new();
    let mut previous: Option<u64> = None;
    for file in &output.files {
        for line in &file.lines {
            if output.with_context {
                let contiguous = previous.is_some_and(|p| p + 1 == line.line);
                if previous.is_some() && !contiguous {
                    out.push_str("--\n");
                }
                previous = Some(line.line);
            }
            let separator = if line.is_match { ':' } else { '-' };
            let _ = writeln!(
                out,
                "{}{separator}{}{separator}{}",
                file.path, line.line, line.text
            );
        }
        // A new file always starts a new group.
        previous = previous.map(|_| u64::MAX - 1);
    }
    if output.total_matches == 0 {
        let _ = write!(
            out,
            "No matches in {} files searched",
            output.files_searched
        );
    } else {
        let _ = write!(
            out,
            "{} matching lines in {} files ({} files searched",
            output.total_matches, output.files_with_matches, output.files_searched
        );
    }
    if output.binary_files_skipped > 0 {
        let _ = write!(
            out,
            ", {} binary files skipped",
            output.binary_files_skipped
        );
    }
    if output.errors > 0 {
        let _ = write!(out, ", {} could not be read", output.errors);
    }
    out.push_str(if output.total_matches == 0 {
        ".\n"
    } else {
        ").\n"
    });
    if output.matches_left_out > 0 {
        let shown = output.total_matches - output.matches_left_out;
        let _ = write!(
            out,
            "{} more matching lines ({} more files) left out, showing the first {shown} in path \
             order",
            output.matches_left_out, output.files_left_out
        );
        if output.budget_cut.is_some() {
            // More would not fit: raising max_matches would not show more.
            out.push_str(
                ": that is what fits in this result's output budget; narrow the search with \
                 path, glob or type to see the others.\n",
            );
        } else {
            // Raising max_matches helps only as far as the budget holds.
            let most = output.room.unwrap_or(MAX_MATCHES).min(MAX_MATCHES);
            if most > output.max_matches {
                let _ = writeln!(
                    out,
                    " (max_matches {}); narrow the search with path, glob or type, or raise \
                     max_matches (up to about {most} lines like these fit in this result).",
                    output.max_matches
                );
            } else {
                let _ = writeln!(
                    out,
                    " (max_matches {}, about what fits in this result); narrow the search with \
                     path, glob or type to see the others.",
                    output.max_matches
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(n: u64, is_match: bool) -> Line {
        Line {
            line: n,
            text: format!("l{n}"),
            is_match,
        }
    }

    #[test]
    fn hits_keep_the_first_matches_in_path_order_with_their_after_context() {
        let mut hits = Hits::new(3, 1);
        hits.insert(
            PathBuf::from("b"),
            Hit {
                lines: vec![line(1, true), line(2, false), line(5, true), line(6, false)],
                stored_matches: 2,
            },
        );
        hits.insert(
            PathBuf::from("a"),
            Hit {
                lines: vec![line(3, true), line(4, true)],
                stored_matches: 2,
            },
        );
        assert_eq!(hits.stored, 3);
        let b = &hits.files[Path::new("b")];
        let numbers: Vec<u64> = b.lines.iter().map(|l| l.line).collect();
        assert_eq!(
            numbers,
            [1, 2],
            "b keeps its first match and the line after it"
        );
        assert!(!hits.wants(Path::new("c")));
        assert!(hits.wants(Path::new("a0")));
    }

    #[test]
    fn long_lines_are_cut_and_endings_dropped() {
        assert_eq!(shown_text(b"abc\r\n"), "abc");
        let long = "x".repeat(MAX_LINE_CHARS + 7);
        assert_eq!(
            shown_text(long.as_bytes()),
            format!("{}… [+7 characters]", "x".repeat(MAX_LINE_CHARS))
        );
    }

    #[test]
    fn render_separates_groups_and_files_when_context_is_on() {
        let output = GrepOutput {
            files: vec![
                FileMatches {
                    path: "a.rs".into(),
                    lines: vec![line(1, false), line(2, true), line(9, true)],
                },
                FileMatches {
                    path: "b.rs".into(),
                    lines: vec![line(10, true)],
                },
            ],
            total_matches: 3,
            files_with_matches: 2,
            files_searched: 2,
            with_context: true,
            max_matches: 200,
            ..GrepOutput::default()
        };
        assert_eq!(
            render(&output),
            "a.rs-1-l1\na.rs:2:l2\n--\na.rs:9:l9\n--\nb.rs:10:l10\n\
             3 matching lines in 2 files (2 files searched).\n"
        );
    }
}
