//! The host's configuration file (TOML) and the profiles directory. Every key is checked:
//! an unknown key or a wrong type stops start-up with the file, the line and the key.
//!
//! ```toml
//! plugin_dirs = ["plugins"]            # relative paths are relative to this file
//! profiles_dir = "profiles"
//! control_socket = "/run/user/1000/toolhost/control.sock"
//! default_profile = "default"
//!
//! [calls]
//! timeout_secs = 60
//! interactive_timeout_secs = 900
//!
//! [approval]
//! remember_for_session = true
//!
//! [availability]
//! cache_secs = 30
//!
//! [reload]
//! watch = true
//! max_generations = 64
//!
//! [plugins]
//! strict_permissions = true
//! max_file_size = 268435456
//!
//! [trust]
//! mode = "pinned"                      # or "any" (the default) or "signed"
//! publishers = ["RWQf6LRCGA9i53mlYecO4IzT51TGPpvWucNSCh1CBM0QTaLn73Y7GFO3"]
//!
//! [toolsets]
//! text = ["json_query", "text_stats"]
//!
//! [tools.write_file]
//! risk = "deny"
//! ```
//!
//! Config files are read the careful way (`safe_open.rs`): a regular file of at most
//! 1 MiB, so a config path that is `/dev/zero` or a FIFO fails at once with its name.
//! The host's config and every profile's must be owned by the host's user or root and not
//! writable by group or others, nor may their directories (`sys/permissions.rs`, the
//! plugin files' rule, checked before the open and again on the opened descriptor): a
//! config another user can change would let them make a root host run their code.
//!
//! Two layers: `file.rs` is the files' schema as written (`Raw*`), `settings.rs` what
//! loading resolves it into (`*Settings`, durations as `Duration`s), which is all the other
//! modules see. `seconds.rs` is the one check of a number of seconds, for the files and the
//! command line alike.

mod file;
mod http_limits;
mod loaded;
mod mcp_servers;
mod plugin_settings;
mod profile;
mod reload;
mod seconds;
mod settings;
mod state_move;
mod workspace;

use std::path::PathBuf;

pub(crate) use file::DEFAULT_CLIENT_ANSWER;
pub use file::{
    DEFAULT_TERMINAL_APPROVAL, RawAgent, RawApproval, RawAvailability, RawCalls, RawChildren,
    RawConfig, RawIsolation, RawMcp, RawMetrics, RawModel, RawOutput, RawPlugins, RawProfile,
    RawProfileOutput, RawReload, RawTool, RawTrust, RawWorkspace, WithoutElicitation,
};
pub use http_limits::HttpLimits;
pub use loaded::{LoadedConfig, MetricsSettings, default_config_path, default_plugin_dir};
pub use mcp_servers::{McpProtocol, McpServerSettings, McpTransport};
pub use profile::{Profile, ProfileView};
pub use reload::ReloadSettings;
pub(crate) use seconds::seconds_or_zero;
pub use seconds::{SecondsError, positive_seconds};
pub use settings::{
    AgentSettings, ChildSettings, ContextError, ContextSettings, DEFAULT_SYSTEM_PROMPT,
    McpSettings, ModelSettings, OAuthSettings,
};
pub use workspace::WorkspaceSettings;

/// The JSON Schema of the host's config file, each key described by its doc comment: what
/// the book's configuration reference is generated from (a key without a description
/// fails the docs test).
pub fn config_file_schema() -> serde_json::Value {
    schemars::schema_for!(file::RawConfig).to_value()
}

/// The JSON Schema of a profile's `config.toml` (`<profiles_dir>/<name>/config.toml`).
pub fn profile_file_schema() -> serde_json::Value {
    schemars::schema_for!(file::RawProfile).to_value()
}

/// The largest config file (host or profile) read.
pub const MAX_CONFIG_FILE_SIZE: u64 = 1024 * 1024;

/// A refused config file's message: the problem alone when it is the file's own (it names
/// the file), else which file was not read, then the problem with its directory or link
/// target.
fn refused(path: &std::path::Path, problem: &crate::sys::permissions::PermissionProblem) -> String {
    if problem.path == path {
        problem.to_string()
    } else {
        format!("not reading the config file {}: {problem}", path.display())
    }
}

/// A configuration problem. Start-up stops with it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("could not read the config file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Someone other than the host's user or root could change the file, its directory or
    /// (for a symlink) its target: it was not read. `[plugins] strict_permissions` does
    /// not apply to config files.
    #[error("{}", refused(path, problem))]
    Permissions {
        /// The file.
        path: PathBuf,
        /// What is wrong (owner, mode) with which path, and the fix.
        problem: Box<crate::sys::permissions::PermissionProblem>,
    },
    /// The path is not a regular file of at most 1 MiB (a FIFO, a device, a directory, a
    /// huge file): it was not read.
    #[error(
        "could not read the config file {}: {reason}; a config file must be a regular file \
         of at most 1 MiB",
        path.display()
    )]
    NotAConfigFile {
        /// The file.
        path: PathBuf,
        /// What it is.
        reason: String,
    },
    /// The file is not valid (syntax, unknown key, wrong type): toml's message names the
    /// line, the column and the key.
    #[error("{}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, where.
        message: String,
    },
    /// A number of seconds that is not one (negative, not a number, too large; zero where
    /// zero means nothing).
    #[error("{}: `{key}` {source}", path.display())]
    Seconds {
        /// The file.
        path: PathBuf,
        /// The key, with its section (`calls.timeout_secs`).
        key: &'static str,
        /// What is wrong.
        source: SecondsError,
    },
    /// A toolset a profile uses is not defined.
    #[error(
        "{}: `tools` uses toolset '@{toolset}', which the host config does not define (add \
         [toolsets] {toolset} = [...])",
        path.display()
    )]
    NoToolset {
        /// The profile's config file.
        path: PathBuf,
        /// The toolset's name (without the `@`).
        toolset: String,
    },
    /// A value does not fit with the rest.
    #[error("{}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong and what to do.
        message: String,
    },
    /// A profile names a tool no plugin provides.
    #[error(
        "profile '{profile}' lists tool '{tool}', which no loaded plugin provides; install \
         the plugin that provides it or remove it from {}",
        file.display()
    )]
    MissingTool {
        /// The profile.
        profile: String,
        /// The tool.
        tool: String,
        /// The profile's config file.
        file: PathBuf,
    },
    /// No such profile.
    #[error(
        "there is no profile '{profile}': create {} (it may hold just `tools = [...]`)",
        file.display()
    )]
    NoProfile {
        /// The profile.
        profile: String,
        /// Where its config file would be.
        file: PathBuf,
    },
}
