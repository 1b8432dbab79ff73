//! `edit_file` and `write_file` through the test host, on real temporary folders: anchored
//! and exact-text edits, stale anchors, edits that must prove what they replace (a line
//! changed inside the range, a shifted file, no read on record), syntax checks, line
//! endings and modes, the write modes, hard links, and every way out of the workspace
//! refused.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use tempfile::TempDir;
use toolhost_plugin_api::testing::TestHost;
use toolhost_plugin_api::{Risk, ToolError, WorkspaceAnswer};
use toolhost_workspace::{edit_file, format_line, line_hash, read_file, write_file};

/// A workspace root (its real path) and a host whose profile has it as its one root.
struct Fixture {
    _dir: TempDir,
    root: PathBuf,
    host: TestHost,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    let host = TestHost::new().workspace(WorkspaceAnswer::with_roots([root.display().to_string()]));
    Fixture {
        _dir: dir,
        root,
        host,
    }
}

impl Fixture {
    fn put(&self, rel: &str, text: &str) -> PathBuf {
        let path = self.root.join(rel);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        fs::write(&path, text).unwrap();
        path
    }

    fn read(&self, rel: &str) -> String {
        fs::read_to_string(self.root.join(rel)).unwrap()
    }

    /// `read_file` of `rel`: what the model sees, and what puts the file on record.
    fn show(&self, rel: &str) -> String {
        self.host.call(&read_file, json!({ "path": rel })).unwrap()
    }

    /// Writes `rel` and reads it with `read_file`, as a model does before editing.
    fn put_read(&self, rel: &str, text: &str) -> PathBuf {
        let path = self.put(rel, text);
        self.show(rel);
        path
    }

    fn edit(&self, args: Value) -> Result<String, ToolError> {
        self.host.call(&edit_file, args)
    }

    fn write(&self, args: Value) -> Result<String, ToolError> {
        self.host.call(&write_file, args)
    }
}

/// The anchor of line `n` of `text`, as read_file shows it.
fn anchor(text: &str, n: usize) -> String {
    format!("{n}:{}", line_hash(text.lines().nth(n - 1).unwrap()))
}

fn failed(result: Result<String, ToolError>) -> String {
    match result {
        Err(ToolError::Failed(message)) => message,
        other => panic!("expected a failure, got {other:?}"),
    }
}

const LIB_RS: &str = "\
use std::fmt;

pub fn parse(input: &str) -> u32 {
    let n = input.len();
    n as u32
}

pub fn other() -> u32 {
    7
}
";

#[test]
fn both_tools_are_write_tools_with_documented_arguments() {
    let host = TestHost::new();
    for (info, args) in [
        (
            host.describe(&edit_file),
            vec![
                "path",
                "edits",
                "old_text",
                "new_text",
                "replace_all",
                "allow_syntax_errors",
            ],
        ),
        (
            host.describe(&write_file),
            vec!["path", "content", "mode", "create_dirs", "follow_symlinks"],
        ),
    ] {
        assert_eq!(info.risk, Risk::Write, "{}", info.name);
        for arg in args {
            let described = &info.schema["properties"][arg]["description"];
            assert!(
                described.as_str().is_some_and(|d| d.len() > 20),
                "{}: {arg} undocumented: {}",
                info.name,
                info.schema
            );
        }
    }
    let edit = host.describe(&edit_file);
    let item = &edit.schema["properties"]["edits"]["items"]["properties"];
    for field in ["from", "to", "after", "before", "new_text"] {
        assert!(item[field]["description"].is_string(), "{field}: {item}");
    }
}

#[test]
fn anchored_edit_replaces_the_right_lines_and_shows_the_diff_and_new_anchors() {
    let f = fixture();
    f.put_read("src/lib.rs", LIB_RS);
    let out = f
        .edit(json!({"path": "src/lib.rs", "edits": [{
            "from": anchor(LIB_RS, 4),
            "to": format_line(5, "    n as u32"),
            "new_text": "    let n = input.trim().len();\n    n as u32 + 1",
        }]}))
        .unwrap();
    let now = f.read("src/lib.rs");
    assert_eq!(
        now,
        LIB_RS.replace(
            "    let n = input.len();\n    n as u32\n",
            "    let n = input.trim().len();\n    n as u32 + 1\n"
        )
    );
    assert!(
        out.starts_with("edited src/lib.rs: lines 4-5 replaced by 2 lines"),
        "{out}"
    );
    assert!(
        out.contains("--- a/src/lib.rs\n+++ b/src/lib.rs\n@@"),
        "{out}"
    );
    assert!(out.contains("-    let n = input.len();\n"), "{out}");
    assert!(out.contains("+    n as u32 + 1\n"), "{out}");
    // The new anchors can be used at once, without a new read.
    assert!(out.contains(&format_line(5, "    n as u32 + 1")), "{out}");
    f.edit(json!({"path": "src/lib.rs", "edits": [{
        "from": anchor(&now, 5), "new_text": "    n as u32 + 2",
    }]}))
    .unwrap();
    assert!(f.read("src/lib.rs").contains("n as u32 + 2"));
}

