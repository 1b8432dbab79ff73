//! What a [`Host`] answers on its control socket: reload (a rescan), status, the tool
//! listing, and calls, which run as the named (else default) profile's agent with a cancel
//! token the host's shutdown fires.

use std::sync::Arc;

use super::{CallParams, CallReply, ControlFault, ControlHandler, ControlRequest, ControlResult};
use crate::calls::context::Caller;
use crate::calls::dispatcher::ToolCall;
use crate::host::Host;
use crate::plugins::catalog::RescanReport;

impl ControlHandler for Host {
    async fn handle(
        &self,
        request: ControlRequest,
        peer: &Caller,
    ) -> Result<ControlResult, ControlFault> {
        Ok(match request {
            ControlRequest::Reload => ControlResult::Reload(rescan(self).await?),
            ControlRequest::Status => ControlResult::Status(Box::new(self.status())),
            ControlRequest::List => ControlResult::List(self.catalog().registry().listing()),
            ControlRequest::Call(params) => ControlResult::Call(call(self, params, peer).await?),
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
async fn call(host: &Host, params: CallParams, peer: &Caller) -> Result<CallReply, ControlFault> {
    let door = host.door();
    // An unknown profile is the request's fault, not a call result.
    door.scope(params.profile.as_deref())
        .map_err(|e| ControlFault::new(ControlFault::UNKNOWN_PROFILE, e.to_string()))?;
    let mut request = door.request(peer.clone());
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
