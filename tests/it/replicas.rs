//! Many replicas behind HAProxy on one PostgreSQL (`[state] backend = "postgres"`), all
//! real: PostgreSQL and HAProxy from the distribution's packages (which `.ci/run`
//! installs), PostgreSQL run as a throwaway user (it refuses root), HAProxy with
//! `contrib/haproxy.cfg` (only its addresses changed), three `toolhost serve --mcp http`
//! processes, and a 2026-07-28 client speaking raw HTTP. Without the packages the tests
//! say so and pass, except under CI (`CI` set), where that is a failure.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{OtherUser, PluginDir, eventually, spawn_http_server, toolhost_command};

/// The bound of every wait here (starting servers on a loaded machine is slow).
const BOUND: Duration = Duration::from_secs(90);

/// Says why a test cannot run: a skip on a developer's machine, a failure under CI.
fn cannot_run(test: &str, why: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("{test}: {why}; .ci/run installs PostgreSQL and HAProxy, so this is a failure");
    }
    eprintln!("skipping {test}: {why} (`apt-get install postgresql haproxy`; CI installs them)");
}

/// PostgreSQL's server programs (the newest version installed).
fn postgres_bin() -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path().join("bin"))
        .filter(|bin| bin.join("initdb").is_file() && bin.join("postgres").is_file())
        .collect();
    found.sort();
    found.pop()
}

fn haproxy_bin() -> Option<PathBuf> {
    [
        "/usr/sbin/haproxy",
        "/usr/bin/haproxy",
        "/usr/local/sbin/haproxy",
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A PostgreSQL server on loopback, run by a throwaway user, in a temporary folder.
struct Postgres {
    user: OtherUser,
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
    /// TLS only (`hostssl`), with a certificate for 127.0.0.1 signed by `ca.pem`.
    tls: bool,
}

impl Postgres {
    fn start(test: &str) -> Option<Postgres> {
        Postgres::start_with(test, false)
    }

    /// With `tls`: the server takes TLS connections only, its certificate signed by a CA
    /// of the test's own (`ca_file`).
    fn start_with(test: &str, tls: bool) -> Option<Postgres> {
        let Some(bin) = postgres_bin() else {
            cannot_run(test, "PostgreSQL's server is not installed");
            return None;
        };
        let user = OtherUser::create(test)?;
        let dir = tempfile::tempdir().expect("temp dir");
        // The server's user must reach its folder.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod");
        let data = dir.path().join("data");
        std::fs::create_dir(&data).expect("data folder");
        user.chown(&data);
        let out = user
            .command(bin.join("initdb"))
            .args(["-D"])
            .arg(&data)
            .args(["-U", "toolhost", "-A", "trust", "--no-sync", "-E", "UTF8"])
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if tls {
            make_certificates(dir.path(), &data);
            std::fs::write(
                data.join("pg_hba.conf"),
                "hostssl all all 127.0.0.1/32 trust\n",
            )
            .expect("pg_hba.conf");
            for file in ["pg_hba.conf", "server.crt", "server.key"] {
                user.chown(&data.join(file));
            }
        }
        let mut pg = Postgres {
            user,
            bin,
            dir,
            port: free_port(),
            child: None,
            tls,
        };
        pg.launch();
        Some(pg)
    }

    fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// Starts the server and waits until it answers.
    fn launch(&mut self) {
        let data = self.dir.path().join("data");
        let child = self
            .user
            .command(self.bin.join("postgres"))
            .arg("-D")
            .arg(&data)
            .args(["-p", &self.port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "unix_socket_directories="])
            .args(["-c", "fsync=off", "-c", "max_connections=200"])
            .args(if self.tls {
                &[
                    "-c",
                    "ssl=on",
                    "-c",
                    "ssl_cert_file=server.crt",
                    "-c",
                    "ssl_key_file=server.key",
                ][..]
            } else {
                &[][..]
            })
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start postgres");
        self.child = Some(child);
        eventually(BOUND, "PostgreSQL answering", || self.answers());
    }

    fn answers(&self) -> bool {
        Command::new("psql")
            .env("PGSSLMODE", if self.tls { "require" } else { "prefer" })
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "toolhost", "-d", "postgres", "-Atc", "SELECT 1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Stops the server (fast shutdown) and waits for it to exit.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill has no memory preconditions; the pid is our child's.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGINT);
            }
            let _ = child.wait();
        }
    }

    fn url(&self) -> String {
        format!(
            "postgres://toolhost@127.0.0.1:{}/postgres?sslmode=disable",
            self.port
        )
    }

    /// One query's rows, `|`-separated.
    fn query(&self, sql: &str) -> String {
        let out = Command::new("psql")
            .env("PGSSLMODE", if self.tls { "require" } else { "prefer" })
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "toolhost", "-d", "postgres", "-Atc", sql])
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for Postgres {
    /// A fast shutdown (SIGKILL would leave the server's own processes behind, and its
    /// user could not be removed).
    fn drop(&mut self) {
        self.stop();
    }
}

