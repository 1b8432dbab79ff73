//! An example toolhost plugin written as a third party would: two tools, one that greets
//! and one that is long-running, logs, reports progress and stops when it is cancelled.
//! Each is a function with `#[tool]`: the name, description and argument schema come from
//! the function, its doc comments and its parameters.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use toolhost_plugin_api::{LogLevel, ToolContext, ToolError, export_plugin, tool};

/// The plugin's settings: the host config's `[plugins.hello.settings]` table. Named in
/// `export_plugin!`, so the host checks the table against this type's schema when it
/// loads the plugin (a wrong value refuses the load; an unknown key is warned about).
#[derive(Deserialize, JsonSchema, Default)]
#[serde(default)]
pub struct HelloSettings {
    /// The language `greet` uses when a call names none (English by default).
    pub language: Option<Language>,
}

/// A language `greet` speaks.
#[derive(Deserialize, JsonSchema, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    /// English.
    En,
    /// French.
    Fr,
    /// German.
    De,
}

/// Greets a person by name in English, French or German.
#[tool(risk = read)]
pub async fn greet(
    #[settings] settings: HelloSettings,
    /// The name of the person to greet.
    name: String,
    /// Greeting language: "en", "fr" or "de" (the plugin's setting, else "en").
    language: Option<String>,
) -> Result<String, ToolError> {
    let fallback = match settings.language {
        None | Some(Language::En) => "en",
        Some(Language::Fr) => "fr",
        Some(Language::De) => "de",
    };
    let greeting = match language.as_deref().unwrap_or(fallback) {
        "en" => "Hello",
        "fr" => "Bonjour",
        "de" => "Hallo",
        other => {
            return Err(ToolError::invalid_args(format!(
                "language '{other}' is not supported; use \"en\", \"fr\" or \"de\""
            )));
        }
    };
    Ok(format!("{greeting}, {name}!"))
}

/// Counts down from `from` to zero, one step every `step_ms` milliseconds, and returns the
/// steps it counted. Stops early if the call is cancelled.
#[tool(risk = read)]
pub async fn countdown(
    ctx: &ToolContext<'_>,
    /// Where to start.
    #[arg(range = 0..=100)]
    from: u64,
    /// Milliseconds between steps.
    #[arg(default = 100, range = 0..=10000)]
    step_ms: u64,
) -> Result<String, ToolError> {
    // Plugins have no runtime of their own: the sleep is on the host's timer.
    let step = Duration::from_millis(step_ms);
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

export_plugin! {
    name: "hello",
    version: env!("CARGO_PKG_VERSION"),
    settings: HelloSettings,
    tools: [greet, countdown],
}

// Tests run each tool through `toolhost_plugin_api::testing`, which calls it the way the
// host does (same glue, same argument parsing), with no host and no unsafe code.
#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use serde_json::json;
    use toolhost_plugin_api::testing::{Progress, TestHost, call};
    use toolhost_plugin_api::{LogLevel, Risk, ToolError};

    use super::{countdown, greet};

    #[test]
    fn greet_says_hello_in_three_languages() {
        assert_eq!(
            call(&greet, json!({"name": "Ada"})),
            Ok("Hello, Ada!".into())
        );
        assert_eq!(
            call(&greet, json!({"name": "Ada", "language": "fr"})),
            Ok("Bonjour, Ada!".into())
        );
        assert_eq!(
            call(&greet, json!({"name": "Ada", "language": "de"})),
            Ok("Hallo, Ada!".into())
        );
    }

    #[test]
    fn greet_speaks_the_plugins_language_when_a_call_names_none() {
        let host = TestHost::new().settings(json!({"language": "de"}));
        assert_eq!(
            host.call(&greet, json!({"name": "Ada"})),
            Ok("Hallo, Ada!".into())
        );
        assert_eq!(
            host.call(&greet, json!({"name": "Ada", "language": "fr"})),
            Ok("Bonjour, Ada!".into())
        );
        let wrong = TestHost::new().settings(json!({"language": "es"}));
        let e = wrong.call(&greet, json!({"name": "Ada"})).unwrap_err();
        assert!(e.to_string().contains("[plugins.NAME.settings]"), "{e}");
    }

    #[test]
    fn a_host_takes_every_tool_and_the_settings() {
        let tools = toolhost_plugin_api::testing::check_plugin(&crate::__TOOLHOST_PLUGIN_ROOT);
        assert_eq!(tools.map(|t| t.len()), Ok(2));
        // What a host checks [plugins.hello.settings] with when it loads the plugin: no
        // table at all is fine, a language it does not speak refuses the load.
        let check = toolhost_plugin_api::testing::check_settings::<super::HelloSettings>;
        assert_eq!(check(json!({})), Ok(vec![]));
        assert_eq!(check(json!({"language": "de"})), Ok(vec![]));
        assert!(check(json!({"language": "es"})).is_err());
    }

    #[test]
    fn greet_refuses_what_it_cannot_do() {
        assert_eq!(
            call(&greet, json!({"name": "Ada", "language": "es"})),
            Err(ToolError::InvalidArgs(
                "language 'es' is not supported; use \"en\", \"fr\" or \"de\"".into()
            ))
        );
        // Checked against the schema first, as the host checks them, with its messages.
        assert_eq!(
            call(&greet, json!({})),
            Err(ToolError::InvalidArgs(
                r#""name" is a required property"#.into()
            ))
        );
        let unknown = call(&greet, json!({"name": "Ada", "lang": "fr"}));
        assert!(
            matches!(&unknown, Err(ToolError::InvalidArgs(m)) if m.contains("'lang' was unexpected")),
            "{unknown:?}"
        );
        assert_eq!(
            call(&countdown, json!({"from": 101})),
            Err(ToolError::InvalidArgs(
                "/from: 101 is greater than the maximum of 100".into()
            ))
        );
    }

    #[test]
    fn the_schemas_are_what_the_model_reads() {
        let host = TestHost::new();
        let greeter = host.describe(&greet);
        assert_eq!((greeter.name.as_str(), greeter.risk), ("greet", Risk::Read));
        assert_eq!(greeter.schema["required"], json!(["name"]));
        assert_eq!(greeter.schema["additionalProperties"], json!(false));
        assert_eq!(
            greeter.schema["properties"]["name"]["description"],
            "The name of the person to greet."
        );
        let counter = host.describe(&countdown);
        assert_eq!(counter.name, "countdown");
        assert_eq!(counter.schema["properties"]["from"]["maximum"], 100);
    }

    #[test]
    fn countdown_counts_sleeps_and_reports_progress() {
        let host = TestHost::new();
        let started = Instant::now();
        assert_eq!(
            host.call(&countdown, json!({"from": 3, "step_ms": 20})),
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
        assert_eq!(call(&countdown, json!({"from": 0})), Ok("0".into()));
    }

    #[test]
    fn countdown_stops_when_the_call_is_cancelled() {
        let host = TestHost::new();
        host.cancel_after(Duration::from_millis(100));
        let started = Instant::now();
        let out = host.call(&countdown, json!({"from": 100, "step_ms": 10_000}));
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
