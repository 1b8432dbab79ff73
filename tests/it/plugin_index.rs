//! The plugin index: `list` and `call` answer from it for files that are as it saw them,
//! load only the plugin whose tool is called, and never run what the index merely says.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::{PluginDir, echo_build, state_home};

fn toolhost(args: &[&str]) -> Output {
    crate::support::toolhost_command()
        .args(args)
        .env("TOOLHOST_LOG", "toolhost=debug")
        .output()
        .expect("run toolhost")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The plugin files this command loaded (its debug log names each).
fn loaded(out: &Output) -> Vec<String> {
    stderr(out)
        .lines()
        .filter_map(|l| l.split("loaded plugin file ").nth(1))
        .filter_map(|rest| rest.split(' ').next())
        .map(|file| {
            Path::new(file)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        })
        .collect()
}

fn index_file() -> PathBuf {
    state_home().join("toolhost").join("plugin-index.json")
}

fn three_plugins() -> PluginDir {
    let dir = PluginDir::with(&["toolhost_utils", "fixture_outcomes"]);
    std::fs::copy(echo_build("v1"), dir.path().join("libfixture_echo.so")).expect("echo v1");
    dir
}

#[test]
fn list_and_call_answer_from_the_index_and_load_only_the_called_plugin() {
    let dir = three_plugins();
    let d = dir.path();
    let d = d.to_str().expect("utf-8");
    let cold = toolhost(&["list", "--plugins", d]);
    assert!(cold.status.success(), "{}", stderr(&cold));
    assert_eq!(
        loaded(&cold).len(),
        3,
        "a cold list loads every plugin: {}",
        stderr(&cold)
    );
    let index = index_file();
    let mode = std::os::unix::fs::MetadataExt::mode(&std::fs::metadata(&index).expect("index"));
    assert_eq!(mode & 0o777, 0o600, "the index is the owner's alone");

    let warm = toolhost(&["list", "--plugins", d]);
    assert!(warm.status.success(), "{}", stderr(&warm));
    assert!(
        loaded(&warm).is_empty(),
        "a warm list loads nothing: {}",
        stderr(&warm)
    );
    assert_eq!(stdout(&warm), stdout(&cold), "the same listing either way");
    let json = toolhost(&["list", "--plugins", d, "--json"]);
    assert!(loaded(&json).is_empty(), "{}", stderr(&json));

    let call = toolhost(&[
        "call",
        "echo",
        r#"{"text":"from the index"}"#,
        "--plugins",
        d,
    ]);
    assert!(call.status.success(), "{}", stderr(&call));
    assert_eq!(stdout(&call).trim(), "from the index");
    assert_eq!(
        loaded(&call),
        ["libfixture_echo.so"],
        "only the plugin whose tool is called loads: {}",
        stderr(&call)
    );
}

#[test]
fn a_replaced_file_is_loaded_again_not_answered_from_the_index() {
    let dir = three_plugins();
    let d = dir.path();
    let d = d.to_str().expect("utf-8");
    assert!(toolhost(&["list", "--plugins", d]).status.success());
    let v1 = toolhost(&["call", "build_version", "{}", "--plugins", d]);
    assert!(stdout(&v1).contains("v1"), "{}", stdout(&v1));
    // Replaced by rename (a new inode), as `install` does.
    let tmp = dir.path().join("echo.tmp");
    std::fs::copy(echo_build("v2"), &tmp).expect("copy v2");
    std::fs::rename(&tmp, dir.path().join("libfixture_echo.so")).expect("rename");
    let list = toolhost(&["list", "--plugins", d]);
    assert_eq!(loaded(&list), ["libfixture_echo.so"], "{}", stderr(&list));
    let v2 = toolhost(&["call", "build_version", "{}", "--plugins", d]);
    assert!(stdout(&v2).contains("v2"), "{}", stdout(&v2));
    // Written over in place (the same inode): its times and size say it changed.
    std::fs::copy(echo_build("v1"), dir.path().join("libfixture_echo.so")).expect("v1");
    let back = toolhost(&["call", "build_version", "{}", "--plugins", d]);
    assert!(stdout(&back).contains("v1"), "{}", stdout(&back));
}

#[test]
fn what_the_index_says_is_checked_against_what_loads_before_it_runs() {
    let dir = three_plugins();
    let d = dir.path();
    let d = d.to_str().expect("utf-8");
    assert!(toolhost(&["list", "--plugins", d]).status.success());
    let index = index_file();
    let text = std::fs::read_to_string(&index).expect("read index");
    let original: serde_json::Value = serde_json::from_str(&text).expect("index json");
    let key = original["entries"]
        .as_object()
        .and_then(|e| {
            e.keys()
                .find(|f| f.ends_with("libfixture_echo.so"))
                .cloned()
        })
        .expect("echo's entry");
    let mut forged = original.clone();
    for tool in forged["entries"][&key]["tools"]
        .as_array_mut()
        .expect("tools")
    {
        if tool["name"] == "echo" {
            tool["description"] = "Says what the index says.".into();
        }
    }
    std::fs::write(&index, serde_json::to_vec(&forged).expect("json")).expect("write");
    let call = toolhost(&["call", "echo", r#"{"text":"x"}"#, "--plugins", d]);
    assert!(
        !call.status.success(),
        "a tool unlike its entry does not run"
    );
    assert!(
        stderr(&call).contains("is not what the plugin index said"),
        "{}",
        stderr(&call)
    );

    // An entry whose sha256 is not the file's: refused at the load, named.
    let mut forged = original;
    forged["entries"][&key]["sha256"] = "0".repeat(64).into();
    std::fs::write(&index, serde_json::to_vec(&forged).expect("json")).expect("write");
    let call = toolhost(&["call", "echo", r#"{"text":"x"}"#, "--plugins", d]);
    assert!(!call.status.success());
    assert!(
        stderr(&call).contains("changed after its tools were listed"),
        "{}",
        stderr(&call)
    );
}

#[test]
fn a_broken_or_linked_index_is_rebuilt_and_everything_loads() {
    let dir = three_plugins();
    let d = dir.path();
    let d = d.to_str().expect("utf-8");
    assert!(toolhost(&["list", "--plugins", d]).status.success());
    let index = index_file();
    std::fs::write(&index, b"{ half a file").expect("write");
    let out = toolhost(&["list", "--plugins", d]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(loaded(&out).len(), 3, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("plugin index"),
        "named: {}",
        stderr(&out)
    );
    assert!(
        loaded(&toolhost(&["list", "--plugins", d])).is_empty(),
        "rebuilt"
    );

    // A link at the index's path is not followed: whatever it points at is not read.
    let elsewhere = dir.path().join("elsewhere.json");
    std::fs::copy(&index, &elsewhere).expect("copy");
    std::fs::remove_file(&index).expect("remove");
    std::os::unix::fs::symlink(&elsewhere, &index).expect("link");
    let out = toolhost(&["list", "--plugins", d]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(loaded(&out).len(), 3, "{}", stderr(&out));
}

#[test]
fn an_index_others_can_write_is_ignored_with_a_warning_and_rebuilt() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = three_plugins();
    let d = dir.path();
    let d = d.to_str().expect("utf-8");
    assert!(toolhost(&["list", "--plugins", d]).status.success());
    let index = index_file();
    std::fs::set_permissions(&index, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let list = toolhost(&["list", "--plugins", d]);
    assert!(list.status.success(), "{}", stderr(&list));
    let log = stderr(&list);
    assert!(
        log.contains(&format!("the plugin index {}", index.display()))
            && log.contains("writable by group and others")
            && log.contains("the index is ignored and rebuilt"),
        "{log}"
    );
    assert!(!log.contains("strict_permissions"), "{log}");
    assert_eq!(loaded(&list).len(), 3, "nothing is answered from it: {log}");
    let mode = std::os::unix::fs::MetadataExt::mode(&std::fs::metadata(&index).expect("index"));
    assert_eq!(mode & 0o777, 0o600, "rebuilt, the owner's alone");
    let warm = toolhost(&["list", "--plugins", d]);
    assert!(loaded(&warm).is_empty(), "{}", stderr(&warm));
}
