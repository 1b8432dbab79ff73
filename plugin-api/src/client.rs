//! What a call asks of the person and the client behind it: a question for the person, a
//! completion of the caller's model, and (plugin-api 0.1.4) several things at once, each
//! under a name of the tool's choosing, the client's roots, and whether the call may go on
//! as a task the client polls. Data only: the services that send them are `ToolContext`'s.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One thing a call asks its client (see [`ToolContext::ask_client`]). In JSON,
/// `{"kind": "ask", "key": ..., "message": ..., "schema": ...}`,
/// `{"kind": "sample", "key": ..., "prompt": ..., ...}` or `{"kind": "roots", "key": ...}`.
///
/// `key` names the question for the client: an MCP 2026-07-28 client sees it as the key
/// of the result's `inputRequests` (and answers under it); elsewhere it is not shown. The
/// host names a question that has none, and makes a name that the call already used unique.
///
/// ```
/// use toolhost_plugin_api::{AskRequest, ClientQuestion};
///
/// let question = ClientQuestion::ask(AskRequest::text("What is your name?")).keyed("user_name");
/// assert_eq!(question.key(), Some("user_name"));
/// let json = serde_json::to_value(&question).unwrap();
/// assert_eq!((json["kind"].as_str(), json["key"].as_str()), (Some("ask"), Some("user_name")));
/// let roots: ClientQuestion = serde_json::from_str(r#"{"kind": "roots"}"#).unwrap();
/// assert_eq!(roots, ClientQuestion::roots());
/// ```
///
/// [`ToolContext::ask_client`]: crate::ToolContext::ask_client
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
#[non_exhaustive]
pub enum ClientQuestion {
    /// A question for the person (MCP elicitation), as [`ToolContext::ask_user`] asks.
    ///
    /// [`ToolContext::ask_user`]: crate::ToolContext::ask_user
    Ask {
        /// The question's name; see the type's documentation.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
        /// The question.
        #[serde(flatten)]
        request: AskRequest,
    },
    /// A completion of the client's model (MCP sampling), as [`ToolContext::sample`] asks.
    ///
    /// [`ToolContext::sample`]: crate::ToolContext::sample
    Sample {
        /// The question's name; see the type's documentation.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
        /// The request.
        #[serde(flatten)]
        request: SampleRequest,
    },
    /// A page for the person to open (MCP URL elicitation): a sign-in or a payment the
    /// tool cannot ask for in a form. The answer says whether they went (`Accept`, no
    /// content), refused or dismissed it; the tool learns the outcome from its own service.
    Url {
        /// The question's name; see the type's documentation.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
        /// Why they are asked to open it.
        message: String,
        /// The page.
        url: String,
    },
    /// The folders the client works in (MCP `roots/list`).
    Roots {
        /// The question's name; see the type's documentation.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
    },
}

impl ClientQuestion {
    /// A question for the person.
    pub fn ask(request: AskRequest) -> Self {
        ClientQuestion::Ask { key: None, request }
    }

    /// A completion of the client's model.
    pub fn sample(request: SampleRequest) -> Self {
        ClientQuestion::Sample { key: None, request }
    }

    /// The client's roots.
    pub fn roots() -> Self {
        ClientQuestion::Roots { key: None }
    }

    /// A page for the person to open, and why.
    ///
    /// ```
    /// use toolhost_plugin_api::ClientQuestion;
    ///
    /// let sign_in = ClientQuestion::url("Sign in to the tracker", "https://tracker.example/login");
    /// assert_eq!(serde_json::to_value(&sign_in).unwrap()["kind"], "url");
    /// ```
    pub fn url(message: impl Into<String>, url: impl Into<String>) -> Self {
        ClientQuestion::Url {
            key: None,
            message: message.into(),
            url: url.into(),
        }
    }

    /// How a caller that can only ask in words (a terminal) asks a [`ClientQuestion::Url`]
    /// question: the message and the page, answered yes or no.
    pub fn url_as_text(message: &str, url: &str) -> AskRequest {
        AskRequest {
            message: format!("{message}\n\nOpen: {url}"),
            schema: serde_json::json!({"type": "object", "properties": {}}),
        }
    }

