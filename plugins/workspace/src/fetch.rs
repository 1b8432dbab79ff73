//! `fetch_url`: an HTTP(S) GET with caps on size, time and redirects. HTML comes back as
//! Markdown (the `htmd` crate), text and JSON as text, anything else described (type and
//! size) rather than dumped. Only public addresses are reached unless the workspace says
//! `allow_private_addresses` ([`crate::fetch_guard`]).
//!
//! Built on reqwest's blocking client: the host already builds reqwest (with rustls and
//! ring) for its model client, so this adds no HTTP or TLS stack to the workspace, and its
//! resolver and redirect hooks are stable API (ureq 3 keeps its resolver in an
//! `unversioned` module). The request runs on a thread of its own and the call's thread
//! watches the cancel flag, so a cancel returns at once.
//!
//! One deadline, `timeout_secs` from the call's start, covers everything: resolving,
//! connecting, TLS, every redirect, the headers and the whole body. reqwest's blocking
//! client only limits each wait (a body dripping a byte at a time never trips it), so the
//! deadline is held three ways: the request's own (total) timeout in reqwest's runtime,
//! a check before every body read, and the call's thread, which ends the call when the
//! deadline has passed whatever the request thread is doing. The error says how far the
//! request got and how many bytes of the body were read. No compression is asked for, so
//! the size cap counts the bytes sent.

use std::io::Read as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use reqwest::Url;
use reqwest::header::{CONTENT_LENGTH, CONTENT_TYPE};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_plugin_api::{CancelFlag, Structured, ToolContext, ToolError, tool};

use crate::fetch_guard::{GuardedResolver, check_url, redirect_policy};
use crate::roots::Workspace;

/// The size cap when the call names none.
pub(crate) const DEFAULT_MAX_BYTES: u64 = 5 * 1024 * 1024;
/// The largest size cap a call may ask for.
pub(crate) const MAX_BYTES_CEILING: u64 = 50 * 1024 * 1024;
/// The time limit when the call names none.
pub(crate) const DEFAULT_TIMEOUT_SECS: u64 = 30;
/// The longest time limit a call may ask for.
pub(crate) const MAX_TIMEOUT_SECS: u64 = 120;
/// Redirects followed at most.
pub(crate) const MAX_REDIRECTS: usize = 5;
/// How long past the deadline the call's thread waits for the request thread's own
/// answer (normally the same time-out error, from reqwest) before it answers itself.
const DEADLINE_GRACE: Duration = Duration::from_millis(500);
/// The longest a single connection attempt may take (within the deadline).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Arguments of `fetch_url`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FetchUrlArgs {
    /// The http:// or https:// URL to GET.
    url: String,
    /// The most bytes of the body to read (default 5 MiB, at most 50 MiB); a longer body
    /// is cut there and the result says so.
    #[serde(default)]
    max_bytes: Option<u64>,
    /// Seconds for the whole request, redirects and body included (default 30, at most
    /// 120).
    #[serde(default)]
    timeout_secs: Option<u64>,
}

/// What `fetch_url` returns.
#[derive(Serialize, JsonSchema)]
pub struct FetchResult {
    /// The URL the content came from (after redirects).
    pub url: String,
    /// The HTTP status code.
    pub status: u16,
    /// The Content-Type the server sent (empty if none).
    pub content_type: String,
    /// The body's bytes read (at most the size cap).
    pub bytes: u64,
    /// The Content-Length the server declared, if any.
    pub declared_length: Option<u64>,
    /// The body was longer than the size cap and was cut.
    pub truncated: bool,
    /// How the content is shown: "markdown" (from HTML), "text", or "described" (not
    /// shown).
    pub shown_as: String,
    /// The redirects followed, in order.
    pub redirects: Vec<String>,
    /// The content: Markdown, text, or a description.
    pub content: String,
}

