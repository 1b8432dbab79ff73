//! The plugin loader: finds shared libraries in plugin directories, loads each through a
//! private copy, runs abi_stable's version and layout checks and the host's own checks,
//! and turns every failure into one clear [`PluginLoadError`] per file.
//!
//! It looks before it copies, in this order, and nothing of the file runs before the
//! last step: `stat` (regular file, size within [`LoadPolicy::max_file_size`]); strict
//! permissions of the file, its directory and a symlink's target (see
//! `permissions.rs`); open without blocking and `fstat` the descriptor (regular, size,
//! permissions again: a swap is caught); the ELF header from that descriptor; the copy,
//! hashed and fed to the signature verifier from the same reads, with a change during the
//! copy refused; the trust decision (`trust.rs`) on those bytes; only then dlopen. dlopen
//! runs the library (its ELF constructors, a plugin's statics and global allocator)
//! before abi_stable's and the host's checks of its root module: loading a file runs it.
//!
//! Why a private copy: dlopen caches libraries by path and inode, so loading a replaced
//! file at the same path can return the old library, and writing over a mapped library
//! crashes the process. Each load copies the file to a unique path in a private directory,
//! loads the copy and unlinks it as soon as dlopen returns; at start-up the folders of
//! dead processes are swept (a crash mid-load leaves a copy). Libraries are never
//! unloaded, refused ones included (abi_stable keeps `'static` references into them, and
//! a constructor may have started a thread running their code), so each load keeps its
//! mapping until the process exits.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use abi_stable::library::{RawLibrary, lib_header_from_raw_library};
use toolhost_plugin_api::check::{check_tool_count, duplicate_tools};
use toolhost_plugin_api::ffi::PluginRoot_Ref;

use crate::plugins::load::error::{LoadErrorKind, PluginLoadError};
use crate::plugins::load::trust::{TrustPolicy, TrustRefusal};
use crate::plugins::run::plugin_tool::{LoadedPlugin, PluginTool};
use crate::plugins::settings::PluginSettings;
use crate::sys::permissions::{self, PermissionCheck};
use crate::sys::safe_open::{self, OpenError};
use toolhost_calls::tool::{DynTool, ToolOrigin};

use super::abi_check::{check_tables, library_error, root_error};
use super::elf::{check_elf_header, check_plugin_elf};
use super::private_copy::{
    check_unchanged, copy_and_hash, create_private_dir, hash_copy, sweep_dead_private_dirs,
};
use crate::plugins::isolation::supervisor::WorkerPlugin;
use crate::plugins::isolation::{Decision, IsolationMode, IsolationPolicy};

/// The file extension of shared libraries on this platform (`so` on Linux).
pub const LIBRARY_EXTENSION: &str = std::env::consts::DLL_EXTENSION;

/// What loading a set of plugin directories produced: the plugins that loaded, in load
/// order, and one error per file (or directory) that did not.
#[derive(Debug, Default)]
pub struct LoadReport {
    /// Plugins that loaded, in a deterministic order: directories in the order given,
    /// files sorted by name within each.
    pub plugins: Vec<LoadedPlugin>,
    /// Files or directories that failed, each with its reason.
    pub errors: Vec<PluginLoadError>,
    /// Files plainly no plugin (libraries rustc builds for itself, such as the `#[tool]`
    /// macros' proc-macro library beside the plugins in `target/release`), passed over
    /// without a warning.
    pub passed_over: Vec<PathBuf>,
}

impl LoadReport {
    /// Records a file that did not load: an error, or passed over when it is plainly no
    /// plugin.
    pub(crate) fn failed(&mut self, e: PluginLoadError) {
        if e.kind.is_not_a_plugin() {
            tracing::debug!(file = %e.file.display(), "{}", e.kind);
            self.passed_over.push(e.file);
        } else {
            self.errors.push(e);
        }
    }
}

/// The default of [`LoadPolicy::max_file_size`]: 256 MiB.
pub const DEFAULT_MAX_FILE_SIZE: u64 = 256 * 1024 * 1024;

