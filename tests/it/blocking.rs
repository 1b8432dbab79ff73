//! A plugin that spins or blocks in its call never stalls the host: plugin futures are
//! polled on the host's plugin threads, not on the threads that serve the control socket,
//! MCP and the timers. Regression test for three spinning calls freezing a whole host
//! (status, other plugins' calls and the call timeouts all stopped).

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::json;

use crate::mcp::RawClient;
use crate::support::{PluginDir, WAIT_BOUND, eventually, toolhost_command, wait_exit};

/// Runs `cmd` and fails if it takes longer than `bound` (a host that stalled would never
/// answer at all); the bound is generous, the point is that the answer comes.
fn answered_within(mut cmd: Command, bound: Duration, what: &str) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run toolhost");
    eventually(bound, what, || child.try_wait().expect("wait"));
    child.wait_with_output().expect("output")
}

fn call_in_background(socket: &Path, tool: &str, args: serde_json::Value) -> Child {
    toolhost_command()
        .args(["call", tool, &args.to_string(), "--control"])
        .arg(socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start toolhost call")
}

#[test]
fn three_spinning_and_two_blocking_calls_leave_the_host_serving_and_are_reported_stuck() {
    let plugins = PluginDir::with(&["fixture_blocking", "fixture_basic"]);
    let work = tempfile::tempdir().expect("temp dir");
    let socket = work.path().join("control.sock");
    let mut serve = toolhost_command();
    serve
        .args([
            "serve",
            "--mcp",
            "stdio",
            "--no-watch",
            "--timeout",
            "1",
            "--plugins",
        ])
        .arg(plugins.path())
        .arg("--control")
        .arg(&socket);
    let mut mcp = RawClient::start(serve);

    // Three calls that spin and two that block, each for longer than its timeout plus
    // the grace period.
    let mut calls = Vec::new();
    for (i, tool) in ["spin", "spin", "spin", "block", "block"]
        .iter()
        .enumerate()
    {
        let started = work.path().join(format!("started-{i}"));
        let args = json!({"ms": 20_000, "started": started});
        calls.push((started, call_in_background(&socket, tool, args)));
    }
    for (started, _) in &calls {
        eventually(
            WAIT_BOUND,
            "every spinning and blocking call running",
            || started.exists(),
        );
    }

    // While they hold their threads: status, MCP and another plugin's calls answer.
    let bound = Duration::from_secs(10);
    let mut status = toolhost_command();
    status.args(["status", "--json", "--control"]).arg(&socket);
    let out = answered_within(status, bound, "status while plugins spin");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = mcp.request("tools/list", json!({}));
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"echo") && names.contains(&"spin"),
        "{listed}"
    );
    let mut echo = toolhost_command();
    echo.args(["call", "echo", r#"{"text": "still here"}"#, "--control"])
        .arg(&socket);
    let out = answered_within(echo, bound, "another plugin's call while plugins spin");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "still here");
    let called = mcp.request(
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "over mcp"}}),
    );
    assert_eq!(
        called["result"]["content"][0]["text"], "over mcp",
        "{called}"
    );

    // The spinning and blocking calls time out with an error, although their plugin code
    // never returned.
    for (_, mut child) in calls {
        let status = wait_exit(&mut child, "a spinning or blocking call");
        let mut stderr = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
        }
        assert!(!status.success(), "the call did not fail: {stderr}");
        assert!(stderr.contains("timed out"), "{stderr}");
    }

    // Status names them as stuck (they still hold their threads), with advice.
    let stuck = eventually(WAIT_BOUND, "status listing the stuck calls", || {
        let out = toolhost_command()
            .args(["status", "--json", "--control"])
            .arg(&socket)
            .output()
            .expect("status");
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let stuck = status["stuck_calls"].as_array()?.clone();
        (stuck.len() == 5).then_some(stuck)
    });
    let spinning = stuck.iter().filter(|c| c["tool"] == "spin").count();
    assert_eq!(spinning, 3, "{stuck:?}");
    assert!(
        stuck.iter().all(|c| c["plugin"] == "blocking"
            && c["advice"]
                .as_str()
                .is_some_and(|a| a.contains("Restart toolhost"))),
        "{stuck:?}"
    );
    let table = toolhost_command()
        .args(["status", "--control"])
        .arg(&socket)
        .output()
        .expect("status");
    assert!(
        String::from_utf8_lossy(&table.stdout).contains("STUCK CALL"),
        "{}",
        String::from_utf8_lossy(&table.stdout)
    );
    // Ending the host ends the threads that still spin.
    drop(mcp);
}
