//! `toolhost install FILE` and `toolhost remove NAME`: put a plugin into a plugin
//! directory, or take one out, the way a watching host picks up exactly once, and say
//! what the running host did.
//!
//! Install runs `check`'s checks on every file given (the static and trust checks, then
//! a load: in this process, or with `--isolate` only in a sandboxed worker), refuses
//! files whose tools clash with the installed ones or with each other (or whose name or
//! file is installed already) unless `--replace` — asking the registry's own rule
//! ([`toolhost::same_name`]) whether two tools of one name clash, so a deprecated tool
//! that gives way is no clash — then copies the bytes it checked (their sha256 compared
//! again) to hidden temporary files in the directory (the loader ignores hidden files),
//! mode 0644, fsynced, and renames them into place: the host sees complete files appear,
//! never a partial one. It is all or nothing: one file that fails a check, clashes or
//! cannot be copied leaves the directory as it was. A replaced plugin is replaced by that rename (the new file takes its path), so
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
    /// config's `plugin_dirs`, $XDG_DATA_HOME/toolhost/plugins (with --system, root's
    /// /usr/local/lib/toolhost/plugins).
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

impl InstallArgs {
    /// Loads every file only in sandboxed workers (as `--isolate`): what root's
    /// `--system install` does, so a plugin's code never runs as root in this process.
    pub(crate) fn isolate_loads(&mut self) {
        self.isolate = true;
    }
}

