//! The door itself: one rmcp service per token, the order of checks per request (path,
//! token, body limits, then rmcp), the refusals, and serving one connection.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body_util::BodyExt as _;
use hyper::body::{Bytes, Incoming};
use rmcp::transport::streamable_http_server::SessionId;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::connections::{Busy, ConnectionState, Connections, Registered};
use super::oauth::{OAuthRefusal, OAuthResource};
use super::rebinding::AllowedPeers;
use super::sessions::{SessionTable, TrackedSessions};
use super::{HttpAuth, HttpLimits, HttpOptions};
use crate::frontends::mcp::tokens::{AuthFailure, TokenIdentity, TokenScope};
use crate::frontends::mcp::{McpOptions, McpServeError, McpServer, McpSession};
use crate::host::Host;

pub(super) type Service = StreamableHttpService<McpSession, TrackedSessions>;

/// A token's rmcp service and the session manager inside it.
pub(super) type TokenService = (Arc<Service>, Arc<LocalSessionManager>);

/// What the connections of one HTTP door share.
pub(super) struct Door {
    host: Arc<Host>,
    base: McpOptions,
    auth: HttpAuth,
    limits: HttpLimits,
    rmcp_config: StreamableHttpServerConfig,
    pub(super) connections: Connections,
    sessions: Arc<SessionTable>,
    /// One MCP server per profile served (keyed by `--profile` for `None`).
    servers: Mutex<HashMap<Option<String>, McpServer>>,
    /// One rmcp service per token (its sessions are its own).
    services: Mutex<HashMap<ServiceKey, TokenService>>,
    /// When refusals were last logged, and how many were not logged since.
    refusals: Mutex<(Option<Instant>, u64)>,
    /// OAuth access tokens, when `[mcp.oauth]` is set.
    oauth: Option<Arc<OAuthResource>>,
}

/// The name an OAuth subject's calls go by (its sessions, the audit log): never a static
/// token's (those are made without a colon).
const OAUTH_PREFIX: &str = "oauth:";

/// Past this many OAuth subjects' services, those without live sessions are let go (a
/// subject's next request makes its service again).
const MAX_OAUTH_SERVICES: usize = 1024;

/// Which token a service serves: its name and profile (`None` name: `--no-auth`).
pub(super) type ServiceKey = (Option<String>, Option<String>);