/// A CA (`dir/ca.pem`) and a server certificate for 127.0.0.1 it signed
/// (`data/server.crt`, `data/server.key`), made with openssl.
fn make_certificates(dir: &Path, data: &Path) {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("run openssl (postgresql's packages bring it)");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=toolhost test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]);
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").expect("san.ext");
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "san.ext",
        "-out",
        "server.crt",
    ]);
    for file in ["server.crt", "server.key"] {
        std::fs::copy(dir.join(file), data.join(file)).expect("copy a certificate");
    }
    std::fs::set_permissions(
        data.join("server.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .expect("chmod server.key");
}

/// One `toolhost serve --mcp http` replica.
struct Replica {
    name: String,
    child: Child,
    port: u16,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the replicas share: the config file (the same on every replica), the plugins,
/// each replica's own state folder.
struct Fleet {
    dir: tempfile::TempDir,
    plugins: PluginDir,
    config: PathBuf,
}

impl Fleet {
    fn new(pg: &Postgres, extra: &str) -> Fleet {
        let dir = tempfile::tempdir().expect("temp dir");
        let plugins = PluginDir::with(&["fixture_echo", "toolhost_clarify"]);
        let config = dir.path().join("toolhost.toml");
        std::fs::write(
            &config,
            format!(
                "[state]\nbackend = \"postgres\"\nurl = \"{}\"\n\n[output]\nmax_lines = 5\n\n\
                 [audit]\ninclude_arguments = true\n{extra}",
                pg.url()
            ),
        )
        .expect("write the config");
        Fleet {
            dir,
            plugins,
            config,
        }
    }

    /// `toolhost --config CONFIG ARGS` as replica `replica` would run it.
    fn command(&self, replica: &str) -> Command {
        let mut cmd = toolhost_command();
        let state = self.dir.path().join(format!("state-{replica}"));
        std::fs::create_dir_all(&state).expect("state folder");
        cmd.arg("--config")
            .arg(&self.config)
            .env("XDG_STATE_HOME", &state)
            .env("TOOLHOST_REPLICA", replica);
        cmd
    }

    fn start(&self, name: &str) -> Replica {
        let mut cmd = self.command(name);
        cmd.args([
            "serve",
            "--mcp",
            "http",
            "--listen",
            "127.0.0.1:0",
            "--no-watch",
        ])
        .arg("--plugins")
        .arg(self.plugins.path())
        .arg("--control")
        .arg(self.dir.path().join(format!("{name}.sock")));
        let (child, port) = spawn_http_server(cmd);
        Replica {
            name: name.to_owned(),
            child,
            port,
        }
    }

    /// `toolhost ARGS` (as replica r1): its stdout, failing the test if it fails.
    fn run(&self, args: &[&str]) -> String {
        let out = self
            .command("r1")
            .args(args)
            .output()
            .expect("run toolhost");
        assert!(
            out.status.success(),
            "toolhost {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

/// HAProxy running `contrib/haproxy.cfg` with its addresses replaced.
struct Haproxy {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Haproxy {
    fn start(bin: &Path, replicas: &[&Replica]) -> Haproxy {
        let shipped =
            std::fs::read_to_string(crate::support::workspace_root().join("contrib/haproxy.cfg"))
                .expect("read contrib/haproxy.cfg");
        let port = free_port();
        let mut config = String::new();
        for line in shipped.lines() {
            let trimmed = line.trim_start();
            if trimmed.starts_with("bind ") {
                config.push_str(&format!("    bind 127.0.0.1:{port}\n"));
            } else if trimmed.starts_with("server ") {
                continue;
            } else {
                config.push_str(line);
                config.push('\n');
            }
        }
        for r in replicas {
            config.push_str(&format!("    server {} 127.0.0.1:{}\n", r.name, r.port));
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("haproxy.cfg");
        std::fs::write(&file, config).expect("write haproxy.cfg");
        let check = Command::new(bin)
            .args(["-c", "-f"])
            .arg(&file)
            .output()
            .expect("run haproxy -c");
        assert!(
            check.status.success(),
            "haproxy refuses contrib/haproxy.cfg: {}",
            String::from_utf8_lossy(&check.stdout)
        );
        let child = Command::new(bin)
            .args(["-db", "-f"])
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start haproxy");
        let lb = Haproxy {
            child,
            port,
            _dir: dir,
        };
        // Every replica is up in HAProxy once each has answered a readiness check made
        // through it (checks of replicas marked down do not go through).
        let mut seen = std::collections::BTreeSet::new();
        eventually(BOUND, "every replica up behind HAProxy", || {
            if let Ok(r) = get(lb.port, "/ready")
                && r.status == 200
                && let Some(name) = r.json()["replica"].as_str()
            {
                seen.insert(name.to_owned());
            }
            seen.len() == replicas.len()
        });
        lb
    }
}

/// One HTTP response.
#[derive(Debug)]
struct Response {
    status: u16,
    head: String,
    body: String,
}

impl Response {
    /// A header's value.
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then_some(v.trim())
        })
    }

    /// The body as JSON: the whole body, or the JSON-RPC answer in an event stream.
    fn json(&self) -> Value {
        if let Ok(v) = serde_json::from_str::<Value>(&self.body) {
            return v;
        }
        self.body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .rfind(|v| v.get("id").is_some())
            .unwrap_or(Value::Null)
    }
}

fn exchange(port: u16, request: &str) -> std::io::Result<Response> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    stream.write_all(request.as_bytes())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("no complete response: {text:?}")))?;
    let status = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status line: {head}")))?;
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Ok(Response {
        status,
        head: head.to_owned(),
        body,
    })
}

/// A 2025-11-25 request (`session`: the session's id, after `initialize`).
fn legacy(port: u16, token: &str, session: Option<&str>, message: &Value) -> Response {
    let body = message.to_string();
    let session = session
        .map(|s| format!("Mcp-Session-Id: {s}\r\nMCP-Protocol-Version: 2025-11-25\r\n"))
        .unwrap_or_default();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\n{session}Authorization: Bearer {token}\r\n\
         Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    exchange(port, &request).expect("a 2025-11-25 request")
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

fn get(port: u16, path: &str) -> std::io::Result<Response> {
    exchange(
        port,
        &format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"),
    )
}

/// A 2026-07-28 client: every request stands alone (no session), and says who it is.
struct Client {
    token: String,
    next: AtomicUsize,
    /// Whether it can answer questions (elicitation).
    asks: bool,
}

impl Client {
    fn new(token: &str, asks: bool) -> Client {
        Client {
            token: token.to_owned(),
            next: AtomicUsize::new(1),
            asks,
        }
    }

    fn meta(&self) -> Value {
        let capabilities = if self.asks {
            json!({"elicitation": {"form": {}}})
        } else {
            json!({})
        };
        json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": capabilities,
            "io.modelcontextprotocol/clientInfo": {"name": "replica-test", "version": "1"}
        })
    }

    /// A JSON-RPC request to `port`: the HTTP status and the answer.
    fn rpc(&self, port: u16, method: &str, mut params: Value) -> std::io::Result<(u16, Value)> {
        params["_meta"] = self.meta();
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let body =
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        // 2026-07-28: the method and what it names travel as headers too.
        let name = ["name", "uri"]
            .iter()
            .find_map(|k| params.get(*k).and_then(Value::as_str))
            .map(|n| format!("Mcp-Name: {n}\r\n"))
            .unwrap_or_default();
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
             Mcp-Method: {method}\r\n{name}Authorization: Bearer {}\r\nConnection: close\r\n\
             Content-Length: {}\r\n\r\n{body}",
            self.token,
            body.len()
        );
        let response = exchange(port, &request)?;
        Ok((response.status, response.json()))
    }

    /// `tools/call` of `tool` with `arguments` (and `extra` params: a retry's answers).
    fn call(&self, port: u16, tool: &str, arguments: Value, extra: Value) -> (u16, Value) {
        let mut params = json!({"name": tool, "arguments": arguments});
        if let Value::Object(more) = extra {
            for (k, v) in more {
                params[k] = v;
            }
        }
        self.rpc(port, "tools/call", params)
            .unwrap_or_else(|e| panic!("tools/call {tool} on port {port}: {e}"))
    }
}

