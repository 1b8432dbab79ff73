//! The live plugin catalog of a running host: which file is loaded at which generation,
//! which files failed, and the registry built from them, swapped atomically on every
//! rescan. Registry changes are published as [`RegistryEvent`]s.
//!
//! A rescan compares each plugin file with what is loaded (size, mtime and inode first,
//! then its sha256) and loads only what changed, as a new generation. Calls hold the
//! registry snapshot (and so the generation) they started with; calls that start after
//! the swap see the new one. Old generations stay mapped (libraries are never unloaded),
//! so the catalog counts them and estimates the memory they keep.
//!
//! A rescan never unloads on an I/O error: a directory that cannot be read (EMFILE, EIO,
//! EACCES) keeps every plugin loaded from it serving, with the error in status and the
//! log, and the watcher retries with backoff. Only a successful read of the directory
//! that no longer lists a file removes it. A file that cannot be read keeps its loaded
//! generation the same way.
//!
//! Weak spot: a file that is still being written is recognised by its ELF headers
//! describing more bytes than it has, plus a recent mtime; such a file is left pending
//! and looked at again, never loaded half-written.
//!
//! `status` is what the catalog reports (plain data), `watch` the watcher whose file
//! events trigger its rescans.

pub(crate) mod status;
pub(crate) mod watch;

use std::collections::{BTreeMap, BTreeSet};

use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

use tokio::sync::broadcast;

use crate::plugins::isolation::supervisor::WorkerPlugin;
use crate::plugins::load::error::LoadErrorKind;
use crate::plugins::load::loader::{LoadPolicy, PluginLoader};
use crate::plugins::run::plugin_tool::LoadedPlugin;
use crate::sys::safe_open::{Fingerprint, fingerprint};
use toolhost_calls::policy::{RiskOverride, apply_risk_overrides};
use toolhost_calls::registry::ToolRegistry;
use toolhost_calls::tool::DynTool;

pub(crate) use status::{
    CatalogStatus, LoadErrorStatus, PluginStatus, RegistryEvent, RescanReport,
};

/// How a catalog finds and keeps plugins.
#[derive(Debug, Clone)]
pub struct CatalogConfig {
    /// Plugin directories, in load order.
    pub dirs: Vec<PathBuf>,
    /// Past this many reloads, status and the log say a restart would reclaim memory.
    pub max_generations: u64,
    /// A file that looks half-written and was modified less than this long ago is left
    /// pending instead of reported as broken.
    pub settle: Duration,
    /// Operator overrides of declared risks, applied to every registry built.
    pub risk_overrides: BTreeMap<String, RiskOverride>,
    /// Which files may load (permissions, size, trust mode).
    pub loading: LoadPolicy,
}

impl Default for CatalogConfig {
    fn default() -> Self {
        CatalogConfig {
            dirs: Vec::new(),
            max_generations: 64,
            settle: Duration::from_secs(2),
            risk_overrides: BTreeMap::new(),
            loading: LoadPolicy::default(),
        }
    }
}

struct Entry {
    plugin: LoadedPlugin,
    fingerprint: Fingerprint,
    generation: u64,
    loaded_at: String,
    last_error: Option<String>,
    /// The file as it was when it last failed to load, so it is not retried (and mapped
    /// again) until it changes.
    rejected: Option<Fingerprint>,
}

/// Per path: loads that succeeded, and every mapped load with the bytes it keeps.
#[derive(Default, Clone, Copy)]
struct PathCounters {
    generations: u64,
    mapped: u64,
    mapped_bytes: u64,
}

