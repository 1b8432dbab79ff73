//! The call policy: the check every call passes before the plugin's code is entered.
//! `read` runs; `write`, `destructive` and `network` ask a person through an [`Approver`]
//! (an answer can be remembered for the session, tied to the plugin file and the schema,
//! or always, kept by a [`LastingApprovals`] store and tied to those and the risk);
//! `deny` tools never get here (the dispatcher refuses them first, in one place); an
//! unavailable tool is refused with the reason. Operators override
//! declared risks per tool ([`RiskOverride`]).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use serde_json::Value;

use crate::availability::Availability;
use crate::context::{CallContext, TurnIdentity};
use crate::decision::{ApprovalScope, Decision};
use crate::registry::ToolRegistry;
use crate::tool::{Arguments, DynTool, Risk, ToolError, ToolOrigin, ToolOutput, ToolSpec};

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

    /// Like [`CallPolicy::check`], saying how the call was let through (the audit log
    /// records it). The default says "ran without asking" for every call `check` lets
    /// through; a policy that asks overrides it.
    async fn decide(
        &self,
        tool: &dyn DynTool,
        args: &Value,
        turn: &TurnIdentity,
    ) -> Result<Decision, Refusal> {
        self.check(tool, args, turn)
            .await
            .map(|()| Decision::RanWithoutAsking)
    }
}

/// Why a call was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The tool is switched off (risk `deny`).
    Denied(String),
    /// The call needs a person's approval, and none was given.
    NotApproved(String),
    /// The tool's requirements are not met.
    Unavailable(String),
    /// The person asked (`by`) has not answered yet (see [`ApprovalAnswer::Pending`]).
    Pending {
        /// Who was asked.
        by: String,
        /// What the caller reads.
        message: String,
    },
    /// The person asked (`by`) declined; `message` goes to the model.
    Declined {
        /// Who was asked (see [`Approver::who`]).
        by: String,
        /// What the model reads.
        message: String,
    },
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
pub fn denied_message(spec: &ToolSpec) -> String {
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
    /// Whether "for this session" may be offered (the policy remembers such answers).
    pub offer_session: bool,
    /// Whether "always" may be offered (the profile keeps lasting approvals).
    pub offer_always: bool,
}

/// A person's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalAnswer {
    /// Run this call.
    Approve,
    /// Run this call and, for the rest of the session, every call of this tool (until
    /// its plugin file or schema changes).
    ApproveForSession,
    /// Run this call and every later call of this tool by this profile, across restarts
    /// (until its plugin file, schema or risk changes, or the approval is revoked).
    ApproveAlways,
    /// Don't run it yet: the person was asked and has not answered (an MCP client of
    /// 2026-07-28 answers by calling again, `input-required`). The call is neither run
    /// nor refused: statistics count it as pending, the audit log as waiting.
    Pending(String),
    /// Don't run it; the reason goes to the model.
    Decline(String),
}

/// Asks a person to approve a call (a terminal prompt, an MCP elicitation, ...).
#[async_trait]
pub trait Approver: Send + Sync {
    /// The person's answer.
    async fn ask(&self, request: &ApprovalRequest) -> ApprovalAnswer;

    /// Who answers, for the audit log (`terminal`, `mcp client NAME`, ...).
    fn who(&self) -> String {
        "a person".to_owned()
    }
}

/// What a lasting ("always") approval is tied to: the tool, its plugin file, its schema
/// and its risk after overrides. A change to any of them asks again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalKey {
    /// The tool's name.
    pub tool: String,
    /// The plugin's name (`native` for tools built into the host).
    pub plugin: String,
    /// The plugin file's sha256 (empty for native tools).
    pub plugin_sha256: String,
    /// sha256 of the tool's argument schema (its JSON text).
    pub schema_sha256: String,
    /// Its risk after the operator's overrides.
    pub risk: Risk,
}

