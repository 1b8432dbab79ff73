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

use crate::output::outln;
use crate::{new_loader_with, print_table};

/// What `toolhost trust` was asked for.
pub(crate) struct TrustArgs {
    pub(crate) files: Vec<PathBuf>,
    pub(crate) list: bool,
    pub(crate) remove: Vec<String>,
    pub(crate) no_load: bool,
}

pub(crate) fn trust(config: &LoadedConfig, args: &TrustArgs) -> std::io::Result<ExitCode> {
    let policy = match config.load_policy() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let Some(store_path) = policy.trust.file().map(Path::to_path_buf) else {
        eprintln!("error: {}", toolhost::TrustError::NoTrustFile);
        return Ok(ExitCode::FAILURE);
    };
    let mut store = match TrustStore::load(&store_path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    if args.list {
        list(&store, &store_path)?;
        return Ok(ExitCode::SUCCESS);
    }
    let outcome = if args.remove.is_empty() {
        pin(&mut store, &store_path, policy, args)?
    } else {
        remove(&mut store, &args.remove)?
    };
    if let Err(code) = outcome {
        return Ok(code);
    }
    if let Err(e) = store.save(&store_path) {
        eprintln!("error: {e}");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn list(store: &TrustStore, path: &Path) -> std::io::Result<()> {
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
    print_table(&["SHA256", "PLUGIN", "VERSION", "FILE", "ADDED"], &rows)
}

fn pin(
    store: &mut TrustStore,
    store_path: &Path,
    policy: LoadPolicy,
    args: &TrustArgs,
) -> std::io::Result<Result<(), ExitCode>> {
    let mode = policy.trust.mode();
    // The operator vouches for these files: every check but the trust mode's applies.
    let loader = match new_loader_with(LoadPolicy {
        trust: TrustPolicy::default(),
        ..policy
    }) {
        Ok(l) => l,
        Err(code) => return Ok(Err(code)),
    };
    let mut failed = false;
    for file in &args.files {
        let facts = match loader.inspect(file) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("error: {e}; not pinned");
                failed = true;
                continue;
            }
        };
        let (plugin, version) = if args.no_load {
            (None, None)
        } else {
            match loader.load_file(file) {
                Ok(p) if p.sha256 == facts.sha256 => (Some(p.name), Some(p.version)),
                Ok(_) => {
                    eprintln!(
                        "error: {}: the file changed while it was being pinned; not pinned, run \
                         the command again",
                        file.display()
                    );
                    failed = true;
                    continue;
                }
                Err(e) => {
                    eprintln!("error: {e}; not pinned");
                    failed = true;
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
    Ok(if failed {
        Err(ExitCode::FAILURE)
    } else {
        Ok(())
    })
}

fn remove(store: &mut TrustStore, which: &[String]) -> std::io::Result<Result<(), ExitCode>> {
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
        eprintln!(
            "error: no pin matches {}; `toolhost trust --list` shows them",
            which.join(", ")
        );
        return Ok(Err(ExitCode::FAILURE));
    }
    Ok(Ok(()))
}
