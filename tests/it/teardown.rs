//! A child turn's processes are ended at its teardown: a tool that leaves a double-forked
//! daemon running (tagged with the call's session, as plugin-api documents) sees it ended
//! when the child turn ends, checked by pid, while a process of the same name started
//! outside the turn survives; and `run_command`'s own end-of-call cleanup finds a daemon
//! that left the command's tree by its tag. In process only (a worker in its own PID
//! namespace reports pids of that namespace).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolhost::agent::model::ModelProvider;
use toolhost::agent::{Agent, AgentParts};
use toolhost::{AgentSettings, AutoApprove, CallDoor, CallSettings, fixed_profile};

use crate::support::model::{ScriptedModel, calls, text};
use crate::support::{PluginDir, eventually_async, load};

/// An agent over `plugins` (all loaded in process) with `workspace`.
pub(crate) fn agent_over(
    plugins: &PluginDir,
    model: &Arc<ScriptedModel>,
    state: &Path,
    workspace: toolhost::WorkspaceSettings,
) -> Agent {
    let (report, registry, _) = load(plugins);
    // (The basic fixture's bad_metadata tool is left out, by design.)
    let failed =
        |e: &&toolhost::PluginLoadError| !matches!(e.kind, toolhost::LoadErrorKind::Tool { .. });
    assert!(
        !report.errors.iter().any(|e| failed(&e)),
        "{:?}",
        report.errors
    );
    let tools = fixed_profile("p", Arc::new(registry), None);
    Agent::new(AgentParts {
        profile: "p".to_owned(),
        dirs: toolhost::ProfileDirs::of_state(state),
        workspace,
        door: CallDoor::new(&CallSettings::default(), tools, Arc::new(AutoApprove)),
        model: Arc::clone(model) as Arc<dyn ModelProvider>,
        config: AgentSettings::default(),
        caller: None,
        observer: None,
    })
    .expect("agent")
}

/// Whether `pid` is gone (no such process, or a zombie).
fn gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'))
    })
}

/// The first number in `text` (a pid a tool printed).
fn pid_in(text: &str) -> u32 {
    text.split(|c: char| !c.is_ascii_digit())
        .find(|w| !w.is_empty())
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {text:?}"))
}

/// A model whose parent delegates one task and whose child calls `tool` with `args`
/// once, then answers "child done"; the parent answers with what the helper said.
fn delegating_model(tool: &'static str, args: serde_json::Value) -> Arc<ScriptedModel> {
    ScriptedModel::new(move |request| {
        let user = request.last_user();
        let answers = request.tool_answers();
        match (user == "parent", answers.last()) {
            (true, None) => calls(&[("delegate_task", json!({"task": "start it"}))]),
            (true, Some(answer)) => text(&format!("parent got: {}", answer.content)),
            (false, None) => calls(&[(tool, args.clone())]),
            (false, Some(_)) => text("child done"),
        }
    })
}

