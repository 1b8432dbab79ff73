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

// Tests run each tool through `toolhost_plugin_api::testing`, which calls it the way the
// host does (same glue, same argument parsing), with no host and no unsafe code.
#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use serde_json::json;
    use toolhost_plugin_api::testing::{Progress, TestHost, call};
    use toolhost_plugin_api::{LogLevel, Risk, ToolError};

    use super::{Countdown, Greet};

    #[test]
    fn greet_says_hello_in_three_languages() {
        assert_eq!(
            call(&Greet, json!({"name": "Ada"})),
            Ok("Hello, Ada!".into())
        );
        assert_eq!(
            call(&Greet, json!({"name": "Ada", "language": "fr"})),
            Ok("Bonjour, Ada!".into())
        );
        assert_eq!(
            call(&Greet, json!({"name": "Ada", "language": "de"})),
            Ok("Hallo, Ada!".into())
        );
    }

    #[test]
    fn greet_refuses_what_it_cannot_do() {
        assert_eq!(
            call(&Greet, json!({"name": "Ada", "language": "es"})),
            Err(ToolError::InvalidArgs(
                "language 'es' is not supported; use \"en\", \"fr\" or \"de\"".into()
            ))
        );
        // Parsed by the same glue as in the host: serde's messages.
        let missing = call(&Greet, json!({}));
        assert!(
            matches!(&missing, Err(ToolError::InvalidArgs(m)) if m.contains("missing field `name`"))
        );
        let unknown = call(&Greet, json!({"name": "Ada", "lang": "fr"}));
        assert!(
            matches!(&unknown, Err(ToolError::InvalidArgs(m)) if m.contains("unknown field `lang`"))
        );
    }

    #[test]
    fn the_schemas_are_what_the_model_reads() {
        let host = TestHost::new();
        let greet = host.describe(&Greet);
        assert_eq!((greet.name.as_str(), greet.risk), ("greet", Risk::Read));
        assert_eq!(greet.schema["required"], json!(["name"]));
        assert_eq!(greet.schema["additionalProperties"], json!(false));
        assert_eq!(
            greet.schema["properties"]["name"]["description"],
            "The name of the person to greet."
        );
        let countdown = host.describe(&Countdown);
        assert_eq!(countdown.name, "countdown");
        assert_eq!(countdown.schema["properties"]["from"]["maximum"], 100);
    }

    #[test]
    fn countdown_counts_sleeps_and_reports_progress() {
        let host = TestHost::new();
        let started = Instant::now();
        assert_eq!(
            host.call(&Countdown, json!({"from": 3, "step_ms": 20})),
            Ok("3 2 1 0".into())
        );
        // Three real sleeps of 20 ms on the host's timer.
        assert!(started.elapsed() >= Duration::from_millis(60));
        let step = |n: f64| Progress {
            progress: n,
            total: Some(3.0),
            message: None,
        };
        assert_eq!(
            host.progress(),
            [step(0.0), step(1.0), step(2.0), step(3.0)]
        );
        assert!(host.logs().is_empty());
        assert_eq!(call(&Countdown, json!({"from": 0})), Ok("0".into()));
    }

    #[test]
    fn countdown_stops_when_the_call_is_cancelled() {
        let host = TestHost::new();
        host.cancel_after(Duration::from_millis(100));
        let started = Instant::now();
        let out = host.call(&Countdown, json!({"from": 100, "step_ms": 10_000}));
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(
            out,
            Err(ToolError::Failed("cancelled after counting 100".into()))
        );
        assert_eq!(
            host.logs(),
            [(LogLevel::INFO, "countdown cancelled".to_owned())]
        );
    }
}
