//! `toolhost serve --metrics`: the real binary scraped over raw HTTP, its answer read by a
//! strict Prometheus/OpenMetrics text parser (below), counters checked against the calls
//! made, and the door's rules off loopback.

use std::collections::BTreeMap;
use std::io::{BufRead as _, Read as _, Write as _};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::{PluginDir, echo_build, eventually, toolhost_command, wait_for_socket};

/// One sample: its name, labels and value.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A strict parser of the text exposition format (OpenMetrics 1.0, which Prometheus
/// reads): every line is a `# HELP`, `# TYPE`, `# UNIT` or a sample of a declared family;
/// label values are quoted with `\\`, `\"` and `\n` escapes; the text ends with `# EOF`.
/// Anything else is an error naming the line.
fn parse(text: &str) -> Result<Vec<Sample>, String> {
    let mut families: BTreeMap<String, String> = BTreeMap::new();
    let mut samples = Vec::new();
    let mut ended = false;
    for (n, line) in text.lines().enumerate() {
        let bad = |why: &str| format!("line {}: {why}: {line:?}", n + 1);
        if ended {
            return Err(bad("text after # EOF"));
        }
        if line == "# EOF" {
            ended = true;
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (kind, name, arg) = (parts.next(), parts.next(), parts.next());
            let (Some(kind), Some(name)) = (kind, name) else {
                return Err(bad("a comment without a family name"));
            };
            if !valid_name(name) {
                return Err(bad("an invalid metric name"));
            }
            match kind {
                "TYPE" => {
                    let t = arg.ok_or_else(|| bad("TYPE without a type"))?;
                    let known = [
                        "counter",
                        "gauge",
                        "histogram",
                        "summary",
                        "unknown",
                        "info",
                        "stateset",
                        "gaugehistogram",
                    ];
                    if !known.contains(&t) {
                        return Err(bad("an unknown type"));
                    }
                    families.insert(name.to_owned(), t.to_owned());
                }
                "HELP" | "UNIT" => {}
                _ => return Err(bad("an unknown comment")),
            }
            continue;
        }
        let (name, rest) = match line.find(['{', ' ']) {
            Some(i) => line.split_at(i),
            None => return Err(bad("a sample without a value")),
        };
        if !valid_name(name) {
            return Err(bad("an invalid sample name"));
        }
        let mut labels = BTreeMap::new();
        let mut rest = rest;
        if let Some(inner) = rest.strip_prefix('{') {
            let mut chars = inner.char_indices().peekable();
            let end;
            loop {
                // A label name, `=`, a quoted value, then `,` or `}`.
                let start = chars
                    .peek()
                    .map(|(i, _)| *i)
                    .ok_or_else(|| bad("unclosed labels"))?;
                if inner[start..].starts_with('}') {
                    end = start + 1;
                    break;
                }
                let eq = inner[start..]
                    .find('=')
                    .ok_or_else(|| bad("a label without ="))?
                    + start;
                let key = &inner[start..eq];
                if !valid_name(key) || key.contains(':') {
                    return Err(bad("an invalid label name"));
                }
                while chars.peek().is_some_and(|(i, _)| *i <= eq) {
                    chars.next();
                }
                if chars.next().map(|(_, c)| c) != Some('"') {
                    return Err(bad("an unquoted label value"));
                }
                let mut value = String::new();
                loop {
                    match chars.next().map(|(_, c)| c) {
                        Some('"') => break,
                        Some('\\') => match chars.next().map(|(_, c)| c) {
                            Some('\\') => value.push('\\'),
                            Some('"') => value.push('"'),
                            Some('n') => value.push('\n'),
                            _ => return Err(bad("a bad escape in a label value")),
                        },
                        Some(c) => value.push(c),
                        None => return Err(bad("an unterminated label value")),
                    }
                }
                if labels.insert(key.to_owned(), value).is_some() {
                    return Err(bad("a repeated label"));
                }
                match chars.next() {
                    Some((_, ',')) => {}
                    Some((i, '}')) => {
                        end = i + 1;
                        break;
                    }
                    _ => return Err(bad("labels not separated by ,")),
                }
            }
            rest = &inner[end..];
        }
        let value = rest
            .strip_prefix(' ')
            .ok_or_else(|| bad("no space before the value"))?;
        let value = value.split(' ').next().unwrap_or("");
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v
                .parse::<f64>()
                .map_err(|_| bad("a value that is not a number"))?,
        };
        let family = ["_total", "_bucket", "_count", "_sum", "_created", "_info"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|f| families.contains_key(*f)))
            .or_else(|| families.contains_key(name).then_some(name))
            .ok_or_else(|| bad("a sample of no declared family"))?;
        let t = &families[family];
        let fits = match t.as_str() {
            "counter" => name.ends_with("_total") || name.ends_with("_created"),
            "histogram" => ["_bucket", "_count", "_sum", "_created"]
                .iter()
                .any(|s| name.ends_with(s)),
            _ => name == family,
        };
        if !fits {
            return Err(bad(&format!(
                "a sample that does not fit its family's type {t}"
            )));
        }
        samples.push(Sample {
            name: name.to_owned(),
            labels,
            value,
        });
    }
    if !ended {
        return Err("no # EOF at the end".to_owned());
    }
    Ok(samples)
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

