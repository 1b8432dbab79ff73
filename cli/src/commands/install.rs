//! `toolhost install FILE` and `toolhost remove NAME`: put a plugin into a plugin
//! directory, or take one out, the way a watching host picks up exactly once, and say
//! what the running host did.
//!
//! Install runs `check`'s checks (the static and trust checks, then a load: in this
//! process, or with `--isolate` only in a sandboxed worker), refuses a plugin whose tools
//! clash with the installed ones (or whose name or file is installed already) unless
//! `--replace`, then copies the bytes it checked (their sha256 compared again) to a hidden
//! temporary file in the directory (the loader ignores hidden files), mode 0644, fsyncs
//! it and renames it into place: the host sees one complete file appear, never a partial
//! one. A replaced plugin is replaced by that rename (the new file takes its path), so
//! its tools never go missing. Remove unlinks the file of the plugin with that name
//! (refusing two). Both then wait, bounded, for the host on the control socket to report
//! the file loaded, refused or gone, and print that; without a host they say so.
//!
//! Weak spot: the clash check loads the installed plugins in this process (as `list`
//! does); with `--isolate` they load in workers too.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use toolhost::{ControlClient, ControlError, HostStatus, LoadedConfig, LoadedPlugin, PluginStatus};

use super::check::{failures, inspecting_loader};
use super::{Failure, configured_plugin_dirs, control_socket};
use crate::output::outln;

/// How long install and remove wait for the host to report the file (a file that looks
/// half-written stays pending for up to 2 s before the host calls it broken).
const HOST_REPORT_WITHIN: Duration = Duration::from_secs(10);

/// `toolhost install`.
#[derive(clap::Args)]
pub(crate) struct InstallArgs {
    /// The plugin files (.so), installed one after the other.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// The plugin directory to install into. Default: the first of $TOOLHOST_PLUGINS, the
    /// config's `plugin_dirs`, $XDG_DATA_HOME/toolhost/plugins.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Replace what is installed: the plugin of the same name, a file of the same name,
    /// and plugins whose tools clash with this one's.
    #[arg(long)]
    replace: bool,
    /// Load the file (and the installed plugins it is compared with) only in worker
    /// processes, the file in one sandboxed with no write access and no network
    /// (Landlock, required), so none of its code runs in this process.
    #[arg(long)]
    isolate: bool,
    /// The running host's control socket (default as for `serve`).
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,
}

/// `toolhost remove`.
#[derive(clap::Args)]
pub(crate) struct RemoveArgs {
    /// The plugin's name (as `status` and `check` show it), or its file name in the
    /// directory.
    name: String,
    /// The plugin directory. Default as for `install`.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Load the installed plugins (to learn their names) only in worker processes.
    #[arg(long)]
    isolate: bool,
    /// The running host's control socket (default as for `serve`).
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,
}

/// The directory to work in: `--dir`, else the first configured one.
fn target_dir(config: &LoadedConfig, dir: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match dir {
        Some(d) => Ok(d),
        None => configured_plugin_dirs(config)
            .into_iter()
            .next()
            .ok_or_else(|| anyhow::anyhow!("no plugin directory is configured; pass --dir DIR")),
    }
}

/// The plugins installed in `dirs` (the directories a host using this config loads),
/// loaded with `loader`, warnings for files that do not load.
fn installed(loader: &toolhost::PluginLoader, dirs: &[PathBuf]) -> Vec<LoadedPlugin> {
    let existing: Vec<PathBuf> = dirs.iter().filter(|d| d.is_dir()).cloned().collect();
    let report = loader.load_dirs(&existing);
    for e in &report.errors {
        crate::output::errln!("warning: {e}");
    }
    report.plugins
}

