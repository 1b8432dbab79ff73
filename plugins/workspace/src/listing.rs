//! `list_dir` and `find_files`, and the walk they share with `grep`: ripgrep's `ignore`
//! crate, .gitignore-aware (also outside a git repository), hidden files only on request,
//! symbolic links shown but never followed, walked in parallel, with bounded memory: each
//! tool keeps only the entries it will show (the first ones in path order, or the newest)
//! and counts the rest.
//!
//! A walk starts at a folder's real path, checked to be beneath its root; the sizes and
//! link targets `list_dir` shows are then read through the root's directory handle.
//! Weak spots, deliberately accepted: the walk itself lists folders by path, so a folder
//! swapped for a link to the outside *while* the walk runs could have its names listed
//! (never its files' contents: `grep` and `read_file` open every file through the root's
//! handle), and `find_files` reads modification times by path for the same reason
//! (a stat per file, no open). `.gitignore` files above the walk's start are not read
//! (a `.gitignore` of `*` in a home folder would otherwise hide every workspace); the
//! user's global git excludes are.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use ignore::{DirEntry, ParallelVisitor, ParallelVisitorBuilder, WalkBuilder, WalkState};
use schemars::JsonSchema;
use serde::Deserialize;
use toolhost_plugin_api::{CancelFlag, ToolContext, ToolError, tool};

use crate::roots::{self, Workspace};

/// Entries `list_dir` shows at most.
pub(crate) const MAX_LIST_ENTRIES: usize = 1000;
/// The deepest `list_dir` goes.
pub(crate) const MAX_DEPTH: usize = 10;
/// Files `find_files` shows when the call names no `limit`.
pub(crate) const DEFAULT_FIND_LIMIT: usize = 100;
/// The most files `find_files` shows.
pub(crate) const MAX_FIND_LIMIT: usize = 1000;

/// Arguments of `list_dir`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListDirArgs {
    /// The folder to list: relative to the first workspace root, or absolute beneath a
    /// root. Default: the first root.
    #[serde(default)]
    path: Option<String>,
    /// How many levels to descend: 1 (the default) lists the folder's own entries, 2 also
    /// those of its subfolders, and so on, at most 10.
    #[serde(default)]
    #[schemars(range(min = 1, max = 10))]
    depth: Option<usize>,
    /// Also list hidden entries (names starting with `.`). Default false. `.git` is never
    /// listed.
    #[serde(default)]
    hidden: bool,
}

/// Arguments of `find_files`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FindFilesArgs {
    /// Glob patterns, e.g. ["**/*.rs", "*.toml"]. A pattern without `/` matches file names
    /// at any depth (`*.rs`); one with `/` matches the path from `path` on
    /// (`src/**/*.rs`). `*` stays within a folder, `**` crosses folders, `{a,b}` is
    /// either. A pattern starting with `!` excludes what it matches.
    #[schemars(length(min = 1))]
    patterns: Vec<String>,
    /// The folder to search beneath: relative to the first workspace root, or absolute
    /// beneath a root. Default: the first root.
    #[serde(default)]
    path: Option<String>,
    /// Also find hidden files and files in hidden folders. Default false.
    #[serde(default)]
    hidden: bool,
    /// How many files to show, newest first. Default 100, at most 1000.
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    limit: Option<usize>,
}

/// Lists a folder of the workspace, leaving out what .gitignore (and .ignore) files
/// exclude, as git and ripgrep do, and hidden entries unless `hidden` is true. `depth`
/// (default 1, at most 10) is how many levels to descend. One entry per line, sorted by
/// path, paths relative to the first workspace root: folders end with `/`, files show
/// their size, symbolic links show their target (`name -> target`) and are never
/// followed. Shows at most 1000 entries and says how many more there were. Default
/// folder: the first workspace root. Use find_files to find files by name pattern.
#[tool(risk = read, workspace)]
pub async fn list_dir(
    ctx: &ToolContext<'_>,
    #[args] args: ListDirArgs,
) -> Result<String, ToolError> {
    let depth = args.depth.unwrap_or(1);
    if depth == 0 || depth > MAX_DEPTH {
        return Err(ToolError::invalid_args(format!(
            "depth must be between 1 and {MAX_DEPTH} (got {depth})"
        )));
    }
    let workspace = Workspace::of(ctx).await?;
    ctx.blocking(move |cancel| {
        list_dir_in(
            &workspace,
            args.path.as_deref().unwrap_or("."),
            depth,
            args.hidden,
            cancel,
        )
    })
    .await
    .map_err(ToolError::failed)?
}

