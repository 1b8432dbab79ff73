//! The doors of issue 10 that are not HTTP or plugin files, tried as an attacker on the
//! same machine would (a second real user where it matters): the control socket checks
//! both ends, state files are private, `write_file` cannot be redirected by a planted
//! link, and output to a closed pipe ends quietly with exit 0.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde_json::json;

use crate::support::{OtherUser, PluginDir, serve_command, toolhost_command, wait_until};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .mode()
        & 0o7777
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}

/// A `toolhost serve` child, killed when dropped; its log goes to a file.
struct Served {
    child: Child,
    socket: PathBuf,
    log: PathBuf,
}

impl Served {
    fn start(plugins: &Path, socket: &Path, log: &Path) -> Served {
        let child = serve_command(plugins, socket)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).expect("log file"))
            .spawn()
            .expect("start toolhost serve");
        let mut served = Served {
            child,
            socket: socket.to_path_buf(),
            log: log.to_path_buf(),
        };
        wait_until("the control socket answering", || {
            assert!(
                served.child.try_wait().expect("wait").is_none(),
                "toolhost serve exited: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
            std::os::unix::net::UnixStream::connect(socket).is_ok()
        });
        served
    }

    fn toolhost(&self, args: &[&str]) -> Output {
        toolhost_command()
            .args(args)
            .arg("--control")
            .arg(&self.socket)
            .output()
            .expect("run toolhost")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `toolhost` run as `user`, with a config home it cannot read replaced by a missing one
/// (so it runs on the defaults).
fn as_user(user: &OtherUser, args: &[&str], socket: &Path) -> Output {
    user.command(env!("CARGO_BIN_EXE_toolhost"))
        .args(args)
        .arg("--control")
        .arg(socket)
        .env("XDG_CONFIG_HOME", "/nonexistent/toolhost-test-config")
        .env_remove("TOOLHOST_PLUGINS")
        .output()
        .expect("run toolhost as the other user")
}

/// A folder the other user can pass through (but not list or write).
fn traversable_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    chmod(dir.path(), 0o711);
    dir
}