#[test]
fn the_parser_is_strict() {
    let good = "# TYPE a counter\na_total{x=\"q\\\"\\n\"} 1\n# TYPE b gauge\nb 2.5\n# EOF\n";
    let parsed = parse(good).expect("parses");
    assert_eq!(parsed[0].labels["x"], "q\"\n");
    for bad in [
        "a_total 1\n# EOF\n",                        // no family
        "# TYPE a counter\na 1\n# EOF\n",            // a counter sample without _total
        "# TYPE a counter\na_total{x=q} 1\n# EOF\n", // unquoted
        "# TYPE a gauge\na x\n# EOF\n",              // not a number
        "# TYPE a gauge\na 1\n",                     // no EOF
        "# TYPE a gauge\na{x=\"1\",x=\"2\"} 1\n# EOF\n",
    ] {
        assert!(parse(bad).is_err(), "{bad:?} parsed");
    }
}

/// The value of the one sample named `name` whose labels include `labels`.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let found: Vec<&Sample> = samples
        .iter()
        .filter(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .collect();
    assert!(
        found.len() <= 1,
        "more than one {name} {labels:?}: {found:?}"
    );
    found.first().map(|s| s.value)
}

/// A `toolhost serve --metrics` with its own config, plugins and control socket.
struct MetricsHost {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
    plugins: PluginDir,
}

impl Drop for MetricsHost {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl MetricsHost {
    /// Serves the echo fixture (as `libecho.so`, build v1), with `config` and `args`.
    fn start(config: &str, args: &[&str]) -> MetricsHost {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("config.toml"), config).expect("config");
        let plugins = PluginDir::with(&[]);
        std::fs::copy(echo_build("v1"), plugins.path().join("libecho.so")).expect("install");
        let mut cmd = toolhost_command();
        cmd.arg("--config")
            .arg(dir.path().join("config.toml"))
            .args(["serve", "--no-watch", "--plugins"])
            .arg(plugins.path())
            .arg("--control")
            .arg(dir.path().join("control.sock"))
            .args(args);
        let (child, port) = spawn_logging_port(cmd);
        wait_for_socket(&dir.path().join("control.sock"));
        MetricsHost {
            child,
            port,
            dir,
            plugins,
        }
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("control.sock")
    }

    /// `toolhost call --control` of `tool` with `args`; whether it succeeded.
    fn call(&self, tool: &str, args: &str) -> bool {
        toolhost_command()
            .args(["call", "--control"])
            .arg(self.socket())
            .args([tool, args])
            .output()
            .expect("toolhost call")
            .status
            .success()
    }

