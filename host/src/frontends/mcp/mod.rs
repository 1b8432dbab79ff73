//! The MCP frontend: serves one profile's tools to MCP clients over stdio or streamable
//! HTTP (rmcp), through the host's dispatcher and approval policy, and tells every
//! connected client when a reload changed the tools (both protocol generations).
//!
//! Two generations of clients are live. Clients that open with `initialize` (protocol up
//! to 2025-11-25) keep a session: they get `notifications/tools/list_changed` pushed on
//! it, and approval questions as `elicitation/create` requests. 2026-07-28 clients are
//! sessionless: they get list_changed on the `subscriptions/listen` stream they open, and
//! approval questions as an input-required result that they answer by retrying the call.
#![allow(
    deprecated,
    reason = "SEP-2577 deprecates MCP logging and sampling, but 2025-11-25 clients (most \
              clients today) still use them"
)]

pub(crate) mod http;
pub(crate) mod tokens;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequest,
    ElicitRequestParams, Implementation, InitializeRequestParams, InitializeResult, InputRequest,
    InputRequiredResult, JsonObject, ListToolsResult, LoggingLevel,
    LoggingMessageNotificationParam, MetaObject, PaginatedRequestParams, ProgressNotificationParam,
    ProgressToken, ProtocolVersion, ServerCapabilities, ServerConfig, ServerNotification,
    SetLevelRequestParams, SubscriptionFilter, ToolAnnotations,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolhost_plugin_api::{
    AskAnswer, AskRequest, LogLevel, SampleAnswer, SampleRequest, ServiceError,
    parse_content_output,
};

use crate::calls::context::{CallerChannel, Turn, TurnIdentity, TurnServices};
use crate::calls::dispatcher::{CallErrorKind, ToolCall};
use crate::calls::policy::{ApprovalAnswer, ApprovalRequest, Approver};
use crate::calls::registry::{RegisteredTool, ToolRegistry};
use crate::calls::tool::{Risk, ToolSpec};
use crate::config::{Profile, WithoutElicitation};
use crate::host::Host;
use crate::text::shorten;

/// The `_meta` key by which a 2026-07-28 request opts in to log lines.
const LOG_LEVEL_META: &str = "io.modelcontextprotocol/logLevel";
/// The key of the approval question in an input-required result.
const APPROVAL_KEY: &str = "toolhost_approval";
/// How long a 2026-07-28 client has to answer an approval question.
const APPROVAL_TTL: Duration = Duration::from_secs(15 * 60);

/// How the MCP frontend runs.
#[derive(Debug, Clone, Default)]
pub struct McpOptions {
    /// The profile whose tools are served; `None`: the host's default profile.
    pub profile: Option<String>,
    /// What happens to calls that need approval when the client cannot be asked.
    pub without_elicitation: WithoutElicitation,
    /// Extra `Host` header values HTTP requests may carry (loopback names always pass).
    pub allowed_hosts: Vec<String>,
}

/// Why the MCP frontend could not run.
#[derive(Debug, thiserror::Error)]
pub enum McpServeError {
    /// `--profile` names a profile the host does not have.
    #[error("this host has no profile '{name}'; its profiles are: {known}")]
    UnknownProfile {
        /// The profile asked for.
        name: String,
        /// The profiles there are.
        known: String,
    },
    /// The HTTP address could not be bound.
    #[error(
        "could not listen on {addr} for MCP over HTTP: {source}; pick a free port with --listen"
    )]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// `--no-auth` on an address other machines can reach.
    #[error(
        "--no-auth is only for loopback addresses (127.0.0.1, ::1), and {addr} is not one: \
         make tokens with `toolhost token add NAME` and serve with them"
    )]
    NoAuthOffLoopback {
        /// The address.
        addr: SocketAddr,
    },
    /// Plain HTTP on an address other machines can reach.
    #[error(
        "listening on {addr}, which other machines can reach, needs TLS: pass --tls-cert FILE \
         --tls-key FILE, or --insecure-http to send tokens and tool calls unencrypted anyway"
    )]
    NeedsTls {
        /// The address.
        addr: SocketAddr,
    },
    /// The TLS certificate or key is unusable.
    #[error("cannot serve MCP over HTTPS: {reason}")]
    Tls {
        /// What is wrong and with which file.
        reason: String,
    },
    /// The stdio session could not start.
    #[error(
        "the MCP session on stdio could not start: {0}; `--mcp stdio` is for MCP clients \
         that start toolhost with pipes on its stdin and stdout"
    )]
    Stdio(String),
    /// The client's stdin/stdout could not be set apart from the plugins'.
    #[error("could not set up stdin/stdout for MCP: {0}")]
    StdioSetup(std::io::Error),
}

