//! Plugins in worker processes: every way native code can die ends only its worker (the
//! calls in flight get an error naming the plugin and the signal or exit status, other
//! plugins never notice, the next call gets a fresh worker); a call that ignores its
//! cancel gets its worker killed; repeated crashes quarantine the plugin until a reload;
//! a reload under load fails no call and ends the old worker; the sandbox refuses writes
//! and TCP that the config does not allow; the plugin, dispatch and agent tests (host
//! services: state folder, child turns, questions, cancellation) pass again with every
//! plugin in a worker.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolhost::{
    CallContext, CallErrorKind, DispatchConfig, IsolationPolicy, LoadPolicy, PluginCatalog,
    PluginLoader, ToolRegistry, ToolResult, TurnIdentity,
};

use crate::support::{
    MODE_VAR, PluginDir, WAIT_BOUND, call, dispatcher, echo_build, eventually_async,
    process_policy, so, toolhost_command, worker_catalog,
};

/// A loader that runs every plugin in a worker with `policy`'s settings.
fn worker_loader(policy: IsolationPolicy) -> PluginLoader {
    PluginLoader::with_policy(LoadPolicy {
        isolation: Arc::new(policy),
        ..LoadPolicy::default()
    })
    .expect("loader")
}

fn registry(loader: &PluginLoader, dir: &PluginDir) -> ToolRegistry {
    let report = loader.load_dirs(&[dir.path()]);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert!(
        report
            .plugins
            .iter()
            .all(|p| p.mode == toolhost::IsolationMode::Process),
        "{:?}",
        report.plugins
    );
    toolhost::LoadedPlugin::registry(&report.plugins).0
}

async fn run(registry: &ToolRegistry, tool: &str, args: Value) -> ToolResult {
    dispatcher(DispatchConfig::default())
        .call(
            registry,
            &CallContext::new(TurnIdentity::default()),
            call("1", tool, args),
        )
        .await
}

fn pid(result: &ToolResult) -> u32 {
    assert!(!result.is_error, "{result:?}");
    result.output.parse().expect("a pid")
}

