//! What the model sees, end to end through the `toolhost` binary and real MCP clients,
//! set up as the book says (the example config, the `coder` profile, the bundled
//! plugins): a 5,000-line file read page by page to its end meets no host marker and
//! loses no line; the error flag means "the call did not do what was asked" and is the
//! same on every path (`toolhost call`, the control socket, MCP over stdio and HTTP with
//! the Python SDK, an agent's turn); each MCP result carries each fact once; and every
//! served schema passes Python's `jsonschema` and Ajv (as the TypeScript SDKs use it)
//! without a warning.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

use crate::mcp::RawClient;
use crate::support::{
    PluginDir, spawn_http_server, state_home, token_add, toolhost_command, wait_exit,
    wait_for_socket, workspace_root,
};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Lines in the big file.
const LINES: usize = 5000;

/// The example config (commands and cargo run without asking, so every path can make
/// the same calls), the `coder` profile, the bundled plugins and a workspace: a big
/// file, a tree to search, and three crates (a type error, a failing test, a dependency
/// that cannot be resolved).
struct View {
    dir: tempfile::TempDir,
    plugins: PluginDir,
    project: tempfile::TempDir,
}

impl View {
    fn new() -> View {
        let extra: String = ["run_command", "cargo_check", "cargo_test"]
            .iter()
            .map(|tool| format!("\n[tools.{tool}]\nrisk = \"read\"\nallow_lower = true\n"))
            .collect();
        let crate::support::CoderSetup { dir, plugins } = crate::support::CoderSetup::new(&extra);
        let project = tempfile::tempdir().expect("project");
        let p = project.path();
        let big: String = (1..=LINES)
            .map(|i| format!("line {i:04} {}\n", "z".repeat(i % 70)))
            .collect();
        std::fs::write(p.join("big.txt"), big).expect("big file");
        for f in 0..60 {
            let dir = p.join(format!("tree/d{}", f % 6));
            std::fs::create_dir_all(&dir).expect("tree");
            let body: String = (0..40)
                .map(|i| format!("needle {f} {i} {}\n", "w".repeat(50)))
                .collect();
            std::fs::write(dir.join(format!("f{f:02}.txt")), body).expect("tree file");
        }
        let krate = |name: &str, dep: &str, lib: &str, test: Option<&str>| {
            let c = p.join(name);
            std::fs::create_dir_all(c.join("src")).expect("crate");
            std::fs::write(
                c.join("Cargo.toml"),
                format!(
                    "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
                     [dependencies]\n{dep}\n[workspace]\n"
                ),
            )
            .expect("Cargo.toml");
            std::fs::write(c.join("src/lib.rs"), lib).expect("lib.rs");
            if let Some(test) = test {
                std::fs::create_dir_all(c.join("tests")).expect("tests");
                std::fs::write(c.join("tests/t.rs"), test).expect("test");
            }
        };
        krate(
            "broken",
            "",
            "pub fn name() -> String {\n    \"not a String\"\n}\n",
            None,
        );
        krate(
            "failing",
            "",
            "pub fn double(x: u32) -> u32 {\n    x * 2\n}\n",
            Some("#[test]\nfn doubles_wrongly() {\n    assert_eq!(failing::double(3), 7);\n}\n"),
        );
        krate(
            "unresolvable",
            "no-such-crate-toolhost-test = \"1\"\n",
            "pub fn f() {}\n",
            None,
        );
        View {
            dir,
            plugins,
            project,
        }
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("config.toml")
    }

    /// `toolhost --config C ARGS...`.
    fn command(&self) -> Command {
        let mut cmd = toolhost_command();
        cmd.arg("--config").arg(self.config());
        cmd
    }

    /// The options that give a command the coder profile on this workspace.
    fn profile_args(&self, cmd: &mut Command) {
        cmd.args(["--profile", "coder", "--workspace"])
            .arg(self.project.path())
            .arg("--plugins")
            .arg(self.plugins.path());
    }

    /// `toolhost call NAME ARGS --json` as profile coder, in process.
    fn call(&self, name: &str, args: &Value) -> (Value, Output) {
        let mut cmd = self.command();
        cmd.args(["call", name, &args.to_string(), "--json", "--yes"]);
        self.profile_args(&mut cmd);
        let out = cmd.output().expect("toolhost call");
        let value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{name}: no JSON ({e}): {}", text(&out.stderr)));
        (value, out)
    }
}

