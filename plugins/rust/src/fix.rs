//! `cargo_fix`: `cargo fix` (or `cargo clippy --fix`) applies the compiler's (or
//! clippy's) machine-applicable suggestions in a crate of the workspace; the report is a
//! diff summary of the files it changed, from a snapshot of the crate's Rust sources
//! taken before and after.
//!
//! cargo refuses to fix a crate whose version control shows uncommitted changes unless
//! given `--allow-dirty` (and `--allow-staged`), and one under no version control unless
//! given `--allow-no-vcs`: both protect the user's edits from being mixed with the fixes.
//! The tool passes them only when asked, and says so when cargo refuses.
//!
//! Weak spot: `cargo fix` coordinates the compilers it starts through a TCP server it
//! binds on 127.0.0.1 (a random port), and Landlock can deny TCP only by port, not by
//! address, so this tool's sandbox leaves TCP open (the other filesystem rules hold, and
//! cargo still runs `--offline` unless the workspace allows the network). Its risk is
//! `write`, so each call is approved.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_plugin_api::{CancelFlag, Structured, ToolContext, ToolError, tool};

use crate::check::{Selection, tail};
use crate::diagnostics::{self, CompilerDiagnostic};
use crate::exec;
use crate::project::CargoCall;

/// Files larger than this are not snapshotted (a generated file, not one to fix).
const SNAPSHOT_FILE_CAP: u64 = 4 * 1024 * 1024;

/// The most of one file's diff the report carries.
const DIFF_CAP: usize = 16 * 1024;

/// Arguments of `cargo_fix`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FixArgs {
    /// The crate's (or cargo workspace's) folder: relative to the first workspace root,
    /// or absolute beneath a root. Default: the first root.
    #[serde(default)]
    path: Option<String>,
    /// Apply clippy's machine-applicable suggestions too (`cargo clippy --fix`) instead
    /// of only the compiler's (`cargo fix`). Default: false.
    #[serde(default)]
    clippy: bool,
    /// Only this package of a cargo workspace (`-p`).
    #[serde(default)]
    package: Option<String>,
    /// Fix tests, examples and benches too (`--all-targets`). Default: false.
    #[serde(default)]
    all_targets: bool,
    /// Features to enable (`--features`).
    #[serde(default)]
    features: Vec<String>,
    /// Fix even though version control shows uncommitted or staged changes
    /// (`--allow-dirty --allow-staged`). Only when the user agreed: the fixes mix with
    /// their edits. Default: false.
    #[serde(default)]
    allow_dirty: bool,
    /// Fix a crate that is under no version control (`--allow-no-vcs`): there is then no
    /// way back but the diff this tool returns. Default: false.
    #[serde(default)]
    allow_no_vcs: bool,
    /// Seconds before cargo and everything it started are killed. Default and maximum:
    /// the workspace's command_timeout_secs.
    #[serde(default)]
    timeout_secs: Option<u64>,
}

/// One file the fix changed.
#[derive(Serialize, JsonSchema)]
pub struct ChangedFile {
    /// The file, relative to the crate's folder.
    pub path: String,
    /// Lines added.
    pub added: usize,
    /// Lines removed.
    pub removed: usize,
    /// A unified diff of the change (cut past 16 KiB).
    pub diff: String,
}

/// What `cargo_fix` returns.
#[derive(Serialize, JsonSchema)]
pub struct FixReport {
    /// cargo finished without an error.
    pub success: bool,
    /// The files changed, with their diffs.
    pub changed: Vec<ChangedFile>,
    /// What the compiler still reports after the fixes (what needs a person's hand).
    pub remaining: Vec<CompilerDiagnostic>,
    /// cargo's exit code (absent when it was killed).
    pub exit_code: Option<i32>,
    /// cargo's own messages, when it failed.
    pub cargo_error: Option<String>,
    /// Notes: a refusal and how to get past it, offline mode, time-outs.
    pub notes: Vec<String>,
}