/// Which files may load at all (`[plugins]` and `[trust]` in the config).
#[derive(Debug, Clone)]
pub struct LoadPolicy {
    /// Refuse files that users other than the host's and root could change (OpenSSH
    /// `StrictModes`). On by default; off only for development.
    pub strict_permissions: bool,
    /// Files larger than this are refused before a byte is read.
    pub max_file_size: u64,
    /// Pinned or signed files only, or any.
    pub trust: TrustPolicy,
    /// Which plugins run in worker processes, and how those are confined.
    pub isolation: Arc<IsolationPolicy>,
    /// What each plugin's `ctx.settings()` reads (`[plugins.NAME.settings]`).
    pub settings: PluginSettings,
    /// How many files are copied, hashed, checked and loaded at once when several are
    /// (start-up, a rescan that finds several changed): 0 means the cores available
    /// (`std::thread::available_parallelism`), 1 one at a time. Plugins register in the
    /// fixed order whatever this is.
    pub load_threads: usize,
}

impl Default for LoadPolicy {
    fn default() -> Self {
        LoadPolicy {
            strict_permissions: true,
            max_file_size: DEFAULT_MAX_FILE_SIZE,
            trust: TrustPolicy::default(),
            isolation: Arc::default(),
            settings: PluginSettings::default(),
            load_threads: 0,
        }
    }
}

/// What the static checks learned about a file, without running any of its code.
#[derive(Debug)]
pub struct FileFacts {
    /// The operator's path.
    pub file: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// The sha256 of its bytes (lowercase hex).
    pub sha256: String,
    /// Its owner's uid.
    pub uid: u32,
    /// Its permission bits.
    pub mode: u32,
    /// Why the trust mode would refuse it (`None`: it would load).
    pub untrusted: Option<TrustRefusal>,
}

/// Loads plugin files. One loader per process is enough; it owns the private directory
/// that load copies pass through.
#[derive(Debug)]
pub struct PluginLoader {
    private_dir: PathBuf,
    copies: AtomicU64,
    policy: LoadPolicy,
}

impl PluginLoader {
    /// A loader with the default policy (strict permissions, any trust mode) whose
    /// private copies go to a fresh directory (mode 0700) under the system's temporary
    /// directory.
    pub fn new() -> io::Result<PluginLoader> {
        PluginLoader::with_policy(LoadPolicy::default())
    }

