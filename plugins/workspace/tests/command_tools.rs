//! `run_command` through `TestHost` on real temporary folders: streams and exit codes, the
//! sandbox (writes outside the roots, the network), time-outs and cancels that kill the
//! whole process tree, the denylist, the shell switch, the environment and long output.

use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolhost_plugin_api::WorkspaceAnswer;
use toolhost_plugin_api::testing::TestHost;
use toolhost_workspace::run_command;

/// A host whose workspace is `dir`, with `tweak` applied to the rules. Shells are on
/// (`shell = true`): most tests run `sh -c` to make a process tree.
fn host_with(dir: &Path, tweak: impl FnOnce(&mut WorkspaceAnswer)) -> TestHost {
    let mut answer = WorkspaceAnswer::with_roots([dir.display().to_string()]);
    answer.shell = true;
    tweak(&mut answer);
    TestHost::new().workspace(answer)
}

/// Runs `args` and returns the structured result and the text.
fn run(host: &TestHost, args: Value) -> (Value, String) {
    let out = host.call_output(&run_command, args).expect("run_command");
    (out.structured.expect("structured result"), out.text)
}

/// Whether this kernel has Landlock (the sandbox tests skip, saying so, without it).
fn landlock(min_abi: u32) -> bool {
    match toolhost_sandbox::kernel_abi() {
        Some(abi) if abi >= min_abi => true,
        other => {
            eprintln!("skipped: Landlock ABI {other:?} < {min_abi}");
            false
        }
    }
}

/// Waits (bounded) for `path` to hold a pid, and returns it.
fn wait_for_pid(path: &Path) -> i32 {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        assert!(Instant::now() < end, "no pid in {}", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `pid` is gone (or a zombie), waiting up to 10 s for it.
fn gone(pid: i32) -> bool {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, r)| r.split_whitespace().next().map(str::to_owned))
            });
        match state.as_deref() {
            None | Some("Z") => return true,
            Some(_) if Instant::now() >= end => return false,
            Some(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

#[test]
fn a_program_runs_in_the_root_with_its_exit_code_and_both_streams() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
    let host = host_with(dir.path(), |_| {});
    let (value, text) = run(
        &host,
        json!({"program": "sh", "args": ["-c", "pwd; echo oops >&2; exit 3"], "cwd": "sub"}),
    );
    let real = std::fs::canonicalize(dir.path().join("sub")).expect("real");
    assert_eq!(value["exit_code"], 3);
    assert_eq!(value["stdout"], format!("{}\n", real.display()));
    assert_eq!(value["stderr"], "oops\n");
    assert_eq!(value["timed_out"], false);
    assert!(text.starts_with("exit code 3 in "), "{text}");
    assert!(text.contains("--- stderr ---\noops"), "{text}");
    let (value, _) = run(&host, json!({"program": "cat", "stdin": "fed in"}));
    assert_eq!(
        (value["exit_code"].clone(), value["stdout"].clone()),
        (json!(0), json!("fed in"))
    );
}

#[test]
fn a_folder_outside_the_workspace_and_unknown_programs_are_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let host = host_with(dir.path(), |_| {});
    let e = host
        .call(&run_command, json!({"program": "ls", "cwd": "/etc"}))
        .expect_err("outside")
        .to_string();
    assert!(e.contains("outside the workspace"), "{e}");
    let e = host
        .call(&run_command, json!({"program": "no-such-program-xyz"}))
        .expect_err("unknown")
        .to_string();
    assert!(e.contains("no such program"), "{e}");
}

