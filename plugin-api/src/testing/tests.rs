//! Tests of the harness itself: scripted services, captured events, cancellation, the
//! state folder, and that argument errors and panics read exactly as in a host.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;
use crate::{
    Content, Risk, SessionQuery, ToolContext, ToolOutput, TypedTool, content_output,
    parse_content_output,
};

type Run = for<'c> fn(
    &'c ToolContext<'c>,
    Value,
) -> std::pin::Pin<
    Box<dyn Future<Output = Result<String, ToolError>> + Send + 'c>,
>;

/// A tool with a hand-written schema whose behaviour is a function of the context.
struct Script(&'static str, Run);

impl Tool for Script {
    fn name(&self) -> &str {
        self.0
    }
    fn description(&self) -> &str {
        "a test tool"
    }
    fn schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn risk(&self) -> Risk {
        Risk::Read
    }
    async fn call(&self, ctx: &ToolContext<'_>, args: Value) -> Result<String, ToolError> {
        (self.1)(ctx, args).await
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct GreetArgs {
    /// Who to greet.
    name: String,
    #[serde(default)]
    times: Option<u8>,
}

struct Greet;

impl TypedTool for Greet {
    type Args = GreetArgs;
    fn name(&self) -> &str {
        "greet"
    }
    fn description(&self) -> &str {
        "Greets."
    }
    fn risk(&self) -> Risk {
        Risk::Read
    }
    fn requirements(&self) -> Requirements {
        Requirements::default().env(&["GREETING_KEY"])
    }
    async fn run(&self, ctx: &ToolContext<'_>, a: GreetArgs) -> Result<String, ToolError> {
        let times = usize::from(a.times.unwrap_or(1));
        Ok(format!("Hello, {}! ", a.name).repeat(times) + ctx.profile_id())
    }
}

#[test]
fn a_typed_tool_runs_with_the_default_host() {
    assert_eq!(
        call(&Greet, json!({"name": "Ada"})),
        Ok("Hello, Ada! default".to_owned())
    );
    let host = TestHost::new().profile("work");
    assert_eq!(
        host.call(&Greet, json!({"name": "Ada", "times": 2})),
        Ok("Hello, Ada! Hello, Ada! work".to_owned())
    );
}

#[test]
fn bad_typed_arguments_give_the_message_the_host_gives() {
    for args in [
        json!({}),
        json!({"name": 3}),
        json!({"name": "x", "times": 300}),
    ] {
        let text = serde_json::to_string(&args).unwrap();
        // The host checks arguments against the schema first (the same validator and
        // message); what passes it is parsed by the same glue.
        let schema = crate::schema_for::<GreetArgs>();
        let validator =
            crate::check::check_schema(crate::check::SchemaRole::Arguments, &schema).unwrap();
        let expected = crate::check::problems(&validator, &args).expect("the arguments are bad");
        assert_eq!(
            call(&Greet, args),
            Err(ToolError::InvalidArgs(expected)),
            "{text}"
        );
    }
}

#[test]
fn describe_reads_the_metadata_through_the_vtable() {
    let info = TestHost::new().describe(&Greet);
    assert_eq!(info.name, "greet");
    assert_eq!(info.description, "Greets.");
    assert_eq!(info.risk, Risk::Read);
    assert!(!info.interactive);
    assert_eq!(info.requirements.env, ["GREETING_KEY"]);
    assert_eq!(info.schema, crate::schema_for::<GreetArgs>());
    assert_eq!(info.schema["required"], json!(["name"]));
}

struct BadName;

impl Tool for BadName {
    fn name(&self) -> &str {
        panic!("no name today")
    }
    fn description(&self) -> &str {
        "x"
    }
    fn schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn risk(&self) -> Risk {
        Risk::Read
    }
    async fn call(&self, _: &ToolContext<'_>, _: Value) -> Result<String, ToolError> {
        Ok(String::new())
    }
}

#[test]
fn a_tool_a_host_would_not_load_fails_its_call_and_describe() {
    assert_eq!(
        call(&BadName, json!({})),
        Err(ToolError::Failed(
            "a host would not load this tool: tool #1: reading its name panicked: no name today"
                .to_owned()
        ))
    );
    let described = std::panic::catch_unwind(|| TestHost::new().describe(&BadName));
    let message = crate::take_message(described.expect_err("describe panics"));
    assert!(message.contains("reading its name panicked"), "{message}");
}

#[test]
fn a_panicking_tool_gives_the_hosts_error() {
    let tool = Script("boom", |_, _| Box::pin(async { panic!("kaboom {}", 7) }));
    assert_eq!(
        call(&tool, json!({})),
        Err(ToolError::Failed(
            "tool 'boom' panicked: kaboom 7".to_owned()
        ))
    );
}

/// tokio's timer inside a tool panics (a plugin has no reactor); the message says what
/// to use instead, as a host's does.
#[test]
fn a_tokio_panic_gets_the_hint_towards_the_context_services() {
    let tool = Script("tokio_sleep", |_, _| {
        Box::pin(async {
            panic!(
                "there is no reactor running, must be called from the context of a Tokio 1.x \
                 runtime"
            )
        })
    });
    assert_eq!(
        call(&tool, json!({})),
        Err(ToolError::Failed(
            "tool 'tokio_sleep' panicked: there is no reactor running, must be called from \
             the context of a Tokio 1.x runtime (a plugin has no tokio runtime: use ctx.sleep \
             for timers and ctx.blocking for blocking work)"
                .to_owned()
        ))
    );
}

#[test]
fn scripted_ask_sample_and_child_turn_answer_and_are_recorded() {
    let tool = Script("services", |ctx, _| {
        Box::pin(async move {
            let asked = ctx.ask_user(&AskRequest::text("Colour?")).await?;
            let AskAnswer::Accept { content } = asked else {
                return Err(ToolError::failed("declined"));
            };
            let sampled = ctx
                .sample(&SampleRequest {
                    prompt: "sum up".to_owned(),
                    system: Some("be brief".to_owned()),
                    max_tokens: 20,
                })
                .await?;
            let child = ctx
                .child_turn(&ChildTurnRequest {
                    prompt: "look it up".to_owned(),
                    context: None,
                })
                .await?;
            Ok(format!(
                "{} / {} ({:?}) / {child}",
                content["answer"], sampled.text, sampled.model
            ))
        })
    });
    let host = TestHost::new()
        .on_ask(|req: &AskRequest| {
            Ok(AskAnswer::Accept {
                content: json!({"answer": format!("blue for {}", req.message)}),
            })
        })
        .on_sample(|req: &SampleRequest| {
            Ok(SampleAnswer {
                text: format!("{} done", req.prompt),
                model: Some("m-1".to_owned()),
            })
        })
        .on_child_turn(|req: &ChildTurnRequest| Ok(format!("child did {}", req.prompt)));
    assert_eq!(
        host.call(&tool, json!({})),
        Ok("\"blue for Colour?\" / sum up done (Some(\"m-1\")) / child did look it up".to_owned())
    );
    assert_eq!(host.asked(), vec![AskRequest::text("Colour?")]);
    assert_eq!(host.sampled().len(), 1);
    assert_eq!(host.sampled()[0].system.as_deref(), Some("be brief"));
    assert_eq!(host.sampled()[0].max_tokens, 20);
    assert_eq!(host.child_turns()[0].prompt, "look it up");

    // Answers that are errors reach the tool as the host's service errors do.
    let host = TestHost::new()
        .on_ask(|_: &AskRequest| Err(ServiceError::Failed("the form broke".to_owned())));
    assert_eq!(
        host.call(&tool, json!({})),
        Err(ToolError::Failed("the form broke".to_owned()))
    );
    let host = TestHost::new().on_ask(|_: &AskRequest| Ok(AskAnswer::Decline));
    assert_eq!(
        host.call(&tool, json!({})),
        Err(ToolError::Failed("declined".to_owned()))
    );
}

/// Asks every service once and reports each outcome.
fn ask_everything() -> Script {
    Script("everything", |ctx, _| {
        Box::pin(async move {
            let mut out = Vec::new();
            let ask = ctx.ask_user(&AskRequest::text("?")).await.map(|_| ());
            out.push(ask);
            let sample = ctx
                .sample(&SampleRequest {
                    prompt: "p".to_owned(),
                    system: None,
                    max_tokens: 1,
                })
                .await
                .map(|_| ());
            out.push(sample);
            let child = ctx
                .child_turn(&ChildTurnRequest {
                    prompt: "p".to_owned(),
                    context: None,
                })
                .await
                .map(|_| ());
            out.push(child);
            let query = SessionQuery {
                query: "tea".to_owned(),
                limit: 3,
                exclude_current: true,
            };
            out.push(ctx.search_sessions(&query).await.map(|_| ()));
            out.push(
                ctx.host_request("weather.today", &json!({}))
                    .await
                    .map(|_| ()),
            );
            Ok(serde_json::to_string(
                &out.into_iter()
                    .map(|r| match r {
                        Ok(()) => "ok".to_owned(),
                        Err(ServiceError::Unavailable(m)) => format!("unavailable: {m}"),
                        Err(ServiceError::Failed(m)) => format!("failed: {m}"),
                    })
                    .collect::<Vec<_>>(),
            )
            .unwrap())
        })
    })
}

#[test]
fn unscripted_services_are_unavailable_and_say_how_to_script_them() {
    let host = TestHost::new();
    let out: Vec<String> =
        serde_json::from_str(&host.call(&ask_everything(), json!({})).unwrap()).unwrap();
    assert_eq!(
        out,
        [
            "unavailable: asking the person is not available: no answer scripted: use \
             TestHost::on_ask",
            "unavailable: sampling is not available: no answer scripted: use TestHost::on_sample",
            "unavailable: child turns are not available: no answer scripted: use \
             TestHost::on_child_turn",
            "unavailable: 'sessions.search' is not available: no answer scripted: use \
             TestHost::on_host_request",
            "unavailable: this host does not know the request 'weather.today' (no answer \
             scripted: use TestHost::on_host_request)",
        ]
    );
    // Unanswered requests are still recorded.
    assert_eq!(host.asked().len(), 1);
    assert_eq!(host.sampled().len(), 1);
    assert_eq!(host.child_turns().len(), 1);
    assert_eq!(
        host.host_requests(),
        [
            (
                "sessions.search".to_owned(),
                json!({"query": "tea", "limit": 3, "exclude_current": true})
            ),
            ("weather.today".to_owned(), json!({})),
        ]
    );
}

#[test]
fn host_requests_are_scripted_and_known_ones_are_checked_first() {
    let host = TestHost::new().on_host_request(|method: &str, params: &Value| match method {
        "sessions.search" => Ok(json!({"hits": [{
            "session": "s-0", "time": "2025-01-01T00:00:00Z", "role": "user",
            "snippet": format!("[{}]", params["query"].as_str().unwrap_or_default()),
        }]})),
        "weather.today" => Ok(json!("sunny")),
        other => Err(ServiceError::Failed(format!("unexpected {other}"))),
    });
    let tool = Script("search", |ctx, args| {
        Box::pin(async move {
            if let Some(method) = args["raw"].as_str() {
                let answer = ctx.host_request(method, &args["params"]).await?;
                return Ok(answer.to_string());
            }
            let hits = ctx
                .search_sessions(&SessionQuery {
                    query: "tea".to_owned(),
                    limit: 2,
                    exclude_current: true,
                })
                .await?;
            Ok(hits[0].snippet.clone())
        })
    });
    assert_eq!(host.call(&tool, json!({})), Ok("[tea]".to_owned()));
    assert_eq!(
        host.call(&tool, json!({"raw": "weather.today", "params": {}})),
        Ok("\"sunny\"".to_owned())
    );
    // Parameters a host could not read never reach the script.
    let malformed = host.call(&tool, json!({"raw": "sessions.search", "params": "tea"}));
    assert!(
        matches!(&malformed, Err(ToolError::Failed(m)) if m.starts_with("malformed parameters for 'sessions.search'")),
        "{malformed:?}"
    );
    // The state folder is the host's, whatever the script says.
    assert_eq!(
        host.call(&tool, json!({"raw": "profile.state_dir", "params": {}})),
        Ok(json!({"path": host.state_dir()}).to_string())
    );
}

#[test]
fn logs_and_progress_are_captured_in_order() {
    let tool = Script("chatty", |ctx, _| {
        Box::pin(async move {
            ctx.log(LogLevel::INFO, "starting");
            ctx.progress(0.0, Some(2.0), Some("first"));
            ctx.progress(f64::NAN, None, None);
            ctx.progress(1.0, Some(f64::INFINITY), Some(""));
            ctx.log(LogLevel::WARN, "halfway");
            ctx.progress(2.0, None, None);
            Ok("done".to_owned())
        })
    });
    let host = TestHost::new();
    assert_eq!(host.call(&tool, json!({})), Ok("done".to_owned()));
    assert_eq!(
        host.logs(),
        [
            (LogLevel::INFO, "starting".to_owned()),
            (LogLevel::WARN, "halfway".to_owned())
        ]
    );
    assert_eq!(
        host.progress(),
        [
            Progress {
                progress: 0.0,
                total: Some(2.0),
                message: Some("first".to_owned())
            },
            Progress {
                progress: 1.0,
                total: None,
                message: None
            },
            Progress {
                progress: 2.0,
                total: None,
                message: None
            },
        ]
    );
}

/// Sleeps `ms` milliseconds in steps of 10, answering how it ended.
fn sleeper() -> Script {
    Script("sleeper", |ctx, args| {
        Box::pin(async move {
            let ms = args["ms"].as_u64().unwrap_or(0);
            match ctx.sleep(Duration::from_millis(ms)).await {
                Ok(()) => Ok(format!("slept, cancelled: {}", ctx.is_cancelled())),
                Err(e) => Err(ToolError::failed(format!(
                    "{e}, cancelled: {}",
                    ctx.is_cancelled()
                ))),
            }
        })
    })
}

#[test]
fn sleep_really_sleeps() {
    let started = Instant::now();
    assert_eq!(
        call(&sleeper(), json!({"ms": 60})),
        Ok("slept, cancelled: false".to_owned())
    );
    assert!(started.elapsed() >= Duration::from_millis(60));
}

#[test]
fn cancel_from_another_thread_ends_a_sleeping_tool() {
    let host = TestHost::new();
    let started = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            host.cancel();
        });
        assert_eq!(
            host.call(&sleeper(), json!({"ms": 60_000})),
            Err(ToolError::Failed(
                "the call was cancelled, cancelled: true".to_owned()
            ))
        );
    });
    assert!(started.elapsed() < Duration::from_secs(10));
    // Cancelled for good: the next call's sleep ends at once.
    assert!(host.call(&sleeper(), json!({"ms": 60_000})).is_err());
}

