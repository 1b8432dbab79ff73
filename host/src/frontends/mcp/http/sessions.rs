//! The session table: at most `max_sessions` MCP sessions and `per_token` of each token,
//! a token over its quota ending its own least recently used idle session (and a full
//! table that of the token holding the most), idle expiry, and the session manager that
//! keeps it up to date. One token can never end another's sessions by opening its own
//! while the other stays within its fair share.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use rmcp::transport::WorkerTransport;
use rmcp::transport::streamable_http_server::SessionId;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, LocalSessionWorker,
};
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionManager};

/// The live MCP sessions of every token of a door: for the session limit (oldest idle
/// one ended first) and idle expiry.
pub(super) struct SessionTable {
    max: usize,
    per_token: usize,
    entries: Mutex<HashMap<SessionId, SessionEntry>>,
}

pub(super) struct SessionEntry {
    manager: Arc<LocalSessionManager>,
    last_used: Instant,
    open_streams: usize,
}

impl SessionTable {
    pub(super) fn new(max: usize, per_token: usize) -> SessionTable {
        SessionTable {
            max: max.max(1),
            per_token: per_token.max(1),
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, SessionEntry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn touch(&self, id: &SessionId) {
        if let Some(e) = self.lock().get_mut(id) {
            e.last_used = Instant::now();
        }
    }

    /// Makes room for one more session of the token whose sessions `manager` holds: at
    /// its quota, its own least recently used session without an open stream (else its
    /// least recently used one) is taken out, to be closed; else, with the table full,
    /// the same one of the token holding the most sessions (which is this token when it
    /// holds as many as any other).
    fn make_room(
        &self,
        manager: &Arc<LocalSessionManager>,
    ) -> Option<(Arc<LocalSessionManager>, SessionId)> {
        let mut entries = self.lock();
        let mut held: Vec<(&Arc<LocalSessionManager>, usize)> = Vec::new();
        for e in entries.values() {
            match held.iter_mut().find(|(m, _)| Arc::ptr_eq(m, &e.manager)) {
                Some((_, n)) => *n += 1,
                None => held.push((&e.manager, 1)),
            }
        }
        let own = held
            .iter()
            .find(|(m, _)| Arc::ptr_eq(m, manager))
            .map_or(0, |(_, n)| *n);
        let owner = if own >= self.per_token {
            Arc::clone(manager)
        } else if entries.len() >= self.max {
            let most = held.iter().map(|(_, n)| *n).max().unwrap_or(0);
            if own == most {
                Arc::clone(manager)
            } else {
                let (m, _) = held.iter().find(|(_, n)| *n == most)?;
                Arc::clone(m)
            }
        } else {
            return None;
        };
        let victim = entries
            .iter()
            .filter(|(_, e)| Arc::ptr_eq(&e.manager, &owner))
            .min_by_key(|(_, e)| (e.open_streams > 0, e.last_used))
            .map(|(id, _)| id.clone())?;
        entries.remove(&victim).map(|e| (e.manager, victim))
    }

    pub(super) fn expired(&self, idle: Duration) -> Vec<(Arc<LocalSessionManager>, SessionId)> {
        let mut entries = self.lock();
        let gone: Vec<SessionId> = entries
            .iter()
            .filter(|(_, e)| e.open_streams == 0 && e.last_used.elapsed() > idle)
            .map(|(id, _)| id.clone())
            .collect();
        gone.into_iter()
            .filter_map(|id| entries.remove(&id).map(|e| (e.manager, id)))
            .collect()
    }

    pub(super) fn owned_by(&self, manager: &Arc<LocalSessionManager>) -> Vec<SessionId> {
        let mut entries = self.lock();
        let ids: Vec<SessionId> = entries
            .iter()
            .filter(|(_, e)| Arc::ptr_eq(&e.manager, manager))
            .map(|(id, _)| id.clone())
            .collect();
        for id in &ids {
            entries.remove(id);
        }
        ids
    }
}

/// rmcp's in-memory session manager, with every session counted in the door's table.
pub(super) struct TrackedSessions {
    pub(super) inner: Arc<LocalSessionManager>,
    pub(super) table: Arc<SessionTable>,
}

impl TrackedSessions {
    fn tracked<S>(&self, id: &SessionId, stream: S) -> TrackedStream
    where
        S: futures_core::Stream<Item = ServerSseMessage> + Send + Sync + 'static,
    {
        if let Some(e) = self.table.lock().get_mut(id) {
            e.open_streams += 1;
            e.last_used = Instant::now();
        }
        TrackedStream {
            inner: Box::pin(stream),
            table: Arc::clone(&self.table),
            id: id.clone(),
        }
    }
}

/// A response stream of a session; while it is open the session is not idle.
pub(super) struct TrackedStream {
    inner: Pin<Box<dyn futures_core::Stream<Item = ServerSseMessage> + Send + Sync>>,
    table: Arc<SessionTable>,
    id: SessionId,
}

impl futures_core::Stream for TrackedStream {
    type Item = ServerSseMessage;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ServerSseMessage>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl Drop for TrackedStream {
    fn drop(&mut self) {
        if let Some(e) = self.table.lock().get_mut(&self.id) {
            e.open_streams = e.open_streams.saturating_sub(1);
            e.last_used = Instant::now();
        }
    }
}

impl SessionManager for TrackedSessions {
    type Error = LocalSessionManagerError;
    type Transport = WorkerTransport<LocalSessionWorker>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        if let Some((manager, id)) = self.table.make_room(&self.inner) {
            tracing::info!(
                session = %id,
                "MCP session limit reached: ending the oldest idle session of the token \
                 holding the most"
            );
            let _ = manager.close_session(&id).await;
        }
        let (id, transport) = self.inner.create_session().await?;
        self.table.lock().insert(
            id.clone(),
            SessionEntry {
                manager: Arc::clone(&self.inner),
                last_used: Instant::now(),
                open_streams: 0,
            },
        );
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: rmcp::model::ClientJsonRpcMessage,
    ) -> Result<rmcp::model::ServerJsonRpcMessage, Self::Error> {
        self.table.touch(id);
        self.inner.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.inner.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.table.lock().remove(id);
        self.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: rmcp::model::ClientJsonRpcMessage,
    ) -> Result<
        impl futures_core::Stream<Item = ServerSseMessage> + Send + Sync + 'static,
        Self::Error,
    > {
        let stream = self.inner.create_stream(id, message).await?;
        Ok(self.tracked(id, stream))
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: rmcp::model::ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.table.touch(id);
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<
        impl futures_core::Stream<Item = ServerSseMessage> + Send + Sync + 'static,
        Self::Error,
    > {
        let stream = self.inner.create_standalone_stream(id).await?;
        Ok(self.tracked(id, stream))
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<
        impl futures_core::Stream<Item = ServerSseMessage> + Send + Sync + 'static,
        Self::Error,
    > {
        let stream = self.inner.resume(id, last_event_id).await?;
        Ok(self.tracked(id, stream))
    }
}
