//! Tests of `#[tool]` through the harness: the metadata it derives, the arguments it
//! takes (and refuses with the host's messages), each kind of result, settings, errors.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeMap;

use serde_json::json;

use super::{TestHost, call};
use crate::{Diagnostic, Risk, TaskSupport, ToolContext, ToolError, ToolOutput, tool};

#[derive(serde::Serialize, schemars::JsonSchema)]
struct WordFreq {
    /// The most frequent words, most frequent first.
    words: Vec<(String, u32)>,
    /// How many words the text has.
    total: u32,
}

/// Counts the words of `text` and returns the most frequent ones.
#[tool(risk = read)]
async fn word_freq(
    /// The text to count words in.
    text: String,
    /// How many words to return.
    #[arg(default = 10, range = 1..=100)]
    top: u32,
) -> Result<WordFreq, ToolError> {
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    for w in text.split_whitespace() {
        *counts.entry(w.to_lowercase()).or_default() += 1;
    }
    let total = counts.values().sum();
    let mut words: Vec<(String, u32)> = counts.into_iter().collect();
    words.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    words.truncate(top as usize);
    Ok(WordFreq { words, total })
}

#[test]
fn the_name_description_schema_and_output_schema_come_from_the_function() {
    let info = TestHost::new().describe(&word_freq);
    assert_eq!(info.name, "word_freq");
    assert_eq!(
        info.description,
        "Counts the words of `text` and returns the most frequent ones."
    );
    assert_eq!(info.risk, Risk::Read);
    assert!(!info.interactive);
    let props = &info.schema["properties"];
    assert_eq!(props["text"]["description"], "The text to count words in.");
    assert_eq!(props["top"]["description"], "How many words to return.");
    assert_eq!(props["top"]["minimum"], 1);
    assert_eq!(props["top"]["maximum"], 100);
    assert_eq!(props["top"]["default"], 10);
    assert_eq!(info.schema["required"], json!(["text"]));
    assert_eq!(info.schema["additionalProperties"], false);
    let out = info
        .output_schema
        .expect("a structured result declares its schema");
    assert_eq!(out["type"], "object");
    assert_eq!(out["required"], json!(["words", "total"]));
}

#[test]
fn a_structured_result_reaches_the_caller_with_its_json_as_text() {
    let out = TestHost::new()
        .call_output(&word_freq, json!({"text": "a b a c a b", "top": 2}))
        .unwrap();
    assert_eq!(
        out.structured,
        Some(json!({"words": [["a", 3], ["b", 2]], "total": 6}))
    );
    assert_eq!(out.text, r#"{"total":6,"words":[["a",3],["b",2]]}"#);
    // The default applies when the argument is left out.
    let all = TestHost::new()
        .call_output(&word_freq, json!({"text": "x"}))
        .unwrap();
    assert_eq!(all.structured.unwrap()["total"], 1);
}

#[test]
fn the_harness_refuses_what_the_schema_refuses_before_the_body_runs() {
    assert_eq!(
        call(&word_freq, json!({"text": "a", "top": 500})),
        Err(ToolError::InvalidArgs(
            "/top: 500 is greater than the maximum of 100".into()
        ))
    );
    assert_eq!(
        call(&word_freq, json!({"text": "a", "top": 0})),
        Err(ToolError::InvalidArgs(
            "/top: 0 is less than the minimum of 1".into()
        ))
    );
    let unknown = call(&word_freq, json!({"text": "a", "limit": 3})).unwrap_err();
    assert!(
        unknown.to_string().starts_with("invalid arguments: ")
            && unknown.to_string().contains("limit"),
        "{unknown}"
    );
    let missing = call(&word_freq, json!({})).unwrap_err();
    assert!(
        missing
            .to_string()
            .contains("\"text\" is a required property"),
        "{missing}"
    );
}

/// Says hello.
#[tool(
    risk = network,
    interactive,
    workspace,
    env = ["API_KEY"],
    programs = ["git", "gh"],
    task = optional,
    name = "say-hello"
)]
async fn hello(
    ctx: &ToolContext<'_>,
    /// Who to greet.
    #[arg(length = 1..=20, pattern = "^[A-Z]")]
    name: String,
    /// How to greet.
    #[arg(default = "Hello")]
    greeting: String,
    /// Said after the name.
    suffix: Option<String>,
) -> Result<String, ToolError> {
    ctx.progress(1.0, Some(1.0), None);
    Ok(format!(
        "{greeting}, {name}{}",
        suffix.unwrap_or_else(|| "!".into())
    ))
}

