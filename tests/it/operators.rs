//! Running toolhost as operators do, through the real binary: `install` and `remove`
//! against a watching host, a rename picked up without the debounce, SIGHUP rescans,
//! systemd's readiness protocol on a socket the test listens on, the shipped unit checked
//! by `systemd-analyze verify`, and a registry that does not depend on the load pool.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::support::{
    PluginDir, eventually, so, toolhost_command, wait_exit, wait_for_socket, workspace_root,
};

const BOUND: Duration = Duration::from_secs(20);

/// A `toolhost serve` child, stopped with SIGTERM by `stop` and killed when dropped.
struct Host {
    child: Child,
    socket: PathBuf,
    _sockets: tempfile::TempDir,
}

impl Host {
    /// Starts `serve --plugins DIR --control SOCKET` with `extra` arguments and
    /// `config` (a config file's text) and waits until its control socket answers.
    fn start(dir: &Path, extra: &[&str], config: &str, env: &[(&str, &Path)]) -> Host {
        let sockets = tempfile::tempdir().expect("temp dir");
        let socket = sockets.path().join("control.sock");
        let config_file = sockets.path().join("config.toml");
        std::fs::write(&config_file, config).expect("write config");
        let mut cmd = toolhost_command();
        cmd.arg("--config")
            .arg(&config_file)
            .args(["serve", "--plugins"])
            .arg(dir)
            .arg("--control")
            .arg(&socket)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("start toolhost serve");
        wait_for_socket(&socket);
        let host = Host {
            child,
            socket,
            _sockets: sockets,
        };
        // The socket exists from the start of start-up; an answer comes once the host
        // serves (plugins scanned, directories watched), which is what the tests wait for.
        host.status();
        host
    }

