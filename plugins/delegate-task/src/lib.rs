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
