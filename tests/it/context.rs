//! Conversations longer than the model's context window, and streamed answers, through
//! the real Chat Completions client against the scripted server of `support/model.rs`
//! (which can count tokens its own way, refuse what passes its window, report usage,
//! stream in small pieces, or not stream at all): thirty turns in a small window, the
//! calibration by reported usage, a server that still refuses, streamed text and tool
//! calls, the fallbacks, and `chat` printing an answer as it arrives.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolhost::agent::model::{OpenAiClient, Role};
use toolhost::agent::sessions::CompactionStage;
use toolhost::agent::{Agent, AgentError, AgentParts, TurnObserver};
use toolhost::{AgentSettings, ContextSettings, ModelSettings, OutputSettings, OutputStore};

use crate::support::PluginDir;
use crate::support::model::{ModelServer, Reply, ServerMode, calls, text};

/// What an observer saw: streamed pieces, whole texts, context use.
#[derive(Default)]
struct Seen {
    deltas: Mutex<Vec<String>>,
    texts: Mutex<Vec<String>>,
    context: Mutex<Vec<(u64, u64)>>,
}

impl TurnObserver for Seen {
    fn assistant_text(&self, _depth: u32, text: &str) {
        self.texts.lock().expect("lock").push(text.to_owned());
    }
    fn assistant_delta(&self, _depth: u32, text: &str) {
        self.deltas.lock().expect("lock").push(text.to_owned());
    }
    fn context_use(&self, _depth: u32, used: u64, window: u64) {
        self.context.lock().expect("lock").push((used, window));
    }
}

/// An agent on `server` with the basic fixture's tools, its outputs kept, `window` tokens.
struct Harness {
    _work: tempfile::TempDir,
    _plugins: PluginDir,
    agent: Agent,
    outputs: Arc<OutputStore>,
    seen: Arc<Seen>,
}

impl Harness {
    fn new(server: &ModelServer, window: u64, stream: bool) -> Harness {
        let plugins = PluginDir::with(&["fixture_basic"]);
        let (_, registry, _) = crate::support::load(&plugins);
        let work = tempfile::tempdir().expect("temp dir");
        let state: PathBuf = work.path().join("p").join("state");
        let settings = OutputSettings::default();
        let outputs = Arc::new(OutputStore::for_profile(
            &toolhost::ProfileDirs::of_state(&state),
            &settings,
        ));
        let scope = toolhost::ProfileScope::new("p", Arc::new(registry), None)
            .with_outputs(Arc::clone(&outputs), settings);
        let door = toolhost::CallDoor::new(
            &toolhost::CallSettings::default(),
            Arc::new(toolhost::FixedProfile(scope)),
            Arc::new(toolhost::AutoApprove),
        );
        let model = OpenAiClient::new(ModelSettings {
            base_url: server.url.clone(),
            model: "scripted".to_owned(),
            api_key: None,
            timeout: Duration::from_secs(30),
            max_retries: 1,
            backoff: Duration::from_millis(5),
            stream,
        })
        .expect("client");
        let seen = Arc::new(Seen::default());
        let config = AgentSettings {
            context: ContextSettings::new(window, None).expect("window"),
            ..AgentSettings::default()
        };
        let agent = Agent::new(AgentParts {
            profile: "p".to_owned(),
            dirs: toolhost::ProfileDirs::of_state(&state),
            workspace: toolhost::WorkspaceSettings::default(),
            door,
            model: Arc::new(model),
            config,
            caller: None,
            observer: Some(Arc::clone(&seen) as Arc<dyn TurnObserver>),
        })
        .expect("agent");
        Harness {
            _work: work,
            _plugins: plugins,
            agent,
            outputs,
            seen,
        }
    }
}

/// The start of the summarising call's instructions.
const SUMMARISE: &str = "You compact a conversation";

