//! `toolhost list`: loads the plugins once and prints their tools, as a table or JSON,
//! optionally as one profile's agent sees them (the host's own tools included, marked
//! `(host)`; then with a warning for each description that names a tool the profile does
//! not show).

use std::process::ExitCode;
use std::sync::Arc;

use toolhost::{Availability, LoadedConfig};

use super::{Loaded, PluginDirs, new_loader, setup_indexed};
use crate::output::{outln, print_table, summary};

/// `toolhost list`.
#[derive(clap::Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    pub(crate) plugins: PluginDirs,
    /// Print a JSON array (with each tool's schema and plugin file) instead of a table.
    #[arg(long)]
    json: bool,
    /// Show exactly what this profile's agent sees, and the size of its tool specs.
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
}

impl ListArgs {
    pub(crate) fn run(self, config: &LoadedConfig) -> anyhow::Result<ExitCode> {
        let dirs = self.plugins.resolve(config);
        let profile = self.profile.as_deref();
        let loader = Arc::new(new_loader(config, self.plugins.isolate)?);
        let Loaded {
            report,
            registry,
            mentions,
            profile: resolved,
        } = setup_indexed(config, &loader, &dirs, profile)?;
        // A profile's agent (and every MCP client) also gets the host's own tools: the
        // listing shows them too, as the host's.
        let registry = if profile.is_some() && resolved.output.read_output {
            toolhost::with_read_output(&registry)
        } else {
            registry
        };
        if report.plugins.is_empty() {
            let shown: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
            crate::output::note(format_args!("no plugins loaded from {}", shown.join(", ")));
        }
        let availability = Availability::new(config.call_settings().availability_ttl);
        if self.json {
            let tools = registry.listing();
            let text = serde_json::to_string_pretty(&tools)
                .map_err(|e| anyhow::anyhow!("could not encode the listing: {e}"))?;
            outln!("{text}")?;
            return Ok(ExitCode::SUCCESS);
        }
        // With a profile: exactly what its agent sees. Without: every tool, deny ones included.
        let visible = availability.visible_specs(&registry);
        let shown: Vec<&toolhost::RegisteredTool> = registry
            .iter()
            .filter(|t| profile.is_none() || visible.iter().any(|s| s.name == t.spec().name))
            .collect();
        let rows: Vec<[String; 5]> = shown
            .iter()
            .map(|t| {
                let spec = t.spec();
                [
                    spec.name.clone(),
                    spec.risk.to_string(),
                    if spec.interactive { "yes" } else { "no" }.to_owned(),
                    match t.tool().origin() {
                        toolhost::ToolOrigin::Native => "(host)".to_owned(),
                        toolhost::ToolOrigin::McpServer { source } => {
                            format!("mcp:{}", source.server)
                        }
                        origin => origin.plugin_name().to_owned(),
                    },
                    summary(&spec.description, 72),
                ]
            })
            .collect();
        print_table(
            &["NAME", "RISK", "INTERACTIVE", "PLUGIN", "DESCRIPTION"],
            &rows,
        )?;
        for t in registry.iter() {
            if let Err(reason) = availability.check(t.spec()) {
                outln!("unavailable: {reason}")?;
            }
        }
        if let Some(name) = profile {
            // What the model is sent: name, description and parameters of each tool it sees.
            let chars: usize = visible
                .iter()
                .map(|s| {
                    serde_json::json!({"name": s.name, "description": s.description, "parameters": s.schema})
                        .to_string()
                        .chars()
                        .count()
                })
                .sum();
            outln!()?;
            outln!(
                "profile '{name}': its agent sees {} tools; their specs take {chars} characters (about {} tokens)",
                visible.len(),
                chars.div_ceil(4)
            )?;
            // The description rule: one warning per tool whose descriptions name a tool
            // this profile does not show.
            for mention in &mentions {
                outln!("warning: {mention}")?;
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}
