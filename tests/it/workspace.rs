//! The workspace tools end to end, through the `toolhost` binary and the real plugin:
//! no workspace is an answer that names the config line; a profile's `[workspace] roots`
//! and `--workspace DIR` confine every path (in process and in a sandboxed worker, whose
//! sandbox gets the profile's roots and nothing else); a read, an anchored edit and a
//! stale one; a command's long output cut by the budget with its full text kept; a
//! command's writes outside the roots refused; the confined `write_file` taking the name
//! from utils' deprecated one; the example `coder` profile; MCP serving it.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::mcp::RawClient;
use crate::support::{PluginDir, toolhost_command};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A work folder: `config.toml`, a profile `coder` whose `[workspace]` is `workspace`,
/// a project folder `proj` and a folder `outside` beside it.
struct Work {
    dir: tempfile::TempDir,
    plugins: PluginDir,
}

impl Work {
    fn new(workspace: &str) -> Work {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(
            dir.path().join("config.toml"),
            "profiles_dir = \"profiles\"\n",
        )
        .expect("config");
        let coder = dir.path().join("profiles").join("coder");
        std::fs::create_dir_all(&coder).expect("profile");
        std::fs::write(coder.join("config.toml"), workspace).expect("profile config");
        std::fs::create_dir_all(dir.path().join("proj").join("src")).expect("proj");
        std::fs::create_dir_all(dir.path().join("outside")).expect("outside");
        std::fs::write(
            dir.path().join("outside").join("secret.txt"),
            "TOP SECRET\n",
        )
        .expect("secret");
        std::fs::write(
            dir.path().join("proj").join("src").join("main.rs"),
            "fn main() {\n    println!(\"hello\");\n}\n",
        )
        .expect("main.rs");
        Work {
            dir,
            plugins: PluginDir::with(&["toolhost_workspace"]),
        }
    }

    fn proj(&self) -> PathBuf {
        self.dir.path().join("proj")
    }

    fn outside(&self) -> PathBuf {
        self.dir.path().join("outside")
    }

    fn command(&self) -> Command {
        let mut cmd = toolhost_command();
        cmd.arg("--config").arg(self.dir.path().join("config.toml"));
        cmd
    }

    /// `toolhost call TOOL ARGS --profile coder --yes EXTRA`.
    fn call(&self, tool: &str, args: &Value, extra: &[&str]) -> Output {
        self.command()
            .args([
                "call",
                tool,
                &args.to_string(),
                "--profile",
                "coder",
                "--yes",
            ])
            .arg("--plugins")
            .arg(self.plugins.path())
            .args(extra)
            .output()
            .expect("run toolhost call")
    }
}

/// The anchor (`N:HASH`) of the line of `shown` (read_file's output) that ends with
/// `text`.
fn anchor_of(shown: &str, text: &str) -> String {
    shown
        .lines()
        .find(|l| l.ends_with(text) && l.contains('|'))
        .and_then(|l| l.split('|').next())
        .unwrap_or_else(|| panic!("no line ending with {text:?} in:\n{shown}"))
        .trim()
        .to_owned()
}

#[test]
fn without_a_workspace_the_tools_say_which_config_line_to_add() {
    let work = Work::new("");
    let out = work.call("read_file", &json!({"path": "src/main.rs"}), &[]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("no workspace configured"), "{err}");
    assert!(err.contains("roots = ["), "{err}");
    assert!(
        err.contains("profiles/coder/config.toml") || err.contains("--workspace"),
        "{err}"
    );
}

#[test]
fn a_bad_workspace_root_stops_the_command_naming_it() {
    let work = Work::new("[workspace]\nroots = [\"../nowhere\"]\n");
    let out = work.call("read_file", &json!({"path": "a"}), &[]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("nowhere") && err.contains("[workspace] roots"),
        "{err}"
    );
    let flag = work.call(
        "read_file",
        &json!({"path": "a"}),
        &["--workspace", "/no/such/folder"],
    );
    assert!(!flag.status.success());
    assert!(
        text(&flag.stderr).contains("/no/such/folder"),
        "{}",
        text(&flag.stderr)
    );
}

