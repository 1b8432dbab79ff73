//! The fuzz targets' entry points for what a model sends the workspace tools (feature
//! `fuzzing`): hashline anchors and edit requests to `edit_file`, patterns and options
//! to `grep`, each run through the real tool on a real file in a real workspace folder.
//! Not part of the crate's API.

use std::path::PathBuf;
use std::sync::OnceLock;

use arbitrary::Arbitrary;
use serde_json::{Value, json};
use toolhost_plugin_api::WorkspaceAnswer;
use toolhost_plugin_api::testing::TestHost;

/// The file the targets write and the tools read.
const FILE: &str = "fuzzed.txt";

/// One workspace folder and a host whose profile has it as its root, for the process.
fn workspace() -> &'static (PathBuf, TestHost) {
    static WORKSPACE: OnceLock<(PathBuf, TestHost)> = OnceLock::new();
    WORKSPACE.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("toolhost-fuzz-workspace-")
            .tempdir()
            .unwrap_or_else(|e| panic!("no workspace folder: {e}"))
            .keep();
        let root = std::fs::canonicalize(&dir).unwrap_or(dir);
        let host =
            TestHost::new().workspace(WorkspaceAnswer::with_roots([root.display().to_string()]));
        (root, host)
    })
}

fn refused_with_a_message(what: &str, message: &str) {
    assert!(
        !message.trim().is_empty(),
        "{what} was refused with an empty message"
    );
}

/// An anchor as a model writes it: the line's real anchor (`12:a3f`), the line with a
/// wrong hash, or any text.
#[derive(Debug, Arbitrary)]
pub enum FuzzAnchor {
    /// The anchor `read_file` showed for this line (numbered from 1, wrapped).
    Real(u16),
    /// This line with a hash that may not be its own.
    Stale(u16, u16),
    /// Anything.
    Raw(String),
}

/// One anchored edit.
#[derive(Debug, Arbitrary)]
pub struct FuzzEdit {
    /// `from`.
    pub from: Option<FuzzAnchor>,
    /// `to`.
    pub to: Option<FuzzAnchor>,
    /// `after`.
    pub after: Option<FuzzAnchor>,
    /// `before`.
    pub before: Option<FuzzAnchor>,
    /// `new_text`.
    pub new_text: String,
}

/// A file and an edit request for it.
#[derive(Debug, Arbitrary)]
pub struct FuzzEditRequest {
    /// The file's text before the edit.
    pub text: String,
    /// Whether the model read the file first (puts its lines on record).
    pub read_first: bool,
    /// Anchored edits.
    pub edits: Vec<FuzzEdit>,
    /// Or an exact-text edit: old, new, replace all.
    pub exact: Option<(String, Option<String>, bool)>,
    /// `allow_syntax_errors`.
    pub allow_syntax_errors: bool,
    /// The file's name ends in this (a syntax the edit is checked against, or none).
    pub extension: u8,
}

fn anchor(anchor: &FuzzAnchor, lines: &[&str]) -> String {
    let count = lines.len().max(1);
    match anchor {
        FuzzAnchor::Real(n) => {
            let n = usize::from(*n) % count;
            format!(
                "{}:{}",
                n + 1,
                crate::line_hash(lines.get(n).copied().unwrap_or(""))
            )
        }
        FuzzAnchor::Stale(n, hash) => {
            format!("{}:{:03x}", usize::from(*n) % (count + 2), hash % 0x1000)
        }
        FuzzAnchor::Raw(text) => text.clone(),
    }
}

/// `edit_file` on a real file: a read first if asked, then the edit. Whatever the
/// request, the tool answers (a diff, or an error that says what to do) and the file is
/// either the same or what the answer says it became.
pub fn hashline_edit(request: &FuzzEditRequest) {
    let (root, host) = workspace();
    let name = match request.extension % 6 {
        0 => "fuzzed.txt",
        1 => "fuzzed.rs",
        2 => "fuzzed.py",
        3 => "fuzzed.json",
        4 => "fuzzed.toml",
        _ => "fuzzed.ts",
    };
    let path = root.join(name);
    std::fs::write(&path, &request.text)
        .unwrap_or_else(|e| panic!("could not write {}: {e}", path.display()));
    if request.read_first
        && let Err(e) = host.call(&crate::read_file, json!({ "path": name }))
    {
        refused_with_a_message("read_file", &e.to_string());
    }
    let lines: Vec<&str> = request.text.lines().collect();
    let edits: Vec<Value> = request
        .edits
        .iter()
        .map(|e| {
            let mut edit = serde_json::Map::new();
            for (key, value) in [
                ("from", &e.from),
                ("to", &e.to),
                ("after", &e.after),
                ("before", &e.before),
            ] {
                if let Some(a) = value {
                    edit.insert(key.to_owned(), Value::String(anchor(a, &lines)));
                }
            }
            edit.insert("new_text".to_owned(), Value::String(e.new_text.clone()));
            Value::Object(edit)
        })
        .collect();
    let mut args = json!({ "path": name, "allow_syntax_errors": request.allow_syntax_errors });
    if !edits.is_empty() {
        args["edits"] = Value::Array(edits);
    }
    if let Some((old, new, all)) = &request.exact {
        args["old_text"] = Value::String(old.clone());
        if let Some(new) = new {
            args["new_text"] = Value::String(new.clone());
        }
        args["replace_all"] = Value::Bool(*all);
    }
    let answer = host.call(&crate::edit_file, args);
    let after = std::fs::read(&path).unwrap_or_else(|e| panic!("{} is gone: {e}", path.display()));
    match answer {
        Ok(diff) => assert!(
            !diff.trim().is_empty() || after == request.text.as_bytes(),
            "an edit changed the file and said nothing"
        ),
        Err(e) => {
            refused_with_a_message("an edit", &e.to_string());
            assert_eq!(
                after,
                request.text.as_bytes(),
                "a refused edit changed the file"
            );
        }
    }
}

