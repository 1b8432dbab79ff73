//! `cargo_test`: `cargo test --no-fail-fast` in a crate of the workspace, with
//! `--message-format=json` so a compile error comes back as diagnostics; the tests'
//! results are read from libtest's output ([`crate::libtest`]): passed, failed with their
//! output, ignored, and the totals.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_plugin_api::{CancelFlag, Details, Structured, ToolContext, ToolError, tool};

use crate::check::{Selection, tail};
use crate::diagnostics::{self, CompilerDiagnostic};
use crate::exec;
use crate::libtest::{self, Suite, Totals};
use crate::project::CargoCall;

/// How many passed tests the model's text names (failures are always named).
const PASSED_NAMED: usize = 30;

/// Arguments of `cargo_test`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TestArgs {
    /// The crate's (or cargo workspace's) folder: relative to the first workspace root,
    /// or absolute beneath a root. Default: the first root.
    #[serde(default)]
    path: Option<String>,
    /// Only tests whose name contains this text (libtest's filter).
    #[serde(default)]
    filter: Option<String>,
    /// With `filter`: only the test with exactly this name (`--exact`). Default: false.
    #[serde(default)]
    exact: bool,
    /// Only this package of a cargo workspace (`-p`).
    #[serde(default)]
    package: Option<String>,
    /// Features to enable (`--features`).
    #[serde(default)]
    features: Vec<String>,
    /// Enable every feature (`--all-features`). Default: false.
    #[serde(default)]
    all_features: bool,
    /// Run the ignored tests too (`--include-ignored`). Default: false.
    #[serde(default)]
    include_ignored: bool,
    /// Seconds before cargo, the tests and everything they started are killed. Default
    /// and maximum: the workspace's command_timeout_secs.
    #[serde(default)]
    timeout_secs: Option<u64>,
}

/// What `cargo_test` returns.
#[derive(Serialize, JsonSchema)]
pub struct TestReport {
    /// Everything compiled and every test passed.
    pub success: bool,
    /// The totals over every test binary.
    pub totals: Totals,
    /// The failed tests with their output.
    pub failed: Vec<libtest::TestCase>,
    /// Each test binary's results.
    pub suites: Vec<Suite>,
    /// Compiler errors and warnings (a crate that does not compile runs no test).
    pub diagnostics: Vec<CompilerDiagnostic>,
    /// cargo's exit code (absent when it was killed).
    pub exit_code: Option<i32>,
    /// cargo's own messages (standard error), when it failed before any test ran.
    pub cargo_error: Option<String>,
    /// Notes: offline mode, time-outs, missing dependencies, sandbox gaps.
    pub notes: Vec<String>,
}

/// Runs a Rust crate's tests with `cargo test` and returns structured results: the
/// totals (passed, failed, ignored, filtered out), each failed test with its output
/// (panic message, assertion values), and compile errors if it does not build. Options:
/// `path` (the crate's folder, default the first workspace root), `filter` (tests whose
/// name contains it; `exact` for one test), `package`, `features`, `include_ignored`.
/// Runs in the command sandbox (tests can write only beneath the workspace roots and a
/// temporary folder), offline unless the workspace allows the network; killed with
/// every process it started at the time limit.
#[tool(risk = read, programs = ["cargo"], workspace)]
pub async fn cargo_test(
    ctx: &ToolContext<'_>,
    #[args] args: TestArgs,
) -> Result<Structured<TestReport>, ToolError> {
    let call = CargoCall::of(ctx, args.path.as_deref(), args.timeout_secs).await?;
    let mut extra = vec!["--".to_owned(), "--color".to_owned(), "never".to_owned()];
    if let Some(filter) = args.filter.filter(|f| !f.trim().is_empty()) {
        extra.push(filter);
        if args.exact {
            extra.push("--exact".to_owned());
        }
    }
    if args.include_ignored {
        extra.push("--include-ignored".to_owned());
    }
    let selection = Selection {
        package: args.package.as_deref(),
        all_targets: false,
        features: &args.features,
        all_features: args.all_features,
    };
    let command = call.cargo(&["test", "--no-fail-fast"], selection, extra);
    let CargoCall { notes, network, .. } = call;
    let value = ctx
        .blocking(move |cancel: &CancelFlag| {
            let ran = exec::run(command, cancel)?;
            Ok::<_, ToolError>(report(ran, network, notes))
        })
        .await
        .map_err(ToolError::failed)??;
    let text = cargo_test_text(&value);
    let details = cargo_test_details(&value);
    let failed = !value.success;
    Ok(Structured::new(value)
        .text(text)
        .details(details)
        .failed_if(failed))
}

