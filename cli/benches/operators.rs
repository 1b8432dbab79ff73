//! Benchmark: what operators wait for. Side by side in one run, each against its
//! baseline:
//!
//! 1. A complete plugin renamed into a watched directory -> the first call served by the
//!    new generation (4 callers running the whole time; failed calls counted), and ->
//!    `notifications/tools/list_changed` at an MCP stdio client of `toolhost serve`: the
//!    watcher's immediate path against the debounce alone (`[reload] immediate = false`),
//!    in interleaved rounds.
//! 2. 100 distinct plugins: whole-process `toolhost list` and `toolhost serve` start-up
//!    to ready (`READY=1` on a `NOTIFY_SOCKET` the benchmark listens on), loading on the
//!    pool (`[plugins] load_threads = 0`, the cores available) against one thread
//!    (`load_threads = 1`), interleaved; with the per-plugin and sha256 costs.
//!
//! The 100 plugins are the echo fixture with its plugin and tool names rewritten in the
//! binary (same lengths: `echo` -> `e042`, `build_version` -> `bv042_version`, ...), so
//! every one registers its own tools; the benchmark checks that they all load with no
//! duplicate. Prints figures; asserts nothing about speed.
//!
//! Run: `cargo bench -p toolhost-cli --bench operators`

mod common;

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::median;
use common::peer::Peer;
use serde_json::json;
use toolhost::{
    CallContext, CatalogConfig, DispatchConfig, Plan, PluginCatalog, PluginWatcher, ReadOnlyPolicy,
    ToolCall, TurnIdentity, WatchConfig,
};

const ROUNDS: usize = 30;
const PLUGINS: usize = 100;
const STARTS: usize = 9;

/// Builds the echo fixture in release mode answering `version`; returns a kept copy.
fn build_echo(version: &str) -> PathBuf {
    let release = common::build_release(&["fixture-echo"], version);
    let kept = release.join(format!("libfixture_echo-ops-{version}.so"));
    std::fs::copy(release.join("libfixture_echo.so"), &kept).expect("keep");
    kept
}

fn install(from: &Path, dir: &Path, name: &str) {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::copy(from, &tmp).expect("copy");
    std::fs::rename(&tmp, dir.join(name)).expect("rename");
}

/// The toolhost binary with a config file whose text is `config`, in `dir`.
fn toolhost(dir: &Path, config: &str) -> Command {
    let file = dir.join("config.toml");
    std::fs::write(&file, config).expect("write config");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    cmd.arg("--config")
        .arg(file)
        .env("TOOLHOST_LOG", "warn")
        .env("XDG_STATE_HOME", dir.join("state"))
        .env_remove("TOOLHOST_PLUGINS");
    cmd
}

/// One watched catalog with callers hammering it.
struct Watched {
    name: &'static str,
    dir: tempfile::TempDir,
    catalog: Arc<PluginCatalog>,
    _watcher: PluginWatcher,
    latencies: Vec<f64>,
}

