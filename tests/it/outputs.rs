//! The output budget on every path: a 2 MB result (the basic fixture's `big_output`)
//! through `toolhost call`, the control socket, MCP over stdio and HTTP and an agent turn
//! arrives as head + tail + one marker within the budget; the full text is kept (0600 in a
//! 0700 folder) and read back exactly with `toolhost output`, `read_output` and MCP
//! `resources/read`, for its own profile and token only; pruning removes the oldest first
//! and says so; error results stay errors.

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};

use serde_json::{Value, json};

use crate::support::{PluginDir, serve_command, toolhost_command, wait_for_socket};

/// The size of the big output.
const BIG: usize = 2_000_000;
/// The line that says NEEDLE.
const NEEDLE: usize = 20_000;
/// The default budget.
const MAX_CHARS: usize = 30_000;
const MAX_LINES: usize = 1_000;

/// The text `big_output` answers (the same function as the fixture's).
fn big_text(bytes: usize, needle: usize) -> String {
    let mut out = String::with_capacity(bytes + 64);
    let mut n = 0;
    while out.len() < bytes {
        n += 1;
        if n == needle {
            out.push_str(&format!("line {n:06} NEEDLE here é\n"));
        } else {
            out.push_str(&format!("line {n:06} {:-<50}é\n", ""));
        }
    }
    out
}

