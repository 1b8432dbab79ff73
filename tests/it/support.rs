//! Test support: builds the real plugin and fixture .so files once (in their own target
//! directory, so test-only fixtures never mix with the user's builds), and makes plugin
//! directories holding the ones a test asks for.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use toolhost::{
    DispatchConfig, LoadReport, Plan, PluginLoader, ReadOnlyPolicy, ToolCall, ToolRegistry,
};

pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli/ has a parent")
        .to_path_buf()
}

fn cargo(args: &[&str]) {
    cargo_with_env(args, ("FIXTURE_ECHO_VERSION", "v1"));
}

fn cargo_with_env(args: &[&str], (key, value): (&str, &str)) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(&cargo)
        .args(args)
        .env(key, value)
        .current_dir(workspace_root())
        .status()
        .unwrap_or_else(|e| panic!("could not run {cargo}: {e}"));
    assert!(
        status.success(),
        "building the test plugins failed: cargo {args:?}"
    );
}

/// Builds every plugin the tests load, once per test process; returns the target dir.
pub(crate) fn built() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let target = workspace_root().join("target").join("test-plugins");
        let t = target.to_str().expect("utf-8 path");
        // The test fixtures: a workspace of their own (so a release build of the root
        // workspace never puts them beside the real plugins), sharing the target dir.
        let fixtures = "tests/fixtures/Cargo.toml";
        let names: Vec<String> = [
            "basic",
            "duplicate",
            "no-root",
            "echo",
            "ffi-edges",
            "blocking",
            "crashy",
            "hostile",
            "hostile-init",
            "bad-payload",
            "oversized",
            "many-tools",
            "outcomes",
            "stumbles",
            "leftover",
            "mentions",
            "fuzzed",
            "conformance",
        ]
        .iter()
        .map(|fixture| format!("fixture-{fixture}"))
        .collect();
        let mut args = vec![
            "build",
            "--quiet",
            "--target-dir",
            t,
            "--manifest-path",
            fixtures,
        ];
        for name in &names {
            args.extend(["-p", name.as_str()]);
        }
        cargo(&args);
        // The bundled plugins and the example, from the root workspace.
        cargo(&[
            "build",
            "--quiet",
            "--target-dir",
            t,
            "-p",
            "toolhost-utils",
            "-p",
            "hello-tools",
            "-p",
            "toolhost-memory",
            "-p",
            "toolhost-session-search",
            "-p",
            "toolhost-delegate-task",
            "-p",
            "toolhost-clarify",
            "-p",
            "toolhost-workspace",
            "-p",
            "toolhost-rust",
        ]);
        // Its own workspace: it is built against a modified copy of the API.
        cargo(&[
            "build",
            "--quiet",
            "--target-dir",
            t,
            "--manifest-path",
            "tests/fixtures/incompatible/Cargo.toml",
        ]);
        // Its own workspace: today's API sources versioned 0.2.0 (another crate series).
        cargo(&[
            "build",
            "--quiet",
            "--target-dir",
            t,
            "--manifest-path",
            "tests/fixtures/series-0.2/Cargo.toml",
        ]);
        // The compatibility fixtures: each in its own workspace beside the verbatim sources
        // of the plugin-api it was built against (tests/compat/api-*/).
        for manifest in compat_manifests() {
            cargo(&[
                "build",
                "--quiet",
                "--target-dir",
                t,
                "--manifest-path",
                manifest.to_str().expect("utf-8 path"),
            ]);
        }
        // A plugin built against a newer plugin-api (ABI 0.1.99: appended fields), and a host
        // built against it, to load today's plugins into: each in a cargo invocation of its
        // own, so the test-only feature never reaches the other builds.
        cargo(&[
            "build",
            "--quiet",
            "--target-dir",
            t,
            "--manifest-path",
            fixtures,
            "-p",
            "fixture-newer",
            "--features",
            "newer",
        ]);
        cargo(&[
            "build",
            "--quiet",
            "--target-dir",
            t,
            "-p",
            "toolhost-cli",
            "--bin",
            "toolhost",
            "--features",
            "__test_newer_api",
        ]);
        // Two builds of the echo fixture that answer different versions, for reload tests.
        let keep = |version: &str| {
            let dir = target.join(format!("echo-{version}"));
            std::fs::create_dir_all(&dir).expect("create dir");
            std::fs::copy(
                target.join("debug").join("libfixture_echo.so"),
                dir.join("libfixture_echo.so"),
            )
            .expect("keep the echo build");
        };
        keep("v1");
        cargo_with_env(
            &[
                "build",
                "--quiet",
                "--target-dir",
                t,
                "--manifest-path",
                fixtures,
                "-p",
                "fixture-echo",
            ],
            ("FIXTURE_ECHO_VERSION", "v2"),
        );
        keep("v2");
        // Its own profile: everything in it is built with panic = "abort".
        cargo(&[
            "build",
            "--quiet",
            "--target-dir",
            t,
            "--manifest-path",
            fixtures,
            "-p",
            "fixture-abort",
            "-p",
            "fixture-abort-at-load",
            "--profile",
            "abort",
        ]);
        // Shared libraries that are not plugins, built with the system C compiler.
        for lib in ["ctor_thread", "ctor_block"] {
            cc_library(lib, &target.join("debug"));
        }
        target
    })
}

