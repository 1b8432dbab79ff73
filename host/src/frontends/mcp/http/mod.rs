//! The HTTP door of the MCP frontend: the listener, optional TLS, bearer-token
//! authentication, and the limits that keep one client (or someone without a token) from
//! starving the others: connections, header and body read time, idle keep-alive time,
//! live sessions and body size. Everything MCP itself is done by [`McpServer`] and rmcp;
//! this module decides who gets that far.
//!
//! Order of checks for each request: path (`/mcp`, else 404), bearer token (401 with
//! `WWW-Authenticate: Bearer`, before any MCP processing), body size and read time (413,
//! 408), then rmcp's `Host` and `Origin` validation (403) and the MCP request. Each token
//! gets its own rmcp service (and so its own sessions): a session id made for one token
//! is unknown to every other, and a revoked token's sessions end with it.
//!
//! Weak spot: the "oldest idle" connection or session is the least recently used one; a
//! client that holds a connection open without a request in flight can be closed to make
//! room, and must reconnect (HTTP clients do).

mod connections;
mod door;
mod metrics;
mod oauth;
mod rebinding;
mod sessions;
mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub use crate::config::HttpLimits;
use crate::frontends::mcp::tokens::TokenAuthenticator;
use crate::frontends::mcp::{McpServeError, McpServer};
use door::{Door, serve_connection};
pub use metrics::{MAX_SCRAPE_CONNECTIONS, SCRAPE_DEADLINE, bind_metrics};
use tls::tls_acceptor;

/// Who may call.
#[derive(Clone)]
pub enum HttpAuth {
    /// Every request needs a bearer token from this store.
    Tokens(Arc<TokenAuthenticator>),
    /// Anyone who can reach the port (`--no-auth`; loopback addresses only).
    NoAuth,
}

/// TLS certificate and key (PEM files).
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// How the HTTP door runs.
#[derive(Clone)]
pub struct HttpOptions {
    /// Where to listen.
    pub addr: SocketAddr,
    /// Who may call.
    pub auth: HttpAuth,
    /// TLS, if any.
    pub tls: Option<TlsFiles>,
    /// Serve plain HTTP on a non-loopback address anyway (`--insecure-http`).
    pub insecure_http: bool,
    /// Extra `Host` header values requests may carry (loopback names always pass).
    pub allowed_hosts: Vec<String>,
    /// Browser origins allowed besides the server's own.
    pub allowed_origins: Vec<String>,
    /// The limits.
    pub limits: HttpLimits,
    /// OAuth access tokens accepted beside the static tokens (`[mcp.oauth]`; with
    /// `HttpAuth::Tokens` only).
    pub oauth: Option<crate::config::OAuthSettings>,
}

/// Checks the options against the rules for exposing tools on a network: `--no-auth`
/// only on loopback; a non-loopback address needs TLS or `--insecure-http`.
pub fn check_http_options(options: &HttpOptions) -> Result<(), McpServeError> {
    let loopback = options.addr.ip().is_loopback();
    if matches!(options.auth, HttpAuth::NoAuth) && !loopback {
        return Err(McpServeError::NoAuthOffLoopback { addr: options.addr });
    }
    if !loopback && options.tls.is_none() && !options.insecure_http {
        return Err(McpServeError::NeedsTls { addr: options.addr });
    }
    Ok(())
}

/// The connection limit that leaves descriptors for everything else the host opens,
/// under the open-file limit (raised to its hard limit first, as servers do).
fn fit_connections(configured: usize) -> usize {
    let fitted = match crate::sys::rlimit::raise_open_file_limit() {
        Ok(nofile) => crate::sys::rlimit::connections_within(configured, nofile),
        Err(e) => {
            tracing::warn!("could not read or raise the open-file limit: {e}");
            configured
        }
    };
    if fitted < configured {
        tracing::warn!(
            "[mcp] max_connections lowered from {configured} to {fitted}: the open-file \
             limit leaves room for no more (raise it with `ulimit -n`)"
        );
    }
    fitted
}

