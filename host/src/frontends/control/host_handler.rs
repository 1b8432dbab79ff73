//! What a [`Host`] answers on its control socket: reload (a rescan), status, the tool
//! listing, and calls, which run as the named (else default) profile's agent with a cancel
//! token the host's shutdown fires.

use std::sync::Arc;

use super::{CallParams, CallReply, ControlFault, ControlHandler, ControlRequest, ControlResult};
use crate::calls::context::{Turn, TurnIdentity};
use crate::calls::dispatcher::{DispatchConfig, ToolCall};
use crate::host::Host;
use crate::plugins::status::RescanReport;

impl ControlHandler for Host {
    async fn handle(&self, request: ControlRequest) -> Result<ControlResult, ControlFault> {
        Ok(match request {
            ControlRequest::Reload => ControlResult::Reload(rescan(self).await?),
            ControlRequest::Status => ControlResult::Status(Box::new(self.status())),
            ControlRequest::List => ControlResult::List(self.catalog().registry().listing()),
            ControlRequest::Call(params) => ControlResult::Call(call(self, params).await?),
        })
    }
}

/// `reload`: a rescan, off the runtime's threads (it reads and hashes files).
async fn rescan(host: &Host) -> Result<RescanReport, ControlFault> {
    let catalog = Arc::clone(host.catalog());
    tokio::task::spawn_blocking(move || {
        // An operator's reload also lets quarantined plugins start again.
        let lifted = catalog.lift_quarantines();
        let mut report = catalog.rescan();
        report.quarantine_lifted = lifted;
        report
    })
    .await
    .map_err(|e| {
        ControlFault::new(
            ControlFault::INTERNAL_ERROR,
            format!("the rescan failed: {e}"),
        )
    })
}

/// `call`: one call through the host's dispatcher, as the named (else default) profile.
async fn call(host: &Host, params: CallParams) -> Result<CallReply, ControlFault> {
    let turn = Turn {
        info: Arc::new(TurnIdentity {
            profile_id: "control".to_owned(),
            session_id: "control".to_owned(),
            model: "none".to_owned(),
        }),
        cancel: host.call_token(),
        services: Default::default(),
    };
    let full = host.catalog().registry();
    let registry = match host.resolve_profile(params.profile.as_deref()) {
        Ok(Some(profile)) => profile.view(&full).registry,
        Ok(None) => full.as_ref().clone(),
        Err(e) => {
            return Err(ControlFault::new(
                ControlFault::UNKNOWN_PROFILE,
                e.to_string(),
            ));
        }
    };
    let call = ToolCall {
        id: "control".to_owned(),
        name: params.tool,
        arguments: params.arguments,
    };
    // A caller may ask for a shorter limit than the host's, never a longer one.
    let dispatcher = host.dispatcher();
    let result = match params.timeout {
        Some(limit) if limit < dispatcher.config().timeout => {
            let config = DispatchConfig {
                timeout: limit,
                interactive_timeout: limit.min(dispatcher.config().interactive_timeout),
                ..dispatcher.config()
            };
            dispatcher
                .with_config(config)
                .call(&registry, &turn, call)
                .await
        }
        _ => dispatcher.call(&registry, &turn, call).await,
    };
    Ok(CallReply::from(result))
}