#[test]
fn another_user_is_refused_by_the_control_socket_and_the_owner_keeps_being_served() {
    let Some(other) = OtherUser::create("another_user_is_refused_by_the_control_socket") else {
        return;
    };
    let plugins = PluginDir::with(&["hello_tools"]);
    let sockets = traversable_dir();
    let socket = sockets.path().join("control.sock");
    let logs = tempfile::tempdir().expect("temp dir");
    let host = Served::start(&plugins.path(), &socket, &logs.path().join("serve.log"));
    assert_eq!(mode(&socket), 0o600);

    // With the default mode the kernel refuses the connect: a clear "permission denied"
    // that names the socket, not "no toolhost is listening".
    let out = as_user(&other, &["status"], &socket);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("permission denied"), "{stderr}");
    assert!(stderr.contains(&socket.display().to_string()), "{stderr}");
    assert!(!stderr.contains("no toolhost is listening"), "{stderr}");

    // Opened wide by mistake: SO_PEERCRED is what refuses now.
    chmod(&socket, 0o666);
    for args in [&["status"][..], &["call", "greet", r#"{"name": "X"}"#]] {
        let out = as_user(&other, args, &socket);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("permission denied: this toolhost serves only uid 0 and root"),
            "{args:?}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    }
    wait_until("the refusal in the log", || {
        host.log().contains("refused a control connection")
    });
    let log = host.log();
    assert!(
        log.contains(&format!("uid={}", other.uid)) && log.contains("pid="),
        "{log}"
    );
    // No call ran for the other user.
    let status = host.toolhost(&["status", "--json"]);
    assert!(status.status.success(), "{}", text(&status.stderr));
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).expect("JSON");
    let greet = status["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["name"] == "greet")
        .map_or(json!(0), |t| t["calls"].clone());
    assert_eq!(greet, 0, "{status}");
    // The owner is still served.
    let call = host.toolhost(&["call", "greet", r#"{"name": "Owner"}"#]);
    assert_eq!(
        text(&call.stdout).trim(),
        "Hello, Owner!",
        "{}",
        text(&call.stderr)
    );
}

/// The other user's Python listener: records every byte each connection sends (one line
/// per connection, hex) until a connection says `SENTINEL`, then exits.
const RECORDER: &str = r#"
import socket, sys
path, record = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
s.listen(8)
s.settimeout(60)
seen = []
while True:
    c, _ = s.accept()
    c.settimeout(10)
    data = b""
    try:
        while True:
            chunk = c.recv(4096)
            if not chunk:
                break
            data += chunk
            if b"SENTINEL" in data:
                break
    except socket.timeout:
        pass
    c.close()
    seen.append(data.hex())
    if b"SENTINEL" in data:
        break
with open(record, "w") as f:
    f.write("\n".join(seen) + "\n")
"#;

fn python() -> Option<&'static str> {
    ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| Path::new(p).exists())
}

#[test]
fn the_client_sends_nothing_to_a_socket_another_user_planted() {
    let test = "the_client_sends_nothing_to_a_socket_another_user_planted";
    let Some(python) = python() else {
        eprintln!("skipping {test}: no python3 in /usr/bin or /usr/local/bin");
        return;
    };
    let Some(other) = OtherUser::create(test) else {
        return;
    };
    // A shared folder the other user owns (like a socket planted in a shared $TMPDIR).
    let shared = tempfile::tempdir().expect("temp dir");
    other.chown(shared.path());
    let socket = shared.path().join("control.sock");
    let record = shared.path().join("record");
    let mut listener = other
        .command(python)
        .arg("-c")
        .arg(RECORDER)
        .arg(&socket)
        .arg(&record)
        .spawn()
        .expect("start the other user's listener");
    wait_until("the planted socket", || socket.exists());
    assert_eq!(
        std::fs::symlink_metadata(&socket).expect("socket").uid(),
        other.uid
    );

    // Root trusts only sockets owned by itself (or root).
    let out = toolhost_command()
        .args(["status", "--control"])
        .arg(&socket)
        .output()
        .expect("run");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "a socket owned by uid {} ({}) is at {}: it is not your toolhost",
            other.uid,
            other.name,
            socket.display()
        )),
        "{stderr}"
    );

    // The file given to root: the process behind it still runs as the other user.
    std::os::unix::fs::lchown(&socket, Some(0), Some(0)).expect("chown the socket");
    let out = toolhost_command()
        .args(["call", "greet", "{}", "--control"])
        .arg(&socket)
        .output()
        .expect("run");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("runs as uid {} ({})", other.uid, other.name))
            && stderr.contains("not your toolhost"),
        "{stderr}"
    );

    // The last connection ends the listener; it saw nothing from toolhost.
    {
        use std::io::Write as _;
        let mut last =
            std::os::unix::net::UnixStream::connect(&socket).expect("connect to the listener");
        last.write_all(b"SENTINEL").expect("write");
    }
    wait_until("the listener finishing", || {
        listener.try_wait().expect("wait").is_some()
    });
    let seen = std::fs::read_to_string(&record).expect("the listener's record");
    let sentinel: String = b"SENTINEL".iter().map(|b| format!("{b:02x}")).collect();
    let lines: Vec<&str> = seen.lines().collect();
    // The peer check connected (and sent nothing); the owner check never connected.
    assert_eq!(lines, ["", sentinel.as_str()], "{seen}");
}

/// A config whose profiles live in `work/profiles`, and the profiles' folders made.
fn profiles_config(work: &Path, profiles: &[&str]) -> PathBuf {
    let config = work.join("config.toml");
    std::fs::write(
        &config,
        format!("profiles_dir = {:?}\n", work.join("profiles")),
    )
    .expect("config");
    for name in profiles {
        let dir = work.join("profiles").join(name);
        std::fs::create_dir_all(&dir).expect("profile dir");
        std::fs::write(dir.join("config.toml"), "").expect("profile config");
    }
    config
}

