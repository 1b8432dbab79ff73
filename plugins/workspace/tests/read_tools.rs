//! The read-side workspace tools (`read_file`, `batch_read`, `list_dir`, `find_files`,
//! `grep`) called through the test host as a host calls them, on real temporary folders:
//! their happy paths, their limits and every way out of the workspace they must refuse.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use toolhost_plugin_api::testing::TestHost;
use toolhost_plugin_api::{Risk, ToolError, WorkspaceAnswer};
use toolhost_workspace::{batch_read, find_files, grep, list_dir, read_file};

fn host(root: &Path) -> TestHost {
    TestHost::new().workspace(WorkspaceAnswer::with_roots([root.display().to_string()]))
}

fn ok(result: Result<String, ToolError>) -> String {
    match result {
        Ok(text) => text,
        Err(e) => panic!("the call failed: {e}"),
    }
}

fn failed(result: Result<String, ToolError>) -> String {
    match result {
        Ok(text) => panic!("the call succeeded: {text}"),
        Err(ToolError::Failed(m)) => m,
        Err(e) => panic!("not a failure but {e:?}"),
    }
}

fn invalid(result: Result<String, ToolError>) -> String {
    match result {
        Err(ToolError::InvalidArgs(m)) => m,
        other => panic!("not an argument error: {other:?}"),
    }
}

fn write(root: &Path, rel: &str, content: impl AsRef<[u8]>) {
    let path = root.join(rel);
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).unwrap();
    }
    fs::write(path, content).unwrap();
}

/// A temporary workspace and a temporary folder outside it with a secret in it.
fn workspace_and_outside() -> (tempfile::TempDir, tempfile::TempDir) {
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "secret.txt", "SECRET-OUTSIDE\n");
    (root, outside)
}

// ---- read_file ---------------------------------------------------------------------

#[test]
fn tools_are_read_tools_with_schemas_that_name_their_limits() {
    let host = TestHost::new();
    for info in [
        host.describe(&read_file),
        host.describe(&batch_read),
        host.describe(&list_dir),
        host.describe(&find_files),
        host.describe(&grep),
    ] {
        assert_eq!(info.risk, Risk::Read, "{}", info.name);
        assert!(info.description.len() > 200, "{}", info.name);
    }
    let batch = host.describe(&batch_read);
    assert_eq!(batch.schema["properties"]["paths"]["maxItems"], json!(20));
    assert!(host.describe(&grep).output_schema.is_some());
}

#[test]
fn read_file_frames_numbered_anchored_lines() {
    let (root, _outside) = workspace_and_outside();
    write(
        root.path(),
        "src/a.rs",
        "fn main() {\r\n    println!(\"hi\");\n}\n",
    );
    let text = ok(host(root.path()).call(&read_file, json!({"path": "src/a.rs"})));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "<context path=\"src/a.rs\" lines=\"1-3 of 3\">");
    assert_eq!(lines[4], "</context>");
    assert_eq!(lines.len(), 5, "{text}");
    for (i, (line, expected)) in lines[1..4]
        .iter()
        .zip(["fn main() {", "    println!(\"hi\");", "}"])
        .enumerate()
    {
        let (number, rest) = line.split_once(':').unwrap();
        let (hash, content) = rest.split_once('|').unwrap();
        assert_eq!(number, (i + 1).to_string());
        assert_eq!(hash.len(), 3);
        assert!(hash.bytes().all(|b| b.is_ascii_hexdigit()), "{line}");
        assert_eq!(content, expected);
    }
    // The same content gives the same anchor; an absolute path beneath the root works too.
    let abs = fs::canonicalize(root.path()).unwrap().join("src/a.rs");
    let again = ok(host(root.path()).call(&read_file, json!({"path": abs})));
    assert_eq!(again, text);
}

