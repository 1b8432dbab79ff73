//! `cargo_check` and `cargo_clippy`: `cargo check` / `cargo clippy` with
//! `--message-format=json` in a crate of the workspace; the model reads a compact list
//! of the diagnostics, clients get every diagnostic whole (structured result and the
//! `diagnostics` details).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_plugin_api::{CancelFlag, Structured, ToolContext, ToolError, tool};

use crate::diagnostics::{self, CompilerDiagnostic};
use crate::exec::{self, Command};
use crate::project::CargoCall;

/// How many diagnostics the model's text lists (all are in the structured result).
const TEXT_LIMIT: usize = 60;

/// Arguments of `cargo_check` and `cargo_clippy`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckArgs {
    /// The crate's (or cargo workspace's) folder: relative to the first workspace root,
    /// or absolute beneath a root. Default: the first root.
    #[serde(default)]
    path: Option<String>,
    /// Only this package of a cargo workspace (`-p`). Default: what cargo builds in
    /// that folder.
    #[serde(default)]
    package: Option<String>,
    /// Check tests, examples and benches too (`--all-targets`). Default: false.
    #[serde(default)]
    all_targets: bool,
    /// Features to enable (`--features`).
    #[serde(default)]
    features: Vec<String>,
    /// Enable every feature (`--all-features`). Default: false.
    #[serde(default)]
    all_features: bool,
    /// Seconds before cargo and everything it started are killed. Default and maximum:
    /// the workspace's command_timeout_secs.
    #[serde(default)]
    timeout_secs: Option<u64>,
}

/// What `cargo_check` and `cargo_clippy` return.
#[derive(Serialize, JsonSchema)]
pub struct CheckReport {
    /// cargo finished and found no error.
    pub success: bool,
    /// How many errors.
    pub errors: usize,
    /// How many warnings.
    pub warnings: usize,
    /// Every diagnostic, whole.
    pub diagnostics: Vec<CompilerDiagnostic>,
    /// cargo's exit code (absent when it was killed).
    pub exit_code: Option<i32>,
    /// cargo's own messages (standard error), when it failed without a diagnostic.
    pub cargo_error: Option<String>,
    /// Notes: offline mode, time-outs, missing dependencies, sandbox gaps.
    pub notes: Vec<String>,
}

/// Which cargo subcommand a check runs.
#[derive(Clone, Copy)]
enum Checker {
    /// `cargo check`.
    Check,
    /// `cargo clippy`.
    Clippy,
}

/// Type-checks a Rust crate of the workspace with `cargo check` and returns the
/// compiler's errors and warnings, one per entry: level, code, file:line:col, message,
/// the source line and any suggested fix. Faster than a build; use it after editing
/// Rust code. Options: `path` (the crate's folder, default the first workspace root),
/// `package`, `all_targets` (tests and examples too), `features`, `all_features`. Runs
/// in the command sandbox (writes only the crate's root, its target folder and cargo's
/// caches), offline unless the workspace allows the network.
#[tool(risk = read, programs = ["cargo"], workspace)]
pub async fn cargo_check(
    ctx: &ToolContext<'_>,
    #[args] args: CheckArgs,
) -> Result<Structured<CheckReport>, ToolError> {
    let report = run_checker(ctx, args, Checker::Check).await?;
    Ok(answer("cargo check", report))
}

/// Lints a Rust crate of the workspace with `cargo clippy` and returns the lints and
/// compiler diagnostics, one per entry: level, code (`clippy::...`), file:line:col,
/// message, the source line and any suggested fix. Options: `path` (the crate's folder,
/// default the first workspace root), `package`, `all_targets`, `features`,
/// `all_features`. Runs in the command sandbox, offline unless the workspace allows the
/// network.
#[tool(risk = read, programs = ["cargo"], workspace)]
pub async fn cargo_clippy(
    ctx: &ToolContext<'_>,
    #[args] args: CheckArgs,
) -> Result<Structured<CheckReport>, ToolError> {
    let report = run_checker(ctx, args, Checker::Clippy).await?;
    Ok(answer("cargo clippy", report))
}

/// A check's result: the compact text the model reads, every diagnostic whole in the
/// details, and an error when the check did not pass.
fn answer(what: &str, report: CheckReport) -> Structured<CheckReport> {
    let text = report_text(what, &report);
    let details = diagnostics::details(&report.diagnostics);
    let failed = !report.success;
    Structured::new(report)
        .text(text)
        .details(details)
        .failed_if(failed)
}

