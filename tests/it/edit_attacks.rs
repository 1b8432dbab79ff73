//! Edits that must prove what they replace, through the `toolhost` binary and the real
//! workspace plugin, with the read and the edit in two processes (`toolhost call
//! read_file`, then `toolhost call edit_file`, as a stateless client makes them): a line
//! changed inside the range after the read, and a file shifted so the anchor's number
//! holds an identical line, are both refused and nothing is written; a hard link to a
//! file outside the workspace is never appended through. In process and in a worker, as
//! the tests' user and, where one can be made, as a throwaway plain user.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::support::{OtherUser, PluginDir, toolhost_command};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A work folder: `config.toml`, a profile `coder` whose root is `proj`, a folder
/// `outside` beside it, and (for a plain user) the state and config homes.
struct Work {
    dir: tempfile::TempDir,
    plugins: PluginDir,
}

impl Work {
    fn new() -> Work {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        std::fs::write(root.join("config.toml"), "profiles_dir = \"profiles\"\n").expect("cfg");
        let coder = root.join("profiles").join("coder");
        std::fs::create_dir_all(&coder).expect("profile");
        std::fs::write(
            coder.join("config.toml"),
            "[workspace]\nroots = [\"../../proj\"]\n",
        )
        .expect("profile config");
        for folder in ["proj/src", "outside", "state", "config-home"] {
            std::fs::create_dir_all(root.join(folder)).expect("folder");
        }
        Work {
            dir,
            plugins: PluginDir::with(&["toolhost_workspace"]),
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Gives the work folder to `user`, and lets it read the plugin folder.
    fn give_to(&self, user: &OtherUser) {
        let status = Command::new("chown")
            .arg("-R")
            .arg(format!("{}:{}", user.uid, user.gid))
            .arg(self.dir.path())
            .status()
            .expect("chown");
        assert!(status.success());
        std::fs::set_permissions(
            self.plugins.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod");
    }

    /// `toolhost call TOOL ARGS --profile coder --yes EXTRA`, as the tests' user or as
    /// `user`: one process per call.
    fn call(&self, user: Option<&OtherUser>, tool: &str, args: &Value, extra: &[&str]) -> Output {
        let mut cmd = match user {
            None => toolhost_command(),
            Some(user) => {
                let mut cmd = user.command(env!("CARGO_BIN_EXE_toolhost"));
                cmd.env("HOME", self.dir.path())
                    .env("XDG_STATE_HOME", self.path("state"))
                    .env("XDG_CONFIG_HOME", self.path("config-home"))
                    .env_remove("TOOLHOST_PLUGINS");
                cmd
            }
        };
        cmd.arg("--config")
            .arg(self.path("config.toml"))
            .args([
                "call",
                tool,
                &args.to_string(),
                "--profile",
                "coder",
                "--yes",
            ])
            .arg("--plugins")
            .arg(self.plugins.path())
            .args(extra)
            .output()
            .expect("run toolhost call")
    }
}

/// The anchor (`N:HASH`) of line `n` of `shown` (read_file's output).
fn anchor(shown: &str, n: usize) -> String {
    let prefix = format!("{n}:");
    shown
        .lines()
        .find(|l| l.starts_with(&prefix) && l.contains('|'))
        .and_then(|l| l.split('|').next())
        .unwrap_or_else(|| panic!("no line {n} in:\n{shown}"))
        .to_owned()
}

const LIB: &str = "fn a() {\n    a();\n}\nfn b() {\n}\n";

/// Writes `src/lib.rs` and reads it in one process; returns what the read showed.
fn read_lib(work: &Work, user: Option<&OtherUser>, extra: &[&str], context: &str) -> String {
    let file = work.path("proj/src/lib.rs");
    std::fs::write(&file, LIB).expect("write lib.rs");
    let read = work.call(user, "read_file", &json!({"path": "src/lib.rs"}), extra);
    assert!(read.status.success(), "{context}: {}", text(&read.stderr));
    text(&read.stdout)
}

/// Refused, naming `why`, with `file` left as `content`.
fn refused(out: &Output, why: &str, file: &Path, content: &str, context: &str) {
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{context}: the edit landed");
    assert!(err.contains("nothing was written"), "{context}: {err}");
    assert!(err.contains(why), "{context}: no {why:?} in {err}");
    assert_eq!(
        std::fs::read_to_string(file).expect("read"),
        content,
        "{context}: the file changed"
    );
}

fn attacks(work: &Work, user: Option<&OtherUser>, extra: &[&str], context: &str) {
    let file = work.path("proj/src/lib.rs");

    // A line inside the range changes after the read; both anchors still match.
    let shown = read_lib(work, user, extra, context);
    let changed = LIB.replace("    a();", "    evil();");
    std::fs::write(&file, &changed).expect("change");
    let edit = work.call(
        user,
        "edit_file",
        &json!({"path": "src/lib.rs", "edits": [
            {"from": anchor(&shown, 1), "to": anchor(&shown, 3), "new_text": "fn a() {}"}
        ]}),
        extra,
    );
    refused(
        &edit,
        "a line inside the range changed since the read",
        &file,
        &changed,
        context,
    );
    assert!(text(&edit.stderr).contains("|    evil();"), "{context}");

    // Two lines come in at the top: line 5 is a `}` again, of another function.
    let shown = read_lib(work, user, extra, context);
    let shifted = format!("use std::fmt;\n\n{LIB}");
    std::fs::write(&file, &shifted).expect("shift");
    let edit = work.call(
        user,
        "edit_file",
        &json!({"path": "src/lib.rs", "edits": [
            {"from": anchor(&shown, 5), "new_text": "    b();\n}"}
        ]}),
        extra,
    );
    refused(&edit, "shifted by +2 lines", &file, &shifted, context);

    // Unchanged since the read: the edit from the other process lands.
    let shown = read_lib(work, user, extra, context);
    let edit = work.call(
        user,
        "edit_file",
        &json!({"path": "src/lib.rs", "edits": [
            {"from": anchor(&shown, 5), "new_text": "    b();\n}"}
        ]}),
        extra,
    );
    assert!(edit.status.success(), "{context}: {}", text(&edit.stderr));
    assert_eq!(
        std::fs::read_to_string(&file).expect("read"),
        LIB.replace("fn b() {\n}", "fn b() {\n    b();\n}"),
        "{context}"
    );

    // A hard link to a file outside: appending through it is refused.
    let secret = work.path("outside/secret.txt");
    let link = work.path("proj/linked.txt");
    let _ = std::fs::remove_file(&link);
    std::fs::write(&secret, "TOP SECRET\n").expect("secret");
    std::fs::hard_link(&secret, &link).expect("hard link");
    let append = work.call(
        user,
        "write_file",
        &json!({"path": "linked.txt", "content": "pwned\n", "mode": "append"}),
        extra,
    );
    refused(
        &append,
        "has 2 hard links",
        &secret,
        "TOP SECRET\n",
        context,
    );
}

#[test]
fn stale_edits_and_hard_link_appends_are_refused_across_processes() {
    let work = Work::new();
    attacks(&work, None, &[], "in process");
    attacks(&work, None, &["--isolate"], "in a worker");
    if let Some(other) = OtherUser::create("stale_edits_and_hard_link_appends_are_refused") {
        work.give_to(&other);
        attacks(&work, Some(&other), &[], "as a plain user");
    }
}
