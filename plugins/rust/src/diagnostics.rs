//! rustc's diagnostics as cargo reports them with `--message-format=json`, read with
//! `cargo_metadata` (one JSON message a line; other lines are a test binary's output or
//! text): the full diagnostic (spans, children, suggested replacements) for structured
//! results and details, and the compact line a model reads (level, code,
//! file:line:col, message, the primary span's source line).

use cargo_metadata::Message;
use cargo_metadata::diagnostic::{
    Applicability, Diagnostic as RustcDiagnostic, DiagnosticLevel, DiagnosticSpan,
};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::json;
use toolhost_plugin_api::Diagnostic;

/// One compiler or lint diagnostic.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CompilerDiagnostic {
    /// `error`, `warning`, `note`, `help`, `failure-note` or `ice` (internal compiler
    /// error).
    pub level: String,
    /// The error or lint code (`E0308`, `clippy::needless_return`, `unused_variables`).
    pub code: Option<String>,
    /// The message.
    pub message: String,
    /// The primary span's file (as rustc names it: relative to the cargo workspace).
    pub file: Option<String>,
    /// The primary span's first line (1-based).
    pub line: Option<u64>,
    /// The primary span's first column (1-based).
    pub column: Option<u64>,
    /// The package and target the message is about (`name (lib)`).
    pub target: String,
    /// Every span, primary first.
    pub spans: Vec<Span>,
    /// Notes, help and suggestions attached to it.
    pub children: Vec<Child>,
    /// rustc's own rendering (what a terminal shows).
    pub rendered: Option<String>,
}

/// A place in the source a diagnostic points at.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Span {
    /// The file.
    pub file: String,
    /// First line (1-based).
    pub line_start: u64,
    /// Last line.
    pub line_end: u64,
    /// First column (1-based).
    pub column_start: u64,
    /// Column after the end.
    pub column_end: u64,
    /// Whether it is the diagnostic's main place.
    pub is_primary: bool,
    /// The label shown at it.
    pub label: Option<String>,
    /// The source lines it covers.
    pub text: Vec<String>,
    /// The text a suggestion would put in its place.
    pub suggested_replacement: Option<String>,
    /// How safely the suggestion applies: `MachineApplicable` (cargo fix applies it),
    /// `MaybeIncorrect`, `HasPlaceholders`, `Unspecified`.
    pub suggestion_applicability: Option<String>,
}

/// A note, help or suggestion attached to a diagnostic.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Child {
    /// `note`, `help`, ...
    pub level: String,
    /// Its message.
    pub message: String,
    /// Where it points (suggestions carry their replacement here).
    pub spans: Vec<Span>,
}

/// What a cargo `--message-format=json` run said.
#[derive(Default)]
pub(crate) struct CargoMessages {
    /// The compiler's diagnostics, in order, duplicates (the same message for several
    /// targets) left out.
    pub(crate) diagnostics: Vec<CompilerDiagnostic>,
    /// `build-finished`'s verdict, if cargo got that far.
    pub(crate) build_success: Option<bool>,
    /// The lines that were not cargo messages (a test binary's output).
    pub(crate) other_lines: Vec<String>,
}

/// Reads cargo's standard output: JSON messages and other lines.
pub(crate) fn parse_messages(stdout: &str) -> CargoMessages {
    let mut out = CargoMessages::default();
    let mut seen = std::collections::HashSet::new();
    for line in stdout.lines() {
        let message = line
            .starts_with("{\"reason\":")
            .then(|| serde_json::from_str::<Message>(line).ok())
            .flatten();
        match message {
            Some(Message::CompilerMessage(m)) => {
                if is_summary(&m.message) {
                    continue;
                }
                let key = m
                    .message
                    .rendered
                    .clone()
                    .unwrap_or_else(|| m.message.message.clone());
                if !seen.insert(key) {
                    continue;
                }
                let kinds = m.target.kind.iter().map(|k| k.to_string());
                let target = format!(
                    "{} ({})",
                    m.target.name,
                    kinds.collect::<Vec<_>>().join(", ")
                );
                out.diagnostics.push(convert(&m.message, target));
            }
            Some(Message::BuildFinished(f)) => out.build_success = Some(f.success),
            Some(_) => {}
            None => out.other_lines.push(line.to_owned()),
        }
    }
    out
}

/// rustc's closing counts ("aborting due to 2 previous errors", "3 warnings emitted"):
/// no spans, nothing the counts here do not say.
fn is_summary(d: &RustcDiagnostic) -> bool {
    d.spans.is_empty()
        && d.code.is_none()
        && (d.message.starts_with("aborting due to")
            || d.message.ends_with("emitted")
            || d.message.starts_with("For more information about"))
}

