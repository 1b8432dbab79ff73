//! JSON-RPC edge cases of the MCP frontends, probed raw on both transports: lines written
//! to `toolhost serve --mcp stdio` and bodies POSTed to `toolhost serve --mcp http`, each
//! answered with the error JSON-RPC asks for (-32700, -32600 with the request's id, -32602
//! naming the problem), the server serving on after it; an unknown session's DELETE gets
//! 404; and the tasks extension is advertised only to 2026-07-28 clients.

use serde_json::{Value, json};

use crate::http_door::{Client, HttpHost};
use crate::mcp::RawClient;
use crate::support::{PluginDir, toolhost_command};

/// A raw stdio client of a server with the basic fixture, after its handshake.
fn stdio() -> (RawClient, PluginDir, tempfile::TempDir) {
    let plugins = PluginDir::with(&["fixture_basic"]);
    let state = tempfile::tempdir().expect("temp dir");
    let mut cmd = toolhost_command();
    cmd.args(["serve", "--mcp", "stdio", "--no-watch", "--plugins"])
        .arg(plugins.path())
        .arg("--control")
        .arg(state.path().join("c.sock"))
        .env("XDG_STATE_HOME", state.path().join("state"));
    (RawClient::start(cmd), plugins, state)
}

/// An HTTP server with a token, and a client of it after its handshake.
fn http() -> (HttpHost, Client) {
    let host = HttpHost::start("", &[]);
    let token = host.token(&["add", "edges"]);
    let mut client = host.client(Some(&token));
    let init = client.handshake();
    assert_eq!(init.status, 200, "{init:?}");
    (host, client)
}

/// The lines each edge case is probed with, and what each must be answered: (line,
/// id, code, words the message must hold).
fn probes() -> Vec<(&'static str, Value, i64, &'static [&'static str])> {
    vec![
        ("this is not JSON", Value::Null, -32700, &["Parse error"]),
        (
            r#"{"jsonrpc":"2.0","id":7,"method":5}"#,
            json!(7),
            -32600,
            &["Invalid Request"],
        ),
        (
            r#"{"jsonrpc":"2.0","id":"call-1","method":"tools/call","params":5}"#,
            json!("call-1"),
            -32602,
            &["Invalid params", "tools/call", "object"],
        ),
        (
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"arguments":{}}}"#,
            json!(8),
            -32602,
            &["Invalid params", "tools/call", "name"],
        ),
        (
            r#"{"jsonrpc":"2.0","id":9,"method":"initialize","params":{"protocolVersion":5}}"#,
            json!(9),
            -32602,
            &["Invalid params", "initialize"],
        ),
    ]
}

fn check_answer(line: &str, answer: &Value, id: &Value, code: i64, words: &[&str]) {
    assert_eq!(answer["jsonrpc"], "2.0", "{line}: {answer}");
    assert_eq!(&answer["id"], id, "{line}: {answer}");
    assert_eq!(answer["error"]["code"], code, "{line}: {answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    for word in words {
        assert!(message.contains(word), "{line}: {answer} lacks {word:?}");
    }
}

#[test]
fn over_stdio_bad_lines_get_their_json_rpc_errors_and_the_next_line_is_served() {
    let (mut client, _plugins, _state) = stdio();
    for (line, id, code, words) in probes() {
        client.send_raw(line);
        // The answer (not a notification the server sends meanwhile).
        let answer = std::iter::repeat_with(|| client.next_message())
            .find(|m| m.get("method").is_none())
            .expect("an answer");
        check_answer(line, &answer, &id, code, words);
        // The server goes on serving.
        let list = client.request("tools/list", json!({}));
        assert!(list["result"]["tools"].is_array(), "after {line}: {list}");
    }
    assert!(client.garbage().is_empty(), "{:?}", client.garbage());
}

#[test]
fn over_http_bad_bodies_get_400_with_their_json_rpc_errors() {
    let (_host, client) = http();
    for (body, id, code, words) in probes() {
        let answer = client.post_raw(body, &[]);
        assert_eq!(answer.status, 400, "{body}: {answer:?}");
        assert!(
            answer
                .header("content-type")
                .is_some_and(|t| t.starts_with("application/json")),
            "{body}: {answer:?}"
        );
        check_answer(body, &answer.message(), &id, code, words);
    }
    // A wrong Content-Type is still 415, and good requests are served.
    let wrong = client.post_raw(
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#,
        &[("Content-Type", "text/plain")],
    );
    assert_eq!(wrong.status, 415, "{wrong:?}");
    let list = client.post(&json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}));
    assert_eq!(list.status, 200, "{list:?}");
    assert!(list.message()["result"]["tools"].is_array(), "{list:?}");
}

#[test]
fn over_http_deleting_an_unknown_session_is_404_and_a_known_one_ends_it() {
    let (_host, client) = http();
    let unknown = client.delete("no-such-session");
    assert_eq!(unknown.status, 404, "{unknown:?}");
    let session = client.session().expect("a session id").to_owned();
    let known = client.delete(&session);
    assert!(known.status < 300, "{known:?}");
    // Once ended, it is unknown.
    let again = client.delete(&session);
    assert_eq!(again.status, 404, "{again:?}");
}

const TASKS: &str = "io.modelcontextprotocol/tasks";

/// `server/discover` as a 2026-07-28 client sends it.
fn discover() -> Value {
    json!({"jsonrpc": "2.0", "id": 50, "method": "server/discover", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "edges", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}
    }}})
}

#[test]
fn the_tasks_extension_is_advertised_only_to_2026_clients_on_both_transports() {
    let (mut stdio, _plugins, _state) = stdio();
    assert_eq!(stdio.init["result"]["protocolVersion"], "2025-11-25");
    assert!(
        stdio.init["result"]["capabilities"]["extensions"][TASKS].is_null(),
        "{}",
        stdio.init
    );
    let found = stdio.request("server/discover", discover()["params"].clone());
    assert!(
        found["result"]["capabilities"]["extensions"][TASKS].is_object(),
        "{found}"
    );

    let host = HttpHost::start("", &[]);
    let token = host.token(&["add", "edges"]);
    let mut client = host.client(Some(&token));
    let init = client.handshake();
    let init = init.message();
    assert!(
        init["result"]["capabilities"]["extensions"][TASKS].is_null(),
        "{init}"
    );
    let sessionless = host.client(Some(&token));
    let found = sessionless.post_raw(
        &discover().to_string(),
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "server/discover"),
        ],
    );
    assert_eq!(found.status, 200, "{found:?}");
    let found = found.message();
    assert!(
        found["result"]["capabilities"]["extensions"][TASKS].is_object(),
        "{found}"
    );
}
