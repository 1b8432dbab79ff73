//! The commands that talk to a running host over its control socket: `toolhost reload`,
//! `toolhost status` and `toolhost call --control`. They read the typed answers the host
//! wrote ([`RescanReport`], [`HostStatus`], [`CallReply`]).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use serde_json::Value;
use toolhost::{CallParams, ControlClient, ControlRequest, HostStatus, LoadedConfig, RescanReport};

use super::control_socket;
use crate::output::{outln, print_table, summary};

/// How long `reload` and `status` wait for the host.
const ANSWER_WITHIN: Duration = Duration::from_secs(60);

/// `toolhost reload`.
#[derive(clap::Args)]
pub(crate) struct ReloadArgs {
    /// The host's control socket (default as for `serve`).
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,
    /// Print the JSON answer.
    #[arg(long)]
    json: bool,
    /// While no host answers on the socket (one that is starting), keep trying for up to
    /// SECS seconds before giving up.
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    wait: u64,
}

/// `toolhost status`.
#[derive(clap::Args)]
pub(crate) struct StatusArgs {
    /// The host's control socket (default as for `serve`).
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// While no host answers on the socket (one that is starting, e.g. `toolhost serve &`
    /// in a script), keep trying for up to SECS seconds before giving up.
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    wait: u64,
}

/// A connection to the host on `socket` whose answers are awaited at most `limit`, and
/// the runtime it runs on.
pub(crate) fn connect(
    socket: &Path,
    limit: Duration,
) -> anyhow::Result<(tokio::runtime::Runtime, ControlClient)> {
    connect_waiting(socket, limit, Duration::ZERO)
}

/// [`connect`], trying again while no host listens on `socket`, for at most `wait` (a host
/// that is starting binds its socket once its plugins are loaded). Any other refusal (the
/// socket is another user's, or closed to this one) is reported at once.
pub(crate) fn connect_waiting(
    socket: &Path,
    limit: Duration,
    wait: Duration,
) -> anyhow::Result<(tokio::runtime::Runtime, ControlClient)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("could not start the async runtime: {e}"))?;
    let deadline = tokio::time::Instant::now() + wait;
    let client = runtime.block_on(async {
        loop {
            match ControlClient::connect(socket).await {
                Err(toolhost::ControlError::NotRunning { .. })
                    if tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                connected => return connected,
            }
        }
    })?;
    Ok((runtime, client.answer_within(limit)))
}

/// The host's answer as it wrote it, pretty-printed (for `--json`).
fn print_json(answer: &Value) -> anyhow::Result<()> {
    outln!(
        "{}",
        serde_json::to_string_pretty(answer).unwrap_or_default()
    )?;
    Ok(())
}

impl ReloadArgs {
    pub(crate) fn run(self, config: &LoadedConfig) -> anyhow::Result<ExitCode> {
        let (runtime, mut client) = connect_waiting(
            &control_socket(config, self.control),
            ANSWER_WITHIN,
            Duration::from_secs(self.wait),
        )?;
        let answer = runtime.block_on(client.send(&ControlRequest::Reload))?;
        let report: RescanReport = serde_json::from_value(answer.clone())
            .map_err(|e| anyhow::anyhow!("the host sent an invalid response: {e}"))?;
        // A reload that hit errors exits 1, so scripts notice a plugin that did not load.
        let code = if report.errors.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
        if self.json {
            print_json(&answer)?;
            return Ok(code);
        }
        let mut said = false;
        for (files, label) in [
            (&report.plugins_added, "plugin added"),
            (&report.plugins_updated, "plugin updated"),
            (&report.plugins_removed, "plugin removed"),
            (&report.pending, "still being written"),
        ] {
            for file in files {
                outln!("{label}: {}", file.display())?;
                said = true;
            }
        }
        for name in &report.quarantine_lifted {
            if name.starts_with("mcp:") {
                outln!("quarantine lifted: {name} (the MCP server starts again now)")?;
            } else {
                outln!("quarantine lifted: {name} (its worker starts on the next call)")?;
            }
            said = true;
        }
        for (names, label) in [
            (&report.tools.added, "tools added"),
            (&report.tools.changed, "tools changed"),
            (&report.tools.rebuilt, "tools rebuilt (the same definition)"),
            (&report.tools.removed, "tools removed"),
        ] {
            if !names.is_empty() {
                outln!("{label}: {}", names.join(", "))?;
                said = true;
            }
        }
        for e in &report.errors {
            outln!("error: {}", e.error)?;
            said = true;
        }
        if !said {
            outln!("no changes")?;
        }
        Ok(code)
    }
}