impl RemoveArgs {
    /// As [`InstallArgs::isolate_loads`], for the installed plugins `remove` looks at.
    pub(crate) fn isolate_loads(&mut self) {
        self.isolate = true;
    }
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
        crate::output::warning(format_args!("{e}"));
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

/// A file install checked: the plugin it holds and where its copy goes.
struct Checked {
    /// The file given.
    file: PathBuf,
    /// Its plugin, loaded by `check`'s loader.
    plugin: LoadedPlugin,
    /// sha256 of the bytes checked (the bytes copied must match).
    sha256: String,
    /// Where the copy goes in the target directory.
    dest: PathBuf,
    /// Installed plugins it replaces (`--replace`): file and plugin name.
    replaces: Vec<(PathBuf, String)>,
}

impl Checked {
    fn tool_names(&self) -> Vec<String> {
        self.plugin
            .tools
            .iter()
            .map(|t| t.spec().name.clone())
            .collect()
    }
}

/// A copy written under a hidden name, waiting to be renamed into place.
struct Staged {
    tmp: PathBuf,
    dest: PathBuf,
}

impl InstallArgs {
    /// Installs every file or none: all are checked and compared (with the installed
    /// plugins and with each other) first, then copied under hidden names, then renamed
    /// into place. A failure before the renames removes every copy and installs nothing.
    pub(crate) fn run(self, config: &LoadedConfig) -> anyhow::Result<ExitCode> {
        let dir = target_dir(config, self.dir.clone())?;
        let loader = inspecting_loader(config, self.isolate)?;
        let mut checked: Vec<Checked> = Vec::new();
        let mut problems: Vec<String> = Vec::new();
        let mut passed_over = 0;
        for file in &self.files {
            match self.check(&loader, &dir, file) {
                Ok(Some(c)) => checked.push(c),
                Ok(None) => passed_over += 1,
                Err(e) => problems.push(match e.downcast::<Failure>() {
                    Ok(Failure::Several(list)) => list.join("\nerror: "),
                    Ok(other) => other.to_string(),
                    Err(e) => format!("{e:#}"),
                }),
            }
        }
        if !problems.is_empty() {
            problems.push(nothing_installed(self.files.len()));
            return Err(Failure::Several(problems).into());
        }
        if checked.is_empty() && passed_over > 0 {
            return Err(super::usage(format!(
                "{}: no plugin among the files given (name the plugins' .{} files)",
                nothing_installed(self.files.len()),
                toolhost::LIBRARY_EXTENSION
            )));
        }
        problems.extend(clashes_within(&checked));
        let others = installed(
            &super::new_loader(config, self.isolate)?,
            &compared_dirs(config, &dir),
        );
        let mut clashes = Vec::new();
        for c in &mut checked {
            clashes.extend(clashes_with_installed(c, &others, &dir));
        }
        if !problems.is_empty() {
            problems.push(format!(
                "{} (the files given clash with each other: install one of them)",
                nothing_installed(self.files.len())
            ));
            return Err(Failure::Several(problems).into());
        }
        if !clashes.is_empty() && !self.replace {
            clashes.push(format!(
                "{}; pass --replace to replace the installed plugins named above",
                nothing_installed(self.files.len())
            ));
            return Err(Failure::Several(clashes).into());
        }
        create_dir(&dir)?;
        // Every copy first (signatures before their plugins); any failure takes them all
        // back.
        let mut staged: Vec<Staged> = Vec::new();
        for c in &checked {
            let signature = signature_of(&c.file);
            let copies = [
                signature
                    .is_file()
                    .then(|| (signature.clone(), signature_of(&c.dest), None)),
                Some((c.file.clone(), c.dest.clone(), Some(c.sha256.as_str()))),
            ];
            for (from, to, sha256) in copies.into_iter().flatten() {
                match stage(&from, &to, sha256) {
                    Ok(tmp) => staged.push(Staged { tmp, dest: to }),
                    Err(e) => {
                        for s in &staged {
                            let _ = std::fs::remove_file(&s.tmp);
                        }
                        return Err(e.context(nothing_installed(self.files.len())));
                    }
                }
            }
        }
        for (i, s) in staged.iter().enumerate() {
            if let Err(e) = std::fs::rename(&s.tmp, &s.dest) {
                for later in &staged[i..] {
                    let _ = std::fs::remove_file(&later.tmp);
                }
                let done: Vec<String> = staged[..i]
                    .iter()
                    .map(|s| s.dest.display().to_string())
                    .collect();
                anyhow::bail!(
                    "could not rename the copy into place as {}: {e}; {}",
                    s.dest.display(),
                    if done.is_empty() {
                        "nothing was installed".to_owned()
                    } else {
                        format!(
                            "installed before it: {} (remove them with `toolhost remove`, or \
                             run the install again with --replace)",
                            done.join(", ")
                        )
                    }
                );
            }
        }
        if let Ok(d) = std::fs::File::open(&dir) {
            let _ = d.sync_all();
        }
        for c in &checked {
            outln!("installed {} as {}", c.plugin.name, c.dest.display())?;
            for (file, name) in c.replaces.iter().filter(|(f, _)| !same_path(f, &c.dest)) {
                std::fs::remove_file(file)
                    .map_err(|e| anyhow::anyhow!("could not remove {}: {e}", file.display()))?;
                let _ = std::fs::remove_file(signature_of(file));
                outln!("removed {} ({name}), replaced", file.display())?;
            }
            for (file, name) in c.replaces.iter().filter(|(f, _)| same_path(f, &c.dest)) {
                outln!("replaced {name} at {}", file.display())?;
            }
        }
        let mut code = ExitCode::SUCCESS;
        for c in &checked {
            let outcome = watch_host(
                config,
                self.control.clone(),
                &dir,
                &c.dest,
                Expect::Loaded(&c.sha256),
                || Ok(()),
            )?;
            if outcome != ExitCode::SUCCESS {
                code = outcome;
            }
        }
        Ok(code)
    }

