//! One turn: the model is offered the profile's tools, its tool calls go through the
//! call door, the results go back, until it answers without tool calls, the iteration
//! limit is reached or the turn is cancelled. Every message is stored as it comes.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio_util::sync::CancellationToken;

use super::children::ChildTurns;
use super::messages::{Message, Role};
use super::requests::AgentRequests;
use super::sessions::{self, SessionError};
use super::{AgentError, AgentInner, blocking};
use super::{process_manage, todo};
use toolhost_calls::context::{Caller, Frontend};
use toolhost_calls::dispatcher::ToolCall;
use toolhost_calls::result::{CallErrorKind, ToolResult};
use toolhost_calls::tool::Arguments;

/// What a person watching a turn sees happen (the chat shows each as it comes).
pub trait TurnObserver: Send + Sync {
    /// The model asked for these calls (before they run).
    fn tool_calls(&self, _depth: u32, _calls: &[ToolCall]) {}
    /// A call's result.
    fn tool_result(&self, _depth: u32, _result: &ToolResult) {}
    /// The model's text (the final answer, or text alongside tool calls), once whole.
    fn assistant_text(&self, _depth: u32, _text: &str) {}
    /// More of the model's text as it streams in (before `assistant_text` gives all of it).
    fn assistant_delta(&self, _depth: u32, _text: &str) {}
    /// After each model call: how many tokens of the model's `window` the conversation
    /// now takes (the server's count when it reported one, else toolhost's estimate).
    fn context_use(&self, _depth: u32, _used: u64, _window: u64) {}
    /// A unit of a background delegation finished (its completion is in its session);
    /// called from the task that ran it, also when no turn runs.
    fn delegation_finished(&self, _report: &super::DelegationReport) {}
}

