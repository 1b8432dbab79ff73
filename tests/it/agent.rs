//! The agent runtime, against a `ScriptedModel` that answers from a script and records
//! the typed requests it got: turns, parallel and sequential dispatch, sessions and their
//! search, memory per profile, child turns and their limits, cancellation. Two tests go
//! through the real Chat Completions client and a local server (the wire format, retries
//! and model errors), and two run the `toolhost` binary.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolhost::agent::model::{ModelProvider, OpenAiClient};
use toolhost::agent::{Agent, AgentError, AgentParts};
use toolhost::{
    AgentSettings, AutoApprove, CallDoor, CallSettings, ChildSettings, DispatchConfig,
    ModelSettings, fixed_profile,
};

use crate::support::model::{
    ModelServer, Reply, ScriptedModel, ToolAnswer, calls, text, wire_tool_messages,
};
use crate::support::{PluginDir, load, marker};

struct Setup {
    plugins: PluginDir,
    libs: usize,
    dispatch: DispatchConfig,
    config: AgentSettings,
}

impl Setup {
    fn new(libs: &[&str]) -> Setup {
        Setup {
            plugins: PluginDir::with(libs),
            libs: libs.len(),
            dispatch: DispatchConfig::default(),
            config: AgentSettings::default(),
        }
    }

    /// An agent of this setup talking to `model`.
    fn agent(&self, model: &Arc<ScriptedModel>, state: &Path) -> Agent {
        self.agent_with(Arc::clone(model) as Arc<dyn ModelProvider>, state)
    }

    /// An agent of this setup talking to `server` through the real HTTP client.
    fn agent_over_http(&self, server: &ModelServer, state: &Path) -> Agent {
        let model = OpenAiClient::new(ModelSettings {
            base_url: server.url.clone(),
            model: "scripted".to_owned(),
            api_key: Some("test-key".to_owned()),
            timeout: Duration::from_secs(30),
            max_retries: 2,
            backoff: Duration::from_millis(5),
            stream: true,
        })
        .expect("client");
        self.agent_with(Arc::new(model), state)
    }