    /// A loader with `policy`; see [`PluginLoader::new`].
    ///
    /// First it sweeps the private directories of loaders whose process is gone (a crash
    /// during a load can leave a copy behind): folders named as this function names them,
    /// owned by this uid, whose process no longer exists; symlinks are never followed.
    pub fn with_policy(policy: LoadPolicy) -> io::Result<PluginLoader> {
        let base = std::env::temp_dir();
        sweep_dead_private_dirs(&base);
        let pid = std::process::id();
        let mut attempt = 0u32;
        loop {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or_default();
            let dir = base.join(format!("toolhost-{pid}-{nanos:x}{attempt}"));
            match create_private_dir(&dir) {
                Ok(()) => {
                    return Ok(PluginLoader {
                        private_dir: dir,
                        copies: AtomicU64::new(0),
                        policy,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 16 => {
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The policy files are judged by.
    pub fn policy(&self) -> &LoadPolicy {
        &self.policy
    }

    /// The names in `dir` that look like shared libraries (the platform's extension, not
    /// hidden, not an editor's backup), sorted. Nothing is opened or `stat`ed here: what
    /// each one is (a FIFO, a directory, a regular file) is the loader's business, and a
    /// failed `stat` must not make a loaded plugin look gone. An error reading the
    /// directory, even part-way, is an error for the whole directory: a partial listing
    /// must never count as "these files are gone".
    pub fn scan_dir(dir: &Path) -> io::Result<Vec<PathBuf>> {
        let mut files = Vec::new();
        for entry in fs::read_dir(dir)? {
            let path = entry?.path();
            if is_plugin_candidate(&path) {
                files.push(path);
            }
        }
        files.sort();
        Ok(files)
    }

    /// Loads every plugin in `dirs`: directories in the order given, files sorted by name
    /// within each. One bad file (or a missing directory) gives one error and the others
    /// still load. The files load on a bounded pool ([`LoadPolicy::load_threads`]); the
    /// report lists them in the fixed order whatever order they finished in.
    pub fn load_dirs(&self, dirs: &[PathBuf]) -> LoadReport {
        let mut report = LoadReport::default();
        // Per directory: its files, or why it could not be read (in order).
        let mut listed: Vec<Result<Vec<PathBuf>, PluginLoadError>> = Vec::new();
        for dir in dirs {
            listed.push(
                PluginLoader::scan_dir(dir).map_err(|source| PluginLoadError {
                    file: dir.clone(),
                    kind: LoadErrorKind::Io {
                        action: "read the plugin directory",
                        source,
                    },
                }),
            );
        }
        let files: Vec<PathBuf> = listed
            .iter()
            .filter_map(|l| l.as_ref().ok())
            .flatten()
            .cloned()
            .collect();
        let mut loaded = self.load_files(&files).into_iter();
        for entry in listed {
            let files = match entry {
                Ok(files) => files,
                Err(e) => {
                    report.errors.push(e);
                    continue;
                }
            };
            for (file, result) in files.iter().zip(loaded.by_ref()) {
                match result {
                    Ok(p) => {
                        report.errors.extend(p.skipped_tools.iter().map(|reason| {
                            PluginLoadError {
                                file: file.clone(),
                                kind: LoadErrorKind::Tool {
                                    reason: reason.clone(),
                                },
                            }
                        }));
                        report.plugins.push(p);
                    }
                    Err(e) => report.failed(e),
                }
            }
        }
        report
    }

    /// Loads each of `files` ([`PluginLoader::load_file`]) on a bounded pool of
    /// [`LoadPolicy::load_threads`] threads (the cores available by default; none is
    /// started for a single file). The results are in the order of `files`, whichever
    /// finished first, so what is registered from them does not depend on the pool.
    pub fn load_files(&self, files: &[PathBuf]) -> Vec<Result<LoadedPlugin, PluginLoadError>> {
        let threads = self.load_threads().min(files.len());
        if threads <= 1 {
            return files.iter().map(|f| self.load_file(f)).collect();
        }
        let next = std::sync::atomic::AtomicUsize::new(0);
        let mut slots: Vec<Option<Result<LoadedPlugin, PluginLoadError>>> =
            files.iter().map(|_| None).collect();
        let done: Vec<(usize, Result<LoadedPlugin, PluginLoadError>)> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        let mut mine = Vec::new();
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(file) = files.get(i) else { break };
                            mine.push((i, self.load_file(file)));
                        }
                        mine
                    })
                })
                .collect();
            workers
                .into_iter()
                // A panic in the loader itself (a plugin's are caught at the boundary):
                // that thread's files get an error below.
                .flat_map(|w| w.join().unwrap_or_default())
                .collect()
        });
        for (i, result) in done {
            if let Some(slot) = slots.get_mut(i) {
                *slot = Some(result);
            }
        }
        slots
            .into_iter()
            .zip(files)
            .map(|(slot, file)| {
                slot.unwrap_or_else(|| {
                    Err(PluginLoadError {
                        file: file.clone(),
                        kind: LoadErrorKind::Plugin {
                            reason: "the thread loading it panicked (see the log); \
                                     run `toolhost check` on the file"
                                .to_owned(),
                        },
                    })
                })
            })
            .collect()
    }

    /// The size of the load pool: [`LoadPolicy::load_threads`], or the cores available.
    pub fn load_threads(&self) -> usize {
        match self.policy.load_threads {
            0 => std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
            n => n,
        }
    }