#[test]
fn a_canceller_and_cancel_after_end_cancelled_and_until_cancelled() {
    let waits = Script("waits", |ctx, _| {
        Box::pin(async move {
            let never = std::future::pending::<()>();
            let until = ctx.until_cancelled(never).await;
            ctx.cancelled().await;
            Ok(format!("{until:?}"))
        })
    });
    let host = TestHost::new();
    let canceller = host.canceller();
    let thread = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        canceller.cancel();
    });
    assert_eq!(
        host.call(&waits, json!({})),
        Ok("Err(Cancelled)".to_owned())
    );
    thread.join().unwrap();

    let host = TestHost::new();
    host.cancel_after(Duration::from_millis(30));
    assert_eq!(
        host.call(&waits, json!({})),
        Ok("Err(Cancelled)".to_owned())
    );
    assert!(host.canceller().is_cancelled());
}

#[test]
fn blocking_work_runs_and_sees_the_cancel() {
    let tool = Script("blocks", |ctx, args| {
        Box::pin(async move {
            let wait = args["wait"].as_bool().unwrap_or(false);
            let out = ctx
                .blocking(move |flag| {
                    if !wait {
                        return "computed".to_owned();
                    }
                    while !flag.is_cancelled() {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    "stopped".to_owned()
                })
                .await
                .map_err(ToolError::failed)?;
            Ok(out)
        })
    });
    assert_eq!(call(&tool, json!({})), Ok("computed".to_owned()));
    let host = TestHost::new();
    host.cancel_after(Duration::from_millis(30));
    assert_eq!(
        host.call(&tool, json!({"wait": true})),
        Ok("stopped".to_owned())
    );
}

#[test]
fn state_dir_is_served_to_the_tool_and_removed_on_drop() {
    let tool = Script("state", |ctx, _| {
        Box::pin(async move {
            let dir = ctx.state_dir().await?;
            std::fs::write(dir.join("note.txt"), "kept").map_err(ToolError::failed)?;
            Ok(dir.display().to_string())
        })
    });
    let host = TestHost::new();
    let dir = host.state_dir().to_path_buf();
    assert!(dir.is_dir());
    assert!(dir.starts_with(std::env::temp_dir()));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
    assert_eq!(host.call(&tool, json!({})), Ok(dir.display().to_string()));
    assert_eq!(
        std::fs::read_to_string(dir.join("note.txt")).unwrap(),
        "kept"
    );
    let other = TestHost::new();
    assert_ne!(other.state_dir(), dir, "each host has its own folder");
    drop(host);
    assert!(!dir.exists());
}

#[test]
fn content_output_crosses_unchanged() {
    let tool = Script("image", |_, _| {
        Box::pin(async {
            Ok(content_output(&[
                Content::text("a picture"),
                Content::Image {
                    data: "AAAA".to_owned(),
                    mime_type: "image/png".to_owned(),
                },
            ]))
        })
    });
    let out = call(&tool, json!({})).unwrap();
    assert_eq!(
        parse_content_output(&out).unwrap()[0],
        Content::text("a picture")
    );
}

#[test]
#[should_panic(
    expected = "a TestHost script panicked during the call: the on_ask script \
                           panicked: assertion"
)]
fn a_panicking_script_fails_the_test_after_the_call() {
    let host = TestHost::new().on_ask(|req: &AskRequest| {
        assert_eq!(req.message, "something else");
        Ok(AskAnswer::Decline)
    });
    let _ = host.call(&ask_everything(), json!({}));
}

