//! The plugin index: what each plugin file exported when it was last loaded, so that a
//! one-shot command (`toolhost list`, `toolhost call`) knows a folder's tools without
//! loading every library, and loads only the one whose tool it calls.
//!
//! An entry is used only while it is fresh: the file's identity (device, inode, size,
//! modification and change times, which no write, rename or `chmod` leaves alone) is what
//! it was when the entry was made, the load policy is the same, and the trust mode is
//! `any` (pins and signatures are decided on the bytes, so those modes always load). The
//! file's cheap checks (type, size, permissions) still run. A tool answered from the index
//! loads its library on its first call, with every check of a load, and refuses to run
//! if the loaded bytes' sha256 or the tool's description differ from the entry's: the
//! index says what to offer, never what runs. The index lives in the state folder (mode
//! 0600, a link refused): who can write it could change what a tool's risk looks like
//! before its call, so nobody else may. An index that is (or whose folder is) owned by a
//! user other than the host's or root, or writable by group or others, is not read: it
//! is treated as absent, with a warning, and rebuilt (it is only a cache).

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use toolhost_calls::context::CallContext;
use toolhost_calls::tool::{Arguments, DynTool, ToolOrigin, ToolSpec};
use toolhost_plugin_api::{ToolError, ToolOutput};

use crate::plugins::isolation::IsolationMode;
use crate::plugins::load::error::PluginLoadError;
use crate::plugins::load::loader::PluginLoader;
use crate::plugins::run::plugin_tool::LoadedPlugin;

/// The index's file name in the state folder.
pub const INDEX_FILE: &str = "plugin-index.json";

/// Bumped when an entry's meaning changes; an index of another format is ignored.
const FORMAT: u32 = 1;

/// The longest index read (a planted `/dev/zero` or a huge file fails at once).
const INDEX_LIMIT: u64 = 64 * 1024 * 1024;

/// Why the index could not be read or written. Never fatal: the plugins load instead.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// Opening, reading or writing the file failed (a link at it is refused).
    #[error("the plugin index {}: {source}", path.display())]
    Io {
        /// The index file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// Someone other than the host's user or root could change the file or its folder:
    /// it was not read.
    #[error("{0}; the index is ignored and rebuilt")]
    Permissions(Box<crate::sys::permissions::PermissionProblem>),
    /// The file is not an index this toolhost wrote.
    #[error("the plugin index {} is not valid ({source}); it is rebuilt", path.display())]
    Malformed {
        /// The index file.
        path: PathBuf,
        /// What did not parse.
        #[source]
        source: serde_json::Error,
    },
}

/// What identifies a file's contents without reading them: any write, rename over it or
/// `chmod` changes one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct FileIdentity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl FileIdentity {
    fn of(meta: &std::fs::Metadata) -> FileIdentity {
        use std::os::unix::fs::MetadataExt as _;
        FileIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
        }
    }

    fn now(file: &Path) -> Option<FileIdentity> {
        std::fs::metadata(file).ok().map(|m| FileIdentity::of(&m))
    }
}

/// What a plugin file exported when it was loaded.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    identity: FileIdentity,
    /// The load policy it was loaded under ([`policy_fingerprint`]).
    policy: String,
    sha256: String,
    size: u64,
    name: String,
    version: String,
    api_version: String,
    abi_version: String,
    settings_schema: Option<serde_json::Value>,
    warnings: Vec<String>,
    skipped_tools: Vec<String>,
    mode: IsolationMode,
    tools: Vec<ToolSpec>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct IndexFile {
    format: u32,
    /// The toolhost that wrote it (a newer one may check tools differently).
    toolhost: String,
    entries: BTreeMap<PathBuf, Entry>,
}

/// The index of one state folder, read once and written back if a load changed it.
#[derive(Debug)]
pub struct PluginIndex {
    path: PathBuf,
    file: IndexFile,
    changed: bool,
}

