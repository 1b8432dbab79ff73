//! The MCP frontend with a real client: the official Python SDK (PyPI `mcp` 2.x) drives
//! `toolhost serve --mcp` over stdio and streamable HTTP, in the default (2026-07-28,
//! sessionless) and legacy (initialize handshake) protocol modes. The checks themselves
//! are in tests/mcp/client_checks.py; the virtualenv is made on first use.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::support::{
    PluginDir, echo_build, so, spawn_http_server, token_add, toolhost_command, workspace_root,
};

/// The version of the Python SDK the tests use (as `.ci/run` installs it).
/// What the test virtualenv holds (as `tests/mcp/setup.sh` installs it): the MCP SDK, and
/// Prometheus' own client, whose parsers read both metrics formats.
const PYTHON_PACKAGES: [&str; 2] = ["mcp==2.3.0", "prometheus-client==0.26.0"];

/// The virtualenv's python with the MCP SDK, created under target/ on first use.
pub(crate) fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let venv = workspace_root()
            .join("target")
            .join("mcp-tools")
            .join("venv");
        let python = venv.join("bin").join("python");
        let ready = Command::new(&python)
            .args(["-c", "import mcp, mcp_types, prometheus_client"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ready {
            let made = Command::new("python3")
                .args(["-m", "venv"])
                .arg(&venv)
                .status()
                .expect("python3 is needed for the MCP client tests (python3 -m venv)");
            assert!(made.success(), "python3 -m venv {} failed", venv.display());
            let installed = Command::new(venv.join("bin").join("pip"))
                .args(["install", "--quiet"])
                .args(PYTHON_PACKAGES)
                .status()
                .expect("run pip");
            assert!(
                installed.success(),
                "pip install {PYTHON_PACKAGES:?} failed"
            );
        }
        python
    })
}

/// The plugins the checks need: the basic fixture (echo, risky_write, wait_cancel, ...)
/// and the echo fixture at v1 (build_version).
fn plugins() -> PluginDir {
    // clarify asks the client a question; the conformance fixture's test_sampling asks
    // its model.
    let dir = PluginDir::with(&[
        "fixture_basic",
        "fixture_outcomes",
        "toolhost_clarify",
        "fixture_conformance",
    ]);
    let tmp = dir.path().join(".libfixture_echo.so.tmp");
    std::fs::copy(echo_build("v1"), &tmp).expect("copy echo v1");
    std::fs::rename(&tmp, dir.path().join("libfixture_echo.so")).expect("install echo v1");
    dir
}

