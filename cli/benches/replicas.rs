//! Many replicas: (1) the cost per call of the PostgreSQL state backend against files:
//! MCP stdio round trips of a call that writes an audit line, and of one whose output is
//! cut and kept, with `[state]` files and postgres, interleaved in the same run; a lasting
//! approval check in process, from files, from the shared state's cache and from the
//! database itself; (2) requests per second and latency of 2026-07-28 calls through
//! HAProxy (`contrib/haproxy.cfg`) to one, two and three replicas, beside one replica
//! reached directly.
//!
//! Needs root (PostgreSQL runs as a throwaway user), PostgreSQL's server and HAProxy
//! (Debian's `postgresql` and `haproxy`). `cargo bench -p toolhost-cli --bench replicas`.
//! Printed figures only.

mod common;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::peer::Peer;
use serde_json::json;

const WARMUP: usize = 200;
const CALLS: usize = 1000;
const ROUNDS: usize = 5;
/// Calls through HAProxy per configuration, and the clients sending them at once.
const LB_CALLS: usize = 4000;
const LB_CLIENTS: usize = 8;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// PostgreSQL run by a throwaway user in a temporary folder.
struct Postgres {
    user: String,
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Postgres {
    fn start() -> Postgres {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL's server is installed (/usr/lib/postgresql)")
            .filter_map(Result::ok)
            .map(|e| e.path().join("bin"))
            .filter(|b| b.join("initdb").is_file())
            .max()
            .expect("an initdb");
        let user = format!("thbench{}", std::process::id() % 100_000);
        let made = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                &user,
            ])
            .status()
            .expect("run useradd");
        assert!(made.success(), "useradd {user} (the benchmark needs root)");
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod");
        let data = dir.path().join("data");
        std::fs::create_dir(&data).expect("data folder");
        let owned = Command::new("chown")
            .arg(&user)
            .arg(&data)
            .status()
            .expect("chown");
        assert!(owned.success());
        let id = |flag: &str| {
            let out = Command::new("id")
                .args([flag, &user])
                .output()
                .expect("run id");
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        };
        let (uid, gid) = (id("-u"), id("-g"));
        // setpriv execs the program itself (runuser would stay in between, and not pass
        // the shutdown signal on).
        let as_user = |program: PathBuf| {
            let mut cmd = Command::new("setpriv");
            cmd.arg(format!("--reuid={uid}"))
                .arg(format!("--regid={gid}"))
                .args(["--clear-groups", "--"])
                .arg(program);
            cmd
        };
        let init = as_user(bin.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args(["-U", "toolhost", "-A", "trust", "--no-sync", "-E", "UTF8"])
            .stdout(Stdio::null())
            .status()
            .expect("initdb");
        assert!(init.success(), "initdb");
        let port = free_port();
        let child = as_user(bin.join("postgres"))
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-c", "listen_addresses=127.0.0.1"])
            .args([
                "-c",
                "unix_socket_directories=",
                "-c",
                "max_connections=200",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start postgres");
        let pg = Postgres {
            user,
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !Command::new("psql")
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "toolhost"])
            .args(["-d", "postgres", "-Atc", "SELECT 1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            assert!(Instant::now() < deadline, "PostgreSQL did not answer");
            std::thread::sleep(Duration::from_millis(50));
        }
        pg
    }

    fn url(&self) -> String {
        format!(
            "postgres://toolhost@127.0.0.1:{}/postgres?sslmode=disable",
            self.port
        )
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SAFETY: kill has no memory preconditions; the pid is our child's.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGINT);
        }
        let _ = self.child.wait();
        let _ = Command::new("userdel").arg(&self.user).status();
    }
}

fn stdio_serve(toolhost: &Path, dir: &Path, name: &str, config: &str) -> Command {
    let home = dir.join(name);
    std::fs::create_dir_all(home.join("config/toolhost")).expect("config folder");
    std::fs::write(home.join("config/toolhost/config.toml"), config).expect("config");
    let mut cmd = Command::new(toolhost);
    cmd.args(["serve", "--mcp", "stdio", "--plugins"])
        .arg(dir.join("plugins"))
        .arg("--control")
        .arg(home.join("control.sock"))
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .env("TOOLHOST_REPLICA", name)
        .env("TOOLHOST_LOG", "warn");
    cmd
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

/// (1): stdio round trips, files against postgres.
fn per_call_costs(toolhost: &Path, dir: &Path, pg: &Postgres) {
    let state = format!("[state]\nbackend = \"postgres\"\nurl = \"{}\"\n", pg.url());
    let output = "[output]\nmax_lines = 5\n";
    let subjects = [
        ("audit line, files", "files", String::new(), false),
        ("audit line, postgres", "pg", state.clone(), false),
        ("kept output, files", "files-out", output.to_owned(), true),
        (
            "kept output, postgres",
            "pg-out",
            format!("{state}{output}"),
            true,
        ),
    ];
    let small = json!({"name": "echo", "arguments": {"text": "hello"}});
    let long: String = (1..=30).map(|i| format!("line {i}\n")).collect();
    let big = json!({"name": "echo", "arguments": {"text": long}});
    let mut peers: Vec<Peer> = subjects
        .iter()
        .map(|(_, name, config, kept)| {
            let mut peer = Peer::start(stdio_serve(toolhost, dir, name, config));
            let params = if *kept { &big } else { &small };
            for _ in 0..WARMUP {
                peer.request("tools/call", params.clone());
            }
            peer
        })
        .collect();
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); peers.len()];
    for _ in 0..ROUNDS {
        for ((peer, times), (_, _, _, kept)) in
            peers.iter_mut().zip(times.iter_mut()).zip(&subjects)
        {
            let params = if *kept { &big } else { &small };
            for _ in 0..CALLS {
                let started = Instant::now();
                let result = peer.request("tools/call", params.clone());
                times.push(started.elapsed());
                assert_ne!(result["isError"], json!(true), "{result}");
            }
        }
    }
    println!(
        "MCP stdio tools/call round trip, echo from a .so, {ROUNDS} rounds of {CALLS} calls each, interleaved"
    );
    println!(
        "{:<26} {:>10} {:>10} {:>12}",
        "", "median us", "p99 us", "vs files"
    );
    let mut base = 0.0;
    for (i, ((name, ..), times)) in subjects.iter().zip(times.iter_mut()).enumerate() {
        times.sort();
        let median = us(percentile(times, 50));
        let p99 = us(percentile(times, 99));
        if i % 2 == 0 {
            base = median;
        }
        println!(
            "{name:<26} {median:>10.1} {p99:>10.1} {:>+11.1}",
            median - base
        );
    }
}

