//! Approval over MCP: asking a session client with `elicitation/create`, a sessionless
//! 2026-07-28 client with an input-required result it answers by retrying (single-use,
//! bound to a fingerprint of the call), or applying `[mcp] without_elicitation`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use rmcp::model::{CallToolRequestParams, ElicitRequest, InputRequest, InputRequiredResult};
use rmcp::{Peer, RoleServer};
use serde::Deserialize as _;
use serde_json::{Value, json};
use toolhost_plugin_api::AskAnswer;

use super::caller::{NotAForm, elicit_params};
use super::state::{ClientFacts, SessionState, Shared};
use crate::config::WithoutElicitation;
use crate::text::shorten;
use toolhost_calls::policy::{ApprovalAnswer, ApprovalRequest, Approver};
use toolhost_calls::registry::RegisteredTool;
use toolhost_calls::tool::{Risk, ToolSpec};

/// The key of the approval question in an input-required result.
const APPROVAL_KEY: &str = "toolhost_approval";

/// What identifies one call of one tool's code, for binding approvals to it.
fn call_fingerprint(spec: &ToolSpec, sha256: &str, arguments: &Value) -> [u8; 32] {
    super::suspended::digest(&[
        spec.name.as_bytes(),
        sha256.as_bytes(),
        spec.risk.to_string().as_bytes(),
        spec.schema.to_string().as_bytes(),
        arguments.to_string().as_bytes(),
    ])
}

/// Asks an MCP client's user to approve a call: an `elicitation/create` request on a
/// session, an input-required result for a sessionless 2026-07-28 client, else the
/// configured answer.
pub(super) struct McpApprover {
    mode: ApproverMode,
    pub(super) needs_input: AtomicBool,
    shared: Arc<Shared>,
    /// The choices the policy offered when it asked ("for the session", "always"), kept
    /// for the question a sessionless client gets after the call.
    offers: Mutex<Offers>,
    /// Who answers, for the audit log.
    who: String,
    /// Who asks: the client's name and token (for a terminal's `approvals pending`).
    asked_by: String,
}

enum ApproverMode {
    /// A session client that supports elicitation.
    Elicit(Peer<RoleServer>),
    /// A sessionless client that supports elicitation, answering (or not yet) on retry;
    /// its answer counts only for `call` (see [`call_fingerprint`]).
    InputRequired {
        answer: Option<ApprovalAnswer>,
        call: [u8; 32],
        /// The question's subject, for the question built after the call.
        tool: String,
        risk: Risk,
        arguments: Value,
    },
    /// The client cannot be asked.
    Configured(WithoutElicitation),
}

impl McpApprover {
    pub(super) fn new(
        session: &SessionState,
        request: &CallToolRequestParams,
        tool: &RegisteredTool,
        arguments: &Value,
        peer: &Peer<RoleServer>,
        facts: &ClientFacts,
    ) -> McpApprover {
        let shared = Arc::clone(&session.shared);
        let mode = match (facts.can_elicit, facts.sessionless) {
            (true, false) => ApproverMode::Elicit(peer.clone()),
            (true, true) => {
                let call = call_fingerprint(tool.spec(), tool.tool().origin().sha256(), arguments);
                let answer = match (&request.request_state, &request.input_responses) {
                    (Some(state), Some(responses)) if shared.pending.take(state, &call) => {
                        Some(match responses.get(APPROVAL_KEY) {
                            Some(answer) => approval_from_elicit_result(answer),
                            None => ApprovalAnswer::Decline(
                                "the client retried without answering the approval question"
                                    .to_owned(),
                            ),
                        })
                    }
                    _ => None,
                };
                ApproverMode::InputRequired {
                    answer,
                    call,
                    tool: tool.spec().name.clone(),
                    risk: tool.spec().risk,
                    arguments: arguments.clone(),
                }
            }
            _ => ApproverMode::Configured(shared.options.without_elicitation),
        };
        let client = facts
            .caller
            .client
            .as_ref()
            .map_or("unknown", |(name, _)| name.as_str());
        let who = match &mode {
            ApproverMode::Elicit(_) => format!("mcp client {client} (elicitation)"),
            ApproverMode::InputRequired { .. } => format!("mcp client {client} (input required)"),
            ApproverMode::Configured(WithoutElicitation::Approve) => {
                "config ([mcp] without_elicitation = \"approve\")".to_owned()
            }
            ApproverMode::Configured(WithoutElicitation::Refuse) => format!(
                "nobody: mcp client {client} cannot ask its user ([mcp] without_elicitation = \
                 \"refuse\", the default)"
            ),
            ApproverMode::Configured(WithoutElicitation::Terminal) => format!(
                "a terminal on the control socket (mcp client {client} cannot ask its user; \
                 [mcp] without_elicitation = \"terminal\")"
            ),
        };
        let asked_by = match &facts.caller.token {
            Some(token) => format!("mcp client {client} (token {token})"),
            None => format!("mcp client {client}"),
        };
        McpApprover {
            mode,
            needs_input: AtomicBool::new(false),
            shared,
            offers: Mutex::new(Offers::default()),
            who,
            asked_by,
        }
    }