/// Applies the compiler's machine-applicable suggestions to a Rust crate of the
/// workspace with `cargo fix` (`clippy: true`: clippy's too, with `cargo clippy --fix`)
/// and returns the files it changed as a diff summary, plus the diagnostics left for a
/// person. cargo refuses when version control shows uncommitted changes (pass
/// `allow_dirty: true` only if the user agreed) or there is no version control
/// (`allow_no_vcs: true`). Options: `path`, `package`, `all_targets`, `features`. Runs
/// in the command sandbox, offline unless the workspace allows the network.
#[tool(risk = write, programs = ["cargo"], workspace)]
pub async fn cargo_fix(
    ctx: &ToolContext<'_>,
    #[args] args: FixArgs,
) -> Result<Structured<FixReport>, ToolError> {
    let call = CargoCall::of(ctx, args.path.as_deref(), args.timeout_secs).await?;
    let subcommand: &[&str] = if args.clippy {
        &["clippy", "--fix"]
    } else {
        &["fix"]
    };
    let mut extra = Vec::new();
    if args.allow_dirty {
        extra.extend(["--allow-dirty".to_owned(), "--allow-staged".to_owned()]);
    }
    if args.allow_no_vcs {
        extra.push("--allow-no-vcs".to_owned());
    }
    let selection = Selection {
        package: args.package.as_deref(),
        all_targets: args.all_targets,
        features: &args.features,
        all_features: false,
    };
    let mut command = call.cargo(subcommand, selection, extra);
    // cargo fix's lock server: see the module's top.
    command.local_tcp = true;
    let CargoCall {
        project,
        notes,
        network,
        ..
    } = call;
    let dir = project.dir;
    let value = ctx
        .blocking(move |cancel: &CancelFlag| {
            let before = snapshot(&dir);
            let ran = exec::run(command, cancel)?;
            let after = snapshot(&dir);
            Ok::<_, ToolError>(report(ran, &before, &after, network, notes))
        })
        .await
        .map_err(ToolError::failed)??;
    let text = cargo_fix_text(&value);
    let failed = !value.success;
    Ok(Structured::new(value).text(text).failed_if(failed))
}

/// The text the model reads for a result of `cargo_fix`.
fn cargo_fix_text(r: &FixReport) -> String {
    let mut text = if r.changed.is_empty() {
        format!(
            "cargo fix {}: no file changed\n",
            if r.success { "finished" } else { "failed" }
        )
    } else {
        let (added, removed) = r
            .changed
            .iter()
            .fold((0, 0), |(a, d), f| (a + f.added, d + f.removed));
        let mut text = format!(
            "cargo fix changed {} files (+{added} -{removed}):\n",
            r.changed.len()
        );
        for f in &r.changed {
            text.push_str(&format!("  {} +{} -{}\n", f.path, f.added, f.removed));
        }
        for f in &r.changed {
            text.push('\n');
            text.push_str(&f.diff);
        }
        text
    };
    if !r.remaining.is_empty() {
        text.push_str("\nleft to fix by hand:\n");
        text.push_str(&diagnostics::compact_list(&r.remaining, 30));
    }
    diagnostics::push_cargo_said(&mut text, r.cargo_error.as_deref(), &r.notes);
    text
}

/// The report of a finished fix.
fn report(
    ran: exec::Ran,
    before: &BTreeMap<PathBuf, String>,
    after: &BTreeMap<PathBuf, String>,
    network: bool,
    mut notes: Vec<String>,
) -> FixReport {
    let parsed = diagnostics::parse_messages(&ran.stdout());
    let stderr = ran.stderr();
    notes.extend(ran.notes.iter().cloned());
    let exit_code = ran.exit_code();
    let success = ran.completed() && exit_code == Some(0);
    let cargo_error = (!success).then(|| tail(&stderr, 4000));
    if let Some(error) = &cargo_error {
        if error.contains("--allow-no-vcs") {
            notes.push(
                "cargo refused: the crate is under no version control, so nothing could undo \
                 the fixes but the diff this tool returns; call again with `allow_no_vcs: \
                 true` to fix anyway"
                    .to_owned(),
            );
        } else if error.contains("--allow-dirty") || error.contains("--allow-staged") {
            notes.push(
                "cargo refused: version control shows uncommitted changes, which the fixes \
                 would mix with; commit them first, or call again with `allow_dirty: true` \
                 if the user agrees"
                    .to_owned(),
            );
        } else if let Some(why) = exec::explain_cargo_failure(error, network) {
            notes.push(why);
        }
    }
    FixReport {
        success,
        changed: changes(before, after),
        remaining: parsed.diagnostics,
        exit_code,
        cargo_error,
        notes,
    }
}

