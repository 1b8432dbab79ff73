//! MCP servers as tool sources (`[[mcp_servers]]`), with real servers the test setup
//! starts: the Python SDK's MCPServer fixture (tests/mcp/upstream_server.py) behind
//! `toolhost serve --mcp stdio`, driven by the Python client (tests/mcp/upstream_checks.py)
//! in both protocol generations on both sides; the reference server-everything over stdio
//! and over streamable HTTP through `toolhost list` and `call`; the sandbox a stdio server
//! runs in; a server added and removed by `toolhost reload`; quarantine after repeated
//! failures; and the audit line naming the server.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::mcp::python;
use crate::support::{
    PluginDir, eventually, mcp_node, serve_command, wait_exit, wait_for_socket, wait_until,
    workspace_root,
};

/// A work folder whose `toolhost/config.toml` (its `XDG_CONFIG_HOME`) is `config`, with a
/// state folder of its own and a `markers` folder servers may write.
struct Work {
    dir: tempfile::TempDir,
}

impl Work {
    fn new(config: &str) -> Work {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("toolhost")).expect("config folder");
        std::fs::create_dir_all(dir.path().join("markers")).expect("markers");
        let work = Work { dir };
        work.write_config(config);
        work
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn write_config(&self, config: &str) {
        std::fs::write(self.path().join("toolhost/config.toml"), config).expect("config");
    }

    fn markers(&self) -> PathBuf {
        self.path().join("markers")
    }

    /// `toolhost ARGS` with this folder's config and state.
    fn toolhost(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolhost"));
        cmd.env("XDG_CONFIG_HOME", self.path())
            .env("XDG_STATE_HOME", self.path().join("state"))
            .env("TOOLHOST_LOG", "warn")
            .env_remove("TOOLHOST_PLUGINS");
        cmd
    }

    /// `toolhost call --yes --plugins PLUGINS TOOL ARGS`: (success, stdout and stderr).
    fn call(&self, plugins: &Path, tool: &str, args: &Value) -> (bool, String) {
        let out = self
            .toolhost()
            .args(["call", "--yes", "--plugins"])
            .arg(plugins)
            .args([tool, &args.to_string()])
            .output()
            .expect("toolhost call");
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }

    /// `toolhost list --json`, as JSON.
    fn list(&self, plugins: &Path, profile: Option<&str>) -> Vec<Value> {
        let mut cmd = self.toolhost();
        cmd.args(["list", "--json", "--plugins"]).arg(plugins);
        if let Some(profile) = profile {
            cmd.args(["--profile", profile]);
        }
        let out = cmd.output().expect("toolhost list");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("a JSON listing")
    }
}

/// A `[[mcp_servers]]` entry for the Python fixture, named `up`, that may write the work
/// folder's `markers` and whose annotations are trusted; `extra` lines are added to it.
fn python_server(work: &Work, extra: &str) -> String {
    let venv = python()
        .parent()
        .and_then(Path::parent)
        .expect("the virtualenv")
        .to_path_buf();
    format!(
        "[[mcp_servers]]\nname = \"up\"\ncommand = {:?}\nargs = [{:?}]\n\
         read_paths = [{:?}, {:?}]\nwrite_paths = [{:?}]\ntrust_annotations = true\n{extra}\n",
        python().display().to_string(),
        workspace_root()
            .join("tests/mcp/upstream_server.py")
            .display()
            .to_string(),
        venv.display().to_string(),
        workspace_root().join("tests/mcp").display().to_string(),
        work.markers().display().to_string(),
    )
}

