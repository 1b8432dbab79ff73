//! The agent runtime against a local server that speaks the Chat Completions protocol and
//! answers from a script: turns, parallel and sequential dispatch, sessions and their
//! search, memory per profile, child turns and their limits, cancellation, model errors.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolhost::agent::model::{OpenAiClient, OpenAiConfig};
use toolhost::agent::{Agent, AgentConfig, AgentError, AgentParts, ChildConfig};
use toolhost::{ApprovalPolicy, AutoApprove, Availability, DispatchConfig, Dispatcher};

use crate::support::{PluginDir, load, marker};

/// What the scripted server answers to one request.
#[derive(Clone)]
pub(crate) enum Reply {
    /// The assistant says this and stops.
    Text(String),
    /// The assistant calls these tools: (name, arguments).
    Calls(Vec<(String, Value)>),
    /// An HTTP error status with a body.
    Status(u16, String),
    /// A 200 whose body is this (malformed on purpose).
    Raw(String),
}

pub(crate) fn text(t: &str) -> Reply {
    Reply::Text(t.to_owned())
}

pub(crate) fn calls(list: &[(&str, Value)]) -> Reply {
    Reply::Calls(
        list.iter()
            .map(|(n, a)| ((*n).to_owned(), a.clone()))
            .collect(),
    )
}

type Responder = Arc<dyn Fn(&Value) -> Reply + Send + Sync>;

