//! The call policy: the check every call passes before the plugin's code is entered.
//! `read` runs; `write`, `destructive` and `network` ask a person through an [`Approver`]
//! (an answer can be remembered for the session, tied to the plugin file and the schema);
//! `deny` tools never get here (the dispatcher refuses them first, in one place); an
//! unavailable tool is refused with the reason. Operators override
//! declared risks per tool ([`RiskOverride`]).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use serde_json::Value;

use crate::calls::availability::Availability;
use crate::calls::context::{CallContext, TurnIdentity};
use crate::calls::registry::ToolRegistry;
use crate::calls::tool::{Arguments, DynTool, Risk, ToolError, ToolOrigin, ToolOutput, ToolSpec};

/// Decides whether a call may run. A refusal is a message for the model.
#[async_trait]
pub trait CallPolicy: Send + Sync {
    /// `Ok` to run the call; `Err` to refuse it without entering the tool.
    async fn check(
        &self,
        tool: &dyn DynTool,
        args: &Value,
        turn: &TurnIdentity,
    ) -> Result<(), Refusal>;
}

/// Why a call was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The tool is switched off (risk `deny`).
    Denied(String),
    /// The call needs a person's approval, and none was given.
    NotApproved(String),
    /// The tool's requirements are not met.
    Unavailable(String),
}

/// Runs read tools; refuses deny tools and every tool that would need a person's approval.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadOnlyPolicy;

#[async_trait]
impl CallPolicy for ReadOnlyPolicy {
    async fn check(
        &self,
        tool: &dyn DynTool,
        _args: &Value,
        _turn: &TurnIdentity,
    ) -> Result<(), Refusal> {
        let spec = tool.spec();
        match spec.risk {
            Risk::Read => Ok(()),
            other => Err(Refusal::NotApproved(format!(
                "tool '{}' has risk '{other}' and needs a person's approval before it runs, \
                 which this host cannot ask for; only read tools run",
                spec.name
            ))),
        }
    }
}

/// What the model reads when it calls a tool switched off by policy.
pub(crate) fn denied_message(spec: &ToolSpec) -> String {
    format!("tool '{}' is denied by policy and never runs", spec.name)
}

/// What a person is asked to approve.
#[derive(Debug, Clone)]
pub struct ApprovalRequest {
    /// The tool.
    pub tool: String,
    /// Its risk (after operator overrides).
    pub risk: Risk,
    /// Where it comes from.
    pub origin: ToolOrigin,
    /// The call's arguments.
    pub arguments: Value,
    /// The turn asking.
    pub turn: TurnIdentity,
}

/// A person's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalAnswer {
    /// Run this call.
    Approve,
    /// Run this call and, for the rest of the session, every call of this tool (until
    /// its plugin file or schema changes).
    ApproveForSession,
    /// Don't run it; the reason goes to the model.
    Decline(String),
}

/// Asks a person to approve a call (a terminal prompt, an MCP elicitation, ...).
#[async_trait]
pub trait Approver: Send + Sync {
    /// The person's answer.
    async fn ask(&self, request: &ApprovalRequest) -> ApprovalAnswer;
}

/// Approves everything (`toolhost call --yes`).
#[derive(Debug, Clone, Copy, Default)]
pub struct AutoApprove;

#[async_trait]
impl Approver for AutoApprove {
    async fn ask(&self, _request: &ApprovalRequest) -> ApprovalAnswer {
        ApprovalAnswer::Approve
    }
}

/// Nobody to ask: every call that needs approval is declined with `hint`.
#[derive(Debug, Clone, Default)]
pub struct NobodyToAsk {
    /// How the operator can allow such calls (e.g. "pass --yes").
    pub hint: String,
}

#[async_trait]
impl Approver for NobodyToAsk {
    async fn ask(&self, _request: &ApprovalRequest) -> ApprovalAnswer {
        ApprovalAnswer::Decline(format!("no person could be asked; {}", self.hint))
    }
}

/// The approval policy of the seeds: read runs, write/destructive/network ask, deny
/// never runs, unavailable tools are refused.
pub struct ApprovalPolicy {
    approver: Arc<dyn Approver>,
    availability: Arc<Availability>,
    remember: bool,
    remembered: Arc<Mutex<HashSet<String>>>,
}

impl ApprovalPolicy {
    /// A policy asking `approver`; `remember` allows "approve for this session".
    pub fn new(
        approver: Arc<dyn Approver>,
        availability: Arc<Availability>,
        remember: bool,
    ) -> Self {
        ApprovalPolicy {
            approver,
            availability,
            remember,
            remembered: Arc::new(Mutex::new(HashSet::new())),
        }
    }

    /// Whether "approve for this session" answers are remembered.
    pub fn remembers(&self) -> bool {
        self.remember
    }