/// Plans and runs one check.
async fn run_checker(
    ctx: &ToolContext<'_>,
    args: CheckArgs,
    checker: Checker,
) -> Result<CheckReport, ToolError> {
    let call = CargoCall::of(ctx, args.path.as_deref(), args.timeout_secs).await?;
    let subcommand = match checker {
        Checker::Check => "check",
        Checker::Clippy => "clippy",
    };
    let selection = Selection {
        package: args.package.as_deref(),
        all_targets: args.all_targets,
        features: &args.features,
        all_features: args.all_features,
    };
    let command = call.cargo(&[subcommand], selection, Vec::new());
    let CargoCall { notes, network, .. } = call;
    ctx.blocking(move |cancel: &CancelFlag| {
        let ran = exec::run(command, cancel)?;
        Ok(report(ran, network, notes))
    })
    .await
    .map_err(ToolError::failed)?
}

/// What a cargo tool asks cargo to work on (shared with the test and fix tools).
pub(crate) struct Selection<'a> {
    /// `--package`.
    pub(crate) package: Option<&'a str>,
    /// `--all-targets`.
    pub(crate) all_targets: bool,
    /// `--features`, joined.
    pub(crate) features: &'a [String],
    /// `--all-features`.
    pub(crate) all_features: bool,
}

impl CargoCall {
    /// `cargo SUBCOMMAND` on the call's crate: the selection, `--offline` unless the
    /// workspace allows the network, `--color never`, `--message-format=json`, then
    /// `extra`; it writes beneath the crate's root and cargo's caches, within the call's
    /// time limit.
    pub(crate) fn cargo(
        &self,
        subcommand: &[&str],
        selection: Selection<'_>,
        extra: Vec<String>,
    ) -> Command {
        let mut args: Vec<String> = subcommand.iter().map(|a| (*a).to_owned()).collect();
        if let Some(package) = selection.package {
            args.extend(["--package".to_owned(), package.to_owned()]);
        }
        if selection.all_targets {
            args.push("--all-targets".to_owned());
        }
        if !selection.features.is_empty() {
            args.extend(["--features".to_owned(), selection.features.join(",")]);
        }
        if selection.all_features {
            args.push("--all-features".to_owned());
        }
        if !self.network {
            args.push("--offline".to_owned());
        }
        args.extend(["--color", "never", "--message-format=json"].map(str::to_owned));
        args.extend(extra);
        Command {
            program: "cargo",
            args,
            cwd: self.project.dir.clone(),
            write: vec![self.project.root.clone()],
            cargo_caches: true,
            network: self.network,
            local_tcp: false,
            configured_env: self.workspace.rules.env.clone(),
            timeout: self.timeout,
        }
    }
}

/// The report of a finished check.
fn report(ran: exec::Ran, network: bool, mut notes: Vec<String>) -> CheckReport {
    let parsed = diagnostics::parse_messages(&ran.stdout());
    let (errors, warnings) = diagnostics::counts(&parsed.diagnostics);
    notes.extend(ran.notes.iter().cloned());
    if !network {
        notes.push(
            "cargo ran with --offline (this workspace has no network): dependencies come \
             from cargo's cache"
                .to_owned(),
        );
    }
    let exit_code = ran.exit_code();
    let success = ran.completed() && exit_code == Some(0) && errors == 0;
    let stderr = ran.stderr();
    let cargo_error =
        (!success && errors == 0 && !stderr.trim().is_empty()).then(|| tail(&stderr, 4000));
    if let Some(why) = cargo_error
        .as_deref()
        .and_then(|e| exec::explain_cargo_failure(e, network))
    {
        notes.push(why);
    }
    CheckReport {
        success,
        errors,
        warnings,
        diagnostics: parsed.diagnostics,
        exit_code,
        cargo_error,
        notes,
    }
}

/// The last `max` bytes of `text` (at a character boundary), marked when cut.
pub(crate) fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("[... {start} bytes left out ...]\n{}", &text[start..])
}

/// The headline of a cargo run that failed before it compiled anything (a manifest it
/// cannot read, a dependency it cannot resolve): cargo's own first error line.
pub(crate) fn cargo_failed_headline(what: &str, cargo_error: &str) -> String {
    let said = cargo_error
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("error"))
        .or_else(|| cargo_error.lines().map(str::trim).find(|l| !l.is_empty()))
        .unwrap_or("cargo stopped without saying why");
    format!("{what} failed before compiling: {said}\n")
}

/// The model's text of a check.
fn report_text(what: &str, r: &CheckReport) -> String {
    let verdict = if r.success { "passed" } else { "failed" };
    let mut text = match &r.cargo_error {
        Some(error) if !r.success && r.errors == 0 => cargo_failed_headline(what, error),
        _ => format!(
            "{what} {verdict}: {} errors, {} warnings\n",
            r.errors, r.warnings
        ),
    };
    text.push_str(&diagnostics::compact_list(&r.diagnostics, TEXT_LIMIT));
    diagnostics::push_cargo_said(&mut text, r.cargo_error.as_deref(), &r.notes);
    text
}
