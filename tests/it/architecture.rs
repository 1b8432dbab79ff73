//! The architecture's invariants, checked on the sources rather than trusted to prose
//! (ARCHITECTURE.md states them; rust-analyzer checks its own the same way): which module
//! may name which, which module alone knows a heavy dependency, where `unsafe` may be,
//! and that every module says what it is for.

use std::path::{Path, PathBuf};

/// The workspace's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli/ has a parent")
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

/// The code of a file without its `#[cfg(test)]` module (tests may use anything). A
/// `#[cfg(test)]` on another item (a test-only helper) does not end the code.
fn code(text: &str) -> &str {
    let module = text.match_indices("#[cfg(test)]").find(|(i, attribute)| {
        text[i + attribute.len()..]
            .trim_start()
            .strip_prefix("pub ")
            .unwrap_or_else(|| text[i + attribute.len()..].trim_start())
            .starts_with("mod ")
    });
    module.map_or(text, |(i, _)| &text[..i])
}

fn host_sources() -> Vec<(String, String)> {
    sources(&root().join("host/src"))
}

/// The library's core: what frontends, the composition root and the binary build on
/// (the call core is a crate of its own below it).
fn is_core(file: &str) -> bool {
    ["plugins/", "sys/", "config/", "agent/"]
        .iter()
        .any(|d| file.starts_with(d))
        || ["host.rs", "text.rs"].contains(&file)
}

/// The binary's own sources (`cli/src`: main.rs, the commands, the terminal approver and
/// output), named `cli/...`. The binary is its own package: the compiler keeps it to the
/// library's public surface and the library from naming it.
fn cli_sources() -> Vec<(String, String)> {
    sources(&root().join("cli/src"))
        .into_iter()
        .map(|(file, text)| (format!("cli/{file}"), text))
        .collect()
}

#[test]
fn every_module_starts_by_saying_what_it_is_for() {
    let root = root();
    let mut dirs = vec![
        root.join("host/src"),
        root.join("calls/src"),
        root.join("cli/src"),
        root.join("plugin-api/src"),
        root.join("plugin-api/macros/src"),
    ];
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
        for forbidden in ["crate::frontends", "crate::serve"] {
            if code(&text).contains(forbidden) {
                edges.push(format!("{file} names {forbidden}"));
            }
        }
    }
    assert!(edges.is_empty(), "back-edges: {edges:#?}");
}

#[test]
fn the_call_core_depends_on_no_part_of_the_host() {
    // The call core is its own crate so that the compiler holds its boundary: it names
    // nothing of plugins (loading), config or frontends because it cannot reach them.
    // What it may depend on is said here, so a new dependency is a decision.
    let manifest = std::fs::read_to_string(root().join("calls/Cargo.toml")).expect("manifest");
    let deps = manifest
        .split("[dependencies]")
        .nth(1)
        .expect("calls/Cargo.toml has [dependencies]")
        .split("\n[")
        .next()
        .unwrap_or_default();
    let names: Vec<&str> = deps
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split(['=', '.']).next())
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect();
    let allowed = [
        "toolhost-plugin-api",
        "async-trait",
        "serde",
        "serde_json",
        "thiserror",
        "tokio",
        "tokio-util",
        "tracing",
        "jsonschema",
        "sha2",
        "jiff",
        "libc",
        "getrandom",
        "regex",
    ];
    let extra: Vec<&&str> = names.iter().filter(|n| !allowed.contains(n)).collect();
    assert!(
        extra.is_empty(),
        "the call core depends on {extra:?}: it is the host's base (registry, door, \
         policy, dispatcher, outputs) and builds on no part of the host, no plugin loading \
         (abi_stable, libloading), config (toml) or frontend (rmcp, hyper)"
    );
    assert!(names.contains(&"toolhost-plugin-api"), "{names:?}");
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
fn the_platform_paths_are_read_in_one_place() {
    // `XDG_CONFIG_HOME`, `XDG_STATE_HOME`, ... are read by `sys/dirs.rs` (through etcetera),
    // never by hand beside it.
    let readers: Vec<String> = host_sources()
        .into_iter()
        .filter(|(file, text)| file != "sys/dirs.rs" && code(text).contains("(\"XDG_"))
        .map(|(file, _)| file)
        .collect();
    assert!(readers.is_empty(), "{readers:?} read XDG variables by hand");
}