/// The calls every path makes, and whether each did what was asked.
fn cases() -> Vec<(Value, bool)> {
    vec![
        (
            json!({"name": "run_command", "arguments": {"program": "ls", "args": ["no-such-file-here"]}}),
            true,
        ),
        (
            json!({"name": "run_command", "arguments": {"program": "true"}}),
            false,
        ),
        (
            json!({"name": "cargo_check", "arguments": {"path": "broken"}}),
            true,
        ),
        (
            json!({"name": "cargo_check", "arguments": {"path": "unresolvable"}}),
            true,
        ),
        (
            json!({"name": "cargo_test", "arguments": {"path": "failing"}}),
            true,
        ),
        // Over the output budget as a whole; it pages, and it is no error.
        (
            json!({"name": "grep", "arguments": {"pattern": "needle", "path": "tree", "max_matches": 2000}}),
            false,
        ),
        (
            json!({"name": "read_file", "arguments": {"path": "big.txt"}}),
            false,
        ),
    ]
}

fn cargo_here() -> bool {
    let here = Command::new("cargo")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !here {
        eprintln!("skipped: cargo is not installed");
    }
    here
}

/// Runs `tests/mcp/model_view.py` against a server (`url`: HTTP with `token`; none: it
/// starts one on stdio); the tools listed and one answer per call.
fn python_view(view: &View, url: Option<(&str, &str)>) -> (Vec<String>, Vec<Value>, PathBuf) {
    let calls_file = view.dir.path().join("calls.json");
    let calls: Vec<Value> = cases().into_iter().map(|(c, _)| c).collect();
    std::fs::write(&calls_file, serde_json::to_vec(&calls).expect("json")).expect("calls");
    let schemas = view.dir.path().join(if url.is_some() {
        "schemas-http.json"
    } else {
        "schemas.json"
    });
    let mut cmd = Command::new(crate::mcp::python());
    cmd.arg(workspace_root().join("tests/mcp/model_view.py"))
        .arg("--toolhost")
        .arg(env!("CARGO_BIN_EXE_toolhost"))
        .arg("--config")
        .arg(view.config())
        .arg("--plugins")
        .arg(view.plugins.path())
        .arg("--workspace")
        .arg(view.project.path())
        .arg("--calls")
        .arg(&calls_file)
        .arg("--schemas")
        .arg(&schemas)
        .arg("--state")
        .arg(state_home());
    if let Some((url, token)) = url {
        cmd.args(["--url", url, "--token", token]);
    }
    let out = cmd.output().expect("run the Python MCP client");
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "the Python MCP client failed:\n{stdout}\n{}",
        text(&out.stderr)
    );
    let mut lines = stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}")));
    let listed = lines.next().expect("the listing")["listed"]
        .as_array()
        .expect("names")
        .iter()
        .filter_map(|n| n.as_str().map(str::to_owned))
        .collect();
    (listed, lines.collect(), schemas)
}

/// One MCP result holds each fact once: no content block repeats the structured value
/// when the tool has a text of its own.
fn each_fact_once(answer: &Value) {
    let Some(structured) = answer.get("structured").filter(|s| !s.is_null()) else {
        return;
    };
    let blocks = answer["content"].as_array().expect("content");
    let json_blocks = blocks
        .iter()
        .filter(|b| {
            b["text"]
                .as_str()
                .and_then(|t| serde_json::from_str::<Value>(t).ok())
                .is_some_and(|v| &v == structured)
        })
        .count();
    let own_text = blocks.len() - json_blocks;
    assert!(
        json_blocks == 0 || own_text == 0,
        "{}: the structured value is sent twice: {json_blocks} JSON blocks beside the text",
        answer["name"]
    );
    assert!(json_blocks <= 1, "{answer}");
}