/// Fetches a web page or file with an HTTP(S) GET and returns its content: HTML as
/// readable Markdown (scripts and styles dropped), text and JSON as they are, other
/// types (images, PDFs, archives) described by type and size, not shown. Follows up to
/// 5 redirects. Reads at most max_bytes of the body (default 5 MiB, up to 50 MiB; a
/// longer body is cut and marked) within timeout_secs (default 30, up to 120), one
/// limit for the whole request from connecting to the body's last byte. Only public
/// internet addresses: this machine's own addresses, loopback, private-network,
/// link-local, cloud metadata, documentation and other special-purpose addresses are
/// refused (also when a name resolves to one or a redirect leads there); the workspace
/// config can allow private addresses (local networks and this machine). No cookies, no
/// authentication, no proxy.
#[tool(risk = network)]
pub async fn fetch_url(
    ctx: &ToolContext<'_>,
    #[args] args: FetchUrlArgs,
) -> Result<Structured<FetchResult>, ToolError> {
    let allow_private = Workspace::of(ctx).await?.rules.allow_private_addresses;
    let request = Request::new(args, allow_private)?;
    let value = ctx
        .blocking(move |cancel| fetch(request, cancel))
        .await
        .map_err(ToolError::failed)??;
    let text = fetch_url_text(&value);
    Ok(Structured::new(value).text(text))
}

/// The text the model reads for a result of `fetch_url`.
fn fetch_url_text(r: &FetchResult) -> String {
    let mut text = format!("GET {} -> {}", r.url, r.status);
    if !r.content_type.is_empty() {
        text.push_str(&format!(" ({})", r.content_type));
    }
    text.push_str(&format!(", {} bytes", r.bytes));
    if !r.redirects.is_empty() {
        text.push_str(&format!(", after {} redirects", r.redirects.len()));
    }
    text.push('\n');
    if r.truncated {
        text.push_str(&format!(
            "note: the body is longer than the size cap; only its first {} bytes were \
                 read (pass a larger max_bytes, up to {MAX_BYTES_CEILING})\n",
            r.bytes
        ));
    }
    text.push('\n');
    text.push_str(&r.content);
    text
}

/// A checked request.
struct Request {
    /// The URL (scheme and address checked).
    url: Url,
    /// The size cap.
    max_bytes: u64,
    /// The time limit.
    timeout: Duration,
    /// `[workspace] allow_private_addresses`.
    allow_private: bool,
}

impl Request {
    /// Checks `args`: a URL the guard allows, caps within their ceilings.
    fn new(args: FetchUrlArgs, allow_private: bool) -> Result<Request, ToolError> {
        let url = Url::parse(args.url.trim()).map_err(|e| {
            ToolError::failed(format!(
                "{} is not a URL ({e}); give a full http:// or https:// address",
                args.url
            ))
        })?;
        check_url(&url, allow_private).map_err(|e| ToolError::failed(e.to_string()))?;
        let max_bytes = args
            .max_bytes
            .unwrap_or(DEFAULT_MAX_BYTES)
            .clamp(1, MAX_BYTES_CEILING);
        let secs = args
            .timeout_secs
            .unwrap_or(DEFAULT_TIMEOUT_SECS)
            .clamp(1, MAX_TIMEOUT_SECS);
        Ok(Request {
            url,
            max_bytes,
            timeout: Duration::from_secs(secs),
            allow_private,
        })
    }
}

/// How far a request got, for the time-out error.
#[derive(Debug, Clone)]
struct Progress {
    /// The URL being fetched (the final one once the headers arrived).
    url: String,
    /// The response's headers arrived.
    headers: bool,
    /// The body's bytes read so far.
    bytes: u64,
    /// The Content-Length the server declared.
    declared: Option<u64>,
}

/// [`Progress`] shared between the request thread and the call's thread.
type SharedProgress = Arc<Mutex<Progress>>;