    fn signal(&self, signal: libc::c_int) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("pid");
        // SAFETY: kill has no memory preconditions; the pid is our child's.
        unsafe { libc::kill(pid, signal) };
    }

    fn status(&self) -> Value {
        let out = toolhost_command()
            .args(["status", "--json", "--control"])
            .arg(&self.socket)
            .output()
            .expect("run toolhost status");
        assert!(out.status.success(), "status: {}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("status JSON")
    }

    /// The tools the host's plugins serve.
    fn tools(&self) -> Vec<String> {
        let status = self.status();
        let mut tools: Vec<String> = status["plugins"]
            .as_array()
            .expect("plugins")
            .iter()
            .flat_map(|p| p["tools"].as_array().cloned().unwrap_or_default())
            .filter_map(|t| t.as_str().map(str::to_owned))
            .collect();
        tools.sort();
        tools
    }

    fn registry_changes(&self) -> u64 {
        self.status()["registry_changes"]
            .as_u64()
            .expect("registry_changes in status")
    }

    fn control(&self) -> &Path {
        &self.socket
    }

    fn stop(mut self) {
        self.signal(libc::SIGTERM);
        let status = wait_exit(&mut self.child, "toolhost serve");
        assert!(status.success(), "serve exited with {status}");
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `toolhost ARGS... --dir DIR --control SOCKET`.
fn run(args: &[&str], file: Option<&Path>, dir: &Path, control: &Path) -> Output {
    let mut cmd: Command = toolhost_command();
    cmd.args(args);
    if let Some(f) = file {
        cmd.arg(f);
    }
    cmd.arg("--dir")
        .arg(dir)
        .arg("--control")
        .arg(control)
        .output()
        .expect("run toolhost")
}

#[test]
fn install_and_remove_reach_a_watching_host_once_each() {
    let dir = PluginDir::with(&["fixture_basic"]);
    let host = Host::start(&dir.path(), &[], "", &[]);
    assert!(!host.tools().contains(&"greet".to_owned()));
    let before = host.registry_changes();

    let installed = run(
        &["install"],
        Some(&so("hello_tools")),
        &dir.path(),
        host.control(),
    );
    let out = text(&installed.stdout);
    assert!(
        installed.status.success(),
        "{out}{}",
        text(&installed.stderr)
    );
    assert!(out.contains("installed hello as"), "{out}");
    assert!(
        out.contains("loaded hello") && out.contains("tools greet, countdown"),
        "install prints what the host did: {out}"
    );
    assert!(dir.path().join("libhello_tools.so").is_file());
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .expect("read dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "no temporary file is left behind");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(dir.path().join("libhello_tools.so"))
            .expect("installed")
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o644);
    assert!(host.tools().contains(&"greet".to_owned()));
    // A full rescan after it changes nothing more: the install was one change.
    let reload = toolhost_command()
        .args(["reload", "--control"])
        .arg(host.control())
        .output()
        .expect("reload");
    assert!(
        text(&reload.stdout).contains("no changes"),
        "{}",
        text(&reload.stdout)
    );
    assert_eq!(
        host.registry_changes(),
        before + 1,
        "one reload for the install"
    );

    let removed = run(&["remove", "hello"], None, &dir.path(), host.control());
    let out = text(&removed.stdout);
    assert!(removed.status.success(), "{out}{}", text(&removed.stderr));
    assert!(
        out.contains("dropped hello") && out.contains("tools greet, countdown gone"),
        "{out}"
    );
    assert!(!dir.path().join("libhello_tools.so").exists());
    assert!(!host.tools().contains(&"greet".to_owned()));
    let reload = toolhost_command()
        .args(["reload", "--control"])
        .arg(host.control())
        .output()
        .expect("reload");
    assert!(
        text(&reload.stdout).contains("no changes"),
        "{}",
        text(&reload.stdout)
    );
    assert_eq!(
        host.registry_changes(),
        before + 2,
        "one reload for the removal"
    );

    let unknown = run(&["remove", "hello"], None, &dir.path(), host.control());
    assert!(!unknown.status.success());
    assert!(
        text(&unknown.stderr).contains("no plugin named 'hello' is installed"),
        "{}",
        text(&unknown.stderr)
    );
    host.stop();
}

#[test]
fn an_install_whose_tools_clash_is_refused_naming_both_and_replace_swaps_it() {
    let dir = PluginDir::with(&["fixture_basic"]);
    let basic = dir.path().join("libfixture_basic.so");
    let host = Host::start(&dir.path(), &[], "", &[]);
    let refused = run(
        &["install"],
        Some(&so("fixture_duplicate")),
        &dir.path(),
        host.control(),
    );
    let err = text(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        err.contains("tool 'echo'")
            && err.contains("libfixture_duplicate.so")
            && err.contains(&basic.display().to_string())
            && err.contains("--replace"),
        "the clash names the tool and both files: {err}"
    );
    assert!(!dir.path().join("libfixture_duplicate.so").exists());
    assert!(!host.tools().contains(&"dup_only".to_owned()));

    let before = host.registry_changes();
    let replaced = run(
        &["install", "--replace"],
        Some(&so("fixture_duplicate")),
        &dir.path(),
        host.control(),
    );
    let out = text(&replaced.stdout);
    assert!(replaced.status.success(), "{out}{}", text(&replaced.stderr));
    assert!(out.contains("loaded duplicate"), "{out}");
    let tools = host.tools();
    assert!(tools.contains(&"dup_only".to_owned()), "{tools:?}");
    assert!(
        !tools.contains(&"slow".to_owned()),
        "basic is gone: {tools:?}"
    );
    assert_eq!(host.registry_changes(), before + 1, "one swap");

    // The same file again: installed already.
    let again = run(
        &["install"],
        Some(&so("fixture_duplicate")),
        &dir.path(),
        host.control(),
    );
    assert!(!again.status.success());
    assert!(
        text(&again.stderr).contains("installed already"),
        "{}",
        text(&again.stderr)
    );
    host.stop();
}

#[test]
fn install_without_a_host_says_so() {
    let dir = PluginDir::with(&[]);
    let nowhere = tempfile::tempdir().expect("temp dir");
    let out = run(
        &["install"],
        Some(&so("hello_tools")),
        &dir.path(),
        &nowhere.path().join("control.sock"),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("no host is running"),
        "{}",
        text(&out.stdout)
    );
    assert!(dir.path().join("libhello_tools.so").is_file());
}

#[test]
fn a_renamed_plugin_serves_without_waiting_for_the_debounce() {
    let dir = PluginDir::with(&[]);
    // Only the immediate path can load it in time: the debounced rescan waits 300 s.
    let host = Host::start(&dir.path(), &[], "[reload]\ndebounce_secs = 300\n", &[]);
    dir.install("hello_tools");
    eventually(BOUND, "greet served after a rename", || {
        host.tools().contains(&"greet".to_owned())
    });
    host.stop();
}

#[test]
fn sighup_rescans_a_host_that_does_not_watch() {
    let dir = PluginDir::with(&[]);
    let host = Host::start(&dir.path(), &["--no-watch"], "", &[]);
    dir.install("hello_tools");
    let before = host.tools();
    assert!(
        before.is_empty(),
        "not watching: nothing yet, got {before:?}"
    );
    host.signal(libc::SIGHUP);
    eventually(BOUND, "greet served after SIGHUP", || {
        host.tools().contains(&"greet".to_owned())
    });
    host.stop();
}

#[test]
fn the_service_manager_hears_ready_reloading_and_stopping() {
    let listen = tempfile::tempdir().expect("temp dir");
    let path = listen.path().join("notify.sock");
    let socket = UnixDatagram::bind(&path).expect("bind the notify socket");
    socket.set_read_timeout(Some(BOUND)).expect("read timeout");
    let next = || {
        let mut buf = [0u8; 4096];
        let n = socket
            .recv(&mut buf)
            .expect("a notification within the bound");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    let dir = PluginDir::with(&["hello_tools"]);
    let host = Host::start(
        &dir.path(),
        &["--no-watch"],
        "",
        &[("NOTIFY_SOCKET", &path)],
    );
    let ready = next();
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready}");
    assert!(ready.contains("STATUS=serving 2 tools"), "{ready}");
    host.signal(libc::SIGHUP);
    let reloading = next();
    assert!(reloading.lines().any(|l| l == "RELOADING=1"), "{reloading}");
    assert!(
        reloading.lines().any(|l| l.starts_with("MONOTONIC_USEC=")),
        "{reloading}"
    );
    let ready = next();
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready}");
    let mut host = host;
    host.signal(libc::SIGTERM);
    let stopping = next();
    assert!(stopping.lines().any(|l| l == "STOPPING=1"), "{stopping}");
    let status = wait_exit(&mut host.child, "toolhost serve");
    assert!(status.success());
}

#[test]
fn the_shipped_unit_passes_systemd_analyze_verify() {
    let Ok(found) = Command::new("systemd-analyze").arg("--version").output() else {
        eprintln!("skipped: systemd-analyze is not installed");
        return;
    };
    if !found.status.success() {
        eprintln!("skipped: systemd-analyze does not run here");
        return;
    }
    let unit = std::fs::read_to_string(workspace_root().join("contrib/toolhost.service"))
        .expect("contrib/toolhost.service");
    for directive in [
        "Type=notify",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
        "NoNewPrivileges=yes",
        "StateDirectory=toolhost",
        "RuntimeDirectory=toolhost",
        "ConfigurationDirectory=toolhost",
        "ExecStart=/usr/local/bin/toolhost --system serve",
    ] {
        assert!(
            unit.lines().any(|l| l == directive),
            "the unit has {directive}"
        );
    }
    assert!(
        !unit.lines().any(|l| l.starts_with("RestrictNamespaces=")),
        "workers need their user and PID namespaces"
    );
    // verify checks that ExecStart's program exists: point it at the binary under test.
    let dir = tempfile::tempdir().expect("temp dir");
    let copy = dir.path().join("toolhost.service");
    std::fs::write(
        &copy,
        unit.replace("/usr/local/bin/toolhost", env!("CARGO_BIN_EXE_toolhost")),
    )
    .expect("write unit");
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
        .expect("run systemd-analyze verify");
    let complaints: Vec<String> = text(&out.stderr)
        .lines()
        .chain(text(&out.stdout).lines())
        .filter(|l| l.contains("toolhost.service"))
        .map(str::to_owned)
        .collect();
    assert!(
        out.status.success() && complaints.is_empty(),
        "systemd-analyze verify: {complaints:#?}\n{}",
        text(&out.stderr)
    );
    // The drop-in's command line is one the binary takes (every flag known, in order).
    let drop_in = std::fs::read_to_string(
        workspace_root().join("contrib/toolhost.service.d/serve-http.conf"),
    )
    .expect("the drop-in");
    let exec = drop_in
        .lines()
        .filter_map(|l| l.strip_prefix("ExecStart="))
        .find(|l| !l.is_empty())
        .expect("an ExecStart with a command");
    let args: Vec<&str> = exec.split_whitespace().skip(1).collect();
    assert_eq!(args.first(), Some(&"--system"), "{exec}");
    let parsed = toolhost_command()
        .args(&args)
        .arg("--help")
        .output()
        .expect("toolhost with the drop-in's arguments");
    assert!(
        parsed.status.success(),
        "the drop-in's arguments: {}",
        text(&parsed.stderr)
    );
    // The exposure score the book and the unit state: at most 4.0.
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager"])
        .arg(&copy)
        .output()
        .expect("run systemd-analyze security");
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    let Some(score) = said
        .lines()
        .find_map(|l| {
            l.split("Overall exposure level for toolhost.service: ")
                .nth(1)
        })
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse::<f64>().ok())
    else {
        eprintln!("skipped the security score: systemd-analyze security --offline said {said}");
        return;
    };
    assert!(score <= 4.0, "exposure {score} > 4.0:\n{said}");
}