/// A Chat Completions server on 127.0.0.1 that answers with a responder and records every
/// request body.
pub(crate) struct ModelServer {
    pub(crate) url: String,
    pub(crate) requests: Arc<Mutex<Vec<Value>>>,
    stop: CancellationToken,
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn completion(reply: &Reply, n: usize) -> (u16, String) {
    let message = match reply {
        Reply::Text(t) => json!({"role": "assistant", "content": t}),
        Reply::Calls(list) => json!({
            "role": "assistant",
            "content": null,
            "tool_calls": list.iter().enumerate().map(|(i, (name, args))| json!({
                "id": format!("call_{n}_{i}"),
                "type": "function",
                "function": {"name": name, "arguments": args.to_string()}
            })).collect::<Vec<_>>()
        }),
        Reply::Status(code, body) => return (*code, body.clone()),
        Reply::Raw(body) => return (200, body.clone()),
    };
    (
        200,
        json!({"id": format!("cmpl-{n}"), "object": "chat.completion", "model": "scripted",
               "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})
        .to_string(),
    )
}

impl ModelServer {
    /// Answers with `responder(request)`.
    pub(crate) async fn start(responder: Responder) -> ModelServer {
        use http_body_util::{BodyExt as _, Full};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/v1", listener.local_addr().expect("addr"));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = CancellationToken::new();
        let (seen, stopped) = (Arc::clone(&requests), stop.clone());
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    () = stopped.cancelled() => break,
                    accepted = listener.accept() => match accepted {
                        Ok((s, _)) => s,
                        Err(_) => continue,
                    },
                };
                let (seen, responder) = (Arc::clone(&seen), Arc::clone(&responder));
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let (seen, responder) = (Arc::clone(&seen), Arc::clone(&responder));
                            async move {
                                let body = req.into_body().collect().await.map(|b| b.to_bytes());
                                let body: Value = body
                                    .ok()
                                    .and_then(|b| serde_json::from_slice(&b).ok())
                                    .unwrap_or(Value::Null);
                                let reply = responder(&body);
                                let n = {
                                    let mut seen = seen.lock().expect("lock");
                                    seen.push(body);
                                    seen.len()
                                };
                                let (status, text) = completion(&reply, n);
                                let mut response =
                                    hyper::Response::new(Full::new(hyper::body::Bytes::from(text)));
                                *response.status_mut() =
                                    hyper::StatusCode::from_u16(status).expect("status");
                                Ok::<_, std::convert::Infallible>(response)
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        ModelServer {
            url,
            requests,
            stop,
        }
    }

    /// Answers the requests in order from `script` (then 500s).
    pub(crate) async fn scripted(script: Vec<Reply>) -> ModelServer {
        let script = Mutex::new(VecDeque::from(script));
        ModelServer::start(Arc::new(move |_| {
            script
                .lock()
                .expect("lock")
                .pop_front()
                .unwrap_or_else(|| Reply::Status(500, "the script is exhausted".to_owned()))
        }))
        .await
    }

    pub(crate) fn request(&self, n: usize) -> Value {
        self.requests.lock().expect("lock")[n].clone()
    }

    pub(crate) fn count(&self) -> usize {
        self.requests.lock().expect("lock").len()
    }
}

/// The tool messages of a request, as (tool_call_id, content).
fn tool_messages(request: &Value) -> Vec<(String, String)> {
    request["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap_or("").to_owned(),
                m["content"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

fn last_user(request: &Value) -> String {
    request["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_owned()
}

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

struct Setup {
    plugins: PluginDir,
    libs: usize,
    dispatch: DispatchConfig,
    config: AgentConfig,
}

impl Setup {
    fn new(libs: &[&str]) -> Setup {
        Setup {
            plugins: PluginDir::with(libs),
            libs: libs.len(),
            dispatch: DispatchConfig::default(),
            config: AgentConfig::default(),
        }
    }

    fn agent(&self, server: &ModelServer, state: &Path) -> Agent {
        let (report, registry, _) = load(&self.plugins);
        // (The basic fixture's bad_metadata tool is left out, by design.)
        assert_eq!(report.plugins.len(), self.libs, "{:?}", report.errors);
        let registry = Arc::new(registry);
        let availability = Arc::new(Availability::new(Duration::from_secs(30)));
        let policy = ApprovalPolicy::new(Arc::new(AutoApprove), Arc::clone(&availability), true);
        let model = OpenAiClient::new(OpenAiConfig {
            base_url: server.url.clone(),
            model: "scripted".to_owned(),
            api_key: Some("test-key".to_owned()),
            timeout: Duration::from_secs(30),
            max_retries: 2,
            backoff: Duration::from_millis(5),
        })
        .expect("client");
        Agent::new(AgentParts {
            profile: state
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("p")
                .to_owned(),
            state_dir: state.to_path_buf(),
            registry: Arc::new(move || Arc::clone(&registry)),
            availability,
            dispatcher: Dispatcher::new(self.dispatch, Arc::new(policy)),
            model: Arc::new(model),
            config: self.config.clone(),
            caller: None,
            observer: None,
        })
        .expect("agent")
    }
}

fn state(dir: &tempfile::TempDir, profile: &str) -> PathBuf {
    dir.path().join(profile).join("state")
}

/// Three calls: `rendezvous` a, `middle`, `rendezvous` b, where a and b wait for each
/// other (in a fresh folder of `work`): both finish only if they run at the same time.
fn rendezvous_around(work: &tempfile::TempDir, middle: (&str, Value)) -> Reply {
    let meet = work.path().join("meet");
    std::fs::create_dir_all(&meet).expect("dir");
    let d = meet.to_str().expect("utf-8");
    calls(&[
        (
            "rendezvous",
            json!({"dir": d, "name": "a", "expect": ["a", "b"]}),
        ),
        middle,
        (
            "rendezvous",
            json!({"dir": d, "name": "b", "expect": ["a", "b"]}),
        ),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_calls_in_one_response_run_concurrently_and_come_back_in_order() {
    let work = tempfile::tempdir().expect("temp dir");
    let server = ModelServer::scripted(vec![
        rendezvous_around(&work, ("slow", json!({"ms": 200, "label": "slow one"}))),
        text("all three done"),
    ])
    .await;
    let mut setup = Setup::new(&["fixture_basic"]);
    setup.dispatch.timeout = Duration::from_secs(20);
    let agent = setup.agent(&server, &state(&work, "p"));
    let session = agent.new_session().expect("session");
    let answer = agent
        .run_turn(&session, "meet up", CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(answer, "all three done");
    // The two rendezvous calls could only both finish by running at the same time.
    let results = tool_messages(&server.request(1));
    let ids: Vec<&str> = results.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["call_1_0", "call_1_1", "call_1_2"], "{results:?}");
    assert_eq!(results[0].1, "a met a,b");
    assert!(results[1].1.contains("slow one"), "{results:?}");
    assert_eq!(results[2].1, "b met a,b");
    // The session kept every message: user, assistant (calls), 3 tool results, answer.
    assert_eq!(
        agent.sessions().messages(&session).expect("messages").len(),
        6
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_interactive_tool_in_the_batch_the_calls_run_one_at_a_time() {
    let work = tempfile::tempdir().expect("temp dir");
    let server = ModelServer::scripted(vec![
        rendezvous_around(&work, ("clarify", json!({"question": "Which one?"}))),
        text("done"),
    ])
    .await;
    let mut setup = Setup::new(&["fixture_basic", "toolhost_clarify"]);
    setup.dispatch.timeout = Duration::from_millis(500);
    let agent = setup.agent(&server, &state(&work, "p"));
    let session = agent.new_session().expect("session");
    agent
        .run_turn(&session, "go", CancellationToken::new())
        .await
        .expect("turn");
    let results = tool_messages(&server.request(1));
    // One at a time: `a` waited for `b`, which had not started, until its timeout.
    assert!(results[0].1.contains("timed out"), "{results:?}");
    // No person is attached: clarify says so, as an error result the model can read.
    assert!(
        results[1].1.contains("no person is attached"),
        "{results:?}"
    );
    assert_eq!(results[2].1, "b met a,b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_profiles_memories_stay_apart() {
    let work = tempfile::tempdir().expect("temp dir");
    let server = ModelServer::scripted(vec![
        calls(&[(
            "memory",
            json!({"action": "add", "text": "likes green tea"}),
        )]),
        text("noted"),
        calls(&[("memory", json!({"action": "list"}))]),
        text("listed"),
        calls(&[("memory", json!({"action": "search", "query": "tea"}))]),
        text("found"),
    ])
    .await;
    let setup = Setup::new(&["toolhost_memory"]);
    let alice = setup.agent(&server, &state(&work, "alice"));
    let bob = setup.agent(&server, &state(&work, "bob"));
    let run = |agent: &Agent, prompt: &'static str| {
        let agent = agent.clone();
        async move {
            let s = agent.new_session().expect("session");
            agent
                .run_turn(&s, prompt, CancellationToken::new())
                .await
                .expect("turn")
        }
    };
    run(&alice, "remember I like green tea").await;
    run(&bob, "what do you know about me?").await;
    run(&alice, "what do I drink?").await;
    let bob_sees = &tool_messages(&server.request(3))[0].1;
    assert!(
        !bob_sees.contains("tea"),
        "bob sees alice's note: {bob_sees}"
    );
    let alice_finds = &tool_messages(&server.request(5))[0].1;
    assert!(alice_finds.contains("likes green tea"), "{alice_finds}");
    assert!(state(&work, "alice").join("memory.json").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_search_finds_an_earlier_session() {
    let work = tempfile::tempdir().expect("temp dir");
    let server = ModelServer::scripted(vec![
        text("I will remember that."),
        calls(&[("session_search", json!({"query": "launch code"}))]),
        text("It was PURPLE-42."),
    ])
    .await;
    let setup = Setup::new(&["toolhost_session_search"]);
    let agent = setup.agent(&server, &state(&work, "p"));
    let first = agent.new_session().expect("session");
    agent
        .run_turn(
            &first,
            "The launch code is PURPLE-42.",
            CancellationToken::new(),
        )
        .await
        .expect("turn");
    let second = agent.new_session().expect("session");
    let answer = agent
        .run_turn(
            &second,
            "What was the launch code?",
            CancellationToken::new(),
        )
        .await
        .expect("turn");
    assert_eq!(answer, "It was PURPLE-42.");
    let found = &tool_messages(&server.request(2))[0].1;
    let found: Value = serde_json::from_str(found).expect("JSON");
    let hit = &found["matches"][0];
    assert_eq!(hit["session"], first.as_str(), "{found}");
    assert!(
        hit["snippet"]
            .as_str()
            .is_some_and(|s| s.contains("PURPLE")),
        "{found}"
    );
    assert!(
        hit["time"].as_str().is_some_and(|t| t.contains('T')),
        "{found}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delegate_task_runs_a_child_turn_without_delegate_task_and_the_depth_limit_holds() {
    let work = tempfile::tempdir().expect("temp dir");
    let server = ModelServer::start(Arc::new(|request: &Value| {
        let user = last_user(request);
        let results = tool_messages(request);
        match results.last() {
            // The parent, after the child answered.
            Some((_, answer)) if user == "parent" => text(&format!("parent got: {answer}")),
            _ if user == "parent" => calls(&[(
                "delegate_task",
                json!({"task": "child job", "context": "be brief"}),
            )]),
            _ => text("child answer"),
        }
    }))
    .await;
    let setup = Setup::new(&["toolhost_delegate_task", "toolhost_memory", "fixture_basic"]);
    let agent = setup.agent(&server, &state(&work, "p"));
    let session = agent.new_session().expect("session");
    let answer = agent
        .run_turn(&session, "parent", CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(answer, "parent got: child answer");
    let parent_tools = tool_names(&server.request(0));
    assert!(parent_tools.contains(&"delegate_task".to_owned()));
    let child = server.request(1);
    assert!(last_user(&child).starts_with("child job"), "{child}");
    assert!(last_user(&child).contains("be brief"), "{child}");
    let child_tools = tool_names(&child);
    assert!(
        !child_tools.contains(&"delegate_task".to_owned()),
        "{child_tools:?}"
    );
    assert!(
        !child_tools.contains(&"memory".to_owned()),
        "{child_tools:?}"
    );
    assert!(child_tools.contains(&"echo".to_owned()), "{child_tools:?}");

    // With children allowed to delegate, the depth limit stops the nesting.
    let work = tempfile::tempdir().expect("temp dir");
    let server = ModelServer::start(Arc::new(|request: &Value| {
        match tool_messages(request).last() {
            Some((_, result)) => text(&format!("stopped: {result}")),
            None => calls(&[("delegate_task", json!({"task": "go deeper"}))]),
        }
    }))
    .await;
    let mut setup = Setup::new(&["toolhost_delegate_task"]);
    setup.config.children = ChildConfig {
        max_depth: 1,
        exclude: Vec::new(),
        ..ChildConfig::default()
    };
    let agent = setup.agent(&server, &state(&work, "p"));
    let session = agent.new_session().expect("session");
    let answer = agent
        .run_turn(&session, "go deep", CancellationToken::new())
        .await
        .expect("turn");
    assert!(answer.contains("may nest 1 deep"), "{answer}");
    // Parent, child (whose delegation was refused), child again, parent again.
    assert_eq!(server.count(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_turn_stops_its_tools() {
    let work = tempfile::tempdir().expect("temp dir");
    let (_m, mark) = marker();
    let started = work.path().join("started");
    let server = ModelServer::scripted(vec![calls(&[(
        "wait_cancel",
        json!({"marker": mark, "started": started}),
    )])])
    .await;
    let setup = Setup::new(&["fixture_basic"]);
    let agent = setup.agent(&server, &state(&work, "p"));
    let session = agent.new_session().expect("session");
    let cancel = CancellationToken::new();
    let turn = {
        let (agent, session, cancel) = (agent.clone(), session.clone(), cancel.clone());
        tokio::spawn(async move { agent.run_turn(&session, "wait", cancel).await })
    };
    tokio::time::timeout(Duration::from_secs(30), async {
        while !started.exists() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the tool started");
    cancel.cancel();
    let outcome = tokio::time::timeout(Duration::from_secs(30), turn)
        .await
        .expect("the turn ended")
        .expect("joined");
    assert!(matches!(outcome, Err(AgentError::Cancelled)), "{outcome:?}");
    let seen = std::fs::read_to_string(&mark).expect("the plugin saw the cancel");
    assert!(seen.contains("is_cancelled=true"), "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_errors_end_the_turn_clearly_and_the_session_keeps_what_was_said() {
    let work = tempfile::tempdir().expect("temp dir");
    let server = ModelServer::scripted(vec![
        // Transient failures are retried.
        Reply::Status(429, "slow down".to_owned()),
        Reply::Status(503, "overloaded".to_owned()),
        text("after a retry"),
        Reply::Status(
            400,
            "{\"error\": {\"message\": \"model not found\"}}".to_owned(),
        ),
        Reply::Raw("this is not a completion".to_owned()),
    ])
    .await;
    let setup = Setup::new(&["fixture_basic"]);
    let agent = setup.agent(&server, &state(&work, "p"));
    let session = agent.new_session().expect("session");
    let answer = agent
        .run_turn(&session, "hello", CancellationToken::new())
        .await
        .expect("retried");
    assert_eq!(answer, "after a retry");

    let err = agent
        .run_turn(&session, "second question", CancellationToken::new())
        .await
        .expect_err("400");
    let message = err.to_string();
    assert!(
        message.contains("400") && message.contains("model not found"),
        "{message}"
    );

    let err = agent
        .run_turn(&session, "third question", CancellationToken::new())
        .await
        .expect_err("malformed");
    assert!(err.to_string().contains("malformed"), "{err}");

    let kept: Vec<String> = agent
        .sessions()
        .messages(&session)
        .expect("messages")
        .into_iter()
        .filter_map(|m| m.content)
        .collect();
    assert_eq!(
        kept,
        [
            "hello",
            "after a retry",
            "second question",
            "third question"
        ]
    );
}

/// `toolhost` with the model settings taken from the environment only.
fn toolhost_agent_command() -> std::process::Command {
    let mut cmd = crate::support::toolhost_command();
    for var in [
        "TOOLHOST_MODEL_BASE_URL",
        "TOOLHOST_MODEL",
        "TOOLHOST_API_KEY",
        "OPENAI_API_KEY",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

#[test]
fn run_without_a_model_says_how_to_configure_one() {
    let plugins = PluginDir::with(&["fixture_echo"]);
    let out = toolhost_agent_command()
        .args(["run", "hello", "--plugins"])
        .arg(plugins.path())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no model is configured") && stderr.contains("TOOLHOST_MODEL_BASE_URL"),
        "{stderr}"
    );
}

#[test]
fn run_with_an_unreachable_model_fails_clearly() {
    let plugins = PluginDir::with(&["fixture_echo"]);
    let work = tempfile::tempdir().expect("temp dir");
    let config = work.path().join("config.toml");
    std::fs::write(&config, "[model]\nmax_retries = 0\n").expect("config");
    let out = toolhost_agent_command()
        .arg("--config")
        .arg(&config)
        .args(["run", "hello", "--plugins"])
        .arg(plugins.path())
        .env("TOOLHOST_MODEL_BASE_URL", "http://127.0.0.1:9/v1")
        .env("TOOLHOST_MODEL", "any")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("could not reach the model server at http://127.0.0.1:9/v1"),
        "{stderr}"
    );
    assert!(stderr.contains("keeps what was said"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_and_chat_answer_and_show_the_tool_calls() {
    let server = ModelServer::scripted(vec![
        calls(&[("echo", json!({"text": "from the tool"}))]),
        text("the final answer"),
        text("chat answer one"),
    ])
    .await;
    let plugins = PluginDir::with(&["fixture_echo"]);
    let work = tempfile::tempdir().expect("temp dir");
    let config = work.path().join("config.toml");
    std::fs::write(
        &config,
        format!("profiles_dir = {:?}\n", work.path().join("profiles")),
    )
    .expect("config");
    let url = server.url.clone();
    let command = move |args: &[&str]| {
        let mut cmd = toolhost_agent_command();
        cmd.arg("--config")
            .arg(&config)
            .args(args)
            .arg("--plugins")
            .arg(plugins.path())
            .env("TOOLHOST_MODEL_BASE_URL", &url)
            .env("TOOLHOST_MODEL", "scripted");
        cmd
    };
    let out = tokio::task::spawn_blocking({
        let mut cmd = command(&["run", "use the echo tool"]);
        move || cmd.output().expect("run")
    })
    .await
    .expect("joined");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout.trim(), "the final answer");
    assert!(
        stderr.contains("-> echo") && stderr.contains("from the tool"),
        "{stderr}"
    );

    let out = tokio::task::spawn_blocking({
        let mut cmd = command(&["chat"]);
        move || {
            use std::io::Write as _;
            let mut child = cmd
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("chat");
            let mut stdin = child.stdin.take().expect("stdin");
            stdin.write_all(b"hello there\n\n").expect("write");
            drop(stdin);
            child.wait_with_output().expect("chat output")
        }
    })
    .await
    .expect("joined");
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "chat answer one"
    );
    // Both turns were stored in the default profile's sessions.
    assert!(
        work.path()
            .join("profiles/default/state/sessions.sqlite3")
            .exists()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_interrupted_between_a_call_and_its_result_can_go_on() {
    use toolhost::agent::model::{Message, ModelToolCall, Role};
    let work = tempfile::tempdir().expect("temp dir");
    let server = ModelServer::scripted(vec![text("carrying on")]).await;
    let setup = Setup::new(&["fixture_echo"]);
    let agent = setup.agent(&server, &state(&work, "p"));
    let session = agent.new_session().expect("session");
    // What a crash during a tool call leaves: the call, and no result.
    agent
        .sessions()
        .append(&session, &Message::text(Role::User, "start"))
        .expect("append");
    agent
        .sessions()
        .append(
            &session,
            &Message {
                role: Role::Assistant,
                content: None,
                tool_calls: vec![ModelToolCall {
                    id: "lost".to_owned(),
                    name: "echo".to_owned(),
                    arguments: "{\"text\": \"x\"}".to_owned(),
                }],
                tool_call_id: None,
            },
        )
        .expect("append");
    let answer = agent
        .run_turn(&session, "are you there?", CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(answer, "carrying on");
    let sent = tool_messages(&server.request(0));
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].0, "lost");
    assert!(sent[0].1.starts_with("interrupted"), "{sent:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_turn_past_its_timeout_is_stopped_and_reported() {
    let work = tempfile::tempdir().expect("temp dir");
    let (_m, mark) = marker();
    let started = work.path().join("started");
    let child_marker = mark.clone();
    let server = ModelServer::start(Arc::new(move |request: &Value| {
        let user = last_user(request);
        match tool_messages(request).last() {
            Some((_, result)) if user == "parent" => text(&format!("parent saw: {result}")),
            None if user == "parent" => calls(&[("delegate_task", json!({"task": "wait"}))]),
            _ => calls(&[(
                "wait_cancel",
                json!({"marker": child_marker, "started": started}),
            )]),
        }
    }))
    .await;
    let mut setup = Setup::new(&["toolhost_delegate_task", "fixture_basic"]);
    setup.config.children.timeout = Duration::from_millis(500);
    let agent = setup.agent(&server, &state(&work, "p"));
    let session = agent.new_session().expect("session");
    let answer = tokio::time::timeout(
        Duration::from_secs(30),
        agent.run_turn(&session, "parent", CancellationToken::new()),
    )
    .await
    .expect("the turn ended")
    .expect("turn");
    assert!(answer.contains("took longer than 500ms"), "{answer}");
    // The child's tool saw its cancel signal.
    let seen = std::fs::read_to_string(&mark).expect("the child's tool was cancelled");
    assert!(seen.contains("is_cancelled=true"), "{seen}");
}

/// A batch of 3 child turns whose tools each take 300 ms: the most that ran at once.
async fn most_children_at_once(max_concurrent: usize) -> u64 {
    let work = tempfile::tempdir().expect("temp dir");
    let server = ModelServer::start(Arc::new(|request: &Value| {
        let user = last_user(request);
        match tool_messages(request).last() {
            Some((_, result)) => text(result),
            None if user == "parent" => calls(&[(
                "delegate_task",
                json!({"tasks": [{"task": "one"}, {"task": "two"}, {"task": "three"}]}),
            )]),
            None => calls(&[("slow", json!({"ms": 300, "label": user}))]),
        }
    }))
    .await;
    let mut setup = Setup::new(&["toolhost_delegate_task", "fixture_basic"]);
    setup.config.children.max_concurrent = max_concurrent;
    let agent = setup.agent(&server, &state(&work, "p"));
    let session = agent.new_session().expect("session");
    let answer = agent
        .run_turn(&session, "parent", CancellationToken::new())
        .await
        .expect("turn");
    // The parent's answer is the delegate_task result: each child's answer is its slow
    // call's report, in the order the tasks were given.
    let results: Value = serde_json::from_str(&answer).expect("JSON");
    let results = results["results"].as_array().expect("results");
    let labels: Vec<Value> = results
        .iter()
        .map(|r| {
            let answer: Value = serde_json::from_str(r["answer"].as_str().expect("answer"))
                .expect("the child's answer is the slow tool's report");
            answer["label"].clone()
        })
        .collect();
    assert_eq!(labels, [json!("one"), json!("two"), json!("three")]);
    results
        .iter()
        .filter_map(|r| {
            serde_json::from_str::<Value>(r["answer"].as_str()?).ok()?["in_flight_at_start"]
                .as_u64()
        })
        .max()
        .expect("counts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_turns_run_in_parallel_up_to_the_cap_and_answers_keep_their_order() {
    assert_eq!(most_children_at_once(1).await, 1);
    assert!(most_children_at_once(3).await > 1);
}