#[test]
fn a_stale_anchor_is_refused_after_the_file_changed_and_nothing_is_written() {
    let f = fixture();
    f.put_read("src/lib.rs", LIB_RS);
    let old_anchor = anchor(LIB_RS, 5);
    // Someone changes the file after the model read it.
    let changed = LIB_RS.replace("n as u32\n", "(n * 2) as u32\n");
    f.put("src/lib.rs", &changed);
    let message = failed(f.edit(json!({"path": "src/lib.rs", "edits": [{
        "from": old_anchor, "new_text": "    0",
    }]})));
    assert!(message.contains("nothing was written"), "{message}");
    assert!(
        message.contains(&format!("edit 1, `from` {old_anchor}")),
        "{message}"
    );
    assert!(
        message.contains(&format_line(5, "    (n * 2) as u32")),
        "{message}"
    );
    assert!(
        message.contains(&format_line(3, "pub fn parse(input: &str) -> u32 {")),
        "{message}"
    );
    assert_eq!(f.read("src/lib.rs"), changed, "the file is unchanged");

    // A line that moved is found by its hash.
    let moved = format!("// a new first line\n{LIB_RS}");
    f.put("src/lib.rs", &moved);
    let message = failed(f.edit(json!({"path": "src/lib.rs", "edits": [{
        "from": anchor(LIB_RS, 9), "new_text": "    8",
    }]})));
    assert!(message.contains("is now line 10"), "{message}");
    assert_eq!(f.read("src/lib.rs"), moved);
}

#[test]
fn several_edits_in_one_call_apply_to_the_same_read() {
    let f = fixture();
    let text = "a\nb\nc\nd\ne\n";
    f.put_read("notes.txt", text);
    let out = f
        .edit(json!({"path": "notes.txt", "edits": [
            {"from": anchor(text, 4), "new_text": "D1\nD2"},
            {"from": anchor(text, 1), "to": anchor(text, 2), "new_text": ""},
            {"after": anchor(text, 5), "new_text": "f"},
            {"before": anchor(text, 3), "new_text": "before c"},
        ]}))
        .unwrap();
    assert_eq!(f.read("notes.txt"), "before c\nc\nD1\nD2\ne\nf\n");
    assert!(out.contains("lines 1-2 deleted"), "{out}");
    assert!(out.contains("1 line inserted after line 5"), "{out}");
}

#[test]
fn overlapping_edits_are_refused() {
    let f = fixture();
    let text = "a\nb\nc\nd\n";
    f.put_read("notes.txt", text);
    let message = failed(f.edit(json!({"path": "notes.txt", "edits": [
        {"from": anchor(text, 1), "to": anchor(text, 3), "new_text": "x"},
        {"from": anchor(text, 3), "to": anchor(text, 4), "new_text": "y"},
    ]})));
    assert!(message.contains("overlap"), "{message}");
    assert!(
        message.contains("lines 1-3") && message.contains("lines 3-4"),
        "{message}"
    );
    assert_eq!(f.read("notes.txt"), text);
}

#[test]
fn exact_text_must_match_once_unless_replace_all() {
    let f = fixture();
    let text = "x = 1\ny = 1\nz = 2\n";
    f.put("conf.txt", text);
    let message = failed(f.edit(json!({"path": "conf.txt", "old_text": "= 1", "new_text": "= 9"})));
    assert!(message.contains("occurs 2 times"), "{message}");
    assert!(message.contains("lines 1, 2"), "{message}");
    assert_eq!(f.read("conf.txt"), text);

    let out = f
        .edit(json!({"path": "conf.txt", "old_text": "z = 2", "new_text": "z = 3"}))
        .unwrap();
    assert!(
        out.contains("replaced the one occurrence of old_text (line 3)"),
        "{out}"
    );
    assert_eq!(f.read("conf.txt"), "x = 1\ny = 1\nz = 3\n");

    let out = f
        .edit(
            json!({"path": "conf.txt", "old_text": "= 1", "new_text": "= 0", "replace_all": true}),
        )
        .unwrap();
    assert!(
        out.contains("replaced all 2 occurrences of old_text (lines 1, 2)"),
        "{out}"
    );
    assert_eq!(f.read("conf.txt"), "x = 0\ny = 0\nz = 3\n");
}