impl PluginIndex {
    /// The index at `path`; empty if there is none, or it is unreadable or another
    /// format (it is rebuilt), with the reason in the second value.
    pub fn open(path: PathBuf) -> (PluginIndex, Option<IndexError>) {
        let fresh = |path| PluginIndex {
            path,
            file: IndexFile::default(),
            changed: false,
        };
        let read = match toolhost_calls::private::open_regular_file(&path) {
            Ok(file) => {
                if let Err(problem) = Self::check(&path, &file) {
                    let mut index = fresh(path);
                    index.changed = true;
                    return (index, Some(IndexError::Permissions(Box::new(problem))));
                }
                let mut text = Vec::new();
                file.take(INDEX_LIMIT)
                    .read_to_end(&mut text)
                    .map(|_| text)
                    .map_err(|source| IndexError::Io {
                        path: path.clone(),
                        source,
                    })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (fresh(path), None),
            Err(source) => Err(IndexError::Io {
                path: path.clone(),
                source,
            }),
        };
        let parsed = read.and_then(|text| {
            serde_json::from_slice::<IndexFile>(&text).map_err(|source| IndexError::Malformed {
                path: path.clone(),
                source,
            })
        });
        match parsed {
            Ok(file) if file.format == FORMAT && file.toolhost == env!("CARGO_PKG_VERSION") => (
                PluginIndex {
                    path,
                    file,
                    changed: false,
                },
                None,
            ),
            Ok(_) => {
                let mut index = fresh(path);
                index.changed = true;
                (index, None)
            }
            Err(e) => {
                let mut index = fresh(path);
                index.changed = true;
                (index, Some(e))
            }
        }
    }

    /// The opened index's owner and mode (by `fstat`) and its folder's: the host's user
    /// or root, not writable by group or others. The folder was opened without following
    /// a link, so its path names the folder the file is in.
    fn check(
        path: &Path,
        file: &std::fs::File,
    ) -> Result<(), crate::sys::permissions::PermissionProblem> {
        use crate::sys::permissions::{PLUGIN_INDEX, check_opened_as, effective_uid, judge};
        use std::os::unix::fs::MetadataExt as _;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // Unreadable here means gone since the open: the file's own check decides.
            if let Ok(d) = std::fs::metadata(dir) {
                judge(
                    dir,
                    "its directory",
                    PLUGIN_INDEX.guarded,
                    d.uid(),
                    d.mode(),
                    effective_uid(),
                )?;
            }
        }
        match file.metadata() {
            Ok(meta) => check_opened_as(path, &meta, PLUGIN_INDEX),
            // Reading it will fail and say why.
            Err(_) => Ok(()),
        }
    }

    /// Writes the index back if a load changed it (atomically, 0600, in a private folder).
    pub fn save(&mut self) -> Result<(), IndexError> {
        if !self.changed {
            return Ok(());
        }
        let io = |source| IndexError::Io {
            path: self.path.clone(),
            source,
        };
        if let Some(dir) = self.path.parent() {
            toolhost_calls::private::ensure_private_dir(dir).map_err(io)?;
        }
        self.file.format = FORMAT;
        env!("CARGO_PKG_VERSION").clone_into(&mut self.file.toolhost);
        let text = serde_json::to_vec(&self.file).map_err(|e| io(std::io::Error::other(e)))?;
        toolhost_calls::private::write_private_file(&self.path, &text).map_err(io)?;
        self.changed = false;
        Ok(())
    }

    /// The fresh entry of `file`, if there is one.
    fn fresh(&self, file: &Path, identity: FileIdentity, policy: &str) -> Option<&Entry> {
        self.file
            .entries
            .get(file)
            .filter(|e| e.identity == identity && e.policy == policy)
    }

    /// Records what loading `file` found, if the file is as it was before the load
    /// (`before`) and after it (so the identity stands for the bytes that were loaded).
    fn record(
        &mut self,
        file: &Path,
        before: Option<FileIdentity>,
        policy: &str,
        p: &LoadedPlugin,
    ) {
        let (Some(before), Some(after)) = (before, FileIdentity::now(file)) else {
            return;
        };
        if before != after || before.size != p.size {
            self.forget(file);
            return;
        }
        let entry = Entry {
            identity: before,
            policy: policy.to_owned(),
            sha256: p.sha256.clone(),
            size: p.size,
            name: p.name.clone(),
            version: p.version.clone(),
            api_version: p.api_version.clone(),
            abi_version: p.abi_version.clone(),
            settings_schema: p.settings_schema.clone(),
            warnings: p.warnings.clone(),
            skipped_tools: p.skipped_tools.clone(),
            mode: p.mode,
            tools: p.tools.iter().map(|t| t.spec().clone()).collect(),
        };
        self.file.entries.insert(file.to_path_buf(), entry);
        self.changed = true;
    }

    fn forget(&mut self, file: &Path) {
        if self.file.entries.remove(file).is_some() {
            self.changed = true;
        }
    }