#[test]
fn call_async_is_send_and_runs_on_any_executor() {
    fn assert_send<T: Send>(t: T) -> T {
        t
    }
    let host = TestHost::new();
    let future = assert_send(host.call_async(&Greet, json!({"name": "Bo"})));
    assert_eq!(
        signal::block_on(future),
        Ok("Hello, Bo! default".to_owned())
    );
    // A call whose future is dropped early leaves the host usable.
    let tool = sleeper();
    let mut early = Box::pin(host.call_async(&tool, json!({"ms": 60_000})));
    let waker = std::task::Waker::noop();
    assert!(
        early
            .as_mut()
            .poll(&mut std::task::Context::from_waker(waker))
            .is_pending()
    );
    drop(early);
    assert_eq!(
        host.call(&Greet, json!({"name": "Bo"})),
        Ok("Hello, Bo! default".to_owned())
    );
}

/// A tool with the name and argument schema a test gives it.
struct Shaped(String, Value);

impl Tool for Shaped {
    fn name(&self) -> &str {
        &self.0
    }
    fn description(&self) -> &str {
        "a tool a host may refuse"
    }
    fn schema(&self) -> Value {
        self.1.clone()
    }
    fn risk(&self) -> Risk {
        Risk::Read
    }
    async fn call(&self, _: &ToolContext<'_>, _: Value) -> Result<String, ToolError> {
        Ok("ran".to_owned())
    }
}

