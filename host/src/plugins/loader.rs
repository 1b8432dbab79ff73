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

use abi_stable::abi_stability::abi_checking::check_layout_compatibility;
use abi_stable::library::{LibraryError, RawLibrary, lib_header_from_raw_library};
use sha2::Digest as _;
use toolhost_plugin_api::API_VERSION;
use toolhost_plugin_api::ffi::{PluginRoot_Ref, TableLayouts};

use crate::calls::tool::{DynTool, ToolOrigin};
use crate::plugins::error::{LoadErrorKind, PluginLoadError};
use crate::plugins::plugin_tool::{LoadedPlugin, PluginTool};
use crate::plugins::trust::{TrustPolicy, TrustRefusal};
use crate::sys::permissions::{self, PermissionCheck};
use crate::sys::safe_open::{self, OpenError};

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
}

impl Default for LoadPolicy {
    fn default() -> Self {
        LoadPolicy {
            strict_permissions: true,
            max_file_size: DEFAULT_MAX_FILE_SIZE,
            trust: TrustPolicy::default(),
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
    /// still load.
    pub fn load_dirs(&self, dirs: &[PathBuf]) -> LoadReport {
        let mut report = LoadReport::default();
        for dir in dirs {
            match PluginLoader::scan_dir(dir) {
                Ok(files) => {
                    for file in files {
                        match self.load_file(&file) {
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
                            Err(e) => report.errors.push(e),
                        }
                    }
                }
                Err(source) => report.errors.push(PluginLoadError {
                    file: dir.clone(),
                    kind: LoadErrorKind::Io {
                        action: "read the plugin directory",
                        source,
                    },
                }),
            }
        }
        report
    }

    /// Loads one plugin file.
    pub fn load_file(&self, file: &Path) -> Result<LoadedPlugin, PluginLoadError> {
        self.load_inner(file).map_err(|kind| PluginLoadError {
            file: file.to_path_buf(),
            kind,
        })
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
    fn open_checked(&self, file: &Path) -> Result<(fs::File, fs::Metadata), LoadErrorKind> {
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
        check_elf_header(&src, opened.len())?;
        Ok((src, opened))
    }

    fn load_inner(&self, file: &Path) -> Result<LoadedPlugin, LoadErrorKind> {
        let (src, before) = self.open_checked(file)?;
        let expect = self.policy.trust.expect(file)?;
        let n = self.copies.fetch_add(1, Ordering::Relaxed);
        let stem = file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "plugin".to_owned());
        let copy = self
            .private_dir
            .join(format!("{stem}-{n}.{LIBRARY_EXTENSION}"));
        let mut verifier = expect.verifier();
        let copied = copy_and_hash(&src, &before, &copy, self.policy.max_file_size, |c| {
            if let Some(v) = verifier.as_mut() {
                v.update(c);
            }
        });
        // Every check from here runs on the private copy: the operator's file may change
        // meanwhile. The trust verdict is on the bytes copied.
        let loaded = copied.and_then(|(sha256, size)| {
            expect.decide(file, &sha256, verifier)?;
            let mut plugin = self.load_copy(file, &copy, &sha256)?;
            plugin.sha256 = sha256;
            plugin.size = size;
            Ok(plugin)
        });
        // A copy refused before dlopen (by the copy itself or the trust verdict); a loaded
        // one was unlinked as soon as dlopen returned, so this finds nothing.
        let _ = fs::remove_file(&copy);
        loaded
    }

    fn load_copy(
        &self,
        file: &Path,
        copy: &Path,
        sha256: &str,
    ) -> Result<LoadedPlugin, LoadErrorKind> {
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
        let _ = fs::remove_file(copy);
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
        // SAFETY: the header's `'static` references point into `library`, which is leaked
        // above and so stays mapped for the life of the process.
        let header =
            unsafe { lib_header_from_raw_library(library) }.map_err(|e| library_error(e, None))?;
        let plugin_api = header.version_strings().version.to_owned();
        let root = header
            .init_root_module::<PluginRoot_Ref>()
            .map_err(|e| library_error(e, Some(&plugin_api)))?;
        if !root.panic_unwind() {
            return Err(LoadErrorKind::PanicAbort);
        }
        check_tables(root.table_layouts()(), &plugin_api)?;
        let name = root.name().as_str().to_owned();
        let origin = ToolOrigin::Plugin {
            plugin: Arc::from(name.as_str()),
            file: Arc::new(file.to_path_buf()),
            sha256: Arc::from(sha256),
        };
        let ffi_tools = root.tools()()
            .into_result()
            .map_err(|m| LoadErrorKind::Plugin {
                reason: m.into_string(),
            })?;
        // Each tool object becomes a PluginTool or is dropped right away, so every one is
        // freed exactly once; a tool whose metadata fails is left out, the others stay.
        let mut tools: Vec<Arc<dyn DynTool>> = Vec::with_capacity(ffi_tools.len());
        let mut skipped_tools = Vec::new();
        for (index, ffi) in ffi_tools.into_iter().enumerate() {
            match PluginTool::new(ffi, origin.clone(), index) {
                Ok(t) => tools.push(Arc::new(t)),
                Err(e) => skipped_tools.push(e),
            }
        }
        Ok(LoadedPlugin {
            name,
            version: root.version().as_str().to_owned(),
            api_version: root.api_version().as_str().to_owned(),
            file: file.to_path_buf(),
            sha256: String::new(),
            size: 0,
            tools,
            skipped_tools,
        })
    }
}

impl Drop for PluginLoader {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.private_dir);
    }
}

