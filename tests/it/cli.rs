//! The `toolhost` binary: list, call and check, with their exit codes.

use std::path::PathBuf;
use std::process::Output;

use serde_json::Value;

use crate::support::{PluginDir, so};

fn toolhost(args: &[&str]) -> Output {
    crate::support::toolhost_command()
        .args(args)
        .env_remove("TOOLHOST_PLUGINS")
        .output()
        .expect("run toolhost")
}

/// A shell script in the plugin directory's folder (not a .so, so the loader skips it).
fn executable(dir: &PluginDir, name: &str, script: &str) -> PathBuf {
    let path = dir.write(name, script.as_bytes());
    let mut perms = std::fs::metadata(&path).expect("meta").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&path, perms).expect("chmod");
    path
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn list_prints_a_table_and_json_with_schemas_and_reports_bad_files_on_stderr() {
    let dir = PluginDir::with(&["toolhost_utils", "fixture_no_root"]);
    let d = dir.path();
    let d = d.to_str().expect("utf-8");
    let out = toolhost(&["list", "--plugins", d]);
    assert!(out.status.success());
    let table = text(&out.stdout);
    assert!(table.starts_with("NAME"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("write_file") && l.contains("write")),
        "{table}"
    );
    assert!(text(&out.stderr).contains("libfixture_no_root.so: not a toolhost plugin"));

    let out = toolhost(&["list", "--plugins", d, "--json"]);
    assert!(out.status.success());
    let tools: Vec<Value> = serde_json::from_slice(&out.stdout).expect("JSON array");
    let edit = tools
        .iter()
        .find(|t| t["name"] == "edit_text")
        .expect("edit_text");
    assert_eq!(edit["interactive"], true);
    assert_eq!(edit["plugin"], "utils");
    assert_eq!(edit["risk"], "read");
    assert_eq!(edit["schema"]["type"], "object");
    assert!(edit["description"].as_str().is_some_and(|s| !s.is_empty()));
}

