//! Models for the agent tests: `ScriptedModel`, a `ModelProvider` that answers from a
//! script and records the typed requests it got, and `ModelServer`, a hand-made Chat
//! Completions server on 127.0.0.1 for the few tests that go through the real HTTP client
//! (and the `toolhost` binary).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolhost::ToolSpec;
use toolhost::agent::model::{
    Message, ModelError, ModelProvider, ModelToolCall, Role, parse_completion,
};

/// What the model answers to one request.
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

/// The reply when a script has run out.
fn exhausted() -> Reply {
    Reply::Status(500, "the script is exhausted".to_owned())
}

/// A tool call's id: `call_{n}_{i}` for the `i`th call of the `n`th request (from 1).
fn call_id(n: usize, i: usize) -> String {
    format!("call_{n}_{i}")
}

/// What the agent asked the model: the conversation and the names of the tools offered.
#[derive(Debug, Clone)]
pub(crate) struct ModelRequest {
    pub(crate) messages: Vec<Message>,
    pub(crate) tools: Vec<String>,
}

/// A tool's result as the model got it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ToolAnswer {
    /// The call it answers.
    pub(crate) call_id: String,
    /// What the tool said.
    pub(crate) content: String,
}

impl ModelRequest {
    /// The tool results in the conversation, in order.
    pub(crate) fn tool_answers(&self) -> Vec<ToolAnswer> {
        self.messages
            .iter()
            .filter(|m| m.role == Role::Tool)
            .map(|m| ToolAnswer {
                call_id: m.tool_call_id.clone().unwrap_or_default(),
                content: m.content.clone().unwrap_or_default(),
            })
            .collect()
    }

    /// The last thing the person said.
    pub(crate) fn last_user(&self) -> &str {
        self.messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .and_then(|m| m.content.as_deref())
            .unwrap_or("")
    }

    /// Whether the tool `name` was offered.
    pub(crate) fn offers(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t == name)
    }
}

type Responder = Box<dyn Fn(&ModelRequest) -> Reply + Send + Sync>;

/// A model that answers with a responder (or a script) and records every request.
pub(crate) struct ScriptedModel {
    responder: Responder,
    requests: Mutex<Vec<ModelRequest>>,
}

impl ScriptedModel {
    /// Answers with `responder(request)`.
    pub(crate) fn new(
        responder: impl Fn(&ModelRequest) -> Reply + Send + Sync + 'static,
    ) -> Arc<ScriptedModel> {
        Arc::new(ScriptedModel {
            responder: Box::new(responder),
            requests: Mutex::new(Vec::new()),
        })
    }

    /// Answers the requests in order from `script` (then fails as a server would).
    pub(crate) fn scripted(script: Vec<Reply>) -> Arc<ScriptedModel> {
        let script = Mutex::new(VecDeque::from(script));
        ScriptedModel::new(move |_| {
            script
                .lock()
                .expect("lock")
                .pop_front()
                .unwrap_or_else(exhausted)
        })
    }

    /// The `n`th request (from 0).
    pub(crate) fn request(&self, n: usize) -> ModelRequest {
        self.requests.lock().expect("lock")[n].clone()
    }

    /// How many requests came.
    pub(crate) fn count(&self) -> usize {
        self.requests.lock().expect("lock").len()
    }
}

#[async_trait::async_trait]
impl ModelProvider for ScriptedModel {
    fn model(&self) -> &str {
        "scripted"
    }

    async fn complete(
        &self,
        messages: &[Message],
        tools: &[&ToolSpec],
        _cancel: &CancellationToken,
    ) -> Result<Message, ModelError> {
        let request = ModelRequest {
            messages: messages.to_vec(),
            tools: tools.iter().map(|t| t.name.clone()).collect(),
        };
        let reply = (self.responder)(&request);
        let n = {
            let mut seen = self.requests.lock().expect("lock");
            seen.push(request);
            seen.len()
        };
        match reply {
            Reply::Text(t) => Ok(Message::text(Role::Assistant, t)),
            Reply::Calls(list) => Ok(Message {
                role: Role::Assistant,
                content: None,
                tool_calls: list
                    .into_iter()
                    .enumerate()
                    .map(|(i, (name, args))| ModelToolCall {
                        id: call_id(n, i),
                        name,
                        arguments: args.to_string(),
                    })
                    .collect(),
                tool_call_id: None,
                details: None,
                full_text: None,
            }),
            Reply::Status(status, body) => Err(ModelError::Status {
                url: "scripted".to_owned(),
                status,
                body,
            }),
            Reply::Raw(body) => parse_completion(&body),
        }
    }
}

type HttpResponder = Arc<dyn Fn(&Value) -> Reply + Send + Sync>;

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
                "id": call_id(n, i),
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
    pub(crate) async fn start(responder: HttpResponder) -> ModelServer {
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
                .unwrap_or_else(exhausted)
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

/// The tool messages of a request body, as (tool_call_id, content).
pub(crate) fn wire_tool_messages(request: &Value) -> Vec<(String, String)> {
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