/// Copies the opened `src` (its `fstat` was `before`) to `copy`, at most `limit` bytes,
/// hashing what it copies and showing every chunk to `observe`, and checks that the file
/// did not change while it was read (a writer still at work).
fn copy_and_hash(
    src: &fs::File,
    before: &fs::Metadata,
    copy: &Path,
    limit: u64,
    observe: impl FnMut(&[u8]),
) -> Result<(String, u64), LoadErrorKind> {
    let io_err = |source| LoadErrorKind::Io {
        action: "copy the file for loading",
        source,
    };
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let dest = options.open(copy).map_err(io_err)?;
    let (sha256, size) =
        hash_copy(src.take(limit.saturating_add(1)), dest, observe).map_err(io_err)?;
    check_unchanged(src, before, size, limit)?;
    Ok((sha256, size))
}

/// After reading `size` bytes of `src`: refuses a file that grew past `limit` or changed
/// since its `fstat` `before`.
fn check_unchanged(
    src: &fs::File,
    before: &fs::Metadata,
    size: u64,
    limit: u64,
) -> Result<(), LoadErrorKind> {
    if size > limit {
        return Err(LoadErrorKind::TooLarge { size, limit });
    }
    let after = src.metadata().map_err(|source| LoadErrorKind::Io {
        action: "look at the file after reading it",
        source,
    })?;
    if same_version(before, &after) && size == after.len() {
        Ok(())
    } else {
        Err(LoadErrorKind::ChangedWhileLoading)
    }
}

/// Copies everything `reader` yields to `writer`, showing each chunk to `observe`,
/// returning its sha256 (hex) and size.
fn hash_copy(
    mut reader: impl Read,
    mut writer: impl io::Write,
    mut observe: impl FnMut(&[u8]),
) -> io::Result<(String, u64)> {
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut size = 0u64;
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            return Ok((hex(&sha2::Digest::finalize(hasher)), size));
        }
        sha2::Digest::update(&mut hasher, &buf[..n]);
        observe(&buf[..n]);
        writer.write_all(&buf[..n])?;
        size += n as u64;
    }
}

/// Whether two looks at a file saw the same contents (size, mtime and ctime).
fn same_version(a: &fs::Metadata, b: &fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        a.len() == b.len()
            && a.mtime() == b.mtime()
            && a.mtime_nsec() == b.mtime_nsec()
            && a.ctime() == b.ctime()
            && a.ctime_nsec() == b.ctime_nsec()
    }
    #[cfg(not(unix))]
    {
        a.len() == b.len() && a.modified().ok() == b.modified().ok()
    }
}