fn names(listing: &[Value]) -> Vec<String> {
    listing
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

/// Every rule of a plugin's tool holds for a server's, for an MCP client of toolhost:
/// listing beside the plugin's, approval by annotations, structured results, the output
/// budget with the full text read back, progress, cancellation, the server's question,
/// its list change, a crash mid-call and the restart, status. Both protocol generations
/// on each side: a 2026-07-28 client with the server spoken to in 2026-07-28, and a
/// 2025-11-25 client with the server held to 2025-11-25. Then the audit log names the
/// server.
#[test]
fn a_python_sdk_server_behind_toolhost_keeps_every_rule_of_a_plugins_tool() {
    let plugins = PluginDir::with(&["fixture_basic"]);
    for (client, upstream) in [("auto", "auto"), ("legacy", "2025-11-25")] {
        let work = Work::new("");
        work.write_config(&python_server(&work, &format!("protocol = {upstream:?}")));
        let out = Command::new(python())
            .arg(workspace_root().join("tests/mcp/upstream_checks.py"))
            .arg("--toolhost")
            .arg(env!("CARGO_BIN_EXE_toolhost"))
            .arg("--plugins")
            .arg(plugins.path())
            .arg("--control")
            .arg(work.path().join("control.sock"))
            .arg("--work")
            .arg(work.path())
            .args(["--mode", client])
            .output()
            .expect("run upstream_checks.py");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "client {client}, server {upstream}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for check in [
            "listed beside the plugin's",
            "approval follows the server's annotations",
            "checked against the server's schema before it is called",
            "structured result passes through",
            "cut by the budget and its full text reads back",
            "progress reaches the client",
            "cancelled at the server",
            "question (elicitation) reaches the client",
            "sampling request reaches the client's model",
            "list change reaches the client",
            "crashes mid-call fails that call, and comes back",
            "status shows the server",
        ] {
            assert!(stdout.contains(check), "{check}: {stdout}");
        }
        // The audit log names the server of each of its tools' calls.
        let audit = std::fs::read_to_string(work.path().join("state/toolhost/audit.jsonl"))
            .expect("the audit log");
        let line: Value = audit
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|l| l["tool"] == "up_echo")
            .unwrap_or_else(|| panic!("no audit line for up_echo: {audit}"));
        assert_eq!(line["plugin"]["mcp_server"], "up", "{line}");
        assert_eq!(line["plugin"]["name"], "mcp", "{line}");
        assert_eq!(line["risk"], "read", "{line}");
    }
}

