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

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body_util::BodyExt as _;
use hyper::body::{Bytes, Incoming};
use rmcp::transport::WorkerTransport;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, LocalSessionWorker,
};
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionManager};
use rmcp::transport::streamable_http_server::{
    SessionId, StreamableHttpServerConfig, StreamableHttpService,
};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::frontends::mcp::tokens::{AuthFailure, TokenAuthenticator, TokenIdentity};
use crate::frontends::mcp::{McpOptions, McpServeError, McpServer, McpSession};
use crate::host::Host;

/// The limits of the HTTP door. The defaults suit a desktop and a small team.
#[derive(Debug, Clone)]
pub struct HttpLimits {
    /// Connections served at once; past it the oldest idle one is closed, and when all
    /// are busy new ones wait.
    pub max_connections: usize,
    /// Time a new connection has to finish its TLS handshake and send its first request's
    /// headers; also the time a request has to send its body.
    pub header_read_timeout: Duration,
    /// Time an idle keep-alive connection is kept.
    pub idle_timeout: Duration,
    /// Live MCP sessions; past it the oldest idle one is ended.
    pub max_sessions: usize,
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
            session_idle: Duration::from_secs(1800),
            max_body_bytes: 4 * 1024 * 1024,
        }
    }
}

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
    /// Browser origins allowed besides the server's own.
    pub allowed_origins: Vec<String>,
    /// The limits.
    pub limits: HttpLimits,
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