/// The sha256 of everything `reader` yields, as lowercase hex.
pub(crate) fn sha256_hex(reader: impl Read) -> io::Result<String> {
    hash_copy(reader, io::sink(), |_| ()).map(|(hex, _)| hex)
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// Removes what dead loaders left in `base` (the temporary directory): a folder is
/// removed only if its name is exactly `toolhost-<pid>-<hex>` as [`PluginLoader::new`]
/// makes them, it is a real directory (looked at with `lstat`: a symlink is never
/// followed or removed), owned by this process's effective uid, and no process `<pid>`
/// exists (`/proc/<pid>`; without a readable `/proc` nothing is swept). Inside it only
/// regular files and symlinks are unlinked (never followed); a folder holding anything
/// else is left as it is. Failures are logged and ignored: a sweep never stops a start.
///
/// Weak spot: a process in another PID namespace sharing this temporary directory looks
/// dead; its folder (holding nothing between loads) would be removed.
fn sweep_dead_private_dirs(base: &Path) -> usize {
    let own_pid = std::process::id();
    if fs::symlink_metadata("/proc/self").is_err() {
        return 0;
    }
    let Ok(entries) = fs::read_dir(base) else {
        return 0;
    };
    let uid = crate::sys::private::effective_uid();
    let mut swept = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(private_dir_pid) else {
            continue;
        };
        if pid == own_pid || Path::new("/proc").join(pid.to_string()).exists() {
            continue;
        }
        let dir = entry.path();
        let Ok(meta) = fs::symlink_metadata(&dir) else {
            continue;
        };
        #[cfg(unix)]
        let ours = {
            use std::os::unix::fs::MetadataExt;
            meta.uid() == uid
        };
        #[cfg(not(unix))]
        let ours = false;
        if !meta.file_type().is_dir() || !ours {
            continue;
        }
        match remove_private_dir(&dir) {
            // Another host starting at the same time swept it first.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Ok(()) => {
                tracing::info!(dir = %dir.display(), "removed the private copy folder of a dead toolhost process");
                swept += 1;
            }
            Err(e) => tracing::warn!(
                dir = %dir.display(),
                "could not remove the private copy folder of a dead toolhost process: {e}; \
                 remove it by hand"
            ),
        }
    }
    swept
}

/// The pid in a private directory's name, if the name is exactly `toolhost-<pid>-<hex>`.
fn private_dir_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("toolhost-")?;
    let (pid, tag) = rest.split_once('-')?;
    let digits = |s: &str, radix: u32| !s.is_empty() && s.chars().all(|c| c.is_digit(radix));
    if !digits(pid, 10) || !digits(tag, 16) || pid.starts_with('0') {
        return None;
    }
    pid.parse().ok()
}

/// Unlinks the regular files and symlinks in `dir` (never following one), then removes
/// `dir`, which fails if anything else was in it.
fn remove_private_dir(dir: &Path) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_file() || kind.is_symlink() {
            match fs::remove_file(entry.path()) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
    }
    fs::remove_dir(dir)
}

fn create_private_dir(dir: &Path) -> io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
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

