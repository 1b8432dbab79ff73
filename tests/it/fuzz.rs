//! Property tests of the doors: arbitrary control-socket lines, config and profile files,
//! and MCP HTTP requests (headers and bodies). Each feeds a real door with input no
//! client would send and shows the door answers with an error and keeps serving. Case
//! counts are bounded so the suite stays fast; a failure prints the input that broke it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use proptest::prelude::*;
use serde_json::{Value, json};

use crate::support::{PluginDir, serve_command, spawn_http_server, token_add, toolhost_command};

/// A `toolhost serve` killed when dropped.
struct Serving(Child);

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A JSON value of bounded size.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,40}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(".{0,12}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A control request line: raw bytes, any JSON, or a request-shaped object with odd
/// methods and parameters.
fn control_line() -> impl Strategy<Value = Vec<u8>> {
    let method = prop_oneof![
        Just("status".to_owned()),
        Just("list".to_owned()),
        Just("call".to_owned()),
        Just("reload".to_owned()),
        ".{0,20}",
    ];
    prop_oneof![
        prop::collection::vec(
            any::<u8>().prop_filter("no newline", |b| *b != b'\n'),
            0..300
        ),
        json_value().prop_map(|v| v.to_string().into_bytes()),
        (method, json_value(), json_value()).prop_map(|(m, id, params)| {
            json!({"id": id, "method": m, "params": params})
                .to_string()
                .into_bytes()
        }),
    ]
}

/// A `toolhost serve --no-watch` of `plugins` (its `TMPDIR` and control socket in `dir`)
/// and one connection to its control socket, a line at a time.
struct ControlLines {
    _host: Serving,
    writer: std::cell::RefCell<UnixStream>,
    reader: std::cell::RefCell<BufReader<UnixStream>>,
}

impl ControlLines {
    fn serve(plugins: &PluginDir, dir: &Path) -> ControlLines {
        let socket = dir.join("control.sock");
        let host = Serving(
            serve_command(&plugins.path(), &socket)
                .env("TMPDIR", dir)
                .stderr(Stdio::null())
                .spawn()
                .expect("start toolhost serve"),
        );
        crate::support::wait_for_socket(&socket);
        let stream = UnixStream::connect(&socket).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        ControlLines {
            _host: host,
            writer: std::cell::RefCell::new(stream.try_clone().expect("clone")),
            reader: std::cell::RefCell::new(BufReader::new(stream)),
        }
    }

    /// Sends `line` (a newline is added) and returns the answer line.
    fn send(&self, line: &[u8]) -> String {
        let mut bytes = line.to_vec();
        bytes.push(b'\n');
        self.writer.borrow_mut().write_all(&bytes).expect("send");
        let mut answer = String::new();
        self.reader
            .borrow_mut()
            .read_line(&mut answer)
            .expect("an answer line");
        answer
    }

    fn ask(&self, request: &Value) -> Value {
        let answer = self.send(request.to_string().as_bytes());
        serde_json::from_str(&answer).expect("a JSON answer")
    }
}

#[test]
fn the_control_socket_answers_every_line_and_keeps_serving() {
    let plugins = PluginDir::with(&["hello_tools"]);
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("control.sock");
    let control = ControlLines::serve(&plugins, dir.path());
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 300,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    runner
        .run(&control_line(), |line| {
            let answer = control.send(&line);
            let answer: Value = serde_json::from_str(&answer)
                .map_err(|e| TestCaseError::fail(format!("not JSON ({e}): {answer}")))?;
            prop_assert!(
                answer.get("result").is_some() || answer["error"]["message"].is_string(),
                "{answer}"
            );
            Ok(())
        })
        .expect("every line got an answer");
    // The same connection, and a new one, still work.
    let answer = control.ask(&json!({"id": 1, "method": "status"}));
    assert!(answer.get("result").is_some(), "{answer}");
    let out = toolhost_command()
        .args(["status", "--control"])
        .arg(&socket)
        .output()
        .expect("status");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// TOML-ish text: known keys with values of any type, unknown keys, and plain garbage.
fn config_text() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        Just("plugin_dirs"),
        Just("default_profile"),
        Just("control_socket"),
        Just("[calls]\ntimeout_secs"),
        Just("[mcp]\nmax_connections"),
        Just("[mcp]\nheader_read_timeout_secs"),
        Just("[mcp]\nallowed_origins"),
        Just("[tools.x]\nrisk"),
        Just("[toolsets]\nset"),
        Just("[agent.children]\nmax_depth"),
        Just("tools"),
        Just("unknown_key"),
    ];
    let value = prop_oneof![
        Just("\"deny\"".to_owned()),
        Just("-1".to_owned()),
        Just("1e400".to_owned()),
        Just("nan".to_owned()),
        Just("[\"@nope\"]".to_owned()),
        any::<i64>().prop_map(|n| n.to_string()),
        "\"[^\"\\\\]{0,20}\"",
        ".{0,20}",
    ];
    prop_oneof![
        prop::collection::vec((key, value), 0..4).prop_map(|pairs| {
            pairs
                .into_iter()
                .map(|(k, v)| format!("{k} = {v}\n"))
                .collect()
        }),
        ".{0,200}",
    ]
}