/// The MCP client's stdin and stdout, moved off descriptors 0 and 1 so that nothing but the
/// protocol reaches the client: plugins, and the programs they start (an editor, a shell),
/// get `/dev/null` as stdin and the host's stderr as stdout.
pub struct ClientStdio {
    input: std::os::fd::OwnedFd,
    output: std::os::fd::OwnedFd,
}

type BoxedRead = Box<dyn tokio::io::AsyncRead + Send + Unpin>;
type BoxedWrite = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;

impl ClientStdio {
    /// Takes stdin and stdout for the MCP session. Call it once, before plugins load.
    pub fn take() -> std::io::Result<ClientStdio> {
        use std::os::fd::{AsFd as _, AsRawFd as _};
        // Duplicates marked close-on-exec: child processes never inherit the client's pipes.
        let input = std::io::stdin().as_fd().try_clone_to_owned()?;
        let output = std::io::stdout().as_fd().try_clone_to_owned()?;
        let null = std::fs::File::open("/dev/null")?;
        // SAFETY: dup2 on descriptors this process owns (`null` is open; 0, 1 and 2 are the
        // standard streams); it only replaces what 0 and 1 refer to.
        let redirected = unsafe { libc::dup2(null.as_raw_fd(), 0) >= 0 && libc::dup2(2, 1) >= 0 };
        if !redirected {
            return Err(std::io::Error::last_os_error());
        }
        Ok(ClientStdio { input, output })
    }

    /// Pipes go through tokio's non-blocking pipe driver (the way clients start stdio
    /// servers, and the faster path); anything else through the blocking file adapter.
    fn into_transport(self) -> std::io::Result<(BoxedRead, BoxedWrite)> {
        use std::os::unix::fs::FileTypeExt as _;
        use tokio::net::unix::pipe;
        let input = std::fs::File::from(self.input);
        let output = std::fs::File::from(self.output);
        let read: BoxedRead = if input.metadata()?.file_type().is_fifo() {
            Box::new(pipe::Receiver::from_file(input)?)
        } else {
            Box::new(tokio::fs::File::from_std(input))
        };
        let write: BoxedWrite = if output.metadata()?.file_type().is_fifo() {
            Box::new(pipe::Sender::from_file(output)?)
        } else {
            Box::new(tokio::fs::File::from_std(output))
        };
        Ok((read, write))
    }
}

/// A connected MCP client, as `toolhost status` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct McpClientStatus {
    /// `stdio` or `http`.
    pub transport: &'static str,
    /// The name of the bearer token it authenticated with (HTTP).
    pub token: Option<String>,
    /// The protocol version it speaks.
    pub protocol_version: String,
    /// The name it gave (`clientInfo.name`).
    pub client_name: String,
    /// Its version, if it gave one.
    pub client_version: String,
    /// Seconds since it connected.
    pub connected_secs: f64,
}

struct ClientEntry {
    transport: &'static str,
    token: Option<String>,
    protocol_version: String,
    client_name: String,
    client_version: String,
    since: Instant,
}

/// The MCP clients connected to a host.
#[derive(Default)]
pub struct McpClients {
    next: AtomicU64,
    entries: Mutex<BTreeMap<u64, ClientEntry>>,
}

impl McpClients {
    fn add(&self, entry: ClientEntry) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, entry);
        id
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, ClientEntry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The clients connected now.
    pub fn snapshot(&self) -> Vec<McpClientStatus> {
        self.lock()
            .values()
            .map(|e| McpClientStatus {
                transport: e.transport,
                token: e.token.clone(),
                protocol_version: e.protocol_version.clone(),
                client_name: e.client_name.clone(),
                client_version: e.client_version.clone(),
                connected_secs: e.since.elapsed().as_secs_f64(),
            })
            .collect()
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

/// What identifies one call of one tool's code, for binding approvals to it.
fn call_fingerprint(spec: &ToolSpec, sha256: &str, arguments: &Value) -> [u8; 32] {
    use sha2::Digest as _;
    let mut hash = sha2::Sha256::new();
    for part in [
        spec.name.as_bytes(),
        sha256.as_bytes(),
        spec.risk.to_string().as_bytes(),
        spec.schema.to_string().as_bytes(),
        arguments.to_string().as_bytes(),
    ] {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part);
    }
    hash.finalize().into()
}