    /// A scrape as Prometheus makes it (OpenMetrics preferred), parsed strictly.
    fn scrape(&self) -> Vec<Sample> {
        let (status, body) = get_with(
            self.port,
            "/metrics",
            None,
            &format!(
                "Host: 127.0.0.1:{}\r\nAccept: {PROMETHEUS_ACCEPT}\r\n",
                self.port
            ),
        );
        assert_eq!(status, 200, "{body}");
        parse(&body).unwrap_or_else(|e| panic!("{e}\n{body}"))
    }
}

/// Starts `cmd` and returns it with the port of the `.../metrics` address it logs.
fn spawn_logging_port(mut cmd: Command) -> (Child, u16) {
    let mut child = cmd
        .env("TOOLHOST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start toolhost serve --metrics");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            eprintln!("[serve] {line}");
            if let Some(end) = line.find("/metrics") {
                let port: String = line[..end]
                    .chars()
                    .rev()
                    .take_while(char::is_ascii_digit)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                let _ = tx.send(port);
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(port) => (child, port.parse().expect("a port number")),
        Err(_) => {
            let _ = child.kill();
            panic!("toolhost serve --metrics did not log the address it serves on");
        }
    }
}

/// A GET of `path` on 127.0.0.1:`port` as Prometheus sends it: the status and the body.
fn get(port: u16, path: &str, token: Option<&str>) -> (u16, String) {
    get_with(
        port,
        path,
        token,
        &format!("Host: 127.0.0.1:{port}\r\nAccept: {PROMETHEUS_ACCEPT}\r\n"),
    )
}

/// The `Accept` header Prometheus (2.x and 3.x) sends with a scrape.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,\
     application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// A GET with `headers` (each ending in CRLF) instead of the usual `Host`.
fn get_with(port: u16, path: &str, token: Option<&str>, headers: &str) -> (u16, String) {
    let (status, _, body) = get_response(port, path, token, headers);
    (status, body)
}

/// A GET with `headers`: the status, the response's head and its body.
fn get_response(
    port: u16,
    path: &str,
    token: Option<&str>,
    headers: &str,
) -> (u16, String, String) {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        stream,
        "GET {path} HTTP/1.1\r\n{headers}{auth}Connection: close\r\n\r\n"
    )
    .expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    let (head, body) = response
        .split_once("\r\n\r\n")
        .map(|(h, b)| (h.to_owned(), b.to_owned()))
        .unwrap_or_default();
    (status, head, body)
}

