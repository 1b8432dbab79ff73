//! Binary compatibility across plugin-api versions: fields appended to the prefix types
//! (a tool method, a host service) keep plugins loading in both directions.

use serde_json::{Value, json};

use crate::support::{PluginDir, call, dispatcher, load, newer_host, so};

#[tokio::test]
async fn a_plugin_built_against_a_newer_api_loads_and_sees_newer_services_as_unavailable() {
    let dir = PluginDir::with(&["fixture_newer"]);
    let (report, registry, _) = load(&dir);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.plugins[0].abi_version, "0.1.99");
    let r = dispatcher(toolhost::DispatchConfig::default())
        .call(
            &registry,
            &toolhost::CallContext::new(toolhost::TurnIdentity::default()),
            call("1", "probe_newer_service", json!({})),
        )
        .await;
    let out: Value = serde_json::from_str(&r.output).expect("JSON");
    assert_eq!(out["api"], "0.1.99");
    let unavailable = out["outcome"]["unavailable"].as_str().expect("unavailable");
    assert!(
        unavailable.contains("predates the service"),
        "{unavailable}"
    );
}

#[test]
fn plugins_built_against_the_older_api_keep_loading_in_a_newer_host() {
    let file = so("fixture_echo");
    let check = crate::support::isolated(newer_host())
        .arg("check")
        .arg(&file)
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "plugin-api:  ABI {}, built with toolhost-plugin-api {} (this host: ABI 0.1.99)",
            toolhost::ABI_VERSION,
            toolhost::API_VERSION
        )),
        "{stdout}"
    );

    let dir = PluginDir::with(&["fixture_echo"]);
    let out = crate::support::isolated(newer_host())
        .args([
            "call",
            "echo",
            r#"{"text": "old plugin, new host"}"#,
            "--plugins",
        ])
        .arg(dir.path())
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        "old plugin, new host"
    );
}

#[test]
fn a_newer_host_serves_the_newer_service_to_a_newer_plugin() {
    let dir = PluginDir::with(&["fixture_newer"]);
    let out = crate::support::isolated(newer_host())
        .args(["call", "probe_newer_service", "{}", "--plugins"])
        .arg(dir.path())
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(out["outcome"]["ok"], "served by a newer host");
}