fn big_args(fail: bool) -> Value {
    json!({"bytes": BIG, "needle": NEEDLE, "fail": fail})
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A work folder: `config.toml` (with `extra`), profiles `default` (no directory) and
/// `other`.
struct Work {
    dir: tempfile::TempDir,
    plugins: PluginDir,
}

impl Work {
    fn new(extra: &str) -> Work {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(
            dir.path().join("config.toml"),
            format!("profiles_dir = \"profiles\"\nstate_dir = \"state\"\n{extra}"),
        )
        .expect("config");
        let other = dir.path().join("profiles").join("other");
        std::fs::create_dir_all(&other).expect("profile");
        std::fs::write(other.join("config.toml"), "").expect("profile config");
        Work {
            dir,
            plugins: PluginDir::with(&["fixture_basic"]),
        }
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("config.toml")
    }

    fn outputs(&self, profile: &str) -> PathBuf {
        self.dir
            .path()
            .join("state/profiles")
            .join(profile)
            .join("outputs")
    }

    fn command(&self) -> Command {
        let mut cmd = toolhost_command();
        cmd.arg("--config").arg(self.config());
        cmd
    }

    /// `toolhost output ID ARGS`.
    fn output(&self, id: &str, args: &[&str]) -> Output {
        self.command()
            .args(["output", id])
            .args(args)
            .output()
            .expect("run toolhost output")
    }
}

/// The id in the one marker line of `cut`, after checking the cut: within the budget,
/// the big text's head and tail, one marker.
fn check_cut(cut: &str, full: &str, max_chars: usize, max_lines: usize) -> String {
    assert!(
        cut.chars().count() <= max_chars,
        "{} characters",
        cut.chars().count()
    );
    if max_lines > 0 {
        assert!(
            cut.lines().count() <= max_lines,
            "{} lines",
            cut.lines().count()
        );
    }
    let markers: Vec<&str> = cut
        .lines()
        .filter(|l| l.starts_with("[toolhost:"))
        .collect();
    assert_eq!(markers.len(), 1, "one marker line");
    let (head, tail) = cut.split_once(markers[0]).expect("marker");
    assert!(head.starts_with("line 000001 "), "{:?}", &head[..40]);
    assert!(full.starts_with(head), "the head is the text's own");
    assert!(
        full.ends_with(tail.trim_start_matches('\n')),
        "the tail is the text's own"
    );
    assert!(markers[0].contains("characters in"), "{}", markers[0]);
    assert!(markers[0].contains("read_output"), "{}", markers[0]);
    let id = markers[0]
        .split("(id ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .unwrap_or_else(|| panic!("no id in {}", markers[0]))
        .to_owned();
    assert!(id.starts_with('o') && id.len() == 33, "{id}");
    assert!(markers[0].contains(&format!("toolhost output {id}")));
    id
}

/// `toolhost output` returns the exact text, a range and a grep; another profile gets
/// "not found"; the files are private.
fn check_read_back(work: &Work, id: &str, full: &str) {
    let all = work.output(id, &[]);
    assert!(all.status.success(), "{}", text(&all.stderr));
    assert!(
        all.stdout == full.as_bytes(),
        "the full text, byte for byte"
    );
    let from_one = work.output(id, &["--lines", "1:"]);
    assert!(from_one.stdout == full.as_bytes());
    let range = work.output(id, &["--lines", &format!("{}:{}", NEEDLE - 1, NEEDLE + 1)]);
    let expected: String = full
        .split_inclusive('\n')
        .skip(NEEDLE - 2)
        .take(3)
        .collect();
    assert_eq!(text(&range.stdout), expected);
    let grep = work.output(id, &["--grep", "NEEDLE", "--context", "1"]);
    let lines: Vec<String> = text(&grep.stdout).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    // One header names the group's lines; the lines are as they were output.
    assert_eq!(lines[0], format!("[lines {}-{}]", NEEDLE - 1, NEEDLE + 1));
    assert_eq!(lines[2], format!("line {NEEDLE:06} NEEDLE here é"));
    assert!(lines[1].starts_with(&format!("line {:06}", NEEDLE - 1)));
    let foreign = work.output(id, &["--profile", "other"]);
    assert!(!foreign.status.success());
    let unknown = work.output(&format!("o{}", "0".repeat(32)), &[]);
    let shown = |o: &Output| {
        text(&o.stderr)
            .replace(id, "ID")
            .replace(&format!("o{}", "0".repeat(32)), "ID")
    };
    assert_eq!(
        shown(&foreign),
        shown(&unknown),
        "the same answer as an unknown id"
    );
    assert!(
        text(&foreign.stderr).contains("no output"),
        "{}",
        text(&foreign.stderr)
    );
    let folder = work.outputs("default");
    assert_eq!(mode(&folder), 0o700);
    assert_eq!(mode(&folder.join(format!("{id}.txt"))), 0o600);
    assert_eq!(mode(&folder.join(format!("{id}.json"))), 0o600);
}

#[test]
fn a_two_mb_output_of_toolhost_call_is_cut_and_read_back_whole() {
    let work = Work::new("");
    let full = big_text(BIG, NEEDLE);
    let out = work
        .command()
        .args([
            "call",
            "big_output",
            &big_args(false).to_string(),
            "--plugins",
        ])
        .arg(work.plugins.path())
        .output()
        .expect("run toolhost call");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    let cut = printed.strip_suffix('\n').unwrap_or(&printed);
    let id = check_cut(cut, &full, MAX_CHARS, MAX_LINES);
    check_read_back(&work, &id, &full);
}

#[test]
fn an_error_result_of_two_mb_is_cut_and_stays_an_error() {
    let work = Work::new("");
    let full = big_text(BIG, NEEDLE);
    let out = work
        .command()
        .args([
            "call",
            "big_output",
            &big_args(true).to_string(),
            "--plugins",
        ])
        .arg(work.plugins.path())
        .output()
        .expect("run toolhost call");
    assert_eq!(out.status.code(), Some(1), "an error result");
    let stderr = text(&out.stderr);
    let marker = stderr
        .lines()
        .find(|l| l.starts_with("[toolhost:"))
        .unwrap_or_else(|| panic!("no marker in {}", &stderr[..200.min(stderr.len())]));
    assert!(stderr.len() < MAX_CHARS * 2 + 200, "{} bytes", stderr.len());
    let id = marker
        .split("(id ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .expect("id");
    let all = work.output(id, &[]);
    assert!(all.stdout == full.as_bytes(), "the full error text is kept");
    let meta: Value = serde_json::from_slice(
        &std::fs::read(work.outputs("default").join(format!("{id}.json"))).expect("meta"),
    )
    .expect("json");
    assert_eq!(meta["is_error"], json!(true));
    assert_eq!(meta["result"]["error"], json!("failed"));
    assert_eq!(meta["owner"], json!({"profile": "default", "token": null}));
}

#[test]
fn a_limit_of_zero_is_off_and_a_custom_budget_holds() {
    let work = Work::new("[output]\nmax_chars = 0\nmax_lines = 0\n");
    let out = work
        .command()
        .args([
            "call",
            "big_output",
            &json!({"bytes": 300_000}).to_string(),
            "--plugins",
        ])
        .arg(work.plugins.path())
        .output()
        .expect("run toolhost call");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("{}\n", big_text(300_000, 0)));
    assert!(
        !work.outputs("default").exists(),
        "nothing cut, nothing kept"
    );

    let narrow = Work::new("[output]\nmax_chars = 5000\nmax_lines = 0\n");
    let out = narrow
        .command()
        .args([
            "call",
            "big_output",
            &json!({"bytes": 300_000}).to_string(),
            "--plugins",
        ])
        .arg(narrow.plugins.path())
        .output()
        .expect("run toolhost call");
    let printed = text(&out.stdout);
    check_cut(
        printed.strip_suffix('\n').unwrap_or(&printed),
        &big_text(300_000, 0),
        5000,
        0,
    );

    let bad = Work::new("[output]\nmax_chars = 10\n");
    let out = bad.command().args(["list"]).output().expect("run");
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("output.max_chars"),
        "{}",
        text(&out.stderr)
    );
    let unknown = Work::new("[output]\nmax_char = 10\n");
    let out = unknown.command().args(["list"]).output().expect("run");
    assert!(
        text(&out.stderr).contains("unknown field `max_char`"),
        "{}",
        text(&out.stderr)
    );
}

/// A host serving the control socket of `work`, killed at the end.
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_control_socket_cuts_and_state_dir_works_for_the_default_profile() {
    let work = Work::new("");
    let socket = work.dir.path().join("control.sock");
    let mut serve = serve_command(&work.plugins.path(), &socket);
    serve.arg("--config").arg(work.config());
    let _host = Served(serve.stderr(Stdio::null()).spawn().expect("serve"));
    wait_for_socket(&socket);
    let full = big_text(BIG, NEEDLE);
    let call = |tool: &str, args: &Value, profile: &str| {
        work.command()
            .args(["call", tool, &args.to_string(), "--control"])
            .arg(&socket)
            .args(["--profile", profile])
            .output()
            .expect("call")
    };
    let out = call("big_output", &big_args(false), "default");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    let id = check_cut(
        printed.strip_suffix('\n').unwrap_or(&printed),
        &full,
        MAX_CHARS,
        MAX_LINES,
    );
    check_read_back(&work, &id, &full);
    // read_output through the host, as the same profile and as another.
    let piece = call(
        "read_output",
        &json!({"id": id, "offset": NEEDLE, "limit": 2}),
        "default",
    );
    assert!(piece.status.success(), "{}", text(&piece.stderr));
    let expected: String = full
        .split_inclusive('\n')
        .skip(NEEDLE - 1)
        .take(2)
        .collect();
    assert_eq!(text(&piece.stdout), format!("{expected}\n"));
    let foreign = call("read_output", &json!({"id": id}), "other");
    assert!(!foreign.status.success());
    assert!(
        text(&foreign.stderr).contains("no output"),
        "{}",
        text(&foreign.stderr)
    );
    // The stumble: a tool using ctx.state_dir() over the control socket.
    let state = call("state_path", &json!({}), "default");
    assert!(state.status.success(), "{}", text(&state.stderr));
    assert!(
        text(&state.stdout)
            .trim()
            .ends_with("profiles/default/state"),
        "{}",
        text(&state.stdout)
    );
}

/// `toolhost serve --mcp stdio` with newline-delimited JSON-RPC.
struct Stdio_ {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Drop for Stdio_ {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Stdio_ {
    fn start(work: &Work) -> Stdio_ {
        let mut child = work
            .command()
            .args(["serve", "--mcp", "stdio", "--no-watch", "--plugins"])
            .arg(work.plugins.path())
            .arg("--control")
            .arg(work.dir.path().join("mcp.sock"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("serve --mcp stdio");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut s = Stdio_ {
            child,
            stdin,
            stdout,
            next: 1,
        };
        let init = s.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "outputs-test", "version": "1"}}),
        );
        assert!(
            init["result"]["capabilities"]["resources"].is_object(),
            "{init}"
        );
        writeln!(
            s.stdin,
            "{}",
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        )
        .expect("send");
        s
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        writeln!(
            self.stdin,
            "{}",
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        )
        .expect("send");
        loop {
            let mut line = String::new();
            let n = self.stdout.read_line(&mut line).expect("read");
            assert!(n > 0, "the server closed stdout");
            let message: Value = serde_json::from_str(&line).expect("JSON line");
            if message["id"] == json!(id) {
                return message;
            }
        }
    }
}

/// The id of a cut MCP result, after checking its text, resource link and `_meta`.
fn check_mcp_cut(result: &Value, full: &str, max_chars: usize, max_lines: usize) -> String {
    let content = result["content"].as_array().expect("content");
    let cut = content[0]["text"].as_str().expect("text");
    let id = check_cut(cut, full, max_chars, max_lines);
    let uri = format!("toolhost://output/{id}");
    assert_eq!(content[1]["type"], json!("resource_link"), "{}", content[1]);
    assert_eq!(content[1]["uri"], json!(uri));
    assert_eq!(content[1]["size"], json!(full.len()));
    let meta = &result["_meta"]["toolhost/output"];
    assert_eq!(meta["id"], json!(id));
    assert_eq!(meta["uri"], json!(uri));
    assert_eq!(meta["lines"], json!(full.lines().count()));
    assert_eq!(meta["chars"], json!(full.chars().count()));
    id
}

#[test]
fn mcp_over_stdio_cuts_links_and_serves_the_full_output() {
    let work = Work::new("");
    let full = big_text(BIG, NEEDLE);
    let mut mcp = Stdio_::start(&work);
    let called = mcp.request(
        "tools/call",
        json!({"name": "big_output", "arguments": big_args(false)}),
    );
    let result = &called["result"];
    assert_ne!(result["isError"], json!(true));
    let id = check_mcp_cut(result, &full, MAX_CHARS, MAX_LINES);
    let uri = format!("toolhost://output/{id}");

    let read = |mcp: &mut Stdio_, uri: &str| {
        let answer = mcp.request("resources/read", json!({"uri": uri}));
        answer["result"]["contents"][0]["text"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("{answer}"))
    };
    assert!(read(&mut mcp, &uri) == full, "the full text, exactly");
    let range = read(&mut mcp, &format!("{uri}?lines=3:4"));
    assert_eq!(
        range,
        full.split_inclusive('\n')
            .skip(2)
            .take(2)
            .collect::<String>()
    );
    let grep = read(&mut mcp, &format!("{uri}?grep=NEEDLE&context=0"));
    assert_eq!(
        grep,
        format!("[line {NEEDLE}]\nline {NEEDLE:06} NEEDLE here é\n")
    );
    let missing = mcp.request(
        "resources/read",
        json!({"uri": format!("toolhost://output/o{}", "1".repeat(32))}),
    );
    assert!(
        missing["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no resource")),
        "{missing}"
    );
    // SEP-2164: invalid params, the URI in `data`.
    assert_eq!(missing["error"]["code"], json!(-32602), "{missing}");
    assert_eq!(
        missing["error"]["data"]["uri"],
        json!(format!("toolhost://output/o{}", "1".repeat(32))),
        "{missing}"
    );
    let listed = mcp.request("resources/list", json!({}));
    assert_eq!(listed["result"]["resources"], json!([]));
    let templates = mcp.request("resources/templates/list", json!({}));
    assert_eq!(
        templates["result"]["resourceTemplates"][0]["uriTemplate"],
        json!("toolhost://output/{id}")
    );

    // read_output, in pieces that fit the budget, gives the text back exactly.
    let tools = mcp.request("tools/list", json!({}));
    assert!(tools.to_string().contains("\"read_output\""));
    let mut whole = String::new();
    let mut offset = 1;
    loop {
        let piece = mcp.request(
            "tools/call",
            json!({"name": "read_output", "arguments": {"id": id, "offset": offset, "limit": 400}}),
        );
        let t = piece["result"]["content"][0]["text"]
            .as_str()
            .expect("text")
            .to_owned();
        if t.starts_with("(no lines there") {
            break;
        }
        assert!(!t.contains("[toolhost:"), "400 lines fit the budget");
        whole.push_str(&t);
        offset += 400;
    }
    assert!(whole == full, "read_output's pieces are the full text");

    // A client raises its own limit, within the ceiling.
    let raised = mcp.request(
        "tools/call",
        json!({"name": "big_output", "arguments": big_args(false),
               "_meta": {"anthropic/maxResultSizeChars": 100_000}}),
    );
    check_mcp_cut(&raised["result"], &full, 100_000, 0);
    let raised_text = raised["result"]["content"][0]["text"]
        .as_str()
        .expect("text");
    assert!(
        raised_text.chars().count() > MAX_CHARS,
        "the client's limit was used"
    );

    // An error result is cut the same way and stays an error.
    let failed = mcp.request(
        "tools/call",
        json!({"name": "big_output", "arguments": big_args(true)}),
    );
    assert_eq!(failed["result"]["isError"], json!(true));
    check_mcp_cut(&failed["result"], &full, MAX_CHARS, MAX_LINES);
}

