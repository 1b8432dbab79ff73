//! Watching plugin directories: file events (notify) are turned into rescans of the
//! catalog, two ways.
//!
//! - **At once** (`immediate`): a plugin file that arrives by rename (`Modify(Name(To))`)
//!   or is closed after writing (`Access(Close(Write))`) and whose ELF headers say it is
//!   whole (section and program header tables and segments within its size) is looked at
//!   right away, that file alone (`PluginCatalog::rescan_files`): nothing else in the
//!   directory is read, so a file elsewhere in the middle of a `cargo build` (removed, not
//!   yet linked again) is never taken for gone.
//! - **Debounced**, for everything (the immediate events too): once the directory has been
//!   quiet for the debounce time (at most `max_wait` after the first event), a full rescan.
//!   `cargo build` (remove, then create a hard link: no close-write), partial writes,
//!   bursts and editors' temporary files all end here.
//!
//! The rescan itself decides what changed; a half-written file is left pending and looked
//! at again shortly, and a directory or file that could not be read (EMFILE, EIO) is
//! read again with exponential backoff (`recheck`, doubling up to `max_backoff`) until a
//! rescan gets through, without waiting for a file event. Weak spot: the completeness
//! check reads the headers when the event is handled; a writer that renames a whole file
//! in and then writes into it again is only caught by the load's own checks.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::plugins::catalog::PluginCatalog;

/// Watcher settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchConfig {
    /// Quiet time after the last file event before rescanning.
    pub debounce: Duration,
    /// How soon to look again at a file that looked half-written.
    pub recheck: Duration,
    /// The longest a rescan waits for the directory to be quiet.
    pub max_wait: Duration,
    /// The longest wait between retries of a rescan that could not read something.
    pub max_backoff: Duration,
    /// Rescan a file at once when it arrives complete (renamed in, or closed after
    /// writing with whole ELF headers), besides the debounced rescan.
    pub immediate: bool,
}

impl Default for WatchConfig {
    fn default() -> Self {
        WatchConfig {
            debounce: Duration::from_millis(50),
            recheck: Duration::from_millis(250),
            max_wait: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            immediate: true,
        }
    }
}

/// Watches the catalog's directories until dropped.
pub struct PluginWatcher {
    _watcher: notify::RecommendedWatcher,
    task: JoinHandle<()>,
}

impl Drop for PluginWatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Why watching could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WatchError {
    /// The file-watching facility itself could not start.
    #[error(
        "could not start watching files: {0}; this is usually the inotify limit (raise \
         fs.inotify.max_user_instances / max_user_watches with sysctl), or run with \
         --no-watch and use `toolhost reload`"
    )]
    Start(notify::Error),
    /// One directory could not be watched.
    #[error(
        "could not watch the plugin directory {}: {source}; create it (watching starts \
         with the host, so a directory made later is not watched), or run with --no-watch \
         and use `toolhost reload`",
        dir.display()
    )]
    Directory {
        /// The directory.
        dir: PathBuf,
        /// notify's error.
        source: notify::Error,
    },
}

/// Whether an event can change what a rescan finds: a shared library's path, a rename,
/// or notify's own "rescan" flag. Reads, and changes to other files (editors' swap files,
/// hidden temporary copies), are not.
fn is_relevant(event: &notify::Event) -> bool {
    use notify::event::{AccessKind, AccessMode, ModifyKind};
    if matches!(
        event.kind,
        EventKind::Access(
            AccessKind::Open(_) | AccessKind::Read | AccessKind::Close(AccessMode::Read)
        )
    ) {
        return false;
    }
    event.need_rescan()
        || event.paths.is_empty()
        || matches!(event.kind, EventKind::Modify(ModifyKind::Name(_)))
        || event
            .paths
            .iter()
            .any(|p| crate::plugins::load::loader::is_plugin_candidate(p))
}

/// What a file event asks of the rescan loop.
#[derive(Debug)]
enum Trigger {
    /// A full rescan once the directories are quiet.
    Debounced,
    /// This file arrived complete: look at it now (a full rescan follows, debounced).
    Now(PathBuf),
}

/// The file an event says arrived complete, if it did: renamed in or closed after
/// writing, a plugin candidate, with whole ELF headers.
fn arrived_complete(event: &notify::Event) -> Option<PathBuf> {
    use notify::event::{AccessKind, AccessMode, ModifyKind, RenameMode};
    let path = match event.kind {
        EventKind::Modify(ModifyKind::Name(RenameMode::To | RenameMode::Both))
        | EventKind::Access(AccessKind::Close(AccessMode::Write)) => event.paths.last()?,
        _ => return None,
    };
    (crate::plugins::load::loader::is_plugin_candidate(path)
        && crate::plugins::load::elf::looks_complete(path))
    .then(|| path.clone())
}

