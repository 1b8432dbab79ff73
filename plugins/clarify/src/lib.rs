//! The `clarify` tool: asks the person a question (in the chat terminal, or as an MCP
//! elicitation form) and returns the answer. Interactive: calls in the same batch run one
//! at a time around it. With no person attached it fails, saying so.

use serde::Deserialize;
use serde_json::json;
use toolhost_plugin_api::{
    AskAnswer, AskRequest, ServiceError, ToolContext, ToolError, export_plugin, tool,
};

/// The form's content: the `answer` property the request's schema asks for.
#[derive(Deserialize)]
struct Answer {
    answer: String,
}

/// Asks the person a question and waits for the answer. Use it when the request is
/// ambiguous and guessing would waste their time; offer `choices` when the answer is one
/// of a few options.
#[tool(risk = read, interactive)]
async fn clarify(
    ctx: &ToolContext<'_>,
    /// The question, short and specific.
    question: String,
    /// Answers to choose from, if the question has a fixed set.
    choices: Option<Vec<String>>,
) -> Result<String, ToolError> {
    let answer_schema = match &choices {
        Some(choices) if !choices.is_empty() => {
            json!({"type": "string", "title": "Answer", "enum": choices})
        }
        _ => json!({"type": "string", "title": "Answer"}),
    };
    let request = AskRequest {
        message: question,
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
            "the person chose not to answer; go on with your best judgement and say what \
             you assumed",
        )),
        Err(ServiceError::Unavailable(why)) => Err(ToolError::failed(format!(
            "no person is attached to answer ({why}); go on with your best judgement and say \
             what you assumed"
        ))),
        Err(ServiceError::Failed(why)) => Err(ToolError::failed(format!(
            "the question could not be asked: {why}"
        ))),
    }
}

export_plugin! {
    name: "clarify",
    version: env!("CARGO_PKG_VERSION"),
    tools: [clarify],
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use serde_json::{Value, json};
    use toolhost_plugin_api::testing::{TestHost, call};
    use toolhost_plugin_api::{AskAnswer, AskRequest, Risk, ServiceError, ToolError};

    use super::clarify;

    fn answering(answer: AskAnswer) -> TestHost {
        TestHost::new().on_ask(move |_: &AskRequest| Ok(answer.clone()))
    }

    #[test]
    fn is_an_interactive_read_tool_that_needs_a_question() {
        let info = TestHost::new().describe(&clarify);
        assert_eq!(info.name, "clarify");
        assert_eq!(info.risk, Risk::Read);
        assert!(info.interactive);
        assert_eq!(info.schema["required"], json!(["question"]));
        assert!(info.schema["properties"]["choices"].is_object());
    }

    #[test]
    fn returns_the_persons_answer_to_the_question_asked() {
        let host = answering(AskAnswer::Accept {
            content: json!({"answer": "the blue one"}),
        });
        let out = host.call(&clarify, json!({"question": "Which file?"}));
        assert_eq!(out, Ok("the blue one".to_owned()));
        let asked = host.asked();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].message, "Which file?");
        assert_eq!(asked[0].schema["required"], json!(["answer"]));
        assert_eq!(
            asked[0].schema["properties"]["answer"],
            json!({"type": "string", "title": "Answer"})
        );
    }

    #[test]
    fn offers_the_choices_as_an_enum_and_no_enum_for_an_empty_list() {
        let host = answering(AskAnswer::Accept {
            content: json!({"answer": "b"}),
        });
        let out = host.call(
            &clarify,
            json!({"question": "a or b?", "choices": ["a", "b"]}),
        );
        assert_eq!(out, Ok("b".to_owned()));
        let out = host.call(&clarify, json!({"question": "anything?", "choices": []}));
        assert_eq!(out, Ok("b".to_owned()));
        let schemas: Vec<Value> = host
            .asked()
            .into_iter()
            .map(|q| q.schema["properties"]["answer"].clone())
            .collect();
        assert_eq!(
            schemas,
            [
                json!({"type": "string", "title": "Answer", "enum": ["a", "b"]}),
                json!({"type": "string", "title": "Answer"}),
            ]
        );
    }

    #[test]
    fn an_answer_that_is_not_text_reads_as_none() {
        for content in [json!({"answer": 42}), json!({}), json!("yes")] {
            let host = answering(AskAnswer::Accept { content });
            assert_eq!(
                host.call(&clarify, json!({"question": "?"})),
                Ok(String::new())
            );
        }
    }

    #[test]
    fn decline_and_cancel_tell_the_model_to_go_on() {
        for answer in [AskAnswer::Decline, AskAnswer::Cancel] {
            let out = answering(answer.clone()).call(&clarify, json!({"question": "?"}));
            assert_eq!(
                out,
                Err(ToolError::Failed(
                    "the person chose not to answer; go on with your best judgement and say \
                     what you assumed"
                        .to_owned()
                )),
                "{answer:?}"
            );
        }
    }

    #[test]
    fn with_nobody_to_ask_it_says_so() {
        let out = call(&clarify, json!({"question": "?"}));
        let Err(ToolError::Failed(message)) = out else {
            panic!("{out:?}");
        };
        assert!(
            message
                .starts_with("no person is attached to answer (asking the person is not available"),
            "{message}"
        );
        assert!(message.ends_with("go on with your best judgement and say what you assumed"));
    }

    #[test]
    fn a_failed_question_is_reported() {
        let host = TestHost::new()
            .on_ask(|_: &AskRequest| Err(ServiceError::Failed("the form timed out".to_owned())));
        assert_eq!(
            host.call(&clarify, json!({"question": "?"})),
            Err(ToolError::Failed(
                "the question could not be asked: the form timed out".to_owned()
            ))
        );
    }

    #[test]
    fn arguments_without_a_question_are_refused_before_asking() {
        let host = answering(AskAnswer::Decline);
        for args in [
            json!({}),
            json!({"question": 3}),
            json!({"question": "?", "choices": "a"}),
        ] {
            let out = host.call(&clarify, args.clone());
            assert!(
                matches!(out, Err(ToolError::InvalidArgs(_))),
                "{args}: {out:?}"
            );
        }
        assert!(host.asked().is_empty());
    }
}
