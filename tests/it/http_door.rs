//! The HTTP door of `toolhost serve --mcp http`, tried the way another user of the machine
//! or a stranger on the network would: requests without a token or with a wrong or
//! revoked one, another token's session, a foreign `Origin`, thousands of half-open
//! connections, oversized bodies, too many sessions, and TLS. Every server is the real
//! binary on 127.0.0.1 with a raw HTTP client, so nothing in between is trusted.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{OtherUser, PluginDir, marker, spawn_http_server, toolhost_command};

/// A `toolhost serve --mcp http` with its own config, state and control socket.
pub(crate) struct HttpHost {
    child: Child,
    port: u16,
    pub(crate) dir: tempfile::TempDir,
    _plugins: PluginDir,
}

impl Drop for HttpHost {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A config directory: `config.toml` holding `config`, and a profile `narrow` that sees
/// only `echo`.
fn config_dir(config: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("config.toml"), config).expect("config");
    let narrow = dir.path().join("profiles").join("narrow");
    std::fs::create_dir_all(&narrow).expect("profile dir");
    std::fs::write(narrow.join("config.toml"), "tools = [\"echo\"]\n").expect("profile");
    dir
}

impl HttpHost {
    pub(crate) fn start(config: &str, extra: &[&str]) -> HttpHost {
        HttpHost::start_limited(config, extra, None)
    }

    /// Like `start`, with the server's open-file limit (soft and hard) set to `nofile`.
    fn start_limited(config: &str, extra: &[&str], nofile: Option<u64>) -> HttpHost {
        HttpHost::start_serving(config, extra, nofile, &["fixture_basic"])
    }

    /// Like `start`, serving the plugins `libs`.
    pub(crate) fn start_with(config: &str, extra: &[&str], libs: &[&str]) -> HttpHost {
        HttpHost::start_serving(config, extra, None, libs)
    }

