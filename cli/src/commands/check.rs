//! `toolhost check FILE`: validates one plugin file, first with the static checks (none
//! of its code runs), then by loading it and listing its tools, with a warning for each
//! description that names a tool the plugin does not provide (the description rule).
//! `toolhost check --mcp-server NAME`: connects to one of the config's MCP servers as a
//! host would (confined) and says what it found.

use std::path::PathBuf;
use std::process::ExitCode;

use toolhost::{LoadErrorKind, LoadedConfig, PluginLoadError, ToolRegistry};

use super::{Failure, new_loader};
use crate::output::{outln, summary};

/// `toolhost check`.
#[derive(clap::Args)]
pub(crate) struct CheckArgs {
    /// The plugin file (a .so); required unless --mcp-server is given.
    #[arg(required_unless_present = "mcp_server", value_name = "FILE")]
    file: Option<PathBuf>,
    /// Check one of the config's MCP servers (`[[mcp_servers]]` name) instead of a
    /// plugin file: start or reach it as a host would (a stdio server in its sandbox),
    /// and print the protocol it speaks and its tools with their risks, or why it could
    /// not be reached.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["file", "no_load", "isolate"])]
    mcp_server: Option<String>,
    /// Run only the static checks; do not load the library.
    #[arg(long)]
    no_load: bool,
    /// Load it only in a worker process sandboxed with no write access and no network
    /// (Landlock, required), so none of its code runs in this process.
    #[arg(long, conflicts_with = "no_load")]
    isolate: bool,
    /// Print one JSON object (for scripts) instead of text: `ok`, `error`, the static
    /// facts, the plugin, its tools and problems. Exit codes are the same.
    #[arg(long)]
    json: bool,
}

