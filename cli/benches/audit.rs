//! The audit log's cost on the call path: MCP tools/call round trips over stdio (raw
//! JSON-RPC lines from one compiled client) to `toolhost serve --mcp stdio` serving `echo`
//! from a .so, with the audit log on and off, interleaved in rounds in the same run.
//! Target: under 5% added to the median.
//!
//! `cargo bench -p toolhost-cli --bench audit`. Printed figures only.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::peer::Peer;
use serde_json::json;

const WARMUP: usize = 500;
const CALLS: usize = 2000;
const ROUNDS: usize = 10;

fn serve(toolhost: &Path, dir: &Path, name: &str, audit: &str) -> Command {
    let home = dir.join(name);
    std::fs::create_dir_all(home.join("config/toolhost")).expect("config folder");
    std::fs::write(home.join("config/toolhost/config.toml"), audit).expect("config");
    let mut cmd = Command::new(toolhost);
    cmd.args(["serve", "--mcp", "stdio", "--plugins"])
        .arg(dir.join("plugins"))
        .arg("--control")
        .arg(home.join("control.sock"))
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .env("TOOLHOST_LOG", "warn");
    cmd
}

fn main() {
    let release = common::build_release(&["fixture-echo"], "v1");
    let toolhost = Path::new(env!("CARGO_BIN_EXE_toolhost"));
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("plugins")).expect("plugins folder");
    std::fs::copy(
        release.join("libfixture_echo.so"),
        dir.path().join("plugins/libfixture_echo.so"),
    )
    .expect("install the plugin");
    let log = dir.path().join("on/state/toolhost/audit.jsonl");
    let subjects = [
        ("audit log off", "[audit]\nenabled = false\n"),
        ("audit log on", "[audit]\nenabled = true\n"),
        (
            "audit log on, with arguments",
            "[audit]\nenabled = true\ninclude_arguments = true\n",
        ),
    ];
    let names = ["off", "on", "on-args"];
    let params = json!({"name": "echo", "arguments": {"text": "hello"}});
    let mut peers: Vec<Peer> = subjects
        .iter()
        .zip(names)
        .map(|((_, config), name)| {
            let mut peer = Peer::start(serve(toolhost, dir.path(), name, config));
            for _ in 0..WARMUP {
                peer.request("tools/call", params.clone());
            }
            peer
        })
        .collect();
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); peers.len()];
    for _ in 0..ROUNDS {
        for (peer, times) in peers.iter_mut().zip(times.iter_mut()) {
            for _ in 0..CALLS {
                let started = Instant::now();
                let result = peer.request("tools/call", params.clone());
                times.push(started.elapsed());
                assert_ne!(result["isError"], json!(true), "{result}");
            }
        }
    }
    let lines = std::fs::read_to_string(&log).map_or(0, |t| t.lines().count());
    println!(
        "MCP stdio tools/call round trip, echo from a .so, {ROUNDS} rounds of {CALLS} calls each, \
         interleaved (the audit log wrote {lines} lines)"
    );
    println!(
        "{:<34} {:>10} {:>10} {:>9}",
        "", "median us", "p99 us", "added"
    );
    let mut base = 0.0;
    for (i, ((name, _), times)) in subjects.iter().zip(times.iter_mut()).enumerate() {
        times.sort();
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let median = us(times[times.len() / 2]);
        let p99 = us(times[times.len() * 99 / 100]);
        if i == 0 {
            base = median;
        }
        println!(
            "{name:<34} {median:>10.1} {p99:>10.1} {:>8.1}%",
            (median / base - 1.0) * 100.0
        );
    }
}
