//! MCP round trips over stdio, measured with one compiled client (raw JSON-RPC lines, no
//! SDK, so the client costs next to nothing): toolhost serving `echo` from a .so, against
//! a minimal rmcp server with the same echo compiled in, the Python SDK's server and
//! `@modelcontextprotocol/server-everything`'s echo, in the same run. Then the time from a
//! plugin file being replaced to the client receiving `notifications/tools/list_changed`.
//!
//! `cargo bench -p toolhost --bench mcp` (run `bash tests/mcp/setup.sh` first for the
//! Python and Node servers; without them those rows are skipped). Printed figures only.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const WARMUP: usize = 500;
const CALLS: usize = 3000;
const ROUNDS: usize = 10;
const RELOADS: usize = 30;
/// Set in the environment of this binary when it runs as the minimal rmcp server.
const ROLE: &str = "TOOLHOST_BENCH_ROLE";

/// A server process and a line-oriented JSON-RPC client on its stdio.
struct Peer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl Peer {
    fn start(mut command: Command) -> Peer {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {command:?}: {e}"));
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut peer = Peer {
            child,
            stdin,
            stdout,
            next_id: 0,
        };
        peer.request(
            "initialize",
            json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "bench-client", "version": "1.0"}
            }),
        );
        peer.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        peer
    }

    fn send(&mut self, message: &Value) {
        let mut line = serde_json::to_vec(message).expect("encode");
        line.push(b'\n');
        self.stdin.write_all(&line).expect("write to the server");
        self.stdin.flush().expect("flush");
    }

    /// The next message from the server.
    fn read(&mut self) -> Value {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self
                .stdout
                .read_line(&mut line)
                .expect("read from the server");
            assert!(n > 0, "the server closed its stdout");
            if !line.trim().is_empty() {
                return serde_json::from_str(&line).expect("the server wrote JSON");
            }
        }
    }

    /// Sends a request and returns its result, skipping notifications.
    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let message = self.read();
            if message.get("id") == Some(&json!(id)) {
                assert!(message.get("error").is_none(), "{method} failed: {message}");
                return message["result"].clone();
            }
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One server under test: its client connection and the call it answers.
struct Subject {
    name: &'static str,
    peer: Peer,
    params: Value,
    times: Vec<Duration>,
}

impl Subject {
    fn new(name: &'static str, command: Command, tool: &str, arguments: Value) -> Subject {
        let mut peer = Peer::start(command);
        let params = json!({"name": tool, "arguments": arguments});
        for _ in 0..WARMUP {
            peer.request("tools/call", params.clone());
        }
        Subject {
            name,
            peer,
            params,
            times: Vec::with_capacity(CALLS),
        }
    }

    fn calls(&mut self, n: usize) {
        for _ in 0..n {
            let started = Instant::now();
            let result = self.peer.request("tools/call", self.params.clone());
            self.times.push(started.elapsed());
            assert_ne!(result["isError"], json!(true), "{}: {result}", self.name);
        }
    }

    /// Median and p99 in microseconds.
    fn figures(&mut self) -> (f64, f64) {
        self.times.sort();
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let n = self.times.len();
        (us(self.times[n / 2]), us(self.times[n * 99 / 100]))
    }
}

/// The minimal rmcp server: one echo tool compiled in, stdio_pipes, nothing else.
fn minimal_rmcp_server() {
    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
        PaginatedRequestParams, ServerCapabilities, ServerConfig,
    };
    use rmcp::service::RequestContext;
    use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt as _};

    struct Echo;
    impl ServerHandler for Echo {
        fn get_info(&self) -> ServerConfig {
            ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
        }
        async fn list_tools(
            &self,
            _: Option<PaginatedRequestParams>,
            _: RequestContext<RoleServer>,
        ) -> Result<ListToolsResult, ErrorData> {
            let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}});
            let Value::Object(schema) = schema else {
                unreachable!()
            };
            Ok(ListToolsResult::with_all_items(vec![
                rmcp::model::Tool::new("echo", "Returns `text` unchanged.", Arc::new(schema)),
            ]))
        }
        async fn call_tool(
            &self,
            request: CallToolRequestParams,
            _: RequestContext<RoleServer>,
        ) -> Result<CallToolResponse, ErrorData> {
            let text = request
                .arguments
                .and_then(|a| a.get("text").and_then(Value::as_str).map(str::to_owned))
                .unwrap_or_default();
            Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let running = Echo
            .serve(rmcp::transport::stdio_pipes())
            .await
            .expect("serve");
        let _ = running.waiting().await;
    });
}

fn toolhost_command(toolhost: &Path, plugins: &Path, control: &Path) -> Command {
    let mut cmd = Command::new(toolhost);
    cmd.args(["serve", "--mcp", "stdio", "--plugins"])
        .arg(plugins)
        .arg("--control")
        .arg(control)
        .env("XDG_CONFIG_HOME", plugins.join("no-config"))
        .env("TOOLHOST_LOG", "warn");
    cmd
}

