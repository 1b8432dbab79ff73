//! Watching plugin directories: file events (notify) are debounced and turned into
//! rescans of the catalog. Every way a file really arrives ends in a rescan once the
//! directory has been quiet for the debounce time: `cp` over a file (close-write), install
//! by rename, `cargo build` (remove, then create a hard link), editors' temporary files.
//! The rescan itself decides what changed; a half-written file is left pending and looked
//! at again shortly.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::catalog::PluginCatalog;

/// Watcher settings.
#[derive(Debug, Clone, Copy)]
pub struct WatchConfig {
    /// Quiet time after the last file event before rescanning.
    pub debounce: Duration,
    /// How soon to look again at a file that looked half-written.
    pub recheck: Duration,
}

impl Default for WatchConfig {
    fn default() -> Self {
        WatchConfig {
            debounce: Duration::from_millis(50),
            recheck: Duration::from_millis(250),
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
#[error("could not watch the plugin directory {}: {source}; check that it exists, or run with --no-watch and use `toolhost reload`", dir.display())]
pub struct WatchError {
    /// The directory.
    pub dir: PathBuf,
    /// notify's error.
    pub source: notify::Error,
}

impl PluginWatcher {
    /// Starts watching every directory of `catalog` and rescanning on changes. Must be
    /// called inside a tokio runtime.
    pub fn start(catalog: Arc<PluginCatalog>, config: WatchConfig) -> Result<Self, WatchError> {
        let (tx, rx) = mpsc::unbounded_channel::<()>();
        let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            match res {
                // Reads and metadata-only changes cannot change what a rescan finds.
                Ok(event)
                    if !matches!(
                        event.kind,
                        EventKind::Access(notify::event::AccessKind::Open(_))
                            | EventKind::Access(notify::event::AccessKind::Read)
                            | EventKind::Access(notify::event::AccessKind::Close(
                                notify::event::AccessMode::Read
                            ))
                    ) =>
                {
                    let _ = tx.send(());
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!("file watching reported an error: {e}; rescanning");
                    let _ = tx.send(());
                }
            }
        })
        .map_err(|source| WatchError {
            dir: PathBuf::new(),
            source,
        })?;
        for dir in &catalog.config().dirs {
            watcher
                .watch(dir, RecursiveMode::NonRecursive)
                .map_err(|source| WatchError {
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
    mut events: mpsc::UnboundedReceiver<()>,
) {
    let mut recheck_pending = false;
    loop {
        if recheck_pending {
            // Wake up for the next event, or to look at the pending file again.
            if let Ok(None) = tokio::time::timeout(config.recheck, events.recv()).await {
                return;
            }
        } else if events.recv().await.is_none() {
            return;
        }
        // Debounce: wait until the directory has been quiet for a while.
        loop {
            match tokio::time::timeout(config.debounce, events.recv()).await {
                Ok(Some(())) => continue,
                Ok(None) => return,
                Err(_) => break,
            }
        }
        let cat = Arc::clone(&catalog);
        match tokio::task::spawn_blocking(move || cat.rescan()).await {
            Ok(report) => recheck_pending = !report.pending.is_empty(),
            Err(e) => {
                tracing::error!("a rescan of the plugin directories failed: {e}");
                recheck_pending = true;
            }
        }
    }
}