#[derive(Default)]
struct State {
    /// Keyed by (directory index, path) so iteration is the load order.
    entries: BTreeMap<(usize, PathBuf), Entry>,
    /// Files (with their fingerprint) and directories (without) that failed.
    load_errors: BTreeMap<PathBuf, (Option<Fingerprint>, String)>,
    registry_errors: Vec<String>,
    /// Files plainly no plugin (a library rustc builds for itself), with the fingerprint
    /// they were seen with: passed over quietly until they change.
    passed_over: BTreeMap<PathBuf, Fingerprint>,
    pending: BTreeSet<PathBuf>,
    /// Survives removal: a path deleted and added again continues its generations.
    paths: BTreeMap<PathBuf, PathCounters>,
    /// Every in-process generation mapped, by path and sha256 (libraries are never
    /// unloaded, so keeping them costs nothing): a file added again with the same bytes
    /// at the same path is served from its mapping instead of a new one.
    mapped: BTreeMap<(PathBuf, String), LoadedPlugin>,
    reloads: u64,
    generations_mapped: u64,
    retained_bytes: u64,
    /// Rescans run (full ones and the watcher's immediate ones).
    rescans: u64,
    /// Rescans that changed the registry.
    registry_changes: u64,
    /// Whether the loaded set changed since the registry was last built.
    dirty: bool,
    /// Tools from other sources (MCP servers, by name), after the plugins'.
    sources: BTreeMap<String, Vec<Arc<dyn DynTool>>>,
}

/// The plugins of a running host and the registry built from them.
pub struct PluginCatalog {
    loader: PluginLoader,
    config: CatalogConfig,
    state: Mutex<State>,
    registry: RwLock<Arc<ToolRegistry>>,
    /// Refreshed at the end of every rescan, so status never waits for one.
    status: RwLock<Arc<CatalogStatus>>,
    events: broadcast::Sender<RegistryEvent>,
    /// The workers of the generations serving, refreshed at the end of every rescan, so
    /// status shows them live without waiting for a rescan.
    workers: RwLock<Vec<(PathBuf, Arc<WorkerPlugin>)>>,
}

impl PluginCatalog {
    /// An empty catalog; call [`PluginCatalog::rescan`] to load the plugins.
    pub fn new(config: CatalogConfig) -> io::Result<PluginCatalog> {
        let (events, _) = broadcast::channel(64);
        let state = State::default();
        let status = RwLock::new(Arc::new(snapshot(&state, &config)));
        Ok(PluginCatalog {
            loader: PluginLoader::with_policy(config.loading.clone())?,
            config,
            state: Mutex::new(state),
            registry: RwLock::new(Arc::new(ToolRegistry::new())),
            status,
            events,
            workers: RwLock::new(Vec::new()),
        })
    }

    /// The settings.
    pub fn config(&self) -> &CatalogConfig {
        &self.config
    }