/// A stdio server runs confined: it writes its own folder and the entry's `write_paths`
/// and nothing else, and reaches no TCP port unless its entry says `network = true`.
/// Profiles list its tools beside a plugin's.
#[test]
fn a_stdio_server_is_confined_and_a_profile_mixes_its_tools_with_a_plugins() {
    let plugins = PluginDir::with(&["fixture_basic"]);
    let work = Work::new("");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    for network in [false, true] {
        work.write_config(&format!(
            "{}\n[toolsets]\nmixed = [\"echo\", \"up_echo\"]\n",
            python_server(&work, &format!("network = {network}"))
        ));
        let outside = work.path().join("outside.txt");
        let (ok, said) = work.call(
            &plugins.path(),
            "up_try_write",
            &serde_json::json!({"path": outside}),
        );
        assert!(ok && said.contains("refused: Permission denied"), "{said}");
        assert!(!outside.exists());
        let marker = work.markers().join("m.txt");
        let (ok, said) = work.call(
            &plugins.path(),
            "up_try_write",
            &serde_json::json!({"path": marker}),
        );
        assert!(ok && said.contains("wrote"), "{said}");
        let home = work.path().join("state/toolhost/mcp-servers/up/own.txt");
        let (ok, said) = work.call(
            &plugins.path(),
            "up_try_write",
            &serde_json::json!({"path": home}),
        );
        assert!(ok && said.contains("wrote"), "its own folder: {said}");
        // Nothing else of the host's state: its audit log is beside that folder.
        let audit = work.path().join("state/toolhost/audit.jsonl");
        let (ok, said) = work.call(
            &plugins.path(),
            "up_try_write",
            &serde_json::json!({"path": audit}),
        );
        assert!(ok && said.contains("refused"), "the audit log: {said}");
        let (ok, said) = work.call(
            &plugins.path(),
            "up_try_connect",
            &serde_json::json!({"port": port}),
        );
        if network {
            assert!(ok && said.contains("connected"), "{said}");
        } else {
            assert!(ok && said.contains("refused"), "network off: {said}");
        }
        // Unix sockets are off unless the entry allows them: the socket itself is refused
        // (seccomp), before the missing path could be.
        let nowhere = work.path().join("no-such.sock");
        let (ok, said) = work.call(
            &plugins.path(),
            "up_try_control",
            &serde_json::json!({"path": nowhere}),
        );
        assert!(
            ok && said.contains("refused") && !said.contains("No such file"),
            "unix sockets off: {said}"
        );
    }
    // A question the server asks of a caller who cannot be asked (no terminal) is
    // refused with a message, which the server's result carries.
    let (ok, said) = work.call(&plugins.path(), "up_ask", &serde_json::json!({}));
    assert!(!ok && said.contains("not available"), "{said}");
    // A per-tool override holds for a server's tool as for a plugin's.
    let config = std::fs::read_to_string(work.path().join("toolhost/config.toml")).expect("config");
    work.write_config(&format!("{config}\n[tools.up_note]\nrisk = \"deny\"\n"));
    let listed = work.list(&plugins.path(), None);
    let note = listed
        .iter()
        .find(|t| t["name"] == "up_note")
        .expect("up_note");
    assert_eq!(note["risk"], "deny", "{note}");
    let (ok, said) = work.call(
        &plugins.path(),
        "up_note",
        &serde_json::json!({"text": "x"}),
    );
    assert!(!ok && !said.contains("noted"), "{said}");
    work.write_config(&config);
    // What a server starts out of its process group ends with it (the command's end
    // ends the server).
    let (ok, said) = work.call(&plugins.path(), "up_daemon", &serde_json::json!({}));
    let pid = said
        .lines()
        .find_map(|l| l.trim().parse::<u32>().ok())
        .unwrap_or_else(|| panic!("a process id: {said}"));
    assert!(ok, "{said}");
    wait_until("the server's daemon ended with it", || {
        !Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.contains(") Z "))
    });
    // `check --mcp-server` connects as a host would and says what it found.
    let out = work
        .toolhost()
        .args(["check", "--json", "--mcp-server", "up"])
        .output()
        .expect("toolhost check --mcp-server");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["server"]["state"], "running", "{report}");
    assert_eq!(report["server"]["protocol"], "2026-07-28", "{report}");
    let risks: Vec<(String, String)> = report["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| (t["name"].to_string(), t["risk"].to_string()))
        .collect();
    for (tool, risk) in [
        ("up_echo", "read"),
        ("up_note", "write"),
        ("up_lookup", "network"),
        ("up_remove", "destructive"),
    ] {
        assert!(
            risks.contains(&(format!("{tool:?}"), format!("{risk:?}"))),
            "{tool} {risk}: {risks:?}"
        );
    }
    // Not trusted (the default), its readOnlyHint cannot lower a tool below write; over
    // its max_tools, its listing is refused with the key named.
    let config = std::fs::read_to_string(work.path().join("toolhost/config.toml")).expect("config");
    work.write_config(&config.replace("trust_annotations = true\n", ""));
    let echo_risk = |report: &Value| {
        report["tools"]
            .as_array()
            .and_then(|tools| tools.iter().find(|t| t["name"] == "up_echo"))
            .map(|t| t["risk"].clone())
    };
    let out = work
        .toolhost()
        .args(["check", "--json", "--mcp-server", "up"])
        .output()
        .expect("toolhost check --mcp-server");
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(echo_risk(&report), Some(Value::from("write")), "{report}");
    work.write_config(&config.replace(
        "[[mcp_servers]]\nname = \"up\"",
        "[[mcp_servers]]\nname = \"up\"\nmax_tools = 2",
    ));
    let out = work
        .toolhost()
        .args(["check", "--mcp-server", "up"])
        .output()
        .expect("toolhost check --mcp-server");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !out.status.success() && said.contains("more than 2 tools") && said.contains("max_tools"),
        "{said}"
    );
    work.write_config(&config);
    // Its memory is its cgroup's to bound, where the host can make one.
    match report["server"]["containment"].as_str() {
        Some(c) if c.starts_with("cgroup") => {
            let config =
                std::fs::read_to_string(work.path().join("toolhost/config.toml")).expect("config");
            work.write_config(&config.replace(
                "[[mcp_servers]]\nname = \"up\"",
                "[[mcp_servers]]\nname = \"up\"\nmemory_mb = 96",
            ));
            let (ok, said) = work.call(&plugins.path(), "up_hog", &serde_json::json!({"mb": 16}));
            assert!(ok && said.contains("held 16 MiB"), "{said}");
            let (ok, said) = work.call(&plugins.path(), "up_hog", &serde_json::json!({"mb": 512}));
            assert!(!ok && said.contains("went away during the call"), "{said}");
            work.write_config(&config);
        }
        other => println!(
            "skipped the memory limit check: no cgroup for MCP servers here ({other:?}; it \
             needs root or a delegated cgroup)"
        ),
    }
    let out = work
        .toolhost()
        .args(["check", "--mcp-server", "nope"])
        .output()
        .expect("toolhost check --mcp-server");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("names no MCP server 'nope' (its [[mcp_servers]]: up)"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A profile that lists a plugin's tool and a server's, through a toolset.
    let profiles = work.path().join("toolhost/profiles/mixed");
    std::fs::create_dir_all(&profiles).expect("profile");
    std::fs::write(profiles.join("config.toml"), "tools = [\"@mixed\"]\n").expect("profile");
    let listed = work.list(&plugins.path(), Some("mixed"));
    let mut shown = names(&listed);
    shown.sort();
    assert_eq!(shown, ["echo", "read_output", "up_echo"], "{listed:?}");
    let up = listed
        .iter()
        .find(|t| t["name"] == "up_echo")
        .expect("up_echo");
    assert_eq!(up["mcp_server"], "up");
    assert_eq!(up["plugin"], "mcp");
    assert_eq!(up["mode"], "process");
}

