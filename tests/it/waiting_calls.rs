//! Calls that wait for their clients hold no plugin thread and count against their
//! token's limit, not their self-chosen client name's: one token leaves 512 sessionless
//! `clarify` calls waiting for answers (under 16 client names), and another token's calls
//! are answered at once, in process and with every plugin in a worker.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::http_door::{HttpHost, post_to};

/// How many questions the first token leaves unanswered, and under how many client names.
const WAITING: usize = 512;
const NAMES: usize = 16;

/// A sessionless (2026-07-28) `tools/call` of `tool` by `token`, as client `client`.
fn call(port: u16, token: &str, client: &str, id: usize, tool: &str, arguments: Value) -> Value {
    request(
        port,
        token,
        client,
        id,
        json!({"name": tool, "arguments": arguments}),
    )
}

/// A sessionless `tools/call` with `params` (its `_meta` added) by `token` as `client`.
fn request(port: u16, token: &str, client: &str, id: usize, mut params: Value) -> Value {
    let tool = params["name"].as_str().unwrap_or_default().to_owned();
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": client, "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}
    });
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    let headers: Vec<(String, String)> = [
        ("Authorization", format!("Bearer {token}")),
        ("MCP-Protocol-Version", "2026-07-28".to_owned()),
        ("Mcp-Method", "tools/call".to_owned()),
        ("Mcp-Name", tool.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let answer = post_to(port, &headers, &body.to_string());
    assert_eq!(answer.status, 200, "{tool}: {answer:?}");
    answer.message()
}

/// The retry of a `clarify` call with `arguments`, answering its question with "late
/// answer" under `state`.
fn call_with(
    port: u16,
    token: &str,
    client: &str,
    id: usize,
    arguments: Value,
    state: String,
) -> Value {
    let mut arguments = json!({"name": "clarify", "arguments": arguments});
    arguments["inputResponses"] = json!({"toolhost_question": {
        "action": "accept", "content": {"answer": "late answer"}}});
    arguments["requestState"] = Value::from(state);
    request(port, token, client, id, arguments)
}

#[test]
fn one_tokens_waiting_questions_never_stall_another_tokens_calls() {
    for extra in [&[][..], &["--isolate"][..]] {
        let host = HttpHost::start_with(
            "[mcp]\nclient_answer_secs = 900\n",
            extra,
            &["fixture_basic", "toolhost_clarify"],
        );
        let waiter = host.token(&["add", "waiter"]);
        let other = host.token(&["add", "other"]);
        let port = host.port();
        // 16 threads, each a client name, each leaving 32 questions waiting.
        let started = Instant::now();
        let first_state = std::sync::Mutex::new(None);
        std::thread::scope(|s| {
            for name in 0..NAMES {
                let waiter = &waiter;
                let first_state = &first_state;
                s.spawn(move || {
                    for n in 0..WAITING / NAMES {
                        let asked = call(
                            port,
                            waiter,
                            &format!("client-{name}"),
                            n + 1,
                            "clarify",
                            json!({"question": format!("question {n} of client {name}?")}),
                        );
                        let state = asked["result"]["requestState"].as_str().unwrap_or_else(|| {
                            panic!("{extra:?}: clarify should wait for an answer: {asked}")
                        });
                        if name == 0 && n == 0 {
                            *first_state.lock().expect("state") = Some(state.to_owned());
                        }
                    }
                });
            }
        });
        let asking = started.elapsed();
        // The other token's calls: each answered, the median well within 100 ms.
        let mut took = Vec::new();
        for n in 0..9 {
            let start = Instant::now();
            let echoed = call(
                port,
                &other,
                "other",
                1000 + n,
                "echo",
                json!({"text": "hi"}),
            );
            took.push(start.elapsed());
            assert_eq!(echoed["result"]["isError"], false, "{extra:?}: {echoed}");
        }
        took.sort();
        let median = took[took.len() / 2];
        println!(
            "{extra:?}: {WAITING} questions left waiting in {asking:?}; another token's echo: \
             median {median:?}, slowest {:?}",
            took[took.len() - 1]
        );
        assert!(
            median < Duration::from_millis(100),
            "{extra:?}: another token's calls waited behind the first token's questions: {took:?}"
        );
        // The waiting calls count against their token, not their 16 names: the first
        // question (client-0's, within that name's 32) was let go for the token's newer
        // ones, while a question asked now is still answered.
        let first = json!({"question": "question 0 of client 0?"});
        let retry = call_with(
            port,
            &waiter,
            "client-0",
            2000,
            first.clone(),
            first_state
                .lock()
                .expect("state")
                .clone()
                .expect("the first question's state"),
        );
        assert!(
            retry.to_string().contains("refused") || retry["result"]["isError"] == true,
            "{extra:?}: a question past the token's limit still waited: {retry}"
        );
        let last = json!({"question": "one more?"});
        let asked = call(port, &waiter, "client-0", 3000, "clarify", last.clone());
        let state = asked["result"]["requestState"]
            .as_str()
            .unwrap_or_else(|| panic!("{extra:?}: {asked}"))
            .to_owned();
        let answered = call_with(port, &waiter, "client-0", 3001, last, state);
        assert!(
            answered.to_string().contains("late answer"),
            "{extra:?}: the newest question was not answered: {answered}"
        );
    }
}
