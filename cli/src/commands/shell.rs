//! `toolhost completions SHELL` and `toolhost man`: shell completion scripts and the
//! manual page, generated from the same command-line definition the binary parses
//! (clap_complete, clap_mangen), so they never drift from it.

use std::process::ExitCode;

use clap::CommandFactory;

/// The shells completions are written for.
#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum Shell {
    /// bash: `toolhost completions bash > ~/.local/share/bash-completion/completions/toolhost`
    Bash,
    /// zsh: `toolhost completions zsh > ~/.zfunc/_toolhost` (with `fpath+=~/.zfunc`)
    Zsh,
    /// fish: `toolhost completions fish > ~/.config/fish/completions/toolhost.fish`
    Fish,
}

/// `toolhost completions`.
#[derive(clap::Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to write completions for.
    shell: Shell,
}

impl CompletionsArgs {
    /// Writes the completion script for `C`'s command line on stdout.
    pub(crate) fn run<C: CommandFactory>(&self) -> anyhow::Result<ExitCode> {
        let mut command = C::command();
        let mut script = Vec::new();
        let shell = match self.shell {
            Shell::Bash => clap_complete::Shell::Bash,
            Shell::Zsh => clap_complete::Shell::Zsh,
            Shell::Fish => clap_complete::Shell::Fish,
        };
        clap_complete::generate(shell, &mut command, "toolhost", &mut script);
        write_stdout(&script)
    }
}

/// `toolhost man`.
#[derive(clap::Args)]
pub(crate) struct ManArgs {
    /// The command whose page to print (`toolhost man call` is toolhost-call(1); `token
    /// add` is toolhost-token-add(1)). Default: the main page, toolhost(1).
    #[arg(value_name = "COMMAND")]
    command: Vec<String>,
    /// Write every page (toolhost.1 and one toolhost-COMMAND.1 per command) into DIR
    /// instead of printing one, e.g. `toolhost man --dir /usr/local/share/man/man1`.
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    dir: Option<std::path::PathBuf>,
}

/// The sections every page ends with (roff): how the command exits, what it reads from
/// the environment, and where its files are.
const COMMON_SECTIONS: &str = r#".SH "EXIT STATUS"
.TP
\fB0\fR
Success.
.TP
\fB1\fR
A failure: an error result of a call, a plugin check or install refused, a config or
state file that could not be read, a running host that refused the request.
.TP
\fB2\fR
A usage error: the command line asks for something that cannot be done.
.SH ENVIRONMENT
.TP
\fBTOOLHOST_LOG\fR
The log filter (tracing's syntax, e.g. \fBinfo,rmcp=warn\fR); logs go to stderr.
.TP
\fBTOOLHOST_LOG_FORMAT\fR
\fBjson\fR for one JSON object per log line; else text.
.TP
\fBTOOLHOST_PLUGINS\fR
Plugin directories (colon-separated), instead of the config's \fBplugin_dirs\fR.
.TP
\fBTOOLHOST_MODEL\fR, \fBTOOLHOST_MODEL_BASE_URL\fR, \fBTOOLHOST_API_KEY\fR
The agent's model, its API's base URL and key (over the config's \fB[model]\fR); the
key is otherwise read from the variable \fB[model] api_key_env\fR names
(\fBOPENAI_API_KEY\fR by default).
.TP
\fBXDG_CONFIG_HOME\fR, \fBXDG_DATA_HOME\fR, \fBXDG_STATE_HOME\fR, \fBXDG_RUNTIME_DIR\fR
Where the config, the plugin folder, state and the control socket are (see FILES).
.TP
\fBCONFIGURATION_DIRECTORY\fR, \fBSTATE_DIRECTORY\fR, \fBRUNTIME_DIRECTORY\fR
With \fB\-\-system\fR: the service's folders, as systemd sets them for the unit.
.TP
\fBTOOLHOST_SYSTEM_PLUGIN_DIR\fR
With \fB\-\-system\fR: the service's plugin folder (an absolute path), instead of
\fB/usr/local/lib/toolhost/plugins/\fR; give the service and the admin commands the same.
.TP
\fBNOTIFY_SOCKET\fR
\fBserve\fR tells systemd it is ready, reloading or stopping.
.SH FILES
.TP
\fB$XDG_CONFIG_HOME/toolhost/config.toml\fR (\fB~/.config/toolhost/config.toml\fR)
The config; \fB/etc/toolhost/config.toml\fR with \fB\-\-system\fR. Its \fBprofiles/\fR
folder beside it holds the profiles.
.TP
\fB$XDG_DATA_HOME/toolhost/plugins/\fR (\fB~/.local/share/toolhost/plugins/\fR)
The plugin folder. With \fB\-\-system\fR, \fB/usr/local/lib/toolhost/plugins/\fR:
root's (0755, files 0644), which the service reads and cannot write (the unit lists it
in \fBReadOnlyPaths=\fR); install into it as root with \fBsudo toolhost \-\-system
install FILE\fR (\fBinstall\fR and \fBremove\fR stay root, every other command run
by root acts as the service's user).
.TP
\fB$XDG_STATE_HOME/toolhost/\fR (\fB~/.local/state/toolhost/\fR)
State: \fBtokens.json\fR, \fBtrust.json\fR, \fBaudit.jsonl\fR, and per profile its
sessions, kept outputs and lasting approvals; \fB/var/lib/toolhost/\fR with
\fB\-\-system\fR.
.TP
\fB$XDG_RUNTIME_DIR/toolhost/control.sock\fR
The running host's control socket (else \fB$TMPDIR/toolhost\-UID/control.sock\fR);
\fB/run/toolhost/control.sock\fR with \fB\-\-system\fR.
"#;

/// A page: clap's sections for `cmd` (title, name, synopsis, description, options, its
/// commands), then [`COMMON_SECTIONS`], then `SEE ALSO` and the version.
fn page(cmd: clap::Command, parent: Option<&str>) -> anyhow::Result<Vec<u8>> {
    let man = clap_mangen::Man::new(cmd.clone())
        .source(format!("toolhost {}", env!("CARGO_PKG_VERSION")))
        .manual("toolhost manual");
    let mut out = Vec::new();
    let fail = |e: std::io::Error| anyhow::anyhow!("could not render the manual page: {e}");
    man.render_title(&mut out).map_err(fail)?;
    man.render_name_section(&mut out).map_err(fail)?;
    man.render_synopsis_section(&mut out).map_err(fail)?;
    man.render_description_section(&mut out).map_err(fail)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut out).map_err(fail)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut out).map_err(fail)?;
    }
    out.extend_from_slice(COMMON_SECTIONS.as_bytes());
    out.extend_from_slice(b".SH \"SEE ALSO\"\n");
    let name = cmd.get_display_name().unwrap_or_else(|| cmd.get_name());
    let mut see: Vec<String> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| format!("\\fB{name}\\-{}\\fR(1)", s.get_name().replace('-', "\\-")))
        .collect();
    if let Some(parent) = parent {
        see.insert(0, format!("\\fB{}\\fR(1)", parent.replace('-', "\\-")));
    }
    see.push("\\fBsystemd.exec\\fR(5)".to_owned());
    out.extend_from_slice(see.join(", ").as_bytes());
    out.push(b'\n');
    if cmd.get_version().is_some() {
        man.render_version_section(&mut out).map_err(fail)?;
    }
    Ok(out)
}

