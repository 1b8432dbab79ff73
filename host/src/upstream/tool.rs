//! A tool of an MCP server as the registry holds it: its call goes to the server's
//! current connection (refused, saying why, while there is none), with a progress token
//! whose notifications reach the caller, a `notifications/cancelled` when the call is
//! cancelled or given up, and the server's input-required rounds (2026-07-28) answered by
//! the caller; the result comes back as the server gave it.

use std::sync::Arc;

use async_trait::async_trait;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientRequest, RequestId,
    ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, ServiceError as RmcpError};
use toolhost_calls::context::CallContext;
use toolhost_calls::tool::{Arguments, DynTool, ToolError, ToolOrigin, ToolOutput, ToolSpec};

use super::client;
use super::convert;
use super::link::Link;

/// Rounds of questions one call may ask before it is given up.
const MAX_ROUNDS: usize = 8;

/// One tool of one server.
pub(crate) struct ServerTool {
    pub(crate) spec: ToolSpec,
    pub(crate) origin: ToolOrigin,
    /// The server's own name for it.
    pub(crate) remote: String,
    pub(crate) link: Arc<Link>,
}

/// Sends `notifications/cancelled` for a request given up before its answer came.
struct CancelOnDrop {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let peer = self.peer.clone();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    let _ = peer
                        .notify_cancelled(CancelledNotificationParam::new(
                            Some(id),
                            Some("the caller cancelled the call".to_owned()),
                        ))
                        .await;
                });
            }
        }
    }
}

impl ServerTool {
    fn lost(&self, e: &RmcpError) -> ToolError {
        match e {
            RmcpError::TransportClosed | RmcpError::TransportSend(_) => ToolError::failed(format!(
                "the MCP server '{}' went away during the call{}; toolhost starts it again \
                 (see `toolhost status`), so the call may be tried again",
                self.link.name,
                self.link.last_words()
            )),
            RmcpError::McpError(error) => ToolError::failed(format!(
                "the MCP server '{}' refused the call: {} (code {})",
                self.link.name, error.message, error.code.0
            )),
            other => ToolError::failed(format!(
                "the call to MCP server '{}' failed: {other}",
                self.link.name
            )),
        }
    }
}

#[async_trait]
impl DynTool for ServerTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn origin(&self) -> &ToolOrigin {
        &self.origin
    }

    fn isolated(&self) -> bool {
        true
    }

    async fn call(&self, ctx: &CallContext, args: Arguments) -> Result<ToolOutput, ToolError> {
        let peer = self
            .link
            .peer()
            .ok_or_else(|| ToolError::failed(self.link.unavailable()))?;
        let boarding = self.link.flights.board(ctx.services.caller.clone());
        let mut params = CallToolRequestParams::new(self.remote.clone());
        params.arguments = match args.into_value() {
            serde_json::Value::Object(map) => Some(map),
            _ => None,
        };
        for _ in 0..MAX_ROUNDS {
            let request = ClientRequest::CallToolRequest(CallToolRequest::new(params.clone()));
            let handle = peer
                .send_request_with_option(request, PeerRequestOptions::no_options())
                .await
                .map_err(|e| self.lost(&e))?;
            boarding.set_token(handle.progress_token.clone());
            let mut guard = CancelOnDrop {
                peer: peer.clone(),
                id: Some(handle.id.clone()),
            };
            let answer = tokio::select! {
                answer = handle.await_response() => answer,
                // Cancelled (or timed out): the server hears it at once (the guard's
                // notification), not when the dispatcher's grace period ends.
                () = ctx.cancel.cancelled() => {
                    drop(guard);
                    return Err(ToolError::failed(format!(
                        "the call was cancelled; the MCP server '{}' was told",
                        self.link.name
                    )));
                }
            };
            guard.id = None;
            match answer.map_err(|e| self.lost(&e))? {
                ServerResult::CallToolResult(result) => return Ok(convert::output(result)),
                ServerResult::InputRequiredResult(asked) => {
                    let caller = ctx.services.caller.clone();
                    let mut answers = rmcp::model::InputResponses::new();
                    for (key, request) in asked.input_requests.unwrap_or_default() {
                        answers
                            .insert(key, client::answer_input(caller.as_deref(), request).await?);
                    }
                    params.input_responses = Some(answers);
                    params.request_state = asked.request_state;
                }
                other => {
                    return Err(ToolError::failed(format!(
                        "the MCP server '{}' answered the call with something other than a \
                         result: {}",
                        self.link.name,
                        serde_json::to_string(&other).unwrap_or_default()
                    )));
                }
            }
        }
        Err(ToolError::failed(format!(
            "the MCP server '{}' asked for input {MAX_ROUNDS} times in one call; toolhost gave \
             the call up",
            self.link.name
        )))
    }
}