/// The `#[tool]` macros' proc-macro library as the test build made it (a dependency of
/// every plugin): what `cargo build --release` puts in `target/release` beside the
/// plugins, under this name.
pub(crate) fn proc_macro_library() -> (PathBuf, &'static str) {
    let deps = built().join("debug").join("deps");
    let found = std::fs::read_dir(&deps)
        .expect("read the test build's deps")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                n.starts_with("libtoolhost_plugin_api_macros-") && n.ends_with(".so")
            })
        })
        .expect("the proc-macro library in the test build");
    (found, "libtoolhost_plugin_api_macros.so")
}

/// The workspaces under `tests/compat/`, one per plugin-api release kept there.
pub(crate) fn compat_manifests() -> Vec<PathBuf> {
    let dir = workspace_root().join("tests/compat");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("Cargo.toml"))
        .filter(|m| m.exists())
        .collect();
    found.sort();
    found
}

/// Compiles `tests/fixtures/c-libs/<name>.c` into `<out>/lib<name>.so` with `cc`.
fn cc_library(name: &str, out: &Path) {
    let source = workspace_root()
        .join("tests/fixtures/c-libs")
        .join(format!("{name}.c"));
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-pthread", "-o"])
        .arg(out.join(format!("lib{name}.so")))
        .arg(&source)
        .status()
        .unwrap_or_else(|e| panic!("could not run cc (the system C compiler): {e}"));
    assert!(status.success(), "cc failed on {}", source.display());
}

/// A `toolhost` binary built against the newer plugin-api (ABI 0.1.99).
pub(crate) fn newer_host() -> PathBuf {
    built().join("debug").join("toolhost")
}

/// A build of the echo fixture whose `build_version` answers `version` ("v1" or "v2").
pub(crate) fn echo_build(version: &str) -> PathBuf {
    built()
        .join(format!("echo-{version}"))
        .join("libfixture_echo.so")
}

/// Node 22 from `target/mcp-tools` with what `tests/mcp/package.json` pins (Ajv, the
/// TypeScript SDKs' clients, the conformance suite), set up once per test run by
/// `tests/mcp/setup.sh` when something is missing.
pub(crate) fn mcp_node() -> &'static Path {
    static NODE: OnceLock<PathBuf> = OnceLock::new();
    NODE.get_or_init(|| {
        let tools = workspace_root().join("target/mcp-tools");
        let node = tools.join("node_modules/.bin/node");
        let pinned = std::fs::read_to_string(workspace_root().join("tests/mcp/package.json"))
            .expect("tests/mcp/package.json");
        let installed = std::fs::read_to_string(tools.join("package.json")).unwrap_or_default();
        if !node.exists() || pinned != installed {
            let set_up = Command::new("bash")
                .arg(workspace_root().join("tests/mcp/setup.sh"))
                .status()
                .expect("run tests/mcp/setup.sh");
            assert!(set_up.success(), "tests/mcp/setup.sh failed");
        }
        node
    })
}

/// The built .so of a crate (`fixture_basic`, `toolhost_utils`, ...).
pub(crate) fn so(lib: &str) -> PathBuf {
    let profile = if lib == "fixture_abort" || lib == "fixture_abort_at_load" {
        "abort"
    } else {
        "debug"
    };
    let path = built().join(profile).join(format!("lib{lib}.so"));
    assert!(path.exists(), "{} was not built", path.display());
    path
}

/// A work folder set up as the book says for a coding agent: the example config (with
/// `extra` appended) and the example `coder` profile in a temporary folder, and a plugin
/// folder with the bundled plugins the profile uses.
pub(crate) struct CoderSetup {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) plugins: PluginDir,
}

