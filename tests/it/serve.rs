//! `toolhost serve` and its control socket: in process through the library, and as the
//! real binary with its `reload`, `status` and `call --control` clients.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use toolhost::{CatalogConfig, ControlClient, DispatchConfig, ServeConfig};

use crate::support::{PluginDir, echo_build, eventually, eventually_async};

const BOUND: Duration = Duration::from_secs(20);

async fn wait_for_socket(path: &Path) {
    let what = format!("{} answering", path.display());
    eventually_async(BOUND, &what, || {
        std::os::unix::net::UnixStream::connect(path).is_ok()
    })
    .await;
}

fn config(plugins: &Path, socket: &Path) -> ServeConfig {
    ServeConfig {
        catalog: CatalogConfig {
            dirs: vec![plugins.to_path_buf()],
            ..CatalogConfig::default()
        },
        watch: None,
        control_path: socket.to_path_buf(),
        dispatch: DispatchConfig::default(),
        shutdown_grace: Duration::from_secs(1),
        profiles: Vec::new(),
        remember_approvals: true,
        availability_ttl: Duration::from_secs(30),
        default_profile: "default".to_owned(),
        config_file: None,
        audit: None,
        mcp_servers: Vec::new(),
        mcp_servers_dir: None,
        state: None,
    }
}

