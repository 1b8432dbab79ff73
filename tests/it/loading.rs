//! Loading: good plugins load next to broken files, and each broken file gets its own
//! clear error.

use toolhost::LoadErrorKind;

use crate::support::{PluginDir, built, load, loader};

fn error_for<'a>(report: &'a toolhost::LoadReport, file: &str) -> &'a toolhost::PluginLoadError {
    report
        .errors
        .iter()
        .find(|e| e.file.file_name().is_some_and(|n| n == file))
        .unwrap_or_else(|| panic!("no error for {file}; errors: {:?}", report.errors))
}

#[test]
fn broken_files_each_get_their_own_error_and_good_plugins_still_load() {
    let dir = PluginDir::with(&["fixture_no_root", "fixture_incompatible", "toolhost_utils"]);
    let good = std::fs::read(crate::support::so("fixture_basic")).expect("read");
    dir.write("libtruncated.so", &good[..good.len() / 3]);
    dir.write("libtiny.so", &good[..100]);
    dir.write("x.so", b"this is a text file, not a library\n");
    dir.write("README.txt", b"not a plugin, and not a .so either");

    let (report, registry, _) = load(&dir);

    let names: Vec<_> = report.plugins.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["utils"], "only the good plugin loads");
    assert!(registry.get("time_now").is_some());
    assert_eq!(
        report.errors.len(),
        5,
        "one error per bad .so: {:#?}",
        report.errors
    );
    let tiny = error_for(&report, "libtiny.so");
    assert!(
        matches!(tiny.kind, LoadErrorKind::Truncated { .. }),
        "{tiny}"
    );

    let truncated = error_for(&report, "libtruncated.so");
    assert!(
        matches!(truncated.kind, LoadErrorKind::Truncated { .. }),
        "{truncated}"
    );
    assert!(truncated.to_string().contains("incomplete"));
    assert!(truncated.to_string().contains("libtruncated.so"));

    let text = error_for(&report, "x.so");
    assert!(
        matches!(text.kind, LoadErrorKind::NotASharedLibrary { .. }),
        "{text}"
    );
    assert!(text.to_string().contains("not a shared library"));

    let no_root = error_for(&report, "libfixture_no_root.so");
    assert!(
        matches!(no_root.kind, LoadErrorKind::NoRootModule),
        "{no_root}"
    );
    assert!(no_root.to_string().contains("not a toolhost plugin"));

    let layout = error_for(&report, "libfixture_incompatible.so");
    let LoadErrorKind::IncompatibleLayout { details, .. } = &layout.kind else {
        panic!("expected a layout error, got {layout}");
    };
    let text = layout.to_string();
    assert!(
        details.iter().any(|d| d.contains("priority")),
        "the short Error: lines name the inserted field: {details:?}"
    );
    assert!(
        text.len() < 1000,
        "only the short lines, not the whole report: {text}"
    );
    assert!(
        text.contains("ABI 0.1.0")
            && text.contains(&format!("ABI {}", toolhost::ABI_VERSION))
            && text.contains("the plugin is older than this host: its vendor must rebuild it"),
        "names both versions and the side to change: {text}"
    );
    assert!(!text.contains("modified"), "{text}");
}

/// A plugin built against today's API sources versioned 0.2.0 (layouts and ABI
/// unchanged) is refused by abi_stable's check of the crate's series; the host says so,
/// naming both crate versions and what to rebuild against, instead of a layout diff.
#[test]
fn a_plugin_of_another_crate_series_is_refused_naming_both_crate_versions() {
    let dir = PluginDir::with(&[]);
    std::fs::copy(
        built().join("debug").join("libfixture_series_0_2.so"),
        dir.path().join("libfixture_series_0_2.so"),
    )
    .expect("install");
    let (report, _, _) = load(&dir);
    let refused = error_for(&report, "libfixture_series_0_2.so");
    let LoadErrorKind::OtherCrateSeries {
        plugin_crate,
        host_crate,
    } = &refused.kind
    else {
        panic!("expected the crate-series refusal, got {refused}");
    };
    assert_eq!(
        (plugin_crate.as_str(), host_crate.as_str()),
        ("0.2.0", toolhost::API_VERSION)
    );
    let text = refused.to_string();
    assert!(
        text.contains("built against toolhost-plugin-api 0.2.0, another series than this host's")
            && text.contains(&format!("(ABI {})", toolhost::ABI_VERSION)),
        "{text}"
    );
}

#[test]
fn plugin_built_with_panic_abort_is_refused_with_that_reason() {
    let dir = PluginDir::with(&["fixture_abort"]);
    let (report, registry, _) = load(&dir);
    assert!(report.plugins.is_empty());
    assert!(registry.get("abort_echo").is_none());
    let e = &report.errors[0];
    assert!(matches!(e.kind, LoadErrorKind::PanicAbort), "{e}");
    assert!(e.to_string().contains("panic = \"abort\""), "{e}");
}

#[test]
fn a_tool_whose_metadata_panics_is_left_out_and_its_siblings_load() {
    let dir = PluginDir::with(&["fixture_basic"]);
    let (report, registry, _) = load(&dir);
    assert_eq!(report.plugins.len(), 1);
    assert!(registry.get("bad_metadata").is_none());
    assert!(registry.get("echo").is_some());
    let e = &report.errors[0];
    assert!(matches!(e.kind, LoadErrorKind::Tool { .. }), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("bad_metadata") && text.contains("description panicked"),
        "{text}"
    );
}

