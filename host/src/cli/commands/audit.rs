//! `toolhost audit [--tool NAME] [--since TIME|DURATION] [--json]` reads the audit log (a
//! table, or one JSON record per line), and `toolhost audit verify` checks its chain of
//! hashes across the rotated files, naming the first line that breaks it.

use std::path::PathBuf;
use std::process::ExitCode;

use toolhost::LoadedConfig;
use toolhost::audit::{AuditRecord, AuditSettings, read_records, verify};

use crate::output::{outln, print_table};

/// `toolhost audit`.
#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct AuditArgs {
    #[command(subcommand)]
    action: Option<AuditAction>,
    /// Only calls of this tool.
    #[arg(long, value_name = "NAME")]
    tool: Option<String>,
    /// Only calls since this time (RFC 3339, e.g. 2026-12-01T10:00:00Z) or for this long
    /// (e.g. 1h, 30m, 2d).
    #[arg(long, value_name = "TIME|DURATION", value_parser = since)]
    since: Option<jiff::Timestamp>,
    /// Print each record as the JSON line it is (without `prev`).
    #[arg(long)]
    json: bool,
    /// The log file (default: `[audit] file`, else audit.jsonl in the state directory).
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,
}

/// `toolhost audit ...`.
#[derive(clap::Subcommand)]
enum AuditAction {
    /// Check the chain: every line carries the sha256 of the line before it, across the
    /// rotated files. Exit 1 naming the first line that breaks it.
    Verify {
        /// The log file (default as for `toolhost audit`).
        #[arg(long, value_name = "PATH")]
        file: Option<PathBuf>,
    },
}

/// `--since`: a time, or a duration back from now.
fn since(text: &str) -> Result<jiff::Timestamp, String> {
    if let Ok(t) = text.parse::<jiff::Timestamp>() {
        return Ok(t);
    }
    let span = text.parse::<jiff::SignedDuration>().map_err(|_| {
        format!("'{text}' is neither a time (2026-12-01T10:00:00Z) nor a duration (1h, 30m, 2d)")
    })?;
    jiff::Timestamp::now()
        .checked_sub(span)
        .map_err(|e| format!("'{text}' reaches too far back: {e}"))
}

/// The log to read: `explicit`, else the config's, else the default.
fn log_file(config: &LoadedConfig, explicit: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    explicit
        .or_else(|| config.config.audit.file.clone())
        .or_else(AuditSettings::default_file)
        .ok_or_else(|| {
            anyhow::Error::msg(
                "there is no state directory for the audit log: set XDG_STATE_HOME or HOME, \
                 or pass --file",
            )
        })
}

impl AuditArgs {
    pub(crate) fn run(self, config: &LoadedConfig) -> anyhow::Result<ExitCode> {
        if let Some(AuditAction::Verify { file }) = self.action {
            let path = log_file(config, file)?;
            let report = verify(&path)?;
            outln!(
                "ok: {} lines in {} file(s), each chained to the one before",
                report.lines,
                report.files.len()
            )?;
            if report.starts_after_removed_files {
                outln!(
                    "note: the oldest line follows lines in rotated files no longer kept \
                     ([audit] keep)"
                )?;
            }
            return Ok(ExitCode::SUCCESS);
        }
        let path = log_file(config, self.file)?;
        let records: Vec<AuditRecord> = read_records(&path)?
            .into_iter()
            .filter(|r| self.tool.as_ref().is_none_or(|t| *t == r.tool))
            .filter(|r| {
                self.since.is_none_or(|since| {
                    r.time
                        .parse::<jiff::Timestamp>()
                        .is_ok_and(|time| time >= since)
                })
            })
            .collect();
        if self.json {
            for mut r in records {
                r.prev.clear();
                outln!("{}", serde_json::to_string(&r)?)?;
            }
            return Ok(ExitCode::SUCCESS);
        }
        let rows: Vec<[String; 7]> = records
            .iter()
            .map(|r| {
                let who = match (&r.caller.client, &r.caller.token, r.caller.uid) {
                    (Some(c), _, _) => format!("{} {}", c.name, c.version),
                    (None, Some(token), _) => format!("token {token}"),
                    (None, None, Some(uid)) => format!("uid {uid}"),
                    (None, None, None) => String::new(),
                };
                [
                    r.time.clone(),
                    r.profile.clone(),
                    format!("{} {who}", r.frontend).trim_end().to_owned(),
                    r.tool.clone(),
                    r.decision.summary(),
                    r.outcome.clone(),
                    format!("{:.1}", r.duration_ms),
                ]
            })
            .collect();
        if rows.is_empty() {
            outln!("no calls recorded in {}", path.display())?;
            return Ok(ExitCode::SUCCESS);
        }
        print_table(
            &[
                "TIME", "PROFILE", "CALLER", "TOOL", "DECISION", "OUTCOME", "MS",
            ],
            &rows,
        )?;
        Ok(ExitCode::SUCCESS)
    }
}