#[test]
fn read_file_reads_ranges_and_says_how_to_read_on() {
    let (root, _outside) = workspace_and_outside();
    let content: String = (1..=50).map(|i| format!("line {i}\n")).collect();
    write(root.path(), "long.txt", &content);
    let host = host(root.path());
    let text = ok(host.call(
        &read_file,
        json!({"path": "long.txt", "offset": 10, "limit": 5}),
    ));
    assert!(
        text.starts_with("<context path=\"long.txt\" lines=\"10-14 of 50\">\n10:"),
        "{text}"
    );
    assert!(text.contains("|line 14\n</context>\n"), "{text}");
    assert!(!text.contains("|line 15"), "{text}");
    assert!(
        text.ends_with("(lines 15-50 of 50 not shown; read on with offset 15)\n"),
        "{text}"
    );
    let tail = ok(host.call(&read_file, json!({"path": "long.txt", "offset": 45})));
    assert!(tail.contains("lines=\"45-50 of 50\""), "{tail}");
    assert!(tail.ends_with("</context>\n"), "nothing left out: {tail}");
    let past = failed(host.call(&read_file, json!({"path": "long.txt", "offset": 51})));
    assert!(
        past.contains("has 50 lines; offset 51 is past its end"),
        "{past}"
    );
    let bad = invalid(host.call(&read_file, json!({"path": "long.txt", "limit": 100000})));
    assert_eq!(bad, "/limit: 100000 is greater than the maximum of 20000");
    write(root.path(), "empty.txt", "");
    let empty = ok(host.call(&read_file, json!({"path": "empty.txt"})));
    assert!(
        empty.contains("lines=\"0 of 0\"") && empty.contains("empty"),
        "{empty}"
    );
}

#[test]
fn read_file_cuts_long_lines_but_anchors_the_whole_line() {
    let (root, _outside) = workspace_and_outside();
    write(root.path(), "min.js", "x".repeat(5000));
    let text = ok(host(root.path()).call(&read_file, json!({"path": "min.js"})));
    assert!(text.contains("… [+3000 characters]"), "{}", &text[..200]);
    assert!(text.len() < 2200, "the line was cut: {} bytes", text.len());
}

#[test]
fn read_file_reads_only_the_asked_lines_of_a_file_over_the_size_limit() {
    let (root, _outside) = workspace_and_outside();
    let line = format!("{}\n", "y".repeat(1023));
    let big: String = line.repeat(11 * 1024); // 11 MiB
    write(root.path(), "big.log", &big);
    let text = ok(host(root.path()).call(&read_file, json!({"path": "big.log", "limit": 3})));
    assert!(
        text.starts_with("<context path=\"big.log\" lines=\"1-3\">"),
        "{}",
        &text[..80]
    );
    assert!(text.contains("over read_file's 10.0 MiB limit"), "{text}");
    assert!(text.contains("read on with offset 4"), "{text}");
}

#[test]
fn read_file_describes_binary_files() {
    let (root, _outside) = workspace_and_outside();
    let mut png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR".to_vec();
    png.resize(3072, 0);
    write(root.path(), "logo.png", &png);
    write(
        root.path(),
        "prog",
        b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00rest",
    );
    write(root.path(), "data.bin", b"abc\x00def");
    let host = host(root.path());
    let text = ok(host.call(&read_file, json!({"path": "logo.png"})));
    assert!(text.contains("kind=\"binary\""), "{text}");
    assert!(
        text.contains("PNG image, 3.0 KiB: binary data, not shown"),
        "{text}"
    );
    assert!(!text.contains("IHDR"), "{text}");
    let elf = ok(host.call(&read_file, json!({"path": "prog"})));
    assert!(elf.contains("ELF executable or library, 16 bytes"), "{elf}");
    let data = ok(host.call(&read_file, json!({"path": "data.bin"})));
    assert!(data.contains("binary file, 7 bytes"), "{data}");
    // Latin-1 text is mostly text: shown, with a note.
    write(
        root.path(),
        "latin1.txt",
        b"caf\xe9 cr\xe8me br\xfbl\xe9e\n",
    );
    let latin = ok(host.call(&read_file, json!({"path": "latin1.txt"})));
    assert!(latin.contains("|caf\u{FFFD} cr\u{FFFD}me"), "{latin}");
    assert!(latin.contains("not valid UTF-8"), "{latin}");
}

#[test]
fn read_file_refuses_directories_and_missing_files_clearly() {
    let (root, _outside) = workspace_and_outside();
    fs::create_dir(root.path().join("src")).unwrap();
    let host = host(root.path());
    let dir = failed(host.call(&read_file, json!({"path": "src"})));
    assert!(
        dir.contains("src is a directory") && dir.contains("list_dir"),
        "{dir}"
    );
    let missing = failed(host.call(&read_file, json!({"path": "nope.txt"})));
    assert_eq!(missing, "nope.txt does not exist");
}