/// Finds files in the workspace whose names or paths match glob patterns, e.g.
/// ["**/*.rs"] or ["*.toml", "!Cargo.lock"] (a pattern without `/` matches file names
/// at any depth; one with `/` matches the path beneath `path`; `!` excludes). Leaves
/// out what .gitignore (and .ignore) files exclude, as git and ripgrep do, and hidden
/// files unless `hidden` is true; symbolic links are not followed. Returns the matching
/// files' paths (relative to the first workspace root), newest first (modification
/// time), at most `limit` (default 100, at most 1000), and how many more matched. Use
/// grep to search file contents.
#[tool(risk = read, workspace)]
pub async fn find_files(
    ctx: &ToolContext<'_>,
    #[args] args: FindFilesArgs,
) -> Result<String, ToolError> {
    let limit = args.limit.unwrap_or(DEFAULT_FIND_LIMIT);
    if limit == 0 || limit > MAX_FIND_LIMIT {
        return Err(ToolError::invalid_args(format!(
            "limit must be between 1 and {MAX_FIND_LIMIT} (got {limit})"
        )));
    }
    let globs = Globs::new(&args.patterns)?;
    if !globs.includes_any() {
        return Err(ToolError::invalid_args(
            "patterns must include at least one pattern that is not an exclusion (`!`), \
                 e.g. [\"**/*\", \"!*.lock\"]",
        ));
    }
    let workspace = Workspace::of(ctx).await?;
    ctx.blocking(move |cancel| {
        let path = args.path.as_deref().unwrap_or(".");
        let found = find_files_in(&workspace, path, &globs, args.hidden, limit, cancel)?;
        Ok(found.render(&args.patterns))
    })
    .await
    .map_err(ToolError::failed)?
}

/// The walk every search tool uses: .gitignore, .ignore and git's excludes honoured (also
/// outside a git repository), hidden entries only if asked, links not followed, `.git`
/// never entered, no ignore files read above `start`, and nothing of `workspace`'s
/// protected paths (the host's state, config and plugins) entered or listed.
pub(crate) fn walker(
    workspace: &Workspace,
    start: &Path,
    hidden: bool,
    max_depth: Option<usize>,
) -> WalkBuilder {
    let mut builder = WalkBuilder::new(start);
    let protected = workspace.protected.clone();
    builder
        .hidden(!hidden)
        .require_git(false)
        .parents(false)
        .follow_links(false)
        .max_depth(max_depth)
        .filter_entry(move |entry| {
            entry.file_name() != ".git" && roots::protected_at(&protected, entry.path()).is_none()
        });
    builder
}

/// Runs `builder`'s walk on several threads. Each thread gets a state from `make`, and
/// `visit` sees each entry with it; the states come back when the walk ends. `None` if
/// the call was cancelled (the walk stops soon after).
pub(crate) fn walk_parallel<S, M, V>(
    builder: &WalkBuilder,
    cancel: &CancelFlag,
    make: M,
    visit: V,
) -> Option<Vec<S>>
where
    S: Send,
    M: Fn() -> S + Sync,
    V: Fn(&mut S, Result<DirEntry, ignore::Error>) -> WalkState + Sync,
{
    let states = Mutex::new(Vec::new());
    let mut visitors = Visitors {
        make: &make,
        visit: &visit,
        cancel,
        states: &states,
    };
    builder.build_parallel().visit(&mut visitors);
    if cancel.is_cancelled() {
        return None;
    }
    Some(states.into_inner().unwrap_or_else(PoisonError::into_inner))
}

/// Builds a [`Visitor`] per walking thread.
struct Visitors<'s, S, M, V> {
    make: &'s M,
    visit: &'s V,
    cancel: &'s CancelFlag,
    states: &'s Mutex<Vec<S>>,
}

impl<'s, S, M, V> ParallelVisitorBuilder<'s> for Visitors<'s, S, M, V>
where
    S: Send,
    M: Fn() -> S + Sync,
    V: Fn(&mut S, Result<DirEntry, ignore::Error>) -> WalkState + Sync,
{
    fn build(&mut self) -> Box<dyn ParallelVisitor + 's> {
        Box::new(Visitor {
            state: Some((self.make)()),
            visit: self.visit,
            cancel: self.cancel,
            states: self.states,
        })
    }
}

