//! `toolhost sessions list|show ID`: a profile's stored conversations, read from its
//! session database directly (no host needs to run): the list newest first (and the
//! background delegations running), or one session's messages with its tool calls and
//! results, then its compactions and the delegations its turns started.

use std::process::ExitCode;

use toolhost::HostDetail as _;
use toolhost::LoadedConfig;
use toolhost::agent::sessions::{DelegationRecord, SessionStore};

use super::{resolve_profile, usage};
use crate::output::{outln, print_table, summary};

/// `toolhost sessions`.
#[derive(clap::Args)]
pub(crate) struct SessionsArgs {
    #[command(subcommand)]
    action: Action,
    /// The profile whose sessions to read. Default: the config's default profile.
    #[arg(long, global = true, value_name = "NAME")]
    profile: Option<String>,
    /// Print JSON: an array of sessions (list), or the session's messages (show).
    #[arg(long, global = true)]
    json: bool,
}

#[derive(clap::Subcommand)]
enum Action {
    /// The sessions, newest first: id, started, last message, messages, first request.
    List,
    /// One session's messages in order: requests, answers, tool calls and results.
    Show {
        /// The session's id (as `list`, `run` and `chat` print it).
        id: String,
    },
}

impl SessionsArgs {
    pub(crate) fn run(self, config: &LoadedConfig) -> anyhow::Result<ExitCode> {
        let profile = resolve_profile(config, self.profile.as_deref())?;
        if !SessionStore::exists_for_profile(&profile.dirs) {
            return Err(usage(format!(
                "profile '{}' has no sessions yet ({} does not exist); `toolhost run` and \
                 `toolhost chat` make them",
                profile.name,
                toolhost::agent::sessions::profile_sessions_file(&profile.dirs).display()
            )));
        }
        let store = SessionStore::open_for_profile(&profile.dirs)?;
        match self.action {
            Action::List => {
                let sessions = store.list()?;
                // Running ones, and those whose process died before they ended.
                let running: Vec<DelegationRecord> = store
                    .delegations(None)?
                    .into_iter()
                    .filter(|d| d.state == toolhost::agent::sessions::RunState::Running)
                    .collect();
                if self.json {
                    // Each session with the running delegations its turns started.
                    let mut listed = Vec::with_capacity(sessions.len());
                    for session in &sessions {
                        let mut value = serde_json::to_value(session)?;
                        let mine: Vec<_> = running
                            .iter()
                            .filter(|d| d.parent == session.id)
                            .map(delegation_json)
                            .collect();
                        if let Some(object) = value.as_object_mut() {
                            object.insert("delegations".to_owned(), mine.into());
                        }
                        listed.push(value);
                    }
                    outln!("{}", serde_json::to_string_pretty(&listed)?)?;
                    return Ok(ExitCode::SUCCESS);
                }
                let rows: Vec<[String; 5]> = sessions
                    .iter()
                    .map(|s| {
                        [
                            s.id.clone(),
                            s.created.clone(),
                            s.last.clone().unwrap_or_default(),
                            s.messages.to_string(),
                            summary(s.first_request.as_deref().unwrap_or(""), 60),
                        ]
                    })
                    .collect();
                print_table(
                    &["ID", "STARTED", "LAST", "MESSAGES", "FIRST REQUEST"],
                    &rows,
                )?;
                if !running.is_empty() {
                    outln!()?;
                    outln!("background delegations running:")?;
                    print_delegations(&running)?;
                }
            }
            Action::Show { id } => {
                let messages = store.messages(&id)?;
                let delegations = store.delegations(Some(&id))?;
                if self.json {
                    outln!("{}", serde_json::to_string_pretty(&messages)?)?;
                    return Ok(ExitCode::SUCCESS);
                }
                for message in &messages {
                    let role = serde_json::to_value(message.role)?;
                    let role = role.as_str().unwrap_or("?");
                    match (&message.tool_call_id, &message.content) {
                        (Some(call), content) => {
                            outln!("[{role} {call}] {}", content.as_deref().unwrap_or(""))?;
                            // A result cut for the model: its whole output is kept.
                            if let Some(full) = toolhost::FullOutput::read(&message.details) {
                                outln!(
                                    "[{role} {call} kept whole: toolhost output {} --profile {}]",
                                    full.id,
                                    profile.name
                                )?;
                            }
                        }
                        (None, Some(content)) => outln!("[{role}] {content}")?,
                        (None, None) => {}
                    }
                    for call in &message.tool_calls {
                        outln!(
                            "[{role} calls {}] {} {}",
                            call.id,
                            call.name,
                            call.arguments
                        )?;
                    }
                }
                // What was left out of the requests to fit the model's window (the
                // messages above are whole).
                for c in store.compactions(&id)? {
                    let stage = serde_json::to_value(c.stage)?;
                    outln!(
                        "[compaction {} {}] {} messages, about {} -> {} tokens{}",
                        stage.as_str().unwrap_or("?"),
                        c.created,
                        c.messages,
                        c.tokens_before,
                        c.tokens_after,
                        c.summary
                            .as_deref()
                            .map(|s| format!(": {}", summary(s, 200)))
                            .unwrap_or_default()
                    )?;
                }
                if !delegations.is_empty() {
                    outln!()?;
                    outln!("background delegations:")?;
                    print_delegations(&delegations)?;
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// A delegation as `--json` shows it: its record, with the state to show.
fn delegation_json(d: &DelegationRecord) -> serde_json::Value {
    let mut value = serde_json::to_value(d).unwrap_or_default();
    if let Some(object) = value.as_object_mut() {
        object.insert("state".to_owned(), d.shown_state().as_str().into());
    }
    value
}

/// Delegations as a table: id, parent session, state, units, child sessions, pid, times.
pub(crate) fn print_delegations(delegations: &[DelegationRecord]) -> anyhow::Result<()> {
    let rows: Vec<[String; 7]> = delegations
        .iter()
        .map(|d| {
            let units: Vec<String> = d
                .units
                .iter()
                .map(|u| format!("{} {}", u.id, u.state))
                .collect();
            [
                d.id.clone(),
                d.parent.clone(),
                d.shown_state().to_string(),
                units.join(", "),
                d.children.join(", "),
                d.pid.to_string(),
                format!("{} .. {}", d.started, d.ended.as_deref().unwrap_or("")),
            ]
        })
        .collect();
    print_table(
        &[
            "DELEGATION",
            "SESSION",
            "STATE",
            "UNITS",
            "CHILDREN",
            "PID",
            "STARTED .. ENDED",
        ],
        &rows,
    )?;
    Ok(())
}