async fn send_line(stream: &mut BufReader<UnixStream>, line: &str) -> Value {
    stream
        .get_mut()
        .write_all(line.as_bytes())
        .await
        .expect("write");
    let mut answer = String::new();
    stream.read_line(&mut answer).await.expect("read");
    serde_json::from_str(&answer).expect("the answer is one JSON line")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_socket_is_private_survives_bad_requests_and_serves_two_clients() {
    let plugins = PluginDir::with(&["hello_tools"]);
    let sockets = tempfile::tempdir().expect("temp dir");
    let socket = sockets.path().join("run").join("control.sock");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let host = tokio::spawn(toolhost::serve(config(&plugins.path(), &socket), async {
        let _ = stopped.await;
    }));
    wait_for_socket(&socket).await;
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&socket).expect("socket").permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);

    let mut raw = BufReader::new(UnixStream::connect(&socket).await.expect("connect"));
    let bad = send_line(&mut raw, "this is not json\n").await;
    assert!(
        bad["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("malformed request"))
    );
    let unknown = send_line(&mut raw, "{\"id\": 5, \"method\": \"explode\"}\n").await;
    assert_eq!(unknown["id"], 5);
    assert!(
        unknown["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("unknown method"))
    );
    let good = send_line(&mut raw, "{\"id\": 6, \"method\": \"list\"}\n").await;
    assert_eq!(good["id"], 6);
    assert_eq!(good["result"].as_array().map(Vec::len), Some(2));

    let mut a = ControlClient::connect(&socket).await.expect("client a");
    let mut b = ControlClient::connect(&socket).await.expect("client b");
    let slow = a.request(
        "call",
        json!({"tool": "countdown", "arguments": {"from": 3, "step_ms": 100}}),
    );
    let quick = b.request("call", json!({"tool": "greet", "arguments": {"name": "B"}}));
    let (slow, quick) = tokio::join!(slow, quick);
    assert_eq!(quick.expect("b answered")["output"], "Hello, B!");
    assert_eq!(slow.expect("a answered")["output"], "3 2 1 0");

    let status = b.request("status", json!({})).await.expect("status");
    assert_eq!(status["pid"], std::process::id());
    let greet = status["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["name"] == "greet");
    assert_eq!(greet.expect("greet stats")["calls"], 1);

    drop((raw, a, b));
    let _ = stop.send(());
    tokio::time::timeout(BOUND, host)
        .await
        .expect("stops")
        .expect("no panic")
        .expect("ok");
    assert!(!socket.exists(), "the socket file is removed on shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_cancels_a_call_in_flight_and_does_not_wait_for_idle_clients() {
    let plugins = PluginDir::with(&["fixture_basic"]);
    let sockets = tempfile::tempdir().expect("temp dir");
    let socket = sockets.path().join("control.sock");
    let started = sockets.path().join("started");
    let seen = sockets.path().join("seen");
    let mut cfg = config(&plugins.path(), &socket);
    cfg.shutdown_grace = Duration::from_millis(200);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let host = tokio::spawn(toolhost::serve(cfg, async {
        let _ = stopped.await;
    }));
    wait_for_socket(&socket).await;
    let _idle = ControlClient::connect(&socket).await.expect("idle client");
    let mut busy = ControlClient::connect(&socket).await.expect("busy client");
    let params = json!({"tool": "wait_cancel", "arguments": {"marker": seen, "started": started}});
    let long_call = tokio::spawn(async move { busy.request("call", params).await });
    eventually_async(BOUND, "the call starting", || started.exists()).await;
    let asked = std::time::Instant::now();
    let _ = stop.send(());
    tokio::time::timeout(BOUND, host)
        .await
        .expect("stops")
        .expect("no panic")
        .expect("ok");
    assert!(
        asked.elapsed() < Duration::from_secs(4),
        "shutdown is bounded: {:?}",
        asked.elapsed()
    );
    let result = long_call
        .await
        .expect("task")
        .expect("the call was answered");
    assert_eq!(result["error"], "cancelled", "{result}");
    assert_eq!(
        std::fs::read_to_string(&seen).expect("seen"),
        "cancelled is_cancelled=true"
    );
    assert!(!socket.exists());
}

#[test]
fn status_without_a_host_fails_clearly_and_names_the_socket() {
    let missing = tempfile::tempdir()
        .expect("temp dir")
        .path()
        .join("nobody.sock");
    for args in [&["status"][..], &["reload"], &["call", "echo", "{}"]] {
        let out = crate::support::toolhost_command()
            .args(args)
            .arg("--control")
            .arg(&missing)
            .output()
            .expect("run");
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("no toolhost is listening"), "{stderr}");
        assert!(stderr.contains(&missing.display().to_string()), "{stderr}");
    }
}

fn toolhost(args: &[&str], socket: &Path) -> std::process::Output {
    crate::support::toolhost_command()
        .args(args)
        .arg("--control")
        .arg(socket)
        .output()
        .expect("run toolhost")
}

fn wait_exit(child: &mut std::process::Child) -> std::process::ExitStatus {
    eventually(BOUND, "toolhost serve stopping", || {
        child.try_wait().expect("wait")
    })
}

#[tokio::test]
async fn serve_binary_reloads_reports_status_serves_calls_and_stops_on_sigterm() {
    let plugins = PluginDir::with(&[]);
    let dir = plugins.path();
    std::fs::copy(echo_build("v1"), dir.join("libecho.so")).expect("install");
    let sockets = tempfile::tempdir().expect("temp dir");
    let socket: PathBuf = sockets.path().join("control.sock");
    let mut child = crate::support::toolhost_command()
        .args(["serve", "--no-watch", "--plugins"])
        .arg(&dir)
        .arg("--control")
        .arg(&socket)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start toolhost serve");
    wait_for_socket(&socket).await;

    let call = toolhost(&["call", "build_version", "{}"], &socket);
    assert_eq!(String::from_utf8_lossy(&call.stdout).trim(), "v1");

    let tmp = dir.join(".libecho.so.tmp");
    std::fs::copy(echo_build("v2"), &tmp).expect("copy");
    std::fs::rename(&tmp, dir.join("libecho.so")).expect("rename");
    let reload = toolhost(&["reload"], &socket);
    let said = String::from_utf8_lossy(&reload.stdout);
    assert!(reload.status.success());
    assert!(
        said.contains("plugin updated") && said.contains("tools rebuilt (the same definition)"),
        "{said}"
    );
    let call = toolhost(&["call", "build_version", "{}"], &socket);
    assert_eq!(String::from_utf8_lossy(&call.stdout).trim(), "v2");

    let status = toolhost(&["status", "--json"], &socket);
    let status: Value = serde_json::from_slice(&status.stdout).expect("status JSON");
    let plugin = &status["plugins"][0];
    assert_eq!(plugin["generation"], 2);
    assert_eq!(plugin["sha256"].as_str().map(str::len), Some(64));
    assert_eq!(plugin["api_version"], toolhost::API_VERSION);
    assert_eq!(plugin["abi_version"], toolhost::ABI_VERSION);
    assert!(
        plugin["loaded_at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );
    assert_eq!(status["reloads"], 1);
    assert_eq!(status["control_socket"], socket.display().to_string());
    let stats = status["tools"].as_array().expect("tools");
    assert_eq!(
        stats
            .iter()
            .find(|t| t["name"] == "build_version")
            .expect("stats")["calls"],
        2
    );
    let table = toolhost(&["status"], &socket);
    assert!(String::from_utf8_lossy(&table.stdout).contains("PLUGIN"));

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    assert!(wait_exit(&mut child).success(), "a clean shutdown exits 0");
    assert!(!socket.exists(), "the socket file is removed");
}