/// One walking thread's state; handed back when the thread is done with it.
struct Visitor<'s, S: Send, V> {
    state: Option<S>,
    visit: &'s V,
    cancel: &'s CancelFlag,
    states: &'s Mutex<Vec<S>>,
}

impl<S, V> ParallelVisitor for Visitor<'_, S, V>
where
    S: Send,
    V: Fn(&mut S, Result<DirEntry, ignore::Error>) -> WalkState + Sync,
{
    fn visit(&mut self, entry: Result<DirEntry, ignore::Error>) -> WalkState {
        if self.cancel.is_cancelled() {
            return WalkState::Quit;
        }
        match &mut self.state {
            Some(state) => (self.visit)(state, entry),
            None => WalkState::Quit,
        }
    }
}

impl<S: Send, V> Drop for Visitor<'_, S, V> {
    fn drop(&mut self) {
        if let Some(state) = self.state.take() {
            self.states
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(state);
        }
    }
}

/// The first `cap` items in key order among those inserted, and a count of the others:
/// what a tool that shows a bounded, sorted part of a walk holds in memory.
pub(crate) struct Kept<K, V> {
    items: BTreeMap<K, V>,
    cap: usize,
    /// Items inserted but not kept.
    pub(crate) left_out: usize,
}

impl<K: Ord, V> Kept<K, V> {
    /// Keeps at most `cap` items.
    pub(crate) fn new(cap: usize) -> Self {
        Kept {
            items: BTreeMap::new(),
            cap,
            left_out: 0,
        }
    }

    /// Whether an item with `key` would be kept (cheap to ask before building the item).
    pub(crate) fn would_keep(&self, key: &K) -> bool {
        self.items.len() < self.cap || self.items.last_key_value().is_some_and(|(k, _)| key < k)
    }

    /// Adds an item, letting the last one go when over the cap.
    pub(crate) fn insert(&mut self, key: K, value: V) {
        self.items.insert(key, value);
        if self.items.len() > self.cap {
            self.items.pop_last();
            self.left_out += 1;
        }
    }

    /// Takes in another thread's items and count.
    pub(crate) fn merge(&mut self, other: Kept<K, V>) {
        self.left_out += other.left_out;
        for (key, value) in other.items {
            self.insert(key, value);
        }
    }

    /// The kept items in key order.
    pub(crate) fn into_items(self) -> impl Iterator<Item = (K, V)> {
        self.items.into_iter()
    }
}

/// Glob patterns: those without `/` match a file's name, the others its path beneath the
/// walk's start; `!` marks an exclusion.
pub(crate) struct Globs {
    names: GlobSet,
    paths: GlobSet,
    not_names: GlobSet,
    not_paths: GlobSet,
}

impl Globs {
    /// Compiles `patterns`; a bad one is an argument error that names it.
    pub(crate) fn new(patterns: &[String]) -> Result<Globs, ToolError> {
        let mut sets: [GlobSetBuilder; 4] = std::array::from_fn(|_| GlobSetBuilder::new());
        for pattern in patterns {
            let (exclude, glob) = match pattern.strip_prefix('!') {
                Some(rest) => (true, rest),
                None => (false, pattern.as_str()),
            };
            let glob = glob.trim_start_matches("./");
            let compiled = GlobBuilder::new(glob)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map_err(|e| {
                    ToolError::invalid_args(format!(
                        "'{pattern}' is not a glob pattern: {e}; write e.g. \"**/*.rs\""
                    ))
                })?;
            let by_path = glob.contains('/');
            sets[usize::from(exclude) * 2 + usize::from(by_path)].add(compiled);
        }
        let [names, paths, not_names, not_paths] = sets.map(|b| b.build());
        let built = |set: Result<GlobSet, globset::Error>| {
            set.map_err(|e| ToolError::invalid_args(format!("the glob patterns: {e}")))
        };
        Ok(Globs {
            names: built(names)?,
            paths: built(paths)?,
            not_names: built(not_names)?,
            not_paths: built(not_paths)?,
        })
    }

    /// Whether there is a pattern that includes (not only exclusions).
    pub(crate) fn includes_any(&self) -> bool {
        !self.names.is_empty() || !self.paths.is_empty()
    }

    /// Whether the file at `rel` (beneath the walk's start) is chosen: it matches an
    /// including pattern (or there is none) and no excluding one.
    pub(crate) fn chooses(&self, rel: &Path) -> bool {
        let name = rel.file_name().map(Path::new).unwrap_or(rel);
        let included =
            !self.includes_any() || self.names.is_match(name) || self.paths.is_match(rel);
        included && !self.not_names.is_match(name) && !self.not_paths.is_match(rel)
    }
}

