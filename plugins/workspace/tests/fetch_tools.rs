//! `fetch_url` through `TestHost` against a small HTTP server on 127.0.0.1 (a std
//! `TcpListener` thread): HTML to Markdown, text and JSON, other types described, the size
//! and redirect caps, loopback and this machine's own addresses refused unless the
//! workspace allows private addresses (allowed for the rest), and one deadline for the
//! whole request (a body dripping a byte a second, headers that never come).

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolhost_plugin_api::WorkspaceAnswer;
use toolhost_plugin_api::testing::TestHost;
use toolhost_workspace::fetch_url;

/// Starts the server; returns its base URL (`http://127.0.0.1:PORT`).
fn serve() -> String {
    serve_on(TcpListener::bind("127.0.0.1:0").expect("bind"))
}

/// Serves on `listener`; returns its base URL (`http://ADDRESS:PORT`).
fn serve_on(listener: TcpListener) -> String {
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || answer(stream));
        }
    });
    base
}

/// The bytes `/drip` declares and sends at most, one a second.
const DRIP_BYTES: usize = 60;

/// Answers one request by its path.
fn answer(mut stream: TcpStream) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) if line == "\r\n" => break,
            Ok(_) => {}
        }
    }
    let path = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("/")
        .to_owned();
    if path == "/drip" {
        // Headers at once, then one byte a second: bounded by DRIP_BYTES, and ends as soon
        // as the client has gone (a write fails).
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {DRIP_BYTES}\r\n\
             Connection: close\r\n\r\n"
        );
        if stream.write_all(head.as_bytes()).is_err() {
            return;
        }
        for _ in 0..DRIP_BYTES {
            if stream
                .write_all(b"x")
                .and_then(|()| stream.flush())
                .is_err()
            {
                return;
            }
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
        return;
    }
    if path == "/slow" {
        // Never answers: holds the connection until the client closes it.
        let mut rest = String::new();
        let _ = reader.read_line(&mut rest);
        return;
    }
    let (status, headers, body): (&str, Vec<String>, Vec<u8>) = match path.as_str() {
        "/page" => (
            "200 OK",
            vec!["Content-Type: text/html; charset=utf-8".into()],
            b"<html><head><title>T</title><style>p{}</style></head><body><h1>Hello</h1>\
              <p>A <a href=\"https://example.org/\">link</a> and <em>text</em>.</p>\
              <ul><li>one</li><li>two</li></ul><script>alert(1)</script></body></html>"
                .to_vec(),
        ),
        "/json" => (
            "200 OK",
            vec!["Content-Type: application/json".into()],
            br#"{"answer": 42}"#.to_vec(),
        ),
        "/big" => (
            "200 OK",
            vec!["Content-Type: text/plain".into()],
            "0123456789".repeat(10_000).into_bytes(),
        ),
        "/image" => (
            "200 OK",
            vec!["Content-Type: image/png".into()],
            vec![0x89, b'P', b'N', b'G', 0, 1, 2, 3],
        ),
        p if p.starts_with("/hop/") => {
            let n: u32 = p["/hop/".len()..].parse().unwrap_or(0);
            if n == 0 {
                (
                    "200 OK",
                    vec!["Content-Type: text/plain".into()],
                    b"arrived".to_vec(),
                )
            } else {
                (
                    "302 Found",
                    vec![format!("Location: /hop/{}", n - 1)],
                    Vec::new(),
                )
            }
        }
        _ => (
            "404 Not Found",
            vec!["Content-Type: text/plain".into()],
            b"no".to_vec(),
        ),
    };
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for h in headers {
        head.push_str(&h);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(&body);
}

/// A host whose workspace allows (or not) private addresses.
fn host(allow_private: bool) -> (TestHost, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tmp");
    let mut answer = WorkspaceAnswer::with_roots([dir.path().display().to_string()]);
    answer.allow_private_addresses = allow_private;
    (TestHost::new().workspace(answer), dir)
}

/// Fetches and returns the structured result and the text.
fn fetch(host: &TestHost, args: Value) -> (Value, String) {
    let out = host.call_output(&fetch_url, args).expect("fetch_url");
    (out.structured.expect("structured"), out.text)
}

