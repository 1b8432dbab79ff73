//! The `delegate_task` tool: hands a task, or a batch of up to 5 tasks run in parallel, to
//! child turns of the agent running the call (through the host's child-turn service; the
//! host applies its depth, concurrency and time limits). In the foreground it returns
//! their answers in the order given; with `background` it asks the host to run them on
//! after the call (`agent.delegate`) and returns the delegation's id at once: the host
//! adds the results to the conversation when they complete. A host without background
//! delegation (older than plugin-api 0.1.4) gets the tasks run in the foreground, and the
//! answer says so.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;

use serde::Deserialize;
use serde_json::json;
use toolhost_plugin_api::{
    ChildRole, ChildTurnRequest, DelegatedTask, DelegationRequest, ServiceError, ToolContext,
    ToolError, export_plugin, tool,
};

/// The most tasks in one batch.
const MAX_TASKS: usize = 5;

/// What a helper may do.
#[derive(Deserialize, schemars::JsonSchema, Clone, Copy, Debug, PartialEq)]
#[serde(rename_all = "lowercase")]
enum Role {
    /// Does the task itself (the default).
    Leaf,
    /// May hand parts of its task to helpers of its own (where the host allows it).
    Orchestrator,
}

impl From<Role> for ChildRole {
    fn from(role: Role) -> Self {
        match role {
            Role::Leaf => ChildRole::Leaf,
            Role::Orchestrator => ChildRole::Orchestrator,
        }
    }
}

/// One task for a child turn.
#[derive(Deserialize, schemars::JsonSchema)]
struct Task {
    /// What to do, stated completely: the child sees nothing of this conversation.
    task: String,
    /// Background the child needs (facts, constraints, what is done already).
    #[serde(default)]
    context: Option<String>,
    /// This task's role, in place of the call's `role`.
    #[serde(default)]
    role: Option<Role>,
    /// In the background: tasks with the same group report together (where the host
    /// reports per group); a task without one reports alone.
    #[serde(default)]
    group: Option<String>,
}

/// Arguments of `delegate_task`: one `task`, or a batch in `tasks`.
#[derive(Deserialize, schemars::JsonSchema)]
struct DelegateArgs {
    /// One task (with optional `context`).
    #[serde(default)]
    task: Option<String>,
    /// Background for `task`.
    #[serde(default)]
    context: Option<String>,
    /// Up to 5 independent tasks, run in parallel.
    #[serde(default)]
    #[schemars(length(max = 5))]
    tasks: Option<Vec<Task>>,
    /// Run in the background: answer at once with a delegation id; the results arrive
    /// later as a message in this conversation. Default false: wait for the answers.
    #[serde(default)]
    background: bool,
    /// The helpers' role: `leaf` (default) does the task itself; `orchestrator` may
    /// delegate parts of it further, where the host allows that.
    #[serde(default)]
    role: Option<Role>,
}