    fn start_serving(config: &str, extra: &[&str], nofile: Option<u64>, libs: &[&str]) -> HttpHost {
        let dir = config_dir(config);
        let plugins = PluginDir::with(libs);
        let mut command = toolhost_command();
        if let Some(n) = nofile {
            use std::os::unix::process::CommandExt as _;
            // SAFETY: setrlimit is async-signal-safe; the closure touches nothing else.
            unsafe {
                command.pre_exec(move || {
                    let l = libc::rlimit {
                        rlim_cur: n,
                        rlim_max: n,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &l) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        command
            .arg("--config")
            .arg(dir.path().join("config.toml"))
            .args(["serve", "--mcp", "http", "--listen", "127.0.0.1:0"])
            .args(extra)
            .arg("--plugins")
            .arg(plugins.path())
            .arg("--control")
            .arg(dir.path().join("control.sock"))
            .env("XDG_STATE_HOME", dir.path().join("state"));
        let (child, port) = spawn_http_server(command);
        HttpHost {
            child,
            port,
            dir,
            _plugins: plugins,
        }
    }

    /// Runs `toolhost token ...` against this host's state; returns its stdout.
    pub(crate) fn token(&self, args: &[&str]) -> String {
        let out = toolhost_command()
            .arg("--config")
            .arg(self.dir.path().join("config.toml"))
            .arg("token")
            .args(args)
            .env("XDG_STATE_HOME", self.dir.path().join("state"))
            .output()
            .expect("run toolhost token");
        assert!(
            out.status.success(),
            "toolhost token {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn control(&self) -> PathBuf {
        self.dir.path().join("control.sock")
    }

    /// The port it listens on.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    pub(crate) fn client(&self, token: Option<&str>) -> Client {
        Client {
            port: self.port,
            token: token.map(str::to_owned),
            session: None,
            origin: None,
        }
    }
}

/// POSTs `body` with `headers` on a fresh connection to `port` (60 s to answer).
pub(crate) fn post_to(port: u16, headers: &[(String, String)], body: &str) -> Response {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    send(&mut stream, port, headers, body)
}

/// One HTTP response.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Response {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The JSON-RPC message of an SSE or JSON body (the last one carrying an id).
    pub(crate) fn message(&self) -> Value {
        if let Ok(v) = serde_json::from_str::<Value>(&self.body) {
            return v;
        }
        self.body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .rfind(|v| v.get("id").is_some())
            .unwrap_or_else(|| panic!("no JSON-RPC answer in {self:?}"))
    }
}

/// Sends one HTTP/1.1 request on a fresh connection (closed after it) and reads the whole
/// response.
fn send(
    stream: &mut dyn ReadWrite,
    port: u16,
    headers: &[(String, String)],
    body: &str,
) -> Response {
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
         Accept: application/json, text/event-stream\r\nConnection: close\r\n\
         Content-Length: {}\r\n",
        body.len()
    );
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
    {
        request.push_str("Content-Type: application/json\r\n");
    }
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream
        .write_all(request.as_bytes())
        .expect("send the request");
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    parse_response(&raw)
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

fn parse_response(raw: &[u8]) -> Response {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no complete HTTP response: {text:?}"));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {head}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Response {
        status,
        headers,
        body,
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            out.push_str(rest.get(..n.min(rest.len())).unwrap_or_default());
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// A raw MCP client (legacy handshake: sessions) over plain HTTP.
pub(crate) struct Client {
    port: u16,
    token: Option<String>,
    session: Option<String>,
    origin: Option<String>,
}

impl Client {
    fn headers(&self) -> Vec<(String, String)> {
        let mut h = Vec::new();
        if let Some(t) = &self.token {
            h.push(("Authorization".to_owned(), format!("Bearer {t}")));
        }
        if let Some(s) = &self.session {
            h.push(("Mcp-Session-Id".to_owned(), s.clone()));
            h.push(("MCP-Protocol-Version".to_owned(), "2025-06-18".to_owned()));
        }
        if let Some(o) = &self.origin {
            h.push(("Origin".to_owned(), o.clone()));
        }
        h
    }

    pub(crate) fn post(&self, body: &Value) -> Response {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        send(&mut stream, self.port, &self.headers(), &body.to_string())
    }

    /// POSTs `body` as it is, JSON or not, with `extra` headers.
    pub(crate) fn post_raw(&self, body: &str, extra: &[(&str, &str)]) -> Response {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        let mut headers = self.headers();
        headers.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        send(&mut stream, self.port, &headers, body)
    }

    /// DELETE /mcp with `session` as its `Mcp-Session-Id`.
    pub(crate) fn delete(&self, session: &str) -> Response {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        let mut request = format!(
            "DELETE /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\
             Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-06-18\r\n",
            self.port
        );
        if let Some(t) = &self.token {
            request.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        request.push_str("\r\n");
        stream
            .write_all(request.as_bytes())
            .expect("send the request");
        let mut raw = Vec::new();
        let _ = stream.read_to_end(&mut raw);
        parse_response(&raw)
    }

    /// The session id its handshake got.
    pub(crate) fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// `initialize` + `notifications/initialized`; keeps the session id.
    pub(crate) fn handshake(&mut self) -> Response {
        let answer = self.post(&json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "door-test", "version": "1"}}
        }));
        if answer.status == 200 {
            self.session = answer.header("mcp-session-id").map(str::to_owned);
            let done = self.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
            assert_eq!(done.status, 202, "{done:?}");
        }
        answer
    }

    fn tools(&self) -> (u16, Vec<String>) {
        let answer = self.post(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
        if answer.status != 200 {
            return (answer.status, Vec::new());
        }
        let mut names: Vec<String> = answer.message()["result"]["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .map(|t| t["name"].as_str().expect("name").to_owned())
            .collect();
        names.sort();
        (200, names)
    }
}

/// The JSON-RPC body of a call of `record_args` that writes `marker`.
fn record_call(marker: &Path) -> Value {
    json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
           "params": {"name": "record_args",
                      "arguments": {"marker": marker.to_str().expect("utf-8"), "count": 1}}})
}

#[test]
fn http_needs_a_valid_token_before_any_tool_runs() {
    let host = HttpHost::start("", &[]);
    let token = host.token(&["add", "laptop"]);
    assert!(token.starts_with("thk_"), "{token}");
    let (_d, mark) = marker();

    // No token, and a wrong one: 401 with the challenge; the tool never runs.
    for (client, error) in [
        (host.client(None), None),
        (host.client(Some("thk_wrong")), Some("invalid_token")),
        (
            host.client(Some(&format!("{token}x"))),
            Some("invalid_token"),
        ),
    ] {
        let answer = client.post(&record_call(&mark));
        assert_eq!(answer.status, 401, "{answer:?}");
        let challenge = answer.header("www-authenticate").expect("WWW-Authenticate");
        assert!(challenge.starts_with("Bearer"), "{challenge}");
        if let Some(error) = error {
            assert!(challenge.contains(error), "{challenge}");
        }
        assert!(!answer.body.contains(&token), "the token is never echoed");
    }
    assert!(!mark.exists(), "a refused request ran the tool");

    // Another user of the machine, without the token, gets the same answer.
    if let Some(other) = OtherUser::create("http_needs_a_valid_token_before_any_tool_runs") {
        let script = format!(
            "import urllib.request, urllib.error\n\
             for auth in [None, 'Bearer thk_guess']:\n\
             \x20   req = urllib.request.Request('http://127.0.0.1:{}/mcp', data=b'{}', method='POST')\n\
             \x20   req.add_header('Content-Type', 'application/json')\n\
             \x20   req.add_header('Accept', 'application/json, text/event-stream')\n\
             \x20   if auth: req.add_header('Authorization', auth)\n\
             \x20   try:\n\
             \x20       print(urllib.request.urlopen(req).status)\n\
             \x20   except urllib.error.HTTPError as e:\n\
             \x20       print(e.code)\n",
            host.port,
            record_call(&mark).to_string().replace('\'', "\\'")
        );
        // The system's python (a pyenv shim under /root is out of the other user's reach).
        let out = other
            .command("/usr/bin/python3")
            .args(["-c", &script])
            .output()
            .expect("run python3 as the other user");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .collect::<Vec<_>>(),
            ["401", "401"],
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!mark.exists(), "another user's request ran the tool");
    }

