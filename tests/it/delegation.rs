//! Delegation as the seed specifies it, through real plugins (`delegate_task`, the basic
//! fixture's gates) and scripted models: background delegation (the id at once, the
//! completion in the parent's session and in the model's next request), completion units
//! (one by default, one per group with `independent_completions`), concurrency counted by
//! calls, the roles, cancellation; and through the binary: `run` waits, `run --detach`,
//! `sessions`, and the same over `--isolate` (the child-turn service through the worker
//! proxy).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolhost::agent::model::{ModelProvider, Role};
use toolhost::agent::sessions::{DelegationRecord, SessionStore, UnitRecord};
use toolhost::agent::{Agent, AgentError, AgentParts};
use toolhost::{AgentSettings, AutoApprove, CallDoor, CallSettings, ChildSettings, fixed_profile};

use crate::support::model::{ModelRequest, ModelServer, Reply, ScriptedModel, calls, text};
use crate::support::{PluginDir, WAIT_BOUND, eventually_async, load, marker};

const MARK: &str = "[background delegation ";

/// An agent over `delegate_task` and the basic fixture, with `children` settings.
fn new_agent(model: &Arc<ScriptedModel>, state: &Path, children: ChildSettings) -> Agent {
    let plugins = PluginDir::with(&["toolhost_delegate_task", "fixture_basic"]);
    let (report, registry, _) = load(&plugins);
    assert_eq!(report.plugins.len(), 2, "{:?}", report.errors);
    let tools = fixed_profile("p", Arc::new(registry), None);
    Agent::new(AgentParts {
        profile: "p".to_owned(),
        dirs: toolhost::ProfileDirs::of_state(state),
        workspace: toolhost::WorkspaceSettings::default(),
        door: CallDoor::new(&CallSettings::default(), tools, Arc::new(AutoApprove)),
        model: Arc::clone(model) as Arc<dyn ModelProvider>,
        config: AgentSettings {
            children,
            ..AgentSettings::default()
        },
        caller: None,
        observer: None,
    })
    .expect("agent")
}

/// The first thing the person (or the parent, for a child) said: who this request is for.
fn first_user(request: &ModelRequest) -> &str {
    request
        .messages
        .iter()
        .find(|m| m.role == Role::User)
        .and_then(|m| m.content.as_deref())
        .unwrap_or("")
}

/// A child's gate: it arrives as `arrived-NAME` in `dir` and waits for `go-NAME`.
fn gate(dir: &Path, name: &str) -> Reply {
    calls(&[(
        "rendezvous",
        json!({"dir": dir, "name": format!("arrived-{name}"), "expect": [format!("go-{name}")]}),
    )])
}

fn open(dir: &Path, name: &str) {
    std::fs::write(dir.join(format!("go-{name}")), "go").expect("open the gate");
}

fn arrived(dir: &Path, name: &str) -> bool {
    dir.join(format!("arrived-{name}")).exists()
}

/// The completions stored in `session`, in order.
fn completions(agent: &Agent, session: &str) -> Vec<String> {
    agent
        .sessions()
        .messages(session)
        .expect("messages")
        .into_iter()
        .filter(|m| m.role == Role::User)
        .filter_map(|m| m.content)
        .filter(|c| c.starts_with(MARK))
        .collect()
}

