//! What the MCP frontend's parts share: the server's state all sessions see ([`Shared`]),
//! one session's state ([`SessionState`], [`ClientFacts`]) and the approval questions
//! sessionless clients have yet to answer. Server, session, approval and caller depend on
//! this module; it depends on none of them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rmcp::RoleServer;
use rmcp::model::{Implementation, ProtocolVersion};
use rmcp::service::RequestContext;
use tokio_util::sync::CancellationToken;

use super::McpOptions;
use super::clients::{ClientEntry, McpClients};
use crate::host::Host;
use toolhost_calls::context::{Caller, Frontend};
use toolhost_calls::registry::ToolRegistry;

/// What all sessions of one MCP frontend share.
pub(super) struct Shared {
    pub(super) host: Arc<Host>,
    /// The clients connected through this server, registered with the host for status.
    pub(super) clients: Arc<McpClients>,
    /// The profile served (checked with the host's door when the server was made).
    pub(super) profile_name: String,
    pub(super) options: McpOptions,
    pub(super) pending: PendingApprovals,
    /// Plugin calls of sessionless clients waiting for the client's answers.
    pub(super) suspended: super::suspended::SuspendedCalls,
    pub(super) tasks: super::tasks::Tasks,
    pub(super) sessions: AtomicU64,
}

impl Shared {
    /// The tools this frontend serves (the profile's view of the current registry).
    pub(super) fn view(&self) -> Arc<ToolRegistry> {
        // The profile was found when the server was made, and a host's profiles do not
        // change; were it gone, the client would see no tools rather than another's.
        self.host
            .door()
            .scope(Some(&self.profile_name))
            .map(|scope| scope.tools)
            .unwrap_or_default()
    }
}

/// An approval question a 2026-07-28 client was sent and has not answered yet. The answer
/// counts only for the same call of the same code: tool, arguments, plugin file, risk and
/// schema (a reload in between asks again).
struct PendingApproval {
    call: [u8; 32],
    asked: Instant,
}

/// At most this many approval questions wait for answers; past it the oldest is dropped
/// (its client is asked again when it retries).
const MAX_PENDING: usize = 1024;

/// The approval questions sessionless clients have not answered yet, by request state,
/// each for as long as a client has to answer.
/// With a shared state (many replicas), the questions are kept there instead, so a
/// retry that reaches another replica is answered; if the database cannot be reached the
/// answer does not count (the client is asked again).
pub(super) struct PendingApprovals {
    questions: Mutex<HashMap<String, PendingApproval>>,
    ttl: Duration,
    shared: Option<crate::state::SharedPending>,
}

impl PendingApprovals {
    pub(super) fn new(
        ttl: Duration,
        shared: Option<crate::state::SharedPending>,
    ) -> PendingApprovals {
        PendingApprovals {
            questions: Mutex::new(HashMap::new()),
            ttl,
            shared,
        }
    }

    /// Whether `state` names a question asked, unexpired, for exactly this call; it is
    /// used up either way.
    pub(super) fn take(&self, state: &str, call: &[u8; 32]) -> bool {
        if let Some(local) = self.unexpired().remove(state) {
            return &local.call == call;
        }
        self.shared.as_ref().is_some_and(|shared| {
            shared.take(state, call, self.ttl).unwrap_or_else(|e| {
                tracing::warn!(
                    "an approval answer does not count (the client is asked again): {e}"
                );
                false
            })
        })
    }

    /// Whether `state` names an unexpired approval question (not used up).
    pub(super) fn knows(&self, state: &str) -> bool {
        self.unexpired().contains_key(state)
            || self
                .shared
                .as_ref()
                .is_some_and(|shared| shared.knows(state, self.ttl).unwrap_or(false))
    }

    /// The questions, those past their time dropped.
    fn unexpired(&self) -> std::sync::MutexGuard<'_, HashMap<String, PendingApproval>> {
        let mut pending = self
            .questions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        pending.retain(|_, p| p.asked.elapsed() < self.ttl);
        pending
    }

    pub(super) fn add(&self, call: [u8; 32]) -> String {
        let state = uuid::Uuid::new_v4().simple().to_string();
        if let Some(shared) = &self.shared {
            if let Err(e) = shared.add(&state, call, self.ttl) {
                tracing::warn!("an approval question is kept by this replica only: {e}");
            } else {
                return state;
            }
        }
        let mut pending = self.unexpired();
        if pending.len() >= MAX_PENDING
            && let Some(oldest) = pending
                .iter()
                .min_by_key(|(_, p)| p.asked)
                .map(|(k, _)| k.clone())
        {
            pending.remove(&oldest);
        }
        pending.insert(
            state.clone(),
            PendingApproval {
                call,
                asked: Instant::now(),
            },
        );
        state
    }
}