#[test]
fn state_folders_are_0700_and_memory_files_0600_and_wider_ones_are_narrowed() {
    let plugins = PluginDir::with(&["toolhost_memory"]);
    let work = tempfile::tempdir().expect("temp dir");
    let config = profiles_config(work.path(), &["fresh", "old"]);
    let call = |profile: &str, args: &str| {
        toolhost_command()
            .arg("--config")
            .arg(&config)
            .args(["call", "memory", args, "--profile", profile, "--plugins"])
            .arg(plugins.path())
            .output()
            .expect("run toolhost")
    };

    let out = call(
        "fresh",
        r#"{"action": "add", "text": "the door code is 4711"}"#,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let state = crate::support::profile_state("fresh");
    assert_eq!(mode(&state), 0o700);
    assert_eq!(mode(&state.join("memory.json")), 0o600);
    assert_eq!(mode(&state.join("memory.lock")), 0o600);
    let names: Vec<String> = std::fs::read_dir(&state)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| n == "memory.json" || n == "memory.lock"),
        "no temporary file is left: {names:?}"
    );

    // State written by an earlier version (beside its config), open to everyone: moved
    // to the state home, then narrowed there.
    let old = work.path().join("profiles/old/state");
    std::fs::create_dir_all(&old).expect("state");
    chmod(&old, 0o755);
    std::fs::write(
        old.join("memory.json"),
        r#"{"next_id": 1, "notes": [{"id": 1, "text": "kept", "created": "2026-01-01T00:00:00Z"}]}"#,
    )
    .expect("notes");
    chmod(&old.join("memory.json"), 0o644);
    std::fs::write(old.join("memory.lock"), "").expect("lock");
    chmod(&old.join("memory.lock"), 0o666);
    let out = call("old", r#"{"action": "list"}"#);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(text(&out.stdout).contains("kept"), "{}", text(&out.stdout));
    assert!(!old.exists(), "the old state folder was moved");
    let old = crate::support::profile_state("old");
    assert_eq!(mode(&old), 0o700);
    assert_eq!(mode(&old.join("memory.json")), 0o600);
    assert_eq!(mode(&old.join("memory.lock")), 0o600);
    for what in ["state", "memory.json", "memory.lock"] {
        assert!(
            stderr
                .lines()
                .any(|l| l.contains("narrowed the mode of") && l.contains(what)),
            "{what}: {stderr}"
        );
    }
}

/// `toolhost run PROMPT` with a fresh profiles config in `work`, against the scripted
/// model server at `url`.
fn run_command(work: &Path, plugins: &PluginDir, url: &str, prompt: &str) -> Command {
    let config = profiles_config(work, &[]);
    let mut cmd = toolhost_command();
    cmd.arg("--config")
        .arg(&config)
        .args(["run", prompt, "--plugins"])
        .arg(plugins.path())
        .env("TOOLHOST_MODEL_BASE_URL", url)
        .env("TOOLHOST_MODEL", "scripted")
        .env_remove("TOOLHOST_API_KEY")
        .env_remove("OPENAI_API_KEY");
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_database_of_a_run_is_0600_in_a_0700_folder() {
    let server = crate::support::model::ModelServer::scripted(vec![crate::support::model::text(
        "private answer",
    )])
    .await;
    let plugins = PluginDir::with(&["fixture_echo"]);
    let work = tempfile::tempdir().expect("temp dir");
    let mut cmd = run_command(work.path(), &plugins, &server.url, "say something");
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("run"))
        .await
        .expect("joined");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "private answer");
    let state = crate::support::profile_state("default");
    assert_eq!(mode(&state), 0o700);
    let db = crate::support::profile_sessions("default");
    let folder = db.parent().expect("the sessions folder").to_path_buf();
    assert_eq!(mode(&folder), 0o700);
    assert_eq!(mode(&db), 0o600);
    for side in ["sessions.sqlite3-wal", "sessions.sqlite3-shm"] {
        if folder.join(side).exists() {
            assert_eq!(mode(&folder.join(side)), 0o600, "{side}");
        }
    }
}

/// `toolhost call write_file ARGS --yes` with the utils plugin.
fn write_file(plugins: &PluginDir, args: serde_json::Value) -> Output {
    toolhost_command()
        .args(["call", "write_file"])
        .arg(args.to_string())
        .args(["--yes", "--plugins"])
        .arg(plugins.path())
        .output()
        .expect("run toolhost")
}

