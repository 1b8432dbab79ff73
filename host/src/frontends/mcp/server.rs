//! The MCP server: what all sessions of one frontend share (the host, the profile's view
//! of the registry, pending approvals) and the sessions it hands out per connection.

#![allow(
    deprecated,
    reason = "SEP-2577 deprecates MCP logging and sampling, but 2025-11-25 clients (most \
              clients today) still use them"
)]

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use rmcp::model::LoggingLevel;
use tokio_util::sync::CancellationToken;

use crate::host::{ClientDirectory, Host};

use super::caller::level_rank;
use super::clients::McpClients;
use super::session::McpSession;
use super::state::{PendingApprovals, SessionState, Shared};
use super::stdio::ClientStdio;
use super::{McpOptions, McpServeError};

/// Serves a host's tools over MCP. Cheap to clone; every connection gets a session.
#[derive(Clone)]
pub struct McpServer {
    shared: Arc<Shared>,
}

impl McpServer {
    /// A frontend for `host` serving the profile in `options` (default profile if none).
    pub fn new(host: Arc<Host>, options: McpOptions) -> Result<McpServer, McpServeError> {
        // The default profile may have no entry in the config: it sees every tool.
        let scope = host.door().scope(options.profile.as_deref()).map_err(|e| {
            McpServeError::UnknownProfile {
                name: e.name,
                known: e.known,
            }
        })?;
        let clients = Arc::new(McpClients::default());
        let answer_within = options.answer_within();
        host.register_clients(Arc::downgrade(&clients) as Weak<dyn ClientDirectory>);
        // Many replicas: approval questions are kept where every replica reads them, and
        // a plugin's waiting call says which replica it waits on.
        let shared_pending = host
            .shared_state()
            .map(|s| crate::state::SharedPending::new(Arc::clone(s)));
        let replica = host.shared_state().map(|s| s.replica().to_owned());
        Ok(McpServer {
            shared: Arc::new(Shared {
                host,
                clients,
                profile_name: scope.name,
                options,
                pending: PendingApprovals::new(answer_within, shared_pending),
                suspended: super::suspended::SuspendedCalls::new(answer_within, replica.clone()),
                tasks: super::tasks::Tasks::new(replica),
                sessions: AtomicU64::new(0),
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
        let (read, write) = stdio.into_transport().map_err(McpServeError::StdioSetup)?;
        self.serve_pipes(read, write, stop).await
    }

    /// Serves one stdio-style client on `read` and `write` (the client's pipes, or an
    /// in-memory pair for the fuzz targets) until it disconnects or `stop` is cancelled.
    pub(crate) async fn serve_pipes<R, W>(
        &self,
        read: R,
        write: W,
        stop: CancellationToken,
    ) -> Result<(), McpServeError>
    where
        R: tokio::io::AsyncRead + Send + Unpin + 'static,
        W: tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        use rmcp::ServiceExt as _;
        let running = self
            .session("stdio")
            .serve_with_ct(
                super::client_lines::ClientLines::new(read, write),
                stop.child_token(),
            )
            .await
            .map_err(|e| McpServeError::Stdio(e.to_string()))?;
        tokio::select! {
            _ = running.waiting() => {}
            () = stop.cancelled() => {}
        }
        Ok(())
    }
}