/// What a third-party author's `cargo test` passed and `toolhost check` refused: each is
/// refused by `describe` and `call` now, with the message a host gives (the same shared
/// check; tests/it/cli.rs compares them with the host's).
#[test]
fn the_harness_refuses_the_tools_a_host_refuses_with_its_messages() {
    let object = json!({"type": "object"});
    let cases = [
        (
            Shaped("Search Notes".into(), object.clone()),
            "tool 'Search Notes': it has an invalid name: ' ' is not allowed in it; \
             use 1-64 characters of A-Z, a-z, 0-9, _ and -",
        ),
        (
            Shaped(String::new(), object.clone()),
            "tool '': it has an invalid name: it is empty; use 1-64 characters of A-Z, \
             a-z, 0-9, _ and -",
        ),
        (
            Shaped("n".repeat(77), object.clone()),
            "it has an invalid name: it is 77 characters long; use 1-64 characters",
        ),
        (
            Shaped(
                "search".into(),
                json!({"type": "object", "properties": {"query": {"type": "strnig"}}}),
            ),
            "tool 'search': its argument schema is not a valid JSON Schema: at \
             /properties/query/type: \"strnig\" is not valid",
        ),
        (
            Shaped("listy".into(), json!({"type": "array", "items": {}})),
            "tool 'listy': its argument schema's top level is of type \"array\", but tool \
             arguments are always a JSON object, so no call could pass it",
        ),
    ];
    for (tool, expected) in &cases {
        let described = std::panic::catch_unwind(|| TestHost::new().describe(tool));
        let message = crate::take_message(described.expect_err("describe panics"));
        assert!(
            message.starts_with("a host would not load this tool: ") && message.contains(expected),
            "{message}\nexpected: {expected}"
        );
        match call(tool, json!({})) {
            Err(ToolError::Failed(m)) => assert!(m.contains(expected), "{m}"),
            other => panic!("a refused tool ran: {other:?}"),
        }
    }
    // At the limits, it passes.
    assert_eq!(
        TestHost::new()
            .describe(&Shaped("n".repeat(64), object))
            .name
            .len(),
        64
    );
}

