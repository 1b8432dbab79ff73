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
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--release", "--quiet", "--target-dir"])
        .arg(&target)
        .env("FIXTURE_ECHO_VERSION", version)
        .current_dir(&root);
    for p in packages {
        cmd.args(["-p", p]);
    }
    let status = cmd.status().expect("run cargo");
    assert!(
        status.success(),
        "building the benchmark plugins failed: {packages:?}"
    );
    target.join("release")
}