#[test]
fn arguments_say_the_name_risk_and_requirements() {
    let info = TestHost::new().describe(&hello);
    assert_eq!(info.name, "say-hello");
    assert_eq!(info.risk, Risk::Network);
    assert!(info.interactive);
    assert_eq!(info.requirements.env, ["API_KEY"]);
    assert_eq!(info.requirements.programs, ["git", "gh"]);
    assert!(info.requirements.workspace);
    assert_eq!(info.requirements.task, TaskSupport::Optional);
    assert!(
        info.output_schema.is_none(),
        "text declares no output schema"
    );
    let name = &info.schema["properties"]["name"];
    assert_eq!(
        (name["minLength"].clone(), name["maxLength"].clone()),
        (json!(1), json!(20))
    );
    assert_eq!(name["pattern"], "^[A-Z]");
    assert_eq!(info.schema["properties"]["greeting"]["default"], "Hello");
    assert_eq!(info.schema["required"], json!(["name"]));
}

#[test]
fn the_context_is_injected_and_defaults_and_options_fill_in() {
    let host = TestHost::new();
    assert_eq!(
        host.call(&hello, json!({"name": "Ada"})),
        Ok("Hello, Ada!".into())
    );
    assert_eq!(host.progress().len(), 1);
    assert_eq!(
        host.call(
            &hello,
            json!({"name": "Ada", "greeting": "Hi", "suffix": "."})
        ),
        Ok("Hi, Ada.".into())
    );
    let refused = host.call(&hello, json!({"name": "ada"})).unwrap_err();
    assert!(
        refused
            .to_string()
            .starts_with("invalid arguments: /name: "),
        "{refused}"
    );
    // The body is callable from Rust too.
    let direct = crate::testing::TestHost::new().call(&hello, json!({"name": "Bo"}));
    assert_eq!(direct, Ok("Hello, Bo!".into()));
}

/// Lints a Markdown text.
#[tool(risk = read)]
fn lint_markdown(
    /// The Markdown.
    text: String,
    /// The longest line allowed.
    #[arg(default = 80, range = 20..)]
    max_line: usize,
) -> Vec<Diagnostic> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.chars().count() > max_line)
        .map(|(i, _)| Diagnostic::new("warning", "line too long").line("text.md", i as u64 + 1))
        .collect()
}

#[test]
fn a_list_of_diagnostics_is_text_for_the_model_and_details_for_clients() {
    let long = "x".repeat(30);
    let out = TestHost::new()
        .call_output(
            &lint_markdown,
            json!({"text": format!("ok\n{long}"), "max_line": 20}),
        )
        .unwrap();
    assert_eq!(out.text, "text.md:2: warning: line too long");
    assert_eq!(out.details["diagnostics"][0]["line"], 2);
    assert!(out.details["diagnostics"][0].get("column").is_none());
    let schema = TestHost::new().describe(&lint_markdown).schema;
    assert_eq!(schema["properties"]["max_line"]["minimum"], 20);
    assert!(schema["properties"]["max_line"].get("maximum").is_none());
}

#[derive(serde::Serialize, schemars::JsonSchema)]
struct Exported {
    bytes: usize,
}

/// Exports, with a short text for the model beside the value.
#[tool(risk = write)]
async fn export(size: usize) -> Result<(String, Exported), std::io::Error> {
    if size == 0 {
        return Err(std::io::Error::other("nothing to export"));
    }
    Ok((format!("exported {size} bytes"), Exported { bytes: size }))
}

#[test]
fn a_text_beside_a_value_and_any_displayable_error() {
    let out = TestHost::new()
        .call_output(&export, json!({"size": 3}))
        .unwrap();
    assert_eq!(out.text, "exported 3 bytes");
    assert_eq!(out.structured, Some(json!({"bytes": 3})));
    assert_eq!(
        call(&export, json!({"size": 0})),
        Err(ToolError::Failed("nothing to export".into()))
    );
}