/// (1b): a lasting approval check in process.
fn approval_checks(pg: &Postgres) {
    use toolhost::LastingApprovals as _;
    let settings = |replica: &str| toolhost::StateSettings {
        url: pg.url(),
        ca_file: None,
        pool_size: 2,
        replica: replica.to_owned(),
    };
    let key = toolhost::ApprovalKey {
        tool: "note_write".to_owned(),
        plugin: "echo".to_owned(),
        plugin_sha256: "ab".repeat(32),
        schema_sha256: "cd".repeat(32),
        risk: toolhost::Risk::Write,
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let dirs = toolhost::ProfileDirs::under(dir.path(), "p");
    let files = toolhost::ApprovalFiles::new([("p".to_owned(), dirs)]);
    files.keep("p", &key, "bench").expect("keep in the file");
    let listening = toolhost::SharedState::connect(settings("bench-a"), true).expect("connect");
    let cached = toolhost::state::SharedApprovals::new(Arc::clone(&listening), ["p".to_owned()]);
    cached
        .keep("p", &key, "bench")
        .expect("keep in the database");
    // Without the listener, nothing is cached: every check reads the database.
    let deaf = toolhost::SharedState::connect(settings("bench-b"), false).expect("connect");
    let uncached = toolhost::state::SharedApprovals::new(deaf, ["p".to_owned()]);
    let subjects: [(&str, &dyn toolhost::LastingApprovals); 3] = [
        ("files (stat, then the cache)", &files),
        ("postgres, cached (listening)", &cached),
        ("postgres, read each time", &uncached),
    ];
    println!("\nlasting approval check in process, {CALLS} checks each after {WARMUP} warm-up");
    println!("{:<32} {:>10} {:>10}", "", "median us", "p99 us");
    for (name, store) in subjects {
        for _ in 0..WARMUP {
            assert!(store.approved("p", &key));
        }
        let mut times: Vec<Duration> = (0..CALLS)
            .map(|_| {
                let started = Instant::now();
                assert!(store.approved("p", &key));
                started.elapsed()
            })
            .collect();
        times.sort();
        println!(
            "{name:<32} {:>10.2} {:>10.2}",
            us(percentile(&times, 50)),
            us(percentile(&times, 99))
        );
    }
}

/// One replica over HTTP.
struct Replica {
    child: Child,
    port: u16,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_replica(toolhost: &Path, dir: &Path, config: &Path, name: &str) -> Replica {
    use std::io::BufRead as _;
    let port = free_port();
    let mut child = Command::new(toolhost)
        .arg("--config")
        .arg(config)
        .args(["serve", "--mcp", "http", "--no-watch", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--plugins")
        .arg(dir.join("plugins"))
        .arg("--control")
        .arg(dir.join(format!("{name}.sock")))
        .env("XDG_STATE_HOME", dir.join(format!("state-{name}")))
        .env("TOOLHOST_REPLICA", name)
        .env("TOOLHOST_LOG", "info,rmcp=warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start a replica");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = std::io::BufReader::new(stderr).lines();
    for line in lines.by_ref() {
        if line
            .expect("a log line")
            .contains("serving MCP over streamable HTTP")
        {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    Replica { child, port }
}

struct Haproxy(Child);

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_haproxy(dir: &Path, replicas: &[Replica]) -> (Haproxy, u16) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let shipped = std::fs::read_to_string(root.join("contrib/haproxy.cfg")).expect("haproxy.cfg");
    let port = free_port();
    let mut config = String::new();
    for line in shipped.lines() {
        let t = line.trim_start();
        if t.starts_with("bind ") {
            config.push_str(&format!("    bind 127.0.0.1:{port}\n"));
        } else if t.starts_with("log ") || t == "option httplog" {
            // No request log: it would be the load generator's output.
        } else if !t.starts_with("server ") {
            config.push_str(line);
            config.push('\n');
        }
    }
    for (i, r) in replicas.iter().enumerate() {
        config.push_str(&format!("    server r{i} 127.0.0.1:{}\n", r.port));
    }
    let file = dir.join(format!("haproxy-{port}.cfg"));
    std::fs::write(&file, config).expect("write haproxy.cfg");
    let child = Command::new("haproxy")
        .args(["-db", "-f"])
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start haproxy (Debian's haproxy package)");
    // Up once every replica has answered a readiness check through it.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < replicas.len() {
        assert!(Instant::now() < deadline, "replicas not up behind HAProxy");
        if let Ok(body) = http(
            port,
            "GET /ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        ) && let Some(at) = body.find("\"replica\":\"")
        {
            let rest = &body[at + 11..];
            seen.insert(rest[..rest.find('"').unwrap_or(0)].to_owned());
        } else {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    (Haproxy(child), port)
}

fn http(port: u16, request: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.write_all(request.as_bytes())?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw)?;
    Ok(raw)
}

fn call_request(port: u16, token: &str) -> String {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
    "name": "echo", "arguments": {"text": "hello"},
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"}
    }}})
    .to_string();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: tools/call\r\nMcp-Name: echo\r\nAuthorization: Bearer {token}\r\n\
         Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// `LB_CALLS` calls from `LB_CLIENTS` clients at once to `port`: (calls/s, sorted latencies).
fn load(port: u16, token: &str) -> (f64, Vec<Duration>) {
    let request = Arc::new(call_request(port, token));
    let started = Instant::now();
    let clients: Vec<_> = (0..LB_CLIENTS)
        .map(|_| {
            let request = Arc::clone(&request);
            std::thread::spawn(move || {
                (0..LB_CALLS / LB_CLIENTS)
                    .map(|_| {
                        let t = Instant::now();
                        let answer = http(port, &request).expect("a call");
                        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
                        t.elapsed()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut times: Vec<Duration> = clients
        .into_iter()
        .flat_map(|c| c.join().expect("a client"))
        .collect();
    let rate = times.len() as f64 / started.elapsed().as_secs_f64();
    times.sort();
    (rate, times)
}

/// (2): calls per second through HAProxy to 1, 2 and 3 replicas.
fn through_haproxy(toolhost: &Path, dir: &Path, pg: &Postgres) {
    let config = dir.join("replicas.toml");
    std::fs::write(
        &config,
        format!("[state]\nbackend = \"postgres\"\nurl = \"{}\"\n", pg.url()),
    )
    .expect("config");
    let out = Command::new(toolhost)
        .arg("--config")
        .arg(&config)
        .args(["token", "add", "bench"])
        .env("XDG_STATE_HOME", dir.join("state-admin"))
        .output()
        .expect("token add");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let replicas: Vec<Replica> = (1..=3)
        .map(|i| start_replica(toolhost, dir, &config, &format!("r{i}")))
        .collect();
    println!(
        "\n2026-07-28 tools/call of echo over HTTP (a connection per call), {LB_CALLS} calls from {LB_CLIENTS} clients at once; every process on the same 2 cores"
    );
    println!(
        "{:<34} {:>10} {:>10} {:>10}",
        "", "calls/s", "median us", "p99 us"
    );
    let report = |name: &str, (rate, times): (f64, Vec<Duration>)| {
        println!(
            "{name:<34} {rate:>10.0} {:>10.0} {:>10.0}",
            us(percentile(&times, 50)),
            us(percentile(&times, 99))
        );
    };
    // Warm every replica.
    for r in &replicas {
        for _ in 0..100 {
            http(r.port, &call_request(r.port, &token)).expect("warm-up");
        }
    }
    report(
        "one replica, direct (baseline)",
        load(replicas[0].port, &token),
    );
    for n in 1..=3 {
        let (_lb, port) = start_haproxy(dir, &replicas[..n]);
        report(&format!("HAProxy, {n} replica(s)"), load(port, &token));
    }
}

fn main() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!(
            "the replicas benchmark needs root (PostgreSQL runs as a throwaway user); skipped"
        );
        return;
    }
    let release = common::build_release(&["fixture-echo"], "v1");
    let toolhost = Path::new(env!("CARGO_BIN_EXE_toolhost"));
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("plugins")).expect("plugins folder");
    std::fs::copy(
        release.join("libfixture_echo.so"),
        dir.path().join("plugins/libfixture_echo.so"),
    )
    .expect("install the plugin");
    let pg = Postgres::start();
    per_call_costs(toolhost, dir.path(), &pg);
    approval_checks(&pg);
    through_haproxy(toolhost, dir.path(), &pg);
}
