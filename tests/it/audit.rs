//! The audit log: one line per call with every field, from each frontend (`toolhost
//! call`, the control socket, MCP over stdio, the agent) and for each decision; arguments
//! only when asked for; a stalled writer makes calls wait instead of dropping lines; the
//! chain of hashes found broken at the line that was edited or removed, across
//! rotations; each way of tampering with the log (its end cut, its start cut, a rotated
//! file removed, its last line edited, its head removed, lines added past its head) named
//! by `toolhost audit verify`, and a writer that finds such a log recording it rather than
//! chaining to it; checkpoints sent to syslog and checked with `verify --expect`; the
//! file private to its user.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use toolhost::audit::{AuditLog, AuditSettings, canonical_json};
use toolhost::{
    ApprovalAnswer, ApprovalFiles, ApprovalRequest, Approver, CallDoor, CallSettings, Caller,
    Frontend, OutputSettings, OutputStore, ProfileScope, ToolCall,
};

use crate::support::{
    OtherUser, PluginDir, load, serve_command, toolhost_command, wait_exit, wait_for_socket,
    wait_until,
};

const ZEROS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The log's lines, parsed.
fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect()
}

/// A config folder whose config.toml is `text`; returns (dir, config file).
fn config(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("config.toml");
    std::fs::write(&file, text).expect("config");
    (dir, file)
}

/// The keys every line has (`arguments` only with `include_arguments`).
const FIELDS: [&str; 16] = [
    "seq",
    "time",
    "profile",
    "frontend",
    "caller",
    "traceparent",
    "tool",
    "plugin",
    "risk",
    "decision",
    "outcome",
    "duration_ms",
    "output_bytes",
    "output_id",
    "arguments_sha256",
    "prev",
];

fn assert_fields(line: &Value) {
    for key in FIELDS {
        assert!(line.get(key).is_some(), "no {key} in {line}");
    }
    assert!(
        line["time"]
            .as_str()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .is_some(),
        "time is RFC 3339: {line}"
    );
}

/// The echo call's line, checked field by field.
fn assert_echo_line(line: &Value, plugin_file: &Path, frontend: &str) {
    assert_fields(line);
    assert_eq!(line["frontend"], frontend, "{line}");
    assert_eq!(line["tool"], "echo");
    assert_eq!(line["plugin"]["name"], "basic", "{line}");
    assert_eq!(line["plugin"]["version"], "1.0.0");
    assert!(
        line["plugin"]["version"]
            .as_str()
            .is_some_and(|v| !v.is_empty())
    );
    assert_eq!(
        line["plugin"]["sha256"],
        sha256_hex(&std::fs::read(plugin_file).expect("plugin")),
    );
    assert_eq!(line["risk"], "read");
    assert_eq!(line["decision"], json!({"kind": "ran_without_asking"}));
    assert_eq!(line["outcome"], "ok");
    assert_eq!(line["output_bytes"], 2, "{line}");
    assert_eq!(line["output_id"], Value::Null);
    assert_eq!(
        line["arguments_sha256"],
        sha256_hex(canonical_json(&json!({"text": "hi"})).as_bytes())
    );
    assert!(
        line.get("arguments").is_none(),
        "arguments only when asked for: {line}"
    );
}

