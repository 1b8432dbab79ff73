//! How the host decided a call: ran without asking, approved (by whom, for how long),
//! refused, denied, unavailable, invalid arguments, not found. The dispatcher records the
//! [`Decision`] its admission reached on every [`ToolResult`](crate::result::ToolResult), so
//! observers (the audit log) see what the policy decided, not a guess from the outcome.

use serde::{Deserialize, Serialize};

/// How long an approval holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalScope {
    /// This call only.
    Once,
    /// Every call of the tool for the rest of the session (until the plugin file or the
    /// schema changes).
    Session,
    /// Every call of the tool by the profile, kept across restarts (until the plugin
    /// file, the schema or the risk changes, or the approval is revoked).
    Always,
}

impl std::fmt::Display for ApprovalScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ApprovalScope::Once => "once",
            ApprovalScope::Session => "session",
            ApprovalScope::Always => "always",
        })
    }
}

/// What admission decided for one call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Decision {
    /// The call stopped before the policy spoke (its turn was cancelled first, or the
    /// host failed checking it).
    #[default]
    Undecided,
    /// The policy let it run without asking anyone (a read tool).
    RanWithoutAsking,
    /// A person (or a standing answer) approved it.
    Approved {
        /// For how long the approval holds.
        how: ApprovalScope,
        /// Who approved: the approver asked (`terminal`, `mcp client NAME`, `control
        /// client`, `--yes`), or `remembered` for a session or always approval given
        /// earlier.
        by: String,
    },
    /// It needs approval and the person asked has not answered yet (the caller asks
    /// again with the answer): neither run nor refused.
    Pending {
        /// Who was asked.
        by: String,
    },
    /// It needed approval and was not approved.
    Refused {
        /// Who was asked (or `policy` when nobody could be).
        by: String,
    },
    /// The tool is switched off (risk `deny`).
    Denied,
    /// The tool's requirements are not met.
    Unavailable,
    /// The arguments do not match the tool's schema.
    InvalidArguments,
    /// No tool of that name (or no such profile).
    NotFound,
}

impl Decision {
    /// A short word for tables: `ran`, `approved once by terminal`, `refused`, ...
    pub fn summary(&self) -> String {
        match self {
            Decision::Undecided => "undecided".to_owned(),
            Decision::RanWithoutAsking => "ran".to_owned(),
            Decision::Approved { how, by } => format!("approved {how} by {by}"),
            Decision::Pending { by } => format!("waiting for {by}"),
            Decision::Refused { by } => format!("refused by {by}"),
            Decision::Denied => "denied".to_owned(),
            Decision::Unavailable => "unavailable".to_owned(),
            Decision::InvalidArguments => "invalid arguments".to_owned(),
            Decision::NotFound => "not found".to_owned(),
        }
    }
}
