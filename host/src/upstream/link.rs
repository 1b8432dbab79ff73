//! What the rest of the host shares with one MCP server's supervisor: the live
//! connection's peer (none while the server is down), where the server is (for status
//! and for the error a call gets while it is down), its calls in flight, its tools as last
//! and the signal that lifts a quarantine.

use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use rmcp::service::{Peer, RoleClient};
use serde::{Deserialize, Serialize};

use super::client::Flights;

/// Where a server is, for status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ServerState {
    /// Connecting.
    Starting,
    /// Connected and serving.
    Running {
        /// A stdio server's process id.
        #[serde(skip_serializing_if = "Option::is_none")]
        pid: Option<u32>,
        /// The protocol version agreed.
        protocol: String,
        /// What the server calls itself (`name version`).
        server: String,
    },
    /// Down; starting again after the backoff.
    Restarting {
        /// Why it went down.
        reason: String,
    },
    /// Down until `toolhost reload`: it failed too often.
    Quarantined {
        /// Why.
        reason: String,
    },
    /// Stopped (removed from the config, or the host is stopping).
    Stopped,
}

/// What the rest of the host shares with a server's supervisor.
pub(crate) struct Link {
    /// The server's name.
    pub(crate) name: Arc<str>,
    /// Its calls in flight.
    pub(crate) flights: Arc<Flights>,
    peer: RwLock<Option<Peer<RoleClient>>>,
    state: tokio::sync::watch::Sender<ServerState>,
    pub(crate) last_words: Mutex<String>,
    pub(crate) restarts: Mutex<u64>,
    /// What holds a stdio server's processes, for status.
    containment: Mutex<Option<String>>,
    /// Woken by `toolhost reload` to lift a quarantine.
    pub(crate) lift: tokio::sync::Notify,
    /// What happens while it is down: a stdio server is "started again", an HTTP one
    /// "reconnected" (nothing of it is started here).
    comes_back: &'static str,
}

impl Link {
    /// The link to the server `name`; `http`: one reached over HTTP (reconnected, not
    /// started again, while it is down).
    pub(crate) fn new(name: &str, http: bool) -> Arc<Link> {
        Arc::new(Link {
            name: Arc::from(name),
            flights: Arc::default(),
            peer: RwLock::new(None),
            state: tokio::sync::watch::Sender::new(ServerState::Starting),
            last_words: Mutex::new(String::new()),
            restarts: Mutex::new(0),
            containment: Mutex::new(None),
            lift: tokio::sync::Notify::new(),
            comes_back: if http { "reconnected" } else { "started again" },
        })
    }

    /// The live connection's peer, if connected.
    pub(crate) fn peer(&self) -> Option<Peer<RoleClient>> {
        self.peer
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn set_peer(&self, peer: Option<Peer<RoleClient>>) {
        *self.peer.write().unwrap_or_else(PoisonError::into_inner) = peer;
    }

    /// Where it is now.
    pub(crate) fn state(&self) -> ServerState {
        self.state.borrow().clone()
    }

    pub(crate) fn set_state(&self, state: ServerState) {
        self.state.send_replace(state);
    }

    /// Waits, at most `limit`, until its first connection is made or has failed.
    pub(crate) async fn settled(&self, limit: Duration) {
        let mut rx = self.state.subscribe();
        let _ =
            tokio::time::timeout(limit, rx.wait_for(|s| !matches!(s, ServerState::Starting))).await;
    }

    /// Its supervisor ended with `reason` (it panicked): down until `toolhost reload`.
    pub(crate) fn failed(&self, reason: String) {
        self.set_peer(None);
        self.set_state(ServerState::Quarantined { reason });
    }

    /// What holds its processes now (`cgroup v1 PATH`, `process group`).
    pub(crate) fn containment(&self) -> Option<String> {
        self.containment
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn set_containment(&self, containment: Option<String>) {
        *self
            .containment
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = containment;
    }

    /// Restarts since the host started it.
    pub(crate) fn restarts(&self) -> u64 {
        *self.restarts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `; it said: ...` from the last connection's standard error.
    pub(crate) fn last_words(&self) -> String {
        self.last_words
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Why a call cannot reach it now.
    pub(crate) fn unavailable(&self) -> String {
        match self.state() {
            ServerState::Starting => format!(
                "the MCP server '{}' is starting; try the call again shortly",
                self.name
            ),
            ServerState::Restarting { reason } => format!(
                "the MCP server '{}' is down ({reason}) and is being {}; try the call again \
                 shortly",
                self.name, self.comes_back
            ),
            ServerState::Quarantined { reason } => format!(
                "the MCP server '{}' is quarantined ({reason}); its tools are refused until \
                 an operator runs `toolhost reload`",
                self.name
            ),
            ServerState::Stopped => format!("the MCP server '{}' was stopped", self.name),
            ServerState::Running { .. } => format!(
                "the MCP server '{}' is down (its connection ended) and is being {}; try \
                 the call again shortly",
                self.name, self.comes_back
            ),
        }
    }
}