/// Refuses files that cannot be (complete) shared libraries before the dynamic loader
/// sees them: no ELF header, or an ELF file shorter than its own headers say. The dynamic
/// loader happily maps a library whose tail is missing, and the host would crash later.
/// Reads only the header and the program header table, at their offsets (the file's
/// position is left alone), from a file of `size` bytes.
#[cfg(unix)]
fn check_elf_header(f: &fs::File, size: u64) -> Result<(), LoadErrorKind> {
    use std::os::unix::fs::FileExt as _;
    if cfg!(target_os = "macos") {
        return Ok(());
    }
    let io_err = |source| LoadErrorKind::Io {
        action: "read the file",
        source,
    };
    let mut buf = [0u8; 64];
    let mut got = 0;
    while got < buf.len() {
        match f.read_at(&mut buf[got..], got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_err(e)),
        }
    }
    let header = &buf[..got];
    if header.len() < 4 || header[..4] != *b"\x7fELF" {
        return Err(LoadErrorKind::NotASharedLibrary { size });
    }
    let Some(elf) = Elf64::parse(header) else {
        // 32-bit or malformed: leave the verdict to the dynamic loader.
        return Ok(());
    };
    let mut needed = elf
        .shoff
        .saturating_add(u64::from(elf.shnum) * u64::from(elf.shentsize));
    let ph_end = elf
        .phoff
        .saturating_add(u64::from(elf.phnum) * u64::from(elf.phentsize));
    needed = needed.max(ph_end);
    if ph_end <= size && elf.phentsize >= 0x28 {
        // Within the file, which is at most max_file_size: a bounded allocation.
        let mut table = vec![0u8; usize::from(elf.phnum) * usize::from(elf.phentsize)];
        f.read_exact_at(&mut table, elf.phoff).map_err(io_err)?;
        for ph in table.chunks_exact(usize::from(elf.phentsize)) {
            let offset = elf.u64_at(ph, 0x08);
            let filesz = elf.u64_at(ph, 0x20);
            needed = needed.max(offset.saturating_add(filesz));
        }
    }
    if needed > size {
        return Err(LoadErrorKind::Truncated { size, needed });
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_elf_header(_f: &fs::File, _size: u64) -> Result<(), LoadErrorKind> {
    Ok(())
}

/// The fields of a 64-bit ELF header that say how long the file must be.
struct Elf64 {
    big_endian: bool,
    phoff: u64,
    shoff: u64,
    phentsize: u16,
    phnum: u16,
    shentsize: u16,
    shnum: u16,
}

impl Elf64 {
    fn parse(h: &[u8]) -> Option<Elf64> {
        if h.len() < 64 || h[4] != 2 {
            return None;
        }
        let big_endian = match h[5] {
            1 => false,
            2 => true,
            _ => return None,
        };
        let mut elf = Elf64 {
            big_endian,
            phoff: 0,
            shoff: 0,
            phentsize: 0,
            phnum: 0,
            shentsize: 0,
            shnum: 0,
        };
        elf.phoff = elf.u64_at(h, 0x20);
        elf.shoff = elf.u64_at(h, 0x28);
        elf.phentsize = elf.u16_at(h, 0x36);
        elf.phnum = elf.u16_at(h, 0x38);
        elf.shentsize = elf.u16_at(h, 0x3A);
        elf.shnum = elf.u16_at(h, 0x3C);
        Some(elf)
    }

    fn u64_at(&self, b: &[u8], at: usize) -> u64 {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(&b[at..at + 8]);
        if self.big_endian {
            u64::from_be_bytes(raw)
        } else {
            u64::from_le_bytes(raw)
        }
    }

    fn u16_at(&self, b: &[u8], at: usize) -> u16 {
        let raw = [b[at], b[at + 1]];
        if self.big_endian {
            u16::from_be_bytes(raw)
        } else {
            u16::from_le_bytes(raw)
        }
    }
}

/// Checks the growable tables (opaque to the root-module check) in whichever direction
/// fits: a plugin built against a newer API may have appended fields (abi_stable's own
/// rule), and one built against an older API may lack fields this host appended since.
/// Either way the fields both know must match exactly.
fn check_tables(theirs: TableLayouts, plugin_api: &str) -> Result<(), LoadErrorKind> {
    let ours = TableLayouts::CURRENT;
    for (ours, theirs) in [
        (ours.tool_vtable, theirs.tool_vtable),
        (ours.host_vtable, theirs.host_vtable),
    ] {
        let Err(newer_plugin) = check_layout_compatibility(ours, theirs) else {
            continue;
        };
        if check_layout_compatibility(theirs, ours).is_ok() {
            continue; // The plugin's table is a prefix of ours: built before fields were added.
        }
        let report = newer_plugin.to_string();
        tracing::debug!(%report, "full layout-check report of a plugin table");
        return Err(LoadErrorKind::IncompatibleLayout {
            plugin_api: plugin_api.to_owned(),
            host_api: API_VERSION.to_owned(),
            details: error_lines(&report),
        });
    }
    Ok(())
}

/// Maps abi_stable's errors to short, actionable ones. For a layout mismatch only the
/// `Error:` lines of its long report are kept.
fn library_error(e: LibraryError, plugin_api: Option<&str>) -> LoadErrorKind {
    let plugin_api = plugin_api.unwrap_or("unknown").to_owned();
    match e {
        LibraryError::OpenError { err, .. } => LoadErrorKind::Open {
            reason: err.to_string(),
        },
        LibraryError::GetSymbolError { .. } => LoadErrorKind::NoRootModule,
        LibraryError::IncompatibleVersionNumber { actual_version, .. } => {
            LoadErrorKind::IncompatibleVersion {
                plugin_api: actual_version.to_string(),
                host_api: API_VERSION.to_owned(),
            }
        }
        LibraryError::ParseVersionError(e) => LoadErrorKind::Other {
            reason: format!("its plugin-api version string is malformed: {e}"),
        },
        LibraryError::AbiInstability(report) => {
            let report = report.to_string();
            tracing::debug!(%report, "full layout-check report");
            LoadErrorKind::IncompatibleLayout {
                plugin_api,
                host_api: API_VERSION.to_owned(),
                details: error_lines(&report),
            }
        }
        LibraryError::InvalidAbiHeader(_) | LibraryError::InvalidCAbi { .. } => {
            LoadErrorKind::IncompatibleLayout {
                plugin_api,
                host_api: API_VERSION.to_owned(),
                details: vec!["built with an incompatible abi_stable or Rust C ABI".to_owned()],
            }
        }
        LibraryError::RootModule { err, .. } => LoadErrorKind::Plugin {
            reason: format!("its root module failed to initialize: {err}"),
        },
        other => LoadErrorKind::Other {
            reason: first_lines(&other.to_string(), 3),
        },
    }
}

/// The `Error:` lines of abi_stable's layout report (at most 8), each with the first line
/// of its `Expected:` and `Found:` parts, e.g. `unexpected field (expected
/// field_name:tools, found field_name:priority)`.
fn error_lines(report: &str) -> Vec<String> {
    struct Entry {
        what: String,
        expected: Option<String>,
        found: Option<String>,
    }
    let mut entries: Vec<Entry> = Vec::new();
    let mut lines = report.lines().map(str::trim);
    while let Some(line) = lines.next() {
        if let Some(what) = line.strip_prefix("Error:") {
            entries.push(Entry {
                what: what.trim().to_owned(),
                expected: None,
                found: None,
            });
        } else if let Some(entry) = entries.last_mut() {
            let slot = match line {
                "Expected:" => &mut entry.expected,
                "Found:" => &mut entry.found,
                _ => continue,
            };
            if slot.is_none() {
                *slot = lines.next().map(str::to_owned);
            }
        }
    }
    let mut out: Vec<String> = Vec::new();
    for e in entries {
        let text = match (e.expected, e.found) {
            (Some(x), Some(f)) => format!("{} (expected {x}, found {f})", e.what),
            _ => e.what,
        };
        if !text.is_empty() && !out.contains(&text) {
            out.push(text);
        }
    }
    if out.is_empty() {
        out.push(first_lines(report, 3));
    }
    out.truncate(8);
    out
}

fn first_lines(text: &str, n: usize) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .take(n)
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    #![allow(
        non_camel_case_types,
        reason = "abi_stable names prefix references `Type_Ref`"
    )]

    use abi_stable::StableAbi;

    use super::*;

    #[test]
    fn private_dir_names_are_matched_exactly() {
        assert_eq!(private_dir_pid("toolhost-123-1a2b0"), Some(123));
        for other in [
            "toolhost-123",
            "toolhost--1a",
            "toolhost-0123-1a",
            "toolhost-12a-1a",
            "toolhost-123-xyz",
            "toolhost-123-1a-2",
            "toolhost-123-",
            "xtoolhost-123-1a",
            "toolhost-99999999999-1a",
        ] {
            assert_eq!(private_dir_pid(other), None, "{other}");
        }
    }

    #[test]
    fn the_sweep_removes_only_dead_processes_own_folders_and_follows_no_link() {
        let base = tempfile::tempdir().expect("temp dir");
        let keep = tempfile::tempdir().expect("temp dir");
        let kept_file = keep.path().join("precious.so");
        fs::write(&kept_file, b"x").expect("write");
        // No such process: a pid above Linux's largest.
        let dead = base.path().join("toolhost-999999999-1a0");
        create_private_dir(&dead).expect("mkdir");
        fs::write(dead.join("plugin-0.so"), b"copy").expect("write");
        std::os::unix::fs::symlink(keep.path(), dead.join("link")).expect("symlink");
        // A link with a dead pid's name, to a folder that must survive.
        let link = base.path().join("toolhost-999999998-1a0");
        std::os::unix::fs::symlink(keep.path(), &link).expect("symlink");
        // A live process (this one) and a name that is not ours.
        let live = base
            .path()
            .join(format!("toolhost-{}-1a0", std::process::id()));
        create_private_dir(&live).expect("mkdir");
        let other = base.path().join("toolhost-999999999-zz");
        create_private_dir(&other).expect("mkdir");
        // A dead process's folder holding a folder is left alone.
        let nested = base.path().join("toolhost-999999997-1");
        fs::create_dir_all(nested.join("inner")).expect("mkdir");

        assert_eq!(sweep_dead_private_dirs(base.path()), 1);
        assert!(!dead.exists());
        assert!(fs::symlink_metadata(&link).is_ok(), "the link was removed");
        assert!(kept_file.exists(), "a link was followed");
        assert!(live.exists() && other.exists() && nested.exists());
    }

    /// A table whose first fields differ from the real tool vtable's.
    #[repr(C)]
    #[derive(StableAbi)]
    #[sabi(kind(Prefix(prefix_ref = Changed_Ref)))]
    struct Changed {
        drop: u8,
        #[sabi(last_prefix_field)]
        name: u16,
    }

    #[test]
    fn tables_as_compiled_pass_and_a_changed_table_is_refused() {
        assert!(check_tables(TableLayouts::CURRENT, API_VERSION).is_ok());
        let changed = TableLayouts {
            tool_vtable: <Changed_Ref as StableAbi>::LAYOUT,
            ..TableLayouts::CURRENT
        };
        let table: Changed_Ref =
            abi_stable::prefix_type::PrefixTypeTrait::leak_into_prefix(Changed {
                drop: 1,
                name: 2,
            });
        assert_eq!((table.drop(), table.name()), (1, 2));
        match check_tables(changed, "0.1.0") {
            Err(LoadErrorKind::IncompatibleLayout { details, .. }) => assert!(!details.is_empty()),
            other => panic!("expected a layout error, got {other:?}"),
        }
    }

    fn elf_verdict(bytes: &[u8]) -> Result<(), LoadErrorKind> {
        let mut f = tempfile::tempfile().expect("temp file");
        std::io::Write::write_all(&mut f, bytes).expect("write");
        check_elf_header(&f, bytes.len() as u64)
    }

    #[test]
    fn the_elf_check_takes_any_bytes_and_refuses_what_cannot_be_a_whole_library() {
        let me = fs::read(std::env::current_exe().expect("exe")).expect("read");
        assert!(elf_verdict(&me).is_ok(), "a whole ELF file passes");
        assert!(matches!(
            elf_verdict(&me[..me.len() / 2]),
            Err(LoadErrorKind::Truncated { .. })
        ));
        for bytes in [&b""[..], b"\x7fEL", b"#!/bin/sh\n", &[0u8; 100]] {
            assert!(matches!(
                elf_verdict(bytes),
                Err(LoadErrorKind::NotASharedLibrary { .. })
            ));
        }
        // A header whose tables lie far past the end, or overflow: refused, never read.
        let mut lying = me[..64].to_vec();
        lying[0x20..0x28].copy_from_slice(&u64::MAX.to_le_bytes());
        lying[0x28..0x30].copy_from_slice(&(u64::MAX - 3).to_le_bytes());
        assert!(matches!(
            elf_verdict(&lying),
            Err(LoadErrorKind::Truncated { .. })
        ));
        // Pseudo-random headers never panic.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            let mut h = b"\x7fELF\x02\x01".to_vec();
            while h.len() < 200 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                h.extend_from_slice(&x.to_le_bytes());
            }
            let _ = elf_verdict(&h);
        }
    }

    #[test]
    fn error_lines_keep_the_short_lines_with_expected_and_found() {
        let report = "header\nError:too many fields\nExpected:\n    8\nFound:\n    7\n\nmore\n";
        assert_eq!(
            error_lines(report),
            ["too many fields (expected 8, found 7)"]
        );
    }
}
