//! An example toolhost plugin written as a third party would: two tools, one with typed
//! arguments and one that is long-running, logs, and stops when it is cancelled.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use toolhost_plugin_api::{LogLevel, Risk, Tool, ToolContext, ToolError, TypedTool, export_plugin};

/// Arguments of `greet`. Doc comments become the schema's descriptions, which the model
/// reads.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct GreetArgs {
    /// The name of the person to greet.
    name: String,
    /// Greeting language: "en" (default), "fr" or "de".
    #[serde(default)]
    language: Option<String>,
}

/// A tool with typed arguments: the schema is derived from `GreetArgs`.
struct Greet;

impl TypedTool for Greet {
    type Args = GreetArgs;

    fn name(&self) -> &str {
        "greet"
    }

    fn description(&self) -> &str {
        "Greets a person by name in English, French or German."
    }

    fn risk(&self) -> Risk {
        Risk::Read
    }

    async fn run(&self, _ctx: &ToolContext<'_>, args: GreetArgs) -> Result<String, ToolError> {
        let greeting = match args.language.as_deref().unwrap_or("en") {
            "en" => "Hello",
            "fr" => "Bonjour",
            "de" => "Hallo",
            other => {
                return Err(ToolError::invalid_args(format!(
                    "language '{other}' is not supported; use \"en\", \"fr\" or \"de\""
                )));
            }
        };
        Ok(format!("{greeting}, {}!", args.name))
    }
}

/// A tool with a hand-written schema that takes its time: it sleeps on the host's timer
/// (plugins have no runtime of their own), reports its progress, and stops early when the
/// call is cancelled.
struct Countdown;

impl Tool for Countdown {
    fn name(&self) -> &str {
        "countdown"
    }

    fn description(&self) -> &str {
        "Counts down from `from` to zero, one step every `step_ms` milliseconds, and returns \
         the steps it counted. Stops early if the call is cancelled."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "from": {"type": "integer", "minimum": 0, "maximum": 100},
                "step_ms": {"type": "integer", "minimum": 0, "maximum": 10000, "default": 100}
            },
            "required": ["from"],
            "additionalProperties": false
        })
    }

    fn risk(&self) -> Risk {
        Risk::Read
    }

    async fn call(&self, ctx: &ToolContext<'_>, args: Value) -> Result<String, ToolError> {
        // The host validated `args` against the schema, so these are present and in range.
        let from = args["from"].as_u64().unwrap_or(0);
        let step = Duration::from_millis(args["step_ms"].as_u64().unwrap_or(100));
        let mut counted = Vec::new();
        for n in (0..=from).rev() {
            counted.push(n.to_string());
            // Shown by clients that asked for progress (MCP progress notifications).
            ctx.progress((from - n) as f64, Some(from as f64), None);
            if n > 0 && ctx.sleep(step).await.is_err() {
                ctx.log(LogLevel::INFO, "countdown cancelled");
                return Err(ToolError::failed(format!(
                    "cancelled after counting {}",
                    counted.join(" ")
                )));
            }
        }
        Ok(counted.join(" "))
    }
}

export_plugin! {
    name: "hello",
    version: env!("CARGO_PKG_VERSION"),
    tools: [Greet, Countdown],
}
