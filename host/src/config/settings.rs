//! The resolved layer: what the config files say once checked, with durations as
//! [`Duration`]s, defaults filled in and the environment's overrides applied. Every module
//! outside `config/` takes these (or its own settings made from them): the model server
//! ([`ModelSettings`]), a profile's agent ([`AgentSettings`], [`ChildSettings`]) and the
//! MCP frontend ([`McpSettings`]). They name no agent or frontend type: those modules
//! use them as they are.

use std::collections::BTreeMap;
use std::time::Duration;

use super::file::DEFAULT_CHILD_TIMEOUT_SECS;
use super::http_limits::HttpLimits;
use super::{RawAgent, RawOutput, WithoutElicitation, seconds_or_zero};
use toolhost_calls::outputs::{Budget, MIN_MAX_CHARS, OutputSettings};

/// An OpenAI-compatible Chat Completions server: `[model]` with the environment's
/// overrides, when both a base URL and a model are set somewhere.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSettings {
    /// e.g. `https://api.openai.com/v1` or `http://localhost:11434/v1`.
    pub base_url: String,
    /// The model name.
    pub model: String,
    /// Sent as a bearer token, if set.
    pub api_key: Option<String>,
    /// One request's limit.
    pub timeout: Duration,
    /// How many times a 429, a 5xx or a connection failure is retried.
    pub max_retries: u32,
    /// The first retry's wait; it doubles each time (capped at 30 s).
    pub backoff: Duration,
    /// Whether answers are asked for as a stream (`stream: true`).
    pub stream: bool,
}

/// How much of the model's context window a request may fill (`[model] context_window`
/// and `reserve_output_tokens`, with the environment's overrides).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextSettings {
    /// The window, in tokens.
    pub window: u64,
    /// Tokens left for the answer: a request is compacted to `window - reserve_output`.
    pub reserve_output: u64,
}

impl ContextSettings {
    /// `window` tokens with an eighth of them left for the answer (or `reserve`), or what
    /// is wrong with them.
    pub fn new(window: u64, reserve: Option<u64>) -> Result<ContextSettings, ContextError> {
        if window < MIN_CONTEXT_WINDOW {
            return Err(ContextError::WindowTooSmall { window });
        }
        let reserve_output = reserve.unwrap_or(window / 8);
        if reserve_output >= window / 2 {
            return Err(ContextError::ReserveTooLarge {
                window,
                reserve_output,
            });
        }
        Ok(ContextSettings {
            window,
            reserve_output,
        })
    }

    /// The most tokens a request may have.
    pub fn budget(&self) -> u64 {
        self.window - self.reserve_output
    }
}

impl Default for ContextSettings {
    fn default() -> Self {
        ContextSettings {
            window: super::file::DEFAULT_CONTEXT_WINDOW,
            reserve_output: super::file::DEFAULT_CONTEXT_WINDOW / 8,
        }
    }
}

/// What is wrong with `model.context_window` and `model.reserve_output_tokens` (or their
/// environment overrides): the message names the key and says what to give.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ContextError {
    /// A window smaller than toolhost works with.
    #[error(
        "`model.context_window` is {window}: give the model's context window in tokens, at \
         least {MIN_CONTEXT_WINDOW}"
    )]
    WindowTooSmall {
        /// The window, in tokens.
        window: u64,
    },
    /// A reserve for the answer that leaves less than half the window.
    #[error(
        "`model.reserve_output_tokens` is {reserve_output}, which leaves less than half of \
         the {window}-token context window for the conversation; give a smaller number"
    )]
    ReserveTooLarge {
        /// The window, in tokens.
        window: u64,
        /// The reserve asked for, in tokens.
        reserve_output: u64,
    },
}

/// The smallest context window toolhost works with.
pub(super) const MIN_CONTEXT_WINDOW: u64 = 1024;

/// The first retry's wait of a model request (not in the config file).
pub(super) const MODEL_RETRY_BACKOFF: Duration = Duration::from_millis(500);

/// The system prompt when the profile sets none.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are a helpful assistant. Use the tools you are \
    given when they help; when a tool returns an error, read it and correct the call.";

