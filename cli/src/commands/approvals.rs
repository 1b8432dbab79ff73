//! `toolhost approvals list [--profile] [--json] | revoke TOOL|--all [--profile]`: the
//! profile's lasting ("always") approvals. A running host re-reads the file when it
//! changes, so a revocation counts from its next check. `approvals pending` and
//! `approvals answer ID yes|session|always|no` list and answer, on the control socket, the
//! questions of MCP clients that cannot ask their user (`[mcp] without_elicitation =
//! "terminal"`).

use std::process::ExitCode;

use toolhost::{ApprovalFile, LoadedConfig};

use super::resolve_profile;
use crate::output::{outln, print_table};

/// `toolhost approvals`.
#[derive(clap::Args)]
pub(crate) struct ApprovalsArgs {
    #[command(subcommand)]
    action: ApprovalsAction,
}

/// `toolhost approvals ...`.
#[derive(clap::Subcommand)]
enum ApprovalsAction {
    /// List the profile's lasting approvals: tool, plugin, risk, when and by whom.
    List {
        /// The profile (default: the config's default profile).
        #[arg(long, value_name = "NAME")]
        profile: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the calls waiting for an answer at a terminal: calls from MCP clients that
    /// cannot ask their user, with `[mcp] without_elicitation = "terminal"` (on the running
    /// host's control socket).
    Pending {
        /// The running host's control socket (default as for `serve`).
        #[arg(long, value_name = "PATH")]
        control: Option<std::path::PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// When no call waits yet, wait up to SECS seconds for one (and for a host that is
        /// starting) before printing.
        #[arg(long, value_name = "SECS", default_value_t = 0)]
        wait: u64,
    },
    /// Answer a waiting call by its id (as `approvals pending` shows it): yes runs it,
    /// session runs it and the tool's later calls in that client's session, always keeps
    /// the approval, no refuses it.
    Answer {
        /// The question's id.
        id: u64,
        /// The answer.
        #[arg(value_enum)]
        answer: AnswerArg,
        /// With `no`: the reason the model is told.
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
        /// The running host's control socket (default as for `serve`).
        #[arg(long, value_name = "PATH")]
        control: Option<std::path::PathBuf>,
    },
    /// Revoke a tool's lasting approval (or every one with --all): its next call asks.
    Revoke {
        /// The tool.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        tool: Option<String>,
        /// Every lasting approval of the profile.
        #[arg(long)]
        all: bool,
        /// The profile (default: the config's default profile).
        #[arg(long, value_name = "NAME")]
        profile: Option<String>,
    },
}

/// An answer to a waiting call.
#[derive(Clone, Copy, clap::ValueEnum)]
enum AnswerArg {
    /// Run this call.
    Yes,
    /// Run it and the tool's later calls in the client's session.
    Session,
    /// Run it and keep the approval (where the question offers it).
    Always,
    /// Refuse it.
    No,
}

/// Lists the questions waiting on the control socket `control`.
fn pending(
    config: &LoadedConfig,
    control: Option<std::path::PathBuf>,
    json: bool,
    wait: std::time::Duration,
) -> anyhow::Result<ExitCode> {
    let socket = super::control_socket(config, control);
    let deadline = std::time::Instant::now() + wait;
    let (runtime, mut client) = super::control::connect_waiting(&socket, ANSWER_WITHIN, wait)?;
    let mut waiting = runtime.block_on(client.approvals_pending())?;
    // Asked again on the same connection until a question comes or the wait is over.
    while waiting.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
        waiting = runtime.block_on(client.approvals_pending())?;
    }
    if json {
        outln!("{}", serde_json::to_string_pretty(&waiting)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if waiting.is_empty() {
        outln!("no call waits for an answer")?;
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<[String; 6]> = waiting
        .iter()
        .map(|q| {
            [
                q.id.to_string(),
                q.tool.clone(),
                q.risk.to_string(),
                q.asked_by.clone(),
                format!("{} s", q.expires_in_secs),
                crate::output::summary(&q.arguments.to_string(), 60),
            ]
        })
        .collect();
    print_table(
        &["ID", "TOOL", "RISK", "ASKED BY", "EXPIRES", "ARGUMENTS"],
        &rows,
    )?;
    outln!("answer with `toolhost approvals answer ID yes` (or session, always, no)")?;
    Ok(ExitCode::SUCCESS)
}

/// How long a request to the host may take.
const ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

impl ApprovalsArgs {
    pub(crate) fn run(self, config: &LoadedConfig) -> anyhow::Result<ExitCode> {
        match self.action {
            ApprovalsAction::Pending {
                control,
                json,
                wait,
            } => {
                return pending(config, control, json, std::time::Duration::from_secs(wait));
            }
            ApprovalsAction::Answer {
                id,
                answer,
                reason,
                control,
            } => {
                let reply = match answer {
                    AnswerArg::Yes => toolhost::ApprovalReply::Once,
                    AnswerArg::Session => toolhost::ApprovalReply::Session,
                    AnswerArg::Always => toolhost::ApprovalReply::Always,
                    AnswerArg::No => toolhost::ApprovalReply::No {
                        reason: reason
                            .unwrap_or_else(|| "the operator declined it at a terminal".to_owned()),
                    },
                };
                let socket = super::control_socket(config, control);
                let (runtime, mut client) = super::control::connect(&socket, ANSWER_WITHIN)?;
                runtime.block_on(client.approvals_answer(id, reply))?;
                outln!("answered {id}: the call goes on")?;
            }
            ApprovalsAction::List { profile, json } => {
                let profile = resolve_profile(config, profile.as_deref())?;
                let approvals = match super::shared_state(config, false)? {
                    Some(state) => toolhost::state::approvals::list(&state, &profile.name)?,
                    None => ApprovalFile::for_profile(&profile.dirs).list()?,
                };
                if json {
                    outln!("{}", serde_json::to_string_pretty(&approvals)?)?;
                    return Ok(ExitCode::SUCCESS);
                }
                if approvals.is_empty() {
                    outln!("profile '{}' has no lasting approvals", profile.name)?;
                    return Ok(ExitCode::SUCCESS);
                }
                let rows: Vec<[String; 5]> = approvals
                    .iter()
                    .map(|a| {
                        [
                            a.tool.clone(),
                            format!(
                                "{} ({})",
                                a.plugin,
                                a.plugin_sha256.get(..12).unwrap_or(&a.plugin_sha256)
                            ),
                            a.risk.to_string(),
                            a.approved_at.clone(),
                            a.approved_by.clone(),
                        ]
                    })
                    .collect();
                print_table(&["TOOL", "PLUGIN", "RISK", "APPROVED", "BY"], &rows)?;
            }
            ApprovalsAction::Revoke { tool, all, profile } => {
                let profile = resolve_profile(config, profile.as_deref())?;
                let tool = if all { None } else { tool };
                let removed = match super::shared_state(config, false)? {
                    Some(state) => usize::try_from(toolhost::state::approvals::revoke(
                        &state,
                        &profile.name,
                        tool.as_deref(),
                    )?)
                    .unwrap_or(usize::MAX),
                    None => ApprovalFile::for_profile(&profile.dirs).revoke(tool.as_deref())?,
                };
                match (tool, removed) {
                    (Some(t), 0) => {
                        return Err(anyhow::anyhow!(
                            "profile '{}' has no lasting approval of tool '{t}' (see \
                             `toolhost approvals list`)",
                            profile.name
                        ));
                    }
                    (Some(t), _) => outln!(
                        "revoked the lasting approval of tool '{t}' for profile '{}'",
                        profile.name
                    )?,
                    (None, n) => outln!(
                        "revoked {n} lasting approval(s) for profile '{}'",
                        profile.name
                    )?,
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}
