//! The caller channel of an MCP call: progress and log notifications (in order, through
//! one sender task), and what a plugin asks its client (forms and pages to open through
//! elicitation, completions through sampling, the roots), several at once under their
//! keys: as server requests to a session client, side by side, or, for a sessionless
//! 2026-07-28 client, as questions the call waits on while the client is sent an
//! input-required result ([`super::suspended`]) or, once the call runs as a task, shown on
//! the task ([`super::tasks`]).

#![allow(
    deprecated,
    reason = "SEP-2577 deprecates MCP logging and sampling, but 2025-11-25 clients (most \
              clients today) still use them"
)]

use std::collections::{BTreeMap, HashSet};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use rmcp::model::{
    ClientCapabilities, CreateMessageRequest, CreateMessageRequestParams, ElicitRequest,
    ElicitRequestParams, InputRequest, InputRequests, InputResponses, LoggingLevel,
    LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken, ServerNotification,
};
use rmcp::task_manager::TaskContext;
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use toolhost_plugin_api::{
    AskAnswer, AskRequest, ClientAnswer, ClientQuestion, LogLevel, RootsAnswer, SampleAnswer,
    SampleRequest, ServiceError,
};

use toolhost_calls::context::CallerChannel;

/// Where a call's notifications go: the request it is answering now (a suspended call
/// resumed by a retry answers the retry), or the task it runs as.
pub(super) struct Route {
    pub(super) peer: Peer<RoleServer>,
    pub(super) progress_token: Option<ProgressToken>,
    /// The lowest log level the client wants for this call; `None`: no log lines.
    pub(super) log_level: Option<u8>,
    /// The task the call runs as once it detached: its progress becomes the task's
    /// status message (nobody listens for notifications of a request that was answered).
    pub(super) task: Option<TaskContext>,
}

/// What a sessionless client's call hands its MCP request (or its task) to do.
pub(super) enum Question {
    /// Requests for the client, answered by its retry or its `tasks/update`.
    Inputs(Inputs),
    /// The plugin let the rest of its call run as a task: `true` once it does.
    Detach(oneshot::Sender<bool>),
}

/// What a plugin asked its client at once, each under its key, and the responses come
/// back so far (a retry may answer some and not others; the rest are asked again).
pub(super) struct Inputs {
    asked: Vec<(String, InputRequest)>,
    got: Vec<Option<Value>>,
    answer: oneshot::Sender<Vec<Option<Value>>>,
}

impl Inputs {
    /// The requests not answered yet, by key: what an input-required result carries.
    pub(super) fn pending(&self) -> InputRequests {
        self.asked
            .iter()
            .zip(&self.got)
            .filter(|(_, got)| got.is_none())
            .map(|((key, request), _)| (key.clone(), request.clone()))
            .collect()
    }

    /// Takes a retry's responses; once every request has one the plugin gets them all
    /// (`None`), else the requests still unanswered come back, to be asked again.
    pub(super) fn take(mut self, responses: Option<&InputResponses>) -> Option<Inputs> {
        if let Some(responses) = responses {
            for ((key, request), got) in self.asked.iter().zip(self.got.iter_mut()) {
                if got.is_none() {
                    // A response that is not one (a number for a form) is asked again.
                    *got = responses
                        .get(key)
                        .filter(|r| is_response(request, r))
                        .cloned();
                }
            }
        }
        if self.got.iter().all(Option::is_some) {
            let _ = self.answer.send(self.got);
            return None;
        }
        Some(self)
    }

    /// Asks every request of a task's client at once (`tasks/get` shows them together)
    /// and answers the plugin when all are answered; a cancelled task answers none.
    pub(super) async fn ask_task(self, task: TaskContext) {
        let waits: Vec<_> = self
            .asked
            .into_iter()
            .map(|(key, request)| {
                let task = task.clone();
                tokio::spawn(async move { task.request_input(key, request).await.ok() })
            })
            .collect();
        let mut got = Vec::with_capacity(waits.len());
        for wait in waits {
            got.push(wait.await.ok().flatten());
        }
        let _ = self.answer.send(got);
    }
}

