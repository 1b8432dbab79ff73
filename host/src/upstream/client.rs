//! The host as an MCP client of one server: what it declares (elicitation, form and URL,
//! and sampling, both relayed to whoever called the tool), the calls in flight with the
//! caller each reports to, and what the server sends unasked: progress (to the call whose
//! token it names), questions and sampling requests (to the caller of the newest call in
//! flight that has one; refused with a message when nobody can be asked), and
//! `tools/list_changed` (the server's supervisor lists its tools again).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::model::{
    ClientCapabilities, ClientInfo, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequestParams, ElicitResult, ElicitationAction, ErrorData, Implementation, InputRequest,
    ListRootsResult, ProgressNotificationParam, ProgressToken,
};
use rmcp::service::{NotificationContext, RequestContext, RoleClient};
use toolhost_calls::context::CallerChannel;
use toolhost_calls::tool::ToolError;
use toolhost_plugin_api::{ClientAnswer, ClientQuestion, ServiceError};

use super::convert;

/// One call in flight on a server.
struct Flight {
    id: u64,
    token: Option<ProgressToken>,
    caller: Option<Arc<dyn CallerChannel>>,
}

/// The calls in flight on one server.
#[derive(Default)]
pub(crate) struct Flights {
    next: AtomicU64,
    calls: Mutex<Vec<Flight>>,
}

/// A call's place among the flights; leaves when dropped.
pub(crate) struct Boarding {
    flights: Arc<Flights>,
    id: u64,
}

