//! `toolhost token add | list | revoke`: the bearer tokens MCP clients present to
//! `toolhost serve --mcp http`. The token is printed once, on `add`; only its hash is kept.

use std::io::IsTerminal as _;
use std::process::ExitCode;

use toolhost::{LoadedConfig, TokenScope, TokenStore};

use super::resolve_profile;
use crate::output::{errln, outln, print_table};

/// What to say when there is nowhere to keep tokens.
pub(crate) const NO_STATE_DIR: &str = "there is no state directory for the token file: set \
    XDG_STATE_HOME or HOME, or `[mcp] tokens_file` in the config";

/// `toolhost token`.
#[derive(clap::Args)]
pub(crate) struct TokenArgs {
    #[command(subcommand)]
    action: TokenAction,
}

/// `toolhost token ...`.
#[derive(clap::Subcommand)]
enum TokenAction {
    /// Make a token and print it (once: only its hash is kept). Give it to one MCP client.
    Add {
        /// A name for the token: the client or person it is for (letters, digits, . _ -).
        name: String,
        /// The profile this token's client is served (default: the server's --profile).
        #[arg(long, value_name = "NAME")]
        profile: Option<String>,
        /// What the token may do: `mcp` (call tools over MCP; the default) or `metrics`
        /// (read `serve --metrics`). Repeat for both. A metrics token cannot call tools,
        /// and an MCP token cannot read metrics.
        #[arg(long = "scope", value_name = "SCOPE")]
        scopes: Vec<TokenScope>,
        /// Print `{"name", "profile", "scopes", "token", "file"}` as JSON (the token is still shown
        /// only this once).
        #[arg(long)]
        json: bool,
    },
    /// List the tokens: name, profile, scopes, creation time (never the tokens themselves).
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token: a running host refuses it from the next request on.
    Revoke {
        /// The token's name.
        name: String,
        /// Print `{"revoked": NAME}` as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// The config's tokens: its token file, or the shared state of its replicas. The one
/// place `serve` and `toolhost token` find them.
pub(crate) fn token_store(config: &LoadedConfig) -> anyhow::Result<TokenStore> {
    if let Some(state) = super::shared_state(config, false)? {
        return Ok(TokenStore::shared(state));
    }
    let file = config
        .tokens_file()
        .ok_or_else(|| anyhow::Error::msg(NO_STATE_DIR))?;
    Ok(TokenStore::new(file))
}

impl TokenArgs {
    pub(crate) fn run(self, config: &LoadedConfig) -> anyhow::Result<ExitCode> {
        let store = token_store(config)?;
        match self.action {
            TokenAction::Add {
                name,
                profile,
                scopes,
                json,
            } => add(config, &store, &name, profile.as_deref(), &scopes, json)?,
            TokenAction::List { json } => list(&store, json)?,
            TokenAction::Revoke { name, json } => {
                let revoked = store.revoke(&name)?;
                if json {
                    outln!("{}", serde_json::json!({ "revoked": revoked.name }))?;
                } else {
                    outln!("revoked token '{}'", revoked.name)?;
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}

fn add(
    config: &LoadedConfig,
    store: &TokenStore,
    name: &str,
    profile: Option<&str>,
    scopes: &[TokenScope],
    json: bool,
) -> anyhow::Result<()> {
    if profile.is_some() {
        resolve_profile(config, profile)?;
    }
    let made = store.add(name, profile, scopes)?;
    if json {
        outln!(
            "{}",
            serde_json::json!({
                "name": made.record.name,
                "profile": profile,
                "scopes": made.record.scopes,
                "token": made.token,
                "file": store.location(),
            })
        )?;
        return Ok(());
    }
    outln!("{}", made.token)?;
    let made_for = format!(
        "token '{}' made{} (scopes: {}); it is shown only this once",
        made.record.name,
        profile.map_or_else(String::new, |p| format!(" for profile '{p}'")),
        scope_list(&made.record.scopes),
    );
    // When stdout goes to a file or a pipe, the token is there and only there (stderr may
    // be a terminal someone looks over, or a log).
    let (only, shown) = if std::io::stdout().is_terminal() {
        ("", made.token.as_str())
    } else {
        (", on stdout only", "<token>")
    };
    errln!(
        "{made_for}{only}. Clients send it as the header\n  Authorization: Bearer {shown}\n\
         (kept as a hash in {})",
        store.location()
    );
    Ok(())
}

fn list(store: &TokenStore, json: bool) -> anyhow::Result<()> {
    let tokens = store.list()?;
    if json {
        let shown: Vec<serde_json::Value> = tokens
            .iter()
            .map(
                |t| serde_json::json!({"name": t.name, "profile": t.profile, "scopes": t.scopes, "created": t.created}),
            )
            .collect();
        outln!(
            "{}",
            serde_json::to_string_pretty(&shown).unwrap_or_default()
        )?;
        return Ok(());
    }
    if tokens.is_empty() {
        outln!(
            "no tokens in {}; make one with `toolhost token add NAME`",
            store.location()
        )?;
        return Ok(());
    }
    let rows: Vec<[String; 4]> = tokens
        .iter()
        .map(|t| {
            [
                t.name.clone(),
                t.profile
                    .clone()
                    .unwrap_or_else(|| "(server's --profile)".to_owned()),
                scope_list(&t.scopes),
                t.created.clone(),
            ]
        })
        .collect();
    print_table(&["NAME", "PROFILE", "SCOPES", "CREATED"], &rows)?;
    Ok(())
}

/// `mcp,metrics`.
fn scope_list(scopes: &[TokenScope]) -> String {
    scopes
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(",")
}