/// A tool whose constructor panics in `export_plugin!`.
struct Explodes;

impl Explodes {
    #[allow(
        clippy::new_ret_no_self,
        reason = "as an author writes it: a constructor that panics"
    )]
    fn new() -> Shaped {
        panic!("no index file")
    }
}

/// The plugin `check_plugin` reads (the one root module this test binary exports).
mod exported {
    #![allow(
        unreachable_pub,
        reason = "the macro exports a public static, as in a plugin"
    )]
    use super::{Explodes, Shaped, json};
    crate::export_plugin! {
    name: "notes",
    version: "0.0.1",
    tools: [
        Shaped("search_notes".into(), json!({"type": "object"})),
        Shaped("add_note".into(), json!({"type": "object"})),
        Explodes::new(),
        Shaped("Search Notes".into(), json!({"type": "object"})),
        Shaped("search_notes".into(), json!({"type": "object"})),
    ],
    }
}

/// `check_plugin` reads the export list as a host does: the tools a host refuses, each
/// with its message, two of one name ("rename one", numbered as written), and a tool whose
/// creation panicked named by its position and expression, while the others are read.
#[test]
fn check_plugin_refuses_what_a_host_refuses_in_the_whole_export_list() {
    let problems = check_plugin(&exported::__TOOLHOST_PLUGIN_ROOT).expect_err("refused");
    assert_eq!(
        problems,
        [
            "creating tool #3 (`Explodes::new()`) panicked: no index file".to_owned(),
            "tool 'Search Notes': it has an invalid name: ' ' is not allowed in it; use \
             1-64 characters of A-Z, a-z, 0-9, _ and -"
                .to_owned(),
            "plugin 'notes' exports two tools named 'search_notes' (#1 and #5); rename one"
                .to_owned(),
        ]
    );
}

