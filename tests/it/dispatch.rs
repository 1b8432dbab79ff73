//! Dispatching through the real registry and dispatcher with plugin tools: parallelism,
//! ordering, panics, validation, unknown tools, timeouts, cancellation, policy, context.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolhost::{
    CallContext, CallErrorKind, ChildTurnError, ChildTurnService, DispatchConfig, ToolRegistry,
    TurnIdentity, TurnServices,
};

use crate::support::{PluginDir, call, dispatcher, load, marker};

fn basic() -> (PluginDir, ToolRegistry) {
    let dir = PluginDir::with(&["fixture_basic"]);
    let (_, registry, _) = load(&dir);
    (dir, registry)
}

fn turn() -> CallContext {
    CallContext::new(TurnIdentity {
        profile_id: "p1".into(),
        session_id: "s1".into(),
        model: "m1".into(),
    })
}

fn parse(output: &str) -> Value {
    serde_json::from_str(output).unwrap_or_else(|e| panic!("not JSON ({e}): {output}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_slow_calls_run_concurrently_and_come_back_in_request_order() {
    let (_dir, registry) = basic();
    let calls = (0..5)
        .map(|i| {
            call(
                &format!("c{i}"),
                "slow",
                json!({"ms": 200, "label": format!("L{i}")}),
            )
        })
        .collect();
    let started = Instant::now();
    let results = dispatcher(DispatchConfig::default())
        .dispatch(&registry, &turn(), calls)
        .await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(900),
        "5 x 200 ms took {took:?}"
    );
    let mut peak = 0;
    for (i, r) in results.iter().enumerate() {
        assert!(!r.is_error, "{r:?}");
        assert_eq!(r.call_id, format!("c{i}"));
        let out = parse(&r.output);
        assert_eq!(out["label"], format!("L{i}"));
        peak = peak.max(out["in_flight_at_start"].as_u64().unwrap_or(0));
    }
    assert_eq!(peak, 5, "the plugin saw all five calls in flight at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_tool_in_the_batch_makes_them_run_one_at_a_time() {
    let (_dir, registry) = basic();
    let mut calls: Vec<_> = (0..3)
        .map(|i| {
            call(
                &format!("c{i}"),
                "slow",
                json!({"ms": 50, "label": format!("L{i}")}),
            )
        })
        .collect();
    calls.insert(
        1,
        call("ask", "slow_interactive", json!({"ms": 50, "label": "I"})),
    );
    let results = dispatcher(DispatchConfig::default())
        .dispatch(&registry, &turn(), calls)
        .await;
    let labels: Vec<_> = results
        .iter()
        .map(|r| parse(&r.output)["label"].clone())
        .collect();
    assert_eq!(labels, [json!("L0"), json!("I"), json!("L1"), json!("L2")]);
    for r in &results {
        assert_eq!(
            parse(&r.output)["in_flight_at_start"],
            1,
            "calls overlapped: {r:?}"
        );
    }
}

#[tokio::test]
async fn a_panicking_tool_is_an_error_result_and_the_plugin_stays_usable() {
    let (_dir, registry) = basic();
    let d = dispatcher(DispatchConfig::default());
    for tool in ["panic_in_call", "panic_in_future"] {
        let results = d
            .dispatch(
                &registry,
                &turn(),
                vec![
                    call("1", tool, json!({})),
                    call("2", "echo", json!({"text": "still here"})),
                ],
            )
            .await;
        assert!(results[0].is_error);
        assert_eq!(results[0].error, Some(CallErrorKind::Failed));
        assert!(
            results[0].output.contains("panicked"),
            "{}",
            results[0].output
        );
        assert!(
            results[0].output.contains("fixture panic"),
            "{}",
            results[0].output
        );
        assert!(!results[1].is_error, "the batch goes on: {:?}", results[1]);
        let after = d
            .call(
                &registry,
                &turn(),
                call("3", "echo", json!({"text": "again"})),
            )
            .await;
        assert_eq!(after.output, "again");
    }
}

#[tokio::test]
async fn arguments_that_violate_the_schema_never_reach_the_plugin() {
    let (_dir, registry) = basic();
    let (_m, path) = marker();
    let d = dispatcher(DispatchConfig::default());
    for bad in [
        json!({"marker": path, "count": 0}),
        json!({"marker": path, "count": "three"}),
        json!({"marker": path}),
        json!({"marker": path, "count": 1, "extra": true}),
        json!("not an object"),
    ] {
        let r = d
            .call(&registry, &turn(), call("1", "record_args", bad.clone()))
            .await;
        assert_eq!(
            r.error,
            Some(CallErrorKind::SchemaViolation),
            "{bad}: {r:?}"
        );
        assert!(r.output.starts_with("invalid arguments: "), "{}", r.output);
        assert!(!path.exists(), "the plugin ran with {bad}");
    }
    let ok = d
        .call(
            &registry,
            &turn(),
            call("2", "record_args", json!({"marker": path, "count": 2})),
        )
        .await;
    assert!(!ok.is_error, "{ok:?}");
    assert!(path.exists(), "valid arguments reach the plugin");
}

#[tokio::test]
async fn invalid_args_from_the_tool_itself_are_rendered_for_the_model() {
    let dir = PluginDir::with(&["hello_tools"]);
    let (_, registry, _) = load(&dir);
    let r = dispatcher(DispatchConfig::default())
        .call(
            &registry,
            &turn(),
            call("1", "greet", json!({"name": "Ada", "language": "xx"})),
        )
        .await;
    assert_eq!(r.error, Some(CallErrorKind::InvalidArgs));
    assert!(
        r.output.starts_with("invalid arguments: language 'xx'"),
        "{}",
        r.output
    );
}

#[tokio::test]
async fn an_unknown_tool_is_a_tool_not_found_result() {
    let (_dir, registry) = basic();
    let results = dispatcher(DispatchConfig::default())
        .dispatch(
            &registry,
            &turn(),
            vec![
                call("1", "no_such_tool", json!({})),
                call("2", "echo", json!({"text": "x"})),
            ],
        )
        .await;
    assert_eq!(results[0].error, Some(CallErrorKind::ToolNotFound));
    assert!(results[0].output.contains("unknown tool 'no_such_tool'"));
    assert!(
        results[0].output.contains("echo"),
        "lists what is available"
    );
    assert_eq!(results[1].output, "x");
}

// Real time: plugin calls run on the host's plugin threads, and a paused clock would
// jump to the timeout while the runtime waits for them.
#[tokio::test]
async fn a_timeout_reaches_the_plugin_as_its_cancel_signal() {
    let (_dir, registry) = basic();
    let (_m, path) = marker();
    let config = crate::support::short_timeout(100);
    let r = dispatcher(config)
        .call(
            &registry,
            &turn(),
            call("1", "wait_cancel", json!({"marker": path})),
        )
        .await;
    assert_eq!(r.error, Some(CallErrorKind::TimedOut));
    assert!(r.output.contains("timed out after 0.1 s"), "{}", r.output);
    let seen = std::fs::read_to_string(&path).expect("the plugin recorded its cancel signal");
    assert_eq!(seen, "cancelled is_cancelled=true");
}

// Real time: plugin calls run on the host's plugin threads, and a paused clock would
// jump to the timeout while the runtime waits for them.
#[tokio::test]
async fn a_tool_that_ignores_cancellation_is_dropped_after_the_grace_period() {
    let (_dir, registry) = basic();
    let (_m, path) = marker();
    let config = DispatchConfig {
        timeout: Duration::from_millis(50),
        cancel_grace: Duration::from_millis(50),
        ..DispatchConfig::default()
    };
    let r = dispatcher(config)
        .call(
            &registry,
            &turn(),
            call("1", "hang", json!({"marker": path})),
        )
        .await;
    assert_eq!(r.error, Some(CallErrorKind::TimedOut));
    // In a worker process the drop happens there, just after the call returns here.
    wait_for_file(&path).await;
    assert_eq!(std::fs::read_to_string(&path).expect("dropped"), "dropped");
}

/// Waits until `path` exists (bounded), without a fixed sleep standing in for the event.
async fn wait_for_file(path: &std::path::Path) {
    let what = format!("{} appearing", path.display());
    crate::support::eventually_async(Duration::from_secs(10), &what, || path.exists()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_turn_while_calls_run_cancels_each_of_them() {
    let (_dir, registry) = basic();
    let markers = tempfile::tempdir().expect("temp dir");
    let path = |name: &str| markers.path().join(name);
    let turn = turn();
    let cancel = turn.cancel.clone();
    let d = dispatcher(DispatchConfig::default());
    let calls = vec![
        call(
            "1",
            "wait_cancel",
            json!({"marker": path("seen1"), "started": path("started1")}),
        ),
        call(
            "2",
            "wait_cancel",
            json!({"marker": path("seen2"), "started": path("started2")}),
        ),
    ];
    let batch = tokio::spawn({
        let registry = registry.clone();
        async move { d.dispatch(&registry, &turn, calls).await }
    });
    wait_for_file(&path("started1")).await;
    wait_for_file(&path("started2")).await;
    let cancelled_at = Instant::now();
    cancel.cancel();
    let results = tokio::time::timeout(Duration::from_secs(10), batch)
        .await
        .expect("the batch ends once cancelled")
        .expect("no panic");
    assert!(
        cancelled_at.elapsed() < DispatchConfig::default().cancel_grace,
        "the tools returned on their cancel signal, within the grace period"
    );
    for r in &results {
        assert_eq!(r.error, Some(CallErrorKind::Cancelled), "{r:?}");
        assert!(r.output.contains("was cancelled after"), "{}", r.output);
    }
    for seen in [path("seen1"), path("seen2")] {
        let text = std::fs::read_to_string(&seen).expect("the plugin saw the cancellation");
        assert_eq!(text, "cancelled is_cancelled=true");
    }
}

#[tokio::test]
async fn calls_of_an_already_cancelled_turn_never_start() {
    let (_dir, registry) = basic();
    let (_m, path) = marker();
    let turn = turn();
    turn.cancel.cancel();
    let results = dispatcher(DispatchConfig::default())
        .dispatch(
            &registry,
            &turn,
            vec![
                call("1", "slow_interactive", json!({"ms": 10})),
                call("2", "record_args", json!({"marker": path, "count": 1})),
            ],
        )
        .await;
    for r in &results {
        assert_eq!(r.error, Some(CallErrorKind::Cancelled), "{r:?}");
        assert!(r.output.contains("was not started"), "{}", r.output);
    }
    assert!(!path.exists());
}

#[tokio::test]
async fn write_and_deny_tools_never_run_under_the_read_only_policy() {
    let (_dir, registry) = basic();
    let (_m, path) = marker();
    let d = dispatcher(DispatchConfig::default());
    let w = d
        .call(
            &registry,
            &turn(),
            call("1", "risky_write", json!({"marker": path})),
        )
        .await;
    assert_eq!(w.error, Some(CallErrorKind::NotApproved));
    assert!(
        w.output.contains("needs a person's approval"),
        "{}",
        w.output
    );
    let x = d
        .call(
            &registry,
            &turn(),
            call("2", "risky_deny", json!({"marker": path})),
        )
        .await;
    assert_eq!(x.error, Some(CallErrorKind::Denied));
    assert!(x.output.contains("denied by policy"), "{}", x.output);
    assert!(!path.exists(), "the plugin's code was entered");
    assert!(registry.get("risky_deny").is_some());
    assert!(
        registry.specs().iter().all(|s| s.name != "risky_deny"),
        "deny tools are not shown to the model"
    );
}

struct ScriptedChild;

#[async_trait::async_trait]
impl ChildTurnService for ScriptedChild {
    async fn run_child_turn(
        &self,
        parent: &TurnIdentity,
        request: toolhost_plugin_api::ChildTurnCall,
        _cancel: tokio_util::sync::CancellationToken,
    ) -> Result<String, ChildTurnError> {
        Ok(format!(
            "child of {} answered {}",
            parent.session_id,
            json!(request.request.prompt)
        ))
    }
}

#[tokio::test]
async fn the_context_crosses_with_turn_model_and_services() {
    let (_dir, registry) = basic();
    let d = dispatcher(DispatchConfig::default());
    let r = d
        .call(&registry, &turn(), call("1", "context_info", json!({})))
        .await;
    let out = parse(&r.output);
    assert_eq!(out["profile_id"], "p1");
    assert_eq!(out["session_id"], "s1");
    assert_eq!(out["model"], "m1");
    let unavailable = out["child_turn"]["unavailable"]
        .as_str()
        .expect("no agent here");
    assert!(
        unavailable.contains("not available in this host"),
        "{unavailable}"
    );

    let mut with_agent = turn();
    with_agent.services = TurnServices {
        child_turns: Some(Arc::new(ScriptedChild)),
        caller: None,
        requests: None,
        ..TurnServices::default()
    };
    let r = d
        .call(&registry, &with_agent, call("2", "context_info", json!({})))
        .await;
    assert_eq!(
        parse(&r.output)["child_turn"]["ok"],
        "child of s1 answered \"say hi\""
    );
}