/// Kills the server when the test ends, however it ends.
pub(crate) struct Server(pub(crate) Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `toolhost serve --mcp http` on a free port, with a bearer token made in `state`
/// (its `XDG_STATE_HOME`); returns it with its URL and the token.
pub(crate) fn http_server(
    plugins: &Path,
    control: &Path,
    state: &Path,
) -> (Server, String, String) {
    http_server_with(plugins, control, state, &[])
}

/// [`http_server`] with `extra` arguments for `serve` (`--isolate`).
fn http_server_with(
    plugins: &Path,
    control: &Path,
    state: &Path,
    extra: &[&str],
) -> (Server, String, String) {
    let token = token_add(state, "python-sdk");
    let mut command = toolhost_command();
    command
        .args([
            "serve",
            "--mcp",
            "http",
            "--listen",
            "127.0.0.1:0",
            "--plugins",
        ])
        .arg(plugins)
        .arg("--control")
        .arg(control)
        .args(extra)
        .env("XDG_STATE_HOME", state);
    let (child, port) = spawn_http_server(command);
    let server = Server(child);
    let url = format!("http://127.0.0.1:{port}/mcp");
    (server, url, token)
}

fn run_checks(transport: &str, mode: &str) {
    run_checks_with(transport, mode, false);
}

fn run_checks_with(transport: &str, mode: &str, isolate: bool) {
    let python = python();
    let plugins = plugins();
    let work = tempfile::tempdir().expect("temp dir");
    let control = work.path().join("control.sock");
    let _server;
    let mut cmd = Command::new(python);
    cmd.arg(workspace_root().join("tests/mcp/client_checks.py"))
        .args(["--transport", transport, "--mode", mode, "--plugins"])
        .arg(plugins.path())
        .arg("--toolhost")
        .arg(env!("CARGO_BIN_EXE_toolhost"))
        .arg("--control")
        .arg(&control)
        .arg("--echo-v2")
        .arg(echo_build("v2"))
        .arg("--hello")
        .arg(so("hello_tools"))
        .arg("--work")
        .arg(work.path());
    if isolate {
        cmd.arg("--isolate");
        // The client starts the server with this work folder as its config home; its
        // plugins write markers there, which the workers' sandbox must allow.
        let config = work.path().join("toolhost");
        std::fs::create_dir_all(&config).expect("config dir");
        std::fs::write(
            config.join("config.toml"),
            format!(
                "[isolation]\nwrite_paths = [{:?}]\n",
                work.path().display().to_string()
            ),
        )
        .expect("write config");
    }
    if transport == "http" {
        let (server, url, token) = http_server(&plugins.path(), &control, work.path());
        _server = server;
        cmd.args(["--url", &url, "--token", &token]);
    }
    let started = Instant::now();
    let out = cmd.output().expect("run the Python MCP client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the Python MCP client's checks failed ({transport}, {mode}, after {:.1} s):\n{stdout}\n{}",
        started.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("a new plugin's tool is listed and callable"),
        "{stdout}"
    );
    assert!(
        stdout.contains("structured results, outputSchema, details in _meta"),
        "{stdout}"
    );
    assert!(
        stdout.contains("a plugin's ask_user arrives as an elicitation")
            && stdout.contains("a plugin's sampling request reaches the client's model"),
        "{stdout}"
    );
    assert!(
        stdout.contains("a plugin's form, sampling and roots questions at once, and its roots")
            && stdout.contains("a plugin's page to open arrives as URL elicitation"),
        "{stdout}"
    );
    assert!(
        mode == "legacy" || stdout.contains("requestState: tampered, replayed"),
        "{stdout}"
    );
}

#[test]
fn python_sdk_over_stdio_default_protocol() {
    run_checks("stdio", "auto");
}

/// The same checks with every plugin in a worker process: progress, cancellation and a
/// plugin's question (elicitation, which needs the session protocol) cross the worker
/// protocol, a reload starts a new worker.
#[test]
fn python_sdk_over_stdio_with_every_plugin_in_a_worker() {
    run_checks_with("stdio", "legacy", true);
}

#[test]
fn python_sdk_over_stdio_legacy_protocol() {
    run_checks("stdio", "legacy");
}

#[test]
fn python_sdk_over_http_default_protocol() {
    run_checks("http", "auto");
}

#[test]
fn python_sdk_over_http_legacy_protocol() {
    run_checks("http", "legacy");
}

#[test]
fn serve_mcp_refuses_an_unknown_profile_and_profile_without_mcp() {
    let plugins = plugins();
    let work = tempfile::tempdir().expect("temp dir");
    let out = toolhost_command()
        .args([
            "serve",
            "--mcp",
            "stdio",
            "--profile",
            "nobody",
            "--plugins",
        ])
        .arg(plugins.path())
        .arg("--control")
        .arg(work.path().join("c.sock"))
        .stdin(Stdio::null())
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("no profile 'nobody'"), "{stderr}");

    let out = toolhost_command()
        .args(["serve", "--profile", "default", "--plugins"])
        .arg(plugins.path())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--profile goes with --mcp"));
}

/// Waits (bounded) for a line containing `needle` on a child's stderr.
fn wait_for_line(child: &mut Child, needle: &'static str) -> String {
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains(needle) {
                let _ = tx.send(line);
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("no line containing {needle:?} on stderr"))
}

#[test]
fn a_second_stdio_server_gets_its_own_control_socket_and_status_answers_on_it() {
    let plugins = plugins();
    let runtime_dir = tempfile::tempdir().expect("temp dir");
    let start = || {
        toolhost_command()
            .args(["serve", "--mcp", "stdio", "--plugins"])
            .arg(plugins.path())
            .env("XDG_RUNTIME_DIR", runtime_dir.path())
            .env("TOOLHOST_LOG", "info,rmcp=warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start toolhost serve --mcp stdio")
    };
    let mut first = Server(start());
    wait_for_line(&mut first.0, "toolhost is serving");
    let mut second = Server(start());
    let line = wait_for_line(&mut second.0, "this one's control socket is");
    let own = line
        .rsplit("this one's control socket is ")
        .next()
        .expect("path")
        .trim();
    assert!(
        own.ends_with(&format!("control-{}.sock", second.0.id())),
        "{line}"
    );
    let status = toolhost_command()
        .args(["status", "--json", "--control", own])
        .output()
        .expect("run status");
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).expect("JSON");
    assert_eq!(status["pid"], second.0.id());
}