impl ApprovalKey {
    /// The key of `tool` as it is now.
    pub fn of(tool: &dyn DynTool) -> ApprovalKey {
        use sha2::Digest as _;
        let spec = tool.spec();
        let schema = sha2::Sha256::digest(spec.schema.to_string().as_bytes());
        ApprovalKey {
            tool: spec.name.clone(),
            plugin: tool.origin().plugin_name().to_owned(),
            plugin_sha256: tool.origin().sha256().to_owned(),
            schema_sha256: hex(&schema),
            risk: spec.risk,
        }
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Where "always" approvals are kept, per profile (a file in each profile's state, read
/// again when it changes, so a revocation reaches a running host at its next check).
pub trait LastingApprovals: Send + Sync {
    /// Whether `profile` can keep lasting approvals at all (offer "always").
    fn available(&self, profile: &str) -> bool;
    /// Whether `profile` approved `key` for always.
    fn approved(&self, profile: &str, key: &ApprovalKey) -> bool;
    /// Keeps `key` approved for `profile`, by `by`. An error says why it could not be
    /// kept (the call still runs: the person did approve it).
    fn keep(&self, profile: &str, key: &ApprovalKey, by: &str) -> Result<(), KeepError>;
}

/// Why an "always" approval could not be kept (the call still runs; the next one asks
/// again).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeepError {
    /// The profile has nowhere to keep lasting approvals (no state folder).
    #[error("profile '{profile}' keeps no lasting approvals")]
    NoStore {
        /// The profile.
        profile: String,
    },
    /// The store could not be written; its error names the file.
    #[error(transparent)]
    Store(Box<dyn std::error::Error + Send + Sync>),
}

/// Approves everything (`toolhost call --yes`).
#[derive(Debug, Clone, Copy, Default)]
pub struct AutoApprove;

#[async_trait]
impl Approver for AutoApprove {
    async fn ask(&self, _request: &ApprovalRequest) -> ApprovalAnswer {
        ApprovalAnswer::Approve
    }

    fn who(&self) -> String {
        "--yes".to_owned()
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

    fn who(&self) -> String {
        "nobody".to_owned()
    }
}

/// The approval policy of the seeds: read runs, write/destructive/network ask, deny
/// never runs, unavailable tools are refused.
pub struct ApprovalPolicy {
    approver: Arc<dyn Approver>,
    availability: Arc<Availability>,
    remember: bool,
    remembered: Arc<Mutex<HashSet<String>>>,
    lasting: Option<Arc<dyn LastingApprovals>>,
}

impl ApprovalPolicy {
    /// Whether a call of `spec`'s tool may be put to an approver: every tool but a
    /// `read` one, which runs without asking (a `deny` tool is refused before any policy
    /// sees it). The one statement of that rule: [`CallPolicy::decide`] follows it, and
    /// a frontend asks it (through the door) before it builds an approver.
    pub fn may_ask(spec: &ToolSpec) -> bool {
        spec.risk != Risk::Read
    }

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
            lasting: None,
        }
    }

    /// The same policy keeping "always" answers in `store` (and honouring those kept
    /// there); shares the session approvals.
    pub fn with_lasting(&self, store: Arc<dyn LastingApprovals>) -> Self {
        ApprovalPolicy {
            lasting: Some(store),
            ..self.with_approver(Arc::clone(&self.approver))
        }
    }

    /// The same policy (sharing what it remembered) for a caller with no session to
    /// remember an answer for (a sessionless MCP client): "for this session" is neither
    /// offered nor remembered.
    pub fn without_session_answers(&self) -> Self {
        ApprovalPolicy {
            remember: false,
            ..self.with_approver(Arc::clone(&self.approver))
        }
    }

    /// Whether "approve for this session" answers are remembered.
    pub fn remembers(&self) -> bool {
        self.remember
    }

    /// Whether `profile`'s "always" answers are kept (so "always" can be offered).
    pub fn keeps_lasting(&self, profile: &str) -> bool {
        self.lasting.as_ref().is_some_and(|l| l.available(profile))
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
            lasting: self.lasting.clone(),
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
        self.decide(tool, args, turn).await.map(|_| ())
    }

    async fn decide(
        &self,
        tool: &dyn DynTool,
        args: &Value,
        turn: &TurnIdentity,
    ) -> Result<Decision, Refusal> {
        let spec = tool.spec();
        self.availability
            .check(spec)
            .map_err(|e| Refusal::Unavailable(e.to_string()))?;
        if !Self::may_ask(spec) {
            return Ok(Decision::RanWithoutAsking);
        }
        let remembered = |how| Decision::Approved {
            how,
            by: "remembered".to_owned(),
        };
        let key = Self::key(tool, turn);
        if self
            .remembered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&key)
        {
            return Ok(remembered(ApprovalScope::Session));
        }
        let lasting = self
            .lasting
            .as_ref()
            .filter(|l| l.available(&turn.profile_id));
        let lasting_key = lasting.map(|_| ApprovalKey::of(tool));
        if let (Some(store), Some(k)) = (lasting, &lasting_key)
            && store.approved(&turn.profile_id, k)
        {
            return Ok(remembered(ApprovalScope::Always));
        }
        let request = ApprovalRequest {
            tool: spec.name.clone(),
            risk: spec.risk,
            origin: tool.origin().clone(),
            arguments: args.clone(),
            turn: turn.clone(),
            offer_session: self.remember,
            offer_always: lasting.is_some(),
        };
        let by = self.approver.who();
        match self.approver.ask(&request).await {
            ApprovalAnswer::Approve => Ok(Decision::Approved {
                how: ApprovalScope::Once,
                by,
            }),
            ApprovalAnswer::ApproveForSession if self.remember => {
                self.remembered
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(key);
                Ok(Decision::Approved {
                    how: ApprovalScope::Session,
                    by,
                })
            }
            ApprovalAnswer::ApproveAlways => match (lasting, &lasting_key) {
                (Some(store), Some(k)) => {
                    if let Err(e) = store.keep(&turn.profile_id, k, &by) {
                        tracing::warn!(tool = %spec.name, profile = %turn.profile_id, "could not keep the approval for always (this call runs; the next asks again): {e}");
                    }
                    Ok(Decision::Approved {
                        how: ApprovalScope::Always,
                        by,
                    })
                }
                _ => Ok(Decision::Approved {
                    how: ApprovalScope::Once,
                    by,
                }),
            },
            ApprovalAnswer::ApproveForSession => Ok(Decision::Approved {
                how: ApprovalScope::Once,
                by,
            }),
            ApprovalAnswer::Pending(why) => Err(Refusal::Pending {
                by,
                message: format!(
                    "tool '{}' (risk {}) is waiting for the user's approval: {why}",
                    spec.name, spec.risk
                ),
            }),
            ApprovalAnswer::Decline(reason) => Err(Refusal::Declined {
                by,
                message: format!(
                    "tool '{}' (risk {}) was not approved by the user: {reason}",
                    spec.name, spec.risk
                ),
            }),
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
