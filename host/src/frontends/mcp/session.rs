//! One MCP session: the rmcp `ServerHandler` that lists the profile's tools, forwards
//! list_changed in both protocol generations, and runs tools/call through the host's
//! dispatcher with the session's approver and caller channel.

#![allow(
    deprecated,
    reason = "SEP-2577 deprecates MCP logging and sampling, but 2025-11-25 clients (most \
              clients today) still use them"
)]

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, InitializeRequestParams,
    InitializeResult, JsonObject, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, LoggingLevel, MetaObject, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ServerCapabilities, ServerConfig, SetLevelRequestParams,
    SubscriptionFilter, ToolAnnotations,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use rmcp::model::{
    CancelTaskParams, ClientCapabilities, CreateTaskResult, GetTaskParams, GetTaskResult,
    InputRequiredResult, UpdateTaskParams,
};

use super::approval::McpApprover;
use super::caller::{Can, Inputs, McpCaller, Question, Route, level_rank};
use super::outputs;
use super::state::SessionState;
use super::suspended::{self, AskAfter, Owner, Running, Taken};
use toolhost_calls::context::CallerChannel;
use toolhost_calls::dispatcher::ToolCall;
use toolhost_calls::policy::Approver;
use toolhost_calls::result::ToolResult;
use toolhost_calls::tool::{Risk, ToolSpec};

/// The `_meta` key by which a 2026-07-28 request opts in to log lines.
const LOG_LEVEL_META: &str = "io.modelcontextprotocol/logLevel";

/// The tasks extension is for 2026-07-28 clients (an `initialize` client never holds a
/// task: its calls wait for their tools), so it is advertised only to a client that
/// negotiated that version.
fn without_tasks_before_2026(result: &mut InitializeResult) {
    if result.protocol_version == rmcp::model::ProtocolVersion::V_2026_07_28 {
        return;
    }
    if let Some(extensions) = result.capabilities.extensions.as_mut() {
        extensions.remove(rmcp::model::TASKS_EXTENSION_ID);
        if extensions.is_empty() {
            result.capabilities.extensions = None;
        }
    }
}

/// One client connection (stdio) or HTTP session.
#[derive(Clone)]
pub struct McpSession {
    pub(super) state: Arc<SessionState>,
}

/// The annotations MCP clients read (hints; the host enforces the risk itself).
fn annotations(risk: Risk) -> ToolAnnotations {
    let hints = ToolAnnotations::new();
    match risk {
        Risk::Read => hints.read_only(true).destructive(false).open_world(false),
        Risk::Write => hints.read_only(false).destructive(false).open_world(false),
        Risk::Destructive => hints.read_only(false).destructive(true).open_world(false),
        Risk::Network => hints.read_only(false).destructive(false).open_world(true),
        // Deny tools are never listed; if one were, it would be marked as dangerous.
        _ => hints.read_only(false).destructive(true).open_world(true),
    }
}

fn mcp_tool(spec: &ToolSpec) -> rmcp::model::Tool {
    let schema: JsonObject = match &spec.schema {
        Value::Object(o) => o.clone(),
        _ => JsonObject::new(),
    };
    let mut meta = MetaObject::new();
    meta.insert("toolhost/risk".to_owned(), json!(spec.risk.to_string()));
    if spec.interactive {
        meta.insert("toolhost/interactive".to_owned(), json!(true));
    }
    if spec.requirements.task.supported() {
        meta.insert("toolhost/task".to_owned(), json!(spec.requirements.task));
    }
    let tool = rmcp::model::Tool::new(
        spec.name.clone(),
        spec.description.clone(),
        Arc::new(schema),
    )
    .with_annotations(annotations(spec.risk))
    .with_meta(meta);
    match &spec.output_schema {
        Some(Value::Object(o)) => tool.with_raw_output_schema(Arc::new(o.clone())),
        _ => tool,
    }
}

