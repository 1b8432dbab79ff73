//! `toolhost token add | list | revoke`: the bearer tokens MCP clients present to
//! `toolhost serve --mcp http`. The token is printed once, on `add`; only its hash is kept.

use std::process::ExitCode;

use toolhost::{LoadedConfig, Profile, TokenStore};

use crate::output::outln;
use crate::print_table;

/// What to say when there is nowhere to keep tokens.
pub(crate) const NO_STATE_DIR: &str = "there is no state directory for the token file: set \
    XDG_STATE_HOME or HOME, or `[mcp] tokens_file` in the config";

/// `toolhost token ...`.
#[derive(clap::Subcommand)]
pub(crate) enum TokenAction {
    /// Make a token and print it (once: only its hash is kept). Give it to one MCP client.
    Add {
        /// A name for the token: the client or person it is for (letters, digits, . _ -).
        name: String,
        /// The profile this token's client is served (default: the server's --profile).
        #[arg(long, value_name = "NAME")]
        profile: Option<String>,
    },
    /// List the tokens: name, profile, creation time (never the tokens themselves).
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token: a running host refuses it from the next request on.
    Revoke {
        /// The token's name.
        name: String,
    },
}

pub(crate) fn run(config: &LoadedConfig, action: TokenAction) -> std::io::Result<ExitCode> {
    let Some(file) = config.tokens_file() else {
        eprintln!("error: {NO_STATE_DIR}");
        return Ok(ExitCode::FAILURE);
    };
    let store = TokenStore::new(file);
    let outcome = match action {
        TokenAction::Add { name, profile } => add(config, &store, &name, profile.as_deref())?,
        TokenAction::List { json } => list(&store, json)?,
        TokenAction::Revoke { name } => match store.revoke(&name) {
            Ok(r) => {
                outln!("revoked token '{}'", r.name)?;
                Ok(())
            }
            Err(e) => Err(e.to_string()),
        },
    };
    Ok(match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    })
}

fn add(
    config: &LoadedConfig,
    store: &TokenStore,
    name: &str,
    profile: Option<&str>,
) -> std::io::Result<Result<(), String>> {
    if let Some(profile) = profile
        && let Err(e) = Profile::load(config, profile)
    {
        return Ok(Err(e.to_string()));
    }
    let made = match store.add(name, profile) {
        Ok(m) => m,
        Err(e) => return Ok(Err(e.to_string())),
    };
    outln!("{}", made.token)?;
    eprintln!(
        "token '{}' made{}; it is shown only this once. Clients send it as the header\n  \
         Authorization: Bearer {}\n(kept as a hash in {})",
        made.record.name,
        profile.map_or_else(String::new, |p| format!(" for profile '{p}'")),
        made.token,
        store.path().display()
    );
    Ok(Ok(()))
}

fn list(store: &TokenStore, json: bool) -> std::io::Result<Result<(), String>> {
    let tokens = match store.list() {
        Ok(t) => t,
        Err(e) => return Ok(Err(e.to_string())),
    };
    if json {
        let shown: Vec<serde_json::Value> = tokens
            .iter()
            .map(
                |t| serde_json::json!({"name": t.name, "profile": t.profile, "created": t.created}),
            )
            .collect();
        outln!(
            "{}",
            serde_json::to_string_pretty(&shown).unwrap_or_default()
        )?;
        return Ok(Ok(()));
    }
    if tokens.is_empty() {
        outln!(
            "no tokens in {}; make one with `toolhost token add NAME`",
            store.path().display()
        )?;
        return Ok(Ok(()));
    }
    let rows: Vec<[String; 3]> = tokens
        .iter()
        .map(|t| {
            [
                t.name.clone(),
                t.profile
                    .clone()
                    .unwrap_or_else(|| "(server's --profile)".to_owned()),
                t.created.clone(),
            ]
        })
        .collect();
    print_table(&["NAME", "PROFILE", "CREATED"], &rows)?;
    Ok(Ok(()))
}
