//! The names the HTTP doors answer to: the `Host` and `Origin` values a request may
//! carry, one list for both doors. MCP hands the list to rmcp, which checks it; the
//! metrics door checks it here by rmcp's rules, so a browser page that reaches a door by
//! DNS rebinding (its own name resolving to this machine) gets 403 from either.

use std::net::SocketAddr;

use super::HttpOptions;

/// The `Host` and `Origin` values a door accepts.
#[derive(Debug, Clone)]
pub(super) struct AllowedPeers {
    /// Host names (optionally `name:port`): the loopback names and `[mcp] allowed_hosts`.
    pub(super) hosts: Vec<String>,
    /// Origins (`scheme://host:port`, `:*` for any port): the door's own, on its port, by
    /// every name it answers to, and `[mcp] allowed_origins`.
    pub(super) origins: Vec<String>,
}

/// Why a request's `Host` or `Origin` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum Refused {
    /// No `Host` header, or one that is not a host name.
    #[error("the request has no usable Host header ({0})")]
    BadHost(String),
    /// More than one `Host` header: which one names the server is anyone's guess (RFC
    /// 9112 section 3.2: the server answers 400).
    #[error("the request has {0} Host headers; send one (RFC 9112 section 3.2)")]
    SeveralHosts(usize),
    /// A host name this door does not answer to.
    #[error(
        "the Host header {0:?} is not a name of this server (a page reached by DNS \
         rebinding?); add it to [mcp] allowed_hosts if clients reach the host by it"
    )]
    Host(String),
    /// A browser origin that is not the server's own or allowed.
    #[error(
        "the Origin {0:?} is not allowed; add it to [mcp] allowed_origins if a browser page \
         there may read this door"
    )]
    Origin(String),
}

impl Refused {
    /// The HTTP status to answer with.
    pub(super) fn status(&self) -> hyper::StatusCode {
        match self {
            Refused::BadHost(_) | Refused::SeveralHosts(_) => hyper::StatusCode::BAD_REQUEST,
            Refused::Host(_) | Refused::Origin(_) => hyper::StatusCode::FORBIDDEN,
        }
    }
}

/// Refuses a request with more than one `Host` header (the doors check the first; a
/// proxy may have read another).
pub(super) fn one_host(headers: &hyper::HeaderMap) -> Result<(), Refused> {
    match headers.get_all(hyper::header::HOST).iter().count() {
        0 | 1 => Ok(()),
        n => Err(Refused::SeveralHosts(n)),
    }
}

impl AllowedPeers {
    /// The names a door bound at `bound` with `options` answers to.
    pub(super) fn new(options: &HttpOptions, bound: SocketAddr) -> AllowedPeers {
        let scheme = if options.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let port = bound.port();
        let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
        hosts.extend(options.allowed_hosts.iter().cloned());
        let mut origins: Vec<String> = vec![
            format!("{scheme}://localhost:{port}"),
            format!("{scheme}://127.0.0.1:{port}"),
            format!("{scheme}://[::1]:{port}"),
        ];
        if !bound.ip().is_unspecified() {
            origins.push(format!("{scheme}://{bound}"));
        }
        for host in &options.allowed_hosts {
            if host.contains(':') && !host.starts_with('[') {
                origins.push(format!("{scheme}://{host}"));
            } else {
                origins.push(format!("{scheme}://{host}:{port}"));
            }
        }
        origins.extend(options.allowed_origins.iter().cloned());
        AllowedPeers { hosts, origins }
    }

    /// Checks a request's `Host` (or HTTP/2 authority) and `Origin` by rmcp's rules: the
    /// host (and port, where the allowed entry names one) must be listed; an `Origin`,
    /// when there is one, must match a listed origin's scheme, host and port.
    pub(super) fn check(
        &self,
        uri: &hyper::Uri,
        headers: &hyper::HeaderMap,
    ) -> Result<(), Refused> {
        one_host(headers)?;
        let authority = match headers.get(hyper::header::HOST) {
            Some(value) => {
                let text = value
                    .to_str()
                    .map_err(|_| Refused::BadHost("not text".into()))?;
                hyper::http::uri::Authority::try_from(text)
                    .map_err(|_| Refused::BadHost(format!("{text:?}")))?
            }
            None => uri
                .authority()
                .cloned()
                .ok_or_else(|| Refused::BadHost("missing".into()))?,
        };
        let host = normalize_host(authority.host());
        let port = authority.port_u16();
        let host_allowed = self.hosts.iter().any(|allowed| {
            let (a_host, a_port) = match hyper::http::uri::Authority::try_from(allowed.trim()) {
                Ok(a) => (normalize_host(a.host()), a.port_u16()),
                Err(_) => (normalize_host(allowed.trim()), None),
            };
            a_host == host && a_port.is_none_or(|p| port == Some(p))
        });
        if !host_allowed {
            return Err(Refused::Host(authority.to_string()));
        }
        let Some(origin) = headers.get(hyper::header::ORIGIN) else {
            return Ok(());
        };
        let text = origin
            .to_str()
            .map_err(|_| Refused::Origin("(not text)".into()))?;
        let Some(origin) = Origin::parse(text) else {
            return Err(Refused::Origin(text.to_owned()));
        };
        if self
            .origins
            .iter()
            .any(|allowed| origin.allowed_by(allowed))
        {
            Ok(())
        } else {
            Err(Refused::Origin(text.to_owned()))
        }
    }
}