impl CheckArgs {
    pub(crate) fn run(self, config: &LoadedConfig) -> anyhow::Result<ExitCode> {
        if let Some(name) = &self.mcp_server {
            return check_mcp_server(config, name, self.json);
        }
        let Some(file) = self.file.as_deref() else {
            anyhow::bail!("name a plugin file, or --mcp-server NAME");
        };
        // The config as serve reads it, every profile's included: what serve refuses to
        // start on, check refuses too, before it judges the file.
        config.profiles().map_err(|e| {
            anyhow::anyhow!("{e}\n(serve refuses to start on this config: fix it first)")
        })?;
        let loader = inspecting_loader(config, self.isolate)?;
        if self.json {
            return self.run_json(&loader);
        }
        outln!("file:        {}", file.display())?;
        outln!("static checks (none of the file's code runs):")?;
        let facts = loader.inspect(file)?;
        let policy = loader.policy();
        outln!(
            "  type, size:  regular file, {} bytes (max_file_size {})",
            facts.size,
            policy.max_file_size
        )?;
        if policy.strict_permissions {
            outln!(
                "  permissions: ok (owner uid {}, mode {:04o}; its directory is not writable by others)",
                facts.uid,
                facts.mode & 0o7777
            )?;
        } else {
            outln!("  permissions: not checked ([plugins] strict_permissions = false)")?;
        }
        outln!("  ELF header:  complete")?;
        outln!("  sha256:      {}", facts.sha256)?;
        match (&facts.untrusted, policy.trust.mode()) {
            (Some(refusal), _) => {
                anyhow::bail!("{}: {refusal}", file.display());
            }
            (None, toolhost::TrustMode::Any) => {
                outln!("  trust:       mode \"any\" (every file that passes the checks loads)")?
            }
            (None, toolhost::TrustMode::Pinned) => outln!("  trust:       pinned")?,
            (None, toolhost::TrustMode::Signed) => {
                outln!("  trust:       signed by a listed publisher, or pinned")?
            }
        }
        if self.no_load {
            outln!("ok (not loaded: --no-load)")?;
            return Ok(ExitCode::SUCCESS);
        }
        if self.isolate {
            outln!(
                "loading it in a worker process: sandboxed (Landlock, required) with no write \
                 access and no network; none of its code runs in this process"
            )?;
        } else {
            outln!(
                "loading it: this runs the library's initialisers (code in the file) in this \
                 process, so only `check --isolate` inspects a file you do not trust"
            )?;
        }
        let plugin = loader.load_file(file)?;
        outln!("plugin:      {} {}", plugin.name, plugin.version)?;
        outln!(
            "plugin-api:  ABI {}, built with toolhost-plugin-api {} (this host: ABI {})",
            plugin.abi_version,
            plugin.api_version,
            toolhost::ABI_VERSION
        )?;
        if let Some(schema) = &plugin.settings_schema {
            let keys = toolhost_plugin_api::check::settings_keys(schema);
            outln!(
                "settings:    declared ({}); [plugins.{}.settings] checked against them",
                if keys.is_empty() {
                    "no keys".to_owned()
                } else {
                    keys.join(", ")
                },
                plugin.name
            )?;
        }
        for warning in plugin
            .warnings
            .iter()
            .chain(&loader.policy().settings.misspelt_tables(&plugin.name))
        {
            outln!("warning:     {warning}")?;
        }
        // Registered into a scratch registry, as a host would: what it refuses is marked.
        let (registry, problems) = toolhost::LoadedPlugin::registry(std::slice::from_ref(&plugin));
        let refused = refusals(&plugin, &problems);
        outln!(
            "tools:       {} ({} refused)",
            plugin.tools.len() + plugin.skipped_tools.len(),
            refused.len()
        )?;
        for t in &plugin.tools {
            let spec = t.spec();
            let flag = if spec.interactive {
                ", interactive"
            } else {
                ""
            };
            outln!(
                "  {} ({}{flag}): {}",
                spec.name,
                spec.risk,
                summary(&spec.description, 72)
            )?;
            if let Some((_, reason)) = refused
                .iter()
                .find(|(n, _)| n.as_deref() == Some(&spec.name))
            {
                outln!("    refused: {reason}")?;
                continue;
            }
            outln!("    requires:  {}", requirements_text(&spec.requirements))?;
            outln!("    arguments: {}", summary(&spec.schema.to_string(), 100))?;
            if let Some(output) = &spec.output_schema {
                outln!("    returns:   {}", summary(&output.to_string(), 100))?;
            }
        }
        for (_, reason) in refused.iter().filter(|(name, _)| name.is_none()) {
            outln!("  refused: {reason}")?;
        }
        for warning in description_warnings(&plugin, &registry) {
            outln!("warning: {warning}")?;
        }
        let failures = failures(&plugin, &problems);
        if !failures.is_empty() {
            return Err(Failure::Several(failures).into());
        }
        outln!("ok")?;
        Ok(ExitCode::SUCCESS)
    }

