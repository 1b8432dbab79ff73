//! The agent's own `process_manage` tool, offered to child turns: the processes a turn's
//! tools left running in the background (tagged with its session, as plugin-api documents
//! for tools that start processes), listed, ended, or handed to the parent so they
//! outlive the child's teardown. Answered by the turn itself, like `todo`. (A top-level
//! turn ends none of its tools' processes, so it is not offered there: every request
//! would pay for its spec.)

use serde::Deserialize;
use serde_json::{Value, json};

use super::child_processes::Handoffs;
use crate::sys::tagged::{self, SESSION_VARIABLE};
use toolhost_calls::tool::{Requirements, Risk, ToolSpec};

/// The tool's name, as the model calls it.
pub(crate) const NAME: &str = "process_manage";
/// How long a process has to exit after SIGTERM before it is killed.
const GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// What a call asks.
#[derive(Debug, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
enum Action {
    List,
    Kill { pid: i32 },
    Handoff { pid: i32 },
}

/// Why a call was refused; the text goes to the model.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProcessError {
    /// Not the tool's arguments.
    #[error(
        "invalid arguments: {0}; send {{\"action\": \"list\"}}, {{\"action\": \"kill\", \
         \"pid\": N}} or {{\"action\": \"handoff\", \"pid\": N}}"
    )]
    Malformed(#[from] serde_json::Error),
    /// A pid that is not one of this turn's background processes.
    #[error(
        "pid {0} is not a process this conversation's tools left running; \
         {{\"action\": \"list\"}} shows them"
    )]
    NotOurs(i32),
    /// A hand-off asked outside a child turn.
    #[error(
        "only a helper (a child turn) hands processes to its parent; this conversation's \
         processes already outlive it"
    )]
    NoParent,
}

/// The tool as the model is offered it.
pub(crate) fn spec() -> ToolSpec {
    ToolSpec {
        name: NAME.to_owned(),
        description: "The processes your tools left running in the background: list \
                      them, kill one, or handoff one to the conversation you work for so it \
                      keeps running when you finish (the rest are ended then)."
            .to_owned(),
        schema: json!({
            "type": "object",
            "properties": {
                "action": {"enum": ["list", "kill", "handoff"]},
                "pid": {"type": "integer"}
            },
            "required": ["action"]
        }),
        risk: Risk::Write,
        interactive: false,
        requirements: Requirements::default(),
        output_schema: None,
    }
}

/// Runs a call for the turn of `session` (whose parent session is `parent`, for a child
/// turn). Blocking: ending a process waits for it.
pub(crate) fn run(
    session: &str,
    parent: Option<&str>,
    handoffs: &Handoffs,
    arguments: &Value,
) -> Result<String, ProcessError> {
    let action: Action = serde_json::from_value(arguments.clone())?;
    let own = tagged::list_tagged(SESSION_VARIABLE, session);
    let handed_here = handoffs.to(session);
    let ours = |pid: i32| own.iter().any(|p| p.pid == pid);
    match action {
        Action::List => {
            let mut listed: Vec<Value> = own
                .iter()
                .map(|p| json!({"pid": p.pid, "name": p.name, "command": p.command}))
                .collect();
            for (tag, pid) in &handed_here {
                if let Some(p) = tagged::list_tagged(SESSION_VARIABLE, tag)
                    .into_iter()
                    .find(|p| p.pid == *pid)
                {
                    listed.push(json!({
                        "pid": p.pid, "name": p.name, "command": p.command,
                        "handed_by_helper": tag
                    }));
                }
            }
            Ok(json!({"processes": listed}).to_string())
        }
        Action::Kill { pid } => {
            let tag = if ours(pid) {
                session.to_owned()
            } else {
                handed_here
                    .iter()
                    .find(|(_, p)| *p == pid)
                    .map(|(tag, _)| tag.clone())
                    .ok_or(ProcessError::NotOurs(pid))?
            };
            let ended = tagged::end_tagged_except(SESSION_VARIABLE, &tag, GRACE, &|p| p != pid);
            Ok(if ended.is_empty() {
                format!("pid {pid} had already exited")
            } else {
                tagged::describe(&ended).replace("the helper left running", "you asked to end")
            })
        }
        Action::Handoff { pid } => {
            let parent = parent.ok_or(ProcessError::NoParent)?;
            if !ours(pid) {
                return Err(ProcessError::NotOurs(pid));
            }
            handoffs.hand(session, pid, parent);
            Ok(format!(
                "pid {pid} is handed to the conversation you work for: it keeps running when \
                 you finish, and your answer will name it"
            ))
        }
    }
}