/// A level as a word.
fn level_name(level: &DiagnosticLevel) -> String {
    match level {
        DiagnosticLevel::Ice => "ice",
        DiagnosticLevel::Error => "error",
        DiagnosticLevel::Warning => "warning",
        DiagnosticLevel::FailureNote => "failure-note",
        DiagnosticLevel::Note => "note",
        DiagnosticLevel::Help => "help",
        _ => "other",
    }
    .to_owned()
}

/// An applicability as a word.
fn applicability_name(a: &Applicability) -> String {
    match a {
        Applicability::MachineApplicable => "MachineApplicable",
        Applicability::HasPlaceholders => "HasPlaceholders",
        Applicability::MaybeIncorrect => "MaybeIncorrect",
        Applicability::Unspecified => "Unspecified",
        _ => "Unknown",
    }
    .to_owned()
}

/// A span, as reported.
fn span(s: &DiagnosticSpan) -> Span {
    Span {
        file: s.file_name.clone(),
        line_start: s.line_start as u64,
        line_end: s.line_end as u64,
        column_start: s.column_start as u64,
        column_end: s.column_end as u64,
        is_primary: s.is_primary,
        label: s.label.clone(),
        text: s.text.iter().map(|l| l.text.clone()).collect(),
        suggested_replacement: s.suggested_replacement.clone(),
        suggestion_applicability: s.suggestion_applicability.as_ref().map(applicability_name),
    }
}

/// The spans of `d`, primary first.
fn spans(d: &RustcDiagnostic) -> Vec<Span> {
    let mut spans: Vec<Span> = d.spans.iter().map(span).collect();
    spans.sort_by_key(|s| !s.is_primary);
    spans
}

/// The place the primary span points at in the user's code: a span inside a macro
/// expansion is followed to where the macro was called.
fn primary(d: &RustcDiagnostic) -> Option<&DiagnosticSpan> {
    let mut s = d.spans.iter().find(|s| s.is_primary)?;
    while let Some(expansion) = &s.expansion {
        s = &expansion.span;
    }
    Some(s)
}

/// rustc's diagnostic as ours.
fn convert(d: &RustcDiagnostic, target: String) -> CompilerDiagnostic {
    let at = primary(d);
    CompilerDiagnostic {
        level: level_name(&d.level),
        code: d.code.as_ref().map(|c| c.code.clone()),
        message: d.message.clone(),
        file: at.map(|s| s.file_name.clone()),
        line: at.map(|s| s.line_start as u64),
        column: at.map(|s| s.column_start as u64),
        target,
        spans: spans(d),
        children: d
            .children
            .iter()
            .map(|c| Child {
                level: level_name(&c.level),
                message: c.message.clone(),
                spans: spans(c),
            })
            .collect(),
        rendered: d.rendered.clone(),
    }
}

impl CompilerDiagnostic {
    /// The compact form a model reads: `error[E0308] src/lib.rs:3:9: mismatched types`,
    /// then the primary span's source line and, for a suggestion, its replacement.
    pub(crate) fn compact(&self) -> String {
        let mut text = self.level.clone();
        if let Some(code) = &self.code {
            text.push_str(&format!("[{code}]"));
        }
        if let (Some(file), Some(line), Some(col)) = (&self.file, self.line, self.column) {
            text.push_str(&format!(" {file}:{line}:{col}"));
        }
        text.push_str(&format!(": {}", self.message));
        let primary = self.spans.iter().find(|s| s.is_primary);
        if let Some(line) = primary.and_then(|s| s.text.first()) {
            text.push_str(&format!("\n    | {}", line.trim()));
            if let Some(label) = primary.and_then(|s| s.label.as_deref()) {
                text.push_str(&format!("  <- {label}"));
            }
        }
        for child in &self.children {
            let suggestion = child
                .spans
                .iter()
                .find_map(|s| s.suggested_replacement.as_deref());
            match suggestion {
                Some(replacement) => text.push_str(&format!(
                    "\n    {}: {} `{}`",
                    child.level,
                    child.message,
                    replacement.trim_end()
                )),
                None if child.level == "help" => {
                    text.push_str(&format!("\n    help: {}", child.message));
                }
                None => {}
            }
        }
        text
    }

    /// The plugin API's detail form: the place and code, everything else in `extra`.
    pub(crate) fn detail(&self) -> Diagnostic {
        let mut d = Diagnostic::new(self.level.clone(), self.message.clone());
        if let (Some(file), Some(line), Some(col)) = (&self.file, self.line, self.column) {
            d = d.at(file.clone(), line, col);
        }
        if let Some(code) = &self.code {
            d = d.code(code.clone());
        }
        d.extra = json!({
            "target": self.target,
            "spans": self.spans,
            "children": self.children,
            "rendered": self.rendered,
        });
        d
    }
}