impl CoderSetup {
    pub(crate) fn new(extra: &str) -> CoderSetup {
        let root = workspace_root();
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config =
            std::fs::read_to_string(root.join("toolhost.example.toml")).expect("example");
        config.push_str(extra);
        std::fs::write(dir.path().join("config.toml"), config).expect("config");
        let coder = dir.path().join("profiles").join("coder");
        std::fs::create_dir_all(&coder).expect("profiles");
        std::fs::copy(
            root.join("examples/profiles/coder/config.toml"),
            coder.join("config.toml"),
        )
        .expect("the example profile");
        let plugins = PluginDir::with(&[
            "toolhost_workspace",
            "toolhost_rust",
            "toolhost_utils",
            "toolhost_memory",
            "toolhost_session_search",
            "toolhost_delegate_task",
            "toolhost_clarify",
        ]);
        CoderSetup { dir, plugins }
    }
}

/// A temporary plugin directory.
pub(crate) struct PluginDir {
    pub(crate) dir: tempfile::TempDir,
}

impl PluginDir {
    /// A directory holding the given built libraries.
    pub(crate) fn with(libs: &[&str]) -> PluginDir {
        let d = PluginDir {
            dir: tempfile::tempdir().expect("temp dir"),
        };
        for lib in libs {
            d.install(lib);
        }
        d
    }

    pub(crate) fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    /// Copies a built library in (by rename, as the book tells operators to).
    pub(crate) fn install(&self, lib: &str) -> PathBuf {
        let dest = self.dir.path().join(format!("lib{lib}.so"));
        let tmp = self.dir.path().join(format!(".lib{lib}.so.tmp"));
        std::fs::copy(so(lib), &tmp).expect("copy plugin");
        std::fs::rename(&tmp, &dest).expect("rename plugin");
        dest
    }

    /// Writes a file with arbitrary bytes.
    pub(crate) fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, bytes).expect("write file");
        p
    }
}

/// One loader for the whole test process (as in the host: one per process).
pub(crate) fn loader() -> &'static PluginLoader {
    static LOADER: OnceLock<PluginLoader> = OnceLock::new();
    LOADER.get_or_init(|| PluginLoader::with_policy(test_load_policy()).expect("loader"))
}

/// Set to `process` (by `isolation::the_plugin_dispatch_and_agent_tests_pass_with_every_plugin_in_a_worker`)
/// to run the tests that load through [`loader`] with every plugin in a worker process.
pub(crate) const MODE_VAR: &str = "TOOLHOST_TEST_PLUGIN_MODE";

/// The load policy of [`loader`]: in-process, or every plugin in a worker when
/// [`MODE_VAR`] says `process`.
pub(crate) fn test_load_policy() -> toolhost::LoadPolicy {
    let mut policy = toolhost::LoadPolicy::default();
    if std::env::var(MODE_VAR).is_ok_and(|m| m == "process") {
        policy.isolation = Arc::new(process_policy());
    }
    policy
}

/// Every plugin in a worker, started from the `toolhost` binary under test, sandboxed as
/// by default but allowed to write in the temporary directory (where the tests' markers,
/// profiles and state folders are).
pub(crate) fn process_policy() -> toolhost::IsolationPolicy {
    toolhost::IsolationPolicy {
        default: toolhost::IsolationMode::Process,
        worker_exe: PathBuf::from(env!("CARGO_BIN_EXE_toolhost")),
        write_paths: vec![std::env::temp_dir()],
        ..toolhost::IsolationPolicy::default()
    }
}

/// Loads a directory and builds its registry.
pub(crate) fn load(dir: &PluginDir) -> (LoadReport, ToolRegistry, Vec<toolhost::RegistryError>) {
    let report = loader().load_dirs(&[dir.path()]);
    let (registry, problems) = toolhost::LoadedPlugin::registry(&report.plugins);
    (report, registry, problems)
}

pub(crate) fn dispatcher(config: DispatchConfig) -> Plan {
    Plan::new(config, Arc::new(ReadOnlyPolicy))
}

pub(crate) fn call(id: &str, name: &str, arguments: serde_json::Value) -> ToolCall {
    ToolCall {
        id: id.to_owned(),
        name: name.to_owned(),
        arguments: arguments.into(),
    }
}

/// A path in a fresh temporary directory, for markers a plugin writes.
pub(crate) fn marker() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().expect("temp dir");
    let p = d.path().join("marker");
    (d, p)
}

/// An empty config home, so the tests never read the developer's own
/// `~/.config/toolhost/config.toml`.
pub(crate) fn empty_config_home() -> &'static Path {
    static HOME: OnceLock<tempfile::TempDir> = OnceLock::new();
    HOME.get_or_init(|| tempfile::tempdir().expect("temp dir"))
        .path()
}