/// Whether `response` is a response to `request` (an elicitation, sampling or roots
/// result), so the plugin can read it.
fn is_response(request: &InputRequest, response: &Value) -> bool {
    match request {
        InputRequest::Elicitation(_) => ask_answer(response.clone()).is_ok(),
        InputRequest::CreateMessage(_) => {
            serde_json::from_value::<Sampled>(response.clone()).is_ok_and(|s| s.content.is_some())
        }
        InputRequest::ListRoots(_) => {
            serde_json::from_value::<RootsAnswer>(response.clone()).is_ok()
        }
        _ => false,
    }
}

/// The base of the keys toolhost gives questions a plugin did not name.
const QUESTION_KEY: &str = "toolhost_question";

/// One request for the client, as MCP has it.
#[derive(Clone)]
enum Asked {
    /// A form, or a page to open (URL elicitation).
    Ask(ElicitRequestParams),
    Sample(CreateMessageRequestParams),
    Roots,
}

impl Asked {
    /// The request as an input-required result carries it.
    fn input_request(&self) -> Result<InputRequest, ServiceError> {
        Ok(match self {
            Asked::Ask(params) => InputRequest::Elicitation(ElicitRequest::new(params.clone())),
            Asked::Sample(params) => {
                InputRequest::CreateMessage(CreateMessageRequest::new(params.clone()))
            }
            Asked::Roots => serde_json::from_value(json!({"method": "roots/list"}))
                .map_err(|e| ServiceError::Failed(format!("malformed roots request: {e}")))?,
        })
    }

    /// The client's response (an elicitation, sampling or roots result) as the plugin
    /// reads it.
    fn answer(&self, response: Value) -> ClientAnswer {
        match self {
            Asked::Ask(_) => ask_answer(response).map(ClientAnswer::Ask),
            Asked::Sample(_) => sample_answer(response).map(ClientAnswer::Sample),
            Asked::Roots => serde_json::from_value::<RootsAnswer>(response)
                .map(ClientAnswer::Roots)
                .map_err(|e| {
                    ServiceError::Failed(format!("the client's roots were malformed: {e}"))
                }),
        }
        .unwrap_or_else(ClientAnswer::from)
    }
}

/// Routes a call's progress, log notifications, questions and sampling to the MCP client.
pub(super) struct McpCaller {
    pub(super) route: Mutex<Route>,
    pub(super) can_elicit: bool,
    pub(super) can_sample: bool,
    pub(super) can_roots: bool,
    pub(super) can_elicit_url: bool,
    /// Whether the call may run as a task: its tool declares task support and its
    /// sessionless client holds tasks.
    pub(super) can_detach: bool,
    /// For a sessionless client: where the call's questions wait for the client's retry
    /// (`None`: asked as server requests on `route`'s peer).
    pub(super) questions: Option<mpsc::Sender<Question>>,
    /// How long the client has to answer (`[mcp] client_answer_secs`).
    pub(super) answer_within: Duration,
    /// Plugins may report from threads of their own; the sender task is spawned here.
    pub(super) runtime: tokio::runtime::Handle,
    /// Notifications go out in order through one task, started at the first one; a full
    /// queue (a client slower than a chatty tool) drops the newest.
    pub(super) sender: Mutex<
        Option<(
            mpsc::Sender<ServerNotification>,
            tokio::task::JoinHandle<()>,
        )>,
    >,
    /// The keys the call's questions went by (a task's keys must not repeat).
    pub(super) keys: Mutex<HashSet<String>>,
    /// The capabilities the plugin needed and the client did not declare: a call that
    /// fails after that is answered -32021 naming them (a 2026-07-28 client).
    pub(super) missing: Mutex<BTreeMap<&'static str, Value>>,
    /// Responses a sessionless client sent with the call itself (`inputResponses` without
    /// a `requestState`): a question under one of their keys is answered with it at once.
    pub(super) preset: Mutex<InputResponses>,
}

/// What a call's client can be asked and whether the call may run as a task.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Can {
    pub(super) elicit: bool,
    pub(super) elicit_url: bool,
    pub(super) sample: bool,
    pub(super) roots: bool,
    pub(super) detach: bool,
}

/// How many notifications of one call may wait to be sent.
const NOTIFICATION_QUEUE: usize = 256;

