//! The caller channel of an MCP call: progress and log notifications (in order, through
//! one sender task), questions through elicitation and completions through sampling: as
//! server requests to a session client, or, for a sessionless 2026-07-28 client, as
//! questions the call waits on while the client is sent an input-required result
//! ([`super::suspended`]).

#![allow(
    deprecated,
    reason = "SEP-2577 deprecates MCP logging and sampling, but 2025-11-25 clients (most \
              clients today) still use them"
)]

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use rmcp::model::{
    CreateMessageRequest, CreateMessageRequestParams, ElicitRequest, ElicitRequestParams,
    InputRequest, InputResponses, LoggingLevel, LoggingMessageNotificationParam,
    ProgressNotificationParam, ProgressToken, ServerNotification,
};
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use toolhost_plugin_api::{
    AskAnswer, AskRequest, LogLevel, SampleAnswer, SampleRequest, ServiceError,
};

use toolhost_calls::context::CallerChannel;

/// Where a call's notifications go: the request it is answering now (a suspended call
/// resumed by a retry answers the retry).
pub(super) struct Route {
    pub(super) peer: Peer<RoleServer>,
    pub(super) progress_token: Option<ProgressToken>,
    /// The lowest log level the client wants for this call; `None`: no log lines.
    pub(super) log_level: Option<u8>,
}

/// A plugin's question or sampling request to a sessionless client, waiting for the
/// client's retry to answer it.
pub(super) enum Question {
    Ask {
        request: AskRequest,
        answer: oneshot::Sender<Result<AskAnswer, ServiceError>>,
    },
    Sample {
        request: SampleRequest,
        answer: oneshot::Sender<Result<SampleAnswer, ServiceError>>,
    },
}

/// The key of a plugin's question in an input-required result.
pub(super) const QUESTION_KEY: &str = "toolhost_question";

impl Question {
    /// The question as the client is asked it: an elicitation form, or a sampling
    /// request.
    pub(super) fn input_request(&self) -> Result<InputRequest, ServiceError> {
        Ok(match self {
            Question::Ask { request, .. } => InputRequest::Elicitation(ElicitRequest::new(
                elicit_params(&request.message, request.schema.clone())
                    .map_err(|e| ServiceError::Failed(e.to_string()))?,
            )),
            Question::Sample { request, .. } => {
                InputRequest::CreateMessage(CreateMessageRequest::new(sampling_params(request)?))
            }
        })
    }

    /// Answers the plugin with the client's `responses` (its retry's `inputResponses`).
    pub(super) fn answer(self, responses: Option<&InputResponses>) {
        let response = responses.and_then(|r| r.get(QUESTION_KEY)).cloned();
        let missing = || {
            ServiceError::Failed(
                "the MCP client called again without answering the question (no \
                 inputResponses entry for it)"
                    .to_owned(),
            )
        };
        match self {
            Question::Ask { answer, .. } => {
                let _ = answer.send(response.ok_or_else(missing).and_then(ask_answer));
            }
            Question::Sample { answer, .. } => {
                let _ = answer.send(response.ok_or_else(missing).and_then(sample_answer));
            }
        }
    }

    /// Answers the plugin with `error` instead of the client.
    pub(super) fn fail(self, error: ServiceError) {
        match self {
            Question::Ask { answer, .. } => {
                let _ = answer.send(Err(error));
            }
            Question::Sample { answer, .. } => {
                let _ = answer.send(Err(error));
            }
        }
    }
}

/// Routes a call's progress, log notifications, questions and sampling to the MCP client.
pub(super) struct McpCaller {
    pub(super) route: Mutex<Route>,
    pub(super) can_elicit: bool,
    pub(super) can_sample: bool,
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
}

/// How many notifications of one call may wait to be sent.
const NOTIFICATION_QUEUE: usize = 256;

impl McpCaller {
    /// The peer the call's requests and notifications go to now.
    fn peer(&self) -> Peer<RoleServer> {
        self.route
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .peer
            .clone()
    }

    /// Hands `question` to the call's MCP request (which sends the client an
    /// input-required result) and waits for the client's retry to answer it.
    async fn wait<T>(
        &self,
        questions: &mpsc::Sender<Question>,
        question: Question,
        answered: oneshot::Receiver<Result<T, ServiceError>>,
    ) -> Result<T, ServiceError> {
        questions.send(question).await.map_err(|_| {
            ServiceError::Failed("the MCP request of this call has ended; nobody can answer".into())
        })?;
        answered
            .await
            .unwrap_or_else(|_| Err(not_answered(self.answer_within)))
    }

    /// Sends what follows to `route` (a retry that resumed the call); what was queued
    /// for the request before is flushed first.
    pub(super) async fn rebind(&self, route: Route) {
        self.flush().await;
        *self.route.lock().unwrap_or_else(PoisonError::into_inner) = route;
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
        let token = self
            .route
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .progress_token
            .clone();
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
        if !self.can_elicit {
            return Err(ServiceError::Unavailable(
                "this MCP client cannot be asked questions during a call (it does not support \
                 elicitation)"
                    .to_owned(),
            ));
        }
        if let Some(questions) = &self.questions {
            let (answer, answered) = oneshot::channel();
            return self
                .wait(questions, Question::Ask { request, answer }, answered)
                .await;
        }
        let params = elicit_params(&request.message, request.schema)
            .map_err(|e| ServiceError::Failed(e.to_string()))?;
        let result = self
            .peer()
            .create_elicitation_with_timeout(params, Some(self.answer_within))
            .await
            .map_err(|e| match e {
                rmcp::ServiceError::Timeout { .. } => not_answered(self.answer_within),
                e => ServiceError::Failed(format!("the client did not answer: {e}")),
            })?;
        let answer = serde_json::to_value(&result)
            .map_err(|e| ServiceError::Failed(format!("the client's answer was malformed: {e}")))?;
        ask_answer(answer)
    }

    async fn sample(&self, request: SampleRequest) -> Result<SampleAnswer, ServiceError> {
        if !self.can_sample {
            return Err(ServiceError::Unavailable(
                "this MCP client offers no model to sample from (no sampling capability)"
                    .to_owned(),
            ));
        }
        if let Some(questions) = &self.questions {
            let (answer, answered) = oneshot::channel();
            return self
                .wait(questions, Question::Sample { request, answer }, answered)
                .await;
        }
        let params = sampling_params(&request)?;
        #[allow(
            deprecated,
            reason = "sampling is how MCP tools reach the client's model"
        )]
        let peer = self.peer();
        let result = tokio::time::timeout(self.answer_within, peer.create_message(params))
            .await
            .map_err(|_| not_answered(self.answer_within))?
            .map_err(|e| ServiceError::Failed(format!("the client's model did not answer: {e}")))?;
        let sampled = serde_json::to_value(&result)
            .map_err(|e| ServiceError::Failed(format!("unreadable sampling result: {e}")))?;
        sample_answer(sampled)
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