#[test]
fn exact_text_without_a_match_shows_the_nearest_lines_and_hints() {
    let f = fixture();
    f.put("src/lib.rs", LIB_RS);
    let message = failed(f.edit(json!({
        "path": "src/lib.rs",
        "old_text": "    let n = input.length();",
        "new_text": "x",
    })));
    assert!(
        message.contains("old_text was not found in src/lib.rs"),
        "{message}"
    );
    assert!(message.contains("is line 4"), "{message}");
    assert!(
        message.contains(&format_line(4, "    let n = input.len();")),
        "{message}"
    );

    // Only the indentation differs.
    let message = failed(f.edit(json!({
        "path": "src/lib.rs",
        "old_text": "  let n = input.len();\n  n as u32",
        "new_text": "x",
    })));
    assert!(
        message.contains("lines 4-5 if spaces, tabs and indentation are ignored"),
        "{message}"
    );
    assert_eq!(f.read("src/lib.rs"), LIB_RS);
}

#[test]
fn an_edit_that_breaks_rust_syntax_is_refused_and_a_valid_one_accepted() {
    let f = fixture();
    f.put_read("src/lib.rs", LIB_RS);
    // Deleting the closing brace of `parse`.
    let message = failed(f.edit(json!({"path": "src/lib.rs", "edits": [{
        "from": anchor(LIB_RS, 5), "to": anchor(LIB_RS, 6), "new_text": "    n as u32",
    }]})));
    assert!(message.contains("nothing was written"), "{message}");
    assert!(message.contains("Rust syntax error at line"), "{message}");
    assert!(message.contains(", column "), "{message}");
    assert!(
        message.contains("the edit splits the block (lines 3-6) of the function_item `parse`"),
        "{message}"
    );
    assert!(message.contains("allow_syntax_errors"), "{message}");
    // The refusal shows the edited lines as they would read, marked, with the lines
    // around them, wherever the parser noticed the error.
    assert!(
        message.contains("The edited lines (line 5) as they would read"),
        "{message}"
    );
    assert!(message.contains(">    5 |     n as u32"), "{message}");
    assert!(
        message.contains("     4 |     let n = input.len();"),
        "{message}"
    );
    assert_eq!(f.read("src/lib.rs"), LIB_RS);

    // An unbalanced expression inside one line: the node it is inside is named.
    let message = failed(f.edit(json!({
        "path": "src/lib.rs", "old_text": "input.len()", "new_text": "input.len(",
    })));
    assert!(message.contains("line 4"), "{message}");
    assert!(message.contains("`parse`"), "{message}");
    assert_eq!(f.read("src/lib.rs"), LIB_RS);

    // Replacing the whole function keeps the file valid.
    let out = f
        .edit(json!({"path": "src/lib.rs", "edits": [{
            "from": anchor(LIB_RS, 3), "to": anchor(LIB_RS, 6),
            "new_text": "pub fn parse(input: &str) -> u32 {\n    input.len() as u32\n}",
        }]}))
        .unwrap();
    assert!(!out.contains("syntax"), "{out}");
    assert!(f.read("src/lib.rs").contains("    input.len() as u32\n}\n"));
}

#[test]
fn allow_syntax_errors_writes_a_breaking_edit_with_a_warning() {
    let f = fixture();
    f.put("src/lib.rs", LIB_RS);
    let out = f
        .edit(json!({
            "path": "src/lib.rs",
            "old_text": "pub fn other() -> u32 {",
            "new_text": "pub fn other() -> u32 {{",
            "allow_syntax_errors": true,
        }))
        .unwrap();
    assert!(
        out.contains("warning: the file now has a syntax error"),
        "{out}"
    );
    assert!(f.read("src/lib.rs").contains("u32 {{"));

    // Now the file has errors: further edits are not blocked, and the result says why.
    let out = f
        .edit(json!({"path": "src/lib.rs", "old_text": "    7\n", "new_text": "    8\n"}))
        .unwrap();
    assert!(
        out.contains("already had a Rust syntax error before this edit"),
        "{out}"
    );
    assert!(f.read("src/lib.rs").contains("    8\n"));
}