impl McpCaller {
    /// A caller for a request with `route`, of a client that can do what `can` says;
    /// `questions` for a sessionless client's call.
    pub(super) fn new(
        route: Route,
        can: Can,
        questions: Option<mpsc::Sender<Question>>,
        answer_within: Duration,
    ) -> McpCaller {
        McpCaller {
            route: Mutex::new(route),
            can_elicit: can.elicit,
            can_sample: can.sample,
            can_roots: can.roots,
            can_elicit_url: can.elicit_url,
            can_detach: can.detach,
            questions,
            answer_within,
            runtime: tokio::runtime::Handle::current(),
            sender: Mutex::new(None),
            keys: Mutex::new(HashSet::new()),
            missing: Mutex::new(BTreeMap::new()),
            preset: Mutex::new(InputResponses::new()),
        }
    }

    /// Answers the call's questions under `responses`' keys with them, as they are asked.
    #[must_use]
    pub(super) fn with_responses(self, responses: Option<InputResponses>) -> McpCaller {
        if let Some(responses) = responses {
            *self.preset.lock().unwrap_or_else(PoisonError::into_inner) = responses;
        }
        self
    }

    /// The peer the call's requests and notifications go to now.
    fn peer(&self) -> Peer<RoleServer> {
        self.route
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .peer
            .clone()
    }

    /// Sends what follows to `route` (a retry that resumed the call); what was queued
    /// for the request before is flushed first.
    pub(super) async fn rebind(&self, route: Route) {
        self.flush().await;
        *self.route.lock().unwrap_or_else(PoisonError::into_inner) = route;
    }

    /// From now on the call runs as `task`.
    pub(super) fn run_as(&self, task: TaskContext) {
        self.route
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .task = Some(task);
    }

    /// The client capabilities the call needed and the client did not declare, if any.
    pub(super) fn missing_capabilities(&self) -> Option<ClientCapabilities> {
        let missing = self.missing.lock().unwrap_or_else(PoisonError::into_inner);
        if missing.is_empty() {
            return None;
        }
        let wanted: serde_json::Map<String, Value> = missing
            .keys()
            .map(|k| ((*k).to_owned(), json!({})))
            .collect();
        serde_json::from_value(Value::Object(wanted)).ok()
    }

    /// A key for a question, unique within the call: the plugin's, or one of toolhost's.
    fn key(&self, wanted: Option<&str>) -> String {
        let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        let base = wanted.filter(|k| !k.is_empty()).unwrap_or(QUESTION_KEY);
        let mut key = base.to_owned();
        let mut n = 1;
        while keys.contains(&key) {
            n += 1;
            key = format!("{base}_{n}");
        }
        keys.insert(key.clone());
        key
    }