impl Door {
    pub(super) fn new(
        server: &McpServer,
        options: &HttpOptions,
        bound: SocketAddr,
        stop: CancellationToken,
        oauth: Option<Arc<OAuthResource>>,
    ) -> Door {
        let peers = AllowedPeers::new(options, bound);
        let rmcp_config = StreamableHttpServerConfig::default()
            .with_allowed_hosts(peers.hosts)
            .with_allowed_origins(peers.origins)
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
            sessions: Arc::new(SessionTable::new(
                options.limits.max_sessions,
                match options.auth {
                    // One anonymous client: the per-token quota would only lower the limit.
                    HttpAuth::NoAuth => options.limits.max_sessions,
                    HttpAuth::Tokens(_) => options.limits.max_sessions_per_token,
                },
            )),
            servers: Mutex::new(servers),
            services: Mutex::new(HashMap::new()),
            refusals: Mutex::new((None, 0)),
            oauth,
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

    fn service(&self, identity: Option<&TokenIdentity>) -> Result<TokenService, McpServeError> {
        let key: ServiceKey =
            identity.map_or((None, None), |i| (Some(i.name.clone()), i.profile.clone()));
        let mut services = self.services.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((s, m)) = services.get(&key) {
            return Ok((Arc::clone(s), Arc::clone(m)));
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
        services.insert(key, (Arc::clone(&service), Arc::clone(&manager)));
        Ok((service, manager))
    }

    /// Once a second: ends idle sessions, and the services (and sessions) of tokens that
    /// were revoked.
    pub(super) async fn sweep(&self) {
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
            let oauth_services = services
                .keys()
                .filter(|(name, _)| name.as_deref().is_some_and(|n| n.starts_with(OAUTH_PREFIX)))
                .count();
            let keys: Vec<ServiceKey> = services
                .iter()
                .filter(|((name, profile), (_, manager))| {
                    match name.as_deref() {
                        // An OAuth subject's service is kept (its tokens expire on their
                        // own, and each request is checked); only past the cap are those
                        // without sessions let go.
                        Some(n) if n.starts_with(OAUTH_PREFIX) => {
                            oauth_services > MAX_OAUTH_SERVICES
                                && self.sessions.owned_by(manager).is_empty()
                        }
                        _ => !valid
                            .iter()
                            .any(|i| Some(&i.name) == name.as_ref() && &i.profile == profile),
                    }
                })
                .map(|(key, _)| key.clone())
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
        // rmcp checks the first Host header against the allowed names; a second one is
        // refused before anything reads either.
        if let Err(refused) = super::rebinding::one_host(request.headers()) {
            self.log_refusal(peer, &refused.to_string());
            return plain(refused.status(), &format!("{refused}\n"));
        }
        if let Some(oauth) = &self.oauth
            && oauth.serves_metadata_at(request.uri().path())
        {
            return json_response(hyper::StatusCode::OK, &oauth.metadata());
        }
        if request.uri().path() == "/ready" && request.method() == hyper::Method::GET {
            // `?plugin_set=HASH`: a load balancer that expects one plugin set marks a
            // replica with another one down.
            let expected = request.uri().query().and_then(|q| {
                q.split('&')
                    .find_map(|pair| pair.strip_prefix("plugin_set="))
                    .map(str::to_owned)
            });
            let readiness = self.host.readiness(expected.as_deref()).await;
            let status = if readiness.ready {
                hyper::StatusCode::OK
            } else {
                hyper::StatusCode::SERVICE_UNAVAILABLE
            };
            return json_response(
                status,
                &serde_json::to_value(&readiness).unwrap_or_default(),
            );
        }
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
                let checked = match (auth.check(header, TokenScope::Mcp), &self.oauth) {
                    (Err(AuthFailure::Invalid | AuthFailure::Missing), Some(oauth)) => {
                        let token = header.and_then(crate::frontends::mcp::tokens::bearer);
                        match self.check_oauth(oauth, token).await {
                            Ok(identity) => Ok(identity),
                            Err(refused) => {
                                self.log_refusal(peer, &refused.1);
                                return refused.0;
                            }
                        }
                    }
                    (checked, _) => checked,
                };
                match checked {
                    Ok(identity) => Some(identity),
                    Err(failure) => {
                        let why = match failure {
                            AuthFailure::Missing => "no bearer token",
                            AuthFailure::Invalid => "unknown or revoked bearer token",
                            AuthFailure::StoreUnreadable => "the token file cannot be read",
                            AuthFailure::OutOfScope(_) => "a token without the mcp scope",
                        };
                        self.log_refusal(peer, why);
                        return unauthorized(failure);
                    }
                }
            }
        };
        let (service, manager) = match self.service(identity.as_ref()) {
            Ok(s) => s,
            Err(e) => {
                self.log_refusal(peer, &e.to_string());
                return plain(
                    hyper::StatusCode::FORBIDDEN,
                    &format!("{e}; make the token again for a profile this host has\n"),
                );
            }
        };
        if request.method() == hyper::Method::DELETE
            && let Some(id) = request
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
            && !manager
                .has_session(&SessionId::from(id.to_owned()))
                .await
                .unwrap_or(true)
        {
            // rmcp answers 202 for any id; the spec's answer to an unknown session is 404.
            return plain(
                hyper::StatusCode::NOT_FOUND,
                "Not Found: no such MCP session (it ended, or was never made)\n",
            );
        }
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
        if parts.method == hyper::Method::POST
            && is_json(&parts.headers)
            && let Err(refused) = crate::frontends::mcp::screen::screen(
                &bytes,
                parts
                    .headers
                    .get("mcp-protocol-version")
                    .and_then(|v| v.to_str().ok()),
            )
            && let Some(answer) = refused.response()
        {
            // What rmcp would answer 415 (not JSON, or no message), without the id, or
            // "Method not found" (a known method's bad params): 400 with the JSON-RPC
            // error. A wrong Content-Type is left to rmcp's 415.
            return json_response(hyper::StatusCode::BAD_REQUEST, &answer);
        }
        let request = hyper::Request::from_parts(parts, http_body_util::Full::new(bytes));
        service.handle(request).await
    }
}

