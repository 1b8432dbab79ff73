//! The plugins we ship (utils) and the third-party example (hello-tools), through the
//! real loader, registry and dispatcher.

use serde_json::{Value, json};
use toolhost::{CallContext, CallErrorKind, DispatchConfig, ToolRegistry, TurnIdentity};

use crate::support::{PluginDir, call, dispatcher, load};

fn registry(libs: &[&str]) -> (PluginDir, ToolRegistry) {
    let dir = PluginDir::with(libs);
    let (report, registry, problems) = load(&dir);
    assert!(
        report.errors.is_empty() && problems.is_empty(),
        "{:?} {problems:?}",
        report.errors
    );
    (dir, registry)
}

async fn run(registry: &ToolRegistry, tool: &str, args: Value) -> toolhost::ToolResult {
    dispatcher(DispatchConfig::default())
        .call(
            registry,
            &CallContext::new(TurnIdentity::default()),
            call("1", tool, args),
        )
        .await
}

#[tokio::test]
async fn utils_tools_answer() {
    let (_dir, registry) = registry(&["toolhost_utils"]);
    let expected = [
        "edit_text",
        "json_query",
        "text_stats",
        "time_now",
        "write_file",
    ];
    assert_eq!(registry.names(), expected);

    let now = run(&registry, "time_now", json!({"timezone": "Asia/Tokyo"})).await;
    let now: Value = serde_json::from_str(&now.output).expect("JSON");
    assert_eq!(now["utc_offset"], "+09");
    assert!(
        now["datetime"]
            .as_str()
            .is_some_and(|d| d.ends_with("+09:00"))
    );
    let bad_zone = run(&registry, "time_now", json!({"timezone": "Mars/Olympus"})).await;
    assert_eq!(bad_zone.error, Some(CallErrorKind::InvalidArgs));

    let doc = r#"{"items": [{"name": "a"}, {"name": "b"}]}"#;
    let hit = run(
        &registry,
        "json_query",
        json!({"json": doc, "pointer": "/items/1/name"}),
    )
    .await;
    assert_eq!(hit.output, "\"b\"");
    let miss = run(
        &registry,
        "json_query",
        json!({"json": doc, "pointer": "/items/0/nope"}),
    )
    .await;
    assert!(miss.is_error);
    assert!(
        miss.output.contains("object with keys: name"),
        "{}",
        miss.output
    );

    let stats = run(&registry, "text_stats", json!({"text": "one two\nthree é"})).await;
    let stats: Value = serde_json::from_str(&stats.output).expect("JSON");
    assert_eq!(
        stats,
        json!({"lines": 2, "words": 4, "characters": 15, "bytes": 16, "longest_line": 7})
    );

    let edit = registry.get("edit_text").expect("tool").spec();
    assert!(edit.interactive);
    assert_eq!(
        registry.get("write_file").expect("tool").spec().risk,
        toolhost::Risk::Write
    );
}

// Real time: plugin calls run on the host's plugin threads, and a paused clock would
// jump to the timeout while the runtime waits for them.
#[tokio::test]
async fn example_plugin_typed_arguments_and_cancellation() {
    let (_dir, registry) = registry(&["hello_tools"]);
    let greet = registry.get("greet").expect("greet").spec();
    assert_eq!(
        greet.schema["required"],
        json!(["name"]),
        "schema derived from GreetArgs"
    );
    let r = run(&registry, "greet", json!({"name": "Ada", "language": "fr"})).await;
    assert_eq!(r.output, "Bonjour, Ada!");

    let r = run(&registry, "countdown", json!({"from": 3, "step_ms": 1})).await;
    assert_eq!(r.output, "3 2 1 0");

    let config = crate::support::short_timeout(100);
    let r = dispatcher(config)
        .call(
            &registry,
            &CallContext::new(TurnIdentity::default()),
            call("1", "countdown", json!({"from": 100, "step_ms": 30})),
        )
        .await;
    assert_eq!(r.error, Some(CallErrorKind::TimedOut), "{r:?}");
    assert!(r.output.contains("timed out after 0.1 s"), "{}", r.output);
}