    /// A plugin's question as a request of this client, or why the client cannot be
    /// asked it.
    fn asked(&self, question: ClientQuestion) -> Result<(String, Asked), ServiceError> {
        let lacks = |capability: &'static str, message: &str| {
            let mut missing = self.missing.lock().unwrap_or_else(PoisonError::into_inner);
            // URL elicitation is a part of elicitation: `{"elicitation": {"url": {}}}`.
            let (name, wanted) = match capability {
                "elicitation.url" => ("elicitation", json!({"url": {}})),
                other => (other, json!({})),
            };
            let entry = missing.entry(name).or_insert_with(|| json!({}));
            if let (Some(have), Some(add)) = (entry.as_object_mut(), wanted.as_object()) {
                have.extend(add.clone());
            }
            ServiceError::Unavailable(message.to_owned())
        };
        let key = question.key().map(str::to_owned);
        let asked = match question {
            ClientQuestion::Ask { request, .. } => {
                if !self.can_elicit {
                    return Err(lacks(
                        "elicitation",
                        "this MCP client cannot be asked questions during a call (it does not \
                         support elicitation)",
                    ));
                }
                Asked::Ask(
                    elicit_params(&request.message, request.schema)
                        .map_err(|e| ServiceError::Failed(e.to_string()))?,
                )
            }
            ClientQuestion::Sample { request, .. } => {
                if !self.can_sample {
                    return Err(lacks(
                        "sampling",
                        "this MCP client offers no model to sample from (no sampling capability)",
                    ));
                }
                Asked::Sample(sampling_params(&request)?)
            }
            ClientQuestion::Url { message, url, .. } => {
                if !self.can_elicit_url {
                    return Err(lacks(
                        "elicitation.url",
                        "this MCP client cannot be asked to open a page (it does not support \
                         URL elicitation)",
                    ));
                }
                // 2026-07-28 dropped the id; a session client's protocol requires one.
                let mut params = json!({"mode": "url", "message": message, "url": url});
                if self.questions.is_none() {
                    params["elicitationId"] = json!(uuid::Uuid::new_v4().to_string());
                }
                Asked::Ask(serde_json::from_value(params).map_err(|e| {
                    ServiceError::Failed(format!("the page cannot be asked for: {e}"))
                })?)
            }
            ClientQuestion::Roots { .. } => {
                if !self.can_roots {
                    return Err(lacks(
                        "roots",
                        "this MCP client has no roots to give (no roots capability)",
                    ));
                }
                Asked::Roots
            }
            _ => {
                return Err(ServiceError::Unavailable(
                    "this host cannot ask that of an MCP client".to_owned(),
                ));
            }
        };
        Ok((self.key(key.as_deref()), asked))
    }

    /// Asks a session client `asked` as a server request and waits for its response.
    async fn request(
        peer: Peer<RoleServer>,
        asked: &Asked,
        within: Duration,
    ) -> Result<Value, ServiceError> {
        let encode = |e: serde_json::Error| {
            ServiceError::Failed(format!("the client's answer was malformed: {e}"))
        };
        match asked {
            Asked::Ask(params) => {
                let result = peer
                    .create_elicitation_with_timeout(params.clone(), Some(within))
                    .await
                    .map_err(|e| match e {
                        rmcp::ServiceError::Timeout { .. } => not_answered(within),
                        e => ServiceError::Failed(format!("the client did not answer: {e}")),
                    })?;
                serde_json::to_value(&result).map_err(encode)
            }
            Asked::Sample(params) => {
                let result = tokio::time::timeout(within, peer.create_message(params.clone()))
                    .await
                    .map_err(|_| not_answered(within))?
                    .map_err(|e| {
                        ServiceError::Failed(format!("the client's model did not answer: {e}"))
                    })?;
                serde_json::to_value(&result).map_err(encode)
            }
            Asked::Roots => {
                let result = tokio::time::timeout(within, peer.list_roots())
                    .await
                    .map_err(|_| not_answered(within))?
                    .map_err(|e| ServiceError::Failed(format!("the client gave no roots: {e}")))?;
                serde_json::to_value(&result).map_err(encode)
            }
        }
    }

    /// Sends `question` to the call's MCP request (or task) and waits for it to be
    /// answered.
    async fn hand_over<T>(
        questions: &mpsc::Sender<Question>,
        question: Question,
        answered: oneshot::Receiver<T>,
    ) -> Option<T> {
        questions.send(question).await.ok()?;
        answered.await.ok()
    }

    fn send(&self, notification: ServerNotification) {
        let peer = self.peer();
        let mut sender = self.sender.lock().unwrap_or_else(PoisonError::into_inner);
        let (tx, _) = sender.get_or_insert_with(|| {
            let (tx, mut rx) = mpsc::channel::<ServerNotification>(NOTIFICATION_QUEUE);
            let task = self.runtime.spawn(async move {
                while let Some(n) = rx.recv().await {
                    if peer.send_notification(n).await.is_err() {
                        break;
                    }
                }
            });
            (tx, task)
        });
        let _ = tx.try_send(notification);
    }

    /// Waits until every notification sent so far is out (at most 5 s; what is left then
    /// is dropped, so nothing goes out after the result).
    pub(super) async fn flush(&self) {
        let taken = self
            .sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some((tx, mut task)) = taken {
            drop(tx);
            if tokio::time::timeout(Duration::from_secs(5), &mut task)
                .await
                .is_err()
            {
                task.abort();
            }
        }
    }
}

/// A question whose schema MCP's form elicitation cannot show (its properties must be
/// flat: strings, numbers, booleans, enums).
#[derive(Debug, thiserror::Error)]
#[error("the question's schema cannot be shown as a form: {0}")]
pub(super) struct NotAForm(#[from] serde_json::Error);

/// The `elicitation/create` form asking `message` with the fields of `schema`.
pub(super) fn elicit_params(message: &str, schema: Value) -> Result<ElicitRequestParams, NotAForm> {
    Ok(serde_json::from_value(json!({
        "mode": "form",
        "message": message,
        "requestedSchema": schema,
    }))?)
}

/// The rank of an MCP log level (debug lowest), for comparing levels.
pub(super) fn level_rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        _ => 7,
    }
}