/// How one profile's agent runs turns: `[agent]` and the profile's system prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSettings {
    /// The most model calls in one turn (at least 1).
    pub max_iterations: u32,
    /// The system prompt (the profile's, or [`DEFAULT_SYSTEM_PROMPT`]).
    pub system_prompt: String,
    /// Child turns.
    pub children: ChildSettings,
    /// How much of the model's window a request may fill.
    pub context: ContextSettings,
}

impl Default for AgentSettings {
    /// The settings of a config file without `[agent]` and a profile without a prompt.
    fn default() -> Self {
        AgentSettings::new(
            &RawAgent::default(),
            Duration::from_secs(DEFAULT_CHILD_TIMEOUT_SECS),
        )
    }
}

/// Limits of child turns (`[agent.children]`).
#[derive(Debug, Clone, PartialEq)]
pub struct ChildSettings {
    /// How deep turns may nest (`max_spawn_depth`): a turn at this depth cannot start a
    /// child.
    pub max_depth: u32,
    /// How many delegating calls run children at once per depth, and how many tasks of
    /// one call run at once (`max_concurrent_children`, at least 1).
    pub max_concurrent: usize,
    /// How long one child turn may take once it runs (`child_timeout_seconds`).
    pub timeout: Duration,
    /// Tools a leaf child never gets (an orchestrator keeps `delegate_task`).
    pub exclude: Vec<String>,
    /// Tools whose calls wait for child turns, each with the most children one call
    /// starts (delegate_task: 5); their calls may last as long as that many children.
    pub delegators: BTreeMap<String, u32>,
    /// A background batch reports per unit (group, or ungrouped task) instead of once.
    pub independent_completions: bool,
    /// Children may be orchestrators.
    pub orchestrator_enabled: bool,
    /// Children's calls that need approval are approved without asking.
    pub auto_approve: bool,
    /// The most model calls in one child turn.
    pub max_iterations: u32,
}

impl Default for ChildSettings {
    fn default() -> Self {
        AgentSettings::default().children
    }
}

impl ChildSettings {
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

impl AgentSettings {
    /// `[agent]` with its children's limit as loading checked it, for a profile without
    /// a system prompt of its own.
    pub(super) fn new(a: &RawAgent, child_timeout: Duration) -> Self {
        let max_iterations = a.max_iterations.max(1);
        let c = &a.children;
        AgentSettings {
            max_iterations,
            system_prompt: DEFAULT_SYSTEM_PROMPT.to_owned(),
            children: ChildSettings {
                max_depth: c.spawn_depth(),
                max_concurrent: c.concurrent_children(),
                timeout: child_timeout,
                exclude: c.exclude.clone(),
                delegators: c.delegators.clone(),
                independent_completions: c.independent_completions,
                orchestrator_enabled: c.orchestrator_enabled,
                auto_approve: c.subagent_auto_approve,
                max_iterations: c.max_iterations.unwrap_or(max_iterations).max(1),
            },
            context: ContextSettings::default(),
        }
    }
}

/// The MCP frontend (`[mcp]`).
#[derive(Debug, Clone, PartialEq)]
pub struct McpSettings {
    /// What happens to a call that needs approval when the client cannot be asked.
    pub without_elicitation: WithoutElicitation,
    /// How long such a call waits for a terminal (`without_elicitation = "terminal"`).
    pub terminal_approval: std::time::Duration,
    /// How long a client has to answer what it is asked during a call.
    pub client_answer: std::time::Duration,
    /// Host names (or `host:port`) HTTP requests may name besides the loopback names.
    pub allowed_hosts: Vec<String>,
    /// Browser origins allowed to call besides the server's own.
    pub allowed_origins: Vec<String>,
    /// The HTTP door's limits.
    pub limits: HttpLimits,
    /// OAuth access tokens accepted beside the static ones (`[mcp.oauth]`).
    pub oauth: Option<OAuthSettings>,
}

/// `[mcp.oauth]` checked: what an access token must be to be let in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthSettings {
    /// The authorization server's issuer identifier.
    pub issuer: String,
    /// This server's resource identifier (the audience its tokens must name).
    pub resource: String,
    /// The issuer's key set, if not from its metadata.
    pub jwks_url: Option<String>,
    /// Scopes every token must carry.
    pub scopes: Vec<String>,
    /// Scope to profile.
    pub profiles: std::collections::BTreeMap<String, String>,
    /// Accepted signature algorithms (JOSE names; asymmetric only).
    pub algorithms: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway: std::time::Duration,
    /// Whether a token's `typ` must be `at+jwt` (RFC 9068).
    pub require_at_jwt: bool,
}

