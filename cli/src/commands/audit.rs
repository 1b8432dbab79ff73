//! `toolhost audit [--tool NAME] [--since TIME|DURATION] [--json]` reads the audit log (a
//! table, or one JSON record per line), and `toolhost audit verify [--expect SEQ:SHA256]`
//! checks it (its chain and numbering across every rotated file, its ends against its
//! head, and checkpoints taken from syslog), naming each thing wrong.

use std::path::PathBuf;
use std::process::ExitCode;

use toolhost::LoadedConfig;
use toolhost::audit::{AuditRecord, ChainPoint, read_records, verify};

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
    /// Print each record as the JSON line the log holds (`prev`, the sha256 of the line
    /// before it in the log, included).
    #[arg(long)]
    json: bool,
    /// The log file (default: `[audit] file`, else audit.jsonl in the state directory).
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,
}

/// `toolhost audit ...`.
#[derive(clap::Subcommand)]
enum AuditAction {
    /// Check the log: every line numbered and carrying the sha256 of the line before it,
    /// across every rotated file (none missing), from the oldest line its head says
    /// rotation left to the last line its head records. Exit 1 naming each thing wrong.
    Verify {
        /// The log file (default as for `toolhost audit`).
        #[arg(long, value_name = "PATH")]
        file: Option<PathBuf>,
        /// A checkpoint from syslog or the journal (the `seq=` and `sha256=` of a
        /// toolhost-audit message): the log's line of that seq must have that sha256.
        /// Repeatable.
        #[arg(long, value_name = "SEQ:SHA256")]
        expect: Vec<ChainPoint>,
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

/// `toolhost audit verify`: the report, and exit 1 when anything is wrong.
fn verify_log(path: &std::path::Path, expect: &[ChainPoint]) -> anyhow::Result<ExitCode> {
    let report = verify(path, expect)?;
    if !report.is_ok() {
        outln!(
            "the audit log {} does not hold what was written: {} problem(s)",
            path.display(),
            report.problems.len()
        )?;
        for problem in &report.problems {
            outln!("- {problem}")?;
        }
        for note in &report.notes {
            outln!("note: {note}")?;
        }
        return Ok(ExitCode::FAILURE);
    }
    let seqs = report
        .seqs
        .map(|(first, last)| format!(" (seq {first}-{last})"))
        .unwrap_or_default();
    outln!(
        "ok: {} lines{seqs} in {} file(s), each chained to the one before, none missing; \
         the head agrees with both ends",
        report.lines,
        report.files.len()
    )?;
    for note in &report.notes {
        outln!("note: {note}")?;
    }
    if expect.is_empty() {
        outln!(
            "note: whoever can write these files (this user, root) can rewrite the log and \
             its head together; check a checkpoint kept elsewhere with --expect SEQ:SHA256 \
             ([audit] syslog = true sends them to syslog)"
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The log to read: `explicit`, else the one the host writes
/// ([`LoadedConfig::audit_file`]).
fn log_file(config: &LoadedConfig, explicit: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    explicit.or_else(|| config.audit_file()).ok_or_else(|| {
        anyhow::Error::msg(
            "there is no state directory for the audit log: set state_dir, XDG_STATE_HOME or \
             HOME, or pass --file",
        )
    })
}

/// `toolhost audit verify` of the shared state: each replica's chain.
fn verify_shared_log(state: &std::sync::Arc<toolhost::SharedState>) -> anyhow::Result<ExitCode> {
    let report = toolhost::audit::verify_shared(state)?;
    for chain in &report.replicas {
        if chain.problems.is_empty() {
            outln!(
                "replica {}: {} lines, chained and numbered 1 to {}, ending at its head",
                chain.replica,
                chain.lines,
                chain.head_seq
            )?;
        } else {
            for problem in &chain.problems {
                outln!("replica {}: {problem}", chain.replica)?;
            }
        }
    }
    if report.ok() {
        outln!(
            "ok: {} lines of {} replicas in {}",
            report.lines(),
            report.replicas.len(),
            state.settings().redacted_url()
        )?;
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(1))
    }
}

impl AuditArgs {
    pub(crate) fn run(self, config: &LoadedConfig) -> anyhow::Result<ExitCode> {
        // Many replicas: every replica's chain in the shared state (unless a file is named).
        let shared = match (&self.action, &self.file) {
            (Some(AuditAction::Verify { file: Some(_), .. }), _) | (None, Some(_)) => None,
            _ => super::shared_state(config, false)?,
        };
        if let Some(state) = &shared
            && let Some(AuditAction::Verify { .. }) = self.action
        {
            return verify_shared_log(state);
        }
        if let Some(AuditAction::Verify { file, expect }) = self.action {
            return verify_log(&log_file(config, file)?, &expect);
        }
        let (path, all) = match &shared {
            Some(state) => (
                PathBuf::from(format!(
                    "the shared state database {}",
                    state.settings().redacted_url()
                )),
                toolhost::audit::read_shared(state)?,
            ),
            None => {
                let path = log_file(config, self.file)?;
                let all = read_records(&path)?;
                (path, all)
            }
        };
        let records: Vec<AuditRecord> = all
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
            for r in records {
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