    /// Forgets what was approved for a session that ended.
    pub fn forget_session(&self, profile_id: &str, session_id: &str) {
        let prefix = format!("{profile_id}\u{0}{session_id}\u{0}");
        self.remembered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|key| !key.starts_with(&prefix));
    }

    /// The same policy asking another approver (e.g. the client of one MCP call); the
    /// two share what was approved for the session.
    pub fn with_approver(&self, approver: Arc<dyn Approver>) -> Self {
        ApprovalPolicy {
            approver,
            availability: Arc::clone(&self.availability),
            remember: self.remember,
            remembered: Arc::clone(&self.remembered),
        }
    }

    /// The session's approvals are tied to the tool, the plugin file's hash and the
    /// schema: an updated plugin asks again.
    fn key(tool: &dyn DynTool, turn: &TurnIdentity) -> String {
        let spec = tool.spec();
        format!(
            "{}\u{0}{}\u{0}{}\u{0}{}\u{0}{}",
            turn.profile_id,
            turn.session_id,
            spec.name,
            tool.origin().sha256(),
            spec.schema
        )
    }
}

#[async_trait]
impl CallPolicy for ApprovalPolicy {
    async fn check(
        &self,
        tool: &dyn DynTool,
        args: &Value,
        turn: &TurnIdentity,
    ) -> Result<(), Refusal> {
        let spec = tool.spec();
        self.availability
            .check(spec)
            .map_err(|e| Refusal::Unavailable(e.to_string()))?;
        if spec.risk == Risk::Read {
            return Ok(());
        }
        let key = Self::key(tool, turn);
        if self
            .remembered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&key)
        {
            return Ok(());
        }
        let request = ApprovalRequest {
            tool: spec.name.clone(),
            risk: spec.risk,
            origin: tool.origin().clone(),
            arguments: args.clone(),
            turn: turn.clone(),
        };
        match self.approver.ask(&request).await {
            ApprovalAnswer::Approve => Ok(()),
            ApprovalAnswer::ApproveForSession => {
                if self.remember {
                    self.remembered
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(key);
                }
                Ok(())
            }
            ApprovalAnswer::Decline(reason) => Err(Refusal::NotApproved(format!(
                "tool '{}' (risk {}) was not approved by the user: {reason}",
                spec.name, spec.risk
            ))),
        }
    }
}

/// An operator's override of a tool's declared risk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RiskOverride {
    /// The risk to use instead.
    pub risk: Risk,
    /// Lowering a tool below its declared risk must be said explicitly.
    pub allow_lower: bool,
}

/// What applying overrides did: the registry, lines for the log, and problems.
pub struct OverrideOutcome {
    /// The registry with overridden risks.
    pub registry: ToolRegistry,
    /// One line per lowered tool, for the start-up log.
    pub lowered: Vec<String>,
    /// Overrides that were not applied: a lowering without `allow_lower`.
    pub refused: Vec<String>,
    /// Overrides naming a tool the registry does not have (a typo, or a plugin not loaded).
    pub unmatched: Vec<String>,
}

/// Applies `overrides` to `registry`: raising always, lowering only with `allow_lower`.
/// Overrides for tools the registry does not have are reported in `unmatched`.
pub fn apply_risk_overrides(
    registry: &ToolRegistry,
    overrides: &BTreeMap<String, RiskOverride>,
) -> OverrideOutcome {
    let mut lowered = Vec::new();
    let mut refused = Vec::new();
    // Only the risk changes, so every tool keeps its compiled argument validator.
    let overridden = registry.map_tools(|tool| {
        let tool = Arc::clone(tool);
        let declared = tool.spec().risk;
        match overrides.get(&tool.spec().name) {
            Some(o) if o.risk == declared => tool,
            Some(o) if o.risk.severity() < declared.severity() && !o.allow_lower => {
                refused.push(format!(
                    "the config lowers tool '{}' from {declared} to {}: add `allow_lower = true` \
                     to [tools.{}] if that is meant; the tool keeps risk {declared}",
                    tool.spec().name,
                    o.risk,
                    tool.spec().name
                ));
                tool
            }
            Some(o) => {
                if o.risk.severity() < declared.severity() {
                    lowered.push(format!(
                        "tool '{}' is lowered by the config from {declared} to {} (allow_lower)",
                        tool.spec().name,
                        o.risk
                    ));
                }
                let mut spec = tool.spec().clone();
                spec.risk = o.risk;
                Arc::new(Overridden { inner: tool, spec })
            }
            None => tool,
        }
    });
    OverrideOutcome {
        registry: overridden,
        lowered,
        refused,
        unmatched: overrides
            .keys()
            .filter(|name| registry.get(name).is_none())
            .cloned()
            .collect(),
    }
}

/// A tool with an operator-overridden spec.
struct Overridden {
    inner: Arc<dyn DynTool>,
    spec: ToolSpec,
}

#[async_trait]
impl DynTool for Overridden {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn origin(&self) -> &ToolOrigin {
        self.inner.origin()
    }
    async fn call(&self, ctx: &CallContext, args: Arguments) -> Result<ToolOutput, ToolError> {
        self.inner.call(ctx, args).await
    }
}