/// Runs `request` on a thread of its own and waits for it, for `cancel`, or for the
/// deadline (`timeout_secs` from now).
fn fetch(request: Request, cancel: &CancelFlag) -> Result<FetchResult, ToolError> {
    let deadline = Instant::now() + request.timeout;
    let timeout = request.timeout;
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(Mutex::new(Progress {
        url: request.url.to_string(),
        headers: false,
        bytes: 0,
        declared: None,
    }));
    let (send, receive) = mpsc::channel();
    let worker_stop = Arc::clone(&stop);
    let worker_progress = Arc::clone(&progress);
    std::thread::Builder::new()
        .name("toolhost-fetch".to_owned())
        .spawn(move || {
            let _ = send.send(fetch_now(
                &request,
                &worker_stop,
                &worker_progress,
                deadline,
            ));
        })
        .map_err(|e| ToolError::failed(format!("could not start the fetch: {e}")))?;
    loop {
        match receive.recv_timeout(Duration::from_millis(50)) {
            Ok(result) => return result,
            Err(mpsc::RecvTimeoutError::Timeout) if cancel.is_cancelled() => {
                stop.store(true, Ordering::Release);
                return Err(ToolError::failed("cancelled"));
            }
            Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() >= deadline + DEADLINE_GRACE => {
                stop.store(true, Ordering::Release);
                return Err(deadline_error(timeout, &progress));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(ToolError::failed("the fetch stopped without an answer"));
            }
        }
    }
}

/// The request itself (blocking), stopping between reads once `stop` is set or the
/// deadline has passed, and recording how far it got in `progress`.
fn fetch_now(
    request: &Request,
    stop: &AtomicBool,
    progress: &SharedProgress,
    deadline: Instant,
) -> Result<FetchResult, ToolError> {
    // rustls needs a process-wide crypto provider (this plugin's copy of rustls); a second
    // install is a no-op.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let hops = Arc::new(Mutex::new(Vec::new()));
    let client = reqwest::blocking::Client::builder()
        .user_agent(concat!("toolhost-fetch_url/", env!("CARGO_PKG_VERSION")))
        .timeout(request.timeout)
        .connect_timeout(request.timeout.min(CONNECT_TIMEOUT))
        .redirect(redirect_policy(
            MAX_REDIRECTS,
            request.allow_private,
            Arc::clone(&hops),
        ))
        .dns_resolver(Arc::new(GuardedResolver {
            allow_private: request.allow_private,
        }))
        .no_proxy()
        .build()
        .map_err(|e| {
            ToolError::failed(format!("could not set up the HTTP client: {}", chain(&e)))
        })?;
    // The request's own timeout is reqwest's total one: it covers connecting, TLS, the
    // redirects and the whole body (the client's covers each wait only).
    let mut response = client
        .get(request.url.clone())
        .timeout(deadline.saturating_duration_since(Instant::now()))
        .send()
        .map_err(|e| request_error(&request.url, request.timeout, deadline, progress, &e))?;
    let status = response.status().as_u16();
    let final_url = response.url().to_string();
    let content_type = header(&response, CONTENT_TYPE);
    let declared_length = header(&response, CONTENT_LENGTH).parse().ok();
    {
        let mut p = progress.lock().unwrap_or_else(PoisonError::into_inner);
        p.url.clone_from(&final_url);
        p.headers = true;
        p.declared = declared_length;
    }
    let redirects = hops.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let kind = Kind::of(&content_type);
    let mut body = Vec::new();
    let mut truncated = false;
    if kind != Kind::Other {
        let mut buf = [0u8; 64 * 1024];
        loop {
            if stop.load(Ordering::Acquire) {
                return Err(ToolError::failed("cancelled"));
            }
            if Instant::now() >= deadline {
                return Err(deadline_error(request.timeout, progress));
            }
            let n = response
                .read(&mut buf)
                .map_err(|e| body_error(&final_url, request.timeout, deadline, progress, &e))?;
            if n == 0 {
                break;
            }
            progress
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .bytes += n as u64;
            let room = usize::try_from(request.max_bytes)
                .unwrap_or(usize::MAX)
                .saturating_sub(body.len());
            if n > room {
                body.extend_from_slice(&buf[..room]);
                truncated = true;
                break;
            }
            body.extend_from_slice(&buf[..n]);
        }
    }
    let (shown_as, content) = match kind {
        Kind::Html => ("markdown", to_markdown(&decode(&body, &content_type))),
        Kind::Text => ("text", decode(&body, &content_type)),
        Kind::Sniff if looks_like_text(&body) => ("text", decode(&body, &content_type)),
        Kind::Sniff | Kind::Other => (
            "described",
            describe(&content_type, declared_length, &body, kind),
        ),
    };
    Ok(FetchResult {
        url: final_url,
        status,
        content_type,
        bytes: body.len() as u64,
        declared_length,
        truncated,
        shown_as: shown_as.to_owned(),
        redirects,
        content,
    })
}

