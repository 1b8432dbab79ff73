//! Models for the agent tests: `ScriptedModel`, a `ModelProvider` that answers from a
//! script and records the typed requests it got, and `ModelServer`, a hand-made Chat
//! Completions server on 127.0.0.1 for the tests that go through the real HTTP client
//! (and the `toolhost` binary). The server can stream (`ServerMode`: server-sent events
//! cut into small pieces, tool-call arguments split mid-string, the usage in a last chunk),
//! answer streamed requests in one piece, refuse `stream`, report usage by its own count,
//! and refuse requests longer than a window by that count.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolhost::ToolSpec;
use toolhost::agent::model::{
    Completion, Message, ModelError, ModelProvider, ModelToolCall, Role, TextSink, parse_completion,
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
        _on_text: Option<TextSink<'_>>,
        _cancel: &CancellationToken,
    ) -> Result<Completion, ModelError> {
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
        let message = match reply {
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
                details: Default::default(),
                id: None,
            }),
            Reply::Status(status, body) => Err(ModelError::Status {
                url: "scripted".to_owned(),
                status,
                body,
            }),
            Reply::Raw(body) => parse_completion(&body),
        };
        message.map(|message| Completion {
            message,
            usage: None,
        })
    }
}

type HttpResponder = Arc<dyn Fn(&Value) -> Reply + Send + Sync>;

/// How a `ModelServer` answers, besides what it says.
#[derive(Clone, Default)]
pub(crate) struct ServerMode {
    /// Answer a streamed request (`stream: true`) with server-sent events; otherwise in
    /// one piece (as a server that does not stream does).
    pub(crate) streams: bool,
    /// Refuse a request with `stream` in it (400, naming it).
    pub(crate) refuses_stream: bool,
    /// Label a whole answer `application/json` (otherwise it has no content type).
    pub(crate) json_type: bool,
    /// How this server counts tokens: the body's bytes divided by this (0: by 4).
    pub(crate) bytes_per_token: usize,
    /// Report `usage` by that count.
    pub(crate) reports_usage: bool,
    /// Refuse any request longer than this many tokens by that count (400, as OpenAI
    /// words it).
    pub(crate) window: Option<usize>,
    /// Streamed answers: after the first half of their chunks, wait for this.
    pub(crate) hold: Option<Arc<tokio::sync::Notify>>,
}