    /// This question under the name `key`.
    #[must_use]
    pub fn keyed(mut self, name: impl Into<String>) -> Self {
        let name = Some(name.into());
        match &mut self {
            ClientQuestion::Ask { key, .. }
            | ClientQuestion::Sample { key, .. }
            | ClientQuestion::Url { key, .. }
            | ClientQuestion::Roots { key } => *key = name,
        }
        self
    }

    /// The question's name, if it has one.
    pub fn key(&self) -> Option<&str> {
        match self {
            ClientQuestion::Ask { key, .. }
            | ClientQuestion::Sample { key, .. }
            | ClientQuestion::Url { key, .. }
            | ClientQuestion::Roots { key } => key.as_deref(),
        }
    }
}

/// The client's answer to one [`ClientQuestion`], or why there is none. In JSON, an object
/// with one key: `ask`, `sample`, `roots`, `unavailable` or `failed`. `into_ask`,
/// `into_sample` and `into_roots` read it as the answer expected, or the error.
///
/// ```
/// use toolhost_plugin_api::{AskAnswer, ClientAnswer, ServiceError};
///
/// let answer: ClientAnswer =
///     serde_json::from_str(r#"{"ask": {"action": "accept", "content": {"name": "Ada"}}}"#)
///         .unwrap();
/// assert!(matches!(answer.clone().into_ask(), Ok(AskAnswer::Accept { .. })));
/// assert!(matches!(answer.into_roots(), Err(ServiceError::Failed(_))));
/// let none: ClientAnswer = serde_json::from_str(r#"{"unavailable": "no roots"}"#).unwrap();
/// assert_eq!(none.into_sample(), Err(ServiceError::Unavailable("no roots".into())));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum ClientAnswer {
    /// The person's answer (to a question, or to a page to open).
    Ask(AskAnswer),
    /// The model's completion.
    Sample(SampleAnswer),
    /// The client's roots.
    Roots(RootsAnswer),
    /// The caller cannot be asked this (see
    /// [`ServiceError::Unavailable`](crate::ServiceError::Unavailable)).
    Unavailable(String),
    /// It was asked and no answer came (see
    /// [`ServiceError::Failed`](crate::ServiceError::Failed)).
    Failed(String),
}

/// The client's roots: `{"roots": [{"uri": "file:///...", "name": "..."}]}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RootsAnswer {
    /// The folders, as the client gave them.
    #[serde(default)]
    pub roots: Vec<Root>,
}

/// One folder the client works in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Root {
    /// Its URI (MCP clients give `file://` URIs).
    pub uri: String,
    /// A name for people, if the client gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// The parameters of `client.ask`: `{"questions": [...]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientQuestions {
    /// What is asked, in order.
    #[serde(default)]
    pub questions: Vec<ClientQuestion>,
}

/// The answer to `client.ask`: one [`ClientAnswer`] per question, in the same order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientAnswers {
    /// The answers.
    #[serde(default)]
    pub answers: Vec<ClientAnswer>,
}

/// The answer to `call.detach`: whether the call now runs as a task its client polls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DetachAnswer {
    /// `true`: the caller has been answered with the task and no longer waits; `false`:
    /// the call goes on as before (its caller cannot hold tasks, or the tool does not
    /// declare task support).
    #[serde(default)]
    pub detached: bool,
}

/// Whether a tool's calls may run as tasks: MCP's tasks extension, where the client gets a
/// handle at once and polls it for the result (see [`Requirements::task`]). In JSON,
/// `"forbidden"`, `"optional"` or `"required"`.
///
/// [`Requirements::task`]: crate::Requirements::task
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskSupport {
    /// The caller always waits for the result (the default).
    #[default]
    Forbidden,
    /// A call becomes a task when the tool calls [`ToolContext::detach`] and its caller
    /// can hold tasks; other callers wait as for any tool.
    ///
    /// [`ToolContext::detach`]: crate::ToolContext::detach
    Optional,
    /// As `Optional`, and an MCP 2026-07-28 client without the tasks extension is refused
    /// before the tool runs (error -32021); other callers (the CLI, the agent, clients of
    /// earlier protocols, which have no tasks) wait for the result as for any tool.
    Required,
}

impl TaskSupport {
    /// Whether the tool may run as a task at all.
    pub fn supported(self) -> bool {
        self != TaskSupport::Forbidden
    }
}

