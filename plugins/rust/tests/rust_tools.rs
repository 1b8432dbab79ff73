//! The Rust tools through `TestHost` on a fixture crate the setup writes into a temporary
//! folder (no dependencies, so cargo runs offline): a type error behind a feature, a
//! clippy lint, a machine-applicable warning, a failing and an ignored test, a test that
//! hangs (ignored unless asked for), and a test that tries to write outside the workspace
//! root. Registry lookups go to a scripted
//! `cargo` on `PATH`; nothing here uses the network.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolhost_plugin_api::WorkspaceAnswer;
use toolhost_plugin_api::testing::TestHost;
use toolhost_rust::{
    cargo_check, cargo_clippy, cargo_fix, cargo_test, crates_io_lookup, rustc_explain,
    rustdoc_lookup,
};

/// The fixture's `src/lib.rs`.
const LIB_RS: &str = r#"//! A fixture crate for the Rust tools' tests.

#[cfg(feature = "broken")]
mod broken;

/// Adds two numbers (with a needless `return`: clippy's lint).
pub fn add(a: i32, b: i32) -> i32 {
    return a + b;
}

/// Two (with a needless `mut`: a machine-applicable compiler warning).
pub fn two() -> i32 {
    let mut x = 2;
    x
}

#[cfg(test)]
mod tests {
    #[test]
    fn adds() {
        assert_eq!(super::add(1, 2), 3);
    }

    #[test]
    fn fails() {
        println!("about to check one plus one");
        assert_eq!(super::add(1, 1), 3);
    }

    #[test]
    #[ignore = "too slow"]
    fn slow() {}

    #[test]
    #[ignore = "hangs until killed"]
    fn hangs() {
        std::fs::write("hang.pid", std::process::id().to_string()).expect("pid file");
        std::thread::sleep(std::time::Duration::from_secs(300));
    }

    #[test]
    fn plants_outside() {
        let target = std::env::var("FIXTURE_OUTSIDE").expect("FIXTURE_OUTSIDE");
        std::fs::write(&target, "planted").expect("write outside the root");
    }
}
"#;

/// A temporary folder holding the fixture crate (`crate/`) and a folder beside it
/// (`outside/`).
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("tmp");
        let krate = dir.path().join("crate");
        std::fs::create_dir_all(krate.join("src")).expect("src");
        std::fs::create_dir_all(dir.path().join("outside")).expect("outside");
        std::fs::write(
            krate.join("Cargo.toml"),
            "[package]\nname = \"fixture\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
             [features]\nbroken = []\n\n[workspace]\n",
        )
        .expect("Cargo.toml");
        std::fs::write(krate.join("src/lib.rs"), LIB_RS).expect("lib.rs");
        std::fs::write(
            krate.join("src/broken.rs"),
            "pub fn name() -> String {\n    \"fixture\"\n}\n",
        )
        .expect("broken.rs");
        Fixture { dir }
    }

    fn krate(&self) -> PathBuf {
        self.dir.path().join("crate")
    }

    fn outside(&self) -> PathBuf {
        self.dir.path().join("outside")
    }

    /// A host whose workspace root is the crate.
    fn host(&self) -> TestHost {
        let mut answer = WorkspaceAnswer::with_roots([self.krate().display().to_string()]);
        answer.env = vec![format!(
            "FIXTURE_OUTSIDE={}",
            self.outside().join("planted").display()
        )];
        TestHost::new().workspace(answer)
    }
}