/// The text of a call's result, or why there is none.
fn text_of(answer: &Value) -> String {
    answer["result"]["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

fn fleet_of_three(test: &str, extra: &str) -> Option<(Postgres, Fleet, Vec<Replica>, Haproxy)> {
    let Some(haproxy) = haproxy_bin() else {
        cannot_run(test, "HAProxy is not installed");
        return None;
    };
    let pg = Postgres::start(test)?;
    let fleet = Fleet::new(&pg, extra);
    let replicas: Vec<Replica> = ["r1", "r2", "r3"].iter().map(|n| fleet.start(n)).collect();
    let lb = Haproxy::start(&haproxy, &replicas.iter().collect::<Vec<_>>());
    Some((pg, fleet, replicas, lb))
}

#[test]
fn three_replicas_behind_haproxy_share_outputs_tokens_approvals_and_questions() {
    let test = "three_replicas_behind_haproxy_share_outputs_tokens_approvals_and_questions";
    let Some((pg, fleet, replicas, lb)) = fleet_of_three(test, "") else {
        return;
    };
    let token = fleet.run(&["token", "add", "client"]);
    let client = Client::new(&token, true);

    // Calls spread over the replicas: no affinity for sessionless requests.
    for i in 0..12 {
        let (status, answer) = client.call(
            lb.port,
            "echo",
            json!({"text": format!("spread {i}")}),
            json!({}),
        );
        assert_eq!(status, 200, "{answer}");
        assert_eq!(text_of(&answer), format!("spread {i}"), "{answer}");
    }
    let per_replica = pg.query(
        "SELECT replica || '=' || count(*) FROM toolhost_audit GROUP BY replica ORDER BY replica",
    );
    for r in &replicas {
        assert!(
            per_replica
                .lines()
                .any(|l| l.starts_with(&format!("{}=", r.name))),
            "replica {} served none of 12 calls: {per_replica}",
            r.name
        );
    }

    // A kept output (the budget cut the result) reads back through every replica.
    let long: String = (1..=30).map(|i| format!("line {i}\n")).collect();
    let (status, answer) = client.call(lb.port, "echo", json!({"text": long}), json!({}));
    assert_eq!(status, 200, "{answer}");
    let uri = answer["result"]["content"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "resource_link")
        .and_then(|c| c["uri"].as_str())
        .unwrap_or_else(|| panic!("no resource_link in a cut result: {answer}"))
        .to_owned();
    for r in &replicas {
        let (status, read) = client
            .rpc(r.port, "resources/read", json!({"uri": uri}))
            .expect("resources/read");
        assert_eq!(status, 200, "{read}");
        let text = read["result"]["contents"][0]["text"]
            .as_str()
            .unwrap_or_default();
        assert!(
            text.contains("line 30"),
            "replica {} read {uri}: {read}",
            r.name
        );
    }

    // An approval question asked through one replica, answered "always" through
    // another: the call runs, and every replica honours the lasting approval.
    let marker = fleet.dir.path().join("notes");
    let marker_s = marker.to_string_lossy().into_owned();
    let (status, asked) = client.call(
        replicas[0].port,
        "note_write",
        json!({"marker": marker_s, "text": "first"}),
        json!({}),
    );
    assert_eq!(status, 200, "{asked}");
    let state = asked["result"]["requestState"]
        .as_str()
        .unwrap_or_else(|| panic!("a write tool should ask first: {asked}"))
        .to_owned();
    let (status, done) = client.call(
        replicas[1].port,
        "note_write",
        json!({"marker": marker_s, "text": "first"}),
        json!({
            "requestState": state,
            "inputResponses": {"toolhost_approval": {"action": "accept", "content": {"always": true}}}
        }),
    );
    assert_eq!(status, 200, "{done}");
    assert_eq!(
        text_of(&done),
        "written",
        "the answer through r2 should count: {done}"
    );
    for r in &replicas {
        let (status, ran) = client.call(
            r.port,
            "note_write",
            json!({"marker": marker_s, "text": r.name}),
            json!({}),
        );
        assert_eq!(status, 200, "{ran}");
        assert_eq!(
            text_of(&ran),
            "written",
            "replica {} asked again: {ran}",
            r.name
        );
    }
    let notes = std::fs::read_to_string(&marker).expect("notes");
    assert_eq!(notes, "first\nr1\nr2\nr3\n");

    // A plugin's question waits in the replica that ran the call: a retry that reaches
    // another replica is refused, naming both, and the client can call again.
    let (status, question) = client.call(
        replicas[0].port,
        "clarify",
        json!({"question": "which one?"}),
        json!({}),
    );
    assert_eq!(status, 200, "{question}");
    let state = question["result"]["requestState"]
        .as_str()
        .unwrap_or_else(|| panic!("clarify should ask: {question}"))
        .to_owned();
    let keys: Vec<String> = question["result"]["inputRequests"]
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    let answers: serde_json::Map<String, Value> = keys
        .iter()
        .map(|k| {
            (
                k.clone(),
                json!({"action": "accept", "content": {"answer": "this one"}}),
            )
        })
        .collect();
    let (_, refused) = client.call(
        replicas[2].port,
        "clarify",
        json!({"question": "which one?"}),
        json!({"requestState": state, "inputResponses": answers}),
    );
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("replica 'r1'") && message.contains("replica 'r3'"),
        "a retry on another replica should be refused naming both: {refused}"
    );

    // A 2025-11-25 session stays on the replica that answered `initialize` (HAProxy
    // remembers its Mcp-Session-Id): another replica would answer 404.
    let init = legacy(
        lb.port,
        &token,
        None,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "legacy-client", "version": "1"}}}),
    );
    assert_eq!(init.status, 200, "{init:?}");
    let session = init
        .header("mcp-session-id")
        .unwrap_or_else(|| panic!("no session id: {init:?}"))
        .to_owned();
    let ready = legacy(
        lb.port,
        &token,
        Some(&session),
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert_eq!(ready.status, 202, "{ready:?}");
    for i in 0..6 {
        let listed = legacy(
            lb.port,
            &token,
            Some(&session),
            &json!({"jsonrpc": "2.0", "id": 10 + i, "method": "tools/list"}),
        );
        assert_eq!(listed.status, 200, "request {i} of the session: {listed:?}");
        assert!(listed.json()["result"]["tools"].is_array(), "{listed:?}");
    }

    // A token revoked through one replica's admin command is refused by all.
    let before = Instant::now();
    fleet.run(&["token", "revoke", "client"]);
    for r in &replicas {
        eventually(
            Duration::from_secs(10),
            &format!("replica {} refusing the revoked token", r.name),
            || {
                client
                    .rpc(r.port, "tools/list", json!({}))
                    .is_ok_and(|(status, _)| status == 401)
            },
        );
    }
    eprintln!(
        "a revoked token was refused by all 3 replicas {} ms after `token revoke` returned",
        before.elapsed().as_millis()
    );

    // A one-shot `toolhost call` under r1's name writes to r1's chain while r1 serves: the
    // chain stays one.
    let plugins = fleet.plugins.path().to_string_lossy().into_owned();
    let chained = Client::new(&fleet.run(&["token", "add", "chain"]), false);
    for i in 0..3 {
        let text = format!("one-shot {i}");
        let args = json!({"text": text}).to_string();
        let said = fleet.run(&["call", "echo", &args, "--plugins", &plugins]);
        assert!(said.contains(&text), "{said}");
        let (status, answer) = chained.call(
            replicas[0].port,
            "echo",
            json!({"text": format!("served {i}")}),
            json!({}),
        );
        assert_eq!(status, 200, "{answer}");
    }

    // Every replica's audit chain is whole, and status shows one plugin set.
    let verified = fleet.run(&["audit", "verify"]);
    assert!(verified.contains("3 replicas"), "{verified}");
    let sets: std::collections::BTreeSet<String> = replicas
        .iter()
        .map(|r| {
            get(r.port, "/ready").expect("ready").json()["plugin_set"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(
        sets.len(),
        1,
        "the replicas load the same plugins: {sets:?}"
    );

    // A check that names the plugin set it expects marks a replica with another down.
    let set = sets.into_iter().next().unwrap_or_default();
    let same = get(replicas[0].port, &format!("/ready?plugin_set={set}")).expect("ready");
    assert_eq!(same.status, 200, "{same:?}");
    let other = get(replicas[0].port, "/ready?plugin_set=0123abcd").expect("ready");
    assert_eq!(other.status, 503, "{other:?}");
    assert!(
        other.body.contains("not the 0123abcd asked for"),
        "{other:?}"
    );

    // A database a newer toolhost migrated is refused, saying so.
    pg.query("INSERT INTO toolhost_schema (version) VALUES (999)");
    let refused = fleet
        .command("r1")
        .args(["token", "list"])
        .output()
        .expect("run toolhost token list");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && said.contains("schema version 999"),
        "an older toolhost must refuse a newer schema: {said}"
    );
}

#[test]
fn a_replica_killed_under_load_loses_no_answered_call_and_runs_no_write_twice() {
    let test = "a_replica_killed_under_load_loses_no_answered_call_and_runs_no_write_twice";
    let Some((pg, fleet, mut replicas, lb)) =
        fleet_of_three(test, "\n[mcp]\nwithout_elicitation = \"approve\"\n")
    else {
        return;
    };
    let token = fleet.run(&["token", "add", "load"]);
    let client = Arc::new(Client::new(&token, false));
    let marker = fleet.dir.path().join("writes");
    let done = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let client = Arc::clone(&client);
            // One file per client: its writes are one at a time (the fixture's line is
            // two writes, which concurrent writers could interleave).
            let marker = format!("{}-w{w}", marker.to_string_lossy());
            let done = Arc::clone(&done);
            let port = lb.port;
            std::thread::spawn(move || {
                let mut outcomes = Vec::new();
                for i in 0..40 {
                    let id = format!("w{w}-{i}");
                    let (tool, args) = if i % 2 == 0 {
                        ("slow_version", json!({"ms": 30}))
                    } else {
                        ("note_write", json!({"marker": marker, "text": id}))
                    };
                    let answered = match client.rpc(
                        port,
                        "tools/call",
                        json!({"name": tool, "arguments": args}),
                    ) {
                        Ok((200, answer)) => {
                            answer["result"]["isError"] == false && !text_of(&answer).is_empty()
                        }
                        _ => false,
                    };
                    outcomes.push((id, tool, answered));
                    done.fetch_add(1, Ordering::AcqRel);
                }
                outcomes
            })
        })
        .collect();
    eventually(BOUND, "some calls done before the kill", || {
        done.load(Ordering::Acquire) >= 30
    });
    let victim = replicas.remove(1);
    let mut victim_child = {
        let mut victim = victim;
        // Take the child out so Drop does not wait on it twice.
        std::mem::replace(
            &mut victim.child,
            Command::new("true").spawn().expect("true"),
        )
    };
    victim_child.kill().expect("SIGKILL r2");
    let _ = victim_child.wait();
    let outcomes: Vec<(String, &str, bool)> = workers
        .into_iter()
        .flat_map(|w| w.join().expect("a client thread"))
        .collect();

    let answered: Vec<&(String, &str, bool)> = outcomes.iter().filter(|o| o.2).collect();
    let failed = outcomes.len() - answered.len();
    eprintln!(
        "{} calls: {} answered, {failed} failed (in flight on the killed replica, or sent to it before HAProxy marked it down)",
        outcomes.len(),
        answered.len()
    );
    // The others carried on: each client's last calls were answered.
    for w in 0..4 {
        let last = outcomes
            .iter()
            .filter(|o| o.0.starts_with(&format!("w{w}-")))
            .rev()
            .take(4)
            .filter(|o| o.2)
            .count();
        assert_eq!(
            last, 4,
            "client {w}'s last calls should go through the live replicas: {outcomes:?}"
        );
    }
    // Every answered call is in the audit log; no write ran twice; every answered write
    // ran.
    let audited = pg.query("SELECT line FROM toolhost_audit WHERE line LIKE '%note_write%'");
    let writes: String = (0..4)
        .map(|w| {
            std::fs::read_to_string(format!("{}-w{w}", marker.to_string_lossy()))
                .unwrap_or_default()
        })
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    for line in writes.lines() {
        assert!(seen.insert(line), "write {line} ran twice: {writes}");
    }
    for (id, tool, _) in answered {
        if *tool == "note_write" {
            assert!(
                seen.contains(id.as_str()),
                "answered write {id} did not run"
            );
            assert!(
                audited.contains(&format!("\"text\":\"{id}\"")),
                "answered write {id} is not in the audit log"
            );
        }
    }
    let answered_reads = outcomes
        .iter()
        .filter(|o| o.2 && o.1 == "slow_version")
        .count();
    let audited_reads: usize = pg
        .query("SELECT count(*) FROM toolhost_audit WHERE line LIKE '%\"tool\":\"slow_version\"%' AND line LIKE '%\"outcome\":\"ok\"%'")
        .parse()
        .expect("a count");
    assert!(
        audited_reads >= answered_reads,
        "{answered_reads} reads answered, {audited_reads} in the audit log"
    );
    let verified = fleet.run(&["audit", "verify"]);
    assert!(verified.contains("ok:"), "{verified}");
}