#[test]
fn python_json_and_toml_breakage_is_refused() {
    let f = fixture();
    let py = "def area(w, h):\n    return w * h\n\n\nprint(area(2, 3))\n";
    f.put_read("app.py", py);
    let message = failed(f.edit(json!({"path": "app.py", "edits": [{
        "from": anchor(py, 1), "new_text": "def area(w, h:",
    }]})));
    assert!(
        message.contains("Python syntax error at line 2"),
        "{message}"
    );
    assert!(message.contains("function_definition `area`"), "{message}");
    assert_eq!(f.read("app.py"), py);
    f.edit(json!({"path": "app.py", "edits": [{
        "from": anchor(py, 2), "new_text": "    return w * h * 1",
    }]}))
    .unwrap();

    let json_text = "{\n  \"name\": \"demo\",\n  \"tags\": [\"a\", \"b\"]\n}\n";
    f.put_read("package.json", json_text);
    let message = failed(f.edit(json!({"path": "package.json", "edits": [{
        "from": anchor(json_text, 2), "new_text": "  \"name\": \"demo\"",
    }]})));
    assert!(message.contains("JSON syntax error at line"), "{message}");
    assert_eq!(f.read("package.json"), json_text);
    f.edit(json!({"path": "package.json", "old_text": "\"demo\"", "new_text": "\"demo2\""}))
        .unwrap();

    let toml = "[package]\nname = \"demo\"\nversion = \"0.1.0\"\n";
    f.put_read("Cargo.toml", toml);
    let message = failed(f.edit(json!({"path": "Cargo.toml", "edits": [{
        "from": anchor(toml, 1), "new_text": "[package",
    }]})));
    assert!(message.contains("TOML syntax error at line"), "{message}");
    assert!(message.contains("the table (lines 1-3)"), "{message}");
    assert_eq!(f.read("Cargo.toml"), toml);

    // Files without a grammar are not checked.
    f.put_read("notes.md", "# Title\n");
    let out = f
        .edit(json!({"path": "notes.md", "old_text": "# Title", "new_text": "# Title (("}))
        .unwrap();
    assert!(!out.contains("syntax"), "{out}");
}

#[test]
fn crlf_line_endings_and_the_file_mode_are_kept() {
    let f = fixture();
    let text = "one\r\ntwo\r\nthree\r\n";
    let path = f.put_read("win.txt", text);
    fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
    let out = f
        .edit(json!({"path": "win.txt", "edits": [{
            "from": anchor(text, 2), "new_text": "TWO\nTWO AND A HALF\n",
        }]}))
        .unwrap();
    assert!(
        !out.contains('\r'),
        "the diff shows no carriage returns: {out:?}"
    );
    assert_eq!(
        f.read("win.txt"),
        "one\r\nTWO\r\nTWO AND A HALF\r\nthree\r\n"
    );
    f.edit(json!({"path": "win.txt", "old_text": "one\nTWO", "new_text": "1\n2"}))
        .unwrap();
    assert_eq!(f.read("win.txt"), "1\r\n2\r\nTWO AND A HALF\r\nthree\r\n");
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o7777,
        0o640
    );
    let names: Vec<_> = fs::read_dir(&f.root)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["win.txt"], "no temporary file is left");
}

#[test]
fn edit_file_refuses_missing_files_links_and_bad_arguments() {
    let f = fixture();
    let message = failed(f.edit(json!({"path": "nope.rs", "old_text": "a", "new_text": "b"})));
    assert!(
        message.contains("does not exist; create it with write_file"),
        "{message}"
    );

    f.put("real.txt", "hello\n");
    std::os::unix::fs::symlink("real.txt", f.root.join("link.txt")).unwrap();
    let message =
        failed(f.edit(json!({"path": "link.txt", "old_text": "hello", "new_text": "bye"})));
    assert!(
        message.contains("link.txt is a symbolic link (to real.txt)"),
        "{message}"
    );
    assert_eq!(f.read("real.txt"), "hello\n");

    for args in [
        json!({"path": "real.txt"}),
        json!({"path": "real.txt", "old_text": "hello"}),
        json!({"path": "real.txt", "old_text": "hello", "new_text": "x", "edits": [{"from": "1:abc", "new_text": "x"}]}),
        json!({"path": "real.txt", "edits": [{"from": "1", "new_text": "x"}]}),
        json!({"path": "real.txt", "edits": [{"after": "1:abc", "new_text": ""}]}),
        json!({"path": "real.txt", "edits": [{"from": "1:abc", "after": "1:abc", "new_text": "x"}]}),
    ] {
        let out = f.edit(args.clone());
        assert!(
            matches!(out, Err(ToolError::InvalidArgs(_))),
            "{args}: {out:?}"
        );
    }
    assert_eq!(f.read("real.txt"), "hello\n");
}

