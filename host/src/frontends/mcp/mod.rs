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

mod approval;
mod caller;
mod client_lines;
mod clients;
pub(crate) mod http;
pub(crate) mod outputs;
mod screen;
mod server;
mod session;
mod state;
mod stdio;
mod suspended;
mod tasks;
pub(crate) mod tokens;

use std::net::SocketAddr;

use crate::config::WithoutElicitation;

pub use clients::McpClients;
pub use server::McpServer;
pub use session::McpSession;
pub use stdio::ClientStdio;

/// How the MCP frontend runs.
#[derive(Debug, Clone, Default)]
pub struct McpOptions {
    /// The profile whose tools are served; `None`: the host's default profile.
    pub profile: Option<String>,
    /// What happens to calls that need approval when the client cannot be asked.
    pub without_elicitation: WithoutElicitation,
    /// How long such a call waits for a terminal's answer (`WithoutElicitation::Terminal`;
    /// zero means the default, 120 s).
    pub terminal_approval: std::time::Duration,
    /// How long a client has to answer what it is asked during a call (`[mcp]
    /// client_answer_secs`; zero means the default, 15 minutes).
    pub client_answer: std::time::Duration,
}

impl McpOptions {
    /// How long a client has to answer (the default for zero).
    pub(crate) fn answer_within(&self) -> std::time::Duration {
        if self.client_answer.is_zero() {
            crate::config::DEFAULT_CLIENT_ANSWER
        } else {
            self.client_answer
        }
    }
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
    /// `[mcp.oauth]` cannot be served.
    #[error("cannot check OAuth access tokens ([mcp.oauth]): {reason}")]
    OAuth {
        /// Why.
        reason: String,
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