/// Reads, edits by anchor, refuses a stale anchor and every way out, in process and in a
/// worker.
fn read_edit_and_escapes(work: &Work, extra: &[&str]) {
    let read = work.call("read_file", &json!({"path": "src/main.rs"}), extra);
    let shown = text(&read.stdout);
    assert!(read.status.success(), "{}", text(&read.stderr));
    assert!(shown.contains("<context"), "{shown}");
    let anchor = anchor_of(&shown, "println!(\"hello\");");
    assert!(anchor.starts_with("2:"), "{anchor}");

    let edit = work.call(
        "edit_file",
        &json!({"path": "src/main.rs", "edits": [
            {"from": anchor, "new_text": "    println!(\"hello, workspace\");"}
        ]}),
        extra,
    );
    assert!(edit.status.success(), "{}", text(&edit.stderr));
    let main = work.proj().join("src").join("main.rs");
    assert_eq!(
        std::fs::read_to_string(&main).expect("read"),
        "fn main() {\n    println!(\"hello, workspace\");\n}\n"
    );
    // The same anchor again: line 2 changed since it was read.
    let stale = work.call(
        "edit_file",
        &json!({"path": "src/main.rs", "edits": [
            {"from": anchor, "new_text": "    println!(\"stale\");"}
        ]}),
        extra,
    );
    assert!(!stale.status.success(), "a stale anchor was applied");
    assert!(
        std::fs::read_to_string(&main)
            .expect("read")
            .contains("hello, workspace"),
        "the file is unchanged"
    );

    std::os::unix::fs::symlink(work.outside(), work.proj().join("out")).ok();
    let secret = work.outside().join("secret.txt");
    for path in [
        "../outside/secret.txt".to_owned(),
        secret.display().to_string(),
        "out/secret.txt".to_owned(),
    ] {
        let out = work.call("read_file", &json!({ "path": path }), extra);
        assert!(!out.status.success(), "{path} was read");
        assert!(!text(&out.stdout).contains("TOP SECRET"), "{path}");
        let err = text(&out.stderr);
        assert!(
            err.contains("outside the workspace") || err.contains("`..`"),
            "{path}: {err}"
        );
        let write = work.call(
            "write_file",
            &json!({"path": path, "content": "x", "mode": "overwrite"}),
            extra,
        );
        assert!(!write.status.success(), "{path} was written");
    }
    assert_eq!(
        std::fs::read_to_string(&secret).expect("secret"),
        "TOP SECRET\n"
    );
}

#[test]
fn a_profiles_roots_confine_reads_edits_and_writes_in_process_and_in_a_worker() {
    // Relative to the profile's own config file.
    let work = Work::new("[workspace]\nroots = [\"../../proj\"]\n");
    read_edit_and_escapes(&work, &[]);
    std::fs::write(
        work.proj().join("src").join("main.rs"),
        "fn main() {\n    println!(\"hello\");\n}\n",
    )
    .expect("reset");
    read_edit_and_escapes(&work, &["--isolate"]);
}

#[test]
fn the_workspace_flag_replaces_the_configured_roots() {
    let work = Work::new("[workspace]\nroots = [\"../../outside\"]\n");
    let proj = work.proj();
    let flag = ["--workspace", proj.to_str().expect("utf-8")];
    read_edit_and_escapes(&work, &flag);
}