#[test]
fn a_big_file_read_page_by_page_meets_no_host_marker_and_loses_no_line() {
    let view = View::new();
    // Through `toolhost call`, and over MCP stdio.
    let mut cmd = view.command();
    cmd.args(["serve", "--mcp", "stdio"]);
    view.profile_args(&mut cmd);
    let mut client = RawClient::start(cmd);
    for path in ["cli", "mcp"] {
        let mut offset = 1usize;
        let mut seen = 0usize;
        for page in 0.. {
            assert!(page < 50, "{path}: more pages than the file can have");
            let args = json!({"path": "big.txt", "offset": offset});
            let shown = if path == "cli" {
                let (value, out) = view.call("read_file", &args);
                assert!(out.status.success(), "{}", text(&out.stderr));
                assert_eq!(value["is_error"], false, "{value}");
                assert!(
                    value["details"].get("toolhost/full_output").is_none(),
                    "{path}: the host cut a page: {value}"
                );
                value["output"].as_str().expect("text").to_owned()
            } else {
                let answer = client.request(
                    "tools/call",
                    json!({"name": "read_file", "arguments": args}),
                );
                let result = &answer["result"];
                assert_eq!(result["isError"], false, "{answer}");
                assert_eq!(
                    result["content"].as_array().map(Vec::len),
                    Some(1),
                    "{answer}"
                );
                result["content"][0]["text"]
                    .as_str()
                    .expect("text")
                    .to_owned()
            };
            assert!(
                !shown.contains("toolhost output") && !shown.contains("read_output"),
                "{path}: a host marker in a page:\n{shown}"
            );
            assert!(shown.chars().count() <= 30_000 && shown.lines().count() <= 1_000);
            for line in shown
                .lines()
                .filter(|l| !l.starts_with('<') && !l.starts_with('('))
            {
                let (anchor, rest) = line.split_once('|').expect("an anchored line");
                let number: usize = anchor
                    .split(':')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("a line number");
                seen += 1;
                assert_eq!(number, seen, "{path}: a line lost or repeated: {line}");
                assert_eq!(
                    rest,
                    format!("line {number:04} {}", "z".repeat(number % 70))
                );
                // One number per line: the file's.
                assert!(!rest.contains(&format!("{number}:")), "{line}");
            }
            let last = shown.lines().last().unwrap_or_default();
            match last.rsplit_once("read on with offset ") {
                Some((_, next)) => {
                    offset = next.trim_end_matches(')').parse().expect("an offset");
                    assert_eq!(offset, seen + 1, "{path}: {last}");
                }
                None => break,
            }
        }
        assert_eq!(seen, LINES, "{path}: every line, once, in order");
    }
}

