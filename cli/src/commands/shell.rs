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
pub(crate) struct ManArgs {}

impl ManArgs {
    /// Writes the manual page (roff) for `C`'s command line on stdout: `toolhost man >
    /// toolhost.1`, or `toolhost man | man -l -`.
    pub(crate) fn run<C: CommandFactory>(&self) -> anyhow::Result<ExitCode> {
        let mut page = Vec::new();
        clap_mangen::Man::new(C::command())
            .render(&mut page)
            .map_err(|e| anyhow::anyhow!("could not render the manual page: {e}"))?;
        write_stdout(&page)
    }
}

/// Writes `bytes` (generated text) on stdout.
fn write_stdout(bytes: &[u8]) -> anyhow::Result<ExitCode> {
    crate::output::raw(&String::from_utf8_lossy(bytes))?;
    Ok(ExitCode::SUCCESS)
}