impl ServerHandler for McpSession {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_logging()
                .enable_tools()
                .enable_tool_list_changed()
                // Only for reading back cut outputs (toolhost://output/ID).
                .enable_resources()
                // Calls of tools that declare task support run as tasks once detached.
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new("toolhost", env!("CARGO_PKG_VERSION")))
        .with_instructions(format!(
            "Tools from toolhost plugins (profile '{}'). The list changes when plugins are \
             installed, updated or removed.",
            self.state.shared.profile_name
        ))
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        let mut result = self.negotiate_initialize(&request)?;
        without_tasks_before_2026(&mut result);
        self.state
            .register(Some(&result.protocol_version), Some(&request.client_info));
        // A session client gets list_changed pushed on its session once it has said
        // `initialized`. Subscribe before answering, so no reload in between is missed.
        *self
            .state
            .events
            .lock()
            .unwrap_or_else(PoisonError::into_inner) =
            Some(self.state.shared.host.catalog().subscribe());
        Ok(result)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let events = self
            .state
            .events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(mut events) = events else {
            return;
        };
        let peer = context.peer.clone();
        let stop = self.state.stop.clone();
        tokio::spawn(async move {
            loop {
                let event = tokio::select! {
                    () = stop.cancelled() => break,
                    event = events.recv() => event,
                };
                match event {
                    Ok(_) | Err(RecvError::Lagged(_)) => {
                        if peer.notify_tool_list_changed().await.is_err() {
                            break;
                        }
                    }
                    Err(RecvError::Closed) => break,
                }
            }
        });
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(SubscriptionFilter::builder().tools_list_changed().build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        self.state.register_from(context.request_context());
        let mut events = self.state.shared.host.catalog().subscribe();
        let wanted = context.accepted().tools_list_changed == Some(true);
        loop {
            let event = tokio::select! {
                () = context.cancelled() => break,
                () = self.state.stop.cancelled() => break,
                event = events.recv() => event,
            };
            match event {
                Ok(_) | Err(RecvError::Lagged(_)) => {
                    if wanted && context.sink().notify_tool_list_changed().await.is_err() {
                        break;
                    }
                }
                Err(RecvError::Closed) => break,
            }
        }
        Ok(())
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.state.register_from(&context);
        self.state
            .log_level
            .store(level_rank(request.level), Ordering::Relaxed);
        Ok(())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let owner = self.owner(&context);
        let task = self.state.shared.tasks.get(&request.task_id, &owner)?;
        Ok(GetTaskResult::new(task))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let owner = self.owner(&context);
        self.state
            .shared
            .tasks
            .update(&request.task_id, &owner, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let owner = self.owner(&context);
        self.state.shared.tasks.cancel(&request.task_id, &owner)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.state.register_from(&context);
        let view = self.state.shared.view();
        let tools = self
            .state
            .shared
            .host
            .door()
            .visible(&view)
            .into_iter()
            .map(mcp_tool)
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        let view = self.state.shared.view();
        view.get(name).map(|t| mcp_tool(t.spec()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.call(request, context).await
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        // Kept outputs are read by the link a cut result carries, never listed.
        self.state.register_from(&context);
        Ok(ListResourcesResult::with_all_items(Vec::new()))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        self.state.register_from(&context);
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            outputs::resource_template(),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        self.state.register_from(&context);
        let facts = self.state.client_facts(&context);
        let shared = &self.state.shared;
        let store = shared
            .host
            .door()
            .scope(Some(&shared.profile_name))
            .ok()
            .and_then(|s| s.outputs);
        let owner = toolhost_calls::outputs::Owner {
            profile: shared.profile_name.clone(),
            token: facts.caller.token.clone(),
        };
        outputs::read(store, owner, request.uri)
            .await
            .map(ReadResourceResponse::from)
    }
}

/// The `_meta` key of the W3C trace context a client may send with a call.
const TRACEPARENT_META: &str = "traceparent";

/// Whether `t` looks like a W3C `traceparent` (`00-` + 32 hex + `-` + 16 hex + `-` + 2
/// hex; later versions may append fields): anything else is not recorded.
fn is_traceparent(t: &str) -> bool {
    let parts: Vec<&str> = t.split('-').collect();
    t.len() <= 256
        && parts.len() >= 4
        && [2, 32, 16, 2]
            .iter()
            .zip(&parts)
            .all(|(n, p)| p.len() == *n)
        && parts.iter().all(|p| {
            p.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
}

impl McpSession {
    /// A request of this session's client to the door: its profile, session and model,
    /// and whether it has a session to remember a "for this session" answer for (a
    /// sessionless HTTP request has not).
    fn door_request(
        &self,
        door: &toolhost_calls::door::CallDoor,
        who: Arc<toolhost_calls::context::Caller>,
        facts: &super::state::ClientFacts,
    ) -> toolhost_calls::door::CallRequest {
        let mut request = door.request(who);
        request.profile = Some(self.state.shared.profile_name.clone());
        request.session = self.state.session_id.clone();
        request.model = facts.model.clone();
        request.session_answers = !(self.state.transport == "http" && facts.sessionless);
        request
    }

    /// tools/call: through the host's dispatcher, as the session's client.
    async fn call(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.state.register_from(&context);
        let shared = &self.state.shared;
        let facts = self.state.client_facts(&context);
        // The W3C trace context the client sent, for the audit log.
        let traceparent = request
            .meta
            .as_deref()
            .and_then(|m| m.get(TRACEPARENT_META))
            .or_else(|| context.meta.get(TRACEPARENT_META))
            .and_then(Value::as_str)
            .filter(|t| is_traceparent(t));
        let who = match traceparent {
            Some(t) => Arc::new(toolhost_calls::context::Caller {
                traceparent: Some(t.to_owned()),
                ..toolhost_calls::context::Caller::clone(&facts.caller)
            }),
            None => Arc::clone(&facts.caller),
        };
        // The door resolves the profile's tools once: the tool looked up here is the
        // one the call runs (a reload in between does not make them differ).
        let door = shared.host.door();
        let mut call_request = self.door_request(door, who, &facts);
        let tools = door.pin_tools(&mut call_request).unwrap_or_default();
        let Some(tool) = tools.get(&request.name) else {
            // Through the door all the same, so the audit log records the attempt.
            let arguments = Value::Object(request.arguments.take().unwrap_or_default());
            let _ = door
                .call(
                    &call_request,
                    ToolCall::new(String::new(), request.name.to_string(), arguments),
                )
                .await;
            // The spec: an unknown tool is a protocol error (invalid params).
            return Err(McpError::invalid_params(
                format!(
                    "unknown tool '{}': profile '{}' has no such tool (tools/list shows \
                     what it has now; plugins may have been reloaded)",
                    request.name, shared.profile_name
                ),
                None,
            ));
        };
        // A tool that runs only as a task, for a client that cannot hold tasks (the
        // 2026-07-28 way: -32021 naming the extension; older clients wait for it).
        let task_support = tool.spec().requirements.task;
        let holds_tasks = facts.sessionless
            && context
                .client_capabilities()
                .is_some_and(|c| c.supports_tasks());
        if task_support == toolhost_plugin_api::TaskSupport::Required
            && facts.sessionless
            && !holds_tasks
        {
            return Err(McpError::missing_required_client_capability(
                ClientCapabilities::builder().enable_tasks().build(),
            ));
        }
        let arguments = Value::Object(request.arguments.take().unwrap_or_default());
        // A sessionless client's retry that answers a plugin's question resumes that call;
        // a state this server did not issue (or issued to another caller or call, or that
        // expired or was used) is refused rather than taken for a new call.
        // Only sessionless clients' calls are named for resuming (a session client's
        // questions are requests on its session): no hashing on the others' calls.
        let resumable = facts.sessionless.then(|| {
            let connection =
                (self.state.transport == "stdio").then_some(self.state.session_id.as_str());
            (
                Owner::of(&facts.caller, connection),
                suspended::fingerprint(&request.name, &arguments),
            )
        });
        if let (Some(state), Some((owner, call_print))) =
            (request.request_state.as_deref(), &resumable)
        {
            match shared.suspended.take(state, owner, call_print) {
                Taken::Resume(waiting) => {
                    let waiting = *waiting;
                    let route = self.route(&context, &facts);
                    waiting.run.caller.rebind(route).await;
                    // What the retry left unanswered is asked again.
                    return match waiting.inputs.take(request.input_responses.as_ref()) {
                        None => {
                            self.drive(
                                waiting.run,
                                &context,
                                &request.name,
                                owner.clone(),
                                *call_print,
                            )
                            .await
                        }
                        Some(rest) => {
                            Ok(self.suspend(waiting.run, rest, owner.clone(), *call_print))
                        }
                    };
                }
                Taken::Refused(why) => return Err(bad_state(why)),
                Taken::Unknown if shared.suspended.issued_elsewhere(state).is_some() => {
                    let issuer = shared.suspended.issued_elsewhere(state).unwrap_or_default();
                    let here = shared.suspended.replica().unwrap_or_default();
                    return Err(bad_state(&format!(
                        "it was issued by replica '{issuer}', where the call waiting for this \
                         answer runs, and this request reached replica '{here}' (a load \
                         balancer spread them); that call ends unanswered when its time is up"
                    )));
                }
                Taken::Unknown if !shared.pending.knows(state) => {
                    return Err(bad_state(
                        "this server did not issue it, or it expired or was used already",
                    ));
                }
                Taken::Unknown => {}
            }
        }
        // Only calls the policy may put to an approver get one of their own (it is built
        // from the call: its question and, for a sessionless client, its fingerprint).
        let approver = door.may_ask(tool.spec()).then(|| {
            Arc::new(McpApprover::new(
                &self.state,
                &request,
                tool,
                &arguments,
                &context.peer,
                &facts,
            ))
        });
        // A sessionless client is asked by input-required results: its call runs on a
        // task of its own, so it can wait for the client's retry.
        // A call that may detach runs there too, to be handed to a task.
        let can_detach = holds_tasks && task_support.supported();
        let waits = facts.sessionless
            && (facts.can_elicit || facts.can_sample || facts.can_roots || can_detach);
        let (questions, asked) = if waits {
            let (tx, rx) = tokio::sync::mpsc::channel(1);
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        // Responses sent with a new call (no state) answer its questions of those keys.
        let preset = questions.as_ref().and(request.input_responses.take());
        let caller = Arc::new(
            McpCaller::new(
                self.route(&context, &facts),
                Can {
                    elicit: facts.can_elicit,
                    elicit_url: facts.can_elicit_url,
                    sample: facts.can_sample,
                    roots: facts.can_roots,
                    detach: can_detach,
                },
                questions,
                shared.options.answer_within(),
            )
            .with_responses(preset),
        );
        // The call stops when the client cancels the request, or when the host shuts down.
        call_request.approver = approver
            .as_ref()
            .map(|a| Arc::clone(a) as Arc<dyn Approver>);
        call_request.channel = Some(Arc::clone(&caller) as Arc<dyn CallerChannel>);
        call_request.max_chars = outputs::max_result_chars(request.meta.as_deref(), &context.meta);
        let cancel = call_request.cancel.clone();
        let call = ToolCall {
            // Only echoed in the door's result, which MCP does not return.
            id: String::new(),
            name: tool.spec().name.clone(),
            arguments: arguments.into(),
        };
        if let (Some(questions), Some((owner, call_print))) = (asked, resumable) {
            let host = Arc::clone(&shared.host);
            let task = tokio::spawn(async move { host.door().call(&call_request, call).await });
            let run = Running {
                task,
                questions,
                cancel,
                caller,
                approver: approver.map(|a| a as Arc<dyn AskAfter>),
            };
            return self
                .drive(run, &context, &request.name, owner, call_print)
                .await;
        }
        // The door's future is large; boxed, the state rmcp moves into a task and polls
        // stays small (measured: ~850 fewer instructions per call).
        let mut dispatch = Box::pin(door.call(&call_request, call));
        let result = tokio::select! {
            biased;
            result = &mut dispatch => result,
            () = context.ct.cancelled() => {
                // notifications/cancelled: the plugin sees its cancel signal and gets the
                // dispatcher's grace period to stop.
                cancel.cancel();
                dispatch.await
            }
        };
        // Every notification the tool sent goes out before the result.
        caller.flush().await;
        finished(
            result,
            &caller,
            facts.sessionless,
            approver.as_deref().map(|a| a as &dyn AskAfter),
            &request.name,
        )
    }

    /// Who asks, for a task: the caller's token and client (and a stdio connection).
    fn owner(&self, context: &RequestContext<RoleServer>) -> Owner {
        let facts = self.state.client_facts(context);
        let connection =
            (self.state.transport == "stdio").then_some(self.state.session_id.as_str());
        Owner::of(&facts.caller, connection)
    }

    /// Leaves `run` waiting for its client's answers to `inputs`: the input-required result
    /// naming it.
    fn suspend(
        &self,
        run: Running,
        inputs: Inputs,
        owner: Owner,
        call_print: [u8; 32],
    ) -> CallToolResponse {
        let requests = inputs.pending();
        let state = self
            .state
            .shared
            .suspended
            .wait(owner, call_print, run, inputs);
        InputRequiredResult::new(Some(requests), Some(state)).into()
    }

    /// The lowest log level a request's client wants: 2026-07-28 clients opt in per
    /// request; session clients with logging/setLevel (default: info).
    fn log_level(
        &self,
        context: &RequestContext<RoleServer>,
        facts: &super::state::ClientFacts,
    ) -> Option<u8> {
        if facts.sessionless {
            context
                .meta
                .get(LOG_LEVEL_META)
                .and_then(|v| serde_json::from_value::<LoggingLevel>(v.clone()).ok())
                .map(level_rank)
        } else {
            Some(self.state.log_level.load(Ordering::Relaxed))
        }
    }

    /// Where a request's notifications go: its peer, progress token and log level.
    fn route(
        &self,
        context: &RequestContext<RoleServer>,
        facts: &super::state::ClientFacts,
    ) -> Route {
        Route {
            peer: context.peer.clone(),
            progress_token: context.meta.get_progress_token(),
            log_level: self.log_level(context, facts),
            task: None,
        }
    }

    /// Runs a sessionless client's call until it ends (its result) or a plugin asks the
    /// client something (an input-required result naming the call, left waiting).
    async fn drive(
        &self,
        mut run: Running,
        context: &RequestContext<RoleServer>,
        tool: &str,
        owner: Owner,
        call_print: [u8; 32],
    ) -> Result<CallToolResponse, McpError> {
        let shared = &self.state.shared;
        loop {
            let next = tokio::select! {
                biased;
                result = &mut run.task => Next::Done(result),
                Some(question) = run.questions.recv() => Next::Asked(question),
                () = context.ct.cancelled() => Next::Cancelled,
            };
            let result = match next {
                Next::Done(result) => result,
                Next::Cancelled => {
                    // notifications/cancelled: as for a call on a session. What the plugin
                    // asks while it stops goes unanswered, not left waiting.
                    run.cancel.cancel();
                    loop {
                        tokio::select! {
                            biased;
                            result = &mut run.task => break result,
                            Some(question) = run.questions.recv() => {
                                if let Question::Detach(ack) = question {
                                    let _ = ack.send(false);
                                }
                            }
                        }
                    }
                }
                Next::Asked(Question::Detach(ack)) => {
                    // The rest of the call runs as a task; the client gets its handle.
                    match shared.tasks.start(owner.clone(), run, tool.to_owned()) {
                        Ok(task) => {
                            let _ = ack.send(true);
                            return Ok(CallToolResponse::Task(CreateTaskResult::new(task)));
                        }
                        Err(back) => {
                            let _ = ack.send(false);
                            run = back;
                            continue;
                        }
                    }
                }
                Next::Asked(Question::Inputs(inputs)) => {
                    // What the tool sent so far goes out with this request.
                    run.caller.flush().await;
                    return Ok(self.suspend(run, inputs, owner.clone(), call_print));
                }
            };
            run.caller.flush().await;
            let result = result.unwrap_or_else(|e| outputs::lost(tool, &e));
            return finished(result, &run.caller, true, run.approver.as_deref(), tool);
        }
    }
}

/// What the next step of a sessionless client's call is.
enum Next {
    Done(Result<ToolResult, tokio::task::JoinError>),
    Asked(Question),
    Cancelled,
}

/// A retry's `requestState` that names no call of its caller's.
fn bad_state(why: &str) -> McpError {
    McpError::invalid_params(
        format!(
            "requestState refused: {why}; call the tool again without requestState and \
             inputResponses"
        ),
        None,
    )
}

/// A finished call as MCP answers it: the approval question a sessionless client is to
/// answer by calling again; -32021 when it failed after needing a capability a
/// sessionless client did not declare; or the result.
fn finished(
    result: ToolResult,
    caller: &McpCaller,
    sessionless: bool,
    approver: Option<&dyn AskAfter>,
    tool: &str,
) -> Result<CallToolResponse, McpError> {
    if let Some(question) = approver.and_then(AskAfter::question_after) {
        return Ok(question.into());
    }
    if sessionless
        && result.is_error
        && let Some(missing) = caller.missing_capabilities()
    {
        return Err(McpError::missing_required_client_capability(missing));
    }
    Ok(outputs::complete(result, tool).into())
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn annotations_follow_the_risk() {
        let read = annotations(Risk::Read);
        assert_eq!(read.read_only_hint, Some(true));
        assert_eq!(read.destructive_hint, Some(false));
        let write = annotations(Risk::Write);
        assert_eq!(write.read_only_hint, Some(false));
        assert_eq!(write.destructive_hint, Some(false));
        assert_eq!(write.open_world_hint, Some(false));
        let destructive = annotations(Risk::Destructive);
        assert_eq!(destructive.destructive_hint, Some(true));
        let network = annotations(Risk::Network);
        assert_eq!(network.open_world_hint, Some(true));
        assert_eq!(network.destructive_hint, Some(false));
    }
}
