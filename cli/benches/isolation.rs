//! Benchmark: plugins in worker processes. In one run, side by side: (1) the tools/call
//! round trip of the echo fixture in-process, in a worker, and over MCP stdio to the same
//! tool, with the socketpair floor between two threads measured alongside, both as the
//! kernel places the threads and pinned to one core; (2) 50 reloads by rename with calls
//! running, in-process and in process mode: time from the file in place to the new
//! generation serving, and the RSS of host plus workers after each; (3) from a worker's
//! crash to the next successful call on its restarted worker. The worker round trip is
//! also measured under each containment and without the sandbox, to show what each costs.
//! Prints figures; asserts nothing.
//!
//! Run: `cargo bench -p toolhost-cli --bench isolation`

mod common;

use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::peer::Peer;
use common::rss_of;
use serde_json::json;
use toolhost::{
    CallContext, CatalogConfig, ContainmentMode, DispatchConfig, IsolationMode, IsolationPolicy,
    LoadPolicy, Plan, PluginCatalog, PluginLoader, ReadOnlyPolicy, SandboxMode, ToolCall,
    ToolRegistry, TurnIdentity,
};

const CALLS: usize = 20_000;
const WARMUP: usize = 2_000;
const RELOADS: usize = 50;
const CRASHES: usize = 20;
/// Set in this binary's environment when it runs the round trips pinned to one core.
const PINNED: &str = "TOOLHOST_BENCH_PINNED";

fn toolhost() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_toolhost"))
}

fn worker_policy() -> IsolationPolicy {
    IsolationPolicy {
        default: IsolationMode::Process,
        worker_exe: toolhost(),
        ..IsolationPolicy::default()
    }
}

fn loader(mode: IsolationMode) -> PluginLoader {
    let isolation = match mode {
        IsolationMode::InProcess => IsolationPolicy::default(),
        IsolationMode::Process => worker_policy(),
    };
    PluginLoader::with_policy(LoadPolicy {
        isolation: Arc::new(isolation),
        ..LoadPolicy::default()
    })
    .expect("loader")
}

fn dispatcher() -> Plan {
    Plan::new(
        DispatchConfig {
            timeout: Duration::from_secs(60),
            ..DispatchConfig::default()
        },
        Arc::new(ReadOnlyPolicy),
    )
}

fn percentiles(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[v.len() * 99 / 100])
}

/// Microseconds per echo call through registry + dispatcher, each timed.
fn dispatch_round_trips(rt: &tokio::runtime::Runtime, registry: &ToolRegistry) -> Vec<f64> {
    let d = dispatcher();
    let turn = CallContext::new(TurnIdentity::default());
    let call = ToolCall {
        id: "1".to_owned(),
        name: "echo".to_owned(),
        arguments: json!({"text": "hello"}).into(),
    };
    rt.block_on(async {
        for _ in 0..WARMUP {
            let r = d.call(registry, &turn, call.clone()).await;
            assert_eq!(r.output, "hello", "{r:?}");
        }
        let mut times = Vec::with_capacity(CALLS);
        for _ in 0..CALLS {
            let started = Instant::now();
            std::hint::black_box(d.call(registry, &turn, call.clone()).await);
            times.push(started.elapsed().as_secs_f64() * 1e6);
        }
        times
    })
}

/// A 64-byte request and answer over a socketpair between two threads.
fn socketpair_floor() -> Vec<f64> {
    let (mut a, mut b) = UnixStream::pair().expect("socketpair");
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        while b.read_exact(&mut buf).is_ok() {
            if b.write_all(&buf).is_err() {
                break;
            }
        }
    });
    let mut buf = [7u8; 64];
    let mut times = Vec::with_capacity(CALLS);
    for i in 0..WARMUP + CALLS {
        let started = Instant::now();
        a.write_all(&buf).expect("write");
        a.read_exact(&mut buf).expect("read");
        if i >= WARMUP {
            times.push(started.elapsed().as_secs_f64() * 1e6);
        }
    }
    drop(a);
    let _ = echo.join();
    times
}

fn mcp_round_trips(plugins: &Path) -> Vec<f64> {
    let mut cmd = Command::new(toolhost());
    cmd.args(["serve", "--mcp", "stdio", "--no-watch", "--plugins"])
        .arg(plugins)
        .arg("--control")
        .arg(plugins.join("control.sock"))
        .env("XDG_CONFIG_HOME", plugins.join("no-config"))
        .env("TOOLHOST_LOG", "warn");
    let mut peer = Peer::start(cmd);
    let params = json!({"name": "echo", "arguments": {"text": "hello"}});
    for _ in 0..WARMUP {
        peer.request("tools/call", params.clone());
    }
    let mut times = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let started = Instant::now();
        let r = peer.request("tools/call", params.clone());
        times.push(started.elapsed().as_secs_f64() * 1e6);
        assert_ne!(r["isError"], json!(true), "{r}");
    }
    times
}