/// This test's `XDG_STATE_HOME` (what the commands it builds get): one per test (by the
/// test thread's name), so tests that keep state in the same profile never share it.
pub(crate) fn state_home() -> PathBuf {
    let test = std::thread::current()
        .name()
        .unwrap_or("unnamed")
        .replace(|c: char| !c.is_ascii_alphanumeric() && c != '_', "_");
    empty_config_home().join("state").join(test)
}

/// Where this test's commands keep profile `name`'s state (`<state home>/toolhost/
/// profiles/<name>/state`).
pub(crate) fn profile_state(name: &str) -> PathBuf {
    state_home()
        .join("toolhost/profiles")
        .join(name)
        .join("state")
}

/// Where this test's commands keep profile `name`'s session database (beside its state
/// folder, out of plugins' reach).
pub(crate) fn profile_sessions(name: &str) -> PathBuf {
    profile_state(name)
        .with_file_name("sessions")
        .join("sessions.sqlite3")
}

/// A command running `program` (a toolhost binary) isolated from the environment's config
/// and state (tokens, trust pins).
pub(crate) fn isolated(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("XDG_CONFIG_HOME", empty_config_home())
        .env("XDG_STATE_HOME", state_home())
        .env_remove("TOOLHOST_PLUGINS")
        .env_remove("TOOLHOST_FIXTURE_TOKEN");
    cmd
}

/// The `toolhost` binary under test, isolated from the environment's config.
pub(crate) fn toolhost_command() -> Command {
    isolated(env!("CARGO_BIN_EXE_toolhost"))
}

/// A catalog of `dir` whose plugins load with `policy` (workers, for the isolation and
/// sandbox tests), scanned once.
pub(crate) async fn worker_catalog(
    dir: &PluginDir,
    policy: toolhost::IsolationPolicy,
) -> Arc<toolhost::PluginCatalog> {
    let catalog = Arc::new(
        toolhost::PluginCatalog::new(toolhost::CatalogConfig {
            dirs: vec![dir.path()],
            loading: toolhost::LoadPolicy {
                isolation: Arc::new(policy),
                ..toolhost::LoadPolicy::default()
            },
            ..toolhost::CatalogConfig::default()
        })
        .expect("catalog"),
    );
    rescan(&catalog).await;
    catalog
}

/// Rescans `catalog` on a blocking thread, as the host does.
pub(crate) async fn rescan(catalog: &Arc<toolhost::PluginCatalog>) -> toolhost::RescanReport {
    let catalog = Arc::clone(catalog);
    tokio::task::spawn_blocking(move || catalog.rescan())
        .await
        .expect("the rescan ran")
}

/// Call time limits with a short call timeout and a long grace, so a tool that heeds
/// its cancel signal always gets to report it.
pub(crate) fn short_timeout(ms: u64) -> DispatchConfig {
    DispatchConfig {
        timeout: std::time::Duration::from_millis(ms),
        cancel_grace: std::time::Duration::from_secs(5),
        ..DispatchConfig::default()
    }
}

/// A throwaway local user for tests of who else on the machine can reach a door. Made
/// with `useradd` (tests run as root in CI) and removed when dropped.
pub(crate) struct OtherUser {
    pub(crate) name: String,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

impl OtherUser {
    /// A fresh user, or `None` (with the reason printed) when the tests do not run as root
    /// or the machine has no `useradd`.
    pub(crate) fn create(test: &str) -> Option<OtherUser> {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!(
                "skipping {test}: it needs root to create a second user (run the tests as root)"
            );
            return None;
        }
        let name = format!(
            "th{}x{}",
            std::process::id() % 100_000,
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let made = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
            ])
            .arg(&name)
            .status();
        if !made.is_ok_and(|s| s.success()) {
            eprintln!(
                "skipping {test}: `useradd {name}` failed (is the shadow package installed?)"
            );
            return None;
        }
        let id = |flag: &str| -> u32 {
            let out = Command::new("id")
                .args([flag, &name])
                .output()
                .expect("run id");
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .expect("numeric id")
        };
        let (uid, gid) = (id("-u"), id("-g"));
        Some(OtherUser { name, uid, gid })
    }

    /// A command that runs `program` as this user (with `setpriv`, keeping the
    /// environment, with no supplementary groups).
    pub(crate) fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("setpriv");
        cmd.arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.gid))
            .arg("--clear-groups")
            .arg("--")
            .arg(program);
        cmd
    }

    /// Gives `path` to this user.
    pub(crate) fn chown(&self, path: &Path) {
        std::os::unix::fs::chown(path, Some(self.uid), Some(self.gid)).expect("chown");
    }
}