    /// The registry now serving. Calls keep the snapshot they started with.
    pub fn registry(&self) -> Arc<ToolRegistry> {
        Arc::clone(&self.registry.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Registry changes, one event per rescan that changed something.
    pub fn subscribe(&self) -> broadcast::Receiver<RegistryEvent> {
        self.events.subscribe()
    }

    /// Looks at every plugin directory now: loads new and changed files (each as a new
    /// generation), drops removed ones, swaps the registry and publishes what changed.
    /// Blocking (file I/O and dlopen): call it from a blocking context.
    pub fn rescan(&self) -> RescanReport {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let reloads_before = state.reloads;
        let mut report = RescanReport::default();
        let mut seen: BTreeSet<(usize, PathBuf)> = BTreeSet::new();
        state.pending.clear();
        // Directory errors are looked at afresh; file errors stay until the file changes.
        state.load_errors.retain(|_, (fp, _)| fp.is_some());
        // Directories that could not be read: nothing loaded from them counts as gone.
        let mut unread: BTreeSet<usize> = BTreeSet::new();
        // The files that changed, in load order: loaded together on the loader's pool.
        let mut to_load: Vec<((usize, PathBuf), Fingerprint)> = Vec::new();
        for (index, dir) in self.config.dirs.iter().enumerate() {
            let files = match PluginLoader::scan_dir(dir) {
                Ok(files) => files,
                Err(e) => {
                    unread.insert(index);
                    let serving = state.entries.keys().filter(|(i, _)| *i == index).count();
                    let msg = if e.kind() == io::ErrorKind::NotFound && serving == 0 {
                        format!(
                            "{}: could not read the plugin directory: {e}; create it or fix --plugins",
                            dir.display()
                        )
                    } else {
                        format!(
                            "{}: could not read the plugin directory: {e}; the {serving} plugins \
                             loaded from it keep serving, and it is read again shortly",
                            dir.display()
                        )
                    };
                    tracing::warn!("{}", crate::text::for_log(&msg));
                    for ((i, _), entry) in state.entries.iter_mut() {
                        if *i == index {
                            entry.last_error = Some(msg.clone());
                        }
                    }
                    state.load_errors.insert(dir.clone(), (None, msg.clone()));
                    report.errors.push(LoadErrorStatus {
                        file: dir.clone(),
                        error: msg,
                    });
                    report.unreadable.push(dir.clone());
                    continue;
                }
            };
            for file in files {
                let key = (index, file.clone());
                seen.insert(key.clone());
                if let Some(fingerprint) = self.needs_load(&mut state, &key, &mut report) {
                    to_load.push((key, fingerprint));
                }
            }
        }
        self.load_and_apply(&mut state, to_load, &mut report);
        let gone: Vec<(usize, PathBuf)> = state
            .entries
            .keys()
            .filter(|k| !seen.contains(*k) && !unread.contains(&k.0))
            .cloned()
            .collect();
        for key in gone {
            state.entries.remove(&key);
            state.dirty = true;
            tracing::info!(file = %key.1.display(), "plugin removed");
            report.plugins_removed.push(key.1);
        }
        let seen_files: BTreeSet<&PathBuf> = seen.iter().map(|(_, f)| f).collect();
        let unread_dirs: Vec<&PathBuf> = unread
            .iter()
            .filter_map(|i| self.config.dirs.get(*i))
            .collect();
        state
            .passed_over
            .retain(|file, _| seen_files.contains(file));
        state.load_errors.retain(|file, (fp, _)| {
            fp.is_none()
                || seen_files.contains(file)
                || unread_dirs
                    .iter()
                    .any(|d| file.parent() == Some(d.as_path()))
        });
        self.finish(&mut state, &mut report, reloads_before);
        report
    }

    /// Looks at `files` only, now: loads those that are new or changed, as
    /// [`PluginCatalog::rescan`] would, and leaves every other file (and the directories'
    /// listings) to the next full rescan. For the watcher's immediate path, when a file
    /// known to be complete has just arrived: nothing else in its directory is read, so a
    /// file elsewhere in the middle of a `cargo build` (removed, not yet linked again) is
    /// never counted as gone here. Files outside the plugin directories, or that do not
    /// look like plugins, are ignored. Blocking, like `rescan`.
    pub fn rescan_files(&self, files: &[PathBuf]) -> RescanReport {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let reloads_before = state.reloads;
        let mut report = RescanReport::default();
        let mut to_load: Vec<((usize, PathBuf), Fingerprint)> = Vec::new();
        let keys: BTreeSet<(usize, PathBuf)> = files
            .iter()
            .filter(|f| crate::plugins::load::loader::is_plugin_candidate(f))
            .filter_map(|f| {
                let dir = f.parent()?;
                let index = self.config.dirs.iter().position(|d| d == dir)?;
                Some((index, f.clone()))
            })
            .collect();
        for key in keys {
            state.pending.remove(&key.1);
            if let Some(fingerprint) = self.needs_load(&mut state, &key, &mut report) {
                to_load.push((key, fingerprint));
            }
        }
        self.load_and_apply(&mut state, to_load, &mut report);
        self.finish(&mut state, &mut report, reloads_before);
        report
    }

    /// The end of every rescan: the registry rebuilt and swapped if anything changed,
    /// status refreshed, the change published.
    fn finish(&self, state: &mut State, report: &mut RescanReport, reloads_before: u64) {
        state.rescans += 1;
        if state.dirty {
            report.tools = self.swap_registry(state);
            state.dirty = false;
            if !report.tools.is_empty() {
                state.registry_changes += 1;
            }
        }
        if state.reloads > self.config.max_generations && state.reloads > reloads_before {
            tracing::warn!(
                reloads = state.reloads,
                mapped_bytes = state.retained_bytes,
                "{}",
                restart_advice(state, &self.config)
            );
        }
        let fresh = Arc::new(snapshot(state, &self.config));
        *self.status.write().unwrap_or_else(PoisonError::into_inner) = fresh;
        *self.workers.write().unwrap_or_else(PoisonError::into_inner) = state
            .entries
            .iter()
            .filter_map(|((_, file), e)| {
                e.plugin
                    .worker
                    .as_ref()
                    .map(|w| (file.clone(), Arc::clone(w)))
            })
            .collect();
        // Published after status is fresh, so a subscriber that looks sees the change.
        if !report.tools.is_empty() {
            // No subscriber is fine.
            let _ = self.events.send(report.tools.clone());
        }
    }

    /// Loads `changed` (in load order) on the loader's pool, then records each outcome in
    /// that same order, so the result does not depend on which load finished first.
    fn load_and_apply(
        &self,
        state: &mut State,
        changed: Vec<((usize, PathBuf), Fingerprint)>,
        report: &mut RescanReport,
    ) {
        // A file with a mapping of its own already (removed and added again, or put back
        // as it was): its static and trust checks again, and if its bytes are the ones
        // mapped, that mapping serves. Everything else loads on the pool.
        let mut reused: Vec<Option<LoadedPlugin>> = Vec::with_capacity(changed.len());
        for ((_, file), _) in &changed {
            let known = state.mapped.range((file.clone(), String::new())..).next();
            let found = match known {
                Some(((path, _), _)) if path == file => self
                    .loader
                    .inspect(file)
                    .ok()
                    .filter(|facts| facts.untrusted.is_none())
                    .and_then(|facts| state.mapped.get(&(file.clone(), facts.sha256)).cloned()),
                _ => None,
            };
            reused.push(found);
        }
        let files: Vec<PathBuf> = changed
            .iter()
            .zip(&reused)
            .filter(|(_, r)| r.is_none())
            .map(|(((_, f), _), _)| f.clone())
            .collect();
        let mut loaded = self.loader.load_files(&files).into_iter();
        for ((key, fingerprint), again) in changed.into_iter().zip(reused) {
            match again {
                Some(plugin) => self.apply_load(state, key, fingerprint, Ok(plugin), true, report),
                None => {
                    let Some(result) = loaded.next() else {
                        break;
                    };
                    self.apply_load(state, key, fingerprint, result, false, report);
                }
            }
        }
    }

    /// Whether `key`'s file must be loaded: its fingerprint when it is new or changed
    /// (and not a refused file unchanged since), `None` when what is recorded stands.
    fn needs_load(
        &self,
        state: &mut State,
        key: &(usize, PathBuf),
        report: &mut RescanReport,
    ) -> Option<Fingerprint> {
        let file = key.1.clone();
        let unreadable = |e: io::Error| {
            format!(
                "{}: could not read the file: {e}; check its permissions (toolhost needs to read it)",
                file.display()
            )
        };
        let fingerprint = match fingerprint(&file) {
            Ok(f) => f,
            Err(e) => {
                report.unreadable.push(file.clone());
                record_failure(state, key, None, unreadable(e), report);
                return None;
            }
        };
        // Unchanged since the last look (loaded, or refused): nothing to load.
        if let Some(entry) = state.entries.get_mut(key) {
            if entry.fingerprint == fingerprint {
                // The file is the one serving: an earlier failure no longer applies.
                entry.last_error = None;
                entry.rejected = None;
                return None;
            }
            if entry.rejected.as_ref() == Some(&fingerprint) {
                report
                    .errors
                    .extend(entry.last_error.clone().map(|error| LoadErrorStatus {
                        file: file.clone(),
                        error,
                    }));
                return None;
            }
        } else if let Some((Some(failed), msg)) = state.load_errors.get(&file)
            && *failed == fingerprint
        {
            report.errors.push(LoadErrorStatus {
                file: file.clone(),
                error: msg.clone(),
            });
            return None;
        }
        if !state.entries.contains_key(key) && state.passed_over.get(&file) == Some(&fingerprint) {
            return None;
        }
        // Same size as the generation serving: maybe only touched or copied again. Hash it
        // to find out before mapping another library (a new size means new content).
        if let Some(entry) = state.entries.get_mut(key)
            && entry.plugin.size == fingerprint.len
        {
            let limit = self.config.loading.max_file_size;
            let hashed = crate::sys::safe_open::open_regular(&file)
                .map_err(|e| match e {
                    crate::sys::safe_open::OpenError::Io(e) => e,
                    other => io::Error::other(other.to_string()),
                })
                .and_then(|(f, _)| {
                    crate::plugins::load::private_copy::sha256_hex(io::Read::take(f, limit))
                });
            match hashed {
                Ok(sha256) if sha256 == entry.plugin.sha256 => {
                    entry.fingerprint = fingerprint;
                    entry.last_error = None;
                    entry.rejected = None;
                    return None;
                }
                Ok(_) => {}
                Err(e) => {
                    report.unreadable.push(file.clone());
                    record_failure(state, key, None, unreadable(e), report);
                    return None;
                }
            }
        }
        Some(fingerprint)
    }

    /// Records the outcome of loading `key`'s file (seen as `fingerprint`).
    fn apply_load(
        &self,
        state: &mut State,
        key: (usize, PathBuf),
        fingerprint: Fingerprint,
        result: Result<LoadedPlugin, crate::plugins::load::error::PluginLoadError>,
        reused: bool,
        report: &mut RescanReport,
    ) {
        let file = key.1.clone();
        match result {
            Ok(plugin) => {
                let counters = state.paths.entry(file.clone()).or_default();
                counters.generations += 1;
                if !reused {
                    counters.mapped += 1;
                    counters.mapped_bytes += plugin.size;
                }
                let generation = counters.generations;
                if !reused {
                    state.generations_mapped += 1;
                    state.retained_bytes += plugin.size;
                    // In-process mappings are kept for a later return of the same bytes;
                    // a worker's plugin is started afresh.
                    if plugin.worker.is_none() {
                        state
                            .mapped
                            .insert((file.clone(), plugin.sha256.clone()), plugin.clone());
                    }
                }
                if generation > 1 {
                    state.reloads += 1;
                }
                for warning in &plugin.warnings {
                    tracing::warn!(file = %file.display(), plugin = %plugin.name, "{warning}");
                }
                for skipped in &plugin.skipped_tools {
                    report.errors.push(LoadErrorStatus {
                        file: file.clone(),
                        error: format!("{}: {skipped}", file.display()),
                    });
                }
                if state.entries.contains_key(&key) {
                    report.plugins_updated.push(file.clone());
                } else {
                    report.plugins_added.push(file.clone());
                }
                tracing::info!(
                    file = %file.display(),
                    plugin = %plugin.name,
                    version = %plugin.version,
                    generation,
                    tools = plugin.tools.len(),
                    reused_mapping = reused,
                    "plugin loaded"
                );
                state.load_errors.remove(&file);
                state.dirty = true;
                state.entries.insert(
                    key,
                    Entry {
                        plugin,
                        fingerprint,
                        generation,
                        loaded_at: jiff::Timestamp::now().to_string(),
                        last_error: None,
                        rejected: None,
                    },
                );
            }
            Err(e) if e.kind.is_not_a_plugin() && !state.entries.contains_key(&key) => {
                // Such as the `#[tool]` macros' library beside the plugins in
                // `target/release`: never a plugin, so no warning.
                tracing::debug!(file = %file.display(), "{}", e.kind);
                state.load_errors.remove(&file);
                state.passed_over.insert(file, fingerprint);
            }
            Err(e) => {
                if e.kind.left_mapped() {
                    let counters = state.paths.entry(file.clone()).or_default();
                    counters.mapped += 1;
                    counters.mapped_bytes += fingerprint.len;
                    state.generations_mapped += 1;
                    state.retained_bytes += fingerprint.len;
                }
                if in_progress(&e.kind, &fingerprint, self.config.settle) {
                    tracing::debug!(file = %file.display(), "file looks half-written; waiting");
                    state.pending.insert(file.clone());
                    report.pending.push(file);
                } else {
                    if e.kind.is_io() {
                        report.unreadable.push(file.clone());
                    }
                    // A verdict that can change while the file does not (an I/O error,
                    // its directory's permissions, the trust file) is looked at again on
                    // every rescan; the others wait until the file changes.
                    let fingerprint = (!e.kind.may_pass_later()).then_some(fingerprint);
                    record_failure(state, &key, fingerprint, e.to_string(), report);
                }
            }
        }
    }

    /// Rebuilds the registry from the entries in load order and swaps it in.
    fn swap_registry(&self, state: &mut State) -> RegistryEvent {
        let plugins: Vec<LoadedPlugin> = state.entries.values().map(|e| e.plugin.clone()).collect();
        let (new, errors) = ToolRegistry::from_tools(
            plugins
                .iter()
                .flat_map(|p| p.tools.iter().cloned())
                .chain(state.sources.values().flatten().cloned()),
        );
        let overridden = apply_risk_overrides(&new, &self.config.risk_overrides);
        let new = overridden.registry;
        state.registry_errors = errors.iter().map(ToString::to_string).collect();
        state.registry_errors.extend(overridden.refused);
        state.registry_errors.extend(overridden.unmatched.iter().map(|name| {
            format!("the config overrides the risk of tool '{name}', which no loaded plugin provides (a typo?)")
        }));
        for line in &overridden.lowered {
            tracing::info!("{line}");
        }
        for e in &state.registry_errors {
            tracing::warn!("{}", crate::text::for_log(e));
        }
        let new = Arc::new(new);
        let old = {
            let mut slot = self
                .registry
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            std::mem::replace(&mut *slot, Arc::clone(&new))
        };
        let event = RegistryEvent::between(&old, &new);
        if !event.is_empty() {
            tracing::info!(
                added = ?event.added,
                removed = ?event.removed,
                changed = ?event.changed,
                rebuilt = ?event.rebuilt,
                "tools changed"
            );
        }
        event
    }

    /// Serves `tools` as those of `source` (an MCP server), in place of what it had (none:
    /// its tools leave the registry); swaps the registry and publishes the change as a
    /// rescan does. Blocking only on the catalog's lock.
    pub(crate) fn set_source_tools(&self, source: &str, tools: Option<Vec<Arc<dyn DynTool>>>) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match tools {
            Some(tools) => {
                state.sources.insert(source.to_owned(), tools);
            }
            None => {
                if state.sources.remove(source).is_none() {
                    return;
                }
            }
        }
        state.dirty = true;
        let reloads = state.reloads;
        let mut report = RescanReport::default();
        self.finish(&mut state, &mut report, reloads);
    }

    /// What status shows about the plugins, as of the end of the last rescan, with the
    /// workers' state as of now.
    pub fn status(&self) -> CatalogStatus {
        let mut status =
            CatalogStatus::clone(&self.status.read().unwrap_or_else(PoisonError::into_inner));
        let workers = self.workers.read().unwrap_or_else(PoisonError::into_inner);
        for plugin in &mut status.plugins {
            if let Some((_, worker)) = workers.iter().find(|(file, _)| *file == plugin.file) {
                plugin.worker = Some(worker.status());
            }
        }
        status
    }

    /// Lets every quarantined plugin start its worker again (`toolhost reload`); returns
    /// their names.
    pub fn lift_quarantines(&self) -> Vec<String> {
        let workers = self.workers.read().unwrap_or_else(PoisonError::into_inner);
        workers
            .iter()
            .filter(|(_, w)| w.lift_quarantine())
            .map(|(_, w)| w.name().to_owned())
            .collect()
    }
}

fn snapshot(state: &State, config: &CatalogConfig) -> CatalogStatus {
    CatalogStatus {
        plugin_dirs: config.dirs.clone(),
        plugins: state
            .entries
            .iter()
            .map(|((_, file), e)| {
                let counters = state.paths.get(file).copied().unwrap_or_default();
                PluginStatus {
                    file: file.clone(),
                    sha256: e.plugin.sha256.clone(),
                    name: e.plugin.name.clone(),
                    version: e.plugin.version.clone(),
                    api_version: e.plugin.api_version.clone(),
                    abi_version: e.plugin.abi_version.clone(),
                    generation: e.generation,
                    old_generations: counters.mapped.saturating_sub(1),
                    retained_bytes: counters.mapped_bytes,
                    loaded_at: e.loaded_at.clone(),
                    tools: e
                        .plugin
                        .tools
                        .iter()
                        .map(|t| t.spec().name.clone())
                        .collect(),
                    last_error: e.last_error.clone(),
                    mode: e.plugin.mode,
                    worker: e.plugin.worker.as_ref().map(|w| w.status()),
                    warnings: e.plugin.warnings.clone(),
                }
            })
            .collect(),
        load_errors: state
            .load_errors
            .iter()
            .map(|(file, (_, error))| LoadErrorStatus {
                file: file.clone(),
                error: error.clone(),
            })
            .collect(),
        registry_errors: state.registry_errors.clone(),
        pending: state.pending.iter().cloned().collect(),
        reloads: state.reloads,
        rescans: state.rescans,
        registry_changes: state.registry_changes,
        generations_mapped: state.generations_mapped,
        retained_bytes_estimate: state.retained_bytes,
        max_generations: config.max_generations,
        warning: (state.reloads > config.max_generations).then(|| restart_advice(state, config)),
        settings_warnings: config.loading.settings.warnings(
            state
                .entries
                .values()
                .map(|e| (e.plugin.name.as_str(), e.plugin.warnings.as_slice())),
        ),
    }
}

fn restart_advice(state: &State, config: &CatalogConfig) -> String {
    format!(
        "{} reloads since start (more than {}): old plugin generations stay mapped (about {} KiB); \
         restart toolhost to reclaim the memory",
        state.reloads,
        config.max_generations,
        state.retained_bytes / 1024
    )
}

/// Records that `key`'s file (as `fingerprint`, when known) failed to load.
fn record_failure(
    state: &mut State,
    key: &(usize, PathBuf),
    fingerprint: Option<Fingerprint>,
    msg: String,
    report: &mut RescanReport,
) {
    tracing::warn!("{}", crate::text::for_log(&msg));
    report.errors.push(LoadErrorStatus {
        file: key.1.clone(),
        error: msg.clone(),
    });
    match state.entries.get_mut(key) {
        // The previous generation keeps serving; status shows why the new file was refused.
        Some(entry) => {
            entry.last_error = Some(msg);
            entry.rejected = fingerprint;
        }
        None => {
            state.load_errors.insert(key.1.clone(), (fingerprint, msg));
        }
    }
}

/// A file still being written: it changed while it was read, or it is incomplete and was
/// modified within the settle time.
fn in_progress(kind: &LoadErrorKind, fp: &Fingerprint, settle: Duration) -> bool {
    let recent = fp
        .modified
        .and_then(|m| SystemTime::now().duration_since(m).ok())
        .is_some_and(|age| age < settle);
    matches!(kind, LoadErrorKind::ChangedWhileLoading) || (kind.looks_incomplete() && recent)
}
