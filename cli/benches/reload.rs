//! Benchmark: hot reload. From the moment a new plugin file is in place (renamed into
//! the watched directory) to the first call served by the new generation, over 50
//! reloads, with calls running the whole time (failed calls are counted); the RSS each
//! reload keeps; and, as a baseline in the same run, the rescan alone (`toolhost reload`
//! without watching). Prints figures; asserts nothing.
//!
//! Run: `cargo bench -p toolhost-cli --bench reload`

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use toolhost::{
    CallContext, CatalogConfig, DispatchConfig, Plan, PluginCatalog, PluginWatcher, ReadOnlyPolicy,
    ToolCall, TurnIdentity, WatchConfig,
};

const RELOADS: usize = 50;

/// Builds the echo fixture in release mode answering `version`; returns a kept copy.
fn build_echo(version: &str) -> PathBuf {
    let release = common::build_release(&["fixture-echo"], version);
    let kept = release.join(format!("libfixture_echo-{version}.so"));
    std::fs::copy(release.join("libfixture_echo.so"), &kept).expect("keep");
    kept
}

fn install(from: &Path, dir: &Path) {
    let tmp = dir.join(".libecho.so.tmp");
    std::fs::copy(from, &tmp).expect("copy");
    std::fs::rename(&tmp, dir.join("libecho.so")).expect("rename");
}

fn rss_bytes() -> u64 {
    common::rss_of(std::process::id())
}

use common::median;

fn main() {
    let builds = [build_echo("v1"), build_echo("v2")];
    let size = std::fs::metadata(&builds[0]).map(|m| m.len()).unwrap_or(0);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let dir = tempfile::tempdir().expect("temp dir");
        install(&builds[0], dir.path());
        let catalog = Arc::new(
            PluginCatalog::new(CatalogConfig {
                dirs: vec![dir.path().to_path_buf()],
                max_generations: 1_000,
                ..CatalogConfig::default()
            })
            .expect("catalog"),
        );
        catalog.rescan();
        let _watcher =
            PluginWatcher::start(Arc::clone(&catalog), WatchConfig::default()).expect("watch");
        let d = Plan::new(DispatchConfig::default(), Arc::new(ReadOnlyPolicy));
        let turn = CallContext::new(TurnIdentity::default());
        let call = ToolCall {
            id: "1".to_owned(),
            name: "build_version".to_owned(),
            arguments: json!({}).into(),
        };
        let rss_before = rss_bytes();
        let (mut latencies, mut calls, mut failed) = (Vec::new(), 0u64, 0u64);
        for i in 1..=RELOADS {
            let want = if i % 2 == 1 { "v2" } else { "v1" };
            install(&builds[i % 2], dir.path());
            let placed = Instant::now();
            loop {
                let r = d.call(&catalog.registry(), &turn, call.clone()).await;
                calls += 1;
                if r.is_error {
                    failed += 1;
                }
                if r.output == want {
                    latencies.push(placed.elapsed().as_secs_f64() * 1e3);
                    break;
                }
                assert!(
                    placed.elapsed() < Duration::from_secs(30),
                    "reload {i} never served"
                );
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
        }
        let rss_after = rss_bytes();
        drop(_watcher);

        // Baseline: the rescan alone, as `toolhost reload` runs it.
        let mut rescans = Vec::new();
        for i in 1..=20 {
            install(&builds[i % 2], dir.path());
            let start = Instant::now();
            let report = catalog.rescan();
            rescans.push(start.elapsed().as_secs_f64() * 1e3);
            assert_eq!(report.plugins_updated.len(), 1);
        }

        let max = latencies.iter().copied().fold(0.0, f64::max);
        println!(
            "hot reload of a {} KiB plugin, {RELOADS} reloads by rename into a watched directory:",
            size / 1024
        );
        println!(
            "  file in place -> first call on the new generation: median {:.1} ms, max {max:.1} ms",
            median(latencies)
        );
        println!("  (50 ms of that is the debounce: the directory must be quiet that long)");
        println!("  calls made during the reloads: {calls}, failed: {failed}");
        println!(
            "  RSS growth: {:.0} KiB per reload ({} KiB -> {} KiB)",
            (rss_after.saturating_sub(rss_before)) as f64 / 1024.0 / RELOADS as f64,
            rss_before / 1024,
            rss_after / 1024
        );
        println!("baseline, rescan alone (`toolhost reload`, no watcher), 20 reloads:");
        println!("  median {:.2} ms", median(rescans));
    });
}