    /// Loads one plugin file.
    pub fn load_file(&self, file: &Path) -> Result<LoadedPlugin, PluginLoadError> {
        let loaded = self.load_inner(file).map_err(|kind| PluginLoadError {
            file: file.to_path_buf(),
            kind,
        });
        if let Ok(p) = &loaded {
            tracing::debug!(
                "loaded plugin file {} (sha256 {})",
                file.display(),
                p.sha256
            );
        }
        loaded
    }

    /// Runs the checks that need no code of the file: type, size, permissions, ELF
    /// header, sha256 and the trust mode's verdict (in [`FileFacts::untrusted`]). Loading a
    /// file runs its initialisers; this does not.
    pub fn inspect(&self, file: &Path) -> Result<FileFacts, PluginLoadError> {
        self.inspect_inner(file).map_err(|kind| PluginLoadError {
            file: file.to_path_buf(),
            kind,
        })
    }

    fn inspect_inner(&self, file: &Path) -> Result<FileFacts, LoadErrorKind> {
        let (src, before) = self.open_checked(file)?;
        let expect = self.policy.trust.expect(file)?;
        let mut verifier = expect.verifier();
        let limit = self.policy.max_file_size;
        let (sha256, size) = hash_copy((&src).take(limit.saturating_add(1)), io::sink(), |c| {
            if let Some(v) = verifier.as_mut() {
                v.update(c);
            }
        })
        .map_err(|source| LoadErrorKind::Io {
            action: "read the file",
            source,
        })?;
        check_unchanged(&src, &before, size, limit)?;
        #[cfg(unix)]
        let (uid, mode) = {
            use std::os::unix::fs::MetadataExt as _;
            (before.uid(), before.mode())
        };
        #[cfg(not(unix))]
        let (uid, mode) = (0, 0);
        Ok(FileFacts {
            file: file.to_path_buf(),
            size,
            untrusted: expect.decide(file, &sha256, verifier).err(),
            sha256,
            uid,
            mode,
        })
    }

    /// The checks before anything is copied: `stat` (regular file, size), the paths'
    /// permissions, then open without blocking and check the descriptor (regular, size,
    /// permissions again, ELF header). Returns the open file and its `fstat`.
    pub(super) fn open_checked(
        &self,
        file: &Path,
    ) -> Result<(fs::File, fs::Metadata), LoadErrorKind> {
        let limit = self.policy.max_file_size;
        let meta = fs::metadata(file).map_err(|source| LoadErrorKind::Io {
            action: "look at the file",
            source,
        })?;
        if !meta.is_file() {
            return Err(LoadErrorKind::NotARegularFile {
                kind: safe_open::kind_of(&meta.file_type()),
            });
        }
        if meta.len() > limit {
            return Err(LoadErrorKind::TooLarge {
                size: meta.len(),
                limit,
            });
        }
        if self.policy.strict_permissions {
            permissions::check_path(file).map_err(|e| match e {
                PermissionCheck::Refused(p) => LoadErrorKind::from(p),
                PermissionCheck::Io { source, .. } => LoadErrorKind::Io {
                    action: "check the permissions of the file and its directory",
                    source,
                },
            })?;
        }
        let (src, opened) = safe_open::open_regular(file).map_err(|e| match e {
            OpenError::NotRegular { kind } => LoadErrorKind::NotARegularFile { kind },
            OpenError::TooLarge { size, limit } => LoadErrorKind::TooLarge { size, limit },
            OpenError::Io(source) => LoadErrorKind::Io {
                action: "open the file",
                source,
            },
        })?;
        if self.policy.strict_permissions {
            permissions::check_opened(file, &opened)?;
        }
        if opened.len() > limit {
            return Err(LoadErrorKind::TooLarge {
                size: opened.len(),
                limit,
            });
        }
        check_plugin_elf(&src, opened.len())?;
        Ok((src, opened))
    }