#[test]
fn postgres_restarted_under_load_read_tools_keep_working_and_replicas_reconnect() {
    let test = "postgres_restarted_under_load_read_tools_keep_working_and_replicas_reconnect";
    let Some((mut pg, fleet, replicas, lb)) = fleet_of_three(test, "") else {
        return;
    };
    let token = fleet.run(&["token", "add", "steady"]);
    let client = Client::new(&token, false);
    let long: String = (1..=30).map(|i| format!("line {i}\n")).collect();
    let (_, kept) = client.call(lb.port, "echo", json!({"text": long}), json!({}));
    let uri = kept["result"]["content"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "resource_link")
        .and_then(|c| c["uri"].as_str())
        .unwrap_or_else(|| panic!("no resource_link: {kept}"))
        .to_owned();

    // Load throughout: two clients calling a read tool through HAProxy until the end.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let loaders: Vec<_> = (0..2)
        .map(|n| {
            let client = Client::new(&token, false);
            let stop = Arc::clone(&stop);
            let port = lb.port;
            std::thread::spawn(move || {
                let mut failures = Vec::new();
                let mut calls = 0;
                while !stop.load(Ordering::Acquire) {
                    let text = format!("load {n}-{calls}");
                    let (status, answer) =
                        client.call(port, "echo", json!({"text": text}), json!({}));
                    if status != 200 || text_of(&answer) != text {
                        failures.push(format!("{status} {answer}"));
                    }
                    calls += 1;
                }
                (calls, failures)
            })
        })
        .collect();

    pg.stop();
    // Read tools without kept outputs keep working, on every replica.
    for i in 0..9 {
        let (status, answer) = client.call(
            lb.port,
            "echo",
            json!({"text": format!("during {i}")}),
            json!({}),
        );
        assert_eq!(status, 200, "{answer}");
        assert_eq!(text_of(&answer), format!("during {i}"), "{answer}");
    }
    // What needs the database says so: a cut output is not kept, and reading one fails.
    let (_, cut) = client.call(lb.port, "echo", json!({"text": long}), json!({}));
    assert!(
        text_of(&cut).contains("the full output was not kept"),
        "a cut result during the outage should say its rest was not kept: {cut}"
    );
    let (_, read) = client
        .rpc(replicas[0].port, "resources/read", json!({"uri": uri}))
        .expect("resources/read");
    let message = read["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("database"),
        "reading a kept output during the outage should name the database: {read}"
    );

    pg.launch();
    // Each replica reconnects on its own: its change listener is back, and kept outputs
    // work again.
    for r in &replicas {
        eventually(
            BOUND,
            &format!("replica {} hearing the database again", r.name),
            || get(r.port, "/ready").is_ok_and(|resp| resp.json()["shared_state"] == true),
        );
        let (status, read) = client
            .rpc(r.port, "resources/read", json!({"uri": uri}))
            .expect("resources/read");
        assert_eq!(status, 200, "{read}");
        assert!(
            read["result"]["contents"][0]["text"]
                .as_str()
                .is_some_and(|t| t.contains("line 30")),
            "replica {}: {read}",
            r.name
        );
    }
    stop.store(true, Ordering::Release);
    for loader in loaders {
        let (calls, failures) = loader.join().expect("a loading client");
        assert!(
            failures.is_empty(),
            "{} of {calls} read calls failed across the restart: {failures:?}",
            failures.len()
        );
        eprintln!("a loading client made {calls} read calls across the restart, none failed");
    }
    // The lines of calls made meanwhile reached the log once it was back.
    eventually(BOUND, "the outage's calls in the audit log", || {
        pg.query("SELECT count(*) FROM toolhost_audit WHERE line LIKE '%during 8%'") == "1"
    });
    let verified = fleet.run(&["audit", "verify"]);
    assert!(verified.contains("ok:"), "{verified}");
}