    /// `check`'s checks on one file: static and trust, then the load (sandboxed with
    /// --isolate), and the tools a registry would refuse. `None`: the file is plainly no
    /// plugin (a library rustc builds for itself, as the `#[tool]` macros' one beside the
    /// plugins in `target/release`) and is passed over, with a line that says so.
    fn check(
        &self,
        loader: &toolhost::PluginLoader,
        dir: &Path,
        file: &Path,
    ) -> anyhow::Result<Option<Checked>> {
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
        let facts = match loader.inspect(file) {
            Err(e) if e.kind.is_not_a_plugin() => {
                outln!("passed over {}: {}", file.display(), e.kind)?;
                return Ok(None);
            }
            other => other?,
        };
        if let Some(refusal) = &facts.untrusted {
            anyhow::bail!("{}: {refusal}", file.display());
        }
        let plugin = loader.load_file(file)?;
        let (_scratch, problems) = toolhost::LoadedPlugin::registry(std::slice::from_ref(&plugin));
        let failed: Vec<String> = failures(&plugin, &problems)
            .into_iter()
            .map(|f| format!("{}: {f}", file.display()))
            .collect();
        if !failed.is_empty() {
            return Err(Failure::Several(failed).into());
        }
        let checked = Checked {
            file: file.to_path_buf(),
            dest: dir.join(file_name),
            plugin,
            sha256: facts.sha256,
            replaces: Vec::new(),
        };
        outln!(
            "checked {}: plugin {} {} (sha256 {}), tools {}",
            file.display(),
            checked.plugin.name,
            checked.plugin.version,
            checked.sha256,
            checked.tool_names().join(", ")
        )?;
        Ok(Some(checked))
    }
}

/// "nothing was installed", with how many files were given when there were several.
fn nothing_installed(files: usize) -> String {
    match files {
        1 => "nothing was installed".to_owned(),
        n => format!("nothing was installed (none of the {n} files)"),
    }
}

/// Clashes among the files given: one plugin name or file name twice, or one tool name
/// in two of them that the registry's rule ([`toolhost::same_name`]) does not settle.
/// These cannot be replaced: one of the files has to go. Notes what the rule settles.
fn clashes_within(checked: &[Checked]) -> Vec<String> {
    let mut problems = Vec::new();
    for (i, a) in checked.iter().enumerate() {
        for b in &checked[i + 1..] {
            if a.plugin.name == b.plugin.name {
                problems.push(format!(
                    "{} and {} both hold plugin '{}'",
                    a.file.display(),
                    b.file.display(),
                    a.plugin.name
                ));
            } else if a.dest == b.dest {
                problems.push(format!(
                    "{} and {} would both be installed as {}",
                    a.file.display(),
                    b.file.display(),
                    a.dest.display()
                ));
            }
            for ta in &a.plugin.tools {
                for tb in b
                    .plugin
                    .tools
                    .iter()
                    .filter(|t| t.spec().name == ta.spec().name)
                {
                    match toolhost::same_name(ta.as_ref(), tb.as_ref()) {
                        Ok((_, note)) => note_superseded(&note),
                        Err(duplicate) => problems.push(duplicate.to_string()),
                    }
                }
            }
        }
    }
    problems
}

/// Prints what the registry's rule settles (a deprecated tool that gives way): not a
/// clash, nothing to replace.
fn note_superseded(note: &toolhost::Superseded) {
    let _ = outln!("note: {note}");
}

/// Clashes of `c` with the installed plugins `others` (a plugin of the same name, a file
/// of the same path, a tool of the same name the registry's rule does not settle). Fills
/// `c.replaces` with the plugins `--replace` would replace, and moves `c.dest` onto the
/// one plugin it replaces in `dir`, so the swap is one rename.
fn clashes_with_installed(c: &mut Checked, others: &[LoadedPlugin], dir: &Path) -> Vec<String> {
    let mut clashes = Vec::new();
    for other in others {
        let same_file = same_path(&other.file, &c.dest);
        let same_name = other.name == c.plugin.name;
        let mut shared = Vec::new();
        for theirs in &other.tools {
            for ours in c
                .plugin
                .tools
                .iter()
                .filter(|t| t.spec().name == theirs.spec().name)
            {
                match toolhost::same_name(theirs.as_ref(), ours.as_ref()) {
                    Ok((_, note)) => note_superseded(&note),
                    Err(_) => shared.push(ours.spec().name.clone()),
                }
            }
        }
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
                    c.file.display(),
                    other.name,
                    other.file.display()
                ));
            }
        }
        c.replaces.push((other.file.clone(), other.name.clone()));
    }
    // One plugin replaced in the target directory: the new file takes its path, so the
    // swap is one rename and its tools never go missing.
    c.replaces.dedup_by(|a, b| same_path(&a.0, &b.0));
    if !c.replaces.iter().any(|(f, _)| same_path(f, &c.dest))
        && let [(only, _)] = c.replaces.as_slice()
        && only.parent().is_some_and(|p| same_dir(p, dir))
        && let Some(name) = only.file_name()
    {
        c.dest = dir.join(name);
    }
    clashes
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
        // The host's view is read before the file goes: a watching host may drop it
        // before a status asked afterwards, and the report names what it served.
        let remove = || -> anyhow::Result<()> {
            std::fs::remove_file(&file)
                .map_err(|e| anyhow::anyhow!("could not remove {}: {e}", file.display()))?;
            let _ = std::fs::remove_file(signature_of(&file));
            outln!("removed {}", file.display())?;
            Ok(())
        };
        watch_host(config, self.control, &dir, &file, Expect::Gone, remove)
    }
}