/// The Rust sources beneath `dir` (not `target/` or hidden folders), by path relative to
/// it. Files that cannot be read as UTF-8 or are over the cap are left out.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(folder) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                if !name.starts_with('.') && name != "target" {
                    stack.push(path);
                }
            } else if kind.is_file()
                && name.ends_with(".rs")
                && entry.metadata().is_ok_and(|m| m.len() <= SNAPSHOT_FILE_CAP)
                && let (Ok(text), Ok(rel)) =
                    (std::fs::read_to_string(&path), path.strip_prefix(dir))
            {
                files.insert(rel.to_path_buf(), text);
            }
        }
    }
    files
}

/// The files that differ between two snapshots, with their diffs.
fn changes(
    before: &BTreeMap<PathBuf, String>,
    after: &BTreeMap<PathBuf, String>,
) -> Vec<ChangedFile> {
    let paths: std::collections::BTreeSet<&PathBuf> = before.keys().chain(after.keys()).collect();
    let mut out = Vec::new();
    for path in paths {
        let old = before.get(path).map_or("", String::as_str);
        let new = after.get(path).map_or("", String::as_str);
        if old == new {
            continue;
        }
        let diff = similar::TextDiff::from_lines(old, new);
        let (mut added, mut removed) = (0, 0);
        for change in diff.iter_all_changes() {
            match change.tag() {
                similar::ChangeTag::Insert => added += 1,
                similar::ChangeTag::Delete => removed += 1,
                similar::ChangeTag::Equal => {}
            }
        }
        let shown = path.display().to_string();
        let mut unified = diff
            .unified_diff()
            .context_radius(2)
            .header(&format!("a/{shown}"), &format!("b/{shown}"))
            .to_string();
        if unified.len() > DIFF_CAP {
            let mut cut = DIFF_CAP;
            while !unified.is_char_boundary(cut) {
                cut -= 1;
            }
            unified.truncate(cut);
            unified.push_str("\n[... the rest of this diff is left out ...]\n");
        }
        out.push(ChangedFile {
            path: shown,
            added,
            removed,
            diff: unified,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_diff_into_counts_and_a_unified_diff_skipping_target() {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::create_dir_all(dir.path().join("src")).expect("src");
        std::fs::create_dir_all(dir.path().join("target")).expect("target");
        std::fs::write(dir.path().join("src/lib.rs"), "fn a() {}\nfn b() {}\n").expect("w");
        std::fs::write(dir.path().join("target/gen.rs"), "x").expect("w");
        let before = snapshot(dir.path());
        assert_eq!(before.len(), 1, "{before:?}");
        std::fs::write(dir.path().join("src/lib.rs"), "fn a() {}\nfn c() {}\n").expect("w");
        std::fs::write(dir.path().join("target/gen.rs"), "y").expect("w");
        let after = snapshot(dir.path());
        let changed = changes(&before, &after);
        assert_eq!(changed.len(), 1);
        assert_eq!(
            (
                changed[0].path.as_str(),
                changed[0].added,
                changed[0].removed
            ),
            ("src/lib.rs", 1, 1)
        );
        assert!(
            changed[0].diff.contains("-fn b() {}"),
            "{}",
            changed[0].diff
        );
        assert!(
            changed[0].diff.contains("+fn c() {}"),
            "{}",
            changed[0].diff
        );
    }
}