#[test]
fn html_comes_back_as_markdown() {
    let base = serve();
    let (host, _dir) = host(true);
    let (value, text) = fetch(&host, json!({"url": format!("{base}/page")}));
    assert_eq!(value["status"], 200);
    assert_eq!(value["shown_as"], "markdown");
    let md = value["content"].as_str().expect("content");
    assert!(md.contains("# Hello"), "{md}");
    assert!(md.contains("[link](https://example.org/)"), "{md}");
    assert!(md.contains("*text*") || md.contains("_text_"), "{md}");
    assert!(!md.contains("alert") && !md.contains("p{}"), "{md}");
    assert!(
        text.starts_with(&format!("GET {base}/page -> 200 (text/html")),
        "{text}"
    );
}

#[test]
fn json_is_shown_as_text_and_other_types_are_described() {
    let base = serve();
    let (host, _dir) = host(true);
    let (value, _) = fetch(&host, json!({"url": format!("{base}/json")}));
    assert_eq!(
        (value["shown_as"].clone(), value["content"].clone()),
        (json!("text"), json!(r#"{"answer": 42}"#))
    );
    let (value, text) = fetch(&host, json!({"url": format!("{base}/image")}));
    assert_eq!(value["shown_as"], "described");
    assert!(text.contains("image/png content, 8 bytes"), "{text}");
    assert!(!text.contains("PNG"), "{text}");
}

#[test]
fn the_size_cap_cuts_the_body_and_says_so() {
    let base = serve();
    let (host, _dir) = host(true);
    let (value, text) = fetch(
        &host,
        json!({"url": format!("{base}/big"), "max_bytes": 1000}),
    );
    assert_eq!(value["bytes"], 1000);
    assert_eq!(value["truncated"], true);
    assert_eq!(value["declared_length"], 100_000);
    assert_eq!(value["content"].as_str().expect("content").len(), 1000);
    assert!(text.contains("longer than the size cap"), "{text}");
    let (value, _) = fetch(&host, json!({"url": format!("{base}/big")}));
    assert_eq!(
        (value["bytes"].clone(), value["truncated"].clone()),
        (json!(100_000), json!(false))
    );
}

#[test]
fn redirects_are_followed_up_to_the_cap() {
    let base = serve();
    let (host, _dir) = host(true);
    let (value, text) = fetch(&host, json!({"url": format!("{base}/hop/5")}));
    assert_eq!(value["content"], "arrived");
    assert_eq!(value["redirects"].as_array().expect("hops").len(), 5);
    assert_eq!(value["url"], format!("{base}/hop/0"));
    assert!(text.contains("after 5 redirects"), "{text}");
    let e = host
        .call(&fetch_url, json!({"url": format!("{base}/hop/6")}))
        .expect_err("too many")
        .to_string();
    assert!(e.contains("more than 5 redirects"), "{e}");
}

#[test]
fn loopback_is_refused_unless_private_addresses_are_allowed() {
    let base = serve();
    let (host, _dir) = self::host(false);
    let e = host
        .call(&fetch_url, json!({"url": format!("{base}/json")}))
        .expect_err("loopback")
        .to_string();
    assert!(
        e.contains("loopback") && e.contains("allow_private_addresses"),
        "{e}"
    );
    // By name too: localhost resolves to loopback only.
    let port = base.rsplit(':').next().expect("port");
    let e = host
        .call(
            &fetch_url,
            json!({"url": format!("http://localhost:{port}/json")}),
        )
        .expect_err("localhost")
        .to_string();
    assert!(e.contains("localhost") && e.contains("loopback"), "{e}");
    let e = host
        .call(
            &fetch_url,
            json!({"url": "http://169.254.169.254/latest/meta-data/"}),
        )
        .expect_err("metadata")
        .to_string();
    assert!(e.contains("metadata service"), "{e}");
}

#[test]
fn the_description_and_risk_say_what_the_tool_does() {
    let info = TestHost::new().describe(&fetch_url);
    assert_eq!(info.risk, toolhost_plugin_api::Risk::Network);
    for phrase in ["Markdown", "5 MiB", "redirects", "private"] {
        assert!(info.description.contains(phrase), "{phrase}");
    }
}

#[test]
fn a_cancel_ends_a_fetch_that_gets_no_answer() {
    let base = serve();
    let (host, _dir) = host(true);
    host.cancel_after(std::time::Duration::from_millis(300));
    let started = std::time::Instant::now();
    let e = host
        .call(
            &fetch_url,
            json!({"url": format!("{base}/slow"), "timeout_secs": 60}),
        )
        .expect_err("cancelled")
        .to_string();
    assert!(e.contains("cancelled"), "{e}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

/// The time a 2 s limit may take on a loaded 2-core machine.
const LIMIT_AND_MARGIN: Duration = Duration::from_secs(2 + 8);

#[test]
fn the_time_limit_covers_the_whole_body() {
    let base = serve();
    let (host, _dir) = host(true);
    let started = Instant::now();
    let e = host
        .call(
            &fetch_url,
            json!({"url": format!("{base}/drip"), "timeout_secs": 2}),
        )
        .expect_err("the limit passes while the body drips")
        .to_string();
    let took = started.elapsed();
    assert!(took < LIMIT_AND_MARGIN, "took {took:?}: {e}");
    assert!(
        e.contains("timeout_secs = 2 s") && e.contains("while the body was arriving"),
        "{e}"
    );
    assert!(e.contains(&format!("of the {DRIP_BYTES} declared")), "{e}");
    assert!(e.contains("bytes"), "{e}");
}

#[test]
fn the_time_limit_covers_waiting_for_the_headers() {
    let base = serve();
    let (host, _dir) = host(true);
    let started = Instant::now();
    let e = host
        .call(
            &fetch_url,
            json!({"url": format!("{base}/slow"), "timeout_secs": 2}),
        )
        .expect_err("no headers within the limit")
        .to_string();
    let took = started.elapsed();
    assert!(took < LIMIT_AND_MARGIN, "took {took:?}: {e}");
    assert!(
        e.contains("timeout_secs = 2 s") && e.contains("before the response's headers arrived"),
        "{e}"
    );
}

/// A non-loopback address of this machine (IPv4 first, then an IPv6 address that needs
/// no scope) and its interface, from getifaddrs.
fn own_address() -> Option<(IpAddr, String)> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: `head` is a valid place for the list's head; freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return None;
    }
    let mut found = Vec::new();
    let mut node = head;
    while !node.is_null() {
        // SAFETY: an entry of the list getifaddrs returned, not freed yet.
        let entry = unsafe { &*node };
        let address = entry.ifa_addr;
        if !address.is_null() && !entry.ifa_name.is_null() {
            // SAFETY: a NUL-terminated name of the list.
            let name = unsafe { std::ffi::CStr::from_ptr(entry.ifa_name) }
                .to_string_lossy()
                .into_owned();
            // SAFETY: non-null socket address of the list; its family says its type.
            let family = i32::from(unsafe { (*address).sa_family });
            let ip = match family {
                libc::AF_INET => {
                    // SAFETY: an AF_INET address is a sockaddr_in.
                    let v4 =
                        unsafe { std::ptr::read_unaligned(address.cast::<libc::sockaddr_in>()) };
                    Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr))))
                }
                libc::AF_INET6 => {
                    // SAFETY: an AF_INET6 address is a sockaddr_in6.
                    let v6 =
                        unsafe { std::ptr::read_unaligned(address.cast::<libc::sockaddr_in6>()) };
                    Some(IpAddr::V6(Ipv6Addr::from(v6.sin6_addr.s6_addr)))
                }
                _ => None,
            };
            if let Some(ip) = ip {
                found.push((ip, name));
            }
        }
        node = entry.ifa_next;
    }
    // SAFETY: from getifaddrs, freed once.
    unsafe { libc::freeifaddrs(head) };
    let usable = |ip: &IpAddr| match ip {
        IpAddr::V4(v4) => !v4.is_loopback() && !v4.is_unspecified(),
        IpAddr::V6(v6) => {
            !v6.is_loopback() && !v6.is_unspecified() && (v6.segments()[0] & 0xffc0) != 0xfe80
        }
    };
    let v4 = found
        .iter()
        .find(|(ip, _)| ip.is_ipv4() && usable(ip))
        .cloned();
    v4.or_else(|| found.into_iter().find(|(ip, _)| usable(ip)))
}

#[test]
fn this_machines_own_address_is_refused_unless_private_addresses_are_allowed() {
    let Some((ip, interface)) = own_address() else {
        println!("skipped: this machine has no non-loopback address");
        return;
    };
    // A server on that address, so a fetch the guard let through would get an answer.
    let listener = TcpListener::bind(SocketAddr::new(ip, 0));
    let base = match listener {
        Ok(listener) => serve_on(listener),
        Err(e) => {
            println!("no server on {ip} ({e}); checking the refusal only");
            format!("http://{}", SocketAddr::new(ip, 9))
        }
    };
    let (host, _dir) = self::host(false);
    let e = host
        .call(&fetch_url, json!({"url": format!("{base}/json")}))
        .expect_err("this machine's address")
        .to_string();
    assert!(
        e.contains(&format!(
            "{ip} is an address of this machine (interface {interface})"
        )),
        "{e}"
    );
    assert!(e.contains("allow_private_addresses"), "{e}");
}
