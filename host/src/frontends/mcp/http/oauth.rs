//! MCP over HTTP as an OAuth 2.1 resource server (`[mcp.oauth]`): the protected-resource
//! metadata clients discover the authorization server by (RFC 9728), and the check of a
//! JWT access token (RFC 9068): signed by one of the issuer's keys (fetched from its
//! metadata's `jwks_uri`, cached, fetched again for a key id it has not seen: rotation;
//! a fetch never stands on the path of a token whose key is already known),
//! with an allowed asymmetric algorithm (never `none`, never HMAC), from the issuer, for
//! this resource (RFC 8707 audience), in its validity window, with the scopes asked for.
//! A token's scopes may choose its profile.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::OAuthSettings;

/// How long fetched keys are used before they are fetched again.
const KEYS_FRESH: Duration = Duration::from_secs(10 * 60);
/// The least time between two fetches (a token naming an unknown key cannot make the
/// host fetch in a loop).
const REFETCH_AFTER: Duration = Duration::from_secs(10);
/// How long a metadata or key-set request may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest key set or metadata document read.
const MAX_DOCUMENT: usize = 256 * 1024;

/// Who an accepted access token speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OAuthIdentity {
    /// Its `sub` claim.
    pub(crate) subject: String,
    /// The profile its scopes choose (`None`: the server's own).
    pub(crate) profile: Option<String>,
}

/// Why an access token was not let in.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OAuthRefusal {
    /// Not a valid token for this resource (401 `invalid_token`).
    #[error("{0}")]
    Invalid(String),
    /// A valid token without the scopes asked for (403 `insufficient_scope`).
    #[error("{0}")]
    InsufficientScope(String),
    /// The issuer's keys cannot be had now (503; the client may try again).
    #[error("{0}")]
    KeysUnavailable(KeyFetchError),
}