    fn agent_with(&self, model: Arc<dyn ModelProvider>, state: &Path) -> Agent {
        let (report, registry, _) = load(&self.plugins);
        // (The basic fixture's bad_metadata tool is left out, by design.)
        assert_eq!(report.plugins.len(), self.libs, "{:?}", report.errors);
        let profile = state
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("p")
            .to_owned();
        let settings = CallSettings {
            dispatch: self.dispatch,
            ..CallSettings::default()
        };
        let tools = fixed_profile(&profile, Arc::new(registry), None);
        Agent::new(AgentParts {
            profile,
            dirs: toolhost::ProfileDirs::of_state(state),
            workspace: toolhost::WorkspaceSettings::default(),
            door: CallDoor::new(&settings, tools, Arc::new(AutoApprove)),
            model,
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
    // Over HTTP: the calls' ids come from the server and go back with their results.
    let agent = setup.agent_over_http(&server, &state(&work, "p"));
    let session = agent.new_session().expect("session");
    let answer = agent
        .run_turn(&session, "meet up", CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(answer, "all three done");
    // The two rendezvous calls could only both finish by running at the same time.
    let results = wire_tool_messages(&server.request(1));
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
    let model = ScriptedModel::scripted(vec![
        rendezvous_around(&work, ("clarify", json!({"question": "Which one?"}))),
        text("done"),
    ]);
    let mut setup = Setup::new(&["fixture_basic", "toolhost_clarify"]);
    setup.dispatch.timeout = Duration::from_millis(500);
    let agent = setup.agent(&model, &state(&work, "p"));
    let session = agent.new_session().expect("session");
    agent
        .run_turn(&session, "go", CancellationToken::new())
        .await
        .expect("turn");
    let results = model.request(1).tool_answers();
    // One at a time: `a` waited for `b`, which had not started, until its timeout.
    assert!(results[0].content.contains("timed out"), "{results:?}");
    // No person is attached: clarify says so, as an error result the model can read.
    assert!(
        results[1].content.contains("no person is attached"),
        "{results:?}"
    );
    assert_eq!(results[2].content, "b met a,b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_profiles_memories_stay_apart() {
    let work = tempfile::tempdir().expect("temp dir");
    let model = ScriptedModel::scripted(vec![
        calls(&[(
            "memory",
            json!({"action": "add", "text": "likes green tea"}),
        )]),
        text("noted"),
        calls(&[("memory", json!({"action": "list"}))]),
        text("listed"),
        calls(&[("memory", json!({"action": "search", "query": "tea"}))]),
        text("found"),
    ]);
    let setup = Setup::new(&["toolhost_memory"]);
    let alice = setup.agent(&model, &state(&work, "alice"));
    let bob = setup.agent(&model, &state(&work, "bob"));
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
    let bob_sees = &model.request(3).tool_answers()[0].content;
    assert!(
        !bob_sees.contains("tea"),
        "bob sees alice's note: {bob_sees}"
    );
    let alice_finds = &model.request(5).tool_answers()[0].content;
    assert!(alice_finds.contains("likes green tea"), "{alice_finds}");
    assert!(state(&work, "alice").join("memory.json").exists());
}

/// What session_search answers.
#[derive(Debug, serde::Deserialize)]
struct Matches {
    matches: Vec<toolhost_plugin_api::SessionHit>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_search_finds_an_earlier_session() {
    let work = tempfile::tempdir().expect("temp dir");
    let model = ScriptedModel::scripted(vec![
        text("I will remember that."),
        calls(&[("session_search", json!({"query": "launch code"}))]),
        text("It was PURPLE-42."),
    ]);
    let setup = Setup::new(&["toolhost_session_search"]);
    let agent = setup.agent(&model, &state(&work, "p"));
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
    let found = &model.request(2).tool_answers()[0].content;
    let found: Matches = serde_json::from_str(found).expect("session_search's answer");
    let hit = &found.matches[0];
    assert_eq!(hit.session, first, "{found:?}");
    assert!(hit.snippet.contains("PURPLE"), "{found:?}");
    assert!(hit.time.contains('T'), "{found:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delegate_task_runs_a_child_turn_without_delegate_task_and_the_depth_limit_holds() {
    let work = tempfile::tempdir().expect("temp dir");
    let model = ScriptedModel::new(|request| {
        let user = request.last_user();
        match request.tool_answers().last() {
            // The parent, after the child answered.
            Some(ToolAnswer { content, .. }) if user == "parent" => {
                text(&format!("parent got: {content}"))
            }
            _ if user == "parent" => calls(&[(
                "delegate_task",
                json!({"task": "child job", "context": "be brief"}),
            )]),
            _ => text("child answer"),
        }
    });
    let setup = Setup::new(&["toolhost_delegate_task", "toolhost_memory", "fixture_basic"]);
    let agent = setup.agent(&model, &state(&work, "p"));
    let session = agent.new_session().expect("session");
    let answer = agent
        .run_turn(&session, "parent", CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(answer, "parent got: child answer");
    assert!(model.request(0).offers("delegate_task"));
    let child = model.request(1);
    assert!(child.last_user().starts_with("child job"), "{child:?}");
    assert!(child.last_user().contains("be brief"), "{child:?}");
    assert!(!child.offers("delegate_task"), "{:?}", child.tools);
    assert!(!child.offers("memory"), "{:?}", child.tools);
    assert!(child.offers("echo"), "{:?}", child.tools);

    // With children allowed to delegate, the depth limit stops the nesting.
    let work = tempfile::tempdir().expect("temp dir");
    let model = ScriptedModel::new(|request| match request.tool_answers().last() {
        Some(result) => text(&format!("stopped: {}", result.content)),
        None => calls(&[("delegate_task", json!({"task": "go deeper"}))]),
    });
    let mut setup = Setup::new(&["toolhost_delegate_task"]);
    setup.config.children = ChildSettings {
        max_depth: 1,
        exclude: Vec::new(),
        ..ChildSettings::default()
    };
    let agent = setup.agent(&model, &state(&work, "p"));
    let session = agent.new_session().expect("session");
    let answer = agent
        .run_turn(&session, "go deep", CancellationToken::new())
        .await
        .expect("turn");
    assert!(answer.contains("may nest 1 deep"), "{answer}");
    // Parent, child (whose delegation was refused), child again, parent again.
    assert_eq!(model.count(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_turn_stops_its_tools() {
    let work = tempfile::tempdir().expect("temp dir");
    let (_m, mark) = marker();
    let started = work.path().join("started");
    let model = ScriptedModel::scripted(vec![calls(&[(
        "wait_cancel",
        json!({"marker": mark, "started": started}),
    )])]);
    let setup = Setup::new(&["fixture_basic"]);
    let agent = setup.agent(&model, &state(&work, "p"));
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
    let agent = setup.agent_over_http(&server, &state(&work, "p"));
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
    assert!(crate::support::profile_sessions("default").exists());
    assert!(
        !crate::support::profile_state("default")
            .join("sessions.sqlite3")
            .exists(),
        "sessions are kept out of the folder plugins may read"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_interrupted_between_a_call_and_its_result_can_go_on() {
    use toolhost::agent::model::{Message, ModelToolCall, Role};
    let work = tempfile::tempdir().expect("temp dir");
    let model = ScriptedModel::scripted(vec![text("carrying on")]);
    let setup = Setup::new(&["fixture_echo"]);
    let agent = setup.agent(&model, &state(&work, "p"));
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
                details: Default::default(),
                id: None,
            },
        )
        .expect("append");
    let answer = agent
        .run_turn(&session, "are you there?", CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(answer, "carrying on");
    let sent = model.request(0).tool_answers();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].call_id, "lost");
    assert!(sent[0].content.starts_with("interrupted"), "{sent:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_turn_past_its_timeout_is_stopped_and_reported() {
    let work = tempfile::tempdir().expect("temp dir");
    let (_m, mark) = marker();
    let started = work.path().join("started");
    let child_marker = mark.clone();
    let model = ScriptedModel::new(move |request| {
        let user = request.last_user();
        match request.tool_answers().last() {
            Some(result) if user == "parent" => text(&format!("parent saw: {}", result.content)),
            None if user == "parent" => calls(&[("delegate_task", json!({"task": "wait"}))]),
            _ => calls(&[(
                "wait_cancel",
                json!({"marker": child_marker, "started": started}),
            )]),
        }
    });
    let mut setup = Setup::new(&["toolhost_delegate_task", "fixture_basic"]);
    setup.config.children.timeout = Duration::from_millis(500);
    let agent = setup.agent(&model, &state(&work, "p"));
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
    let model = ScriptedModel::new(|request| {
        let user = request.last_user();
        match request.tool_answers().last() {
            Some(result) => text(&result.content),
            None if user == "parent" => calls(&[(
                "delegate_task",
                json!({"tasks": [{"task": "one"}, {"task": "two"}, {"task": "three"}]}),
            )]),
            None => calls(&[("slow", json!({"ms": 300, "label": user}))]),
        }
    });
    let mut setup = Setup::new(&["toolhost_delegate_task", "fixture_basic"]);
    setup.config.children.max_concurrent = max_concurrent;
    let agent = setup.agent(&model, &state(&work, "p"));
    let session = agent.new_session().expect("session");
    let answer = agent
        .run_turn(&session, "parent", CancellationToken::new())
        .await
        .expect("turn");
    // The parent's answer is the delegate_task result: each child's answer is its slow
    // call's report, in the order the tasks were given.
    let batch: DelegateAnswer = serde_json::from_str(&answer).expect("delegate_task's answer");
    let reports: Vec<SlowReport> = batch
        .results
        .iter()
        .map(|r| {
            let answer = r.answer.as_deref().expect("answer");
            serde_json::from_str(answer).expect("the child's answer is the slow tool's report")
        })
        .collect();
    let labels: Vec<&str> = reports.iter().map(|r| r.label.as_str()).collect();
    assert_eq!(labels, ["one", "two", "three"]);
    reports
        .iter()
        .filter_map(|r| r.in_flight_at_start)
        .max()
        .expect("counts")
}

/// What delegate_task answers for a batch (the parts these tests read).
#[derive(Debug, serde::Deserialize)]
struct DelegateAnswer {
    results: Vec<ChildResult>,
}

#[derive(Debug, serde::Deserialize)]
struct ChildResult {
    answer: Option<String>,
}

/// What the basic fixture's `slow` tool reports.
#[derive(Debug, serde::Deserialize)]
struct SlowReport {
    label: String,
    in_flight_at_start: Option<u64>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_turns_run_in_parallel_up_to_the_cap_and_answers_keep_their_order() {
    assert_eq!(most_children_at_once(1).await, 1);
    assert!(most_children_at_once(3).await > 1);
}

/// The agent's own `todo` tool: offered to the model beside the profile's tools, answered
/// by the turn itself (never dispatched), kept per session in the session store: it lasts
/// across turns and a restart of the agent, another session has its own, and a bad call is
/// refused saying what to send, the list unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_todo_list_is_the_sessions_own_and_lasts() {
    let work = tempfile::tempdir().expect("temp dir");
    let model = ScriptedModel::scripted(vec![
        calls(&[(
            "todo",
            json!({"todos": [
                {"id": "1", "content": "read the code", "status": "in_progress"},
                {"id": "2", "content": "write the test", "status": "pending"}
            ]}),
        )]),
        text("planned"),
        calls(&[
            (
                "todo",
                json!({"todos": [{"id": "1", "status": "done"}], "merge": true}),
            ),
            (
                "todo",
                json!({"todos": [{"id": "1", "status": "completed"}], "merge": true}),
            ),
        ]),
        text("progress"),
        calls(&[("todo", json!({}))]),
        text("read back"),
        calls(&[("todo", json!({}))]),
        text("another session"),
    ]);
    let setup = Setup::new(&["fixture_basic"]);
    let dir = state(&work, "p");
    let agent = setup.agent(&model, &dir);
    let session = agent.new_session().expect("session");
    agent
        .run_turn(&session, "plan it", CancellationToken::new())
        .await
        .expect("turn 1");
    assert!(
        model.request(0).offers("todo"),
        "the model is offered the todo tool"
    );
    assert!(
        model.request(0).offers("echo"),
        "beside the profile's tools"
    );
    let written = &model.request(1).tool_answers()[0].content;
    assert!(
        written.contains("\"total\":2") && written.contains("in_progress"),
        "{written}"
    );

    agent
        .run_turn(&session, "go on", CancellationToken::new())
        .await
        .expect("turn 2");
    let answers = model.request(3).tool_answers();
    let (refused, merged) = (
        &answers[answers.len() - 2].content,
        &answers[answers.len() - 1].content,
    );
    assert!(
        refused.contains("invalid arguments") && refused.contains("in_progress"),
        "a bad status is refused saying what to send: {refused}"
    );
    assert!(
        merged.contains("\"completed\":1") && merged.contains("\"pending\":1"),
        "{merged}"
    );

    // A new agent on the same state (a restart) reads the same list.
    drop(agent);
    let agent = setup.agent(&model, &dir);
    agent
        .run_turn(&session, "where are we?", CancellationToken::new())
        .await
        .expect("turn 3");
    let read = model
        .request(5)
        .tool_answers()
        .last()
        .map(|a| a.content.clone())
        .unwrap_or_default();
    assert!(
        read.contains("read the code") && read.contains("\"completed\":1"),
        "the list lasts: {read}"
    );

    // Another session starts with an empty list.
    let other = agent.new_session().expect("session");
    agent
        .run_turn(&other, "and here?", CancellationToken::new())
        .await
        .expect("turn 4");
    let empty = &model.request(7).tool_answers()[0].content;
    assert!(empty.contains("\"total\":0"), "{empty}");
}