    /// `--json`: the same checks, as one object on stdout.
    fn run_json(&self, loader: &toolhost::PluginLoader) -> anyhow::Result<ExitCode> {
        let Some(file) = self.file.as_deref() else {
            anyhow::bail!("name a plugin file, or --mcp-server NAME");
        };
        let mut report = serde_json::json!({
            "file": file,
            "ok": false,
            "error": null,
            "static": null,
            "loaded": false,
            "isolated": self.isolate,
            "plugin": null,
            "tools": [],
            "problems": [],
            "warnings": [],
        });
        let outcome = (|| -> Result<bool, PluginLoadError> {
            let facts = loader.inspect(file)?;
            let policy = loader.policy();
            report["static"] = serde_json::json!({
                "size": facts.size,
                "max_file_size": policy.max_file_size,
                "sha256": facts.sha256,
                "owner_uid": facts.uid,
                "mode": format!("{:04o}", facts.mode & 0o7777),
                "permissions_checked": policy.strict_permissions,
                "trust": policy.trust.mode(),
            });
            if let Some(refusal) = facts.untrusted {
                return Err(PluginLoadError {
                    file: file.to_path_buf(),
                    kind: LoadErrorKind::Untrusted(Box::new(refusal)),
                });
            }
            if self.no_load {
                return Ok(true);
            }
            let plugin = loader.load_file(file)?;
            report["loaded"] = true.into();
            report["plugin"] = serde_json::json!({
                "name": plugin.name,
                "version": plugin.version,
                "api_version": plugin.api_version,
                "abi_version": plugin.abi_version,
                "host_abi_version": toolhost::ABI_VERSION,
                // The crate version the host was built with, as the first `--json`
                // release named it (then it was also the ABI version).
                "host_api_version": toolhost::API_VERSION,
                "mode": plugin.mode,
                "settings_schema": plugin.settings_schema,
            });
            let (registry, problems) =
                toolhost::LoadedPlugin::registry(std::slice::from_ref(&plugin));
            let mut warnings = plugin.warnings.clone();
            warnings.extend(loader.policy().settings.misspelt_tables(&plugin.name));
            warnings.extend(description_warnings(&plugin, &registry));
            report["warnings"] = warnings.into();
            let refused = refusals(&plugin, &problems);
            let mut tools: Vec<serde_json::Value> = plugin
                .tools
                .iter()
                .map(|t| {
                    let spec = t.spec();
                    let mut tool = serde_json::json!({
                        "name": spec.name,
                        "risk": spec.risk,
                        "interactive": spec.interactive,
                        "description": spec.description,
                        "requirements": spec.requirements,
                        "schema": spec.schema,
                    });
                    if let Some(output) = &spec.output_schema {
                        tool["output_schema"] = output.clone();
                    }
                    if let Some((_, reason)) = refused
                        .iter()
                        .find(|(n, _)| n.as_deref() == Some(&spec.name))
                    {
                        tool["refused"] = reason.clone().into();
                    }
                    tool
                })
                .collect();
            tools.extend(
                refused
                    .iter()
                    .filter(|(name, _)| name.is_none())
                    .map(|(_, reason)| serde_json::json!({"refused": reason})),
            );
            report["tools"] = tools.into();
            let problems = failures(&plugin, &problems);
            let clean = problems.is_empty();
            report["problems"] = problems.into();
            Ok(clean)
        })();
        let ok = match outcome {
            Ok(clean) => clean,
            Err(error) => {
                report["error"] = error.to_string().into();
                false
            }
        };
        report["ok"] = ok.into();
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| anyhow::anyhow!("could not encode the report: {e}"))?;
        outln!("{text}")?;
        Ok(if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    }
}

/// The description rule over one plugin: its tools' descriptions that name a tool it does
/// not provide (a loaded plugin's other tools are unknown here; `list --profile` checks
/// against a profile), one line each, saying what to do.
fn description_warnings(plugin: &toolhost::LoadedPlugin, registry: &ToolRegistry) -> Vec<String> {
    toolhost::DescriptionRule::for_plugins(std::slice::from_ref(plugin))
        .check(registry)
        .into_iter()
        .map(|m| {
            let place = if m.place == "description" {
                "its description".to_owned()
            } else {
                format!("its {}", m.place)
            };
            format!(
                "plugin '{}', tool '{}': {place} names '{}', a tool this plugin does not \
                 provide (models call tools named to them, and a profile may not have it); \
                 reword it or add the tool to the profile (every profile that shows '{}' \
                 must show '{}' too)",
                m.plugin, m.tool, m.word, m.tool, m.word
            )
        })
        .collect()
}

/// Everything a host would refuse of `plugin`: tools left out at load, and what the
/// scratch registry refused (`problems`), one line each.
pub(crate) fn failures(
    plugin: &toolhost::LoadedPlugin,
    problems: &[toolhost::RegistryError],
) -> Vec<String> {
    plugin
        .skipped_tools
        .iter()
        .map(|skipped| format!("{skipped}; the tool would be left out"))
        .chain(problems.iter().map(ToString::to_string))
        .collect()
}

/// The loader `check` uses: the config's policy, or with `isolate` one that loads only
/// in a worker sandboxed for inspection (no write access, no network, Landlock required).
pub(crate) fn inspecting_loader(
    config: &LoadedConfig,
    isolate: bool,
) -> anyhow::Result<toolhost::PluginLoader> {
    if isolate {
        let mut policy = super::load_policy(config, true)?;
        let mut isolation = toolhost::IsolationPolicy::clone(&policy.isolation);
        isolation.inspect_only();
        policy.isolation = std::sync::Arc::new(isolation);
        super::new_loader_with(policy)
    } else {
        new_loader(config, false)
    }
}

