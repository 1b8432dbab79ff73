//! What a call asks of its caller's client beyond one question (plugin-api 0.1.4): several
//! things at once, each under a name of the tool's choosing, the client's roots, and
//! whether the call may go on as a task the client polls.

use serde::{Deserialize, Serialize};

use crate::{AskAnswer, AskRequest, SampleAnswer, SampleRequest, ServiceError};

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

    /// This question under the name `key`.
    #[must_use]
    pub fn keyed(mut self, name: impl Into<String>) -> Self {
        let name = Some(name.into());
        match &mut self {
            ClientQuestion::Ask { key, .. }
            | ClientQuestion::Sample { key, .. }
            | ClientQuestion::Roots { key } => *key = name,
        }
        self
    }

    /// The question's name, if it has one.
    pub fn key(&self) -> Option<&str> {
        match self {
            ClientQuestion::Ask { key, .. }
            | ClientQuestion::Sample { key, .. }
            | ClientQuestion::Roots { key } => key.as_deref(),
        }
    }
}

/// The client's answer to one [`ClientQuestion`], or why there is none. In JSON, an object
/// with one key: `ask`, `sample`, `roots`, `unavailable` or `failed`.
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
    /// The person's answer.
    Ask(AskAnswer),
    /// The model's completion.
    Sample(SampleAnswer),
    /// The client's roots.
    Roots(RootsAnswer),
    /// The caller cannot be asked this (see [`ServiceError::Unavailable`]).
    Unavailable(String),
    /// It was asked and no answer came (see [`ServiceError::Failed`]).
    Failed(String),
}

impl From<ServiceError> for ClientAnswer {
    fn from(e: ServiceError) -> Self {
        match e {
            ServiceError::Unavailable(m) => ClientAnswer::Unavailable(m),
            ServiceError::Failed(m) => ClientAnswer::Failed(m),
        }
    }
}

impl ClientAnswer {
    fn other(self, wanted: &str) -> ServiceError {
        match self {
            ClientAnswer::Unavailable(m) => ServiceError::Unavailable(m),
            ClientAnswer::Failed(m) => ServiceError::Failed(m),
            _ => ServiceError::Failed(format!(
                "the host answered with something else than {wanted}"
            )),
        }
    }

    /// The person's answer, or why there is none.
    pub fn into_ask(self) -> Result<AskAnswer, ServiceError> {
        match self {
            ClientAnswer::Ask(answer) => Ok(answer),
            other => Err(other.other("an answer")),
        }
    }

    /// The model's completion, or why there is none.
    pub fn into_sample(self) -> Result<SampleAnswer, ServiceError> {
        match self {
            ClientAnswer::Sample(answer) => Ok(answer),
            other => Err(other.other("a completion")),
        }
    }

    /// The client's roots, or why there are none.
    pub fn into_roots(self) -> Result<Vec<Root>, ServiceError> {
        match self {
            ClientAnswer::Roots(answer) => Ok(answer.roots),
            other => Err(other.other("roots")),
        }
    }
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
    /// As `Optional`, and a caller that cannot hold tasks is refused before the tool runs
    /// (an MCP client without the tasks extension gets error -32021).
    Required,
}

impl TaskSupport {
    /// Whether the tool may run as a task at all.
    pub fn supported(self) -> bool {
        self != TaskSupport::Forbidden
    }
}
