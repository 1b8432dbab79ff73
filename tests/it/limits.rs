//! A plugin that pushes against the host's limits (`fixture-oversized`, `fixture-many-tools`):
//! metadata over the caps is refused with the numbers before it costs the host memory, in
//! process and in a worker; a result over the worker protocol's cap fails at once.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{PluginDir, toolhost_command};

/// What a finished `toolhost` run printed, and the most memory it (or a worker) held.
struct Measured {
    success: bool,
    stdout: String,
    stderr: String,
    /// `None` without GNU time on the machine.
    max_rss_kib: Option<u64>,
}

/// Runs `command` to its end under GNU time, which reads its peak resident set size from
/// `wait4`. (Not `wait4` from here: a child spawned by this large test process inherits
/// its peak at `exec`; one forked by `time` starts small.)
fn run_measured(command: &Command) -> Measured {
    let report = tempfile::NamedTempFile::new().expect("temp file");
    let has_time = Path::new("/usr/bin/time").exists();
    let mut run = if has_time {
        let mut run = Command::new("/usr/bin/time");
        run.args(["-f", "%M", "-o"])
            .arg(report.path())
            .arg(command.get_program())
            .args(command.get_args());
        run
    } else {
        let mut run = Command::new(command.get_program());
        run.args(command.get_args());
        run
    };
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => run.env(key, value),
            None => run.env_remove(key),
        };
    }
    let out = run.stdin(Stdio::null()).output().expect("run toolhost");
    let max_rss_kib = has_time.then(|| {
        let text = std::fs::read_to_string(report.path()).expect("time's report");
        text.lines()
            .last()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or_else(|| panic!("time's report: {text}"))
    });
    Measured {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        max_rss_kib,
    }
}

fn list(dir: &Path, isolate: bool) -> Measured {
    let mut command = toolhost_command();
    command.args(["list", "--plugins"]).arg(dir);
    if isolate {
        command.arg("--isolate");
    }
    run_measured(&command)
}

/// Before the caps a 10 MB schema cost the host 686 MB in process (519 MB with a
/// worker); now it is refused by its length before it is parsed, and `toolhost list` of
/// these plugins peaks near 60 MB (the plugin's own 10 MB schema included).
const MAX_RSS_KIB: u64 = 128 * 1024;

#[test]
fn metadata_over_the_caps_is_refused_with_numbers_in_process_and_in_a_worker() {
    let dir = PluginDir::with(&["fixture_oversized", "fixture_many_tools"]);
    for isolate in [false, true] {
        let mode = if isolate { "in a worker" } else { "in process" };
        let run = list(&dir.path(), isolate);
        let err = &run.stderr;
        assert!(run.success, "{mode}: {err}");
        for expected in [
            "tool 'huge_description': its description is 1,048,576 bytes, more than the \
             16,384 allowed; shorten it",
            "tool 'huge_schema': its schema is 10,000,034 bytes, more than the 262,144 allowed",
            "tool 'deep_schema': its schema nests deeper than the 64 levels of arrays and \
             objects allowed; flatten it",
            "the plugin exports 1,001 tools, more than the 1,000 a plugin may",
        ] {
            assert!(err.contains(expected), "{mode}: no {expected:?} in:\n{err}");
        }
        assert!(run.stdout.contains("fine"), "{mode}: {}", run.stdout);
        assert!(!run.stdout.contains("huge_"), "{mode}: {}", run.stdout);
        assert!(!run.stdout.contains("tool_1"), "{mode}: {}", run.stdout);
        match run.max_rss_kib {
            Some(peak) => {
                assert!(
                    peak < MAX_RSS_KIB,
                    "{mode}: toolhost list peaked at {peak} KiB, over {MAX_RSS_KIB} KiB"
                );
                println!("{mode}: peak RSS {peak} KiB");
            }
            None => println!("{mode}: no /usr/bin/time (GNU time): peak memory not checked"),
        }
    }
}

#[test]
fn a_result_over_the_frame_cap_fails_at_once_with_the_sizes() {
    let dir = PluginDir::with(&["fixture_oversized"]);
    let started = Instant::now();
    let out = toolhost_command()
        .args(["call", "--isolate", "--yes", "--plugins"])
        .arg(dir.path())
        .args(["big_result", "{}"])
        .output()
        .expect("run toolhost call");
    let elapsed = started.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(
            "the result is 67,108,865 bytes, more than the 64 MiB a worker may send; return \
             less or write it to a file"
        ),
        "{err}"
    );
    assert!(
        elapsed < Duration::from_secs(20),
        "the call took {elapsed:?}: it waited for its timeout"
    );
}