#[test]
fn a_write_outside_the_roots_is_refused_by_the_sandbox_and_one_inside_works() {
    if !landlock(3) {
        return;
    }
    let dir = tempfile::tempdir().expect("tmp");
    let outside = tempfile::tempdir().expect("outside");
    let target = outside.path().join("escaped");
    let host = host_with(dir.path(), |_| {});
    let (value, _) = run(
        &host,
        json!({"program": "touch", "args": [target.display().to_string()]}),
    );
    assert_ne!(value["exit_code"], 0, "{value}");
    assert!(!target.exists(), "the sandbox let a write out");
    let (value, _) = run(
        &host,
        json!({"program": "sh", "args": ["-c", "echo x > inside && echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\""]}),
    );
    assert_eq!(value["exit_code"], 0, "{value}");
    assert_eq!(value["stdout"], "t\n");
    assert!(dir.path().join("inside").exists());
}

#[test]
fn the_temporary_folder_is_private_and_removed_afterwards() {
    let dir = tempfile::tempdir().expect("tmp");
    let host = host_with(dir.path(), |_| {});
    let (value, _) = run(
        &host,
        json!({"program": "sh", "args": ["-c", "echo \"$TMPDIR\"; stat -c %a \"$TMPDIR\""]}),
    );
    let stdout = value["stdout"].as_str().expect("stdout");
    let mut lines = stdout.lines();
    let tmp = lines.next().expect("tmpdir");
    assert_eq!(lines.next(), Some("700"), "{stdout}");
    assert!(!Path::new(tmp).exists(), "{tmp} was left behind");
}