/// `[mcp.oauth]` checked: absolute http(s) URLs, asymmetric algorithms only (an HMAC
/// secret would be the issuer's public key, which anyone has).
pub(super) fn oauth_settings(raw: &super::file::RawOAuth) -> Result<OAuthSettings, OAuthError> {
    let url = |key: &'static str, value: &str| {
        if value.starts_with("https://") || value.starts_with("http://") {
            Ok(())
        } else {
            Err(OAuthError::NotAUrl {
                key,
                value: value.to_owned(),
            })
        }
    };
    url("issuer", &raw.issuer)?;
    url("resource", &raw.resource)?;
    if let Some(jwks) = &raw.jwks_url {
        url("jwks_url", jwks)?;
    }
    use super::file::OAUTH_ALGORITHMS as KNOWN;
    if raw.algorithms.is_empty() {
        return Err(OAuthError::NoAlgorithm);
    }
    for alg in &raw.algorithms {
        if !KNOWN.contains(&alg.as_str()) {
            return Err(OAuthError::Algorithm {
                algorithm: alg.clone(),
            });
        }
    }
    Ok(OAuthSettings {
        issuer: raw.issuer.clone(),
        resource: raw.resource.clone(),
        jwks_url: raw.jwks_url.clone(),
        scopes: raw.scopes.clone(),
        profiles: raw.profiles.clone(),
        algorithms: raw.algorithms.clone(),
        leeway: std::time::Duration::from_secs(raw.leeway_secs),
        require_at_jwt: raw.require_at_jwt,
    })
}

/// What is wrong with `[mcp.oauth]`: the message names the key and says what to give.
#[derive(Debug, thiserror::Error)]
pub(super) enum OAuthError {
    /// A URL key that is not an http(s) URL.
    #[error("[mcp.oauth] {key} = {value:?} is not an http(s) URL; give the full URL")]
    NotAUrl {
        /// The key (`issuer`, `resource`, `jwks_url`).
        key: &'static str,
        /// Its value.
        value: String,
    },
    /// `algorithms = []`.
    #[error("[mcp.oauth] algorithms is empty; name at least one, e.g. \"RS256\"")]
    NoAlgorithm,
    /// An algorithm that is not accepted (HMAC, `none`, or unknown).
    #[error(
        "[mcp.oauth] algorithms: {algorithm:?} is not accepted (HMAC and \"none\" never are); \
         choose from {}",
        super::file::OAUTH_ALGORITHMS.join(", ")
    )]
    Algorithm {
        /// The algorithm as written.
        algorithm: String,
    },
}

/// What is wrong with `[output]`: the message names the key and says what to give.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(super) enum OutputError {
    /// A character limit too small for the marker line.
    #[error(
        "`output.{key}` is {n}: give 0 (no limit) or at least {MIN_MAX_CHARS}, which leaves \
         room for the marker line"
    )]
    TooFewChars {
        /// The key (`max_chars`, `mcp_max_chars_ceiling`).
        key: &'static str,
        /// Its value.
        n: usize,
    },
    /// `keep_days` that is no number of days.
    #[error(
        "`output.keep_days` is {keep_days}: give a number of days, or 0 to keep outputs \
         regardless of age"
    )]
    KeepDays {
        /// Its value.
        keep_days: f64,
    },
}

