//! The call policy: the check every call passes before the plugin's code is entered.
//! This host version allows read tools and refuses the rest; the approval issue replaces
//! [`ReadOnlyPolicy`] with per-tool overrides and a person who approves.

use async_trait::async_trait;
use serde_json::Value;

use crate::context::TurnInfo;
use crate::tool::{Risk, ToolSpec};

/// Decides whether a call may run. A refusal is a message for the model.
#[async_trait]
pub trait CallPolicy: Send + Sync {
    /// `Ok` to run the call; `Err(message)` to refuse it without entering the tool.
    async fn check(&self, spec: &ToolSpec, args: &Value, turn: &TurnInfo) -> Result<(), Refusal>;
}

/// Why a call was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The tool is switched off (risk `deny`).
    Denied(String),
    /// The call needs a person's approval, and none was given.
    NotApproved(String),
}

/// Runs read tools; refuses deny tools and every tool that would need a person's approval.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadOnlyPolicy;

#[async_trait]
impl CallPolicy for ReadOnlyPolicy {
    async fn check(&self, spec: &ToolSpec, _args: &Value, _turn: &TurnInfo) -> Result<(), Refusal> {
        match spec.risk {
            Risk::Read => Ok(()),
            Risk::Deny => Err(Refusal::Denied(format!(
                "tool '{}' is denied by policy and never runs",
                spec.name
            ))),
            other => Err(Refusal::NotApproved(format!(
                "tool '{}' has risk '{other}' and needs a person's approval before it runs, \
                 which this host cannot ask for yet; only read tools run",
                spec.name
            ))),
        }
    }
}