#[test]
fn read_file_refuses_every_way_out() {
    let (root, outside) = workspace_and_outside();
    let host = host(root.path());
    let secret = outside.path().join("secret.txt");
    std::os::unix::fs::symlink(&secret, root.path().join("link.txt")).unwrap();
    std::os::unix::fs::symlink(outside.path(), root.path().join("outdir")).unwrap();
    std::os::unix::fs::symlink("../../", root.path().join("up")).unwrap();
    let dotdot = failed(host.call(&read_file, json!({"path": "../secret.txt"})));
    assert!(dotdot.contains("may not contain `..`"), "{dotdot}");
    let absolute = failed(host.call(&read_file, json!({"path": secret})));
    assert!(absolute.contains("is outside the workspace"), "{absolute}");
    for path in ["link.txt", "outdir/secret.txt", "up/etc/passwd"] {
        let out = failed(host.call(&read_file, json!({"path": path})));
        assert!(out.contains("leads outside the workspace"), "{path}: {out}");
        assert!(!out.contains("SECRET"), "{out}");
    }
}

#[test]
fn read_file_never_reads_outside_through_a_link_swapped_in_while_it_runs() {
    let (root, outside) = workspace_and_outside();
    let dir = root.path().to_path_buf();
    let secret = outside.path().join("secret.txt");
    write(&dir, "target.txt", "inside\n");
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let stop = Arc::clone(&stop);
        let dir = dir.clone();
        std::thread::spawn(move || {
            let mut flips = 0u32;
            while !stop.load(Ordering::Relaxed) && flips < 2_000_000 {
                // Swap atomically (rename over) between a file and a link to the secret.
                if flips.is_multiple_of(2) {
                    let _ = fs::remove_file(dir.join("tmp-link"));
                    std::os::unix::fs::symlink(&secret, dir.join("tmp-link")).unwrap();
                    fs::rename(dir.join("tmp-link"), dir.join("target.txt")).unwrap();
                } else {
                    fs::write(dir.join("tmp-file"), "inside\n").unwrap();
                    fs::rename(dir.join("tmp-file"), dir.join("target.txt")).unwrap();
                }
                flips += 1;
            }
            flips
        })
    };
    let host = host(&dir);
    let (mut read, mut refused) = (0, 0);
    // At least 400 reads, and on until both states were seen (a loaded machine may leave
    // the flipper asleep in one state for many reads), within a bound.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let mut calls = 0;
    while calls < 400 || (read == 0 || refused == 0) && std::time::Instant::now() < deadline {
        calls += 1;
        if calls % 50 == 0 {
            std::thread::yield_now();
        }
        match host.call(&read_file, json!({"path": "target.txt"})) {
            Ok(text) => {
                assert!(!text.contains("SECRET"), "read outside: {text}");
                assert!(text.contains("|inside"), "{text}");
                read += 1;
            }
            Err(e) => {
                let e = e.to_string();
                assert!(!e.contains("SECRET"), "{e}");
                assert!(e.contains("leads outside the workspace"), "{e}");
                refused += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    assert!(flips > 10, "the file was swapped ({flips} times)");
    assert!(
        read > 0 && refused > 0,
        "both states seen: {read} read, {refused} refused in {calls} calls"
    );
}

#[test]
fn no_workspace_configured_names_the_config_line() {
    let out = failed(TestHost::new().call(&read_file, json!({"path": "a"})));
    assert!(
        out.contains("no workspace configured") && out.contains("roots = ["),
        "{out}"
    );
}

// ---- batch_read --------------------------------------------------------------------

#[test]
fn batch_read_reads_each_file_and_reports_errors_in_place() {
    let (root, outside) = workspace_and_outside();
    write(root.path(), "a.txt", "alpha\n");
    write(root.path(), "b.txt", "beta\n");
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), root.path().join("out")).unwrap();
    let text = ok(host(root.path()).call(
        &batch_read,
        json!({"paths": ["a.txt", "missing.txt", "out", "b.txt"]}),
    ));
    let a = text
        .find("<context path=\"a.txt\" lines=\"1-1 of 1\">")
        .unwrap();
    let missing = text
        .find("<error path=\"missing.txt\">missing.txt does not exist</error>")
        .unwrap();
    let out = text
        .find("<error path=\"out\">out leads outside the workspace")
        .unwrap();
    let b = text
        .find("<context path=\"b.txt\" lines=\"1-1 of 1\">")
        .unwrap();
    assert!(a < missing && missing < out && out < b, "in order: {text}");
    assert!(
        text.contains("|alpha\n") && text.contains("|beta\n"),
        "{text}"
    );
    assert!(!text.contains("SECRET"), "{text}");
}

