//! The Rust toolchain plugin end to end, through the `toolhost` binary and the real .so,
//! set up as the book says (the example config and `coder` profile): the profile lists
//! the Rust tools; `cargo_check` on a fixture crate with a type error answers the model
//! with the compact line and carries the whole diagnostic (its suggested replacement
//! too) in the result's details and structured value; `cargo_test` reports a failing
//! test's output and the totals; `rustc_explain` refuses a code that is not one.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Value, json};

use crate::support::{PluginDir, toolhost_command};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The example config and `coder` profile in a temporary folder, and a plugin folder
/// with the plugins the profile lists.
struct Setup {
    dir: tempfile::TempDir,
    plugins: PluginDir,
}

impl Setup {
    fn new() -> Setup {
        let crate::support::CoderSetup { dir, plugins } = crate::support::CoderSetup::new("");
        Setup { dir, plugins }
    }

    /// `toolhost call TOOL ARGS --profile coder --workspace CRATE --yes --json`.
    fn call(&self, tool: &str, args: &Value, workspace: &Path) -> Output {
        toolhost_command()
            .arg("--config")
            .arg(self.dir.path().join("config.toml"))
            .args([
                "call",
                tool,
                &args.to_string(),
                "--profile",
                "coder",
                "--yes",
            ])
            .arg("--json")
            .arg("--workspace")
            .arg(workspace)
            .arg("--plugins")
            .arg(self.plugins.path())
            .output()
            .expect("run toolhost call")
    }
}

/// A crate with a type error in `src/lib.rs` line 3 and a failing test in `tests/`.
fn fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("crate");
    std::fs::create_dir_all(dir.path().join("src")).expect("src");
    std::fs::create_dir_all(dir.path().join("tests")).expect("tests");
    std::fs::write(
        dir.path().join("Cargo.toml"),
        "[package]\nname = \"e2e_fixture\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [features]\nbroken = []\n\n[workspace]\n",
    )
    .expect("Cargo.toml");
    std::fs::write(
        dir.path().join("src/lib.rs"),
        "#[cfg(feature = \"broken\")]\npub fn name() -> String {\n    \"fixture\"\n}\n\n\
         pub fn double(x: u32) -> u32 {\n    x * 2\n}\n",
    )
    .expect("lib.rs");
    std::fs::write(
        dir.path().join("tests/double.rs"),
        "#[test]\nfn doubles() {\n    assert_eq!(e2e_fixture::double(2), 4);\n}\n\n\
         #[test]\nfn doubles_wrongly() {\n    assert_eq!(e2e_fixture::double(3), 7, \"three twice\");\n}\n",
    )
    .expect("test");
    dir
}

fn cargo_here() -> bool {
    let here = std::process::Command::new("cargo")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !here {
        eprintln!("skipped: cargo is not installed");
    }
    here
}

#[test]
fn the_coder_profile_checks_and_tests_a_crate_with_diagnostics_in_the_details() {
    if !cargo_here() {
        return;
    }
    let setup = Setup::new();
    let list = toolhost_command()
        .arg("--config")
        .arg(setup.dir.path().join("config.toml"))
        .args(["list", "--json", "--profile", "coder", "--plugins"])
        .arg(setup.plugins.path())
        .output()
        .expect("toolhost list");
    assert!(list.status.success(), "{}", text(&list.stderr));
    let tools: Value = serde_json::from_slice(&list.stdout).expect("JSON");
    let names: Vec<&str> = tools
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for tool in [
        "cargo_check",
        "cargo_clippy",
        "cargo_test",
        "cargo_fix",
        "rustc_explain",
        "rustdoc_lookup",
        "crates_io_lookup",
        "run_command",
    ] {
        assert!(names.contains(&tool), "{tool} missing from {names:?}");
    }

    let krate = fixture();
    let out = setup.call(
        "cargo_check",
        &json!({"features": ["broken"]}),
        krate.path(),
    );
    let result: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", text(&out.stdout), text(&out.stderr)));
    let shown = result.to_string();
    assert!(
        shown.contains("error[E0308] src/lib.rs:3:5: mismatched types"),
        "{shown}"
    );
    let diagnostics = result["details"]["diagnostics"]
        .as_array()
        .unwrap_or_else(|| panic!("no diagnostics details in {shown}"));
    let e0308 = diagnostics
        .iter()
        .find(|d| d["code"] == "E0308")
        .unwrap_or_else(|| panic!("no E0308 in {shown}"));
    assert_eq!(
        (e0308["file"].as_str(), e0308["line"].as_u64()),
        (Some("src/lib.rs"), Some(3))
    );
    assert!(
        e0308["extra"]
            .to_string()
            .contains("suggested_replacement\":\"\\\"fixture\\\".to_string()")
            || e0308["extra"].to_string().contains("to_string"),
        "{e0308}"
    );
    assert_eq!(result["structured"]["errors"], 1, "{shown}");

    let out = setup.call("cargo_test", &json!({}), krate.path());
    let result: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", text(&out.stdout), text(&out.stderr)));
    let report = &result["structured"];
    assert_eq!(report["totals"]["passed"], 1, "{result}");
    assert_eq!(report["totals"]["failed"], 1, "{result}");
    assert_eq!(report["failed"][0]["name"], "doubles_wrongly", "{result}");
    assert!(
        report["failed"][0]["output"]
            .as_str()
            .is_some_and(|o| o.contains("three twice")),
        "{result}"
    );
    assert_eq!(report["suites"][1]["name"], "tests/double.rs", "{result}");

    let out = setup.call("rustc_explain", &json!({"code": "E38"}), krate.path());
    assert!(!out.status.success());
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(said.contains("four digits"), "{said}");
}