/// The directories to compare with: the configured ones plus `dir`.
fn compared_dirs(config: &LoadedConfig, dir: &Path) -> Vec<PathBuf> {
    let mut dirs = configured_plugin_dirs(config);
    if !dirs.iter().any(|d| same_dir(d, dir)) {
        dirs.push(dir.to_path_buf());
    }
    dirs
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Whether `a` and `b` name the same entry of the same directory (the file itself may be
/// gone).
fn same_path(a: &Path, b: &Path) -> bool {
    a.file_name() == b.file_name()
        && match (a.parent(), b.parent()) {
            (Some(x), Some(y)) => same_dir(x, y),
            _ => false,
        }
}

impl InstallArgs {
    pub(crate) fn run(self, config: &LoadedConfig) -> anyhow::Result<ExitCode> {
        let dir = target_dir(config, self.dir.clone())?;
        let mut code = ExitCode::SUCCESS;
        for file in &self.files {
            if self.install(config, &dir, file)? != ExitCode::SUCCESS {
                code = ExitCode::FAILURE;
            }
        }
        Ok(code)
    }

    /// Installs one file into `dir`.
    fn install(&self, config: &LoadedConfig, dir: &Path, file: &Path) -> anyhow::Result<ExitCode> {
        let dir = dir.to_path_buf();
        let file_name = file
            .file_name()
            .ok_or_else(|| anyhow::anyhow!("{} names no file", file.display()))?;
        let named_like_a_plugin = Path::new(file_name)
            .extension()
            .is_some_and(|e| e == toolhost::LIBRARY_EXTENSION)
            && !file_name.to_string_lossy().starts_with('.');
        if !named_like_a_plugin {
            return Err(super::usage(format!(
                "{} is not named like a plugin (NAME.{}, not hidden): a host would ignore it",
                file.display(),
                toolhost::LIBRARY_EXTENSION
            )));
        }
        // `check`'s checks: static and trust, then the load (sandboxed with --isolate).
        let loader = inspecting_loader(config, self.isolate)?;
        let facts = loader.inspect(file)?;
        if let Some(refusal) = &facts.untrusted {
            anyhow::bail!("{}: {refusal}", file.display());
        }
        let plugin = loader.load_file(file)?;
        let (_scratch, problems) = toolhost::LoadedPlugin::registry(std::slice::from_ref(&plugin));
        let failed = failures(&plugin, &problems);
        if !failed.is_empty() {
            return Err(Failure::Several(failed).into());
        }
        let tools: Vec<String> = plugin.tools.iter().map(|t| t.spec().name.clone()).collect();
        outln!(
            "checked {}: plugin {} {} (sha256 {}), tools {}",
            file.display(),
            plugin.name,
            plugin.version,
            facts.sha256,
            tools.join(", ")
        )?;

        // What it would clash with, among the plugins a host with this config loads.
        let others = installed(
            &super::new_loader(config, self.isolate)?,
            &compared_dirs(config, &dir),
        );
        let mut dest = dir.join(file_name);
        let mut replaced: Vec<(PathBuf, String)> = Vec::new();
        let mut clashes: Vec<String> = Vec::new();
        for other in &others {
            let same_file = same_path(&other.file, &dest);
            let same_name = other.name == plugin.name;
            let shared: Vec<&String> = other
                .tools
                .iter()
                .map(|t| &t.spec().name)
                .filter(|n| tools.contains(n))
                .collect();
            if !(same_file || same_name || !shared.is_empty()) {
                continue;
            }
            if same_name {
                clashes.push(format!(
                    "plugin '{}' is installed already ({} in {})",
                    other.name,
                    other.version,
                    other.file.display()
                ));
            } else if same_file && shared.is_empty() {
                clashes.push(format!(
                    "{} is installed already (plugin '{}' {})",
                    other.file.display(),
                    other.name,
                    other.version
                ));
            }
            if !same_name {
                for tool in &shared {
                    clashes.push(format!(
                        "tool '{tool}' of {} is also exported by plugin '{}' in {}",
                        file.display(),
                        other.name,
                        other.file.display()
                    ));
                }
            }
            replaced.push((other.file.clone(), other.name.clone()));
        }
        if !clashes.is_empty() && !self.replace {
            clashes.push(format!(
                "nothing was installed; pass --replace to replace {}",
                if replaced.len() == 1 { "it" } else { "them" }
            ));
            return Err(Failure::Several(clashes).into());
        }
        // One plugin replaced in the target directory: the new file takes its path, so
        // the swap is one rename and its tools never go missing.
        replaced.dedup_by(|a, b| same_path(&a.0, &b.0));
        if !replaced.iter().any(|(f, _)| same_path(f, &dest))
            && let [(only, _)] = replaced.as_slice()
            && only.parent().is_some_and(|p| same_dir(p, &dir))
            && let Some(name) = only.file_name()
        {
            dest = dir.join(name);
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .create(&dir)
            .map_err(|e| anyhow::anyhow!("could not create {}: {e}", dir.display()))?;
        let signature = signature_of(file);
        if signature.is_file() {
            place(&signature, &signature_of(&dest), None)?;
        }
        place(file, &dest, Some(&facts.sha256))?;
        outln!("installed {} as {}", plugin.name, dest.display())?;
        for (file, name) in replaced.iter().filter(|(f, _)| !same_path(f, &dest)) {
            std::fs::remove_file(file)
                .map_err(|e| anyhow::anyhow!("could not remove {}: {e}", file.display()))?;
            let _ = std::fs::remove_file(signature_of(file));
            outln!("removed {} ({name}), replaced", file.display())?;
        }
        for (file, name) in replaced.iter().filter(|(f, _)| same_path(f, &dest)) {
            outln!("replaced {name} at {}", file.display())?;
        }
        let outcome = watch_host(
            config,
            self.control.clone(),
            &dir,
            &dest,
            Expect::Loaded(&facts.sha256),
        )?;
        Ok(outcome)
    }
}

impl RemoveArgs {
    pub(crate) fn run(self, config: &LoadedConfig) -> anyhow::Result<ExitCode> {
        let dir = target_dir(config, self.dir.clone())?;
        let named = dir.join(&self.name);
        let file = if !self.name.contains('/') && named.is_file() {
            named
        } else {
            let loader = super::new_loader(config, self.isolate)?;
            let matching: Vec<LoadedPlugin> = installed(&loader, std::slice::from_ref(&dir))
                .into_iter()
                .filter(|p| p.name == self.name)
                .collect();
            match matching.as_slice() {
                [] => anyhow::bail!(
                    "no plugin named '{}' is installed in {} (see `toolhost list --plugins {}`; \
                     a file name works too)",
                    self.name,
                    dir.display(),
                    dir.display()
                ),
                [one] => one.file.clone(),
                several => {
                    let files: Vec<String> = several
                        .iter()
                        .map(|p| p.file.display().to_string())
                        .collect();
                    anyhow::bail!(
                        "{} files in {} hold a plugin named '{}': {}; remove one by its file \
                         name",
                        several.len(),
                        dir.display(),
                        self.name,
                        files.join(", ")
                    )
                }
            }
        };
        std::fs::remove_file(&file)
            .map_err(|e| anyhow::anyhow!("could not remove {}: {e}", file.display()))?;
        let _ = std::fs::remove_file(signature_of(&file));
        outln!("removed {}", file.display())?;
        watch_host(config, self.control, &dir, &file, Expect::Gone)
    }
}

fn signature_of(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".minisig");
    PathBuf::from(name)
}

/// Copies `from` to `to` through a hidden temporary file in `to`'s directory (mode 0644,
/// created exclusively, fsynced, renamed into place, the directory fsynced). With
/// `sha256`, the bytes copied must hash to it (the file checked is the file installed).
fn place(from: &Path, to: &Path, sha256: Option<&str>) -> anyhow::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let dir = to.parent().unwrap_or(Path::new("."));
    let name = to
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut nonce = [0u8; 8];
    getrandom::fill(&mut nonce)
        .map_err(|e| anyhow::anyhow!("could not get random bytes for a temporary name: {e}"))?;
    let tmp = dir.join(format!(
        ".{name}.install-{}-{}",
        std::process::id(),
        nonce.iter().map(|b| format!("{b:02x}")).collect::<String>()
    ));
    let copy = || -> std::io::Result<String> {
        let mut src = std::fs::File::open(from)?;
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&tmp)?;
        // The umask may have narrowed it; wider than 0644 it never is.
        out.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            let n = match src.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n])?;
        }
        out.sync_all()?;
        Ok(hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect())
    };
    let fail = |what: String| {
        let _ = std::fs::remove_file(&tmp);
        anyhow::anyhow!(what)
    };
    let copied = copy().map_err(|e| {
        fail(format!(
            "could not copy {} into {}: {e}",
            from.display(),
            dir.display()
        ))
    })?;
    if let Some(expected) = sha256
        && copied != expected
    {
        return Err(fail(format!(
            "{} changed while it was installed (sha256 {expected} when checked, {copied} \
             copied); nothing was installed: run the install again",
            from.display()
        )));
    }
    std::fs::rename(&tmp, to).map_err(|e| {
        fail(format!(
            "could not rename the copy into place as {}: {e}",
            to.display()
        ))
    })?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// What the host should do with the file.