/// The compact list of `diagnostics` for the model, at most `limit` of them (errors
/// first), with a line saying how many were left out.
pub(crate) fn compact_list(diagnostics: &[CompilerDiagnostic], limit: usize) -> String {
    let mut ordered: Vec<&CompilerDiagnostic> = diagnostics.iter().collect();
    ordered.sort_by_key(|d| !matches!(d.level.as_str(), "error" | "ice"));
    let mut text = String::new();
    for d in ordered.iter().take(limit) {
        text.push_str(&d.compact());
        text.push('\n');
    }
    if ordered.len() > limit {
        text.push_str(&format!(
            "... and {} more diagnostics (all of them are in the structured result)\n",
            ordered.len() - limit
        ));
    }
    text
}

/// Ends a report's text for the model with cargo's own words, when it failed before its
/// diagnostics say why, and the report's notes, one line each.
pub(crate) fn push_cargo_said(text: &mut String, cargo_error: Option<&str>, notes: &[String]) {
    if let Some(error) = cargo_error {
        text.push_str("--- cargo said ---\n");
        text.push_str(error.trim_end());
        text.push('\n');
    }
    for note in notes {
        text.push_str(&format!("note: {note}\n"));
    }
}

/// The `diagnostics` details clients get: every diagnostic whole.
pub(crate) fn details(diagnostics: &[CompilerDiagnostic]) -> toolhost_plugin_api::Details {
    let list: Vec<_> = diagnostics.iter().map(CompilerDiagnostic::detail).collect();
    toolhost_plugin_api::ToolOutput::default()
        .with_diagnostics(list)
        .details
}

/// Counts of errors and warnings.
pub(crate) fn counts(diagnostics: &[CompilerDiagnostic]) -> (usize, usize) {
    let errors = diagnostics
        .iter()
        .filter(|d| matches!(d.level.as_str(), "error" | "ice"))
        .count();
    let warnings = diagnostics.iter().filter(|d| d.level == "warning").count();
    (errors, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message as rustc 1.95 writes it through cargo (trimmed).
    const E0308: &str = r#"{"reason":"compiler-message","package_id":"path+file:///tmp/f#0.1.0","manifest_path":"/tmp/f/Cargo.toml","target":{"kind":["lib"],"crate_types":["lib"],"name":"f","src_path":"/tmp/f/src/lib.rs","edition":"2021","doc":true,"doctest":true,"test":true},"message":{"rendered":"error[E0308]: mismatched types\n","$message_type":"diagnostic","children":[{"children":[],"code":null,"level":"help","message":"try using a conversion method","rendered":null,"spans":[{"byte_end":40,"byte_start":40,"column_end":21,"column_start":21,"expansion":null,"file_name":"src/lib.rs","is_primary":true,"label":null,"line_end":2,"line_start":2,"suggested_replacement":".to_string()","suggestion_applicability":"MaybeIncorrect","text":[{"highlight_end":21,"highlight_start":21,"text":"    let s: String = \"x\";"}]}]}],"code":{"code":"E0308","explanation":"long"},"level":"error","message":"mismatched types","spans":[{"byte_end":40,"byte_start":37,"column_end":21,"column_start":18,"expansion":null,"file_name":"src/lib.rs","is_primary":true,"label":"expected `String`, found `&str`","line_end":2,"line_start":2,"suggested_replacement":null,"suggestion_applicability":null,"text":[{"highlight_end":21,"highlight_start":18,"text":"    let s: String = \"x\";"}]}]}}"#;

    #[test]
    fn a_compiler_message_becomes_a_compact_line_and_a_full_detail() {
        let stdout = format!(
            "{E0308}\n{E0308}\nplain text\n{{\"reason\":\"build-finished\",\"success\":false}}\n"
        );
        let parsed = parse_messages(&stdout);
        assert_eq!(parsed.diagnostics.len(), 1, "duplicates are dropped");
        assert_eq!(parsed.build_success, Some(false));
        assert_eq!(parsed.other_lines, ["plain text"]);
        let d = &parsed.diagnostics[0];
        assert_eq!(
            (d.code.as_deref(), d.file.as_deref(), d.line, d.column),
            (Some("E0308"), Some("src/lib.rs"), Some(2), Some(18))
        );
        assert_eq!(d.target, "f (lib)");
        let compact = d.compact();
        assert!(
            compact.starts_with("error[E0308] src/lib.rs:2:18: mismatched types"),
            "{compact}"
        );
        assert!(compact.contains("| let s: String"), "{compact}");
        assert!(compact.contains("`.to_string()`"), "{compact}");
        let detail = serde_json::to_value(d.detail()).expect("json");
        assert_eq!(
            detail["extra"]["children"][0]["spans"][0]["suggested_replacement"],
            ".to_string()"
        );
        assert_eq!(counts(&parsed.diagnostics), (1, 0));
    }
}