fn normalize_host(host: &str) -> String {
    host.trim_matches(['[', ']']).to_ascii_lowercase()
}

/// An `Origin` header's value.
#[derive(Debug, PartialEq, Eq)]
enum Origin {
    /// `null` (a sandboxed frame, a file).
    Null,
    /// `scheme://host[:port]`.
    Tuple {
        scheme: String,
        host: String,
        port: Option<u16>,
    },
}

impl Origin {
    fn parse(value: &str) -> Option<Origin> {
        let value = value.trim();
        if value.eq_ignore_ascii_case("null") {
            return Some(Origin::Null);
        }
        let uri = hyper::Uri::try_from(value).ok()?;
        let authority = uri.authority()?;
        Some(Origin::Tuple {
            scheme: uri.scheme_str()?.to_ascii_lowercase(),
            host: normalize_host(authority.host()),
            port: authority.port_u16(),
        })
    }

    /// Whether the allowed entry `allowed` (an origin, `null`, or `scheme://host:*`)
    /// admits this origin. An entry without a port admits any port, as rmcp's does.
    fn allowed_by(&self, allowed: &str) -> bool {
        let allowed = allowed.trim();
        let (base, any_port) = match allowed.strip_suffix(":*") {
            Some(base) => (base, true),
            None => (allowed, false),
        };
        match (Origin::parse(base), self) {
            (Some(Origin::Null), Origin::Null) => !any_port,
            (
                Some(Origin::Tuple {
                    scheme: a_scheme,
                    host: a_host,
                    port: a_port,
                }),
                Origin::Tuple { scheme, host, port },
            ) => {
                let default = |s: &str| match s {
                    "http" => Some(80),
                    "https" => Some(443),
                    _ => None,
                };
                let port_ok = match (any_port, a_port) {
                    (true, Some(_)) => false,
                    (true, None) | (false, None) => true,
                    (false, Some(p)) => port.or_else(|| default(scheme)) == Some(p),
                };
                a_scheme == *scheme && a_host == *host && port_ok
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(host: Option<&str>, origin: Option<&str>) -> hyper::HeaderMap {
        let mut h = hyper::HeaderMap::new();
        if let Some(v) = host {
            h.insert(hyper::header::HOST, v.parse().expect("header"));
        }
        if let Some(v) = origin {
            h.insert(hyper::header::ORIGIN, v.parse().expect("header"));
        }
        h
    }

    #[test]
    fn two_host_headers_are_refused_with_400() {
        let mut h = headers(Some("127.0.0.1"), None);
        assert_eq!(one_host(&h), Ok(()));
        h.append(hyper::header::HOST, "evil.example".parse().expect("header"));
        let refused = one_host(&h).expect_err("two Host headers");
        assert_eq!(refused, Refused::SeveralHosts(2));
        assert_eq!(refused.status(), hyper::StatusCode::BAD_REQUEST);
    }

    fn peers(allowed_hosts: &[&str], allowed_origins: &[&str]) -> AllowedPeers {
        let options = HttpOptions {
            addr: "127.0.0.1:0".parse().expect("addr"),
            auth: super::super::HttpAuth::NoAuth,
            tls: None,
            insecure_http: false,
            allowed_hosts: allowed_hosts.iter().map(|s| (*s).to_owned()).collect(),
            allowed_origins: allowed_origins.iter().map(|s| (*s).to_owned()).collect(),
            limits: crate::config::HttpLimits::default(),
            oauth: None,
        };
        AllowedPeers::new(&options, "127.0.0.1:9464".parse().expect("addr"))
    }

    #[test]
    fn loopback_names_pass_and_a_rebinding_name_or_foreign_origin_is_refused() {
        let p = peers(&["metrics.internal"], &["https://grafana.example.com:*"]);
        let uri = hyper::Uri::from_static("/metrics");
        for host in [
            "127.0.0.1:9464",
            "localhost:9464",
            "[::1]:9464",
            "LOCALHOST",
        ] {
            assert_eq!(p.check(&uri, &headers(Some(host), None)), Ok(()), "{host}");
        }
        assert_eq!(
            p.check(&uri, &headers(Some("metrics.internal:9464"), None)),
            Ok(())
        );
        assert!(matches!(
            p.check(&uri, &headers(Some("evil.example:9464"), None)),
            Err(Refused::Host(_))
        ));
        assert!(matches!(
            p.check(&uri, &headers(None, None)),
            Err(Refused::BadHost(_))
        ));
        assert_eq!(
            p.check(
                &uri,
                &headers(Some("127.0.0.1:9464"), Some("http://127.0.0.1:9464"))
            ),
            Ok(())
        );
        assert_eq!(
            p.check(
                &uri,
                &headers(Some("localhost"), Some("https://grafana.example.com:3000"))
            ),
            Ok(())
        );
        for origin in [
            "http://evil.example",
            "http://127.0.0.1:8080",
            "https://127.0.0.1:9464",
            "null",
            "not an origin",
        ] {
            let refused = p.check(&uri, &headers(Some("127.0.0.1:9464"), Some(origin)));
            assert!(
                matches!(refused, Err(Refused::Origin(_))),
                "{origin}: {refused:?}"
            );
        }
    }
}
