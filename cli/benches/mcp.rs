//! MCP round trips over stdio, measured with one compiled client (raw JSON-RPC lines, no
//! SDK, so the client costs next to nothing): toolhost serving `echo` from a .so, against
//! a minimal rmcp server with the same echo compiled in, the Python SDK's server and
//! `@modelcontextprotocol/server-everything`'s echo, in the same run. Then the time from a
//! plugin file being replaced to the client receiving `notifications/tools/list_changed`.
//!
//! Then tools/call over streamable HTTP (keep-alive connection, one session): toolhost with
//! a bearer token, toolhost with `--no-auth`, and a minimal rmcp HTTP server, interleaved
//! in the same run, to price the HTTP door's authentication.
//!
//! Then an MCP server as toolhost's tool source (`[[mcp_servers]]`): server-everything's
//! echo called directly and through toolhost (which serves it as `every_echo`), with the
//! server reached over stdio and over streamable HTTP, interleaved in one run, to price
//! what toolhost adds to a call it relays.
//!
//! `cargo bench -p toolhost-cli --bench mcp` (run `bash tests/mcp/setup.sh` first for the
//! Python and Node servers; without them those rows are skipped). Printed figures only.
//! `TOOLHOST_BENCH_BASELINE=/path/to/toolhost` adds another build of toolhost (main before
//! a change, say) to the stdio rows, serving the same plugin, and leaves the Python and Node
//! servers out of that table, so the two builds are compared side by side alone.

mod common;

use common::peer::Peer;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const WARMUP: usize = 500;
const CALLS: usize = 3000;
const ROUNDS: usize = 10;
const RELOADS: usize = 30;
/// Set in the environment of this binary when it runs as the minimal rmcp server.
const ROLE: &str = "TOOLHOST_BENCH_ROLE";

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
    use rmcp::ServiceExt as _;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let running = EchoHandler
            .serve(rmcp::transport::stdio_pipes())
            .await
            .expect("serve");
        let _ = running.waiting().await;
    });
}

/// One echo tool, compiled in.
struct EchoHandler;

mod echo_handler {
    use std::sync::Arc;

    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
        PaginatedRequestParams, ServerCapabilities, ServerConfig,
    };
    use rmcp::service::RequestContext;
    use rmcp::{ErrorData, RoleServer, ServerHandler};
    use serde_json::{Value, json};

    impl ServerHandler for super::EchoHandler {
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
}

/// The minimal rmcp HTTP server: the same echo behind rmcp's streamable HTTP service on
/// hyper (TCP_NODELAY, as NOTES-hosting.md says it needs); prints its port.
fn minimal_rmcp_http_server() {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let service = StreamableHttpService::new(
            || Ok(EchoHandler),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default(),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        println!("{}", listener.local_addr().expect("addr").port());
        loop {
            let (stream, _) = listener.accept().await.expect("accept");
            let _ = stream.set_nodelay(true);
            let service = service.clone();
            tokio::spawn(async move {
                let handler = hyper::service::service_fn(move |request| {
                    let service = service.clone();
                    async move { Ok::<_, std::convert::Infallible>(service.handle(request).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), handler)
                    .await;
            });
        }
    });
}

/// A raw HTTP/1.1 MCP client on one keep-alive connection, with one session.
struct HttpPeer {
    child: Child,
    port: u16,
    token: Option<String>,
    session: Option<String>,
    reader: BufReader<std::net::TcpStream>,
    writer: std::net::TcpStream,
    next_id: u64,
}

impl HttpPeer {
    fn start(mut child: Child, port: u16, token: Option<String>) -> HttpPeer {
        let stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        let writer = stream.try_clone().expect("clone");
        let mut peer = HttpPeer {
            child: {
                child.stdout.take();
                child
            },
            port,
            token,
            session: None,
            reader: BufReader::new(stream),
            writer,
            next_id: 0,
        };
        let (headers, _) = peer.post(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "bench-client", "version": "1.0"}}}));
        peer.session = headers.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("mcp-session-id")
                .then(|| v.trim().to_owned())
        });
        assert!(peer.session.is_some(), "no session id: {headers}");
        peer.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        peer
    }

    /// One POST; returns the response head and body.
    fn post(&mut self, message: &Value) -> (String, String) {
        let body = message.to_string();
        let mut request = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
            self.port,
            body.len()
        );
        if let Some(t) = &self.token {
            request.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        if let Some(s) = &self.session {
            request.push_str(&format!(
                "Mcp-Session-Id: {s}\r\nMCP-Protocol-Version: 2025-11-25\r\n"
            ));
        }
        request.push_str("\r\n");
        request.push_str(&body);
        self.writer
            .write_all(request.as_bytes())
            .expect("send the request");
        let mut head = String::new();
        loop {
            let mut line = String::new();
            let n = self.reader.read_line(&mut line).expect("read the response");
            assert!(n > 0, "the server closed the connection");
            if line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        assert!(head.starts_with("HTTP/1.1 2"), "{head}");
        let lower = head.to_ascii_lowercase();
        let mut body = Vec::new();
        if lower.contains("transfer-encoding: chunked") {
            loop {
                let mut size = String::new();
                self.reader.read_line(&mut size).expect("chunk size");
                let n = usize::from_str_radix(size.trim(), 16).expect("hex chunk size");
                let mut chunk = vec![0u8; n + 2];
                std::io::Read::read_exact(&mut self.reader, &mut chunk).expect("chunk");
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        } else if let Some(len) = lower
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
        {
            body.resize(len, 0);
            std::io::Read::read_exact(&mut self.reader, &mut body).expect("body");
        }
        (head, String::from_utf8_lossy(&body).into_owned())
    }

    fn call(&mut self, params: &Value) -> Value {
        self.next_id += 1;
        let (_, body) = self.post(&json!({"jsonrpc": "2.0", "id": self.next_id,
            "method": "tools/call", "params": params}));
        body.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|m| m.get("id").is_some())
            .unwrap_or_else(|| panic!("no answer in {body}"))
    }
}

