//! The host's own state, config and plugins are out of the workspace tools' reach whatever
//! the roots (issue 54, item 1): with a workspace root that holds them all (a home folder,
//! as is common), `read_file`, `batch_read`, `list_dir`, `find_files`, `grep`,
//! `write_file` and `run_command` neither read nor write the state folder, the config
//! folder or the plugin folder, directly or through a link beneath the root, in process
//! and in a worker; and a lasting approval in a file toolhost did not write is not
//! honoured.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::support::{PluginDir, toolhost_command};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A home folder that is the workspace root and holds toolhost's config, state and a
/// plugin folder, each with a canary only toolhost may read.
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Home {
        let dir = tempfile::tempdir().expect("temp dir");
        let home = std::fs::canonicalize(dir.path()).expect("real");
        let config = home.join(".config/toolhost");
        std::fs::create_dir_all(&config).expect("config dir");
        std::fs::write(
            config.join("config.toml"),
            format!(
                "# CONFIG CANARY\n[workspace]\nroots = [\"{}\"]\n",
                home.display()
            ),
        )
        .expect("config");
        let state = home.join(".local/state/toolhost");
        std::fs::create_dir_all(&state).expect("state dir");
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        std::fs::write(state.join("canary.txt"), "STATE CANARY\n").expect("canary");
        let plugins = home.join("plugins");
        std::fs::create_dir_all(&plugins).expect("plugins");
        let lib = PluginDir::with(&["toolhost_workspace"]);
        std::fs::copy(
            lib.path().join("libtoolhost_workspace.so"),
            plugins.join("libtoolhost_workspace.so"),
        )
        .expect("install");
        std::fs::create_dir_all(home.join("proj")).expect("proj");
        std::fs::write(home.join("proj/notes.txt"), "PROJECT NOTES\n").expect("notes");
        // A link beneath the root into the state folder (relative: it stays beneath the
        // root, so only the protected-path rule refuses it).
        std::os::unix::fs::symlink("../.local/state/toolhost", home.join("proj/st")).expect("link");
        Home { dir }
    }

    fn path(&self) -> PathBuf {
        std::fs::canonicalize(self.dir.path()).expect("real")
    }

    fn command(&self) -> Command {
        let home = self.path();
        let mut cmd = toolhost_command();
        cmd.env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_STATE_HOME", home.join(".local/state"))
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .current_dir(&home);
        cmd
    }

    /// `toolhost call TOOL ARGS --yes --plugins ~/plugins EXTRA`.
    fn call(&self, tool: &str, args: &Value, extra: &[&str]) -> Output {
        self.command()
            .args(["call", tool, &args.to_string(), "--yes", "--plugins"])
            .arg(self.path().join("plugins"))
            .args(extra)
            .output()
            .expect("run toolhost call")
    }
}

/// A call that must be refused by the rule, leaking none of the canaries.
fn assert_refused(out: &Output, what: &str) {
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success(), "{what} succeeded: {stdout}");
    for canary in ["STATE CANARY", "CONFIG CANARY"] {
        assert!(!stdout.contains(canary), "{what} leaked {canary}: {stdout}");
    }
    assert!(
        stderr.contains("holds toolhost's own state, config or plugins"),
        "{what}: the refusal does not name the rule: {stderr}"
    );
}

/// A call that succeeds without any canary in its output.
fn assert_no_canary(out: &Output, what: &str) -> String {
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{what} failed: {}", text(&out.stderr));
    for canary in ["STATE CANARY", "CONFIG CANARY", "libtoolhost_workspace"] {
        assert!(!stdout.contains(canary), "{what} showed {canary}: {stdout}");
    }
    stdout
}