#[test]
fn metrics_count_calls_errors_latency_reloads_and_control_clients() {
    let host = MetricsHost::start("", &["--metrics", "127.0.0.1:0"]);
    let (n, m) = (3, 2);
    for _ in 0..n {
        assert!(host.call("echo", r#"{"text": "hi"}"#));
    }
    for _ in 0..m {
        assert!(
            !host.call("echo", "{}"),
            "missing text is refused by the schema"
        );
    }
    let s = host.scrape();
    let calls = value(&s, "toolhost_tool_calls_total", &[("tool", "echo")]);
    assert_eq!(calls, Some(f64::from(n + m)), "{s:?}");
    let errors: Vec<&Sample> = s
        .iter()
        .filter(|x| x.name == "toolhost_tool_errors_total" && x.labels["tool"] == "echo")
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].labels["kind"], "schema_violation");
    assert_eq!(errors[0].value, f64::from(m));
    let count = value(
        &s,
        "toolhost_tool_call_duration_seconds_count",
        &[("tool", "echo")],
    );
    assert_eq!(count, Some(f64::from(n + m)));
    let inf = value(
        &s,
        "toolhost_tool_call_duration_seconds_bucket",
        &[("tool", "echo"), ("le", "+Inf")],
    );
    assert_eq!(inf, Some(f64::from(n + m)));
    let buckets: Vec<f64> = s
        .iter()
        .filter(|x| x.name == "toolhost_tool_call_duration_seconds_bucket")
        .map(|x| x.value)
        .collect();
    assert!(
        buckets.windows(2).all(|w| w[0] <= w[1]),
        "cumulative: {buckets:?}"
    );
    assert_eq!(value(&s, "toolhost_plugins_loaded", &[]), Some(1.0));
    assert_eq!(value(&s, "toolhost_reloads_total", &[]), Some(0.0));
    // The `call` clients have exited, but the host sees each one hang up on its
    // own schedule: wait for the last to be counted out rather than race it.
    eventually(
        crate::support::WAIT_BOUND,
        "the finished call clients counted out",
        || value(&host.scrape(), "toolhost_control_clients", &[]) == Some(0.0),
    );
    let mapped = value(&s, "toolhost_plugin_generations_mapped", &[]).expect("generations");

    // A changed file, rescanned: one reload, one more generation mapped.
    let staged = host.plugins.path().join(".libecho.so.new");
    std::fs::copy(echo_build("v2"), &staged).expect("stage");
    std::fs::rename(&staged, host.plugins.path().join("libecho.so")).expect("replace");
    let out = toolhost_command()
        .args(["reload", "--control"])
        .arg(host.socket())
        .output()
        .expect("reload");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = host.scrape();
    assert_eq!(value(&s, "toolhost_reloads_total", &[]), Some(1.0));
    assert_eq!(
        value(&s, "toolhost_plugin_generations_mapped", &[]),
        Some(mapped + 1.0)
    );
    assert!(value(&s, "toolhost_plugin_retained_bytes", &[]).is_some_and(|b| b > 0.0));

    // A control-socket client holding its connection open is counted while it does.
    let held = std::os::unix::net::UnixStream::connect(host.socket()).expect("connect");
    eventually(
        crate::support::WAIT_BOUND,
        "the control client counted",
        || value(&host.scrape(), "toolhost_control_clients", &[]) == Some(1.0),
    );
    drop(held);
    eventually(
        crate::support::WAIT_BOUND,
        "the control client gone",
        || value(&host.scrape(), "toolhost_control_clients", &[]) == Some(0.0),
    );

    // Only /metrics, only GET.
    assert_eq!(get(host.port, "/", None).0, 404);
}

