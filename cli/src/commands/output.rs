//! `toolhost output ID`: prints a kept output (the full text of a result that was cut to
//! the budget), all of it, a line range or the lines matching a regex. It reads the
//! profile's state folder directly, as the host's user: no running host is needed. Local
//! callers (the command line, the control socket, MCP stdio, the agent) own their outputs;
//! an HTTP client's are read with `--token NAME`.

use std::process::ExitCode;

use toolhost::{LoadedConfig, Owner, ReadRange};

use super::{resolve_profile, usage};

/// `toolhost output`.
#[derive(clap::Args)]
pub(crate) struct OutputArgs {
    /// The output's id, as its marker line names it (`o` and 32 hex digits).
    id: String,
    /// Only lines A to B (1-based, inclusive); `A:` reads to the end.
    #[arg(long, value_name = "A:B", conflicts_with = "grep")]
    lines: Option<String>,
    /// Only the lines matching this regular expression, numbered like `grep -n`.
    #[arg(long, value_name = "REGEX")]
    grep: Option<String>,
    /// With --grep: lines shown before and after each match.
    #[arg(long, value_name = "N", default_value_t = toolhost::DEFAULT_CONTEXT, requires = "grep")]
    context: usize,
    /// The profile the call ran as. Default: the config's default profile.
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
    /// An output made over MCP HTTP: the name of the token its client used.
    #[arg(long, value_name = "NAME")]
    token: Option<String>,
    /// Print JSON: the text, its first line's number, the whole output's size (chars,
    /// lines, bytes) and, for --grep, how many lines matched.
    #[arg(long)]
    json: bool,
}

impl OutputArgs {
    pub(crate) fn run(self, config: &LoadedConfig) -> anyhow::Result<ExitCode> {
        let profile = resolve_profile(config, self.profile.as_deref())?;
        let range = match (&self.lines, &self.grep) {
            (Some(lines), _) => {
                ReadRange::lines(lines).map_err(|e| usage(format!("--lines: {e}")))?
            }
            (None, Some(pattern)) => {
                ReadRange::grep(pattern, self.context).map_err(|e| usage(format!("--grep: {e}")))?
            }
            (None, None) => ReadRange::All,
        };
        let store = super::output_store(config, &profile)?;
        let owner = Owner {
            profile: profile.name.clone(),
            token: self.token,
        };
        let excerpt = store.read(&owner, &self.id, &range)?;
        if self.json {
            crate::output::outln!(
                "{}",
                serde_json::json!({
                    "id": self.id,
                    "text": excerpt.text,
                    "first_line": excerpt.first_line,
                    "size": excerpt.size,
                    "matches": excerpt.matches,
                })
            )?;
            return Ok(ExitCode::SUCCESS);
        }
        crate::output::raw(&excerpt.text)?;
        Ok(ExitCode::SUCCESS)
    }
}
