//! `toolhost trust`: pins plugin files (sha256, plugin name and version) in the trust
//! file for `[trust] mode = "pinned"`, lists and removes pins.
//!
//! A file is pinned only after it passes the static checks (permissions, type, size,
//! ELF header). Its name and version are read by loading it once, which runs its
//! initialisers: the operator pins a file they checked, so that is the trust they give it;
//! `--no-load` pins by sha256 alone.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use toolhost::{LoadPolicy, LoadedConfig, Pin, TrustMode, TrustPolicy, TrustStore};

use super::{Failure, new_loader_with};
use crate::output::{outln, print_table};

/// `toolhost trust`.
#[derive(clap::Args)]
pub(crate) struct TrustArgs {
    /// The plugin files to pin.
    #[arg(value_name = "FILE", required_unless_present_any = ["list", "remove"])]
    files: Vec<PathBuf>,
    /// Print the pinned files.
    #[arg(long, conflicts_with_all = ["files", "remove"])]
    list: bool,
    /// Remove pins: by the file's path as pinned, or by sha256 (repeatable).
    #[arg(long, value_name = "FILE|SHA256", conflicts_with = "files")]
    remove: Vec<String>,
    /// Pin by sha256 only, without loading the file (its plugin name and version are
    /// not recorded).
    #[arg(long)]
    no_load: bool,
    /// With --list: print the pins as JSON.
    #[arg(long, requires = "list")]
    json: bool,
}

impl TrustArgs {
    pub(crate) fn run(self, config: &LoadedConfig) -> anyhow::Result<ExitCode> {
        let policy = config.load_policy()?;
        let store_path = policy
            .trust
            .file()
            .map(Path::to_path_buf)
            .ok_or(toolhost::TrustError::NoTrustFile)?;
        let mut store = TrustStore::load(&store_path)?;
        if self.list && self.json {
            outln!("{}", serde_json::to_string_pretty(&store.pins)?)?;
            return Ok(ExitCode::SUCCESS);
        }
        if self.list {
            list(&store, &store_path)?;
            return Ok(ExitCode::SUCCESS);
        }
        if self.remove.is_empty() {
            pin(&mut store, &store_path, policy, &self)?;
        } else {
            remove(&mut store, &self.remove)?;
        }
        store.save(&store_path)?;
        Ok(ExitCode::SUCCESS)
    }
}

fn list(store: &TrustStore, path: &Path) -> anyhow::Result<()> {
    if store.pins.is_empty() {
        outln!("no pinned files in {}", path.display())?;
        return Ok(());
    }
    let rows: Vec<[String; 5]> = store
        .pins
        .iter()
        .map(|p| {
            [
                p.sha256.clone(),
                p.plugin.clone().unwrap_or_else(|| "?".to_owned()),
                p.version.clone().unwrap_or_else(|| "?".to_owned()),
                p.file.display().to_string(),
                p.added.clone(),
            ]
        })
        .collect();
    print_table(&["SHA256", "PLUGIN", "VERSION", "FILE", "ADDED"], &rows)?;
    Ok(())
}

fn pin(
    store: &mut TrustStore,
    store_path: &Path,
    policy: LoadPolicy,
    args: &TrustArgs,
) -> anyhow::Result<()> {
    let mode = policy.trust.mode();
    // The operator vouches for these files: every check but the trust mode's applies.
    let loader = new_loader_with(LoadPolicy {
        trust: TrustPolicy::default(),
        ..policy
    })?;
    // Each file that could not be pinned; the others are, and are listed on stdout.
    let mut failures = Vec::new();
    for file in &args.files {
        let facts = match loader.inspect(file) {
            Ok(f) => f,
            Err(e) => {
                failures.push(format!("{e}; not pinned"));
                continue;
            }
        };
        let (plugin, version) = if args.no_load {
            (None, None)
        } else {
            match loader.load_file(file) {
                Ok(p) if p.sha256 == facts.sha256 => (Some(p.name), Some(p.version)),
                Ok(_) => {
                    failures.push(format!(
                        "{}: the file changed while it was being pinned; not pinned, run the \
                         command again",
                        file.display()
                    ));
                    continue;
                }
                Err(e) => {
                    failures.push(format!("{e}; not pinned"));
                    continue;
                }
            }
        };
        let shown = std::fs::canonicalize(file).unwrap_or_else(|_| file.clone());
        outln!(
            "pinned {} ({}, sha256 {})",
            shown.display(),
            match (&plugin, &version) {
                (Some(p), Some(v)) => format!("plugin {p} {v}"),
                _ => "not loaded".to_owned(),
            },
            facts.sha256
        )?;
        store.add(Pin {
            sha256: facts.sha256,
            file: shown,
            size: facts.size,
            plugin,
            version,
            added: jiff::Timestamp::now().to_string(),
        });
    }
    outln!("trust file: {}", store_path.display())?;
    if mode == TrustMode::Any {
        outln!(
            "note: [trust] mode is \"any\": pins take effect with mode = \"pinned\" or \"signed\""
        )?;
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Failure::Several(failures).into())
    }
}

fn remove(store: &mut TrustStore, which: &[String]) -> anyhow::Result<()> {
    let mut sha256s = BTreeSet::new();
    let mut files = BTreeSet::new();
    for item in which {
        if item.len() == 64 && item.bytes().all(|b| b.is_ascii_hexdigit()) {
            sha256s.insert(item.to_ascii_lowercase());
            continue;
        }
        let path = PathBuf::from(item);
        if let Ok(real) = std::fs::canonicalize(&path) {
            files.insert(real);
        }
        if let Ok(abs) = std::path::absolute(&path) {
            files.insert(abs);
        }
        files.insert(path);
    }
    let gone = store.remove(&sha256s, &files);
    for p in &gone {
        outln!(
            "removed the pin of {} (sha256 {})",
            p.file.display(),
            p.sha256
        )?;
    }
    if gone.is_empty() {
        anyhow::bail!(
            "no pin matches {}; `toolhost trust --list` shows them",
            which.join(", ")
        );
    }
    Ok(())
}