/// Binds the HTTP door for `server`'s host. Returns the bound address (port 0 picks a
/// free one) and the future that serves until `stop` is cancelled.
pub async fn bind_http(
    server: &McpServer,
    options: HttpOptions,
    stop: CancellationToken,
) -> Result<(SocketAddr, impl Future<Output = ()> + use<>), McpServeError> {
    check_http_options(&options)?;
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
    let door = Arc::new(Door::new(server, &options, bound, stop.clone()));
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
            let accepted = tokio::select! {
                () = stop.cancelled() => break,
                accepted = listener.accept() => accepted,
            };
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // E.g. out of file descriptors: don't spin; try again shortly.
                    tracing::warn!("MCP over HTTP: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
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
            Ok(0) => tracing::warn!(
                "no MCP tokens yet in {}: every request gets 401 until you make one with \
                 `toolhost token add NAME`",
                auth.store().path().display()
            ),
            Ok(n) => tracing::info!(
                "MCP over HTTP needs a bearer token ({n} in {})",
                auth.store().path().display()
            ),
            Err(e) => tracing::error!(
                "the MCP token file {} cannot be read ({e}): every request gets 401 until it can",
                auth.store().path().display()
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

fn tls_acceptor(files: &TlsFiles) -> Result<tokio_rustls::TlsAcceptor, McpServeError> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let read = |path: &PathBuf, what: &'static str| {
        crate::sys::safe_open::read_capped(path, 1024 * 1024).map_err(|e| McpServeError::Tls {
            reason: format!("could not read the {what} {}: {e}", path.display()),
        })
    };
    let cert_pem = read(&files.cert, "certificate")?;
    let key_pem = read(&files.key, "private key")?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| McpServeError::Tls {
            reason: format!(
                "{} holds no readable PEM certificate: {e}",
                files.cert.display()
            ),
        })?;
    if certs.is_empty() {
        return Err(McpServeError::Tls {
            reason: format!(
                "{} holds no certificate (expected -----BEGIN CERTIFICATE-----)",
                files.cert.display()
            ),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| McpServeError::Tls {
        reason: format!(
            "{} holds no readable PEM private key: {e}",
            files.key.display()
        ),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_no_client_auth().with_single_cert(certs, key))
        .map_err(|e| McpServeError::Tls {
            reason: format!(
                "the certificate {} and key {} do not make a TLS configuration: {e}",
                files.cert.display(),
                files.key.display()
            ),
        })?;
    let mut config = config;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

type Service = StreamableHttpService<McpSession, TrackedSessions>;

/// A token's rmcp service and the session manager inside it.
type TokenService = (Arc<Service>, Arc<LocalSessionManager>);

/// What the connections of one HTTP door share.
struct Door {
    host: Arc<Host>,
    base: McpOptions,
    auth: HttpAuth,
    limits: HttpLimits,
    rmcp_config: StreamableHttpServerConfig,
    connections: Connections,
    sessions: Arc<SessionTable>,
    /// One MCP server per profile served (keyed by `--profile` for `None`).
    servers: Mutex<HashMap<Option<String>, McpServer>>,
    /// One rmcp service per token (its sessions are its own).
    services: Mutex<HashMap<ServiceKey, TokenService>>,
    /// When refusals were last logged, and how many were not logged since.
    refusals: Mutex<(Option<Instant>, u64)>,
}

/// Which token a service serves: its name and profile (`None` name: `--no-auth`).
type ServiceKey = (Option<String>, Option<String>);

impl Door {
    fn new(
        server: &McpServer,
        options: &HttpOptions,
        bound: SocketAddr,
        stop: CancellationToken,
    ) -> Door {
        let scheme = if options.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let port = bound.port();
        let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
        hosts.extend(server.options().allowed_hosts.iter().cloned());
        // The server's own origins: every name it may be reached by, on its port.
        let mut origins: Vec<String> = vec![
            format!("{scheme}://localhost:{port}"),
            format!("{scheme}://127.0.0.1:{port}"),
            format!("{scheme}://[::1]:{port}"),
        ];
        if !bound.ip().is_unspecified() {
            origins.push(format!("{scheme}://{bound}"));
        }
        for host in &server.options().allowed_hosts {
            if host.contains(':') && !host.starts_with('[') {
                origins.push(format!("{scheme}://{host}"));
            } else {
                origins.push(format!("{scheme}://{host}:{port}"));
            }
        }
        origins.extend(options.allowed_origins.iter().cloned());
        let rmcp_config = StreamableHttpServerConfig::default()
            .with_allowed_hosts(hosts)
            .with_allowed_origins(origins)
            .enforce_origin_validation()
            .with_max_request_body_bytes(options.limits.max_body_bytes)
            .with_cancellation_token(stop);
        let mut servers = HashMap::new();
        servers.insert(None, server.clone());
        Door {
            host: Arc::clone(server.host()),
            base: server.options().clone(),
            auth: options.auth.clone(),
            limits: options.limits.clone(),
            rmcp_config,
            connections: Connections::new(options.limits.max_connections),
            sessions: Arc::new(SessionTable::new(options.limits.max_sessions)),
            servers: Mutex::new(servers),
            services: Mutex::new(HashMap::new()),
            refusals: Mutex::new((None, 0)),
        }
    }

    /// The MCP server for a token's profile (`None`: the server's own).
    fn server(&self, profile: Option<&String>) -> Result<McpServer, McpServeError> {
        let mut servers = self.servers.lock().unwrap_or_else(PoisonError::into_inner);
        let key = profile.cloned();
        if let Some(s) = servers.get(&key) {
            return Ok(s.clone());
        }
        let options = McpOptions {
            profile: key.clone(),
            ..self.base.clone()
        };
        let server = McpServer::new(Arc::clone(&self.host), options)?;
        servers.insert(key, server.clone());
        Ok(server)
    }

    fn service(&self, identity: Option<&TokenIdentity>) -> Result<Arc<Service>, McpServeError> {
        let key: ServiceKey =
            identity.map_or((None, None), |i| (Some(i.name.clone()), i.profile.clone()));
        let mut services = self.services.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((s, _)) = services.get(&key) {
            return Ok(Arc::clone(s));
        }
        let server = self.server(key.1.as_ref())?;
        let token = key.0.clone();
        let mut manager = LocalSessionManager::default();
        // Idle sessions are ended by the sweeper; rmcp's own timer is the backstop.
        manager.session_config.keep_alive =
            Some(self.limits.session_idle + Duration::from_secs(60));
        let manager = Arc::new(manager);
        let sessions = TrackedSessions {
            inner: Arc::clone(&manager),
            table: Arc::clone(&self.sessions),
        };
        let service = Arc::new(StreamableHttpService::new(
            move || Ok(server.http_session(token.as_deref())),
            Arc::new(sessions),
            self.rmcp_config.clone(),
        ));
        services.insert(key, (Arc::clone(&service), manager));
        Ok(service)
    }

    /// Once a second: ends idle sessions, and the services (and sessions) of tokens that
    /// were revoked.
    async fn sweep(&self) {
        for (manager, id) in self.sessions.expired(self.limits.session_idle) {
            tracing::debug!(session = %id, "MCP session idle too long; ending it");
            let _ = manager.close_session(&id).await;
        }
        let HttpAuth::Tokens(auth) = &self.auth else {
            return;
        };
        let Ok(valid) = auth.identities() else {
            return;
        };
        let gone: Vec<TokenService> = {
            let mut services = self.services.lock().unwrap_or_else(PoisonError::into_inner);
            let keys: Vec<ServiceKey> = services
                .keys()
                .filter(|(name, profile)| {
                    !valid
                        .iter()
                        .any(|i| Some(&i.name) == name.as_ref() && &i.profile == profile)
                })
                .cloned()
                .collect();
            keys.iter().filter_map(|k| services.remove(k)).collect()
        };
        for (_service, manager) in gone {
            for id in self.sessions.owned_by(&manager) {
                tracing::info!(session = %id, "ending an MCP session: its token was revoked");
                let _ = manager.close_session(&id).await;
            }
        }
    }

    /// Logs a refused request, at most once a second (a flood must not flood the log).
    fn log_refusal(&self, peer: SocketAddr, why: &str) {
        let mut refusals = self.refusals.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if refusals
            .0
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            refusals.1 += 1;
            return;
        }
        let suppressed = std::mem::take(&mut refusals.1);
        refusals.0 = Some(now);
        if suppressed > 0 {
            tracing::warn!(%peer, "MCP over HTTP: refused a request: {why} ({suppressed} more refusals in the last second not logged)");
        } else {
            tracing::warn!(%peer, "MCP over HTTP: refused a request: {why}");
        }
    }

    async fn route(
        &self,
        peer: SocketAddr,
        request: hyper::Request<Incoming>,
    ) -> hyper::Response<HttpBody> {
        if request.uri().path() != "/mcp" {
            return plain(
                hyper::StatusCode::NOT_FOUND,
                "toolhost serves MCP at the path /mcp\n",
            );
        }
        let identity = match &self.auth {
            HttpAuth::NoAuth => None,
            HttpAuth::Tokens(auth) => {
                let header = request
                    .headers()
                    .get(hyper::header::AUTHORIZATION)
                    .map(|v| v.as_bytes());
                match auth.check(header) {
                    Ok(identity) => Some(identity),
                    Err(failure) => {
                        let why = match failure {
                            AuthFailure::Missing => "no bearer token",
                            AuthFailure::Invalid => "unknown or revoked bearer token",
                            AuthFailure::StoreUnreadable => "the token file cannot be read",
                        };
                        self.log_refusal(peer, why);
                        return unauthorized(failure);
                    }
                }
            }
        };
        let service = match self.service(identity.as_ref()) {
            Ok(s) => s,
            Err(e) => {
                self.log_refusal(peer, &e.to_string());
                return plain(
                    hyper::StatusCode::FORBIDDEN,
                    &format!("{e}; make the token again for a profile this host has\n"),
                );
            }
        };
        let (parts, body) = request.into_parts();
        let declared = parts
            .headers
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > self.limits.max_body_bytes as u64) {
            return too_large(self.limits.max_body_bytes);
        }
        let limited = http_body_util::Limited::new(body, self.limits.max_body_bytes);
        let bytes =
            match tokio::time::timeout(self.limits.header_read_timeout, limited.collect()).await {
                Ok(Ok(collected)) => collected.to_bytes(),
                Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
                    return too_large(self.limits.max_body_bytes);
                }
                Ok(Err(e)) => {
                    return plain(
                        hyper::StatusCode::BAD_REQUEST,
                        &format!("could not read the request body: {e}\n"),
                    );
                }
                Err(_) => {
                    self.log_refusal(peer, "request body not sent in time");
                    return plain(
                        hyper::StatusCode::REQUEST_TIMEOUT,
                        "the request body did not arrive in time\n",
                    );
                }
            };
        let request = hyper::Request::from_parts(parts, http_body_util::Full::new(bytes));
        service.handle(request).await
    }
}

type HttpBody = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

fn plain(status: hyper::StatusCode, text: &str) -> hyper::Response<HttpBody> {
    let body = http_body_util::Full::new(Bytes::from(text.to_owned())).boxed();
    let mut response = hyper::Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn too_large(max: usize) -> hyper::Response<HttpBody> {
    let mut response = plain(
        hyper::StatusCode::PAYLOAD_TOO_LARGE,
        &format!("the request body is larger than {max} bytes ([mcp] max_body_bytes)\n"),
    );
    response.headers_mut().insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("close"),
    );
    response
}

/// 401 with the `WWW-Authenticate` challenge; the connection is closed after it.
fn unauthorized(failure: AuthFailure) -> hyper::Response<HttpBody> {
    let (challenge, text) = match failure {
        AuthFailure::Missing => (
            r#"Bearer realm="toolhost""#,
            "this toolhost needs a bearer token: send `Authorization: Bearer TOKEN`; the \
             host's operator makes one with `toolhost token add NAME`\n",
        ),
        AuthFailure::Invalid => (
            r#"Bearer realm="toolhost", error="invalid_token", error_description="unknown or revoked token""#,
            "the bearer token is unknown or was revoked; ask the host's operator for a new \
             one (`toolhost token add NAME`)\n",
        ),
        AuthFailure::StoreUnreadable => (
            r#"Bearer realm="toolhost", error="invalid_token", error_description="the host cannot read its tokens""#,
            "the host cannot read its token file; its operator must fix it (see the host's log)\n",
        ),
    };
    let mut response = plain(hyper::StatusCode::UNAUTHORIZED, text);
    let headers = response.headers_mut();
    headers.insert(
        hyper::header::WWW_AUTHENTICATE,
        hyper::header::HeaderValue::from_static(challenge),
    );
    headers.insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("close"),
    );
    response
}

