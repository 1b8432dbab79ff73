//! How an agent runs turns and child turns, in the agent's own types, made from the plain
//! settings the configuration resolves (`config::AgentSetup`).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::config::{AgentSetup, ChildLimits};

/// Limits of child turns (`[agent.children]`).
#[derive(Debug, Clone)]
pub struct ChildConfig {
    /// How deep turns may nest: a turn at this depth cannot start a child.
    pub max_depth: u32,
    /// How many child turns run at once across the agent.
    pub max_concurrent: usize,
    /// How long one child turn may take.
    pub timeout: Duration,
    /// Tools a child never gets.
    pub exclude: Vec<String>,
    /// Tools whose calls wait for child turns, each with the most children one call
    /// starts (delegate_task: 5); their calls may last as long as that many children.
    pub delegators: BTreeMap<String, u32>,
}

impl Default for ChildConfig {
    fn default() -> Self {
        ChildLimits::default().into()
    }
}

impl From<ChildLimits> for ChildConfig {
    fn from(c: ChildLimits) -> Self {
        ChildConfig {
            max_depth: c.max_depth,
            max_concurrent: c.max_concurrent,
            timeout: c.timeout,
            exclude: c.exclude,
            delegators: c.delegators,
        }
    }
}

impl ChildConfig {
    /// The time limit of each delegator's calls: a call waits for its children, which
    /// have their own limit, so it may last as long as a full batch of them
    /// (`max_concurrent` at a time), plus half a minute.
    pub fn delegator_timeouts(&self) -> impl Iterator<Item = (String, Duration)> + '_ {
        let at_once = u32::try_from(self.max_concurrent.max(1)).unwrap_or(u32::MAX);
        self.delegators.iter().map(move |(tool, &batch)| {
            let rounds = batch.max(1).div_ceil(at_once);
            (
                tool.clone(),
                self.timeout * rounds + Duration::from_secs(30),
            )
        })
    }
}

/// How an agent runs turns.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The most model calls in one turn.
    pub max_iterations: u32,
    /// The system prompt (the profile's, or the default).
    pub system_prompt: String,
    /// Child turns.
    pub children: ChildConfig,
}

/// The system prompt when the profile sets none.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are a helpful assistant. Use the tools you are \
    given when they help; when a tool returns an error, read it and correct the call.";

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            max_iterations: 20,
            system_prompt: DEFAULT_SYSTEM_PROMPT.to_owned(),
            children: ChildConfig::default(),
        }
    }
}

impl From<AgentSetup> for AgentConfig {
    fn from(setup: AgentSetup) -> Self {
        AgentConfig {
            max_iterations: setup.max_iterations,
            system_prompt: setup
                .system_prompt
                .unwrap_or_else(|| DEFAULT_SYSTEM_PROMPT.to_owned()),
            children: setup.children.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_the_configurations() {
        let config = AgentConfig::from(AgentSetup::from(&crate::config::AgentSettings::default()));
        let default = AgentConfig::default();
        assert_eq!(config.max_iterations, default.max_iterations);
        assert_eq!(config.system_prompt, default.system_prompt);
        assert_eq!(config.children.timeout, Duration::from_secs(300));
        assert_eq!(
            config.children.exclude,
            ["delegate_task", "clarify", "memory"]
        );
    }

    #[test]
    fn a_delegators_limit_covers_its_batch_of_children() {
        let children = ChildConfig::default();
        // delegate_task: 5 children, 3 at a time, 300 s each: two rounds.
        let limits: Vec<_> = children.delegator_timeouts().collect();
        assert_eq!(
            limits,
            [("delegate_task".to_owned(), Duration::from_secs(630))]
        );
    }
}