impl AgentInner {
    pub(super) fn turn(
        self: Arc<Self>,
        without: Arc<[String]>,
        session: String,
        prompt: String,
        cancel: CancellationToken,
        depth: u32,
        wait_for_background: bool,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, AgentError>> + Send>>
    {
        Box::pin(async move {
            // Completions of background delegations queue for this turn's steps.
            let _active = self.delegations.begin_turn(&session);
            let store = &self.store;
            let mut messages = vec![Message::text(Role::System, &self.config.system_prompt)];
            let history = {
                let (store, session) = (Arc::clone(store), session.clone());
                blocking(move || store.messages(&session)).await?
            };
            // A turn that stopped between a tool call and its result (a crash, a kill)
            // left calls unanswered; the model would refuse the conversation.
            messages.extend(sessions::repair(history));
            let user = Message::text(Role::User, prompt);
            messages.extend(self.append(&session, vec![user]).await?);

            // Every call of the turn enters by the door, as this profile's agent (or a
            // child turn of it), with the person at the terminal to approve.
            let frontend = if depth == 0 {
                Frontend::Agent
            } else {
                Frontend::ChildTurn
            };
            let mut request = self.door.request(Caller::this_process(frontend));
            request.profile = Some(self.profile.clone());
            request.session = session.clone();
            request.model = self.model.model().to_owned();
            request.cancel = cancel.clone();
            request.channel = self.caller.clone();
            request.without = Arc::clone(&without);
            request.child_turns = Some(Arc::new(ChildTurns {
                agent: Arc::clone(&self),
                without: Arc::clone(&without),
                depth,
                turn_cancel: cancel.clone(),
                turn_serial: self.turn_serial.fetch_add(1, Ordering::Relaxed),
                call_id: None,
            }));
            if depth > 0 && self.config.children.auto_approve {
                request.approver = Some(Arc::new(toolhost_calls::policy::AutoApprove));
            }
            let max_iterations = if depth > 0 {
                self.config.children.max_iterations
            } else {
                self.config.max_iterations
            };
            request.requests = Some(Arc::new(AgentRequests {
                agent: Arc::clone(&self),
            }));
            // The tools the model is offered: those its calls may use, and the agent's own
            // task list (unless a tool of the profile has its name: the profile's wins).
            let registry = self.door.tools(&request)?;
            let todo_spec = registry.get(todo::NAME).is_none().then(todo::spec);
            // Child turns only: a top-level turn ends none of its tools' processes.
            let process_spec = (depth > 0 && registry.get(process_manage::NAME).is_none())
                .then(process_manage::spec);
            for _ in 0..max_iterations {
                // The step boundary: completions that arrived go in before the model call.
                let arrived = self.delegations.drain(&session);
                if !arrived.is_empty() {
                    messages.extend(self.append(&session, arrived).await?);
                }
                let mut specs = self.door.visible(&registry);
                specs.extend(todo_spec.as_ref());
                specs.extend(process_spec.as_ref());
                // Compacted to fit the model's window (compaction.rs); streamed text goes
                // to the observer as it comes.
                let reply = self
                    .ask_model(&session, &mut messages, &specs, depth, &cancel)
                    .await?;
                let reply = self.append_one(&session, reply).await?;
                if let (Some(observer), Some(text)) = (&self.observer, &reply.content)
                    && !text.is_empty()
                {
                    observer.assistant_text(depth, text);
                }
                if reply.tool_calls.is_empty() {
                    if wait_for_background && self.background_left(&session, &cancel).await? {
                        // A completion arrived: the model reads it and goes on.
                        messages.push(reply);
                        continue;
                    }
                    return Ok(reply.content.unwrap_or_default());
                }
                // Calls whose arguments are not JSON never reach the door: their
                // error goes back in their place, so the model can correct them.
                let mut calls = Vec::new();
                let mut slots: Vec<Option<ToolResult>> = Vec::new();
                let mut own = Vec::new();
                for c in &reply.tool_calls {
                    // Parsed once: the text crosses to the plugin as the model wrote it.
                    match Arguments::parse(c.arguments.as_str()) {
                        // The agent's own tool: answered here, in order, never dispatched.
                        Ok(arguments) if todo_spec.is_some() && c.name == todo::NAME => {
                            slots.push(Some(self.todo(&session, &c.id, arguments.value()).await));
                            own.push(ToolCall {
                                id: c.id.clone(),
                                name: c.name.clone(),
                                arguments,
                            });
                        }
                        Ok(arguments)
                            if process_spec.is_some() && c.name == process_manage::NAME =>
                        {
                            slots.push(Some(
                                self.process_manage(&session, &c.id, arguments.value())
                                    .await,
                            ));
                            own.push(ToolCall {
                                id: c.id.clone(),
                                name: c.name.clone(),
                                arguments,
                            });
                        }
                        Ok(arguments) => {
                            calls.push(ToolCall {
                                id: c.id.clone(),
                                name: c.name.clone(),
                                arguments,
                            });
                            slots.push(None);
                        }
                        Err(e) => slots.push(Some(ToolResult::refused(
                            c.id.clone(),
                            c.name.clone(),
                            format!(
                                "invalid arguments: not valid JSON ({e}); send the arguments \
                                 as one JSON object"
                            ),
                            CallErrorKind::SchemaViolation,
                        ))),
                    }
                }
                messages.push(reply);
                if let Some(observer) = &self.observer {
                    observer.tool_calls(depth, &calls);
                    if !own.is_empty() {
                        observer.tool_calls(depth, &own);
                    }
                }
                let mut dispatched = self.door.dispatch(&request, calls).await.into_iter();
                let results: Vec<ToolResult> = slots
                    .into_iter()
                    .filter_map(|slot| slot.or_else(|| dispatched.next()))
                    .collect();
                let mut answers = Vec::with_capacity(results.len());
                for result in &results {
                    if let Some(observer) = &self.observer {
                        observer.tool_result(depth, result);
                    }
                    // The door held the text to the budget and kept the full output; the
                    // session keeps what the model got and the details (which name the
                    // kept output), which the model never gets.
                    answers.push(Message {
                        details: super::history::tool_message_details(result),
                        ..Message::tool_result(&result.call_id, result.output.clone())
                    });
                }
                // One transaction: a batch's results are stored all or none.
                messages.extend(self.append(&session, answers).await?);
                if cancel.is_cancelled() {
                    return Err(AgentError::Cancelled);
                }
            }
            Err(AgentError::IterationLimit(max_iterations))
        })
    }
}

impl AgentInner {
    /// Stores `messages` in `session` (one transaction) and returns them with their row
    /// ids, so compaction can note on them later.
    async fn append(
        &self,
        session: &str,
        mut messages: Vec<Message>,
    ) -> Result<Vec<Message>, SessionError> {
        let (store, session) = (Arc::clone(&self.store), session.to_owned());
        blocking(move || {
            let ids = store.append_all(&session, &messages)?;
            for (m, id) in messages.iter_mut().zip(ids) {
                m.id = Some(id);
            }
            Ok(messages)
        })
        .await
    }