#[test]
fn the_network_is_refused_unless_the_workspace_allows_it() {
    if !landlock(4) {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let dir = tempfile::tempdir().expect("tmp");
    // bash's /dev/tcp connects without any network tool installed; python3 otherwise.
    let connect = format!(
        "import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5); print('connected')"
    );
    let python = ["/usr/bin/python3", "/bin/python3"]
        .iter()
        .any(|p| Path::new(p).exists());
    let args = if python {
        json!({"program": "python3", "args": ["-c", connect]})
    } else {
        json!({"program": "bash", "args": ["-c", format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected")]})
    };
    let denied = host_with(dir.path(), |_| {});
    let (value, _) = run(&denied, args.clone());
    assert_ne!(value["exit_code"], 0, "{value}");
    assert!(!value["stdout"].as_str().unwrap_or("").contains("connected"));
    let allowed = host_with(dir.path(), |a| a.allow_network = true);
    let (value, _) = run(&allowed, args);
    assert_eq!(value["exit_code"], 0, "{value}");
    assert_eq!(value["stdout"], "connected\n");
}

#[test]
fn a_time_out_kills_the_command_and_its_children() {
    let dir = tempfile::tempdir().expect("tmp");
    let host = host_with(dir.path(), |a| a.command_timeout_secs = 1);
    let started = Instant::now();
    let (value, text) = run(
        &host,
        json!({"program": "sh", "args": ["-c", "sleep 300 & echo $! > pidfile; wait"], "timeout_secs": 50}),
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(value["timed_out"], true, "{value}");
    assert_eq!(value["signal"], 9);
    assert!(text.contains("capped to the workspace's 1 s"), "{text}");
    assert!(text.contains("timed out after 1 s"), "{text}");
    let pid = wait_for_pid(&dir.path().join("pidfile"));
    assert!(gone(pid), "the child {pid} survived the time-out");
}

#[test]
fn a_cancel_kills_the_command_and_its_children() {
    let dir = tempfile::tempdir().expect("tmp");
    let host = host_with(dir.path(), |_| {});
    let pidfile = dir.path().join("pidfile");
    let canceller = host.canceller();
    let watcher = {
        let pidfile = pidfile.clone();
        std::thread::spawn(move || {
            let pid = wait_for_pid(&pidfile);
            canceller.cancel();
            pid
        })
    };
    let started = Instant::now();
    let out = host.call_output(
        &run_command,
        json!({"program": "sh", "args": ["-c", "sleep 300 & echo $! > pidfile; wait"]}),
    );
    let pid = watcher.join().expect("watcher");
    assert!(started.elapsed() < Duration::from_secs(30));
    // Cancelled: the host's answer, or the tool's result saying so.
    if let Ok(out) = out {
        assert_eq!(out.structured.expect("structured")["cancelled"], true);
    }
    assert!(gone(pid), "the child {pid} survived the cancel");
}

#[test]
fn background_processes_left_running_are_killed_when_the_command_exits() {
    let dir = tempfile::tempdir().expect("tmp");
    let host = host_with(dir.path(), |_| {});
    let (value, text) = run(
        &host,
        json!({"program": "sh", "args": ["-c", "sleep 300 >/dev/null 2>&1 & echo $! > pidfile"]}),
    );
    assert_eq!(value["exit_code"], 0);
    assert!(text.contains("left running were killed"), "{text}");
    let pid = wait_for_pid(&dir.path().join("pidfile"));
    assert!(gone(pid), "the background child {pid} survived");
}

#[test]
fn denylisted_programs_are_refused_naming_the_entry() {
    let dir = tempfile::tempdir().expect("tmp");
    let host = host_with(dir.path(), |a| {
        a.deny_programs = vec!["git".to_owned()];
        a.shell = true;
    });
    let e = host
        .call(&run_command, json!({"program": "sudo", "args": ["id"]}))
        .expect_err("sudo")
        .to_string();
    assert!(
        e.contains("`sudo`") && e.contains("built-in denylist"),
        "{e}"
    );
    let e = host
        .call(&run_command, json!({"program": "git", "args": ["status"]}))
        .expect_err("git")
        .to_string();
    assert!(e.contains("`git`") && e.contains("deny_programs"), "{e}");
    let e = host
        .call(&run_command, json!({"command": "echo hi && git status"}))
        .expect_err("git in a shell line")
        .to_string();
    assert!(e.contains("`git`"), "{e}");
    // A link to a denied program is refused by what it points to.
    let sh = std::fs::canonicalize("/bin/sh").expect("sh");
    std::os::unix::fs::symlink(&sh, dir.path().join("renamed")).expect("link");
    let host = host_with(dir.path(), |a| {
        a.deny_programs = vec![sh.display().to_string()]
    });
    let e = host
        .call(
            &run_command,
            json!({"program": "./renamed", "args": ["-c", "true"]}),
        )
        .expect_err("link")
        .to_string();
    assert!(e.contains("is refused"), "{e}");
}

#[test]
fn a_shell_command_line_is_refused_unless_the_workspace_enables_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let off = host_with(dir.path(), |a| a.shell = false);
    let e = off
        .call(&run_command, json!({"command": "echo a | tr a b"}))
        .expect_err("shell off")
        .to_string();
    assert!(
        e.contains("shell = true") && e.contains("[workspace]"),
        "{e}"
    );
    // A shell named as the program, or a program that runs another, is the same thing.
    for (program, args) in [
        ("sh", json!(["-c", "echo a"])),
        ("/bin/bash", json!(["-c", "echo a"])),
        ("env", json!(["sudo", "true"])),
    ] {
        let e = off
            .call(&run_command, json!({"program": program, "args": args}))
            .expect_err("a shell by another name")
            .to_string();
        assert!(e.contains("shell = true"), "{program}: {e}");
    }
    let (value, _) = run(&off, json!({"program": "echo", "args": ["plain"]}));
    assert_eq!(value["stdout"], "plain\n");
    let (value, _) = run(
        &host_with(dir.path(), |a| a.shell = true),
        json!({"command": "echo a | tr a b"}),
    );
    assert_eq!(value["stdout"], "b\n");
}

#[test]
fn the_environment_is_reduced_to_the_allowlist_and_the_configured_names() {
    // SAFETY: set once, before any command of this test runs; other tests read no such
    // variable.
    unsafe {
        std::env::set_var("TOOLHOST_TEST_SECRET", "hidden");
        std::env::set_var("TOOLHOST_TEST_PASSED", "passed");
    }
    let dir = tempfile::tempdir().expect("tmp");
    let host = host_with(dir.path(), |a| {
        a.env = vec!["TOOLHOST_TEST_PASSED".to_owned(), "SET_HERE=1".to_owned()]
    });
    let (value, _) = run(&host, json!({"program": "env"}));
    let env = value["stdout"].as_str().expect("stdout");
    assert!(!env.contains("TOOLHOST_TEST_SECRET"), "{env}");
    assert!(env.contains("TOOLHOST_TEST_PASSED=passed"), "{env}");
    assert!(env.contains("SET_HERE=1"), "{env}");
    assert!(env.lines().any(|l| l.starts_with("PATH=")), "{env}");
    assert!(env.lines().any(|l| l.starts_with("TMPDIR=")), "{env}");
}

#[test]
fn long_output_is_whole_in_the_text_for_the_host_to_cut_and_within_the_budget_in_the_value() {
    let dir = tempfile::tempdir().expect("tmp");
    let host = host_with(dir.path(), |_| {});
    let (value, text) = run(&host, json!({"program": "seq", "args": ["1", "20000"]}));
    // The text the model reads is whole: the host cuts it and keeps it for read_output.
    assert!(text.contains("\n1\n2\n3\n"), "{}", &text[..200]);
    assert!(text.contains("\n19999\n20000\n"));
    assert_eq!(
        text.lines().filter(|l| l.parse::<u32>().is_ok()).count(),
        20_000
    );
    // The structured value holds the head and the tail within the budget, and says so.
    let json = value.to_string();
    let budget = TestHost::DEFAULT_OUTPUT_BUDGET.max_chars as usize;
    assert!(json.chars().count() <= budget, "{} > {budget}", json.len());
    let stdout = value["stdout"].as_str().expect("stdout");
    assert!(stdout.starts_with("1\n2\n3\n"), "{stdout:.100}");
    assert!(stdout.ends_with("19999\n20000\n"));
    assert!(stdout.contains("characters left out here"));
    assert!(
        value["notes"].as_array().expect("notes").iter().any(|n| n
            .as_str()
            .is_some_and(|n| n.contains("cut to the output budget"))),
        "{value}"
    );
}

#[test]
fn the_description_and_risk_say_what_the_tool_does() {
    let info = TestHost::new().describe(&run_command);
    assert_eq!(info.risk, toolhost_plugin_api::Risk::Destructive);
    for phrase in ["shell = true", "denylist", "read", "TMPDIR", "read_output"] {
        assert!(info.description.contains(phrase), "{phrase}");
    }
    assert!(info.schema["properties"]["program"].is_object());
}

#[test]
fn a_command_of_a_root_host_holds_no_capabilities() {
    let dir = tempfile::tempdir().expect("tmp");
    let host = host_with(dir.path(), |_| {});
    let (value, _) = run(
        &host,
        json!({"program": "grep", "args": ["^Cap", "/proc/self/status"]}),
    );
    let status = value["stdout"].as_str().unwrap_or_default().to_owned();
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        let line = status
            .lines()
            .find(|l| l.starts_with(set))
            .unwrap_or_else(|| panic!("no {set} in {status}"));
        assert!(
            line.trim_end().ends_with("0000000000000000"),
            "{line} (the host runs as uid {})",
            // SAFETY: geteuid has no preconditions.
            unsafe { libc::geteuid() }
        );
    }
}

#[test]
fn a_command_that_exits_non_zero_is_an_error_result_with_all_its_output() {
    let dir = tempfile::tempdir().expect("tmp");
    let host = host_with(dir.path(), |_| {});
    let out = host
        .call_output(
            &run_command,
            json!({"program": "ls", "args": ["no-such-file-here"]}),
        )
        .expect("ran");
    assert!(out.is_error, "{}", out.text);
    assert!(out.text.starts_with("exit code 2"), "{}", out.text);
    assert!(out.text.contains("no-such-file-here"), "{}", out.text);
    let value = out.structured.expect("the value too");
    assert_eq!(value["exit_code"], 2);
    let ok = host
        .call_output(&run_command, json!({"program": "true"}))
        .expect("ran");
    assert!(!ok.is_error, "{}", ok.text);
}