/// What all sessions of one MCP frontend share.
struct Shared {
    host: Arc<Host>,
    profile: Option<Profile>,
    profile_name: String,
    options: McpOptions,
    /// The profile's view of the registry, rebuilt when the registry changes.
    view: Mutex<Option<(Arc<ToolRegistry>, Arc<ToolRegistry>)>>,
    pending: Mutex<HashMap<String, PendingApproval>>,
    sessions: AtomicU64,
    /// Plugins' host requests (the profile's state folder), when the profile has one.
    requests: Option<Arc<dyn crate::calls::context::HostRequests>>,
}

impl Shared {
    /// The tools this frontend serves (the profile's view of the current registry).
    fn view(&self) -> Arc<ToolRegistry> {
        let full = self.host.catalog().registry();
        let mut cache = self.view.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((seen, view)) = cache.as_ref()
            && Arc::ptr_eq(seen, &full)
        {
            return Arc::clone(view);
        }
        let view = Arc::new(match &self.profile {
            Some(profile) => profile.view(&full).registry,
            None => full.as_ref().clone(),
        });
        *cache = Some((full, Arc::clone(&view)));
        view
    }

    /// Whether `state` names a question asked, unexpired, for exactly this call; it is
    /// used up either way.
    fn take_pending(&self, state: &str, call: &[u8; 32]) -> bool {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        pending.retain(|_, p| p.asked.elapsed() < APPROVAL_TTL);
        pending.remove(state).is_some_and(|p| &p.call == call)
    }

