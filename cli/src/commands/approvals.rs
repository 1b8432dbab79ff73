//! `toolhost approvals list [--profile] [--json] | revoke TOOL|--all [--profile]`: the
//! profile's lasting ("always") approvals. A running host re-reads the file when it
//! changes, so a revocation counts from its next check.

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

impl ApprovalsArgs {
    pub(crate) fn run(self, config: &LoadedConfig) -> anyhow::Result<ExitCode> {
        match self.action {
            ApprovalsAction::List { profile, json } => {
                let profile = resolve_profile(config, profile.as_deref())?;
                let file = ApprovalFile::for_profile(&profile.dirs);
                let approvals = file.list()?;
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
                let file = ApprovalFile::for_profile(&profile.dirs);
                let tool = if all { None } else { tool };
                let removed = file.revoke(tool.as_deref())?;
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