#[test]
fn batch_read_takes_at_most_twenty_paths() {
    let (root, _outside) = workspace_and_outside();
    let paths: Vec<String> = (0..21).map(|i| format!("f{i}")).collect();
    let e = invalid(host(root.path()).call(&batch_read, json!({ "paths": paths })));
    // The schema refuses it before the tool runs, as the host does.
    assert!(e.ends_with("has more than 20 items"), "{e}");
    let e = invalid(host(root.path()).call(&batch_read, json!({ "paths": [] })));
    assert_eq!(e, "/paths: [] has less than 1 item");
}

// ---- list_dir ----------------------------------------------------------------------

/// A project with ignored, hidden, nested and linked entries (no git repository).
fn project(root: &Path, outside: &Path) {
    write(root, ".gitignore", "target/\n*.log\n");
    write(root, "Cargo.toml", "[package]\n");
    write(root, "src/lib.rs", "pub fn hello() {}\n// TODO: more\n");
    write(root, "src/deep/mod.rs", "fn Hello() {}\n");
    write(root, "target/debug/out.rs", "fn hello() {}\n");
    write(root, "build.log", "hello from the log\n");
    write(root, ".hidden/notes.md", "hello hidden\n");
    write(root, ".env", "HELLO=1\n");
    std::os::unix::fs::symlink(outside, root.join("outlink")).unwrap();
}

#[test]
fn list_dir_honours_gitignore_hidden_and_depth_and_never_follows_links() {
    let (root, outside) = workspace_and_outside();
    project(root.path(), outside.path());
    let host = host(root.path());
    let text = ok(host.call(&list_dir, json!({})));
    let entries: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(
        entries,
        [
            "Cargo.toml  (10 bytes)",
            &format!(
                "outlink -> {}  (symbolic link, not followed)",
                outside.path().display()
            ),
            "src/",
        ],
        "{text}"
    );
    assert!(
        text.starts_with("./ (depth 1): 3 entries (1 folders, 1 files, 1 symbolic links)"),
        "{text}"
    );
    let deep = ok(host.call(&list_dir, json!({"depth": 3, "hidden": true})));
    for shown in [
        ".env  (8 bytes)",
        ".gitignore",
        ".hidden/",
        ".hidden/notes.md",
        "src/deep/",
        "src/deep/mod.rs",
        "src/lib.rs",
    ] {
        assert!(
            deep.lines().any(|l| l.starts_with(shown)),
            "{shown} in {deep}"
        );
    }
    for hidden in ["target", "build.log", "secret", ".git/"] {
        assert!(!deep.contains(hidden), "{hidden} in {deep}");
    }
    let sub = ok(host.call(&list_dir, json!({"path": "src", "depth": 1})));
    assert!(sub.starts_with("src/ (depth 1): 2 entries"), "{sub}");
    assert!(
        sub.contains("\nsrc/deep/\nsrc/lib.rs  (32 bytes)\n"),
        "{sub}"
    );
    let out = failed(host.call(&list_dir, json!({"path": "outlink"})));
    assert!(out.contains("leads outside the workspace"), "{out}");
    let file = failed(host.call(&list_dir, json!({"path": "Cargo.toml"})));
    assert!(
        file.contains("is a file") && file.contains("read_file"),
        "{file}"
    );
    let e = invalid(host.call(&list_dir, json!({"depth": 11})));
    assert_eq!(e, "/depth: 11 is greater than the maximum of 10");
    let e = failed(host.call(&list_dir, json!({"path": "../"})));
    assert!(e.contains("`..`"), "{e}");
}

#[test]
fn list_dir_shows_at_most_a_thousand_entries_and_counts_the_rest() {
    let (root, _outside) = workspace_and_outside();
    for i in 0..1010 {
        write(root.path(), &format!("f{i:04}.txt"), "x");
    }
    let text = ok(host(root.path()).call(&list_dir, json!({})));
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].contains("1010 entries"), "{}", lines[0]);
    assert_eq!(lines[1], "f0000.txt  (1 bytes)");
    assert_eq!(
        lines[1000], "f0999.txt  (1 bytes)",
        "the first thousand in order"
    );
    assert!(
        lines[1001].starts_with("(10 more entries left out"),
        "{}",
        lines[1001]
    );
}

