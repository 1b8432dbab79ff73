//! `session_summary` over a scripted session: the real plugin asks the agent
//! (`sessions.summary`), which answers from the session store: the requests numbered,
//! each with its answer, tools and errors, the current one in progress; and outside an
//! agent's turn the tool says there is no conversation.

use std::sync::Arc;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::model::{ScriptedModel, calls, text};
use crate::support::{PluginDir, load};
use crate::teardown::agent_over;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_summary_numbers_the_requests_of_a_scripted_session() {
    let work = tempfile::tempdir().expect("temp dir");
    let model = ScriptedModel::scripted(vec![
        text("Noted."),
        calls(&[("echo", json!({"text": "hi"})), ("nope", json!({}))]),
        text("Echoed hi; nope does not exist."),
        calls(&[("session_summary", json!({}))]),
        text("You asked three things."),
        calls(&[("session_summary", json!({"last": 1}))]),
        text("Just this one."),
    ]);
    let plugins = PluginDir::with(&["toolhost_session_search", "fixture_basic"]);
    let agent = agent_over(
        &plugins,
        &model,
        &work.path().join("state"),
        toolhost::WorkspaceSettings::default(),
    );
    let session = agent.new_session().expect("session");
    for prompt in [
        "The launch code is PURPLE-42.",
        "echo hi,\n  then call nope",
        "what did I ask?",
        "and the last one?",
    ] {
        agent
            .run_turn(&session, prompt, CancellationToken::new())
            .await
            .expect("turn");
    }
    let summary = &model
        .request(4)
        .tool_answers()
        .last()
        .expect("an answer")
        .content
        .clone();
    let lines: Vec<&str> = summary.lines().collect();
    assert_eq!(
        lines[..4],
        [
            "3 requests in this conversation:",
            "1. \"The launch code is PURPLE-42.\" -> answered: \"Noted.\"",
            "2. \"echo hi, then call nope\" -> answered: \"Echoed hi; nope does not exist.\"",
            "   tools: echo x1, nope x1 (1 failed)",
        ],
        "{summary}"
    );
    assert!(
        lines[4].starts_with("   error: nope: unknown tool 'nope'; available tools: "),
        "{summary}"
    );
    assert_eq!(
        lines[5..],
        [
            "3. \"what did I ask?\" -> in progress (this request)",
            "   tools: session_summary x1",
        ],
        "{summary}"
    );
    let last = &model
        .request(6)
        .tool_answers()
        .last()
        .expect("an answer")
        .content
        .clone();
    assert_eq!(
        last,
        "4 requests in this conversation; the last 1:\n\
         4. \"and the last one?\" -> in progress (this request)\n\
         \x20  tools: session_summary x1\n"
    );
}

#[test]
fn outside_an_agents_turn_session_summary_says_there_is_no_conversation() {
    let plugins = PluginDir::with(&["toolhost_session_search"]);
    let (_, registry, _) = load(&plugins);
    let door = toolhost::CallDoor::new(
        &toolhost::CallSettings::default(),
        toolhost::fixed_profile("p", Arc::new(registry), None),
        Arc::new(toolhost::AutoApprove),
    );
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let result = runtime.block_on(async {
        let request = door.request(toolhost::Caller::this_process(toolhost::Frontend::Cli));
        door.call(
            &request,
            toolhost::ToolCall::new("1", "session_summary", json!({})),
        )
        .await
    });
    assert!(result.is_error, "{result:?}");
    assert!(
        result
            .output
            .contains("there is no conversation to summarise here"),
        "{}",
        result.output
    );
}
