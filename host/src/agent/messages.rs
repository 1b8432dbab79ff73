//! The conversation's messages, as the agent keeps them and the model reads them: who
//! said what, and the tool calls an assistant message asks for. The model client, its wire
//! format and the session store all build on these.

use serde::{Deserialize, Serialize};

use toolhost_calls::details::Details;

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions for the model.
    System,
    /// The person.
    User,
    /// The model.
    Assistant,
    /// A tool's result.
    Tool,
}

/// A tool call the model asked for, as it came (arguments as the model wrote them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelToolCall {
    /// The model's id for the call.
    pub id: String,
    /// The tool.
    pub name: String,
    /// The arguments, JSON text (possibly malformed: the model wrote it).
    pub arguments: String,
}

/// One message of a conversation. Two messages are equal when they say the same thing;
/// where they are stored ([`Message::id`]) is not compared.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Message {
    /// Who said it.
    pub role: Role,
    /// The text (an assistant message that only calls tools may have none).
    pub content: Option<String>,
    /// The tool calls an assistant message asks for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ModelToolCall>,
    /// For a tool message: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For a tool message: the result's details (JSON object by kind), kept in the session
    /// store and never sent to the model.
    #[serde(default, skip_serializing_if = "Details::is_empty")]
    pub details: Details,
    /// Its row in the session store (`None` until it is stored): how the store finds it
    /// again. A cut result's full text is not here: the profile's kept outputs hold it,
    /// under the id its [`FullOutput`](toolhost_calls::details::FullOutput) detail names.
    #[serde(skip)]
    pub id: Option<i64>,
}

impl PartialEq for Message {
    fn eq(&self, other: &Message) -> bool {
        self.role == other.role
            && self.content == other.content
            && self.tool_calls == other.tool_calls
            && self.tool_call_id == other.tool_call_id
            && self.details == other.details
    }
}

impl Message {
    /// A message with text only.
    pub fn text(role: Role, content: impl Into<String>) -> Message {
        Message {
            role,
            content: Some(content.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
            details: Details::new(),
            id: None,
        }
    }

    /// A tool's result for call `id`.
    pub fn tool_result(id: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            role: Role::Tool,
            content: Some(content.into()),
            tool_calls: Vec::new(),
            tool_call_id: Some(id.into()),
            details: Details::new(),
            id: None,
        }
    }
}

/// What the model server reported a request cost (`usage` of a Chat Completions answer).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens of the request (the conversation and the tool specs), as the server counted.
    pub prompt_tokens: u64,
    /// Tokens of the answer.
    pub completion_tokens: u64,
}