/// `[output]` (the host's, with a profile's keys in their place) resolved, or what is
/// wrong with it.
pub(super) fn output_settings(o: &RawOutput) -> Result<OutputSettings, OutputError> {
    for (key, n) in [
        ("max_chars", o.max_chars),
        ("mcp_max_chars_ceiling", o.mcp_max_chars_ceiling),
    ] {
        if n != 0 && n < MIN_MAX_CHARS {
            return Err(OutputError::TooFewChars { key, n });
        }
    }
    let keep_for = seconds_or_zero(o.keep_days * 86_400.0).map_err(|_| OutputError::KeepDays {
        keep_days: o.keep_days,
    })?;
    Ok(OutputSettings {
        budget: Budget {
            max_chars: o.max_chars,
            max_lines: o.max_lines,
        },
        keep_for: (!keep_for.is_zero()).then_some(keep_for),
        keep_bytes: o.keep_mb.saturating_mul(1 << 20),
        max_chars_ceiling: o.mcp_max_chars_ceiling,
        read_output: o.read_output,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_table_left_out_resolves_to_the_default_settings() {
        assert_eq!(
            output_settings(&RawOutput::default()),
            Ok(OutputSettings::default())
        );
    }

    #[test]
    fn the_output_keys_documented_defaults_are_the_real_ones_in_both_files() {
        let d = RawOutput::default();
        let expected = [
            ("max_chars", d.max_chars.to_string()),
            ("max_lines", d.max_lines.to_string()),
            ("keep_days", d.keep_days.to_string()),
            ("keep_mb", d.keep_mb.to_string()),
            ("mcp_max_chars_ceiling", d.mcp_max_chars_ceiling.to_string()),
            ("read_output", d.read_output.to_string()),
        ];
        for (schema, table) in [
            (crate::config::config_file_schema(), "RawOutput"),
            (crate::config::profile_file_schema(), "RawProfileOutput"),
        ] {
            let props = &schema["$defs"][table]["properties"];
            for (key, value) in &expected {
                let text = props[key]["description"].as_str().unwrap_or_default();
                let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
                assert!(
                    text.ends_with(&format!("Default: `{value}`.")),
                    "{table}.{key}: {text:?}"
                );
                assert!(!text.contains("See ["), "{table}.{key}: {text:?}");
            }
        }
    }

    #[test]
    fn the_defaults_are_the_config_files() {
        let settings = AgentSettings::default();
        assert_eq!(settings.max_iterations, 20);
        assert_eq!(settings.system_prompt, DEFAULT_SYSTEM_PROMPT);
        assert_eq!(settings.children.timeout, Duration::from_secs(300));
        assert_eq!(
            settings.children.exclude,
            ["delegate_task", "clarify", "memory"]
        );
    }

    #[test]
    fn the_context_window_leaves_an_eighth_for_the_answer_and_odd_sizes_are_named() {
        let c = ContextSettings::default();
        assert_eq!(
            (c.window, c.reserve_output, c.budget()),
            (32_768, 4096, 28_672)
        );
        assert_eq!(
            ContextSettings::new(8000, Some(1000)).map(|c| c.budget()),
            Ok(7000)
        );
        let small = ContextSettings::new(500, None)
            .expect_err("too small")
            .to_string();
        assert!(
            small.contains("context_window") && small.contains("1024"),
            "{small}"
        );
        let greedy = ContextSettings::new(4000, Some(2000))
            .expect_err("half")
            .to_string();
        assert!(greedy.contains("reserve_output_tokens"), "{greedy}");
    }

    #[test]
    fn a_delegators_limit_covers_its_batch_of_children() {
        let children = ChildSettings::default();
        // delegate_task: 5 children, 3 at a time, 300 s each: two rounds.
        let limits: Vec<_> = children.delegator_timeouts().collect();
        assert_eq!(
            limits,
            [("delegate_task".to_owned(), Duration::from_secs(630))]
        );
    }

    #[test]
    fn oauth_settings_take_urls_and_asymmetric_algorithms_only() {
        let raw = |extra: &str| -> crate::config::file::RawOAuth {
            toml::from_str(&format!(
                "issuer = \"https://auth.example.com\"\nresource = \"https://mcp.example.com/mcp\"\n{extra}"
            ))
            .expect("toml")
        };
        let defaults = oauth_settings(&raw("")).expect("defaults");
        assert_eq!(defaults.leeway, Duration::from_secs(60));
        assert!(defaults.algorithms.iter().any(|a| a == "RS256"));
        assert!(defaults.algorithms.iter().all(|a| !a.starts_with("HS")));
        let hmac = oauth_settings(&raw("algorithms = [\"RS256\", \"HS256\"]"))
            .expect_err("refused")
            .to_string();
        assert!(hmac.contains("\"HS256\" is not accepted"), "{hmac}");
        let none = oauth_settings(&raw("algorithms = [\"none\"]"))
            .expect_err("refused")
            .to_string();
        assert!(none.contains("\"none\" is not accepted"), "{none}");
        let mut bad = raw("");
        bad.issuer = "auth.example.com".into();
        let issuer = oauth_settings(&bad).expect_err("refused").to_string();
        assert!(issuer.contains("[mcp.oauth] issuer"), "{issuer}");
    }
}