/// A minimal MCP client on a child's stdio: JSON-RPC lines, the 2025-11-25 handshake.
pub(crate) struct RawClient {
    server: Server,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<serde_json::Value>,
    /// Lines on the server's stdout that were not JSON (there must be none).
    garbage: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    next_id: u64,
    /// The answer to its `initialize`.
    pub(crate) init: serde_json::Value,
}

impl RawClient {
    pub(crate) fn start(mut cmd: Command) -> RawClient {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start toolhost serve --mcp stdio");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        let garbage = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = std::sync::Arc::clone(&garbage);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                match serde_json::from_str(&line) {
                    Ok(v) => {
                        let _ = tx.send(v);
                    }
                    Err(_) => seen.lock().expect("lock").push(line),
                }
            }
        });
        let mut client = RawClient {
            server: Server(child),
            stdin,
            lines,
            garbage,
            next_id: 0,
            init: serde_json::Value::Null,
        };
        let init = client.request(
            "initialize",
            serde_json::json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw-test-client", "version": "0"}
            }),
        );
        assert_eq!(init["result"]["serverInfo"]["name"], "toolhost", "{init}");
        assert_eq!(
            init["result"]["capabilities"]["tools"]["listChanged"], true,
            "{init}"
        );
        client.send(&serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        client.init = init;
        client
    }

    /// Writes `line` (and a newline) as it is, JSON or not.
    pub(crate) fn send_raw(&mut self, line: &str) {
        use std::io::Write as _;
        writeln!(self.stdin, "{line}").expect("write");
        self.stdin.flush().expect("flush");
    }

    /// The next message the server sends, within 60 s.
    pub(crate) fn next_message(&mut self) -> serde_json::Value {
        self.lines
            .recv_timeout(Duration::from_secs(60))
            .expect("a message within 60 s")
    }

    /// Lines on its stdout that were not JSON.
    pub(crate) fn garbage(&self) -> Vec<String> {
        self.garbage.lock().expect("lock").clone()
    }

    fn send(&mut self, message: &serde_json::Value) {
        use std::io::Write as _;
        writeln!(self.stdin, "{message}").expect("write");
        self.stdin.flush().expect("flush");
    }

    /// The whole response (result or error) to a request.
    pub(crate) fn request(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(
            &serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        );
        loop {
            let message = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .expect("a response within 60 s");
            if message["id"] == id {
                return message;
            }
        }
    }
}

#[test]
fn a_profile_sees_only_its_tools_and_the_config_can_approve_for_clients_without_elicitation() {
    let plugins = plugins();
    let config = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        config.path().join("config.toml"),
        "[mcp]\nwithout_elicitation = \"approve\"\n",
    )
    .expect("config");
    let profile = config.path().join("profiles").join("narrow");
    std::fs::create_dir_all(&profile).expect("profile dir");
    std::fs::write(
        profile.join("config.toml"),
        "tools = [\"echo\", \"risky_write\"]\n",
    )
    .expect("profile");
    let mut cmd = toolhost_command();
    cmd.arg("--config")
        .arg(config.path().join("config.toml"))
        .args([
            "serve",
            "--mcp",
            "stdio",
            "--profile",
            "narrow",
            "--plugins",
        ])
        .arg(plugins.path())
        .arg("--control")
        .arg(config.path().join("c.sock"));
    let mut client = RawClient::start(cmd);

    let list = client.request("tools/list", serde_json::json!({}));
    let mut names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    names.sort_unstable();
    // read_output is in every profile (unless its [output] read_output = false).
    assert_eq!(names, ["echo", "read_output", "risky_write"], "{list}");

    // A tool outside the profile is unknown to this client: a protocol error.
    let outside = client.request(
        "tools/call",
        serde_json::json!({"name": "build_version", "arguments": {}}),
    );
    assert_eq!(outside["error"]["code"], -32602, "{outside}");
    assert!(
        outside["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("build_version") && m.contains("narrow")),
        "{outside}"
    );

    // This client declared no elicitation; the config approves for it.
    let work = tempfile::tempdir().expect("temp dir");
    let marker = work.path().join("ran");
    let write = client.request(
        "tools/call",
        serde_json::json!({"name": "risky_write", "arguments": {"marker": marker}}),
    );
    assert_eq!(write["result"]["isError"], false, "{write}");
    assert!(marker.exists());
    drop(client.server);
}