    // With the token the same call runs (so the checks above could fail).
    let mut client = host.client(Some(&token));
    assert_eq!(client.handshake().status, 200);
    let answer = client.post(&record_call(&mark));
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.message()["result"]["isError"], false, "{answer:?}");
    assert!(mark.exists(), "the authorised call did not run");
}

#[test]
fn a_revoked_token_stops_working_at_the_next_request() {
    let host = HttpHost::start("", &[]);
    let token = host.token(&["add", "ci"]);
    let mut client = host.client(Some(&token));
    assert_eq!(client.handshake().status, 200);
    assert_eq!(client.tools().0, 200);
    let listed = host.token(&["list"]);
    assert!(listed.contains("ci"), "{listed}");
    assert!(!listed.contains(&token), "list never shows a token");
    host.token(&["revoke", "ci"]);
    let answer = client.post(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}));
    assert_eq!(answer.status, 401, "{answer:?}");
}

#[test]
fn a_token_gets_its_profile_and_only_its_own_sessions() {
    let host = HttpHost::start("", &[]);
    let narrow = host.token(&["add", "narrow-client", "--profile", "narrow"]);
    let full = host.token(&["add", "full-client"]);
    let mut a = host.client(Some(&narrow));
    assert_eq!(a.handshake().status, 200);
    // read_output is in every profile (unless its [output] read_output = false).
    assert_eq!(
        a.tools(),
        (200, vec!["echo".to_owned(), "read_output".to_owned()])
    );
    let mut b = host.client(Some(&full));
    assert_eq!(b.handshake().status, 200);
    let (status, tools) = b.tools();
    assert_eq!(status, 200);
    assert!(
        tools.len() > 5 && tools.contains(&"record_args".to_owned()),
        "{tools:?}"
    );

    // The narrow token's session is unknown to the other token.
    let stolen = Client {
        session: a.session.clone(),
        ..host.client(Some(&full))
    };
    let (status, _) = stolen.tools();
    assert_eq!(status, 404, "a session made for one token served another");

    // Status names each client's token.
    let out = toolhost_command()
        .args(["status", "--json", "--control"])
        .arg(host.control())
        .output()
        .expect("status");
    let status: Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    let tokens: Vec<&str> = status["mcp_clients"]
        .as_array()
        .expect("clients")
        .iter()
        .filter_map(|c| c["token"].as_str())
        .collect();
    assert!(
        tokens.contains(&"narrow-client") && tokens.contains(&"full-client"),
        "{status}"
    );

    // A token for a profile this host does not serve (profiles are read at start-up) is
    // refused with the reason.
    let gone = host.dir.path().join("profiles").join("gone");
    std::fs::create_dir_all(&gone).expect("profile dir");
    std::fs::write(gone.join("config.toml"), "tools = [\"echo\"]\n").expect("profile");
    let ghost = host.token(&["add", "ghost", "--profile", "gone"]);
    std::fs::remove_dir_all(&gone).expect("remove profile");
    let answer = host
        .client(Some(&ghost))
        .post(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    assert_eq!(answer.status, 403, "{answer:?}");
    assert!(answer.body.contains("gone"), "{answer:?}");
}

/// Two `Host` headers (the first an allowed name, the second another): 400 before anything
/// reads either (RFC 9112 section 3.2), where rmcp alone checked the first and served.
#[test]
fn a_request_with_two_host_headers_gets_400() {
    let host = HttpHost::start("", &[]);
    let token = host.token(&["add", "twohosts"]);
    let client = host.client(Some(&token));
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"}}});
    let answer = client.post_raw(&initialize.to_string(), &[("Host", "evil.example")]);
    assert_eq!(answer.status, 400, "{answer:?}");
    assert!(answer.body.contains("2 Host headers"), "{answer:?}");
    // One Host header: served as before.
    assert_eq!(client.post(&initialize).status, 200);
}

#[test]
fn a_foreign_origin_gets_403() {
    let host = HttpHost::start(
        "[mcp]\nallowed_origins = [\"https://app.example.com:443\"]\n",
        &[],
    );
    let token = host.token(&["add", "browser"]);
    for (origin, expected) in [
        ("http://evil.example".to_owned(), 403),
        ("null".to_owned(), 403),
        (format!("http://localhost:{}", host.port + 1), 403),
        (format!("http://127.0.0.1:{}", host.port), 200),
        (format!("http://localhost:{}", host.port), 200),
        ("https://app.example.com".to_owned(), 200),
    ] {
        let mut client = host.client(Some(&token));
        client.origin = Some(origin.clone());
        let answer = client.handshake();
        assert_eq!(answer.status, expected, "Origin {origin}: {answer:?}");
    }
}

#[test]
fn oversized_bodies_and_too_many_sessions_are_bounded() {
    let host = HttpHost::start("[mcp]\nmax_body_bytes = 2000\nmax_sessions = 2\n", &[]);
    let token = host.token(&["add", "t"]);
    let client = host.client(Some(&token));
    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"pad": "x".repeat(3000)}});
    assert_eq!(client.post(&big).status, 413);

    let mut first = host.client(Some(&token));
    assert_eq!(first.handshake().status, 200);
    let mut second = host.client(Some(&token));
    assert_eq!(second.handshake().status, 200);
    assert_eq!(first.tools().0, 200);
    // A third session ends the least recently used one (the second).
    let mut third = host.client(Some(&token));
    assert_eq!(third.handshake().status, 200);
    assert_eq!(
        second.tools().0,
        404,
        "the oldest idle session was not ended"
    );
    assert_eq!(first.tools().0, 200);
    assert_eq!(third.tools().0, 200);
}

