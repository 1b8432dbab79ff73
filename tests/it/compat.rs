//! Binary compatibility across plugin-api versions: fields appended to the prefix types
//! (a tool method, a host service) keep plugins loading in both directions.

use serde_json::{Value, json};

use crate::support::{PluginDir, call, dispatcher, load, newer_host, so};

#[tokio::test]
async fn a_plugin_built_against_a_newer_api_loads_and_sees_newer_services_as_unavailable() {
    let dir = PluginDir::with(&["fixture_newer"]);
    let (report, registry, _) = load(&dir);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.plugins[0].api_version, "0.1.4");
    let r = dispatcher(toolhost::DispatchConfig::default())
        .call(
            &registry,
            &toolhost::Turn::new(toolhost::TurnIdentity::default()),
            call("1", "probe_newer_service", json!({})),
        )
        .await;
    let out: Value = serde_json::from_str(&r.output).expect("JSON");
    assert_eq!(out["api"], "0.1.4");
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
            "plugin-api:  {} (this host: 0.1.4)",
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