    /// Answers a call of the agent's `todo` tool from `session`'s task list, storing the
    /// list it writes.
    async fn todo(
        &self,
        session: &str,
        call_id: &str,
        arguments: &serde_json::Value,
    ) -> ToolResult {
        let started = std::time::Instant::now();
        let (store, s, arguments) = (
            Arc::clone(&self.store),
            session.to_owned(),
            arguments.clone(),
        );
        let outcome = blocking(move || {
            let list = store.todos(&s)?;
            let next = todo::apply(&list, &arguments);
            if let Ok(next) = &next
                && *next != list
            {
                store.set_todos(&s, next)?;
            }
            Ok(next)
        })
        .await;
        let outcome = outcome.map(|r| r.map(|list| todo::answer(&list)));
        own_result(call_id, todo::NAME, outcome, started)
    }

    /// Answers a call of the agent's `process_manage` tool for `session`'s processes.
    async fn process_manage(
        &self,
        session: &str,
        call_id: &str,
        arguments: &serde_json::Value,
    ) -> ToolResult {
        let started = std::time::Instant::now();
        let (store, handoffs) = (Arc::clone(&self.store), Arc::clone(&self.handoffs));
        let (s, arguments) = (session.to_owned(), arguments.clone());
        let outcome = blocking(move || {
            let parent = store.parent_of(&s)?;
            Ok(process_manage::run(
                &s,
                parent.as_deref(),
                &handoffs,
                &arguments,
            ))
        })
        .await;
        own_result(call_id, process_manage::NAME, outcome, started)
    }

    /// [`AgentInner::append`] of one message.
    async fn append_one(
        &self,
        session: &str,
        mut message: Message,
    ) -> Result<Message, SessionError> {
        let (store, session) = (Arc::clone(&self.store), session.to_owned());
        blocking(move || {
            message.id = Some(store.append(&session, &message)?);
            Ok(message)
        })
        .await
    }
}

/// The result of a call of one of the agent's own tools: its answer; its refusal (the
/// model sent what the tool cannot take); or the session store's failure.
fn own_result<E: std::fmt::Display>(
    call_id: &str,
    name: &str,
    outcome: Result<Result<String, E>, SessionError>,
    started: std::time::Instant,
) -> ToolResult {
    let (output, kind) = match outcome {
        Ok(Ok(answer)) => (answer, None),
        Ok(Err(refused)) => (refused.to_string(), Some(CallErrorKind::InvalidArgs)),
        Err(e) => (
            format!("{name} could not read or write the session: {e}"),
            Some(CallErrorKind::Failed),
        ),
    };
    let refused = ToolResult::refused(
        call_id.to_owned(),
        name.to_owned(),
        output,
        kind.unwrap_or(CallErrorKind::Failed),
    );
    ToolResult {
        is_error: kind.is_some(),
        error: kind,
        elapsed: started.elapsed(),
        ..refused
    }
}