/// Runs `toolhost call` on the 0.1.3 fixture; (success, stdout, stderr).
fn call_0_1_3(dir: &PluginDir, isolate: bool, tool: &str, args: Value) -> (bool, String, String) {
    let mut cmd = crate::support::toolhost_command();
    cmd.args(["call", tool, &args.to_string(), "--yes", "--plugins"])
        .arg(dir.path());
    if isolate {
        cmd.arg("--isolate");
    }
    let out = cmd.output().expect("run toolhost");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every plugin-api release kept in tests/compat/ has a fixture plugin built against its
/// verbatim sources; today's host must load it and run every tool-table method and host
/// service it reaches, in process and in a worker.
#[test]
fn a_plugin_built_against_the_released_abi_0_1_3_loads_and_works_in_todays_host() {
    let manifests = crate::support::compat_manifests();
    assert!(
        manifests
            .iter()
            .any(|m| m.parent().is_some_and(|d| d.ends_with("api-0.1.3"))),
        "the verbatim 0.1.3 sources are kept: {manifests:?}"
    );
    let dir = PluginDir::with(&["fixture_compat_0_1_3"]);
    let (report, registry, problems) = load(&dir);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert!(problems.is_empty(), "{problems:?}");
    let plugin = &report.plugins[0];
    assert_eq!(
        (plugin.abi_version.as_str(), plugin.api_version.as_str()),
        ("0.1.3", "0.1.3")
    );
    assert!(
        plugin.skipped_tools.is_empty(),
        "{:?}",
        plugin.skipped_tools
    );
    let needs = registry.get("compat_needs_token").expect("tool").spec();
    assert!(needs.interactive);
    assert_eq!(needs.risk, toolhost::Risk::Network);
    assert_eq!(needs.requirements.env, ["COMPAT_FIXTURE_TOKEN"]);
    // Built before tools declared the workspace: it keeps the access every plugin had.
    assert!(needs.requirements.workspace);
    // Built with the schema generation of 0.1.3 (`$defs`, `$ref`, `oneOf` of `const`s); the
    // host serves it inlined, with the documented enum as an `enum`.
    let convert = &registry.get("compat_convert").expect("tool").spec().schema;
    let text = convert.to_string();
    assert!(
        !text.contains("$ref") && !text.contains("$defs") && !text.contains("oneOf"),
        "{convert:#}"
    );
    assert_eq!(
        convert["properties"]["to"]["enum"],
        json!(["celsius", "fahrenheit"]),
        "{convert:#}"
    );
    assert!(
        convert["properties"]["to"]["description"]
            .as_str()
            .is_some_and(|d| d.contains("`fahrenheit`: Degrees Fahrenheit.")),
        "{convert:#}"
    );

    for isolate in [false, true] {
        let mode = if isolate { "in a worker" } else { "in process" };
        let (ok, out, err) = call_0_1_3(
            &dir,
            isolate,
            "compat_convert",
            json!({"value": 100, "to": "fahrenheit"}),
        );
        assert!(ok && out.trim() == "212", "{mode}: {out} {err}");

        let (ok, out, err) = call_0_1_3(
            &dir,
            isolate,
            "compat_convert",
            json!({"value": 1, "to": "kelvin"}),
        );
        let text = format!("{out}{err}");
        assert!(
            !ok && text.contains("kelvin")
                && text.contains("celsius")
                && text.contains("fahrenheit"),
            "{mode}: a bad enum value is told the allowed values: {text}"
        );

        let (ok, out, err) = call_0_1_3(&dir, isolate, "compat_services", json!({"note": mode}));
        assert!(ok, "{mode}: {out} {err}");
        let services: Value = serde_json::from_str(out.trim()).expect("JSON");
        assert_eq!(services["profile"], "default", "{mode}: {services}");
        assert_eq!(services["model"], "none", "{mode}: {services}");
        assert_eq!(services["slept"], true, "{mode}: {services}");
        assert_eq!(services["blocking"], true, "{mode}: {services}");
        assert_eq!(services["cancelled"], false, "{mode}: {services}");
        assert_eq!(services["read_back"], mode, "{mode}: {services}");
        let state_dir = std::path::Path::new(services["state_dir"].as_str().expect("path"));
        assert_eq!(
            std::fs::read_to_string(state_dir.join("compat-note.txt")).expect("note"),
            mode
        );
        assert!(
            services["session"]
                .as_str()
                .is_some_and(|s| s.starts_with("cli-")),
            "{mode}: {services}"
        );
        // `toolhost call` has nobody to ask and no agent: each service's refusal crosses
        // the 0.1.3 ABI as the host's own message, so the plugin can pass it on.
        for (service, says) in [
            (
                "/ask",
                "asking the person is not available: nobody is at the other end",
            ),
            (
                "/sample",
                "sampling is not available: nobody is at the other end",
            ),
            (
                "/child_turn/Err",
                "child turns are not available in this host",
            ),
            ("/sessions/Err", "session search needs an agent's turn"),
        ] {
            assert!(
                services
                    .pointer(service)
                    .and_then(Value::as_str)
                    .is_some_and(|text| text.contains(says)),
                "{mode}: {service} says {says:?}: {services}"
            );
        }

        let (ok, out, err) = call_0_1_3(&dir, isolate, "compat_picture", json!({}));
        assert!(ok && out.contains("a picture"), "{mode}: {out} {err}");

        for (how, says) in [
            ("invalid", "compat refuses these arguments"),
            ("failed", "compat failure"),
            ("panic", "compat panic"),
        ] {
            let (ok, out, err) = call_0_1_3(&dir, isolate, "compat_fail", json!({"how": how}));
            let text = format!("{out}{err}");
            assert!(!ok && text.contains(says), "{mode}: {how}: {text}");
        }
    }
}

/// The first, pre-release 0.1.0 inserted `table_layouts` into the root module without a
/// new version number. Its plugins cannot load; the refusal says so, names both versions
/// and says the vendor rebuilds (not "a modified copy", not "upgrade the host").
#[test]
fn a_plugin_built_against_the_pre_release_0_1_0_is_refused_with_who_must_rebuild() {
    let dir = PluginDir::with(&["fixture_compat_0_1_0_pre", "fixture_compat_0_1_3"]);
    let (report, registry, _) = load(&dir);
    let refused = report
        .errors
        .iter()
        .find(|e| e.to_string().contains("libfixture_compat_0_1_0_pre.so"))
        .unwrap_or_else(|| panic!("refused: {:?}", report.errors));
    let text = refused.to_string();
    assert!(
        matches!(refused.kind, toolhost::LoadErrorKind::PreReleaseApi { .. }),
        "{text}"
    );
    for part in [
        "pre-release toolhost-plugin-api 0.1.0",
        &format!("this host has ABI {}", toolhost::ABI_VERSION),
        "vendor must rebuild it",
    ] {
        assert!(text.contains(part), "{part:?} in {text}");
    }
    assert!(
        !text.contains("modified") && !text.contains("upgrade"),
        "{text}"
    );
    // The other plugin in the folder is served.
    assert!(registry.get("compat_convert").is_some());
}

/// The other direction: a plugin built against today's API (ABI 0.1.4: `call_outcome`
/// and `output_schema` appended to the tool table) loads in a host of ABI 0.1.3, which
/// calls the older `call` entry point and gets each outcome's degraded text. The host is
/// `old-host-probe`, built against the kept 0.1.3 sources, which loads and calls a plugin
/// the way a 0.1.3 host does.
#[test]
fn a_plugin_built_against_todays_api_answers_with_its_text_in_a_host_that_predates_it() {
    let probe = crate::support::built().join("debug").join("old-host-probe");
    let out = std::process::Command::new(&probe)
        .arg(crate::support::so("fixture_outcomes"))
        .args([
            r#"weather={"city":"Oslo"}"#,
            r#"diagnose={"file":"src/lib.rs"}"#,
            "chart",
            "numbers",
            "bad_weather",
        ])
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", probe.display()));
    assert!(
        out.status.success(),
        "a 0.1.3 host refused today's plugin: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(seen["abi"], toolhost_plugin_api::ABI_VERSION);
    let calls = &seen["calls"];
    // A structured result: its JSON text.
    let weather: Value =
        serde_json::from_str(calls["weather"]["ok"].as_str().expect("weather answered"))
            .expect("JSON text");
    assert_eq!(
        weather,
        json!({"city": "Oslo", "celsius": 21.5, "conditions": "sunny"})
    );
    // Text with details: the text (details stay behind).
    assert_eq!(calls["diagnose"]["ok"], "src/lib.rs: 1 error, 1 warning");
    // Blocks with an image: the 0.1.2 envelope, which such hosts show as blocks.
    let chart = calls["chart"]["ok"].as_str().expect("chart answered");
    let blocks = toolhost_plugin_api::parse_content_output(chart).expect("an envelope");
    assert_eq!(blocks.len(), 2, "{chart}");
    // Structured only: its JSON.
    assert_eq!(calls["numbers"]["ok"], r#"{"numbers":[1,2,3]}"#);
    // An older host cannot check the output schema it never reads.
    assert_eq!(calls["bad_weather"]["ok"], r#"{"celsius":"hot"}"#);
}
