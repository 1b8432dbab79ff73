//! Shared by the benchmarks: building fixture plugins in release mode into their own
//! target directory (so they never land next to the user's plugins).

#[allow(dead_code, reason = "not every benchmark talks MCP")]
pub(crate) mod peer;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds `packages` with `cargo build --release` (with `FIXTURE_ECHO_VERSION=version`)
/// into `target/bench-plugins`; returns its `release` directory.
pub(crate) fn build_release(packages: &[&str], version: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = root.join("target").join("bench-plugins");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    // The test fixtures are a workspace of their own (tests/fixtures/Cargo.toml).
    let (fixtures, others): (Vec<&str>, Vec<&str>) =
        packages.iter().partition(|p| p.starts_with("fixture-"));
    for (manifest, packages) in [
        ("tests/fixtures/Cargo.toml", fixtures),
        ("Cargo.toml", others),
    ] {
        if packages.is_empty() {
            continue;
        }
        let mut cmd = Command::new(&cargo);
        cmd.args(["build", "--release", "--quiet", "--manifest-path", manifest])
            .arg("--target-dir")
            .arg(&target)
            .env("FIXTURE_ECHO_VERSION", version)
            .current_dir(&root);
        for p in &packages {
            cmd.args(["-p", p]);
        }
        let status = cmd.status().expect("run cargo");
        assert!(
            status.success(),
            "building the benchmark plugins failed: {packages:?}"
        );
    }
    target.join("release")
}

/// The median of `v`.
#[allow(dead_code, reason = "not every benchmark takes medians")]
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The resident set size of process `pid`, bytes (0 if it is gone).
#[allow(dead_code, reason = "not every benchmark measures memory")]
pub(crate) fn rss_of(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/statm"))
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}