enum Expect<'a> {
    /// Load it, with this sha256.
    Loaded(&'a str),
    /// Drop it.
    Gone,
}

/// Tells what the host on the control socket did with `file` in `dir`: waits (bounded)
/// until its status shows the file loaded, refused or gone. Exit 1 when it refused it.
fn watch_host(
    config: &LoadedConfig,
    control: Option<PathBuf>,
    dir: &Path,
    file: &Path,
    expect: Expect<'_>,
) -> anyhow::Result<ExitCode> {
    let socket = control_socket(config, control);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("could not start the async runtime: {e}"))?;
    let mut client = match runtime.block_on(ControlClient::connect(&socket)) {
        Ok(c) => c.answer_within(HOST_REPORT_WITHIN),
        Err(ControlError::NotRunning { .. }) => {
            outln!(
                "no host is running on {}: a host picks it up when it starts",
                socket.display()
            )?;
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => {
            outln!("could not ask the running host: {e}")?;
            return Ok(ExitCode::SUCCESS);
        }
    };
    let status = runtime.block_on(client.status())?;
    let host = format!("host pid {}", status.pid);
    if !status.catalog.plugin_dirs.iter().any(|d| same_dir(d, dir)) {
        outln!(
            "{host} (on {}) does not load plugins from {}",
            socket.display(),
            dir.display()
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    if !status.watching {
        outln!("{host} does not watch its plugin directories: run `toolhost reload`")?;
        return Ok(ExitCode::SUCCESS);
    }
    let deadline = Instant::now() + HOST_REPORT_WITHIN;
    // What the file served before, to say what went.
    let before: Option<PluginStatus> = status
        .catalog
        .plugins
        .iter()
        .find(|p| same_path(&p.file, file))
        .cloned();
    let mut status: HostStatus = status;
    loop {
        let entry: Option<&PluginStatus> = status
            .catalog
            .plugins
            .iter()
            .find(|p| same_path(&p.file, file));
        let error = status
            .catalog
            .load_errors
            .iter()
            .find(|e| same_path(&e.file, file))
            .map(|e| e.error.clone());
        match (&expect, entry) {
            (Expect::Loaded(sha256), Some(p)) if p.sha256 == *sha256 => {
                outln!(
                    "{host} loaded {} {} (generation {}) from {}: tools {}",
                    p.name,
                    p.version,
                    p.generation,
                    p.file.display(),
                    p.tools.join(", ")
                )?;
                return Ok(ExitCode::SUCCESS);
            }
            (Expect::Loaded(_), Some(p)) if p.last_error.is_some() => {
                outln!(
                    "{host} refused {} and keeps serving the previous generation: {}",
                    file.display(),
                    p.last_error.as_deref().unwrap_or_default()
                )?;
                return Ok(ExitCode::FAILURE);
            }
            (Expect::Loaded(_), None) if error.is_some() => {
                outln!(
                    "{host} refused {}: {}",
                    file.display(),
                    error.unwrap_or_default()
                )?;
                return Ok(ExitCode::FAILURE);
            }
            (Expect::Gone, None) if error.is_none() => {
                match &before {
                    Some(p) => outln!(
                        "{host} dropped {} {} from {}: tools {} gone",
                        p.name,
                        p.version,
                        file.display(),
                        p.tools.join(", ")
                    )?,
                    None => outln!("{host} had not loaded {}", file.display())?,
                }
                return Ok(ExitCode::SUCCESS);
            }
            _ => {}
        }
        if Instant::now() >= deadline {
            outln!(
                "{host} has not reported {} within {} s; see `toolhost status`",
                file.display(),
                HOST_REPORT_WITHIN.as_secs()
            )?;
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_millis(20));
        status = runtime.block_on(client.status())?;
    }
}
