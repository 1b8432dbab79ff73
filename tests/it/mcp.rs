//! The MCP frontend with a real client: the official Python SDK (PyPI `mcp` 2.x) drives
//! `toolhost serve --mcp` over stdio and streamable HTTP, in the default (2026-07-28,
//! sessionless) and legacy (initialize handshake) protocol modes. The checks themselves
//! are in tests/mcp/client_checks.py; the virtualenv is made on first use.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::support::{PluginDir, echo_build, so, toolhost_command, workspace_root};

/// The version of the Python SDK the tests use (as `.ci/run` installs it).
const PYTHON_SDK: &str = "mcp==2.3.0";

/// The virtualenv's python with the MCP SDK, created under target/ on first use.
fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let venv = workspace_root()
            .join("target")
            .join("mcp-tools")
            .join("venv");
        let python = venv.join("bin").join("python");
        let ready = Command::new(&python)
            .args(["-c", "import mcp, mcp_types"])
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
                .args(["install", "--quiet", PYTHON_SDK])
                .status()
                .expect("run pip");
            assert!(installed.success(), "pip install {PYTHON_SDK} failed");
        }
        python
    })
}

/// The plugins the checks need: the basic fixture (echo, risky_write, wait_cancel, ...)
/// and the echo fixture at v1 (build_version).
fn plugins() -> PluginDir {
    let dir = PluginDir::with(&["fixture_basic"]);
    let tmp = dir.path().join(".libfixture_echo.so.tmp");
    std::fs::copy(echo_build("v1"), &tmp).expect("copy echo v1");
    std::fs::rename(&tmp, dir.path().join("libfixture_echo.so")).expect("install echo v1");
    dir
}

/// Kills the server when the test ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `toolhost serve --mcp http` on a free port and returns it with its URL.
fn http_server(plugins: &Path, control: &Path) -> (Server, String) {
    let mut child = toolhost_command()
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
        .env("TOOLHOST_LOG", "info,rmcp=warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start toolhost serve --mcp http");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(at) = line.find("http://127.0.0.1:") {
                let _ = tx.send(line[at..].trim().to_owned());
            }
        }
    });
    let server = Server(child);
    let url = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the server logs the URL it serves MCP at");
    (server, url)
}

fn run_checks(transport: &str, mode: &str) {
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
    if transport == "http" {
        let (server, url) = http_server(&plugins.path(), &control);
        _server = server;
        cmd.args(["--url", &url]);
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
}

#[test]
fn python_sdk_over_stdio_default_protocol() {
    run_checks("stdio", "auto");
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