/// `ctx.settings()` reads what `TestHost::settings` set, typed; `{}` without it (a `T`
/// with defaults reads them); a table that does not fit says so and where to fix it.
#[test]
fn settings_reach_the_tool_typed_and_default_to_an_empty_table() {
    #[derive(serde::Deserialize)]
    #[serde(default)]
    struct Settings {
        units: String,
        retries: u32,
    }
    impl Default for Settings {
        fn default() -> Self {
            Settings {
                units: "kelvin".to_owned(),
                retries: 1,
            }
        }
    }
    let tool = Script("units", |ctx, _| {
        Box::pin(async move {
            let s: Settings = ctx.settings().await?;
            Ok(format!("{} x{}", s.units, s.retries))
        })
    });
    let host = TestHost::new().settings(json!({"units": "metric", "retries": 3}));
    assert_eq!(host.call(&tool, json!({})), Ok("metric x3".to_owned()));
    assert_eq!(
        host.host_requests(),
        [("plugin.settings".to_owned(), json!({}))]
    );
    assert_eq!(call(&tool, json!({})), Ok("kelvin x1".to_owned()));
    let wrong = TestHost::new().settings(json!({"retries": "three"}));
    match wrong.call(&tool, json!({})) {
        Err(ToolError::Failed(m)) => assert!(
            m.contains("the plugin's settings do not fit")
                && m.contains("invalid type")
                && m.contains("[plugins.NAME.settings]"),
            "{m}"
        ),
        other => panic!("{other:?}"),
    }
    // A misspelt key fails the test's call, naming it, where a host would warn and use
    // the default.
    let misspelt = TestHost::new().settings(json!({"unit": "metric", "retries": 3}));
    match misspelt.call(&tool, json!({})) {
        Err(ToolError::Failed(m)) => assert!(
            m.contains("'unit'") && m.contains("does not read") && !m.contains("retries"),
            "{m}"
        ),
        other => panic!("a misspelt key passed: {other:?}"),
    }
}