/// The reference server-everything (Node) over stdio and over streamable HTTP: its tools
/// are listed under the prefix with the risk of their annotations (a readOnlyHint only
/// where `trust_annotations` is set), and calls give its
/// text, structured content and images.
#[test]
fn server_everything_over_stdio_and_http_serves_text_structured_results_and_images() {
    let node = mcp_node();
    let everything = workspace_root().join(
        "target/mcp-tools/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    );
    let modules = workspace_root().join("target/mcp-tools/node_modules");
    let plugins = PluginDir::with(&[]);
    let (mut http_server, port) = start_everything_http(node, &everything);
    for transport in ["stdio", "http"] {
        let work = Work::new("");
        work.write_config(&if transport == "stdio" {
            format!(
                "[[mcp_servers]]\nname = \"every\"\ncommand = {:?}\nargs = [{:?}, \"stdio\"]\n\
                 read_paths = [{:?}]\n",
                node.display().to_string(),
                everything.display().to_string(),
                modules.display().to_string()
            )
        } else {
            format!(
                "[[mcp_servers]]\nname = \"every\"\nurl = \"http://127.0.0.1:{port}/mcp\"\n\
                 trust_annotations = true\n"
            )
        });
        let listed = work.list(&plugins.path(), None);
        let echo = listed
            .iter()
            .find(|t| t["name"] == "every_echo")
            .unwrap_or_else(|| panic!("{transport}: {listed:?}"));
        assert_eq!(echo["mcp_server"], "every", "{transport}");
        // Its readOnlyHint counts only where the entry trusts its annotations (http here).
        let risk = if transport == "http" { "read" } else { "write" };
        assert_eq!(echo["risk"], risk, "{transport}: readOnlyHint");
        let (ok, said) = work.call(
            &plugins.path(),
            "every_echo",
            &serde_json::json!({"message": "hi"}),
        );
        assert!(ok && said.contains("Echo: hi"), "{transport}: {said}");
        let (ok, said) = work.call(
            &plugins.path(),
            "every_get-structured-content",
            &serde_json::json!({"location": "New York"}),
        );
        assert!(
            ok && said.contains("\"temperature\""),
            "{transport}: {said}"
        );
        let (ok, said) = work.call(
            &plugins.path(),
            "every_get-tiny-image",
            &serde_json::json!({}),
        );
        assert!(
            ok && said.contains("[image: image/png"),
            "{transport}: {said}"
        );
        let (ok, said) = work.call(
            &plugins.path(),
            "every_get-resource-links",
            &serde_json::json!({"count": 2}),
        );
        assert!(
            ok && said.matches("[resource: ").count() == 2,
            "{transport}: {said}"
        );
    }
    let _ = http_server.kill();
    let _ = http_server.wait();
}

/// An HTTP server that wants a bearer token gets the entry's (`token_env`), and is spoken
/// to in 2026-07-28 when it can (another toolhost, serving a plugin); a wrong token leaves
/// it unreachable, saying why, while the rest of the command goes on.
#[test]
fn an_http_server_gets_its_bearer_token_and_the_newer_protocol() {
    let inner_plugins = PluginDir::with(&["fixture_basic"]);
    let inner = tempfile::tempdir().expect("temp dir");
    let (_server, url, token) = crate::mcp::http_server(
        &inner_plugins.path(),
        &inner.path().join("control.sock"),
        &inner.path().join("state"),
    );
    let plugins = PluginDir::with(&[]);
    let work = Work::new(&format!(
        "[[mcp_servers]]\nname = \"inner\"\nurl = {url:?}\ntoken_env = \"INNER_TOKEN\"\n"
    ));
    let out = work
        .toolhost()
        .args(["check", "--json", "--mcp-server", "inner"])
        .env("INNER_TOKEN", &token)
        .output()
        .expect("toolhost check");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert_eq!(report["server"]["state"], "running", "{report}");
    assert_eq!(report["server"]["protocol"], "2026-07-28", "{report}");
    let out = work
        .toolhost()
        .args(["call", "--yes", "--plugins"])
        .arg(plugins.path())
        .args(["inner_echo", r#"{"text": "through two hosts"}"#])
        .env("INNER_TOKEN", &token)
        .output()
        .expect("toolhost call");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains("through two hosts"),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A wrong token: the server is unreachable, and the command says why.
    let out = work
        .toolhost()
        .args(["list", "--plugins"])
        .arg(plugins.path())
        .env("INNER_TOKEN", "not-the-token")
        .output()
        .expect("toolhost list");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && said.contains("the MCP server 'inner' is down"),
        "{said}"
    );
    // An HTTP server is reconnected, not started again (nothing of it runs here).
    assert!(
        said.contains("is being reconnected") && !said.contains("started again"),
        "{said}"
    );
    // A token variable that is not set stops loading the config, naming it.
    let out = work
        .toolhost()
        .args(["list", "--plugins"])
        .arg(plugins.path())
        .env_remove("INNER_TOKEN")
        .output()
        .expect("toolhost list");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("token_env = \"INNER_TOKEN\""),
        "{said}"
    );
}

/// server-everything's streamable HTTP transport on a free port, once it listens.
fn start_everything_http(node: &Path, everything: &Path) -> (Child, u16) {
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
            .expect("start server-everything");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("listening on port") {
                    let _ = tx.send(true);
                } else if line.contains("already in use") {
                    let _ = tx.send(false);
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(true) => return (child, port),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
    panic!("server-everything did not start listening");
}

/// `toolhost status --json` of the host on `socket`.
fn status(work: &Work, socket: &Path) -> Value {
    let out = work
        .toolhost()
        .args(["status", "--json", "--control"])
        .arg(socket)
        .output()
        .expect("toolhost status");
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// A server added to the config serves on `toolhost reload` and leaves on the next. One
/// that fails more than `max_crashes` times (here: once) is quarantined: its tools stay
/// listed, status lists them as unavailable with the reason, a call is refused saying
/// so, until a reload lifts it.
#[test]
fn reload_adds_and_removes_servers_and_a_crashing_one_is_quarantined_until_reload() {
    let plugins = PluginDir::with(&["fixture_basic"]);
    let limits = "[isolation]\nmax_crashes = 0\n";
    let work = Work::new(limits);
    let socket = work.path().join("control.sock");
    let mut host = serve_command(&plugins.path(), &socket)
        .env("XDG_CONFIG_HOME", work.path())
        .env("XDG_STATE_HOME", work.path().join("state"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("toolhost serve");
    wait_for_socket(&socket);
    let call_via = |tool: &str, args: Value| -> (bool, String) {
        let out = work
            .toolhost()
            .args(["call", "--yes", "--control"])
            .arg(&socket)
            .args([tool, &args.to_string()])
            .output()
            .expect("toolhost call --control");
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let reload = || -> String {
        let out = work
            .toolhost()
            .args(["reload", "--control"])
            .arg(&socket)
            .output()
            .expect("toolhost reload");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let server_state = |name: &str| -> Option<Value> {
        status(&work, &socket)["mcp_servers"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["name"] == name).cloned())
    };
    let echo = serde_json::json!({"text": "x"});
    let (ok, said) = call_via("up_echo", echo.clone());
    assert!(!ok && said.contains("up_echo"), "no server yet: {said}");
    // Added: serves once the reload returns.
    work.write_config(&format!(
        "{limits}{}",
        python_server(&work, "unix_sockets = true")
    ));
    reload();
    let (ok, said) = call_via("up_echo", echo.clone());
    assert!(ok && said.contains("echo: x"), "{said}");
    // Allowed Unix sockets, the server reaches the control socket, and the host refuses
    // it as it refuses a plugin's worker: what toolhost starts never drives toolhost.
    let (ok, said) = call_via(
        "up_try_control",
        serde_json::json!({"path": socket.display().to_string()}),
    );
    assert!(
        ok && said.contains("answered:")
            && said.contains("permission denied")
            && said.contains("may not use the control socket"),
        "{said}"
    );
    // A second host, whose descendant the server is not, refuses it by toolhost's mark.
    let second_work = Work::new("");
    let second_socket = second_work.path().join("control.sock");
    let mut second = serve_command(&plugins.path(), &second_socket)
        .env("XDG_CONFIG_HOME", second_work.path())
        .env("XDG_STATE_HOME", second_work.path().join("state"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("a second toolhost serve");
    wait_for_socket(&second_socket);
    let (ok, said) = call_via(
        "up_try_control",
        serde_json::json!({"path": second_socket.display().to_string()}),
    );
    assert!(
        ok && said.contains("answered:") && said.contains("processes a toolhost confined"),
        "a server of one host reached another host's control socket: {said}"
    );
    let _ = second.kill();
    let _ = second.wait();
    // A crash is one failure too many: quarantined, its tools listed but refused.
    let (ok, said) = call_via("up_crash", serde_json::json!({}));
    assert!(!ok && said.contains("went away during the call"), "{said}");
    eventually(Duration::from_secs(60), "up quarantined", || {
        server_state("up").filter(|s| s["state"] == "quarantined")
    });
    let unavailable = status(&work, &socket)["unavailable"].to_string();
    assert!(
        unavailable.contains("up_echo") && unavailable.contains("quarantined"),
        "{unavailable}"
    );
    let (ok, said) = call_via("up_echo", echo.clone());
    assert!(
        !ok && said.contains("quarantined") && said.contains("toolhost reload"),
        "{said}"
    );
    // A reload lifts it.
    let said = reload();
    assert!(said.contains("quarantine lifted: mcp:up"), "{said}");
    eventually(Duration::from_secs(60), "up serving again", || {
        let (ok, said) = call_via("up_echo", echo.clone());
        (ok && said.contains("echo: x")).then_some(())
    });
    // A second server that cannot start at all is quarantined too; the first serves on.
    work.write_config(&format!(
        "{limits}{}\n[[mcp_servers]]\nname = \"broken\"\ncommand = \"/bin/false\"\n",
        python_server(&work, "")
    ));
    reload();
    eventually(Duration::from_secs(60), "broken quarantined", || {
        server_state("broken").filter(|s| s["state"] == "quarantined")
    });
    let (ok, said) = call_via("up_echo", echo.clone());
    assert!(ok && said.contains("echo: x"), "{said}");
    // Removed: their tools leave.
    work.write_config(limits);
    reload();
    wait_until("the servers gone from status", || {
        status(&work, &socket)["mcp_servers"]
            .as_array()
            .is_some_and(Vec::is_empty)
    });
    let (ok, said) = call_via("up_echo", echo);
    assert!(!ok && said.contains("up_echo"), "removed: {said}");
    let _ = nix_term(&host);
    wait_exit(&mut host, "toolhost serve");
}

fn nix_term(child: &Child) -> i32 {
    // SAFETY: kill takes integers.
    unsafe { libc::kill(i32::try_from(child.id()).expect("pid"), libc::SIGTERM) }
}

/// A stdio MCP server in plain Python (no SDK, so any user can run it): one tool,
/// `detach`, starts `/bin/sleep SECONDS` as a daemon (double fork, `setsid`, an empty
/// environment, so neither the server's process group nor its tag holds it), which
/// writes the file `marker` first.
const DETACHING_SERVER: &str = r#"
import json, os, sys
def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    request = json.loads(line)
    method, rid = request.get("method"), request.get("id")
    if rid is None:
        continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "detaching", "version": "1.0"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [{
            "name": "detach", "description": "Starts a daemon.",
            "inputSchema": {"type": "object", "properties": {
                "seconds": {"type": "integer"}, "marker": {"type": "string"}}},
            "annotations": {"readOnlyHint": True}}]}})
    elif method == "tools/call":
        arguments = request["params"].get("arguments", {})
        seconds, marker = str(arguments["seconds"]), arguments["marker"]
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                with open(marker, "w") as f:
                    f.write("started")
                os.execve("/bin/sleep", ["sleep", seconds], {})
            os._exit(0)
        os.wait()
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "content": [{"type": "text", "text": "detached"}]}})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": method}})
"#;

/// The live (not zombie) processes running `sleep SECONDS`.
fn sleeping(seconds: u64) -> Vec<u32> {
    let want = format!("sleep\0{seconds}\0");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want.as_bytes())
                && std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                    s.rsplit_once(')')
                        .is_some_and(|(_, r)| !r.trim_start().starts_with('Z'))
                })
        })
        .collect()
}