/// The panic in a tool's metadata is reported once, as the one-line warning, without the
/// plugin's panic message and backtrace on stderr (even with `RUST_BACKTRACE=1`).
#[test]
fn a_metadata_panic_at_load_is_one_line_on_stderr_not_the_panic_output() {
    let dir = PluginDir::with(&["fixture_basic"]);
    let out = crate::support::toolhost_command()
        .args(["list", "--plugins"])
        .arg(dir.path())
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("run toolhost list");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(
        err.matches("fixture panic in description").count(),
        1,
        "the panic is reported once: {err}"
    );
    assert!(
        !err.contains("panicked at") && !err.contains("stack backtrace"),
        "the plugin's panic output reached stderr: {err}"
    );
}

#[test]
fn check_json_reports_the_plugin_its_tools_and_problems_for_scripts() {
    let dir = PluginDir::with(&["fixture_echo", "fixture_basic"]);
    let check = |file: std::path::PathBuf| {
        let out = crate::support::toolhost_command()
            .args(["check", "--json"])
            .arg(file)
            .output()
            .expect("run toolhost check --json");
        let report: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("one JSON object on stdout");
        (out.status.code(), report)
    };
    let (code, good) = check(dir.path().join("libfixture_echo.so"));
    assert_eq!(code, Some(0), "{good}");
    assert_eq!(good["ok"], true, "{good}");
    assert_eq!(good["plugin"]["name"], "echo", "{good}");
    for (key, value) in [
        ("abi_version", toolhost::ABI_VERSION),
        ("host_abi_version", toolhost::ABI_VERSION),
        ("api_version", toolhost::API_VERSION),
        ("host_api_version", toolhost::API_VERSION),
    ] {
        assert_eq!(good["plugin"][key], value, "{key}: {good}");
    }
    assert_eq!(
        good["static"]["sha256"].as_str().map(str::len),
        Some(64),
        "{good}"
    );
    assert!(
        good["tools"].as_array().is_some_and(|t| t
            .iter()
            .any(|t| t["name"] == "build_version" && t["risk"] == "read")),
        "{good}"
    );
    let (code, flawed) = check(dir.path().join("libfixture_basic.so"));
    assert_eq!(code, Some(1), "{flawed}");
    assert_eq!(flawed["ok"], false);
    assert!(
        flawed["problems"][0]
            .as_str()
            .is_some_and(|p| p.contains("bad_metadata")),
        "{flawed}"
    );
    let not_a_plugin = dir.write("libnot.so", b"just text");
    let (code, refused) = check(not_a_plugin);
    assert_eq!(code, Some(1), "{refused}");
    assert_eq!(refused["loaded"], false);
    assert!(
        refused["error"]
            .as_str()
            .is_some_and(|e| e.contains("not a shared library")),
        "{refused}"
    );
}

#[test]
fn missing_plugin_directory_is_an_error_not_a_crash() {
    let missing = std::path::PathBuf::from("/nonexistent/toolhost-plugins");
    let report = loader().load_dirs(std::slice::from_ref(&missing));
    assert!(report.plugins.is_empty());
    assert_eq!(report.errors[0].file, missing);
    assert!(
        report.errors[0]
            .to_string()
            .contains("could not read the plugin directory")
    );
}

#[test]
fn plugin_metadata_crosses_the_boundary() {
    let dir = PluginDir::with(&["fixture_basic"]);
    let (report, registry, _) = load(&dir);
    let p = &report.plugins[0];
    assert_eq!(p.name, "basic");
    assert_eq!(p.version, "1.0.0");
    assert_eq!(p.api_version, toolhost::API_VERSION);
    assert_eq!(p.abi_version, toolhost::ABI_VERSION);
    let slow = registry.get("slow_interactive").expect("tool").spec();
    assert!(slow.interactive);
    assert_eq!(slow.risk, toolhost::Risk::Read);
    assert_eq!(slow.schema["required"][0], "ms");
    assert_eq!(
        registry.get("risky_write").expect("tool").spec().risk,
        toolhost::Risk::Write
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loading_the_same_file_twice_gives_two_independent_generations() {
    let dir = PluginDir::with(&["fixture_basic"]);
    let file = dir.path().join("libfixture_basic.so");
    let a = loader().load_file(&file).expect("first load");
    let b = loader().load_file(&file).expect("second load");
    let registry =
        |p: &toolhost::LoadedPlugin| toolhost::LoadedPlugin::registry(std::slice::from_ref(p)).0;
    let (ra, rb) = (registry(&a), registry(&b));
    // `slow` counts the calls in flight in a static of its library: two separate copies of
    // the library each see only their own call, one shared (cached) library would see two.
    let d = crate::support::dispatcher(toolhost::DispatchConfig::default());
    let turn = toolhost::CallContext::new(toolhost::TurnIdentity::default());
    let slow = || crate::support::call("1", "slow", serde_json::json!({"ms": 300}));
    let (x, y) = tokio::join!(d.call(&ra, &turn, slow()), d.call(&rb, &turn, slow()));
    for r in [x, y] {
        let out: serde_json::Value = serde_json::from_str(&r.output).expect("JSON");
        assert_eq!(
            out["in_flight_at_start"], 1,
            "the two loads share their statics: {out}"
        );
    }
}
