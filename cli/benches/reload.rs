//! Benchmark: hot reload. From the moment a new plugin file is in place (renamed into
//! the watched directory) to the first call served by the new generation, over 50
//! reloads, with calls running the whole time (failed calls are counted); the RSS each
//! reload keeps; and, as a baseline in the same run, the rescan alone (`toolhost reload`
//! without watching). Then 100 re-adds of one file (removed, rescanned, put back with the
//! same bytes, rescanned): the generations mapped and the RSS, beside 100 re-adds of
//! different bytes as the baseline. Every reload in the first part installs bytes of its
//! own (the build with a distinct trailer), so none of them reuses a mapping. Prints
//! figures; asserts nothing.
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

/// Installs `from` as `libecho.so` by rename, with `trailer` appended (bytes after the
/// ELF image, which the loader ignores): a distinct trailer makes distinct file contents.
fn install(from: &Path, dir: &Path, trailer: u64) {
    use std::io::Write as _;
    let tmp = dir.join(".libecho.so.tmp");
    std::fs::copy(from, &tmp).expect("copy");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&tmp)
        .expect("open");
    f.write_all(&trailer.to_le_bytes()).expect("trailer");
    drop(f);
    std::fs::rename(&tmp, dir.join("libecho.so")).expect("rename");
}

/// Removes the file and rescans, then puts `from` back with `trailer` and rescans:
/// `rounds` times. Returns (generations mapped before, after, RSS KiB before, after).
fn re_adds(
    catalog: &PluginCatalog,
    dir: &Path,
    from: &Path,
    rounds: u64,
    trailer: impl Fn(u64) -> u64,
) -> (u64, u64, u64, u64) {
    let (mapped_before, rss_before) = (catalog.status().generations_mapped, rss_bytes());
    for i in 0..rounds {
        std::fs::remove_file(dir.join("libecho.so")).expect("remove");
        assert_eq!(catalog.rescan().plugins_removed.len(), 1);
        install(from, dir, trailer(i));
        assert_eq!(catalog.rescan().plugins_added.len(), 1);
    }
    (
        mapped_before,
        catalog.status().generations_mapped,
        rss_before / 1024,
        rss_bytes() / 1024,
    )
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
        install(&builds[0], dir.path(), 0);
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
            install(&builds[i % 2], dir.path(), i as u64);
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
            install(&builds[i % 2], dir.path(), 1_000 + i as u64);
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
        println!(
            "  (a file renamed into the directory loads at once; the 50 ms debounce is for \
             other changes)"
        );
        println!("  calls made during the reloads: {calls}, failed: {failed}");
        println!(
            "  RSS growth: {:.0} KiB per reload ({} KiB -> {} KiB)",
            (rss_after.saturating_sub(rss_before)) as f64 / 1024.0 / RELOADS as f64,
            rss_before / 1024,
            rss_after / 1024
        );
        println!("baseline, rescan alone (`toolhost reload`, no watcher), 20 reloads:");
        println!("  median {:.2} ms", median(rescans));

        // Re-adds: the same bytes each time (one mapping serves them all), then the
        // baseline, different bytes each time (each maps a library of its own).
        let same = re_adds(&catalog, dir.path(), &builds[0], 100, |_| 7);
        let different = re_adds(&catalog, dir.path(), &builds[0], 100, |i| 10_000 + i);
        for (what, (m0, m1, r0, r1)) in [
            ("the same bytes", same),
            ("baseline, different bytes", different),
        ] {
            println!(
                "100 re-adds (remove, rescan, put back, rescan) of {what}: generations mapped \
                 {m0} -> {m1} (+{}), RSS {r0} KiB -> {r1} KiB ({:+} KiB)",
                m1 - m0,
                r1 as i64 - r0 as i64
            );
        }
    });
}