/// What a stdio MCP server starts as a daemon (double fork, `setsid`, environment
/// cleared) ends with the host that started the server, as root and as a plain user
/// (where no cgroup holds the server): after a one-shot `toolhost call`, after a serving
/// host is asked to stop, and (held by a PID namespace: a root host's) after it is
/// killed.
#[test]
fn a_servers_daemon_that_clears_its_environment_ends_with_the_host() {
    let test = "a_servers_daemon_that_clears_its_environment_ends_with_the_host";
    // The system's Python, which every user may run (not a user's shim).
    let python3 = Path::new("/usr/bin/python3");
    if !python3.exists() {
        println!("skipped {test}: /usr/bin/python3 is not installed");
        return;
    }
    let plugins = PluginDir::with(&[]);
    let other = crate::support::OtherUser::create(test);
    let mut users = vec![None];
    if other.is_some() {
        users.push(other.as_ref());
    }
    // Seconds no other process sleeps: this run's own.
    let base = 4_000_000 + u64::from(std::process::id()) * 8;
    for (n, user) in users.into_iter().enumerate() {
        let who = if user.is_some() {
            "a plain user"
        } else {
            "the tests' user"
        };
        let work = Work::new("");
        let script = work.path().join("detaching.py");
        std::fs::write(&script, DETACHING_SERVER).expect("server script");
        work.write_config(&format!(
            "[[mcp_servers]]\nname = \"d\"\ncommand = {:?}\nargs = [{:?}]\n\
             protocol = \"2025-11-25\"\nread_paths = [{:?}]\nwrite_paths = [{:?}]\n",
            python3.display().to_string(),
            script.display().to_string(),
            work.path().display().to_string(),
            work.markers().display().to_string(),
        ));
        if let Some(u) = user {
            let status = Command::new("chown")
                .arg("-R")
                .arg(format!("{}:{}", u.uid, u.gid))
                .arg(work.path())
                .status()
                .expect("chown");
            assert!(status.success());
        }
        let as_user = || match user {
            Some(u) => u.command(env!("CARGO_BIN_EXE_toolhost")),
            None => Command::new(env!("CARGO_BIN_EXE_toolhost")),
        };
        let toolhost = |args: &[&str]| {
            let mut cmd = as_user();
            cmd.env("XDG_CONFIG_HOME", work.path())
                .env("XDG_STATE_HOME", work.path().join("state"))
                .env("HOME", work.path())
                .env("TOOLHOST_LOG", "warn")
                .env_remove("TOOLHOST_PLUGINS")
                .args(args)
                .arg("--plugins")
                .arg(plugins.path());
            cmd
        };
        let detach_args = |seconds: u64| {
            serde_json::json!({
                "seconds": seconds,
                "marker": work.markers().join(format!("daemon-{seconds}")),
            })
            .to_string()
        };
        let started = |seconds: u64| work.markers().join(format!("daemon-{seconds}")).exists();
        // A one-shot host.
        let seconds = base + n as u64 * 4;
        let out = toolhost(&["call", "--yes", "d_detach", &detach_args(seconds)])
            .stdin(Stdio::null())
            .output()
            .expect("toolhost call");
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && said.contains("detached"),
            "{who}: {said}"
        );
        wait_until("the daemon's start", || started(seconds));
        wait_until("the one-shot host's server's daemon gone", || {
            sleeping(seconds).is_empty()
        });
        // A serving host, stopped (SIGTERM), then one killed (SIGKILL).
        for signal in ["TERM", "KILL"] {
            let seconds = base + n as u64 * 4 + if signal == "TERM" { 1 } else { 2 };
            let socket = work.path().join(format!("control-{signal}.sock"));
            let socket_text = socket.display().to_string();
            let mut host = toolhost(&["serve", "--no-watch", "--control", &socket_text])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .expect("toolhost serve");
            wait_for_socket(&socket);
            let out = as_user()
                .env("XDG_CONFIG_HOME", work.path())
                .env("HOME", work.path())
                .args(["call", "--yes", "--control", &socket_text])
                .args(["d_detach", &detach_args(seconds)])
                .output()
                .expect("toolhost call --control");
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(out.status.success(), "{who}: {said}");
            wait_until("the daemon's start", || started(seconds));
            wait_until("the daemon running while its host serves", || {
                !sleeping(seconds).is_empty()
            });
            let status = as_user()
                .env("XDG_CONFIG_HOME", work.path())
                .env("HOME", work.path())
                .args(["status", "--json", "--control", &socket_text])
                .output()
                .expect("toolhost status");
            let status: Value = serde_json::from_slice(&status.stdout).expect("status JSON");
            let held_by = status["mcp_servers"][0]["containment"]
                .as_str()
                .expect("what holds the server")
                .to_owned();
            if signal == "KILL" && !held_by.contains("PID namespace") {
                // A cgroup holds it only while the host lives; a host that is not root
                // makes no PID namespace (see the book's MCP servers page).
                println!(
                    "{who}: the server is held by {held_by:?}, no PID namespace: a killed \
                     host cannot end its daemon"
                );
                let _ = Command::new("kill").arg(host.id().to_string()).status();
                wait_exit(&mut host, "the serving host");
                continue;
            }
            let _ = Command::new("kill")
                .arg(format!("-{signal}"))
                .arg(host.id().to_string())
                .status();
            wait_exit(&mut host, "the serving host");
            wait_until("the serving host's server's daemon gone", || {
                sleeping(seconds).is_empty()
            });
        }
    }
}
