//! The `clarify` tool: asks the person a question (in the chat terminal, or as an MCP
//! elicitation form) and returns the answer. Interactive: calls in the same batch run one
//! at a time around it. With no person attached it fails, saying so.

use serde::Deserialize;
use serde_json::json;
use toolhost_plugin_api::{
    AskAnswer, AskRequest, Risk, ServiceError, ToolContext, ToolError, TypedTool, export_plugin,
};

/// Arguments of `clarify`.
#[derive(Deserialize, schemars::JsonSchema)]
struct ClarifyArgs {
    /// The question, short and specific.
    question: String,
    /// Answers to choose from, if the question has a fixed set.
    #[serde(default)]
    choices: Option<Vec<String>>,
}

/// The form's content: the `answer` property the request's schema asks for.
#[derive(Deserialize)]
struct Answer {
    answer: String,
}

struct Clarify;

impl TypedTool for Clarify {
    type Args = ClarifyArgs;

    fn name(&self) -> &str {
        "clarify"
    }

    fn description(&self) -> &str {
        "Asks the person a question and waits for the answer. Use it when the request is \
         ambiguous and guessing would waste their time; offer `choices` when the answer is \
         one of a few options."
    }

    fn risk(&self) -> Risk {
        Risk::Read
    }

    fn interactive(&self) -> bool {
        true
    }

    async fn run(&self, ctx: &ToolContext<'_>, args: ClarifyArgs) -> Result<String, ToolError> {
        let answer_schema = match &args.choices {
            Some(choices) if !choices.is_empty() => {
                json!({"type": "string", "title": "Answer", "enum": choices})
            }
            _ => json!({"type": "string", "title": "Answer"}),
        };
        let request = AskRequest {
            message: args.question,
            schema: json!({
                "type": "object",
                "properties": {"answer": answer_schema},
                "required": ["answer"]
            }),
        };
        match ctx.ask_user(&request).await {
            // An answer that is not text (a client that ignored the schema) reads as none.
            Ok(AskAnswer::Accept { content }) => Ok(serde_json::from_value::<Answer>(content)
                .map(|a| a.answer)
                .unwrap_or_default()),
            Ok(AskAnswer::Decline | AskAnswer::Cancel) => Err(ToolError::failed(
                "the person chose not to answer; go on with your best judgement and say \
                 what you assumed",
            )),
            Err(ServiceError::Unavailable(why)) => Err(ToolError::failed(format!(
                "no person is attached to answer ({why}); go on with your best judgement \
                 and say what you assumed"
            ))),
            Err(ServiceError::Failed(why)) => Err(ToolError::failed(format!(
                "the question could not be asked: {why}"
            ))),
        }
    }
}

export_plugin! {
    name: "clarify",
    version: env!("CARGO_PKG_VERSION"),
    tools: [Clarify],
}