/// Creates `dir` and its missing parents. With `--system` each folder made is 0755 whatever
/// the umask (root's folder, which the service's user must read); a refusal says who may
/// write the system plugin folder.
fn create_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    let fail = |e: std::io::Error| {
        let hint = if toolhost::system_layout().is_some()
            && e.kind() == std::io::ErrorKind::PermissionDenied
        {
            " (the system plugin folder is root's: run the command as root, e.g. `sudo \
             toolhost --system install FILE`)"
        } else {
            ""
        };
        anyhow::anyhow!("could not create {}: {e}{hint}", dir.display())
    };
    if toolhost::system_layout().is_none() {
        return std::fs::DirBuilder::new()
            .recursive(true)
            .create(dir)
            .map_err(fail);
    }
    let missing: Vec<&Path> = dir.ancestors().take_while(|d| !d.exists()).collect();
    for d in missing.into_iter().rev() {
        match std::fs::DirBuilder::new().mode(0o755).create(d) {
            Ok(()) => {
                std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).map_err(fail)?
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(fail(e)),
        }
    }
    Ok(())
}

fn signature_of(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".minisig");
    PathBuf::from(name)
}

/// Copies `from` to a hidden temporary file in `to`'s directory (mode 0644, created
/// exclusively, fsynced) and returns its path, for a rename into place as `to`. With
/// `sha256`, the bytes copied must hash to it (the file checked is the file installed).
/// On failure the copy is removed.
fn stage(from: &Path, to: &Path, sha256: Option<&str>) -> anyhow::Result<PathBuf> {
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
    Ok(tmp)
}

/// What the host should do with the file.
enum Expect<'a> {
    /// Load it, with this sha256.
    Loaded(&'a str),
    /// Drop it.
    Gone,
}

/// Makes `change` (what is done to `file` in `dir`) and tells what the host on the
/// control socket did with it: the host's status is read before the change, then again
/// (bounded) until it shows the file loaded, refused or gone. Exit 1 when it refused it.
fn watch_host(
    config: &LoadedConfig,
    control: Option<PathBuf>,
    dir: &Path,
    file: &Path,
    expect: Expect<'_>,
    change: impl FnOnce() -> anyhow::Result<()>,
) -> anyhow::Result<ExitCode> {
    let socket = control_socket(config, control);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("could not start the async runtime: {e}"))?;
    let first = runtime.block_on(ControlClient::connect(&socket)).map(|c| {
        let mut c = c.answer_within(HOST_REPORT_WITHIN);
        let status = runtime.block_on(c.status());
        (c, status)
    });
    change()?;
    let (mut client, status) = match first {
        Ok((c, Ok(status))) => (c, status),
        Ok((_, Err(e))) => {
            outln!("could not ask the running host: {e}")?;
            return Ok(ExitCode::SUCCESS);
        }
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
