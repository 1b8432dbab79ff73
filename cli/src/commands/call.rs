//! `toolhost call TOOL ARGS`: one tool call, run in this process (the plugins loaded
//! here, the person at the terminal asked for approval) or, with `--control`, in the
//! running host.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use toolhost::{Arguments, CallDoor, Caller, DispatchConfig, Frontend, LoadedConfig, ToolCall};

use super::{Loaded, PluginDirs, new_loader, runtime, setup_indexed, terminal_approver, usage};
use crate::output::{errln, outln};

/// `toolhost call`.
#[derive(clap::Args)]
pub(crate) struct CallArgs {
    /// The tool's name.
    tool: String,
    /// The arguments as a JSON object, e.g. '{"timezone": "Europe/Paris"}'.
    #[arg(default_value = "{}")]
    args: String,
    #[command(flatten)]
    pub(crate) plugins: PluginDirs,
    #[command(flatten)]
    pub(crate) workspace: super::WorkspaceRoots,
    /// Seconds the call may run before it is cancelled (interactive tools too).
    /// Default: the config's `calls.timeout_secs`, else 60.
    #[arg(long, value_parser = super::seconds)]
    timeout: Option<Duration>,
    /// Run the call in the running host instead of loading the plugins here: on its
    /// control socket at PATH, or with no PATH on the default one (as for `status`). Put
    /// it after the tool and its arguments, or write `--control=PATH`.
    #[arg(long, value_name = "PATH", num_args = 0..=1)]
    control: Option<Option<PathBuf>>,
    /// Call as this profile's agent: only its tools.
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
    /// Approve write, destructive and network tools without asking. Without it, a
    /// terminal is asked ([y]es, [s]ession, [a]lways, [N]o); with no terminal such calls
    /// are refused. With --control the running host asks this terminal instead, or with
    /// --yes approves the call itself when this is the host's own user (or root).
    #[arg(long)]
    yes: bool,
    /// Print the whole result as JSON: the text (`output`), `is_error` and the error's
    /// kind, and what the tool returned besides its text (`structured`, `details`,
    /// `content`). The exit status is 1 for an error result, as without it.
    #[arg(long)]
    json: bool,
}

impl CallArgs {
    pub(crate) fn run(self, config: &LoadedConfig) -> anyhow::Result<ExitCode> {
        let limits = config.dispatch();
        let timeout = self.timeout.unwrap_or(limits.timeout);
        if let Some(explicit) = &self.control {
            if !self.plugins.dirs.is_empty() || !self.workspace.roots.is_empty() {
                return Err(usage(
                    "--plugins and --workspace don't go with --control: the running host's \
                     plugins, workspaces and approval policy are used (from a terminal, the \
                     host asks you there; --yes approves as the host's own user)",
                ));
            }
            // `--control echo '{}'`: clap took the tool's name for the socket's path.
            if let Some(path) = explicit
                && path.components().count() == 1
                && !path.exists()
            {
                return Err(usage(format!(
                    "--control took '{}' as the control socket's path: put --control after \
                     the tool and its arguments (`toolhost call TOOL ARGS --control`) for \
                     the default socket, or write --control=PATH",
                    path.display()
                )));
            }
            let socket = super::control_socket(config, explicit.clone());
            let arguments = parse_call_args(&self.args)?;
            return super::control::call(
                &socket,
                self.tool,
                arguments.into_value(),
                timeout,
                self.profile,
                self.json,
                self.yes,
            );
        }
        let arguments = parse_call_args(&self.args)?;
        let loader = Arc::new(new_loader(config, self.plugins.isolate)?);
        let Loaded {
            registry, profile, ..
        } = setup_indexed(
            config,
            &loader,
            &self.plugins.resolve(config),
            self.profile.as_deref(),
        )?;
        let runtime = runtime()?;
        let approver = terminal_approver(self.yes, "pass --yes to approve it without a terminal");
        let mut settings = config.call_settings();
        settings.dispatch = DispatchConfig {
            timeout,
            // An explicit --timeout bounds interactive tools too.
            interactive_timeout: if self.timeout.is_some() {
                timeout
            } else {
                limits.interactive_timeout
            },
            ..limits
        };
        // Tools that keep per-profile state (memory) find the profile's folder; cut
        // outputs are kept there.
        let door = CallDoor::new(
            &settings,
            super::profile_door_scope(config, &profile, registry)?,
            approver,
        );
        let door = super::with_audit_and_approvals(door, config, &profile)?;
        let mut request = door.request(Caller::this_process(Frontend::Cli));
        request.session = format!("cli-{}", std::process::id());
        request.channel = Some(std::sync::Arc::new(crate::approve::TerminalCaller::new(
            std::io::IsTerminal::is_terminal(&std::io::stdin()),
        )));
        let call = ToolCall {
            id: "cli-1".to_owned(),
            name: self.tool,
            arguments,
        };
        let result = runtime.block_on(async {
            let cancel = request.cancel.clone();
            tokio::spawn(async move {
                if tokio::signal::ctrl_c().await.is_ok() {
                    errln!("interrupted: cancelling the call");
                    cancel.cancel();
                }
            });
            door.call(&request, call).await
        });
        if self.json {
            outln!("{}", serde_json::to_string_pretty(&result)?)?;
            return Ok(if result.is_error {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            });
        }
        if result.is_error {
            return Err(anyhow::Error::msg(result.output));
        }
        outln!("{}", result.output)?;
        Ok(ExitCode::SUCCESS)
    }
}

/// The arguments JSON (parsed once; its text is what the plugin gets), or a usage error
/// (exit code 2).
fn parse_call_args(args: &str) -> anyhow::Result<Arguments> {
    match Arguments::parse(args) {
        Ok(a) if a.value().is_object() => Ok(a),
        Ok(_) => Err(usage(
            "the arguments must be a JSON object, e.g. '{\"key\": \"value\"}'",
        )),
        Err(e) => Err(usage(format!(
            "the arguments are not valid JSON ({e}); pass one JSON object in single quotes"
        ))),
    }
}