#[test]
fn over_stdio_a_program_a_plugin_starts_cannot_touch_the_protocol_stream() {
    // edit_text starts $EDITOR; this one prints to stdout and reads stdin, which would
    // corrupt the stream and swallow a request if it inherited the client's pipes.
    let plugins = PluginDir::with(&["toolhost_utils", "fixture_echo"]);
    let work = tempfile::tempdir().expect("temp dir");
    let editor = work.path().join("editor.sh");
    std::fs::write(
        &editor,
        "#!/bin/sh\necho 'not JSON, from the editor'\nread line\necho \"edited, read: $line\" > \"$1\"\n",
    )
    .expect("write editor");
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let mut cmd = toolhost_command();
    cmd.args(["serve", "--mcp", "stdio", "--plugins"])
        .arg(plugins.path())
        .arg("--control")
        .arg(work.path().join("c.sock"))
        .env("EDITOR", &editor)
        .env_remove("VISUAL");
    let mut client = RawClient::start(cmd);
    let edited = client.request(
        "tools/call",
        serde_json::json!({"name": "edit_text", "arguments": {"text": "draft"}}),
    );
    assert_eq!(edited["result"]["isError"], false, "{edited}");
    assert_eq!(
        edited["result"]["content"][0]["text"], "edited, read: \n",
        "{edited}"
    );
    let echo = client.request(
        "tools/call",
        serde_json::json!({"name": "echo", "arguments": {"text": "still in sync"}}),
    );
    assert_eq!(
        echo["result"]["content"][0]["text"], "still in sync",
        "{echo}"
    );
    assert!(
        client.garbage.lock().expect("lock").is_empty(),
        "non-JSON on the protocol stream: {:?}",
        client.garbage.lock().expect("lock")
    );
}

/// The hint "(check the arguments against the inputSchema ...)" goes only with arguments
/// the schema refused (`SchemaViolation`); a tool's own "invalid arguments" (hello's
/// unknown language) is not a schema problem, and the hint would mislead the model.
#[test]
fn the_input_schema_hint_is_given_only_for_schema_violations() {
    let plugins = PluginDir::with(&["hello_tools"]);
    let state = tempfile::tempdir().expect("temp dir");
    let mut cmd = toolhost_command();
    cmd.args(["serve", "--mcp", "stdio", "--plugins"])
        .arg(plugins.path())
        .arg("--control")
        .arg(state.path().join("c.sock"));
    let mut client = RawClient::start(cmd);
    let call = |client: &mut RawClient, arguments: serde_json::Value| {
        let reply = client.request(
            "tools/call",
            serde_json::json!({"name": "greet", "arguments": arguments}),
        );
        assert_eq!(reply["result"]["isError"], true, "{reply}");
        reply["result"]["content"][0]["text"]
            .as_str()
            .expect("text")
            .to_owned()
    };
    let hint = "(check the arguments against the inputSchema of 'greet')";
    let schema = call(&mut client, serde_json::json!({"name": 42}));
    assert!(
        schema.starts_with("invalid arguments: ") && schema.ends_with(hint),
        "{schema}"
    );
    let own = call(
        &mut client,
        serde_json::json!({"name": "Ada", "language": "xx"}),
    );
    assert!(
        own.starts_with("invalid arguments: language 'xx'") && !own.contains("inputSchema"),
        "{own}"
    );
}

/// The TypeScript SDKs' own clients, v1 (2025-11-25: server requests) and v2 (2026-07-28:
/// input-required results), answer clarify's question and test_sampling's request with
/// their handlers, and get the tools' results (tests/mcp/ts_checks.mjs).
#[test]
fn typescript_sdk_clients_answer_a_plugins_question_and_sampling_in_both_generations() {
    let plugins = PluginDir::with(&["toolhost_clarify", "fixture_conformance"]);
    for (sdk, protocol) in [
        ("v1", "2025-11-25"),
        ("v2", "2026-07-28"),
        ("v2-legacy", "2025-11-25"),
    ] {
        let work = tempfile::tempdir().expect("temp dir");
        let mut script = node_script("ts_checks.mjs");
        script
            .arg(sdk)
            .arg(env!("CARGO_BIN_EXE_toolhost"))
            .arg(plugins.path())
            .arg(work.path());
        let stdout = passed(script, sdk);
        assert!(
            stdout.contains("a plugin's question reaches the elicitation handler")
                && stdout.contains("a plugin's sampling request reaches the sampling handler"),
            "{sdk}: {stdout}"
        );
        assert!(
            sdk == "v1" || stdout.contains(&format!("protocol {protocol}")),
            "{sdk} speaks {protocol}: {stdout}"
        );
    }
}