#[test]
fn metrics_show_running_workers_with_isolate() {
    let host = MetricsHost::start("", &["--isolate", "--metrics", "127.0.0.1:0"]);
    assert!(host.call("echo", r#"{"text": "hi"}"#));
    let s = host.scrape();
    let running: f64 = s
        .iter()
        .filter(|x| x.name == "toolhost_workers_running")
        .map(|x| x.value)
        .sum();
    assert!(running >= 1.0, "{s:?}");
    assert!(s.iter().any(|x| x.name == "toolhost_worker_restarts_total"));
    assert!(
        s.iter()
            .filter(|x| x.name == "toolhost_worker_quarantined")
            .all(|x| x.value == 0.0)
    );
}

fn serve_refused(args: &[&str]) -> String {
    let plugins = PluginDir::with(&[]);
    let out = toolhost_command()
        .args(["serve", "--no-watch", "--plugins"])
        .arg(plugins.path())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("toolhost serve");
    assert!(!out.status.success(), "served: {args:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_non_loopback_metrics_address_needs_tls_or_insecure_http_and_a_token() {
    let msg = serve_refused(&["--metrics", "0.0.0.0:0"]);
    assert!(
        msg.contains("--metrics 0.0.0.0:0")
            && msg.contains("--tls-cert")
            && msg.contains("--insecure-http"),
        "{msg}"
    );
    let msg = serve_refused(&["--metrics", "0.0.0.0:0", "--insecure-http", "--no-auth"]);
    assert!(msg.contains("--no-auth is only for loopback"), "{msg}");

    // With --insecure-http it serves, and asks for a token.
    let host = MetricsHost::start("", &["--metrics", "0.0.0.0:0", "--insecure-http"]);
    let (status, body) = get(host.port, "/metrics", None);
    assert_eq!(status, 401, "{body}");
    let token = crate::support::token_add_with(
        &crate::support::state_home(),
        "scraper",
        &["--scope", "metrics"],
    );
    let (status, body) = get(host.port, "/metrics", Some(&token));
    assert_eq!(status, 200, "{body}");
    parse(&body).expect("parses");
    assert_eq!(get(host.port, "/metrics", Some("not-a-token")).0, 401);
}

#[test]
fn the_config_can_ask_for_a_token_on_loopback_too() {
    let host = MetricsHost::start(
        "[metrics]\nlisten = \"127.0.0.1:0\"\nrequire_token = true\n",
        &[],
    );
    assert_eq!(get(host.port, "/metrics", None).0, 401);
    let token = crate::support::token_add_with(
        &crate::support::state_home(),
        "scraper",
        &["--scope", "metrics"],
    );
    let (status, body) = get(host.port, "/metrics", Some(&token));
    assert_eq!(status, 200, "{body}");
}

#[test]
fn metrics_refuse_a_foreign_host_or_origin_and_tokens_without_the_metrics_scope() {
    let host = MetricsHost::start(
        "[metrics]\nlisten = \"127.0.0.1:0\"\nrequire_token = true\n",
        &[],
    );
    let state = crate::support::state_home();
    let scrape = crate::support::token_add_with(&state, "prometheus", &["--scope", "metrics"]);
    let agent = crate::support::token_add(&state, "agent");
    let both =
        crate::support::token_add_with(&state, "both", &["--scope", "mcp", "--scope", "metrics"]);
    let port = host.port;

    // DNS rebinding: a page at evil.example whose name now resolves to 127.0.0.1.
    let (status, body) = get_with(port, "/metrics", Some(&scrape), "Host: evil.example\r\n");
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("evil.example") && body.contains("allowed_hosts"),
        "{body}"
    );
    let (status, body) = get_with(
        port,
        "/metrics",
        Some(&scrape),
        &format!("Host: 127.0.0.1:{port}\r\nOrigin: http://evil.example\r\n"),
    );
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("Origin") && body.contains("allowed_origins"),
        "{body}"
    );
    let (status, body) = get_with(port, "/metrics", Some(&scrape), "");
    assert_eq!(status, 400, "no Host at all: {body}");
    // The server's own origin and the loopback names pass.
    let (status, body) = get_with(
        port,
        "/metrics",
        Some(&scrape),
        &format!("Host: localhost:{port}\r\nOrigin: http://localhost:{port}\r\n"),
    );
    assert_eq!(status, 200, "{body}");

    // An MCP token cannot scrape; a metrics token or one with both scopes can.
    let (status, body) = get(port, "/metrics", Some(&agent));
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("--scope metrics"), "{body}");
    assert_eq!(get(port, "/metrics", Some(&both)).0, 200);

    // `token list` shows each token's scopes.
    let listed = crate::support::toolhost_command()
        .args(["token", "list", "--json"])
        .env("XDG_STATE_HOME", &state)
        .output()
        .expect("token list");
    let listed: serde_json::Value =
        serde_json::from_slice(&listed.stdout).expect("token list --json");
    let scopes = |name: &str| {
        listed
            .as_array()
            .and_then(|a| a.iter().find(|t| t["name"] == name))
            .map(|t| t["scopes"].clone())
    };
    assert_eq!(scopes("prometheus"), Some(serde_json::json!(["metrics"])));
    assert_eq!(scopes("agent"), Some(serde_json::json!(["mcp"])));
    assert_eq!(scopes("both"), Some(serde_json::json!(["mcp", "metrics"])));
}

/// Prometheus' own parsers (the Python client's): `classic` reads the text format 0.0.4,
/// `openmetrics` OpenMetrics 1.0. Prints each family's name, type and samples as JSON.
const PROMETHEUS_PARSE: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families as classic
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics
parse = classic if sys.argv[1] == "classic" else openmetrics
families = []
for family in parse(sys.stdin.read()):
    families.append({"name": family.name, "type": family.type,
                     "samples": [[s.name, s.labels, s.value] for s in family.samples]})