/// Whether cargo (and `component`, if given) is here; tests skip, saying so, without.
fn toolchain(component: Option<&str>) -> bool {
    let has = |args: &[&str]| {
        std::process::Command::new("cargo")
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !has(&["--version"]) {
        eprintln!("skipped: cargo is not installed");
        return false;
    }
    if component == Some("clippy") && !has(&["clippy", "--version"]) {
        eprintln!("skipped: clippy is not installed (rustup component add clippy)");
        return false;
    }
    true
}

fn structured(
    host: &TestHost,
    tool: &impl toolhost_plugin_api::Tool,
    args: Value,
) -> (Value, Value, String) {
    let out = host.call_output(tool, args).expect("the call succeeds");
    let details = serde_json::to_value(&out.details).expect("details");
    (out.structured.expect("structured"), details, out.text)
}

#[test]
fn cargo_check_reports_the_type_errors_code_place_and_suggested_replacement() {
    if !toolchain(None) {
        return;
    }
    let fixture = Fixture::new();
    let host = fixture.host();
    let (value, details, text) = structured(&host, &cargo_check, json!({"features": ["broken"]}));
    assert_eq!(value["success"], false, "{text}");
    assert!(value["errors"].as_u64() >= Some(1), "{text}");
    let error = value["diagnostics"]
        .as_array()
        .expect("diagnostics")
        .iter()
        .find(|d| d["code"] == "E0308")
        .unwrap_or_else(|| panic!("no E0308 in {text}"));
    assert_eq!(error["file"], "src/broken.rs");
    assert_eq!(error["line"], 2);
    assert!(
        text.contains("error[E0308] src/broken.rs:2:5: mismatched types"),
        "{text}"
    );
    // The details carry the whole diagnostic, the suggestion's replacement included.
    let detail = details["diagnostics"]
        .as_array()
        .expect("diagnostics details")
        .iter()
        .find(|d| d["code"] == "E0308")
        .expect("E0308 in the details");
    assert_eq!(detail["file"], "src/broken.rs");
    let replacements: Vec<&str> = detail["extra"]["children"]
        .as_array()
        .expect("children")
        .iter()
        .flat_map(|c| c["spans"].as_array().into_iter().flatten())
        .filter_map(|s| s["suggested_replacement"].as_str())
        .collect();
    assert!(
        replacements
            .iter()
            .any(|r| r.contains("to_string") || r.contains("String::from")),
        "{replacements:?}"
    );
    assert!(text.contains("--offline"), "{text}");
    // Without the feature it compiles, with the unused `mut` as a warning.
    let (value, _, text) = structured(&host, &cargo_check, json!({}));
    assert_eq!(value["success"], true, "{text}");
    assert!(value["warnings"].as_u64() >= Some(1), "{text}");
    assert!(text.contains("unused_mut"), "{text}");
}

#[test]
fn cargo_clippy_reports_the_lint() {
    if !toolchain(Some("clippy")) {
        return;
    }
    let fixture = Fixture::new();
    let (value, details, text) = structured(&fixture.host(), &cargo_clippy, json!({}));
    let lint = value["diagnostics"]
        .as_array()
        .expect("diagnostics")
        .iter()
        .find(|d| d["code"] == "clippy::needless_return")
        .unwrap_or_else(|| panic!("no needless_return in {text}"));
    assert_eq!(
        (lint["file"].as_str(), lint["line"].as_u64()),
        (Some("src/lib.rs"), Some(8))
    );
    assert!(
        text.contains("warning[clippy::needless_return] src/lib.rs:8:"),
        "{text}"
    );
    assert!(
        details["diagnostics"]
            .as_array()
            .expect("details")
            .iter()
            .any(|d| d["code"] == "clippy::needless_return"),
        "{details}"
    );
}

#[test]
fn cargo_test_reports_the_failure_with_its_output_and_the_totals() {
    if !toolchain(None) {
        return;
    }
    let fixture = Fixture::new();
    let (value, _, text) = structured(
        &fixture.host(),
        &cargo_test,
        json!({"filter": "tests::", "timeout_secs": 300}),
    );
    assert_eq!(value["success"], false, "{text}");
    let totals = &value["totals"];
    // adds passes; fails and plants_outside fail; slow and hangs are ignored.
    assert_eq!(
        (
            totals["passed"].as_u64(),
            totals["failed"].as_u64(),
            totals["ignored"].as_u64()
        ),
        (Some(1), Some(2), Some(2)),
        "{text}"
    );
    let failed = value["failed"].as_array().expect("failed");
    let fails = failed
        .iter()
        .find(|c| c["name"] == "tests::fails")
        .unwrap_or_else(|| panic!("tests::fails not among the failures: {text}"));
    let output = fails["output"].as_str().expect("output");
    assert!(output.contains("about to check one plus one"), "{output}");
    assert!(output.contains("left: 2"), "{output}");
    assert!(text.contains("FAILED tests::fails"), "{text}");
    assert!(text.contains("1 passed, 2 failed, 2 ignored"), "{text}");
    let slow = value["suites"][0]["tests"]
        .as_array()
        .expect("tests")
        .iter()
        .find(|c| c["name"] == "tests::slow")
        .expect("slow listed");
    assert_eq!(
        (slow["outcome"].as_str(), slow["reason"].as_str()),
        (Some("ignored"), Some("too slow"))
    );
    assert_eq!(
        value["suites"][0]["name"], "unittests src/lib.rs",
        "{value}"
    );
}

#[test]
fn a_test_that_writes_outside_the_root_is_refused_by_the_sandbox() {
    if !toolchain(None) {
        return;
    }
    match toolhost_sandbox::kernel_abi() {
        Some(abi) if abi >= toolhost_sandbox::FILESYSTEM_ABI => {}
        other => {
            eprintln!("skipped: Landlock ABI {other:?} cannot hold the sandbox");
            return;
        }
    }
    let fixture = Fixture::new();
    let (value, _, text) = structured(
        &fixture.host(),
        &cargo_test,
        json!({"filter": "tests::plants_outside", "exact": true}),
    );
    assert!(
        !fixture.outside().join("planted").exists(),
        "the test wrote outside the root"
    );
    let failed = &value["failed"][0];
    assert_eq!(failed["name"], "tests::plants_outside", "{text}");
    let output = failed["output"].as_str().expect("output");
    assert!(output.contains("ermission denied"), "{output}");
    assert_eq!(value["totals"]["filtered_out"], 4, "{text}");
}

/// Whether `pid` is gone (or a zombie), waiting up to 20 s for it.
fn gone(pid: i32) -> bool {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, r)| r.split_whitespace().next().map(str::to_owned))
            });
        match state.as_deref() {
            None | Some("Z") => return true,
            Some(_) if Instant::now() >= end => return false,
            Some(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

#[test]
fn a_cancelled_cargo_test_kills_the_test_binary_it_started() {
    if !toolchain(None) {
        return;
    }
    let fixture = Fixture::new();
    let host = fixture.host();
    let pid_file = fixture.krate().join("hang.pid");
    let canceller = host.canceller();
    let watcher = std::thread::spawn(move || {
        // Bounded: cargo builds the tests first.
        let end = Instant::now() + Duration::from_secs(240);
        loop {
            if let Some(pid) = std::fs::read_to_string(&pid_file)
                .ok()
                .and_then(|t| t.trim().parse::<i32>().ok())
            {
                canceller.cancel();
                return Some(pid);
            }
            if Instant::now() >= end {
                canceller.cancel();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    let out = host.call_output(
        &cargo_test,
        json!({"filter": "tests::hangs", "exact": true, "include_ignored": true}),
    );
    let pid = watcher
        .join()
        .expect("watcher")
        .expect("the hanging test started");
    // Cancelled: the host's answer, or the tool's result saying so.
    if let Ok(out) = out {
        assert!(out.text.contains("cancelled"), "{}", out.text);
    }
    assert!(gone(pid), "the test binary {pid} survived the cancel");
}

#[test]
fn cargo_fix_applies_the_machine_applicable_fix_and_shows_the_diff() {
    if !toolchain(None) {
        return;
    }
    let fixture = Fixture::new();
    let host = fixture.host();
    let lib = fixture.krate().join("src/lib.rs");
    // No version control: cargo refuses unless told, and the tool says how.
    let (value, _, text) = structured(&host, &cargo_fix, json!({}));
    assert_eq!(value["success"], false, "{text}");
    assert!(text.contains("allow_no_vcs"), "{text}");
    assert_eq!(std::fs::read_to_string(&lib).expect("lib"), LIB_RS);

    let (value, _, text) = structured(&host, &cargo_fix, json!({"allow_no_vcs": true}));
    assert_eq!(value["success"], true, "{text}");
    let changed = value["changed"].as_array().expect("changed");
    assert_eq!(changed.len(), 1, "{text}");
    assert_eq!(changed[0]["path"], "src/lib.rs");
    assert_eq!(
        (changed[0]["added"].as_u64(), changed[0]["removed"].as_u64()),
        (Some(1), Some(1))
    );
    let diff = changed[0]["diff"].as_str().expect("diff");
    assert!(diff.contains("-    let mut x = 2;"), "{diff}");
    assert!(diff.contains("+    let x = 2;"), "{diff}");
    assert!(text.contains("src/lib.rs +1 -1"), "{text}");
    let fixed = std::fs::read_to_string(&lib).expect("lib");
    assert!(
        fixed.contains("    let x = 2;") && !fixed.contains("let mut x"),
        "{fixed}"
    );
}

#[test]
fn rustc_explain_explains_e0382_and_refuses_a_bad_code() {
    if !toolchain(None) {
        return;
    }
    let fixture = Fixture::new();
    let host = fixture.host();
    let text = host
        .call(&rustc_explain, json!({"code": "E0382"}))
        .expect("explained");
    assert!(text.starts_with("# E0382"), "{text}");
    assert!(text.contains("moved"), "{text}");
    let e = host
        .call(&rustc_explain, json!({"code": "--version"}))
        .expect_err("not a code");
    assert!(e.to_string().contains("four digits"), "{e}");
    let e = host
        .call(&rustc_explain, json!({"code": "E9999"}))
        .expect_err("no such code");
    assert!(e.to_string().contains("E9999"), "{e}");
}

/// The toolchain's rust-docs folder, if installed.
fn docs() -> Option<PathBuf> {
    let out = std::process::Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .ok()?;
    let sysroot = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    match toolhost_rust::docs_folder(Path::new(&sysroot)) {
        Ok(docs) => Some(docs),
        Err(e) => {
            eprintln!("skipped: {e}");
            None
        }
    }
}

#[test]
fn rustdoc_lookup_finds_a_std_method_and_answers_a_missing_one_with_near_matches() {
    if docs().is_none() {
        return;
    }
    let fixture = Fixture::new();
    let host = fixture.host();
    let (value, _, text) = structured(
        &host,
        &rustdoc_lookup,
        json!({"item": "std::collections::HashMap::entry"}),
    );
    assert_eq!(value["kind"], "method");
    assert!(
        value["signature"]
            .as_str()
            .expect("sig")
            .starts_with("pub fn entry(&mut self, key: K)"),
        "{value}"
    );
    assert!(text.contains("in-place manipulation"), "{text}");
    assert!(text.contains("```rust\npub fn entry"), "{text}");

    // A type given without its module, with its methods listed.
    let (value, _, text) = structured(&host, &rustdoc_lookup, json!({"item": "Vec"}));
    assert_eq!(value["path"], "std::vec::Vec", "{text}");
    assert!(
        value["members"]["method"]
            .as_array()
            .expect("methods")
            .iter()
            .any(|m| m == "push")
    );

    let e = host
        .call(
            &rustdoc_lookup,
            json!({"item": "std::collections::HashMap::entri"}),
        )
        .expect_err("no such method");
    let e = e.to_string();
    assert!(e.contains("has no member `entri`"), "{e}");
    assert!(e.contains("not in the local documentation"), "{e}");
    assert!(e.contains("std::collections::HashMap::entry"), "{e}");
    let e = host
        .call(
            &rustdoc_lookup,
            json!({"item": "std::collections::HashMapp"}),
        )
        .expect_err("no such type")
        .to_string();
    assert!(e.contains("not in the local documentation"), "{e}");
    assert!(e.contains("std::collections::HashMap"), "{e}");
    let e = host
        .call(&rustdoc_lookup, json!({"item": "NoSuchThingAnywhere"}))
        .expect_err("nothing like it")
        .to_string();
    assert!(e.contains("not in the local documentation"), "{e}");
}

#[test]
fn a_missing_rust_docs_component_names_the_install_command() {
    let tmp = tempfile::tempdir().expect("tmp");
    let e = toolhost_rust::docs_folder(tmp.path())
        .expect_err("no docs")
        .to_string();
    assert!(e.contains("rustup component add rust-docs"), "{e}");
}

#[test]
fn crates_io_lookup_reads_a_scripted_cargos_search_and_info() {
    let fixture = Fixture::new();
    let bin = fixture.dir.path().join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let script = bin.join("cargo");
    std::fs::write(
        &script,
        "#!/bin/sh\ncase \"$1\" in\n\
         search) printf 'serde = \"1.0.228\"    # A serialization framework\\nserde_json = \"1.0.145\"    # JSON for serde\\n... and 12 crates more (use --limit N to see more)\\n'; echo \"# args: $*\";;\n\
         info) printf 'tinyjson #json\\nA tiny JSON parser\\nversion: 2.5.1\\nlicense: MIT\\nfeatures:\\n +default = [std]\\n  std      = []\\ndependencies:\\n  serde@1.0\\n'; echo \"args: $*\";;\n\
         *) echo \"unexpected: $*\" >&2; exit 2;;\n\
         esac\n",
    )
    .expect("script");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let mut answer = WorkspaceAnswer::with_roots([fixture.krate().display().to_string()]);
    answer.env = vec![format!("PATH={}:/usr/bin:/bin", bin.display())];
    let host = TestHost::new().workspace(answer);
    assert_eq!(
        host.describe(&crates_io_lookup).requirements.programs,
        ["cargo"]
    );

    let (value, _, text) = structured(
        &host,
        &crates_io_lookup,
        json!({"query": "serde", "limit": 2}),
    );
    assert_eq!(value["mode"], "search");
    assert_eq!(value["results"][1]["name"], "serde_json");
    assert_eq!(value["results"][1]["version"], "1.0.145");
    assert_eq!(value["more"], 12);
    assert!(
        text.contains("# args: search --limit 2 --color never -- serde"),
        "{text}"
    );

    let (value, _, _) = structured(
        &host,
        &crates_io_lookup,
        json!({"name": "tinyjson", "version": "2.5"}),
    );
    let info = &value["info"];
    assert_eq!(info["name"], "tinyjson");
    assert_eq!(info["description"], "A tiny JSON parser");
    assert_eq!(info["features"][0]["name"], "default");
    assert_eq!(info["features"][0]["default"], true);
    assert_eq!(info["dependencies"][0], "serde@1.0");
    assert!(
        value["raw"].as_str().expect("raw").contains("tinyjson@2.5"),
        "{value}"
    );

    let e = host
        .call(&crates_io_lookup, json!({"name": "--index"}))
        .expect_err("not a crate name");
    assert!(e.to_string().contains("not a crate name"), "{e}");
}

#[test]
fn the_tools_declare_their_risks_requirements_and_output_schemas() {
    let host = TestHost::new();
    let check = host.describe(&cargo_check);
    assert_eq!(check.requirements.programs, ["cargo"]);
    assert!(check.output_schema.is_some());
    assert_eq!(
        host.describe(&cargo_fix).risk,
        toolhost_plugin_api::Risk::Write
    );
    assert_eq!(
        host.describe(&crates_io_lookup).risk,
        toolhost_plugin_api::Risk::Network
    );
    assert_eq!(
        host.describe(&rustc_explain).requirements.programs,
        ["rustc"]
    );
    // No workspace: the answer names the config line to add.
    let e = host
        .call(&cargo_check, json!({}))
        .expect_err("no workspace");
    assert!(e.to_string().contains("roots = ["), "{e}");
}
