//! The output budget's price: a 10 MB result (the basic fixture's `big_output`) through
//! `toolhost serve --mcp stdio`, with the default budget (cut to 30,000 characters, the
//! full text kept in the profile's state folder) and with the budget off (`max_chars = 0`,
//! `max_lines = 0`: the whole text goes to the client), side by side: the median wall time
//! of a call and the server's peak RSS (VmHWM) after the calls.
//!
//! `cargo bench -p toolhost-cli --bench outputs`. Printed figures only.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use common::peer::Peer;
use serde_json::json;

const CALLS: usize = 5;
const BYTES: u64 = 10_000_000;

/// The server's peak resident set size, KiB (VmHWM).
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// Median milliseconds per call and peak RSS (KiB), and the text length the client got.
fn run(toolhost: &Path, plugins: &Path, output: &str) -> (f64, u64, usize) {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!("profiles_dir = \"profiles\"\n[output]\n{output}"),
    )
    .expect("config");
    let mut cmd = Command::new(toolhost);
    cmd.arg("--config")
        .arg(&config)
        .args(["serve", "--mcp", "stdio", "--no-watch", "--plugins"])
        .arg(plugins)
        .arg("--control")
        .arg(dir.path().join("control.sock"))
        .env("XDG_CONFIG_HOME", dir.path())
        .env("XDG_STATE_HOME", dir.path().join("state"))
        .env("TOOLHOST_LOG", "warn");
    let mut peer = Peer::start(cmd);
    let mut times = Vec::with_capacity(CALLS);
    let mut got = 0;
    for _ in 0..CALLS {
        let started = Instant::now();
        let answer = peer.request(
            "tools/call",
            json!({"name": "big_output", "arguments": {"bytes": BYTES}}),
        );
        times.push(started.elapsed().as_secs_f64() * 1e3);
        got = answer["content"][0]["text"].as_str().map_or(0, str::len);
    }
    (common::median(times), peak_rss_kib(peer.pid()), got)
}

fn main() {
    let release = common::build_release(&["fixture-basic"], "v1");
    let plugins = tempfile::tempdir().expect("temp dir");
    std::fs::copy(
        release.join("libfixture_basic.so"),
        plugins.path().join("libfixture_basic.so"),
    )
    .expect("install the plugin");
    // Cargo builds the package's binary, optimized, for its benchmarks.
    let toolhost = PathBuf::from(env!("CARGO_BIN_EXE_toolhost"));
    println!("a {BYTES}-byte result through MCP stdio, {CALLS} calls each (median):");
    println!(
        "{:<44} {:>10} {:>14} {:>14}",
        "", "ms/call", "peak RSS MiB", "text to client"
    );
    for (name, output) in [
        ("budget on (30,000 chars, 1,000 lines)", ""),
        (
            "budget off (max_chars = 0, max_lines = 0)",
            "max_chars = 0\nmax_lines = 0\n",
        ),
    ] {
        let (ms, rss, got) = run(&toolhost, plugins.path(), output);
        println!(
            "{name:<44} {ms:>10.1} {:>14.1} {got:>14}",
            rss as f64 / 1024.0
        );
    }
}
