//! A plugin built against the released plugin-api 0.1.3 (the verbatim copy beside it). It
//! touches every part of that ABI a plugin can reach: typed arguments with a documented
//! enum, every tool-table method (name, description, schema, risk, interactive,
//! requirements, call), every host service (profile, session, model, cancellation,
//! sleep, log, progress, ask_user, sample, child turns, host requests and the state
//! folder), rich content, errors and panics. Today's host must load and call all of it.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use toolhost_plugin_api::{
    AskRequest, ChildTurnRequest, Content, LogLevel, Requirements, Risk, SampleRequest, SessionQuery, Tool,
    ToolContext, ToolError, TypedTool, content_output, export_plugin,
};

/// Units.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Unit {
    /// Degrees Celsius.
    Celsius,
    /// Degrees Fahrenheit.
    Fahrenheit,
}

/// Arguments of `compat_convert`.
#[derive(Deserialize, JsonSchema)]
struct ConvertArgs {
    /// The temperature.
    value: f64,
    /// The unit to convert to.
    to: Unit,
}

/// Converts a Celsius temperature (typed arguments, a documented enum).
struct Convert;

impl TypedTool for Convert {
    type Args = ConvertArgs;
    fn name(&self) -> &str {
        "compat_convert"
    }
    fn description(&self) -> &str {
        "Converts a temperature in degrees Celsius to `to`."
    }
    fn risk(&self) -> Risk {
        Risk::Read
    }
    async fn run(&self, _ctx: &ToolContext<'_>, args: ConvertArgs) -> Result<String, ToolError> {
        Ok(match args.to {
            Unit::Celsius => format!("{}", args.value),
            Unit::Fahrenheit => format!("{}", args.value * 9.0 / 5.0 + 32.0),
        })
    }
}

/// Uses every host service and reports what each gave.
struct Services;

impl Tool for Services {
    fn name(&self) -> &str {
        "compat_services"
    }
    fn description(&self) -> &str {
        "Uses every host service of ABI 0.1.3 and reports the results as JSON."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]})
    }
    fn risk(&self) -> Risk {
        Risk::Write
    }
    async fn call(&self, ctx: &ToolContext<'_>, args: Value) -> Result<String, ToolError> {
        let note = args["note"].as_str().unwrap_or_default().to_owned();
        ctx.log(LogLevel::INFO, &format!("compat log: {note}"));
        ctx.progress(1.0, Some(2.0), Some("halfway"));
        let slept = ctx.sleep(Duration::from_millis(1)).await.is_ok();
        let state_dir = ctx.state_dir().await.map_err(ToolError::failed)?;
        let file = state_dir.join("compat-note.txt");
        std::fs::write(&file, &note).map_err(ToolError::failed)?;
        let read_back = std::fs::read_to_string(&file).map_err(ToolError::failed)?;
        let blocking = ctx
            .blocking(|flag| !flag.is_cancelled())
            .await
            .map_err(ToolError::failed)?;
        let ask = ctx.ask_user(&AskRequest::text("compat?")).await.err();
        let sample = ctx
            .sample(&SampleRequest {
                prompt: "compat".into(),
                system: None,
                max_tokens: 10,
            })
            .await
            .err();
        let child = ctx
            .child_turn(&ChildTurnRequest {
                prompt: "compat".into(),
                context: None,
            })
            .await;
        let sessions = ctx
            .search_sessions(&SessionQuery {
                query: "compat".into(),
                limit: 5,
                exclude_current: true,
            })
            .await;
        ctx.progress(2.0, Some(2.0), None);
        Ok(json!({
            "profile": ctx.profile_id(),
            "session": ctx.session_id(),
            "model": ctx.model(),
            "cancelled": ctx.is_cancelled(),
            "slept": slept,
            "state_dir": state_dir,
            "read_back": read_back,
            "blocking": blocking,
            "ask": ask.map(|e| e.to_string()),
            "sample": sample.map(|e| e.to_string()),
            "child_turn": child.map_err(|e| e.to_string()),
            "sessions": sessions.map(|h| h.len()).map_err(|e| e.to_string()),
        })
        .to_string())
    }
}

/// Rich output: text and an image.
struct Picture;

impl Tool for Picture {
    fn name(&self) -> &str {
        "compat_picture"
    }
    fn description(&self) -> &str {
        "Returns a text block and a one-pixel image."
    }
    fn schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn risk(&self) -> Risk {
        Risk::Read
    }
    async fn call(&self, _ctx: &ToolContext<'_>, _args: Value) -> Result<String, ToolError> {
        Ok(content_output(&[
            Content::text("a picture"),
            Content::Image {
                data: "iVBORw0KGgo=".into(),
                mime_type: "image/png".into(),
            },
        ]))
    }
}

/// Fails in each way a tool can: a refusal of its arguments, a failure, a panic.
struct Fail;

impl Tool for Fail {
    fn name(&self) -> &str {
        "compat_fail"
    }
    fn description(&self) -> &str {
        "Fails as `how` says: invalid, failed or panic."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "properties": {"how": {"type": "string"}}, "required": ["how"]})
    }
    fn risk(&self) -> Risk {
        Risk::Read
    }
    async fn call(&self, _ctx: &ToolContext<'_>, args: Value) -> Result<String, ToolError> {
        match args["how"].as_str() {
            Some("invalid") => Err(ToolError::invalid_args("compat refuses these arguments")),
            Some("panic") => panic!("compat panic"),
            _ => Err(ToolError::failed("compat failure")),
        }
    }
}

/// Interactive, and needs an environment variable to be available.
struct NeedsToken;

impl Tool for NeedsToken {
    fn name(&self) -> &str {
        "compat_needs_token"
    }
    fn description(&self) -> &str {
        "Available only when COMPAT_FIXTURE_TOKEN is set; interactive."
    }
    fn schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn risk(&self) -> Risk {
        Risk::Network
    }
    fn interactive(&self) -> bool {
        true
    }
    fn requirements(&self) -> Requirements {
        Requirements::default().env(&["COMPAT_FIXTURE_TOKEN"])
    }
    async fn call(&self, _ctx: &ToolContext<'_>, _args: Value) -> Result<String, ToolError> {
        Ok("token seen".to_owned())
    }
}

export_plugin! {
    name: "compat-0.1.3",
    version: env!("CARGO_PKG_VERSION"),
    tools: [Convert, Services, Picture, Fail, NeedsToken],
}