/// Each tool of `registry` with the plugin serving it, sorted by name.
fn served(registry: &toolhost::ToolRegistry) -> Vec<(String, String)> {
    registry
        .iter()
        .map(|t| {
            let plugin = match t.tool().origin() {
                toolhost::ToolOrigin::Plugin { plugin, .. } => plugin.to_string(),
                other => format!("{other:?}"),
            };
            (t.spec().name.clone(), plugin)
        })
        .collect()
}

/// The registry's tools and its refusals, as one comparable value.
fn registry_shape(report: &toolhost::LoadReport) -> (Vec<(String, String)>, Vec<String>) {
    let (registry, problems) = toolhost::LoadedPlugin::registry(&report.plugins);
    (
        served(&registry),
        problems.iter().map(ToString::to_string).collect(),
    )
}

#[test]
fn the_registry_is_the_same_whatever_the_load_pool_does() {
    // Two plugins export `echo`: the first in load order (directories in order, files
    // sorted) keeps it, however the pool's threads interleave.
    let first = PluginDir::with(&["fixture_duplicate", "hello_tools"]);
    let second = PluginDir::with(&["fixture_basic", "toolhost_utils"]);
    let dirs = [first.path(), second.path()];
    let load = |threads: usize| {
        let loader = toolhost::PluginLoader::with_policy(toolhost::LoadPolicy {
            load_threads: threads,
            ..crate::support::test_load_policy()
        })
        .expect("loader");
        let report = loader.load_dirs(&dirs);
        let files: Vec<PathBuf> = report.plugins.iter().map(|p| p.file.clone()).collect();
        // The basic fixture's tool with broken metadata, reported in order too.
        let errors: Vec<String> = report.errors.iter().map(ToString::to_string).collect();
        (files, registry_shape(&report), errors)
    };
    let one = load(1);
    let expected_files = vec![
        first.path().join("libfixture_duplicate.so"),
        first.path().join("libhello_tools.so"),
        second.path().join("libfixture_basic.so"),
        second.path().join("libtoolhost_utils.so"),
    ];
    assert_eq!(one.0, expected_files, "plugins in load order");
    assert_eq!(one.2.len(), 1, "only bad_metadata is refused: {:?}", one.2);
    let echo = one.1.0.iter().find(|(name, _)| name == "echo");
    assert_eq!(
        echo.map(|(_, plugin)| plugin.as_str()),
        Some("duplicate"),
        "the first directory's plugin keeps the name"
    );
    assert!(
        one.1.1.iter().any(|e| e.contains("echo")),
        "the duplicate is reported: {:?}",
        one.1.1
    );
    for threads in [2, 4, 8, 4, 2] {
        let pooled = load(threads);
        assert!(
            pooled == one,
            "{threads} threads gave\n{pooled:?}\none thread gave\n{one:?}"
        );
    }
    // The catalog (start-up and rescans) registers the same way.
    let catalog = Arc::new(
        toolhost::PluginCatalog::new(toolhost::CatalogConfig {
            dirs: dirs.to_vec(),
            loading: toolhost::LoadPolicy {
                load_threads: 4,
                ..crate::support::test_load_policy()
            },
            ..toolhost::CatalogConfig::default()
        })
        .expect("catalog"),
    );
    catalog.rescan();
    assert_eq!(served(&catalog.registry()), one.1.0);
}