#[test]
fn a_token_over_its_session_quota_ends_only_its_own_sessions() {
    let host = HttpHost::start("[mcp]\nmax_sessions = 4\nmax_sessions_per_token = 3\n", &[]);
    let a = host.token(&["add", "a"]);
    let b = host.token(&["add", "b"]);
    let c = host.token(&["add", "c"]);
    let mut kept = host.client(Some(&b));
    assert_eq!(kept.handshake().status, 200);
    // Token a opens more sessions than its quota: each one past it ends a's own oldest.
    let mut opened = Vec::new();
    for _ in 0..5 {
        let mut client = host.client(Some(&a));
        assert_eq!(client.handshake().status, 200);
        opened.push(client);
    }
    assert_eq!(
        kept.tools().0,
        200,
        "token b's session was ended by token a's"
    );
    let statuses: Vec<u16> = opened.iter().map(|c| c.tools().0).collect();
    assert_eq!(
        statuses,
        [404, 404, 200, 200, 200],
        "a's own oldest end first"
    );
    // The table is full (a: 3, b: 1): a third token's session ends one of a's, the token
    // holding the most, not b's.
    let mut third = host.client(Some(&c));
    assert_eq!(third.handshake().status, 200);
    assert_eq!(
        kept.tools().0,
        200,
        "token b's session was ended by token c's"
    );
    assert_eq!(third.tools().0, 200);
    let live = opened.iter().filter(|c| c.tools().0 == 200).count();
    assert_eq!(live, 2, "one of a's sessions made room for c's");
}

