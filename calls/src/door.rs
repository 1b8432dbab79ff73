//! The call door: the one way every call enters, whichever frontend it came from (CLI,
//! control socket, MCP, the agent and its child turns). A frontend describes a call in a
//! [`CallRequest`] (who is calling, as which profile, who can be asked, the channel back,
//! a timeout cap) and renders the [`ToolResult`] it gets back; the door resolves the
//! profile's tools, the approval policy with that approver, the dispatcher and the cancel
//! token, and every [`CallObserver`] registered on it sees every call.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::availability::Availability;
use crate::context::{
    CallContext, Caller, CallerChannel, ChildTurnService, HostRequests, TurnIdentity, TurnServices,
};
use crate::dispatcher::{CallObserver, DispatchConfig, Limits, ObservedCall, Plan, ToolCall};
use crate::outputs::{Budgeting, OutputSettings, OutputStore, Owner};
use crate::policy::{ApprovalPolicy, Approver, CallPolicy, LastingApprovals};
use crate::registry::ToolRegistry;
use crate::result::ToolResult;
use crate::tool::DynTool;
use crate::tool::ToolSpec;

/// A profile's part in a call: its name, the tools it sees now, the host requests its
/// calls can make (its state folder), and the output budget with the store where cut
/// outputs are kept.
#[derive(Clone)]
pub struct ProfileScope {
    /// The profile's name.
    pub name: String,
    /// The tools it sees now.
    pub tools: Arc<ToolRegistry>,
    /// Host requests its calls can make, if it has any.
    pub requests: Option<Arc<dyn HostRequests>>,
    /// Where cut outputs are kept (`None`: results are still cut, and the marker says the
    /// full output was not kept).
    pub outputs: Option<Arc<OutputStore>>,
    /// The output budget and its limits.
    pub output: OutputSettings,
}

impl ProfileScope {
    /// A scope with the default budget and no output store.
    pub fn new(
        name: impl Into<String>,
        tools: Arc<ToolRegistry>,
        requests: Option<Arc<dyn HostRequests>>,
    ) -> ProfileScope {
        ProfileScope {
            name: name.into(),
            tools,
            requests,
            outputs: None,
            output: OutputSettings::default(),
        }
    }

    /// The same scope keeping cut outputs in `store` under `settings`; its tools gain
    /// `read_output` unless `settings` leave it out (a plugin tool of that name is then
    /// left out, with a warning).
    pub fn with_outputs(mut self, store: Arc<OutputStore>, settings: OutputSettings) -> Self {
        if settings.read_output {
            self.tools = Arc::new(crate::read_output::with_read_output(&self.tools));
        }
        self.outputs = Some(store);
        self.output = settings;
        self
    }
}

/// A call asked for a profile the door does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("this host has no profile '{name}'; its profiles are: {known}")]
pub struct UnknownProfile {
    /// The profile asked for.
    pub name: String,
    /// The profiles there are, comma-separated.
    pub known: String,
}

/// Where the door finds the profiles calls run as (a running host's catalog and config,
/// or the fixed registry of a one-shot command).
pub trait Profiles: Send + Sync {
    /// The profile a call runs as: `requested`, else the default. An error names the
    /// profiles there are.
    fn scope(&self, requested: Option<&str>) -> Result<ProfileScope, UnknownProfile>;
}

/// One profile with a fixed set of tools (`toolhost call`, `run`, `chat`, library users).
pub struct FixedProfile(pub ProfileScope);

impl Profiles for FixedProfile {
    fn scope(&self, requested: Option<&str>) -> Result<ProfileScope, UnknownProfile> {
        match requested {
            Some(name) if name != self.0.name => Err(UnknownProfile {
                name: name.to_owned(),
                known: self.0.name.clone(),
            }),
            _ => Ok(self.0.clone()),
        }
    }
}

/// What a door is built from: plain settings (the config turns into these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallSettings {
    /// Call time limits.
    pub dispatch: DispatchConfig,
    /// How long availability answers are cached.
    pub availability_ttl: Duration,
    /// Whether "approve for this session" answers are remembered.
    pub remember_approvals: bool,
}

impl Default for CallSettings {
    fn default() -> Self {
        CallSettings {
            dispatch: DispatchConfig::default(),
            availability_ttl: crate::availability::DEFAULT_AVAILABILITY_TTL,
            remember_approvals: true,
        }
    }
}

