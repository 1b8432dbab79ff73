//! The README's first ten minutes, verbatim: its set-up, install and tour commands taken
//! from README.md (not retyped) and run by a shell, as a new user would, in a folder laid
//! out as `cargo build --release` lays out `target/release` (the binary, the bundled
//! plugins, the `#[tool]` macros' proc-macro library, the libraries and dep-info files
//! that are no plugins), with a HOME of its own; no warning, no error, exit 0.
//!
//! What is not run for real: `cargo` itself (a stand-in on PATH checks it is asked for
//! what the README asks and lays out what it would have built: the build is the test
//! setup's), and the tour's fixed port, which becomes a free one (tests run side by side).
//! The tutorial's block (`toolhost new ...`) is run by `new_plugin.rs`; the test command
//! is this suite.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::{built, proc_macro_library, workspace_root};

/// The `sh` blocks of the README from `from` (a heading) up to `to` (a line that starts
/// a later part), in order.
fn sh_blocks(readme: &str, from: &str, to: &str) -> Vec<String> {
    let start = readme
        .find(from)
        .unwrap_or_else(|| panic!("README has {from:?}"));
    let rest = &readme[start..];
    let end = rest.find(to).unwrap_or_else(|| panic!("README has {to:?}"));
    let mut blocks = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in rest[..end].lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(Vec::new()),
            (Some(lines), "```") => {
                blocks.push(lines.join("\n"));
                current = None;
            }
            (Some(lines), _) => lines.push(line),
            (None, _) => {}
        }
    }
    blocks
}

/// A folder laid out as `cargo build --release` leaves this workspace's: `target/release`
/// with the binary, every cdylib of the workspace, the proc-macro library of
/// `toolhost-plugin-api-macros`, rlibs and dep-info files. Built from the test setup's
/// (debug) build of the same crates.
fn release_layout(root: &Path) -> PathBuf {
    let release = root.join("target/release");
    std::fs::create_dir_all(&release).expect("create target/release");
    let build = built().join("debug");
    let mut plugins = 0;
    for entry in std::fs::read_dir(&build).expect("read the test build") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        // The root workspace's cdylibs; the fixtures are a workspace of their own.
        if (name.starts_with("libtoolhost_") || name == "libhello_tools.so")
            && name.ends_with(".so")
        {
            std::fs::copy(&path, release.join(name)).expect("copy a plugin");
            plugins += 1;
        }
    }
    assert!(
        plugins >= 8,
        "the bundled plugins and the example are built"
    );
    // An rlib (a library crate's, no plugin, no .so) and the proc-macro library.
    let rlib = std::fs::read_dir(build.join("deps"))
        .expect("read deps")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libtoolhost_plugin_api-") && n.ends_with(".rlib"))
        })
        .expect("the plugin API's rlib in the test build");
    std::fs::copy(rlib, release.join("libtoolhost_plugin_api.rlib")).expect("copy the rlib");
    let (macros, name) = proc_macro_library();
    std::fs::copy(macros, release.join(name)).expect("copy the proc-macro library");
    for name in ["libtoolhost_plugin_api_macros.d", "toolhost.d"] {
        std::fs::write(release.join(name), "target/release/x: src/lib.rs\n").expect("dep-info");
    }
    std::fs::copy(env!("CARGO_BIN_EXE_toolhost"), release.join("toolhost")).expect("binary");
    release
}

/// A `cargo` that takes only what the README asks of it: `build --release` (done: the
/// layout is in place) and `install --path cli --locked` (copies the built binary into
/// `~/.cargo/bin`, as cargo install would).
const CARGO_STAND_IN: &str = r#"#!/bin/sh
case "$*" in
  "build --release") exit 0 ;;
  "install --path cli --locked")
    mkdir -p "$HOME/.cargo/bin" && cp target/release/toolhost "$HOME/.cargo/bin/toolhost" ;;
  *) echo "the README's cargo was asked for something else: cargo $*" >&2; exit 97 ;;
esac
"#;

#[test]
fn the_readmes_set_up_install_and_tour_commands_run_verbatim_without_a_warning() {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).expect("README");
    let mut blocks = sh_blocks(
        &readme,
        "## Set up a fresh machine",
        "Write a plugin of your own",
    );
    // The test command is the suite this test is in.
    let before = blocks.len();
    blocks.retain(|b| b.trim() != "cargo test --workspace");
    assert_eq!(
        before - blocks.len(),
        1,
        "the README's test command: {blocks:?}"
    );
    let script = blocks.join("\n");
    for needle in [
        "./target/release/toolhost list --plugins target/release",
        "toolhost install target/release/libtoolhost_*.so",
        "toolhost list",
        "toolhost serve --mcp http --listen 127.0.0.1:8765 &",
        "toolhost reload",
    ] {
        assert!(
            script.contains(needle),
            "the README runs {needle:?}:\n{script}"
        );
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .to_string();
    let script = script.replace("127.0.0.1:8765", &port);

    let machine = tempfile::tempdir().expect("temp dir");
    let (home, checkout) = (machine.path().join("home"), machine.path().join("toolhost"));
    std::fs::create_dir_all(&home).expect("home");
    release_layout(&checkout);
    let shims = machine.path().join("shims");
    std::fs::create_dir_all(&shims).expect("shims");
    std::fs::write(shims.join("cargo"), CARGO_STAND_IN).expect("cargo stand-in");
    std::fs::set_permissions(shims.join("cargo"), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    let path = format!(
        "{}:{}:{}",
        home.join(".cargo/bin").display(),
        shims.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // The background host (`serve ... &`) is stopped when the script ends, as the
    // user's Ctrl-C or logout would; `set -e`: any failing line fails the run.
    let wrapped = format!("set -e\ntrap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n{script}\n");
    let out = Command::new("bash")
        .arg("-c")
        .arg(&wrapped)
        .current_dir(&checkout)
        .env("HOME", &home)
        .env("TMPDIR", &home)
        .env("PATH", path)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_STATE_HOME")
        .env_remove("XDG_DATA_HOME")
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("TOOLHOST_PLUGINS")
        .env_remove("TOOLHOST_LOG")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run the README's commands");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    let all = format!("--- stdout\n{stdout}\n--- stderr\n{stderr}\n--- script\n{wrapped}");
    assert!(out.status.success(), "the README's commands failed:\n{all}");
    // toolhost's warnings and errors ("warning: ...", "error: ..."), the host's log
    // lines at WARN or ERROR, a panic: none of them, anywhere.
    for line in stdout.lines().chain(stderr.lines()) {
        let bad = line.starts_with("warning:")
            || line.starts_with("error:")
            || line.contains(" WARN ")
            || line.contains(" ERROR ")
            || line.contains("panicked");
        assert!(
            !bad,
            "the README's commands printed a warning or an error: {line}\n{all}"
        );
    }
    // What each step promises, seen.
    assert!(stdout.contains("Europe/Paris"), "time_now answered:\n{all}");
    assert!(
        stdout.contains("passed over") && stdout.contains("libtoolhost_plugin_api_macros.so"),
        "install says it passed over the proc-macro library:\n{all}"
    );
    assert!(stdout.contains("installed utils as"), "{all}");
    assert!(
        !stdout.contains("fixture"),
        "no test fixture among the bundled plugins:\n{all}"
    );
    let installed = home.join(".local/share/toolhost/plugins");
    assert!(installed.join("libtoolhost_utils.so").is_file(), "{all}");
    assert!(
        !installed.join("libtoolhost_plugin_api_macros.so").exists(),
        "the proc-macro library is not installed"
    );
}