#[test]
fn over_http_another_token_gets_not_found() {
    let host = crate::http_door::HttpHost::start("", &[]);
    let a = host.token(&["add", "alice"]);
    let b = host.token(&["add", "bob"]);
    let mut alice = host.client(Some(&a));
    assert_eq!(alice.handshake().status, 200);
    let mut bob = host.client(Some(&b));
    assert_eq!(bob.handshake().status, 200);
    let full = big_text(BIG, NEEDLE);
    let called = alice.post(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "big_output", "arguments": big_args(false)}}));
    let id = check_mcp_cut(&called.message()["result"], &full, MAX_CHARS, MAX_LINES);
    let uri = format!("toolhost://output/{id}");
    let read = |c: &crate::http_door::Client| {
        c.post(
            &json!({"jsonrpc": "2.0", "id": 6, "method": "resources/read", "params": {"uri": uri}}),
        )
        .message()
    };
    let mine = read(&alice);
    assert!(mine["result"]["contents"][0]["text"].as_str() == Some(full.as_str()));
    let theirs = read(&bob);
    let unknown = bob
        .post(
            &json!({"jsonrpc": "2.0", "id": 6, "method": "resources/read",
                      "params": {"uri": format!("toolhost://output/o{}", "2".repeat(32))}}),
        )
        .message();
    assert!(theirs["error"].is_object(), "{theirs}");
    assert_eq!(
        theirs["error"]["message"]
            .as_str()
            .map(|m| m.replace(&id, "ID")),
        unknown["error"]["message"]
            .as_str()
            .map(|m| m.replace(&format!("o{}", "2".repeat(32)), "ID")),
        "the same answer as an unknown id"
    );
    let tool = bob
        .post(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "read_output", "arguments": {"id": id}}}))
        .message();
    assert_eq!(tool["result"]["isError"], json!(true), "{tool}");
    assert!(
        tool["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("no output"))
    );
    // The owner reads it from the command line with its token's name.
    let out = toolhost_command()
        .arg("--config")
        .arg(host.dir.path().join("config.toml"))
        .args(["output", &id, "--token", "alice", "--lines", "1:2"])
        .env("XDG_STATE_HOME", host.dir.path().join("state"))
        .output()
        .expect("toolhost output");
    assert_eq!(
        text(&out.stdout),
        full.split_inclusive('\n').take(2).collect::<String>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_turn_gets_the_cut_text_and_the_full_one_is_kept_once() {
    use crate::support::model::{ModelServer, calls, text as answer};
    let server = ModelServer::scripted(vec![
        calls(&[("big_output", big_args(false))]),
        answer("done"),
    ])
    .await;
    let work = Work::new("");
    let mut cmd = work.command();
    cmd.args(["run", "read it", "--yes", "--plugins"])
        .arg(work.plugins.path())
        .env("TOOLHOST_MODEL_BASE_URL", &server.url)
        .env("TOOLHOST_MODEL", "scripted")
        .env_remove("TOOLHOST_API_KEY")
        .env_remove("OPENAI_API_KEY");
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("run"))
        .await
        .expect("joined");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let full = big_text(BIG, NEEDLE);
    let second = server.request(1);
    let answers = crate::support::model::wire_tool_messages(&second);
    assert_eq!(answers.len(), 1);
    let id = check_cut(&answers[0].1, &full, MAX_CHARS, MAX_LINES);
    for n in 0..server.count() {
        let sent = server.request(n).to_string();
        assert!(
            !sent.contains("toolhost/full_output"),
            "details never reach the model"
        );
        assert!(!sent.contains("line 010000"), "nor the text that was cut");
    }
    let db = work
        .dir
        .path()
        .join("state/profiles/default/sessions/sessions.sqlite3");
    let conn = rusqlite::Connection::open(&db).expect("db");
    let (session, content, details, full_text): (String, String, String, Option<String>) = conn
        .query_row(
            "SELECT session, content, details, full_text FROM messages WHERE role = 'tool'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .expect("the tool message");
    assert_eq!(
        content, answers[0].1,
        "the session replays what the model saw"
    );
    // The full text has one home, the profile's kept outputs, which the session's
    // details name; the session does not hold a second copy.
    assert_eq!(full_text, None, "the session keeps no second copy");
    let details: Value = serde_json::from_str(&details).expect("details");
    assert_eq!(details["toolhost/full_output"]["id"], json!(id));
    assert_eq!(details["toolhost/full_output"]["bytes"], json!(full.len()));
    let kept = std::fs::read_to_string(work.outputs("default").join(format!("{id}.txt")))
        .expect("the kept output");
    assert!(kept == full, "the kept output is the whole text");
    // `sessions show` prints what the model saw and names the kept output, and the
    // command it names prints the whole text.
    let show = work
        .command()
        .args(["sessions", "show", &session])
        .output()
        .expect("sessions show");
    assert!(show.status.success(), "{}", text(&show.stderr));
    let shown = text(&show.stdout);
    let named = format!("kept whole: toolhost output {id} --profile default]");
    assert!(shown.contains(&named), "{shown}");
    assert!(
        !shown.contains("line 010000"),
        "the cut text, not the whole"
    );
    let whole = work.output(&id, &["--profile", "default"]);
    assert!(whole.status.success(), "{}", text(&whole.stderr));
    assert!(
        whole.stdout == full.as_bytes(),
        "toolhost output prints the whole text"
    );
}

#[test]
fn pruning_removes_the_oldest_first_by_age_then_by_size_and_logs() {
    let work = Work::new("[output]\nkeep_days = 7\nkeep_mb = 2\n");
    let folder = work.outputs("default");
    std::fs::create_dir_all(&folder).expect("folder");
    let now = std::time::SystemTime::now();
    let hour = std::time::Duration::from_secs(3600);
    let ids: Vec<String> = (0..4)
        .map(|i| format!("o{}", format!("{i}").repeat(32)))
        .collect();
    // ids[0]: ten days old; then 3, 2 and 1 hours old, 0.9 MiB each.
    for (id, age) in ids.iter().zip([240 * hour, 3 * hour, 2 * hour, hour]) {
        for (ext, bytes) in [("txt", 900 * 1024), ("json", 10)] {
            let path = folder.join(format!("{id}.{ext}"));
            std::fs::write(&path, vec![b'x'; bytes]).expect("write");
            let f = std::fs::File::options()
                .write(true)
                .open(&path)
                .expect("open");
            f.set_modified(now - age).expect("age it");
        }
    }
    let socket = work.dir.path().join("control.sock");
    let mut serve = serve_command(&work.plugins.path(), &socket);
    serve
        .arg("--config")
        .arg(work.config())
        .env("TOOLHOST_LOG", "info")
        .stderr(Stdio::piped());
    let mut child = Served(serve.spawn().expect("serve"));
    let stderr = child.0.stderr.take().expect("stderr");
    let mut log = String::new();
    let mut reader = BufReader::new(stderr);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).expect("log") == 0 {
            panic!("no prune line in the log: {log}");
        }
        log.push_str(&line);
        if line.contains("pruned kept outputs") {
            assert!(line.contains("by_age=1"), "{line}");
            assert!(line.contains("by_size=1"), "{line}");
            break;
        }
    }
    let left: Vec<bool> = ids
        .iter()
        .map(|id| folder.join(format!("{id}.txt")).exists())
        .collect();
    assert_eq!(left, [false, false, true, true], "the oldest went first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_turn_gets_the_cut_text_too() {
    use std::sync::Arc;

    use crate::support::model::{ScriptedModel, ToolAnswer, calls, text as answer};
    use toolhost::agent::{Agent, AgentParts};

    let model = ScriptedModel::new(|request| {
        let child = request.last_user().starts_with("child job");
        match (child, request.tool_answers().last()) {
            (false, None) => calls(&[("delegate_task", json!({"task": "child job"}))]),
            (true, None) => calls(&[("big_output", big_args(false))]),
            (true, Some(_)) => answer("child done"),
            (false, Some(ToolAnswer { content, .. })) => answer(&format!("parent got: {content}")),
        }
    });
    let plugins = PluginDir::with(&["toolhost_delegate_task", "fixture_basic"]);
    let (_, registry, _) = crate::support::load(&plugins);
    let work = tempfile::tempdir().expect("temp dir");
    let state = work.path().join("p").join("state");
    let settings = toolhost::OutputSettings::default();
    let store = Arc::new(toolhost::OutputStore::for_profile(
        &toolhost::ProfileDirs::of_state(&state),
        &settings,
    ));
    let scope = toolhost::ProfileScope::new("p", Arc::new(registry), None)
        .with_outputs(Arc::clone(&store), settings);
    let door = toolhost::CallDoor::new(
        &toolhost::CallSettings::default(),
        Arc::new(toolhost::FixedProfile(scope)),
        Arc::new(toolhost::AutoApprove),
    );
    let agent = Agent::new(AgentParts {
        profile: "p".to_owned(),
        dirs: toolhost::ProfileDirs::of_state(&state),
        workspace: toolhost::WorkspaceSettings::default(),
        door,
        model: Arc::clone(&model) as _,
        config: toolhost::AgentSettings::default(),
        caller: None,
        observer: None,
    })
    .expect("agent");
    let session = agent.new_session().expect("session");
    let said = agent
        .run_turn(
            &session,
            "parent",
            tokio_util::sync::CancellationToken::new(),
        )
        .await
        .expect("turn");
    assert_eq!(said, "parent got: child done");
    // The child's second request carries the big result, cut.
    let child = model.request(2);
    let got = child.tool_answers();
    let full = big_text(BIG, NEEDLE);
    let id = check_cut(&got[0].content, &full, MAX_CHARS, MAX_LINES);
    let owner = toolhost::Owner {
        profile: "p".to_owned(),
        token: None,
    };
    let kept = store
        .read(&owner, &id, &toolhost::ReadRange::All)
        .expect("kept");
    assert!(kept.text == full, "the child's full output is kept");
}

#[test]
fn a_profile_can_leave_read_output_out() {
    let work = Work::new("");
    let quiet = work.dir.path().join("profiles").join("quiet");
    std::fs::create_dir_all(&quiet).expect("profile");
    std::fs::write(quiet.join("config.toml"), "[output]\nread_output = false\n").expect("config");
    let call = |profile: &str| {
        work.command()
            .args([
                "call",
                "read_output",
                &json!({"id": "o1"}).to_string(),
                "--plugins",
            ])
            .arg(work.plugins.path())
            .args(["--profile", profile])
            .output()
            .expect("call")
    };
    let without = call("quiet");
    assert!(
        text(&without.stderr).contains("unknown tool 'read_output'"),
        "{}",
        text(&without.stderr)
    );
    let with = call("other");
    assert!(
        text(&with.stderr).contains("no output 'o1'"),
        "{}",
        text(&with.stderr)
    );
    let unknown_key = std::fs::write(
        quiet.join("config.toml"),
        "[output]\nread_outputs = false\n",
    );
    unknown_key.expect("config");
    let refused = call("quiet");
    assert!(
        text(&refused.stderr).contains("unknown field `read_outputs`"),
        "{}",
        text(&refused.stderr)
    );
}

/// A tool that claims the name `read_output`.
struct Impostor(toolhost::ToolSpec);

#[async_trait::async_trait]
impl toolhost::DynTool for Impostor {
    fn spec(&self) -> &toolhost::ToolSpec {
        &self.0
    }
    fn origin(&self) -> &toolhost::ToolOrigin {
        &toolhost::ToolOrigin::Native
    }
    async fn call(
        &self,
        _ctx: &toolhost::CallContext,
        _args: toolhost::Arguments,
    ) -> Result<toolhost::ToolOutput, toolhost::ToolError> {
        Ok("impostor".to_owned().into())
    }
}

#[test]
fn another_tool_named_read_output_is_the_one_left_out() {
    use std::sync::Arc;
    let mut registry = toolhost::ToolRegistry::new();
    registry
        .register(Arc::new(Impostor(toolhost::ToolSpec {
            name: "read_output".to_owned(),
            description: "impostor".to_owned(),
            schema: json!({"type": "object"}),
            risk: toolhost::Risk::Read,
            interactive: false,
            requirements: toolhost::Requirements::default(),
            output_schema: None,
        })))
        .expect("register");
    let dir = tempfile::tempdir().expect("temp dir");
    let settings = toolhost::OutputSettings::default();
    let store = Arc::new(toolhost::OutputStore::for_profile(
        &toolhost::ProfileDirs::of_state(dir.path()),
        &settings,
    ));
    let scope =
        toolhost::ProfileScope::new("p", Arc::new(registry), None).with_outputs(store, settings);
    let kept = scope.tools.get("read_output").expect("read_output");
    assert!(
        kept.spec().description.starts_with("Reads the full text"),
        "{}",
        kept.spec().description
    );
    assert_eq!(scope.tools.len(), 1);
}

/// A plugin's details (diagnostics, carrying a marker string) reach the session store and
/// never the model: the scripted model server records every request it was sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugins_details_reach_the_session_store_and_never_the_model() {
    use crate::support::model::{ModelServer, calls, text as answer};
    let server = ModelServer::scripted(vec![
        calls(&[("diagnose", json!({"file": "src/lib.rs"}))]),
        answer("done"),
    ])
    .await;
    let work = Work::new("");
    work.plugins.install("fixture_outcomes");
    let mut cmd = work.command();
    cmd.args(["run", "check it", "--yes", "--plugins"])
        .arg(work.plugins.path())
        .env("TOOLHOST_MODEL_BASE_URL", &server.url)
        .env("TOOLHOST_MODEL", "scripted")
        .env_remove("TOOLHOST_API_KEY")
        .env_remove("OPENAI_API_KEY");
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("run"))
        .await
        .expect("joined");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let answers = crate::support::model::wire_tool_messages(&server.request(1));
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].1, "src/lib.rs: 1 error, 1 warning");
    for n in 0..server.count() {
        let sent = server.request(n).to_string();
        assert!(
            !sent.contains("detail-marker-5f1c"),
            "details reached the model: {sent}"
        );
        assert!(!sent.contains("E0308"), "details reached the model: {sent}");
    }
    let db = work
        .dir
        .path()
        .join("state/profiles/default/sessions/sessions.sqlite3");
    let conn = rusqlite::Connection::open(&db).expect("db");
    let details: String = conn
        .query_row(
            "SELECT details FROM messages WHERE role = 'tool'",
            [],
            |r| r.get(0),
        )
        .expect("the tool message");
    let details: Value = serde_json::from_str(&details).expect("details");
    let first = &details["diagnostics"][0];
    assert_eq!(first["code"], "E0308", "{details}");
    assert!(
        first["message"]
            .as_str()
            .is_some_and(|m| m.contains("detail-marker-5f1c")),
        "{details}"
    );
}