/// A size as people read it: `512 bytes`, `1.5 KiB`, `12.0 MiB`.
pub(crate) fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// What an entry of a listing is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
    Symlink,
    Other,
}

/// One thread's part of a listing.
struct Listing {
    kept: Kept<PathBuf, Kind>,
    counts: [usize; 4],
    errors: usize,
}

fn list_dir_in(
    workspace: &Workspace,
    path: &str,
    depth: usize,
    hidden: bool,
    cancel: &CancelFlag,
) -> Result<String, ToolError> {
    let resolved = workspace.resolve(path)?;
    let shown = resolved.shown();
    let meta = resolved
        .root
        .dir
        .metadata(&resolved.rel)
        .map_err(|e| roots::io_error(&shown, &e))?;
    if !meta.is_dir() {
        return Err(ToolError::failed(format!(
            "{shown} is a file, not a folder; use read_file to read it"
        )));
    }
    let start = resolved.real_dir()?;
    let builder = walker(workspace, &start, hidden, Some(depth));
    let states = walk_parallel(
        &builder,
        cancel,
        || Listing {
            kept: Kept::new(MAX_LIST_ENTRIES),
            counts: [0; 4],
            errors: 0,
        },
        |listing, entry| {
            let entry = match entry {
                Ok(entry) => entry,
                Err(_) => {
                    listing.errors += 1;
                    return WalkState::Continue;
                }
            };
            if entry.depth() == 0 {
                return WalkState::Continue;
            }
            let kind = match entry.file_type() {
                Some(t) if t.is_dir() => Kind::Dir,
                Some(t) if t.is_file() => Kind::File,
                Some(t) if t.is_symlink() => Kind::Symlink,
                _ => Kind::Other,
            };
            listing.counts[kind as usize] += 1;
            let path = entry.into_path();
            if listing.kept.would_keep(&path) {
                listing.kept.insert(path, kind);
            } else {
                listing.kept.left_out += 1;
            }
            WalkState::Continue
        },
    )
    .ok_or_else(|| ToolError::failed("cancelled"))?;
    let mut kept = Kept::new(MAX_LIST_ENTRIES);
    let mut counts = [0usize; 4];
    let mut errors = 0;
    for state in states {
        kept.merge(state.kept);
        for (total, n) in counts.iter_mut().zip(state.counts) {
            *total += n;
        }
        errors += state.errors;
    }
    let left_out = kept.left_out;
    let total: usize = counts.iter().sum();
    let mut out = String::new();
    let folder = if shown == "." {
        "./".to_owned()
    } else {
        format!("{shown}/")
    };
    let [dirs, files, links, others] = counts;
    let _ = write!(
        out,
        "{folder} (depth {depth}): {total} entries ({dirs} folders, {files} files, {links} \
         symbolic links"
    );
    if others > 0 {
        let _ = write!(out, ", {others} other");
    }
    out.push_str(")\n");
    for (abs, kind) in kept.into_items() {
        let name = workspace.show(&abs);
        match kind {
            Kind::Dir => {
                let _ = writeln!(out, "{name}/");
            }
            Kind::File => {
                let size = workspace
                    .locate(&abs)
                    .and_then(|(root, rel)| root.dir.symlink_metadata(rel).ok())
                    .map(|m| human_size(m.len()))
                    .unwrap_or_else(|| "size unknown".to_owned());
                let _ = writeln!(out, "{name}  ({size})");
            }
            Kind::Symlink => {
                let target = workspace
                    .locate(&abs)
                    .and_then(|(root, rel)| root.dir.read_link_contents(rel).ok())
                    .map(|t| t.display().to_string())
                    .unwrap_or_else(|| "?".to_owned());
                let _ = writeln!(out, "{name} -> {target}  (symbolic link, not followed)");
            }
            Kind::Other => {
                let _ = writeln!(out, "{name}  (FIFO, socket or device)");
            }
        }
    }
    if total == 0 {
        out.push_str("(empty, or everything in it is ignored or hidden)\n");
    }
    if left_out > 0 {
        let _ = writeln!(
            out,
            "({left_out} more entries left out: list_dir shows at most {MAX_LIST_ENTRIES}; \
             list a subfolder, lower depth, or use find_files with a pattern)"
        );
    }
    if errors > 0 {
        let _ = writeln!(
            out,
            "({errors} entries could not be read, e.g. permission denied)"
        );
    }
    Ok(out)
}