/// A Chat Completions server on 127.0.0.1 that answers with a responder and records every
/// request body.
pub(crate) struct ModelServer {
    pub(crate) url: String,
    pub(crate) requests: Arc<Mutex<Vec<Value>>>,
    /// How many requests it refused as too long.
    pub(crate) refused: Arc<std::sync::atomic::AtomicUsize>,
    stop: CancellationToken,
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The assistant message of `reply`, as the wire has it (`None`: not a message).
fn wire_message(reply: &Reply, n: usize) -> Option<Value> {
    match reply {
        Reply::Text(t) => Some(json!({"role": "assistant", "content": t})),
        Reply::Calls(list) => Some(json!({
            "role": "assistant",
            "content": null,
            "tool_calls": list.iter().enumerate().map(|(i, (name, args))| json!({
                "id": call_id(n, i),
                "type": "function",
                "function": {"name": name, "arguments": args.to_string()}
            })).collect::<Vec<_>>()
        })),
        Reply::Status(..) | Reply::Raw(_) => None,
    }
}

fn completion(reply: &Reply, n: usize, usage: Option<Value>) -> (u16, String) {
    let message = match (reply, wire_message(reply, n)) {
        (_, Some(message)) => message,
        (Reply::Status(code, body), None) => return (*code, body.clone()),
        (Reply::Raw(body), None) => return (200, body.clone()),
        _ => return (500, "unreachable".to_owned()),
    };
    let mut answer = json!({"id": format!("cmpl-{n}"), "object": "chat.completion", "model": "scripted",
           "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]});
    if let Some(usage) = usage {
        answer["usage"] = usage;
    }
    (200, answer.to_string())
}

/// `text` in pieces of at most `size` characters.
fn pieces(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// The events of a streamed answer: the text 3 characters a chunk, each tool call named in
/// one chunk and its arguments 5 characters a chunk (interleaved between calls), then the
/// finish, then the usage in a chunk without choices.
fn stream_events(reply: &Reply, n: usize, usage: Option<Value>) -> Vec<String> {
    let chunk = |delta: Value| {
        json!({"id": format!("cmpl-{n}"), "object": "chat.completion.chunk",
               "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
    };
    let mut events = vec![chunk(json!({"role": "assistant", "content": ""}))];
    match reply {
        Reply::Text(t) => {
            events.extend(
                pieces(t, 3)
                    .into_iter()
                    .map(|p| chunk(json!({"content": p}))),
            );
        }
        Reply::Calls(list) => {
            let mut rest: Vec<Vec<String>> = Vec::new();
            for (i, (name, args)) in list.iter().enumerate() {
                events.push(chunk(
                    json!({"tool_calls": [{"index": i, "id": call_id(n, i),
                    "type": "function", "function": {"name": name, "arguments": ""}}]}),
                ));
                rest.push(pieces(&args.to_string(), 5));
            }
            let longest = rest.iter().map(Vec::len).max().unwrap_or(0);
            for k in 0..longest {
                for (i, parts) in rest.iter().enumerate() {
                    if let Some(p) = parts.get(k) {
                        events.push(chunk(json!({"tool_calls": [{"index": i,
                            "function": {"arguments": p}}]})));
                    }
                }
            }
        }
        Reply::Status(..) | Reply::Raw(_) => {}
    }
    events.push(
        json!({"id": format!("cmpl-{n}"), "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
    );
    if let Some(usage) = usage {
        events.push(
            json!({"id": format!("cmpl-{n}"), "object": "chat.completion.chunk",
            "choices": [], "usage": usage}),
        );
    }
    let mut events: Vec<String> = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    events.push("data: [DONE]\n\n".to_owned());
    events
}

/// A response body fed from a channel, chunk by chunk as the server sends them.
struct ChannelBody(tokio::sync::mpsc::Receiver<hyper::body::Bytes>);

impl hyper::body::Body for ChannelBody {
    type Data = hyper::body::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|c| Ok(hyper::body::Frame::data(c))))
    }
}

type Body = http_body_util::combinators::BoxBody<hyper::body::Bytes, std::convert::Infallible>;

impl ModelServer {
    /// Answers with `responder(request)`, whole (as a server that does not stream).
    pub(crate) async fn start(responder: HttpResponder) -> ModelServer {
        ModelServer::start_with(responder, ServerMode::default()).await
    }

    /// Answers with `responder(request)`, as `mode` says.
    pub(crate) async fn start_with(responder: HttpResponder, mode: ServerMode) -> ModelServer {
        use http_body_util::{BodyExt as _, Full};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/v1", listener.local_addr().expect("addr"));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let refused = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let stop = CancellationToken::new();
        let (seen, stopped, refusals) = (Arc::clone(&requests), stop.clone(), Arc::clone(&refused));
        let mode = Arc::new(mode);
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    () = stopped.cancelled() => break,
                    accepted = listener.accept() => match accepted {
                        Ok((s, _)) => s,
                        Err(_) => continue,
                    },
                };
                let (seen, responder, mode, refusals) = (
                    Arc::clone(&seen),
                    Arc::clone(&responder),
                    Arc::clone(&mode),
                    Arc::clone(&refusals),
                );
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let (seen, responder, mode, refusals) = (
                                Arc::clone(&seen),
                                Arc::clone(&responder),
                                Arc::clone(&mode),
                                Arc::clone(&refusals),
                            );
                            async move {
                                let bytes = req
                                    .into_body()
                                    .collect()
                                    .await
                                    .map(|b| b.to_bytes())
                                    .unwrap_or_default();
                                let body: Value =
                                    serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                                let per_token = match mode.bytes_per_token {
                                    0 => 4,
                                    n => n,
                                };
                                let prompt_tokens = bytes.len() / per_token;
                                let streamed = body["stream"] == true;
                                let refusal = if mode.refuses_stream && body.get("stream").is_some()
                                {
                                    Some(Reply::Status(
                                        400,
                                        "{\"error\": {\"message\": \"Unrecognized request \
                                         argument supplied: stream\"}}"
                                            .to_owned(),
                                    ))
                                } else {
                                    mode.window.filter(|&w| prompt_tokens > w).map(|w| {
                                        refusals.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                                        Reply::Status(
                                            400,
                                            format!(
                                                "{{\"error\": {{\"message\": \"This model's \
                                                 maximum context length is {w} tokens. However, \
                                                 your messages resulted in {prompt_tokens} \
                                                 tokens.\", \"code\": \
                                                 \"context_length_exceeded\"}}}}"
                                            ),
                                        )
                                    })
                                };
                                let refused_it = refusal.is_some();
                                let reply = refusal.unwrap_or_else(|| responder(&body));
                                let n = {
                                    let mut seen = seen.lock().expect("lock");
                                    seen.push(body);
                                    seen.len()
                                };
                                let usage = mode.reports_usage.then(|| {
                                    let answer = wire_message(&reply, n)
                                        .map_or(0, |m| m.to_string().len() / per_token);
                                    json!({"prompt_tokens": prompt_tokens,
                                           "completion_tokens": answer,
                                           "total_tokens": prompt_tokens + answer})
                                });
                                let answer: hyper::Response<Body> = if streamed
                                    && mode.streams
                                    && !refused_it
                                    && wire_message(&reply, n).is_some()
                                {
                                    let events = stream_events(&reply, n, usage);
                                    let (tx, rx) = tokio::sync::mpsc::channel(4);
                                    let hold = mode.hold.clone();
                                    tokio::spawn(async move {
                                        let half = events.len() / 2;
                                        for (i, e) in events.into_iter().enumerate() {
                                            if i == half
                                                && let Some(hold) = &hold
                                            {
                                                hold.notified().await;
                                            }
                                            if tx.send(hyper::body::Bytes::from(e)).await.is_err() {
                                                return;
                                            }
                                        }
                                    });
                                    let mut response =
                                        hyper::Response::new(ChannelBody(rx).boxed());
                                    response.headers_mut().insert(
                                        "content-type",
                                        hyper::header::HeaderValue::from_static(
                                            "text/event-stream",
                                        ),
                                    );
                                    response
                                } else {
                                    let (status, text) = completion(&reply, n, usage);
                                    let mut response = hyper::Response::new(
                                        Full::new(hyper::body::Bytes::from(text)).boxed(),
                                    );
                                    *response.status_mut() =
                                        hyper::StatusCode::from_u16(status).expect("status");
                                    if mode.json_type {
                                        response.headers_mut().insert(
                                            "content-type",
                                            hyper::header::HeaderValue::from_static(
                                                "application/json",
                                            ),
                                        );
                                    }
                                    response
                                };
                                Ok::<_, std::convert::Infallible>(answer)
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
            refused,
            stop,
        }
    }

    /// Answers the requests in order from `script` (then 500s).
    pub(crate) async fn scripted(script: Vec<Reply>) -> ModelServer {
        ModelServer::scripted_with(script, ServerMode::default()).await
    }

    /// Answers the requests in order from `script` (then 500s), as `mode` says.
    pub(crate) async fn scripted_with(script: Vec<Reply>, mode: ServerMode) -> ModelServer {
        let script = Mutex::new(VecDeque::from(script));
        ModelServer::start_with(
            Arc::new(move |_| {
                script
                    .lock()
                    .expect("lock")
                    .pop_front()
                    .unwrap_or_else(exhausted)
            }),
            mode,
        )
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