    fn load_inner(&self, file: &Path) -> Result<LoadedPlugin, LoadErrorKind> {
        match self.policy.isolation.decide(file) {
            Decision::Mode(IsolationMode::InProcess) => self.load_in_process(file),
            Decision::Mode(IsolationMode::Process) => self.load_in_worker(file),
            // The table names plugins by name: learn the name from a worker (the plugin's
            // code never runs in the host to find out), then follow the table.
            Decision::ByName => {
                let plugin = self.load_in_worker(file)?;
                match self.policy.isolation.mode_for_name(&plugin.name) {
                    IsolationMode::Process => Ok(plugin),
                    IsolationMode::InProcess => {
                        drop(plugin);
                        self.load_in_process(file)
                    }
                }
            }
        }
    }

    /// The private copy's path for the next load of `file`.
    fn next_copy(&self, file: &Path) -> PathBuf {
        let n = self.copies.fetch_add(1, Ordering::Relaxed);
        let stem = file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "plugin".to_owned());
        self.private_dir
            .join(format!("{stem}-{n}.{LIBRARY_EXTENSION}"))
    }

    /// The checks before any of the file's code runs, the private copy (hashed as it is
    /// made) and the trust verdict on the bytes copied: the copy's path, sha256 and size.
    /// A refused copy is removed.
    fn verified_copy(&self, file: &Path) -> Result<(PathBuf, String, u64), LoadErrorKind> {
        let (src, before) = self.open_checked(file)?;
        let expect = self.policy.trust.expect(file)?;
        let copy = self.next_copy(file);
        let mut verifier = expect.verifier();
        let copied = copy_and_hash(&src, &before, &copy, self.policy.max_file_size, |c| {
            if let Some(v) = verifier.as_mut() {
                v.update(c);
            }
        })
        .and_then(|(sha256, size)| {
            expect.decide(file, &sha256, verifier)?;
            Ok((sha256, size))
        });
        match copied {
            Ok((sha256, size)) => Ok((copy, sha256, size)),
            Err(e) => {
                let _ = fs::remove_file(&copy);
                Err(e)
            }
        }
    }

    fn load_in_process(&self, file: &Path) -> Result<LoadedPlugin, LoadErrorKind> {
        // Every check from here runs on the private copy: the operator's file may change
        // meanwhile.
        let (copy, sha256, size) = self.verified_copy(file)?;
        let loaded = self.load_copy(file, &copy, &sha256).map(|mut plugin| {
            plugin.sha256 = sha256;
            plugin.size = size;
            plugin
        });
        // Unlinked as soon as dlopen returned; this covers a refusal before it.
        let _ = fs::remove_file(&copy);
        loaded
    }

    /// The same checks and verified copy as in-process, then a worker process maps the
    /// copy (kept for the generation's life, so a restarted worker maps the same bytes).
    fn load_in_worker(&self, file: &Path) -> Result<LoadedPlugin, LoadErrorKind> {
        let (copy, sha256, size) = self.verified_copy(file)?;
        let started =
            match WorkerPlugin::start(file, &copy, &sha256, Arc::clone(&self.policy.isolation)) {
                Ok(started) => started,
                Err(reason) => {
                    let _ = fs::remove_file(&copy);
                    return Err(LoadErrorKind::InWorker {
                        reason: reason.to_string(),
                    });
                }
            };
        let warnings = match self
            .policy
            .settings
            .check_declared(&started.name, started.settings_schema.as_ref())
        {
            Ok(warnings) => warnings,
            Err(refused) => {
                // Dropping the worker's supervisor ends its process.
                drop(started);
                let _ = fs::remove_file(&copy);
                return Err(refused);
            }
        };
        let settings = self.policy.settings.of(&started.name);
        let tools = started
            .plugin
            .tools(started.tools, &started.version, settings);
        Ok(LoadedPlugin {
            name: started.name,
            version: started.version,
            api_version: started.api_version,
            abi_version: started.abi_version,
            file: file.to_path_buf(),
            sha256,
            size,
            tools,
            skipped_tools: started.skipped_tools,
            settings_schema: started.settings_schema,
            warnings,
            mode: IsolationMode::Process,
            worker: Some(started.plugin),
        })
    }

    fn load_copy(
        &self,
        file: &Path,
        copy: &Path,
        sha256: &str,
    ) -> Result<LoadedPlugin, LoadErrorKind> {
        load_library(file, copy, sha256, &self.policy.settings)
    }
}