// ---- find_files --------------------------------------------------------------------

fn set_mtime(path: &Path, seconds_ago: u64) {
    let file = fs::File::options().write(true).open(path).unwrap();
    file.set_modified(SystemTime::now() - Duration::from_secs(seconds_ago))
        .unwrap();
}

#[test]
fn find_files_matches_globs_newest_first_and_honours_gitignore_and_hidden() {
    let (root, outside) = workspace_and_outside();
    project(root.path(), outside.path());
    write(outside.path(), "x.rs", "");
    set_mtime(&root.path().join("src/lib.rs"), 300);
    set_mtime(&root.path().join("src/deep/mod.rs"), 10);
    let host = host(root.path());
    let text = ok(host.call(&find_files, json!({"patterns": ["**/*.rs"]})));
    assert_eq!(
        text,
        "2 files beneath . match **/*.rs (newest first):\nsrc/deep/mod.rs\nsrc/lib.rs\n"
    );
    set_mtime(&root.path().join("src/lib.rs"), 1);
    let text = ok(host.call(&find_files, json!({"patterns": ["*.rs"]})));
    assert!(
        text.ends_with("src/lib.rs\nsrc/deep/mod.rs\n"),
        "newest first: {text}"
    );
    let hidden = ok(host.call(
        &find_files,
        json!({"patterns": ["*.md", "*.env", ".env"], "hidden": true}),
    ));
    assert!(
        hidden.contains(".hidden/notes.md") && hidden.contains("\n.env\n"),
        "{hidden}"
    );
    let not_hidden = ok(host.call(&find_files, json!({"patterns": ["*.md", ".env"]})));
    assert!(not_hidden.starts_with("0 files"), "{not_hidden}");
    let logs = ok(host.call(&find_files, json!({"patterns": ["*.log", "target/**"]})));
    assert!(
        logs.starts_with("0 files"),
        "ignored files are not found: {logs}"
    );
    let beneath = ok(host.call(&find_files, json!({"patterns": ["*"], "path": "src/deep"})));
    assert_eq!(
        beneath,
        "1 files beneath src/deep match * (newest first):\nsrc/deep/mod.rs\n"
    );
    let excluded = ok(host.call(&find_files, json!({"patterns": ["**/*.rs", "!mod.rs"]})));
    assert!(
        excluded.starts_with("1 files") && excluded.contains("src/lib.rs"),
        "{excluded}"
    );
    let e = invalid(host.call(&find_files, json!({"patterns": ["a[b"]})));
    assert!(e.contains("'a[b' is not a glob pattern"), "{e}");
    let e = failed(host.call(&find_files, json!({"patterns": ["*"], "path": "outlink"})));
    assert!(e.contains("leads outside the workspace"), "{e}");
}

#[test]
fn find_files_caps_its_list_and_counts_what_it_left_out() {
    let (root, _outside) = workspace_and_outside();
    for i in 0..30 {
        let rel = format!("d{}/f{i}.txt", i % 3);
        write(root.path(), &rel, "x");
        set_mtime(&root.path().join(&rel), 1000 - i);
    }
    let text = ok(host(root.path()).call(&find_files, json!({"patterns": ["*.txt"], "limit": 5})));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "30 files beneath . match *.txt (newest first):");
    assert_eq!(
        lines[1..6],
        [
            "d2/f29.txt",
            "d1/f28.txt",
            "d0/f27.txt",
            "d2/f26.txt",
            "d1/f25.txt"
        ]
    );
    assert!(
        lines[6].starts_with("(25 more matching files left out"),
        "{text}"
    );
    let e = invalid(host(root.path()).call(&find_files, json!({"patterns": ["*"], "limit": 1001})));
    assert_eq!(e, "/limit: 1001 is greater than the maximum of 1000");
}

// ---- grep --------------------------------------------------------------------------

fn grep_text(host: &TestHost, args: Value) -> String {
    ok(host.call(&grep, args))
}