/// A `grep` request and the file it searches.
#[derive(Debug, Arbitrary)]
pub struct FuzzGrep {
    /// The file's bytes (not always text).
    pub file: Vec<u8>,
    /// `pattern`.
    pub pattern: String,
    /// `literal`.
    pub literal: bool,
    /// `case_insensitive`.
    pub case_insensitive: bool,
    /// `smart_case`.
    pub smart_case: bool,
    /// `glob`.
    pub glob: Vec<String>,
    /// `type`.
    pub file_type: Option<String>,
    /// `context` (and before/after).
    pub context: Option<u8>,
    /// `before_context`.
    pub before: Option<u8>,
    /// `after_context`.
    pub after: Option<u8>,
    /// `max_matches`.
    pub max_matches: Option<u16>,
}

/// `grep` over a file of the fuzzer's bytes: a bad pattern, glob or type is an argument
/// error that says what is wrong; a good one answers.
pub fn grep_pattern(request: &FuzzGrep) {
    let (root, host) = workspace();
    std::fs::write(root.join(FILE), &request.file)
        .unwrap_or_else(|e| panic!("could not write the file: {e}"));
    let mut args = json!({
        "pattern": request.pattern,
        "literal": request.literal,
        "case_insensitive": request.case_insensitive,
        "smart_case": request.smart_case,
        "glob": request.glob,
    });
    if let Some(t) = &request.file_type {
        args["type"] = Value::String(t.clone());
    }
    for (key, value) in [
        ("context", request.context),
        ("before_context", request.before),
        ("after_context", request.after),
    ] {
        if let Some(v) = value {
            args[key] = json!(v);
        }
    }
    if let Some(m) = request.max_matches {
        args["max_matches"] = json!(m);
    }
    if let Err(e) = host.call(&crate::grep, args) {
        refused_with_a_message("grep", &e.to_string());
    }
}

/// The workspace targets, by the name of their `fuzz/fuzz_targets/*.rs` file.
pub const TARGETS: &[&str] = &["hashline_edit", "grep_pattern"];

/// Runs `target` on `data` as its fuzz target does (the input read with `arbitrary`;
/// bytes that make none are skipped); `false` for no such target.
pub fn run(target: &str, data: &[u8]) -> bool {
    fn structured<T: for<'a> Arbitrary<'a>>(data: &[u8], f: impl FnOnce(&T)) {
        if let Ok(input) = T::arbitrary_take_rest(arbitrary::Unstructured::new(data)) {
            f(&input);
        }
    }
    match target {
        "hashline_edit" => structured(data, hashline_edit),
        "grep_pattern" => structured(data, grep_pattern),
        _ => return false,
    }
    true
}

#[cfg(test)]
mod tests {
    //! Every input kept for the workspace targets replays here, in the normal test suite.

    use std::path::Path;

    #[test]
    fn every_kept_input_of_every_workspace_target_replays_without_a_finding() {
        let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
        for target in super::TARGETS {
            let text = std::fs::read_to_string(fuzz.join(format!("fuzz_targets/{target}.rs")))
                .unwrap_or_else(|e| panic!("fuzz/fuzz_targets/{target}.rs: {e}"));
            assert!(text.contains(&format!("toolhost_workspace::fuzzing::{target}")));
            let mut files = Vec::new();
            for kind in ["corpus", "regressions"] {
                if let Ok(entries) = std::fs::read_dir(fuzz.join(kind).join(target)) {
                    files.extend(entries.filter_map(Result::ok).map(|e| e.path()));
                }
            }
            assert!(!files.is_empty(), "fuzz/corpus/{target} holds no input");
            files.sort();
            for file in files {
                let data =
                    std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                eprintln!("{target}: {}", file.display());
                assert!(super::run(target, &data));
            }
        }
        assert!(!super::run("no_such_target", b""));
    }
}