/// The claims read from an access token (the library checks `exp`, `nbf`, `iss`, `aud`).
#[derive(Deserialize)]
struct Claims {
    sub: String,
    /// RFC 9068: space-separated.
    #[serde(default)]
    scope: Option<String>,
    /// Some servers write a list (`scp`).
    #[serde(default)]
    scp: Option<ScopeList>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ScopeList {
    List(Vec<String>),
    Text(String),
}

impl Claims {
    fn scopes(&self) -> BTreeSet<String> {
        let mut scopes = BTreeSet::new();
        if let Some(text) = &self.scope {
            scopes.extend(text.split_whitespace().map(str::to_owned));
        }
        match &self.scp {
            Some(ScopeList::List(list)) => scopes.extend(list.iter().cloned()),
            Some(ScopeList::Text(text)) => {
                scopes.extend(text.split_whitespace().map(str::to_owned));
            }
            None => {}
        }
        scopes
    }
}

/// The issuer's keys as last fetched.
#[derive(Default)]
struct Keys {
    keys: Vec<Jwk>,
    /// When they were fetched.
    fetched: Option<Instant>,
    /// When a fetch was last tried, whether or not it worked (an issuer that is down is
    /// not asked again on every request).
    tried: Option<Instant>,
    /// The key set's URL, once known (configured, or from the issuer's metadata).
    url: Option<String>,
}

/// The resource server: its settings, and the issuer's keys.
pub(crate) struct OAuthResource {
    settings: OAuthSettings,
    /// `settings.algorithms`, read.
    algorithms: Vec<Algorithm>,
    /// Where the metadata is served (RFC 9728's path, and the bare one).
    metadata_paths: [String; 2],
    /// The metadata's URL, for the challenge.
    metadata_url: String,
    /// The issuer's keys, shared with the background fetches that refresh them.
    keys: Arc<KeySource>,
}

/// The issuer's keys and how they are fetched. The cache's lock is held only to read or
/// store keys, never across a fetch: a token signed with a known key is checked at once
/// while another request's fetch (a key id never seen, a stale set) waits on a slow or
/// hanging issuer. One fetch runs at a time (`fetching`); a stale set is refreshed in the
/// background.
struct KeySource {
    issuer: String,
    http: reqwest::Client,
    cache: Mutex<Keys>,
    fetching: tokio::sync::Mutex<()>,
}

/// Why the issuer's keys could not be had.
#[derive(Debug, thiserror::Error)]
pub(crate) enum KeyFetchError {
    #[error("{url}: {source}")]
    Request { url: String, source: reqwest::Error },
    #[error("{url}: HTTP {status}")]
    Status {
        url: String,
        status: reqwest::StatusCode,
    },
    #[error("{url}: larger than {MAX_DOCUMENT} bytes")]
    TooLarge { url: String },
    #[error("{url}: not JSON: {source}")]
    NotJson {
        url: String,
        source: serde_json::Error,
    },
    #[error("{url} is not a JWK set (no \"keys\" list)")]
    NotAKeySet { url: String },
    #[error("{url} names the issuer {named:?}, not {issuer:?}; fix [mcp.oauth] issuer")]
    OtherIssuer {
        url: String,
        named: Option<String>,
        issuer: String,
    },
    #[error("{url} has no jwks_uri; set [mcp.oauth] jwks_url")]
    NoJwksUri { url: String },
    #[error(
        "could not read the issuer's metadata ({}); check [mcp.oauth] issuer, or set jwks_url",
        .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    NoMetadata(Vec<KeyFetchError>),
}

impl OAuthResource {
    pub(crate) fn new(settings: OAuthSettings) -> Result<OAuthResource, reqwest::Error> {
        // rustls needs one process-wide crypto provider; a second install is a no-op.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        let keys = Arc::new(KeySource {
            issuer: settings.issuer.clone(),
            http,
            cache: Mutex::new(Keys {
                url: settings.jwks_url.clone(),
                ..Keys::default()
            }),
            fetching: tokio::sync::Mutex::new(()),
        });
        // The config check accepts only names these parse (asymmetric algorithms).
        let algorithms = settings
            .algorithms
            .iter()
            .filter_map(|a| a.parse::<Algorithm>().ok())
            .collect();
        let base = "/.well-known/oauth-protected-resource";
        let path = resource_path(&settings.resource);
        let metadata_paths = [format!("{base}{path}"), base.to_owned()];
        let metadata_url = format!("{}{}", origin(&settings.resource), metadata_paths[0]);
        Ok(OAuthResource {
            settings,
            algorithms,
            metadata_paths,
            metadata_url,
            keys,
        })
    }

    /// Whether `token` has the shape of a JWT (three base64url parts), so is worth
    /// checking as an access token rather than as a static token.
    pub(crate) fn looks_like_jwt(token: &str) -> bool {
        let parts: Vec<&str> = token.split('.').collect();
        parts.len() == 3
            && parts[..2].iter().all(|p| !p.is_empty())
            && parts.iter().all(|p| {
                p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            })
    }

    /// Whether `path` is where the protected-resource metadata is served: RFC 9728's
    /// path (the well-known prefix before the resource's path) or the bare one.
    pub(crate) fn serves_metadata_at(&self, path: &str) -> bool {
        self.metadata_paths.iter().any(|p| p == path)
    }

    /// The protected-resource metadata (RFC 9728).
    pub(crate) fn metadata(&self) -> Value {
        let mut scopes: BTreeSet<&str> = self.settings.scopes.iter().map(String::as_str).collect();
        scopes.extend(self.settings.profiles.keys().map(String::as_str));
        json!({
            "resource": self.settings.resource,
            "authorization_servers": [self.settings.issuer],
            "scopes_supported": scopes,
            "bearer_methods_supported": ["header"],
            "resource_name": "toolhost",
        })
    }

    /// The `WWW-Authenticate` value of a 401 or 403: where the metadata is, the scopes
    /// asked for, and the error (none when no token was sent).
    pub(crate) fn challenge(&self, error: Option<(&str, &str)>) -> String {
        let mut value = format!(
            r#"Bearer realm="toolhost", resource_metadata="{}""#,
            self.metadata_url
        );
        if !self.settings.scopes.is_empty() {
            value.push_str(&format!(r#", scope="{}""#, self.settings.scopes.join(" ")));
        }
        if let Some((code, description)) = error {
            let description: String = description
                .chars()
                .map(|c| {
                    if c == '"' || c == '\\' || c.is_control() {
                        '\''
                    } else {
                        c
                    }
                })
                .collect();
            value.push_str(&format!(
                r#", error="{code}", error_description="{description}""#
            ));
        }
        value
    }

    /// Checks an access token; who it speaks for, or why it is refused.
    pub(crate) async fn check(&self, token: &str) -> Result<OAuthIdentity, OAuthRefusal> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| {
            OAuthRefusal::Invalid(format!("not a signed JWT access token we accept: {e}"))
        })?;
        let alg = header.alg;
        if !self.algorithms.contains(&alg) {
            return Err(OAuthRefusal::Invalid(format!(
                "the token is signed with {alg:?}, which this resource does not accept"
            )));
        }
        // RFC 9068 section 4: an access token says so (an ID token of the same issuer,
        // signed with the same keys, must not pass for one).
        let typ = header.typ.as_deref().map(str::to_ascii_lowercase);
        if self.settings.require_at_jwt
            && !matches!(typ.as_deref(), Some("at+jwt" | "application/at+jwt"))
        {
            return Err(OAuthRefusal::Invalid(format!(
                "the token's header says typ {}, not at+jwt (RFC 9068 access tokens say \
                 so; [mcp.oauth] require_at_jwt = false lets others in)",
                header
                    .typ
                    .as_deref()
                    .map_or_else(|| "nothing".to_owned(), |t| format!("{t:?}"))
            )));
        }
        // RFC 7515 section 4.1.11: a header extension this host does not understand,
        // marked critical, makes the token invalid; it understands none.
        if let Some(crit) = critical_extensions(token) {
            return Err(OAuthRefusal::Invalid(format!(
                "the token's header marks extensions critical ({crit}), which this resource \
                 does not understand (RFC 7515 section 4.1.11)"
            )));
        }
        let key = self.key(header.kid.as_deref(), alg).await?;
        let mut validation = Validation::new(alg);
        validation.algorithms = vec![alg];
        validation.set_issuer(&[&self.settings.issuer]);
        validation.set_audience(&[&self.settings.resource]);
        validation.leeway = self.settings.leeway.as_secs();
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let data = jsonwebtoken::decode::<Claims>(token, &key, &validation)
            .map_err(|e| OAuthRefusal::Invalid(refusal_text(&e)))?;
        let scopes = data.claims.scopes();
        let missing: Vec<&str> = self
            .settings
            .scopes
            .iter()
            .filter(|s| !scopes.contains(*s))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(OAuthRefusal::InsufficientScope(format!(
                "the token lacks the scope {}",
                missing.join(" ")
            )));
        }
        let profiles: BTreeSet<&String> = self
            .settings
            .profiles
            .iter()
            .filter(|(scope, _)| scopes.contains(*scope))
            .map(|(_, profile)| profile)
            .collect();
        if profiles.len() > 1 {
            return Err(OAuthRefusal::InsufficientScope(format!(
                "the token's scopes choose several profiles ({}); ask for a token with the \
                 scope of one",
                profiles
                    .iter()
                    .map(|p| p.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        Ok(OAuthIdentity {
            subject: data.claims.sub,
            profile: profiles.into_iter().next().cloned(),
        })
    }

    /// The issuer's key for `kid` (or its only key for `alg`). A known key is used at
    /// once (a stale set is refreshed in the background); a key id not in the set waits
    /// for a fetch (a rotation), at most one try per [`REFETCH_AFTER`].
    async fn key(&self, kid: Option<&str>, alg: Algorithm) -> Result<DecodingKey, OAuthRefusal> {
        let source = &self.keys;
        let (known, stale) = {
            let keys = source.lock();
            let stale = keys.fetched.is_none_or(|at| at.elapsed() >= KEYS_FRESH);
            (find(&keys.keys, kid, alg).cloned(), stale)
        };
        let jwk = match known {
            Some(jwk) => {
                if stale && source.may_fetch() {
                    let source = Arc::clone(source);
                    tokio::spawn(async move {
                        if let Err(e) = source.refresh().await {
                            tracing::warn!(
                                "[mcp.oauth] could not fetch the issuer's keys again: {e}"
                            );
                        }
                    });
                }
                jwk
            }
            None => {
                let fetched = if source.may_fetch() {
                    source.refresh().await
                } else {
                    Ok(())
                };
                let keys = source.lock();
                match (find(&keys.keys, kid, alg), fetched) {
                    (Some(jwk), _) => jwk.clone(),
                    (None, Err(e)) if keys.keys.is_empty() => {
                        return Err(OAuthRefusal::KeysUnavailable(e));
                    }
                    (None, fetched) => {
                        if let Err(e) = fetched {
                            tracing::warn!(
                                "[mcp.oauth] could not fetch the issuer's keys again: {e}"
                            );
                        }
                        return Err(OAuthRefusal::Invalid(format!(
                            "the token is signed with a key the issuer does not publish ({})",
                            kid.map_or_else(|| "no key id".to_owned(), |k| format!("key id {k:?}"))
                        )));
                    }
                }
            }
        };
        DecodingKey::from_jwk(&jwk)
            .map_err(|e| OAuthRefusal::Invalid(format!("the issuer's key cannot be used: {e}")))
    }
}

impl KeySource {
    fn lock(&self) -> std::sync::MutexGuard<'_, Keys> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a fetch may be tried now (none tried within [`REFETCH_AFTER`]).
    fn may_fetch(&self) -> bool {
        self.lock()
            .tried
            .is_none_or(|at| at.elapsed() >= REFETCH_AFTER)
    }

    /// Fetches the key set into the cache, unless another fetch did so (or tried)
    /// within [`REFETCH_AFTER`] while this one waited its turn.
    async fn refresh(&self) -> Result<(), KeyFetchError> {
        let _turn = self.fetching.lock().await;
        let url = {
            let mut keys = self.lock();
            if keys.tried.is_some_and(|at| at.elapsed() < REFETCH_AFTER) {
                return Ok(());
            }
            keys.tried = Some(Instant::now());
            keys.url.clone()
        };
        let url = match url {
            Some(url) => url,
            None => {
                let url = self.discover_jwks().await?;
                self.lock().url = Some(url.clone());
                url
            }
        };
        let fetched = self.fetch_keys(&url).await?;
        let mut keys = self.lock();
        keys.keys = fetched;
        keys.fetched = Some(Instant::now());
        Ok(())
    }

    /// Fetches the key set at `url`: its signing keys.
    async fn fetch_keys(&self, url: &str) -> Result<Vec<Jwk>, KeyFetchError> {
        let set = self.get_json(url).await?;
        let listed =
            set.get("keys")
                .and_then(Value::as_array)
                .ok_or_else(|| KeyFetchError::NotAKeySet {
                    url: url.to_owned(),
                })?;
        // Keys of kinds this host cannot use (encryption keys, unknown types) are skipped,
        // not fatal: the issuer may publish more than signing keys.
        let usable: Vec<Jwk> = listed
            .iter()
            .filter_map(|k| serde_json::from_value::<Jwk>(k.clone()).ok())
            .filter(|k| {
                !matches!(
                    k.common.public_key_use,
                    Some(PublicKeyUse::Encryption | PublicKeyUse::Other(_))
                )
            })
            .collect();
        tracing::info!(
            "[mcp.oauth] fetched {} signing key(s) of {} from {url}",
            usable.len(),
            self.issuer
        );
        Ok(usable)
    }

    /// The `jwks_uri` of the issuer's metadata: RFC 8414's well-known location, then
    /// OpenID Connect's; the metadata must name this issuer.
    async fn discover_jwks(&self) -> Result<String, KeyFetchError> {
        let issuer = self.issuer.trim_end_matches('/');
        let candidates = [
            format!(
                "{}/.well-known/oauth-authorization-server{}",
                origin(issuer),
                resource_path(issuer)
            ),
            format!("{issuer}/.well-known/openid-configuration"),
        ];
        let mut tried = Vec::new();
        for url in candidates {
            match self.get_json(&url).await {
                Ok(metadata) => {
                    let named = metadata.get("issuer").and_then(Value::as_str);
                    if named.map(|n| n.trim_end_matches('/')) != Some(issuer) {
                        return Err(KeyFetchError::OtherIssuer {
                            named: named.map(str::to_owned),
                            issuer: issuer.to_owned(),
                            url,
                        });
                    }
                    return metadata
                        .get("jwks_uri")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .ok_or(KeyFetchError::NoJwksUri { url });
                }
                Err(e) => tried.push(e),
            }
        }
        Err(KeyFetchError::NoMetadata(tried))
    }

    async fn get_json(&self, url: &str) -> Result<Value, KeyFetchError> {
        let request = |source| KeyFetchError::Request {
            url: url.to_owned(),
            source,
        };
        let response = self
            .http
            .get(url)
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(request)?;
        if !response.status().is_success() {
            return Err(KeyFetchError::Status {
                url: url.to_owned(),
                status: response.status(),
            });
        }
        let body = response.bytes().await.map_err(request)?;
        if body.len() > MAX_DOCUMENT {
            return Err(KeyFetchError::TooLarge {
                url: url.to_owned(),
            });
        }
        serde_json::from_slice(&body).map_err(|source| KeyFetchError::NotJson {
            url: url.to_owned(),
            source,
        })
    }
}

/// The path of a URL (`/mcp` of `https://host/mcp`; empty for none or `/`).
fn resource_path(url: &str) -> &str {
    url[origin(url).len()..].trim_end_matches('/')
}

/// The scheme and authority of a URL (`https://host:8443` of `https://host:8443/mcp`).
fn origin(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(i) => &url[..after_scheme + i],
        None => url,
    }
}

/// The `crit` header parameter of `token` (already decoded once as a JWT header), its
/// names joined, when it has one.
fn critical_extensions(token: &str) -> Option<String> {
    use base64::Engine as _;
    let header = token.split('.').next()?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header.trim_end_matches('='))
        .ok()?;
    let value: Value = serde_json::from_slice(&bytes).ok()?;
    let crit = value.get("crit")?;
    Some(match crit.as_array() {
        Some(names) => names
            .iter()
            .map(|n| n.as_str().map_or_else(|| n.to_string(), str::to_owned))
            .collect::<Vec<_>>()
            .join(", "),
        None => crit.to_string(),
    })
}

/// The key of `keys` for a token signed with `alg` and key id `kid`: that id, else the
/// only key whose declared algorithm (if any) is `alg`.
fn find<'a>(keys: &'a [Jwk], kid: Option<&str>, alg: Algorithm) -> Option<&'a Jwk> {
    let fits = |k: &&Jwk| {
        k.common
            .key_algorithm
            .is_none_or(|a| format!("{a:?}") == format!("{alg:?}"))
    };
    match kid {
        Some(kid) => keys
            .iter()
            .filter(fits)
            .find(|k| k.common.key_id.as_deref() == Some(kid)),
        None => {
            let mut fitting = keys.iter().filter(fits);
            let only = fitting.next();
            fitting.next().is_none().then_some(only).flatten()
        }
    }
}