/// Maps the private copy `copy` of `file` into this process and reads its plugin:
/// abi_stable's checks, the host's, then the tools, whose calls get the plugin's
/// `settings`. The copy is unlinked as soon as dlopen returns.
pub(crate) fn load_library(
    file: &Path,
    copy: &Path,
    sha256: &str,
    settings: &PluginSettings,
) -> Result<LoadedPlugin, LoadErrorKind> {
    load_library_tools(file, copy, sha256, false, true, Some(settings)).map(|(plugin, _)| plugin)
}

/// Every library this process mapped: never unloaded (see `load_library_tools`).
static MAPPED: std::sync::Mutex<Vec<&'static RawLibrary>> = std::sync::Mutex::new(Vec::new());

/// [`load_library`], with the plugin's tools as [`PluginTool`]s too (a worker runs them
/// straight on its plugin threads). `in_worker`: a plugin built with panic = "abort" is
/// fine (an abort ends only the worker). `settings`: `None` in a worker, whose plugin's
/// settings requests go to the host like its other services.
pub(crate) fn load_library_tools(
    file: &Path,
    copy: &Path,
    sha256: &str,
    in_worker: bool,
    unlink_copy: bool,
    settings: Option<&PluginSettings>,
) -> Result<(LoadedPlugin, Vec<Arc<PluginTool>>), LoadErrorKind> {
    let copied = fs::File::open(copy).map_err(|source| LoadErrorKind::Io {
        action: "read the private copy",
        source,
    })?;
    let size = copied
        .metadata()
        .map_err(|source| LoadErrorKind::Io {
            action: "read the private copy",
            source,
        })?
        .len();
    check_elf_header(&copied, size)?;
    drop(copied);
    // dlopen runs the library: its ELF constructors, and a plugin's statics and global
    // allocator, run here, before any of the checks below.
    let opened = RawLibrary::load_at(copy);
    // The mapping stays after the unlink; the copy is never opened again, and a crash
    // from here on leaves nothing behind.
    if unlink_copy {
        let _ = fs::remove_file(copy);
    }
    let library = opened.map_err(|e| {
        // The loader's messages name the private copy; name the operator's file.
        let copy_name = copy.display().to_string();
        match library_error(e, None) {
            LoadErrorKind::Open { reason } => LoadErrorKind::Open {
                reason: reason.replace(&copy_name, &file.display().to_string()),
            },
            other => other,
        }
    })?;
    // Never unloaded, on every path from here, refusals included: its constructors have
    // run and may have started threads that run its code, and abi_stable keeps
    // `'static` references into it. (Dropping a `RawLibrary` would dlclose it.)
    let library: &'static RawLibrary = Box::leak(Box::new(library));
    // Held where a leak checker (the fuzz targets' LeakSanitizer) sees them held, as
    // they are, for the life of the process.
    MAPPED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(library);
    // SAFETY: the header's `'static` references point into `library`, which is leaked
    // above and so stays mapped for the life of the process.
    let header =
        unsafe { lib_header_from_raw_library(library) }.map_err(|e| library_error(e, None))?;
    let plugin_api = header.version_strings().version.to_owned();
    let root = header
        .init_root_module::<PluginRoot_Ref>()
        .map_err(|e| root_error(e, &plugin_api, header.layout()))?;
    if !root.panic_unwind() && !in_worker {
        return Err(LoadErrorKind::PanicAbort);
    }
    check_tables(root.table_layouts()(), &plugin_api)?;
    let name = root.name().as_str().to_owned();
    let origin = ToolOrigin::Plugin {
        plugin: Arc::from(name.as_str()),
        file: Arc::new(file.to_path_buf()),
        sha256: Arc::from(sha256),
        version: Arc::new(root.version().as_str().to_owned()),
    };
    // The settings it declares are checked before any tool is made: settings that do
    // not fit refuse the plugin now, not at its first call.
    // SAFETY: the symbol is the one `export_plugin!` exports with this type (see
    // `ffi::SETTINGS_SCHEMA_SYMBOL`); `library` stays mapped for the process's life, so the
    // function pointer copied out stays valid.
    let settings_fn = unsafe {
        library.get::<toolhost_plugin_api::ffi::SettingsSchemaFn>(
            toolhost_plugin_api::ffi::SETTINGS_SCHEMA_SYMBOL_C,
        )
    }
    .ok()
    .map(|symbol| *symbol);
    let settings_schema = toolhost_plugin_api::host::read_settings_schema(settings_fn)
        .map_err(|reason| LoadErrorKind::Plugin { reason })?;
    let warnings = match settings {
        Some(all) => all.check_declared(&name, settings_schema.as_ref())?,
        // In a worker: the host checks what the worker reports.
        None => Vec::new(),
    };
    let ffi_tools = root.tools()()
        .into_result()
        .map_err(|m| LoadErrorKind::Plugin {
            reason: m.into_string(),
        })?;
    // Counted before any tool's metadata is read (that is where a plugin's size costs
    // the host): too many and every object is dropped unread.
    if let Err(reason) = check_tool_count(ffi_tools.len()) {
        for ffi in ffi_tools {
            // SAFETY: each object is dropped once, with the vtable it was exported with,
            // and never used again; the plugin's drop glue swallows panics.
            unsafe { (ffi.vtable.drop())(ffi.this) };
        }
        return Err(LoadErrorKind::TooManyTools { reason });
    }
    // Each tool object becomes a PluginTool or is dropped right away, so every one is
    // freed exactly once; a tool whose metadata fails is left out, the others stay.
    let plugin_settings = settings.map(|all| all.of(&name));
    let mut read: Vec<(usize, PluginTool)> = Vec::with_capacity(ffi_tools.len());
    let mut skipped_tools = Vec::new();
    for (index, ffi) in ffi_tools.into_iter().enumerate() {
        match PluginTool::new(ffi, origin.clone(), index, plugin_settings.clone()) {
            Ok(t) => read.push((index, t)),
            Err(e) => skipped_tools.push(e.to_string()),
        }
    }
    // Two tools of one name in one plugin: the first keeps it (the shared check, which
    // the plugin's own tests run too).
    let duplicates = duplicate_tools(
        &name,
        read.iter()
            .map(|(index, t)| (*index, t.spec().name.as_str())),
    );
    skipped_tools.extend(duplicates.iter().map(|(_, message)| message.clone()));
    let plugin_tools: Vec<Arc<PluginTool>> = read
        .into_iter()
        .filter(|(index, _)| !duplicates.iter().any(|(d, _)| d == index))
        .map(|(_, t)| Arc::new(t))
        .collect();
    let tools: Vec<Arc<dyn DynTool>> = plugin_tools
        .iter()
        .map(|t| Arc::clone(t) as Arc<dyn DynTool>)
        .collect();
    let plugin = LoadedPlugin {
        name,
        version: root.version().as_str().to_owned(),
        api_version: root.api_version().as_str().to_owned(),
        abi_version: plugin_api.as_str().to_owned(),
        file: file.to_path_buf(),
        sha256: String::new(),
        size: 0,
        tools,
        skipped_tools,
        settings_schema,
        warnings,
        mode: if in_worker {
            IsolationMode::Process
        } else {
            IsolationMode::InProcess
        },
        worker: None,
    };
    Ok((plugin, plugin_tools))
}

impl Drop for PluginLoader {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.private_dir);
    }
}

/// A visible file with the platform's library extension.
pub(crate) fn is_plugin_candidate(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    !name.starts_with('.')
        && !name.ends_with('~')
        && path.extension().and_then(|e| e.to_str()) == Some(LIBRARY_EXTENSION)
}