/// Part 1, in this process (pinned to core 0 when [`PINNED`] is set: the workers and the
/// MCP server it starts inherit that).
fn round_trips(echo: &Path) {
    let pinned = std::env::var_os(PINNED).is_some();
    if pinned {
        // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::copy(echo, dir.path().join("libfixture_echo.so")).expect("install");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut rows = Vec::new();
    for mode in [IsolationMode::InProcess, IsolationMode::Process] {
        let loader = loader(mode);
        let report = loader.load_dirs(&[dir.path().to_path_buf()]);
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        let (registry, _) = toolhost::LoadedPlugin::registry(&report.plugins);
        let label = match mode {
            IsolationMode::InProcess => "in-process (plugin threads)",
            IsolationMode::Process => "isolated (worker process)",
        };
        rows.push((label, percentiles(dispatch_round_trips(&rt, &registry))));
    }
    // What each containment, and the sandbox itself, cost a call (the row above is the
    // default: the strongest containment this host can make, sandbox best-effort).
    let root = unsafe { libc::geteuid() } == 0;
    let variants = [
        (
            "  worker in a cgroup",
            ContainmentMode::Cgroup,
            SandboxMode::BestEffort,
        ),
        (
            "  worker in a PID namespace",
            ContainmentMode::PidNamespace,
            SandboxMode::BestEffort,
        ),
        (
            "  worker, process group only",
            ContainmentMode::ProcessGroup,
            SandboxMode::BestEffort,
        ),
        (
            "  worker, process group, no sandbox",
            ContainmentMode::ProcessGroup,
            SandboxMode::Off,
        ),
    ];
    let mut extra = Vec::new();
    for (label, containment, sandbox) in variants {
        if containment == ContainmentMode::Cgroup && !root {
            continue;
        }
        let loader = PluginLoader::with_policy(LoadPolicy {
            isolation: Arc::new(IsolationPolicy {
                containment,
                sandbox,
                ..worker_policy()
            }),
            ..LoadPolicy::default()
        })
        .expect("loader");
        let report = loader.load_dirs(&[dir.path().to_path_buf()]);
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        let (registry, _) = toolhost::LoadedPlugin::registry(&report.plugins);
        extra.push((label, percentiles(dispatch_round_trips(&rt, &registry))));
    }
    rows.push((
        "MCP stdio round trip, same tool",
        percentiles(mcp_round_trips(dir.path())),
    ));
    rows.push((
        "floor: 64 B socketpair ping-pong",
        percentiles(socketpair_floor()),
    ));
    let placement = if pinned {
        "all on one core"
    } else {
        "as the kernel places them (2 cores)"
    };
    println!("\necho round trip, {CALLS} calls each, {placement}:");
    println!("  {:<36} {:>10} {:>10}", "", "median us", "p99 us");
    for (label, (median, p99)) in rows.iter().chain(&extra) {
        println!("  {label:<36} {median:>10.1} {p99:>10.1}");
    }
    let isolated = rows[1].1.0;
    let mcp = rows[2].1.0;
    println!(
        "  isolated / MCP stdio: {:.2}; isolated - in-process: {:+.1} us",
        isolated / mcp,
        isolated - rows[0].1.0
    );
}

fn install(from: &Path, dir: &Path) {
    let tmp = dir.join(".libecho.so.tmp");
    std::fs::copy(from, &tmp).expect("copy");
    std::fs::rename(&tmp, dir.join("libecho.so")).expect("rename");
}

/// Part 2: `RELOADS` reloads with 4 callers running; ms from the file in place to the
/// first call answered by the new generation, and host + worker RSS after each.
fn reloads(mode: IsolationMode, builds: &[PathBuf; 2], rt: &tokio::runtime::Runtime) {
    let dir = tempfile::tempdir().expect("temp dir");
    install(&builds[0], dir.path());
    let catalog = Arc::new(
        PluginCatalog::new(CatalogConfig {
            dirs: vec![dir.path().to_path_buf()],
            max_generations: 1000,
            loading: LoadPolicy {
                isolation: Arc::new(match mode {
                    IsolationMode::InProcess => IsolationPolicy::default(),
                    IsolationMode::Process => worker_policy(),
                }),
                ..LoadPolicy::default()
            },
            ..CatalogConfig::default()
        })
        .expect("catalog"),
    );
    catalog.rescan();
    let stop = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicU64::new(0));
    let callers: Vec<_> = (0..4)
        .map(|_| {
            let (catalog, stop, failed) =
                (Arc::clone(&catalog), Arc::clone(&stop), Arc::clone(&failed));
            rt.spawn(async move {
                let d = dispatcher();
                let turn = CallContext::new(TurnIdentity::default());
                while !stop.load(Ordering::Relaxed) {
                    let call = ToolCall {
                        id: "1".to_owned(),
                        name: "build_version".to_owned(),
                        arguments: json!({}).into(),
                    };
                    if d.call(&catalog.registry(), &turn, call).await.is_error {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    let total_rss = |catalog: &PluginCatalog| {
        let workers: u64 = catalog
            .status()
            .plugins
            .iter()
            .filter_map(|p| p.worker.as_ref().and_then(|w| w.pid))
            .map(rss_of)
            .sum();
        rss_of(std::process::id()) + workers
    };
    let start_rss = total_rss(&catalog);
    let mut latencies = Vec::with_capacity(RELOADS);
    let mut rss = Vec::with_capacity(RELOADS);
    let d = dispatcher();
    let turn = CallContext::new(TurnIdentity::default());
    for i in 0..RELOADS {
        let (build, want) = if i % 2 == 0 {
            (&builds[1], "v2")
        } else {
            (&builds[0], "v1")
        };
        let old_worker = catalog.status().plugins[0]
            .worker
            .as_ref()
            .and_then(|w| w.pid);
        install(build, dir.path());
        let placed = Instant::now();
        catalog.rescan();
        let call = ToolCall {
            id: "1".to_owned(),
            name: "build_version".to_owned(),
            arguments: json!({}).into(),
        };
        let answer = rt.block_on(d.call(&catalog.registry(), &turn, call));
        assert_eq!(answer.output, want, "{answer:?}");
        latencies.push(placed.elapsed().as_secs_f64() * 1e3);
        // The old worker ends once its calls are done; count after it has.
        if let Some(pid) = old_worker {
            let until = Instant::now() + Duration::from_secs(10);
            while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        rss.push(total_rss(&catalog));
    }
    stop.store(true, Ordering::Relaxed);
    for c in callers {
        let _ = rt.block_on(c);
    }
    let (median, p99) = percentiles(latencies);
    let last = *rss.last().unwrap_or(&start_rss);
    let first = rss[0];
    let per_reload = (last as f64 - first as f64) / (RELOADS - 1) as f64 / 1024.0;
    println!(
        "  {:<12} file in place -> new generation serving: median {median:.2} ms, max {p99:.2} ms; \
         failed calls {}; RSS host+workers {} KiB -> {} KiB ({per_reload:+.0} KiB per reload)",
        mode.to_string(),
        failed.load(Ordering::Relaxed),
        start_rss / 1024,
        last / 1024,
    );
}

/// Part 3: ms from a crash to the next successful call on the restarted worker.
fn crash_to_next_call(crashy: &Path, rt: &tokio::runtime::Runtime) {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::copy(crashy, dir.path().join("libfixture_crashy.so")).expect("install");
    let loader = PluginLoader::with_policy(LoadPolicy {
        isolation: Arc::new(IsolationPolicy {
            max_crashes: u32::MAX,
            // Every crash counts as the first in its window: no backoff is measured.
            crash_window: Duration::from_millis(1),
            ..worker_policy()
        }),
        ..LoadPolicy::default()
    })
    .expect("loader");
    let report = loader.load_dirs(&[dir.path().to_path_buf()]);
    let (registry, _) = toolhost::LoadedPlugin::registry(&report.plugins);
    let d = dispatcher();
    let turn = CallContext::new(TurnIdentity::default());
    let call = |name: &str, args: serde_json::Value| ToolCall {
        id: "1".to_owned(),
        name: name.to_owned(),
        arguments: args.into(),
    };
    let mut times = Vec::with_capacity(CRASHES);
    for _ in 0..CRASHES {
        let r = rt.block_on(d.call(&registry, &turn, call("pid", json!({}))));
        assert!(!r.is_error, "{r:?}");
        std::thread::sleep(Duration::from_millis(5));
        let crashed =
            rt.block_on(d.call(&registry, &turn, call("crash", json!({"how": "segfault"}))));
        assert!(crashed.is_error);
        let started = Instant::now();
        let r = rt.block_on(d.call(&registry, &turn, call("pid", json!({}))));
        assert!(!r.is_error, "{r:?}");
        times.push(started.elapsed().as_secs_f64() * 1e3);
    }
    let (median, max) = percentiles(times);
    println!(
        "\ncrash (segfault) -> next successful call on the restarted worker, {CRASHES} crashes: \
         median {median:.1} ms, p99 {max:.1} ms"
    );
}

fn main() {
    let release = common::build_release(&["fixture-echo", "fixture-crashy"], "v1");
    let keep = |from: &Path, version: &str| {
        let kept = from.with_file_name(format!("libfixture_echo-{version}.so"));
        std::fs::copy(from, &kept).expect("keep");
        kept
    };
    let v1 = keep(&release.join("libfixture_echo.so"), "v1");
    let crashy = release.join("libfixture_crashy.so");
    if std::env::var_os(PINNED).is_some() {
        round_trips(&v1);
        return;
    }
    let v2_release = common::build_release(&["fixture-echo"], "v2");
    let v2 = keep(&v2_release.join("libfixture_echo.so"), "v2");
    round_trips(&v1);
    // The same again with this process (and so its workers and server) on one core.
    let status = Command::new(std::env::current_exe().expect("own path"))
        .env(PINNED, "1")
        .status()
        .expect("run pinned");
    assert!(status.success());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!("\n{RELOADS} reloads by rename, 4 callers running:");
    let builds = [v1, v2];
    for mode in [IsolationMode::InProcess, IsolationMode::Process] {
        reloads(mode, &builds, &rt);
    }
    crash_to_next_call(&crashy, &rt);
}