/// What `find_files` found: the newest files it keeps and how many matched in all.
pub(crate) struct Found {
    /// The newest matching files, newest first, as shown.
    pub(crate) files: Vec<String>,
    /// Every matching file, shown or not.
    pub(crate) total: usize,
    /// Where the search started, as shown.
    pub(crate) start: String,
}

impl Found {
    /// The text the model reads.
    fn render(&self, patterns: &[String]) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} files beneath {} match {} (newest first):",
            self.total,
            self.start,
            patterns.join(" ")
        );
        for file in &self.files {
            out.push_str(file);
            out.push('\n');
        }
        let left_out = self.total - self.files.len();
        if left_out > 0 {
            let _ = writeln!(
                out,
                "({left_out} more matching files left out; narrow the patterns or path, or \
                 raise limit, at most {MAX_FIND_LIMIT})"
            );
        }
        out
    }
}

/// One thread's part of a search by name.
struct Finding {
    kept: Kept<(Reverse<SystemTime>, PathBuf), ()>,
    total: usize,
}

/// Finds the files beneath `path` that `globs` choose: the newest `limit`, and how many.
pub(crate) fn find_files_in(
    workspace: &Workspace,
    path: &str,
    globs: &Globs,
    hidden: bool,
    limit: usize,
    cancel: &CancelFlag,
) -> Result<Found, ToolError> {
    let resolved = workspace.resolve(path)?;
    let start = resolved.real_dir()?;
    let builder = walker(workspace, &start, hidden, None);
    let states = walk_parallel(
        &builder,
        cancel,
        || Finding {
            kept: Kept::new(limit),
            total: 0,
        },
        |finding, entry| {
            let Ok(entry) = entry else {
                return WalkState::Continue;
            };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                return WalkState::Continue;
            }
            let rel = entry.path().strip_prefix(&start).unwrap_or(entry.path());
            if !globs.chooses(rel) {
                return WalkState::Continue;
            }
            finding.total += 1;
            let modified = entry
                .metadata()
                .ok()
                .and_then(|m| m.modified().ok())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            let key = (Reverse(modified), entry.into_path());
            if finding.kept.would_keep(&key) {
                finding.kept.insert(key, ());
            }
            WalkState::Continue
        },
    )
    .ok_or_else(|| ToolError::failed("cancelled"))?;
    let mut kept = Kept::new(limit);
    let mut total = 0;
    for state in states {
        kept.merge(state.kept);
        total += state.total;
    }
    Ok(Found {
        files: kept
            .into_items()
            .map(|((_, abs), ())| workspace.show(&abs))
            .collect(),
        total,
        start: resolved.shown(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_holds_the_first_in_order_and_counts_the_rest() {
        let mut a = Kept::new(3);
        for k in [5, 1, 9, 3] {
            a.insert(k, ());
        }
        let mut b = Kept::new(3);
        for k in [2, 8] {
            b.insert(k, ());
        }
        a.merge(b);
        assert_eq!(a.left_out, 3);
        assert_eq!(
            a.into_items().map(|(k, ())| k).collect::<Vec<_>>(),
            [1, 2, 3]
        );
    }

    #[test]
    fn globs_match_names_anywhere_and_paths_from_the_start() {
        let globs =
            Globs::new(&["*.rs".into(), "docs/**/*.md".into(), "!gen_*".into()]).expect("globs");
        assert!(globs.chooses(Path::new("a/b/c.rs")));
        assert!(globs.chooses(Path::new("docs/x/y.md")));
        assert!(!globs.chooses(Path::new("src/y.md")));
        assert!(!globs.chooses(Path::new("src/gen_x.rs")));
        let deep = Globs::new(&["src/*.rs".into()]).expect("globs");
        assert!(deep.chooses(Path::new("src/a.rs")));
        assert!(
            !deep.chooses(Path::new("src/sub/a.rs")),
            "* stays in a folder"
        );
        let any = Globs::new(&["**/*.rs".into()]).expect("globs");
        assert!(any.chooses(Path::new("a.rs")) && any.chooses(Path::new("x/y/a.rs")));
        let Err(e) = Globs::new(&["a[".into()]) else {
            panic!("a bad glob compiled");
        };
        assert!(e.to_string().contains("'a[' is not a glob pattern"), "{e}");
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(human_size(512), "512 bytes");
        assert_eq!(human_size(1536), "1.5 KiB");
        assert_eq!(human_size(10 * 1024 * 1024), "10.0 MiB");
    }
}
