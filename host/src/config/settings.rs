//! Plain settings the configuration resolves for the modules that own their own types:
//! the model server ([`ModelSettings`]) and a profile's agent ([`AgentSetup`],
//! [`ChildLimits`]). The agent turns them into its types; config names none of them.

use std::collections::BTreeMap;
use std::time::Duration;

use super::AgentSettings;

/// The model settings as the environment and `[model]` resolve them; the agent turns them
/// into its client's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSettings {
    /// The server's base URL, if set anywhere.
    pub base_url: Option<String>,
    /// The model name, if set anywhere.
    pub model: Option<String>,
    /// The API key, if one is set.
    pub api_key: Option<String>,
    /// One request's limit.
    pub timeout: Duration,
    /// Retries of a 429, a 5xx or a connection failure.
    pub max_retries: u32,
}

/// What one profile's agent is configured with; the agent turns it into its own settings.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSetup {
    /// The most model calls in one turn (at least 1).
    pub max_iterations: u32,
    /// The profile's system prompt, if it sets one.
    pub system_prompt: Option<String>,
    /// Child turns.
    pub children: ChildLimits,
}

/// `[agent.children]` with its values checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildLimits {
    /// How deep turns may nest.
    pub max_depth: u32,
    /// How many child turns run at once (at least 1).
    pub max_concurrent: usize,
    /// How long one child turn may take.
    pub timeout: Duration,
    /// Tools a child never gets.
    pub exclude: Vec<String>,
    /// Tools whose calls wait for child turns, with the most children one call starts.
    pub delegators: BTreeMap<String, u32>,
}

impl Default for ChildLimits {
    fn default() -> Self {
        AgentSetup::from(&AgentSettings::default()).children
    }
}

impl From<&AgentSettings> for AgentSetup {
    /// The settings of a profile without a system prompt of its own.
    fn from(a: &AgentSettings) -> Self {
        AgentSetup {
            max_iterations: a.max_iterations.max(1),
            system_prompt: None,
            children: ChildLimits {
                max_depth: a.children.max_depth,
                max_concurrent: a.children.max_concurrent.max(1),
                timeout: Duration::try_from_secs_f64(a.children.timeout_secs)
                    .unwrap_or(Duration::from_secs(300)),
                exclude: a.children.exclude.clone(),
                delegators: a.children.delegators.clone(),
            },
        }
    }
}