    /// The question for a sessionless client, to answer by retrying the call (`None` for
    /// the other kinds of client, which are asked while the call waits).
    pub(super) fn input_required(&self) -> Option<InputRequiredResult> {
        let ApproverMode::InputRequired {
            call,
            tool,
            risk,
            arguments,
            ..
        } = &self.mode
        else {
            return None;
        };
        let state = self.shared.pending.add(*call);
        let question = approval_question(tool, *risk, arguments);
        let mut requests = BTreeMap::new();
        let offers = *self.offers.lock().unwrap_or_else(PoisonError::into_inner);
        if let Ok(request) = elicit_request(&question, approval_schema(offers)) {
            requests.insert(APPROVAL_KEY.to_owned(), InputRequest::Elicitation(request));
        }
        Some(InputRequiredResult::new(Some(requests), Some(state)))
    }
}

impl super::suspended::AskAfter for McpApprover {
    /// The approval question of a sessionless client's call the policy asked about.
    fn question_after(&self) -> Option<InputRequiredResult> {
        if self.needs_input.load(Ordering::Acquire) {
            self.input_required()
        } else {
            None
        }
    }
}

/// The question a person approves a call by. Every argument is shown: when they are long,
/// each field is cut short on its own, so no field can hide behind another.
fn approval_question(tool: &str, risk: Risk, arguments: &Value) -> String {
    const WHOLE: usize = 2000;
    const FIELD: usize = 300;
    let full = arguments.to_string();
    let shown = if full.chars().count() <= WHOLE {
        full
    } else if let Value::Object(fields) = arguments {
        fields
            .iter()
            .map(|(k, v)| format!("{k}: {}", shorten(&v.to_string(), FIELD)))
            .collect::<Vec<_>>()
            .join("\n")
    } else {
        shorten(&full, WHOLE)
    };
    format!("Allow the tool '{tool}' (risk: {risk}) to run with these arguments?\n{shown}")
}

/// Which lasting answers an approval question offers, as the policy's request says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Offers {
    session: bool,
    always: bool,
}

impl Offers {
    fn of(request: &ApprovalRequest) -> Offers {
        Offers {
            session: request.offer_session,
            always: request.offer_always,
        }
    }
}

fn approval_schema(offers: Offers) -> Value {
    let mut properties = serde_json::Map::new();
    if offers.always {
        properties.insert(
            "always".to_owned(),
            json!({
                "type": "boolean",
                "title": "Always allow this tool (until its plugin, schema or risk changes)",
                "default": false
            }),
        );
    }
    if offers.session {
        properties.insert(
            "remember".to_owned(),
            json!({
                "type": "boolean",
                "title": "Allow this tool for the rest of the session",
                "default": false
            }),
        );
    }
    json!({"type": "object", "properties": properties})
}

fn elicit_request(message: &str, schema: Value) -> Result<ElicitRequest, NotAForm> {
    let params = elicit_params(message, schema)?;
    Ok(ElicitRequest::new(params))
}

/// The approval form's fields (see [`approval_schema`]); anything unreadable is "no".
#[derive(Debug, Default, serde::Deserialize)]
struct ApprovalForm {
    #[serde(default)]
    remember: bool,
    #[serde(default)]
    always: bool,
}

fn approval_from_elicit_result(answer: &Value) -> ApprovalAnswer {
    match AskAnswer::deserialize(answer) {
        Ok(AskAnswer::Accept { content }) => {
            let form = ApprovalForm::deserialize(&content).unwrap_or_default();
            if form.always {
                ApprovalAnswer::ApproveAlways
            } else if form.remember {
                ApprovalAnswer::ApproveForSession
            } else {
                ApprovalAnswer::Approve
            }
        }
        Ok(AskAnswer::Decline) => ApprovalAnswer::Decline("the user declined".to_owned()),
        Ok(AskAnswer::Cancel) => {
            ApprovalAnswer::Decline("the user dismissed the approval question".to_owned())
        }
        Err(_) => ApprovalAnswer::Decline(format!(
            "the client's answer to the approval question was malformed: {answer}"
        )),
    }
}

