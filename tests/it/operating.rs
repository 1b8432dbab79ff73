//! What an operator uses around the host, through the binary: completion scripts and the
//! manual page (made without a config, even a broken one), JSON logs, `--json` results,
//! `sessions list|show`, a tool's progress on the terminal during `call`, and the chat's
//! line editing with a history that lasts across chats (on a pseudo-terminal).

use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

use crate::support::model::{ModelServer, calls, text};
use crate::support::{PluginDir, toolhost_command};

fn out(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn completions_and_the_manual_come_from_the_command_line_and_need_no_config() {
    let dir = tempfile::tempdir().expect("temp dir");
    let broken = dir.path().join("broken.toml");
    std::fs::write(&broken, "this is = = not toml").expect("config");
    for shell in ["bash", "zsh", "fish"] {
        let made = toolhost_command()
            .arg("--config")
            .arg(&broken)
            .args(["completions", shell])
            .output()
            .expect("toolhost completions");
        assert!(made.status.success(), "{shell}: {}", out(&made.stderr));
        let script = out(&made.stdout);
        for word in ["toolhost", "serve", "sessions", "completions", "workspace"] {
            assert!(script.contains(word), "{shell} lacks {word}");
        }
    }
    let bash = toolhost_command()
        .args(["completions", "bash"])
        .output()
        .expect("bash");
    // The script is valid bash.
    let check = Command::new("bash")
        .args(["-n", "-c", &out(&bash.stdout)])
        .output()
        .expect("bash -n");
    assert!(check.status.success(), "{}", out(&check.stderr));

    let man = toolhost_command()
        .arg("--config")
        .arg(&broken)
        .arg("man")
        .output()
        .expect("toolhost man");
    assert!(man.status.success(), "{}", out(&man.stderr));
    let page = out(&man.stdout);
    assert!(page.contains(".TH toolhost 1"), "{page}");
    assert!(
        page.contains("serve") && page.contains("sessions"),
        "{page}"
    );
    let bad = toolhost_command()
        .args(["completions", "tcsh"])
        .output()
        .expect("tcsh");
    assert_eq!(
        bad.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

#[test]
fn json_logs_are_one_object_per_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("config.toml");
    // A setting that is logged as a warning at start.
    std::fs::write(&config, "[plugins]\nstrict_permissions = false\n").expect("config");
    let plugins = PluginDir::with(&["toolhost_utils"]);
    let run = |format: &str| {
        toolhost_command()
            .arg("--config")
            .arg(&config)
            .args(["list", "--plugins"])
            .arg(plugins.path())
            .env("TOOLHOST_LOG_FORMAT", format)
            .output()
            .expect("toolhost list")
    };
    let json_log = run("json");
    assert!(json_log.status.success(), "{}", out(&json_log.stderr));
    let lines: Vec<Value> = out(&json_log.stderr)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    let warning = lines
        .iter()
        .find(|l| l["level"] == "WARN")
        .unwrap_or_else(|| panic!("no warning in {}", out(&json_log.stderr)));
    assert!(
        warning["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("strict_permissions")),
        "{warning}"
    );
    assert!(warning["timestamp"].is_string(), "{warning}");
    let text_log = run("text");
    assert!(
        out(&text_log.stderr).contains("WARN") && !out(&text_log.stderr).contains("{\"timestamp\""),
        "{}",
        out(&text_log.stderr)
    );
}

#[test]
fn a_tools_progress_shows_on_stderr_during_call() {
    let plugins = PluginDir::with(&["hello_tools"]);
    let done = toolhost_command()
        .args([
            "call",
            "countdown",
            r#"{"from": 3, "step_ms": 10}"#,
            "--plugins",
        ])
        .arg(plugins.path())
        .output()
        .expect("toolhost call");
    assert!(done.status.success(), "{}", out(&done.stderr));
    let err = out(&done.stderr);
    assert!(err.contains("progress: 100% (3/3)"), "{err}");
    assert!(err.contains("progress: 0% (0/3)"), "{err}");
}

/// A work folder with a scripted model server: `toolhost ARGS` talks to it.
struct AgentWork {
    dir: tempfile::TempDir,
    plugins: PluginDir,
    server: ModelServer,
}

impl AgentWork {
    async fn new(script: Vec<crate::support::model::Reply>) -> AgentWork {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(
            dir.path().join("config.toml"),
            format!("profiles_dir = {:?}\n", dir.path().join("profiles")),
        )
        .expect("config");
        AgentWork {
            dir,
            plugins: PluginDir::with(&["fixture_echo"]),
            server: ModelServer::scripted(script).await,
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = toolhost_command();
        for var in ["TOOLHOST_API_KEY", "OPENAI_API_KEY"] {
            cmd.env_remove(var);
        }
        cmd.arg("--config")
            .arg(self.dir.path().join("config.toml"))
            .args(args)
            .env("TOOLHOST_MODEL_BASE_URL", &self.server.url)
            .env("TOOLHOST_MODEL", "scripted");
        cmd
    }

    async fn output(&self, args: &[&str], plugins: bool) -> Output {
        let mut cmd = self.command(args);
        if plugins {
            cmd.arg("--plugins").arg(self.plugins.path());
        }
        tokio::task::spawn_blocking(move || cmd.output().expect("toolhost"))
            .await
            .expect("joined")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_listed_and_shown_as_text_and_json() {
    let work = AgentWork::new(vec![
        calls(&[("echo", json!({"text": "from the tool"}))]),
        text("the final answer"),
    ])
    .await;
    let run = work
        .output(&["run", "--json", "use the echo tool"], true)
        .await;
    assert!(run.status.success(), "{}", out(&run.stderr));
    let answer: Value = serde_json::from_slice(&run.stdout).expect("run --json");
    assert_eq!(answer["answer"], "the final answer");
    let session = answer["session"].as_str().expect("a session id").to_owned();

    let list = work.output(&["sessions", "list"], false).await;
    assert!(list.status.success(), "{}", out(&list.stderr));
    let table = out(&list.stdout);
    assert!(table.starts_with("ID"), "{table}");
    assert!(
        table.contains(&session) && table.contains("use the echo tool"),
        "{table}"
    );
    let listed = work.output(&["sessions", "list", "--json"], false).await;
    let listed: Value = serde_json::from_slice(&listed.stdout).expect("list --json");
    assert_eq!(listed[0]["id"], session.as_str());
    assert_eq!(listed[0]["messages"], 4, "{listed}");

    let show = work.output(&["sessions", "show", &session], false).await;
    assert!(show.status.success(), "{}", out(&show.stderr));
    let shown = out(&show.stdout);
    assert!(shown.contains("[user] use the echo tool"), "{shown}");
    assert!(shown.contains("calls") && shown.contains("echo"), "{shown}");
    assert!(shown.contains("from the tool"), "{shown}");
    assert!(shown.contains("[assistant] the final answer"), "{shown}");
    let missing = work
        .output(&["sessions", "show", "no-such-session"], false)
        .await;
    assert!(!missing.status.success());
    assert!(
        out(&missing.stderr).contains("no-such-session"),
        "{}",
        out(&missing.stderr)
    );
}

/// Runs `toolhost ARGS` on a pseudo-terminal (util-linux `script`) with `input` typed.
fn on_a_terminal(work: &AgentWork, args: &str, input: &[u8]) -> Output {
    let cmd = work.command(&[]);
    let envs: Vec<String> = cmd
        .get_envs()
        .filter_map(|(k, v)| Some(format!("{}={}", k.to_str()?, shell_quote(v?.to_str()?))))
        .collect();
    let command = format!(
        "env {} {} --config {} {args} --plugins {}",
        envs.join(" "),
        env!("CARGO_BIN_EXE_toolhost"),
        work.dir.path().join("config.toml").display(),
        work.plugins.path().display()
    );
    let mut child = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("util-linux `script` runs the command on a pseudo-terminal");
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write as _;
        stdin.write_all(input).expect("type");
    }
    child.wait_with_output().expect("wait")
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chat_edits_lines_and_recalls_the_last_chats_prompts() {
    let work = AgentWork::new(vec![
        text("first answer"),
        text("second answer"),
        text("third answer"),
    ])
    .await;
    let first = tokio::task::block_in_place(|| {
        on_a_terminal(
            &work,
            "chat",
            b"what is the first quetion\x08\x08\x08\x08stion\r\r",
        )
    });
    assert!(first.status.success(), "{}", out(&first.stdout));
    assert!(
        out(&first.stdout).contains("first answer"),
        "{}",
        out(&first.stdout)
    );
    // Backspace edited the line before it was sent.
    assert_eq!(
        work.server.request(0)["messages"]
            .as_array()
            .and_then(|m| m.last())
            .map(|m| m["content"].clone()),
        Some(json!("what is the first question"))
    );
    // Beside the conversations, out of the plugins' state folder (a worker may read that).
    let history = crate::support::profile_sessions("default").with_file_name("chat_history");
    assert!(
        !crate::support::profile_state("default")
            .join("chat_history")
            .exists()
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&history)
            .expect("history kept")
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    // The up arrow brings the last chat's prompt back.
    let second = tokio::task::block_in_place(|| on_a_terminal(&work, "chat", b"\x1b[A\r\r"));
    assert!(second.status.success(), "{}", out(&second.stdout));
    assert_eq!(
        work.server.request(1)["messages"]
            .as_array()
            .and_then(|m| m.last())
            .map(|m| m["content"].clone()),
        Some(json!("what is the first question"))
    );
    // A history an older toolhost kept in the state folder is moved out of it, and kept.
    let old = crate::support::profile_state("default").join("chat_history");
    std::fs::rename(&history, &old).expect("put the history where older releases kept it");
    let third = tokio::task::block_in_place(|| on_a_terminal(&work, "chat", b"\x1b[A\r\r"));
    assert!(third.status.success(), "{}", out(&third.stdout));
    assert!(!old.exists(), "moved out of the state folder");
    assert!(history.exists());
    assert_eq!(
        work.server.request(2)["messages"]
            .as_array()
            .and_then(|m| m.last())
            .map(|m| m["content"].clone()),
        Some(json!("what is the first question"))
    );
}