impl Door {
    /// A request's OAuth access token checked (`None`: no token sent): who it speaks
    /// for, or the refusal to send (with what to log).
    async fn check_oauth(
        &self,
        oauth: &OAuthResource,
        token: Option<&str>,
    ) -> Result<TokenIdentity, (hyper::Response<HttpBody>, String)> {
        let refuse = |status, error: Option<(&str, &str)>, text: String| {
            let mut response = plain(status, &format!("{text}\n"));
            if let Ok(value) = hyper::header::HeaderValue::from_str(&oauth.challenge(error)) {
                response
                    .headers_mut()
                    .insert(hyper::header::WWW_AUTHENTICATE, value);
            }
            (response, text)
        };
        let Some(token) = token else {
            return Err(refuse(
                hyper::StatusCode::UNAUTHORIZED,
                None,
                "this toolhost needs an access token: get one from the authorization server \
                 its protected-resource metadata names, and send `Authorization: Bearer TOKEN`"
                    .to_owned(),
            ));
        };
        if !OAuthResource::looks_like_jwt(token) {
            const NEITHER: &str =
                "the bearer token is neither a token of this host's nor a JWT access token";
            return Err(refuse(
                hyper::StatusCode::UNAUTHORIZED,
                Some(("invalid_token", NEITHER)),
                NEITHER.to_owned(),
            ));
        }
        match oauth.check(token).await {
            Ok(identity) => Ok(TokenIdentity {
                name: format!("{OAUTH_PREFIX}{}", identity.subject),
                profile: identity.profile,
            }),
            Err(OAuthRefusal::Invalid(why)) => Err(refuse(
                hyper::StatusCode::UNAUTHORIZED,
                Some(("invalid_token", &why)),
                format!("access token refused: {why}"),
            )),
            Err(OAuthRefusal::InsufficientScope(why)) => Err(refuse(
                hyper::StatusCode::FORBIDDEN,
                Some(("insufficient_scope", &why)),
                format!("access token refused: {why}"),
            )),
            Err(OAuthRefusal::KeysUnavailable(why)) => {
                tracing::warn!("[mcp.oauth] {why}");
                let mut response = plain(
                    hyper::StatusCode::SERVICE_UNAVAILABLE,
                    "the access token cannot be checked now: the issuer's keys cannot be \
                     fetched (see the host's log); try again later\n",
                );
                response.headers_mut().insert(
                    hyper::header::RETRY_AFTER,
                    hyper::header::HeaderValue::from_static("10"),
                );
                Err((response, format!("issuer's keys unavailable: {why}")))
            }
        }
    }
}

/// Whether a request says its body is JSON (what rmcp accepts; anything else gets its
/// 415).
fn is_json(headers: &hyper::HeaderMap) -> bool {
    headers
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            let essence = v.split_once(';').map_or(v, |(essence, _)| essence);
            essence.trim().eq_ignore_ascii_case("application/json")
        })
}

/// A JSON document with `status`.
fn json_response(
    status: hyper::StatusCode,
    value: &serde_json::Value,
) -> hyper::Response<HttpBody> {
    let mut response = plain(status, &value.to_string());
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

pub(super) type HttpBody = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

pub(super) fn plain(status: hyper::StatusCode, text: &str) -> hyper::Response<HttpBody> {
    let body = http_body_util::Full::new(Bytes::from(text.to_owned())).boxed();
    let mut response = hyper::Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

pub(super) fn too_large(max: usize) -> hyper::Response<HttpBody> {
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

/// 401 with the `WWW-Authenticate` challenge (403 for a valid token out of its scope);
/// the connection is closed after it.
pub(super) fn unauthorized(failure: AuthFailure) -> hyper::Response<HttpBody> {
    let (challenge, text) = match failure {
        AuthFailure::OutOfScope(scope) => {
            let mut response = plain(
                hyper::StatusCode::FORBIDDEN,
                &format!(
                    "this bearer token may not {}; the host's operator makes one that may \
                     with `toolhost token add NAME --scope {scope}`\n",
                    match scope {
                        TokenScope::Mcp => "call tools over MCP",
                        TokenScope::Metrics => "read metrics",
                    }
                ),
            );
            response.headers_mut().insert(
                hyper::header::CONNECTION,
                hyper::header::HeaderValue::from_static("close"),
            );
            return response;
        }
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

pub(super) async fn serve_connection(
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
            // A draining host waits for these (POSTs: calls and their answers; a GET's
            // event stream may stay open as long as its client likes).
            let call =
                (request.method() == hyper::Method::POST).then(|| Host::http_request(&door.host));
            async move {
                let response = door.route(peer, request).await;
                Ok::<_, std::convert::Infallible>(response.map(|body| {
                    BodyWithGuard {
                        body,
                        _busy: busy,
                        _call: call,
                    }
                    .boxed()
                }))
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
pub(super) struct BodyWithGuard {
    body: HttpBody,
    _busy: Busy,
    _call: Option<crate::host::HttpRequest>,
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
