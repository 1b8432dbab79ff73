//! Tool outcomes beyond text: structured results checked against their output schema,
//! details and content blocks, through the real binary, in process and in a worker (the
//! fixture `tests/fixtures/outcomes`); and the dispatcher's check with a native tool.

use std::process::Output;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::support::{PluginDir, toolhost_command};

/// `toolhost call TOOL ARGS --json` on the outcomes fixture; the exit status and the
/// printed result.
fn call_json(dir: &PluginDir, isolate: bool, tool: &str, args: Value) -> (bool, Value) {
    let mut cmd = toolhost_command();
    cmd.args(["call", tool, &args.to_string(), "--json", "--plugins"])
        .arg(dir.path());
    if isolate {
        cmd.arg("--isolate");
    }
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("run toolhost");
    let result: Value = serde_json::from_slice(&stdout).unwrap_or_else(|e| {
        panic!(
            "toolhost call {tool} --json printed no JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        )
    });
    (status.success(), result)
}

#[test]
fn structured_results_details_and_blocks_reach_the_caller_in_process_and_in_a_worker() {
    let dir = PluginDir::with(&["fixture_outcomes"]);
    for isolate in [false, true] {
        let at = if isolate { "in a worker" } else { "in process" };
        let (ok, weather) = call_json(&dir, isolate, "weather", json!({"city": "Oslo"}));
        let expected = json!({"city": "Oslo", "celsius": 21.5, "conditions": "sunny"});
        assert!(ok, "{at}: {weather}");
        assert_eq!(weather["structured"], expected, "{at}: {weather}");
        let text: Value = serde_json::from_str(weather["output"].as_str().expect("text"))
            .expect("the text is the value's JSON");
        assert_eq!(text, expected, "{at}");

        let (ok, bad) = call_json(&dir, isolate, "bad_weather", json!({}));
        assert!(!ok, "{at}: {bad}");
        assert_eq!(bad["error"], "invalid_output", "{at}: {bad}");
        let message = bad["output"].as_str().expect("message");
        assert!(
            message.contains(
                "tool 'bad_weather' returned a structured result that does not \
                              match its output schema"
            ) && message.contains("/celsius")
                && message.contains("number"),
            "{at}: {message}"
        );
        assert!(bad.get("structured").is_none(), "{at}: {bad}");

        let (ok, none) = call_json(&dir, isolate, "no_structured", json!({}));
        assert!(!ok, "{at}: {none}");
        assert!(
            none["output"].as_str().is_some_and(
                |m| m.contains("declares an output schema but returned no structured result")
            ),
            "{at}: {none}"
        );

        let (ok, diagnose) = call_json(&dir, isolate, "diagnose", json!({"file": "src/lib.rs"}));
        assert!(ok, "{at}: {diagnose}");
        assert_eq!(diagnose["output"], "src/lib.rs: 1 error, 1 warning", "{at}");
        let first = &diagnose["details"]["diagnostics"][0];
        assert_eq!(
            (
                &first["code"],
                &first["file"],
                &first["line"],
                &first["column"]
            ),
            (&json!("E0308"), &json!("src/lib.rs"), &json!(3), &json!(9)),
            "{at}: {diagnose}"
        );

        let (ok, chart) = call_json(&dir, isolate, "chart", json!({}));
        assert!(ok, "{at}: {chart}");
        assert_eq!(chart["output"], "a one-pixel chart", "{at}");
        assert_eq!(chart["content"][1]["type"], "image", "{at}: {chart}");
        assert_eq!(chart["content"][1]["mimeType"], "image/png", "{at}");

        // Structured data with no text and no schema: the model reads its JSON.
        let (ok, numbers) = call_json(&dir, isolate, "numbers", json!({}));
        assert!(ok, "{at}: {numbers}");
        assert_eq!(numbers["output"], r#"{"numbers":[1,2,3]}"#, "{at}");
        assert_eq!(numbers["structured"], json!({"numbers": [1, 2, 3]}), "{at}");
    }
}

/// `toolhost check` and `list` show a tool's output schema as served.
#[test]
fn the_output_schema_is_derived_from_a_typed_output_and_served() {
    let dir = PluginDir::with(&["fixture_outcomes"]);
    let (report, registry, problems) = crate::support::load(&dir);
    assert!(
        report.errors.is_empty() && problems.is_empty(),
        "{problems:?}"
    );
    let weather = registry.get("weather").expect("weather").spec().clone();
    let schema = weather.output_schema.expect("derived from the output type");
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["properties"]["celsius"]["type"], "number");
    assert_eq!(
        schema["properties"]["celsius"]["description"],
        "The temperature in degrees Celsius."
    );
    assert!(registry.get("echo").is_none());
    assert_eq!(
        registry
            .get("diagnose")
            .expect("diagnose")
            .spec()
            .output_schema,
        None
    );
}

/// A native tool (as compiled into the host or a test) declares an output schema; the
/// dispatcher checks every structured result against it, and refuses an output schema
/// whose top level is not an object at registration.
#[tokio::test]
async fn the_dispatcher_checks_structured_results_against_the_output_schema() {
    struct Answer(toolhost::ToolSpec, Value);
    #[async_trait::async_trait]
    impl toolhost::DynTool for Answer {
        fn spec(&self) -> &toolhost::ToolSpec {
            &self.0
        }
        fn origin(&self) -> &toolhost::ToolOrigin {
            &toolhost::ToolOrigin::Native
        }
        async fn call(
            &self,
            _: &toolhost::CallContext,
            _: toolhost::Arguments,
        ) -> Result<toolhost::ToolOutput, toolhost::ToolError> {
            Ok(toolhost::ToolOutput::structured(self.1.clone()))
        }
    }
    let spec = |name: &str, output: Value| toolhost::ToolSpec {
        name: name.to_owned(),
        description: "Answers.".to_owned(),
        schema: json!({"type": "object"}),
        risk: toolhost::Risk::Read,
        interactive: false,
        requirements: toolhost::Requirements::default(),
        output_schema: Some(output),
    };
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}},
                        "required": ["n"]});
    let mut registry = toolhost::ToolRegistry::new();
    registry
        .register(Arc::new(Answer(
            spec("good", schema.clone()),
            json!({"n": 3}),
        )))
        .expect("registers");
    registry
        .register(Arc::new(Answer(spec("bad", schema), json!({"n": -1}))))
        .expect("registers");
    let refused = registry
        .register(Arc::new(Answer(
            spec("listy", json!({"type": "array"})),
            json!([]),
        )))
        .expect_err("an array output schema is refused");
    assert!(
        refused.to_string().contains("output schema") && refused.to_string().contains("object"),
        "{refused}"
    );
    let dispatcher = crate::support::dispatcher(toolhost::DispatchConfig::default());
    let ctx = toolhost::CallContext::new(toolhost::TurnIdentity::default());
    let good = dispatcher
        .call(
            &registry,
            &ctx,
            crate::support::call("1", "good", json!({})),
        )
        .await;
    assert!(!good.is_error, "{}", good.output);
    assert_eq!(good.structured, Some(json!({"n": 3})));
    let bad = dispatcher
        .call(&registry, &ctx, crate::support::call("2", "bad", json!({})))
        .await;
    assert_eq!(bad.error, Some(toolhost::CallErrorKind::InvalidOutput));
    assert!(
        bad.output.contains("/n") && bad.output.contains("minimum"),
        "{}",
        bad.output
    );
    assert_eq!(bad.structured, None);
}

/// `toolhost check` shows the output schema a tool is served with, on one line and in full
/// with `--json`.
#[test]
fn check_shows_the_output_schema() {
    let file = crate::support::so("fixture_outcomes");
    let out = toolhost_command()
        .arg("check")
        .arg(&file)
        .output()
        .expect("run toolhost check");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("returns:") && l.contains("celsius")),
        "{text}"
    );
    let out = toolhost_command()
        .args(["check", "--json"])
        .arg(&file)
        .output()
        .expect("run toolhost check --json");
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let tools = report["tools"].as_array().expect("tools");
    let weather = tools
        .iter()
        .find(|t| t["name"] == "weather")
        .expect("weather");
    assert_eq!(
        weather["output_schema"]["properties"]["conditions"]["type"],
        "string"
    );
    let diagnose = tools
        .iter()
        .find(|t| t["name"] == "diagnose")
        .expect("diagnose");
    assert!(diagnose.get("output_schema").is_none());
}