#[test]
fn toolhost_call_writes_one_line_per_call_with_every_field() {
    let plugins = PluginDir::with(&["fixture_basic"]);
    let state = tempfile::tempdir().expect("state");
    let run = |args: &[&str]| {
        toolhost_command()
            .env("XDG_STATE_HOME", state.path())
            .args(args)
            .arg("--plugins")
            .arg(plugins.path())
            .output()
            .expect("run toolhost")
    };
    let out = run(&["call", "echo", r#"{"text": "hi"}"#]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = state.path().join("toolhost/audit.jsonl");
    let first = lines(&log);
    assert_eq!(first.len(), 1, "{first:?}");
    assert_echo_line(
        &first[0],
        &plugins.path().join("libfixture_basic.so"),
        "cli",
    );
    assert_eq!(first[0]["prev"], ZEROS, "the first line of a log");
    assert_eq!(first[0]["seq"], 1, "the first line of a log");
    assert_eq!(first[0]["profile"], "default");
    assert_eq!(first[0]["caller"]["uid"], json!(my_uid()));
    // A write tool without a terminal: refused, and recorded as such.
    let out = run(&["call", "risky_write", r#"{"marker": "/nonexistent/x"}"#]);
    assert!(!out.status.success());
    let both = lines(&log);
    assert_eq!(both.len(), 2);
    assert_eq!(both[1]["decision"]["kind"], "refused", "{}", both[1]);
    assert_eq!(both[1]["outcome"], "not_approved");
    let text = std::fs::read_to_string(&log).expect("log");
    let first_line = text.lines().next().expect("a line");
    assert_eq!(both[1]["prev"], sha256_hex(first_line.as_bytes()));
    assert_eq!(both[1]["seq"], 2);
    // Arguments only with include_arguments.
    let (_cfg, file) = config("[audit]\ninclude_arguments = true\n");
    let out = toolhost_command()
        .env("XDG_STATE_HOME", state.path())
        .arg("--config")
        .arg(&file)
        .args(["call", "echo", r#"{"text": "hi"}"#, "--plugins"])
        .arg(plugins.path())
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all = lines(&log);
    assert_eq!(all.len(), 3);
    assert_eq!(all[2]["arguments"], json!({"text": "hi"}));
    // Switched off: nothing more.
    let (_cfg, off) = config("[audit]\nenabled = false\n");
    let out = toolhost_command()
        .env("XDG_STATE_HOME", state.path())
        .arg("--config")
        .arg(&off)
        .args(["call", "echo", r#"{"text": "hi"}"#, "--plugins"])
        .arg(plugins.path())
        .output()
        .expect("run");
    assert!(out.status.success());
    assert_eq!(lines(&log).len(), 3);
}

/// With `state_dir` set and no `[audit] file`, `toolhost audit` reads the log the host
/// wrote (in that state folder), not one in XDG's.
#[test]
fn the_audit_command_reads_the_log_the_host_writes_under_a_configured_state_dir() {
    let plugins = PluginDir::with(&["fixture_basic"]);
    let xdg = tempfile::tempdir().expect("xdg state");
    let custom = tempfile::tempdir().expect("state_dir");
    let (_cfg, file) = config(&format!(
        "state_dir = {:?}\n",
        custom.path().display().to_string()
    ));
    let run = |args: &[&str]| {
        toolhost_command()
            .env("XDG_STATE_HOME", xdg.path())
            .arg("--config")
            .arg(&file)
            .args(args)
            .output()
            .expect("run toolhost")
    };
    let out = toolhost_command()
        .env("XDG_STATE_HOME", xdg.path())
        .arg("--config")
        .arg(&file)
        .args(["call", "echo", r#"{"text": "hi"}"#, "--plugins"])
        .arg(plugins.path())
        .output()
        .expect("run toolhost");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = custom.path().join("audit.jsonl");
    assert_eq!(lines(&log).len(), 1, "the host writes under state_dir");
    assert!(!xdg.path().join("toolhost/audit.jsonl").exists());
    let listed = run(&["audit", "--json"]);
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let text = String::from_utf8_lossy(&listed.stdout);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(text.contains("\"tool\":\"echo\""), "{text}");
    // As the help says: the line as the log holds it, `prev` included.
    let printed: serde_json::Value = serde_json::from_str(text.trim()).expect("a JSON line");
    let logged = &lines(&log)[0];
    assert_eq!(printed["prev"], logged["prev"], "{text}");
    assert_eq!(printed["prev"], ZEROS, "{text}");
    let verified = run(&["audit", "verify"]);
    let said = String::from_utf8_lossy(&verified.stdout);
    assert!(verified.status.success(), "{said}");
    assert!(said.starts_with("ok: 1 lines"), "{said}");
}

fn my_uid() -> u32 {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .expect("/proc/self")
}

#[test]
fn control_and_mcp_stdio_calls_are_recorded_with_their_callers() {
    let plugins = PluginDir::with(&["fixture_basic"]);
    let work = tempfile::tempdir().expect("work");
    let log = work.path().join("audit/log.jsonl");
    let (_cfg, file) = config(&format!(
        "[audit]\nfile = {:?}\n",
        log.display().to_string()
    ));
    let socket = work.path().join("control.sock");
    let mut host = serve_command(&plugins.path(), &socket)
        .arg("--config")
        .arg(&file)
        .stderr(Stdio::null())
        .spawn()
        .expect("serve");
    wait_for_socket(&socket);
    let out = toolhost_command()
        .arg("--config")
        .arg(&file)
        .args(["call", "echo", r#"{"text": "hi"}"#, "--control"])
        .arg(&socket)
        .stdin(Stdio::null())
        .output()
        .expect("call --control");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("the control call's line", || lines(&log).len() == 1);
    let line = &lines(&log)[0];
    assert_echo_line(line, &plugins.path().join("libfixture_basic.so"), "control");
    assert_eq!(line["caller"]["session"], "control");
    assert_eq!(line["caller"]["uid"], json!(my_uid()));
    let _ = Command::new("kill").arg(host.id().to_string()).status();
    wait_exit(&mut host, "the host");

    // MCP over stdio, with a trace context in the call's _meta; an unknown tool too.
    let mut mcp = toolhost_command()
        .arg("--config")
        .arg(&file)
        .args(["serve", "--mcp", "stdio", "--no-watch", "--plugins"])
        .arg(plugins.path())
        .arg("--control")
        .arg(work.path().join("mcp.sock"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve --mcp stdio");
    let mut stdin = mcp.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(mcp.stdout.take().expect("stdout"));
    let mut send = |v: Value| {
        let mut line = serde_json::to_vec(&v).expect("json");
        line.push(b'\n');
        stdin.write_all(&line).expect("write");
    };
    let mut read_id = |id: u64| loop {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).expect("read") > 0,
            "server closed"
        );
        let v: Value = serde_json::from_str(&line).expect("json");
        if v["id"] == json!(id) {
            return v;
        }
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "audit-client", "version": "7.1"}}}),
    );
    read_id(1);
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "echo", "arguments": {"text": "hi"}, "_meta": {"traceparent": trace}}}),
    );
    assert_eq!(read_id(2)["result"]["content"][0]["text"], "hi");
    send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "no_such_tool", "arguments": {}}}),
    );
    assert!(read_id(3).get("error").is_some());
    drop(stdin);
    wait_exit(&mut mcp, "the MCP host");
    let all = lines(&log);
    assert_eq!(all.len(), 3, "{all:?}");
    assert_echo_line(&all[1], &plugins.path().join("libfixture_basic.so"), "mcp");
    assert_eq!(
        all[1]["caller"]["client"],
        json!({"name": "audit-client", "version": "7.1"})
    );
    assert_eq!(all[1]["traceparent"], trace);
    assert_eq!(all[2]["tool"], "no_such_tool");
    assert_eq!(all[2]["decision"]["kind"], "not_found");
    assert_eq!(all[2]["plugin"], Value::Null);
    // One chain across the two hosts that wrote it.
    let out = toolhost_command()
        .args(["audit", "verify", "--file"])
        .arg(&log)
        .output()
        .expect("verify");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Answers every question with `answer`, counting them.
struct Scripted {
    answer: ApprovalAnswer,
    asked: AtomicUsize,
}

#[async_trait::async_trait]
impl Approver for Scripted {
    async fn ask(&self, _request: &ApprovalRequest) -> ApprovalAnswer {
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.answer.clone()
    }
    fn who(&self) -> String {
        "script".to_owned()
    }
}

fn approver(answer: ApprovalAnswer) -> Arc<Scripted> {
    Arc::new(Scripted {
        answer,
        asked: AtomicUsize::new(0),
    })
}

/// A door over the basic fixture as profile `p` (state in `state`), observed by an audit
/// log at `log`.
fn audited_door(
    plugins: &PluginDir,
    state: &Path,
    settings: &AuditSettings,
) -> (CallDoor, Arc<AuditLog>) {
    let (_report, registry, _) = load(plugins);
    let store = Arc::new(OutputStore::for_profile(
        &toolhost::ProfileDirs::of_state(state),
        &OutputSettings::default(),
    ));
    let output = OutputSettings {
        budget: toolhost::Budget {
            max_chars: 1000,
            max_lines: 0,
        },
        ..OutputSettings::default()
    };
    let scope = ProfileScope::new("p", Arc::new(registry), None).with_outputs(store, output);
    let audit = AuditLog::open(settings).expect("audit log");
    let door = CallDoor::new(
        &CallSettings::default(),
        Arc::new(toolhost::FixedProfile(scope)),
        approver(ApprovalAnswer::Decline("nobody".into())),
    )
    .with_lasting_approvals(Arc::new(ApprovalFiles::new([(
        "p".to_owned(),
        toolhost::ProfileDirs::of_state(state),
    )])))
    .with_observer(Arc::clone(&audit) as Arc<dyn toolhost::CallObserver>);
    (door, audit)
}

fn settings(log: &Path) -> AuditSettings {
    AuditSettings {
        file: log.to_path_buf(),
        ..AuditSettings::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_decision_is_recorded_as_the_policy_made_it() {
    let plugins = PluginDir::with(&["fixture_basic"]);
    let work = tempfile::tempdir().expect("work");
    let log = work.path().join("audit.jsonl");
    let state = work.path().join("p/state");
    let (door, audit) = audited_door(&plugins, &state, &settings(&log));
    let (_m, marker) = crate::support::marker();
    let write = || ToolCall::new("1", "risky_write", json!({"marker": marker}));
    let ask = |answer: ApprovalAnswer| {
        let mut request = door.request(Caller::new(Frontend::Library));
        request.session = "s1".to_owned();
        request.approver = Some(approver(answer) as Arc<dyn Approver>);
        request
    };
    let once = ask(ApprovalAnswer::Approve);
    let session = ask(ApprovalAnswer::ApproveForSession);
    let mut always = ask(ApprovalAnswer::ApproveAlways);
    always.session = "s4".to_owned();
    let refuse = ask(ApprovalAnswer::Decline("no".into()));
    let plain = ask(ApprovalAnswer::Decline("no".into()));
    let mut results = Vec::new();
    results.push(
        door.call(&plain, ToolCall::new("1", "echo", json!({"text": "hi"})))
            .await,
    );
    results.push(door.call(&once, write()).await);
    results.push(door.call(&session, write()).await);
    // Remembered for the session: the next call is not asked.
    results.push(door.call(&refuse, write()).await);
    results.push(door.call(&always, write()).await);
    // Remembered always: another session is not asked either.
    let mut other = ask(ApprovalAnswer::Decline("no".into()));
    other.session = "s2".to_owned();
    results.push(door.call(&other, write()).await);
    results.push(
        door.call(
            &refuse,
            ToolCall::new("1", "risky_deny", json!({"marker": marker})),
        )
        .await,
    );
    results.push(
        door.call(&plain, ToolCall::new("1", "needs_program", json!({})))
            .await,
    );
    results.push(
        door.call(&plain, ToolCall::new("1", "echo", json!({"text": 5})))
            .await,
    );
    results.push(
        door.call(&plain, ToolCall::new("1", "no_such_tool", json!({})))
            .await,
    );
    let mut third = ask(ApprovalAnswer::Decline("not today".into()));
    third.session = "s3".to_owned();
    toolhost::ApprovalFile::for_profile(&toolhost::ProfileDirs::of_state(&state))
        .revoke(None)
        .expect("revoke");
    results.push(door.call(&third, write()).await);
    results.push(
        door.call(
            &plain,
            ToolCall::new("1", "big_output", json!({"bytes": 5000})),
        )
        .await,
    );
    let mut unknown_profile = ask(ApprovalAnswer::Approve);
    unknown_profile.profile = Some("nobody".to_owned());
    results.push(
        door.call(
            &unknown_profile,
            ToolCall::new("1", "echo", json!({"text": "hi"})),
        )
        .await,
    );
    drop(door);
    drop(audit);
    let all = lines(&log);
    assert_eq!(all.len(), results.len(), "{all:#?}");
    let decisions: Vec<Value> = all.iter().map(|l| l["decision"].clone()).collect();
    let approved = |how: &str, by: &str| json!({"kind": "approved", "how": how, "by": by});
    assert_eq!(
        decisions,
        vec![
            json!({"kind": "ran_without_asking"}),
            approved("once", "script"),
            approved("session", "script"),
            approved("session", "remembered"),
            approved("always", "script"),
            approved("always", "remembered"),
            json!({"kind": "denied"}),
            json!({"kind": "unavailable"}),
            json!({"kind": "invalid_arguments"}),
            json!({"kind": "not_found"}),
            json!({"kind": "refused", "by": "script"}),
            json!({"kind": "ran_without_asking"}),
            json!({"kind": "not_found"}),
        ]
    );
    let outcomes: Vec<&str> = all
        .iter()
        .map(|l| l["outcome"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        outcomes,
        [
            "ok",
            "ok",
            "ok",
            "ok",
            "ok",
            "ok",
            "denied",
            "unavailable",
            "schema_violation",
            "tool_not_found",
            "not_approved",
            "ok",
            "tool_not_found"
        ]
    );
    for line in &all {
        assert_fields(line);
    }
    assert_eq!(all[1]["risk"], "write");
    // The cut output's line names the kept output, and its size is what the caller got.
    let cut = &all[11];
    let kept = results[11].details["toolhost/full_output"]["id"].clone();
    assert_eq!(cut["output_id"], kept, "{cut}");
    assert_eq!(cut["output_bytes"], json!(results[11].output.len()));
    assert_eq!(all[12]["profile"], "nobody");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_writer_makes_calls_wait_and_loses_no_line() {
    let plugins = PluginDir::with(&["fixture_basic"]);
    let work = tempfile::tempdir().expect("work");
    let log = work.path().join("audit.jsonl");
    let (door, audit) = audited_door(
        &plugins,
        &work.path().join("p/state"),
        &AuditSettings {
            queue: 1,
            ..settings(&log)
        },
    );
    // Another writer holds the log's lock (as a second host appending would).
    let holder = std::fs::File::open(&log).expect("the log exists once opened");
    holder.lock().expect("lock");
    let finished = Arc::new(AtomicUsize::new(0));
    let mut calls = Vec::new();
    for i in 0..4 {
        let door = door.clone();
        let done = Arc::clone(&finished);
        calls.push(tokio::spawn(async move {
            let request = door.request(Caller::new(Frontend::Library));
            let r = door
                .call(
                    &request,
                    ToolCall::new(i.to_string(), "echo", json!({"text": "hi"})),
                )
                .await;
            done.fetch_add(1, Ordering::SeqCst);
            r
        }));
        // One at a time: the writer takes the first line, the queue the second, so at
        // least two finish.
        let expected = (i + 1).min(2);
        crate::support::eventually_async(Duration::from_secs(20), "calls finishing", || {
            finished.load(Ordering::SeqCst) >= expected
        })
        .await;
    }
    // Two calls are done; the writer holds one or two lines (it gathers what is queued
    // when it takes a line, and the second call's line may arrive in time) and the queue
    // one more, so one or two calls wait for room. They stay waiting (checked for a
    // bounded while) as long as the writer cannot write.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let done = finished.load(Ordering::SeqCst);
    assert!(
        (2..=3).contains(&done),
        "calls waited for the writer: {done} of 4 finished while it could not write"
    );
    assert!(
        lines(&log).is_empty(),
        "nothing written while the lock is held"
    );
    holder.unlock().expect("unlock");
    for c in calls {
        assert!(!c.await.expect("call").is_error);
    }
    drop(door);
    drop(audit);
    assert_eq!(lines(&log).len(), 4, "every call has its line");
}

fn verify(log: &Path) -> (bool, String) {
    let out = toolhost_command()
        .args(["audit", "verify", "--file"])
        .arg(log)
        .output()
        .expect("verify");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_passes_then_names_the_line_edited_or_removed_across_rotations() {
    let plugins = PluginDir::with(&["fixture_basic"]);
    let work = tempfile::tempdir().expect("work");
    let log = work.path().join("audit.jsonl");
    let (door, audit) = audited_door(
        &plugins,
        &work.path().join("p/state"),
        &AuditSettings {
            max_bytes: 3000,
            keep: 10,
            ..settings(&log)
        },
    );
    let request = door.request(Caller::new(Frontend::Library));
    for i in 0..20 {
        door.call(
            &request,
            ToolCall::new(i.to_string(), "echo", json!({"text": "hi"})),
        )
        .await;
    }
    drop(door);
    drop(audit);
    let rotated = PathBuf::from(format!("{}.1", log.display()));
    let older_file = PathBuf::from(format!("{}.2", log.display()));
    assert!(older_file.exists(), "the log was rotated more than once");
    let (ok, said) = verify(&log);
    assert!(ok, "{said}");
    assert!(said.contains("20 lines"), "{said}");
    // A rotated file's first line chains to the older file's last.
    let read_lines = |p: &Path| -> Vec<String> {
        std::fs::read_to_string(p)
            .expect("log")
            .lines()
            .map(str::to_owned)
            .collect()
    };
    let full = read_lines(&rotated);
    let older = read_lines(&older_file);
    let first: Value = serde_json::from_str(&full[0]).expect("json");
    assert_eq!(
        first["prev"],
        sha256_hex(older.last().expect("a line").as_bytes())
    );
    assert!(full.len() >= 3, "{full:?}");
    let write = |p: &Path, lines: &[String]| {
        std::fs::write(p, lines.join("\n") + "\n").expect("write");
    };

    // An edited line: the chain breaks at the line after it, naming both.
    let mut edited = full.clone();
    edited[1] = edited[1].replace("\"echo\"", "\"ech0\"");
    write(&rotated, &edited);
    let (ok, said) = verify(&log);
    assert!(!ok, "{said}");
    assert!(
        said.contains(&format!("{}, line 3", rotated.display())) && said.contains("of line 2"),
        "{said}"
    );
    // A removed line.
    let mut removed = full.clone();
    removed.remove(1);
    write(&rotated, &removed);
    let (ok, said) = verify(&log);
    assert!(!ok, "{said}");
    assert!(
        said.contains(&format!("{}, line 2", rotated.display())),
        "{said}"
    );
    write(&rotated, &full);
    assert!(verify(&log).0);
    // The last line of the older file edited: found at the first line of the next.
    let mut changed = older.clone();
    let last = changed.len() - 1;
    changed[last] = changed[last].replace("\"ok\"", "\"failed\"");
    write(&older_file, &changed);
    let (ok, said) = verify(&log);
    assert!(!ok, "{said}");
    assert!(
        said.contains(&format!("{}, line 1", rotated.display())),
        "{said}"
    );
    write(&older_file, &older);

    // `toolhost audit` reads them: by tool, since a while ago, as JSON.
    let out = toolhost_command()
        .args([
            "audit", "--tool", "echo", "--since", "1h", "--json", "--file",
        ])
        .arg(&log)
        .output()
        .expect("audit");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 20);
    let out = toolhost_command()
        .args(["audit", "--tool", "other", "--file"])
        .arg(&log)
        .output()
        .expect("audit");
    assert!(String::from_utf8_lossy(&out.stdout).contains("no calls recorded"));
    let out = toolhost_command()
        .args(["audit", "--since", "2000-01-01T00:00:00Z", "--file"])
        .arg(&log)
        .output()
        .expect("audit");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.starts_with("TIME") && table.contains("ran"),
        "{table}"
    );
}

#[test]
fn the_log_is_private_to_its_user_and_never_written_through_a_link() {
    let work = tempfile::tempdir().expect("work");
    let log = work.path().join("audit/audit.jsonl");
    let audit = AuditLog::open(&settings(&log)).expect("open");
    drop(audit);
    let mode = |p: &Path| std::fs::metadata(p).expect("stat").mode() & 0o777;
    assert_eq!(mode(&log), 0o600);
    assert_eq!(mode(&head_of(&log)), 0o600, "the head, like the log");
    assert_eq!(mode(log.parent().expect("dir")), 0o700);
    // A link planted where the log goes is refused, not followed.
    let target = work.path().join("elsewhere");
    std::fs::write(&target, "").expect("target");
    let linked = work.path().join("audit/linked.jsonl");
    std::os::unix::fs::symlink(&target, &linked).expect("link");
    let refused = AuditLog::open(&settings(&linked));
    assert!(refused.is_err(), "a link at the log's path is refused");
    assert_eq!(std::fs::read(&target).expect("target").len(), 0);
    // So is one where its head goes.
    let beside = work.path().join("audit/beside.jsonl");
    std::os::unix::fs::symlink(&target, head_of(&beside)).expect("link");
    let refused = AuditLog::open(&settings(&beside)).expect_err("a link at the head's path");
    assert!(refused.to_string().contains("symbolic link"), "{refused}");
    assert_eq!(std::fs::read(&target).expect("target").len(), 0);

    let Some(other) = OtherUser::create("the_log_is_private_to_its_user") else {
        return;
    };
    // Even with the folders on the way open to everyone, the other user reads nothing.
    std::fs::set_permissions(
        work.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let read = other.command("cat").arg(&log).output().expect("cat");
    assert!(!read.status.success(), "another user read the audit log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_calls_are_recorded_with_its_session() {
    use crate::support::model::{ScriptedModel, calls, text};
    use tokio_util::sync::CancellationToken;
    use toolhost::agent::{Agent, AgentParts};
    let plugins = PluginDir::with(&["fixture_basic"]);
    let work = tempfile::tempdir().expect("work");
    let log = work.path().join("audit.jsonl");
    let state = work.path().join("p/state");
    let (door, audit) = audited_door(&plugins, &state, &settings(&log));
    let model = ScriptedModel::scripted(vec![
        calls(&[("echo", json!({"text": "hi"}))]),
        text("done"),
    ]);
    let agent = Agent::new(AgentParts {
        profile: "p".to_owned(),
        dirs: toolhost::ProfileDirs::of_state(&state),
        workspace: toolhost::WorkspaceSettings::default(),
        door,
        model: model as Arc<dyn toolhost::agent::model::ModelProvider>,
        config: toolhost::AgentSettings::default(),
        caller: None,
        observer: None,
    })
    .expect("agent");
    let session = agent.new_session().expect("session");
    let answer = agent
        .run_turn(&session, "say hi", CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(answer, "done");
    drop(agent);
    drop(audit);
    let all = lines(&log);
    assert_eq!(all.len(), 1, "{all:?}");
    assert_echo_line(
        &all[0],
        &plugins.path().join("libfixture_basic.so"),
        "agent",
    );
    assert_eq!(all[0]["caller"]["session"], session);
    assert_ne!(all[0]["caller"]["model"], "none");
}

/// The head file beside the log at `log`.
fn head_of(log: &Path) -> PathBuf {
    PathBuf::from(format!("{}.head", log.display()))
}

/// The `n`th rotated file of the log at `log`.
fn rotated_file(log: &Path, n: usize) -> PathBuf {
    PathBuf::from(format!("{}.{n}", log.display()))
}

fn file_lines(p: &Path) -> Vec<String> {
    std::fs::read_to_string(p)
        .expect("read")
        .lines()
        .map(str::to_owned)
        .collect()
}

fn write_lines(p: &Path, lines: &[String]) {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(p, text).expect("write");
}

fn seq_of(line: &str) -> u64 {
    serde_json::from_str::<Value>(line).expect("json")["seq"]
        .as_u64()
        .expect("a seq")
}

/// How verify names the lines with seq `from`-`to` that are gone.
fn gone(from: u64, to: u64) -> String {
    if from == to {
        format!("the line with seq {from} is gone")
    } else {
        format!("the {} lines with seq {from}-{to} are gone", to - from + 1)
    }
}

/// Settings that rotate the log at `log` every few lines.
fn rotating(log: &Path) -> AuditSettings {
    AuditSettings {
        max_bytes: 2000,
        keep: 10,
        ..settings(log)
    }
}

/// `n` echo calls through `door`.
async fn echo_calls(door: &CallDoor, n: usize) {
    let request = door.request(Caller::new(Frontend::Library));
    for i in 0..n {
        let result = door
            .call(
                &request,
                ToolCall::new(i.to_string(), "echo", json!({"text": "hi"})),
            )
            .await;
        assert!(!result.is_error, "{}", result.output);
    }
}

/// A log of 20 calls in `work`, rotated into at least three files, that verify passes:
/// the log and its highest rotated file's number.
async fn rotated_log(work: &Path) -> (PathBuf, usize) {
    let plugins = PluginDir::with(&["fixture_basic"]);
    let log = work.join("audit.jsonl");
    let (door, audit) = audited_door(&plugins, &work.join("p/state"), &rotating(&log));
    echo_calls(&door, 20).await;
    drop(door);
    drop(audit);
    let highest = (1..)
        .take_while(|n| rotated_file(&log, *n).exists())
        .last()
        .unwrap_or(0);
    assert!(highest >= 3, "rotated into at least 3 files, not {highest}");
    let (ok, said) = verify(&log);
    assert!(ok, "{said}");
    assert!(said.contains("ok: 20 lines (seq 1-20)"), "{said}");
    (log, highest)
}

/// Runs verify on `log`, which must fail saying each of `needles`; returns what it said.
fn verify_fails(log: &Path, needles: &[&str]) -> String {
    let (ok, said) = verify(log);
    assert!(!ok, "verify passed a log tampered with:\n{said}");
    for needle in needles {
        assert!(said.contains(needle), "no {needle:?} in:\n{said}");
    }
    said
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_names_a_line_cut_from_the_end() {
    let work = tempfile::tempdir().expect("work");
    let (log, _) = rotated_log(work.path()).await;
    let mut lines = file_lines(&log);
    let last = lines.pop().expect("a line");
    assert_eq!(seq_of(&last), 20);
    write_lines(&log, &lines);
    verify_fails(
        &log,
        &[
            "its head records seq 20 as the last line written",
            "the line with seq 20 was cut from the end",
            "1 problem(s)",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_names_lines_cut_from_the_start() {
    let work = tempfile::tempdir().expect("work");
    let (log, highest) = rotated_log(work.path()).await;
    let oldest = rotated_file(&log, highest);
    let lines = file_lines(&oldest);
    assert!(lines.len() >= 2, "{lines:?}");
    assert_eq!(seq_of(&lines[0]), 1);
    write_lines(&oldest, &lines[2..]);
    verify_fails(
        &log,
        &[
            &format!("{}, line 1: the log starts at seq 3", oldest.display()),
            "the 2 lines with seq 1-2 are gone, cut from the start of this file",
            "1 problem(s)",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_names_a_rotated_file_removed_from_the_middle() {
    let work = tempfile::tempdir().expect("work");
    let (log, _) = rotated_log(work.path()).await;
    let middle = rotated_file(&log, 2);
    let lines = file_lines(&middle);
    let (from, to) = (seq_of(&lines[0]), seq_of(lines.last().expect("a line")));
    std::fs::remove_file(&middle).expect("remove");
    verify_fails(
        &log,
        &[
            &format!("{} is missing: {}", middle.display(), gone(from, to)),
            "1 problem(s)",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_names_the_oldest_rotated_file_removed() {
    let work = tempfile::tempdir().expect("work");
    let (log, highest) = rotated_log(work.path()).await;
    let oldest = rotated_file(&log, highest);
    let to = seq_of(file_lines(&oldest).last().expect("a line"));
    std::fs::remove_file(&oldest).expect("remove");
    verify_fails(
        &log,
        &[
            &format!("{} is missing: {}", oldest.display(), gone(1, to)),
            "1 problem(s)",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_names_an_edited_last_line() {
    let work = tempfile::tempdir().expect("work");
    let (log, _) = rotated_log(work.path()).await;
    let mut lines = file_lines(&log);
    let n = lines.len();
    let edited = lines[n - 1].replace("\"ok\"", "\"failed\"");
    assert_ne!(edited, lines[n - 1]);
    lines[n - 1] = edited;
    write_lines(&log, &lines);
    verify_fails(
        &log,
        &[
            &format!(
                "{}, line {n}: this last line (seq 20) is not the one its head records",
                log.display()
            ),
            "it was edited after it was written",
            "1 problem(s)",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_names_a_line_edited_in_the_middle() {
    let work = tempfile::tempdir().expect("work");
    let (log, highest) = rotated_log(work.path()).await;
    let oldest = rotated_file(&log, highest);
    let mut lines = file_lines(&oldest);
    lines[0] = lines[0].replace("\"ok\"", "\"failed\"");
    write_lines(&oldest, &lines);
    verify_fails(
        &log,
        &[
            &format!(
                "{}, line 2: its prev does not match the sha256 of line 1",
                oldest.display()
            ),
            "no line is missing between them (seq 1 and 2), so line 1 was changed",
            "1 problem(s)",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_names_a_removed_head() {
    let work = tempfile::tempdir().expect("work");
    let (log, _) = rotated_log(work.path()).await;
    std::fs::remove_file(head_of(&log)).expect("remove the head");
    verify_fails(
        &log,
        &[
            &format!(
                "{}: there is no head file beside the log",
                head_of(&log).display()
            ),
            "it was removed",
            "1 problem(s)",
        ],
    );
}

/// The line that chains to `line` as a writer would have written it, numbered `seq`.
fn chained_after(line: &str, seq: u64) -> String {
    let mut next: Value = serde_json::from_str(line).expect("json");
    next["seq"] = json!(seq);
    next["prev"] = json!(sha256_hex(line.as_bytes()));
    serde_json::to_string(&next).expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_names_lines_added_after_the_head() {
    let work = tempfile::tempdir().expect("work");
    let (log, _) = rotated_log(work.path()).await;
    let mut lines = file_lines(&log);
    let n = lines.len();
    let first = chained_after(&lines[n - 1], 21);
    let second = chained_after(&first, 22);
    lines.extend([first, second]);
    write_lines(&log, &lines);
    verify_fails(
        &log,
        &[
            &format!(
                "{}, line {}: the 2 lines with seq 21-22 come after the last line its head \
                 records (seq 20)",
                log.display(),
                n + 1
            ),
            "1 problem(s)",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_records_a_forged_end_instead_of_chaining_to_it() {
    let work = tempfile::tempdir().expect("work");
    let (log, _) = rotated_log(work.path()).await;
    let mut lines = file_lines(&log);
    let n = lines.len();
    let original = lines[n - 1].clone();
    let forged = original.replace("\"ok\"", "\"failed\"");
    lines[n - 1] = forged.clone();
    write_lines(&log, &lines);
    // A host opens the log again and makes a call.
    let plugins = PluginDir::with(&["fixture_basic"]);
    let state = work.path().join("p/state");
    let (door, audit) = audited_door(&plugins, &state, &settings(&log));
    echo_calls(&door, 1).await;
    drop(door);
    drop(audit);
    let now = file_lines(&log);
    assert_eq!(now.len(), n + 1, "the call has its line");
    let new: Value = serde_json::from_str(&now[n]).expect("json");
    assert_eq!(new["seq"], 21);
    assert_eq!(
        new["prev"],
        sha256_hex(original.as_bytes()),
        "chained to the line the head recorded, not the forged one"
    );
    assert_eq!(new["mismatch"]["head"]["seq"], 20, "{new}");
    assert_eq!(
        new["mismatch"]["found"]["sha256"],
        sha256_hex(forged.as_bytes())
    );
    verify_fails(
        &log,
        &[
            &format!(
                "{}, line {}: when this line (seq 21) was written",
                log.display(),
                n + 1
            ),
            "the last line, seq 20, had been edited",
            &format!("chained this line to the line the head recorded, not to line {n}"),
            "1 problem(s)",
        ],
    );
    // A removed head: the next line says so, chains to the log as found, and a new head
    // is written from there.
    std::fs::remove_file(head_of(&log)).expect("remove the head");
    let (door, audit) = audited_door(&plugins, &state, &settings(&log));
    echo_calls(&door, 1).await;
    drop(door);
    drop(audit);
    let now = file_lines(&log);
    let newest: Value = serde_json::from_str(&now[n + 1]).expect("json");
    assert_eq!(newest["seq"], 22);
    assert_eq!(newest["prev"], sha256_hex(now[n].as_bytes()));
    assert_eq!(newest["mismatch"]["head"], Value::Null, "{newest}");
    assert!(head_of(&log).exists(), "a new head");
    verify_fails(
        &log,
        &[
            &format!(
                "{}, line {}: when this line (seq 22) was written",
                log.display(),
                n + 2
            ),
            "the log's head file was missing or unreadable",
            "2 problem(s)",
        ],
    );
}

/// `head` (a head file's text) with its last line's sha256 replaced by `sha` and its check
/// made right again: what someone who can write the files does to hide an edit.
fn rewritten_head(head: &str, sha: &str) -> String {
    let line = head.trim_end_matches('\n');
    let (body, _check) = line.rsplit_once(" check=").expect("a check");
    let mut words: Vec<String> = body.split(' ').map(str::to_owned).collect();
    for word in &mut words {
        if word.starts_with("sha256=") {
            *word = format!("sha256={sha}");
        }
    }
    let body = words.join(" ");
    let check = &sha256_hex(body.as_bytes())[..16];
    format!("{body} check={check}\n")
}

#[test]
fn checkpoints_go_to_syslog_and_verify_checks_the_log_against_them() {
    use std::os::unix::net::UnixDatagram;
    let plugins = PluginDir::with(&["fixture_basic"]);
    let work = tempfile::tempdir().expect("work");
    let socket_path = work.path().join("syslog.sock");
    let socket = UnixDatagram::bind(&socket_path).expect("bind");
    socket
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let log = work.path().join("audit/audit.jsonl");
    let (_cfg, file) = config(&format!(
        "[audit]\nfile = {:?}\nsyslog = true\nsyslog_socket = {:?}\n",
        log.display().to_string(),
        socket_path.display().to_string()
    ));
    for _ in 0..3 {
        let out = toolhost_command()
            .env("XDG_STATE_HOME", work.path().join("state"))
            .arg("--config")
            .arg(&file)
            .args(["call", "echo", r#"{"text": "hi"}"#, "--plugins"])
            .arg(plugins.path())
            .output()
            .expect("run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // One checkpoint per batch: here one per process (each waited for within the bound).
    let mut buf = [0u8; 4096];
    let received: Vec<String> = (0..3)
        .map(|_| {
            let n = socket.recv(&mut buf).expect("a checkpoint within 20 s");
            String::from_utf8_lossy(&buf[..n]).into_owned()
        })
        .collect();
    let lines = file_lines(&log);
    for (i, message) in received.iter().enumerate() {
        let seq = i + 1;
        assert!(
            message.starts_with("<86>") && message.contains(" toolhost-audit["),
            "authpriv.info, tagged: {message}"
        );
        assert!(
            message.contains(&format!(
                "]: seq={seq} sha256={} tool=echo outcome=ok lines={seq}-{seq} file={}",
                sha256_hex(lines[i].as_bytes()),
                log.display()
            )),
            "{message}"
        );
    }
    let checkpoint = |message: &str| -> String {
        let field = |key: &str| {
            message
                .split(' ')
                .find_map(|w| w.strip_prefix(key))
                .expect("a field")
                .to_owned()
        };
        format!("{}:{}", field("seq="), field("sha256="))
    };
    let last = checkpoint(&received[2]);
    let verify_expect = |expect: &str| {
        let out = toolhost_command()
            .args(["audit", "verify", "--file"])
            .arg(&log)
            .args(["--expect", expect])
            .output()
            .expect("verify");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (ok, said) = verify_expect(&last);
    assert!(ok, "{said}");
    assert!(
        said.contains(&format!(
            "checkpoint seq 3 matches {}, line 3",
            log.display()
        )),
        "{said}"
    );
    // A checkpoint the log does not match, and one past its end.
    let wrong = format!("2:{}", sha256_hex(lines[2].as_bytes()));
    let (ok, said) = verify_expect(&wrong);
    assert!(!ok, "{said}");
    assert!(
        said.contains(&format!(
            "{}, line 2: this line is seq 2, but its sha256 is",
            log.display()
        )),
        "{said}"
    );
    let past = format!("9:{}", sha256_hex(lines[2].as_bytes()));
    let (ok, said) = verify_expect(&past);
    assert!(!ok, "{said}");
    assert!(
        said.contains("the checkpoint names seq 9, but the log ends at seq 3"),
        "{said}"
    );
    // Whoever can write the files edits the last line and its head to match: verify alone
    // passes; the checkpoint from syslog does not.
    let mut edited = lines.clone();
    edited[2] = edited[2].replace("\"ok\"", "\"failed\"");
    write_lines(&log, &edited);
    let head = std::fs::read_to_string(head_of(&log)).expect("head");
    std::fs::write(
        head_of(&log),
        rewritten_head(&head, &sha256_hex(edited[2].as_bytes())),
    )
    .expect("head");
    let (ok, said) = verify(&log);
    assert!(
        ok,
        "the log and its head rewritten together pass alone: {said}"
    );
    let (ok, said) = verify_expect(&last);
    assert!(!ok, "{said}");
    assert!(
        said.contains(&format!(
            "{}, line 3: this line is seq 3, but its sha256 is",
            log.display()
        )),
        "{said}"
    );
}