#[test]
fn config_and_profile_files_never_crash_the_loader() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("config.toml");
    let profile_dir = dir.path().join("profiles").join("p");
    std::fs::create_dir_all(&profile_dir).expect("profile dir");
    let profile_file = profile_dir.join("config.toml");
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 400,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    runner
        .run(
            &(config_text(), config_text()),
            |(host_text, profile_text)| {
                // Profiles loaded here keep their state in the temporary folder.
                std::fs::write(&file, format!("state_dir = \"state\"\n{host_text}"))
                    .expect("write config");
                match toolhost::LoadedConfig::load(Some(&file)) {
                    Ok(config) => {
                        std::fs::write(&profile_file, &profile_text).expect("write profile");
                        if let Err(e) = toolhost::Profile::load(&config, "p") {
                            prop_assert!(
                                e.to_string().contains(&*profile_file.to_string_lossy()),
                                "a profile error that does not name its file: {e}"
                            );
                        }
                    }
                    Err(e) => prop_assert!(
                        e.to_string().contains(&*file.to_string_lossy()),
                        "a config error that does not name its file: {e}"
                    ),
                }
                Ok(())
            },
        )
        .expect("every file loaded or was refused with its name");
}

/// An HTTP request: odd headers (names from the ones that matter, values of any visible
/// bytes), and a body that is JSON-RPC-shaped, any JSON, or raw bytes.
fn http_request() -> impl Strategy<Value = (Vec<(String, Vec<u8>)>, Vec<u8>)> {
    let name = prop_oneof![
        Just("Content-Type".to_owned()),
        Just("Accept".to_owned()),
        Just("Mcp-Session-Id".to_owned()),
        Just("MCP-Protocol-Version".to_owned()),
        Just("Origin".to_owned()),
        Just("Last-Event-ID".to_owned()),
        Just("Mcp-Method".to_owned()),
        "[A-Za-z][A-Za-z0-9-]{0,15}",
    ];
    let value = prop::collection::vec(0x20u8..0x7f, 0..60);
    let body = prop_oneof![
        (".{0,20}", json_value(), json_value()).prop_map(|(method, id, params)| {
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
                .to_string()
                .into_bytes()
        }),
        (json_value(), json_value()).prop_map(|(id, params)| {
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
                .to_string()
                .into_bytes()
        }),
        json_value().prop_map(|v| v.to_string().into_bytes()),
        prop::collection::vec(any::<u8>(), 0..200),
    ];
    (prop::collection::vec((name, value), 0..5), body)
}