async fn serve_connection(
    door: Arc<Door>,
    connection: Arc<ConnectionState>,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    tls: Option<Arc<tokio_rustls::TlsAcceptor>>,
    stop: CancellationToken,
) {
    let _registered = Registered {
        connections: &door.connections,
        id: connection.id,
    };
    let io = match tls {
        None => tokio_util::either::Either::Left(stream),
        Some(acceptor) => {
            let handshake =
                tokio::time::timeout(door.limits.header_read_timeout, acceptor.accept(stream));
            tokio::select! {
                () = connection.evict.cancelled() => return,
                () = stop.cancelled() => return,
                result = handshake => match result {
                    Ok(Ok(tls)) => tokio_util::either::Either::Right(tls),
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, "MCP over HTTPS: TLS handshake failed: {e}");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "MCP over HTTPS: TLS handshake timed out");
                        return;
                    }
                },
            }
        }
    };
    let handler = {
        let door = Arc::clone(&door);
        let connection = Arc::clone(&connection);
        hyper::service::service_fn(move |request| {
            let door = Arc::clone(&door);
            let busy = connection.begin();
            async move {
                let response = door.route(peer, request).await;
                Ok::<_, std::convert::Infallible>(
                    response.map(|body| BodyWithGuard { body, _busy: busy }.boxed()),
                )
            }
        })
    };
    let http = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(io), handler);
    let mut http = std::pin::pin!(http);
    loop {
        let changed = connection.changed.notified();
        let deadline = connection.deadline(&door.limits);
        let expire = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            result = http.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(%peer, "MCP over HTTP: connection ended: {e}");
                }
                return;
            }
            () = connection.evict.cancelled() => return,
            () = changed => {}
            () = expire => {
                if connection.deadline(&door.limits).is_some_and(|at| at <= Instant::now()) {
                    return;
                }
            }
            () = stop.cancelled() => {
                // Finish the responses in flight, then close.
                http.as_mut().graceful_shutdown();
                let _ = tokio::time::timeout(Duration::from_secs(5), http).await;
                return;
            }
        }
    }
}