impl Drop for OtherUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.name).status();
    }
}

/// Starts `command` (a `toolhost serve --mcp http --listen 127.0.0.1:0 ...`) with its log
/// piped and echoed to the test's stderr, and waits (60 s at most) for the port the log
/// says it serves MCP on.
pub(crate) fn spawn_http_server(mut command: Command) -> (std::process::Child, u16) {
    use std::io::BufRead as _;
    let mut child = command
        .env("TOOLHOST_LOG", "info,rmcp=warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start toolhost serve --mcp http");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            eprintln!("[serve] {line}");
            if let Some(at) = line.find("://127.0.0.1:") {
                let rest = &line[at + "://127.0.0.1:".len()..];
                let port: String = rest.chars().take_while(char::is_ascii_digit).collect();
                let _ = tx.send(port);
            }
        }
    });
    match rx.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(port) => (child, port.parse().expect("a port number")),
        Err(_) => {
            let _ = child.kill();
            panic!("toolhost serve --mcp http did not log the address it serves on");
        }
    }
}

/// How long the tests wait for something that should happen at once.
pub(crate) const WAIT_BOUND: std::time::Duration = std::time::Duration::from_secs(30);

/// What a condition polled by [`eventually`] returns: `true`, or `Some(value)`, once it
/// holds.
pub(crate) trait Ready {
    /// What the wait returns.
    type Output;
    /// `Some` once the condition holds.
    fn ready(self) -> Option<Self::Output>;
}

impl Ready for bool {
    type Output = ();
    fn ready(self) -> Option<()> {
        self.then_some(())
    }
}

impl<T> Ready for Option<T> {
    type Output = T;
    fn ready(self) -> Option<T> {
        self
    }
}

/// Polls `check` every 10 ms until it holds and returns what it gave; fails naming `what`
/// after `bound`. The one bounded wait of the tests (no fixed sleeps stand in for an
/// event); [`eventually_async`] is the same for async tests.
pub(crate) fn eventually<R: Ready>(
    bound: std::time::Duration,
    what: &str,
    mut check: impl FnMut() -> R,
) -> R::Output {
    let deadline = std::time::Instant::now() + bound;
    loop {
        if let Some(out) = check().ready() {
            return out;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within {bound:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// [`eventually`] for async tests: waits with the runtime's timer, so other tasks run.
pub(crate) async fn eventually_async<R: Ready>(
    bound: std::time::Duration,
    what: &str,
    mut check: impl FnMut() -> R,
) -> R::Output {
    let deadline = std::time::Instant::now() + bound;
    loop {
        if let Some(out) = check().ready() {
            return out;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within {bound:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// [`eventually`] with [`WAIT_BOUND`].
pub(crate) fn wait_until(what: &str, done: impl FnMut() -> bool) {
    eventually(WAIT_BOUND, what, done);
}

/// Waits (bounded) for `child` to exit and returns its status.
pub(crate) fn wait_exit(child: &mut std::process::Child, what: &str) -> std::process::ExitStatus {
    eventually(WAIT_BOUND, &format!("{what} exiting"), || {
        child.try_wait().expect("wait")
    })
}

/// Waits (bounded) until a host answers on the control socket `path`.
pub(crate) fn wait_for_socket(path: &Path) {
    wait_until(&format!("a host answering on {}", path.display()), || {
        std::os::unix::net::UnixStream::connect(path).is_ok()
    });
}

/// `toolhost serve --no-watch --plugins PLUGINS --control SOCKET`, isolated, not started.
pub(crate) fn serve_command(plugins: &Path, socket: &Path) -> Command {
    let mut cmd = toolhost_command();
    cmd.args(["serve", "--no-watch", "--plugins"])
        .arg(plugins)
        .arg("--control")
        .arg(socket);
    cmd
}

/// Makes a bearer token named `name` in the state directory `state` (its
/// `XDG_STATE_HOME`) with `toolhost token add`, and returns it.
pub(crate) fn token_add(state: &Path, name: &str) -> String {
    token_add_with(state, name, &[])
}

/// `toolhost token add NAME ARGS...` (`--scope metrics`, say) in `state`: the token.
pub(crate) fn token_add_with(state: &Path, name: &str, args: &[&str]) -> String {
    let made = toolhost_command()
        .args(["token", "add", name])
        .args(args)
        .env("XDG_STATE_HOME", state)
        .output()
        .expect("run toolhost token add");
    assert!(
        made.status.success(),
        "toolhost token add {name}: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    String::from_utf8_lossy(&made.stdout).trim().to_owned()
}

pub(crate) mod model;