/// `toolhost call TOOL {} --isolate --yes --json` of the Rust plugin with the config
/// `file` on the workspace `krate`: the result, and stdout as printed.
fn call_in_a_worker(file: &Path, tool: &str, krate: &Path) -> (Value, String) {
    let plugins = PluginDir::with(&["toolhost_rust"]);
    let out = toolhost_command()
        .arg("--config")
        .arg(file)
        .args(["call", tool, "{}", "--isolate", "--yes", "--json"])
        .arg("--workspace")
        .arg(krate)
        .arg("--plugins")
        .arg(plugins.path())
        .output()
        .unwrap_or_else(|e| panic!("toolhost call {tool} --isolate: {e}"));
    let said = text(&out.stdout);
    let result: Value =
        serde_json::from_str(&said).unwrap_or_else(|e| panic!("{e}: {said}{}", text(&out.stderr)));
    (result, said)
}

/// A library crate of its own workspace named `name`, with `lib_rs` as its source.
fn one_crate(name: &str, lib_rs: &str) -> tempfile::TempDir {
    let krate = tempfile::tempdir().expect("crate");
    std::fs::create_dir_all(krate.path().join("src")).expect("src");
    std::fs::write(
        krate.path().join("Cargo.toml"),
        format!(
            "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n"
        ),
    )
    .expect("Cargo.toml");
    std::fs::write(krate.path().join("src/lib.rs"), lib_rs).expect("lib.rs");
    krate
}

/// Where rustup and cargo keep their files: `$RUSTUP_HOME` and `$CARGO_HOME`, else
/// `~/.rustup` and `~/.cargo`.
fn toolchain_homes() -> (PathBuf, PathBuf) {
    let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
    let var = |name: &str, default: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(default))
    };
    (var("RUSTUP_HOME", ".rustup"), var("CARGO_HOME", ".cargo"))
}

#[test]
fn cargo_test_runs_doc_tests_in_a_worker_with_the_paths_the_readme_gives() {
    if !cargo_here() {
        return;
    }
    let krate = one_crate(
        "doc_fixture",
        "/// Doubles.\n///\n/// ```\n/// assert_eq!(doc_fixture::double(2), 4);\n/// ```\n\
         pub fn double(x: u32) -> u32 {\n    x * 2\n}\n\n\
         #[test]\nfn doubles() {\n    assert_eq!(double(3), 6);\n}\n",
    );
    // The book's words for the Rust plugin in a worker: the toolchain readable, cargo's
    // caches writable. Nothing else.
    let (rustup, cargo) = toolchain_homes();
    let config = tempfile::tempdir().expect("config");
    let file = config.path().join("config.toml");
    std::fs::write(
        &file,
        format!(
            "[isolation]\nread_paths = [{rustup:?}, {cargo:?}]\nwrite_paths = [{:?}, {:?}]\n",
            cargo.join("registry"),
            cargo.join("git")
        ),
    )
    .expect("config");
    let (result, said) = call_in_a_worker(&file, "cargo_test", krate.path());
    assert_eq!(result["is_error"], false, "{result:#}");
    let totals = &result["structured"]["totals"];
    assert_eq!(totals["failed"], 0, "{result:#}");
    assert!(
        totals["passed"].as_u64().is_some_and(|n| n >= 2),
        "the unit test and the doc-test passed: {result:#}"
    );
    assert!(!said.contains("Couldn't run the test"), "{said}");
}

#[test]
fn a_declared_program_runs_in_a_worker_with_no_paths_configured() {
    if !cargo_here() {
        return;
    }
    // rustc is declared by rustc_explain; through rustup's proxy it lives under ~/.cargo
    // and ~/.rustup, which no read_paths names here.
    let config = tempfile::tempdir().expect("config");
    let file = config.path().join("config.toml");
    std::fs::write(&file, "").expect("config");
    let plugins = PluginDir::with(&["toolhost_rust"]);
    let out = toolhost_command()
        .arg("--config")
        .arg(&file)
        .args([
            "call",
            "rustc_explain",
            r#"{"code": "E0382"}"#,
            "--isolate",
            "--plugins",
        ])
        .arg(plugins.path())
        .output()
        .expect("toolhost call rustc_explain --isolate");
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(text(&out.stdout).contains("moved"), "{}", text(&out.stdout));
}

/// `cargo_check` in a worker with no hand edits: no `read_paths`, no `write_paths`, as
/// root (or whoever runs the tests) with rustup's proxies on PATH. The proxy reads
/// rustup's settings and runs a toolchain under rustup's home, which the worker opens
/// because the plugin declares `cargo`.
#[test]
fn cargo_check_runs_in_a_worker_with_no_config() {
    if !cargo_here() {
        return;
    }
    let krate = one_crate(
        "check_fixture",
        "/// Doubles.\npub fn double(x: u32) -> u32 {\n    x * 2\n}\n",
    );
    let config = tempfile::tempdir().expect("config");
    let file = config.path().join("config.toml");
    std::fs::write(&file, "").expect("config");
    let (result, said) = call_in_a_worker(&file, "cargo_check", krate.path());
    assert_eq!(result["is_error"], false, "{result:#}");
    assert!(
        !said.contains("may not read"),
        "nothing of the toolchain refused: {said}"
    );
}