print(json.dumps(families))
"#;

/// One sample as Prometheus' parser read it: (family, type, sample name, labels, value).
type ParsedSample = (String, String, String, BTreeMap<String, String>, f64);

/// `text` read by Prometheus' parser for `format`: every sample.
fn prometheus_parse(format: &str, text: &str) -> Vec<ParsedSample> {
    let mut child = Command::new(crate::mcp::python())
        .args(["-c", PROMETHEUS_PARSE, format])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start python");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write the scrape");
    let out = child.wait_with_output().expect("python");
    assert!(
        out.status.success(),
        "Prometheus' {format} parser refused the text: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let families: Vec<serde_json::Value> =
        serde_json::from_slice(&out.stdout).expect("the parser's JSON");
    let mut samples = Vec::new();
    for f in families {
        for s in f["samples"].as_array().expect("samples") {
            let labels = s[1]
                .as_object()
                .expect("labels")
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect();
            samples.push((
                f["name"].as_str().unwrap_or_default().to_owned(),
                f["type"].as_str().unwrap_or_default().to_owned(),
                s[0].as_str().unwrap_or_default().to_owned(),
                labels,
                s[2].as_f64().expect("a value"),
            ));
        }
    }
    samples
}

#[test]
fn both_metrics_formats_read_the_same_in_prometheus_own_parsers() {
    let host = MetricsHost::start("", &["--metrics", "127.0.0.1:0"]);
    for _ in 0..3 {
        assert!(host.call("echo", r#"{"text": "hi"}"#));
    }
    assert!(!host.call("echo", "{}"));
    let host_header = format!("Host: 127.0.0.1:{}\r\n", host.port);
    for (accept, format, content_type) in [
        (
            PROMETHEUS_ACCEPT,
            "openmetrics",
            "application/openmetrics-text; version=1.0.0",
        ),
        (
            "text/plain;version=0.0.4",
            "classic",
            "text/plain; version=0.0.4",
        ),
        // No Accept header (curl): the classic text.
        ("", "classic", "text/plain; version=0.0.4"),
    ] {
        let headers = if accept.is_empty() {
            host_header.clone()
        } else {
            format!("{host_header}Accept: {accept}\r\n")
        };
        let (status, head, body) = get_response(host.port, "/metrics", None, &headers);
        assert_eq!(status, 200, "{body}");
        assert!(
            head.to_ascii_lowercase()
                .contains(&format!("content-type: {content_type}")),
            "Accept {accept:?}: {head}"
        );
        let samples = prometheus_parse(format, &body);
        let find = |name: &str, labels: &[(&str, &str)]| {
            samples
                .iter()
                .find(|(_, _, n, l, _)| {
                    n == name
                        && labels
                            .iter()
                            .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
                })
                .map(|(family, kind, _, _, value)| (family.clone(), kind.clone(), *value))
                .unwrap_or_else(|| panic!("{format}: no {name} {labels:?} in {samples:?}"))
        };
        let (family, kind, calls) = find("toolhost_tool_calls_total", &[("tool", "echo")]);
        assert_eq!(
            (kind.as_str(), calls),
            ("counter", 4.0),
            "{format}: {family}"
        );
        let (_, kind, errors) = find(
            "toolhost_tool_errors_total",
            &[("tool", "echo"), ("kind", "schema_violation")],
        );
        assert_eq!((kind.as_str(), errors), ("counter", 1.0), "{format}");
        let (_, kind, count) = find(
            "toolhost_tool_call_duration_seconds_count",
            &[("tool", "echo")],
        );
        assert_eq!((kind.as_str(), count), ("histogram", 4.0), "{format}");
        let (_, kind, loaded) = find("toolhost_plugins_loaded", &[]);
        assert_eq!((kind.as_str(), loaded), ("gauge", 1.0), "{format}");
        let (_, kind, _) = find("toolhost_reloads_total", &[]);
        assert_eq!(kind, "counter", "{format}");
    }
}