/// One call, or one model response's batch of calls, as a frontend describes it.
pub struct CallRequest {
    /// Who is calling.
    pub caller: Arc<Caller>,
    /// The profile to run as (`None`: the default).
    pub profile: Option<String>,
    /// Session and model the calls work for (the profile's name is filled in by the door).
    pub session: String,
    /// The model that asked for the calls (`none` for a person's call).
    pub model: String,
    /// Who is asked to approve calls that need it (`None`: the door's own approver, which
    /// for a running host is nobody).
    pub approver: Option<Arc<dyn Approver>>,
    /// The channel back to the caller (progress, log lines, questions, sampling).
    pub channel: Option<Arc<dyn CallerChannel>>,
    /// A limit shorter than the door's own (interactive calls too); a longer one is
    /// ignored.
    pub timeout_cap: Option<Duration>,
    /// Cancels the calls (a client's cancel, Ctrl-C, a stopped turn). The door's
    /// [`CallDoor::request`] makes one the host's shutdown cancels.
    pub cancel: CancellationToken,
    /// Child turns, for tools such as `delegate_task` (the agent's).
    pub child_turns: Option<Arc<dyn ChildTurnService>>,
    /// Host requests answered by the caller instead of the profile (the agent answers
    /// session searches too).
    pub requests: Option<Arc<dyn HostRequests>>,
    /// Tools left out of the profile's for these calls (a child turn's exclusions).
    pub without: Arc<[String]>,
    /// Whether the caller has a session a "for this session" answer can be remembered
    /// for (`false`: a sessionless client; the choice is then not offered). Default true.
    pub session_answers: bool,
    /// The most characters the caller takes in one result (an MCP client's
    /// `_meta["anthropic/maxResultSizeChars"]`), held within the profile's ceiling;
    /// `None`: the profile's budget.
    pub max_chars: Option<usize>,
    /// The tools the calls run against, when the caller already resolved them (only
    /// [`CallDoor::pin_tools`] sets it, so the request's exclusions always apply): the
    /// same snapshot it looked a tool up in, even if the profile's tools changed since.
    /// `None`: the profile's tools now.
    pub(crate) tools: Option<Arc<ToolRegistry>>,
}

/// The door every call enters by. Cheap to clone.
#[derive(Clone)]
pub struct CallDoor {
    profiles: Arc<dyn Profiles>,
    availability: Arc<Availability>,
    /// The one policy: every request's plan is this one, or derived from it (another
    /// approver, no session answers).
    policy: Arc<ApprovalPolicy>,
    /// Call time limits.
    limits: Limits,
    /// See every call after its output budget (statistics, the audit log).
    observers: Arc<[Arc<dyn CallObserver>]>,
    /// Whether any observer wants the calls' arguments.
    keep_arguments: bool,
    /// Cancelled when the host shuts down (after its grace period).
    shutdown: CancellationToken,
}

impl CallDoor {
    /// A door over `profiles`, asking `approver` when a request names none.
    pub fn new(
        settings: &CallSettings,
        profiles: Arc<dyn Profiles>,
        approver: Arc<dyn Approver>,
    ) -> CallDoor {
        let availability = Arc::new(Availability::new(settings.availability_ttl));
        let policy = Arc::new(ApprovalPolicy::new(
            approver,
            Arc::clone(&availability),
            settings.remember_approvals,
        ));
        CallDoor {
            limits: Limits::new(settings.dispatch),
            profiles,
            availability,
            policy,
            observers: Arc::from([]),
            keep_arguments: false,
            shutdown: CancellationToken::new(),
        }
    }

    /// The same door, with `observer` seeing every call from now on (after its output
    /// budget, through [`CallObserver::observe`]).
    pub fn with_observer(mut self, observer: Arc<dyn CallObserver>) -> CallDoor {
        self.keep_arguments |= observer.wants_arguments();
        let mut all = self.observers.to_vec();
        all.push(observer);
        self.observers = Arc::from(all);
        self
    }

    /// The same door, keeping "always" approvals in `store` and honouring those kept
    /// there (the answer "always" is offered only for profiles the store keeps).
    pub fn with_lasting_approvals(mut self, store: Arc<dyn LastingApprovals>) -> CallDoor {
        self.policy = Arc::new(self.policy.with_lasting(store));
        self
    }