fn the_host_keeps_its_own(home: &Home, extra: &[&str]) {
    let state = ".local/state/toolhost/canary.txt";
    let config = ".config/toolhost/config.toml";
    let plugin = "plugins/libtoolhost_workspace.so";
    for path in [state, config, plugin, "proj/st/canary.txt"] {
        let out = home.call("read_file", &json!({ "path": path }), extra);
        assert_refused(&out, &format!("read_file {path}"));
    }
    let abs = home.path().join(state).display().to_string();
    assert_refused(
        &home.call("read_file", &json!({ "path": abs }), extra),
        "read_file of the absolute path",
    );
    // batch_read answers each file on its own: the protected ones get an error block.
    let batch = home.call(
        "batch_read",
        &json!({"paths": ["proj/notes.txt", state, config]}),
        extra,
    );
    let shown = assert_no_canary(&batch, "batch_read");
    assert!(shown.contains("PROJECT NOTES"), "{shown}");
    assert!(
        shown.contains("holds toolhost's own state, config or plugins"),
        "{shown}"
    );
    // Walks pass over them.
    let listed = home.call(
        "list_dir",
        &json!({"path": ".", "depth": 5, "hidden": true}),
        extra,
    );
    let shown = assert_no_canary(&listed, "list_dir");
    assert!(shown.contains("notes.txt"), "{shown}");
    assert!(!shown.contains("canary.txt"), "{shown}");
    assert!(!shown.contains("config.toml"), "{shown}");
    let found = home.call(
        "find_files",
        &json!({"patterns": ["**/*"], "hidden": true}),
        extra,
    );
    let shown = assert_no_canary(&found, "find_files");
    assert!(shown.contains("notes.txt"), "{shown}");
    assert!(!shown.contains("canary.txt"), "{shown}");
    let grep = home.call(
        "grep",
        &json!({"pattern": "CANARY|NOTES", "hidden": true}),
        extra,
    );
    let shown = assert_no_canary(&grep, "grep");
    assert!(shown.contains("PROJECT NOTES"), "{shown}");
    assert_refused(
        &home.call("list_dir", &json!({"path": ".local/state/toolhost"}), extra),
        "list_dir of the state folder",
    );
    // Writes: a planted lasting approval, a plugin, a config; directly and through the
    // link.
    let approvals = ".local/state/toolhost/profiles/default/approvals/always.json";
    for (path, what) in [
        (approvals, "an approvals file"),
        (
            "proj/st/profiles/default/approvals/always.json",
            "an approvals file (link)",
        ),
        ("plugins/libevil.so", "a plugin"),
        (
            ".config/toolhost/profiles/evil/config.toml",
            "a profile config",
        ),
    ] {
        let out = home.call(
            "write_file",
            &json!({"path": path, "content": "{}", "mode": "overwrite", "create_dirs": true}),
            extra,
        );
        assert_refused(&out, &format!("write_file of {what}"));
    }
    let state_dir = home.path().join(".local/state/toolhost");
    assert!(
        !state_dir
            .join("profiles/default/approvals/always.json")
            .exists()
    );
    assert!(
        !state_dir.join("profiles/default/approvals").exists(),
        "a write made folders in the state folder"
    );
    assert!(!home.path().join("plugins/libevil.so").exists());
    assert!(!home.path().join(".config/toolhost/profiles").exists());
    // A command: reads and writes refused by its sandbox.
    for program_args in [
        vec!["cat", state],
        vec!["cat", config],
        vec!["cp", "proj/notes.txt", "plugins/libevil.so"],
        vec!["cp", "proj/notes.txt", ".config/toolhost/evil.toml"],
    ] {
        let out = home.call(
            "run_command",
            &json!({"program": program_args[0], "args": &program_args[1..]}),
            extra,
        );
        let stdout = text(&out.stdout);
        for canary in ["STATE CANARY", "CONFIG CANARY"] {
            assert!(!stdout.contains(canary), "{program_args:?}: {stdout}");
        }
        let stderr = text(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains("exit code 1"),
            "{program_args:?} succeeded: {stdout} {stderr}"
        );
        assert!(!stderr.contains("CANARY"), "{program_args:?}: {stderr}");
    }
    assert!(!home.path().join("plugins/libevil.so").exists());
    assert!(!home.path().join(".config/toolhost/evil.toml").exists());
    // The project itself is still the tools' to use.
    let wrote = home.call(
        "write_file",
        &json!({"path": "proj/new.txt", "content": "fine", "mode": "create"}),
        extra,
    );
    assert!(wrote.status.success(), "{}", text(&wrote.stderr));
    assert_eq!(
        std::fs::read_to_string(home.path().join("proj/new.txt")).expect("read"),
        "fine"
    );
    std::fs::remove_file(home.path().join("proj/new.txt")).expect("reset");
}

#[test]
fn workspace_tools_never_reach_the_hosts_state_config_or_plugins_in_process() {
    the_host_keeps_its_own(&Home::new(), &[]);
}

#[test]
fn workspace_tools_never_reach_the_hosts_state_config_or_plugins_in_a_worker() {
    the_host_keeps_its_own(&Home::new(), &["--isolate"]);
}

/// The approvals file a test host keeps for the default profile.
fn approvals_file(home: &Path) -> PathBuf {
    home.join(".local/state/toolhost/profiles/default/approvals/always.json")
}

#[test]
fn a_lasting_approval_in_a_file_toolhost_did_not_write_is_not_honoured() {
    let home = Home::new();
    let file = approvals_file(&home.path());
    // The approval a tool would plant if it could reach the folder: an entry for
    // run_command, in a file of the default mode.
    let listed = home
        .command()
        .args(["list", "--json", "--plugins"])
        .arg(home.path().join("plugins"))
        .output()
        .expect("list");
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    std::fs::create_dir_all(file.parent().expect("dir")).expect("approvals dir");
    std::fs::write(&file, json!({"version": 1, "approvals": []}).to_string()).expect("plant");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let out = home
        .command()
        .args(["approvals", "list"])
        .output()
        .expect("approvals list");
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success(), "a planted file was listed: {said}");
    assert!(
        said.contains("was not written by toolhost") && said.contains("0644"),
        "{said}"
    );
}