/// Whether a request body is a summarising call.
fn is_summary_call(body: &Value) -> bool {
    body["messages"][0]["content"]
        .as_str()
        .is_some_and(|c| c.starts_with(SUMMARISE))
}

/// A model that, for each request, calls `big_output` for `bytes` and then answers; and
/// summarises when asked (counting those calls in `summaries`).
fn big_output_model(bytes: u64, summaries: Arc<AtomicUsize>) -> impl Fn(&Value) -> Reply {
    move |body: &Value| {
        if is_summary_call(body) {
            let n = summaries.fetch_add(1, Ordering::SeqCst) + 1;
            return text(&format!(
                "Summary {n}: the person asked for numbered lines again and again; each \
                 big_output call returned them."
            ));
        }
        let last = body["messages"]
            .as_array()
            .and_then(|m| m.last())
            .cloned()
            .unwrap_or(Value::Null);
        if last["role"] == "tool" {
            text("turn done")
        } else {
            calls(&[("big_output", json!({"bytes": bytes}))])
        }
    }
}

/// The `n`th request, about 400 characters long.
fn prompt(n: usize) -> String {
    format!(
        "request {n}: {}",
        "please look at the numbered lines again. ".repeat(10)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_turns_of_one_session_go_on_in_a_window_the_whole_session_passes() {
    const WINDOW: usize = 4000;
    let summaries = Arc::new(AtomicUsize::new(0));
    let server = ModelServer::start_with(
        Arc::new(big_output_model(3000, Arc::clone(&summaries))),
        ServerMode {
            streams: true,
            reports_usage: true,
            window: Some(WINDOW),
            ..ServerMode::default()
        },
    )
    .await;
    let h = Harness::new(&server, WINDOW as u64, true);
    let session = h.agent.new_session().expect("session");
    for n in 0..30 {
        let answer = h
            .agent
            .run_turn(&session, &prompt(n), CancellationToken::new())
            .await
            .unwrap_or_else(|e| panic!("turn {n}: {e}"));
        assert_eq!(answer, "turn done", "turn {n}");
    }
    // 30 turns of ~3,500 characters each: about 26,000 tokens sent as at most 4,000.
    assert_eq!(
        server.refused.load(Ordering::SeqCst),
        0,
        "no request was refused"
    );

    // Both stages ran and were recorded; the summary was written a few times, not at
    // every turn, and each time recorded.
    let store = h.agent.sessions();
    let compactions = store.compactions(&session).expect("compactions");
    let stubs = compactions
        .iter()
        .filter(|c| c.stage == CompactionStage::Stubs)
        .count();
    let written: Vec<_> = compactions
        .iter()
        .filter(|c| c.stage == CompactionStage::Summary)
        .collect();
    assert!(stubs > 0, "{compactions:#?}");
    let asked = summaries.load(Ordering::SeqCst);
    assert!((1..=8).contains(&asked), "{asked} summaries for 30 turns");
    assert_eq!(written.len(), asked, "{compactions:#?}");
    assert!(
        written
            .iter()
            .all(|c| c.tokens_after < c.tokens_before && c.summary.is_some())
    );

    // Every original message is in the store, whole.
    let messages = store.messages(&session).expect("messages");
    assert_eq!(messages.len(), 30 * 4);
    let results: Vec<&str> = messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .filter_map(|m| m.content.as_deref())
        .collect();
    assert_eq!(results.len(), 30);
    assert!(
        results
            .iter()
            .all(|r| r.len() >= 3000 && r.starts_with("line 000001"))
    );
    assert_eq!(
        messages[0].content.as_deref(),
        Some(prompt(0).as_str()),
        "the first request"
    );

    // The last request: the first request whole, then the summary, then the latest turn;
    // older results as stubs whose kept output can be read back.
    let last = (0..server.count())
        .rev()
        .map(|i| server.request(i))
        .find(|b| !is_summary_call(b))
        .expect("a request");
    let sent = last["messages"].as_array().expect("messages");
    assert_eq!(sent[1]["content"], prompt(0));
    assert!(
        sent[2]["content"]
            .as_str()
            .is_some_and(|c| c.starts_with("[Summary of the earlier part")
                && c.contains("all tools remain available")),
        "{:?}",
        sent[2]
    );
    assert_eq!(sent.last().map(|m| m["role"].clone()), Some(json!("tool")));
    // Stubs went out (before the summary took their turns), naming outputs kept.
    let bodies: Vec<Value> = (0..server.count()).map(|i| server.request(i)).collect();
    let stub = bodies
        .iter()
        .flat_map(|b| b["messages"].as_array().cloned().unwrap_or_default())
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .find(|c| c.starts_with("[output of big_output"))
        .expect("a stub in some request");
    let id = stub
        .split("kept as ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .expect("the stub names an id");
    let owner = toolhost::Owner {
        profile: "p".to_owned(),
        token: None,
    };
    let kept = h
        .outputs
        .read(&owner, id, &toolhost::ReadRange::All)
        .expect("the stub's output is kept");
    assert!(kept.text.starts_with("line 000001") && kept.text.len() >= 3000);
    // The chat's context line has what to show, within the window.
    let (used, window) = *h.seen.context.lock().expect("lock").last().expect("use");
    assert_eq!(window, WINDOW as u64);
    assert!(used > 0 && used <= window, "{used} of {window}");
}

/// Runs `turns` turns of `big_output` answers against a server that counts a token
/// every 2 bytes (twice what the estimate assumes) and refuses past 3,000; returns how
/// many requests it refused and what the observer saw.
async fn dense_tokenizer(reports_usage: bool, turns: usize) -> (usize, Vec<(u64, u64)>) {
    const WINDOW: usize = 3000;
    let server = ModelServer::start_with(
        Arc::new(big_output_model(1500, Arc::new(AtomicUsize::new(0)))),
        ServerMode {
            streams: true,
            bytes_per_token: 2,
            reports_usage,
            window: Some(WINDOW),
            ..ServerMode::default()
        },
    )
    .await;
    let h = Harness::new(&server, WINDOW as u64, true);
    let session = h.agent.new_session().expect("session");
    for n in 0..turns {
        h.agent
            .run_turn(&session, &format!("request {n}"), CancellationToken::new())
            .await
            .unwrap_or_else(|e| panic!("turn {n}: {e}"));
    }
    let seen = h.seen.context.lock().expect("lock").clone();
    (server.refused.load(Ordering::SeqCst), seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reported_usage_calibrates_the_estimate_and_a_refusal_is_compacted_harder() {
    // Reporting usage: after the first answer the estimate counts as the server does, and
    // nothing is refused; the context use is the server's count.
    let (refused, seen) = dense_tokenizer(true, 12).await;
    assert_eq!(refused, 0, "{seen:?}");
    assert!(seen.iter().all(|&(used, w)| used <= w), "{seen:?}");
    assert!(seen.iter().any(|&(used, w)| used * 2 > w), "{seen:?}");
    // Without usage the estimate is half the server's count: requests are refused, and
    // each refusal is compacted harder and sent again, so every turn still answers; the
    // size learnt keeps later requests from being refused again and again.
    let (refused, _) = dense_tokenizer(false, 12).await;
    assert!(
        (1..=3).contains(&refused),
        "{refused} refusals (expected a few)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_refused_even_compacted_ends_the_turn_clearly() {
    // The server's window is far below the system prompt and the request.
    let server = ModelServer::start_with(
        Arc::new(|_: &Value| text("never")),
        ServerMode {
            window: Some(20),
            ..ServerMode::default()
        },
    )
    .await;
    let h = Harness::new(&server, 32_768, true);
    let session = h.agent.new_session().expect("session");
    let err = h
        .agent
        .run_turn(&session, &prompt(0), CancellationToken::new())
        .await
        .expect_err("refused twice");
    assert!(matches!(err, AgentError::TooLong { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("maximum context length") && message.contains("context_window"),
        "{message}"
    );
    assert_eq!(
        server.refused.load(Ordering::SeqCst),
        2,
        "sent twice, no more"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_text_and_tool_calls_split_across_chunks_are_assembled() {
    let quoted = "say \"hi\" to the café, then stop";
    let server = ModelServer::scripted_with(
        vec![
            calls(&[
                ("echo", json!({"text": quoted})),
                ("echo", json!({"text": "second"})),
            ]),
            text("the answer is forty-two"),
        ],
        ServerMode {
            streams: true,
            reports_usage: true,
            ..ServerMode::default()
        },
    )
    .await;
    let h = Harness::new(&server, 32_768, true);
    let session = h.agent.new_session().expect("session");
    let answer = h
        .agent
        .run_turn(&session, "go", CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(answer, "the answer is forty-two");
    // The requests asked for a stream with the usage at its end.
    let first = server.request(0);
    assert_eq!(first["stream"], true);
    assert_eq!(first["stream_options"]["include_usage"], true);
    // The calls' arguments, 5 characters a chunk and interleaved, came out whole: the
    // tools got them and their results went back.
    let results = crate::support::model::wire_tool_messages(&server.request(1));
    let got: Vec<&str> = results.iter().map(|(_, c)| c.as_str()).collect();
    assert_eq!(got, [quoted, "second"]);
    assert_eq!(results[0].0, "call_1_0");
    // The text came in pieces, and whole once.
    let deltas = h.seen.deltas.lock().expect("lock").clone();
    assert!(deltas.len() > 3, "{deltas:?}");
    assert_eq!(deltas.concat(), "the answer is forty-two");
    assert_eq!(
        h.seen.texts.lock().expect("lock").as_slice(),
        ["the answer is forty-two"]
    );
    // The usage of the last chunk: the context use is the server's count.
    let seen = h.seen.context.lock().expect("lock").clone();
    assert_eq!(seen.len(), 2);
    assert!(seen[1].0 > seen[0].0, "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_does_not_stream_is_read_whole_and_one_that_refuses_stream_is_asked_without()
{
    // Answers a streamed request in one JSON piece.
    let server = ModelServer::scripted_with(
        vec![text("whole one"), text("whole two")],
        ServerMode {
            json_type: true,
            reports_usage: true,
            ..ServerMode::default()
        },
    )
    .await;
    let h = Harness::new(&server, 32_768, true);
    let session = h.agent.new_session().expect("session");
    for expected in ["whole one", "whole two"] {
        let answer = h
            .agent
            .run_turn(&session, "hi", CancellationToken::new())
            .await
            .expect("turn");
        assert_eq!(answer, expected);
    }
    assert_eq!(server.count(), 2, "no request was repeated");
    assert!(h.seen.deltas.lock().expect("lock").is_empty());
    assert_eq!(h.seen.context.lock().expect("lock").len(), 2);

    // Refuses `stream`: asked again without it, and not asked with it again.
    let server = ModelServer::scripted_with(
        vec![text("plain one"), text("plain two")],
        ServerMode {
            refuses_stream: true,
            streams: true,
            ..ServerMode::default()
        },
    )
    .await;
    let h = Harness::new(&server, 32_768, true);
    let session = h.agent.new_session().expect("session");
    for expected in ["plain one", "plain two"] {
        let answer = h
            .agent
            .run_turn(&session, "hi", CancellationToken::new())
            .await
            .expect("turn");
        assert_eq!(answer, expected);
    }
    let streamed: Vec<bool> = (0..server.count())
        .map(|i| server.request(i).get("stream").is_some())
        .collect();
    assert_eq!(streamed, [true, false, false]);

    // `[model] stream = false`: never asked.
    let server = ModelServer::scripted_with(
        vec![text("asked whole")],
        ServerMode {
            streams: true,
            ..ServerMode::default()
        },
    )
    .await;
    let h = Harness::new(&server, 32_768, false);
    let session = h.agent.new_session().expect("session");
    h.agent
        .run_turn(&session, "hi", CancellationToken::new())
        .await
        .expect("turn");
    assert!(server.request(0).get("stream").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_prints_the_answer_as_it_arrives_and_once() {
    use std::io::{Read as _, Write as _};
    let hold = Arc::new(tokio::sync::Notify::new());
    let answer = "Hello from the stream, piece by piece, until the end.";
    let server = ModelServer::scripted_with(
        vec![text(answer)],
        ServerMode {
            streams: true,
            reports_usage: true,
            hold: Some(Arc::clone(&hold)),
            ..ServerMode::default()
        },
    )
    .await;
    let plugins = PluginDir::with(&["fixture_echo"]);
    let work = tempfile::tempdir().expect("temp dir");
    let config = work.path().join("config.toml");
    std::fs::write(
        &config,
        format!("profiles_dir = {:?}\n", work.path().join("profiles")),
    )
    .expect("config");
    let mut cmd = crate::support::toolhost_command();
    for var in ["TOOLHOST_MODEL_STREAM", "TOOLHOST_MODEL_CONTEXT_WINDOW"] {
        cmd.env_remove(var);
    }
    cmd.arg("--config")
        .arg(&config)
        .args(["chat", "--plugins"])
        .arg(plugins.path())
        .env("TOOLHOST_MODEL_BASE_URL", &server.url)
        .env("TOOLHOST_MODEL", "scripted")
        .env_remove("TOOLHOST_API_KEY")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("chat");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"say hello\n").expect("write");
    // What the chat has printed so far, read as it comes.
    let out = Arc::new(Mutex::new(Vec::new()));
    let reader = {
        let (out, mut stdout) = (Arc::clone(&out), child.stdout.take().expect("stdout"));
        std::thread::spawn(move || {
            let mut buf = [0u8; 256];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                out.lock().expect("lock").extend_from_slice(&buf[..n]);
            }
        })
    };
    let printed = || String::from_utf8_lossy(&out.lock().expect("lock")).into_owned();
    // The first half of the answer is on stdout while the server holds the rest back.
    crate::support::eventually_async(Duration::from_secs(60), "the answer's start", || {
        printed().contains("Hello from").then_some(())
    })
    .await;
    assert!(!printed().contains("the end."), "{}", printed());
    hold.notify_one();
    crate::support::eventually_async(Duration::from_secs(60), "the answer's end", || {
        printed().contains("the end.").then_some(())
    })
    .await;
    stdin.write_all(b"\n").expect("end the chat");
    drop(stdin);
    let output = tokio::task::spawn_blocking(move || {
        let output = child.wait_with_output().expect("chat output");
        reader.join().expect("reader");
        output
    })
    .await
    .expect("joined");
    assert!(output.status.success());
    // Once, on its own line.
    assert_eq!(printed(), format!("{answer}\n"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("(context ") && stderr.contains("% of 32k)"),
        "{stderr}"
    );
}

#[test]
fn a_context_window_that_is_not_a_number_is_named_with_its_variable() {
    let plugins = PluginDir::with(&["fixture_echo"]);
    let out = crate::support::toolhost_command()
        .args(["run", "hello", "--plugins"])
        .arg(plugins.path())
        .env("TOOLHOST_MODEL_BASE_URL", "http://127.0.0.1:9/v1")
        .env("TOOLHOST_MODEL", "any")
        .env("TOOLHOST_MODEL_CONTEXT_WINDOW", "lots")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("TOOLHOST_MODEL_CONTEXT_WINDOW is 'lots'")
            && stderr.contains("a number of tokens"),
        "{stderr}"
    );
}