#[test]
fn call_exit_codes_are_0_on_success_1_on_an_error_result_2_on_usage_errors() {
    let dir = PluginDir::with(&["toolhost_utils"]);
    let d = dir.path();
    let d = d.to_str().expect("utf-8");
    let ok = toolhost(&["call", "text_stats", r#"{"text": "a b"}"#, "--plugins", d]);
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok.stderr));
    assert!(text(&ok.stdout).contains("\"words\":2"));

    let err = toolhost(&[
        "call",
        "json_query",
        r#"{"json": "{", "pointer": ""}"#,
        "--plugins",
        d,
    ]);
    assert_eq!(err.status.code(), Some(1));
    assert!(
        text(&err.stderr).contains("invalid arguments"),
        "{}",
        text(&err.stderr)
    );

    let unknown = toolhost(&["call", "nope", "{}", "--plugins", d]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(text(&unknown.stderr).contains("unknown tool 'nope'"));

    let bad_json = toolhost(&["call", "text_stats", "{not json", "--plugins", d]);
    assert_eq!(bad_json.status.code(), Some(2));
    assert!(text(&bad_json.stderr).contains("not valid JSON"));

    let no_args = toolhost(&["call"]);
    assert_eq!(no_args.status.code(), Some(2));
}

#[test]
fn call_refuses_a_write_tool_and_says_why() {
    let dir = PluginDir::with(&["toolhost_utils"]);
    let target = dir.dir.path().join("should-not-exist.txt");
    let args = serde_json::json!({"path": target, "content": "x"}).to_string();
    let out = toolhost(&[
        "call",
        "write_file",
        &args,
        "--plugins",
        dir.path().to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("was not approved by the user"),
        "{}",
        text(&out.stderr)
    );
    assert!(!target.exists());
}

#[test]
fn call_runs_the_interactive_editor_tool_with_the_persons_editor() {
    let dir = PluginDir::with(&["toolhost_utils"]);
    let script = "#!/bin/sh\nsed -i 's/draft/final/' \"$1\"\n";
    let editor = executable(&dir, "fake-editor.sh", script);
    let out = crate::support::toolhost_command()
        .args(["call", "edit_text", r#"{"text": "a draft"}"#, "--plugins"])
        .arg(dir.path())
        .env("EDITOR", &editor)
        .env_remove("VISUAL")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim_end(), "a final");
}

#[test]
fn an_interactive_call_past_its_timeout_is_cancelled_and_its_editor_killed() {
    let dir = PluginDir::with(&["toolhost_utils"]);
    // `exec`, so that killing the editor kills the one process holding our stdout.
    let editor = executable(&dir, "slow-editor.sh", "#!/bin/sh\nexec sleep 60\n");
    let started = std::time::Instant::now();
    let out = crate::support::toolhost_command()
        .args([
            "call",
            "edit_text",
            r#"{"text": "x"}"#,
            "--timeout",
            "0.5",
            "--plugins",
        ])
        .arg(dir.path())
        .env("EDITOR", &editor)
        .env_remove("VISUAL")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("timed out"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "the editor was killed instead of running its 60 s"
    );
}

#[test]
fn check_prints_a_good_plugin_and_fails_on_a_bad_one() {
    let good = toolhost(&["check", so("hello_tools").to_str().expect("utf-8")]);
    assert!(good.status.success(), "{}", text(&good.stderr));
    let out = text(&good.stdout);
    assert!(
        out.contains("hello 0.3.1") && out.contains("greet (read)"),
        "{out}"
    );

    let bad = toolhost(&["check", so("fixture_abort").to_str().expect("utf-8")]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(text(&bad.stderr).contains("panic = \"abort\""));

    let partly = toolhost(&["check", so("fixture_basic").to_str().expect("utf-8")]);
    assert_eq!(
        partly.status.code(),
        Some(1),
        "a tool with broken metadata fails the check"
    );
    assert!(
        text(&partly.stderr).contains("bad_metadata"),
        "{}",
        text(&partly.stderr)
    );
}

#[test]
fn every_command_has_help() {
    for cmd in [
        &["--help"][..],
        &["list", "--help"],
        &["call", "--help"],
        &["check", "--help"],
    ] {
        let out = toolhost(cmd);
        assert!(out.status.success());
        assert!(text(&out.stdout).contains("Usage"));
    }
}

/// A tool with a name and schema of the test's choosing, as `fixture-stumbles` exports.
struct Shaped(String, Value);

impl toolhost_plugin_api::Tool for Shaped {
    fn name(&self) -> &str {
        &self.0
    }
    fn description(&self) -> &str {
        "A tool with a name and schema of the test's choosing."
    }
    fn schema(&self) -> Value {
        self.1.clone()
    }
    fn risk(&self) -> toolhost_plugin_api::Risk {
        toolhost_plugin_api::Risk::Read
    }
    async fn call(
        &self,
        _ctx: &toolhost_plugin_api::ToolContext<'_>,
        _args: Value,
    ) -> Result<String, toolhost_plugin_api::ToolError> {
        Ok(String::new())
    }
}

/// What a third-party author's `cargo test` passed and `toolhost check` refused: the host
/// refuses each of fixture-stumbles' bad tools with the message the plugin test harness
/// gives for the same tool (one shared check), marks it `refused:`, and serves the rest
/// with their requirements and argument schema.
#[test]
fn check_refuses_what_the_harness_refuses_with_the_same_messages() {
    let file = so("fixture_stumbles");
    let out = toolhost(&["check", "--json", file.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("json");
    let problems: Vec<&str> = report["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let object = serde_json::json!({"type": "object"});
    let harness_refuses = [
        Shaped("Search Notes".into(), object.clone()),
        Shaped(String::new(), object.clone()),
        Shaped("n".repeat(77), object.clone()),
        Shaped(
            "strnig".into(),
            serde_json::json!({"type": "object", "properties": {"query": {"type": "strnig"}}}),
        ),
        Shaped(
            "listy".into(),
            serde_json::json!({"type": "array", "items": {}}),
        ),
    ];
    let mut expected: Vec<String> = harness_refuses
        .iter()
        .map(|tool| {
            let host = toolhost_plugin_api::testing::TestHost::new();
            let refused = std::panic::catch_unwind(|| host.describe(tool));
            let message = toolhost_plugin_api::take_message(refused.expect_err("refused"));
            message
                .strip_prefix("a host would not load this tool: ")
                .unwrap_or_else(|| panic!("{message}"))
                .to_owned()
        })
        .collect();
    assert!(
        expected[3].contains("at /properties/query/type: "),
        "{}",
        expected[3]
    );
    // What `testing::check_plugin` says of the export list as a whole.
    expected.push("creating tool #8 (`Search::new()`) panicked: the index file is missing".into());
    expected.push(
        "plugin 'stumbles' exports two tools named 'search_notes' (#1 and #7); rename one".into(),
    );
    let expected: Vec<String> = expected
        .into_iter()
        .map(|m| format!("{m}; the tool would be left out"))
        .collect();
    assert_eq!(problems, expected);
    let tools = report["tools"].as_array().expect("tools");
    let refused: Vec<&str> = tools.iter().filter_map(|t| t["refused"].as_str()).collect();
    assert_eq!(refused.len(), 7, "{tools:?}");
    assert_eq!(tools.len(), 11, "{tools:?}");
    let served = tools
        .iter()
        .find(|t| t["name"] == "search_notes")
        .expect("search_notes is served");
    assert_eq!(served["schema"], object);
    assert_eq!(
        served["requirements"],
        serde_json::json!({"env": [], "programs": [], "workspace": false})
    );

    let out = toolhost(&["check", file.to_str().expect("utf-8")]);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("tools:       11 (7 refused)")
            && stdout
                .contains("  refused: plugin 'stumbles' exports two tools named 'search_notes'")
            && stdout.contains("    arguments: {\"type\":\"object\"}")
            && stdout.contains("    requires:  nothing"),
        "{stdout}"
    );
}

/// tokio's timer used inside a plugin panics ("there is no reactor running"); the host
/// says what to use instead, in process and in a worker (`--isolate`).
#[test]
fn a_tool_using_tokio_gets_the_hint_towards_the_context_services_in_any_mode() {
    let dir = PluginDir::with(&["fixture_stumbles"]);
    let d = dir.path();
    let d = d.to_str().expect("utf-8");
    for mode in [&[][..], &["--isolate"][..]] {
        let mut args = vec!["call", "tokio_sleep", "{}", "--yes", "--plugins", d];
        args.extend_from_slice(mode);
        let out = toolhost(&args);
        assert_eq!(out.status.code(), Some(1), "{mode:?}");
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(
            all.contains("tool 'tokio_sleep' panicked: ")
                && all.contains("there is no reactor running")
                && all.contains(
                    "(a plugin has no tokio runtime: use ctx.sleep for timers and \
                     ctx.blocking for blocking work)"
                ),
            "{mode:?}: {all}"
        );
    }
}

/// `[plugins.NAME.settings]` (any TOML) reaches the plugin's `ctx.settings()`, in process
/// and in a worker; a plugin without the table gets `{}`; a call with no profile gets them
/// too (they are the plugin's, not the profile's).
#[test]
fn plugin_settings_from_the_config_reach_the_plugin_in_process_and_in_a_worker() {
    let dir = PluginDir::with(&["fixture_stumbles"]);
    let d = dir.path();
    let d = d.to_str().expect("utf-8");
    let work = tempfile::tempdir().expect("temp dir");
    let with = work.path().join("with.toml");
    std::fs::write(
        &with,
        "[plugins.stumbles.settings]\nunits = \"metric\"\nretries = 3\n\
         [plugins.stumbles.settings.api]\nurls = [\"a\", \"b\"]\n\
         [plugins.other.settings]\nsecret = \"not for stumbles\"\n",
    )
    .expect("write config");
    let without = work.path().join("without.toml");
    std::fs::write(&without, "").expect("write config");
    for mode in [&[][..], &["--isolate"][..]] {
        for (config, expected) in [
            (
                &with,
                serde_json::json!({"units": "metric", "retries": 3, "api": {"urls": ["a", "b"]}}),
            ),
            (&without, serde_json::json!({})),
        ] {
            let config = config.to_str().expect("utf-8");
            let mut args = vec![
                "--config",
                config,
                "call",
                "settings_echo",
                "{}",
                "--yes",
                "--plugins",
                d,
            ];
            args.extend_from_slice(mode);
            let out = toolhost(&args);
            assert!(out.status.success(), "{mode:?}: {}", text(&out.stderr));
            let got: Value = serde_json::from_str(text(&out.stdout).trim()).expect("json");
            assert_eq!(got, expected, "{mode:?}");
        }
    }
    // A path in the settings is relative to the config file's folder, whatever folder
    // toolhost runs in, in process and in a worker; `~/` is the host user's home.
    std::fs::create_dir_all(work.path().join("data")).expect("data folder");
    std::fs::write(work.path().join("data/note.txt"), "the note").expect("note");
    let paths = work.path().join("paths.toml");
    let config_dir = work.path().to_path_buf();
    let elsewhere = tempfile::tempdir().expect("another folder");
    let home = tempfile::tempdir().expect("a home");
    for (written, expected) in [
        ("data/note.txt", config_dir.join("data/note.txt")),
        ("~/x/note.txt", home.path().join("x/note.txt")),
        ("/srv/note.txt", PathBuf::from("/srv/note.txt")),
    ] {
        std::fs::write(
            &paths,
            format!("[plugins.stumbles.settings]\nfile = \"{written}\"\n"),
        )
        .expect("write config");
        for mode in [&[][..], &["--isolate"][..]] {
            let out = crate::support::toolhost_command()
                .current_dir(elsewhere.path())
                .env("HOME", home.path())
                .arg("--config")
                .arg(&paths)
                .args(["call", "settings_file", "{}", "--yes", "--plugins", d])
                .args(mode)
                .output()
                .expect("toolhost call");
            assert!(out.status.success(), "{mode:?}: {}", text(&out.stderr));
            let got: Value = serde_json::from_str(text(&out.stdout).trim()).expect("json");
            assert_eq!(
                got["path"],
                serde_json::json!(expected),
                "{written} {mode:?}: {got}"
            );
            if mode.is_empty() && written == "data/note.txt" {
                assert_eq!(got["content"], "the note", "{got}");
            }
        }
    }
    // A key that is not a plugin's settings table is named.
    let bad = work.path().join("bad.toml");
    std::fs::write(&bad, "[plugins.stumbles]\nsetings = {}\n").expect("write config");
    let out = toolhost(&[
        "--config",
        bad.to_str().expect("utf-8"),
        "list",
        "--plugins",
        d,
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("unknown key `plugins.stumbles.setings`"),
        "{}",
        text(&out.stderr)
    );
}

/// A plugin that names its settings type in `export_plugin!` (the example's
/// `HelloSettings`) has its `[plugins.NAME.settings]` checked when it loads, in process and
/// in a worker: settings that do not fit refuse the load, naming the table and the
/// problem; a key it does not read is a warning, and the plugin loads and reads the rest.
#[test]
fn declared_plugin_settings_are_checked_at_load_in_process_and_in_a_worker() {
    let dir = PluginDir::with(&["hello_tools"]);
    let d = dir.path();
    let d = d.to_str().expect("utf-8");
    let file = dir.path().join("libhello_tools.so");
    let file = file.to_str().expect("utf-8");
    let work = tempfile::tempdir().expect("temp dir");
    let good = work.path().join("good.toml");
    std::fs::write(
        &good,
        "[plugins.hello.settings]\nlanguage = \"fr\"\nlangauge = \"de\"\n",
    )
    .expect("write config");
    let bad = work.path().join("bad.toml");
    std::fs::write(&bad, "[plugins.hello.settings]\nlanguage = \"es\"\n").expect("write config");
    let (good, bad) = (good.to_str().expect("utf-8"), bad.to_str().expect("utf-8"));
    // `toolhost --config CONFIG ARGS.. MODE..`.
    let run = |config: &str, args: &[&str], mode: &[&str]| {
        let mut all = vec!["--config", config];
        all.extend_from_slice(args);
        all.extend_from_slice(mode);
        toolhost(&all)
    };
    let greet = [
        "call",
        "greet",
        r#"{"name": "Ada"}"#,
        "--yes",
        "--plugins",
        d,
    ];
    for mode in [&[][..], &["--isolate"][..]] {
        // Loads, reads the setting, and warns about the key it does not read.
        let out = run(good, &["check", file], mode);
        let shown = text(&out.stdout);
        assert!(
            out.status.success(),
            "{mode:?}: {shown}{}",
            text(&out.stderr)
        );
        assert!(
            shown.contains("settings:    declared (language)"),
            "{mode:?}: {shown}"
        );
        assert!(
            shown.contains(
                "warning:     [plugins.hello.settings] (in "
            ) && shown.contains(
                "key 'langauge' is not a setting of this plugin (it reads: language); it is ignored"
            ),
            "{mode:?}: {shown}"
        );
        let out = run(good, &greet, mode);
        assert!(out.status.success(), "{mode:?}: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout).trim(), "Bonjour, Ada!", "{mode:?}");

        // Refused at load, before any call, naming the table and what does not fit.
        let out = run(bad, &["check", file], mode);
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(!out.status.success(), "{mode:?}: {all}");
        assert!(
            all.contains("its settings do not fit the settings schema it declares: /language: ")
                && all.contains("fix [plugins.hello.settings] in the host's config"),
            "{mode:?}: {all}"
        );
        let out = run(bad, &greet, mode);
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(!out.status.success(), "{mode:?}: {all}");
        assert!(all.contains("[plugins.hello.settings]"), "{mode:?}: {all}");
    }
}

/// `toolhost token add NAME > file`: the token goes to the file alone; stderr (a terminal
/// someone may look over, or a log) gets a note without it.
#[test]
fn token_add_with_stdout_redirected_prints_the_token_on_stdout_only() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = crate::support::toolhost_command()
        .args(["token", "add", "laptop"])
        .env("XDG_STATE_HOME", dir.path().join("state"))
        .output()
        .expect("toolhost token add");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let token = stdout.trim();
    assert!(token.starts_with("thk_"), "{stdout}");
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(
        !stderr.contains(token),
        "the token leaked to stderr: {stderr}"
    );
    assert!(
        stderr.contains("token 'laptop' made") && stderr.contains("on stdout only"),
        "{stderr}"
    );
}