    /// The same door, with these tools' calls limited to their own durations (a tool that
    /// waits on others, such as delegate_task, whose limit is sized to its child turns).
    pub fn with_tool_timeouts(
        mut self,
        timeouts: impl IntoIterator<Item = (String, Duration)>,
    ) -> CallDoor {
        self.limits = self.limits.with_tool_timeouts(timeouts);
        self
    }

    /// A request from `caller` with everything else at its default: the default profile,
    /// the door's approver, no channel, and a cancel token the host's shutdown fires.
    pub fn request(&self, caller: impl Into<Arc<Caller>>) -> CallRequest {
        CallRequest {
            caller: caller.into(),
            profile: None,
            session: String::new(),
            model: "none".to_owned(),
            approver: None,
            channel: None,
            timeout_cap: None,
            cancel: self.shutdown.child_token(),
            child_turns: None,
            requests: None,
            without: Arc::from([]),
            session_answers: true,
            max_chars: None,
            tools: None,
        }
    }

    /// The profile a request would run as, with the tools it sees now.
    pub fn scope(&self, profile: Option<&str>) -> Result<ProfileScope, UnknownProfile> {
        self.profiles.scope(profile)
    }

    /// The tools a model of `scope` should see: those whose requirements are met.
    pub fn visible<'a>(&self, tools: &'a ToolRegistry) -> Vec<&'a ToolSpec> {
        self.availability.visible_specs(tools)
    }

    /// The availability checks (cached).
    pub fn availability(&self) -> &Availability {
        &self.availability
    }

    /// Call time limits.
    pub fn limits(&self) -> DispatchConfig {
        self.limits.config
    }

    /// Whether "approve for this session" answers are remembered.
    pub fn remembers_approvals(&self) -> bool {
        self.policy.remembers()
    }

    /// Whether `profile`'s "always" approvals are kept (see
    /// [`CallDoor::with_lasting_approvals`]).
    pub fn keeps_lasting_approvals(&self, profile: &str) -> bool {
        self.policy.keeps_lasting(profile)
    }

    /// Forgets what was approved for a session that ended.
    pub fn forget_session(&self, profile: &str, session: &str) {
        self.policy.forget_session(profile, session);
    }

    /// Cancels every call whose request came from [`CallDoor::request`] (at the end of a
    /// host's shutdown).
    pub fn cancel_all(&self) {
        self.shutdown.cancel();
    }

    /// Runs one call. Its result is held to the output budget (see
    /// [`OutputSettings`]).
    pub async fn call(&self, request: &CallRequest, call: ToolCall) -> ToolResult {
        // `dispatch` of one, without its vectors (the one-call path is the hot one).
        match self.prepare(request) {
            Ok(p) => {
                let seen = self.before(&p.tools, &call);
                let result = p.plan.call(&p.tools, &p.ctx, call).await;
                self.finish(&p.tools, &p.ctx, &p.budgeting, result, seen)
                    .await
            }
            Err(e) => self.refused(request, call, &e).await,
        }
    }

    /// Runs the calls of one model response; one result per call, in order (see
    /// [`Plan::dispatch`](crate::dispatcher::Plan::dispatch)), each held to the output budget.
    pub async fn dispatch(&self, request: &CallRequest, calls: Vec<ToolCall>) -> Vec<ToolResult> {
        match self.prepare(request) {
            Ok(p) => {
                let seen: Vec<Seen> = calls.iter().map(|c| self.before(&p.tools, c)).collect();
                let results = p.plan.dispatch(&p.tools, &p.ctx, calls).await;
                let mut out = Vec::with_capacity(results.len());
                for (result, seen) in results.into_iter().zip(seen) {
                    out.push(
                        self.finish(&p.tools, &p.ctx, &p.budgeting, result, seen)
                            .await,
                    );
                }
                out
            }
            Err(e) => {
                let mut out = Vec::with_capacity(calls.len());
                for c in calls {
                    out.push(self.refused(request, c, &e).await);
                }
                out
            }
        }
    }

    /// An ended call's way out, the same for every call: held to the output budget, then
    /// shown to every observer as the caller gets it.
    async fn finish(
        &self,
        tools: &ToolRegistry,
        ctx: &CallContext,
        budgeting: &Budgeting,
        result: ToolResult,
        seen: Seen,
    ) -> ToolResult {
        // A tool that declares an output schema owes its clients the value whole (MCP
        // clients refuse a result without it): only its text is held to the budget.
        let schema = tools
            .get(&result.name)
            .is_some_and(|e| e.tool().spec().output_schema.is_some());
        let result = budgeting.apply(result, schema).await;
        self.observe(ctx, &result, seen).await;
        result
    }

    /// What the observers will need of `call` once it ended: its tool and, if one of
    /// them wants them, a copy of its arguments (they go to the plugin).
    fn before(&self, tools: &ToolRegistry, call: &ToolCall) -> Seen {
        if self.observers.is_empty() {
            return Seen::default();
        }
        Seen {
            tool: tools.get(&call.name).map(|e| Arc::clone(e.tool())),
            arguments: self.keep_arguments.then(|| call.arguments.value().clone()),
        }
    }

    /// Shows an ended call to every observer, and waits for those that ask it to.
    async fn observe(&self, ctx: &CallContext, result: &ToolResult, seen: Seen) {
        let call = ObservedCall {
            result,
            tool: seen.tool.as_deref(),
            arguments: seen.arguments.as_ref(),
        };
        let mut waits = Vec::new();
        for o in self.observers.iter() {
            if let Some(wait) = o.observe(ctx, &call) {
                waits.push(wait);
            }
        }
        for wait in waits {
            wait.await;
        }
    }

    /// The tools a request's calls may use: its pinned tools, else its profile's now,
    /// without the request's exclusions.
    pub fn tools(&self, request: &CallRequest) -> Result<Arc<ToolRegistry>, UnknownProfile> {
        if let Some(tools) = &request.tools {
            return Ok(Arc::clone(tools));
        }
        let scope = self.profiles.scope(request.profile.as_deref())?;
        Ok(without(&scope, request))
    }

    /// Resolves the tools `request`'s calls may use and pins them on it: what the caller
    /// looks a tool up in is what its calls run against (a reload in between does not
    /// make the two differ).
    pub fn pin_tools(
        &self,
        request: &mut CallRequest,
    ) -> Result<Arc<ToolRegistry>, UnknownProfile> {
        let tools = self.tools(request)?;
        request.tools = Some(Arc::clone(&tools));
        Ok(tools)
    }

    /// Whether a call of `spec`'s tool may be put to an approver (every tool but a
    /// `read` one): a frontend whose approver costs something to build asks first.
    pub fn may_ask(&self, spec: &ToolSpec) -> bool {
        ApprovalPolicy::may_ask(spec)
    }

    /// The result of a call whose request named a profile the door does not have, seen
    /// by the observers like every other call.
    async fn refused(
        &self,
        request: &CallRequest,
        call: ToolCall,
        e: &UnknownProfile,
    ) -> ToolResult {
        let arguments = self.keep_arguments.then(|| call.arguments.value().clone());
        let result = ToolResult::refused(
            call.id,
            call.name,
            e.to_string(),
            crate::result::CallErrorKind::ToolNotFound,
        );
        let ctx = self.context(request, e.name.clone(), None, None);
        let seen = Seen {
            tool: None,
            arguments,
        };
        self.observe(&ctx, &result, seen).await;
        result
    }

    /// The context a request's calls run in, as profile `profile`.
    fn context(
        &self,
        request: &CallRequest,
        profile: String,
        requests: Option<Arc<dyn HostRequests>>,
        budgeting: Option<&Budgeting>,
    ) -> CallContext {
        CallContext {
            turn: Arc::new(TurnIdentity {
                profile_id: profile,
                session_id: request.session.clone(),
                model: request.model.clone(),
            }),
            cancel: request.cancel.clone(),
            caller: Arc::clone(&request.caller),
            services: TurnServices {
                child_turns: request.child_turns.clone(),
                caller: request.channel.clone(),
                requests: request.requests.clone().or(requests),
                outputs: budgeting.and_then(|b| b.store.clone()),
                budget: budgeting.map(|b| b.budget).unwrap_or_default(),
            },
        }
    }

    /// The one plan of a request: its policy (the door's, under the request's approver
    /// and without session answers when it has no session), its limits (held to its
    /// cap), the tools, the calls' context and the output budget.
    fn prepare(&self, request: &CallRequest) -> Result<Prepared, UnknownProfile> {
        let scope = self.profiles.scope(request.profile.as_deref())?;
        let tools = match &request.tools {
            Some(pinned) => Arc::clone(pinned),
            None => without(&scope, request),
        };
        let mut policy = request
            .approver
            .as_ref()
            .map(|approver| self.policy.with_approver(Arc::clone(approver)));
        if !request.session_answers {
            let base = policy.as_ref().unwrap_or(&self.policy);
            policy = Some(base.without_session_answers());
        }
        let policy: Arc<dyn CallPolicy> = match policy {
            Some(derived) => Arc::new(derived),
            None => Arc::clone(&self.policy) as _,
        };
        let limits = request
            .timeout_cap
            .and_then(|cap| self.limits.capped(cap))
            .unwrap_or_else(|| self.limits.clone());
        let budgeting = Budgeting {
            budget: scope.output.budget_for(request.max_chars),
            store: scope.outputs.clone(),
            owner: Owner {
                profile: scope.name.clone(),
                token: request.caller.token.clone(),
            },
        };
        let ctx = self.context(request, scope.name, scope.requests, Some(&budgeting));
        Ok(Prepared {
            plan: Plan { policy, limits },
            tools,
            ctx,
            budgeting,
        })
    }
}