async fn rename_to_first_call(builds: &[PathBuf; 2]) {
    let start = |name: &'static str, immediate: bool| {
        let dir = tempfile::tempdir().expect("temp dir");
        install(&builds[0], dir.path(), "libecho.so");
        let catalog = Arc::new(
            PluginCatalog::new(CatalogConfig {
                dirs: vec![dir.path().to_path_buf()],
                max_generations: 10_000,
                ..CatalogConfig::default()
            })
            .expect("catalog"),
        );
        catalog.rescan();
        let watcher = PluginWatcher::start(
            Arc::clone(&catalog),
            WatchConfig {
                immediate,
                ..WatchConfig::default()
            },
        )
        .expect("watch");
        Watched {
            name,
            dir,
            catalog,
            _watcher: watcher,
            latencies: Vec::new(),
        }
    };
    let mut subjects = [
        start("immediate path (default)", true),
        start("debounce only (immediate = false)", false),
    ];
    let call = ToolCall {
        id: "1".to_owned(),
        name: "build_version".to_owned(),
        arguments: json!({}).into(),
    };
    let d = Arc::new(Plan::new(
        DispatchConfig::default(),
        Arc::new(ReadOnlyPolicy),
    ));
    // Load: 4 callers on each catalog the whole time.
    let stop = Arc::new(AtomicBool::new(false));
    let (calls, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut callers = Vec::new();
    for s in &subjects {
        for _ in 0..4 {
            let (catalog, d, call) = (Arc::clone(&s.catalog), Arc::clone(&d), call.clone());
            let (stop, calls, failed) = (stop.clone(), calls.clone(), failed.clone());
            callers.push(tokio::spawn(async move {
                let turn = CallContext::new(TurnIdentity::default());
                while !stop.load(Ordering::Relaxed) {
                    let r = d.call(&catalog.registry(), &turn, call.clone()).await;
                    calls.fetch_add(1, Ordering::Relaxed);
                    if r.is_error {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_micros(500)).await;
                }
            }));
        }
    }
    let turn = CallContext::new(TurnIdentity::default());
    for round in 1..=ROUNDS {
        let want = if round % 2 == 1 { "v2" } else { "v1" };
        for s in subjects.iter_mut() {
            install(&builds[round % 2], s.dir.path(), "libecho.so");
            let placed = Instant::now();
            loop {
                let r = d.call(&s.catalog.registry(), &turn, call.clone()).await;
                if r.output == want {
                    s.latencies.push(placed.elapsed().as_secs_f64() * 1e3);
                    break;
                }
                assert!(placed.elapsed() < Duration::from_secs(30), "never served");
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            // The watcher quiet again before the next rename (its debounced rescan done).
            tokio::time::sleep(Duration::from_millis(120)).await;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for c in callers {
        let _ = c.await;
    }
    println!(
        "rename of a complete plugin -> first call on the new generation ({ROUNDS} rounds, \
         4 callers per host running):"
    );
    for s in &subjects {
        let max = s.latencies.iter().copied().fold(0.0, f64::max);
        println!(
            "  {:<36} median {:6.2} ms, max {:6.2} ms",
            s.name,
            median(s.latencies.clone()),
            max
        );
    }
    println!(
        "  calls during the reloads: {}, failed: {}",
        calls.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed)
    );
}

/// `toolhost serve --mcp stdio` over a directory holding `v1`, with `config`.
fn mcp_host(v1: &Path, config: &str) -> (tempfile::TempDir, Peer) {
    let dir = tempfile::tempdir().expect("temp dir");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).expect("plugins dir");
    install(v1, &plugins, "libfixture_echo.so");
    let mut cmd = toolhost(dir.path(), config);
    cmd.args(["serve", "--mcp", "stdio", "--plugins"])
        .arg(&plugins)
        .arg("--control")
        .arg(dir.path().join("control.sock"));
    let peer = Peer::start(cmd);
    (dir, peer)
}

fn rename_to_list_changed(builds: &[PathBuf; 2]) {
    let mut subjects = [
        (
            "immediate path (default)",
            mcp_host(&builds[0], ""),
            Vec::new(),
        ),
        (
            "debounce only (immediate = false)",
            mcp_host(&builds[0], "[reload]\nimmediate = false\n"),
            Vec::new(),
        ),
    ];
    for round in 0..ROUNDS {
        for (_, (dir, peer), times) in subjects.iter_mut() {
            let next = &builds[(round + 1) % 2];
            let started = Instant::now();
            install(next, &dir.path().join("plugins"), "libfixture_echo.so");
            loop {
                let message = peer.read();
                if message["method"] == "notifications/tools/list_changed" {
                    break;
                }
            }
            times.push(started.elapsed().as_secs_f64() * 1e3);
            // Let the watcher go quiet so the next rename is its own event.
            std::thread::sleep(Duration::from_millis(120));
        }
    }
    println!(
        "rename of a complete plugin -> notifications/tools/list_changed at an MCP stdio \
         client ({ROUNDS} rounds):"
    );
    for (name, _, times) in subjects {
        let max = times.iter().copied().fold(0.0, f64::max);
        println!(
            "  {name:<36} median {:6.2} ms, max {:6.2} ms",
            median(times),
            max
        );
    }
}

/// Replaces every occurrence of `from` in `bytes` with `to` (same length).
fn patch(bytes: &mut [u8], from: &[u8], to: &[u8]) -> usize {
    assert_eq!(from.len(), to.len());
    let mut n = 0;
    let mut i = 0;
    while i + from.len() <= bytes.len() {
        if &bytes[i..i + from.len()] == from {
            bytes[i..i + from.len()].copy_from_slice(to);
            n += 1;
            i += from.len();
        } else {
            i += 1;
        }
    }
    n
}

/// A directory of `PLUGINS` distinct plugins made from the echo build `echo`.
fn hundred_plugins(echo: &Path) -> tempfile::TempDir {
    let original = std::fs::read(echo).expect("read the echo build");
    let dir = tempfile::tempdir().expect("temp dir");
    for i in 0..PLUGINS {
        let mut bytes = original.clone();
        for (from, to) in [
            ("build_version", format!("bv{i:03}_version")),
            ("slow_version", format!("s{i:03}_version")),
            ("note_write", format!("n{i:03}_write")),
            ("echo", format!("e{i:03}")),
        ] {
            patch(&mut bytes, from.as_bytes(), to.as_bytes());
        }
        let file = dir.path().join(format!("libplugin{i:03}.so"));
        std::fs::write(&file, bytes).expect("write plugin");
    }
    dir
}

/// Milliseconds for `toolhost list` over `plugins` with `threads` load threads.
fn list_once(plugins: &Path, work: &Path, threads: usize) -> f64 {
    let mut cmd = toolhost(work, &format!("[plugins]\nload_threads = {threads}\n"));
    cmd.args(["list", "--json", "--plugins"])
        .arg(plugins)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let start = Instant::now();
    let status = cmd.status().expect("run toolhost list");
    let ms = start.elapsed().as_secs_f64() * 1e3;
    assert!(status.success(), "toolhost list failed");
    ms
}

/// Milliseconds from starting `toolhost serve` over `plugins` to its `READY=1`.
fn serve_once(plugins: &Path, work: &Path, threads: usize) -> f64 {
    let notify = work.join("notify.sock");
    let _ = std::fs::remove_file(&notify);
    let socket = UnixDatagram::bind(&notify).expect("bind the notify socket");
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut cmd = toolhost(work, &format!("[plugins]\nload_threads = {threads}\n"));
    cmd.args(["serve", "--no-watch", "--plugins"])
        .arg(plugins)
        .arg("--control")
        .arg(work.join("control.sock"))
        .env("NOTIFY_SOCKET", &notify)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let start = Instant::now();
    let mut child = cmd.spawn().expect("start toolhost serve");
    let mut buf = [0u8; 4096];
    loop {
        let n = socket.recv(&mut buf).expect("READY=1 within 30 s");
        if String::from_utf8_lossy(&buf[..n])
            .lines()
            .any(|l| l == "READY=1")
        {
            break;
        }
    }
    let ms = start.elapsed().as_secs_f64() * 1e3;
    // SAFETY: kill has no memory preconditions; the pid is our child's.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let _ = child.wait();
    ms
}

fn hundred_plugin_start(echo: &Path) {
    let plugins = hundred_plugins(echo);
    let work = tempfile::tempdir().expect("temp dir");
    // Every one loads, each with its own tools.
    let loader = toolhost::PluginLoader::new().expect("loader");
    let report = loader.load_dirs(&[plugins.path().to_path_buf()]);
    let (registry, problems) = toolhost::LoadedPlugin::registry(&report.plugins);
    let distinct = report.errors.is_empty() && problems.is_empty();
    println!(
        "\n{PLUGINS} plugins ({} KiB each): {} loaded, {} tools, {} load errors, {} registry \
         errors{}",
        std::fs::metadata(echo).map(|m| m.len() / 1024).unwrap_or(0),
        report.plugins.len(),
        registry.len(),
        report.errors.len(),
        problems.len(),
        if distinct { " (all distinct)" } else { "" }
    );
    // The parts of one load: sha256 of the bytes alone, and a whole load in this process.
    let files: Vec<PathBuf> = (0..PLUGINS)
        .map(|i| plugins.path().join(format!("libplugin{i:03}.so")))
        .collect();
    let start = Instant::now();
    for f in &files {
        use sha2::Digest as _;
        let bytes = std::fs::read(f).expect("read");
        std::hint::black_box(sha2::Sha256::digest(&bytes));
    }
    let hash_ms = start.elapsed().as_secs_f64() * 1e3 / PLUGINS as f64;
    let one = toolhost::PluginLoader::with_policy(toolhost::LoadPolicy {
        load_threads: 1,
        ..toolhost::LoadPolicy::default()
    })
    .expect("loader");
    let fresh = hundred_plugins(echo);
    let start = Instant::now();
    let again = one.load_dirs(&[fresh.path().to_path_buf()]);
    let load_ms = start.elapsed().as_secs_f64() * 1e3 / PLUGINS as f64;
    assert_eq!(again.plugins.len(), PLUGINS);
    println!(
        "  per plugin, one thread in this process: {load_ms:.2} ms to load (read, sha256 \
         {hash_ms:.2} ms of it, private copy, ELF and trust checks, dlopen, ABI checks, \
         metadata)"
    );

    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let mut rows: Vec<(String, Vec<f64>, Vec<f64>)> = vec![
        (
            format!("load pool ({cores} threads)"),
            Vec::new(),
            Vec::new(),
        ),
        (
            "one thread (load_threads = 1)".to_owned(),
            Vec::new(),
            Vec::new(),
        ),
    ];
    let mut empty_list = Vec::new();
    let empty = tempfile::tempdir().expect("temp dir");
    for run in 0..STARTS {
        for k in 0..rows.len() {
            let k = if run % 2 == 0 { k } else { rows.len() - 1 - k };
            let threads = if k == 0 { 0 } else { 1 };
            let list = list_once(plugins.path(), work.path(), threads);
            let serve = serve_once(plugins.path(), work.path(), threads);
            rows[k].1.push(list);
            rows[k].2.push(serve);
        }
        empty_list.push(list_once(empty.path(), work.path(), 0));
    }
    println!(
        "  whole process, median of {STARTS} (the process alone, no plugins: `list` {:.1} ms):",
        median(empty_list)
    );
    println!(
        "  {:<32} {:>14} {:>22}",
        "", "toolhost list", "serve start -> READY=1"
    );
    for (name, list, serve) in rows {
        println!(
            "  {name:<32} {:>11.1} ms {:>19.1} ms",
            median(list),
            median(serve)
        );
    }
}

fn main() {
    let builds = [build_echo("v1"), build_echo("v2")];
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(rename_to_first_call(&builds));
    rename_to_list_changed(&builds);
    hundred_plugin_start(&builds[0]);
}