/// One session's state (a connection, or one sessionless HTTP request).
pub(super) struct SessionState {
    pub(super) shared: Arc<Shared>,
    pub(super) transport: &'static str,
    /// The name of the bearer token the client authenticated with.
    pub(super) token: Option<String>,
    pub(super) session_id: String,
    pub(super) client: Mutex<Option<u64>>,
    pub(super) registered: AtomicBool,
    /// The lowest level of log notifications the client wants (`logging/setLevel`).
    pub(super) log_level: AtomicU8,
    /// Stops this session's list_changed forwarding.
    pub(super) stop: CancellationToken,
    /// What the client said about itself, read at its first call.
    pub(super) facts: std::sync::OnceLock<Arc<ClientFacts>>,
    /// Registry events since `initialize`, until `initialized` starts forwarding them.
    pub(super) events:
        Mutex<Option<tokio::sync::broadcast::Receiver<crate::plugins::catalog::RegistryEvent>>>,
}

/// What a client can do, and who it is to the call door.
pub(super) struct ClientFacts {
    pub(super) can_elicit: bool,
    pub(super) can_sample: bool,
    /// The client can list its roots (`roots/list`).
    pub(super) can_roots: bool,
    /// The client can be asked to open a page (URL elicitation).
    pub(super) can_elicit_url: bool,
    /// A 2026-07-28 client: no server requests, input-required results instead.
    pub(super) sessionless: bool,
    /// The caller its calls come from (transport, token, client name and version).
    pub(super) caller: Arc<Caller>,
    /// The model its calls are reported for: the client's name.
    pub(super) model: String,
}

impl Drop for SessionState {
    fn drop(&mut self) {
        self.stop.cancel();
        if self.transport == "stdio" {
            self.shared.suspended.abandon_connection(&self.session_id);
        }
        self.shared
            .host
            .door()
            .forget_session(&self.shared.profile_name, &self.session_id);
        if let Some(id) = *self
            .client
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
        {
            self.shared.clients.remove(id);
        }
    }
}

impl SessionState {
    /// Shows the client in `toolhost status` from its first request on.
    pub(super) fn register(
        &self,
        protocol: Option<&ProtocolVersion>,
        client: Option<&Implementation>,
    ) {
        if self.registered.swap(true, Ordering::AcqRel) {
            return;
        }
        let id = self.shared.clients.add(ClientEntry {
            transport: self.transport,
            token: self.token.clone(),
            protocol_version: protocol.map_or_else(|| "unknown".to_owned(), |p| p.to_string()),
            client_name: client.map_or_else(|| "unknown".to_owned(), |c| c.name.clone()),
            client_version: client.map_or_else(String::new, |c| c.version.clone()),
            since: Instant::now(),
        });
        *self.client.lock().unwrap_or_else(PoisonError::into_inner) = Some(id);
    }

    /// The client's capabilities and turn, read once per session (a connection, or one
    /// sessionless HTTP request).
    pub(super) fn client_facts(&self, context: &RequestContext<RoleServer>) -> Arc<ClientFacts> {
        let facts = self.facts.get_or_init(|| {
            let capabilities = context.client_capabilities();
            Arc::new(ClientFacts {
                can_elicit: capabilities
                    .as_ref()
                    .is_some_and(|c| c.elicitation.is_some()),
                can_sample: capabilities.as_ref().is_some_and(|c| c.sampling.is_some()),
                can_roots: capabilities.as_ref().is_some_and(|c| c.roots.is_some()),
                can_elicit_url: capabilities
                    .as_ref()
                    .and_then(|c| c.elicitation.as_ref())
                    .is_some_and(|e| e.url.is_some()),
                sessionless: is_sessionless(context.protocol_version().as_ref()),
                caller: Arc::new(Caller {
                    frontend: Frontend::Mcp,
                    // A stdio client is a process this user started.
                    uid: (self.transport == "stdio").then(toolhost_calls::private::effective_uid),
                    token: self.token.clone(),
                    client: context.client_info().map(|c| (c.name, c.version)),
                    traceparent: None,
                }),
                model: context
                    .client_info()
                    .map_or_else(|| "mcp-client".to_owned(), |c| c.name),
            })
        });
        Arc::clone(facts)
    }

    pub(super) fn register_from(&self, context: &RequestContext<RoleServer>) {
        if !self.registered.load(Ordering::Acquire) {
            self.register(
                context.protocol_version().as_ref(),
                context.client_info().as_ref(),
            );
        }
    }
}

fn is_sessionless(protocol: Option<&ProtocolVersion>) -> bool {
    protocol.is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}