    fn add_pending(&self, call: [u8; 32]) -> String {
        let state = uuid::Uuid::new_v4().simple().to_string();
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        pending.retain(|_, p| p.asked.elapsed() < APPROVAL_TTL);
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

/// Serves a host's tools over MCP. Cheap to clone; every connection gets a session.
#[derive(Clone)]
pub struct McpServer {
    shared: Arc<Shared>,
}

impl McpServer {
    /// A frontend for `host` serving the profile in `options` (default profile if none).
    pub fn new(host: Arc<Host>, options: McpOptions) -> Result<McpServer, McpServeError> {
        let name = options
            .profile
            .clone()
            .unwrap_or_else(|| host.default_profile().to_owned());
        let profile = match host.profile(&name) {
            Some(p) => Some(p.clone()),
            // The default profile may have no directory: it sees every tool.
            None if options.profile.is_none() || name == host.default_profile() => None,
            None => {
                return Err(McpServeError::UnknownProfile {
                    name,
                    known: host.profile_names().join(", "),
                });
            }
        };
        Ok(McpServer {
            shared: Arc::new(Shared {
                host,
                profile: profile.clone(),
                profile_name: name,
                options,
                view: Mutex::new(None),
                pending: Mutex::new(HashMap::new()),
                sessions: AtomicU64::new(0),
                requests: profile.as_ref().map(|p| {
                    Arc::new(crate::calls::context::ProfileRequests::new(
                        p.state_dir.clone(),
                    )) as Arc<dyn crate::calls::context::HostRequests>
                }),
            }),
        })
    }

    /// The host it serves.
    pub fn host(&self) -> &Arc<Host> {
        &self.shared.host
    }

    /// How it was set up.
    pub fn options(&self) -> &McpOptions {
        &self.shared.options
    }

    /// A handler for one connection (stdio) or one HTTP session.
    pub fn session(&self, transport: &'static str) -> McpSession {
        self.session_for(transport, None)
    }

    /// A handler for one HTTP session (or sessionless request) of the client holding the
    /// token named `token` (`None`: no authentication).
    pub fn http_session(&self, token: Option<&str>) -> McpSession {
        self.session_for("http", token.map(str::to_owned))
    }

    fn session_for(&self, transport: &'static str, token: Option<String>) -> McpSession {
        let n = self.shared.sessions.fetch_add(1, Ordering::Relaxed);
        McpSession {
            state: Arc::new(SessionState {
                shared: Arc::clone(&self.shared),
                transport,
                token,
                session_id: format!("mcp-{transport}-{}-{n}", std::process::id()),
                client: Mutex::new(None),
                registered: AtomicBool::new(false),
                log_level: AtomicU8::new(level_rank(LoggingLevel::Info)),
                stop: CancellationToken::new(),
                facts: std::sync::OnceLock::new(),
                events: Mutex::new(None),
            }),
        }
    }

    /// Serves one client on `stdio` (from [`ClientStdio::take`]) until it disconnects or
    /// `stop` is cancelled.
    pub async fn serve_stdio(
        &self,
        stdio: ClientStdio,
        stop: CancellationToken,
    ) -> Result<(), McpServeError> {
        use rmcp::ServiceExt as _;
        let transport = stdio.into_transport().map_err(McpServeError::StdioSetup)?;
        let running = self
            .session("stdio")
            .serve_with_ct(transport, stop.child_token())
            .await
            .map_err(|e| McpServeError::Stdio(e.to_string()))?;
        tokio::select! {
            _ = running.waiting() => {}
            () = stop.cancelled() => {}
        }
        Ok(())
    }
}

/// One client connection (stdio) or HTTP session.
#[derive(Clone)]
pub struct McpSession {
    state: Arc<SessionState>,
}

struct SessionState {
    shared: Arc<Shared>,
    transport: &'static str,
    /// The name of the bearer token the client authenticated with.
    token: Option<String>,
    session_id: String,
    client: Mutex<Option<u64>>,
    registered: AtomicBool,
    /// The lowest level of log notifications the client wants (`logging/setLevel`).
    log_level: AtomicU8,
    /// Stops this session's list_changed forwarding.
    stop: CancellationToken,
    /// What the client said about itself, read at its first call.
    facts: std::sync::OnceLock<Arc<ClientFacts>>,
    /// Registry events since `initialize`, until `initialized` starts forwarding them.
    events: Mutex<Option<tokio::sync::broadcast::Receiver<crate::plugins::catalog::RegistryEvent>>>,
}

/// What a client can do, and the turn its calls run in.
struct ClientFacts {
    can_elicit: bool,
    can_sample: bool,
    /// A 2026-07-28 client: no server requests, input-required results instead.
    sessionless: bool,
    turn: Arc<TurnIdentity>,
}

impl Drop for SessionState {
    fn drop(&mut self) {
        self.stop.cancel();
        self.shared
            .host
            .policy()
            .forget_session(&self.shared.profile_name, &self.session_id);
        if let Some(id) = *self
            .client
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
        {
            self.shared.host.mcp_clients().remove(id);
        }
    }
}

impl SessionState {
    /// Shows the client in `toolhost status` from its first request on.
    fn register(&self, protocol: Option<&ProtocolVersion>, client: Option<&Implementation>) {
        if self.registered.swap(true, Ordering::AcqRel) {
            return;
        }
        let id = self.shared.host.mcp_clients().add(ClientEntry {
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
    fn client_facts(&self, context: &RequestContext<RoleServer>) -> Arc<ClientFacts> {
        let facts = self.facts.get_or_init(|| {
            let capabilities = context.client_capabilities();
            Arc::new(ClientFacts {
                can_elicit: capabilities
                    .as_ref()
                    .is_some_and(|c| c.elicitation.is_some()),
                can_sample: capabilities.as_ref().is_some_and(|c| c.sampling.is_some()),
                sessionless: is_sessionless(context.protocol_version().as_ref()),
                turn: Arc::new(TurnIdentity {
                    profile_id: self.shared.profile_name.clone(),
                    session_id: self.session_id.clone(),
                    model: context
                        .client_info()
                        .map_or_else(|| "mcp-client".to_owned(), |c| c.name),
                }),
            })
        });
        Arc::clone(facts)
    }

    fn register_from(&self, context: &RequestContext<RoleServer>) {
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
    rmcp::model::Tool::new(
        spec.name.clone(),
        spec.description.clone(),
        Arc::new(schema),
    )
    .with_annotations(annotations(spec.risk))
    .with_meta(meta)
}

impl ServerHandler for McpSession {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_logging()
                .enable_tools()
                .enable_tool_list_changed()
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
        let result = self.negotiate_initialize(&request)?;
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
            .availability()
            .visible_specs(&view)
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
}

impl McpSession {
    /// tools/call: through the host's dispatcher, as the session's client.
    async fn call(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.state.register_from(&context);
        let shared = &self.state.shared;
        let view = shared.view();
        let Some(tool) = view.get(&request.name) else {
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
        let facts = self.state.client_facts(&context);
        let arguments = Value::Object(request.arguments.take().unwrap_or_default());
        // Only calls that need approval get an approver of their own (read tools run under
        // the host's policy, which never asks).
        let approver = (tool.spec().risk != Risk::Read).then(|| {
            Arc::new(McpApprover::new(
                &self.state,
                &request,
                tool,
                &arguments,
                &context.peer,
                &facts,
            ))
        });
        // Only a sessionless client's question is built after the call (it is answered by
        // a retry); keep its arguments for it.
        let asked_with = approver
            .as_ref()
            .filter(|_| facts.sessionless)
            .map(|_| arguments.clone());
        // 2026-07-28 clients opt in to log lines per request; session clients with
        // logging/setLevel (default: info).
        let log_level = if facts.sessionless {
            context
                .meta
                .get(LOG_LEVEL_META)
                .and_then(|v| serde_json::from_value::<LoggingLevel>(v.clone()).ok())
                .map(level_rank)
        } else {
            Some(self.state.log_level.load(Ordering::Relaxed))
        };
        let caller = Arc::new(McpCaller {
            peer: context.peer.clone(),
            progress_token: context.meta.get_progress_token(),
            can_elicit: facts.can_elicit && !facts.sessionless,
            can_sample: facts.can_sample && !facts.sessionless,
            log_level,
            runtime: tokio::runtime::Handle::current(),
            sender: Mutex::new(None),
        });
        // The call stops when the client cancels the request, or when the host shuts down.
        let cancel = shared.host.call_token();
        let turn = Turn {
            info: Arc::clone(&facts.turn),
            cancel: cancel.clone(),
            services: TurnServices {
                child_turns: None,
                caller: Some(Arc::clone(&caller) as Arc<dyn CallerChannel>),
                requests: shared.requests.clone(),
            },
        };
        let call = ToolCall {
            // Only echoed in the dispatcher's result, which MCP does not return.
            id: String::new(),
            name: tool.spec().name.clone(),
            arguments,
        };
        let dispatcher = match &approver {
            None => shared.host.dispatcher().clone(),
            Some(approver) => {
                let policy = shared
                    .host
                    .policy()
                    .with_approver(Arc::clone(approver) as Arc<dyn Approver>);
                shared.host.dispatcher().with_policy(Arc::new(policy))
            }
        };
        // The dispatcher's future is large; boxed, the state rmcp moves into a task and
        // polls stays small (measured: ~850 fewer instructions per call).
        let mut dispatch = Box::pin(dispatcher.call(&view, &turn, call));
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

        if let (Some(approver), Some(arguments)) = (&approver, &asked_with)
            && approver.needs_input.load(Ordering::Acquire)
            && let Some(question) = approver.input_required(tool.spec(), arguments)
        {
            return Ok(question.into());
        }
        if result.is_error {
            let mut message = result.output;
            if result.error == Some(CallErrorKind::InvalidArgs) {
                message = format!(
                    "{message} (check the arguments against the inputSchema of '{}')",
                    request.name
                );
            }
            return Ok(CallToolResult::error(vec![ContentBlock::text(message)]).into());
        }
        let content = match parse_content_output(&result.output) {
            Some(blocks) => blocks
                .into_iter()
                .map(|b| {
                    serde_json::to_value(&b)
                        .and_then(serde_json::from_value::<ContentBlock>)
                        .unwrap_or_else(|e| {
                            ContentBlock::text(format!("(content block not representable: {e})"))
                        })
                })
                .collect(),
            None => vec![ContentBlock::text(result.output)],
        };
        Ok(CallToolResult::success(content).into())
    }
}

/// Asks an MCP client's user to approve a call: an `elicitation/create` request on a
/// session, an input-required result for a sessionless 2026-07-28 client, else the
/// configured answer.
struct McpApprover {
    mode: ApproverMode,
    needs_input: AtomicBool,
    shared: Arc<Shared>,
    /// Whether "for the rest of the session" is offered: the policy remembers, and the
    /// session outlives this call (a sessionless HTTP request does not).
    offer_remember: bool,
}

enum ApproverMode {
    /// A session client that supports elicitation.
    Elicit(Peer<RoleServer>),
    /// A sessionless client that supports elicitation, answering (or not yet) on retry;
    /// its answer counts only for `call` (see [`call_fingerprint`]).
    InputRequired {
        answer: Option<ApprovalAnswer>,
        call: [u8; 32],
    },
    /// The client cannot be asked.
    Configured(WithoutElicitation),
}

impl McpApprover {
    fn new(
        session: &SessionState,
        request: &CallToolRequestParams,
        tool: &RegisteredTool,
        arguments: &Value,
        peer: &Peer<RoleServer>,
        facts: &ClientFacts,
    ) -> McpApprover {
        let shared = Arc::clone(&session.shared);
        let mode = match (facts.can_elicit, facts.sessionless) {
            (true, false) => ApproverMode::Elicit(peer.clone()),
            (true, true) => {
                let call = call_fingerprint(tool.spec(), tool.tool().origin().sha256(), arguments);
                let answer = match (&request.request_state, &request.input_responses) {
                    (Some(state), Some(responses)) if shared.take_pending(state, &call) => {
                        Some(match responses.get(APPROVAL_KEY) {
                            Some(answer) => approval_from_elicit_result(answer),
                            None => ApprovalAnswer::Decline(
                                "the client retried without answering the approval question"
                                    .to_owned(),
                            ),
                        })
                    }
                    _ => None,
                };
                ApproverMode::InputRequired { answer, call }
            }
            _ => ApproverMode::Configured(shared.options.without_elicitation),
        };
        let offer_remember =
            shared.host.policy().remembers() && !(session.transport == "http" && facts.sessionless);
        McpApprover {
            mode,
            needs_input: AtomicBool::new(false),
            shared,
            offer_remember,
        }
    }

    /// The question for a sessionless client, to answer by retrying the call (`None` for
    /// the other kinds of client, which are asked while the call waits).
    fn input_required(&self, spec: &ToolSpec, arguments: &Value) -> Option<InputRequiredResult> {
        let ApproverMode::InputRequired { call, .. } = &self.mode else {
            return None;
        };
        let state = self.shared.add_pending(*call);
        let question = approval_question(&spec.name, spec.risk, arguments);
        let mut requests = BTreeMap::new();
        if let Ok(request) = elicit_request(&question, approval_schema(self.offer_remember)) {
            requests.insert(APPROVAL_KEY.to_owned(), InputRequest::Elicitation(request));
        }
        Some(InputRequiredResult::new(Some(requests), Some(state)))
    }
}

/// The question a person approves a call by. Every argument is shown: when they are long,
/// each field is cut short on its own, so no field can hide behind another.
fn approval_question(tool: &str, risk: Risk, arguments: &Value) -> String {
    const WHOLE: usize = 2000;
    const FIELD: usize = 300;
    let full = arguments.to_string();
    let shown = if full.chars().count() <= WHOLE {
        full
    } else if let Value::Object(fields) = arguments {
        fields
            .iter()
            .map(|(k, v)| format!("{k}: {}", shorten(&v.to_string(), FIELD)))
            .collect::<Vec<_>>()
            .join("\n")
    } else {
        shorten(&full, WHOLE)
    };
    format!("Allow the tool '{tool}' (risk: {risk}) to run with these arguments?\n{shown}")
}

fn approval_schema(offer_remember: bool) -> Value {
    let mut properties = serde_json::Map::new();
    if offer_remember {
        properties.insert(
            "remember".to_owned(),
            json!({
                "type": "boolean",
                "title": "Allow this tool for the rest of the session",
                "default": false
            }),
        );
    }
    json!({"type": "object", "properties": properties})
}

fn elicit_request(message: &str, schema: Value) -> Result<ElicitRequest, String> {
    let params = elicit_params(message, schema)?;
    Ok(ElicitRequest::new(params))
}

fn elicit_params(message: &str, schema: Value) -> Result<ElicitRequestParams, String> {
    serde_json::from_value(json!({
        "mode": "form",
        "message": message,
        "requestedSchema": schema,
    }))
    .map_err(|e| format!("the question's schema cannot be shown as a form: {e}"))
}

fn approval_from_elicit_result(answer: &Value) -> ApprovalAnswer {
    match answer.get("action").and_then(Value::as_str) {
        Some("accept") => {
            let remember = answer
                .pointer("/content/remember")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            if remember {
                ApprovalAnswer::ApproveForSession
            } else {
                ApprovalAnswer::Approve
            }
        }
        Some("decline") => ApprovalAnswer::Decline("the user declined".to_owned()),
        Some("cancel") => {
            ApprovalAnswer::Decline("the user dismissed the approval question".to_owned())
        }
        _ => ApprovalAnswer::Decline(format!(
            "the client's answer to the approval question was malformed: {answer}"
        )),
    }
}

#[async_trait]
impl Approver for McpApprover {
    async fn ask(&self, request: &ApprovalRequest) -> ApprovalAnswer {
        match &self.mode {
            ApproverMode::Elicit(peer) => {
                let question = approval_question(&request.tool, request.risk, &request.arguments);
                let params = match elicit_params(&question, approval_schema(self.offer_remember)) {
                    Ok(p) => p,
                    Err(e) => return ApprovalAnswer::Decline(e),
                };
                match peer
                    .create_elicitation_with_timeout(params, Some(APPROVAL_TTL))
                    .await
                {
                    Ok(result) => match serde_json::to_value(&result) {
                        Ok(answer) => approval_from_elicit_result(&answer),
                        Err(e) => ApprovalAnswer::Decline(format!("unreadable answer: {e}")),
                    },
                    Err(rmcp::ServiceError::Timeout { .. }) => ApprovalAnswer::Decline(
                        "the user did not answer the approval question within 15 minutes; \
                         call the tool again to be asked again"
                            .to_owned(),
                    ),
                    Err(e) => ApprovalAnswer::Decline(format!(
                        "the approval question could not be asked: {e}"
                    )),
                }
            }
            ApproverMode::InputRequired {
                answer: Some(answer),
                ..
            } => answer.clone(),
            ApproverMode::InputRequired { answer: None, .. } => {
                self.needs_input.store(true, Ordering::Release);
                ApprovalAnswer::Decline("waiting for the user's approval".to_owned())
            }
            ApproverMode::Configured(WithoutElicitation::Approve) => ApprovalAnswer::Approve,
            ApproverMode::Configured(WithoutElicitation::Refuse) => {
                ApprovalAnswer::Decline(format!(
                    "this MCP client cannot ask its user (it does not support elicitation). \
                     To allow such calls, set `without_elicitation = \"approve\"` under [mcp] \
                     in the toolhost config (the client then decides whether to ask), or \
                     lower this tool's risk with [tools.{}] risk = \"read\" and \
                     allow_lower = true",
                    request.tool
                ))
            }
        }
    }
}

/// Routes a call's progress, log lines, questions and sampling to the MCP client.
struct McpCaller {
    peer: Peer<RoleServer>,
    progress_token: Option<ProgressToken>,
    can_elicit: bool,
    can_sample: bool,
    /// The lowest log level the client wants for this call; `None`: no log lines.
    log_level: Option<u8>,
    /// Plugins may report from threads of their own; the sender task is spawned here.
    runtime: tokio::runtime::Handle,
    /// Notifications go out in order through one task, started at the first one; a full
    /// queue (a client slower than a chatty tool) drops the newest.
    sender: Mutex<
        Option<(
            mpsc::Sender<ServerNotification>,
            tokio::task::JoinHandle<()>,
        )>,
    >,
}

/// How many notifications of one call may wait to be sent.
const NOTIFICATION_QUEUE: usize = 256;

impl McpCaller {
    fn send(&self, notification: ServerNotification) {
        let mut sender = self.sender.lock().unwrap_or_else(PoisonError::into_inner);
        let (tx, _) = sender.get_or_insert_with(|| {
            let (tx, mut rx) = mpsc::channel::<ServerNotification>(NOTIFICATION_QUEUE);
            let peer = self.peer.clone();
            let task = self.runtime.spawn(async move {
                while let Some(n) = rx.recv().await {
                    if peer.send_notification(n).await.is_err() {
                        break;
                    }
                }
            });
            (tx, task)
        });
        let _ = tx.try_send(notification);
    }

    /// Waits until every notification sent so far is out (at most 5 s; what is left then
    /// is dropped, so nothing goes out after the result).
    async fn flush(&self) {
        let taken = self
            .sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some((tx, mut task)) = taken {
            drop(tx);
            if tokio::time::timeout(Duration::from_secs(5), &mut task)
                .await
                .is_err()
            {
                task.abort();
            }
        }
    }
}

fn level_rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        _ => 7,
    }
}

#[async_trait]
impl CallerChannel for McpCaller {
    fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let Some(token) = &self.progress_token else {
            return;
        };
        let mut param = ProgressNotificationParam::new(token.clone(), progress);
        if let Some(total) = total {
            param = param.with_total(total);
        }
        if let Some(message) = message {
            param = param.with_message(message);
        }
        self.send(ServerNotification::ProgressNotification(
            rmcp::model::ProgressNotification::new(param),
        ));
    }

    fn log(&self, level: LogLevel, tool: &str, message: &str) {
        let level = match level {
            LogLevel::ERROR => LoggingLevel::Error,
            LogLevel::WARN => LoggingLevel::Warning,
            LogLevel::INFO => LoggingLevel::Info,
            _ => LoggingLevel::Debug,
        };
        if self.log_level.is_none_or(|min| level_rank(level) < min) {
            return;
        }
        let param = LoggingMessageNotificationParam::new(level, json!(message))
            .with_logger(tool.to_owned());
        self.send(ServerNotification::LoggingMessageNotification(
            rmcp::model::LoggingMessageNotification::new(param),
        ));
    }

    async fn ask_user(&self, request: AskRequest) -> Result<AskAnswer, ServiceError> {
        if !self.can_elicit {
            return Err(ServiceError::Unavailable(
                "this MCP client cannot be asked questions during a call (it does not support \
                 elicitation, or speaks the sessionless 2026-07-28 protocol)"
                    .to_owned(),
            ));
        }
        let params =
            elicit_params(&request.message, request.schema).map_err(ServiceError::Failed)?;
        let result = self
            .peer
            .create_elicitation(params)
            .await
            .map_err(|e| ServiceError::Failed(format!("the client did not answer: {e}")))?;
        serde_json::to_value(&result)
            .and_then(serde_json::from_value)
            .map_err(|e| ServiceError::Failed(format!("the client's answer was malformed: {e}")))
    }

    async fn sample(&self, request: SampleRequest) -> Result<SampleAnswer, ServiceError> {
        if !self.can_sample {
            return Err(ServiceError::Unavailable(
                "this MCP client offers no model to sample from (no sampling capability)"
                    .to_owned(),
            ));
        }
        let mut params = json!({
            "messages": [{"role": "user", "content": {"type": "text", "text": request.prompt}}],
            "maxTokens": request.max_tokens,
        });
        if let Some(system) = request.system {
            params["systemPrompt"] = json!(system);
        }
        let params = serde_json::from_value(params)
            .map_err(|e| ServiceError::Failed(format!("malformed sampling request: {e}")))?;
        #[allow(
            deprecated,
            reason = "sampling is how MCP tools reach the client's model"
        )]
        let result =
            self.peer.create_message(params).await.map_err(|e| {
                ServiceError::Failed(format!("the client's model did not answer: {e}"))
            })?;
        let result =
            serde_json::to_value(&result).map_err(|e| ServiceError::Failed(e.to_string()))?;
        let text = match result.pointer("/content") {
            Some(Value::Array(blocks)) => blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(""),
            Some(block) => block
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            None => String::new(),
        };
        Ok(SampleAnswer {
            text,
            model: result
                .get("model")
                .and_then(Value::as_str)
                .map(str::to_owned),
        })
    }
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

    #[test]
    fn elicitation_answers_become_approvals() {
        let accept = json!({"action": "accept", "content": {"remember": false}});
        assert_eq!(
            approval_from_elicit_result(&accept),
            ApprovalAnswer::Approve
        );
        let session = json!({"action": "accept", "content": {"remember": true}});
        assert_eq!(
            approval_from_elicit_result(&session),
            ApprovalAnswer::ApproveForSession
        );
        for refused in [
            json!({"action": "decline"}),
            json!({"action": "cancel"}),
            json!(3),
        ] {
            assert!(matches!(
                approval_from_elicit_result(&refused),
                ApprovalAnswer::Decline(_)
            ));
        }
    }

    #[test]
    fn the_approval_question_is_a_valid_form() {
        for remember in [true, false] {
            assert!(elicit_params("Allow?", approval_schema(remember)).is_ok());
            assert!(elicit_request("Allow?", approval_schema(remember)).is_ok());
        }
        assert!(!approval_schema(false).to_string().contains("remember"));
    }

    #[test]
    fn long_arguments_show_every_field() {
        let args = json!({"aaa": "x".repeat(5000), "command": "rm -rf /"});
        let question = approval_question("shell", Risk::Destructive, &args);
        assert!(question.contains("command: \"rm -rf /\""), "{question}");
        assert!(question.contains("more characters"), "{question}");
        assert!(question.len() < 1000, "{}", question.len());
    }

    #[test]
    fn clients_come_and_go() {
        let clients = McpClients::default();
        let id = clients.add(ClientEntry {
            transport: "stdio",
            token: None,
            protocol_version: "2025-11-25".to_owned(),
            client_name: "c".to_owned(),
            client_version: "1".to_owned(),
            since: Instant::now(),
        });
        assert_eq!(clients.snapshot()[0].client_name, "c");
        clients.remove(id);
        assert!(clients.snapshot().is_empty());
    }
}