impl Drop for HttpPeer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `toolhost serve --mcp http` (with `--no-auth` when `token` is `None`) and
/// returns the process and its port.
fn toolhost_http(toolhost: &Path, plugins: &Path, state: &Path, auth: bool) -> (Child, u16) {
    let mut cmd = Command::new(toolhost);
    cmd.args([
        "serve",
        "--mcp",
        "http",
        "--listen",
        "127.0.0.1:0",
        "--plugins",
    ])
    .arg(plugins)
    .arg("--control")
    .arg(state.join(if auth { "auth.sock" } else { "open.sock" }))
    .env("XDG_CONFIG_HOME", plugins.join("no-config"))
    .env("XDG_STATE_HOME", state)
    .env("TOOLHOST_LOG", "info,rmcp=warn")
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    if !auth {
        cmd.arg("--no-auth");
    }
    let mut child = cmd.spawn().expect("start toolhost serve --mcp http");
    let stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let (tx, rx) = std::sync::mpsc::channel();
    // Reads the log to its end, so the server never blocks on a full pipe.
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if let Some(at) = line.find("http://127.0.0.1:") {
                let port: String = line[at + 17..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                let _ = tx.send(port);
            }
        }
    });
    let port = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("toolhost serve --mcp http comes up");
    (child, port.parse().expect("port"))
}

/// A timed HTTP server under test.
struct HttpSubject {
    name: &'static str,
    peer: HttpPeer,
    times: Vec<Duration>,
}

/// tools/call over HTTP: toolhost with a token, toolhost without auth, minimal rmcp.
fn http_round_trips(toolhost: &Path, plugins: &Path) {
    let state = tempfile::tempdir().expect("temp dir");
    let made = Command::new(toolhost)
        .args(["token", "add", "bench"])
        .env("XDG_CONFIG_HOME", plugins.join("no-config"))
        .env("XDG_STATE_HOME", state.path())
        .output()
        .expect("make a token");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let token = String::from_utf8_lossy(&made.stdout).trim().to_owned();
    let (child, port) = toolhost_http(toolhost, plugins, state.path(), true);
    let with_token = HttpPeer::start(child, port, Some(token));
    let (child, port) = toolhost_http(toolhost, plugins, state.path(), false);
    let open = HttpPeer::start(child, port, None);
    let mut rmcp_child = Command::new(std::env::current_exe().expect("own path"))
        .env(ROLE, "rmcp-echo-http")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the minimal rmcp HTTP server");
    let mut line = String::new();
    BufReader::new(rmcp_child.stdout.as_mut().expect("stdout"))
        .read_line(&mut line)
        .expect("its port");
    let rmcp_port = line.trim().parse().expect("port");
    let minimal = HttpPeer::start(rmcp_child, rmcp_port, None);
    let mut subjects = [
        ("toolhost --mcp http, bearer token", with_token),
        ("toolhost --mcp http --no-auth", open),
        ("minimal rmcp HTTP server (echo compiled in)", minimal),
    ]
    .map(|(name, peer)| HttpSubject {
        name,
        peer,
        times: Vec::with_capacity(CALLS),
    });
    let params = json!({"name": "echo", "arguments": {"text": "hello"}});
    for s in &mut subjects {
        for _ in 0..WARMUP {
            s.peer.call(&params);
        }
    }
    for _ in 0..ROUNDS {
        for s in &mut subjects {
            for _ in 0..CALLS / ROUNDS {
                let started = Instant::now();
                let answer = s.peer.call(&params);
                s.times.push(started.elapsed());
                assert_ne!(
                    answer["result"]["isError"],
                    json!(true),
                    "{}: {answer}",
                    s.name
                );
            }
        }
    }
    let medians: Vec<(&str, f64, f64)> = subjects
        .iter_mut()
        .map(|s| {
            s.times.sort();
            let n = s.times.len();
            let us = |d: Duration| d.as_secs_f64() * 1e6;
            (s.name, us(s.times[n / 2]), us(s.times[n * 99 / 100]))
        })
        .collect();
    println!(
        "\ntools/call round trip over streamable HTTP (keep-alive, one session), median of \
         {CALLS} calls ({ROUNDS} interleaved rounds) after {WARMUP} warm-up"
    );
    println!(
        "{:<48} {:>10} {:>10} {:>12} {:>12}",
        "server", "median us", "p99 us", "vs no-auth", "vs rmcp"
    );
    for (name, median, p99) in &medians {
        println!(
            "{name:<48} {median:>10.1} {p99:>10.1} {:>11.3}x {:>11.2}x",
            median / medians[1].1,
            median / medians[2].1
        );
    }
    println!(
        "authentication costs {:+.1} us per call ({:+.1}% of the round trip)",
        medians[0].1 - medians[1].1,
        (medians[0].1 / medians[1].1 - 1.0) * 100.0
    );
}