fn status_of(raw: &[u8]) -> Option<u16> {
    let text = String::from_utf8_lossy(raw);
    text.lines().next()?.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn mcp_http_answers_odd_requests_and_keeps_serving() {
    let plugins = PluginDir::with(&["hello_tools"]);
    let dir = tempfile::tempdir().expect("temp dir");
    let token = token_add(dir.path(), "fuzz");
    let mut command = toolhost_command();
    command
        .args([
            "serve",
            "--mcp",
            "http",
            "--listen",
            "127.0.0.1:0",
            "--no-watch",
            "--plugins",
        ])
        .arg(plugins.path())
        .arg("--control")
        .arg(dir.path().join("control.sock"))
        .env("XDG_STATE_HOME", dir.path());
    let (child, port) = spawn_http_server(command);
    let _host = Serving(child);
    let send = |headers: &[(String, Vec<u8>)], body: &[u8], auth: bool| -> Vec<u8> {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let mut request = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Length: {}\r\n",
            body.len()
        )
        .into_bytes();
        if auth {
            request.extend_from_slice(format!("Authorization: Bearer {token}\r\n").as_bytes());
        }
        for (k, v) in headers {
            request.extend_from_slice(k.as_bytes());
            request.extend_from_slice(b": ");
            request.extend_from_slice(v);
            request.extend_from_slice(b"\r\n");
        }
        request.extend_from_slice(b"\r\n");
        request.extend_from_slice(body);
        let _ = stream.write_all(&request);
        let mut raw = Vec::new();
        let _ = stream.read_to_end(&mut raw);
        raw
    };
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 150,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    runner
        .run(
            &(http_request(), any::<bool>()),
            |((headers, body), auth)| {
                let raw = send(&headers, &body, auth);
                let status = status_of(&raw);
                prop_assert!(
                    status.is_some_and(|s| (200..500).contains(&s)),
                    "no HTTP answer, or a server error: {}",
                    String::from_utf8_lossy(&raw)
                );
                if !auth {
                    prop_assert_eq!(status, Some(401));
                }
                Ok(())
            },
        )
        .expect("every request got an answer");
    // A proper request still works.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "after-fuzz", "version": "1"}}});
    let headers = [
        ("Content-Type".to_owned(), b"application/json".to_vec()),
        (
            "Accept".to_owned(),
            b"application/json, text/event-stream".to_vec(),
        ),
    ];
    let raw = send(&headers, init.to_string().as_bytes(), true);
    assert_eq!(
        status_of(&raw),
        Some(200),
        "{}",
        String::from_utf8_lossy(&raw)
    );
}

/// Bytes the static checks must refuse before the dynamic loader sees them: anything,
/// anything behind an ELF magic, and a real plugin cut short at any length.
fn not_a_whole_library(real: std::sync::Arc<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    let len = real.len();
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..512),
        prop::collection::vec(any::<u8>(), 0..400).prop_map(|rest| {
            let mut bytes = b"\x7fELF\x02\x01\x01".to_vec();
            bytes.extend(rest);
            bytes
        }),
        (0..len - 1).prop_map(move |n| real[..n].to_vec()),
    ]
}

#[test]
fn the_static_checks_refuse_arbitrary_bytes_and_the_host_keeps_serving() {
    let plugins = PluginDir::with(&["hello_tools"]);
    let real = std::sync::Arc::new(
        std::fs::read(crate::support::so("hello_tools")).expect("read a real plugin"),
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let control = ControlLines::serve(&plugins, dir.path());
    let ask = |request: Value| control.ask(&request);
    let case = plugins.path().join("libcase.so");
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 80,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    runner
        .run(&not_a_whole_library(real), |bytes| {
            // A new inode each time, as an operator's copy would be.
            let tmp = plugins.path().join(".case.tmp");
            std::fs::write(&tmp, &bytes).expect("write the case");
            std::fs::rename(&tmp, &case).expect("install the case");
            let reload = ask(json!({"id": 1, "method": "reload"}));
            let errors = reload["result"]["errors"].to_string();
            let pending = reload["result"]["pending"].to_string();
            prop_assert!(
                errors.contains("libcase.so") || pending.contains("libcase.so"),
                "{} bytes were not refused: {reload}",
                bytes.len()
            );
            let call = ask(json!({"id": 2, "method": "call",
                "params": {"tool": "greet", "arguments": {"name": "Ada"}}}));
            prop_assert_eq!(&call["result"]["is_error"], &json!(false), "{}", call);
            Ok(())
        })
        .expect("every file was refused and greet kept answering");
    std::fs::remove_file(&case).expect("remove the case");
    ask(json!({"id": 3, "method": "reload"}));
    // Nothing was left behind in the private copy folder.
    let leftovers: Vec<_> = walk(dir.path())
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "so"))
        .collect();
    assert!(leftovers.is_empty(), "copies left behind: {leftovers:?}");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}