#[async_trait]
impl CallerChannel for McpCaller {
    fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let token = {
            let route = self.route.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(task) = &route.task {
                let done = match total {
                    Some(total) => format!("{progress}/{total}"),
                    None => format!("{progress}"),
                };
                task.set_status_message(match message {
                    Some(message) => format!("{done}: {message}"),
                    None => done,
                });
                return;
            }
            route.progress_token.clone()
        };
        let Some(token) = token else {
            return;
        };
        let mut param = ProgressNotificationParam::new(token, progress);
        if let Some(total) = total {
            param = param.with_total(total);
        }
        if let Some(message) = message {
            param = param.with_message(message);
        }
        self.send(ServerNotification::ProgressNotification(
            rmcp::model::ProgressNotification::new(param),
        ));
    }

    fn log(&self, level: LogLevel, tool: &str, message: &str) {
        let level = match level {
            LogLevel::ERROR => LoggingLevel::Error,
            LogLevel::WARN => LoggingLevel::Warning,
            LogLevel::INFO => LoggingLevel::Info,
            _ => LoggingLevel::Debug,
        };
        let wanted = self
            .route
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .log_level;
        if wanted.is_none_or(|min| level_rank(level) < min) {
            return;
        }
        let param = LoggingMessageNotificationParam::new(level, json!(message))
            .with_logger(tool.to_owned());
        self.send(ServerNotification::LoggingMessageNotification(
            rmcp::model::LoggingMessageNotification::new(param),
        ));
    }

    async fn ask_user(&self, request: AskRequest) -> Result<AskAnswer, ServiceError> {
        let mut answers = self.ask_client(vec![ClientQuestion::ask(request)]).await;
        answers.pop().map_or_else(
            || Err(not_answered(self.answer_within)),
            ClientAnswer::into_ask,
        )
    }

    async fn sample(&self, request: SampleRequest) -> Result<SampleAnswer, ServiceError> {
        let mut answers = self.ask_client(vec![ClientQuestion::sample(request)]).await;
        answers.pop().map_or_else(
            || Err(not_answered(self.answer_within)),
            ClientAnswer::into_sample,
        )
    }

    /// Asks everything at once: a sessionless client in one input-required result (or,
    /// for a task, in one `tasks/get`), a session client as server requests side by side.
    async fn ask_client(&self, questions: Vec<ClientQuestion>) -> Vec<ClientAnswer> {
        let mut answers: Vec<Option<ClientAnswer>> = Vec::with_capacity(questions.len());
        let mut asked: Vec<(usize, String, Asked)> = Vec::new();
        for (i, question) in questions.into_iter().enumerate() {
            match self.asked(question) {
                Ok((key, request)) => {
                    asked.push((i, key, request));
                    answers.push(None);
                }
                Err(e) => answers.push(Some(e.into())),
            }
        }
        if !asked.is_empty() {
            let responses: Vec<Result<Value, ServiceError>> = match &self.questions {
                Some(questions) => {
                    let mut requests = Vec::with_capacity(asked.len());
                    for (_, key, request) in &asked {
                        match request.input_request() {
                            Ok(input) => requests.push((key.clone(), input)),
                            Err(e) => return vec![e.into(); answers.len()],
                        }
                    }
                    // What the client answered up front is not asked again.
                    let got: Vec<Option<Value>> = {
                        let mut preset = self.preset.lock().unwrap_or_else(PoisonError::into_inner);
                        requests
                            .iter()
                            .map(|(key, request)| {
                                preset.remove(key).filter(|r| is_response(request, r))
                            })
                            .collect()
                    };
                    let got = if got.iter().all(Option::is_some) {
                        Some(got)
                    } else {
                        let (answer, answered) = oneshot::channel();
                        let inputs = Inputs {
                            got,
                            asked: requests,
                            answer,
                        };
                        Self::hand_over(questions, Question::Inputs(inputs), answered).await
                    };
                    match got {
                        Some(got) => got
                            .into_iter()
                            .map(|v| v.ok_or_else(|| not_answered(self.answer_within)))
                            .collect(),
                        None => vec![Err(not_answered(self.answer_within)); asked.len()],
                    }
                }
                None => {
                    let waits: Vec<_> = asked
                        .iter()
                        .map(|(_, _, request)| {
                            let peer = self.peer();
                            let within = self.answer_within;
                            let request = request.clone();
                            self.runtime
                                .spawn(async move { Self::request(peer, &request, within).await })
                        })
                        .collect();
                    let mut responses = Vec::with_capacity(waits.len());
                    for wait in waits {
                        responses.push(wait.await.unwrap_or_else(|e| {
                            Err(ServiceError::Failed(format!(
                                "asking the client failed: {e}"
                            )))
                        }));
                    }
                    responses
                }
            };
            for ((i, _, request), response) in asked.iter().zip(responses) {
                answers[*i] = Some(match response {
                    Ok(value) => request.answer(value),
                    Err(e) => e.into(),
                });
            }
        }
        answers
            .into_iter()
            .map(|a| a.unwrap_or_else(|| not_answered(self.answer_within).into()))
            .collect()
    }

    async fn detach(&self) -> bool {
        let (true, Some(questions)) = (self.can_detach, &self.questions) else {
            return false;
        };
        let (ack, acked) = oneshot::channel();
        Self::hand_over(questions, Question::Detach(ack), acked)
            .await
            .unwrap_or(false)
    }
}