/// How a content type is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// HTML: as Markdown.
    Html,
    /// Text, JSON, XML, scripts: as they are.
    Text,
    /// No content type: text if it looks like text, else described.
    Sniff,
    /// Anything else: described, not read.
    Other,
}

impl Kind {
    /// The kind of a `Content-Type` value.
    fn of(content_type: &str) -> Kind {
        let essence = content_type
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match essence.as_str() {
            "" => Kind::Sniff,
            "text/html" | "application/xhtml+xml" => Kind::Html,
            t if t.starts_with("text/") => Kind::Text,
            "application/json"
            | "application/xml"
            | "application/javascript"
            | "application/ecmascript"
            | "application/x-yaml"
            | "application/yaml"
            | "application/toml"
            | "application/x-sh"
            | "application/sql"
            | "application/graphql"
            | "application/x-ndjson" => Kind::Text,
            t if t.ends_with("+json") || t.ends_with("+xml") => Kind::Text,
            _ => Kind::Other,
        }
    }
}

/// A header's value as text (empty if absent or not text).
fn header(response: &reqwest::blocking::Response, name: reqwest::header::HeaderName) -> String {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

/// The body as text: UTF-8 (invalid bytes replaced), or Latin-1 when the content type
/// says ISO-8859-1 or windows-1252.
fn decode(body: &[u8], content_type: &str) -> String {
    let lower = content_type.to_ascii_lowercase();
    let latin1 = ["iso-8859-1", "latin1", "windows-1252", "us-ascii"]
        .iter()
        .any(|c| lower.contains(&format!("charset={c}")));
    if latin1 && std::str::from_utf8(body).is_err() {
        body.iter().map(|&b| char::from(b)).collect()
    } else {
        String::from_utf8_lossy(body).into_owned()
    }
}

/// HTML as Markdown, without scripts, styles and other invisible parts.
fn to_markdown(html: &str) -> String {
    let converter = htmd::HtmlToMarkdown::builder()
        .skip_tags(vec![
            "script", "style", "noscript", "template", "svg", "canvas", "iframe", "head",
        ])
        .build();
    match converter.convert(html) {
        Ok(markdown) => markdown,
        // htmd reports I/O errors of its writer only; show the page's text as it came.
        Err(e) => format!("(could not turn the HTML into Markdown: {e})\n\n{html}"),
    }
}

/// Whether bytes without a content type look like text: valid UTF-8 without NUL bytes.
fn looks_like_text(body: &[u8]) -> bool {
    !body.contains(&0) && std::str::from_utf8(body).is_ok()
}

/// A description of content that is not shown.
fn describe(content_type: &str, declared: Option<u64>, body: &[u8], kind: Kind) -> String {
    let kind_text = if content_type.is_empty() {
        "binary content with no Content-Type".to_owned()
    } else {
        format!("{content_type} content")
    };
    let size = match (declared, kind) {
        (Some(n), _) => format!("{n} bytes (as declared by the server)"),
        (None, Kind::Sniff) => format!("{} bytes read", body.len()),
        (None, _) => "size not declared".to_owned(),
    };
    format!(
        "[{kind_text}, {size}: not shown; fetch_url shows HTML, text and JSON. To work \
         with it, download it with run_command (if the workspace allows the network) and \
         use a tool for that format]"
    )
}

/// The deadline passed: how far the request got and how much of the body was read.
fn deadline_error(timeout: Duration, progress: &SharedProgress) -> ToolError {
    let p = progress
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let secs = timeout.as_secs();
    let how_far = if p.headers {
        let of = p
            .declared
            .map(|n| format!(" of the {n} declared"))
            .unwrap_or_default();
        format!(
            "while the body was arriving: {} bytes{of} were read, and nothing is returned",
            p.bytes
        )
    } else {
        "before the response's headers arrived (resolving, connecting, TLS, redirects and \
         the headers all count); nothing of the body was read"
            .to_owned()
    };
    ToolError::failed(format!(
        "GET {}: the time limit timeout_secs = {secs} s passed {how_far}; pass a larger \
         timeout_secs (up to {MAX_TIMEOUT_SECS}) or try later",
        p.url
    ))
}

/// Whether `deadline` is at most a timer's slack away (a time-out error this close to it
/// is the deadline's).
fn near(deadline: Instant) -> bool {
    Instant::now() + Duration::from_millis(100) >= deadline
}

/// A failed request in words: the deadline, a refused address or redirect, or the cause.
fn request_error(
    url: &Url,
    timeout: Duration,
    deadline: Instant,
    progress: &SharedProgress,
    e: &reqwest::Error,
) -> ToolError {
    if Instant::now() >= deadline || (e.is_timeout() && near(deadline)) {
        return deadline_error(timeout, progress);
    }
    ToolError::failed(format!("GET {url} failed: {}", chain(e)))
}

/// A failed body read in words: the deadline, or the cause.
fn body_error(
    url: &str,
    timeout: Duration,
    deadline: Instant,
    progress: &SharedProgress,
    e: &std::io::Error,
) -> ToolError {
    if Instant::now() >= deadline || (e.kind() == std::io::ErrorKind::TimedOut && near(deadline)) {
        deadline_error(timeout, progress)
    } else {
        ToolError::failed(format!("GET {url}: reading the body failed: {e}"))
    }
}

/// An error and its causes, each said once.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current = Some(e);
    while let Some(err) = current {
        let text = err.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        current = err.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_map_to_how_they_are_shown() {
        assert_eq!(Kind::of("text/html; charset=utf-8"), Kind::Html);
        assert_eq!(Kind::of("text/plain"), Kind::Text);
        assert_eq!(Kind::of("application/json"), Kind::Text);
        assert_eq!(Kind::of("application/vnd.api+json"), Kind::Text);
        assert_eq!(Kind::of("image/png"), Kind::Other);
        assert_eq!(Kind::of("application/pdf"), Kind::Other);
        assert_eq!(Kind::of(""), Kind::Sniff);
    }

    #[test]
    fn latin1_is_decoded_when_the_charset_says_so() {
        assert_eq!(decode(b"caf\xe9", "text/plain; charset=ISO-8859-1"), "café");
        assert_eq!(
            decode("café".as_bytes(), "text/plain; charset=utf-8"),
            "café"
        );
    }

    #[test]
    fn html_becomes_markdown_without_scripts() {
        let md = to_markdown(
            "<html><head><title>T</title><script>evil()</script></head><body>\
             <h1>Title</h1><p>Some <b>bold</b> and a <a href=\"/x\">link</a>.</p></body></html>",
        );
        assert!(md.contains("# Title"), "{md}");
        assert!(md.contains("**bold**"), "{md}");
        assert!(md.contains("[link](/x)"), "{md}");
        assert!(!md.contains("evil"), "{md}");
    }

    #[test]
    fn caps_are_held_to_their_ceilings_and_bad_urls_refused() {
        let args =
            |v: serde_json::Value| -> FetchUrlArgs { serde_json::from_value(v).expect("args") };
        let r = Request::new(
            args(serde_json::json!({"url": "https://example.com", "max_bytes": u64::MAX, "timeout_secs": 9999})),
            false,
        )
        .map_err(|e| e.to_string())
        .expect("ok");
        assert_eq!(
            (r.max_bytes, r.timeout.as_secs()),
            (MAX_BYTES_CEILING, MAX_TIMEOUT_SECS)
        );
        let e = Request::new(args(serde_json::json!({"url": "not a url"})), false)
            .err()
            .expect("bad")
            .to_string();
        assert!(e.contains("is not a URL"), "{e}");
    }
}