#[test]
fn grep_finds_regex_and_literal_matches_sorted_by_path_like_ripgrep() {
    let (root, outside) = workspace_and_outside();
    project(root.path(), outside.path());
    write(root.path(), "a.txt", "a(b)c\nabc\n");
    let host = host(root.path());
    let text = grep_text(&host, json!({"pattern": "fn \\w+\\("}));
    assert_eq!(
        text,
        "src/deep/mod.rs:1:fn Hello() {}\nsrc/lib.rs:1:pub fn hello() {}\n\
         2 matching lines in 2 files (4 files searched).\n"
    );
    let literal = grep_text(&host, json!({"pattern": "a(b)c", "literal": true}));
    assert!(
        literal.starts_with("a.txt:1:a(b)c\n1 matching lines"),
        "{literal}"
    );
    let regex = grep_text(&host, json!({"pattern": "a(b)c"}));
    assert!(
        regex.starts_with("a.txt:2:abc\n1 matching lines"),
        "{regex}"
    );
    let e = invalid(host.call(&grep, json!({"pattern": "fn ("})));
    assert!(
        e.contains("not a valid regular expression") && e.contains("literal: true"),
        "{e}"
    );
    let none = grep_text(&host, json!({"pattern": "zebra"}));
    assert_eq!(none, "No matches in 4 files searched.\n");
}

#[test]
fn grep_case_options() {
    let (root, outside) = workspace_and_outside();
    project(root.path(), outside.path());
    let host = host(root.path());
    let count = |args: Value| -> u64 {
        let out = host.call_output(&grep, args).unwrap();
        out.structured.unwrap()["total_matches"].as_u64().unwrap()
    };
    assert_eq!(count(json!({"pattern": "hello"})), 1);
    assert_eq!(
        count(json!({"pattern": "hello", "case_insensitive": true})),
        2
    );
    assert_eq!(count(json!({"pattern": "hello", "smart_case": true})), 2);
    assert_eq!(count(json!({"pattern": "Hello", "smart_case": true})), 1);
}