/// The text the model reads for a result of `cargo_test`.
fn cargo_test_text(r: &TestReport) -> String {
    let t = &r.totals;
    let mut text = match &r.cargo_error {
        Some(error) if !r.success && r.suites.is_empty() => {
            crate::check::cargo_failed_headline("cargo test", error)
        }
        _ => format!(
            "cargo test {}: {} passed, {} failed, {} ignored, {} filtered out\n",
            if r.success { "passed" } else { "failed" },
            t.passed,
            t.failed,
            t.ignored,
            t.filtered_out
        ),
    };
    for case in &r.failed {
        text.push_str(&format!("\nFAILED {}\n", case.name));
        if let Some(output) = &case.output {
            text.push_str(output.trim_end());
            text.push('\n');
        }
    }
    let passed: Vec<&str> = r
        .suites
        .iter()
        .flat_map(|s| &s.tests)
        .filter(|c| c.outcome == "passed")
        .map(|c| c.name.as_str())
        .collect();
    if !passed.is_empty() {
        text.push_str(&format!(
            "\npassed: {}{}\n",
            passed
                .iter()
                .take(PASSED_NAMED)
                .copied()
                .collect::<Vec<_>>()
                .join(", "),
            if passed.len() > PASSED_NAMED {
                format!(" and {} more", passed.len() - PASSED_NAMED)
            } else {
                String::new()
            }
        ));
    }
    let (errors, _) = diagnostics::counts(&r.diagnostics);
    if errors > 0 {
        text.push_str(&format!("\nthe tests did not compile ({errors} errors):\n"));
        text.push_str(&diagnostics::compact_list(&r.diagnostics, 30));
    }
    diagnostics::push_cargo_said(&mut text, r.cargo_error.as_deref(), &r.notes);
    text
}

/// The details clients get for a result of `cargo_test`.
fn cargo_test_details(r: &TestReport) -> Details {
    if r.diagnostics.is_empty() {
        return Details::new();
    }
    diagnostics::details(&r.diagnostics)
}

/// The report of a finished `cargo test`.
fn report(ran: exec::Ran, network: bool, mut notes: Vec<String>) -> TestReport {
    let parsed = diagnostics::parse_messages(&ran.stdout());
    let stderr = ran.stderr();
    let suites = libtest::parse(&parsed.other_lines, &stderr);
    let mut totals = Totals::default();
    for suite in &suites {
        match &suite.totals {
            Some(t) => totals.add(t),
            // A binary that crashed before its summary: count what it reported.
            None => {
                for case in &suite.tests {
                    match case.outcome.as_str() {
                        "passed" => totals.passed += 1,
                        "failed" => totals.failed += 1,
                        "ignored" => totals.ignored += 1,
                        _ => {}
                    }
                }
            }
        }
    }
    let failed: Vec<_> = suites
        .iter()
        .flat_map(|s| &s.tests)
        .filter(|c| c.outcome == "failed")
        .cloned()
        .collect();
    let (errors, _) = diagnostics::counts(&parsed.diagnostics);
    notes.extend(ran.notes.iter().cloned());
    let exit_code = ran.exit_code();
    let success = ran.completed() && exit_code == Some(0) && totals.failed == 0 && errors == 0;
    let cargo_error = (!success && suites.is_empty() && errors == 0 && !stderr.trim().is_empty())
        .then(|| tail(&stderr, 4000));
    if let Some(why) = cargo_error
        .as_deref()
        .and_then(|e| exec::explain_cargo_failure(e, network))
    {
        notes.push(why);
    }
    if suites.iter().any(|s| s.totals.is_none()) && ran.completed() {
        notes.push(
            "a test binary ended without its summary (it crashed or was killed); its \
             results are those it printed"
                .to_owned(),
        );
    }
    TestReport {
        success,
        totals,
        failed,
        suites,
        diagnostics: parsed.diagnostics,
        exit_code,
        cargo_error,
        notes,
    }
}
