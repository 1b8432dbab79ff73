//! The limits of the MCP HTTP door as settings, with their defaults: what `[mcp]`
//! resolves to (the file's schema says its defaults from here).

use std::time::Duration;

/// The limits of the HTTP door. The defaults suit a desktop and a small team.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpLimits {
    /// Connections served at once; past it the oldest idle one is closed, and when all
    /// are busy new ones wait.
    pub max_connections: usize,
    /// Time a new connection has to finish its TLS handshake and send its first request's
    /// headers; also the time a request has to send its body.
    pub header_read_timeout: Duration,
    /// Time an idle keep-alive connection is kept.
    pub idle_timeout: Duration,
    /// Live MCP sessions; past it the oldest idle session of the token holding the most
    /// is ended.
    pub max_sessions: usize,
    /// Live MCP sessions of one token; past it that token's own oldest idle session is
    /// ended. Without tokens (`--no-auth`) only `max_sessions` applies.
    pub max_sessions_per_token: usize,
    /// Time a session with no requests and no open stream lives.
    pub session_idle: Duration,
    /// The largest request body, in bytes.
    pub max_body_bytes: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_connections: 512,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_sessions: 256,
            max_sessions_per_token: 64,
            session_idle: Duration::from_secs(1800),
            max_body_bytes: 4 * 1024 * 1024,
        }
    }
}