/// What a request runs with, made once by [`CallDoor::prepare`].
struct Prepared {
    plan: Plan,
    tools: Arc<ToolRegistry>,
    ctx: CallContext,
    budgeting: Budgeting,
}

/// What the door keeps of a call for its observers.
#[derive(Default)]
struct Seen {
    tool: Option<Arc<dyn DynTool>>,
    arguments: Option<serde_json::Value>,
}

/// `scope`'s tools without `request`'s exclusions.
fn without(scope: &ProfileScope, request: &CallRequest) -> Arc<ToolRegistry> {
    if request.without.is_empty() {
        Arc::clone(&scope.tools)
    } else {
        Arc::new(scope.tools.without(&request.without))
    }
}

/// The tools of `registry` as a single profile named `name` (one-shot commands).
pub fn fixed_profile(
    name: &str,
    tools: Arc<ToolRegistry>,
    requests: Option<Arc<dyn HostRequests>>,
) -> Arc<dyn Profiles> {
    Arc::new(FixedProfile(ProfileScope::new(name, tools, requests)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fixed_profile_answers_its_name_and_the_default() {
        let profiles = FixedProfile(ProfileScope::new(
            "dev",
            Arc::new(ToolRegistry::default()),
            None,
        ));
        assert_eq!(
            profiles.scope(None).map(|s| s.name).ok(),
            Some("dev".into())
        );
        assert!(profiles.scope(Some("dev")).is_ok());
        let e = profiles.scope(Some("ops")).err();
        assert_eq!(
            e.map(|e| e.to_string()),
            Some("this host has no profile 'ops'; its profiles are: dev".to_owned())
        );
    }

    #[tokio::test]
    async fn a_call_runs_against_the_tools_its_request_pinned() {
        use crate::context::Frontend;
        use crate::result::CallErrorKind;
        let door = CallDoor::new(
            &CallSettings::default(),
            fixed_profile("dev", Arc::new(ToolRegistry::default()), None),
            Arc::new(crate::policy::AutoApprove),
        );
        let call = || ToolCall::new("1", "read_output", serde_json::json!({"id": "o-x"}));
        // The profile has no tools now...
        let now = door.request(Caller::new(Frontend::Library));
        let unpinned = door.call(&now, call()).await;
        assert_eq!(unpinned.error, Some(CallErrorKind::ToolNotFound));
        // ...but a request that pinned a snapshot with the tool runs it there.
        let snapshot = Arc::new(crate::read_output::with_read_output(
            &ToolRegistry::default(),
        ));
        let mut pinned = door.request(Caller::new(Frontend::Library));
        pinned.tools = Some(Arc::clone(&snapshot));
        let tools = door.tools(&pinned).expect("pinned tools");
        assert!(Arc::ptr_eq(&tools, &snapshot));
        let ran = door.call(&pinned, call()).await;
        assert_ne!(
            ran.error,
            Some(CallErrorKind::ToolNotFound),
            "{}",
            ran.output
        );
        // pin_tools resolves the profile's tools and pins what it returns.
        let mut request = door.request(Caller::new(Frontend::Library));
        let resolved = door.pin_tools(&mut request).expect("the profile");
        assert!(
            request
                .tools
                .as_ref()
                .is_some_and(|t| Arc::ptr_eq(t, &resolved))
        );
        // The door says which tools may be put to an approver: all but read ones.
        let read = snapshot.get("read_output").expect("read_output");
        assert!(!door.may_ask(read.spec()));
    }
}