/// A question for the person behind the call (see
/// [`ToolContext::ask_user`](crate::ToolContext::ask_user)):
/// `{"message", "schema"}`.
///
/// Callers differ in what they can show. An MCP client shows the schema as a form (MCP
/// elicitation). toolhost's chat terminal asks for one line whatever the schema, offers
/// the `enum` of a property named `answer` as the choices, and answers
/// `{"answer": "<the line>"}` (an empty line declines). So a question whose only property
/// is a string `answer`, like [`AskRequest::text`]'s, gets the same shape everywhere.
///
/// ```
/// use toolhost_plugin_api::AskRequest;
/// use serde_json::json;
///
/// let question = AskRequest {
///     message: "Which branch should I deploy?".into(),
///     schema: json!({
///         "type": "object",
///         "properties": {"answer": {"type": "string", "enum": ["main", "staging"]}},
///         "required": ["answer"]
///     }),
/// };
/// # let _ = question;
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AskRequest {
    /// What the person reads.
    #[serde(default)]
    pub message: String,
    /// The answer's shape: a JSON Schema of type `object` whose properties are strings,
    /// numbers, integers, booleans or string enums (what MCP elicitation can show as a form).
    /// An empty object schema asks for a plain yes or no.
    #[serde(default = "crate::lenient::empty_object_schema")]
    pub schema: Value,
}

impl AskRequest {
    /// A question whose answer is one line of text (property `answer`).
    ///
    /// ```
    /// use toolhost_plugin_api::AskRequest;
    ///
    /// let question = AskRequest::text("What should the new file be called?");
    /// assert_eq!(question.schema["required"], serde_json::json!(["answer"]));
    /// ```
    pub fn text(message: impl Into<String>) -> Self {
        AskRequest {
            message: message.into(),
            schema: serde_json::json!({
                "type": "object",
                "properties": {"answer": {"type": "string", "description": "Your answer"}},
                "required": ["answer"]
            }),
        }
    }
}

/// The person's answer to an [`AskRequest`]. In JSON,
/// `{"action": "accept", "content": {...}}`, `{"action": "decline"}` or
/// `{"action": "cancel"}`.
///
/// ```
/// use toolhost_plugin_api::AskAnswer;
///
/// let answer: AskAnswer =
///     serde_json::from_str(r#"{"action": "accept", "content": {"answer": "main"}}"#).unwrap();
/// let branch = match &answer {
///     AskAnswer::Accept { content } => content["answer"].as_str(),
///     AskAnswer::Decline | AskAnswer::Cancel => None,
/// };
/// assert_eq!(branch, Some("main"));
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(tag = "action", rename_all = "lowercase")]
pub enum AskAnswer {
    /// They answered; `content` follows the request's schema.
    Accept {
        /// The answer.
        #[serde(default)]
        content: Value,
    },
    /// They refused to answer.
    Decline,
    /// They dismissed the question without choosing.
    Cancel,
}

/// A completion asked of the caller's model (see
/// [`ToolContext::sample`](crate::ToolContext::sample)):
/// `{"prompt", "system", "max_tokens"}`.
///
/// ```
/// use toolhost_plugin_api::SampleRequest;
///
/// let request = SampleRequest {
///     prompt: "Give this commit a one-line title: ...".into(),
///     system: Some("You write terse git commit titles.".into()),
///     max_tokens: 60,
/// };
/// # let _ = request;
/// let read: SampleRequest = serde_json::from_str(r#"{"prompt": "hi"}"#).unwrap();
/// assert_eq!(read.max_tokens, 1000);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleRequest {
    /// The user message the model answers.
    #[serde(default)]
    pub prompt: String,
    /// An optional system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The most tokens the answer may have.
    #[serde(default = "crate::lenient::thousand")]
    pub max_tokens: u32,
}

/// The caller's model's answer to a [`SampleRequest`]: `{"text", "model"}`.
///
/// ```
/// use toolhost_plugin_api::SampleAnswer;
///
/// let answer: SampleAnswer = serde_json::from_str(r#"{"text": "Fix typo"}"#).unwrap();
/// assert_eq!((answer.text.as_str(), answer.model), ("Fix typo", None));
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct SampleAnswer {
    /// The text it wrote.
    pub text: String,
    /// The model that wrote it, if the caller said.
    #[serde(default)]
    pub model: Option<String>,
}