/// Runs `command` (a `toolhost` command) under a pseudo-terminal with `script`, so its
/// stdout and stderr are terminals; returns what the terminal received.
fn under_terminal(command: &Command) -> String {
    let quote = |s: &std::ffi::OsStr| format!("'{}'", s.to_string_lossy().replace('\'', "'\\''"));
    let mut line = quote(command.get_program());
    for arg in command.get_args() {
        line.push(' ');
        line.push_str(&quote(arg));
    }
    let mut script = Command::new("script");
    script.args(["-qec", &line, "/dev/null"]);
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => script.env(key, value),
            None => script.env_remove(key),
        };
    }
    let out = script
        .stdin(Stdio::null())
        .output()
        .expect("run script (util-linux)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn escape_sequences_from_a_plugin_are_shown_not_obeyed_on_a_terminal() {
    if Command::new("script").arg("--version").output().is_err() {
        println!("skipped: no `script` (util-linux) to make a pseudo-terminal");
        return;
    }
    let dir = PluginDir::with(&["fixture_oversized"]);
    let mut list = toolhost_command();
    list.args(["list", "--plugins"]).arg(dir.path());
    let shown = under_terminal(&list);
    // The description in the table, the refused name in a warning on stderr.
    for expected in ["Paints \\x1b[31mred\\x1b[0m", "evil\\x1b[2Jname"] {
        assert!(shown.contains(expected), "no {expected:?} in:\n{shown}");
    }
    assert!(
        !shown.contains("\x1b[31m") && !shown.contains("\x1b[2J"),
        "{shown:?}"
    );

    let mut call = toolhost_command();
    call.args(["call", "--plugins"])
        .arg(dir.path())
        .args(["escapes", "{}"]);
    let shown = under_terminal(&call);
    assert!(
        shown.contains("out \\x1b[2Jcleared\\x07 \\u{9b}31m"),
        "{shown:?}"
    );
    assert!(
        !shown.contains('\x1b') && !shown.contains('\u{9b}'),
        "{shown:?}"
    );

    // Not a terminal: the output is the tool's, byte for byte.
    let out = call.output().expect("run toolhost call");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "out \x1b[2Jcleared\x07 \u{9b}31m\n"
    );
}

#[test]
fn a_flood_of_worker_output_is_rate_limited_in_the_log_and_last_words_survive() {
    let dir = PluginDir::with(&["fixture_oversized"]);
    let flood = |args: &str| {
        toolhost_command()
            .env("TOOLHOST_LOG", "info")
            .args(["call", "--isolate", "--yes", "--plugins"])
            .arg(dir.path())
            .args(["flood_stdout", args])
            .output()
            .expect("run toolhost call")
    };
    let out = flood("{}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{}",
        &err[err.len().saturating_sub(2000)..]
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "printed 250000 lines\n"
    );
    let lines = err.lines().count();
    assert!(
        lines < 1_000,
        "250,000 lines of worker output became {lines} log lines"
    );
    // The last line before the worker ends is its last words, dropped from the log or not.
    // The count of what was dropped is logged at the end of the output at the latest.
    let out = flood(r#"{"then_exit": true}"#);
    let err = String::from_utf8_lossy(&out.stderr);
    let tail = &err[err.len().saturating_sub(2000)..];
    assert!(!out.status.success());
    assert!(
        err.contains("(its last words: hostile: the flood is over, now exiting)"),
        "{tail}"
    );
    assert!(err.lines().count() < 1_000, "{tail}");
    assert!(
        err.contains("lines of the worker's output (more than 200 at once or 50 a second)"),
        "{tail}"
    );
    let dropped: u64 = err
        .lines()
        .filter_map(|l| {
            let (_, rest) = l.split_once("dropped ")?;
            rest.split(' ').next()?.parse::<u64>().ok()
        })
        .sum();
    let logged = err
        .lines()
        .filter_map(|l| l.split_once("toolhost::worker: "))
        .filter(|(_, rest)| {
            let word = rest.split(' ').next().unwrap_or_default();
            word.len() == 7 && word.bytes().all(|b| b.is_ascii_digit())
        })
        .count() as u64;
    // Every flood line is logged or counted (the last words may be counted too).
    assert!(
        (250_000..=250_001).contains(&(dropped + logged)),
        "{dropped} dropped + {logged} logged: {tail}"
    );
}