#[test]
fn sigterm_drains_a_replica_haproxy_stops_sending_and_calls_in_flight_finish() {
    let test = "sigterm_drains_a_replica_haproxy_stops_sending_and_calls_in_flight_finish";
    let Some((_pg, fleet, replicas, lb)) = fleet_of_three(test, "") else {
        return;
    };
    let token = fleet.run(&["token", "add", "drain"]);
    let client = Arc::new(Client::new(&token, false));
    // A slow call in flight on r1 when it is told to stop.
    let slow = {
        let client = Arc::clone(&client);
        let port = replicas[0].port;
        std::thread::spawn(move || {
            client.call(port, "slow_version", json!({"ms": 1500}), json!({}))
        })
    };
    eventually(BOUND, "the slow call in flight", || {
        get(replicas[0].port, "/ready").is_ok_and(|r| r.json()["in_flight"] == 1)
    });
    // SAFETY: kill has no memory preconditions; the pid is our child's.
    unsafe {
        libc::kill(replicas[0].child.id() as libc::pid_t, libc::SIGTERM);
    }
    eventually(BOUND, "r1 saying it is not ready", || {
        get(replicas[0].port, "/ready").is_ok_and(|r| r.status == 503)
    });
    // Meanwhile every call through HAProxy is answered (by the others once r1 is down).
    for i in 0..9 {
        let (status, answer) =
            client.call(lb.port, "echo", json!({"text": format!("d{i}")}), json!({}));
        assert_eq!(status, 200, "{answer}");
    }
    let (status, answer) = slow.join().expect("the slow call");
    assert_eq!(status, 200, "{answer}");
    assert!(
        !text_of(&answer).is_empty(),
        "the call in flight finished: {answer}"
    );
}

