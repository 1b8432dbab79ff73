//! The table of connected MCP clients that `toolhost status` shows. The host offers a
//! registration for such tables ([`ClientDirectory`]); this is MCP's, registered by each
//! [`super::McpServer`], so the host never names an MCP type.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use crate::host::{ClientDirectory, ConnectedClient};

pub(super) struct ClientEntry {
    pub(super) transport: &'static str,
    pub(super) token: Option<String>,
    pub(super) protocol_version: String,
    pub(super) client_name: String,
    pub(super) client_version: String,
    pub(super) since: Instant,
}

/// The MCP clients connected through one MCP server.
#[derive(Default)]
pub struct McpClients {
    next: AtomicU64,
    entries: Mutex<BTreeMap<u64, ClientEntry>>,
}

impl McpClients {
    pub(super) fn add(&self, entry: ClientEntry) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, entry);
        id
    }

    pub(super) fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, ClientEntry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl ClientDirectory for McpClients {
    fn connected(&self) -> Vec<ConnectedClient> {
        self.lock()
            .values()
            .map(|e| ConnectedClient {
                transport: e.transport.to_owned(),
                token: e.token.clone(),
                protocol_version: e.protocol_version.clone(),
                client_name: e.client_name.clone(),
                client_version: e.client_version.clone(),
                connected_secs: e.since.elapsed().as_secs_f64(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(clients.connected()[0].client_name, "c");
        clients.remove(id);
        assert!(clients.connected().is_empty());
    }
}
