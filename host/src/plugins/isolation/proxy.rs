//! The host services inside a worker: implementations of the host's service traits that
//! forward each request to the real host over the worker's connection and read the answer
//! back typed. The worker hands them to the same plugin glue the host uses in-process, so a
//! plugin sees the same messages and errors in both modes.

use std::sync::Arc;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use toolhost_plugin_api::{
    AskAnswer, AskRequest, ChildTurnCall, DelegationAnswer, DelegationRequest, HostAnswer,
    HostRequest, LogLevel, SampleAnswer, SampleRequest, ServiceError, SessionsSearchAnswer,
    SettingsAnswer, StateDirAnswer,
};

use super::link::Link;
use super::protocol::{FromWorker, ServiceCall, WireServiceError};
use toolhost_calls::context::{
    CallerChannel, ChildTurnError, ChildTurnService, HostRequests, TurnIdentity, unknown_request,
};

/// Reads a service's answer: JSON of `T`, or the service's error.
fn decode<T: DeserializeOwned>(answer: Result<Value, WireServiceError>) -> Result<T, ServiceError> {
    match answer {
        Ok(value) => serde_json::from_value(value)
            .map_err(|e| ServiceError::Failed(format!("the host's answer could not be read: {e}"))),
        Err(wire) => Err(wire.into_service_error()),
    }
}

/// Progress, log lines, questions and sampling of one call, sent to the host.
pub(crate) struct ProxyCaller {
    link: Arc<Link>,
    call: u64,
}

impl ProxyCaller {
    pub(crate) fn new(link: Arc<Link>, call: u64) -> ProxyCaller {
        ProxyCaller { link, call }
    }
}

#[async_trait]
impl CallerChannel for ProxyCaller {
    fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        self.link.send(&FromWorker::Progress {
            call: self.call,
            progress,
            total,
            message: message.map(str::to_owned),
        });
    }

    fn log(&self, level: LogLevel, _tool: &str, message: &str) {
        self.link.send(&FromWorker::Log {
            call: self.call,
            level: level.0,
            message: message.to_owned(),
        });
    }

    async fn ask_user(&self, request: AskRequest) -> Result<AskAnswer, ServiceError> {
        decode(
            self.link
                .service(self.call, ServiceCall::Ask(request))
                .await,
        )
    }

    async fn sample(&self, request: SampleRequest) -> Result<SampleAnswer, ServiceError> {
        decode(
            self.link
                .service(self.call, ServiceCall::Sample(request))
                .await,
        )
    }

    // Asked of the host's caller as the host request it is, so the questions reach the
    // client together and under their keys.
    async fn ask_client(
        &self,
        questions: Vec<toolhost_plugin_api::ClientQuestion>,
    ) -> Vec<toolhost_plugin_api::ClientAnswer> {
        let count = questions.len();
        let request = HostRequest::ClientAsk(toolhost_plugin_api::ClientQuestions { questions });
        let answer = match request.to_wire() {
            Ok((method, params)) => decode::<toolhost_plugin_api::ClientAnswers>(
                self.link
                    .service(self.call, ServiceCall::Host { method, params })
                    .await,
            ),
            Err(e) => Err(ServiceError::Failed(format!(
                "could not encode the questions for the host: {e}"
            ))),
        };
        match answer {
            Ok(answers) if answers.answers.len() == count => answers.answers,
            Ok(answers) => vec![
                ServiceError::Failed(format!(
                    "the host answered {} of {count} questions",
                    answers.answers.len()
                ))
                .into();
                count
            ],
            Err(e) => vec![e.into(); count],
        }
    }

    async fn detach(&self) -> bool {
        let Ok((method, params)) = HostRequest::CallDetach(toolhost_plugin_api::NoParams).to_wire()
        else {
            return false;
        };
        decode::<toolhost_plugin_api::DetachAnswer>(
            self.link
                .service(self.call, ServiceCall::Host { method, params })
                .await,
        )
        .is_ok_and(|answer| answer.detached)
    }
}

/// Child turns of one call, run by the host's agent (the host's own cancel signal for
/// the call stops the child).
pub(crate) struct ProxyChildTurns {
    link: Arc<Link>,
    call: u64,
}

impl ProxyChildTurns {
    pub(crate) fn new(link: Arc<Link>, call: u64) -> ProxyChildTurns {
        ProxyChildTurns { link, call }
    }
}

#[async_trait]
impl ChildTurnService for ProxyChildTurns {
    async fn run_child_turn(
        &self,
        _parent: &TurnIdentity,
        request: ChildTurnCall,
        _cancel: CancellationToken,
    ) -> Result<String, ChildTurnError> {
        match self
            .link
            .service(self.call, ServiceCall::ChildTurn(request))
            .await
        {
            Ok(Value::String(answer)) => Ok(answer),
            Ok(other) => Err(ChildTurnError::Relayed(format!(
                "the host's child-turn answer is not text: {other}"
            ))),
            Err(WireServiceError(message)) => Err(ChildTurnError::Relayed(message)),
        }
    }

    /// Sent on as the host request it is: the host's own child-turn service for the
    /// call answers it.
    async fn delegate(
        &self,
        _parent: &TurnIdentity,
        request: DelegationRequest,
        _cancel: CancellationToken,
    ) -> Result<DelegationAnswer, ServiceError> {
        let (method, params) = HostRequest::Delegate(request).to_wire().map_err(|e| {
            ServiceError::Failed(format!("could not encode the request for the host: {e}"))
        })?;
        decode(
            self.link
                .service(self.call, ServiceCall::Host { method, params })
                .await,
        )
    }
}

/// Host requests (state folder, session search, the plugin's settings) of one call.
/// Every call has one, for the plugin's settings; only a call with a profile
/// (`with_profile`) sends the profile's requests on to the host.
pub(crate) struct ProxyRequests {
    link: Arc<Link>,
    call: u64,
    with_profile: bool,
}

impl ProxyRequests {
    pub(crate) fn new(link: Arc<Link>, call: u64, with_profile: bool) -> ProxyRequests {
        ProxyRequests {
            link,
            call,
            with_profile,
        }
    }
}

#[async_trait]
impl HostRequests for ProxyRequests {
    async fn request(
        &self,
        _turn: &TurnIdentity,
        request: HostRequest,
    ) -> Result<HostAnswer, ServiceError> {
        let (method, params) = request.to_wire().map_err(|e| {
            ServiceError::Failed(format!("could not encode the request for the host: {e}"))
        })?;
        if !self.with_profile && !matches!(request, HostRequest::PluginSettings(_)) {
            return Err(crate::plugins::run::host_services::no_profile(&method));
        }
        let ask = || {
            self.link
                .service(self.call, ServiceCall::Host { method, params })
        };
        match request {
            HostRequest::ProfileStateDir(_) => {
                decode::<StateDirAnswer>(ask().await).map(HostAnswer::from)
            }
            HostRequest::SessionsSearch(_) => {
                decode::<SessionsSearchAnswer>(ask().await).map(HostAnswer::from)
            }
            HostRequest::PluginSettings(_) => {
                decode::<SettingsAnswer>(ask().await).map(HostAnswer::from)
            }
            HostRequest::ProfileWorkspace(_) => {
                decode::<toolhost_plugin_api::WorkspaceAnswer>(ask().await).map(HostAnswer::from)
            }
            HostRequest::SessionsSummary(_) => {
                decode::<toolhost_plugin_api::SessionsSummaryAnswer>(ask().await)
                    .map(HostAnswer::from)
            }
            other => Err(unknown_request(&other)),
        }
    }
}