/// Reads a number, refusing odd ones as invalid arguments.
#[tool(risk = read)]
async fn even(n: i64) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    if n % 2 != 0 {
        return Err(ToolError::invalid_args(format!("{n} is odd; give an even number")).into());
    }
    let parsed: i64 = format!("{n}").parse()?;
    Ok(parsed.to_string())
}

#[test]
fn invalid_arguments_can_be_said_through_any_boxed_error() {
    assert_eq!(call(&even, json!({"n": 4})), Ok("4".into()));
    assert_eq!(
        call(&even, json!({"n": 3})),
        Err(ToolError::InvalidArgs(
            "3 is odd; give an even number".into()
        ))
    );
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Units {
    metric: bool,
}

/// The temperature outside, in the plugin's units.
#[tool(risk = read)]
async fn temperature(#[settings] units: Units) -> ToolOutput {
    ToolOutput::text(if units.metric { "21 °C" } else { "70 °F" })
}

#[test]
fn settings_are_read_for_the_call_and_their_errors_name_the_fix() {
    assert_eq!(call(&temperature, json!({})), Ok("70 °F".into()));
    let host = TestHost::new().settings(json!({"metric": true}));
    assert_eq!(host.call(&temperature, json!({})), Ok("21 °C".into()));
    let bad = TestHost::new().settings(json!({"metric": "yes"}));
    let e = bad.call(&temperature, json!({})).unwrap_err();
    assert!(e.to_string().contains("[plugins.NAME.settings]"), "{e}");
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct SumArgs {
    /// Numbers to add.
    numbers: Vec<f64>,
}

/// Adds numbers.
#[tool(risk = read)]
async fn sum(#[args] args: SumArgs) -> String {
    args.numbers.iter().sum::<f64>().to_string()
}

#[test]
fn a_whole_arguments_type_still_works() {
    assert_eq!(call(&sum, json!({"numbers": [1.5, 2]})), Ok("3.5".into()));
    let info = TestHost::new().describe(&sum);
    assert_eq!(
        info.schema["properties"]["numbers"]["description"],
        "Numbers to add."
    );
}

/// Writes `rows` rows of a CSV export, reporting progress and stopping when the call is
/// cancelled.
///
/// The whole export comes back:
/// - as the text, which the host pages within its output budget;
/// - with the row count in the details.
#[tool(risk = read)]
async fn slow_export(
    ctx: &ToolContext<'_>,
    /// Rows to write.
    #[arg(range = 1..=100_000)]
    rows: u32,
) -> Result<ToolOutput, ToolError> {
    let mut csv = String::from("id,name,value\n");
    for row in 0..rows {
        if row % 10_000 == 0 {
            if ctx.is_cancelled() {
                return Err(ToolError::failed(format!("cancelled after {row} rows")));
            }
            ctx.progress(f64::from(row), Some(f64::from(rows)), None);
            ctx.sleep(std::time::Duration::from_millis(1)).await?;
        }
        csv.push_str(&format!(
            "{row},row number {row:>8},{:>12}\n",
            u64::from(row) * 7
        ));
    }
    Ok(ToolOutput::text(csv).with_detail("rows", json!(rows)))
}

#[test]
fn a_long_export_reports_progress_returns_megabytes_and_stops_when_cancelled() {
    let host = TestHost::new();
    let out = host
        .call_output(&slow_export, json!({"rows": 80_000}))
        .unwrap();
    assert!(out.text.len() > 3_000_000, "{}", out.text.len());
    assert_eq!(out.details["rows"], 80_000);
    assert_eq!(host.progress().len(), 8);
    let cancelled = TestHost::new();
    cancelled.cancel();
    assert_eq!(
        cancelled.call(&slow_export, json!({"rows": 10})),
        Err(ToolError::Failed("cancelled after 0 rows".into()))
    );
    // The doc comment's paragraphs and list keep their shape; wrapped lines are joined.
    assert_eq!(
        TestHost::new().describe(&slow_export).description,
        "Writes `rows` rows of a CSV export, reporting progress and stopping when the call \
         is cancelled.\n\nThe whole export comes back:\n- as the text, which the host pages \
         within its output budget;\n- with the row count in the details."
    );
}