/// What a plugin is told when its question went unanswered.
fn not_answered(within: Duration) -> ServiceError {
    ServiceError::Failed(format!(
        "the MCP client did not answer within {} ([mcp] client_answer_secs), or the call \
         was cancelled",
        crate::text::duration(within)
    ))
}

/// A client's answer to an elicitation (`{"action", "content"}`) as the plugin reads it.
pub(super) fn ask_answer(answer: Value) -> Result<AskAnswer, ServiceError> {
    serde_json::from_value(answer)
        .map_err(|e| ServiceError::Failed(format!("the client's answer was malformed: {e}")))
}

/// The `sampling/createMessage` parameters for a plugin's request.
pub(super) fn sampling_params(
    request: &SampleRequest,
) -> Result<CreateMessageRequestParams, ServiceError> {
    let mut params = json!({
        "messages": [{"role": "user", "content": {"type": "text", "text": request.prompt}}],
        "maxTokens": request.max_tokens,
    });
    if let Some(system) = &request.system {
        params["systemPrompt"] = json!(system);
    }
    serde_json::from_value(params)
        .map_err(|e| ServiceError::Failed(format!("malformed sampling request: {e}")))
}

/// A client's sampling result as the plugin reads it: its text blocks joined, and the
/// model that wrote them.
pub(super) fn sample_answer(result: Value) -> Result<SampleAnswer, ServiceError> {
    let sampled = serde_json::from_value::<Sampled>(result)
        .map_err(|e| ServiceError::Failed(format!("unreadable sampling result: {e}")))?;
    let text = match sampled.content {
        Some(SampledContent::Blocks(blocks)) => blocks
            .iter()
            .filter_map(TextBlock::text)
            .collect::<String>(),
        Some(SampledContent::Block(block)) => block.text().unwrap_or_default().to_owned(),
        None => String::new(),
    };
    Ok(SampleAnswer {
        text,
        model: sampled.model.and_then(|m| m.as_str().map(str::to_owned)),
    })
}

/// What is read of a client's sampling result: its text blocks (one block, or several
/// in newer protocol versions) and the model that wrote them.
#[derive(serde::Deserialize)]
struct Sampled {
    #[serde(default)]
    content: Option<SampledContent>,
    #[serde(default)]
    model: Option<Value>,
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum SampledContent {
    Blocks(Vec<TextBlock>),
    Block(TextBlock),
}

/// A content block; only text blocks have text (images and audio are left out).
#[derive(serde::Deserialize)]
struct TextBlock {
    #[serde(default)]
    text: Option<Value>,
}

impl TextBlock {
    fn text(&self) -> Option<&str> {
        self.text.as_ref().and_then(Value::as_str)
    }
}
