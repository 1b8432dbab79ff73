//! Approvals that last: "always" (terminal key `a`) kept per profile across restarts,
//! asked again when the plugin file changes, revoked with `toolhost approvals revoke`
//! (a running host notices at its next check); and `toolhost call --control` from a
//! terminal, where the running host asks the person there over the control connection.

use std::io::Write as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde_json::{Value, json};

use crate::support::{
    OtherUser, PluginDir, serve_command, toolhost_command, wait_exit, wait_for_socket,
};

/// A config and state home of the test's own, so its approvals reach no other test.
struct Homes {
    dir: tempfile::TempDir,
}

impl Homes {
    fn new() -> Homes {
        Homes {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }
    fn config(&self) -> PathBuf {
        self.dir.path().join("config")
    }
    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }
    /// `toolhost` with these homes.
    fn command(&self) -> Command {
        let mut cmd = toolhost_command();
        cmd.env("XDG_CONFIG_HOME", self.config())
            .env("XDG_STATE_HOME", self.state())
            .stdin(Stdio::null());
        cmd
    }
    /// The default profile's approvals file.
    fn approvals_file(&self) -> PathBuf {
        self.state()
            .join("toolhost/profiles/default/approvals/always.json")
    }
    /// `toolhost ARGS` on a pseudo-terminal (util-linux `script`) with `input` typed.
    fn on_a_terminal(&self, args: &str, input: &str) -> Output {
        let command = format!(
            "env XDG_CONFIG_HOME={} XDG_STATE_HOME={} {} {args}",
            self.config().display(),
            self.state().display(),
            env!("CARGO_BIN_EXE_toolhost")
        );
        let mut child = Command::new("script")
            .args(["-qec", &command, "/dev/null"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("util-linux `script` runs the command on a pseudo-terminal");
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(input.as_bytes()).expect("type the answer");
        }
        child.wait_with_output().expect("wait")
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn write_args(marker: &Path) -> String {
    format!("'{}'", json!({"marker": marker}))
}

#[test]
fn always_survives_a_restart_and_is_asked_again_when_the_plugin_changes() {
    let homes = Homes::new();
    let plugins = PluginDir::with(&["fixture_basic"]);
    let work = tempfile::tempdir().expect("work");
    let marker = work.path().join("m");
    let args = format!(
        "call risky_write {} --plugins {}",
        write_args(&marker),
        plugins.path().display()
    );
    let asked = homes.on_a_terminal(&args, "a\n");
    let screen = text(&asked.stdout);
    assert!(screen.contains("[a] yes, always"), "{screen}");
    assert!(asked.status.success(), "{screen}");
    assert_eq!(std::fs::read_to_string(&marker).expect("ran"), "ran");
    // Kept, privately.
    let file = homes.approvals_file();
    let mode = |p: &Path| std::fs::metadata(p).expect("stat").mode() & 0o777;
    assert_eq!(mode(&file), 0o600);
    assert_eq!(mode(file.parent().expect("dir")), 0o700);
    let listed = homes
        .command()
        .args(["approvals", "list", "--json"])
        .output()
        .expect("list");
    let list: Value = serde_json::from_slice(&listed.stdout).expect("json");
    assert_eq!(list[0]["tool"], "risky_write", "{list}");
    assert_eq!(list[0]["risk"], "write");
    assert_eq!(list[0]["approved_by"], "terminal");
    // A new process (a restart) with nobody to ask: the approval holds.
    std::fs::remove_file(&marker).expect("reset");
    let run = || {
        homes
            .command()
            .args(["call", "risky_write"])
            .arg(json!({"marker": marker}).to_string())
            .arg("--plugins")
            .arg(plugins.path())
            .output()
            .expect("call")
    };
    let again = run();
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert!(marker.exists());
    // The same file made readable by others (as a tool's or another program's write
    // leaves one): not toolhost's, so not honoured, and the warning says why.
    std::fs::remove_file(&marker).expect("reset");
    let chmod = |m: u32| {
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(m))
            .expect("chmod")
    };
    chmod(0o644);
    let planted = run();
    assert!(
        !planted.status.success(),
        "a file of mode 0644 approved a call"
    );
    assert!(
        text(&planted.stderr).contains("was not written by toolhost"),
        "{}",
        text(&planted.stderr)
    );
    assert!(!marker.exists());
    chmod(0o600);
    assert!(
        run().status.success(),
        "toolhost's own file is honoured again"
    );
    assert!(marker.exists());
    // The plugin file changes (new bytes, new sha256): asked again, and nobody answers.
    std::fs::remove_file(&marker).expect("reset");
    let so = plugins.path().join("libfixture_basic.so");
    let mut bytes = std::fs::read(&so).expect("plugin");
    bytes.extend_from_slice(b"\0changed");
    let tmp = plugins.path().join(".changed.tmp");
    std::fs::write(&tmp, &bytes).expect("write");
    std::fs::rename(&tmp, &so).expect("replace");
    let changed = run();
    assert!(!changed.status.success(), "{}", text(&changed.stdout));
    assert!(
        text(&changed.stderr).contains("not approved"),
        "{}",
        text(&changed.stderr)
    );
    assert!(!marker.exists());
    // A raised risk asks again too.
    std::fs::create_dir_all(homes.config().join("toolhost")).expect("config dir");
    let again = homes.on_a_terminal(&args, "a\n");
    assert!(again.status.success(), "{}", text(&again.stdout));
    std::fs::write(
        homes.config().join("toolhost/config.toml"),
        "[tools.risky_write]\nrisk = \"destructive\"\n",
    )
    .expect("config");
    std::fs::remove_file(&marker).expect("reset");
    assert!(!run().status.success(), "a raised risk asks again");

    // Revoked: the next call asks.
    let revoked = homes
        .command()
        .args(["approvals", "revoke", "--all"])
        .output()
        .expect("revoke");
    assert!(revoked.status.success(), "{}", text(&revoked.stderr));
    let listed = homes
        .command()
        .args(["approvals", "list"])
        .output()
        .expect("list");
    assert!(text(&listed.stdout).contains("no lasting approvals"));
    let unknown = homes
        .command()
        .args(["approvals", "revoke", "risky_write"])
        .output()
        .expect("revoke");
    assert!(!unknown.status.success());

    if let Some(other) = OtherUser::create("always_approvals_are_private") {
        std::fs::set_permissions(
            homes.dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod");
        let read = other.command("cat").arg(&file).output().expect("cat");
        assert!(
            !read.status.success(),
            "another user read the approvals file"
        );
    }
}

/// `toolhost serve` with these homes on `socket`, started.
fn serve(homes: &Homes, plugins: &PluginDir, socket: &Path) -> Child {
    let child = serve_command(&plugins.path(), socket)
        .env("XDG_CONFIG_HOME", homes.config())
        .env("XDG_STATE_HOME", homes.state())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve");
    wait_for_socket(socket);
    child
}

fn stop(mut host: Child) {
    let _ = Command::new("kill").arg(host.id().to_string()).status();
    wait_exit(&mut host, "the host");
}

#[test]
fn control_calls_from_a_terminal_are_asked_and_revocations_reach_the_host() {
    let homes = Homes::new();
    let plugins = PluginDir::with(&["fixture_basic"]);
    let work = tempfile::tempdir().expect("work");
    let socket = work.path().join("control.sock");
    let host = serve(&homes, &plugins, &socket);
    let marker = work.path().join("m");
    let args = format!(
        "call risky_write {} --control {}",
        write_args(&marker),
        socket.display()
    );
    let no_terminal = || {
        homes
            .command()
            .args(["call", "risky_write"])
            .arg(json!({"marker": marker}).to_string())
            .arg("--control")
            .arg(&socket)
            .output()
            .expect("call")
    };
    // "n": refused, the tool never ran.
    let declined = homes.on_a_terminal(&args, "n\n");
    let screen = text(&declined.stdout);
    assert!(
        screen.contains("Allow tool 'risky_write' (write"),
        "{screen}"
    );
    assert!(!declined.status.success(), "{screen}");
    assert!(screen.contains("not approved"), "{screen}");
    assert!(!marker.exists());
    // "y": this call only.
    let once = homes.on_a_terminal(&args, "y\n");
    assert!(once.status.success(), "{}", text(&once.stdout));
    assert!(marker.exists());
    std::fs::remove_file(&marker).expect("reset");
    // Without a terminal: refused, saying how to be asked.
    let refused = no_terminal();
    assert!(!refused.status.success());
    assert!(
        text(&refused.stderr).contains("from a terminal"),
        "{}",
        text(&refused.stderr)
    );
    // "a": always, also for callers that cannot be asked, and across a restart.
    let always = homes.on_a_terminal(&args, "a\n");
    assert!(always.status.success(), "{}", text(&always.stdout));
    // The lasting approval names the client by the terminal it really has.
    let kept = std::fs::read_to_string(homes.approvals_file()).expect("always.json");
    assert!(
        kept.contains("control client at terminal /dev/pts/"),
        "{kept}"
    );
    std::fs::remove_file(&marker).expect("reset");
    assert!(no_terminal().status.success());
    stop(host);
    let host = serve(&homes, &plugins, &socket);
    std::fs::remove_file(&marker).expect("reset");
    let after_restart = no_terminal();
    assert!(
        after_restart.status.success(),
        "{}",
        text(&after_restart.stderr)
    );
    // Revoked while the host runs: its next check asks again.
    let revoked = homes
        .command()
        .args(["approvals", "revoke", "risky_write"])
        .output()
        .expect("revoke");
    assert!(revoked.status.success(), "{}", text(&revoked.stderr));
    std::fs::remove_file(&marker).expect("reset");
    assert!(
        !no_terminal().status.success(),
        "the revocation reached the host"
    );
    assert!(!marker.exists());
    stop(host);
}