#[test]
fn tls_to_the_database_is_verified_against_the_configured_ca() {
    let test = "tls_to_the_database_is_verified_against_the_configured_ca";
    let Some(pg) = Postgres::start_with(test, true) else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!(
        "postgres://toolhost@127.0.0.1:{}/postgres?sslmode=require",
        pg.port
    );
    let run = |config: &str| {
        let file = dir.path().join("toolhost.toml");
        std::fs::write(&file, config).expect("config");
        toolhost_command()
            .arg("--config")
            .arg(&file)
            .args(["token", "list", "--json"])
            .env("XDG_STATE_HOME", dir.path())
            .output()
            .expect("run toolhost")
    };
    // The server takes TLS only: with its CA, toolhost connects (and migrates).
    let with_ca = run(&format!(
        "[state]\nbackend = \"postgres\"\nurl = \"{url}\"\nca_file = \"{}\"\n",
        pg.ca_file().display()
    ));
    assert!(
        with_ca.status.success(),
        "{}",
        String::from_utf8_lossy(&with_ca.stderr)
    );
    assert_eq!(pg.query("SELECT max(version) FROM toolhost_schema"), "1");
    // Without it, the certificate is not trusted, and the message says which database.
    let without = run(&format!(
        "[state]\nbackend = \"postgres\"\nurl = \"{url}\"\n"
    ));
    let said = String::from_utf8_lossy(&without.stderr);
    assert!(
        !without.status.success(),
        "an unknown CA must be refused: {said}"
    );
    assert!(
        said.contains("cannot be reached") && said.contains(&format!("127.0.0.1:{}", pg.port)),
        "{said}"
    );
}
