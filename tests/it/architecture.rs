//! The architecture's invariants, checked on the sources rather than trusted to prose
//! (ARCHITECTURE.md states them; rust-analyzer checks its own the same way): which module
//! may name which, which module alone knows a heavy dependency, where `unsafe` may be,
//! and that every module says what it is for.

use std::path::{Path, PathBuf};

/// The workspace's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_path_buf()
}

/// Every `.rs` file under `dir`, as (path relative to `dir`, contents).
fn sources(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read a source folder") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path
                    .strip_prefix(dir)
                    .expect("under dir")
                    .to_string_lossy()
                    .into_owned();
                let text = std::fs::read_to_string(&path).expect("read a source file");
                out.push((rel, text));
            }
        }
    }
    out.sort();
    out
}

/// The code of a file without its `#[cfg(test)]` module (tests may use anything).
fn code(text: &str) -> &str {
    text.find("#[cfg(test)]").map_or(text, |i| &text[..i])
}

fn host_sources() -> Vec<(String, String)> {
    sources(&root().join("host/src"))
}

/// The library's core: what frontends, the composition root and the binary build on.
fn is_core(file: &str) -> bool {
    ["calls/", "plugins/", "sys/", "config/", "agent/"]
        .iter()
        .any(|d| file.starts_with(d))
        || ["host.rs", "text.rs"].contains(&file)
}

fn is_binary(file: &str) -> bool {
    file.starts_with("commands/") || ["main.rs", "output.rs", "approve.rs"].contains(&file)
}

#[test]
fn every_module_starts_by_saying_what_it_is_for() {
    let root = root();
    let mut dirs = vec![root.join("host/src"), root.join("plugin-api/src")];
    for group in ["plugins", "examples"] {
        for entry in std::fs::read_dir(root.join(group)).expect("read") {
            let src = entry.expect("entry").path().join("src");
            if src.is_dir() {
                dirs.push(src);
            }
        }
    }
    let mut missing = Vec::new();
    for dir in dirs {
        for (file, text) in sources(&dir) {
            if !text.starts_with("//!") {
                missing.push(dir.join(file).display().to_string());
            }
        }
    }
    assert!(missing.is_empty(), "no `//!` first line: {missing:?}");
}

#[test]
fn the_core_never_names_a_frontend_the_composition_root_or_the_binary() {
    let mut edges = Vec::new();
    for (file, text) in host_sources() {
        if !is_core(&file) {
            continue;
        }
        for forbidden in ["crate::frontends", "crate::serve", "crate::commands"] {
            if code(&text).contains(forbidden) {
                edges.push(format!("{file} names {forbidden}"));
            }
        }
    }
    assert!(edges.is_empty(), "back-edges: {edges:#?}");
}

#[test]
fn calls_know_nothing_of_plugins_config_or_the_agent() {
    let mut edges = Vec::new();
    for (file, text) in host_sources() {
        if !file.starts_with("calls/") {
            continue;
        }
        for forbidden in [
            "crate::plugins",
            "crate::config",
            "crate::agent",
            "crate::host",
        ] {
            if code(&text).contains(forbidden) {
                edges.push(format!("{file} names {forbidden}"));
            }
        }
    }
    assert!(edges.is_empty(), "back-edges: {edges:#?}");
}

#[test]
fn config_converts_to_plain_settings_and_names_no_agent_type() {
    for (file, text) in host_sources() {
        if file.starts_with("config/") {
            assert!(
                !code(&text).contains("crate::agent"),
                "{file} names the agent's types; config resolves plain settings (`*Settings`) \
                 that the agent uses as they are"
            );
        }
    }
}

#[test]
fn each_heavy_dependency_is_known_to_one_place() {
    // (what, where it may be named)
    let rules: [(&str, &[&str]); 8] = [
        ("rmcp::", &["frontends/mcp/"]),
        ("hyper", &["frontends/mcp/"]),
        ("toml::", &["config/"]),
        ("notify::", &["plugins/watch.rs"]),
        ("rusqlite", &["agent/sessions.rs"]),
        ("reqwest", &["agent/model.rs"]),
        ("abi_stable", &["plugins/"]),
        ("clap::", &["main.rs", "commands/"]),
    ];
    let mut leaks = Vec::new();
    for (file, text) in host_sources() {
        for (what, allowed) in rules {
            if code(&text).contains(what) && !allowed.iter().any(|a| file.starts_with(a)) {
                leaks.push(format!("{file} names {what}"));
            }
        }
    }
    assert!(leaks.is_empty(), "{leaks:#?}");
}

#[test]
fn unsafe_code_lives_only_where_the_architecture_says() {
    let allowed = [
        "plugins/loader.rs",
        "plugins/plugin_tool.rs",
        "plugins/host_services.rs",
        "frontends/mcp/stdio.rs",
        "sys/",
    ];
    let mut found = Vec::new();
    for (file, text) in host_sources() {
        if code(&text).contains("unsafe ") && !allowed.iter().any(|a| file.starts_with(a)) {
            found.push(file);
        }
    }
    assert!(
        found.is_empty(),
        "unsafe outside the allowed files: {found:?}"
    );
}

#[test]
fn the_binary_prints_through_outln_and_errln_only() {
    for (file, text) in host_sources() {
        if is_binary(&file) {
            let prints = ["println!(", "print!(", "eprintln!(", "eprint!("]
                .iter()
                .any(|m| {
                    code(&text).match_indices(m).any(|(i, _)| {
                        let before = &code(&text)[..i];
                        // `print!(` inside `eprint!(`/`println!(` is counted by its own pattern.
                        !(m.starts_with('p') && before.ends_with('e'))
                    })
                });
            assert!(
                !prints,
                "{file}: stdout goes through outln! (a closed pipe must end the command \
                 quietly), stderr through errln! (both escape control characters for a \
                 terminal)"
            );
        }
    }
}