impl PluginWatcher {
    /// Starts watching every directory of `catalog` and rescanning on changes. Must be
    /// called inside a tokio runtime.
    pub fn start(catalog: Arc<PluginCatalog>, config: WatchConfig) -> Result<Self, WatchError> {
        let (tx, rx) = mpsc::unbounded_channel::<Trigger>();
        let immediate = config.immediate;
        let mut watcher =
            notify::recommended_watcher(move |res: notify::Result<notify::Event>| match res {
                Ok(event) if is_relevant(&event) => {
                    if immediate && let Some(file) = arrived_complete(&event) {
                        let _ = tx.send(Trigger::Now(file));
                    }
                    let _ = tx.send(Trigger::Debounced);
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!("file watching reported an error: {e}; rescanning");
                    let _ = tx.send(Trigger::Debounced);
                }
            })
            .map_err(WatchError::Start)?;
        for dir in &catalog.config().dirs {
            watcher
                .watch(dir, RecursiveMode::NonRecursive)
                .map_err(|source| WatchError::Directory {
                    dir: dir.clone(),
                    source,
                })?;
        }
        let task = tokio::spawn(rescan_loop(catalog, config, rx));
        Ok(PluginWatcher {
            _watcher: watcher,
            task,
        })
    }
}

async fn rescan_loop(
    catalog: Arc<PluginCatalog>,
    config: WatchConfig,
    mut events: mpsc::UnboundedReceiver<Trigger>,
) {
    // When to look again without an event: soon for a pending file, with backoff after
    // an I/O error.
    let mut recheck: Option<Duration> = None;
    let mut backoff = config.recheck;
    loop {
        let first = match recheck {
            Some(wait) => match tokio::time::timeout(wait, events.recv()).await {
                Ok(None) => return,
                Ok(Some(trigger)) => Some(trigger),
                Err(_) => None,
            },
            None => match events.recv().await {
                None => return,
                Some(trigger) => Some(trigger),
            },
        };
        if let Some(Trigger::Now(file)) = first {
            rescan_now(&catalog, file, &mut events).await;
        }
        // Debounce: wait until the directory has been quiet for a while, but not longer
        // than `max_wait` in all, so a file that keeps changing cannot hold rescans off.
        // A file that arrives complete meanwhile is looked at without waiting.
        let give_up = tokio::time::Instant::now() + config.max_wait;
        loop {
            let quiet = (tokio::time::Instant::now() + config.debounce).min(give_up);
            match tokio::time::timeout_at(quiet, events.recv()).await {
                Ok(Some(Trigger::Now(file))) => {
                    rescan_now(&catalog, file, &mut events).await;
                    if tokio::time::Instant::now() >= give_up {
                        break;
                    }
                }
                Ok(Some(Trigger::Debounced)) if tokio::time::Instant::now() < give_up => {
                    continue;
                }
                Ok(Some(Trigger::Debounced)) | Err(_) => break,
                Ok(None) => return,
            }
        }
        let cat = Arc::clone(&catalog);
        match tokio::task::spawn_blocking(move || cat.rescan()).await {
            Ok(report) if !report.unreadable.is_empty() => {
                tracing::warn!(
                    unreadable = ?report.unreadable,
                    "could not read everything in the plugin directories; what is loaded keeps \
                     serving; looking again in {} ms",
                    backoff.as_millis()
                );
                recheck = Some(backoff);
                backoff = (backoff * 2).min(config.max_backoff);
            }
            Ok(report) => {
                backoff = config.recheck;
                recheck = (!report.pending.is_empty()).then_some(config.recheck);
            }
            Err(e) => {
                tracing::error!("a rescan of the plugin directories failed: {e}");
                recheck = Some(config.recheck);
            }
        }
    }
}

/// Looks at `file`, and every other file already reported complete, at once.
async fn rescan_now(
    catalog: &Arc<PluginCatalog>,
    file: PathBuf,
    events: &mut mpsc::UnboundedReceiver<Trigger>,
) {
    let mut files = vec![file];
    // Whatever else has arrived already: one rescan for all of them. (Debounced
    // triggers taken here are not lost: the debounce that follows waits anyway.)
    while let Ok(trigger) = events.try_recv() {
        if let Trigger::Now(more) = trigger
            && !files.contains(&more)
        {
            files.push(more);
        }
    }
    let cat = Arc::clone(catalog);
    if let Err(e) = tokio::task::spawn_blocking(move || cat.rescan_files(&files)).await {
        tracing::error!("a rescan of newly arrived plugin files failed: {e}");
    }
}