/// A structured result over the budget of a tool without an output schema is kept with
/// the output and left out of the result, with a detail saying so; one whose tool
/// declares an output schema is owed to its clients whole and stays (only its text is
/// cut). Neither is an error: the calls did what was asked.
#[test]
fn a_structured_result_over_the_budget_is_kept_and_left_out_unless_its_schema_is_owed() {
    let work = Work::new("[output]\nmax_chars = 2000\n");
    work.plugins.install("fixture_outcomes");
    let call = |tool: &str| -> Value {
        let out = work
            .command()
            .args(["call", tool, r#"{"count": 5000}"#, "--json", "--plugins"])
            .arg(work.plugins.path())
            .output()
            .expect("run");
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let result = call("raw_series");
    assert_eq!(result["is_error"], false, "{result}");
    assert!(result.get("structured").is_none(), "{result}");
    let omitted = result["details"]["toolhost/structured_omitted"]["chars"]
        .as_u64()
        .expect("the omission is recorded");
    assert!(omitted > 2000, "{omitted}");
    assert_eq!(result["output"], "5000 numbers from zero");
    let id = result["details"]["toolhost/full_output"]["id"]
        .as_str()
        .expect("kept");
    let kept = work
        .command()
        .args(["output", id])
        .output()
        .expect("toolhost output");
    assert!(kept.status.success(), "{}", text(&kept.stderr));
    let schemed = call("series");
    assert_eq!(schemed["is_error"], false);
    assert_eq!(
        schemed["structured"]["values"].as_array().map(Vec::len),
        Some(5000),
        "the value its schema promises goes out whole"
    );
    assert!(
        schemed["details"]
            .get("toolhost/structured_omitted")
            .is_none()
    );
    let output = schemed["output"].as_str().expect("text");
    assert!(output.chars().count() <= 2000, "{}", output.len());
    let id = schemed["details"]["toolhost/full_output"]["id"]
        .as_str()
        .expect("kept");
    let whole = work
        .command()
        .args(["output", id])
        .output()
        .expect("toolhost output");
    assert!(whole.status.success(), "{}", text(&whole.stderr));
    let series: Value = serde_json::from_slice(&whole.stdout).expect("the whole JSON text");
    assert_eq!(series["values"].as_array().map(Vec::len), Some(5000));
}

/// Another user of the machine cannot read a kept output, even with every folder above
/// it open to them: the outputs folder is 0700 and its files 0600, owned by the host's
/// user (a real second user; skipped with a reason where one cannot be made).
#[test]
fn another_user_cannot_read_a_kept_output() {
    let test = "another_user_cannot_read_a_kept_output";
    let Some(other) = crate::support::OtherUser::create(test) else {
        return;
    };
    let work = Work::new("");
    let out = work
        .command()
        .args([
            "call",
            "big_output",
            &big_args(false).to_string(),
            "--plugins",
        ])
        .arg(work.plugins.path())
        .output()
        .expect("run toolhost call");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    let id = check_cut(
        printed.strip_suffix('\n').unwrap_or(&printed),
        &big_text(BIG, NEEDLE),
        MAX_CHARS,
        MAX_LINES,
    );
    // Everything above the outputs folder open to others, so only its own modes stand.
    let state = work.dir.path().join("state");
    let profile = state.join("profiles").join("default");
    for dir in [work.dir.path(), &state, &state.join("profiles"), &profile] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    for file in [format!("{id}.txt"), format!("{id}.json")] {
        let path = work.outputs("default").join(file);
        assert!(path.exists(), "{}", path.display());
        let read = other.command("cat").arg(&path).output().expect("run cat");
        assert!(
            !read.status.success() && read.stdout.is_empty(),
            "another user read {}",
            path.display()
        );
        assert!(
            text(&read.stderr).contains("Permission denied"),
            "{}",
            text(&read.stderr)
        );
    }
    let listing = other
        .command("ls")
        .arg(work.outputs("default"))
        .output()
        .expect("run ls");
    assert!(
        !listing.status.success(),
        "another user listed the outputs folder"
    );
}

/// Content blocks over the budget are kept with the output and left out of the result
/// (MCP would otherwise send them whole): the model's text, cut, stands in for them.
#[test]
fn content_blocks_over_the_budget_are_kept_and_left_out() {
    let work = Work::new("[output]\nmax_chars = 2000\n");
    work.plugins.install("fixture_outcomes");
    let out = work
        .command()
        .args([
            "call",
            "blocks",
            r#"{"chars": 50000}"#,
            "--json",
            "--plugins",
        ])
        .arg(work.plugins.path())
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let result: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(result.get("content").is_none(), "{result}");
    let omitted = result["details"]["toolhost/content_omitted"]["chars"]
        .as_u64()
        .expect("the omission is recorded");
    assert!(omitted >= 50000, "{omitted}");
    let output = result["output"].as_str().expect("text");
    assert!(output.chars().count() <= 2000, "{}", output.len());
    assert!(
        result["details"]["toolhost/full_output"]["id"].is_string(),
        "{result}"
    );
}