/// Why each refused tool is left out: `(Some(name), why)` for a tool the plugin exported
/// that the scratch registry refused, `(None, why)` for one left out at load (its metadata
/// failed the shared check; its name may be what failed).
fn refusals(
    plugin: &toolhost::LoadedPlugin,
    problems: &[toolhost::RegistryError],
) -> Vec<(Option<String>, String)> {
    let at_load = plugin
        .skipped_tools
        .iter()
        .map(|reason| (None, reason.clone()));
    let at_registration = problems.iter().map(|e| {
        let name = match e {
            toolhost::RegistryError::Duplicate { tool, .. }
            | toolhost::RegistryError::Invalid { tool, .. } => Some(tool.clone()),
            _ => None,
        };
        (name, e.to_string())
    });
    at_load.chain(at_registration).collect()
}

/// A tool's requirements on one line.
fn requirements_text(req: &toolhost::Requirements) -> String {
    let mut parts = Vec::new();
    if !req.env.is_empty() {
        parts.push(format!("env {}", req.env.join(", ")));
    }
    if !req.programs.is_empty() {
        parts.push(format!("programs {}", req.programs.join(", ")));
    }
    if req.workspace {
        parts.push("the workspace (--workspace, [workspace] roots)".to_owned());
    }
    match req.task {
        toolhost_plugin_api::TaskSupport::Optional => {
            parts.push("may run as an MCP task (ctx.detach)".to_owned());
        }
        toolhost_plugin_api::TaskSupport::Required => parts.push(
            "an MCP task (2026-07-28 clients without the tasks extension are refused)".to_owned(),
        ),
        _ => {}
    }
    if parts.is_empty() {
        "nothing".to_owned()
    } else {
        parts.join("; ")
    }
}

/// `toolhost check --mcp-server NAME`.
fn check_mcp_server(config: &LoadedConfig, name: &str, json: bool) -> anyhow::Result<ExitCode> {
    let servers = config.mcp_servers();
    let Some(server) = servers.iter().find(|s| s.name == name) else {
        let known: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
        anyhow::bail!(
            "the config names no MCP server '{name}' (its [[mcp_servers]]: {})",
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        );
    };
    let (status, tools) = toolhost::McpServers::check_for_command(
        server,
        config
            .state_dir()
            .unwrap_or_else(std::env::temp_dir)
            .join("mcp-servers"),
        config.isolation_policy(),
    )?;
    let running = matches!(status.state, toolhost::ServerState::Running { .. });
    if json {
        let value = serde_json::json!({
            "ok": running,
            "server": status,
            "tools": tools.iter().map(|t| serde_json::json!({
                "name": t.spec().name,
                "risk": t.spec().risk.as_str(),
                "description": t.spec().description,
                "output_schema": t.spec().output_schema.is_some(),
            })).collect::<Vec<_>>(),
        });
        let text = serde_json::to_string_pretty(&value)
            .map_err(|e| anyhow::anyhow!("could not encode the report: {e}"))?;
        outln!("{text}")?;
        return Ok(if running {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    outln!("MCP server:  {} ({})", status.name, status.transport)?;
    outln!("endpoint:    {}", status.endpoint)?;
    if let Some(network) = status.network {
        outln!(
            "sandbox:     network {}; writes its own folder{}",
            if network { "allowed" } else { "off" },
            if server.sandbox.write_paths.is_empty() {
                String::new()
            } else {
                format!(
                    " and {}",
                    server
                        .sandbox
                        .write_paths
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        )?;
    }
    if let Some(containment) = &status.containment {
        outln!("held by:     {containment}")?;
    }
    match &status.state {
        toolhost::ServerState::Running {
            protocol, server, ..
        } => {
            outln!("connected:   protocol {protocol}, {server}")?;
        }
        toolhost::ServerState::Restarting { reason }
        | toolhost::ServerState::Quarantined { reason } => {
            anyhow::bail!("could not reach MCP server '{name}': {reason}");
        }
        other => anyhow::bail!("could not reach MCP server '{name}' ({other:?})"),
    }
    outln!(
        "tools ({}, named with the prefix {:?}):",
        tools.len(),
        status.prefix
    )?;
    for tool in &tools {
        let spec = tool.spec();
        outln!(
            "  {:<32} {:<11} {}",
            spec.name,
            spec.risk.to_string(),
            summary(&spec.description, 60)
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