#[test]
fn grep_honours_gitignore_hidden_globs_and_types_and_never_reads_through_links_out() {
    let (root, outside) = workspace_and_outside();
    project(root.path(), outside.path());
    write(outside.path(), "leak.rs", "fn hello() {} SECRET\n");
    write(root.path(), "notes.md", "hello markdown\n");
    let host = host(root.path());
    let files = |args: Value| -> Vec<String> {
        let out = host.call_output(&grep, args).unwrap();
        assert!(!out.text.contains("SECRET"), "{}", out.text);
        out.structured.unwrap()["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["path"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        files(json!({"pattern": "(?i)hello"})),
        ["notes.md", "src/deep/mod.rs", "src/lib.rs"]
    );
    assert_eq!(
        files(json!({"pattern": "(?i)hello", "hidden": true})),
        [
            ".env",
            ".hidden/notes.md",
            "notes.md",
            "src/deep/mod.rs",
            "src/lib.rs"
        ]
    );
    assert_eq!(
        files(json!({"pattern": "(?i)hello", "type": "rust"})),
        ["src/deep/mod.rs", "src/lib.rs"]
    );
    assert_eq!(
        files(json!({"pattern": "(?i)hello", "type": "md,rust", "glob": ["!lib.rs"]})),
        ["notes.md", "src/deep/mod.rs"]
    );
    assert_eq!(
        files(json!({"pattern": "(?i)hello", "glob": ["src/*.rs"]})),
        ["src/lib.rs"]
    );
    assert_eq!(
        files(json!({"pattern": "hello", "path": "src/lib.rs"})),
        ["src/lib.rs"]
    );
    let e = invalid(host.call(&grep, json!({"pattern": "x", "type": "klingon"})));
    assert!(e.contains("'klingon' is not a file type"), "{e}");
    let e = failed(host.call(&grep, json!({"pattern": "x", "path": "outlink"})));
    assert!(e.contains("leads outside the workspace"), "{e}");
}

#[test]
fn grep_shows_context_lines_with_group_separators() {
    let (root, _outside) = workspace_and_outside();
    let content: String = (1..=20)
        .map(|i| {
            if i == 5 || i == 6 || i == 15 {
                format!("match {i}\n")
            } else {
                format!("other {i}\n")
            }
        })
        .collect();
    write(root.path(), "f.txt", &content);
    write(root.path(), "g.txt", "match g\n");
    let host = host(root.path());
    let text = grep_text(&host, json!({"pattern": "match", "context": 1}));
    assert_eq!(
        text,
        "f.txt-4-other 4\nf.txt:5:match 5\nf.txt:6:match 6\nf.txt-7-other 7\n--\n\
         f.txt-14-other 14\nf.txt:15:match 15\nf.txt-16-other 16\n--\ng.txt:1:match g\n\
         4 matching lines in 2 files (2 files searched).\n"
    );
    let before = grep_text(
        &host,
        json!({"pattern": "match 15", "before_context": 2, "after_context": 0}),
    );
    assert!(
        before.starts_with("f.txt-13-other 13\nf.txt-14-other 14\nf.txt:15:match 15\n1 matching"),
        "{before}"
    );
}

#[test]
fn grep_caps_matches_in_path_order_and_counts_the_rest() {
    let (root, _outside) = workspace_and_outside();
    for f in 0..40 {
        let body: String = (0..10).map(|i| format!("needle {f} {i}\n")).collect();
        write(root.path(), &format!("d{}/f{f:02}.txt", f % 4), body);
    }
    let host = host(root.path());
    let first = grep_text(&host, json!({"pattern": "needle", "max_matches": 25}));
    let lines: Vec<&str> = first.lines().collect();
    assert_eq!(lines.len(), 27, "{first}");
    assert_eq!(lines[0], "d0/f00.txt:1:needle 0 0");
    assert_eq!(
        lines[24], "d0/f08.txt:5:needle 8 4",
        "the first 25 in path order"
    );
    assert_eq!(
        lines[25],
        "400 matching lines in 40 files (40 files searched)."
    );
    assert!(
        lines[26].starts_with("375 more matching lines (37 more files) left out"),
        "{}",
        lines[26]
    );
    assert!(
        lines[26].contains("raise max_matches (up to about"),
        "{}",
        lines[26]
    );
    // Deterministic whatever the threads did.
    for _ in 0..3 {
        assert_eq!(
            grep_text(&host, json!({"pattern": "needle", "max_matches": 25})),
            first
        );
    }
    let default = host
        .call_output(&grep, json!({"pattern": "needle"}))
        .unwrap();
    let s = default.structured.unwrap();
    assert_eq!(
        (s["total_matches"].clone(), s["matches_left_out"].clone()),
        (json!(400), json!(200))
    );
}

#[test]
fn grep_skips_binary_files_and_cuts_long_lines() {
    let (root, _outside) = workspace_and_outside();
    write(root.path(), "blob.bin", b"needle\x00\x01\x02");
    write(
        root.path(),
        "long.txt",
        format!("needle{}\n", "z".repeat(600)),
    );
    let text = grep_text(&host(root.path()), json!({"pattern": "needle"}));
    assert_eq!(
        text,
        format!(
            "long.txt:1:needle{}… [+106 characters]\n1 matching lines in 1 files (2 files \
             searched, 1 binary files skipped).\n",
            "z".repeat(494)
        )
    );
}

#[test]
fn a_cancelled_grep_stops() {
    let (root, _outside) = workspace_and_outside();
    for f in 0..3000 {
        write(
            root.path(),
            &format!("d{}/f{f}.txt", f % 30),
            "needle\n".repeat(50),
        );
    }
    let host = host(root.path());
    host.cancel_after(Duration::ZERO);
    let out = host.call(&grep, json!({"pattern": "needle"}));
    assert!(
        matches!(&out, Err(e) if e.to_string().contains("cancelled")),
        "{out:?}"
    );
}

#[test]
fn grep_never_reads_outside_through_a_file_swapped_for_a_link_while_it_runs() {
    let (root, outside) = workspace_and_outside();
    let dir = root.path().to_path_buf();
    let secret = outside.path().join("secret.txt");
    for i in 0..20 {
        write(&dir, &format!("f{i}.txt"), "inside\n");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let stop = Arc::clone(&stop);
        let dir = dir.clone();
        std::thread::spawn(move || {
            let mut flips = 0u32;
            while !stop.load(Ordering::Relaxed) && flips < 2_000_000 {
                let name = format!("f{}.txt", flips % 20);
                if (flips / 20).is_multiple_of(2) {
                    let _ = fs::remove_file(dir.join("tmp-link"));
                    std::os::unix::fs::symlink(&secret, dir.join("tmp-link")).unwrap();
                    fs::rename(dir.join("tmp-link"), dir.join(&name)).unwrap();
                } else {
                    fs::write(dir.join("tmp-file"), "inside\n").unwrap();
                    fs::rename(dir.join("tmp-file"), dir.join(&name)).unwrap();
                }
                flips += 1;
            }
        })
    };
    let host = host(&dir);
    let mut seen_inside = 0;
    for _ in 0..150 {
        let out = host
            .call_output(&grep, json!({"pattern": "SECRET|inside", "hidden": true}))
            .unwrap();
        assert!(!out.text.contains("SECRET"), "read outside: {}", out.text);
        seen_inside += out.structured.unwrap()["total_matches"].as_u64().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    flipper.join().unwrap();
    assert!(seen_inside > 0, "the files inside were searched");
}

#[test]
fn grep_stops_at_the_output_budget_whole_in_text_and_value_and_hints_no_more_than_fits() {
    let (root, _outside) = workspace_and_outside();
    for f in 0..40 {
        let body: String = (0..50)
            .map(|i| format!("needle {f} {i} {}\n", "x".repeat(60)))
            .collect();
        write(root.path(), &format!("d{}/f{f:02}.txt", f % 4), body);
    }
    let budget = toolhost_plugin_api::OutputBudget {
        max_chars: 6_000,
        max_lines: 1_000,
    };
    let host = host(root.path()).output_budget(budget);
    let out = host
        .call_output(&grep, json!({"pattern": "needle", "max_matches": 2000}))
        .unwrap();
    assert!(budget.fits(&out.text), "{} chars", out.text.chars().count());
    let value = out.structured.expect("value");
    assert!(value.to_string().chars().count() <= 6_000);
    let shown = value["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["lines"].as_array().unwrap().len())
        .sum::<usize>();
    assert!(shown > 10, "{shown}");
    assert_eq!(value["matches_left_out"], json!(2000 - shown));
    let last = out.text.lines().last().unwrap();
    assert!(
        last.contains("fits in this result's output budget"),
        "{last}"
    );
    assert!(!out.text.contains("raise max_matches"), "{last}");
    // Every line shown is whole.
    for line in out.text.lines().filter(|l| l.contains(":needle ")) {
        assert!(line.ends_with(&"x".repeat(60)), "{line}");
    }
}

#[test]
fn read_file_pages_within_the_budget_and_batch_read_shares_it() {
    let (root, _outside) = workspace_and_outside();
    let body: String = (1..=5000)
        .map(|i| format!("line {i} {}\n", "y".repeat(i % 90)))
        .collect();
    write(root.path(), "big.txt", body);
    write(root.path(), "small.txt", "one\ntwo\n");
    let budget = toolhost_plugin_api::OutputBudget {
        max_chars: 30_000,
        max_lines: 1_000,
    };
    let paged = host(root.path()).output_budget(budget);
    let mut offset = 1usize;
    let mut seen = Vec::new();
    for _ in 0..100 {
        let page = ok(paged.call(&read_file, json!({"path": "big.txt", "offset": offset})));
        assert!(budget.fits(&page), "page at {offset} is over the budget");
        for line in page
            .lines()
            .filter(|l| !l.starts_with('<') && !l.starts_with('('))
        {
            let (anchor, text) = line.split_once('|').expect("an anchored line");
            let number: usize = anchor.split(':').next().unwrap().parse().unwrap();
            assert_eq!(number, seen.len() + 1, "{line}");
            assert_eq!(text, format!("line {number} {}", "y".repeat(number % 90)));
            seen.push(number);
        }
        match page
            .lines()
            .last()
            .and_then(|l| l.rsplit_once("read on with offset "))
        {
            Some((_, next)) => offset = next.trim_end_matches(')').parse().unwrap(),
            None => break,
        }
        assert_eq!(
            offset,
            seen.len() + 1,
            "read on from the line after the last shown"
        );
    }
    assert_eq!(seen.len(), 5000, "every line, once, in order");
    let both = ok(paged.call(&batch_read, json!({"paths": ["big.txt", "small.txt"]})));
    assert!(budget.fits(&both));
    assert!(
        both.contains("<context path=\"small.txt\""),
        "{}",
        &both[both.len() - 400..]
    );
    let tight = host(root.path()).output_budget(toolhost_plugin_api::OutputBudget {
        max_chars: 2_000,
        max_lines: 0,
    });
    let spent = ok(tight.call(
        &batch_read,
        json!({"paths": ["big.txt", "big.txt", "small.txt"]}),
    ));
    assert!(spent.chars().count() <= 2_000, "{spent}");
    assert!(
        spent.contains("<not-read path=\"big.txt\">no room"),
        "{spent}"
    );
    assert!(spent.contains("<context path=\"small.txt\""), "{spent}");
}
