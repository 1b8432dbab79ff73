//! What a [`Host`] answers on its control socket: reload (a rescan), status, the tool
//! listing, and calls, which run as the named (else default) profile's agent with a cancel
//! token the host's shutdown fires.

use std::sync::Arc;

use async_trait::async_trait;

use super::{
    ApprovalQuestion, ApprovalReply, CallParams, CallReply, ControlFault, ControlHandler,
    ControlPeer, ControlRequest, ControlResult,
};
use crate::host::Host;
use crate::plugins::catalog::RescanReport;
use toolhost_calls::dispatcher::ToolCall;
use toolhost_calls::policy::{ApprovalAnswer, ApprovalRequest, Approver};

impl ControlHandler for Host {
    async fn handle(
        &self,
        request: ControlRequest,
        peer: &ControlPeer,
    ) -> Result<ControlResult, ControlFault> {
        Ok(match request {
            ControlRequest::Reload => ControlResult::Reload(rescan(self).await?),
            ControlRequest::Status => ControlResult::Status(Box::new(self.status())),
            ControlRequest::List => ControlResult::List(self.catalog().registry().listing()),
            ControlRequest::Call(params) => ControlResult::Call(call(self, params, peer).await?),
            ControlRequest::ApprovalsPending => {
                ControlResult::ApprovalsPending(self.approval_relay().pending())
            }
            ControlRequest::ApprovalsAnswer(params) => {
                tracing::info!(
                    id = params.id,
                    answer = ?params.reply,
                    by = %peer.who,
                    "an approval question was answered on the control socket"
                );
                self.approval_relay()
                    .answer(params.id, approval(params.reply))
                    .map_err(|e| ControlFault::new(ControlFault::INVALID_PARAMS, e.to_string()))?;
                ControlResult::ApprovalsAnswered
            }
        })
    }

    fn open_connections(&self) -> Option<Arc<std::sync::atomic::AtomicUsize>> {
        Some(Arc::clone(self.control_clients()))
    }
}

/// `reload`: [`Host::reload`] (a rescan off the runtime's threads, quarantines lifted).
async fn rescan(host: &Host) -> Result<RescanReport, ControlFault> {
    host.reload()
        .await
        .map_err(|e| ControlFault::new(ControlFault::INTERNAL_ERROR, e.to_string()))
}

/// `call`: one call through the host's door, as the named (else default) profile.
async fn call(
    host: &Host,
    params: CallParams,
    peer: &ControlPeer,
) -> Result<CallReply, ControlFault> {
    let door = host.door();
    // An unknown profile is the request's fault, not a call result.
    door.scope(params.profile.as_deref())
        .map_err(|e| ControlFault::new(ControlFault::UNKNOWN_PROFILE, e.to_string()))?;
    let mut request = door.request(peer.caller.clone());
    if params.yes {
        // The host's own user (and root) could run the tools themselves; nobody else may
        // wave approval through.
        let own = toolhost_calls::private::effective_uid();
        match peer.caller.uid {
            Some(uid) if uid == own || uid == 0 => {
                request.approver = Some(Arc::new(toolhost_calls::policy::AutoApprove));
            }
            uid => {
                return Err(ControlFault::new(
                    ControlFault::INVALID_PARAMS,
                    format!(
                        "--yes is only for the host's own user (uid {own}) or root; this client \
                         is {}: run the call without --yes and answer at the terminal",
                        uid.map_or_else(|| "of unknown uid".to_owned(), |u| format!("uid {u}"))
                    ),
                ));
            }
        }
    } else if params.ask {
        // The person at the client's terminal is asked, over this connection (whose
        // peer was admitted by uid).
        request.approver = Some(Arc::new(ControlApprover(peer.clone())));
    }
    request.profile = params.profile;
    request.session = "control".to_owned();
    // A caller may ask for a shorter limit than the host's, never a longer one.
    request.timeout_cap = params.timeout;
    let call = ToolCall {
        id: "control".to_owned(),
        name: params.tool,
        arguments: params.arguments.into(),
    };
    Ok(CallReply::from(door.call(&request, call).await))
}

/// What a terminal's answer on the control socket means to the policy.
fn approval(reply: ApprovalReply) -> ApprovalAnswer {
    match reply {
        ApprovalReply::Once => ApprovalAnswer::Approve,
        ApprovalReply::Session => ApprovalAnswer::ApproveForSession,
        ApprovalReply::Always => ApprovalAnswer::ApproveAlways,
        ApprovalReply::No { reason } => ApprovalAnswer::Decline(reason),
    }
}

/// Asks the person at a control client's terminal, over the client's connection.
struct ControlApprover(ControlPeer);

#[async_trait]
impl Approver for ControlApprover {
    async fn ask(&self, request: &ApprovalRequest) -> ApprovalAnswer {
        let question = ApprovalQuestion {
            tool: request.tool.clone(),
            risk: request.risk,
            origin: request.origin.to_string(),
            arguments: request.arguments.clone(),
            offer_session: request.offer_session,
            offer_always: request.offer_always,
        };
        match self.0.ask(question).await {
            Ok(reply) => approval(reply),
            Err(e) => {
                ApprovalAnswer::Decline(format!("the control client could not be asked: {e}"))
            }
        }
    }

    fn who(&self) -> String {
        self.0.who.clone()
    }
}