#[async_trait]
impl Approver for McpApprover {
    async fn ask(&self, request: &ApprovalRequest) -> ApprovalAnswer {
        match &self.mode {
            ApproverMode::Elicit(peer) => {
                let question = approval_question(&request.tool, request.risk, &request.arguments);
                let params = match elicit_params(&question, approval_schema(Offers::of(request))) {
                    Ok(p) => p,
                    Err(e) => return ApprovalAnswer::Decline(e.to_string()),
                };
                let within = self.shared.options.answer_within();
                match peer
                    .create_elicitation_with_timeout(params, Some(within))
                    .await
                {
                    Ok(result) => match serde_json::to_value(&result) {
                        Ok(answer) => approval_from_elicit_result(&answer),
                        Err(e) => ApprovalAnswer::Decline(format!("unreadable answer: {e}")),
                    },
                    Err(rmcp::ServiceError::Timeout { .. }) => ApprovalAnswer::Decline(format!(
                        "the user did not answer the approval question within {} ([mcp] \
                         client_answer_secs); call the tool again to be asked again",
                        crate::text::duration(within)
                    )),
                    Err(e) => ApprovalAnswer::Decline(format!(
                        "the approval question could not be asked: {e}"
                    )),
                }
            }
            ApproverMode::InputRequired {
                answer: Some(answer),
                ..
            } => answer.clone(),
            ApproverMode::InputRequired { answer: None, .. } => {
                *self.offers.lock().unwrap_or_else(PoisonError::into_inner) = Offers::of(request);
                self.needs_input.store(true, Ordering::Release);
                ApprovalAnswer::Pending("the client asks the user and calls again".to_owned())
            }
            ApproverMode::Configured(WithoutElicitation::Approve) => ApprovalAnswer::Approve,
            ApproverMode::Configured(WithoutElicitation::Terminal) => {
                let question = crate::approval_relay::NewQuestion {
                    tool: request.tool.clone(),
                    risk: request.risk,
                    origin: request.origin.to_string(),
                    arguments: request.arguments.clone(),
                    asked_by: self.asked_by.clone(),
                    offer_session: request.offer_session,
                    offer_always: request.offer_always,
                };
                let within = match self.shared.options.terminal_approval {
                    d if d.is_zero() => crate::config::DEFAULT_TERMINAL_APPROVAL,
                    d => d,
                };
                match self
                    .shared
                    .host
                    .approval_relay()
                    .ask(question, within)
                    .await
                {
                    Ok(answer) => answer,
                    Err(e) => ApprovalAnswer::Decline(e.to_string()),
                }
            }
            ApproverMode::Configured(WithoutElicitation::Refuse) => {
                ApprovalAnswer::Decline(format!(
                    "this MCP client cannot ask its user (it does not support elicitation). \
                     To allow such calls, set `without_elicitation = \"approve\"` under [mcp] \
                     in the toolhost config (the client then decides whether to ask), or \
                     lower this tool's risk with [tools.{}] risk = \"read\" and \
                     allow_lower = true",
                    request.tool
                ))
            }
        }
    }

    fn who(&self) -> String {
        self.who.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn elicitation_answers_become_approvals() {
        let accept = json!({"action": "accept", "content": {"remember": false}});
        assert_eq!(
            approval_from_elicit_result(&accept),
            ApprovalAnswer::Approve
        );
        let session = json!({"action": "accept", "content": {"remember": true}});
        assert_eq!(
            approval_from_elicit_result(&session),
            ApprovalAnswer::ApproveForSession
        );
        for refused in [
            json!({"action": "decline"}),
            json!({"action": "cancel"}),
            json!(3),
        ] {
            assert!(matches!(
                approval_from_elicit_result(&refused),
                ApprovalAnswer::Decline(_)
            ));
        }
    }

    #[test]
    fn the_approval_question_is_a_valid_form() {
        for remember in [true, false] {
            for always in [true, false] {
                assert!(
                    elicit_params(
                        "Allow?",
                        approval_schema(Offers {
                            session: remember,
                            always
                        })
                    )
                    .is_ok()
                );
                assert!(
                    elicit_request(
                        "Allow?",
                        approval_schema(Offers {
                            session: remember,
                            always
                        })
                    )
                    .is_ok()
                );
            }
        }
        assert!(
            !approval_schema(Offers::default())
                .to_string()
                .contains("remember")
        );
        assert!(
            !approval_schema(Offers::default())
                .to_string()
                .contains("always")
        );
        assert!(
            approval_schema(Offers {
                session: false,
                always: true
            })
            .to_string()
            .contains("always")
        );
    }

    #[test]
    fn long_arguments_show_every_field() {
        let args = json!({"aaa": "x".repeat(5000), "command": "rm -rf /"});
        let question = approval_question("shell", Risk::Destructive, &args);
        assert!(question.contains("command: \"rm -rf /\""), "{question}");
        assert!(question.contains("more characters"), "{question}");
        assert!(question.len() < 1000, "{}", question.len());
    }
}