/// A tool declaring an output schema by hand; returns what it is given as `value`.
struct OutputShaped;

impl Tool for OutputShaped {
    fn name(&self) -> &str {
        "shaped"
    }
    fn description(&self) -> &str {
        "Returns its `value` argument as its structured result."
    }
    fn schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn risk(&self) -> Risk {
        Risk::Read
    }
    fn output_schema(&self) -> Option<Value> {
        Some(json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}))
    }
    async fn call_output(&self, _: &ToolContext<'_>, a: Value) -> Result<ToolOutput, ToolError> {
        Ok(match a.get("value") {
            Some(v) => ToolOutput::structured(v.clone()),
            None => ToolOutput::text("no value"),
        })
    }
    async fn call(&self, ctx: &ToolContext<'_>, a: Value) -> Result<String, ToolError> {
        Ok(self.call_output(ctx, a).await?.degraded_text())
    }
}

#[test]
fn structured_results_are_checked_against_the_output_schema_as_the_host_checks_them() {
    let host = TestHost::new();
    assert_eq!(
        host.describe(&OutputShaped).output_schema.unwrap()["required"],
        json!(["n"])
    );
    let ok = host
        .call_output(&OutputShaped, json!({"value": {"n": 2}}))
        .unwrap();
    assert_eq!(ok.structured, Some(json!({"n": 2})));
    assert_eq!(ok.text, r#"{"n":2}"#);
    let Err(ToolError::Failed(wrong)) =
        host.call_output(&OutputShaped, json!({"value": {"n": "two"}}))
    else {
        panic!("a value that breaks the schema is an error");
    };
    assert!(
        wrong.contains("does not match its output schema") && wrong.contains("/n"),
        "{wrong}"
    );
    let Err(ToolError::Failed(missing)) = host.call_output(&OutputShaped, json!({})) else {
        panic!("no structured result is an error");
    };
    assert!(
        missing.contains("returned no structured result"),
        "{missing}"
    );
    // `TestHost::call` gives the text of the same outcome (the harness, like a host, calls
    // `call_output`; the tool's own `call` is for direct Rust callers).
    assert_eq!(
        host.call(&OutputShaped, json!({"value": {"n": 5}})),
        Ok(r#"{"n":5}"#.to_owned())
    );
}

#[test]
fn details_and_blocks_cross_the_boundary_and_an_old_envelope_becomes_blocks() {
    struct Rich;
    impl Tool for Rich {
        fn name(&self) -> &str {
            "rich"
        }
        fn description(&self) -> &str {
            "Returns details and blocks, or the 0.1.2 envelope."
        }
        fn schema(&self) -> Value {
            json!({"type": "object"})
        }
        fn risk(&self) -> Risk {
            Risk::Read
        }
        async fn call_output(
            &self,
            _: &ToolContext<'_>,
            a: Value,
        ) -> Result<ToolOutput, ToolError> {
            if a.get("envelope").is_some() {
                return Ok(ToolOutput::text(content_output(&[Content::text("old")])));
            }
            Ok(ToolOutput::text("done")
                .with_diagnostics(vec![crate::Diagnostic::new("note", "n").at("f", 1, 1)])
                .with_content(vec![Content::text("done")]))
        }
        async fn call(&self, ctx: &ToolContext<'_>, a: Value) -> Result<String, ToolError> {
            Ok(self.call_output(ctx, a).await?.degraded_text())
        }
    }
    let host = TestHost::new();
    let out = host.call_output(&Rich, json!({})).unwrap();
    assert_eq!(out.text, "done");
    assert_eq!(out.details["diagnostics"][0]["file"], "f");
    assert_eq!(out.content, vec![Content::text("done")]);
    let old = host.call_output(&Rich, json!({"envelope": true})).unwrap();
    assert_eq!(old.content, vec![Content::text("old")]);
    assert_eq!(
        parse_content_output(&old.text),
        Some(vec![Content::text("old")])
    );
}

#[test]
fn a_structured_result_with_no_text_reads_as_its_json_as_in_the_host() {
    struct Only;
    impl Tool for Only {
        fn name(&self) -> &str {
            "only"
        }
        fn description(&self) -> &str {
            "Structured data and no text."
        }
        fn schema(&self) -> Value {
            json!({"type": "object"})
        }
        fn risk(&self) -> Risk {
            Risk::Read
        }
        async fn call_output(
            &self,
            _: &ToolContext<'_>,
            _: Value,
        ) -> Result<ToolOutput, ToolError> {
            Ok(ToolOutput::default().with_structured(json!({"n": [1, 2]})))
        }
        async fn call(&self, ctx: &ToolContext<'_>, a: Value) -> Result<String, ToolError> {
            Ok(self.call_output(ctx, a).await?.degraded_text())
        }
    }
    assert_eq!(
        TestHost::new().call(&Only, json!({})),
        Ok(r#"{"n":[1,2]}"#.to_owned())
    );
}

#[test]
fn asking_the_client_several_things_answers_each_in_order_and_detach_says_no() {
    let tool = Script("several", |ctx, _| {
        Box::pin(async move {
            let answers = ctx
                .ask_client(&[
                    crate::ClientQuestion::ask(AskRequest::text("Name?")).keyed("user_name"),
                    crate::ClientQuestion::sample(SampleRequest {
                        prompt: "greet".to_owned(),
                        system: None,
                        max_tokens: 5,
                    }),
                    crate::ClientQuestion::roots(),
                ])
                .await?;
            let detached = ctx.detach().await;
            Ok(format!("{answers:?} detached={detached}"))
        })
    });
    let host = TestHost::new()
        .on_ask(|_: &AskRequest| {
            Ok(AskAnswer::Accept {
                content: json!({"answer": "Ada"}),
            })
        })
        .on_sample(|req: &SampleRequest| {
            Ok(SampleAnswer {
                text: format!("{} back", req.prompt),
                model: None,
            })
        });
    let out = host.call(&tool, json!({})).unwrap();
    assert!(out.contains("Ask(Accept"), "{out}");
    assert!(out.contains("greet back"), "{out}");
    // No roots set: the client has none to give, said for that question alone.
    assert!(
        out.contains("Unavailable(\"the client has no roots to give"),
        "{out}"
    );
    assert!(out.ends_with("detached=false"), "{out}");
    assert_eq!(host.asked(), vec![AskRequest::text("Name?")]);

    let host = TestHost::new().roots(vec![crate::Root {
        uri: "file:///src".to_owned(),
        name: None,
    }]);
    let roots = Script("roots", |ctx, _| {
        Box::pin(async move { Ok(format!("{:?}", ctx.roots().await?)) })
    });
    assert!(
        host.call(&roots, json!({}))
            .unwrap()
            .contains("file:///src")
    );
}