/// A response body that marks its connection busy until it is sent (or dropped).
struct BodyWithGuard {
    body: HttpBody,
    _busy: Busy,
}

impl hyper::body::Body for BodyWithGuard {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// The connections of a door: how many, and which is idle since when.
struct Connections {
    max: usize,
    next: AtomicU64,
    table: Mutex<BTreeMap<u64, Arc<ConnectionState>>>,
    freed: Notify,
}

/// One connection: requests in flight, last activity, and the token that closes it.
struct ConnectionState {
    id: u64,
    accepted: Instant,
    in_flight: AtomicUsize,
    served: AtomicU64,
    /// Milliseconds after `accepted` of the last response's end.
    last_active_ms: AtomicU64,
    changed: Notify,
    evict: CancellationToken,
}

impl ConnectionState {
    fn begin(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.changed.notify_one();
        Busy(Arc::clone(self))
    }

    /// When this connection expires if nothing happens: `None` while a request is in
    /// flight; else the header-read timeout after acceptance (no request yet) or the
    /// idle timeout after the last response.
    fn deadline(&self, limits: &HttpLimits) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        if self.served.load(Ordering::Acquire) == 0 {
            return Some(self.accepted + limits.header_read_timeout);
        }
        let last =
            self.accepted + Duration::from_millis(self.last_active_ms.load(Ordering::Acquire));
        Some(last + limits.idle_timeout)
    }