    /// Drops the entries of files that are gone from `dirs` (so the index does not grow
    /// with every folder ever listed, only with the folders in use).
    fn prune(&mut self, dirs: &[PathBuf]) {
        let before = self.file.entries.len();
        self.file
            .entries
            .retain(|file, _| !dirs.iter().any(|d| file.parent() == Some(d)) || file.exists());
        self.changed |= self.file.entries.len() != before;
    }
}

/// What the index's entries are only valid under: the load policy (strictness, size
/// limit, trust, isolation, settings) and the loader's own rules (this toolhost).
fn policy_fingerprint(loader: &PluginLoader) -> String {
    use sha2::Digest as _;
    let text = format!("{}\n{:?}", env!("CARGO_PKG_VERSION"), loader.policy());
    hex(&sha2::Sha256::digest(text.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl PluginLoader {
    /// [`PluginLoader::load_dirs`], answering from `index` for each file whose entry is
    /// fresh (see the module docs) and loading the others, whose entries it then
    /// records. The report is the one a full load gives, in the same order; a plugin
    /// answered from the index has tools that load their library on their first call.
    pub fn load_dirs_indexed(
        self: &Arc<Self>,
        dirs: &[PathBuf],
        index: &mut PluginIndex,
    ) -> LoadReportIndexed {
        use crate::plugins::load::loader::LoadReport;
        use crate::plugins::load::trust::TrustMode;
        if self.policy().trust.mode() != TrustMode::Any {
            return LoadReportIndexed {
                report: self.load_dirs(dirs),
                from_index: 0,
            };
        }
        let policy = policy_fingerprint(self);
        let mut report = LoadReport::default();
        // Per file, in order: answered from the index, or to load.
        enum Step {
            Indexed(Box<LoadedPlugin>),
            Load(usize, Option<FileIdentity>),
        }
        let mut steps: Vec<(PathBuf, Step)> = Vec::new();
        let mut to_load: Vec<PathBuf> = Vec::new();
        let mut dir_errors: Vec<(usize, PluginLoadError)> = Vec::new();
        for dir in dirs {
            let files = match PluginLoader::scan_dir(dir) {
                Ok(files) => files,
                Err(source) => {
                    dir_errors.push((
                        steps.len(),
                        PluginLoadError {
                            file: dir.clone(),
                            kind: crate::plugins::load::error::LoadErrorKind::Io {
                                action: "read the plugin directory",
                                source,
                            },
                        },
                    ));
                    continue;
                }
            };
            for file in files {
                let step = match self.cheap_checks(&file) {
                    Ok(identity) => match index.fresh(&file, identity, &policy) {
                        Some(entry) => Step::Indexed(Box::new(self.from_index(&file, entry))),
                        None => {
                            to_load.push(file.clone());
                            Step::Load(to_load.len() - 1, Some(identity))
                        }
                    },
                    // The load gives the error (and the same one a full load would).
                    Err(_) => {
                        to_load.push(file.clone());
                        Step::Load(to_load.len() - 1, None)
                    }
                };
                steps.push((file, step));
            }
        }
        let mut loaded: Vec<Option<Result<LoadedPlugin, PluginLoadError>>> =
            self.load_files(&to_load).into_iter().map(Some).collect();
        let mut from_index = 0;
        let mut dir_errors = dir_errors.into_iter().peekable();
        for (i, (file, step)) in steps.into_iter().enumerate() {
            while let Some((_, e)) = dir_errors.next_if(|(at, _)| *at <= i) {
                report.errors.push(e);
            }
            let result = match step {
                Step::Indexed(p) => {
                    from_index += 1;
                    Ok(*p)
                }
                Step::Load(at, before) => {
                    let result = loaded.get_mut(at).and_then(Option::take);
                    match result {
                        Some(Ok(p)) => {
                            index.record(&file, before, &policy, &p);
                            Ok(p)
                        }
                        Some(Err(e)) => {
                            index.forget(&file);
                            Err(e)
                        }
                        None => continue,
                    }
                }
            };
            match result {
                Ok(p) => {
                    report
                        .errors
                        .extend(p.skipped_tools.iter().map(|reason| PluginLoadError {
                            file: file.clone(),
                            kind: crate::plugins::load::error::LoadErrorKind::Tool {
                                reason: reason.clone(),
                            },
                        }));
                    report.plugins.push(p);
                }
                Err(e) => report.failed(e),
            }
        }
        report.errors.extend(dir_errors.map(|(_, e)| e));
        index.prune(dirs);
        LoadReportIndexed { report, from_index }
    }

    /// The checks a load makes before it reads the file (type, size, permissions, open
    /// without blocking); the file's identity from its descriptor.
    fn cheap_checks(&self, file: &Path) -> Result<FileIdentity, PluginLoadError> {
        self.open_checked(file)
            .map(|(_, meta)| FileIdentity::of(&meta))
            .map_err(|kind| PluginLoadError {
                file: file.to_path_buf(),
                kind,
            })
    }

    /// A plugin as its entry describes it; its tools load the library when called.
    fn from_index(self: &Arc<Self>, file: &Path, entry: &Entry) -> LoadedPlugin {
        let lazy = Arc::new(LazyPlugin {
            loader: Arc::clone(self),
            file: file.to_path_buf(),
            sha256: entry.sha256.clone(),
            loaded: Mutex::new(None),
        });
        let origin = ToolOrigin::Plugin {
            plugin: Arc::from(entry.name.as_str()),
            file: Arc::new(file.to_path_buf()),
            sha256: Arc::from(entry.sha256.as_str()),
            version: Arc::new(entry.version.clone()),
        };
        let tools = entry
            .tools
            .iter()
            .map(|spec| {
                Arc::new(IndexedTool {
                    spec: spec.clone(),
                    origin: origin.clone(),
                    plugin: Arc::clone(&lazy),
                }) as Arc<dyn DynTool>
            })
            .collect();
        LoadedPlugin {
            name: entry.name.clone(),
            version: entry.version.clone(),
            api_version: entry.api_version.clone(),
            abi_version: entry.abi_version.clone(),
            file: file.to_path_buf(),
            sha256: entry.sha256.clone(),
            size: entry.size,
            tools,
            skipped_tools: entry.skipped_tools.clone(),
            settings_schema: entry.settings_schema.clone(),
            warnings: entry.warnings.clone(),
            mode: entry.mode,
            worker: None,
        }
    }
}

/// What [`PluginLoader::load_dirs_indexed`] produced.
#[derive(Debug)]
pub struct LoadReportIndexed {
    /// The same report a full load gives.
    pub report: crate::plugins::load::loader::LoadReport,
    /// How many of its plugins were answered from the index (not loaded).
    pub from_index: usize,
}

/// A plugin file answered from the index: loaded at its tools' first call.
struct LazyPlugin {
    loader: Arc<PluginLoader>,
    file: PathBuf,
    sha256: String,
    loaded: Mutex<Option<Arc<LoadedPlugin>>>,
}

impl std::fmt::Debug for LazyPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyPlugin")
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

impl LazyPlugin {
    /// The loaded plugin: loaded now (every check of a load) if it was not yet, and
    /// refused if its bytes are not the ones the index described.
    fn get(&self) -> Result<Arc<LoadedPlugin>, ToolError> {
        let mut loaded = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(p) = loaded.as_ref() {
            return Ok(Arc::clone(p));
        }
        let p = self
            .loader
            .load_file(&self.file)
            .map_err(|e| ToolError::Failed(e.to_string()))?;
        if p.sha256 != self.sha256 {
            return Err(ToolError::Failed(format!(
                "the plugin file {} changed after its tools were listed (sha256 {} then, {} \
                 now); run the command again",
                self.file.display(),
                self.sha256,
                p.sha256
            )));
        }
        let p = Arc::new(p);
        *loaded = Some(Arc::clone(&p));
        Ok(p)
    }
}

/// A tool answered from the index.
struct IndexedTool {
    spec: ToolSpec,
    origin: ToolOrigin,
    plugin: Arc<LazyPlugin>,
}

#[async_trait]
impl DynTool for IndexedTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn origin(&self) -> &ToolOrigin {
        &self.origin
    }

    async fn call(&self, ctx: &CallContext, args: Arguments) -> Result<ToolOutput, ToolError> {
        let plugin = self.plugin.get()?;
        let tool = plugin
            .tools
            .iter()
            .find(|t| t.spec().name == self.spec.name)
            .ok_or_else(|| {
                ToolError::Failed(format!(
                    "the plugin file {} no longer exports tool '{}'; run the command again",
                    self.plugin.file.display(),
                    self.spec.name
                ))
            })?;
        if tool.spec() != &self.spec {
            return Err(ToolError::Failed(format!(
                "tool '{}' of {} is not what the plugin index said (its description, schema \
                 or risk differ); it was not run. Run the command again",
                self.spec.name,
                self.plugin.file.display()
            )));
        }
        tool.call(ctx, args).await
    }
}