fn gone(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

/// The pid of the worker of plugin `name`, if one runs.
fn worker_pid(catalog: &PluginCatalog, name: &str) -> Option<u32> {
    catalog
        .status()
        .plugins
        .iter()
        .find(|p| p.name == name)
        .and_then(|p| p.worker.as_ref())
        .and_then(|w| w.pid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_way_a_plugin_crashes_ends_only_its_worker_and_the_next_call_works() {
    let dir = PluginDir::with(&["fixture_crashy", "fixture_echo"]);
    let catalog = worker_catalog(
        &dir,
        IsolationPolicy {
            max_crashes: 100,
            memory_limit_bytes: 256 << 20,
            ..process_policy()
        },
    )
    .await;
    let registry = catalog.registry();
    let echo_worker = worker_pid(&catalog, "echo").expect("echo's worker");
    for (how, says) in [
        ("segfault", "signal 11 (SIGSEGV"),
        ("abort", "signal 6 (SIGABRT"),
        ("stack_overflow", "stack overflow"),
        ("exit", "exited with status 3"),
        ("oom", "memory allocation"),
    ] {
        let before = pid(&run(&registry, "pid", json!({})).await);
        // Two calls in flight on the same worker when it dies.
        let marks = tempfile::tempdir().expect("temp dir");
        let busy: Vec<_> = (0..2)
            .map(|i| {
                let registry = registry.clone();
                let started = marks.path().join(format!("started-{i}"));
                tokio::spawn(async move {
                    let args = json!({"ms": 20_000, "started": started});
                    run(&registry, "ignore_cancel", args).await
                })
            })
            .collect();
        eventually_async(WAIT_BOUND, "both busy calls running", || {
            (0..2).all(|i| marks.path().join(format!("started-{i}")).exists())
        })
        .await;
        let crashed = run(&registry, "crash", json!({"how": how})).await;
        assert!(crashed.is_error, "{how}: {crashed:?}");

        assert_eq!(crashed.error, Some(CallErrorKind::Failed), "{crashed:?}");
        let message = &crashed.output;
        assert!(
            message.contains("plugin 'crashy'") && message.contains(says),
            "{how}: {message}"
        );
        assert!(message.contains("fresh worker"), "{how}: {message}");
        for task in busy {
            let r = task.await.expect("call task");
            assert!(r.is_error, "{how}: a call in flight got {r:?}");
            assert!(r.output.contains("plugin 'crashy'"), "{how}: {}", r.output);
        }
        // Another plugin never noticed: the same worker answers.
        let r = run(&registry, "build_version", json!({})).await;
        assert!(!r.is_error, "{r:?}");
        assert_eq!(worker_pid(&catalog, "echo"), Some(echo_worker));
        // The next call gets a fresh worker.
        let started = Instant::now();
        let after = pid(&run(&registry, "pid", json!({})).await);
        println!(
            "{how}: next call on a fresh worker in {:.1} ms",
            started.elapsed().as_secs_f64() * 1e3
        );
        assert_ne!(before, after, "{how}: the worker was restarted");
        assert!(gone(before), "{how}: the dead worker was reaped");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_ignores_cancellation_gets_its_worker_killed_and_the_caller_is_told() {
    let dir = PluginDir::with(&["fixture_crashy"]);
    let loader = worker_loader(IsolationPolicy {
        kill_after_cancel: Duration::from_millis(300),
        ..process_policy()
    });
    let registry = registry(&loader, &dir);
    let before = pid(&run(&registry, "pid", json!({})).await);
    let d = dispatcher(DispatchConfig {
        timeout: Duration::from_millis(300),
        cancel_grace: Duration::from_secs(10),
        ..DispatchConfig::default()
    });
    let started = Instant::now();
    let r = d
        .call(
            &registry,
            &CallContext::new(TurnIdentity::default()),
            call("1", "ignore_cancel", json!({"ms": 30_000})),
        )
        .await;
    assert!(r.is_error, "{r:?}");
    assert_eq!(r.error, Some(CallErrorKind::TimedOut), "{r:?}");
    assert!(
        r.output.contains("ignored cancellation") && r.output.contains("killed"),
        "{}",
        r.output
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the worker was killed before the grace period ran out"
    );
    let after = pid(&run(&registry, "pid", json!({})).await);
    assert_ne!(before, after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_crashes_quarantine_the_plugin_until_a_reload_lifts_it() {
    let dir = PluginDir::with(&["fixture_crashy"]);
    let catalog = worker_catalog(
        &dir,
        IsolationPolicy {
            max_crashes: 2,
            ..process_policy()
        },
    )
    .await;
    for _ in 0..3 {
        let r = run(&catalog.registry(), "crash", json!({"how": "exit"})).await;
        assert!(r.output.contains("exited with status 3"), "{}", r.output);
    }
    let refused = run(&catalog.registry(), "pid", json!({})).await;
    assert!(refused.is_error);
    assert!(
        refused.output.contains("quarantined") && refused.output.contains("toolhost reload"),
        "{}",
        refused.output
    );
    let worker = catalog.status().plugins[0]
        .worker
        .clone()
        .expect("worker status");
    assert_eq!(worker.state, "quarantined", "{worker:?}");
    assert!(worker.quarantined.is_some());
    assert_eq!(catalog.lift_quarantines(), vec!["crashy".to_owned()]);
    let r = run(&catalog.registry(), "pid", json!({})).await;
    assert!(!r.is_error, "{r:?}");
    assert_eq!(
        catalog.status().plugins[0]
            .worker
            .as_ref()
            .map(|w| w.state.as_str()),
        Some("running")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_under_load_fails_no_call_and_ends_the_old_worker() {
    let dir = PluginDir::with(&[]);
    let file = dir.path().join("libecho.so");
    std::fs::copy(echo_build("v1"), &file).expect("install v1");
    let catalog = worker_catalog(&dir, process_policy()).await;
    let old_pid = worker_pid(&catalog, "echo").expect("a worker runs");
    let stop = Arc::new(AtomicBool::new(false));
    let on_v2 = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (catalog, stop, on_v2, started) = (
            Arc::clone(&catalog),
            Arc::clone(&stop),
            Arc::clone(&on_v2),
            Arc::clone(&started),
        );
        tasks.push(tokio::spawn(async move {
            let d = dispatcher(DispatchConfig::default());
            let turn = CallContext::new(TurnIdentity::default());
            let mut seen: Vec<String> = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let r = d
                    .call(
                        &catalog.registry(),
                        &turn,
                        call("1", "build_version", json!({})),
                    )
                    .await;
                assert!(!r.is_error, "a call failed during the reload: {r:?}");
                if seen.is_empty() {
                    started.fetch_add(1, Ordering::SeqCst);
                }
                if r.output == "v2" && seen.last().is_none_or(|v| v != "v2") {
                    on_v2.fetch_add(1, Ordering::SeqCst);
                }
                seen.push(r.output);
            }
            seen
        }));
    }
    eventually_async(WAIT_BOUND, "every caller on v1", || {
        started.load(Ordering::SeqCst) >= 8
    })
    .await;
    let tmp = dir.path().join(".libecho.so.tmp");
    std::fs::copy(echo_build("v2"), &tmp).expect("copy v2");
    std::fs::rename(&tmp, &file).expect("install v2");
    let report = crate::support::rescan(&catalog).await;
    assert_eq!(report.plugins_updated, vec![file.clone()], "{report:?}");
    eventually_async(WAIT_BOUND, "every caller on v2", || {
        on_v2.load(Ordering::SeqCst) >= 8
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    for task in tasks {
        let seen = task.await.expect("no call failed");
        let first_v2 = seen.iter().position(|v| v == "v2").expect("saw v2");
        assert!(first_v2 > 0 && seen[..first_v2].iter().all(|v| v == "v1"));
        assert!(seen[first_v2..].iter().all(|v| v == "v2"), "{seen:?}");
    }
    // The old generation's worker ends once its calls are done: its memory is returned.
    eventually_async(WAIT_BOUND, "the old worker ending", || gone(old_pid)).await;
    let new_pid = worker_pid(&catalog, "echo");
    assert!(new_pid.is_some_and(|p| p != old_pid), "{new_pid:?}");
}

/// Writes a config file into `dir`.
fn config(dir: &Path, text: &str) -> PathBuf {
    let file = dir.join("config.toml");
    std::fs::write(&file, text).expect("write config");
    file
}

/// `toolhost call --isolate --yes` of a tool with `config`.
fn crashy_call(config: &Path, plugins: &Path, tool: &str, args: Value) -> (bool, String) {
    let out = toolhost_command()
        .arg("--config")
        .arg(config)
        .args(["call", "--isolate", "--yes", "--plugins"])
        .arg(plugins)
        .args([tool, &args.to_string()])
        .output()
        .expect("run toolhost call");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn the_sandbox_refuses_writes_and_tcp_the_config_does_not_allow() {
    if toolhost::sandbox_abi().is_none() {
        println!("skipped: this kernel has no Landlock");
        return;
    }
    let dir = PluginDir::with(&["fixture_crashy"]);
    let work = tempfile::tempdir().expect("temp dir");
    let allowed = work.path().join("allowed");
    let other = work.path().join("other");
    std::fs::create_dir_all(&allowed).expect("mkdir");
    std::fs::create_dir_all(&other).expect("mkdir");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let strict = config(
        work.path(),
        &format!(
            "[isolation]\nsandbox = \"required\"\nwrite_paths = [{:?}]\n",
            allowed.display().to_string()
        ),
    );
    let (ok, out) = crashy_call(
        &strict,
        &dir.path(),
        "write_file",
        json!({"path": allowed.join("a"), "text": "x"}),
    );
    assert!(ok, "writing a listed path: {out}");
    let (ok, out) = crashy_call(
        &strict,
        &dir.path(),
        "write_file",
        json!({"path": other.join("b"), "text": "x"}),
    );
    assert!(
        !ok && out.contains("ermission denied"),
        "writing elsewhere: {out}"
    );
    assert!(!other.join("b").exists());
    let (ok, out) = crashy_call(&strict, &dir.path(), "connect", json!({"port": port}));
    assert!(
        !ok && out.contains("could not connect"),
        "TCP from a read tool: {out}"
    );
    let (ok, out) = crashy_call(&strict, &dir.path(), "env", json!({"name": "HOME"}));
    assert!(ok && out.trim() == "(unset)", "a clean environment: {out}");

    let open = config(
        work.path(),
        "[isolation]\nsandbox = \"required\"\nallow_network = true\n",
    );
    let (ok, out) = crashy_call(&open, &dir.path(), "connect", json!({"port": port}));
    assert!(ok, "TCP where the config allows it: {out}");
    drop(listener);
}

#[test]
fn a_new_users_default_profile_keeps_its_state_from_a_sandboxed_worker() {
    if toolhost::sandbox_abi().is_none() {
        println!("skipped: this kernel has no Landlock");
        return;
    }
    let dir = PluginDir::with(&["toolhost_memory"]);
    let work = tempfile::tempdir().expect("temp dir");
    // No profiles folder yet, as on a fresh machine.
    let profiles = work.path().join("profiles");
    let cfg = config(
        work.path(),
        &format!(
            "profiles_dir = {:?}\n[isolation]\nsandbox = \"required\"\n",
            profiles.display().to_string()
        ),
    );
    let add = json!({"action": "add", "text": "likes green tea"});
    let (ok, out) = crashy_call(&cfg, &dir.path(), "memory", add);
    assert!(
        ok,
        "the memory plugin could not write its state folder: {out}"
    );
    let (ok, out) = crashy_call(&cfg, &dir.path(), "memory", json!({"action": "list"}));
    assert!(ok && out.contains("likes green tea"), "{out}");
    assert!(crate::support::profile_state("default").is_dir());
}

#[test]
fn a_panic_abort_plugin_is_refused_in_process_with_advice_and_runs_in_a_worker() {
    let dir = PluginDir::with(&[]);
    std::fs::copy(so("fixture_abort"), dir.path().join("libfixture_abort.so")).expect("install");
    let out = toolhost_command()
        .args(["list", "--plugins"])
        .arg(dir.path())
        .output()
        .expect("list");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("panic = \"abort\"") && err.contains("--isolate"),
        "{err}"
    );
    let out = toolhost_command()
        .args(["list", "--json", "--isolate", "--plugins"])
        .arg(dir.path())
        .output()
        .expect("list --isolate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout).expect("json");
    let tools = listed.as_array().expect("tools");
    assert!(!tools.is_empty(), "{listed}");
    assert!(tools.iter().all(|t| t["mode"] == "process"), "{listed}");
}

#[test]
fn check_isolate_loads_a_file_only_in_a_sandboxed_worker() {
    let file = so("fixture_crashy");
    let out = toolhost_command()
        .args(["check", "--isolate"])
        .arg(&file)
        .output()
        .expect("check --isolate");
    let text = String::from_utf8_lossy(&out.stdout);
    if toolhost::sandbox_abi().is_none() {
        assert!(
            !out.status.success(),
            "required sandbox without Landlock: {text}"
        );
        return;
    }
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("worker process") && text.contains("crashy"),
        "{text}"
    );
    assert!(text.contains("ignore_cancel"), "{text}");
}

#[test]
fn the_plugin_dispatch_and_agent_tests_pass_with_every_plugin_in_a_worker() {
    if std::env::var(MODE_VAR).is_ok() {
        return;
    }
    let out = Command::new(std::env::current_exe().expect("test binary"))
        .args(["plugins::", "dispatch::", "agent::", "--test-threads", "2"])
        .env(MODE_VAR, "process")
        .output()
        .expect("run the tests again");
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("test result: ok"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_listing_show_each_plugins_mode() {
    let dir = PluginDir::with(&["fixture_echo", "hello_tools"]);
    let catalog = worker_catalog(
        &dir,
        IsolationPolicy {
            default: toolhost::IsolationMode::InProcess,
            plugins: [("echo".to_owned(), toolhost::IsolationMode::Process)].into(),
            ..process_policy()
        },
    )
    .await;
    let status = catalog.status();
    let mode = |name: &str| {
        status
            .plugins
            .iter()
            .find(|p| p.name == name)
            .map(|p| (p.mode, p.worker.is_some()))
    };
    assert_eq!(mode("echo"), Some((toolhost::IsolationMode::Process, true)));
    assert_eq!(
        mode("hello"),
        Some((toolhost::IsolationMode::InProcess, false))
    );
    let listing = catalog.registry().listing();
    let of = |tool: &str| {
        listing
            .iter()
            .find(|t| t["name"] == tool)
            .map(|t| t["mode"].clone())
    };
    assert_eq!(of("echo"), Some(json!("process")));
    assert_eq!(of("greet"), Some(json!("in-process")));
}

/// A plugin built with panic = "abort" whose tool's constructor panics aborts its worker
/// while loading; the error gives the worker's last words (the panic message), as a crash
/// during a call does.
#[test]
fn a_worker_that_aborts_while_loading_gives_its_last_words() {
    let dir = PluginDir::with(&[]);
    std::fs::copy(
        so("fixture_abort_at_load"),
        dir.path().join("libfixture_abort_at_load.so"),
    )
    .expect("install");
    let out = toolhost_command()
        .args(["list", "--isolate", "--plugins"])
        .arg(dir.path())
        .output()
        .expect("list --isolate");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("while loading it (its last words: ")
            && err.contains("the index file /nowhere/notes.idx is missing"),
        "{err}"
    );
}