#[test]
fn write_file_modes_create_overwrite_and_append() {
    let f = fixture();
    let out = f
        .write(json!({"path": "a.txt", "content": "one\ntwo\n"}))
        .unwrap();
    assert_eq!(out, "created a.txt (8 bytes, 2 lines)");
    let message = failed(f.write(json!({"path": "a.txt", "content": "x"})));
    assert!(message.contains("a.txt already exists"), "{message}");
    assert_eq!(f.read("a.txt"), "one\ntwo\n");

    fs::set_permissions(f.root.join("a.txt"), fs::Permissions::from_mode(0o600)).unwrap();
    let out = f
        .write(json!({"path": "a.txt", "content": "one\nTWO\nthree\n", "mode": "overwrite"}))
        .unwrap();
    assert_eq!(out, "overwrote a.txt (14 bytes; was 8 bytes; +2 -1 lines)");
    assert_eq!(f.read("a.txt"), "one\nTWO\nthree\n");
    let mode = fs::metadata(f.root.join("a.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o600);

    let out = f
        .write(json!({"path": "a.txt", "content": "four\n", "mode": "append"}))
        .unwrap();
    assert_eq!(out, "appended 5 bytes to a.txt");
    assert_eq!(f.read("a.txt"), "one\nTWO\nthree\nfour\n");

    let message = failed(f.write(json!({"path": "deep/er/b.txt", "content": "x"})));
    assert!(
        message.contains("the folder deep/er does not exist"),
        "{message}"
    );
    assert!(message.contains("create_dirs"), "{message}");
    f.write(json!({"path": "deep/er/b.txt", "content": "x", "create_dirs": true}))
        .unwrap();
    assert_eq!(f.read("deep/er/b.txt"), "x");

    // An absolute path beneath the root is fine.
    let abs = f.root.join("abs.txt");
    f.write(json!({"path": abs, "content": "y"})).unwrap();
    assert_eq!(f.read("abs.txt"), "y");

    let mut names: Vec<_> = fs::read_dir(&f.root)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["a.txt", "abs.txt", "deep"],
        "no temporary file is left"
    );
}

#[test]
fn write_file_follows_a_link_only_when_asked_and_only_inside_the_workspace() {
    let f = fixture();
    f.put("docs/target.txt", "original");
    std::os::unix::fs::symlink("docs/target.txt", f.root.join("link.txt")).unwrap();
    for mode in ["create", "overwrite", "append"] {
        let message = failed(f.write(json!({"path": "link.txt", "content": "x", "mode": mode})));
        assert!(
            message.contains("link.txt is a symbolic link (to docs/target.txt)"),
            "{mode}: {message}"
        );
        assert!(message.contains("follow_symlinks"), "{message}");
    }
    let out = f
        .write(json!({"path": "link.txt", "content": "new", "mode": "overwrite", "follow_symlinks": true}))
        .unwrap();
    assert!(
        out.starts_with("overwrote docs/target.txt (through the link link.txt)"),
        "{out}"
    );
    assert_eq!(f.read("docs/target.txt"), "new");
    assert!(
        fs::symlink_metadata(f.root.join("link.txt"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

/// A folder outside the workspace with a file in it, and links to both from inside.
fn outside_with_links(f: &Fixture) -> (TempDir, PathBuf) {
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.txt");
    fs::write(&secret, "secret\n").unwrap();
    std::os::unix::fs::symlink(&secret, f.root.join("out-file")).unwrap();
    std::os::unix::fs::symlink(outside.path(), f.root.join("out-dir")).unwrap();
    (outside, secret)
}

#[test]
fn escapes_are_refused_for_write_file_and_edit_file() {
    let f = fixture();
    let (outside, secret) = outside_with_links(&f);
    let outside_new = outside.path().join("new.txt");
    let attempts = [
        ("../escape.txt".to_owned(), "may not contain `..`"),
        ("sub/../../escape.txt".to_owned(), "may not contain `..`"),
        (
            outside_new.display().to_string(),
            "is outside the workspace",
        ),
        (secret.display().to_string(), "is outside the workspace"),
        (
            "out-dir/secret.txt".to_owned(),
            "leads outside the workspace",
        ),
        ("out-dir/new.txt".to_owned(), "leads outside the workspace"),
    ];
    for (path, why) in &attempts {
        for mode in ["create", "overwrite", "append"] {
            let message = failed(f.write(json!({"path": path, "content": "pwned", "mode": mode})));
            assert!(message.contains(why), "write {mode} {path}: {message}");
        }
        let message =
            failed(f.edit(json!({"path": path, "old_text": "secret", "new_text": "pwned"})));
        assert!(message.contains(why), "edit {path}: {message}");
    }
    // A link to a file outside: refused as a link, and followed only inside the roots.
    let message =
        failed(f.write(json!({"path": "out-file", "content": "pwned", "mode": "overwrite"})));
    assert!(message.contains("is a symbolic link"), "{message}");
    let message = failed(f.write(json!({
        "path": "out-file", "content": "pwned", "mode": "overwrite", "follow_symlinks": true,
    })));
    assert!(
        message.contains("which is outside the workspace"),
        "{message}"
    );
    let message =
        failed(f.edit(json!({"path": "out-file", "old_text": "secret", "new_text": "pwned"})));
    assert!(
        message.contains("out-file is a symbolic link (to "),
        "{message}"
    );
    // create_dirs does not create folders through a link out either.
    let message = failed(f.write(json!({
        "path": "out-dir/made/x.txt", "content": "pwned", "create_dirs": true,
    })));
    assert!(message.contains("outside the workspace"), "{message}");

    assert_eq!(fs::read_to_string(&secret).unwrap(), "secret\n");
    assert!(!outside_new.exists());
    assert!(!outside.path().join("made").exists());
    assert!(!Path::new(&f.root).join("..").join("escape.txt").exists());
}

#[test]
fn without_a_workspace_the_tools_say_which_config_line_to_add() {
    let host = TestHost::new();
    for out in [
        host.call(&write_file, json!({"path": "a.txt", "content": "x"})),
        host.call(
            &edit_file,
            json!({"path": "a.txt", "old_text": "x", "new_text": "y"}),
        ),
    ] {
        let message = failed(out);
        assert!(message.contains("no workspace configured"), "{message}");
    }
}

/// The anchor (`N:HASH`) of the line of `shown` (a tool's answer) that ends with `text`.
fn anchor_in(shown: &str, text: &str) -> String {
    shown
        .lines()
        .filter(|l| l.ends_with(text) && l.contains('|'))
        .find_map(|l| l.split('|').next())
        .unwrap_or_else(|| panic!("no line ending with {text:?} in:\n{shown}"))
        .to_owned()
}

#[test]
fn a_line_changed_inside_the_range_after_the_read_is_refused_with_the_current_lines() {
    let f = fixture();
    f.put_read("src/lib.rs", LIB_RS);
    // Someone changes line 4, inside `parse` (lines 3-6); lines 3 and 6 stay as they were.
    let changed = LIB_RS.replace("input.len()", "input.chars().count()");
    f.put("src/lib.rs", &changed);
    let message = failed(f.edit(json!({"path": "src/lib.rs", "edits": [{
        "from": anchor(LIB_RS, 3), "to": anchor(LIB_RS, 6),
        "new_text": "pub fn parse(input: &str) -> u32 {\n    0\n}",
    }]})));
    assert!(message.contains("nothing was written"), "{message}");
    assert!(
        message.contains("edit 1 (lines 3-6): a line inside the range changed since the read"),
        "{message}"
    );
    assert!(message.contains("it differs at line 4 now"), "{message}");
    let now_4 = "    let n = input.chars().count();";
    assert!(message.contains(&format_line(4, now_4)), "{message}");
    assert_eq!(f.read("src/lib.rs"), changed, "nothing was written");

    // The lines shown are on record: the edit redone from them lands.
    f.edit(json!({"path": "src/lib.rs", "edits": [{
        "from": anchor_in(&message, "pub fn parse(input: &str) -> u32 {"),
        "to": anchor_in(&message, "    n as u32"),
        "new_text": "pub fn parse(input: &str) -> u32 {\n    input.chars().count() as u32",
    }]}))
    .unwrap();
    assert!(
        f.read("src/lib.rs")
            .contains("    input.chars().count() as u32\n}\n")
    );
}

#[test]
fn a_shifted_file_is_refused_when_the_anchors_number_holds_an_identical_line() {
    let f = fixture();
    let text = "fn a() {\n    a();\n}\nfn b() {\n}\n";
    f.put_read("src/lib.rs", text);
    // The model means line 5, the `}` of b. Two lines come in at the top: line 5 is now
    // the `}` of a, with the same anchor.
    let shifted = format!("use std::fmt;\n\n{text}");
    f.put("src/lib.rs", &shifted);
    assert_eq!(anchor(&shifted, 5), anchor(text, 5));
    let message = failed(f.edit(json!({"path": "src/lib.rs", "edits": [{
        "from": anchor(text, 5), "new_text": "    b();\n}",
    }]})));
    assert!(message.contains("nothing was written"), "{message}");
    assert!(
        message.contains("edit 1 (line 5): lines were added above it since the read"),
        "{message}"
    );
    assert!(message.contains("shifted by +2 lines"), "{message}");
    assert!(
        message.contains("what was read as line 5 is line 7 now"),
        "{message}"
    );
    assert!(message.contains(&format_line(7, "}")), "{message}");
    assert_eq!(f.read("src/lib.rs"), shifted, "nothing was written");

    // The same call again, after the refusal showed line 5 as context: still refused
    // (only the moved range went on record), never landed in a.
    let again = failed(f.edit(json!({"path": "src/lib.rs", "edits": [{
        "from": anchor(text, 5), "new_text": "    b();\n}",
    }]})));
    assert!(again.contains("nothing was written"), "{again}");
    assert_eq!(f.read("src/lib.rs"), shifted, "nothing was written");

    // Redone from the anchors shown, it lands in b.
    f.edit(json!({"path": "src/lib.rs", "edits": [{
        "from": "7:".to_owned() + &line_hash("}"), "new_text": "    b();\n}",
    }]}))
    .unwrap();
    assert_eq!(
        f.read("src/lib.rs"),
        "use std::fmt;\n\nfn a() {\n    a();\n}\nfn b() {\n    b();\n}\n"
    );
}

#[test]
fn changes_only_below_or_only_above_without_a_shift_do_not_stop_an_edit() {
    let f = fixture();
    f.put_read("src/lib.rs", LIB_RS);
    // Below the range, even with lines added: the range is in the common start.
    let below = LIB_RS.replace("    7\n", "    8\n") + "\npub fn more() {}\n";
    f.put("src/lib.rs", &below);
    f.edit(json!({"path": "src/lib.rs", "edits": [{
        "from": anchor(LIB_RS, 4), "new_text": "    let n = input.trim().len();",
    }]}))
    .unwrap();
    // Above the range, with the same number of lines: the range is in the common end.
    let now = f.read("src/lib.rs");
    let above = now.replace("use std::fmt;", "use std::io;");
    f.put("src/lib.rs", &above);
    // Line 9 changed after the read and was never shown since: not on record.
    let message = failed(f.edit(json!({"path": "src/lib.rs", "edits": [{
        "from": anchor(&now, 9), "new_text": "    9",
    }]})));
    assert!(message.contains("line 9 of it was not shown"), "{message}");
    f.edit(json!({"path": "src/lib.rs", "edits": [{
        "from": anchor(&now, 8), "new_text": "pub fn other() -> u64 {",
    }]}))
    .unwrap();
    assert_eq!(
        f.read("src/lib.rs"),
        above.replace("other() -> u32", "other() -> u64"),
        "both edits landed"
    );
}

#[test]
fn an_anchored_edit_of_a_file_never_read_is_refused_with_its_current_lines() {
    let f = fixture();
    f.put("src/lib.rs", LIB_RS);
    let edit = json!({"path": "src/lib.rs", "edits": [{
        "from": anchor(LIB_RS, 9), "new_text": "    8",
    }]});
    let message = failed(f.edit(edit.clone()));
    assert!(
        message.contains("No read of src/lib.rs is on record for this profile"),
        "{message}"
    );
    assert!(message.contains("read_file with offset/limit"), "{message}");
    assert!(message.contains(&format_line(9, "    7")), "{message}");
    assert!(message.contains(&format_line(6, "}")), "{message}");
    assert_eq!(f.read("src/lib.rs"), LIB_RS, "nothing was written");
    // The lines it showed are on record: the same edit, seen to be right, lands.
    f.edit(edit).unwrap();
    assert!(f.read("src/lib.rs").contains("    8\n"));
    // Lines it did not show are not.
    let message = failed(f.edit(json!({"path": "src/lib.rs", "edits": [{
        "from": anchor(LIB_RS, 1), "new_text": "use std::io;",
    }]})));
    assert!(message.contains("line 1 of it was not shown"), "{message}");
    // Exact text needs no read.
    f.edit(json!({"path": "src/lib.rs", "old_text": "use std::fmt;", "new_text": "use std::io;"}))
        .unwrap();
}

#[test]
fn consecutive_edits_land_with_the_anchors_edit_file_returns() {
    let f = fixture();
    f.put_read("src/lib.rs", LIB_RS);
    let out = f
        .edit(json!({"path": "src/lib.rs", "edits": [{
            "from": anchor(LIB_RS, 4), "to": anchor(LIB_RS, 5),
            "new_text": "    let n = input.len();\n    let m = n * 2;\n    m as u32",
        }]}))
        .unwrap();
    let out = f
        .edit(json!({"path": "src/lib.rs", "edits": [{
            "from": anchor_in(&out, "    let m = n * 2;"), "new_text": "    let m = n * 3;",
        }]}))
        .unwrap();
    f.edit(json!({"path": "src/lib.rs", "edits": [{
        "after": anchor_in(&out, "    let m = n * 3;"), "new_text": "    let m = m + 1;",
    }]}))
    .unwrap();
    // A line the first read showed, untouched since but moved down by the edits that
    // added lines above it: its old anchor is refused (an identical line could stand at
    // its old number), the refusal shows it at its new number, and from there it lands.
    let now = f.read("src/lib.rs");
    assert_eq!(now.lines().nth(10), Some("    7"));
    let message = failed(f.edit(json!({"path": "src/lib.rs", "edits": [{
        "from": anchor(&now, 11), "new_text": "    70",
    }]})));
    assert!(
        message.contains("moved by an edit") && message.contains(&format_line(11, "    7")),
        "{message}"
    );
    f.edit(json!({"path": "src/lib.rs", "edits": [{
        "from": anchor(&now, 11), "new_text": "    70",
    }]}))
    .unwrap();
    assert_eq!(
        f.read("src/lib.rs"),
        LIB_RS
            .replace(
                "    n as u32\n",
                "    let m = n * 3;\n    let m = m + 1;\n    m as u32\n"
            )
            .replace("    7\n", "    70\n")
    );
}

#[test]
fn a_read_on_record_counts_for_another_process_with_the_same_state_folder() {
    let f = fixture();
    f.put_read("src/lib.rs", LIB_RS);
    let edit = json!({"path": "src/lib.rs", "edits": [{
        "from": anchor(LIB_RS, 9), "new_text": "    8",
    }]});
    // Another host of the same profile (another `toolhost call`): the same state folder.
    let other =
        TestHost::new().workspace(WorkspaceAnswer::with_roots([f.root.display().to_string()]));
    let message = failed(other.call(&edit_file, edit.clone()));
    assert!(message.contains("No read of"), "{message}");
    // The refusal put the lines it showed on record in the other's folder: cleared, so
    // only the record copied from the first host can let the edit land.
    let theirs = other.state_dir().join("workspace-reads");
    for entry in fs::read_dir(&theirs).unwrap() {
        fs::remove_file(entry.unwrap().path()).unwrap();
    }
    let records = f.host.state_dir().join("workspace-reads");
    for entry in fs::read_dir(&records).unwrap() {
        let entry = entry.unwrap();
        fs::copy(
            entry.path(),
            other
                .state_dir()
                .join("workspace-reads")
                .join(entry.file_name()),
        )
        .unwrap();
    }
    f.put("src/lib.rs", LIB_RS);
    other.call(&edit_file, edit).unwrap();
    assert!(f.read("src/lib.rs").contains("    8\n"));
}

#[test]
fn writes_put_what_they_wrote_on_record() {
    let f = fixture();
    f.write(json!({"path": "a.txt", "content": "one\ntwo\n"}))
        .unwrap();
    f.edit(json!({"path": "a.txt", "edits": [{"from": anchor("one\n", 1), "new_text": "ONE"}]}))
        .unwrap();
    f.write(json!({"path": "a.txt", "content": "three\n", "mode": "append"}))
        .unwrap();
    f.edit(
        json!({"path": "a.txt", "edits": [{"from": anchor("\n\nthree\n", 3), "new_text": "3"}]}),
    )
    .unwrap();
    assert_eq!(f.read("a.txt"), "ONE\ntwo\n3\n");
    f.write(json!({"path": "a.txt", "content": "x\ny\n", "mode": "overwrite"}))
        .unwrap();
    f.edit(json!({"path": "a.txt", "edits": [{"from": anchor("x\ny\n", 2), "new_text": "Y"}]}))
        .unwrap();
    assert_eq!(f.read("a.txt"), "x\nY\n");
}

/// A file outside the workspace and a hard link to it inside.
fn outside_with_a_hard_link(f: &Fixture) -> (TempDir, PathBuf, PathBuf) {
    let outside = tempfile::tempdir_in(f.root.parent().unwrap()).unwrap();
    let secret = outside.path().join("secret.txt");
    fs::write(&secret, "secret\n").unwrap();
    let inside = f.root.join("linked.txt");
    fs::hard_link(&secret, &inside).unwrap();
    (outside, secret, inside)
}

#[test]
fn append_never_writes_through_a_hard_link() {
    let f = fixture();
    let (_outside, secret, inside) = outside_with_a_hard_link(&f);
    let message =
        failed(f.write(json!({"path": "linked.txt", "content": "pwned\n", "mode": "append"})));
    assert!(message.contains("nothing was written"), "{message}");
    assert!(message.contains("linked.txt has 2 hard links"), "{message}");
    assert!(message.contains("mode \"overwrite\""), "{message}");
    assert_eq!(fs::read_to_string(&secret).unwrap(), "secret\n");
    assert_eq!(fs::read_to_string(&inside).unwrap(), "secret\n");
    // Reading is allowed, and says so.
    let shown = f.show("linked.txt");
    assert!(shown.contains(&format_line(1, "secret")), "{shown}");
    assert!(shown.contains("this file has 2 hard links"), "{shown}");
}

#[test]
fn overwrite_and_edit_replace_the_name_inside_and_leave_the_other_link_alone() {
    let f = fixture();
    let (_outside, secret, inside) = outside_with_a_hard_link(&f);
    let out = f
        .write(json!({"path": "linked.txt", "content": "mine\n", "mode": "overwrite"}))
        .unwrap();
    assert!(out.contains("it had 2 hard links"), "{out}");
    assert_eq!(fs::read_to_string(&inside).unwrap(), "mine\n");
    assert_eq!(fs::read_to_string(&secret).unwrap(), "secret\n");
    use std::os::unix::fs::MetadataExt as _;
    assert_eq!(fs::metadata(&inside).unwrap().nlink(), 1);
    assert_eq!(fs::metadata(&secret).unwrap().nlink(), 1);

    fs::remove_file(&inside).unwrap();
    fs::hard_link(&secret, &inside).unwrap();
    f.show("linked.txt");
    let out = f
        .edit(json!({"path": "linked.txt", "edits": [{
            "from": anchor("secret\n", 1), "new_text": "edited",
        }]}))
        .unwrap();
    assert!(out.contains("had 2 hard links"), "{out}");
    assert_eq!(fs::read_to_string(&inside).unwrap(), "edited\n");
    assert_eq!(fs::read_to_string(&secret).unwrap(), "secret\n");
}
