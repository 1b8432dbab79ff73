//! The HTTP door's second use: Prometheus scrapes at `/metrics` (`serve --metrics ADDR`),
//! under the same rules as MCP over HTTP (checked by [`check_http_options`]: off loopback
//! a bearer token and TLS, or `--insecure-http`; `--no-auth` only on loopback) with the
//! same TLS and token code, and the same `Host` and `Origin` checks (`rebinding.rs`). A
//! token needs the `metrics` scope: an MCP token cannot scrape, and a scrape credential
//! cannot call tools. One request per connection (no keep-alive), at most
//! [`MAX_SCRAPE_CONNECTIONS`] at once, each given [`SCRAPE_DEADLINE`] in all, so a
//! client that connects and sends nothing holds little for little time.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use tokio_util::sync::CancellationToken;

use super::door::{HttpBody, plain, unauthorized};
use super::rebinding::AllowedPeers;
use super::tls::tls_acceptor;
use super::{HttpAuth, HttpOptions, check_http_options};
use crate::frontends::mcp::McpServeError;
use crate::frontends::mcp::tokens::TokenScope;
use crate::host::Host;

/// Scrapes served at once; further connections wait to be accepted.
pub const MAX_SCRAPE_CONNECTIONS: usize = 16;
/// How long one connection may take, TLS handshake, request and answer together.
pub const SCRAPE_DEADLINE: Duration = Duration::from_secs(10);

/// Binds the metrics endpoint of `host` with `options` (its address, auth, TLS, and the
/// hosts and origins it answers to; the limits are not used). Returns the bound address (port 0 picks one) and
/// the future that serves until `stop` is cancelled.
pub async fn bind_metrics(
    host: Arc<Host>,
    options: HttpOptions,
    stop: CancellationToken,
) -> Result<(SocketAddr, impl Future<Output = ()> + use<>), McpServeError> {
    check_http_options(&options)?;
    let tls = match &options.tls {
        Some(files) => Some(Arc::new(tls_acceptor(files)?)),
        None => None,
    };
    let addr = options.addr;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| McpServeError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| McpServeError::Bind { addr, source })?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let peers = Arc::new(AllowedPeers::new(&options, bound));
    match &options.auth {
        HttpAuth::NoAuth => tracing::info!(
            "Prometheus metrics at {scheme}://{bound}/metrics without a token (loopback: \
             every user and program on this machine can read tool names and counts)"
        ),
        HttpAuth::Tokens(auth) => tracing::info!(
            "Prometheus metrics at {scheme}://{bound}/metrics, with a bearer token of scope \
             metrics from {}",
            auth.store().location()
        ),
    }
    let auth = options.auth;
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_SCRAPE_CONNECTIONS));
    let serving = async move {
        loop {
            let permit = tokio::select! {
                () = stop.cancelled() => break,
                permit = Arc::clone(&slots).acquire_owned() => match permit {
                    Ok(p) => p,
                    Err(_) => break,
                },
            };
            let Some((stream, peer)) = super::accept(&listener, &stop, "metrics").await else {
                break;
            };
            let (host, auth, tls) = (Arc::clone(&host), auth.clone(), tls.clone());
            let peers = Arc::clone(&peers);
            tokio::spawn(async move {
                let served = serve_scrape(host, auth, peers, stream, tls);
                if tokio::time::timeout(SCRAPE_DEADLINE, served).await.is_err() {
                    tracing::debug!(%peer, "metrics: connection timed out");
                }
                drop(permit);
            });
        }
    };
    Ok((bound, serving))
}

async fn serve_scrape(
    host: Arc<Host>,
    auth: HttpAuth,
    peers: Arc<AllowedPeers>,
    stream: tokio::net::TcpStream,
    tls: Option<Arc<tokio_rustls::TlsAcceptor>>,
) {
    let io = match tls {
        None => tokio_util::either::Either::Left(stream),
        Some(acceptor) => match acceptor.accept(stream).await {
            Ok(tls) => tokio_util::either::Either::Right(tls),
            Err(e) => {
                tracing::debug!("metrics: TLS handshake failed: {e}");
                return;
            }
        },
    };
    let handler = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let response = answer(&host, &auth, &peers, &request);
        async move { Ok::<_, std::convert::Infallible>(response) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .keep_alive(false)
        .serve_connection(hyper_util::rt::TokioIo::new(io), handler);
    if let Err(e) = served.await {
        tracing::debug!("metrics: connection ended: {e}");
    }
}

/// The answer to one request: 404 off `/metrics`, 405 for anything but GET, 403 for a
/// `Host` or `Origin` this door does not answer to, 401 without a valid token (when one
/// is needed), 403 for a token without the metrics scope, else the metrics.
fn answer(
    host: &Host,
    auth: &HttpAuth,
    peers: &AllowedPeers,
    request: &hyper::Request<Incoming>,
) -> hyper::Response<HttpBody> {
    if request.uri().path() != "/metrics" {
        return plain(
            hyper::StatusCode::NOT_FOUND,
            "toolhost serves Prometheus metrics at the path /metrics\n",
        );
    }
    if request.method() != hyper::Method::GET {
        return plain(
            hyper::StatusCode::METHOD_NOT_ALLOWED,
            "use GET for /metrics\n",
        );
    }
    if let Err(refused) = peers.check(request.uri(), request.headers()) {
        tracing::debug!("metrics: refused a request: {refused}");
        return plain(refused.status(), &format!("{refused}\n"));
    }
    if let HttpAuth::Tokens(tokens) = auth {
        let header = request
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .map(|v| v.as_bytes());
        if let Err(failure) = tokens.check(header, TokenScope::Metrics) {
            return unauthorized(failure);
        }
    }
    let format = crate::metrics::MetricsFormat::negotiate(
        request
            .headers()
            .get(hyper::header::ACCEPT)
            .and_then(|v| v.to_str().ok()),
    );
    let mut response = plain(hyper::StatusCode::OK, &host.metrics_text(format));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(format.content_type()),
    );
    response
}