impl StatusArgs {
    pub(crate) fn run(self, config: &LoadedConfig) -> anyhow::Result<ExitCode> {
        let (runtime, mut client) = connect_waiting(
            &control_socket(config, self.control),
            ANSWER_WITHIN,
            Duration::from_secs(self.wait),
        )?;
        // Background delegations run in `run` and `chat` processes, not in the host: they
        // are read from the profiles' session stores.
        let delegations = running_delegations(config);
        if self.json {
            let mut answer = runtime.block_on(client.send(&ControlRequest::Status))?;
            if let Some(object) = answer.as_object_mut() {
                let listed: Vec<Value> = delegations
                    .iter()
                    .map(|(profile, d)| {
                        let mut value = serde_json::to_value(d).unwrap_or_default();
                        if let Some(o) = value.as_object_mut() {
                            o.insert("profile".to_owned(), profile.clone().into());
                            o.insert("state".to_owned(), d.shown_state().as_str().into());
                        }
                        value
                    })
                    .collect();
                object.insert("delegations".to_owned(), listed.into());
            }
            print_json(&answer)?;
            return Ok(ExitCode::SUCCESS);
        }
        let status = runtime.block_on(client.status())?;
        print_status(&status)?;
        if !delegations.is_empty() {
            outln!()?;
            outln!("background delegations running (in `run` and `chat` processes):")?;
            for (profile, d) in &delegations {
                outln!("profile {profile}:")?;
                super::sessions::print_delegations(std::slice::from_ref(d))?;
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// The running delegations (and those lost with their process) of the config's
/// profiles, read from their session stores; a profile without a store has none.
fn running_delegations(
    config: &LoadedConfig,
) -> Vec<(String, toolhost::agent::sessions::DelegationRecord)> {
    let Ok(profiles) = config.profiles() else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for profile in profiles {
        use toolhost::agent::sessions::SessionStore;
        if !SessionStore::exists_for_profile(&profile.dirs) {
            continue;
        }
        let records =
            SessionStore::open_for_profile(&profile.dirs).and_then(|store| store.delegations(None));
        match records {
            Ok(records) => found.extend(
                records
                    .into_iter()
                    .filter(|d| d.state == toolhost::agent::sessions::RunState::Running)
                    .map(|d| (profile.name.clone(), d)),
            ),
            Err(e) => {
                tracing::warn!(error = %e, profile = profile.name, "could not read the profile's delegations")
            }
        }
    }
    found
}

/// `toolhost status` without `--json`: a summary, then tables.
fn print_status(status: &HostStatus) -> anyhow::Result<()> {
    let catalog = &status.catalog;
    outln!(
        "toolhost pid {} up {:.0} s, control socket {}, {}",
        status.pid,
        status.uptime_secs,
        status.control_socket.display(),
        if status.watching {
            "watching plugin directories"
        } else {
            "not watching (reload by hand)"
        }
    )?;
    match &status.replica {
        Some(replica) => outln!(
            "replica {replica}, plugin set {} (replicas that load the same plugins show the same)",
            status.plugin_set
        )?,
        None => outln!("plugin set {}", status.plugin_set)?,
    }
    outln!(
        "reloads {}, library generations mapped {} (about {} KiB kept)",
        catalog.reloads,
        catalog.generations_mapped,
        catalog.retained_bytes_estimate / 1024
    )?;
    if let Some(w) = &catalog.warning {
        outln!("warning: {w}")?;
    }
    outln!()?;
    let plugins: Vec<[String; 7]> = catalog
        .plugins
        .iter()
        .map(|p| {
            [
                p.name.clone(),
                p.version.clone(),
                p.generation.to_string(),
                p.mode.to_string(),
                p.file.display().to_string(),
                p.tools.join(", "),
                p.last_error
                    .as_deref()
                    .map(|e| summary(e, ERROR_COLUMN))
                    .unwrap_or_default(),
            ]
        })
        .collect();
    print_table(
        &[
            "PLUGIN",
            "VERSION",
            "GEN",
            "MODE",
            "FILE",
            "TOOLS",
            "LAST ERROR",
        ],
        &plugins,
    )?;
    print_full_errors(
        catalog
            .plugins
            .iter()
            .filter_map(|p| Some((p.name.as_str(), p.last_error.as_deref()?))),
    )?;
    let workers: Vec<[String; 6]> = catalog
        .plugins
        .iter()
        .filter_map(|p| {
            p.worker.as_ref().map(|w| {
                [
                    p.name.clone(),
                    w.pid
                        .map(|pid| pid.to_string())
                        .unwrap_or_else(|| "-".to_owned()),
                    w.state.clone(),
                    w.restarts.to_string(),
                    w.recent_crashes.to_string(),
                    w.quarantined
                        .as_deref()
                        .or(w.last_exit.as_deref())
                        .map(|e| summary(e, 70))
                        .unwrap_or_default(),
                ]
            })
        })
        .collect();
    if !workers.is_empty() {
        outln!()?;
        print_table(
            &[
                "WORKER OF",
                "PID",
                "STATE",
                "RESTARTS",
                "CRASHES",
                "LAST EXIT / QUARANTINE",
            ],
            &workers,
        )?;
        // What confines each worker: every protection that does not hold, by name.
        for p in &catalog.plugins {
            if let Some(w) = p
                .worker
                .as_ref()
                .filter(|w| !w.confinement.protections.is_empty())
            {
                // The kind, without the cgroup's path (status --json has it).
                let kind = w.containment.split(" /").next().unwrap_or_default();
                outln!("sandbox of {} ({kind}): {}", p.name, w.confinement)?;
            }
        }
    }
    for e in &catalog.load_errors {
        outln!("not loaded: {}", e.error)?;
    }
    for e in &catalog.registry_errors {
        outln!("not registered: {e}")?;
    }
    for w in &catalog.settings_warnings {
        outln!("settings: {w}")?;
    }
    for f in &catalog.pending {
        outln!("still being written: {}", f.display())?;
    }
    for u in &status.unavailable {
        outln!("unavailable: {}", u.reason)?;
    }
    for p in &status.profiles {
        let note = if p.missing_tools.is_empty() {
            String::new()
        } else {
            format!(
                "; missing (calls get ToolNotFound until they come back): {}",
                p.missing_tools.join(", ")
            )
        };
        outln!("profile {}: {} tools{note}", p.name, p.tools)?;
    }
    let tools: Vec<[String; 8]> = status
        .tools
        .iter()
        .map(|t| {
            [
                t.name.clone(),
                t.calls.to_string(),
                t.errors.to_string(),
                t.pending.to_string(),
                format!("{:.2}", t.mean_ms),
                format!("{:.2}", t.p99_ms),
                t.details
                    .iter()
                    .map(|(kind, n)| format!("{kind}: {n}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                t.last_error
                    .as_deref()
                    .map(|e| summary(e, ERROR_COLUMN))
                    .unwrap_or_default(),
            ]
        })
        .collect();
    if !tools.is_empty() {
        outln!()?;
        print_table(
            &[
                "TOOL",
                "CALLS",
                "ERRORS",
                "PENDING",
                "MEAN MS",
                "P99 MS",
                "DETAILS",
                "LAST ERROR",
            ],
            &tools,
        )?;
        print_full_errors(
            status
                .tools
                .iter()
                .filter_map(|t| Some((t.name.as_str(), t.last_error.as_deref()?))),
        )?;
    }
    let clients: Vec<[String; 5]> = status
        .clients
        .iter()
        .map(|c| {
            [
                c.transport.clone(),
                c.token.clone().unwrap_or_else(|| "-".to_owned()),
                c.protocol_version.clone(),
                if c.client_version.is_empty() {
                    c.client_name.clone()
                } else {
                    format!("{} {}", c.client_name, c.client_version)
                },
                format!("{:.0}", c.connected_secs),
            ]
        })
        .collect();
    if !clients.is_empty() {
        outln!()?;
        print_table(
            &["MCP CLIENT", "TOKEN", "PROTOCOL", "NAME", "CONNECTED S"],
            &clients,
        )?;
    }
    if !status.mcp_servers.is_empty() {
        outln!()?;
        let servers: Vec<[String; 6]> = status
            .mcp_servers
            .iter()
            .map(|s| {
                let state = match &s.state {
                    toolhost::ServerState::Starting => "starting".to_owned(),
                    toolhost::ServerState::Running { pid, protocol, .. } => match pid {
                        Some(pid) => format!("running (pid {pid}, {protocol})"),
                        None => format!("running ({protocol})"),
                    },
                    toolhost::ServerState::Restarting { reason } => {
                        format!("restarting: {}", summary(reason, 60))
                    }
                    toolhost::ServerState::Quarantined { reason } => {
                        format!("quarantined: {}", summary(reason, 60))
                    }
                    toolhost::ServerState::Stopped => "stopped".to_owned(),
                };
                [
                    s.name.clone(),
                    s.transport.clone(),
                    state,
                    s.tools.len().to_string(),
                    s.restarts.to_string(),
                    summary(&s.endpoint, 48),
                ]
            })
            .collect();
        print_table(
            &[
                "MCP SERVER",
                "TRANSPORT",
                "STATE",
                "TOOLS",
                "RESTARTS",
                "ENDPOINT",
            ],
            &servers,
        )?;
    }
    if !status.stuck_calls.is_empty() {
        outln!()?;
        let stuck: Vec<[String; 4]> = status
            .stuck_calls
            .iter()
            .map(|c| {
                [
                    c.tool.clone(),
                    c.plugin.clone(),
                    format!("{:.0}", c.running_secs),
                    format!("{:.0}", c.abandoned_secs),
                ]
            })
            .collect();
        print_table(&["STUCK CALL", "PLUGIN", "RUNNING S", "GIVEN UP S"], &stuck)?;
        outln!(
            "(plugin code that does not return after its call was given up: each holds a \
             plugin thread until it does; restart toolhost to reclaim them, and fix or \
             remove the plugin)"
        )?;
    }
    Ok(())
}

/// `toolhost call --control`: the call runs in the host on `socket`, as `profile`'s agent.
pub(crate) fn call(
    socket: &Path,
    tool: String,
    arguments: Value,
    timeout: Duration,
    profile: Option<String>,
    json: bool,
    yes: bool,
) -> anyhow::Result<ExitCode> {
    // The host's own cancel grace comes on top of the call's timeout.
    let (runtime, client) = connect(socket, timeout + Duration::from_secs(10))?;
    // From a terminal, the host asks the person here about calls that need approval;
    // otherwise it refuses them.
    let mut client = if !yes && std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        client.answering(std::sync::Arc::new(crate::approve::TerminalPrompt))
    } else {
        client
    };
    let reply = runtime.block_on(client.call(CallParams {
        tool,
        arguments,
        profile,
        timeout: Some(timeout),
        ask: false,
        yes,
    }))?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&reply)?)?;
        return Ok(if reply.is_error {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        });
    }
    if reply.is_error {
        return Err(anyhow::Error::msg(reply.output));
    }
    outln!("{}", reply.output)?;
    Ok(ExitCode::SUCCESS)
}

/// The LAST ERROR column's width: longer errors are cut there and printed whole below.
const ERROR_COLUMN: usize = 60;

/// The lines that give in full each error the table cut (longer than its column, or of
/// more than one line), under the name of what it is the last error of.
fn full_error_lines<'a>(errors: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<String> {
    let mut lines = Vec::new();
    for (name, error) in errors {
        if summary(error, ERROR_COLUMN) == error.trim() {
            continue;
        }
        if lines.is_empty() {
            lines.push(String::new());
        }
        lines.push(format!("last error of {name}:"));
        lines.extend(error.trim().lines().map(|l| format!("  {l}")));
    }
    lines
}

fn print_full_errors<'a>(
    errors: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<(), crate::output::StdoutError> {
    for line in full_error_lines(errors) {
        outln!("{line}")?;
    }
    Ok(())
}

#[cfg(test)]
mod full_error_tests {
    use super::*;

    #[test]
    fn an_error_the_table_cuts_is_printed_whole_under_it() {
        let long = "refused: /var/lib/toolhost/plugins/libtoolhost_workspace.so is writable \
                    by group toolhost (mode 0664): make it 0644";
        let lines = full_error_lines([("workspace", long), ("utils", "short error")]);
        assert_eq!(
            lines,
            ["", "last error of workspace:", &format!("  {long}")],
            "the short one fits its column and is not repeated"
        );
        assert!(summary(long, ERROR_COLUMN).ends_with("..."));
        let two = full_error_lines([("memory", "first line\nthe reason")]);
        assert_eq!(
            two,
            ["", "last error of memory:", "  first line", "  the reason"]
        );
        assert!(full_error_lines([("x", "fits")]).is_empty());
    }
}