/// A `sleep 300` started outside any turn, tagged with another session: must survive.
fn bystander() -> std::process::Child {
    std::process::Command::new("sleep")
        .arg("300")
        .env("TOOLHOST_SESSION", "not-the-child")
        .spawn()
        .expect("spawn sleep")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childs_spawned_process_is_ended_at_teardown_checked_by_pid() {
    let work = tempfile::tempdir().expect("temp dir");
    let model = delegating_model("start_daemon", json!({}));
    let plugins = PluginDir::with(&["toolhost_delegate_task", "fixture_leftover"]);
    let agent = agent_over(
        &plugins,
        &model,
        &work.path().join("state"),
        toolhost::WorkspaceSettings::default(),
    );
    let mut outside = bystander();
    let session = agent.new_session().expect("session");
    let answer = agent
        .run_turn(&session, "parent", CancellationToken::new())
        .await
        .expect("turn");
    // The child's tool answered the daemon's pid (request 2 is the child after its call).
    let daemon = pid_in(&model.request(2).tool_answers()[0].content);
    eventually_async(Duration::from_secs(10), "the child's daemon ending", || {
        gone(daemon)
    })
    .await;
    // The parent was told, in the helper's answer.
    assert!(
        answer.contains("child done")
            && answer.contains("ended 1 process the helper left running")
            // (Named `setsid` or `sleep`: it may not have exec'd yet when it was ended.)
            && answer.contains(&format!("pid {daemon} s")),
        "{answer}"
    );
    assert!(!gone(outside.id()), "a process outside the turn was ended");
    outside.kill().expect("kill");
    outside.wait().expect("reap");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_command_in_a_child_turn_leaves_no_double_forked_daemon() {
    let work = tempfile::tempdir().expect("temp dir");
    let project = work.path().join("project");
    std::fs::create_dir_all(&project).expect("project");
    let model = delegating_model(
        "run_command",
        json!({"command": "(setsid sleep 300 & echo $!)"}),
    );
    let plugins = PluginDir::with(&["toolhost_delegate_task", "toolhost_workspace"]);
    let workspace = toolhost::WorkspaceSettings {
        roots: vec![std::fs::canonicalize(&project).expect("real path")],
        shell: true,
        ..toolhost::WorkspaceSettings::default()
    };
    let agent = agent_over(&plugins, &model, &work.path().join("state"), workspace);
    let mut outside = bystander();
    let session = agent.new_session().expect("session");
    agent
        .run_turn(&session, "parent", CancellationToken::new())
        .await
        .expect("turn");
    let result = &model.request(2).tool_answers()[0].content;
    assert!(result.starts_with("exit code 0"), "{result}");
    let daemon = pid_in(
        result
            .lines()
            .find(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_digit()))
            .unwrap_or_else(|| panic!("no pid line in {result}")),
    );
    eventually_async(
        Duration::from_secs(10),
        "the command's daemon ending",
        || gone(daemon),
    )
    .await;
    assert!(!gone(outside.id()), "a process outside the turn was ended");
    outside.kill().expect("kill");
    outside.wait().expect("reap");
}

/// `process_manage`: a child turn lists the daemons its tool left running and hands one to
/// its parent; at the child's teardown that one keeps running (the parent is told, on the
/// child's answer) and the other is ended; one it kills ends at once. Only child turns are
/// offered the tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_hands_a_daemon_to_its_parent_and_the_rest_end() {
    let work = tempfile::tempdir().expect("temp dir");
    let model = ScriptedModel::new(|request| {
        let answers = request.tool_answers();
        if request.last_user() == "parent" {
            return match answers.len() {
                0 => calls(&[("delegate_task", json!({"task": "start two"}))]),
                _ => text(&format!("parent got: {}", answers[0].content)),
            };
        }
        match answers.len() {
            0 => calls(&[
                ("start_daemon", json!({})),
                ("start_daemon", json!({})),
                ("start_daemon", json!({})),
            ]),
            3 => calls(&[(
                "process_manage",
                json!({"action": "handoff", "pid": pid_in(&answers[0].content)}),
            )]),
            4 => calls(&[("process_manage", json!({"action": "list"}))]),
            5 => calls(&[(
                "process_manage",
                json!({"action": "kill", "pid": pid_in(&answers[2].content)}),
            )]),
            _ => text("child done"),
        }
    });
    let plugins = PluginDir::with(&["toolhost_delegate_task", "fixture_leftover"]);
    let agent = agent_over(
        &plugins,
        &model,
        &work.path().join("state"),
        toolhost::WorkspaceSettings::default(),
    );
    let session = agent.new_session().expect("session");
    let answer = agent
        .run_turn(&session, "parent", CancellationToken::new())
        .await
        .expect("turn");
    // The child's two daemons, in the order its calls answered.
    let child = (0..model.count())
        .map(|n| model.request(n))
        .find(|r| r.last_user() != "parent" && r.tool_answers().len() >= 6)
        .expect("the child's last request");
    let answers = child.tool_answers();
    let [kept, ended, killed] = [0, 1, 2].map(|i| pid_in(&answers[i].content));
    assert!(
        answers[3]
            .content
            .contains("is handed to the conversation you work for"),
        "{answers:?}"
    );
    for pid in [kept, ended, killed] {
        assert!(
            answers[4].content.contains(&format!("\"pid\":{pid}")),
            "list shows {pid}: {}",
            answers[4].content
        );
    }
    assert!(
        answers[5]
            .content
            .contains(&format!("ended 1 process you asked to end: pid {killed}")),
        "{}",
        answers[5].content
    );
    assert!(gone(killed), "kill ended it");
    eventually_async(
        Duration::from_secs(10),
        "the daemon not handed off ending",
        || gone(ended),
    )
    .await;
    assert!(!gone(kept), "the handed daemon was ended: {answer}");
    assert!(
        answer.contains("ended 1 process the helper left running")
            && answer.contains(&format!("handed to you and still running: pid {kept}")),
        "{answer}"
    );
    // Offered to the child, not to the top-level turn (whose tools' processes outlive it).
    assert!(child.offers("process_manage") && child.offers("todo"));
    assert!(!model.request(0).offers("process_manage") && model.request(0).offers("todo"));
    // SAFETY: kill takes integers; the pid is the test's own daemon.
    unsafe { libc::kill(i32::try_from(kept).expect("pid"), libc::SIGKILL) };
}