#[test]
fn a_commands_long_output_is_cut_to_the_budget_and_kept_whole() {
    let work = Work::new("[workspace]\nroots = [\"../../proj\"]\n");
    let out = work.call(
        "run_command",
        &json!({"program": "seq", "args": ["1", "50000"]}),
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let cut = text(&out.stdout);
    assert!(
        cut.chars().count() <= 30_000,
        "{} chars",
        cut.chars().count()
    );
    let marker = cut
        .lines()
        .find(|l| l.starts_with("[toolhost:"))
        .unwrap_or_else(|| panic!("no marker in {cut}"));
    let id = marker
        .split("(id ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .expect("an id in the marker");
    let full = work
        .command()
        .args(["output", id, "--profile", "coder"])
        .output()
        .expect("toolhost output");
    assert!(full.status.success(), "{}", text(&full.stderr));
    let full = text(&full.stdout);
    let expected: String = (1..=50_000).map(|n| format!("{n}\n")).collect();
    assert!(full.contains(&expected), "the full stream is kept");
}

#[test]
fn a_command_cannot_write_outside_the_roots_in_process_or_in_a_worker() {
    let work = Work::new("[workspace]\nroots = [\"../../proj\"]\n");
    for extra in [&[][..], &["--isolate"][..]] {
        let target = work.outside().join(format!("planted-{}", extra.len()));
        let out = work.call(
            "run_command",
            &json!({"program": "touch", "args": [target]}),
            extra,
        );
        assert!(
            !target.exists(),
            "{extra:?}: the command wrote outside the roots"
        );
        let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(said.contains("ermission denied"), "{extra:?}: {said}");
        let inside = work.proj().join(format!("made-{}", extra.len()));
        let ok = work.call(
            "run_command",
            &json!({"program": "touch", "args": [inside]}),
            extra,
        );
        assert!(ok.status.success(), "{extra:?}: {}", text(&ok.stderr));
        assert!(inside.exists(), "{extra:?}: a write inside the roots works");
    }
}

#[test]
fn the_confined_write_file_takes_the_name_from_the_deprecated_one() {
    let work = Work::new("[workspace]\nroots = [\"../../proj\"]\n");
    // utils sorts first, so it loads first: the name still goes to the workspace plugin.
    work.plugins.install("toolhost_utils");
    let list = work
        .command()
        .args(["list", "--json", "--plugins"])
        .arg(work.plugins.path())
        .output()
        .expect("toolhost list");
    assert!(list.status.success(), "{}", text(&list.stderr));
    let err = text(&list.stderr);
    assert!(!err.contains("duplicate"), "{err}");
    let tools: Value = serde_json::from_slice(&list.stdout).expect("JSON");
    let write = tools
        .as_array()
        .expect("array")
        .iter()
        .find(|t| t["name"] == "write_file")
        .expect("write_file is listed");
    assert!(
        write["file"]
            .as_str()
            .is_some_and(|f| f.ends_with("libtoolhost_workspace.so")),
        "{write}"
    );
    let out = work.call(
        "write_file",
        &json!({"path": "notes.txt", "content": "kept inside"}),
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(work.proj().join("notes.txt")).expect("written"),
        "kept inside"
    );
}

/// A work folder set up as the book says: the example config's toolsets and the
/// example `coder` profile.
fn example_setup() -> (tempfile::TempDir, PluginDir) {
    let setup = crate::support::CoderSetup::new("");
    (setup.dir, setup.plugins)
}

#[test]
fn the_example_coder_profile_gets_the_workspace_tools_and_the_agents_own() {
    let (dir, plugins) = example_setup();
    let list = toolhost_command()
        .arg("--config")
        .arg(dir.path().join("config.toml"))
        .args(["list", "--json", "--profile", "coder", "--plugins"])
        .arg(plugins.path())
        .output()
        .expect("toolhost list");
    assert!(list.status.success(), "{}", text(&list.stderr));
    let tools: Value = serde_json::from_slice(&list.stdout).expect("JSON");
    let names: Vec<&str> = tools
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for tool in [
        "read_file",
        "batch_read",
        "list_dir",
        "find_files",
        "grep",
        "edit_file",
        "write_file",
        "run_command",
        "fetch_url",
        "memory",
        "session_search",
        "delegate_task",
        "clarify",
    ] {
        assert!(names.contains(&tool), "{tool} missing from {names:?}");
    }
    assert!(!names.contains(&"time_now"), "{names:?}");
}

#[test]
fn an_mcp_client_gets_the_coder_profile_confined_to_the_workspace_flag() {
    let (dir, plugins) = example_setup();
    let proj = tempfile::tempdir().expect("project");
    std::fs::write(proj.path().join("README.md"), "# a project\n").expect("readme");
    let mut cmd = toolhost_command();
    cmd.arg("--config")
        .arg(dir.path().join("config.toml"))
        .args(["serve", "--mcp", "stdio", "--profile", "coder", "--plugins"])
        .arg(plugins.path())
        .arg("--workspace")
        .arg(proj.path())
        .env("XDG_RUNTIME_DIR", dir.path());
    let mut client = RawClient::start(cmd);
    let listed = client.request("tools/list", json!({}));
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"read_file") && names.contains(&"grep"),
        "{names:?}"
    );
    let read = client.request(
        "tools/call",
        json!({"name": "read_file", "arguments": {"path": "README.md"}}),
    );
    let shown = read["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(read["result"]["isError"], false, "{read}");
    assert!(shown.contains("|# a project"), "{shown}");
    let grep = client.request(
        "tools/call",
        json!({"name": "grep", "arguments": {"pattern": "project"}}),
    );
    let found = grep["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(found.contains("README.md"), "{grep}");
}

/// The command's private temporary folder is the command's alone (mode 0700), and with
/// `shell = true` a command line runs through `sh -c`.
#[test]
fn a_commands_temporary_folder_is_private_and_shell_lines_need_the_profiles_leave() {
    let work = Work::new("[workspace]\nroots = [\"../../proj\"]\n");
    let line = json!({"command": "stat -c '%a' \"$TMPDIR\""});
    let refused = work.call("run_command", &line, &[]);
    assert!(!refused.status.success());
    assert!(
        text(&refused.stderr).contains("shell = true"),
        "{}",
        text(&refused.stderr)
    );
    let work = Work::new("[workspace]\nroots = [\"../../proj\"]\nshell = true\n");
    let out = work.call("run_command", &line, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.lines().any(|l| l.trim() == "700"), "{said}");

    // The host's environment (API keys) is not the command's to read through /proc.
    let mut cmd = work.command();
    cmd.args(["call", "run_command"])
        .arg(json!({"command": "cat /proc/$PPID/environ; echo; tr '\\0' '\\n' < /proc/$PPID/cmdline | head -1"}).to_string())
        .args(["--profile", "coder", "--yes", "--plugins"])
        .arg(work.plugins.path())
        .env("TOOLHOST_TEST_SECRET", "hunter2-not-for-commands");
    let peek = cmd.output().expect("run toolhost call");
    let said = format!("{}{}", text(&peek.stdout), text(&peek.stderr));
    assert!(said.contains("toolhost"), "the parent is the host: {said}");
    assert!(!said.contains("hunter2-not-for-commands"), "{said}");
}

/// A one-shot HTTP server on loopback: answers every request with `body` as
/// `content_type`; returns its address.
fn http_server(content_type: &'static str, body: &'static str) -> std::net::SocketAddr {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming().take(4) {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    addr
}

#[test]
fn fetch_url_refuses_loopback_unless_the_workspace_allows_it_and_turns_html_into_markdown() {
    let addr = http_server(
        "text/html; charset=utf-8",
        "<html><head><title>t</title></head><body><h1>Release notes</h1><p>It <b>works</b>.</p></body></html>",
    );
    let url = format!("http://{addr}/notes");
    let work = Work::new("[workspace]\nroots = [\"../../proj\"]\n");
    let refused = work.call("fetch_url", &json!({ "url": url }), &[]);
    assert!(!refused.status.success());
    let err = text(&refused.stderr);
    assert!(
        err.contains("127.0.0.1") && err.contains("allow_private_addresses"),
        "{err}"
    );

    let work = Work::new("[workspace]\nroots = [\"../../proj\"]\nallow_private_addresses = true\n");
    let fetched = work.call("fetch_url", &json!({ "url": url }), &[]);
    assert!(fetched.status.success(), "{}", text(&fetched.stderr));
    let page = text(&fetched.stdout);
    assert!(page.contains("# Release notes"), "{page}");
    assert!(page.contains("**works**"), "{page}");
    assert!(!page.contains("<h1>"), "{page}");
}

#[test]
fn listing_finding_and_searching_honour_gitignore_through_the_binary() {
    let work = Work::new("[workspace]\nroots = [\"../../proj\"]\n");
    let proj = work.proj();
    std::fs::write(proj.join(".gitignore"), "target/\n*.log\n").expect("gitignore");
    std::fs::create_dir_all(proj.join("target")).expect("target");
    std::fs::write(proj.join("target").join("built.rs"), "fn needle() {}\n").expect("built");
    std::fs::write(proj.join("run.log"), "needle in a log\n").expect("log");
    std::fs::write(proj.join("src").join("lib.rs"), "pub fn needle() {}\n").expect("lib");

    let listed = work.call("list_dir", &json!({"path": ".", "depth": 3}), &[]);
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let listing = text(&listed.stdout);
    assert!(
        listing.contains("src/") && listing.contains("lib.rs"),
        "{listing}"
    );
    assert!(
        !listing.contains("built.rs") && !listing.contains("run.log"),
        "{listing}"
    );

    let found = work.call("find_files", &json!({"patterns": ["*.rs"]}), &[]);
    assert!(found.status.success(), "{}", text(&found.stderr));
    let files = text(&found.stdout);
    assert!(
        files.contains("src/lib.rs") && files.contains("src/main.rs"),
        "{files}"
    );
    assert!(!files.contains("target/"), "{files}");

    let grep = work.call("grep", &json!({"pattern": "needle"}), &[]);
    assert!(grep.status.success(), "{}", text(&grep.stderr));
    let hits = text(&grep.stdout);
    assert!(hits.contains("src/lib.rs:1:pub fn needle() {}"), "{hits}");
    assert!(
        !hits.contains("built.rs") && !hits.contains("run.log"),
        "{hits}"
    );

    let batch = work.call(
        "batch_read",
        &json!({"paths": ["src/lib.rs", "missing.rs", "../outside/secret.txt"]}),
        &[],
    );
    assert!(batch.status.success(), "{}", text(&batch.stderr));
    let read = text(&batch.stdout);
    assert!(
        read.contains("1:") && read.contains("|pub fn needle() {}"),
        "{read}"
    );
    assert!(read.matches("<error").count() == 2, "{read}");
    assert!(!read.contains("TOP SECRET"), "{read}");
}

#[test]
fn a_timed_out_command_leaves_no_process_behind() {
    let work = Work::new(
        "[workspace]\nroots = [\"../../proj\"]\nshell = true\ncommand_timeout_secs = 2\n",
    );
    let out = work.call(
        "run_command",
        &json!({"command": "sleep 300 & echo $! > pidfile; wait"}),
        &[],
    );
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(
        said.contains("timed out") || said.contains("time limit"),
        "{said}"
    );
    let pid: i32 = std::fs::read_to_string(work.proj().join("pidfile"))
        .expect("pidfile")
        .trim()
        .parse()
        .expect("pid");
    crate::support::wait_until("the background sleep to be gone", || {
        // SAFETY: kill with signal 0 only checks that the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0;
        gone || std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.contains(") Z "))
    });
}