/// What a failed check says to the client.
fn refusal_text(e: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind;
    match e.kind() {
        ErrorKind::ExpiredSignature => "the token has expired".to_owned(),
        ErrorKind::ImmatureSignature => "the token is not valid yet (nbf)".to_owned(),
        ErrorKind::InvalidIssuer => "the token is from another issuer".to_owned(),
        ErrorKind::InvalidAudience => {
            "the token is not for this resource (its aud does not name it)".to_owned()
        }
        ErrorKind::InvalidSignature => "the token's signature does not verify".to_owned(),
        ErrorKind::MissingRequiredClaim(claim) => format!("the token has no {claim} claim"),
        ErrorKind::InvalidAlgorithm => "the token's algorithm does not fit the key".to_owned(),
        _ => format!("the token cannot be read: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(resource: &str) -> OAuthResource {
        OAuthResource::new(OAuthSettings {
            issuer: "https://auth.example.com".into(),
            resource: resource.into(),
            jwks_url: None,
            scopes: vec!["mcp:tools".into()],
            profiles: [("tools:coder".to_owned(), "coder".to_owned())].into(),
            algorithms: vec!["RS256".into()],
            leeway: Duration::from_secs(60),
            require_at_jwt: true,
        })
        .expect("client")
    }

    #[test]
    fn the_metadata_is_where_rfc_9728_puts_it_and_names_the_issuer_and_scopes() {
        let r = resource("https://mcp.example.com/mcp");
        assert_eq!(
            r.metadata_paths,
            [
                "/.well-known/oauth-protected-resource/mcp".to_owned(),
                "/.well-known/oauth-protected-resource".to_owned()
            ]
        );
        assert_eq!(
            r.metadata_url,
            "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
        );
        let m = r.metadata();
        assert_eq!(m["resource"], "https://mcp.example.com/mcp");
        assert_eq!(
            m["authorization_servers"],
            json!(["https://auth.example.com"])
        );
        assert_eq!(m["scopes_supported"], json!(["mcp:tools", "tools:coder"]));
        let bare = resource("https://mcp.example.com");
        assert_eq!(
            bare.metadata_url,
            "https://mcp.example.com/.well-known/oauth-protected-resource"
        );
        assert_eq!(
            r.challenge(Some(("invalid_token", "the token \"has\" expired"))),
            "Bearer realm=\"toolhost\", resource_metadata=\"https://mcp.example.com/.well-known/\
             oauth-protected-resource/mcp\", scope=\"mcp:tools\", error=\"invalid_token\", \
             error_description=\"the token 'has' expired\""
        );
    }

    #[test]
    fn a_critical_header_extension_is_found() {
        use base64::Engine as _;
        let part = |v: serde_json::Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
        };
        let with = format!(
            "{}.{}.sig",
            part(serde_json::json!({"alg": "RS256", "crit": ["x-a", "x-b"], "x-a": 1, "x-b": 2})),
            part(serde_json::json!({}))
        );
        assert_eq!(critical_extensions(&with).as_deref(), Some("x-a, x-b"));
        let without = format!(
            "{}.{}.sig",
            part(serde_json::json!({"alg": "RS256", "typ": "at+jwt"})),
            part(serde_json::json!({}))
        );
        assert_eq!(critical_extensions(&without), None);
    }

    #[test]
    fn only_three_base64url_parts_look_like_a_jwt() {
        assert!(OAuthResource::looks_like_jwt("eyJh.eyJz.c2ln"));
        assert!(OAuthResource::looks_like_jwt("eyJh.eyJz."));
        assert!(!OAuthResource::looks_like_jwt("th_0123456789abcdef"));
        assert!(!OAuthResource::looks_like_jwt("a.b"));
        assert!(!OAuthResource::looks_like_jwt("a.b.c d"));
    }
}