    /// Since when the connection has been idle, if it is.
    fn idle_since(&self) -> Option<Instant> {
        (self.in_flight.load(Ordering::Acquire) == 0).then(|| {
            self.accepted + Duration::from_millis(self.last_active_ms.load(Ordering::Acquire))
        })
    }
}

/// A request in flight on a connection (until its response body is done).
struct Busy(Arc<ConnectionState>);

impl Drop for Busy {
    fn drop(&mut self) {
        let c = &self.0;
        let ms = u64::try_from(c.accepted.elapsed().as_millis()).unwrap_or(u64::MAX);
        c.last_active_ms.store(ms, Ordering::Release);
        c.served.fetch_add(1, Ordering::AcqRel);
        c.in_flight.fetch_sub(1, Ordering::AcqRel);
        c.changed.notify_one();
    }
}

/// Removes a connection from the table when its task ends.
struct Registered<'a> {
    connections: &'a Connections,
    id: u64,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.connections.remove(self.id);
    }
}

impl Connections {
    fn new(max: usize) -> Connections {
        Connections {
            max: max.max(1),
            next: AtomicU64::new(0),
            table: Mutex::new(BTreeMap::new()),
            freed: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<ConnectionState>>> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until another connection may be accepted: there is room, or the oldest idle
    /// connection was closed to make some. `false` when `stop` came first.
    async fn make_room(&self, stop: &CancellationToken) -> bool {
        loop {
            let freed = self.freed.notified();
            {
                let mut table = self.lock();
                if table.len() < self.max {
                    return true;
                }
                let oldest_idle = table
                    .values()
                    .filter_map(|c| c.idle_since().map(|since| (since, c.id)))
                    .min();
                if let Some((_, id)) = oldest_idle
                    && let Some(c) = table.remove(&id)
                {
                    c.evict.cancel();
                    return true;
                }
            }
            tokio::select! {
                () = stop.cancelled() => return false,
                () = freed => {}
            }
        }
    }

    fn add(&self) -> Arc<ConnectionState> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(ConnectionState {
            id,
            accepted: Instant::now(),
            in_flight: AtomicUsize::new(0),
            served: AtomicU64::new(0),
            last_active_ms: AtomicU64::new(0),
            changed: Notify::new(),
            evict: CancellationToken::new(),
        });
        self.lock().insert(id, Arc::clone(&state));
        state
    }

    fn remove(&self, id: u64) {
        if self.lock().remove(&id).is_some() {
            self.freed.notify_one();
        }
    }
}

/// The live MCP sessions of every token of a door: for the session limit (oldest idle
/// one ended first) and idle expiry.
struct SessionTable {
    max: usize,
    entries: Mutex<HashMap<SessionId, SessionEntry>>,
}

struct SessionEntry {
    manager: Arc<LocalSessionManager>,
    last_used: Instant,
    open_streams: usize,
}

impl SessionTable {
    fn new(max: usize) -> SessionTable {
        SessionTable {
            max: max.max(1),
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

    /// Makes room for one more session: the least recently used one without an open
    /// stream (else the least recently used one) is taken out, to be closed.
    fn make_room(&self) -> Option<(Arc<LocalSessionManager>, SessionId)> {
        let mut entries = self.lock();
        if entries.len() < self.max {
            return None;
        }
        let victim = entries
            .iter()
            .min_by_key(|(_, e)| (e.open_streams > 0, e.last_used))
            .map(|(id, _)| id.clone())?;
        entries.remove(&victim).map(|e| (e.manager, victim))
    }

    fn expired(&self, idle: Duration) -> Vec<(Arc<LocalSessionManager>, SessionId)> {
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

    fn owned_by(&self, manager: &Arc<LocalSessionManager>) -> Vec<SessionId> {
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
struct TrackedSessions {
    inner: Arc<LocalSessionManager>,
    table: Arc<SessionTable>,
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
struct TrackedStream {
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
        if let Some((manager, id)) = self.table.make_room() {
            tracing::info!(session = %id, "MCP session limit reached: ending the oldest idle session");
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