#[test]
fn write_file_through_a_planted_temp_name_link_leaves_the_victim_alone() {
    let plugins = PluginDir::with(&["toolhost_utils"]);
    let shared = tempfile::tempdir().expect("temp dir");
    let elsewhere = tempfile::tempdir().expect("temp dir");
    let victim = elsewhere.path().join("victim");
    std::fs::write(&victim, "precious").expect("victim");
    let target = shared.path().join("notes.txt");
    std::fs::write(&target, "old notes").expect("target");
    chmod(&target, 0o600);
    // The attack of issue 10: the old temporary name was `.NAME.toolhost-tmp-PID`, so an
    // attacker planted links under it for the pids about to be used.
    let last: u32 = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1);
    for pid in last..last + 2000 {
        std::os::unix::fs::symlink(
            &victim,
            shared.path().join(format!(".notes.txt.toolhost-tmp-{pid}")),
        )
        .expect("plant a link");
    }
    let out = write_file(
        &plugins,
        json!({"path": target, "content": "new notes", "mode": "overwrite"}),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "precious"
    );
    assert_eq!(
        std::fs::read_to_string(&target).expect("target"),
        "new notes"
    );
    assert!(
        std::fs::symlink_metadata(&target)
            .expect("target")
            .is_file()
    );
    assert_eq!(mode(&target), 0o600, "an existing 0600 file stays 0600");
    // Nothing is left but the target and the planted links.
    let left = std::fs::read_dir(shared.path())
        .expect("list")
        .filter(|e| {
            let name = e.as_ref().expect("entry").file_name();
            let name = name.to_string_lossy();
            name != "notes.txt" && !name.starts_with(".notes.txt.toolhost-tmp-")
        })
        .count();
    assert_eq!(left, 0);

    // Other modes are kept too, set-id bits aside (root keeps them as owner and group come
    // across).
    let script = shared.path().join("run.sh");
    std::fs::write(&script, "#!/bin/sh\n").expect("script");
    chmod(&script, 0o750);
    let out = write_file(
        &plugins,
        json!({"path": script, "content": "#!/bin/sh\necho hi\n", "mode": "overwrite"}),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(mode(&script), 0o750);
}

#[test]
fn write_file_refuses_a_symlink_at_the_path_unless_asked_to_follow_it() {
    let plugins = PluginDir::with(&["toolhost_utils"]);
    let dir = tempfile::tempdir().expect("temp dir");
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious").expect("victim");
    chmod(&victim, 0o640);
    let link = dir.path().join("link.txt");
    std::os::unix::fs::symlink(&victim, &link).expect("link");
    for mode in ["overwrite", "append", "create"] {
        let out = write_file(
            &plugins,
            json!({"path": link, "content": "evil", "mode": mode}),
        );
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{mode}: {stderr}");
        assert!(
            stderr.contains("is a symbolic link") && stderr.contains("follow_symlinks"),
            "{mode}: {stderr}"
        );
        assert_eq!(
            std::fs::read_to_string(&victim).expect("victim"),
            "precious"
        );
    }
    // A dangling link is refused too: `create` never makes the file it points to.
    let nowhere = dir.path().join("nowhere");
    let dangling = dir.path().join("dangling.txt");
    std::os::unix::fs::symlink(&nowhere, &dangling).expect("link");
    let out = write_file(&plugins, json!({"path": dangling, "content": "x"}));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(!nowhere.exists());

    // Asked to follow: the link's target is written and the link kept.
    let out = write_file(
        &plugins,
        json!({"path": link, "content": "replaced", "mode": "overwrite", "follow_symlinks": true}),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "replaced"
    );
    assert!(
        std::fs::symlink_metadata(&link)
            .expect("link")
            .file_type()
            .is_symlink()
    );
    assert_eq!(mode(&victim), 0o640);
    let out = write_file(
        &plugins,
        json!({"path": link, "content": "+more", "mode": "append", "follow_symlinks": true}),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "replaced+more"
    );
}

#[test]
fn write_file_keeps_the_owner_of_a_file_it_overwrites() {
    let Some(other) = OtherUser::create("write_file_keeps_the_owner_of_a_file_it_overwrites")
    else {
        return;
    };
    let plugins = PluginDir::with(&["toolhost_utils"]);
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("theirs.txt");
    std::fs::write(&file, "theirs").expect("file");
    other.chown(&file);
    chmod(&file, 0o640);
    let out = write_file(
        &plugins,
        json!({"path": file, "content": "updated", "mode": "overwrite"}),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let meta = std::fs::metadata(&file).expect("file");
    assert_eq!((meta.uid(), meta.gid()), (other.uid, other.gid));
    assert_eq!(meta.mode() & 0o7777, 0o640);
    assert_eq!(std::fs::read_to_string(&file).expect("file"), "updated");
}

/// A stdout whose reader is already gone: every write gets EPIPE.
fn closed_pipe() -> Stdio {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    Stdio::from(writer)
}

/// Runs `cmd` with a closed stdout: it must exit 0 and say nothing about it.
fn quiet_on_a_closed_pipe(mut cmd: Command, what: &str) {
    let out = cmd
        .stdout(closed_pipe())
        .stderr(Stdio::piped())
        .output()
        .expect("run toolhost");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{what}: {stderr}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
        "{what}: {stderr}"
    );
}

