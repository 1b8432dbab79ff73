//! `fetch_url` through `TestHost` against a small HTTP server on 127.0.0.1 (a std
//! `TcpListener` thread): HTML to Markdown, text and JSON, other types described, the size
//! and redirect caps, and loopback refused unless the workspace allows private addresses
//! (allowed for the rest).

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{TcpListener, TcpStream};

use serde_json::{Value, json};
use toolhost_plugin_api::WorkspaceAnswer;
use toolhost_plugin_api::testing::TestHost;
use toolhost_workspace::FetchUrl;

/// Starts the server; returns its base URL (`http://127.0.0.1:PORT`).
fn serve() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || answer(stream));
        }
    });
    base
}

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
    let out = host.call_output(&FetchUrl, args).expect("fetch_url");
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
        .call(&FetchUrl, json!({"url": format!("{base}/hop/6")}))
        .expect_err("too many")
        .to_string();
    assert!(e.contains("more than 5 redirects"), "{e}");
}

#[test]
fn loopback_is_refused_unless_private_addresses_are_allowed() {
    let base = serve();
    let (host, _dir) = self::host(false);
    let e = host
        .call(&FetchUrl, json!({"url": format!("{base}/json")}))
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
            &FetchUrl,
            json!({"url": format!("http://localhost:{port}/json")}),
        )
        .expect_err("localhost")
        .to_string();
    assert!(e.contains("localhost") && e.contains("loopback"), "{e}");
    let e = host
        .call(
            &FetchUrl,
            json!({"url": "http://169.254.169.254/latest/meta-data/"}),
        )
        .expect_err("metadata")
        .to_string();
    assert!(e.contains("metadata service"), "{e}");
}

#[test]
fn the_description_and_risk_say_what_the_tool_does() {
    let info = TestHost::new().describe(&FetchUrl);
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
            &FetchUrl,
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