#[test]
fn the_error_flag_means_failure_and_is_the_same_on_every_path() {
    if !cargo_here() {
        return;
    }
    let view = View::new();
    let cases = cases();
    let mut flags: Vec<(&str, Vec<bool>)> = Vec::new();

    // `toolhost call`, in process.
    let mut cli = Vec::new();
    for (call, _) in &cases {
        let (value, out) = view.call(call["name"].as_str().expect("name"), &call["arguments"]);
        let is_error = value["is_error"].as_bool().expect("is_error");
        assert_eq!(out.status.success(), !is_error, "{value}");
        if call["arguments"]["path"] == "unresolvable" {
            let said = value["output"].as_str().unwrap_or_default();
            assert!(
                said.starts_with("cargo check failed before compiling: error:")
                    && said.contains("no-such-crate-toolhost-test"),
                "cargo's own error heads the text: {said}"
            );
        }
        if call["name"] == "run_command" && is_error {
            let said = value["output"].as_str().unwrap_or_default();
            assert!(
                said.contains("no-such-file-here"),
                "with its output: {said}"
            );
        }
        cli.push(is_error);
    }
    flags.push(("toolhost call", cli));

    // The control socket of a running host.
    let socket = view.dir.path().join("control.sock");
    let mut serve = view.command();
    // The control socket names the profile per call.
    serve
        .args(["serve", "--no-watch", "--control"])
        .arg(&socket)
        .arg("--workspace")
        .arg(view.project.path())
        .arg("--plugins")
        .arg(view.plugins.path());
    let mut host = serve.stdout(Stdio::null()).spawn().expect("serve");
    wait_for_socket(&socket);
    let mut control = Vec::new();
    for (call, _) in &cases {
        let out = view
            .command()
            .args([
                "call",
                call["name"].as_str().expect("name"),
                &call["arguments"].to_string(),
                "--json",
                "--profile",
                "coder",
                "--control",
            ])
            .arg(&socket)
            .output()
            .expect("call --control");
        let value: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stderr)));
        control.push(value["is_error"].as_bool().expect("is_error"));
    }
    let _ = Command::new("kill").arg(host.id().to_string()).status();
    wait_exit(&mut host, "the host");
    flags.push(("control socket", control));

    // MCP over stdio, and over HTTP, with the Python SDK.
    let (listed, answers, schemas) = python_view(&view, None);
    assert!(listed.iter().any(|n| n == "read_output"), "{listed:?}");
    for answer in &answers {
        each_fact_once(answer);
    }
    flags.push((
        "MCP stdio",
        answers.iter().map(|a| a["is_error"] == true).collect(),
    ));
    let token = token_add(&state_home(), "model-view");
    let mut http = view.command();
    http.args([
        "serve",
        "--mcp",
        "http",
        "--listen",
        "127.0.0.1:0",
        "--no-watch",
    ]);
    view.profile_args(&mut http);
    let (child, port) = spawn_http_server(http);
    let _server = crate::mcp::Server(child);
    let url = format!("http://127.0.0.1:{port}/mcp");
    let (_, over_http, _) = python_view(&view, Some((&url, &token)));
    flags.push((
        "MCP HTTP",
        over_http.iter().map(|a| a["is_error"] == true).collect(),
    ));

    // An agent's turn: the model asks for every call at once; the session records which
    // failed.
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let agent = runtime.block_on(async {
        use crate::support::model::{ModelServer, calls, text as answer};
        let asked: Vec<(&str, Value)> = cases
            .iter()
            .map(|(c, _)| (c["name"].as_str().expect("name"), c["arguments"].clone()))
            .collect();
        let server = ModelServer::scripted(vec![calls(&asked), answer("done")]).await;
        let mut cmd = view.command();
        cmd.args(["run", "check everything", "--yes"]);
        view.profile_args(&mut cmd);
        cmd.env("TOOLHOST_MODEL_BASE_URL", &server.url)
            .env("TOOLHOST_MODEL", "scripted")
            .env_remove("TOOLHOST_API_KEY")
            .env_remove("OPENAI_API_KEY");
        let out = tokio::task::spawn_blocking(move || cmd.output().expect("run"))
            .await
            .expect("joined");
        assert!(out.status.success(), "{}", text(&out.stderr));
        let db = crate::support::profile_sessions("coder");
        let conn = rusqlite::Connection::open(&db).expect("db");
        let mut rows = conn
            .prepare("SELECT tool_call_id, details FROM messages WHERE role = 'tool' ORDER BY id")
            .expect("query");
        let recorded: Vec<(String, String)> = rows
            .query_map([], |r| {
                Ok((
                    r.get(0)?,
                    r.get::<_, Option<String>>(1)?.unwrap_or_default(),
                ))
            })
            .expect("rows")
            .map(|r| r.expect("row"))
            .collect();
        assert_eq!(recorded.len(), cases.len(), "{recorded:?}");
        recorded
            .iter()
            .map(|(_, details)| details.contains("toolhost/error"))
            .collect::<Vec<bool>>()
    });
    flags.push(("agent turn", agent));

    let expected: Vec<bool> = cases.iter().map(|(_, e)| *e).collect();
    for (path, got) in &flags {
        assert_eq!(got, &expected, "{path}: the error flag of each case");
    }

    // The served schemas pass Ajv as the TypeScript SDKs use it, without a warning.
    let checked = Command::new(crate::support::mcp_node())
        .arg(workspace_root().join("tests/mcp/schema_check.mjs"))
        .arg(&schemas)
        .current_dir(workspace_root().join("target/mcp-tools"))
        .output()
        .expect("node");
    assert!(
        checked.status.success(),
        "{}{}",
        text(&checked.stdout),
        text(&checked.stderr)
    );
    assert!(
        text(&checked.stdout).starts_with("ok: "),
        "{}",
        text(&checked.stdout)
    );
}