/// A schema that names its dialect is served as written: the 2020-12 keywords of the
/// conformance suite's tool (`$schema`, `$defs` with an `$anchor`, `$ref`, `allOf` of
/// `anyOf`, `if`/`then`/`else`, `additionalProperties`) reach the client unchanged.
#[test]
fn a_json_schema_2020_12_tool_is_listed_with_every_keyword_as_written() {
    let plugins = PluginDir::with(&["fixture_conformance"]);
    let work = tempfile::tempdir().expect("temp dir");
    let mut cmd = crate::support::toolhost_command();
    cmd.args(["serve", "--mcp", "stdio", "--no-watch", "--plugins"])
        .arg(plugins.path())
        .arg("--control")
        .arg(work.path().join("c.sock"));
    let mut client = RawClient::start(cmd);
    let list = client.request("tools/list", serde_json::json!({}));
    let tool = list["result"]["tools"]
        .as_array()
        .and_then(|tools| {
            tools
                .iter()
                .find(|t| t["name"] == "json_schema_2020_12_tool")
        })
        .unwrap_or_else(|| panic!("json_schema_2020_12_tool listed: {list}"));
    let schema = &tool["inputSchema"];
    assert_eq!(
        schema["$schema"], "https://json-schema.org/draft/2020-12/schema",
        "{schema:#}"
    );
    assert_eq!(
        schema["$defs"]["address"]["$anchor"], "addressDef",
        "{schema:#}"
    );
    assert_eq!(
        schema["properties"]["address"]["$ref"], "#/$defs/address",
        "{schema:#}"
    );
    assert_eq!(
        schema["allOf"],
        serde_json::json!([{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}]),
        "{schema:#}"
    );
    assert_eq!(
        schema["if"]["properties"]["contactMethod"]["const"], "phone",
        "{schema:#}"
    );
    assert_eq!(
        (&schema["then"], &schema["else"]),
        (
            &serde_json::json!({"required": ["phone"]}),
            &serde_json::json!({"required": ["email"]})
        ),
        "{schema:#}"
    );
    assert_eq!(schema["additionalProperties"], false, "{schema:#}");
    // And the host validates calls against all of it: phone chosen, none given.
    let refused = client.request(
        "tools/call",
        serde_json::json!({"name": "json_schema_2020_12_tool",
                           "arguments": {"contactMethod": "phone", "email": "a@b.c"}}),
    );
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    let called = client.request(
        "tools/call",
        serde_json::json!({"name": "json_schema_2020_12_tool",
                           "arguments": {"contactMethod": "phone", "phone": "123"}}),
    );
    assert_eq!(called["result"]["isError"], false, "{called}");
}

/// `[mcp] client_answer_secs` bounds how long a plugin's question waits for a 2026-07-28
/// client: unanswered, the plugin is told so (its call fails, as `toolhost status`
/// counts) and the state is refused afterwards (tests/mcp/expiry_check.py).
#[test]
fn a_question_a_sessionless_client_leaves_unanswered_ends_at_the_configured_limit() {
    let plugins = PluginDir::with(&["toolhost_clarify"]);
    let work = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(work.path().join("toolhost")).expect("config dir");
    std::fs::write(
        work.path().join("toolhost/config.toml"),
        "[mcp]\nclient_answer_secs = 1\n",
    )
    .expect("config");
    let mut script = Command::new(python());
    script
        .arg(workspace_root().join("tests/mcp/expiry_check.py"))
        .arg("--toolhost")
        .arg(env!("CARGO_BIN_EXE_toolhost"))
        .arg("--plugins")
        .arg(plugins.path())
        .arg("--work")
        .arg(work.path())
        .env("XDG_STATE_HOME", work.path().join("state"));
    let stdout = passed(script, "expiry_check.py");
    assert!(
        stdout.contains("the unanswered question ended the plugin's call in an error")
            && stdout.contains("the expired requestState is refused"),
        "{stdout}"
    );
}