/// Binds the HTTP door for `server`'s host. Returns the bound address (port 0 picks a
/// free one) and the future that serves until `stop` is cancelled.
pub async fn bind_http(
    server: &McpServer,
    options: HttpOptions,
    stop: CancellationToken,
) -> Result<(SocketAddr, impl Future<Output = ()> + use<>), McpServeError> {
    check_http_options(&options)?;
    let mut options = options;
    options.limits.max_connections = fit_connections(options.limits.max_connections);
    let tls = match &options.tls {
        Some(files) => Some(tls_acceptor(files)?),
        None => None,
    };
    let addr = options.addr;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| McpServeError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| McpServeError::Bind { addr, source })?;
    announce(&options, bound);
    let oauth = match (&options.oauth, &options.auth) {
        (Some(settings), HttpAuth::Tokens(_)) => Some(Arc::new(
            oauth::OAuthResource::new(settings.clone()).map_err(|e| McpServeError::OAuth {
                reason: format!("could not set up its HTTP client: {e}"),
            })?,
        )),
        (Some(_), HttpAuth::NoAuth) => {
            return Err(McpServeError::OAuth {
                reason: "--no-auth lets everyone in; drop it to check access tokens".to_owned(),
            });
        }
        (None, _) => None,
    };
    let door = Arc::new(Door::new(server, &options, bound, stop.clone(), oauth));
    let sweeper = {
        let door = Arc::clone(&door);
        let stop = stop.clone();
        async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = stop.cancelled() => break,
                    _ = tick.tick() => door.sweep().await,
                }
            }
        }
    };
    let serving = async move {
        tokio::spawn(sweeper);
        let tls = tls.map(Arc::new);
        loop {
            if !door.connections.make_room(&stop).await {
                break;
            }
            let Some((stream, peer)) = accept(&listener, &stop, "MCP over HTTP").await else {
                break;
            };
            let connection = door.connections.add();
            tokio::spawn(serve_connection(
                Arc::clone(&door),
                connection,
                stream,
                peer,
                tls.clone(),
                stop.clone(),
            ));
        }
    };
    Ok((bound, serving))
}

/// The next connection on `listener` (no Nagle delay), or `None` once `stop` fires. A
/// failed accept (e.g. out of file descriptors) is logged under `what` and retried after
/// 50 ms rather than spun on.
pub(super) async fn accept(
    listener: &tokio::net::TcpListener,
    stop: &CancellationToken,
    what: &str,
) -> Option<(tokio::net::TcpStream, SocketAddr)> {
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return None,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                return Some((stream, peer));
            }
            Err(e) => {
                tracing::warn!("{what}: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

fn announce(options: &HttpOptions, bound: SocketAddr) {
    let scheme = if options.tls.is_some() {
        "https"
    } else {
        "http"
    };
    match &options.auth {
        HttpAuth::NoAuth => tracing::warn!(
            "MCP over HTTP at {scheme}://{bound}/mcp WITHOUT AUTHENTICATION (--no-auth): \
             every user and program on this machine can call its tools, and answer their \
             approval questions"
        ),
        HttpAuth::Tokens(auth) => match auth.count() {
            Ok(n) if let Some(oauth) = &options.oauth => tracing::info!(
                "MCP over HTTP needs an OAuth access token from {} for {} (scopes: {}), or one \
                 of the {n} bearer tokens in {}",
                oauth.issuer,
                oauth.resource,
                if oauth.scopes.is_empty() {
                    "none asked".to_owned()
                } else {
                    oauth.scopes.join(" ")
                },
                auth.store().location()
            ),
            Ok(0) => tracing::warn!(
                "no MCP tokens yet in {}: every request gets 401 until you make one with \
                 `toolhost token add NAME`",
                auth.store().location()
            ),
            Ok(n) => tracing::info!(
                "MCP over HTTP needs a bearer token ({n} in {})",
                auth.store().location()
            ),
            Err(e) => tracing::error!(
                "the MCP token file {} cannot be read ({e}): every request gets 401 until it can",
                auth.store().location()
            ),
        },
    }
    if options.tls.is_none() && !bound.ip().is_loopback() {
        tracing::warn!(
            "MCP over plain HTTP on {bound} (--insecure-http): tokens, arguments and results \
             cross the network unencrypted, readable and replayable by anyone on the path"
        );
    }
}
