//! The sealed FFI boundary: panics in a plugin's destructors and panic payloads whose own
//! destructor panics end as errors, a shared library that is not a plugin (and started a
//! thread in its constructor) costs a warning, host services work from a plugin's own
//! thread, and a load killed half-way leaves no private copy behind after the next start.
//! Each runs through the real loader, registry and dispatcher, or the `toolhost` binary.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use toolhost::{CallContext, CallErrorKind, DispatchConfig, TurnIdentity};

use crate::support::{
    PluginDir, call, dispatcher, eventually_async, load, serve_command, toolhost_command,
    wait_exit, wait_until,
};

const BOUND: Duration = Duration::from_secs(30);

fn edges() -> PluginDir {
    PluginDir::with(&["fixture_ffi_edges"])
}

fn turn() -> CallContext {
    CallContext::new(TurnIdentity {
        profile_id: "p1".into(),
        session_id: "s1".into(),
        model: "m1".into(),
    })
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("run toolhost")
}

/// A process that died of a signal (134 is SIGABRT's exit status in a shell) fails here.
fn assert_exited_normally(status: ExitStatus, what: &str, stderr: &str) {
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        None,
        "{what} was killed by a signal: {status:?}\n{stderr}"
    );
}

#[test]
fn a_future_that_panics_when_dropped_after_its_timeout_is_an_error_and_the_host_lives() {
    let dir = edges();
    let markers = tempfile::tempdir().expect("temp dir");
    let dropped = markers.path().join("dropped");
    let out = run(toolhost_command()
        .args(["call", "drop_panic_hang"])
        .arg(json!({"marker": dropped}).to_string())
        .args(["--timeout", "0.5", "--plugins"])
        .arg(dir.path()));
    let stderr = text(&out.stderr);
    assert_exited_normally(out.status, "toolhost call", &stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("timed out"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&dropped).as_deref().ok(),
        Some("dropped"),
        "the future was dropped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_future_that_panics_when_dropped_after_a_cancel_is_an_error_and_the_host_lives() {
    let dir = edges();
    let (_, registry, _) = load(&dir);
    let markers = tempfile::tempdir().expect("temp dir");
    let (started, dropped) = (
        markers.path().join("started"),
        markers.path().join("dropped"),
    );
    let turn = turn();
    let cancel = turn.cancel.clone();
    let d = dispatcher(DispatchConfig {
        cancel_grace: Duration::from_millis(50),
        ..DispatchConfig::default()
    });
    let args = json!({"marker": dropped, "started": started});
    let running = tokio::spawn(async move {
        d.call(&registry, &turn, call("1", "drop_panic_hang", args))
            .await
    });
    eventually_async(BOUND, "the call starting", || started.exists()).await;
    cancel.cancel();
    let r = tokio::time::timeout(BOUND, running)
        .await
        .expect("the call ends once cancelled")
        .expect("no panic reached the host");
    assert_eq!(r.error, Some(CallErrorKind::Cancelled), "{r:?}");
    assert!(r.is_error);
    assert_eq!(
        std::fs::read_to_string(&dropped).expect("dropped"),
        "dropped"
    );
}

#[test]
fn a_future_that_panics_when_dropped_at_host_shutdown_is_an_error_and_the_host_exits_cleanly() {
    let dir = edges();
    let sockets = tempfile::tempdir().expect("temp dir");
    let socket = sockets.path().join("control.sock");
    let (started, dropped) = (
        sockets.path().join("started"),
        sockets.path().join("dropped"),
    );
    let mut host = serve_command(&dir.path(), &socket)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start toolhost serve");
    wait_until("the control socket", || socket.exists());
    let mut caller = toolhost_command()
        .args(["call", "drop_panic_hang"])
        .arg(json!({"marker": dropped, "started": started}).to_string())
        .args(["--timeout", "600", "--control"])
        .arg(&socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start toolhost call");
    wait_until("the call to start", || started.exists());
    let killed = Command::new("kill")
        .args(["-TERM", &host.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = wait_exit(&mut host, "toolhost serve");
    let host_err = host
        .wait_with_output()
        .map(|o| text(&o.stderr))
        .unwrap_or_default();
    assert_exited_normally(status, "toolhost serve", &host_err);
    assert!(status.success(), "{status:?}\n{host_err}");
    let call_status = wait_exit(&mut caller, "toolhost call");
    let call_err = caller
        .wait_with_output()
        .map(|o| text(&o.stderr))
        .unwrap_or_default();
    assert_exited_normally(call_status, "toolhost call", &call_err);
    assert!(!call_status.success(), "the call ends with an error");
    assert_eq!(
        std::fs::read_to_string(&dropped).expect("dropped"),
        "dropped"
    );
}

#[test]
fn a_metadata_panic_whose_payload_panics_when_dropped_leaves_the_tool_out_and_the_rest_load() {
    let dir = PluginDir::with(&["fixture_bad_payload"]);
    let (report, registry, _) = load(&dir);
    // The left-out tool is reported once, as an error of its file.
    assert_eq!(report.errors.len(), 1, "{:?}", report.errors);
    assert!(
        report.errors[0].to_string().contains("bad_payload"),
        "{}",
        report.errors[0]
    );
    let plugin = &report.plugins[0];
    assert_eq!(plugin.skipped_tools.len(), 1, "{:?}", plugin.skipped_tools);
    assert!(
        plugin.skipped_tools[0].contains("bad_payload")
            && plugin.skipped_tools[0].contains("description panicked"),
        "{:?}",
        plugin.skipped_tools
    );
    assert!(registry.get("payload_echo").is_some());
    assert!(registry.get("bad_payload").is_none());

    let out = run(toolhost_command()
        .args(["list", "--plugins"])
        .arg(dir.path()));
    let stderr = text(&out.stderr);
    assert_exited_normally(out.status, "toolhost list", &stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(text(&out.stdout).contains("payload_echo"));
    assert!(stderr.contains("bad_payload"), "{stderr}");
}

#[tokio::test]
async fn a_call_panic_whose_payload_panics_when_dropped_is_an_error_with_its_message() {
    let dir = edges();
    let (_, registry, _) = load(&dir);
    let r = dispatcher(DispatchConfig::default())
        .call(&registry, &turn(), call("1", "payload_panic", json!({})))
        .await;
    assert!(r.is_error);
    assert_eq!(
        r.output, "tool 'payload_panic' panicked: panic with a non-string payload",
        "{r:?}"
    );
    // The plugin stays usable.
    let r = dispatcher(DispatchConfig::default())
        .call(&registry, &turn(), call("2", "edge_echo", json!({})))
        .await;
    assert_eq!(r.output, "edge ok");
}

/// `ctx.sleep` awaited on a plugin's own thread, while the thread that polls the call is
/// blocked: on a current-thread runtime, the hardest case.
#[tokio::test]
async fn ctx_sleep_awaited_from_a_plugins_own_thread_works() {
    let dir = edges();
    let (_, registry, _) = load(&dir);
    let r = tokio::time::timeout(
        BOUND,
        dispatcher(DispatchConfig::default()).call(
            &registry,
            &turn(),
            call("1", "sleep_on_own_thread", json!({"ms": 50})),
        ),
    )
    .await
    .expect("the sleep ends");
    assert_eq!(r.error, None, "{}", r.output);
    assert_eq!(r.output, "slept 50 ms");
}

/// The timer thread behind a sleep on a plugin's own thread still hears the cancel signal:
/// a one-minute sleep ends soon after the turn is cancelled. (The tool blocks the thread
/// that polls the call, so the cancel comes from another task, on another worker.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleep_on_a_plugins_own_thread_ends_when_the_turn_is_cancelled() {
    let dir = edges();
    let (_, registry, _) = load(&dir);
    let markers = tempfile::tempdir().expect("temp dir");
    let started = markers.path().join("started");
    let turn = turn();
    let cancel = turn.cancel.clone();
    let d = dispatcher(DispatchConfig::default());
    let args = json!({"ms": 60_000, "started": started});
    let running = tokio::spawn(async move {
        d.call(&registry, &turn, call("1", "sleep_on_own_thread", args))
            .await
    });
    eventually_async(BOUND, "the call starting", || started.exists()).await;
    let cancelled_at = Instant::now();
    cancel.cancel();
    let r = tokio::time::timeout(BOUND, running)
        .await
        .expect("the sleep ends")
        .expect("no panic");
    assert_eq!(r.error, Some(CallErrorKind::Cancelled), "{r:?}");
    assert!(r.output.contains("the sleep was cancelled"), "{}", r.output);
    assert!(
        cancelled_at.elapsed() < Duration::from_secs(5),
        "the sleep heard its cancel signal: {:?}",
        cancelled_at.elapsed()
    );
}

/// Answers `profile.state_dir` after a sleep on the host's runtime: a service that works
/// only inside a tokio runtime.
struct RuntimeBoundRequests;

#[async_trait::async_trait]
impl toolhost::HostRequests for RuntimeBoundRequests {
    async fn request(
        &self,
        _turn: &TurnIdentity,
        request: toolhost_plugin_api::HostRequest,
    ) -> Result<toolhost_plugin_api::HostAnswer, toolhost_plugin_api::ServiceError> {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let (method, _) = request.to_wire().expect("a known request");
        Ok(toolhost_plugin_api::StateDirAnswer {
            path: format!("answered {method}"),
        }
        .into())
    }
}

/// A host service that needs the host's runtime, asked from a plugin's own thread, runs in
/// the runtime the call started on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_request_from_a_plugins_own_thread_runs_in_the_hosts_runtime() {
    let dir = edges();
    let (_, registry, _) = load(&dir);
    let mut turn = turn();
    turn.services.requests = Some(std::sync::Arc::new(RuntimeBoundRequests));
    let r = tokio::time::timeout(
        BOUND,
        dispatcher(DispatchConfig::default()).call(
            &registry,
            &turn,
            call(
                "1",
                "request_on_own_thread",
                json!({"method": "profile.state_dir"}),
            ),
        ),
    )
    .await
    .expect("the request ends");
    assert_eq!(r.error, None, "{}", r.output);
    assert_eq!(r.output, r#"{"path":"answered profile.state_dir"}"#);
}

#[test]
fn ctx_sleep_from_a_plugins_own_thread_works_in_the_binary() {
    let dir = edges();
    let out = run(toolhost_command()
        .args(["call", "sleep_on_own_thread", r#"{"ms": 30}"#, "--plugins"])
        .arg(dir.path()));
    let stderr = text(&out.stderr);
    assert_exited_normally(out.status, "toolhost call", &stderr);
    assert_eq!(text(&out.stdout).trim(), "slept 30 ms", "{stderr}");
}

#[test]
fn a_library_that_is_not_a_plugin_and_starts_a_thread_costs_a_warning_not_the_host() {
    let dir = PluginDir::with(&["ctor_thread", "fixture_ffi_edges"]);
    let out = run(toolhost_command()
        .args(["list", "--plugins"])
        .arg(dir.path()));
    let stderr = text(&out.stderr);
    assert_exited_normally(out.status, "toolhost list", &stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(text(&out.stdout).contains("edge_echo"));
    assert!(stderr.contains("libctor_thread.so"), "{stderr}");

    let sockets = tempfile::tempdir().expect("temp dir");
    let socket = sockets.path().join("control.sock");
    let mut host = serve_command(&dir.path(), &socket)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start toolhost serve");
    wait_until("the control socket", || socket.exists());
    // Calls keep being answered for several seconds while the library's thread runs.
    let serving = Instant::now();
    let mut calls = 0;
    while serving.elapsed() < Duration::from_secs(4) {
        let out = run(toolhost_command()
            .args(["call", "edge_echo", "{}", "--control"])
            .arg(&socket));
        assert_eq!(
            text(&out.stdout).trim(),
            "edge ok",
            "call {calls} after {:?}: {}",
            serving.elapsed(),
            text(&out.stderr)
        );
        assert!(
            host.try_wait().expect("wait").is_none(),
            "toolhost serve died"
        );
        calls += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(calls >= 5, "only {calls} calls in 4 s");
    let killed = Command::new("kill")
        .args(["-TERM", &host.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = wait_exit(&mut host, "toolhost serve");
    assert!(status.success(), "{status:?}");
}

/// The private folders of process `pid` in `tmp`.
fn private_dirs_of(tmp: &Path, pid: u32) -> Vec<PathBuf> {
    let prefix = format!("toolhost-{pid}-");
    std::fs::read_dir(tmp)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

fn holds_a_file(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some())
}

#[test]
fn a_load_killed_half_way_leaves_no_copy_after_the_next_start() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let blocking = PluginDir::with(&["ctor_block"]);
    let mut loading = toolhost_command()
        .args(["list", "--plugins"])
        .arg(blocking.path())
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start toolhost list");
    let pid = loading.id();
    // The copy exists while its constructor blocks dlopen.
    wait_until("the private copy", || {
        private_dirs_of(tmp.path(), pid)
            .iter()
            .any(|d| holds_a_file(d))
    });
    loading.kill().expect("SIGKILL");
    let _ = loading.wait();
    assert!(
        private_dirs_of(tmp.path(), pid)
            .iter()
            .any(|d| holds_a_file(d)),
        "the killed load left its copy (the test's premise)"
    );

    let good = edges();
    let out = run(toolhost_command()
        .args(["list", "--plugins"])
        .arg(good.path())
        .env("TMPDIR", tmp.path()));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("edge_echo"));
    assert_eq!(
        private_dirs_of(tmp.path(), pid),
        Vec::<PathBuf>::new(),
        "the dead process's copy is still there"
    );
    // And the second process cleaned up after itself.
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .expect("read tmp")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