/// The results of a completion message (its JSON line).
fn results(completion: &str) -> Vec<Value> {
    let body = completion.split_once('\n').expect("a body").1;
    let body: Value = serde_json::from_str(body).expect("JSON");
    body["results"].as_array().expect("results").clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_delegation_answers_at_once_and_its_completion_reaches_the_models_next_step() {
    let work = tempfile::tempdir().expect("temp dir");
    let gates = work.path().join("gates");
    std::fs::create_dir_all(&gates).expect("dir");
    let g = gates.clone();
    let model = ScriptedModel::new(move |r| {
        let last = r.last_user();
        match first_user(r) {
            _ if last == "later" => text(&format!(
                "history has {} completions",
                r.messages
                    .iter()
                    .filter(|m| m.content.as_deref().is_some_and(|c| c.starts_with(MARK)))
                    .count()
            )),
            "parent" if last.starts_with(MARK) => text(&format!("final: {last}")),
            "parent" => match r.tool_answers().last() {
                None => calls(&[(
                    "delegate_task",
                    json!({"task": "slow job", "background": true}),
                )]),
                Some(answer) => text(&format!("interim: {}", answer.content)),
            },
            // The child: waits at its gate, then answers.
            _ => match r.tool_answers().last() {
                None => gate(&g, "child"),
                Some(_) => text("child result"),
            },
        }
    });
    let agent = new_agent(&model, &work.path().join("state"), ChildSettings::default());

    // `run`'s way: the turn waits for the outstanding unit.
    let session = agent.new_session().expect("session");
    let turn = tokio::spawn({
        let (agent, session) = (agent.clone(), session.clone());
        async move {
            agent
                .run_turn_to_the_end(&session, "parent", CancellationToken::new())
                .await
        }
    });
    // The delegation's id came back while its child waits at the gate: the parent's
    // model already answered with it.
    let interim = eventually_async(WAIT_BOUND, "the parent's interim answer", || {
        (0..model.count())
            .map(|n| model.request(n))
            .find(|r| first_user(r) == "parent" && !r.tool_answers().is_empty())
            .map(|r| r.tool_answers()[0].content.clone())
    })
    .await;
    let started: Value = serde_json::from_str(&interim).expect("delegate_task's JSON");
    let id = started["delegation"].as_str().expect("an id").to_owned();
    assert!(id.starts_with("d-"), "{started}");
    assert_eq!(started["units"][0]["tasks"], json!(["slow job"]));
    // The child starts on its own task: on a loaded machine the parent's model can answer
    // before the child reaches its gate, so wait for it (bounded) rather than look once.
    eventually_async(WAIT_BOUND, "the child at its gate", || {
        arrived(&gates, "child")
    })
    .await;
    assert!(!turn.is_finished(), "the turn waits for its unit");
    let record = &agent
        .sessions()
        .delegations(Some(&session))
        .expect("records")[0];
    assert_eq!(
        (record.id.as_str(), record.state.as_str()),
        (id.as_str(), "running")
    );

    open(&gates, "child");
    let answer = tokio::time::timeout(WAIT_BOUND, turn)
        .await
        .expect("the turn ended")
        .expect("joined")
        .expect("turn");
    assert!(
        answer.starts_with(&format!(
            "final: {MARK}{id} finished: unit {id}/u1, 1 task]"
        )),
        "{answer}"
    );
    assert!(answer.contains("child result"), "{answer}");
    // Stored once, after the interim answer; the model's last request ended with it.
    let stored = completions(&agent, &session);
    assert_eq!(stored.len(), 1, "{stored:?}");
    let last = model.request(model.count() - 1);
    let tail: Vec<_> = last.messages.iter().rev().take(2).collect();
    assert_eq!(tail[0].content.as_deref(), Some(stored[0].as_str()));
    assert!(
        tail[1]
            .content
            .as_deref()
            .is_some_and(|c| c.starts_with("interim:")),
        "{tail:?}"
    );
    let record = &agent
        .sessions()
        .delegations(Some(&session))
        .expect("records")[0];
    assert_eq!(record.state, "done");
    assert_eq!(record.children.len(), 1);

    // `chat`'s way: the turn ends at once; a finished turn does not stop its children,
    // and the completion is stored when it comes, for the session's next turn.
    std::fs::remove_file(gates.join("go-child")).expect("close the gate");
    std::fs::remove_file(gates.join("arrived-child")).expect("reset");
    let session = agent.new_session().expect("session");
    let answer = agent
        .run_turn(&session, "parent", CancellationToken::new())
        .await
        .expect("turn");
    assert!(answer.starts_with("interim: "), "{answer}");
    eventually_async(WAIT_BOUND, "the child at its gate", || {
        arrived(&gates, "child")
    })
    .await;
    assert!(completions(&agent, &session).is_empty());
    open(&gates, "child");
    eventually_async(WAIT_BOUND, "the completion stored", || {
        completions(&agent, &session).len() == 1
    })
    .await;
    let answer = agent
        .run_turn(&session, "later", CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(answer, "history has 1 completions");
}

/// Runs a background batch of three tasks (two in group `g`), waits for all of it, and
/// returns the completions stored in the parent's session.
async fn batch_completions(independent: bool) -> Vec<String> {
    let work = tempfile::tempdir().expect("temp dir");
    let model = ScriptedModel::new(|r| match first_user(r) {
        "parent" if r.tool_answers().is_empty() => calls(&[(
            "delegate_task",
            json!({"background": true, "tasks": [
                {"task": "a", "group": "g"},
                {"task": "b", "group": "g"},
                {"task": "c"},
            ]}),
        )]),
        "parent" => text("noted"),
        child => text(&format!("answer to {child}")),
    });
    let children = ChildSettings {
        independent_completions: independent,
        ..ChildSettings::default()
    };
    let agent = new_agent(&model, &work.path().join("state"), children);
    let session = agent.new_session().expect("session");
    let answer = agent
        .run_turn_to_the_end(&session, "parent", CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(answer, "noted");
    // Every completion reached the model before its last answer.
    let last = model.request(model.count() - 1);
    let seen = last
        .messages
        .iter()
        .filter(|m| m.content.as_deref().is_some_and(|c| c.starts_with(MARK)))
        .count();
    let stored = completions(&agent, &session);
    assert_eq!(seen, stored.len());
    stored
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_batch_completes_once_by_default_and_once_per_group_when_independent() {
    let once = batch_completions(false).await;
    assert_eq!(once.len(), 1, "{once:?}");
    let answers: Vec<_> = results(&once[0])
        .iter()
        .map(|r| r["answer"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(answers, ["answer to a", "answer to b", "answer to c"]);
    assert!(once[0].contains("/u1, 3 tasks]"), "{}", once[0]);

    let mut units = batch_completions(true).await;
    assert_eq!(units.len(), 2, "{units:?}");
    // The two units may finish in either order.
    units.sort_by_key(|c| results(c).len());
    let tasks = |c: &str| -> Vec<String> {
        results(c)
            .iter()
            .map(|r| r["task"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    assert_eq!(tasks(&units[0]), ["c"]);
    assert_eq!(tasks(&units[1]), ["a", "b"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_is_counted_by_calls_not_tasks_and_a_queued_call_waits_for_a_slot() {
    let work = tempfile::tempdir().expect("temp dir");
    let gates = work.path().join("gates");
    std::fs::create_dir_all(&gates).expect("dir");
    let g = gates.clone();
    let model = ScriptedModel::new(move |r| match first_user(r) {
        // Three calls in one response, each a batch of two.
        "parent" if r.tool_answers().is_empty() => calls(&["a", "b", "c"].map(|call| {
            (
                "delegate_task",
                json!({"background": true, "tasks": [
                    {"task": format!("{call}1")}, {"task": format!("{call}2")},
                ]}),
            )
        })),
        "parent" => text("all started"),
        child => match r.tool_answers().last() {
            None => gate(&g, child),
            Some(_) => text(&format!("{child} done")),
        },
    });
    // Two calls at a time, two tasks of a call at a time; each batch one unit per task.
    let children = ChildSettings {
        max_concurrent: 2,
        independent_completions: true,
        ..ChildSettings::default()
    };
    let agent = new_agent(&model, &work.path().join("state"), children);
    let session = agent.new_session().expect("session");
    let turn = tokio::spawn({
        let (agent, session) = (agent.clone(), session.clone());
        async move {
            agent
                .run_turn_to_the_end(&session, "parent", CancellationToken::new())
                .await
        }
    });
    let running =
        |call: &str| arrived(&gates, &format!("{call}1")) && arrived(&gates, &format!("{call}2"));
    let started =
        |call: &str| arrived(&gates, &format!("{call}1")) || arrived(&gates, &format!("{call}2"));
    // Four children at once under a cap of 2: two calls' slots, two tasks each.
    let (first, second) = eventually_async(WAIT_BOUND, "two calls' four children", || {
        let both: Vec<&str> = ["a", "b", "c"].into_iter().filter(|c| running(c)).collect();
        (both.len() == 2).then(|| (both[0], both[1]))
    })
    .await;
    // The third call waits for a slot (none of its children started).
    let third = ["a", "b", "c"]
        .into_iter()
        .find(|c| *c != first && *c != second)
        .expect("a third call");
    assert!(!started(third));
    let records = agent
        .sessions()
        .delegations(Some(&session))
        .expect("records");
    assert_eq!(records.len(), 3);
    let children: usize = records.iter().map(|r| r.children.len()).sum();
    assert_eq!(children, 4, "{records:?}");
    // One unit of a call finishing does not free its call's slot...
    open(&gates, &format!("{first}1"));
    eventually_async(WAIT_BOUND, "its completion", || {
        completions(&agent, &session).len() + queued(&model) >= 1
    })
    .await;
    assert!(!started(third));
    // ...its last unit does.
    open(&gates, &format!("{first}2"));
    eventually_async(WAIT_BOUND, "the third call running", || running(third)).await;
    for gate in [
        format!("{second}1"),
        format!("{second}2"),
        format!("{third}1"),
        format!("{third}2"),
    ] {
        open(&gates, &gate);
    }
    let answer = tokio::time::timeout(WAIT_BOUND, turn)
        .await
        .expect("the turn ended")
        .expect("joined")
        .expect("turn");
    assert_eq!(answer, "all started");
    assert_eq!(completions(&agent, &session).len(), 6);
}

/// How many completions the parent's model has read (a completion queued for a running
/// turn is stored when the turn takes it).
fn queued(model: &ScriptedModel) -> usize {
    (0..model.count())
        .map(|n| model.request(n))
        .filter(|r| first_user(r) == "parent")
        .map(|r| {
            r.messages
                .iter()
                .filter(|m| m.content.as_deref().is_some_and(|c| c.starts_with(MARK)))
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_orchestrator_role_is_refused_unless_enabled_and_its_depth_is_bounded() {
    let respond = |r: &ModelRequest| -> Reply {
        match (first_user(r), r.tool_answers().last()) {
            ("parent", None) => calls(&[(
                "delegate_task",
                json!({"task": "plan", "role": "orchestrator"}),
            )]),
            (_, Some(answer)) => text(&answer.content),
            ("plan", None) => calls(&[(
                "delegate_task",
                json!({"tasks": [{"task": "leaf job"}, {"task": "deeper", "role": "orchestrator"}]}),
            )]),
            (_, None) => text("leaf done"),
        }
    };
    // Off by default.
    let work = tempfile::tempdir().expect("temp dir");
    let model = ScriptedModel::new(respond);
    let agent = new_agent(&model, &work.path().join("state"), ChildSettings::default());
    let session = agent.new_session().expect("session");
    let answer = agent
        .run_turn(&session, "parent", CancellationToken::new())
        .await
        .expect("turn");
    assert!(
        answer.contains("the orchestrator role is turned off on this host"),
        "{answer}"
    );
    assert_eq!(model.count(), 2, "no child ran");

    // Enabled: the orchestrator keeps delegate_task, its children are leaves, and an
    // orchestrator at depth 2 (max_spawn_depth = 2) is refused.
    let work = tempfile::tempdir().expect("temp dir");
    let model = ScriptedModel::new(respond);
    let children = ChildSettings {
        orchestrator_enabled: true,
        ..ChildSettings::default()
    };
    let agent = new_agent(&model, &work.path().join("state"), children);
    let session = agent.new_session().expect("session");
    let answer = agent
        .run_turn(&session, "parent", CancellationToken::new())
        .await
        .expect("turn");
    assert!(answer.contains("leaf done"), "{answer}");
    assert!(
        answer.contains("max_spawn_depth = 2 lets it start no children"),
        "{answer}"
    );
    let requests: Vec<_> = (0..model.count()).map(|n| model.request(n)).collect();
    let by = |who: &str| {
        requests
            .iter()
            .find(|r| first_user(r) == who)
            .unwrap_or_else(|| panic!("no request of {who}"))
    };
    assert!(
        by("plan").offers("delegate_task"),
        "the orchestrator keeps it"
    );
    assert!(!by("plan").offers("memory"));
    assert!(
        !by("leaf job").offers("delegate_task"),
        "a leaf goes without"
    );
    assert!(requests.iter().all(|r| first_user(r) != "deeper"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_parent_turn_or_shutting_down_cancels_background_children() {
    let work = tempfile::tempdir().expect("temp dir");
    let (_m, child_mark) = marker();
    let (_p, parent_mark) = marker();
    let started = work.path().join("started");
    let parent_started = work.path().join("parent-started");
    let (cm, pm, st, pst) = (
        child_mark.clone(),
        parent_mark.clone(),
        started.clone(),
        parent_started.clone(),
    );
    let model = ScriptedModel::new(move |r| match (first_user(r), r.tool_answers().len()) {
        ("parent" | "leave", 0) => {
            calls(&[("delegate_task", json!({"background": true, "task": "hold"}))])
        }
        // The parent waits in a tool of its own until it is stopped.
        ("parent", 1) => calls(&[("wait_cancel", json!({"marker": pm, "started": pst}))]),
        ("parent" | "leave", _) => text("left it running"),
        (_, 0) => calls(&[("wait_cancel", json!({"marker": cm, "started": st}))]),
        _ => text("stopped"),
    });
    let agent = new_agent(&model, &work.path().join("state"), ChildSettings::default());
    let session = agent.new_session().expect("session");
    let cancel = CancellationToken::new();
    let turn = tokio::spawn({
        let (agent, session, cancel) = (agent.clone(), session.clone(), cancel.clone());
        async move { agent.run_turn(&session, "parent", cancel).await }
    });
    eventually_async(WAIT_BOUND, "both waiting", || {
        started.exists() && parent_started.exists()
    })
    .await;
    cancel.cancel();
    let out = tokio::time::timeout(WAIT_BOUND, turn)
        .await
        .expect("the turn ended")
        .expect("joined");
    assert!(matches!(out, Err(AgentError::Cancelled)), "{out:?}");
    let seen = eventually_async(WAIT_BOUND, "the child's cancel", || {
        std::fs::read_to_string(&child_mark).ok()
    })
    .await;
    assert!(seen.contains("is_cancelled=true"), "{seen}");
    eventually_async(WAIT_BOUND, "the delegation recorded cancelled", || {
        agent
            .sessions()
            .delegations(Some(&session))
            .expect("records")[0]
            .state
            == "cancelled"
    })
    .await;

    // A turn that ends leaves its children running; shutting the agent down stops them.
    std::fs::remove_file(&started).expect("reset");
    std::fs::remove_file(&child_mark).expect("reset");
    let session = agent.new_session().expect("session");
    let answer = agent
        .run_turn(&session, "leave", CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(answer, "left it running");
    eventually_async(WAIT_BOUND, "the child waiting", || started.exists()).await;
    assert_eq!(agent.running_delegations().len(), 1);
    assert!(!child_mark.exists(), "the child still runs");
    agent.shutdown();
    eventually_async(WAIT_BOUND, "the child's cancel", || child_mark.exists()).await;
    assert!(agent.running_delegations().is_empty());
    let record = &agent
        .sessions()
        .delegations(Some(&session))
        .expect("records")[0];
    assert_eq!(record.state, "cancelled");
}

/// A model server for the binary: the parent delegates `task` in the background, says
/// "interim", and after a completion answers with it; children answer `quick result`, or
/// wait at a gate in `gates` that never opens when their task is `held`.
async fn server(gates: PathBuf) -> ModelServer {
    ModelServer::start(Arc::new(move |body: &Value| {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let users: Vec<&str> = messages
            .iter()
            .filter(|m| m["role"] == "user")
            .filter_map(|m| m["content"].as_str())
            .collect();
        let tools = messages.iter().filter(|m| m["role"] == "tool").count();
        let first = users.first().copied().unwrap_or("");
        let last = users.last().copied().unwrap_or("");
        match first {
            "quick" | "held" if last.starts_with(MARK) => text(&format!("final: {last}")),
            "quick" | "held" if tools == 0 => calls(&[(
                "delegate_task",
                json!({"background": true, "task": format!("{first} job")}),
            )]),
            "quick" | "held" => text("interim"),
            "held job" if tools == 0 => gate(&gates, "never"),
            _ => text("quick result"),
        }
    }))
    .await
}

/// `toolhost --config CONFIG ARGS` (with `--plugins DIR` for `run`) against `url`, in
/// this test's state.
fn toolhost(config: &Path, plugins: &Path, url: &str, args: &[&str]) -> std::process::Command {
    let mut cmd = crate::support::toolhost_command();
    cmd.arg("--config").arg(config).args(args);
    if args.first() == Some(&"run") {
        cmd.arg("--plugins").arg(plugins);
    }
    cmd.env("TOOLHOST_MODEL_BASE_URL", url)
        .env("TOOLHOST_MODEL", "scripted")
        .env_remove("TOOLHOST_API_KEY")
        .env_remove("OPENAI_API_KEY");
    cmd
}

/// Runs `cmd` to its end (bounded) on a blocking thread and returns (stdout, stderr).
async fn finish(mut cmd: std::process::Command) -> (String, String) {
    let out = tokio::task::spawn_blocking(move || {
        let child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("toolhost");
        let id = child.id();
        // A command that hangs (a run waiting for a child that never ends) fails the
        // test instead of holding it forever.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            if rx.recv_timeout(WAIT_BOUND).is_err() {
                let _ = std::process::Command::new("kill")
                    .arg(id.to_string())
                    .status();
            }
        });
        let out = child.wait_with_output().expect("output");
        let _ = tx.send(());
        out
    })
    .await
    .expect("joined");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    (stdout, stderr)
}

/// `run` waits for the completion (in process, or with `--isolate` through the worker's
/// child-turn proxy), and `sessions show` lists the delegation done.
async fn run_waits(isolate: bool) {
    let work = tempfile::tempdir().expect("temp dir");
    let server = server(work.path().to_path_buf()).await;
    let plugins = PluginDir::with(&["toolhost_delegate_task", "fixture_basic"]);
    let config = work.path().join("config.toml");
    std::fs::write(
        &config,
        format!("profiles_dir = {:?}\n", work.path().join("profiles")),
    )
    .expect("config");
    let mut args = vec!["run", "quick", "--json"];
    if isolate {
        args.push("--isolate");
    }
    let (stdout, stderr) = finish(toolhost(&config, &plugins.path(), &server.url, &args)).await;
    let out: Value = serde_json::from_str(stdout.trim()).expect("JSON");
    let answer = out["answer"].as_str().expect("answer");
    assert!(
        answer.starts_with(&format!("final: {MARK}d-")),
        "{out}\n{stderr}"
    );
    assert!(answer.contains("quick result"), "{answer}");
    assert_eq!(out["delegations"], json!([]), "nothing left running");
    let session = out["session"].as_str().expect("session");
    let (shown, _) = finish(toolhost(
        &config,
        &plugins.path(),
        &server.url,
        &["sessions", "show", session],
    ))
    .await;
    assert!(shown.contains("background delegations:"), "{shown}");
    assert!(shown.contains(" done "), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_waits_for_its_background_delegations() {
    run_waits(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_waits_for_its_background_delegations_with_the_plugin_in_a_worker() {
    run_waits(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_detach_prints_what_still_runs_and_sessions_show_delegations() {
    let work = tempfile::tempdir().expect("temp dir");
    let server = server(work.path().to_path_buf()).await;
    let plugins = PluginDir::with(&["toolhost_delegate_task", "fixture_basic"]);
    let config = work.path().join("config.toml");
    std::fs::write(
        &config,
        format!("profiles_dir = {:?}\n", work.path().join("profiles")),
    )
    .expect("config");
    let run = |args: &[&str]| toolhost(&config, &plugins.path(), &server.url, args);

    let (stdout, _) = finish(run(&["run", "held", "--detach", "--json"])).await;
    let out: Value = serde_json::from_str(stdout.trim()).expect("JSON");
    assert_eq!(out["answer"], "interim");
    let ids = out["delegations"].as_array().expect("ids");
    assert_eq!(ids.len(), 1, "{out}");
    let id = ids[0].as_str().expect("id");
    let (_, stderr) = finish(run(&["run", "held", "--detach"])).await;
    assert!(
        stderr.contains("background delegations still running: d-")
            && stderr.contains("cancelled now that this process exits"),
        "{stderr}"
    );

    let session = out["session"].as_str().expect("session");
    let (shown, _) = finish(run(&["sessions", "show", session])).await;
    assert!(shown.contains(id) && shown.contains("cancelled"), "{shown}");

    // A delegation left running by a process that is gone shows as lost.
    let store = SessionStore::open(&crate::support::profile_sessions("default")).expect("store");
    store
        .record_delegation(&DelegationRecord {
            id: "d-lost".to_owned(),
            parent: session.to_owned(),
            children: Vec::new(),
            units: vec![UnitRecord {
                id: "d-lost/u1".to_owned(),
                tasks: vec![0],
                state: toolhost::agent::sessions::RunState::Running,
            }],
            state: toolhost::agent::sessions::RunState::Running,
            pid: u32::MAX,
            started: "2026-01-01T00:00:00Z".to_owned(),
            ended: None,
        })
        .expect("record");
    let (listed, _) = finish(run(&["sessions", "list"])).await;
    assert!(
        listed.contains("background delegations running:"),
        "{listed}"
    );
    assert!(listed.contains("d-lost"), "{listed}");
    assert!(listed.contains("lost: its process exited"), "{listed}");
    assert!(
        !listed.contains(id),
        "a cancelled one is not running: {listed}"
    );
    let (json_list, _) = finish(run(&["sessions", "list", "--json"])).await;
    let json_list: Value = serde_json::from_str(&json_list).expect("JSON");
    let mine = json_list
        .as_array()
        .expect("sessions")
        .iter()
        .find(|s| s["id"] == session)
        .expect("the session");
    assert_eq!(mine["delegations"][0]["state"], "lost: its process exited");
}

#[test]
fn old_and_new_names_of_the_children_keys_work_and_both_at_once_is_an_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let write = |text: &str| {
        let path = dir.path().join("config.toml");
        let profiles = format!("profiles_dir = {:?}\n", dir.path().join("profiles"));
        std::fs::write(&path, profiles + text).expect("config");
        toolhost::LoadedConfig::load(Some(&path))
    };
    let children = |c: &toolhost::LoadedConfig| {
        c.agent(&toolhost::Profile::load(c, "default").expect("profile"))
            .children
    };
    let old = write("[agent.children]\nmax_depth = 3\nmax_concurrent = 5\ntimeout_secs = 7\n")
        .expect("old names");
    let new = write(
        "[agent.children]\nmax_spawn_depth = 3\nmax_concurrent_children = 5\n\
         child_timeout_seconds = 7\nindependent_completions = true\n\
         orchestrator_enabled = true\nsubagent_auto_approve = true\nmax_iterations = 4\n",
    )
    .expect("new names");
    let (o, n) = (children(&old), children(&new));
    assert_eq!(
        (o.max_depth, o.max_concurrent, o.timeout.as_secs()),
        (3, 5, 7)
    );
    assert_eq!(
        (n.max_depth, n.max_concurrent, n.timeout.as_secs()),
        (3, 5, 7)
    );
    assert!(n.independent_completions && n.orchestrator_enabled && n.auto_approve);
    assert_eq!(n.max_iterations, 4);
    assert!(!o.independent_completions && !o.orchestrator_enabled && !o.auto_approve);
    let e = write("[agent.children]\nmax_concurrent = 2\nmax_concurrent_children = 2\n")
        .map(|_| ())
        .expect_err("both spellings");
    let e = e.to_string();
    assert!(
        e.contains("`max_concurrent_children`") && e.contains("`max_concurrent`"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_says_when_a_background_delegation_finishes() {
    use std::io::{BufRead as _, Write as _};
    let work = tempfile::tempdir().expect("temp dir");
    let server = server(work.path().to_path_buf()).await;
    let plugins = PluginDir::with(&["toolhost_delegate_task", "fixture_basic"]);
    let config = work.path().join("config.toml");
    std::fs::write(
        &config,
        format!("profiles_dir = {:?}\n", work.path().join("profiles")),
    )
    .expect("config");
    let mut cmd = toolhost(&config, &plugins.path(), &server.url, &["chat"]);
    cmd.arg("--plugins").arg(plugins.path());
    let lines = tokio::task::spawn_blocking(move || {
        let mut chat = cmd
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("chat");
        let mut stdin = chat.stdin.take().expect("stdin");
        stdin.write_all(b"quick\n").expect("write");
        let stderr = chat.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                let _ = tx.send(line);
            }
        });
        // The chat stays open (stdin too) until it says the delegation finished.
        let mut seen = Vec::new();
        let deadline = std::time::Instant::now() + WAIT_BOUND;
        while !seen
            .iter()
            .any(|l: &String| l.starts_with("background delegation d-"))
        {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => seen.push(line),
                Err(_) => break,
            }
        }
        stdin.write_all(b"\n").expect("end the chat");
        drop(stdin);
        let status = crate::support::wait_exit(&mut chat, "chat");
        assert!(status.success(), "{seen:?}");
        seen
    })
    .await
    .expect("joined");
    let line = lines
        .iter()
        .find(|l| {
            l.trim_start_matches("> ")
                .starts_with("background delegation d-")
        })
        .unwrap_or_else(|| panic!("no line about the delegation: {lines:?}"));
    assert!(line.contains("finished (1 task, unit d-"), "{line}");
}