impl Flights {
    /// A call starts, reporting to `caller`.
    pub(crate) fn board(self: &Arc<Self>, caller: Option<Arc<dyn CallerChannel>>) -> Boarding {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().push(Flight {
            id,
            token: None,
            caller,
        });
        Boarding {
            flights: Arc::clone(self),
            id,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Flight>> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Calls in flight.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    /// The caller of the call whose progress token is `token`.
    fn by_token(&self, token: &ProgressToken) -> Option<Arc<dyn CallerChannel>> {
        self.lock()
            .iter()
            .find(|f| f.token.as_ref() == Some(token))
            .and_then(|f| f.caller.clone())
    }

    /// The caller of the newest call in flight that has one.
    fn newest_caller(&self) -> Option<Arc<dyn CallerChannel>> {
        self.lock().iter().rev().find_map(|f| f.caller.clone())
    }
}

impl Boarding {
    /// The request's progress token, once sent.
    pub(crate) fn set_token(&self, token: ProgressToken) {
        if let Some(f) = self.flights.lock().iter_mut().find(|f| f.id == self.id) {
            f.token = Some(token);
        }
    }
}

impl Drop for Boarding {
    fn drop(&mut self) {
        self.flights.lock().retain(|f| f.id != self.id);
    }
}

/// The client side of one connection to a server.
#[derive(Clone)]
pub(crate) struct Handler {
    /// The server's name (for messages).
    pub(crate) server: Arc<str>,
    /// Its calls in flight.
    pub(crate) flights: Arc<Flights>,
    /// Woken by `tools/list_changed`.
    pub(crate) list_changed: Arc<tokio::sync::Notify>,
}

impl Handler {
    fn nobody(&self, what: &str) -> ErrorData {
        ErrorData::invalid_request(
            format!(
                "toolhost cannot relay this {what}: no call to server '{}' is in flight whose \
                 caller can be asked (it is asked only during a call, of whoever made it)",
                self.server
            ),
            None,
        )
    }
}

impl rmcp::ClientHandler for Handler {
    fn get_info(&self) -> ClientInfo {
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation =
            serde_json::from_value(serde_json::json!({"form": {}, "url": {}})).ok();
        capabilities.sampling = serde_json::from_value(serde_json::json!({})).ok();
        capabilities.roots = serde_json::from_value(serde_json::json!({})).ok();
        ClientInfo::new(
            capabilities,
            Implementation::new("toolhost", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let caller = self
            .flights
            .newest_caller()
            .ok_or_else(|| self.nobody("question"))?;
        elicit(caller.as_ref(), &request)
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let caller = self
            .flights
            .newest_caller()
            .ok_or_else(|| self.nobody("sampling request"))?;
        caller
            .sample(convert::sample_request(&params))
            .await
            .map(convert::sample_result)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        // The roots of whoever made the call in flight; none outside a call.
        let Some(caller) = self.flights.newest_caller() else {
            return Ok(ListRootsResult::default());
        };
        let answer = caller
            .ask_client(vec![ClientQuestion::roots()])
            .await
            .into_iter()
            .next();
        match answer {
            Some(ClientAnswer::Roots(roots)) => serde_json::to_value(roots)
                .and_then(serde_json::from_value)
                .map_err(|e| ErrorData::internal_error(e.to_string(), None)),
            _ => Ok(ListRootsResult::default()),
        }
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Some(caller) = self.flights.by_token(&params.progress_token) {
            caller.progress(params.progress, params.total, params.message.as_deref());
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed.notify_one();
    }
}

/// Why a server's question could not be put to the caller.
#[derive(Debug, thiserror::Error)]
enum ElicitError {
    /// The person could not be asked (the caller's error says why).
    #[error(transparent)]
    Ask(#[from] ServiceError),
    /// The caller's client could not show the page, in its words.
    #[error("{0}")]
    Client(String),
}

/// Asks `caller` a server's question (a form, or a page to open).
async fn elicit(
    caller: &dyn CallerChannel,
    request: &ElicitRequestParams,
) -> Result<ElicitResult, ElicitError> {
    if let Some(ask) = convert::ask_request(request) {
        return Ok(convert::elicit_result(caller.ask_user(ask).await?));
    }
    let Some((message, url)) = convert::url_of(request) else {
        return Ok(ElicitResult::new(ElicitationAction::Decline));
    };
    match caller
        .ask_client(vec![ClientQuestion::url(message, url)])
        .await
        .into_iter()
        .next()
    {
        Some(ClientAnswer::Ask(answer)) => Ok(convert::elicit_result(answer)),
        Some(ClientAnswer::Unavailable(m) | ClientAnswer::Failed(m)) => Err(ElicitError::Client(m)),
        _ => Ok(ElicitResult::new(ElicitationAction::Decline)),
    }
}

/// The answer to one of a 2026-07-28 server's input requests, asked of `caller` (a call
/// whose caller cannot be asked fails, saying so).
pub(crate) async fn answer_input(
    caller: Option<&dyn CallerChannel>,
    request: InputRequest,
) -> Result<serde_json::Value, ToolError> {
    let Some(caller) = caller else {
        return Err(ToolError::failed(
            "the MCP server asked a question during the call, and asking is not available: \
             this call's caller cannot be asked (no person or client is attached)",
        ));
    };
    let failed = |m: String| {
        ToolError::failed(format!(
            "the MCP server's question could not be answered: {m}"
        ))
    };
    let value = match request {
        InputRequest::Elicitation(request) => serde_json::to_value(
            elicit(caller, &request.params)
                .await
                .map_err(|e| failed(e.to_string()))?,
        ),
        InputRequest::CreateMessage(request) => serde_json::to_value(
            caller
                .sample(convert::sample_request(&request.params))
                .await
                .map(convert::sample_result)
                .map_err(|e| failed(e.to_string()))?,
        ),
        InputRequest::ListRoots(_) => {
            match caller
                .ask_client(vec![ClientQuestion::roots()])
                .await
                .into_iter()
                .next()
            {
                Some(ClientAnswer::Roots(roots)) => serde_json::to_value(roots),
                Some(ClientAnswer::Unavailable(m) | ClientAnswer::Failed(m)) => {
                    return Err(failed(m));
                }
                _ => Ok(serde_json::json!({"roots": []})),
            }
        }
        _ => {
            return Err(failed(
                "a kind of request toolhost does not know".to_owned(),
            ));
        }
    };
    value.map_err(|e| failed(e.to_string()))
}
