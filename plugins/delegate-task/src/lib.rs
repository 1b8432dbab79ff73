//! The `delegate_task` tool: hands a task, or a batch of up to 5 tasks run in parallel, to
//! child turns of the agent running the call (through the host's child-turn service; the
//! host applies its depth, concurrency and time limits), and returns their answers in the
//! order given.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;

use serde::Deserialize;
use serde_json::json;
use toolhost_plugin_api::{
    ChildTurnRequest, Risk, ServiceError, ToolContext, ToolError, TypedTool, export_plugin,
};

/// The most tasks in one batch.
const MAX_TASKS: usize = 5;

/// One task for a child turn.
#[derive(Deserialize, schemars::JsonSchema)]
struct Task {
    /// What to do, stated completely: the child sees nothing of this conversation.
    task: String,
    /// Background the child needs (facts, constraints, what is done already).
    #[serde(default)]
    context: Option<String>,
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

struct DelegateTask;

impl TypedTool for DelegateTask {
    type Args = DelegateArgs;

    fn name(&self) -> &str {
        "delegate_task"
    }

    fn description(&self) -> &str {
        "Hands work to a helper agent that starts with no knowledge of this conversation \
         and returns its final answer. Give one `task` (with `context`), or up to 5 \
         independent `tasks` to run in parallel; answers come back in the order given. \
         State each task completely, with everything the helper needs to know."
    }

    fn risk(&self) -> Risk {
        Risk::Read
    }

    async fn run(&self, ctx: &ToolContext<'_>, args: DelegateArgs) -> Result<String, ToolError> {
        let tasks = match (args.task, args.tasks) {
            (Some(task), None) => vec![Task {
                task,
                context: args.context,
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
        let single = tasks.len() == 1;
        let runs = tasks
            .iter()
            .map(|t| {
                let request = ChildTurnRequest {
                    prompt: t.task.clone(),
                    context: t.context.clone(),
                };
                Box::pin(async move { ctx.child_turn(&request).await })
                    as Pin<Box<dyn Future<Output = Result<String, ServiceError>> + Send + '_>>
            })
            .collect();
        let answers = join_all(runs).await;
        if single {
            return match answers.into_iter().next() {
                Some(Ok(answer)) => Ok(answer),
                Some(Err(e)) => Err(ToolError::failed(format!("the helper failed: {e}"))),
                None => Err(ToolError::failed("the helper did not answer")),
            };
        }
        let results: Vec<_> = tasks
            .iter()
            .zip(answers)
            .map(|(t, answer)| match answer {
                Ok(answer) => json!({"task": t.task, "answer": answer}),
                Err(e) => json!({"task": t.task, "error": e.to_string()}),
            })
            .collect();
        Ok(json!({ "results": results }).to_string())
    }
}

export_plugin! {
    name: "delegate_task",
    version: env!("CARGO_PKG_VERSION"),
    tools: [DelegateTask],
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use serde_json::{Value, json};
    use toolhost_plugin_api::testing::{TestHost, call};
    use toolhost_plugin_api::{ChildTurnRequest, Risk, ServiceError, ToolError};

    use super::DelegateTask;

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
        let info = TestHost::new().describe(&DelegateTask);
        assert_eq!(info.name, "delegate_task");
        assert_eq!(info.risk, Risk::Read);
        assert!(!info.interactive);
        assert_eq!(info.schema["properties"]["tasks"]["maxItems"], 5);
    }

    #[test]
    fn one_task_returns_the_childs_answer() {
        let host = children();
        let out = host.call(
            &DelegateTask,
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
            children().call(&DelegateTask, json!({"task": "fail now"})),
            Err(ToolError::Failed(
                "the helper failed: could not fail now".to_owned()
            ))
        );
        let out = call(&DelegateTask, json!({"task": "anything"}));
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
            &DelegateTask,
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
        let out = children().call(&DelegateTask, json!({"tasks": [{"task": "x"}]}));
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
            (
                json!({"tasks": six}),
                "at most 5 tasks at once; split the batch".to_owned(),
            ),
        ] {
            assert_eq!(
                host.call(&DelegateTask, args.clone()),
                Err(ToolError::InvalidArgs(expected)),
                "{args}"
            );
        }
        let out = host.call(&DelegateTask, json!({"tasks": [{"context": "no task"}]}));
        assert!(matches!(out, Err(ToolError::InvalidArgs(m)) if m.contains("`task`")));
        assert!(host.child_turns().is_empty());
    }
}
