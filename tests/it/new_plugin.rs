//! `toolhost new`: the crate it writes tests, builds, checks, installs and serves the way a
//! plugin author outside this repository would use it, with toolhost-plugin-api as a path
//! dependency and as a git dependency.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::{PluginDir, built, toolhost_command, workspace_root};

fn toolhost(args: &[&str]) -> Output {
    toolhost_command()
        .args(args)
        .output()
        .expect("run toolhost")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs cargo on the new crate, sharing the test setup's target directory (the
/// dependencies are built once) and the workspace's lockfile (the versions CI fetched;
/// cargo drops what the crate does not use).
fn cargo(crate_dir: &Path, args: &[&str]) -> Output {
    let lock = crate_dir.join("Cargo.lock");
    if !lock.exists() {
        std::fs::copy(workspace_root().join("Cargo.lock"), &lock).expect("copy the lockfile");
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    Command::new(cargo)
        .args(args)
        .arg("--manifest-path")
        .arg(crate_dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(built())
        .output()
        .expect("run cargo")
}

fn new_crate(parent: &Path, name: &str, api: &[&str]) -> PathBuf {
    let dir = parent.join(name);
    let mut args = vec!["new", dir.to_str().expect("utf-8 path")];
    args.extend_from_slice(api);
    let out = toolhost(&args);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("Cargo.toml"), "{}", text(&out));
    dir
}

#[test]
fn a_new_plugin_tests_builds_checks_installs_and_answers() {
    let parent = tempfile::tempdir().expect("temp dir");
    let api = workspace_root().join("plugin-api");
    let dir = new_crate(
        parent.path(),
        "weather-tools",
        &["--api-path", api.to_str().expect("utf-8")],
    );
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).expect("manifest");
    assert!(
        manifest.contains(r#"crate-type = ["cdylib", "rlib"]"#)
            && manifest.contains("[profile.release]")
            && manifest.contains(r#"panic = "unwind""#)
            && manifest.contains(&format!("version = \"{}\"", toolhost::API_VERSION))
            && manifest.contains(r#"features = ["testing"]"#),
        "{manifest}"
    );
    let readme = std::fs::read_to_string(dir.join("README.md")).expect("README");
    for step in [
        "cargo build --release",
        "toolhost check",
        "mv ",
        "minisign -Sm",
    ] {
        assert!(readme.contains(step), "{step:?} in the README");
    }

    let test = cargo(&dir, &["test", "--offline", "--quiet"]);
    assert!(test.status.success(), "cargo test: {}", text(&test));
    assert!(text(&test).contains("6 passed"), "{}", text(&test));

    let release = cargo(&dir, &["build", "--release", "--offline", "--quiet"]);
    assert!(release.status.success(), "cargo build: {}", text(&release));
    let so = built().join("release").join("libweather_tools.so");
    assert!(so.exists(), "{} was built", so.display());

    let check = toolhost(&["check", so.to_str().expect("utf-8")]);
    assert!(check.status.success(), "{}", text(&check));
    assert!(
        text(&check).contains("plugin:      weather-tools 0.1.0")
            && text(&check).contains("weather_tools_greet (read)"),
        "{}",
        text(&check)
    );

    // Installed the way its README says: a temporary name, then a rename.
    let plugins = PluginDir::with(&[] as &[&str]);
    let temp = plugins.path().join(".libweather_tools.so.tmp");
    std::fs::copy(&so, &temp).expect("copy");
    std::fs::rename(&temp, plugins.path().join("libweather_tools.so")).expect("rename");
    let call = toolhost(&[
        "call",
        "weather_tools_greet",
        r#"{"name": "Ada", "style": "excited"}"#,
        "--plugins",
        plugins.path().to_str().expect("utf-8"),
    ]);
    assert!(call.status.success(), "{}", text(&call));
    assert_eq!(
        String::from_utf8_lossy(&call.stdout).trim_end(),
        "Hello, Ada!!! So good to see you!"
    );
    let bad = toolhost(&[
        "call",
        "weather_tools_greet",
        r#"{"name": "Ada", "style": "shouty"}"#,
        "--plugins",
        plugins.path().to_str().expect("utf-8"),
    ]);
    assert!(
        !bad.status.success() && text(&bad).contains("plain") && text(&bad).contains("excited"),
        "the allowed styles are named: {}",
        text(&bad)
    );

    // The tutorial's loop of a change, with a host watching the folder: edit, rebuild,
    // `install --replace`, and the host loads the new build at once.
    let socket = plugins.path().join("control.sock");
    let mut serve = toolhost_command()
        .args([
            "serve",
            "--plugins",
            plugins.path().to_str().expect("utf-8"),
        ])
        .arg("--control")
        .arg(&socket)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("serve");
    crate::support::wait_for_socket(&socket);
    let lib = dir.join("src/lib.rs");
    let source = std::fs::read_to_string(&lib).expect("lib.rs");
    let edited = source.replacen(
        "/// Greets someone by name.",
        "/// Greets someone by name, warmly.",
        1,
    );
    assert_ne!(
        edited, source,
        "the template's greet tool is documented as the test edits it"
    );
    std::fs::write(&lib, edited).expect("edit lib.rs");
    let rebuilt = cargo(&dir, &["build", "--release", "--offline", "--quiet"]);
    assert!(rebuilt.status.success(), "cargo build: {}", text(&rebuilt));
    let replace = toolhost(&[
        "install",
        "--replace",
        "--dir",
        plugins.path().to_str().expect("utf-8"),
        "--control",
        socket.to_str().expect("utf-8"),
        so.to_str().expect("utf-8"),
    ]);
    let said = text(&replace);
    // SAFETY: kill has no memory preconditions; the pid is our child's.
    unsafe {
        libc::kill(
            libc::pid_t::try_from(serve.id()).expect("pid"),
            libc::SIGTERM,
        )
    };
    crate::support::wait_exit(&mut serve, "serve");
    assert!(replace.status.success(), "{said}");
    assert!(
        said.contains("replaced weather-tools at")
            && said.contains("loaded weather-tools 0.1.0 (generation 2)"),
        "the tutorial's lines: {said}"
    );

    // A second `new` into the same folder writes nothing.
    let again = toolhost(&["new", dir.to_str().expect("utf-8")]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(text(&again).contains("not empty"), "{}", text(&again));
}

/// The git form the README shows (`--api-git URL`) builds as well: here from this
/// repository's own commits, as a file URL (what is committed is what a vendor gets).
#[test]
fn a_new_plugin_builds_with_the_api_as_a_git_dependency() {
    let root = workspace_root();
    let is_repo = Command::new("git")
        .arg("-C")
        .arg(&root)
        .args(["rev-parse", "--is-inside-work-tree"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !is_repo {
        eprintln!("skipped: {} is not a git checkout", root.display());
        return;
    }
    let parent = tempfile::tempdir().expect("temp dir");
    let url = format!("file://{}", root.display());
    let dir = new_crate(parent.path(), "git_form", &["--api-git", &url]);
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).expect("manifest");
    assert!(manifest.contains(&format!("git = \"{url}\"")), "{manifest}");
    let build = cargo(&dir, &["build", "--quiet"]);
    assert!(build.status.success(), "cargo build: {}", text(&build));
    assert!(built().join("debug").join("libgit_form.so").exists());
}

#[test]
fn new_refuses_names_cargo_would_not_take_and_writes_nothing() {
    let parent = tempfile::tempdir().expect("temp dir");
    let dir = parent.path().join("9lives");
    let out = toolhost(&["new", dir.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("--name"), "{}", text(&out));
    assert!(!dir.exists());
    let named = toolhost(&["new", dir.to_str().expect("utf-8"), "--name", "nine-lives"]);
    assert!(named.status.success(), "{}", text(&named));
    let lib = std::fs::read_to_string(dir.join("src/lib.rs")).expect("lib.rs");
    assert!(lib.contains(r#"name: "nine-lives""#) && lib.contains("nine_lives_greet"));
    let bad_api = toolhost(&[
        "new",
        parent.path().join("x").to_str().expect("utf-8"),
        "--api-path",
        parent.path().to_str().expect("utf-8"),
    ]);
    assert!(!bad_api.status.success());
    assert!(
        text(&bad_api).contains("plugin-api folder"),
        "{}",
        text(&bad_api)
    );
}

/// The tutorial's `src/lib.rs`: the ```` ```rust ```` block of the book's tutorial that
/// exports a plugin.
fn tutorial_lib_rs() -> String {
    let page = std::fs::read_to_string(workspace_root().join("docs/book/src/plugins/tutorial.md"))
        .expect("the tutorial");
    let mut blocks = page
        .split("```rust\n")
        .skip(1)
        .filter_map(|b| b.split("\n```").next());
    blocks
        .find(|b| b.contains("export_plugin!"))
        .expect("the tutorial shows a whole src/lib.rs")
        .to_owned()
}

#[test]
fn the_tutorial_builds_tests_checks_installs_and_answers() {
    let parent = tempfile::tempdir().expect("temp dir");
    let api = workspace_root().join("plugin-api");
    let dir = new_crate(
        parent.path(),
        "word-tools",
        &["--api-path", api.to_str().expect("utf-8")],
    );
    std::fs::write(dir.join("src/lib.rs"), tutorial_lib_rs()).expect("write src/lib.rs");

    let test = cargo(&dir, &["test", "--offline", "--quiet"]);
    assert!(test.status.success(), "cargo test: {}", text(&test));
    assert!(text(&test).contains("4 passed"), "{}", text(&test));
    let release = cargo(&dir, &["build", "--release", "--offline", "--quiet"]);
    assert!(release.status.success(), "cargo build: {}", text(&release));
    let so = built().join("release").join("libword_tools.so");
    let so = so.to_str().expect("utf-8");

    let check = toolhost(&["check", so]);
    assert!(check.status.success(), "{}", text(&check));
    assert!(
        text(&check).contains("word_report (read)"),
        "{}",
        text(&check)
    );

    let plugins = PluginDir::with(&[] as &[&str]);
    let folder = plugins.path();
    let folder = folder.to_str().expect("utf-8");
    let install = toolhost(&["install", so, "--dir", folder]);
    assert!(install.status.success(), "{}", text(&install));
    assert!(
        std::path::Path::new(folder)
            .join("libword_tools.so")
            .exists(),
        "{}",
        text(&install)
    );

    let args = r#"{"text": "The cat saw the other cat.", "top": 2}"#;
    let call = toolhost(&["call", "word_report", args, "--plugins", folder]);
    assert!(call.status.success(), "{}", text(&call));
    assert_eq!(
        String::from_utf8_lossy(&call.stdout).trim_end(),
        r#"6 words, 4 distinct; the longest is "other""#
    );
    let json = toolhost(&["call", "word_report", args, "--plugins", folder, "--json"]);
    let result: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
    assert_eq!(
        result["structured"],
        serde_json::json!({"words": 6, "distinct": 4, "longest": "other"}),
        "{result}"
    );
    assert_eq!(
        result["details"]["frequent"],
        serde_json::json!([["cat", 2], ["the", 2]]),
        "{result}"
    );
}
