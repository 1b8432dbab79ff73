//! Hot reload: plugin files arriving, changing and leaving the way they really do, with
//! calls running, through the real catalog, watcher, loader and dispatcher. Waits are on
//! registry events or status, each bounded.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;
use tokio::sync::broadcast;
use toolhost::{
    CallContext, CallErrorKind, CatalogConfig, DispatchConfig, PluginCatalog, PluginWatcher,
    RegistryEvent, TurnIdentity, WatchConfig,
};

use crate::support::{PluginDir, call, dispatcher, echo_build, eventually_async, so};

const BOUND: Duration = Duration::from_secs(20);

struct Live {
    dir: PluginDir,
    catalog: Arc<PluginCatalog>,
    events: broadcast::Receiver<RegistryEvent>,
    _watcher: Option<PluginWatcher>,
}

impl Live {
    /// A catalog over a fresh plugin directory holding `files`, scanned once, watched if
    /// `watch`.
    async fn start(files: &[(&Path, &str)], watch: bool) -> Live {
        Live::start_settling(files, watch, Duration::from_millis(300)).await
    }

    /// As `start`, with the time a half-written file stays pending before it counts as
    /// broken.
    async fn start_settling(files: &[(&Path, &str)], watch: bool, settle: Duration) -> Live {
        let dir = PluginDir::with(&[]);
        for (from, name) in files {
            install_by_rename(from, &dir.path().join(name));
        }
        let catalog = Arc::new(
            PluginCatalog::new(CatalogConfig {
                dirs: vec![dir.path()],
                settle,
                ..CatalogConfig::default()
            })
            .expect("catalog"),
        );
        let events = catalog.subscribe();
        crate::support::rescan(&catalog).await;
        let watcher = watch.then(|| {
            PluginWatcher::start(Arc::clone(&catalog), WatchConfig::default()).expect("watch")
        });
        let mut events = events;
        // The first scan's event (sent before `rescan` returned), if it loaded anything.
        let _ = events.try_recv();
        Live {
            dir,
            catalog,
            events,
            _watcher: watcher,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    async fn next_event(&mut self) -> RegistryEvent {
        tokio::time::timeout(BOUND, self.events.recv())
            .await
            .expect("a registry event within the bound")
            .expect("event channel open")
    }

    async fn call(&self, tool: &str) -> toolhost::ToolResult {
        dispatcher(DispatchConfig::default())
            .call(
                &self.catalog.registry(),
                &CallContext::new(TurnIdentity::default()),
                call("1", tool, json!({})),
            )
            .await
    }

    /// Polls status until `done` holds (bounded).
    async fn wait_status(&self, what: &str, done: impl Fn(&toolhost::CatalogStatus) -> bool) {
        eventually_async(BOUND, what, || done(&self.catalog.status())).await;
    }
}

/// Copies `from` to a hidden temporary name next to `to`, then renames it into place.
fn install_by_rename(from: &Path, to: &Path) {
    let tmp = to.with_file_name(format!(
        ".{}.tmp",
        to.file_name().and_then(|n| n.to_str()).unwrap_or("plugin")
    ));
    std::fs::copy(from, &tmp).expect("copy");
    std::fs::rename(&tmp, to).expect("rename");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacing_a_plugin_under_8_calling_tasks_fails_no_call_and_versions_only_move_forward() {
    let v1 = echo_build("v1");
    let mut live = Live::start(&[(&v1, "libecho.so")], true).await;
    let live_catalog = Arc::clone(&live.catalog);
    let stop = Arc::new(AtomicBool::new(false));
    let saw_v2 = Arc::new(AtomicUsize::new(0));
    let saw_v1 = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (catalog, stop, saw_v2, saw_v1) = (
            Arc::clone(&live_catalog),
            Arc::clone(&stop),
            Arc::clone(&saw_v2),
            Arc::clone(&saw_v1),
        );
        tasks.push(tokio::spawn(async move {
            let d = dispatcher(DispatchConfig::default());
            let turn = CallContext::new(TurnIdentity::default());
            let mut seen: Vec<String> = Vec::new();
            let mut counted_v2 = false;
            while !stop.load(Ordering::SeqCst) {
                let r = d
                    .call(
                        &catalog.registry(),
                        &turn,
                        call("1", "build_version", json!({})),
                    )
                    .await;
                assert!(!r.is_error, "a call failed during the reload: {r:?}");
                if r.output == "v2" && !counted_v2 {
                    counted_v2 = true;
                    saw_v2.fetch_add(1, Ordering::SeqCst);
                }
                if seen.is_empty() {
                    saw_v1.fetch_add(1, Ordering::SeqCst);
                }
                seen.push(r.output);
                tokio::task::yield_now().await;
            }
            seen
        }));
    }
    // Let every task make a call on v1, start a slow call on v1, then replace the file.
    eventually_async(BOUND, "every task calling v1", || {
        saw_v1.load(Ordering::SeqCst) >= 8
    })
    .await;
    let slow = tokio::spawn({
        // The snapshot the call starts with is taken before the file is replaced.
        let registry = live_catalog.registry();
        async move {
            dispatcher(DispatchConfig::default())
                .call(
                    &registry,
                    &CallContext::new(TurnIdentity::default()),
                    call("slow", "slow_version", json!({"ms": 3000})),
                )
                .await
        }
    });
    install_by_rename(&echo_build("v2"), &live.path("libecho.so"));
    let event = live.next_event().await;
    // The same definitions from a new build.
    assert!(
        event.rebuilt.contains(&"build_version".to_owned()),
        "{event:?}"
    );
    assert!(
        !slow.is_finished(),
        "the slow call still runs after the swap"
    );
    eventually_async(BOUND, "every task reaching v2", || {
        saw_v2.load(Ordering::SeqCst) >= 8
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    for task in tasks {
        let seen = task
            .await
            .expect("task ran to the end without a failed call");
        let first_v2 = seen.iter().position(|v| v == "v2").expect("saw v2");
        assert!(first_v2 > 0, "saw v1 first");
        assert!(seen[..first_v2].iter().all(|v| v == "v1"));
        assert!(
            seen[first_v2..].iter().all(|v| v == "v2"),
            "went back to v1: {seen:?}"
        );
    }
    let slow = slow.await.expect("slow call");
    assert_eq!(
        slow.output, "v1",
        "a call that started on v1 finishes on v1: {slow:?}"
    );
    let status = live.catalog.status();
    assert_eq!(status.plugins[0].generation, 2);
    assert_eq!(status.plugins[0].old_generations, 1);
    assert_eq!(status.reloads, 1);
    assert_eq!(status.plugins[0].version, "v2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editors_temporary_files_are_ignored() {
    let mut live = Live::start(&[], true).await;
    std::fs::write(live.path(".libecho.so.swp"), b"vim swap").expect("swap");
    std::fs::write(live.path("libecho.so~"), b"backup").expect("backup");
    std::fs::write(live.path("4913"), b"").expect("vim probe");
    std::fs::write(live.path("notes.txt"), b"not a plugin").expect("text");
    install_by_rename(&echo_build("v1"), &live.path("libecho.so"));
    let event = live.next_event().await;
    assert_eq!(
        event.added,
        ["build_version", "echo", "note_write", "slow_version"]
    );
    let status = live.catalog.status();
    assert!(
        status.load_errors.is_empty() && status.pending.is_empty(),
        "{status:?}"
    );
    assert_eq!(status.plugins.len(), 1);
}

#[tokio::test]
async fn past_max_generations_status_recommends_a_restart() {
    let dir = PluginDir::with(&[]);
    install_by_rename(&echo_build("v1"), &dir.path().join("libecho.so"));
    let catalog = Arc::new(
        PluginCatalog::new(CatalogConfig {
            dirs: vec![dir.path()],
            max_generations: 1,
            ..CatalogConfig::default()
        })
        .expect("catalog"),
    );
    crate::support::rescan(&catalog).await;
    for version in ["v2", "v1"] {
        assert!(catalog.status().warning.is_none());
        install_by_rename(&echo_build(version), &dir.path().join("libecho.so"));
        crate::support::rescan(&catalog).await;
    }
    let status = catalog.status();
    assert_eq!(status.reloads, 2);
    // v1 again: its bytes were mapped already, and that mapping serves.
    assert_eq!(status.generations_mapped, 2);
    let warning = status.warning.expect("a warning past max_generations");
    assert!(warning.contains("restart toolhost"), "{warning}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_by_rename_cp_over_and_delete_are_picked_up() {
    let mut live = Live::start(&[], true).await;
    install_by_rename(&echo_build("v1"), &live.path("libecho.so"));
    let added = live.next_event().await;
    assert_eq!(
        added.added,
        ["build_version", "echo", "note_write", "slow_version"]
    );
    assert_eq!(live.call("build_version").await.output, "v1");

    // `cp` over the installed file (close-write on the same inode).
    std::fs::copy(echo_build("v2"), live.path("libecho.so")).expect("cp over");
    let changed = live.next_event().await;
    assert!(
        changed.rebuilt.contains(&"build_version".to_owned()),
        "{changed:?}"
    );
    assert_eq!(live.call("build_version").await.output, "v2");

    // `cargo build` replaces its output by removing it and creating a hard link.
    let build_dir = tempfile::tempdir().expect("temp dir");
    let built = build_dir.path().join("libfixture_echo.so");
    std::fs::copy(echo_build("v1"), &built).expect("build output");
    std::fs::remove_file(live.path("libecho.so")).expect("remove");
    std::fs::hard_link(&built, live.path("libecho.so")).expect("hard link");
    // One event, or a removal then the re-addition, depending on the debounce.
    let mut seen = live.next_event().await;
    if seen.rebuilt.is_empty() {
        assert_eq!(
            seen.removed,
            ["build_version", "echo", "note_write", "slow_version"],
            "{seen:?}"
        );
        seen = live.next_event().await;
        assert_eq!(
            seen.added,
            ["build_version", "echo", "note_write", "slow_version"],
            "{seen:?}"
        );
    }
    assert_eq!(live.call("build_version").await.output, "v1");

    std::fs::remove_file(live.path("libecho.so")).expect("delete");
    let removed = live.next_event().await;
    assert_eq!(
        removed.removed,
        ["build_version", "echo", "note_write", "slow_version"]
    );
    let gone = live.call("build_version").await;
    assert_eq!(gone.error, Some(CallErrorKind::ToolNotFound));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_written_file_is_loaded_only_once_complete() {
    // A settle time far longer than this test, so the half file is reliably pending.
    let mut live = Live::start_settling(&[], true, Duration::from_secs(60)).await;
    let full = std::fs::read(so("hello_tools")).expect("read");
    let target = live.path("libhello.so");
    std::fs::write(&target, &full[..full.len() / 2]).expect("write half");
    live.wait_status("the half file to be pending", |s| {
        s.pending.iter().any(|p| p.ends_with("libhello.so"))
    })
    .await;
    let status = live.catalog.status();
    assert!(
        status.plugins.is_empty() && status.load_errors.is_empty(),
        "{status:?}"
    );
    assert!(live.catalog.registry().get("greet").is_none());

    std::fs::write(&target, &full).expect("finish writing");
    let event = live.next_event().await;
    assert_eq!(event.added, ["countdown", "greet"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_replacement_keeps_the_old_generation_serving_and_status_shows_why() {
    let live = Live::start(&[(&echo_build("v1"), "libecho.so")], true).await;
    let good = std::fs::read(echo_build("v2")).expect("read");
    let tmp = live.path(".libecho.so.tmp");
    std::fs::write(&tmp, &good[..good.len() / 3]).expect("write");
    std::fs::rename(&tmp, live.path("libecho.so")).expect("rename");
    live.wait_status("the bad replacement's error", |s| {
        s.plugins.first().is_some_and(|p| p.last_error.is_some())
    })
    .await;
    let status = live.catalog.status();
    let plugin = &status.plugins[0];
    assert_eq!(plugin.generation, 1, "the old generation still serves");
    let error = plugin.last_error.as_deref().unwrap_or_default();
    assert!(error.contains("incomplete"), "{error}");
    assert_eq!(live.call("build_version").await.output, "v1");
}

#[tokio::test]
async fn reload_without_watching_reports_added_replaced_and_removed_plugins() {
    let live = Live::start(
        &[
            (&echo_build("v1"), "libecho.so"),
            (&so("hello_tools"), "libhello.so"),
        ],
        false,
    )
    .await;
    install_by_rename(&so("toolhost_utils"), &live.path("libutils.so"));
    install_by_rename(&echo_build("v2"), &live.path("libecho.so"));
    std::fs::remove_file(live.path("libhello.so")).expect("delete");
    assert!(
        live.catalog.registry().get("time_now").is_none(),
        "nothing happens until reload"
    );

    let report = crate::support::rescan(&live.catalog).await;
    assert_eq!(report.plugins_added, [live.path("libutils.so")]);
    assert_eq!(report.plugins_updated, [live.path("libecho.so")]);
    assert_eq!(report.plugins_removed, [live.path("libhello.so")]);
    assert!(report.tools.added.contains(&"time_now".to_owned()));
    // v2 describes build_version as v1 does: the same definition, a new build.
    assert!(
        report.tools.rebuilt.contains(&"build_version".to_owned()),
        "{:?}",
        report.tools
    );
    assert!(report.tools.changed.is_empty(), "{:?}", report.tools);
    assert_eq!(report.tools.removed, ["countdown", "greet"]);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(live.call("build_version").await.output, "v2");
}

#[tokio::test]
async fn an_unchanged_broken_file_is_not_loaded_again_on_every_rescan() {
    let live = Live::start(&[(&so("fixture_no_root"), "libnoroot.so")], false).await;
    let mapped = live.catalog.status().generations_mapped;
    for _ in 0..3 {
        let report = crate::support::rescan(&live.catalog).await;
        assert_eq!(
            report.errors.len(),
            1,
            "the error still stands: {:?}",
            report.errors
        );
    }
    let status = live.catalog.status();
    assert_eq!(mapped, 1, "the library was mapped once, by the first scan");
    assert_eq!(status.generations_mapped, mapped, "and never again");
    assert_eq!(status.load_errors.len(), 1);
}