fn install(from: &Path, dir: &Path) {
    let tmp = dir.join(".libfixture_echo.so.tmp");
    std::fs::copy(from, &tmp).expect("copy the plugin");
    std::fs::rename(&tmp, dir.join("libfixture_echo.so")).expect("install the plugin");
}

/// Milliseconds from each replace of the plugin file to list_changed at the client.
fn list_changed_latency(toolhost: &Path, v1: &Path, v2: &Path) -> Vec<f64> {
    let dir = tempfile::tempdir().expect("temp dir");
    install(v1, dir.path());
    let mut peer = Peer::start(toolhost_command(
        toolhost,
        dir.path(),
        &dir.path().join("control.sock"),
    ));
    let mut times = Vec::with_capacity(RELOADS);
    for i in 0..RELOADS {
        let next = if i % 2 == 0 { v2 } else { v1 };
        let started = Instant::now();
        install(next, dir.path());
        loop {
            let message = peer.read();
            if message["method"] == "notifications/tools/list_changed" {
                break;
            }
        }
        times.push(started.elapsed().as_secs_f64() * 1e3);
        // Let the watcher go quiet so the next replace is its own event.
        std::thread::sleep(Duration::from_millis(150));
    }
    times
}

fn main() {
    if std::env::var_os(ROLE).is_some_and(|r| r == "rmcp-echo") {
        minimal_rmcp_server();
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let v2 = common::build_release(&["fixture-echo"], "v2").join("libfixture_echo.so");
    let v2 = keep(&v2, "v2");
    let release = common::build_release(&["fixture-echo"], "v1");
    let v1 = keep(&release.join("libfixture_echo.so"), "v1");
    // Cargo builds the package's binary, optimized, for its benchmarks.
    let toolhost = PathBuf::from(env!("CARGO_BIN_EXE_toolhost"));

    let dir = tempfile::tempdir().expect("temp dir");
    install(&v1, dir.path());
    let hello = || json!({"text": "hello"});
    let mut subjects = vec![
        Subject::new(
            "toolhost serve --mcp stdio (echo from a .so)",
            toolhost_command(&toolhost, dir.path(), &dir.path().join("control.sock")),
            "echo",
            hello(),
        ),
        Subject::new(
            "minimal rmcp server (echo compiled in)",
            {
                let mut cmd = Command::new(std::env::current_exe().expect("own path"));
                cmd.env(ROLE, "rmcp-echo");
                cmd
            },
            "echo",
            hello(),
        ),
    ];
    let tools = root.join("target").join("mcp-tools");
    let python = tools.join("venv").join("bin").join("python");
    if python.exists() {
        let mut cmd = Command::new(&python);
        cmd.arg(root.join("tests/mcp/echo_server.py"));
        subjects.push(Subject::new(
            "Python SDK server (mcp 2.3.0)",
            cmd,
            "echo",
            hello(),
        ));
    } else {
        println!("(skipped the Python SDK server: run `bash tests/mcp/setup.sh`)");
    }
    let node = tools.join("node_modules/.bin/node");
    let everything =
        tools.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if node.exists() && everything.exists() {
        let mut cmd = Command::new(&node);
        cmd.arg(&everything).arg("stdio");
        subjects.push(Subject::new(
            "server-everything echo (Node 22)",
            cmd,
            "echo",
            json!({"message": "hello"}),
        ));
    } else {
        println!("(skipped server-everything: run `bash tests/mcp/setup.sh`)");
    }
    // Interleaved rounds, so drift on a shared machine hits every server alike.
    for _ in 0..ROUNDS {
        for subject in &mut subjects {
            subject.calls(CALLS / ROUNDS);
        }
    }
    let rows: Vec<(&str, f64, f64)> = subjects
        .iter_mut()
        .map(|s| {
            let (m, p) = s.figures();
            (s.name, m, p)
        })
        .collect();
    drop(subjects);

    let baseline = rows[1].1;
    println!(
        "\ntools/call round trip over stdio, compiled raw client, median of {CALLS} calls \
         ({ROUNDS} interleaved rounds) after {WARMUP} warm-up"
    );
    println!(
        "{:<48} {:>10} {:>10} {:>12}",
        "server", "median us", "p99 us", "vs rmcp"
    );
    for (name, median, p99) in &rows {
        println!(
            "{name:<48} {median:>10.1} {p99:>10.1} {:>11.2}x",
            median / baseline
        );
    }

    let mut latency = list_changed_latency(&toolhost, &v1, &v2);
    latency.sort_by(f64::total_cmp);
    println!(
        "\nplugin file replaced -> notifications/tools/list_changed at the client ({RELOADS} replaces): \
         median {:.1} ms, max {:.1} ms (the watcher's debounce is 50 ms)",
        latency[RELOADS / 2],
        latency[RELOADS - 1]
    );
}

/// Keeps a copy of a build, since the next build overwrites the file.
fn keep(file: &Path, version: &str) -> PathBuf {
    let dir = file
        .parent()
        .expect("in a directory")
        .join(format!("mcp-echo-{version}"));
    std::fs::create_dir_all(&dir).expect("create dir");
    let kept = dir.join("libfixture_echo.so");
    std::fs::copy(file, &kept).expect("keep the build");
    kept
}