/// `[mcp.oauth]` against a real OpenID provider (oidc-provider, started by
/// tests/mcp/oauth_checks.mjs on loopback): the challenge and metadata, a good token, the
/// tokens that must be refused (audience, issuer, expiry, `alg: none`, HMAC with the public
/// key, scope, a key published only later), a good token checked at once while a fetch of
/// the key set hangs, a scope choosing a profile, and the
/// TypeScript SDK's OAuth client calling a tool, audited under its subject.
#[test]
fn oauth_access_tokens_from_a_real_provider_are_checked_as_the_spec_says() {
    let plugins = PluginDir::with(&["fixture_basic"]);
    let work = tempfile::tempdir().expect("temp dir");
    // A free port for the host (its URL is the resource the tokens are minted for).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut script = node_script("oauth_checks.mjs");
    script
        .arg(env!("CARGO_BIN_EXE_toolhost"))
        .arg(plugins.path())
        .arg(work.path())
        .arg(port.to_string());
    let stdout = passed(script, "oauth_checks.mjs");
    for check in [
        "no token: 401 naming the protected-resource metadata",
        "a token the provider issued for this resource is accepted",
        "another audience: 401",
        "another issuer: 401",
        "expired: 401",
        "alg none: 401",
        "HMAC with the public key: 401",
        "without the required scope: 403",
        "a rotated key is fetched and accepted",
        "while a fetch of the key set hangs",
        "the tokens with a key id the issuer never published are refused",
        "a scope mapped to a profile serves that profile's tools",
        "the TypeScript SDK's OAuth client gets a token from the provider and calls a tool",
        "the audit log names the token's subject",
    ] {
        assert!(stdout.contains(check), "{check}: {stdout}");
    }
}

/// The tasks extension and several questions at once, by hand over HTTP
/// (tests/mcp/task_checks.py): a task polled to its result over new connections, hidden
/// from another token, cancelled (the plugin's call stops), asking a question answered by
/// tasks/update; -32021 for a required task and for a capability the client lacks; three
/// questions in one input-required result, the unanswered one asked again. In process
/// and with every plugin in a worker (the questions and the detach cross the worker's
/// connection).
#[test]
fn tasks_and_questions_asked_together_reach_a_2026_client_in_process_and_in_a_worker() {
    let plugins = PluginDir::with(&["fixture_conformance"]);
    for isolate in [false, true] {
        let work = tempfile::tempdir().expect("temp dir");
        let state = work.path().join("state");
        let extra: &[&str] = if isolate { &["--isolate"] } else { &[] };
        let (_server, url, token) = http_server_with(
            &plugins.path(),
            &work.path().join("control.sock"),
            &state,
            extra,
        );
        let other = token_add(&state, "someone-else");
        let mut script = Command::new(python());
        script
            .arg(workspace_root().join("tests/mcp/task_checks.py"))
            .arg(&url)
            .arg(&token)
            .arg(&other);
        let stdout = passed(script, &format!("task_checks.py (isolate: {isolate})"));
        for check in [
            "a task is polled to its result over new connections",
            "another caller's tasks/get and tasks/cancel: unknown task",
            "tasks/cancel stops the plugin's call; the task settles as cancelled",
            "a task's question is answered with tasks/update and the task completes",
            "without the extension: tasks run in the request, a required one gets -32021",
            "a capability the client did not declare: -32021 naming it",
            "three questions in one result; a partial answer is asked the rest; the call completes",
            "a used requestState is refused",
        ] {
            assert!(
                stdout.contains(check),
                "{check} (isolate: {isolate}): {stdout}"
            );
        }
    }
}

/// `tests/mcp/NAME` run by the Node the test tools pinned, from `target/mcp-tools` (where
/// its packages are installed).
fn node_script(name: &str) -> Command {
    let mut cmd = Command::new(crate::support::mcp_node());
    cmd.arg(workspace_root().join("tests/mcp").join(name))
        .current_dir(workspace_root().join("target/mcp-tools"));
    cmd
}

/// Runs a check script; its standard output, once it has exited successfully.
fn passed(mut script: Command, what: &str) -> String {
    let out = script.output().expect("run the check script");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