fn toolhost_command(toolhost: &Path, plugins: &Path, control: &Path) -> Command {
    let mut cmd = Command::new(toolhost);
    cmd.args(["serve", "--mcp", "stdio", "--plugins"])
        .arg(plugins)
        .arg("--control")
        .arg(control)
        .env("XDG_CONFIG_HOME", plugins.join("no-config"))
        .env(
            "XDG_STATE_HOME",
            std::env::temp_dir().join(format!("toolhost-bench-state-{}", std::process::id())),
        )
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
    if std::env::var_os(ROLE).is_some_and(|r| r == "rmcp-echo-http") {
        minimal_rmcp_http_server();
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
    // Another build of toolhost (say, main before a change), serving the same plugin in the
    // same run: `TOOLHOST_BENCH_BASELINE=/path/to/toolhost`.
    if let Some(other) = std::env::var_os("TOOLHOST_BENCH_BASELINE") {
        let other = PathBuf::from(other);
        subjects.push(Subject::new(
            "baseline toolhost binary (TOOLHOST_BENCH_BASELINE)",
            toolhost_command(
                &other,
                dir.path(),
                &dir.path().join("control-baseline.sock"),
            ),
            "echo",
            hello(),
        ));
    }
    // A baseline comparison runs the three compiled servers alone: an interpreter's
    // server leaves the machine busier for whichever server follows it.
    let others = std::env::var_os("TOOLHOST_BENCH_BASELINE").is_none();
    let tools = root.join("target").join("mcp-tools");
    let python = tools.join("venv").join("bin").join("python");
    if !others {
        println!("(skipped the Python and Node servers: a baseline comparison)");
    } else if python.exists() {
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
    if !others {
    } else if node.exists() && everything.exists() {
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
    // Interleaved rounds, so drift on a shared machine hits every server alike; every other
    // round in reverse order, so no server always runs first (measured: the first of a
    // round runs ~15% slower, the same binary against itself).
    for round in 0..ROUNDS {
        if round % 2 == 0 {
            subjects.iter_mut().for_each(|s| s.calls(CALLS / ROUNDS));
        } else {
            subjects
                .iter_mut()
                .rev()
                .for_each(|s| s.calls(CALLS / ROUNDS));
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

    http_round_trips(&toolhost, dir.path());

    if node.exists() && everything.exists() {
        relay_round_trips(&toolhost, &node, &everything);
    } else {
        println!("(skipped the MCP server relay: run `bash tests/mcp/setup.sh`)");
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

/// A client connection to one subject of the relay table.
enum Conn {
    Stdio(Peer),
    Http(HttpPeer),
}

impl Conn {
    /// One tools/call; its result.
    fn call(&mut self, params: &Value) -> Value {
        match self {
            Conn::Stdio(peer) => peer.request("tools/call", params.clone()),
            Conn::Http(peer) => peer.call(params)["result"].clone(),
        }
    }
}

/// server-everything's streamable HTTP transport on a free port, once it listens.
fn everything_http(node: &Path, everything: &Path) -> (Child, u16) {
    for _ in 0..5 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut child = Command::new(node)
            .arg(everything)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start server-everything over HTTP");
        let stderr = child.stderr.take().expect("stderr");
        let mut listening = false;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("listening on port") {
                listening = true;
                break;
            }
            if line.contains("already in use") {
                break;
            }
        }
        if listening {
            return (child, port);
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("server-everything did not start listening over HTTP");
}

/// `toolhost serve --mcp stdio` with no plugin and one MCP server, `entry` (a
/// `[[mcp_servers]]` table), whose config lives in `home`.
fn toolhost_relaying(toolhost: &Path, home: &Path, entry: &str) -> Command {
    std::fs::create_dir_all(home.join("toolhost")).expect("config folder");
    std::fs::create_dir_all(home.join("plugins")).expect("plugin folder");
    std::fs::write(home.join("toolhost/config.toml"), entry).expect("config");
    let mut cmd = Command::new(toolhost);
    cmd.args(["serve", "--mcp", "stdio", "--no-watch", "--plugins"])
        .arg(home.join("plugins"))
        .arg("--control")
        .arg(home.join("control.sock"))
        .env("XDG_CONFIG_HOME", home)
        .env("XDG_STATE_HOME", home.join("state"))
        .env("TOOLHOST_LOG", "warn");
    cmd
}

/// server-everything's echo called directly and through toolhost, the server over stdio
/// and over HTTP: median and p99 side by side.
fn relay_round_trips(toolhost: &Path, node: &Path, everything: &Path) {
    let homes = tempfile::tempdir().expect("temp dir");
    let modules = everything
        .ancestors()
        .find(|p| p.ends_with("node_modules"))
        .expect("node_modules")
        .to_path_buf();
    let (http_child, port) = everything_http(node, everything);
    let direct_http = HttpPeer::start(http_child, port, None);
    let mut stdio_direct = Command::new(node);
    stdio_direct.arg(everything).arg("stdio");
    let stdio_entry = format!(
        "[[mcp_servers]]\nname = \"every\"\ncommand = {:?}\nargs = [{:?}, \"stdio\"]\n\
         read_paths = [{:?}]\n",
        node.display().to_string(),
        everything.display().to_string(),
        modules.display().to_string()
    );
    let http_entry =
        format!("[[mcp_servers]]\nname = \"every\"\nurl = \"http://127.0.0.1:{port}/mcp\"\n");
    let direct = json!({"name": "echo", "arguments": {"message": "hello"}});
    let relayed = json!({"name": "every_echo", "arguments": {"message": "hello"}});
    let mut subjects: Vec<(&str, Conn, Value, Vec<Duration>)> = vec![
        (
            "server over stdio, called directly",
            Conn::Stdio(Peer::start(stdio_direct)),
            direct.clone(),
            Vec::new(),
        ),
        (
            "server over stdio, through toolhost",
            Conn::Stdio(Peer::start(toolhost_relaying(
                toolhost,
                &homes.path().join("stdio"),
                &stdio_entry,
            ))),
            relayed.clone(),
            Vec::new(),
        ),
        (
            "server over HTTP, called directly",
            Conn::Http(direct_http),
            direct,
            Vec::new(),
        ),
        (
            "server over HTTP, through toolhost (stdio to it)",
            Conn::Stdio(Peer::start(toolhost_relaying(
                toolhost,
                &homes.path().join("http"),
                &http_entry,
            ))),
            relayed,
            Vec::new(),
        ),
    ];
    for (name, conn, params, _) in &mut subjects {
        for _ in 0..WARMUP {
            let result = conn.call(params);
            assert_ne!(result["isError"], json!(true), "{name}: {result}");
        }
    }
    for round in 0..ROUNDS {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..subjects.len()).collect()
        } else {
            (0..subjects.len()).rev().collect()
        };
        for i in order {
            let (name, conn, params, times) = &mut subjects[i];
            for _ in 0..CALLS / ROUNDS {
                let started = Instant::now();
                let result = conn.call(params);
                times.push(started.elapsed());
                assert_ne!(result["isError"], json!(true), "{name}: {result}");
            }
        }
    }
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let rows: Vec<(&str, f64, f64)> = subjects
        .iter_mut()
        .map(|(name, _, _, times)| {
            times.sort();
            let n = times.len();
            (*name, us(times[n / 2]), us(times[n * 99 / 100]))
        })
        .collect();
    println!(
        "\nserver-everything's echo, directly and through toolhost ([[mcp_servers]]), median \
         of {CALLS} calls ({ROUNDS} interleaved rounds) after {WARMUP} warm-up"
    );
    println!(
        "{:<52} {:>10} {:>10} {:>14}",
        "path", "median us", "p99 us", "added median"
    );
    for (i, (name, median, p99)) in rows.iter().enumerate() {
        let added = if i % 2 == 1 {
            format!("{:+.1} us", median - rows[i - 1].1)
        } else {
            String::new()
        };
        println!("{name:<52} {median:>10.1} {p99:>10.1} {added:>14}");
    }
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