/// Runs futures concurrently (plugins have no runtime) and returns their outputs in order.
async fn join_all<T>(mut futures: Vec<Pin<Box<dyn Future<Output = T> + Send + '_>>>) -> Vec<T> {
    let mut outputs: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// How a call's tasks run: waited for, or in the background.
struct Delegation;

/// The tasks of a call, checked: one `task` or a non-empty batch of at most `MAX_TASKS`,
/// each with its role (its own, else the call's).
fn tasks_of(args: DelegateArgs) -> Result<Vec<Task>, ToolError> {
    let mut tasks = match (args.task, args.tasks) {
        (Some(task), None) => vec![Task {
            task,
            context: args.context,
            role: None,
            group: None,
        }],
        (None, Some(tasks)) if !tasks.is_empty() => tasks,
        _ => {
            return Err(ToolError::invalid_args(
                "give either `task` or a non-empty list `tasks`, not both",
            ));
        }
    };
    if tasks.len() > MAX_TASKS {
        return Err(ToolError::invalid_args(format!(
            "at most {MAX_TASKS} tasks at once; split the batch"
        )));
    }
    for t in &mut tasks {
        t.role = t.role.or(args.role);
    }
    Ok(tasks)
}

impl Delegation {
    /// Runs the tasks as child turns and waits for all of them.
    async fn foreground(
        ctx: &ToolContext<'_>,
        tasks: &[Task],
        note: Option<&str>,
    ) -> Result<String, ToolError> {
        let runs = tasks
            .iter()
            .map(|t| {
                let request = ChildTurnRequest {
                    prompt: t.task.clone(),
                    context: t.context.clone(),
                };
                let role = t.role.map(ChildRole::from);
                Box::pin(async move {
                    match role {
                        Some(role) => ctx.child_turn_as(&request, role).await,
                        None => ctx.child_turn(&request).await,
                    }
                })
                    as Pin<Box<dyn Future<Output = Result<String, ServiceError>> + Send + '_>>
            })
            .collect();
        let answers = join_all(runs).await;
        if tasks.len() == 1 {
            let answer = match answers.into_iter().next() {
                Some(Ok(answer)) => answer,
                Some(Err(e)) => return Err(ToolError::failed(format!("the helper failed: {e}"))),
                None => return Err(ToolError::failed("the helper did not answer")),
            };
            return Ok(match note {
                Some(note) => format!("({note})\n{answer}"),
                None => answer,
            });
        }
        let results: Vec<_> = tasks
            .iter()
            .zip(answers)
            .map(|(t, answer)| match answer {
                Ok(answer) => json!({"task": t.task, "answer": answer}),
                Err(e) => json!({"task": t.task, "error": e.to_string()}),
            })
            .collect();
        Ok(match note {
            Some(note) => json!({ "results": results, "note": note }),
            None => json!({ "results": results }),
        }
        .to_string())
    }

    /// Asks the host to run the tasks in the background; falls back to the foreground on
    /// a host that cannot.
    async fn background(ctx: &ToolContext<'_>, tasks: &[Task]) -> Result<String, ToolError> {
        let request = DelegationRequest {
            tasks: tasks
                .iter()
                .map(|t| DelegatedTask {
                    prompt: t.task.clone(),
                    context: t.context.clone(),
                    role: t.role.map(ChildRole::from),
                    group: t.group.clone(),
                })
                .collect(),
        };
        let answer = match ctx.delegate(&request).await {
            Ok(answer) => answer,
            Err(ServiceError::Unavailable(why)) => {
                let note = format!(
                    "background delegation is not available here ({why}), so the tasks ran \
                     in the foreground and their answers are below"
                );
                return Self::foreground(ctx, tasks, Some(&note)).await;
            }
            Err(ServiceError::Failed(why)) => return Err(ToolError::failed(why)),
        };
        let id = &answer.delegation;
        let units: Vec<_> = answer
            .units
            .iter()
            .map(|u| {
                json!({
                    "unit": u.id,
                    "tasks": u.tasks.iter().filter_map(|&i| tasks.get(i).map(|t| &t.task)).collect::<Vec<_>>(),
                })
            })
            .collect();
        let note = format!(
            "Started in the background as delegation {id}. Each unit's results will arrive \
             later as a message starting with \"[background delegation {id}\"; carry on with \
             other work or answer the user meanwhile, and do not start the same tasks again."
        );
        Ok(json!({"delegation": id, "units": units, "note": note}).to_string())
    }
}

/// Hands work to a helper agent that starts with no knowledge of this conversation and
/// returns its final answer. Give one `task` (with `context`), or up to 5 independent
/// `tasks` to run in parallel; answers come back in the order given. State each task
/// completely, with everything the helper needs to know. With `background: true` the call
/// answers at once with a delegation id and the results arrive later as a message, so you
/// can go on meanwhile.
#[tool(risk = read)]
async fn delegate_task(
    ctx: &ToolContext<'_>,
    #[args] args: DelegateArgs,
) -> Result<String, ToolError> {
    let background = args.background;
    let tasks = tasks_of(args)?;
    if background {
        Delegation::background(ctx, &tasks).await
    } else {
        Delegation::foreground(ctx, &tasks, None).await
    }
}

export_plugin! {
    name: "delegate_task",
    version: env!("CARGO_PKG_VERSION"),
    tools: [delegate_task],
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use serde_json::{Value, json};
    use toolhost_plugin_api::testing::{TestHost, call};
    use toolhost_plugin_api::{
        ChildRole, ChildTurnRequest, DelegatedTask, DelegationAnswer, DelegationRequest,
        DelegationUnit, Risk, ServiceError, ToolError,
    };

    use super::delegate_task;

    /// Children that answer in upper case, and fail on a prompt containing "fail".
    fn children() -> TestHost {
        TestHost::new().on_child_turn(|req: &ChildTurnRequest| {
            if req.prompt.contains("fail") {
                return Err(ServiceError::Failed(format!("could not {}", req.prompt)));
            }
            Ok(req.prompt.to_uppercase())
        })
    }

    fn parsed(out: Result<String, ToolError>) -> Value {
        serde_json::from_str(&out.unwrap()).unwrap()
    }

    #[test]
    fn describes_a_read_tool_with_at_most_five_tasks() {
        let info = TestHost::new().describe(&delegate_task);
        assert_eq!(info.name, "delegate_task");
        assert_eq!(info.risk, Risk::Read);
        assert!(!info.interactive);
        assert_eq!(info.schema["properties"]["tasks"]["maxItems"], 5);
    }

    #[test]
    fn one_task_returns_the_childs_answer() {
        let host = children();
        let out = host.call(
            &delegate_task,
            json!({"task": "find the file", "context": "it is in /tmp"}),
        );
        assert_eq!(out, Ok("FIND THE FILE".to_owned()));
        assert_eq!(
            host.child_turns(),
            [ChildTurnRequest {
                prompt: "find the file".to_owned(),
                context: Some("it is in /tmp".to_owned()),
            }]
        );
    }

    #[test]
    fn a_failing_child_fails_a_single_task() {
        assert_eq!(
            children().call(&delegate_task, json!({"task": "fail now"})),
            Err(ToolError::Failed(
                "the helper failed: could not fail now".to_owned()
            ))
        );
        let out = call(&delegate_task, json!({"task": "anything"}));
        assert_eq!(
            out,
            Err(ToolError::Failed(
                "the helper failed: child turns are not available: no answer scripted: use \
                 TestHost::on_child_turn"
                    .to_owned()
            ))
        );
    }

    #[test]
    fn a_batch_answers_in_the_order_given_with_errors_in_place() {
        let host = children();
        let out = host.call(
            &delegate_task,
            json!({"tasks": [
                {"task": "one"},
                {"task": "please fail", "context": "bad luck"},
                {"task": "three", "context": "ctx"},
            ]}),
        );
        assert_eq!(
            parsed(out),
            json!({"results": [
                {"task": "one", "answer": "ONE"},
                {"task": "please fail", "error": "could not please fail"},
                {"task": "three", "answer": "THREE"},
            ]})
        );
        let asked: Vec<(String, Option<String>)> = host
            .child_turns()
            .into_iter()
            .map(|t| (t.prompt, t.context))
            .collect();
        assert_eq!(
            asked,
            [
                ("one".to_owned(), None),
                ("please fail".to_owned(), Some("bad luck".to_owned())),
                ("three".to_owned(), Some("ctx".to_owned())),
            ]
        );
    }

    #[test]
    fn a_batch_of_one_is_still_a_batch() {
        let out = children().call(&delegate_task, json!({"tasks": [{"task": "x"}]}));
        assert_eq!(
            out,
            Ok("X".to_owned()),
            "one task in a batch answers plainly"
        );
    }

    #[test]
    fn wrong_shapes_are_refused_before_any_child_runs() {
        let host = children();
        let six: Vec<Value> = (0..6).map(|i| json!({"task": format!("t{i}")})).collect();
        let either = "give either `task` or a non-empty list `tasks`, not both";
        for (args, expected) in [
            (json!({}), either.to_owned()),
            (json!({"tasks": []}), either.to_owned()),
            (
                json!({"task": "a", "tasks": [{"task": "b"}]}),
                either.to_owned(),
            ),
            // The schema's `maxItems`, checked (as by the host) before the tool runs.
            (
                json!({"tasks": six.clone()}),
                format!("/tasks: {} has more than 5 items", Value::Array(six)),
            ),
        ] {
            assert_eq!(
                host.call(&delegate_task, args.clone()),
                Err(ToolError::InvalidArgs(expected)),
                "{args}"
            );
        }
        let out = host.call(&delegate_task, json!({"tasks": [{"context": "no task"}]}));
        assert!(
            matches!(&out, Err(ToolError::InvalidArgs(m)) if m.contains("\"task\"")),
            "{out:?}"
        );
        assert!(host.child_turns().is_empty());
    }
    #[test]
    fn roles_reach_the_host_per_task_or_from_the_call() {
        let host = children();
        let out = host.call(
            &delegate_task,
            json!({"tasks": [{"task": "a"}, {"task": "b", "role": "leaf"}], "role": "orchestrator"}),
        );
        assert!(out.is_ok(), "{out:?}");
        let roles: Vec<_> = host
            .child_turn_calls()
            .into_iter()
            .map(|t| t.role)
            .collect();
        assert_eq!(
            roles,
            [Some(ChildRole::Orchestrator), Some(ChildRole::Leaf)]
        );
        let host = children();
        host.call(&delegate_task, json!({"task": "plain"})).unwrap();
        assert_eq!(
            host.child_turn_calls()[0].role,
            None,
            "no role: the host's default"
        );
        assert!(matches!(
            host.call(&delegate_task, json!({"task": "x", "role": "boss"})),
            Err(ToolError::InvalidArgs(_))
        ));
    }

    #[test]
    fn background_answers_at_once_with_the_delegation_and_its_units() {
        let host = TestHost::new().on_delegate(|req: &DelegationRequest| {
            assert_eq!(req.tasks.len(), 3);
            Ok(DelegationAnswer {
                delegation: "d-7".to_owned(),
                units: vec![
                    DelegationUnit {
                        id: "d-7/u1".to_owned(),
                        tasks: vec![0, 2],
                    },
                    DelegationUnit {
                        id: "d-7/u2".to_owned(),
                        tasks: vec![1],
                    },
                ],
            })
        });
        let out = parsed(host.call(
            &delegate_task,
            json!({"background": true, "tasks": [
                {"task": "one", "group": "g"},
                {"task": "two", "context": "c", "role": "orchestrator"},
                {"task": "three", "group": "g"},
            ]}),
        ));
        assert_eq!(out["delegation"], "d-7");
        assert_eq!(
            out["units"],
            json!([
                {"unit": "d-7/u1", "tasks": ["one", "three"]},
                {"unit": "d-7/u2", "tasks": ["two"]},
            ])
        );
        let note = out["note"].as_str().unwrap();
        assert!(note.contains("[background delegation d-7"), "{note}");
        assert!(
            host.child_turns().is_empty(),
            "nothing ran in the foreground"
        );
        assert_eq!(
            host.delegations(),
            [DelegationRequest {
                tasks: vec![
                    DelegatedTask::new("one").in_group("g"),
                    DelegatedTask::new("two")
                        .with_context("c")
                        .with_role(ChildRole::Orchestrator),
                    DelegatedTask::new("three").in_group("g"),
                ]
            }]
        );
    }

    #[test]
    fn background_on_a_host_without_it_runs_in_the_foreground_and_says_so() {
        // `children()` scripts no delegation: the host answers as one older than 0.1.4.
        let host = children();
        let out = host
            .call(
                &delegate_task,
                json!({"background": true, "task": "find it"}),
            )
            .unwrap();
        assert!(
            out.starts_with("(background delegation is not available here"),
            "{out}"
        );
        assert!(out.ends_with("\nFIND IT"), "{out}");
        let out = parsed(host.call(
            &delegate_task,
            json!({"background": true, "tasks": [{"task": "a"}, {"task": "b"}]}),
        ));
        assert_eq!(out["results"][1]["answer"], "B");
        assert!(
            out["note"]
                .as_str()
                .unwrap()
                .contains("ran in the foreground")
        );
        assert_eq!(host.delegations().len(), 2, "it asked first");
    }

    #[test]
    fn a_failed_delegation_is_the_calls_error() {
        let host = TestHost::new().on_delegate(|_: &DelegationRequest| {
            Err(ServiceError::Failed(
                "the orchestrator role is off".to_owned(),
            ))
        });
        assert_eq!(
            host.call(&delegate_task, json!({"background": true, "task": "x"})),
            Err(ToolError::Failed("the orchestrator role is off".to_owned()))
        );
    }
}