/// Every page of `cmd` and its visible commands, depth first: (file name, page).
fn pages(
    cmd: &clap::Command,
    parent: Option<&str>,
    into: &mut Vec<(String, Vec<u8>)>,
) -> anyhow::Result<()> {
    let name = cmd
        .get_display_name()
        .unwrap_or_else(|| cmd.get_name())
        .to_owned();
    into.push((format!("{name}.1"), page(cmd.clone(), parent)?));
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        pages(sub, Some(&name), into)?;
    }
    Ok(())
}

/// `cmd` and its commands without the `help` command clap adds.
fn without_help(cmd: clap::Command) -> clap::Command {
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_owned())
        .collect();
    names
        .into_iter()
        .fold(cmd.disable_help_subcommand(true), |cmd, name| {
            cmd.mut_subcommand(name, without_help)
        })
}

impl ManArgs {
    /// Writes the manual page (roff) of toolhost or one of its commands on stdout
    /// (`toolhost man | man -l -`), or every page into `--dir`.
    pub(crate) fn run<C: CommandFactory>(&self) -> anyhow::Result<ExitCode> {
        // No page for `help` (every page says what `--help` would), then building names
        // every command's page (`toolhost-call`) and synopsis.
        let mut root = without_help(C::command());
        root.build();
        if let Some(dir) = &self.dir {
            let mut all = Vec::new();
            pages(&root, None, &mut all)?;
            std::fs::create_dir_all(dir)
                .map_err(|e| anyhow::anyhow!("could not create {}: {e}", dir.display()))?;
            for (file, page) in &all {
                let path = dir.join(file);
                std::fs::write(&path, page)
                    .map_err(|e| anyhow::anyhow!("could not write {}: {e}", path.display()))?;
            }
            crate::output::outln!("wrote {} pages into {}", all.len(), dir.display())?;
            return Ok(ExitCode::SUCCESS);
        }
        let mut cmd = &root;
        let mut parent = None;
        for word in &self.command {
            let Some(sub) = cmd.find_subcommand(word).filter(|s| !s.is_hide_set()) else {
                let known: Vec<&str> = cmd
                    .get_subcommands()
                    .filter(|s| !s.is_hide_set())
                    .map(clap::Command::get_name)
                    .collect();
                return Err(super::usage(format!(
                    "no command '{}' (commands: {})",
                    self.command.join(" "),
                    known.join(", ")
                )));
            };
            parent = Some(cmd.get_display_name().unwrap_or_else(|| cmd.get_name()));
            cmd = sub;
        }
        write_stdout(&page(cmd.clone(), parent)?)
    }
}

/// Writes `bytes` (generated text) on stdout.
fn write_stdout(bytes: &[u8]) -> anyhow::Result<ExitCode> {
    crate::output::raw(&String::from_utf8_lossy(bytes))?;
    Ok(ExitCode::SUCCESS)
}