#[test]
fn two_thousand_half_open_connections_leave_the_host_answering() {
    // SAFETY: getrlimit/setrlimit on this process's open-file limit, with a struct on the stack.
    let room = unsafe {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut l);
        l.rlim_cur = l.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        l.rlim_cur
    };
    if room < 2_500 {
        eprintln!(
            "skipping two_thousand_half_open_connections_leave_the_host_answering: the open-file limit ({room}) is below 2,500"
        );
        return;
    }
    // A desktop-like limit of 1,024 descriptors: without the connection limit the half-open
    // connections alone would use them all up.
    let host = HttpHost::start_limited("", &[], Some(1024));
    let token = host.token(&["add", "t"]);
    let mut held = Vec::new();
    for _ in 0..2_000 {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", host.port)) else {
            continue;
        };
        // Headers that never end.
        let _ = s.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n");
        held.push(s);
    }
    assert!(held.len() > 1_000, "only {} connections opened", held.len());
    let mut client = host.client(Some(&token));
    assert_eq!(client.handshake().status, 200);
    let (status, tools) = client.tools();
    assert_eq!(status, 200);
    assert!(tools.contains(&"echo".to_owned()));
    let out = toolhost_command()
        .args(["status", "--control"])
        .arg(host.control())
        .output()
        .expect("status");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(held);
}

#[test]
fn off_loopback_needs_tokens_and_tls_or_an_explicit_flag() {
    for (args, expected) in [
        (
            vec!["--listen", "0.0.0.0:0", "--no-auth"],
            "only for loopback",
        ),
        (vec!["--listen", "0.0.0.0:0"], "needs TLS"),
    ] {
        let out = toolhost_command()
            .args([
                "serve",
                "--mcp",
                "http",
                "--no-watch",
                "--plugins",
                "/nonexistent",
            ])
            .args(&args)
            .output()
            .expect("run serve");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

#[test]
fn https_with_the_operators_certificate() {
    let key = rcgen::KeyPair::generate().expect("key");
    let params =
        rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .expect("params");
    let cert = params.self_signed(&key).expect("self-signed certificate");
    let files = tempfile::tempdir().expect("temp dir");
    let cert_file = files.path().join("cert.pem");
    let key_file = files.path().join("key.pem");
    std::fs::write(&cert_file, cert.pem()).expect("write cert");
    std::fs::write(&key_file, key.serialize_pem()).expect("write key");
    let host = HttpHost::start(
        "",
        &[
            "--tls-cert",
            cert_file.to_str().expect("utf-8"),
            "--tls-key",
            key_file.to_str().expect("utf-8"),
        ],
    );
    let token = host.token(&["add", "tls"]);

    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(cert.der().clone())
        .expect("trust the certificate");
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("protocols")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let connection = rustls::ClientConnection::new(std::sync::Arc::new(config), name).expect("tls");
    let tcp = TcpStream::connect(("127.0.0.1", host.port)).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut tls = rustls::StreamOwned::new(connection, tcp);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "tls-test", "version": "1"}}});
    let answer = send(
        &mut tls,
        host.port,
        &[("Authorization".to_owned(), format!("Bearer {token}"))],
        &init.to_string(),
    );
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.message()["result"]["serverInfo"]["name"], "toolhost");

    // Plain HTTP to the TLS port gets no MCP answer.
    let mut plain = TcpStream::connect(("127.0.0.1", host.port)).expect("connect");
    plain
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let _ = plain.write_all(format!("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\nContent-Length: 2\r\n\r\n{{}}").as_bytes());
    let mut raw = Vec::new();
    let _ = plain.read_to_end(&mut raw);
    assert!(!String::from_utf8_lossy(&raw).contains("200 OK"));
}