#[test]
fn output_to_a_closed_pipe_ends_quietly_with_exit_0() {
    let plugins = PluginDir::with(&["toolhost_utils"]);
    let mut list = toolhost_command();
    list.args(["list", "--plugins"]).arg(plugins.path());
    quiet_on_a_closed_pipe(list, "list");
    let mut json = toolhost_command();
    json.args(["list", "--json", "--plugins"])
        .arg(plugins.path());
    quiet_on_a_closed_pipe(json, "list --json");
    let mut call = toolhost_command();
    call.args(["call", "text_stats", r#"{"text": "a b"}"#, "--plugins"])
        .arg(plugins.path());
    quiet_on_a_closed_pipe(call, "call");
    let mut check = toolhost_command();
    check
        .arg("check")
        .arg(plugins.path().join("libtoolhost_utils.so"));
    quiet_on_a_closed_pipe(check, "check");
    let mut help = toolhost_command();
    help.arg("--help");
    quiet_on_a_closed_pipe(help, "--help");

    // As people write it: the first line only, with the pipeline's status checked.
    let out = Command::new("bash")
        .arg("-c")
        .arg(r#"set -o pipefail; "$0" list --plugins "$1" | head -1"#)
        .arg(env!("CARGO_BIN_EXE_toolhost"))
        .arg(plugins.path())
        .env("XDG_CONFIG_HOME", crate::support::empty_config_home())
        .output()
        .expect("bash");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("NAME"),
        "{}",
        text(&out.stdout)
    );
    assert!(!text(&out.stderr).contains("panicked"));

    // A long output (more than a pipe holds) cut after one byte.
    let long = "x".repeat(100_000);
    let args = json!({"json": json!({"a": long}).to_string(), "pointer": "/a"}).to_string();
    let out = Command::new("bash")
        .arg("-c")
        .arg(r#"set -o pipefail; "$0" call json_query "$1" --plugins "$2" | head -c 1"#)
        .arg(env!("CARGO_BIN_EXE_toolhost"))
        .arg(&args)
        .arg(plugins.path())
        .env("XDG_CONFIG_HOME", crate::support::empty_config_home())
        .output()
        .expect("bash");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "\"");
    assert!(
        !text(&out.stderr).contains("panicked"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn output_of_the_control_clients_to_a_closed_pipe_ends_quietly_with_exit_0() {
    let plugins = PluginDir::with(&["hello_tools"]);
    let sockets = tempfile::tempdir().expect("temp dir");
    let socket = sockets.path().join("control.sock");
    let _host = Served::start(&plugins.path(), &socket, &sockets.path().join("serve.log"));
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["reload"],
        &["reload", "--json"],
        &["call", "greet", r#"{"name": "Pipe"}"#],
    ] {
        let mut cmd = toolhost_command();
        cmd.args(args).arg("--control").arg(&socket);
        quiet_on_a_closed_pipe(cmd, &args.join(" "));
    }
    let out = Command::new("bash")
        .arg("-c")
        .arg(r#"set -o pipefail; "$0" status --control "$1" | head -1"#)
        .arg(env!("CARGO_BIN_EXE_toolhost"))
        .arg(&socket)
        .env("XDG_CONFIG_HOME", crate::support::empty_config_home())
        .output()
        .expect("bash");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("toolhost pid"),
        "{}",
        text(&out.stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_answer_of_run_to_a_closed_pipe_ends_quietly_with_exit_0() {
    let server = crate::support::model::ModelServer::scripted(vec![crate::support::model::text(
        "an answer",
    )])
    .await;
    let plugins = PluginDir::with(&["fixture_echo"]);
    let work = tempfile::tempdir().expect("temp dir");
    let cmd = run_command(work.path(), &plugins, &server.url, "hello");
    tokio::task::spawn_blocking(move || quiet_on_a_closed_pipe(cmd, "run"))
        .await
        .expect("no failure");
    assert_eq!(server.count(), 1, "the turn ran");
}