#[test]
fn each_heavy_dependency_is_known_to_one_place() {
    // (what, where it may be named)
    // (clap and the other command-line crates are the binary package's alone: the
    // library does not depend on them.)
    let rules: [(&str, &[&str]); 12] = [
        // The MCP server side, and the client of the MCP servers the host serves tools from.
        ("rmcp::", &["frontends/mcp/", "upstream/"]),
        ("hyper", &["frontends/mcp/"]),
        ("toml::", &["config/"]),
        ("notify::", &["plugins/catalog/watch.rs"]),
        ("rusqlite", &["agent/sessions.rs"]),
        // The model client, and the OAuth resource server's fetch of the issuer's keys.
        (
            "reqwest",
            &[
                "agent/model.rs",
                "frontends/mcp/http/oauth.rs",
                "upstream/connect.rs",
            ],
        ),
        ("abi_stable", &["plugins/"]),
        ("prometheus_client", &["metrics.rs"]),
        ("etcetera", &["sys/dirs.rs"]),
        ("sd_notify", &["sys/service_manager.rs"]),
        // The shared state of many replicas: its module, and the audit log's writer there.
        ("tokio_postgres", &["state/", "audit/shared.rs"]),
        ("deadpool_postgres", &["state/"]),
    ];
    // A name, not the tail of another (`sd_notify::` is not `notify::`).
    let names = |text: &str, what: &str| {
        text.match_indices(what).any(|(at, _)| {
            !text[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
    };
    let mut leaks = Vec::new();
    for (file, text) in host_sources() {
        for (what, allowed) in rules {
            if names(code(&text), what) && !allowed.iter().any(|a| file.starts_with(a)) {
                leaks.push(format!("{file} names {what}"));
            }
        }
    }
    assert!(leaks.is_empty(), "{leaks:#?}");
}

#[test]
fn unsafe_code_lives_only_where_the_architecture_says() {
    let allowed = [
        "plugins/load/loader.rs",
        "plugins/run/plugin_tool.rs",
        "plugins/run/host_services.rs",
        "frontends/mcp/stdio.rs",
        "sys/",
    ];
    let mut found = Vec::new();
    for (file, text) in host_sources() {
        if code(&text).contains("unsafe ") && !allowed.iter().any(|a| file.starts_with(a)) {
            found.push(file);
        }
    }
    // The call core: only its private-files module makes system calls.
    for (file, text) in sources(&root().join("calls/src")) {
        if code(&text).contains("unsafe ") && file != "private.rs" {
            found.push(format!("calls/{file}"));
        }
    }
    assert!(
        found.is_empty(),
        "unsafe outside the allowed files: {found:?}"
    );
}

#[test]
fn the_binary_prints_through_outln_and_errln_only() {
    for (file, text) in cli_sources() {
        {
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

/// Where calls are made from: the frontends, the binary's commands, the agent and the
/// composition root. None of them builds the call machinery itself.
fn makes_calls(file: &str) -> bool {
    file.starts_with("frontends/")
        || file.starts_with("agent/")
        || file.starts_with("cli/")
        || ["serve.rs", "host.rs"].contains(&file)
}

#[test]
fn every_call_enters_by_the_door() {
    // The door alone wires policy, approver, dispatcher and cancellation; a frontend that
    // built its own would skip whatever observes the door (statistics, audit).
    let machinery = [
        "Plan::new(",
        "Plan { policy",
        "ApprovalPolicy",
        "CallPolicy",
        "ReadOnlyPolicy",
        "with_approver(",
    ];
    let mut found = Vec::new();
    for (file, text) in host_sources().into_iter().chain(cli_sources()) {
        if !makes_calls(&file) {
            continue;
        }
        for what in machinery {
            if code(&text).contains(what) {
                found.push(format!("{file} names {what}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "frontends build requests for the CallDoor (calls/door.rs) and render its results; \
         they build no dispatcher or policy: {found:#?}"
    );
    // And the places that run calls do so through the door.
    for file in [
        "cli/commands/call.rs",
        "frontends/control/host_handler.rs",
        "frontends/mcp/session.rs",
        "agent/turn.rs",
    ] {
        let path = match file.strip_prefix("cli/") {
            Some(rest) => root().join("cli/src").join(rest),
            None => root().join("host/src").join(file),
        };
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {file}: {e}"));
        assert!(
            text.contains("door.call(") || text.contains("door.dispatch("),
            "{file} runs no call through the door"
        );
    }
}

/// The files a source file depends on: its `use` declarations (re-exports, `pub use`,
/// excepted: they are a module's surface, not what it needs) and the `crate::`/`super::`
/// paths in its code, resolved to files through `mod.rs` re-exports.
struct ModuleGraph {
    /// (file, module path) of every file.
    files: Vec<(String, Vec<String>)>,
    /// Per file: name re-exported by a `pub use` -> the path it re-exports.
    reexports: std::collections::HashMap<String, std::collections::HashMap<String, String>>,
}

impl ModuleGraph {
    fn new(sources: &[(String, String)]) -> ModuleGraph {
        let mut files = Vec::new();
        let mut reexports = std::collections::HashMap::new();
        for (file, text) in sources {
            let mut path: Vec<String> = file
                .trim_end_matches(".rs")
                .split('/')
                .map(str::to_owned)
                .collect();
            if matches!(
                path.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                path.pop();
            }
            files.push((file.clone(), path));
            let mut names = std::collections::HashMap::new();
            for (public, body) in use_declarations(code(text)) {
                if !public {
                    continue;
                }
                for full in expand_use(&body) {
                    let (target, alias) = match full.split_once(" as ") {
                        Some((t, a)) => (t.trim().to_owned(), a.trim().to_owned()),
                        None => {
                            let last = full.rsplit("::").next().unwrap_or("").to_owned();
                            (full.clone(), last)
                        }
                    };
                    names.insert(alias, target);
                }
            }
            reexports.insert(file.clone(), names);
        }
        ModuleGraph { files, reexports }
    }

    fn file_of(&self, module: &[String]) -> Option<&str> {
        self.files
            .iter()
            .find(|(_, p)| p.as_slice() == module)
            .map(|(f, _)| f.as_str())
    }

    /// The file `path` (as written in `from`'s module `here`) names, if any.
    fn resolve(&self, here: &[String], path: &str, depth: u32) -> Option<String> {
        let segs: Vec<&str> = path.split("::").map(str::trim).collect();
        let (mut base, rest): (Vec<String>, &[&str]) = match segs.first() {
            Some(&"crate") => (Vec::new(), &segs[1..]),
            Some(&"self") => (here.to_vec(), &segs[1..]),
            Some(&"super") => {
                let mut base = here.to_vec();
                let mut i = 0;
                while segs.get(i) == Some(&"super") {
                    base.pop();
                    i += 1;
                }
                (base, &segs[i..])
            }
            _ => return None,
        };
        let mut best = self.file_of(&base).map(|f| (f.to_owned(), 0));
        for (i, seg) in rest.iter().enumerate() {
            base.push((*seg).to_owned());
            if let Some(f) = self.file_of(&base) {
                best = Some((f.to_owned(), i + 1));
            }
        }
        let (file, used) = best?;
        // A name a module re-exports is the file it comes from.
        if depth < 4
            && let Some(next) = rest.get(used)
            && let Some(target) = self.reexports.get(&file).and_then(|r| r.get(*next))
        {
            let module = self
                .files
                .iter()
                .find(|(f, _)| *f == file)
                .map(|(_, p)| p.clone())
                .unwrap_or_default();
            let target = if target.starts_with("crate::")
                || target.starts_with("super::")
                || target.starts_with("self::")
            {
                target.clone()
            } else {
                format!("self::{target}")
            };
            let mut full = target;
            for seg in &rest[used + 1..] {
                full.push_str("::");
                full.push_str(seg);
            }
            if let Some(found) = self.resolve(&module, &full, depth + 1) {
                return Some(found);
            }
        }
        Some(file)
    }

    /// Every edge file -> file.
    fn edges(&self, sources: &[(String, String)]) -> Vec<(String, String)> {
        let mut edges = std::collections::BTreeSet::new();
        for ((file, text), (_, here)) in sources.iter().zip(&self.files) {
            let code = strip_comments(code(text));
            let mut paths = Vec::new();
            for (public, body) in use_declarations(&code) {
                if !public {
                    paths.extend(expand_use(&body));
                }
            }
            // Paths in code: `crate::a::b`, `super::x` (not `$crate::`, which macros
            // expand in their users' crates).
            for start in ["crate::", "super::"] {
                for (i, _) in code.match_indices(start) {
                    let before = code[..i].chars().next_back();
                    if before
                        .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == ':')
                    {
                        continue;
                    }
                    let path: String = code[i..]
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                        .collect();
                    paths.push(path.trim_end_matches(':').to_owned());
                }
            }
            for path in paths {
                let path = path.split(" as ").next().unwrap_or("").trim().to_owned();
                if let Some(target) = self.resolve(here, &path, 0)
                    && target != *file
                {
                    edges.insert((file.clone(), target));
                }
            }
        }
        edges.into_iter().collect()
    }
}

/// The text without `//` comments (doc comments name paths without depending on them).
fn strip_comments(code: &str) -> String {
    code.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `use ...;` of `code`: whether it is a re-export (`pub use`), and its body.
fn use_declarations(code: &str) -> Vec<(bool, String)> {
    let code = strip_comments(code);
    let mut out = Vec::new();
    let mut rest = code.as_str();
    while let Some(i) = rest.find("use ") {
        let line_start = rest[..i].rfind('\n').map_or(0, |n| n + 1);
        let prefix = rest[line_start..i].trim();
        let at_start = prefix.is_empty() || prefix.starts_with("pub");
        let word_start = i == 0 || !rest[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_');
        let after = &rest[i + 4..];
        let Some(end) = after.find(';') else { break };
        if at_start && word_start && (prefix.is_empty() || prefix.starts_with("pub")) {
            out.push((
                prefix.starts_with("pub"),
                after[..end]
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" "),
            ));
            rest = &after[end + 1..];
        } else {
            rest = after;
        }
    }
    out
}

/// `a::{b, c::{d, e}}` as `a::b`, `a::c::d`, `a::c::e` (`a::{self}` as `a`).
fn expand_use(body: &str) -> Vec<String> {
    let body = body.trim();
    let Some(open) = body.find('{') else {
        return vec![body.to_owned()];
    };
    let prefix = body[..open].trim_end_matches("::").trim();
    let inner = body[open + 1..].trim_end().trim_end_matches('}');
    let mut parts = Vec::new();
    let (mut depth, mut current) = (0, String::new());
    for c in inner.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    parts.push(current);
    let mut out = Vec::new();
    for part in parts.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
        for e in expand_use(part) {
            out.push(if e == "self" {
                prefix.to_owned()
            } else if prefix.is_empty() {
                e
            } else {
                format!("{prefix}::{e}")
            });
        }
    }
    out
}

/// The groups of files that depend on each other in a ring (strongly connected
/// components of more than one file).
fn circles(dir: &Path) -> Vec<Vec<String>> {
    // A folder with a `main.rs` of its own is another crate (the binary's `cli/`).
    let sources: Vec<(String, String)> = sources(dir)
        .into_iter()
        .filter(|(file, _)| {
            !file
                .split_once('/')
                .is_some_and(|(top, _)| dir.join(top).join("main.rs").is_file())
        })
        .collect();
    let graph = ModuleGraph::new(&sources);
    let edges = graph.edges(&sources);
    let reaches = |from: &str| {
        let mut seen = std::collections::BTreeSet::new();
        let mut stack = vec![from.to_owned()];
        while let Some(f) = stack.pop() {
            for (a, b) in &edges {
                if *a == f && seen.insert(b.clone()) {
                    stack.push(b.clone());
                }
            }
        }
        seen
    };
    let reach: std::collections::BTreeMap<String, _> = sources
        .iter()
        .map(|(f, _)| (f.clone(), reaches(f)))
        .collect();
    let mut groups: Vec<Vec<String>> = Vec::new();
    for (file, from) in &reach {
        if groups.iter().any(|g| g.contains(file)) {
            continue;
        }
        let group: Vec<String> = from
            .iter()
            .filter(|other| reach.get(*other).is_some_and(|r| r.contains(file)))
            .cloned()
            .collect();
        if group.len() > 1 || (group.len() == 1 && group[0] != *file) {
            let mut group = group;
            if !group.contains(file) {
                group.push(file.clone());
            }
            group.sort();
            groups.push(group);
        }
    }
    groups
}

#[test]
fn no_files_import_each_other_in_a_ring() {
    // A ring makes a group of files one unit: none can be read, tested or moved alone.
    // Shared state goes in a module the others depend on (a star, not a ring).
    let root = root();
    let mut found = Vec::new();
    for dir in ["host/src", "calls/src", "cli/src", "plugin-api/src"] {
        for group in circles(&root.join(dir)) {
            found.push(format!("{dir}: {}", group.join(" <-> ")));
        }
    }
    assert!(found.is_empty(), "import circles: {found:#?}");
}

#[test]
fn the_ring_check_sees_a_ring() {
    let dir = tempfile::tempdir().expect("temp dir");
    let write = |name: &str, text: &str| {
        std::fs::write(dir.path().join(name), text).expect("write");
    };
    write(
        "lib.rs",
        "//! root\nmod a;\nmod b;\nmod c;\npub use a::A;\n",
    );
    write("a.rs", "//! a\nuse crate::b::B;\npub struct A;\n");
    write("b.rs", "//! b\nuse crate::{c::C};\npub struct B;\n");
    write("c.rs", "//! c\npub struct C(crate::A);\n");
    assert_eq!(
        circles(dir.path()),
        vec![vec![
            "a.rs".to_owned(),
            "b.rs".to_owned(),
            "c.rs".to_owned()
        ]]
    );
    write("c.rs", "//! c\npub struct C;\n");
    assert!(circles(dir.path()).is_empty());
}

/// Every module folder under a crate's `src/`, relative to it (`calls/outputs`).
fn module_folders(src: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read a source folder") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                let rel = path.strip_prefix(src).expect("below src");
                out.push(rel.to_string_lossy().into_owned());
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The backticked folder names of `text` (`` `frontends/mcp/` ``), without their last `/`.
fn named_folders(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| {
            t.len() > 1
                && t.ends_with('/')
                && t.chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_' || c == '/')
        })
        .map(|t| t.trim_end_matches('/').to_owned())
        .collect()
}

/// What a map (`text`) misses of `folders` (module folders, relative to their `src/`),
/// and the module folders it names that are not among them.
fn map_problems(text: &str, folders: &[String]) -> (Vec<String>, Vec<String>) {
    let named = named_folders(text);
    let is_named = |folder: &str| {
        named
            .iter()
            .any(|n| folder == n || folder.ends_with(&format!("/{n}")))
    };
    let unnamed = folders.iter().filter(|f| !is_named(f)).cloned().collect();
    // A path of several parts that starts at a module folder (`frontends/mcp/http/`) must
    // be one: single names are ambiguous with the state folders (`outputs/`, `state/`).
    let tops: Vec<&str> = folders
        .iter()
        .filter(|f| !f.contains('/'))
        .map(String::as_str)
        .collect();
    let gone = named
        .iter()
        .filter(|n| n.contains('/'))
        .filter(|n| n.split('/').next().is_some_and(|top| tops.contains(&top)))
        .filter(|n| {
            !folders
                .iter()
                .any(|f| f == *n || f.ends_with(&format!("/{n}")))
        })
        .cloned()
        .collect();
    (unnamed, gone)
}

#[test]
fn the_architecture_map_names_every_module_folder_and_only_folders_that_exist() {
    // ARCHITECTURE.md is the map of the crates: a folder it does not name is a part a
    // newcomer cannot place; a folder it names that is gone is a wrong turn.
    let root = root();
    let map = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    for src in [
        "host/src",
        "calls/src",
        "cli/src",
        "plugin-api/src",
        "sandbox/src",
    ] {
        let folders = module_folders(&root.join(src));
        let (unnamed, gone) = map_problems(&map, &folders);
        assert!(
            unnamed.is_empty(),
            "module folders of {src} that ARCHITECTURE.md does not name: {unnamed:?}"
        );
        if src == "host/src" {
            assert!(
                gone.is_empty(),
                "ARCHITECTURE.md names module folders of {src} that do not exist: {gone:?}"
            );
        }
    }
}

#[test]
fn the_folder_map_check_sees_a_missing_and_a_stale_folder() {
    let folders = [
        "calls".to_owned(),
        "calls/outputs".to_owned(),
        "agent".to_owned(),
    ];
    let (unnamed, gone) = map_problems(
        "`calls/` holds `outputs/`; `calls/gone/` and `x` and `state/`",
        &folders,
    );
    assert_eq!(unnamed, ["agent"]);
    assert_eq!(gone, ["calls/gone"]);
}

/// `code` with the insides of its comments and string and character literals blanked
/// (each character becomes as many spaces as its bytes, newlines kept), so what is left
/// is code at the same byte offsets and lines.
fn blank_comments_and_strings(code: &str) -> String {
    let bytes = code.as_bytes();
    let mut out = code.as_bytes().to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for b in &mut out[from..to] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
    };
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        if rest.starts_with(b"//") {
            let end = rest
                .iter()
                .position(|b| *b == b'\n')
                .map_or(bytes.len(), |n| i + n);
            blank(&mut out, i, end);
            i = end;
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (0, i);
            while j < bytes.len() {
                if bytes[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if bytes[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if (rest.starts_with(b"r\"") || rest.starts_with(b"r#"))
            && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_'))
        {
            // A raw string: r"..." or r#"..."# (with any number of #).
            let hashes = rest[1..].iter().take_while(|b| **b == b'#').count();
            if rest.get(1 + hashes) != Some(&b'"') {
                i += 1;
                continue;
            }
            let start = i + 2 + hashes;
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let end = bytes[start..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(bytes.len(), |n| start + n);
            blank(&mut out, start, end);
            i = (end + close.len()).min(bytes.len());
        } else if rest[0] == b'"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            let end = j.min(bytes.len());
            blank(&mut out, i + 1, end);
            i = end + 1;
        } else if rest[0] == b'\'' {
            // A character literal ('x', '\n', '\''), not a lifetime ('a).
            let len = if rest.get(1) == Some(&b'\\') {
                rest.iter().skip(2).position(|b| *b == b'\'').map(|n| n + 3)
            } else {
                let c = code[i + 1..].chars().next().map_or(0, char::len_utf8);
                (rest.get(1 + c) == Some(&b'\'')).then_some(c + 2)
            };
            match len {
                Some(len) => {
                    blank(&mut out, i + 1, i + len - 1);
                    i += len;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    String::from_utf8(out).expect("only ASCII bytes were replaced, whole characters")
}

/// Whether `ty` (a type as written) has a `Result<_, String>` in it (`Result<String>`
/// of one argument is some crate's own `Result`, whose error is not text).
fn has_string_error(ty: &str) -> bool {
    ty.match_indices("Result<").any(|(at, _)| {
        let word_start = !ty[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_');
        let (mut depth, mut previous) = (0, ' ');
        let mut args = vec![String::new()];
        for c in ty[at + "Result<".len()..].chars() {
            match c {
                // The arrow of `Fn() -> T` closes nothing.
                '>' if previous == '-' => {}
                '<' | '(' | '[' => depth += 1,
                '>' | ')' | ']' if depth == 0 => break,
                '>' | ')' | ']' => depth -= 1,
                ',' if depth == 0 => {
                    args.push(String::new());
                    previous = c;
                    continue;
                }
                _ => {}
            }
            previous = c;
            if let Some(last) = args.last_mut() {
                last.push(c);
            }
        }
        // (A trailing comma leaves an empty last argument.)
        if args.len() > 1 && args.last().is_some_and(|a| a.trim().is_empty()) {
            args.pop();
        }
        let error = args.last().map(|a| a.trim()).unwrap_or_default();
        word_start
            && args.len() == 2
            && ["String", "std::string::String", "alloc::string::String"].contains(&error)
    })
}

/// The `{`-blocks of `code` (blanked) that are the bodies of visible traits (`pub`,
/// `pub(crate)`, ...): every method of one is as visible as the trait.
fn visible_trait_bodies(code: &str) -> Vec<(usize, usize)> {
    let mut bodies = Vec::new();
    for (at, _) in code.match_indices("trait ") {
        let line_start = code[..at].rfind('\n').map_or(0, |n| n + 1);
        let prefix = code[line_start..at].trim();
        if !prefix.starts_with("pub") || prefix.contains(['{', ';', '=']) {
            continue;
        }
        let Some(open) = code[at..].find(['{', ';']).map(|n| at + n) else {
            continue;
        };
        if code.as_bytes()[open] != b'{' {
            continue;
        }
        let mut depth = 0;
        for (n, c) in code[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        bodies.push((open, open + n));
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    bodies
}

/// The functions of `text` that others can call (`pub`, `pub(crate)`, `pub(super)`,
/// `pub(in ..)`, a visible trait's methods) and that return `Result<_, String>`, directly
/// or through a type alias, and the `FromStr`/`TryFrom` errors that are `String`: each as
/// (line, signature). The test module is left out.
fn string_error_signatures(text: &str) -> Vec<(usize, String)> {
    let original = code(text);
    let code = blank_comments_and_strings(original);
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let one_line = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let is_word_start = |at: usize| {
        !code[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
    };
    let mut found = Vec::new();
    // Type aliases that are such a `Result` (`type Outcome<T> = Result<T, String>;`).
    let mut aliases = Vec::new();
    for (at, _) in code.match_indices("type ") {
        if !is_word_start(at) {
            continue;
        }
        let Some(end) = code[at..].find(';').map(|n| at + n) else {
            continue;
        };
        let Some((name, ty)) = code[at + "type ".len()..end].split_once('=') else {
            continue;
        };
        let name = name.split(['<', ' ']).next().unwrap_or_default().trim();
        let ty = ty.trim();
        if ["Err", "Error"].contains(&name)
            && ["String", "std::string::String", "alloc::string::String"].contains(&ty)
        {
            found.push((line_of(at), one_line(&original[at..=end])));
        } else if has_string_error(ty) {
            aliases.push(name.to_owned());
        }
    }
    let traits = visible_trait_bodies(&code);
    for (at, _) in code.match_indices("fn ") {
        if !is_word_start(at) {
            continue;
        }
        let line_start = code[..at].rfind('\n').map_or(0, |n| n + 1);
        let prefix = code[line_start..at].trim();
        let in_trait = traits.iter().any(|(open, close)| *open < at && at < *close);
        if !(prefix.starts_with("pub") || in_trait && !prefix.contains(['(', '='])) {
            continue;
        }
        let Some(end) = code[at..].find(['{', ';']).map(|n| at + n) else {
            continue;
        };
        let signature = &code[at..end];
        // The return type: what follows the parameters' closing parenthesis (the
        // parameters open with the first `(` outside the generics `<...>`).
        let (mut angles, mut previous) = (0, ' ');
        let open = signature.char_indices().find_map(|(n, c)| {
            match c {
                '>' if previous == '-' => {}
                '<' => angles += 1,
                '>' => angles -= 1,
                '(' if angles == 0 => return Some(n),
                _ => {}
            }
            previous = c;
            None
        });
        let Some(open) = open else { continue };
        let mut depth = 0;
        let close = signature[open..].char_indices().find_map(|(n, c)| {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(open + n);
                    }
                }
                _ => {}
            }
            None
        });
        let Some(close) = close else { continue };
        let Some(returns) = signature[close + 1..].trim_start().strip_prefix("->") else {
            continue;
        };
        let returns = returns.split(" where").next().unwrap_or_default();
        let aliased = aliases.iter().any(|alias| {
            returns.match_indices(alias.as_str()).any(|(n, _)| {
                let before = returns[..n].chars().next_back();
                let after = returns[n + alias.len()..].chars().next();
                !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                    && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
            })
        });
        if has_string_error(returns) || aliased {
            let start = line_start + code[line_start..at].find(prefix).unwrap_or(0);
            found.push((line_of(at), one_line(&original[start..end])));
        }
    }
    found.sort();
    found
}

#[test]
fn no_visible_function_of_the_library_returns_a_string_error() {
    // An error that is only text cannot be matched on, loses its cause and rarely names
    // the thing it is about; the library's errors are enums (`thiserror`) whose message
    // names the key, file or plugin and says what to do.
    let root = root();
    let mut found = Vec::new();
    for dir in ["host/src", "calls/src"] {
        for (file, text) in sources(&root.join(dir)) {
            for (line, signature) in string_error_signatures(&text) {
                found.push(format!("{dir}/{file}:{line}: {signature}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "functions that return `Result<_, String>` (give them an error enum deriving \
         `Debug, thiserror::Error`, whose message names what it is about): {found:#?}"
    );
}

#[test]
fn the_string_error_check_sees_one_however_it_is_written() {
    let text = r#"//! m
/// Says "fn hidden() -> Result<(), String>" in a comment.
pub fn fine() -> Result<(), Problem> { let s = "pub fn no() -> Result<(), String> {"; }
pub(crate) fn one(a: u8) -> Result<Vec<u8>, String> {
    todo!()
}
pub(in crate::config) async fn two(
    a: impl Fn(u8) -> Result<u8, String>,
    b: &str,
) -> Result<
    BTreeMap<String, u8>,
    String,
> {
    todo!()
}
fn private() -> Result<(), String> { Ok(()) }
pub(super) fn io<F: Fn(u8) -> u8>(f: F) -> io::Result<String> { todo!() }
pub(crate) type Outcome<T> = Result<T, String>;
pub fn three() -> Outcome<u8> { todo!() }
pub trait Keeper {
    fn keep(&self) -> Result<(), std::string::String>;
    fn fine(&self) -> Result<(), KeepError> { let c = '{'; Ok(()) }
}
impl std::str::FromStr for Point {
    type Err = String;
    fn from_str(t: &str) -> Result<Point, String> { todo!() }
}
#[cfg(test)]
pub fn test_helper() -> u8 { 1 }
pub fn after_a_test_helper() -> Result<(), String> { Ok(()) }
#[cfg(test)]
mod tests {
    pub fn in_a_test() -> Result<(), String> { Ok(()) }
}
"#;
    let lines: Vec<usize> = string_error_signatures(text)
        .into_iter()
        .map(|(line, _)| line)
        .collect();
    assert_eq!(
        lines,
        [4, 7, 19, 21, 25, 30],
        "{:#?}",
        string_error_signatures(text)
    );
    let (_, two) = &string_error_signatures(text)[1];
    assert!(
        two.starts_with("pub(in crate::config) async fn two(") && two.ends_with("String, >"),
        "{two}"
    );
}
